//! grep's regular expressions (pure, no I/O; runs on the turn's worker thread): Python `re`
//! syntax compiled by `fancy-regex`, which evaluates look-around, backreferences, atomic groups
//! and possessive quantifiers by backtracking (with a step limit) and hands everything else to
//! the linear-time `regex` crate. A small pre-pass ([`translate`]) rewrites the few places where
//! Python spells something the two crates read differently (`\Z`, octal and `\x` escapes, `[`
//! and `&&` inside classes, the `a`/`L`/`u` flags, `\<`, `\b{`) and refuses escapes Python
//! refuses, so no crate extension (subroutines, `\K`, `\p{..}`) slips in; look-behind must be
//! fixed-width, as in Python (fancy-regex's variable-length look-behind is not compiled in).
//! Nothing here recurses over the pattern without a bound: the pattern length is capped, groups
//! nest at most [`MAX_NESTING`] deep, and the compiled program and lazy-DFA cache have size
//! limits. Known differences from CPython: a quantifier on a look-around or an empty group is
//! refused, `\B` matches an empty line, and some patterns CPython rejects are accepted.

use std::fmt;

/// Longest pattern accepted, in characters. Model-written patterns are short; the cap bounds
/// the compile work for everything after it.
pub(crate) const MAX_PATTERN_CHARS: usize = 1_000;
/// Backtracking steps one line search may take (fancy-regex counts them per search); the
/// default of one million lets a single hostile line run for seconds.
const BACKTRACK_LIMIT: usize = 200_000;
/// Bytes of a compiled sub-regex (regex crate `size_limit`, per delegated sub-regex).
const SIZE_LIMIT: usize = 2 << 20;
/// Bytes of lazy-DFA cache per delegated sub-regex (regex crate `dfa_size_limit`).
const DFA_SIZE_LIMIT: usize = 2 << 20;
/// Groups open at once. fancy-regex parses and compiles groups recursively (its own cap is
/// 64, which needs about 1 MiB of stack in a debug build); Python patterns seldom nest five.
pub(crate) const MAX_NESTING: usize = 16;
/// Instructions of fancy-regex's backtracking program.
const MAX_PROGRAM: usize = 100_000;
/// Longest line (bytes) a backtracking pattern is evaluated on. Look-around inside a repeat
/// rescans the rest of the line at every step without counting as backtracking, so the cost of
/// one line grows with its length squared; the cap keeps one line to a fraction of a second.
pub(crate) const MAX_BACKTRACK_LINE_BYTES: usize = 2_048;

/// A pattern that cannot be compiled, worded for the model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Error(pub(crate) String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The search of one line ran out of its backtracking budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Exhausted;

#[derive(Debug)]
pub(crate) struct Regex {
    re: fancy_regex::Regex,
    backtracks: bool,
    /// A match inside a line is also a match inside the whole text (see [`Regex::could_match`]).
    whole_text: bool,
}

impl Regex {
    pub(crate) fn new(pattern: &str) -> Result<Regex, Error> {
        let chars = pattern.chars().count();
        if chars > MAX_PATTERN_CHARS {
            return Err(Error(format!("the pattern is too long ({chars} characters, at most {MAX_PATTERN_CHARS})")));
        }
        let t = translate(pattern)?;
        let re = fancy_regex::RegexBuilder::new(&t.pattern)
            .backtrack_limit(BACKTRACK_LIMIT)
            .delegate_size_limit(SIZE_LIMIT)
            .delegate_dfa_size_limit(DFA_SIZE_LIMIT)
            .max_prog_size(MAX_PROGRAM)
            .build()
            .map_err(|e| compile_error(&e, &t))?;
        Ok(Regex { re, backtracks: t.backtracks, whole_text: !t.backtracks && !t.anchored })
    }

    /// True when the pattern needs the backtracking engine (look-around, backreferences,
    /// atomic groups, possessive quantifiers, conditionals): its lines are capped at
    /// [`MAX_BACKTRACK_LINE_BYTES`] and each search costs more than a linear scan.
    pub(crate) fn backtracks(&self) -> bool {
        self.backtracks
    }

    /// False when no line of `text` (a whole file) can match; true means "maybe". One linear
    /// scan of the file instead of one search per line, for patterns whose match does not
    /// depend on where the line starts or ends: without `^ $ \A \Z` a match in a line is a
    /// match in the text (`\b` sees the line break as the non-word context a line end is), and
    /// without look-around or backreferences the scan is linear-time.
    pub(crate) fn could_match(&self, text: &str) -> bool {
        !self.whole_text || self.re.is_match(text).unwrap_or(true)
    }

    /// Whether the pattern matches anywhere in `line` (Python `re.search`).
    pub(crate) fn is_match(&self, line: &str) -> Result<bool, Exhausted> {
        self.re.is_match(line).map_err(|_| Exhausted)
    }
}

/// fancy-regex's error as one lower-case line, positions given in the caller's pattern.
fn compile_error(e: &fancy_regex::Error, t: &Translated) -> Error {
    use fancy_regex::{CompileError, Error as E};
    let text = match e {
        E::ParseError(pos, kind) => format!("{kind} at position {}", t.origin(*pos)),
        E::CompileError(c) => match &**c {
            CompileError::InnerError(b) => match (b.size_limit(), b.syntax_error()) {
                (Some(limit), _) => format!("the pattern compiles to more than {} KiB; simplify it", limit >> 10),
                // regex-syntax's message quotes the delegated (rewritten) pattern with a caret;
                // only its final `error: …` line means something to the caller.
                (None, Some(s)) => {
                    let full = s.to_string();
                    full.lines().find_map(|l| l.strip_prefix("error: ")).map_or(full.clone(), str::to_string)
                }
                (None, None) => b.to_string(),
            },
            CompileError::LookBehindNotConst | CompileError::VariableLookBehindRequiresFeature => {
                "look-behind requires a fixed-width pattern".to_string()
            }
            CompileError::PatternTooComplex => "the pattern is too complex; simplify it".to_string(),
            other => other.to_string(),
        },
        E::RuntimeError(r) => r.to_string(),
        other => other.to_string(),
    };
    let mut chars = text.chars();
    Error(match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    })
}

/// A pattern rewritten for fancy-regex.
struct Translated {
    pattern: String,
    /// Uses a construct only the backtracking engine evaluates.
    backtracks: bool,
    /// Uses `^`, `$`, `\A` or `\Z`, whose meaning depends on where the searched text ends.
    anchored: bool,
    /// For each byte of `pattern`, the character index in the original it came from.
    from: Vec<usize>,
    /// Characters in the original pattern.
    len: usize,
}

impl Translated {
    /// The original character index for a byte offset into the translated pattern.
    fn origin(&self, pos: usize) -> usize {
        self.from.get(pos).copied().unwrap_or(self.len)
    }
}

/// Characters that keep their backslash (the regex crate's meta characters); other escaped
/// punctuation becomes a `\x{..}` literal, since the crates give some (`\<`, `\>`) a meaning.
const META: &str = "\\.+*?()|[]{}^$#&-~";

/// Rewrites Python `re` syntax into fancy-regex syntax (see the module header).
fn translate(pattern: &str) -> Result<Translated, Error> {
    let s: Vec<char> = pattern.chars().collect();
    let mut t = Translated {
        pattern: String::with_capacity(pattern.len() + 8),
        backtracks: false,
        anchored: false,
        from: Vec::new(),
        len: s.len(),
    };
    let emit = |t: &mut Translated, text: &str, at: usize| {
        t.pattern.push_str(text);
        t.from.resize(t.pattern.len(), at);
    };
    // Verbose mode of each open group (restored at its `)`), and of the current position.
    let mut open: Vec<bool> = Vec::new();
    let mut verbose = false;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        match c {
            '\\' => {
                let (text, next) = escape(&s, i, false, &mut t.backtracks)?;
                if text == "\\A" || text == "\\z" {
                    t.anchored = true;
                }
                emit(&mut t, &text, i);
                i = next;
            }
            '[' => {
                let (text, next) = class(&s, i, verbose)?;
                emit(&mut t, &text, i);
                i = next;
            }
            '(' if open.len() >= MAX_NESTING => {
                return Err(Error(format!("too many nested groups (at most {MAX_NESTING}) at position {i}")));
            }
            '(' if s.get(i + 1) == Some(&'?') => {
                let (text, next, scoped) = extension(&s, i, &mut verbose, &mut t.backtracks)?;
                emit(&mut t, &text, i);
                if let Some(saved) = scoped {
                    open.push(saved);
                }
                i = next;
            }
            '(' => {
                open.push(verbose);
                emit(&mut t, "(", i);
                i += 1;
            }
            ')' => {
                if let Some(saved) = open.pop() {
                    verbose = saved;
                }
                emit(&mut t, ")", i);
                i += 1;
            }
            // A verbose-mode comment is copied untouched (the crate skips it too), so nothing
            // in it is read as an escape or a class.
            '#' if verbose => {
                let end = s[i..].iter().position(|&c| c == '\n').map_or(s.len(), |n| i + n);
                emit(&mut t, &s[i..end].iter().collect::<String>(), i);
                i = end;
            }
            '*' | '+' | '?' | '}' => {
                // `a*+`, `a++`, `a?+`, `a{2}+`: possessive, evaluated by backtracking.
                if s.get(i + 1) == Some(&'+') {
                    t.backtracks = true;
                }
                let mut buf = [0u8; 4];
                emit(&mut t, c.encode_utf8(&mut buf), i);
                i += 1;
            }
            _ => {
                if c == '^' || c == '$' {
                    t.anchored = true;
                }
                let mut buf = [0u8; 4];
                emit(&mut t, c.encode_utf8(&mut buf), i);
                i += 1;
            }
        }
    }
    Ok(t)
}

/// `(?…` at `i`: returns the translation, the index after what was consumed and, when a group
/// was opened, the verbose flag to restore at its `)`.
fn extension(
    s: &[char],
    i: usize,
    verbose: &mut bool,
    backtracks: &mut bool,
) -> Result<(String, usize, Option<bool>), Error> {
    let at = |n: usize| s.get(i + n).copied();
    let saved = Some(*verbose);
    match at(2) {
        // `(?#…)` comment: dropped, as Python does before parsing.
        Some('#') => match s[i..].iter().position(|&c| c == ')') {
            Some(end) => Ok((String::new(), i + end + 1, None)),
            None => Err(Error(format!("missing ), unterminated comment at position {i}"))),
        },
        Some(':') => Ok(("(?:".into(), i + 3, saved)),
        Some('=' | '!') | Some('>') => {
            *backtracks = true;
            Ok((s[i..i + 3].iter().collect(), i + 3, saved))
        }
        Some('<') if matches!(at(3), Some('=' | '!')) => {
            *backtracks = true;
            Ok((s[i..i + 4].iter().collect(), i + 4, saved))
        }
        // `(?(1)yes|no)`: the condition's own parentheses are read as a group.
        Some('(') => {
            *backtracks = true;
            Ok(("(?".into(), i + 2, saved))
        }
        Some('P') if at(3) == Some('<') => Ok(("(?P<".into(), i + 4, saved)),
        Some('<') => Ok(("(?<".into(), i + 3, saved)),
        // `(?P=name)` → `\k<name>` (a named backreference).
        Some('P') if at(3) == Some('=') => {
            let Some(len) = s[i + 4..].iter().position(|&c| c == ')') else {
                return Err(Error(format!("missing ), unterminated name at position {}", i + 4)));
            };
            let name: String = s[i + 4..i + 4 + len].iter().collect();
            if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                return Err(Error(format!("bad character in group name '{name}' at position {}", i + 4)));
            }
            *backtracks = true;
            Ok((format!("\\k<{name}>"), i + 5 + len, None))
        }
        _ => {
            // Flags: `(?imsx)`, `(?i-s:…)`. Python's `a` (ASCII), `L` (locale) and `u` (Unicode)
            // are dropped: classes stay Unicode, as they were before.
            let mut j = i + 2;
            let mut kept = String::new();
            let mut on = true;
            let mut x = None;
            while let Some(&c) = s.get(j) {
                match c {
                    'i' | 'm' | 's' | 'x' => {
                        kept.push(c);
                        if c == 'x' {
                            x = Some(on);
                        }
                    }
                    'a' | 'L' | 'u' => {}
                    '-' if on => {
                        on = false;
                        kept.push('-');
                    }
                    _ => break,
                }
                j += 1;
            }
            let kept = kept.trim_end_matches('-');
            match s.get(j) {
                Some(')') if j > i + 2 => {
                    if let Some(v) = x {
                        *verbose = v;
                    }
                    let text = if kept.is_empty() { String::new() } else { format!("(?{kept})") };
                    Ok((text, j + 1, None))
                }
                Some(':') if j > i + 2 => {
                    if let Some(v) = x {
                        *verbose = v;
                    }
                    Ok((format!("(?{kept}:"), j + 1, saved))
                }
                Some(c) if j == i + 2 => Err(Error(format!("unknown extension ?{c} at position {}", i + 1))),
                _ => Err(Error(format!("missing -, : or ) at position {j}"))),
            }
        }
    }
}

/// A `[…]` class at `i` with Python's rules: `]` first is a member, `[` is a literal, and
/// `&&`, `--`, `~~` (set operations in the regex crate) are literal characters.
fn class(s: &[char], i: usize, verbose: bool) -> Result<(String, usize), Error> {
    let mut out = String::from("[");
    let mut j = i + 1;
    if s.get(j) == Some(&'^') {
        out.push('^');
        j += 1;
    }
    if s.get(j) == Some(&']') {
        out.push_str("\\]");
        j += 1;
    }
    let mut ignore = false;
    loop {
        let Some(&c) = s.get(j) else {
            return Err(Error(format!("unterminated character set at position {i}")));
        };
        match c {
            ']' => {
                out.push(']');
                return Ok((out, j + 1));
            }
            '\\' => {
                let (text, next) = escape(s, j, true, &mut ignore)?;
                out.push_str(&text);
                j = next;
                continue;
            }
            '[' | '&' | '~' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '-' if s.get(j + 1) == Some(&'-') => {
                out.push_str("-\\-");
                j += 1;
            }
            // Whitespace in a class is a member even in verbose mode (the crate would skip it).
            c if verbose && c.is_whitespace() => out.push_str(&format!("\\x{{{:X}}}", c as u32)),
            c => out.push(c),
        }
        j += 1;
    }
}

/// The escape at `s[i] == '\\'`, inside a class or not: its translation and the next index.
fn escape(s: &[char], i: usize, in_class: bool, backtracks: &mut bool) -> Result<(String, usize), Error> {
    let Some(&c) = s.get(i + 1) else {
        return Err(Error(format!("bad escape (end of pattern) at position {i}")));
    };
    let hex = |v: u32| format!("\\x{{{v:X}}}");
    let bad = || Err(Error(format!("bad escape \\{c} at position {i}")));
    // Up to `max` digits of `radix` after the escape letter.
    let digits = |from: usize, max: usize, radix: u32| -> (u32, usize) {
        let mut v = 0u32;
        let mut n = 0;
        while n < max {
            match s.get(from + n).and_then(|d| d.to_digit(radix)) {
                Some(d) => v = v * radix + d,
                None => break,
            }
            n += 1;
        }
        (v, n)
    };
    Ok(match c {
        'd' | 'D' | 's' | 'S' | 'w' | 'W' | 'n' | 't' | 'r' | 'f' | 'v' | 'a' => (format!("\\{c}"), i + 2),
        'b' if in_class => (hex(8), i + 2),
        // `\b{` is a word-boundary form in the crates; in Python the `{` is a literal.
        'b' | 'B' if !in_class && s.get(i + 2) == Some(&'{') => (format!("\\{c}\\{{"), i + 3),
        'b' | 'B' | 'A' if !in_class => (format!("\\{c}"), i + 2),
        // Python's `\Z` is the very end; the crates' `\Z` also allows a final newline.
        'Z' | 'z' if !in_class => ("\\z".into(), i + 2),
        'x' | 'u' | 'U' => {
            let want = match c {
                'x' => 2,
                'u' => 4,
                _ => 8,
            };
            let (v, n) = digits(i + 2, want, 16);
            if n < want {
                return Err(Error(format!("incomplete escape \\{c} at position {i}")));
            }
            if char::from_u32(v).is_none() {
                return Err(Error(format!("bad escape \\{c} (not a character) at position {i}")));
            }
            (hex(v), i + 2 + n)
        }
        // Octal: `\0`, `\0o`, `\0oo`, a three-digit `\ooo`, and any digits inside a class.
        '0'..='7' if c == '0' || in_class || digits(i + 1, 3, 8).1 == 3 => {
            let (v, n) = digits(i + 1, 3, 8);
            if v > 0o377 {
                return Err(Error(format!("octal escape value \\{:o} outside of range 0-0o377 at position {i}", v)));
            }
            (hex(v), i + 1 + n)
        }
        // A backreference: one or two digits (Python reads no more).
        '1'..='9' if !in_class => {
            let (v, n) = digits(i + 1, 2, 10);
            *backtracks = true;
            (format!("\\k<{v}>"), i + 1 + n)
        }
        c if c.is_ascii_alphanumeric() => return bad(),
        c if META.contains(c) => (format!("\\{c}"), i + 2),
        c => (hex(c as u32), i + 2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        Regex::new(p).unwrap().is_match(s).unwrap()
    }

    fn tr(p: &str) -> String {
        translate(p).unwrap().pattern
    }

    #[test]
    fn literals_classes_and_anchors() {
        assert!(m("fn main", "pub(crate) fn main() {"));
        assert!(!m("fn main", "fn  main"));
        assert!(m("^pub", "pub(crate) fn"));
        assert!(!m("^fn", "pub(crate) fn"));
        assert!(m(r"\)$", "call()"));
        assert!(m("a.c", "xabcx"));
        assert!(m("[a-c]{3}", "zzcabzz"));
        assert!(!m("[^a-z]", "abc"));
        assert!(m(r"\d+\.\d+", "version 1.25"));
        assert!(m(r"\d", "٣"));
        assert!(!m(r"\d", "x"));
        assert!(m(r"\bword\b", "a word here"));
        assert!(!m(r"\bword\b", "swordfish"));
        assert!(m(r"\s\S", " x"));
        assert!(m(r"\w+", "é"));
        assert!(m(r"[\w-]+@x", "a-b@x"));
        assert!(m(r"\Aab\Z", "ab"));
        assert!(!m(r"\Aab\Z", "xab"));
        assert!(m("[]a]", "]"));
        assert!(m(r"\x41\u00e9\U0001F600", "Aé😀"));
        assert!(m("a{2}", "caab"));
        assert!(m("x{", "x{"));
        assert!(m("{abc}", "{abc}"));
    }

    #[test]
    fn quantifiers_groups_alternation() {
        assert!(m("colou?r", "color"));
        assert!(m("(ab)+c", "ababc"));
        assert!(!m("^(ab)+c$", "abac"));
        assert!(m("^(?:cat|dog)s?$", "dogs"));
        assert!(!m("^(?:cat|dog)s?$", "cow"));
        assert!(m("a{2,3}b", "aaab"));
        assert!(!m("^a{2,3}b", "ab"));
        assert!(m("^a{,2}b", "ab"));
        assert!(m("^a.*?b$", "axxb"));
        assert!(m("^a+?$", "aaa"));
        assert!(m("^(a|ab)c$", "abc"));
        assert!(m("^(a*)*$", "aaa"));
        assert!(m("^(a?)+b", "b"));
        assert!(m("^((a)|b)+$", "abab"));
    }

    #[test]
    fn flags_lookaround_backrefs() {
        assert!(m("(?i)hello", "Say HELLO"));
        assert!(!m("hello", "HELLO"));
        assert!(m("(?i:HeLLo) x", "hello x"));
        assert!(!m("(?i:a)B", "Ab"));
        assert!(m("(?i)[a-c]+z", "ABCZ"));
        assert!(m("(?ai)x", "X"));
        assert!(m("(?u:x)", "x"));
        assert!(m("foo(?=bar)", "foobar"));
        assert!(!m("foo(?!bar)", "foobar"));
        assert!(m("(?<=\\$)\\d+", "cost $42"));
        assert!(!m("(?<!\\$)\\b\\d+", "$42"));
        assert!(m(r"(\w+) \1", "hello hello"));
        assert!(!m(r"^(\w+) \1$", "hello world"));
        assert!(m(r"(?P<q>['\x22]).*(?P=q)", "say 'hi'"));
        assert!(!m(r"(?P<q>['\x22]).*(?P=q)", "say 'hi\""));
        assert!(m("(?x) a b # comment [ \\q", "ab"));
        assert!(m("(?x)a[ ]b", "a b"));
        assert!(m("a(?#comment [)b", "ab"));
        assert!(m("(?>a+)b", "aab"));
        assert!(m("^a++$", "aa"));
        assert!(!m("^a++a$", "aa"));
    }

    /// The pre-pass turns Python spellings into the crates' and leaves the rest alone.
    #[test]
    fn translation_of_python_syntax() {
        assert_eq!(tr(r"a\Z"), r"a\z");
        assert_eq!(tr(r"(?P<n>a)(?P=n)"), r"(?P<n>a)\k<n>");
        assert_eq!(tr(r"(a)\1\10"), r"(a)\k<1>\k<10>");
        assert_eq!(tr(r"\0\012\101"), r"\x{0}\x{A}\x{41}");
        assert_eq!(tr(r"\x41\u00e9"), r"\x{41}\x{E9}");
        assert_eq!(tr(r"[\b][\1]"), r"[\x{8}][\x{1}]");
        assert_eq!(tr("[[:alpha:]]"), r"[\[:alpha:]]");
        assert_eq!(tr("[a&&b~~c--]"), r"[a\&\&b\~\~c-\-]");
        assert_eq!(tr(r"\<\>\/\-"), r"\x{3C}\x{3E}\x{2F}\-");
        assert_eq!(tr("(?aiL)x(?u:y)(?a)"), "(?i)x(?:y)");
        assert_eq!(tr("a(?#c)*"), "a*");
        assert_eq!(tr(r"\b{2}\B{"), r"\b\{2}\B\{");
        assert!(!translate(r"\w+\d{2}").unwrap().backtracks);
        for (p, anchored) in
            [("a$", true), ("^a", true), (r"\Aa", true), (r"a\Z", true), ("[^a]", false), (r"\$\^", false)]
        {
            assert_eq!(translate(p).unwrap().anchored, anchored, "{p}");
        }
        for p in [r"(a)\1", "(?P<n>a)(?P=n)", "a(?=b)", "(?<!a)b", "(?>a)", "a*+", "a{2}+", "(?(1)a|b)"] {
            assert!(translate(p).unwrap().backtracks, "{p}");
        }
        // Python reads at most two digits of a backreference and three of an octal escape.
        assert!(m(r"(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\10", "abcdefghijj"));
        assert!(m(r"^\1010$", "A0"));
        assert!(m(r"\<a\>", "<a>"));
        assert!(!m(r"\<a\>", "a"));
        assert!(m("[\\b]", "\u{8}"));
        assert!(m("[[:x]+", ":"));
        assert!(m("[a&&b]", "&"));
        assert!(m(r"\a\f\v\t", "\u{7}\u{c}\u{b}\t"));
    }

    #[test]
    fn invalid_patterns_are_clear_errors() {
        let e = |p: &str| Regex::new(p).unwrap_err().0;
        assert_eq!(e("(unclosed"), "opening parenthesis without closing parenthesis at position 9");
        assert_eq!(e("[a-"), "unterminated character set at position 0");
        assert_eq!(e(r"\q"), r"bad escape \q at position 0");
        assert_eq!(e(r"a\p{L}"), r"bad escape \p at position 1");
        assert_eq!(e(r"\x4"), r"incomplete escape \x at position 0");
        assert_eq!(e(r"\777"), r"octal escape value \777 outside of range 0-0o377 at position 0");
        assert_eq!(e("(?R)"), "unknown extension ?R at position 1");
        assert_eq!(e("(?#open"), "missing ), unterminated comment at position 0");
        assert_eq!(e("(?<=a+)b"), "look-behind requires a fixed-width pattern");
        assert_eq!(e("[z-a]"), "invalid character class range, the start must be <= the end");
        assert!(e(r"\<[").starts_with("unterminated character set at position 2"));
        for p in ["(abc", "abc)", "*a", "a**", "(?P<n>a)(?P=m)", r"\2(a)", r"\k<a>", "(?P=)"] {
            assert!(Regex::new(p).is_err(), "{p}");
        }
    }

    #[test]
    fn bounds_are_clean_errors() {
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert_eq!(Regex::new(&long).unwrap_err().0, "the pattern is too long (1001 characters, at most 1000)");
        assert!(Regex::new(&"a".repeat(MAX_PATTERN_CHARS)).is_ok());
        let e = Regex::new(r"(\w{100}){9}").unwrap_err().0;
        assert!(e.starts_with("the pattern compiles to more than"), "{e}");
        let nested = format!("{}a{}", "(".repeat(400), ")".repeat(400));
        assert_eq!(Regex::new(&nested).unwrap_err().0, "too many nested groups (at most 16) at position 16");
        let nested = format!("{}a{}", "(?:".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert!(Regex::new(&nested).is_ok());
        let classes = format!("{}a{}", "(?:[".repeat(100), "])".repeat(100));
        assert!(Regex::new(&classes).is_err());
    }

    /// A nesting of 100,000 groups (and of 400, under the length cap) is refused, and the deepest
    /// nesting accepted compiles and runs, on a stack the size of a worker's (1 MiB), even in a
    /// debug build.
    #[test]
    fn deep_nesting_is_an_error_on_a_worker_stack() {
        let run = || {
            for open in ["(", "(?:", "(?=", "(?<=", "(?>", "(?i:"] {
                for depth in [100_000, 400, MAX_NESTING + 1] {
                    let p = format!("{}a{}", open.repeat(depth), ")".repeat(depth));
                    assert!(Regex::new(&p).is_err(), "{open} {depth}");
                }
                let body = if open == "(?<=" { "(a)" } else { "(a)\\1" };
                let p = format!("{}{body}{}", open.repeat(MAX_NESTING - 1), ")".repeat(MAX_NESTING - 1));
                let r = Regex::new(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
                let _ = r.is_match("aaaaaaaaaaaaaaaaaaaaaaaaaaab");
            }
        };
        std::thread::Builder::new().stack_size(1 << 20).spawn(run).unwrap().join().unwrap();
    }

    /// Classic catastrophic patterns finish fast (the linear engine) or stop at the backtracking
    /// limit (with backreferences, which force the backtracker) on long lines.
    #[test]
    fn catastrophic_patterns_end_within_a_bound() {
        let started = std::time::Instant::now();
        // Without backreferences the linear engine runs them, on lines of any length.
        let a = format!("{}!", "a".repeat(100_000));
        let x = "x".repeat(100_000);
        assert!(!m("(a+)+$b", &a));
        assert!(!m("(a|a)*b", &a));
        assert!(!m("(x+x+)+y", &x));
        let a = &a[a.len() - MAX_BACKTRACK_LINE_BYTES..];
        let x = &x[..MAX_BACKTRACK_LINE_BYTES];
        for (p, line) in [(r"(a|a)*\1b", a), (r"(a*)*\1b", a), (r"(x+x+)+\1y", x), (r"(a+)+\1$", a)] {
            let r = Regex::new(p).unwrap();
            assert!(r.backtracks());
            assert_eq!(r.is_match(line), Err(Exhausted), "{p}");
        }
        let elapsed = started.elapsed();
        assert!(elapsed < std::time::Duration::from_secs(5), "{elapsed:?}");
    }

    /// The whole-file pre-check never hides a line that matches.
    #[test]
    fn could_match_is_a_superset_of_line_matches() {
        let text = "first line\nsecond: foo bar\r\nthird\u{2028}fourth word\n";
        for p in ["foo", r"\bbar\b", r"\w+:", "(?i)FOURTH", r"d\sf", "nope", "^foo", "word$", r"(\w)\1", "foo(?= )"] {
            let r = Regex::new(p).unwrap();
            let any_line = crate::workspace::split_lines(text).iter().any(|l| r.is_match(l).unwrap());
            assert!(r.could_match(text) || !any_line, "{p}");
        }
        assert!(!Regex::new("nope").unwrap().could_match(text));
        assert!(!Regex::new(r"\bsecond\w").unwrap().could_match(text));
        // Anchored and backtracking patterns are never pre-checked.
        assert!(Regex::new("^nope").unwrap().could_match(text));
        assert!(Regex::new(r"(n)\1ope").unwrap().could_match(text));
    }

    /// Arbitrary pattern text never panics the pre-pass, the compiler or the matcher.
    #[test]
    fn random_patterns_never_panic() {
        let alphabet: Vec<char> = "ab(){}[]^$.*+?|\\-,:=!<>#P0123456789dwsbBAZxuUnNié ß&~".chars().collect();
        let mut rng = crate::util::prng::Prng::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next_u64();
        for _ in 0..5_000 {
            let len = (next() % 12) as usize;
            let p: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
            if let Ok(r) = Regex::new(&p) {
                for t in ["", "ab", "a{1}b", "xx(yy)", "é ß 12"] {
                    let _ = r.is_match(t);
                }
            }
        }
    }
}

#[cfg(test)]
mod python_parity {
    use serde_json::Value;

    /// Random patterns run through CPython 3.11 `re` (tests/fixtures/gen_python_re_cases.py):
    /// every pattern CPython accepts must be accepted and agree on every text, with two known
    /// differences: a quantifier on a look-around or an empty group is refused (CPython accepts
    /// it and it means nothing), and `\B` matches in an empty string (an sre quirk says no).
    /// Some patterns CPython rejects are accepted (a leading `{1,2}` is a literal, `(?i)`
    /// may come later than the start); that is not checked.
    #[test]
    fn agrees_with_cpython() {
        let fixture: Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/python_re_cases.json")).expect("fixture parses");
        let mut bad = Vec::new();
        let mut checked = 0;
        let mut refused = 0;
        for group in fixture["groups"].as_array().expect("groups") {
            let texts: Vec<&str> =
                group["texts"].as_array().expect("texts").iter().map(|t| t.as_str().expect("text")).collect();
            for case in group["cases"].as_array().expect("cases") {
                let pattern = case[0].as_str().expect("pattern");
                let mask = case[1].as_str().expect("mask").as_bytes();
                let re = match super::Regex::new(pattern) {
                    Ok(r) => r,
                    Err(e) if e.0.starts_with("target of repeat operator is invalid") => {
                        refused += 1;
                        continue;
                    }
                    Err(e) => {
                        bad.push(format!("{pattern:?} rejected: {e}"));
                        continue;
                    }
                };
                for (t, want) in texts.iter().zip(mask) {
                    if t.is_empty() && pattern.contains("\\B") {
                        continue;
                    }
                    checked += 1;
                    let got = re.is_match(t).expect("small inputs stay within budget");
                    if got != (*want == b'1') {
                        bad.push(format!("{pattern:?} on {t:?}: ours {got}"));
                    }
                }
            }
        }
        assert!(checked > 40_000 && refused < 200, "{checked} checked, {refused} refused");
        assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad[..bad.len().min(40)].join("\n"));
    }
}
