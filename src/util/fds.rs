//! Descriptors the server inherits: at start-up (main thread, before any thread or child
//! exists) every descriptor from 3 up is marked close-on-exec, so one a careless supervisor or
//! shell left open (`exec 5<secret.txt; cashcode`) never reaches `exec` commands or MCP servers.

use std::os::fd::BorrowedFd;
use std::os::unix::io::RawFd;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::resource::{getrlimit, Resource};

/// The fallback range's end where `/proc` is absent and the soft limit is huge or unlimited.
const MAX_SCANNED_FD: u64 = 1 << 16;

/// Marks every open descriptor >= 3 close-on-exec. Called once from `main` after the secrets
/// memfd was taken over (and closed) and before the allocator re-exec, which needs none of them.
pub fn close_inherited_on_exec() {
    mark_cloexec(open_fds());
}

/// The open descriptors >= 3: listed from `/proc/self/fd`, else every number below the soft
/// `RLIMIT_NOFILE` (capped), as no descriptor can be at or above it.
fn open_fds() -> Vec<RawFd> {
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        // The listing's own descriptor is among them; it is O_CLOEXEC already, marking it is harmless.
        return dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<RawFd>().ok())
            .filter(|&fd| fd >= 3)
            .collect();
    }
    let soft = getrlimit(Resource::RLIMIT_NOFILE).map(|(soft, _)| soft).unwrap_or(1024).min(MAX_SCANNED_FD);
    (3..soft).filter_map(|fd| RawFd::try_from(fd).ok()).collect()
}

/// Sets FD_CLOEXEC on each descriptor; one already closed (EBADF) is no error.
fn mark_cloexec(fds: impl IntoIterator<Item = RawFd>) {
    for fd in fds {
        // SAFETY: borrowed only for this one fcntl, on the main thread before any other thread
        // exists, so nothing can close or reuse the number meanwhile; a number not open (the
        // listing's own descriptor, already closed; a gap in the fallback range) makes fcntl
        // fail with EBADF and touches nothing.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let _ = fcntl(borrowed, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::AsRawFd;

    fn cloexec(f: &std::fs::File) -> bool {
        let bits = fcntl(f, FcntlArg::F_GETFD).expect("open descriptor");
        FdFlag::from_bits_truncate(bits).contains(FdFlag::FD_CLOEXEC)
    }

    /// A descriptor without FD_CLOEXEC is listed and marked. Only this test's descriptor is
    /// marked: other tests in this process may hold descriptors meant for their children.
    #[test]
    fn an_inherited_descriptor_is_listed_and_marked() {
        let f = std::fs::File::open("/dev/null").unwrap();
        let fd = f.as_raw_fd();
        fcntl(&f, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
        assert!(!cloexec(&f));
        assert!(open_fds().contains(&fd));
        mark_cloexec([fd]);
        assert!(cloexec(&f));
    }
}
