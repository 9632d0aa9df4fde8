//! Live MCP connections by server name: explicit and lazy connect (handshake + `tools/list`
//! before "connected"), disconnect (closes the transport, unregisters its tools, asks the host
//! to purge activations), status with redacted errors, `tools/list_changed` refresh, tool
//! listings (live or cached per fingerprint), calls with timeout and cancel, the search index,
//! and shutdown (kills stdio children). Catalog mutations are serialised by one lock; each
//! server has its own connect lock, so concurrent connects of one server coalesce while
//! different servers connect in parallel.
//!
//! Shared as `Arc<McpManager>` by HTTP handlers and turn workers; it starts no thread itself.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use super::catalog::{self, ApiError, Catalog, ServerConfig};
use super::client::{CallResult, Client, ClientConfig, ToolInfo};
use super::names::NameTable;
use super::search::{DocKind, SearchDoc, SearchIndex};
use super::transport::lock;
use super::{Error, Result};
use crate::util::cancel::CancelToken;
use crate::util::{redact, text};

/// Longest `status_error` shown.
pub const MAX_STATUS_ERROR: usize = 500;
const NOT_CONFIGURED: &str = "MCP server is not configured";
const GONE: &str = "connection is no longer available";

#[derive(Debug, Clone)]
pub struct ManagerConfig {
    pub client: ClientConfig,
    /// `<data>`: holds `mcp/servers.json` and `mcp_cache/`.
    pub data_dir: PathBuf,
}

impl ManagerConfig {
    /// Defaults plus the optional `CASHCODE_MCP_CONNECT_TIMEOUT`, `CASHCODE_MCP_CALL_TIMEOUT`,
    /// `CASHCODE_MCP_REQUEST_TIMEOUT` and `CASHCODE_MCP_MAX_CALL_TIME` (seconds).
    pub fn from_config(config: &crate::config::Config) -> Result<ManagerConfig, String> {
        let secs = |var: &str, default: std::time::Duration| -> Result<std::time::Duration, String> {
            match config.var(var) {
                None => Ok(default),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && *s <= 86_400.0)
                    .map(std::time::Duration::from_secs_f64)
                    .ok_or_else(|| format!("{var} must be seconds (0 < s <= 86400), got '{v}'")),
            }
        };
        let d = ClientConfig::default();
        let client = ClientConfig {
            connect_timeout: secs("CASHCODE_MCP_CONNECT_TIMEOUT", d.connect_timeout)?,
            call_timeout: secs("CASHCODE_MCP_CALL_TIMEOUT", d.call_timeout)?,
            request_timeout: secs("CASHCODE_MCP_REQUEST_TIMEOUT", d.request_timeout)?,
            max_call_time: secs("CASHCODE_MCP_MAX_CALL_TIME", d.max_call_time)?,
            ..d
        };
        Ok(ManagerConfig { client, data_dir: config.data_dir.clone() })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Status {
    #[default]
    Disconnected,
    Connecting,
    Connected,
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Disconnected => "disconnected",
            Status::Connecting => "connecting",
            Status::Connected => "connected",
            Status::Error => "error",
        }
    }
}

/// A registered MCP tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveTool {
    /// `mcp_{server}_{tool}`, provider-safe.
    pub name: String,
    pub server: String,
    pub original_name: String,
    /// The tool's description, or its name when it has none.
    pub description: String,
    /// Normalised for providers.
    pub input_schema: Value,
    /// As the server sent it.
    pub raw_schema: Value,
    pub raw_description: Option<String>,
}

impl LiveTool {
    /// The OpenAI `tools[]` entry.
    pub fn schema(&self) -> Value {
        json!({"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.input_schema}})
    }
}

struct Live {
    client: Arc<Client>,
    tools: Vec<Arc<LiveTool>>,
}

#[derive(Default)]
struct SlotState {
    status: Status,
    error: Option<String>,
    live: Option<Arc<Live>>,
}

#[derive(Default)]
struct Slot {
    /// Held for a whole connect/disconnect/refresh of this server.
    connect: Mutex<()>,
    state: Mutex<SlotState>,
}

type PurgeHook = Arc<dyn Fn(&[String]) + Send + Sync>;

pub struct McpManager {
    cfg: ManagerConfig,
    catalog: Mutex<Catalog>,
    /// Serialises create/update/delete (the catalog lock itself is only held briefly).
    mutation: Mutex<()>,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    names: Mutex<NameTable>,
    /// Bumped whenever live tools, caches or the catalog change (search index key).
    generation: AtomicU64,
    index: Mutex<Option<(u64, Arc<SearchIndex>)>>,
    purge_hook: Mutex<Option<PurgeHook>>,
    catalog_hook: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    shutting_down: AtomicBool,
    /// Told every configured header value and secret env value whenever the catalog changes.
    secrets: crate::secrets::Secrets,
}

/// `"<Type>: <message>"` on one line, every known secret replaced, generic redaction, ≤500 chars.
pub fn redact_status(e: &Error, secrets: &[String]) -> String {
    redact_line(&format!("{}: {e}", e.kind()), secrets)
}

fn redact_line(line: &str, secrets: &[String]) -> String {
    let mut s = line.replace(['\r', '\n'], " ");
    for secret in secrets {
        if !secret.is_empty() {
            s = s.replace(secret.as_str(), "[redacted]");
        }
    }
    let s = redact::redact(&s);
    text::take_chars(&s, MAX_STATUS_ERROR).to_string()
}

/// Schema normalisation for providers (tools-and-mcp.md §5, minus the original's quirk of
/// turning untyped leaf properties into objects): a non-object schema becomes an empty object
/// schema, the top level gets `type`/`properties`/`required` defaults, `$schema` is dropped,
/// and `type: [X, "null"]` becomes `type: X, nullable: true` at every property level.
pub fn normalize_schema(raw: &Value) -> Value {
    let Value::Object(m) = raw else {
        return json!({"type": "object", "properties": {}, "required": []});
    };
    let mut m = m.clone();
    m.remove("$schema");
    fix_nullable(&mut m);
    m.entry("type").or_insert_with(|| json!("object"));
    m.entry("properties").or_insert_with(|| json!({}));
    m.entry("required").or_insert_with(|| json!([]));
    Value::Object(m)
}

fn fix_nullable(m: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = m.get("type") {
        let non_null: Vec<&Value> = types.iter().filter(|t| t.as_str() != Some("null")).collect();
        if non_null.len() == 1 && types.len() == 2 {
            let t = non_null[0].clone();
            m.insert("type".into(), t);
            m.insert("nullable".into(), json!(true));
        }
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for p in props.values_mut() {
            if let Value::Object(pm) = p {
                fix_nullable(pm);
            }
        }
    }
}

impl McpManager {
    pub fn new(cfg: ManagerConfig, catalog: Catalog) -> McpManager {
        McpManager {
            cfg,
            catalog: Mutex::new(catalog),
            mutation: Mutex::new(()),
            slots: Mutex::new(HashMap::new()),
            names: Mutex::new(NameTable::default()),
            generation: AtomicU64::new(1),
            index: Mutex::new(None),
            purge_hook: Mutex::new(None),
            catalog_hook: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            secrets: crate::secrets::Secrets::new(),
        }
    }

    /// Shares `secrets` (the server's registry) and tells it the catalog's secrets; every
    /// later create, update and delete updates it.
    pub fn with_secrets(mut self, secrets: crate::secrets::Secrets) -> McpManager {
        self.secrets = secrets;
        self.publish_secrets();
        self
    }

    fn publish_secrets(&self) {
        let values: Vec<String> = lock(&self.catalog).all().into_iter().flat_map(ServerConfig::secrets).collect();
        self.secrets.set("mcp", values);
    }

    /// Installs what removes tool names from every chat's `activated_tools` (sessions in
    /// memory and metadata.json on disk) when a server is disconnected, edited or deleted.
    pub fn set_purge_hook(&self, f: impl Fn(&[String]) + Send + Sync + 'static) {
        *lock(&self.purge_hook) = Some(Arc::new(f));
    }

    /// Installs what runs after the catalog changed (create, update, delete): the skill
    /// catalog's refresh, whose MCP dependency checks depend on the configured servers.
    pub fn set_catalog_hook(&self, f: impl Fn() + Send + Sync + 'static) {
        *lock(&self.catalog_hook) = Some(Arc::new(f));
    }

    fn catalog_changed(&self) {
        self.publish_secrets();
        let hook = lock(&self.catalog_hook).clone();
        if let Some(hook) = hook {
            hook();
        }
    }

    pub fn config(&self) -> &ManagerConfig {
        &self.cfg
    }

    pub fn server_config(&self, name: &str) -> Option<ServerConfig> {
        lock(&self.catalog).get(name).cloned()
    }

    /// Configured server names in catalog order.
    pub fn server_names(&self) -> Vec<String> {
        lock(&self.catalog).all().into_iter().map(|c| c.name.clone()).collect()
    }

    fn slot(&self, name: &str) -> Arc<Slot> {
        lock(&self.slots).entry(name.to_string()).or_default().clone()
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Status, error and live handle after noticing a dead connection.
    fn observe(&self, name: &str) -> (Status, Option<String>, Option<Arc<Live>>) {
        let slot = self.slot(name);
        let dead = {
            let mut st = lock(&slot.state);
            match &st.live {
                Some(live) if live.client.dead_reason().is_some() => {
                    let live = st.live.take();
                    st.status = Status::Disconnected;
                    st.error = Some(GONE.into());
                    live
                }
                _ => None,
            }
        };
        if let Some(live) = dead {
            log::warn!(
                "event=mcp.connection.lost server={name} reason={:?}",
                live.client.dead_reason().unwrap_or_default()
            );
            lock(&self.names).remove_server(name);
            live.client.close();
            self.bump();
        }
        let st = lock(&slot.state);
        (st.status, st.error.clone(), st.live.clone())
    }

    /// The public DTO (http-api.md §6).
    fn dto_for(&self, cfg: &ServerConfig) -> Value {
        let (status, error, live) = self.observe(&cfg.name);
        json!({
            "name": cfg.name,
            "display_name": cfg.display_name,
            "description": cfg.description,
            "type": cfg.kind.as_str(),
            "url": cfg.url,
            "headers": cfg.masked_headers(),
            "builtin": cfg.builtin,
            "mutable": !cfg.builtin,
            "status": status.as_str(),
            "connected": status == Status::Connected,
            "status_error": error,
            "tool_count": live.map(|l| l.tools.len()).unwrap_or(0),
        })
    }

    /// `GET /api/mcp/servers`.
    pub fn list(&self) -> Value {
        let cfgs: Vec<ServerConfig> = lock(&self.catalog).all().into_iter().cloned().collect();
        json!({"servers": cfgs.iter().map(|c| self.dto_for(c)).collect::<Vec<_>>()})
    }

    /// One DTO, or 404.
    pub fn dto(&self, name: &str) -> std::result::Result<Value, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        Ok(self.dto_for(&cfg))
    }

    /// `POST /api/mcp/servers` -> 201 DTO (disconnected).
    pub fn create(&self, body: &Value) -> std::result::Result<Value, ApiError> {
        let _m = lock(&self.mutation);
        let cfg = lock(&self.catalog).create(body)?;
        catalog::delete_cache(&self.cfg.data_dir, &cfg.name);
        let slot = self.slot(&cfg.name);
        *lock(&slot.state) = SlotState::default();
        self.bump();
        log::info!("event=mcp.server.created server={}", cfg.name);
        self.catalog_changed();
        Ok(self.dto_for(&cfg))
    }

    /// `PUT /api/mcp/servers/{name}`: replaces the config, closes the connection, purges
    /// activations, deletes the cache.
    pub fn update(&self, name: &str, body: &Value) -> std::result::Result<Value, ApiError> {
        let _m = lock(&self.mutation);
        let cfg = lock(&self.catalog).update(name, body)?;
        self.disconnect_inner(name, true);
        catalog::delete_cache(&self.cfg.data_dir, name);
        let slot = self.slot(name);
        *lock(&slot.state) = SlotState::default();
        self.bump();
        log::info!("event=mcp.server.updated server={name}");
        self.catalog_changed();
        Ok(self.dto_for(&cfg))
    }

    /// `DELETE /api/mcp/servers/{name}`.
    pub fn delete(&self, name: &str) -> std::result::Result<(), ApiError> {
        let _m = lock(&self.mutation);
        lock(&self.catalog).check_mutable(name)?;
        self.disconnect_inner(name, true);
        catalog::delete_cache(&self.cfg.data_dir, name);
        lock(&self.catalog).delete(name)?;
        lock(&self.slots).remove(name);
        self.bump();
        log::info!("event=mcp.server.deleted server={name}");
        self.catalog_changed();
        Ok(())
    }

    /// `POST /api/mcp/servers/{name}/connect`: 404 if unknown, else the DTO (maybe `error`).
    pub fn connect(&self, name: &str) -> std::result::Result<Value, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        let _ = self.connect_server(name);
        Ok(self.dto_for(&cfg))
    }

    /// `POST /api/mcp/servers/{name}/disconnect`.
    pub fn disconnect(&self, name: &str) -> std::result::Result<Value, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        self.disconnect_inner(name, true);
        Ok(self.dto_for(&cfg))
    }

    /// Connects (or reuses the live connection) and returns the server's tools. The error is
    /// the redacted status line. Used by the API, `mcp_prepare`, per-turn selection and skills.
    pub fn connect_server(&self, name: &str) -> std::result::Result<Vec<Arc<LiveTool>>, String> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err("server is shutting down".into());
        }
        let slot = self.slot(name);
        let _c = lock(&slot.connect);
        let Some(cfg) = self.server_config(name) else {
            let mut st = lock(&slot.state);
            st.status = Status::Error;
            st.error = Some(NOT_CONFIGURED.into());
            return Err(NOT_CONFIGURED.into());
        };
        if let (Status::Connected, _, Some(live)) = self.observe(name) {
            if live.client.take_list_changed() {
                return Ok(self.relist(name, &slot, live));
            }
            return Ok(live.tools.clone());
        }
        {
            let mut st = lock(&slot.state);
            st.status = Status::Connecting;
            st.error = None;
        }
        let spec = lock(&self.catalog).runtime_spec(&cfg);
        let fingerprint = catalog::fingerprint(&spec);
        let secrets = cfg.secrets();
        let started = std::time::Instant::now();
        let outcome = match Client::connect(name, &spec, self.cfg.client.clone()) {
            Err(e) => Err(Failure::Handshake(e)),
            Ok(client) => match client.list_tools() {
                Ok(tools) => Ok((client, tools)),
                Err(e) => {
                    client.close();
                    Err(Failure::Discovery(e))
                }
            },
        };
        match outcome {
            Ok((client, tools)) => {
                self.write_cache_for(name, &fingerprint, &tools);
                let live = Arc::new(Live { client: Arc::new(client), tools: self.register(name, &tools) });
                let out = live.tools.clone();
                {
                    let mut st = lock(&slot.state);
                    st.status = Status::Connected;
                    st.error = None;
                    st.live = Some(live);
                }
                self.bump();
                log::info!(
                    "event=mcp.connected server={name} tools={} duration_ms={}",
                    out.len(),
                    started.elapsed().as_millis()
                );
                Ok(out)
            }
            Err(e) => {
                let msg = match &e {
                    Failure::Handshake(e) => redact_status(e, &secrets),
                    Failure::Discovery(e) => {
                        let line = format!("{}: tool discovery failed ({e})", e.kind());
                        redact_line(&line, &secrets)
                    }
                };
                let msg = if msg.trim().is_empty() { "MCP connection failed".to_string() } else { msg };
                log::warn!("event=mcp.connect.failed server={name} error={msg:?}");
                let mut st = lock(&slot.state);
                st.status = Status::Error;
                st.error = Some(msg.clone());
                st.live = None;
                Err(msg)
            }
        }
    }

    /// Assigns names and builds wrappers for `tools` of `server`, forgetting names of tools
    /// that disappeared.
    fn register(&self, server: &str, tools: &[ToolInfo]) -> Vec<Arc<LiveTool>> {
        let mut names = lock(&self.names);
        let mut out: Vec<Arc<LiveTool>> = tools
            .iter()
            .map(|t| {
                Arc::new(LiveTool {
                    name: names.assign(server, &t.name),
                    server: server.to_string(),
                    original_name: t.name.clone(),
                    description: t
                        .description
                        .clone()
                        .filter(|d| !d.trim().is_empty())
                        .unwrap_or_else(|| t.name.clone()),
                    input_schema: normalize_schema(&t.input_schema),
                    raw_schema: t.input_schema.clone(),
                    raw_description: t.description.clone(),
                })
            })
            .collect();
        let keep: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
        let stale: Vec<String> =
            names.remove_server(server).into_iter().filter(|n| !keep.contains(&n.as_str())).collect();
        // remove_server dropped every name: put the kept ones back in the same order.
        for t in &out {
            names.assign(server, &t.original_name);
        }
        drop(names);
        if !stale.is_empty() {
            log::debug!("mcp {server}: {} tools gone after refresh", stale.len());
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn write_cache_for(&self, name: &str, fingerprint: &str, tools: &[ToolInfo]) {
        if let Err(e) = catalog::write_cache(&self.cfg.data_dir, name, fingerprint, tools) {
            log::warn!("event=mcp.cache.write_failed server={name} error_kind={:?}", e.kind());
        }
    }

    /// Lists the tools of a live connection again (after `tools/list_changed`); keeps the old
    /// list on failure. Caller holds the slot's connect lock and has consumed the flag.
    fn relist(&self, name: &str, slot: &Slot, live: Arc<Live>) -> Vec<Arc<LiveTool>> {
        match live.client.list_tools() {
            Ok(tools) => {
                if let Some(c) = self.server_config(name) {
                    let fp = catalog::fingerprint(&lock(&self.catalog).runtime_spec(&c));
                    self.write_cache_for(name, &fp, &tools);
                }
                let fresh = Arc::new(Live { client: live.client.clone(), tools: self.register(name, &tools) });
                let out = fresh.tools.clone();
                lock(&slot.state).live = Some(fresh);
                self.bump();
                log::info!("event=mcp.tools.refreshed server={name} tools={}", out.len());
                out
            }
            Err(e) => {
                log::warn!("event=mcp.tools.refresh_failed server={name} error={:?}", redact_status(&e, &[]));
                live.tools.clone()
            }
        }
    }

    fn disconnect_inner(&self, name: &str, purge: bool) {
        let slot = self.slot(name);
        let _c = lock(&slot.connect);
        let live = {
            let mut st = lock(&slot.state);
            st.status = Status::Disconnected;
            st.error = None;
            st.live.take()
        };
        let removed = lock(&self.names).remove_server(name);
        if let Some(live) = live {
            live.client.close();
            log::info!("event=mcp.disconnected server={name}");
        }
        self.bump();
        if purge && !removed.is_empty() {
            let hook = lock(&self.purge_hook).clone();
            if let Some(hook) = hook {
                hook(&removed);
            }
        }
    }

    /// Every live tool of every server (after list_changed refreshes), sorted by name.
    pub fn live_tools(&self) -> Vec<Arc<LiveTool>> {
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
    pub fn lookup(&self, wrapped: &str) -> Option<Arc<LiveTool>> {
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
        let client = match self.observe(server) {
            (Status::Connected, _, Some(live)) => live.client.clone(),
            _ => {
                self.connect_server(server).map_err(Error::Closed)?;
                match self.observe(server) {
                    (_, _, Some(live)) => live.client.clone(),
                    _ => return Err(Error::Closed(GONE.into())),
                }
            }
        };
        let started = std::time::Instant::now();
        let r = client.call_tool(tool, args, cancel);
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

    /// `GET /api/mcp/servers/{name}/tools`.
    pub fn tools_listing(&self, name: &str) -> std::result::Result<Value, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        let live = self.live_tools_of(name);
        let (status, error, _) = self.observe(name);
        let (source, tools): (&str, Vec<Value>) = if !live.is_empty() || status == Status::Connected {
            let tools = live
                .iter()
                .map(|t| {
                    json!({"name": t.name, "original_name": t.original_name, "description": t.description,
                               "input_schema": t.input_schema, "source": "live", "callable": true})
                })
                .collect();
            ("live", tools)
        } else {
            match self.cached_tools(&cfg) {
                Some(cached) => (
                    "cache",
                    cached
                        .iter()
                        .map(|t| {
                            json!({"name": super::names::wrapped_name(name, &t.name), "original_name": t.name,
                                       "description": t.description.clone().unwrap_or_default(),
                                       "input_schema": t.input_schema, "source": "cache", "callable": false})
                        })
                        .collect(),
                ),
                None => ("none", Vec::new()),
            }
        };
        Ok(json!({"server": name, "display_name": cfg.display_name, "tools": tools, "source": source,
                  "status": status.as_str(), "status_error": error, "tool_count": live.len()}))
    }

    fn cached_tools(&self, cfg: &ServerConfig) -> Option<Vec<catalog::CachedTool>> {
        let spec = lock(&self.catalog).runtime_spec(cfg);
        catalog::read_cache(&self.cfg.data_dir, &cfg.name, &catalog::fingerprint(&spec))
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
        let mut docs = Vec::new();
        for cfg in &cfgs {
            let mut server_docs: Vec<SearchDoc> = self
                .cached_tools(cfg)
                .unwrap_or_default()
                .iter()
                .map(|t| {
                    SearchDoc::tool(
                        &cfg.name,
                        &cfg.display_name,
                        &cfg.description,
                        &t.name,
                        t.description.as_deref().unwrap_or(""),
                        DocKind::Cached,
                    )
                })
                .collect();
            for t in live.iter().filter(|t| t.server == cfg.name) {
                let doc = SearchDoc::tool(
                    &cfg.name,
                    &cfg.display_name,
                    &cfg.description,
                    &t.original_name,
                    t.raw_description.as_deref().unwrap_or(""),
                    DocKind::Live { wrapped: t.name.clone() },
                );
                match server_docs.iter_mut().find(|d| d.tool == t.original_name) {
                    Some(d) => *d = doc,
                    None => server_docs.push(doc),
                }
            }
            if server_docs.is_empty() {
                server_docs.push(SearchDoc::server_entry(&cfg.name, &cfg.display_name, &cfg.description));
            }
            docs.extend(server_docs);
        }
        let idx = Arc::new(SearchIndex::build(docs));
        *lock(&self.index) = Some((generation, idx.clone()));
        idx
    }

    /// Closes every connection (stdio children are killed and reaped), in parallel.
    pub fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let slots: Vec<(String, Arc<Slot>)> = lock(&self.slots).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let lives: Vec<(String, Arc<Live>)> = slots
            .iter()
            .filter_map(|(n, s)| {
                let mut st = lock(&s.state);
                st.status = Status::Disconnected;
                st.live.take().map(|l| (n.clone(), l))
            })
            .collect();
        std::thread::scope(|scope| {
            for (name, live) in &lives {
                scope.spawn(move || {
                    live.client.close();
                    log::debug!("mcp {name}: closed at shutdown");
                });
            }
        });
    }
}

/// Distinguishes a failed handshake from a failed `tools/list` for the status line.
enum Failure {
    Handshake(Error),
    Discovery(Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_normalised_for_providers() {
        assert_eq!(normalize_schema(&json!("nope")), json!({"type": "object", "properties": {}, "required": []}));
        let raw = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                         "properties": {"a": {"type": ["integer", "null"]}, "b": {"anyOf": [{"type": "string"}]},
                                        "c": {"type": "object", "properties": {"d": {"type": ["null", "string"]}}}}});
        assert_eq!(
            normalize_schema(&raw),
            json!({"type": "object", "required": [],
                   "properties": {"a": {"type": "integer", "nullable": true}, "b": {"anyOf": [{"type": "string"}]},
                                  "c": {"type": "object", "properties": {"d": {"type": "string", "nullable": true}}}}})
        );
    }

    #[test]
    fn status_lines_are_one_line_redacted_and_capped() {
        let e = Error::Connect("POST failed: header Bearer sk-abcdefghijkl\nX-Key: hunter2-value".into());
        let line = redact_status(&e, &["hunter2-value".to_string()]);
        assert!(line.starts_with("ConnectError: cannot reach MCP server: POST failed"), "{line}");
        assert!(!line.contains('\n') && !line.contains("hunter2-value") && !line.contains("sk-abcdefghijkl"), "{line}");
        let long = Error::Protocol("x".repeat(2000));
        assert_eq!(redact_status(&long, &[]).chars().count(), MAX_STATUS_ERROR);
    }
}
