//! Request shapes of the HTTP API (docs/http-api.md §1 "Error body shapes"): a JSON body read
//! into its route's model by the one body extractor ([`body`], over `util::body`), and the checks
//! the routes share on query parameters ([`Query`]), each finding a FastAPI/pydantic v2 422 item
//! ([`Issue`], from `util::pydantic`). Every issue is collected (pydantic reports all of them);
//! a route turns the list into `422 {"detail": [...]}` with [`Resp::shape`]. Domain rules (a bad
//! skill name, an unknown MCP server) are not shapes: they stay `{"detail": "<string>"}`. Pure;
//! runs on the HTTP thread.

use serde_json::json;

use super::{Req, Resp};
use crate::util::body::{extract, parse_bool, Model};
pub(crate) use crate::util::pydantic::Issue;

/// The request body as the route's model `T` ([`crate::util::body`]), or the 422 listing every
/// issue (the body not being JSON is one too).
pub(crate) fn body<T: Model>(req: &Req) -> Result<T, Resp> {
    extract(&req.json()?).map_err(Resp::shape)
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
