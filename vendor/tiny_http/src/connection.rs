//! Abstractions of Tcp and Unix socket types

#[cfg(unix)]
use std::os::unix::net as unix_net;
use std::{
    collections::HashMap,
    io::{Read, Write},
    net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs},
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError, Weak},
    time::{Duration, Instant},
};

/// Unified listener. Either a [`TcpListener`] or [`std::os::unix::net::UnixListener`]
pub enum Listener {
    Tcp(TcpListener),
    #[cfg(unix)]
    Unix(unix_net::UnixListener),
}
impl Listener {
    pub(crate) fn local_addr(&self) -> std::io::Result<ListenAddr> {
        match self {
            Self::Tcp(l) => l.local_addr().map(ListenAddr::from),
            #[cfg(unix)]
            Self::Unix(l) => l.local_addr().map(ListenAddr::from),
        }
    }

    /// (cashcode patch) Each accepted connection gets `config`'s timeouts before anything
    /// reads from it. A connection whose timeouts cannot be set is closed and the next one
    /// accepted: an error returned from here would end the accept thread.
    pub(crate) fn accept(
        &self,
        config: &ConnectionConfig,
    ) -> std::io::Result<(Connection, Option<SocketAddr>)> {
        loop {
            let accepted = match self {
                // Responses go out as several writes (head, body pieces); with Nagle on, a
                // keep-alive client's delayed ACK held the last piece back for ~40 ms.
                Self::Tcp(l) => l.accept().map(|(conn, addr)| {
                    let _ = conn.set_nodelay(true);
                    (Connection::from(conn), Some(addr))
                })?,
                #[cfg(unix)]
                Self::Unix(l) => l.accept().map(|(conn, _)| (Connection::from(conn), None))?,
            };
            match accepted.0.set_timeouts(config) {
                Ok(()) => return Ok(accepted),
                Err(e) => log::debug!("Closing a connection whose timeouts failed: {}", e),
            }
        }
    }
}

/// (cashcode patch) Settings put on every connection the server accepts, and the limits on
/// how many it keeps open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionConfig {
    /// Longest wait of one read (`SO_RCVTIMEO`); `None` waits forever. A read that times out
    /// ends the connection, so this bounds a request head that stops arriving.
    pub read_timeout: Option<Duration>,
    /// Longest wait of one write (`SO_SNDTIMEO`); `None` waits forever.
    pub write_timeout: Option<Duration>,
    /// Longest time for a whole request head (request line, header fields, and a body of up
    /// to 1 KiB that is read with them), counted from when the connection is ready to read it:
    /// just accepted, or the previous request's body read. A head not complete by then ends
    /// the connection without an answer, as a read timeout does. `None`: each read is bounded
    /// by `read_timeout` only, so a peer sending a byte now and then holds the connection.
    pub head_timeout: Option<Duration>,
    /// Most connections open at once. One more is answered `503` (written without waiting
    /// on the peer) and closed by the accept thread, before a thread is spent on it.
    /// `None`: no limit.
    pub max_connections: Option<usize>,
    /// Most connections open at once from one peer IP address (an IPv4 peer seen as an
    /// IPv4-mapped IPv6 address counts as itself); one more is refused like the above.
    pub max_per_peer: Option<usize>,
    /// A connection's responses are written by its own thread: a response given to
    /// [`Request::respond_from_connection`](crate::Request::respond_from_connection) is handed
    /// to that thread and the call returns at once, so a peer that reads slowly or never holds
    /// up only its own connection, never the thread that answered. The connection then reads
    /// its next request only once the previous one is answered (no read-ahead of pipelined
    /// requests: at most one request per connection is ever waiting for an answer). `false`
    /// (upstream's behaviour): the next request is read while the previous one is handled, and
    /// `respond_from_connection` writes on the calling thread like `respond`.
    pub write_on_connection: bool,
}

/// (cashcode patch) Counts the open connections, in all and per peer, against the limits of
/// a [`ConnectionConfig`]. A [`Slot`] is one open connection; it is freed when the last
/// half of the connection is dropped, that is when its descriptor is closed.
///
/// Peers are counted by [`peer_key`]: an IPv4 address, an IPv6 address by its /64. When the
/// total is reached, a newcomer from a peer holding fewer connections than the busiest peer
/// (by two or more) takes the place of that peer's oldest connection that waits for a request
/// head (idle between requests, or trickling one): that connection is shut down and no longer
/// counted. So connections held open from a few addresses (127.0.0.2 to 127.0.0.7 are all
/// loopback) never lock out another peer, the owner's browser included.
#[derive(Debug)]
pub(crate) struct Slots {
    max_total: Option<usize>,
    max_per_peer: Option<usize>,
    counts: Mutex<SlotCounts>,
}

#[derive(Debug, Default)]
struct SlotCounts {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
    next_id: u64,
    /// Counted connections by id (ids grow: the smallest is the oldest), with their peer and,
    /// once the plain connection is shared, a handle to shut it down when it is displaced.
    live: HashMap<u64, (Option<IpAddr>, Option<Weak<Shared>>)>,
}

/// (cashcode patch) One open connection counted by [`Slots`].
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

/// (cashcode patch) The address a peer is counted by: IPv4 (also when mapped into IPv6) as
/// is, IPv6 by its /64, the block one host is usually given.
pub(crate) fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl Slots {
    pub(crate) fn new(config: &ConnectionConfig) -> Arc<Slots> {
        Arc::new(Slots {
            max_total: config.max_connections,
            max_per_peer: config.max_per_peer,
            counts: Mutex::new(SlotCounts::default()),
        })
    }

    /// A slot for one more connection from `peer`, or `None` when a limit is reached (and no
    /// connection of a busier peer could be displaced).
    pub(crate) fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Slot> {
        let peer = peer.map(peer_key);
        let displaced;
        let slot = {
            let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            if let (Some(ip), Some(max)) = (peer, self.max_per_peer) {
                if counts.per_peer.get(&ip).copied().unwrap_or(0) >= max {
                    return None;
                }
            }
            displaced = match self.max_total.is_some_and(|max| counts.total >= max) {
                true => Some(counts.displace_for(peer)?),
                false => None,
            };
            counts.total += 1;
            if let Some(ip) = peer {
                *counts.per_peer.entry(ip).or_insert(0) += 1;
            }
            counts.next_id += 1;
            let id = counts.next_id;
            counts.live.insert(id, (peer, None));
            Slot {
                slots: Arc::clone(self),
                id,
            }
        };
        // Outside the lock: dropping the last handle of the displaced connection drops its
        // slot, which takes the lock.
        if let Some(shared) = displaced {
            let _ = shared.shutdown(Shutdown::Both);
        }
        Some(slot)
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }

    /// Gives the slot's connection a handle by which it can be displaced.
    pub(crate) fn register(&self, slot: &Slot, shared: &Arc<Shared>) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = counts.live.get_mut(&slot.id) {
            entry.1 = Some(Arc::downgrade(shared));
        }
    }
}

impl SlotCounts {
    /// The oldest connection waiting for a request head of the peer holding the most, when
    /// that peer holds at least two more than `peer`: no longer counted, handed back to be
    /// shut down. `None` when there is none to displace.
    fn displace_for(&mut self, peer: Option<IpAddr>) -> Option<Arc<Shared>> {
        let mine = peer.and_then(|p| self.per_peer.get(&p).copied()).unwrap_or(0);
        let (&top, &n) = self.per_peer.iter().max_by_key(|(_, n)| **n)?;
        if n < mine + 2 {
            return None;
        }
        let mut ids: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, (p, _))| *p == Some(top))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        let (id, shared) = ids.into_iter().find_map(|id| {
            let shared = self.live[&id].1.as_ref()?.upgrade()?;
            shared.waits_for_head().then_some((id, shared))
        })?;
        self.live.remove(&id);
        self.uncount(Some(top));
        Some(shared)
    }

    fn uncount(&mut self, peer: Option<IpAddr>) {
        self.total = self.total.saturating_sub(1);
        if let Some(ip) = peer {
            if let Some(n) = self.per_peer.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.per_peer.remove(&ip);
                }
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self
            .slots
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A displaced connection was uncounted when it was displaced.
        if let Some((peer, _)) = counts.live.remove(&self.id) {
            counts.uncount(peer);
        }
    }
}

/// (cashcode patch) An accepted plain connection as its read and write halves share it:
/// one descriptor (upstream `dup`ed it with `try_clone`, which fails with `EMFILE` exactly
/// when descriptors run short, and unwrapped the result), its slot, and the deadline of the
/// request head being read.
#[derive(Debug)]
pub(crate) struct Shared {
    /// First, so it is dropped (and unregistered) before `conn` closes the descriptor.
    slot: Option<Slot>,
    conn: Connection,
    read_timeout: Option<Duration>,
    head_timeout: Option<Duration>,
    head: Mutex<HeadClock>,
}

#[derive(Debug, Default)]
struct HeadClock {
    /// Set while a request head is read.
    deadline: Option<Instant>,
    /// The socket's read timeout was shortened to meet `deadline` and is to be restored.
    shortened: bool,
}

impl Shared {
    pub(crate) fn new(conn: Connection, config: &ConnectionConfig, slot: Option<Slot>) -> Shared {
        Shared {
            slot,
            conn,
            read_timeout: config.read_timeout,
            head_timeout: config.head_timeout,
            head: Mutex::new(HeadClock::default()),
        }
    }

    /// Registers this connection with its slot's counter, so it can be displaced.
    pub(crate) fn register(self: &Arc<Self>) {
        if let Some(slot) = &self.slot {
            slot.slots.register(slot, self);
        }
    }

    /// Whether a request head is being waited for (between requests, or arriving).
    fn waits_for_head(&self) -> bool {
        self.clock().deadline.is_some()
    }

    /// Starts the head deadline (when the connection has one); reads from now on fail once
    /// it has passed.
    pub(crate) fn start_head(&self) {
        if let Some(timeout) = self.head_timeout {
            self.clock().deadline = Some(Instant::now() + timeout);
        }
    }

    /// The head is read: later reads (the body) wait `read_timeout` each again.
    pub(crate) fn end_head(&self) {
        self.clock().deadline = None;
    }

    fn clock(&self) -> std::sync::MutexGuard<'_, HeadClock> {
        self.head.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn peer_addr(&self) -> std::io::Result<Option<SocketAddr>> {
        match &self.conn {
            Connection::Tcp(s) => s.peer_addr().map(Some),
            #[cfg(unix)]
            Connection::Unix(_) => Ok(None),
        }
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> std::io::Result<()> {
        self.conn.shutdown(how)
    }

    /// Reads within the read timeout and, while a head is read, within its deadline: the
    /// socket's timeout is shortened to what is left of it.
    pub(crate) fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        let deadline = {
            let mut clock = self.clock();
            match clock.deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(head_too_slow());
                    }
                    let wait = self.read_timeout.map_or(left, |t| t.min(left));
                    self.conn.set_read_timeout(Some(wait))?;
                    clock.shortened = true;
                }
                None if clock.shortened => {
                    self.conn.set_read_timeout(self.read_timeout)?;
                    clock.shortened = false;
                }
                None => {}
            }
            clock.deadline
        };
        match self.conn.read_shared(buf) {
            Err(e)
                if deadline.is_some_and(|d| Instant::now() >= d)
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
            {
                Err(head_too_slow())
            }
            other => other,
        }
    }

    pub(crate) fn write(&self, buf: &[u8]) -> std::io::Result<usize> {
        self.conn.write_shared(buf)
    }

    pub(crate) fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// (cashcode patch) A head past its deadline ends the connection like a read that timed out
/// (`WouldBlock`, what `SO_RCVTIMEO` gives on Linux): closed without an answer.
fn head_too_slow() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::WouldBlock,
        "the request head did not arrive in time",
    )
}
impl From<TcpListener> for Listener {
    fn from(s: TcpListener) -> Self {
        Self::Tcp(s)
    }
}
#[cfg(unix)]
impl From<unix_net::UnixListener> for Listener {
    fn from(s: unix_net::UnixListener) -> Self {
        Self::Unix(s)
    }
}

/// Unified connection. Either a [`TcpStream`] or [`std::os::unix::net::UnixStream`].
#[derive(Debug)]
pub(crate) enum Connection {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(unix_net::UnixStream),
}
impl std::io::Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Self::Unix(s) => s.read(buf),
        }
    }
}
impl std::io::Write for Connection {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Self::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Tcp(s) => s.flush(),
            #[cfg(unix)]
            Self::Unix(s) => s.flush(),
        }
    }
}
impl Connection {
    /// Gets the peer's address. Some for TCP, None for Unix sockets.
    pub(crate) fn peer_addr(&mut self) -> std::io::Result<Option<SocketAddr>> {
        match self {
            Self::Tcp(s) => s.peer_addr().map(Some),
            #[cfg(unix)]
            Self::Unix(_) => Ok(None),
        }
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> std::io::Result<()> {
        match self {
            Self::Tcp(s) => s.shutdown(how),
            #[cfg(unix)]
            Self::Unix(s) => s.shutdown(how),
        }
    }

    /// (cashcode patch) Reads through a shared reference (both halves share one descriptor).
    fn read_shared(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Tcp(s) => (&*s).read(buf),
            #[cfg(unix)]
            Self::Unix(s) => (&*s).read(buf),
        }
    }

    /// (cashcode patch) Writes through a shared reference.
    fn write_shared(&self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Tcp(s) => (&*s).write(buf),
            #[cfg(unix)]
            Self::Unix(s) => (&*s).write(buf),
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        match self {
            Self::Tcp(s) => s.set_read_timeout(timeout),
            #[cfg(unix)]
            Self::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    /// (cashcode patch) Answers a connection over the limits `503` and closes it, on the
    /// accept thread: the write does not wait (a fresh socket's send buffer takes these few
    /// bytes; if not, the peer gets the close alone) and nothing is read.
    pub(crate) fn refuse_busy(self) {
        let nonblocking = match &self {
            Self::Tcp(s) => s.set_nonblocking(true),
            #[cfg(unix)]
            Self::Unix(s) => s.set_nonblocking(true),
        };
        if nonblocking.is_ok() {
            let _ = self.write_shared(
                b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n",
            );
        }
    }

    fn set_timeouts(&self, config: &ConnectionConfig) -> std::io::Result<()> {
        match self {
            Self::Tcp(s) => {
                s.set_read_timeout(config.read_timeout)?;
                s.set_write_timeout(config.write_timeout)
            }
            #[cfg(unix)]
            Self::Unix(s) => {
                s.set_read_timeout(config.read_timeout)?;
                s.set_write_timeout(config.write_timeout)
            }
        }
    }
}
impl From<TcpStream> for Connection {
    fn from(s: TcpStream) -> Self {
        Self::Tcp(s)
    }
}
#[cfg(unix)]
impl From<unix_net::UnixStream> for Connection {
    fn from(s: unix_net::UnixStream) -> Self {
        Self::Unix(s)
    }
}

#[derive(Debug, Clone)]
pub enum ConfigListenAddr {
    IP(Vec<SocketAddr>),
    #[cfg(unix)]
    // TODO: use SocketAddr when bind_addr is stabilized
    Unix(std::path::PathBuf),
}
impl ConfigListenAddr {
    pub fn from_socket_addrs<A: ToSocketAddrs>(addrs: A) -> std::io::Result<Self> {
        addrs.to_socket_addrs().map(|it| Self::IP(it.collect()))
    }

    #[cfg(unix)]
    pub fn unix_from_path<P: Into<PathBuf>>(path: P) -> Self {
        Self::Unix(path.into())
    }

    pub(crate) fn bind(&self) -> std::io::Result<Listener> {
        match self {
            Self::IP(a) => TcpListener::bind(a.as_slice()).map(Listener::from),
            #[cfg(unix)]
            Self::Unix(a) => unix_net::UnixListener::bind(a).map(Listener::from),
        }
    }
}

/// Unified listen socket address. Either a [`SocketAddr`] or [`std::os::unix::net::SocketAddr`].
#[derive(Debug, Clone)]
pub enum ListenAddr {
    IP(SocketAddr),
    #[cfg(unix)]
    Unix(unix_net::SocketAddr),
}
impl ListenAddr {
    pub fn to_ip(self) -> Option<SocketAddr> {
        match self {
            Self::IP(s) => Some(s),
            #[cfg(unix)]
            Self::Unix(_) => None,
        }
    }

    /// Gets the Unix socket address.
    ///
    /// This is also available on non-Unix platforms, for ease of use, but always returns `None`.
    #[cfg(unix)]
    pub fn to_unix(self) -> Option<unix_net::SocketAddr> {
        match self {
            Self::IP(_) => None,
            Self::Unix(s) => Some(s),
        }
    }
    #[cfg(not(unix))]
    pub fn to_unix(self) -> Option<SocketAddr> {
        None
    }
}
impl From<SocketAddr> for ListenAddr {
    fn from(s: SocketAddr) -> Self {
        Self::IP(s)
    }
}
#[cfg(unix)]
impl From<unix_net::SocketAddr> for ListenAddr {
    fn from(s: unix_net::SocketAddr) -> Self {
        Self::Unix(s)
    }
}
impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::IP(s) => s.fmt(f),
            #[cfg(unix)]
            Self::Unix(s) => std::fmt::Debug::fmt(s, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Connection, ConnectionConfig, Listener};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    #[test]
    fn accepted_connections_get_the_configured_timeouts() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let listener = Listener::from(listener);
        let _client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let config = ConnectionConfig {
            read_timeout: Some(Duration::from_millis(1500)),
            write_timeout: Some(Duration::from_millis(2500)),
            ..ConnectionConfig::default()
        };
        let (conn, addr) = listener.accept(&config).unwrap();
        assert!(addr.is_some());
        let Connection::Tcp(s) = conn else {
            panic!("a TCP listener accepted a Unix connection")
        };
        assert_eq!(s.read_timeout().unwrap(), config.read_timeout);
        assert_eq!(s.write_timeout().unwrap(), config.write_timeout);
        assert!(s.nodelay().unwrap());
    }

    #[test]
    fn without_a_config_accepted_connections_wait_forever() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let listener = Listener::from(listener);
        let _client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (conn, _) = listener.accept(&ConnectionConfig::default()).unwrap();
        let Connection::Tcp(s) = conn else {
            panic!("a TCP listener accepted a Unix connection")
        };
        assert_eq!(s.read_timeout().unwrap(), None);
        assert_eq!(s.write_timeout().unwrap(), None);
    }

    // (cashcode patch)
    #[test]
    fn slots_cap_each_peer_and_the_total_and_free_on_drop() {
        use super::Slots;
        let slots = Slots::new(&ConnectionConfig {
            max_connections: Some(3),
            max_per_peer: Some(2),
            ..ConnectionConfig::default()
        });
        let a = "127.0.0.2".parse().unwrap();
        let b = "127.0.0.3".parse().unwrap();
        let a1 = slots.admit(Some(a)).expect("a 1");
        let _a2 = slots.admit(Some(a)).expect("a 2");
        assert!(slots.admit(Some(a)).is_none(), "a third from one peer");
        // The same peer seen as an IPv4-mapped IPv6 address is still that peer.
        assert!(slots
            .admit(Some("::ffff:127.0.0.2".parse().unwrap()))
            .is_none());
        let _b1 = slots.admit(Some(b)).expect("b 1");
        assert!(slots.admit(Some(b)).is_none(), "a fourth in all");
        assert!(slots.admit(None).is_none(), "a fourth without an address");
        assert_eq!(slots.open(), 3);
        drop(a1);
        assert_eq!(slots.open(), 2);
        let _b2 = slots.admit(Some(b)).expect("the place a freed");
    }
}
