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
pub(crate) struct PublicView {
    pub(crate) configured: bool,
    pub(crate) ollama: OllamaView,
    pub(crate) openai_compatible: OpenAiView,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct OllamaView {
    pub(crate) base_url: String,
    pub(crate) ready: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct OpenAiView {
    pub(crate) api_key_configured: bool,
    pub(crate) base_url: String,
    pub(crate) ready: bool,
}

impl PublicView {
    pub(crate) fn new(s: &Settings) -> PublicView {
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
pub(crate) struct TestView {
    pub(crate) message: String,
    pub(crate) model_count: usize,
    pub(crate) provider: &'static str,
    pub(crate) success: bool,
}

impl TestView {
    pub(crate) fn new(provider: Provider, model_count: usize) -> TestView {
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
pub(crate) struct ModelsView {
    pub(crate) models: Vec<ModelView>,
    /// Keyed by provider id (a map, so sorted like the original).
    pub(crate) providers: BTreeMap<&'static str, ProviderState>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ModelView {
    pub(crate) id: String,
    pub(crate) provider: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ProviderState {
    /// The failure category, `null` when discovery worked or was not tried.
    pub(crate) error: Option<String>,
    pub(crate) ready: bool,
}

impl ModelsView {
    /// From each provider's readiness and discovery result, in probe order.
    pub(crate) fn new(results: Vec<(Provider, bool, Result<Vec<String>, String>)>) -> ModelsView {
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
