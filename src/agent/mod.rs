//! The agent: a pool of `worker-N` threads pulling turns from the bus's per-chat queues
//! (`bus.rs`: one turn at a time per chat, different chats in parallel) and running them, and
//! the closing `error` events of turns cancelled or discarded before they started. Holds the
//! chat cache (`store::cache`) and the tool registry.

pub mod elicit;
pub mod prompt;
pub mod tools;
pub mod turn;

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crate::bus::{Bus, Cancelled, EventSink, TurnRequest};
use crate::llm::runtime::LlmRuntime;
use crate::store::cache::ChatCache;
use crate::store::chats::ChatStore;
use crate::store::memory_files::MemoryFiles;
use crate::tool::{Tool, TurnExtension};
use crate::wire::{Event, CANCELLED};

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
    pub extensions: Vec<Arc<dyn TurnExtension>>,
    pub workspace: PathBuf,
    pub protected: Vec<PathBuf>,
    /// Context compression after long turns (absent in unit setups).
    pub consolidator: Option<Arc<crate::memory_jobs::consolidator::Consolidator>>,
    /// Known secret values, redacted from every tool result and turn error.
    pub secrets: crate::secrets::Secrets,
    /// MCP elicitations waiting for this server's users (answered by WS frames).
    pub elicitations: Arc<elicit::Elicitations>,
}

pub struct Agent {
    pub deps: Arc<Deps>,
    /// The per-chat turn queues the workers pull from.
    pub bus: Bus,
}

impl Agent {
    pub fn new(deps: Deps) -> Arc<Agent> {
        Arc::new(Agent { deps: Arc::new(deps), bus: Bus::new() })
    }

    /// Starts `n` workers; they exit when [`Agent::shutdown`] closes the bus.
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
        self.bus.submit(req)
    }

    /// Cancels the chat's running turn (it ends itself), or the oldest queued one, which is
    /// closed here with a `cancelled` error. True if a turn was cancelled.
    pub fn cancel(&self, chat_id: &str) -> bool {
        match self.bus.cancel(chat_id) {
            Cancelled::Running => true,
            Cancelled::Queued => {
                self.deps.sink.emit(chat_id, &Event::error(CANCELLED, Some(chat_id)));
                true
            }
            Cancelled::Nothing => false,
        }
    }

    /// For a chat being deleted: drops its queued turns, cancels the running one so it writes
    /// nothing, and waits (bounded) until it has ended.
    pub fn discard(&self, chat_id: &str, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        for _ in 0..self.bus.discard(chat_id) {
            self.deps.sink.emit(chat_id, &Event::error(CANCELLED, Some(chat_id)));
        }
        while self.bus.running(chat_id) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Is a turn of this chat running or queued?
    pub fn busy(&self, chat_id: &str) -> bool {
        self.bus.busy(chat_id)
    }

    /// Stops accepting turns and cancels the running ones (a cancelled turn keeps its streamed
    /// text, as on a user's cancel); workers exit once their turn has ended. Background
    /// consolidation stops too.
    pub fn shutdown(&self) {
        self.bus.close();
        if let Some(c) = &self.deps.consolidator {
            c.close();
        }
    }

    /// A worker: takes a chat with work from the bus and runs its turns until its queue is
    /// empty, then waits for the next chat.
    fn work(&self) {
        let me = crate::bus::Worker::default();
        while let Some(chat_id) = self.bus.next_chat(&me) {
            while let Some((req, token)) = self.bus.start_next(&chat_id) {
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| turn::run(&self.deps, &req, &token)));
                if result.is_err() {
                    log::error!("event=turn.panicked chat_id={chat_id}");
                    let detail = "internal error while running the turn";
                    self.deps.sink.emit(&chat_id, &Event::error(detail, Some(&chat_id)));
                }
                self.bus.ended(&chat_id);
            }
        }
    }
}
