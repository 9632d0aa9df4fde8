//! `MemoryFiles`: the memory root's global files — SOUL.md (persona, read per turn, never
//! written), MEMORY.md (long-term memory) and its numbered snapshots, and `.dream_cursor`.
//! One process-wide lock serialises every MEMORY.md read-modify-write (save_memory vs Dream).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::util::{fsx, time};

pub struct MemoryFiles {
    root: PathBuf,
    lock: Mutex<()>,
}

/// Result of `append_fact`.
#[derive(Debug, PartialEq, Eq)]
pub enum Append {
    Saved,
    AlreadyPresent,
    Empty,
}

impl MemoryFiles {
    pub fn new(root: &Path) -> Self {
        MemoryFiles { root: root.to_path_buf(), lock: Mutex::new(()) }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// SOUL.md text, `None` when missing or blank.
    pub fn soul(&self) -> Option<String> {
        read_nonblank(&self.root.join("SOUL.md"))
    }

    /// MEMORY.md text, `None` when missing or blank.
    pub fn memory(&self) -> Option<String> {
        read_nonblank(&self.root.join("MEMORY.md"))
    }

    /// save_memory: appends `[YYYY-MM-DD HH:MM] <fact>` unless the fact already occurs.
    pub fn append_fact(&self, fact: &str) -> io::Result<Append> {
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

    /// Replaces MEMORY.md with `text` if it still equals `expected` (Dream's guarded write),
    /// keeping the previous content as `.memory-snapshots/MEMORY.<n>.md`. Returns false when
    /// MEMORY.md changed underneath (the caller retries next run).
    pub fn replace_memory(&self, expected: &str, text: &str) -> io::Result<bool> {
        let _g = self.guard();
        let path = self.root.join("MEMORY.md");
        let current = fsx::read_opt(&path)?.unwrap_or_default();
        if current.trim() != expected.trim() {
            return Ok(false);
        }
        if !current.trim().is_empty() {
            let dir = self.root.join(".memory-snapshots");
            fsx::create_private_dirs(&dir)?;
            let n = self.snapshots()?.last().map(|(n, _)| n + 1).unwrap_or(1);
            fsx::write_atomic(&dir.join(format!("MEMORY.{n}.md")), current.as_bytes(), false)?;
        }
        fsx::write_atomic(&path, format!("{}\n", text.trim()).as_bytes(), false)?;
        Ok(true)
    }

    /// Numbered MEMORY.md snapshots, oldest first.
    pub fn snapshots(&self) -> io::Result<Vec<(u64, PathBuf)>> {
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
    pub fn dream_cursors(&self) -> BTreeMap<String, u64> {
        fsx::read_opt(&self.root.join(".dream_cursor"))
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_str::<BTreeMap<String, serde_json::Value>>(&t).ok())
            .map(|m| m.into_iter().filter_map(|(k, v)| v.as_u64().map(|c| (k, c))).collect())
            .unwrap_or_default()
    }

    pub fn write_dream_cursors(&self, cursors: &BTreeMap<String, u64>) -> io::Result<()> {
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
}
