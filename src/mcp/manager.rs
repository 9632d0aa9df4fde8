//! Live MCP connections by server name: explicit and lazy connect (handshake + `tools/list`
//! before "connected"), disconnect (closes the transport, unregisters its tools, asks the host
//! to purge activations), status with redacted errors, `tools/list_changed` refresh, tool
//! listings (live or cached per fingerprint), calls with timeout and cancel, the search index
//! cached per content generation (its documents come from [`super::search`]), and shutdown (kills stdio children). Catalog mutations are serialised by one lock; each
//! server has its own connect lock, so concurrent connects of one server coalesce while
//! different servers connect in parallel.
//!
//! Shared as `Arc<McpManager>` by HTTP handlers and turn workers; it starts no thread itself.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::auth::{self, OAuth, PendingFlow};
use super::cache::{self, CachedTool};
use super::catalog::Kind;
use super::catalog::{Catalog, ServerConfig};
use super::client::{Ask, AuthHandle, CallResult, Client, ClientConfig, ToolInfo};
use super::names::{wrapped_name, NameTable};
use super::pins::{self, Pins};
use super::search::{self, SearchIndex};
use super::status::{redact_line, redact_status, Status};
use super::tool::LiveTool;
use super::views::{ApiError, Change, ChangeList, ServerList, ServerView, ToolListing, ToolSource, ToolView, Version};
use super::{Error, Result};
use crate::util::cancel::CancelToken;
use crate::util::sync::lock;
use crate::util::text;

/// The callback route of browser OAuth flows (`http::mcp_routes`).
pub const OAUTH_CALLBACK_PATH: &str = "/api/mcp/oauth/callback";
/// Browser flows waiting for their callback at once (older ones are dropped first).
const MAX_PENDING_FLOWS: usize = 16;

const NOT_CONFIGURED: &str = "MCP server is not configured";
const GONE: &str = "connection is no longer available";

#[derive(Debug, Clone)]
pub struct ManagerConfig {
    pub client: ClientConfig,
    /// `<data>`: holds `mcp/servers.json`, `mcp/oauth/` and `mcp_cache/`.
    pub data_dir: PathBuf,
}

/// Where OAuth providers send the browser back: CashCode's own callback route on its HTTP
/// listener (loopback and wildcard binds as `127.0.0.1`).
pub fn oauth_redirect_uri(http_host: &str, port: u16) -> String {
    let h = http_host;
    let host = if crate::config::is_loopback(h) || h == "0.0.0.0" || h == "::" || h == "[::]" {
        "127.0.0.1".to_string()
    } else if h.contains(':') && !h.starts_with('[') {
        format!("[{h}]")
    } else {
        h.to_string()
    };
    format!("http://{host}:{port}{OAUTH_CALLBACK_PATH}")
}

impl ManagerConfig {
    /// The client defaults with the timeouts of `config.mcp` (parsed and checked at start-up).
    pub fn from_config(config: &crate::config::Config) -> ManagerConfig {
        let t = config.mcp;
        let client = ClientConfig {
            connect_timeout: t.connect_timeout,
            call_timeout: t.call_timeout,
            request_timeout: t.request_timeout,
            max_call_time: t.max_call_time,
            ..ClientConfig::default()
        };
        ManagerConfig { client, data_dir: config.data_dir.clone() }
    }
}

struct Live {
    client: Arc<Client>,
    /// The registered (approved) tools.
    tools: Vec<Arc<LiveTool>>,
    /// The server's whole `tools/list`, held tools included (re-registered after an approval).
    listed: Vec<ToolInfo>,
    /// Original names of tools whose change waits for the user's approval ([`super::pins`]).
    held: Vec<String>,
}

#[derive(Default)]
struct SlotState {
    status: Status,
    error: Option<String>,
    live: Option<Arc<Live>>,
    /// The last connect ended with `AuthorizationRequired`.
    auth_required: bool,
    /// The user disconnected the server: its activated tools are not offered from the cache
    /// and are not reconnected on demand until something connects it explicitly.
    user_off: bool,
}

#[derive(Default)]
struct Slot {
    /// Held for a whole connect/disconnect/refresh of this server.
    connect: Mutex<()>,
    state: Mutex<SlotState>,
    /// Connect attempts finished; a caller that waited for the connect lock while another
    /// attempt ran takes that attempt's outcome instead of connecting again.
    attempts: AtomicU64,
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
    /// OAuth state of Streamable HTTP servers, by name (created on first use).
    oauth: Mutex<HashMap<String, Arc<OAuth>>>,
    /// Browser flows by `state`: (server, flow); taken out once by the callback.
    flows: Mutex<HashMap<String, (String, PendingFlow)>>,
    /// Every server's OAuth secrets (tokens, client secrets), published as `mcp-oauth`.
    oauth_secrets: Arc<Mutex<HashMap<String, Vec<String>>>>,
    redirect_uri: Mutex<String>,
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
            oauth: Mutex::new(HashMap::new()),
            flows: Mutex::new(HashMap::new()),
            oauth_secrets: Arc::default(),
            redirect_uri: Mutex::new(format!("http://127.0.0.1:8000{OAUTH_CALLBACK_PATH}")),
        }
    }

    /// Sets the OAuth redirect URI ([`oauth_redirect_uri`] of the bound HTTP listener), before
    /// any request is served.
    pub fn set_oauth_redirect(&self, uri: String) {
        *lock(&self.redirect_uri) = uri;
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

    /// The server as the API shows it (http-api.md §6).
    fn view(&self, cfg: &ServerConfig) -> ServerView {
        let (status, error, live) = self.observe(&cfg.name);
        let mut v = ServerView::new(cfg, status, error, live.map(|l| l.tools.len()).unwrap_or(0));
        v.auth = self.auth_state(cfg);
        v.pending_changes = self.pins_of(cfg).pending.len();
        v
    }

    /// `"authorized"` with a token held, `"required"` when the last connect asked for one.
    fn auth_state(&self, cfg: &ServerConfig) -> Option<&'static str> {
        let oauth = self.oauth_for(cfg)?;
        if oauth.authorized() {
            Some("authorized")
        } else if lock(&self.slot(&cfg.name).state).auth_required {
            Some("required")
        } else {
            None
        }
    }

    /// The OAuth state of a Streamable HTTP server (none for other kinds, or when the owner
    /// configured an `Authorization` header), loading stored tokens on first use.
    fn oauth_for(&self, cfg: &ServerConfig) -> Option<Arc<OAuth>> {
        if cfg.kind != Kind::StreamableHttp || cfg.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
            return None;
        }
        let mut map = lock(&self.oauth);
        if let Some(o) = map.get(&cfg.name) {
            return Some(o.clone());
        }
        let settings = auth::Settings {
            client_name: "CashCode".into(),
            redirect_uri: lock(&self.redirect_uri).clone(),
            ..auth::Settings::default()
        };
        let (all, secrets, name) = (self.oauth_secrets.clone(), self.secrets.clone(), cfg.name.clone());
        let sink = Arc::new(move |values: Vec<String>| {
            let mut all = lock(&all);
            all.insert(name.clone(), values);
            secrets.set("mcp-oauth", all.values().flatten().cloned().collect::<Vec<_>>());
        });
        let o = Arc::new(
            OAuth::new(&cfg.url, settings, Arc::new(auth::Browser))
                .with_secret_sink(sink)
                .with_store(auth::tokens::TokenStore::new(&self.cfg.data_dir, &cfg.name)),
        );
        map.insert(cfg.name.clone(), o.clone());
        Some(o)
    }

    /// Forgets a server's OAuth state; with `delete`, its stored tokens too.
    fn drop_oauth(&self, name: &str, delete: bool) {
        let o = lock(&self.oauth).remove(name);
        lock(&self.flows).retain(|_, (n, _)| n != name);
        if delete {
            let r = match o {
                Some(o) => o.sign_out(),
                None => auth::tokens::TokenStore::new(&self.cfg.data_dir, name).delete(),
            };
            if let Err(e) = r {
                log::warn!("event=mcp.oauth.delete_failed server={name} error_kind={:?}", e.kind());
            }
        }
        let mut all = lock(&self.oauth_secrets);
        all.remove(name);
        self.secrets.set("mcp-oauth", all.values().flatten().cloned().collect::<Vec<_>>());
    }

    /// `POST /api/mcp/servers/{name}/authorize`: starts a browser flow and returns the URL
    /// to open. Network-bound (discovery, maybe registration).
    pub fn authorize(&self, name: &str) -> std::result::Result<Value, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        let oauth = self.oauth_for(&cfg).ok_or_else(|| {
            ApiError::new(400, "OAuth applies to Streamable HTTP servers without an Authorization header")
        })?;
        let flow = oauth.begin().map_err(|e| {
            let msg = redact_status(&e, &cfg.secrets());
            log::warn!("event=mcp.oauth.begin_failed server={name} error={msg:?}");
            ApiError::new(502, &msg)
        })?;
        let url = flow.url.clone();
        let mut flows = lock(&self.flows);
        flows.retain(|_, (_, f)| !f.expired());
        while flows.len() >= MAX_PENDING_FLOWS {
            let oldest = flows.iter().min_by_key(|(_, (_, f))| f.created).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => flows.remove(&k),
                None => break,
            };
        }
        flows.insert(flow.state.clone(), (name.to_string(), flow));
        log::info!("event=mcp.oauth.flow_started server={name}");
        let mut out = Map::new();
        out.insert("authorization_url".into(), Value::String(url));
        Ok(Value::Object(out))
    }

    /// `GET /api/mcp/oauth/callback`: the flow named by `state` is taken out (single use,
    /// whatever the outcome) and completed. Returns the server's name, or why not (already
    /// redacted, safe to show).
    pub fn oauth_callback(&self, params: &[(String, String)]) -> std::result::Result<String, String> {
        let state = params.iter().find(|(k, _)| k == "state").map(|(_, v)| v.as_str()).unwrap_or("");
        let taken = lock(&self.flows).remove(state);
        let Some((name, flow)) = taken else {
            log::warn!("event=mcp.oauth.callback_refused reason=unknown_state");
            return Err("This authorization link is unknown, was already used, or has expired.".into());
        };
        if flow.expired() {
            log::warn!("event=mcp.oauth.callback_refused server={name} reason=expired");
            return Err("This authorization took too long. Start it again from CashCode.".into());
        }
        let cfg = self.server_config(&name).ok_or_else(|| NOT_CONFIGURED.to_string())?;
        let oauth = self.oauth_for(&cfg).ok_or_else(|| NOT_CONFIGURED.to_string())?;
        match oauth.finish(flow, params) {
            Ok(()) => {
                lock(&self.slot(&name).state).auth_required = false;
                Ok(name)
            }
            Err(e) => {
                let msg = redact_status(&e, &cfg.secrets());
                log::warn!("event=mcp.oauth.callback_failed server={name} error={msg:?}");
                Err(msg)
            }
        }
    }

    /// `POST /api/mcp/servers/{name}/sign-out`: disconnects and forgets the tokens.
    pub fn sign_out(&self, name: &str) -> std::result::Result<ServerView, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        self.disconnect_inner(name, true);
        if let Some(o) = self.oauth_for(&cfg) {
            if let Err(e) = o.sign_out() {
                log::warn!("event=mcp.oauth.delete_failed server={name} error_kind={:?}", e.kind());
                return Err(ApiError::new(500, "could not delete the stored authorization"));
            }
        }
        log::info!("event=mcp.oauth.signed_out server={name}");
        Ok(self.view(&cfg))
    }

    /// `GET /api/mcp/servers`.
    pub fn list(&self) -> ServerList {
        let cfgs: Vec<ServerConfig> = lock(&self.catalog).all().into_iter().cloned().collect();
        ServerList { servers: cfgs.iter().map(|c| self.view(c)).collect() }
    }

    /// One DTO, or 404.
    pub fn dto(&self, name: &str) -> std::result::Result<ServerView, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        Ok(self.view(&cfg))
    }

    /// `POST /api/mcp/servers` -> 201 DTO (disconnected).
    pub fn create(&self, body: &Value) -> std::result::Result<ServerView, ApiError> {
        let _m = lock(&self.mutation);
        let cfg = lock(&self.catalog).create(body)?;
        cache::delete_cache(&self.cfg.data_dir, &cfg.name);
        let slot = self.slot(&cfg.name);
        *lock(&slot.state) = SlotState::default();
        self.bump();
        log::info!("event=mcp.server.created server={}", cfg.name);
        self.catalog_changed();
        Ok(self.view(&cfg))
    }

    /// `PUT /api/mcp/servers/{name}`: replaces the config, closes the connection, purges
    /// activations, deletes the cache.
    pub fn update(&self, name: &str, body: &Value) -> std::result::Result<ServerView, ApiError> {
        let _m = lock(&self.mutation);
        let cfg = lock(&self.catalog).update(name, body)?;
        self.disconnect_inner(name, true);
        self.drop_oauth(name, false);
        cache::delete_cache(&self.cfg.data_dir, name);
        let slot = self.slot(name);
        *lock(&slot.state) = SlotState::default();
        self.bump();
        log::info!("event=mcp.server.updated server={name}");
        self.catalog_changed();
        Ok(self.view(&cfg))
    }

    /// `DELETE /api/mcp/servers/{name}`.
    pub fn delete(&self, name: &str) -> std::result::Result<(), ApiError> {
        let _m = lock(&self.mutation);
        lock(&self.catalog).check_mutable(name)?;
        self.disconnect_inner(name, true);
        self.drop_oauth(name, true);
        cache::delete_cache(&self.cfg.data_dir, name);
        let _ = std::fs::remove_file(pins::pins_path(&self.cfg.data_dir, name));
        lock(&self.catalog).delete(name)?;
        lock(&self.slots).remove(name);
        self.bump();
        log::info!("event=mcp.server.deleted server={name}");
        self.catalog_changed();
        Ok(())
    }

    /// `POST /api/mcp/servers/{name}/connect`: 404 if unknown, else the DTO (maybe `error`).
    pub fn connect(&self, name: &str) -> std::result::Result<ServerView, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        let _ = self.connect_server(name);
        Ok(self.view(&cfg))
    }

    /// `POST /api/mcp/servers/{name}/disconnect`.
    pub fn disconnect(&self, name: &str) -> std::result::Result<ServerView, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        self.disconnect_inner(name, true);
        lock(&self.slot(name).state).user_off = true;
        Ok(self.view(&cfg))
    }

    /// Connects (or reuses the live connection) and returns the server's tools. The error is
    /// the redacted status line. Used by the API, `mcp_prepare`, per-turn selection and skills.
    pub fn connect_server(&self, name: &str) -> std::result::Result<Vec<Arc<LiveTool>>, String> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err("server is shutting down".into());
        }
        let slot = self.slot(name);
        let seen = slot.attempts.load(Ordering::SeqCst);
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
        if slot.attempts.load(Ordering::SeqCst) != seen {
            // Another caller's attempt failed while this one waited: one attempt for all.
            if let (Status::Error, Some(e), _) = self.observe(name) {
                return Err(e);
            }
        }
        {
            let mut st = lock(&slot.state);
            st.status = Status::Connecting;
            st.error = None;
            st.user_off = false;
        }
        let spec = lock(&self.catalog).runtime_spec(&cfg);
        let fingerprint = cache::fingerprint(&spec);
        let secrets = cfg.secrets();
        let started = std::time::Instant::now();
        let mut client_cfg = self.cfg.client.clone();
        client_cfg.auth = self.oauth_for(&cfg).map(|o| AuthHandle(o as Arc<dyn auth::Authorizer>));
        let outcome = match Client::connect(name, &spec, client_cfg) {
            Err(e) => Err(Failure::Handshake(e)),
            Ok(client) => match client.list_tools() {
                Ok(tools) => Ok((client, tools)),
                Err(e) => {
                    client.close();
                    Err(Failure::Discovery(e))
                }
            },
        };
        slot.attempts.fetch_add(1, Ordering::SeqCst);
        match outcome {
            Ok((client, tools)) => {
                let (accepted, held) = self.accept(&cfg, &tools);
                self.write_cache_for(name, &fingerprint, &accepted);
                let live = Arc::new(Live {
                    client: Arc::new(client),
                    tools: self.register(name, &accepted),
                    listed: tools,
                    held,
                });
                let out = live.tools.clone();
                {
                    let mut st = lock(&slot.state);
                    st.status = Status::Connected;
                    st.error = None;
                    st.live = Some(live);
                    st.auth_required = false;
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
                let needs_auth = matches!(
                    &e,
                    Failure::Handshake(Error::AuthorizationRequired(_))
                        | Failure::Discovery(Error::AuthorizationRequired(_))
                );
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
                st.auth_required = needs_auth;
                Err(msg)
            }
        }
    }

    /// Assigns names and builds wrappers for `tools` of `server`, forgetting names of tools
    /// that disappeared.
    fn register(&self, server: &str, tools: &[ToolInfo]) -> Vec<Arc<LiveTool>> {
        let mut names = lock(&self.names);
        let mut out: Vec<Arc<LiveTool>> =
            tools.iter().map(|t| Arc::new(LiveTool::new(names.assign(server, &t.name), server, t))).collect();
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

    /// Checks a fresh listing against the server's pins (recording new tools and changes) and
    /// splits it into the tools to register and the original names held for approval.
    fn accept(&self, cfg: &ServerConfig, tools: &[ToolInfo]) -> (Vec<ToolInfo>, Vec<String>) {
        let mut p = self.pins_of(cfg);
        let (held, changed) = p.check(tools);
        if changed {
            if let Err(e) = p.save(&self.cfg.data_dir, &cfg.name) {
                log::warn!("event=mcp.pins.write_failed server={} error_kind={:?}", cfg.name, e.kind());
            }
        }
        if !held.is_empty() {
            log::warn!("event=mcp.tools.changed server={} held={}", cfg.name, held.len());
        }
        (tools.iter().filter(|t| !held.contains(&t.name)).cloned().collect(), held)
    }

    fn pins_of(&self, cfg: &ServerConfig) -> Pins {
        Pins::load(&self.cfg.data_dir, &cfg.name, &pins::identity(cfg))
    }

    /// Whether `tool` (original name) of `server` has a change waiting for approval.
    pub fn is_held(&self, server: &str, tool: &str) -> bool {
        self.server_config(server).is_some_and(|c| self.pins_of(&c).pending.contains_key(tool))
    }

    /// `GET /api/mcp/servers/{name}/changes`: each held tool's approved and new version.
    pub fn changes(&self, name: &str) -> std::result::Result<ChangeList, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        let p = self.pins_of(&cfg);
        let changes = p
            .pending
            .iter()
            .map(|(tool, new)| Change {
                name: wrapped_name(name, tool),
                new: Version::of(new),
                old: p.tools.get(tool).map(Version::of),
                original_name: tool.clone(),
            })
            .collect();
        Ok(ChangeList { changes, server: name.to_string() })
    }

    /// `POST /api/mcp/servers/{name}/changes/approve`: pins the pending versions of `only`
    /// (original names; all when `None`) and, when connected, registers them at once.
    pub fn approve_changes(&self, name: &str, only: Option<&[String]>) -> std::result::Result<ChangeList, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
        let slot = self.slot(name);
        let _c = lock(&slot.connect);
        let mut p = self.pins_of(&cfg);
        let approved = p.approve(only);
        if !approved.is_empty() {
            p.save(&self.cfg.data_dir, name).map_err(|e| ApiError::not_saved(&e))?;
            log::info!("event=mcp.tools.approved server={name} tools={}", approved.len());
            let current = lock(&slot.state).live.clone();
            if let Some(live) = current {
                let held = p.held_among(&live.listed);
                let accepted: Vec<ToolInfo> = live.listed.iter().filter(|t| !held.contains(&t.name)).cloned().collect();
                let fp = cache::fingerprint(&lock(&self.catalog).runtime_spec(&cfg));
                self.write_cache_for(name, &fp, &accepted);
                let fresh = Arc::new(Live {
                    client: live.client.clone(),
                    tools: self.register(name, &accepted),
                    listed: live.listed.clone(),
                    held,
                });
                lock(&slot.state).live = Some(fresh);
            }
            self.bump();
        }
        drop(_c);
        self.changes(name)
    }

    fn write_cache_for(&self, name: &str, fingerprint: &str, tools: &[ToolInfo]) {
        if let Err(e) = cache::write_cache(&self.cfg.data_dir, name, fingerprint, tools) {
            log::warn!("event=mcp.cache.write_failed server={name} error_kind={:?}", e.kind());
        }
    }

    /// Lists the tools of a live connection again (after `tools/list_changed`); keeps the old
    /// list on failure. Caller holds the slot's connect lock and has consumed the flag.
    fn relist(&self, name: &str, slot: &Slot, live: Arc<Live>) -> Vec<Arc<LiveTool>> {
        match live.client.list_tools() {
            Ok(tools) => {
                let Some(c) = self.server_config(name) else { return live.tools.clone() };
                let (accepted, held) = self.accept(&c, &tools);
                let fp = cache::fingerprint(&lock(&self.catalog).runtime_spec(&c));
                self.write_cache_for(name, &fp, &accepted);
                let fresh = Arc::new(Live {
                    client: live.client.clone(),
                    tools: self.register(name, &accepted),
                    listed: tools,
                    held,
                });
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
        self.call_on_asking(server, tool, args, cancel, None)
    }

    /// [`McpManager::call_on`] whose server may ask the user through `ask` (elicitation).
    pub fn call_on_asking(
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

    fn user_off(&self, server: &str) -> bool {
        lock(&self.slot(server).state).user_off
    }

    /// Whether `server` has a live connection now (a dead one is noticed first).
    pub fn is_connected(&self, server: &str) -> bool {
        matches!(self.observe(server), (Status::Connected, _, Some(_)))
    }

    /// Activated tools of servers that are not connected (after a restart or a crash), built
    /// from the tool-schema cache of their last connect (approved tools only), restricted to
    /// the model-facing names in `wanted`. Calling one reconnects its server on demand.
    pub fn dormant_tools(&self, wanted: &[&str]) -> Vec<Arc<LiveTool>> {
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

    /// Connects `server` for a call of one of its tools, on a helper thread, so the caller
    /// waits at most the connect budget (connect + `tools/list`) and wakes on `cancel`.
    /// Concurrent callers share one attempt (the connect lock and `attempts` coalesce them).
    pub fn reconnect_for_call(self: &Arc<Self>, server: &str, cancel: &CancelToken) -> std::result::Result<(), String> {
        use crate::util::blocking::Stop;
        if self.user_off(server) {
            return Err("the user disconnected it; connect it in the MCP market or with mcp_prepare".into());
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (mgr, name) = (Arc::clone(self), server.to_string());
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-{}-reconnect", text::take_chars(server, 20)))
            .stack_size(256 * 1024)
            .spawn(move || {
                let _ = tx.send(mgr.connect_server(&name).map(|_| ()));
            });
        if let Err(e) = spawned {
            return Err(format!("cannot start the reconnect: {e}"));
        }
        let budget =
            self.cfg.client.connect_timeout + self.cfg.client.request_timeout + std::time::Duration::from_secs(2);
        // The wait of every blocking call of a turn (`util::blocking`); the connect itself ends
        // at its own timeouts, so the thread cannot outlive the budget by much.
        match crate::util::blocking::wait(&rx, Some(cancel), std::time::Instant::now() + budget) {
            Ok(r) => r,
            Err(Stop::Gone) => Err("the reconnect ended without an answer".into()),
            Err(Stop::Cancelled) => Err("cancelled".into()),
            Err(Stop::Overdue) => Err(format!("no connection within {}s", super::fmt_secs(budget))),
        }
    }

    /// `GET /api/mcp/servers/{name}/tools`: the live tools when connected, else the cached ones.
    pub fn tools_listing(&self, name: &str) -> std::result::Result<ToolListing, ApiError> {
        let cfg = self.server_config(name).ok_or_else(|| ApiError::not_found(name))?;
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
    use serde_json::json;

    use super::*;

    fn wire(v: &impl serde::Serialize) -> String {
        serde_json::to_string(v).unwrap()
    }

    /// The bodies of `/api/mcp/servers…` byte for byte (keys in today's order), from a
    /// catalog with a built-in stdio entry, a user SSE entry with a header and a tool cache,
    /// and a user entry whose connect fails.
    #[test]
    fn http_bodies_are_pinned_byte_for_byte() {
        let root = std::env::temp_dir().join(format!("cc-mcp-wire-{}", crate::util::rand::hex(6)));
        let data = root.join("data");
        std::fs::create_dir_all(root.join("mcp_servers")).unwrap();
        std::fs::write(
            root.join("mcp_servers/mcp_config.json"),
            r#"{"local": {"command": "node", "args": ["x.js"], "description": "Local tools"}}"#,
        )
        .unwrap();
        let catalog = Catalog::load(Some(&root), &data).unwrap();
        let mgr = McpManager::new(ManagerConfig { client: ClientConfig::default(), data_dir: data.clone() }, catalog);

        let created = mgr
            .create(&json!({"name": "weather", "display_name": "Weather", "url": "https://mcp.example/sse",
                            "headers": {"X-Key": "secret-value", "Authorization": "Bearer t"}}))
            .unwrap();
        assert_eq!(
            wire(&created),
            r#"{"builtin":false,"connected":false,"description":"","display_name":"Weather","headers":{"Authorization":"********","X-Key":"********"},"mutable":true,"name":"weather","status":"disconnected","status_error":null,"tool_count":0,"type":"sse","url":"https://mcp.example/sse"}"#
        );
        assert_eq!(
            wire(&mgr.tools_listing("weather").unwrap()),
            r#"{"display_name":"Weather","server":"weather","source":"none","status":"disconnected","status_error":null,"tool_count":0,"tools":[]}"#
        );
        let weather = mgr.server_config("weather").unwrap();
        let spec = lock(&mgr.catalog).runtime_spec(&weather);
        let tools = vec![
            ToolInfo {
                name: "forecast".into(),
                description: Some("Forecast".into()),
                input_schema: json!({"type": "object"}),
            },
            ToolInfo { name: "alerts".into(), description: None, input_schema: json!({}) },
        ];
        cache::write_cache(&data, "weather", &cache::fingerprint(&spec), &tools).unwrap();
        assert_eq!(
            wire(&mgr.tools_listing("weather").unwrap()),
            r#"{"display_name":"Weather","server":"weather","source":"cache","status":"disconnected","status_error":null,"tool_count":0,"tools":[{"callable":false,"description":"Forecast","input_schema":{"type":"object"},"name":"mcp_weather_forecast","original_name":"forecast","source":"cache"},{"callable":false,"description":"","input_schema":{},"name":"mcp_weather_alerts","original_name":"alerts","source":"cache"}]}"#
        );

        // A closed port on loopback: the connect fails at once with a status line.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        mgr.create(&json!({"name": "dead", "display_name": "Dead", "url": format!("http://127.0.0.1:{port}/sse")}))
            .unwrap();
        let failed = wire(&mgr.connect("dead").unwrap());
        let prefix = r#"{"builtin":false,"connected":false,"description":"","display_name":"Dead","headers":{},"mutable":true,"name":"dead","status":"error","status_error":"ConnectError: "#;
        let suffix = format!(r#"","tool_count":0,"type":"sse","url":"http://127.0.0.1:{port}/sse"}}"#);
        assert!(failed.starts_with(prefix) && failed.ends_with(&suffix), "{failed}");
        let dead = format!(
            r#"{{"builtin":false,"connected":false,"description":"","display_name":"Dead","headers":{{}},"mutable":true,"name":"dead","status":"disconnected","status_error":null,"tool_count":0,"type":"sse","url":"http://127.0.0.1:{port}/sse"}}"#
        );
        assert_eq!(wire(&mgr.disconnect("dead").unwrap()), dead);

        assert_eq!(
            wire(&mgr.list()),
            format!(
                r#"{{"servers":[{dead},{{"builtin":true,"connected":false,"description":"Local tools","display_name":"local","headers":{{}},"mutable":false,"name":"local","status":"disconnected","status_error":null,"tool_count":0,"type":"stdio","url":""}},{}]}}"#,
                wire(&created)
            )
        );
        assert_eq!(mgr.dto("nope").unwrap_err(), ApiError::not_found("nope"));
        assert_eq!(created.auth, None, "no OAuth state on an SSE server");
        assert_eq!(mgr.tools_listing("nope").unwrap_err(), ApiError::not_found("nope"));
        std::fs::remove_dir_all(root).unwrap();
    }

    /// A callback whose flow expired is refused and consumes it; an unknown or reused state
    /// is refused the same way; a flow's state is compared whole.
    #[test]
    fn oauth_callbacks_need_a_live_single_use_state() {
        let root = std::env::temp_dir().join(format!("cc-mcp-oauth-{}", crate::util::rand::hex(6)));
        let data = root.join("data");
        let catalog = Catalog::load(None, &data).unwrap();
        let mgr = McpManager::new(ManagerConfig { client: ClientConfig::default(), data_dir: data }, catalog);
        mgr.create(
            &json!({"name": "oa", "type": "streamable_http", "display_name": "OA", "url": "http://127.0.0.1:9/mcp"}),
        )
        .unwrap();
        let old = PendingFlow::for_test("s-old", auth::FLOW_TTL + std::time::Duration::from_secs(1));
        lock(&mgr.flows).insert("s-old".into(), ("oa".into(), old));
        let params = |s: &str| vec![("code".to_string(), "c".to_string()), ("state".to_string(), s.to_string())];
        let e = mgr.oauth_callback(&params("s-old")).unwrap_err();
        assert!(e.contains("took too long"), "{e}");
        let e = mgr.oauth_callback(&params("s-old")).unwrap_err();
        assert!(e.contains("unknown, was already used"), "an expired flow is gone after one try: {e}");
        let fresh = PendingFlow::for_test("s-new", std::time::Duration::ZERO);
        lock(&mgr.flows).insert("s-new".into(), ("oa".into(), fresh));
        assert!(mgr.oauth_callback(&params("s-ne")).unwrap_err().contains("unknown"));
        assert!(mgr.oauth_callback(&params("")).unwrap_err().contains("unknown"));
        assert_eq!(lock(&mgr.flows).len(), 1, "refused callbacks leave the pending flow alone");
        let _ = std::fs::remove_dir_all(root);
    }
}
