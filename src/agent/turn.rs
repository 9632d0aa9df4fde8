//! One turn (the ReAct loop), run on a worker thread: LLM check, title, prompt, streamed model
//! calls with tool execution between them (at most `MAX_ITERATIONS` tool rounds, then a final
//! call without tools), then one history append. Events go to the sink as they happen.
//! Cancel stops the loop at once; errors roll back everything but the title.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::cancel::CancelToken;
use super::history::{lock, to_messages};
use super::prompt;
use super::tools::{ToolOutput, TurnCtx};
use super::Deps;
use crate::bus::{Event, TurnRequest};
use crate::llm::client::{Completion, LlmError, ToolCall};
use crate::store::chats::Record;
use crate::util::{rand, text, time};

/// Model calls that may request tools; one more call without tools follows if all do.
pub const MAX_ITERATIONS: usize = 5;
/// Code points of a tool's public text sent on `tool_result`.
pub const RESULT_PREVIEW: usize = 200;
/// Code points of the auto title.
pub const TITLE_CHARS: usize = 40;
const MAX_ITERATIONS_NOTE: &str =
    "The maximum number of tool-call iterations was reached. Answer now with the best \
available evidence, without calling tools.";

struct Turn<'a> {
    deps: &'a Deps,
    req: &'a TurnRequest,
    cancel: &'a CancelToken,
    stream_id: u64,
    started: Instant,
    /// Every text delta of the turn, in order: the stored final answer.
    streamed: String,
    /// Completed tool steps (`tool_calls` record + one `tool` record per call).
    durable: Vec<Record>,
}

impl Turn<'_> {
    fn emit(&self, e: Event) -> u64 {
        self.deps.sink.emit(&self.req.chat_id, e)
    }

    fn chat_event(&self, name: &'static str) -> Event {
        Event::new(name).with("chat_id", self.req.chat_id.as_str())
    }

    fn error(&self, detail: &str) {
        self.emit(
            Event::new("error")
                .with("detail", detail)
                .with("chat_id", self.req.chat_id.as_str()),
        );
    }
}

/// Runs one turn to its closing event (`done` or `error`).
pub fn run(deps: &Deps, req: &TurnRequest, cancel: &CancelToken) {
    let mut t = Turn {
        deps,
        req,
        cancel,
        stream_id: rand::js_safe_id(),
        started: Instant::now(),
        streamed: String::new(),
        durable: Vec::new(),
    };
    let sel = &req.selection;
    let client = match deps.llm.acquire(sel.provider, &sel.model) {
        Ok(c) => c,
        Err(e) => return t.error(&e.to_string()),
    };
    if cancel.is_cancelled() {
        return t.error("cancelled");
    }
    let chat_id = req.chat_id.as_str();
    let state = deps.cache.get(chat_id);

    // Title before any model call, so it survives a failed turn (ws-protocol.md §5).
    let title = {
        let mut st = lock(&state);
        let untitled = st
            .metadata
            .get("title")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if untitled && st.records.is_empty() {
            let title = text::take_chars(&text::collapse_ws(&req.content), TITLE_CHARS).to_string();
            st.metadata
                .insert("title".into(), Value::String(title.clone()));
            if let Err(e) = deps.chats.write_metadata(chat_id, &st.metadata) {
                log::error!(
                    "event=metadata.write_failed chat_id={chat_id} error_kind={:?}",
                    e.kind()
                );
            }
            Some(title)
        } else {
            None
        }
    };
    if let Some(dir) = deps.chats.dir(chat_id) {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Some(title) = title {
        t.emit(
            t.chat_event("session_updated")
                .with("title", title)
                .with("updated_at", time::local_iso_offset_now()),
        );
    }

    let mut messages = {
        let st = lock(&state);
        let system = prompt::system_prompt(
            deps.memory.soul().as_deref(),
            deps.memory.memory().as_deref(),
            None,
        );
        let mut m = Vec::with_capacity(st.records.len() + 2);
        m.push(json!({"role": "system", "content": system}));
        m.extend(to_messages(&st.records));
        m.push(json!({"role": "user", "content": req.content}));
        m
    };
    let schemas: Vec<Value> = deps.tools.iter().map(|tool| tool.schema()).collect();
    let ctx = TurnCtx {
        chat_id: chat_id.to_string(),
        workspace: deps.workspace.clone(),
        protected: deps.protected.clone(),
        memory: Arc::clone(&deps.memory),
        cancel: cancel.clone(),
    };

    let mut iterations = 0;
    loop {
        let final_call = iterations == MAX_ITERATIONS;
        if final_call {
            messages.push(json!({"role": "user", "content": MAX_ITERATIONS_NOTE}));
        }
        let mut body = json!({"model": sel.model, "messages": messages, "stream": true});
        if !final_call && !schemas.is_empty() {
            body["tools"] = Value::Array(schemas.clone());
            body["tool_choice"] = Value::String("auto".into());
        }
        iterations += 1;
        let result = {
            let (sink, stream_id) = (&deps.sink, t.stream_id);
            let streamed = &mut t.streamed;
            client.stream_chat(body, cancel, &mut |delta| {
                streamed.push_str(delta);
                sink.emit(
                    chat_id,
                    Event::new("delta")
                        .with("chat_id", chat_id)
                        .with("text", delta)
                        .with("stream_id", stream_id),
                );
            })
        };
        let completion: Completion = match result {
            Ok(c) => c,
            Err(LlmError::Cancelled) => return finish_cancelled(&mut t, &state),
            Err(e) => {
                log::warn!(
                    "event=llm.call.failed chat_id={chat_id} provider={} model={:?} iteration={iterations} error=\"{e}\"",
                    sel.provider,
                    sel.model
                );
                if cancel.is_cancelled() {
                    return finish_cancelled(&mut t, &state);
                }
                return t.error(&e.to_string());
            }
        };
        if completion.tool_calls.is_empty() || final_call {
            break;
        }
        if !run_tools(&mut t, completion, &mut messages, &ctx) {
            return finish_cancelled(&mut t, &state);
        }
    }
    finish(&mut t, &state, iterations);
}

/// Executes one model step's tool calls in order. False when cancelled mid-step (the
/// incomplete step is dropped so history never holds a call without its result).
fn run_tools(
    t: &mut Turn,
    completion: Completion,
    messages: &mut Vec<Value>,
    ctx: &TurnCtx,
) -> bool {
    let mut calls: Vec<ToolCall> = completion.tool_calls;
    let mut seen: Vec<String> = Vec::new();
    for c in &mut calls {
        if c.id.is_empty() || seen.contains(&c.id) {
            c.id = format!("call_{}", rand::hex(12));
        }
        seen.push(c.id.clone());
    }
    let wire: Vec<Value> = calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect();
    messages.push(json!({"role": "assistant", "content": completion.content, "tool_calls": wire}));
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    let mut step = Vec::with_capacity(calls.len() + 1);
    let mut rec = Record::new(
        "tool_calls",
        if names.is_empty() {
            "[TOOL_CALLS]".to_string()
        } else {
            format!("[TOOL_CALLS: {}]", names.join(", "))
        },
    );
    rec.tool_calls = Some(Value::Array(wire));
    step.push(rec);

    for call in &calls {
        if t.cancel.is_cancelled() {
            return false;
        }
        t.emit(
            t.chat_event("tool_call")
                .with("tool_name", call.name.as_str())
                .with("stream_id", t.stream_id)
                .with("call_id", call.id.as_str()),
        );
        let args: Map<String, Value> = match serde_json::from_str::<Value>(&call.arguments) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let started = Instant::now();
        let out = match t.deps.tools.iter().find(|tool| tool.name() == call.name) {
            Some(tool) => std::panic::catch_unwind(AssertUnwindSafe(|| tool.run(&args, ctx)))
                .unwrap_or_else(|_| {
                    ToolOutput::error(format!("Error executing {}: the tool crashed", call.name))
                }),
            None => {
                let available: Vec<&str> = t.deps.tools.iter().map(|tool| tool.name()).collect();
                ToolOutput::error(format!(
                    "Error: Tool '{}' not found. Available: {}",
                    call.name,
                    available.join(", ")
                ))
            }
        };
        log::info!(
            "event=tool.call.completed chat_id={} tool={:?} failed={} duration_ms={:.2}",
            t.req.chat_id,
            call.name,
            out.failed,
            started.elapsed().as_secs_f64() * 1000.0
        );
        if t.cancel.is_cancelled() {
            return false;
        }
        t.emit(
            t.chat_event("tool_result")
                .with("tool_name", call.name.as_str())
                .with(
                    "result",
                    text::take_chars(out.preview_text(), RESULT_PREVIEW),
                )
                .with("stream_id", t.stream_id)
                .with("call_id", call.id.as_str()),
        );
        messages.push(json!({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": out.for_model}));
        let mut r = Record::new("tool", out.history_text());
        r.tool_call_id = Some(call.id.clone());
        r.name = Some(call.name.clone());
        step.push(r);
    }
    t.durable.extend(step);
    true
}

fn user_record(req: &TurnRequest) -> Record {
    let mut r = Record::new("user", req.content.clone());
    if !req.selection.mentioned_skills.is_empty() {
        r.mentioned_skills = Some(Value::Array(req.selection.mentioned_skills.clone()));
    }
    if !req.selection.selected_mcp_connectors.is_empty() {
        r.selected_mcp_connectors =
            Some(Value::Array(req.selection.selected_mcp_connectors.clone()));
    }
    r
}

/// Appends the turn in one write and updates the cached context and metadata.
fn persist(
    t: &mut Turn,
    state: &std::sync::Mutex<super::history::ChatState>,
) -> std::io::Result<()> {
    let mut records = Vec::with_capacity(t.durable.len() + 2);
    records.push(user_record(t.req));
    records.append(&mut t.durable);
    records.push(Record::new("assistant", t.streamed.clone()));
    let chat_id = t.req.chat_id.as_str();
    t.deps.chats.append(chat_id, &mut records)?;
    let mut st = lock(state);
    st.records.extend(records);
    let mut changed = false;
    for key in ["activated_tools", "activated_skills"] {
        if !st.metadata.contains_key(key) {
            st.metadata.insert(key.into(), Value::Object(Map::new()));
            changed = true;
        }
    }
    if changed {
        t.deps.chats.write_metadata(chat_id, &st.metadata)?;
    }
    Ok(())
}

fn finish(t: &mut Turn, state: &std::sync::Mutex<super::history::ChatState>, iterations: usize) {
    t.emit(t.chat_event("stream_end").with("stream_id", t.stream_id));
    if let Err(e) = persist(t, state) {
        log::error!(
            "event=history.append_failed chat_id={} error_kind={:?}",
            t.req.chat_id,
            e.kind()
        );
        return t.error(&format!("could not save the chat history ({:?})", e.kind()));
    }
    let secs = t.started.elapsed().as_secs_f64();
    log::info!(
        "event=turn.completed chat_id={} provider={} iterations={iterations} duration_ms={:.2}",
        t.req.chat_id,
        t.req.selection.provider,
        secs * 1000.0
    );
    t.emit(
        t.chat_event("done")
            .with("duration_sec", (secs * 10_000.0).round() / 10_000.0),
    );
}

/// Cancelled: with streamed text, close the stream and keep what the user saw; without,
/// end with a short `cancelled` error and persist nothing.
fn finish_cancelled(t: &mut Turn, state: &std::sync::Mutex<super::history::ChatState>) {
    log::info!(
        "event=turn.cancelled chat_id={} had_text={}",
        t.req.chat_id,
        !t.streamed.is_empty()
    );
    if t.streamed.is_empty() {
        return t.error("cancelled");
    }
    finish(t, state, 0);
}
