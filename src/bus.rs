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
}
