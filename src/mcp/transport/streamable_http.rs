//! Streamable HTTP transport (2025-03-26 .. 2025-11-25): every message is a POST to one
//! endpoint with `Accept: application/json, text/event-stream`; a request is answered with one
//! JSON object or an event stream that carries progress and then the response. The session id
//! from the initialize reply (`Mcp-Session-Id`) and the negotiated `MCP-Protocol-Version` go on
//! every later request; a 404 means the session expired (the client re-initialises); close
//! sends `DELETE`.
//!
//! Threads: each request's reply is read on its own `mcp-<server>-post` thread (so a caller
//! only ever waits on its reply channel with a deadline); `mcp-<server>-get` holds the optional
//! server-to-client stream for notifications such as `tools/list_changed`. Close shuts the
//! agents of both down, so reads blocked on the network end at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{
    body_snippet, content_type, http_agent, join_until, lock, read_body_text, send_following, spawn_named, HttpSpec,
    HttpTimeouts, Inbox, Outgoing, Transport,
};
use crate::mcp::auth::{self, Authorizer};
use crate::mcp::jsonrpc::Id;
use crate::mcp::{Error, Result};
use crate::util::sse::SseReader;
use crate::util::url::Origin;

/// Largest JSON reply body read.
const MAX_JSON_BODY: u64 = 16 * 1024 * 1024;
/// Idle limit on the GET notification stream before it is reopened.
const GET_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the handshake waits for the GET stream's response headers.
const GET_OPEN_WAIT: Duration = Duration::from_secs(2);
/// Failed GET stream attempts in a row before giving up on it.
const MAX_GET_FAILURES: u32 = 3;
/// Resumptions of one reply stream before giving up.
const MAX_RESUMES: usize = 3;
/// Concurrent reply threads allowed for server requests.
const MAX_REPLIERS: usize = 4;
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

struct Shared {
    server: String,
    url: String,
    headers: BTreeMap<String, String>,
    session: Mutex<Option<String>>,
    protocol: Mutex<Option<String>>,
    closed: AtomicBool,
    /// Control messages: notifications, replies, DELETE.
    agent: ureq::Agent,
    /// Request POSTs whose replies may stream for as long as a call may last.
    long_agent: ureq::Agent,
    /// The GET notification stream.
    get_agent: ureq::Agent,
    /// Dropped by close, so the GET thread's wait before reconnecting ends at once.
    stop: Mutex<Option<crossbeam_channel::Sender<()>>>,
    stopped: crossbeam_channel::Receiver<()>,
    inbox: Weak<Inbox>,
    /// OAuth (`mcp::auth`), unless the configured headers carry an `Authorization` already.
    auth: OnceLock<Arc<dyn Authorizer>>,
}

pub(crate) struct StreamableHttpTransport {
    shared: Arc<Shared>,
    inbox: Arc<Inbox>,
    get_stream: Mutex<Option<JoinHandle<()>>>,
}

impl StreamableHttpTransport {
    /// Prepares the transport; nothing is sent until `initialize`. `max_exchange` caps one
    /// request's whole HTTP exchange (the hard maximum of a tool call plus a margin).
    pub(crate) fn new(
        server: &str,
        spec: &HttpSpec,
        inbox: Arc<Inbox>,
        connect_timeout: Duration,
        max_exchange: Duration,
    ) -> Result<Self> {
        Origin::of(&spec.url).ok_or_else(|| Error::Config("url must be an absolute HTTP(S) URL".into()))?;
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let shared = Arc::new(Shared {
            server: server.to_string(),
            url: spec.url.clone(),
            headers: spec.headers.clone(),
            session: Mutex::new(None),
            protocol: Mutex::new(None),
            closed: AtomicBool::new(false),
            agent: http_agent(HttpTimeouts {
                connect: connect_timeout,
                global: Some(connect_timeout.max(REPLY_TIMEOUT)),
                per_read: None,
            }),
            long_agent: http_agent(HttpTimeouts {
                connect: connect_timeout,
                global: Some(max_exchange),
                per_read: None,
            }),
            get_agent: http_agent(HttpTimeouts {
                connect: Duration::from_secs(10),
                global: None,
                per_read: Some(GET_IDLE_TIMEOUT),
            }),
            stop: Mutex::new(Some(stop)),
            stopped,
            inbox: Arc::downgrade(&inbox),
            auth: OnceLock::new(),
        });
        let active = Arc::new(AtomicUsize::new(0));
        let weak = Arc::downgrade(&shared);
        let srv = server.to_string();
        inbox.set_replier(Box::new(move |line| {
            let Some(shared) = weak.upgrade() else { return };
            if active.fetch_add(1, Ordering::SeqCst) >= MAX_REPLIERS {
                active.fetch_sub(1, Ordering::SeqCst);
                log::warn!("mcp {srv}: too many pending replies, dropping one");
                return;
            }
            let active = active.clone();
            let spawned = spawn_named(format!("mcp-{srv}-reply"), move || {
                if let Some(inbox) = shared.inbox.upgrade() {
                    if let Err(e) = post_control(&shared, &inbox, line, REPLY_TIMEOUT) {
                        log::debug!("mcp {}: reply failed: {e}", shared.server);
                    }
                }
                active.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                log::warn!("mcp {srv}: cannot start a reply thread");
            }
        }));
        Ok(StreamableHttpTransport { shared, inbox, get_stream: Mutex::new(None) })
    }
}

impl StreamableHttpTransport {
    /// Lets `auth` supply bearer tokens and answer 401/403 challenges. Ignored when the
    /// configured headers hold an `Authorization` of their own (the owner's choice wins).
    pub(crate) fn with_auth(self, auth: Option<Arc<dyn Authorizer>>) -> Self {
        let own = self.shared.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization"));
        if let (Some(a), false) = (auth, own) {
            let _ = self.shared.auth.set(a);
        }
        self
    }
}

impl Transport for StreamableHttpTransport {
    fn send(&self, msg: String, kind: Outgoing<'_>, timeout: Duration) -> Result<()> {
        if let Some(reason) = self.inbox.closed_reason() {
            return Err(Error::Closed(reason));
        }
        match kind {
            Outgoing::Request(id) => {
                let (shared, inbox, id) = (self.shared.clone(), self.inbox.clone(), id.clone());
                spawn_named(format!("mcp-{}-post", self.shared.server), move || {
                    let outcome = post_request(&shared, &inbox, &id, msg);
                    // Any path that did not route a reply must still release the waiter.
                    match outcome {
                        Err(e) => inbox.deliver(&id, Err(e)),
                        Ok(()) if inbox.is_pending(&id) => {
                            inbox.deliver(&id, Err(Error::Protocol("the reply ended without a response".into())))
                        }
                        Ok(()) => {}
                    }
                })?;
                Ok(())
            }
            Outgoing::Notification | Outgoing::Response => post_control(&self.shared, &self.inbox, msg, timeout),
        }
    }

    fn set_protocol_version(&self, version: &str) {
        *lock(&self.shared.protocol) = Some(version.to_string());
    }

    fn open_notification_stream(&self) {
        let mut slot = lock(&self.get_stream);
        if slot.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let shared = self.shared.clone();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded::<()>(1);
        let name = format!("mcp-{}-get", self.shared.server);
        match spawn_named(name, move || get_loop(&shared, &ready_tx)) {
            Ok(h) => {
                *slot = Some(h);
                // Wait until the server has answered the GET (or refused it), bounded.
                let _ = ready_rx.recv_timeout(GET_OPEN_WAIT);
            }
            Err(e) => log::warn!("mcp {}: no notification stream: {e}", self.shared.server),
        }
    }

    fn reset_session(&self) {
        lock(&self.shared.session).take();
        lock(&self.shared.protocol).take();
    }

    fn session_id(&self) -> Option<String> {
        lock(&self.shared.session).clone()
    }

    fn close(&self) {
        if self.shared.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.inbox.close("connection closed");
        if lock(&self.shared.session).is_some() {
            let shared = &self.shared;
            let deleted = send_following(&self.inbox, &shared.url, &shared.url, "DELETE", "DELETE session", |url| {
                let req = shared.agent.delete(url).config().timeout_global(Some(Duration::from_secs(5))).build();
                with_headers(shared, req).call()
            });
            match deleted {
                Ok((r, _)) => log::debug!("mcp {}: DELETE session -> {}", shared.server, r.status()),
                Err(e) => log::debug!("mcp {}: DELETE session failed: {e}", shared.server),
            }
        }
        // Reads still waiting on the server (the GET stream, replies of calls) end now, and so
        // does the GET thread's wait before reconnecting.
        lock(&self.shared.stop).take();
        self.shared.get_agent.clone().shutdown();
        self.shared.long_agent.clone().shutdown();
        if let Some(h) = lock(&self.get_stream).take() {
            join_until(h, Instant::now() + Duration::from_millis(500));
        }
        log::info!("event=mcp.http.closed server={}", self.shared.server);
    }
}

impl Drop for StreamableHttpTransport {
    fn drop(&mut self) {
        self.close();
    }
}

/// Adds the session, version and configured headers.
fn with_headers<B>(shared: &Shared, mut req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
    if let Some(s) = lock(&shared.session).clone() {
        req = req.header("Mcp-Session-Id", s.as_str());
    }
    if let Some(v) = lock(&shared.protocol).clone() {
        req = req.header("MCP-Protocol-Version", v.as_str());
    }
    for (k, v) in &shared.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    if let Some(token) = shared.auth.get().and_then(|a| a.bearer()) {
        req = req.header("Authorization", format!("Bearer {token}").as_str());
    }
    req
}

/// Sends with [`send_following`]; a 401, or a 403 with a challenge, goes to the authorizer
/// (a new token, refresh or step-up) and the request is sent again, at most
/// [`auth::MAX_ROUNDS`] times. Without an authorizer the response is returned as it is.
fn send_authorized(
    shared: &Shared,
    inbox: &Inbox,
    method: &str,
    what: &str,
    mut send: impl FnMut(&str) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<ureq::http::Response<ureq::Body>> {
    let mut rounds = 0;
    loop {
        let (resp, _) = send_following(inbox, &shared.url, &shared.url, method, what, &mut send)?;
        let status = resp.status().as_u16();
        let Some(auth) = shared.auth.get() else { return Ok(resp) };
        let challenge = resp.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).map(str::to_string);
        if !(status == 401 || (status == 403 && challenge.is_some())) {
            return Ok(resp);
        }
        if rounds >= auth::MAX_ROUNDS {
            return Err(Error::Auth(format!("still refused (HTTP {status}) after {rounds} authorizations")));
        }
        rounds += 1;
        drop(resp);
        auth.challenge(status, challenge.as_deref()).map_err(|e| match e {
            Error::Auth(m) => Error::Auth(inbox.redact(&m)),
            other => other,
        })?;
    }
}

/// POSTs a request and routes every message of its reply (JSON or event stream) to the inbox.
fn post_request(shared: &Shared, inbox: &Inbox, id: &Id, msg: String) -> Result<()> {
    let had_session = lock(&shared.session).is_some();
    let resp = send_authorized(shared, inbox, "POST", "POST to the MCP endpoint", |url| {
        let req = shared
            .long_agent
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        with_headers(shared, req).send(msg.as_str())
    })?;
    let status = resp.status().as_u16();
    if let Some(s) = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        if !s.is_empty() && s.len() <= 1024 {
            *lock(&shared.session) = Some(s.to_string());
        }
    }
    if !(200..300).contains(&status) {
        let body = read_body_text(resp.into_body(), 64 * 1024).unwrap_or_default();
        if had_session && session_gone(status, &body) {
            return Err(Error::SessionExpired);
        }
        return Err(Error::Status { status, detail: body_snippet(inbox, &body) });
    }
    if status == 202 {
        return Err(Error::Protocol("the server accepted a request without replying".into()));
    }
    let ctype = content_type(&resp);
    if ctype.starts_with("text/event-stream") {
        let mut reader = SseReader::new(resp.into_body().into_reader());
        let mut ended = drain_reply(&mut reader, inbox, id);
        // Resumability: a stream that ends before our reply, after giving an event id, is
        // resumed with GET + Last-Event-ID once its `retry` delay has passed.
        let mut last_id = reader.last_event_id().to_string();
        let mut retry = reader.retry_ms();
        for _ in 0..MAX_RESUMES {
            if !inbox.is_pending(id) || last_id.is_empty() || shared.closed.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(retry_delay(retry));
            let (resp, _) =
                send_following(inbox, &shared.url, &shared.url, "GET", "resuming the reply stream", |url| {
                    let req = shared.long_agent.get(url).header("Accept", "text/event-stream");
                    with_headers(shared, req).header("Last-Event-ID", last_id.as_str()).call()
                })?;
            if resp.status().as_u16() != 200 || !content_type(&resp).starts_with("text/event-stream") {
                return Err(Error::Closed(format!("resuming the reply stream got HTTP {}", resp.status().as_u16())));
            }
            let mut resumed = SseReader::new(resp.into_body().into_reader());
            ended = drain_reply(&mut resumed, inbox, id);
            if !resumed.last_event_id().is_empty() {
                last_id = resumed.last_event_id().to_string();
            }
            retry = resumed.retry_ms().or(retry);
        }
        ended
    } else if ctype.starts_with("application/json") {
        let body = read_body_text(resp.into_body(), MAX_JSON_BODY)
            .map_err(|e| Error::Closed(format!("reading the reply failed: {e}")))?;
        inbox.handle_text(&body);
        Ok(())
    } else {
        Err(Error::Protocol(format!("unexpected reply content type '{}'", inbox.redact(&ctype))))
    }
}

/// Whether a refusal means our session is gone: 404 per the spec, and the TypeScript SDK's
/// `400 "No valid session ID provided"` for ids it no longer knows (server-everything).
fn session_gone(status: u16, body: &str) -> bool {
    status == 404 || (status == 400 && body.to_ascii_lowercase().contains("session"))
}

/// Routes a reply stream's messages until `id` is answered or the stream ends. A read error
/// after the reply is irrelevant; before it, it is reported unless the stream can be resumed.
fn drain_reply<R: std::io::Read>(reader: &mut SseReader<R>, inbox: &Inbox, id: &Id) -> Result<()> {
    loop {
        match reader.next_event() {
            Ok(Some(ev)) if ev.event == "message" => {
                inbox.handle_text(&ev.data);
                if !inbox.is_pending(id) {
                    // Our reply arrived; the server closes the stream, we need not wait.
                    return Ok(());
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => return Ok(()),
            Err(e) if reader.last_event_id().is_empty() => {
                return Err(Error::Closed(format!("reply stream failed: {e}")))
            }
            Err(_) => return Ok(()),
        }
    }
}

/// The server's `retry` hint, or 1 s, capped at 30 s.
fn retry_delay(retry_ms: Option<u64>) -> Duration {
    Duration::from_millis(retry_ms.unwrap_or(1000).min(30_000))
}

/// POSTs a notification or a response; the server answers 202 (or 200) without a message.
fn post_control(shared: &Shared, inbox: &Inbox, msg: String, timeout: Duration) -> Result<()> {
    let resp = send_authorized(shared, inbox, "POST", "POST to the MCP endpoint", |url| {
        let req = shared
            .agent
            .post(url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        with_headers(shared, req).send(msg.as_str())
    })?;
    let status = resp.status().as_u16();
    let body = read_body_text(resp.into_body(), 64 * 1024).unwrap_or_default();
    match status {
        200..=299 => Ok(()),
        _ if session_gone(status, &body) => Err(Error::SessionExpired),
        _ => Err(Error::Status { status, detail: body_snippet(inbox, &body) }),
    }
}

/// Holds the optional GET stream for server-initiated messages; reopens it after idle
/// timeouts, gives up when the server does not offer one (405) or keeps failing.
fn get_loop(shared: &Shared, ready: &crossbeam_channel::Sender<()>) {
    let agent = &shared.get_agent;
    let mut failures = 0;
    let mut last_id = String::new();
    let mut retry: Option<u64> = None;
    while !shared.closed.load(Ordering::SeqCst) && failures < MAX_GET_FAILURES {
        let Some(inbox) = shared.inbox.upgrade() else {
            return;
        };
        let resp = send_following(&inbox, &shared.url, &shared.url, "GET", "opening the notification stream", |url| {
            let mut req = with_headers(shared, agent.get(url).header("Accept", "text/event-stream"));
            if !last_id.is_empty() {
                req = req.header("Last-Event-ID", last_id.as_str());
            }
            req.call()
        });
        let _ = ready.try_send(());
        let resp = match resp {
            Ok((r, _)) => r,
            Err(_) => {
                failures += 1;
                drop(inbox);
                let _ = shared.stopped.recv_timeout(retry_delay(retry));
                continue;
            }
        };
        let status = resp.status().as_u16();
        if status != 200 || !content_type(&resp).starts_with("text/event-stream") {
            log::debug!("mcp {}: no GET notification stream (HTTP {status})", shared.server);
            return;
        }
        drop(inbox);
        let mut reader = SseReader::new(resp.into_body().into_reader());
        let mut delivered = false;
        loop {
            let ev = reader.next_event();
            if shared.closed.load(Ordering::SeqCst) {
                return;
            }
            let Some(inbox) = shared.inbox.upgrade() else {
                return;
            };
            match ev {
                Ok(Some(ev)) if ev.event == "message" => {
                    delivered = true;
                    inbox.handle_text(&ev.data);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        // A stream that ends without delivering anything counts as a failure, so a server that
        // closes it at once is not hammered; otherwise reconnect after its `retry` hint.
        failures = if delivered { 0 } else { failures + 1 };
        if !reader.last_event_id().is_empty() {
            last_id = reader.last_event_id().to_string();
        }
        retry = reader.retry_ms().or(retry);
        let _ = shared.stopped.recv_timeout(retry_delay(retry));
    }
}
