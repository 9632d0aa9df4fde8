//! What the checkpoints know of one workspace path: its metadata ([`Stat`], compared to see
//! whether something changed), the recorded [`State`] a rewind restores or expects, and the
//! metadata scan of the whole workspace that the `exec` hook runs before and after a command.
//! Pure functions on the calling thread (a turn's worker, or the HTTP thread for a rewind).

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Files larger than this are listed as not rewindable instead of being copied.
pub(crate) const FILE_CAP: u64 = 8 << 20;
/// Entries one scan visits; past it the rest of the workspace is not watched (the scan says so).
pub(crate) const MAX_SCAN_ENTRIES: usize = 200_000;
/// Directory depth a scan descends to.
const MAX_DEPTH: usize = 64;

/// The metadata that tells whether a file changed without reading it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i64,
    pub(crate) ctime_ns: i64,
}

/// What kind of entry a path is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink(String),
    Other,
}

/// One path's metadata as a scan or an `lstat` saw it. Directories carry no [`Meta`]: their
/// times change with every entry made inside, which is not a change of the directory itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub(crate) kind: Kind,
    pub(crate) mode: u32,
    pub(crate) meta: Meta,
}

impl Stat {
    fn of(m: &fs::Metadata, path: &Path) -> Stat {
        let ft = m.file_type();
        let mode = m.mode() & 0o7777;
        let meta = Meta {
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        };
        if ft.is_dir() {
            Stat { kind: Kind::Dir, mode, meta: Meta::default() }
        } else if ft.is_file() {
            Stat { kind: Kind::File, mode, meta }
        } else if ft.is_symlink() {
            let target = fs::read_link(path).map(|t| t.to_string_lossy().into_owned()).unwrap_or_default();
            Stat { kind: Kind::Symlink(target), mode: 0, meta: Meta::default() }
        } else {
            Stat { kind: Kind::Other, mode, meta }
        }
    }

    pub(crate) fn is_file(&self) -> bool {
        self.kind == Kind::File
    }
}

/// `lstat` of `path`; `None` when nothing is there.
pub(crate) fn lstat(path: &Path) -> io::Result<Option<Stat>> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(Stat::of(&m, path))),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A path's state as a checkpoint records it: what a rewind restores (`before`) or expects to
/// find (`after`). `blob` is the SHA-256 of the content in the blob store; `None` when no copy
/// was kept (over [`FILE_CAP`], or the store was full).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum State {
    Absent,
    File {
        mode: u32,
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
        #[serde(default)]
        meta: Meta,
    },
    Dir {
        mode: u32,
    },
    Symlink {
        target: String,
    },
    Other,
}

impl State {
    pub(crate) fn of(stat: Option<&Stat>, blob: Option<String>) -> State {
        match stat {
            None => State::Absent,
            Some(s) => match &s.kind {
                Kind::File => State::File { mode: s.mode, size: s.meta.size, blob, meta: s.meta },
                Kind::Dir => State::Dir { mode: s.mode },
                Kind::Symlink(t) => State::Symlink { target: t.clone() },
                Kind::Other => State::Other,
            },
        }
    }

    pub(crate) fn blob(&self) -> Option<&str> {
        match self {
            State::File { blob, .. } => blob.as_deref(),
            _ => None,
        }
    }

    /// Two recorded states describe the same thing: same kind and mode, and for files the same
    /// metadata or the same kept content.
    pub(crate) fn same(&self, other: &State) -> bool {
        match (self, other) {
            (
                State::File { mode: m1, size: s1, blob: b1, meta: t1 },
                State::File { mode: m2, size: s2, blob: b2, meta: t2 },
            ) => m1 == m2 && s1 == s2 && (t1 == t2 || (b1.is_some() && b1 == b2)),
            _ => self == other,
        }
    }

    /// Whether `current` (what is on disk now at `path`) is still this recorded state. A file
    /// whose metadata moved is read and compared by content when a copy was kept.
    pub(crate) fn matches(&self, current: Option<&Stat>, path: &Path) -> bool {
        self.matches_by(current, || read_capped(path).ok().flatten().map(|bytes| crate::util::hash::sha256_hex(&bytes)))
    }

    /// [`State::matches`] with the content's hash from `hash`, asked only when the metadata
    /// moved and a copy was kept.
    pub(crate) fn matches_by(&self, current: Option<&Stat>, hash: impl FnOnce() -> Option<String>) -> bool {
        match (self, current) {
            (State::Absent, None) => true,
            (State::File { mode, size, blob, meta }, Some(s)) if s.is_file() => {
                if s.mode != *mode || s.meta.size != *size {
                    return false;
                }
                if s.meta == *meta {
                    return true;
                }
                blob.as_ref().is_some_and(|b| hash().as_ref() == Some(b))
            }
            (State::Dir { mode }, Some(s)) => s.kind == Kind::Dir && s.mode == *mode,
            (State::Symlink { target }, Some(s)) => s.kind == Kind::Symlink(target.clone()),
            (State::Other, Some(s)) => s.kind == Kind::Other,
            _ => false,
        }
    }
}

/// A regular file's bytes, opened without following a symlink; `None` past [`FILE_CAP`].
pub(crate) fn read_capped(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    // A hard-linked file's other names may be outside the workspace: never copied (the file
    // tools refuse it too), so never shown in a preview.
    if m.len() > FILE_CAP || m.nlink() > 1 {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    f.take(FILE_CAP + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= FILE_CAP).then_some(bytes))
}

/// Every path below `root` (workspace-relative, `/`-separated) with its [`Stat`]; `skip` holds
/// absolute paths not watched (the server's own data directories, the Skill roots). Names that
/// are not UTF-8 are left out. The flag says the scan stopped at [`MAX_SCAN_ENTRIES`].
pub fn scan(root: &Path, skip: &[PathBuf]) -> (HashMap<String, Stat>, bool) {
    let mut out = HashMap::new();
    let mut truncated = false;
    walk(root, "", skip, 0, &mut out, &mut truncated);
    (out, truncated)
}

/// [`scan`] of the subtree at the workspace-relative directory `rel` (its entries, not itself).
pub(crate) fn scan_under(root: &Path, rel: &str, skip: &[PathBuf]) -> HashMap<String, Stat> {
    let mut out = HashMap::new();
    let mut truncated = false;
    walk(&root.join(rel), rel, skip, rel.matches('/').count() + 1, &mut out, &mut truncated);
    out
}

fn walk(dir: &Path, rel: &str, skip: &[PathBuf], depth: usize, out: &mut HashMap<String, Stat>, truncated: &mut bool) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        if out.len() >= MAX_SCAN_ENTRIES {
            *truncated = true;
            return;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if skip.contains(&path) {
            continue;
        }
        // `DirEntry::metadata` does not follow symlinks (fstatat on the directory's descriptor).
        let Ok(m) = entry.metadata() else { continue };
        let stat = Stat::of(&m, &path);
        let child = if rel.is_empty() { name.to_string() } else { format!("{rel}/{name}") };
        let is_dir = stat.kind == Kind::Dir;
        out.insert(child.clone(), stat);
        if is_dir && depth + 1 < MAX_DEPTH {
            walk(&path, &child, skip, depth + 1, out, truncated);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_sees_files_dirs_links_and_skips() {
        let d = std::env::temp_dir().join(format!("cc-cp-scan-{}", crate::util::rand::hex(6)));
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::create_dir_all(d.join("data")).unwrap();
        fs::write(d.join("a/b/f.txt"), "x").unwrap();
        fs::write(d.join("data/secret"), "x").unwrap();
        std::os::unix::fs::symlink("a/b/f.txt", d.join("l")).unwrap();
        let (s, truncated) = scan(&d, &[d.join("data")]);
        assert!(!truncated);
        let mut keys: Vec<&String> = s.keys().collect();
        keys.sort();
        assert_eq!(keys, ["a", "a/b", "a/b/f.txt", "l"]);
        assert_eq!(s["l"].kind, Kind::Symlink("a/b/f.txt".into()));
        let f = State::of(Some(&s["a/b/f.txt"]), Some(crate::util::hash::sha256_hex(b"x")));
        assert!(f.matches(lstat(&d.join("a/b/f.txt")).unwrap().as_ref(), &d.join("a/b/f.txt")));
        fs::write(d.join("a/b/f.txt"), "y").unwrap();
        assert!(!f.matches(lstat(&d.join("a/b/f.txt")).unwrap().as_ref(), &d.join("a/b/f.txt")));
        assert!(State::Absent.matches(lstat(&d.join("nope/x")).unwrap().as_ref(), &d.join("nope/x")));
        let _ = fs::remove_dir_all(d);
    }
}
