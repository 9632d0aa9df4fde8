//! The `Tool` trait every model-callable tool implements, its result projections, and the
//! per-turn context handed to tools. Tools run on the worker thread of the turn that calls them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::config::Config;
use crate::util::cancel::CancelToken;

pub mod edit_file;
pub mod exec;
pub mod glob;
pub mod grep;
pub mod list_dir;
pub mod netguard;
pub mod pattern;
pub mod read_file;
pub mod regex;
pub mod save_memory;
pub mod web_fetch;
pub mod web_search;
pub mod workspace;
pub mod write_file;

/// What a tool call produced, in the contract's three projections (agent-and-memory.md §13).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Text the model sees in the `tool` message.
    pub for_model: String,
    /// Text for the client's `tool_result` preview (cut to 200 code points on the wire); defaults to `for_model`.
    pub preview: Option<String>,
    /// Text stored in history.jsonl; defaults to `for_model`.
    pub for_history: Option<String>,
    /// A structured failure: counted as failed by later consumers (skill evolution).
    pub failed: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput { for_model: text.into(), preview: None, for_history: None, failed: false }
    }

    /// A failure reported to the model as text starting with `Error`.
    pub fn error(text: impl Into<String>) -> Self {
        let t = text.into();
        let t = if t.starts_with("Error") { t } else { format!("Error: {t}") };
        ToolOutput { for_model: t, preview: None, for_history: None, failed: true }
    }

    pub fn preview_text(&self) -> &str {
        self.preview.as_deref().unwrap_or(&self.for_model)
    }

    pub fn history_text(&self) -> &str {
        self.for_history.as_deref().unwrap_or(&self.for_model)
    }

    /// Every projection with the known secret values replaced (the turn loop's one redaction
    /// of tool results before they reach events, history and the model).
    pub fn redacted(self, secrets: &crate::secrets::Secrets) -> ToolOutput {
        let clean = |t: String| match secrets.redact(&t) {
            std::borrow::Cow::Borrowed(_) => t,
            std::borrow::Cow::Owned(r) => r,
        };
        ToolOutput {
            for_model: clean(self.for_model),
            preview: self.preview.map(clean),
            for_history: self.for_history.map(clean),
            failed: self.failed,
        }
    }
}

/// What a turn may change besides history: a working copy of the chat's metadata (the
/// `activated_tools` / `activated_skills` maps tools update) and tools visible for this turn
/// only. Merged into the chat when the turn succeeds, dropped when it fails.
#[derive(Default)]
pub struct TurnState {
    pub metadata: Map<String, Value>,
    /// Turn-only tools (explicitly selected MCP connectors); never persisted.
    pub turn_tools: Vec<Arc<dyn Tool>>,
}

/// Metadata keys a turn owns; everything else (e.g. a title renamed mid-turn) is left alone.
pub const TURN_METADATA_KEYS: [&str; 2] = ["activated_tools", "activated_skills"];

/// Everything a tool may touch, so tools never reach for globals.
#[derive(Clone)]
pub struct TurnCtx {
    pub chat_id: String,
    /// Root of the file and exec tools (canonical path).
    pub workspace: PathBuf,
    /// Directories no file tool may write into (the Skill roots).
    pub protected: Vec<PathBuf>,
    pub memory: Arc<crate::store::memory_files::MemoryFiles>,
    pub cancel: CancelToken,
    pub state: Arc<Mutex<TurnState>>,
}

impl TurnCtx {
    pub fn state(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What extensions prepare before the first model call (ws-protocol.md §6.3).
#[derive(Debug, Default)]
pub struct Preparation {
    /// Bodies joined into one extra system message after the main one (explicit skills).
    pub system_bodies: Vec<String>,
    /// Assistant receipts persisted right after the user record (`[Skill loaded: …]`).
    pub receipts: Vec<String>,
    /// The user content the model sees, when it differs from the stored one (legacy `@name`).
    pub model_content: Option<String>,
}

/// A turn that completed and was persisted, as extensions see it afterwards (skill evolution).
pub struct FinishedTurn<'a> {
    pub req: &'a crate::bus::TurnRequest,
    /// This turn's records as appended to history.jsonl (user, receipts, tool steps, answer).
    pub records: &'a [crate::store::chats::Record],
    /// The tool-iteration limit was hit (the answer came from the forced final call).
    pub hit_limit: bool,
    /// Cancelled after some text was streamed (what was shown is kept).
    pub cancelled: bool,
    /// The LLM client the turn used, for background follow-ups.
    pub client: &'a Arc<crate::llm::client::LlmClient>,
}

/// A pluggable part of every turn (MCP, Skills). All methods have neutral defaults.
pub trait TurnExtension: Send + Sync {
    /// Runs once before the first model call; `Err(detail)` fails the turn with that detail.
    fn prepare(&self, _req: &crate::bus::TurnRequest, _ctx: &TurnCtx, _prep: &mut Preparation) -> Result<(), String> {
        Ok(())
    }

    /// Tools visible besides the built-ins, asked before every model call, in a stable order.
    fn tools(&self, _state: &TurnState) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Volatile hints appended after the stable system prompt (recently activated skills).
    fn hints(&self, _metadata: &Map<String, Value>) -> Option<String> {
        None
    }

    /// Runs on the worker after the turn was persisted and `done` was sent; must not block.
    fn finished(&self, _turn: &FinishedTurn) {}
}

/// A model-callable tool.
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// Runs the call. Failures are `ToolOutput::error`, never panics or `Err`.
    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput;

    /// The OpenAI `tools[]` entry for this tool.
    fn schema(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {"name": self.name(), "description": self.description(), "parameters": self.parameters()}
        })
    }
}

/// Serialised `tools[]` entries, so a model request does not rebuild the schemas of the same
/// tools every call. Only long-lived tool objects are kept (built-ins, skill tools: somebody
/// else holds them too); tools an extension builds per call are serialised each time. An entry
/// is reused for the very same object only, so a changed tool never gets a stale schema.
#[derive(Default)]
pub struct SchemaCache(Mutex<HashMap<String, CachedSchema>>);

/// The tool object a schema was serialised from, and the JSON.
type CachedSchema = (Arc<dyn Tool>, Arc<RawValue>);

impl SchemaCache {
    const MAX_ENTRIES: usize = 512;

    /// `tool.schema()` serialised.
    pub fn json(&self, tool: &Arc<dyn Tool>) -> Arc<RawValue> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
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

/// A required string argument, or the failure to hand back to the model.
pub(crate) fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolOutput> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(ToolOutput::error(format!("missing required argument '{key}'"))),
        Some(_) => Err(ToolOutput::error(format!("argument '{key}' must be a string"))),
    }
}

/// An optional string argument (missing or null → `""`).
pub(crate) fn arg_opt_str<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolOutput> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ToolOutput::error(format!("argument '{key}' must be a string"))),
    }
}

/// Formats a duration the way tool messages quote it (`30s`, `0.3s`).
pub(crate) fn fmt_secs(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Tunables of the built-in tools, injected at construction (no globals).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSettings {
    /// Instant Answer endpoint for `web_search` (`CASHCODE_WEB_SEARCH_URL`).
    pub web_search_url: String,
    /// `web_fetch` may reach loopback, private and link-local addresses
    /// (`CASHCODE_WEB_FETCH_ALLOW_PRIVATE`).
    pub web_fetch_allow_private: bool,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings { web_search_url: web_search::DEFAULT_URL.to_string(), web_fetch_allow_private: false }
    }
}

impl ToolSettings {
    pub fn from_config(config: &Config) -> Self {
        let mut s = ToolSettings::default();
        if let Some(url) = &config.web_search_url {
            s.web_search_url = url.clone();
        }
        s.web_fetch_allow_private = config.web_fetch_allow_private;
        s
    }
}

/// The built-in tools with default settings, in the stable order the model sees them.
pub fn builtins() -> Vec<Arc<dyn Tool>> {
    builtins_with(&ToolSettings::default())
}

/// The built-in tools in the contract's order (tools-and-mcp.md §1); the order never changes
/// between requests, so tool lists stay cache-stable.
pub fn builtins_with(settings: &ToolSettings) -> Vec<Arc<dyn Tool>> {
    let policy = netguard::AddrPolicy::from_allow_private(settings.web_fetch_allow_private);
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
        Arc::new(exec::Exec::default()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_have_contract_names_in_stable_order() {
        let names: Vec<String> = builtins().iter().map(|t| t.name().to_string()).collect();
        assert_eq!(
            names,
            [
                "save_memory",
                "web_fetch",
                "web_search",
                "read_file",
                "write_file",
                "edit_file",
                "list_dir",
                "glob",
                "grep",
                "exec"
            ]
        );
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
        assert_eq!(ToolSettings::from_config(&config), ToolSettings::default());
        config.web_search_url = Some("http://127.0.0.1:9/".into());
        assert_eq!(ToolSettings::from_config(&config).web_search_url, "http://127.0.0.1:9/");
        assert!(!ToolSettings::from_config(&config).web_fetch_allow_private);
        config.web_fetch_allow_private = true;
        assert!(ToolSettings::from_config(&config).web_fetch_allow_private);
        let _ = std::fs::remove_dir_all(home);
    }
}
