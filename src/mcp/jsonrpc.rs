//! JSON-RPC 2.0 wire types for MCP: ids, the three message kinds, error objects, and the
//! serialisers for what we send. Pure data; any thread.
//!
//! We never send batches (removed in 2025-06-18), but a peer's batch is unpacked on receipt.

use serde_json::{json, Map, Value};

use crate::util::json::{too_deep, MAX_DEPTH as MAX_JSON_DEPTH};

pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;

/// A request id: a string or an integer, never null. Other numbers are kept as their text so a
/// server echoing `1.0` still matches nothing by accident rather than crashing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Id {
    Num(i64),
    Str(String),
}

impl Id {
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Id::Num(n) => json!(n),
            Id::Str(s) => json!(s),
        }
    }

    fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Number(n) => Some(n.as_i64().map(Id::Num).unwrap_or_else(|| Id::Str(n.to_string()))),
            Value::String(s) => Some(Id::Str(s.clone())),
            _ => None,
        }
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Num(n) => write!(f, "{n}"),
            Id::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// The `error` member of a response.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

/// One inbound message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    Request { id: Id, method: String, params: Option<Value> },
    Notification { method: String, params: Option<Value> },
    Response { id: Id, outcome: Result<Value, RpcError> },
}

/// Parses one text frame (a stdio line or an SSE `data`) into messages. A batch array yields
/// each element; an element that is not a valid message is reported as `Err` with a reason.
/// Frames nesting deeper than [`MAX_JSON_DEPTH`] are refused unparsed: the reader threads
/// that call this have small stacks.
pub(crate) fn parse(text: &str) -> Result<Vec<Result<Message, String>>, String> {
    if let Some(at) = too_deep(text.as_bytes(), MAX_JSON_DEPTH) {
        return Err(format!("invalid JSON (nesting deeper than {MAX_JSON_DEPTH} levels at byte {at})"));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON ({e})"))?;
    Ok(match value {
        Value::Array(items) => items.into_iter().map(from_value).collect(),
        v => vec![from_value(v)],
    })
}

/// Classifies a decoded JSON value as a request, notification or response.
pub(crate) fn from_value(v: Value) -> Result<Message, String> {
    let Value::Object(mut obj) = v else {
        return Err("message is not a JSON object".into());
    };
    let method = obj.get("method").and_then(Value::as_str).map(str::to_string);
    let params = obj.remove("params");
    let id = obj.get("id").filter(|v| !v.is_null());
    match (method, id) {
        (Some(method), Some(id)) => {
            let id = Id::from_value(id).ok_or("request id is neither string nor number")?;
            Ok(Message::Request { id, method, params })
        }
        (Some(method), None) => Ok(Message::Notification { method, params }),
        (None, Some(id)) => {
            let id = Id::from_value(id).ok_or("response id is neither string nor number")?;
            if let Some(err) = obj.remove("error") {
                let code = err.get("code").and_then(Value::as_i64).unwrap_or(INTERNAL_ERROR);
                let message = err.get("message").and_then(Value::as_str).unwrap_or("(no message)").to_string();
                let data = err.get("data").cloned();
                Ok(Message::Response { id, outcome: Err(RpcError { code, message, data }) })
            } else if let Some(result) = obj.remove("result") {
                Ok(Message::Response { id, outcome: Ok(result) })
            } else {
                Err("response has neither result nor error".into())
            }
        }
        (None, None) => Err("message has neither method nor id".into()),
    }
}

/// A compact request line (no embedded newlines: serde_json escapes them).
pub(crate) fn request(id: &Id, method: &str, params: Option<&Value>) -> String {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), json!("2.0"));
    m.insert("id".into(), id.to_value());
    m.insert("method".into(), json!(method));
    if let Some(p) = params {
        m.insert("params".into(), p.clone());
    }
    Value::Object(m).to_string()
}

/// A compact notification line.
pub(crate) fn notification(method: &str, params: Option<&Value>) -> String {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), json!("2.0"));
    m.insert("method".into(), json!(method));
    if let Some(p) = params {
        m.insert("params".into(), p.clone());
    }
    Value::Object(m).to_string()
}

/// A success response to a server-initiated request.
pub(crate) fn response_ok(id: &Id, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result}).to_string()
}

/// An error response to a server-initiated request.
pub(crate) fn response_err(id: &Id, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id.to_value(), "error": {"code": code, "message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_the_three_kinds() {
        let got = parse(r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#).unwrap();
        assert_eq!(got, vec![Ok(Message::Response { id: Id::Num(7), outcome: Ok(json!({"ok": true})) })]);
        let got = parse(r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#).unwrap();
        assert_eq!(got, vec![Ok(Message::Request { id: Id::Str("a".into()), method: "ping".into(), params: None })]);
        let got = parse(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{}}"#).unwrap();
        assert_eq!(
            got,
            vec![Ok(Message::Notification {
                method: "notifications/tools/list_changed".into(),
                params: Some(json!({}))
            })]
        );
    }

    #[test]
    fn error_response_keeps_code_and_message() {
        let got = parse(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#).unwrap();
        assert_eq!(
            got,
            vec![Ok(Message::Response {
                id: Id::Num(1),
                outcome: Err(RpcError { code: METHOD_NOT_FOUND, message: "Method not found".into(), data: None })
            })]
        );
    }

    #[test]
    fn null_id_is_a_notification_and_garbage_is_reported() {
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#).unwrap()[0],
            Ok(Message::Notification { .. })
        ));
        assert!(parse("not json").is_err());
        assert_eq!(parse("42").unwrap(), vec![Err("message is not a JSON object".to_string())]);
        assert_eq!(parse(r#"{"id":3}"#).unwrap(), vec![Err("response has neither result nor error".to_string())]);
        assert_eq!(parse(r#"[{"id":1,"result":1},{}]"#).unwrap().len(), 2);
    }

    /// The deepest reply allowed parses on three quarters of a connection thread's stack (in a
    /// debug build, the worst case); deeper ones are refused before serde_json recurses.
    #[test]
    fn replies_nest_at_most_max_json_depth_levels_within_the_reader_stack() {
        let reply = |depth: usize| {
            let inner = depth - 2;
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"x":{}1{}}}}}"#, r#"{"a":"#.repeat(inner), "}".repeat(inner))
        };
        let on_reader_stack = |text: String| {
            let stack = crate::mcp::transport::CONNECTION_STACK * 3 / 4;
            std::thread::Builder::new().stack_size(stack).spawn(move || parse(&text)).unwrap().join().unwrap()
        };
        let got = on_reader_stack(reply(MAX_JSON_DEPTH)).expect("the deepest reply allowed");
        assert!(matches!(got.as_slice(), [Ok(Message::Response { outcome: Ok(_), .. })]), "{got:?}");
        for depth in [MAX_JSON_DEPTH + 1, 129, 100_000] {
            let e = on_reader_stack(reply(depth)).unwrap_err();
            assert!(e.starts_with("invalid JSON (nesting deeper than 64 levels at byte "), "depth {depth}: {e}");
        }
    }

    #[test]
    fn serialises_single_line_messages() {
        let line = request(&Id::Num(3), "tools/call", Some(&json!({"text": "a\nb"})));
        assert!(!line.contains('\n'));
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"text":"a\nb"}}));
        assert_eq!(
            serde_json::from_str::<Value>(&response_err(&Id::Str("x".into()), -32601, "nope")).unwrap(),
            json!({"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"nope"}})
        );
        assert_eq!(
            serde_json::from_str::<Value>(&notification("notifications/initialized", None)).unwrap(),
            json!({"jsonrpc":"2.0","method":"notifications/initialized"})
        );
    }
}
