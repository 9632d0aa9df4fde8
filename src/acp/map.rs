//! The mapping between CashCode's wire and ACP's (docs/acp.md §4): a prompt's content blocks
//! to a message's text, chat events to `session/update`s, a stored transcript to the updates
//! that replay it, approvals to permission options. Pure functions over JSON, so every row of
//! the mapping is a unit test.

use serde_json::{json, Map, Value};

/// Option ids of a permission request, and the approval decision each one answers.
pub(crate) const ALLOW_ONCE: &str = "allow_once";
pub(crate) const ALLOW_ALWAYS: &str = "allow_always";
pub(crate) const REJECT: &str = "reject_once";

/// ACP's tool kind for one of our tools (the editor picks an icon by it).
pub(crate) fn tool_kind(tool: &str) -> &'static str {
    match tool {
        "read_file" | "list_dir" | "skill_load" | "skill_read_resource" => "read",
        "write_file" | "edit_file" | "save_memory" | "agent_skill_manage" => "edit",
        "glob" | "grep" | "tool_search" | "skill_search" | "web_search" | "search_history" => "search",
        "exec" => "execute",
        "web_fetch" => "fetch",
        _ => "other",
    }
}

/// A short title for a tool call: the tool and, when the arguments are known, what it works on.
pub(crate) fn tool_title(tool: &str, args: Option<&Value>) -> String {
    let arg = |k: &str| args.and_then(|a| a.get(k)).and_then(Value::as_str);
    let what = match tool {
        "exec" => arg("command"),
        "read_file" | "write_file" | "edit_file" | "list_dir" => arg("path"),
        "glob" | "grep" => arg("pattern"),
        "web_fetch" => arg("url"),
        "web_search" | "tool_search" | "skill_search" | "search_history" => arg("query"),
        _ => None,
    };
    match what {
        Some(w) => format!("{tool}: {}", crate::util::text::take_chars(w, 120)),
        None => tool.to_string(),
    }
}

/// The text of a user message from a prompt's content blocks: text as is, a linked resource as
/// a Markdown link, an embedded text resource as a fenced block under its URI. Images, audio
/// and binary resources are refused (the capabilities say so).
pub(crate) fn prompt_text(blocks: &Value) -> Result<String, String> {
    let Some(blocks) = blocks.as_array() else {
        return Err("prompt must be a list of content blocks".into());
    };
    let mut parts: Vec<String> = Vec::new();
    for b in blocks {
        let s = |k: &str| b.get(k).and_then(Value::as_str);
        match s("type") {
            Some("text") => parts.push(s("text").ok_or("a text block needs \"text\"")?.to_string()),
            Some("resource_link") => {
                let uri = s("uri").ok_or("a resource_link block needs \"uri\"")?;
                let name = s("name").unwrap_or(uri);
                parts.push(format!("[{name}]({uri})"));
            }
            Some("resource") => {
                let r = b.get("resource").ok_or("a resource block needs \"resource\"")?;
                let uri = r.get("uri").and_then(Value::as_str).unwrap_or("resource");
                let Some(text) = r.get("text").and_then(Value::as_str) else {
                    return Err(format!("{uri}: only text resources can be sent to CashCode"));
                };
                parts.push(format!("{uri}:\n```\n{text}\n```"));
            }
            Some(t @ ("image" | "audio")) => return Err(format!("CashCode does not take {t} content")),
            Some(other) => return Err(format!("unknown content block type {other:?}")),
            None => return Err("a content block needs a \"type\"".into()),
        }
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(text)
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn chunk(kind: &str, text: &str) -> Value {
    json!({"sessionUpdate": kind, "content": text_block(text)})
}

/// The tool-call content an editor shows for a finished call: a diff for a whole-file write or
/// an edit whose old and new text are known, else the result text.
fn tool_content(tool: &str, args: Option<&Value>, result: &str) -> Value {
    let arg = |k: &str| args.and_then(|a| a.get(k)).and_then(Value::as_str);
    let diff = match (tool, arg("path")) {
        ("write_file", Some(path)) => arg("content").map(|new| json!({"type": "diff", "path": path, "newText": new})),
        ("edit_file", Some(path)) => {
            match (arg("old_string").or(arg("old_text")), arg("new_string").or(arg("new_text"))) {
                (Some(old), Some(new)) => Some(json!({"type": "diff", "path": path, "oldText": old, "newText": new})),
                _ => None,
            }
        }
        _ => None,
    };
    let text = json!({"type": "content", "content": text_block(result)});
    Value::Array(diff.into_iter().chain(std::iter::once(text)).collect())
}

/// ACP paths are absolute: a diff's path the model gave relative to the chat's directory is
/// joined to the session's `cwd` (display only; the server decided where the tool wrote).
pub(crate) fn anchor_paths(update: &mut Value, cwd: &std::path::Path) {
    let Some(items) = update.get_mut("content").and_then(Value::as_array_mut) else { return };
    for item in items.iter_mut().filter(|i| i["type"] == "diff") {
        if let Some(path) = item["path"].as_str().filter(|p| !std::path::Path::new(p).is_absolute()) {
            item["path"] = Value::String(cwd.join(path).display().to_string());
        }
    }
}

/// A tool call as it starts (`tool_call`), from our `tool_call` event or a stored call.
pub(crate) fn tool_call_started(call_id: &str, tool: &str, args: Option<&Value>, status: &str) -> Value {
    let mut v = json!({
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": tool_title(tool, args),
        "kind": tool_kind(tool),
        "status": status,
    });
    if let Some(a) = args {
        v["rawInput"] = a.clone();
    }
    v
}

/// A tool call's end (`tool_call_update`). `outcome` is the server's when it sends one (`ok`,
/// `error`, `denied`, `timeout`, …); without it a result reads as completed.
pub(crate) fn tool_call_finished(
    call_id: &str,
    tool: &str,
    args: Option<&Value>,
    result: &str,
    outcome: Option<&str>,
) -> Value {
    let status = match outcome {
        None | Some("ok") => "completed",
        Some(_) => "failed",
    };
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": status,
        "content": tool_content(tool, args, result),
        "rawOutput": {"result": result},
    })
}

/// The `session/update` for one chat event, or `None` for events an editor has no use for.
/// `args` looks up the arguments of a call the bridge saw start (for titles and diffs).
pub(crate) fn event_update(ev: &Value, args: impl Fn(&str) -> Option<Value>) -> Option<Value> {
    let s = |k: &str| ev.get(k).and_then(Value::as_str);
    match s("event")? {
        "delta" => Some(chunk("agent_message_chunk", s("text")?)),
        "reasoning" => Some(chunk("agent_thought_chunk", s("text")?)),
        "tool_call" => {
            let call = s("call_id")?;
            let given = ev.get("arguments").filter(|a| a.is_object()).cloned();
            Some(tool_call_started(call, s("tool_name")?, given.or_else(|| args(call)).as_ref(), "in_progress"))
        }
        "tool_result" => {
            let call = s("call_id")?;
            Some(tool_call_finished(call, s("tool_name")?, args(call).as_ref(), s("result")?, s("outcome")))
        }
        "session_updated" => Some(json!({
            "sessionUpdate": "session_info_update",
            "title": s("title")?,
            "updatedAt": s("updated_at"),
        })),
        "usage" => {
            let used = ev.get("context_tokens").and_then(Value::as_u64)?;
            let size = ev.get("context_window").and_then(Value::as_u64)?;
            Some(json!({"sessionUpdate": "usage_update", "used": used, "size": size}))
        }
        _ => None,
    }
}

/// The updates that replay a stored chat (`GET /api/sessions/{id}/messages?tools=1`) for
/// `session/load`: user and assistant messages, each tool call with its result.
pub(crate) fn history_updates(items: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut calls: Map<String, Value> = Map::new();
    for it in items {
        let s = |k: &str| it.get(k).and_then(Value::as_str);
        match s("role") {
            Some("user") => out.extend(s("content").map(|c| chunk("user_message_chunk", c))),
            Some("assistant") => {
                if let Some(r) = s("reasoning_content").filter(|r| !r.is_empty()) {
                    out.push(chunk("agent_thought_chunk", r));
                }
                out.extend(s("content").filter(|c| !c.is_empty()).map(|c| chunk("agent_message_chunk", c)))
            }
            Some("tool_calls") => {
                for c in it.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let (Some(id), Some(tool)) =
                        (c.get("call_id").and_then(Value::as_str), c.get("tool_name").and_then(Value::as_str))
                    else {
                        continue;
                    };
                    let args = c.get("arguments").filter(|a| a.is_object());
                    out.push(tool_call_started(id, tool, args, "in_progress"));
                    calls.insert(id.to_string(), json!({"tool": tool, "args": args}));
                }
            }
            Some("tool") => {
                let (Some(id), Some(content)) = (s("call_id"), s("content")) else { continue };
                let known = calls.get(id);
                let tool = known.and_then(|k| k["tool"].as_str()).or(s("tool_name")).unwrap_or("tool");
                let args = known.map(|k| &k["args"]).filter(|a| a.is_object());
                out.push(tool_call_finished(id, tool, args, content, s("outcome")));
            }
            _ => {}
        }
    }
    out
}

/// The permission options for an approval request: approve once, approve for this chat (only
/// where the server says the grant covers more than this once), reject.
pub(crate) fn permission_options(req: &Value) -> Value {
    let mut options = vec![json!({"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"})];
    // `grant: null` from a server that scopes grants means "for this chat" would only approve
    // once; a server without the field offers it as before.
    let grant = req.get("grant");
    if grant.is_none_or(|g| !g.is_null()) {
        let name = match grant.and_then(|g| g.get("argv")).and_then(Value::as_array) {
            Some(argv) => {
                let words: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
                format!("Allow `{}` for this chat", crate::util::text::take_chars(&words.join(" "), 80))
            }
            None => "Allow for this chat".to_string(),
        };
        options.push(json!({"optionId": ALLOW_ALWAYS, "name": name, "kind": "allow_always"}));
    }
    options.push(json!({"optionId": REJECT, "name": "Reject", "kind": "reject_once"}));
    Value::Array(options)
}

/// The approval decision for the editor's answer to a permission request.
pub(crate) fn decision(outcome: &Value) -> &'static str {
    match (outcome.get("outcome").and_then(Value::as_str), outcome.get("optionId").and_then(Value::as_str)) {
        (Some("selected"), Some(ALLOW_ONCE)) => "approve",
        (Some("selected"), Some(ALLOW_ALWAYS)) => "approve_for_chat",
        _ => "deny",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_become_one_message() {
        let p = json!([
            {"type": "text", "text": "Explain"},
            {"type": "resource_link", "uri": "file:///p/a.rs", "name": "a.rs"},
            {"type": "resource", "resource": {"uri": "file:///p/b.rs", "text": "fn b() {}"}}
        ]);
        assert_eq!(
            prompt_text(&p).unwrap(),
            "Explain\n\n[a.rs](file:///p/a.rs)\n\nfile:///p/b.rs:\n```\nfn b() {}\n```"
        );
        for bad in [
            json!("text"),
            json!([]),
            json!([{"type": "text", "text": "  "}]),
            json!([{"type": "image", "data": "x", "mimeType": "image/png"}]),
            json!([{"type": "resource", "resource": {"uri": "u", "blob": "AA=="}}]),
            json!([{"type": "wat"}]),
            json!([{"text": "no type"}]),
        ] {
            assert!(prompt_text(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn events_map_to_session_updates() {
        let none = |_: &str| None;
        assert_eq!(
            event_update(&json!({"event": "delta", "chat_id": "c", "text": "Hi", "stream_id": 1, "seq": 3}), none),
            Some(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}}))
        );
        assert_eq!(
            event_update(&json!({"event": "reasoning", "text": "hmm"}), none).unwrap()["sessionUpdate"],
            "agent_thought_chunk"
        );
        let started = event_update(
            &json!({"event": "tool_call", "tool_name": "exec", "call_id": "c1", "arguments": {"command": "ls -l"}}),
            none,
        )
        .unwrap();
        assert_eq!(
            (started["title"].as_str(), started["kind"].as_str(), started["status"].as_str()),
            (Some("exec: ls -l"), Some("execute"), Some("in_progress"))
        );
        let args = |id: &str| (id == "w1").then(|| json!({"path": "a.txt", "content": "new\n"}));
        let done = event_update(
            &json!({"event": "tool_result", "tool_name": "write_file", "call_id": "w1", "result": "wrote 4 bytes"}),
            args,
        )
        .unwrap();
        assert_eq!(done["status"], "completed");
        assert_eq!(done["content"][0], json!({"type": "diff", "path": "a.txt", "newText": "new\n"}));
        let mut anchored = done.clone();
        anchor_paths(&mut anchored, std::path::Path::new("/home/me/proj"));
        assert_eq!(anchored["content"][0]["path"], "/home/me/proj/a.txt");
        anchor_paths(&mut anchored, std::path::Path::new("/elsewhere"));
        assert_eq!(anchored["content"][0]["path"], "/home/me/proj/a.txt", "an absolute path stays");
        assert_eq!(done["content"][1]["content"]["text"], "wrote 4 bytes");
        let failed = event_update(
            &json!({"event": "tool_result", "tool_name": "exec", "call_id": "x", "result": "denied", "outcome": "denied"}),
            none,
        )
        .unwrap();
        assert_eq!(failed["status"], "failed");
        assert_eq!(
            event_update(&json!({"event": "usage", "context_tokens": 10, "context_window": 100}), none),
            Some(json!({"sessionUpdate": "usage_update", "used": 10, "size": 100}))
        );
        for ignored in ["stream_end", "done", "attached", "pong", "approval_end"] {
            assert_eq!(event_update(&json!({"event": ignored}), none), None);
        }
    }

    #[test]
    fn a_transcript_replays_in_order() {
        let items = json!([
            {"role": "user", "content": "hello"},
            {"role": "tool_calls", "tool_calls": [{"call_id": "e1", "tool_name": "edit_file",
                "arguments": {"path": "a", "old_string": "x", "new_string": "y"}}]},
            {"role": "tool", "call_id": "e1", "tool_name": "edit_file", "content": "ok"},
            {"role": "assistant", "content": "done", "reasoning_content": "think"}
        ]);
        let u = history_updates(items.as_array().unwrap());
        let kinds: Vec<&str> = u.iter().map(|x| x["sessionUpdate"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["user_message_chunk", "tool_call", "tool_call_update", "agent_thought_chunk", "agent_message_chunk"]
        );
        assert_eq!(u[2]["content"][0], json!({"type": "diff", "path": "a", "oldText": "x", "newText": "y"}));
    }

    #[test]
    fn permission_options_follow_the_grant() {
        let ids = |v: Value| {
            v.as_array().unwrap().iter().map(|o| o["optionId"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        };
        assert_eq!(ids(permission_options(&json!({}))), [ALLOW_ONCE, ALLOW_ALWAYS, REJECT]);
        assert_eq!(ids(permission_options(&json!({"grant": null}))), [ALLOW_ONCE, REJECT]);
        let named = permission_options(&json!({"grant": {"scope": "exact", "argv": ["git", "status"]}}));
        assert_eq!(named[1]["name"], "Allow `git status` for this chat");
        assert_eq!(decision(&json!({"outcome": "selected", "optionId": ALLOW_ONCE})), "approve");
        assert_eq!(decision(&json!({"outcome": "selected", "optionId": ALLOW_ALWAYS})), "approve_for_chat");
        assert_eq!(decision(&json!({"outcome": "selected", "optionId": REJECT})), "deny");
        assert_eq!(decision(&json!({"outcome": "cancelled"})), "deny");
        assert_eq!(decision(&json!({"outcome": "selected", "optionId": "bogus"})), "deny");
    }
}
