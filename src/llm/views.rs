//! The bodies of the LLM settings HTTP surface (`/api/settings/llm…`, docs/llm-settings.md §4) as
//! types: the public view (never the key), the connection test's answer and model discovery.
//!
//! Field order is part of the wire: these bodies were once `serde_json` maps (sorted keys), so
//! every struct declares its fields in key order and clients keep seeing the same bytes. Pure
//! data; built on the HTTP handler thread that asked.

use std::collections::BTreeMap;

use serde::Serialize;

use super::settings::Settings;
use super::Provider;

/// `GET`/`PUT /api/settings/llm`: whether each provider is ready, never the key itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PublicView {
    pub configured: bool,
    pub ollama: OllamaView,
    pub openai_compatible: OpenAiView,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OllamaView {
    pub base_url: String,
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenAiView {
    pub api_key_configured: bool,
    pub base_url: String,
    pub ready: bool,
}

impl PublicView {
    pub fn new(s: &Settings) -> PublicView {
        PublicView {
            configured: s.configured(),
            ollama: OllamaView { base_url: s.ollama_base_url.clone(), ready: s.ready(Provider::Ollama) },
            openai_compatible: OpenAiView {
                api_key_configured: !s.openai_api_key.is_empty(),
                base_url: s.openai_base_url.clone(),
                ready: s.ready(Provider::OpenAiCompatible),
            },
        }
    }
}

/// `POST /api/settings/llm/test` when the provider answered its model list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestView {
    pub message: String,
    pub model_count: usize,
    pub provider: &'static str,
    pub success: bool,
}

impl TestView {
    pub fn new(provider: Provider, model_count: usize) -> TestView {
        TestView {
            message: format!("Connected, found {model_count} models"),
            model_count,
            provider: provider.id(),
            success: true,
        }
    }
}

/// `GET /api/settings/llm/models`: every ready provider's models, and per provider whether it
/// is ready and the category of its failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelsView {
    pub models: Vec<ModelView>,
    /// Keyed by provider id (a map, so sorted like the original).
    pub providers: BTreeMap<&'static str, ProviderState>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelView {
    pub id: String,
    pub provider: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderState {
    /// The failure category, `null` when discovery worked or was not tried.
    pub error: Option<String>,
    pub ready: bool,
}

impl ModelsView {
    /// From each provider's readiness and discovery result, in probe order.
    pub fn new(results: Vec<(Provider, bool, Result<Vec<String>, String>)>) -> ModelsView {
        let mut models = Vec::new();
        let mut providers = BTreeMap::new();
        for (p, ready, r) in results {
            let error = match r {
                Ok(ids) => {
                    models.extend(ids.into_iter().map(|id| ModelView { id, provider: p.id() }));
                    None
                }
                Err(msg) => Some(msg),
            };
            providers.insert(p.id(), ProviderState { error, ready });
        }
        ModelsView { models, providers }
    }
}
