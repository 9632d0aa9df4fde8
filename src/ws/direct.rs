//! The shortcut past a connection's writer thread: when nothing is queued for the connection
//! and its writer is not writing, the thread emitting an event (a worker, a stream reader, the
//! connection's own reader) writes the text frame itself with one non-blocking `sendmsg`. Most
//! events of a turn then reach the socket without waking `ws-writer-N`. A socket that takes
//! less than the whole frame gets the rest queued as raw bytes, so a slow client still never
//! blocks the emitting thread; the writer thread owns every write that may wait.
//! Called only under the connection's write lock ([`super::hub::Conn`]).

use std::net::TcpStream;

/// What [`send_text`] managed to write.
pub enum Sent {
    /// The whole frame.
    All,
    /// Only a prefix: these bytes (the rest of the frame) must be written next.
    Part(Vec<u8>),
    /// Nothing (the socket buffer is full, or the platform has no non-blocking send here).
    Nothing,
}

/// The header of an unmasked, final server-to-client text frame of `len` bytes (RFC 6455 §5.2).
pub fn text_header(len: usize) -> ([u8; 10], usize) {
    let mut h = [0u8; 10];
    h[0] = 0x81;
    if len < 126 {
        h[1] = len as u8;
        (h, 2)
    } else if len <= u16::MAX as usize {
        h[1] = 126;
        h[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        (h, 4)
    } else {
        h[1] = 127;
        h[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        (h, 10)
    }
}

/// Writes one text frame without blocking.
#[cfg(target_os = "linux")]
pub fn send_text(stream: &TcpStream, text: &str) -> Sent {
    use std::os::fd::AsRawFd;
    let (header, hlen) = text_header(text.len());
    let mut iov = [
        libc::iovec { iov_base: header.as_ptr() as *mut libc::c_void, iov_len: hlen },
        libc::iovec { iov_base: text.as_ptr() as *mut libc::c_void, iov_len: text.len() },
    ];
    // SAFETY: an all-zero msghdr is valid (no name, no control data); it points at `iov`,
    // whose two buffers outlive the call and are only read by the kernel.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    let total = hlen + text.len();
    match usize::try_from(sent) {
        Ok(n) if n == total => Sent::All,
        Ok(0) | Err(_) => Sent::Nothing,
        Ok(n) => {
            let mut rest = Vec::with_capacity(total - n);
            if n < hlen {
                rest.extend_from_slice(&header[n..hlen]);
                rest.extend_from_slice(text.as_bytes());
            } else {
                rest.extend_from_slice(&text.as_bytes()[n - hlen..]);
            }
            Sent::Part(rest)
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub fn send_text(_stream: &TcpStream, _text: &str) -> Sent {
    Sent::Nothing
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn headers_follow_the_length_encoding() {
        assert_eq!(&text_header(5).0[..2], &[0x81, 5]);
        assert_eq!(&text_header(126).0[..4], &[0x81, 126, 0, 126]);
        assert_eq!(&text_header(70_000).0[..10], &[0x81, 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_frame_goes_out_whole_or_the_rest_is_returned() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert!(matches!(send_text(&server, "hi"), Sent::All));
        let mut got = [0u8; 4];
        (&client).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"\x81\x02hi");
        // Nobody reads: the socket buffer fills, and what did not fit comes back.
        let big = "x".repeat(1 << 20);
        let mut written = 0usize;
        let mut rest_len = None;
        for _ in 0..64 {
            match send_text(&server, &big) {
                Sent::All => written += 1,
                Sent::Part(rest) => {
                    rest_len = Some(rest.len());
                    break;
                }
                Sent::Nothing => break,
            }
        }
        if let Some(n) = rest_len {
            assert!(n > 0 && n < big.len() + 10, "{n}");
        }
        assert!(written < 64, "a socket nobody reads took 64 MiB");
    }
}
