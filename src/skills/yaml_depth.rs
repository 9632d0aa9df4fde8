//! Bounds the nesting of SKILL.md frontmatter before serde_yaml loads it: a safe, linear pre-scan
//! of YAML's structure (block indentation, flow brackets, the implicit one-pair mappings of flow
//! sequences) that skips what is not structure (quoted, block and plain scalars, comments). Pure
//! functions; any thread.
//!
//! It follows libyaml's scanner (the one serde_yaml runs) where structure is decided, and where it
//! cannot be sure it counts a level more, never one less: a document it accepts nests at most
//! [`MAX_DEPTH`] levels as libyaml reads it. Syntax errors are left to serde_yaml.

use super::frontmatter::MAX_DEPTH;

/// How far (in bytes) a flow collection may reach and still be a simple key: libyaml allows 1,024
/// characters on one line; four bytes a character covers any UTF-8.
const KEY_WINDOW: usize = 4 * 1024;

/// The first collection opened deeper than [`MAX_DEPTH`]: its 1-based line and column (in
/// characters), as libyaml marks the event that opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooDeep {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Seq,
    /// A `- ` sequence at the column of the mapping key that holds it.
    Indentless,
}

#[derive(Debug, Clone, Copy)]
struct Block {
    /// Column (bytes from the line start) of the key or `-` that opened it.
    indent: usize,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    seq: bool,
    /// A flow sequence entry `a: b` is a one-pair mapping, a level of its own.
    pair: bool,
}

/// What the next line continues.
#[derive(Debug, Clone, Copy)]
enum Carry {
    Nothing,
    /// A quoted scalar still open (`'` or `"`).
    Quote(u8),
    /// A plain scalar that reached the end of its line. In block context it goes on on lines
    /// indented deeper than `above` (the enclosing collection's column, -1 at the top).
    Plain {
        flow: bool,
        above: isize,
    },
    /// A `|` / `>` scalar: lines indented `indent` or more (blank ones too) are its content.
    /// `indent` is found on the first line with content when not given in the header;
    /// `max_blank` is the widest all-space line before it, which libyaml counts too.
    BlockScalar {
        above: isize,
        indent: Option<usize>,
        max_blank: usize,
    },
}

struct Scan<'a> {
    max: usize,
    s: &'a [u8],
    block: Vec<Block>,
    flow: Vec<Flow>,
    pairs: usize,
    carry: Carry,
    /// Where the node being read at block level started (its anchor or tag, if any, on the same line).
    node: Option<usize>,
    /// An anchor or tag waiting for its node.
    props: Option<usize>,
    /// Block context: after `key:` on this line, so a flow collection here cannot be a key.
    value_pos: bool,
    /// Flow context: at the start of an entry (after `[`, `{` or `,`).
    entry_start: bool,
    /// Flow context: where the current entry's first token began (a one-pair mapping's mark).
    entry: Option<usize>,
}

/// Returns where `yaml` first opens a collection deeper than [`MAX_DEPTH`], if it does.
pub(crate) fn too_deep(yaml: &str) -> Option<TooDeep> {
    too_deep_than(yaml, MAX_DEPTH)
}

fn too_deep_than(yaml: &str, max: usize) -> Option<TooDeep> {
    let mut scan = Scan {
        max,
        s: yaml.as_bytes(),
        block: Vec::new(),
        flow: Vec::new(),
        pairs: 0,
        carry: Carry::Nothing,
        node: None,
        props: None,
        value_pos: false,
        entry_start: false,
        entry: None,
    };
    let mut start = 0;
    while start <= yaml.len() {
        let end = yaml[start..].find('\n').map_or(yaml.len(), |i| start + i);
        if let Err(at) = scan.line(start, end) {
            return Some(position(yaml, at));
        }
        start = end + 1;
    }
    None
}

fn position(yaml: &str, at: usize) -> TooDeep {
    let before = &yaml[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    TooDeep { line: before.matches('\n').count() + 1, column: before[line_start..].chars().count() + 1 }
}

fn blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

fn flow_indicator(c: u8) -> bool {
    matches!(c, b',' | b'[' | b']' | b'{' | b'}')
}

/// `s[i]` is followed by a blank or the end of the line.
fn blank_after(s: &[u8], i: usize, end: usize) -> bool {
    i + 1 >= end || blank(s[i + 1])
}

/// From `i` inside a plain scalar: where it stops on this line, and whether it reached the line's
/// end (then it may go on on the next). It stops before `: `, a flow indicator (in flow context)
/// and a `#` after blanks; a quote inside it is text.
fn plain(s: &[u8], mut i: usize, end: usize, flow: bool) -> (usize, bool) {
    while i < end {
        let c = s[i];
        if blank(c) {
            let mut j = i;
            while j < end && blank(s[j]) {
                j += 1;
            }
            if j == end {
                return (end, true);
            }
            if s[j] == b'#' {
                return (j, false);
            }
            i = j;
            continue;
        }
        if c == b':' && (blank_after(s, i, end) || flow && flow_indicator(s[i + 1])) {
            return (i, false);
        }
        if flow && flow_indicator(c) {
            return (i, false);
        }
        i += 1;
    }
    (end, true)
}

/// From inside a quoted scalar opened by `q`: the index after its closing quote on this line.
fn quoted(s: &[u8], mut i: usize, end: usize, q: u8) -> Option<usize> {
    while i < end {
        match s[i] {
            b'\\' if q == b'"' => i += 2,
            b'\'' if q == b'\'' && i + 1 < end && s[i + 1] == b'\'' => i += 2,
            c if c == q => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Whether the flow collection opening at `start` closes on this line, within a simple key's
/// reach, followed by `:` (so libyaml opens a mapping before it).
fn collection_is_key(s: &[u8], start: usize, end: usize) -> bool {
    let end = end.min(start + KEY_WINDOW);
    let mut depth = 0usize;
    let mut i = start;
    let mut token_start = true;
    while i < end {
        let c = s[i];
        if blank(c) {
            i += 1;
            continue;
        }
        if token_start && c == b'#' {
            return false;
        }
        match c {
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    let mut j = i + 1;
                    while j < end && blank(s[j]) {
                        j += 1;
                    }
                    return j < end && s[j] == b':';
                }
            }
            b',' | b':' | b'?' => {}
            b'\'' | b'"' if token_start => match quoted(s, i + 1, end, c) {
                Some(j) => {
                    i = j;
                    token_start = false;
                    continue;
                }
                None => return false,
            },
            _ => {
                let (j, _) = plain(s, i, end, true);
                i = j.max(i + 1);
                token_start = true;
                continue;
            }
        }
        i += 1;
        token_start = true;
    }
    // Not closed within a simple key's reach: no key.
    false
}

/// The column of `pos` on its line, `start` being the current line's start. A node that began on
/// an earlier line (its anchor, or a flow collection over lines) is no simple key for libyaml;
/// its own column keeps the count on the safe side.
fn column(s: &[u8], pos: usize, start: usize) -> usize {
    let line_start = if pos >= start { start } else { s[..pos].iter().rposition(|&c| c == b'\n').map_or(0, |n| n + 1) };
    pos - line_start
}

impl Scan<'_> {
    fn depth(&self) -> usize {
        self.block.len() + self.flow.len() + self.pairs
    }

    /// Errs with the mark when the level just opened is one too many.
    fn check(&self, mark: usize) -> Result<(), usize> {
        if self.depth() > self.max {
            Err(mark)
        } else {
            Ok(())
        }
    }

    fn above(&self) -> isize {
        self.block.last().map_or(-1, |b| b.indent as isize)
    }

    fn line(&mut self, start: usize, end: usize) -> Result<(), usize> {
        let s = self.s;
        let spaces = s[start..end].iter().take_while(|&&c| c == b' ').count();
        let all_blank = s[start..end].iter().all(|&c| blank(c));
        let mut i = start;
        match self.carry {
            Carry::Nothing => {}
            Carry::Quote(q) => match quoted(s, start, end, q) {
                Some(j) => {
                    self.carry = Carry::Nothing;
                    i = j;
                }
                None => return Ok(()),
            },
            Carry::BlockScalar { above, indent, max_blank } => {
                if all_blank && !s[start..end].contains(&b'\t') {
                    if indent.is_none() {
                        self.carry = Carry::BlockScalar { above, indent, max_blank: max_blank.max(end - start) };
                    }
                    return Ok(());
                }
                let need = indent.unwrap_or_else(|| max_blank.max(spaces).max((above + 1).max(1) as usize));
                if spaces >= need {
                    self.carry = Carry::BlockScalar { above, indent: Some(need), max_blank };
                    return Ok(());
                }
                self.carry = Carry::Nothing;
            }
            Carry::Plain { flow, above } => {
                if all_blank {
                    return Ok(());
                }
                let first = start + s[start..end].iter().take_while(|&&c| blank(c)).count();
                self.carry = Carry::Nothing;
                if s[first] == b'#' {
                    return Ok(());
                }
                if flow || (first - start) as isize > above {
                    let (j, eol) = plain(s, first, end, flow);
                    if eol {
                        self.carry = Carry::Plain { flow, above };
                        return Ok(());
                    }
                    i = j;
                }
            }
        }
        if i == start && self.flow.is_empty() {
            if all_blank || s[start + spaces] == b'#' {
                return Ok(());
            }
            // A token at a column closes every block collection opened right of it.
            while self.block.last().is_some_and(|b| b.indent > spaces) {
                self.block.pop();
            }
            self.node = None;
            self.value_pos = false;
        }
        self.tokens(i, start, end)
    }

    fn tokens(&mut self, mut i: usize, start: usize, end: usize) -> Result<(), usize> {
        let s = self.s;
        while i < end {
            let c = s[i];
            if blank(c) {
                i += 1;
                continue;
            }
            if c == b'#' {
                return Ok(());
            }
            if !self.flow.is_empty() {
                i = self.flow_token(i, end)?;
                continue;
            }
            let col = i - start;
            match c {
                b'-' if blank_after(s, i, end) => {
                    let mark = self.props.take().unwrap_or(i);
                    match self.block.last() {
                        Some(b) if b.indent == col && b.kind != Kind::Map => {}
                        Some(b) if b.indent == col => {
                            self.block.push(Block { indent: col, kind: Kind::Indentless });
                            self.check(mark)?;
                        }
                        _ => {
                            self.block.push(Block { indent: col, kind: Kind::Seq });
                            self.check(mark)?;
                        }
                    }
                    self.node = None;
                    self.value_pos = false;
                    i += 1;
                }
                b'?' if blank_after(s, i, end) => {
                    self.mapping(col, i)?;
                    self.node = None;
                    self.value_pos = false;
                    i += 1;
                }
                b':' if blank_after(s, i, end) => {
                    let key = self.node.take().unwrap_or(i);
                    self.mapping(column(s, key, start), key)?;
                    self.value_pos = true;
                    i += 1;
                }
                b'[' | b'{' => {
                    let at = self.props.take().unwrap_or(i);
                    if !self.value_pos && collection_is_key(s, i, end) {
                        self.mapping(column(s, at, start), at)?;
                    }
                    self.node.get_or_insert(at);
                    self.open(c == b'[', at)?;
                    i += 1;
                }
                b'|' | b'>' => {
                    let header = s[i + 1..end].iter().take_while(|&&h| matches!(h, b'+' | b'-' | b'1'..=b'9'));
                    let step = header.filter(|h| h.is_ascii_digit()).last().map(|d| (d - b'0') as usize);
                    let above = self.above();
                    let indent = step.map(|d| above.max(0) as usize + d);
                    self.props = None;
                    self.carry = Carry::BlockScalar { above, indent, max_blank: 0 };
                    return Ok(());
                }
                b'\'' | b'"' => {
                    self.node.get_or_insert(self.props.take().unwrap_or(i));
                    match quoted(s, i + 1, end, c) {
                        Some(j) => i = j,
                        None => {
                            self.carry = Carry::Quote(c);
                            return Ok(());
                        }
                    }
                }
                b'&' | b'!' => {
                    self.props.get_or_insert(i);
                    self.node.get_or_insert(i);
                    i = name_end(s, i, end);
                }
                b'*' => {
                    self.node.get_or_insert(self.props.take().unwrap_or(i));
                    i = name_end(s, i, end);
                }
                b']' | b'}' | b',' => i += 1,
                _ => {
                    self.node.get_or_insert(self.props.take().unwrap_or(i));
                    let (j, eol) = plain(s, i, end, false);
                    if eol {
                        self.carry = Carry::Plain { flow: false, above: self.above() };
                    }
                    i = j.max(i + 1);
                }
            }
        }
        Ok(())
    }

    /// One token in flow context at `s[i]` (not blank, not a comment); returns the next index.
    fn flow_token(&mut self, i: usize, end: usize) -> Result<usize, usize> {
        let s = self.s;
        let c = s[i];
        if self.entry_start && !matches!(c, b']' | b'}' | b',' | b':' | b'?') {
            self.entry.get_or_insert(i);
        }
        match c {
            b'[' | b'{' => {
                let at = self.props.take().unwrap_or(i);
                let in_seq = self.flow.last().is_some_and(|f| f.seq && !f.pair);
                if in_seq && self.entry_start && collection_is_key(s, i, end) {
                    self.open_pair(at)?;
                }
                self.open(c == b'[', at)?;
                Ok(i + 1)
            }
            b']' | b'}' => {
                if let Some(f) = self.flow.pop() {
                    if f.pair {
                        self.pairs -= 1;
                    }
                }
                self.entry_start = false;
                Ok(i + 1)
            }
            b',' => {
                if let Some(f) = self.flow.last_mut() {
                    if f.pair {
                        f.pair = false;
                        self.pairs -= 1;
                    }
                }
                self.entry_start = true;
                self.entry = None;
                Ok(i + 1)
            }
            // In flow context `:` and `?` are indicators wherever a token starts.
            b':' | b'?' => {
                if self.flow.last().is_some_and(|f| f.seq && !f.pair) {
                    self.open_pair(self.entry.unwrap_or(i))?;
                }
                self.entry_start = false;
                Ok(i + 1)
            }
            b'\'' | b'"' => {
                self.props = None;
                self.entry_start = false;
                match quoted(s, i + 1, end, c) {
                    Some(j) => Ok(j),
                    None => {
                        self.carry = Carry::Quote(c);
                        Ok(end)
                    }
                }
            }
            b'&' | b'!' => {
                self.props.get_or_insert(i);
                Ok(name_end(s, i, end))
            }
            _ => {
                self.props = None;
                self.entry_start = false;
                let (j, eol) = plain(s, i, end, true);
                if eol {
                    self.carry = Carry::Plain { flow: true, above: -1 };
                }
                Ok(j.max(i + 1))
            }
        }
    }

    fn open(&mut self, seq: bool, mark: usize) -> Result<(), usize> {
        self.flow.push(Flow { seq, pair: false });
        self.entry_start = true;
        self.entry = None;
        self.check(mark)
    }

    fn open_pair(&mut self, mark: usize) -> Result<(), usize> {
        if let Some(f) = self.flow.last_mut() {
            f.pair = true;
            self.pairs += 1;
        }
        self.check(mark)
    }

    /// A block mapping key at `col`: the mapping there, opened unless it already is.
    fn mapping(&mut self, col: usize, mark: usize) -> Result<(), usize> {
        if self.block.last().is_some_and(|b| b.kind == Kind::Indentless && b.indent == col) {
            self.block.pop();
        }
        match self.block.last() {
            Some(b) if b.indent == col && b.kind == Kind::Map => Ok(()),
            _ => {
                self.block.push(Block { indent: col, kind: Kind::Map });
                self.check(mark)
            }
        }
    }
}

/// The end of an anchor, alias or tag name starting at `i`; a verbatim tag `!<…>` may hold commas.
fn name_end(s: &[u8], i: usize, end: usize) -> usize {
    if s[i] == b'!' && s.get(i + 1) == Some(&b'<') {
        if let Some(close) = s[i..end].iter().position(|&c| c == b'>') {
            return i + close + 1;
        }
    }
    i + 1 + s[i + 1..end].iter().take_while(|&&c| !blank(c) && !flow_indicator(c)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_yaml::Value;

    fn depth(v: &Value) -> usize {
        match v {
            Value::Sequence(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Mapping(m) => 1 + m.iter().map(|(k, v)| depth(k).max(depth(v))).max().unwrap_or(0),
            Value::Tagged(t) => depth(&t.value),
            _ => 0,
        }
    }

    fn deep(yaml: &str) -> bool {
        too_deep(yaml).is_some()
    }

    /// `n` levels in all, counting the top-level mapping.
    fn levels(yaml: &str) -> usize {
        (1..=200).find(|&max| too_deep_than(yaml, max).is_none()).expect("under 200 levels")
    }

    #[test]
    fn counts_what_libyaml_nests() {
        // Flow, block, indentless, compact and mixed, each as serde_yaml reads it.
        let cases = [
            "a: [[[1]]]",
            "a: {b: {c: [1, {d: 2}]}}",
            "a:\n  b:\n    c:\n    - - x\n      - y\n    - z: [1]",
            "a:\n- b: 1\n  c:\n  - d",
            "a: [b: [c: 1]]",
            "a: [[x]: 1, ? y : [2]]",
            "[[x]]: 1",
            "? [a, [b]]\n: {c: d}",
            "a: &x [[1]]\nb: *x",
            "a: !!seq [[1]]\nb: !t {c: [d]}",
            "a: \"[[[{\"\nb: '[[ it''s ]]'\nc: [ '[[', \"]]\" ] # [[[\n",
            "a: |\n  [[[[\n  - - -\nb: >2\n   {{{{\n  x\nc: [1]",
            "a: plain [[ text\n  more {{ 'quoted\nb: [x]",
            "a: [plain\n  'still plain', [1]]",
        ];
        for yaml in cases {
            let v: Value = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
            assert_eq!(levels(yaml), depth(&v), "{yaml}");
        }
    }

    #[test]
    fn hostile_nesting_is_refused_and_linear() {
        let n = 39_000;
        let started = std::time::Instant::now();
        for yaml in [
            format!("a: {}", "[".repeat(n)),
            format!("a: {}", "{a: ".repeat(n)),
            format!("a: {}1", "[a: ".repeat(n)),
            (0..n / 100).map(|i| format!("{}k:\n", " ".repeat(i))).collect(),
            format!("a:\n{}", "- ".repeat(n)),
            (0..n / 100).map(|i| format!("{}- [k:\n", "  ".repeat(i))).collect(),
            format!("a: &x {}", "[&y ".repeat(n)),
            format!("a: {}", "[ # c\n".repeat(n)),
        ] {
            assert!(deep(&yaml), "{}", &yaml[..40]);
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "took {:?}", started.elapsed());
        // 16 flow sequences each holding a one-pair mapping: 1 + 32 levels.
        assert_eq!(too_deep(&format!("a: {}1", "[a: ".repeat(16))), Some(TooDeep { line: 1, column: 4 + 15 * 4 + 1 }));
        assert!(!deep(&format!("a: {}1", "[a: ".repeat(15))));
    }

    /// What looks like structure inside scalars and comments does not count; what a quote
    /// inside a plain scalar would hide does.
    #[test]
    fn scalars_and_comments_hide_nothing() {
        let open = "[".repeat(200);
        for yaml in [
            format!("a: \"{open}\\\" {open}\""),
            format!("a: '{open}'' {open}'"),
            format!("a: b # {open}"),
            format!("# {open}\na: b"),
            format!("a: |\n  {open}\n\n  {open}\nb: c"),
            format!("a: >-\n    {open}\n  # not a comment {open}"),
            format!("a: plain {open}\n  {open}"),
            format!("a: [\"{open}\", '{open}', x # {open}\n  ]"),
            format!("a: \"multi\n  line {open}\"\nb: c"),
            format!("a: [*x, &y z] # {open}"),
        ] {
            assert!(!deep(&yaml), "{yaml}");
        }
        let flow = format!("{}{}", "[".repeat(40), "]".repeat(40));
        for yaml in [
            // A quote in a plain scalar is text; the line after it is structure.
            format!("a: don't\nb: {flow}\nc: '"),
            // A plain scalar goes on on a deeper line, even one starting with a quote...
            format!("a: plain\n  'x\nb: {flow}\nc: '"),
            // ... and in flow context.
            format!("a: [x\n'\n{flow}\n']"),
            // An all-space line wider than the content ends a block scalar for libyaml.
            format!("a: |\n          \n  {flow}"),
            // A block scalar ends at the first line indented no deeper than its parent.
            format!("a: |\n  text\nb: {flow}"),
            format!("- a: |\n    x\n  b: {flow}"),
            // Comments end at the line; a `#` inside a plain scalar is text.
            format!("a: [b#c {flow}]"),
            // Anchors, tags (verbatim ones hold commas) and aliases are no scalars.
            format!("a: &x !t {flow}"),
            format!("a: [k: !<a,b> {flow}]"),
        ] {
            assert!(deep(&yaml), "{yaml}");
        }
    }

    #[test]
    fn real_skill_frontmatter_passes() {
        let yaml = "name: weather\ndisplay_name: \"Weather: forecasts\"\ndescription: >-\n  Fetches the forecast [from\n  wttr.in] for a city; don't guess.\nversion: 3\nalways: no\ntags: [web, 'weather: daily']\ntriggers:\n  - weather in {city}\n  - \"forecast # tomorrow\"\nrequires:\n  tools: [web_fetch]\n  bins:\n    - curl # optional\noptional:\n  env: [WTTR_KEY]\nmetadata: {a: [1, {b: [2]}]}\n";
        let v: Value = serde_yaml::from_str(yaml).expect("valid");
        assert_eq!(levels(yaml), depth(&v));
        assert!(!deep(yaml));
    }

    /// Random documents from YAML's structural pieces: whenever the scan accepts one at a small
    /// bound and serde_yaml loads it, it nests no deeper than the bound.
    #[test]
    fn never_counts_less_than_serde_yaml_nests() {
        const PIECES: [&str; 26] = [
            "\n", "\n", "  ", " ", "- ", "k: ", "k:", "? ", ": ", "[", "]", "{", "}", ", ", "'q'", "\"d\"", "'", "\"",
            " # c", "|\n", ">2\n", "&a ", "!t ", "w", "x y", "\n  ",
        ];
        let mut rng = crate::util::prng::Prng::new(0x9E37_79B9_7F4A_7C15);
        let mut next = |n: usize| rng.below(n);
        let mut checked = 0;
        for _ in 0..20_000 {
            let len = 1 + next(40);
            let yaml: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
            let max = 1 + next(4);
            if too_deep_than(&yaml, max).is_some() {
                continue;
            }
            if let Ok(v) = serde_yaml::from_str::<Value>(&yaml) {
                assert!(depth(&v) <= max, "{yaml:?} nests {} > {max}", depth(&v));
                checked += 1;
            }
        }
        assert!(checked > 1_000, "only {checked} documents loaded");
    }
}
