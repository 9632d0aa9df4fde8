//! MCP elicitation through real turns: a stdio server on the official Python SDK
//! (tests/fixtures/mcp/elicit_server.py) asks a form during `tools/call`; the chat's WebSocket
//! client gets the `elicitation` event and answers with an `elicitation_response` frame. Covers
//! accept with content (after the call timeout would have fired), invalid content and unknown
//! ids (error frames, the form stays open), decline, cancel, the elicitation timeout, nobody
//! attached, and a turn cancel while the form is open. Needs `bash scripts/setup.sh` (.venv).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

const TOOL: &str = "mcp_forms_book_table";

/// A project dir whose only built-in MCP server is the elicitation fixture, named `forms`.
fn project(home: &Path) -> PathBuf {
    let dir = home.join("project");
    std::fs::create_dir_all(dir.join("mcp_servers")).expect("project dir");
    std::fs::write(dir.join("Cargo.toml"), "").expect("Cargo.toml");
    let fixture = fixture("mcp/elicit_server.py");
    let entry = json!({"forms": {"type": "stdio", "command": venv_python().display().to_string(),
                                 "args": [fixture.display().to_string()], "display_name": "Forms"}});
    std::fs::write(dir.join("mcp_servers/mcp_config.json"), entry.to_string()).expect("mcp_config.json");
    dir
}

fn start(env: &[(&str, &str)]) -> (FakeLlm, TestServer) {
    let fake = FakeLlm::start();
    let home = fresh_home("elicit");
    let proj = project(&home);
    let mut b = TestServer::builder().home(&home).env("CASHCODE_PROJECT_DIR", &proj.display().to_string());
    for (k, v) in env {
        b = b.env(k, v);
    }
    let server = b.start();
    server.configure_llm(&fake);
    (fake, server)
}

/// Scripts the model (call the tool, then answer "ok") and sends the message with the
/// `forms` connector selected.
fn ask_booking(fake: &FakeLlm, ws: &mut WsClient, chat: &str) {
    let call = ToolCallSpec::new("call_b", TOOL, &[&json!({"restaurant": "Chez Cash"}).to_string()]);
    fake.push(Reply::tool_calls(&[call]));
    fake.push(Reply::text(&["ok"]));
    ws.send(&json!({"type": "message", "chat_id": chat, "content": "book a table",
        "metadata": {"llm": {"provider": "openai_compatible", "model": MODEL},
                     "selected_mcp_connectors": [{"server": "forms", "label": "Forms"}]}}));
}

/// Frames until the chat's `elicitation` event, which it returns (checked).
fn wait_form(ws: &mut WsClient, chat: &str) -> Value {
    let frames = ws.recv_until(|v| v["event"] == "elicitation" || (v["event"] == "error" && v["chat_id"] == chat));
    let ev = frames.last().cloned().expect("a frame");
    assert_eq!(ev["event"], "elicitation", "{frames:#?}");
    assert_eq!((&ev["chat_id"], &ev["server"]), (&json!(chat), &json!("forms")));
    assert_eq!(ev["message"], "Booking at Chez Cash: who is coming?");
    let schema = &ev["requested_schema"];
    assert_eq!(schema["properties"]["guests"]["type"], "integer");
    assert_eq!(
        (&schema["properties"]["guests"]["minimum"], &schema["properties"]["guests"]["maximum"]),
        (&json!(1.0), &json!(12.0))
    );
    assert_eq!(schema["properties"]["vip"]["default"], false);
    assert_eq!(schema["required"], json!(["guests", "name"]));
    ev
}

fn respond(ws: &mut WsClient, chat: &str, id: &Value, action: &str, content: Option<Value>) {
    let mut frame = json!({"type": "elicitation_response", "chat_id": chat, "id": id, "action": action});
    if let Some(c) = content {
        frame["content"] = c;
    }
    ws.send(&frame);
}

/// The rest of the turn: `elicitation_end` with `action`, then the tool result, which is returned.
fn finish(ws: &mut WsClient, chat: &str, id: &Value, action: &str) -> String {
    let events = ws.turn_events(chat);
    let end = events.iter().find(|e| e["event"] == "elicitation_end").unwrap_or_else(|| panic!("no end: {events:#?}"));
    assert_eq!(
        end,
        &json!({"event": "elicitation_end", "chat_id": chat, "id": id, "action": action, "seq": end["seq"]})
    );
    let result =
        events.iter().find(|e| e["event"] == "tool_result").unwrap_or_else(|| panic!("no result: {events:#?}"));
    assert_eq!(events.last().unwrap()["event"], "done", "{events:#?}");
    result["result"].as_str().unwrap().to_string()
}

#[test]
fn accept_with_content_after_the_call_timeout_and_bad_answers_first() {
    venv_python();
    // The call timeout (1 s) passes while the form is open: it must not fire.
    let (fake, server) = start(&[("CASHCODE_MCP_CALL_TIMEOUT", "1")]);
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    ask_booking(&fake, &mut ws, &chat);
    let form = wait_form(&mut ws, &chat);
    let id = &form["id"];
    assert_eq!(form["timeout_sec"], 120);

    // Unknown id, other chat, invalid content: clear errors, the form stays open.
    let unknown =
        ws.reply_to(&json!({"type": "elicitation_response", "chat_id": chat, "id": "el-nope", "action": "decline"}));
    // Without `chat_id`: a client must not read it as the end of the turn.
    let unknown_id = json!({"event": "error", "detail": "unknown elicitation id (answered, timed out or never asked)"});
    assert_eq!(unknown, unknown_id);
    let other_chat =
        ws.reply_to(&json!({"type": "elicitation_response", "chat_id": "another-chat", "id": id, "action": "decline"}));
    assert_eq!(other_chat, unknown_id, "an id answers only in its own chat");
    let bad = ws.reply_to(&json!({"type": "elicitation_response", "chat_id": chat, "id": id, "action": "maybe"}));
    assert_eq!(bad["detail"], "elicitation action must be accept, decline or cancel");
    let bad = ws.reply_to(&json!({"type": "elicitation_response", "chat_id": chat, "id": "../x", "action": "accept"}));
    assert_eq!(bad["detail"], "invalid elicitation id");
    for (content, why) in [
        (json!({"name": "Ann", "guests": 99}), "invalid elicitation content: 'guests' must be at most 12"),
        (json!({"name": "Ann"}), "invalid elicitation content: 'guests' is required"),
        (json!({"name": "Ann", "guests": 2, "pin": "1234"}), "invalid elicitation content: unknown property 'pin'"),
        (json!({"name": "Ann", "guests": "two"}), "invalid elicitation content: 'guests' must be a number"),
    ] {
        let e = ws.reply_to(
            &json!({"type": "elicitation_response", "chat_id": chat, "id": id, "action": "accept", "content": content}),
        );
        assert_eq!(e, json!({"event": "error", "detail": why}));
    }
    // Past the call timeout with nothing from the server but the open form.
    assert_eq!(ws.recv_within(Duration::from_millis(1500)), None, "the call must wait for the user");
    respond(&mut ws, &chat, id, "accept", Some(json!({"name": "Ann Lee", "guests": 3, "vip": true})));
    let result = finish(&mut ws, &chat, id, "accept");
    assert_eq!(result, "booked Chez Cash: name=Ann Lee guests=3 vip=True");
    let reqs = fake.wait_chat_requests(2, WAIT);
    let msgs = req_messages(&reqs[1].body);
    assert_eq!(msgs.last().unwrap()["content"], result, "the model gets the server's answer");
    // The answer is user data: the log has its size, never its content.
    let log = wait_for("the elicitation log line", WAIT, || {
        let log = server.log_text();
        log.contains("event=mcp.elicitation.answered server=forms fields=3 action=accept").then_some(log)
    });
    assert!(log.contains("content_bytes="), "{log}");
    assert!(!log.contains("Ann Lee"), "the log holds answer content");
}

#[test]
fn decline_cancel_and_timeout() {
    venv_python();
    let (fake, server) = start(&[("CASHCODE_MCP_ELICITATION_TIMEOUT", "1")]);
    let mut ws = WsClient::connect(&server);
    for action in ["decline", "cancel"] {
        let chat = ws.new_chat();
        ask_booking(&fake, &mut ws, &chat);
        let form = wait_form(&mut ws, &chat);
        assert_eq!(form["timeout_sec"], 1);
        // Content is ignored unless accepting.
        respond(&mut ws, &chat, &form["id"], action, Some(json!({"junk": 1})));
        let want = if action == "decline" { "booking declined" } else { "booking cancelled" };
        assert_eq!(finish(&mut ws, &chat, &form["id"], action), want);
    }
    // An old client ignores the event: after the timeout the server is told "decline".
    let chat = ws.new_chat();
    ask_booking(&fake, &mut ws, &chat);
    let form = wait_form(&mut ws, &chat);
    assert_eq!(finish(&mut ws, &chat, &form["id"], "decline"), "booking declined");
    let late = ws
        .reply_to(&json!({"type": "elicitation_response", "chat_id": chat, "id": form["id"], "action": "accept",
                                   "content": {"name": "Ann", "guests": 2}}));
    assert_eq!(late["detail"], "unknown elicitation id (answered, timed out or never asked)");
}

#[test]
fn nobody_attached_is_declined_and_a_turn_cancel_cancels_the_form() {
    venv_python();
    let (fake, server) = start(&[]);
    // Nobody: the sender leaves while the model is still thinking.
    let gate = Gate::new();
    let call = ToolCallSpec::new("call_b", TOOL, &[&json!({"restaurant": "Chez Cash"}).to_string()]);
    fake.push(Reply::tool_calls(&[call]).gate_before_head(&gate));
    fake.push(Reply::text(&["ok"]));
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    ws.send(&json!({"type": "message", "chat_id": chat, "content": "book a table",
        "metadata": {"llm": {"provider": "openai_compatible", "model": MODEL},
                     "selected_mcp_connectors": [{"server": "forms"}]}}));
    gate.wait_reached(WAIT);
    ws.drop_socket();
    wait_for("the client to leave", WAIT, || server.log_text().contains("event=ws.client.closed").then_some(()));
    gate.open();
    let reqs = fake.wait_chat_requests(2, Duration::from_secs(30));
    let msgs = req_messages(&reqs[1].body);
    assert_eq!(msgs.last().unwrap()["content"], "booking declined");
    wait_for("the nobody-attached log line", WAIT, || {
        server.log_text().contains("event=elicitation.declined").then_some(())
    });
    assert!(server.log_text().contains("reason=nobody_attached"));

    // A turn cancel while the form is open: the server hears "cancel", the turn ends.
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    ask_booking(&fake, &mut ws, &chat);
    let form = wait_form(&mut ws, &chat);
    ws.send(&json!({"type": "cancel", "chat_id": chat}));
    let events = ws.turn_events(&chat);
    let end = events.iter().find(|e| e["event"] == "elicitation_end").unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!((&end["id"], &end["action"]), (&form["id"], &json!("cancel")));
    let last = events.last().unwrap();
    assert!(last["event"] == "error" || last["event"] == "done", "{events:#?}");
    wait_for("the cancel log line", WAIT, || {
        server.log_text().contains("event=elicitation.ended chat_id=").then_some(())
    });
    assert!(server.log_text().contains("action=cancel reason=turn_cancelled"));
}
