//! `/api/sessions` (docs/http-api.md §4): list, messages, rename, delete. Chat ids are validated on
//! every route, so `..` and friends are a 404, never a path. The bodies are the typed views at
//! the end of this file.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Map, Value};

use super::api::{only, Api};
use super::shape::{body, Issue, Query};
use super::{Req, Resp};
use crate::agent::chats::ChatError;
use crate::store::chats::{valid_chat_id, Record, SessionInfo};
use crate::store::paging;
use crate::util::body::{refuse, Model, NonObject};
use crate::util::text;
use crate::wire::RESULT_PREVIEW;
use crate::ws::protocol::sanitize_list;

pub(crate) fn route(api: &Api, m: &str, rest: &[&str], req: &Req) -> Resp {
    match rest {
        [] => match m {
            "GET" => list(api),
            "POST" => super::project_routes::create_session(api, req),
            _ => Resp::detail(405, "Method Not Allowed"),
        },
        [id] => match m {
            "PATCH" => rename(api, id, req),
            "DELETE" => delete(api, id),
            _ => Resp::detail(405, "Method Not Allowed"),
        },
        [id, "export"] => only(m, &["GET"]).unwrap_or_else(|| super::transfer_routes::export_one(api, id, req)),
        [id, "messages"] => only(m, &["GET"]).unwrap_or_else(|| messages(api, id, req)),
        [id, "rewind"] => only(m, &["POST"]).unwrap_or_else(|| super::rewind_routes::rewind(api, id, req)),
        [id, "rewind", "undo"] => only(m, &["POST"]).unwrap_or_else(|| super::rewind_routes::undo(api, id, req)),
        _ => Resp::detail(404, "Not Found"),
    }
}

fn not_found() -> Resp {
    Resp::detail(404, "session not found")
}

fn list(api: &Api) -> Resp {
    match api.chats.list() {
        Ok(sessions) => {
            let waiting = api.agent.waiting_chats();
            let sink = &api.events;
            let sessions = sessions
                .into_iter()
                .map(|info| {
                    let waiting = waiting.binary_search(&info.chat_id).is_ok();
                    let turn_seq = sink.turn_seq(&info.chat_id);
                    SessionRow { info, waiting, turn_seq }
                })
                .collect();
            Resp::ok(&SessionsView { sessions })
        }
        Err(e) => {
            log::error!("event=sessions.list_failed error_kind={:?}", e.kind());
            Resp::detail(500, "unable to list sessions")
        }
    }
}

/// Most items one page may ask for.
pub(crate) const MAX_PAGE: i64 = 1000;

/// `GET /api/sessions/{id}/messages[?limit=N[&before=K]][&tools=1]`. Without `limit` the
/// whole list, byte for byte the original answer; with it, the at most N items just before
/// index K (default: the end) plus `start` and `total`, read from the end of the file so a
/// long chat's newest page is quick. `tools=1` adds the tool calls and (previewed) results.
fn messages(api: &Api, id: &str, req: &Req) -> Resp {
    let mut q = Query::of(req);
    let limit = q.int("limit", 1, MAX_PAGE);
    let before = q.int("before", 0, i64::MAX);
    let tools = q.bool("tools").unwrap_or(false);
    if let Err(r) = q.finish() {
        return r;
    }
    if before.is_some() && req.query_param("limit").is_none() {
        let msg = "Field required: before pages backwards and needs limit";
        return Resp::shape(vec![Issue::new("missing", &["query", "limit"], msg, Value::Null)]);
    }
    let chats = &api.chats;
    if !valid_chat_id(id) || !chats.exists(id) {
        return not_found();
    }
    let is_item =
        |role: &str| role == "user" || role == "assistant" || tools && (role == "tool_calls" || role == "tool");
    let Some(path) = chats.history_path(id) else { return not_found() };
    let Some(limit) = limit else {
        // Read line by line, each item at most its first 2 MiB (cut like a page's).
        let mut records = Vec::new();
        let read = paging::records(&path, |r| {
            if is_item(&r.role) {
                records.push(r);
            }
            true
        });
        if let Err(e) = read {
            return read_failed(id, &e);
        }
        let messages = records.iter().map(|r| ItemView::new(r, tools)).collect();
        return Resp::ok(&MessagesView { chat_id: id, messages });
    };
    let before = before.map(|b| usize::try_from(b).unwrap_or(usize::MAX));
    let item: paging::Item = if tools { tool_item } else { text_item };
    let page = match paging::page(&path, limit as usize, before, item) {
        Ok(p) => p,
        Err(e) => return read_failed(id, &e),
    };
    // A line that passed the cheap role scan but does not parse is left out of the page; one
    // over the item cap comes cut, with a note (docs/http-api.md §4).
    let records: Vec<Record> = page.lines.iter().filter_map(paging::PagedLine::record).collect();
    let messages = records.iter().map(|r| ItemView::new(r, tools)).collect();
    Resp::ok(&PageView { chat_id: id, messages, start: page.start, total: page.total })
}

/// Paging's cheap role test: the text messages, or those and the tool steps (`tools=1`).
fn text_item(role: &[u8]) -> bool {
    role == b"user" || role == b"assistant"
}

fn tool_item(role: &[u8]) -> bool {
    text_item(role) || role == b"tool_calls" || role == b"tool"
}

fn read_failed(id: &str, e: &std::io::Error) -> Resp {
    log::error!("event=sessions.read_failed chat_id={id} error_kind={:?}", e.kind());
    Resp::detail(500, "unable to read the session")
}

/// `PATCH /api/sessions/{id}`. A body that is not an object has no `title` (it is `missing`).
#[derive(Deserialize)]
struct RenameBody {
    #[serde(deserialize_with = "title")]
    title: String,
}

impl Model for RenameBody {
    const NON_OBJECT: NonObject = NonObject::NoFields;
}

/// A title with something in it besides whitespace, trimmed.
fn title<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let raw = String::deserialize(d)?;
    let title = raw.trim();
    if title.is_empty() {
        let msg = "Value error, title must not be empty";
        return Err(refuse(vec![Issue::new("value_error", &[], msg, json!(raw)).with_ctx(json!({"error": {}}))]));
    }
    Ok(title.to_string())
}

fn rename(api: &Api, id: &str, req: &Req) -> Resp {
    let title = match body::<RenameBody>(req) {
        Ok(b) => b.title,
        Err(r) => return r,
    };
    match api.agent.rename_chat(id, &title) {
        Ok(()) => Resp::ok(&RenamedView { chat_id: id, title: &title }),
        Err(e) => chat_error(e),
    }
}

fn delete(api: &Api, id: &str) -> Resp {
    match api.agent.delete_chat(id) {
        Ok(()) => Resp::no_content(),
        Err(e) => chat_error(e),
    }
}

/// The one place a chat use case's error becomes a status.
fn chat_error(e: ChatError) -> Resp {
    match e {
        ChatError::UnknownChat => not_found(),
        ChatError::Project(why) => Resp::detail(409, &why),
        ChatError::Storage(detail) => Resp::detail(500, detail),
    }
}

// The bodies. Field order is part of the wire: these were once `serde_json` maps (sorted keys),
// so every struct declares its fields in key order and clients keep seeing the same bytes.

/// `GET /api/sessions`.
#[derive(Serialize)]
struct SessionsView {
    sessions: Vec<SessionRow>,
}

/// A sessions row: the stored chat; our extensions, each only when it applies: `waiting: true`
/// while an approval request of that chat waits for the owner, and `turn_seq` while a turn
/// runs (the `after_seq` that replays it from its start, its message first).
#[derive(Serialize)]
struct SessionRow {
    #[serde(flatten)]
    info: SessionInfo,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    waiting: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    turn_seq: Option<u64>,
}

/// `GET /api/sessions/{id}/messages`: the user and assistant turns.
#[derive(Serialize)]
struct MessagesView<'a> {
    chat_id: &'a str,
    messages: Vec<ItemView<'a>>,
}

/// `GET /api/sessions/{id}/messages?limit=`: one page and where it sits.
#[derive(Serialize)]
struct PageView<'a> {
    chat_id: &'a str,
    messages: Vec<ItemView<'a>>,
    /// Index of the first returned item.
    start: usize,
    /// Items in the whole history.
    total: usize,
}

/// One item: a turn, or (with `tools=1`) a tool step's calls or one result.
#[derive(Serialize)]
#[serde(untagged)]
enum ItemView<'a> {
    Message(MessageView<'a>),
    Calls(ToolCallsView<'a>),
    Result(ToolResultView<'a>),
}

impl<'a> ItemView<'a> {
    /// `stamped` (the `tools=1` opt-in) adds each turn's stored `timestamp`.
    fn new(r: &'a Record, stamped: bool) -> ItemView<'a> {
        match r.role.as_str() {
            "tool_calls" => {
                let calls = r.tool_calls.as_ref().and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                let tool_calls = calls
                    .iter()
                    .map(|c| CallView {
                        arguments: c["function"]["arguments"].as_str().unwrap_or_default(),
                        call_id: c["id"].as_str().unwrap_or_default(),
                        tool_name: c["function"]["name"].as_str().unwrap_or_default(),
                    })
                    .collect();
                ItemView::Calls(ToolCallsView { content: &r.content, cursor: r.cursor, role: "tool_calls", tool_calls })
            }
            "tool" => ItemView::Result(ToolResultView {
                call_id: r.tool_call_id.as_deref().unwrap_or_default(),
                // The same preview the live `tool_result` event carries.
                content: text::take_chars(&r.content, RESULT_PREVIEW),
                cursor: r.cursor,
                role: "tool",
                tool_name: r.name.as_deref().unwrap_or_default(),
                outcome: r.outcome.as_deref(),
                ran: r.ran.as_deref(),
            }),
            _ => {
                let mut view = MessageView::new(r);
                view.timestamp = (stamped && !r.timestamp.is_empty()).then_some(r.timestamp.as_str());
                view.cursor = stamped.then_some(r.cursor);
                ItemView::Message(view)
            }
        }
    }
}

/// A stored tool step's calls (`tools=1`).
#[derive(Serialize)]
struct ToolCallsView<'a> {
    content: &'a str,
    /// The record's `cursor` in history.jsonl (what search hits name).
    cursor: u64,
    role: &'static str,
    tool_calls: Vec<CallView<'a>>,
}

#[derive(Serialize)]
struct CallView<'a> {
    arguments: &'a str,
    call_id: &'a str,
    tool_name: &'a str,
}

/// A stored tool result (`tools=1`), previewed like the live `tool_result`.
#[derive(Serialize)]
struct ToolResultView<'a> {
    call_id: &'a str,
    content: &'a str,
    cursor: u64,
    role: &'static str,
    tool_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ran: Option<&'a str>,
}

/// One stored turn; the selection lists are history data, passed on as stored once sanitized
/// (a user turn only, and only when non-empty).
#[derive(Serialize)]
struct MessageView<'a> {
    content: &'a str,
    /// The record's `cursor` in history.jsonl (`tools=1` only; what search hits name).
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mentioned_skills: Option<Vec<Value>>,
    /// An answer the server wrote in the model's place, as a code and its fields (our
    /// extension; `content` holds its English text).
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a Value>,
    /// The model's reasoning shown above the answer (an assistant turn of a thinking model;
    /// our extension), and how long it took.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_ms: Option<u64>,
    role: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    selected_mcp_connectors: Option<Vec<Value>>,
    /// When the turn was stored (`tools=1` only: the original's answer has no such field).
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<&'a str>,
}

impl<'a> MessageView<'a> {
    fn new(r: &'a Record) -> MessageView<'a> {
        let mut view = MessageView {
            content: &r.content,
            cursor: None,
            mentioned_skills: None,
            note: None,
            reasoning_content: None,
            reasoning_ms: None,
            role: &r.role,
            selected_mcp_connectors: None,
            timestamp: None,
        };
        if r.role == "assistant" {
            view.note = r.note.as_ref();
            view.reasoning_content = crate::store::replay::shown(r);
            view.reasoning_ms = view.reasoning_content.as_ref().and(r.reasoning_ms);
        }
        if r.role == "user" {
            let mut meta = Map::new();
            if let Some(v) = &r.mentioned_skills {
                meta.insert("mentioned_skills".into(), v.clone());
            }
            if let Some(v) = &r.selected_mcp_connectors {
                meta.insert("selected_mcp_connectors".into(), v.clone());
            }
            let list = |field, key, dot| sanitize_list(&meta, field, key, dot).ok().filter(|l| !l.is_empty());
            view.mentioned_skills = list("mentioned_skills", "name", true);
            view.selected_mcp_connectors = list("selected_mcp_connectors", "server", false);
        }
        view
    }
}

/// `PATCH /api/sessions/{id}`.
#[derive(Serialize)]
struct RenamedView<'a> {
    chat_id: &'a str,
    title: &'a str,
}
