//! The context length a provider reports for a model, turned into a character budget: Ollama's
//! `POST /api/show` (`num_ctx` in `parameters`, else `model_info.<arch>.context_length`), or the
//! model's entry in an OpenAI-compatible `GET /models` when it carries one (`context_length`,
//! `context_window`, `max_model_len`, …). Looked up once per client (one endpoint and key) and
//! model, on a short-lived `llm-context` thread, so a turn never waits for it: until the answer
//! is in, the configured budget alone applies. Bounded: the discovery timeout, a body cap and
//! the JSON depth check; a failure is remembered as "unknown" and not retried.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::client::DISCOVERY_TIMEOUT;
use super::Provider;
use crate::util::json::{too_deep, MAX_DEPTH};
use crate::util::sync;

/// Characters budgeted per reported token: conservative for English (about 4 per token) and
/// close for CJK text (about 1.5), so a request within it fits the model.
pub(crate) const CHARS_PER_TOKEN: u64 = 2;
/// Largest discovery body read (`/api/show` carries the licence and template).
const MAX_BODY: u64 = 4 * 1024 * 1024;
/// Models remembered per client; past it the map starts again.
const MAX_MODELS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lookup {
    Pending,
    Known(Option<u64>),
}

/// Per-client cache of reported context lengths (tokens), by model.
#[derive(Default)]
pub(crate) struct ContextLengths {
    known: Mutex<HashMap<String, Lookup>>,
}

/// What one lookup needs, cloned onto its thread.
pub(crate) struct Endpoint {
    pub(crate) provider: Provider,
    pub(crate) api_base: String,
    pub(crate) bearer: zeroize::Zeroizing<String>,
    pub(crate) agent: ureq::Agent,
}

impl ContextLengths {
    /// The budget in characters the provider allows for `model`, if known. The first call for
    /// a model starts its lookup in the background and answers `None`.
    pub(crate) fn chars(self: &Arc<Self>, model: &str, endpoint: impl FnOnce() -> Endpoint) -> Option<usize> {
        {
            let mut known = sync::lock(&self.known);
            match known.get(model) {
                Some(Lookup::Known(tokens)) => return tokens.map(|t| t.saturating_mul(CHARS_PER_TOKEN) as usize),
                Some(Lookup::Pending) => return None,
                None => {}
            }
            if known.len() >= MAX_MODELS {
                known.retain(|_, l| *l == Lookup::Pending);
            }
            known.insert(model.to_string(), Lookup::Pending);
        }
        let (me, model, ep) = (Arc::clone(self), model.to_string(), endpoint());
        let spawned = std::thread::Builder::new().name("llm-context".into()).stack_size(256 * 1024).spawn(move || {
            let tokens = lookup(&ep, &model);
            log::info!("event=llm.context_length provider={} model={model:?} tokens={tokens:?}", ep.provider);
            sync::lock(&me.known).insert(model, Lookup::Known(tokens));
        });
        if spawned.is_err() {
            sync::lock(&self.known).clear();
        }
        None
    }
}

/// Asks the endpoint; `None` on any failure or when it reports nothing.
fn lookup(ep: &Endpoint, model: &str) -> Option<u64> {
    let read = |resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>| -> Option<Value> {
        let resp = resp.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let bytes = resp.into_body().into_with_config().limit(MAX_BODY).read_to_vec().ok()?;
        if too_deep(&bytes, MAX_DEPTH).is_some() {
            return None;
        }
        serde_json::from_slice(&bytes).ok()
    };
    match ep.provider {
        Provider::Ollama => {
            let root = ep.api_base.trim_end_matches('/').trim_end_matches("/v1");
            let body = serde_json::json!({"model": model, "name": model}).to_string();
            let resp = ep
                .agent
                .post(&format!("{root}/api/show"))
                .config()
                .timeout_global(Some(DISCOVERY_TIMEOUT))
                .build()
                .header("Content-Type", "application/json")
                .send(body.as_bytes());
            ollama_tokens(&read(resp)?)
        }
        Provider::OpenAiCompatible => {
            let resp = ep
                .agent
                .get(&format!("{}/models", ep.api_base))
                .config()
                .timeout_global(Some(DISCOVERY_TIMEOUT))
                .build()
                .header("Authorization", &*zeroize::Zeroizing::new(format!("Bearer {}", *ep.bearer)))
                .header("Accept", "application/json")
                .call();
            openai_tokens(&read(resp)?, model)
        }
    }
}

/// A positive token count below 2^32 (anything else is not a context length).
fn tokens(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| (1..1 << 32).contains(n))
}

/// `num_ctx` from the `parameters` text (what the server actually runs with), else the first
/// `*.context_length` of `model_info`.
pub(crate) fn ollama_tokens(v: &Value) -> Option<u64> {
    let from_params = v.get("parameters").and_then(Value::as_str).and_then(|p| {
        p.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("num_ctx")).then(|| w.next()?.parse::<u64>().ok()).flatten()
        })
    });
    from_params.filter(|n| (1..1 << 32).contains(n)).or_else(|| {
        v.get("model_info")?
            .as_object()?
            .iter()
            .find(|(k, _)| k.ends_with(".context_length"))
            .and_then(|(_, n)| tokens(n))
    })
}

/// The context length in `model`'s entry of a `/models` list, under the names providers use.
pub(crate) fn openai_tokens(v: &Value, model: &str) -> Option<u64> {
    let entry = v.get("data")?.as_array()?.iter().take(super::client::MAX_MODELS).find(|m| m["id"] == model)?;
    ["context_length", "context_window", "max_context_length", "max_model_len", "max_input_tokens"]
        .iter()
        .find_map(|k| entry.get(*k).and_then(tokens))
        .or_else(|| entry.get("top_provider").and_then(|t| t.get("context_length")).and_then(tokens))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_providers_shapes() {
        let show =
            json!({"parameters": "stop \"<|eot|>\"\nnum_ctx 8192", "model_info": {"llama.context_length": 131072}});
        assert_eq!(ollama_tokens(&show), Some(8192));
        assert_eq!(ollama_tokens(&json!({"model_info": {"qwen2.context_length": 32768}})), Some(32768));
        assert_eq!(ollama_tokens(&json!({"model_info": {"x.context_length": -1}})), None);
        assert_eq!(ollama_tokens(&json!({})), None);
        let list =
            json!({"data": [{"id": "a", "context_length": 4096}, {"id": "b", "max_model_len": 16384}, {"id": "c"}]});
        assert_eq!(openai_tokens(&list, "a"), Some(4096));
        assert_eq!(openai_tokens(&list, "b"), Some(16384));
        assert_eq!(openai_tokens(&list, "c"), None);
        assert_eq!(openai_tokens(&list, "zz"), None);
        assert_eq!(openai_tokens(&json!({"data": [{"id": "a", "context_length": "big"}]}), "a"), None);
    }
}
