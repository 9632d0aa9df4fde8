//! The MCP client over any [`Transport`]: request ids, per-request reply channels with
//! deadlines, the lifecycle (initialize with version negotiation, `notifications/initialized`),
//! paginated `tools/list`, `tools/call` with progress-extended deadlines and cancellation,
//! server `elicitation/create` requests during a call handed to the caller's `ask` (the
//! call's deadlines are pushed out by the time the user took), and re-initialisation when a
//! Streamable HTTP session expires.
//!
//! Runs on the caller's thread (an HTTP handler or a turn worker); it blocks only on its own
//! reply channel, always with a deadline, and also wakes on the turn's cancel token (the rules
//! of [`crate::util::blocking::wait`]; a `select!` of its own here, as a call also takes
//! elicitation requests while it waits).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::select;
use serde_json::{json, Map, Value};

use super::auth::Authorizer;
use super::elicit::{self, Answer};
use super::jsonrpc::{self, Id};
use super::messages::{
    self, CallToolParams, CallToolResult, ClientCapabilities, ContentBlock, FormElicitation, Implementation,
    InitializeParams, InitializeResult, ListToolsParams, ListToolsResult, ListedTool,
};
use super::transport::sse::SseTransport;
use super::transport::stdio::{self, StdioTransport};
use super::transport::streamable_http::StreamableHttpTransport;
use super::transport::{Inbox, Outgoing, Transport, TransportSpec};
use super::{Error, Result};
use crate::config::{DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CALL_TIME, DEFAULT_REQUEST_TIMEOUT};
use crate::util::cancel::CancelToken;
use crate::util::sync::lock;
use crate::util::text;

/// The version we offer.
pub(crate) const PROTOCOL_VERSION: &str = "2025-11-25";
/// Versions we accept in the server's reply (newest first).
pub(crate) const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// Page limit for `tools/list` (a server that never stops paginating is cut off).
const MAX_LIST_PAGES: usize = 100;
/// Timeout for handing a message to the transport (queue or POST).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Timeouts and identity; all configurable so tests can shrink them.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub connect_timeout: Duration,
    pub call_timeout: Duration,
    pub request_timeout: Duration,
    pub max_call_time: Duration,
    /// How long a stdio child gets to exit after stdin closes.
    pub stdio_grace: Duration,
    pub client_name: String,
    pub client_version: String,
    /// Declare `elicitation: {form: {}}` in `initialize`: only for connections whose tool
    /// calls pass an `ask` that reaches a user.
    pub elicitation: bool,
    /// OAuth for Streamable HTTP servers that ask for it (`None`: requests go without).
    pub auth: Option<AuthHandle>,
}

/// The [`Authorizer`] a Streamable HTTP transport consults (its `Debug` shows nothing).
#[derive(Clone)]
pub struct AuthHandle(pub Arc<dyn Authorizer>);

impl std::fmt::Debug for AuthHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthHandle")
    }
}

/// Answers one `elicitation/create` of a call (blocks until the user, a timeout or cancel).
pub(crate) type Ask<'a> = &'a dyn Fn(&elicit::Request) -> Answer;

/// At most this many elicitation requests of one call wait for its caller; more are declined.
const ELICIT_QUEUE: usize = 4;

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_call_time: DEFAULT_MAX_CALL_TIME,
            stdio_grace: stdio::DEFAULT_GRACE,
            client_name: "cashcode".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            auth: None,
            elicitation: false,
        }
    }
}

/// What the server told us in `initialize`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerInfo {
    pub protocol_version: String,
    pub name: String,
    pub version: String,
    pub(crate) capabilities: Value,
    pub(crate) instructions: Option<String>,
}

/// One tool as listed by the server.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    pub(crate) description: Option<String>,
    /// The raw `inputSchema` (an empty object schema when absent).
    pub input_schema: Value,
}

/// One content block of a tool result.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(String),
    Image { mime: String, bytes: usize },
    Audio { mime: String, bytes: usize },
    ResourceLink { uri: String, name: String, description: Option<String> },
    Resource { uri: String, mime: Option<String>, text: Option<String>, blob_bytes: Option<usize> },
    Unknown(String),
}

/// A `tools/call` result.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub content: Vec<Content>,
    pub is_error: bool,
    pub structured: Option<Value>,
    /// Progress notifications seen while the call ran.
    pub progress_events: u64,
}

impl CallResult {
    /// Reads the `result` of `tools/call`: a content item that is not an object is an unknown
    /// block, any other odd field is absent.
    pub(crate) fn from_value(v: Value) -> CallResult {
        let r: CallToolResult = messages::read(Some(v));
        CallResult {
            content: r.content.unwrap_or_default().into_iter().map(|c| content(c.unwrap_or_default())).collect(),
            is_error: r.is_error,
            structured: r.structured_content,
            progress_events: 0,
        }
    }

    /// Text for the model: text blocks verbatim, other blocks as short descriptions (never raw
    /// base64), structured content when there is nothing else, `Error: ` when `isError`.
    pub fn render(&self) -> String {
        let mut parts: Vec<String> = self
            .content
            .iter()
            .map(|c| match c {
                Content::Text(t) => t.clone(),
                Content::Image { mime, bytes } => format!("[image {mime}, {bytes} bytes]"),
                Content::Audio { mime, bytes } => format!("[audio {mime}, {bytes} bytes]"),
                Content::ResourceLink { uri, name, description } => match description {
                    Some(d) if !d.is_empty() => format!("[resource link {uri} ({name}): {d}]"),
                    _ => format!("[resource link {uri} ({name})]"),
                },
                Content::Resource { uri, mime, text, blob_bytes } => {
                    let head = match (mime, blob_bytes) {
                        (Some(m), Some(n)) => format!("[resource {uri}, {m}, {n} bytes]"),
                        (None, Some(n)) => format!("[resource {uri}, {n} bytes]"),
                        _ => format!("[resource {uri}]"),
                    };
                    match text {
                        Some(t) => format!("{head}\n{t}"),
                        None => head,
                    }
                }
                Content::Unknown(kind) => format!("[{kind} content]"),
            })
            .collect();
        if parts.is_empty() {
            if let Some(s) = &self.structured {
                parts.push(s.to_string());
            }
        }
        let body = if parts.is_empty() { "(no output)".to_string() } else { parts.join("\n") };
        if self.is_error {
            format!("Error: {body}")
        } else {
            body
        }
    }
}

fn base64_len(data: &str) -> usize {
    let s = data.trim_end_matches('=');
    s.len() * 3 / 4
}

fn content(c: ContentBlock) -> Content {
    match c.kind.as_deref().unwrap_or("") {
        "text" => Content::Text(c.text.unwrap_or_default()),
        "image" => Content::Image {
            mime: c.mime_type.unwrap_or_else(|| "image".into()),
            bytes: base64_len(c.data.as_deref().unwrap_or("")),
        },
        "audio" => Content::Audio {
            mime: c.mime_type.unwrap_or_else(|| "audio".into()),
            bytes: base64_len(c.data.as_deref().unwrap_or("")),
        },
        "resource_link" => Content::ResourceLink {
            uri: c.uri.unwrap_or_default(),
            name: c.name.unwrap_or_default(),
            description: c.description,
        },
        "resource" => {
            let r = c.resource.unwrap_or_default();
            Content::Resource {
                uri: r.uri.unwrap_or_default(),
                mime: r.mime_type,
                text: r.text,
                blob_bytes: r.blob.map(|b| base64_len(&b)),
            }
        }
        other => Content::Unknown(text::take_chars(other, 40).to_string()),
    }
}

/// A live, initialised connection to one MCP server.
pub struct Client {
    server: String,
    transport: Box<dyn Transport>,
    inbox: Arc<Inbox>,
    next_id: AtomicI64,
    info: Mutex<ServerInfo>,
    /// Serialises re-initialisation; the counter lets concurrent callers skip a redundant one.
    reinit: Mutex<()>,
    generation: AtomicU64,
    cfg: ClientConfig,
}

/// Per-request knobs.
struct Call<'a> {
    timeout: Duration,
    cancel: Option<&'a CancelToken>,
    progress: bool,
    ask: Option<Ask<'a>>,
}

impl Client {
    /// Opens the transport and completes the handshake within `cfg.connect_timeout`.
    pub fn connect(server: &str, spec: &TransportSpec, cfg: ClientConfig) -> Result<Client> {
        let start = Instant::now();
        let inbox = Inbox::new(server, spec.secrets());
        let transport: Box<dyn Transport> = match spec {
            TransportSpec::Stdio(s) => Box::new(StdioTransport::spawn(server, s, inbox.clone(), cfg.stdio_grace)?),
            TransportSpec::Sse(h) => Box::new(SseTransport::connect(server, h, inbox.clone(), cfg.connect_timeout)?),
            TransportSpec::StreamableHttp(h) => Box::new(
                StreamableHttpTransport::new(
                    server,
                    h,
                    inbox.clone(),
                    cfg.connect_timeout,
                    cfg.max_call_time + Duration::from_secs(30),
                )?
                .with_auth(cfg.auth.clone().map(|a| a.0)),
            ),
        };
        Self::with_transport(server, transport, inbox, cfg, start)
    }

    /// Completes the handshake over an already open transport (tests drive in-memory ones).
    pub(crate) fn with_transport(
        server: &str,
        transport: Box<dyn Transport>,
        inbox: Arc<Inbox>,
        cfg: ClientConfig,
        start: Instant,
    ) -> Result<Client> {
        inbox.set_elicitation(cfg.elicitation);
        let client = Client {
            server: server.to_string(),
            transport,
            inbox,
            next_id: AtomicI64::new(1),
            info: Mutex::new(ServerInfo::default()),
            reinit: Mutex::new(()),
            generation: AtomicU64::new(0),
            cfg,
        };
        let left = client.cfg.connect_timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            client.close();
            return Err(Error::Timeout { method: "connect".into(), after: client.cfg.connect_timeout });
        }
        if let Err(e) = client.handshake(left) {
            client.close();
            return Err(e);
        }
        Ok(client)
    }

    pub fn server_info(&self) -> ServerInfo {
        lock(&self.info).clone()
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// The Streamable HTTP session id, if the transport has one.
    pub fn session_id(&self) -> Option<String> {
        self.transport.session_id()
    }

    /// `None` while the connection is usable, else why it is not.
    pub fn dead_reason(&self) -> Option<String> {
        self.inbox.closed_reason()
    }

    /// True once after the server sent `notifications/tools/list_changed`.
    pub fn take_list_changed(&self) -> bool {
        self.inbox.take_list_changed()
    }

    /// Closes the transport (kills a stdio child, ends an HTTP session). Idempotent.
    pub fn close(&self) {
        self.transport.close();
        self.inbox.close("connection closed");
    }

    fn handshake(&self, timeout: Duration) -> Result<()> {
        let params = InitializeParams {
            protocol_version: PROTOCOL_VERSION,
            capabilities: ClientCapabilities { elicitation: self.cfg.elicitation.then(FormElicitation::default) },
            client_info: Implementation { name: &self.cfg.client_name, version: &self.cfg.client_version },
        };
        let call = Call { timeout, cancel: None, progress: false, ask: None };
        let result = self.request_once("initialize", Some(to_params(&params)), &call)?;
        let result: InitializeResult = messages::read(Some(result));
        let version = result
            .protocol_version
            .ok_or_else(|| Error::Protocol("initialize result has no protocolVersion".into()))?;
        if !SUPPORTED_VERSIONS.contains(&version.as_str()) {
            return Err(Error::UnsupportedVersion(text::take_chars(&version, 40).to_string()));
        }
        let si = result.server_info.unwrap_or_default();
        let info = ServerInfo {
            protocol_version: version.clone(),
            name: si.name.unwrap_or_default(),
            version: si.version.unwrap_or_default(),
            capabilities: result.capabilities.unwrap_or_else(|| json!({})),
            instructions: result.instructions,
        };
        self.transport.set_protocol_version(&version);
        self.transport.open_notification_stream();
        self.notify("notifications/initialized", None)?;
        log::info!(
            "event=mcp.initialized server={} server_name={:?} server_version={:?} protocol={version}",
            self.server,
            self.inbox.redact(&info.name),
            self.inbox.redact(&info.version)
        );
        *lock(&self.info) = info;
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Sends a notification.
    pub(crate) fn notify(&self, method: &str, params: Option<Value>) -> Result<()> {
        let line = jsonrpc::notification(method, params.as_ref());
        self.transport.send(line, Outgoing::Notification, SEND_TIMEOUT)
    }

    /// `ping` round trip.
    pub fn ping(&self) -> Result<()> {
        let call = Call { timeout: self.cfg.request_timeout, cancel: None, progress: false, ask: None };
        self.request("ping", None, &call).map(|_| ())
    }

    /// Every tool, following `nextCursor` until it is absent.
    pub fn list_tools(&self) -> Result<Vec<ToolInfo>> {
        let call = Call { timeout: self.cfg.request_timeout, cancel: None, progress: false, ask: None };
        let mut tools: Vec<ToolInfo> = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen_cursors = std::collections::HashSet::new();
        for _ in 0..MAX_LIST_PAGES {
            let params = cursor.as_deref().map(|c| to_params(&ListToolsParams { cursor: c }));
            let result: ListToolsResult = messages::read(Some(self.request("tools/list", params, &call)?));
            let page = result.tools.ok_or_else(|| Error::Protocol("tools/list result has no tools array".into()))?;
            for t in page {
                match t.and_then(tool_info) {
                    Some(tool) if !tools.iter().any(|x| x.name == tool.name) => tools.push(tool),
                    Some(_) => {}
                    None => log::warn!("mcp {}: skipping a tool without a name", self.server),
                }
            }
            match result.next_cursor {
                Some(c) if !c.is_empty() => {
                    if !seen_cursors.insert(c.clone()) {
                        return Err(Error::Protocol("tools/list repeated a cursor".into()));
                    }
                    cursor = Some(c);
                }
                _ => return Ok(tools),
            }
        }
        Err(Error::Protocol(format!("tools/list did not end after {MAX_LIST_PAGES} pages")))
    }

    /// Calls a tool. Progress notifications push the deadline out (by `call_timeout` from the
    /// last one) up to `max_call_time`; on timeout or cancel the server gets
    /// `notifications/cancelled`.
    pub fn call_tool(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        cancel: Option<&CancelToken>,
    ) -> Result<CallResult> {
        self.call_tool_with_timeout(name, arguments, cancel, self.cfg.call_timeout)
    }

    pub fn call_tool_with_timeout(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        cancel: Option<&CancelToken>,
        timeout: Duration,
    ) -> Result<CallResult> {
        self.call_tool_asking(name, arguments, cancel, timeout, None)
    }

    /// [`Client::call_tool_with_timeout`] whose server may ask the user through `ask` (on a
    /// connection made with `cfg.elicitation`); without `ask` such requests are declined.
    pub fn call_tool_asking(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        cancel: Option<&CancelToken>,
        timeout: Duration,
        ask: Option<Ask<'_>>,
    ) -> Result<CallResult> {
        let call = Call { timeout, cancel, progress: true, ask };
        let params = to_params(&CallToolParams { name, arguments });
        let (result, progress) = self.request_counting("tools/call", Some(params), &call)?;
        let mut r = CallResult::from_value(result);
        r.progress_events = progress;
        Ok(r)
    }

    fn request(&self, method: &str, params: Option<Value>, call: &Call<'_>) -> Result<Value> {
        self.request_counting(method, params, call).map(|(v, _)| v)
    }

    /// A request that re-initialises once if the HTTP session expired.
    fn request_counting(&self, method: &str, params: Option<Value>, call: &Call<'_>) -> Result<(Value, u64)> {
        let generation = self.generation.load(Ordering::SeqCst);
        match self.request_inner(method, params.clone(), call) {
            Err(Error::SessionExpired) => {
                {
                    let _guard = lock(&self.reinit);
                    if self.generation.load(Ordering::SeqCst) == generation {
                        log::info!("event=mcp.session.expired server={}", self.server);
                        self.transport.reset_session();
                        self.handshake(self.cfg.connect_timeout)?;
                    }
                }
                self.request_inner(method, params, call)
            }
            other => other,
        }
    }

    fn request_once(&self, method: &str, params: Option<Value>, call: &Call<'_>) -> Result<Value> {
        self.request_inner(method, params, call).map(|(v, _)| v)
    }

    fn request_inner(&self, method: &str, params: Option<Value>, call: &Call<'_>) -> Result<(Value, u64)> {
        let id = Id::Num(self.next_id.fetch_add(1, Ordering::SeqCst));
        let token = call.progress.then(|| format!("cashcode-{id}"));
        let params = match (params, &token) {
            (Some(Value::Object(mut p)), Some(t)) => {
                let meta = p.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(m) = meta {
                    m.insert("progressToken".into(), json!(t));
                }
                Some(Value::Object(p))
            }
            (p, _) => p,
        };
        // Register before writing: a fast server may answer before `send` returns.
        let (elicit_tx, elicit_rx) = match call.ask {
            Some(_) if self.cfg.elicitation => {
                let (tx, rx) = crossbeam_channel::bounded(ELICIT_QUEUE);
                (Some(tx), rx)
            }
            _ => (None, crossbeam_channel::never()),
        };
        let (rx, mark) = self.inbox.register_eliciting(id.clone(), token, elicit_tx)?;
        let line = jsonrpc::request(&id, method, params.as_ref());
        if let Err(e) = self.transport.send(
            line,
            Outgoing::Request(&id),
            SEND_TIMEOUT.min(call.timeout.max(Duration::from_millis(1))),
        ) {
            self.inbox.forget(&id);
            return Err(e);
        }
        let start = Instant::now();
        let mut hard = start + call.timeout.max(self.cfg.max_call_time);
        let mut deadline = start + call.timeout;
        let never = crossbeam_channel::never();
        let cancel_rx = call.cancel.map(|c| c.wait_chan()).unwrap_or(&never);
        loop {
            let now = Instant::now();
            if now >= deadline {
                // Progress since the deadline was set moves it (bounded by the hard maximum).
                if let Some(last) = self.inbox.last_progress(&mark) {
                    let extended = (last + call.timeout).min(hard);
                    if call.progress && extended > now {
                        deadline = extended;
                        continue;
                    }
                }
                self.inbox.forget(&id);
                self.cancel_remote(&id, method, "timed out");
                return Err(Error::Timeout { method: method.to_string(), after: now - start });
            }
            select! {
                recv(rx) -> reply => {
                    return match reply {
                        Ok(Ok(v)) => Ok((v, mark.count())),
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(Error::Closed(self.inbox.closed_reason().unwrap_or_else(|| "connection closed".into()))),
                    };
                }
                recv(cancel_rx) -> _ => {
                    self.inbox.forget(&id);
                    self.cancel_remote(&id, method, "cancelled by the user");
                    return Err(Error::Cancelled);
                }
                recv(elicit_rx) -> req => {
                    let (Ok((req_id, params)), Some(ask)) = (req, call.ask) else { continue };
                    let asked = Instant::now();
                    self.answer_elicitation(&req_id, params.as_ref(), ask);
                    // The user's time is not the server's: both deadlines move by it.
                    let took = asked.elapsed();
                    deadline += took;
                    hard += took;
                }
                default(deadline - now) => {}
            }
        }
    }

    /// Checks one `elicitation/create`, asks, and sends the answer (an invalid request gets
    /// -32602 with the reason). Logs sizes and the action, never the content.
    fn answer_elicitation(&self, req_id: &Id, params: Option<&Value>, ask: Ask<'_>) {
        let line = match elicit::parse_request(&self.server, params) {
            Err(why) => {
                log::info!("event=mcp.elicitation.invalid server={} reason={why:?}", self.server);
                jsonrpc::response_err(req_id, jsonrpc::INVALID_PARAMS, &why)
            }
            Ok(req) => {
                let started = Instant::now();
                let answer = ask(&req);
                let bytes = match &answer {
                    Answer::Accept(c) => Value::Object(c.clone()).to_string().len(),
                    _ => 0,
                };
                log::info!(
                    "event=mcp.elicitation.answered server={} fields={} action={} content_bytes={bytes} duration_ms={}",
                    self.server,
                    req.form.fields.len(),
                    answer.action(),
                    started.elapsed().as_millis()
                );
                jsonrpc::response_ok(req_id, answer.to_result())
            }
        };
        if let Err(e) = self.transport.send(line, Outgoing::Response, SEND_TIMEOUT) {
            log::warn!("event=mcp.elicitation.reply_failed server={} error={:?}", self.server, e.kind());
        }
    }

    /// Tells the server to stop working on `id` (never for `initialize`, per the spec).
    fn cancel_remote(&self, id: &Id, method: &str, reason: &str) {
        if method == "initialize" || self.inbox.closed_reason().is_some() {
            return;
        }
        let params = json!({"requestId": id.to_value(), "reason": reason});
        if let Err(e) = self.notify("notifications/cancelled", Some(params)) {
            log::debug!("mcp {}: cancel notification failed: {e}", self.server);
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .field("protocol_version", &lock(&self.info).protocol_version)
            .field("dead", &self.dead_reason())
            .finish()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
    }
}

/// A listed tool, or `None` without a name (not a string, or blank).
fn tool_info(t: ListedTool) -> Option<ToolInfo> {
    let name = t.name?;
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    Some(ToolInfo {
        name: name.to_string(),
        description: t.description,
        input_schema: t.input_schema.unwrap_or_else(|| json!({"type": "object", "properties": {}})),
    })
}

/// Typed params as the JSON object a request carries (it gets `_meta` added on the way out).
fn to_params<T: serde::Serialize>(params: &T) -> Value {
    serde_json::to_value(params).expect("params of strings and JSON values always serialise")
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, VecDeque};

    use super::*;

    /// Answers each request with the next scripted `result` for its method, at once, and
    /// records what was sent.
    struct Scripted {
        inbox: Arc<Inbox>,
        results: Mutex<HashMap<String, VecDeque<Value>>>,
        sent: Arc<Mutex<Vec<Value>>>,
    }

    impl Transport for Scripted {
        fn send(&self, msg: String, kind: Outgoing<'_>, _timeout: Duration) -> Result<()> {
            let msg: Value = serde_json::from_str(&msg).expect("we send JSON");
            if let Outgoing::Request(id) = kind {
                let method = msg["method"].as_str().expect("a method").to_string();
                let result = lock(&self.results).get_mut(&method).and_then(VecDeque::pop_front);
                let result = result.unwrap_or_else(|| panic!("no result scripted for {method}"));
                self.inbox.handle_text(&json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result}).to_string());
            }
            lock(&self.sent).push(msg);
            Ok(())
        }
        fn close(&self) {}
    }

    /// A client whose server answers `initialize` with `init` and then `script`'s results.
    fn scripted(init: Value, script: &[(&str, Value)], elicitation: bool) -> (Result<Client>, Arc<Mutex<Vec<Value>>>) {
        let inbox = Inbox::new("t", vec![]);
        let mut results: HashMap<String, VecDeque<Value>> = HashMap::new();
        results.entry("initialize".into()).or_default().push_back(init);
        for (method, result) in script {
            results.entry(method.to_string()).or_default().push_back(result.clone());
        }
        let sent = Arc::new(Mutex::new(Vec::new()));
        let transport = Scripted { inbox: inbox.clone(), results: Mutex::new(results), sent: sent.clone() };
        let cfg = ClientConfig { elicitation, ..ClientConfig::default() };
        (Client::with_transport("t", Box::new(transport), inbox, cfg, Instant::now()), sent)
    }

    fn init_ok() -> Value {
        json!({"protocolVersion": "2025-06-18"})
    }

    #[test]
    fn initialize_is_sent_typed_and_its_result_read_leniently() {
        let (client, sent) = scripted(init_ok(), &[], true);
        client.expect("connects");
        let first = lock(&sent)[0].clone();
        assert_eq!(
            first["params"],
            json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {"elicitation": {"form": {}}},
                   "clientInfo": {"name": "cashcode", "version": env!("CARGO_PKG_VERSION")}})
        );
        assert_eq!(lock(&sent)[1], json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let (client, sent) = scripted(init_ok(), &[], false);
        let info = client.expect("connects").server_info();
        assert_eq!(lock(&sent)[0]["params"]["capabilities"], json!({}));
        assert_eq!(
            info,
            ServerInfo { protocol_version: "2025-06-18".into(), capabilities: json!({}), ..ServerInfo::default() }
        );
        // Odd types read as absent; capabilities are passed on as they are.
        let init = json!({"protocolVersion": "2025-11-25", "serverInfo": {"name": 7, "version": "1.0"},
                          "capabilities": {"tools": {"listChanged": true}}, "instructions": ["x"]});
        let info = scripted(init, &[], false).0.expect("connects").server_info();
        assert_eq!(
            info,
            ServerInfo {
                protocol_version: "2025-11-25".into(),
                name: String::new(),
                version: "1.0".into(),
                capabilities: json!({"tools": {"listChanged": true}}),
                instructions: None,
            }
        );
        let info =
            scripted(json!({"protocolVersion": "2024-11-05", "serverInfo": "s", "capabilities": null}), &[], false)
                .0
                .expect("connects")
                .server_info();
        assert_eq!((info.name.as_str(), info.capabilities), ("", Value::Null));
        let info = scripted(json!({"protocolVersion": "2024-11-05", "instructions": "Use x."}), &[], false)
            .0
            .expect("connects")
            .server_info();
        assert_eq!(info.instructions.as_deref(), Some("Use x."));
    }

    #[test]
    fn a_malformed_initialize_result_is_a_clear_error() {
        for init in [json!({"protocolVersion": 2025}), json!({}), json!(5), json!("2025-06-18"), json!([init_ok()])] {
            match scripted(init.clone(), &[], false).0 {
                Err(Error::Protocol(m)) => assert_eq!(m, "initialize result has no protocolVersion", "{init}"),
                other => panic!("{init}: {other:?}"),
            }
        }
        let long = "9".repeat(100);
        match scripted(json!({"protocolVersion": long}), &[], false).0 {
            Err(Error::UnsupportedVersion(v)) => assert_eq!(v, "9".repeat(40)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tools_list_skips_tools_without_a_name_and_reads_odd_fields_as_absent() {
        let page1 = json!({"tools": [
            {"name": "  a "}, {"name": 5}, 7, null, {"name": ""}, {"name": "   "},
            {"name": "b", "description": 3, "inputSchema": "x", "annotations": {"readOnlyHint": true}},
            {"name": "a", "description": "a second a"},
            {"name": "c", "description": "C", "inputSchema": {"type": "object", "properties": {"q": {}}}}
        ], "nextCursor": "p2"});
        let page2 = json!({"tools": [{"name": "d", "inputSchema": []}], "nextCursor": 9});
        let (client, sent) = scripted(init_ok(), &[("tools/list", page1), ("tools/list", page2)], false);
        let tools = client.expect("connects").list_tools().expect("listed");
        let empty = json!({"type": "object", "properties": {}});
        let tool = |name: &str, description: Option<&str>, input_schema: &Value| ToolInfo {
            name: name.into(),
            description: description.map(str::to_string),
            input_schema: input_schema.clone(),
        };
        assert_eq!(
            tools,
            [
                tool("a", None, &empty),
                tool("b", None, &empty),
                tool("c", Some("C"), &json!({"type": "object", "properties": {"q": {}}})),
                tool("d", None, &empty),
            ]
        );
        let lists: Vec<Value> = lock(&sent).iter().filter(|m| m["method"] == "tools/list").cloned().collect();
        assert_eq!(
            lists.iter().map(|m| m.get("params").cloned()).collect::<Vec<_>>(),
            [None, Some(json!({"cursor": "p2"}))]
        );
        // An empty cursor ends the list too.
        let (client, _) = scripted(init_ok(), &[("tools/list", json!({"tools": [], "nextCursor": ""}))], false);
        assert_eq!(client.expect("connects").list_tools().expect("listed"), []);
    }

    #[test]
    fn a_malformed_tools_list_is_a_clear_error() {
        for result in [json!({"tools": "x"}), json!({"tools": {"name": "a"}}), json!({}), json!(null), json!([])] {
            let (client, _) = scripted(init_ok(), &[("tools/list", result.clone())], false);
            match client.expect("connects").list_tools() {
                Err(Error::Protocol(m)) => assert_eq!(m, "tools/list result has no tools array", "{result}"),
                other => panic!("{result}: {other:?}"),
            }
        }
        let page = json!({"tools": [], "nextCursor": "same"});
        let (client, _) = scripted(init_ok(), &[("tools/list", page.clone()), ("tools/list", page)], false);
        match client.expect("connects").list_tools() {
            Err(Error::Protocol(m)) => assert_eq!(m, "tools/list repeated a cursor"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tools_call_sends_typed_params_and_reads_any_result() {
        let results = [
            json!({"content": [{"type": "text", "text": "ok"}], "isError": "true", "structuredContent": null}),
            json!(5),
            json!({"content": "text", "structuredContent": [1]}),
            json!({"content": [1, {"type": "text"}, {"type": 3}, {"type": "t".repeat(100)}, {"type": "image"},
                               {"type": "resource", "resource": 7}, {"type": "resource_link", "uri": 1}]}),
        ];
        let script: Vec<(&str, Value)> = results.iter().map(|r| ("tools/call", r.clone())).collect();
        let (client, sent) = scripted(init_ok(), &script, false);
        let client = client.expect("connects");
        let mut args = Map::new();
        args.insert("q".into(), json!("x"));
        let call = || client.call_tool("search", &args, None).expect("a result");
        let r = call();
        assert_eq!((r.content, r.is_error, r.structured), (vec![Content::Text("ok".into())], false, None));
        let params = lock(&sent).last().expect("sent")["params"].clone();
        assert_eq!(
            params,
            json!({"name": "search", "arguments": {"q": "x"}, "_meta": {"progressToken": "cashcode-2"}})
        );
        assert_eq!(call().render(), "(no output)");
        assert_eq!(call().render(), "[1]");
        let r = call();
        assert_eq!(
            r.content,
            [
                Content::Unknown(String::new()),
                Content::Text(String::new()),
                Content::Unknown(String::new()),
                Content::Unknown("t".repeat(40)),
                Content::Image { mime: "image".into(), bytes: 0 },
                Content::Resource { uri: String::new(), mime: None, text: None, blob_bytes: None },
                Content::ResourceLink { uri: String::new(), name: String::new(), description: None },
            ]
        );
    }

    #[test]
    fn every_content_type_renders_without_raw_data() {
        let v = json!({"content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAAAAAA", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a", "name": "a", "description": "the a file"},
            {"type": "resource", "resource": {"uri": "mem://b", "mimeType": "application/zip", "blob": "AAAA"}},
            {"type": "resource", "resource": {"uri": "mem://t", "text": "inner text"}},
            {"type": "hologram"}
        ], "isError": false});
        assert_eq!(
            CallResult::from_value(v).render(),
            "hi\n[image image/png, 5 bytes]\n[audio audio/wav, 6 bytes]\n[resource link file:///a (a): the a file]\n\
             [resource mem://b, application/zip, 3 bytes]\n[resource mem://t]\ninner text\n[hologram content]"
        );
    }

    #[test]
    fn errors_structured_and_empty_results() {
        let r = CallResult::from_value(json!({"content": [{"type": "text", "text": "bad input"}], "isError": true}));
        assert_eq!(r.render(), "Error: bad input");
        let r = CallResult::from_value(json!({"content": [], "structuredContent": {"sum": 3}}));
        assert_eq!(r.render(), "{\"sum\":3}");
        assert_eq!(CallResult::from_value(json!({})).render(), "(no output)");
    }
}
