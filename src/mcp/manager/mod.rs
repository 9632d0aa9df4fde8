//! `McpManager`: the one owner of MCP's shared state, used as `Arc<McpManager>` by HTTP handlers
//! and turn workers. It starts no thread of its own (a call of a tool whose server is down
//! starts one `mcp-<server>-reconnect`, see [`connections`]). This file holds the state (the
//! catalog, one slot per server with its connect lock, the tool names, the search index and its
//! generation, OAuth state, the hooks), its construction, and the server view every operation
//! answers with. The operations live by concern:
//!
//! - [`connections`]: connect (handshake + `tools/list` before "connected"), disconnect,
//!   `tools/list_changed` refresh, status with redacted errors, the on-demand reconnect of a
//!   call, shutdown (kills stdio children);
//! - [`tools`]: tool listings (live, or cached per fingerprint), lookup and calls with timeout
//!   and cancel, dormant activated tools, the search index (documents from [`super::search`]);
//! - [`oauth`]: browser authorization flows (`PendingFlow`s by `state`), their callback,
//!   sign-out;
//! - [`admin`]: catalog create / update / delete over typed entries, and the review and approval
//!   of tools held by pinning.
//!
//! A refused operation is an [`McpError`]; no HTTP status is chosen in this module. Catalog
//! mutations are serialised by one lock; each server has its own connect lock, so concurrent
//! connects of one server coalesce while different servers connect in parallel.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::auth::{OAuth, PendingFlow};
use super::catalog::{Catalog, ServerConfig};
use super::client::{Client, ClientConfig, ToolInfo};
use super::names::NameTable;
use super::pins::{self, Pins};
use super::search::SearchIndex;
use super::status::Status;
use super::tool::LiveTool;
use super::views::ServerView;
use super::McpError;
use crate::util::sync::lock;

mod admin;
mod connections;
mod oauth;
mod tools;

pub(crate) use oauth::{oauth_redirect_uri, OAUTH_CALLBACK_PATH};

const NOT_CONFIGURED: &str = "MCP server is not configured";
const GONE: &str = "connection is no longer available";

#[derive(Debug, Clone)]
pub struct ManagerConfig {
    pub client: ClientConfig,
    /// `<data>`: holds `mcp/servers.json`, `mcp/oauth/` and `mcp_cache/`.
    pub data_dir: PathBuf,
}

impl ManagerConfig {
    /// The client defaults with the timeouts of `config.mcp` (parsed and checked at start-up).
    pub(crate) fn from_config(config: &crate::config::Config) -> ManagerConfig {
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

/// Every MCP server's live state; the operations are in this module's children, by concern.
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

    /// Shares `secrets` (the server's registry) and tells it the catalog's secrets; every
    /// later create, update and delete updates it.
    pub(crate) fn with_secrets(mut self, secrets: crate::secrets::Secrets) -> McpManager {
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
    pub(crate) fn set_catalog_hook(&self, f: impl Fn() + Send + Sync + 'static) {
        *lock(&self.catalog_hook) = Some(Arc::new(f));
    }

    fn catalog_changed(&self) {
        self.publish_secrets();
        let hook = lock(&self.catalog_hook).clone();
        if let Some(hook) = hook {
            hook();
        }
    }

    pub(crate) fn server_config(&self, name: &str) -> Option<ServerConfig> {
        lock(&self.catalog).get(name).cloned()
    }

    /// The server's configuration, or not found.
    fn configured(&self, name: &str) -> Result<ServerConfig, McpError> {
        self.server_config(name).ok_or_else(|| McpError::NotFound(name.to_string()))
    }

    /// Configured server names in catalog order.
    pub(crate) fn server_names(&self) -> Vec<String> {
        lock(&self.catalog).all().into_iter().map(|c| c.name.clone()).collect()
    }

    fn slot(&self, name: &str) -> Arc<Slot> {
        lock(&self.slots).entry(name.to_string()).or_default().clone()
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// The server as the API shows it (docs/http-api.md §6).
    fn view(&self, cfg: &ServerConfig) -> ServerView {
        let (status, error, live) = self.observe(&cfg.name);
        let mut v = ServerView::new(cfg, status, error, live.map(|l| l.tools.len()).unwrap_or(0));
        v.auth = self.auth_state(cfg);
        v.pending_changes = self.pins_of(cfg).pending.len();
        v
    }

    /// The server's pins as stored (`<data>/mcp/pins/<server>.json`, read at each use).
    fn pins_of(&self, cfg: &ServerConfig) -> Pins {
        Pins::load(&self.cfg.data_dir, &cfg.name, &pins::identity(cfg))
    }
}
