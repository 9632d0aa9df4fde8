//! The rewind use cases (docs/http-api.md "Rewind"): put back what a chat changed in its
//! workspace from one of its user messages on and take the messages out, or undo the last such
//! rewind. Each holds the chat idle while it runs (a message sent meanwhile waits and runs on the
//! rewound state), tells the chat's clients, and never lets a known secret leave in a diff. Runs
//! on the caller's thread (an `http-slow` thread).

use std::time::Duration;

use crate::checkpoints::rewind::{Ask, Force, Report, UndoRefusal};
use crate::store::chats::{valid_chat_id, UndoBlocked};
use crate::wire::Event;

use super::Agent;

/// How long a rewind waits for a turn that is ending (it sent `done` and is storing its
/// records) before it is refused as busy.
const SETTLE: Duration = Duration::from_secs(2);

/// A rewind to just before user message `before_message`.
#[derive(Debug, Clone)]
pub(crate) struct RewindRequest {
    pub(crate) before_message: u64,
    pub(crate) files: bool,
    pub(crate) chat: bool,
    pub(crate) dry_run: bool,
    pub(crate) force: Force,
}

/// What a rewind did (or would do).
#[derive(Debug)]
pub(crate) struct RewindOutcome {
    /// The user message rewound to (the client puts it back in the composer).
    pub(crate) message: String,
    /// Messages taken out of the chat (with `chat`), or that would be.
    pub(crate) removed_messages: Option<usize>,
    pub(crate) report: Report,
}

/// An undo of the chat's last rewind.
#[derive(Debug, Clone, Default)]
pub(crate) struct UndoRequest {
    pub(crate) force: Force,
    pub(crate) dry_run: bool,
}

/// What an undo put back (or would).
#[derive(Debug)]
pub(crate) struct UndoOutcome {
    pub(crate) before_message: u64,
    /// The rewound messages came back (or would).
    pub(crate) messages: bool,
    /// The files' part (empty when the rewind kept no files).
    pub(crate) report: Report,
}

/// Why a rewind or an undo did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RewindError {
    UnknownChat,
    /// A turn of the chat is running or queued.
    Busy,
    /// `before_message` is not the index of a user message.
    NotAUserMessage,
    /// The chat's project cannot be used (the text says why).
    ProjectUnusable(String),
    CheckpointsOff,
    /// Undo: nothing is kept to put back.
    NothingToUndo,
    /// Undo: the chat has a newer turn than the rewind.
    NewerTurn,
    /// Reading or writing the chat's store failed (logged with its kind).
    Storage(&'static str),
}

impl Agent {
    /// Rewinds chat `id` to just before user message `req.before_message`.
    pub(crate) fn rewind(&self, id: &str, req: &RewindRequest) -> Result<RewindOutcome, RewindError> {
        let deps = &self.deps;
        if !valid_chat_id(id) || !deps.chats.exists(id) {
            return Err(RewindError::UnknownChat);
        }
        let _hold = self.hold_idle(id, SETTLE).ok_or(RewindError::Busy)?;
        let history = deps.chats.read_history(id).map_err(|e| {
            log::error!("event=rewind.read_failed chat_id={id} error_kind={:?}", e.kind());
            RewindError::Storage("unable to read the session")
        })?;
        // K indexes the same list `GET …/messages` answers: the user and assistant messages.
        let target = history
            .records
            .iter()
            .filter(|r| r.role == "user" || r.role == "assistant")
            .nth(req.before_message as usize)
            .filter(|r| r.role == "user")
            .ok_or(RewindError::NotAUserMessage)?;
        let (cut, message) = (target.cursor, target.content.clone());
        let report = if req.files {
            let cp = self.store_of(id)?.ok_or(RewindError::CheckpointsOff)?;
            let ask = Ask {
                from: cut,
                before_message: req.before_message,
                chat: req.chat,
                force: req.force.clone(),
                dry_run: req.dry_run,
            };
            cp.rewind(id, &ask)
        } else {
            Report::default()
        };
        let removed_messages = if !req.chat {
            None
        } else if req.dry_run {
            Some(history.records.iter().filter(|r| r.cursor >= cut).count())
        } else {
            let n = deps.chats.rewind_history(id, cut, req.before_message).map_err(|e| {
                log::error!("event=rewind.history_failed chat_id={id} error_kind={:?}", e.kind());
                RewindError::Storage("unable to rewind the chat's messages")
            })?;
            deps.cache.forget(id);
            if !req.files {
                // The last rewind now is this one: an older rewind's files are no longer undone.
                if let Ok(Some(cp)) = self.store_of(id) {
                    cp.forget_undo(id);
                }
            }
            Some(n)
        };
        if !req.dry_run {
            deps.sink.emit(id, &Event::Rewound { chat_id: id, before_message: req.before_message });
        }
        Ok(RewindOutcome { message, removed_messages, report: self.redacted(report) })
    }

    /// Undoes chat `id`'s last rewind: its files (when it rewound files) and its messages (when
    /// it took them out).
    pub(crate) fn undo_rewind(&self, id: &str, req: &UndoRequest) -> Result<UndoOutcome, RewindError> {
        let deps = &self.deps;
        if !valid_chat_id(id) || !deps.chats.exists(id) {
            return Err(RewindError::UnknownChat);
        }
        let _hold = self.hold_idle(id, SETTLE).ok_or(RewindError::Busy)?;
        // A chat whose project cannot be used has no files to put back; its messages may.
        let store = self.store_of(id).ok().flatten();
        let files = match store.as_ref().map(|cp| cp.undo(id, &req.force, true)) {
            None | Some(Err(UndoRefusal::Nothing)) => None,
            Some(Err(UndoRefusal::NewerTurn)) => return Err(RewindError::NewerTurn),
            Some(Ok(preview)) => Some(preview),
        };
        let storage = |e: std::io::Error| {
            log::error!("event=rewind.undo_failed chat_id={id} error_kind={:?}", e.kind());
            RewindError::Storage("unable to restore the chat's messages")
        };
        let blocked = |b: UndoBlocked| match b {
            UndoBlocked::Nothing => RewindError::NothingToUndo,
            UndoBlocked::NewerTurn => RewindError::NewerTurn,
        };
        // The messages come back with the files when that rewind took them, or alone when the
        // last rewind kept no files.
        let messages = files.as_ref().is_none_or(|f| f.chat);
        let before_message = match (&files, messages) {
            (_, true) => deps.chats.can_undo_rewind(id).map_err(storage)?.map_err(blocked)?,
            (Some(f), false) => f.before_message,
            (None, false) => unreachable!("no files means messages"),
        };
        if req.dry_run {
            let report = files.map(|f| f.report).unwrap_or_default();
            return Ok(UndoOutcome { before_message, messages, report: self.redacted(report) });
        }
        let report = match &store {
            Some(cp) if files.is_some() => match cp.undo(id, &req.force, false) {
                Ok(done) => done.report,
                Err(UndoRefusal::Nothing) => Report::default(),
                Err(UndoRefusal::NewerTurn) => return Err(RewindError::NewerTurn),
            },
            _ => Report::default(),
        };
        if messages {
            deps.chats.undo_rewind(id).map_err(storage)?.map_err(blocked)?;
            deps.cache.forget(id);
        }
        deps.sink.emit(id, &Event::Rewound { chat_id: id, before_message });
        Ok(UndoOutcome { before_message, messages, report: self.redacted(report) })
    }

    /// The checkpoint store of where the chat works: its project's, or the workspace's
    /// (`None`: checkpoints are off).
    fn store_of(&self, id: &str) -> Result<Option<std::sync::Arc<crate::checkpoints::Checkpoints>>, RewindError> {
        let root = self.deps.chat_root(&self.deps.chats.read_metadata(id)).map_err(RewindError::ProjectUnusable)?;
        Ok(self.deps.checkpoints_for(&root))
    }

    /// A diff shows workspace content: known secret values never leave in an answer.
    fn redacted(&self, mut report: Report) -> Report {
        let secrets = &self.deps.secrets;
        let diffs =
            report.files.iter_mut().map(|f| &mut f.diff).chain(report.conflicts.iter_mut().map(|c| &mut c.diff));
        for d in diffs {
            if let Some(text) = d.take() {
                *d = Some(secrets.redact(&text).into_owned());
            }
        }
        report
    }
}
