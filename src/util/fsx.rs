//! Crash-safe file writes: temp file in the same directory, fsync, rename over the target.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Writes `bytes` to `path` atomically via `.<name>.<pid>.<hex>.tmp` + rename, with fsync.
/// With `private`, the temp file is created 0600 and the parent directory chmod 0700 (best effort).
pub fn write_atomic(path: &Path, bytes: &[u8], private: bool) -> io::Result<()> {
    replace(path, bytes, private, true)
}

/// Like [`write_atomic`] without fsync: never half-written after a process crash (the rename
/// is atomic), for per-turn files on the hot path; power-loss durability is the file system's.
pub fn write_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(path, bytes, false, false)
}

fn replace(path: &Path, bytes: &[u8], private: bool, sync: bool) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::other("path has no parent"))?;
    fs::create_dir_all(dir)?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), super::rand::hex(16)));
    let result = (|| {
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(if private { 0o600 } else { 0o644 });
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        drop(f);
        fs::rename(&tmp, path)?;
        if sync {
            sync_dir(dir);
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Overwrites a small counter file (`.cursor`) in place with one positioned write, without the
/// temp file and rename (an inode created and one evicted per turn). A value at least as long
/// as the old one replaces it in that single write, so a process crash leaves the old or the
/// new value, never an empty file (the original truncates first); a shorter one is truncated
/// to first.
pub fn overwrite_counter(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
    let old = f.metadata()?.len();
    if old > bytes.len() as u64 {
        f.set_len(0)?;
    }
    f.write_all_at(bytes, 0)
}

/// Creates or replaces a small file with one `write` call and no rename: a process crash
/// leaves it absent, empty or whole, and a failed write removes it. For write-ahead files
/// whose readers treat empty or unparsable content as absent.
pub fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
    f.write_all(bytes).inspect_err(|_| {
        let _ = fs::remove_file(path);
    })
}

/// Appends `bytes` to `path` in one `write` call (history records of one turn). Once it
/// returns, the data survives a crash of the process; power-loss durability is left to the
/// file system so a turn does not pay an fsync on the hot path. A write that fails part-way
/// (disk full) is cut back off, so the file never keeps half a record.
pub fn append(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    let before = f.metadata()?.len();
    f.write_all(bytes).inspect_err(|_| {
        // Best effort: if even the truncate fails, readers still skip the torn line.
        let _ = f.set_len(before);
    })
}

/// Flushes a directory entry after a rename (ignored where unsupported).
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Reads a file as UTF-8 text; a missing file is `Ok(None)`.
pub fn read_opt(path: &Path) -> io::Result<Option<String>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("cc-fsx-{}", super::super::rand::hex(6)));
        let p = dir.join("a.json");
        write_atomic(&p, b"one", true).unwrap();
        write_atomic(&p, b"two", true).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        }
        fs::remove_dir_all(dir).unwrap();
    }
}
