//! Listening sockets with a deep accept backlog (std's 128 overflows on a burst of connects)
//! and SO_REUSEADDR, set before `listen`, then handed to std.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// Accept backlog for both listeners.
pub(crate) const BACKLOG: i32 = 4096;

pub(crate) fn listen(host: &str, port: u16) -> io::Result<TcpListener> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("cannot resolve {host}")))?;
    listen_addr(addr)
}

fn listen_addr(addr: SocketAddr) -> io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    // Close-on-exec from the start (socket2 sets it atomically where the platform can).
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    // On Windows the same option would let another process take the port.
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Raises the soft open-files limit to the hard limit (1,000 clients need ~2,000 descriptors).
pub(crate) fn raise_nofile_limit() {
    #[cfg(unix)]
    {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            if soft < hard {
                let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(1 << 20), hard);
            }
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
