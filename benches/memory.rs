//! `cargo bench --bench memory`: figures against the fake LLM with zero delay,
//! each a median of 5. Prints one table:
//! - history load: a chat whose history.jsonl holds 100,000 records (written directly), server
//!   restarted, then the time from sending the next message to its first `delta`. Two layouts:
//!   with a `summary` record near the end (the realistic case after consolidation: the whole
//!   file is parsed, ~1,000 records go to the model) and without one (all 100,000 are sent);
//! - one Dream run over 50 chats (20 records each, 1,000 pending): `Dream::run` called directly
//!   (the function the timer thread calls), which lists and reads all 50 histories, sends one
//!   batch through both phases, snapshots and rewrites MEMORY.md and advances the cursors.
//!
//! - long chat (the long-histories issue): 100,000 records, no summary, default settings.
//!   The server starts on it, a first turn loads it, then [`TURNS`] more turns are timed from
//!   `message` to `done` against the same on a two-record chat; the server's RSS after them,
//!   the bytes of the last request the model received, and the time of
//!   `GET /api/sessions/{id}/messages?limit=50` (the web client's first page) and of the whole
//!   list.
//!
//! Without `--bench` (`cargo test --bench memory`, a debug build) it is a smoke run: a tenth of
//! the records, one run of each part, three timed turns.
//!
//! Threads: the main thread drives everything (including the in-process Dream runs); the fake
//! LLM and the server process are separate.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cashcode::llm::runtime::LlmRuntime;
use cashcode::llm::settings::Settings;
use cashcode::llm::Provider;
use cashcode::memory_jobs::dream::{Dream, Outcome};
use cashcode::store::chats::ChatStore;
use cashcode::store::memory_files::MemoryFiles;
use common::stats::{median, ms, rss};
use common::{fresh_home, FakeLlm, Reply, TestServer, WsClient};
use serde_json::json;

const RUNS: usize = 5;
const RECORDS: usize = 100_000;

/// Run without `--bench`: the smoke run of the header.
fn smoke() -> bool {
    static SMOKE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SMOKE.get_or_init(|| !std::env::args().any(|a| a == "--bench"))
}
fn runs() -> usize {
    if smoke() {
        1
    } else {
        RUNS
    }
}
fn records() -> usize {
    if smoke() {
        RECORDS / 10
    } else {
        RECORDS
    }
}
fn turns() -> usize {
    if smoke() {
        3
    } else {
        TURNS
    }
}

/// Writes `n` alternating user/assistant records (and `.cursor`); with `summary_at`, record
/// number `summary_at` is a `summary` keeping everything after it.
fn write_history(home: &Path, chat: &str, n: usize, summary_at: Option<usize>) {
    let dir = home.join("memory").join(chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    let mut text = String::with_capacity(n * 120);
    for c in 1..=n {
        let rec = if Some(c) == summary_at {
            json!({"cursor":c,"timestamp":"2026-01-01 00:00","role":"summary",
                   "content":"Earlier the user and the assistant exchanged many numbered notes.",
                   "keep_from_cursor":c + 1})
        } else {
            let role = if c % 2 == 1 { "user" } else { "assistant" };
            json!({"cursor":c,"timestamp":"2026-01-01 00:00","role":role,
                   "content":format!("record number {c} with a little text about the day")})
        };
        text.push_str(&rec.to_string());
        text.push('\n');
    }
    std::fs::write(dir.join("history.jsonl"), text).expect("history");
    std::fs::write(dir.join(".cursor"), n.to_string()).expect("cursor");
}

/// Median time to first delta of a new turn right after a restart, over [`RUNS`] restarts.
fn history_load(summary_at: Option<usize>) -> f64 {
    let fake = FakeLlm::start();
    fake.set_fallback(Reply::text(&["first", " delta"]));
    // Without a summary the chat is over the consolidation threshold (at most half the context
    // budget), so a summary may be asked for in the background before the next restart. It
    // fails, and the history stays as written for every run.
    fake.set_completion_fallback(Reply::status(503, r#"{"error":{"message":"no summaries in this bench"}}"#));
    let home = fresh_home("bench-load");
    let chat = "big-chat-1";
    write_history(&home, chat, records(), summary_at);
    let mut server = TestServer::builder().home(&home).env("CASHCODE_CONSOLIDATE_CHARS", "1000000000").start();
    server.configure_llm(&fake);
    let mut times = Vec::new();
    for i in 0..runs() {
        server.restart();
        let mut ws = WsClient::connect(&server);
        ws.attach(chat, None);
        let sent = Instant::now();
        ws.message(chat, &format!("bench message {i}"), "openai_compatible");
        let first = loop {
            let v = ws.recv_within(Duration::from_secs(120)).expect("a frame within 120 s");
            if v["chat_id"] == chat && v["event"] == "delta" {
                break sent.elapsed();
            }
            assert!(!(v["chat_id"] == chat && v["event"] == "error"), "turn failed: {v}");
        };
        ws.turn_events(chat);
        times.push(ms(first));
        fake.clear_requests();
    }
    median(times)
}

/// Median wall time of one Dream run over 50 chats, run in-process on the library's `Dream`
/// (the same code the timer thread calls) against the fake; returns (median ms, records per run).
fn dream_over_50_chats() -> (f64, usize) {
    let fake = FakeLlm::start();
    fake.set_completion_fallback(Reply::completion("- the user likes benchmarks"));
    let home = fresh_home("bench-dream");
    for c in 0..50 {
        write_history(&home, &format!("dream-chat-{c:02}"), 20, None);
    }
    let root = home.join("memory");
    let llm = LlmRuntime::load(home.join("llm.json"), Duration::from_secs(30), None, None);
    llm.save(Settings {
        openai_base_url: fake.base(),
        openai_api_key: common::TEST_KEY.to_string(),
        ollama_base_url: fake.base(),
    })
    .expect("save llm settings");
    llm.acquire(Provider::OpenAiCompatible, common::MODEL).expect("a client");
    let dream =
        Dream { chats: Arc::new(ChatStore::new(&root)), memory: Arc::new(MemoryFiles::new(&root)), llm: Arc::new(llm) };
    let mut times = Vec::new();
    let mut records = 0;
    for _ in 0..runs() {
        let t = Instant::now();
        let outcome = dream.run();
        times.push(ms(t.elapsed()));
        match outcome {
            Outcome::Written { records: r, chats } => {
                records = r;
                assert!(chats >= 1);
            }
            other => panic!("Dream run did not write: {other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&home);
    (median(times), records)
}

const TURNS: usize = 20;

/// Median `message` -> `done` of [`TURNS`] turns in `chat` (after one untimed turn).
/// Medians over [`TURNS`] turns (after an untimed first) of the wall time from sending the
/// message to `done`, and of the server's share of it (the same minus the fake's handling time
/// of that turn's request, as `benches/server.rs` counts overhead).
fn turn_times(ws: &mut WsClient, fake: &FakeLlm, chat: &str) -> (f64, f64) {
    let (mut times, mut server) = (Vec::new(), Vec::new());
    for i in 0..=turns() {
        let index = fake.chat_requests().len();
        let sent = Instant::now();
        ws.message(chat, &format!("bench turn {i}"), "openai_compatible");
        let events = ws.turn_events(chat);
        let total = sent.elapsed();
        assert_eq!(events.last().map(|e| e["event"].clone()), Some(json!("done")), "{events:?}");
        if i > 0 {
            times.push(ms(total));
            server.push(ms(total.saturating_sub(fake.wait_handled(index, Duration::from_secs(10)))));
        }
    }
    (median(times), median(server))
}

/// Median wall time of `GET path` over 10 requests, and the body size.
/// (median of 10, body size, the first of them: the cold request that builds the page index).
fn get_times(server: &TestServer, path: &str) -> (f64, usize, f64) {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..10 {
        let t = Instant::now();
        let r = server.get(path);
        times.push(ms(t.elapsed()));
        assert_eq!(r.status, 200);
        size = r.body.len();
    }
    let first = times[0];
    (median(times), size, first)
}

fn long_chat() {
    let fake = FakeLlm::start();
    fake.set_fallback(Reply::text(&["an", " answer"]));
    fake.set_completion_fallback(Reply::completion("Earlier the user and the assistant exchanged numbered notes."));
    let home = fresh_home("bench-long");
    let (long, short) = ("long-chat-1", "short-chat-1");
    write_history(&home, long, records(), None);
    write_history(&home, short, 2, None);
    let size = std::fs::metadata(home.join("memory").join(long).join("history.jsonl")).map_or(0, |m| m.len());
    let server = TestServer::builder().home(&home).start();
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);
    ws.attach(long, None);
    ws.attach(short, None);
    let (short_ms, short_server) = turn_times(&mut ws, &fake, short);
    let (long_ms, long_server) = turn_times(&mut ws, &fake, long);
    let last = fake.chat_requests().into_iter().rfind(|r| r.body["stream"] == json!(true)).expect("a request");
    let (rss_kib, hwm_kib) = rss(server.pid);
    let (page_ms, page_bytes, cold_ms) = get_times(&server, &format!("/api/sessions/{long}/messages?limit=50"));
    let (older_ms, _, _) = get_times(&server, &format!("/api/sessions/{long}/messages?limit=50&before=40000"));
    let (all_ms, all_bytes, _) = get_times(&server, &format!("/api/sessions/{long}/messages"));
    let (records, turns) = (records(), turns());
    println!(
        "long chat, {records} records ({:.1} MB), no summary: turn {long_ms:.2} ms vs short chat {short_ms:.2} ms \
(server's share {long_server:.2} vs {short_server:.2} ms; medians of {turns}); request to the model {} KB; RSS after {:.1} MiB (peak {:.1} MiB)",
        size as f64 / 1e6,
        last.raw.len() / 1000,
        rss_kib as f64 / 1024.0,
        hwm_kib as f64 / 1024.0
    );
    println!(
        "messages, {records} records: first page (limit=50) {page_ms:.2} ms ({cold_ms:.1} ms the first time), \
{page_bytes} B; a page at item 40,000 {older_ms:.2} ms; whole list {all_ms:.1} ms, {} KB",
        all_bytes / 1000
    );
    drop(ws);
    drop(server);
    let _ = std::fs::remove_dir_all(&home);
}

fn main() {
    let (runs, records) = (runs(), records());
    println!("CashCode memory benchmarks (fake LLM, zero delay, median of {runs})");
    long_chat();
    if std::env::args().any(|a| a == "--long-only") {
        return;
    }
    let with_summary = history_load(Some(records - 1000));
    println!("history load, {records} records, summary near the end: first delta after restart {with_summary:.1} ms");
    let without = history_load(None);
    println!("history load, {records} records, no summary:  first delta after restart {without:.1} ms");
    let (dream, batch) = dream_over_50_chats();
    println!("Dream run over 50 chats x 20 records (batch of {batch} records): {dream:.1} ms per run");
}
