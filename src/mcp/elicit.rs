//! MCP elicitation, form mode (spec 2025-11-25 "Elicitation"): the `elicitation/create`
//! request a server sends during a call, its `requestedSchema` checked into a [`Form`] (a flat
//! object of string, number, integer, boolean, single- and multi-select enum properties, every
//! size bounded), the user's answer checked against it, and the [`Answer`] as the JSON result.
//! Pure data and functions; runs on the calling worker (and the WS reader validating answers).
//!
//! Who asks the user is an [`Elicitor`]; the MCP client hands each request of a call to the
//! closure its caller gave (see `client.rs`), so only connections whose calls can reach a user
//! declare the capability.

use serde_json::{json, Map, Value};

use super::messages::{self, ElicitRequestParams};
use crate::util::text;

/// At most this many properties in one form.
pub(crate) const MAX_PROPERTIES: usize = 32;
/// Longest property name (chars).
pub(crate) const MAX_NAME_CHARS: usize = 64;
/// Longest message shown to the user (chars); longer ones are cut.
pub(crate) const MAX_MESSAGE_CHARS: usize = 4000;
/// Longest title or description (chars); longer ones are cut.
pub(crate) const MAX_LABEL_CHARS: usize = 500;
/// At most this many options in one enum.
pub(crate) const MAX_OPTIONS: usize = 100;
/// Longest enum value or option title (chars).
pub(crate) const MAX_OPTION_CHARS: usize = 200;
/// Longest string answer (chars), whatever `maxLength` says.
pub(crate) const MAX_STRING_CHARS: usize = 10_000;
/// Largest answer content, serialised (bytes).
pub(crate) const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// What the user did (the result's `action`).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Accept(Map<String, Value>),
    Decline,
    Cancel,
}

impl Answer {
    pub(crate) fn action(&self) -> &'static str {
        match self {
            Answer::Accept(_) => "accept",
            Answer::Decline => "decline",
            Answer::Cancel => "cancel",
        }
    }

    /// The `elicitation/create` result.
    pub(crate) fn to_result(&self) -> Value {
        match self {
            Answer::Accept(content) => json!({"action": "accept", "content": content}),
            other => json!({"action": other.action()}),
        }
    }
}

/// One `elicitation/create` (form mode), checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The configured server name.
    pub(crate) server: String,
    /// Cut to [`MAX_MESSAGE_CHARS`].
    pub(crate) message: String,
    pub form: Form,
}

/// Asks a user (the chat's WebSocket clients). Blocks the calling worker until an answer,
/// the timeout, or `cancel`; never longer than its own timeout.
pub(crate) trait Elicitor: Send + Sync {
    fn elicit(&self, chat_id: &str, request: &Request, cancel: Option<&crate::util::cancel::CancelToken>) -> Answer;
}

#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    pub(crate) fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) required: bool,
    pub(crate) kind: Kind,
    /// Checked against `kind`; an invalid default is dropped.
    pub(crate) default: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Format {
    Email,
    Uri,
    Date,
    DateTime,
}

impl Format {
    fn name(&self) -> &'static str {
        match self {
            Format::Email => "email",
            Format::Uri => "uri",
            Format::Date => "date",
            Format::DateTime => "date-time",
        }
    }
}

/// One choice of an enum: the value sent back and its label.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    pub(crate) value: String,
    pub(crate) title: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Text { min: Option<usize>, max: Option<usize>, format: Option<Format> },
    Number { integer: bool, min: Option<f64>, max: Option<f64> },
    Boolean,
    Select { choices: Vec<Choice> },
    MultiSelect { choices: Vec<Choice>, min: Option<usize>, max: Option<usize> },
}

/// Why a request or an answer was refused; the text is safe to show (names, never values).
pub(crate) type Invalid = String;

fn label(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(|s| text::take_chars(s.trim(), MAX_LABEL_CHARS).to_string()).filter(|s| !s.is_empty())
}

fn count(v: Option<&Value>) -> Option<usize> {
    v.and_then(Value::as_u64).map(|n| n.min(usize::MAX as u64) as usize)
}

/// Options from `enum` (+ legacy `enumNames`) or from `oneOf`/`anyOf` of `{const, title}`.
fn choices(schema: &Map<String, Value>, name: &str) -> Result<Option<Vec<Choice>>, Invalid> {
    let bad = || {
        format!("property '{name}': enum options must be at most {MAX_OPTIONS} distinct strings of at most {MAX_OPTION_CHARS} characters")
    };
    let mut out: Vec<Choice> = Vec::new();
    let mut push = |value: &Value, title: Option<String>| -> Result<(), Invalid> {
        let v = value.as_str().filter(|s| text::char_len(s) <= MAX_OPTION_CHARS).ok_or_else(bad)?;
        if out.iter().any(|c| c.value == v) || out.len() == MAX_OPTIONS {
            return Err(bad());
        }
        out.push(Choice {
            value: v.to_string(),
            title: title.map(|t| text::take_chars(&t, MAX_OPTION_CHARS).to_string()),
        });
        Ok(())
    };
    if let Some(list) = schema.get("enum") {
        let list = list.as_array().ok_or_else(bad)?;
        let names = schema.get("enumNames").and_then(Value::as_array);
        for (i, v) in list.iter().enumerate() {
            push(v, label(names.and_then(|n| n.get(i))))?;
        }
    } else if let Some(list) = schema.get("oneOf").or_else(|| schema.get("anyOf")) {
        for item in list.as_array().ok_or_else(bad)? {
            push(item.get("const").ok_or_else(bad)?, label(item.get("title")))?;
        }
    } else {
        return Ok(None);
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(Some(out))
}

fn field(name: &str, schema: &Value, required: bool) -> Result<Field, Invalid> {
    let s = schema.as_object().ok_or_else(|| format!("property '{name}' is not a schema object"))?;
    let ty = s.get("type").and_then(Value::as_str).unwrap_or("");
    let kind = match ty {
        "string" => match choices(s, name)? {
            Some(choices) => Kind::Select { choices },
            None => {
                let format = match s.get("format").and_then(Value::as_str) {
                    None => None,
                    Some("email") => Some(Format::Email),
                    Some("uri") => Some(Format::Uri),
                    Some("date") => Some(Format::Date),
                    Some("date-time") => Some(Format::DateTime),
                    Some(other) => {
                        return Err(format!("property '{name}': unsupported format '{}'", text::take_chars(other, 40)))
                    }
                };
                Kind::Text { min: count(s.get("minLength")), max: count(s.get("maxLength")), format }
            }
        },
        "number" | "integer" => Kind::Number {
            integer: ty == "integer",
            min: s.get("minimum").and_then(Value::as_f64),
            max: s.get("maximum").and_then(Value::as_f64),
        },
        "boolean" => Kind::Boolean,
        "array" => {
            let items = s.get("items").and_then(Value::as_object);
            let choices = match items {
                Some(items) => choices(items, name)?,
                None => None,
            };
            let choices = choices.ok_or_else(|| format!("property '{name}': an array must list its options"))?;
            Kind::MultiSelect { choices, min: count(s.get("minItems")), max: count(s.get("maxItems")) }
        }
        _ => return Err(format!("property '{name}': type must be string, number, integer, boolean or an enum array")),
    };
    let mut f = Field {
        name: name.to_string(),
        title: label(s.get("title")),
        description: label(s.get("description")),
        required,
        kind,
        default: None,
    };
    f.default = s.get("default").filter(|d| check_value(&f, d).is_ok()).cloned();
    Ok(f)
}

/// Checks a `requestedSchema`.
pub(crate) fn parse_form(schema: &Value) -> Result<Form, Invalid> {
    let s = schema.as_object().ok_or("requestedSchema must be an object")?;
    if s.get("type").and_then(Value::as_str).is_some_and(|t| t != "object") {
        return Err("requestedSchema must be of type object".into());
    }
    let empty = Map::new();
    let props = match s.get("properties") {
        None => &empty,
        Some(p) => p.as_object().ok_or("requestedSchema.properties must be an object")?,
    };
    if props.len() > MAX_PROPERTIES {
        return Err(format!("requestedSchema has more than {MAX_PROPERTIES} properties"));
    }
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields = Vec::with_capacity(props.len());
    for (name, p) in props {
        if name.is_empty() || text::char_len(name) > MAX_NAME_CHARS {
            return Err(format!("property names must have 1 to {MAX_NAME_CHARS} characters"));
        }
        fields.push(field(name, p, required.contains(&name.as_str()))?);
    }
    Ok(Form { fields })
}

/// Checks `elicitation/create` params: form mode only (absent `mode` is form).
pub(crate) fn parse_request(server: &str, params: Option<&Value>) -> Result<Request, Invalid> {
    let p = params.filter(|p| p.is_object()).ok_or("elicitation/create needs params")?;
    let p: ElicitRequestParams = messages::read(Some(p.clone()));
    match p.mode.as_deref() {
        None | Some("form") => {}
        Some(_) => return Err("only form mode elicitation is supported".into()),
    }
    let message = p.message.ok_or("elicitation/create needs a message")?;
    let schema = p.requested_schema.ok_or("elicitation/create needs a requestedSchema")?;
    Ok(Request {
        server: server.to_string(),
        message: text::take_chars(&message, MAX_MESSAGE_CHARS).to_string(),
        form: parse_form(&schema)?,
    })
}

fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null)
}

fn choices_json(choices: &[Choice]) -> Value {
    Value::Array(
        choices.iter().map(|c| json!({"const": c.value, "title": c.title.as_deref().unwrap_or(&c.value)})).collect(),
    )
}

impl Form {
    /// The schema as the web client gets it: only the keys this module understands, enums
    /// always as `oneOf` of `{const, title}` (inside `items` for multi-select).
    pub(crate) fn to_schema(&self) -> Value {
        let mut props = Map::new();
        for f in &self.fields {
            let mut m = Map::new();
            match &f.kind {
                Kind::Text { min, max, format } => {
                    m.insert("type".into(), json!("string"));
                    if let Some(n) = min {
                        m.insert("minLength".into(), json!(n));
                    }
                    m.insert("maxLength".into(), json!(max.unwrap_or(MAX_STRING_CHARS).min(MAX_STRING_CHARS)));
                    if let Some(fmt) = format {
                        m.insert("format".into(), json!(fmt.name()));
                    }
                }
                Kind::Number { integer, min, max } => {
                    m.insert("type".into(), json!(if *integer { "integer" } else { "number" }));
                    if let Some(n) = min {
                        m.insert("minimum".into(), num(*n));
                    }
                    if let Some(n) = max {
                        m.insert("maximum".into(), num(*n));
                    }
                }
                Kind::Boolean => {
                    m.insert("type".into(), json!("boolean"));
                }
                Kind::Select { choices } => {
                    m.insert("type".into(), json!("string"));
                    m.insert("oneOf".into(), choices_json(choices));
                }
                Kind::MultiSelect { choices, min, max } => {
                    m.insert("type".into(), json!("array"));
                    m.insert("items".into(), json!({"anyOf": choices_json(choices)}));
                    if let Some(n) = min {
                        m.insert("minItems".into(), json!(n));
                    }
                    if let Some(n) = max {
                        m.insert("maxItems".into(), json!(n));
                    }
                }
            }
            if let Some(t) = &f.title {
                m.insert("title".into(), json!(t));
            }
            if let Some(d) = &f.description {
                m.insert("description".into(), json!(d));
            }
            if let Some(d) = &f.default {
                m.insert("default".into(), d.clone());
            }
            props.insert(f.name.clone(), Value::Object(m));
        }
        let required: Vec<&str> = self.fields.iter().filter(|f| f.required).map(|f| f.name.as_str()).collect();
        json!({"type": "object", "properties": props, "required": required})
    }

    /// Every field's default (SEP-1034): what accepting an untouched form sends.
    pub fn defaults(&self) -> Map<String, Value> {
        self.fields.iter().filter_map(|f| Some((f.name.clone(), f.default.clone()?))).collect()
    }

    /// Checks accepted content: an object of known properties, every required one present,
    /// each value of its property's kind and within its bounds.
    pub(crate) fn check(&self, content: &Value) -> Result<Map<String, Value>, Invalid> {
        let c = content.as_object().ok_or("content must be an object")?;
        if content.to_string().len() > MAX_CONTENT_BYTES {
            return Err(format!("content is larger than {MAX_CONTENT_BYTES} bytes"));
        }
        for key in c.keys() {
            if !self.fields.iter().any(|f| &f.name == key) {
                return Err(format!("unknown property '{}'", text::take_chars(key, MAX_NAME_CHARS)));
            }
        }
        for f in &self.fields {
            match c.get(&f.name) {
                None if f.required => return Err(format!("'{}' is required", f.name)),
                None => {}
                Some(v) => check_value(f, v)?,
            }
        }
        Ok(c.clone())
    }
}

fn check_value(f: &Field, v: &Value) -> Result<(), Invalid> {
    let name = &f.name;
    match &f.kind {
        Kind::Text { min, max, format } => {
            let s = v.as_str().ok_or_else(|| format!("'{name}' must be a string"))?;
            let n = text::char_len(s);
            let max = max.unwrap_or(MAX_STRING_CHARS).min(MAX_STRING_CHARS);
            if n > max {
                return Err(format!("'{name}' must be at most {max} characters"));
            }
            if min.is_some_and(|m| n < m) {
                return Err(format!("'{name}' must be at least {} characters", min.unwrap_or(0)));
            }
            if let Some(fmt) = format {
                let ok = match fmt {
                    Format::Email => is_email(s),
                    Format::Uri => is_uri(s),
                    Format::Date => is_date(s),
                    Format::DateTime => is_date_time(s),
                };
                if !ok {
                    return Err(format!("'{name}' must be a valid {}", fmt.name()));
                }
            }
        }
        Kind::Number { integer, min, max } => {
            let x = v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| format!("'{name}' must be a number"))?;
            if *integer && (x.fract() != 0.0 || !(v.is_i64() || v.is_u64() || x.abs() < 9.0e15)) {
                return Err(format!("'{name}' must be an integer"));
            }
            if let Some(m) = min.filter(|m| x < *m) {
                return Err(format!("'{name}' must be at least {m}"));
            }
            if let Some(m) = max.filter(|m| x > *m) {
                return Err(format!("'{name}' must be at most {m}"));
            }
        }
        Kind::Boolean => {
            v.as_bool().ok_or_else(|| format!("'{name}' must be true or false"))?;
        }
        Kind::Select { choices } => {
            let s = v.as_str().ok_or_else(|| format!("'{name}' must be one of its options"))?;
            if !choices.iter().any(|c| c.value == s) {
                return Err(format!("'{name}' must be one of its options"));
            }
        }
        Kind::MultiSelect { choices, min, max } => {
            let items = v.as_array().ok_or_else(|| format!("'{name}' must be a list of its options"))?;
            let mut seen: Vec<&str> = Vec::new();
            for item in items {
                let s = item
                    .as_str()
                    .filter(|s| choices.iter().any(|c| c.value == *s) && !seen.contains(s))
                    .ok_or_else(|| format!("'{name}' must list distinct options"))?;
                seen.push(s);
            }
            if min.is_some_and(|m| seen.len() < m) {
                return Err(format!("'{name}' needs at least {} choices", min.unwrap_or(0)));
            }
            if max.is_some_and(|m| seen.len() > m) {
                return Err(format!("'{name}' allows at most {} choices", max.unwrap_or(0)));
            }
        }
    }
    Ok(())
}

fn is_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else { return false };
    !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains('@')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn is_uri(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once(':') else { return false };
    let mut cs = scheme.chars();
    cs.next().is_some_and(|c| c.is_ascii_alphabetic())
        && cs.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && !rest.is_empty()
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

fn is_date(s: &str) -> bool {
    let mut p = s.split('-');
    let (Some(y), Some(m), Some(d), None) = (p.next(), p.next(), p.next(), p.next()) else { return false };
    let (Some(y), Some(m), Some(d)) = (digits(y, 4), digits(m, 2), digits(d, 2)) else { return false };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// RFC 3339: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn is_date_time(s: &str) -> bool {
    let Some((date, time)) = s.split_once(['T', 't']) else { return false };
    if !is_date(date) || time.len() < 9 {
        return false;
    }
    let (hms, zone) = time.split_at(8);
    let mut p = hms.split(':');
    let (Some(h), Some(m), Some(sec), None) = (p.next(), p.next(), p.next(), p.next()) else { return false };
    let ok = matches!((digits(h, 2), digits(m, 2), digits(sec, 2)), (Some(h), Some(m), Some(s)) if h < 24 && m < 60 && s <= 60);
    let zone = match zone.strip_prefix('.') {
        Some(z) => {
            let end = z.find(|c: char| !c.is_ascii_digit()).unwrap_or(z.len());
            if end == 0 {
                return false;
            }
            &z[end..]
        }
        None => zone,
    };
    let zone_ok = zone.eq_ignore_ascii_case("z")
        || (zone.len() == 6
            && (zone.starts_with('+') || zone.starts_with('-'))
            && matches!((digits(&zone[1..3], 2), &zone[3..4], digits(&zone[4..6], 2)), (Some(h), ":", Some(m)) if h < 24 && m < 60));
    ok && zone_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Form {
        parse_form(&json!({"type": "object", "properties": {
            "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 5, "default": "Ann"},
            "email": {"type": "string", "format": "email"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
            "score": {"type": "number", "default": 95.5},
            "ok": {"type": "boolean", "default": true},
            "status": {"type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"], "default": "zzz"},
            "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y", "z"]}, "maxItems": 2}
        }, "required": ["name", "age"]}))
        .unwrap()
    }

    #[test]
    fn schemas_are_checked_and_normalised() {
        let f = sample();
        let schema = f.to_schema();
        assert_eq!(schema["required"], json!(["age", "name"]), "serde_json maps are sorted");
        assert_eq!(
            schema["properties"]["status"]["oneOf"],
            json!([{"const": "a", "title": "A"}, {"const": "b", "title": "B"}])
        );
        assert_eq!(schema["properties"]["status"].get("default"), None, "an invalid default is dropped");
        assert_eq!(schema["properties"]["tags"]["items"]["anyOf"][2], json!({"const": "z", "title": "z"}));
        assert_eq!(schema["properties"]["email"]["maxLength"], json!(MAX_STRING_CHARS));
        assert_eq!(
            f.defaults(),
            json!({"name": "Ann", "age": 30, "score": 95.5, "ok": true}).as_object().cloned().unwrap()
        );
        for (bad, why) in [
            (json!([]), "must be an object"),
            (json!({"type": "object", "properties": {"a": {"type": "object"}}}), "type must be"),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "format": "ipv4"}}}),
                "unsupported format",
            ),
            (json!({"type": "object", "properties": {"a": {"type": "string", "enum": [1]}}}), "enum options"),
            (json!({"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "x"]}}}), "enum options"),
            (
                json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
                "list its options",
            ),
        ] {
            let e = parse_form(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let many: Map<String, Value> =
            (0..=MAX_PROPERTIES).map(|i| (format!("p{i}"), json!({"type": "boolean"}))).collect();
        assert!(parse_form(&json!({"properties": many})).unwrap_err().contains("more than"));
        assert!(parse_request("s", Some(&json!({"mode": "url", "message": "m", "url": "https://x"}))).is_err());
        let r = parse_request("s", Some(&json!({"message": "x".repeat(5000), "requestedSchema": {"properties": {}}})))
            .unwrap();
        assert_eq!(text::char_len(&r.message), MAX_MESSAGE_CHARS);
    }

    #[test]
    fn answers_are_checked_against_the_form() {
        let f = sample();
        assert!(f.check(&json!({"name": "Bob", "age": 3, "email": "a@b.io", "tags": ["x", "z"], "size": "l"})).is_ok());
        for (bad, why) in [
            (json!([]), "must be an object"),
            (json!({"age": 3}), "'name' is required"),
            (json!({"name": "Bob", "age": 3, "extra": 1}), "unknown property 'extra'"),
            (json!({"name": "B", "age": 3}), "at least 2"),
            (json!({"name": "Bobbie", "age": 3}), "at most 5"),
            (json!({"name": "Bob", "age": 3.5}), "integer"),
            (json!({"name": "Bob", "age": 151}), "at most 150"),
            (json!({"name": "Bob", "age": "3"}), "must be a number"),
            (json!({"name": "Bob", "age": 3, "email": "nope"}), "valid email"),
            (json!({"name": "Bob", "age": 3, "ok": "yes"}), "true or false"),
            (json!({"name": "Bob", "age": 3, "status": "c"}), "one of its options"),
            (json!({"name": "Bob", "age": 3, "tags": ["x", "x"]}), "distinct"),
            (json!({"name": "Bob", "age": 3, "tags": ["x", "y", "z"]}), "at most 2"),
        ] {
            let e = f.check(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let big = parse_form(&json!({"properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}, "d": {"type": "string"}, "e": {"type": "string"}, "f": {"type": "string"}, "g": {"type": "string"}}})).unwrap();
        let s = "x".repeat(MAX_STRING_CHARS);
        let content = json!({"a": s, "b": s, "c": s, "d": s, "e": s, "f": s, "g": s});
        assert!(big.check(&content).unwrap_err().contains("larger than"));
    }

    #[test]
    fn formats() {
        assert!(is_email("a.b@example.com") && !is_email("a@b") && !is_email("a b@c.d") && !is_email("@c.d"));
        assert!(is_uri("https://x.y/z") && is_uri("mailto:a@b") && !is_uri("nope") && !is_uri("1a:b"));
        assert!(is_date("2024-02-29") && !is_date("2023-02-29") && !is_date("2024-13-01") && !is_date("24-01-01"));
        assert!(is_date_time("2024-02-29T23:59:60Z") && is_date_time("2024-01-01T00:00:00.123+08:00"));
        assert!(
            !is_date_time("2024-01-01 00:00:00Z")
                && !is_date_time("2024-01-01T24:00:00Z")
                && !is_date_time("2024-01-01T00:00:00")
        );
    }

    #[test]
    fn results_carry_the_action() {
        assert_eq!(Answer::Decline.to_result(), json!({"action": "decline"}));
        assert_eq!(Answer::Cancel.to_result(), json!({"action": "cancel"}));
        let m = json!({"a": 1}).as_object().cloned().unwrap();
        assert_eq!(Answer::Accept(m).to_result(), json!({"action": "accept", "content": {"a": 1}}));
    }

    /// Malformed params are refused with the reason the server gets back (-32602).
    #[test]
    fn malformed_requests_are_refused_with_a_reason() {
        let schema = json!({"properties": {}});
        for (params, why) in [
            (None, "elicitation/create needs params"),
            (Some(json!(5)), "elicitation/create needs params"),
            (Some(json!(["m"])), "elicitation/create needs params"),
            (
                Some(json!({"mode": "url", "message": "m", "requestedSchema": schema})),
                "only form mode elicitation is supported",
            ),
            (Some(json!({"requestedSchema": schema})), "elicitation/create needs a message"),
            (Some(json!({"message": 3, "requestedSchema": schema})), "elicitation/create needs a message"),
            (Some(json!({"message": "m"})), "elicitation/create needs a requestedSchema"),
            (Some(json!({"message": "m", "requestedSchema": null})), "requestedSchema must be an object"),
            (
                Some(json!({"message": "m", "requestedSchema": {"type": "array"}})),
                "requestedSchema must be of type object",
            ),
        ] {
            assert_eq!(parse_request("s", params.as_ref()).unwrap_err(), why, "{params:?}");
        }
        // A mode that is not a string is no mode: form.
        let r = parse_request("s", Some(&json!({"mode": 1, "message": "m", "requestedSchema": schema}))).unwrap();
        assert_eq!((r.server.as_str(), r.message.as_str(), r.form.fields.len()), ("s", "m", 0));
    }
}
