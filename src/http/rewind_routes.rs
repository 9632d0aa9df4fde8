//! `POST /api/sessions/{id}/rewind` and `…/rewind/undo` (docs/http-api.md §4.1 "Rewind"): parse
//! the body, call the agent's use case (`agent::rewind`), and map its errors to statuses
//! ([`status_of`]). Runs on an `http-slow` thread (`gate::Target::is_slow`).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::api::Api;
use super::shape::{body, Issue};
use super::{Req, Resp};
use crate::agent::rewind::{RewindError, RewindRequest, UndoRequest};
use crate::checkpoints::rewind::{Force, Report};
use crate::util::body::{check, refuse, LaxBool, Model};

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
/// Absent: none.
fn force<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Force>, D::Error> {
    let Some(v) = Option::<Value>::deserialize(d)? else {
        return Ok(None);
    };
    let Value::Array(list) = v else {
        let all = check::<LaxBool>(&v).map_err(refuse)?.0;
        return Ok(Some(if all { Force::All } else { Force::None }));
    };
    if list.len() > MAX_FORCED {
        let msg = format!("List should have at most {MAX_FORCED} items after validation, not {}", list.len());
        return Err(refuse(vec![Issue::new("too_long", &[], &msg, Value::Array(list))]));
    }
    let mut paths = std::collections::BTreeSet::new();
    let mut issues = Vec::new();
    for (i, v) in list.into_iter().enumerate() {
        let at = i.to_string();
        match v {
            Value::String(p) if p.len() <= MAX_PATH => {
                paths.insert(p);
            }
            Value::String(_) => {
                let msg = format!("String should have at most {MAX_PATH} characters");
                issues.push(Issue::new("string_too_long", &[&at], &msg, v));
            }
            _ => issues.push(Issue::new("string_type", &[&at], "Input should be a valid string", v)),
        }
    }
    if issues.is_empty() {
        Ok(Some(Force::Paths(paths)))
    } else {
        Err(refuse(issues))
    }
}

/// A message index: a non-negative integer.
fn index<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = Value::deserialize(d)?;
    v.as_u64().ok_or_else(|| {
        let msg = "Input should be a valid integer, greater than or equal to 0";
        refuse(vec![Issue::new("int_type", &[], msg, v.clone())])
    })
}

/// `POST /api/sessions/{id}/rewind`.
#[derive(Deserialize)]
struct RewindBody {
    #[serde(deserialize_with = "index")]
    before_message: u64,
    /// Absent: true.
    files: Option<LaxBool>,
    chat: Option<LaxBool>,
    dry_run: Option<LaxBool>,
    #[serde(deserialize_with = "force")]
    force: Option<Force>,
}

impl Model for RewindBody {}

/// `POST /api/sessions/{id}/rewind/undo`.
#[derive(Deserialize)]
struct UndoBody {
    dry_run: Option<LaxBool>,
    #[serde(deserialize_with = "force")]
    force: Option<Force>,
}

impl Model for UndoBody {}

fn flag(b: Option<LaxBool>, absent: bool) -> bool {
    b.map_or(absent, |b| b.0)
}

/// `POST /api/sessions/{id}/rewind`.
pub(crate) fn rewind(api: &Api, id: &str, req: &Req) -> Resp {
    let rq = match body::<RewindBody>(req) {
        Ok(b) => RewindRequest {
            before_message: b.before_message,
            files: flag(b.files, true),
            chat: flag(b.chat, false),
            dry_run: flag(b.dry_run, false),
            force: b.force.unwrap_or(Force::None),
        },
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
        match body::<UndoBody>(req) {
            Ok(b) => UndoRequest { dry_run: flag(b.dry_run, false), force: b.force.unwrap_or(Force::None) },
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
