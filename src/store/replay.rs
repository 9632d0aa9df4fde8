//! Provider state on stored assistant messages (docs/storage.md "Provider state"): what a
//! provider streamed beside the answer — reasoning fields on the message, extras such as
//! Gemini's `extra_content` on each tool call — stored with the provider and model that
//! produced it, and put back on the model message only for requests to that same provider and
//! model. Pure JSON; used where history becomes model messages (workers).

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::chats::Record;

/// Where a request goes: only state stored by this provider and model is sent back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Replay {
    pub(crate) provider: String,
    pub(crate) model: String,
    /// The model wants `reasoning_content` on every assistant message with tool calls
    /// (DeepSeek's thinking mode): one without stored reasoning gets `""`.
    pub(crate) empty_reasoning: bool,
}

impl Replay {
    pub(crate) fn new(provider: &str, model: &str) -> Self {
        Replay { provider: provider.to_string(), model: model.to_string(), empty_reasoning: false }
    }

    fn produced(&self, state: &Value) -> bool {
        state["provider"] == self.provider.as_str() && state["model"] == self.model.as_str()
    }

    /// Whether `records` hold state of this provider and model with `reasoning_content`.
    pub(crate) fn seen_reasoning_content(&self, records: &[Record]) -> bool {
        records
            .iter()
            .filter_map(|r| r.provider_state.as_ref())
            .any(|s| self.produced(s) && s.pointer("/message/reasoning_content").is_some_and(Value::is_string))
    }
}

/// The stored form: `{"provider", "model", "message"?: {fields}, "tool_calls"?: [extras or
/// null, one per call]}`; `None` when the provider sent nothing beside the answer.
pub(crate) fn stored(
    provider: &str,
    model: &str,
    message: Map<String, Value>,
    calls: Vec<Option<Map<String, Value>>>,
) -> Option<Value> {
    let has_calls = calls.iter().any(Option::is_some);
    if message.is_empty() && !has_calls {
        return None;
    }
    let mut s = Map::new();
    s.insert("provider".into(), Value::String(provider.to_string()));
    s.insert("model".into(), Value::String(model.to_string()));
    if !message.is_empty() {
        s.insert("message".into(), Value::Object(message));
    }
    if has_calls {
        s.insert("tool_calls".into(), calls.into_iter().map(|c| c.map_or(Value::Null, Value::Object)).collect());
    }
    Some(Value::Object(s))
}

/// The reasoning text a stored state holds: `reasoning_content`, else `reasoning`, else the
/// text of `reasoning_details` (what the turn showed for that model call).
pub(crate) fn state_text(state: Option<&Value>) -> Option<Cow<'_, str>> {
    let msg = state?.get("message")?;
    if let Some(t) = msg.get("reasoning_content").or_else(|| msg.get("reasoning")).and_then(Value::as_str) {
        return Some(Cow::Borrowed(t));
    }
    let details: String = msg
        .get("reasoning_details")?
        .as_array()?
        .iter()
        .filter_map(|d| d.get("text").or_else(|| d.get("summary")).and_then(Value::as_str))
        .collect();
    Some(Cow::Owned(details))
}

/// The reasoning a stored answer shows: its `reasoning_content`, else (when the turn's one
/// model call showed exactly what its state keeps, and so was stored once) the state's text.
pub(crate) fn shown(r: &Record) -> Option<Cow<'_, str>> {
    match &r.reasoning_content {
        Some(t) => Some(Cow::Borrowed(t.as_str())),
        None if r.reasoning_ms.is_some() => state_text(r.provider_state.as_ref()),
        None => None,
    }
    .filter(|t| !t.is_empty())
}

/// Puts the stored state back on an assistant model message, when `replay` is the provider
/// and model that produced it: the message fields, and each call's extras on the call at the
/// same position. The fields are set as stored, never over `role`, `content` or `tool_calls`.
pub(crate) fn apply(msg: &mut Value, state: Option<&Value>, replay: Option<&Replay>) {
    let Some(replay) = replay else { return };
    if let (Some(state), Some(m)) = (state.filter(|s| replay.produced(s)), msg.as_object_mut()) {
        if let Some(fields) = state.get("message").and_then(Value::as_object) {
            for (k, v) in fields {
                if !matches!(k.as_str(), "role" | "content" | "tool_calls") {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        if let (Some(extras), Some(Value::Array(calls))) =
            (state.get("tool_calls").and_then(Value::as_array), m.get_mut("tool_calls"))
        {
            for (call, extra) in calls.iter_mut().zip(extras) {
                if let (Some(call), Some(extra)) = (call.as_object_mut(), extra.as_object()) {
                    for (k, v) in extra {
                        if !matches!(k.as_str(), "id" | "type" | "function") {
                            call.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
        }
    }
    if replay.empty_reasoning {
        if let Some(m) = msg.as_object_mut().filter(|m| m.contains_key("tool_calls")) {
            m.entry("reasoning_content").or_insert_with(|| Value::String(String::new()));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn state() -> Value {
        let mut msg = Map::new();
        msg.insert("reasoning_content".into(), json!("think"));
        let mut extra = Map::new();
        extra.insert("extra_content".into(), json!({"google": {"thought_signature": "sig"}}));
        stored("openai_compatible", "m", msg, vec![None, Some(extra)]).unwrap()
    }

    fn message() -> Value {
        json!({"role": "assistant", "content": "c", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "y", "arguments": "{}"}}]})
    }

    #[test]
    fn state_goes_back_to_its_own_provider_and_model_only() {
        let s = state();
        let mut m = message();
        apply(&mut m, Some(&s), Some(&Replay::new("openai_compatible", "m")));
        let mut want = message();
        want["reasoning_content"] = json!("think");
        want["tool_calls"][1]["extra_content"] = json!({"google": {"thought_signature": "sig"}});
        assert_eq!(m, want);
        for other in [Replay::new("openai_compatible", "m2"), Replay::new("ollama", "m")] {
            let mut m = message();
            apply(&mut m, Some(&s), Some(&other));
            assert_eq!(m, message());
        }
        let mut m = message();
        apply(&mut m, Some(&s), None);
        assert_eq!(m, message());
    }

    /// A one-call answer stores its reasoning once (in the state) and still shows it; an
    /// answer whose shown reasoning differs keeps its own copy.
    #[test]
    fn shown_reasoning_comes_from_the_field_or_the_state() {
        let mut r = Record::new("assistant", "a");
        r.provider_state = Some(state());
        assert_eq!(shown(&r), None, "no reasoning was shown");
        r.reasoning_ms = Some(5);
        assert_eq!(shown(&r).as_deref(), Some("think"));
        r.reasoning_content = Some("step one. think".into());
        assert_eq!(shown(&r).as_deref(), Some("step one. think"));
        let mut details = Map::new();
        details.insert(
            "reasoning_details".into(),
            json!([{"type": "reasoning.text", "text": "a"}, {"type": "reasoning.summary", "summary": "b"}]),
        );
        let d = stored("p", "m", details, vec![]).unwrap();
        assert_eq!(state_text(Some(&d)).as_deref(), Some("ab"));
    }

    #[test]
    fn empty_reasoning_where_demanded() {
        let replay = Replay { empty_reasoning: true, ..Replay::new("openai_compatible", "other") };
        let mut m = message();
        apply(&mut m, Some(&state()), Some(&replay));
        assert_eq!(m["reasoning_content"], "");
        let mut plain = json!({"role": "assistant", "content": "a"});
        apply(&mut plain, None, Some(&replay));
        assert_eq!(plain, json!({"role": "assistant", "content": "a"}));
        assert!(stored("p", "m", Map::new(), vec![None]).is_none());
    }
}
