//! Secret redaction for anything that leaves the process as text (logs, error details, MCP
//! status errors): bearer tokens, `sk-…` keys, and labelled secrets such as `api_key=…`.

const LABELS: &[&str] = &["api_key", "api-key", "apikey", "authorization", "x-api-key", "secret", "password", "token"];

/// Replaces secrets in `s` with `[REDACTED]`, plus every exact occurrence of `known` secrets.
pub(crate) fn redact_with(s: &str, known: &[&str]) -> String {
    let mut out = s.to_string();
    for k in known {
        let k = k.trim();
        if k.len() >= 4 {
            out = out.replace(k, "[REDACTED]");
        }
    }
    redact(&out)
}

/// Every pattern [`redact`] looks for starts with one of these (lower-case) ASCII letters;
/// other bytes are copied in runs.
fn may_start(b: u8) -> bool {
    matches!(b, b'a' | b'b' | b'p' | b's' | b't' | b'x')
}

/// Replaces bearer tokens, `sk-` keys and labelled secrets with `[REDACTED]`.
pub(crate) fn redact(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let bytes = s.as_bytes();
    let lower = s.to_ascii_lowercase();
    let lb = lower.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !may_start(lb[i]) {
            // ASCII letters never occur inside a multi-byte character, so `j` is a boundary.
            let j = lb[i..].iter().position(|b| may_start(*b)).map_or(bytes.len(), |k| i + k);
            out.push_str(&s[i..j]);
            i = j;
            continue;
        }
        // "bearer <token>"
        if lb[i..].starts_with(b"bearer ") && word_start(lb, i) {
            out.push_str(&s[i..i + 7]);
            i += 7;
            let end = token_end(bytes, i);
            if end > i {
                out.push_str("[REDACTED]");
                i = end;
            }
            continue;
        }
        // "sk-<key>"
        if lb[i..].starts_with(b"sk-") && word_start(lb, i) && token_end(bytes, i) - i >= 8 {
            out.push_str("[REDACTED]");
            i = token_end(bytes, i);
            continue;
        }
        // "label: value" / "label=value" / "\"label\": \"value\""
        if let Some(label) = LABELS.iter().find(|l| lb[i..].starts_with(l.as_bytes())) {
            if word_start(lb, i) {
                let mut j = i + label.len();
                while j < bytes.len() && matches!(bytes[j], b'"' | b'\'' | b' ' | b'_' | b'-') {
                    if bytes[j] == b'_' || bytes[j] == b'-' {
                        // a longer identifier such as token_count: not a label
                        break;
                    }
                    j += 1;
                }
                if j < bytes.len() && (bytes[j] == b':' || bytes[j] == b'=') {
                    j += 1;
                    while j < bytes.len() && matches!(bytes[j], b' ' | b'"' | b'\'') {
                        j += 1;
                    }
                    // "authorization: Bearer x" keeps the scheme word redacted too
                    let end = token_end(bytes, j);
                    if end > j {
                        out.push_str(&s[i..j]);
                        out.push_str("[REDACTED]");
                        i = end;
                        if lower[j..end].eq_ignore_ascii_case("bearer") {
                            let k = bytes[i..].iter().take_while(|b| **b == b' ').count();
                            let e2 = token_end(bytes, i + k);
                            i = e2;
                        }
                        continue;
                    }
                }
            }
        }
        let ch = s[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn word_start(lb: &[u8], i: usize) -> bool {
    i == 0 || !(lb[i - 1].is_ascii_alphanumeric() || lb[i - 1] == b'_')
}

fn token_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && !matches!(b[i], b' ' | b'"' | b'\'' | b',' | b'}' | b'\n' | b'\r' | b'\t' | b';' | b'&') {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_starts_with_a_letter_the_scan_stops_at() {
        for p in LABELS.iter().chain(&["bearer ", "sk-"]) {
            assert!(may_start(p.as_bytes()[0]), "{p}");
        }
        // Runs of other text, multi-byte characters included, are copied whole and the
        // patterns after them still found.
        assert_eq!(redact("密钥是 API_KEY=abc123 再见"), "密钥是 API_KEY=[REDACTED] 再见");
        assert_eq!(redact("ééé Bearer xyz ü"), "ééé Bearer [REDACTED] ü");
        assert_eq!(redact("只有中文，没有秘密"), "只有中文，没有秘密");
    }

    #[test]
    fn redacts_common_shapes() {
        assert_eq!(redact("Authorization: Bearer abc.def"), "Authorization: [REDACTED]");
        assert_eq!(redact("key sk-1234567890abcdef end"), "key [REDACTED] end");
        assert_eq!(redact("api_key=hunter2&x=1"), "api_key=[REDACTED]&x=1");
        assert_eq!(redact(r#"{"api_key": "s3cr3t"}"#), r#"{"api_key": "[REDACTED]"}"#);
        assert_eq!(redact("token_count=5"), "token_count=5");
        assert_eq!(redact("plain text, nothing here"), "plain text, nothing here");
        assert_eq!(redact_with("x TOPSECRETVALUE y", &["TOPSECRETVALUE"]), "x [REDACTED] y");
    }
}
