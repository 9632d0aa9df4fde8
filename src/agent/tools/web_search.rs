//! `web_search` (docs/tools-and-mcp.md §3): asks the DuckDuckGo Instant Answer API and formats the
//! abstract and up to 10 related topics. The request runs on the turn's worker, as
//! `web_fetch`'s does: cancel shuts the call's agent, so a read still waiting returns at once,
//! and the token and the deadline are checked before the request and between reads of the
//! body. The endpoint is a field so tests (and `CASHCODE_WEB_SEARCH_URL`) can point it at a
//! local server.

use std::io::Read;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::web_fetch::{http_agent, is_timeout, Budget, Stop};
use crate::tool::args::parse_args;
use crate::tool::{fmt_secs, Tool, ToolOutput, TurnCtx};
use crate::util::blocking;

/// The public Instant Answer endpoint.
pub(crate) const DEFAULT_URL: &str = "https://api.duckduckgo.com/";
/// The contract's search timeout.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Related topics listed.
pub(crate) const MAX_TOPICS: usize = 10;
/// Largest API response read.
const MAX_RESPONSE_BYTES: u64 = 2 << 20;

/// Bytes read from the response between two checks of the token and deadline.
const READ_STEP: usize = 16 * 1024;

pub(crate) struct WebSearch {
    pub(crate) base_url: String,
    pub(crate) timeout: Duration,
}

#[derive(Deserialize)]
struct Args {
    query: String,
}

impl Default for WebSearch {
    fn default() -> Self {
        WebSearch { base_url: DEFAULT_URL.to_string(), timeout: DEFAULT_TIMEOUT }
    }
}

impl Tool for WebSearch {
    fn name(&self) -> &str {
        "web_search"
    }

    fn description(&self) -> &str {
        "Search the web via the DuckDuckGo Instant Answer API: returns a summary and related \
         topics with links when available. Use web_fetch to read a result page."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Search keywords."}},
            "required": ["query"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let Args { query } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let query = query.trim();
        if query.is_empty() {
            return ToolOutput::error("Search failed: the query is empty");
        }
        let agent = http_agent(self.timeout);
        let budget = Budget { deadline: Instant::now() + self.timeout, cancel: ctx.cancel.clone() };
        let answer = blocking::interruptible(&ctx.cancel, &agent, || fetch(&agent, &self.base_url, query, &budget));
        match answer.unwrap_or(Err(Failure::Stopped(Stop::Cancelled))) {
            Ok(v) => ToolOutput::ok(format_answer(query, &v)),
            Err(Failure::Stopped(Stop::Cancelled)) => ToolOutput::error("Search failed: cancelled"),
            Err(Failure::Stopped(Stop::Overdue)) => {
                ToolOutput::error(format!("Search failed: timed out ({})", fmt_secs(self.timeout)))
            }
            Err(Failure::Other(e)) => ToolOutput::error(format!("Search failed: {e}")),
        }
    }
}

/// Why [`fetch`] has no answer.
enum Failure {
    Stopped(Stop),
    Other(String),
}

/// The blocking API call, checking `budget` before the request and between reads of the body.
fn fetch(agent: &ureq::Agent, base_url: &str, query: &str, budget: &Budget) -> Result<Value, Failure> {
    budget.check().map_err(Failure::Stopped)?;
    let resp = agent
        .get(base_url)
        .query("q", query)
        .query("format", "json")
        .query("no_redirect", "1")
        .query("no_html", "1")
        .config()
        .timeout_global(Some(budget.remaining()))
        .build()
        .call();
    // A request that failed because the worker shut the agent reports the token instead.
    let stopped_or = |other: Failure| budget.check().err().map(Failure::Stopped).unwrap_or(other);
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) if is_timeout(&e) => return Err(Failure::Stopped(Stop::Overdue)),
        Err(e) => return Err(stopped_or(Failure::Other(e.to_string()))),
    };
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(Failure::Other(format!("HTTP error {status}")));
    }
    let mut bytes = Vec::new();
    let mut reader = resp.body_mut().as_reader().take(MAX_RESPONSE_BYTES);
    let mut buf = vec![0u8; READ_STEP];
    loop {
        budget.check().map_err(Failure::Stopped)?;
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Err(Failure::Stopped(Stop::Overdue)),
            Err(e) => return Err(stopped_or(Failure::Other(e.to_string()))),
        }
    }
    serde_json::from_slice(&bytes).map_err(|e| Failure::Other(format!("invalid JSON response: {e}")))
}

/// The contract's text rendering of an Instant Answer response.
pub(crate) fn format_answer(query: &str, v: &Value) -> String {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").trim().to_string();
    let mut lines = vec![format!("Search: {query}"), String::new()];
    let abstract_text = s(v, "Abstract");
    if !abstract_text.is_empty() {
        lines.push(format!("**Summary** ({}): {abstract_text}", s(v, "AbstractSource")));
        let url = s(v, "AbstractURL");
        if !url.is_empty() {
            lines.push(format!("Source: {url}"));
        }
        lines.push(String::new());
    }
    // Topic groups (`{"Name", "Topics": [...]}`) are flattened in order.
    let mut topics: Vec<&Value> = Vec::new();
    for t in v.get("RelatedTopics").and_then(Value::as_array).into_iter().flatten() {
        match t.get("Topics").and_then(Value::as_array) {
            Some(group) => topics.extend(group.iter()),
            None => topics.push(t),
        }
    }
    let mut shown = 0;
    for t in topics {
        if shown >= MAX_TOPICS {
            break;
        }
        let text = s(t, "Text");
        if text.is_empty() {
            continue;
        }
        lines.push(format!("- {text}"));
        let url = s(t, "FirstURL");
        if !url.is_empty() {
            lines.push(format!("  {url}"));
        }
        shown += 1;
    }
    if abstract_text.is_empty() && shown == 0 {
        return format!(
            "No DuckDuckGo instant answer for '{query}'. Suggestion: use web_fetch on e.g. \
             https://duckduckgo.com/?q={}",
            query.replace(' ', "+")
        );
    }
    lines.join("\n").trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::tools::web_fetch::tests::{serve, trickle};
    use crate::workspace::tests::Sandbox;

    fn run(tool: &WebSearch, q: &str) -> ToolOutput {
        let sb = Sandbox::new();
        let mut a = Map::new();
        a.insert("query".into(), json!(q));
        tool.run(&a, &sb.ctx)
    }

    #[test]
    fn formats_abstract_and_topics() {
        let body = json!({
            "Abstract": "Rust is a language.", "AbstractSource": "Wikipedia",
            "AbstractURL": "https://en.wikipedia.org/wiki/Rust",
            "RelatedTopics": [
                {"Text": "Cargo - build tool", "FirstURL": "https://duckduckgo.com/Cargo"},
                {"Name": "Group", "Topics": [{"Text": "Crates", "FirstURL": ""}, {"FirstURL": "https://x"}]},
                {"Text": "Ferris"}
            ]
        });
        let (url, h) = serve(200, "application/x-javascript", body.to_string().into_bytes(), Duration::ZERO, 1);
        let tool = WebSearch { base_url: format!("{url}/"), ..WebSearch::default() };
        assert_eq!(
            run(&tool, "rust lang"),
            ToolOutput::ok(
                "Search: rust lang\n\n**Summary** (Wikipedia): Rust is a language.\n\
                 Source: https://en.wikipedia.org/wiki/Rust\n\n- Cargo - build tool\n  \
                 https://duckduckgo.com/Cargo\n- Crates\n- Ferris"
            )
        );
        assert_eq!(h.join().unwrap(), ["/?q=rust%20lang&format=json&no_redirect=1&no_html=1"]);
    }

    #[test]
    fn caps_topics_and_handles_nothing_found() {
        let topics: Vec<Value> = (0..15).map(|i| json!({"Text": format!("t{i}")})).collect();
        let out = format_answer("q", &json!({"RelatedTopics": topics}));
        assert_eq!(out.lines().filter(|l| l.starts_with("- ")).count(), 10);
        assert!(out.ends_with("- t9"));
        let (url, h) =
            serve(200, "application/json", b"{\"Abstract\":\"\",\"RelatedTopics\":[]}".to_vec(), Duration::ZERO, 1);
        let tool = WebSearch { base_url: url, ..WebSearch::default() };
        assert_eq!(
            run(&tool, "a b").for_model,
            "No DuckDuckGo instant answer for 'a b'. Suggestion: use web_fetch on e.g. https://duckduckgo.com/?q=a+b"
        );
        h.join().unwrap();
    }

    #[test]
    fn failures_are_structured() {
        let (url, h) = serve(500, "text/plain", b"boom".to_vec(), Duration::ZERO, 1);
        let tool = WebSearch { base_url: url.clone(), ..WebSearch::default() };
        let out = run(&tool, "x");
        assert!(out.failed);
        assert_eq!(out.for_model, "Error: Search failed: HTTP error 500");
        h.join().unwrap();
        let (url, h) = serve(200, "text/html", b"<html>".to_vec(), Duration::ZERO, 1);
        let tool = WebSearch { base_url: url, ..WebSearch::default() };
        assert!(run(&tool, "x").for_model.starts_with("Error: Search failed: invalid JSON response"));
        h.join().unwrap();
        assert!(run(&WebSearch::default(), "  ").failed);
    }

    /// Cancel returns at once and closes the connection, long before the request's own 10 s
    /// timeout.
    #[test]
    fn cancel_returns_at_once_and_closes_the_connection() {
        for stall in [false, true] {
            let (url, events) = trickle(stall);
            let tool = WebSearch { base_url: url, ..WebSearch::default() };
            let sb = Sandbox::new();
            let cancel = sb.ctx.cancel.clone();
            let canceller = std::thread::spawn(move || {
                assert_eq!(events.recv_timeout(Duration::from_secs(10)), Ok("sent"));
                std::thread::sleep(Duration::from_millis(100));
                cancel.cancel();
                events.recv_timeout(Duration::from_secs(3))
            });
            let mut a = Map::new();
            a.insert("query".into(), json!("q"));
            let started = Instant::now();
            assert_eq!(tool.run(&a, &sb.ctx).for_model, "Error: Search failed: cancelled");
            assert!(started.elapsed() < Duration::from_secs(5));
            assert_eq!(canceller.join().unwrap(), Ok("closed"), "stall {stall}: the connection was closed");
        }
    }

    /// Every spelling of a bad or odd `query` keeps the wording the model always got; unknown
    /// keys are ignored.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        let tool = WebSearch { base_url: "http://127.0.0.1:9/".into(), ..WebSearch::default() };
        for (args, text) in [
            (json!({}), "Error: missing required argument 'query'"),
            (json!({"query": null}), "Error: missing required argument 'query'"),
            (json!({"query": 5}), "Error: argument 'query' must be a string"),
            (json!({"query": ["rust"]}), "Error: argument 'query' must be a string"),
            (json!({"query": "  ", "limit": 3}), "Error: Search failed: the query is empty"),
        ] {
            assert_eq!(sb.call(&tool, args.clone()).for_model, text, "{args}");
        }
    }
}
