//! The owner's answers to what a turn waits for: an approval request (`approval_response`) and
//! an MCP form (`elicitation_response`), each taken only for a request waiting in that very
//! chat under that id. Typed errors; the WebSocket front door words them. Runs on the
//! `ws-client-N` reader that received the frame.

use serde_json::Value;

use super::approvals::Answer;
use super::Agent;

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AnswerError {
    /// Not `approve`, `approve_for_chat` or `deny`.
    InvalidDecision,
    /// No approval request of that chat waits under that id (answered, timed out, never asked).
    UnknownApproval,
    /// No form of that chat waits under that id.
    UnknownElicitation,
    /// The form's content does not fit its schema (why).
    InvalidContent(String),
}

impl AnswerError {
    /// The `error` event's detail.
    pub(crate) fn detail(&self) -> String {
        match self {
            AnswerError::InvalidDecision => "invalid approval decision".into(),
            AnswerError::UnknownApproval => "unknown approval id (answered, timed out or never asked)".into(),
            AnswerError::UnknownElicitation => "unknown elicitation id (answered, timed out or never asked)".into(),
            AnswerError::InvalidContent(why) => format!("invalid elicitation content: {why}"),
        }
    }
}

impl Agent {
    /// Answers approval request `id` of chat `chat_id` with `decision`.
    pub(crate) fn answer_approval(&self, chat_id: &str, id: &str, decision: &str) -> Result<(), AnswerError> {
        let answer = Answer::parse(decision).ok_or(AnswerError::InvalidDecision)?;
        self.deps.approvals.answer(chat_id, id, answer)
    }

    /// Answers form `id` of chat `chat_id`: `accept` with `content`, `decline`, or anything else
    /// as cancel.
    pub(crate) fn answer_elicitation(
        &self,
        chat_id: &str,
        id: &str,
        action: &str,
        content: Option<&Value>,
    ) -> Result<(), AnswerError> {
        self.deps.elicitations.answer(chat_id, id, action, content)
    }

    /// The `approval_request` events still waiting in a chat, brought up to date, for a client
    /// that attaches.
    pub(crate) fn pending_requests(&self, chat_id: &str) -> Vec<String> {
        self.deps.approvals.pending_events(chat_id)
    }

    /// The chats with an approval request waiting for the owner, sorted.
    pub(crate) fn waiting_chats(&self) -> Vec<String> {
        self.deps.approvals.waiting_chats()
    }

    /// Binds a new chat to project `p` (`new_chat {project}`).
    pub(crate) fn bind_project(&self, chat_id: &str, p: &str) -> Result<(), String> {
        self.deps.bind_project(chat_id, p).map(drop)
    }

    /// A first message's `project` (docs/ws-protocol.md §3.1).
    pub(crate) fn bind_first_message(&self, chat_id: &str, p: &str) -> Result<(), String> {
        self.deps.bind_first_message(chat_id, p)
    }
}
