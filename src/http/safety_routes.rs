//! `/api/settings/approvals` (docs/http-api.md §10): the owner's approval policy
//! (`tool::approval`), read and replaced whole. The decision itself is made by the turn loop
//! (`agent::approvals`); this only stores what the owner chose. Runs on the HTTP thread.

use serde_json::Value;

use super::api::Api;
use super::shape::Issue;
use super::{Req, Resp};
use crate::tool::approval::Policy;

pub(crate) fn route_approvals(api: &Api, m: &str, req: &Req) -> Resp {
    match m {
        "GET" => get(api),
        "PUT" => put(api, req),
        _ => Resp::detail(405, "Method Not Allowed"),
    }
}

fn get(api: &Api) -> Resp {
    let servers = api.mcp.server_names();
    Resp::ok(&api.agent.deps.approvals.policy.get().to_json(servers.iter().map(String::as_str)))
}

fn put(api: &Api, req: &Req) -> Resp {
    let body = match req.json() {
        Ok(v) => v,
        Err(r) => return r,
    };
    let policy = match Policy::from_json(&body) {
        Ok(p) => p,
        Err(e) => {
            let mut loc: Vec<&str> = vec!["body"];
            loc.extend(e.path.iter().map(String::as_str));
            let input = e.path.iter().try_fold(&body, |v, k| v.get(k)).cloned().unwrap_or(Value::Null);
            return Resp::shape(vec![Issue::new(e.kind, &loc, e.msg, input)]);
        }
    };
    if let Err(e) = api.agent.deps.approvals.policy.set(policy) {
        log::error!("event=approvals.policy_write_failed error_kind={:?}", e.kind());
        return Resp::detail(500, "could not save the approval policy");
    }
    log::info!("event=approvals.policy_saved");
    get(api)
}
