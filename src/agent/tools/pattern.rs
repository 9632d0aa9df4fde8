//! Path globs for `glob` and `grep`'s `file_pattern` (pure, no I/O; runs on the turn's worker
//! thread), compiled by `globset` into one regex automaton, so matching is linear in the path
//! for every pattern (no backtracking over `**`). `*` and `?` stay within one path component,
//! `[...]` classes take `!` or `^` for negation and never match `/`, `**` as a whole component
//! spans any depth, `{a,b}` is an alternation, and `\` is an ordinary character (as in Python's
//! fnmatch on Unix). Patterns are relative: `..` and absolute patterns are refused, so a pattern
//! can never name anything outside the walk's base.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// Longest pattern accepted, in characters.
pub(crate) const MAX_PATTERN_CHARS: usize = 1_000;

/// A compiled glob, matched against paths relative to the walk base.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    matcher: GlobSet,
    /// A trailing `/` in the pattern: only directories match.
    pub(crate) dir_only: bool,
}

impl Glob {
    /// Compiles `pattern` with rglob semantics: it may match at any depth below the base, so
    /// `*.py` means `**/*.py` (docs/tools-and-mcp.md §3 `glob`).
    pub(crate) fn recursive(pattern: &str) -> Result<Glob, String> {
        if pattern.trim().is_empty() {
            return Err("empty pattern".into());
        }
        let chars = pattern.chars().count();
        if chars > MAX_PATTERN_CHARS {
            return Err(format!("pattern is too long ({chars} characters, at most {MAX_PATTERN_CHARS})"));
        }
        if pattern.starts_with('/') {
            return Err("non-relative patterns are unsupported".into());
        }
        if pattern.contains('\0') {
            return Err("pattern contains a NUL byte".into());
        }
        // Components as the walk sees them: `.` and empty ones dropped, runs of `**` merged.
        let mut parts: Vec<&str> = vec!["**"];
        for part in pattern.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err("'..' is not allowed in a pattern".into()),
                "**" if parts.last() == Some(&"**") => {}
                _ => parts.push(part),
            }
        }
        if parts.len() == 1 && !pattern.split('/').any(|p| p == "**") {
            return Err("empty pattern".into());
        }
        // A trailing `**` also matches the directory it follows (`src/**` lists `src`), as
        // Python's rglob does; globset's `/**` needs one more component, so add that glob too.
        let mut globs = vec![parts.join("/")];
        if parts.len() > 2 && parts.last() == Some(&"**") {
            globs.push(parts[..parts.len() - 1].join("/"));
        }
        let mut set = GlobSetBuilder::new();
        for g in &globs {
            let glob = GlobBuilder::new(g)
                .literal_separator(true)
                .backslash_escape(false)
                .allow_unclosed_class(true)
                .build()
                .map_err(|e| e.kind().to_string())?;
            set.add(glob);
        }
        let matcher = set.build().map_err(|e| e.kind().to_string())?;
        Ok(Glob { matcher, dir_only: pattern.ends_with('/') })
    }

    /// True when the path components match the whole pattern.
    pub(crate) fn matches(&self, comps: &[String]) -> bool {
        self.matcher.is_match(comps.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, path: &str) -> bool {
        let comps: Vec<String> = path.split('/').map(String::from).collect();
        Glob::recursive(p).unwrap().matches(&comps)
    }

    #[test]
    fn wildcards() {
        assert!(m("*.rs", "main.rs"));
        assert!(m("*.rs", "src/agent/main.rs"));
        assert!(!m("*.rs", "main.rsx"));
        assert!(m("*.rs", ".hidden.rs"));
        assert!(m("src/*.rs", "x/src/a.rs"));
        assert!(!m("src/*.rs", "src/a/b.rs"));
        assert!(m("src/**/*.rs", "src/a.rs"));
        assert!(m("src/**/*.rs", "src/a/b/c.rs"));
        assert!(m("./src//**/**/*.rs", "src/a/b/c.rs"));
        assert!(m("?.txt", "a.txt"));
        assert!(!m("?.txt", "ab.txt"));
        assert!(!m("a?b", "a/b"));
        assert!(m("[ab]*.txt", "bcd.txt"));
        assert!(!m("[!ab]*.txt", "bcd.txt"));
        assert!(m("[!ab]*.txt", "cd.txt"));
        assert!(!m("[^ab]*.txt", "bcd.txt"));
        assert!(!m("a[!x]b", "a/b"));
        assert!(m("[a-c]x", "cx"));
        assert!(m("[]]", "]"));
        assert!(m("a[b", "a[b"));
        assert!(m(r"a\b", r"a\b"));
        assert!(m("a**b", "aQQb"));
        assert!(!m("a**b", "a/b"));
        assert!(m("*.{rs,toml}", "x/Cargo.toml"));
        assert!(m("*a*b*c", "xxaxxbxxc"));
        assert!(!m("*a*b*c", "xxaxxbxx"));
        assert!(m("**", "anything/at/all"));
        assert!(m("src/**", "src"));
        assert!(m("src/**", "x/src/a/b"));
        assert!(!m("src/**", "srcx"));
    }

    #[test]
    fn refuses_escaping_and_bad_patterns() {
        for p in ["../*", "a/../../b", "/etc/*", "", "  ", "./", "a\0b"] {
            assert!(Glob::recursive(p).is_err(), "{p}");
        }
        assert!(Glob::recursive("dir/").unwrap().dir_only);
        assert_eq!(Glob::recursive("[z-a]").unwrap_err(), "invalid range; 'z' > 'a'");
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert_eq!(Glob::recursive(&long).unwrap_err(), "pattern is too long (1001 characters, at most 1000)");
        let nested = format!("{}a{}", "{".repeat(400), "}".repeat(400));
        assert!(Glob::recursive(&nested).is_err());
    }

    /// `**/*` repeated 10 and 50 times against a 33-level path (exponential for a backtracking
    /// matcher) and a 1000-character pattern compile and match in milliseconds.
    #[test]
    fn repeated_globstars_stay_polynomial() {
        let started = std::time::Instant::now();
        let deep: Vec<String> = (0..33).map(|i| format!("d{i}")).collect();
        for n in [10, 50] {
            let g = Glob::recursive(&vec!["**/*"; n].join("/")).unwrap();
            assert!(g.matches(&deep[..n.min(33)]) == (n <= 33));
            assert!(!g.matches(&deep[..5]));
            let g = Glob::recursive(&(vec!["**/*"; n].join("/") + "/x")).unwrap();
            assert!(!g.matches(&deep));
        }
        assert!(Glob::recursive(&"?".repeat(MAX_PATTERN_CHARS)).is_ok());
        let elapsed = started.elapsed();
        assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
    }
}
