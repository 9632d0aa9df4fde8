//! Shared test harness: the server process ([`server`]), the scripted fake LLM ([`fake_llm`]),
//! the WebSocket client ([`ws`]) and small helpers (deadlines, temp homes, fixtures, JSON checks).
//! Everything here runs on the test's own thread except the fake LLM, which has its own threads.

#![allow(dead_code, unused_imports)]

pub mod fake_llm;
pub mod server;
pub mod stats;
pub mod ws;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

pub use fake_llm::{FakeLlm, Gate, Reply, Strict, ToolCallSpec, DEEPSEEK_400, GEMINI_400};
pub use server::{HttpResp, TestServer};
pub use ws::WsClient;

/// The API key every test configures; tests grep responses and logs for its tail.
pub const TEST_KEY: &str = "sk-test-SECRET123456";
/// The part of [`TEST_KEY`] that must never appear outside llm.json.
pub const KEY_MARKER: &str = "SECRET123456";
/// The model id tests send; the server does not check it against discovery.
pub const MODEL: &str = "test-model";
/// Default bound for anything the server should do "soon" (generous: debug builds on a busy box).
pub const WAIT: Duration = Duration::from_secs(15);

/// A point in time after which a wait gives up.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(pub Instant);

impl Deadline {
    pub fn after(d: Duration) -> Self {
        Deadline(Instant::now() + d)
    }
    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }
    pub fn remaining(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }
}

/// Polls `f` until it returns `Some` or `within` passes; panics with `what` on timeout.
pub fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Deadline::after(within);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if deadline.passed() {
            panic!("timed out after {within:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

static HOME_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The set-up most chat tests share: the scripted model, a server configured for it, one
/// WebSocket client and its default chat. Destructured, the locals drop as they would have
/// been declared: the client first, the model last.
pub struct OneChat {
    pub fake: FakeLlm,
    pub server: TestServer,
    pub ws: WsClient,
    pub chat: String,
}

pub fn one_chat() -> OneChat {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    OneChat { fake, server, ws, chat }
}

/// A fresh, empty directory under the system temp dir, unique per process and call.
pub fn fresh_home(tag: &str) -> PathBuf {
    let n = HOME_COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "cashcode-{tag}-{}-{n}-{}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp home");
    dir
}

/// `tests/fixtures/<rel>`.
/// The checkout's `.venv/bin/python`, asserted to import the MCP SDK (`scripts/setup.sh`).
pub fn venv_python() -> PathBuf {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let ok = std::process::Command::new(&py)
        .args(["-c", "import mcp.server.fastmcp"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{} with the MCP SDK is missing: run `bash scripts/setup.sh`", py.display());
    py
}

/// Waits for the context-length lookup a chat's first turn starts in the background (one
/// `GET …/models` or `POST …/api/show`); returns how many requests the fake has had, a count
/// that then stays put until the test makes the server call the provider again.
pub fn settle_context_lookup(fake: &FakeLlm) -> usize {
    wait_for("the context-length lookup", WAIT, || fake.requests().iter().any(|r| !r.is_chat()).then_some(()));
    fake.requests().len()
}

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

/// Copies a fixture tree into `dst`, replacing `{{BASE}}` in every file with `base`.
pub fn copy_fixture_tree(src: &Path, dst: &Path, base: &str) {
    std::fs::create_dir_all(dst).expect("create fixture destination");
    for entry in std::fs::read_dir(src).expect("read fixture dir") {
        let entry = entry.expect("fixture entry");
        let from = entry.path();
        let to = dst.join(entry.file_name());
        if from.is_dir() {
            copy_fixture_tree(&from, &to, base);
        } else {
            let bytes = std::fs::read(&from).expect("read fixture");
            let bytes = match String::from_utf8(bytes) {
                Ok(text) => text.replace("{{BASE}}", base).into_bytes(),
                Err(e) => e.into_bytes(),
            };
            std::fs::write(&to, bytes).expect("write fixture");
        }
    }
}

/// A WebSocket `message` frame with an llm selection.
pub fn msg(chat_id: &str, content: &str, provider: &str) -> Value {
    json!({"type":"message","chat_id":chat_id,"content":content,
           "metadata":{"llm":{"provider":provider,"model":MODEL}}})
}

/// The PUT /api/settings/llm body pointing both providers at `base`.
pub fn llm_body(openai_base: &str, ollama_base: &str) -> Value {
    json!({"openai_compatible":{"base_url":openai_base,"api_key":TEST_KEY},
           "ollama":{"base_url":ollama_base}})
}

/// A loopback port with nothing listening (bound then released).
pub fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    port
}

/// Reads `<home>/memory/<chat>/history.jsonl` as parsed records (unparsable lines panic).
pub fn history_records(home: &Path, chat: &str) -> Vec<Value> {
    let path = home.join("memory").join(chat).join("history.jsonl");
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("unparsable history line {l:?}: {e}")))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("read {}: {e}", path.display()),
    }
}

/// History records reduced to (cursor, role, content), checking the timestamp format.
pub fn history_summary(home: &Path, chat: &str) -> Vec<(u64, String, String)> {
    history_records(home, chat)
        .iter()
        .map(|r| {
            let ts = r["timestamp"].as_str().expect("timestamp string");
            assert!(is_minute_stamp(ts), "timestamp {ts:?} is not YYYY-MM-DD HH:MM");
            (
                r["cursor"].as_u64().expect("cursor int"),
                r["role"].as_str().expect("role").to_string(),
                r["content"].as_str().expect("content").to_string(),
            )
        })
        .collect()
}

/// Shorthand for expected history rows.
pub fn rows(items: &[(u64, &str, &str)]) -> Vec<(u64, String, String)> {
    items.iter().map(|(c, r, t)| (*c, r.to_string(), t.to_string())).collect()
}

fn digits(s: &str, idx: &[usize]) -> bool {
    idx.iter().all(|&i| s.as_bytes().get(i).is_some_and(u8::is_ascii_digit))
}

/// `YYYY-MM-DD HH:MM`.
pub fn is_minute_stamp(s: &str) -> bool {
    s.len() == 16
        && digits(s, &[0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15])
        && &s[4..5] == "-"
        && &s[7..8] == "-"
        && &s[10..11] == " "
        && &s[13..14] == ":"
}

/// `YYYY-MM-DDTHH:MM:SS` (no offset).
pub fn is_naive_iso(s: &str) -> bool {
    s.len() == 19
        && digits(s, &[0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18])
        && &s[4..5] == "-"
        && &s[7..8] == "-"
        && &s[10..11] == "T"
        && &s[13..14] == ":"
        && &s[16..17] == ":"
}

/// `YYYY-MM-DDTHH:MM:SS+HH:MM` (servers run with TZ=UTC, so the offset is `+00:00`).
pub fn is_offset_iso(s: &str) -> bool {
    s.len() == 25 && is_naive_iso(&s[..19]) && &s[19..] == "+00:00"
}

/// Lowercase hyphenated uuid4.
pub fn is_uuid4(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && s.chars()
            .enumerate()
            .all(|(i, c)| [8, 13, 18, 23].contains(&i) || c.is_ascii_digit() || ('a'..='f').contains(&c))
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// UTC `YYYY-MM-DDTHH:MM:SS` of a system time (the servers run with TZ=UTC).
pub fn utc_naive_iso(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).expect("after epoch").as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Chat-scoped events of one turn with their variable parts checked and masked, so tests can
/// compare whole values: `seq` must run consecutively from `first_seq` and is removed;
/// `stream_id` must be one positive integer < 2^53 for the whole turn and becomes `"SID"`;
/// `duration_sec` must be a non-negative number and becomes `"DUR"`; `updated_at` must be a
/// local ISO-8601 time with offset and becomes `"TS"`. Returns the masked events and the seq
/// of the last one.
pub fn mask_turn(events: &[Value], first_seq: u64) -> (Vec<Value>, u64) {
    let mut sid: Option<u64> = None;
    let mut seq = first_seq;
    let mut out = Vec::new();
    for ev in events {
        let original = ev;
        let mut ev = ev.clone();
        let obj = ev.as_object_mut().expect("event is an object");
        let got = obj.remove("seq").unwrap_or_else(|| panic!("chat-scoped event without seq: {original:?}"));
        assert_eq!(got, json!(seq), "seq out of order at event {original:?}");
        seq += 1;
        if let Some(s) = obj.get_mut("stream_id") {
            let n = s.as_u64().expect("stream_id is a positive integer");
            assert!(n > 0 && n < (1u64 << 53), "stream_id {n} out of range");
            match sid {
                None => sid = Some(n),
                Some(prev) => assert_eq!(prev, n, "stream_id changed within one turn"),
            }
            *s = json!("SID");
        }
        if let Some(d) = obj.get_mut("duration_sec") {
            let f = d.as_f64().expect("duration_sec is a number");
            assert!((0.0..600.0).contains(&f), "duration_sec {f} out of range");
            *d = json!("DUR");
        }
        if let Some(t) = obj.get_mut("updated_at") {
            let s = t.as_str().expect("updated_at is a string");
            assert!(is_offset_iso(s), "updated_at {s:?} is not ISO-8601 with offset");
            *t = json!("TS");
        }
        out.push(ev);
    }
    (out, seq - 1)
}

/// The stream_id of the first event of `events` that carries one.
pub fn stream_id_of(events: &[Value]) -> u64 {
    events.iter().find_map(|e| e["stream_id"].as_u64()).expect("an event with a stream_id")
}

pub fn ev_delta(chat: &str, text: &str) -> Value {
    json!({"event":"delta","chat_id":chat,"text":text,"stream_id":"SID"})
}
pub fn ev_end(chat: &str) -> Value {
    json!({"event":"stream_end","chat_id":chat,"stream_id":"SID"})
}
pub fn ev_done(chat: &str) -> Value {
    json!({"event":"done","chat_id":chat,"duration_sec":"DUR"})
}
pub fn ev_title(chat: &str, title: &str) -> Value {
    json!({"event":"session_updated","chat_id":chat,"title":title,"updated_at":"TS"})
}

/// Expected masked events of a plain streamed answer.
pub fn plain_answer(chat: &str, title: Option<&str>, chunks: &[&str]) -> Vec<Value> {
    let mut v = Vec::new();
    if let Some(t) = title {
        v.push(ev_title(chat, t));
    }
    v.extend(chunks.iter().map(|c| ev_delta(chat, c)));
    v.push(ev_end(chat));
    v.push(ev_done(chat));
    v
}

/// Splits an error event's detail off: returns (detail, the event masked like [`mask_turn`]).
pub fn error_detail(ev: &Value) -> String {
    assert_eq!(ev["event"], "error", "expected an error event, got {ev:?}");
    ev["detail"].as_str().expect("error detail string").to_string()
}

/// Messages of the recorded chat request (its `messages` array).
pub fn req_messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().expect("messages array").clone()
}

/// The (role, content) pairs of request messages after the first (system) one.
pub fn convo(body: &Value) -> Vec<(String, String)> {
    req_messages(body)
        .iter()
        .skip(1)
        .map(|m| (m["role"].as_str().unwrap_or("").to_string(), m["content"].as_str().unwrap_or("").to_string()))
        .collect()
}

pub fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// A plain HTTP client for tests: statuses are answers, not errors; no proxy; one overall timeout.
pub fn http_agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).proxy(None).timeout_global(Some(timeout)).build().into()
}

/// `GET /api/health` on its own thread; its status if it came within `within` (a server that
/// stalls shows as `None`, never as a hung test).
pub fn health_within(server: &TestServer, within: Duration) -> Option<u16> {
    let port = server.http_port;
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let agent = http_agent(Duration::from_secs(30));
        let r = agent.get(format!("http://127.0.0.1:{port}/api/health")).call();
        let _ = tx.send(r.map(|r| r.status().as_u16()).ok());
    });
    rx.recv_timeout(within).ok().flatten()
}

/// A loopback HTTP server answering every request with `body` as `content_type`; its URL ends in
/// `/page`. It stops when the returned sender is dropped (it polls with a timeout).
pub fn static_http(body: impl Into<String>, content_type: &'static str) -> (String, crossbeam_channel::Sender<()>) {
    let body = body.into();
    let server = tiny_http::Server::http("127.0.0.1:0").expect("bind local http");
    let port = server.server_addr().to_ip().expect("ip addr").port();
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    std::thread::spawn(move || loop {
        if matches!(rx.try_recv(), Err(crossbeam_channel::TryRecvError::Disconnected)) {
            return;
        }
        if let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(50)) {
            let header = tiny_http::Header::from_bytes("Content-Type", content_type).expect("header");
            let _ = req.respond(tiny_http::Response::from_string(body.clone()).with_header(header));
        }
    });
    (format!("http://127.0.0.1:{port}/page"), tx)
}

/// Everything the server sends on `s` until it closes the connection (a reset after the answer,
/// with bytes of ours unread, counts as the close); panics if it is still open after `within`.
pub fn until_closed(mut s: std::net::TcpStream, within: Duration) -> String {
    let deadline = Deadline::after(within);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        s.set_read_timeout(Some(deadline.remaining().max(Duration::from_millis(1)))).expect("timeout");
        match std::io::Read::read(&mut s, &mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // The server closed with bytes of ours unread: the kernel resets after the answer.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!(
                    "the connection was still open after {within:?}; got so far: {:?}",
                    String::from_utf8_lossy(&out)
                )
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
