//! Provider failures during a turn (docs/ws-protocol.md §6.4, docs/llm-settings.md §7): each gives one
//! `error` event for the chat naming the cause (status code, "timed out", "Cannot reach",
//! "malformed"), never the key; the title survives, nothing is persisted, and the next turn
//! works. The fake tolerates the client's retries of the identical request.

use serde_json::{json, Value};

use crate::common::*;

/// A turn's error event without our extension (a non-empty `code` and its `params` object, which
/// it must carry: docs/ws-protocol.md §4), to compare with the original's shape.
fn uncoded(ev: &Value) -> Value {
    let mut shape = ev.clone();
    let obj = shape.as_object_mut().expect("an event is an object");
    let code = obj.remove("code");
    let params = obj.remove("params");
    assert!(code.as_ref().is_some_and(|c| c.as_str().is_some_and(|c| !c.is_empty())), "no code: {ev:?}");
    assert!(params.as_ref().is_some_and(Value::is_object), "no params: {ev:?}");
    shape
}

/// Runs a failing turn then a good one; returns the failing turn's error detail.
fn fail_then_recover(server: &TestServer, fake: &FakeLlm, failing_provider: &str) -> String {
    let mut ws = WsClient::connect(server);
    let chat = ws.chat_id.clone();
    ws.message(&chat, "first try", failing_provider);
    let events = ws.turn_events(&chat);
    let (masked, last) = mask_turn(&events, 1);
    assert_eq!(masked.len(), 2, "title then error, got {events:?}");
    assert_eq!(masked[0], ev_title(&chat, "first try"));
    let detail = error_detail(&events[1]);
    assert_eq!(
        uncoded(&masked[1]),
        json!({"event":"error","detail":detail,"chat_id":chat}),
        "the error event has exactly detail, chat_id, seq, and our code and params"
    );
    assert!(!detail.contains(KEY_MARKER), "the key leaked into the error: {detail:?}");
    // Nothing persisted; the title stays (metadata written before the model call).
    assert_eq!(history_summary(&server.home, &chat), rows(&[]));
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(server.chat_dir(&chat).join("metadata.json")).expect("metadata"))
            .expect("metadata JSON");
    assert_eq!(meta["title"], "first try");
    server.get(&format!("/api/sessions/{chat}/messages")).expect(200, json!({"chat_id":chat,"messages":[]}));

    // The next turn on the same chat works and does not see the failed one.
    let before = fake.chat_requests().len();
    fake.push(Reply::text(&["recovered"]));
    ws.message(&chat, "second try", "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), last + 1);
    assert_eq!(masked, plain_answer(&chat, None, &["recovered"]));
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), before + 1);
    assert_eq!(convo(&reqs[before].body), pairs(&[("user", "second try")]));
    assert_eq!(history_summary(&server.home, &chat), rows(&[(1, "user", "second try"), (2, "assistant", "recovered")]));
    detail
}

#[test]
fn http_401_names_the_status_and_never_the_key() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.push(Reply::status(
        401,
        &format!(r#"{{"error":{{"message":"Incorrect API key provided: {TEST_KEY}","type":"invalid_request_error","code":"invalid_api_key"}}}}"#),
    ));
    let detail = fail_then_recover(&server, &fake, "openai_compatible");
    assert!(detail.contains("401"), "detail {detail:?}");
    assert!(!server.log_text().contains(KEY_MARKER));
    assert!(!server.stderr_text().contains(KEY_MARKER));
}

#[test]
fn http_500_names_the_status() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.push(Reply::status(500, r#"{"error":{"message":"upstream exploded"}}"#));
    let detail = fail_then_recover(&server, &fake, "openai_compatible");
    assert!(detail.contains("500"), "detail {detail:?}");
}

#[test]
fn http_429_with_retry_after_names_the_status() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.push(Reply::status(429, r#"{"error":{"message":"rate limited"}}"#).header("retry-after", "0"));
    let detail = fail_then_recover(&server, &fake, "openai_compatible");
    assert!(detail.contains("429"), "detail {detail:?}");
}

#[test]
fn provider_down_says_cannot_reach() {
    let fake = FakeLlm::start();
    let server = TestServer::start();
    let dead = format!("http://127.0.0.1:{}", dead_port());
    server.put("/api/settings/llm", &llm_body(&fake.base(), &dead)).expect(
        200,
        json!({"configured":true,
                   "openai_compatible":{"base_url":fake.base(),"ready":true,"api_key_configured":true},
                   "ollama":{"base_url":dead,"ready":true}}),
    );
    let detail = fail_then_recover(&server, &fake, "ollama");
    assert!(detail.contains("Cannot reach"), "detail {detail:?}");
}

#[test]
fn slow_model_times_out() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_LLM_TIMEOUT", "0.5").start();
    server.configure_llm(&fake);
    fake.push(Reply::text(&["too slow"]).first_byte_delay(std::time::Duration::from_secs(4)));
    let detail = fail_then_recover(&server, &fake, "openai_compatible");
    assert!(detail.contains("timed out"), "detail {detail:?}");
}

#[test]
fn stalled_stream_times_out_between_chunks() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_LLM_TIMEOUT", "0.5").start();
    server.configure_llm(&fake);
    let never = Gate::new();
    fake.push(Reply::text(&["partial", " never"]).gate_before_chunk(1, &never));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    ws.message(&chat, "stall", "openai_compatible");
    let events = ws.turn_events(&chat);
    let (masked, _) = mask_turn(&events, 1);
    let last = masked.last().expect("events");
    // A read timeout mid-stream is a provider failure like any other.
    let detail = error_detail(events.last().expect("events"));
    assert!(detail.contains("timed out"), "detail {detail:?}");
    assert_eq!(uncoded(last), json!({"event":"error","detail":detail,"chat_id":chat}));
    assert_eq!(history_summary(&server.home, &chat), rows(&[]));
    never.open();
}

#[test]
fn malformed_sse_is_reported() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.push(Reply::malformed());
    let detail = fail_then_recover(&server, &fake, "openai_compatible");
    assert!(detail.contains("malformed"), "detail {detail:?}");
}

#[test]
fn stream_cut_mid_answer_is_an_error_and_persists_nothing() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.push(Reply::cut(&["half an ", "answer"]));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    ws.message(&chat, "cut me", "openai_compatible");
    let events = ws.turn_events(&chat);
    let (masked, last) = mask_turn(&events, 1);
    let detail = error_detail(events.last().expect("events"));
    assert!(!detail.is_empty());
    assert_eq!(uncoded(masked.last().expect("events")), json!({"event":"error","detail":detail,"chat_id":chat}));
    assert!(
        masked.iter().all(|e| e["event"] != "done" && e["event"] != "stream_end"),
        "a broken stream must not end like a finished answer: {masked:?}"
    );
    assert_eq!(history_summary(&server.home, &chat), rows(&[]));
    fake.push(Reply::text(&["whole answer"]));
    ws.message(&chat, "again", "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), last + 1);
    assert_eq!(masked, plain_answer(&chat, None, &["whole answer"]));
}

#[test]
fn an_error_object_inside_the_stream_is_reported() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.push(Reply::raw_sse(&[
        "data: {\"error\":{\"message\":\"model overloaded, try later\",\"type\":\"server_error\",\"code\":503}}\n\n",
    ]));
    let detail = fail_then_recover(&server, &fake, "openai_compatible");
    assert!(detail.contains("overloaded"), "detail {detail:?}");
}

/// What the model sends is bounded before either chunk reader (the typed one or the general
/// one) sees it: nesting 100,000 deep, at the top or inside a field, and a line past the
/// 2 MiB stream cap are clean errors (the last one the cap's note), and the server goes on.
#[test]
fn hostile_stream_chunks_are_clean_errors() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let lines = [
        (deep.clone(), "malformed"),
        (format!("{{\"choices\":[{{\"delta\":{{\"content\":{deep}}}}}]}}"), "malformed"),
        (
            format!("{{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}", "x".repeat(9 * 1024 * 1024)),
            "stream chunk over 2 MiB",
        ),
    ];
    for (data, said) in lines {
        fake.push(Reply::raw_sse(&[&format!("data: {data}\n\n")]));
        let detail = fail_then_recover(&server, &fake, "openai_compatible");
        assert!(detail.contains(said), "detail {detail:?}");
    }
}

/// Chunks of an unusual shape (content parts as an array, a numeric finish reason) are read
/// by the general reader: what is text is kept, the rest ignored, and the turn completes.
#[test]
fn odd_chunk_shapes_still_stream_their_text() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    fake.push(Reply::raw_sse(&[
        "data: {\"choices\":[{\"delta\":{\"content\":[\"part\"]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\\\"lo \\u4f60\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\" world\"},\"finish_reason\":7}]}\n\n",
        "data: [DONE]\n\n",
    ]));
    ws.message(&chat, "odd shapes", "openai_compatible");
    let events = ws.turn_events(&chat);
    let text: String =
        events.iter().filter(|e| e["event"] == "delta").map(|e| e["text"].as_str().unwrap_or("")).collect();
    assert_eq!(text, "Hel\"lo 你 world");
    assert_eq!(events.last().expect("end")["event"], "done", "{events:?}");
    assert_eq!(
        history_summary(&server.home, &chat),
        rows(&[(1, "user", "odd shapes"), (2, "assistant", "Hel\"lo 你 world")])
    );
}
