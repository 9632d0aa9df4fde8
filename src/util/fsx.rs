//! Crash-safe file writes (temp file in the same directory, fsync, rename over the target) and
//! the server's private file modes: everything it creates under its data, memory, log and
//! config directories is [`DIR_MODE`] / [`FILE_MODE`], so chats, memory, logs and caches are
//! the user's alone. (Explicit modes rather than a process umask, which the `exec` commands and
//! workspace writes would inherit.) Workspace files are not written through here.
//! Also a tree removal whose cost in stack and descriptors does not grow with the tree's depth.

use std::ffi::{CStr, CString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Mode of every directory the server creates for its own data.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of every file the server creates for its own data.
pub(crate) const FILE_MODE: u32 = 0o600;

/// `create_dir_all`, with each directory it creates made [`DIR_MODE`].
pub(crate) fn create_private_dirs(path: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, DIR_MODE);
    b.create(path)
}

/// `create_dir` (one level, must not exist), made [`DIR_MODE`].
pub(crate) fn create_private_dir(path: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, DIR_MODE);
    b.create(path)
}

/// Narrows an existing directory to [`DIR_MODE`] when group or others may enter it (an older
/// install made it 0755), so the files inside, whatever their modes, are out of their reach.
/// Best effort: a failure (not the owner) is logged.
pub(crate) fn tighten_dir(path: &Path) {
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
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = private_options().write(true).create(true).truncate(true).open(path)?;
    f.write_all(bytes)
}

/// `fs::copy` whose copy keeps only the owner's permission bits of the source (a script's
/// execute bit survives, group and other bits do not).
pub(crate) fn copy_private(from: &Path, to: &Path) -> io::Result<u64> {
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
pub(crate) fn make_tree_private(root: &Path) -> io::Result<()> {
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
pub(crate) fn private_options() -> OpenOptions {
    let mut opts = OpenOptions::new();
    #[cfg(unix)]
    opts.mode(FILE_MODE);
    opts
}

/// Writes `bytes` to `path` atomically via `.<name>.<pid>.<hex>.tmp` + rename, with fsync. The
/// file is [`FILE_MODE`]; missing parents are created [`DIR_MODE`]. With `private` (files
/// holding secrets) an existing parent directory is narrowed to 0700 as well.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], private: bool) -> io::Result<()> {
    replace(path, bytes, private, true)
}

/// Like [`write_atomic`] without fsync: never half-written after a process crash (the rename
/// is atomic), for per-turn files on the hot path; power-loss durability is the file system's.
pub(crate) fn write_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
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
pub(crate) fn overwrite_counter(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = private_options().write(true).create(true).truncate(false).open(path)?;
    let old = f.metadata()?.len();
    if old > bytes.len() as u64 {
        f.set_len(0)?;
    }
    f.write_all_at(bytes, 0)
}

/// Content of a write-ahead file longer than this is cut back when it is rewritten or blanked.
const WRITE_AHEAD_KEEP: u64 = 4096;

/// A write-ahead file [`write_ahead`] wrote, kept open until its work is done: blanking it
/// then needs no second open of its path.
#[derive(Debug)]
pub(crate) struct WriteAhead {
    file: File,
    len: u64,
}

impl WriteAhead {
    /// Blanks the file whose work is done (spaces over its content, cut to at most
    /// [`WRITE_AHEAD_KEEP`] bytes first) through the descriptor that wrote it: readers see
    /// nothing pending, and the next [`write_ahead`] reuses the file. If the file was removed
    /// meanwhile (its chat deleted), the write lands in the removed file, harmlessly.
    pub(crate) fn blank(self) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.len > WRITE_AHEAD_KEEP {
            self.file.set_len(WRITE_AHEAD_KEEP)?;
        }
        self.file.write_all_at(&vec![b' '; self.len.min(WRITE_AHEAD_KEEP) as usize], 0)
    }
}

/// Writes a write-ahead file (JSON whose readers treat blank or unparsable content as
/// absent) in place with one `pwrite` and no rename: an existing file keeps its inode and is
/// never truncated to zero. Both matter on ext4, where a file created and removed once per
/// turn costs more than every other write of the turn, and a file truncated to zero and
/// written again is flushed to disk when it is closed (`auto_da_alloc`). Older, longer content
/// is overwritten with spaces (JSON allows trailing whitespace), so the file holds either the
/// old text or the new one; only an old text more than [`WRITE_AHEAD_KEEP`] bytes longer is
/// cut first, which leaves nothing that parses until the write. A missing parent directory
/// is created [`DIR_MODE`]; a failed write removes the file.
pub(crate) fn write_ahead(path: &Path, bytes: &[u8]) -> io::Result<WriteAhead> {
    use std::os::unix::fs::FileExt;
    let f = open_creating_parent(path, private_options().write(true).create(true))?;
    let old = f.metadata()?.len();
    let len = bytes.len() as u64;
    let result = if old > len {
        let kept = old.min(len + WRITE_AHEAD_KEEP);
        let mut padded = Vec::with_capacity(kept as usize);
        padded.extend_from_slice(bytes);
        padded.resize(kept as usize, b' ');
        // Cut first when the old text is much longer: a prefix of JSON never parses.
        if old > kept {
            f.set_len(kept)?;
        }
        f.write_all_at(&padded, 0).map(|()| kept)
    } else {
        f.write_all_at(bytes, 0).map(|()| len)
    };
    match result {
        Ok(len) => Ok(WriteAhead { file: f, len }),
        Err(e) => {
            let _ = fs::remove_file(path);
            Err(e)
        }
    }
}

/// Opens `path` with `opts`; when its directory is missing, creates it [`DIR_MODE`] and tries
/// once more. The common case, an existing directory, costs no `mkdir`.
fn open_creating_parent(path: &Path, opts: &OpenOptions) -> io::Result<File> {
    match opts.open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = path.parent().ok_or(e)?;
            create_private_dirs(dir)?;
            opts.open(path)
        }
        other => other,
    }
}

/// Opens `path` for appending (created [`FILE_MODE`], its directory [`DIR_MODE`], when
/// missing), for [`append_to`].
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    open_creating_parent(path, private_options().create(true).append(true))
}

/// Appends `bytes` to `f`, which was `before` bytes long, in one `write` call (history
/// records of one turn). Once it returns, the data survives a crash of the process;
/// power-loss durability is left to the file system so a turn does not pay an fsync on the
/// hot path. A write that fails part-way (disk full) is cut back off, so the file never
/// keeps half a record.
pub(crate) fn append_to(f: &mut File, before: u64, bytes: &[u8]) -> io::Result<()> {
    f.write_all(bytes).inspect_err(|_| {
        // Best effort: if even the truncate fails, readers still skip the torn line.
        let _ = f.set_len(before);
    })
}

/// Flushes a directory entry after a rename (ignored where unsupported).
pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Opens one of the server's own files for reading without blocking: a FIFO or device put
/// where the file belongs is refused at once (`InvalidData`) rather than holding the thread
/// until someone writes to it. `None`: no such file. (`O_NONBLOCK` changes nothing for the
/// reads of a regular file.)
pub(crate) fn open_regular(path: &Path) -> io::Result<Option<File>> {
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} is not a regular file", path.display())));
    }
    Ok(Some(file))
}

/// Reads a file as UTF-8 text; a missing file is `Ok(None)`, anything but a regular file an
/// error ([`open_regular`]).
pub(crate) fn read_opt(path: &Path) -> io::Result<Option<String>> {
    let Some(mut file) = open_regular(path)? else { return Ok(None) };
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Removes the directory tree at `root` (a missing one is fine; a file or symlink there is
/// removed itself). `std::fs::remove_dir_all` recurses once per level and keeps a descriptor
/// open per level, so a 4,000-level tree overflows a 512 KiB thread stack. Here nothing
/// recurses and no link is followed: a directory is only ever opened relative to an open
/// `root` (`O_NOFOLLOW`), and one found below a child of `root` is first moved up to a fresh
/// name directly under `root` (`renameat` moves a link itself, never its target). At most
/// three descriptors are open at a time and no path is longer than `root` plus one name.
pub(crate) fn remove_tree(root: &Path) -> io::Result<()> {
    use nix::fcntl::renameat;
    use nix::unistd::UnlinkatFlags;
    match fs::symlink_metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return fs::remove_file(root),
        Ok(_) => {}
    }
    let top = open_dir(nix::fcntl::AT_FDCWD, root)?;
    let tag = super::rand::hex(6);
    let mut hoisted = 0u64;
    // Directories still to empty, each `root` itself (`None`) or a name directly under it.
    let mut pending: Vec<Option<CString>> = vec![None];
    while let Some(name) = pending.pop() {
        let dir = match &name {
            None => open_dir(top.as_fd(), c".")?,
            Some(n) => open_dir(top.as_fd(), n.as_c_str())?,
        };
        for (entry, is_dir) in list_dir(&dir)? {
            if !is_dir {
                gone_ok(unlink_at(&dir, &entry, UnlinkatFlags::NoRemoveDir))?;
            } else if name.is_none() {
                pending.push(Some(entry));
            } else {
                let to = CString::new(format!(".remove-{tag}-{hoisted}"))?;
                hoisted += 1;
                match renameat(&dir, entry.as_c_str(), &top, to.as_c_str()) {
                    Ok(()) => pending.push(Some(to)),
                    Err(e) => gone_ok(Err(e.into()))?,
                }
            }
        }
        drop(dir);
        if let Some(n) = &name {
            gone_ok(unlink_at(&top, n, UnlinkatFlags::RemoveDir))?;
        }
    }
    drop(top);
    gone_ok(fs::remove_dir(root))
}

/// A vanished entry is what removal wanted anyway.
fn gone_ok(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// `name` opened as a directory relative to `at`, never through a symlink.
fn open_dir<P: ?Sized + nix::NixPath>(at: BorrowedFd<'_>, name: &P) -> io::Result<OwnedFd> {
    use nix::fcntl::{openat, OFlag};
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(openat(at, name, flags, nix::sys::stat::Mode::empty())?)
}

/// `unlinkat(2)`: removes the file (or, with `RemoveDir`, the empty directory) `name` in `dir`.
fn unlink_at(dir: &OwnedFd, name: &CStr, flags: nix::unistd::UnlinkatFlags) -> io::Result<()> {
    Ok(nix::unistd::unlinkat(dir, name, flags)?)
}

/// The entries of the directory `dir` without `.` and `..`, each with whether it is a
/// directory itself (not a link to one).
fn list_dir(dir: &OwnedFd) -> io::Result<Vec<(CString, bool)>> {
    use nix::dir::{Dir, Type};
    use nix::fcntl::AtFlags;
    // The listing owns (and closes) a duplicate: `dir` stays open for the caller.
    let mut stream = Dir::from_fd(dir.try_clone()?)?;
    let mut out = Vec::new();
    // A read error ends the listing; whatever it left unlisted makes removing the directory
    // fail, so it is not lost silently.
    for entry in stream.iter().map_while(Result::ok) {
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            Some(Type::Directory) => true,
            // The file system did not say (DT_UNKNOWN): ask without following a link.
            None => nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
            Some(_) => false,
        };
        out.push((name.to_owned(), is_dir));
    }
    Ok(out)
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

    #[test]
    fn write_ahead_rewrites_in_place_and_blank_leaves_nothing_that_parses() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = std::env::temp_dir().join(format!("cc-fsx-{}", super::super::rand::hex(6)));
        let p = dir.join("sub").join(".pending.json");
        let parse = |p: &Path| serde_json::from_slice::<serde_json::Value>(&fs::read(p).unwrap()).ok();
        // The missing directory is created; the file is private.
        write_ahead(&p, br#"{"a":"a long first message"}"#).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let inode = fs::metadata(&p).unwrap().ino();
        // Shorter content: padded over the old text, still one JSON value.
        let written = write_ahead(&p, br#"{"b":1}"#).unwrap();
        assert_eq!(parse(&p), Some(serde_json::json!({"b": 1})));
        assert_eq!(fs::metadata(&p).unwrap().len(), br#"{"a":"a long first message"}"#.len() as u64);
        written.blank().unwrap();
        let text = fs::read(&p).unwrap();
        assert!(!text.is_empty() && text.iter().all(|b| *b == b' '), "{text:?}");
        assert_eq!(parse(&p), None);
        assert_eq!(fs::metadata(&p).unwrap().ino(), inode, "the file is reused, not replaced");
        // A long text is cut back when replaced by a short one, and when blanked.
        let long = format!("{{\"c\":\"{}\"}}", "x".repeat(100_000));
        write_ahead(&p, long.as_bytes()).unwrap();
        assert_eq!(parse(&p).unwrap()["c"].as_str().unwrap().len(), 100_000);
        write_ahead(&p, br#"{"d":2}"#).unwrap();
        assert_eq!(parse(&p), Some(serde_json::json!({"d": 2})));
        assert_eq!(fs::metadata(&p).unwrap().len(), 7 + WRITE_AHEAD_KEEP);
        let written = write_ahead(&p, long.as_bytes()).unwrap();
        written.blank().unwrap();
        assert_eq!(fs::metadata(&p).unwrap().len(), WRITE_AHEAD_KEEP);
        assert_eq!(parse(&p), None);
        // Blanking a file removed since it was written does not bring it back.
        let written = write_ahead(&p, br#"{"e":3}"#).unwrap();
        fs::remove_file(&p).unwrap();
        written.blank().unwrap();
        assert!(!p.exists());
        fs::remove_dir_all(dir).unwrap();
    }

    /// A chain of `depth` nested directories `d` under `root/top`, built bottom-up by renames
    /// so that no path is ever long; one file per level and a link out of the tree at the bottom.
    fn deep_chain(root: &Path, depth: usize, outside: &Path) {
        let mut below = root.join("level-0");
        fs::create_dir(&below).unwrap();
        std::os::unix::fs::symlink(outside, below.join("out")).unwrap();
        for i in 1..=depth {
            let here = root.join(format!("level-{i}"));
            fs::create_dir(&here).unwrap();
            fs::write(here.join("f"), b"x").unwrap();
            fs::rename(&below, here.join("d")).unwrap();
            below = here;
        }
        fs::rename(below, root.join("top")).unwrap();
    }

    /// 2,500 levels go without recursion on a 32 KiB stack (std's `remove_dir_all` overflows
    /// it), and the links in the tree are removed, not followed. Depth per stack byte is the
    /// point: any recursive walk spends at least 16 bytes a level (the return address, padded
    /// to the 16-byte call alignment of x86-64, or the saved frame pointer and link register
    /// of aarch64), and 2,500 x 16 = 40,000 bytes > 32,768, so a recursion of any frame size
    /// would overflow. More levels would only cost time: each costs a directory rename,
    /// milliseconds on a journaling file system.
    #[test]
    fn remove_tree_handles_any_depth_and_never_follows_links() {
        let base = std::env::temp_dir().join(format!("cc-fsx-rm-{}", super::super::rand::hex(6)));
        let outside = base.join("outside");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("keep"), b"keep").unwrap();
        let root = base.join("tree");
        fs::create_dir(&root).unwrap();
        deep_chain(&root, 2_500, &outside);
        fs::write(root.join("top-file"), b"x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link-to-outside")).unwrap();
        let r = root.clone();
        let removed = std::thread::Builder::new().stack_size(32 << 10).spawn(move || remove_tree(&r)).unwrap();
        removed.join().unwrap().unwrap();
        assert!(!root.exists());
        assert_eq!(fs::read(outside.join("keep")).unwrap(), b"keep");
        // Already gone, a plain file, a symlink (removed, target kept).
        remove_tree(&root).unwrap();
        fs::write(base.join("file"), b"x").unwrap();
        remove_tree(&base.join("file")).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("link")).unwrap();
        remove_tree(&base.join("link")).unwrap();
        assert!(!base.join("link").exists() && outside.join("keep").exists());
        remove_tree(&base).unwrap();
        assert!(!base.exists());
    }
}
