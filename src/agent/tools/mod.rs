//! The built-in tools (one file each; the contract they implement is `crate::tool`), their
//! settings, the argument helpers they share, and the cache of serialised tool schemas the
//! turn loop sends. Tools run on the worker thread of the turn that calls them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::value::RawValue;

use crate::config::Config;
use crate::tool::Tool;
use crate::util::sync;

pub(crate) mod edit_file;
pub mod exec;
pub(crate) mod glob;
pub mod grep;
pub(crate) mod list_dir;
pub(crate) mod pattern;
pub(crate) mod read_file;
pub(crate) mod regex;
pub(crate) mod save_memory;
pub(crate) mod search_history;
pub(crate) mod web_fetch;
pub(crate) mod web_search;
pub(crate) mod write_file;

/// Serialised `tools[]` entries, so a model request does not rebuild the schemas of the same
/// tools every call. Only long-lived tool objects are kept (built-ins, skill tools: somebody
/// else holds them too); tools an extension builds per call are serialised each time. An entry
/// is reused for the very same object only, so a changed tool never gets a stale schema.
#[derive(Default)]
pub(crate) struct SchemaCache(Mutex<HashMap<String, CachedSchema>>);

/// The tool object a schema was serialised from, and the JSON.
type CachedSchema = (Arc<dyn Tool>, Arc<RawValue>);

impl SchemaCache {
    const MAX_ENTRIES: usize = 512;

    /// `tool.schema()` serialised.
    pub(crate) fn json(&self, tool: &Arc<dyn Tool>) -> Arc<RawValue> {
        let mut map = sync::lock(&self.0);
        if let Some((cached, json)) = map.get(tool.name()) {
            if Arc::ptr_eq(cached, tool) {
                return Arc::clone(json);
            }
        }
        let json: Arc<RawValue> =
            serde_json::value::to_raw_value(&tool.schema()).expect("a Value always serialises").into();
        if Arc::strong_count(tool) > 1 {
            if map.len() >= Self::MAX_ENTRIES {
                map.clear();
            }
            map.insert(tool.name().to_string(), (Arc::clone(tool), Arc::clone(&json)));
        }
        json
    }
}

/// Tunables of the built-in tools, injected at construction (no globals).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolSettings {
    /// Instant Answer endpoint for `web_search` (`CASHCODE_WEB_SEARCH_URL`).
    pub(crate) web_search_url: String,
    /// `web_fetch` may reach loopback, private and link-local addresses
    /// (`CASHCODE_WEB_FETCH_ALLOW_PRIVATE`).
    pub(crate) web_fetch_allow_private: bool,
    /// `exec`'s command timeout (`CASHCODE_EXEC_TIMEOUT_SECS`).
    pub(crate) exec_timeout: Duration,
    /// `exec`'s confinement, built at start-up (`crate::sandbox`).
    pub(crate) sandbox: Arc<crate::sandbox::Sandbox>,
    /// The index `search_history` queries (`crate::search`).
    pub(crate) search: search_history::SearchHandle,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            web_search_url: web_search::DEFAULT_URL.to_string(),
            web_fetch_allow_private: false,
            exec_timeout: exec::DEFAULT_TIMEOUT,
            sandbox: Arc::new(crate::sandbox::Sandbox::off("not configured")),
            search: search_history::SearchHandle::default(),
        }
    }
}

impl ToolSettings {
    pub(crate) fn from_config(config: &Config, sandbox: Arc<crate::sandbox::Sandbox>) -> Self {
        let mut s = ToolSettings { sandbox, ..ToolSettings::default() };
        if let Some(url) = &config.web_search_url {
            s.web_search_url = url.clone();
        }
        s.web_fetch_allow_private = config.web_fetch_allow_private;
        s.exec_timeout = config.exec_timeout;
        s
    }
}

/// The built-in tools with default settings, in the stable order the model sees them.
#[cfg(test)]
pub(crate) fn builtins() -> Vec<Arc<dyn Tool>> {
    builtins_with(&ToolSettings::default(), &crate::secrets::Secrets::new())
}

/// The built-in tools in the contract's order (docs/tools-and-mcp.md §1); the order never changes
/// between requests, so tool lists stay cache-stable.
pub(crate) fn builtins_with(settings: &ToolSettings, secrets: &crate::secrets::Secrets) -> Vec<Arc<dyn Tool>> {
    let policy = crate::util::netguard::AddrPolicy::from_allow_private(settings.web_fetch_allow_private);
    vec![
        Arc::new(save_memory::SaveMemory),
        Arc::new(web_fetch::WebFetch::new(policy)),
        Arc::new(web_search::WebSearch {
            base_url: settings.web_search_url.clone(),
            ..web_search::WebSearch::default()
        }),
        Arc::new(read_file::ReadFile),
        Arc::new(write_file::WriteFile),
        Arc::new(edit_file::EditFile),
        Arc::new(list_dir::ListDir),
        Arc::new(glob::Glob),
        Arc::new(grep::Grep),
        Arc::new(exec::Exec {
            timeout: settings.exec_timeout,
            secrets: secrets.clone(),
            sandbox: Arc::clone(&settings.sandbox),
        }),
        Arc::new(search_history::SearchHistory { search: settings.search.clone() }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_have_contract_names_in_stable_order() {
        let names: Vec<String> = builtins().iter().map(|t| t.name().to_string()).collect();
        assert_eq!(names, crate::tool::BUILTIN_NAMES);
        for t in builtins() {
            let schema = t.schema();
            assert_eq!(schema["function"]["name"], t.name());
            assert_eq!(schema["function"]["parameters"]["type"], "object");
            let required = schema["function"]["parameters"]["required"].as_array().unwrap().clone();
            for r in required {
                let r = r.as_str().unwrap();
                assert!(schema["function"]["parameters"]["properties"].get(r).is_some(), "{r}");
            }
            // Serialising twice gives identical bytes (prompt-cache stability).
            assert_eq!(schema.to_string(), t.schema().to_string());
        }
    }

    #[test]
    fn search_url_comes_from_config() {
        let home = std::env::temp_dir().join(format!("cc-tools-cfg-{}", crate::util::rand::hex(4)));
        let mut config = Config::for_home(&home);
        let sandbox = ToolSettings::default().sandbox;
        let from_config = |c: &Config| ToolSettings::from_config(c, Arc::clone(&sandbox));
        assert_eq!(from_config(&config), ToolSettings::default());
        config.web_search_url = Some("http://127.0.0.1:9/".into());
        assert_eq!(from_config(&config).web_search_url, "http://127.0.0.1:9/");
        assert!(!from_config(&config).web_fetch_allow_private);
        config.web_fetch_allow_private = true;
        assert!(from_config(&config).web_fetch_allow_private);
        config.exec_timeout = Duration::from_secs(2);
        assert_eq!(from_config(&config).exec_timeout, Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(home);
    }
}
