//! Workspace confinement for the file and search tools (docs/tools-and-mcp.md §2), run on the turn's
//! worker thread: path resolution (a symlink-aware `realpath` that also works for paths that do
//! not exist yet), the inside-the-workspace and Skill-root checks, race-resistant opens (every
//! component below the root entered with `openat(…, O_NOFOLLOW)`, then the descriptor's real
//! path re-checked) and the sorted, symlink-safe directory walk shared by `glob` and `grep`,
//! with the per-call [`Budget`] (deadline and the turn's cancel) both of them poll. The Skills
//! import writes an archive's files through the same confinement, on an `http-slow` thread.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::cancel::CancelToken;

/// Symlinks followed while resolving one path before giving up (Linux's own limit).
const MAX_SYMLINKS: usize = 40;
/// Directory entries a single walk may visit, so a huge tree cannot stall a turn.
pub(crate) const MAX_WALK_ENTRIES: usize = 200_000;
/// Directory depth a walk descends to.
const MAX_WALK_DEPTH: usize = 64;
/// Wall time one `glob` or `grep` call may take; then it reports what it found so far.
pub(crate) const SEARCH_TIME_LIMIT: Duration = Duration::from_secs(10);

/// The time and cancel bound of one search call, polled by the walk and by grep's line loop.
pub(crate) struct Budget {
    deadline: Instant,
    limit: Duration,
    cancel: CancelToken,
}

/// Why a search stopped before it was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Halt {
    /// The turn was cancelled: the caller drops its results.
    Cancelled,
    /// [`Budget`]'s deadline passed: the caller reports what it has, with a note.
    TimedOut,
}

impl Budget {
    /// A budget of `limit` from now, ended early by `cancel`.
    pub(crate) fn new(cancel: &CancelToken, limit: Duration) -> Self {
        Budget { deadline: Instant::now() + limit, limit, cancel: cancel.clone() }
    }

    /// `Err` once the turn is cancelled or the deadline has passed (cheap: one atomic load and
    /// a clock read).
    pub(crate) fn check(&self) -> Result<(), Halt> {
        if self.cancel.is_cancelled() {
            Err(Halt::Cancelled)
        } else if Instant::now() >= self.deadline {
            Err(Halt::TimedOut)
        } else {
            Ok(())
        }
    }

    /// The note a timed-out search appends to its partial results.
    pub(crate) fn timeout_note(&self) -> String {
        format!("search stopped after {}; results are partial", crate::util::text::fmt_secs(self.limit))
    }
}

/// The workspace root and the protected Skill roots of one turn, both fully resolved.
pub(crate) struct Workspace {
    root: PathBuf,
    protected: Vec<PathBuf>,
}

/// What a resolved walk entry is (symlinks are classified by their in-workspace target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Other,
}

/// One entry found by [`Workspace::walk`].
pub(crate) struct Entry {
    /// Path components relative to the walk's base, as (lossy) UTF-8 for pattern matching.
    pub(crate) rel: Vec<String>,
    /// The path as seen in the workspace (link path for symlinks).
    pub(crate) path: PathBuf,
    /// The symlink-free path to open (equal to `path` unless the entry is a symlink).
    pub(crate) real: PathBuf,
    pub(crate) kind: Kind,
}

/// Whether a walk should go on.
pub(crate) enum Flow {
    Continue,
    Stop,
}

/// Result of a walk: whether it hit [`MAX_WALK_ENTRIES`] or its [`Budget`] ran out.
pub(crate) struct WalkStats {
    pub(crate) truncated: bool,
    pub(crate) halted: Option<Halt>,
}

impl Workspace {
    pub(crate) fn from_paths(workspace: &Path, protected: &[PathBuf]) -> Result<Self, String> {
        let root = fs::canonicalize(workspace)
            .map_err(|e| format!("the working directory {} is not available ({})", workspace.display(), e.kind()))?;
        // Relative roots are taken from the process's working directory (as Python's realpath
        // does); a root that cannot be resolved stays protected under its literal path.
        let cwd = std::env::current_dir().and_then(fs::canonicalize).unwrap_or_else(|_| PathBuf::from("/"));
        let protected = protected.iter().map(|p| resolve_from(&cwd, p).unwrap_or_else(|_| p.clone())).collect();
        Ok(Workspace { root, protected })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a tool's `path` argument (relative to the workspace, or absolute) to a
    /// symlink-free absolute path inside the workspace; anything else is refused.
    pub(crate) fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        if raw.contains('\0') {
            return Err(format!("Path '{}' contains a NUL byte", raw.escape_debug()));
        }
        let resolved = resolve_from(&self.root, Path::new(raw)).map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                format!("Path '{raw}' could not be resolved: too many levels of symbolic links")
            } else {
                format!("Path '{raw}' could not be resolved: {}", e.kind())
            }
        })?;
        if self.contains(&resolved) {
            Ok(resolved)
        } else {
            Err(outside(raw))
        }
    }

    /// True when the symlink-free `path` lies inside the workspace (or is its root).
    pub(crate) fn contains(&self, path: &Path) -> bool {
        path.starts_with(&self.root)
    }

    /// True when the symlink-free `path` lies inside a protected Skill root.
    pub(crate) fn is_protected(&self, path: &Path) -> bool {
        self.protected.iter().any(|p| path.starts_with(p))
    }

    /// The workspace-relative display form of a path inside the workspace (`.` for the root).
    pub(crate) fn rel(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(r) if r.as_os_str().is_empty() => ".".to_string(),
            Ok(r) => r.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    /// Opens a resolved regular file for reading. Every component below the workspace root is
    /// opened with `openat(…, O_NOFOLLOW)`, so a symlink swapped in after resolution cannot lead
    /// the read outside. FIFOs and devices are refused (opened non-blocking, so a FIFO cannot
    /// hang the turn).
    pub(crate) fn open_read(&self, resolved: &Path, raw: &str) -> Result<File, String> {
        let (dir, name) = self.open_parent(resolved, raw, false)?;
        let f = open_at(&dir, &name, libc::O_RDONLY).map_err(|e| open_error(raw, &e))?;
        self.verify_fd(&f, raw)?;
        let meta = f.metadata().map_err(|e| format!("Reading {raw} failed: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{raw} is not a file"));
        }
        // Checked on the open descriptor (no window to swap the file): a hard link is not a
        // symlink, so O_NOFOLLOW and the /proc check both pass, yet its content may be a file
        // outside the workspace that someone linked in.
        if meta.nlink() > 1 {
            return Err(hard_linked(raw));
        }
        Ok(f)
    }

    /// Opens (with `create`, creating missing parents and the file) a resolved path for
    /// writing. Parents are created and entered one `openat`/`mkdirat` at a time with
    /// `O_NOFOLLOW`, so a symlink raced into any component cannot redirect the write (or a
    /// directory creation) outside the workspace or into a Skill root. Not truncated here.
    pub(crate) fn open_write(&self, resolved: &Path, raw: &str, create: bool) -> Result<File, String> {
        if resolved == self.root {
            return Err(format!("{raw} is a directory"));
        }
        self.check_writable(resolved, raw)?;
        let (dir, name) = self.open_parent(resolved, raw, create)?;
        if let Some(real_dir) = self.verify_fd(&dir, raw)? {
            self.check_writable(&real_dir.join(&name), raw)?;
        }
        let mut flags = libc::O_RDWR;
        if create {
            flags |= libc::O_CREAT;
        }
        let f = open_at(&dir, &name, flags).map_err(|e| open_error(raw, &e))?;
        let meta = f.metadata().map_err(|e| format!("Write failed: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{raw} is not a regular file"));
        }
        // Refused rather than replaced through a temp file + rename: the callers (write_file,
        // edit_file) read and write through this one descriptor, and an edit would first read
        // the linked content, which may be outside the workspace. Checked on the descriptor.
        if meta.nlink() > 1 {
            return Err(hard_linked(raw));
        }
        Ok(f)
    }

    /// Creates a new file (never an existing one) at a path below the root, parents made and
    /// entered without following symlinks. For extracting archives into a fresh directory.
    pub(crate) fn create_new(&self, resolved: &Path, raw: &str) -> Result<File, String> {
        let (dir, name) = self.open_parent(resolved, raw, true)?;
        self.verify_fd(&dir, raw)?;
        open_at(&dir, &name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL).map_err(|e| open_error(raw, &e))
    }

    /// The directory holding the workspace-relative `rel` (parents made with `create`), entered
    /// from the root one `openat(…, O_NOFOLLOW)` at a time and re-checked on its descriptor, and
    /// the final name: where a rewind writes, so a symlink raced into the path cannot redirect
    /// it outside the workspace or into a Skill root.
    pub(crate) fn parent_of(&self, rel: &str, create: bool) -> Result<(File, OsString), String> {
        let resolved = self.root.join(rel);
        self.check_writable(&resolved, rel)?;
        let (dir, name) = self.open_parent(&resolved, rel, create)?;
        if let Some(real_dir) = self.verify_fd(&dir, rel)? {
            self.check_writable(&real_dir.join(&name), rel)?;
        }
        Ok((dir, name))
    }

    /// Creates a directory and its parents below the root without following symlinks.
    pub(crate) fn create_dirs(&self, resolved: &Path, raw: &str) -> Result<(), String> {
        let (dir, name) = self.open_parent(resolved, raw, true)?;
        mkdir_at(&dir, &name, raw)?;
        let made = open_at(&dir, &name, libc::O_RDONLY | libc::O_DIRECTORY).map_err(|_| outside(raw))?;
        self.verify_fd(&made, raw).map(|_| ())
    }

    /// Opens a resolved directory for listing. Like [`Workspace::open_read`], every component
    /// below the root is entered with `O_NOFOLLOW`, so a symlink swapped in after resolution
    /// cannot turn the listing to a directory outside; list it with [`read_names`].
    pub(crate) fn open_dir(&self, resolved: &Path, raw: &str) -> Result<File, String> {
        let dir = if resolved == self.root {
            self.open_root()?
        } else {
            let (parent, name) = self.open_parent(resolved, raw, false)?;
            open_at(&parent, &name, libc::O_RDONLY | libc::O_DIRECTORY).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTDIR) => format!("{raw} is not a directory"),
                _ => open_error(raw, &e),
            })?
        };
        self.verify_fd(&dir, raw)?;
        Ok(dir)
    }

    fn open_root(&self) -> Result<File, String> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&self.root)
            .map_err(|e| format!("the working directory is not available ({e})"))
    }

    /// Opens the directory holding `resolved` by walking down from the workspace root without
    /// following symlinks; returns it with the final name.
    fn open_parent(&self, resolved: &Path, raw: &str, create: bool) -> Result<(File, OsString), String> {
        let rel = resolved.strip_prefix(&self.root).map_err(|_| outside(raw))?;
        let mut comps: Vec<OsString> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => comps.push(n.to_os_string()),
                // A resolved path has no `.`/`..`; refuse rather than guess.
                _ => return Err(outside(raw)),
            }
        }
        let Some(name) = comps.pop() else {
            return Err(format!("{raw} is a directory"));
        };
        let mut dir = self.open_root()?;
        for c in comps {
            if create {
                mkdir_at(&dir, &c, raw)?;
            }
            dir = open_at(&dir, &c, libc::O_RDONLY | libc::O_DIRECTORY).map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => outside(raw),
                Some(libc::ENOENT) => format!("File not found: {raw}"),
                _ => format!("Opening {raw} failed: {e}"),
            })?;
        }
        Ok((dir, name))
    }

    /// Refuses writes that land in a Skill root (the message names `agent_skill_manage`).
    pub(crate) fn check_writable(&self, resolved: &Path, raw: &str) -> Result<(), String> {
        if !self.contains(resolved) {
            return Err(outside(raw));
        }
        if self.is_protected(resolved) {
            return Err(format!(
                "'{raw}' is inside a protected Skill directory; file tools cannot change it. \
                 Use agent_skill_manage to create or update Skills."
            ));
        }
        Ok(())
    }

    /// Where an open descriptor really points (Linux `/proc/self/fd`), refused when outside the
    /// workspace. `Ok(None)` where `/proc` is unavailable: the O_NOFOLLOW open is then the guard.
    fn verify_fd(&self, f: &File, raw: &str) -> Result<Option<PathBuf>, String> {
        match fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())) {
            Ok(real) if self.contains(&real) => Ok(Some(real)),
            Ok(_) => Err(outside(raw)),
            Err(_) => Ok(None),
        }
    }

    /// Depth-first walk below `base` (a resolved directory inside the workspace), children in
    /// byte order of their names, so results are deterministic and come out sorted by path.
    /// Symlinks are never descended into; a symlink is reported (classified by its target) only
    /// when its target resolves inside the workspace, so nothing outside can leak. `budget` is
    /// checked before every entry.
    pub(crate) fn walk(&self, base: &Path, budget: &Budget, visit: &mut dyn FnMut(Entry) -> Flow) -> WalkStats {
        let mut walk = Walk { seen: 0, budget, halted: None };
        let mut rel = Vec::new();
        if let Ok(dir) = self.open_dir(base, "") {
            self.walk_dir(&dir, base, &mut rel, 0, &mut walk, visit);
        }
        WalkStats { truncated: walk.seen >= MAX_WALK_ENTRIES, halted: walk.halted }
    }

    /// Returns false when the walk must stop (visitor said so, the entry cap was hit or the
    /// budget ran out).
    fn walk_dir(
        &self,
        fd: &File,
        dir: &Path,
        rel: &mut Vec<String>,
        depth: usize,
        walk: &mut Walk,
        visit: &mut dyn FnMut(Entry) -> Flow,
    ) -> bool {
        let Ok(mut names) = read_names(fd) else {
            return true;
        };
        names.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (name, ft) in names {
            if let Err(halt) = walk.budget.check() {
                walk.halted = Some(halt);
                return false;
            }
            walk.seen += 1;
            if walk.seen > MAX_WALK_ENTRIES {
                walk.seen = MAX_WALK_ENTRIES;
                return false;
            }
            let path = dir.join(&name);
            let (real, kind, descend) = if ft.is_symlink() {
                match resolve_from(dir, Path::new(&name)) {
                    Ok(real) if self.contains(&real) => {
                        let kind = match fs::metadata(&real) {
                            Ok(m) if m.is_dir() => Kind::Dir,
                            Ok(m) if m.is_file() => Kind::File,
                            _ => Kind::Other,
                        };
                        (real, kind, false)
                    }
                    // Leads outside (or is broken): invisible to the tools.
                    _ => continue,
                }
            } else if ft.is_dir() {
                (path.clone(), Kind::Dir, true)
            } else if ft.is_file() {
                (path.clone(), Kind::File, false)
            } else {
                (path.clone(), Kind::Other, false)
            };
            rel.push(name.to_string_lossy().into_owned());
            let entry = Entry { rel: rel.clone(), path: path.clone(), real, kind };
            if let Flow::Stop = visit(entry) {
                rel.pop();
                return false;
            }
            // Entered through the parent's descriptor with O_NOFOLLOW: a directory swapped for a
            // symlink since it was listed is skipped, never followed.
            if descend && depth + 1 < MAX_WALK_DEPTH {
                if let Ok(sub) = open_at(fd, &name, libc::O_RDONLY | libc::O_DIRECTORY) {
                    if !self.walk_dir(&sub, &path, rel, depth + 1, walk, visit) {
                        rel.pop();
                        return false;
                    }
                }
            }
            rel.pop();
        }
        true
    }
}

/// State of one [`Workspace::walk`].
struct Walk<'b> {
    seen: usize,
    budget: &'b Budget,
    halted: Option<Halt>,
}

/// The contract's refusal text for a path outside the workspace.
pub(crate) fn outside(raw: &str) -> String {
    format!("Path '{raw}' is outside the working directory; access denied")
}

/// The refusal text for a regular file with more than one hard link (its other names may be
/// outside the workspace).
pub(crate) fn hard_linked(raw: &str) -> String {
    format!("Error: {raw} has other hard links; refusing to read or change it through the workspace")
}

fn cstring(name: &OsStr, raw: &str) -> Result<CString, String> {
    CString::new(name.as_bytes()).map_err(|_| format!("Path '{raw}' contains a NUL byte"))
}

/// `mkdirat(dir, name, 0755)`; an existing entry is fine (the following O_NOFOLLOW open
/// decides whether it is a real directory).
fn mkdir_at(dir: &File, name: &OsStr, raw: &str) -> Result<(), String> {
    let cname = cstring(name, raw)?;
    match nix::sys::stat::mkdirat(dir, cname.as_c_str(), nix::sys::stat::Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => Ok(()),
        Err(e) => Err(format!("Write failed: {}", io::Error::from(e))),
    }
}

/// The entries of an open directory with their types as listed (symlinks not followed). Read
/// through the descriptor's `/proc/self/fd` (or `/dev/fd`) link, which names the opened
/// directory itself however its path has changed since.
pub(crate) fn read_names(dir: &File) -> io::Result<Vec<(OsString, fs::FileType)>> {
    let fd = dir.as_raw_fd();
    let link = if cfg!(target_os = "linux") { format!("/proc/self/fd/{fd}") } else { format!("/dev/fd/{fd}") };
    let mut out = Vec::new();
    for e in fs::read_dir(link)? {
        let e = e?;
        if let Ok(ft) = e.file_type() {
            out.push((e.file_name(), ft));
        }
    }
    Ok(out)
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644)` as an owned File.
fn open_at(dir: &File, name: &OsStr, flags: libc::c_int) -> io::Result<File> {
    use nix::fcntl::OFlag;
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    Ok(File::from(nix::fcntl::openat(dir, name, flags, nix::sys::stat::Mode::from_bits_truncate(0o644))?))
}

fn open_error(raw: &str, e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => {
            format!("Path '{raw}' is a symbolic link that changed during the call; access denied")
        }
        Some(libc::ENOENT) => format!("File not found: {raw}"),
        Some(libc::EISDIR) => format!("{raw} is a directory"),
        _ => format!("Opening {raw} failed: {e}"),
    }
}

/// `realpath` without requiring existence (like Python's non-strict `os.path.realpath`):
/// resolves `raw` against the symlink-free directory `base`, following every symlink met on the
/// way (up to [`MAX_SYMLINKS`]) and treating `..` after resolution, so `link/..` means the link
/// target's parent, as the kernel does. Missing components are appended as they are.
pub(crate) fn resolve_from(base: &Path, raw: &Path) -> io::Result<PathBuf> {
    let mut cur = if raw.is_absolute() { PathBuf::from("/") } else { base.to_path_buf() };
    let mut queue: VecDeque<OsString> = VecDeque::new();
    push_components(&mut queue, raw, false);
    let mut links = 0usize;
    while let Some(c) = queue.pop_front() {
        if c == ".." {
            // `cur` never contains a symlink, so its lexical parent is its real parent.
            cur.pop();
            continue;
        }
        let next = cur.join(&c);
        match fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = fs::read_link(&next)?;
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push_components(&mut queue, &target, true);
            }
            Ok(_) => cur = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => cur = next,
            Err(e) => return Err(e),
        }
    }
    Ok(cur)
}

/// Adds a path's components (`.` dropped, `..` kept) to the back, or with `front` before the
/// queue's current contents in order.
fn push_components(queue: &mut VecDeque<OsString>, p: &Path, front: bool) {
    let comps: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsStr::new("..").to_os_string()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    if front {
        for c in comps.into_iter().rev() {
            queue.push_front(c);
        }
    } else {
        queue.extend(comps);
    }
}

/// True when the first 512 bytes contain a NUL (the contract's binary-file test).
pub(crate) fn looks_binary(head: &[u8]) -> bool {
    head.iter().take(512).any(|&b| b == 0)
}

/// Python's `str.splitlines()`: splits on \n, \r\n, \r, \v, \f, \x1c–\x1e, \x85, U+2028, U+2029;
/// no trailing empty line for a final terminator.
pub(crate) fn split_lines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let is_break = matches!(
            c,
            '\n' | '\r' | '\u{0b}' | '\u{0c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        );
        if is_break {
            out.push(&s[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r' {
                if let Some(&(_, '\n')) = it.peek() {
                    it.next();
                    end += 1;
                }
            }
            start = end;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tool::TurnCtx;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use crate::store::memory_files::MemoryFiles;
    use crate::util::cancel::CancelToken;

    /// A fresh temp tree: `<tmp>/ws` (workspace), `<tmp>/outside/secret.txt`, and
    /// `<tmp>/ws/skills/user` as a protected root. Removed on drop.
    pub(crate) struct Sandbox {
        pub(crate) tmp: PathBuf,
        pub(crate) ws: PathBuf,
        pub(crate) outside: PathBuf,
        pub(crate) ctx: TurnCtx,
    }

    impl Drop for Sandbox {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }

    static COUNTER: AtomicUsize = AtomicUsize::new(0);

    impl Sandbox {
        pub(crate) fn new() -> Sandbox {
            let tmp = std::env::temp_dir().join(format!(
                "cc-tools-{}-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::SeqCst),
                crate::util::rand::hex(4)
            ));
            let ws = tmp.join("ws");
            let outside = tmp.join("outside");
            fs::create_dir_all(ws.join("skills/user")).unwrap();
            fs::create_dir_all(&outside).unwrap();
            fs::write(outside.join("secret.txt"), "TOPSECRET\n").unwrap();
            let ws = fs::canonicalize(&ws).unwrap();
            let outside = fs::canonicalize(&outside).unwrap();
            let ctx = TurnCtx {
                chat_id: "t".into(),
                workspace: ws.clone(),
                protected: vec![ws.join("skills/user"), tmp.join("data/skills/agent")],
                memory: Arc::new(MemoryFiles::new(&tmp.join("memory"))),
                cancel: CancelToken::new(),
                state: Default::default(),
                confinement: Default::default(),
                checkpoint: None,
            };
            Sandbox { tmp, ws, outside, ctx }
        }

        pub(crate) fn write(&self, rel: &str, text: &str) {
            let p = self.ws.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }

        pub(crate) fn link(&self, rel: &str, target: &Path) {
            symlink(target, self.ws.join(rel)).unwrap();
        }

        /// Plants `rel` as a hard link to `<outside>/secret.txt` (same file system: both in tmp).
        pub(crate) fn hard_link_secret(&self, rel: &str) {
            fs::hard_link(self.outside.join("secret.txt"), self.ws.join(rel)).unwrap();
        }

        /// Runs `tool` with `args` (a JSON object) in this sandbox.
        pub(crate) fn call(&self, tool: &dyn crate::tool::Tool, args: serde_json::Value) -> crate::tool::ToolOutput {
            tool.run(args.as_object().expect("arguments are an object"), &self.ctx)
        }
    }

    /// A hard link to a file outside is neither read nor changed by the file tools (refused on
    /// the opened descriptor's link count); the outside file keeps its content.
    #[test]
    fn hard_links_are_refused_by_read_write_and_edit() {
        use crate::agent::tools::{edit_file::EditFile, read_file::ReadFile, write_file::WriteFile};
        use serde_json::json;
        let sb = Sandbox::new();
        sb.hard_link_secret("planted.txt");
        let refused = hard_linked("planted.txt");
        let read = sb.call(&ReadFile, json!({"path": "planted.txt"}));
        assert!(read.failed && !read.for_model.contains("TOPSECRET"), "{}", read.for_model);
        assert_eq!(read.for_model, refused);
        let write = sb.call(&WriteFile, json!({"path": "planted.txt", "content": "pwned"}));
        assert_eq!((write.failed, write.for_model.as_str()), (true, refused.as_str()));
        let edit = sb.call(&EditFile, json!({"path": "planted.txt", "old_string": "TOPSECRET", "new_string": "pwned"}));
        assert_eq!((edit.failed, edit.for_model.as_str()), (true, refused.as_str()));
        assert_eq!(fs::read_to_string(sb.outside.join("secret.txt")).unwrap(), "TOPSECRET\n");
        // Once the other link is gone the file is an ordinary workspace file again.
        fs::remove_file(sb.outside.join("secret.txt")).unwrap();
        assert!(sb.call(&ReadFile, json!({"path": "planted.txt"})).for_model.contains("TOPSECRET"));
        assert!(!sb.call(&WriteFile, json!({"path": "planted.txt", "content": "mine"})).failed);
    }

    #[test]
    fn resolves_inside_and_refuses_outside() {
        let sb = Sandbox::new();
        sb.write("a/b.txt", "x");
        let w = sb.ctx.open_workspace().unwrap();
        assert_eq!(w.resolve("a/b.txt").unwrap(), sb.ws.join("a/b.txt"));
        assert_eq!(w.resolve("a/../a/./b.txt").unwrap(), sb.ws.join("a/b.txt"));
        assert_eq!(w.resolve("new/dir/f").unwrap(), sb.ws.join("new/dir/f"));
        assert_eq!(w.resolve("").unwrap(), sb.ws);
        let abs_inside = sb.ws.join("a/b.txt").display().to_string();
        assert_eq!(w.resolve(&abs_inside).unwrap(), sb.ws.join("a/b.txt"));
        for bad in ["../outside/secret.txt", "a/../../x", "/etc/passwd", "missing/../../x"] {
            assert_eq!(w.resolve(bad).unwrap_err(), outside(bad), "{bad}");
        }
    }

    #[test]
    fn symlinks_are_followed_to_their_real_place() {
        let sb = Sandbox::new();
        sb.write("real/f.txt", "x");
        sb.link("in", &sb.ws.join("real"));
        sb.link("out", &sb.outside);
        sb.link("outfile", &sb.outside.join("secret.txt"));
        sb.link("rel_out", Path::new("../outside"));
        sb.link("dangling_out", &sb.outside.join("nope/deeper"));
        sb.link("loop", Path::new("loop"));
        let w = sb.ctx.open_workspace().unwrap();
        assert_eq!(w.resolve("in/f.txt").unwrap(), sb.ws.join("real/f.txt"));
        // `..` after a symlink is taken from the target, as the kernel does.
        assert_eq!(w.resolve("in/../real").unwrap(), sb.ws.join("real"));
        for bad in ["out/secret.txt", "outfile", "rel_out/secret.txt", "dangling_out", "out/../ws/../outside"] {
            assert_eq!(w.resolve(bad).unwrap_err(), outside(bad), "{bad}");
        }
        assert!(w.resolve("loop").unwrap_err().contains("symbolic links"));
    }

    #[test]
    fn protected_roots_block_writes_only() {
        let sb = Sandbox::new();
        let w = sb.ctx.open_workspace().unwrap();
        let p = w.resolve("skills/user/x/SKILL.md").unwrap();
        assert!(w.open_write(&p, "skills/user/x/SKILL.md", true).unwrap_err().contains("agent_skill_manage"));
        assert!(!sb.ws.join("skills/user/x").exists());
        let ok = w.resolve("notes/a.txt").unwrap();
        assert!(w.open_write(&ok, "notes/a.txt", true).is_ok());
    }

    /// Simulates a symlink swapped in after `resolve`: the opens themselves must refuse it.
    #[test]
    fn opens_refuse_symlinks_raced_in_after_resolution() {
        let sb = Sandbox::new();
        let w = sb.ctx.open_workspace().unwrap();
        sb.link("evil", &sb.outside.join("secret.txt"));
        sb.link("evildir", &sb.outside);
        let final_link = sb.ws.join("evil");
        let err = w.open_write(&final_link, "evil", true).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        let err = w.open_read(&final_link, "evil").unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        let through_dir = sb.ws.join("evildir/new.txt");
        assert_eq!(w.open_write(&through_dir, "evildir/new.txt", true).unwrap_err(), outside("evildir/new.txt"));
        assert!(!sb.outside.join("new.txt").exists());
        let through_dir = sb.ws.join("evildir/secret.txt");
        assert_eq!(w.open_read(&through_dir, "evildir/secret.txt").unwrap_err(), outside("evildir/secret.txt"));
        assert_eq!(fs::read_to_string(sb.outside.join("secret.txt")).unwrap(), "TOPSECRET\n");
    }

    /// A real race: while a thread keeps swapping `d` between a directory and a symlink to a
    /// directory outside (and `x.txt` between a file and a symlink to a secret outside), every
    /// file and search tool runs against them over and over. Nothing outside is ever read,
    /// listed, created or changed.
    #[test]
    fn symlinks_swapped_in_concurrently_never_escape() {
        use crate::agent::tools::{edit_file::EditFile, glob::Glob, grep::Grep, list_dir::ListDir};
        use crate::agent::tools::{read_file::ReadFile, write_file::WriteFile};
        use crate::tool::Tool;
        use serde_json::{json, Map, Value};
        use std::sync::atomic::AtomicBool;
        use std::time::{Duration, Instant};

        let sb = Sandbox::new();
        fs::write(sb.outside.join("f.txt"), "OUTSIDE-F\n").unwrap();
        fs::create_dir_all(sb.ws.join("d_dir")).unwrap();
        fs::write(sb.ws.join("d_dir/f.txt"), "inside\n").unwrap();
        fs::write(sb.ws.join("x_file"), "plain\n").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flipper = {
            let (ws, outside, stop) = (sb.ws.clone(), sb.outside.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut flips = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let _ = fs::rename(ws.join("d_dir"), ws.join("d"));
                    let _ = fs::rename(ws.join("x_file"), ws.join("x.txt"));
                    std::thread::yield_now();
                    let _ = fs::rename(ws.join("d"), ws.join("d_dir"));
                    let _ = fs::rename(ws.join("x.txt"), ws.join("x_file"));
                    let _ = symlink(&outside, ws.join("d"));
                    let _ = symlink(outside.join("secret.txt"), ws.join("x.txt"));
                    std::thread::yield_now();
                    let _ = fs::remove_file(ws.join("d"));
                    let _ = fs::remove_file(ws.join("x.txt"));
                    flips += 1;
                }
                flips
            })
        };
        let args = |v: Value| -> Map<String, Value> { v.as_object().cloned().unwrap() };
        let calls: Vec<(Box<dyn Tool>, Map<String, Value>)> = vec![
            (Box::new(WriteFile), args(json!({"path": "d/f.txt", "content": "PWNED"}))),
            (Box::new(WriteFile), args(json!({"path": "d/new.txt", "content": "PWNED"}))),
            (Box::new(WriteFile), args(json!({"path": "x.txt", "content": "PWNED"}))),
            (Box::new(EditFile), args(json!({"path": "d/f.txt", "old_string": "OUTSIDE-F", "new_string": "PWNED"}))),
            (Box::new(EditFile), args(json!({"path": "x.txt", "old_string": "TOPSECRET", "new_string": "PWNED"}))),
            (Box::new(ReadFile), args(json!({"path": "d/secret.txt"}))),
            (Box::new(ReadFile), args(json!({"path": "x.txt"}))),
            (Box::new(ListDir), args(json!({"path": "d"}))),
            (Box::new(Glob), args(json!({"pattern": "**/*"}))),
            (Box::new(Grep), args(json!({"pattern": "TOP.?SECRET|OUTSIDE.F"}))),
            (Box::new(Grep), args(json!({"pattern": "TOP.?SECRET|OUTSIDE.F", "path": "d"}))),
        ];
        let deadline = Instant::now() + Duration::from_millis(1500);
        let mut runs = 0;
        while Instant::now() < deadline {
            for (tool, a) in &calls {
                let out = tool.run(a, &sb.ctx);
                // Listings must not show outside names (error messages may echo the asked path).
                let lists = matches!(tool.name(), "list_dir" | "glob" | "grep");
                for text in [&out.for_model, out.preview_text()] {
                    let leaked = text.contains("TOPSECRET")
                        || text.contains("OUTSIDE-F")
                        || (lists && text.contains("secret.txt"));
                    assert!(!leaked, "{} leaked the outside: {text}", tool.name());
                }
                runs += 1;
            }
        }
        stop.store(true, Ordering::SeqCst);
        let flips = flipper.join().unwrap();
        assert!(flips > 10 && runs > 100, "the race barely ran: {flips} flips, {runs} tool runs");
        let mut outside: Vec<String> =
            fs::read_dir(&sb.outside).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        outside.sort();
        assert_eq!(outside, ["f.txt", "secret.txt"]);
        assert_eq!(fs::read_to_string(sb.outside.join("secret.txt")).unwrap(), "TOPSECRET\n");
        assert_eq!(fs::read_to_string(sb.outside.join("f.txt")).unwrap(), "OUTSIDE-F\n");
    }

    #[test]
    fn walk_is_sorted_and_skips_outside_links() {
        let sb = Sandbox::new();
        sb.write("b.txt", "");
        sb.write("a/z.txt", "");
        sb.write("a.txt", "");
        sb.link("out", &sb.outside);
        sb.link("outfile", &sb.outside.join("secret.txt"));
        sb.link("inlink", &sb.ws.join("b.txt"));
        let w = sb.ctx.open_workspace().unwrap();
        let mut seen = Vec::new();
        w.walk(&sb.ws, &Budget::new(&sb.ctx.cancel, SEARCH_TIME_LIMIT), &mut |e| {
            seen.push((e.rel.join("/"), e.kind));
            Flow::Continue
        });
        let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "a/z.txt", "a.txt", "b.txt", "inlink", "skills", "skills/user"]);
        assert_eq!(seen[4].1, Kind::File);
    }

    #[test]
    fn walk_stops_when_the_budget_runs_out() {
        let sb = Sandbox::new();
        sb.write("a/b.txt", "");
        let w = sb.ctx.open_workspace().unwrap();
        let mut seen = 0;
        let stats = w.walk(&sb.ws, &Budget::new(&sb.ctx.cancel, Duration::ZERO), &mut |_| {
            seen += 1;
            Flow::Continue
        });
        assert_eq!((seen, stats.halted), (0, Some(Halt::TimedOut)));
        sb.ctx.cancel.cancel();
        let stats = w.walk(&sb.ws, &Budget::new(&sb.ctx.cancel, SEARCH_TIME_LIMIT), &mut |_| {
            seen += 1;
            Flow::Continue
        });
        assert_eq!((seen, stats.halted), (0, Some(Halt::Cancelled)));
    }

    #[test]
    fn splits_lines_like_python() {
        assert_eq!(split_lines("a\nb\r\nc\rd\u{2028}e\n"), ["a", "b", "c", "d", "e"]);
        assert_eq!(split_lines(""), Vec::<&str>::new());
        assert_eq!(split_lines("\n\n"), ["", ""]);
    }
}
