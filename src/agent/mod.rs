//! The agent: a pool of `worker-N` threads running turns, one turn at a time per chat (later
//! messages of a chat queue behind the running one; different chats run in parallel), with a
//! cancel token per running turn. Owns the chat cache and the tool registry.

pub mod history;
pub mod prompt;
pub mod tools;
pub mod turn;

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::bus::{EventSink, TurnRequest};
use crate::llm::runtime::LlmRuntime;
use crate::store::chats::ChatStore;
use crate::store::memory::MemoryFiles;
use crate::util::cancel::CancelToken;
use crate::ws::wire::{Event, CANCELLED};
use history::ChatCache;
use tools::Tool;

/// Messages that may wait behind a running turn of one chat.
pub const MAX_QUEUED_PER_CHAT: usize = 64;
const WORKER_STACK: usize = 1024 * 1024;

/// Everything a turn needs, shared by all workers.
pub struct Deps {
    pub chats: Arc<ChatStore>,
    pub cache: ChatCache,
    pub memory: Arc<MemoryFiles>,
    pub llm: Arc<LlmRuntime>,
    pub sink: Arc<dyn EventSink>,
    pub tools: Vec<Arc<dyn Tool>>,
    /// Serialised schemas of the long-lived tools.
    pub schemas: tools::SchemaCache,
    /// MCP, Skills: extra tools, preparation and prompt hints per turn.
    pub extensions: Vec<Arc<dyn tools::TurnExtension>>,
    pub workspace: PathBuf,
    pub protected: Vec<PathBuf>,
    /// Context compression after long turns (absent in unit setups).
    pub consolidator: Option<Arc<crate::memory::consolidator::Consolidator>>,
    /// Known secret values, redacted from every tool result and turn error.
    pub secrets: crate::secrets::Secrets,
}

#[derive(Default)]
struct ChatRun {
    queue: VecDeque<TurnRequest>,
    running: Option<CancelToken>,
}

pub struct Agent {
    pub deps: Arc<Deps>,
    runs: Mutex<HashMap<String, ChatRun>>,
    jobs: Mutex<Option<Sender<String>>>,
    rx: Receiver<String>,
}

impl Agent {
    pub fn new(deps: Deps) -> Arc<Agent> {
        let (tx, rx) = unbounded();
        Arc::new(Agent { deps: Arc::new(deps), runs: Mutex::new(HashMap::new()), jobs: Mutex::new(Some(tx)), rx })
    }

    fn runs(&self) -> MutexGuard<'_, HashMap<String, ChatRun>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `n` workers; they exit when [`Agent::shutdown`] closes the job channel.
    pub fn spawn_workers(self: &Arc<Self>, n: usize) -> Vec<JoinHandle<()>> {
        (0..n)
            .filter_map(|i| {
                let me = Arc::clone(self);
                thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .stack_size(WORKER_STACK)
                    .spawn(move || me.work())
                    .ok()
            })
            .collect()
    }

    /// Queues a turn; `Err(detail)` when the chat's queue is full or the server is stopping.
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

    /// Cancels the chat's running turn, or, when none has started yet, the oldest queued one
    /// (a cancel sent right after its message must not be lost). True if a turn was cancelled.
    pub fn cancel(&self, chat_id: &str) -> bool {
        let mut runs = self.runs();
        let Some(run) = runs.get_mut(chat_id) else { return false };
        if let Some(tok) = &run.running {
            tok.cancel();
            return true;
        }
        if run.queue.pop_front().is_some() {
            drop(runs);
            self.deps.sink.emit(chat_id, &Event::error(CANCELLED, Some(chat_id)));
            return true;
        }
        false
    }

    /// For a chat being deleted: drops its queued turns, cancels the running one so it writes
    /// nothing, and waits (bounded) until it has ended.
    pub fn discard(&self, chat_id: &str, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        let dropped = {
            let mut runs = self.runs();
            match runs.get_mut(chat_id) {
                Some(run) => {
                    if let Some(tok) = &run.running {
                        tok.discard();
                    }
                    std::mem::take(&mut run.queue).len()
                }
                None => 0,
            }
        };
        for _ in 0..dropped {
            self.deps.sink.emit(chat_id, &Event::error(CANCELLED, Some(chat_id)));
        }
        while self.runs().get(chat_id).is_some_and(|r| r.running.is_some()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Is a turn of this chat running or queued?
    pub fn busy(&self, chat_id: &str) -> bool {
        self.runs().contains_key(chat_id)
    }

    /// Stops accepting turns and cancels the running ones (a cancelled turn keeps its streamed
    /// text, as on a user's cancel); workers exit once their turn has ended. Background
    /// consolidation stops too.
    pub fn shutdown(&self) {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(c) = &self.deps.consolidator {
            c.close();
        }
        let mut runs = self.runs();
        for run in runs.values_mut() {
            run.queue.clear();
            if let Some(t) = &run.running {
                t.cancel();
            }
        }
    }

    fn work(&self) {
        while let Ok(chat_id) = self.rx.recv() {
            loop {
                let (req, token) = {
                    let mut runs = self.runs();
                    let Some(run) = runs.get_mut(&chat_id) else {
                        break;
                    };
                    match run.queue.pop_front() {
                        Some(req) => {
                            let t = CancelToken::new();
                            run.running = Some(t.clone());
                            (req, t)
                        }
                        None => {
                            runs.remove(&chat_id);
                            break;
                        }
                    }
                };
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| turn::run(&self.deps, &req, &token)));
                if result.is_err() {
                    log::error!("event=turn.panicked chat_id={chat_id}");
                    let detail = "internal error while running the turn";
                    self.deps.sink.emit(&chat_id, &Event::error(detail, Some(&chat_id)));
                }
                if let Some(run) = self.runs().get_mut(&chat_id) {
                    run.running = None;
                }
            }
        }
    }
}
