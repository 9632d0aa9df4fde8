//! `cashcode acp`: the Agent Client Protocol, version 1, on stdin/stdout for editors (Zed,
//! JetBrains, Neovim, Emacs, VS Code; docs/acp.md). A bridge, not a second agent: it talks to
//! the owner's running CashCode over its WebSocket (starting one in the background when none
//! answers), so a chat begun in the editor is a chat in the web client and the other way round,
//! and every approval is still decided once, by the server, whichever door answers.
//!
//! Threads: the main thread reads stdin and answers quick requests; `acp-ws` owns the
//! WebSocket, turns chat events into `session/update`s and ends prompts. Both write whole lines
//! through one [`rpc::Out`]. Logs go to stderr only: stdout carries protocol messages alone.

mod link;
mod map;
mod rpc;

use std::collections::HashMap;
use std::io::{self, BufReader, Read, Stdout, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

use self::link::Endpoint;
use self::rpc::{Incoming, Line, Out, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, NOT_FOUND};
use crate::config::Config;

/// The ACP version spoken.
const PROTOCOL_VERSION: u64 = 1;
/// How long `session/new` and `session/load` wait for the server to attach the chat.
const ATTACH_WAIT: Duration = Duration::from_secs(10);
/// Frames waiting to be sent to the server (prompts, cancels, answers); past it the bridge
/// answers "busy" rather than hold more.
const MAX_QUEUED_FRAMES: usize = 256;
/// Sessions one bridge keeps (an editor opens one per thread; each costs a few hundred bytes).
const MAX_SESSIONS: usize = 1024;
/// Sessions per `session/list` page.
const LIST_PAGE: usize = 100;
/// Tool-call arguments remembered per session (for titles and diffs), cleared each prompt.
const MAX_CALLS: usize = 256;
/// The config option of the model choice.
const MODEL_OPTION: &str = "model";

/// Runs the bridge until the editor closes stdin (or the server goes away). `server_args`
/// are the flags after `acp`, given again to a server the bridge starts.
pub fn run(cfg: &Config, server_args: &[String]) -> Result<(), String> {
    let link = Endpoint::from_config(cfg);
    if !link.listening() {
        eprintln!("cashcode acp: no CashCode answers on port {}; starting one", cfg.ws_port);
        link.start_server(server_args, cfg)?;
    }
    let mut ws = link.open_ws()?;
    // The first frame is `ready` with a chat the bridge does not use.
    match ws.read() {
        Ok(Message::Text(t)) if t.contains("\"ready\"") => {}
        Ok(other) => return Err(format!("unexpected first frame from CashCode: {other:?}")),
        Err(e) => return Err(format!("CashCode closed the connection: {e}")),
    }
    // From here the socket never blocks: the `acp-ws` thread waits in `poll` instead.
    ws.get_ref().set_nonblocking(true).map_err(|e| e.to_string())?;
    let (wake, woken) = UnixStream::pair().map_err(|e| e.to_string())?;
    wake.set_nonblocking(true).map_err(|e| e.to_string())?;
    woken.set_nonblocking(true).map_err(|e| e.to_string())?;
    let workspace = cfg.workspace_dir.canonicalize().unwrap_or_else(|_| cfg.workspace_dir.clone());
    let (frames, to_send) = bounded(MAX_QUEUED_FRAMES);
    let bridge = Arc::new(Bridge {
        out: Out::new(io::stdout()),
        link,
        frames,
        wake,
        workspace,
        state: Mutex::new(State::default()),
    });
    let b = Arc::clone(&bridge);
    let ws_thread = std::thread::Builder::new()
        .name("acp-ws".into())
        .spawn(move || b.pump(ws, &to_send, woken))
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    let mut stdin = BufReader::new(io::stdin().lock());
    loop {
        match rpc::read_line(&mut stdin) {
            Ok(Line::Text(line)) => match rpc::parse(&line) {
                Some(msg) => bridge.dispatch(msg),
                None => continue,
            },
            Ok(Line::TooLong) => {
                let msg = format!("message longer than {} bytes", rpc::MAX_LINE_BYTES);
                bridge.out.error(&Value::Null, rpc::INVALID_REQUEST, &msg);
            }
            Ok(Line::Eof) | Err(_) => break,
        }
        if bridge.out.gone() || ws_thread.is_finished() {
            break;
        }
    }
    // The editor is gone: running turns go on in the server (the web client shows them).
    drop(bridge);
    Ok(())
}

/// The server's answer to `new_chat` or `attach`: the chat, or why it refused.
type Attached = Result<String, String>;

/// A prompt waiting for its turn to end.
struct Prompt {
    id: Value,
    cancelled: bool,
}

#[derive(Default)]
struct Session {
    /// `(provider, model)` the next prompt uses.
    model: Option<(String, String)>,
    /// What the server's providers offer, as `(provider, model)`.
    models: Vec<(String, String)>,
    prompt: Option<Prompt>,
    /// Arguments of this prompt's tool calls, by call id.
    calls: HashMap<String, Value>,
    /// The session's `cwd`, against which relative paths in diffs are made absolute.
    cwd: PathBuf,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, Session>,
    /// Permission requests sent to the editor: our request id -> (session, approval id).
    permissions: HashMap<u64, (String, String)>,
    next_request: u64,
    /// Who waits for the next `attached`: the chat asked for (`None`: a new chat).
    /// An error without a chat (a refused `new_chat`) goes to the waiter for a new chat.
    attach_waiters: Vec<(Option<String>, Sender<Attached>)>,
}

struct Bridge {
    out: Out<Stdout>,
    link: Endpoint,
    frames: Sender<String>,
    /// Written after a frame is queued, so `acp-ws` stops waiting on the socket and sends it.
    wake: UnixStream,
    /// The server's workspace, where sessions work.
    workspace: PathBuf,
    state: Mutex<State>,
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, String> {
    params.get(key).and_then(Value::as_str).ok_or_else(|| format!("params.{key} must be a string"))
}

impl Bridge {
    fn state(&self) -> MutexGuard<'_, State> {
        crate::util::sync::lock(&self.state)
    }

    fn send(&self, frame: Value) -> Result<(), String> {
        self.frames.try_send(frame.to_string()).map_err(|_| "the bridge is busy or CashCode is gone".to_string())?;
        // A full wake-up socket already holds a wake-up.
        let _ = (&self.wake).write(&[1]);
        Ok(())
    }

    fn dispatch(&self, msg: Incoming) {
        match msg {
            Incoming::Request { id, method, params } => {
                let answer = match method.as_str() {
                    "initialize" => Ok(self.initialize(&params)),
                    "session/new" => self.new_session(&params),
                    "session/load" => self.load_session(&params),
                    "session/list" => self.list_sessions(&params),
                    "session/prompt" => match self.prompt(&id, &params) {
                        // Answered by the `acp-ws` thread when the turn ends.
                        Ok(()) => return,
                        Err(e) => Err(e),
                    },
                    "session/set_config_option" => self.set_config_option(&params),
                    other => Err((METHOD_NOT_FOUND, format!("method not found: {other}"))),
                };
                match answer {
                    Ok(result) => self.out.result(&id, result),
                    Err((code, message)) => self.out.error(&id, code, &message),
                }
            }
            Incoming::Notification { method, params } => {
                if method == "session/cancel" {
                    self.cancel(&params);
                }
            }
            Incoming::Response { id, result } => self.permission_answered(&id, result),
            Incoming::Bad { id, code, message } => self.out.error(&id, code, &message),
        }
    }

    fn initialize(&self, _params: &Value) -> Value {
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": false, "sse": false},
                "sessionCapabilities": {"list": {}},
            },
            "authMethods": [],
            "agentInfo": {"name": "cashcode", "title": "CashCode", "version": env!("CARGO_PKG_VERSION")},
        })
    }

    /// The session's `cwd`: an absolute path (the server decides whether a chat may work there).
    fn cwd<'a>(&self, params: &'a Value) -> Result<&'a str, (i64, String)> {
        let cwd = str_param(params, "cwd").map_err(|e| (INVALID_PARAMS, e))?;
        if !Path::new(cwd).is_absolute() {
            return Err((INVALID_PARAMS, format!("cwd must be an absolute path, got {cwd:?}")));
        }
        Ok(cwd)
    }

    /// Where the server's chats work: each chat's project, or the workspace.
    fn chat_cwds(&self) -> Result<Vec<(Value, PathBuf)>, (i64, String)> {
        let all = self.link.get("/sessions").map_err(|(_, e)| (INTERNAL_ERROR, e))?;
        Ok(all["sessions"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|s| {
                let cwd = s["project"].as_str().map_or_else(|| self.workspace.clone(), PathBuf::from);
                (s.clone(), cwd)
            })
            .collect())
    }

    fn models(&self) -> Vec<(String, String)> {
        let Ok(v) = self.link.get("/settings/llm/models") else { return Vec::new() };
        v["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| Some((m["provider"].as_str()?.to_string(), m["id"].as_str()?.to_string())))
            .collect()
    }

    /// Waits for the server to attach the chat (`None`: the new chat `new_chat` made).
    fn attach(&self, chat: Option<&str>, frame: Value) -> Result<String, (i64, String)> {
        let (tx, rx) = bounded(1);
        self.state().attach_waiters.push((chat.map(str::to_string), tx));
        self.send(frame).map_err(|e| (INTERNAL_ERROR, e))?;
        match rx.recv_timeout(ATTACH_WAIT) {
            Ok(Ok(chat)) => Ok(chat),
            Ok(Err(detail)) => Err((INVALID_PARAMS, detail)),
            Err(_) => Err((INTERNAL_ERROR, "CashCode did not open the chat in time".into())),
        }
    }

    fn open_session(&self, chat: &str, cwd: &str) -> Result<Value, (i64, String)> {
        let models = self.models();
        let mut st = self.state();
        if !st.sessions.contains_key(chat) && st.sessions.len() >= MAX_SESSIONS {
            return Err((INTERNAL_ERROR, format!("at most {MAX_SESSIONS} sessions per connection")));
        }
        let s = st.sessions.entry(chat.to_string()).or_default();
        s.cwd = PathBuf::from(cwd);
        if s.model.as_ref().is_none_or(|m| !models.contains(m)) {
            s.model = models.first().cloned();
        }
        s.models = models;
        Ok(config_options(s))
    }

    /// A new chat whose project is the session's `cwd` (refused by the server, with the
    /// setting to change named, when `cwd` is not under an allowed root).
    fn new_session(&self, params: &Value) -> Result<Value, (i64, String)> {
        let cwd = self.cwd(params)?;
        let chat = self.attach(None, json!({"type": "new_chat", "project": cwd}))?;
        let options = self.open_session(&chat, cwd)?;
        Ok(json!({"sessionId": chat, "configOptions": options}))
    }

    fn load_session(&self, params: &Value) -> Result<Value, (i64, String)> {
        let cwd = self.cwd(params)?;
        let chat = str_param(params, "sessionId").map_err(|e| (INVALID_PARAMS, e))?;
        // The chat works where it works: a session elsewhere would show it the wrong files.
        if let Some((_, works_in)) = self.chat_cwds()?.into_iter().find(|(s, _)| s["chat_id"] == chat) {
            if Path::new(cwd).canonicalize().ok().as_ref() != Some(&works_in) {
                return Err((INVALID_PARAMS, format!("this chat works in {}, not {cwd}", works_in.display())));
            }
        }
        let transcript = match self.link.get(&format!("/sessions/{}/messages?tools=1", urlencode(chat))) {
            Ok(v) => v,
            Err((404, _)) => return Err((NOT_FOUND, format!("no CashCode chat {chat}"))),
            Err((_, e)) => return Err((INTERNAL_ERROR, e)),
        };
        self.attach(Some(chat), json!({"type": "attach", "chat_id": chat}))?;
        for mut update in map::history_updates(transcript["messages"].as_array().map_or(&[][..], Vec::as_slice)) {
            map::anchor_paths(&mut update, Path::new(cwd));
            self.out.notify("session/update", json!({"sessionId": chat, "update": update}));
        }
        let options = self.open_session(chat, cwd)?;
        Ok(json!({"configOptions": options}))
    }

    fn list_sessions(&self, params: &Value) -> Result<Value, (i64, String)> {
        let only = match params.get("cwd").and_then(Value::as_str) {
            Some(cwd) => match Path::new(cwd).canonicalize() {
                Ok(c) => Some(c),
                Err(_) => return Ok(json!({"sessions": []})),
            },
            None => None,
        };
        let start: usize = match params.get("cursor").and_then(Value::as_str) {
            Some(c) => c.parse().map_err(|_| (INVALID_PARAMS, "cursor is not one this agent gave".to_string()))?,
            None => 0,
        };
        let rows: Vec<Value> = self
            .chat_cwds()?
            .into_iter()
            .filter(|(_, cwd)| only.as_ref().is_none_or(|o| o == cwd))
            .filter_map(|(s, cwd)| {
                Some(json!({"sessionId": s["chat_id"].as_str()?, "cwd": cwd, "title": s["title"], "updatedAt": s["updated_at"]}))
            })
            .collect();
        let page: Vec<Value> = rows.iter().skip(start).take(LIST_PAGE).cloned().collect();
        let next = (start + LIST_PAGE < rows.len()).then(|| (start + LIST_PAGE).to_string());
        Ok(json!({"sessions": page, "nextCursor": next}))
    }

    fn prompt(&self, id: &Value, params: &Value) -> Result<(), (i64, String)> {
        let chat = str_param(params, "sessionId").map_err(|e| (INVALID_PARAMS, e))?;
        let text = map::prompt_text(params.get("prompt").unwrap_or(&Value::Null)).map_err(|e| (INVALID_PARAMS, e))?;
        let mut st = self.state();
        let s = st.sessions.get_mut(chat).ok_or_else(|| (NOT_FOUND, format!("unknown session {chat}")))?;
        if s.prompt.is_some() {
            return Err((INVALID_PARAMS, "a prompt is already running in this session".into()));
        }
        let Some((provider, model)) = s.model.clone() else {
            return Err((
                INTERNAL_ERROR,
                "CashCode has no model to use: add an LLM provider in its web client (Settings → LLM Settings)".into(),
            ));
        };
        s.prompt = Some(Prompt { id: id.clone(), cancelled: false });
        s.calls.clear();
        drop(st);
        let frame = json!({"type": "message", "chat_id": chat, "content": text,
            "metadata": {"llm": {"provider": provider, "model": model}}});
        self.send(frame).map_err(|e| {
            if let Some(s) = self.state().sessions.get_mut(chat) {
                s.prompt = None;
            }
            (INTERNAL_ERROR, e)
        })
    }

    fn set_config_option(&self, params: &Value) -> Result<Value, (i64, String)> {
        let chat = str_param(params, "sessionId").map_err(|e| (INVALID_PARAMS, e))?;
        if str_param(params, "configId").map_err(|e| (INVALID_PARAMS, e))? != MODEL_OPTION {
            return Err((INVALID_PARAMS, format!("the only option is {MODEL_OPTION:?}")));
        }
        let value = str_param(params, "value").map_err(|e| (INVALID_PARAMS, e))?;
        let mut st = self.state();
        let s = st.sessions.get_mut(chat).ok_or_else(|| (NOT_FOUND, format!("unknown session {chat}")))?;
        let chosen = s.models.iter().find(|m| option_value(m) == value).cloned();
        s.model = Some(chosen.ok_or_else(|| (INVALID_PARAMS, format!("no model {value:?}")))?);
        Ok(json!({"configOptions": config_options(s)}))
    }

    fn cancel(&self, params: &Value) {
        let Some(chat) = params.get("sessionId").and_then(Value::as_str) else { return };
        let running = match self.state().sessions.get_mut(chat).and_then(|s| s.prompt.as_mut()) {
            Some(p) => {
                p.cancelled = true;
                true
            }
            None => false,
        };
        if running {
            // The server stops the turn and denies whatever approval it waits for.
            let _ = self.send(json!({"type": "cancel", "chat_id": chat}));
        }
    }

    fn permission_answered(&self, id: &Value, result: Result<Value, Value>) {
        let Some(n) = id.as_u64() else { return };
        let Some((chat, approval)) = self.state().permissions.remove(&n) else { return };
        let decision = match &result {
            Ok(r) => map::decision(r.get("outcome").unwrap_or(&Value::Null)),
            Err(_) => "deny",
        };
        let _ = self.send(json!({"type": "approval_response", "chat_id": chat, "id": approval, "decision": decision}));
    }

    /// The `acp-ws` thread: sends queued frames, reads events, until the socket or the bridge
    /// ends. The socket is non-blocking; between bursts the thread waits in `poll` on it (and
    /// for room to write, while a frame is half sent) and on the wake-up socket.
    fn pump(&self, mut ws: WebSocket<TcpStream>, to_send: &Receiver<String>, mut woken: UnixStream) {
        let mut unflushed = false;
        loop {
            loop {
                match to_send.try_recv() {
                    Ok(frame) => match ws.send(Message::text(frame)) {
                        Ok(()) => {}
                        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => unflushed = true,
                        Err(_) => return self.server_gone(),
                    },
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    // The main thread is done: the editor closed stdin.
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        let _ = ws.close(None);
                        let _ = ws.flush();
                        return;
                    }
                }
            }
            if unflushed {
                match ws.flush() {
                    Ok(()) => unflushed = false,
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return self.server_gone(),
                }
            }
            // Every event already received (tungstenite may hold several frames read at once).
            loop {
                match ws.read() {
                    Ok(Message::Text(t)) => {
                        if let Ok(ev) = serde_json::from_str::<Value>(t.as_str()) {
                            self.on_event(&ev);
                        }
                    }
                    Ok(_) => {}
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return self.server_gone(),
                }
            }
            let socket = if unflushed {
                nix::poll::PollFlags::POLLIN | nix::poll::PollFlags::POLLOUT
            } else {
                nix::poll::PollFlags::POLLIN
            };
            let mut fds = [
                nix::poll::PollFd::new(ws.get_ref().as_fd(), socket),
                nix::poll::PollFd::new(woken.as_fd(), nix::poll::PollFlags::POLLIN),
            ];
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return self.server_gone(),
            }
            let mut drain = [0u8; 64];
            while matches!(woken.read(&mut drain), Ok(n) if n > 0) {}
        }
    }

    /// The server closed the connection (it stopped or restarted): running prompts end with an
    /// error and so does the bridge, which an editor shows as the agent having stopped.
    fn server_gone(&self) {
        eprintln!("cashcode acp: the connection to CashCode closed");
        let mut st = self.state();
        for s in st.sessions.values_mut() {
            if let Some(p) = s.prompt.take() {
                self.out.error(&p.id, INTERNAL_ERROR, "the connection to CashCode closed");
            }
        }
        std::process::exit(1);
    }

    fn on_event(&self, ev: &Value) {
        let s = |k: &str| ev.get(k).and_then(Value::as_str);
        let Some(kind) = s("event") else { return };
        let chat = s("chat_id").unwrap_or("");
        let mut st = self.state();
        match kind {
            "attached" => {
                let waiter = st.attach_waiters.iter().position(|(want, _)| want.as_deref().is_none_or(|w| w == chat));
                if let Some(i) = waiter {
                    let (_, tx) = st.attach_waiters.remove(i);
                    let _ = tx.send(Ok(chat.to_string()));
                }
                return;
            }
            "error" if chat.is_empty() => {
                if let Some(i) = st.attach_waiters.iter().position(|(want, _)| want.is_none()) {
                    let (_, tx) = st.attach_waiters.remove(i);
                    let _ = tx.send(Err(s("detail").unwrap_or("CashCode refused the chat").to_string()));
                } else {
                    eprintln!("cashcode acp: CashCode said: {}", s("detail").unwrap_or(""));
                }
                return;
            }
            "approval_request" => return self.ask_permission(&mut st, ev),
            "approval_end" => {
                let asked = st.permissions.iter().find(|(_, (c, a))| c == chat && Some(a.as_str()) == s("id"));
                if let Some((&n, _)) = asked {
                    st.permissions.remove(&n);
                    // Answered in the web client (or timed out): withdrawn from the editor.
                    self.out.notify("$/cancel_request", json!({"requestId": n}));
                }
                return;
            }
            _ => {}
        }
        let Some(session) = st.sessions.get_mut(chat) else { return };
        if kind == "tool_call" {
            if let (Some(call), Some(args)) = (s("call_id"), ev.get("arguments").filter(|a| a.is_object())) {
                if session.calls.len() < MAX_CALLS {
                    session.calls.insert(call.to_string(), args.clone());
                }
            }
        }
        let calls = &session.calls;
        if let Some(mut update) = map::event_update(ev, |id| calls.get(id).cloned()) {
            map::anchor_paths(&mut update, &session.cwd);
            self.out.notify("session/update", json!({"sessionId": chat, "update": update}));
        }
        match kind {
            "done" => {
                if let Some(p) = session.prompt.take() {
                    // The server names a cut reply (`max_tokens`, `refusal`: ACP's own words).
                    let cut = s("stop_reason").filter(|r| matches!(*r, "max_tokens" | "refusal"));
                    let reason = if p.cancelled { "cancelled" } else { cut.unwrap_or("end_turn") };
                    self.out.result(&p.id, json!({"stopReason": reason}));
                }
            }
            "error" => {
                if let Some(p) = session.prompt.take() {
                    let detail = s("detail").unwrap_or("the turn failed");
                    if p.cancelled || detail == crate::wire::CANCELLED {
                        self.out.result(&p.id, json!({"stopReason": "cancelled"}));
                    } else {
                        self.out.error(&p.id, INTERNAL_ERROR, detail);
                    }
                }
            }
            _ => {}
        }
    }

    fn ask_permission(&self, st: &mut State, ev: &Value) {
        let (Some(chat), Some(approval), Some(tool)) = (
            ev.get("chat_id").and_then(Value::as_str),
            ev.get("id").and_then(Value::as_str),
            ev.get("tool_name").and_then(Value::as_str),
        ) else {
            return;
        };
        if !st.sessions.contains_key(chat) {
            return;
        }
        st.next_request += 1;
        let n = st.next_request;
        st.permissions.insert(n, (chat.to_string(), approval.to_string()));
        let args = ev.get("arguments").filter(|a| a.is_object());
        let call = ev.get("call_id").and_then(Value::as_str).unwrap_or(approval);
        let mut tool_call = map::tool_call_started(call, tool, args, "pending");
        tool_call.as_object_mut().map(|m| m.remove("sessionUpdate"));
        let params = json!({"sessionId": chat, "toolCall": tool_call, "options": map::permission_options(ev)});
        self.out.request(n, "session/request_permission", params);
    }
}

fn option_value(m: &(String, String)) -> String {
    format!("{}/{}", m.0, m.1)
}

/// The session's config options: the model choice, when the server has models.
fn config_options(s: &Session) -> Value {
    let Some(current) = &s.model else { return json!([]) };
    let options: Vec<Value> =
        s.models.iter().map(|m| json!({"value": option_value(m), "name": format!("{} ({})", m.1, m.0)})).collect();
    json!([{"id": MODEL_OPTION, "name": "Model", "category": "model", "type": "select",
        "currentValue": option_value(current), "options": options}])
}

/// A chat id as one path segment: ids are `[A-Za-z0-9_:-]`, and anything else is escaped (the
/// server then answers 404).
fn urlencode(s: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b':');
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}
