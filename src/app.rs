//! Builds the services, binds both listeners, names and spawns every thread (`http`,
//! `ws-accept`, `worker-N`, `dream`, `housekeep`), prints the `listening` lines, and shuts down in order:
//! stop accepting, cancel turns, close WebSockets, join.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::agent::history::ChatCache;
use crate::agent::{tools, Agent, Deps};
use crate::config::{is_loopback, Config};
use crate::http::api::Api;
use crate::llm::runtime::LlmRuntime;
use crate::mcp::catalog::Catalog;
use crate::mcp::extension::{purge_activations, McpExtension};
use crate::mcp::manager::{ManagerConfig, McpManager};
use crate::memory::consolidator::Consolidator;
use crate::memory::dream::Dream;
use crate::security::AccessPolicy;
use crate::store::chats::ChatStore;
use crate::store::memory::MemoryFiles;
use crate::ws::{hub::Hub, WsShared};

/// Set by SIGINT/SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// A running server; [`Server::stop`] shuts it down.
pub struct Server {
    pub http_port: u16,
    pub ws_port: u16,
    pub agent: Arc<Agent>,
    pub hub: Arc<Hub>,
    shutdown: Arc<AtomicBool>,
    ws: Arc<WsShared>,
    ws_addr: std::net::SocketAddr,
    threads: Vec<JoinHandle<()>>,
    /// Dropping it stops the dream and housekeep timer threads.
    timers_stop: Option<crossbeam_channel::Sender<()>>,
    api: Arc<Api>,
    pub mcp: Arc<McpManager>,
}

#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn dir(path: &std::path::Path, what: &str) -> Result<(), Error> {
    std::fs::create_dir_all(path)
        .map_err(|e| Error(format!("cannot create the {what} directory {}: {e}", path.display())))
}

/// Creates the data layout, binds, and starts every thread.
pub fn start(config: Config) -> Result<Server, Error> {
    let config = Arc::new(config);
    dir(&config.data_dir, "data")?;
    for sub in [
        "memory",
        "mcp",
        "skills/user",
        "skills/agent",
        "skill-snapshots",
        "skill-evolution/evidence",
        "skill-evolution/proposals",
    ] {
        dir(&config.data_dir.join(sub), "data")?;
    }
    dir(&config.memory_dir, "memory")?;
    dir(&config.workspace_dir, "workspace")?;
    crate::net::raise_nofile_limit();

    let workspace = config.workspace_dir.canonicalize().unwrap_or_else(|_| config.workspace_dir.clone());
    let protected = vec![config.data_dir.join("skills")];
    let chats = Arc::new(ChatStore::new(&config.memory_dir));
    let repaired = chats.recover_pending();
    if repaired > 0 {
        log::warn!("event=history.recovered_interrupted_turns chats={repaired}");
    }
    let memory = Arc::new(MemoryFiles::new(&config.memory_dir));
    let llm = Arc::new(LlmRuntime::load(
        config.llm_settings_path(),
        config.llm_timeout,
        config.deepseek_api_key.as_deref(),
        config.deepseek_api_base.as_deref(),
    ));
    let hub = Arc::new(Hub::with_ring_ttl(config.replay_ttl));
    let (consolidator, consolidate_thread) = Consolidator::start(Arc::clone(&chats), config.consolidate_chars);
    let (timers_stop, timers_rx) = crossbeam_channel::bounded::<()>(0);
    let mut threads = vec![consolidate_thread];
    if let Some(every) = config.dream_interval {
        let dream = Dream { chats: Arc::clone(&chats), memory: Arc::clone(&memory), llm: Arc::clone(&llm) };
        let stop = timers_rx.clone();
        threads.push(
            thread::Builder::new()
                .name("dream".into())
                .spawn(move || crate::memory::dream::run_loop(&dream, every, &stop))
                .map_err(|e| Error(format!("cannot start dream: {e}")))?,
        );
    }

    // MCP: both catalogs load now (an invalid entry stops start-up); nothing connects yet.
    let mcp_catalog =
        Catalog::load(config.project_dir.as_deref(), &config.data_dir).map_err(|e| Error(e.to_string()))?;
    let mcp = Arc::new(McpManager::new(ManagerConfig::from_config(&config).map_err(Error)?, mcp_catalog));

    // Skills: built-ins installed, catalog scanned; the dependency probe sees the real registry.
    let builtin_tools = tools::builtins_with(&tools::ToolSettings::from_config(&config));
    let mut registry: std::collections::BTreeSet<String> = builtin_tools.iter().map(|t| t.name().to_string()).collect();
    // The skill tools are always visible too, so a skill may require them (the original
    // reported them missing).
    for t in ["agent_skill_manage", "skill_search", "skill_load", "skill_read_resource", "tool_search", "mcp_prepare"] {
        registry.insert(t.into());
    }
    let skills = crate::skills::service::SkillService::from_config(&config, registry.clone())
        .map_err(|e| Error(format!("cannot load the skills: {e}")))?;
    let evolution = crate::skills::evolution::Evolution::new(config.skill_evolution.clone(), Arc::clone(&skills));
    // Skills see the configured MCP servers (dependency probe, refreshed after MCP catalog
    // changes) and prepare required servers like `mcp_prepare` does.
    {
        let (tools, vars, probe_mcp) = (registry.clone(), config.vars.clone(), Arc::clone(&mcp));
        skills
            .set_probe(Arc::new(move || crate::skills::catalog::DepProbe {
                tools: tools.clone(),
                mcp_servers: probe_mcp.server_names().into_iter().collect(),
                vars: vars.clone(),
            }))
            .map_err(|e| Error(format!("cannot load the skills: {e}")))?;
        let skills2 = Arc::clone(&skills);
        mcp.set_catalog_hook(move || {
            if let Err(e) = skills2.refresh() {
                log::warn!("event=skills.refresh_failed after=mcp_catalog_change error={:?}", e.to_string());
            }
        });
    }
    let skill_tools = crate::skills::tools::SkillTools::new(
        Arc::clone(&skills),
        Arc::new(crate::mcp::extension::McpSkillEnv::new(registry.into_iter().collect(), Arc::clone(&mcp))),
    );
    let skills_ext: Arc<dyn tools::TurnExtension> =
        Arc::new(crate::skills::ext::SkillsExtension::new(skill_tools, Arc::clone(&evolution), config.llm_timeout));

    let agent = Agent::new(Deps {
        cache: ChatCache::new(Arc::clone(&chats)),
        chats,
        memory,
        llm: Arc::clone(&llm),
        sink: hub.clone(),
        tools: builtin_tools,
        schemas: Default::default(),
        extensions: vec![skills_ext, Arc::new(McpExtension::new(Arc::clone(&mcp)))],
        workspace,
        protected,
        consolidator: Some(consolidator),
    });

    {
        let (hub, deps, stop) = (Arc::clone(&hub), Arc::clone(&agent.deps), timers_rx);
        let (idle, every) =
            (config.replay_ttl, (config.replay_ttl / 2).clamp(Duration::from_secs(1), Duration::from_secs(30)));
        threads.push(
            thread::Builder::new()
                .name("housekeep".into())
                .stack_size(128 * 1024)
                .spawn(move || crate::housekeep::run_loop(&hub, &deps.cache, idle, every, &stop))
                .map_err(|e| Error(format!("cannot start housekeep: {e}")))?,
        );
    }

    let weak_agent = Arc::downgrade(&agent);
    mcp.set_purge_hook(move |names| purge_activations(&weak_agent, names));

    let http_listener = crate::net::listen(&config.http_host, config.http_port)
        .map_err(|e| Error(format!("cannot listen on {}:{}: {e}", config.http_host, config.http_port)))?;
    let ws_listener = crate::net::listen(&config.ws_host, config.ws_port)
        .map_err(|e| Error(format!("cannot listen on {}:{}: {e}", config.ws_host, config.ws_port)))?;
    if let Err(e) = crate::net::set_listener_timeouts(&http_listener, crate::http::SOCKET_TIMEOUT) {
        log::warn!("event=http.timeouts_unset error=\"{e}\"");
    }
    let http_addr = http_listener.local_addr().map_err(|e| Error(e.to_string()))?;
    let ws_addr = ws_listener.local_addr().map_err(|e| Error(e.to_string()))?;
    let loopback_only = is_loopback(&config.http_host) && is_loopback(&config.ws_host);
    let policy = AccessPolicy::new(
        config.allowed_origins.clone(),
        &config.http_host,
        http_addr.port(),
        loopback_only,
        config.token.clone(),
    );

    let shutdown = Arc::new(AtomicBool::new(false));
    threads.extend(agent.spawn_workers(config.workers));

    let ws = Arc::new(WsShared::new(Arc::clone(&hub), Arc::clone(&agent), policy.clone()));
    let ws2 = Arc::clone(&ws);
    threads.push(
        thread::Builder::new()
            .name("ws-accept".into())
            .spawn(move || crate::ws::accept_loop(ws_listener, ws2))
            .map_err(|e| Error(format!("cannot start ws-accept: {e}")))?,
    );

    let http_server = tiny_http::Server::from_listener(http_listener, None)
        .map_err(|e| Error(format!("cannot start the HTTP server: {e}")))?;
    let api = Arc::new(Api {
        config: Arc::clone(&config),
        policy,
        agent: Arc::clone(&agent),
        llm,
        mcp: Arc::clone(&mcp),
        ws_port: ws_addr.port(),
        skills,
        evolution,
    });
    let sd = Arc::clone(&shutdown);
    let api2 = Arc::clone(&api);
    threads.push(
        thread::Builder::new()
            .name("http".into())
            .spawn(move || crate::http::serve(http_server, api2, &sd))
            .map_err(|e| Error(format!("cannot start http: {e}")))?,
    );

    log::info!("event=server.started http_port={} ws_port={}", http_addr.port(), ws_addr.port());
    Ok(Server {
        http_port: http_addr.port(),
        ws_port: ws_addr.port(),
        agent,
        hub,
        shutdown,
        ws,
        ws_addr,
        threads,
        timers_stop: Some(timers_stop),
        api,
        mcp,
    })
}

impl Server {
    /// The HTTP router (tests drive it without a socket).
    pub fn api(&self) -> Arc<Api> {
        Arc::clone(&self.api)
    }

    /// Stops accepting, cancels turns, closes connections, joins threads (bounded wait).
    pub fn stop(mut self) {
        self.timers_stop.take();
        self.shutdown.store(true, Ordering::SeqCst);
        self.ws.shutdown.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = std::net::TcpStream::connect_timeout(&self.ws_addr, Duration::from_millis(200));
        self.agent.shutdown();
        self.hub.close_all();
        // Kill and reap stdio children, end HTTP sessions.
        self.mcp.shutdown();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for t in self.threads.into_iter().rev() {
            while !t.is_finished() && std::time::Instant::now() < deadline {
                thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        log::info!("event=server.stopped");
    }
}

/// Runs until SIGINT/SIGTERM.
pub fn run(config: Config) -> Result<(), Error> {
    crate::logging::init(&config.log_dir, config.file_log_level, config.console_log_level, config.log_retention_days)
        .map_err(|e| Error(format!("cannot write logs to {}: {e}", config.log_dir.display())))?;
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let (http_host, ws_host) = (config.http_host.clone(), config.ws_host.clone());
    let server = start(config)?;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "http listening on http://{}:{}", display_host(&http_host), server.http_port);
    let _ = writeln!(out, "ws listening on ws://{}:{}/", display_host(&ws_host), server.ws_port);
    let _ = out.flush();
    while !STOP.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    Ok(())
}

fn display_host(h: &str) -> String {
    if h.contains(':') && !h.starts_with('[') {
        format!("[{h}]")
    } else {
        h.to_string()
    }
}
