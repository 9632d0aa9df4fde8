//! Projects over HTTP (docs/http-api.md §11): `GET`/`PUT /api/settings/projects`, the roots
//! under which chats may be bound to a project, and `POST /api/sessions`, which creates a chat
//! (bound to a project when the body names one). Which directory is allowed is decided by
//! `crate::projects`; this maps its answers to statuses. Runs on the `http` thread.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api::Api;
use super::shape::{body, Issue};
use super::{Req, Resp};
use crate::agent::chats::ChatError;
use crate::projects::SaveError;
use crate::util::body::{Extras, List, Model};

#[derive(Serialize)]
struct SettingsView {
    /// The Safety page's list (editable).
    roots: Vec<String>,
    /// `CASHCODE_PROJECT_ROOTS` (read-only here).
    env_roots: Vec<String>,
    /// What is allowed now: both lists, or the workspace when neither names a root.
    allowed: Vec<String>,
    workspace: String,
}

fn shown(paths: &[std::path::PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

pub(crate) fn route_settings(api: &Api, m: &str, req: &Req) -> Resp {
    match m {
        "GET" => settings(api),
        "PUT" => save(api, req),
        _ => Resp::detail(405, "Method Not Allowed"),
    }
}

fn settings(api: &Api) -> Resp {
    let p = &api.projects;
    Resp::ok(&SettingsView {
        roots: shown(&p.saved_roots()),
        env_roots: shown(p.env_roots()),
        allowed: shown(&p.roots()),
        workspace: p.workspace().display().to_string(),
    })
}

/// `PUT /api/settings/projects`.
#[derive(Deserialize)]
struct SaveBody {
    roots: List<String>,
}

impl Model for SaveBody {
    const EXTRAS: Extras = Extras::Forbid;
}

fn save(api: &Api, req: &Req) -> Resp {
    let roots = match body::<SaveBody>(req) {
        Ok(b) => b.roots.0,
        Err(r) => return r,
    };
    match api.projects.save(&roots) {
        Ok(_) => {
            log::info!("event=projects.roots_saved count={}", roots.len());
            settings(api)
        }
        Err(SaveError::Invalid(e)) => Resp::shape(vec![Issue::new(
            "value_error",
            &["body", "roots"],
            format!("Value error, {e}"),
            Value::from(roots),
        )]),
        Err(SaveError::Io(e)) => {
            log::error!("event=projects.save_failed error_kind={:?}", e.kind());
            Resp::detail(500, "could not save the project roots")
        }
    }
}

#[derive(Serialize)]
struct Created {
    chat_id: String,
    project: Option<String>,
}

#[derive(Deserialize)]
struct CreateBody {
    project: Option<Option<String>>,
}

impl Model for CreateBody {
    const EXTRAS: Extras = Extras::Forbid;
}

/// `POST /api/sessions` `{"project"?: string | null}` -> 201 `{"chat_id", "project"}`.
pub(crate) fn create_session(api: &Api, req: &Req) -> Resp {
    let project = match body::<CreateBody>(req) {
        Ok(b) => b.project.flatten(),
        Err(r) => return r,
    };
    match api.agent.create_chat(project.as_deref()) {
        Ok((chat_id, root)) => Resp::json(201, &Created { chat_id, project: root.map(|r| r.display().to_string()) }),
        Err(ChatError::Project(msg)) => Resp::shape(vec![Issue::new(
            "value_error",
            &["body", "project"],
            format!("Value error, {msg}"),
            Value::String(project.unwrap_or_default()),
        )]),
        Err(ChatError::Storage(detail)) => Resp::detail(500, detail),
        Err(ChatError::UnknownChat) => Resp::detail(404, "session not found"),
    }
}
