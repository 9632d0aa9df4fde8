//! Tool calls waiting for the owner (docs/ws-protocol.md §4.1): [`Approvals::check`] is the
//! turn loop's gate before every tool call. It takes the policy's decision
//! ([`policy::decide`], from the tool, its arguments, whether the kernel confines `exec`, the
//! owner's policy and this chat's grants) and, when that says ask, emits
//! `approval_request` to the chat (arguments redacted), blocks the calling worker until an
//! `approval_response` frame for that very chat and id answers, the timeout passes or the
//! turn is cancelled (both deny), then emits `approval_end`. With nobody attached it denies at
//! once. Requests live only in memory: a restart forgets them, so nothing unanswered ever runs.
//!
//! Threads: `check` runs on the turn's worker; `answer` and `pending_events` on a
//! `ws-client-N` reader. Logs carry tool names, ids and outcomes, never arguments.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Sender};
use serde_json::{Map, Value};

pub(crate) mod policy;

use self::policy::{Decision, ExecArgs, Grant, PolicyStore, Refusal, MAX_ASKS_PER_TURN};
use crate::bus::EventSink;
use crate::sandbox::control_files::ChangeLog;
use crate::secrets::Secrets;
use crate::tool::{Confinement, Tool, ToolOutput, TurnCtx};
use crate::util::sync;
use crate::wire::Event;

/// The turn's closing note when it wanted more dialogs than [`MAX_ASKS_PER_TURN`].
pub(crate) const TOO_MANY_ASKS_NOTE: &str =
    "The turn ended: it asked for approval 3 times, the most one turn may ask. \
Nothing more was run. Send a message to go on.";
/// At most this many requests wait at once (across chats); more are denied.
pub(crate) const MAX_PENDING: usize = 256;
/// Grants kept per chat, and chats with grants; the oldest go first.
const MAX_GRANTS_PER_CHAT: usize = 64;
const MAX_GRANT_CHATS: usize = 1024;
/// Characters of one string argument shown to the owner (the rest is cut, marked).
const MAX_SHOWN_CHARS: usize = 8000;
/// Characters of the model's justification shown.
const MAX_JUSTIFICATION_CHARS: usize = 1000;

/// The owner's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Approve,
    ApproveForChat,
    Deny,
}

impl Answer {
    pub(crate) fn parse(s: &str) -> Option<Answer> {
        match s {
            "approve" => Some(Answer::Approve),
            "approve_for_chat" => Some(Answer::ApproveForChat),
            "deny" => Some(Answer::Deny),
            _ => None,
        }
    }
}

struct Waiting {
    chat_id: String,
    /// The `approval_request` event, sent again (with `remaining_sec` brought up to date) to
    /// a client that attaches.
    event: Value,
    /// When the worker stops waiting and declines.
    deadline: Instant,
    tx: Sender<Answer>,
}

#[derive(Default)]
struct Grants {
    by_chat: HashMap<String, Vec<Grant>>,
    order: VecDeque<String>,
}

pub(crate) struct Approvals {
    sink: Arc<dyn EventSink>,
    timeout: Duration,
    /// Whether the kernel confines `exec` here; without it every `exec` is an escalation.
    sandbox_active: bool,
    pub(crate) policy: Arc<PolicyStore>,
    pending: Mutex<HashMap<String, Waiting>>,
    grants: Mutex<Grants>,
    /// Control files each chat's confined commands changed (the sandbox's log), listed in
    /// the request.
    control: Arc<ChangeLog>,
}

/// How a call the gate let through runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cleared {
    pub(crate) confinement: Confinement,
    /// For a call outside the sandbox, how it got there: `approved_once`,
    /// `approved_for_chat`, `chat_grant` (under an earlier grant, unasked) or `unasked` (the
    /// policy runs it so, or the kernel offers no sandbox). `None` for a confined call.
    pub(crate) ran: Option<&'static str>,
}

impl Approvals {
    /// `timeout`: `CASHCODE_APPROVAL_TIMEOUT`; `sandbox_active`: what the sandbox found at
    /// start-up.
    pub(crate) fn new(
        sink: Arc<dyn EventSink>,
        timeout: Duration,
        sandbox_active: bool,
        policy: Arc<PolicyStore>,
    ) -> Approvals {
        Approvals {
            sink,
            timeout,
            sandbox_active,
            policy,
            pending: Mutex::new(HashMap::new()),
            grants: Mutex::new(Grants::default()),
            control: Arc::default(),
        }
    }

    /// Lists, in each request, the control files `log` says the chat's commands changed.
    pub(crate) fn with_control_log(mut self, log: Arc<ChangeLog>) -> Approvals {
        self.control = log;
        self
    }

    /// Every chat's grants now: `(chat id, what each covers)` in the order they were given
    /// (`GET /api/settings/approvals/grants`).
    pub(crate) fn grants(&self) -> Vec<(String, Vec<Value>)> {
        let g = sync::lock(&self.grants);
        g.order
            .iter()
            .filter_map(|c| {
                g.by_chat.get(c).filter(|l| !l.is_empty()).map(|l| (c.clone(), l.iter().map(Grant::to_json).collect()))
            })
            .collect()
    }

    /// Takes back the grant of `chat_id` that covers `grant` (as [`Approvals::grants`] lists
    /// it); false when there is none. Later calls it covered ask again.
    pub(crate) fn revoke(&self, chat_id: &str, grant: &Value) -> bool {
        let mut g = sync::lock(&self.grants);
        let Some(list) = g.by_chat.get_mut(chat_id) else { return false };
        let before = list.len();
        list.retain(|x| x.to_json() != *grant);
        let gone = list.len() < before;
        if list.is_empty() {
            g.by_chat.remove(chat_id);
            g.order.retain(|c| c != chat_id);
        }
        if gone {
            log::info!("event=approval.grant_revoked chat_id={chat_id}");
        }
        gone
    }

    /// The chats with a request waiting now, sorted (`ready`'s and the sessions list's
    /// `waiting`).
    pub(crate) fn waiting_chats(&self) -> Vec<String> {
        let mut chats: Vec<String> = sync::lock(&self.pending).values().map(|w| w.chat_id.clone()).collect();
        chats.sort();
        chats.dedup();
        chats
    }

    /// Requests waiting now (tests, diagnostics).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        sync::lock(&self.pending).len()
    }

    /// The `approval_request` events still waiting in `chat_id`, for a client attaching to it.
    pub(crate) fn pending_events(&self, chat_id: &str) -> Vec<String> {
        let now = Instant::now();
        sync::lock(&self.pending)
            .values()
            .filter(|w| w.chat_id == chat_id)
            .map(|w| {
                let mut ev = w.event.clone();
                ev["remaining_sec"] = w.deadline.saturating_duration_since(now).as_secs().into();
                ev.to_string()
            })
            .collect()
    }

    /// An `approval_response` frame: `Err(detail)` unless `chat_id` has a request `id` waiting.
    pub(crate) fn answer(
        &self,
        chat_id: &str,
        id: &str,
        answer: Answer,
    ) -> Result<(), crate::agent::answers::AnswerError> {
        let mut pending = sync::lock(&self.pending);
        match pending.get(id) {
            Some(w) if w.chat_id == chat_id => {}
            _ => return Err(crate::agent::answers::AnswerError::UnknownApproval),
        }
        if let Some(w) = pending.remove(id) {
            // bounded(1), one send per id: never full; a gone waiter already ended it.
            let _ = w.tx.try_send(answer);
        }
        Ok(())
    }

    /// The gate before `tool` runs with `args` in `ctx`'s chat: how to run it, or the result
    /// that tells the model it was not run (its outcome `denied`).
    pub(crate) fn check(
        &self,
        tool: &dyn Tool,
        args: &Map<String, Value>,
        ctx: &TurnCtx,
        secrets: &Secrets,
    ) -> Result<Cleared, ToolOutput> {
        self.clear(tool, args, ctx, secrets)
            .map_err(|out| if out.outcome.is_some() { out } else { out.ended("denied") })
    }

    fn clear(
        &self,
        tool: &dyn Tool,
        args: &Map<String, Value>,
        ctx: &TurnCtx,
        secrets: &Secrets,
    ) -> Result<Cleared, ToolOutput> {
        let name = tool.name();
        let grants = sync::lock(&self.grants).by_chat.get(&ctx.chat_id).cloned().unwrap_or_default();
        let decision = policy::decide(name, tool.mcp_server(), args, self.sandbox_active, &self.policy.get(), &grants);
        match decision {
            Decision::Auto(Confinement::Unconfined) => {
                // Without asking: under a grant of the owner's for this chat (without the
                // chat's grants it would ask), or a policy that runs it so.
                let without_grants =
                    policy::decide(name, tool.mcp_server(), args, self.sandbox_active, &self.policy.get(), &[]);
                let ran = if matches!(without_grants, Decision::Ask { .. }) { "chat_grant" } else { "unasked" };
                Ok(Cleared { confinement: Confinement::Unconfined, ran: Some(ran) })
            }
            Decision::Auto(c) => Ok(Cleared { confinement: c, ran: None }),
            Decision::Deny { escalated } => {
                log::info!("event=approval.refused chat_id={} tool={name:?} reason=policy", ctx.chat_id);
                Err(ToolOutput::error(Refusal::Policy.for_model(name, escalated)))
            }
            Decision::Ask { confinement, escalated, grant } => {
                {
                    let mut st = ctx.state();
                    if st.approvals_asked >= MAX_ASKS_PER_TURN {
                        st.approvals_exhausted = true;
                        log::info!(
                            "event=approval.refused chat_id={} tool={name:?} reason={}",
                            ctx.chat_id,
                            Refusal::TooMany.as_str()
                        );
                        return Err(ToolOutput::error(Refusal::TooMany.for_model(name, escalated)));
                    }
                    st.approvals_asked += 1;
                }
                match self.ask(name, args, ctx, secrets, escalated, grant.as_ref()) {
                    Ok(answer) => {
                        let for_chat = matches!(answer, Answer::ApproveForChat) && grant.is_some();
                        if let (Answer::ApproveForChat, Some(g)) = (answer, grant) {
                            self.grant(&ctx.chat_id, g);
                        }
                        let ran = (confinement == Confinement::Unconfined).then_some(if for_chat {
                            "approved_for_chat"
                        } else {
                            "approved_once"
                        });
                        Ok(Cleared { confinement, ran })
                    }
                    Err(why) => {
                        let out = ToolOutput::error(why.for_model(name, escalated));
                        // No answer in time reads as timed out; every other refusal as denied.
                        Err(if matches!(why, Refusal::Timeout) { out.ended("timeout") } else { out })
                    }
                }
            }
        }
    }

    fn grant(&self, chat_id: &str, grant: Grant) {
        let mut g = sync::lock(&self.grants);
        if !g.by_chat.contains_key(chat_id) {
            if g.order.len() >= MAX_GRANT_CHATS {
                if let Some(old) = g.order.pop_front() {
                    g.by_chat.remove(&old);
                }
            }
            g.order.push_back(chat_id.to_string());
        }
        let list = g.by_chat.entry(chat_id.to_string()).or_default();
        if !list.contains(&grant) {
            if list.len() >= MAX_GRANTS_PER_CHAT {
                list.remove(0);
            }
            list.push(grant);
        }
    }

    /// Asks the chat's clients; `Ok` with the approval, `Err` with why it counts as denied.
    fn ask(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        ctx: &TurnCtx,
        secrets: &Secrets,
        escalated: bool,
        grant: Option<&Grant>,
    ) -> Result<Answer, Refusal> {
        let chat_id = ctx.chat_id.as_str();
        let refused = |why: Refusal| {
            log::info!("event=approval.refused chat_id={chat_id} tool={tool:?} reason={}", why.as_str());
            Err(why)
        };
        if self.sink.subscribers(chat_id) == 0 {
            return refused(Refusal::Nobody);
        }
        let id = format!("ap-{}", crate::util::rand::hex(8));
        let shown = shown_arguments(args, secrets);
        let justification = if tool == "exec" {
            crate::tool::args::read_args::<ExecArgs>(args).ok().and_then(|a| a.justification)
        } else {
            None
        };
        let justification = justification
            .map(|j| secrets.redact(crate::util::text::take_chars(&j, MAX_JUSTIFICATION_CHARS)).into_owned());
        let grants = policy::grants_text(tool, escalated, grant);
        let grant_json = grant.map_or(Value::Null, Grant::to_json);
        let control_files = self.control.for_chat(chat_id);
        let working_dir = ctx.workspace.display().to_string();
        let started = Instant::now();
        let deadline = started + self.timeout;
        let deadline_ms = u64::try_from(crate::util::time::now_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX));
        let request = Event::ApprovalRequest {
            chat_id,
            id: &id,
            tool_name: tool,
            arguments: &shown,
            justification: justification.as_deref(),
            grants: &grants,
            working_dir: &working_dir,
            timeout_sec: self.timeout.as_secs().max(1),
            deadline_ms,
            remaining_sec: self.timeout.as_secs(),
            // An escalation is exactly an unconfined run (`policy::decide`).
            confined: !escalated,
            grant: &grant_json,
            control_files: &control_files,
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        // Told to every client after the lock is released (the hub takes its own locks).
        let first = {
            let mut pending = sync::lock(&self.pending);
            if pending.len() >= MAX_PENDING {
                return refused(Refusal::Busy);
            }
            // Strings, numbers and JSON values only: cannot fail.
            let event = serde_json::to_value(&request).expect("events hold only strings, numbers and JSON values");
            let first = !pending.values().any(|w| w.chat_id == chat_id);
            pending.insert(id.clone(), Waiting { chat_id: chat_id.to_string(), event, deadline, tx });
            first
        };
        if first {
            self.sink.broadcast(&Event::Waiting { chat_id, waiting: true });
        }
        self.sink.emit(chat_id, &request);
        log::info!("event=approval.asked chat_id={chat_id} id={id} tool={tool:?} escalated={escalated}");
        let result = select! {
            recv(rx) -> a => match a {
                Ok(Answer::Deny) | Err(_) => Err(Refusal::Denied),
                Ok(a) => Ok(a),
            },
            recv(ctx.cancel.wait_chan()) -> _ => Err(Refusal::Cancelled),
            recv(crossbeam_channel::at(deadline)) -> _ => Err(Refusal::Timeout),
        };
        // Unless `answer` took it already (an answer racing a cancel or the timeout is lost:
        // the end event says what was done).
        let last = {
            let mut pending = sync::lock(&self.pending);
            pending.remove(&id);
            !pending.values().any(|w| w.chat_id == chat_id)
        };
        if last {
            self.sink.broadcast(&Event::Waiting { chat_id, waiting: false });
        }
        let decision = match (&result, grant) {
            (Ok(Answer::ApproveForChat), Some(_)) => "approve_for_chat",
            (Ok(_), _) => "approve",
            (Err(_), _) => "deny",
        };
        log::info!(
            "event=approval.ended chat_id={chat_id} id={id} tool={tool:?} decision={decision} reason={} duration_ms={}",
            result.err().map_or("answered", Refusal::as_str),
            started.elapsed().as_millis()
        );
        self.sink.emit(chat_id, &Event::ApprovalEnd { chat_id, id: &id, decision });
        result
    }
}

/// The arguments as the owner sees them: known secret values redacted, long strings cut.
fn shown_arguments(args: &Map<String, Value>, secrets: &Secrets) -> Value {
    fn walk(v: &Value, secrets: &Secrets, depth: usize) -> Value {
        match v {
            Value::String(s) => {
                let cut = crate::util::text::take_chars(s, MAX_SHOWN_CHARS);
                let mut t = secrets.redact(cut).into_owned();
                if cut.len() < s.len() {
                    t.push_str(" [cut]");
                }
                Value::String(t)
            }
            Value::Array(a) if depth < 8 => {
                Value::Array(a.iter().take(64).map(|x| walk(x, secrets, depth + 1)).collect())
            }
            Value::Object(m) if depth < 8 => Value::Object(
                m.iter().take(64).map(|(k, x)| (secrets.redact(k).into_owned(), walk(x, secrets, depth + 1))).collect(),
            ),
            Value::Array(_) | Value::Object(_) => Value::String("[nested too deep]".into()),
            other => other.clone(),
        }
    }
    walk(&Value::Object(args.clone()), secrets, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::approvals::policy::Policy;
    use crate::workspace::tests::Sandbox;
    use serde_json::json;

    use crate::bus::RecordingSink as Sink;

    struct Setup {
        sink: Arc<Sink>,
        ap: Arc<Approvals>,
        sb: Arc<Sandbox>,
        secrets: Secrets,
        _dir: std::path::PathBuf,
    }

    fn setup(subs: usize, timeout: Duration, sandbox_active: bool) -> Setup {
        let sink = Arc::new(Sink::new(subs));
        let dir = std::env::temp_dir().join(format!("cc-approvals-rt-{}", crate::util::rand::hex(4)));
        let policy = Arc::new(PolicyStore::load(&dir));
        let ap = Arc::new(Approvals::new(sink.clone(), timeout, sandbox_active, policy));
        let secrets = Secrets::new();
        secrets.set("test", vec!["sk-very-secret-value-123".into()]);
        Setup { sink, ap, sb: Arc::new(Sandbox::new()), secrets, _dir: dir }
    }

    fn exec() -> Arc<dyn Tool> {
        Arc::new(crate::agent::tools::exec::Exec::default())
    }

    fn args(command: &str, escalate: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("command".into(), json!(command));
        if escalate {
            m.insert("sandbox_permissions".into(), json!("require_escalated"));
            m.insert("justification".into(), json!("needs the network"));
        }
        m
    }

    /// Runs `check` on a thread and returns the request id once it is waiting.
    fn ask(s: &Setup, a: Map<String, Value>) -> (String, std::thread::JoinHandle<Result<Confinement, ToolOutput>>) {
        let before = s.sink.events.lock().unwrap().len();
        let (ap, sb, secrets) = (s.ap.clone(), s.sb.clone(), s.secrets.clone());
        let h = std::thread::spawn(move || ap.check(exec().as_ref(), &a, &sb.ctx, &secrets).map(|c| c.confinement));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) =
                s.sink.events.lock().unwrap().iter().skip(before).find(|e| e["event"] == "approval_request")
            {
                return (e["id"].as_str().unwrap().to_string(), h);
            }
            assert!(Instant::now() < deadline, "no approval_request");
            std::thread::yield_now();
        }
    }

    #[test]
    fn approve_deny_and_wrong_chat_or_id() {
        let s = setup(1, Duration::from_secs(30), true);
        let chat = s.sb.ctx.chat_id.clone();
        let (id, h) = ask(&s, args("curl https://x/?k=sk-very-secret-value-123", true));
        let req = s.sink.events.lock().unwrap()[0].clone();
        assert_eq!(req["tool_name"], "exec");
        assert!(!req.to_string().contains("sk-very-secret-value-123"), "{req}");
        assert_eq!(req["justification"], "needs the network");
        assert_eq!(req["timeout_sec"], 30);
        assert!(req["grants"].as_str().unwrap().contains("outside the sandbox"));
        assert_eq!(s.ap.pending_events(&chat).len(), 1);
        assert!(s.ap.pending_events("other").is_empty());
        // Another chat, another id: refused, still waiting.
        assert!(s.ap.answer("other-chat", &id, Answer::Approve).is_err());
        assert!(s.ap.answer(&chat, "ap-0000000000000000", Answer::Approve).is_err());
        assert_eq!(s.ap.waiting(), 1);
        s.ap.answer(&chat, &id, Answer::Approve).unwrap();
        assert_eq!(h.join().unwrap(), Ok(Confinement::Unconfined));
        assert!(s.ap.answer(&chat, &id, Answer::Approve).is_err(), "answered twice");
        assert_eq!(
            s.sink.events.lock().unwrap()[1],
            json!({"event": "approval_end", "chat_id": chat, "id": id, "decision": "approve"})
        );

        let (id, h) = ask(&s, args("git push", true));
        s.ap.answer(&chat, &id, Answer::Deny).unwrap();
        let out = h.join().unwrap().unwrap_err();
        assert!(out.failed);
        assert!(out.for_model.contains("the owner declined"), "{}", out.for_model);
        assert_eq!(s.ap.waiting(), 0);
    }

    #[test]
    fn approve_for_chat_covers_exactly_the_same_argv() {
        let s = setup(1, Duration::from_secs(30), true);
        let chat = s.sb.ctx.chat_id.clone();
        let (id, h) = ask(&s, args("git push origin", true));
        s.ap.answer(&chat, &id, Answer::ApproveForChat).unwrap();
        assert_eq!(h.join().unwrap(), Ok(Confinement::Unconfined));
        assert_eq!(
            s.sink.events.lock().unwrap()[0]["grant"],
            json!({"scope": "exact", "argv": ["git", "push", "origin"]})
        );
        assert_eq!(s.sink.events.lock().unwrap()[1]["decision"], "approve_for_chat");
        let g = Grant::Exact(vec!["git".into(), "push".into(), "origin".into()]);
        assert_eq!(s.ap.grants.lock().unwrap().by_chat[&chat], vec![g]);
        // Covered: runs with no event.
        let n = s.sink.events.lock().unwrap().len();
        assert_eq!(
            s.ap.check(exec().as_ref(), &args("'git' push  \"origin\"", true), &s.sb.ctx, &s.secrets),
            Ok(Cleared { confinement: Confinement::Unconfined, ran: Some("chat_grant") })
        );
        assert_eq!(s.sink.events.lock().unwrap().len(), n);
        // Not covered: asks again.
        let (id, h) = ask(&s, args("git push origin --receive-pack=x", true));
        s.ap.answer(&chat, &id, Answer::Deny).unwrap();
        assert!(h.join().unwrap().is_err());
        s.sb.ctx.state().approvals_asked = 0;
        let (id, h) = ask(&s, args("git push; curl x", true));
        assert_eq!(s.sink.events.lock().unwrap().last().unwrap()["grant"], Value::Null);
        s.ap.answer(&chat, &id, Answer::ApproveForChat).unwrap();
        assert_eq!(h.join().unwrap(), Ok(Confinement::Unconfined));
        assert_eq!(s.sink.events.lock().unwrap().last().unwrap()["decision"], "approve", "not grantable: once");
        let (id, h) = ask(&s, args("git push; curl x", true));
        s.ap.answer(&chat, &id, Answer::Deny).unwrap();
        assert!(h.join().unwrap().is_err());
        // Another chat has no grant.
        s.sb.ctx.state().approvals_asked = 0;
        let mut ctx = s.sb.ctx.clone();
        ctx.chat_id = "another".into();
        let (ap, secrets) = (s.ap.clone(), s.secrets.clone());
        let h = std::thread::spawn(move || ap.check(exec().as_ref(), &args("git push origin", true), &ctx, &secrets));
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.ap.pending_events("another").is_empty() {
            assert!(Instant::now() < deadline);
            std::thread::yield_now();
        }
        let ev: Value = serde_json::from_str(&s.ap.pending_events("another")[0]).unwrap();
        s.ap.answer("another", ev["id"].as_str().unwrap(), Answer::Deny).unwrap();
        assert!(h.join().unwrap().is_err());
    }

    #[test]
    fn a_turn_raises_at_most_a_few_dialogs() {
        let s = setup(1, Duration::from_secs(30), true);
        let chat = s.sb.ctx.chat_id.clone();
        for i in 0..MAX_ASKS_PER_TURN {
            let (id, h) = ask(&s, args(&format!("touch {i}"), true));
            s.ap.answer(&chat, &id, Answer::Deny).unwrap();
            assert!(h.join().unwrap().is_err());
        }
        let n = s.sink.events.lock().unwrap().len();
        let out = s.ap.check(exec().as_ref(), &args("touch more", true), &s.sb.ctx, &s.secrets).unwrap_err();
        assert!(out.for_model.contains("the owner was not asked"), "{}", out.for_model);
        assert!(s.sb.ctx.state().approvals_exhausted);
        assert_eq!(s.sink.events.lock().unwrap().len(), n, "no dialog past the cap");
        // Calls that ask nothing still run.
        assert_eq!(
            s.ap.check(exec().as_ref(), &args("ls", false), &s.sb.ctx, &s.secrets),
            Ok(Cleared { confinement: Confinement::Sandboxed, ran: None })
        );
    }

    #[test]
    fn nobody_timeout_cancel_and_no_sandbox() {
        let s = setup(0, Duration::from_secs(30), true);
        let out = s.ap.check(exec().as_ref(), &args("ls", true), &s.sb.ctx, &s.secrets).unwrap_err();
        assert!(out.for_model.contains("nobody was there to ask"), "{}", out.for_model);
        assert!(s.sink.events.lock().unwrap().is_empty());
        // Sandboxed exec asks nothing, even with nobody there.
        assert_eq!(
            s.ap.check(exec().as_ref(), &args("ls", false), &s.sb.ctx, &s.secrets),
            Ok(Cleared { confinement: Confinement::Sandboxed, ran: None })
        );
        // Without a sandbox the plain exec is an escalation too.
        let s = setup(0, Duration::from_secs(30), false);
        assert!(s.ap.check(exec().as_ref(), &args("ls", false), &s.sb.ctx, &s.secrets).is_err());

        let s = setup(1, Duration::from_millis(50), true);
        let (_, h) = ask(&s, args("ls", true));
        assert!(h.join().unwrap().unwrap_err().for_model.contains("no answer in time"));
        assert_eq!(s.sink.events.lock().unwrap()[1]["decision"], "deny");

        let s = setup(1, Duration::from_secs(30), true);
        let (_, h) = ask(&s, args("ls", true));
        s.sb.ctx.cancel.cancel();
        assert!(h.join().unwrap().unwrap_err().for_model.contains("cancelled"));
        assert_eq!(s.ap.waiting(), 0);
    }

    #[test]
    fn policy_deny_refuses_without_asking() {
        let s = setup(1, Duration::from_secs(30), true);
        s.ap.policy.set(Policy::from_json(&json!({"tools": {"exec": "deny"}})).unwrap()).unwrap();
        let out = s.ap.check(exec().as_ref(), &args("ls", false), &s.sb.ctx, &s.secrets).unwrap_err();
        assert!(out.for_model.contains("approval policy refuses"), "{}", out.for_model);
        assert!(s.sink.events.lock().unwrap().is_empty());
    }
}
