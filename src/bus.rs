//! The message bus between the front doors and the workers. Submissions go in: a
//! [`TurnRequest`] (a validated `message` frame) joins its chat's queue in [`Bus`], which
//! keeps one turn at a time per chat in arrival order and hands a chat with work to one
//! worker over the job channel; workers pull from it (`agent/mod.rs`). Typed `Event`s
//! (`ws/wire.rs`) come out through an [`EventSink`], the WebSocket hub in the server.
//! Called from WebSocket reader threads and HTTP handlers (submit, cancel, discard) and from
//! `worker-N` threads (next, start, ended).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use crossbeam_channel::{unbounded, Receiver, Sender};
use serde_json::Value;

use crate::llm::Provider;
use crate::util::cancel::CancelToken;
use crate::ws::wire::Event;

/// Messages that may wait behind a running turn of one chat.
pub const MAX_QUEUED_PER_CHAT: usize = 64;

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
pub trait EventSink: Send + Sync {
    /// Emits a chat-scoped event; returns its `seq`.
    fn emit(&self, chat_id: &str, event: &Event<'_>) -> u64;
    /// Emits events in order (sent together where they can be); returns the last one's `seq`.
    fn emit_all(&self, chat_id: &str, events: &[Event<'_>]) -> u64 {
        events.iter().map(|e| self.emit(chat_id, e)).last().unwrap_or(0)
    }
    /// How many clients would receive the chat's events now (an elicitation with nobody
    /// to ask is declined at once).
    fn subscribers(&self, chat_id: &str) -> usize;
}

/// What [`Bus::cancel`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
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
}

/// The per-chat turn queues. A chat is in the map while a turn of it runs or waits; its id is
/// on the job channel exactly while it waits for a worker, so one worker at a time runs it.
pub struct Bus {
    runs: Mutex<HashMap<String, ChatRun>>,
    /// `None` once closed: submissions are refused and idle workers see the channel end.
    jobs: Mutex<Option<Sender<String>>>,
    rx: Receiver<String>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl Bus {
    pub fn new() -> Bus {
        let (tx, rx) = unbounded();
        Bus { runs: Mutex::new(HashMap::new()), jobs: Mutex::new(Some(tx)), rx }
    }

    fn runs(&self) -> MutexGuard<'_, HashMap<String, ChatRun>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a turn; `Err(detail)` when the chat's queue is full or the bus is closed.
    pub fn submit(&self, req: TurnRequest) -> Result<(), String> {
        let chat_id = req.chat_id.clone();
        let mut runs = self.runs();
        let run = runs.entry(chat_id.clone()).or_default();
        if run.queue.len() >= MAX_QUEUED_PER_CHAT {
            return Err(format!("too many queued messages for this chat (max {MAX_QUEUED_PER_CHAT})"));
        }
        let idle = run.queue.is_empty() && run.running.is_none();
        run.queue.push_back(req);
        if idle {
            let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            match jobs.as_ref().map(|tx| tx.send(chat_id.clone())) {
                Some(Ok(())) => {}
                _ => {
                    runs.remove(&chat_id);
                    return Err("the server is shutting down".into());
                }
            }
        }
        Ok(())
    }

    /// Cancels the chat's running turn, or, when none has started yet, drops the oldest queued
    /// one (a cancel sent right after its message must not be lost).
    pub fn cancel(&self, chat_id: &str) -> Cancelled {
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
    pub fn discard(&self, chat_id: &str) -> usize {
        let mut runs = self.runs();
        let Some(run) = runs.get_mut(chat_id) else { return 0 };
        if let Some(tok) = &run.running {
            tok.discard();
        }
        std::mem::take(&mut run.queue).len()
    }

    /// Is a turn of this chat running?
    pub fn running(&self, chat_id: &str) -> bool {
        self.runs().get(chat_id).is_some_and(|r| r.running.is_some())
    }

    /// Is a turn of this chat running or queued?
    pub fn busy(&self, chat_id: &str) -> bool {
        self.runs().contains_key(chat_id)
    }

    /// Refuses new turns, drops the queued ones and cancels the running ones; workers see
    /// the job channel end once it is drained.
    pub fn close(&self) {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
        for run in self.runs().values_mut() {
            run.queue.clear();
            if let Some(t) = &run.running {
                t.cancel();
            }
        }
    }

    /// Worker side: blocks until a chat has work; `None` once the bus is closed.
    pub fn next_chat(&self) -> Option<String> {
        self.rx.recv().ok()
    }

    /// Worker side: takes the chat's next turn and marks it running, or, when its queue is
    /// empty, forgets the chat (a later submit sends it to a worker again).
    pub fn start_next(&self, chat_id: &str) -> Option<(TurnRequest, CancelToken)> {
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
                None
            }
        }
    }

    /// Worker side: the turn [`Bus::start_next`] returned has ended.
    pub fn ended(&self, chat_id: &str) {
        if let Some(run) = self.runs().get_mut(chat_id) {
            run.running = None;
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

    #[test]
    fn one_turn_at_a_time_per_chat_in_order() {
        let bus = Bus::new();
        bus.submit(req("a", "1")).unwrap();
        bus.submit(req("a", "2")).unwrap();
        bus.submit(req("b", "1")).unwrap();
        // One job per chat that became busy, not per message.
        assert_eq!(bus.next_chat().as_deref(), Some("a"));
        assert_eq!(bus.next_chat().as_deref(), Some("b"));
        assert!(bus.rx.is_empty());
        let (first, _tok) = bus.start_next("a").unwrap();
        assert_eq!(first.content, "1");
        assert!(bus.running("a"));
        bus.ended("a");
        assert_eq!(bus.start_next("a").unwrap().0.content, "2");
        bus.ended("a");
        assert!(bus.start_next("a").is_none());
        assert!(!bus.busy("a"));
        bus.submit(req("a", "3")).unwrap();
        assert_eq!(bus.next_chat().as_deref(), Some("a"), "an idle chat is handed out again");
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
        assert_eq!(bus.discard("a"), 1);
        assert!(tok.is_discarded());
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
        assert_eq!(bus.next_chat().as_deref(), Some("a"), "queued job ids drain first");
        assert_eq!(bus.next_chat(), None);
    }
}
