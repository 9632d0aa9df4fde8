//! What a provider streams beside the answer: the assistant message's reasoning fields
//! ([`MessageState`], kept to be sent back on that message) and the token counts of a call
//! ([`Usage`]). Pure data; built on the turn's worker as the stream is read.

use serde_json::{Map, Value};

use super::wire::ReasoningKey;

/// The assistant message's fields beside `content` and `tool_calls`, as the provider sent
/// them: `reasoning_content` (DeepSeek, Qwen, Kimi, xAI, vLLM), `reasoning` (OpenRouter, Groq,
/// Ollama) and `reasoning_details` (OpenRouter's structured reasoning, fragments merged by
/// `index`). A key the stream used is kept even when its text stayed empty: a provider that
/// sends `"reasoning_content": ""` wants the field back.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct MessageState {
    pub(crate) reasoning_content: Option<String>,
    pub(crate) reasoning: Option<String>,
    pub(crate) reasoning_details: Vec<Value>,
}

impl MessageState {
    pub(crate) fn push_text(&mut self, key: ReasoningKey, text: &str) {
        let field = match key {
            ReasoningKey::Content => &mut self.reasoning_content,
            ReasoningKey::Plain => &mut self.reasoning,
        };
        field.get_or_insert_with(String::new).push_str(text);
    }

    /// The fields of a whole (non-streamed) message.
    pub(crate) fn of_message(msg: &Value) -> Self {
        let text = |k: &str| msg.get(k).and_then(Value::as_str).map(str::to_string);
        let mut state = MessageState {
            reasoning_content: text("reasoning_content"),
            reasoning: text("reasoning"),
            reasoning_details: Vec::new(),
        };
        if let Some(items) = msg.get("reasoning_details").and_then(Value::as_array) {
            merge_details(&mut state.reasoning_details, items.iter().filter(|i| i.is_object()).cloned().collect());
        }
        state
    }

    /// The reasoning text to show: `reasoning_content`, else `reasoning`, else the text of
    /// the details.
    pub(crate) fn shown(&self) -> String {
        match (&self.reasoning_content, &self.reasoning) {
            (Some(t), _) | (None, Some(t)) => t.clone(),
            (None, None) => self.reasoning_details.iter().filter_map(Self::detail_text).collect(),
        }
    }

    /// Bytes of the details (the cap counts them with the answer).
    pub(crate) fn extra_bytes(&self) -> usize {
        self.reasoning_details.iter().map(|d| d.to_string().len()).sum()
    }

    /// The readable text of one `reasoning_details` item (`reasoning.text` or
    /// `reasoning.summary`; encrypted items have none).
    pub(crate) fn detail_text(item: &Value) -> Option<&str> {
        item.get("text").or_else(|| item.get("summary")).and_then(Value::as_str).filter(|t| !t.is_empty())
    }

    /// The fields as they go back on the message (only the keys the provider used).
    pub(crate) fn to_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if let Some(t) = &self.reasoning_content {
            m.insert("reasoning_content".into(), Value::String(t.clone()));
        }
        if let Some(t) = &self.reasoning {
            m.insert("reasoning".into(), Value::String(t.clone()));
        }
        if !self.reasoning_details.is_empty() {
            m.insert("reasoning_details".into(), Value::Array(self.reasoning_details.clone()));
        }
        m
    }
}

/// Merges streamed `reasoning_details` fragments into `into`: an item with the `index` (or,
/// without one, the type) of the last item continues it, its `text`, `summary` and `data`
/// strings appended and its other keys set where still missing; any other item is new.
pub(crate) fn merge_details(into: &mut Vec<Value>, items: Vec<Value>) {
    for item in items {
        let Value::Object(fields) = item else { continue };
        let same = |last: &Map<String, Value>| match (fields.get("index"), last.get("index")) {
            (Some(a), Some(b)) => a == b,
            (None, None) => fields.get("type") == last.get("type"),
            _ => false,
        };
        let target = into
            .iter_mut()
            .rev()
            .find_map(|v| v.as_object_mut().filter(|last| fields.contains_key("index") || same(last)))
            .filter(|last| same(last));
        match target {
            Some(last) => {
                for (k, v) in fields {
                    match (last.get_mut(&k), v) {
                        (Some(Value::String(old)), Value::String(more))
                            if matches!(k.as_str(), "text" | "summary" | "data") =>
                        {
                            old.push_str(&more)
                        }
                        (Some(old), v) if old.is_null() || old.as_str() == Some("") => *old = v,
                        (Some(_), _) => {}
                        (None, v) => {
                            last.insert(k, v);
                        }
                    }
                }
            }
            None => into.push(Value::Object(fields)),
        }
    }
}

/// The token counts a provider reported for one model call (its last `usage` object, or
/// Groq's `x_groq.usage`). A count the provider did not send is `None`. For the caller to
/// use; nothing here records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Usage {
    pub(crate) prompt_tokens: Option<u64>,
    pub(crate) completion_tokens: Option<u64>,
    pub(crate) total_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache: OpenAI's
    /// `prompt_tokens_details.cached_tokens`, DeepSeek's `prompt_cache_hit_tokens`.
    pub(crate) cached_tokens: Option<u64>,
    /// DeepSeek's `prompt_cache_miss_tokens`.
    pub(crate) cache_miss_tokens: Option<u64>,
    /// `completion_tokens_details.reasoning_tokens`: part of the completion tokens.
    pub(crate) reasoning_tokens: Option<u64>,
}

impl Usage {
    pub(crate) fn from_value(u: &Value) -> Usage {
        let n = |path: &str| u.pointer(path).and_then(Value::as_u64);
        Usage {
            prompt_tokens: n("/prompt_tokens"),
            completion_tokens: n("/completion_tokens"),
            total_tokens: n("/total_tokens"),
            cached_tokens: n("/prompt_tokens_details/cached_tokens").or_else(|| n("/prompt_cache_hit_tokens")),
            cache_miss_tokens: n("/prompt_cache_miss_tokens"),
            reasoning_tokens: n("/completion_tokens_details/reasoning_tokens"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn details_fragments_merge_by_index() {
        let mut d = Vec::new();
        merge_details(
            &mut d,
            vec![json!({"type":"reasoning.text","text":"Let ","index":0,"format":"anthropic-claude-v1"})],
        );
        merge_details(&mut d, vec![json!({"type":"reasoning.text","text":"me see","index":0})]);
        merge_details(&mut d, vec![json!({"type":"reasoning.text","signature":"sig","index":0})]);
        merge_details(&mut d, vec![json!({"type":"reasoning.encrypted","data":"abc","index":1})]);
        assert_eq!(
            d,
            [
                json!({"type":"reasoning.text","text":"Let me see","index":0,"format":"anthropic-claude-v1","signature":"sig"}),
                json!({"type":"reasoning.encrypted","data":"abc","index":1})
            ]
        );
        let mut plain = Vec::new();
        merge_details(
            &mut plain,
            vec![json!({"type":"reasoning.text","text":"A"}), json!({"type":"reasoning.text","text":"B"})],
        );
        merge_details(&mut plain, vec![json!({"type":"reasoning.summary","summary":"S"}), json!(7)]);
        assert_eq!(
            plain,
            [json!({"type":"reasoning.text","text":"AB"}), json!({"type":"reasoning.summary","summary":"S"})]
        );
    }

    #[test]
    fn usage_of_each_provider() {
        let openai = json!({"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,
            "prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":3}});
        assert_eq!(
            Usage::from_value(&openai),
            Usage {
                prompt_tokens: Some(10),
                completion_tokens: Some(5),
                total_tokens: Some(15),
                cached_tokens: Some(8),
                cache_miss_tokens: None,
                reasoning_tokens: Some(3)
            }
        );
        let deepseek = json!({"prompt_tokens":9,"prompt_cache_hit_tokens":4,"prompt_cache_miss_tokens":5});
        let u = Usage::from_value(&deepseek);
        assert_eq!((u.cached_tokens, u.cache_miss_tokens), (Some(4), Some(5)));
        assert_eq!(Usage::from_value(&json!({"prompt_tokens":"x"})), Usage::default());
    }

    #[test]
    fn state_keeps_the_keys_used_even_empty() {
        let mut s = MessageState::default();
        s.push_text(ReasoningKey::Content, "");
        assert_eq!(Value::Object(s.to_map()), json!({"reasoning_content":""}));
        s.push_text(ReasoningKey::Plain, "hm");
        assert_eq!(s.shown(), "");
        let m = MessageState::of_message(
            &json!({"content":"x","reasoning":"why","reasoning_details":[{"type":"reasoning.text","text":"why"}]}),
        );
        assert_eq!(m.shown(), "why");
        assert_eq!(
            Value::Object(m.to_map()),
            json!({"reasoning":"why","reasoning_details":[{"type":"reasoning.text","text":"why"}]})
        );
    }
}
