//! The WebSocket front door: the accept thread (`ws-accept`) admits each connection to its
//! opening handshake (`admit`: a few handshake threads, overall and per peer, apart from the
//! client budget; more wait parked, without a thread, or are closed at once). A `ws-handshake`
//! thread runs the handshake under one deadline for the whole of it; only a completed
//! handshake takes a client slot and gets its `ws-client-N` thread (see `client.rs`; a
//! `ws-writer-N` joins it only while its socket is slow). Handles are kept so server stop can
//! join every thread after the hub closed the connections. At most `max_clients` connections
//! are served; one more is closed with 1013 (Try Again Later) by its handshake thread. The hub
//! fans events out; `crate::wire` holds the event and frame types, `protocol` validates frames.

pub(crate) mod admit;
pub(crate) mod client;
mod direct;
pub mod hub;
pub(crate) mod protocol;

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::agent::Agent;
use crate::security::AccessPolicy;
use crate::util::sync;

/// Stack for per-client threads: they parse frames and format events, nothing deep.
pub(crate) const CLIENT_STACK: usize = 128 * 1024;
/// Pause after a failed `accept` (EMFILE and friends) before trying again.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// A repeated log line (accept errors, refusals) is written at most this often, with the
/// number of those left out.
const LOG_EVERY: Duration = Duration::from_secs(1);
/// Answer to a connection refused before its handshake (written only if the socket takes it
/// at once).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// Shared by every client thread.
pub(crate) struct WsShared {
    pub(crate) hub: Arc<hub::Hub>,
    pub(crate) agent: Arc<Agent>,
    pub(crate) policy: AccessPolicy,
    pub(crate) shutdown: AtomicBool,
    /// Served connections not yet ended (counted once the handshake completed; handshakes
    /// in flight are counted by `handshakes` only).
    pub(crate) live_clients: AtomicUsize,
    /// `CASHCODE_MAX_CLIENTS`.
    pub(crate) max_clients: usize,
    /// `CASHCODE_WS_PING_SECS`: a peer silent this long is pinged, twice this long dropped.
    pub(crate) ping_interval: Duration,
    /// Connections admitted to their handshake, running or parked.
    pub(crate) handshakes: admit::Gate<(TcpStream, u64)>,
    next_id: AtomicU64,
    /// `ws-handshake` and `ws-client-N` threads not yet seen finished (pruned at each spawn
    /// and as each client ends, so finished threads are released at once rather than at stop).
    clients: Mutex<Vec<JoinHandle<()>>>,
}

impl WsShared {
    pub(crate) fn new(
        hub: Arc<hub::Hub>,
        agent: Arc<Agent>,
        policy: AccessPolicy,
        max_clients: usize,
        ping_interval: Duration,
    ) -> Self {
        WsShared {
            hub,
            agent,
            policy,
            shutdown: AtomicBool::new(false),
            live_clients: AtomicUsize::new(0),
            max_clients,
            ping_interval,
            handshakes: admit::Gate::new(admit::Limits::for_clients(max_clients)),
            next_id: AtomicU64::new(1),
            clients: Mutex::new(Vec::new()),
        }
    }

    fn prune_clients(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        let mut clients = sync::lock(&self.clients);
        clients.retain(|h| !h.is_finished());
        clients
    }

    /// Server stop, after the hub closed every connection: joins the client threads until
    /// `deadline`; returns the names of those still running then.
    pub(crate) fn join_clients(&self, deadline: Instant) -> Vec<String> {
        let clients = std::mem::take(&mut *sync::lock(&self.clients));
        clients.into_iter().filter_map(|h| crate::util::join::join_until(h, deadline).err()).collect()
    }
}

/// A log line repeated at most once per [`LOG_EVERY`]; `tick` says whether to write it now
/// and how many were left out since the last one.
#[derive(Default)]
struct Every {
    last: Option<Instant>,
    skipped: u64,
}

impl Every {
    fn tick(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|l| now.duration_since(l) < LOG_EVERY) {
            self.skipped += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.skipped))
    }
}

/// Accept loop; returns when `shared.shutdown` is set (woken by a self-connect). It never
/// leaves on an error: a failed accept is logged and retried after [`ACCEPT_PAUSE`].
pub(crate) fn accept_loop(listener: TcpListener, shared: Arc<WsShared>) {
    let (mut accept_errors, mut refusals) = (Every::default(), Every::default());
    for stream in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                if let Some(skipped) = accept_errors.tick(Instant::now()) {
                    log::warn!("event=ws.accept.failed error_kind={:?} error=\"{e}\" repeats={skipped}", e.kind());
                }
                // EMFILE and friends: the connection stays queued; back off instead of spinning.
                thread::sleep(ACCEPT_PAUSE);
                continue;
            }
        };
        // Gone already (reset before we got to it): nothing to serve. Non-blocking while it
        // waits, so `head_complete` can look at it without waiting (the handshake thread makes
        // it blocking again).
        let Ok(peer) = stream.peer_addr() else { continue };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        match shared.handshakes.admit((stream, id), admit::peer_key(peer.ip()), now) {
            admit::Admit::Run(pending) => start_handshake(pending, &shared),
            admit::Admit::Parked => {}
            admit::Admit::Displaced((stream, _), from) => {
                refuse_busy(stream);
                if let Some(skipped) = refusals.tick(now) {
                    log::warn!("event=ws.handshake.displaced peer={from} by={} repeats={skipped}", peer.ip());
                }
            }
            admit::Admit::Refused((stream, _), full) => {
                refuse_busy(stream);
                if let Some(skipped) = refusals.tick(now) {
                    let (running, parked) = shared.handshakes.counts();
                    log::warn!(
                        "event=ws.handshake.refused reason=busy scope={} peer={} running={running} parked={parked} \
                         repeats={skipped}",
                        full.as_str(),
                        peer.ip()
                    );
                }
            }
        }
    }
    shared.handshakes.clear();
}

/// A connection refused before its handshake (non-blocking): a short 503 if the socket takes
/// it at once (a fresh socket's buffer is empty), then closed; no thread is spent on it.
fn refuse_busy(mut stream: TcpStream) {
    use std::io::Write;
    let _ = stream.write(BUSY);
}

/// Whether a parked (non-blocking) connection's whole request head has arrived, looking at
/// its first 4 KiB without taking them (a browser sends its head in one packet).
fn head_complete(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    match stream.peek(&mut buf) {
        Ok(n) => buf[..n].windows(4).any(|w| w == b"\r\n\r\n"),
        Err(_) => false,
    }
}

/// Starts a `ws-handshake` thread for `first`; it serves parked connections after it while
/// there are any it may take. If the thread cannot start, that connection is dropped.
fn start_handshake(first: admit::Pending<(TcpStream, u64)>, shared: &Arc<WsShared>) {
    let peer = first.peer;
    let s2 = Arc::clone(shared);
    let mut clients = shared.prune_clients();
    let spawned = thread::Builder::new().name("ws-handshake".into()).stack_size(CLIENT_STACK).spawn(move || {
        let mut next = Some(first);
        while let Some(p) = next {
            let (stream, id) = p.item;
            if !s2.shutdown.load(Ordering::SeqCst) {
                client::handshake_and_start(stream, id, p.deadline, &s2);
            }
            next = s2.handshakes.finish(p.peer, Instant::now(), |(stream, _)| head_complete(stream));
        }
    });
    match spawned {
        Ok(h) => clients.push(h),
        Err(e) => {
            drop(clients);
            // The closure never ran: its connection is dropped and its slot freed; a parked
            // connection this hands back is dropped too (no thread could start for it either).
            let mut next = shared.handshakes.finish(peer, Instant::now(), |_| false);
            while let Some(p) = next {
                next = shared.handshakes.finish(p.peer, Instant::now(), |_| false);
            }
            log::error!("event=ws.handshake.spawn_failed error=\"{e}\"");
        }
    }
}

/// Starts the `ws-client-N` thread for a connection whose handshake completed and which holds a
/// client slot; at stop (the flag is read under the same lock `join_clients` takes the
/// handles with, so every client started is joined) or if the thread cannot start, the
/// connection is dropped and the slot freed.
pub(crate) fn start_client(ws: tungstenite::WebSocket<client::ReaderIo>, id: u64, shared: &Arc<WsShared>) {
    let mut clients = shared.prune_clients();
    let release = |shared: &WsShared| {
        if shared.live_clients.fetch_sub(1, Ordering::SeqCst) == 1 {
            crate::util::malloc::release_free_memory();
        }
    };
    if shared.shutdown.load(Ordering::SeqCst) {
        release(shared);
        return;
    }
    let s2 = Arc::clone(shared);
    let spawned = thread::Builder::new().name(format!("ws-client-{id}")).stack_size(CLIENT_STACK).spawn(move || {
        client::serve(ws, id, &s2);
        drop(s2.prune_clients());
        release(&s2);
    });
    match spawned {
        Ok(h) => clients.push(h),
        Err(e) => {
            release(shared);
            log::error!("event=ws.client.spawn_failed error=\"{e}\"");
        }
    }
}
