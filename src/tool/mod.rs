//! The tool contract: the `Tool` trait every model-callable tool implements (the built-ins in
//! `agent/tools/`, the Skill tools, MCP's wrappers), its result projections, the per-turn
//! context and state handed to tools, and the [`TurnExtension`] hooks through which MCP and
//! Skills take part in a turn. The confinements tools run in live beside it: `workspace` (the
//! file tools and the Skills import) and `sandbox` (`exec`). Tools run on the worker thread of
//! the turn that calls them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value};

use crate::util::cancel::CancelToken;

pub(crate) mod args;

/// How `exec`'s child runs: inside the kernel sandbox (`sandbox`), or as the owner's own
/// process, which only an approval (or the owner's policy) allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Confinement {
    #[default]
    Sandboxed,
    Unconfined,
}

/// What a tool call produced, in the contract's three projections (docs/agent-and-memory.md §13).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Text the model sees in the `tool` message.
    pub for_model: String,
    /// Text for the client's `tool_result` preview (cut to 200 code points on the wire); defaults to `for_model`.
    pub(crate) preview: Option<String>,
    /// Text stored in history.jsonl; defaults to `for_model`.
    pub(crate) for_history: Option<String>,
    /// A structured failure: counted as failed by later consumers (skill evolution).
    pub failed: bool,
    /// How the call ended when not plainly: `denied` (the owner or the policy said no, or
    /// nobody was there to ask), `timeout` (it ran out of time, or the owner's answer did not
    /// come in time), `failed` (a command exited non-zero).
    /// `None`: `ok`, or `error` when `failed`. Shown on the tool block (`tool_result.outcome`).
    pub(crate) outcome: Option<&'static str>,
}

impl ToolOutput {
    pub(crate) fn ok(text: impl Into<String>) -> Self {
        ToolOutput { for_model: text.into(), preview: None, for_history: None, failed: false, outcome: None }
    }

    /// This output, marked as ending with `outcome` (see [`ToolOutput::outcome`]).
    pub(crate) fn ended(mut self, outcome: &'static str) -> Self {
        self.outcome = Some(outcome);
        self
    }

    /// The outcome the client is told: `ok`, `error`, or the marked one.
    pub(crate) fn outcome_name(&self) -> &'static str {
        self.outcome.unwrap_or(if self.failed { "error" } else { "ok" })
    }

    /// A failure reported to the model as text starting with `Error`.
    pub(crate) fn error(text: impl Into<String>) -> Self {
        let t = text.into();
        let t = if t.starts_with("Error") { t } else { format!("Error: {t}") };
        ToolOutput { for_model: t, preview: None, for_history: None, failed: true, outcome: None }
    }

    pub(crate) fn preview_text(&self) -> &str {
        self.preview.as_deref().unwrap_or(&self.for_model)
    }

    pub(crate) fn history_text(&self) -> &str {
        self.for_history.as_deref().unwrap_or(&self.for_model)
    }

    /// Every projection with the known secret values replaced (the turn loop's one redaction
    /// of tool results before they reach events, history and the model).
    pub(crate) fn redacted(self, secrets: &crate::secrets::Secrets) -> ToolOutput {
        let clean = |t: String| match secrets.redact(&t) {
            std::borrow::Cow::Borrowed(_) => t,
            std::borrow::Cow::Owned(r) => r,
        };
        ToolOutput {
            for_model: clean(self.for_model),
            preview: self.preview.map(clean),
            for_history: self.for_history.map(clean),
            failed: self.failed,
            outcome: self.outcome,
        }
    }
}

/// What a turn may change besides history: a working copy of the chat's metadata (the
/// `activated_tools` / `activated_skills` maps tools update) and tools visible for this turn
/// only. Merged into the chat when the turn succeeds, dropped when it fails.
#[derive(Default)]
pub struct TurnState {
    pub metadata: Map<String, Value>,
    /// Turn-only tools (explicitly selected MCP connectors); never persisted.
    pub turn_tools: Vec<Arc<dyn Tool>>,
    /// Approval dialogs this turn raised (`agent::approvals`), and whether it wanted one more
    /// than a turn may raise (the turn then ends).
    pub approvals_asked: usize,
    pub approvals_exhausted: bool,
}

/// Metadata keys a turn owns; everything else (e.g. a title renamed mid-turn) is left alone.
pub(crate) const TURN_METADATA_KEYS: [&str; 2] = ["activated_tools", "activated_skills"];

/// Everything a tool may touch, so tools never reach for globals.
#[derive(Clone)]
pub struct TurnCtx {
    pub chat_id: String,
    /// Root of the file and exec tools (canonical path).
    pub workspace: PathBuf,
    /// Directories no file tool may write into (the Skill roots).
    pub protected: Vec<PathBuf>,
    pub memory: Arc<crate::store::memory_files::MemoryFiles>,
    pub cancel: CancelToken,
    pub state: Arc<Mutex<TurnState>>,
    /// How this call's `exec` child runs: set per call by the turn loop from the approval
    /// decision (`agent::approvals::policy::decide`), never from the call's arguments.
    pub confinement: Confinement,
    /// The turn's rewind record (`None`: checkpoints are off); the file tools and `exec` report
    /// their changes to it.
    pub checkpoint: Option<Arc<crate::checkpoints::TurnCheckpoint>>,
}

impl TurnCtx {
    pub fn state(&self) -> MutexGuard<'_, TurnState> {
        crate::util::sync::lock(&self.state)
    }

    /// The turn's workspace and Skill roots, resolved. Fails when the workspace does not exist.
    pub(crate) fn open_workspace(&self) -> Result<crate::workspace::Workspace, String> {
        crate::workspace::Workspace::from_paths(&self.workspace, &self.protected)
    }

    /// The workspace and `raw` resolved in it (the first step of every file tool).
    pub(crate) fn resolve_path(&self, raw: &str) -> Result<(crate::workspace::Workspace, PathBuf), String> {
        let ws = self.open_workspace()?;
        let path = ws.resolve(raw)?;
        Ok((ws, path))
    }
}

/// What extensions prepare before the first model call (docs/ws-protocol.md §6.3).
#[derive(Debug, Default)]
pub struct Preparation {
    /// Bodies joined into one extra system message after the main one (explicit skills).
    pub(crate) system_bodies: Vec<String>,
    /// Assistant receipts persisted right after the user record (`[Skill loaded: …]`).
    pub(crate) receipts: Vec<String>,
    /// The user content the model sees, when it differs from the stored one (legacy `@name`).
    pub(crate) model_content: Option<String>,
}

/// A turn that completed and was persisted, as extensions see it afterwards (skill evolution).
pub struct FinishedTurn<'a> {
    pub(crate) req: &'a crate::bus::TurnRequest,
    /// This turn's records as appended to history.jsonl (user, receipts, tool steps, answer).
    pub(crate) records: &'a [crate::store::chats::Record],
    /// The tool-iteration limit was hit (the answer came from the forced final call).
    pub(crate) hit_limit: bool,
    /// Cancelled after some text was streamed (what was shown is kept).
    pub(crate) cancelled: bool,
    /// The LLM client the turn used, for background follow-ups.
    pub(crate) client: &'a Arc<crate::llm::client::LlmClient>,
}

/// A pluggable part of every turn (MCP, Skills). All methods have neutral defaults.
pub trait TurnExtension: Send + Sync {
    /// Runs once before the first model call; `Err(detail)` fails the turn with that detail.
    fn prepare(&self, _req: &crate::bus::TurnRequest, _ctx: &TurnCtx, _prep: &mut Preparation) -> Result<(), String> {
        Ok(())
    }

    /// Tools visible besides the built-ins, asked before every model call, in a stable order.
    fn tools(&self, _state: &TurnState) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Volatile hints appended after the stable system prompt (recently activated skills).
    fn hints(&self, _metadata: &Map<String, Value>) -> Option<String> {
        None
    }

    /// Runs on the worker after the turn was persisted and `done` was sent; must not block.
    fn finished(&self, _turn: &FinishedTurn) {}
}

/// A model-callable tool.
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// Runs the call. Failures are `ToolOutput::error`, never panics or `Err`.
    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput;

    /// The MCP server behind this tool, whose row of the approval policy applies.
    fn mcp_server(&self) -> Option<&str> {
        None
    }

    /// The OpenAI `tools[]` entry for this tool.
    fn schema(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {"name": self.name(), "description": self.description(), "parameters": self.parameters()}
        })
    }
}

pub(crate) use crate::util::text::fmt_secs;

/// The built-in tools' names in the contract's order (docs/tools-and-mcp.md §1): the one list of
/// them, which `agent::tools::builtins_with` is tested against and the skills' base registry builds on.
pub(crate) const BUILTIN_NAMES: [&str; 11] = [
    "save_memory",
    "web_fetch",
    "web_search",
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "glob",
    "grep",
    "exec",
    "search_history",
];
