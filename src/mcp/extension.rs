//! MCP in the turn (docs/tools-and-mcp.md §1, §6–9): the [`McpExtension`] that makes built-in
//! tools plus `tool_search` and `mcp_prepare` always visible and MCP tools visible only when
//! activated in the chat (ActivatedToolSet, LRU 50, persisted in metadata.json at a successful
//! turn end) or selected for this turn (`selected_mcp_connectors`, never persisted); the MCP
//! tool wrapper; and the purge of activations when a server goes away.
//!
//! Runs on the turn's worker thread; the purge runs on whichever thread disconnects a server.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::activation::{self, ActivatedToolSet};
use super::client::Ask;
use super::elicit::{self, Elicitor};
use super::manager::McpManager;
use super::search;
use super::status::redact_status;
use super::tool::LiveTool;
use super::{fmt_secs, Error};
use crate::bus::TurnRequest;
use crate::store::cache::ChatCache;
use crate::store::chats::ChatStore;
use crate::tool::args::{lenient, parse_args};
use crate::tool::{Preparation, Tool, ToolOutput, TurnCtx, TurnExtension, TurnState};
use crate::util::time;

const ACTIVATED_KEY: &str = "activated_tools";
/// Longest MCP tool result (in chars) that enters the prompt and history; the original passed
/// everything through, so one chatty tool could overflow the model's context.
pub(crate) const MAX_TOOL_OUTPUT_CHARS: usize = 50_000;

fn cap_output(text: String) -> String {
    let total = crate::util::text::char_len(&text);
    if total <= MAX_TOOL_OUTPUT_CHARS {
        return text;
    }
    format!(
        "{}\n\n[output truncated, total {total} chars]",
        crate::util::text::take_chars(&text, MAX_TOOL_OUTPUT_CHARS)
    )
}

fn activated(meta: &Map<String, Value>) -> ActivatedToolSet {
    ActivatedToolSet::from_json(meta.get(ACTIVATED_KEY))
}

fn store_activated(meta: &mut Map<String, Value>, set: &ActivatedToolSet) {
    meta.insert(ACTIVATED_KEY.into(), set.to_json());
}

/// The turn extension: always-visible MCP meta tools, activated tools, per-turn selections.
pub struct McpExtension {
    manager: Arc<McpManager>,
    /// Asks the chat's user when a server elicits during a call (absent: declined).
    elicitor: Option<Arc<dyn Elicitor>>,
    /// The two always-visible tools, built once (their serialised schemas are then cached).
    search: Arc<dyn Tool>,
    prepare: Arc<dyn Tool>,
}

impl McpExtension {
    pub fn new(manager: Arc<McpManager>) -> McpExtension {
        McpExtension {
            search: Arc::new(ToolSearch { manager: manager.clone() }),
            prepare: Arc::new(McpPrepare { manager: manager.clone() }),
            manager,
            elicitor: None,
        }
    }

    /// Server `elicitation/create` requests during this extension's tool calls go to
    /// `elicitor` (the connections must declare the capability: `ClientConfig::elicitation`).
    pub(crate) fn with_elicitor(mut self, elicitor: Arc<dyn Elicitor>) -> McpExtension {
        self.elicitor = Some(elicitor);
        self
    }
}

impl TurnExtension for McpExtension {
    /// Connects every selected server (on demand); a failure or a server without tools fails
    /// the turn. The servers' tools are visible for this turn only.
    fn prepare(&self, req: &TurnRequest, ctx: &TurnCtx, _prep: &mut Preparation) -> Result<(), String> {
        let mut servers: Vec<String> = Vec::new();
        for item in &req.selection.selected_mcp_connectors {
            if let Some(s) = item.get("server").and_then(Value::as_str) {
                let s = s.trim().to_string();
                if !s.is_empty() && !servers.contains(&s) {
                    servers.push(s);
                }
            }
        }
        for server in servers {
            let tools = self.manager.connect_server(&server).map_err(|e| {
                let e = if e.trim().is_empty() { "connection failed".to_string() } else { e };
                format!("Unable to prepare MCP {server}: {e}")
            })?;
            if tools.is_empty() {
                return Err(format!("Unable to use MCP {server}: no tools were discovered"));
            }
            let mut st = ctx.state();
            for t in tools {
                let wrapper: Arc<dyn Tool> =
                    Arc::new(McpTool { manager: self.manager.clone(), tool: t, elicitor: self.elicitor.clone() });
                if !st.turn_tools.iter().any(|x| x.name() == wrapper.name()) {
                    st.turn_tools.push(wrapper);
                }
            }
        }
        Ok(())
    }

    /// `tool_search`, then `mcp_prepare` and the activated, currently registered MCP tools
    /// sorted by name (the contract's order: non-`mcp_` names first, then `mcp_` names).
    fn tools(&self, state: &TurnState) -> Vec<Arc<dyn Tool>> {
        let set = activated(&state.metadata);
        let mut mcp: Vec<Arc<dyn Tool>> = vec![Arc::clone(&self.prepare)];
        if !set.is_empty() {
            let live = self.manager.live_tools();
            let dormant: Vec<&str> = set.names().filter(|n| !live.iter().any(|t| t.name == *n)).collect();
            for t in live {
                if set.contains(&t.name) {
                    mcp.push(Arc::new(McpTool {
                        manager: self.manager.clone(),
                        tool: t,
                        elicitor: self.elicitor.clone(),
                    }));
                }
            }
            // Activated tools of a server that is not connected (restart, crash) stay visible
            // from its tool cache; a call reconnects the server on demand.
            if !dormant.is_empty() {
                for t in self.manager.dormant_tools(&dormant) {
                    mcp.push(Arc::new(McpTool {
                        manager: self.manager.clone(),
                        tool: t,
                        elicitor: self.elicitor.clone(),
                    }));
                }
            }
        }
        mcp.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out: Vec<Arc<dyn Tool>> = vec![Arc::clone(&self.search)];
        out.extend(mcp);
        out
    }
}

/// One registered MCP tool as a model-callable tool.
pub(crate) struct McpTool {
    manager: Arc<McpManager>,
    tool: Arc<LiveTool>,
    elicitor: Option<Arc<dyn Elicitor>>,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.tool.name
    }

    fn description(&self) -> &str {
        &self.tool.description
    }

    fn parameters(&self) -> Value {
        self.tool.input_schema.clone()
    }

    fn mcp_server(&self) -> Option<&str> {
        Some(&self.tool.server)
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        {
            // A successful routing of an activated tool refreshes its LRU position.
            let mut st = ctx.state();
            let mut set = activated(&st.metadata);
            if set.touch(&self.tool.name, time::now_epoch()) {
                store_activated(&mut st.metadata, &set);
            }
        }
        let name = &self.tool.name;
        let server = &self.tool.server;
        let held = || {
            ToolOutput::error(format!(
                "Error: MCP tool '{name}' changed its description or input schema since it was approved; it stays \
                 disabled until the user reviews and approves the change in the MCP market."
            ))
        };
        if self.manager.is_held(server, &self.tool.original_name) {
            return held();
        }
        if !self.manager.is_connected(server) {
            if let Err(e) = self.manager.reconnect_for_call(server, &ctx.cancel) {
                if ctx.cancel.is_cancelled() {
                    return ToolOutput::error(format!("Error: MCP tool '{name}' was cancelled"));
                }
                return ToolOutput::error(format!(
                    "Error: MCP server '{server}' of tool '{name}' is not connected and reconnecting failed: {e}"
                ));
            }
            log::info!("event=mcp.reconnected_on_demand server={server}");
        }
        if self.manager.is_held(server, &self.tool.original_name) {
            return held();
        }
        let ask = |req: &elicit::Request| match &self.elicitor {
            Some(e) => e.elicit(&ctx.chat_id, req, Some(&ctx.cancel)),
            None => elicit::Answer::Decline,
        };
        let ask: Option<Ask<'_>> = self.elicitor.as_ref().map(|_| &ask as Ask<'_>);
        match self.manager.call_on_asking(&self.tool.server, &self.tool.original_name, args, Some(&ctx.cancel), ask) {
            Ok(r) if r.is_error => ToolOutput {
                for_model: cap_output(r.render()),
                preview: None,
                for_history: None,
                failed: true,
                outcome: None,
            },
            Ok(r) => ToolOutput::ok(cap_output(r.render())),
            Err(Error::Timeout { after, .. }) => {
                ToolOutput::error(format!("Error: MCP tool '{name}' timed out after {}s", fmt_secs(after)))
                    .ended("timeout")
            }
            Err(Error::Cancelled) => ToolOutput::error(format!("Error: MCP tool '{name}' was cancelled")),
            Err(e) => {
                let secrets = self.manager.server_config(&self.tool.server).map(|c| c.secrets()).unwrap_or_default();
                ToolOutput::error(format!("Error: MCP tool '{name}' failed: {}", redact_status(&e, &secrets)))
            }
        }
    }
}

/// `tool_search`: BM25 over cached and live MCP tools; live hits are activated.
pub(crate) struct ToolSearch {
    manager: Arc<McpManager>,
}

/// `tool_search` arguments, never refused: a query that is not a string is empty (answered
/// with a request for keywords), a limit that is not a number is the default.
#[derive(Deserialize)]
struct SearchArgs {
    #[serde(deserialize_with = "lenient::string")]
    query: String,
    #[serde(deserialize_with = "lenient::f64")]
    limit: Option<f64>,
}

impl SearchArgs {
    /// Any number, truncated toward zero (saturating) and clamped to 1..=MAX_LIMIT.
    fn limit(&self) -> usize {
        self.limit.map_or(search::DEFAULT_LIMIT as i64, |f| f as i64).clamp(1, search::MAX_LIMIT as i64) as usize
    }
}

impl Tool for ToolSearch {
    fn name(&self) -> &str {
        "tool_search"
    }

    fn description(&self) -> &str {
        "Search the tools of configured MCP servers by keywords (any language). Matching tools of \
         connected servers are activated and become directly callable in this session; servers that \
         are not connected yet must be prepared with mcp_prepare first."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "query": {"type": "string", "description": "Keywords describing the capability you need"},
            "limit": {"type": "integer", "description": "Maximum results (1-50, default 8)", "minimum": 1, "maximum": 50}
        }, "required": ["query"]})
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let args: SearchArgs = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let limit = args.limit();
        let query = args.query.trim();
        if query.is_empty() {
            return ToolOutput::ok("Please provide search keywords.");
        }
        let index = self.manager.search_index();
        let hits = index.search(query, limit);
        let registered: Vec<String> = self.manager.live_tools().iter().map(|t| t.name.clone()).collect();
        let mut newly = Vec::new();
        {
            let mut st = ctx.state();
            let mut set = activated(&st.metadata);
            let now = time::now_epoch();
            for (doc, _) in &hits {
                if let search::DocKind::Live { wrapped } = &doc.kind {
                    if registered.contains(wrapped) && !set.contains(wrapped) {
                        set.activate(wrapped, now);
                        newly.push(wrapped.clone());
                    }
                }
            }
            if !newly.is_empty() {
                store_activated(&mut st.metadata, &set);
            }
        }
        ToolOutput::ok(search::render(query, &hits, &newly))
    }
}

/// `mcp_prepare`: connects a configured server (lazily) and activates all of its tools.
pub(crate) struct McpPrepare {
    manager: Arc<McpManager>,
}

/// `mcp_prepare` arguments: a server name that is not a string is empty (answered "must
/// not be empty").
#[derive(Deserialize)]
struct PrepareArgs {
    #[serde(deserialize_with = "lenient::string")]
    server_name: String,
}

impl Tool for McpPrepare {
    fn name(&self) -> &str {
        "mcp_prepare"
    }

    fn description(&self) -> &str {
        "Connect a configured MCP server (by its server name from tool_search results) and activate \
         all of its tools so they can be called directly in this session."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "server_name": {"type": "string", "description": "The MCP server's name (its configuration key)"}
        }, "required": ["server_name"]})
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let PrepareArgs { server_name } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let name = server_name.trim();
        if name.is_empty() {
            return ToolOutput::error("Error: server_name must not be empty.");
        }
        if self.manager.server_config(name).is_none() {
            return ToolOutput::error(format!(
                "Error: connecting MCP server '{name}' failed; check the configuration."
            ));
        }
        let tools = match self.manager.connect_server(name) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(format!("Error: connecting MCP server '{name}' failed: {e}")),
        };
        if tools.is_empty() {
            return ToolOutput::ok(format!("MCP server '{name}' connected, but no tools were found."));
        }
        // Activate exactly the tools this server owns (not a name-prefix match).
        let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        let mut st = ctx.state();
        let mut set = activated(&st.metadata);
        let now = time::now_epoch();
        for n in &names {
            set.activate(n, now);
        }
        store_activated(&mut st.metadata, &set);
        ToolOutput::ok(format!("MCP server '{name}' connected. Activated {} tools: {}", names.len(), names.join(", ")))
    }
}

/// What the skill tools need from MCP: the full registry (built-ins plus live MCP wrappers)
/// and `mcp_prepare`-style connects of a skill's required servers.
pub(crate) struct McpSkillEnv {
    base: std::collections::HashSet<String>,
    manager: Arc<McpManager>,
}

impl McpSkillEnv {
    pub(crate) fn new(base: std::collections::HashSet<String>, manager: Arc<McpManager>) -> McpSkillEnv {
        McpSkillEnv { base, manager }
    }
}

impl crate::skills::tools::SkillEnv for McpSkillEnv {
    fn has_tool(&self, name: &str) -> bool {
        self.base.contains(name) || (name.starts_with("mcp_") && self.manager.lookup(name).is_some())
    }

    fn prepare_mcp(&self, server: &str) -> Result<Vec<String>, String> {
        self.manager.connect_server(server).map(|tools| tools.iter().map(|t| t.name.clone()).collect())
    }
}

/// Removes `names` from `activated_tools` of every cached chat and of every metadata.json on
/// disk (rewriting only files that change). `app` installs it as the manager's purge hook,
/// with the agent's store and cache.
pub(crate) fn purge_activations(store: &ChatStore, cache: &ChatCache, names: &[String]) {
    let chats = match store.list() {
        Ok(c) => c,
        Err(e) => {
            log::warn!("event=mcp.purge.list_failed error_kind={:?}", e.kind());
            return;
        }
    };
    let mut changed = 0;
    for info in chats {
        let id = info.chat_id.as_str();
        if let Some(state) = cache.peek(id) {
            let mut st = crate::util::sync::lock(&state);
            let mut meta = Value::Object(std::mem::take(&mut st.metadata));
            activation::purge_metadata(&mut meta, names);
            if let Value::Object(m) = meta {
                st.metadata = m;
            }
        }
        let mut meta = Value::Object(store.read_metadata(id));
        if activation::purge_metadata(&mut meta, names) {
            if let Value::Object(m) = &meta {
                match store.write_metadata(id, m) {
                    Ok(()) => changed += 1,
                    Err(e) => log::warn!("event=mcp.purge.write_failed chat_id={id} error_kind={:?}", e.kind()),
                }
            }
        }
    }
    log::info!("event=mcp.activations.purged tools={} chats_rewritten={changed}", names.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_outputs_are_capped_with_a_note() {
        assert_eq!(cap_output("short".into()), "short");
        let long = "字".repeat(MAX_TOOL_OUTPUT_CHARS + 5);
        let capped = cap_output(long);
        assert!(capped.ends_with(&format!("[output truncated, total {} chars]", MAX_TOOL_OUTPUT_CHARS + 5)));
        assert_eq!(crate::util::text::char_len(capped.split("\n\n[").next().unwrap()), MAX_TOOL_OUTPUT_CHARS);
    }

    fn manager(tag: &str) -> (std::path::PathBuf, Arc<McpManager>) {
        let data = std::env::temp_dir().join(format!("cc-mcp-args-{tag}-{}", crate::util::rand::hex(6)));
        let catalog = super::super::catalog::Catalog::load(None, &data).unwrap();
        let config = super::super::manager::ManagerConfig {
            client: super::super::client::ClientConfig::default(),
            data_dir: data.clone(),
        };
        (data, Arc::new(McpManager::new(config, catalog)))
    }

    fn turn_ctx(dir: &std::path::Path) -> TurnCtx {
        crate::skills::tools::tests::ctx(dir)
    }

    /// `query` and `server_name` have always been lenient: absent, null or not a string reads
    /// as "". Unknown keys are ignored.
    #[test]
    fn argument_spellings() {
        let (data, mgr) = manager("spell");
        let ctx = turn_ctx(&data);
        let search = ToolSearch { manager: Arc::clone(&mgr) };
        let prepare = McpPrepare { manager: Arc::clone(&mgr) };
        let run = |t: &dyn Tool, v: Value| t.run(v.as_object().unwrap(), &ctx);
        for v in
            [json!({}), json!({"query": null}), json!({"query": 5}), json!({"query": [" x "]}), json!({"query": "  "})]
        {
            assert_eq!(run(&search, v.clone()), ToolOutput::ok("Please provide search keywords."), "{v}");
        }
        let nothing = run(&search, json!({"query": "weather"}));
        for v in [json!({"query": " weather ", "limit": "3"}), json!({"query": "weather", "limit": null, "x": 1})] {
            assert_eq!(run(&search, v.clone()), nothing, "{v}");
        }
        let empty = ToolOutput::error("Error: server_name must not be empty.");
        for v in [json!({}), json!({"server_name": null}), json!({"server_name": 5}), json!({"server_name": " "})] {
            assert_eq!(run(&prepare, v.clone()), empty, "{v}");
        }
        assert_eq!(
            run(&prepare, json!({"server_name": " nope ", "tools": ["a"]})).for_model,
            "Error: connecting MCP server 'nope' failed; check the configuration."
        );
        let _ = std::fs::remove_dir_all(data);
    }

    /// `limit` takes any JSON number, truncated toward zero and clamped to 1..=50; anything
    /// else (a numeric string too) is the default 8.
    #[test]
    fn search_limit_spellings() {
        for (limit, want) in [
            (None, 8),
            (Some(json!(null)), 8),
            (Some(json!(3)), 3),
            (Some(json!(3.9)), 3),
            (Some(json!(0)), 1),
            (Some(json!(0.5)), 1),
            (Some(json!(-7)), 1),
            (Some(json!(-0.5)), 1),
            (Some(json!(51)), 50),
            (Some(json!(1e300)), 50),
            (Some(json!(-1e300)), 1),
            (Some(json!(u64::MAX)), 50),
            (Some(json!("5")), 8),
            (Some(json!(true)), 8),
            (Some(json!([5])), 8),
        ] {
            let mut args = json!({"query": "q"});
            if let Some(l) = &limit {
                args["limit"] = l.clone();
            }
            let parsed: SearchArgs = parse_args(args.as_object().unwrap()).unwrap();
            assert_eq!(parsed.limit(), want, "{limit:?}");
        }
    }
}
