//! The message bus between the front doors and the workers. Submissions go in: a
//! [`TurnRequest`] (a validated `message` frame) joins its chat's queue in [`Bus`], which
//! keeps one turn at a time per chat in arrival order and hands a chat with work to one
//! worker: the one that went idle last, so a turn runs on a thread whose stack and caches are
//! still warm (`agent/mod.rs` runs the workers). Typed `Event`s
//! (`src/wire.rs`) come out through an [`EventSink`], the WebSocket hub in the server.
//! Called from WebSocket reader threads and HTTP handlers (submit, cancel, discard) and from
//! `worker-N` threads (next, start, ended).

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::Value;

use crate::llm::Provider;
use crate::util::cancel::CancelToken;
use crate::util::sync;
use crate::wire::Event;

/// Messages that may wait behind a running turn of one chat.
pub(crate) const MAX_QUEUED_PER_CHAT: usize = 64;

/// The sanitised `metadata` of a message (`ws::protocol::sanitize_metadata`).
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub provider: Provider,
    pub model: String,
    /// `[{"name", "label"?}]`
    pub mentioned_skills: Vec<Value>,
    /// `[{"server", "label"?}]`
    pub selected_mcp_connectors: Vec<Value>,
}

/// A validated user message for one chat.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub chat_id: String,
    pub content: String,
    pub selection: Selection,
}

/// Where workers send events (the WebSocket hub in the server; a recorder in tests).
pub(crate) trait EventSink: Send + Sync {
    /// Emits a chat-scoped event; returns its `seq`.
    fn emit(&self, chat_id: &str, event: &Event<'_>) -> u64;
    /// Emits events in order (sent together where they can be); returns the last one's `seq`.
    fn emit_all(&self, chat_id: &str, events: &[Event<'_>]) -> u64 {
        events.iter().map(|e| self.emit(chat_id, e)).last().unwrap_or(0)
    }
    /// Sends a chat-scoped event to the clients attached now, without a `seq` and without
    /// keeping it for replay: live readings (`usage`) that a later one replaces.
    fn emit_transient(&self, chat_id: &str, event: &Event<'_>) {
        self.emit(chat_id, event);
    }
    /// While a turn of the chat runs and its events can still be replayed: the chat's `seq`
    /// when it began (`attach` with this `after_seq` replays the turn from its start).
    fn turn_seq(&self, _chat_id: &str) -> Option<u64> {
        None
    }
    /// How many clients would receive the chat's events now (an elicitation with nobody
    /// to ask is declined at once).
    fn subscribers(&self, chat_id: &str) -> usize;
    /// Sends an event to every connection, whatever chat it attached, without a `seq`
    /// (`waiting`: which chats wait for the owner).
    fn broadcast(&self, _event: &Event<'_>) {}
}

/// An [`EventSink`] for unit tests: records every event as its JSON, and reports `subs`
/// subscribers for every chat.
#[cfg(test)]
pub(crate) struct RecordingSink {
    pub(crate) subs: usize,
    pub(crate) events: Mutex<Vec<Value>>,
}

#[cfg(test)]
impl RecordingSink {
    pub(crate) fn new(subs: usize) -> RecordingSink {
        RecordingSink { subs, events: Mutex::new(Vec::new()) }
    }
}

#[cfg(test)]
impl EventSink for RecordingSink {
    fn emit(&self, _chat_id: &str, event: &Event<'_>) -> u64 {
        let mut e = sync::lock(&self.events);
        e.push(serde_json::from_str(&event.to_text(None)).unwrap_or(Value::Null));
        e.len() as u64
    }
    fn subscribers(&self, _chat_id: &str) -> usize {
        self.subs
    }
}

/// What [`Bus::cancel`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancelled {
    /// The running turn's token was cancelled; the turn ends itself.
    Running,
    /// No turn had started: the oldest queued one was dropped (its owner must be told).
    Queued,
    /// Nothing to cancel.
    Nothing,
}

#[derive(Default)]
struct ChatRun {
    queue: VecDeque<TurnRequest>,
    running: Option<CancelToken>,
    /// Held by a rewind ([`Bus::hold`]): turns submitted meanwhile wait in the queue and go
    /// to a worker when the hold ends.
    held: bool,
}

/// A chat held idle by [`Bus::hold`]; dropping it lets the chat's queued turns run.
pub(crate) struct Hold<'a> {
    bus: &'a Bus,
    chat_id: String,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.bus.release(&self.chat_id);
    }
}

/// The per-chat turn queues. A chat enters the map with the submit that finds it absent, which
/// hands its id to one worker (or to `Dispatch::ready` to wait for one); that worker runs its
/// turns until it finds the queue empty and removes it. So one worker at a time runs a chat.
pub(crate) struct Bus {
    runs: Mutex<HashMap<String, ChatRun>>,
    /// Signalled whenever a chat's turn ends or a chat leaves `runs`, for those waiting on a
    /// chat to settle ([`Bus::settled`], [`Bus::hold_within`]).
    changed: Condvar,
    dispatch: Mutex<Dispatch>,
}

/// Chats waiting for a worker and workers waiting for a chat (one of the two is empty).
#[derive(Default)]
struct Dispatch {
    /// Chats with work and no worker yet, oldest first.
    ready: VecDeque<String>,
    /// Idle workers, the last to go idle at the end: it takes the next chat. Handing chats out
    /// oldest-idle first instead rotated every turn through all 32 workers, and sequential
    /// turns took 12 % longer (cold stacks and caches).
    idle: Vec<Sender<Option<String>>>,
    /// Submissions are refused; idle workers are told `None`.
    closed: bool,
}

/// One worker's end of the dispatch: where it is handed a chat while idle.
pub(crate) struct Worker {
    tx: Sender<Option<String>>,
    rx: Receiver<Option<String>>,
}

impl Default for Worker {
    fn default() -> Self {
        let (tx, rx) = bounded(1);
        Worker { tx, rx }
    }
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl Bus {
    pub(crate) fn new() -> Bus {
        Bus { runs: Mutex::new(HashMap::new()), changed: Condvar::new(), dispatch: Mutex::default() }
    }

    fn runs(&self) -> MutexGuard<'_, HashMap<String, ChatRun>> {
        sync::lock(&self.runs)
    }

    fn dispatch(&self) -> MutexGuard<'_, Dispatch> {
        sync::lock(&self.dispatch)
    }

    /// Queues a turn; `Err(detail)` when the chat's queue is full or the bus is closed.
    pub(crate) fn submit(&self, req: TurnRequest) -> Result<(), String> {
        let mut runs = self.runs();
        let mut d = self.dispatch();
        if d.closed {
            return Err("the server is shutting down".into());
        }
        // A chat in the map belongs to one worker (or waits in `ready` for one) until that
        // worker finds its queue empty and removes it, so only a chat new to the map is sent
        // to a worker. An empty queue with no running turn does not mean unowned: the chat's
        // worker may be between two of its turns.
        let new = !runs.contains_key(&req.chat_id);
        let run = runs.entry(req.chat_id.clone()).or_default();
        if run.queue.len() >= MAX_QUEUED_PER_CHAT {
            return Err(format!("too many queued messages for this chat (max {MAX_QUEUED_PER_CHAT})"));
        }
        let chat_id = req.chat_id.clone();
        run.queue.push_back(req);
        if new {
            Self::hand_out(&mut d, chat_id);
        }
        Ok(())
    }

    /// Sends a chat with work to an idle worker, or queues it in `ready` for the next one.
    fn hand_out(d: &mut Dispatch, mut chat: String) {
        loop {
            let Some(worker) = d.idle.pop() else {
                d.ready.push_back(chat);
                break;
            };
            // A worker waits on its channel while it is in `idle`, so it is empty; a send
            // fails only if that worker is gone, and the chat goes to the next one.
            match worker.send(Some(chat)) {
                Ok(()) => break,
                Err(e) => match e.into_inner() {
                    Some(c) => chat = c,
                    None => break,
                },
            }
        }
    }

    #[cfg(test)]
    /// Holds an idle chat (no turn running, queued, or owned by a worker between two turns):
    /// until the [`Hold`] drops, its new turns wait in its queue. `None` when not idle.
    pub(crate) fn hold(&self, chat_id: &str) -> Option<Hold<'_>> {
        let mut runs = self.runs();
        if runs.contains_key(chat_id) {
            return None;
        }
        runs.insert(chat_id.to_string(), ChatRun { held: true, ..ChatRun::default() });
        Some(Hold { bus: self, chat_id: chat_id.to_string() })
    }

    /// [`Bus::hold`], waiting up to `within` for a turn that is ending to be gone; `None` when
    /// one still runs then, or any turn waits in the chat's queue.
    pub(crate) fn hold_within(&self, chat_id: &str, within: Duration) -> Option<Hold<'_>> {
        let deadline = Instant::now() + within;
        let mut runs = self.runs();
        loop {
            match runs.get(chat_id) {
                Some(run) if !run.queue.is_empty() => return None,
                Some(_) => {}
                None => {
                    runs.insert(chat_id.to_string(), ChatRun { held: true, ..ChatRun::default() });
                    return Some(Hold { bus: self, chat_id: chat_id.to_string() });
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            runs = self.changed.wait_timeout(runs, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Waits up to `within` for the chat's running turn to end; true when none runs.
    pub(crate) fn settled(&self, chat_id: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut runs = self.runs();
        while runs.get(chat_id).is_some_and(|r| r.running.is_some()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            runs = self.changed.wait_timeout(runs, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        true
    }

    fn release(&self, chat_id: &str) {
        let mut runs = self.runs();
        let Some(run) = runs.get_mut(chat_id).filter(|r| r.held) else { return };
        if run.queue.is_empty() {
            runs.remove(chat_id);
            self.changed.notify_all();
            return;
        }
        run.held = false;
        let mut d = self.dispatch();
        Self::hand_out(&mut d, chat_id.to_string());
    }

    /// Cancels the chat's running turn, or, when none has started yet, drops the oldest queued
    /// one (a cancel sent right after its message must not be lost).
    pub(crate) fn cancel(&self, chat_id: &str) -> Cancelled {
        let mut runs = self.runs();
        let Some(run) = runs.get_mut(chat_id) else { return Cancelled::Nothing };
        if let Some(tok) = &run.running {
            tok.cancel();
            return Cancelled::Running;
        }
        match run.queue.pop_front() {
            Some(_) => Cancelled::Queued,
            None => Cancelled::Nothing,
        }
    }

    /// For a chat being deleted: marks the running turn discarded (it writes nothing) and
    /// drops the queued ones; returns how many were dropped.
    pub(crate) fn discard(&self, chat_id: &str) -> usize {
        let mut runs = self.runs();
        let Some(run) = runs.get_mut(chat_id) else { return 0 };
        if let Some(tok) = &run.running {
            tok.discard();
        }
        std::mem::take(&mut run.queue).len()
    }

    #[cfg(test)]
    /// Is a turn of this chat running?
    pub(crate) fn running(&self, chat_id: &str) -> bool {
        self.runs().get(chat_id).is_some_and(|r| r.running.is_some())
    }

    #[cfg(test)]
    /// Turns of this chat waiting behind the running one (or for a worker).
    pub(crate) fn queued(&self, chat_id: &str) -> usize {
        self.runs().get(chat_id).map_or(0, |r| r.queue.len())
    }

    /// Is a turn of this chat running or queued?
    #[cfg(test)]
    pub(crate) fn busy(&self, chat_id: &str) -> bool {
        self.runs().contains_key(chat_id)
    }

    /// Refuses new turns, drops the queued ones and cancels the running ones; idle workers are
    /// told to exit, busy ones exit once no chat is waiting for a worker.
    pub(crate) fn close(&self) {
        {
            let mut d = self.dispatch();
            d.closed = true;
            for worker in d.idle.drain(..) {
                let _ = worker.send(None);
            }
        }
        for run in self.runs().values_mut() {
            run.queue.clear();
            if let Some(t) = &run.running {
                t.cancel();
            }
        }
    }

    /// Worker side: blocks until a chat has work; `None` once the bus is closed and no chat
    /// waits for a worker.
    pub(crate) fn next_chat(&self, me: &Worker) -> Option<String> {
        {
            let mut d = self.dispatch();
            if let Some(chat) = d.ready.pop_front() {
                return Some(chat);
            }
            if d.closed {
                return None;
            }
            d.idle.push(me.tx.clone());
        }
        me.rx.recv().ok().flatten()
    }

    /// Worker side: takes the chat's next turn and marks it running, or, when its queue is
    /// empty, forgets the chat (a later submit sends it to a worker again).
    pub(crate) fn start_next(&self, chat_id: &str) -> Option<(TurnRequest, CancelToken)> {
        let mut runs = self.runs();
        let run = runs.get_mut(chat_id)?;
        match run.queue.pop_front() {
            Some(req) => {
                let token = CancelToken::new();
                run.running = Some(token.clone());
                Some((req, token))
            }
            None => {
                runs.remove(chat_id);
                self.changed.notify_all();
                None
            }
        }
    }

    /// Worker side: the turn [`Bus::start_next`] returned has ended.
    pub(crate) fn ended(&self, chat_id: &str) {
        if let Some(run) = self.runs().get_mut(chat_id) {
            run.running = None;
            self.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(chat: &str, content: &str) -> TurnRequest {
        TurnRequest {
            chat_id: chat.into(),
            content: content.into(),
            selection: Selection {
                provider: Provider::Ollama,
                model: "m".into(),
                mentioned_skills: Vec::new(),
                selected_mcp_connectors: Vec::new(),
            },
        }
    }

    /// A rewind waiting for a chat to settle is woken by the turn's end, not by a poll; it
    /// gets no hold while a turn waits in the queue.
    #[test]
    fn holding_a_chat_waits_for_its_turn_to_end() {
        let bus = std::sync::Arc::new(Bus::new());
        bus.submit(req("a", "one")).unwrap();
        let (_, _token) = bus.start_next("a").expect("running");
        assert!(bus.hold_within("a", Duration::ZERO).is_none(), "a turn runs");
        assert!(!bus.settled("a", Duration::from_millis(20)));
        let ender = {
            let bus = std::sync::Arc::clone(&bus);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                bus.ended("a");
                assert!(bus.start_next("a").is_none(), "the worker finds the queue empty");
            })
        };
        let started = Instant::now();
        assert!(bus.settled("a", Duration::from_secs(5)));
        let hold = bus.hold_within("a", Duration::from_secs(5)).expect("idle once the worker let go");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        ender.join().unwrap();
        // Held: a new turn waits in the queue, and another hold is refused.
        bus.submit(req("a", "two")).unwrap();
        assert!(bus.hold_within("a", Duration::from_millis(10)).is_none());
        drop(hold);
        assert_eq!(bus.queued("a"), 1);
    }

    #[test]
    fn one_turn_at_a_time_per_chat_in_order() {
        let bus = Bus::new();
        bus.submit(req("a", "1")).unwrap();
        bus.submit(req("a", "2")).unwrap();
        bus.submit(req("b", "1")).unwrap();
        // One job per chat that became busy, not per message.
        let w = Worker::default();
        assert_eq!(bus.next_chat(&w).as_deref(), Some("a"));
        assert_eq!(bus.next_chat(&w).as_deref(), Some("b"));
        assert!(bus.dispatch().ready.is_empty());
        let (first, _tok) = bus.start_next("a").unwrap();
        assert_eq!(first.content, "1");
        assert!(bus.running("a"));
        bus.ended("a");
        assert_eq!(bus.start_next("a").unwrap().0.content, "2");
        bus.ended("a");
        assert!(bus.start_next("a").is_none());
        assert!(!bus.busy("a"));
        bus.submit(req("a", "3")).unwrap();
        assert_eq!(bus.next_chat(&w).as_deref(), Some("a"), "an idle chat is handed out again");
    }

    /// The worker that went idle last takes the next chat; a closed bus lets idle workers go.
    #[test]
    fn the_last_idle_worker_takes_the_next_chat() {
        let bus = std::sync::Arc::new(Bus::new());
        let (done_tx, done) = crossbeam_channel::unbounded();
        let spawn = |name: &'static str| {
            let (bus, done_tx) = (std::sync::Arc::clone(&bus), done_tx.clone());
            std::thread::spawn(move || {
                let me = Worker::default();
                while let Some(chat) = bus.next_chat(&me) {
                    done_tx.send((name, chat.clone())).unwrap();
                    while bus.start_next(&chat).is_some() {
                        bus.ended(&chat);
                    }
                }
                done_tx.send((name, "exit".to_string())).unwrap();
            })
        };
        let idle = |n: usize| {
            for _ in 0..500 {
                if bus.dispatch().idle.len() == n {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            panic!("{n} workers never went idle");
        };
        let first = spawn("first");
        idle(1);
        let second = spawn("second");
        idle(2);
        for (i, chat) in ["a", "b", "c"].into_iter().enumerate() {
            bus.submit(req(chat, "1")).unwrap();
            assert_eq!(done.recv().unwrap(), ("second", chat.to_string()), "turn {i}");
            idle(2);
        }
        bus.close();
        // Both idle workers are told to exit (none was lost from the idle list).
        let mut exits: Vec<_> =
            (0..2).map(|_| done.recv_timeout(std::time::Duration::from_secs(5)).expect("a worker exits")).collect();
        exits.sort();
        assert_eq!(exits, [("first", "exit".to_string()), ("second", "exit".to_string())]);
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(bus.submit(req("d", "1")).unwrap_err(), "the server is shutting down");
    }

    /// A message that arrives while the chat's worker is between two turns, or after a cancel
    /// emptied the queue of a chat no worker has started yet, is that worker's: handing the
    /// chat to a second worker let it forget the chat while the first ran a turn of it.
    #[test]
    fn a_chat_between_turns_stays_with_its_worker() {
        let bus = Bus::new();
        let w = Worker::default();
        bus.submit(req("a", "1")).unwrap();
        assert_eq!(bus.next_chat(&w).as_deref(), Some("a"));
        let _ = bus.start_next("a").unwrap();
        bus.ended("a");
        bus.submit(req("a", "2")).unwrap();
        assert!(bus.dispatch().ready.is_empty(), "not handed out twice");
        let (second, tok) = bus.start_next("a").unwrap();
        assert_eq!(second.content, "2");
        assert!(bus.busy("a") && bus.running("a"));
        assert_eq!(bus.cancel("a"), Cancelled::Running);
        assert!(tok.is_cancelled());
        bus.ended("a");
        assert!(bus.start_next("a").is_none());

        bus.submit(req("b", "1")).unwrap();
        assert!(!bus.running("b") && bus.queued("b") == 1, "queued for a worker, not running");
        assert_eq!(bus.cancel("b"), Cancelled::Queued);
        bus.submit(req("b", "2")).unwrap();
        assert_eq!(bus.dispatch().ready.len(), 1, "b waits for one worker, once");
        assert_eq!(bus.next_chat(&w).as_deref(), Some("b"));
        assert_eq!(bus.start_next("b").unwrap().0.content, "2");
        bus.ended("b");
        assert!(bus.start_next("b").is_none());
        assert!(!bus.busy("b"));
    }

    #[test]
    fn cancel_hits_the_running_turn_or_the_oldest_queued_one() {
        let bus = Bus::new();
        assert_eq!(bus.cancel("a"), Cancelled::Nothing);
        bus.submit(req("a", "1")).unwrap();
        bus.submit(req("a", "2")).unwrap();
        assert_eq!(bus.cancel("a"), Cancelled::Queued);
        let (r, tok) = bus.start_next("a").unwrap();
        assert_eq!(r.content, "2");
        assert_eq!(bus.cancel("a"), Cancelled::Running);
        assert!(tok.is_cancelled() && !tok.is_discarded());
        bus.submit(req("a", "3")).unwrap();
        assert_eq!(bus.queued("a"), 1);
        assert_eq!(bus.discard("a"), 1);
        assert_eq!(bus.queued("a"), 0);
        assert!(tok.is_discarded());
    }

    #[test]
    fn a_held_chat_runs_nothing_until_released() {
        let bus = Bus::new();
        let w = Worker::default();
        let hold = bus.hold("a").unwrap();
        assert!(bus.hold("a").is_none(), "one hold at a time");
        bus.submit(req("a", "1")).unwrap();
        assert_eq!(bus.queued("a"), 1);
        assert!(bus.dispatch().ready.is_empty(), "not handed to a worker while held");
        drop(hold);
        assert_eq!(bus.next_chat(&w).as_deref(), Some("a"));
        assert_eq!(bus.start_next("a").unwrap().0.content, "1");
        assert!(bus.hold("a").is_none(), "a running chat is not idle");
        bus.ended("a");
        assert!(bus.start_next("a").is_none());
        drop(bus.hold("a").unwrap());
        assert!(!bus.busy("a"), "a hold with nothing queued leaves no trace");
    }

    #[test]
    fn a_full_queue_and_a_closed_bus_refuse() {
        let bus = Bus::new();
        for i in 0..MAX_QUEUED_PER_CHAT {
            bus.submit(req("a", &i.to_string())).unwrap();
        }
        assert_eq!(
            bus.submit(req("a", "x")).unwrap_err(),
            format!("too many queued messages for this chat (max {MAX_QUEUED_PER_CHAT})")
        );
        let (_, tok) = bus.start_next("a").unwrap();
        bus.close();
        assert!(tok.is_cancelled());
        assert_eq!(bus.submit(req("b", "x")).unwrap_err(), "the server is shutting down");
        assert!(!bus.busy("b"));
        let w = Worker::default();
        assert_eq!(bus.next_chat(&w).as_deref(), Some("a"), "queued job ids drain first");
        assert_eq!(bus.next_chat(&w), None);
    }
}
