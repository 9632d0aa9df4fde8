//! Evidence of finished turns for self-evolution (docs/skills.md §12, docs/storage.md §8): the turn
//! trace with the runner's failure rule, the workflow fingerprint, redaction, and the evidence
//! files `evidence/<id>.json` (newest `max_evidence` by mtime kept). The trace is built on the
//! turn's worker; the files are written and read on the `skill-evolution` thread.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{read_all, write_json};
use crate::skills::{package, Result};
use crate::util::hash::sha256_hex;
use crate::util::{text, time};

/// What a finished, persisted turn hands to evolution.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnTrace {
    pub(crate) chat_id: String,
    pub(crate) user: String,
    pub(crate) assistant: String,
    /// Every tool call name in order (duplicates count; explicit @-loads excluded).
    pub(crate) tools: Vec<String>,
    /// Persisted tool-message texts.
    pub(crate) tool_receipts: Vec<String>,
    /// No failed tool call and the iteration limit not hit.
    pub(crate) success: bool,
}

impl TurnTrace {
    /// Builds the trace from the records a turn persisted: the first `user` record, the last
    /// record (the answer), every `tool` record (explicit-selection receipts are `assistant`
    /// records, so they never count). A tool failed when its stored text says so by the
    /// runner's rule (docs/agent-and-memory.md §13).
    pub(crate) fn from_records(chat_id: &str, records: &[crate::store::chats::Record], hit_limit: bool) -> TurnTrace {
        let user = records.iter().find(|r| r.role == "user").map(|r| r.content.clone()).unwrap_or_default();
        let assistant = records.last().filter(|r| r.role == "assistant").map(|r| r.content.clone()).unwrap_or_default();
        let tool_records: Vec<_> = records.iter().filter(|r| r.role == "tool").collect();
        let failed = tool_records.iter().any(|r| tool_text_failed(&r.content));
        TurnTrace {
            chat_id: chat_id.to_string(),
            user,
            assistant,
            tools: tool_records.iter().map(|r| r.name.clone().unwrap_or_default()).collect(),
            tool_receipts: tool_records.iter().map(|r| r.content.clone()).collect(),
            success: !hit_limit && !failed,
        }
    }
}

/// The runner's error rule: text starting with `Error`, or a JSON object with a truthy
/// `error` or `success: false`.
pub(crate) fn tool_text_failed(text: &str) -> bool {
    let t = text.trim_start();
    if t.starts_with("Error") {
        return true;
    }
    if !t.starts_with('{') {
        return false;
    }
    match serde_json::from_str::<Value>(t) {
        Ok(Value::Object(o)) => {
            let truthy = |v: &Value| match v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Object(m) => !m.is_empty(),
            };
            o.get("error").is_some_and(truthy) || o.get("success") == Some(&Value::Bool(false))
        }
        _ => false,
    }
}

/// One evidence file (fields in the stored key order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Evidence {
    /// Redacted, at most 2500 chars.
    pub(crate) assistant: String,
    /// First 12 hex of SHA-256 of the chat id.
    pub(crate) chat_id_hash: String,
    /// Epoch seconds.
    pub(crate) created_at: f64,
    pub(crate) fingerprint: String,
    /// `<epoch ms>-<8 hex>`, also the file name.
    pub(crate) id: String,
    /// Redacted, each at most 500 chars.
    pub(crate) tool_receipts: Vec<String>,
    pub(crate) tools: Vec<String>,
    /// Redacted, at most 2000 chars.
    pub(crate) user: String,
}

impl Evidence {
    /// The redacted record of `t`, stamped now.
    pub(crate) fn of(t: &TurnTrace, fingerprint: String) -> Evidence {
        Evidence {
            assistant: sanitize_evidence(&t.assistant, 2500),
            chat_id_hash: sha256_hex(t.chat_id.as_bytes())[..12].to_string(),
            created_at: time::now_epoch(),
            fingerprint,
            id: package::version_id(),
            tool_receipts: t.tool_receipts.iter().map(|r| sanitize_evidence(r, 500)).collect(),
            tools: t.tools.clone(),
            user: sanitize_evidence(&t.user, 2000),
        }
    }
}

/// The `evidence/` directory.
pub(crate) struct EvidenceDir {
    pub(crate) dir: PathBuf,
    /// Files kept after each write.
    pub(crate) max: usize,
}

impl EvidenceDir {
    /// Writes `e` (atomically), then prunes to the newest [`EvidenceDir::max`] files.
    pub(crate) fn record(&self, e: &Evidence) -> Result<()> {
        write_json(&self.dir.join(format!("{}.json", e.id)), e)?;
        self.prune();
        Ok(())
    }

    /// Every readable evidence file.
    pub(crate) fn all(&self) -> Vec<Evidence> {
        read_all(&self.dir)
    }

    /// The last `n` files with fingerprint `fp`, oldest first (by `created_at`, then id), or
    /// `None` when fewer than `n` exist.
    pub(crate) fn recurring(&self, fp: &str, n: usize) -> Option<Vec<Evidence>> {
        let mut matches: Vec<Evidence> = self.all().into_iter().filter(|e| e.fingerprint == fp).collect();
        if matches.len() < n {
            return None;
        }
        matches.sort_by(|a, b| {
            a.created_at.partial_cmp(&b.created_at).unwrap_or(std::cmp::Ordering::Equal).then_with(|| a.id.cmp(&b.id))
        });
        Some(matches.split_off(matches.len() - n))
    }

    /// Keeps the newest `max` files by mtime (name breaks ties).
    fn prune(&self) {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, String, PathBuf)> = rd
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.ends_with(".json") && !n.starts_with('.')
            })
            .filter_map(|e| {
                let m = e.metadata().ok()?.modified().ok()?;
                Some((m, e.file_name().to_string_lossy().into_owned(), e.path()))
            })
            .collect();
        if files.len() <= self.max {
            return;
        }
        files.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        for (_, _, p) in files.into_iter().skip(self.max) {
            let _ = fs::remove_file(p);
        }
    }
}

/// Lowercase, standalone digit runs -> `#`, whitespace collapsed, first 500 chars, then
/// `|` + sorted unique tool names joined by `|`; SHA-256, first 24 hex.
pub(crate) fn fingerprint(user: &str, tools: &[String]) -> String {
    let lower: Vec<char> = user.to_lowercase().chars().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(lower.len());
    let mut i = 0;
    while i < lower.len() {
        let c = lower[i];
        if c.is_ascii_digit() {
            let start = i;
            while i < lower.len() && lower[i].is_ascii_digit() {
                i += 1;
            }
            let before_ok = start == 0 || !word(lower[start - 1]);
            let after_ok = i == lower.len() || !word(lower[i]);
            if before_ok && after_ok {
                out.push('#');
            } else {
                out.extend(&lower[start..i]);
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    let norm = text::collapse_ws(&out);
    let norm = text::take_chars(&norm, 500);
    let tools: BTreeSet<&str> = tools.iter().map(String::as_str).collect();
    let joined: Vec<&str> = tools.into_iter().collect();
    sha256_hex(format!("{norm}|{}", joined.join("|")).as_bytes())[..24].to_string()
}

const SECRET_LABELS: [&str; 6] = ["api_key", "api-key", "apikey", "token", "password", "secret"];

/// Evidence redaction: `label: value` / `label=value` -> `label=[REDACTED]`, skill-load receipts
/// -> `[Skill loaded receipt]`, plus the shared redactor (bearer tokens, `sk-` keys); then cut.
pub(crate) fn sanitize_evidence(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    'outer: while i < s.len() {
        if s[i..].starts_with("[Skill loaded:") {
            if let Some(end) = s[i..].find(']') {
                out.push_str("[Skill loaded receipt]");
                i += end + 1;
                continue;
            }
        }
        for label in SECRET_LABELS {
            if b.len() >= i + label.len() && b[i..i + label.len()].eq_ignore_ascii_case(label.as_bytes()) {
                let mut j = i + label.len();
                while j < b.len() && b[j] == b' ' {
                    j += 1;
                }
                if j < b.len() && (b[j] == b':' || b[j] == b'=') {
                    j += 1;
                    while j < b.len() && matches!(b[j], b' ' | b'"' | b'\'') {
                        j += 1;
                    }
                    let end = j + s[j..]
                        .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '&' | '}'))
                        .unwrap_or(s.len() - j);
                    if end > j {
                        out.push_str(&s[i..i + label.len()]);
                        out.push_str("=[REDACTED]");
                        i = end;
                        continue 'outer;
                    }
                }
            }
        }
        let ch = s[i..].chars().next().expect("i is on a char boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    let out = crate::util::redact::redact(&out);
    text::take_chars(&out, max).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_normalises_numbers_whitespace_and_tool_order() {
        let a = fingerprint("Weather in  Paris for 3 days", &["web_fetch".into(), "write_file".into()]);
        let b = fingerprint(
            "weather in paris for 12 days\n",
            &["write_file".into(), "web_fetch".into(), "web_fetch".into()],
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 24);
        assert_ne!(a, fingerprint("weather in paris for 3 days", &["web_fetch".into()]));
        // Digits inside words are not standalone.
        assert_ne!(fingerprint("v2 api", &[]), fingerprint("v3 api", &[]));
        assert_eq!(fingerprint("item 2024-01-02", &[]), fingerprint("item 1999-12-31", &[]));
        let expected = &sha256_hex("weather in paris for # days|web_fetch|write_file".as_bytes())[..24];
        assert_eq!(a, expected);
    }

    #[test]
    fn evidence_is_redacted_and_bounded() {
        assert_eq!(
            sanitize_evidence("use API_KEY: sk-abc and password=hunter2, ok", 2000),
            "use API_KEY=[REDACTED] and password=[REDACTED], ok"
        );
        assert_eq!(sanitize_evidence("[Skill loaded: weather@v1 sha256:ab] then", 2000), "[Skill loaded receipt] then");
        assert_eq!(text::char_len(&sanitize_evidence(&"字".repeat(3000), 2000)), 2000);
        assert_eq!(sanitize_evidence("Authorization: Bearer xyz", 100), "Authorization: [REDACTED]");
    }
}
