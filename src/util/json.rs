//! A linear nesting-depth check for untrusted JSON, run before serde_json. serde_json stops at
//! 128 levels, but reaching them costs about 230 KiB of stack in a debug build (objects; ~50
//! KiB in release), more than the 128 KiB `ws-client` and 256 KiB reader threads have to spare.
//! Checking the raw text first lets each surface choose a depth it can afford. Pure; any thread.

/// Deepest JSON a peer may send over HTTP bodies, MCP messages and model replies: far beyond
/// what those wire shapes use (JSON Schemas in MCP tool lists nest about 20 levels), and it
/// costs serde_json about 120 KiB of stack in a debug build, 30 KiB in release.
pub(crate) const MAX_DEPTH: usize = 64;

/// The byte offset of the first `[` or `{` in `bytes` that opens a level deeper than `max`,
/// or `None` when the text never nests deeper. Brackets inside strings do not count. On text
/// that is not JSON the answer is meaningless but harmless: serde_json reads the same bytes
/// left to right, so it cannot nest deeper than this count before it meets the error.
pub(crate) fn too_deep(bytes: &[u8], max: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", r#"{"a":["#.repeat(depth / 2), "]}".repeat(depth / 2))
    }

    #[test]
    fn counts_arrays_and_objects_but_not_strings() {
        assert_eq!(too_deep(b"[[1]]", 2), None);
        assert_eq!(too_deep(b"[[1]]", 1), Some(1));
        assert_eq!(too_deep(b"{}", 0), Some(0));
        assert_eq!(too_deep(b"", 0), None);
        assert_eq!(too_deep(nested(64).as_bytes(), 64), None);
        assert_eq!(too_deep(nested(66).as_bytes(), 64), Some(r#"{"a":["#.len() * 32));
        // Siblings do not add up: depth is the nesting, not the count.
        assert_eq!(too_deep("[[1],[2],[3],{\"a\":1}]".repeat(100).as_bytes(), 2), None);
        assert_eq!(too_deep("[[1],[2],[3],{\"a\":1}]".repeat(100).as_bytes(), 1), Some(1));
        // Brackets in strings, escaped quotes and escaped backslashes.
        assert_eq!(too_deep(br#"["[[[[", "\"[[[[", "\\", "{{"]"#, 1), None);
        assert_eq!(too_deep(br#"["\\"[[]]]"#, 2), Some(6));
        // Closers past the top never go negative and so cannot hide later openers.
        assert_eq!(too_deep(b"]]]]][[", 1), Some(6));
    }

    /// Whatever this check lets through, serde_json parses without meeting its own limit, and
    /// whatever it refuses is deeper than `max` for serde_json too.
    #[test]
    fn agrees_with_serde_json_at_the_limit() {
        for depth in [1usize, 2, 63, 64, 65, 127, 128, 129, 5000] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let parsed = serde_json::from_str::<serde_json::Value>(&text).is_ok();
            assert_eq!(too_deep(text.as_bytes(), 127).is_none(), parsed, "depth {depth}");
        }
    }
}
