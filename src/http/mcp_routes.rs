//! `/api/mcp/servers` (docs/http-api.md §6): the merged catalog, user server CRUD, connect,
//! disconnect, tool listings, the review of tools held by pinning (`changes`,
//! `changes/approve`), and OAuth: authorize (the URL to open), sign-out, and the provider's
//! callback (`/api/mcp/oauth/callback`, a small HTML page, never a token). Request shape
//! problems (missing or unknown fields, wrong JSON types) get pydantic-style 422 lists from the
//! one body extractor ([`super::shape::body`]); a read body becomes a typed [`ServerEntry`]
//! whose rules the catalog checks. A refused operation ([`McpError`]) becomes its status and
//! `{"detail": …}` in [`error`], the one place MCP statuses are chosen. Header values never
//! leave `McpManager` unmasked. Runs on the `http` thread (network-bound routes on `http-slow`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api::{only, Api};
use super::{Req, Resp};
use crate::mcp::validate::ServerEntry;
use crate::mcp::McpError;
use crate::util::body::{extract, Dict, Extras, Model};
use crate::util::pydantic::Loc;

pub(crate) fn route(api: &Api, m: &str, rest: &[&str], req: &Req) -> Resp {
    let mcp = &api.mcp;
    match rest {
        [] => match m {
            "GET" => Resp::ok(&mcp.list()),
            "POST" => match entry(req, None) {
                Ok((name, e)) => answer(mcp.create(&name, e), 201),
                Err(r) => r,
            },
            _ => Resp::detail(405, "Method Not Allowed"),
        },
        [name] => match m {
            "PUT" => match entry(req, Some(name)) {
                Ok((_, e)) => answer(mcp.update(name, e), 200),
                Err(r) => r,
            },
            "DELETE" => match mcp.delete(name) {
                Ok(()) => Resp::no_content(),
                Err(e) => error(e),
            },
            _ => Resp::detail(405, "Method Not Allowed"),
        },
        [name, "connect"] => only(m, &["POST"]).unwrap_or_else(|| answer(mcp.connect(name), 200)),
        [name, "disconnect"] => only(m, &["POST"]).unwrap_or_else(|| answer(mcp.disconnect(name), 200)),
        [name, "authorize"] => only(m, &["POST"]).unwrap_or_else(|| answer(mcp.authorize(name), 200)),
        [name, "sign-out"] => only(m, &["POST"]).unwrap_or_else(|| answer(mcp.sign_out(name), 200)),
        [name, "tools"] => only(m, &["GET"]).unwrap_or_else(|| answer(mcp.tools_listing(name), 200)),
        [name, "changes"] => only(m, &["GET"]).unwrap_or_else(|| answer(mcp.changes(name), 200)),
        [name, "changes", "approve"] => only(m, &["POST"]).unwrap_or_else(|| match approve_body(req) {
            Ok(tools) => answer(mcp.approve_changes(name, tools.as_deref()), 200),
            Err(r) => r,
        }),
        _ => Resp::detail(404, "Not Found"),
    }
}

fn answer(r: Result<impl Serialize, McpError>, status: u16) -> Resp {
    match r {
        Ok(v) => Resp::json(status, &v),
        Err(e) => error(e),
    }
}

/// The one mapping of a refused MCP operation to a response: the contract's status, and the
/// error's text as `{"detail": …}`.
fn error(e: McpError) -> Resp {
    let status = match &e {
        McpError::NoOAuth => 400,
        McpError::ReadOnly => 403,
        McpError::NotFound(_) => 404,
        McpError::Exists(_) => 409,
        McpError::Invalid(_) => 422,
        McpError::NotSaved(_) | McpError::TokensKept(_) => 500,
        McpError::Upstream(_) => 502,
    };
    Resp::detail(status, &e.to_string())
}

/// `POST /api/mcp/servers`: an entry and its name.
#[derive(Deserialize)]
struct CreateBody {
    name: String,
    display_name: String,
    url: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    description: Option<Option<String>>,
    headers: Option<Option<Dict<String>>>,
}

impl Model for CreateBody {
    const EXTRAS: Extras = Extras::Forbid;
}

/// `PUT /api/mcp/servers/{name}`: the entry (the name is the URL's; a `name` key is extra).
#[derive(Deserialize)]
struct UpdateBody {
    display_name: String,
    url: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    description: Option<Option<String>>,
    headers: Option<Option<Dict<String>>>,
}

impl Model for UpdateBody {
    const EXTRAS: Extras = Extras::Forbid;
}

fn server_entry(
    display_name: String,
    url: String,
    kind: Option<String>,
    description: Option<Option<String>>,
    headers: Option<Option<Dict<String>>>,
) -> ServerEntry {
    ServerEntry {
        kind: kind.unwrap_or_default(),
        display_name,
        description: description.flatten().unwrap_or_default(),
        url,
        headers: headers.flatten().map(|h| h.0).unwrap_or_default(),
    }
}

/// The body as a typed entry with its name: create (`named` is `None`) reads a
/// [`CreateBody`], update (`named` is the URL's name) an [`UpdateBody`]. Issues are listed
/// missing fields first, then by key, as this surface always has.
fn entry(req: &Req, named: Option<&str>) -> Result<(String, ServerEntry), Resp> {
    let v = req.json()?;
    let read = match named {
        None => extract::<CreateBody>(&v)
            .map(|b| (b.name, server_entry(b.display_name, b.url, b.kind, b.description, b.headers))),
        Some(name) => extract::<UpdateBody>(&v)
            .map(|b| (name.to_string(), server_entry(b.display_name, b.url, b.kind, b.description, b.headers))),
    };
    read.map_err(|mut issues| {
        issues.sort_by_key(|i| match (&*i.kind, i.loc.get(1)) {
            ("missing", _) => (false, String::new()),
            (_, Some(Loc::Key(key))) => (true, key.clone()),
            (_, _) => (true, String::new()),
        });
        Resp::shape(issues)
    })
}

/// `GET /api/mcp/oauth/callback?code=…&state=…`: completes the flow `state` names and answers
/// a page the user can close (the web client polls the server list). The page shows only the
/// server name or a fixed, redacted reason; `no-store` keeps it out of caches and the query
/// (the code) out of any later Referer.
pub(crate) fn oauth_callback(api: &Api, m: &str, req: &Req) -> Resp {
    if let Some(r) = only(m, &["GET"]) {
        return r;
    }
    let params = crate::mcp::auth::flow::query_params(&format!("?{}", req.query));
    let (status, title, text) = match api.mcp.oauth_callback(&params) {
        Ok(name) => (
            200,
            "Authorized",
            format!("CashCode is now authorized for the MCP server \u{201c}{name}\u{201d}. You can close this window."),
        ),
        Err(why) => (400, "Authorization failed", why),
    };
    let page = format!(
        "<!doctype html><meta charset=\"utf-8\"><title>{t}</title><body style=\"font-family:sans-serif;margin:3em\"><h1>{t}</h1><p>{b}</p></body>",
        t = escape(title),
        b = escape(&text)
    );
    let mut r = Resp::text(status, &page);
    r.content_type = "text/html; charset=utf-8";
    r.headers.push(("Cache-Control".into(), "no-store".into()));
    r.headers.push(("Referrer-Policy".into(), "no-referrer".into()));
    // Static text only: no script, frame or form may run or be embedded on this page.
    r.headers.push((
        "Content-Security-Policy".into(),
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; form-action 'none'".into(),
    ));
    r
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

/// The approve body: empty, or `{"tools": [original names]}` (absent or null: every held tool).
#[derive(Deserialize)]
struct ApproveBody {
    tools: Option<Option<Vec<String>>>,
}

impl Model for ApproveBody {
    const EXTRAS: Extras = Extras::Forbid;
}

/// The tools to approve. A `tools` that is not a list of at most 4,096 names is answered with
/// one sentence before any shape issue.
fn approve_body(req: &Req) -> Result<Option<Vec<String>>, Resp> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let v = req.json()?;
    let names = |t: &Value| t.as_array().is_some_and(|items| items.len() <= 4096 && items.iter().all(Value::is_string));
    if v.get("tools").is_some_and(|t| !t.is_null() && !names(t)) {
        return Err(Resp::detail(422, "tools must be a list of tool names"));
    }
    let b: ApproveBody = extract(&v).map_err(Resp::shape)?;
    Ok(b.tools.flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal keeps the status and detail the MCP surface answered with before the
    /// domain error existed (docs/http-api.md §6).
    #[test]
    fn refusals_map_to_the_contract_statuses_and_details() {
        let io = || std::io::Error::other("disk full");
        let cases = [
            (McpError::NoOAuth, 400, "OAuth applies to Streamable HTTP servers without an Authorization header"),
            (McpError::ReadOnly, 403, "built-in MCP servers are read-only"),
            (McpError::NotFound("x".into()), 404, "MCP server not found: x"),
            (McpError::Exists("x".into()), 409, "MCP server already exists: x"),
            (
                McpError::Invalid("url must be an absolute HTTP(S) URL".into()),
                422,
                "url must be an absolute HTTP(S) URL",
            ),
            (McpError::NotSaved(io()), 500, "cannot save MCP servers: disk full"),
            (McpError::TokensKept(io()), 500, "could not delete the stored authorization"),
            (McpError::Upstream("ConnectError: refused".into()), 502, "ConnectError: refused"),
        ];
        for (e, status, detail) in cases {
            let r = error(e);
            assert_eq!(
                (r.status, r.body.into_vec()),
                (status, serde_json::to_vec(&serde_json::json!({"detail": detail})).unwrap())
            );
        }
    }
}
