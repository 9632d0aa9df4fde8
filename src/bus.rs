//! The message bus between the front doors and the workers: `TurnRequest` (a validated
//! `message` frame) goes in, typed `Event`s (`ws/wire.rs`) come out through the hub.

use crate::ws::protocol::Selection;
use crate::ws::wire::Event;

/// A validated user message for one chat.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub chat_id: String,
    pub content: String,
    pub selection: Selection,
}

/// Where workers send events (the WebSocket hub in the server; a recorder in tests).
pub trait EventSink: Send + Sync {
    /// Emits a chat-scoped event; returns its `seq`.
    fn emit(&self, chat_id: &str, event: &Event<'_>) -> u64;
}
