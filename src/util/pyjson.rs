//! Python `json.dumps` spacing for serde types: `", "` between items and `": "` after keys,
//! non-ASCII kept raw (serde_json's escaping), fields in declaration order. Some model-facing
//! texts of the original are Python-printed and the model sees them verbatim (skill_load's
//! errors, docs/skills.md §6). Pure; any thread.

use std::io;

use serde::Serialize;
use serde_json::ser::Formatter;

struct PyFormatter;

impl Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }
}

/// `value` printed like Python's `json.dumps(value, ensure_ascii=False)`.
pub(crate) fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
    // Our wire types have string keys and no fallible Serialize impls; writing to a Vec
    // cannot fail.
    value.serialize(&mut ser).expect("wire types serialise");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Serialize)]
    struct Shape<'a> {
        error: &'a str,
        name: &'a str,
        missing: Vec<&'a str>,
        empty: Vec<u8>,
        nested: serde_json::Value,
    }

    #[test]
    fn python_spacing_in_declaration_order() {
        let v = Shape {
            error: "missing_dependency",
            name: "天气",
            missing: vec!["bin:x", "env:\"Y\""],
            empty: vec![],
            nested: json!({"b": 1.5, "a": [true, null], "c": {}}),
        };
        assert_eq!(
            to_string(&v),
            r#"{"error": "missing_dependency", "name": "天气", "missing": ["bin:x", "env:\"Y\""], "empty": [], "nested": {"a": [true, null], "b": 1.5, "c": {}}}"#
        );
    }
}
