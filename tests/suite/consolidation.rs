//! Context consolidation (docs/agent-and-memory.md §9, docs/storage.md §3.1), with the threshold lowered
//! through `CASHCODE_CONSOLIDATE_CHARS`: after a turn crosses it, one background non-streamed
//! model call summarises the older part, a `summary` record with `keep_from_cursor` is
//! appended, and the next turn's context is the summary plus the kept tail.

use serde_json::json;

use crate::common::*;

#[test]
fn long_chats_are_summarised_in_the_background() {
    // Sizes make exactly one consolidation happen: turn 1 stays under the threshold (250 of
    // 400 chars), turn 2 crosses it (500) and keeps the newest half (turn 2, from its user
    // message); afterwards the context stays under the threshold.
    let fake = FakeLlm::start();
    let mut server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "400").start();
    server.configure_llm(&fake);
    let summary_text = "SUMMARY: the user sent a and b blocks.";
    fake.push_completion(Reply::completion(summary_text));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    for (u, a) in [("a", "A"), ("b", "B")] {
        fake.push(Reply::text(&[&a.repeat(100)]));
        ws.message(&chat, &u.repeat(150), "openai_compatible");
        let events = ws.turn_events(&chat);
        assert_eq!(events.last().expect("events")["event"], "done");
    }
    let summary = wait_for("a summary record", WAIT, || {
        history_records(&server.home, &chat).into_iter().find(|r| r["role"] == "summary")
    });
    assert_eq!(summary["content"], summary_text);
    assert_eq!(summary["cursor"], json!(5));
    assert_eq!(summary["keep_from_cursor"], json!(3), "keeps turn 2 from its user record");

    // The summariser request: non-streamed, no tools, the turn's model, a transcript of turn 1.
    let bg: Vec<_> = fake.requests().into_iter().filter(|r| r.is_chat() && r.body["stream"] != json!(true)).collect();
    assert_eq!(bg.len(), 1);
    let req = &bg[0].body;
    assert!(req.get("tools").is_none(), "no tools for the summariser");
    assert_eq!(req["model"], MODEL);
    let msgs = req_messages(req);
    assert_eq!(msgs[0]["role"], "system");
    let transcript: String = msgs[1..].iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(transcript.contains(&format!("USER: {}", "a".repeat(150))), "{transcript}");
    assert!(transcript.contains(&format!("ASSISTANT: {}", "A".repeat(100))), "{transcript}");
    assert!(!transcript.contains(&"b".repeat(150)), "the kept half is not summarised");

    // After a restart the context is the summary plus the records kept from cursor 3.
    drop(ws);
    server.restart();
    let mut ws = WsClient::connect(&server);
    ws.attach(&chat, None);
    fake.push(Reply::text(&["ok"]));
    ws.message(&chat, "what did I send?", "openai_compatible");
    ws.turn_events(&chat);
    let turns: Vec<_> = fake.chat_requests().into_iter().filter(|r| r.body["stream"] == json!(true)).collect();
    let msgs = req_messages(&turns.last().expect("turn request").body);
    assert_eq!(msgs.len(), 5, "system, summary, user b, assistant B, question: {msgs:#?}");
    assert_eq!(msgs[1]["role"], "assistant");
    let s = msgs[1]["content"].as_str().expect("summary message");
    assert!(s.ends_with(summary_text) && s.len() > summary_text.len(), "{s:?}");
    // convo() skips the first message it is given (here the summary).
    let (b, big_b) = ("b".repeat(150), "B".repeat(100));
    assert_eq!(
        convo(&json!({"messages": msgs[1..].to_vec()})),
        pairs(&[("user", &b), ("assistant", &big_b), ("user", "what did I send?")])
    );
    // The HTTP history still shows everything.
    let all = server.get(&format!("/api/sessions/{chat}/messages")).json();
    assert_eq!(all["messages"].as_array().map(Vec::len), Some(6));
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
