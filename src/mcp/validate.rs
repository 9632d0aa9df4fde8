//! Validation of user MCP server entries with the contract's exact messages (http-api.md §6):
//! names, transport type, display name, description, URL (absolute http(s), no credentials)
//! and headers (masked values keep the stored secret on update). The built-in catalog loader
//! reuses the URL and header rules. Pure functions; run on whichever thread calls the catalog.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::catalog::{Kind, ServerConfig};
use super::views::ApiError;
use crate::util::text;
use crate::util::text::py_repr;
use crate::util::url::{Origin, UrlError};

/// The literal every header value is shown as.
pub const MASK: &str = "********";
const MAX_HEADERS: usize = 32;

pub const MSG_NAME: &str = "name must start with a lowercase letter or digit and contain only lowercase letters, digits, underscores, or hyphens (max 64)";
pub const MSG_TYPE: &str = "user MCP servers support only the sse transport";
pub const MSG_DISPLAY: &str = "display_name is required and must be at most 100 characters";
pub const MSG_DESCRIPTION: &str = "description must be at most 1000 characters";
pub const MSG_URL: &str = "url is required and must be at most 2048 characters";
pub const MSG_URL_ABS: &str = "url must be an absolute HTTP(S) URL";
pub const MSG_URL_CREDS: &str = "url must not contain embedded credentials";
pub const MSG_HEADERS_MAX: &str = "headers may contain at most 32 entries";
pub const MSG_READ_ONLY: &str = "built-in MCP servers are read-only";

pub(super) fn name_ok(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn header_name_ok(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+.^_`|~-".contains(&c))
}

pub(super) fn check_url(raw: &str) -> Result<String, ApiError> {
    let u = raw.trim();
    if u.is_empty() || text::char_len(u) > 2048 {
        return Err(ApiError::unprocessable(MSG_URL));
    }
    if let Some(why) = crate::util::url::tls_missing(u) {
        return Err(ApiError::unprocessable(why));
    }
    match Origin::check(u) {
        Ok(_) => Ok(u.to_string()),
        Err(UrlError::NotHttp) => Err(ApiError::unprocessable(MSG_URL_ABS)),
        Err(UrlError::Credentials) => Err(ApiError::unprocessable(MSG_URL_CREDS)),
    }
}

/// Validates a headers object. `stored` supplies secrets for masked values on update.
pub(super) fn check_headers(
    v: Option<&Value>,
    stored: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let map = match v {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(ApiError::unprocessable("headers must be an object")),
    };
    if map.len() > MAX_HEADERS {
        return Err(ApiError::unprocessable(MSG_HEADERS_MAX));
    }
    let mut out = BTreeMap::new();
    for (name, value) in map {
        let q = py_repr(name);
        if !header_name_ok(name) {
            return Err(ApiError::unprocessable(format!("invalid header name: {q}")));
        }
        let Value::String(value) = value else {
            return Err(ApiError::unprocessable(format!("header {q} must be a string")));
        };
        let value = if value == MASK {
            match stored.and_then(|s| s.get(name)) {
                Some(secret) => secret.clone(),
                None => {
                    return Err(ApiError::unprocessable(format!(
                        "header {q} uses a masked value without a stored secret"
                    )))
                }
            }
        } else {
            value.clone()
        };
        if value.is_empty() || text::char_len(&value) > 4096 {
            return Err(ApiError::unprocessable(format!("header {q} must be non-empty and at most 4096 characters")));
        }
        if value.contains('\r') || value.contains('\n') {
            return Err(ApiError::unprocessable(format!("header {q} must not contain newlines")));
        }
        out.insert(name.clone(), value);
    }
    Ok(out)
}

fn opt_str<'a>(body: &'a Map<String, Value>, key: &str, msg: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::unprocessable(msg)),
    }
}

/// Validates a user create/update body (with `name` already inside). `old` is the stored
/// entry on update: masked header values take their secret from it.
pub fn validate_user(body: &Value, old: Option<&ServerConfig>) -> Result<ServerConfig, ApiError> {
    const KEYS: &[&str] = &["name", "type", "display_name", "description", "url", "headers"];
    let Value::Object(body) = body else {
        return Err(ApiError::unprocessable("body must be a JSON object"));
    };
    if let Some(k) = body.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(ApiError::unprocessable(format!("unknown field: {}", py_repr(k))));
    }
    let name = opt_str(body, "name", MSG_NAME)?.unwrap_or("").trim().to_string();
    if !name_ok(&name) {
        return Err(ApiError::unprocessable(MSG_NAME));
    }
    let kind = match opt_str(body, "type", MSG_TYPE)?.map(str::trim) {
        None | Some("") => Kind::Sse,
        Some(t) => match Kind::parse(t) {
            Some(k @ (Kind::Sse | Kind::StreamableHttp)) => k,
            _ => return Err(ApiError::unprocessable(MSG_TYPE)),
        },
    };
    let display = opt_str(body, "display_name", MSG_DISPLAY)?.unwrap_or("").trim().to_string();
    if display.is_empty() || text::char_len(&display) > 100 {
        return Err(ApiError::unprocessable(MSG_DISPLAY));
    }
    let description = opt_str(body, "description", MSG_DESCRIPTION)?.unwrap_or("").trim().to_string();
    if text::char_len(&description) > 1000 {
        return Err(ApiError::unprocessable(MSG_DESCRIPTION));
    }
    let url = check_url(opt_str(body, "url", MSG_URL)?.unwrap_or(""))?;
    let headers = check_headers(body.get("headers"), old.map(|o| &o.headers))?;
    Ok(ServerConfig {
        name,
        kind,
        display_name: display,
        description,
        command: String::new(),
        args: Vec::new(),
        env: BTreeMap::new(),
        url,
        headers,
        builtin: false,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn create_err(body: Value) -> String {
        validate_user(&body, None).unwrap_err().detail
    }

    #[test]
    fn validation_messages_are_exact() {
        let ok = json!({"name":"weather","display_name":"Weather","url":"https://mcp.example/sse"});
        assert_eq!(validate_user(&ok, None).unwrap().kind, Kind::Sse);
        let with = |k: &str, v: Value| {
            let mut b = ok.clone();
            b[k] = v;
            b
        };
        assert_eq!(create_err(with("name", json!("Bad Name"))), MSG_NAME);
        assert_eq!(create_err(with("type", json!("stdio"))), MSG_TYPE);
        assert_eq!(validate_user(&with("type", json!("streamable_http")), None).unwrap().kind, Kind::StreamableHttp);
        assert_eq!(create_err(with("display_name", json!("  "))), MSG_DISPLAY);
        assert_eq!(create_err(with("display_name", json!("x".repeat(101)))), MSG_DISPLAY);
        assert_eq!(create_err(with("description", json!("x".repeat(1001)))), MSG_DESCRIPTION);
        assert_eq!(create_err(with("url", json!(""))), MSG_URL);
        assert_eq!(create_err(with("url", json!("file:///etc/passwd"))), MSG_URL_ABS);
        assert_eq!(create_err(with("url", json!("http://u:p@h/sse"))), MSG_URL_CREDS);
        let many: Map<String, Value> = (0..33).map(|i| (format!("H{i}"), json!("v"))).collect();
        assert_eq!(create_err(with("headers", Value::Object(many))), MSG_HEADERS_MAX);
        assert_eq!(create_err(with("headers", json!({"Bad Name": "v"}))), "invalid header name: 'Bad Name'");
        assert_eq!(
            create_err(with("headers", json!({"X-Key": MASK}))),
            "header 'X-Key' uses a masked value without a stored secret"
        );
        assert_eq!(
            create_err(with("headers", json!({"X-Key": ""}))),
            "header 'X-Key' must be non-empty and at most 4096 characters"
        );
        assert_eq!(create_err(with("headers", json!({"X-Key": "a\nb"}))), "header 'X-Key' must not contain newlines");
        assert_eq!(create_err(with("extra", json!(1))), "unknown field: 'extra'");
        assert_eq!(py_repr("it's"), "\"it's\"");
    }
}
