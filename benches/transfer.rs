//! `cargo bench --bench transfer`: export and import of 100 chats, each a
//! median of [`RUNS`] runs on fresh servers (`CASHCODE_TEST_BIN` picks the build):
//! - export: a memory root of [`CHATS`] chats of [`TURNS`] turns (user, a tool step with one
//!   call and its result, the answer; mixed English and Chinese text) written directly, then
//!   `GET /api/export?format=jsonl|md|atif` over HTTP, each format's time and zip bytes;
//! - import: that native zip `POST /api/import`ed into an empty server, and the time until the
//!   201 (every chat checked, written and renamed into place).
//!
//! Without `--bench` (`cargo test --bench transfer`, a debug build) it is a smoke run: one run,
//! and the round trip checked byte for byte. `BENCH_RUNS=N` sets the number of runs.
//!
//! Threads: the main thread drives the requests; the server is a separate process.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::path::Path;
use std::time::Instant;

use common::stats::{median, ms};
use common::{fresh_home, TestServer};

const RUNS: usize = 5;
const CHATS: usize = 100;
const TURNS: usize = 25;

fn runs() -> usize {
    if !std::env::args().any(|a| a == "--bench") {
        return 1;
    }
    std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(RUNS)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// Writes the chats in the server's own record layout; the history bytes written.
fn seed(memory: &Path) -> usize {
    let mut total = 0;
    for c in 0..CHATS {
        let dir = memory.join(format!("chat-{c:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut h = String::new();
        let mut cursor = 0;
        let mut line = |h: &mut String, body: String| {
            cursor += 1;
            h.push_str(&format!(
                "{{\"cursor\": {cursor}, \"timestamp\": \"2026-03-01 09:{:02}\", {body}}}\n",
                cursor % 60
            ));
        };
        for t in 0..TURNS {
            line(&mut h, format!("\"role\": \"user\", \"content\": \"Question {t} about the bookkeeping app: 记账应用的第{t}个问题, how should the ledger handle refunds?\""));
            line(&mut h, format!("\"role\": \"tool_calls\", \"content\": \"[TOOL_CALLS: read_file]\", \"tool_calls\": [{{\"id\": \"call_{c}_{t}\", \"function\": {{\"arguments\": \"{{\\\"path\\\":\\\"src/ledger_{t}.rs\\\"}}\", \"name\": \"read_file\"}}, \"type\": \"function\"}}]"));
            line(&mut h, format!("\"role\": \"tool\", \"content\": \"{}\", \"tool_call_id\": \"call_{c}_{t}\", \"name\": \"read_file\"", "fn refund(&mut self) { /* ... */ }\\n".repeat(12)));
            line(
                &mut h,
                format!(
                    "\"role\": \"assistant\", \"content\": \"{}\"",
                    "Refunds are negative entries linked to the original sale; 退款记为负数并关联原始销售。 ".repeat(4)
                ),
            );
        }
        std::fs::write(dir.join("history.jsonl"), &h).unwrap();
        std::fs::write(dir.join("metadata.json"), format!("{{\n  \"title\": \"Chat {c}\"\n}}")).unwrap();
        total += h.len();
    }
    total
}

fn get(server: &TestServer, path: &str) -> Vec<u8> {
    let mut r = agent().get(&format!("{}{path}", server.http_base())).call().unwrap();
    assert_eq!(r.status().as_u16(), 200, "{path}");
    let mut body = Vec::new();
    r.body_mut().as_reader().read_to_end(&mut body).unwrap();
    body
}

fn import(server: &TestServer, zip: &[u8]) -> serde_json::Value {
    let mut body = b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"all.zip\"\r\n\r\n".to_vec();
    body.extend_from_slice(zip);
    body.extend_from_slice(b"\r\n--B--\r\n");
    let mut r = agent()
        .post(&format!("{}/api/import", server.http_base()))
        .header("Content-Type", "multipart/form-data; boundary=B")
        .send(&body[..])
        .unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    assert_eq!(status, 201, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn main() {
    let runs = runs();
    let (mut export_ms, mut md_ms, mut atif_ms, mut import_ms) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut history_bytes, mut sizes) = (0, (0, 0, 0));
    for run in 0..runs {
        let home = fresh_home("bench-transfer");
        history_bytes = seed(&home.join("memory"));
        let server = TestServer::builder().home(&home).start();
        let t = Instant::now();
        let zip = get(&server, "/api/export?format=jsonl");
        export_ms.push(ms(t.elapsed()));
        let t = Instant::now();
        let md = get(&server, "/api/export?format=md");
        md_ms.push(ms(t.elapsed()));
        let t = Instant::now();
        let atif = get(&server, "/api/export?format=atif");
        atif_ms.push(ms(t.elapsed()));
        sizes = (zip.len(), md.len(), atif.len());

        let target = TestServer::start();
        let t = Instant::now();
        let v = import(&target, &zip);
        import_ms.push(ms(t.elapsed()));
        assert_eq!(v["imported"].as_array().unwrap().len(), CHATS);
        if run == 0 {
            // The round trip is byte for byte, chat by chat.
            for c in 0..CHATS {
                let id = format!("chat-{c:03}");
                let a = std::fs::read(server.chat_dir(&id).join("history.jsonl")).unwrap();
                let b = std::fs::read(target.chat_dir(&id).join("history.jsonl")).unwrap();
                assert_eq!(a, b, "{id}");
            }
        }
        eprintln!(
            "  run {}: export jsonl {:.1} ms, md {:.1} ms, atif {:.1} ms; import {:.1} ms",
            run + 1,
            export_ms[run],
            md_ms[run],
            atif_ms[run],
            import_ms[run]
        );
    }
    println!(
        "transfer of {CHATS} chats x {TURNS} turns ({} records, {history_bytes} history bytes), medians of {runs}:",
        CHATS * TURNS * 4
    );
    println!("  export zip jsonl: {:.1} ms, {} bytes", median(export_ms), sizes.0);
    println!("  export zip md:    {:.1} ms, {} bytes", median(md_ms), sizes.1);
    println!("  export zip atif:  {:.1} ms, {} bytes", median(atif_ms), sizes.2);
    println!("  import zip jsonl: {:.1} ms", median(import_ms));
}
