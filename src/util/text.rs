//! Text helpers counted in Unicode scalar values (the original's Python `str` semantics).

/// The first `n` code points of `s` (never splits a UTF-8 sequence).
pub(crate) fn take_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Number of code points in `s`.
pub(crate) fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// Collapses every whitespace run to one space and trims both ends.
pub(crate) fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The longest start of `s` of at most `max` bytes (never splits a UTF-8 sequence).
pub(crate) fn take_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Cuts `s` to at most `max` bytes on a char boundary, appending `marker` when cut.
/// Formats a duration the way tool messages quote it (`30s`, `0.3s`).
pub(crate) fn fmt_secs(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
pub(crate) fn cap_bytes(s: &str, max: usize, marker: &str) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    format!("{}{marker}", take_bytes(s, max))
}

/// Python `repr` of a string (single quotes unless it contains `'` and no `"`).
pub(crate) fn py_repr(s: &str) -> String {
    let use_double = s.contains('\'') && !s.contains('"');
    let q = if use_double { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_code_points() {
        assert_eq!(take_chars("héllo", 2), "hé");
        assert_eq!(take_chars("ab", 5), "ab");
        let cjk = "字".repeat(45);
        assert_eq!(char_len(take_chars(&cjk, 40)), 40);
    }

    #[test]
    fn collapses_whitespace() {
        assert_eq!(collapse_ws("  hello\n\tworld   again  "), "hello world again");
    }

    #[test]
    fn caps_bytes_on_boundary() {
        assert_eq!(cap_bytes("aé", 2, "…"), "a…");
        assert_eq!(cap_bytes("abc", 3, "…"), "abc");
    }
}
