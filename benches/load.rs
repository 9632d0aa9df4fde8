//! `cargo bench --bench load`: the issue-7 load and footprint figures against the release
//! server and the zero-delay fake LLM, medians over several runs:
//! - throughput, latency p50/p99 and errors at 100, 500 and 1,000 concurrent WebSocket clients,
//!   each on its own chat; server threads and RSS before, at peak and after they leave;
//! - 10,000 turns in a row in one chat (consolidation running against the fake), with the
//!   per-turn server overhead, time to first delta and RSS sampled every 1,000 turns;
//! - history load: a 100,000-record chat read over HTTP and continued over WebSocket;
//! - idle RSS, start-up time to both `listening` lines, release binary size.
//!
//! - tool_search over 10,000 tools and skill_search over 1,000 skills (in-process).
//!
//! `BENCH_ONLY=burst` instead runs `BENCH_BURSTS` (default 3) 1,000-client bursts in a row and
//! prints RSS after each and once its chats have gone quiet; `BENCH_HOLD=<s>` then keeps the
//! server up for inspection.
//!
//! This is the one-command performance report; `--bench server` has the finer per-turn
//! figures.
//!
//! Threads: the main thread drives the sequential parts; each concurrent client has its own
//! thread; the fake LLM has its own threads.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[path = "shared/search.rs"]
mod search;

#[path = "shared/bighist.rs"]
mod bighist;
use bighist::{big_history_home, HISTORY_RECORDS};

use common::stats::{median, ms, pct, raise_nofile, rss, threads};
use common::ws::Handshake;
use common::{fresh_home, FakeLlm, Reply, TestServer, WsClient};

const STARTS: usize = 7;
const CONC_RUNS: usize = 3;
const CONC_TURNS: usize = 3;
const SEQ_TURNS: usize = 10_000;
const ANSWER: [&str; 3] = ["Hello", ", load", " world"];
/// `CASHCODE_REPLAY_TTL` of the load server; RSS is read again once it has passed.
const REPLAY_TTL: Duration = Duration::from_secs(5);
/// The replay window plus two housekeeping ticks (every TTL / 2).
const RINGS_GONE: Duration = Duration::from_secs(11);

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

struct ConcResult {
    turns_per_sec: f64,
    p50: f64,
    p99: f64,
    errors: usize,
    peak_threads: usize,
}

/// `clients` concurrent clients, each on its own chat, [`CONC_TURNS`] turns each.
fn concurrent_run(server: &TestServer, fake: &FakeLlm, clients: usize) -> ConcResult {
    fake.clear_requests();
    let port = server.ws_port;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || -> (Vec<f64>, usize) {
                    let connected = std::panic::catch_unwind(|| WsClient::handshake(port, None));
                    let mut c = match connected {
                        Ok(Handshake::Accepted(c)) => c,
                        _ => {
                            barrier.wait();
                            return (Vec::new(), CONC_TURNS);
                        }
                    };
                    let chat = c.chat_id.clone();
                    barrier.wait();
                    let mut lat = Vec::with_capacity(CONC_TURNS);
                    for i in 0..CONC_TURNS {
                        let sent = Instant::now();
                        c.message(&chat, &format!("load {i}"), "openai_compatible");
                        loop {
                            match c.recv_or_closed(Duration::from_secs(120)) {
                                Ok(Some(v)) if v["event"] == "done" => {
                                    lat.push(ms(sent.elapsed()));
                                    break;
                                }
                                Ok(Some(v)) if v["event"] == "error" => return (lat, CONC_TURNS - i),
                                Ok(Some(_)) => {}
                                Ok(None) | Err(_) => return (lat, CONC_TURNS - i),
                            }
                        }
                    }
                    c.drop_socket();
                    (lat, 0)
                })
                .expect("spawn client")
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let peak_threads = threads(server.pid);
    let mut all = Vec::new();
    let mut errors = 0;
    for h in handles {
        match h.join() {
            Ok((lat, e)) => {
                all.extend(lat);
                errors += e;
            }
            Err(_) => errors += CONC_TURNS,
        }
    }
    let wall = start.elapsed().as_secs_f64();
    all.sort_by(|a, b| a.total_cmp(b));
    ConcResult {
        turns_per_sec: all.len() as f64 / wall,
        p50: pct(&all, 0.5),
        p99: pct(&all, 0.99),
        errors,
        peak_threads,
    }
}

/// Waits (up to 30 s) for the server's thread count to settle at or below `target`.
fn settle_threads(pid: u32, target: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = threads(pid);
        if n <= target || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct SeqResult {
    overhead50: f64,
    overhead99: f64,
    first50: f64,
    /// RSS (KiB) after every 1,000 turns.
    rss: Vec<u64>,
    errors: usize,
    summaries: usize,
}

/// [`SEQ_TURNS`] turns in a row in one chat.
fn sequential(server: &TestServer, fake: &FakeLlm) -> SeqResult {
    let mut ws = WsClient::connect(server);
    let chat = ws.chat_id.clone();
    let mut overheads = Vec::with_capacity(SEQ_TURNS);
    let mut firsts = Vec::with_capacity(SEQ_TURNS);
    let mut samples = Vec::new();
    let mut errors = 0;
    for i in 0..SEQ_TURNS {
        // Only this turn's requests stay recorded, so reading them stays cheap.
        fake.clear_requests();
        // A long-ish question so consolidation (40,000 chars) runs every ~100 turns.
        let sent = Instant::now();
        ws.message(&chat, &format!("turn {i}: {}", "q".repeat(300)), "openai_compatible");
        let mut first = None;
        loop {
            let v = ws.recv();
            if v["event"] == "delta" && first.is_none() {
                first = Some(sent.elapsed());
            }
            if v["event"] == "error" {
                errors += 1;
                break;
            }
            if v["event"] == "done" {
                break;
            }
        }
        let total = sent.elapsed();
        // The fake's own handling time of this turn's streamed request (it records it just
        // after writing the last byte, so wait a moment for it).
        let deadline = Instant::now() + Duration::from_millis(200);
        let fake_time = loop {
            let t = fake.requests().iter().find(|r| r.is_chat() && r.body["stream"] == true).and_then(|r| r.handled);
            if t.is_some() || Instant::now() >= deadline {
                break t;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        overheads.push(ms(total.saturating_sub(fake_time.unwrap_or_default())));
        if let Some(f) = first {
            firsts.push(ms(f));
        }
        if i % 1000 == 999 {
            samples.push(rss(server.pid).0);
        }
    }
    ws.drop_socket();
    let summaries = common::history_records(&server.home, &chat).iter().filter(|r| r["role"] == "summary").count();
    overheads.sort_by(|a, b| a.total_cmp(b));
    firsts.sort_by(|a, b| a.total_cmp(b));
    SeqResult {
        overhead50: pct(&overheads, 0.5),
        overhead99: pct(&overheads, 0.99),
        first50: pct(&firsts, 0.5),
        rss: samples,
        errors,
        summaries,
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("benches/load.rs: skipped (run `cargo bench --bench load` for the figures)");
        return;
    }
    raise_nofile();
    let bin = env!("CARGO_BIN_EXE_cashcode");
    let size = std::fs::metadata(bin).map(|m| m.len()).unwrap_or(0);

    // Start-up and idle footprint.
    let mut starts = Vec::new();
    let mut idle = Vec::new();
    let mut idle_threads = Vec::new();
    for _ in 0..STARTS {
        let s = TestServer::start();
        starts.push(ms(s.startup));
        std::thread::sleep(Duration::from_millis(300));
        idle.push(rss(s.pid).0 as f64);
        idle_threads.push(threads(s.pid) as f64);
    }

    let fake = FakeLlm::start();
    fake.set_fallback(Reply::text(&ANSWER));
    fake.set_completion_fallback(Reply::completion("The user asked numbered questions; the assistant greeted them."));
    // A short replay window, so "after they leave" can also be read once the rings expired.
    let server = TestServer::builder().env("CASHCODE_REPLAY_TTL", &REPLAY_TTL.as_secs().to_string()).start();
    server.configure_llm(&fake);
    // Warm-up turn.
    let mut w = WsClient::connect(&server);
    let chat = w.chat_id.clone();
    w.message(&chat, "warm up", "openai_compatible");
    w.turn_frames(&chat);
    w.drop_socket();
    std::thread::sleep(Duration::from_millis(500));
    let (rss0, _) = rss(server.pid);
    let threads0 = threads(server.pid);

    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "burst") {
        // 1,000-client bursts one after another: does what stays after one grow with the next?
        // Then the server is held for inspection (/proc/<pid>/smaps).
        let bursts: usize = std::env::var("BENCH_BURSTS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
        for i in 1..=bursts {
            let r = concurrent_run(&server, &fake, 1000);
            std::thread::sleep(Duration::from_millis(1000));
            let (after, hwm) = rss(server.pid);
            std::thread::sleep(RINGS_GONE);
            let (expired, _) = rss(server.pid);
            println!(
                "burst {i}: {} errors; RSS {:.1} -> {:.1} MiB, {:.1} MiB once the rings expired (peak {:.1}); \
                 threads {threads0} -> {}; pid {}",
                r.errors,
                mib(rss0),
                mib(after),
                mib(expired),
                mib(hwm),
                threads(server.pid),
                server.pid
            );
        }
        let hold: u64 = std::env::var("BENCH_HOLD").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        std::thread::sleep(Duration::from_secs(hold));
        return;
    }

    let mut conc = Vec::new();
    for clients in [100usize, 500, 1000] {
        let runs: Vec<ConcResult> = (0..CONC_RUNS).map(|_| concurrent_run(&server, &fake, clients)).collect();
        let after_threads = settle_threads(server.pid, threads0 + 2);
        std::thread::sleep(Duration::from_millis(300));
        let (after_rss, hwm) = rss(server.pid);
        std::thread::sleep(RINGS_GONE);
        let (expired_rss, _) = rss(server.pid);
        conc.push((
            clients,
            median(runs.iter().map(|r| r.turns_per_sec).collect()),
            median(runs.iter().map(|r| r.p50).collect()),
            median(runs.iter().map(|r| r.p99).collect()),
            runs.iter().map(|r| r.errors).sum::<usize>(),
            runs.iter().map(|r| r.peak_threads).max().unwrap_or(0),
            after_threads,
            after_rss,
            expired_rss,
            hwm,
        ));
    }

    let seq = sequential(&server, &fake);
    let after_seq_threads = settle_threads(server.pid, threads0 + 2);
    drop(server);

    // History load.
    let (home, big) = big_history_home();
    let hist_bytes =
        std::fs::metadata(home.join("memory").join(&big).join("history.jsonl")).map(|m| m.len()).unwrap_or(0);
    let mut get_ms = Vec::new();
    let mut first_turn_ms = Vec::new();
    let mut list_ms = Vec::new();
    let mut server = TestServer::builder().home(&home).start();
    server.configure_llm(&fake);
    for _ in 0..3 {
        let t = Instant::now();
        let r = server.get("/api/sessions");
        assert_eq!(r.status, 200);
        list_ms.push(ms(t.elapsed()));
        let t = Instant::now();
        let r = server.get(&format!("/api/sessions/{big}/messages"));
        assert_eq!(r.status, 200, "{}", r.body);
        get_ms.push(ms(t.elapsed()));
        // A cold continuation: attach and one turn on the big chat (loads its context).
        let mut c = WsClient::connect(&server);
        let t = Instant::now();
        c.attach(&big, None);
        c.message(&big, "continue", "openai_compatible");
        let frames = c.turn_frames(&big);
        assert_eq!(frames.last().map(|v| v["event"].clone()), Some(serde_json::json!("done")), "{frames:?}");
        first_turn_ms.push(ms(t.elapsed()));
        c.drop_socket();
        server.restart();
        server.configure_llm(&fake);
    }
    let (hist_rss, _) = rss(server.pid);
    drop(server);
    let _ = std::fs::remove_dir_all(&home);

    let (tool50, tool99) = search::bench_tool_search(200, 1000);
    let skills_home = fresh_home("bench-skills");
    let (skill50, skill99) = search::bench_skill_search(&skills_home, 1000);
    let _ = std::fs::remove_dir_all(&skills_home);

    println!();
    println!("CashCode load benchmark (release binary, fake LLM with zero delay, medians; 2-core machine)");
    println!("{:-<86}", "");
    let row = |k: String, v: String| println!("{k:<60} {v:>25}");
    for (clients, tps, p50, p99, errors, peak, after_threads, after_rss, expired_rss, hwm) in &conc {
        let label = format!("{clients} clients x {CONC_TURNS} turns ({CONC_RUNS} runs)");
        row(format!("{label}: throughput"), format!("{tps:.0} turns/s"));
        row(format!("{label}: latency p50 / p99"), format!("{p50:.1} / {p99:.1} ms"));
        row(format!("{label}: errors (all runs)"), format!("{errors}"));
        row(format!("{label}: threads base -> peak -> after"), format!("{threads0} -> {peak} -> {after_threads}"));
        row(
            format!("{label}: RSS base -> after (peak)"),
            format!("{:.1} -> {:.1} ({:.1}) MiB", mib(rss0), mib(*after_rss), mib(*hwm)),
        );
        row(
            format!("{label}: RSS once replay rings expired ({}s TTL)", REPLAY_TTL.as_secs()),
            format!("{:.1} MiB", mib(*expired_rss)),
        );
    }
    row(
        format!("{SEQ_TURNS} turns in a row, one chat: server overhead p50 / p99"),
        format!("{:.3} / {:.3} ms", seq.overhead50, seq.overhead99),
    );
    row("  time to first delta p50".into(), format!("{:.3} ms", seq.first50));
    row("  errors / summaries written".into(), format!("{} / {}", seq.errors, seq.summaries));
    let samples: Vec<String> = seq.rss.iter().map(|k| format!("{:.1}", mib(*k))).collect();
    row("  RSS every 1,000 turns (MiB)".into(), String::new());
    println!("    {}", samples.join(" "));
    if let (Some(a), Some(b)) = (seq.rss.first(), seq.rss.last()) {
        row("  RSS change turn 1,000 -> 10,000".into(), format!("{:+.1} MiB", mib(*b) - mib(*a)));
    }
    row("  threads after".into(), format!("{after_seq_threads} (base {threads0})"));
    row(format!("history load: {HISTORY_RECORDS} records ({:.1} MiB)", hist_bytes as f64 / 1048576.0), String::new());
    row("  GET /api/sessions".into(), format!("{:.1} ms", median(list_ms)));
    row("  GET /api/sessions/{id}/messages".into(), format!("{:.1} ms", median(get_ms)));
    row("  attach + first turn on a fresh server".into(), format!("{:.1} ms", median(first_turn_ms)));
    row("  RSS after loading it".into(), format!("{:.1} MiB", mib(hist_rss)));
    row(format!("idle RSS after start-up ({STARTS} starts)"), format!("{:.1} MiB", median(idle) / 1024.0));
    row("idle threads".into(), format!("{:.0}", median(idle_threads)));
    row(format!("start-up to both listening lines ({STARTS} starts)"), format!("{:.1} ms", median(starts)));
    row("release binary size".into(), format!("{:.2} MiB", size as f64 / 1048576.0));
    let ms2 = |d: Duration| d.as_secs_f64() * 1000.0;
    row("tool_search over 10,000 tools p50 / p99".into(), format!("{:.3} / {:.3} ms", ms2(tool50), ms2(tool99)));
    row("skill_search over 1,000 skills p50 / p99".into(), format!("{:.3} / {:.3} ms", ms2(skill50), ms2(skill99)));
    println!("{:-<86}", "");
}
