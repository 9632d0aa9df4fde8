//! Context consolidation (agent-and-memory.md §9, storage.md §3.1), with the threshold lowered
//! through `CASHCODE_CONSOLIDATE_CHARS`: after a turn crosses it, one background non-streamed
//! model call summarises the older part, a `summary` record with `keep_from_cursor` is
//! appended, and the next turn's context is the summary plus the kept tail.

use serde_json::json;

use crate::common::*;

#[test]
fn long_chats_are_summarised_in_the_background() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "400").start();
    server.configure_llm(&fake);
    fake.set_completion_fallback(Reply::completion("SUMMARY: the user sent a, b and c blocks."));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let turns = [("a", "A"), ("b", "B"), ("c", "C")];
    for (u, a) in turns {
        let answer = a.repeat(100);
        fake.push(Reply::text(&[&answer]));
        ws.message(&chat, &u.repeat(150), "openai_compatible");
        let events = ws.turn_events(&chat);
        assert_eq!(events.last().expect("events")["event"], "done");
    }
    let summary = wait_for("a summary record", WAIT, || {
        history_records(&server.home, &chat).into_iter().find(|r| r["role"] == "summary")
    });
    assert_eq!(summary["content"], "SUMMARY: the user sent a, b and c blocks.");
    let keep = summary["keep_from_cursor"].as_u64().expect("keep_from_cursor");
    // The cut lands on a user record.
    let recs = history_records(&server.home, &chat);
    let kept_first = recs.iter().find(|r| r["cursor"] == json!(keep)).expect("kept record");
    assert_eq!(kept_first["role"], "user");

    // The summariser request: non-streamed, no tools, a transcript of the older messages.
    let bg: Vec<_> = fake.requests().into_iter().filter(|r| r.is_chat() && r.body["stream"] != json!(true)).collect();
    assert!(!bg.is_empty());
    let req = &bg[0].body;
    assert!(req.get("tools").is_none(), "no tools for the summariser");
    assert_eq!(req["model"], MODEL);
    let msgs = req_messages(req);
    assert_eq!(msgs[0]["role"], "system");
    let transcript: String = msgs[1..].iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(transcript.contains(&format!("USER: {}", "a".repeat(150))), "{transcript}");
    assert!(transcript.contains(&format!("ASSISTANT: {}", "A".repeat(100))), "{transcript}");

    // The next turn sees the summary first, then exactly the records kept from `keep`.
    fake.push(Reply::text(&["ok"]));
    ws.message(&chat, "what did I send?", "openai_compatible");
    ws.turn_events(&chat);
    let chats: Vec<_> = fake.chat_requests().into_iter().filter(|r| r.body["stream"] == json!(true)).collect();
    let msgs = req_messages(&chats.last().expect("turn request").body);
    assert_eq!(msgs[1]["role"], "assistant");
    let s = msgs[1]["content"].as_str().expect("summary message");
    assert!(s.ends_with("SUMMARY: the user sent a, b and c blocks.") && s.len() > 41, "{s:?}");
    let tail: Vec<(String, String)> = msgs[2..]
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or("").to_string(), m["content"].as_str().unwrap_or("").to_string()))
        .collect();
    let mut want: Vec<(String, String)> = recs
        .iter()
        .filter(|r| r["role"] != "summary" && r["cursor"].as_u64().is_some_and(|c| c >= keep))
        .map(|r| (r["role"].as_str().unwrap_or("").to_string(), r["content"].as_str().unwrap_or("").to_string()))
        .collect();
    want.push(("user".into(), "what did I send?".into()));
    assert_eq!(tail, want);
    // The HTTP history still shows everything.
    let all = server.get(&format!("/api/sessions/{chat}/messages")).json();
    assert_eq!(all["messages"].as_array().map(Vec::len), Some(8));
}

#[test]
fn a_failed_summary_changes_nothing() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "400").start();
    server.configure_llm(&fake);
    fake.set_completion_fallback(Reply::status(500, r#"{"error":{"message":"summariser down"}}"#));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    for (u, a) in [("a", "A"), ("b", "B"), ("c", "C")] {
        fake.push(Reply::text(&[&a.repeat(100)]));
        ws.message(&chat, &u.repeat(150), "openai_compatible");
        ws.turn_events(&chat);
    }
    // Wait until the summariser was tried, then check nothing was appended.
    wait_for("a summariser call", WAIT, || {
        fake.requests()
            .iter()
            .any(|r| r.is_chat() && r.body["stream"] != json!(true) && r.handled.is_some())
            .then_some(())
    });
    fake.push(Reply::text(&["still whole"]));
    ws.message(&chat, "next", "openai_compatible");
    ws.turn_events(&chat);
    assert!(history_records(&server.home, &chat).iter().all(|r| r["role"] != "summary"));
    let chats: Vec<_> = fake.chat_requests().into_iter().filter(|r| r.body["stream"] == json!(true)).collect();
    let msgs = req_messages(&chats.last().expect("turn").body);
    assert_eq!(msgs.len(), 1 + 6 + 1, "the whole history is still sent");
}
