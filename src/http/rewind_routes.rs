//! `POST /api/sessions/{id}/rewind` and `…/rewind/undo` (docs/http-api.md §4.1 "Rewind"): put
//! back what a chat changed in the workspace from one of its user messages on (the checkpoint
//! store, `tool::checkpoints`), and take the messages out of the chat into its archive, or put
//! the last archived ones back. Runs on an `http-slow` thread (`gate::Target::is_slow`);
//! refused with 409 while the chat has a running or queued turn.

use serde::Serialize;

use super::api::Api;
use super::shape::{Body, Issue};
use super::{Req, Resp};
use crate::store::chats::valid_chat_id;
use crate::tool::checkpoints::rewind::Report;
use crate::wire::Event;

/// How long a rewind waits for a turn that is ending (it sent `done` and is storing its
/// records) before answering 409.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

const BUSY: &str = "a turn is running or queued in this chat; stop it or wait for it to end";

/// `POST /api/sessions/{id}/rewind`.
pub(crate) fn rewind(api: &Api, id: &str, req: &Req) -> Resp {
    let mut b = match Body::object(req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let before = match b.fields().get("before_message").cloned() {
        None => {
            b.missing("before_message");
            None
        }
        Some(v) => {
            let n = v.as_u64();
            if n.is_none() {
                let msg = "Input should be a valid integer, greater than or equal to 0";
                b.push(Issue::new("int_type", &["body", "before_message"], msg, v));
            }
            n
        }
    };
    let files = b.lax_bool("files", Some(true));
    let chat = b.lax_bool("chat", Some(false));
    let dry_run = b.lax_bool("dry_run", Some(false));
    let force = b.lax_bool("force", Some(false));
    let (before, files, chat, dry_run, force) = match b
        .done(before.zip(files).zip(chat).zip(dry_run).zip(force).map(|((((k, f), c), d), x)| (k, f, c, d, x)))
    {
        Ok(v) => v,
        Err(r) => return r,
    };
    let deps = &api.agent.deps;
    if !valid_chat_id(id) || !deps.chats.exists(id) {
        return Resp::detail(404, "session not found");
    }
    // No turn runs or waits, and none starts until the answer: a message sent meanwhile
    // waits in the chat's queue and runs on the rewound state, after its `rewound` event.
    let Some(_hold) = api.agent.hold_idle(id, SETTLE) else {
        return Resp::detail(409, BUSY);
    };
    let history = match deps.chats.read_history(id) {
        Ok(h) => h,
        Err(e) => {
            log::error!("event=rewind.read_failed chat_id={id} error_kind={:?}", e.kind());
            return Resp::detail(500, "unable to read the session");
        }
    };
    // K indexes the same list `GET …/messages` answers: the user and assistant messages.
    let target = history.records.iter().filter(|r| r.role == "user" || r.role == "assistant").nth(before as usize);
    let Some(target) = target.filter(|r| r.role == "user") else {
        return Resp::detail(
            422,
            "before_message must be the index of a user message in GET /api/sessions/{id}/messages",
        );
    };
    let (cut, message) = (target.cursor, target.content.clone());
    let report = if files {
        // The store of where the chat works: its project's, or the workspace's.
        let root = match deps.chat_root(&deps.chats.read_metadata(id)) {
            Ok(r) => r,
            Err(detail) => return Resp::detail(409, &detail),
        };
        match deps.checkpoints_for(&root) {
            Some(cp) => Some(cp.rewind(id, cut, force, dry_run)),
            None => return Resp::detail(409, "rewind checkpoints are off (CASHCODE_CHECKPOINT_MAX_BYTES=0)"),
        }
    } else {
        None
    };
    let removed = if chat {
        let count = history.records.iter().filter(|r| r.cursor >= cut).count();
        if dry_run {
            Some(count)
        } else {
            match deps.chats.rewind_history(id, cut, before) {
                Ok(n) => {
                    deps.cache.forget(id);
                    Some(n)
                }
                Err(e) => {
                    log::error!("event=rewind.history_failed chat_id={id} error_kind={:?}", e.kind());
                    return Resp::detail(500, "unable to rewind the chat's messages");
                }
            }
        }
    } else {
        None
    };
    if !dry_run {
        deps.sink.emit(id, &Event::Rewound { chat_id: id, before_message: before });
    }
    let mut report = report.unwrap_or_default();
    // A diff shows workspace content: known secret values never leave in a response.
    for f in &mut report.files {
        if let Some(d) = f.diff.take() {
            f.diff = Some(deps.secrets.redact(&d).into_owned());
        }
    }
    Resp::ok(&RewindView {
        chat_id: id,
        before_message: before,
        dry_run,
        message: &message,
        removed_messages: removed,
        files: &report,
    })
}

/// `POST /api/sessions/{id}/rewind/undo`: the messages of the last chat rewind go back.
pub(crate) fn undo(api: &Api, id: &str) -> Resp {
    let deps = &api.agent.deps;
    if !valid_chat_id(id) || !deps.chats.exists(id) {
        return Resp::detail(404, "session not found");
    }
    // No turn runs or waits, and none starts until the answer: a message sent meanwhile
    // waits in the chat's queue and runs on the rewound state, after its `rewound` event.
    let Some(_hold) = api.agent.hold_idle(id, SETTLE) else {
        return Resp::detail(409, BUSY);
    };
    match deps.chats.undo_rewind(id) {
        Ok(Ok(before)) => {
            deps.cache.forget(id);
            deps.sink.emit(id, &Event::Rewound { chat_id: id, before_message: before });
            Resp::ok(&serde_json::json!({"chat_id": id, "restored": true, "before_message": before}))
        }
        Ok(Err(reason)) => Resp::detail(409, &format!("cannot undo the rewind: {reason}")),
        Err(e) => {
            log::error!("event=rewind.undo_failed chat_id={id} error_kind={:?}", e.kind());
            Resp::detail(500, "unable to restore the chat's messages")
        }
    }
}

/// The answer of a rewind or its dry run.
#[derive(Serialize)]
struct RewindView<'a> {
    chat_id: &'a str,
    before_message: u64,
    dry_run: bool,
    /// The user message rewound to (the client puts it back into the composer).
    message: &'a str,
    /// Messages taken out of the chat (`chat: true`), or that would be.
    #[serde(skip_serializing_if = "Option::is_none")]
    removed_messages: Option<usize>,
    #[serde(flatten)]
    files: &'a Report,
}
