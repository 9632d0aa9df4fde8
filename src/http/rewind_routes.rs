//! `POST /api/sessions/{id}/rewind` and `…/rewind/undo` (docs/http-api.md §4.1 "Rewind"): parse
//! the body, call the agent's use case (`agent::rewind`), and map its errors to statuses
//! ([`status_of`]). Runs on an `http-slow` thread (`gate::Target::is_slow`).

use serde::Serialize;
use serde_json::Value;

use super::api::Api;
use super::shape::{Body, Issue};
use super::{Req, Resp};
use crate::agent::rewind::{RewindError, RewindRequest, UndoRequest};
use crate::checkpoints::rewind::{Force, Report};

/// Paths one `force` list may name, and the length of each.
const MAX_FORCED: usize = 4096;
const MAX_PATH: usize = 4096;

/// The one place a rewind route's error becomes a status, a detail and its code.
fn status_of(e: RewindError) -> Resp {
    let (status, code, detail) = match &e {
        RewindError::UnknownChat => (404, "session_not_found", "session not found"),
        RewindError::Busy => {
            (409, "chat_busy", "a turn is running or queued in this chat; stop it or wait for it to end")
        }
        RewindError::NotAUserMessage => (
            422,
            "not_a_user_message",
            "before_message must be the index of a user message in GET /api/sessions/{id}/messages",
        ),
        RewindError::ProjectUnusable(detail) => (409, "project_unusable", detail.as_str()),
        RewindError::CheckpointsOff => {
            (409, "checkpoints_off", "rewind checkpoints are off (CASHCODE_CHECKPOINT_MAX_BYTES=0)")
        }
        RewindError::NothingToUndo => (409, "nothing_to_undo", "cannot undo the rewind: nothing to restore"),
        RewindError::NewerTurn => {
            (409, "newer_turn", "cannot undo the rewind: the chat has a newer turn than the rewind")
        }
        RewindError::Storage(detail) => (500, "storage_failed", *detail),
    };
    Resp::coded(status, detail, code)
}

/// `force`: a lax boolean (every conflict), or the list of conflicting paths to overwrite.
fn force(b: &mut Body) -> Option<Force> {
    let Some(Value::Array(list)) = b.fields().get("force").cloned() else {
        return b.lax_bool("force", Some(false)).map(|all| if all { Force::All } else { Force::None });
    };
    if list.len() > MAX_FORCED {
        let msg = format!("List should have at most {MAX_FORCED} items after validation, not {}", list.len());
        b.push(Issue::new("too_long", &["body", "force"], &msg, Value::Array(list)));
        return None;
    }
    let mut paths = std::collections::BTreeSet::new();
    let mut ok = true;
    for (i, v) in list.iter().enumerate() {
        let at = i.to_string();
        match v.as_str() {
            Some(p) if p.len() <= MAX_PATH => {
                paths.insert(p.to_string());
            }
            Some(_) => {
                let msg = format!("String should have at most {MAX_PATH} characters");
                b.push(Issue::new("string_too_long", &["body", "force", &at], &msg, v.clone()));
                ok = false;
            }
            None => {
                b.push(Issue::new("string_type", &["body", "force", &at], "Input should be a valid string", v.clone()));
                ok = false;
            }
        }
    }
    ok.then_some(Force::Paths(paths))
}

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
    let force = force(&mut b);
    let checked = (|| {
        Some(RewindRequest { before_message: before?, files: files?, chat: chat?, dry_run: dry_run?, force: force? })
    })();
    let rq = match b.done(checked) {
        Ok(v) => v,
        Err(r) => return r,
    };
    match api.agent.rewind(id, &rq) {
        Ok(out) => Resp::ok(&RewindView {
            chat_id: id,
            before_message: rq.before_message,
            dry_run: rq.dry_run,
            message: &out.message,
            removed_messages: out.removed_messages,
            files: &out.report,
        }),
        Err(e) => status_of(e),
    }
}

/// `POST /api/sessions/{id}/rewind/undo`: the last rewind's files and messages go back. The
/// body is optional: `{"dry_run", "force"}` as for a rewind.
pub(crate) fn undo(api: &Api, id: &str, req: &Req) -> Resp {
    let rq = if req.body.iter().all(u8::is_ascii_whitespace) {
        UndoRequest::default()
    } else {
        let mut b = match Body::object(req) {
            Ok(b) => b,
            Err(r) => return r,
        };
        let dry_run = b.lax_bool("dry_run", Some(false));
        let force = force(&mut b);
        let checked = (|| Some(UndoRequest { dry_run: dry_run?, force: force? }))();
        match b.done(checked) {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
    match api.agent.undo_rewind(id, &rq) {
        Ok(out) => Resp::ok(&UndoView {
            chat_id: id,
            before_message: out.before_message,
            dry_run: rq.dry_run,
            restored: out.messages,
            files: &out.report,
        }),
        Err(e) => status_of(e),
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

/// The answer of an undo or its dry run.
#[derive(Serialize)]
struct UndoView<'a> {
    chat_id: &'a str,
    before_message: u64,
    dry_run: bool,
    /// The rewound messages came back (or would).
    restored: bool,
    #[serde(flatten)]
    files: &'a Report,
}
