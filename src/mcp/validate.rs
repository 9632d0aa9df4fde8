//! Validation of user MCP server entries with the contract's exact messages (docs/http-api.md §6).
//! A [`ServerEntry`] is an entry as the user gave it, already typed (by the HTTP layer's body
//! models, or by [`ServerEntry::from_json`] for the catalog file, both through `util::body`);
//! [`validate_user`] checks its rules once and
//! makes it a [`ServerConfig`]: name, transport type, display name, description, URL (absolute
//! http(s), no credentials) and headers (masked values keep the stored secret on update). The
//! built-in catalog loader reuses the URL and header rules. Pure functions; run on whichever
//! thread calls the catalog.

use std::collections::BTreeMap;

use serde::{de, Deserialize, Deserializer};
use serde_json::Value;

use super::catalog::{Kind, ServerConfig};
use super::refusal::McpError;
use crate::util::body::{self, Dict, Extras, Model};
use crate::util::pydantic::Issue;
use crate::util::text;
use crate::util::text::py_repr;
use crate::util::url::{Origin, UrlError};

/// The literal every header value is shown as.
pub(crate) const MASK: &str = "********";
const MAX_HEADERS: usize = 32;

pub(crate) const MSG_NAME: &str = "name must start with a lowercase letter or digit and contain only lowercase letters, digits, underscores, or hyphens (max 64)";
pub(crate) const MSG_TYPE: &str = "user MCP servers support only the sse transport";
pub(crate) const MSG_DISPLAY: &str = "display_name is required and must be at most 100 characters";
pub(crate) const MSG_DESCRIPTION: &str = "description must be at most 1000 characters";
pub(crate) const MSG_URL: &str = "url is required and must be at most 2048 characters";
pub(crate) const MSG_URL_ABS: &str = "url must be an absolute HTTP(S) URL";
pub(crate) const MSG_URL_CREDS: &str = "url must not contain embedded credentials";
pub(crate) const MSG_HEADERS_MAX: &str = "headers may contain at most 32 entries";
pub(crate) const MSG_READ_ONLY: &str = "built-in MCP servers are read-only";

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

pub(super) fn check_url(raw: &str) -> Result<String, McpError> {
    let u = raw.trim();
    if u.is_empty() || text::char_len(u) > 2048 {
        return Err(McpError::Invalid(MSG_URL.into()));
    }
    if let Some(why) = crate::util::url::tls_missing(u) {
        return Err(McpError::Invalid(why.into()));
    }
    match Origin::check(u) {
        Ok(_) => Ok(u.to_string()),
        Err(UrlError::NotHttp) => Err(McpError::Invalid(MSG_URL_ABS.into())),
        Err(UrlError::Credentials) => Err(McpError::Invalid(MSG_URL_CREDS.into())),
    }
}

/// Checks a headers map. `stored` supplies secrets for masked values on update.
pub(super) fn check_headers(
    headers: &BTreeMap<String, String>,
    stored: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, McpError> {
    if headers.len() > MAX_HEADERS {
        return Err(McpError::Invalid(MSG_HEADERS_MAX.into()));
    }
    let mut out = BTreeMap::new();
    for (name, value) in headers {
        let q = py_repr(name);
        if !header_name_ok(name) {
            return Err(McpError::Invalid(format!("invalid header name: {q}")));
        }
        let value = if value == MASK {
            match stored.and_then(|s| s.get(name)) {
                Some(secret) => secret.clone(),
                None => {
                    return Err(McpError::Invalid(format!("header {q} uses a masked value without a stored secret")))
                }
            }
        } else {
            value.clone()
        };
        if value.is_empty() || text::char_len(&value) > 4096 {
            return Err(McpError::Invalid(format!("header {q} must be non-empty and at most 4096 characters")));
        }
        if value.contains('\r') || value.contains('\n') {
            return Err(McpError::Invalid(format!("header {q} must not contain newlines")));
        }
        out.insert(name.clone(), value);
    }
    Ok(out)
}

/// A user server entry as given: the body of `POST`/`PUT /api/mcp/servers…` without the name
/// (built by the HTTP layer from its body models), or one entry of the user catalog file
/// ([`ServerEntry::from_json`]). Types only; the rules are [`validate_user`]'s.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerEntry {
    /// The transport type; empty means `sse`.
    pub(crate) kind: String,
    pub(crate) display_name: String,
    pub(crate) description: String,
    pub(crate) url: String,
    /// Values in clear, or [`MASK`] to keep the stored value (update).
    pub(crate) headers: BTreeMap<String, String>,
}

/// An entry's JSON shape: every key optional, `null` as absent, no other key.
#[derive(Deserialize)]
struct EntryModel {
    #[serde(rename = "type")]
    kind: Option<Option<String>>,
    display_name: Option<Option<String>>,
    description: Option<Option<String>>,
    url: Option<Option<String>>,
    headers: Option<Option<Dict<String>>>,
}

impl Model for EntryModel {
    const EXTRAS: Extras = Extras::Forbid;
}

impl ServerEntry {
    /// One entry of the user catalog file (without its name), or every shape issue.
    pub(crate) fn from_json(v: &Value) -> Result<ServerEntry, Vec<Issue>> {
        let e = body::parse::<EntryModel>(v)?;
        Ok(ServerEntry {
            kind: e.kind.flatten().unwrap_or_default(),
            display_name: e.display_name.flatten().unwrap_or_default(),
            description: e.description.flatten().unwrap_or_default(),
            url: e.url.flatten().unwrap_or_default(),
            headers: e.headers.flatten().map(|h| h.0).unwrap_or_default(),
        })
    }
}

/// [`ServerEntry::from_json`] for any JSON source; the issues as one line.
impl<'de> Deserialize<'de> for ServerEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        ServerEntry::from_json(&v).map_err(|issues| de::Error::custom(body::summary(&issues)))
    }
}

/// Checks the entry `name` (create) or the entry stored under `name` (update) against the
/// contract's rules, in the contract's order. `old` is the stored entry on update: masked
/// header values take their secret from it.
pub(crate) fn validate_user(
    name: &str,
    entry: ServerEntry,
    old: Option<&ServerConfig>,
) -> Result<ServerConfig, McpError> {
    let name = name.trim().to_string();
    if !name_ok(&name) {
        return Err(McpError::Invalid(MSG_NAME.into()));
    }
    let kind = match entry.kind.trim() {
        "" => Kind::Sse,
        t => match Kind::parse(t) {
            Some(k @ (Kind::Sse | Kind::StreamableHttp)) => k,
            _ => return Err(McpError::Invalid(MSG_TYPE.into())),
        },
    };
    let display = entry.display_name.trim().to_string();
    if display.is_empty() || text::char_len(&display) > 100 {
        return Err(McpError::Invalid(MSG_DISPLAY.into()));
    }
    let description = entry.description.trim().to_string();
    if text::char_len(&description) > 1000 {
        return Err(McpError::Invalid(MSG_DESCRIPTION.into()));
    }
    let url = check_url(&entry.url)?;
    let headers = check_headers(&entry.headers, old.map(|o| &o.headers))?;
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
    use serde_json::{json, Map};

    use super::*;

    /// Validates a create body (with its `name`), typed as the HTTP layer hands it over.
    fn check(body: &Value) -> Result<ServerConfig, McpError> {
        let mut fields = body.as_object().unwrap().clone();
        let name = fields.remove("name").and_then(|n| n.as_str().map(str::to_string)).unwrap_or_default();
        validate_user(&name, serde_json::from_value(Value::Object(fields)).unwrap(), None)
    }

    fn create_err(body: Value) -> String {
        check(&body).unwrap_err().to_string()
    }

    #[test]
    fn validation_messages_are_exact() {
        let ok = json!({"name":"weather","display_name":"Weather","url":"https://mcp.example/sse"});
        assert_eq!(check(&ok).unwrap().kind, Kind::Sse);
        let with = |k: &str, v: Value| {
            let mut b = ok.clone();
            b[k] = v;
            b
        };
        assert_eq!(create_err(with("name", json!("Bad Name"))), MSG_NAME);
        assert_eq!(create_err(with("type", json!("stdio"))), MSG_TYPE);
        assert_eq!(check(&with("type", json!("streamable_http"))).unwrap().kind, Kind::StreamableHttp);
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
        assert!(serde_json::from_value::<ServerEntry>(json!({"extra": 1})).is_err(), "unknown fields are refused");
        let bad = json!({"extra": 1, "url": 5, "headers": {"A": 1, "B": "ok"}, "type": null});
        assert_eq!(
            body::summary(&ServerEntry::from_json(&bad).unwrap_err()),
            "extra: Extra inputs are not permitted; url: Input should be a valid string; headers.A: Input should be a valid string"
        );
        assert_eq!(py_repr("it's"), "\"it's\"");
    }
}
