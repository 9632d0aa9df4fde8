//! MCP: a hand-written, blocking JSON-RPC client for external tool servers, the server catalog
//! (built-in + user), the tool-schema cache, live connections, and tool search.
//!
//! Reading order: [`jsonrpc`] (wire types) · [`transport`] (stdio, legacy HTTP+SSE, Streamable
//! HTTP; one reader thread each, event streams parsed by `crate::util::sse`) ·
//! [`client`] (pending ids, timeouts, lifecycle) · [`catalog`] (configs) · [`validate`] (entry
//! rules) · [`cache`] (tool-schema cache) · [`names`] (model-facing tool names) · [`tool`] (the
//! wrappers, schema normalisation) · [`status`] (status lines, redacted) · [`manager`] (live
//! connections and calls, OAuth flows, catalog administration) · [`refusal`] (why a user's
//! operation was refused) · [`views`] (the HTTP surface's bodies) · [`search`] (BM25).
//!
//! Nothing here runs a thread of its own except the per-connection reader/writer/stderr threads
//! a transport spawns; callers (HTTP handlers, turn workers) block with deadlines.

pub(crate) mod activation;
pub mod auth;
pub mod cache;
pub mod catalog;
pub mod client;
pub mod elicit;
pub mod extension;
#[cfg(test)]
mod fuzz;
pub(crate) mod jsonrpc;
pub mod manager;
pub(crate) mod messages;
pub(crate) mod names;
pub(crate) mod pins;
pub(crate) mod refusal;
pub mod search;
pub(crate) mod status;
pub(crate) mod tool;

pub mod transport;
pub mod validate;
pub(crate) mod views;

use std::fmt;
use std::time::Duration;

pub use refusal::McpError;

/// Why an MCP operation failed. Messages never contain header values or secret env values;
/// callers still pass them through [`status::redact_status`] before they leave the process.
#[derive(Debug)]
pub enum Error {
    /// The server configuration cannot be turned into a transport.
    Config(String),
    /// The child process could not be started.
    Spawn { command: String, source: std::io::Error },
    /// An HTTP request failed before a response (refused, DNS, TLS, timeout while connecting).
    Connect(String),
    /// The server answered an HTTP request with an unexpected status.
    Status { status: u16, detail: String },
    /// The connection ended (process exited, stream closed, transport shut down).
    Closed(String),
    /// No answer within the deadline.
    Timeout { method: String, after: Duration },
    /// A JSON-RPC error response.
    Rpc { code: i64, message: String },
    /// The peer broke the protocol (unparsable reply, oversized message, missing fields).
    Protocol(String),
    /// The server picked a protocol version we do not speak.
    UnsupportedVersion(String),
    /// Streamable HTTP answered 404 for our session: it must be initialised again.
    SessionExpired,
    /// The caller's cancel token fired.
    Cancelled,
    /// The server needs OAuth authorization the user has to give in a browser first.
    AuthorizationRequired(String),
    /// The OAuth flow failed (discovery, registration, token endpoint, refusals by policy).
    Auth(String),
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A short type label for status lines (`"<Type>: <message>"`, docs/http-api.md §6).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Error::Config(_) => "ConfigError",
            Error::Spawn { .. } => "SpawnError",
            Error::Connect(_) => "ConnectError",
            Error::Status { .. } => "HTTPStatusError",
            Error::Closed(_) => "ConnectionClosed",
            Error::Timeout { .. } => "TimeoutError",
            Error::Rpc { .. } => "McpError",
            Error::Protocol(_) => "ProtocolError",
            Error::UnsupportedVersion(_) => "UnsupportedProtocolVersion",
            Error::SessionExpired => "SessionExpired",
            Error::Cancelled => "Cancelled",
            Error::AuthorizationRequired(_) => "AuthorizationRequired",
            Error::Auth(_) => "AuthorizationError",
        }
    }

    /// Whether trying again (after reconnecting) may succeed: transport trouble is, a bad
    /// configuration or a protocol-level refusal is not.
    pub fn retryable(&self) -> bool {
        match self {
            Error::Connect(_)
            | Error::Closed(_)
            | Error::Timeout { .. }
            | Error::SessionExpired
            | Error::Protocol(_) => true,
            Error::Status { status, .. } => *status >= 500 || *status == 404 || *status == 429,
            Error::Spawn { .. }
            | Error::Config(_)
            | Error::Rpc { .. }
            | Error::UnsupportedVersion(_)
            | Error::Cancelled
            | Error::AuthorizationRequired(_)
            | Error::Auth(_) => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "invalid MCP server configuration: {m}"),
            Error::Spawn { command, source } => {
                write!(f, "cannot start MCP server command '{command}': {source}")
            }
            Error::Connect(m) => write!(f, "cannot reach MCP server: {m}"),
            Error::Status { status, detail } if detail.is_empty() => {
                write!(f, "MCP server answered HTTP {status}")
            }
            Error::Status { status, detail } => {
                write!(f, "MCP server answered HTTP {status}: {detail}")
            }
            Error::Closed(m) => write!(f, "MCP connection closed: {m}"),
            Error::Timeout { method, after } => {
                write!(f, "MCP request '{method}' timed out after {}s", fmt_secs(*after))
            }
            Error::Rpc { code, message } => write!(f, "MCP error {code}: {message}"),
            Error::Protocol(m) => write!(f, "MCP protocol error: {m}"),
            Error::UnsupportedVersion(v) => {
                write!(f, "MCP server chose unsupported protocol version '{v}'")
            }
            Error::SessionExpired => f.write_str("MCP session expired (HTTP 404)"),
            Error::Cancelled => f.write_str("MCP request cancelled"),
            Error::AuthorizationRequired(m) => write!(f, "MCP server needs authorization: {m}"),
            Error::Auth(m) => write!(f, "MCP authorization failed: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Spawn { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Seconds with at most one decimal, without a trailing `.0` (`30`, `0.5`).
pub(crate) fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if (s - s.round()).abs() < 0.05 {
        format!("{}", s.round() as u64)
    } else {
        format!("{s:.1}")
    }
}
