//! Hostile-input proof (the trust boundary, SECURITY.md): a table of inputs a model, a foreign
//! web page, an MCP server or a network peer can produce, each driven through the real server
//! binary. Every row asserts that
//!  (a) the operation ends within the row's own named bound (generous for a loaded 2-core CI
//!      box, far below how the unbounded code fails: a crash, a minute, >15 s, unbounded RSS),
//!  (b) the server process is still alive afterwards and a follow-up ordinary turn works,
//!  (c) `GET /api/health`, probed every 25 ms on fresh connections while the row runs, answers
//!      with a median under 100 ms and a maximum under 500 ms.
//! Each row prints a `hostile-row` line with its time and probe figures:
//! `cargo test --test all suite::hostile -- --nocapture 2>&1 | grep hostile-row`.
//!
//! Threads: the test thread drives the row; a prober thread per row; the local web page and
//! MCP peers serve on their own threads; raw HTTP bodies are written from a helper thread
//! while the test thread reads the answer.

use std::io::{Cursor, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::protocol::frame::coding::{Data, OpCode};
use tungstenite::protocol::frame::Frame;
use tungstenite::{Message, WebSocket};

use crate::common::ws::Trickler;
use crate::common::*;

// ---------------------------------------------------------------------------------------------
// Per-row bounds (debug builds on a shared 2-core box; what the unbounded code does instead).

/// grep with 2,000- or 100,000-deep group nesting (unbounded: the parser overflows the stack
/// and the whole server aborts).
const GREP_NESTING: Duration = Duration::from_secs(10);
/// grep with catastrophic patterns over long lines (one line's step budget suffices today).
const GREP_BACKTRACKING: Duration = Duration::from_secs(10);
/// grep over 1,000 lines that each stay just under the per-line budget (unbounded per call:
/// about 250 ms a line, four minutes in all).
const GREP_PER_CALL: Duration = Duration::from_secs(10);
/// glob / grep `file_pattern` of `**/*` ×10 over 33 levels (unbounded backtracking over the
/// splits of a path: 10 s for one 33-level path at ×8, minutes for the tree at ×10).
const GLOB_REPEATED_STARS: Duration = Duration::from_secs(10);
/// web_fetch text extraction of 800 KB–1 MiB of markup (unbounded: >15 s for `<!--`, then the
/// tool's own 15 s timeout ends it).
const WEB_MARKUP: Duration = Duration::from_secs(8);
/// A skill ZIP refused: bombs, entry counts, paths (unbounded: a 30,000-deep member path is
/// extracted before its depth is checked, and removing it recurses until the `http-slow`
/// thread's stack overflows and the server aborts).
const ZIP_IMPORT: Duration = Duration::from_secs(10);
/// SKILL.md frontmatter refused (unbounded: 39,000-deep flow nesting, 78 KB, costs libyaml
/// 8.5 s in a release build before serde_yaml's depth limit ever applies).
const YAML_FRONTMATTER: Duration = Duration::from_secs(5);
/// A JSON body refused.
const JSON_BODY: Duration = Duration::from_secs(5);
/// WebSocket frame rows (unbounded: a 100,000-deep `message` frame overflows the 128 KiB
/// `ws-client` stack inside serde_json in a debug build and the server aborts).
const WS_FRAMES: Duration = Duration::from_secs(10);
/// 10,000 frames, of which the ~100 the per-chat queue admits run real turns.
const WS_FLOOD: Duration = Duration::from_secs(20);
/// WebSocket handshakes that never finish (unbounded: each held a client slot for as long as
/// it sent a byte every 10 s; 40 of them locked the owner out with 1013 for an hour). The
/// handshake deadline is 5 s (`ws::admit::HANDSHAKE_DEADLINE`).
const WS_HANDSHAKE: Duration = Duration::from_secs(10);
/// MCP connect or call against a hostile peer (here: connect 5 s, requests and calls 3 s).
const MCP_REPLY: Duration = Duration::from_secs(10);
/// Header flood until the server cuts it (unbounded: reads all 300 MiB into memory).
const HEADER_FLOOD: Duration = Duration::from_secs(10);
/// Ambiguous body framing refused from the head (lenient: the first `Content-Length` won, or
/// the body was read as the next request).
const FRAMING: Duration = Duration::from_secs(10);

/// A page framing the client, an answer sniffed as another type, a `.env` planted where the
/// server starts (unbounded: no headers at all; the `.env` widened the origins and opened
/// `web_fetch` to private addresses).
const SETTINGS_AND_HEADERS: Duration = Duration::from_secs(10);

/// Probe pacing: ~40 probes a second is enough to see a stall without loading the box.
const PROBE_EVERY: Duration = Duration::from_millis(25);
/// A probe that has no answer by then counts as a failure.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The median bound is the contract ("health answers in under 100 ms while hostile work runs").
const PROBE_MEDIAN: Duration = Duration::from_millis(100);
/// The maximum is looser: CI's 2 cores are shared by the hostile work, the other tests of this
/// binary and other jobs, so a single probe can wait for a time slice.
const PROBE_MAX: Duration = Duration::from_millis(500);
/// Most RSS a hostile peer may add to the server on the memory rows.
const RSS_GROWTH: u64 = 32 << 20;

const MIB: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// The row runner: a server with the fake model, the health prober, and the checks after.

/// Health probe figures of one row.
struct Probes {
    n: usize,
    median: Duration,
    max: Duration,
    failures: Vec<String>,
}

/// Probes `GET /api/health` on a fresh connection every [`PROBE_EVERY`] until stopped (and at
/// least three times, so even an instant row has figures).
struct Prober {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Vec<Duration>, Vec<String>)>,
}

impl Prober {
    fn start(port: u16) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let (mut ok, mut failed) = (Vec::new(), Vec::new());
            loop {
                match probe_once(port) {
                    Ok(d) => ok.push(d),
                    Err(e) => failed.push(e),
                }
                if flag.load(Ordering::SeqCst) && ok.len() + failed.len() >= 3 {
                    return (ok, failed);
                }
                // Pacing between probes, not synchronisation.
                std::thread::sleep(PROBE_EVERY);
            }
        });
        Prober { stop, handle }
    }

    fn finish(self) -> Probes {
        self.stop.store(true, Ordering::SeqCst);
        let (mut ok, failures) = self.handle.join().expect("prober thread");
        ok.sort();
        let median = ok.get(ok.len() / 2).copied().unwrap_or(Duration::MAX);
        let max = ok.last().copied().unwrap_or(Duration::MAX);
        Probes { n: ok.len() + failures.len(), median, max, failures }
    }
}

/// One `GET /api/health` with `Connection: close`; the time until the whole answer was read.
fn probe_once(port: u16) -> Result<Duration, String> {
    let started = Instant::now();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    write!(s, "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut got = Vec::new();
    s.read_to_end(&mut got).map_err(|e| format!("read after {:?}: {e}", started.elapsed()))?;
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&got);
    if text.starts_with("HTTP/1.1 200") && text.contains(r#""status":"ok""#) {
        Ok(took)
    } else {
        Err(format!("unexpected answer {:?}", text.chars().take(120).collect::<String>()))
    }
}

/// A probe figure, `-` when no probe answered.
fn shown(d: Duration) -> String {
    if d == Duration::MAX {
        "-".into()
    } else {
        format!("{d:.3?}")
    }
}

/// `VmRSS` or `VmHWM` (peak) of a process, in bytes.
fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn rss(pid: u32) -> u64 {
    proc_status_bytes(pid, "VmRSS")
}

fn peak_rss(pid: u32) -> u64 {
    proc_status_bytes(pid, "VmHWM")
}

fn head(s: &str) -> String {
    let mut h: String = s.chars().take(300).collect();
    if h.len() < s.len() {
        h.push_str(&format!("… ({} chars)", s.chars().count()));
    }
    h
}

/// A row: its name and bound, a server whose model is the scripted fake.
struct Row {
    name: &'static str,
    bound: Duration,
    server: TestServer,
    fake: FakeLlm,
}

impl Row {
    fn new(name: &'static str, bound: Duration) -> Row {
        Row::with_env(name, bound, &[])
    }

    fn with_env(name: &'static str, bound: Duration, env: &[(&str, &str)]) -> Row {
        Row::in_home(name, bound, &fresh_home("hostile"), env)
    }

    /// A row whose server starts in `home` (its working directory), prepared beforehand.
    fn in_home(name: &'static str, bound: Duration, home: &std::path::Path, env: &[(&str, &str)]) -> Row {
        let fake = FakeLlm::start();
        // The rows feed hostile tool arguments (a 200,000-character pattern among them) back
        // to the model; the context budget is tested in `long_chats`, not here.
        let mut b = TestServer::builder().home(home).env("CASHCODE_CONTEXT_BUDGET_CHARS", "4000000");
        for (k, v) in env {
            b = b.env(k, v);
        }
        let server = b.start();
        server.configure_llm(&fake);
        Row { name, bound, server, fake }
    }

    /// The tools' working directory (created).
    fn workspace(&self) -> PathBuf {
        let ws = self.server.home.join("workspace");
        std::fs::create_dir_all(&ws).expect("workspace");
        ws
    }

    /// Runs `attack` (which must give up by the deadline it is handed) while probing health,
    /// prints the row's figures, then asserts liveness, the bound, the probes, and that an
    /// ordinary turn still works. Returns the attack's outcome for the row's own checks.
    #[track_caller]
    fn run<T>(&mut self, attack: impl FnOnce(&Row, Deadline) -> Result<T, String>) -> T {
        let prober = Prober::start(self.server.http_port);
        let started = Instant::now();
        let outcome = attack(self, Deadline::after(self.bound));
        let took = started.elapsed();
        let probes = prober.finish();
        println!(
            "hostile-row {:<52} took {:>9.3?} (bound {:>3?})  /api/health probes n={:<4} median={:>9} max={:>9}{}",
            self.name,
            took,
            self.bound,
            probes.n,
            shown(probes.median),
            shown(probes.max),
            if probes.failures.is_empty() { String::new() } else { format!(" failed={}", probes.failures.len()) }
        );
        let (name, bound) = (self.name, self.bound);
        if !self.server.alive() {
            let err = self.server.stderr_text();
            let tail: String = err.chars().rev().take(1500).collect::<Vec<_>>().into_iter().rev().collect();
            panic!("{name}: the server process died during the row (after {took:?}); stderr tail:\n{tail}");
        }
        let value = outcome.unwrap_or_else(|e| panic!("{name}: {e} (after {took:?}, bound {bound:?})"));
        assert!(took <= bound, "{name}: took {took:?}, more than its bound {bound:?}");
        assert!(probes.failures.is_empty(), "{name}: health probes failed: {:?}", probes.failures);
        assert!(probes.median < PROBE_MEDIAN, "{name}: median health probe {:?} ≥ {PROBE_MEDIAN:?}", probes.median);
        assert!(probes.max < PROBE_MAX, "{name}: slowest health probe {:?} ≥ {PROBE_MAX:?}", probes.max);
        self.serves_normally();
        value
    }

    /// Prints a row-specific figure next to the row's line.
    fn note(&self, text: &str) {
        println!("hostile-row {:<52} {text}", self.name);
    }

    /// The follow-up: health answers and a fresh chat gets a streamed answer.
    #[track_caller]
    fn serves_normally(&self) {
        self.server.get("/api/health").expect(200, json!({"status":"ok","service":"cashcode"}));
        let mut ws = WsClient::connect(&self.server);
        let chat = ws.new_chat();
        self.fake.push(Reply::text(&["still ", "here"]));
        ws.message(&chat, "are you there?", "openai_compatible");
        let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
        assert_eq!(
            masked,
            plain_answer(&chat, Some("are you there?"), &["still ", "here"]),
            "{}: the follow-up turn",
            self.name
        );
    }
}

/// Has the model call `tool` with `args` in a fresh chat; waits until `deadline` for the
/// `tool_result` and returns the whole text the model got back.
fn tool_call(row: &Row, tool: &str, args: &Value, deadline: Deadline) -> Result<String, String> {
    Ok(tool_calls(row, &[(tool, args.clone())], deadline)?.remove(0))
}

/// Has the model make `steps` one after the other (one tool call per model reply), then answer
/// "done"; waits until `deadline` for every `tool_result` and returns the texts the model got.
fn tool_calls(row: &Row, steps: &[(&str, Value)], deadline: Deadline) -> Result<Vec<String>, String> {
    let mut ws = WsClient::connect(&row.server);
    let chat = ws.new_chat();
    let before = row.fake.chat_requests().len();
    for (i, (tool, args)) in steps.iter().enumerate() {
        let call = ToolCallSpec::new(&format!("call_hostile_{i}"), tool, &[&args.to_string()]);
        row.fake.push(Reply::tool_calls(&[call]));
    }
    row.fake.push(Reply::text(&["done"]));
    ws.message(&chat, "please run the tools", "openai_compatible");
    let mut results = 0;
    while results < steps.len() {
        if deadline.passed() {
            return Err(format!("no {} tool_result within the bound", steps[results].0));
        }
        match ws.recv_or_closed(deadline.remaining().min(Duration::from_millis(200))) {
            Ok(Some(v)) if v["chat_id"] == chat.as_str() && v["event"] == "tool_result" => results += 1,
            Ok(Some(v)) if v["chat_id"] == chat.as_str() && v["event"] == "error" => {
                return Err(format!("the turn failed instead: {v}"))
            }
            Ok(_) => {}
            Err(e) => return Err(format!("the WebSocket broke ({e}) while {} ran", steps[results].0)),
        }
    }
    let end = ws.turn_events(&chat);
    assert_eq!(end.last().map(|e| e["event"].clone()), Some(json!("done")), "{end:?}");
    let reqs = row.fake.wait_chat_requests(before + steps.len() + 1, WAIT);
    let texts = (0..steps.len())
        .map(|i| {
            let msgs = req_messages(&reqs[before + i + 1].body);
            let last = msgs.last().expect("the tool message");
            let id = format!("call_hostile_{i}");
            assert_eq!((&last["role"], &last["tool_call_id"]), (&json!("tool"), &json!(id)));
            last["content"].as_str().expect("tool content").to_string()
        })
        .collect();
    Ok(texts)
}

/// A clean refusal or failure the model can read (a panic inside a tool is not clean).
#[track_caller]
fn assert_clean_error(text: &str) {
    assert!(text.starts_with("Error: ") && !text.contains("unexpectedly"), "not a clean tool error: {}", head(text));
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP: exact bytes, bodies written while the answer is read, everything under a deadline.

/// What a raw exchange ended with.
#[derive(Debug)]
enum Answer {
    /// A status and body (the connection then closed).
    Http(u16, String),
    /// The server closed or reset the connection without a full answer.
    Closed(String),
}

impl Answer {
    #[track_caller]
    fn json(&self) -> (u16, Value) {
        match self {
            Answer::Http(s, b) => {
                (*s, serde_json::from_str(b).unwrap_or_else(|e| panic!("{s} body not JSON ({e}): {b:?}")))
            }
            Answer::Closed(why) => panic!("no answer: the connection closed ({why})"),
        }
    }
}

/// Sends `head` (which must ask for `Connection: close`) and `body` on a fresh connection to
/// `port`, the body from a helper thread so a server that answers early is seen at once.
/// `Err` only when the deadline passes without an answer or a close.
fn raw_http(port: u16, head: String, body: Vec<u8>, deadline: Deadline) -> Result<Answer, String> {
    let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
    let mut w = s.try_clone().expect("clone socket");
    w.set_write_timeout(Some(Duration::from_secs(10))).expect("write timeout");
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(head.as_bytes()).and_then(|_| w.write_all(&body)).and_then(|_| w.flush());
    });
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut r = &s;
    let ended = loop {
        match r.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if is_complete(&got) {
                    break None;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => break Some(e.to_string()),
        }
        if deadline.passed() {
            let _ = s.shutdown(Shutdown::Both);
            let _ = writer.join();
            return Err(format!("no answer and no close within the bound ({} bytes read)", got.len()));
        }
    };
    let _ = s.shutdown(Shutdown::Both);
    let _ = writer.join();
    let text = String::from_utf8_lossy(&got).to_string();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Ok(Answer::Closed(ended.unwrap_or_else(|| format!("EOF after {} bytes", got.len()))));
    };
    let status = head.split(' ').nth(1).and_then(|c| c.parse::<u16>().ok());
    match status {
        Some(code) => Ok(Answer::Http(code, body.to_string())),
        None => Ok(Answer::Closed(format!("garbled answer {:?}", head.chars().take(80).collect::<String>()))),
    }
}

/// Whether `got` holds a whole response with a `Content-Length` (a server that answers need
/// not close the connection at once).
fn is_complete(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let len = head.split("\r\n").find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
    });
    len.is_some_and(|n| body.len() >= n)
}

fn json_head(method: &str, path: &str, port: u16, len: usize) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {len}\r\nConnection: close\r\n\r\n"
    )
}

fn nested_json(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

// ---------------------------------------------------------------------------------------------
// grep

fn nested_group(depth: usize) -> String {
    format!("{}a{}", "(".repeat(depth), ")".repeat(depth))
}

#[test]
fn grep_with_100000_nested_groups_is_a_clean_error() {
    let mut row = Row::new("grep: 100,000 nested groups", GREP_NESTING);
    std::fs::write(row.workspace().join("nest.txt"), "a\n").expect("file");
    let pattern = nested_group(100_000);
    let text = row.run(|row, deadline| tool_call(row, "grep", &json!({"pattern": pattern}), deadline));
    assert_clean_error(&text);
}

#[test]
fn grep_with_2000_nested_groups_is_a_clean_error_or_the_match() {
    let mut row = Row::new("grep: 2,000 nested groups", GREP_NESTING);
    std::fs::write(row.workspace().join("nest.txt"), "a\n").expect("file");
    let pattern = nested_group(2_000);
    let text = row.run(|row, deadline| tool_call(row, "grep", &json!({"pattern": pattern}), deadline));
    if text != format!("Matched `{pattern}` (1):\n\nnest.txt:1: a") {
        assert_clean_error(&text);
    }
}

/// One catastrophic pattern over 1,000 lines of 4,000 characters that almost match.
fn backtracking_row(name: &'static str, pattern: &str, line: &str) {
    let mut row = Row::new(name, GREP_BACKTRACKING);
    let text: String = (0..1000).map(|_| format!("{line}\n")).collect();
    std::fs::write(row.workspace().join("long.txt"), text).expect("file");
    let out = row.run(|row, deadline| tool_call(row, "grep", &json!({"pattern": pattern}), deadline));
    // No match, possibly with a note that lines too long for a backtracking search were skipped.
    if !out.starts_with(&format!("No content matches `{pattern}`")) {
        assert_clean_error(&out);
    }
}

#[test]
fn grep_nested_plus_over_long_lines_ends() {
    backtracking_row("grep: (a+)+$ over 1,000 long lines", "(a+)+$", &format!("{}!", "a".repeat(4000)));
}

#[test]
fn grep_overlapping_plus_over_long_lines_ends() {
    // The leading `y` defeats the required-literal pre-check, so every line is searched.
    backtracking_row("grep: (x+x+)+y over 1,000 long lines", "(x+x+)+y", &format!("y{}", "x".repeat(4000)));
}

#[test]
fn grep_alternation_with_a_backreference_over_long_lines_ends() {
    backtracking_row("grep: (a|aa)+\\1b over 1,000 long lines", r"(a|aa)+\1b", &format!("b{}", "a".repeat(4000)));
}

#[test]
fn grep_has_a_budget_per_call_not_only_per_line() {
    // 22 a's cost ~250 ms each in a debug build, just under one line's step budget: without a
    // budget for the whole call, 1,000 such lines take four minutes.
    let mut row = Row::new("grep: (a|aa)+\\1b over 1,000 lines under the line budget", GREP_PER_CALL);
    let text: String = (0..1000).map(|_| format!("b{}\n", "a".repeat(22))).collect();
    std::fs::write(row.workspace().join("many.txt"), text).expect("file");
    let pattern = r"(a|aa)+\1b";
    let out = row.run(|row, deadline| tool_call(row, "grep", &json!({"pattern": pattern}), deadline));
    // No match, possibly with a note that lines too long for a backtracking search were skipped.
    if !out.starts_with(&format!("No content matches `{pattern}`")) {
        assert_clean_error(&out);
    }
}

// ---------------------------------------------------------------------------------------------
// glob

/// `d/d/…/d` 33 levels deep with a `f.txt` holding "needle" at every level.
fn deep_tree(row: &Row) {
    let mut dir = row.workspace();
    for _ in 0..33 {
        dir = dir.join("d");
        std::fs::create_dir_all(&dir).expect("level");
        std::fs::write(dir.join("f.txt"), "needle\n").expect("file");
    }
}

/// `**/*` ten times, then `*.rs`: no entry of the tree matches, and a matcher that backtracks
/// over every split of a path among the ten `**` tries C(34, 11) of them per entry.
fn repeated_stars() -> String {
    format!("{}/*.rs", ["**/*"; 10].join("/"))
}

#[test]
fn glob_of_repeated_double_stars_matching_every_deep_entry_ends() {
    let mut row = Row::new("glob: **/* x10 over 33 levels (deep entries match)", GLOB_REPEATED_STARS);
    deep_tree(&row);
    let pattern = ["**/*"; 10].join("/");
    let out = row.run(|row, deadline| tool_call(row, "glob", &json!({"pattern": pattern}), deadline));
    // Ten components or more: directories at depth 10..=33 and files at depth 10..=34.
    if out.starts_with("Matched") {
        assert!(out.starts_with(&format!("Matched `{pattern}` (49):\n")), "{}", head(&out));
        assert_eq!(out.lines().filter(|l| l.starts_with("  d/")).count(), 49, "{}", head(&out));
    } else {
        assert_clean_error(&out);
    }
}

#[test]
fn glob_of_repeated_double_stars_over_a_deep_tree_ends() {
    let mut row = Row::new("glob: **/* x10 then *.rs over 33 levels", GLOB_REPEATED_STARS);
    deep_tree(&row);
    let pattern = repeated_stars();
    let out = row.run(|row, deadline| tool_call(row, "glob", &json!({"pattern": pattern}), deadline));
    if out != format!("No files match `{pattern}`") {
        assert_clean_error(&out);
    }
}

#[test]
fn grep_with_repeated_double_stars_as_file_pattern_ends() {
    let mut row = Row::new("grep: file_pattern **/* x10 then *.rs over 33 levels", GLOB_REPEATED_STARS);
    deep_tree(&row);
    let args = json!({"pattern": "needle", "file_pattern": repeated_stars()});
    let out = row.run(|row, deadline| tool_call(row, "grep", &args, deadline));
    if out != "No content matches `needle`" {
        assert_clean_error(&out);
    }
}

// ---------------------------------------------------------------------------------------------
// web_fetch of a hostile page

fn web_markup_row(name: &'static str, body: String) {
    let (url, _stop) = static_http(body, "text/html; charset=utf-8");
    // web_fetch refuses private addresses by default; the local page needs the opt-in.
    let mut row = Row::with_env(name, WEB_MARKUP, &[("CASHCODE_WEB_FETCH_ALLOW_PRIVATE", "1")]);
    let out = row.run(|row, deadline| tool_call(row, "web_fetch", &json!({"url": url}), deadline));
    assert!(out.starts_with(&format!("[From {url}]\n\n")), "{}", head(&out));
}

#[test]
fn web_fetch_of_800kb_of_unclosed_comments_ends() {
    web_markup_row("web_fetch: 800 KB of unclosed <!--", "<!--".repeat(200_000));
}

#[test]
fn web_fetch_of_1mib_of_lone_angle_brackets_ends() {
    web_markup_row("web_fetch: 1 MiB of <", "<".repeat(MIB));
}

#[test]
fn web_fetch_of_1mib_of_unclosed_script_tags_ends() {
    web_markup_row("web_fetch: 1 MiB of <script>", "<script>".repeat(MIB / 8));
}

// ---------------------------------------------------------------------------------------------
// Skill ZIP import

const BOUNDARY: &str = "----cashcode-hostile-5f1c9e";

fn multipart(zip: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"hostile.zip\"\r\n\
         Content-Type: application/zip\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(zip);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// `POST /api/skills/import` with `zip` as the file part.
fn import_zip(row: &Row, zip: &[u8], deadline: Deadline) -> Result<Answer, String> {
    let body = multipart(zip);
    let head = format!(
        "POST /api/skills/import HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: multipart/form-data; \
         boundary={BOUNDARY}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        row.server.http_port,
        body.len()
    );
    raw_http(row.server.http_port, head, body, deadline)
}

fn skill_md(name: &str, extra: &str) -> String {
    format!("---\nname: {name}\ndescription: A hostile test skill\n{extra}---\n\n# {name}\n\nSteps.\n")
}

/// An archive built by the zip crate: (name, bytes) members, deflated.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in entries {
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        w.start_file(name.to_string(), opts).expect("start member");
        w.write_all(data).expect("member bytes");
    }
    w.finish().expect("finish zip").into_inner()
}

/// The user Skill root holds nothing (no package, no temp dir) after a refused import.
#[track_caller]
fn user_root_is_empty(row: &Row) {
    let root = row.server.home.join("data/skills/user");
    let left: Vec<String> = std::fs::read_dir(&root)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a refused import left {left:?} in {}", root.display());
}

#[track_caller]
fn refused(answer: &Answer, details: &[&str]) -> String {
    let (status, v) = answer.json();
    let detail = v["detail"].as_str().unwrap_or_default().to_string();
    assert_eq!(status, 422, "{v}");
    assert!(details.iter().any(|d| detail == *d), "detail {detail:?} is none of {details:?}");
    detail
}

/// A bitwise CRC-32 (small members only).
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// CRC-32 of `n` zero bytes without touching them: the register update for a zero byte is
/// linear, so it is applied `n` times by squaring its GF(2) matrix (zlib's `crc32_combine`).
fn crc32_of_zeros(n: u64) -> u32 {
    fn times(mat: &[u32; 32], mut vec: u32) -> u32 {
        let (mut sum, mut i) = (0u32, 0);
        while vec != 0 {
            if vec & 1 != 0 {
                sum ^= mat[i];
            }
            vec >>= 1;
            i += 1;
        }
        sum
    }
    fn square(mat: &[u32; 32]) -> [u32; 32] {
        let mut out = [0u32; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = times(mat, mat[i]);
        }
        out
    }
    // One zero bit: shift right, fold in the polynomial when the low bit falls out.
    let mut op = [0u32; 32];
    op[0] = 0xEDB8_8320;
    for (i, o) in op.iter_mut().enumerate().skip(1) {
        *o = 1 << (i - 1);
    }
    for _ in 0..3 {
        op = square(&op); // 2, 4, 8 bits: one zero byte
    }
    let (mut reg, mut n) = (!0u32, n);
    while n != 0 {
        if n & 1 != 0 {
            reg = times(&op, reg);
        }
        n >>= 1;
        if n != 0 {
            op = square(&op);
        }
    }
    !reg
}

/// LSB-first bit writer for a DEFLATE stream.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    len: u32,
}

impl Bits {
    fn put(&mut self, v: u64, n: u32) {
        self.acc |= v << self.len;
        self.len += n;
        while self.len >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.len -= 8;
        }
    }
    /// A Huffman code, most significant bit first.
    fn code(&mut self, code: u64, n: u32) {
        let rev = (0..n).fold(0u64, |r, i| r | (((code >> i) & 1) << (n - 1 - i)));
        self.put(rev, n);
    }
}

/// A raw DEFLATE stream of `n` zero bytes: one dynamic-Huffman block whose only codes are
/// literal 0 (`10`), end-of-block (`11`), length 258 (`0`) and distance 1 (`0`), so each 258
/// bytes cost two bits (about 1,032:1: 1 GiB is 1 MiB).
fn deflate_zeros(n: u64) -> Vec<u8> {
    let mut b = Bits { out: Vec::with_capacity((n / 1032 + 64) as usize), acc: 0, len: 0 };
    b.put(1, 1); // BFINAL
    b.put(2, 2); // dynamic Huffman
    b.put(29, 5); // HLIT: 286 literal/length codes
    b.put(1, 5); // HDIST: 2 distance codes
    b.put(14, 4); // HCLEN: 18 code-length codes
                  // Code-length code lengths in the RFC 1951 order 16,17,18,0,8,7,9,6,10,5,11,4,12,3,13,2,14,1:
                  // symbol 18 (zero runs) gets 1 bit, symbols 1 and 2 get 2 bits.
    for len in [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2] {
        b.put(len, 3);
    }
    // Canonical codes: 18 -> 0, 1 -> 10, 2 -> 11.
    let (cl1, cl2) = (|b: &mut Bits| b.code(0b10, 2), |b: &mut Bits| b.code(0b11, 2));
    let zeros = |b: &mut Bits, run: u64| {
        b.code(0, 1);
        b.put(run - 11, 7);
    };
    cl2(&mut b); // literal 0: 2 bits
    zeros(&mut b, 138); // literals 1..=138
    zeros(&mut b, 117); // literals 139..=255
    cl2(&mut b); // 256 (end of block): 2 bits
    zeros(&mut b, 28); // lengths 257..=284 unused
    cl1(&mut b); // 285 (length 258): 1 bit
    cl1(&mut b); // distance code 0 (distance 1): 1 bit
    cl1(&mut b); // distance code 1 (unused, completes the tree)
                 // Literal/length codes: 285 -> 0, literal 0 -> 10, 256 -> 11; distance 0 -> 0.
    b.code(0b10, 2);
    let matches = (n - 1) / 258;
    let mut bits = matches * 2;
    while bits > 0 {
        let k = bits.min(32);
        b.put(0, k as u32);
        bits -= k;
    }
    for _ in 0..(n - 1 - matches * 258) {
        b.code(0b10, 2);
    }
    b.code(0b11, 2);
    if b.len > 0 {
        b.out.push(b.acc as u8);
    }
    b.out
}

/// A member for [`zip_raw`]: name, method (0 stored, 8 deflated), CRC, data as stored,
/// declared uncompressed size.
struct RawMember<'a> {
    name: &'a str,
    method: u16,
    crc: u32,
    data: &'a [u8],
    size: u32,
}

/// A hand-built archive (local headers, central directory, end record), so a member's declared
/// size can be anything.
fn zip_raw(members: &[RawMember<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for m in members {
        let offset = out.len() as u32;
        let fixed = |sig: u32, buf: &mut Vec<u8>| {
            buf.extend_from_slice(&sig.to_le_bytes());
            if sig == 0x0201_4b50 {
                buf.extend_from_slice(&0x031eu16.to_le_bytes()); // made by: Unix
            }
            buf.extend_from_slice(&20u16.to_le_bytes()); // version needed
            buf.extend_from_slice(&0u16.to_le_bytes()); // flags
            buf.extend_from_slice(&m.method.to_le_bytes());
            buf.extend_from_slice(&0u16.to_le_bytes()); // time
            buf.extend_from_slice(&0x21u16.to_le_bytes()); // date 1980-01-01
            buf.extend_from_slice(&m.crc.to_le_bytes());
            buf.extend_from_slice(&(m.data.len() as u32).to_le_bytes());
            buf.extend_from_slice(&m.size.to_le_bytes());
            buf.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
            buf.extend_from_slice(&0u16.to_le_bytes()); // extra length
        };
        fixed(0x0403_4b50, &mut out);
        out.extend_from_slice(m.name.as_bytes());
        out.extend_from_slice(m.data);
        fixed(0x0201_4b50, &mut central);
        central.extend_from_slice(&0u16.to_le_bytes()); // comment length
        central.extend_from_slice(&0u16.to_le_bytes()); // disk
        central.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        central.extend_from_slice(&((0o100_644u32) << 16).to_le_bytes()); // regular file
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(m.name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// A valid package whose `assets/bomb.bin` inflates to 1 GiB of zeros, declared as `declared`.
fn zip_bomb(declared: u32) -> Vec<u8> {
    const GIB: u64 = 1 << 30;
    let md = skill_md("bomb", "");
    let bomb = deflate_zeros(GIB);
    let zip = zip_raw(&[
        RawMember {
            name: "SKILL.md",
            method: 0,
            crc: crc32(md.as_bytes()),
            data: md.as_bytes(),
            size: md.len() as u32,
        },
        RawMember { name: "assets/bomb.bin", method: 8, crc: crc32_of_zeros(GIB), data: &bomb, size: declared },
    ]);
    assert!(zip.len() < 2 * MIB, "the bomb is {} bytes", zip.len());
    zip
}

/// Peak RSS growth of the server across `f`.
fn peak_growth<T>(row: &Row, f: impl FnOnce() -> T) -> (T, u64) {
    let before = peak_rss(row.server.pid);
    let out = f();
    (out, peak_rss(row.server.pid).saturating_sub(before))
}

/// [`peak_growth`] of a fallible attack.
fn grown<T>(row: &Row, f: impl FnOnce() -> Result<T, String>) -> Result<(T, u64), String> {
    let (out, grew) = peak_growth(row, f);
    out.map(|v| (v, grew))
}

#[test]
fn zip_bomb_with_an_honest_1gib_size_is_refused_unread() {
    let mut row = Row::new("skill import: zip bomb, 1 GiB declared", ZIP_IMPORT);
    let zip = zip_bomb(1 << 30);
    // The stream really inflates to zeros (checked on its first MiB by the zip crate itself).
    let mut archive = zip::ZipArchive::new(Cursor::new(zip.clone())).expect("our bomb is a valid archive");
    let mut first = vec![1u8; MIB];
    archive.by_name("assets/bomb.bin").expect("member").read_exact(&mut first).expect("inflate");
    assert!(first.iter().all(|&b| b == 0));
    let (answer, grew) = row.run(|row, deadline| grown(row, || import_zip(row, &zip, deadline)));
    refused(&answer, &["archive member is too large"]);
    row.note(&format!("peak RSS +{} MiB", grew >> 20));
    assert!(grew < RSS_GROWTH, "peak RSS grew by {} MiB", grew >> 20);
    user_root_is_empty(&row);
}

#[test]
fn zip_bomb_that_lies_about_its_size_stops_inflating() {
    let mut row = Row::new("skill import: zip bomb, 1 GiB declared as 1 KB", ZIP_IMPORT);
    let zip = zip_bomb(1000);
    let (answer, grew) = row.run(|row, deadline| grown(row, || import_zip(row, &zip, deadline)));
    refused(
        &answer,
        &[
            "invalid ZIP archive",
            "package file is too large: assets/bomb.bin",
            "archive expands beyond the allowed size",
        ],
    );
    row.note(&format!("peak RSS +{} MiB", grew >> 20));
    assert!(grew < RSS_GROWTH, "peak RSS grew by {} MiB", grew >> 20);
    user_root_is_empty(&row);
}

#[test]
fn zip_with_100000_tiny_entries_is_refused() {
    let mut row = Row::new("skill import: 100,000 tiny entries", ZIP_IMPORT);
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("SKILL.md", stored).expect("member");
    w.write_all(skill_md("many", "").as_bytes()).expect("bytes");
    for i in 0..100_000 {
        w.start_file(format!("{i:05}"), stored).expect("member");
        w.write_all(b"x").expect("bytes");
    }
    let zip = w.finish().expect("finish").into_inner();
    assert!(zip.len() < 10 * MIB, "{} bytes: over the archive limit, not the entry limit", zip.len());
    let answer = row.run(|row, deadline| import_zip(row, &zip, deadline));
    refused(&answer, &["archive contains too many entries"]);
    user_root_is_empty(&row);
}

#[test]
fn zip_with_a_30000_deep_path_is_refused() {
    let mut row = Row::new("skill import: a 30,000-deep member path", ZIP_IMPORT);
    let deep = format!("deep/scripts/{}run.sh", "d/".repeat(30_000));
    let zip = zip_of(&[("deep/SKILL.md", skill_md("deep", "").as_bytes()), (&deep, b"echo hi\n")]);
    let answer = row.run(|row, deadline| import_zip(row, &zip, deadline));
    let (status, v) = answer.json();
    assert_eq!(status, 422, "{v}");
    user_root_is_empty(&row);
}

#[test]
fn zip_member_names_with_dot_dot_are_refused() {
    let mut row = Row::new("skill import: member names with ..", ZIP_IMPORT);
    let md = skill_md("dots", "");
    let names = ["../../escaped.txt", "dots/../../escaped.txt", "..\\..\\escaped.txt", "scripts/../../../escaped.txt"];
    let zips: Vec<Vec<u8>> = names.iter().map(|n| zip_of(&[("SKILL.md", md.as_bytes()), (n, b"pwned")])).collect();
    let answers =
        row.run(|row, deadline| zips.iter().map(|z| import_zip(row, z, deadline)).collect::<Result<Vec<_>, _>>());
    for (name, answer) in names.iter().zip(&answers) {
        assert_eq!(answer.json(), (422, json!({"detail":"archive contains an illegal path"})), "member {name:?}");
    }
    user_root_is_empty(&row);
    let data = row.server.home.join("data");
    for p in [data.join("escaped.txt"), data.join("skills/escaped.txt"), row.server.home.join("escaped.txt")] {
        assert!(!p.exists(), "{} was written", p.display());
    }
}

// ---------------------------------------------------------------------------------------------
// SKILL.md frontmatter

fn frontmatter_row(name: &'static str, md: String, details: &[&str]) -> String {
    let mut row = Row::new(name, YAML_FRONTMATTER);
    let zip = zip_of(&[("SKILL.md", md.as_bytes())]);
    let answer = row.run(|row, deadline| import_zip(row, &zip, deadline));
    user_root_is_empty(&row);
    let (status, v) = answer.json();
    assert_eq!(status, 422, "{v}");
    let detail = v["detail"].as_str().unwrap_or_default().to_string();
    assert!(details.iter().any(|d| detail.starts_with(d)), "detail {detail:?} starts with none of {details:?}");
    detail
}

#[test]
fn frontmatter_billion_laughs_is_refused() {
    let mut extra = String::from("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..=9 {
        let refs = vec![format!("*l{}", i - 1); 9].join(", ");
        extra.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
    }
    frontmatter_row("frontmatter: billion laughs", skill_md("laughs", &extra), &["invalid YAML frontmatter"]);
}

#[test]
fn frontmatter_nested_100000_deep_is_refused() {
    // 200 KB: over the SKILL.md size limit, refused before YAML parsing.
    let extra = format!("deep: {}\n", nested_json(100_000));
    frontmatter_row(
        "frontmatter: 100,000-deep nesting",
        skill_md("deep", &extra),
        &[
            "archive member is too large",
            "package file is too large: SKILL.md",
            "SKILL.md is too large",
            "invalid YAML frontmatter",
        ],
    );
}

#[test]
fn frontmatter_nested_39000_deep_within_the_size_limit_is_refused() {
    // 78 KB: within the 80,000-byte SKILL.md limit, so the YAML parser itself meets the depth.
    // Whether the parser or a depth pre-check refuses it, the detail is about the frontmatter.
    let extra = format!("deep: {}\n", nested_json(39_000));
    frontmatter_row(
        "frontmatter: 39,000-deep nesting (under size cap)",
        skill_md("deep", &extra),
        &["invalid YAML frontmatter", "frontmatter", "YAML frontmatter"],
    );
}

#[test]
fn frontmatter_with_a_5mb_scalar_is_refused() {
    let extra = format!("big: {}\n", "a".repeat(5_000_000));
    frontmatter_row(
        "frontmatter: a 5 MB scalar",
        skill_md("big", &extra),
        &["archive member is too large", "package file is too large: SKILL.md", "SKILL.md is too large"],
    );
}

// ---------------------------------------------------------------------------------------------
// JSON HTTP bodies

#[test]
fn json_bodies_nested_100000_deep_are_refused() {
    let mut row = Row::new("http: 100,000-deep JSON bodies on four routes", JSON_BODY);
    let body = nested_json(100_000);
    let port = row.server.http_port;
    let routes = [
        ("PUT", "/api/settings/llm".to_string()),
        ("POST", "/api/mcp/servers".to_string()),
        ("POST", "/api/skills".to_string()),
        ("PATCH", format!("/api/sessions/{}", "c".repeat(8))),
    ];
    let answers = row.run(|_, deadline| {
        routes
            .iter()
            .map(|(m, p)| raw_http(port, json_head(m, p, port, body.len()), body.clone().into_bytes(), deadline))
            .collect::<Result<Vec<_>, _>>()
    });
    for ((m, p), a) in routes.iter().zip(&answers) {
        let (status, v) = a.json();
        assert_eq!((status, &v["detail"][0]["type"]), (422, &json!("json_invalid")), "{m} {p}: {v}");
    }
    assert_eq!(row.server.get("/api/mcp/servers").status, 200);
}

#[test]
fn json_bodies_over_12_mib_are_refused_with_413() {
    let mut row = Row::new("http: 12 MiB + 1 bodies, sized and chunked", JSON_BODY);
    let port = row.server.http_port;
    let n = 12 * MIB + 1;
    let sized = vec![b' '; n];
    // The same size without a Content-Length: the server must count what it reads.
    let mut chunked = Vec::new();
    for piece in sized.chunks(MIB) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let chunked_head = format!(
        "POST /api/skills HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let (answers, grew) = row.run(|row, deadline| {
        grown(row, || {
            let sized = raw_http(port, json_head("POST", "/api/skills", port, n), sized, deadline)?;
            Ok([sized, raw_http(port, chunked_head, chunked, deadline)?])
        })
    });
    // A sized body over the cap is 413 before it is read; a chunked one once it gets there.
    let expected =
        [(413, json!({"detail":"request body too large"})), (413, json!({"detail":"request body too large"}))];
    for (a, want) in answers.into_iter().zip(expected) {
        match a {
            Answer::Http(s, b) => assert_eq!((s, serde_json::from_str::<Value>(&b).expect("json")), want),
            Answer::Closed(why) => panic!("closed without the {}: {why}", want.0),
        }
    }
    // Reading up to the cap is allowed, so no RSS bound here; the figure is for the README.
    row.note(&format!("peak RSS +{} MiB", grew >> 20));
}

/// A `Transfer-Encoding: chunked` body as one text.
fn unchunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}

/// A body just under the cap made of bad values, a list's items and an object's keys, in two
/// routes: the 422 lists the first 1,000 items (pydantic has no bound; a 10 MB body used to be
/// answered with 524 MB) and nothing is saved.
#[test]
fn a_12_mib_body_of_bad_items_answers_the_first_1000() {
    // Two 12 MiB bodies parsed whole (a debug build takes about 1.5 s each).
    let mut row = Row::new("http: 12 MiB of bad list items / map values", 3 * JSON_BODY);
    let port = row.server.http_port;
    // Items until the body is within 16 bytes of the cap.
    let fill = |open: &str, item: &str, close: &str| {
        let mut b = String::with_capacity(12 * MIB);
        b.push_str(open);
        for i in 0.. {
            let next = item.replace("{i}", &format!("{i:x}"));
            if b.len() + next.len() + 1 + close.len() > 12 * MIB - 16 {
                break;
            }
            if i > 0 {
                b.push(',');
            }
            b.push_str(&next);
        }
        b.push_str(close);
        b.into_bytes()
    };
    let list = fill(r#"{"roots":["#, "1", "]}");
    let map = fill(r#"{"name":"s","content":"c","support_files":{"#, r#""{i}":1"#, "}}");
    let before = row.server.get("/api/settings/projects").json();
    let (answers, grew) = row.run(|row, deadline| {
        grown(row, || {
            let a = raw_http(port, json_head("PUT", "/api/settings/projects", port, list.len()), list, deadline)?;
            let b = raw_http(port, json_head("POST", "/api/skills", port, map.len()), map, deadline)?;
            Ok([a, b])
        })
    });
    for (a, loc) in answers.iter().zip(["roots", "support_files"]) {
        // The answer is streamed in chunks (`Answer` keeps the body as sent).
        let Answer::Http(status, chunked) = a else { panic!("no answer: {a:?}") };
        let v: Value =
            serde_json::from_str(&unchunk(chunked)).unwrap_or_else(|e| panic!("{status} {e}: {}", head(chunked)));
        let status = *status;
        let items = v["detail"].as_array().map_or(0, Vec::len);
        assert_eq!((status, items), (422, 1000), "{}", head(&v.to_string()));
        assert_eq!(v["detail"][999]["loc"][1], loc);
    }
    assert_eq!(row.server.get("/api/settings/projects").json(), before, "nothing saved");
    assert_eq!(row.server.get("/api/skills/s").status, 404, "nothing saved");
    row.note(&format!("peak RSS +{} MiB", grew >> 20));
}

#[test]
fn invalid_utf8_in_bodies_and_paths_is_refused() {
    let mut row = Row::new("http: invalid UTF-8 bodies and paths", JSON_BODY);
    let port = row.server.http_port;
    let body = b"{\"openai_compatible\":{\"base_url\":\"http://\xff\xfe\xc0\xaf/\",\"api_key\":\"k\"}}".to_vec();
    let before = std::fs::read(row.server.llm_json()).expect("llm.json");
    let (put, path) = row.run(|_, deadline| {
        let put = raw_http(port, json_head("PUT", "/api/settings/llm", port, body.len()), body.clone(), deadline)?;
        let head = format!(
            "GET /api/sessions/%FF%FE%C0%AF/messages HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        );
        Ok((put, raw_http(port, head, Vec::new(), deadline)?))
    });
    let (status, v) = put.json();
    assert_eq!((status, &v["detail"][0]["type"]), (422, &json!("json_invalid")), "{v}");
    let (status, v) = path.json();
    assert!((400..500).contains(&status) && v["detail"].is_string(), "{status} {v}");
    assert_eq!(std::fs::read(row.server.llm_json()).expect("llm.json"), before, "settings changed");
}

// ---------------------------------------------------------------------------------------------
// WebSocket frames (ws_frames.rs covers the 1 MiB limit, 4 MiB frames and bad UTF-8)

/// A tungstenite client whose sends may fail (the server is expected to cut some of them off);
/// `ready` has been read.
fn raw_ws(server: &TestServer) -> WebSocket<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", server.ws_port)).expect("connect ws");
    s.set_nodelay(true).expect("nodelay");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    s.set_write_timeout(Some(Duration::from_secs(10))).expect("write timeout");
    let (mut ws, _) = tungstenite::client(server.ws_url(), s).unwrap_or_else(|e| panic!("ws handshake: {e}"));
    let ready = ws.read().expect("ready");
    assert!(ready.to_text().expect("text").contains(r#""event":"ready""#), "{ready:?}");
    ws.get_ref().set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
    ws
}

/// Frames read until the server closes or breaks the connection (`true`) or `deadline` passes.
fn drain_ws(ws: &mut WebSocket<TcpStream>, deadline: Deadline, mut seen: impl FnMut(&Value) -> bool) -> bool {
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(t.as_str()).expect("JSON frame");
                if seen(&v) {
                    return false;
                }
            }
            Ok(Message::Close(_)) => return true,
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
        if deadline.passed() {
            return false;
        }
    }
}

fn too_large() -> Value {
    json!({"event":"error","detail":"message too large (max 1048576 bytes)"})
}

#[test]
fn ws_message_frame_with_100000_deep_json_gets_one_error() {
    let mut row = Row::new("ws: message frame with 100,000-deep metadata", WS_FRAMES);
    let reply = row.run(|row, deadline| {
        let mut ws = WsClient::connect(&row.server);
        let frame = format!(
            r#"{{"type":"message","chat_id":"{}","content":"hi","metadata":{}}}"#,
            ws.chat_id,
            nested_json(100_000)
        );
        ws.send_text(&frame);
        match ws.recv_or_closed(deadline.remaining()) {
            Ok(Some(reply)) => {
                ws.ping_sync();
                Ok(reply)
            }
            Ok(None) => Err("no reply within the bound".to_string()),
            Err(e) => Err(format!("the connection broke: {e}")),
        }
    });
    assert_eq!(reply, json!({"event":"error","detail":"typed JSON envelope required"}));
}

#[test]
fn ws_frame_over_16_mib_is_refused_without_buffering_it() {
    let mut row = Row::new("ws: one 16 MiB + 1 text frame", WS_FRAMES);
    let big = "x".repeat(16 * MIB + 1);
    let ((frames, closed), grew) = row.run(|row, deadline| {
        Ok(peak_growth(row, || {
            let mut ws = raw_ws(&row.server);
            let _ = ws.send(Message::text(big));
            let mut frames = Vec::new();
            let closed = drain_ws(&mut ws, deadline, |v| {
                frames.push(v.clone());
                false
            });
            (frames, closed)
        }))
    });
    assert!(closed, "the connection stayed open after a frame over the hard limit");
    assert!(frames.iter().all(|f| *f == too_large()), "{frames:?}");
    row.note(&format!("peak RSS +{} MiB", grew >> 20));
    assert!(grew < RSS_GROWTH, "peak RSS grew by {} MiB", grew >> 20);
    let mut other = WsClient::connect(&row.server);
    other.ping_sync();
}

#[test]
fn ws_fragmented_message_never_finished_is_cut_at_the_limit() {
    let mut row = Row::new("ws: a fragmented message never finished", WS_FRAMES);
    let ((sent, frames), grew) = row.run(|row, deadline| {
        Ok(peak_growth(row, || {
            let mut ws = raw_ws(&row.server);
            let start = Frame::message(br#"{"type":"ping","pad":""#.to_vec(), OpCode::Data(Data::Text), false);
            ws.send(Message::Frame(start)).expect("first fragment");
            // Meanwhile others are served.
            let mut other = WsClient::connect(&row.server);
            other.ping_sync();
            // Continuation frames of 1 MiB, never final: 96 MiB if nobody stops us.
            let chunk = vec![b'x'; MIB];
            let mut sent = 0;
            while sent < 96 && !deadline.passed() {
                let cont = Frame::message(chunk.clone(), OpCode::Data(Data::Continue), false);
                if ws.send(Message::Frame(cont)).is_err() {
                    break;
                }
                sent += 1;
            }
            let mut frames = Vec::new();
            let closed = drain_ws(&mut ws, deadline, |v| {
                frames.push(v.clone());
                false
            });
            assert!(closed, "the connection stayed open after {sent} MiB of fragments");
            other.ping_sync();
            (sent, frames)
        }))
    });
    assert!(sent < 96, "the server read all 96 MiB of one unfinished message");
    assert!(frames.iter().all(|f| *f == too_large()), "{frames:?}");
    row.note(&format!("peak RSS +{} MiB", grew >> 20));
    assert!(grew < 2 * RSS_GROWTH, "peak RSS grew by {} MiB", grew >> 20);
}

#[test]
fn ws_flood_of_10000_pings_is_answered_or_cut() {
    let mut row = Row::new("ws: 10,000 ping frames in one burst", WS_FRAMES);
    let (pongs, closed) = row.run(|row, deadline| {
        let mut ws = raw_ws(&row.server);
        for _ in 0..10_000 {
            ws.write(Message::text(r#"{"type":"ping"}"#)).map_err(|e| format!("queueing a ping: {e}"))?;
        }
        ws.flush().map_err(|e| format!("flushing the pings: {e}"))?;
        let mut pongs = 0;
        let closed = drain_ws(&mut ws, deadline, |v| {
            assert_eq!(*v, json!({"event":"pong"}));
            pongs += 1;
            pongs == 10_000
        });
        if !closed && pongs < 10_000 {
            return Err(format!("only {pongs} pongs and no close"));
        }
        Ok((pongs, closed))
    });
    // Either every ping is answered, or a client that would not read was dropped.
    assert!(pongs == 10_000 || closed, "{pongs} pongs");
}

/// Writes `count` copies of `frame` in batches of 200 without waiting for answers, reading
/// whatever already arrived between batches (so our own receive buffer never stalls the
/// server); then reads on until `seen` says enough, the connection ends (`true`), or `deadline`.
fn flood(
    ws: &mut WebSocket<TcpStream>,
    frame: &str,
    count: usize,
    deadline: Deadline,
    mut seen: impl FnMut(&Value) -> bool,
) -> Result<bool, String> {
    ws.get_ref().set_read_timeout(Some(Duration::from_millis(1))).expect("read timeout");
    let mut enough = false;
    let mut left = count;
    while left > 0 {
        let n = left.min(200);
        for _ in 0..n {
            ws.write(Message::text(frame.to_string())).map_err(|e| format!("queueing a frame: {e}"))?;
        }
        ws.flush().map_err(|e| format!("flushing frames: {e}"))?;
        left -= n;
        loop {
            match ws.read() {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).expect("JSON frame");
                    enough |= seen(&v);
                }
                Ok(Message::Close(_)) => return Ok(true),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    break
                }
                Err(_) => return Ok(true),
            }
        }
        if deadline.passed() {
            return Err(format!("still flooding ({left} frames left) at the bound"));
        }
    }
    ws.get_ref().set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
    if enough {
        return Ok(false);
    }
    Ok(drain_ws(ws, deadline, seen))
}

#[test]
fn ws_flood_of_10000_messages_to_one_chat_is_capped() {
    let mut row = Row::new("ws: 10,000 message frames to one chat", WS_FLOOD);
    // Each turn takes at least 5 ms, so the frames arrive far faster than turns end however
    // fast the server is, and the queue's cap must be what refuses them.
    row.fake.set_fallback(Reply::text(&["ok"]).first_byte_delay(Duration::from_millis(5)));
    let (done, refused) = row.run(|row, deadline| {
        let mut ws = raw_ws(&row.server);
        let chat = "flood-chat";
        let frame = msg(chat, "flood", "openai_compatible").to_string();
        // Every frame ends once: a turn's `done`, or an `error` when the chat's queue is full.
        let (mut done, mut refused, mut other) = (0, 0, Vec::new());
        let closed = flood(&mut ws, &frame, 10_000, deadline, |v| {
            if v["chat_id"] == chat {
                match v["event"].as_str() {
                    Some("done") => done += 1,
                    Some("error") if v["detail"].as_str().is_some_and(|d| d.starts_with("too many queued")) => {
                        refused += 1
                    }
                    Some("error") => other.push(v.clone()),
                    _ => {}
                }
            }
            done + refused + other.len() == 10_000
        })?;
        if closed || done + refused + other.len() < 10_000 {
            return Err(format!("{done} done, {refused} refused, closed {closed}, others {other:?}"));
        }
        assert!(other.is_empty(), "{other:?}");
        Ok((done, refused))
    });
    // The per-chat queue engaged: far fewer turns ran than frames were sent.
    assert!(done >= 1 && refused > 0 && done + refused == 10_000, "{done} done, {refused} refused");
    assert!(done < 1_000, "{done} turns ran: the per-chat queue did not hold");
}

/// 2,000 forged `approval_response` frames (other chats, unknown ids, bad decisions, spellings)
/// while an escalated `exec` waits: none approves, the request is denied at its timeout, the
/// command never runs (unbounded would be: any of them approving it).
#[test]
fn ws_forged_approval_answers_never_approve() {
    let mut row = Row::with_env("ws: 2,000 forged approval answers", WS_FLOOD, &[("CASHCODE_APPROVAL_TIMEOUT", "3")]);
    let ws_dir = row.workspace();
    let args = json!({"command": "touch forged.txt", "sandbox_permissions": "require_escalated", "approved": true});
    row.fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_f", "exec", &[&args.to_string()])]));
    row.fake.push(Reply::text(&["ok"]));
    let decision = row.run(|row, deadline| {
        let mut ws = WsClient::connect(&row.server);
        let other = ws.new_chat();
        let chat = ws.new_chat();
        ws.message(&chat, "go", "openai_compatible");
        let req = ws.recv_until(|v| v["event"] == "approval_request").pop().expect("the request");
        let id = req["id"].as_str().expect("id").to_string();
        let forged = |i: usize| -> Value {
            let (c, a, d): (&str, String, Value) = match i % 6 {
                0 => (&other, id.clone(), json!("approve")),
                1 => (&chat, format!("ap-{i:016x}"), json!("approve_for_chat")),
                2 => (&chat, id.to_uppercase(), json!("approve")),
                3 => (&chat, id.clone(), json!(["approve"])),
                4 => (&chat, id.clone(), json!({"decision": "approve"})),
                _ => (&chat, format!("{id} "), json!("approve")),
            };
            json!({"type": "approval_response", "chat_id": c, "id": a, "decision": d, "approved": true})
        };
        // The chat's own events (the timeout may end the request meanwhile) are kept aside.
        let mut seen = Vec::new();
        for i in 0..2_000 {
            if deadline.passed() {
                return Err(format!("only {i} forged answers sent within the bound"));
            }
            ws.send(&forged(i));
            let mut frames = ws.recv_until(|v| v.get("chat_id").is_none());
            let reply = frames.pop().expect("a reply");
            if reply["event"] != "error" {
                return Err(format!("forged answer {i} got {reply}"));
            }
            seen.extend(frames);
        }
        if !seen.iter().any(|e| e["event"] == "done" || e["event"] == "error") {
            seen.extend(ws.turn_events(&chat));
        }
        let end = seen.iter().find(|e| e["event"] == "approval_end").cloned().ok_or("no approval_end")?;
        Ok(end["decision"].as_str().unwrap_or_default().to_string())
    });
    assert_eq!(decision, "deny");
    assert!(!ws_dir.join("forged.txt").exists(), "a forged answer ran the command");
}

// ---------------------------------------------------------------------------------------------
// MCP peers (a user-added Streamable HTTP server that answers `tools/list` with something
// hostile; `initialize` and notifications are answered properly)

#[derive(Clone, Copy, Debug)]
enum McpHostile {
    /// `result.tools` nested 100,000 deep.
    DeepJson,
    /// A 64 MiB JSON reply.
    Huge,
    /// An event stream whose `data:` line never ends.
    EndlessLine,
    /// A well-formed reply to an id nobody asked about.
    WrongId,
}

/// Which request gets the hostile reply.
#[derive(Clone, Copy, Debug, PartialEq)]
enum McpPhase {
    /// `tools/list` during connect.
    List,
    /// `tools/call` of the one tool `echo` the listing offers.
    Call,
}

/// The peer: `http://127.0.0.1:<port>/mcp`; stops when the sender is dropped.
fn mcp_peer(mode: McpHostile, phase: McpPhase) -> (String, crossbeam_channel::Sender<()>) {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("bind mcp peer");
    let port = server.server_addr().to_ip().expect("ip").port();
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    std::thread::spawn(move || loop {
        if matches!(rx.try_recv(), Err(crossbeam_channel::TryRecvError::Disconnected)) {
            return;
        }
        if let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(50)) {
            // Hostile replies stream for a while: one thread each.
            std::thread::spawn(move || answer_mcp(req, mode, phase));
        }
    });
    (format!("http://127.0.0.1:{port}/mcp"), tx)
}

fn answer_mcp(mut req: tiny_http::Request, mode: McpHostile, phase: McpPhase) {
    let hdr = |k: &str, v: &str| tiny_http::Header::from_bytes(k, v).expect("header");
    let json_headers = || vec![hdr("Content-Type", "application/json"), hdr("Mcp-Session-Id", "hostile-session")];
    match req.method() {
        tiny_http::Method::Post => {}
        tiny_http::Method::Delete => {
            let _ = req.respond(tiny_http::Response::empty(200));
            return;
        }
        _ => {
            let _ = req.respond(tiny_http::Response::empty(405));
            return;
        }
    }
    let mut body = String::new();
    let _ = req.as_reader().read_to_string(&mut body);
    let msg: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let id = msg["id"].clone();
    if id.is_null() {
        let _ = req.respond(tiny_http::Response::empty(202));
        return;
    }
    let reply = |result: Value| json!({"jsonrpc":"2.0","id":id,"result":result}).to_string();
    let respond =
        |req: tiny_http::Request, headers: Vec<tiny_http::Header>, r: Box<dyn Read + Send>, len: Option<usize>| {
            let _ = req.respond(tiny_http::Response::new(tiny_http::StatusCode(200), headers, r, len, None));
        };
    let method = msg["method"].as_str().unwrap_or_default();
    let hostile = match phase {
        McpPhase::List => method == "tools/list",
        McpPhase::Call => method == "tools/call",
    };
    let json_reply = |req: tiny_http::Request, text: String| {
        let len = text.len();
        respond(req, json_headers(), Box::new(Cursor::new(text.into_bytes())), Some(len));
    };
    if !hostile && method == "tools/list" {
        let tools =
            json!({"tools":[{"name":"echo","description":"Echo","inputSchema":{"type":"object","properties":{}}}]});
        return json_reply(req, reply(tools));
    }
    // The hostile payload sits where the reply's real data would be.
    let key = if phase == McpPhase::List { "tools" } else { "content" };
    match method {
        "initialize" => {
            let version = msg["params"]["protocolVersion"].clone();
            json_reply(
                req,
                reply(json!({"protocolVersion":version,"capabilities":{"tools":{}},
                             "serverInfo":{"name":"hostile","version":"1"}})),
            );
        }
        _ if hostile => match mode {
            McpHostile::DeepJson => json_reply(
                req,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"{key}":{}}}}}"#, nested_json(100_000)),
            ),
            McpHostile::Huge => {
                let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"{key}":[{{"type":"text","text":""#);
                let suffix = r#""}]}}"#;
                let pad = 64 * MIB;
                let len = prefix.len() + pad + suffix.len();
                let r = Cursor::new(prefix.into_bytes())
                    .chain(std::io::repeat(b'x').take(pad as u64))
                    .chain(Cursor::new(suffix));
                respond(req, json_headers(), Box::new(r), Some(len));
            }
            McpHostile::EndlessLine => {
                let headers = vec![hdr("Content-Type", "text/event-stream"), hdr("Mcp-Session-Id", "hostile-session")];
                let r = Cursor::new(b"event: message\ndata: ".to_vec()).chain(std::io::repeat(b'x'));
                respond(req, headers, Box::new(r), None);
            }
            McpHostile::WrongId => {
                json_reply(req, json!({"jsonrpc":"2.0","id":987_654_321,"result":{key:[]}}).to_string())
            }
        },
        _ => json_reply(
            req,
            json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"Method not found"}}).to_string(),
        ),
    }
}

/// A server whose MCP timeouts are short (connect 5 s, requests and calls 3 s) with the peer
/// added as the user server `hostile`.
fn mcp_server(name: &'static str, mode: McpHostile, phase: McpPhase) -> (Row, crossbeam_channel::Sender<()>) {
    let (url, stop) = mcp_peer(mode, phase);
    let row = Row::with_env(
        name,
        MCP_REPLY,
        &[
            ("CASHCODE_MCP_CONNECT_TIMEOUT", "5"),
            ("CASHCODE_MCP_REQUEST_TIMEOUT", "3"),
            ("CASHCODE_MCP_CALL_TIMEOUT", "3"),
        ],
    );
    let created = row.server.post(
        "/api/mcp/servers",
        &json!({"name":"hostile","type":"streamable_http","display_name":"Hostile","url":url}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    (row, stop)
}

/// `POST /api/mcp/servers/hostile/connect` against a peer whose `tools/list` reply is hostile:
/// the connect fails cleanly and the server records the error.
fn mcp_row(name: &'static str, mode: McpHostile) -> Value {
    let (mut row, _stop) = mcp_server(name, mode, McpPhase::List);
    let answer = row.run(|row, deadline| {
        let port = row.server.http_port;
        raw_http(port, json_head("POST", "/api/mcp/servers/hostile/connect", port, 2), b"{}".to_vec(), deadline)
    });
    let (status, dto) = answer.json();
    assert_eq!((status, &dto["status"], &dto["connected"]), (200, &json!("error"), &json!(false)), "{mode:?}: {dto}");
    let listed = row.server.get("/api/mcp/servers");
    assert_eq!(listed.status, 200);
    let entry = listed.json()["servers"].as_array().expect("servers").iter().find(|s| s["name"] == "hostile").cloned();
    assert_eq!(entry.map(|e| e["status"].clone()), Some(json!("error")));
    dto
}

/// A turn whose model prepares the peer and calls its tool, whose `tools/call` reply is hostile:
/// the call comes back to the model as a clean error.
fn mcp_call_row(name: &'static str, mode: McpHostile) {
    let (mut row, _stop) = mcp_server(name, mode, McpPhase::Call);
    let steps = [("mcp_prepare", json!({"server_name":"hostile"})), ("mcp_hostile_echo", json!({}))];
    let texts = row.run(|row, deadline| tool_calls(row, &steps, deadline));
    assert!(texts[0].starts_with("MCP server 'hostile' connected."), "{}", head(&texts[0]));
    assert_clean_error(&texts[1]);
}

#[test]
fn mcp_tools_call_reply_nested_100000_deep_is_a_clean_error() {
    mcp_call_row("mcp: tools/call reply 100,000 deep", McpHostile::DeepJson);
}

#[test]
fn mcp_tools_call_reply_of_64_mib_is_a_clean_error() {
    mcp_call_row("mcp: a 64 MiB tools/call reply", McpHostile::Huge);
}

#[test]
fn mcp_tools_call_reply_line_that_never_ends_is_a_clean_error() {
    mcp_call_row("mcp: a tools/call reply line that never ends", McpHostile::EndlessLine);
}

#[test]
fn mcp_tools_call_reply_to_an_id_never_asked_is_a_clean_error() {
    mcp_call_row("mcp: a tools/call reply to an id never asked", McpHostile::WrongId);
}

#[test]
fn mcp_tools_list_reply_nested_100000_deep_fails_the_connect() {
    mcp_row("mcp: tools/list reply 100,000 deep", McpHostile::DeepJson);
}

#[test]
fn mcp_tools_list_reply_of_64_mib_fails_the_connect() {
    mcp_row("mcp: a 64 MiB tools/list reply", McpHostile::Huge);
}

#[test]
fn mcp_tools_list_reply_line_that_never_ends_fails_the_connect() {
    mcp_row("mcp: a tools/list reply line that never ends", McpHostile::EndlessLine);
}

#[test]
fn mcp_reply_to_an_id_never_asked_fails_the_connect() {
    mcp_row("mcp: a reply to an id never asked", McpHostile::WrongId);
}

// ---------------------------------------------------------------------------------------------
// HTTP headers

#[test]
fn a_300_mib_header_line_is_cut_with_bounded_memory() {
    let mut row = Row::new("http: one 300 MiB header line", HEADER_FLOOD);
    let pid = row.server.pid;
    let (sent, answer, grew) = row.run(|row, deadline| {
        let port = row.server.http_port;
        let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(Duration::from_millis(200))).expect("write timeout");
        // A reader notes the server's answer (or close) while we keep writing.
        let answered: Arc<Mutex<Option<Answer>>> = Arc::default();
        let mut r = s.try_clone().expect("clone");
        let slot = answered.clone();
        // A status line counts at once: the server need not close after it.
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let answer = loop {
                match r.read(&mut buf) {
                    Ok(0) => break Answer::Closed("EOF".into()),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => break Answer::Closed(e.to_string()),
                }
                let text = String::from_utf8_lossy(&got).to_string();
                if let Some((line, _)) = text.split_once("\r\n") {
                    match line.split(' ').nth(1).and_then(|c| c.parse::<u16>().ok()) {
                        Some(code) => break Answer::Http(code, text),
                        None => break Answer::Closed(format!("garbled answer {line:?}")),
                    }
                }
            };
            *slot.lock().expect("slot") = Some(answer);
        });
        let base = rss(pid);
        let mut grew = 0u64;
        write!(s, "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Flood: ").map_err(|e| e.to_string())?;
        let chunk = vec![b'a'; 64 * 1024];
        let mut sent = 0usize;
        let cut = loop {
            if answered.lock().expect("slot").is_some() {
                break true;
            }
            if sent >= 300 * MIB {
                break false;
            }
            if deadline.passed() {
                let _ = s.shutdown(Shutdown::Both);
                let grew = grew.max(rss(pid).saturating_sub(base));
                return Err(format!(
                    "sent {} MiB (server RSS +{} MiB), no answer and no close within the bound",
                    sent / MIB,
                    grew >> 20
                ));
            }
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break true,
            }
            if sent % MIB < chunk.len() {
                grew = grew.max(rss(pid).saturating_sub(base));
                if grew > RSS_GROWTH {
                    let _ = s.shutdown(Shutdown::Both);
                    return Err(format!(
                        "server RSS grew by {} MiB after {} MiB of one header line",
                        grew >> 20,
                        sent / MIB
                    ));
                }
            }
        };
        if !cut {
            let _ = s.write_all(b"\r\n\r\n");
        }
        let _ = reader.join();
        let _ = s.shutdown(Shutdown::Both);
        let answer = answered.lock().expect("slot").take().unwrap_or(Answer::Closed("write failed".into()));
        Ok((sent, answer, grew.max(rss(pid).saturating_sub(base))))
    });
    assert!(sent < 300 * MIB, "the server read all 300 MiB of one header line");
    match answer {
        Answer::Http(code, text) => assert_eq!(code, 431, "{}", head(&text)),
        Answer::Closed(_) => {}
    }
    row.note(&format!("sent {} MiB before the cut, server RSS +{} MiB", sent / MIB, grew >> 20));
    assert!(grew < RSS_GROWTH, "server RSS grew by {} MiB", grew >> 20);
}

#[test]
fn ten_thousand_header_fields_are_refused() {
    let mut row = Row::new("http: 10,000 header fields", HEADER_FLOOD);
    let answer = row.run(|row, deadline| {
        let port = row.server.http_port;
        let mut head = format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
        for i in 0..10_000 {
            head.push_str(&format!("X-Field-{i}: v\r\n"));
        }
        head.push_str("\r\n");
        raw_http(port, head, Vec::new(), deadline)
    });
    match answer {
        Answer::Http(code, body) => assert_eq!(code, 431, "answered {code} {}", head(&body)),
        Answer::Closed(_) => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Request framing: every spelling a proxy in front could read differently is a 400 and a close,
// answered by the vendored tiny_http before the application or any body byte.

/// Sends each of `spellings` (header lines, each ending in CRLF) in a POST whose body is a
/// whole second request, and requires tiny_http's own empty 400 for each (the application's
/// 400s have a JSON body; a parsed second request would be a second answer).
fn framing_row(name: &'static str, spellings: &[&str]) {
    let mut row = Row::new(name, FRAMING);
    let answers = row.run(|row, deadline| {
        let port = row.server.http_port;
        let smuggled = format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        spellings
            .iter()
            .map(|fields| {
                let head = format!(
                    "POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{fields}Connection: close\r\n\r\n"
                );
                Ok((*fields, raw_http(port, head, smuggled.clone().into_bytes(), deadline)?))
            })
            .collect::<Result<Vec<_>, String>>()
    });
    for (fields, answer) in answers {
        match answer {
            Answer::Http(code, body) => {
                assert_eq!((code, body.as_str()), (400, ""), "{fields:?}: answered {code} {}", head(&body))
            }
            Answer::Closed(why) => panic!("{fields:?}: closed without the 400 ({why})"),
        }
    }
}

#[test]
fn duplicate_or_malformed_content_lengths_are_400() {
    framing_row(
        "http: duplicate or malformed Content-Length",
        &[
            "Content-Length: 2\r\nContent-Length: 40\r\n",
            "Content-Length: 40\r\nContent-Length: 40\r\n",
            "Content-Length: +2\r\n",
            "Content-Length: 2, 2\r\n",
            "Content-Length: 2 2\r\n",
            "Content-Length: 0x2\r\n",
            "Content-Length:\r\n",
            "Content-Length: 18446744073709551616\r\n",
        ],
    );
}

#[test]
fn content_length_with_transfer_encoding_is_400() {
    framing_row(
        "http: Content-Length with Transfer-Encoding",
        &[
            "Content-Length: 40\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        ],
    );
}

#[test]
fn transfer_encodings_other_than_chunked_are_400() {
    framing_row(
        "http: Transfer-Encoding other than chunked",
        &[
            "Transfer-Encoding: xchunked\r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Transfer-Encoding: chunked, chunked\r\n",
            "Transfer-Encoding:\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        ],
    );
}

#[test]
fn duplicate_host_or_origin_is_400() {
    framing_row(
        "http: duplicate Host or Origin",
        &[
            "Host: 127.0.0.1\r\n",
            "Host: evil.example\r\n",
            "Origin: http://evil.example\r\nOrigin: http://127.0.0.1\r\n",
        ],
    );
}

#[test]
fn folded_header_lines_and_bare_line_breaks_are_400() {
    framing_row(
        "http: folded header lines and bare line breaks",
        &["X-A: b\r\n Content-Length: 2\r\n", "X-A: b\nContent-Length: 2\r\n", "X-A: b\rContent-Length: 2\r\n"],
    );
}

#[test]
fn ws_300_trickling_handshakes_from_one_peer_hold_no_client_slot() {
    // Two client slots: the owner's row client and the follow-up turn's.
    let mut row =
        Row::with_env("ws: 300 trickling handshakes, MAX_CLIENTS=2", WS_HANDSHAKE, &[("CASHCODE_MAX_CLIENTS", "2")]);
    // The tricklers and the owner stay open through the follow-up turn.
    let (_held, ended) = row.run(|row, _deadline| {
        let mut tricklers: Vec<Trickler> =
            (0..300).map(|_| Trickler::open([127, 0, 0, 2], row.server.ws_port)).collect();
        let mut owner = WsClient::connect(&row.server);
        owner.ping_sync();
        let ended = tricklers.iter_mut().map(Trickler::drip).filter(|open| !open).count();
        Ok(((tricklers, owner), ended))
    });
    row.note(&format!("{ended} of 300 closed at once (past the peer's 16 running + 256 parked)"));
}

#[test]
fn ws_handshake_trickling_130_bytes_a_second_is_dropped_at_the_deadline() {
    let mut row = Row::new("ws: a handshake trickling 130 bytes/s", WS_HANDSHAKE);
    let lasted = row.run(|row, deadline| {
        let mut t = Trickler::open([127, 0, 0, 2], row.server.ws_port);
        while t.drip() {
            if deadline.passed() {
                return Err("the trickling handshake is still open".into());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        Ok(t.ended.expect("ended"))
    });
    row.note(&format!("dropped after {lasted:.1?}"));
    assert!(lasted >= Duration::from_secs(4), "dropped after {lasted:?}, before the 5 s deadline");
}

// ---------------------------------------------------------------------------------------------
// Staying power: a peer holding connections, trickling heads or stalling refused uploads slows
// only its own connections; the owner (another address here, 127.0.0.1) is served throughout.

/// Idle sockets and unfinished heads from one peer past its connection cap (unbounded: each
/// cost a thread and two descriptors; at the open-files limit `try_clone` panicked the accept
/// thread and HTTP refused connections for good while the process lived on).
const CONNECTION_FLOOD: Duration = Duration::from_secs(10);
/// Heads trickled a byte at a time, cut at the 10 s whole-head deadline (unbounded: each byte
/// restarted the 15 s read timeout, so a connection was held as long as bytes came).
const TRICKLED_HEADS: Duration = Duration::from_secs(20);
/// Uploads refused from their head while their bodies stall (unbounded: each took a body
/// reader before the checks and held it until its body deadline).
const REFUSED_UPLOADS: Duration = Duration::from_secs(10);

#[test]
fn idle_sockets_and_unfinished_heads_past_a_peers_cap_are_closed_at_once() {
    use super::http_limits::{closed_by_server, connect_from};
    let per_peer = 8;
    let mut row = Row::with_env(
        "http: 300 idle sockets and heads from one peer",
        CONNECTION_FLOOD,
        &[("CASHCODE_MAX_HTTP_CONNECTIONS_PER_PEER", "8")],
    );
    let (held, refused) = row.run(|row, deadline| {
        let port = row.server.http_port;
        let peer = std::net::Ipv4Addr::new(127, 0, 0, 2);
        let mut socks = Vec::new();
        for i in 0..300 {
            let mut s = connect_from(port, peer);
            if i % 3 == 0 {
                let _ = write!(s, "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Unfinished: ");
            }
            socks.push(s);
        }
        let open = loop {
            let open = socks.iter().filter(|s| !closed_by_server(s)).count();
            if open <= per_peer {
                break open;
            }
            if deadline.passed() {
                return Err(format!("{open} of {} connections from one peer still open", socks.len()));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // While that peer's cap is full, the owner and a third address are served.
        for i in 0..20 {
            let r = row.server.get("/api/health");
            if r.status != 200 {
                return Err(format!("the owner's request {i} got {} {}", r.status, r.body));
            }
            let mut other = connect_from(port, std::net::Ipv4Addr::new(127, 0, 0, 3));
            other.set_read_timeout(Some(deadline.remaining().max(Duration::from_millis(1)))).expect("timeout");
            let _ = write!(other, "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
            let mut got = String::new();
            let _ = other.read_to_string(&mut got);
            if !got.starts_with("HTTP/1.1 200") {
                return Err(format!("another peer's request {i} got {:?}", head(&got)));
            }
        }
        drop(socks);
        Ok((open, 300 - open))
    });
    row.note(&format!("{held} held, {refused} closed at once"));
    assert_eq!(held, per_peer, "the peer's cap");
}

#[test]
fn heads_trickled_a_byte_at_a_time_are_cut_at_the_head_deadline() {
    let mut row = Row::new("http: 8 heads trickled a byte a second", TRICKLED_HEADS);
    let longest = row.run(|row, deadline| {
        let port = row.server.http_port;
        let started = Instant::now();
        let trickles: Vec<JoinHandle<Option<Duration>>> = (0..8)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
                    let _ = write!(s, "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ");
                    // Pacing the trickle, well within the 15 s read timeout; a write fails
                    // once the server has closed.
                    while !deadline.passed() && s.write_all(b"a").is_ok() {
                        std::thread::sleep(Duration::from_millis(500));
                    }
                    (!deadline.passed()).then(|| started.elapsed())
                })
            })
            .collect();
        let mut longest = Duration::ZERO;
        for t in trickles {
            match t.join().expect("trickle thread") {
                Some(held) => longest = longest.max(held),
                None => return Err("a trickled head was still open at the bound".into()),
            }
        }
        Ok(longest)
    });
    row.note(&format!("longest trickled head held {longest:.1?}"));
}

#[test]
fn refused_uploads_that_stall_never_hold_a_body_reader() {
    let mut row = Row::new("http: 30 stalled uploads refused for their Origin", REFUSED_UPLOADS);
    let answers = row.run(|row, deadline| {
        let port = row.server.http_port;
        // From the owner's own address: five times what one peer may upload at once.
        let head = format!(
            "PATCH /api/sessions/nope HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\n\
             Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"ti"
        );
        let stalled: Vec<TcpStream> = (0..30)
            .map(|_| {
                let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
                s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
                Ok(s)
            })
            .collect::<Result<_, String>>()?;
        let mut answers = Vec::new();
        for mut s in stalled.iter() {
            s.set_read_timeout(Some(deadline.remaining().max(Duration::from_millis(1)))).expect("timeout");
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            answers.push(String::from_utf8_lossy(&got).to_string());
        }
        // The owner's upload (over the 1 KiB read with the head) is read and routed.
        let title = "t".repeat(3000);
        let owner = row.server.patch("/api/sessions/nope", &json!({ "title": title }));
        if owner.status != 404 {
            return Err(format!("the owner's upload got {} {}", owner.status, owner.body));
        }
        drop(stalled);
        Ok(answers)
    });
    for a in &answers {
        assert!(a.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{}", head(a));
        assert!(a.contains("\r\nConnection: close\r\n"), "{}", head(a));
        assert!(a.ends_with(r#"{"detail":"Origin is not allowed"}"#), "{}", head(a));
    }
}

// ---------------------------------------------------------------------------------------------
// The served client and the settings.

/// Any page may try to frame the owner's client (to overlay it) or have an answer read as
/// another type: every spelling of a page, an API route, an error and a refusal says `DENY`,
/// `frame-ancestors 'none'` and `nosniff`.
#[test]
fn framing_the_client_or_sniffing_an_answer_is_refused_by_headers() {
    let mut row = Row::new("http: framing the client, sniffing an answer", SETTINGS_AND_HEADERS);
    let answers = row.run(|row, _| {
        let port = row.server.http_port;
        let paths = ["/", "/index.html", "/chat/x", "/%63hat/x", "/api/health", "/api/sessions", "/api/nope", "/API/x"];
        let mut out = Vec::new();
        for path in paths {
            for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")] {
                out.push((format!("{host}{path}"), row.server.request("GET", path, &[("Host", &host)], None)));
            }
        }
        Ok(out)
    });
    for (what, r) in answers {
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{what} ({})", r.status);
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{what}");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(csp.split(';').any(|d| d.trim() == "frame-ancestors 'none'"), "{what}: {csp:?}");
    }
}

/// A `.env` in the directory the server is started from (a cloned repository, a workspace the
/// model wrote one into) tries to widen the origins, turn on dev mode, bind every interface
/// and open `web_fetch` to private addresses: none of it applies.
#[test]
fn a_dotenv_where_the_server_starts_cannot_widen_its_settings() {
    let home = fresh_home("hostile-dotenv");
    std::fs::write(
        home.join(".env"),
        "CASHCODE_ALLOWED_ORIGINS=http://evil.example\nCASHCODE_DEV=1\nCASHCODE_HOST=0.0.0.0\n\
         WS_HOST=0.0.0.0\nCASHCODE_WEB_FETCH_ALLOW_PRIVATE=1\n",
    )
    .expect("plant .env");
    let (url, _stop) = static_http("private page".to_string(), "text/plain");
    let mut row = Row::in_home("settings: a .env where the server starts", SETTINGS_AND_HEADERS, &home, &[]);
    let fetched = row.run(|row, deadline| {
        for origin in ["http://evil.example", "http://127.0.0.1:5173"] {
            if !matches!(
                WsClient::handshake(row.server.ws_port, Some(origin)),
                crate::common::ws::Handshake::Refused(403)
            ) {
                return Err(format!("the WebSocket took {origin}"));
            }
            let r = row.server.request("PUT", "/api/settings/llm", &[("Origin", origin)], Some("{}"));
            if r.status != 403 {
                return Err(format!("PUT with {origin} answered {}", r.status));
            }
        }
        tool_call(row, "web_fetch", &json!({"url": url}), deadline)
    });
    assert!(fetched.contains("refused") && !fetched.contains("private page"), "{}", head(&fetched));
    assert!(row.server.stderr_text().contains(&format!("ignored {}", home.join(".env").display())));
}

// ---------------------------------------------------------------------------------------------
// Bounded answers: what a provider streams, and reading back what it wrote.

/// A model answer streamed past the cap, or tool-call arguments past theirs (unbounded: 300 ×
/// 1 MiB deltas took RSS to 1.9 GiB and wrote one 314 MB line into history.jsonl).
const MODEL_ANSWER: Duration = Duration::from_secs(20);
/// Paging a chat whose history holds one 64 MiB line (unbounded: every 64 KiB block rescanned
/// the line from its start, 4–9 s per page on the one HTTP thread, the whole API frozen).
const PAGING_LONG_LINE: Duration = Duration::from_secs(10);
/// The server's cap on a turn's answer and on one model call's tool-call arguments.
const ANSWER_CAP: usize = MIB;
/// The server's cap on one paged item.
const ITEM_CAP: usize = 2 * MIB;

/// A fresh chat gets `reply` for "write a lot"; the turn's events.
fn turn_with(row: &Row, reply: Reply) -> (String, Vec<Value>) {
    let mut ws = WsClient::connect(&row.server);
    let chat = ws.new_chat();
    row.fake.push(reply);
    ws.message(&chat, "write a lot", "openai_compatible");
    let events = ws.turn_events(&chat);
    (chat, events)
}

#[test]
fn a_model_answer_past_1_mib_is_cut_there_and_the_turn_ends_with_a_note() {
    let mut row = Row::new("model: a 3 MiB answer in 256 KiB deltas", MODEL_ANSWER);
    let piece = "a".repeat(256 * 1024);
    let pieces: Vec<&str> = (0..12).map(|_| piece.as_str()).collect();
    let ((chat, events), grew) = row.run(|row, _| grown(row, || Ok(turn_with(row, Reply::text(&pieces)))));
    let text: String = events.iter().filter(|e| e["event"] == "delta").filter_map(|e| e["text"].as_str()).collect();
    assert_eq!(text.len(), ANSWER_CAP, "the deltas stop at the cap");
    let n = events.len();
    assert_eq!(events[n - 2]["event"], "stream_end", "{:?}", &events[n - 2..]);
    let detail = error_detail(&events[n - 1]);
    assert!(detail.contains("exceeded 1 MiB") && detail.contains("cut off"), "{detail}");
    // The text up to the cut is the stored answer, on a line of about the cap.
    let history = std::fs::read_to_string(row.server.chat_dir(&chat).join("history.jsonl")).expect("history");
    let lines: Vec<&str> = history.lines().collect();
    assert_eq!(lines.len(), 2, "the user record and the cut answer");
    assert!(lines[1].len() <= ANSWER_CAP + 512, "a {} byte history line", lines[1].len());
    let stored: Value = serde_json::from_str(lines[1]).expect("record");
    assert_eq!((stored["role"].as_str(), stored["content"].as_str()), (Some("assistant"), Some(text.as_str())));
    row.note(&format!("peak RSS +{} MiB", grew >> 20));
    assert!(grew < RSS_GROWTH, "peak RSS grew by {} MiB", grew >> 20);
    let page = row.server.get(&format!("/api/sessions/{chat}/messages?limit=10")).json();
    assert_eq!(page["messages"][1]["content"].as_str().map(str::len), Some(ANSWER_CAP));
}

#[test]
fn tool_call_arguments_past_1_mib_end_the_turn_before_any_call_runs() {
    let mut row = Row::new("model: 1.5 MiB of tool-call arguments", MODEL_ANSWER);
    let fragment = "x".repeat(512 * 1024);
    let call = ToolCallSpec::new("call_big", "write_file", &[&fragment, &fragment, &fragment]);
    let (chat, events) = row.run(|row, _| Ok(turn_with(row, Reply::tool_calls(&[call]))));
    assert!(events.iter().all(|e| e["event"] != "tool_call" && e["event"] != "tool_result"), "{events:?}");
    let last = events.last().expect("events");
    assert!(error_detail(last).contains("tool-call arguments exceeded 1 MiB"), "{last}");
    assert_eq!(history_summary(&row.server.home, &chat), rows(&[]), "nothing was streamed, nothing stored");
    assert_eq!(std::fs::read_dir(row.workspace()).expect("workspace").count(), 0, "no tool ran");
}

/// A history line written as the store writes records (`role` before `content`).
fn record_line(cursor: u64, role: &str, content: &str) -> String {
    format!(r#"{{"cursor":{cursor},"timestamp":"2026-12-02 10:00","role":"{role}","content":{}}}"#, json!(content))
}

#[test]
fn paging_a_chat_with_a_64_mib_line_is_quick_and_serves_it_cut() {
    let mut row = Row::new("paging: a chat holding one 64 MiB line", PAGING_LONG_LINE);
    let chat = "long-line-chat";
    let dir = row.server.chat_dir(chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    let long = record_line(2, "assistant", &"b".repeat(64 * MIB));
    let long_len = long.len();
    let history = [record_line(1, "user", "q1"), long, record_line(3, "user", "q2"), record_line(4, "assistant", "a2")]
        .join("\n")
        + "\n";
    std::fs::write(dir.join("history.jsonl"), history).expect("history");
    let answer = row.run(|row, _| Ok(row.server.get(&format!("/api/sessions/{chat}/messages?limit=50"))));
    assert!(answer.body.len() < ITEM_CAP + 4096, "a {} byte page", answer.body.len());
    let page = answer.json();
    assert_eq!((answer.status, &page["total"], &page["start"]), (200, &json!(4), &json!(0)));
    let items = page["messages"].as_array().expect("messages");
    let texts: Vec<&str> = items.iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!((texts[0], texts[2], texts[3]), ("q1", "q2", "a2"));
    let cut = texts[1];
    let (kept, note) = cut.split_once("\n\n[Cut here: ").expect("the cut item's note");
    assert!(kept.len() > ITEM_CAP - 200 && kept.len() < ITEM_CAP && kept.bytes().all(|b| b == b'b'), "{}", kept.len());
    assert!(note.starts_with(&format!("this message is {long_len} bytes")), "{note}");
    // The whole list (no `limit`) cuts the item the same way.
    let whole = row.server.get(&format!("/api/sessions/{chat}/messages"));
    assert!(whole.body.len() < ITEM_CAP + 4096, "a {} byte list", whole.body.len());
    assert_eq!(whole.json()["messages"][1]["content"].as_str(), Some(cut));
}

/// `GET …/messages` never runs on the HTTP thread, and the paging index's lock is not held
/// while an answer is made: a client that asks for a 12 MiB page and reads nothing holds the
/// thread writing it (the answer is larger than the socket buffers), and health and another
/// chat's page still answer. A FIFO where a history belongs is refused at once.
#[test]
fn a_page_nobody_reads_holds_up_neither_health_nor_other_chats() {
    let server = TestServer::start();
    let (stuck, other, fifo_chat) = ("stuck-chat", "other-chat", "fifo-chat");
    for c in [stuck, other, fifo_chat] {
        std::fs::create_dir_all(server.chat_dir(c)).expect("chat dir");
    }
    let long: Vec<String> = (1..=6).map(|i| record_line(i, "assistant", &"c".repeat(3 * MIB))).collect();
    std::fs::write(server.chat_dir(stuck).join("history.jsonl"), long.join("\n") + "\n").expect("history");
    std::fs::write(server.chat_dir(other).join("history.jsonl"), record_line(1, "user", "hi") + "\n").expect("history");
    let fifo = server.chat_dir(fifo_chat).join("history.jsonl");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());

    // A receive buffer of a few KiB, set before connecting, keeps the window small.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    sock.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], server.http_port));
    sock.connect(&addr.into()).expect("connect");
    let mut slow: TcpStream = sock.into();
    let port = server.http_port;
    write!(
        slow,
        "GET /api/sessions/{stuck}/messages?limit=50 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    // The answer has begun: its thread is now writing 12 MiB that cannot all be buffered.
    slow.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut first = [0u8; 12];
    slow.read_exact(&mut first).expect("the start of the answer");
    assert_eq!(&first, b"HTTP/1.1 200");

    server.get("/api/health").expect(200, json!({"status":"ok","service":"cashcode"}));
    let page = server.get(&format!("/api/sessions/{other}/messages?limit=10")).json();
    assert_eq!((&page["total"], &page["messages"][0]["content"]), (&json!(1), &json!("hi")));
    let refused = server.get(&format!("/api/sessions/{fifo_chat}/messages?limit=10"));
    assert_eq!((refused.status, refused.json()), (500, json!({"detail": "unable to read the session"})));

    // The page nobody read is whole once it is read.
    let mut rest = Vec::new();
    slow.read_to_end(&mut rest).expect("the rest of the answer");
    let text = String::from_utf8_lossy(&rest);
    assert!(rest.len() > 12 * MIB && text.contains(r#""start":0,"total":6}"#), "{} bytes", rest.len());
}

/// Dream distilling a history that holds one 64 MiB line (unbounded: every history was read
/// and parsed whole, the line and its record in memory at once).
const DREAM_LONG_LINE: Duration = Duration::from_secs(20);

#[test]
fn dream_over_a_history_with_a_64_mib_line_reads_it_bounded() {
    let mut row = Row::new("dream: a pending history with one 64 MiB line", DREAM_LONG_LINE);
    let chat = "dream-long-line";
    let dir = row.server.chat_dir(chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    let history = [
        record_line(1, "user", "tell me everything"),
        record_line(2, "assistant", &"d".repeat(64 * MIB)),
        record_line(3, "user", "thanks"),
    ]
    .join("\n")
        + "\n";
    std::fs::write(dir.join("history.jsonl"), history).expect("history");
    std::fs::write(dir.join(".cursor"), "3").expect("cursor");
    // A turn names the model Dream uses.
    let (_, events) = turn_with(&row, Reply::text(&["ok"]));
    assert_eq!(events.last().map(|e| e["event"].clone()), Some(json!("done")));
    row.fake.push_completion(Reply::completion("Add: the user asked for everything."));
    row.fake.push_completion(Reply::completion("- asked for everything"));
    let (run, grew) = row.run(|row, deadline| {
        grown(row, || {
            let r = row.server.post("/api/dream/run", &json!({}));
            if r.status != 202 {
                return Err(format!("run now: {} {}", r.status, r.body));
            }
            loop {
                let last = row.server.get("/api/dream").json()["last_run"].clone();
                if !last.is_null() {
                    return Ok(last);
                }
                if deadline.passed() {
                    return Err("the run did not finish within the bound".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    });
    assert_eq!(run["outcome"], "written", "{run}");
    let asked: Vec<String> = row
        .fake
        .requests()
        .iter()
        .filter(|r| r.is_chat() && r.body["stream"] != json!(true))
        .filter_map(|r| r.body["messages"][1]["content"].as_str().map(str::to_string))
        .collect();
    let transcript = &asked[0];
    assert!(transcript.contains("USER: tell me everything") && transcript.contains("ASSISTANT: ddd"));
    assert!(transcript.len() < 64 * 1024, "a {} byte transcript", transcript.len());
    row.note(&format!("peak RSS +{} MiB", grew >> 20));
    assert!(grew < RSS_GROWTH, "peak RSS grew by {} MiB", grew >> 20);
}

/// Binding a chat to a project (src/projects.rs): a request crafted to leave the allowed roots.
const PROJECT_BIND: Duration = Duration::from_secs(5);

/// Project paths a model-steered client could send: `..` out of the workspace, a symlink
/// planted in the workspace pointing out, the server's own directories and their parent, a
/// 100,000-character path, NUL, a relative path. Each is refused by both doors (`new_chat` and
/// `POST /api/sessions`) and creates nothing.
#[test]
fn project_paths_crafted_to_escape_are_refused() {
    let mut row = Row::new("projects: escapes by .., symlinks, server dirs, huge", PROJECT_BIND);
    let ws_dir = row.workspace().canonicalize().expect("workspace");
    let home = row.server.home.canonicalize().expect("home");
    std::fs::create_dir_all(home.join("outside")).expect("outside");
    std::os::unix::fs::symlink(home.join("outside"), ws_dir.join("planted")).expect("symlink");
    let w = ws_dir.display().to_string();
    let h = home.display().to_string();
    let attempts = vec![
        format!("{w}/.."),
        format!("{w}/../outside"),
        format!("{w}/planted"),
        format!("{w}/planted/."),
        format!("{h}/data"),
        format!("{h}/data/skills"),
        format!("{h}/memory"),
        format!("{h}/logs"),
        h.clone(),
        "/".to_string(),
        format!("/{}", "a/".repeat(50_000)),
        format!("{w}/\u{0}x"),
        "workspace".to_string(),
    ];
    row.run(|row, deadline| {
        let mut ws = WsClient::connect(&row.server);
        for p in &attempts {
            if deadline.passed() {
                return Err("out of time".into());
            }
            ws.send(&json!({"type": "new_chat", "project": p}));
            let v = ws.recv();
            if v["event"] != "error" {
                return Err(format!("new_chat with project {:?} was accepted: {v}", head(p)));
            }
            let r = row.server.post("/api/sessions", &json!({"project": p}));
            if r.status != 422 {
                return Err(format!("POST /api/sessions with {:?}: {} {}", head(p), r.status, head(&r.body)));
            }
        }
        Ok(())
    });
    assert_eq!(
        row.server.get("/api/sessions").json()["sessions"].as_array().map_or(0, Vec::len),
        1,
        "only the follow-up's chat"
    );
}
