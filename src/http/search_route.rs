//! `GET /api/search?q=&chat_id=&role=&from=&to=&limit=&after=` (docs/http-api.md §12,
//! docs/search.md §6): checks the parameters (a 422 in pydantic's form naming every bad one),
//! then asks [`crate::search::Search`]. Runs on an `http-slow` thread: the hits' records are
//! read back from their histories.

use serde_json::{json, Value};

use super::api::Api;
use super::shape::{Issue, Query};
use super::{Req, Resp};
use crate::search::{stamp_key, Request, MAX_DEPTH};
use crate::store::chats::valid_chat_id;

/// Hits per page when `limit` is absent, and the most a page holds.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: i64 = 100;
/// Longest query accepted, in characters.
const MAX_QUERY_CHARS: usize = 1000;
const ROLES: [&str; 5] = ["user", "assistant", "tool_calls", "tool", "title"];

pub(crate) fn search(api: &Api, req: &Req) -> Resp {
    let mut issues = Vec::new();
    let q = req.query_param("q").unwrap_or_default();
    if q.trim().is_empty() {
        let input = req.query_param("q").map_or(Value::Null, Value::from);
        issues.push(if input.is_null() {
            Issue::new("missing", &["query", "q"], "Field required", Value::Null)
        } else {
            Issue::new("string_too_short", &["query", "q"], "String should have at least 1 character", input)
                .with_ctx(json!({"min_length": 1}))
        });
    } else if q.chars().count() > MAX_QUERY_CHARS {
        issues.push(
            Issue::new(
                "string_too_long",
                &["query", "q"],
                format!("String should have at most {MAX_QUERY_CHARS} characters"),
                json!(q.chars().take(64).collect::<String>()),
            )
            .with_ctx(json!({"max_length": MAX_QUERY_CHARS})),
        );
    }
    let chat_id = req.query_param("chat_id").filter(|c| !c.is_empty());
    if let Some(c) = chat_id.as_ref().filter(|c| !valid_chat_id(c)) {
        issues.push(
            Issue::new(
                "string_pattern_mismatch",
                &["query", "chat_id"],
                "String should match pattern '^[A-Za-z0-9_:-]{1,64}$'",
                json!(c),
            )
            .with_ctx(json!({"pattern": "^[A-Za-z0-9_:-]{1,64}$"})),
        );
    }
    let roles: Option<Vec<String>> = req.query_param("role").filter(|r| !r.is_empty()).map(|r| {
        r.split(',')
            .map(|one| {
                let one = one.trim().to_string();
                if !ROLES.contains(&one.as_str()) {
                    issues.push(Issue::new(
                        "literal_error",
                        &["query", "role"],
                        "Input should be 'user', 'assistant', 'tool_calls', 'tool' or 'title'",
                        json!(one),
                    ));
                }
                one
            })
            .collect()
    });
    let mut date = |key: &str, end: bool| -> Option<u64> {
        let raw = req.query_param(key).filter(|v| !v.is_empty())?;
        let k = stamp_key(&raw, end);
        if k.is_none() {
            issues.push(Issue::new(
                "datetime_from_date_parsing",
                &["query", key],
                "Input should be a valid date or datetime (YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS])",
                json!(raw),
            ));
        }
        k
    };
    let (from, to) = (date("from", false), date("to", true));
    let mut nums = Query::of(req);
    let limit = nums.int("limit", 1, MAX_LIMIT);
    let after = nums.int("after", 0, MAX_DEPTH as i64);
    issues.extend(nums.into_issues());
    if !issues.is_empty() {
        return Resp::shape(issues);
    }
    let request = Request {
        q,
        chat_id,
        roles,
        from,
        to,
        limit: limit.map_or(DEFAULT_LIMIT, |n| n as usize),
        after: after.map_or(0, |n| n as usize),
    };
    Resp::ok(&api.search.search(&request))
}
