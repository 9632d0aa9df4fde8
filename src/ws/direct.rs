//! The shortcut past a connection's writer thread: when nothing is queued for the connection
//! and nobody is writing, the thread emitting an event (a worker, a stream reader, the
//! connection's own reader) writes the frames itself with one non-blocking `sendmsg`, several
//! frames at once when several events are ready. Most connections then never need their
//! `ws-writer-N`. A socket that takes less than everything gets the rest queued (a partial
//! frame as raw bytes), so a slow client still never blocks the emitting thread; the writer
//! thread, started then, owns every write that may wait.
//! Called only under the connection's write lock ([`super::hub::Conn`]).

use std::net::TcpStream;

/// What [`send_texts`] managed to write.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Every frame.
    All,
    /// The first `whole` frames, then `rest`: the unwritten end of frame `whole` (empty when
    /// the write stopped at a frame boundary). The frames after it were not written.
    Part { whole: usize, rest: Vec<u8> },
    /// Nothing (the socket buffer is full, or the platform has no non-blocking send here).
    Nothing,
}

/// Frames written by one `sendmsg` at most (two iovecs each, far below `IOV_MAX`).
pub(crate) const MAX_FRAMES: usize = 64;

/// The header of an unmasked, final server-to-client text frame of `len` bytes (RFC 6455 §5.2).
pub(crate) fn text_header(len: usize) -> ([u8; 10], usize) {
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

/// Writes text frames without blocking, up to [`MAX_FRAMES`] of them with one `sendmsg`
/// (frames that arrive together leave together).
#[cfg(target_os = "linux")]
pub(crate) fn send_texts<T: AsRef<str>>(stream: &TcpStream, texts: &[T]) -> Sent {
    use std::io::IoSlice;
    let mut whole = 0;
    for batch in texts.chunks(MAX_FRAMES) {
        // On the stack (about 3.5 KiB): most sends are one frame and allocate nothing.
        let mut headers = [([0u8; 10], 0usize); MAX_FRAMES];
        for (header, text) in headers.iter_mut().zip(batch) {
            *header = text_header(text.as_ref().len());
        }
        let mut iov = [IoSlice::new(&[]); 2 * MAX_FRAMES];
        for (i, ((header, hlen), text)) in headers.iter().zip(batch).enumerate() {
            iov[2 * i] = IoSlice::new(&header[..*hlen]);
            iov[2 * i + 1] = IoSlice::new(text.as_ref().as_bytes());
        }
        let sent = socket2::SockRef::from(stream)
            .send_vectored_with_flags(&iov[..2 * batch.len()], libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
        let Ok(mut n) = sent else {
            return if whole == 0 { Sent::Nothing } else { Sent::Part { whole, rest: Vec::new() } };
        };
        for ((header, hlen), text) in headers.iter().zip(batch) {
            let text = text.as_ref();
            let len = hlen + text.len();
            if n >= len {
                n -= len;
                whole += 1;
                continue;
            }
            if n == 0 && whole == 0 {
                return Sent::Nothing;
            }
            let mut rest = Vec::with_capacity(len - n);
            if n < *hlen {
                rest.extend_from_slice(&header[n..*hlen]);
                rest.extend_from_slice(text.as_bytes());
            } else {
                rest.extend_from_slice(&text.as_bytes()[n - hlen..]);
            }
            if n == 0 {
                rest.clear();
            }
            return Sent::Part { whole, rest };
        }
    }
    Sent::All
}

/// Writes bytes without blocking; how many it took (`None`: nothing).
#[cfg(target_os = "linux")]
pub(crate) fn send_bytes(stream: &TcpStream, bytes: &[u8]) -> Option<usize> {
    let sent = socket2::SockRef::from(stream).send_with_flags(bytes, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
    sent.ok().filter(|n| *n > 0 || bytes.is_empty())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn send_bytes(_stream: &TcpStream, _bytes: &[u8]) -> Option<usize> {
    None
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn send_texts<T: AsRef<str>>(_stream: &TcpStream, _texts: &[T]) -> Sent {
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

    fn frame(text: &str) -> Vec<u8> {
        let (h, n) = text_header(text.len());
        [&h[..n], text.as_bytes()].concat()
    }

    fn pair() -> (TcpStream, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn frames_go_out_together_in_order() {
        let (client, server) = pair();
        assert_eq!(send_texts(&server, &["hi"]), Sent::All);
        // More than one sendmsg's worth of frames, each a different size.
        let texts: Vec<String> = (0..150).map(|i| "y".repeat(i * 3)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        assert_eq!(send_texts(&server, &refs), Sent::All);
        let want: Vec<u8> = [frame("hi")].into_iter().chain(refs.iter().map(|t| frame(t))).flatten().collect();
        let mut got = vec![0u8; want.len()];
        (&client).read_exact(&mut got).unwrap();
        assert_eq!(got, want);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_socket_returns_exactly_what_it_did_not_take() {
        let (client, server) = pair();
        // Nobody reads: the socket buffer fills part way through the batch.
        let texts: Vec<String> =
            (0..64).map(|i| char::from(b'a' + (i % 26) as u8).to_string().repeat(100_000 + i)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let (whole, rest) = match send_texts(&server, &refs) {
            Sent::Part { whole, rest } => (whole, rest),
            other => panic!("a socket nobody reads took 6 MiB at once: {other:?}"),
        };
        assert!(whole < refs.len());
        // What the peer reads, then `rest`, then the later frames: exactly the frames in order.
        let want: Vec<u8> = refs.iter().flat_map(|t| frame(t)).collect();
        let mut got = Vec::new();
        client.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match (&client).read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    match (&client).read(&mut buf) {
                        Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        let next = if rest.is_empty() { whole } else { whole + 1 };
        got.extend_from_slice(&rest);
        got.extend(refs[next..].iter().flat_map(|t| frame(t)));
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes differ from the frames in order");
        // A socket with nothing free takes nothing. The kernel grows both buffers after the
        // drain above (up to tcp_wmem's and tcp_rmem's maxima: 36 MiB on some hosts), so the
        // attempts are bounded by those maxima, not by a count that fits the defaults.
        let most = |f: &str| -> usize {
            let text = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}")).unwrap_or_default();
            text.split_whitespace().nth(2).and_then(|n| n.parse().ok()).unwrap_or(8 << 20)
        };
        let attempts = (most("tcp_wmem") + most("tcp_rmem")) / refs[0].len() + 64;
        let mut full = false;
        for _ in 0..attempts {
            if send_texts(&server, &refs[..1]) == Sent::Nothing {
                full = true;
                break;
            }
        }
        assert!(full, "a socket nobody reads kept taking frames");
    }
}
