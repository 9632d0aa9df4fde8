//! The usage ledger (docs/usage.md): one row per model request of every job, the provider's
//! counts where it sent them and estimates marked where not, `stream_options` asked for and
//! dropped once refused, the files (0600, read back after a restart and after kill -9), the
//! reports, and budgets that pause a runaway tool loop and let the next message through once
//! raised.

use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use crate::common::fake_llm::Strict;
use crate::common::*;

fn records(server: &TestServer) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/usage/records?limit=3&cursor={c}"),
            None => "/api/usage/records?limit=3".to_string(),
        };
        let page = server.get(&path).json();
        out.extend(page["records"].as_array().expect("records").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

fn sum(rows: &[Value], key: &str) -> u64 {
    rows.iter().map(|r| r[key].as_u64().expect(key)).sum()
}

/// Ledger rows once they equal the fake's chat requests in number.
fn rows_for_every_request(server: &TestServer, fake: &FakeLlm) -> Vec<Value> {
    wait_for("a ledger row per model request", WAIT, || {
        let rows = records(server);
        (rows.len() == fake.chat_requests().len()).then_some(rows)
    })
}

#[test]
fn every_model_request_of_every_job_is_one_row_with_the_providers_counts() {
    let fake = FakeLlm::start();
    let mut server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "400").start();
    server.configure_llm(&fake);
    fake.set_completion_fallback(Reply::completion("SUMMARY: blocks were sent."));
    let mut ws = WsClient::connect(&server);
    ws.usage_events = true;
    let chat = ws.chat_id.clone();
    // Turn 1: a tool call (OpenAI's usage shape) then the answer (DeepSeek's).
    let openai = json!({"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,
        "prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":7}});
    let deepseek = json!({"prompt_tokens":130,"completion_tokens":9,"total_tokens":139,
        "prompt_cache_hit_tokens":128,"prompt_cache_miss_tokens":2});
    let call = ToolCallSpec::new("c1", "read_file", &[r#"{"path":"a.txt"}"#]);
    fake.push(Reply::tool_calls(&[call]).with_usage(openai));
    fake.push(Reply::text(&[&"A".repeat(100)]).with_usage(deepseek));
    ws.message(&chat, &"a".repeat(150), "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:#?}");
    let usage: Vec<&Value> = events.iter().filter(|e| e["event"] == "usage").collect();
    assert_eq!(usage.len(), 2, "one usage event per model call: {events:#?}");
    assert_eq!(usage[0]["input_tokens"], 100);
    assert_eq!(usage[0]["cached_input_tokens"], 64);
    assert_eq!(usage[0]["reasoning_tokens"], 7);
    assert_eq!(usage[1]["cached_input_tokens"], 128);
    assert_eq!(usage[1]["context_tokens"], 139);
    assert_eq!(usage[1]["source"], "reported");
    // Every streamed request asked for usage.
    assert!(fake.chat_requests().iter().all(|r| r.body["stream_options"] == json!({"include_usage": true})));
    // Turn 2: a provider that sends no usage: estimated and marked so.
    fake.push(Reply::text(&[&"B".repeat(100)]).with_usage(Value::Null));
    ws.message(&chat, &"b".repeat(150), "openai_compatible");
    let events = ws.turn_events(&chat);
    let est = events.iter().find(|e| e["event"] == "usage").expect("a usage event");
    assert_eq!(est["source"], "estimated");
    assert!(est["input_tokens"].as_u64().unwrap() > 0 && est["output_tokens"].as_u64().unwrap() >= 25);
    // The long chat is consolidated; then a Dream run.
    wait_for("a summary record", WAIT, || {
        history_records(&server.home, &chat).into_iter().find(|r| r["role"] == "summary")
    });
    assert_eq!(server.post("/api/dream/run", &json!({})).status, 202);
    wait_for("the Dream run", WAIT, || {
        let last = server.get("/api/dream").json()["last_run"].clone();
        (!last.is_null()).then_some(())
    });
    let rows = rows_for_every_request(&server, &fake);
    let jobs: std::collections::BTreeSet<&str> = rows.iter().filter_map(|r| r["job"].as_str()).collect();
    assert!(jobs.contains("turn") && jobs.contains("consolidate") && jobs.contains("dream"), "{jobs:?}");
    // Token sums equal the fake's usage exactly: the scripted streams, 10/5 per completion.
    let background = rows.iter().filter(|r| r["job"] != "turn").count() as u64;
    let reported: Vec<Value> = rows.iter().filter(|r| r["source"] == "reported").cloned().collect();
    assert_eq!(reported.len() as u64, 2 + background, "{rows:#?}");
    assert_eq!(sum(&reported, "input_tokens"), 100 + 130 + 10 * background);
    assert_eq!(sum(&reported, "output_tokens"), 20 + 9 + 5 * background);
    assert_eq!(sum(&reported, "cached_input_tokens"), 64 + 128);
    assert_eq!(sum(&reported, "reasoning_tokens"), 7);
    for r in &rows {
        assert_eq!(r["outcome"], "ok");
        assert_eq!(r["provider"], "openai_compatible");
        assert_eq!(r["model"], MODEL);
        assert!(r["ts"].as_u64().unwrap() > 1_700_000_000_000);
        let chat_of = if r["job"] == "dream" { Value::Null } else { json!(chat) };
        assert_eq!(r["chat_id"], chat_of, "{r}");
    }
    // Reports: by job, the totals match the rows.
    let by_job = server.get("/api/usage?group_by=job").json();
    assert_eq!(by_job["total"]["requests"], rows.len());
    assert_eq!(by_job["total"]["input_tokens"], sum(&rows, "input_tokens"));
    let turn = by_job["groups"].as_array().unwrap().iter().find(|g| g["key"] == "turn").expect("turn group").clone();
    assert_eq!(turn["requests"], 3);
    assert_eq!(turn["estimated_requests"], 1);
    assert_eq!(server.get("/api/usage?group_by=week").status, 422);
    // The month file is private, and everything is read back after a restart, even after the
    // chat is deleted (the money was spent).
    let dir = server.home.join("data").join("usage");
    let files: Vec<_> = std::fs::read_dir(&dir).expect("usage dir").map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777, 0o600);
    let bytes = std::fs::metadata(&files[0]).unwrap().len();
    eprintln!("ledger bytes per row: {}", bytes / rows.len() as u64);
    assert_eq!(server.request("DELETE", &format!("/api/sessions/{chat}"), &[], None).status, 204);
    drop(ws);
    server.restart();
    assert_eq!(records(&server), rows);
}

#[test]
fn a_provider_refusing_stream_options_is_asked_once_more_without_and_remembered() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.enforce(Strict::RefuseStreamOptions);
    let mut ws = WsClient::connect(&server);
    ws.usage_events = true;
    let chat = ws.chat_id.clone();
    for answer in ["one", "two"] {
        fake.push(Reply::text(&[answer]));
        ws.message(&chat, "hi", "openai_compatible");
        let events = ws.turn_events(&chat);
        assert_eq!(events.last().unwrap()["event"], "done", "{events:#?}");
        assert!(events.iter().any(|e| e["event"] == "delta" && e["text"] == answer));
    }
    let asked: Vec<bool> = fake.chat_requests().iter().map(|r| r.body.get("stream_options").is_some()).collect();
    assert_eq!(asked, [true, false, false], "retried once without, then never asked again");
    let rows = rows_for_every_request(&server, &fake);
    let outcomes: Vec<&str> = rows.iter().filter_map(|r| r["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["error", "ok", "ok"]);
    assert!(rows[1..].iter().all(|r| r["source"] == "estimated"), "no usage came: {rows:#?}");
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

#[test]
fn a_runaway_tool_loop_stops_at_the_chat_budget_and_the_next_message_works_once_raised() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    // 15 tokens per request (the fake's usage): the 5th request would start at 60 of 50.
    let put = server.put("/api/settings/budgets", &json!({"chat": {"tokens": 50, "cost": null}}));
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(server.get("/api/settings/budgets").json()["chat"]["tokens"], 50);
    assert_eq!(server.put("/api/settings/budgets", &json!({"chat": {"tokens": -1}})).status, 422);
    assert_eq!(server.put("/api/settings/budgets", &json!({"weekly": {}})).status, 422);
    for i in 0..6 {
        let call = ToolCallSpec::new(&format!("c{i}"), "read_file", &[&format!(r#"{{"path":"f{i}.txt"}}"#)]);
        fake.push(Reply::tool_calls(&[call]));
    }
    let mut ws = WsClient::connect(&server);
    ws.usage_events = true;
    let chat = ws.chat_id.clone();
    ws.message(&chat, "loop forever", "openai_compatible");
    let events = ws.turn_events(&chat);
    let last = events.last().unwrap();
    assert_eq!(last["event"], "error", "{events:#?}");
    let detail = error_detail(last);
    assert!(
        detail.contains("Budget reached") && detail.contains("\"chat\"") && detail.contains("/api/settings/budgets"),
        "{detail}"
    );
    assert_eq!(fake.chat_requests().len(), 4, "spend stops within one request of the cap");
    let warn: Vec<&Value> = events.iter().filter(|e| e["event"] == "budget_warning").collect();
    assert_eq!(warn.len(), 1, "{events:#?}");
    assert_eq!(warn[0]["budget"], "chat");
    assert_eq!(warn[0]["cap_tokens"], 50);
    // The user's message stays; the refusal is a ledger row of its own.
    let history = server.get(&format!("/api/sessions/{chat}/messages")).json();
    assert_eq!(history["messages"][0]["content"], "loop forever", "{history}");
    let rows = records(&server);
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[4]["outcome"], "budget");
    assert_eq!(sum(&rows, "input_tokens") + sum(&rows, "output_tokens"), 60);
    // Another message while over the cap: refused without a request.
    ws.message(&chat, "again", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().unwrap()["event"], "error");
    assert_eq!(fake.chat_requests().len(), 4);
    // Raised: the next message simply works.
    let put = server.put("/api/settings/budgets", &json!({"chat": {"tokens": null, "cost": null}}));
    assert_eq!(put.status, 200);
    fake.push(Reply::text(&["done now"]));
    ws.message(&chat, "go on", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().unwrap()["event"], "done", "{events:#?}");
}

#[test]
fn a_cost_budget_uses_the_owners_prices_and_a_background_cap_skips_consolidation() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "400").start();
    server.configure_llm(&fake);
    let prices = json!({"models": [{"provider": "openai_compatible", "model": MODEL,
        "input": 1000.0, "cached_input": 100.0, "output": 2000.0, "currency": "usd"}]});
    let saved = server.put("/api/settings/prices", &prices);
    assert_eq!(saved.status, 200, "{}", saved.body);
    let saved = saved.json();
    assert_eq!(saved["models"][0]["currency"], "USD");
    assert!(saved["updated"].as_str().is_some_and(|d| d.len() == 10), "{saved}");
    let bad = json!({"models": [{"provider": "openai_compatible", "model": MODEL, "input": -1, "output": 1, "currency": "USD"}]});
    assert_eq!(server.put("/api/settings/prices", &bad).status, 422);
    // No background spend allowed today: consolidation is skipped, with a logged reason.
    let put = server.put("/api/settings/budgets", &json!({"background_day": {"tokens": 0}}));
    assert_eq!(put.status, 200);
    let mut ws = WsClient::connect(&server);
    ws.usage_events = true;
    let chat = ws.chat_id.clone();
    for (u, a) in [("a", "A"), ("b", "B")] {
        fake.push(Reply::text(&[&a.repeat(100)]));
        ws.message(&chat, &u.repeat(150), "openai_compatible");
        assert_eq!(ws.turn_events(&chat).last().unwrap()["event"], "done");
    }
    server.wait_log("event=usage.budget_refused job=consolidate", 1);
    assert!(fake.requests().iter().all(|r| !r.is_chat() || r.body["stream"] == json!(true)));
    // Cost: 10 input at 1000/M and 5 output at 2000/M per turn request.
    let report = server.get(&format!("/api/usage?group_by=chat&chat_id={chat}")).json();
    let cost = report["total"]["cost"]["USD"].as_f64().expect("a USD cost");
    assert!((cost - 2.0 * (10.0 * 1000.0 + 5.0 * 2000.0) / 1e6).abs() < 1e-9, "{report}");
    assert_eq!(report["prices_updated"], saved["updated"]);
}

#[test]
fn kill_9_during_a_turn_leaves_a_readable_ledger() {
    let OneChat { fake, mut server, mut ws, .. } = one_chat();
    ws.usage_events = true;
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["first"]));
    ws.message(&chat, "one", "openai_compatible");
    ws.turn_events(&chat);
    let before = records(&server);
    assert_eq!(before.len(), 1);
    // A torn row (a crash mid-write) at the end of the month file.
    let dir = server.home.join("data").join("usage");
    let file = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let mut f = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
    std::io::Write::write_all(&mut f, br#"{"ts":17,"chat_id":"x","job":"tu"#).unwrap();
    let gate = Gate::new();
    fake.push(Reply::text(&["never", "finished"]).gate_before_chunk(1, &gate));
    ws.message(&chat, "two", "openai_compatible");
    fake.wait_chat_requests(2, WAIT);
    server.kill();
    drop(ws);
    server.restart();
    assert_eq!(records(&server), before, "the torn line is skipped, nothing before it lost");
    let mut ws = WsClient::connect(&server);
    ws.usage_events = true;
    ws.attach(&chat, None);
    fake.push(Reply::text(&["third"]));
    ws.message(&chat, "three", "openai_compatible");
    ws.turn_events(&chat);
    let after = records(&server);
    assert_eq!(after.len(), 2, "the row after the torn line is read: {after:#?}");
    assert_eq!(after[0], before[0]);
}

/// The price table's and the budgets' bodies are read like every other body: each wrong shape
/// is a pydantic item (unknown keys first), a value rule of the ledger a string `detail`, and
/// nothing is saved from a refused body.
#[test]
fn price_and_budget_bodies_answer_pydantic_items_and_keep_what_was_saved() {
    let server = TestServer::start();
    let good = json!({"models": [{"provider": "p", "model": "m", "input": 1, "output": 2, "currency": "usd"}]});
    assert_eq!(server.put("/api/settings/prices", &good).status, 200);
    let bad = json!({"models": [{"provider": 1, "model": "m", "input": "x", "output": 2, "currency": "USD", "tier": 1}], "note": 2});
    let r = server.put("/api/settings/prices", &bad);
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body,
        r#"{"detail":[{"input":2,"loc":["body","note"],"msg":"Extra inputs are not permitted","type":"extra_forbidden"},{"input":1,"loc":["body","models","0","tier"],"msg":"Extra inputs are not permitted","type":"extra_forbidden"},{"input":1,"loc":["body","models","0","provider"],"msg":"Input should be a valid string","type":"string_type"},{"input":"x","loc":["body","models","0","input"],"msg":"Input should be a valid number","type":"float_type"}]}"#
    );
    let r = server.put(
        "/api/settings/prices",
        &json!({"models": [{"provider": "p", "model": "m", "input": -1, "output": 2, "currency": "USD"}]}),
    );
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["detail"], "prices of \"m\" must be numbers from 0 to 1000000");
    assert_eq!(server.put("/api/settings/prices", &json!([1])).json()["detail"][0]["type"], "model_attributes_type");
    assert_eq!(server.get("/api/settings/prices").json()["models"][0]["currency"], "USD", "the saved table stays");

    assert_eq!(server.put("/api/settings/budgets", &json!({"chat": {"tokens": 5}, "day": null})).status, 200);
    let r = server.put("/api/settings/budgets", &json!({"chat": {"tokens": -1, "cost": "cheap"}, "weekly": {}}));
    assert_eq!(r.status, 422);
    let items: Vec<(String, String)> = r.json()["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["type"].as_str().unwrap().to_string(), i["loc"].to_string()))
        .collect();
    assert_eq!(
        items,
        [
            ("extra_forbidden".to_string(), r#"["body","weekly"]"#.to_string()),
            ("greater_than_equal".to_string(), r#"["body","chat","tokens"]"#.to_string()),
            ("float_type".to_string(), r#"["body","chat","cost"]"#.to_string()),
        ],
        "{}",
        r.body
    );
    let budgets = server.get("/api/settings/budgets").json();
    assert_eq!((budgets["chat"]["tokens"].clone(), budgets["day"]["tokens"].clone()), (json!(5), Value::Null));
}
