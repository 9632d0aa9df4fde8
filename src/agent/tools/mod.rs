//! The `Tool` trait every model-callable tool implements, its result projections, and the
//! per-turn context handed to tools. Tools run on the worker thread of the turn that calls them.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::agent::cancel::CancelToken;

pub mod edit_file;
pub mod exec;
pub mod glob;
pub mod grep;
pub mod list_dir;
pub mod pattern;
pub mod read_file;
pub mod regex;
pub mod save_memory;
pub mod workspace;
pub mod write_file;

/// What a tool call produced, in the contract's three projections (agent-and-memory.md §13).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Text the model sees in the `tool` message.
    pub for_model: String,
    /// Text for the client's `tool_result` preview (cut to 200 code points on the wire); defaults to `for_model`.
    pub preview: Option<String>,
    /// Text stored in history.jsonl; defaults to `for_model`.
    pub for_history: Option<String>,
    /// A structured failure: counted as failed by later consumers (skill evolution).
    pub failed: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            for_model: text.into(),
            preview: None,
            for_history: None,
            failed: false,
        }
    }

    /// A failure reported to the model as text starting with `Error`.
    pub fn error(text: impl Into<String>) -> Self {
        let t = text.into();
        let t = if t.starts_with("Error") {
            t
        } else {
            format!("Error: {t}")
        };
        ToolOutput {
            for_model: t,
            preview: None,
            for_history: None,
            failed: true,
        }
    }

    pub fn preview_text(&self) -> &str {
        self.preview.as_deref().unwrap_or(&self.for_model)
    }

    pub fn history_text(&self) -> &str {
        self.for_history.as_deref().unwrap_or(&self.for_model)
    }
}

/// Everything a tool may touch, so tools never reach for globals.
#[derive(Clone)]
pub struct TurnCtx {
    pub chat_id: String,
    /// Root of the file and exec tools (canonical path).
    pub workspace: PathBuf,
    /// Directories no file tool may write into (the Skill roots).
    pub protected: Vec<PathBuf>,
    pub memory: Arc<crate::store::memory::MemoryFiles>,
    pub cancel: CancelToken,
}

/// A model-callable tool.
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// Runs the call. Failures are `ToolOutput::error`, never panics or `Err`.
    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput;

    /// The OpenAI `tools[]` entry for this tool.
    fn schema(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {"name": self.name(), "description": self.description(), "parameters": self.parameters()}
        })
    }
}

/// A required string argument, or the failure to hand back to the model.
pub(crate) fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolOutput> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(ToolOutput::error(format!(
            "missing required argument '{key}'"
        ))),
        Some(_) => Err(ToolOutput::error(format!(
            "argument '{key}' must be a string"
        ))),
    }
}

/// An optional string argument (missing or null → `""`).
pub(crate) fn arg_opt_str<'a>(
    args: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a str, ToolOutput> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ToolOutput::error(format!(
            "argument '{key}' must be a string"
        ))),
    }
}

/// The built-in tools, in the stable order the model sees them.
pub fn builtins() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(save_memory::SaveMemory)]
}
