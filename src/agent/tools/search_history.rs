//! `search_history`: the model searches every past chat (docs/tools-and-mcp.md §1,
//! docs/search.md §8) through the same index and ranking as `GET /api/search`. Runs on the
//! worker thread of the turn that calls it.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::search::{stamp_key, Request, Search};
use crate::tool::args::parse_args;
use crate::tool::{Tool, ToolOutput, TurnCtx};

/// Hits returned when the model names no limit, and the most it may ask for.
const DEFAULT_LIMIT: u64 = 5;
const MAX_LIMIT: u64 = 20;

pub(crate) struct SearchHistory {
    pub(crate) search: SearchHandle,
}

/// The server's search service for the tool settings (`None` in unit setups without an index);
/// equal when it is the same service.
#[derive(Clone, Default)]
pub(crate) struct SearchHandle(pub(crate) Option<Arc<Search>>);

impl std::fmt::Debug for SearchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Search" } else { "None" })
    }
}

impl PartialEq for SearchHandle {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

#[derive(Deserialize)]
struct Args {
    query: String,
    chat_id: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<u64>,
}

impl Tool for SearchHistory {
    fn name(&self) -> &str {
        "search_history"
    }

    fn description(&self) -> &str {
        "Search all past conversations with the user (every chat, including this one) for messages, tool \
         calls and results. Use it when the user refers to something discussed before (\"what did we decide \
         about X last month\"). Returns the best matching messages with chat title, date and a snippet; \
         matched words are marked «like this». Quote words (\"exact phrase\") to require them in order."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for (any language)."},
                "chat_id": {"type": "string", "description": "Only this chat (\"current\" for this one)."},
                "from": {"type": "string", "description": "Only messages on or after this date, YYYY-MM-DD."},
                "to": {"type": "string", "description": "Only messages on or before this date, YYYY-MM-DD."},
                "limit": {"type": "integer", "description": "How many results (1-20, default 5)."}
            },
            "required": ["query"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let Args { query, chat_id, from, to, limit } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let Some(search) = &self.search.0 else { return ToolOutput::error("Error: search is not available") };
        let date = |v: Option<String>, name: &str, end: bool| -> Result<Option<u64>, ToolOutput> {
            match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(s) => stamp_key(s, end)
                    .map(Some)
                    .ok_or_else(|| ToolOutput::error(format!("Error: argument '{name}' must be a date YYYY-MM-DD"))),
            }
        };
        let (from, to) = match (date(from, "from", false), date(to, "to", true)) {
            (Ok(f), Ok(t)) => (f, t),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        let chat_id =
            chat_id.filter(|c| !c.trim().is_empty()).map(|c| if c == "current" { ctx.chat_id.clone() } else { c });
        let limit = limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT) as usize;
        if query.trim().is_empty() {
            return ToolOutput::error("Error: argument 'query' is empty");
        }
        let res = search.search(&Request { q: query.clone(), chat_id, roles: None, from, to, limit, after: 0 });
        if res.hits.is_empty() {
            return ToolOutput::ok(format!("No past messages match: {query}"));
        }
        let mut out = format!("{} result(s) for: {query}\n", res.hits.len());
        for (i, h) in res.hits.iter().enumerate() {
            let when = if h.timestamp.is_empty() { String::new() } else { format!(", {}", h.timestamp) };
            out.push_str(&format!(
                "\n{}. {} (chat {}, {}{when})\n   {}\n",
                i + 1,
                h.title,
                h.chat_id,
                h.role,
                h.snippet
            ));
        }
        ToolOutput::ok(out)
    }
}
