//! `/api/settings/approvals` (docs/http-api.md §10): the owner's approval policy
//! (`agent::approvals::policy`), read and replaced whole. The decision itself is made by the turn loop
//! (`agent::approvals`); this only stores what the owner chose. Runs on the HTTP thread.

use serde::Deserialize;
use serde_json::Value;

use super::api::Api;
use super::shape::Issue;
use super::{Req, Resp};
use crate::agent::approvals::policy::Policy;
use crate::util::body::{at_body, extract, Model};

/// `/api/settings/approvals/grants`: what "approve for this chat" granted, per chat, and
/// taking a grant back (`DELETE` with `{"chat_id", "grant"}`, the grant as listed).
pub(crate) fn route_grants(api: &Api, m: &str, req: &Req) -> Resp {
    match m {
        "GET" => list_grants(api),
        "DELETE" => revoke(api, req),
        _ => Resp::detail(405, "Method Not Allowed"),
    }
}

fn list_grants(api: &Api) -> Resp {
    let grants: Vec<Value> = api
        .agent
        .deps
        .approvals
        .grants()
        .into_iter()
        .flat_map(|(chat, list)| list.into_iter().map(move |g| serde_json::json!({"chat_id": chat, "grant": g})))
        .collect();
    Resp::ok(&serde_json::json!({ "grants": grants }))
}

/// `DELETE /api/settings/approvals/grants`: whatever is wrong with it, the one item below.
#[derive(Deserialize)]
struct RevokeBody {
    chat_id: String,
    /// As listed; compared whole.
    grant: Value,
}

impl Model for RevokeBody {}

fn revoke(api: &Api, req: &Req) -> Resp {
    let body = match req.json() {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Ok(RevokeBody { chat_id, grant }) = extract(&body) else {
        return Resp::shape(vec![Issue::new("missing", &["body"], "chat_id and grant are required", body)]);
    };
    if !api.approvals.revoke(&chat_id, &grant) {
        return Resp::detail(404, "no such grant");
    }
    list_grants(api)
}

pub(crate) fn route_approvals(api: &Api, m: &str, req: &Req) -> Resp {
    match m {
        "GET" => get(api),
        "PUT" => put(api, req),
        _ => Resp::detail(405, "Method Not Allowed"),
    }
}

fn get(api: &Api) -> Resp {
    let servers = api.mcp.server_names();
    Resp::ok(&api.approvals.policy.get().to_json(servers.iter().map(String::as_str)))
}

fn put(api: &Api, req: &Req) -> Resp {
    let body = match req.json() {
        Ok(v) => v,
        Err(r) => return r,
    };
    let policy = match Policy::from_json(&body) {
        Ok(p) => p,
        Err(issues) => return Resp::shape(at_body(issues)),
    };
    if let Err(e) = api.approvals.policy.set(policy) {
        log::error!("event=approvals.policy_write_failed error_kind={:?}", e.kind());
        return Resp::detail(500, "could not save the approval policy");
    }
    log::info!("event=approvals.policy_saved");
    get(api)
}
