//! JSON-RPC 2.0 over newline-delimited stdio, as ACP frames it (docs/acp.md §2): one message
//! per line, read with a size and depth bound so an editor's bad line gets an error answer and
//! the bridge keeps reading. [`Out`] writes whole lines, so the two threads that answer never
//! interleave inside a message. Runs on the bridge's main thread (reading) and on both threads
//! (writing).

use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};

/// Longest line read. An editor's prompt with embedded files fits easily; a longer line is
/// answered with an error and skipped to its end without being held.
pub(crate) const MAX_LINE_BYTES: usize = 8 << 20;
/// Deepest nesting accepted in one message (checked before parsing).
const MAX_DEPTH: usize = 64;

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// ACP's "Resource not found" (an unknown session).
pub(crate) const NOT_FOUND: i64 = -32002;

/// One line of input, classified.
#[derive(Debug, PartialEq)]
pub(crate) enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// An answer to a request the bridge sent (`session/request_permission`).
    Response {
        id: Value,
        result: Result<Value, Value>,
    },
    /// Not a message: answered with this error (id null unless one could be read).
    Bad {
        id: Value,
        code: i64,
        message: String,
    },
}

/// What [`read_line`] found.
pub(crate) enum Line {
    Text(Vec<u8>),
    /// The line was longer than [`MAX_LINE_BYTES`]; it was skipped.
    TooLong,
    Eof,
}

/// Reads one line (without its `\n`), never holding more than [`MAX_LINE_BYTES`].
pub(crate) fn read_line(r: &mut impl BufRead) -> io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let (used, done) = {
            let buf = match r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(match (too_long, line.is_empty()) {
                    (true, _) => Line::TooLong,
                    (false, true) => Line::Eof,
                    (false, false) => Line::Text(line),
                });
            }
            let (chunk, done) = match memchr::memchr(b'\n', buf) {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if !too_long {
                if line.len() + chunk.len() > MAX_LINE_BYTES {
                    too_long = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(chunk);
                }
            }
            (done.unwrap_or(buf.len()), done.is_some())
        };
        r.consume(used);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Text(line) });
        }
    }
}

/// Classifies one line. Blank lines are `None` (ignored, as editors may send them).
pub(crate) fn parse(line: &[u8]) -> Option<Incoming> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    if crate::util::json::too_deep(line, MAX_DEPTH).is_some() {
        return Some(bad(Value::Null, INVALID_REQUEST, &format!("message nests deeper than {MAX_DEPTH} levels")));
    }
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Some(bad(Value::Null, PARSE_ERROR, &format!("parse error: {e}"))),
    };
    let Value::Object(mut m) = v else {
        return Some(bad(
            Value::Null,
            INVALID_REQUEST,
            "a message must be a JSON object (batches are not used by ACP)",
        ));
    };
    let id = m.remove("id");
    let id_ok = matches!(id, Some(Value::String(_)) | Some(Value::Number(_)));
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let id = if id_ok { id.unwrap_or(Value::Null) } else { Value::Null };
        return Some(bad(id, INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\""));
    }
    if id.is_some() && !id_ok {
        return Some(bad(Value::Null, INVALID_REQUEST, "\"id\" must be a string or a number"));
    }
    let params = m.remove("params").unwrap_or(Value::Null);
    match (m.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Some(Incoming::Request { id, method, params }),
        (Some(Value::String(method)), None) => Some(Incoming::Notification { method, params }),
        (Some(_), id) => Some(bad(id.unwrap_or(Value::Null), INVALID_REQUEST, "\"method\" must be a string")),
        (None, Some(id)) => {
            let result = match (m.remove("result"), m.remove("error")) {
                (Some(r), None) => Ok(r),
                (None, Some(e)) => Err(e),
                _ => return Some(bad(id, INVALID_REQUEST, "a response has exactly one of result and error")),
            };
            Some(Incoming::Response { id, result })
        }
        (None, None) => Some(bad(Value::Null, INVALID_REQUEST, "a message needs a method or an id")),
    }
}

fn bad(id: Value, code: i64, message: &str) -> Incoming {
    Incoming::Bad { id, code, message: message.to_string() }
}

/// The bridge's standard output: one message per line, written whole under a lock. Once a
/// write fails (the editor closed its end), [`Out::gone`] says so and nothing more is written.
pub(crate) struct Out<W: Write> {
    w: Mutex<W>,
    gone: AtomicBool,
}

impl<W: Write> Out<W> {
    pub(crate) fn new(w: W) -> Self {
        Out { w: Mutex::new(w), gone: AtomicBool::new(false) }
    }

    pub(crate) fn gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    fn send(&self, v: &Value) {
        if self.gone() {
            return;
        }
        let mut text = v.to_string();
        text.push('\n');
        let mut w = crate::util::sync::lock(&self.w);
        if w.write_all(text.as_bytes()).and_then(|()| w.flush()).is_err() {
            self.gone.store(true, Ordering::Relaxed);
        }
    }

    pub(crate) fn result(&self, id: &Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    pub(crate) fn error(&self, id: &Value, code: i64, message: &str) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}));
    }

    pub(crate) fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    pub(crate) fn request(&self, id: u64, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<String> {
        let mut r = io::BufReader::with_capacity(7, input);
        let mut out = Vec::new();
        loop {
            match read_line(&mut r).unwrap() {
                Line::Text(t) => out.push(String::from_utf8(t).unwrap()),
                Line::TooLong => out.push("<too long>".into()),
                Line::Eof => return out,
            }
        }
    }

    #[test]
    fn lines_are_split_and_bounded() {
        assert_eq!(lines(b"a\nbc\n\nlast"), ["a", "bc", "", "last"]);
        let mut big = vec![b'x'; MAX_LINE_BYTES + 1];
        big.extend_from_slice(b"\nafter\n");
        assert_eq!(lines(&big), ["<too long>", "after"]);
        let exact = vec![b'y'; MAX_LINE_BYTES];
        assert_eq!(lines(&exact)[0].len(), MAX_LINE_BYTES);
    }

    #[test]
    fn messages_are_classified() {
        let req = parse(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#);
        assert_eq!(
            req,
            Some(Incoming::Request {
                id: json!(1),
                method: "initialize".into(),
                params: json!({"protocolVersion": 1})
            })
        );
        let n = parse(br#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#);
        assert!(matches!(n, Some(Incoming::Notification { .. })));
        let r = parse(br#"{"jsonrpc":"2.0","id":"7","result":{"outcome":{"outcome":"cancelled"}}}"#);
        assert!(matches!(r, Some(Incoming::Response { result: Ok(_), .. })));
        assert_eq!(parse(b"  "), None);
        for (line, code) in [
            (&b"{not json"[..], PARSE_ERROR),
            (b"[1,2]", INVALID_REQUEST),
            (br#"{"id":1,"method":"x"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"method":5}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1}"#, INVALID_REQUEST),
        ] {
            match parse(line) {
                Some(Incoming::Bad { code: c, .. }) => assert_eq!(c, code, "{}", String::from_utf8_lossy(line)),
                other => panic!("{other:?} for {}", String::from_utf8_lossy(line)),
            }
        }
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(matches!(parse(deep.as_bytes()), Some(Incoming::Bad { code: INVALID_REQUEST, .. })));
    }
}
