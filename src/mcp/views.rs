//! The bodies of the MCP HTTP surface (`/api/mcp/servers…`, docs/http-api.md §6,
//! docs/tools-and-mcp.md §5) as types. Statuses and error bodies are not here: a refusal is a
//! [`super::McpError`], which `http::mcp_routes` maps to a status and `{"detail": …}`.
//!
//! Field order is part of the wire: these bodies were once `serde_json` maps (sorted keys), so
//! every struct declares its fields in key order and clients keep seeing the same bytes. Pure
//! data; built on whichever thread calls the manager (an HTTP handler).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::cache::CachedTool;
use super::catalog::{Kind, ServerConfig};
use super::names::wrapped_name;
use super::pins::Seen;
use super::status::Status;
use super::tool::LiveTool;
use super::validate::MASK;

/// One server: `GET /api/mcp/servers` lists these; create, update, connect and disconnect
/// answer with one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerView {
    /// OAuth: `"required"` (the last connect asked for authorization) or `"authorized"` (a
    /// token is held; never the token itself). Absent otherwise, so the bodies of servers
    /// without OAuth stay byte for byte what they were (the client reads absent as null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) auth: Option<&'static str>,
    pub(crate) builtin: bool,
    pub(crate) connected: bool,
    pub(crate) description: String,
    pub(crate) display_name: String,
    /// Header names, each value the literal mask.
    pub(crate) headers: BTreeMap<String, &'static str>,
    pub(crate) mutable: bool,
    pub(crate) name: String,
    /// Tools whose changed description or schema waits for the user's approval
    /// ([`super::pins`]); absent when none, so older clients see the same bytes.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) pending_changes: usize,
    pub(crate) status: Status,
    /// The redacted status line of the last failure.
    pub(crate) status_error: Option<String>,
    pub(crate) tool_count: usize,
    #[serde(rename = "type")]
    pub(crate) kind: Kind,
    pub(crate) url: String,
}

impl ServerView {
    pub(crate) fn new(
        cfg: &ServerConfig,
        status: Status,
        status_error: Option<String>,
        tool_count: usize,
    ) -> ServerView {
        ServerView {
            auth: None,
            builtin: cfg.builtin,
            connected: status == Status::Connected,
            description: cfg.description.clone(),
            display_name: cfg.display_name.clone(),
            headers: cfg.headers.keys().map(|k| (k.clone(), MASK)).collect(),
            mutable: !cfg.builtin,
            name: cfg.name.clone(),
            pending_changes: 0,
            status,
            status_error,
            tool_count,
            kind: cfg.kind,
            url: cfg.url.clone(),
        }
    }
}

/// `GET /api/mcp/servers`: every server in catalog order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerList {
    pub(crate) servers: Vec<ServerView>,
}

/// Where a tool listing comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ToolSource {
    /// The live connection: the tools are registered and callable.
    Live,
    /// The tool-schema cache of an earlier connect: shown, not callable.
    Cache,
    /// Neither.
    None,
}

/// One tool of a listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolView {
    pub(crate) callable: bool,
    pub(crate) description: String,
    pub(crate) input_schema: Value,
    /// The model-facing `mcp_{server}_{tool}` name.
    pub(crate) name: String,
    pub(crate) original_name: String,
    pub(crate) source: ToolSource,
    /// `"pending_approval"` for a tool held by pinning; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<&'static str>,
}

impl ToolView {
    /// A registered tool of the live connection.
    pub(crate) fn live(t: &LiveTool) -> ToolView {
        ToolView {
            callable: true,
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
            name: t.name.clone(),
            original_name: t.original_name.clone(),
            source: ToolSource::Live,
            status: None,
        }
    }

    /// A tool of `server` remembered in the cache, under the name it would be registered as.
    pub(crate) fn cached(server: &str, t: CachedTool) -> ToolView {
        ToolView {
            callable: false,
            description: t.description.unwrap_or_default(),
            input_schema: t.input_schema,
            name: wrapped_name(server, &t.name),
            original_name: t.name,
            source: ToolSource::Cache,
            status: None,
        }
    }

    /// A tool held by pinning: its new version, not callable until approved.
    pub(crate) fn held(server: &str, tool: &str, new: &Seen, source: ToolSource) -> ToolView {
        ToolView {
            callable: false,
            description: new.description.clone().unwrap_or_default(),
            input_schema: new.input_schema.clone(),
            name: wrapped_name(server, tool),
            original_name: tool.to_string(),
            source,
            status: Some(PENDING_APPROVAL),
        }
    }
}

/// `GET /api/mcp/servers/{name}/tools`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolListing {
    pub(crate) display_name: String,
    pub(crate) server: String,
    pub(crate) source: ToolSource,
    pub(crate) status: Status,
    pub(crate) status_error: Option<String>,
    /// Live tools only (0 when the listing comes from the cache).
    pub(crate) tool_count: usize,
    pub(crate) tools: Vec<ToolView>,
}

/// The status of a tool held by pinning.
pub(crate) const PENDING_APPROVAL: &str = "pending_approval";

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One version of a tool in a review.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Version {
    pub(crate) description: String,
    pub(crate) input_schema: Value,
    pub(crate) seen_at: String,
}

impl Version {
    pub(crate) fn of(s: &Seen) -> Version {
        Version {
            description: s.description.clone().unwrap_or_default(),
            input_schema: s.input_schema.clone(),
            seen_at: s.seen_at.clone(),
        }
    }
}

/// A held tool: the approved version (`null` if none is known) and the changed one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Change {
    pub(crate) name: String,
    pub(crate) new: Version,
    pub(crate) old: Option<Version>,
    pub(crate) original_name: String,
}

/// `GET /api/mcp/servers/{name}/changes` and the answer of its `approve`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ChangeList {
    pub(crate) changes: Vec<Change>,
    pub(crate) server: String,
}

/// `POST /api/mcp/servers/{name}/authorize`: the URL the browser opens to authorize.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Authorization {
    pub(crate) authorization_url: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Each body serialises exactly as the `json!` map it replaced (keys sorted).
    #[test]
    fn bodies_serialise_like_the_sorted_maps_they_replaced() {
        let tool = ToolView {
            callable: true,
            description: "Say hello".into(),
            input_schema: json!({"type": "object", "properties": {"b": {}, "a": {}}, "required": []}),
            name: "mcp_s_say_hello".into(),
            original_name: "say_hello".into(),
            source: ToolSource::Live,
            status: None,
        };
        let was = json!({"name": "mcp_s_say_hello", "original_name": "say_hello", "description": "Say hello",
                         "input_schema": tool.input_schema, "source": "live", "callable": true});
        assert_eq!(serde_json::to_string(&tool).unwrap(), was.to_string());
        let listing = ToolListing {
            display_name: "S".into(),
            server: "s".into(),
            source: ToolSource::Live,
            status: Status::Connected,
            status_error: None,
            tool_count: 1,
            tools: vec![tool.clone()],
        };
        let was = json!({"server": "s", "display_name": "S", "tools": [was], "source": "live",
                         "status": "connected", "status_error": null, "tool_count": 1});
        assert_eq!(serde_json::to_string(&listing).unwrap(), was.to_string());
    }

    #[test]
    fn enums_serialise_as_their_wire_names() {
        for s in [Status::Disconnected, Status::Connecting, Status::Connected, Status::Error] {
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        for k in [Kind::Stdio, Kind::Sse, Kind::StreamableHttp] {
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.as_str()));
        }
        let sources = [ToolSource::Live, ToolSource::Cache, ToolSource::None].map(|s| serde_json::to_value(s).unwrap());
        assert_eq!(sources, [json!("live"), json!("cache"), json!("none")]);
    }
}
