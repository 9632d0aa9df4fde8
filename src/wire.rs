//! The WebSocket wire (docs/ws-protocol.md §3, §4): every server event and every client frame as a
//! type. Events are serialised once, on the emitting thread (a worker for chat events, a
//! client's reader thread for replies), and the text is what the hub rings and fans out.
//! Frame validation (the contract's check order and error texts) stays in `ws/protocol.rs`.
//! A leaf: it depends on nothing else in the crate, so the bus and the agent build events
//! without depending on the WebSocket front door.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Turn error detail of a cancelled turn (and of queued turns dropped by a cancel).
pub(crate) const CANCELLED: &str = "cancelled";
/// Bytes of a call's arguments (as the model sent them) up to which `tool_call` carries them:
/// an editor's diff of a file write, without one huge write filling every replay ring.
pub(crate) const TOOL_CALL_ARGUMENTS_MAX: usize = 64 * 1024;
/// Code points of a tool's public text sent on `tool_result` (and shown in the transcript).
pub(crate) const RESULT_PREVIEW: usize = 200;

/// One server event. `event` (the tag) is written first, then the fields in declaration order,
/// which is the contract's order; [`Event::to_text`] appends the hub's `seq` last. Fields
/// borrow: an event lives only until it is serialised.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event<'a> {
    /// First frame of a connection. `waiting` (our extension, absent when none): the chats
    /// with an approval request waiting for the owner now, so a client that connects (or
    /// reloads) can open them and answer in time.
    Ready {
        chat_id: &'a str,
        client_id: &'a str,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        waiting: &'a [String],
    },
    /// A chat started or stopped waiting for the owner's answer (our extension; sent to every
    /// connection, without `seq`): a client badges chats it has not opened.
    Waiting {
        chat_id: &'a str,
        waiting: bool,
    },
    /// Reply to `attach`/`new_chat`; `last_seq` is the chat's latest `seq` (0: none yet).
    /// `reload: true` (only then present): the client's `after_seq` is older than what can
    /// still be replayed, so it must reload the transcript over HTTP (a client ahead of
    /// `last_seq` sees the lower number and reloads as before).
    Attached {
        chat_id: &'a str,
        last_seq: u64,
        #[serde(skip_serializing_if = "is_false")]
        reload: bool,
    },
    Pong,
    /// A turn starts running (our extension, without `seq`): the user message it answers, so
    /// every client of the chat (another tab, or this one after a reload mid-turn) shows it
    /// before the turn's events. A plain `attach` during the turn gets it and the turn's events
    /// so far (docs/ws-protocol.md §2).
    TurnStarted {
        chat_id: &'a str,
        stream_id: u64,
        message: &'a str,
    },
    StopAck {
        chat_id: &'a str,
    },
    /// The auto title; `updated_at` is local ISO-8601 with offset.
    SessionUpdated {
        chat_id: &'a str,
        title: &'a str,
        updated_at: &'a str,
    },
    /// `arguments` (our extension, absent past [`TOOL_CALL_ARGUMENTS_MAX`] bytes or when they
    /// are not a JSON object): what the model passed, so an editor can show a file edit as a
    /// diff while it runs.
    ToolCall {
        chat_id: &'a str,
        tool_name: &'a str,
        stream_id: u64,
        call_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        arguments: Option<&'a serde_json::Map<String, Value>>,
    },
    /// `result`: the first [`RESULT_PREVIEW`] code points of the public text.
    /// `outcome` (our extension, absent when `ok`): `error`, `denied`, `timeout` or `failed`
    /// (a command's non-zero exit); `ran` (our extension): how a call outside the sandbox got
    /// there (`approved_once`, `approved_for_chat`, `chat_grant`, `unasked`).
    ToolResult {
        chat_id: &'a str,
        tool_name: &'a str,
        result: &'a str,
        stream_id: u64,
        call_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        ran: Option<&'a str>,
    },
    Delta {
        chat_id: &'a str,
        text: &'a str,
        stream_id: u64,
    },
    /// The model's reasoning (thinking) text, streamed before and between the answer's
    /// deltas and never part of the answer (our extension; clients that do not know it
    /// ignore it).
    Reasoning {
        chat_id: &'a str,
        text: &'a str,
        stream_id: u64,
    },
    StreamEnd {
        chat_id: &'a str,
        stream_id: u64,
    },
    /// `duration_sec`: seconds since the turn started, rounded to 0.1 ms. `stop_reason`
    /// (only when the model's last reply was cut): `max_tokens` (the provider's output cap,
    /// finish reason `length`) or `refusal` (its content filter).
    Done {
        chat_id: &'a str,
        duration_sec: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        stop_reason: Option<&'static str>,
    },
    /// An MCP server asks the chat's user to fill a form during a tool call (our extension;
    /// `requested_schema` is the checked form of `mcp::elicit`). Answered by an
    /// `elicitation_response` frame within `timeout_sec`, else declined.
    Elicitation {
        chat_id: &'a str,
        id: &'a str,
        server: &'a str,
        message: &'a str,
        requested_schema: &'a Value,
        timeout_sec: u64,
    },
    /// The elicitation is over (answered here or in another tab, timed out, cancelled):
    /// `action` is what the server was told (`accept`, `decline` or `cancel`).
    ElicitationEnd {
        chat_id: &'a str,
        id: &'a str,
        action: &'a str,
    },
    /// A tool call waits for the owner's approval (`agent::approvals`; our extension):
    /// `arguments` redacted, `justification` the model's (or null), `grants` in words what
    /// each approval allows, `working_dir` where it would run. Answered by an
    /// `approval_response` frame within `timeout_sec`, else declined. `deadline_ms` (unix ms)
    /// is when the server declines, `remaining_sec` the whole seconds left when this copy was
    /// sent (less than `timeout_sec` when re-sent to a client attaching later); `confined`
    /// whether an approved call runs inside the kernel sandbox.
    ApprovalRequest {
        chat_id: &'a str,
        id: &'a str,
        tool_name: &'a str,
        arguments: &'a Value,
        justification: Option<&'a str>,
        grants: &'a str,
        working_dir: &'a str,
        timeout_sec: u64,
        deadline_ms: u64,
        remaining_sec: u64,
        confined: bool,
        /// What "approve for this chat" covers (`{"scope": "exact", "argv"}` or `{"scope":
        /// "tool", "tool"}`); null: nothing beyond this call.
        grant: &'a Value,
        /// Control files (`.git/config`, hooks, …) of the chat's project that its confined
        /// commands changed and the sandbox put back.
        control_files: &'a [String],
    },
    /// The approval request is over (answered here or in another tab, timed out, cancelled):
    /// `decision` is what the server did (`approve`, `approve_for_chat` or `deny`).
    ApprovalEnd {
        chat_id: &'a str,
        id: &'a str,
        decision: &'a str,
    },
    /// A rewind (docs/http-api.md "Rewind") changed the chat's files or messages, or an undo
    /// put its messages back: attached clients reload the chat.
    Rewound {
        chat_id: &'a str,
        before_message: u64,
    },
    /// After each model call of a turn (our extension; docs/usage.md), sent to the clients
    /// attached then, without a `seq` and never replayed: the call's ledger counts and the chat's context fill (`context_tokens` of `context_window`, null when
    /// the window is unknown).
    Usage {
        chat_id: &'a str,
        stream_id: u64,
        input_tokens: u64,
        cached_input_tokens: u64,
        output_tokens: u64,
        reasoning_tokens: u64,
        /// `reported` or `estimated`.
        source: &'a str,
        context_tokens: u64,
        context_window: Option<u64>,
    },
    /// A budget that applies to this chat passed 80% of its cap (our extension): `budget` is
    /// `chat`, `day` or `background_day`; caps are null when not set.
    BudgetWarning {
        chat_id: &'a str,
        budget: &'a str,
        tokens: u64,
        cap_tokens: Option<u64>,
        cost: f64,
        cap_cost: Option<f64>,
    },
    /// Build with [`Event::error`].
    Error {
        detail: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        chat_id: Option<&'a str>,
        /// A stable code a client translates, with its fields (`detail` is the English text).
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        params: Option<&'a serde_json::Value>,
    },
}

impl<'a> Event<'a> {
    /// The one way a failure reaches the wire: a frame rejection (to its connection; with
    /// `chat_id` when the frame named a valid one) or a turn's closing error (to the chat).
    pub(crate) fn error(detail: &'a str, chat_id: Option<&'a str>) -> Self {
        Event::Error { detail, chat_id, code: None, params: None }
    }

    /// [`Event::error`] with a code and its fields.
    pub(crate) fn coded_error(
        detail: &'a str,
        chat_id: Option<&'a str>,
        code: &'a (&'static str, serde_json::Value),
    ) -> Self {
        Event::Error { detail, chat_id, code: Some(code.0), params: Some(&code.1) }
    }

    /// The JSON text: `{"event":…, fields…}`, and `,"seq":n` before the closing brace when
    /// `seq` is given (chat-scoped events).
    pub(crate) fn to_text(&self, seq: Option<u64>) -> String {
        // Strings, numbers and JSON values only: serialising into a String cannot fail (a
        // non-finite float is written as null).
        let text = serde_json::to_string(self).expect("events hold only strings, numbers and JSON values");
        match seq {
            Some(n) => with_seq(text, n),
            None => text,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `{"event":…}` -> `{"event":…,"seq":n}`, in place.
pub(crate) fn with_seq(mut text: String, seq: u64) -> String {
    debug_assert!(text.ends_with('}'));
    text.pop();
    text.push_str(",\"seq\":");
    // Per event: the digits go through a stack buffer, no allocation beyond `text`'s own.
    text.push_str(itoa::Buffer::new().format(seq));
    text.push('}');
    text
}

/// A client frame as sent (docs/ws-protocol.md §3), before validation. Extra keys are ignored; a
/// field of the wrong JSON type reads as absent, so `protocol::parse_frame` can answer with
/// the contract's texts in the contract's order. An unknown `type` is [`ClientFrame::Unknown`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ClientFrame {
    Ping,
    NewChat {
        /// The project directory the new chat works in (our extension; src/projects.rs).
        #[serde(default, deserialize_with = "lenient")]
        project: Option<String>,
    },
    Attach {
        #[serde(default, deserialize_with = "lenient")]
        chat_id: Option<String>,
        /// Replay events with a greater `seq` (our extension for reconnects).
        #[serde(default, deserialize_with = "lenient")]
        after_seq: Option<u64>,
    },
    #[serde(alias = "stop")]
    Cancel {
        #[serde(default, deserialize_with = "lenient")]
        chat_id: Option<String>,
    },
    /// The user's answer to an `elicitation` event (our extension).
    ElicitationResponse {
        #[serde(default, deserialize_with = "lenient")]
        chat_id: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        id: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        action: Option<String>,
        /// Checked against the form by `agent::elicit`.
        #[serde(default)]
        content: Option<Value>,
    },
    /// The owner's answer to an `approval_request` event (our extension).
    ApprovalResponse {
        #[serde(default, deserialize_with = "lenient")]
        chat_id: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        id: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        decision: Option<String>,
    },
    Message {
        #[serde(default, deserialize_with = "lenient")]
        chat_id: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        content: Option<String>,
        /// Sanitised by `protocol::sanitize_metadata` (shared with receipt filtering).
        #[serde(default)]
        metadata: Option<Value>,
        /// A new chat's project, bound by its first message (our extension).
        #[serde(default, deserialize_with = "lenient")]
        project: Option<String>,
    },
    #[serde(other)]
    Unknown,
}

/// A value of the wrong type reads as absent instead of failing the whole frame.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(T::deserialize(Value::deserialize(d)?).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact bytes of every server event kind, pinned from the hand-built events this
    /// module replaced (docs/ws-protocol.md §4 plus `last_seq`, `call_id` and `seq`): `event`
    /// first, fields in the contract's order, `seq` last.
    #[test]
    fn every_event_kind_pinned_bytes() {
        let c = "c-1";
        let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "string"}}});
        let args = serde_json::json!({"command": "git push"});
        let cases: Vec<(Event, Option<u64>, &str)> = vec![
            (
                Event::Ready { chat_id: c, client_id: "client-0a1b2c3d4e5f", waiting: &[] },
                None,
                r#"{"event":"ready","chat_id":"c-1","client_id":"client-0a1b2c3d4e5f"}"#,
            ),
            (
                Event::Attached { chat_id: c, last_seq: 0, reload: false },
                None,
                r#"{"event":"attached","chat_id":"c-1","last_seq":0}"#,
            ),
            (
                Event::Attached { chat_id: c, last_seq: 9, reload: true },
                None,
                r#"{"event":"attached","chat_id":"c-1","last_seq":9,"reload":true}"#,
            ),
            (Event::Pong, None, r#"{"event":"pong"}"#),
            (Event::StopAck { chat_id: c }, None, r#"{"event":"stop_ack","chat_id":"c-1"}"#),
            (
                Event::SessionUpdated {
                    chat_id: c,
                    title: "Héllo \"wörld\"\n\u{1}",
                    updated_at: "2026-11-30T09:40:42+08:00",
                },
                Some(1),
                r#"{"event":"session_updated","chat_id":"c-1","title":"Héllo \"wörld\"\n\u0001","updated_at":"2026-11-30T09:40:42+08:00","seq":1}"#,
            ),
            (
                Event::ToolCall {
                    chat_id: c,
                    tool_name: "list_dir",
                    stream_id: 9_007_199_254_740_991,
                    call_id: "call_1",
                    arguments: None,
                },
                Some(2),
                r#"{"event":"tool_call","chat_id":"c-1","tool_name":"list_dir","stream_id":9007199254740991,"call_id":"call_1","seq":2}"#,
            ),
            (
                Event::ToolResult {
                    chat_id: c,
                    tool_name: "list_dir",
                    result: "a\tb </script> 字",
                    stream_id: 7,
                    call_id: "call_1",
                    outcome: None,
                    ran: None,
                },
                Some(3),
                r#"{"event":"tool_result","chat_id":"c-1","tool_name":"list_dir","result":"a\tb </script> 字","stream_id":7,"call_id":"call_1","seq":3}"#,
            ),
            (
                Event::Delta { chat_id: c, text: "😀 \\ /", stream_id: 7 },
                Some(4),
                r#"{"event":"delta","chat_id":"c-1","text":"😀 \\ /","stream_id":7,"seq":4}"#,
            ),
            (
                Event::StreamEnd { chat_id: c, stream_id: 7 },
                Some(5),
                r#"{"event":"stream_end","chat_id":"c-1","stream_id":7,"seq":5}"#,
            ),
            (
                Event::Done { chat_id: c, duration_sec: 0.1026, stop_reason: None },
                Some(6),
                r#"{"event":"done","chat_id":"c-1","duration_sec":0.1026,"seq":6}"#,
            ),
            (
                Event::Done { chat_id: c, duration_sec: 3.0, stop_reason: Some("max_tokens") },
                Some(7),
                r#"{"event":"done","chat_id":"c-1","duration_sec":3.0,"stop_reason":"max_tokens","seq":7}"#,
            ),
            (
                Event::Done { chat_id: c, duration_sec: 0.0, stop_reason: None },
                Some(8),
                r#"{"event":"done","chat_id":"c-1","duration_sec":0.0,"seq":8}"#,
            ),
            (
                Event::Elicitation {
                    chat_id: c,
                    id: "el-1",
                    server: "forms",
                    message: "Your name?",
                    requested_schema: &schema,
                    timeout_sec: 120,
                },
                Some(10),
                r#"{"event":"elicitation","chat_id":"c-1","id":"el-1","server":"forms","message":"Your name?","requested_schema":{"properties":{"n":{"type":"string"}},"type":"object"},"timeout_sec":120,"seq":10}"#,
            ),
            (
                Event::ElicitationEnd { chat_id: c, id: "el-1", action: "decline" },
                Some(11),
                r#"{"event":"elicitation_end","chat_id":"c-1","id":"el-1","action":"decline","seq":11}"#,
            ),
            (
                Event::ApprovalRequest {
                    chat_id: c,
                    id: "ap-1",
                    tool_name: "exec",
                    arguments: &args,
                    justification: None,
                    grants: "Approve once: …",
                    working_dir: "/w",
                    timeout_sec: 120,
                    deadline_ms: 1_700_000_120_000,
                    remaining_sec: 120,
                    confined: false,
                    grant: &Value::Null,
                    control_files: &[],
                },
                Some(12),
                r#"{"event":"approval_request","chat_id":"c-1","id":"ap-1","tool_name":"exec","arguments":{"command":"git push"},"justification":null,"grants":"Approve once: …","working_dir":"/w","timeout_sec":120,"deadline_ms":1700000120000,"remaining_sec":120,"confined":false,"grant":null,"control_files":[],"seq":12}"#,
            ),
            (
                Event::ApprovalEnd { chat_id: c, id: "ap-1", decision: "deny" },
                Some(13),
                r#"{"event":"approval_end","chat_id":"c-1","id":"ap-1","decision":"deny","seq":13}"#,
            ),
            (
                Event::error(CANCELLED, Some(c)),
                Some(9),
                r#"{"event":"error","detail":"cancelled","chat_id":"c-1","seq":9}"#,
            ),
            (
                Event::error("unknown type: 'bogus'", None),
                None,
                r#"{"event":"error","detail":"unknown type: 'bogus'"}"#,
            ),
            (
                Event::error("missing content", Some(c)),
                None,
                r#"{"event":"error","detail":"missing content","chat_id":"c-1"}"#,
            ),
        ];
        for (event, seq, want) in cases {
            assert_eq!(event.to_text(seq), want);
        }
        assert_eq!(Event::Pong.to_text(Some(u64::MAX)), r#"{"event":"pong","seq":18446744073709551615}"#);
        assert_eq!(Event::Pong.to_text(Some(0)), r#"{"event":"pong","seq":0}"#);
    }

    fn frame(text: &str) -> ClientFrame {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn client_frames_read_leniently() {
        assert_eq!(frame(r#"{"type":"ping","x":1}"#), ClientFrame::Ping);
        assert_eq!(frame(r#"{"type":"new_chat"}"#), ClientFrame::NewChat { project: None });
        assert_eq!(frame(r#"{"type":"new_chat","project":"/p"}"#), ClientFrame::NewChat { project: Some("/p".into()) });
        assert_eq!(frame(r#"{"type":"new_chat","project":5}"#), ClientFrame::NewChat { project: None });
        assert_eq!(frame(r#"{"type":"bogus","chat_id":1}"#), ClientFrame::Unknown);
        assert_eq!(frame(r#"{"type":"stop","chat_id":"a"}"#), ClientFrame::Cancel { chat_id: Some("a".into()) });
        assert_eq!(
            frame(r#"{"type":"attach","chat_id":5,"after_seq":-1}"#),
            ClientFrame::Attach { chat_id: None, after_seq: None }
        );
        assert_eq!(
            frame(r#"{"type":"attach","chat_id":"a","after_seq":18446744073709551615}"#),
            ClientFrame::Attach { chat_id: Some("a".into()), after_seq: Some(u64::MAX) }
        );
        assert_eq!(
            frame(r#"{"type":"message","chat_id":"a","content":[1],"metadata":null}"#),
            ClientFrame::Message { chat_id: Some("a".into()), content: None, metadata: None, project: None }
        );
        assert!(serde_json::from_str::<ClientFrame>(r#"{"type":1}"#).is_err());
        assert_eq!(
            frame(r#"{"type":"elicitation_response","chat_id":"a","id":7,"action":"accept","content":{"x":1}}"#),
            ClientFrame::ElicitationResponse {
                chat_id: Some("a".into()),
                id: None,
                action: Some("accept".into()),
                content: Some(serde_json::json!({"x": 1}))
            }
        );
    }
}
