//! Crash-safe file writes (temp file in the same directory, fsync, rename over the target) and
//! the server's private file modes: everything it creates under its data, memory, log and
//! config directories is [`DIR_MODE`] / [`FILE_MODE`], so chats, memory, logs and caches are
//! the user's alone. (Explicit modes rather than a process umask, which the `exec` commands and
//! workspace writes would inherit.) Workspace files are not written through here.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Mode of every directory the server creates for its own data.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the server creates for its own data.
pub const FILE_MODE: u32 = 0o600;

/// `create_dir_all`, with each directory it creates made [`DIR_MODE`].
pub fn create_private_dirs(path: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, DIR_MODE);
    b.create(path)
}

/// `create_dir` (one level, must not exist), made [`DIR_MODE`].
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, DIR_MODE);
    b.create(path)
}

/// Narrows an existing directory to [`DIR_MODE`] when group or others may enter it (an older
/// install made it 0755), so the files inside, whatever their modes, are out of their reach.
/// Best effort: a failure (not the owner) is logged.
pub fn tighten_dir(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = fs::metadata(path) else { return };
        if meta.is_dir() && meta.permissions().mode() & 0o077 != 0 {
            match fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE)) {
                Ok(()) => log::info!("event=fs.dir_tightened path={:?} mode=700", path.display().to_string()),
                Err(e) => log::warn!("event=fs.dir_tighten_failed path={:?} error=\"{e}\"", path.display().to_string()),
            }
        }
    }
}

/// Creates (or truncates) `path` with [`FILE_MODE`] and writes `bytes`; for files written once
/// into a fresh directory (Skill packages).
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = private_options().write(true).create(true).truncate(true).open(path)?;
    f.write_all(bytes)
}

/// `fs::copy` whose copy keeps only the owner's permission bits of the source (a script's
/// execute bit survives, group and other bits do not).
pub fn copy_private(from: &Path, to: &Path) -> io::Result<u64> {
    let mut src = File::open(from)?;
    let mut dst = private_options().write(true).create(true).truncate(true).open(to)?;
    let n = io::copy(&mut src, &mut dst)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = src.metadata()?.permissions().mode() & 0o700;
        dst.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    Ok(n)
}

/// Narrows a tree the server just wrote with other modes (a ZIP extracted through the
/// workspace's confined writes): directories become [`DIR_MODE`], files keep only their
/// owner's bits. Symlinks are not followed.
pub fn make_tree_private(root: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = fs::symlink_metadata(root)?;
        if meta.is_dir() {
            fs::set_permissions(root, fs::Permissions::from_mode(DIR_MODE))?;
            for e in fs::read_dir(root)? {
                make_tree_private(&e?.path())?;
            }
        } else if meta.is_file() {
            fs::set_permissions(root, fs::Permissions::from_mode(meta.permissions().mode() & 0o700))?;
        }
    }
    Ok(())
}

/// `OpenOptions` whose created files get [`FILE_MODE`].
fn private_options() -> OpenOptions {
    let mut opts = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, FILE_MODE);
    opts
}

/// Writes `bytes` to `path` atomically via `.<name>.<pid>.<hex>.tmp` + rename, with fsync. The
/// file is [`FILE_MODE`]; missing parents are created [`DIR_MODE`]. With `private` (files
/// holding secrets) an existing parent directory is narrowed to 0700 as well.
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
    create_private_dirs(dir)?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), super::rand::hex(16)));
    let result = (|| {
        let mut f = private_options().write(true).create_new(true).open(&tmp)?;
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
    let f = private_options().write(true).create(true).truncate(false).open(path)?;
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
    let mut f = private_options().write(true).create(true).truncate(true).open(path)?;
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
        create_private_dirs(dir)?;
    }
    let mut f = private_options().create(true).append(true).open(path)?;
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
