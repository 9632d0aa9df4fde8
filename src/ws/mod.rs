//! The WebSocket front door: the accept thread (`ws-accept`) hands each connection to its own
//! `ws-client-N` thread (see `client.rs`; a `ws-writer-N` joins it only while its socket is
//! slow) and keeps its handle, so server stop can join every client after the hub closed them. At most `max_clients` connections are served; one more
//! completes its handshake and is closed with 1013 (Try Again Later). The hub fans events out;
//! `crate::wire` holds the event and frame types, `protocol` validates frames.

pub(crate) mod client;
mod direct;
pub mod hub;
pub(crate) mod protocol;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::agent::Agent;
use crate::security::AccessPolicy;
use crate::util::sync;

/// Stack for per-client threads: they parse frames and format events, nothing deep.
pub(crate) const CLIENT_STACK: usize = 128 * 1024;
/// Connections over the client cap being told so (handshake, 1013 close) at one time; past
/// this a connection over the cap is dropped without a handshake, so a flood cannot turn the
/// refusals themselves into unbounded threads.
pub(crate) const MAX_REFUSING: usize = 64;

/// Shared by every client thread.
pub(crate) struct WsShared {
    pub(crate) hub: Arc<hub::Hub>,
    pub(crate) agent: Arc<Agent>,
    pub(crate) policy: AccessPolicy,
    pub(crate) shutdown: AtomicBool,
    /// Connections admitted and not yet ended (counted at accept, so handshakes in flight
    /// count against [`WsShared::max_clients`]).
    pub(crate) live_clients: AtomicUsize,
    /// `CASHCODE_MAX_CLIENTS`.
    pub(crate) max_clients: usize,
    /// `CASHCODE_WS_PING_SECS`: a peer silent this long is pinged, twice this long dropped.
    pub(crate) ping_interval: Duration,
    /// Connections over the cap whose refusal is in progress (at most [`MAX_REFUSING`]).
    refusing: AtomicUsize,
    next_id: AtomicU64,
    /// `ws-client-N` threads not yet seen finished (pruned at each accept and as each client
    /// ends, so finished threads are released at once rather than at stop).
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
            refusing: AtomicUsize::new(0),
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

/// Accept loop; returns when `shared.shutdown` is set (woken by a self-connect).
pub(crate) fn accept_loop(listener: TcpListener, shared: Arc<WsShared>) {
    for stream in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                log::warn!("event=ws.accept.failed error_kind={:?}", e.kind());
                // EMFILE and friends: back off briefly instead of spinning.
                thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let admitted = shared.live_clients.fetch_add(1, Ordering::SeqCst) < shared.max_clients;
        if !admitted {
            shared.live_clients.fetch_sub(1, Ordering::SeqCst);
            if shared.refusing.fetch_add(1, Ordering::SeqCst) >= MAX_REFUSING {
                shared.refusing.fetch_sub(1, Ordering::SeqCst);
                log::warn!("event=ws.client.dropped reason=max_clients conn={id}");
                continue;
            }
        }
        let s2 = Arc::clone(&shared);
        let spawned =
            thread::Builder::new().name(format!("ws-client-{id}")).stack_size(CLIENT_STACK).spawn(move || {
                if !admitted {
                    client::refuse_full(stream, id, &s2);
                    s2.refusing.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
                client::serve(stream, id, &s2);
                drop(s2.prune_clients());
                if s2.live_clients.fetch_sub(1, Ordering::SeqCst) == 1 {
                    crate::util::malloc::release_free_memory();
                }
            });
        match spawned {
            Ok(h) => shared.prune_clients().push(h),
            Err(e) => {
                // The closure (and its count) never ran.
                let count = if admitted { &shared.live_clients } else { &shared.refusing };
                count.fetch_sub(1, Ordering::SeqCst);
                log::error!("event=ws.client.spawn_failed error=\"{e}\"");
            }
        }
    }
}
