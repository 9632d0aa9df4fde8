//! The three export formats of one chat and the all-chats zip. JSONL is the history file itself;
//! Markdown and ATIF are views of its records, read as JSON objects so fields the typed record
//! does not know (`reasoning_content`, `usage`) still show. Runs on an `http-slow` thread.

use std::io::{self, Cursor, Read, Write};

use serde_json::{json, Map, Value};
use zip::write::SimpleFileOptions;

use super::MAX_EXPORT_BYTES;
use crate::store::chats::{ChatStore, DEFAULT_TITLE};
use crate::util::{fsx, time};

/// The ATIF version written: v1.4 has every field used here (v1.5 only adds
/// `is_copied_context`), so readers of any v1.4+ validator accept the file.
pub(crate) const ATIF_VERSION: &str = "ATIF-v1.4";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Jsonl,
    Markdown,
    Atif,
}

impl Format {
    pub(crate) fn parse(s: &str) -> Option<Format> {
        match s {
            "jsonl" => Some(Format::Jsonl),
            "md" => Some(Format::Markdown),
            "atif" => Some(Format::Atif),
            _ => None,
        }
    }

    /// The file name's ending.
    pub(crate) fn ext(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Markdown => "md",
            Format::Atif => "atif.json",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Markdown => "md",
            Format::Atif => "atif",
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Jsonl => "application/x-ndjson; charset=utf-8",
            Format::Markdown => "text/markdown; charset=utf-8",
            Format::Atif => "application/json",
        }
    }
}

/// Why the all-chats export failed.
#[derive(Debug)]
pub(crate) enum ExportError {
    /// The histories together exceed [`MAX_EXPORT_BYTES`].
    TooLarge,
    Io(io::Error),
}

impl From<io::Error> for ExportError {
    fn from(e: io::Error) -> Self {
        ExportError::Io(e)
    }
}

/// Chat `id`'s history bytes (empty when it has no history yet) and title.
fn read_chat(store: &ChatStore, id: &str) -> io::Result<(Vec<u8>, String)> {
    let path = store.history_path(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid chat id"))?;
    let mut bytes = Vec::new();
    // Only a regular file is read: a FIFO planted as a history would hang the thread.
    if let Some(mut f) = fsx::open_regular(&path)? {
        f.read_to_end(&mut bytes)?;
    }
    Ok((bytes, title_of(store, id)))
}

fn title_of(store: &ChatStore, id: &str) -> String {
    store
        .read_metadata(id)
        .get("title")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or(DEFAULT_TITLE)
        .to_string()
}

/// One chat in `format`; `None` when the chat does not exist.
pub(crate) fn one(store: &ChatStore, id: &str, format: Format) -> io::Result<Option<Vec<u8>>> {
    if !store.exists(id) {
        return Ok(None);
    }
    let (bytes, title) = read_chat(store, id)?;
    Ok(Some(render(id, &title, bytes, format)))
}

fn render(id: &str, title: &str, bytes: Vec<u8>, format: Format) -> Vec<u8> {
    match format {
        Format::Jsonl => bytes,
        Format::Markdown => markdown(id, title, &bytes).into_bytes(),
        Format::Atif => serde_json::to_vec_pretty(&atif(id, title, &bytes)).unwrap_or_default(),
    }
}

/// Every chat in `format` as one zip: `<id>/history.jsonl` and `<id>/metadata.json` for the
/// native format (the memory root's own layout, which the import reads back), else
/// `<id>.md` / `<id>.atif.json`. Members are deflated (miniz_oxide, already our inflater).
pub(crate) fn all(store: &ChatStore, format: Format) -> Result<Vec<u8>, ExportError> {
    let sessions = store.list()?;
    let mut total: u64 = 0;
    for s in &sessions {
        if let Some(p) = store.history_path(&s.chat_id) {
            total += std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        }
    }
    if total > MAX_EXPORT_BYTES {
        return Err(ExportError::TooLarge);
    }
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated).unix_permissions(0o600);
    for s in &sessions {
        let id = &s.chat_id;
        let (bytes, title) = read_chat(store, id)?;
        let zerr = |e: zip::result::ZipError| io::Error::other(e.to_string());
        if format == Format::Jsonl {
            w.start_file(format!("{id}/history.jsonl"), opts).map_err(zerr)?;
            w.write_all(&bytes)?;
            let meta = store.read_metadata(id);
            w.start_file(format!("{id}/metadata.json"), opts).map_err(zerr)?;
            w.write_all(serde_json::to_string_pretty(&meta).unwrap_or_default().as_bytes())?;
        } else {
            w.start_file(format!("{id}.{}", format.ext()), opts).map_err(zerr)?;
            w.write_all(&render(id, &title, bytes, format))?;
        }
    }
    Ok(w.finish().map_err(|e| io::Error::other(e.to_string()))?.into_inner())
}

/// The history's records as JSON objects, unparsable lines skipped (as every reader does).
fn objects(bytes: &[u8]) -> impl Iterator<Item = Map<String, Value>> + '_ {
    bytes.split(|b| *b == b'\n').filter_map(|line| match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(m)) if m.get("role").is_some_and(Value::is_string) => Some(m),
        _ => None,
    })
}

fn s<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or("")
}

/// A code fence longer than any run of backticks in `text`, so the text cannot close it.
fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat(longest.max(2) + 1)
}

fn fenced(out: &mut String, lang: &str, text: &str) {
    let f = fence(text);
    out.push_str(&format!("{f}{lang}\n{text}\n{f}\n\n"));
}

/// The tool calls of a `tool_calls` record: (id, name, arguments as the provider sent them).
fn calls(m: &Map<String, Value>) -> Vec<(String, String, String)> {
    let Some(list) = m.get("tool_calls").and_then(Value::as_array) else { return Vec::new() };
    list.iter()
        .map(|c| {
            let f = c.get("function");
            let args = match f.and_then(|f| f.get("arguments")) {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            (
                c.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
                f.and_then(|f| f.get("name")).and_then(Value::as_str).unwrap_or("").to_string(),
                args,
            )
        })
        .collect()
}

/// The chat for people: title, dates, each turn under its speaker, tool calls with their
/// arguments and results, reasoning as a collapsed "Thinking" block.
pub(crate) fn markdown(id: &str, title: &str, bytes: &[u8]) -> String {
    let records: Vec<Map<String, Value>> = objects(bytes).collect();
    let one_line = title.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = format!("# {one_line}\n\n- Chat: `{id}`\n");
    if let (Some(first), Some(last)) = (records.first(), records.last()) {
        out.push_str(&format!("- Dates: {} – {}\n", s(first, "timestamp"), s(last, "timestamp")));
    }
    out.push_str(&format!("- Exported: {}\n- Records: {}\n\n", time::minute_stamp(), records.len()));
    // Whether the assistant's heading of the current turn is out: its tool steps and answer
    // share one.
    let mut answering = false;
    for m in &records {
        let stamp = s(m, "timestamp");
        let content = s(m, "content");
        let reasoning = s(m, "reasoning_content");
        match s(m, "role") {
            "user" => {
                out.push_str(&format!("---\n\n## User · {stamp}\n\n{content}\n\n"));
                answering = false;
            }
            "assistant" => {
                assistant_heading(&mut out, &mut answering, stamp);
                thinking(&mut out, reasoning);
                out.push_str(&format!("{content}\n\n"));
            }
            "tool_calls" => {
                assistant_heading(&mut out, &mut answering, stamp);
                thinking(&mut out, reasoning);
                for (call_id, name, args) in calls(m) {
                    out.push_str(&format!("**Tool call** `{name}` ({call_id})\n\n"));
                    let pretty = serde_json::from_str::<Value>(&args)
                        .ok()
                        .and_then(|v| serde_json::to_string_pretty(&v).ok())
                        .unwrap_or(args);
                    fenced(&mut out, "json", &pretty);
                }
            }
            "tool" => {
                let name = s(m, "name");
                out.push_str(&format!("<details><summary>Result of <code>{}</code></summary>\n\n", html_escape(name)));
                fenced(&mut out, "text", content);
                out.push_str("</details>\n\n");
            }
            "summary" => {
                answering = false;
                out.push_str(&format!("## Summary of earlier turns · {stamp}\n\n"));
                for line in content.lines() {
                    out.push_str(&format!("> {line}\n"));
                }
                out.push('\n');
            }
            _ => {}
        }
    }
    out
}

fn assistant_heading(out: &mut String, answering: &mut bool, stamp: &str) {
    if !*answering {
        out.push_str(&format!("## Assistant · {stamp}\n\n"));
        *answering = true;
    }
}

fn thinking(out: &mut String, reasoning: &str) {
    if reasoning.trim().is_empty() {
        return;
    }
    out.push_str("<details><summary>Thinking</summary>\n\n");
    for line in reasoning.lines() {
        out.push_str(&format!("> {line}\n"));
    }
    out.push_str("\n</details>\n\n");
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `YYYY-MM-DD HH:MM` (local) as ISO 8601 `YYYY-MM-DDTHH:MM:00`; `None` for anything else.
fn iso(stamp: &str) -> Option<String> {
    let b = stamp.as_bytes();
    let shape = b.len() == 16
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b' ',
            13 => *c == b':',
            _ => c.is_ascii_digit(),
        });
    shape.then(|| format!("{}T{}:00", &stamp[..10], &stamp[11..]))
}

/// ATIF `metrics` from a record's `usage` (OpenAI's names), when it carries one.
fn metrics(m: &Map<String, Value>) -> Option<Value> {
    let u = m.get("usage")?.as_object()?;
    let mut out = Map::new();
    for (from, to) in [("prompt_tokens", "prompt_tokens"), ("completion_tokens", "completion_tokens")] {
        if let Some(n) = u.get(from).and_then(Value::as_u64) {
            out.insert(to.into(), json!(n));
        }
    }
    if let Some(n) = u.get("prompt_tokens_details").and_then(|d| d.get("cached_tokens")).and_then(Value::as_u64) {
        out.insert("cached_tokens".into(), json!(n));
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// The chat as an ATIF trajectory: a `user` step per user record, an `agent` step per answer
/// and per tool step (its calls, with the results that answer them as the observation), a
/// `system` step per compression summary; each step's `extra.cursor` is the record's cursor.
pub(crate) fn atif(id: &str, title: &str, bytes: &[u8]) -> Value {
    let records: Vec<Map<String, Value>> = objects(bytes).collect();
    let mut steps: Vec<Map<String, Value>> = Vec::new();
    let mut i = 0;
    while i < records.len() {
        let m = &records[i];
        i += 1;
        let mut step = Map::new();
        let (source, message) = match s(m, "role") {
            "user" => ("user", s(m, "content").to_string()),
            "assistant" => ("agent", s(m, "content").to_string()),
            "summary" => ("system", s(m, "content").to_string()),
            "tool_calls" => ("agent", String::new()),
            // A result whose call is not in the step before it (older files): kept as a system
            // step naming the call, since an observation must answer a call of its own step.
            "tool" => ("system", s(m, "content").to_string()),
            _ => continue,
        };
        step.insert("step_id".into(), json!(steps.len() + 1));
        if let Some(t) = iso(s(m, "timestamp")) {
            step.insert("timestamp".into(), json!(t));
        }
        step.insert("source".into(), json!(source));
        step.insert("message".into(), json!(message));
        if source == "agent" {
            let reasoning = s(m, "reasoning_content");
            if !reasoning.is_empty() {
                step.insert("reasoning_content".into(), json!(reasoning));
            }
        }
        let mut extra = Map::new();
        extra.insert("cursor".into(), m.get("cursor").cloned().unwrap_or(Value::Null));
        if s(m, "role") == "tool_calls" {
            let calls = calls(m);
            let ids: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
            let mut unparsed = Map::new();
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|(call_id, name, args)| {
                    let arguments = match serde_json::from_str::<Value>(args) {
                        Ok(Value::Object(o)) => Value::Object(o),
                        _ if args.trim().is_empty() => json!({}),
                        _ => {
                            unparsed.insert(call_id.clone(), json!(args));
                            json!({})
                        }
                    };
                    json!({"tool_call_id": call_id, "function_name": name, "arguments": arguments})
                })
                .collect();
            let mut results = Vec::new();
            while i < records.len() && s(&records[i], "role") == "tool" && ids.contains(&s(&records[i], "tool_call_id"))
            {
                let r = &records[i];
                results.push(json!({"source_call_id": s(r, "tool_call_id"), "content": s(r, "content")}));
                i += 1;
            }
            if !tool_calls.is_empty() {
                step.insert("tool_calls".into(), Value::Array(tool_calls));
            }
            if !results.is_empty() {
                step.insert("observation".into(), json!({"results": results}));
            }
            if !unparsed.is_empty() {
                extra.insert("unparsed_arguments".into(), Value::Object(unparsed));
            }
        }
        if source == "agent" {
            if let Some(metrics) = metrics(m) {
                step.insert("metrics".into(), metrics);
            }
        }
        if s(m, "role") == "tool" {
            extra.insert("tool_call_id".into(), json!(s(m, "tool_call_id")));
            extra.insert("tool_name".into(), json!(s(m, "name")));
        }
        if s(m, "role") == "summary" {
            extra.insert("kind".into(), json!("summary"));
        }
        step.insert("extra".into(), Value::Object(extra));
        steps.push(step);
    }
    if steps.is_empty() {
        // ATIF requires at least one step; a chat whose directory exists without records.
        steps.push(
            json!({"step_id": 1, "source": "system", "message": "", "extra": {"empty_chat": true}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
    }
    let total = steps.len();
    json!({
        "schema_version": ATIF_VERSION,
        "session_id": id,
        "agent": {"name": "cashcode", "version": env!("CARGO_PKG_VERSION")},
        "steps": steps,
        "final_metrics": {"total_steps": total},
        "extra": {"title": title},
    })
}
