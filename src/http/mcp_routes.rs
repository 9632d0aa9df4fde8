//! `/api/mcp/servers` (http-api.md §6): the merged catalog, user server CRUD, connect,
//! disconnect and tool listings. Request shape problems (missing or unknown fields, wrong
//! JSON types) get pydantic-style 422 lists; rule violations get the contract's string
//! details from the catalog. Header values never leave `McpManager` unmasked.

use serde::Serialize;
use serde_json::{json, Value};

use super::api::{only, Api};
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
        [name, "tools"] => only(m, &["GET"]).unwrap_or_else(|| answer(mcp.tools_listing(name), 200)),
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
/// `url`; update forbids `name`; other keys are extra; string fields must be strings.
fn body(req: &Req, create: bool) -> Result<Value, Resp> {
    let v = req.json()?;
    let Value::Object(map) = &v else {
        return Err(Resp::shape(vec![json!({"type": "model_attributes_type", "loc": ["body"],
            "msg": "Input should be a valid dictionary or object to extract fields from", "input": v})]));
    };
    let allowed: &[&str] = if create {
        &["name", "type", "display_name", "description", "url", "headers"]
    } else {
        &["type", "display_name", "description", "url", "headers"]
    };
    let mut items = Vec::new();
    let required: &[&str] = if create { &["name", "display_name", "url"] } else { &["display_name", "url"] };
    for field in required {
        if !map.contains_key(*field) {
            items.push(json!({"type": "missing", "loc": ["body", field], "msg": "Field required", "input": v}));
        }
    }
    for (k, val) in map {
        if !allowed.contains(&k.as_str()) {
            items.push(json!({"type": "extra_forbidden", "loc": ["body", k],
                              "msg": "Extra inputs are not permitted", "input": val}));
        } else if k == "headers" {
            match val {
                Value::Null => {}
                Value::Object(h) => {
                    for (hk, hv) in h {
                        if !hv.is_string() {
                            items.push(json!({"type": "string_type", "loc": ["body", "headers", hk],
                                              "msg": "Input should be a valid string", "input": hv}));
                        }
                    }
                }
                other => items.push(json!({"type": "dict_type", "loc": ["body", "headers"],
                                            "msg": "Input should be a valid dictionary", "input": other})),
            }
        } else if !(val.is_string() || (k == "description" && val.is_null())) {
            items.push(json!({"type": "string_type", "loc": ["body", k], "msg": "Input should be a valid string", "input": val}));
        }
    }
    if items.is_empty() {
        Ok(v)
    } else {
        Err(Resp::shape(items))
    }
}
