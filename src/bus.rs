//! The message bus between the front doors and the workers: `TurnRequest` (a validated
//! `message` frame) goes in, `Event`s (the contract's server events) come out through the hub.

use serde_json::Value;

use crate::ws::protocol::Selection;

/// A validated user message for one chat.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub chat_id: String,
    pub content: String,
    pub selection: Selection,
}

/// One server event: its name and fields in wire order. `event` is written first; the hub
/// adds `seq` to chat-scoped events.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: &'static str,
    pub fields: Vec<(&'static str, Value)>,
}

impl Event {
    pub fn new(name: &'static str) -> Self {
        Event { name, fields: Vec::new() }
    }

    pub fn with(mut self, key: &'static str, v: impl Into<Value>) -> Self {
        self.fields.push((key, v.into()));
        self
    }

    /// `{"event":name, fields..., "seq":n}` as text.
    pub fn to_json(&self, seq: Option<u64>) -> String {
        let mut s = String::with_capacity(64 + self.fields.len() * 32);
        s.push_str("{\"event\":\"");
        s.push_str(self.name);
        s.push('"');
        for (k, v) in &self.fields {
            s.push_str(",\"");
            s.push_str(k);
            s.push_str("\":");
            s.push_str(&serde_json::to_string(v).unwrap_or_else(|_| "null".into()));
        }
        if let Some(n) = seq {
            s.push_str(",\"seq\":");
            s.push_str(&n.to_string());
        }
        s.push('}');
        s
    }
}

/// Where workers send events (the WebSocket hub in the server; a recorder in tests).
pub trait EventSink: Send + Sync {
    /// Emits a chat-scoped event; returns its `seq`.
    fn emit(&self, chat_id: &str, event: Event) -> u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_json_puts_event_first() {
        let e = Event::new("delta").with("chat_id", "c").with("text", "hé \"x\"").with("stream_id", 7);
        assert_eq!(e.to_json(Some(3)), r#"{"event":"delta","chat_id":"c","text":"hé \"x\"","stream_id":7,"seq":3}"#);
        let v: Value = serde_json::from_str(&e.to_json(None)).unwrap();
        assert_eq!(v["text"], "hé \"x\"");
    }

    /// The exact bytes of every server event kind as the emitters build them (ws-protocol.md
    /// §4 plus `last_seq`, `call_id` and `seq`): `event` first, fields in emit order, `seq` last.
    #[test]
    fn every_event_kind_pinned_bytes() {
        let chat = |name| Event::new(name).with("chat_id", "c-1");
        let cases: Vec<(Event, Option<u64>, &str)> = vec![
            (
                Event::new("ready").with("chat_id", "c-1").with("client_id", "client-0a1b2c3d4e5f"),
                None,
                r#"{"event":"ready","chat_id":"c-1","client_id":"client-0a1b2c3d4e5f"}"#,
            ),
            (
                Event::new("attached").with("chat_id", "c-1").with("last_seq", 0u64),
                None,
                r#"{"event":"attached","chat_id":"c-1","last_seq":0}"#,
            ),
            (Event::new("pong"), None, r#"{"event":"pong"}"#),
            (Event::new("stop_ack").with("chat_id", "c-1"), None, r#"{"event":"stop_ack","chat_id":"c-1"}"#),
            (
                chat("session_updated")
                    .with("title", "Héllo \"wörld\"\n\u{1}")
                    .with("updated_at", "2026-11-30T09:40:42+08:00"),
                Some(1),
                r#"{"event":"session_updated","chat_id":"c-1","title":"Héllo \"wörld\"\n\u0001","updated_at":"2026-11-30T09:40:42+08:00","seq":1}"#,
            ),
            (
                chat("tool_call")
                    .with("tool_name", "list_dir")
                    .with("stream_id", 9_007_199_254_740_991u64)
                    .with("call_id", "call_1"),
                Some(2),
                r#"{"event":"tool_call","chat_id":"c-1","tool_name":"list_dir","stream_id":9007199254740991,"call_id":"call_1","seq":2}"#,
            ),
            (
                chat("tool_result")
                    .with("tool_name", "list_dir")
                    .with("result", "a\tb </script> 字")
                    .with("stream_id", 7u64)
                    .with("call_id", "call_1"),
                Some(3),
                r#"{"event":"tool_result","chat_id":"c-1","tool_name":"list_dir","result":"a\tb </script> 字","stream_id":7,"call_id":"call_1","seq":3}"#,
            ),
            (
                chat("delta").with("text", "😀 \\ /").with("stream_id", 7u64),
                Some(4),
                r#"{"event":"delta","chat_id":"c-1","text":"😀 \\ /","stream_id":7,"seq":4}"#,
            ),
            (
                chat("stream_end").with("stream_id", 7u64),
                Some(5),
                r#"{"event":"stream_end","chat_id":"c-1","stream_id":7,"seq":5}"#,
            ),
            (
                chat("done").with("duration_sec", 0.1026),
                Some(6),
                r#"{"event":"done","chat_id":"c-1","duration_sec":0.1026,"seq":6}"#,
            ),
            (
                chat("done").with("duration_sec", 3.0),
                Some(7),
                r#"{"event":"done","chat_id":"c-1","duration_sec":3.0,"seq":7}"#,
            ),
            (
                chat("done").with("duration_sec", 0.0),
                Some(8),
                r#"{"event":"done","chat_id":"c-1","duration_sec":0.0,"seq":8}"#,
            ),
            (
                Event::new("error").with("detail", "cancelled").with("chat_id", "c-1"),
                Some(9),
                r#"{"event":"error","detail":"cancelled","chat_id":"c-1","seq":9}"#,
            ),
            (
                Event::new("error").with("detail", "unknown type: 'bogus'"),
                None,
                r#"{"event":"error","detail":"unknown type: 'bogus'"}"#,
            ),
            (
                Event::new("error").with("detail", "missing content").with("chat_id", "c-1"),
                None,
                r#"{"event":"error","detail":"missing content","chat_id":"c-1"}"#,
            ),
        ];
        for (event, seq, want) in cases {
            assert_eq!(event.to_json(seq), want);
        }
    }
}
