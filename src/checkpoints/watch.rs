//! The inotify dirty set that spares `exec` its full workspace scans: every workspace directory
//! is watched, and the events queued since the last look name the paths that may have changed.
//! No thread: the queue is drained (non-blocking) under the store's lock by the hook that needs
//! it. The kernel queues an event before the write that caused it returns, so after a command
//! has exited its changes are all in the queue. When the set cannot be trusted (the kernel's
//! queue overflowed, a watch could not be added) the caller falls back to a full scan.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

pub(crate) struct Watch {
    fd: Inotify,
    /// Watch -> the directory's workspace-relative path ("" for the root).
    dirs: HashMap<WatchDescriptor, String>,
}

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

impl Watch {
    pub(crate) fn new() -> Option<Watch> {
        let fd = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        Some(Watch { fd, dirs: HashMap::new() })
    }

    /// Watches the directory `rel` below `root`; false when the kernel refused (watch limit).
    pub(crate) fn add(&mut self, root: &Path, rel: &str) -> bool {
        let path = if rel.is_empty() { root.to_path_buf() } else { root.join(rel) };
        match self.fd.add_watch(&path, mask()) {
            Ok(wd) => {
                self.dirs.insert(wd, rel.to_string());
                true
            }
            // Gone (or no longer a directory) since it was seen: its parent's events say so.
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => true,
            Err(_) => false,
        }
    }

    /// The paths named by the events queued since the last call; `None` when some were lost.
    pub(crate) fn drain(&mut self) -> Option<HashSet<String>> {
        let mut dirty = HashSet::new();
        loop {
            let events = match self.fd.read_events() {
                Ok(ev) => ev,
                Err(Errno::EAGAIN) => return Some(dirty),
                Err(_) => return None,
            };
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    return None;
                }
                let Some(dir) = self.dirs.get(&ev.wd).cloned() else { continue };
                if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    self.dirs.remove(&ev.wd);
                    continue;
                }
                match ev.name.as_ref().map(|n| n.to_str()) {
                    Some(Some(name)) => {
                        dirty.insert(if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") });
                    }
                    // A name that is not UTF-8 is not tracked (the scans skip it too).
                    Some(None) => {}
                    None if !dir.is_empty() => {
                        dirty.insert(dir);
                    }
                    None => {}
                }
            }
        }
    }
}
