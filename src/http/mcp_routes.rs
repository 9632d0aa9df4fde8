//! `/api/mcp/servers` (docs/http-api.md §6): the merged catalog, user server CRUD, connect,
//! disconnect, tool listings, the review of tools held by pinning (`changes`,
//! `changes/approve`), and OAuth: authorize (the URL to open), sign-out, and the provider's
//! callback (`/api/mcp/oauth/callback`, a small HTML page, never a token). Request shape problems (missing or unknown fields, wrong
//! JSON types) get pydantic-style 422 lists from the shared validator ([`super::shape`]);
//! rule violations get the contract's string details from the catalog. Header values never
//! leave `McpManager` unmasked.

use serde::Serialize;
use serde_json::Value;

use super::api::{only, Api};
use super::shape::Body;
use super::{Req, Resp};
use crate::mcp::views::ApiError;

pub fn route(api: &Api, m: &str, rest: &[&str], req: &Req) -> Resp {
    let mcp = &api.mcp;
    match rest {
        [] => match m {
            "GET" => Resp::ok(&mcp.list()),
            "POST" => match body(req, true) {
                Ok(b) => answer(mcp.create(&b), 201),
                Err(r) => r,
            },
            _ => Resp::detail(405, "Method Not Allowed"),
        },
        [name] => match m {
            "PUT" => match body(req, false) {
                Ok(b) => answer(mcp.update(name, &b), 200),
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

fn answer(r: Result<impl Serialize, ApiError>, status: u16) -> Resp {
    match r {
        Ok(v) => Resp::json(status, &v),
        Err(e) => error(e),
    }
}

/// The one mapping of a refused MCP operation to a response: its status, `{"detail": …}`.
fn error(e: ApiError) -> Resp {
    Resp::detail(e.status, &e.detail)
}

/// The body as an object with the model's fields: create requires `name`, `display_name`,
/// `url`; update forbids `name`; other keys are extra; string fields must be strings
/// (`description` may be null), `headers` an object of strings or null.
fn body(req: &Req, create: bool) -> Result<Value, Resp> {
    let mut b = Body::object(req)?;
    let allowed: &[&str] = if create {
        &["name", "type", "display_name", "description", "url", "headers"]
    } else {
        &["type", "display_name", "description", "url", "headers"]
    };
    let required: &[&str] = if create { &["name", "display_name", "url"] } else { &["display_name", "url"] };
    for field in required {
        if !b.fields().contains_key(*field) {
            b.missing(field);
        }
    }
    let keys: Vec<String> = b.fields().keys().cloned().collect();
    for k in &keys {
        match k.as_str() {
            k if !allowed.contains(&k) => b.extra(k),
            "headers" => {
                b.string_map(k);
            }
            "description" => {
                b.optional_str(k);
            }
            k => {
                b.required_str(k);
            }
        }
    }
    let v = b.value().clone();
    b.done(Some(v))
}

/// `GET /api/mcp/oauth/callback?code=…&state=…`: completes the flow `state` names and answers
/// a page the user can close (the web client polls the server list). The page shows only the
/// server name or a fixed, redacted reason; `no-store` keeps it out of caches and the query
/// (the code) out of any later Referer.
pub fn oauth_callback(api: &Api, m: &str, req: &Req) -> Resp {
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
fn approve_body(req: &Req) -> Result<Option<Vec<String>>, Resp> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let mut b = Body::object(req)?;
    let keys: Vec<String> = b.fields().keys().cloned().collect();
    for k in &keys {
        if k != "tools" {
            b.extra(k);
        }
    }
    let tools = match b.fields().get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) if items.iter().all(Value::is_string) && items.len() <= 4096 => {
            Some(items.iter().filter_map(Value::as_str).map(str::to_string).collect())
        }
        Some(_) => {
            return Err(Resp::detail(422, "tools must be a list of tool names"));
        }
    };
    b.done(Some(()))?;
    Ok(tools)
}
