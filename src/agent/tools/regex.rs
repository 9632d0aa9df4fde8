//! A small backtracking regex engine with Python `re` syntax for `grep` (pure, no I/O; runs on
//! the grep thread). Supported: literals and escapes, `.`, classes (`[a-z]`, `[^…]`, `\d\w\s`
//! and their negations), anchors `^ $ \A \Z \b \B`, greedy and lazy `* + ? {m} {m,} {m,n}`,
//! alternation, capturing/named/non-capturing groups, look-ahead and look-behind, backreferences
//! and the flags `i s m x a u` (global `(?i)` or scoped `(?i:…)`). Every search has a step
//! budget and a recursion bound, so a pathological pattern fails cleanly instead of hanging or
//! overflowing the stack.

use std::cell::Cell;
use std::fmt;

/// Steps one line search may take before giving up (catastrophic backtracking guard).
const MAX_STEPS: u64 = 2_000_000;
/// Nesting of the matcher's recursion; each level is a few stack frames.
const MAX_DEPTH: usize = 6_000;
/// Stack a thread running [`Regex::is_match`] needs for [`MAX_DEPTH`] (debug builds included).
pub const STACK_SIZE: usize = 64 << 20;
/// Largest `{m,n}` bound accepted.
const MAX_REPEAT: u32 = 10_000;

/// A compile error, worded like Python's `re.error`.
#[derive(Debug, Clone, PartialEq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The search ran out of its step or depth budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exhausted;

#[derive(Debug, Clone)]
pub struct Regex {
    root: Node,
    groups: usize,
    /// A literal every match must contain (case-sensitive), for a cheap pre-check.
    required: Option<(String, bool)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Empty,
    Lit(char, bool),
    Any(bool),
    Set(Box<Class>, bool),
    LineStart(bool),
    LineEnd(bool),
    TextStart,
    TextEnd,
    WordB(bool),
    Group(Box<Node>, Option<usize>),
    /// `(?>…)` or a possessive quantifier: the first way the inner node matches is final.
    Atomic(Box<Node>),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
        greedy: bool,
    },
    Look {
        node: Box<Node>,
        behind: bool,
        neg: bool,
    },
    Backref(usize, bool),
}

#[derive(Debug, Clone, PartialEq)]
struct Class {
    neg: bool,
    items: Vec<Item>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Item {
    Range(char, char),
    Digit(bool),
    Word(bool),
    Space(bool),
}

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    icase: bool,
    dotall: bool,
    multiline: bool,
    verbose: bool,
}

impl Regex {
    pub fn new(pattern: &str) -> Result<Regex, Error> {
        let mut p = Parser {
            s: pattern.chars().collect(),
            i: 0,
            groups: 0,
            names: Vec::new(),
            open: Vec::new(),
            flags: Flags::default(),
        };
        p.leading_flags()?;
        let root = p.alternation()?;
        if p.i < p.s.len() {
            return Err(Error(format!("unbalanced parenthesis at position {}", p.i)));
        }
        let required = required_literal(&root);
        Ok(Regex { root, groups: p.groups, required })
    }

    /// Whether the pattern matches anywhere in `line` (Python `re.search`).
    pub fn is_match(&self, line: &str) -> Result<bool, Exhausted> {
        self.is_match_with(line, &mut Vec::new())
    }

    /// [`Regex::is_match`] reusing `buf` for the decoded line (saves an allocation per line).
    pub fn is_match_with(&self, line: &str, buf: &mut Vec<char>) -> Result<bool, Exhausted> {
        if let Some((req, false)) = &self.required {
            if !line.contains(req.as_str()) {
                return Ok(false);
            }
        }
        buf.clear();
        buf.extend(line.chars());
        let text: &[char] = buf;
        let m = Matcher { text, steps: Cell::new(0), depth: Cell::new(0) };
        let mut caps: Caps = vec![None; self.groups + 1];
        let first = first_node(&self.root);
        for start in 0..=text.len() {
            // A match must begin with the first single-char node: skip hopeless starts cheaply.
            if let Some(&c) = text.get(start) {
                if m.single(first, c) == Some(false) {
                    continue;
                }
            } else if m.single(first, ' ').is_some() {
                break;
            }
            if m.node(&self.root, start, &mut caps, &mut |_, _| Ok(true))? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// False when `text` (a whole file, say) cannot contain a match because a literal every
    /// match needs is absent; true means "maybe".
    pub fn could_match(&self, text: &str) -> bool {
        match &self.required {
            None => true,
            Some((lit, false)) => text.contains(lit.as_str()),
            Some((lit, true)) => text.chars().map(fold).collect::<String>().contains(lit.as_str()),
        }
    }
}

/// The node a match must begin with (looking through groups and repeats of at least one).
fn first_node(n: &Node) -> &Node {
    match n {
        Node::Concat(v) if !v.is_empty() => first_node(&v[0]),
        Node::Group(inner, _) | Node::Atomic(inner) => first_node(inner),
        Node::Repeat { node, min, .. } if *min >= 1 => first_node(node),
        other => other,
    }
}

/// The longest run of literals (same case mode) that every match contains, from the top-level
/// sequence (unwrapping groups); case-insensitive runs are stored folded.
fn required_literal(n: &Node) -> Option<(String, bool)> {
    let items: &[Node] = match n {
        Node::Concat(v) => v,
        Node::Group(inner, _) => return required_literal(inner),
        Node::Lit(..) => std::slice::from_ref(n),
        _ => return None,
    };
    let mut best: Option<(String, bool)> = None;
    let mut cur: Option<(String, bool)> = None;
    let keep = |best: &mut Option<(String, bool)>, cand: Option<(String, bool)>| {
        if let Some(c) = cand {
            if best.as_ref().is_none_or(|b| c.0.chars().count() > b.0.chars().count()) {
                *best = Some(c);
            }
        }
    };
    for it in items {
        match it {
            Node::Lit(c, ci) => {
                let ch = if *ci { fold(*c) } else { *c };
                match &mut cur {
                    Some((s, mode)) if mode == ci => s.push(ch),
                    _ => {
                        keep(&mut best, cur.take());
                        cur = Some((ch.to_string(), *ci));
                    }
                }
            }
            Node::Group(..) => {
                keep(&mut best, cur.take());
                keep(&mut best, required_literal(it));
            }
            _ => keep(&mut best, cur.take()),
        }
    }
    keep(&mut best, cur);
    best
}

struct Parser {
    s: Vec<char>,
    i: usize,
    groups: usize,
    names: Vec<(String, usize)>,
    /// Capturing groups not yet closed (a backreference to one is an error, as in Python).
    open: Vec<usize>,
    flags: Flags,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn bump<T>(&mut self, v: T) -> T {
        self.i += 1;
        v
    }

    fn err<T>(&self, msg: &str) -> Result<T, Error> {
        Err(Error(format!("{msg} at position {}", self.i)))
    }

    /// Global inline flags such as `(?i)` at the very start (Python 3.11 rule).
    fn leading_flags(&mut self) -> Result<(), Error> {
        loop {
            self.skip_ignorable()?;
            if !(self.s.get(self.i) == Some(&'(') && self.s.get(self.i + 1) == Some(&'?')) {
                return Ok(());
            }
            let mut j = self.i + 2;
            let mut f = self.flags;
            while let Some(&c) = self.s.get(j) {
                if !set_flag(&mut f, c, true) {
                    break;
                }
                j += 1;
            }
            if j > self.i + 2 && self.s.get(j) == Some(&')') {
                self.flags = f;
                self.i = j + 1;
            } else {
                return Ok(());
            }
        }
    }

    /// Skips `(?#…)` comments and, in verbose mode, whitespace and `#` line comments: Python
    /// drops them before parsing, so a quantifier after a comment binds to the atom before it.
    fn skip_ignorable(&mut self) -> Result<(), Error> {
        loop {
            let c = self.peek();
            if self.flags.verbose && c.is_some_and(char::is_whitespace) {
                self.i += 1;
            } else if self.flags.verbose && c == Some('#') {
                while let Some(c) = self.peek() {
                    self.i += 1;
                    if c == '\n' {
                        break;
                    }
                }
            } else if c == Some('(') && self.s.get(self.i + 1) == Some(&'?') && self.s.get(self.i + 2) == Some(&'#') {
                match self.s[self.i..].iter().position(|&c| c == ')') {
                    Some(end) => self.i += end + 1,
                    None => return self.err("missing ), unterminated comment"),
                }
            } else {
                return Ok(());
            }
        }
    }

    fn alternation(&mut self) -> Result<Node, Error> {
        let mut alts = vec![self.sequence()?];
        while self.peek() == Some('|') {
            self.i += 1;
            alts.push(self.sequence()?);
        }
        Ok(if alts.len() == 1 { alts.pop().unwrap_or(Node::Empty) } else { Node::Alt(alts) })
    }

    fn sequence(&mut self) -> Result<Node, Error> {
        let mut items = Vec::new();
        loop {
            self.skip_ignorable()?;
            match self.peek() {
                None | Some('|') | Some(')') => break,
                _ => {}
            }
            let atom = self.atom()?;
            self.skip_ignorable()?;
            let atom = self.quantified(atom)?;
            items.push(atom);
        }
        Ok(match items.len() {
            0 => Node::Empty,
            1 => items.pop().unwrap_or(Node::Empty),
            _ => Node::Concat(items),
        })
    }

    fn quantified(&mut self, atom: Node) -> Result<Node, Error> {
        let (min, max) = match self.peek() {
            Some('*') => self.bump((0, None)),
            Some('+') => self.bump((1, None)),
            Some('?') => self.bump((0, Some(1))),
            Some('{') => match self.braces_at(self.i)? {
                Some((min, max, end)) => {
                    self.i = end;
                    (min, max)
                }
                None => return Ok(atom),
            },
            _ => return Ok(atom),
        };
        if is_zero_width(&atom) {
            return self.err("nothing to repeat");
        }
        let (greedy, possessive) = match self.peek() {
            Some('?') => self.bump((false, false)),
            Some('+') => self.bump((true, true)),
            _ => (true, false),
        };
        if matches!(self.peek(), Some('*' | '+' | '?')) || self.braces_at(self.i)?.is_some() {
            return self.err("multiple repeat");
        }
        let rep = Node::Repeat { node: Box::new(atom), min, max, greedy };
        // A possessive quantifier (Python 3.11) is an atomic group around the greedy repeat.
        Ok(if possessive { Node::Atomic(Box::new(rep)) } else { rep })
    }

    /// A `{m}`, `{m,}`, `{,n}`, `{,}` or `{m,n}` quantifier starting at `at`, with the index
    /// after its `}`; `None` when the text there is a literal `{` (as in Python).
    fn braces_at(&self, at: usize) -> Result<Option<(u32, Option<u32>, usize)>, Error> {
        if self.s.get(at) != Some(&'{') {
            return Ok(None);
        }
        let mut j = at + 1;
        let num = |j: &mut usize, s: &[char]| -> Option<u64> {
            let b = *j;
            while *j < s.len() && s[*j].is_ascii_digit() {
                *j += 1;
            }
            if *j == b {
                None
            } else {
                Some(s[b..*j].iter().collect::<String>().parse().unwrap_or(u64::MAX))
            }
        };
        let min = num(&mut j, &self.s);
        let (min, max) = if self.s.get(j) == Some(&',') {
            j += 1;
            let max = num(&mut j, &self.s);
            (min.unwrap_or(0), max)
        } else {
            match min {
                Some(m) => (m, Some(m)),
                None => return Ok(None),
            }
        };
        if self.s.get(j) != Some(&'}') {
            return Ok(None);
        }
        let too_large = |n: u64| n > u64::from(MAX_REPEAT);
        if too_large(min) || max.is_some_and(too_large) {
            return Err(Error(format!("the repetition number is too large at position {at}")));
        }
        if max.is_some_and(|m| m < min) {
            return Err(Error(format!("min repeat greater than max repeat at position {at}")));
        }
        Ok(Some((min as u32, max.map(|m| m as u32), j + 1)))
    }

    fn atom(&mut self) -> Result<Node, Error> {
        let f = self.flags;
        let Some(c) = self.peek() else {
            return self.err("unexpected end of pattern");
        };
        self.i += 1;
        Ok(match c {
            '.' => Node::Any(f.dotall),
            '^' => Node::LineStart(f.multiline),
            '$' => Node::LineEnd(f.multiline),
            '[' => Node::Set(Box::new(self.class()?), f.icase),
            '(' => self.group()?,
            '\\' => self.escape()?,
            '*' | '+' | '?' => {
                self.i -= 1;
                return self.err("nothing to repeat");
            }
            '{' => {
                if self.braces_at(self.i - 1)?.is_some() {
                    self.i -= 1;
                    return self.err("nothing to repeat");
                }
                Node::Lit('{', f.icase)
            }
            c => Node::Lit(c, f.icase),
        })
    }

    fn group(&mut self) -> Result<Node, Error> {
        let saved = self.flags;
        let mut capture = true;
        let mut look: Option<(bool, bool)> = None;
        let mut atomic = false;
        let mut name: Option<String> = None;
        if self.peek() == Some('?') {
            self.i += 1;
            match self.peek() {
                Some(':') => {
                    self.i += 1;
                    capture = false;
                }
                Some('=') => {
                    self.i += 1;
                    look = Some((false, false));
                }
                Some('>') => {
                    self.i += 1;
                    capture = false;
                    atomic = true;
                }
                Some('!') => {
                    self.i += 1;
                    look = Some((false, true));
                }
                Some('<') if matches!(self.s.get(self.i + 1), Some('=' | '!')) => {
                    let neg = self.s[self.i + 1] == '!';
                    self.i += 2;
                    look = Some((true, neg));
                }
                Some('P') if self.s.get(self.i + 1) == Some(&'<') => {
                    self.i += 2;
                    name = Some(self.ident('>')?);
                }
                Some('<') => {
                    self.i += 1;
                    name = Some(self.ident('>')?);
                }
                Some('P') if self.s.get(self.i + 1) == Some(&'=') => {
                    self.i += 2;
                    let n = self.ident(')')?;
                    return match self.names.iter().find(|(k, _)| *k == n) {
                        Some(&(_, g)) if self.open.contains(&g) => self.err("cannot refer to an open group"),
                        Some(&(_, g)) => Ok(Node::Backref(g, self.flags.icase)),
                        None => self.err(&format!("unknown group name '{n}'")),
                    };
                }
                Some('#') => {
                    while let Some(c) = self.peek() {
                        self.i += 1;
                        if c == ')' {
                            return Ok(Node::Empty);
                        }
                    }
                    return self.err("missing ), unterminated comment");
                }
                _ => {
                    // Scoped flags `(?i:...)`, `(?-i:...)`, `(?i-s:...)`.
                    let mut f = self.flags;
                    let mut on = true;
                    let mut any = false;
                    while let Some(c) = self.peek() {
                        if c == '-' && on {
                            on = false;
                        } else if !set_flag(&mut f, c, on) {
                            break;
                        }
                        any = true;
                        self.i += 1;
                    }
                    if !any || self.peek() != Some(':') {
                        return self.err("unknown extension or misplaced global flags");
                    }
                    self.i += 1;
                    self.flags = f;
                    capture = false;
                }
            }
        }
        let index = if capture && look.is_none() {
            self.groups += 1;
            if let Some(n) = name {
                if self.names.iter().any(|(k, _)| *k == n) {
                    return self.err(&format!("redefinition of group name '{n}'"));
                }
                self.names.push((n, self.groups));
            }
            Some(self.groups)
        } else {
            None
        };
        if let Some(g) = index {
            self.open.push(g);
        }
        let inner = self.alternation()?;
        if index.is_some() {
            self.open.pop();
        }
        self.flags = saved;
        if self.peek() != Some(')') {
            return self.err("missing ), unterminated subpattern");
        }
        self.i += 1;
        Ok(match look {
            Some((behind, neg)) => Node::Look { node: Box::new(inner), behind, neg },
            None if atomic => Node::Atomic(Box::new(inner)),
            None => Node::Group(Box::new(inner), index),
        })
    }

    fn ident(&mut self, end: char) -> Result<String, Error> {
        let mut s = String::new();
        while let Some(c) = self.peek() {
            self.i += 1;
            if c == end {
                let valid = s.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
                    && s.chars().all(|c| c.is_alphanumeric() || c == '_');
                return if valid { Ok(s) } else { self.err(&format!("bad character in group name '{s}'")) };
            }
            s.push(c);
        }
        self.err("missing group name terminator")
    }

    fn class(&mut self) -> Result<Class, Error> {
        let mut neg = false;
        if self.peek() == Some('^') {
            neg = true;
            self.i += 1;
        }
        let mut items = Vec::new();
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return self.err("unterminated character set");
            };
            if c == ']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            self.i += 1;
            let lo = if c == '\\' {
                match self.class_escape()? {
                    Ok(ch) => ch,
                    Err(item) => {
                        items.push(item);
                        continue;
                    }
                }
            } else {
                c
            };
            if self.peek() == Some('-') && self.s.get(self.i + 1).is_some_and(|&n| n != ']') {
                self.i += 1;
                let Some(h) = self.peek() else {
                    return self.err("unterminated character set");
                };
                self.i += 1;
                let hi = if h == '\\' {
                    match self.class_escape()? {
                        Ok(ch) => ch,
                        Err(_) => return self.err("bad character range"),
                    }
                } else {
                    h
                };
                if hi < lo {
                    return self.err(&format!("bad character range {lo}-{hi}"));
                }
                items.push(Item::Range(lo, hi));
            } else {
                items.push(Item::Range(lo, lo));
            }
        }
        Ok(Class { neg, items })
    }

    /// An escape inside `[...]`: a char, or a shorthand class item.
    fn class_escape(&mut self) -> Result<Result<char, Item>, Error> {
        let Some(c) = self.peek() else {
            return self.err("bad escape (end of pattern)");
        };
        self.i += 1;
        Ok(match c {
            'd' => Err(Item::Digit(false)),
            'D' => Err(Item::Digit(true)),
            'w' => Err(Item::Word(false)),
            'W' => Err(Item::Word(true)),
            's' => Err(Item::Space(false)),
            'S' => Err(Item::Space(true)),
            'b' => Ok('\u{8}'),
            _ => {
                self.i -= 1;
                Ok(self.char_escape()?)
            }
        })
    }

    /// Escapes that denote one character (shared by classes and atoms).
    fn char_escape(&mut self) -> Result<char, Error> {
        let Some(c) = self.peek() else {
            return self.err("bad escape (end of pattern)");
        };
        self.i += 1;
        Ok(match c {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'f' => '\u{c}',
            'v' => '\u{b}',
            'a' => '\u{7}',
            'x' => self.hex(2)?,
            'u' => self.hex(4)?,
            'U' => self.hex(8)?,
            '0'..='7' => {
                let mut v = c.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match self.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            self.i += 1;
                        }
                        None => break,
                    }
                }
                char::from_u32(v).unwrap_or('\0')
            }
            c if c.is_ascii_alphanumeric() => {
                self.i -= 1;
                return self.err(&format!("bad escape \\{c}"));
            }
            c => c,
        })
    }

    fn hex(&mut self, n: usize) -> Result<char, Error> {
        let digits: String = self.s.iter().skip(self.i).take(n).collect();
        if digits.len() != n || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return self.err("incomplete escape");
        }
        self.i += n;
        u32::from_str_radix(&digits, 16).ok().and_then(char::from_u32).map_or_else(|| self.err("bad escape"), Ok)
    }

    fn escape(&mut self) -> Result<Node, Error> {
        let f = self.flags;
        let Some(c) = self.peek() else {
            return self.err("bad escape (end of pattern)");
        };
        let set = |item| Node::Set(Box::new(Class { neg: false, items: vec![item] }), false);
        match c {
            'd' | 'D' | 'w' | 'W' | 's' | 'S' => {
                self.i += 1;
                let neg = c.is_ascii_uppercase();
                Ok(set(match c.to_ascii_lowercase() {
                    'd' => Item::Digit(neg),
                    'w' => Item::Word(neg),
                    _ => Item::Space(neg),
                }))
            }
            'b' | 'B' => {
                self.i += 1;
                Ok(Node::WordB(c == 'b'))
            }
            'A' => {
                self.i += 1;
                Ok(Node::TextStart)
            }
            'Z' => {
                self.i += 1;
                Ok(Node::TextEnd)
            }
            '1'..='9' => {
                // A backreference: up to two digits, or octal when it starts with three of them.
                let mut n = c.to_digit(10).unwrap_or(0) as usize;
                self.i += 1;
                if let Some(d) = self.peek().and_then(|d| d.to_digit(10)) {
                    n = n * 10 + d as usize;
                    self.i += 1;
                }
                if n > self.groups {
                    return self.err(&format!("invalid group reference {n}"));
                }
                if self.open.contains(&n) {
                    return self.err("cannot refer to an open group");
                }
                Ok(Node::Backref(n, f.icase))
            }
            _ => Ok(Node::Lit(self.char_escape()?, f.icase)),
        }
    }
}

fn set_flag(f: &mut Flags, c: char, on: bool) -> bool {
    match c {
        'i' => f.icase = on,
        's' => f.dotall = on,
        'm' => f.multiline = on,
        'x' => f.verbose = on,
        // ASCII/Unicode/locale matching: \w and \d already follow Unicode; accepted as no-ops.
        'a' | 'u' | 'L' => {}
        _ => return false,
    }
    true
}

fn is_zero_width(n: &Node) -> bool {
    matches!(n, Node::LineStart(_) | Node::LineEnd(_) | Node::TextStart | Node::TextEnd | Node::WordB(_))
}

type Caps = Vec<Option<(usize, usize)>>;
type Cont<'k> = &'k mut dyn FnMut(usize, &mut Caps) -> Result<bool, Exhausted>;

struct Matcher<'t> {
    text: &'t [char],
    steps: Cell<u64>,
    depth: Cell<usize>,
}

/// Simple (one-to-one) case mapping like sre's: multi-char mappings leave the char as is.
fn fold(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    let mut l = c.to_lowercase();
    match (l.next(), l.next()) {
        (Some(x), None) => x,
        _ => c,
    }
}

fn upper(c: char) -> char {
    let mut u = c.to_uppercase();
    match (u.next(), u.next()) {
        (Some(x), None) => x,
        _ => c,
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

impl Class {
    fn matches(&self, c: char, icase: bool) -> bool {
        let hit = |c: char| {
            self.items.iter().any(|it| match *it {
                Item::Range(a, b) => a <= c && c <= b,
                Item::Digit(neg) => c.is_numeric() != neg,
                Item::Word(neg) => is_word(c) != neg,
                // Python's str.isspace also counts the separators \x1c-\x1f.
                Item::Space(neg) => (c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)) != neg,
            })
        };
        let found = hit(c)
            || (icase && {
                let lower = fold(c);
                hit(lower) || hit(upper(c))
            });
        found != self.neg
    }
}

impl Matcher<'_> {
    fn single(&self, n: &Node, c: char) -> Option<bool> {
        Some(match n {
            Node::Lit(l, false) => *l == c,
            Node::Lit(l, true) => fold(*l) == fold(c),
            Node::Any(dotall) => *dotall || c != '\n',
            Node::Set(class, icase) => class.matches(c, *icase),
            _ => return None,
        })
    }

    fn tick(&self) -> Result<(), Exhausted> {
        let s = self.steps.get() + 1;
        self.steps.set(s);
        if s > MAX_STEPS {
            Err(Exhausted)
        } else {
            Ok(())
        }
    }

    fn node(&self, n: &Node, i: usize, caps: &mut Caps, k: Cont) -> Result<bool, Exhausted> {
        self.tick()?;
        let d = self.depth.get() + 1;
        if d > MAX_DEPTH {
            return Err(Exhausted);
        }
        self.depth.set(d);
        let r = self.node_inner(n, i, caps, k);
        self.depth.set(d - 1);
        r
    }

    fn node_inner(&self, n: &Node, i: usize, caps: &mut Caps, k: Cont) -> Result<bool, Exhausted> {
        let t = self.text;
        match n {
            Node::Empty => k(i, caps),
            Node::Lit(..) | Node::Any(_) | Node::Set(..) => match t.get(i) {
                Some(&c) if self.single(n, c) == Some(true) => k(i + 1, caps),
                _ => Ok(false),
            },
            Node::LineStart(multi) => {
                if i == 0 || (*multi && t[i - 1] == '\n') {
                    k(i, caps)
                } else {
                    Ok(false)
                }
            }
            Node::LineEnd(multi) => {
                let at_end = i == t.len() || (i + 1 == t.len() && t[i] == '\n');
                if at_end || (*multi && t.get(i) == Some(&'\n')) {
                    k(i, caps)
                } else {
                    Ok(false)
                }
            }
            Node::TextStart => {
                if i == 0 {
                    k(i, caps)
                } else {
                    Ok(false)
                }
            }
            Node::TextEnd => {
                if i == t.len() {
                    k(i, caps)
                } else {
                    Ok(false)
                }
            }
            // sre quirk kept for parity: \B never matches in an empty string.
            Node::WordB(false) if t.is_empty() => Ok(false),
            Node::WordB(want) => {
                let before = i > 0 && is_word(t[i - 1]);
                let after = i < t.len() && is_word(t[i]);
                if (before != after) == *want {
                    k(i, caps)
                } else {
                    Ok(false)
                }
            }
            Node::Group(inner, None) => self.node(inner, i, caps, k),
            Node::Group(inner, Some(g)) => {
                let g = *g;
                self.node(inner, i, caps, &mut |j, caps: &mut Caps| {
                    let saved = caps[g];
                    caps[g] = Some((i, j));
                    let r = k(j, caps)?;
                    if !r {
                        caps[g] = saved;
                    }
                    Ok(r)
                })
            }
            Node::Atomic(inner) => {
                let mut probe = caps.clone();
                let mut end = None;
                if !self.node(inner, i, &mut probe, &mut |j, _| {
                    end = Some(j);
                    Ok(true)
                })? {
                    return Ok(false);
                }
                match end {
                    Some(j) => k(j, &mut probe),
                    None => Ok(false),
                }
            }
            Node::Concat(items) => self.seq(items, i, caps, k),
            Node::Alt(alts) => {
                for a in alts {
                    if self.node(a, i, caps, k)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Node::Repeat { node, min, max, greedy } => {
                if matches!(**node, Node::Lit(..) | Node::Any(_) | Node::Set(..)) {
                    self.repeat_single(node, *min, *max, *greedy, i, caps, k)
                } else {
                    self.repeat(node, *min, *max, *greedy, 0, i, caps, k)
                }
            }
            Node::Look { node, behind, neg } => {
                let mut probe = caps.clone();
                let found = if *behind {
                    let mut hit = false;
                    for start in (0..=i).rev() {
                        if self.node(node, start, &mut probe, &mut |j, _| Ok(j == i))? {
                            hit = true;
                            break;
                        }
                    }
                    hit
                } else {
                    self.node(node, i, &mut probe, &mut |_, _| Ok(true))?
                };
                if found == *neg {
                    return Ok(false);
                }
                if *neg {
                    k(i, caps)
                } else {
                    k(i, &mut probe)
                }
            }
            Node::Backref(g, icase) => {
                let Some((s, e)) = caps.get(*g).copied().flatten() else {
                    return Ok(false);
                };
                let len = e - s;
                if i + len > t.len() {
                    return Ok(false);
                }
                let same = (0..len).all(|x| {
                    let (a, b) = (t[s + x], t[i + x]);
                    a == b || (*icase && fold(a) == fold(b))
                });
                if same {
                    k(i + len, caps)
                } else {
                    Ok(false)
                }
            }
        }
    }

    fn seq(&self, items: &[Node], i: usize, caps: &mut Caps, k: Cont) -> Result<bool, Exhausted> {
        match items.split_first() {
            None => k(i, caps),
            Some((first, rest)) => self.node(first, i, caps, &mut |j, caps: &mut Caps| self.seq(rest, j, caps, k)),
        }
    }

    /// A repeated single-char node: count the run once, then try continuations without
    /// recursion per character (keeps `.*` over long lines cheap and shallow).
    #[allow(clippy::too_many_arguments)]
    fn repeat_single(
        &self,
        n: &Node,
        min: u32,
        max: Option<u32>,
        greedy: bool,
        i: usize,
        caps: &mut Caps,
        k: Cont,
    ) -> Result<bool, Exhausted> {
        let limit = max.map_or(usize::MAX, |m| m as usize);
        let mut run = 0usize;
        while run < limit && i + run < self.text.len() && self.single(n, self.text[i + run]) == Some(true) {
            run += 1;
        }
        let min = min as usize;
        if run < min {
            return Ok(false);
        }
        if greedy {
            for c in (min..=run).rev() {
                self.tick()?;
                if k(i + c, caps)? {
                    return Ok(true);
                }
            }
        } else {
            for c in min..=run {
                self.tick()?;
                if k(i + c, caps)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    #[allow(clippy::too_many_arguments)]
    fn repeat(
        &self,
        n: &Node,
        min: u32,
        max: Option<u32>,
        greedy: bool,
        count: u32,
        i: usize,
        caps: &mut Caps,
        k: Cont,
    ) -> Result<bool, Exhausted> {
        let can_more = max.is_none_or(|m| count < m);
        if greedy {
            if can_more && self.repeat_once(n, min, max, greedy, count, i, caps, &mut *k)? {
                return Ok(true);
            }
            if count >= min {
                return k(i, caps);
            }
            Ok(false)
        } else {
            if count >= min && k(i, caps)? {
                return Ok(true);
            }
            if can_more {
                return self.repeat_once(n, min, max, greedy, count, i, caps, k);
            }
            Ok(false)
        }
    }

    /// One more iteration of a general repeat, then the rest of the repeat as continuation.
    #[allow(clippy::too_many_arguments)]
    fn repeat_once(
        &self,
        n: &Node,
        min: u32,
        max: Option<u32>,
        greedy: bool,
        count: u32,
        i: usize,
        caps: &mut Caps,
        k: Cont,
    ) -> Result<bool, Exhausted> {
        self.node(n, i, caps, &mut |j, caps: &mut Caps| {
            // An iteration that consumed nothing cannot make progress: keep it (its captures
            // count, as in sre) but stop looping.
            if j == i && count >= min {
                return k(j, caps);
            }
            self.repeat(n, min, max, greedy, count + 1, j, caps, &mut *k)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        Regex::new(p).unwrap().is_match(s).unwrap()
    }

    #[test]
    fn literals_classes_and_anchors() {
        assert!(m("fn main", "pub fn main() {"));
        assert!(!m("fn main", "fn  main"));
        assert!(m("^pub", "pub fn"));
        assert!(!m("^fn", "pub fn"));
        assert!(m(r"\)$", "call()"));
        assert!(m("a.c", "xabcx"));
        assert!(m("[a-c]{3}", "zzcabzz"));
        assert!(!m("[^a-z]", "abc"));
        assert!(m(r"\d+\.\d+", "version 1.25"));
        assert!(m(r"\bword\b", "a word here"));
        assert!(!m(r"\bword\b", "swordfish"));
        assert!(m(r"\s\S", " x"));
        assert!(m(r"[\w-]+@x", "a-b@x"));
        assert!(m(r"\Aab\Z", "ab"));
        assert!(m("[]a]", "]"));
        assert!(m(r"\x41\u00e9", "Aé"));
        assert!(m("a{2}", "caab"));
        assert!(m("x{", "x{"));
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
        assert!(m("foo(?=bar)", "foobar"));
        assert!(!m("foo(?!bar)", "foobar"));
        assert!(m("(?<=\\$)\\d+", "cost $42"));
        assert!(!m("(?<!\\$)\\b\\d+", "$42"));
        assert!(m(r"(\w+) \1", "hello hello"));
        assert!(!m(r"^(\w+) \1$", "hello world"));
        assert!(m(r"(?P<q>['\x22]).*(?P=q)", "say 'hi'"));
        assert!(m("(?x) a b # comment", "ab"));
    }

    #[test]
    fn invalid_patterns_are_errors() {
        for p in ["(abc", "abc)", "[a-", "*a", "a**", r"\q", "(?<n>a)(?P=m)", "[z-a]", r"\2(a)", "a{5,2}"] {
            assert!(Regex::new(p).is_err(), "{p}");
        }
    }

    #[test]
    fn pathological_patterns_exhaust_instead_of_hanging() {
        std::thread::Builder::new().stack_size(STACK_SIZE).spawn(pathological).unwrap().join().unwrap();
    }

    fn pathological() {
        let r = Regex::new("^(a+)+$").unwrap();
        let s = format!("{}b", "a".repeat(40));
        assert_eq!(r.is_match(&s), Err(Exhausted));
        // Deep recursion over a long line is bounded, not a stack overflow.
        let r = Regex::new("^(?:ab)*$").unwrap();
        assert_eq!(r.is_match(&"ab".repeat(50_000)), Err(Exhausted));
        // The fast path handles long single-char runs without recursion.
        assert!(Regex::new("^.*z$").unwrap().is_match(&format!("{}z", "x".repeat(100_000))).unwrap());
    }

    /// Arbitrary pattern text never panics the parser or the matcher.
    #[test]
    fn random_patterns_never_panic() {
        let alphabet: Vec<char> = "ab(){}[]^$.*+?|\\-,:=!<>#P0123456789dwsbBAZxuUnNié ß".chars().collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let len = (next() % 12) as usize;
            let p: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
            if let Ok(r) = Regex::new(&p) {
                for t in ["", "ab", "a{1}b", "xx(yy)", "é ß 12"] {
                    let _ = r.is_match(t);
                }
            }
        }
    }

    #[test]
    fn required_literal_prefilter() {
        let req = |p: &str| Regex::new(p).unwrap().required;
        assert_eq!(req("foo\\d+bar"), Some(("foo".into(), false)));
        assert_eq!(req("(?i)FoO"), Some(("foo".into(), true)));
        assert_eq!(req("a|b"), None);
        assert_eq!(req("x(abcd)?y"), Some(("x".into(), false)));
        let r = Regex::new("(?i)needle").unwrap();
        assert!(r.could_match("a NeEdLe b"));
        assert!(!r.could_match("needl e"));
        assert!(!Regex::new("xyz").unwrap().could_match("xy z"));
    }
}
#[cfg(test)]
mod python_parity {
    use serde_json::Value;

    /// Random patterns run through CPython 3.11 `re` (tests/fixtures/gen_python_re_cases.py):
    /// every valid one must agree on every text, every rejected one must be rejected.
    #[test]
    fn agrees_with_cpython() {
        let fixture: Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/python_re_cases.json")).expect("fixture parses");
        let mut bad = Vec::new();
        let mut checked = 0;
        for group in fixture["groups"].as_array().expect("groups") {
            let texts: Vec<&str> =
                group["texts"].as_array().expect("texts").iter().map(|t| t.as_str().expect("text")).collect();
            for case in group["cases"].as_array().expect("cases") {
                let pattern = case[0].as_str().expect("pattern");
                let mask = case[1].as_str().expect("mask").as_bytes();
                let re = match super::Regex::new(pattern) {
                    Ok(r) => r,
                    Err(e) => {
                        bad.push(format!("{pattern:?} rejected: {e}"));
                        continue;
                    }
                };
                for (t, want) in texts.iter().zip(mask) {
                    checked += 1;
                    let got = re.is_match(t).expect("small inputs stay within budget");
                    if got != (*want == b'1') {
                        bad.push(format!("{pattern:?} on {t:?}: ours {got}"));
                    }
                }
            }
        }
        for p in fixture["invalid"].as_array().expect("invalid") {
            let p = p.as_str().expect("pattern");
            if super::Regex::new(p).is_ok() {
                bad.push(format!("{p:?} accepted, CPython rejects it"));
            }
        }
        assert!(checked > 40_000);
        assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad[..bad.len().min(40)].join("\n"));
    }
}
