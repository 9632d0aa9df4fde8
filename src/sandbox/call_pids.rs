//! A process limit per confined `exec` call: a `pids` cgroup of its own, below the server's, that
//! the command's first process joins in its `pre_exec` step (so everything it starts counts),
//! limited to [`MAX_CALL_TASKS`] and to what leaves the server [`SERVER_RESERVE`] tasks under
//! its own group's limit. A command that forks without end gets `EAGAIN` at the limit while the
//! server can still start threads for its clients. Made on the turn's worker thread; removed
//! when the call ends (everything in it was killed and reaped by the call's reaper).
//!
//! `RLIMIT_NPROC` cannot do this: it counts every process of the uid and spares root. The
//! kernel offers the limit where the server may create cgroups below its own: a cgroup-v1
//! `pids` hierarchy it can write (root, or a delegated one). cgroup v2 forbids processes in a
//! group whose children have controllers, so a server inside a v2 leaf gets no per-call limit;
//! [`CallPids::create`] then returns `None` and the status says so.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Processes and threads one call may have at once (its reaper and shell included).
pub(crate) const MAX_CALL_TASKS: u64 = 512;
/// Tasks a call leaves free under the server's own group limit, for the server's threads
/// (client connections, handshakes, workers).
pub(crate) const SERVER_RESERVE: u64 = 64;
/// Where cgroup v1 mounts the `pids` hierarchy.
const V1_ROOT: &str = "/sys/fs/cgroup/pids";
/// Prefix of the per-call groups (removed at start-up when a crash left them).
const PREFIX: &str = "cashcode-call-";

static NEXT: AtomicU64 = AtomicU64::new(1);

/// One call's `pids` group, removed when dropped.
pub(crate) struct CallPids {
    dir: PathBuf,
    /// `<dir>/cgroup.procs`, for the child to write `0` to (itself) before it runs anything.
    procs: CString,
}

/// The server's own group in the v1 `pids` hierarchy (from `/proc/self/cgroup`), when it is
/// mounted and writable.
fn own_group() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers.split(',').any(|c| c == "pids").then(|| path.trim_start_matches('/').to_string())
    })?;
    let dir = Path::new(V1_ROOT).join(rel);
    nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK).ok()?;
    Some(dir)
}

/// Whether calls get a process limit here (for the sandbox status).
pub(crate) fn available() -> bool {
    own_group().is_some()
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl CallPids {
    /// A new group for one call, or `None` where the kernel offers no writable `pids` group
    /// below the server's.
    pub(crate) fn create() -> Option<CallPids> {
        let parent = own_group()?;
        // Room under the server's own limit ("max" when it has none), less the reserve.
        let room = match read_u64(&parent.join("pids.max")) {
            Some(max) => max.saturating_sub(read_u64(&parent.join("pids.current")).unwrap_or(max)),
            None => u64::MAX,
        };
        let max = MAX_CALL_TASKS.min(room.saturating_sub(SERVER_RESERVE)).max(2);
        let dir = parent.join(format!("{PREFIX}{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir(&dir).ok()?;
        let group = CallPids { procs: CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).ok()?, dir };
        std::fs::write(group.dir.join("pids.max"), max.to_string()).ok()?;
        log::debug!("event=exec.pids_group dir={:?} max={max}", group.dir.display().to_string());
        Some(group)
    }

    /// Joins the group: the calling process (a forked child before `execve`) and everything
    /// it starts after. Async-signal-safe (`open`, `write`, `close` on a prepared path).
    pub(crate) fn join_self(procs: &std::ffi::CStr) -> std::io::Result<()> {
        use nix::fcntl::{open, OFlag};
        use nix::sys::stat::Mode;
        let fd = open(procs, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())?;
        nix::unistd::write(&fd, b"0")?;
        Ok(())
    }

    pub(crate) fn procs(&self) -> &std::ffi::CStr {
        &self.procs
    }

    /// Removes groups a crashed run of the server left below its own (their processes are
    /// gone with it: the calls' reapers die with the server). Only those of servers no longer
    /// running: other servers may share this group, and a group just made for one of their
    /// calls is empty until the call's process joins it.
    pub(crate) fn sweep() {
        let Some(parent) = own_group() else { return };
        let Ok(rd) = std::fs::read_dir(&parent) else { return };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()) else { continue };
            let gone = pid.parse::<u32>().is_ok_and(|p| !Path::new(&format!("/proc/{p}")).exists());
            if gone {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
}

impl Drop for CallPids {
    fn drop(&mut self) {
        // The reaper killed and reaped everything before the call returned; a task still
        // being released makes `rmdir` fail with EBUSY for a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        log::warn!("event=exec.pids_group_left path={:?}", self.dir.display().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel offers a writable `pids` hierarchy (root here), a group is made below
    /// the server's, limited, joinable and removed on drop.
    #[test]
    fn a_call_group_is_limited_and_removed() {
        if !available() {
            eprintln!("SKIPPED: no writable pids cgroup below this process's");
            return;
        }
        let started = std::time::Instant::now();
        let g = CallPids::create().expect("a group");
        let dir = g.dir.clone();
        let max: u64 = read_u64(&dir.join("pids.max")).expect("pids.max");
        assert!((2..=MAX_CALL_TASKS).contains(&max), "{max}");
        drop(g);
        let took = started.elapsed();
        assert!(!dir.exists(), "removed");
        println!("a call's pids group made and removed in {took:?}");
    }
}
