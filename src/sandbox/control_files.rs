//! Version-control control files of a project (`.git/config`, `.git/hooks/`, `.git/info/`,
//! `.hg/hgrc`): what a later escalated `git status` or `hg` reads and runs with the owner's
//! rights. Landlock cannot keep a path under a writable root read-only, and splitting the
//! workspace around `.git` would take the workspace's top level from every command, so `exec`
//! takes a [`Snapshot`] before each confined call and, once the call and everything it started
//! are gone, puts back whatever the call changed ([`Snapshot::restore`]). A control directory
//! the call created or replaced (a `git init`, a `.git` swapped for a symlink) is not touched
//! (nothing is written through a path a command controls) but is reported like a change. Each
//! chat's reported paths are kept in a [`ChangeLog`] that the approval dialog lists
//! (`control_files`). Escalated commands run with git's hooks and fsmonitor off
//! ([`escalated_git_env`]).
//!
//! Runs on the turn's worker, in `exec`, before the spawn and after the reap. Bounded: at most
//! [`MAX_ENTRIES`] entries per control directory, [`MAX_FILE_BYTES`] per file and
//! [`MAX_TOTAL_BYTES`] per snapshot are copied; what is past a bound is compared by metadata and
//! reported, not restored.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::util::sync;

/// Control directories of a project, relative to its root.
const PARENTS: &[&str] = &[".git", ".hg"];
/// Control files inside them.
const FILES: &[&str] = &[".git/config", ".hg/hgrc"];
/// Control directories inside them, every entry of which is a control file.
const DIRS: &[&str] = &[".git/hooks", ".git/info"];
/// Entries of one control directory copied.
const MAX_ENTRIES: usize = 256;
/// Bytes of one control file copied.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Bytes copied per snapshot.
const MAX_TOTAL_BYTES: u64 = 8 << 20;
/// Paths kept per chat, and chats kept, in a [`ChangeLog`].
const MAX_PATHS_PER_CHAT: usize = 64;
const MAX_CHATS: usize = 1024;

/// One path as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Missing,
    File {
        mode: u32,
        bytes: Vec<u8>,
    },
    Link(PathBuf),
    /// A directory (identity only), or a file past the bounds: compared by metadata, never
    /// restored.
    Other {
        dev: u64,
        ino: u64,
        size: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
        mode: u32,
    },
}

/// The control files of one project before a confined call.
#[derive(Debug)]
pub(crate) struct Snapshot {
    root: PathBuf,
    /// Each control directory's identity (`Other`) or `Missing`.
    parents: Vec<(&'static str, Node)>,
    files: Vec<(&'static str, Node)>,
    /// Each control directory of [`DIRS`]: its identity and its entries by name.
    dirs: Vec<(&'static str, Node, Entries)>,
}

/// A control directory's entries by name.
type Entries = Vec<(String, Node)>;

fn meta_node(m: &fs::Metadata) -> Node {
    Node::Other {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
        mode: m.mode(),
    }
}

/// `path` as it is now; regular files within the budget are copied.
fn read_node(path: &Path, budget: &mut u64) -> Node {
    let Ok(m) = fs::symlink_metadata(path) else { return Node::Missing };
    let ft = m.file_type();
    if ft.is_symlink() {
        return fs::read_link(path).map(Node::Link).unwrap_or_else(|_| meta_node(&m));
    }
    if ft.is_file() && m.size() <= MAX_FILE_BYTES && m.size() <= *budget {
        // Opened without following a link raced in since the lstat.
        let read =
            fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).and_then(
                |mut f| {
                    let mut bytes = Vec::with_capacity(m.size() as usize);
                    io::Read::read_to_end(&mut io::Read::take(&mut f, MAX_FILE_BYTES + 1), &mut bytes)?;
                    Ok(bytes)
                },
            );
        if let Ok(bytes) = read {
            if bytes.len() as u64 <= MAX_FILE_BYTES {
                *budget = budget.saturating_sub(bytes.len() as u64);
                return Node::File { mode: m.mode() & 0o7777, bytes };
            }
        }
    }
    meta_node(&m)
}

/// Whether `path` is still the directory `was` named (same device and inode, not a link).
fn same_dir(path: &Path, was: &Node) -> bool {
    match (fs::symlink_metadata(path), was) {
        (Ok(m), Node::Other { dev, ino, .. }) => m.is_dir() && m.dev() == *dev && m.ino() == *ino,
        _ => false,
    }
}

fn dir_identity(path: &Path) -> Node {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => meta_node(&m),
        Ok(m) => meta_node(&m),
        Err(_) => Node::Missing,
    }
}

/// The entries of a control directory (sorted, bounded).
fn read_entries(dir: &Path, budget: &mut u64) -> Entries {
    let Ok(rd) = fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> =
        rd.flatten().take(MAX_ENTRIES).filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    names.into_iter().map(|n| (n.clone(), read_node(&dir.join(&n), budget))).collect()
}

impl Snapshot {
    /// The control files under `root` now.
    pub(crate) fn take(root: &Path) -> Snapshot {
        let mut budget = MAX_TOTAL_BYTES;
        let parents: Vec<(&'static str, Node)> = PARENTS.iter().map(|p| (*p, dir_identity(&root.join(p)))).collect();
        let present = |rel: &str| parents.iter().any(|(p, n)| rel.starts_with(p) && !matches!(n, Node::Missing));
        let files = FILES.iter().filter(|f| present(f)).map(|f| (*f, read_node(&root.join(f), &mut budget))).collect();
        let dirs = DIRS
            .iter()
            .filter(|d| present(d))
            .map(|d| {
                let path = root.join(d);
                let id = dir_identity(&path);
                let entries = if matches!(&id, Node::Other { mode, .. } if mode & libc::S_IFMT == libc::S_IFDIR) {
                    read_entries(&path, &mut budget)
                } else {
                    Vec::new()
                };
                (*d, id, entries)
            })
            .collect();
        Snapshot { root: root.to_path_buf(), parents, files, dirs }
    }

    /// Compares the control files with the snapshot and puts back what changed, where the
    /// control directory holding it is still the one snapshotted. Returns every path found
    /// changed (relative to the root), restored or not; empty when nothing changed.
    pub(crate) fn restore(&self) -> Vec<String> {
        let mut changed = Vec::new();
        let mut budget = MAX_TOTAL_BYTES;
        for (parent, was) in &self.parents {
            let path = self.root.join(parent);
            match was {
                Node::Missing => {
                    // Made by the call (`git init`): nothing to put back; its control files
                    // are the chat's doing, and reported.
                    if fs::symlink_metadata(&path).is_ok() {
                        changed.push((*parent).to_string());
                    }
                    continue;
                }
                _ if !same_dir(&path, was) => {
                    changed.push((*parent).to_string());
                    continue;
                }
                _ => {}
            }
            for (rel, was) in self.files.iter().filter(|(f, _)| f.starts_with(parent)) {
                let p = self.root.join(rel);
                if read_node(&p, &mut budget) != *was {
                    changed.push((*rel).to_string());
                    put_back(&p, was);
                }
            }
            for (rel, id, entries) in self.dirs.iter().filter(|(d, _, _)| d.starts_with(parent)) {
                let p = self.root.join(rel);
                let now = dir_identity(&p);
                let was_dir = matches!(id, Node::Other { mode, .. } if mode & libc::S_IFMT == libc::S_IFDIR);
                if !was_dir {
                    if now != *id {
                        changed.push((*rel).to_string());
                        put_back(&p, id);
                    }
                    continue;
                }
                if !same_dir(&p, id) {
                    // Replaced (by a link, a file or another directory): the original goes
                    // back whole.
                    changed.push((*rel).to_string());
                    let _ = crate::util::fsx::remove_tree(&p);
                    if fs::create_dir(&p).is_ok() {
                        if let Node::Other { mode, .. } = id {
                            let _ = fs::set_permissions(&p, fs::Permissions::from_mode(mode & 0o7777));
                        }
                        for (name, node) in entries {
                            put_back(&p.join(name), node);
                        }
                    }
                    continue;
                }
                let current = read_entries(&p, &mut budget);
                for (name, node) in &current {
                    let before = entries.iter().find(|(n, _)| n == name).map(|(_, n)| n);
                    if before != Some(node) {
                        changed.push(format!("{rel}/{name}"));
                        put_back(&p.join(name), before.unwrap_or(&Node::Missing));
                    }
                }
                for (name, node) in entries {
                    if !current.iter().any(|(n, _)| n == name) {
                        changed.push(format!("{rel}/{name}"));
                        put_back(&p.join(name), node);
                    }
                }
            }
        }
        changed
    }
}

/// Makes `path` what `was` says, without following a link at `path` (its parent is a control
/// directory checked to be the snapshotted one). What cannot be restored (past the bounds) is
/// left alone.
fn put_back(path: &Path, was: &Node) {
    match was {
        Node::Other { .. } => {}
        Node::Missing => {
            let _ = crate::util::fsx::remove_tree(path);
        }
        Node::Link(target) => {
            let _ = crate::util::fsx::remove_tree(path);
            let _ = std::os::unix::fs::symlink(target, path);
        }
        Node::File { mode, bytes } => {
            let _ = crate::util::fsx::remove_tree(path);
            let written = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(*mode)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .and_then(|mut f| {
                    f.write_all(bytes)?;
                    // The umask may have narrowed the mode.
                    f.set_permissions(fs::Permissions::from_mode(*mode))
                });
            if let Err(e) = written {
                log::warn!("event=control_files.restore_failed error_kind={:?}", e.kind());
            }
        }
    }
}

/// The control files each chat's confined commands changed, for the approval dialog.
#[derive(Default)]
pub(crate) struct ChangeLog {
    inner: Mutex<Changes>,
}

/// Paths by chat, and the chats in the order they were first recorded (the oldest goes first).
type Changes = (HashMap<String, BTreeSet<String>>, VecDeque<String>);

impl ChangeLog {
    pub(crate) fn record(&self, chat_id: &str, paths: &[String]) {
        if paths.is_empty() {
            return;
        }
        let mut g = sync::lock(&self.inner);
        let (by_chat, order) = &mut *g;
        if !by_chat.contains_key(chat_id) {
            if order.len() >= MAX_CHATS {
                if let Some(old) = order.pop_front() {
                    by_chat.remove(&old);
                }
            }
            order.push_back(chat_id.to_string());
        }
        let set = by_chat.entry(chat_id.to_string()).or_default();
        for p in paths {
            if set.len() < MAX_PATHS_PER_CHAT {
                set.insert(p.clone());
            }
        }
    }

    pub(crate) fn for_chat(&self, chat_id: &str) -> Vec<String> {
        sync::lock(&self.inner).0.get(chat_id).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }
}

/// Git settings an escalated command runs with, whatever the repository's config says: no
/// hooks (`core.hooksPath` pointing nowhere) and no fsmonitor (a command git would start on
/// every status). Added after any the server's environment holds (`GIT_CONFIG_COUNT`,
/// git 2.31+, the scope of `git -c`, which wins over the repository's files).
pub(crate) fn escalated_git_env(cmd: &mut Command) {
    let base: usize = std::env::var("GIT_CONFIG_COUNT").ok().and_then(|n| n.parse().ok()).unwrap_or(0).min(1000);
    let pairs = [("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false")];
    for (i, (k, v)) in pairs.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{}", base + i), k).env(format!("GIT_CONFIG_VALUE_{}", base + i), v);
    }
    cmd.env("GIT_CONFIG_COUNT", (base + pairs.len()).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("cc-control-{}", crate::util::rand::hex(6)));
        fs::create_dir_all(d.join(".git/hooks")).unwrap();
        fs::create_dir_all(d.join(".git/info")).unwrap();
        fs::write(d.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        fs::write(d.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        fs::write(d.join(".git/info/exclude"), "# x\n").unwrap();
        d
    }

    #[test]
    fn changes_are_put_back_and_reported() {
        let d = tmp();
        let snap = Snapshot::take(&d);
        assert!(snap.restore().is_empty(), "nothing changed");
        fs::write(d.join(".git/config"), "[core]\n\tfsmonitor = touch /tmp/x\n").unwrap();
        fs::write(d.join(".git/hooks/post-checkout"), "#!/bin/sh\ntouch /tmp/x\n").unwrap();
        fs::remove_file(d.join(".git/info/exclude")).unwrap();
        fs::write(d.join("work.txt"), "ordinary work").unwrap();
        let changed = snap.restore();
        assert_eq!(changed, [".git/config", ".git/hooks/post-checkout", ".git/info/exclude"]);
        assert_eq!(fs::read_to_string(d.join(".git/config")).unwrap(), "[core]\n\tbare = false\n");
        assert!(!d.join(".git/hooks/post-checkout").exists());
        assert_eq!(fs::read_to_string(d.join(".git/info/exclude")).unwrap(), "# x\n");
        assert!(d.join("work.txt").exists(), "other files are the command's to change");
        assert!(snap.restore().is_empty());

        // A hooks directory swapped for a link to elsewhere goes back whole; the target is
        // never written.
        let elsewhere = d.join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::write(elsewhere.join("pre-push"), "#!/bin/sh\n").unwrap();
        fs::remove_dir_all(d.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, d.join(".git/hooks")).unwrap();
        // A config turned into a link.
        fs::remove_file(d.join(".git/config")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("cfg"), d.join(".git/config")).unwrap();
        let changed = snap.restore();
        assert_eq!(changed, [".git/config", ".git/hooks"]);
        assert!(fs::symlink_metadata(d.join(".git/hooks")).unwrap().is_dir());
        assert!(d.join(".git/hooks/pre-commit.sample").is_file());
        assert!(fs::symlink_metadata(d.join(".git/config")).unwrap().is_file());
        assert!(!elsewhere.join("cfg").exists());
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 1);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_replaced_or_new_control_directory_is_reported_not_written_through() {
        let d = tmp();
        let snap = Snapshot::take(&d);
        let outside = d.join("outside");
        fs::create_dir(&outside).unwrap();
        fs::rename(d.join(".git"), d.join("old-git")).unwrap();
        std::os::unix::fs::symlink(&outside, d.join(".git")).unwrap();
        assert_eq!(snap.restore(), [".git"]);
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "nothing written through the link");

        let fresh = std::env::temp_dir().join(format!("cc-control-{}", crate::util::rand::hex(6)));
        fs::create_dir_all(&fresh).unwrap();
        let snap = Snapshot::take(&fresh);
        fs::create_dir_all(fresh.join(".git/hooks")).unwrap();
        fs::write(fresh.join(".git/config"), "x").unwrap();
        assert_eq!(snap.restore(), [".git"]);
        assert!(fresh.join(".git/config").exists(), "a new repository is the command's");
        let _ = fs::remove_dir_all(&d);
        let _ = fs::remove_dir_all(&fresh);
    }

    #[test]
    fn the_change_log_is_per_chat_and_bounded() {
        let log = ChangeLog::default();
        log.record("a", &[".git/config".into()]);
        log.record("a", &[".git/config".into(), ".git/hooks/x".into()]);
        assert_eq!(log.for_chat("a"), [".git/config", ".git/hooks/x"]);
        assert!(log.for_chat("b").is_empty());
        let many: Vec<String> = (0..100).map(|i| format!(".git/hooks/{i}")).collect();
        log.record("c", &many);
        assert_eq!(log.for_chat("c").len(), MAX_PATHS_PER_CHAT);
    }
}
