//! The HTTP front door, run on the `http` thread: [`gate::classify`] decides once where a
//! request goes, tiny_http requests become [`Req`] carrying that decision, the router turns
//! them into [`Resp`]; CORS, the Origin/Host/token checks and `X-Request-ID` are applied here,
//! once. The checks run on the head, before a body reader is taken or a body byte read
//! (`answer_from_head`); the connection caps and the head deadline tiny_http enforces are
//! `connection_config`. Answers are handed to the connection's own tiny_http thread to write
//! (`respond_from_connection`): a peer that reads slowly or never holds that thread, never
//! `http`. Routes that wait on the network (LLM discovery, MCP connect) run on a
//! short-lived `http-slow` thread so they never stall the others, and a body that may arrive
//! slowly on a short-lived `http-body` thread under a per-peer permit ([`body`]). Server stop
//! sets the shutdown flag and [`tiny_http::Server::unblock`]s the loop, which then joins those
//! threads.

pub mod api;
pub(crate) mod assets;
pub(crate) mod body;
pub(crate) mod conn_limits;
pub mod gate;
pub(crate) mod headers;
pub(crate) mod llm_routes;
pub(crate) mod mcp_routes;
pub(crate) mod memory_routes;
pub(crate) mod multipart;
pub(crate) mod project_routes;
pub(crate) mod rewind_routes;
pub(crate) mod safety_routes;
pub(crate) mod search_route;
pub(crate) mod sessions;
pub(crate) mod shape;
pub(crate) mod skills_routes;
pub(crate) mod transfer_routes;
pub(crate) mod usage_routes;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use self::gate::Target;
use crate::security::{query_param, AccessPolicy};
use crate::util::json::{too_deep, MAX_DEPTH as MAX_JSON_DEPTH};

/// Largest request body (a 10 MiB skill ZIP plus multipart framing).
pub(crate) const MAX_BODY: usize = 12 * 1024 * 1024;
/// Concurrent slow-route threads.
const MAX_SLOW: usize = 16;
/// Read and write timeout of HTTP connections.
pub(crate) const SOCKET_TIMEOUT: Duration = Duration::from_secs(15);
/// Time for a whole request head, from when its connection is ready to read it (accepted, or
/// the previous request's body read): a peer trickling a head, or idling on a keep-alive
/// connection, holds it no longer. Browsers send a head in one piece.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stopping server waits for requests still being handled (slow routes end early:
/// stop shuts the LLM agents and MCP connections down under them).
const STOP_DRAIN: Duration = Duration::from_secs(2);

/// A request as the router sees it.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    /// Raw path without the query (for the trailing-slash redirect and logs; decisions read
    /// [`Req::target`]).
    pub path: String,
    /// Where the gate sends this request.
    pub target: Target,
    pub query: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub(crate) fn query_param(&self, name: &str) -> Option<String> {
        query_param(&self.query, name).map(gate::decode_lossy)
    }

    /// The body as JSON; a 422 in pydantic's list form when it is not. Bodies nesting deeper
    /// than [`MAX_JSON_DEPTH`] are refused before parsing, so no handler thread's stack ever
    /// holds serde_json's full recursion.
    pub(crate) fn json(&self) -> Result<Value, Resp> {
        if let Some(at) = too_deep(&self.body, MAX_JSON_DEPTH) {
            let error = format!("nesting deeper than {MAX_JSON_DEPTH} levels at byte {at}");
            return Err(Resp::shape(vec![shape::Issue::json_invalid_at(at, error)]));
        }
        serde_json::from_slice(&self.body).map_err(|e| Resp::shape(vec![shape::Issue::json_invalid(&e)]))
    }
}

/// A response before CORS and request-id headers are added.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub(crate) content_type: &'static str,
    pub body: Body,
    pub(crate) headers: Vec<(String, String)>,
}

/// A response body: made for this request, or shared with the static-file cache
/// ([`assets::Cache`]) so a page load copies nothing and each connection writing the client's
/// bundle holds a reference, not its own copy.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Owned(Vec<u8>),
    Shared(Arc<[u8]>),
}

impl Body {
    /// The bytes as an owned vector (a copy only for a shared body).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Body::Owned(v) => v,
            Body::Shared(b) => b.to_vec(),
        }
    }
}

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Self {
        Body::Owned(v)
    }
}

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_ref()
    }
}

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        match self {
            Body::Owned(v) => v,
            Body::Shared(b) => b,
        }
    }
}

impl Resp {
    /// `v` as the JSON body (typed views and `Value`s alike).
    pub(crate) fn json<T: Serialize + ?Sized>(status: u16, v: &T) -> Resp {
        Resp {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(v).unwrap_or_default().into(),
            headers: Vec::new(),
        }
    }

    pub(crate) fn ok<T: Serialize + ?Sized>(v: &T) -> Resp {
        Resp::json(200, v)
    }

    pub(crate) fn detail(status: u16, msg: &str) -> Resp {
        Resp::json(status, &json!({"detail": msg}))
    }

    /// `{"detail": msg, "code": code}`: the English text, and a stable code a client
    /// translates (docs/http-api.md §1).
    pub(crate) fn coded(status: u16, msg: &str, code: &str) -> Resp {
        Resp::json(status, &json!({"detail": msg, "code": code}))
    }

    /// 422 with pydantic-style items `{type, loc, msg, input}` ([`shape::Issue`]).
    pub(crate) fn shape<T: Serialize>(items: Vec<T>) -> Resp {
        #[derive(Serialize)]
        struct Shape<T> {
            detail: Vec<T>,
        }
        Resp::json(422, &Shape { detail: items })
    }

    pub(crate) fn no_content() -> Resp {
        Resp { status: 204, content_type: "application/json", body: Vec::new().into(), headers: Vec::new() }
    }

    pub(crate) fn text(status: u16, text: &str) -> Resp {
        Resp {
            status,
            content_type: "text/plain; charset=utf-8",
            body: text.as_bytes().to_vec().into(),
            headers: Vec::new(),
        }
    }
}

/// The request's head as the checks and the router see it, with an empty body: the body is
/// read only once the head has passed [`answer_from_head`].
fn head_of(rq: &tiny_http::Request, target: Target) -> Req {
    let url = rq.url().to_string();
    let (path, query) = match url.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (url, String::new()),
    };
    let headers = rq
        .headers()
        .iter()
        .map(|h| (h.field.as_str().as_str().to_ascii_lowercase(), h.value.as_str().to_string()))
        .collect();
    Req { method: rq.method().as_str().to_ascii_uppercase(), path, target, query, headers, body: Vec::new() }
}

fn header(name: &str, value: &str) -> Option<tiny_http::Header> {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

/// Reads the body of a request whose head passed, routes it and writes the response; runs on
/// `http` for requests whose body is already in memory, else on the request's own thread.
fn handle(mut rq: tiny_http::Request, mut req: Req, api: &api::Api) {
    let started = Instant::now();
    let request_id = crate::util::rand::hex(16);
    let resp = match body::read(&mut rq, api.config.http_body_timeout) {
        Ok(body) => {
            req.body = body;
            routed(&req, api, &request_id)
        }
        Err(resp) => resp,
    };
    respond(rq, &req, resp, api, &request_id, started);
}

/// Answers with `resp`, the request id and, for a listed Origin, the CORS headers. The
/// connection's own thread writes it: this returns without waiting on the peer.
fn respond(rq: tiny_http::Request, req: &Req, resp: Resp, api: &api::Api, request_id: &str, started: Instant) {
    let status = resp.status;
    let len = resp.body.len();
    let mut out = tiny_http::Response::new(
        tiny_http::StatusCode(resp.status),
        Vec::new(),
        std::io::Cursor::new(resp.body),
        Some(len),
        None,
    );
    let mut headers =
        vec![("Content-Type".to_string(), resp.content_type.to_string()), ("X-Request-ID".into(), request_id.into())];
    if let Some(o) = req.header("origin").filter(|o| api.policy.is_listed(o)) {
        headers.push(("Access-Control-Allow-Origin".into(), o.to_string()));
        headers.push(("Access-Control-Allow-Credentials".into(), "true".into()));
        headers.push(("Vary".into(), "Origin".into()));
    }
    headers.extend(resp.headers);
    self::headers::harden(&mut headers);
    for (k, v) in headers {
        if let Some(h) = header(&k, &v) {
            out.add_header(h);
        }
    }
    let _ = rq.respond_from_connection(out);
    log::debug!(
        "event=http.request.completed request_id={request_id} method={:?} route={:?} status={status} duration_ms={:.2}",
        req.method,
        crate::util::text::take_chars(&req.path, 200),
        started.elapsed().as_secs_f64() * 1000.0
    );
}

/// The answer when the head alone decides it: refused for its Host (403), its path (400),
/// its Origin (403) or a missing token (401), or a CORS preflight. Every trust check of a
/// request is here, and runs before its body is touched: before a body reader is taken,
/// before `100 Continue` (which tiny_http sends only when the body is first read) and
/// before any byte of a body still on the wire is read.
fn answer_from_head(req: &Req, api: &api::Api) -> Option<Resp> {
    let policy: &AccessPolicy = &api.policy;
    if !policy.host_allowed(req.header("host")) {
        return Some(Resp::detail(403, "Host is not allowed"));
    }
    if let Target::Refused(reason) = &req.target {
        return Some(Resp::detail(400, reason));
    }
    let origin = req.header("origin");
    // CORS preflight.
    if req.method == "OPTIONS" && req.header("access-control-request-method").is_some() {
        return Some(match origin {
            Some(o) if policy.is_listed(o) => {
                let mut r = Resp::text(200, "OK");
                r.headers.push((
                    "Access-Control-Allow-Methods".into(),
                    "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT".into(),
                ));
                r.headers.push(("Access-Control-Max-Age".into(), "600".into()));
                if let Some(h) = req.header("access-control-request-headers") {
                    r.headers.push(("Access-Control-Allow-Headers".into(), h.to_string()));
                }
                r
            }
            _ => Resp::text(400, "Disallowed CORS origin"),
        });
    }
    match &req.target {
        Target::Api(path) => {
            if path.state_changing(&req.method) && !policy.origin_allowed(origin) {
                return Some(Resp::detail(403, "Origin is not allowed"));
            }
            // HTTP takes the token from `Authorization` only: a `?token=` ends up in logs,
            // browser history and Referer headers.
            if !path.is_oauth_callback(&req.method) && !policy.token_ok(req.header("authorization"), None) {
                return Some(Resp::detail(401, "a valid token is required"));
            }
        }
        Target::Static(_) | Target::Refused(_) => {}
    }
    None
}

/// The router's answer to a request whose head passed [`answer_from_head`]; a panicking
/// handler is a 500 with the request id.
fn routed(req: &Req, api: &api::Api, request_id: &str) -> Resp {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| api.route(req))) {
        Ok(r) => r,
        Err(_) => {
            log::error!("event=http.handler.panicked route={:?}", req.path);
            Resp::json(500, &json!({"detail": "Internal Server Error", "request_id": request_id}))
        }
    }
}

/// The whole decision for a request already read: the head's answer, else the router's.
#[cfg(test)]
fn guarded(req: &Req, api: &api::Api, request_id: &str) -> Resp {
    answer_from_head(req, api).unwrap_or_else(|| routed(req, api, request_id))
}

/// What tiny_http puts on each connection it accepts and how many it keeps open: every read
/// and write waits at most [`SOCKET_TIMEOUT`], a whole request head at most
/// [`HEAD_TIMEOUT`], and connections past `limits` are refused by its accept thread. Each
/// connection's thread writes its answers and reads its next request only after that, so the
/// writer threads are the connection threads (bounded by `limits`) and each connection has
/// at most one request waiting for `http`.
pub(crate) fn connection_config(limits: &conn_limits::Limits) -> tiny_http::ConnectionConfig {
    tiny_http::ConnectionConfig {
        read_timeout: Some(SOCKET_TIMEOUT),
        write_timeout: Some(SOCKET_TIMEOUT),
        head_timeout: Some(HEAD_TIMEOUT),
        max_connections: Some(limits.max_connections),
        max_per_peer: Some(limits.max_per_peer),
        write_on_connection: true,
    }
}

/// The `http` thread: serves until `shutdown` is set (checked every 250 ms, and at once after
/// [`tiny_http::Server::unblock`]), then joins its body and slow-route threads. A request's
/// head is checked here first ([`answer_from_head`]); only a head that passes may take a body
/// reader and have its body read.
pub(crate) fn serve(server: Arc<tiny_http::Server>, api: Arc<api::Api>, shutdown: &AtomicBool) {
    let slow = Arc::new(AtomicUsize::new(0));
    let readers = Arc::new(body::Readers::new(body::MAX_BODY_READERS, body::MAX_BODY_READERS_PER_PEER));
    // `http-body` and `http-slow` threads still running, joined on stop.
    let mut helpers: Vec<JoinHandle<()>> = Vec::new();
    let mut recv_failures = 0u64;
    loop {
        let rq = match server.recv_timeout(Duration::from_millis(250)) {
            Ok(Some(rq)) => rq,
            Ok(None) => {
                if shutdown.load(Ordering::SeqCst) {
                    break;
                }
                continue;
            }
            // Serving goes on: one failed request or connection is no reason to stop.
            Err(e) => {
                if shutdown.load(Ordering::SeqCst) {
                    break;
                }
                recv_failures += 1;
                if recv_failures.is_power_of_two() {
                    log::error!("event=http.recv.failed error_kind={:?} failures={recv_failures}", e.kind());
                }
                continue;
            }
        };
        let started = Instant::now();
        let req = head_of(&rq, gate::classify(rq.url()));
        if let Some(mut resp) = answer_from_head(&req, &api) {
            // A body still on the wire is never read: the connection ends with this answer.
            if body::streamed(&rq) {
                resp.headers.push(("Connection".into(), "close".into()));
            }
            respond(rq, &req, resp, &api, &crate::util::rand::hex(16), started);
            continue;
        }
        // A body that may arrive slowly is read on the request's own thread, never on this
        // one, and only while its peer and the server have a reader to spare: a peer trickling
        // uploads holds at most its share, and requests without a body never wait for one.
        let permit = if body::may_stall(&rq) {
            match readers.acquire(rq.remote_addr().map(|a| a.ip())) {
                Ok(permit) => Some(permit),
                Err(full) => {
                    log::debug!("event=http.body.refused limit={full:?} in_use={}", readers.in_use());
                    match full {
                        body::Full::Peer => {
                            busy(rq, 429, "too many uploads from this address at once; try again shortly")
                        }
                        body::Full::All => busy(rq, 503, "too many uploads at once; try again shortly"),
                    }
                    continue;
                }
            }
        } else {
            None
        };
        if !req.target.is_slow(&req.method) {
            let Some(permit) = permit else {
                handle(rq, req, &api);
                continue;
            };
            let api2 = Arc::clone(&api);
            let spawned =
                std::thread::Builder::new().name("http-body".into()).stack_size(512 * 1024).spawn(move || {
                    handle(rq, req, &api2);
                    drop(permit);
                });
            match spawned {
                Ok(h) => {
                    helpers.retain(|t| !t.is_finished());
                    helpers.push(h);
                }
                Err(e) => log::error!("event=http.body.spawn_failed error=\"{e}\""),
            }
            continue;
        }
        // Network-bound routes never run on this thread: a full pool answers 503 at once.
        if slow.fetch_add(1, Ordering::SeqCst) >= MAX_SLOW {
            slow.fetch_sub(1, Ordering::SeqCst);
            busy(rq, 503, "too many requests waiting on the network; try again shortly");
            continue;
        }
        let (api2, slow2) = (Arc::clone(&api), Arc::clone(&slow));
        let spawned = std::thread::Builder::new().name("http-slow".into()).stack_size(512 * 1024).spawn(move || {
            handle(rq, req, &api2);
            drop(permit);
            slow2.fetch_sub(1, Ordering::SeqCst);
        });
        match spawned {
            Ok(h) => {
                helpers.retain(|t| !t.is_finished());
                helpers.push(h);
            }
            Err(e) => {
                slow.fetch_sub(1, Ordering::SeqCst);
                log::error!("event=http.slow.spawn_failed error=\"{e}\"");
            }
        }
    }
    let deadline = Instant::now() + STOP_DRAIN;
    for t in helpers {
        if let Err(name) = crate::util::join::join_until(t, deadline) {
            log::warn!("event=server.thread_unfinished thread={name}");
        }
    }
}

/// An immediate refusal (503 while every slow-route thread or body reader is busy, 429 when
/// this peer has its share of body readers). A body still on the wire is not read: the
/// response says `Connection: close` and the patched tiny_http closes instead of draining it.
fn busy(rq: tiny_http::Request, status: u16, detail: &str) {
    let body = serde_json::to_vec(&json!({ "detail": detail })).unwrap_or_default();
    let mut out = tiny_http::Response::from_data(body).with_status_code(status);
    let closing = body::streamed(&rq).then_some(("Connection", "close"));
    let fixed = [("Content-Type", "application/json"), ("Retry-After", "2")];
    for (k, v) in fixed.into_iter().chain(headers::ALWAYS).chain(closing) {
        if let Some(h) = header(k, v) {
            out.add_header(h);
        }
    }
    if let Some(h) = header("X-Request-ID", &crate::util::rand::hex(16)) {
        out.add_header(h);
    }
    let _ = rq.respond_from_connection(out);
}

#[cfg(test)]
mod property {
    use super::*;
    use crate::util::prng::Prng;

    /// Random methods, paths (with escapes and traversal), headers and bodies through the
    /// whole policy + router: no panic, always a valid status, never a 500.
    #[test]
    fn random_requests_get_clean_answers() {
        let home = std::env::temp_dir().join(format!("cc-http-prop-{}", crate::util::rand::hex(6)));
        let config = crate::config::Config::for_home(&home);
        let server = crate::app::start(config).expect("server starts");
        let api = server.api();
        let mut rng = Prng::new(crate::util::prng::seed(7));
        let methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "BREW"];
        let segs = [
            "api",
            "sessions",
            "settings",
            "llm",
            "test",
            "models",
            "health",
            "%2E%2E",
            "..",
            "messages",
            "x",
            "%00",
            "\u{5b57}",
            "client-config",
            "",
            "a:b",
            "%2F",
        ];
        let bodies: [&[u8]; 6] =
            [b"", b"{}", b"{\"title\": \"t\"}", b"not json", b"{\"openai_compatible\": 1}", b"\xff\xfe"];
        for _ in 0..crate::util::prng::cases(3000) {
            let path = format!("/{}", (0..rng.below(5)).map(|_| *rng.pick(&segs)).collect::<Vec<_>>().join("/"));
            let mut headers = Vec::new();
            if rng.chance(30) {
                headers.push((
                    "origin".to_string(),
                    rng.pick(&["http://evil.example", "http://localhost:5173"]).to_string(),
                ));
            }
            if rng.chance(10) {
                headers.push(("access-control-request-method".to_string(), "PUT".to_string()));
            }
            let req = Req {
                method: rng.pick(&methods).to_string(),
                target: gate::classify(&path),
                path,
                query: String::new(),
                headers,
                body: rng.pick(&bodies).to_vec(),
            };
            let resp = guarded(&req, &api, "id");
            assert!((200..500).contains(&resp.status), "{} {} -> {}", req.method, req.path, resp.status);
        }
        server.stop();
        let _ = std::fs::remove_dir_all(home);
    }
}
