//! LLM providers: the two provider ids, the credentials file (llm.json) and its HTTP-facing
//! validation, the runtime that leases per-provider clients to turns, and the blocking
//! streaming client itself.

pub(crate) mod client;
pub(crate) mod context;
pub mod runtime;
pub mod settings;
pub(crate) mod state;
pub(crate) mod views;
pub(crate) mod wire;

use std::fmt;

/// The only two provider ids accepted anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provider {
    OpenAiCompatible,
    Ollama,
}

impl Provider {
    pub(crate) const ALL: [Provider; 2] = [Provider::OpenAiCompatible, Provider::Ollama];

    pub(crate) fn id(self) -> &'static str {
        match self {
            Provider::OpenAiCompatible => "openai_compatible",
            Provider::Ollama => "ollama",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Provider> {
        match s {
            "openai_compatible" => Some(Provider::OpenAiCompatible),
            "ollama" => Some(Provider::Ollama),
            _ => None,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}
