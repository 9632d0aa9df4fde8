//! The tools of the connections: listings for the API (live, else the cache of the last
//! connect, with held tools shown for review), lookup by model-facing name, calls (a dead or
//! missing connection is connected once first; held tools refuse), the activated tools of servers
//! that are down (offered from the cache, reconnected when called), and the BM25 index over live
//! and cached tools, rebuilt when the generation moved. Runs on HTTP handlers and turn workers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{McpManager, GONE};
use crate::mcp::cache::{self, CachedTool};
use crate::mcp::catalog::ServerConfig;
use crate::mcp::client::{Ask, CallResult, ToolInfo};
use crate::mcp::names::wrapped_name;
use crate::mcp::search::{self, SearchIndex};
use crate::mcp::status::Status;
use crate::mcp::tool::LiveTool;
use crate::mcp::views::{ToolListing, ToolSource, ToolView};
use crate::mcp::{Error, McpError, Result};
use crate::util::cancel::CancelToken;
use crate::util::sync::lock;
use crate::util::text;

impl McpManager {
    /// Every live tool of every server (after list_changed refreshes), sorted by name.
    pub(crate) fn live_tools(&self) -> Vec<Arc<LiveTool>> {
        let names: Vec<String> = lock(&self.slots).keys().cloned().collect();
        let mut out: Vec<Arc<LiveTool>> = names.iter().flat_map(|n| self.live_tools_of(n)).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Live tools of one server (empty when not connected).
    pub fn live_tools_of(&self, server: &str) -> Vec<Arc<LiveTool>> {
        let (status, _, live) = self.observe(server);
        let (Status::Connected, Some(live)) = (status, live) else {
            return Vec::new();
        };
        if !live.client.take_list_changed() {
            return live.tools.clone();
        }
        let slot = self.slot(server);
        let _c = lock(&slot.connect);
        let current = lock(&slot.state).live.clone();
        match current {
            Some(cur) if Arc::ptr_eq(&cur.client, &live.client) => self.relist(server, &slot, cur),
            Some(cur) => cur.tools.clone(),
            None => Vec::new(),
        }
    }

    /// The registered tool behind a model-facing name.
    pub(crate) fn lookup(&self, wrapped: &str) -> Option<Arc<LiveTool>> {
        let server = lock(&self.names).resolve(wrapped).map(|(s, _)| s.to_string())?;
        self.live_tools_of(&server).into_iter().find(|t| t.name == wrapped)
    }

    /// Calls a registered tool. A connection found dead is reconnected once first.
    pub fn call(&self, wrapped: &str, args: &Map<String, Value>, cancel: Option<&CancelToken>) -> Result<CallResult> {
        let (server, tool) =
            lock(&self.names).resolve(wrapped).map(|(s, t)| (s.to_string(), t.to_string())).ok_or_else(|| {
                Error::Closed(format!("tool '{wrapped}' is not registered (its server is not connected)"))
            })?;
        self.call_on(&server, &tool, args, cancel)
    }

    /// Calls `tool` (original name) on `server`. A server whose connection died (or was not
    /// connected) is connected once first, so a crashed server recovers on the next call.
    pub fn call_on(
        &self,
        server: &str,
        tool: &str,
        args: &Map<String, Value>,
        cancel: Option<&CancelToken>,
    ) -> Result<CallResult> {
        self.call_on_asking(server, tool, args, cancel, None)
    }

    /// [`McpManager::call_on`] whose server may ask the user through `ask` (elicitation).
    pub(crate) fn call_on_asking(
        &self,
        server: &str,
        tool: &str,
        args: &Map<String, Value>,
        cancel: Option<&CancelToken>,
        ask: Option<Ask<'_>>,
    ) -> Result<CallResult> {
        let live = match self.observe(server) {
            (Status::Connected, _, Some(live)) => live,
            _ => {
                self.connect_server(server).map_err(Error::Closed)?;
                match self.observe(server) {
                    (_, _, Some(live)) => live,
                    _ => return Err(Error::Closed(GONE.into())),
                }
            }
        };
        if live.held.iter().any(|h| h == tool) {
            return Err(Error::Closed(format!("tool '{tool}' changed and waits for the user's approval")));
        }
        let client = live.client.clone();
        let started = std::time::Instant::now();
        let r = client.call_tool_asking(tool, args, cancel, client.config().call_timeout, ask);
        log::info!(
            "event=mcp.tool.call server={server} tool={:?} outcome={} duration_ms={}",
            text::take_chars(tool, 80),
            match &r {
                Ok(c) if c.is_error => "isError",
                Ok(_) => "ok",
                Err(e) => e.kind(),
            },
            started.elapsed().as_millis()
        );
        r
    }

    /// Activated tools of servers that are not connected (after a restart or a crash), built
    /// from the tool-schema cache of their last connect (approved tools only), restricted to
    /// the model-facing names in `wanted`. Calling one reconnects its server on demand.
    pub(crate) fn dormant_tools(&self, wanted: &[&str]) -> Vec<Arc<LiveTool>> {
        let cfgs: Vec<ServerConfig> = lock(&self.catalog).all().into_iter().cloned().collect();
        let mut out = Vec::new();
        for cfg in cfgs {
            let prefix = format!("mcp_{}", cfg.name);
            if !wanted.iter().any(|w| w.starts_with(&prefix))
                || self.is_connected(&cfg.name)
                || self.user_off(&cfg.name)
            {
                continue;
            }
            let Some(cached) = self.cached_tools(&cfg) else { continue };
            let pending = self.pins_of(&cfg).pending;
            for t in cached {
                let name = wrapped_name(&cfg.name, &t.name);
                if wanted.contains(&name.as_str()) && !pending.contains_key(&t.name) {
                    let info = ToolInfo { name: t.name, description: t.description, input_schema: t.input_schema };
                    out.push(Arc::new(LiveTool::new(name, &cfg.name, &info)));
                }
            }
        }
        out
    }

    /// `GET /api/mcp/servers/{name}/tools`: the live tools when connected, else the cached ones.
    pub fn tools_listing(&self, name: &str) -> Result<ToolListing, McpError> {
        let cfg = self.configured(name)?;
        let live = self.live_tools_of(name);
        let (status, error, _) = self.observe(name);
        let (source, tools) = if !live.is_empty() || status == Status::Connected {
            (ToolSource::Live, live.iter().map(|t| ToolView::live(t)).collect())
        } else {
            match self.cached_tools(&cfg) {
                Some(cached) => (ToolSource::Cache, cached.into_iter().map(|t| ToolView::cached(name, t)).collect()),
                None => (ToolSource::None, Vec::new()),
            }
        };
        // Held tools are listed (not callable) with their new version, for the review.
        let mut tools: Vec<ToolView> = tools;
        for (tool, new) in self.pins_of(&cfg).pending {
            tools.retain(|t| t.original_name != tool);
            tools.push(ToolView::held(name, &tool, &new, source));
        }
        Ok(ToolListing {
            display_name: cfg.display_name,
            server: name.to_string(),
            source,
            status,
            status_error: error,
            tool_count: live.len(),
            tools,
        })
    }

    fn cached_tools(&self, cfg: &ServerConfig) -> Option<Vec<CachedTool>> {
        let spec = lock(&self.catalog).runtime_spec(cfg);
        cache::read_cache(&self.cfg.data_dir, &cfg.name, &cache::fingerprint(&spec))
    }

    /// The BM25 index over cached + live tools, rebuilt when anything changed.
    pub fn search_index(&self) -> Arc<SearchIndex> {
        // Refresh list_changed servers first so the generation reflects them.
        let live = self.live_tools();
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some((g, idx)) = lock(&self.index).as_ref() {
            if *g == generation {
                return idx.clone();
            }
        }
        let cfgs: Vec<ServerConfig> = lock(&self.catalog).all().into_iter().cloned().collect();
        let docs = cfgs
            .iter()
            .flat_map(|cfg| search::server_docs(cfg, &self.cached_tools(cfg).unwrap_or_default(), &live))
            .collect();
        let idx = Arc::new(SearchIndex::build(docs));
        *lock(&self.index) = Some((generation, idx.clone()));
        idx
    }
}
