//! Long chats (the "long histories" issue): the context budget (requests never over
//! `CASHCODE_CONTEXT_BUDGET_CHARS` or the provider's reported context length; whole tool steps;
//! nothing dropped from history.jsonl), paging and the tools opt-in of
//! `GET /api/sessions/{id}/messages`, and `seq` that keeps rising across real restarts.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::fake_llm::Recorded;
use crate::common::*;

/// Writes a history of `turns` turns (user, a tool step every third turn, assistant), each
/// record about `size` characters, as the store writes them.
fn write_history(home: &Path, chat: &str, turns: usize, size: usize) -> usize {
    let dir = home.join("memory").join(chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    let mut lines = Vec::new();
    let mut cursor = 0;
    let mut rec = |v: Value, lines: &mut Vec<String>| {
        cursor += 1;
        let mut v = v;
        v["cursor"] = json!(cursor);
        v["timestamp"] = json!("2026-12-01T10:00");
        lines.push(v.to_string());
    };
    for i in 0..turns {
        rec(json!({"role":"user","content":format!("question {i} {}", "q".repeat(size))}), &mut lines);
        if i % 3 == 1 {
            let id = format!("call_{i}");
            rec(
                json!({"role":"tool_calls","content":"[TOOL_CALLS: read_file]","tool_calls":[
                    {"id":id,"type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]}),
                &mut lines,
            );
            rec(
                json!({"role":"tool","content":format!("result {i} {}", "r".repeat(size)),"tool_call_id":id,"name":"read_file"}),
                &mut lines,
            );
        }
        rec(json!({"role":"assistant","content":format!("answer {i} {}", "a".repeat(size))}), &mut lines);
    }
    std::fs::write(dir.join("history.jsonl"), lines.join("\n") + "\n").expect("history");
    lines.len()
}

/// Every tool call is followed by its results and every result follows its call.
fn assert_tool_pairs(msgs: &[Value]) {
    for (i, m) in msgs.iter().enumerate() {
        if m["role"] == "tool" {
            let call = msgs[..i].iter().rev().find(|p| p["role"] != "tool").expect("a message before a result");
            let ids: Vec<&Value> =
                call["tool_calls"].as_array().expect("result after a tool call").iter().map(|c| &c["id"]).collect();
            assert!(ids.contains(&&m["tool_call_id"]), "result {m} without its call");
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            for c in calls {
                assert!(
                    msgs[i + 1..].iter().take_while(|n| n["role"] == "tool").any(|n| n["tool_call_id"] == c["id"]),
                    "call {c} without its result"
                );
            }
        }
    }
}

const CHAT: &str = "long-chat-1";

/// The streamed (turn) requests the fake received.
fn turn_requests(fake: &FakeLlm) -> Vec<Recorded> {
    fake.chat_requests().into_iter().filter(|r| r.body["stream"] == json!(true)).collect()
}

#[test]
fn requests_stay_within_the_budget_with_whole_tool_steps_and_history_intact() {
    let fake = FakeLlm::start();
    let home = fresh_home("budget");
    let lines = write_history(&home, CHAT, 300, 150);
    let server = TestServer::builder().home(&home).env("CASHCODE_CONTEXT_BUDGET_CHARS", "20000").start();
    server.configure_llm(&fake);
    // Over the budget the chat is consolidated too (non-streamed calls, not turns).
    fake.set_completion_fallback(Reply::completion("a summary of the old turns"));
    let mut ws = WsClient::connect(&server);
    ws.attach(CHAT, None);
    for turn in 0..3 {
        fake.push(Reply::tool_calls(&[ToolCallSpec::new(
            &format!("c{turn}"),
            "save_memory",
            &["{\"content\":\"fact\"}"],
        )]));
        fake.push(Reply::text(&["short answer"]));
        ws.message(CHAT, &format!("newest question {turn}"), "openai_compatible");
        let events = ws.turn_events(CHAT);
        assert_eq!(events.last().expect("events")["event"], "done", "{events:?}");
    }
    let reqs = turn_requests(&fake);
    assert_eq!(reqs.len(), 6);
    for r in &reqs {
        let chars = r.raw.chars().count();
        assert!(chars <= 20000, "a request of {chars} characters");
        let msgs = req_messages(&r.body);
        assert_eq!(msgs[0]["role"], "system");
        assert_tool_pairs(&msgs);
        // The newest of the old history is there; the oldest is not.
        assert!(r.raw.contains("answer 299 "), "the newest turn is sent");
        assert!(!r.raw.contains("question 0 "), "the oldest turn is left out");
    }
    // This turn's tool call and result ride along with it.
    let last = req_messages(&reqs[reqs.len() - 1].body);
    assert!(last.iter().any(|m| m["tool_call_id"] == "c2"));
    let kept = history_records(&home, CHAT).iter().filter(|r| r["role"] != "summary").count();
    assert_eq!(kept, lines + 3 * 4, "nothing left history.jsonl");

    // A message that alone exceeds the budget is refused before any request.
    fake.clear_requests();
    ws.message(CHAT, &"z".repeat(20000), "openai_compatible");
    let events = ws.turn_events(CHAT);
    let detail = error_detail(events.last().expect("events"));
    assert!(detail.contains("context budget"), "{detail}");
    assert!(turn_requests(&fake).is_empty());
}

#[test]
fn a_smaller_context_length_reported_by_the_provider_wins() {
    let fake = FakeLlm::start();
    fake.set_models(
        "/models",
        Reply::json(json!({"object":"list","data":[{"id":MODEL,"object":"model","context_length":10000}]})),
    );
    let home = fresh_home("ctxlen");
    write_history(&home, CHAT, 200, 150);
    let server = TestServer::builder().home(&home).start();
    server.configure_llm(&fake);
    fake.set_completion_fallback(Reply::completion("a summary of the old turns"));
    let mut ws = WsClient::connect(&server);
    ws.attach(CHAT, None);
    fake.push(Reply::text(&["one"]));
    ws.message(CHAT, "first", "openai_compatible");
    ws.turn_events(CHAT);
    // The lookup runs beside the turn; it is cached once answered.
    wait_for("the models lookup", WAIT, || fake.requests().iter().any(|r| r.path == "/models").then_some(()));
    wait_for("the lookup to land", WAIT, || server.log_text().contains("event=llm.context_length").then_some(()));
    for i in 0..2 {
        fake.push(Reply::text(&["two"]));
        ws.message(CHAT, &format!("second {i}"), "openai_compatible");
        ws.turn_events(CHAT);
    }
    let reqs = turn_requests(&fake);
    assert!(reqs[0].raw.chars().count() > 20000, "the first turn used the configured budget");
    for r in &reqs[1..] {
        assert!(r.raw.chars().count() <= 20000, "{} characters over 10000 tokens", r.raw.chars().count());
        assert!(r.raw.contains("second"));
    }
    assert_eq!(fake.requests().iter().filter(|r| r.path == "/models").count(), 1, "looked up once");
}

fn page(server: &TestServer, query: &str) -> Value {
    let r = server.get(&format!("/api/sessions/{CHAT}/messages{query}"));
    assert_eq!(r.status, 200, "{query}: {}", r.body);
    r.json()
}

fn contents(v: &Value) -> Vec<String> {
    v["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn messages_page_backwards_and_bad_values_are_422() {
    let home = fresh_home("paging");
    write_history(&home, CHAT, 30, 3);
    let server = TestServer::builder().home(&home).start();
    let all = page(&server, "");
    assert_eq!(all.as_object().expect("object").len(), 2, "no paging fields without limit");
    let items = contents(&all);
    assert_eq!(items.len(), 60);
    // The original answer, byte for byte: key order and no paging fields.
    let raw = server.get(&format!("/api/sessions/{CHAT}/messages")).body;
    assert!(
        raw.starts_with(&format!(r#"{{"chat_id":"{CHAT}","messages":[{{"content":"question 0 qqq","role":"user"}}"#)),
        "{raw}"
    );

    let last = page(&server, "?limit=5");
    assert_eq!((last["start"].as_u64(), last["total"].as_u64()), (Some(55), Some(60)));
    assert_eq!(contents(&last), items[55..]);
    let mut got = Vec::new();
    let mut before = 60;
    while before > 0 {
        let p = page(&server, &format!("?limit=7&before={before}"));
        let start = p["start"].as_u64().expect("start") as usize;
        let mut chunk = contents(&p);
        assert_eq!(chunk.len(), before - start);
        chunk.extend(got);
        got = chunk;
        before = start;
    }
    assert_eq!(got, items, "scrolling back yields the whole list in order");
    assert_eq!(contents(&page(&server, "?before=3&limit=100")), items[..3]);
    assert_eq!(contents(&page(&server, "?limit=2&before=999999999999")), items[58..]);
    let empty = page(&server, "?limit=2&before=0");
    assert_eq!((contents(&empty).len(), empty["start"].as_u64()), (0, Some(0)));
    assert_eq!(contents(&page(&server, "?limit=%35")), items[55..], "percent-encoded");
    assert_eq!(contents(&page(&server, "?limit=+3")).len(), 3);

    for (q, loc, kind) in [
        ("?limit=0", "limit", "greater_than_equal"),
        ("?limit=-1", "limit", "greater_than_equal"),
        ("?limit=1001", "limit", "less_than_equal"),
        ("?limit=abc", "limit", "int_parsing"),
        ("?limit=", "limit", "int_parsing"),
        ("?limit=1.5", "limit", "int_parsing"),
        ("?limit=99999999999999999999", "limit", "int_parsing"),
        ("?limit=5&before=-1", "before", "greater_than_equal"),
        ("?limit=5&before=x", "before", "int_parsing"),
        ("?before=5", "limit", "missing"),
        ("?tools=maybe", "tools", "bool_parsing"),
    ] {
        let r = server.get(&format!("/api/sessions/{CHAT}/messages{q}"));
        assert_eq!(r.status, 422, "{q}: {}", r.body);
        let d = &r.json()["detail"][0];
        assert_eq!((d["loc"].clone(), d["type"].as_str()), (json!(["query", loc]), Some(kind)), "{q}: {d}");
        assert!(!d["msg"].as_str().unwrap_or("").is_empty(), "{q}: a clear message");
    }
    server.get("/api/sessions/nope/messages?limit=5").expect(404, json!({"detail":"session not found"}));
}

#[test]
fn tools_are_opt_in_and_combine_with_paging() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_t1", "save_memory", &["{\"content\":\"tool fact\"}"])]));
    fake.push(Reply::text(&["done with tools"]));
    ws.message(&chat, "use a tool", "openai_compatible");
    ws.turn_events(&chat);
    let plain = server.get(&format!("/api/sessions/{chat}/messages"));
    assert_eq!(
        plain.body,
        format!(
            r#"{{"chat_id":"{chat}","messages":[{{"content":"use a tool","role":"user"}},{{"content":"done with tools","role":"assistant"}}]}}"#
        )
    );
    let with = server.get(&format!("/api/sessions/{chat}/messages?tools=1")).json();
    let msgs = with["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 4, "{with}");
    // The opt-in also dates each turn (the original's answer above has no timestamp).
    for m in [&msgs[0], &msgs[3]] {
        assert!(m["timestamp"].as_str().is_some_and(is_minute_stamp), "{m}");
    }
    assert!(msgs[1].get("timestamp").is_none());
    // And gives each item its record's cursor (what search hits name).
    let cursors: Vec<u64> = msgs.iter().map(|m| m["cursor"].as_u64().expect("a cursor")).collect();
    assert_eq!(cursors, [1, 2, 3, 4]);
    assert_eq!(
        msgs[1],
        json!({"content":"[TOOL_CALLS: save_memory]","cursor":2,"role":"tool_calls","tool_calls":[
            {"arguments":"{\"content\":\"tool fact\"}","call_id":"call_t1","tool_name":"save_memory"}]})
    );
    assert_eq!(
        (msgs[2]["role"].as_str(), msgs[2]["call_id"].as_str(), msgs[2]["tool_name"].as_str()),
        (Some("tool"), Some("call_t1"), Some("save_memory"))
    );
    let paged = server.get(&format!("/api/sessions/{chat}/messages?tools=true&limit=2")).json();
    assert_eq!((paged["start"].as_u64(), paged["total"].as_u64()), (Some(2), Some(4)));
    assert_eq!(paged["messages"][0]["role"], "tool");
    let off = server.get(&format!("/api/sessions/{chat}/messages?tools=0&limit=10")).json();
    assert_eq!(off["total"], 2);
}

fn attach_raw(ws: &mut WsClient, chat: &str, after: u64) -> Value {
    ws.reply_to(&json!({"type":"attach","chat_id":chat,"after_seq":after}))
}

#[test]
fn seq_keeps_rising_across_restarts_and_a_client_behind_is_told_to_reload() {
    let OneChat { fake, mut server, mut ws, chat } = one_chat();
    fake.push(Reply::text(&["one ", "two ", "three"]));
    ws.message(&chat, "count", "openai_compatible");
    let events = ws.turn_events(&chat);
    let seen = events.last().expect("events")["seq"].as_u64().expect("seq");
    drop(ws);

    // A clean stop: the exact last seq is kept; a client that saw it all just goes on.
    server.restart_clean();
    let mut ws = WsClient::connect(&server);
    assert_eq!(attach_raw(&mut ws, &chat, seen), json!({"event":"attached","chat_id":chat,"last_seq":seen}));
    fake.push(Reply::text(&["again"]));
    ws.message(&chat, "more", "openai_compatible");
    let events = ws.turn_events(&chat);
    let first = events[0]["seq"].as_u64().expect("seq");
    assert_eq!(first, seen + 1, "numbers go on, never back");
    let seen2 = events.last().expect("events")["seq"].as_u64().expect("seq");
    // A client that missed events the server no longer has must reload.
    let r = attach_raw(&mut ws, &chat, seen - 2);
    assert_eq!(r, json!({"event":"attached","chat_id":chat,"last_seq":seen2,"reload":true}));
    drop(ws);

    // A crash: the server goes on above every seq it handed out and asks for a reload.
    server.restart();
    let mut ws = WsClient::connect(&server);
    let r = attach_raw(&mut ws, &chat, seen2);
    let last = r["last_seq"].as_u64().expect("last_seq");
    assert!(last >= seen2, "last_seq {last} < {seen2}");
    assert_eq!(r["reload"], json!(true), "{r}");
    fake.push(Reply::text(&["after crash"]));
    ws.message(&chat, "still here", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert!(events[0]["seq"].as_u64().expect("seq") > seen2);
    // No replay of events from before the crash.
    assert!(events.iter().all(|e| e["event"] != "delta" || e["text"] == "after crash"));
}
