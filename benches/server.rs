//! `cargo bench --bench server`: figures against the fake LLM with zero delay,
//! each a median over several runs. Prints one table:
//! - server overhead per turn (message frame sent -> `done` received, minus the fake's own
//!   handling time for that request), p50/p99 over 200 sequential turns in one chat;
//! - time to the first `delta`;
//! - 100 and 500 concurrent WebSocket clients x 5 turns each: turns/s, p99 latency, errors;
//! - idle RSS, and RSS after the 500-client run (VmRSS / VmHWM from /proc/<pid>/status);
//! - start-up time to both `listening` lines; release binary size.
//!
//! Threads: the main thread drives sequential runs; the concurrent runs use one thread per
//! client; the fake LLM has its own threads.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[path = "shared/bighist.rs"]
mod bighist;

use common::stats::{cpu_ms, median, ms, pct, raise_nofile, rss};
use common::ws::Handshake;
use common::{FakeLlm, Reply, TestServer, WsClient};

const SEQ_TURNS: usize = 200;
const SEQ_RUNS: usize = 5;
const CONC_RUNS: usize = 3;
const CONC_TURNS: usize = 5;
const STARTS: usize = 7;
const ANSWER: [&str; 3] = ["Hello", ", bench", " world"];

/// One sequential run: returns (overheads ms, first-delta ms).
fn sequential_run(server: &TestServer, fake: &FakeLlm) -> (Vec<f64>, Vec<f64>) {
    fake.clear_requests();
    let mut ws = WsClient::connect(server);
    let chat = ws.chat_id.clone();
    // `BENCH_THINKING=1`: each turn streams a recorded DeepSeek thinking answer (606
    // characters of reasoning in 200 chunks, then the text) instead of three text deltas.
    let thinking = std::env::var_os("BENCH_THINKING").is_some();
    for _ in 0..SEQ_TURNS {
        fake.push(if thinking { Reply::recorded("deepseek-reasoning.chunks.txt") } else { Reply::text(&ANSWER) });
    }
    let mut overheads = Vec::with_capacity(SEQ_TURNS);
    let mut firsts = Vec::with_capacity(SEQ_TURNS);
    for i in 0..SEQ_TURNS {
        let sent = Instant::now();
        ws.message(&chat, &format!("turn {i}"), "openai_compatible");
        let mut first = None;
        loop {
            let v = ws.recv();
            if v["event"] == "delta" && first.is_none() {
                first = Some(sent.elapsed());
            }
            if v["event"] == "error" {
                panic!("turn {i} failed: {v}");
            }
            if v["event"] == "done" {
                break;
            }
        }
        let total = sent.elapsed();
        let fake_time = fake.wait_handled(i, Duration::from_secs(10));
        overheads.push(ms(total.saturating_sub(fake_time)));
        firsts.push(ms(first.expect("a delta")));
    }
    ws.drop_socket();
    (overheads, firsts)
}

struct ConcResult {
    turns_per_sec: f64,
    p50: f64,
    p99: f64,
    errors: usize,
}

fn concurrent_run(server: &TestServer, fake: &FakeLlm, clients: usize) -> ConcResult {
    fake.clear_requests();
    for _ in 0..clients * CONC_TURNS {
        fake.push(Reply::text(&ANSWER));
    }
    let port = server.ws_port;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut handles = Vec::with_capacity(clients);
    for _ in 0..clients {
        let barrier = barrier.clone();
        let h = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || -> (Vec<f64>, usize) {
                let mut c = match WsClient::handshake(port, None) {
                    Handshake::Accepted(c) => c,
                    Handshake::Refused(_) => {
                        barrier.wait();
                        return (Vec::new(), CONC_TURNS);
                    }
                };
                let chat = c.chat_id.clone();
                barrier.wait();
                let mut lat = Vec::new();
                let mut errors = 0;
                for i in 0..CONC_TURNS {
                    let sent = Instant::now();
                    c.message(&chat, &format!("load {i}"), "openai_compatible");
                    loop {
                        match c.recv_within(Duration::from_secs(60)) {
                            Some(v) if v["event"] == "done" => {
                                lat.push(ms(sent.elapsed()));
                                break;
                            }
                            Some(v) if v["event"] == "error" => {
                                errors += 1;
                                break;
                            }
                            Some(_) => {}
                            None => return (lat, errors + CONC_TURNS - i),
                        }
                    }
                }
                c.drop_socket();
                (lat, errors)
            })
            .expect("spawn client");
        handles.push(h);
    }
    barrier.wait();
    let start = Instant::now();
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
    let ok = all.len();
    ConcResult {
        turns_per_sec: ok as f64 / wall,
        p50: if ok > 0 { pct(&all, 0.50) } else { f64::NAN },
        p99: if ok > 0 { pct(&all, 0.99) } else { f64::NAN },
        errors,
    }
}

/// `BENCH_ONLY=seq`: only the sequential runs, for profiling the per-turn path (the server's
/// pid is printed so a profiler can attach). `BENCH_RUNS` sets how many.
fn sequential_only() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    println!("server pid {}", server.pid);
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(SEQ_RUNS);
    sequential_run(&server, &fake);
    let (mut p50s, mut early50, mut late50) = (Vec::new(), Vec::new(), Vec::new());
    let cpu_before = cpu_ms(server.pid);
    for _ in 0..runs {
        let (mut o, _) = sequential_run(&server, &fake);
        let mut early = o[..50].to_vec();
        let mut late = o[o.len() - 50..].to_vec();
        early.sort_by(|a, b| a.total_cmp(b));
        late.sort_by(|a, b| a.total_cmp(b));
        o.sort_by(|a, b| a.total_cmp(b));
        early50.push(pct(&early, 0.5));
        late50.push(pct(&late, 0.5));
        p50s.push(pct(&o, 0.5));
    }
    let cpu = (cpu_ms(server.pid) - cpu_before) / (runs * SEQ_TURNS) as f64;
    println!("overhead p50 {:.3} ms (turns 1-50 {:.3}, 151-200 {:.3})", median(p50s), median(early50), median(late50));
    println!("server CPU per turn {cpu:.3} ms");
}

/// `BENCH_ONLY=startup`: only start-up to both `listening` lines, `BENCH_RUNS` starts (default
/// 21) of fresh servers; with `CASHCODE_TEST_BIN` a shell loop alternates two builds.
fn startup_only() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(21);
    let mut starts: Vec<f64> = (0..runs).map(|_| ms(TestServer::start().startup)).collect();
    starts.sort_by(|a, b| a.total_cmp(b));
    let (min, max) = (starts[0], starts[starts.len() - 1]);
    println!("start-up to listening: median {:.1} ms (min {min:.1}, max {max:.1}, {runs} starts)", median(starts));
}

/// `BENCH_ONLY=footprint`: the footprint figures, medians of `BENCH_RUNS` (default 5) rounds:
/// idle RSS after start-up; server CPU per turn in a new chat (each turn opens one) and in the
/// same chat; the 100,000-record chat's first turn after a start (its context loaded) and its
/// second turn, from the message to `done`, context compression off.
fn footprint_only() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    const TURNS: usize = 300;
    let fake = FakeLlm::start();
    let (mut idle, mut new_chat, mut same_chat, mut big_first, mut big_second, mut after_turns) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let s = TestServer::start();
        std::thread::sleep(Duration::from_millis(300));
        idle.push(rss(s.pid).0 as f64 / 1024.0);
        drop(s);

        let server = TestServer::with_llm(&fake);
        let mut ws = WsClient::connect(&server);
        let chat = ws.new_chat();
        fake.push(Reply::text(&ANSWER));
        ws.message(&chat, "warm up", "openai_compatible");
        ws.turn_events(&chat);
        // `BENCH_PERF=<file>`: the new-chat turns under `perf record` (for profiling).
        let perf = std::env::var("BENCH_PERF").ok().map(|out| {
            let p = std::process::Command::new("perf")
                .args(["record", "-F", "4999", "-g", "-o", &out, "-p", &server.pid.to_string()])
                .spawn()
                .expect("perf");
            std::thread::sleep(Duration::from_millis(500));
            p
        });
        let before = cpu_ms(server.pid);
        for i in 0..TURNS {
            let chat = ws.new_chat();
            fake.push(Reply::text(&ANSWER));
            ws.message(&chat, &format!("question {i}"), "openai_compatible");
            ws.turn_events(&chat);
        }
        new_chat.push((cpu_ms(server.pid) - before) / TURNS as f64);
        if let Some(mut p) = perf {
            // SAFETY: signalling the perf child this bench spawned.
            unsafe { libc::kill(p.id() as i32, libc::SIGINT) };
            let _ = p.wait();
        }
        let before = cpu_ms(server.pid);
        for i in 0..TURNS {
            fake.push(Reply::text(&ANSWER));
            ws.message(&chat, &format!("question {i}"), "openai_compatible");
            ws.turn_events(&chat);
        }
        same_chat.push((cpu_ms(server.pid) - before) / TURNS as f64);
        std::thread::sleep(Duration::from_millis(300));
        after_turns.push(rss(server.pid).0 as f64 / 1024.0);
        drop(ws);
        drop(server);

        // The turns themselves: no context compression starting beside them (it would redo a
        // summary of 100,000 records after every turn, the fake answering none), as in
        // `--bench memory`.
        let (home, big) = bighist::big_history_home();
        let server = TestServer::builder().home(&home).env("CASHCODE_CONSOLIDATE_CHARS", "1000000000").start();
        server.configure_llm(&fake);
        // A fresh home has no search index: a search waits for its start-up build (about a
        // second for these records), which would otherwise run beside the turns.
        assert_eq!(server.get("/api/search?q=message").status, 200);
        let mut c = WsClient::connect(&server);
        c.attach(&big, None);
        for times in [&mut big_first, &mut big_second] {
            fake.push(Reply::text(&ANSWER));
            let t = Instant::now();
            c.message(&big, "continue", "openai_compatible");
            c.turn_events(&big);
            times.push(ms(t.elapsed()));
        }
        drop(c);
        drop(server);
        let _ = std::fs::remove_dir_all(&home);
    }
    println!("idle RSS after start-up           {:>8.1} MiB  {idle:.1?}", median(idle.clone()));
    println!(
        "RSS after those {} turns       {:>8.1} MiB  {after_turns:.1?}",
        2 * TURNS + 1,
        median(after_turns.clone())
    );
    println!("server CPU, turn in a new chat    {:>8.3} ms   {new_chat:.3?}", median(new_chat.clone()));
    println!("server CPU, turn in the same chat {:>8.3} ms   {same_chat:.3?}", median(same_chat.clone()));
    println!(
        "{} records: first turn {:>8.1} ms   {big_first:.1?}",
        bighist::HISTORY_RECORDS,
        median(big_first.clone())
    );
    println!(
        "{} records: second turn {:>7.1} ms   {big_second:.1?}",
        bighist::HISTORY_RECORDS,
        median(big_second.clone())
    );
}

/// `BENCH_ONLY=exec`: what an `exec` turn costs over a `read_file` turn of the same small
/// file, through the real server: each turn is a new chat whose model asks for the tool once
/// and then answers (message to `done`, minus the fake's time on both requests),
/// `BENCH_RUNS` (default 100) turns of each kind alternating, with the server at its idle size
/// and again after 500 clients grew its resident set (printed). The command's own run time is
/// `sh -c 'cat small.txt'` spawned and waited for by this process (`posix_spawn`), the same
/// number of times.
fn exec_only() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let dir = server.home.join("workspace");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("small.txt"), "a small file\n").unwrap();
    let mut own = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let out = std::process::Command::new("sh").args(["-c", "cat small.txt"]).current_dir(&dir).output().unwrap();
        own.push(ms(t.elapsed()));
        assert_eq!(out.stdout, b"a small file\n");
    }
    let own = median(own);
    let mut ws = WsClient::connect(&server);
    let turn = |ws: &mut WsClient, tool: &str, args: serde_json::Value| -> f64 {
        let chat = ws.new_chat();
        fake.clear_requests();
        fake.push(Reply::tool_calls(&[common::ToolCallSpec::new("call_1", tool, &[&args.to_string()])]));
        fake.push(Reply::text(&ANSWER));
        let t = Instant::now();
        ws.message(&chat, "read small.txt", "openai_compatible");
        let events = ws.turn_events(&chat);
        let total = t.elapsed();
        let result = events.iter().find(|e| e["event"] == "tool_result").expect("a tool_result");
        assert!(result["result"].as_str().unwrap_or("").contains("a small file"), "{result}");
        let fake_time = fake.wait_handled(0, Duration::from_secs(10)) + fake.wait_handled(1, Duration::from_secs(10));
        ms(total.saturating_sub(fake_time))
    };
    for phase in ["idle", "after 500 clients"] {
        if phase != "idle" {
            concurrent_run(&server, &fake, 500);
            std::thread::sleep(Duration::from_millis(500));
        }
        let (mut exec, mut read) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
        for _ in 0..runs {
            exec.push(turn(&mut ws, "exec", serde_json::json!({"command": "cat small.txt"})));
            read.push(turn(&mut ws, "read_file", serde_json::json!({"path": "small.txt"})));
        }
        let (exec, read) = (median(exec), median(read));
        println!(
            "{phase} (RSS {:.1} MiB): exec turn {exec:.2} ms, read_file turn {read:.2} ms, command alone {own:.2} ms; exec over read_file minus the command {:.2} ms",
            rss(server.pid).0 as f64 / 1024.0,
            exec - read - own
        );
    }
}

/// `BENCH_ONLY=conc`: only the 100- and 500-client runs, with the server CPU per turn of
/// each (for profiling the concurrent path; the server's pid is printed).
fn concurrent_only() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    println!("server pid {}", server.pid);
    sequential_run(&server, &fake);
    for clients in [100usize, 500] {
        let cpu_before = cpu_ms(server.pid);
        let runs: Vec<ConcResult> = (0..CONC_RUNS).map(|_| concurrent_run(&server, &fake, clients)).collect();
        let errors = runs.iter().map(|r| r.errors).sum::<usize>();
        let turns = (CONC_RUNS * clients * CONC_TURNS).saturating_sub(errors).max(1);
        let cpu = (cpu_ms(server.pid) - cpu_before) / turns as f64;
        let tps = median(runs.iter().map(|r| r.turns_per_sec).collect());
        println!("{clients} clients: server CPU per turn {cpu:.3} ms, {tps:.0} turns/s, {errors} errors");
    }
    std::thread::sleep(Duration::from_millis(500));
    let (after, hwm) = rss(server.pid);
    println!("RSS after the 500-client runs {:.1} MiB (peak {:.1} MiB)", after as f64 / 1024.0, hwm as f64 / 1024.0);
}

/// `BENCH_ONLY=connect`: 500 clients at once that connect, read `ready` and leave, three
/// times: the server CPU per connection (what a connection costs before any turn).
fn connect_only() {
    let server = TestServer::start();
    println!("server pid {}", server.pid);
    let port = server.ws_port;
    let clients = 500usize;
    let cpu_before = cpu_ms(server.pid);
    for _ in 0..CONC_RUNS {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                std::thread::Builder::new()
                    .stack_size(512 * 1024)
                    .spawn(move || match WsClient::handshake(port, None) {
                        Handshake::Accepted(c) => c.drop_socket(),
                        Handshake::Refused(code) => panic!("refused with {code}"),
                    })
                    .expect("spawn client")
            })
            .collect();
        for h in handles {
            h.join().expect("client");
        }
    }
    // Let the server's connection threads finish their exits before reading its CPU.
    std::thread::sleep(Duration::from_millis(300));
    let cpu = (cpu_ms(server.pid) - cpu_before) / (CONC_RUNS * clients) as f64;
    println!("server CPU per connection {cpu:.3} ms");
}

/// Size of the stand-in for the client's biggest JS bundle in `BENCH_ONLY=http`.
const BUNDLE: usize = 1024 * 1024;

/// One answer read from `s`: (status line, body length). Reads the head to its blank line and
/// then `Content-Length` bytes or the chunked body.
fn read_answer(s: &mut std::net::TcpStream) -> std::io::Result<(String, usize)> {
    use std::io::Read;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let len = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
        .unwrap_or(0usize);
    let status = head.lines().next().unwrap_or("").to_string();
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut body = vec![0u8; len];
        s.read_exact(&mut body)?;
        return Ok((status, len));
    }
    // tiny_http sends a big body chunked: size line, data, CRLF, until a zero size.
    let mut total = 0;
    loop {
        let mut line = Vec::new();
        while !line.ends_with(b"\r\n") {
            s.read_exact(&mut byte)?;
            line.push(byte[0]);
        }
        let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).unwrap_or(0);
        let mut chunk = vec![0u8; size + 2];
        s.read_exact(&mut chunk)?;
        total += size;
        if size == 0 {
            return Ok((status, total));
        }
    }
}

/// A peer that asks for the bundle `pipelined` times on one connection from `ip` with a tiny
/// receive buffer and never reads.
fn staller(port: u16, ip: std::net::Ipv4Addr, pipelined: usize) -> std::net::TcpStream {
    use socket2::{Domain, Socket, Type};
    use std::io::Write;
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(1024).unwrap();
    sock.bind(&std::net::SocketAddr::from((ip, 0)).into()).unwrap();
    sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into()).unwrap();
    let mut s: std::net::TcpStream = sock.into();
    let one = format!("GET /assets/bundle.js HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    s.write_all(one.repeat(pipelined).as_bytes()).unwrap();
    s
}

/// `BENCH_ONLY=http`: the HTTP fast path and what slow readers cost others. `GET /api/health`
/// over one keep-alive connection (p50/p99 of 500), the whole 1 MiB bundle over one
/// connection (p50 of 50); then `/api/health` on a new connection (median of 3, each waited
/// for at most 30 s) while 8 and 32 peers (127.0.0.2 on) have asked for the bundle 4 times
/// each, pipelined, with a 1 KiB receive buffer, and never read (`BENCH_STALLERS=8,32`).
fn http_only() {
    use std::io::Write;
    use std::net::{Ipv4Addr, TcpStream};
    let dist = common::fresh_home("bench-dist");
    std::fs::create_dir_all(dist.join("assets")).unwrap();
    std::fs::write(dist.join("index.html"), "<!doctype html><title>bench</title>").unwrap();
    std::fs::write(dist.join("assets").join("bundle.js"), "x".repeat(BUNDLE)).unwrap();
    let server = TestServer::builder().env("CASHCODE_CLIENT_DIR", &dist.display().to_string()).start();
    let port = server.http_port;
    println!("server pid {}", server.pid);
    let health = format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let bundle = format!("GET /assets/bundle.js HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let timed = |s: &mut TcpStream, rq: &str| {
        let t = Instant::now();
        s.write_all(rq.as_bytes()).unwrap();
        let (status, len) = read_answer(s).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        (t.elapsed(), len)
    };
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    for _ in 0..50 {
        timed(&mut s, &health);
    }
    let mut lat: Vec<f64> = (0..500).map(|_| timed(&mut s, &health).0.as_secs_f64() * 1e6).collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    println!("GET /api/health keep-alive: p50 {:.0} us, p99 {:.0} us", pct(&lat, 0.5), pct(&lat, 0.99));
    let mut big: Vec<f64> = (0..50)
        .map(|_| {
            let (d, len) = timed(&mut s, &bundle);
            assert_eq!(len, BUNDLE);
            ms(d)
        })
        .collect();
    big.sort_by(|a, b| a.total_cmp(b));
    println!("GET 1 MiB bundle keep-alive: p50 {:.2} ms", pct(&big, 0.5));
    drop(s);
    // `BENCH_STALLERS=` (empty) measures the fast path only.
    let counts = std::env::var("BENCH_STALLERS").unwrap_or_else(|_| "8,32".into());
    for stallers in counts.split(',').filter_map(|n| n.trim().parse::<usize>().ok()) {
        let held: Vec<TcpStream> =
            (0..stallers).map(|i| staller(port, Ipv4Addr::new(127, 0, 0, 2 + (i % 8) as u8), 4)).collect();
        // Let the server take their requests in and start writing.
        std::thread::sleep(Duration::from_millis(500));
        let mut waits = Vec::new();
        for _ in 0..3 {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let t = Instant::now();
            s.write_all(health.as_bytes()).unwrap();
            match read_answer(&mut s) {
                Ok(_) => waits.push(ms(t.elapsed())),
                Err(_) => waits.push(f64::INFINITY),
            }
        }
        println!(
            "GET /api/health while {stallers} peers stall on the bundle: median {:.2} ms, max {:.2} ms (inf: no answer in 30 s)",
            median(waits.clone()),
            waits.iter().cloned().fold(0.0, f64::max)
        );
        drop(held);
        common::wait_for("health after the stallers left", Duration::from_secs(120), || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            s.write_all(health.as_bytes()).ok()?;
            read_answer(&mut s).ok()
        });
    }
    let _ = std::fs::remove_dir_all(dist);
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary too (without
    // it, in a debug build), where minutes of load would only slow the test run down.
    if !std::env::args().any(|a| a == "--bench") {
        println!("benches/server.rs: skipped (run `cargo bench --bench server` for the figures)");
        return;
    }
    raise_nofile();
    match std::env::var("BENCH_ONLY").as_deref() {
        Ok("seq") => return sequential_only(),
        Ok("conc") => return concurrent_only(),
        Ok("connect") => return connect_only(),
        Ok("http") => return http_only(),
        Ok("startup") => return startup_only(),
        Ok("footprint") => return footprint_only(),
        Ok("exec") => return exec_only(),
        _ => {}
    }
    let bin = env!("CARGO_BIN_EXE_cashcode");
    let size = std::fs::metadata(bin).map(|m| m.len()).unwrap_or(0);

    // Start-up.
    let mut starts = Vec::new();
    let mut idle = Vec::new();
    for _ in 0..STARTS {
        let s = TestServer::start();
        starts.push(ms(s.startup));
        std::thread::sleep(Duration::from_millis(300));
        idle.push(rss(s.pid).0 as f64);
    }

    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    std::thread::sleep(Duration::from_millis(300));
    let (idle_configured, _) = rss(server.pid);

    // Warm-up, then sequential runs.
    sequential_run(&server, &fake);
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    let mut first50 = Vec::new();
    let mut first99 = Vec::new();
    // Early vs late turns of a run: how much the growing history (sent every turn) costs.
    let mut early50 = Vec::new();
    let mut late50 = Vec::new();
    let cpu_before = cpu_ms(server.pid);
    for _ in 0..SEQ_RUNS {
        let (mut o, mut f) = sequential_run(&server, &fake);
        let mut early = o[..50].to_vec();
        let mut late = o[o.len() - 50..].to_vec();
        early.sort_by(|a, b| a.total_cmp(b));
        late.sort_by(|a, b| a.total_cmp(b));
        early50.push(pct(&early, 0.5));
        late50.push(pct(&late, 0.5));
        o.sort_by(|a, b| a.total_cmp(b));
        f.sort_by(|a, b| a.total_cmp(b));
        p50s.push(pct(&o, 0.5));
        p99s.push(pct(&o, 0.99));
        first50.push(pct(&f, 0.5));
        first99.push(pct(&f, 0.99));
    }

    // Server CPU time per turn: steadier than wall-clock figures on a shared VM.
    let seq_cpu = (cpu_ms(server.pid) - cpu_before) / (SEQ_RUNS * SEQ_TURNS) as f64;

    let mut conc = Vec::new();
    for clients in [100usize, 500] {
        let cpu_before = cpu_ms(server.pid);
        let runs: Vec<ConcResult> = (0..CONC_RUNS).map(|_| concurrent_run(&server, &fake, clients)).collect();
        let errors = runs.iter().map(|r| r.errors).sum::<usize>();
        let turns = (CONC_RUNS * clients * CONC_TURNS).saturating_sub(errors).max(1);
        conc.push((
            clients,
            median(runs.iter().map(|r| r.turns_per_sec).collect()),
            median(runs.iter().map(|r| r.p50).collect()),
            median(runs.iter().map(|r| r.p99).collect()),
            errors,
            (cpu_ms(server.pid) - cpu_before) / turns as f64,
        ));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (after_rss, hwm) = rss(server.pid);

    println!();
    println!("CashCode server benchmark (release binary, fake LLM with zero delay, medians)");
    println!("{:-<78}", "");
    println!("{:<52} {:>24}", "metric", "value");
    println!("{:-<78}", "");
    println!(
        "{:<52} {:>21.3} ms",
        format!("server overhead per turn p50 ({SEQ_TURNS} seq turns x {SEQ_RUNS})"),
        median(p50s)
    );
    println!("{:<52} {:>21.3} ms", "server overhead per turn p99", median(p99s));
    println!("{:<52} {:>21.3} ms", "  overhead p50 of turns 1-50 (short history)", median(early50));
    println!("{:<52} {:>21.3} ms", "  overhead p50 of turns 151-200 (long history)", median(late50));
    println!("{:<52} {:>21.3} ms", "time to first delta p50", median(first50));
    println!("{:<52} {:>21.3} ms", "time to first delta p99", median(first99));
    println!("{:<52} {:>21.3} ms", "server CPU per turn (sequential)", seq_cpu);
    for (clients, tps, p50, p99, errors, cpu) in &conc {
        let label = format!("{clients} clients x {CONC_TURNS} turns ({CONC_RUNS} runs)");
        println!("{:<52} {:>19.0} t/s", format!("{label}: throughput"), tps);
        println!("{:<52} {:>21.2} ms", format!("{label}: latency p50"), p50);
        println!("{:<52} {:>21.2} ms", format!("{label}: latency p99"), p99);
        println!("{:<52} {:>24}", format!("{label}: errors (all runs)"), errors);
        println!("{:<52} {:>21.3} ms", format!("{label}: server CPU per turn"), cpu);
    }
    println!("{:<52} {:>20.1} MiB", "idle RSS after start-up", median(idle) / 1024.0);
    println!("{:<52} {:>20.1} MiB", "idle RSS with LLM configured", idle_configured as f64 / 1024.0);
    println!("{:<52} {:>20.1} MiB", "RSS after the 500-client runs", after_rss as f64 / 1024.0);
    println!("{:<52} {:>20.1} MiB", "peak RSS (VmHWM)", hwm as f64 / 1024.0);
    println!("{:<52} {:>21.1} ms", format!("start-up to listening ({STARTS} starts)"), median(starts));
    println!("{:<52} {:>20.2} MiB", "release binary size", size as f64 / 1024.0 / 1024.0);
    println!("{:-<78}", "");
    println!("targets: p50 overhead < 1 ms, 500 clients with 0 errors, idle RSS < 10 MiB, start-up < 50 ms");
}
