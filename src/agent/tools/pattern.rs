//! Hand-written path glob for `glob` and `grep`'s `file_pattern` (pure, no I/O): `*` and `?`
//! within one path component, `[...]` classes (`!`/`^` negation, ranges), `**` as a whole
//! component for any depth. Patterns are relative; `..` and absolute patterns are refused so a
//! pattern can never reach outside the walk's base.

/// A compiled glob, matched against path components relative to the walk base.
#[derive(Debug, Clone)]
pub struct Glob {
    segs: Vec<Seg>,
    /// A trailing `/` in the pattern: only directories match.
    pub dir_only: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    AnyDepth,
    Name(Vec<Tok>),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Lit(char),
    One,
    Star,
    Class { neg: bool, ranges: Vec<(char, char)> },
}

impl Glob {
    /// Compiles `pattern` with rglob semantics: it may match at any depth below the base, so
    /// `*.py` means `**/*.py` (tools-and-mcp.md §3 `glob`).
    pub fn recursive(pattern: &str) -> Result<Glob, String> {
        let mut g = Glob::compile(pattern)?;
        if g.segs.first() != Some(&Seg::AnyDepth) {
            g.segs.insert(0, Seg::AnyDepth);
        }
        Ok(g)
    }

    /// Compiles a relative pattern anchored at the base.
    pub fn compile(pattern: &str) -> Result<Glob, String> {
        if pattern.trim().is_empty() {
            return Err("empty pattern".into());
        }
        if pattern.starts_with('/') {
            return Err("non-relative patterns are unsupported".into());
        }
        if pattern.contains('\0') {
            return Err("pattern contains a NUL byte".into());
        }
        let dir_only = pattern.ends_with('/');
        let mut segs = Vec::new();
        for part in pattern.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err("'..' is not allowed in a pattern".into()),
                "**" => {
                    if segs.last() != Some(&Seg::AnyDepth) {
                        segs.push(Seg::AnyDepth);
                    }
                }
                _ => segs.push(Seg::Name(parse_segment(part))),
            }
        }
        if segs.is_empty() {
            return Err("empty pattern".into());
        }
        Ok(Glob { segs, dir_only })
    }

    /// True when the component list matches the whole pattern.
    pub fn matches(&self, comps: &[String]) -> bool {
        match_segs(&self.segs, comps)
    }
}

fn parse_segment(part: &str) -> Vec<Tok> {
    let chars: Vec<char> = part.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                if toks.last() != Some(&Tok::Star) {
                    toks.push(Tok::Star);
                }
                i += 1;
            }
            '?' => {
                toks.push(Tok::One);
                i += 1;
            }
            '[' => match parse_class(&chars, i + 1) {
                Some((tok, next)) => {
                    toks.push(tok);
                    i = next;
                }
                // An unclosed `[` is a literal, as in Python's fnmatch.
                None => {
                    toks.push(Tok::Lit('['));
                    i += 1;
                }
            },
            c => {
                toks.push(Tok::Lit(c));
                i += 1;
            }
        }
    }
    toks
}

/// Parses a class body starting after `[`; returns the token and the index after `]`.
fn parse_class(chars: &[char], mut i: usize) -> Option<(Tok, usize)> {
    let mut neg = false;
    if i < chars.len() && (chars[i] == '!' || chars[i] == '^') {
        neg = true;
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    while i < chars.len() {
        let c = chars[i];
        // `]` right after `[` or `[!` is a member, not the end.
        if c == ']' && !first {
            return Some((Tok::Class { neg, ranges }, i + 1));
        }
        first = false;
        if i + 2 < chars.len() && chars[i + 1] == '-' && chars[i + 2] != ']' {
            let (a, b) = (c, chars[i + 2]);
            if a <= b {
                ranges.push((a, b));
            }
            i += 3;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
    None
}

fn match_segs(segs: &[Seg], comps: &[String]) -> bool {
    match segs.first() {
        None => comps.is_empty(),
        Some(Seg::AnyDepth) => (0..=comps.len()).any(|k| match_segs(&segs[1..], &comps[k..])),
        Some(Seg::Name(toks)) => {
            !comps.is_empty()
                && match_name(toks, &comps[0].chars().collect::<Vec<_>>())
                && match_segs(&segs[1..], &comps[1..])
        }
    }
}

/// Wildcard match of one component, linear-time star backtracking (one saved star suffices).
fn match_name(toks: &[Tok], s: &[char]) -> bool {
    let (mut t, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        match toks.get(t) {
            Some(Tok::Star) => {
                star = Some((t, i));
                t += 1;
                continue;
            }
            Some(tok) if tok_matches(tok, s[i]) => {
                t += 1;
                i += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((st, si)) => {
                t = st + 1;
                i = si + 1;
                star = Some((st, si + 1));
            }
            None => return false,
        }
    }
    toks[t..].iter().all(|tok| *tok == Tok::Star)
}

fn tok_matches(tok: &Tok, c: char) -> bool {
    match tok {
        Tok::Lit(l) => *l == c,
        Tok::One => true,
        Tok::Star => false,
        Tok::Class { neg, ranges } => ranges.iter().any(|&(a, b)| a <= c && c <= b) != *neg,
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
        assert!(m("src/*.rs", "x/src/a.rs"));
        assert!(!m("src/*.rs", "src/a/b.rs"));
        assert!(m("src/**/*.rs", "src/a.rs"));
        assert!(m("src/**/*.rs", "src/a/b/c.rs"));
        assert!(m("?.txt", "a.txt"));
        assert!(!m("?.txt", "ab.txt"));
        assert!(m("[ab]*.txt", "bcd.txt"));
        assert!(!m("[!ab]*.txt", "bcd.txt"));
        assert!(m("[a-c]x", "cx"));
        assert!(m("[]]", "]"));
        assert!(m("a[b", "a[b"));
        assert!(m("*a*b*c", "xxaxxbxxc"));
        assert!(!m("*a*b*c", "xxaxxbxx"));
        assert!(m("**", "anything/at/all"));
    }

    #[test]
    fn refuses_escaping_patterns() {
        for p in ["../*", "a/../../b", "/etc/*", "", "  "] {
            assert!(Glob::recursive(p).is_err(), "{p}");
        }
        assert!(Glob::recursive("dir/").unwrap().dir_only);
    }
}
