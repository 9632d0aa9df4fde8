//! The FastAPI/pydantic v2 validation item, `{type, loc, msg, input, ctx?}`, that a 422
//! `{"detail": [...]}` lists (docs/http-api.md §1 "Error body shapes"). Built by the body
//! extractor (`util::body`), which every JSON body and the approval policy file go through, and
//! by the HTTP query checks (`http::shape`); `http` renders the list. Pure; any thread.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One part of an issue's location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Loc {
    Key(String),
    /// A position (the column of a JSON syntax error).
    Index(usize),
}

/// One 422 item. Fields in wire order (the original's key-sorted JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Issue {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ctx: Option<Value>,
    pub(crate) input: Value,
    pub(crate) loc: Vec<Loc>,
    pub(crate) msg: String,
    #[serde(rename = "type")]
    pub(crate) kind: Cow<'static, str>,
}

impl Issue {
    pub(crate) fn new(kind: &'static str, loc: &[&str], msg: impl Into<String>, input: Value) -> Issue {
        Issue {
            ctx: None,
            input,
            loc: loc.iter().map(|s| Loc::Key(s.to_string())).collect(),
            msg: msg.into(),
            kind: Cow::Borrowed(kind),
        }
    }

    /// The same issue one level down: `key` goes in front of its location.
    pub(crate) fn under(mut self, key: &str) -> Issue {
        self.loc.insert(0, Loc::Key(key.to_string()));
        self
    }

    pub(crate) fn with_ctx(mut self, ctx: Value) -> Issue {
        self.ctx = Some(ctx);
        self
    }

    /// The body is not JSON: pydantic's `json_invalid` at the error's column.
    pub(crate) fn json_invalid(e: &serde_json::Error) -> Issue {
        Issue::json_invalid_at(e.column(), e.to_string())
    }

    /// `json_invalid` at a byte position, with `error` as its context (nesting refused before
    /// parsing, see [`crate::util::json::too_deep`]).
    pub(crate) fn json_invalid_at(pos: usize, error: String) -> Issue {
        Issue {
            ctx: Some(json!({ "error": error })),
            input: json!({}),
            loc: vec![Loc::Key("body".into()), Loc::Index(pos)],
            msg: "JSON decode error".into(),
            kind: Cow::Borrowed("json_invalid"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of an item: keys sorted as the original's JSON, `ctx` only when there is one.
    #[test]
    fn items_serialise_in_wire_order() {
        let plain = Issue::new("missing", &["body", "ollama"], "Field required", json!({"a": 1}));
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            r#"{"input":{"a":1},"loc":["body","ollama"],"msg":"Field required","type":"missing"}"#
        );
        let with_ctx = Issue::new("greater_than_equal", &["query", "n"], "m", json!("0")).with_ctx(json!({"ge": 1}));
        assert_eq!(
            serde_json::to_string(&with_ctx).unwrap(),
            r#"{"ctx":{"ge":1},"input":"0","loc":["query","n"],"msg":"m","type":"greater_than_equal"}"#
        );
        let e = serde_json::from_str::<Value>("{,").unwrap_err();
        let bad = serde_json::to_value(Issue::json_invalid(&e)).unwrap();
        assert_eq!((bad["loc"].clone(), bad["type"].clone()), (json!(["body", 2]), json!("json_invalid")));
    }
}
