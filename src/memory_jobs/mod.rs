//! Long-term memory jobs: context compression after long chats (`consolidator`, its own
//! thread) and the periodic MEMORY.md distillation (`dream`, a timer thread). The files they
//! work on belong to the stores: `store::chats` (histories) and `store::memory_files` (MEMORY.md).

pub(crate) mod consolidator;
pub mod dream;

use crate::store::chats::Record;
use crate::util::text;

/// One transcript line per record, `[<timestamp>] ROLE: content`, shared by both jobs.
/// Tool steps are shortened: calls by name, results to their first 200 characters.
pub(crate) fn transcript(records: &[&Record], marker: &str) -> String {
    let mut out = String::new();
    for r in records {
        let (role, content) = match r.role.as_str() {
            "tool_calls" => ("ASSISTANT", r.content.clone()),
            "tool" => ("TOOL_RESULT", text::take_chars(&r.content, 200).to_string()),
            "summary" => ("ASSISTANT", format!("{marker} {}", r.content)),
            other => (if other == "user" { "USER" } else { "ASSISTANT" }, r.content.clone()),
        };
        let content = content.trim();
        if content.is_empty() {
            continue;
        }
        out.push_str(&format!("[{}] {role}: {content}\n", r.timestamp));
    }
    out
}
