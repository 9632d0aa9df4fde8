//! The blocking LLM client: one ureq `Agent` per provider generation, `POST /chat/completions`
//! with `stream: true` read on the calling worker, which cancel interrupts by shutting the
//! stream's agent ([`blocking::interruptible`]), plus non-streamed completions (consolidation,
//! Dream) and model discovery. Text deltas go straight to the turn's callback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::settings::Settings;
use super::state::{merge_details, MessageState, Usage};
use super::wire::{parse_chunk, Chunk, CompletionRequest, ReasoningKey};
use super::Provider;
use crate::ledger::{Job, Record};
use crate::util::blocking;
use crate::util::cancel::CancelToken;
use crate::util::json::{too_deep, MAX_DEPTH as MAX_JSON_DEPTH};
use crate::util::redact;
use crate::util::sse::{SseError, SseReader};
use crate::util::{sync, time};

/// Discovery (and the settings connection test) is bounded by 15 s in total.
pub(crate) const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(15);
pub(crate) const MAX_MODELS: usize = 500;
/// Cap on a non-streamed response body and on an error body we read.
const MAX_BODY: u64 = 8 * 1024 * 1024;
const MAX_ERROR_BODY: u64 = 64 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer a turn streams (all its model calls together), in bytes of UTF-8: past it
/// the stream is dropped, the text up to it is kept and the turn ends with a note.
pub(crate) const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Largest tool-call names and arguments of one model call together, in bytes: past it the
/// stream is dropped and no call runs.
pub(crate) const MAX_TOOL_CALL_BYTES: usize = 1024 * 1024;
/// Largest stream line or event (and non-streamed reply) of a model call: one chunk may carry
/// a whole answer and its tool calls (providers that send one message), never more.
const MAX_CHUNK_BYTES: usize = MAX_ANSWER_BYTES + MAX_TOOL_CALL_BYTES + 64 * 1024;
/// The notes a turn ends with when a cap is hit (`LlmError::TooLarge`).
pub(crate) const ANSWER_TOO_LARGE: &str =
    "The model's answer exceeded 1 MiB; it was cut off there and the turn ended. The text up to the cut is kept.";
pub(crate) const TOOL_CALLS_TOO_LARGE: &str =
    "The model's tool-call arguments exceeded 1 MiB; the calls were not run and the turn ended.";
pub(crate) const CHUNK_TOO_LARGE: &str =
    "The model service sent a stream chunk over 2 MiB; the stream was stopped and the turn ended.";

/// Failure of one model call. `Display` is the user-facing detail: no key, no raw body dump.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmError {
    NotConfigured(Provider),
    Cancelled,
    Http {
        status: u16,
        message: String,
    },
    Timeout(Duration),
    Connect,
    Malformed(&'static str),
    Truncated,
    /// A size cap was hit ([`MAX_ANSWER_BYTES`], [`MAX_TOOL_CALL_BYTES`], [`MAX_CHUNK_BYTES`]);
    /// the stream was dropped. The note to show.
    TooLarge(&'static str),
    /// A budget is reached (`ledger::Ledger::admit`): no request was sent. Its detail says
    /// which budget and how to raise it.
    Budget(crate::ledger::limits::Spend),
    Other(String),
}

impl std::fmt::Display for LlmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LlmError::NotConfigured(p) => {
                write!(f, "LLM not configured ({p}); open Settings > LLM Settings to finish the connection setup")
            }
            LlmError::Cancelled => f.write_str("cancelled"),
            LlmError::Http { status, message } => {
                let (_, reason) = http_failure(*status);
                write!(f, "Model service error (HTTP {status}): {reason}")?;
                if !message.is_empty() {
                    write!(f, " {message}")?;
                }
                Ok(())
            }
            LlmError::Timeout(d) => write!(f, "Model request timed out after {} s.", d.as_secs_f64().round()),
            LlmError::Connect => f.write_str("Cannot reach the model service; check the address."),
            LlmError::Malformed(what) => {
                write!(f, "The model service sent a malformed response ({what}).")
            }
            LlmError::Truncated => f.write_str("The model service closed the stream before finishing the answer."),
            LlmError::TooLarge(note) => f.write_str(note),
            LlmError::Budget(spend) => f.write_str(&spend.refusal()),
            LlmError::Other(m) => write!(f, "Model request failed: {m}"),
        }
    }
}

impl std::error::Error for LlmError {}

/// What an HTTP error status of the model service means: its code ([`LlmError::code`]) and the
/// English reason of the detail.
fn http_failure(status: u16) -> (&'static str, &'static str) {
    match status {
        401 | 403 => ("llm_auth", "Authentication failed; check the API key."),
        404 => ("llm_not_found", "Model or endpoint not found; check the address and the model name."),
        408 | 504 => ("llm_timed_out", "The model service timed out; try again later."),
        429 => ("llm_busy", "Model service busy; try again later."),
        s if s >= 500 => ("llm_failed", "The model service failed; try again later."),
        _ => ("llm_rejected", "The model service rejected the request."),
    }
}

impl LlmError {
    /// A stable code for the failure a client translates, with its fields
    /// (docs/ws-protocol.md "error").
    pub(crate) fn code(&self) -> (&'static str, serde_json::Value) {
        use serde_json::json;
        match self {
            LlmError::NotConfigured(p) => ("llm_not_configured", json!({"provider": p.id()})),
            LlmError::Cancelled => ("cancelled", json!({})),
            LlmError::Http { status, message } => {
                (http_failure(*status).0, json!({"status": status, "message": message}))
            }
            LlmError::Timeout(d) => ("llm_timeout", json!({"seconds": d.as_secs_f64().round()})),
            LlmError::Connect => ("llm_unreachable", json!({})),
            LlmError::Malformed(what) => ("llm_malformed", json!({"what": what})),
            LlmError::Truncated => ("llm_truncated", json!({})),
            LlmError::TooLarge(note) => {
                let code = match *note {
                    ANSWER_TOO_LARGE => "answer_too_large",
                    TOOL_CALLS_TOO_LARGE => "tool_calls_too_large",
                    _ => "chunk_too_large",
                };
                (code, json!({}))
            }
            LlmError::Budget(s) => ("budget_reached", s.fields()),
            LlmError::Other(m) => ("llm_other", json!({"message": m})),
        }
    }

    /// The code of [`LlmError::category`].
    pub(crate) fn category_code(&self) -> &'static str {
        match self {
            LlmError::Timeout(_) => "test_timeout",
            LlmError::Http { status: 401 | 403, .. } => "test_auth",
            LlmError::Connect => "test_unreachable",
            LlmError::Http { status: 429, .. } => "test_busy",
            _ => "test_failed",
        }
    }

    /// The friendly category used by the settings connection test and discovery.
    pub(crate) fn category(&self) -> &'static str {
        match self {
            LlmError::Timeout(_) => "Connection timed out; check the service address and network.",
            LlmError::Http { status: 401 | 403, .. } => "Authentication failed; check the API key.",
            LlmError::Connect => "Cannot reach the model service; check the address.",
            LlmError::Http { status: 429, .. } => "Model service busy; try again later.",
            _ => "Connection failed; check the provider configuration.",
        }
    }

    /// How long to wait before the one retry of a request that failed before its response
    /// arrived; `None`: not retried. A connection closed before the response is retried at
    /// once: it is typically a kept-alive one the service closed just as it was reused.
    fn retry_wait(&self, retry_after: Option<Duration>) -> Option<Duration> {
        match self {
            LlmError::Truncated => Some(Duration::ZERO),
            LlmError::Connect | LlmError::Timeout(_) => Some(retry_after.unwrap_or(RETRY_WAIT)),
            LlmError::Http { status, .. } if matches!(status, 408 | 409 | 429) || *status >= 500 => {
                Some(retry_after.unwrap_or(RETRY_WAIT))
            }
            _ => None,
        }
    }
}

/// One assembled tool call of a completion.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ToolCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
    /// The provider's keys beside `id`, `type` and `function` (Gemini's `extra_content`),
    /// to be sent back on this call to the same provider and model.
    pub(crate) extra: Option<serde_json::Map<String, Value>>,
}

/// A finished model reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Completion {
    pub(crate) content: String,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) usage: Option<Usage>,
    /// What the provider sent on the message beside `content` and `tool_calls`
    /// (`reasoning_content`, `reasoning`, `reasoning_details`), to be sent back on it.
    pub(crate) state: MessageState,
    /// The ledger row of the request that answered (set when the client keeps a ledger).
    pub(crate) record: Option<Record>,
}

/// One piece of a stream handed to the turn: answer text or reasoning text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Piece {
    pub(crate) reasoning: bool,
    pub(crate) text: String,
}

/// What a turn's model calls streamed so far, together bounded by [`MAX_ANSWER_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct Streamed {
    /// The answer: every text delta, in order.
    pub(crate) text: String,
    /// The reasoning shown to the user (never part of the answer).
    pub(crate) reasoning: String,
}

impl Streamed {
    pub(crate) fn len(&self) -> usize {
        self.text.len() + self.reasoning.len()
    }
}

/// A client bound to one provider's credentials.
pub struct LlmClient {
    pub(crate) provider: Provider,
    api_base: String,
    /// The settings it was made from, shared with the runtime: the key is held once.
    settings: Arc<Settings>,
    /// For discovery and non-streamed completions.
    agent: ureq::Agent,
    config: ureq::config::Config,
    /// Agents for streams, one per stream in flight: cancelling a stream shuts its agent down,
    /// which closes the socket under a read that is still waiting for the model. Finished
    /// streams return theirs, so kept-alive connections are reused.
    stream_agents: std::sync::Mutex<Vec<ureq::Agent>>,
    /// Set by [`LlmClient::shutdown`]: no new stream starts.
    stopped: std::sync::atomic::AtomicBool,
    timeout: Duration,
    /// Context lengths this endpoint reported, by model (`llm::context`).
    context: Arc<super::context::ContextLengths>,
    /// Where each request is recorded and asked for first (`ledger`).
    ledger: crate::ledger::Shared,
    /// Set once the endpoint refused `stream_options` (a 400 naming it) and took the request
    /// without: later streams do not ask for usage.
    no_stream_options: Arc<std::sync::atomic::AtomicBool>,
}

/// Idle stream agents kept per client: as many as the default number of workers, so a burst
/// of turns does not open a new connection per model call.
const MAX_IDLE_STREAM_AGENTS: usize = 32;

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient").field("provider", &self.provider).field("api_base", &self.api_base).finish()
    }
}

/// Loopback Ollama ignores proxy variables (docs/llm-settings.md §6).
fn is_loopback_url(url: &str) -> bool {
    crate::util::url::Origin::of(url).is_some_and(|o| crate::util::url::is_loopback(&o.host))
}

impl LlmClient {
    /// `None` when the provider is not ready in `settings`.
    pub(crate) fn new(settings: &Arc<Settings>, provider: Provider, timeout: Duration) -> Option<LlmClient> {
        if !settings.ready(provider) {
            return None;
        }
        let api_base = settings.api_base(provider);
        let mut cfg = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
            .timeout_recv_response(Some(timeout))
            .timeout_per_read(Some(timeout))
            .timeout_send_body(Some(timeout))
            .input_buffer_size(16 * 1024)
            // A request body is sent in writes of this size (the headers go first, alone):
            // one write for a typical chat request rather than two. Each connection keeps
            // its buffer, so not more (64 KiB added 1.6 MiB to the RSS after 500 clients).
            .output_buffer_size(32 * 1024)
            .max_idle_connections(8)
            .max_idle_connections_per_host(8)
            .no_delay(true)
            .user_agent(concat!("cashcode/", env!("CARGO_PKG_VERSION")));
        if provider == Provider::Ollama && is_loopback_url(&api_base) {
            cfg = cfg.proxy(None);
        }
        let config = cfg.build();
        Some(LlmClient {
            provider,
            api_base,
            settings: Arc::clone(settings),
            agent: config.new_agent(),
            config,
            stream_agents: std::sync::Mutex::new(Vec::new()),
            stopped: std::sync::atomic::AtomicBool::new(false),
            timeout,
            context: Arc::default(),
            ledger: None,
            no_stream_options: Arc::default(),
        })
    }

    /// Records every request in `ledger` and checks its budgets before each.
    pub(crate) fn with_ledger(mut self, ledger: crate::ledger::Shared) -> LlmClient {
        self.ledger = ledger;
        self
    }

    /// The ledger this client records in.
    pub(crate) fn ledger(&self) -> Option<&Arc<crate::ledger::Ledger>> {
        self.ledger.as_ref()
    }

    /// Whether streamed requests ask for usage (`stream_options.include_usage`).
    pub(crate) fn asks_usage(&self) -> bool {
        !self.no_stream_options.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `Err(Budget)` when a cap that applies to `job` is reached; the refusal is recorded.
    fn admit(&self, job: &Job, model: &str) -> Result<(), LlmError> {
        let Some(ledger) = &self.ledger else { return Ok(()) };
        ledger.admit(job).map_err(|spend| {
            log::warn!("event=usage.budget_refused job={} provider={} model={model:?}", job.kind, self.provider);
            self.record(job, model, time::now_millis() as u64, Duration::ZERO, Tokens::default(), "budget");
            LlmError::Budget(spend)
        })
    }

    /// Appends the ledger row of one request; returns it.
    fn record(&self, job: &Job, model: &str, ts: u64, took: Duration, t: Tokens, outcome: &str) -> Option<Record> {
        let ledger = self.ledger.as_ref()?;
        let r = Record {
            ts,
            chat_id: job.chat_id.clone(),
            job: job.kind.to_string(),
            provider: self.provider.id().to_string(),
            model: model.to_string(),
            input_tokens: t.input,
            cached_input_tokens: t.cached,
            cache_write_tokens: t.cache_write,
            output_tokens: t.output,
            reasoning_tokens: t.reasoning,
            duration_ms: took.as_millis() as u64,
            outcome: outcome.to_string(),
            source: if t.reported { "reported" } else { "estimated" }.to_string(),
        };
        ledger.append(r.clone());
        Some(r)
    }

    fn redact(&self, s: &str) -> String {
        redact::redact_with(s, &[self.settings.bearer(self.provider)])
    }

    /// Streams a chat completion on the calling thread (a worker). `body` is the request
    /// JSON (with `"stream":true`). Text deltas go to `on_text` as they arrive, chunks that
    /// arrived together in one call; tool-call fragments are assembled by index. Cancel
    /// shuts the stream's own agent, which closes the socket under a read still waiting for
    /// the model, so the call returns `Cancelled` at once; every read is bounded by the
    /// per-read timeout ([`blocking::interruptible`]). Every delta handed to `on_text` is also
    /// appended to `streamed`, which never grows past [`MAX_ANSWER_BYTES`]: the text up to the
    /// cap is handed over and the call ends with `TooLarge`, its connection dropped (so the
    /// provider cannot make the process hold more than about the caps).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stream_chat(
        &self,
        job: &Job,
        model: &str,
        body: Vec<u8>,
        cancel: &CancelToken,
        on_text: &dyn Fn(&[Piece]),
        streamed: &mut Streamed,
    ) -> Result<Completion, LlmError> {
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(LlmError::Other("the server is stopping".into()));
        }
        self.admit(job, model)?;
        let mut body = body;
        let asked = self.asks_usage() && self.ledger.is_some() && with_stream_options(&mut body);
        let agent = sync::lock(&self.stream_agents).pop().unwrap_or_else(|| self.config.new_agent());
        let room = MAX_ANSWER_BYTES.saturating_sub(streamed.len());
        let before = streamed.len();
        let mut stream = Stream {
            cancel,
            on_text,
            streamed,
            room,
            job,
            model,
            asked,
            started: (time::now_millis() as u64, Instant::now()),
        };
        // A cancelled turn never takes a result, even one complete before the cancel landed.
        let mut result = blocking::interruptible(cancel, &agent, || self.read_stream(&agent, &mut body, &mut stream))
            .unwrap_or(Err(LlmError::Cancelled));
        if self.ledger.is_some() {
            let (ts, took) = stream_started(&stream);
            let out_bytes = streamed.len().saturating_sub(before);
            let (tokens, outcome) = match &result {
                Ok(c) => (
                    Tokens::of(
                        c.usage,
                        body.len(),
                        c.content.len()
                            + c.state.extra_bytes()
                            + c.tool_calls.iter().map(|t| t.name.len() + t.arguments.len()).sum::<usize>(),
                    ),
                    "ok",
                ),
                Err(LlmError::Cancelled) => (Tokens::of(None, body.len(), out_bytes), "cancelled"),
                Err(LlmError::Truncated | LlmError::Timeout(_) | LlmError::TooLarge(_) | LlmError::Malformed(_)) => {
                    (Tokens::of(None, body.len(), out_bytes), "error")
                }
                Err(_) => (Tokens::default(), "error"),
            };
            let row = self.record(job, model, ts, took, tokens, outcome);
            if let Ok(c) = &mut result {
                c.record = row;
            }
        }
        match &result {
            // A timed-out read leaves the connection in an unknown state, and an oversize
            // stream is not read on: drop the agent (and with it the connection).
            Err(LlmError::Cancelled | LlmError::Timeout(_) | LlmError::TooLarge(_)) => agent.shutdown(),
            _ => {
                let mut idle = sync::lock(&self.stream_agents);
                if idle.len() < MAX_IDLE_STREAM_AGENTS {
                    idle.push(agent);
                }
            }
        }
        result
    }

    /// The stream: request (one retry before any byte arrived), then decode SSE and assemble
    /// the completion.
    fn read_stream(
        &self,
        agent: &ureq::Agent,
        body: &mut Vec<u8>,
        stream: &mut Stream<'_>,
    ) -> Result<Completion, LlmError> {
        let url = format!("{}/chat/completions", self.api_base);
        let cancel = stream.cancel;
        let mut attempt = 0;
        let resp = loop {
            attempt += 1;
            match self.post(agent, &url, body, "text/event-stream") {
                Ok(r) => break r,
                Err((e, retry_after)) => {
                    // Every request sent is a ledger row; the last one is recorded by the caller.
                    let (ts, took) = stream_started(stream);
                    let refused_usage = stream.asked
                        && matches!(&e, LlmError::Http { status: 400 | 422, message } if message.contains("stream_options"));
                    if refused_usage {
                        self.record(stream.job, stream.model, ts, took, Tokens::default(), "error");
                        stream.started = (time::now_millis() as u64, Instant::now());
                        without_stream_options(body);
                        stream.asked = false;
                        self.no_stream_options.store(true, std::sync::atomic::Ordering::Relaxed);
                        log::warn!(
                            "event=llm.stream_options_refused provider={} model={:?}",
                            self.provider,
                            stream.model
                        );
                        continue;
                    }
                    if e.retry_wait(retry_after).is_some() && attempt == 1 {
                        self.record(stream.job, stream.model, ts, took, Tokens::default(), "error");
                        stream.started = (time::now_millis() as u64, Instant::now());
                    }
                    match e.retry_wait(retry_after) {
                        Some(wait) if attempt == 1 => {
                            if cancel.wait_chan().recv_timeout(wait).is_err() && cancel.is_cancelled() {
                                return Err(LlmError::Cancelled);
                            }
                        }
                        _ => return Err(e),
                    }
                }
            }
        };
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("text/event-stream"));
        let body = resp.into_body();
        if !is_sse {
            // Some servers ignore `stream: true`; accept a whole JSON completion.
            let mut c = body
                .into_with_config()
                .limit(MAX_CHUNK_BYTES as u64)
                .read_to_vec()
                .map_err(|e| self.map_err(&e))
                .and_then(|b| parse_completion(&b))?;
            let shown = c.state.shown();
            let over = c.content.len() + shown.len() + c.state.extra_bytes() > stream.room;
            if over {
                let room = stream.room.saturating_sub(shown.len());
                c.content.truncate(crate::util::text::take_bytes(&c.content, room).len());
            }
            let mut pieces = Vec::new();
            if !shown.is_empty() && shown.len() <= stream.room {
                pieces.push(Piece { reasoning: true, text: shown });
            }
            if !c.content.is_empty() {
                pieces.push(Piece { reasoning: false, text: c.content.clone() });
            }
            stream.hand_over(&mut pieces)?;
            if over {
                return Err(LlmError::TooLarge(ANSWER_TOO_LARGE));
            }
            if c.tool_calls.iter().map(|t| t.name.len() + t.arguments.len()).sum::<usize>() > MAX_TOOL_CALL_BYTES {
                return Err(LlmError::TooLarge(TOOL_CALLS_TOO_LARGE));
            }
            return Ok(c);
        }
        let mut reader = SseReader::with_limits(body.into_reader(), MAX_CHUNK_BYTES, MAX_CHUNK_BYTES);
        // Deltas of chunks parsed but not yet handed over: they go out together just before
        // the reader would wait for the network, so chunks that arrived together become one
        // socket write to the client, never a later one.
        let mut held = Vec::new();
        let result = self.read_events(&mut reader, stream, &mut held);
        match (result, stream.hand_over(&mut held)) {
            (Ok(c), Ok(())) => Ok(c),
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        }
    }

    /// The SSE part of [`LlmClient::read_stream`]: assembles the completion; text deltas go
    /// to `held` and are handed over whenever the reader is about to read.
    fn read_events<R: std::io::Read>(
        &self,
        reader: &mut SseReader<R>,
        stream: &mut Stream<'_>,
        held: &mut Vec<Piece>,
    ) -> Result<Completion, LlmError> {
        let cancel = stream.cancel;
        let mut out = Completion::default();
        let mut calls: Vec<ToolCall> = Vec::new();
        // Bytes of tool-call names, arguments and extras so far ([`MAX_TOOL_CALL_BYTES`]).
        let mut call_bytes = 0;
        // Bytes of this call's answer and reasoning (shown or kept) so far, against `room`.
        let mut used = 0;
        // The key whose text is shown as reasoning: the first one the stream uses (vLLM
        // sends the same text under both).
        let mut shown_key: Option<ReasoningKey> = None;
        let max_gap = self.timeout * MAX_EVENT_GAP_READS;
        let mut last_event = Instant::now();
        loop {
            if cancel.is_cancelled() {
                return Err(LlmError::Cancelled);
            }
            let mut handed = Ok(());
            let ev = reader.next_event_with(&mut || {
                handed = stream.hand_over(held);
                if handed.is_err() {
                    return Err(std::io::Error::other("cancelled"));
                }
                // Each read is bounded by the per-read timeout, but a peer can keep every
                // read short by dripping bytes that never make an event.
                if last_event.elapsed() > max_gap {
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no stream event"));
                }
                Ok(())
            });
            handed?;
            let ev = match ev {
                Ok(Some(ev)) => ev,
                Ok(None) => return Err(LlmError::Truncated),
                Err(SseError::Io(e)) => return Err(map_io(&e, self.timeout)),
                Err(SseError::LineTooLong(_) | SseError::EventTooLarge(_)) => {
                    return Err(LlmError::TooLarge(CHUNK_TOO_LARGE))
                }
            };
            last_event = Instant::now();
            let data = ev.data.trim();
            if data == "[DONE]" {
                stream.hand_over(held)?;
                // Read the body to its end (the chunked terminator) so the connection goes
                // back to the pool and the next model call skips a new connect/TLS handshake;
                // only briefly: the answer is complete, and an unread body just costs that.
                let until = Instant::now() + DRAIN_TIME;
                let mut briefly = || match Instant::now() < until {
                    true => Ok(()),
                    false => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "drained long enough")),
                };
                for _ in 0..64 {
                    if !matches!(reader.next_event_with(&mut briefly), Ok(Some(_))) {
                        break;
                    }
                }
                out.tool_calls = calls.into_iter().filter(|c| !c.name.is_empty()).collect();
                return Ok(out);
            }
            if data.is_empty() {
                continue;
            }
            // Nesting is bounded before parsing: the peer picks it, the worker's stack is finite.
            if too_deep(data.as_bytes(), MAX_JSON_DEPTH).is_some() {
                return Err(LlmError::Malformed("stream data is not JSON"));
            }
            let chunk = parse_chunk(data).map_err(|_| LlmError::Malformed("stream data is not JSON"))?;
            if let Some(err) = &chunk.error {
                let msg = message_of(err, 0).unwrap_or("error in stream");
                let status = err.get("code").and_then(Value::as_u64).unwrap_or(500) as u16;
                return Err(LlmError::Http { status, message: self.short(msg) });
            }
            for c in chunk.into_chunks() {
                match c {
                    Chunk::Reasoning(key, t) => {
                        let shown = *shown_key.get_or_insert(key) == key;
                        let room = stream.room - used;
                        // Reasoning counts against the cap as answers do, shown or not.
                        if t.len() > room {
                            let cut = crate::util::text::take_bytes(&t, if shown { room } else { 0 });
                            if !cut.is_empty() {
                                held.push(Piece { reasoning: true, text: cut.to_string() });
                            }
                            stream.hand_over(held)?;
                            return Err(LlmError::TooLarge(ANSWER_TOO_LARGE));
                        }
                        used += t.len();
                        out.state.push_text(key, &t);
                        if shown && !t.is_empty() {
                            held.push(Piece { reasoning: true, text: t.into_owned() });
                        }
                    }
                    Chunk::ReasoningDetails(items) => {
                        let bytes: usize = items.iter().map(|i| i.to_string().len()).sum();
                        if bytes > stream.room - used {
                            stream.hand_over(held)?;
                            return Err(LlmError::TooLarge(ANSWER_TOO_LARGE));
                        }
                        used += bytes;
                        if shown_key.is_none() {
                            // Shown only when no plain reasoning text comes with them.
                            for text in items.iter().filter_map(MessageState::detail_text) {
                                held.push(Piece { reasoning: true, text: text.to_string() });
                            }
                        }
                        merge_details(&mut out.state.reasoning_details, items);
                    }
                    Chunk::Text(t) => {
                        let room = stream.room - used;
                        if t.len() > room {
                            // The text up to the cap goes out and is kept; the rest is dropped
                            // with the connection.
                            let cut = crate::util::text::take_bytes(&t, room);
                            if !cut.is_empty() {
                                held.push(Piece { reasoning: false, text: cut.to_string() });
                            }
                            stream.hand_over(held)?;
                            return Err(LlmError::TooLarge(ANSWER_TOO_LARGE));
                        }
                        used += t.len();
                        out.content.push_str(&t);
                        held.push(Piece { reasoning: false, text: t.into_owned() });
                    }
                    Chunk::ToolFragment { index, id, name, arguments, extra } => {
                        call_bytes += name.as_ref().map_or(0, String::len)
                            + arguments.as_ref().map_or(0, String::len)
                            + extra.as_ref().map_or(0, |e| Value::Object(e.clone()).to_string().len());
                        if call_bytes > MAX_TOOL_CALL_BYTES {
                            return Err(LlmError::TooLarge(TOOL_CALLS_TOO_LARGE));
                        }
                        if calls.len() <= index {
                            if index > 128 {
                                return Err(LlmError::Malformed("tool call index out of range"));
                            }
                            calls.resize_with(index + 1, ToolCall::default);
                        }
                        let c = &mut calls[index];
                        if let Some(id) = id.filter(|s| !s.is_empty()) {
                            c.id = id;
                        }
                        // A later fragment repeating the whole name (or an empty one, as Z.ai's
                        // GLM sends) leaves it as it is.
                        if let Some(n) = name.filter(|n| *n != c.name) {
                            c.name.push_str(&n);
                        }
                        if let Some(a) = arguments {
                            c.arguments.push_str(&a);
                        }
                        if let Some(extra) = extra {
                            c.extra.get_or_insert_with(Default::default).extend(extra);
                        }
                    }
                    Chunk::Finish(reason) => out.finish_reason = Some(reason),
                    Chunk::Usage(u) => out.usage = Some(Usage::from_value(&u)),
                }
            }
            if held.len() >= MAX_HELD_DELTAS {
                stream.hand_over(held)?;
            }
        }
    }

    /// POSTs JSON; maps transport errors and non-2xx statuses (with `retry-after`).
    fn post(
        &self,
        agent: &ureq::Agent,
        url: &str,
        body: &[u8],
        accept: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, (LlmError, Option<Duration>)> {
        let resp = agent
            .post(url)
            .header("Authorization", &*self.authorization())
            .header("Content-Type", "application/json")
            .header("Accept", accept)
            .send(body)
            .map_err(|e| (self.map_err(&e), None))?;
        self.check_status(resp)
    }

    fn check_status(
        &self,
        resp: ureq::http::Response<ureq::Body>,
    ) -> Result<ureq::http::Response<ureq::Body>, (LlmError, Option<Duration>)> {
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(resp);
        }
        let retry_after = resp
            .headers()
            .get("retry-after-ms")
            .and_then(|v| v.to_str().ok()?.trim().parse::<f64>().ok())
            .map(|ms| ms / 1000.0)
            .or_else(|| resp.headers().get("retry-after").and_then(|v| v.to_str().ok()?.trim().parse::<f64>().ok()))
            .filter(|s| (0.0..=60.0).contains(s))
            .map(Duration::from_secs_f64);
        let text = resp.into_body().into_with_config().limit(MAX_ERROR_BODY).read_to_string().unwrap_or_default();
        Err((LlmError::Http { status, message: self.short(&error_message(&text)) }, retry_after))
    }

    /// A provider message made safe to show: redacted, one line, at most 200 characters.
    fn short(&self, msg: &str) -> String {
        let one = crate::util::text::collapse_ws(&self.redact(msg));
        crate::util::text::take_chars(&one, 200).to_string()
    }

    fn map_err(&self, e: &ureq::Error) -> LlmError {
        if let Some(why) = crate::util::url::tls_missing(&self.api_base) {
            return LlmError::Other(why.into());
        }
        match e {
            ureq::Error::Timeout(_) => LlmError::Timeout(self.timeout),
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => LlmError::Connect,
            ureq::Error::Io(io) => map_io(io, self.timeout),
            ureq::Error::BodyExceedsLimit(_) => LlmError::Malformed("response too large"),
            other => LlmError::Other(self.short(&other.to_string())),
        }
    }

    /// Server stop: non-streamed calls in flight (consolidation, Dream, skill evolution,
    /// discovery) fail at once and later ones are refused, as the agent's sockets are shut;
    /// no new stream starts (streams in flight end with their turns' cancel), and idle
    /// stream connections close.
    pub(crate) fn shutdown(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
        self.agent.clone().shutdown();
        for agent in sync::lock(&self.stream_agents).drain(..) {
            agent.shutdown();
        }
    }

    /// Non-streamed completion without tools (consolidation, Dream), bounded by `timeout`.
    pub(crate) fn complete(
        &self,
        job: &Job,
        model: &str,
        messages: Vec<Value>,
        timeout: Duration,
    ) -> Result<String, LlmError> {
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(LlmError::Other("the server is stopping".into()));
        }
        self.admit(job, model)?;
        let body = CompletionRequest::new(model, &messages).to_vec();
        let url = format!("{}/chat/completions", self.api_base);
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = (time::now_millis() as u64, Instant::now());
            let result = self.complete_once(&url, &body, started, timeout);
            let (tokens, outcome) = match &result {
                Ok((c, _)) => (Tokens::of(c.usage, body.len(), c.content.len()), "ok"),
                Err((LlmError::Timeout(_) | LlmError::Truncated, _)) => (Tokens::of(None, body.len(), 0), "error"),
                Err(_) => (Tokens::default(), "error"),
            };
            self.record(job, model, sent.0, sent.1.elapsed(), tokens, outcome);
            match result {
                Ok((c, _)) => {
                    if c.content.len() > MAX_ANSWER_BYTES {
                        return Err(LlmError::TooLarge(ANSWER_TOO_LARGE));
                    }
                    return Ok(c.content);
                }
                Err((e, retry_after)) => match e.retry_wait(retry_after) {
                    Some(wait) if attempt == 1 && started.elapsed() < timeout => {
                        std::thread::sleep(wait.min(timeout.saturating_sub(started.elapsed())));
                    }
                    _ => return Err(e),
                },
            }
        }
    }

    /// One attempt of [`LlmClient::complete`].
    #[allow(clippy::type_complexity)]
    fn complete_once(
        &self,
        url: &str,
        body: &[u8],
        started: Instant,
        timeout: Duration,
    ) -> Result<(Completion, ()), (LlmError, Option<Duration>)> {
        {
            let req = self
                .agent
                .post(url)
                .config()
                .timeout_global(Some(timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(1))))
                .build()
                .header("Authorization", &*self.authorization())
                .header("Content-Type", "application/json")
                .header("Accept", "application/json");
            let resp = req.send(body).map_err(|e| (self.map_err(&e), None)).and_then(|r| self.check_status(r))?;
            let bytes = resp
                .into_body()
                .into_with_config()
                .limit(MAX_BODY)
                .read_to_vec()
                .map_err(|e| (self.map_err(&e), None))?;
            parse_completion(&bytes).map(|c| (c, ())).map_err(|e| (e, None))
        }
    }

    /// The `Authorization` value, wiped once the request is built (ureq keeps its own copy
    /// while sending).
    fn authorization(&self) -> zeroize::Zeroizing<String> {
        zeroize::Zeroizing::new(format!("Bearer {}", self.settings.bearer(self.provider)))
    }

    /// The request budget in characters this endpoint reports for `model`, once known; the
    /// first call starts the lookup in the background (`llm::context`).
    pub(crate) fn context_chars(&self, model: &str) -> Option<usize> {
        self.context.chars(model, || super::context::Endpoint {
            provider: self.provider,
            api_base: self.api_base.clone(),
            bearer: zeroize::Zeroizing::new(self.settings.bearer(self.provider).to_string()),
            agent: self.agent.clone(),
        })
    }

    /// `GET <base>/models`: ids of the first 500 items, trimmed, unique, sorted case-insensitively.
    pub(crate) fn list_models(&self) -> Result<Vec<String>, LlmError> {
        let resp = self
            .agent
            .get(&format!("{}/models", self.api_base))
            .config()
            .timeout_global(Some(DISCOVERY_TIMEOUT))
            .build()
            .header("Authorization", &*self.authorization())
            .header("Accept", "application/json")
            .call()
            .map_err(|e| self.map_err(&e))
            .and_then(|r| self.check_status(r).map_err(|(e, _)| e))?;
        let bytes = resp.into_body().into_with_config().limit(MAX_BODY).read_to_vec().map_err(|e| self.map_err(&e))?;
        let not_json = LlmError::Malformed("model list is not JSON");
        if too_deep(&bytes, MAX_JSON_DEPTH).is_some() {
            return Err(not_json);
        }
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| not_json)?;
        Ok(model_ids(&v))
    }
}

/// Discovery normalisation (docs/llm-settings.md §5).
pub(crate) fn model_ids(v: &Value) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    if let Some(items) = v.get("data").and_then(Value::as_array) {
        for item in items.iter().take(MAX_MODELS) {
            if let Some(id) = item.get("id").and_then(Value::as_str).map(str::trim) {
                if !id.is_empty() && id.chars().count() <= 256 && !ids.iter().any(|x| x == id) {
                    ids.push(id.to_string());
                }
            }
        }
    }
    ids.sort_by_key(|s| s.to_lowercase());
    ids
}

/// One stream in flight.
struct Stream<'a> {
    cancel: &'a CancelToken,
    /// Where its text and reasoning deltas go (the turn emits them as `delta` and `reasoning`
    /// events), in order: the deltas of chunks that arrived together come in one call.
    on_text: &'a dyn Fn(&[Piece]),
    /// Every delta handed to `on_text` so far.
    streamed: &'a mut Streamed,
    /// Bytes this call may still add to `streamed` ([`MAX_ANSWER_BYTES`] for the turn).
    room: usize,
    /// What the request is for, and its model (the ledger row).
    job: &'a Job,
    model: &'a str,
    /// Whether the body asks for usage (`stream_options`).
    asked: bool,
    /// When the current request was sent: epoch milliseconds and the clock.
    started: (u64, Instant),
}

fn stream_started(s: &Stream<'_>) -> (u64, Duration) {
    (s.started.0, s.started.1.elapsed())
}

const STREAM_OPTIONS: &[u8] = br#","stream_options":{"include_usage":true}}"#;

/// What [`with_stream_options`] adds to a body: the context budget counts it (it replaces the
/// body's closing brace, which it repeats).
pub(crate) const STREAM_OPTIONS_CHARS: usize = STREAM_OPTIONS.len() - 1;

/// Adds `"stream_options":{"include_usage":true}` as the body object's last key, in place
/// (the request's other bytes, and so the provider's prompt cache, stay as they were);
/// `false` when the body is not an object.
fn with_stream_options(body: &mut Vec<u8>) -> bool {
    if body.last() != Some(&b'}') || body.len() < 2 {
        return false;
    }
    body.pop();
    body.extend_from_slice(STREAM_OPTIONS);
    true
}

/// Undoes [`with_stream_options`].
fn without_stream_options(body: &mut Vec<u8>) {
    if body.ends_with(STREAM_OPTIONS) {
        body.truncate(body.len() - STREAM_OPTIONS.len());
        body.push(b'}');
    }
}

/// The token counts of one request: the provider's, or estimated from bytes (about four
/// per token) where it sent none.
#[derive(Debug, Clone, Copy, Default)]
struct Tokens {
    input: u64,
    cached: u64,
    cache_write: u64,
    output: u64,
    reasoning: u64,
    reported: bool,
}

impl Tokens {
    fn of(usage: Option<Usage>, sent_bytes: usize, got_bytes: usize) -> Tokens {
        match usage {
            Some(u) if u.prompt_tokens.is_some() || u.completion_tokens.is_some() => Tokens {
                input: u.prompt_tokens.unwrap_or(0),
                cached: u.cached_tokens.unwrap_or(0),
                cache_write: u.cache_write_tokens.unwrap_or(0),
                output: u.completion_tokens.unwrap_or(0),
                reasoning: u.reasoning_tokens.unwrap_or(0),
                reported: true,
            },
            _ => Tokens {
                input: sent_bytes.div_ceil(4) as u64,
                output: got_bytes.div_ceil(4) as u64,
                ..Tokens::default()
            },
        }
    }
}

/// Deltas held back while more parsed chunks follow at once (see `read_stream`).
const MAX_HELD_DELTAS: usize = 64;
/// A stream with no event for this many read timeouts ends as timed out.
const MAX_EVENT_GAP_READS: u32 = 3;
/// The wait before retrying a request the service refused or did not answer in time, unless
/// it said how long (`retry-after`).
const RETRY_WAIT: Duration = Duration::from_millis(500);
/// How long the rest of a stream is read after `[DONE]` (see `read_events`).
const DRAIN_TIME: Duration = Duration::from_millis(500);

impl Stream<'_> {
    /// Hands the held deltas over (and empties `held`); `Cancelled` once the turn is: a
    /// cancelled turn emits nothing more.
    fn hand_over(&mut self, held: &mut Vec<Piece>) -> Result<(), LlmError> {
        if held.is_empty() {
            return Ok(());
        }
        if self.cancel.is_cancelled() {
            held.clear();
            return Err(LlmError::Cancelled);
        }
        for p in held.iter() {
            match p.reasoning {
                true => self.streamed.reasoning.push_str(&p.text),
                false => self.streamed.text.push_str(&p.text),
            }
        }
        (self.on_text)(held);
        held.clear();
        Ok(())
    }
}

/// Parses a non-streamed `chat.completion` body (nesting bounded first: the callers include
/// the small-stacked `skill-evolution` thread).
pub(crate) fn parse_completion(bytes: &[u8]) -> Result<Completion, LlmError> {
    let not_json = LlmError::Malformed("response is not JSON");
    if too_deep(bytes, MAX_JSON_DEPTH).is_some() {
        return Err(not_json);
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|_| not_json)?;
    let msg = v.pointer("/choices/0/message").ok_or(LlmError::Malformed("response has no choices"))?;
    let content = match msg.get("content") {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let tool_calls = msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| {
                    let f = c.get("function")?;
                    let extra: serde_json::Map<String, Value> = c
                        .as_object()?
                        .iter()
                        .filter(|(k, v)| !matches!(k.as_str(), "index" | "id" | "type" | "function") && !v.is_null())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    Some(ToolCall {
                        extra: (!extra.is_empty()).then_some(extra),
                        id: c.get("id").and_then(Value::as_str).unwrap_or_default().to_string(),
                        name: f.get("name").and_then(Value::as_str)?.to_string(),
                        arguments: match f.get("arguments") {
                            Some(Value::String(s)) => s.clone(),
                            Some(Value::Null) | None => String::new(),
                            Some(other) => other.to_string(),
                        },
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Completion {
        content,
        tool_calls,
        finish_reason: v.pointer("/choices/0/finish_reason").and_then(Value::as_str).map(str::to_string),
        usage: v.get("usage").or_else(|| v.pointer("/x_groq/usage")).filter(|u| u.is_object()).map(Usage::from_value),
        state: MessageState::of_message(msg),
        record: None,
    })
}

/// The provider's own message in an error body: an object (`{"error": {"message"}}`,
/// `{"error": "…"}`, `{"message"}`, `{"detail"}`), a list of such objects (Gemini's body is
/// a JSON list), a JSON string, or plain text (not an HTML page). Empty when there is none.
fn error_message(body: &str) -> String {
    let body = body.trim();
    if too_deep(body.as_bytes(), MAX_JSON_DEPTH).is_some() {
        return String::new();
    }
    match serde_json::from_str::<Value>(body) {
        Ok(v) => message_of(&v, 0).unwrap_or_default().to_string(),
        Err(_) if body.starts_with('<') => String::new(),
        Err(_) => body.to_string(),
    }
}

/// The message of an error value (see [`error_message`]), looked for a few levels deep.
fn message_of(v: &Value, depth: usize) -> Option<&str> {
    if depth > 6 {
        return None;
    }
    match v {
        Value::String(s) => Some(s.as_str()).filter(|s| !s.trim().is_empty()),
        Value::Array(items) => items.iter().find_map(|i| message_of(i, depth + 1)),
        Value::Object(m) => ["error", "message", "detail", "msg"]
            .iter()
            .filter_map(|k| m.get(*k))
            .find_map(|v| message_of(v, depth + 1)),
        _ => None,
    }
}

fn map_io(e: &std::io::Error, timeout: Duration) -> LlmError {
    use std::io::ErrorKind::*;
    match e.kind() {
        TimedOut | WouldBlock => LlmError::Timeout(timeout),
        ConnectionRefused | ConnectionReset | ConnectionAborted | NotConnected | AddrNotAvailable => LlmError::Connect,
        UnexpectedEof => LlmError::Truncated,
        InvalidData => LlmError::Malformed("invalid stream data"),
        _ => {
            let text = e.to_string();
            if text.to_ascii_lowercase().contains("timeout") || text.to_ascii_lowercase().contains("timed out") {
                LlmError::Timeout(timeout)
            } else {
                LlmError::Other(redact::redact(&text))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn model_ids_are_normalised() {
        let v = json!({"data": [{"id": " b "}, {"id": "A"}, {"id": "b"}, {"id": ""}, {"x": 1}, {"id": "a2"}]});
        assert_eq!(model_ids(&v), ["A", "a2", "b"]);
        assert!(model_ids(&json!({})).is_empty());
    }

    #[test]
    fn parses_completion_with_tools() {
        let body = br#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"save_memory","arguments":"{\"content\":\"x\"}"}}]},"finish_reason":"tool_calls"}]}"#;
        let c = parse_completion(body).unwrap();
        assert_eq!(c.content, "");
        assert_eq!(c.tool_calls[0].name, "save_memory");
        assert!(parse_completion(b"nope").is_err());
    }

    /// Every shape of error body gives the provider's own message.
    #[test]
    fn error_bodies_of_every_shape() {
        let gemini = r#"[{"error": {"code": 400, "message": "Function call is missing a thought_signature in functionCall parts.", "status": "INVALID_ARGUMENT"}}]"#;
        for (body, want) in [
            (r#"{"error":{"message":"The reasoning_content in the thinking mode must be passed back to the API.","type":"invalid_request_error"}}"#, "The reasoning_content in the thinking mode must be passed back to the API."),
            (gemini, "Function call is missing a thought_signature in functionCall parts."),
            (r#"{"error":"model not found"}"#, "model not found"),
            (r#"{"message":"Rate limit","code":"1302"}"#, "Rate limit"),
            (r#"{"detail":"Not Found"}"#, "Not Found"),
            (r#"{"object":"error","message":{"detail":[{"msg":"Input should be a valid string"}]}}"#, "Input should be a valid string"),
            (r#""overloaded""#, "overloaded"),
            ("upstream connect error or disconnect/reset before headers\n", "upstream connect error or disconnect/reset before headers\n"),
            ("<html><body>502 Bad Gateway</body></html>", ""),
            ("", ""),
            (r#"{"error":{"code":500}}"#, ""),
            ("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"x\"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", ""),
        ] {
            assert_eq!(error_message(body), want.trim(), "{body}");
        }
    }

    #[test]
    fn error_details_never_hold_keys() {
        let e = LlmError::Http { status: 401, message: String::new() };
        assert_eq!(e.to_string(), "Model service error (HTTP 401): Authentication failed; check the API key.");
        assert_eq!(e.category(), "Authentication failed; check the API key.");
        assert!(LlmError::NotConfigured(Provider::Ollama).to_string().contains("LLM not configured (ollama)"));
    }

    /// A listener on 127.0.0.1 and settings whose OpenAI-compatible endpoint is it.
    fn local_endpoint() -> (std::net::TcpListener, Settings) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let settings = Settings {
            openai_base_url: format!("http://{}/v1", listener.local_addr().unwrap()),
            openai_api_key: "k".into(),
            ollama_base_url: String::new(),
        };
        (listener, settings)
    }

    #[test]
    fn shutdown_interrupts_a_completion_waiting_for_the_model() {
        use std::io::Read;
        let (listener, settings) = local_endpoint();
        let client =
            Arc::new(LlmClient::new(&Arc::new(settings), Provider::OpenAiCompatible, Duration::from_secs(60)).unwrap());
        let c2 = Arc::clone(&client);
        let call = std::thread::spawn(move || {
            let r = c2.complete(
                &Job::new("dream", None),
                "m",
                vec![json!({"role": "user", "content": "hi"})],
                Duration::from_secs(60),
            );
            (r, Instant::now())
        });
        // The request arrives and is never answered.
        let (mut peer, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        assert!(peer.read(&mut buf).unwrap() > 0);
        let stopped = Instant::now();
        client.shutdown();
        let (result, ended) = call.join().unwrap();
        assert!(result.is_err(), "{result:?}");
        assert!(ended.duration_since(stopped) < Duration::from_secs(5), "the call waited for the model");
    }

    /// A peer that keeps every read short by dripping bytes that never make an event is cut
    /// off after three read timeouts without one; the text streamed before is kept.
    #[test]
    fn a_stream_dripping_bytes_without_events_times_out() {
        use std::io::{Read, Write};
        let (listener, settings) = local_endpoint();
        let peer = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64 * 1024];
            let _ = sock.read(&mut buf).unwrap();
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            let first = r#"data: {"choices":[{"delta":{"content":"hi"}}]}"#;
            sock.write_all(format!("{head}{first}\n\n: ").as_bytes()).unwrap();
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) && sock.write_all(b"x").is_ok() {
                std::thread::sleep(Duration::from_millis(100));
            }
            started.elapsed()
        });
        let client = LlmClient::new(&Arc::new(settings), Provider::OpenAiCompatible, Duration::from_secs(1)).unwrap();
        let (mut streamed, deltas) = (Streamed::default(), std::cell::RefCell::new(Vec::new()));
        let started = Instant::now();
        let r = client.stream_chat(
            &Job::new("turn", None),
            "m",
            br#"{"model":"m","stream":true,"messages":[]}"#.to_vec(),
            &CancelToken::new(),
            &|d: &[Piece]| deltas.borrow_mut().extend(d.iter().map(|p| p.text.clone())),
            &mut streamed,
        );
        let took = started.elapsed();
        assert_eq!(r, Err(LlmError::Timeout(Duration::from_secs(1))));
        assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(6), "took {took:?}");
        assert_eq!((streamed.text.as_str(), deltas.into_inner()), ("hi", vec!["hi".to_string()]));
        assert!(peer.join().unwrap() < Duration::from_secs(10), "the connection was closed");
    }

    /// A stream past the answer cap: the text up to the cap is handed over and kept, the call
    /// ends with `TooLarge`, and the connection is dropped (the peer cannot write on).
    #[test]
    fn a_stream_past_the_answer_cap_is_cut_there_and_dropped() {
        use std::io::{Read, Write};
        let (listener, settings) = local_endpoint();
        let peer = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let _ = sock.read(&mut [0u8; 64 * 1024]).unwrap();
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            sock.write_all(head.as_bytes()).unwrap();
            let event =
                format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", "é".repeat(100_000));
            let mut written = 0;
            while written < 256 * 1024 * 1024 && sock.write_all(event.as_bytes()).is_ok() {
                written += event.len();
            }
            written
        });
        let client = LlmClient::new(&Arc::new(settings), Provider::OpenAiCompatible, Duration::from_secs(5)).unwrap();
        let (mut streamed, handed) =
            (Streamed { text: "x".repeat(10), ..Streamed::default() }, std::cell::Cell::new(0));
        let r = client.stream_chat(
            &Job::new("turn", None),
            "m",
            br#"{"model":"m","stream":true,"messages":[]}"#.to_vec(),
            &CancelToken::new(),
            &|d: &[Piece]| handed.set(handed.get() + d.iter().map(|p| p.text.len()).sum::<usize>()),
            &mut streamed,
        );
        assert_eq!(r, Err(LlmError::TooLarge(ANSWER_TOO_LARGE)));
        // The turn's earlier text counts: 10 bytes, then two-byte characters up to the cap.
        assert_eq!(streamed.text.len(), MAX_ANSWER_BYTES);
        assert_eq!(handed.get(), MAX_ANSWER_BYTES - 10);
        assert!(streamed.text[10..].chars().all(|c| c == 'é'));
        drop(client);
        assert!(peer.join().unwrap() < 64 * 1024 * 1024, "the connection was dropped, not read on");
    }

    /// Reasoning counts against the same cap as the answer: a model thinking without end is
    /// cut at 1 MiB of answer and reasoning together, the reasoning up to it kept.
    #[test]
    fn endless_reasoning_is_cut_at_the_answer_cap() {
        use std::io::{Read, Write};
        let (listener, settings) = local_endpoint();
        let peer = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let _ = sock.read(&mut [0u8; 64 * 1024]).unwrap();
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            sock.write_all(head.as_bytes()).unwrap();
            let answer = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n";
            sock.write_all(answer.as_bytes()).unwrap();
            let event = format!(
                "data: {{\"choices\":[{{\"delta\":{{\"reasoning_content\":\"{}\"}}}}]}}\n\n",
                "é".repeat(100_000)
            );
            let mut written = 0;
            while written < 256 * 1024 * 1024 && sock.write_all(event.as_bytes()).is_ok() {
                written += event.len();
            }
            written
        });
        let client = LlmClient::new(&Arc::new(settings), Provider::OpenAiCompatible, Duration::from_secs(5)).unwrap();
        let mut streamed = Streamed::default();
        let r = client.stream_chat(
            &Job::new("turn", None),
            "m",
            br#"{"model":"m","stream":true,"messages":[]}"#.to_vec(),
            &CancelToken::new(),
            &|_: &[Piece]| {},
            &mut streamed,
        );
        assert_eq!(r, Err(LlmError::TooLarge(ANSWER_TOO_LARGE)));
        assert_eq!(streamed.text, "ok");
        assert!(streamed.len() <= MAX_ANSWER_BYTES && streamed.len() > MAX_ANSWER_BYTES - 4, "{}", streamed.len());
        drop(client);
        assert!(peer.join().unwrap() < 64 * 1024 * 1024, "the connection was dropped, not read on");
    }

    /// A stream's reasoning and extras: shown reasoning goes out as reasoning pieces before
    /// the answer, every key the provider used is kept, tool-call extras are kept per call,
    /// and a later fragment's empty or repeated name leaves the name alone.
    #[test]
    fn reasoning_and_extras_are_kept_apart_from_the_answer() {
        use std::io::{Read, Write};
        let (listener, settings) = local_endpoint();
        let peer = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let _ = sock.read(&mut [0u8; 64 * 1024]).unwrap();
            let events = [
                r#"{"choices":[{"delta":{"role":"assistant","content":null,"reasoning_content":""}}]}"#,
                r#"{"choices":[{"delta":{"reasoning_content":"Think","reasoning":"Think"}}]}"#,
                r#"{"choices":[{"delta":{"content":"Hi"}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"grep","arguments":""},"extra_content":{"google":{"thought_signature":"SIG"}}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"","arguments":"{}"}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"grep"}}]}}]}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}],"x_groq":{"usage":{"prompt_tokens":3}}}"#,
            ];
            let body: String = events
                .iter()
                .map(|e| {
                    format!(
                        "data: {e}

"
                    )
                })
                .collect::<String>()
                + "data: [DONE]

";
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n", body.len());
            sock.write_all(format!("{head}{body}").as_bytes()).unwrap();
        });
        let client = LlmClient::new(&Arc::new(settings), Provider::OpenAiCompatible, Duration::from_secs(5)).unwrap();
        let (mut streamed, pieces) = (Streamed::default(), std::cell::RefCell::new(Vec::new()));
        let c = client
            .stream_chat(
                &Job::new("turn", None),
                "m",
                br#"{"model":"m","stream":true,"messages":[]}"#.to_vec(),
                &CancelToken::new(),
                &|d: &[Piece]| pieces.borrow_mut().extend_from_slice(d),
                &mut streamed,
            )
            .unwrap();
        peer.join().unwrap();
        assert_eq!(
            pieces.into_inner(),
            [Piece { reasoning: true, text: "Think".into() }, Piece { reasoning: false, text: "Hi".into() }]
        );
        assert_eq!((c.content.as_str(), streamed.text.as_str(), streamed.reasoning.as_str()), ("Hi", "Hi", "Think"));
        assert_eq!(Value::Object(c.state.to_map()), json!({"reasoning_content": "Think", "reasoning": "Think"}));
        assert_eq!(c.tool_calls.len(), 1);
        assert_eq!((c.tool_calls[0].name.as_str(), c.tool_calls[0].arguments.as_str()), ("grep", "{}"));
        assert_eq!(
            c.tool_calls[0].extra.clone().map(Value::Object),
            Some(json!({"extra_content": {"google": {"thought_signature": "SIG"}}}))
        );
        assert_eq!(c.usage.and_then(|u| u.prompt_tokens), Some(3));
    }

    /// A kept-alive connection the service closes just as it is reused fails before any
    /// response byte; the call is retried at once on a new connection.
    #[test]
    fn a_reused_connection_closed_before_the_response_is_retried() {
        use std::io::{Read, Write};
        let (listener, settings) = local_endpoint();
        let read_request = |sock: &mut std::net::TcpStream| {
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") || !req.ends_with(b"}") {
                let n = sock.read(&mut buf).unwrap();
                assert!(n > 0, "the request was cut short");
                req.extend_from_slice(&buf[..n]);
            }
        };
        let answer = |sock: &mut std::net::TcpStream, text: &str| {
            let body = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\ndata: [DONE]\n\n");
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n", body.len());
            sock.write_all(format!("{head}{body}").as_bytes()).unwrap();
        };
        let peer = std::thread::spawn(move || {
            let (mut first, _) = listener.accept().unwrap();
            read_request(&mut first);
            answer(&mut first, "one");
            // The second call reuses this connection; it is closed instead of answered.
            read_request(&mut first);
            drop(first);
            let (mut second, _) = listener.accept().unwrap();
            read_request(&mut second);
            answer(&mut second, "two");
        });
        let client = LlmClient::new(&Arc::new(settings), Provider::OpenAiCompatible, Duration::from_secs(5)).unwrap();
        let call = || {
            let mut streamed = Streamed::default();
            let r = client.stream_chat(
                &Job::new("turn", None),
                "m",
                br#"{"model":"m","stream":true,"messages":[]}"#.to_vec(),
                &CancelToken::new(),
                &|_: &[Piece]| {},
                &mut streamed,
            );
            r.map(|c| c.content)
        };
        assert_eq!(call().as_deref(), Ok("one"));
        let started = Instant::now();
        assert_eq!(call().as_deref(), Ok("two"));
        assert!(started.elapsed() < Duration::from_millis(400), "retried at once: {:?}", started.elapsed());
        peer.join().unwrap();
    }

    /// A service that closes every connection before answering gets the request twice, no
    /// more: the retry of a connection closed under the request is one retry, not a loop.
    #[test]
    fn a_service_that_always_closes_is_tried_twice() {
        use std::io::Read;
        let (listener, settings) = local_endpoint();
        listener.set_nonblocking(true).unwrap();
        let peer = std::thread::spawn(move || {
            let (mut accepted, started) = (0, Instant::now());
            // Accepts for a second, and half a second more per connection it took.
            while started.elapsed() < Duration::from_secs(1) + Duration::from_millis(500) * accepted {
                match listener.accept() {
                    Ok((mut sock, _)) => {
                        sock.set_nonblocking(false).unwrap();
                        let _ = sock.read(&mut [0u8; 4096]);
                        accepted += 1;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            accepted
        });
        let client = LlmClient::new(&Arc::new(settings), Provider::OpenAiCompatible, Duration::from_secs(5)).unwrap();
        let r = client.stream_chat(
            &Job::new("turn", None),
            "m",
            br#"{"model":"m","stream":true,"messages":[]}"#.to_vec(),
            &CancelToken::new(),
            &|_: &[Piece]| {},
            &mut Streamed::default(),
        );
        assert_eq!(r, Err(LlmError::Truncated));
        assert_eq!(peer.join().unwrap(), 2, "one request and one retry");
    }

    #[test]
    fn loopback_detection() {
        assert!(is_loopback_url("http://127.0.0.1:11434/v1"));
        assert!(is_loopback_url("http://localhost/v1"));
        assert!(is_loopback_url("http://[::1]:1/v1"));
        assert!(!is_loopback_url("http://10.0.0.2:11434/v1"));
    }
}
