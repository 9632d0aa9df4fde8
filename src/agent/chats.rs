//! The chat use cases the HTTP API offers besides turns: create one (bound to a project or
//! not), rename it, delete it. Each keeps the agent's chat cache in step with the store.
//! Typed errors; the route words them. Runs on the calling HTTP thread.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::store::chats::valid_chat_id;
use crate::util::sync::lock;

use super::Agent;

/// How long a delete waits for the chat's running turn to stop.
const DISCARD_WAIT: Duration = Duration::from_secs(5);

/// Why a chat use case did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChatError {
    UnknownChat,
    /// The project cannot be used (why).
    Project(String),
    /// The store failed (logged with its kind; the detail for the answer).
    Storage(&'static str),
}

impl Agent {
    /// A new chat's id, bound to `project` when one is named (its resolved root returned).
    pub(crate) fn create_chat(&self, project: Option<&str>) -> Result<(String, Option<PathBuf>), ChatError> {
        let chat_id = crate::util::rand::uuid4();
        if let Some(p) = project {
            let root = self.deps.bind_project(&chat_id, p).map_err(ChatError::Project)?;
            return Ok((chat_id, Some(root)));
        }
        if let Some(dir) = self.deps.chats.dir(&chat_id) {
            crate::util::fsx::create_private_dirs(&dir).map_err(|e| {
                log::error!("event=sessions.create_failed error_kind={:?}", e.kind());
                ChatError::Storage("unable to create the session")
            })?;
        }
        Ok((chat_id, None))
    }

    /// Sets chat `id`'s title (the stored metadata and the cached copy).
    pub(crate) fn rename_chat(&self, id: &str, title: &str) -> Result<(), ChatError> {
        let chats = &self.deps.chats;
        if !valid_chat_id(id) || !chats.exists(id) {
            return Err(ChatError::UnknownChat);
        }
        let mut meta = chats.read_metadata(id);
        meta.insert("title".into(), Value::String(title.to_string()));
        chats.write_metadata(id, &meta).map_err(|e| {
            log::error!("event=sessions.rename_failed chat_id={id} error_kind={:?}", e.kind());
            ChatError::Storage("unable to save the session title")
        })?;
        if let Some(state) = self.deps.cache.peek(id) {
            lock(&state).metadata.insert("title".into(), Value::String(title.to_string()));
        }
        Ok(())
    }

    /// Deletes chat `id`: its queued turns are discarded and a running one stopped first.
    pub(crate) fn delete_chat(&self, id: &str) -> Result<(), ChatError> {
        let chats = &self.deps.chats;
        if !valid_chat_id(id) || !chats.exists(id) {
            return Err(ChatError::UnknownChat);
        }
        self.discard(id, DISCARD_WAIT);
        match chats.delete(id) {
            Ok(true) => {
                self.deps.cache.forget(id);
                Ok(())
            }
            Ok(false) => Err(ChatError::UnknownChat),
            Err(e) => {
                log::error!("event=sessions.delete_failed chat_id={id} error_kind={:?}", e.kind());
                Err(ChatError::Storage("unable to delete the session"))
            }
        }
    }
}
