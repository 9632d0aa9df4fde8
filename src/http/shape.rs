//! The one request-shape validator of the HTTP API (docs/http-api.md §1 "Error body shapes"): the
//! checks the routes share on a JSON body ([`Body`]) and on query parameters ([`Query`]), each
//! finding a FastAPI/pydantic v2 422 item ([`Issue`], from `util::pydantic`, where the LLM
//! settings validation builds its items too).
//! Checks collect every issue in the order they run (pydantic reports all of them); a route
//! turns a non-empty list into `422 {"detail": [...]}` with [`Resp::shape`]. Domain rules
//! (a bad skill name, an unknown MCP server) are not shapes: they stay `{"detail": "<string>"}`.
//! Pure; runs on the HTTP thread.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::{Req, Resp};
pub(crate) use crate::util::pydantic::Issue;

/// Pydantic's lax boolean strings.
pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Some(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Some(false),
        _ => None,
    }
}

/// A JSON body under check.
pub(crate) struct Body {
    value: Value,
    fields: Map<String, Value>,
    issues: Vec<Issue>,
}

impl Body {
    /// The request body, which must be a JSON object (else `model_attributes_type`).
    pub(crate) fn object(req: &Req) -> Result<Body, Resp> {
        let value = req.json()?;
        match &value {
            Value::Object(m) => Ok(Body { fields: m.clone(), value, issues: Vec::new() }),
            _ => Err(Resp::shape(vec![Issue::new(
                "model_attributes_type",
                &["body"],
                "Input should be a valid dictionary or object to extract fields from",
                value,
            )])),
        }
    }

    /// Any JSON value; a non-object simply has no fields (every required one is `missing`).
    pub(crate) fn lenient(value: Value) -> Body {
        let fields = value.as_object().cloned().unwrap_or_default();
        Body { value, fields, issues: Vec::new() }
    }

    pub(crate) fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }

    pub(crate) fn push(&mut self, issue: Issue) {
        self.issues.push(issue);
    }

    /// `missing` at `field`, with the whole body as input.
    pub(crate) fn missing(&mut self, field: &str) {
        let body = self.value.clone();
        self.push(Issue::new("missing", &["body", field], "Field required", body));
    }

    /// `extra_forbidden` at `field`.
    pub(crate) fn extra(&mut self, field: &str) {
        let v = self.fields.get(field).cloned().unwrap_or(Value::Null);
        self.push(Issue::new("extra_forbidden", &["body", field], "Extra inputs are not permitted", v));
    }

    fn string_type(&mut self, loc: &[&str], v: &Value) {
        self.push(Issue::new("string_type", loc, "Input should be a valid string", v.clone()));
    }

    /// A required string.
    pub(crate) fn required_str(&mut self, k: &str) -> Option<String> {
        match self.fields.get(k).cloned() {
            None => {
                self.missing(k);
                None
            }
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                self.string_type(&["body", k], &other);
                None
            }
        }
    }

    /// A string that may be absent or `null` (`Some(None)`); `None` after an issue.
    pub(crate) fn optional_str(&mut self, k: &str) -> Option<Option<String>> {
        match self.fields.get(k).cloned() {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => Some(Some(s)),
            Some(other) => {
                self.string_type(&["body", k], &other);
                None
            }
        }
    }

    /// An object of strings that may be absent or `null` (`Some(None)`); every non-string
    /// value is an issue at its key.
    pub(crate) fn string_map(&mut self, k: &str) -> Option<Option<BTreeMap<String, String>>> {
        match self.fields.get(k).cloned() {
            None | Some(Value::Null) => Some(None),
            Some(Value::Object(m)) => {
                let mut out = BTreeMap::new();
                let mut ok = true;
                for (key, v) in &m {
                    match v {
                        Value::String(s) => {
                            out.insert(key.clone(), s.clone());
                        }
                        other => {
                            self.string_type(&["body", k, key], other);
                            ok = false;
                        }
                    }
                }
                ok.then_some(Some(out))
            }
            Some(other) => {
                self.push(Issue::new("dict_type", &["body", k], "Input should be a valid dictionary", other));
                None
            }
        }
    }

    /// A lax boolean (true/false, 0/1, pydantic's strings); absent gives `default`, or
    /// `missing` when there is none.
    pub(crate) fn lax_bool(&mut self, k: &str, default: Option<bool>) -> Option<bool> {
        let v = match self.fields.get(k).cloned() {
            None => {
                if default.is_none() {
                    self.missing(k);
                }
                return default;
            }
            Some(v) => v,
        };
        let parsed = match &v {
            Value::Bool(b) => Some(*b),
            Value::String(s) => parse_bool(s),
            Value::Number(n) => match n.as_i64() {
                Some(0) => Some(false),
                Some(1) => Some(true),
                _ => None,
            },
            _ => None,
        };
        if parsed.is_none() {
            self.push(Issue::new("bool_type", &["body", k], "Input should be a valid boolean", v));
        }
        parsed
    }

    /// One of a fixed set of strings (`parse`), `default` when absent; else `literal_error`
    /// with `msg` (pydantic's "Input should be 'a', 'b' or 'c'").
    pub(crate) fn literal<T>(
        &mut self,
        k: &str,
        default: T,
        parse: impl Fn(&str) -> Option<T>,
        msg: &str,
    ) -> Option<T> {
        let Some(v) = self.fields.get(k).cloned() else {
            return Some(default);
        };
        let parsed = v.as_str().and_then(parse);
        if parsed.is_none() {
            self.push(Issue::new("literal_error", &["body", k], msg, v));
        }
        parsed
    }

    /// `checked` when no check found an issue (each check that yields `None` records one),
    /// else the 422 with every issue.
    pub(crate) fn done<T>(self, checked: Option<T>) -> Result<T, Resp> {
        match checked {
            Some(v) if self.issues.is_empty() => Ok(v),
            _ => Err(Resp::shape(self.issues)),
        }
    }
}

/// Query parameters under check.
pub(crate) struct Query<'a> {
    req: &'a Req,
    issues: Vec<Issue>,
}

impl<'a> Query<'a> {
    pub(crate) fn of(req: &'a Req) -> Query<'a> {
        Query { req, issues: Vec::new() }
    }

    /// A lax boolean parameter, `None` when absent (or after an issue).
    pub(crate) fn bool(&mut self, key: &str) -> Option<bool> {
        let raw = self.req.query_param(key)?;
        let b = parse_bool(&raw);
        if b.is_none() {
            self.issues.push(Issue::new(
                "bool_parsing",
                &["query", key],
                "Input should be a valid boolean, unable to interpret input",
                json!(raw),
            ));
        }
        b
    }

    /// An integer parameter within `min..=max`, `None` when absent (or after an issue).
    pub(crate) fn int(&mut self, key: &str, min: i64, max: i64) -> Option<i64> {
        let raw = self.req.query_param(key)?;
        let issue = match raw.trim().parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => return Some(n),
            Err(_) => Issue::new(
                "int_parsing",
                &["query", key],
                "Input should be a valid integer, unable to parse string as an integer",
                json!(raw),
            ),
            Ok(n) if n < min => Issue::new(
                "greater_than_equal",
                &["query", key],
                format!("Input should be greater than or equal to {min}"),
                json!(raw),
            )
            .with_ctx(json!({"ge": min})),
            Ok(_) => Issue::new(
                "less_than_equal",
                &["query", key],
                format!("Input should be less than or equal to {max}"),
                json!(raw),
            )
            .with_ctx(json!({"le": max})),
        };
        self.issues.push(issue);
        None
    }

    /// The issues found, for a handler that reports them with its own.
    pub(crate) fn into_issues(self) -> Vec<Issue> {
        self.issues
    }

    /// `Err` with a 422 when any parameter had an issue.
    pub(crate) fn finish(self) -> Result<(), Resp> {
        if self.issues.is_empty() {
            Ok(())
        } else {
            Err(Resp::shape(self.issues))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(query: &str, body: &str) -> Req {
        Req {
            method: "POST".into(),
            path: "/api/x".into(),
            target: super::super::gate::classify("/api/x"),
            query: query.into(),
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    fn body_of(r: Resp) -> String {
        String::from_utf8(r.body.into_vec()).unwrap()
    }

    #[test]
    fn every_non_string_map_value_is_reported() {
        let mut b = Body::object(&req("", r#"{"files": {"a": 1, "b": "ok", "c": [2]}}"#)).unwrap();
        assert_eq!(b.string_map("files"), None);
        assert_eq!(
            body_of(b.done(None::<()>).unwrap_err()),
            r#"{"detail":[{"input":1,"loc":["body","files","a"],"msg":"Input should be a valid string","type":"string_type"},{"input":[2],"loc":["body","files","c"],"msg":"Input should be a valid string","type":"string_type"}]}"#
        );
    }

    #[test]
    fn fields_defaults_and_lax_values() {
        let mut b = Body::object(&req("", r#"{"s": "x", "n": null, "on": "Yes", "one": 1, "two": 2}"#)).unwrap();
        assert_eq!(b.required_str("s").as_deref(), Some("x"));
        assert_eq!(b.optional_str("n"), Some(None));
        assert_eq!(b.optional_str("absent"), Some(None));
        assert_eq!(b.string_map("n"), Some(None));
        assert_eq!(b.lax_bool("on", None), Some(true));
        assert_eq!(b.lax_bool("one", None), Some(true));
        assert_eq!(b.lax_bool("absent", Some(false)), Some(false));
        assert_eq!(b.literal("absent", 7, |_| None, "never"), Some(7));
        assert_eq!(b.done(Some(1)).ok(), Some(1));
        let mut b = Body::object(&req("", r#"{"two": 2}"#)).unwrap();
        assert_eq!(b.lax_bool("two", None), None);
        assert_eq!(b.lax_bool("absent", None), None);
        let out = body_of(b.done(None::<()>).unwrap_err());
        assert!(out.contains(r#""type":"bool_type""#) && out.contains(r#""type":"missing""#), "{out}");
        // A lenient body answers `missing` for a non-object, like the sessions route always did.
        let mut b = Body::lenient(json!([1]));
        assert_eq!(b.required_str("title"), None);
        assert_eq!(
            body_of(b.done(None::<()>).unwrap_err()),
            r#"{"detail":[{"input":[1],"loc":["body","title"],"msg":"Field required","type":"missing"}]}"#
        );
    }

    #[test]
    fn query_bounds_and_parsing() {
        let r = req("page=3&size=0&flag=maybe&n=x", "");
        let mut q = Query::of(&r);
        assert_eq!(q.int("page", 1, 10), Some(3));
        assert_eq!(q.int("size", 1, 10), None);
        assert_eq!(q.int("absent", 1, 10), None);
        assert_eq!(q.bool("flag"), None);
        assert_eq!(q.int("n", 1, 10), None);
        let out = body_of(q.finish().unwrap_err());
        assert_eq!(out.matches(r#""type":"#).count(), 3, "{out}");
        assert!(Query::of(&req("page=2&flag=off", "")).finish().is_ok());
        assert_eq!(parse_bool(" T "), Some(true));
        assert_eq!(parse_bool("nope"), None);
    }
}
