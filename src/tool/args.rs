//! Typed tool arguments: [`parse_args`] deserialises a tool call's arguments object into the
//! tool's private `#[derive(Deserialize)] struct Args`, and [`ArgError`]'s `Display` is the one
//! wording of a refusal the model reads (`missing required argument 'path'`, `argument 'path'
//! must be a string`). Runs on the worker thread of the turn calling the tool.
//!
//! The reader keeps the tools' long-standing rules, whatever order the model wrote the keys in:
//! - fields are read in the struct's declaration order, so the refusal names the first bad
//!   field declared;
//! - an absent field and a `null` one are the same: missing for a plain field, `None` for an
//!   `Option`;
//! - keys the struct does not declare are ignored.
//!
//! Because every declared field is offered to the struct (absent ones as "missing"), a field
//! that may be left out is an `Option` or uses a reader from [`lenient`]; a bare
//! `#[serde(default)]` would report the field missing. Serde aliases are not supported.

use std::fmt;

use serde::de::value::{BorrowedStrDeserializer, MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::ToolOutput;

/// `args` as the tool's `T`, or the refusal to hand back to the model.
pub(crate) fn parse_args<'a, T: Deserialize<'a>>(args: &'a Map<String, Value>) -> Result<T, ToolOutput> {
    read_args(args).map_err(ToolOutput::from)
}

/// `args` as `T`, or which argument is wrong and how (for tools that word refusals their own way).
pub(crate) fn read_args<'a, T: Deserialize<'a>>(args: &'a Map<String, Value>) -> Result<T, ArgError> {
    T::deserialize(ArgsDe(args))
}

/// Why the arguments do not fit, and which one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArgError {
    /// The argument at fault, as the model spells it.
    pub(crate) field: &'static str,
    pub(crate) problem: Problem,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Problem {
    /// Absent or `null`.
    Missing,
    /// Present with a value the field does not take (wrong type, unknown variant, out of
    /// range); `expected` in serde's words, e.g. "a string".
    Invalid { expected: String },
    /// A field reader's own refusal, in its exact words.
    Refused(String),
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = self.field;
        match &self.problem {
            Problem::Missing => write!(f, "missing required argument '{field}'"),
            Problem::Invalid { expected } => write!(f, "argument '{field}' must be {expected}"),
            Problem::Refused(why) => write!(f, "argument '{field}': {why}"),
        }
    }
}

impl std::error::Error for ArgError {}

impl From<ArgError> for ToolOutput {
    fn from(e: ArgError) -> ToolOutput {
        ToolOutput::error(e.to_string())
    }
}

impl ArgError {
    /// The field is filled in by the reader of the arguments object, which knows it.
    fn new(problem: Problem) -> ArgError {
        ArgError { field: "", problem }
    }

    fn invalid(expected: &dyn de::Expected) -> ArgError {
        ArgError::new(Problem::Invalid { expected: expected.to_string() })
    }
}

impl de::Error for ArgError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ArgError::new(Problem::Refused(msg.to_string()))
    }

    fn invalid_type(_: de::Unexpected, expected: &dyn de::Expected) -> Self {
        ArgError::invalid(expected)
    }

    fn invalid_value(_: de::Unexpected, expected: &dyn de::Expected) -> Self {
        ArgError::invalid(expected)
    }

    fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
        let quoted: Vec<String> = expected.iter().map(|v| format!("`{v}`")).collect();
        let expected = match quoted.as_slice() {
            [one] => one.clone(),
            _ => format!("one of {}", quoted.join(", ")),
        };
        ArgError::new(Problem::Invalid { expected })
    }

    fn missing_field(field: &'static str) -> Self {
        ArgError { field, problem: Problem::Missing }
    }
}

/// Readers for arguments the tools have always been lenient about: a value of the wrong type
/// counts as absent instead of being refused. Use as `#[serde(deserialize_with = "…")]`.
pub(crate) mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    /// The string, or `""` for anything else (absent, null, a number, …).
    pub(crate) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(match Option::<Value>::deserialize(d)? {
            Some(Value::String(s)) => s,
            _ => String::new(),
        })
    }

    /// A non-negative integer; anything else (a float, a negative number, a numeric string) is `None`.
    pub(crate) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Ok(Option::<Value>::deserialize(d)?.and_then(|v| v.as_u64()))
    }

    /// Any JSON number as a float; anything else (a numeric string too) is `None`.
    pub(crate) fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Ok(Option::<Value>::deserialize(d)?.and_then(|v| v.as_f64()))
    }
}

/// The arguments object: structs read their declared fields in order, anything else sees
/// the plain map.
struct ArgsDe<'a>(&'a Map<String, Value>);

impl<'de> Deserializer<'de> for ArgsDe<'de> {
    type Error = ArgError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ArgError> {
        ValueMap(self.0).visit(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ArgError> {
        visitor.visit_map(Fields { args: self.0, fields, next: 0 })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Offers every declared field in declaration order; an absent or null one as [`Absent`].
struct Fields<'a> {
    args: &'a Map<String, Value>,
    fields: &'static [&'static str],
    /// Index of the next field to offer.
    next: usize,
}

impl<'de> MapAccess<'de> for Fields<'de> {
    type Error = ArgError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, ArgError> {
        let Some(&name) = self.fields.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        seed.deserialize(BorrowedStrDeserializer::new(name)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, ArgError> {
        let name = *self.fields.get(self.next.wrapping_sub(1)).expect("serde asks for a value after its key");
        let read = match self.args.get(name) {
            None | Some(Value::Null) => seed.deserialize(Absent),
            Some(v) => seed.deserialize(ValueDe(v)),
        };
        read.map_err(|mut e| {
            if e.field.is_empty() {
                e.field = name;
            }
            e
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.fields.len() - self.next)
    }
}

/// A declared field the model left out or sent as `null`: `None` for an `Option`, missing
/// for anything else.
struct Absent;

impl<'de> Deserializer<'de> for Absent {
    type Error = ArgError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, ArgError> {
        Err(ArgError::new(Problem::Missing))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ArgError> {
        visitor.visit_none()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// One JSON value inside the arguments, read with [`ArgError`] as the error type (so type
/// mismatches arrive here structured, not as serde_json's text).
#[derive(Clone, Copy)]
struct ValueDe<'a>(&'a Value);

impl<'de> IntoDeserializer<'de, ArgError> for ValueDe<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

/// A JSON object's entries as a visited map.
struct ValueMap<'a>(&'a Map<String, Value>);

impl<'de> ValueMap<'de> {
    fn visit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ArgError> {
        let mut map = MapDeserializer::new(self.0.iter().map(|(k, v)| (k.as_str(), ValueDe(v))));
        let out = visitor.visit_map(&mut map)?;
        map.end()?;
        Ok(out)
    }
}

impl<'de> Deserializer<'de> for ValueDe<'de> {
    type Error = ArgError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ArgError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (None, Some(i), _) => visitor.visit_i64(i),
                (None, None, Some(f)) => visitor.visit_f64(f),
                (None, None, None) => Err(de::Error::custom(format!("{n} is not a representable number"))),
            },
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.iter().map(ValueDe));
                let out = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(out)
            }
            Value::Object(m) => ValueMap(m).visit(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ArgError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    /// Unit variants spelled as strings (`"create"`); anything else is refused by the visitor.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ArgError> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(BorrowedStrDeserializer::new(s)),
            _ => self.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().expect("an object").clone()
    }

    fn refusal<T: for<'a> Deserialize<'a> + fmt::Debug>(v: Value) -> String {
        let args = obj(v);
        parse_args::<T>(&args).expect_err("refused").for_model
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Two {
        first: String,
        second: Option<String>,
        third: String,
    }

    #[test]
    fn missing_null_and_wrong_type_use_the_tools_wording() {
        let ok: Two = read_args(&obj(json!({"first": "a", "third": "c", "extra": [1]}))).unwrap();
        assert_eq!(ok, Two { first: "a".into(), second: None, third: "c".into() });
        let ok: Two = read_args(&obj(json!({"first": "a", "second": null, "third": ""}))).unwrap();
        assert_eq!(ok.second, None);
        for (args, text) in [
            (json!({}), "Error: missing required argument 'first'"),
            (json!({"first": null, "third": "c"}), "Error: missing required argument 'first'"),
            (json!({"first": 5, "third": "c"}), "Error: argument 'first' must be a string"),
            (json!({"first": true, "third": "c"}), "Error: argument 'first' must be a string"),
            (json!({"first": ["a"], "third": "c"}), "Error: argument 'first' must be a string"),
            (json!({"first": {"a": 1}, "third": "c"}), "Error: argument 'first' must be a string"),
            (json!({"first": -1.5, "third": "c"}), "Error: argument 'first' must be a string"),
            (json!({"first": "a", "second": 1, "third": "c"}), "Error: argument 'second' must be a string"),
            (json!({"first": "a"}), "Error: missing required argument 'third'"),
        ] {
            assert_eq!(refusal::<Two>(args.clone()), text, "{args}");
        }
    }

    /// The first declared field at fault is reported, whatever the key order or the kind of fault.
    #[test]
    fn the_first_declared_bad_field_wins() {
        assert_eq!(refusal::<Two>(json!({"third": 1})), "Error: missing required argument 'first'");
        assert_eq!(refusal::<Two>(json!({"third": 1, "first": 2})), "Error: argument 'first' must be a string");
        assert_eq!(
            refusal::<Two>(json!({"third": 1, "second": 2, "first": "a"})),
            "Error: argument 'second' must be a string"
        );
        assert_eq!(refusal::<Two>(json!({"second": 2, "first": null})), "Error: missing required argument 'first'");
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Fast,
        Slow,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Typed {
        mode: Mode,
        count: Option<u8>,
        tags: Option<Vec<String>>,
    }

    #[test]
    fn other_types_name_what_was_expected() {
        let ok: Typed = read_args(&obj(json!({"mode": "slow", "count": 7, "tags": ["a"]}))).unwrap();
        assert!(matches!(ok.mode, Mode::Slow) && ok.count == Some(7) && ok.tags.unwrap() == ["a"]);
        assert_eq!(refusal::<Typed>(json!({"mode": "warp"})), "Error: argument 'mode' must be one of `fast`, `slow`");
        assert_eq!(refusal::<Typed>(json!({"mode": 1})), "Error: argument 'mode' must be enum Mode");
        assert_eq!(refusal::<Typed>(json!({"mode": "fast", "count": 300})), "Error: argument 'count' must be u8");
        assert_eq!(refusal::<Typed>(json!({"mode": "fast", "count": "7"})), "Error: argument 'count' must be u8");
        assert_eq!(
            refusal::<Typed>(json!({"mode": "fast", "tags": ["a", 1]})),
            "Error: argument 'tags' must be a string"
        );
        let e = read_args::<Typed>(&obj(json!({}))).unwrap_err();
        assert_eq!(e, ArgError { field: "mode", problem: Problem::Missing });
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Lenient {
        #[serde(deserialize_with = "lenient::string")]
        text: String,
        #[serde(deserialize_with = "lenient::u64")]
        count: Option<u64>,
        #[serde(deserialize_with = "lenient::f64")]
        size: Option<f64>,
    }

    #[test]
    fn lenient_readers_never_refuse() {
        let read = |v: Value| read_args::<Lenient>(&obj(v)).unwrap();
        assert_eq!(read(json!({})), Lenient { text: String::new(), count: None, size: None });
        assert_eq!(read(json!({"text": null, "count": null, "size": null})), read(json!({})));
        assert_eq!(read(json!({"text": 5, "count": "5", "size": "5"})), read(json!({})));
        assert_eq!(read(json!({"text": ["x"], "count": -1, "size": {"a": 1}})), read(json!({})));
        assert_eq!(
            read(json!({"text": "x", "count": 5.0, "size": 2})),
            Lenient { text: "x".into(), count: None, size: Some(2.0) }
        );
        assert_eq!(
            read(json!({"text": " y ", "count": u64::MAX, "size": -2.5, "other": 1})),
            Lenient { text: " y ".into(), count: Some(u64::MAX), size: Some(-2.5) }
        );
    }

    #[test]
    fn nested_values_round_trip() {
        #[derive(Debug, Deserialize)]
        struct Raw {
            v: Value,
        }
        let v = json!({"a": [1, -2, 2.5, "s", null, true, {"b": {}}]});
        let args = obj(json!({ "v": v }));
        assert_eq!(read_args::<Raw>(&args).unwrap().v, v);
    }
}
