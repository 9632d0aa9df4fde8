//! A connection's status and its status line: the `Status` a DTO shows and the one-line,
//! secret-free `"<Type>: <message>"` error text (docs/http-api.md §6) that reaches the API, logs and
//! tool results. Pure functions; any thread.

use super::Error;
use crate::util::{redact, text};

/// Longest `status_error` shown.
pub(crate) const MAX_STATUS_ERROR: usize = 500;

/// Serialises as [`Status::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    #[default]
    Disconnected,
    Connecting,
    Connected,
    Error,
}

impl Status {
    #[cfg(test)]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Disconnected => "disconnected",
            Status::Connecting => "connecting",
            Status::Connected => "connected",
            Status::Error => "error",
        }
    }
}

/// `"<Type>: <message>"` on one line, every known secret replaced, generic redaction, ≤500 chars.
pub(crate) fn redact_status(e: &Error, secrets: &[String]) -> String {
    redact_line(&format!("{}: {e}", e.kind()), secrets)
}

pub(super) fn redact_line(line: &str, secrets: &[String]) -> String {
    let mut s = line.replace(['\r', '\n'], " ");
    for secret in secrets {
        if !secret.is_empty() {
            s = s.replace(secret.as_str(), "[redacted]");
        }
    }
    let s = redact::redact(&s);
    text::take_chars(&s, MAX_STATUS_ERROR).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_one_line_redacted_and_capped() {
        let e = Error::Connect("POST failed: header Bearer sk-abcdefghijkl\nX-Key: hunter2-value".into());
        let line = redact_status(&e, &["hunter2-value".to_string()]);
        assert!(line.starts_with("ConnectError: cannot reach MCP server: POST failed"), "{line}");
        assert!(!line.contains('\n') && !line.contains("hunter2-value") && !line.contains("sk-abcdefghijkl"), "{line}");
        let long = Error::Protocol("x".repeat(2000));
        assert_eq!(redact_status(&long, &[]).chars().count(), MAX_STATUS_ERROR);
    }
}
