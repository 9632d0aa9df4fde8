//! Listening sockets with a deep accept backlog (std's 128 overflows on a burst of connects)
//! and SO_REUSEADDR, built with libc before `listen`, then handed to std.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// Accept backlog for both listeners.
pub const BACKLOG: i32 = 4096;

pub fn listen(host: &str, port: u16) -> io::Result<TcpListener> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("cannot resolve {host}")))?;
    listen_addr(addr)
}

#[cfg(unix)]
fn listen_addr(addr: SocketAddr) -> io::Result<TcpListener> {
    use std::os::fd::FromRawFd;
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket syscalls on a descriptor we own; it is closed on every error path
    // and otherwise owned by the returned TcpListener.
    unsafe {
        let fd = libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fail = |fd| {
            let e = io::Error::last_os_error();
            libc::close(fd);
            Err(e)
        };
        let one: libc::c_int = 1;
        if libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) != 0
        {
            return fail(fd);
        }
        let rc = match addr {
            SocketAddr::V4(a) => {
                let mut sin: libc::sockaddr_in = std::mem::zeroed();
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = a.port().to_be();
                sin.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) };
                libc::bind(
                    fd,
                    &sin as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
            SocketAddr::V6(a) => {
                let mut sin6: libc::sockaddr_in6 = std::mem::zeroed();
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_addr = libc::in6_addr { s6_addr: a.ip().octets() };
                sin6.sin6_scope_id = a.scope_id();
                libc::bind(
                    fd,
                    &sin6 as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            }
        };
        if rc != 0 || libc::listen(fd, BACKLOG) != 0 {
            return fail(fd);
        }
        Ok(TcpListener::from_raw_fd(fd))
    }
}

#[cfg(not(unix))]
fn listen_addr(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr)
}

/// Raises the soft open-files limit to the hard limit (1,000 clients need ~2,000 descriptors).
pub fn raise_nofile_limit() {
    #[cfg(unix)]
    // SAFETY: getrlimit/setrlimit on a zeroed struct we own.
    unsafe {
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max.min(1 << 20);
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listens_on_ephemeral_port() {
        let l = listen("127.0.0.1", 0).unwrap();
        let port = l.local_addr().unwrap().port();
        assert_ne!(port, 0);
        let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        assert!(l.accept().is_ok());
    }
}
