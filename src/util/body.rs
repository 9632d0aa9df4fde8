//! The one reader of JSON bodies: [`extract`] deserialises a request body (or [`parse`] any JSON
//! value, such as the approval policy file or an MCP catalog entry) into its model, a private
//! `#[derive(Deserialize)] struct` that implements [`Model`], and answers FastAPI/pydantic v2's
//! 422 items ([`Issue`], docs/http-api.md §1) when it does not fit: every bad field, in
//! pydantic's order ([`summary`] words them as one line for a log). Pure; runs on whichever
//! thread reads the value (the HTTP thread and its helpers; start-up for the files).
//!
//! How a model is read (the design of `tool::args`, with pydantic's rules):
//! - every declared field is offered in declaration order. An absent one is `None` for an
//!   `Option` and `missing` (input: the whole object) for anything else; a present one, `null`
//!   included, goes to the field's type. So `Option<String>` is "may be left out, a string when
//!   given" and `Option<Option<String>>` is "may be left out or `null`";
//! - a value of the wrong JSON type is an item named by what the field's type asked serde for
//!   (a string: `string_type`; a bool: `bool_type`; an integer: `int_type`; a float:
//!   `float_type`; a sequence: `list_type`; a map: `dict_type`; an enum: `literal_error`), with
//!   the value as input. The readers here give pydantic's lax and collecting forms ([`LaxBool`],
//!   [`List`], [`Dict`], [`OneOf`], [`Nested`]); a route's own reader refuses with [`refuse`];
//! - every bad field is reported. Serde's derived reader stops at the first error, so after a
//!   field fails its items are kept and the model is read again without that field being
//!   offered, until a run gets through every offered field (the skipped fields' "missing field"
//!   at its end is no issue). That is at most one run per field plus one, and only when
//!   something is wrong;
//! - keys the model does not declare are ignored, or ([`Extras::Forbid`]) each is an
//!   `extra_forbidden` item, listed in key order before the fields' items;
//! - a value that is not an object is refused as the model says ([`NonObject`]);
//! - a refusal lists at most [`MAX_ISSUES`] items.
//!
//! Locations are relative to the value read; [`extract`] puts `"body"` in front. A list item is
//! located by its index written as a string (`["body", "roots", "0"]`), as the API always has.
//! Serde aliases, `flatten` and `#[serde(default)]` are not supported (an absent field is offered
//! as absent, so a default is never asked for).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::pydantic::{Issue, Loc};

/// Items one refusal lists at most, the first ones found. pydantic has no bound, but a 12 MiB
/// body of bad list items would be answered with gigabytes.
pub(crate) const MAX_ISSUES: usize = 1_000;

/// What a model does with keys it does not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extras {
    Ignore,
    /// Each is an `extra_forbidden` item (pydantic's `extra="forbid"`).
    Forbid,
}

/// What a model does with a value that is not a JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NonObject {
    /// One item at the value itself.
    Refuse { kind: &'static str, msg: &'static str },
    /// Read it as an object without keys: every required field is `missing`, with the value
    /// as input.
    NoFields,
}

impl NonObject {
    /// A request body that is not an object (FastAPI's answer).
    pub(crate) const BODY: NonObject = NonObject::Refuse {
        kind: "model_attributes_type",
        msg: "Input should be a valid dictionary or object to extract fields from",
    };
}

/// A struct read by [`extract`]: its pydantic configuration.
pub(crate) trait Model: DeserializeOwned {
    const EXTRAS: Extras = Extras::Ignore;
    const NON_OBJECT: NonObject = NonObject::BODY;
}

/// A request body as `T`, or every issue located from `"body"`.
pub(crate) fn extract<T: Model>(body: &Value) -> Result<T, Vec<Issue>> {
    parse(body).map_err(at_body)
}

/// `value` as `T`, or every issue located from the value itself.
pub(crate) fn parse<T: Model>(value: &Value) -> Result<T, Vec<Issue>> {
    read_model(value, T::EXTRAS, T::NON_OBJECT)
}

/// Issues located from the value, located from the body that held it.
pub(crate) fn at_body(issues: Vec<Issue>) -> Vec<Issue> {
    issues.into_iter().map(|i| i.under("body")).collect()
}

/// `value` as any `T` (no model rules around it), for readers that check elements one by one.
pub(crate) fn check<T: DeserializeOwned>(value: &Value) -> Result<T, Vec<Issue>> {
    T::deserialize(ValueDe(value)).map_err(|e| e.into_issues(value))
}

/// A reader's refusal: `issues`, located from the value the reader was given, each with its
/// input. Use from a `Deserialize` impl or a `deserialize_with` function.
///
/// A generic reader can only fail through `serde::de::Error`, so the items travel as text,
/// marked, and [`Refusal`] reads them back; any other deserializer shows them as JSON.
pub(crate) fn refuse<E: de::Error>(issues: Vec<Issue>) -> E {
    E::custom(format_args!("{MARK}{}", serde_json::to_string(&issues).unwrap_or_default()))
}

const MARK: &str = "\u{0}pydantic-items:";

/// Issues as one line for a log or a start-up error: `tools.rm: Extra inputs are not
/// permitted; …` (the location joined with `.`, as the web client shows it).
pub(crate) fn summary(issues: &[Issue]) -> String {
    let one = |i: &Issue| {
        let at: Vec<String> = i
            .loc
            .iter()
            .map(|l| match l {
                Loc::Key(k) => k.clone(),
                Loc::Index(n) => n.to_string(),
            })
            .collect();
        format!("{}: {}", at.join("."), i.msg)
    };
    issues.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// pydantic's message for a value outside `choices`: "Input should be 'a', 'b' or 'c'".
pub(crate) fn choices_msg(choices: &[&str]) -> String {
    let quoted: Vec<String> = choices.iter().map(|c| format!("'{c}'")).collect();
    match quoted.split_last() {
        None => "Input should be a valid choice".into(),
        Some((last, [])) => format!("Input should be {last}"),
        Some((last, rest)) => format!("Input should be {} or {last}", rest.join(", ")),
    }
}

/// pydantic's lax boolean strings.
pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Some(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Some(false),
        _ => None,
    }
}

/// A lax boolean, as pydantic reads one: `true`/`false`, `0`/`1` and [`parse_bool`]'s
/// strings; anything else (`null` too) is `bool_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaxBool(pub(crate) bool);

impl<'de> Deserialize<'de> for LaxBool {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let b = match &v {
            Value::Bool(b) => Some(*b),
            Value::String(s) => parse_bool(s),
            Value::Number(n) => match n.as_i64() {
                Some(0) => Some(false),
                Some(1) => Some(true),
                _ => None,
            },
            _ => None,
        };
        b.map(LaxBool).ok_or_else(|| refuse(vec![Issue::new("bool_type", &[], "Input should be a valid boolean", v)]))
    }
}

/// A list whose every bad item is reported (`list_type` for a non-list). Items are taken one at
/// a time, each copied only while it is checked, so a 12 MiB body of bad items is not held twice.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct List<T>(pub(crate) Vec<T>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Items<T>(std::marker::PhantomData<T>);
        impl<'de, T: DeserializeOwned> Visitor<'de> for Items<T> {
            type Value = List<T>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List<T>, A::Error> {
                let mut i = 0usize;
                let next = || {
                    let item = seq.next_element::<Value>()?.map(|v| (i.to_string(), v));
                    i += 1;
                    Ok(item)
                };
                let mut out = Vec::new();
                each_checked(next, |_, x| out.push(x))?;
                Ok(List(out))
            }
        }
        d.deserialize_seq(Items(std::marker::PhantomData))
    }
}

/// An object whose every bad value is reported at its key (`dict_type` for a non-object),
/// taken one entry at a time like [`List`]'s items.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dict<T>(pub(crate) BTreeMap<String, T>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Dict<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<T>(std::marker::PhantomData<T>);
        impl<'de, T: DeserializeOwned> Visitor<'de> for Entries<T> {
            type Value = Dict<T>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a dictionary")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Dict<T>, A::Error> {
                let mut out = BTreeMap::new();
                each_checked(
                    || map.next_entry::<String, Value>(),
                    |k, x| {
                        out.insert(k, x);
                    },
                )?;
                Ok(Dict(out))
            }
        }
        d.deserialize_map(Entries(std::marker::PhantomData))
    }
}

/// Checks each `(location, value)` that `next` yields as a `T` and hands the good ones to
/// `keep`; the bad ones' items, located under their key or index, are the refusal (at most
/// [`MAX_ISSUES`], after which the rest is not read).
fn each_checked<T: DeserializeOwned, E: de::Error>(
    mut next: impl FnMut() -> Result<Option<(String, Value)>, E>,
    mut keep: impl FnMut(String, T),
) -> Result<(), E> {
    let mut issues = Vec::new();
    while let Some((at, item)) = next()? {
        match check::<T>(&item) {
            Ok(x) => keep(at, x),
            Err(e) => issues.extend(e.into_iter().map(|is| is.under(&at))),
        }
        if issues.len() >= MAX_ISSUES {
            break;
        }
    }
    if issues.is_empty() {
        Ok(())
    } else {
        Err(refuse(issues))
    }
}

/// A closed set of strings (pydantic's `Literal[...]`).
pub(crate) trait Choice: Sized {
    /// Every accepted string, in the order pydantic's message lists them.
    const CHOICES: &'static [&'static str];
    fn parse(s: &str) -> Option<Self>;
}

/// One of `T`'s [`Choice::CHOICES`], else `literal_error` ([`choices_msg`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OneOf<T>(pub(crate) T);

impl<'de, T: Choice> Deserialize<'de> for OneOf<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match v.as_str().and_then(T::parse) {
            Some(t) => Ok(OneOf(t)),
            None => Err(refuse(vec![Issue::new("literal_error", &[], choices_msg(T::CHOICES), v)])),
        }
    }
}

/// A model inside a model, read with its own [`Model`] rules; its items are located under the
/// field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Nested<T>(pub(crate) T);

impl<'de, T: Model> Deserialize<'de> for Nested<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        parse::<T>(&v).map(Nested).map_err(refuse)
    }
}

/// Reads `T` from `value`, again without each field that failed, until every field was read.
fn read_model<T: DeserializeOwned>(value: &Value, extras: Extras, non_object: NonObject) -> Result<T, Vec<Issue>> {
    let no_fields = Map::new();
    let map = match (value, non_object) {
        (Value::Object(m), _) => m,
        (_, NonObject::NoFields) => &no_fields,
        (_, NonObject::Refuse { kind, msg }) => return Err(vec![Issue::new(kind, &[], msg, value.clone())]),
    };
    let names: Cell<&'static [&'static str]> = Cell::new(&[]);
    let mut skip: Vec<&'static str> = Vec::new();
    let mut issues = Vec::new();
    let read = loop {
        match T::deserialize(ModelDe { whole: value, map, skip: &skip, names: &names }) {
            Ok(t) => break Some(t),
            Err(Refusal { field: Some(f), problem }) if !skip.contains(&f) => {
                issues.extend(Refusal { field: None, problem }.into_issues(value).into_iter().map(|i| i.under(f)));
                if issues.len() >= MAX_ISSUES {
                    break None;
                }
                skip.push(f);
            }
            Err(Refusal { field: None, problem: Problem::NotOffered(f) }) if skip.contains(&f) => break None,
            Err(e) => {
                issues.extend(e.into_issues(value));
                break None;
            }
        }
    };
    if extras == Extras::Forbid {
        let declared = names.get();
        let extra = map.iter().filter(|(k, _)| !declared.contains(&k.as_str()));
        let forbidden: Vec<Issue> = extra
            .take(MAX_ISSUES)
            .map(|(k, v)| Issue::new("extra_forbidden", &[k.as_str()], "Extra inputs are not permitted", v.clone()))
            .collect();
        issues.splice(0..0, forbidden);
    }
    issues.truncate(MAX_ISSUES);
    match read {
        Some(t) if issues.is_empty() => Ok(t),
        _ => Err(issues),
    }
}

/// Why a value does not fit, located from where it arose; serde's error type of this reader.
#[derive(Debug)]
pub(crate) struct Refusal {
    /// The model's field whose value failed, set by the model reader.
    field: Option<&'static str>,
    problem: Problem,
}

#[derive(Debug)]
enum Problem {
    /// Serde's "missing field" after the offered fields: one the model reader did not offer.
    NotOffered(&'static str),
    Items(Vec<Item>),
}

/// An issue whose input may not be known yet: the innermost value reader fills it in.
#[derive(Debug)]
struct Item {
    issue: Issue,
    has_input: bool,
}

/// What a field's type asked serde for, when the JSON value is of another type.
#[derive(Debug, Clone, Copy)]
enum Wanted {
    Str,
    Bool,
    Int,
    Float,
    List,
    Dict,
}

impl Wanted {
    fn issue(self, input: &Value) -> Issue {
        let (kind, msg) = match self {
            Wanted::Str => ("string_type", "Input should be a valid string"),
            Wanted::Bool => ("bool_type", "Input should be a valid boolean"),
            Wanted::Int => ("int_type", "Input should be a valid integer"),
            Wanted::Float => ("float_type", "Input should be a valid number"),
            Wanted::List => ("list_type", "Input should be a valid list"),
            Wanted::Dict => ("dict_type", "Input should be a valid dictionary"),
        };
        Issue::new(kind, &[], msg, input.clone())
    }
}

impl Refusal {
    fn items(items: Vec<Item>) -> Refusal {
        Refusal { field: None, problem: Problem::Items(items) }
    }

    fn one(issue: Issue, has_input: bool) -> Refusal {
        Refusal::items(vec![Item { issue, has_input }])
    }

    fn missing(field: &str) -> Issue {
        Issue::new("missing", &[field], "Field required", Value::Null)
    }

    /// Items not yet given an input take `v`; a nested model's field that was not there is
    /// `missing` with `v`, the object, as input.
    fn input(self, v: &Value) -> Refusal {
        let items = match self.problem {
            Problem::NotOffered(f) => {
                vec![Item { issue: Issue { input: v.clone(), ..Refusal::missing(f) }, has_input: true }]
            }
            Problem::Items(items) => items
                .into_iter()
                .map(|mut it| {
                    if !it.has_input {
                        it.issue.input = v.clone();
                        it.has_input = true;
                    }
                    it
                })
                .collect(),
        };
        Refusal { field: self.field, problem: Problem::Items(items) }
    }

    /// One level down: `key` goes in front of every location.
    fn under(self, key: &str) -> Refusal {
        let items = match self.problem {
            Problem::NotOffered(f) => vec![Item { issue: Refusal::missing(f), has_input: false }],
            Problem::Items(items) => items,
        };
        let items = items.into_iter().map(|it| Item { issue: it.issue.under(key), has_input: it.has_input }).collect();
        Refusal { field: self.field, problem: Problem::Items(items) }
    }

    fn into_issues(self, whole: &Value) -> Vec<Issue> {
        match self.input(whole).problem {
            Problem::Items(items) => items.into_iter().map(|it| it.issue).collect(),
            Problem::NotOffered(_) => unreachable!("input() names every field"),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::NotOffered(field) => write!(f, "missing field {field}"),
            Problem::Items(items) => {
                let msgs: Vec<&str> = items.iter().map(|it| it.issue.msg.as_str()).collect();
                f.write_str(&msgs.join("; "))
            }
        }
    }
}

impl std::error::Error for Refusal {}

impl de::Error for Refusal {
    /// A reader's [`refuse`]; any other text (serde's own rare refusals) is a `value_error`.
    fn custom<T: fmt::Display>(msg: T) -> Self {
        let text = msg.to_string();
        if let Some(issues) = text.strip_prefix(MARK).and_then(|j| serde_json::from_str::<Vec<Issue>>(j).ok()) {
            return Refusal::items(issues.into_iter().map(|issue| Item { issue, has_input: true }).collect());
        }
        Refusal::one(Issue::new("value_error", &[], format!("Value error, {text}"), Value::Null), false)
    }

    /// A visitor that wanted another value (an integer out of its type's range, say).
    fn invalid_type(_: de::Unexpected, expected: &dyn de::Expected) -> Self {
        Refusal::one(Issue::new("value_error", &[], format!("Input should be {expected}"), Value::Null), false)
    }

    fn invalid_value(unexp: de::Unexpected, expected: &dyn de::Expected) -> Self {
        Self::invalid_type(unexp, expected)
    }

    fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
        Refusal::one(Issue::new("literal_error", &[], choices_msg(expected), Value::Null), false)
    }

    fn missing_field(field: &'static str) -> Self {
        Refusal { field: None, problem: Problem::NotOffered(field) }
    }
}

/// The model's object: a struct reads its declared fields in declaration order, but those in
/// `skip`; anything else reads the whole value.
struct ModelDe<'a> {
    whole: &'a Value,
    map: &'a Map<String, Value>,
    skip: &'a [&'static str],
    /// The declared fields, for [`Extras::Forbid`].
    names: &'a Cell<&'static [&'static str]>,
}

impl<'de> Deserializer<'de> for ModelDe<'de> {
    type Error = Refusal;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        ValueDe(self.whole).deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refusal> {
        self.names.set(fields);
        visitor.visit_map(Fields { de: self, fields, next: 0 })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Offers the declared fields in order; an absent one as [`Absent`].
struct Fields<'a> {
    de: ModelDe<'a>,
    fields: &'static [&'static str],
    /// Index of the next field to consider.
    next: usize,
}

impl<'de> MapAccess<'de> for Fields<'de> {
    type Error = Refusal;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Refusal> {
        while let Some(&name) = self.fields.get(self.next) {
            self.next += 1;
            if !self.de.skip.contains(&name) {
                return seed.deserialize(BorrowedStrDeserializer::new(name)).map(Some);
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Refusal> {
        let name = *self.fields.get(self.next.wrapping_sub(1)).expect("serde asks for a value after its key");
        let read = match self.de.map.get(name) {
            None => seed.deserialize(Absent(self.de.whole)),
            Some(v) => seed.deserialize(Present(v)),
        };
        read.map_err(|e| Refusal { field: Some(name), problem: e.problem })
    }
}

/// A declared field the object does not have: `None` for an `Option`, else `missing` with the
/// whole object as input.
struct Absent<'a>(&'a Value);

impl<'de> Deserializer<'de> for Absent<'de> {
    type Error = Refusal;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Refusal> {
        Err(Refusal::one(Issue::new("missing", &[], "Field required", self.0.clone()), true))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        visitor.visit_none()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// `deserialize_*` methods (that take only a visitor) read as `$to` reads.
macro_rules! same_as {
    ($to:ident: $($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
            self.$to(visitor)
        }
    )*};
}

/// Hands each `deserialize_*` that only takes a visitor to [`ValueDe`], keeping its hint.
macro_rules! to_value {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
            ValueDe(self.0).$method(visitor)
        }
    )*};
}

/// A declared field the object has: an `Option` is `Some` even for `null` (which its inner
/// type reads), the rest reads the value.
struct Present<'a>(&'a Value);

impl<'de> Deserializer<'de> for Present<'de> {
    type Error = Refusal;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        ValueDe(self.0).deserialize_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        visitor.visit_some(ValueDe(self.0))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refusal> {
        ValueDe(self.0).deserialize_struct(name, fields, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refusal> {
        ValueDe(self.0).deserialize_enum(name, variants, visitor)
    }

    to_value! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128 deserialize_f32
        deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_unit deserialize_seq deserialize_map deserialize_identifier
        deserialize_ignored_any
    }

    serde::forward_to_deserialize_any! {
        unit_struct newtype_struct tuple tuple_struct
    }
}

/// One JSON value, read with [`Refusal`] as the error type; a refusal from inside it is given
/// this value as input when it names none.
#[derive(Clone, Copy)]
struct ValueDe<'a>(&'a Value);

impl<'de> ValueDe<'de> {
    fn wrong<T>(self, wanted: Wanted) -> Result<T, Refusal> {
        Err(Refusal::one(wanted.issue(self.0), true))
    }
}

impl<'de> Deserializer<'de> for ValueDe<'de> {
    type Error = Refusal;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        let read = match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (None, Some(i), _) => visitor.visit_i64(i),
                (None, None, Some(f)) => visitor.visit_f64(f),
                (None, None, None) => return self.wrong(Wanted::Float),
            },
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Items { items: items.iter(), at: 0 }),
            Value::Object(m) => visitor.visit_map(Entries { entries: m.iter(), value: None }),
        };
        read.map_err(|e| e.input(self.0))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Bool(_) => self.deserialize_any(visitor),
            _ => self.wrong(Wanted::Bool),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::String(_) => self.deserialize_any(visitor),
            _ => self.wrong(Wanted::Str),
        }
    }

    same_as! { deserialize_str: deserialize_string deserialize_char }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Number(n) if n.is_i64() || n.is_u64() => self.deserialize_any(visitor),
            _ => self.wrong(Wanted::Int),
        }
    }

    /// An unsigned field refuses a negative integer as pydantic's `NonNegativeInt` does.
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Number(n) if n.is_u64() => self.deserialize_any(visitor),
            Value::Number(n) if n.is_i64() => {
                let msg = "Input should be greater than or equal to 0";
                let issue = Issue::new("greater_than_equal", &[], msg, self.0.clone());
                Err(Refusal::one(issue.with_ctx(serde_json::json!({"ge": 0})), true))
            }
            _ => self.wrong(Wanted::Int),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Number(_) => self.deserialize_any(visitor),
            _ => self.wrong(Wanted::Float),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Array(_) => self.deserialize_any(visitor),
            _ => self.wrong(Wanted::List),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            _ => self.wrong(Wanted::Dict),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refusal> {
        self.deserialize_map(visitor)
    }

    /// Unit variants spelled as strings; anything else is a `literal_error` naming them.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::String(s) => {
                visitor.visit_enum(BorrowedStrDeserializer::new(s.as_str())).map_err(|e: Refusal| e.input(self.0))
            }
            _ => Err(Refusal::one(Issue::new("literal_error", &[], choices_msg(variants), self.0.clone()), true)),
        }
    }

    same_as! { deserialize_i64: deserialize_i8 deserialize_i16 deserialize_i32 }

    same_as! { deserialize_u64: deserialize_u8 deserialize_u16 deserialize_u32 }

    same_as! { deserialize_f64: deserialize_f32 }

    serde::forward_to_deserialize_any! {
        i128 u128 bytes byte_buf unit unit_struct newtype_struct tuple tuple_struct identifier ignored_any
    }
}

/// A JSON array's items; a refusal from item `i` is located under `"i"`.
struct Items<'a> {
    items: std::slice::Iter<'a, Value>,
    at: usize,
}

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = Refusal;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Refusal> {
        let Some(v) = self.items.next() else {
            return Ok(None);
        };
        let at = self.at;
        self.at += 1;
        seed.deserialize(ValueDe(v)).map(Some).map_err(|e| e.under(&at.to_string()))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// A JSON object's entries; a refusal from a value is located under its key.
struct Entries<'a> {
    entries: serde_json::map::Iter<'a>,
    value: Option<(&'a str, &'a Value)>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Refusal;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Refusal> {
        let Some((k, v)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some((k.as_str(), v));
        seed.deserialize(BorrowedStrDeserializer::new(k.as_str())).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Refusal> {
        let (k, v) = self.value.take().expect("serde asks for a value after its key");
        seed.deserialize(ValueDe(v)).map_err(|e| e.under(k))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bytes(issues: &[Issue]) -> String {
        serde_json::to_string(&json!({ "detail": issues })).unwrap()
    }

    fn refused<T: Model + fmt::Debug>(v: Value) -> String {
        bytes(&extract::<T>(&v).expect_err("refused"))
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Source {
        User,
        Agent,
        Builtin,
    }

    impl Choice for Source {
        const CHOICES: &'static [&'static str] = &["user", "agent", "builtin"];
        fn parse(s: &str) -> Option<Source> {
            match s {
                "user" => Some(Source::User),
                "agent" => Some(Source::Agent),
                "builtin" => Some(Source::Builtin),
                _ => None,
            }
        }
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Skill {
        name: String,
        content: String,
        source: Option<OneOf<Source>>,
        support_files: Option<Option<Dict<String>>>,
        enabled: Option<LaxBool>,
    }

    impl Model for Skill {}

    /// Every bad field, in declaration order whatever the key order, each with its own input.
    #[test]
    fn every_bad_field_in_declaration_order() {
        assert_eq!(
            refused::<Skill>(
                json!({"enabled": "maybe", "support_files": {"references/a.md": 1}, "source": "nope", "content": 5})
            ),
            r#"{"detail":[{"input":{"content":5,"enabled":"maybe","source":"nope","support_files":{"references/a.md":1}},"loc":["body","name"],"msg":"Field required","type":"missing"},{"input":5,"loc":["body","content"],"msg":"Input should be a valid string","type":"string_type"},{"input":"nope","loc":["body","source"],"msg":"Input should be 'user', 'agent' or 'builtin'","type":"literal_error"},{"input":1,"loc":["body","support_files","references/a.md"],"msg":"Input should be a valid string","type":"string_type"},{"input":"maybe","loc":["body","enabled"],"msg":"Input should be a valid boolean","type":"bool_type"}]}"#
        );
        let ok: Skill = extract(&json!({"name": "a", "content": "b", "support_files": null, "x": 1})).unwrap();
        assert_eq!((ok.source, ok.support_files, ok.enabled), (None, Some(None), None));
    }

    #[test]
    fn every_non_string_map_value_is_reported() {
        assert_eq!(
            refused::<Skill>(json!({"name": "a", "content": "b", "support_files": {"a": 1, "b": "ok", "c": [2]}})),
            r#"{"detail":[{"input":1,"loc":["body","support_files","a"],"msg":"Input should be a valid string","type":"string_type"},{"input":[2],"loc":["body","support_files","c"],"msg":"Input should be a valid string","type":"string_type"}]}"#
        );
        assert_eq!(
            refused::<Skill>(json!({"name": "a", "content": "b", "support_files": []})),
            r#"{"detail":[{"input":[],"loc":["body","support_files"],"msg":"Input should be a valid dictionary","type":"dict_type"}]}"#
        );
    }

    /// Absent and `null` differ: a required string that is `null` is a wrong type, an
    /// `Option<Option<_>>` takes `null`, an `Option<_>` does not.
    #[test]
    fn missing_is_not_null() {
        assert_eq!(
            refused::<Skill>(json!({"name": null, "content": "b", "source": null, "enabled": null})),
            r#"{"detail":[{"input":null,"loc":["body","name"],"msg":"Input should be a valid string","type":"string_type"},{"input":null,"loc":["body","source"],"msg":"Input should be 'user', 'agent' or 'builtin'","type":"literal_error"},{"input":null,"loc":["body","enabled"],"msg":"Input should be a valid boolean","type":"bool_type"}]}"#
        );
    }

    #[test]
    fn lax_booleans_and_literals() {
        for (v, b) in [
            (json!(true), true),
            (json!(0), false),
            (json!(1), true),
            (json!("Yes"), true),
            (json!(" off "), false),
            (json!("T"), true),
        ] {
            let s: Skill = extract(&json!({"name": "a", "content": "b", "enabled": v})).unwrap();
            assert_eq!(s.enabled, Some(LaxBool(b)), "{v}");
        }
        for v in [json!(2), json!("maybe"), json!([true]), json!(0.5)] {
            let e = extract::<Skill>(&json!({"name": "a", "content": "b", "enabled": v})).unwrap_err();
            assert_eq!((e.len(), &*e[0].kind, &e[0].input), (1, "bool_type", &v));
        }
        let s: Skill = extract(&json!({"name": "a", "content": "b", "source": "agent"})).unwrap();
        assert_eq!(s.source, Some(OneOf(Source::Agent)));
        assert_eq!(choices_msg(&["a"]), "Input should be 'a'");
        assert_eq!(choices_msg(&["a", "b"]), "Input should be 'a' or 'b'");
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Title {
        title: String,
    }

    impl Model for Title {
        const NON_OBJECT: NonObject = NonObject::NoFields;
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Roots {
        roots: List<String>,
        count: Option<u32>,
    }

    impl Model for Roots {
        const EXTRAS: Extras = Extras::Forbid;
    }

    #[test]
    fn a_non_object_body_either_way() {
        assert_eq!(
            refused::<Title>(json!([1])),
            r#"{"detail":[{"input":[1],"loc":["body","title"],"msg":"Field required","type":"missing"}]}"#
        );
        assert_eq!(
            refused::<Roots>(json!([1])),
            r#"{"detail":[{"input":[1],"loc":["body"],"msg":"Input should be a valid dictionary or object to extract fields from","type":"model_attributes_type"}]}"#
        );
    }

    /// Extras come first, in key order; every bad list item is reported at its index.
    #[test]
    fn extras_and_list_items() {
        assert_eq!(
            refused::<Roots>(json!({"z": 1, "roots": ["/a", 2, "/b", null], "a": true, "count": "3"})),
            r#"{"detail":[{"input":true,"loc":["body","a"],"msg":"Extra inputs are not permitted","type":"extra_forbidden"},{"input":1,"loc":["body","z"],"msg":"Extra inputs are not permitted","type":"extra_forbidden"},{"input":2,"loc":["body","roots","1"],"msg":"Input should be a valid string","type":"string_type"},{"input":null,"loc":["body","roots","3"],"msg":"Input should be a valid string","type":"string_type"},{"input":"3","loc":["body","count"],"msg":"Input should be a valid integer","type":"int_type"}]}"#
        );
        assert_eq!(
            refused::<Roots>(json!({"roots": "x"})),
            r#"{"detail":[{"input":"x","loc":["body","roots"],"msg":"Input should be a valid list","type":"list_type"}]}"#
        );
        let ok: Roots = extract(&json!({"roots": ["/a"], "count": 3})).unwrap();
        assert_eq!((ok.roots.0, ok.count), (vec!["/a".to_string()], Some(3)));
    }

    /// However many things are wrong, a refusal lists the first [`MAX_ISSUES`].
    #[test]
    fn refusals_are_bounded() {
        let many = MAX_ISSUES * 3;
        let e = extract::<Roots>(&json!({ "roots": vec![0; many] })).unwrap_err();
        assert_eq!(
            (e.len(), serde_json::to_string(&e[0].loc).unwrap()),
            (MAX_ISSUES, r#"["body","roots","0"]"#.into())
        );
        let extras: Map<String, Value> = (0..many).map(|i| (format!("k{i:05}"), json!(1))).collect();
        let mut body = extras.clone();
        body.insert("roots".into(), json!([1]));
        let e = extract::<Roots>(&Value::Object(body)).unwrap_err();
        assert_eq!(
            (e.len(), &*e[0].kind, &*e[MAX_ISSUES - 1].kind),
            (MAX_ISSUES, "extra_forbidden", "extra_forbidden")
        );
        let e = extract::<Skill>(&json!({"support_files": extras})).unwrap_err();
        assert_eq!(e.len(), MAX_ISSUES);
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Section {
        base_url: Option<String>,
    }

    impl Model for Section {
        const EXTRAS: Extras = Extras::Forbid;
        const NON_OBJECT: NonObject = NonObject::Refuse { kind: "model_type", msg: "Input should be a section" };
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        first: Nested<Section>,
        second: Nested<Section>,
    }

    impl Model for Outer {
        const EXTRAS: Extras = Extras::Forbid;
    }

    #[test]
    fn nested_models_keep_their_rules_under_the_field() {
        assert_eq!(
            refused::<Outer>(json!({"first": {"base_url": 5, "x": 1}, "second": "s", "y": 2})),
            r#"{"detail":[{"input":2,"loc":["body","y"],"msg":"Extra inputs are not permitted","type":"extra_forbidden"},{"input":1,"loc":["body","first","x"],"msg":"Extra inputs are not permitted","type":"extra_forbidden"},{"input":5,"loc":["body","first","base_url"],"msg":"Input should be a valid string","type":"string_type"},{"input":"s","loc":["body","second"],"msg":"Input should be a section","type":"model_type"}]}"#
        );
        assert_eq!(
            refused::<Outer>(json!({"second": {}})),
            r#"{"detail":[{"input":{"second":{}},"loc":["body","first"],"msg":"Field required","type":"missing"}]}"#
        );
    }

    /// A route's own reader refuses with its own items, located under the field.
    #[test]
    fn a_readers_refusal_travels_intact() {
        fn not_blank<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
            let s = String::deserialize(d)?;
            if s.trim().is_empty() {
                let issue = Issue::new("value_error", &[], "Value error, blank", Value::String(s))
                    .with_ctx(json!({"error": {}}));
                return Err(refuse(vec![issue]));
            }
            Ok(s)
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Named {
            #[serde(deserialize_with = "not_blank")]
            name: String,
            other: String,
        }
        impl Model for Named {}
        assert_eq!(
            refused::<Named>(json!({"name": " "})),
            r#"{"detail":[{"ctx":{"error":{}},"input":" ","loc":["body","name"],"msg":"Value error, blank","type":"value_error"},{"input":{"name":" "},"loc":["body","other"],"msg":"Field required","type":"missing"}]}"#
        );
        assert_eq!(
            refused::<Named>(json!({"name": 1, "other": "o"})),
            r#"{"detail":[{"input":1,"loc":["body","name"],"msg":"Input should be a valid string","type":"string_type"}]}"#
        );
    }
}
