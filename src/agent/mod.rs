//! The agent: a pool of `worker-N` threads pulling turns from the bus's per-chat queues
//! (`bus.rs`: one turn at a time per chat, different chats in parallel) and running them, and
//! the closing `error` events of turns cancelled or discarded before they started. Holds the
//! chat cache (`store::cache`) and the tool registry.

pub(crate) mod answers;
pub(crate) mod approvals;
pub(crate) mod chats;
pub(crate) mod elicit;
pub(crate) mod prompt;
pub(crate) mod rewind;
pub mod tools;
pub(crate) mod turn;

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
pub(crate) struct Deps {
    pub(crate) chats: Arc<ChatStore>,
    pub(crate) cache: ChatCache,
    pub(crate) memory: Arc<MemoryFiles>,
    pub(crate) llm: Arc<LlmRuntime>,
    pub(crate) sink: Arc<dyn EventSink>,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    /// Serialised schemas of the long-lived tools.
    pub(crate) schemas: tools::SchemaCache,
    /// MCP, Skills: extra tools, preparation and prompt hints per turn.
    pub(crate) extensions: Vec<Arc<dyn TurnExtension>>,
    pub(crate) workspace: PathBuf,
    pub(crate) protected: Vec<PathBuf>,
    /// Context compression after long turns (absent in unit setups).
    pub(crate) consolidator: Option<Arc<crate::memory_jobs::consolidator::Consolidator>>,
    /// Known secret values, redacted from every tool result and turn error.
    pub(crate) secrets: crate::secrets::Secrets,
    /// MCP elicitations waiting for this server's users (answered by WS frames).
    pub(crate) elicitations: Arc<elicit::Elicitations>,
    /// The gate before every tool call: the owner's policy and the requests waiting for them.
    pub(crate) approvals: Arc<approvals::Approvals>,
    /// Rewind checkpoints of the workspace (`None`: `CASHCODE_CHECKPOINT_MAX_BYTES=0`).
    pub(crate) checkpoints: Option<Arc<crate::checkpoints::Checkpoints>>,
    /// Where chats may work as projects, and the checkpoint stores of projects outside the
    /// workspace (`None` with checkpoints off).
    pub(crate) projects: Arc<crate::projects::Projects>,
    pub(crate) project_checkpoints: Option<crate::checkpoints::projects::ProjectCheckpoints>,
}

/// The metadata key of a chat's project directory (docs/storage.md §3).
pub(crate) const PROJECT_KEY: &str = "project";

impl Deps {
    /// Where a chat works: its project (checked again, as the allowed roots may have changed
    /// since it was bound) or the workspace. `Err` names why the project no longer may be used.
    pub(crate) fn chat_root(&self, metadata: &serde_json::Map<String, serde_json::Value>) -> Result<PathBuf, String> {
        match metadata.get(PROJECT_KEY).and_then(serde_json::Value::as_str) {
            None => Ok(self.workspace.clone()),
            Some(p) => self.projects.resolve(p).map_err(|e| format!("this chat's project cannot be used: {e}")),
        }
    }

    /// The checkpoint store of a chat working in `root`: the workspace's for the workspace and
    /// what lies under it, else the project's own.
    pub(crate) fn checkpoints_for(&self, root: &std::path::Path) -> Option<Arc<crate::checkpoints::Checkpoints>> {
        if root.starts_with(&self.workspace) {
            return self.checkpoints.clone();
        }
        self.project_checkpoints.as_ref().and_then(|p| p.get(root))
    }

    /// A first message's `project`: binds a chat that has no folder yet; for an existing chat
    /// it must name the project the chat already works in.
    pub(crate) fn bind_first_message(&self, chat_id: &str, requested: &str) -> Result<(), String> {
        if self.chats.dir(chat_id).is_some_and(|d| d.exists()) {
            let meta = self.chats.read_metadata(chat_id);
            let current = self.chat_root(&meta)?;
            let asked = self.projects.resolve(requested).map_err(|e| e.to_string())?;
            if asked != current {
                return Err(format!(
                    "this chat works in {}; start a new chat to work in {}",
                    current.display(),
                    asked.display()
                ));
            }
            return Ok(());
        }
        self.bind_project(chat_id, requested).map(|_| ())
    }

    /// Creates chat `chat_id` bound to the project `requested` names (decided by
    /// [`crate::projects::Projects::resolve`]): its folder and `metadata.json` with the
    /// canonical path. Returns that path.
    pub(crate) fn bind_project(&self, chat_id: &str, requested: &str) -> Result<PathBuf, String> {
        let root = self.projects.resolve(requested).map_err(|e| e.to_string())?;
        let mut meta = serde_json::Map::new();
        meta.insert(PROJECT_KEY.into(), serde_json::Value::String(root.display().to_string()));
        if let Some(dir) = self.chats.dir(chat_id) {
            crate::util::fsx::create_private_dirs(&dir).map_err(|e| format!("cannot create the chat: {e}"))?;
        }
        self.chats.write_metadata(chat_id, &meta).map_err(|e| format!("cannot create the chat: {e}"))?;
        Ok(root)
    }
}

pub struct Agent {
    pub(crate) deps: Arc<Deps>,
    /// The per-chat turn queues the workers pull from.
    pub(crate) bus: Bus,
}

impl Agent {
    pub(crate) fn new(deps: Deps) -> Arc<Agent> {
        Arc::new(Agent { deps: Arc::new(deps), bus: Bus::new() })
    }

    /// Starts `n` workers; they exit when [`Agent::shutdown`] closes the bus.
    pub(crate) fn spawn_workers(self: &Arc<Self>, n: usize) -> Vec<JoinHandle<()>> {
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
    pub(crate) fn cancel(&self, chat_id: &str) -> bool {
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
    pub(crate) fn discard(&self, chat_id: &str, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        for _ in 0..self.bus.discard(chat_id) {
            self.deps.sink.emit(chat_id, &Event::error(CANCELLED, Some(chat_id)));
        }
        self.settled(chat_id, deadline.saturating_duration_since(std::time::Instant::now()));
    }

    /// Holds the chat idle for a rewind: waits up to `within` for a turn that is ending (it
    /// sent `done` and is storing its records) to be gone; `None` when a turn still runs or
    /// any waits in the queue (it would run on the rewound state without its sender knowing).
    /// While the hold lives, turns sent to the chat wait in its queue.
    pub(crate) fn hold_idle(&self, chat_id: &str, within: std::time::Duration) -> Option<crate::bus::Hold<'_>> {
        self.bus.hold_within(chat_id, within)
    }

    /// Waits up to `within` for the chat's running turn to end; true when none runs.
    pub(crate) fn settled(&self, chat_id: &str, within: std::time::Duration) -> bool {
        self.bus.settled(chat_id, within)
    }

    /// Stops accepting turns and cancels the running ones (a cancelled turn keeps its streamed
    /// text, as on a user's cancel); workers exit once their turn has ended. Background
    /// consolidation stops too.
    pub(crate) fn shutdown(&self) {
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
