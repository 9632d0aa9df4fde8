//! The MCP HTTP surface's error type: a refused API operation as HTTP status plus the
//! contract's `detail` string (http-api.md §6). Pure data; any thread.

use std::fmt;

/// A refused API mutation: HTTP status plus the contract's detail string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub detail: String,
}

impl ApiError {
    pub(super) fn unprocessable(detail: impl Into<String>) -> Self {
        ApiError { status: 422, detail: detail.into() }
    }

    pub fn not_found(name: &str) -> Self {
        ApiError { status: 404, detail: format!("MCP server not found: {name}") }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.detail)
    }
}

impl std::error::Error for ApiError {}
