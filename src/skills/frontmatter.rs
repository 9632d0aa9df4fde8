//! SKILL.md parsing: newline normalisation, the `---` frontmatter split, field-by-field
//! validation with the contract's exact messages (docs/skills.md §2, docs/storage.md §7) and the content
//! hash. Pure functions; any thread.

use serde_yaml::Value;

use super::{validate_name, Result, SkillError, MAX_SKILL_MD_BYTES};
use crate::util::hash::sha256_hex;

/// Deepest frontmatter accepted: mappings and sequences, block or flow, counting the top-level
/// mapping. The contract's own fields nest 3 levels (`requires`, `tools`, the items). Deeper
/// nesting is refused before serde_yaml sees it: libyaml's scanner takes time quadratic in the
/// flow depth (39,000 levels in 78 KB: 8.5 s in a release build) before serde_yaml's own limit
/// of 128 levels applies, and serde_yaml's recursion needs ~4 KiB of stack a level in a debug
/// build (~490 KiB at its limit; 32 levels: ~140 KiB, within every thread that parses skills).
pub(crate) const MAX_DEPTH: usize = 32;

/// Dependency lists of `requires` / `optional`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Deps {
    pub(crate) tools: Vec<String>,
    pub(crate) mcp_servers: Vec<String>,
    pub(crate) bins: Vec<String>,
    pub(crate) env: Vec<String>,
}

/// A validated SKILL.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub(crate) name: String,
    /// `None` when absent; the UI label falls back to `name`.
    pub(crate) display_name: Option<String>,
    pub(crate) description: String,
    pub(crate) version: u64,
    pub(crate) always: bool,
    pub(crate) tags: Vec<String>,
    pub(crate) triggers: Vec<String>,
    pub(crate) requires: Deps,
    pub(crate) optional: Deps,
    /// Markdown after the frontmatter, trimmed, non-empty.
    pub(crate) body: String,
}

impl Manifest {
    pub(crate) fn label(&self) -> &str {
        self.display_name.as_deref().unwrap_or(&self.name)
    }
}

/// A parsed SKILL.md with its normalised text and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) manifest: Manifest,
    /// The text with CRLF / lone CR turned into LF (what the hash covers).
    pub(crate) text: String,
    /// Lowercase hex SHA-256 of `text`.
    pub(crate) hash: String,
}

/// CRLF and lone CR become LF (Python universal newlines).
pub(crate) fn normalize_newlines(s: &str) -> String {
    if !s.contains('\r') {
        return s.to_string();
    }
    s.replace("\r\n", "\n").replace('\r', "\n")
}

/// Python's `str.isspace` set (Rust's `is_whitespace` lacks the 0x1C–0x1F separators).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Splits normalised text like the original's `\A---\s*\r?\n(.*?)\r?\n---\s*\r?\n?` (DOTALL):
/// returns `(yaml, rest)`, or `None` when the text does not start with frontmatter.
fn split(text: &str) -> Option<(&str, &str)> {
    let after = text.strip_prefix("---")?;
    let run_len: usize = after.chars().take_while(|c| py_space(*c)).map(char::len_utf8).sum();
    let run = &after[..run_len];
    // Greedy `\s*` backtracks from the last newline of the whitespace run to the first.
    let starts: Vec<usize> = run.char_indices().filter(|(_, c)| *c == '\n').map(|(i, _)| 3 + i + 1).collect();
    for &start in starts.iter().rev() {
        if let Some(p) = find_closing(text, start) {
            return Some((&text[start..p], &text[p + 4..]));
        }
    }
    None
}

/// First `p >= start` with `text[p..]` starting `"\n---"` (the lazy group may be empty); the
/// closing `\s*\r?\n?` always matches, so the first such `p` wins.
fn find_closing(text: &str, start: usize) -> Option<usize> {
    text[start..].find("\n---").map(|i| start + i)
}

/// Parses and validates a SKILL.md. `expected` is the package directory name, when known.
pub(crate) fn parse(raw: &str, expected: Option<&str>) -> Result<Parsed> {
    let text = normalize_newlines(raw);
    if text.trim_matches(py_space).is_empty() {
        return Err(SkillError::invalid("SKILL.md cannot be empty"));
    }
    if text.len() > MAX_SKILL_MD_BYTES {
        return Err(SkillError::invalid("SKILL.md is too large"));
    }
    let (yaml, rest) = split(&text).ok_or_else(|| SkillError::invalid("SKILL.md must start with YAML frontmatter"))?;
    check_depth(yaml)?;
    let value: Value = serde_yaml::from_str(yaml).map_err(|e| {
        SkillError::invalid(format!("invalid YAML frontmatter: {}", crate::util::text::take_chars(&e.to_string(), 200)))
    })?;
    let Value::Mapping(map) = value else {
        return Err(SkillError::invalid("frontmatter must be a mapping"));
    };
    let get = |k: &str| -> Option<Value> { map.get(k).map(|v| yaml11_scalar(yaml, k, v.clone())) };

    let (Some(Value::String(name)), Some(Value::String(description))) = (get("name"), get("description")) else {
        return Err(SkillError::invalid("name and description must be strings"));
    };
    let name = validate_name(&name)?;
    if let Some(exp) = expected {
        if name != exp {
            return Err(SkillError::invalid("frontmatter name must match the package directory"));
        }
    }
    let description = description.trim_matches(py_space).to_string();
    if description.is_empty() {
        return Err(SkillError::invalid("description cannot be empty"));
    }
    let display_name = match get("display_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(check_display_name(&s)?),
        Some(_) => return Err(SkillError::invalid("display_name must be a string")),
    };
    let version = match get("version") {
        None | Some(Value::Null) => 1,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if v >= 1 => v,
            _ => return Err(SkillError::invalid("version must be a positive integer")),
        },
        Some(_) => return Err(SkillError::invalid("version must be a positive integer")),
    };
    let always = match get("always") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err(SkillError::invalid("always must be a boolean")),
    };
    let tags = string_list(get("tags"), "tags")?;
    let triggers = string_list(get("triggers"), "triggers")?;
    let requires = deps(get("requires"), "requires")?;
    let optional = deps(get("optional"), "optional")?;
    let body = rest.trim_matches(py_space).to_string();
    if body.is_empty() {
        return Err(SkillError::invalid("SKILL.md body cannot be empty"));
    }
    let hash = sha256_hex(text.as_bytes());
    Ok(Parsed {
        manifest: Manifest {
            name,
            display_name,
            description,
            version,
            always,
            tags,
            triggers,
            requires,
            optional,
            body,
        },
        text,
        hash,
    })
}

/// Refuses `yaml` when it opens a collection deeper than [`MAX_DEPTH`], before serde_yaml (and
/// libyaml's scanner, whose cost grows with the depth) sees it; see [`super::yaml_depth`]. Syntax
/// errors are left to serde_yaml, which reports them with their position.
fn check_depth(yaml: &str) -> Result<()> {
    match super::yaml_depth::too_deep(yaml) {
        None => Ok(()),
        Some(at) => Err(SkillError::invalid(format!(
            "invalid YAML frontmatter: nesting deeper than {MAX_DEPTH} levels at line {} column {}",
            at.line, at.column
        ))),
    }
}

/// The body of a SKILL.md without validating it (for previews of a package already read).
#[cfg(test)]
pub(crate) fn body_of(text: &str) -> Option<String> {
    let text = normalize_newlines(text);
    split(&text).map(|(_, rest)| rest.trim_matches(py_space).to_string())
}

fn check_display_name(s: &str) -> Result<String> {
    let t = s.trim_matches(py_space);
    if t.is_empty() {
        return Err(SkillError::invalid("display_name cannot be empty"));
    }
    if t.chars().count() > 80 {
        return Err(SkillError::invalid("display_name must be at most 80 characters"));
    }
    if t.chars().any(is_other_category) {
        return Err(SkillError::invalid("display_name cannot contain control characters"));
    }
    Ok(t.to_string())
}

/// Unicode general category C* as far as we can tell without tables: controls (Cc), the
/// format characters (Cf), private use (Co) and the noncharacters (a part of Cn).
/// Surrogates (Cs) cannot occur in a Rust string.
fn is_other_category(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || matches!(u,
            0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
            | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
            | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F)
        || (0xE000..=0xF8FF).contains(&u)
        || (0xF0000..=0x10FFFF).contains(&u) && (u & 0xFFFF) <= 0xFFFD
        || (0xFDD0..=0xFDEF).contains(&u)
        || (u & 0xFFFE) == 0xFFFE
}

fn string_list(v: Option<Value>, field: &str) -> Result<Vec<String>> {
    let err = || SkillError::invalid(format!("{field} must be a list of non-empty strings"));
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(s) if !s.trim_matches(py_space).is_empty() => Ok(s.trim_matches(py_space).to_string()),
                _ => Err(err()),
            })
            .collect(),
        Some(_) => Err(err()),
    }
}

fn deps(v: Option<Value>, field: &str) -> Result<Deps> {
    let map = match v {
        None | Some(Value::Null) => return Ok(Deps::default()),
        Some(Value::Mapping(m)) => m,
        Some(_) => return Err(SkillError::invalid(format!("{field} must be a mapping"))),
    };
    let list = |k: &str| string_list(map.get(k).cloned(), &format!("{field}.{k}"));
    Ok(Deps { tools: list("tools")?, mcp_servers: list("mcp_servers")?, bins: list("bins")?, env: list("env")? })
}

/// YAML 1.1 compatibility for top-level plain scalars (the original parsed with PyYAML):
/// an unquoted `yes`/`no`/`on`/`off` is a boolean and an unquoted date is not a string.
/// serde_yaml (YAML 1.2) reads both as strings, so the raw line decides.
fn yaml11_scalar(yaml: &str, key: &str, v: Value) -> Value {
    let Value::String(s) = &v else { return v };
    let plain = yaml.lines().any(|line| {
        line.strip_prefix(key)
            .and_then(|r| r.strip_prefix(':'))
            .map(|r| {
                let raw = r.split(" #").next().unwrap_or("").trim();
                raw == s.as_str()
            })
            .unwrap_or(false)
    });
    if !plain {
        return v;
    }
    match s.as_str() {
        "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Value::Bool(true),
        "no" | "No" | "NO" | "off" | "Off" | "OFF" => Value::Bool(false),
        // Any non-string stand-in works: every field that could hold a date rejects numbers.
        _ if is_yaml11_date(s) => Value::Number(0.into()),
        _ => v,
    }
}

/// `YYYY-MM-DD` (PyYAML's timestamp resolver also takes times; the date prefix decides).
fn is_yaml11_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 8 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && {
        let rest = &s[5..];
        let mut parts = rest.splitn(2, '-');
        let m = parts.next().unwrap_or("");
        let d: String = parts.next().unwrap_or("").chars().take_while(char::is_ascii_digit).collect();
        (1..=2).contains(&m.len()) && m.bytes().all(|c| c.is_ascii_digit()) && (1..=2).contains(&d.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(fm: &str, body: &str) -> String {
        format!("---\n{fm}\n---\n{body}")
    }

    fn err(raw: &str, expected: Option<&str>) -> String {
        parse(raw, expected).unwrap_err().message().to_string()
    }

    #[test]
    fn parses_full_manifest() {
        let raw = md(
            "name: web\ndisplay_name: \" 网页 \"\ndescription: Fetch pages\nversion: 3\nalways: true\n\
             tags: [a, ' b ']\ntriggers:\n  - fetch\nrequires:\n  tools: [web_fetch]\n  bins: [curl]\n  other: 1\n\
             optional:\n  mcp_servers: [x]\nunknown: 5",
            "\n\n# Body\n\ntext\n",
        );
        let p = parse(&raw, Some("web")).unwrap();
        let m = &p.manifest;
        assert_eq!(m.name, "web");
        assert_eq!(m.display_name.as_deref(), Some("网页"));
        assert_eq!(m.description, "Fetch pages");
        assert_eq!(m.version, 3);
        assert!(m.always);
        assert_eq!(m.tags, vec!["a", "b"]);
        assert_eq!(m.triggers, vec!["fetch"]);
        assert_eq!(m.requires.tools, vec!["web_fetch"]);
        assert_eq!(m.requires.bins, vec!["curl"]);
        assert_eq!(m.optional.mcp_servers, vec!["x"]);
        assert_eq!(m.body, "# Body\n\ntext");
        assert_eq!(p.hash, sha256_hex(raw.as_bytes()));
        assert_eq!(m.label(), "网页");
    }

    #[test]
    fn defaults_when_optional_fields_absent() {
        let p = parse(&md("name: a\ndescription: d", "b"), None).unwrap();
        assert_eq!(p.manifest.version, 1);
        assert!(!p.manifest.always);
        assert!(p.manifest.tags.is_empty());
        assert_eq!(p.manifest.display_name, None);
        assert_eq!(p.manifest.label(), "a");
        let p = parse(&md("name: a\ndescription: d\ndisplay_name: null\ntags: null", "b"), None).unwrap();
        assert_eq!(p.manifest.display_name, None);
    }

    #[test]
    fn crlf_is_normalised_before_hashing() {
        let lf = md("name: a\ndescription: d", "body\n");
        let crlf = lf.replace('\n', "\r\n");
        let cr = lf.replace('\n', "\r");
        let a = parse(&lf, None).unwrap();
        assert_eq!(parse(&crlf, None).unwrap().hash, a.hash);
        assert_eq!(parse(&cr, None).unwrap().hash, a.hash);
        assert_eq!(parse(&crlf, None).unwrap().text, lf);
    }

    #[test]
    fn whole_file_rules() {
        assert_eq!(err("", None), "SKILL.md cannot be empty");
        assert_eq!(err(" \n\t", None), "SKILL.md cannot be empty");
        let big = md("name: a\ndescription: d", &"x".repeat(MAX_SKILL_MD_BYTES));
        assert_eq!(err(&big, None), "SKILL.md is too large");
        let exact = {
            let head = md("name: a\ndescription: d", "");
            md("name: a\ndescription: d", &"x".repeat(MAX_SKILL_MD_BYTES - head.len()))
        };
        assert_eq!(exact.len(), MAX_SKILL_MD_BYTES);
        assert!(parse(&exact, None).is_ok());
        let start = "SKILL.md must start with YAML frontmatter";
        assert_eq!(err("name: a\n", None), start);
        assert_eq!(err("\u{feff}---\nname: a\ndescription: d\n---\nb", None), start);
        assert_eq!(err(" ---\nname: a\n---\nb", None), start);
        assert_eq!(err("---\nname: a\ndescription: d\nbody", None), start);
        assert_eq!(err("---name: a\n---\nb", None), start);
        // Trailing spaces after the delimiters are allowed.
        assert!(parse("---  \nname: a\ndescription: d\n---  \nbody", None).is_ok());
        assert_eq!(err("---\n- a\n- b\n---\nbody", None), "frontmatter must be a mapping");
        assert_eq!(err("---\n\n---\nbody", None), "frontmatter must be a mapping");
        assert!(err("---\nname: [a\n---\nbody", None).starts_with("invalid YAML frontmatter: "));
        assert_eq!(err(&md("name: a\ndescription: d", " \n\t "), None), "SKILL.md body cannot be empty");
    }

    #[test]
    fn name_and_description_rules() {
        let strings = "name and description must be strings";
        assert_eq!(err(&md("description: d", "b"), None), strings);
        assert_eq!(err(&md("name: a", "b"), None), strings);
        assert_eq!(err(&md("name: 5\ndescription: d", "b"), None), strings);
        assert_eq!(err(&md("name: a\ndescription: [d]", "b"), None), strings);
        // YAML 1.1: unquoted yes is a boolean, an unquoted date is not a string.
        assert_eq!(err(&md("name: yes\ndescription: d", "b"), None), strings);
        assert_eq!(err(&md("name: a\ndescription: 2024-01-02", "b"), None), strings);
        assert!(parse(&md("name: \"yes\"\ndescription: '2024-01-02'", "b"), None).is_ok());
        assert_eq!(err(&md("name: Bad\ndescription: d", "b"), None), super::super::INVALID_NAME);
        assert_eq!(err(&md("name: a b\ndescription: d", "b"), None), super::super::INVALID_NAME);
        assert_eq!(
            err(&md("name: a\ndescription: d", "b"), Some("other")),
            "frontmatter name must match the package directory"
        );
        assert!(parse(&md("name: '  a '\ndescription: d", "b"), Some("a")).is_ok());
        assert_eq!(err(&md("name: a\ndescription: '  '", "b"), None), "description cannot be empty");
    }

    #[test]
    fn display_name_rules() {
        let e = |v: &str| err(&md(&format!("name: a\ndescription: d\ndisplay_name: {v}"), "b"), None);
        assert_eq!(e("5"), "display_name must be a string");
        assert_eq!(e("[x]"), "display_name must be a string");
        assert_eq!(e("'  '"), "display_name cannot be empty");
        assert_eq!(e(&"x".repeat(81)), "display_name must be at most 80 characters");
        assert!(parse(&md(&format!("name: a\ndescription: d\ndisplay_name: {}", "字".repeat(80)), "b"), None).is_ok());
        assert_eq!(e("\"a\\u0007b\""), "display_name cannot contain control characters");
        assert_eq!(e("\"a\\u200bb\""), "display_name cannot contain control characters");
        assert_eq!(e("\"a\\ue000b\""), "display_name cannot contain control characters");
    }

    #[test]
    fn version_always_lists_and_deps() {
        let e = |v: &str| err(&md(&format!("name: a\ndescription: d\n{v}"), "b"), None);
        let version = "version must be a positive integer";
        assert_eq!(e("version: 0"), version);
        assert_eq!(e("version: -1"), version);
        assert_eq!(e("version: 1.5"), version);
        assert_eq!(e("version: true"), version);
        assert_eq!(e("version: '2'"), version);
        assert_eq!(e("always: 1"), "always must be a boolean");
        assert_eq!(e("always: 'true'"), "always must be a boolean");
        assert!(parse(&md("name: a\ndescription: d\nalways: yes", "b"), None).unwrap().manifest.always);
        assert_eq!(e("tags: a"), "tags must be a list of non-empty strings");
        assert_eq!(e("tags: ['']"), "tags must be a list of non-empty strings");
        assert_eq!(e("tags: [1]"), "tags must be a list of non-empty strings");
        assert_eq!(e("triggers: [' ']"), "triggers must be a list of non-empty strings");
        assert_eq!(e("requires: [x]"), "requires must be a mapping");
        assert_eq!(e("optional: x"), "optional must be a mapping");
        assert_eq!(e("requires:\n  tools: x"), "requires.tools must be a list of non-empty strings");
        assert_eq!(e("requires:\n  mcp_servers: [1]"), "requires.mcp_servers must be a list of non-empty strings");
        assert_eq!(e("requires:\n  bins: ['']"), "requires.bins must be a list of non-empty strings");
        assert_eq!(e("optional:\n  env: {a: 1}"), "optional.env must be a list of non-empty strings");
    }

    /// `x:` holding `n` nested flow sequences, in an otherwise valid SKILL.md: `n + 1` levels.
    fn flow(n: usize) -> String {
        md(&format!("name: a\ndescription: d\nx: {}{}", "[".repeat(n), "]".repeat(n)), "b")
    }

    #[test]
    fn nesting_is_bounded_before_yaml_parsing() {
        let at = |line: usize, column: usize| {
            format!("invalid YAML frontmatter: nesting deeper than 32 levels at line {line} column {column}")
        };
        let too_deep = |fm: &str| err(&md(&format!("name: a\ndescription: d\n{fm}"), "b"), None);
        // The top-level mapping is the first level, so the 32nd bracket is one too many.
        assert!(parse(&flow(MAX_DEPTH - 1), None).is_ok());
        assert_eq!(err(&flow(MAX_DEPTH), None), at(3, "x: ".len() + MAX_DEPTH));
        // The hostile row: 39,000 levels in 78 KB, within the size limit (libyaml alone: 8.5 s
        // in a release build). Refused at the first level too deep.
        let started = std::time::Instant::now();
        assert_eq!(err(&flow(39_000), None), at(3, "x: ".len() + MAX_DEPTH));
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "took {:?}", started.elapsed());
        // Unclosed, flow mappings, block mappings and block sequences count alike.
        assert_eq!(too_deep(&format!("x: {}", "[".repeat(39_000))), at(3, "x: ".len() + MAX_DEPTH));
        assert_eq!(
            too_deep(&format!("x: {}1{}", "{a: ".repeat(MAX_DEPTH), "}".repeat(MAX_DEPTH))),
            at(3, "x: ".len() + "{a: ".len() * (MAX_DEPTH - 1) + 1)
        );
        // k0 … k31 indented one more each: `v` beside k31 is level 32, below it level 33.
        let block: String = (0..MAX_DEPTH).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert!(parse(&md(&format!("name: a\ndescription: d\n{block}{}v: 1", " ".repeat(MAX_DEPTH - 1)), "b"), None)
            .is_ok());
        assert_eq!(too_deep(&format!("{block}{}v: 1", " ".repeat(MAX_DEPTH))), at(3 + MAX_DEPTH, MAX_DEPTH + 1));
        assert_eq!(too_deep(&format!("x:\n{}v", "- ".repeat(MAX_DEPTH))), at(4, 2 * (MAX_DEPTH - 1) + 1));
        // Sequences written without indentation under a key count too: each line adds a
        // sequence and a mapping, so `k15` (line 19) opens level 33.
        let indentless: String = (0..MAX_DEPTH).map(|i| format!("{}- k{i}:\n", "  ".repeat(i))).collect();
        assert_eq!(too_deep(&format!("x:\n{indentless}")), at(4 + 15, 2 * 15 + 3));
    }

    /// Brackets that are not structure (quoted, commented, in block or plain scalars) do not
    /// count, as YAML itself sees it; a hand-rolled bracket counter would get these wrong.
    #[test]
    fn only_real_collections_count() {
        let open = "[".repeat(200);
        let cases = [
            format!("name: a\ndescription: \"{open}\""),
            format!("name: a\ndescription: '{open} don''t'"),
            format!("name: a\ndescription: d # {open}"),
            format!("name: a\ndescription: |\n  {open}\n  ' unclosed"),
            format!("name: a\ndescription: plain {open} text,\n  more {open} 'on the next line"),
            format!("name: a\ndescription: d\ntags: [\"{open}\", '{open}']"),
        ];
        for fm in cases {
            assert!(parse(&md(&fm, "b"), None).is_ok(), "{fm}");
        }
        // A quote inside a plain scalar opens nothing: the flow after it still counts.
        let hidden = format!("name: a\ndescription: don't\nx: {}{}\ny: '", "[".repeat(100), "]".repeat(100));
        assert!(err(&md(&hidden, "b"), None).starts_with("invalid YAML frontmatter: nesting deeper than 32 levels"));
    }

    #[test]
    fn delimiter_edge_cases_follow_the_regex() {
        // Blank lines after the opening delimiter belong to the YAML.
        let p = parse("---\n\nname: a\ndescription: d\n---\nbody", None).unwrap();
        assert_eq!(p.manifest.body, "body");
        // The first line starting with --- closes the frontmatter, even `----`.
        let p = parse("---\nname: a\ndescription: d\n----\nbody", None).unwrap();
        assert_eq!(p.manifest.body, "-\nbody");
        // A later --- in the body stays in the body.
        let p = parse("---\nname: a\ndescription: d\n---\nx\n---\ny", None).unwrap();
        assert_eq!(p.manifest.body, "x\n---\ny");
        assert_eq!(body_of("---\na: 1\n---\n\n hi \n").as_deref(), Some("hi"));
    }
}
