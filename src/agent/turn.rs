//! One turn (the ReAct loop), run on a worker thread: LLM check, title, prompt, streamed model
//! calls with tool execution between them (at most `MAX_ITERATIONS` tool rounds, then a final
//! call without tools), then one history append. Events go to the sink as they happen.
//! Cancel stops the loop at once; errors roll back everything but the title.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::approvals::TOO_MANY_ASKS_NOTE;
use super::prompt;
use super::Deps;
use crate::agent::approvals::policy::MAX_ASKS_PER_TURN;
use crate::bus::TurnRequest;
use crate::checkpoints::TurnCheckpoint;
use crate::llm::client::{Completion, LlmClient, LlmError, Piece, Streamed, ToolCall, STREAM_OPTIONS_CHARS};
use crate::llm::wire::ChatRequest;
use crate::memory_jobs::consolidator::Job;
use crate::store::cache::{assistant_calls, ChatState};
use crate::store::chats::{PendingTurn, Record};
use crate::store::replay::{self, Replay};
use crate::tool::{FinishedTurn, Preparation, Tool, ToolOutput, TurnCtx, TurnState, TURN_METADATA_KEYS};
use crate::util::cancel::CancelToken;
use crate::util::sync::{self, lock};
use crate::util::{rand, text, time};
use crate::wire::{Event, CANCELLED, RESULT_PREVIEW};

/// Model calls that may request tools; one more call without tools follows if all do.
pub(crate) const MAX_ITERATIONS: usize = 5;
/// Appended to registry-level tool failures (unknown, not activated, crashed).
pub(crate) const RETRY_HINT: &str = "\n\n[Analyze the error above and try a different approach.]";
/// Code points of the auto title.
pub(crate) const TITLE_CHARS: usize = 40;
const MAX_ITERATIONS_NOTE: &str = "The maximum number of tool-call iterations was reached. Answer now with the best \
available evidence, without calling tools.";

struct Turn<'a> {
    deps: &'a Deps,
    req: &'a TurnRequest,
    cancel: &'a CancelToken,
    stream_id: u64,
    started: Instant,
    /// Every text delta of the turn, in order (the stored final answer), and every reasoning
    /// delta (stored beside it).
    streamed: Streamed,
    /// Time the model spent reasoning before answering, over the turn's calls.
    reasoning_time: std::time::Duration,
    /// The provider state of the turn's last completed call (stored on the final answer).
    final_state: Option<Value>,
    /// Why the last model reply stopped, when it was cut rather than finished (`done`'s
    /// `stop_reason`).
    stop_reason: Option<&'static str>,
    /// Where this turn's requests go, and whether the model wants `reasoning_content` back.
    replay: Replay,
    /// Completed tool steps (`tool_calls` record + one `tool` record per call).
    durable: Vec<Record>,
    /// Explicit-selection receipts, persisted right after the user record.
    receipts: Vec<String>,
    /// Metadata the turn changed (activation sets), merged on success.
    turn_state: Option<Arc<Mutex<TurnState>>>,
    /// The write-ahead of the user message, from the first model call until the turn ends.
    pending: Option<PendingTurn>,
    /// The turn's rewind record, ended with the user message's cursor once stored.
    checkpoint: Option<Arc<TurnCheckpoint>>,
    /// The code of the closing error, when the failure has one (`LlmError::code`).
    code: Option<(&'static str, serde_json::Value)>,
    /// The stored answer is the server's note of that code (the budget stop), not the model's.
    note_answer: bool,
}

impl Turn<'_> {
    fn emit(&self, e: &Event<'_>) -> u64 {
        self.deps.sink.emit(&self.req.chat_id, e)
    }

    /// The turn's closing error, cleaned of known secret values.
    fn error(&mut self, detail: &str) {
        if let Some(p) = self.pending.take() {
            p.end();
        }
        if let Some(c) = self.checkpoint.take() {
            c.finish(None);
        }
        let detail = self.deps.secrets.redact(detail);
        let chat = Some(self.req.chat_id.as_str());
        let event = match &self.code {
            Some(code) => Event::coded_error(&detail, chat, code),
            None => Event::error(&detail, chat),
        };
        self.emit(&event);
    }
}

/// Runs one turn to its closing event (`done` or `error`).
pub(crate) fn run(deps: &Deps, req: &TurnRequest, cancel: &CancelToken) {
    let mut t = Turn {
        deps,
        req,
        cancel,
        stream_id: rand::js_safe_id(),
        started: Instant::now(),
        streamed: Streamed::default(),
        reasoning_time: std::time::Duration::ZERO,
        final_state: None,
        stop_reason: None,
        replay: Replay::new(req.selection.provider.id(), &req.selection.model),
        durable: Vec::new(),
        receipts: Vec::new(),
        turn_state: None,
        pending: None,
        checkpoint: None,
        code: None,
        note_answer: false,
    };
    // Without a seq: the original protocol's numbering stays one per event it knows; the hub
    // keeps it for a plain attach while the turn runs.
    let started = Event::TurnStarted { chat_id: &req.chat_id, stream_id: t.stream_id, message: &req.content };
    deps.sink.emit_transient(&req.chat_id, &started);
    let sel = &req.selection;
    let job = crate::ledger::Job::new("turn", Some(&req.chat_id));
    let client = match deps.llm.acquire(sel.provider, &sel.model) {
        Ok(c) => c,
        Err(e) => return t.error(&e.to_string()),
    };
    if cancel.is_cancelled() {
        return t.error(CANCELLED);
    }
    let chat_id = req.chat_id.as_str();
    let state = deps.cache.get(chat_id);

    // Title before any model call, so it survives a failed turn (docs/ws-protocol.md §5).
    let (title, fresh) = {
        let mut st = lock(&state);
        let fresh = st.records().is_empty();
        let untitled = st.metadata.get("title").and_then(Value::as_str).is_none_or(str::is_empty);
        if untitled && fresh {
            let title = text::take_chars(&text::collapse_ws(&req.content), TITLE_CHARS).to_string();
            st.metadata.insert("title".into(), Value::String(title.clone()));
            // The keys the turn's end writes, empty for now: one write of metadata.json per
            // new chat instead of two (each is a new file and a rename).
            for key in TURN_METADATA_KEYS {
                st.metadata.entry(key).or_insert_with(|| Value::Object(Map::new()));
            }
            if let Err(e) = deps.chats.write_metadata(chat_id, &st.metadata) {
                log::error!("event=metadata.write_failed chat_id={chat_id} error_kind={:?}", e.kind());
            }
            (Some(title), fresh)
        } else {
            (None, fresh)
        }
    };
    // A chat's folder exists from its first message on, whatever the turn's fate; later
    // writes create it again if it went missing.
    if let Some(dir) = deps.chats.dir(chat_id).filter(|_| fresh) {
        let _ = crate::util::fsx::create_private_dirs(&dir);
    }
    if let Some(title) = title {
        let updated_at = time::local_iso_offset_now();
        t.emit(&Event::SessionUpdated { chat_id, title: &title, updated_at: &updated_at });
    }

    // The chat's project (checked again: the owner may have narrowed the roots) or the workspace.
    let workspace = match deps.chat_root(&lock(&state).metadata) {
        Ok(w) => w,
        Err(detail) => return t.error(&detail),
    };
    let checkpoint = deps.checkpoints_for(&workspace).map(|c| c.begin_turn(chat_id, 0));
    let ctx = TurnCtx {
        chat_id: chat_id.to_string(),
        workspace,
        protected: deps.protected.clone(),
        memory: Arc::clone(&deps.memory),
        cancel: cancel.clone(),
        state: Arc::new(Mutex::new(TurnState { metadata: lock(&state).metadata.clone(), ..TurnState::default() })),
        confinement: Default::default(),
        checkpoint,
    };
    t.checkpoint = ctx.checkpoint.clone();
    let mut prep = Preparation::default();
    for ext in &deps.extensions {
        if let Err(detail) = ext.prepare(req, &ctx, &mut prep) {
            return t.error(&detail);
        }
        if cancel.is_cancelled() {
            return t.error(CANCELLED);
        }
    }
    t.receipts = std::mem::take(&mut prep.receipts);
    t.turn_state = Some(Arc::clone(&ctx.state));

    // The request's `messages` array in three parts: the system messages, the chat's cached
    // serialised context, then the user message and this turn's tool steps. Each model call
    // sends the newest context that fits the budget; under it, consecutive requests extend
    // each other byte for byte (provider prompt caches keep hitting).
    let (head, mut tail) = {
        let hints: Vec<String> = {
            let ts = ctx.state();
            deps.extensions.iter().filter_map(|e| e.hints(&ts.metadata)).collect()
        };
        let hints = (!hints.is_empty()).then(|| hints.join("\n\n"));
        let system =
            prompt::system_prompt(deps.memory.soul().as_deref(), deps.memory.memory().as_deref(), hints.as_deref());
        let mut m = Vec::new();
        push_message(&mut m, &json!({"role": "system", "content": system}));
        if !prep.system_bodies.is_empty() {
            let bodies = prep.system_bodies.join("\n\n---\n\n");
            let skills = format!("The user explicitly selected these Skills:\n\n{bodies}");
            push_message(&mut m, &json!({"role": "system", "content": skills}));
        }
        let mut tail = Vec::new();
        push_message(
            &mut tail,
            &json!({"role": "user", "content": prep.model_content.as_deref().unwrap_or(&req.content)}),
        );
        (m, tail)
    };
    let budget = context_budget(deps, &client, &sel.model);

    match deps.chats.begin_turn(chat_id, &user_record(req)) {
        Ok(p) => t.pending = Some(p),
        Err(e) => log::warn!("event=turn.pending_write_failed chat_id={chat_id} error_kind={:?}", e.kind()),
    }
    if let Some(c) = &ctx.checkpoint {
        let start = match &t.pending {
            Some(p) => p.start_cursor(),
            None => deps.chats.last_cursor_of(chat_id).unwrap_or(0),
        };
        c.set_start(start);
    }
    let mut iterations = 0;
    loop {
        let final_call = iterations == MAX_ITERATIONS;
        if final_call {
            push_message(&mut tail, &json!({"role": "user", "content": MAX_ITERATIONS_NOTE}));
        }
        let tools = if final_call { Vec::new() } else { visible_tools(deps, &ctx) };
        if !t.replay.empty_reasoning {
            t.replay.empty_reasoning = t.replay.seen_reasoning_content(lock(&state).records());
        }
        let body = match budgeted_body(deps, &state, &head, &tail, &tools, budget, &t.replay) {
            Ok(body) => body,
            Err(detail) => return t.error(&detail),
        };
        iterations += 1;
        t.final_state = None;
        let spent_before = client.ledger().map(|l| l.spend(&job)).unwrap_or_default();
        let result = {
            let (sink, stream_id, chat) = (&deps.sink, t.stream_id, req.chat_id.as_str());
            // When reasoning began and has not yet given way to the answer.
            let thinking: std::cell::Cell<Option<Instant>> = Default::default();
            let thought = std::cell::Cell::new(t.reasoning_time);
            let on_text = |pieces: &[Piece]| {
                let events: Vec<Event> = pieces
                    .iter()
                    .map(|p| {
                        let text = p.text.as_str();
                        match (p.reasoning, thinking.get()) {
                            (true, None) => thinking.set(Some(Instant::now())),
                            (false, Some(since)) => {
                                thought.set(thought.get() + since.elapsed());
                                thinking.set(None);
                            }
                            _ => {}
                        }
                        match p.reasoning {
                            true => Event::Reasoning { chat_id: chat, text, stream_id },
                            false => Event::Delta { chat_id: chat, text, stream_id },
                        }
                    })
                    .collect();
                sink.emit_all(chat, &events);
            };
            let result = client.stream_chat(&job, &sel.model, body, cancel, &on_text, &mut t.streamed);
            t.reasoning_time = thought.get() + thinking.get().map_or(std::time::Duration::ZERO, |s| s.elapsed());
            result
        };
        let completion: Completion = match result {
            Ok(c) => c,
            Err(LlmError::Cancelled) => return finish_cancelled(&mut t, &state, &client),
            // A budget is reached: no request was sent. The user's message (and the tool
            // steps so far) stay in the history, with the note as the answer, so the next
            // message after the owner raises the cap simply goes on.
            Err(e @ LlmError::Budget(_)) => {
                let detail = e.to_string();
                t.code = Some(e.code());
                if t.streamed.text.is_empty() {
                    t.streamed.text = format!("[{detail}]");
                    t.note_answer = true;
                }
                return finish(&mut t, &state, &client, iterations, Some(&detail));
            }
            Err(e @ LlmError::TooLarge(_)) => {
                let LlmError::TooLarge(note) = e else { unreachable!("matched above") };
                t.code = Some(e.code());
                log::warn!(
                    "event=llm.call.too_large chat_id={chat_id} provider={} iteration={iterations} kept_bytes={}",
                    sel.provider,
                    t.streamed.text.len()
                );
                return finish_oversize(&mut t, &state, &client, note);
            }
            Err(e) => {
                log::warn!(
                    "event=llm.call.failed chat_id={chat_id} provider={} model={:?} iteration={iterations} error=\"{e}\"",
                    sel.provider,
                    sel.model
                );
                if cancel.is_cancelled() {
                    return finish_cancelled(&mut t, &state, &client);
                }
                t.code = Some(e.code());
                return t.error(&e.to_string());
            }
        };
        if let Some(r) = &completion.record {
            report_usage(deps, &req.chat_id, t.stream_id, r, budget, &client, &job, &spent_before);
        }
        t.replay.empty_reasoning |= completion.state.reasoning_content.is_some();
        t.final_state = replay::stored(&t.replay.provider, &t.replay.model, completion.state.to_map(), Vec::new());
        t.stop_reason = stop_reason(completion.finish_reason.as_deref());
        if completion.tool_calls.is_empty() || final_call {
            break;
        }
        match run_tools(&mut t, completion, &mut tail, &ctx, &tools) {
            Step::Done => {}
            Step::Cancelled => return finish_cancelled(&mut t, &state, &client),
            // Stored like a budget stop: the steps so far and the note as the answer, so the
            // next message goes on from here.
            Step::TooManyAsks => {
                if t.streamed.text.is_empty() {
                    t.streamed.text = format!("[{TOO_MANY_ASKS_NOTE}]");
                }
                return finish(&mut t, &state, &client, iterations, Some(TOO_MANY_ASKS_NOTE));
            }
        }
    }
    finish(&mut t, &state, &client, iterations, None);
}

/// The `usage` event of one model call, and a `budget_warning` for each budget this call
/// took past [`crate::ledger::WARN_AT`] of its cap.
#[allow(clippy::too_many_arguments)]
fn report_usage(
    deps: &Deps,
    chat: &str,
    stream_id: u64,
    r: &crate::ledger::Record,
    budget: Option<usize>,
    client: &LlmClient,
    job: &crate::ledger::Job,
    before: &[crate::ledger::limits::Spend],
) {
    let window = budget.map(|chars| chars as u64 / crate::llm::context::CHARS_PER_TOKEN);
    deps.sink.emit_transient(
        chat,
        &Event::Usage {
            chat_id: chat,
            stream_id,
            input_tokens: r.input_tokens,
            cached_input_tokens: r.cached_input_tokens,
            output_tokens: r.output_tokens,
            reasoning_tokens: r.reasoning_tokens,
            source: &r.source,
            context_tokens: r.input_tokens + r.output_tokens,
            context_window: window,
        },
    );
    let Some(ledger) = client.ledger() else { return };
    for s in ledger.spend(job) {
        let was = before.iter().find(|b| b.budget == s.budget).map_or(0.0, |b| b.share());
        if s.share() >= crate::ledger::WARN_AT && was < crate::ledger::WARN_AT {
            deps.sink.emit(
                chat,
                &Event::BudgetWarning {
                    chat_id: chat,
                    budget: s.budget,
                    tokens: s.tokens,
                    cap_tokens: s.cap.tokens,
                    cost: s.cost,
                    cap_cost: s.cap.cost,
                },
            );
        }
    }
}

/// The turn's request budget in characters: the configured one, or the provider's reported
/// context length when smaller (`llm::context`, cached per endpoint and model, looked up in
/// the background so it never delays a turn). `None`: unbounded (unit setups).
fn context_budget(deps: &Deps, client: &LlmClient, model: &str) -> Option<usize> {
    let configured = deps.cache.keep_chars();
    let reported = client.context_chars(model);
    match (configured, reported) {
        (0, r) => r,
        (c, Some(r)) => Some(c.min(r)),
        (c, None) => Some(c),
    }
}

/// The request body with the newest context that fits `budget` characters in all. Over it,
/// the older context is left out (the summary first in, whole tool steps only); the chat's
/// consolidation is due then and is scheduled after the turn. `Err` when even the system
/// prompt, tools and this turn alone exceed the budget: no request is sent over it.
fn budgeted_body(
    deps: &Deps,
    state: &Mutex<ChatState>,
    head: &[Box<RawValue>],
    tail: &[Box<RawValue>],
    tools: &[Arc<dyn Tool>],
    budget: Option<usize>,
    replay: &Replay,
) -> Result<Vec<u8>, String> {
    let model = replay.model.as_str();
    let schemas: Vec<Arc<RawValue>> = tools.iter().map(|tool| deps.schemas.json(tool)).collect();
    // Room for the context: what the request costs without any.
    let room = match budget {
        None => usize::MAX,
        Some(budget) => {
            // The client may add the usage request's few bytes after this body is built.
            let bare = ChatRequest::streamed(model, &[head, tail], &schemas).chars() + STREAM_OPTIONS_CHARS;
            if bare > budget {
                return Err(format!(
                    "the request is larger than the context budget ({bare} > {budget} characters) even without the \
chat's earlier messages"
                ));
            }
            budget - bare
        }
    };
    // Written under the chat's lock: the context goes from its cached serialisation straight
    // into the body.
    let mut st = lock(state);
    let (context, _, left_out) = st.context(!(head.is_empty() && tail.is_empty()), room, Some(replay));
    if left_out {
        log::info!("event=turn.context_trimmed budget_chars={}", budget.unwrap_or(0));
    }
    Ok(ChatRequest::streamed(model, &[head, context.summary, context.rest, tail], &schemas).to_vec())
}

/// Appends one message, serialised.
fn push_message(messages: &mut Vec<Box<RawValue>>, m: &Value) {
    messages.push(serde_json::value::to_raw_value(m).expect("a Value always serialises"));
}

/// How a model step's tool calls ended.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Every call has its result: the next model call follows.
    Done,
    /// Cancelled mid-step (the incomplete step is dropped so history never holds a call
    /// without its result).
    Cancelled,
    /// A call wanted one approval dialog more than a turn may raise: it and the calls after it
    /// did not run (each has a result saying so) and the turn ends.
    TooManyAsks,
}

/// Executes one model step's tool calls in order.
fn run_tools(
    t: &mut Turn,
    completion: Completion,
    messages: &mut Vec<Box<RawValue>>,
    ctx: &TurnCtx,
    tools: &[Arc<dyn Tool>],
) -> Step {
    let mut calls: Vec<ToolCall> = completion.tool_calls;
    let mut seen: Vec<String> = Vec::new();
    for c in &mut calls {
        if c.id.is_empty() || seen.contains(&c.id) {
            c.id = format!("call_{}", rand::hex(12));
        }
        seen.push(c.id.clone());
    }
    // The arguments as stored, shown and replayed to the model are cleaned of known secret
    // values (a key the model wrote into a command); the tool itself gets them as written.
    let wire: Vec<Value> = calls
        .iter()
        .map(|c| {
            let arguments = t.deps.secrets.redact(&c.arguments);
            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
        })
        .collect();
    // What `tool_call` events show of each call: its cleaned arguments, when small enough.
    let shown: Vec<Option<Map<String, Value>>> = wire
        .iter()
        .map(|w| {
            let text =
                w["function"]["arguments"].as_str().filter(|a| a.len() <= crate::wire::TOOL_CALL_ARGUMENTS_MAX)?;
            match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(m)) if !m.is_empty() => Some(m),
                _ => None,
            }
        })
        .collect();
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    let label =
        if names.is_empty() { "[TOOL_CALLS]".to_string() } else { format!("[TOOL_CALLS: {}]", names.join(", ")) };
    let state = replay::stored(
        &t.replay.provider,
        &t.replay.model,
        completion.state.to_map(),
        calls.iter().map(|c| c.extra.clone()).collect(),
    );
    // The model gets the same message history will replay, so later requests of this chat
    // extend this one byte for byte (provider prompt caches keep hitting).
    push_message(messages, &assistant_calls(&label, &wire, state.as_ref(), Some(&t.replay)));
    let mut step = Vec::with_capacity(calls.len() + 1);
    let mut rec = Record::new("tool_calls", label.clone());
    rec.tool_calls = Some(Value::Array(wire));
    rec.provider_state = state;
    step.push(rec);

    let mut ended = false;
    for (call, shown) in calls.iter().zip(&shown) {
        if t.cancel.is_cancelled() {
            return Step::Cancelled;
        }
        let chat_id = t.req.chat_id.as_str();
        t.emit(&Event::ToolCall {
            chat_id,
            tool_name: &call.name,
            stream_id: t.stream_id,
            call_id: &call.id,
            arguments: shown.as_ref(),
        });
        let args: Map<String, Value> = match serde_json::from_str::<Value>(&call.arguments) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let started = Instant::now();
        // Visibility can change inside one reply: `tool_search` or `mcp_prepare` activates
        // tools a later call of the same reply names. A name the batch's list lacks is looked
        // up again in the tools visible now, so those calls run in order and succeed.
        let fresh;
        let mut tools = tools;
        if !tools.iter().any(|tool| tool.name() == call.name) {
            fresh = visible_tools(t.deps, ctx);
            tools = &fresh;
        }
        let mut ran = None;
        let out = match tools.iter().find(|tool| tool.name() == call.name) {
            _ if ended => ToolOutput::error(format!(
                "Error: Not run: the turn ended before this call (it wanted more approvals than one turn may ask, {MAX_ASKS_PER_TURN})."
            )),
            // The one approval gate (`agent::approvals`): the server decides how, or whether,
            // the call runs; nothing in the call's arguments or the client's frames can.
            Some(tool) => match t.deps.approvals.check(tool.as_ref(), &args, ctx, &t.deps.secrets) {
                Err(refused) => refused,
                Ok(cleared) => {
                    ran = cleared.ran;
                    let call_ctx = TurnCtx { confinement: cleared.confinement, ..ctx.clone() };
                    std::panic::catch_unwind(AssertUnwindSafe(|| tool.run(&args, &call_ctx))).unwrap_or_else(|_| {
                        ToolOutput::error(format!("Error executing {}: the tool crashed{RETRY_HINT}", call.name))
                    })
                }
            },
            // The contract's text has no "Error" prefix; it still counts as a failure.
            None if call.name.starts_with("mcp_") => ToolOutput {
                for_model: format!("Tool '{}' is not activated, cannot execute.{RETRY_HINT}", call.name),
                preview: None,
                for_history: None,
                failed: true,
                outcome: None,
            },
            None => {
                let available: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
                ToolOutput::error(format!(
                    "Error: Tool '{}' not found. Available: {}{RETRY_HINT}",
                    call.name,
                    available.join(", ")
                ))
            }
        };
        // The one place a result (built-in, MCP or skill; success or error) is cleaned of the
        // known secret values (a key `cat` from llm.json, a token echoed from a config file)
        // before any projection reaches the events, the history or the model.
        let out = out.redacted(&t.deps.secrets);
        log::debug!(
            "event=tool.call.completed chat_id={} tool={:?} failed={} duration_ms={:.2}",
            t.req.chat_id,
            call.name,
            out.failed,
            started.elapsed().as_secs_f64() * 1000.0
        );
        if t.cancel.is_cancelled() {
            return Step::Cancelled;
        }
        ended |= ctx.state().approvals_exhausted;
        let outcome = out.outcome_name();
        t.emit(&Event::ToolResult {
            chat_id,
            tool_name: &call.name,
            result: text::take_chars(out.preview_text(), RESULT_PREVIEW),
            stream_id: t.stream_id,
            call_id: &call.id,
            outcome: (outcome != "ok").then_some(outcome),
            ran,
        });
        let result = json!({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": out.for_model});
        push_message(messages, &result);
        let mut r = Record::new("tool", out.history_text());
        r.tool_call_id = Some(call.id.clone());
        r.outcome = (outcome != "ok").then(|| outcome.to_string());
        r.ran = ran.map(str::to_string);
        r.name = Some(call.name.clone());
        step.push(r);
    }
    t.durable.extend(step);
    if ended {
        Step::TooManyAsks
    } else {
        Step::Done
    }
}

fn user_record(req: &TurnRequest) -> Record {
    let mut r = Record::new("user", req.content.clone());
    if !req.selection.mentioned_skills.is_empty() {
        r.mentioned_skills = Some(Value::Array(req.selection.mentioned_skills.clone()));
    }
    if !req.selection.selected_mcp_connectors.is_empty() {
        r.selected_mcp_connectors = Some(Value::Array(req.selection.selected_mcp_connectors.clone()));
    }
    r
}

/// Appends the turn in one write and updates the cached context and metadata.
fn persist(t: &mut Turn, state: &std::sync::Mutex<ChatState>) -> std::io::Result<()> {
    let mut records = Vec::with_capacity(t.durable.len() + 2);
    records.push(user_record(t.req));
    records.extend(t.receipts.iter().map(|r| Record::new("assistant", r.clone())));
    records.append(&mut t.durable);
    let mut answer = Record::new("assistant", t.streamed.text.clone());
    answer.provider_state = t.final_state.take();
    if t.note_answer {
        answer.note = t.code.as_ref().map(|(code, params)| serde_json::json!({"code": code, "params": params}));
    }
    if !t.streamed.reasoning.is_empty() {
        answer.reasoning_ms = Some(t.reasoning_time.as_millis() as u64);
        // Stored once: the state already holds what was shown when the turn made one call.
        if replay::state_text(answer.provider_state.as_ref()).as_deref() != Some(t.streamed.reasoning.as_str()) {
            answer.reasoning_content = Some(t.streamed.reasoning.clone());
        }
    }
    records.push(answer);
    let chat_id = t.req.chat_id.as_str();
    t.deps.chats.append(chat_id, &mut records)?;
    if let Some(p) = t.pending.take() {
        p.end();
    }
    if let Some(c) = t.checkpoint.take() {
        c.finish(Some(records[0].cursor));
    }
    let mut st = lock(state);
    st.extend(records);
    let mut changed = false;
    let turn_meta = t.turn_state.as_ref().map(|s| sync::lock(s).metadata.clone());
    for key in TURN_METADATA_KEYS {
        let value = turn_meta.as_ref().and_then(|m| m.get(key)).cloned().unwrap_or_else(|| Value::Object(Map::new()));
        if st.metadata.get(key) != Some(&value) {
            st.metadata.insert(key.into(), value);
            changed = true;
        }
    }
    if changed {
        t.deps.chats.write_metadata(chat_id, &st.metadata)?;
    }
    Ok(())
}

/// A provider's finish reason when the reply was cut, as `done`'s `stop_reason`: the
/// OpenAI-compatible `length` (the output cap) and `content_filter`, and the same two spelt
/// Anthropic's way (`max_tokens`, `refusal`) or Gemini's (`MAX_TOKENS`, `SAFETY`) by proxies
/// that pass them through. Anything else ended the reply normally.
fn stop_reason(finish: Option<&str>) -> Option<&'static str> {
    match finish? {
        "length" | "max_tokens" | "MAX_TOKENS" => Some("max_tokens"),
        "content_filter" | "refusal" | "SAFETY" => Some("refusal"),
        _ => None,
    }
}

/// Stores the turn and closes it: `stream_end` then `done`, or with `note` (a cap was hit)
/// `stream_end` then `error {detail: note}`, the stored answer being the text before the cut.
fn finish(t: &mut Turn, state: &Arc<Mutex<ChatState>>, client: &Arc<LlmClient>, iterations: usize, note: Option<&str>) {
    let turn_records = 2 + t.receipts.len() + t.durable.len();
    // Stored before `stream_end`, so `stream_end` and `done` leave together (and a client
    // that reloads at `stream_end` finds the turn in the history).
    let stream_end = Event::StreamEnd { chat_id: &t.req.chat_id, stream_id: t.stream_id };
    if let Err(e) = persist(t, state) {
        log::error!("event=history.append_failed chat_id={} error_kind={:?}", t.req.chat_id, e.kind());
        t.emit(&stream_end);
        return t.error(&format!("could not save the chat history ({:?})", e.kind()));
    }
    let secs = t.started.elapsed().as_secs_f64();
    log::debug!(
        "event=turn.completed chat_id={} provider={} iterations={iterations} duration_ms={:.2}",
        t.req.chat_id,
        t.req.selection.provider,
        secs * 1000.0
    );
    let done = match note {
        None => Event::Done {
            chat_id: &t.req.chat_id,
            duration_sec: (secs * 10_000.0).round() / 10_000.0,
            stop_reason: t.stop_reason.filter(|_| !t.cancel.is_cancelled()),
        },
        Some(note) => match &t.code {
            Some(code) => Event::coded_error(note, Some(&t.req.chat_id), code),
            None => Event::error(note, Some(&t.req.chat_id)),
        },
    };
    t.deps.sink.emit_all(&t.req.chat_id, &[stream_end, done]);
    if !t.deps.extensions.is_empty() {
        let records = {
            let st = lock(state);
            st.records()[st.records().len().saturating_sub(turn_records)..].to_vec()
        };
        let done = FinishedTurn {
            req: t.req,
            records: &records,
            hit_limit: iterations > MAX_ITERATIONS,
            cancelled: t.cancel.is_cancelled(),
            client,
        };
        for ext in &t.deps.extensions {
            ext.finished(&done);
        }
    }
    if let Some(c) = &t.deps.consolidator {
        c.maybe_schedule(Job {
            chat_id: t.req.chat_id.clone(),
            state: Arc::clone(state),
            client: Arc::clone(client),
            model: t.req.selection.model.clone(),
        });
    }
}

/// Cancelled: with streamed text, close the stream and keep what the user saw; without,
/// end with a short `cancelled` error and persist nothing.
fn finish_cancelled(t: &mut Turn, state: &Arc<Mutex<ChatState>>, client: &Arc<LlmClient>) {
    if t.cancel.is_discarded() {
        return t.error(CANCELLED);
    }
    log::debug!("event=turn.cancelled chat_id={} had_text={}", t.req.chat_id, !t.streamed.text.is_empty());
    if t.streamed.text.is_empty() {
        return t.error(CANCELLED);
    }
    finish(t, state, client, 0, None);
}

/// A model call went over a size cap (`LlmError::TooLarge`): like a cancel, the text already
/// streamed is stored as the answer, and the turn ends with `note` as its closing error
/// (docs/ws-protocol.md §6.4); with nothing streamed it is a failed turn.
fn finish_oversize(t: &mut Turn, state: &Arc<Mutex<ChatState>>, client: &Arc<LlmClient>, note: &str) {
    if t.streamed.text.is_empty() || t.cancel.is_discarded() {
        return t.error(note);
    }
    finish(t, state, client, 0, Some(note));
}

/// Built-ins, then extension tools, then turn-only tools; first name wins, order stable.
fn visible_tools(deps: &Deps, ctx: &TurnCtx) -> Vec<Arc<dyn Tool>> {
    let mut out: Vec<Arc<dyn Tool>> = deps.tools.clone();
    let st = ctx.state();
    let extra = deps.extensions.iter().flat_map(|e| e.tools(&st)).chain(st.turn_tools.iter().cloned());
    for tool in extra {
        if !out.iter().any(|t| t.name() == tool.name()) {
            out.push(tool);
        }
    }
    // The contract's order: other names sorted, then `mcp_*` names sorted. Stable across
    // requests, so provider prompt caches keep hitting.
    out.sort_by(|a, b| (a.name().starts_with("mcp_"), a.name()).cmp(&(b.name().starts_with("mcp_"), b.name())));
    out
}
