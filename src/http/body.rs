//! Request bodies: [`read`] takes a whole body within [`super::MAX_BODY`] and a deadline, and
//! [`Readers`] caps how many bodies are being read at once, in all and from one peer (remote
//! IP). `serve` on the `http` thread asks [`may_stall`] and takes a [`Permit`]; the reading
//! runs on the request's `http-body` or `http-slow` thread, never on `http`. Heads are bounded
//! in the vendored tiny_http (vendor/tiny_http/PATCHES.md).

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Resp, MAX_BODY};
use crate::util::sync;

/// Bodies being read at once from all peers; with [`super::MAX_BODY`] this bounds what
/// bodies in flight can hold (24 x 12 MiB).
pub(crate) const MAX_BODY_READERS: usize = 24;
/// Bodies being read at once from one peer. A browser opens at most 6 connections to a host,
/// so one page never meets it; a peer trickling more uploads than this gets 429 for the rest.
pub(crate) const MAX_BODY_READERS_PER_PEER: usize = 6;
/// tiny_http reads a body of at most this many bytes before it hands the request over, unless
/// the client sent `Expect: 100-continue` (vendor/tiny_http/src/request.rs): such a body is
/// already in memory and reading it cannot wait on the peer.
const PREREAD_BODY: usize = 1024;
/// Bytes asked of the socket per read; the deadline is checked between reads.
const CHUNK: usize = 16 * 1024;

fn has_header(rq: &tiny_http::Request, name: &'static str) -> bool {
    rq.headers().iter().any(|h| h.field.equiv(name))
}

/// Whether the body is still to come from the socket (tiny_http buffers small ones itself).
/// Such a body left unread ends the connection (the patched tiny_http does not drain it).
pub(crate) fn streamed(rq: &tiny_http::Request) -> bool {
    has_header(rq, "Transfer-Encoding")
        || rq.body_length().is_some_and(|n| n > PREREAD_BODY || (n > 0 && has_header(rq, "Expect")))
}

/// Whether reading this request's body can wait on the peer: it is streamed and [`read`]
/// will not refuse it before reading.
pub(crate) fn may_stall(rq: &tiny_http::Request) -> bool {
    streamed(rq) && (has_header(rq, "Transfer-Encoding") || rq.body_length().is_some_and(|n| n <= MAX_BODY))
}

/// A refusal that also ends the connection: the rest of the body is not read.
fn closing(status: u16, msg: &str) -> Resp {
    let mut r = Resp::detail(status, msg);
    r.headers.push(("Connection".into(), "close".into()));
    r
}

/// The whole body, or the response refusing it: 413 past [`MAX_BODY`] (a `Content-Length`
/// before reading, a chunked body once it gets there; the patched tiny_http also caps a chunked
/// body's framing), 408 when it is not all there within `timeout`, 400 when the peer breaks off
/// or the chunking is malformed. Every refusal closes the connection.
pub(crate) fn read(rq: &mut tiny_http::Request, timeout: Duration) -> Result<Vec<u8>, Resp> {
    if has_header(rq, "Transfer-Encoding") {
        let deadline = Instant::now() + timeout;
        return read_within(rq.as_reader(), 0, deadline, Instant::now);
    }
    let declared = rq.body_length().unwrap_or(0);
    if declared > MAX_BODY {
        return Err(closing(413, "request body too large"));
    }
    if declared == 0 {
        return Ok(Vec::new());
    }
    let deadline = Instant::now() + timeout;
    read_within(rq.as_reader(), declared, deadline, Instant::now)
}

/// The pure core of [`read`]: reads `r` to its end in chunks of [`CHUNK`], refusing past
/// [`MAX_BODY`] or when a read returns at or after `deadline` (a single read is bounded by
/// the socket timeout). `declared` sizes the buffer; pages are touched only as bytes arrive.
fn read_within(
    r: &mut dyn Read,
    declared: usize,
    deadline: Instant,
    now: impl Fn() -> Instant,
) -> Result<Vec<u8>, Resp> {
    let mut body = Vec::with_capacity(declared.min(MAX_BODY));
    let mut chunk = [0u8; CHUNK];
    loop {
        let got = r.read(&mut chunk);
        if matches!(got, Ok(0)) {
            return Ok(body);
        }
        if now() >= deadline {
            return Err(closing(408, "the request body did not arrive in time"));
        }
        match got {
            Ok(0) => return Ok(body),
            Ok(n) if body.len() + n > MAX_BODY => return Err(closing(413, "request body too large")),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
                return Err(closing(408, "the request body did not arrive in time"));
            }
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                return Err(closing(400, "the request body ended early"));
            }
            Err(_) => return Err(closing(400, "could not read the request body")),
        }
    }
}

/// Which limit a refused [`Readers::acquire`] met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// This peer already has its share of readers.
    Peer,
    /// Every reader is busy.
    All,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// Counts the bodies being read, in all and per peer.
#[derive(Debug)]
pub(crate) struct Readers {
    max_total: usize,
    max_per_peer: usize,
    counts: Mutex<Counts>,
}

/// One body being read; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Permit {
    readers: Arc<Readers>,
    peer: Option<IpAddr>,
}

impl Readers {
    pub(crate) fn new(max_total: usize, max_per_peer: usize) -> Readers {
        Readers { max_total, max_per_peer, counts: Mutex::new(Counts::default()) }
    }

    /// A place for one more body from `peer` (`None`: a peer without an address, counted in
    /// the total only). An IPv4 peer seen over IPv6 counts as itself.
    pub(crate) fn acquire(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<Permit, Full> {
        let peer = peer.map(|ip| ip.to_canonical());
        let mut counts = sync::lock(&self.counts);
        let mine = peer.and_then(|ip| counts.per_peer.get(&ip).copied()).unwrap_or(0);
        if peer.is_some() && mine >= self.max_per_peer {
            return Err(Full::Peer);
        }
        if counts.total >= self.max_total {
            return Err(Full::All);
        }
        counts.total += 1;
        if let Some(ip) = peer {
            counts.per_peer.insert(ip, mine + 1);
        }
        Ok(Permit { readers: Arc::clone(self), peer })
    }

    /// Bodies being read now (for tests and logs).
    pub(crate) fn in_use(&self) -> usize {
        sync::lock(&self.counts).total
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut counts = sync::lock(&self.readers.counts);
        counts.total = counts.total.saturating_sub(1);
        if let Some(ip) = self.peer {
            if let Some(n) = counts.per_peer.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    counts.per_peer.remove(&ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::io::{self, Cursor};

    use super::*;

    /// Yields `step` bytes per read and moves a fake clock on by `tick` each time.
    struct Trickle<'a> {
        left: usize,
        step: usize,
        clock: &'a Cell<Instant>,
        tick: Duration,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.clock.set(self.clock.get() + self.tick);
            let n = self.left.min(self.step).min(buf.len());
            buf[..n].fill(b'x');
            self.left -= n;
            Ok(n)
        }
    }

    fn status(r: Result<Vec<u8>, Resp>) -> (u16, Option<String>) {
        match r {
            Ok(body) => (200, Some(body.len().to_string())),
            Err(resp) => (resp.status, resp.headers.iter().find(|(k, _)| k == "Connection").map(|(_, v)| v.clone())),
        }
    }

    #[test]
    fn a_body_within_the_deadline_is_read_whole() {
        let start = Instant::now();
        let clock = Cell::new(start);
        let mut r = Trickle { left: 100_000, step: 7_000, clock: &clock, tick: Duration::from_millis(100) };
        let got = read_within(&mut r, 100_000, start + Duration::from_secs(60), || clock.get());
        assert_eq!(status(got), (200, Some("100000".into())));
    }

    #[test]
    fn a_trickle_is_cut_when_the_deadline_passes_though_every_read_returns() {
        let start = Instant::now();
        let clock = Cell::new(start);
        let mut r = Trickle { left: 1_000, step: 1, clock: &clock, tick: Duration::from_secs(10) };
        let got = read_within(&mut r, 1_000, start + Duration::from_secs(60), || clock.get());
        assert_eq!(status(got), (408, Some("close".into())));
        // Cut at the sixth read (60 s), not after the thousandth.
        assert_eq!(r.left, 1_000 - 6);
    }

    #[test]
    fn read_errors_map_to_408_and_400() {
        struct Fails(ErrorKind);
        impl Read for Fails {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::new(self.0, "x"))
            }
        }
        let far = Instant::now() + Duration::from_secs(60);
        for (kind, want) in [
            (ErrorKind::TimedOut, 408),
            (ErrorKind::WouldBlock, 408),
            (ErrorKind::UnexpectedEof, 400),
            (ErrorKind::ConnectionReset, 400),
        ] {
            assert_eq!(status(read_within(&mut Fails(kind), 10, far, Instant::now)), (want, Some("close".into())));
        }
    }

    #[test]
    fn more_than_max_body_is_413() {
        let far = Instant::now() + Duration::from_secs(60);
        let mut r = Cursor::new(vec![0u8; MAX_BODY + 1]);
        assert_eq!(status(read_within(&mut r, MAX_BODY, far, Instant::now)), (413, Some("close".into())));
        let mut r = Cursor::new(vec![0u8; MAX_BODY]);
        assert_eq!(status(read_within(&mut r, MAX_BODY, far, Instant::now)), (200, Some(MAX_BODY.to_string())));
    }

    #[test]
    fn readers_cap_each_peer_and_the_total() {
        let readers = Arc::new(Readers::new(3, 2));
        let a: IpAddr = "127.0.0.2".parse().expect("ip");
        let b: IpAddr = "127.0.0.3".parse().expect("ip");
        let a1 = readers.acquire(Some(a)).expect("a 1");
        let a2 = readers.acquire(Some(a)).expect("a 2");
        assert_eq!(readers.acquire(Some(a)).unwrap_err(), Full::Peer);
        // The same peer seen as an IPv4-mapped IPv6 address is still that peer.
        assert_eq!(readers.acquire(Some("::ffff:127.0.0.2".parse().expect("ip"))).unwrap_err(), Full::Peer);
        let b1 = readers.acquire(Some(b)).expect("b 1");
        assert_eq!(readers.acquire(Some(b)).unwrap_err(), Full::All);
        assert_eq!(readers.acquire(None).unwrap_err(), Full::All);
        drop(a1);
        let b2 = readers.acquire(Some(b)).expect("a place freed by a");
        assert_eq!(readers.in_use(), 3);
        drop((a2, b1, b2));
        assert_eq!(readers.in_use(), 0);
        assert!(readers.counts.lock().expect("lock").per_peer.is_empty(), "no peer is remembered once idle");
    }
}
