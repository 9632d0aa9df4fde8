//! Checks of the fake LLM itself, so a failing server test is never the harness's fault:
//! streamed SSE framing, gates, cut streams, retries of an identical request, and the misuse
//! checks (extra call, unmatched tool_call_id).

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

fn agent() -> ureq::Agent {
    http_agent(Duration::from_secs(10))
}

fn post(fake: &FakeLlm, body: &Value) -> (u16, Result<String, String>) {
    let mut resp = agent()
        .post(format!("{}/chat/completions", fake.base()))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .expect("transport");
    let status = resp.status().as_u16();
    let mut text = String::new();
    let r = resp.body_mut().as_reader().read_to_string(&mut text).map(|_| text).map_err(|e| e.to_string());
    (status, r)
}

fn contents(sse: &str) -> String {
    sse.split("\n\n")
        .filter_map(|ev| ev.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).expect("chunk JSON"))
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect()
}

fn body(text: &str) -> Value {
    json!({"model":MODEL,"stream":true,"messages":[{"role":"user","content":text}]})
}

#[test]
fn fake_streams_gates_cuts_and_retries() {
    let fake = FakeLlm::start();
    let gate = Gate::new();
    fake.push(Reply::text(&["a", "é", "🙂"]).gate_before_chunk(1, &gate));
    let g = gate.clone();
    let opener = std::thread::spawn(move || {
        g.wait_reached(WAIT);
        std::thread::sleep(Duration::from_millis(50));
        g.open();
    });
    let t = Instant::now();
    let (status, text) = post(&fake, &body("one"));
    opener.join().expect("opener");
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert_eq!(status, 200);
    let text = text.expect("complete body");
    assert_eq!(contents(&text), "aé🙂");
    assert!(text.ends_with("data: [DONE]\n\n"));

    fake.push(Reply::cut(&["half"]));
    let (status, text) = post(&fake, &body("two"));
    assert_eq!(status, 200);
    assert!(text.is_err(), "a cut stream must fail to read: {text:?}");

    fake.push(Reply::status(500, r#"{"error":{"message":"x"}}"#));
    fake.push(Reply::text(&["next"]));
    assert_eq!(post(&fake, &body("three")).0, 500);
    assert_eq!(post(&fake, &body("three")).0, 500, "a retry gets the same reply");
    let (status, text) = post(&fake, &body("four"));
    assert_eq!((status, contents(&text.expect("body"))), (200, "next".to_string()));
    assert_eq!(fake.chat_requests().len(), 5);
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

#[test]
fn fake_records_misuse() {
    let fake = FakeLlm::start();
    fake.push(Reply::text(&["x"]));
    let bad = json!({"model":MODEL,"stream":true,"messages":[
        {"role":"user","content":"hi"},
        {"role":"tool","tool_call_id":"call_nobody","content":"r"}]});
    let _ = post(&fake, &bad);
    assert_eq!(post(&fake, &body("extra")).0, 500);
    let failures = fake.take_failures();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(failures[0].contains("call_nobody"));
    assert!(failures[1].contains("unexpected extra chat request"));
}

#[test]
fn fake_keeps_connections_alive_for_a_client_that_reads_to_the_end() {
    let fake = FakeLlm::start();
    let a = agent();
    for _ in 0..3 {
        fake.push(Reply::text(&["x"]));
        let mut resp = a
            .post(format!("{}/chat/completions", fake.base()))
            .header("Content-Type", "application/json")
            .send(body("k").to_string())
            .expect("transport");
        let text = resp.body_mut().read_to_string().expect("body");
        assert!(text.ends_with("data: [DONE]\n\n"));
    }
    let conns: std::collections::BTreeSet<u64> = fake.chat_requests().iter().map(|r| r.conn).collect();
    assert_eq!(conns.len(), 1);
}
