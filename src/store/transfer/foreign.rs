//! Other products' exports as chats: ChatGPT's `conversations.json` (a list of conversations,
//! each a `mapping` tree of nodes with `parent`/`children`; the chat shown is the path from the
//! root to `current_node`) and Open WebUI's chat export (a list of `{id, title, chat: {history:
//! {messages: {id: {parentId, role, content, timestamp}}, currentId}, messages: [...]}}`; the
//! path to `currentId`, else the flat `messages`). User and assistant text becomes our `user`
//! and `assistant` records, stamped with the message's own time; tool traffic, system prompts,
//! hidden messages and attachments' bodies are left out. Pure; runs on an `http-slow` thread.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::import::{Source, TITLE_CHARS};
use super::{NewChat, Refusal, MAX_CHAT_BYTES, MAX_IMPORT_CHATS, MAX_RECORDS};
use crate::store::chats::{valid_chat_id, Record};
use crate::util::{text, time};

/// Nodes one conversation's tree may have: bounds the walk to the current node (which also
/// stops at a cycle) before any record is built.
pub(crate) const MAX_NODES: usize = 200_000;
/// Latest timestamp taken as seconds; larger numbers are milliseconds (Open WebUI has written
/// both). 10^11 s is the year 5138.
const SECONDS_UP_TO: f64 = 1e11;

/// One message as it will be stored.
struct Turn {
    role: &'static str,
    text: String,
    secs: Option<i64>,
}

/// Reads a ChatGPT or Open WebUI export.
pub(crate) fn read(bytes: &[u8]) -> Result<(Source, Vec<NewChat>), Refusal> {
    if bytes.len() as u64 > MAX_CHAT_BYTES {
        return Err(Refusal::new(format!("the file is larger than {} MiB", MAX_CHAT_BYTES >> 20)));
    }
    // serde_json refuses nesting deeper than 128 levels with an error, never a deep recursion.
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        if e.to_string().contains("recursion limit") {
            Refusal::new("the file's JSON is nested too deeply")
        } else {
            Refusal::new(format!(
                "the file is not a CashCode history, a CashCode zip, ChatGPT's conversations.json or an Open WebUI export ({e})"
            ))
        }
    })?;
    let items: Vec<&Value> = match &v {
        Value::Array(a) => a.iter().collect(),
        Value::Object(_) => vec![&v],
        _ => Vec::new(),
    };
    if items.len() > MAX_IMPORT_CHATS {
        return Err(Refusal::new(format!("the file has more than {MAX_IMPORT_CHATS} conversations")));
    }
    let first = items.first().ok_or_else(|| Refusal::new("the file holds no conversations"))?;
    let source = if first.get("mapping").is_some() {
        Source::Chatgpt
    } else if first.get("chat").is_some() || first.get("history").is_some() {
        Source::OpenWebui
    } else {
        return Err(Refusal::new(
            "the file is not a CashCode history, a CashCode zip, ChatGPT's conversations.json or an Open WebUI export",
        ));
    };
    let mut chats = Vec::new();
    for (n, item) in items.iter().enumerate() {
        let (id, title, turns) = match source {
            Source::Chatgpt => chatgpt(item),
            _ => open_webui(item),
        }
        .map_err(|r| Refusal::new(format!("conversation {}: {}", n + 1, r.0)))?;
        if let Some(chat) = chat(id, title, turns)? {
            chats.push(chat);
        }
    }
    if chats.is_empty() {
        return Err(Refusal::new("the file holds no user or assistant messages"));
    }
    Ok((source, chats))
}

fn secs_of(v: Option<&Value>) -> Option<i64> {
    let f = v.and_then(Value::as_f64).filter(|f| f.is_finite() && *f > 0.0)?;
    let secs = if f > SECONDS_UP_TO { f / 1000.0 } else { f };
    // The last second of year 9999: the stamp keeps its 4-digit year.
    Some((secs as i64).min(253_402_300_799))
}

fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// One ChatGPT conversation: (id, title, turns on the path to `current_node`).
fn chatgpt(conv: &Value) -> Result<(Option<String>, String, Vec<Turn>), Refusal> {
    let mapping = conv.get("mapping").and_then(Value::as_object).ok_or_else(|| Refusal::new("no mapping"))?;
    if mapping.len() > MAX_NODES {
        return Err(Refusal::new(format!("more than {MAX_NODES} messages")));
    }
    let leaf = match str_of(conv, "current_node").filter(|c| mapping.contains_key(*c)) {
        Some(c) => c.to_string(),
        None => last_leaf(mapping)?,
    };
    let path = walk_up(mapping, &leaf, "parent")?;
    let conv_secs = secs_of(conv.get("create_time"));
    let mut turns = Vec::new();
    for node in path {
        let Some(msg) = node.get("message").filter(|m| m.is_object()) else { continue };
        let role = match msg.get("author").and_then(|a| str_of(a, "role")) {
            Some("user") => "user",
            Some("assistant") => "assistant",
            _ => continue,
        };
        let meta = msg.get("metadata");
        if meta.and_then(|m| m.get("is_visually_hidden_from_conversation")).and_then(Value::as_bool) == Some(true) {
            continue;
        }
        // An assistant message to a tool (`recipient` other than "all") is a call, not an answer.
        if role == "assistant" && str_of(msg, "recipient").is_some_and(|r| r != "all") {
            continue;
        }
        let content = msg.get("content");
        let text = match content.and_then(|c| str_of(c, "content_type")) {
            Some("text" | "multimodal_text") => content
                .and_then(|c| c.get("parts"))
                .and_then(Value::as_array)
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| match p {
                            Value::String(s) => Some(s.clone()),
                            Value::Object(o) if o.get("content_type").and_then(Value::as_str).is_some() => {
                                Some("[attachment]".to_string())
                            }
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
            Some("code") => {
                let code = content.and_then(|c| str_of(c, "text")).unwrap_or("");
                format!("```\n{code}\n```")
            }
            _ => continue,
        };
        if text.trim().is_empty() {
            continue;
        }
        turns.push(Turn { role, text, secs: secs_of(msg.get("create_time")).or(conv_secs) });
    }
    let id = str_of(conv, "conversation_id").or_else(|| str_of(conv, "id")).map(str::to_string);
    Ok((id, str_of(conv, "title").unwrap_or("").to_string(), turns))
}

/// The leaf a conversation without `current_node` shows: from the root, the last child each time.
fn last_leaf(mapping: &Map<String, Value>) -> Result<String, Refusal> {
    let root = mapping
        .iter()
        .find(|(_, n)| n.get("parent").is_none_or(Value::is_null))
        .map(|(k, _)| k.clone())
        .ok_or_else(|| Refusal::new("the message tree has no root"))?;
    let mut at = root;
    for _ in 0..mapping.len() {
        let next = mapping
            .get(&at)
            .and_then(|n| n.get("children"))
            .and_then(Value::as_array)
            .and_then(|c| c.last())
            .and_then(Value::as_str)
            .filter(|c| mapping.contains_key(*c));
        match next {
            Some(n) => at = n.to_string(),
            None => return Ok(at),
        }
    }
    Err(Refusal::new("the message tree has a cycle"))
}

/// The nodes from the root down to `leaf`, following `parent_key` upwards; a cycle or a
/// path longer than the tree is refused.
fn walk_up<'a>(nodes: &'a Map<String, Value>, leaf: &str, parent_key: &str) -> Result<Vec<&'a Value>, Refusal> {
    let mut seen = HashSet::new();
    let mut path = Vec::new();
    let mut at = Some(leaf.to_string());
    while let Some(id) = at {
        let Some(node) = nodes.get(&id) else { break };
        if !seen.insert(id) {
            return Err(Refusal::new("the message tree has a cycle"));
        }
        path.push(node);
        at = node.get(parent_key).and_then(Value::as_str).map(str::to_string);
    }
    path.reverse();
    Ok(path)
}

/// One Open WebUI chat: (id, title, turns on the path to `history.currentId`, else `messages`).
fn open_webui(item: &Value) -> Result<(Option<String>, String, Vec<Turn>), Refusal> {
    let chat = item.get("chat").filter(|c| c.is_object()).unwrap_or(item);
    let history = chat.get("history");
    let tree = history.and_then(|h| h.get("messages")).and_then(Value::as_object);
    let current = history.and_then(|h| str_of(h, "currentId"));
    let list: Vec<&Value> = match (tree, current) {
        (Some(tree), Some(cur)) if tree.contains_key(cur) => {
            if tree.len() > MAX_NODES {
                return Err(Refusal::new(format!("more than {MAX_NODES} messages")));
            }
            walk_up(tree, cur, "parentId")?
        }
        _ => {
            let flat = chat.get("messages").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default();
            if Vec::len(&flat) > MAX_NODES {
                return Err(Refusal::new(format!("more than {MAX_NODES} messages")));
            }
            flat
        }
    };
    let chat_secs = secs_of(item.get("created_at")).or_else(|| secs_of(chat.get("timestamp")));
    let mut turns = Vec::new();
    for m in list {
        let role = match str_of(m, "role") {
            Some("user") => "user",
            Some("assistant") => "assistant",
            _ => continue,
        };
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            // The OpenAI-style list of parts some versions store.
            Some(Value::Array(parts)) => {
                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
            }
            _ => continue,
        };
        if text.trim().is_empty() {
            continue;
        }
        turns.push(Turn { role, text, secs: secs_of(m.get("timestamp")).or(chat_secs) });
    }
    let title = str_of(item, "title").or_else(|| str_of(chat, "title")).unwrap_or("").to_string();
    let id = str_of(item, "id").or_else(|| str_of(chat, "id")).map(str::to_string);
    Ok((id, title, turns))
}

/// The chat the turns make, as the store would have written it; `None` without turns.
fn chat(id: Option<String>, title: String, turns: Vec<Turn>) -> Result<Option<NewChat>, Refusal> {
    if turns.is_empty() {
        return Ok(None);
    }
    if turns.len() > MAX_RECORDS {
        return Err(Refusal::new(format!("a conversation has more than {MAX_RECORDS} messages")));
    }
    let fallback = time::minute_stamp();
    let mut history = Vec::new();
    for (n, t) in turns.iter().enumerate() {
        let mut r = Record::new(t.role, t.text.clone());
        r.cursor = n as u64 + 1;
        r.timestamp = t.secs.map(time::minute_stamp_of).unwrap_or_else(|| fallback.clone());
        serde_json::to_writer(&mut history, &r).map_err(|e| Refusal::new(e.to_string()))?;
        history.push(b'\n');
    }
    let title = if title.trim().is_empty() {
        let first = turns.iter().find(|t| t.role == "user").unwrap_or(&turns[0]);
        text::take_chars(&text::collapse_ws(&first.text), TITLE_CHARS).to_string()
    } else {
        text::collapse_ws(&title)
    };
    let mut metadata = Map::new();
    metadata.insert("title".into(), json!(title));
    Ok(Some(NewChat {
        wanted_id: id.filter(|i| valid_chat_id(i)),
        history,
        metadata,
        last_cursor: turns.len() as u64,
        records: turns.len(),
    }))
}
