//! Transports move JSON-RPC text between us and one MCP server; the [`Inbox`] is what their
//! reader threads feed: it routes responses by id to the waiting caller's `bounded(1)` channel,
//! records progress, flags `tools/list_changed`, and answers server requests (`ping` -> `{}`,
//! anything else -> -32601) through the transport's non-blocking replier. On a connection that
//! declared elicitation, `elicitation/create` goes to the one pending call that can ask a user
//! (its caller answers it); with none, or more than one, it is declined here.
//!
//! Threads: each transport spawns its own reader thread(s) (named `mcp-<server>-…`); callers
//! block only on their own reply channel with a deadline (see `client.rs`).

pub(crate) mod sse;
pub(crate) mod stdio;
pub(crate) mod streamable_http;

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Value};

use super::jsonrpc::{self, Id, Message};
use super::messages::{self, ProgressParams};
use super::{Error, Result};
use crate::secrets::is_secret_name;
use crate::util::sync::lock;
use crate::util::url::{self, Origin};
use crate::util::{redact, text};

/// What a caller's reply channel carries: the `result`, or why there is none.
pub(crate) type Reply = Result<Value>;

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
    /// The interpreter a bare `python`/`python3` command runs when it is executable at spawn
    /// time (the checkout's `.venv/bin/python`, see [`crate::mcp::catalog::venv_python`]);
    /// otherwise the command is looked up on `PATH`. Not part of the cache fingerprint.
    pub python: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpSpec {
    pub url: String,
    pub headers: BTreeMap<String, String>,
}

impl TransportSpec {
    /// Values that must never appear in errors or logs: header values and env values whose
    /// key looks secret (docs/tools-and-mcp.md §11; the server-wide [`is_secret_name`]).
    pub(crate) fn secrets(&self) -> Vec<String> {
        match self {
            TransportSpec::Stdio(s) => {
                s.env.iter().filter(|(k, _)| is_secret_name(k)).map(|(_, v)| v.clone()).collect()
            }
            TransportSpec::Sse(h) | TransportSpec::StreamableHttp(h) => h.headers.values().cloned().collect(),
        }
    }
}

/// What is being sent, so HTTP transports know whether a reply body is expected.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outgoing<'a> {
    Request(&'a Id),
    Notification,
    Response,
}

/// Bytes in and out for one server connection.
pub(crate) trait Transport: Send + Sync {
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
    /// Where this call's caller takes the server's `elicitation/create` requests.
    elicit: Option<Sender<ServerRequest>>,
}

/// A server-to-client request handed to a waiting caller: its id and params.
pub(crate) type ServerRequest = (Id, Option<Value>);

/// When the last progress notification for a request arrived.
#[derive(Default)]
pub(crate) struct ProgressMark {
    /// Milliseconds since the inbox's epoch, 0 = none yet.
    last_ms: AtomicU64,
    count: AtomicU64,
}

impl ProgressMark {
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

type Replier = Box<dyn Fn(String) + Send + Sync>;

/// Per-connection routing state shared by the transport's reader thread(s) and callers.
pub(crate) struct Inbox {
    server: String,
    epoch: Instant,
    pending: Mutex<HashMap<Id, Pending>>,
    closed: Mutex<Option<String>>,
    list_changed: AtomicBool,
    garbage_lines: AtomicU64,
    replier: OnceLock<Replier>,
    secrets: Vec<String>,
    /// The connection declared the elicitation capability.
    elicitation: AtomicBool,
}

/// How many unparsable messages are logged per connection before going quiet.
const MAX_GARBAGE_LOGS: u64 = 5;

impl Inbox {
    pub(crate) fn new(server: &str, secrets: Vec<String>) -> Arc<Inbox> {
        Arc::new(Inbox {
            server: server.to_string(),
            epoch: Instant::now(),
            pending: Mutex::new(HashMap::new()),
            closed: Mutex::new(None),
            list_changed: AtomicBool::new(false),
            garbage_lines: AtomicU64::new(0),
            replier: OnceLock::new(),
            secrets,
            elicitation: AtomicBool::new(false),
        })
    }

    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// Installs how server requests are answered (must not block: queue or spawn).
    pub(crate) fn set_replier(&self, f: Replier) {
        let _ = self.replier.set(f);
    }

    /// Set before `initialize` when the client declares elicitation: `elicitation/create` is
    /// then routed to calls registered with [`Inbox::register_eliciting`], else refused -32601.
    pub(crate) fn set_elicitation(&self, on: bool) {
        self.elicitation.store(on, Ordering::SeqCst);
    }

    /// Registers `id` before its request is written, so a fast reply cannot be lost.
    #[cfg(test)]
    pub(crate) fn register(
        &self,
        id: Id,
        progress_token: Option<String>,
    ) -> Result<(Receiver<Reply>, Arc<ProgressMark>)> {
        self.register_eliciting(id, progress_token, None)
    }

    /// [`Inbox::register`] for a call whose caller can ask a user: `elicit` receives the
    /// server's `elicitation/create` requests while the call is pending.
    pub(crate) fn register_eliciting(
        &self,
        id: Id,
        progress_token: Option<String>,
        elicit: Option<Sender<ServerRequest>>,
    ) -> Result<(Receiver<Reply>, Arc<ProgressMark>)> {
        if let Some(reason) = self.closed_reason() {
            return Err(Error::Closed(reason));
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let progress = Arc::new(ProgressMark::default());
        lock(&self.pending).insert(id, Pending { tx, progress_token, progress: progress.clone(), elicit });
        Ok((rx, progress))
    }

    /// Answers a server request (from the reader thread or a caller; never blocks).
    pub(crate) fn reply(&self, line: String) {
        match self.replier.get() {
            Some(r) => r(line),
            None => log::warn!("mcp {}: no replier for server request", self.server),
        }
    }

    /// Drops a pending entry (timeout, cancel, send failure); a late reply is then ignored.
    pub(crate) fn forget(&self, id: &Id) {
        lock(&self.pending).remove(id);
    }

    /// Delivers a transport-level outcome for `id` (Streamable HTTP POST failures).
    pub(crate) fn deliver(&self, id: &Id, reply: Reply) {
        if let Some(p) = lock(&self.pending).remove(id) {
            let _ = p.tx.try_send(reply);
        }
    }

    pub(crate) fn is_pending(&self, id: &Id) -> bool {
        lock(&self.pending).contains_key(id)
    }

    /// Marks the connection dead and fails every waiter with `reason` (first reason wins).
    pub(crate) fn close(&self, reason: &str) {
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

    pub(crate) fn closed_reason(&self) -> Option<String> {
        lock(&self.closed).clone()
    }

    /// True once after the server announced `notifications/tools/list_changed`.
    pub(crate) fn take_list_changed(&self) -> bool {
        self.list_changed.swap(false, Ordering::SeqCst)
    }

    #[cfg(test)]
    pub(crate) fn garbage_lines(&self) -> u64 {
        self.garbage_lines.load(Ordering::SeqCst)
    }

    /// Last progress time of a registered request's mark, if any arrived.
    pub(crate) fn last_progress(&self, mark: &ProgressMark) -> Option<Instant> {
        match mark.last_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(self.epoch + Duration::from_millis(ms)),
        }
    }

    /// Redacts known secrets and generic secret shapes from text about this connection.
    pub(crate) fn redact(&self, s: &str) -> String {
        let known: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        redact::redact_with(s, &known)
    }

    /// Handles one inbound text frame (a stdio line or an SSE `data`).
    pub(crate) fn handle_text(&self, text: &str) {
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
            Message::Request { id, method, params } => {
                let reply = if method == "ping" {
                    jsonrpc::response_ok(&id, json!({}))
                } else if method == "elicitation/create" && self.elicitation.load(Ordering::SeqCst) {
                    match self.route_elicitation(id.clone(), params) {
                        None => return,
                        Some(why) => {
                            log::info!("event=mcp.elicitation.declined server={} reason={why}", self.server);
                            jsonrpc::response_ok(&id, json!({"action": "decline"}))
                        }
                    }
                } else {
                    log::debug!("mcp {}: refusing server request '{method}'", self.server);
                    jsonrpc::response_err(&id, jsonrpc::METHOD_NOT_FOUND, "Method not found")
                };
                self.reply(reply);
            }
        }
    }

    /// Hands an `elicitation/create` to the one pending call whose caller can ask a user.
    /// The wire does not say which call a request belongs to (stdio, SSE), so with several
    /// such calls in flight on one connection it is declined rather than shown in the wrong
    /// chat. `Some(reason)` when it must be declined here.
    fn route_elicitation(&self, id: Id, params: Option<Value>) -> Option<&'static str> {
        let target = {
            let pending = lock(&self.pending);
            let mut askers = pending.values().filter_map(|p| p.elicit.as_ref());
            match (askers.next(), askers.next()) {
                (Some(tx), None) => tx.clone(),
                (None, _) => return Some("no_call_can_ask"),
                (Some(_), Some(_)) => return Some("ambiguous_call"),
            }
        };
        match target.try_send((id, params)) {
            Ok(()) => None,
            Err(_) => Some("too_many_requests"),
        }
    }

    fn handle_notification(&self, method: &str, params: Option<Value>) {
        match method {
            "notifications/progress" => {
                let progress: ProgressParams = messages::read(params);
                let Some(token) = progress.progress_token.as_ref().map(token_text) else { return };
                log::trace!(
                    "mcp {}: progress {:?} of {:?} ({} message chars)",
                    self.server,
                    progress.progress,
                    progress.total,
                    progress.message.as_deref().map_or(0, text::char_len)
                );
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

/// Result of [`read_capped_line`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LineRead {
    Line,
    Eof,
    /// The line exceeded the cap; its remainder was consumed and `buf` holds the first `max` bytes.
    TooLong,
}

/// Reads one `\n`-terminated line into `buf` (terminator and a trailing CR stripped) without
/// ever holding more than `max` bytes of it.
pub(crate) fn read_capped_line(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<LineRead> {
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

/// Joins `h` if it finishes before `deadline`; otherwise leaves it detached and says so (the
/// transports shut their agents' sockets first, so a reader blocked on the network ends too).
pub(crate) fn join_until(h: std::thread::JoinHandle<()>, deadline: Instant) {
    if let Err(name) = crate::util::join::join_until(h, deadline) {
        log::warn!("event=mcp.thread_unfinished thread={name}");
    }
}

/// A short, redacted description of an HTTP error body for error messages.
pub(crate) fn body_snippet(inbox: &Inbox, body: &str) -> String {
    let one_line: String = body.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    inbox.redact(text::take_chars(one_line.trim(), 200))
}

/// Settings for the ureq agents of the HTTP transports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpTimeouts {
    pub(crate) connect: Duration,
    /// Whole-exchange cap (`None` for long-lived streams).
    pub(crate) global: Option<Duration>,
    /// Idle cap per socket read (headers included).
    pub(crate) per_read: Option<Duration>,
}

/// One ureq agent: explicit timeouts, status codes as values (we read error bodies), small
/// buffers, and no redirects of its own (a 3xx comes back as a response; [`send_following`]
/// decides).
pub(crate) fn http_agent(t: HttpTimeouts) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(t.connect))
        .timeout_global(t.global)
        .timeout_per_read(t.per_read)
        .http_status_as_error(false)
        .max_redirects(0)
        .input_buffer_size(16 * 1024)
        .output_buffer_size(16 * 1024)
        .user_agent(concat!("cashcode-mcp/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// Redirects followed for one request (all within the configured origin).
pub(crate) const MAX_REDIRECTS: usize = 5;

/// Sends one request, following redirects by hand and only within the origin of `origin_url`
/// (the configured server URL). The agents never follow redirects themselves: ureq would carry
/// the configured headers (`X-Api-Key` and the like; it drops only `Authorization`) to
/// whatever origin a redirect names. `send` builds and sends the request for one URL, with the
/// headers. 307 and 308 repeat the request as it was; 301, 302 and 303 are followed for `GET`
/// only (a POSTed JSON-RPC message cannot become a GET). A redirect elsewhere is refused with
/// an error naming its origin. Returns the response and the URL that gave it.
pub(crate) fn send_following(
    inbox: &Inbox,
    origin_url: &str,
    url: &str,
    method: &str,
    what: &str,
    mut send: impl FnMut(&str) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<(ureq::http::Response<ureq::Body>, String)> {
    let origin = Origin::of(origin_url).ok_or_else(|| Error::Config("url must be an absolute HTTP(S) URL".into()))?;
    let mut current = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        let resp = send(&current).map_err(|e| map_ureq(inbox, e, what))?;
        let status = resp.status().as_u16();
        let location = resp.headers().get("location").and_then(|v| v.to_str().ok()).map(str::trim).unwrap_or("");
        if !matches!(status, 301 | 302 | 303 | 307 | 308) || location.is_empty() {
            return Ok((resp, current));
        }
        let next = url::join(&current, location).and_then(|n| Some((Origin::of(&n)?, n)));
        let Some((next_origin, next)) = next else {
            return Err(Error::Protocol(format!("{what}: redirected (HTTP {status}) to an invalid URL")));
        };
        if next_origin != origin {
            return Err(Error::Connect(format!(
                "{what}: the server redirected (HTTP {status}) to another origin ({}); the configured headers are \
                 never sent there, so set the server's url to the address it redirects to",
                inbox.redact(text::take_chars(&next_origin.to_string(), 200))
            )));
        }
        if method != "GET" && !matches!(status, 307 | 308) {
            return Err(Error::Connect(format!(
                "{what}: the server answered the {method} with a redirect (HTTP {status}); set the server's url to \
                 the address it redirects to"
            )));
        }
        current = next;
    }
    Err(Error::Connect(format!("{what}: more than {MAX_REDIRECTS} redirects")))
}

/// Maps a ureq failure to our error, redacting anything the URL or headers might leak.
pub(crate) fn map_ureq(inbox: &Inbox, e: ureq::Error, what: &str) -> Error {
    match e {
        ureq::Error::Timeout(t) => Error::Connect(format!("{what} timed out ({t})")),
        ureq::Error::TlsRequired if !cfg!(feature = "tls") => {
            Error::Connect(format!("{what} failed: {}", crate::util::url::TLS_MISSING))
        }
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
    fn elicitation_goes_to_the_one_asking_call_else_is_declined_or_refused() {
        let inbox = Inbox::new("t", vec![]);
        let (tx, rx) = crossbeam_channel::unbounded();
        inbox.set_replier(Box::new(move |s| {
            let _ = tx.send(s);
        }));
        let reply = || serde_json::from_str::<Value>(&rx.try_recv().expect("a reply")).unwrap();
        let ask = |id: i64| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"elicitation/create","params":{{"message":"m"}}}}"#)
        };
        // Not declared: refused as before.
        inbox.handle_text(&ask(1));
        assert_eq!(reply()["error"]["code"], json!(-32601));
        inbox.set_elicitation(true);
        // Declared, but no pending call can ask a user.
        let (_plain, _) = inbox.register(Id::Num(10), None).unwrap();
        inbox.handle_text(&ask(2));
        assert_eq!(reply(), json!({"jsonrpc":"2.0","id":2,"result":{"action":"decline"}}));
        // One asking call: the request is handed over, nothing is answered here.
        let (etx, erx) = crossbeam_channel::bounded(1);
        let (_a, _) = inbox.register_eliciting(Id::Num(11), None, Some(etx)).unwrap();
        inbox.handle_text(&ask(3));
        let (id, params) = erx.try_recv().expect("handed to the caller");
        assert_eq!((id, params), (Id::Num(3), Some(json!({"message": "m"}))));
        assert!(rx.try_recv().is_err());
        // Its queue is full: declined.
        let (etx_full, _erx_full) = crossbeam_channel::bounded(0);
        inbox.forget(&Id::Num(11));
        let (_b, _) = inbox.register_eliciting(Id::Num(12), None, Some(etx_full)).unwrap();
        inbox.handle_text(&ask(4));
        assert_eq!(reply()["result"]["action"], "decline");
        // Two asking calls: which chat it belongs to is unknown, so it is declined.
        let (etx2, erx2) = crossbeam_channel::bounded(1);
        let (_c, _) = inbox.register_eliciting(Id::Num(13), None, Some(etx2)).unwrap();
        inbox.handle_text(&ask(5));
        assert_eq!(reply()["result"]["action"], "decline");
        assert!(erx2.try_recv().is_err());
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

    /// Tokens compare as text; progress and total of any type, or params that are not an
    /// object, never stop the reading.
    #[test]
    fn progress_tokens_compare_as_text_and_odd_params_are_ignored() {
        let inbox = Inbox::new("t", vec![]);
        let (_rx, mark) = inbox.register(Id::Num(4), Some("5".into())).unwrap();
        let note = |params: &str| format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{params}}}"#);
        for params in ["5", "[]", r#"{"progress":1}"#, r#"{"progressToken":"6"}"#, r#"{"progressToken":null}"#] {
            inbox.handle_text(&note(params));
        }
        inbox.handle_text(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#);
        assert_eq!(mark.count(), 0);
        inbox.handle_text(&note(r#"{"progressToken":5,"progress":"half","total":{},"message":7}"#));
        inbox.handle_text(&note(r#"{"progressToken":"5","progress":2,"total":3,"message":"two"}"#));
        assert_eq!(mark.count(), 2);
        assert_eq!(inbox.garbage_lines(), 0);
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

    /// One loopback origin for the redirect tests: a plain listener on its own port (raw
    /// HTTP/1.1, so an event stream is flushed at once), each connection answered on its own
    /// thread by `reply(method, path)` and recorded with whether it carried
    /// [`REDIRECT_SECRET`]. Dropping it ends open streams and the accept thread.
    struct Origin {
        port: u16,
        seen: Arc<Mutex<Vec<(String, String, bool)>>>,
        stop: Arc<AtomicBool>,
        _streams_open: Sender<()>,
    }

    const REDIRECT_SECRET: &str = "hdr-secret-0xC0FFEE";

    enum Answer {
        Status(u16, Option<String>),
        Json(&'static str),
        /// An event stream that sends this and stays open until the origin is dropped.
        Stream(&'static str),
    }

    fn origin(reply: impl Fn(&str, &str) -> Answer + Send + Sync + 'static) -> Origin {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (open_tx, open_rx) = crossbeam_channel::bounded::<()>(0);
        let (log, reply, halt) = (seen.clone(), Arc::new(reply), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if halt.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut s) = conn else { continue };
                let (log, reply, open_rx) = (log.clone(), reply.clone(), open_rx.clone());
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&got).to_string();
                    let mut words = head.split_whitespace();
                    let (method, path) =
                        (words.next().unwrap_or("").to_string(), words.next().unwrap_or("").to_string());
                    lock(&log).push((method.clone(), path.clone(), head.contains(REDIRECT_SECRET)));
                    let out = match reply(&method, &path) {
                        Answer::Status(code, location) => {
                            let loc = location.map(|l| format!("Location: {l}\r\n")).unwrap_or_default();
                            format!("HTTP/1.1 {code} X\r\n{loc}Content-Length: 0\r\nConnection: close\r\n\r\n")
                        }
                        Answer::Json(body) => format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        ),
                        Answer::Stream(first) => format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{first}"
                        ),
                    };
                    let _ = s.write_all(out.as_bytes()).and_then(|()| s.flush());
                    if out.contains("text/event-stream") {
                        let _ = open_rx.recv_timeout(Duration::from_secs(20));
                    }
                });
            }
        });
        Origin { port, seen, stop, _streams_open: open_tx }
    }

    impl Origin {
        fn url(&self, path: &str) -> String {
            format!("http://127.0.0.1:{}{path}", self.port)
        }
        fn seen(&self) -> Vec<(String, String, bool)> {
            lock(&self.seen).clone()
        }
    }

    impl Drop for Origin {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            // Wakes the blocking accept.
            let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        }
    }

    fn spec(url: String) -> HttpSpec {
        let headers =
            [("X-Api-Key", REDIRECT_SECRET.to_string()), ("Authorization", format!("Bearer {REDIRECT_SECRET}"))];
        HttpSpec { url, headers: headers.into_iter().map(|(k, v)| (k.to_string(), v)).collect() }
    }

    #[test]
    fn streamable_http_follows_same_origin_redirects_and_refuses_others() {
        let other = origin(|_, _| Answer::Json(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        let target = other.url("/mcp");
        let server = origin(move |method, path| match (method, path) {
            ("POST", "/mcp") => Answer::Status(307, Some("/mcp/".into())),
            ("POST", "/mcp/") => Answer::Json(r#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#),
            ("POST", "/away") => Answer::Status(308, Some(target.clone())),
            ("POST", "/see-other") => Answer::Status(303, Some("/mcp/".into())),
            _ => Answer::Status(405, None),
        });
        let call = |path: &str| {
            let inbox = Inbox::new("t", vec![REDIRECT_SECRET.into()]);
            let t = streamable_http::StreamableHttpTransport::new(
                "t",
                &spec(server.url(path)),
                inbox.clone(),
                Duration::from_secs(5),
                Duration::from_secs(10),
            )
            .expect("transport");
            let (rx, _) = inbox.register(Id::Num(1), None).expect("register");
            let msg = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_string();
            t.send(msg, Outgoing::Request(&Id::Num(1)), Duration::from_secs(5)).expect("send");
            rx.recv_timeout(Duration::from_secs(10)).expect("reply")
        };
        assert_eq!(call("/mcp").expect("same-origin redirect is followed"), json!({"ok": true}));
        match call("/away") {
            Err(Error::Connect(m)) => {
                assert!(m.contains("another origin") && m.contains(&format!("127.0.0.1:{}", other.port)), "{m}");
                assert!(!m.contains(REDIRECT_SECRET), "{m}");
            }
            other => panic!("a cross-origin redirect must fail, got {other:?}"),
        }
        match call("/see-other") {
            Err(Error::Connect(m)) => assert!(m.contains("answered the POST with a redirect (HTTP 303)"), "{m}"),
            other => panic!("a POST redirected with 303 must fail, got {other:?}"),
        }
        assert_eq!(other.seen(), Vec::<(String, String, bool)>::new(), "the other origin was contacted");
        let seen = server.seen();
        assert!(seen.contains(&("POST".into(), "/mcp/".into(), true)), "headers go to the same origin: {seen:?}");
    }

    #[test]
    fn sse_follows_same_origin_redirects_and_refuses_others() {
        let other = origin(|_, _| Answer::Status(202, None));
        let elsewhere = other.url("/sse");
        let post_target = other.url("/messages");
        let server = origin(move |method, path| match (method, path) {
            ("GET", "/sse") => Answer::Status(301, Some("/sse/".into())),
            ("GET", "/sse/") => Answer::Stream("event: endpoint\ndata: messages?s=1\n\n"),
            ("POST", "/sse/messages?s=1") => Answer::Status(307, Some(post_target.clone())),
            ("GET", "/gone") => Answer::Status(302, Some(elsewhere.clone())),
            _ => Answer::Status(404, None),
        });
        let connect = |path: &str| {
            let inbox = Inbox::new("t", vec![REDIRECT_SECRET.into()]);
            sse::SseTransport::connect("t", &spec(server.url(path)), inbox, Duration::from_secs(5))
        };
        match connect("/gone") {
            Err(Error::Connect(m)) => assert!(m.contains("another origin"), "{m}"),
            Err(e) => panic!("unexpected error {e:?}"),
            Ok(_) => panic!("a stream redirected to another origin must not open"),
        }
        let t = connect("/sse").expect("a same-origin redirect of the stream is followed");
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string();
        match t.send(note, Outgoing::Notification, Duration::from_secs(5)) {
            Err(Error::Connect(m)) => assert!(m.contains("another origin"), "{m}"),
            other => panic!("a POST redirected to another origin must fail, got {other:?}"),
        }
        t.close();
        assert_eq!(other.seen(), Vec::<(String, String, bool)>::new(), "the other origin was contacted");
        let seen = server.seen();
        for hop in [("GET", "/sse"), ("GET", "/sse/"), ("POST", "/sse/messages?s=1")] {
            assert!(
                seen.contains(&(hop.0.into(), hop.1.into(), true)),
                "{hop:?} (endpoint resolved against the redirected stream URL): {seen:?}"
            );
        }
    }
}
