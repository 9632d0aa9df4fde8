//! `save_memory`: appends a durable fact to MEMORY.md (docs/agent-and-memory.md §11).

use serde_json::{json, Map, Value};

use crate::store::memory_files::Append;
use crate::tool::{Tool, ToolOutput, TurnCtx};

pub struct SaveMemory;

impl Tool for SaveMemory {
    fn name(&self) -> &str {
        "save_memory"
    }

    fn description(&self) -> &str {
        "Save a durable fact to long-term memory (MEMORY.md). Use it when the user explicitly asks you to \
         remember something, or for facts that matter across sessions (name, job, preferences, ongoing \
         projects). Do not use it for small talk, temporary queries or one-off results."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"content": {"type": "string", "description": "The fact to remember, one concise sentence."}},
            "required": ["content"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let content = args.get("content").and_then(Value::as_str).unwrap_or("").trim();
        match ctx.memory.append_fact(content) {
            Ok(Append::Empty) => ToolOutput::ok("Content is empty; nothing saved."),
            Ok(Append::AlreadyPresent) => ToolOutput::ok("Already in long-term memory."),
            Ok(Append::Saved) => ToolOutput::ok(format!("Saved to long-term memory: {content}")),
            Err(e) => ToolOutput::error(format!("Error: could not write MEMORY.md: {}", e.kind())),
        }
    }
}
