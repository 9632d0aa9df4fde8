//! A scripted fake OpenAI-compatible model server on 127.0.0.1:0. It serves `POST
//! .../chat/completions` from a queue of [`Reply`] scripts (streamed SSE text or tool calls,
//! delays, gates the test opens, HTTP errors, cut or malformed streams, plain JSON completions)
//! and `GET .../models` from fixed lists, and records every request.
//!
//! It is a small hand-written HTTP/1.1 server on std sockets rather than tiny_http because a
//! test needs to cut a response mid-body (close the socket without the terminal chunk) and to
//! hold back the status line; tiny_http keeps the connection alive behind the handler's back.
//!
//! Threads: one accept thread plus one thread per connection; the test thread only scripts and
//! inspects. Misuse by the server under test (a call nobody scripted, a `tool` message whose
//! `tool_call_id` was never announced by an assistant `tool_calls` message) is recorded as a
//! failure and fails the test when the fake is dropped.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long a scripted gate waits for the test before giving up and cutting the response.
const GATE_LIMIT: Duration = Duration::from_secs(30);

/// A barrier inside a scripted reply: the fake stops there until the test opens it, and tells
/// the test when it got there.
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<(bool, bool)>, Condvar)>);

impl Gate {
    pub fn new() -> Self {
        Gate::default()
    }
    pub fn open(&self) {
        let (m, cv) = &*self.0;
        m.lock().expect("gate lock").0 = true;
        cv.notify_all();
    }
    /// Blocks until the fake has reached this gate (all bytes before it are written).
    pub fn wait_reached(&self, within: Duration) {
        let (m, cv) = &*self.0;
        let deadline = Instant::now() + within;
        let mut g = m.lock().expect("gate lock");
        while !g.1 {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "fake LLM never reached the gate within {within:?}");
            g = cv.wait_timeout(g, left).expect("gate wait").0;
        }
    }
    /// Fake side: marks the gate reached and waits until it is opened, the fake stops, or
    /// [`GATE_LIMIT`] passes. Returns whether it was opened.
    fn pass(&self, stop: &AtomicBool) -> bool {
        let (m, cv) = &*self.0;
        let deadline = Instant::now() + GATE_LIMIT;
        let mut g = m.lock().expect("gate lock");
        g.1 = true;
        cv.notify_all();
        while !g.0 {
            if stop.load(Ordering::SeqCst) || Instant::now() >= deadline {
                return false;
            }
            g = cv.wait_timeout(g, Duration::from_millis(20)).expect("gate wait").0;
        }
        true
    }
}

#[derive(Clone)]
enum Step {
    Sleep(Duration),
    Gate(Gate),
    /// Writes the status line and headers (done implicitly before the first `Data`).
    Head,
    /// One chunk of the (chunked) body, flushed at once.
    Data(Vec<u8>),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Terminal chunk; the connection stays usable.
    Clean,
    /// Socket shut down mid-body.
    Cut,
}

/// One scripted answer to one chat request.
#[derive(Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    /// Streamed replies: the steps; fixed replies: `None` and `body`.
    steps: Option<Vec<Step>>,
    body: Vec<u8>,
    ending: Ending,
    /// The server may send the identical request again (a client retry) and get this again.
    retryable: bool,
    /// Whether the request must ask for `stream: true` (`Some(true)`), `false`, or either.
    expect_stream: Option<bool>,
    /// Content chunk indexes, for delay/gate placement: position in `steps` of each chunk.
    chunk_pos: Vec<usize>,
    content_type: &'static str,
    /// Tool calls a recorded stream issues ([`Reply::recorded`]): what the provider's rules
    /// want back in later requests.
    issued: Vec<Issued>,
    /// Position in `steps` of the usage chunk: sent only when the request asks for it with
    /// `stream_options.include_usage`, as OpenAI does.
    usage_at: Option<usize>,
}

/// One tool call a recorded stream issued, with what its provider wants sent back on it.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The model the stream answered for: its rules bind requests to that model only.
    pub model: String,
    pub id: String,
    /// The message's `reasoning_content` when the stream used the key (DeepSeek's rule).
    pub reasoning_content: Option<String>,
    /// The call's `extra_content` (Gemini's thought signature).
    pub extra_content: Option<Value>,
}

/// The strict rules of real providers the fake can enforce ([`FakeLlm::enforce`]). A request
/// breaking one is answered with that provider's own error, as the real API would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strict {
    /// DeepSeek's thinking mode: an assistant message whose tool calls came with
    /// `reasoning_content` carries it back, exactly, in every later request.
    DeepSeekReasoning,
    /// Gemini 3: every tool call that came with `extra_content` (its thought signature)
    /// carries it back verbatim in every later request.
    GeminiSignatures,
    /// The request after a tool-call stream sends the issued call ids back as they were
    /// (Mistral's 9-character ids, Kimi's `name:0`), each answered by a tool message.
    EchoIds,
    /// Some Azure OpenAI API versions: a request with `stream_options` is refused with 400.
    RefuseStreamOptions,
}

/// Azure's answer to a request with a field its API version does not know.
pub const AZURE_STREAM_OPTIONS_400: &str = r#"{"error":{"code":null,"message":"Unrecognized request argument supplied: stream_options","param":null,"type":"invalid_request_error"}}"#;

/// DeepSeek's answer to a request that dropped the reasoning of a tool-call message.
pub const DEEPSEEK_400: &str = r#"{"error":{"message":"The reasoning_content in the thinking mode must be passed back to the API.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#;
/// Gemini's answer (a JSON list) to a tool call without its thought signature.
pub const GEMINI_400: &str = r#"[{"error":{"code":400,"message":"Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:bash` , position 2. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.","status":"INVALID_ARGUMENT"}}]"#;

impl Issued {
    /// The tool calls a recorded stream (one chunk JSON per line) issues.
    fn of_stream(lines: &[Value]) -> Vec<Issued> {
        let mut calls: Vec<Issued> = Vec::new();
        let mut reasoning: Option<String> = None;
        for chunk in lines {
            let delta = &chunk["choices"][0]["delta"];
            if let Some(t) = delta.get("reasoning_content").and_then(Value::as_str) {
                reasoning.get_or_insert_with(String::new).push_str(t);
            }
            for (pos, c) in delta["tool_calls"].as_array().into_iter().flatten().enumerate() {
                let i = c["index"].as_u64().map_or(pos, |i| i as usize);
                while calls.len() <= i {
                    calls.push(Issued {
                        model: String::new(),
                        id: String::new(),
                        reasoning_content: None,
                        extra_content: None,
                    });
                }
                if let Some(id) = c["id"].as_str().filter(|id| !id.is_empty()) {
                    calls[i].id = id.to_string();
                }
                if let Some(e) = c.get("extra_content") {
                    calls[i].extra_content = Some(e.clone());
                }
            }
        }
        calls.retain(|c| !c.id.is_empty());
        for c in &mut calls {
            c.reasoning_content = reasoning.clone();
        }
        calls
    }
}

/// The error a request earns under `rules`, given every call issued so far and the calls of
/// the stream served just before.
fn broken_rule(rules: &[Strict], issued: &[Issued], last: &[Issued], body: &Value) -> Option<(u16, String)> {
    let msgs = body["messages"].as_array()?;
    let issued: Vec<&Issued> = issued.iter().filter(|i| body["model"] == i.model.as_str()).collect();
    let last: Vec<&Issued> = last.iter().filter(|i| body["model"] == i.model.as_str()).collect();
    let assistant_calls = || {
        msgs.iter()
            .filter(|m| m["role"] == "assistant")
            .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten().map(move |c| (m, c)))
    };
    for rule in rules {
        match rule {
            Strict::RefuseStreamOptions => {
                if body.get("stream_options").is_some() {
                    return Some((400, AZURE_STREAM_OPTIONS_400.to_string()));
                }
            }
            Strict::DeepSeekReasoning => {
                for (m, c) in assistant_calls() {
                    let want =
                        issued.iter().find(|i| c["id"] == i.id.as_str()).and_then(|i| i.reasoning_content.as_ref());
                    if want.is_some_and(|w| m["reasoning_content"] != w.as_str()) {
                        return Some((400, DEEPSEEK_400.to_string()));
                    }
                }
            }
            Strict::GeminiSignatures => {
                for (_, c) in assistant_calls() {
                    let want = issued.iter().find(|i| c["id"] == i.id.as_str()).and_then(|i| i.extra_content.as_ref());
                    if want.is_some_and(|w| c.get("extra_content") != Some(w)) {
                        return Some((400, GEMINI_400.to_string()));
                    }
                }
            }
            Strict::EchoIds => {
                for i in &last {
                    let called = assistant_calls().any(|(_, c)| c["id"] == i.id.as_str());
                    let answered = msgs.iter().any(|m| m["role"] == "tool" && m["tool_call_id"] == i.id.as_str());
                    if !called || !answered {
                        let msg = format!("Tool call id {:?} was not sent back with its result", i.id);
                        return Some((400, json!({"object":"error","message":msg,"type":"invalid_request_message_error","code":"3230"}).to_string()));
                    }
                }
            }
        }
    }
    None
}

/// One tool call a scripted reply streams, its arguments split into fragments.
#[derive(Clone)]
pub struct ToolCallSpec {
    pub id: String,
    pub name: String,
    pub args: Vec<String>,
}

impl ToolCallSpec {
    pub fn new(id: &str, name: &str, args: &[&str]) -> Self {
        ToolCallSpec { id: id.into(), name: name.into(), args: args.iter().map(|s| s.to_string()).collect() }
    }
    /// The arguments as the server must assemble them.
    pub fn full_args(&self) -> String {
        self.args.concat()
    }
}

fn sse(v: &Value) -> Vec<u8> {
    format!("data: {v}\n\n").into_bytes()
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1796000000,
           "model":"test-model",
           "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
}

fn usage_chunk() -> Value {
    json!({"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1796000000,
           "model":"test-model","choices":[],
           "usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}})
}

impl Reply {
    fn stream(steps: Vec<Step>, chunk_pos: Vec<usize>) -> Self {
        Reply {
            status: 200,
            headers: Vec::new(),
            steps: Some(steps),
            body: Vec::new(),
            ending: Ending::Clean,
            retryable: false,
            expect_stream: Some(true),
            chunk_pos,
            content_type: "text/event-stream",
            issued: Vec::new(),
            usage_at: None,
        }
    }

    /// The usage object this streamed reply reports (when asked for it) instead of the
    /// default `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`; `Value::Null`
    /// sends no usage chunk at all.
    pub fn with_usage(mut self, usage: Value) -> Self {
        let at = self.usage_at.expect("a text or tool-call reply");
        let mut c = usage_chunk();
        c["usage"] = usage.clone();
        self.steps.as_mut().expect("streamed")[at] = match usage.is_null() {
            true => Step::Data(Vec::new()),
            false => Step::Data(sse(&c)),
        };
        self
    }

    /// This streamed text answer ends with `finish_reason: reason` instead of `stop` (`length`
    /// for a reply cut at the output cap, `content_filter` for a filtered one).
    pub fn with_finish(mut self, reason: &str) -> Self {
        let at = self.usage_at.expect("a text reply") - 1;
        self.steps.as_mut().expect("streamed")[at] = Step::Data(sse(&chunk(json!({}), Some(reason))));
        self
    }

    /// A streamed text answer: a role-only chunk, one SSE chunk per piece, a finish chunk, a
    /// usage chunk with empty `choices`, then `[DONE]`.
    pub fn text(pieces: &[&str]) -> Self {
        let mut steps = vec![Step::Head, Step::Data(sse(&chunk(json!({"role":"assistant","content":""}), None)))];
        let mut pos = Vec::new();
        for p in pieces {
            pos.push(steps.len());
            steps.push(Step::Data(sse(&chunk(json!({"content":p}), None))));
        }
        steps.push(Step::Data(sse(&chunk(json!({}), Some("stop")))));
        let usage_at = steps.len();
        steps.push(Step::Data(sse(&usage_chunk())));
        steps.push(Step::Data(b"data: [DONE]\n\n".to_vec()));
        Reply { usage_at: Some(usage_at), ..Reply::stream(steps, pos) }
    }

    /// Streamed tool calls: each call's id/name first, then the argument fragments of all calls
    /// interleaved round-robin by `index`, then `finish_reason: tool_calls` and `[DONE]`.
    pub fn tool_calls(calls: &[ToolCallSpec]) -> Self {
        let mut steps = vec![Step::Head, Step::Data(sse(&chunk(json!({"role":"assistant","content":null}), None)))];
        for (i, c) in calls.iter().enumerate() {
            steps.push(Step::Data(sse(&chunk(
                json!({"tool_calls":[{"index":i,"id":c.id,"type":"function",
                        "function":{"name":c.name,"arguments":""}}]}),
                None,
            ))));
        }
        let longest = calls.iter().map(|c| c.args.len()).max().unwrap_or(0);
        let mut pos = Vec::new();
        for k in 0..longest {
            for (i, c) in calls.iter().enumerate() {
                if let Some(frag) = c.args.get(k) {
                    pos.push(steps.len());
                    steps.push(Step::Data(sse(&chunk(
                        json!({"tool_calls":[{"index":i,"function":{"arguments":frag}}]}),
                        None,
                    ))));
                }
            }
        }
        steps.push(Step::Data(sse(&chunk(json!({}), Some("tool_calls")))));
        let usage_at = steps.len();
        steps.push(Step::Data(sse(&usage_chunk())));
        steps.push(Step::Data(b"data: [DONE]\n\n".to_vec()));
        Reply { usage_at: Some(usage_at), ..Reply::stream(steps, pos) }
    }

    /// An HTTP error with a JSON body (a retry of the same request gets it again).
    pub fn status(code: u16, body: &str) -> Self {
        Reply {
            status: code,
            headers: Vec::new(),
            steps: None,
            body: body.as_bytes().to_vec(),
            ending: Ending::Clean,
            retryable: true,
            expect_stream: None,
            chunk_pos: Vec::new(),
            content_type: "application/json",
            issued: Vec::new(),
            usage_at: None,
        }
    }

    /// Text pieces, then the socket is shut down with no finish chunk, `[DONE]` or terminal
    /// chunk.
    pub fn cut(pieces: &[&str]) -> Self {
        let mut steps = vec![Step::Head];
        let mut pos = Vec::new();
        for p in pieces {
            pos.push(steps.len());
            steps.push(Step::Data(sse(&chunk(json!({"content":p}), None))));
        }
        let mut r = Reply::stream(steps, pos);
        r.ending = Ending::Cut;
        r.retryable = true;
        r
    }

    /// A 200 event stream of the given raw byte pieces, each written and flushed separately
    /// (for SSE framing variants: comments, CRLF, `data:` without a space, split lines).
    pub fn raw_sse(pieces: &[&str]) -> Self {
        let mut steps = vec![Step::Head];
        steps.extend(pieces.iter().map(|p| Step::Data(p.as_bytes().to_vec())));
        Reply::stream(steps, Vec::new())
    }

    /// A 200 event stream whose data line is not JSON.
    pub fn malformed() -> Self {
        let steps = vec![
            Step::Head,
            Step::Data(b"data: {this is not json\n\n".to_vec()),
            Step::Data(b"data: [DONE]\n\n".to_vec()),
        ];
        let mut r = Reply::stream(steps, Vec::new());
        r.retryable = true;
        r
    }

    /// A stream recorded from a real provider (`tests/fixtures/providers/<name>`: one chunk's
    /// JSON per line), each chunk its own SSE event, then `[DONE]`. The tool calls it issues
    /// are remembered for [`FakeLlm::enforce`].
    pub fn recorded(name: &str) -> Self {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers").join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let lines: Vec<Value> =
            text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).expect(name)).collect();
        let mut steps = vec![Step::Head];
        steps.extend(lines.iter().map(|l| Step::Data(sse(l))));
        steps.push(Step::Data(b"data: [DONE]\n\n".to_vec()));
        let mut r = Reply::stream(steps, Vec::new());
        r.issued = Issued::of_stream(&lines);
        r
    }

    /// A non-streamed `chat.completion` answering a `stream: false` request.
    pub fn completion(text: &str) -> Self {
        let body = json!({"id":"chatcmpl-fake","object":"chat.completion","created":1796000000,
            "model":"test-model",
            "choices":[{"index":0,"message":{"role":"assistant","content":text},
                        "finish_reason":"stop"}],
            "usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}});
        Reply {
            status: 200,
            headers: Vec::new(),
            steps: None,
            body: body.to_string().into_bytes(),
            ending: Ending::Clean,
            retryable: false,
            expect_stream: Some(false),
            chunk_pos: Vec::new(),
            content_type: "application/json",
            issued: Vec::new(),
            usage_at: None,
        }
    }

    /// A fixed JSON body with status 200 (used for `/models`).
    pub fn json(v: Value) -> Self {
        let mut r = Reply::status(200, &v.to_string());
        r.retryable = false;
        r
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }

    /// Waits `d` before sending anything (no status line yet). The client may time out and
    /// retry the identical request, which then gets this reply again.
    pub fn first_byte_delay(mut self, d: Duration) -> Self {
        self.retryable = true;
        self.insert_before_head(Step::Sleep(d));
        self
    }

    /// Holds the status line back until `g` opens.
    pub fn gate_before_head(mut self, g: &Gate) -> Self {
        self.retryable = true;
        self.insert_before_head(Step::Gate(g.clone()));
        self
    }

    /// Waits `d` before every content (or tool-argument) chunk.
    pub fn chunk_delay(mut self, d: Duration) -> Self {
        let positions = self.chunk_pos.clone();
        for p in positions.into_iter().rev() {
            self.insert_at(p, Step::Sleep(d));
        }
        self
    }

    /// Stops before content chunk number `i` (0-based) until `g` opens.
    pub fn gate_before_chunk(mut self, i: usize, g: &Gate) -> Self {
        let p = self.chunk_pos[i];
        self.insert_at(p, Step::Gate(g.clone()));
        self
    }

    fn insert_before_head(&mut self, step: Step) {
        match &mut self.steps {
            Some(_) => self.insert_at(0, step),
            None => {
                // A fixed reply becomes a one-chunk stream so the wait happens before any byte.
                let mut steps = vec![step];
                steps.push(Step::Head);
                steps.push(Step::Data(std::mem::take(&mut self.body)));
                self.steps = Some(steps);
                self.chunk_pos.clear();
            }
        }
    }

    fn insert_at(&mut self, p: usize, step: Step) {
        let steps = self.steps.as_mut().expect("a streamed reply");
        steps.insert(p, step);
        for q in &mut self.chunk_pos {
            if *q >= p {
                *q += 1;
            }
        }
    }
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` when empty or not JSON).
    pub body: Value,
    pub raw: String,
    pub received: Instant,
    /// Time the fake spent from having read the request to having written the whole reply.
    pub handled: Option<Duration>,
    /// Which TCP connection carried the request (numbered in accept order).
    pub conn: u64,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn is_chat(&self) -> bool {
        self.path.ends_with("/chat/completions")
    }
}

struct Last {
    raw: String,
    reply: Reply,
    retries_left: usize,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Reply>,
    last: Option<Last>,
    requests: Vec<Recorded>,
    failures: Vec<String>,
    models: HashMap<String, Reply>,
    /// Served when the queue is empty (instead of recording an unexpected call).
    fallback: Option<Reply>,
    /// Replies for non-streamed requests (`stream` not true: consolidation, Dream), kept apart
    /// because they run in the background and interleave with turns.
    completions: VecDeque<Reply>,
    completion_fallback: Option<Reply>,
    /// Replies kept for streamed requests whose body contains the key (a tag in a chat's
    /// messages), so chats running at the same time each get their own script.
    routed: Vec<(String, VecDeque<Reply>)>,
    /// Provider rules enforced, every tool call recorded streams issued, and the calls of the
    /// last stream served.
    strict: Vec<Strict>,
    issued: Vec<Issued>,
    last_issued: Vec<Issued>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

/// The fake model server; dropped at the end of the test.
pub struct FakeLlm {
    shared: Arc<Shared>,
    port: u16,
}

/// Retries of one failing request the fake tolerates (the original SDK does one).
const MAX_RETRIES: usize = 2;

impl FakeLlm {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake LLM");
        let port = listener.local_addr().expect("fake addr").port();
        let mut models = HashMap::new();
        models.insert(
            "/models".to_string(),
            Reply::json(json!({"object":"list","data":[
                {"id":"gpt-fake","object":"model"},{"id":"Alpha-model","object":"model"}]})),
        );
        models.insert(
            "/v1/models".to_string(),
            Reply::json(json!({"object":"list","data":[{"id":"qwen3:8b","object":"model"}]})),
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(State { models, ..State::default() }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("fake-llm-accept".into())
            .spawn(move || accept_loop(listener, sh))
            .expect("spawn fake accept");
        FakeLlm { shared, port }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>` (the openai_compatible base; Ollama adds `/v1` itself).
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Queues a reply for the next chat request.
    pub fn push(&self, reply: Reply) {
        self.shared.state.lock().expect("fake state").queue.push_back(reply);
    }

    /// Replaces what `GET <path>` returns (`/models` or `/v1/models`; `/api/show` for POST).
    pub fn set_models(&self, path: &str, reply: Reply) {
        self.shared.state.lock().expect("fake state").models.insert(path.to_string(), reply);
    }

    /// Queues a reply for the next streamed chat request whose body contains `key` (served
    /// before the shared queue), for chats that run concurrently.
    pub fn push_for(&self, key: &str, reply: Reply) {
        let mut st = self.shared.state.lock().expect("fake state");
        match st.routed.iter_mut().find(|(k, _)| k == key) {
            Some((_, q)) => q.push_back(reply),
            None => st.routed.push((key.to_string(), VecDeque::from([reply]))),
        }
    }

    /// Serves `reply` to every chat request that finds the queue empty, without recording
    /// misuse (for tests whose number of model calls is legitimately unknown).
    pub fn set_fallback(&self, reply: Reply) {
        self.shared.state.lock().expect("fake state").fallback = Some(reply);
    }

    /// Enforces a real provider's rule on every later chat request ([`Strict`]).
    pub fn enforce(&self, rule: Strict) {
        self.shared.state.lock().expect("fake state").strict.push(rule);
    }

    /// Queues a reply for the next non-streamed chat request.
    pub fn push_completion(&self, reply: Reply) {
        self.shared.state.lock().expect("fake state").completions.push_back(reply);
    }

    /// Serves `reply` to every non-streamed request that finds its queue empty.
    pub fn set_completion_fallback(&self, reply: Reply) {
        self.shared.state.lock().expect("fake state").completion_fallback = Some(reply);
    }

    /// Scripted replies not consumed yet.
    pub fn pending(&self) -> usize {
        self.shared.state.lock().expect("fake state").queue.len()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state.lock().expect("fake state").requests.clone()
    }

    /// Chat-completion requests only, in arrival order.
    pub fn chat_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.is_chat()).collect()
    }

    /// Blocks until at least `n` chat requests arrived; returns them.
    pub fn wait_chat_requests(&self, n: usize, within: Duration) -> Vec<Recorded> {
        let deadline = Instant::now() + within;
        let mut st = self.shared.state.lock().expect("fake state");
        loop {
            let chats: Vec<Recorded> = st.requests.iter().filter(|r| r.is_chat()).cloned().collect();
            if chats.len() >= n {
                return chats;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "fake LLM got {} chat requests, expected {n} within {within:?}", chats.len());
            st = self.shared.changed.wait_timeout(st, left).expect("fake wait").0;
        }
    }

    /// Blocks until the reply to chat request number `i` (0-based) is fully written.
    pub fn wait_handled(&self, i: usize, within: Duration) -> Duration {
        let deadline = Instant::now() + within;
        let mut st = self.shared.state.lock().expect("fake state");
        loop {
            if let Some(d) = st.requests.iter().filter(|r| r.is_chat()).nth(i).and_then(|r| r.handled) {
                return d;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "chat request {i} not handled within {within:?}");
            st = self.shared.changed.wait_timeout(st, left).expect("fake wait").0;
        }
    }

    /// Misuse recorded so far.
    pub fn failures(&self) -> Vec<String> {
        self.shared.state.lock().expect("fake state").failures.clone()
    }

    /// Returns and clears the misuse recorded so far (for tests of the fake itself).
    pub fn take_failures(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.state.lock().expect("fake state").failures)
    }

    /// Drops the request log (benchmarks would otherwise keep every body).
    pub fn clear_requests(&self) {
        self.shared.state.lock().expect("fake state").requests.clear();
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        let failures = self.failures();
        if failures.is_empty() {
            return;
        }
        if std::thread::panicking() {
            eprintln!("==== fake LLM saw misuse by the server:\n{}", failures.join("\n"));
        } else {
            panic!("fake LLM saw misuse by the server:\n{}", failures.join("\n"));
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_conn = 0u64;
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else { continue };
        next_conn += 1;
        let conn_id = next_conn;
        let sh = shared.clone();
        let _ = std::thread::Builder::new()
            .name("fake-llm-conn".into())
            .stack_size(256 * 1024)
            .spawn(move || serve_connection(stream, sh, conn_id));
    }
}

struct RawRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Reads one request; `None` on EOF, idle timeout, stop, or garbage.
fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>, stop: &AtomicBool) -> Option<RawRequest> {
    let idle_deadline = Instant::now() + Duration::from_secs(120);
    let mut tmp = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            break p;
        }
        if stop.load(Ordering::SeqCst) || Instant::now() >= idle_deadline {
            return None;
        }
        match stream.read(&mut tmp) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return None,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    buf.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let get = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    let mut fill = |buf: &mut Vec<u8>, need: usize| -> bool {
        while buf.len() < need {
            if stop.load(Ordering::SeqCst) {
                return false;
            }
            match stream.read(&mut tmp) {
                Ok(0) => return false,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return false,
            }
        }
        true
    };
    let body = if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if !fill(buf, len) {
            return None;
        }
        buf.drain(..len).collect()
    } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(p) = find(buf, b"\r\n") {
                    break p;
                }
                let n = buf.len() + 1;
                if !fill(buf, n) {
                    return None;
                }
            };
            let size_text = String::from_utf8_lossy(&buf[..line_end]).to_string();
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            buf.drain(..line_end + 2);
            if !fill(buf, size + 2) {
                return None;
            }
            body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
            if size == 0 {
                break body;
            }
        }
    } else {
        Vec::new()
    };
    Some(RawRequest { method, path, headers, body })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>, conn: u64) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut stream, &mut buf, &shared.stop) {
        let close_after =
            req.headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close"));
        let start = Instant::now();
        let (reply, idx) = choose_reply(&shared, &req, start, conn);
        let cut = write_reply(&mut stream, &reply, &shared.stop);
        let handled = start.elapsed();
        {
            let mut st = shared.state.lock().expect("fake state");
            if let Some(r) = st.requests.get_mut(idx) {
                r.handled = Some(handled);
            }
        }
        shared.changed.notify_all();
        if cut || close_after {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// Records the request, validates chat requests and picks the reply.
fn choose_reply(shared: &Shared, req: &RawRequest, now: Instant, conn: u64) -> (Reply, usize) {
    let raw = String::from_utf8_lossy(&req.body).to_string();
    let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
    let path = req.path.split('?').next().unwrap_or("").to_string();
    let mut st = shared.state.lock().expect("fake state");
    st.requests.push(Recorded {
        method: req.method.clone(),
        path: path.clone(),
        headers: req.headers.clone(),
        body: body.clone(),
        raw: raw.clone(),
        received: now,
        handled: None,
        conn,
    });
    let idx = st.requests.len() - 1;
    shared.changed.notify_all();
    let reply = if req.method == "GET" && path.ends_with("/models") {
        st.models.get(&path).cloned().unwrap_or_else(|| Reply::status(404, r#"{"error":{"message":"no such route"}}"#))
    } else if req.method == "POST" && path == "/api/show" {
        // Ollama's model details (the server's context-length lookup); set with `set_models`.
        st.models.get(&path).cloned().unwrap_or_else(|| Reply::status(404, r#"{"error":"model not found"}"#))
    } else if req.method == "POST" && path.ends_with("/chat/completions") {
        if let Some(problem) = check_chat_body(&body) {
            st.failures.push(format!("chat request {path}: {problem}"));
        }
        if let Some((status, error)) = broken_rule(&st.strict, &st.issued, &st.last_issued, &body) {
            return (Reply::status(status, &error), idx);
        }
        let retry = match &mut st.last {
            Some(last) if last.raw == raw && last.retries_left > 0 => {
                last.retries_left -= 1;
                Some(last.reply.clone())
            }
            _ => None,
        };
        let background = body["stream"] != json!(true);
        let routed = if retry.is_none() && !background {
            st.routed
                .iter_mut()
                .find(|(k, q)| !q.is_empty() && raw.contains(k.as_str()))
                .and_then(|(_, q)| q.pop_front())
        } else {
            None
        };
        match retry.or(routed) {
            Some(r) => r,
            None if background => match st.completions.pop_front() {
                Some(r) => r,
                None => match st.completion_fallback.clone() {
                    Some(r) => r,
                    None => {
                        st.failures.push(format!("unexpected non-streamed request {path}: {}", short(&raw)));
                        Reply::status(500, r#"{"error":{"message":"fake llm: no scripted completion"}}"#)
                    }
                },
            },
            None => match st.queue.pop_front() {
                Some(r) => {
                    if let Some(want) = r.expect_stream {
                        if body["stream"] != json!(want) {
                            st.failures.push(format!(
                                "chat request {path}: expected \"stream\": {want}, got {}",
                                body["stream"]
                            ));
                        }
                    }
                    st.last = Some(Last {
                        raw: raw.clone(),
                        reply: r.clone(),
                        retries_left: if r.retryable { MAX_RETRIES } else { 0 },
                    });
                    let model = body["model"].as_str().unwrap_or_default();
                    let issued: Vec<Issued> =
                        r.issued.iter().map(|i| Issued { model: model.to_string(), ..i.clone() }).collect();
                    st.issued.extend(issued.iter().cloned());
                    st.last_issued = issued;
                    r
                }
                None if st.fallback.is_some() => st.fallback.clone().expect("checked"),
                None => {
                    st.failures
                        .push(format!("unexpected extra chat request {path} (no scripted reply): {}", short(&raw)));
                    Reply::status(500, r#"{"error":{"message":"fake llm: no scripted reply"}}"#)
                }
            },
        }
    } else {
        st.failures.push(format!("unexpected request {} {path}", req.method));
        Reply::status(404, r#"{"error":{"message":"no such route"}}"#)
    };
    let mut reply = reply;
    if let (Some(at), false) = (reply.usage_at, body.pointer("/stream_options/include_usage") == Some(&json!(true))) {
        if let Some(steps) = reply.steps.as_mut() {
            steps[at] = Step::Data(Vec::new());
        }
    }
    (reply, idx)
}

fn short(s: &str) -> String {
    s.chars().take(400).collect()
}

/// OpenAI rules a real provider enforces: a JSON object with `model` and `messages`; every
/// `tool` message answers a `tool_calls` id announced by an earlier assistant message, and
/// every announced id is answered before the next non-tool message.
fn check_chat_body(body: &Value) -> Option<String> {
    let obj = body.as_object()?;
    if !obj.get("model").is_some_and(Value::is_string) {
        return Some("no string \"model\"".into());
    }
    let msgs = match obj.get("messages").and_then(Value::as_array) {
        Some(m) if !m.is_empty() => m,
        _ => return Some("no non-empty \"messages\" array".into()),
    };
    let mut announced: Vec<String> = Vec::new();
    let mut open: Vec<String> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or("");
            if !announced.iter().any(|a| a == id) {
                return Some(format!(
                    "message {i}: tool message with tool_call_id {id:?} that no earlier assistant tool_calls announced"
                ));
            }
            open.retain(|o| o != id);
            continue;
        }
        if !open.is_empty() {
            return Some(format!("message {i} ({role}) follows tool calls {open:?} that were never answered"));
        }
        if role == "assistant" {
            if let Some(calls) = m["tool_calls"].as_array() {
                for c in calls {
                    let id = c["id"].as_str().unwrap_or("").to_string();
                    announced.push(id.clone());
                    open.push(id);
                }
            }
        }
    }
    if !open.is_empty() {
        return Some(format!("tool calls {open:?} never answered"));
    }
    None
}

/// Writes the reply; returns whether the connection was cut (or broke).
fn write_reply(stream: &mut TcpStream, reply: &Reply, stop: &AtomicBool) -> bool {
    let extra: String = reply.headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let Some(steps) = &reply.steps else {
        let head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
            reply.status,
            reason(reply.status),
            reply.body.len()
        );
        let ok = stream.write_all(head.as_bytes()).is_ok()
            && stream.write_all(&reply.body).is_ok()
            && stream.flush().is_ok();
        return !ok;
    };
    let ctype = reply.content_type;
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {ctype}\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n{extra}\r\n",
        reply.status,
        reason(reply.status)
    );
    let mut head_sent = false;
    for step in steps {
        match step {
            Step::Sleep(d) => {
                let until = Instant::now() + *d;
                while Instant::now() < until {
                    if stop.load(Ordering::SeqCst) {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(5).min(until - Instant::now()));
                }
            }
            Step::Gate(g) => {
                if !g.pass(stop) {
                    return true;
                }
            }
            Step::Head => {
                if !head_sent {
                    head_sent = true;
                    if stream.write_all(head.as_bytes()).and_then(|_| stream.flush()).is_err() {
                        return true;
                    }
                }
            }
            Step::Data(bytes) => {
                if !head_sent {
                    head_sent = true;
                    if stream.write_all(head.as_bytes()).is_err() {
                        return true;
                    }
                }
                if bytes.is_empty() {
                    continue;
                }
                let framed = [format!("{:x}\r\n", bytes.len()).as_bytes(), bytes, b"\r\n"].concat();
                if stream.write_all(&framed).and_then(|_| stream.flush()).is_err() {
                    return true;
                }
            }
        }
    }
    if reply.ending == Ending::Cut {
        return true;
    }
    stream.write_all(b"0\r\n\r\n").and_then(|_| stream.flush()).is_err()
}
