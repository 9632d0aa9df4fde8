//! Restart recovery (docs/storage.md §3, docs/agent-and-memory.md §8): histories, titles and sessions
//! come back after a kill; a torn last line is tolerated and later appends stay parseable; a
//! turn killed mid-stream leaves its title and (written ahead) its user message, never a partial answer.

use serde_json::{json, Value};

use crate::common::*;

#[test]
fn history_titles_and_sessions_survive_a_restart() {
    let OneChat { fake, mut server, mut ws, chat: a } = one_chat();
    let b = ws.new_chat();
    fake.push(Reply::text(&["answer ", "a"]));
    ws.message(&a, "question a", "openai_compatible");
    ws.turn_events(&a);
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_r1", "save_memory", &["{\"content\":\"restart fact\"}"])]));
    fake.push(Reply::text(&["answer b"]));
    ws.message(&b, "question b", "openai_compatible");
    ws.turn_events(&b);
    server
        .patch(&format!("/api/sessions/{b}"), &json!({"title":"Chat B renamed"}))
        .expect(200, json!({"chat_id":b,"title":"Chat B renamed"}));
    let sessions = server.get("/api/sessions").json();
    let msgs_a = server.get(&format!("/api/sessions/{a}/messages")).json();
    let msgs_b = server.get(&format!("/api/sessions/{b}/messages")).json();
    drop(ws);

    server.restart();
    server.get("/api/sessions").expect(200, sessions);
    server.get(&format!("/api/sessions/{a}/messages")).expect(200, msgs_a);
    server.get(&format!("/api/sessions/{b}/messages")).expect(200, msgs_b);
    server.get("/api/settings/llm").expect(
        200,
        json!({"configured":true,
            "openai_compatible":{"base_url":fake.base(),"ready":true,"api_key_configured":true},
            "ollama":{"base_url":fake.base(),"ready":true}}),
    );

    // Continuing both chats: no new titles, the model sees the old context (tool records too).
    let mut ws = WsClient::connect(&server);
    ws.attach(&a, None);
    ws.attach(&b, None);
    fake.push(Reply::text(&["more a"]));
    ws.message(&a, "follow-up a", "openai_compatible");
    let events = ws.turn_events(&a);
    let (masked, _) = mask_turn(&events, events[0]["seq"].as_u64().expect("seq"));
    assert_eq!(masked, plain_answer(&a, None, &["more a"]));
    fake.push(Reply::text(&["more b"]));
    ws.message(&b, "follow-up b", "openai_compatible");
    let events = ws.turn_events(&b);
    assert!(events.iter().all(|e| e["event"] != "session_updated"));
    let reqs = fake.chat_requests();
    let n = reqs.len();
    assert_eq!(
        convo(&reqs[n - 2].body),
        pairs(&[("user", "question a"), ("assistant", "answer a"), ("user", "follow-up a")])
    );
    let mb = req_messages(&reqs[n - 1].body);
    let roles: Vec<&str> = mb[1..].iter().map(|m| m["role"].as_str().unwrap_or("")).collect();
    assert_eq!(roles, vec!["user", "assistant", "tool", "assistant", "user"]);
    assert_eq!(mb[2]["tool_calls"][0]["id"], "call_r1");
    assert_eq!(mb[3]["tool_call_id"], "call_r1");
    assert_eq!(
        history_summary(&server.home, &a),
        rows(&[
            (1, "user", "question a"),
            (2, "assistant", "answer a"),
            (3, "user", "follow-up a"),
            (4, "assistant", "more a")
        ])
    );
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(server.chat_dir(&b).join("metadata.json")).expect("metadata"))
            .expect("JSON");
    assert_eq!(meta["title"], "Chat B renamed");
}

#[test]
fn torn_last_line_is_tolerated() {
    let fake = FakeLlm::start();
    let home = fresh_home("torn");
    let chat = "torn-chat-1";
    let dir = home.join("memory").join(chat);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let good = concat!(
        "{\"cursor\": 1, \"timestamp\": \"2026-11-30 01:40\", \"role\": \"user\", \"content\": \"before the crash\"}\n",
        "{\"cursor\": 2, \"timestamp\": \"2026-11-30 01:40\", \"role\": \"assistant\", \"content\": \"still here\"}\n"
    );
    let torn =
        "{\"cursor\": 3, \"timestamp\": \"2026-11-30 01:41\", \"role\": \"user\", \"content\": \"this line was cu";
    std::fs::write(dir.join("history.jsonl"), format!("{good}{torn}")).expect("write");
    std::fs::write(dir.join(".cursor"), "2").expect("write");
    std::fs::write(dir.join("metadata.json"), "{\n  \"title\": \"Torn chat\"\n}").expect("write");
    let server = TestServer::builder().home(&home).start();
    server.configure_llm(&fake);
    server.get(&format!("/api/sessions/{chat}/messages")).expect(
        200,
        json!({"chat_id":chat,"messages":[
            {"role":"user","content":"before the crash"},{"role":"assistant","content":"still here"}]}),
    );
    assert_eq!(server.get("/api/sessions").json()["sessions"][0]["title"], "Torn chat");

    let mut ws = WsClient::connect(&server);
    ws.attach(chat, None);
    fake.push(Reply::text(&["after"]));
    ws.message(chat, "after the crash", "openai_compatible");
    let events = ws.turn_events(chat);
    let (masked, _) = mask_turn(&events, events[0]["seq"].as_u64().expect("seq"));
    assert_eq!(masked, plain_answer(chat, None, &["after"]));
    assert_eq!(
        convo(&fake.chat_requests()[0].body),
        pairs(&[("user", "before the crash"), ("assistant", "still here"), ("user", "after the crash")])
    );
    // The new records are whole lines of their own; only the torn fragment (if kept) fails to parse.
    let text = std::fs::read_to_string(dir.join("history.jsonl")).expect("history");
    assert!(text.starts_with(good), "the intact records were rewritten");
    let mut parsed = Vec::new();
    let mut broken = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => parsed.push((
                v["cursor"].as_u64().expect("cursor"),
                v["role"].as_str().expect("role").to_string(),
                v["content"].as_str().expect("content").to_string(),
            )),
            Err(_) => broken.push(line.to_string()),
        }
    }
    assert!(broken.is_empty() || broken == vec![torn.to_string()], "broken lines {broken:?}");
    assert_eq!(
        parsed,
        rows(&[
            (1, "user", "before the crash"),
            (2, "assistant", "still here"),
            (3, "user", "after the crash"),
            (4, "assistant", "after")
        ])
    );
    server.get(&format!("/api/sessions/{chat}/messages")).expect(
        200,
        json!({"chat_id":chat,"messages":[
            {"role":"user","content":"before the crash"},{"role":"assistant","content":"still here"},
            {"role":"user","content":"after the crash"},{"role":"assistant","content":"after"}]}),
    );
}

#[test]
fn a_turn_killed_mid_stream_keeps_its_title_and_user_message_only() {
    // The lead's crash safety: the running turn's user message is written ahead and recovered
    // once at start-up; the partial answer is not kept.
    let OneChat { fake, mut server, mut ws, chat } = one_chat();
    let never = Gate::new();
    fake.push(Reply::text(&["partial ", "never"]).gate_before_chunk(1, &never));
    ws.message(&chat, "crash during this", "openai_compatible");
    never.wait_reached(WAIT);
    ws.recv_until(|v| v["event"] == "delta");
    server.kill();
    never.open();
    server.restart();
    let list = server.get("/api/sessions").json();
    assert_eq!(list["sessions"][0]["chat_id"], chat.as_str());
    assert_eq!(list["sessions"][0]["title"], "crash during this");
    let recovered = json!({"chat_id":chat,"messages":[{"role":"user","content":"crash during this"}]});
    server.get(&format!("/api/sessions/{chat}/messages")).expect(200, recovered.clone());
    // Recovered once: a second restart adds nothing.
    server.restart();
    server.get(&format!("/api/sessions/{chat}/messages")).expect(200, recovered);
    let mut ws = WsClient::connect(&server);
    ws.attach(&chat, None);
    fake.push(Reply::text(&["clean"]));
    ws.message(&chat, "after restart", "openai_compatible");
    ws.turn_events(&chat);
    let reqs = fake.chat_requests();
    assert_eq!(convo(&reqs[reqs.len() - 1].body), pairs(&[("user", "crash during this"), ("user", "after restart")]));
    assert_eq!(
        history_summary(&server.home, &chat),
        rows(&[(1, "user", "crash during this"), (2, "user", "after restart"), (3, "assistant", "clean")])
    );
}
