//! Transports move JSON-RPC text between us and one MCP server; the [`Inbox`] is what their
//! reader threads feed: it routes responses by id to the waiting caller's `bounded(1)` channel,
//! records progress, flags `tools/list_changed`, and answers server requests (`ping` -> `{}`,
//! anything else -> -32601) through the transport's non-blocking replier.
//!
//! Threads: each transport spawns its own reader thread(s) (named `mcp-<server>-…`); callers
//! block only on their own reply channel with a deadline (see `client.rs`).

pub mod sse;
pub mod stdio;
pub mod streamable_http;

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Value};

use super::jsonrpc::{self, Id, Message};
use super::{Error, Result};
use crate::util::{redact, text};

/// What a caller's reply channel carries: the `result`, or why there is none.
pub type Reply = Result<Value>;

/// How to reach one server, after catalog resolution (absolute args, resolved command).
#[derive(Debug, Clone, PartialEq)]
pub enum TransportSpec {
    Stdio(StdioSpec),
    Sse(HttpSpec),
    StreamableHttp(HttpSpec),
}

#[derive(Debug, Clone, PartialEq)]
pub struct StdioSpec {
    pub command: String,
    pub args: Vec<String>,
    /// Overlaid on the allow-listed parent variables.
    pub env: BTreeMap<String, String>,
    /// Working directory of the child (the project root when known).
    pub cwd: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpSpec {
    pub url: String,
    pub headers: BTreeMap<String, String>,
}

impl TransportSpec {
    /// Values that must never appear in errors or logs: header values and env values whose
    /// key looks secret.
    pub fn secrets(&self) -> Vec<String> {
        match self {
            TransportSpec::Stdio(s) => s.env.iter().filter(|(k, _)| is_secret_key(k)).map(|(_, v)| v.clone()).collect(),
            TransportSpec::Sse(h) | TransportSpec::StreamableHttp(h) => h.headers.values().cloned().collect(),
        }
    }
}

/// Env keys whose values are treated as secrets (tools-and-mcp.md §11).
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["key", "token", "secret", "password"].iter().any(|w| k.contains(w))
}

/// What is being sent, so HTTP transports know whether a reply body is expected.
#[derive(Debug, Clone, Copy)]
pub enum Outgoing<'a> {
    Request(&'a Id),
    Notification,
    Response,
}

/// Bytes in and out for one server connection.
pub trait Transport: Send + Sync {
    /// Sends one compact JSON-RPC message; waits at most `timeout` for the hand-off.
    /// A request's reply is delivered to the [`Inbox`], never returned here.
    fn send(&self, msg: String, kind: Outgoing<'_>, timeout: Duration) -> Result<()>;
    /// The negotiated protocol version (Streamable HTTP sends it as a header).
    fn set_protocol_version(&self, _version: &str) {}
    /// Called after the initialize reply and before `notifications/initialized`, so a
    /// server-to-client stream exists before the server starts announcing changes (Streamable
    /// HTTP opens its GET stream here; server-everything sends `tools/list_changed` at once).
    fn open_notification_stream(&self) {}
    /// Forgets the server session before a re-initialise (Streamable HTTP after a 404).
    fn reset_session(&self) {}
    /// The server-assigned session id (Streamable HTTP).
    fn session_id(&self) -> Option<String> {
        None
    }
    /// Ends the connection: kills the child or ends the HTTP session. Idempotent, bounded.
    fn close(&self);
}

/// A pending request.
struct Pending {
    tx: Sender<Reply>,
    progress_token: Option<String>,
    progress: Arc<ProgressMark>,
}

/// When the last progress notification for a request arrived.
#[derive(Default)]
pub struct ProgressMark {
    /// Milliseconds since the inbox's epoch, 0 = none yet.
    last_ms: AtomicU64,
    count: AtomicU64,
}

impl ProgressMark {
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

type Replier = Box<dyn Fn(String) + Send + Sync>;

/// Per-connection routing state shared by the transport's reader thread(s) and callers.
pub struct Inbox {
    server: String,
    epoch: Instant,
    pending: Mutex<HashMap<Id, Pending>>,
    closed: Mutex<Option<String>>,
    list_changed: AtomicBool,
    garbage_lines: AtomicU64,
    replier: OnceLock<Replier>,
    secrets: Vec<String>,
}

/// How many unparsable messages are logged per connection before going quiet.
const MAX_GARBAGE_LOGS: u64 = 5;

impl Inbox {
    pub fn new(server: &str, secrets: Vec<String>) -> Arc<Inbox> {
        Arc::new(Inbox {
            server: server.to_string(),
            epoch: Instant::now(),
            pending: Mutex::new(HashMap::new()),
            closed: Mutex::new(None),
            list_changed: AtomicBool::new(false),
            garbage_lines: AtomicU64::new(0),
            replier: OnceLock::new(),
            secrets,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// Installs how server requests are answered (must not block: queue or spawn).
    pub fn set_replier(&self, f: Replier) {
        let _ = self.replier.set(f);
    }

    /// Registers `id` before its request is written, so a fast reply cannot be lost.
    pub fn register(&self, id: Id, progress_token: Option<String>) -> Result<(Receiver<Reply>, Arc<ProgressMark>)> {
        if let Some(reason) = self.closed_reason() {
            return Err(Error::Closed(reason));
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let progress = Arc::new(ProgressMark::default());
        lock(&self.pending).insert(id, Pending { tx, progress_token, progress: progress.clone() });
        Ok((rx, progress))
    }

    /// Drops a pending entry (timeout, cancel, send failure); a late reply is then ignored.
    pub fn forget(&self, id: &Id) {
        lock(&self.pending).remove(id);
    }

    /// Delivers a transport-level outcome for `id` (Streamable HTTP POST failures).
    pub fn deliver(&self, id: &Id, reply: Reply) {
        if let Some(p) = lock(&self.pending).remove(id) {
            let _ = p.tx.try_send(reply);
        }
    }

    pub fn is_pending(&self, id: &Id) -> bool {
        lock(&self.pending).contains_key(id)
    }

    /// Marks the connection dead and fails every waiter with `reason` (first reason wins).
    pub fn close(&self, reason: &str) {
        let reason = {
            let mut closed = lock(&self.closed);
            if closed.is_none() {
                *closed = Some(self.redact(reason));
            }
            closed.clone().unwrap_or_default()
        };
        let drained: Vec<Pending> = lock(&self.pending).drain().map(|(_, p)| p).collect();
        for p in drained {
            let _ = p.tx.try_send(Err(Error::Closed(reason.clone())));
        }
    }

    pub fn closed_reason(&self) -> Option<String> {
        lock(&self.closed).clone()
    }

    /// True once after the server announced `notifications/tools/list_changed`.
    pub fn take_list_changed(&self) -> bool {
        self.list_changed.swap(false, Ordering::SeqCst)
    }

    pub fn garbage_lines(&self) -> u64 {
        self.garbage_lines.load(Ordering::SeqCst)
    }

    /// Last progress time of a registered request's mark, if any arrived.
    pub fn last_progress(&self, mark: &ProgressMark) -> Option<Instant> {
        match mark.last_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(self.epoch + Duration::from_millis(ms)),
        }
    }

    /// Redacts known secrets and generic secret shapes from text about this connection.
    pub fn redact(&self, s: &str) -> String {
        let known: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        redact::redact_with(s, &known)
    }

    /// Handles one inbound text frame (a stdio line or an SSE `data`).
    pub fn handle_text(&self, text: &str) {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return;
        }
        match jsonrpc::parse(trimmed) {
            Ok(msgs) => {
                for m in msgs {
                    match m {
                        Ok(m) => self.handle_message(m),
                        Err(why) => self.garbage(&why, trimmed),
                    }
                }
            }
            Err(why) => self.garbage(&why, trimmed),
        }
    }

    fn garbage(&self, why: &str, text: &str) {
        let n = self.garbage_lines.fetch_add(1, Ordering::SeqCst) + 1;
        if n <= MAX_GARBAGE_LOGS {
            // Size and reason only: the text may be tool output, which logs never hold.
            log::warn!(
                "event=mcp.message.unparsable server={} reason={:?} bytes={}",
                self.server,
                text::take_chars(why, 120),
                text.len()
            );
        }
    }

    fn handle_message(&self, msg: Message) {
        match msg {
            Message::Response { id, outcome } => {
                let entry = lock(&self.pending).remove(&id);
                match entry {
                    Some(p) => {
                        let reply = outcome.map_err(|e| Error::Rpc {
                            code: e.code,
                            message: self.redact(text::take_chars(&e.message, 1000)),
                        });
                        let _ = p.tx.try_send(reply);
                    }
                    // A reply to a timed-out or cancelled request: ignore it.
                    None => log::debug!("mcp {}: reply for unknown id {id}", self.server),
                }
            }
            Message::Notification { method, params } => self.handle_notification(&method, params),
            Message::Request { id, method, .. } => {
                let reply = if method == "ping" {
                    jsonrpc::response_ok(&id, json!({}))
                } else {
                    log::debug!("mcp {}: refusing server request '{method}'", self.server);
                    jsonrpc::response_err(&id, jsonrpc::METHOD_NOT_FOUND, "Method not found")
                };
                match self.replier.get() {
                    Some(r) => r(reply),
                    None => log::warn!("mcp {}: no replier for server request", self.server),
                }
            }
        }
    }

    fn handle_notification(&self, method: &str, params: Option<Value>) {
        match method {
            "notifications/progress" => {
                let token = params.as_ref().and_then(|p| p.get("progressToken")).map(token_text);
                let Some(token) = token else { return };
                let now_ms = (self.epoch.elapsed().as_millis() as u64).max(1);
                let pending = lock(&self.pending);
                if let Some(p) = pending.values().find(|p| p.progress_token.as_deref() == Some(&token)) {
                    p.progress.last_ms.store(now_ms, Ordering::SeqCst);
                    p.progress.count.fetch_add(1, Ordering::SeqCst);
                }
            }
            "notifications/tools/list_changed" => {
                log::debug!("mcp {}: tools/list_changed", self.server);
                self.list_changed.store(true, Ordering::SeqCst);
            }
            "notifications/message" => {
                let data = params.map(|p| p.to_string()).unwrap_or_default();
                log::debug!("mcp {} log: {}", self.server, self.redact(text::take_chars(&data, 300)));
            }
            // Other notifications (resources, cancelled, …) are not used by this client.
            _ => {}
        }
    }
}

/// Progress tokens compare as text so `5` and `"5"` from a sloppy server both match.
fn token_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the maps stay valid).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Result of [`read_capped_line`].
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    Line,
    Eof,
    /// The line exceeded the cap; its remainder was consumed and `buf` holds the first `max` bytes.
    TooLong,
}

/// Reads one `\n`-terminated line into `buf` (terminator and a trailing CR stripped) without
/// ever holding more than `max` bytes of it.
pub fn read_capped_line(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<LineRead> {
    buf.clear();
    let mut too_long = false;
    let mut any = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            if !any {
                return Ok(LineRead::Eof);
            }
            break;
        }
        any = true;
        let (part, done, used) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (&chunk[..i], true, i + 1),
            None => (chunk, false, chunk.len()),
        };
        let room = max.saturating_sub(buf.len());
        if part.len() > room {
            too_long = true;
        }
        buf.extend_from_slice(&part[..part.len().min(room)]);
        r.consume(used);
        if done {
            break;
        }
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(if too_long { LineRead::TooLong } else { LineRead::Line })
}

/// Stack of connection threads: they only parse and route ([`jsonrpc::parse`] bounds how deep).
pub(crate) const CONNECTION_STACK: usize = 256 * 1024;

/// Spawns a named thread with a small stack (connection threads only parse and route).
pub(crate) fn spawn_named(name: String, f: impl FnOnce() + Send + 'static) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name)
        .stack_size(CONNECTION_STACK)
        .spawn(f)
        .map_err(|e| Error::Closed(format!("cannot start a connection thread: {e}")))
}

/// Joins `h` if it finishes before `deadline`; otherwise leaves it detached (a blocked
/// network read cannot be interrupted, and it holds nothing but its own socket).
pub(crate) fn join_until(h: std::thread::JoinHandle<()>, deadline: Instant) {
    while !h.is_finished() {
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = h.join();
}

/// A short, redacted description of an HTTP error body for error messages.
pub(crate) fn body_snippet(inbox: &Inbox, body: &str) -> String {
    let one_line: String = body.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    inbox.redact(text::take_chars(one_line.trim(), 200))
}

/// Settings for the ureq agents of the HTTP transports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpTimeouts {
    pub connect: Duration,
    /// Whole-exchange cap (`None` for long-lived streams).
    pub global: Option<Duration>,
    /// Idle cap per socket read (headers included).
    pub per_read: Option<Duration>,
}

/// One ureq agent: explicit timeouts, status codes as values (we read error bodies), small buffers.
pub(crate) fn http_agent(t: HttpTimeouts) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(t.connect))
        .timeout_global(t.global)
        .timeout_per_read(t.per_read)
        .http_status_as_error(false)
        .max_redirects(5)
        .input_buffer_size(16 * 1024)
        .output_buffer_size(16 * 1024)
        .user_agent(concat!("cashcode-mcp/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// Maps a ureq failure to our error, redacting anything the URL or headers might leak.
pub(crate) fn map_ureq(inbox: &Inbox, e: ureq::Error, what: &str) -> Error {
    match e {
        ureq::Error::Timeout(t) => Error::Connect(format!("{what} timed out ({t})")),
        other => Error::Connect(inbox.redact(&format!("{what} failed: {other}"))),
    }
}

/// Reads at most `limit` bytes of a body as text (error bodies, JSON replies).
pub(crate) fn read_body_text(body: ureq::Body, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut out = Vec::new();
    body.into_reader().take(limit).read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The response's `Content-Type` header, lower-cased.
pub(crate) fn content_type(resp: &ureq::http::Response<ureq::Body>) -> String {
    resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_replies_by_id_and_ignores_unknown_ids() {
        let inbox = Inbox::new("t", vec![]);
        let (rx, _) = inbox.register(Id::Num(1), None).unwrap();
        inbox.handle_text(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
        inbox.handle_text(r#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}"#);
        assert_eq!(rx.try_recv().unwrap().unwrap(), json!({"a": 1}));
        assert!(!inbox.is_pending(&Id::Num(1)));
    }

    #[test]
    fn rpc_errors_are_redacted_and_garbage_is_counted() {
        let inbox = Inbox::new("t", vec!["hunter22".into()]);
        let (rx, _) = inbox.register(Id::Str("x".into()), None).unwrap();
        inbox.handle_text("this is not json");
        inbox.handle_text(r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32000,"message":"bad key hunter22"}}"#);
        match rx.try_recv().unwrap() {
            Err(Error::Rpc { code, message }) => {
                assert_eq!(code, -32000);
                assert_eq!(message, "bad key [REDACTED]");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(inbox.garbage_lines(), 1);
    }

    #[test]
    fn answers_ping_and_refuses_other_server_requests() {
        let inbox = Inbox::new("t", vec![]);
        let (tx, rx) = crossbeam_channel::unbounded();
        inbox.set_replier(Box::new(move |s| {
            let _ = tx.send(s);
        }));
        inbox.handle_text(r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#);
        inbox.handle_text(r#"{"jsonrpc":"2.0","id":10,"method":"sampling/createMessage","params":{}}"#);
        let a: Value = serde_json::from_str(&rx.try_recv().unwrap()).unwrap();
        assert_eq!(a, json!({"jsonrpc":"2.0","id":9,"result":{}}));
        let b: Value = serde_json::from_str(&rx.try_recv().unwrap()).unwrap();
        assert_eq!(b, json!({"jsonrpc":"2.0","id":10,"error":{"code":-32601,"message":"Method not found"}}));
    }

    #[test]
    fn progress_marks_the_matching_request_and_list_changed_sets_a_flag() {
        let inbox = Inbox::new("t", vec![]);
        let (_rx, mark) = inbox.register(Id::Num(4), Some("cc-4".into())).unwrap();
        assert!(inbox.last_progress(&mark).is_none());
        inbox.handle_text(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"cc-4","progress":1,"total":3}}"#);
        assert!(inbox.last_progress(&mark).is_some());
        assert_eq!(mark.count(), 1);
        inbox.handle_text(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#);
        assert!(inbox.take_list_changed());
        assert!(!inbox.take_list_changed());
    }

    #[test]
    fn close_fails_waiters_and_refuses_new_registrations() {
        let inbox = Inbox::new("t", vec!["s3cr3t-value".into()]);
        let (rx, _) = inbox.register(Id::Num(1), None).unwrap();
        inbox.close("process exited: token s3cr3t-value");
        match rx.try_recv().unwrap() {
            Err(Error::Closed(r)) => assert_eq!(r, "process exited: token [REDACTED]"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(inbox.register(Id::Num(2), None), Err(Error::Closed(_))));
    }

    #[test]
    fn capped_line_reader_truncates_and_resyncs() {
        let data = b"short\r\nthis line is far too long\nnext\nlast-no-newline";
        let mut r = io::BufReader::with_capacity(4, &data[..]);
        let mut buf = Vec::new();
        assert_eq!(read_capped_line(&mut r, &mut buf, 8).unwrap(), LineRead::Line);
        assert_eq!(buf, b"short");
        assert_eq!(read_capped_line(&mut r, &mut buf, 8).unwrap(), LineRead::TooLong);
        assert_eq!(buf, b"this lin");
        assert_eq!(read_capped_line(&mut r, &mut buf, 8).unwrap(), LineRead::Line);
        assert_eq!(buf, b"next");
        assert_eq!(read_capped_line(&mut r, &mut buf, 64).unwrap(), LineRead::Line);
        assert_eq!(buf, b"last-no-newline");
        assert_eq!(read_capped_line(&mut r, &mut buf, 64).unwrap(), LineRead::Eof);
    }
}
