//! The hub: chat id -> subscribed connections, a per-chat increasing `seq`, and a bounded ring
//! of recent events per chat for `attach { after_seq }` replay. Fan-out never blocks: each
//! connection has a capped outbound queue and one that is full is dropped (a frame goes
//! straight to the socket instead when that cannot block, `Conn::send`; a connection's writer
//! thread starts only when something must be queued). Called from workers (emit) and
//! WebSocket reader threads (subscribe, attach). Each chat's channel has its own lock, taken
//! after the map's (never the other way round): the map's lock is held only to find a channel,
//! so turns of different chats never wait for each other's socket writes.

use std::collections::{HashMap, VecDeque};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::direct::Sent;
use crate::bus::EventSink;
use crate::store::seq::SeqMarks;
use crate::util::sync;
use crate::wire::{self, Event};

/// Events kept per chat for replay.
pub(crate) const RING_CAPACITY: usize = 4096;
/// Bytes of events kept per chat for replay: older events leave the ring past either bound
/// (the newest event is always kept, and a single event is at most about an answer's cap).
pub(crate) const RING_BYTES: usize = 2 * 1024 * 1024;
/// Bytes of every chat's replay ring together: past it, whole rings of the chats quiet
/// longest (those without subscribers first) are dropped until a quarter is free again. A
/// client that attaches behind a dropped ring is told to reload, as after a restart.
pub(crate) const RINGS_BYTES: usize = 32 * 1024 * 1024;
/// Expired chats whose last seq is remembered (about 100 bytes each); past this they are all
/// forgotten at once.
pub(crate) const MAX_RETIRED: usize = 100_000;
/// Frames queued for one connection; a client this far behind is dropped.
pub(crate) const OUT_QUEUE: usize = 4096;
/// Bytes queued for one connection; a client this far behind is dropped as well. Checked
/// before a push, so one frame of any size always fits an empty queue.
pub(crate) const OUT_QUEUE_BYTES: usize = 4 * 1024 * 1024;
/// Chats one connection is subscribed to at most: joining one more leaves the one it joined
/// first, so a client attaching to ever new chats cannot grow the hub without bound.
pub(crate) const MAX_CHATS_PER_CONN: usize = 1024;
const PRUNE_EVERY: Duration = Duration::from_secs(30);
/// Seqs reserved per write of a chat's high-water mark ([`SeqMarks`]): a chat's mark is
/// written once per this many events, never per event.
pub(crate) const SEQ_BLOCK: u64 = 1024;

/// A connection's outbound queue. The caps ([`OUT_QUEUE`], [`OUT_QUEUE_BYTES`]) are checked on
/// every push ([`Conn::send`], [`Conn::push`]) rather than by a bounded channel: crossbeam allocates a bounded
/// channel's every slot up front (160 KiB here), while an unbounded one grows in 31-slot
/// blocks. Per connection that was most of a 1,000-client burst's 190 MiB peak.
pub(crate) fn out_queue() -> (Sender<Out>, Receiver<Out>) {
    crossbeam_channel::unbounded()
}

/// What a connection's writer thread sends.
#[derive(Debug)]
pub enum Out {
    /// A JSON text frame.
    Text(Arc<str>),
    /// Raw protocol bytes from the reader side (pings, pong and close replies).
    Raw(Vec<u8>),
    /// Close the connection.
    Close,
}

impl Out {
    /// Bytes it holds in a queue.
    fn size(&self) -> usize {
        match self {
            Out::Text(t) => t.len(),
            Out::Raw(b) => b.len(),
            Out::Close => 0,
        }
    }
}

/// Starts a connection's writer thread (`ws-writer-N`), which drains its queue.
pub(crate) type StartWriter = Box<dyn FnOnce(&Arc<Conn>) -> std::io::Result<JoinHandle<()>> + Send>;

/// A connection's writer thread. Most connections never need one: their frames go straight to
/// the socket. It is started by the first frame that has to be queued (a socket that did not
/// take a frame at once, or a write racing another) and runs until the connection ends.
enum Writer {
    /// Not started; `None` where the queue is read directly (tests).
    Idle(Option<StartWriter>),
    Running(JoinHandle<()>),
    Ended,
}

/// One WebSocket connection as the hub sees it.
pub struct Conn {
    pub(crate) id: u64,
    tx: Sender<Out>,
    /// Bytes of the frames in `tx` ([`OUT_QUEUE_BYTES`]); the writer takes them off
    /// ([`Conn::dequeued`]).
    queued_bytes: AtomicUsize,
    closed: AtomicBool,
    stream: Option<TcpStream>,
    /// The chats it joined, oldest first (at most [`MAX_CHATS_PER_CONN`]).
    chats: Mutex<VecDeque<String>>,
    /// Held by whoever writes to the socket: the writer thread while it drains a batch, or an
    /// emitting thread writing a frame directly ([`super::direct`]) when the queue is empty.
    /// The writer takes frames off the queue only under it, so a direct write never
    /// overtakes a queued frame.
    write_lock: Mutex<()>,
    writer: Mutex<Writer>,
    me: Weak<Conn>,
}

impl Conn {
    /// A connection whose queue is read by the caller (no writer thread).
    pub fn new(id: u64, tx: Sender<Out>, stream: Option<TcpStream>) -> Arc<Conn> {
        Self::build(id, tx, stream, None)
    }

    /// A connection on `stream` whose writer thread `start` starts when first needed.
    pub(crate) fn with_writer(id: u64, tx: Sender<Out>, stream: TcpStream, start: StartWriter) -> Arc<Conn> {
        Self::build(id, tx, Some(stream), Some(start))
    }

    fn build(id: u64, tx: Sender<Out>, stream: Option<TcpStream>, start: Option<StartWriter>) -> Arc<Conn> {
        Arc::new_cyclic(|me| Conn {
            id,
            tx,
            queued_bytes: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            stream,
            chats: Mutex::new(VecDeque::new()),
            write_lock: Mutex::new(()),
            writer: Mutex::new(Writer::Idle(start)),
            me: me.clone(),
        })
    }

    /// A handle of the socket for the writer thread.
    pub(super) fn clone_stream(&self) -> std::io::Result<TcpStream> {
        match &self.stream {
            Some(s) => s.try_clone(),
            None => Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "no socket")),
        }
    }

    fn writer(&self) -> MutexGuard<'_, Writer> {
        sync::lock(&self.writer)
    }

    /// Starts the writer thread unless it runs (or the queue is read directly); false when
    /// it cannot start (the connection is then closed).
    fn ensure_writer(&self) -> bool {
        let mut w = self.writer();
        let Writer::Idle(start) = &mut *w else { return true };
        let (Some(start), Some(me)) = (start.take(), self.me.upgrade()) else { return true };
        match start(&me) {
            Ok(h) => {
                *w = Writer::Running(h);
                log::debug!("event=ws.writer.started conn={}", self.id);
                true
            }
            Err(e) => {
                *w = Writer::Ended;
                drop(w);
                log::error!("event=ws.writer.spawn_failed conn={} error=\"{e}\"", self.id);
                self.close();
                false
            }
        }
    }

    /// The reader thread, when the connection is over: a running writer writes what is
    /// queued and stops (joined here), then the socket is shut.
    pub(crate) fn end(&self) {
        let w = std::mem::replace(&mut *self.writer(), Writer::Ended);
        if let Writer::Running(h) = w {
            if self.push(Out::Close).is_err() {
                // A full queue: shut the socket so the writer's next write fails.
                self.close();
            }
            let _ = h.join();
        }
        self.close();
    }

    /// The writer thread's hold on the socket (see `write_lock`).
    pub(super) fn write_lock(&self) -> MutexGuard<'_, ()> {
        sync::lock(&self.write_lock)
    }

    /// Writes text frames straight to the socket if nothing is queued, the writer is idle
    /// and the socket takes them without blocking; else queues what it did not take (the rest
    /// of a partial frame as raw bytes). Never waits.
    fn send_direct(&self, texts: &[Arc<str>]) -> bool {
        let mut from = 0;
        // Held until the rest is queued, so the writer cannot take a frame in between.
        let held = self.write_lock.try_lock();
        if let (Some(stream), Ok(_)) = (&self.stream, &held) {
            if self.tx.is_empty() && !self.closed.load(Ordering::Relaxed) {
                match super::direct::send_texts(stream, texts) {
                    Sent::All => return true,
                    Sent::Part { whole, rest } if rest.is_empty() => from = whole,
                    Sent::Part { whole, rest } => {
                        if !self.queue(Out::Raw(rest)) {
                            return false;
                        }
                        from = whole + 1;
                    }
                    Sent::Nothing => {}
                }
            }
        }
        texts[from..].iter().all(|t| self.queue(Out::Text(Arc::clone(t))))
    }

    /// Sends a frame: text directly when that cannot block ([`Conn::send_direct`]), else
    /// queued; a full queue marks the connection dead and shuts its socket.
    pub(crate) fn send(&self, out: Out) -> bool {
        if self.closed.load(Ordering::Relaxed) {
            return false;
        }
        match out {
            Out::Text(text) => self.send_direct(std::slice::from_ref(&text)),
            Out::Raw(bytes) => self.send_raw(bytes),
            Out::Close => {
                if matches!(*self.writer(), Writer::Running(_)) {
                    self.queue(Out::Close)
                } else {
                    // Nothing queued, nobody writing: close now.
                    self.close();
                    true
                }
            }
        }
    }

    /// [`Conn::send_direct`] for protocol bytes (pings, pongs, close replies).
    fn send_raw(&self, bytes: Vec<u8>) -> bool {
        let held = self.write_lock.try_lock();
        if let (Some(stream), Ok(_)) = (&self.stream, &held) {
            if self.tx.is_empty() && !self.closed.load(Ordering::Relaxed) {
                match super::direct::send_bytes(stream, &bytes) {
                    Some(n) if n == bytes.len() => return true,
                    Some(n) => return self.queue(Out::Raw(bytes[n..].to_vec())),
                    None => {}
                }
            }
        }
        self.queue(Out::Raw(bytes))
    }

    /// Sends text frames in order, as [`Conn::send`] does one (together when they go direct).
    pub(crate) fn send_all(&self, texts: &[Arc<str>]) -> bool {
        !self.closed.load(Ordering::Relaxed) && self.send_direct(texts)
    }

    fn queue(&self, out: Out) -> bool {
        if !self.ensure_writer() {
            return false;
        }
        match self.push(out) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                log::warn!("event=ws.client.dropped reason=slow conn={}", self.id);
                self.close();
                false
            }
            Err(TrySendError::Disconnected(_)) => {
                self.closed.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    /// Queues `out` unless the queue already holds [`OUT_QUEUE`] frames or [`OUT_QUEUE_BYTES`]
    /// bytes.
    pub(crate) fn push(&self, out: Out) -> Result<(), TrySendError<Out>> {
        if self.tx.len() >= OUT_QUEUE || self.queued_bytes.load(Ordering::Relaxed) >= OUT_QUEUE_BYTES {
            return Err(TrySendError::Full(out));
        }
        let size = out.size();
        self.queued_bytes.fetch_add(size, Ordering::Relaxed);
        self.tx.try_send(out).inspect_err(|_| {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
        })
    }

    /// The writer thread took `out` off the queue.
    pub(super) fn dequeued(&self, out: &Out) {
        self.queued_bytes.fetch_sub(out.size(), Ordering::Relaxed);
    }

    pub(crate) fn send_text(&self, text: impl Into<Arc<str>>) -> bool {
        self.send(Out::Text(text.into()))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Marks the connection closed and shuts the socket so both its threads end.
    pub(crate) fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            if let Some(s) = &self.stream {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

struct ChatChan {
    /// False once pruned out of the map: a thread that found it before then looks again.
    live: bool,
    seq: u64,
    /// Every event after this seq is still in the ring (older ones were dropped or belong to
    /// an earlier run of the server).
    replay_from: u64,
    /// The persisted high-water mark: seqs up to it may be handed out without a write.
    reserved: u64,
    ring: VecDeque<(u64, Arc<str>)>,
    /// Bytes of the events in `ring` ([`RING_BYTES`]).
    ring_bytes: usize,
    subs: Vec<Arc<Conn>>,
    last_event: Instant,
    /// The running turn's `turn_started` (sent without a seq) and the chat's seq when it went;
    /// none once the turn's `done` or `error` went. An `attach` resuming from that seq or before
    /// gets it in its place.
    turn: Option<(u64, Arc<str>)>,
}

impl ChatChan {
    fn new(seq: u64) -> Self {
        ChatChan {
            live: true,
            seq,
            replay_from: seq,
            reserved: seq,
            ring: VecDeque::new(),
            ring_bytes: 0,
            subs: Vec::new(),
            last_event: Instant::now(),
            turn: None,
        }
    }
}

impl ChatChan {
    /// Empties the ring (its events can no longer be replayed); returns the bytes it held.
    fn drop_ring(&mut self) -> usize {
        self.replay_from = self.seq;
        self.ring = VecDeque::new();
        std::mem::take(&mut self.ring_bytes)
    }
}

/// A chat's channel, locked on its own.
type Chan = Arc<Mutex<ChatChan>>;

fn lock_chan(chan: &Chan) -> MutexGuard<'_, ChatChan> {
    sync::lock(chan)
}

struct Inner {
    chats: HashMap<String, Chan>,
    /// Last seq of chats whose ring was pruned, so their seq goes on (at most [`MAX_RETIRED`]).
    retired: HashMap<String, u64>,
    last_prune: Instant,
    ring_ttl: Duration,
    /// The hub's [`Hub::rings_bytes`], which a prune lowers by the rings it drops.
    rings_bytes: Arc<AtomicUsize>,
}

pub struct Hub {
    inner: Mutex<Inner>,
    marks: Option<Arc<dyn SeqMarks>>,
    /// Bytes in every chat's ring ([`RINGS_BYTES`]).
    rings_bytes: Arc<AtomicUsize>,
}

impl Hub {
    /// `ring_ttl`: how long a quiet chat without subscribers stays replayable (the config's
    /// `replay_ttl`).
    #[cfg(test)]
    pub(crate) fn new(ring_ttl: Duration) -> Hub {
        Hub::build(ring_ttl, None)
    }

    /// A hub whose chats' seqs survive restarts through `marks`.
    pub(crate) fn with_marks(ring_ttl: Duration, marks: Arc<dyn SeqMarks>) -> Hub {
        Hub::build(ring_ttl, Some(marks))
    }

    fn build(ring_ttl: Duration, marks: Option<Arc<dyn SeqMarks>>) -> Hub {
        let rings_bytes = Arc::new(AtomicUsize::new(0));
        let inner = Inner {
            chats: HashMap::new(),
            retired: HashMap::new(),
            last_prune: Instant::now(),
            ring_ttl,
            rings_bytes: Arc::clone(&rings_bytes),
        };
        Hub { inner: Mutex::new(inner), marks, rings_bytes }
    }

    /// Server stop: writes every live chat's exact last seq as its mark, so after a clean
    /// restart a client that saw everything needs no reload.
    pub(crate) fn persist_seqs(&self) {
        let Some(marks) = &self.marks else { return };
        for (id, chan) in
            self.with(|inner| inner.chats.iter().map(|(id, c)| (id.clone(), Arc::clone(c))).collect::<Vec<_>>())
        {
            let seq = lock_chan(&chan).seq;
            if seq > 0 {
                let _ = marks.save(&id, seq);
            }
        }
    }

    /// Drops the rings of chats idle past the TTL without subscribers (also done lazily on
    /// `emit`, but a server that went quiet after a burst emits nothing). Returns how many.
    /// Called by the housekeeping timer.
    pub(crate) fn prune_idle(&self) -> usize {
        self.with(|inner| prune(inner, true))
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g: MutexGuard<'_, Inner> = sync::lock(&self.inner);
        f(&mut g)
    }

    /// The chat's channel, created when missing; a due prune runs first when `prune_due`.
    fn lookup(&self, chat_id: &str, prune_due: bool) -> Chan {
        self.with(|inner| {
            if prune_due {
                prune(inner, false);
            }
            chan_in(inner, chat_id, self.marks.as_deref())
        })
    }

    /// Runs `f` on the chat's channel under that channel's lock alone. A channel pruned between
    /// the lookup and the lock is found again under the map's lock, which no prune can then
    /// come between (so its seq goes on from the retired mark, and no emit retries forever).
    fn with_chan<R>(&self, chat_id: &str, prune_due: bool, f: impl FnOnce(&mut ChatChan) -> R) -> R {
        let chan = self.lookup(chat_id, prune_due);
        let mut c = lock_chan(&chan);
        if c.live {
            return f(&mut c);
        }
        drop(c);
        self.with(|inner| {
            let chan = chan_in(inner, chat_id, self.marks.as_deref());
            let mut c = lock_chan(&chan);
            f(&mut c)
        })
    }

    /// The chats' channels, for walks that lock each in turn without holding the map.
    fn channels(&self) -> Vec<Chan> {
        self.with(|inner| inner.chats.values().cloned().collect())
    }

    /// Subscribes `conn` to `chat_id` (idempotent).
    pub fn subscribe(&self, chat_id: &str, conn: &Arc<Conn>) {
        let left = self.with_chan(chat_id, false, |chan| join(chan, chat_id, conn));
        self.leave(left, conn);
    }

    /// Subscribes, sends `attached` and replays events with seq > `after_seq`, atomically
    /// with respect to new events so the client sees neither a gap nor a duplicate.
    pub(crate) fn attach(&self, chat_id: &str, conn: &Arc<Conn>, after_seq: Option<u64>) {
        let left = self.with_chan(chat_id, false, |chan| {
            let left = join(chan, chat_id, conn);
            let reload = after_seq.is_some_and(|a| a < chan.replay_from);
            conn.send_text(Event::Attached { chat_id, last_seq: chan.seq, reload }.to_text(None));
            if let Some(after) = after_seq.filter(|_| !reload) {
                // A client resuming from at or before the running turn's start gets its
                // `turn_started` where it went (right after the event it followed).
                let turn = chan.turn.as_ref().filter(|(from, _)| after <= *from && *from >= chan.replay_from);
                if let Some((_, text)) = turn.filter(|(from, _)| *from == after) {
                    conn.send(Out::Text(Arc::clone(text)));
                }
                for (seq, text) in chan.ring.iter() {
                    if *seq > after && !conn.send(Out::Text(Arc::clone(text))) {
                        break;
                    }
                    if let Some((_, started)) = turn.filter(|(from, _)| from == seq && *seq > after) {
                        conn.send(Out::Text(Arc::clone(started)));
                    }
                }
            }
            left
        });
        self.leave(left, conn);
    }

    /// Takes `conn` off the chat it left when it joined one too many (after the joined
    /// channel's lock is released: one channel's lock is never taken under another's).
    fn leave(&self, chat_id: Option<String>, conn: &Conn) {
        let Some(id) = chat_id else { return };
        if let Some(chan) = self.with(|inner| inner.chats.get(&id).cloned()) {
            lock_chan(&chan).subs.retain(|c| c.id != conn.id);
        }
    }

    /// Removes a closed connection from every chat it joined.
    pub fn disconnect(&self, conn: &Conn) {
        let chats = std::mem::take(&mut *sync::lock(&conn.chats));
        let chans: Vec<Chan> = self.with(|inner| chats.iter().filter_map(|id| inner.chats.get(id).cloned()).collect());
        for chan in chans {
            lock_chan(&chan).subs.retain(|c| c.id != conn.id);
        }
    }

    /// Current subscriber count of a chat (tests, diagnostics).
    pub(crate) fn subscribers(&self, chat_id: &str) -> usize {
        self.with(|inner| inner.chats.get(chat_id).cloned()).map_or(0, |c| lock_chan(&c).subs.len())
    }

    /// Number of chats with a live ring (diagnostics, leak checks).
    #[cfg(test)]
    pub(crate) fn chats(&self) -> usize {
        self.with(|inner| inner.chats.len())
    }

    /// Server stop, first step: every connection closes once the frames already queued for it
    /// are written (its writer thread sends them, then shuts the socket), so clients receive the
    /// closing events of the turns that were just cancelled.
    pub(crate) fn close_all(&self) {
        for chan in self.channels() {
            for c in &lock_chan(&chan).subs {
                c.send(Out::Close);
            }
        }
    }

    /// Server stop, for connections still open after [`Hub::close_all`] had its moment (a
    /// client not reading): their sockets are shut now, which ends both their threads.
    pub(crate) fn shut_all(&self) {
        for chan in self.channels() {
            for c in &lock_chan(&chan).subs {
                c.close();
            }
        }
    }
}

/// Adds `conn` to the channel (idempotent); returns the chat it must leave to stay within
/// [`MAX_CHATS_PER_CONN`].
fn join(chan: &mut ChatChan, chat_id: &str, conn: &Arc<Conn>) -> Option<String> {
    if chan.subs.iter().any(|c| c.id == conn.id) {
        return None;
    }
    chan.subs.push(Arc::clone(conn));
    let mut chats = sync::lock(&conn.chats);
    chats.push_back(chat_id.to_string());
    (chats.len() > MAX_CHATS_PER_CONN).then(|| chats.pop_front()).flatten()
}

/// The chat's channel in the map, created when missing: its seq goes on from the retired
/// mark, else from the persisted one.
fn chan_in(inner: &mut Inner, chat_id: &str, marks: Option<&dyn SeqMarks>) -> Chan {
    if let Some(chan) = inner.chats.get(chat_id) {
        return Arc::clone(chan);
    }
    let seq = match inner.retired.remove(chat_id) {
        Some(seq) => seq,
        None => marks.map_or(0, |m| m.load(chat_id)),
    };
    let chan = Arc::new(Mutex::new(ChatChan::new(seq)));
    inner.chats.insert(chat_id.to_string(), Arc::clone(&chan));
    chan
}

/// Drops idle rings, at most once per `PRUNE_EVERY` unless `now`; returns how many were dropped.
fn prune(inner: &mut Inner, now: bool) -> usize {
    if !now && inner.last_prune.elapsed() < PRUNE_EVERY {
        return 0;
    }
    inner.last_prune = Instant::now();
    let ttl = inner.ring_ttl;
    let mut retired = Vec::new();
    let before = inner.chats.len();
    inner.chats.retain(|id, chan| {
        let mut chan = lock_chan(chan);
        chan.subs.retain(|c| !c.is_closed());
        let keep = !chan.subs.is_empty() || chan.last_event.elapsed() < ttl;
        if !keep {
            chan.live = false;
            inner.rings_bytes.fetch_sub(chan.drop_ring(), Ordering::Relaxed);
            // A chat that never had an event (every connection's fresh chat) starts at 0 again.
            if chan.seq > 0 {
                retired.push((id.clone(), chan.seq));
            }
        }
        keep
    });
    let dropped = before - inner.chats.len();
    if inner.retired.len() + retired.len() > MAX_RETIRED {
        // Forgotten seqs restart at 1; a client that attaches with a higher `after_seq` sees a
        // lower `last_seq` and reloads the transcript, as after a server restart.
        inner.retired = HashMap::new();
    }
    retired.truncate(MAX_RETIRED);
    inner.retired.extend(retired);
    if dropped > 0 {
        inner.chats.shrink_to_fit();
    }
    dropped
}

impl EventSink for Hub {
    fn emit_transient(&self, chat_id: &str, event: &Event<'_>) {
        let text: Arc<str> = event.to_text(None).into();
        self.with_chan(chat_id, true, |chan| {
            if matches!(event, Event::TurnStarted { .. }) {
                chan.turn = Some((chan.seq, Arc::clone(&text)));
            }
            chan.subs.retain(|c| c.send_all(std::slice::from_ref(&text)));
        });
    }

    fn subscribers(&self, chat_id: &str) -> usize {
        Hub::subscribers(self, chat_id)
    }

    fn turn_seq(&self, chat_id: &str) -> Option<u64> {
        let chan = self.with(|inner| inner.chats.get(chat_id).cloned())?;
        let c = lock_chan(&chan);
        c.turn.as_ref().filter(|(from, _)| *from >= c.replay_from).map(|(from, _)| *from)
    }

    fn broadcast(&self, event: &Event<'_>) {
        let text: Arc<str> = event.to_text(None).into();
        let mut sent = std::collections::HashSet::new();
        for chan in self.channels() {
            for c in &lock_chan(&chan).subs {
                if sent.insert(c.id) {
                    c.send(Out::Text(Arc::clone(&text)));
                }
            }
        }
    }

    fn emit(&self, chat_id: &str, event: &Event<'_>) -> u64 {
        self.emit_all(chat_id, std::slice::from_ref(event))
    }

    fn emit_all(&self, chat_id: &str, events: &[Event<'_>]) -> u64 {
        // Serialised before the lock; only the seqs are spliced in under it.
        let bodies: Vec<String> = events.iter().map(|e| e.to_text(None)).collect();
        // A turn's end: a plain attach no longer replays it.
        let ends = events.iter().any(|e| matches!(e, Event::Done { .. } | Event::Error { .. }));
        let marks = &self.marks;
        let seq = self.with_chan(chat_id, true, |chan| {
            let before = chan.ring_bytes;
            let texts: Vec<Arc<str>> = bodies
                .into_iter()
                .map(|body| {
                    chan.seq += 1;
                    if chan.seq > chan.reserved {
                        if let Some(m) = marks {
                            if m.save(chat_id, chan.seq + SEQ_BLOCK - 1) {
                                chan.reserved = chan.seq + SEQ_BLOCK - 1;
                            }
                        }
                    }
                    let text: Arc<str> = wire::with_seq(body, chan.seq).into();
                    while chan.ring.len() >= RING_CAPACITY || chan.ring_bytes + text.len() > RING_BYTES {
                        let Some((seq, old)) = chan.ring.pop_front() else { break };
                        chan.replay_from = seq;
                        chan.ring_bytes -= old.len();
                    }
                    chan.ring_bytes += text.len();
                    chan.ring.push_back((chan.seq, Arc::clone(&text)));
                    text
                })
                .collect();
            chan.last_event = Instant::now();
            if ends {
                chan.turn = None;
            }
            chan.subs.retain(|c| c.send_all(&texts));
            // Under the chat's lock, so a concurrent shed sees this ring's bytes counted.
            if chan.ring_bytes >= before {
                self.rings_bytes.fetch_add(chan.ring_bytes - before, Ordering::Relaxed);
            } else {
                self.rings_bytes.fetch_sub(before - chan.ring_bytes, Ordering::Relaxed);
            }
            chan.seq
        });
        if self.rings_bytes.load(Ordering::Relaxed) > RINGS_BYTES {
            self.shed_rings();
        }
        seq
    }
}

impl Hub {
    /// Drops whole rings, of the chats without subscribers first and the longest quiet first,
    /// until the rings hold at most three quarters of [`RINGS_BYTES`]. One chat's lock at a
    /// time, never under the map's.
    fn shed_rings(&self) {
        let mut order: Vec<(bool, Instant, Chan)> = self
            .channels()
            .into_iter()
            .map(|chan| {
                let (watched, last) = {
                    let c = lock_chan(&chan);
                    (!c.subs.is_empty(), c.last_event)
                };
                (watched, last, chan)
            })
            .collect();
        order.sort_by_key(|(watched, last, _)| (*watched, *last));
        for (_, _, chan) in order {
            if self.rings_bytes.load(Ordering::Relaxed) <= RINGS_BYTES / 4 * 3 {
                break;
            }
            let freed = lock_chan(&chan).drop_ring();
            self.rings_bytes.fetch_sub(freed, Ordering::Relaxed);
        }
    }

    /// Bytes in every chat's replay ring.
    #[cfg(test)]
    fn rings_bytes(&self) -> usize {
        self.rings_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;

    fn delta(text: &str) -> Event<'_> {
        Event::Delta { chat_id: "c", text, stream_id: 1 }
    }

    fn texts(rx: &crossbeam_channel::Receiver<Out>) -> Vec<String> {
        rx.try_iter()
            .filter_map(|o| match o {
                Out::Text(t) => Some(t.to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn fan_out_seq_and_replay() {
        let hub = Hub::new(Duration::from_secs(600));
        let (tx1, rx1) = bounded(16);
        let (tx2, rx2) = bounded(16);
        let a = Conn::new(1, tx1, None);
        let b = Conn::new(2, tx2, None);
        hub.subscribe("c", &a);
        assert_eq!(hub.emit("c", &delta("x")), 1);
        assert_eq!(hub.emit("c", &delta("y")), 2);
        assert_eq!(texts(&rx1).len(), 2);
        hub.attach("c", &b, Some(1));
        let got = texts(&rx2);
        assert_eq!(got[0], r#"{"event":"attached","chat_id":"c","last_seq":2}"#);
        assert_eq!(got[1], r#"{"event":"delta","chat_id":"c","text":"y","stream_id":1,"seq":2}"#);
        hub.emit("c", &Event::Done { chat_id: "c", duration_sec: 0.5, stop_reason: None });
        assert_eq!(texts(&rx1).len(), 1);
        assert_eq!(texts(&rx2).len(), 1);
        hub.disconnect(&a);
        assert_eq!(hub.subscribers("c"), 1);
    }

    #[test]
    fn idle_rings_expire_and_seq_continues() {
        let hub = Hub::new(Duration::from_millis(50));
        let (tx, rx) = bounded(16);
        let a = Conn::new(1, tx, None);
        hub.subscribe("c", &a);
        hub.emit("c", &delta(""));
        hub.emit("idle", &delta(""));
        std::thread::sleep(Duration::from_millis(80));
        // "c" has a subscriber, "idle" has none and is past the TTL.
        assert_eq!(hub.prune_idle(), 1);
        assert_eq!(hub.chats(), 1);
        hub.disconnect(&a);
        assert_eq!(hub.prune_idle(), 1);
        assert_eq!(hub.chats(), 0);
        assert_eq!(hub.emit("c", &delta("")), 2, "seq restarted after the ring expired");
        let (tx2, rx2) = bounded(16);
        hub.attach("idle", &Conn::new(2, tx2, None), Some(0));
        // Its event 1 left with the ring: a client that has not seen it must reload.
        assert_eq!(texts(&rx2), [r#"{"event":"attached","chat_id":"idle","last_seq":1,"reload":true}"#]);
        drop(rx);
    }

    #[test]
    fn fresh_chats_leave_nothing_behind_and_retired_seqs_are_capped() {
        let hub = Hub::new(Duration::ZERO);
        let (tx, _rx) = bounded(16);
        let conn = Conn::new(1, tx, None);
        hub.subscribe("fresh", &conn);
        hub.disconnect(&conn);
        assert_eq!(hub.prune_idle(), 1);
        assert_eq!(hub.with(|i| i.retired.len()), 0, "a chat without events needs no seq kept");

        let batch = MAX_RETIRED * 3 / 5;
        for i in 0..batch {
            hub.emit(&format!("old-{i}"), &delta(""));
        }
        assert_eq!(hub.prune_idle(), batch);
        for i in 0..batch {
            hub.emit(&format!("new-{i}"), &delta(""));
        }
        assert_eq!(hub.prune_idle(), batch);
        assert_eq!(hub.with(|i| i.retired.len()), batch, "the older batch was forgotten");
        assert_eq!(hub.emit("new-7", &delta("")), 2, "a remembered seq goes on");
        assert_eq!(hub.emit("old-7", &delta("")), 1, "a forgotten one starts again");
    }

    #[test]
    fn a_connection_queue_holds_out_queue_frames_then_drops_the_client() {
        let hub = Hub::new(Duration::from_secs(600));
        let (tx, rx) = out_queue();
        let conn = Conn::new(1, tx, None);
        hub.subscribe("c", &conn);
        for _ in 0..OUT_QUEUE {
            hub.emit("c", &delta(""));
        }
        assert!(!conn.is_closed());
        assert_eq!(rx.len(), OUT_QUEUE);
        hub.emit("c", &delta(""));
        assert!(conn.is_closed(), "one frame past the cap drops the client");
        assert_eq!(rx.len(), OUT_QUEUE);
        assert!(conn.push(Out::Close).is_err(), "raw writes obey the cap too");
    }

    /// Big frames reach the byte bound long before the frame bound: the client is dropped
    /// once [`OUT_QUEUE_BYTES`] wait for it, and a writer taking frames off makes room again.
    #[test]
    fn a_connection_queue_is_bounded_in_bytes_too() {
        let hub = Hub::new(Duration::from_secs(600));
        let (tx, rx) = out_queue();
        let conn = Conn::new(1, tx, None);
        hub.subscribe("c", &conn);
        let big = "x".repeat(512 * 1024);
        let fits = OUT_QUEUE_BYTES / big.len();
        for _ in 0..fits {
            hub.emit("c", &delta(&big));
        }
        assert!(!conn.is_closed());
        // A writer drains one frame: one more fits.
        let out = rx.try_recv().unwrap();
        conn.dequeued(&out);
        hub.emit("c", &delta(&big));
        assert!(!conn.is_closed(), "room was made");
        hub.emit("c", &delta(&big));
        assert!(conn.is_closed(), "one frame past the byte bound drops the client");
        assert_eq!(rx.len(), fits, "one taken off, one more queued");
        assert!(rx.len() < OUT_QUEUE);
        // One frame larger than the whole bound still fits an empty queue.
        let (tx, _rx) = out_queue();
        let lone = Conn::new(2, tx, None);
        assert!(lone.push(Out::Text("y".repeat(OUT_QUEUE_BYTES + 1).into())).is_ok());
        assert!(lone.push(Out::Text("z".into())).is_err());
    }

    /// The replay ring keeps at most [`RING_BYTES`] (and always the newest event): a client
    /// behind the bytes dropped is told to reload, one within them gets the replay.
    #[test]
    fn the_replay_ring_is_bounded_in_bytes() {
        let hub = Hub::new(Duration::from_secs(600));
        let big = "x".repeat(300 * 1024);
        for _ in 0..20 {
            hub.emit("c", &delta(&big));
        }
        let (bytes, len, from, frame) = {
            let chan = hub.lookup("c", false);
            let c = lock_chan(&chan);
            assert_eq!(c.ring_bytes, c.ring.iter().map(|(_, t)| t.len()).sum::<usize>());
            (c.ring_bytes, c.ring.len(), c.replay_from, c.ring[0].1.len())
        };
        assert!(bytes <= RING_BYTES && len == RING_BYTES / frame, "{bytes} bytes in {len} events");
        assert_eq!(from, 20 - len as u64);
        let attach = |after| {
            let (tx, rx) = out_queue();
            hub.attach("c", &Conn::new(9, tx, None), Some(after));
            texts(&rx)
        };
        assert!(attach(1)[0].ends_with(r#""reload":true}"#));
        let got = attach(from);
        assert_eq!(got.len(), 1 + len, "attached, then every kept event");
        assert!(got[len].ends_with(r#""seq":20}"#));
        // An event over the whole bound is still kept, alone.
        hub.emit("c", &delta(&"y".repeat(RING_BYTES + 1)));
        let chan = hub.lookup("c", false);
        assert_eq!(lock_chan(&chan).ring.len(), 1);
    }

    /// All rings together keep at most [`RINGS_BYTES`]: 40 chats of 2 MiB each (80 MiB
    /// before this bound) shed the rings of the chats quiet longest, whose clients are told to
    /// reload; the newest chats still replay.
    #[test]
    fn every_ring_together_is_bounded_in_bytes() {
        let hub = Hub::new(Duration::from_secs(600));
        let big = "x".repeat(1000 * 1024);
        for i in 0..40 {
            for _ in 0..2 {
                hub.emit(&format!("c{i}"), &delta(&big));
            }
            assert!(hub.rings_bytes() <= RINGS_BYTES + 2 * big.len(), "after chat {i}: {}", hub.rings_bytes());
        }
        let held: usize = hub.channels().iter().map(|c| lock_chan(c).ring_bytes).sum();
        assert_eq!(held, hub.rings_bytes());
        assert!(held <= RINGS_BYTES, "{held}");
        let attach = |chat: &str| {
            let (tx, rx) = out_queue();
            hub.attach(chat, &Conn::new(9, tx, None), Some(0));
            texts(&rx)
        };
        assert!(attach("c0")[0].ends_with(r#""reload":true}"#), "the oldest chat's ring went");
        assert_eq!(attach("c39").len(), 3, "the newest replays both its events");
        // A pruned chat gives its bytes back too.
        let hub = Hub::new(Duration::ZERO);
        hub.emit("a", &delta(&big));
        assert!(hub.rings_bytes() > 0);
        hub.prune_idle();
        assert_eq!(hub.rings_bytes(), 0);
    }

    #[test]
    fn a_chat_busy_writing_does_not_hold_up_another() {
        let hub = Hub::new(Duration::from_secs(600));
        let a = hub.lookup("a", false);
        let _writing = lock_chan(&a);
        let (tx, rx) = bounded(16);
        hub.subscribe("b", &Conn::new(1, tx, None));
        assert_eq!(hub.emit("b", &delta("x")), 1);
        assert_eq!(texts(&rx).len(), 1);
        assert_eq!(hub.chats(), 2);
    }

    #[test]
    fn a_connection_joining_ever_new_chats_stays_in_the_newest_ones() {
        let hub = Hub::new(Duration::ZERO);
        let (tx, _rx) = out_queue();
        let conn = Conn::new(1, tx, None);
        let flood = MAX_CHATS_PER_CONN + 500;
        for i in 0..flood {
            if i % 2 == 0 {
                hub.subscribe(&format!("chat-{i}"), &conn);
            } else {
                hub.attach(&format!("chat-{i}"), &conn, Some(0));
            }
        }
        hub.subscribe(&format!("chat-{}", flood - 1), &conn);
        assert_eq!(conn.chats.lock().unwrap().len(), MAX_CHATS_PER_CONN);
        assert_eq!(hub.subscribers("chat-0"), 0, "the first chat it joined was left");
        assert_eq!(hub.subscribers(&format!("chat-{}", flood - MAX_CHATS_PER_CONN - 1)), 0);
        assert_eq!(hub.subscribers(&format!("chat-{}", flood - MAX_CHATS_PER_CONN)), 1);
        assert_eq!(hub.subscribers(&format!("chat-{}", flood - 1)), 1);
        // The chats it left have no subscriber and are pruned; the rest go with the connection.
        assert_eq!(hub.prune_idle(), 500);
        hub.disconnect(&conn);
        assert_eq!(hub.prune_idle(), MAX_CHATS_PER_CONN);
        assert_eq!(hub.chats(), 0);
    }

    #[test]
    fn emits_racing_prunes_hand_out_every_seq_once() {
        // TTL zero: every prune retires every chat, so emits keep meeting channels pruned
        // between their lookup and their lock.
        let hub = Arc::new(Hub::new(Duration::ZERO));
        let stop = Arc::new(AtomicBool::new(false));
        let pruner = {
            let (hub, stop) = (Arc::clone(&hub), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    hub.prune_idle();
                }
            })
        };
        let (threads, per) = (4, 2000);
        let seqs: Vec<Vec<u64>> = (0..threads)
            .map(|_| {
                let hub = Arc::clone(&hub);
                std::thread::spawn(move || (0..per).map(|_| hub.emit("c", &delta(""))).collect())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().expect("emitter"))
            .collect();
        stop.store(true, Ordering::Relaxed);
        pruner.join().expect("pruner");
        let mut all: Vec<u64> = seqs.into_iter().flatten().collect();
        all.sort_unstable();
        let wrong: Vec<(u64, u64)> =
            all.iter().zip(1u64..).filter(|(got, want)| **got != *want).map(|(g, w)| (*g, w)).take(5).collect();
        assert!(wrong.is_empty(), "a seq was handed out twice or skipped (got, expected): {wrong:?}");
    }

    #[test]
    fn slow_client_is_dropped_not_waited_on() {
        let hub = Hub::new(Duration::from_secs(600));
        let (tx, _rx) = bounded(2);
        let slow = Conn::new(1, tx, None);
        hub.subscribe("c", &slow);
        for _ in 0..5 {
            hub.emit("c", &delta(""));
        }
        assert!(slow.is_closed());
        assert_eq!(hub.subscribers("c"), 0);
    }
}

#[cfg(test)]
mod seq_tests {
    use super::*;
    use crossbeam_channel::bounded;

    /// Marks in memory, counting writes.
    #[derive(Default)]
    struct Mem(Mutex<(HashMap<String, u64>, usize)>);

    impl SeqMarks for Mem {
        fn load(&self, chat_id: &str) -> u64 {
            self.0.lock().unwrap().0.get(chat_id).copied().unwrap_or(0)
        }
        fn save(&self, chat_id: &str, mark: u64) -> bool {
            let mut g = self.0.lock().unwrap();
            g.0.insert(chat_id.into(), mark);
            g.1 += 1;
            true
        }
    }

    fn attached(hub: &Hub, after: Option<u64>) -> String {
        let (tx, rx) = bounded(8192);
        hub.attach("c", &Conn::new(9, tx, None), after);
        match rx.try_recv() {
            Ok(Out::Text(t)) => t.to_string(),
            _ => panic!("no attached"),
        }
    }

    #[test]
    fn seq_goes_on_across_hubs_with_block_writes_and_reload_signals() {
        let marks = Arc::new(Mem::default());
        let hub = Hub::with_marks(Duration::from_secs(600), marks.clone());
        let ev = Event::Delta { chat_id: "c", text: "x", stream_id: 1 };
        for _ in 0..3000 {
            hub.emit("c", &ev);
        }
        assert_eq!(marks.0.lock().unwrap().1, 3, "one write per {SEQ_BLOCK} events");
        assert!(marks.load("c") >= 3000);
        // The ring holds the newest 4096 of 3000: everything replays, nothing to reload.
        assert_eq!(attached(&hub, Some(10)), r#"{"event":"attached","chat_id":"c","last_seq":3000}"#);
        // A "crash": the next hub starts above every seq handed out; the client is behind it.
        let hub2 = Hub::with_marks(Duration::from_secs(600), marks.clone());
        let last = marks.load("c");
        assert_eq!(
            attached(&hub2, Some(3000)),
            format!(r#"{{"event":"attached","chat_id":"c","last_seq":{last},"reload":true}}"#)
        );
        assert_eq!(hub2.emit("c", &ev), last + 1);
        // A clean stop writes the exact last seq: a client that saw it all needs no reload.
        hub2.persist_seqs();
        let hub3 = Hub::with_marks(Duration::from_secs(600), marks.clone());
        assert_eq!(
            attached(&hub3, Some(last + 1)),
            format!(r#"{{"event":"attached","chat_id":"c","last_seq":{}}}"#, last + 1)
        );
        // A client ahead sees a lower `last_seq` and reloads on its own (no flag: the original wire).
        assert!(!attached(&hub3, Some(last + 5)).contains("reload"));
        assert!(!attached(&hub3, None).contains("reload"));
        // Events pushed out of the ring can no longer be replayed.
        for _ in 0..RING_CAPACITY + 10 {
            hub3.emit("c", &ev);
        }
        assert!(attached(&hub3, Some(last + 2)).ends_with(r#""reload":true}"#));
        assert!(!attached(&hub3, Some(last + 1 + 20)).contains("reload"));
    }
}
