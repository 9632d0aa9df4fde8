//! `save_memory`: appends a durable fact to MEMORY.md (docs/agent-and-memory.md §11).

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::store::memory_files::Append;
use crate::tool::args::{lenient, parse_args};
use crate::tool::{Tool, ToolOutput, TurnCtx};

pub(crate) struct SaveMemory;

#[derive(Deserialize)]
struct Args {
    /// Absent, null or not a string: nothing to save (never refused).
    #[serde(deserialize_with = "lenient::string")]
    content: String,
}

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
        let Args { content } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let content = content.trim();
        match ctx.memory.append_fact(content) {
            Ok(Append::Empty) => ToolOutput::ok("Content is empty; nothing saved."),
            Ok(Append::AlreadyPresent) => ToolOutput::ok("Already in long-term memory."),
            Ok(Append::Saved) => ToolOutput::ok(format!("Saved to long-term memory: {content}")),
            Err(e) => ToolOutput::error(format!("Error: could not write MEMORY.md: {}", e.kind())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::Sandbox;

    /// `content` has always been lenient: absent, null or not a string saves nothing, and
    /// unknown keys are ignored.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        for (args, text) in [
            (json!({}), "Content is empty; nothing saved."),
            (json!({"content": null}), "Content is empty; nothing saved."),
            (json!({"content": 5}), "Content is empty; nothing saved."),
            (json!({"content": ["a fact"]}), "Content is empty; nothing saved."),
            (json!({"content": "  "}), "Content is empty; nothing saved."),
            (json!({"content": " likes tea ", "tags": ["x"]}), "Saved to long-term memory: likes tea"),
            (json!({"content": "likes tea"}), "Already in long-term memory."),
        ] {
            let out = sb.call(&SaveMemory, args.clone());
            assert!(!out.failed, "{args}");
            assert_eq!(out.for_model, text, "{args}");
        }
    }
}
