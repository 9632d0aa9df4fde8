//! The chat-completions wire: the streamed request body ([`ChatRequest`], its messages and
//! tool schemas serialised once and written as they are) and the one reading of a stream
//! chunk ([`parse_chunk`]). Pure data; runs on the turn's worker.
//!
//! Providers differ in what they put in a chunk, so the chunk reading is lenient by design:
//! any JSON value is a chunk, and a field of an unexpected type counts as absent. Only text
//! that is not JSON is an error.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A streamed `POST /chat/completions` body. Fields in this order (the order serialising the
/// same JSON object as a `Value` gives), so consecutive requests of a chat extend each other
/// byte for byte and provider prompt caches keep hitting.
#[derive(Serialize)]
pub(crate) struct ChatRequest<'a> {
    /// Runs of serialised messages, written as one list.
    #[serde(serialize_with = "runs")]
    messages: &'a [&'a [Box<RawValue>]],
    model: &'a str,
    stream: bool,
    /// `"auto"` with tools; absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty", serialize_with = "raws")]
    tools: &'a [Arc<RawValue>],
}

/// A non-streamed request without tools (consolidation, Dream, skill evolution); the same key
/// order as [`ChatRequest`].
#[derive(Debug, Serialize)]
pub(crate) struct CompletionRequest<'a> {
    messages: &'a [Value],
    model: &'a str,
    stream: bool,
}

impl<'a> CompletionRequest<'a> {
    pub(crate) fn new(model: &'a str, messages: &'a [Value]) -> Self {
        CompletionRequest { messages, model, stream: false }
    }

    /// The body's bytes.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("strings and JSON values always serialise")
    }
}

impl<'a> ChatRequest<'a> {
    /// A streamed request; `tools` are serialised `tools[]` entries.
    pub(crate) fn streamed(model: &'a str, messages: &'a [&'a [Box<RawValue>]], tools: &'a [Arc<RawValue>]) -> Self {
        ChatRequest { messages, model, stream: true, tool_choice: (!tools.is_empty()).then_some("auto"), tools }
    }

    /// The body's bytes.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        // Sized up front: the body is mostly its raw parts, and growing it copies them again.
        let messages: usize = self.messages.iter().flat_map(|run| run.iter()).map(|m| m.get().len() + 1).sum();
        let tools: usize = self.tools.iter().map(|t| t.get().len() + 1).sum();
        let mut body = Vec::with_capacity(messages + tools + 2 * self.model.len() + 128);
        serde_json::to_writer(&mut body, self).expect("strings and raw JSON always serialise");
        body
    }

    /// Characters of [`ChatRequest::to_vec`], counted as it is written rather than kept.
    pub(crate) fn chars(&self) -> usize {
        let mut n = CharCount(0);
        serde_json::to_writer(&mut n, self).expect("strings and raw JSON always serialise");
        n.0
    }
}

/// Counts the characters of UTF-8 written to it (every byte but continuation bytes).
struct CharCount(usize);

impl io::Write for CharCount {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // serde_json writes whole strings or pieces cut at ASCII escapes: valid UTF-8 but for
        // a writer of its own, which would then be counted byte by byte.
        self.0 += match std::str::from_utf8(buf) {
            Ok(s) => s.chars().count(),
            Err(_) => buf.iter().filter(|&&b| (b as i8) >= -0x40).count(),
        };
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn runs<S: Serializer>(runs: &[&[Box<RawValue>]], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(runs.iter().flat_map(|run| run.iter()))
}

fn raws<S: Serializer>(items: &[Arc<RawValue>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(items.iter().map(|item| &**item))
}

/// Which key of a delta carried reasoning text: DeepSeek, Qwen, Kimi, xAI and vLLM send
/// `reasoning_content`; OpenRouter, Groq, Ollama and vLLM send `reasoning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReasoningKey {
    Content,
    Plain,
}

/// What one chunk carries, in the order the stream consumer applies it.
#[derive(Debug, PartialEq)]
pub(crate) enum Chunk<'a> {
    /// A reasoning fragment; empty when the key was present with `""` (a provider that
    /// thinks sends it so, and wants the field back even when empty).
    Reasoning(ReasoningKey, Cow<'a, str>),
    /// `reasoning_details` items (OpenRouter): structured reasoning, merged by `index`.
    ReasoningDetails(Vec<Value>),
    Text(Cow<'a, str>),
    /// `extra`: the call's keys beside `index`, `id`, `type` and `function` (Gemini's
    /// `extra_content` with its thought signature), as sent.
    ToolFragment {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: Option<String>,
        extra: Option<Map<String, Value>>,
    },
    Finish(String),
    Usage(Value),
}

/// A stream chunk (`data:` of one SSE event): the first choice, `usage`, and an in-stream
/// `error`. Text is borrowed from the data where it has no escapes.
#[derive(Debug, Default)]
pub(crate) struct StreamChunk<'a> {
    choice: Option<ChunkChoice<'a>>,
    usage: Option<Value>,
    /// Groq's `x_groq` (its `usage` stands in for a missing top-level one).
    x_groq: Option<Value>,
    /// Any non-null value: the provider reports a failure mid-stream.
    pub(crate) error: Option<Value>,
}

#[derive(Debug, Default)]
struct ChunkChoice<'a> {
    /// `Some` when the key holds anything but null (then `message` is not read).
    delta: Option<ChunkDelta<'a>>,
    /// Providers that ignore `stream` per chunk send whole messages.
    message: Option<ChunkDelta<'a>>,
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default)]
struct ChunkDelta<'a> {
    content: Option<Cow<'a, str>>,
    tool_calls: Vec<Value>,
    reasoning_content: Option<Cow<'a, str>>,
    reasoning: Option<Cow<'a, str>>,
    reasoning_details: Vec<Value>,
}

/// Reads one chunk's data (already known to nest at most [`crate::util::json::MAX_DEPTH`]).
pub(crate) fn parse_chunk(data: &str) -> serde_json::Result<StreamChunk<'_>> {
    serde_json::from_str::<Obj<StreamChunk>>(data).map(|o| o.0.unwrap_or_default())
}

impl<'a> StreamChunk<'a> {
    /// Reasoning (`reasoning_content`, `reasoning`, then `reasoning_details`), text
    /// (non-empty), tool-call fragments, finish reason of the first choice, then usage (an
    /// object; Groq's `x_groq.usage` without one).
    pub(crate) fn into_chunks(self) -> Vec<Chunk<'a>> {
        let mut out = Vec::new();
        if let Some(choice) = self.choice {
            if let Some(d) = choice.delta.or(choice.message) {
                if let Some(t) = d.reasoning_content {
                    out.push(Chunk::Reasoning(ReasoningKey::Content, t));
                }
                if let Some(t) = d.reasoning {
                    out.push(Chunk::Reasoning(ReasoningKey::Plain, t));
                }
                let details: Vec<Value> = d.reasoning_details.into_iter().filter(Value::is_object).collect();
                if !details.is_empty() {
                    out.push(Chunk::ReasoningDetails(details));
                }
                if let Some(t) = d.content.filter(|t| !t.is_empty()) {
                    out.push(Chunk::Text(t));
                }
                for (pos, c) in d.tool_calls.iter().enumerate() {
                    out.push(tool_fragment(c, pos));
                }
            }
            if let Some(r) = choice.finish_reason {
                out.push(Chunk::Finish(r.into_owned()));
            }
        }
        let groq = self.x_groq.and_then(|mut x| x.get_mut("usage").map(Value::take));
        if let Some(u) = self.usage.filter(Value::is_object).or(groq.filter(Value::is_object)) {
            out.push(Chunk::Usage(u));
        }
        out
    }
}

/// One `tool_calls[]` entry of a delta: the position in the list stands in for a missing
/// `index`; arguments sent as an object (some local servers) are passed on as its JSON.
fn tool_fragment<'a>(c: &Value, pos: usize) -> Chunk<'a> {
    let index = c.get("index").and_then(Value::as_u64).map(|i| i as usize).unwrap_or(pos);
    let f = c.get("function");
    let extra: Map<String, Value> = c
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| !matches!(k.as_str(), "index" | "id" | "type" | "function") && !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Chunk::ToolFragment {
        extra: (!extra.is_empty()).then_some(extra),
        index,
        id: c.get("id").and_then(Value::as_str).map(str::to_string),
        name: f.and_then(|f| f.get("name")).and_then(Value::as_str).map(str::to_string),
        arguments: f.and_then(|f| f.get("arguments")).and_then(|a| match a {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }),
    }
}

/// An object read field by field into `Self`; keys outside [`Fields::KEYS`] are skipped.
trait Fields<'de>: Default {
    const KEYS: &'static [&'static str];
    /// Reads the value of `KEYS[key]`; a repeated key overwrites (as a `Value` map does).
    fn read<A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error>;
}

impl<'de: 'a, 'a> Fields<'de> for StreamChunk<'a> {
    const KEYS: &'static [&'static str] = &["choices", "usage", "error", "x_groq"];
    fn read<A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error> {
        match key {
            0 => self.choice = map.next_value::<FirstChoice>()?.0,
            1 => self.usage = map.next_value()?,
            2 => self.error = map.next_value()?,
            _ => self.x_groq = map.next_value()?,
        }
        Ok(())
    }
}

impl<'de: 'a, 'a> Fields<'de> for ChunkChoice<'a> {
    const KEYS: &'static [&'static str] = &["delta", "message", "finish_reason"];
    fn read<A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error> {
        match key {
            0 => self.delta = map.next_value::<Obj<ChunkDelta>>()?.0,
            1 => self.message = map.next_value::<Obj<ChunkDelta>>()?.0,
            _ => self.finish_reason = map.next_value::<Text>()?.0,
        }
        Ok(())
    }
}

impl<'de: 'a, 'a> Fields<'de> for ChunkDelta<'a> {
    const KEYS: &'static [&'static str] =
        &["content", "tool_calls", "reasoning_content", "reasoning", "reasoning_details"];
    fn read<A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error> {
        match key {
            0 => self.content = map.next_value::<Text>()?.0,
            1 => self.tool_calls = map.next_value::<List>()?.0,
            2 => self.reasoning_content = map.next_value::<Text>()?.0,
            3 => self.reasoning = map.next_value::<Text>()?.0,
            _ => self.reasoning_details = map.next_value::<List>()?.0,
        }
        Ok(())
    }
}

/// Consumes the rest of a list or map whose contents are not read.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Visitor methods for the JSON values a lenient field does not take: skipped, giving `$v`.
macro_rules! otherwise {
    ($v:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($v)
        }
    };
}

/// An object's fields; `None` for null, `Some(default)` for any other non-object.
struct Obj<T>(Option<T>);

impl<'de, T: Fields<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Fields<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            otherwise!(Obj(Some(T::default())));
            fn visit_unit<E>(self) -> Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Obj<T>, A::Error> {
                skip_seq(seq).map(|()| Obj(Some(T::default())))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Obj<T>, A::Error> {
                let mut t = T::default();
                while let Some(key) = map.next_key_seed(KeyIn(T::KEYS))? {
                    match key {
                        Some(k) => t.read(k, &mut map)?,
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Obj(Some(t)))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A map key as its position in the list (`None`: not one of them), read without allocating.
struct KeyIn(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyIn {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIn {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

/// A string, borrowed when it has no escapes; `None` for any other value.
struct Text<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text<'a>, A::Error> {
                skip_seq(seq).map(|()| Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text<'a>, A::Error> {
                skip_map(map).map(|()| Text(None))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A list's items as values; empty for any other value.
struct List(Vec<Value>);

impl<'de> Deserialize<'de> for List {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = List;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            otherwise!(List(Vec::new()));
            fn visit_unit<E>(self) -> Result<List, E> {
                Ok(List(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element()? {
                    items.push(v);
                }
                Ok(List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<List, A::Error> {
                skip_map(map).map(|()| List(Vec::new()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The first choice: item 0 of a list, or (as a JSON pointer `/choices/0` reads) the value
/// of key `"0"` of an object; `None` for anything else.
struct FirstChoice<'a>(Option<ChunkChoice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = FirstChoice<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            otherwise!(FirstChoice(None));
            fn visit_unit<E>(self) -> Result<FirstChoice<'a>, E> {
                Ok(FirstChoice(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FirstChoice<'a>, A::Error> {
                let first = seq.next_element::<Obj<ChunkChoice>>()?.and_then(|o| o.0);
                skip_seq(seq).map(|()| FirstChoice(first))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FirstChoice<'a>, A::Error> {
                let mut first = None;
                while let Some(key) = map.next_key_seed(KeyIn(&["0"]))? {
                    match key {
                        Some(_) => first = map.next_value::<Obj<ChunkChoice>>()?.0,
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use serde_json::json;

    use super::*;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    /// The body is what serialising the same object as a `Value` gives, and `chars` counts it.
    #[test]
    fn request_bodies() {
        let head = [raw(json!({"role": "system", "content": "你好"}))];
        let context =
            [raw(json!({"role": "user", "content": "x\"y"})), raw(json!({"role": "assistant", "content": "z"}))];
        let tail = [raw(json!({"role": "user", "content": "now"}))];
        let tools: Vec<Arc<RawValue>> = [
            json!({"type": "function", "function": {"name": "a", "description": "搜索"}}),
            json!({"type": "function", "function": {"name": "b"}}),
        ]
        .into_iter()
        .map(|t| Arc::from(raw(t)))
        .collect();
        for model in ["gpt-4o", "模型\"q\"", ""] {
            for n in 0..=tools.len() {
                for runs in [&[&head[..], &tail[..]][..], &[&head[..], &[], &context[..], &tail[..]][..]] {
                    let body = ChatRequest::streamed(model, runs, &tools[..n]).to_vec();
                    let text = String::from_utf8(body).unwrap();
                    let messages: Vec<&Box<RawValue>> = runs.iter().flat_map(|r| r.iter()).collect();
                    let mut expected = json!({"messages": messages, "model": model, "stream": true});
                    if n > 0 {
                        expected["tool_choice"] = json!("auto");
                        expected["tools"] = json!(tools[..n].iter().map(|t| &**t).collect::<Vec<_>>());
                    }
                    assert_eq!(text, expected.to_string(), "{model} {n}");
                    assert_eq!(ChatRequest::streamed(model, runs, &tools[..n]).chars(), text.chars().count());
                }
            }
        }
    }

    fn chunks(data: &str) -> Vec<Chunk<'_>> {
        parse_chunk(data).expect(data).into_chunks()
    }

    fn text(t: &str) -> Chunk<'_> {
        Chunk::Text(Cow::Borrowed(t))
    }

    fn fragment(index: usize, id: Option<&str>, name: Option<&str>, arguments: Option<&str>) -> Chunk<'static> {
        let own = |s: Option<&str>| s.map(str::to_string);
        Chunk::ToolFragment { index, id: own(id), name: own(name), arguments: own(arguments), extra: None }
    }

    #[test]
    fn usual_chunks() {
        let hello = chunks(
            r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"logprobs":null,"finish_reason":null}]}"#,
        );
        assert!(matches!(hello.as_slice(), [Chunk::Text(Cow::Borrowed("Hello"))]), "{hello:?}");
        assert_eq!(
            chunks(r#"{"choices":[{"delta":{"content":"line\nwith \"escapes\" \u4f60\u597d"}}]}"#),
            [Chunk::Text(Cow::Owned("line\nwith \"escapes\" 你好".into()))]
        );
        assert_eq!(
            chunks(r#"{"choices":[{"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}"#),
            [Chunk::Finish("stop".into()), Chunk::Usage(json!({"prompt_tokens": 3}))]
        );
        assert_eq!(chunks(r#"{"choices":[{"message":{"content":"whole"}}]}"#), [text("whole")]);
        assert_eq!(
            chunks(
                r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c1","function":{"name":"grep","arguments":"{\"a\":"}}]}}]}"#
            ),
            [fragment(1, Some("c1"), Some("grep"), Some("{\"a\":"))]
        );
        assert_eq!(
            chunks(r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":{"k":1}}}]}}]}"#),
            [fragment(0, None, None, Some("{\"k\":1}"))]
        );
        assert_eq!(chunks(r#"{"choices":[],"usage":{"total_tokens":9}}"#), [Chunk::Usage(json!({"total_tokens": 9}))]);
        assert_eq!(
            chunks(r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"second choice"}}]}"#),
            [text("a")]
        );
        assert_eq!(chunks(r#"{"usage":null}"#), []);
        assert_eq!(
            parse_chunk(r#"{"error":{"message":"overloaded","code":529}}"#).unwrap().error,
            Some(json!({"message":"overloaded","code":529}))
        );
    }

    /// A field of an unexpected type counts as absent; the rest of the chunk is still read.
    #[test]
    fn odd_types_are_absent() {
        for data in [r#"{"choices":null}"#, "null", "[1,2]", r#""text""#, "7", r#"{"choices":"x","usage":[1]}"#] {
            assert_eq!(chunks(data), [], "{data}");
        }
        assert_eq!(chunks(r#"{"choices":[{"delta":{"content":["part"]}}]}"#), []);
        assert_eq!(chunks(r#"{"choices":[{"delta":{"content":"x"},"finish_reason":1}]}"#), [text("x")]);
        assert_eq!(chunks(r#"{"choices":[7,{"delta":{"content":"second"}}]}"#), []);
        assert_eq!(chunks(r#"{"choices":[{"delta":{"content":"x","tool_calls":{"0":{}}}}]}"#), [text("x")]);
        // A delta of another type is still the delta: `message` is read only without one.
        assert_eq!(chunks(r#"{"choices":[{"delta":5,"message":{"content":"m"}}]}"#), []);
        assert_eq!(chunks(r#"{"choices":[{"delta":null,"message":{"content":"m"}}]}"#), [text("m")]);
        // `/choices/0` of an object, and the last of repeated keys.
        assert_eq!(chunks(r#"{"choices":{"0":{"delta":{"content":"keyed"}}}}"#), [text("keyed")]);
        assert_eq!(chunks(r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#), [text("b")]);
        assert_eq!(parse_chunk(r#"{"error":null}"#).unwrap().error, None);
        for bad in ["", "{", r#"{"choices":[}"#, "{} x"] {
            assert!(parse_chunk(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_completion_request_is_the_bytes_the_json_map_gave() {
        let messages =
            vec![json!({"role": "user", "content": "hi \u{1F600}"}), json!({"role": "system", "content": ""})];
        let want = serde_json::to_vec(&json!({"model": "m", "messages": messages, "stream": false})).unwrap();
        assert_eq!(CompletionRequest::new("m", &messages).to_vec(), want);
    }
}
