//! `MemoryFiles`: the memory root's global files — SOUL.md (persona, read per turn, never
//! written), MEMORY.md (long-term memory) and its numbered snapshots, and `.dream_cursor`.
//! One process-wide lock serialises every MEMORY.md read-modify-write (save_memory, Dream, and
//! the HTTP editor's hash-checked writes and restores, which run on the `http` thread).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::util::hash::sha256_hex;
use crate::util::{fsx, sync, time};

/// Largest MEMORY.md or SOUL.md the HTTP editor writes (both go into every system prompt).
pub(crate) const MAX_FILE_BYTES: usize = 64 * 1024;

/// Snapshots listed by [`MemoryFiles::snapshot_list`] (newest first).
pub(crate) const MAX_LISTED_SNAPSHOTS: usize = 200;

/// One of the two editable files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Memory,
    Soul,
}

impl Which {
    pub(crate) fn parse(s: &str) -> Option<Which> {
        match s {
            "memory" => Some(Which::Memory),
            "soul" => Some(Which::Soul),
            _ => None,
        }
    }

    pub(crate) fn key(self) -> &'static str {
        match self {
            Which::Memory => "memory",
            Which::Soul => "soul",
        }
    }

    pub(crate) fn file_name(self) -> &'static str {
        match self {
            Which::Memory => "MEMORY.md",
            Which::Soul => "SOUL.md",
        }
    }
}

/// A file as read: its text (missing = empty) and the sha256 of those bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileText {
    pub(crate) content: String,
    pub(crate) hash: String,
}

/// One MEMORY.md snapshot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SnapshotInfo {
    pub(crate) id: u64,
    pub(crate) created_at: f64,
    pub(crate) size: u64,
}

/// Why an editor write was refused.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// The file no longer has the hash the editor read.
    Changed,
    TooLarge,
    Io(io::Error),
}

impl From<io::Error> for WriteError {
    fn from(e: io::Error) -> Self {
        WriteError::Io(e)
    }
}

pub struct MemoryFiles {
    root: PathBuf,
    lock: Mutex<()>,
}

/// Result of `append_fact`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Append {
    Saved,
    AlreadyPresent,
    Empty,
}

impl MemoryFiles {
    pub fn new(root: &Path) -> Self {
        MemoryFiles { root: root.to_path_buf(), lock: Mutex::new(()) }
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        sync::lock(&self.lock)
    }

    /// SOUL.md text, `None` when missing or blank.
    pub(crate) fn soul(&self) -> Option<String> {
        read_nonblank(&self.root.join("SOUL.md"))
    }

    /// MEMORY.md text, `None` when missing or blank.
    pub(crate) fn memory(&self) -> Option<String> {
        read_nonblank(&self.root.join("MEMORY.md"))
    }

    /// save_memory: appends `[YYYY-MM-DD HH:MM] <fact>` unless the fact already occurs.
    pub(crate) fn append_fact(&self, fact: &str) -> io::Result<Append> {
        let fact = fact.trim();
        if fact.is_empty() {
            return Ok(Append::Empty);
        }
        let _g = self.guard();
        let path = self.root.join("MEMORY.md");
        let current = fsx::read_opt(&path)?.unwrap_or_default();
        if current.contains(fact) {
            return Ok(Append::AlreadyPresent);
        }
        let line = format!("[{}] {fact}\n", time::minute_stamp());
        let trimmed = current.trim_end_matches(['\n', '\r']);
        let next = if trimmed.is_empty() { line } else { format!("{trimmed}\n{line}") };
        fsx::write_atomic(&path, next.as_bytes(), false)?;
        Ok(Append::Saved)
    }

    /// `which` as the editor sees it.
    pub(crate) fn read(&self, which: Which) -> io::Result<FileText> {
        let content = fsx::read_opt(&self.root.join(which.file_name()))?.unwrap_or_default();
        let hash = sha256_hex(content.as_bytes());
        Ok(FileText { content, hash })
    }

    /// The editor's write: refused when `expected_hash` is given and the file changed since it
    /// was read. MEMORY.md keeps its previous content as a snapshot first (so an edit is
    /// undoable); returns that snapshot's id.
    pub(crate) fn write(
        &self,
        which: Which,
        content: &str,
        expected_hash: Option<&str>,
    ) -> Result<Option<u64>, WriteError> {
        if content.len() > MAX_FILE_BYTES {
            return Err(WriteError::TooLarge);
        }
        let _g = self.guard();
        let path = self.root.join(which.file_name());
        let current = fsx::read_opt(&path)?.unwrap_or_default();
        if expected_hash.is_some_and(|h| !h.is_empty() && h != sha256_hex(current.as_bytes())) {
            return Err(WriteError::Changed);
        }
        let snap = match which {
            Which::Memory => self.snapshot_locked(&current)?,
            Which::Soul => None,
        };
        fsx::write_atomic(&path, content.as_bytes(), false)?;
        Ok(snap)
    }

    /// Puts snapshot `id` back as MEMORY.md, snapshotting the current file first (so a restore
    /// is undoable too). `Ok(None)` when there is no such snapshot.
    pub(crate) fn restore(&self, id: u64) -> io::Result<Option<Option<u64>>> {
        let _g = self.guard();
        let Some(old) = fsx::read_opt(&self.snapshot_path(id))? else { return Ok(None) };
        let path = self.root.join("MEMORY.md");
        let current = fsx::read_opt(&path)?.unwrap_or_default();
        let snap = self.snapshot_locked(&current)?;
        fsx::write_atomic(&path, old.as_bytes(), false)?;
        Ok(Some(snap))
    }

    /// Snapshot `id`'s text, `None` when absent.
    pub(crate) fn snapshot_text(&self, id: u64) -> io::Result<Option<String>> {
        fsx::read_opt(&self.snapshot_path(id))
    }

    /// The newest [`MAX_LISTED_SNAPSHOTS`] snapshots, newest first, and how many there are.
    pub(crate) fn snapshot_list(&self) -> io::Result<(Vec<SnapshotInfo>, usize)> {
        let all = self.snapshots()?;
        let total = all.len();
        let list = all
            .into_iter()
            .rev()
            .take(MAX_LISTED_SNAPSHOTS)
            .map(|(id, path)| {
                let meta = fs::metadata(&path).ok();
                let created_at = meta
                    .as_ref()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0.0, |d| d.as_secs_f64());
                SnapshotInfo { id, created_at, size: meta.map_or(0, |m| m.len()) }
            })
            .collect();
        Ok((list, total))
    }

    /// The path of snapshot `id`: built from the number alone, never from request text.
    fn snapshot_path(&self, id: u64) -> PathBuf {
        self.root.join(".memory-snapshots").join(format!("MEMORY.{id}.md"))
    }

    /// Keeps `current` as the next numbered snapshot (nothing for a blank file). Caller holds
    /// the lock.
    fn snapshot_locked(&self, current: &str) -> io::Result<Option<u64>> {
        if current.trim().is_empty() {
            return Ok(None);
        }
        let dir = self.root.join(".memory-snapshots");
        fsx::create_private_dirs(&dir)?;
        let n = self.snapshots()?.last().map(|(n, _)| n + 1).unwrap_or(1);
        fsx::write_atomic(&self.snapshot_path(n), current.as_bytes(), false)?;
        Ok(Some(n))
    }

    /// Replaces MEMORY.md with `text` if it still equals `expected` (Dream's guarded write),
    /// keeping the previous content as `.memory-snapshots/MEMORY.<n>.md`. Returns false when
    /// MEMORY.md changed underneath (the caller retries next run).
    pub(crate) fn replace_memory(&self, expected: &str, text: &str) -> io::Result<bool> {
        let _g = self.guard();
        let path = self.root.join("MEMORY.md");
        let current = fsx::read_opt(&path)?.unwrap_or_default();
        if current.trim() != expected.trim() {
            return Ok(false);
        }
        self.snapshot_locked(&current)?;
        fsx::write_atomic(&path, format!("{}\n", text.trim()).as_bytes(), false)?;
        Ok(true)
    }

    /// Numbered MEMORY.md snapshots, oldest first.
    pub(crate) fn snapshots(&self) -> io::Result<Vec<(u64, PathBuf)>> {
        let dir = self.root.join(".memory-snapshots");
        let mut out = Vec::new();
        match fs::read_dir(&dir) {
            Ok(rd) => {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if let Some(n) =
                        name.strip_prefix("MEMORY.").and_then(|r| r.strip_suffix(".md")).and_then(|n| n.parse().ok())
                    {
                        out.push((n, e.path()));
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        out.sort();
        Ok(out)
    }

    /// `.dream_cursor`: `{chat_id: last processed cursor}`; missing or corrupt -> empty.
    pub(crate) fn dream_cursors(&self) -> BTreeMap<String, u64> {
        fsx::read_opt(&self.root.join(".dream_cursor"))
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_str::<BTreeMap<String, serde_json::Value>>(&t).ok())
            .map(|m| m.into_iter().filter_map(|(k, v)| v.as_u64().map(|c| (k, c))).collect())
            .unwrap_or_default()
    }

    pub(crate) fn write_dream_cursors(&self, cursors: &BTreeMap<String, u64>) -> io::Result<()> {
        let text = serde_json::to_string(cursors).map_err(io::Error::other)?;
        fsx::write_atomic(&self.root.join(".dream_cursor"), text.as_bytes(), false)
    }
}

fn read_nonblank(path: &Path) -> Option<String> {
    fsx::read_opt(path).ok().flatten().filter(|t| !t.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("cc-mem-{}", crate::util::rand::hex(6)));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn append_fact_dedupes_and_formats() {
        let d = temp();
        let m = MemoryFiles::new(&d);
        assert_eq!(m.append_fact("  ").unwrap(), Append::Empty);
        assert_eq!(m.append_fact("likes tea").unwrap(), Append::Saved);
        assert_eq!(m.append_fact("likes tea").unwrap(), Append::AlreadyPresent);
        m.append_fact("lives in Paris").unwrap();
        let text = m.memory().unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with('[') && lines[0].ends_with("] likes tea"));
        assert!(text.ends_with("lives in Paris\n"));
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn replace_keeps_numbered_snapshots() {
        let d = temp();
        let m = MemoryFiles::new(&d);
        m.append_fact("a").unwrap();
        let cur = m.memory().unwrap();
        assert!(m.replace_memory(&cur, "# Memory\n- a").unwrap());
        assert!(!m.replace_memory("stale", "x").unwrap());
        assert_eq!(m.snapshots().unwrap().len(), 1);
        assert_eq!(m.memory().unwrap(), "# Memory\n- a\n");
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn editor_writes_check_the_hash_and_restores_are_undoable() {
        let d = temp();
        let m = MemoryFiles::new(&d);
        let empty = m.read(Which::Memory).unwrap();
        assert_eq!(empty.content, "");
        assert_eq!(m.write(Which::Memory, "one\n", Some(&empty.hash)).unwrap(), None);
        assert!(matches!(m.write(Which::Memory, "x", Some(&empty.hash)), Err(WriteError::Changed)));
        let one = m.read(Which::Memory).unwrap();
        assert_eq!(m.write(Which::Memory, "two\n", Some(&one.hash)).unwrap(), Some(1));
        assert_eq!(m.restore(1).unwrap(), Some(Some(2)));
        assert_eq!(m.read(Which::Memory).unwrap().content, "one\n");
        assert_eq!(m.snapshot_text(2).unwrap().as_deref(), Some("two\n"));
        assert_eq!(m.restore(9).unwrap(), None);
        let (list, total) = m.snapshot_list().unwrap();
        assert_eq!((list.iter().map(|s| s.id).collect::<Vec<_>>(), total), (vec![2, 1], 2));
        assert!(matches!(m.write(Which::Soul, &"x".repeat(MAX_FILE_BYTES + 1), None), Err(WriteError::TooLarge)));
        assert_eq!(m.write(Which::Soul, "persona", None).unwrap(), None);
        assert_eq!(m.soul().as_deref(), Some("persona"));
        fs::remove_dir_all(d).unwrap();
    }
}
