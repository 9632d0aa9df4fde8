//! `cargo bench --bench answers`: the figures of bounded answers, each a
//! median of [`RUNS`] runs, each run on a fresh server (`CASHCODE_TEST_BIN` picks the build):
//! - a 64 MiB answer: the fake model streams 64 deltas of 1 MiB into one turn; the server's
//!   peak RSS (`VmHWM`) after the turn ended, and its growth over the peak before the turn;
//! - paging that chat: a history holding one 64 MiB line (written directly, as an unbounded
//!   server stored it) paged with `GET /api/sessions/{id}/messages?limit=50` three times while
//!   a prober asks `GET /api/health` every 10 ms on fresh connections; the page's time and the
//!   health probes' median and maximum latency while the pages were read.
//!
//! Without `--bench` (`cargo test --bench answers`, a debug build) it is a smoke run: one run
//! of each part. `BENCH_RUNS=N` sets the number of runs.
//!
//! Threads: the main thread drives the turn and the pages; the prober is a thread of its own;
//! the fake LLM and the server process are separate.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::stats::{median, ms, rss};
use common::{FakeLlm, Reply, TestServer, WsClient};

const RUNS: usize = 5;
const MIB: usize = 1 << 20;

/// [`RUNS`], `BENCH_RUNS` when set, one in a smoke run.
fn runs() -> usize {
    if !std::env::args().any(|a| a == "--bench") {
        return 1;
    }
    std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(RUNS)
}

/// Peak RSS growth (MiB) over one turn streaming 64 MiB, and the peak itself (MiB).
fn answer_run() -> (f64, f64) {
    let fake = FakeLlm::start();
    let server = TestServer::start();
    server.configure_llm(&fake);
    let piece = "a".repeat(MIB);
    let pieces: Vec<&str> = (0..64).map(|_| piece.as_str()).collect();
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    let (_, before) = rss(server.pid);
    fake.push(Reply::text(&pieces));
    ws.message(&chat, "write 64 MiB", "openai_compatible");
    let end = ws.turn_events(&chat);
    let last = end.last().map(|e| e["event"].as_str().unwrap_or("").to_string()).unwrap_or_default();
    let (_, after) = rss(server.pid);
    eprintln!("  answer run: turn ended with {last}, VmHWM {} -> {} MiB", before >> 10, after >> 10);
    (after.saturating_sub(before) as f64 / 1024.0, after as f64 / 1024.0)
}

/// One `GET /api/health` on a fresh connection; its time.
fn probe(port: u16) -> Option<Duration> {
    let started = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").ok()?;
    let mut got = Vec::new();
    s.read_to_end(&mut got).ok()?;
    got.starts_with(b"HTTP/1.1 200").then(|| started.elapsed())
}

/// (page ms, health median ms, health max ms) while a chat holding one 64 MiB line is paged.
fn paging_run() -> (f64, f64, f64) {
    let server = TestServer::start();
    let chat = "long-line";
    let dir = server.chat_dir(chat);
    std::fs::create_dir_all(&dir).unwrap();
    let line = |cursor: u64, role: &str, content: &str| {
        format!(
            r#"{{"cursor":{cursor},"timestamp":"2026-12-02 10:00","role":"{role}","content":{}}}"#,
            serde_json::json!(content)
        )
    };
    let history = [line(1, "user", "q"), line(2, "assistant", &"b".repeat(64 * MIB)), line(3, "user", "q2")];
    std::fs::write(dir.join("history.jsonl"), history.join("\n") + "\n").unwrap();
    let port = server.http_port;
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut times = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Some(d) = probe(port) {
                    times.push(ms(d));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            times
        })
    };
    // Read raw: an unbounded server answers with the whole 64 MiB line.
    let mut pages = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET /api/sessions/{chat}/messages?limit=50 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert!(got.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&got[..got.len().min(200)]));
        pages.push(ms(started.elapsed()));
    }
    stop.store(true, Ordering::SeqCst);
    let mut health = prober.join().unwrap();
    health.sort_by(|a, b| a.total_cmp(b));
    let max = health.last().copied().unwrap_or(f64::NAN);
    (median(pages), median(health), max)
}

fn main() {
    let bin = std::env::var("CASHCODE_TEST_BIN").unwrap_or_else(|_| "(this build)".into());
    println!("answers bench: {bin}");
    let mut grew = Vec::new();
    let mut peak = Vec::new();
    for _ in 0..runs() {
        let (g, p) = answer_run();
        grew.push(g);
        peak.push(p);
    }
    println!(
        "64 MiB answer: peak RSS {:.0} MiB (+{:.0} MiB over the turn), median of {}",
        median(peak),
        median(grew),
        runs()
    );
    let (mut page, mut med, mut max) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs() {
        let (p, m, x) = paging_run();
        page.push(p);
        med.push(m);
        max.push(x);
    }
    println!(
        "paging a 64 MiB line: page {:.1} ms; /api/health meanwhile median {:.2} ms, max {:.1} ms (medians of {})",
        median(page),
        median(med),
        median(max),
        runs()
    );
}
