//! The WebSocket frame contract (docs/ws-protocol.md §3): validation of the typed frames of
//! `crate::wire` into [`Frame`]s and the `message` metadata sanitiser with the original's exact error texts. Pure functions, called on each
//! client's reader thread and by the sessions API (receipt filtering).

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::bus::Selection;
use crate::llm::Provider;
use crate::util::text::py_repr;
use crate::wire::ClientFrame;

/// Largest accepted incoming message (bytes); bigger ones get an error event.
pub(crate) const MAX_MESSAGE: usize = 1024 * 1024;
/// At most this many skill + MCP selections per message.
pub(crate) const MAX_SELECTIONS: usize = 8;
/// Deepest frame parsed. The contract's deepest shape is 4 levels (envelope, `metadata`, a
/// selection list, its entries); extra fields are ignored but still parsed, so leave room.
/// serde_json needs about 60 KiB of stack for 32 levels in a debug build, which the 128 KiB
/// `ws-client` thread has; its own limit (128 levels) needs about 230 KiB and would overflow it.
pub(crate) const MAX_FRAME_DEPTH: usize = 32;

/// A validated client frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame {
    Ping,
    /// `project`: the directory the new chat works in, decided by `src/projects.rs`.
    NewChat {
        project: Option<String>,
    },
    Attach {
        chat_id: String,
        after_seq: Option<u64>,
    },
    Cancel {
        chat_id: String,
    },
    Message {
        chat_id: String,
        content: String,
        selection: Selection,
        /// The project a chat without history is bound to by this, its first message.
        project: Option<String>,
    },
    /// `decision` is `approve`, `approve_for_chat` or `deny`; whether it answers anything is
    /// `agent::approvals`' call (the chat and id must match a request waiting).
    ApprovalResponse {
        chat_id: String,
        id: String,
        decision: String,
    },
    /// `action` is `accept`, `decline` or `cancel`; `content` is checked by the elicitation.
    ElicitationResponse {
        chat_id: String,
        id: String,
        action: String,
        content: Option<Value>,
    },
}

/// Elicitation and approval ids are ours (`agent::elicit`, `agent::approvals`): short, plain.
fn valid_elicitation_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A frame rejection: the detail and, when known, the chat it concerns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reject {
    pub(crate) detail: String,
    pub(crate) chat_id: Option<String>,
}

fn reject(detail: impl Into<String>, chat_id: Option<&str>) -> Reject {
    Reject { detail: detail.into(), chat_id: chat_id.map(str::to_string) }
}

pub(crate) fn valid_chat_id(id: &str) -> bool {
    crate::store::chats::valid_chat_id(id)
}

/// Parses one text message into a frame.
pub(crate) fn parse_frame(text: &str) -> Result<Frame, Reject> {
    let envelope = || reject("typed JSON envelope required", None);
    if !text.trim_start().starts_with('{') {
        return Err(envelope());
    }
    // Too deep for the reader thread's stack: as invalid as any other unparsable frame.
    if crate::util::json::too_deep(text.as_bytes(), MAX_FRAME_DEPTH).is_some() {
        return Err(envelope());
    }
    // Through a `Value` first: a repeated key keeps its last value, as the original did,
    // where a derived struct would reject the frame.
    let v: Value = serde_json::from_str(text).map_err(|_| envelope())?;
    let kind = v.as_object().and_then(|o| o.get("type")).and_then(Value::as_str).ok_or_else(envelope)?;
    let frame = ClientFrame::deserialize(&v).map_err(|_| envelope())?;
    let chat_id = |id: Option<String>| -> Result<String, Reject> {
        match id {
            Some(id) if valid_chat_id(&id) => Ok(id),
            _ => Err(reject("invalid chat_id", None)),
        }
    };
    match frame {
        ClientFrame::Ping => Ok(Frame::Ping),
        ClientFrame::NewChat { project } => Ok(Frame::NewChat { project }),
        ClientFrame::Attach { chat_id: id, after_seq } => Ok(Frame::Attach { chat_id: chat_id(id)?, after_seq }),
        ClientFrame::Cancel { chat_id: id } => Ok(Frame::Cancel { chat_id: chat_id(id)? }),
        ClientFrame::Message { chat_id: id, content, metadata, project } => {
            let chat_id = chat_id(id)?;
            let content = match content {
                Some(s) if !s.trim().is_empty() => s,
                _ => return Err(reject("missing content", Some(&chat_id))),
            };
            let selection = sanitize_metadata(metadata.as_ref()).map_err(|d| reject(d, Some(&chat_id)))?;
            Ok(Frame::Message { chat_id, content, selection, project })
        }
        // Errors about an answer carry no `chat_id`: a client reads a chat's error as the end
        // of its turn, and the turn goes on (the form stays open).
        ClientFrame::ElicitationResponse { chat_id: id, id: elicitation, action, content } => {
            let chat_id = chat_id(id)?;
            let id = match elicitation {
                Some(e) if valid_elicitation_id(&e) => e,
                _ => return Err(reject("invalid elicitation id", None)),
            };
            let action = match action.as_deref() {
                Some(a @ ("accept" | "decline" | "cancel")) => a.to_string(),
                _ => return Err(reject("elicitation action must be accept, decline or cancel", None)),
            };
            Ok(Frame::ElicitationResponse { chat_id, id, action, content })
        }
        ClientFrame::ApprovalResponse { chat_id: id, id: approval, decision } => {
            let chat_id = chat_id(id)?;
            let id = match approval {
                Some(a) if valid_elicitation_id(&a) => a,
                _ => return Err(reject("invalid approval id", None)),
            };
            let decision = match decision.as_deref() {
                Some(d @ ("approve" | "approve_for_chat" | "deny")) => d.to_string(),
                _ => return Err(reject("approval decision must be approve, approve_for_chat or deny", None)),
            };
            Ok(Frame::ApprovalResponse { chat_id, id, decision })
        }
        ClientFrame::Unknown => Err(reject(format!("unknown type: {}", py_repr(kind)), None)),
    }
}

/// The metadata sanitiser (docs/ws-protocol.md §3.1), in the original's check order.
pub(crate) fn sanitize_metadata(meta: Option<&Value>) -> Result<Selection, String> {
    let meta = match meta {
        None | Some(Value::Null) => return Err("llm selection is required".into()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err("metadata must be an object".into()),
    };
    let llm = match meta.get("llm") {
        None | Some(Value::Null) => return Err("llm selection is required".into()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err("llm must be an object".into()),
    };
    let provider =
        llm.get("provider").and_then(Value::as_str).and_then(Provider::parse).ok_or("llm.provider is invalid")?;
    let model = llm.get("model").and_then(Value::as_str).ok_or("llm.model must be a string")?;
    let model = model.trim();
    if model.is_empty() || model.chars().count() > 256 || model.contains('\0') {
        return Err("llm.model is invalid".into());
    }
    let raw_len = |k: &str| meta.get(k).and_then(Value::as_array).map_or(0, Vec::len);
    if raw_len("mentioned_skills") + raw_len("selected_mcp_connectors") > MAX_SELECTIONS {
        return Err(format!("at most {MAX_SELECTIONS} Skill/MCP selections are allowed"));
    }
    Ok(Selection {
        provider,
        model: model.to_string(),
        mentioned_skills: sanitize_list(meta, "mentioned_skills", "name", true)?,
        selected_mcp_connectors: sanitize_list(meta, "selected_mcp_connectors", "server", false)?,
    })
}

fn valid_identity(s: &str, allow_dot: bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b[1..].iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-' || (allow_dot && *c == b'.')
        })
}

/// One selection list: null -> empty; identities validated; duplicates dropped; labels cleaned.
pub(crate) fn sanitize_list(
    meta: &Map<String, Value>,
    field: &str,
    key: &str,
    allow_dot: bool,
) -> Result<Vec<Value>, String> {
    let items = match meta.get(field) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(format!("{field} must be a list")),
    };
    let mut out: Vec<Value> = Vec::new();
    for item in items {
        let obj = item.as_object().ok_or_else(|| format!("{field} entries must be objects"))?;
        let ident = obj
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| valid_identity(s, allow_dot))
            .ok_or_else(|| format!("{field}.{key} is invalid"))?;
        let label = match obj.get("label") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                let cleaned: String = s.chars().filter(|c| *c != '\0').collect();
                let cleaned = cleaned.trim().to_string();
                if cleaned.chars().count() > 100 {
                    return Err(format!("{field}.label must be at most 100 characters"));
                }
                (!cleaned.is_empty()).then_some(cleaned)
            }
            Some(_) => return Err(format!("{field}.label must be a string")),
        };
        if out.iter().any(|v| v[key] == ident) {
            continue;
        }
        let mut entry = json!({ key: ident });
        if let Some(l) = label {
            entry["label"] = Value::String(l);
        }
        out.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(meta: Value) -> Result<Frame, Reject> {
        parse_frame(&json!({"type": "message", "chat_id": "c1", "content": "hi", "metadata": meta}).to_string())
    }

    fn detail(meta: Value) -> String {
        msg(meta).unwrap_err().detail
    }

    const LLM: &str = r#"{"provider":"openai_compatible","model":"m"}"#;

    #[test]
    fn envelopes() {
        assert_eq!(parse_frame("nope").unwrap_err().detail, "typed JSON envelope required");
        assert_eq!(parse_frame("[1]").unwrap_err().detail, "typed JSON envelope required");
        assert_eq!(parse_frame(r#"{"type":1}"#).unwrap_err().detail, "typed JSON envelope required");
        assert_eq!(parse_frame(r#"{"type":"bogus"}"#).unwrap_err().detail, "unknown type: 'bogus'");
        assert_eq!(parse_frame(r#"{"type":"it's"}"#).unwrap_err().detail, "unknown type: \"it's\"");
        assert_eq!(parse_frame(r#"{"type":"ping","x":1}"#).unwrap(), Frame::Ping);
        assert_eq!(parse_frame(r#"{"type":"attach","chat_id":"../x"}"#).unwrap_err().detail, "invalid chat_id");
        assert_eq!(
            parse_frame(r#"{"type":"attach","chat_id":"a","after_seq":5}"#).unwrap(),
            Frame::Attach { chat_id: "a".into(), after_seq: Some(5) }
        );
        assert_eq!(parse_frame(r#"{"type":"stop","chat_id":"a"}"#).unwrap(), Frame::Cancel { chat_id: "a".into() });
    }

    #[test]
    fn message_validation_order_and_texts() {
        let r = parse_frame(r#"{"type":"message","chat_id":"c1","content":"  "}"#).unwrap_err();
        assert_eq!((r.detail.as_str(), r.chat_id.as_deref()), ("missing content", Some("c1")));
        assert_eq!(detail(Value::Null), "llm selection is required");
        assert_eq!(detail(json!([])), "metadata must be an object");
        assert_eq!(detail(json!({})), "llm selection is required");
        assert_eq!(detail(json!({"llm": "x"})), "llm must be an object");
        assert_eq!(detail(json!({"llm": {"provider": "x", "model": "m"}})), "llm.provider is invalid");
        assert_eq!(detail(json!({"llm": {"provider": "ollama", "model": 1}})), "llm.model must be a string");
        assert_eq!(detail(json!({"llm": {"provider": "ollama", "model": " "}})), "llm.model is invalid");
        assert_eq!(detail(json!({"llm": {"provider": "ollama", "model": "a\u{0}"}})), "llm.model is invalid");
        assert_eq!(detail(json!({"llm": {"provider": "ollama", "model": "x".repeat(257)}})), "llm.model is invalid");
        let llm: Value = serde_json::from_str(LLM).unwrap();
        let nine: Vec<Value> = (0..9).map(|i| json!({"name": format!("s{i}")})).collect();
        assert_eq!(detail(json!({"llm": llm, "mentioned_skills": nine})), "at most 8 Skill/MCP selections are allowed");
        assert_eq!(detail(json!({"llm": llm, "mentioned_skills": "x"})), "mentioned_skills must be a list");
        assert_eq!(detail(json!({"llm": llm, "mentioned_skills": [1]})), "mentioned_skills entries must be objects");
        assert_eq!(
            detail(json!({"llm": llm, "mentioned_skills": [{"name": "Bad"}]})),
            "mentioned_skills.name is invalid"
        );
        assert_eq!(
            detail(json!({"llm": llm, "selected_mcp_connectors": [{"server": "a.b"}]})),
            "selected_mcp_connectors.server is invalid"
        );
        assert_eq!(
            detail(json!({"llm": llm, "mentioned_skills": [{"name": "a", "label": 3}]})),
            "mentioned_skills.label must be a string"
        );
        assert_eq!(
            detail(json!({"llm": llm, "mentioned_skills": [{"name": "a", "label": "x".repeat(101)}]})),
            "mentioned_skills.label must be at most 100 characters"
        );
    }

    #[test]
    fn selections_are_cleaned() {
        let llm: Value = serde_json::from_str(LLM).unwrap();
        let Frame::Message { selection, .. } = msg(json!({
            "llm": llm,
            "mentioned_skills": [{"name": " weather ", "label": " W\u{0}x "}, {"name": "weather"}, {"name": "a.b", "label": "  "}],
            "selected_mcp_connectors": null,
            "revert_keep_user_turns": 3
        }))
        .unwrap() else {
            panic!()
        };
        assert_eq!(selection.mentioned_skills, vec![json!({"name": "weather", "label": "Wx"}), json!({"name": "a.b"})]);
        assert!(selection.selected_mcp_connectors.is_empty());
        assert_eq!(selection.model, "m");
    }

    /// A message frame nesting `depth` levels in all: envelope, `metadata`, then objects in an
    /// extra (ignored) metadata field.
    fn deep_message(depth: usize) -> String {
        let extra = depth - 2;
        format!(
            r#"{{"type":"message","chat_id":"c1","content":"hi","metadata":{{"llm":{LLM},"x":{}1{}}}}}"#,
            r#"{"a":"#.repeat(extra),
            "}".repeat(extra)
        )
    }

    /// Parses on a thread with `stack` bytes, as the `ws-client` thread does.
    fn parse_on_stack(text: String, stack: usize) -> Result<Frame, Reject> {
        std::thread::Builder::new().stack_size(stack).spawn(move || parse_frame(&text)).unwrap().join().unwrap()
    }

    /// The deepest frame accepted parses on three quarters of the `ws-client` stack (a quarter
    /// is left for the reader loop's own frames); deeper ones, up to serde_json's limit and
    /// far past it, are refused before serde_json recurses. Run in a debug build, the worst case.
    #[test]
    fn frames_nest_at_most_max_frame_depth_levels_within_the_client_stack() {
        let stack = crate::ws::CLIENT_STACK * 3 / 4;
        let ok = parse_on_stack(deep_message(MAX_FRAME_DEPTH), stack).expect("the deepest frame allowed");
        assert!(matches!(ok, Frame::Message { .. }), "{ok:?}");
        for depth in [MAX_FRAME_DEPTH + 1, 128, 129, 100_000] {
            let r = parse_on_stack(deep_message(depth), stack).unwrap_err();
            assert_eq!((r.detail.as_str(), r.chat_id), ("typed JSON envelope required", None), "depth {depth}");
        }
        let arrays = format!(r#"{{"type":"ping","x":{}{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(parse_on_stack(arrays, stack).unwrap_err().detail, "typed JSON envelope required");
    }
}

#[cfg(test)]
mod property {
    use super::*;
    use crate::util::prng::Prng;

    const PIECES: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"type\"",
        "\"message\"",
        "\"attach\"",
        "\"chat_id\"",
        "\"c1\"",
        "\"content\"",
        "\"hi\"",
        "\"metadata\"",
        "\"llm\"",
        "\"provider\"",
        "\"ollama\"",
        "\"model\"",
        "\"m\"",
        "\"mentioned_skills\"",
        "\"name\"",
        "\"label\"",
        "null",
        "1",
        "-1e999",
        "true",
        "\"\\u0000\"",
        "\"after_seq\"",
        "18446744073709551616",
        "\"\u{5b57}\"",
        " ",
    ];

    /// Random token soups and byte noise: parsing never panics and every rejection carries a
    /// known detail.
    #[test]
    fn random_frames_never_panic() {
        let mut rng = Prng::new(crate::util::prng::seed(0x5eed));
        let known = [
            "typed JSON envelope required",
            "invalid chat_id",
            "missing content",
            "llm selection is required",
            "metadata must be an object",
            "llm must be an object",
            "llm.provider is invalid",
            "llm.model must be a string",
            "llm.model is invalid",
            "at most 8 Skill/MCP selections are allowed",
        ];
        let mut accepted = 0;
        let n = crate::util::prng::cases(200_000);
        for i in 0..n {
            let vals = [
                json!(null),
                json!(1),
                json!("ollama"),
                json!("m"),
                json!(""),
                json!({}),
                json!([]),
                json!("c1"),
                json!([{"name": "a"}]),
                json!({"provider": "ollama", "model": "m"}),
            ];
            let text = if i % 3 == 1 {
                let mut meta = serde_json::Map::new();
                for k in ["llm", "mentioned_skills", "selected_mcp_connectors"] {
                    if rng.chance(70) {
                        meta.insert(k.into(), rng.pick(&vals).clone());
                    }
                }
                if rng.chance(50) {
                    meta.insert("llm".into(), json!({"provider": "ollama", "model": rng.pick(&vals)}));
                }
                let kind = *rng.pick(&["message", "attach", "ping", "cancel", "x"]);
                json!({"type": kind, "chat_id": rng.pick(&vals), "content": rng.pick(&vals), "metadata": meta})
                    .to_string()
            } else if i % 10 == 0 {
                let n = rng.below(64);
                String::from_utf8_lossy(&rng.bytes(n)).into_owned()
            } else {
                (0..rng.below(40)).map(|_| *rng.pick(PIECES)).collect::<String>()
            };
            match parse_frame(&text) {
                Ok(_) => accepted += 1,
                Err(r) => assert!(
                    known.contains(&r.detail.as_str())
                        || r.detail.starts_with("unknown type: ")
                        || r.detail.starts_with("mentioned_skills")
                        || r.detail.starts_with("selected_mcp_connectors"),
                    "unexpected detail {:?} for {text:?}",
                    r.detail
                ),
            }
        }
        assert!(accepted > 0, "the generator should also produce valid frames");
    }
}
