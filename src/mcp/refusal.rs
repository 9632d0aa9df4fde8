//! [`McpError`]: why the manager refused an operation the user asked for (catalog edits,
//! connect and disconnect, tool listings, the review of held tools, OAuth). Its `Display` is
//! the contract's `detail` text (docs/http-api.md §6); which HTTP status each variant gets is
//! decided in `src/http/mcp_routes.rs`, not here. Failures of a transport or of the protocol
//! are [`super::Error`]. Pure data.

use std::fmt;

use super::validate::MSG_READ_ONLY;

/// A refused MCP operation.
#[derive(Debug)]
pub enum McpError {
    /// No configured server has this name.
    NotFound(String),
    /// The name is taken (by a built-in or a user server).
    Exists(String),
    /// Built-in entries cannot be changed.
    ReadOnly,
    /// The entry breaks a rule; the contract's message ([`super::validate`]).
    Invalid(String),
    /// OAuth applies only to Streamable HTTP servers without a configured `Authorization` header.
    NoOAuth,
    /// The authorization server could not start a flow (discovery, registration): the
    /// redacted status line.
    Upstream(String),
    /// The user catalog or a pin file could not be written; the change was rolled back.
    NotSaved(std::io::Error),
    /// The stored OAuth tokens could not be deleted.
    TokensKept(std::io::Error),
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpError::NotFound(name) => write!(f, "MCP server not found: {name}"),
            McpError::Exists(name) => write!(f, "MCP server already exists: {name}"),
            McpError::ReadOnly => f.write_str(MSG_READ_ONLY),
            McpError::Invalid(msg) | McpError::Upstream(msg) => f.write_str(msg),
            McpError::NoOAuth => {
                f.write_str("OAuth applies to Streamable HTTP servers without an Authorization header")
            }
            McpError::NotSaved(e) => write!(f, "cannot save MCP servers: {e}"),
            McpError::TokensKept(_) => f.write_str("could not delete the stored authorization"),
        }
    }
}

impl std::error::Error for McpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            McpError::NotSaved(e) | McpError::TokensKept(e) => Some(e),
            McpError::NotFound(_)
            | McpError::Exists(_)
            | McpError::ReadOnly
            | McpError::Invalid(_)
            | McpError::NoOAuth
            | McpError::Upstream(_) => None,
        }
    }
}
