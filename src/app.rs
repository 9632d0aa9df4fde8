//! Builds the services, binds both listeners, names and spawns every thread (`http`,
//! `ws-accept`, `worker-N`, `consolidate`, `dream`, `housekeep`), prints the `listening` lines,
//! waits for SIGINT/SIGTERM, and shuts down in order: stop accepting, cancel turns (the partial
//! answer is kept, as on a user's cancel), stop the timers and background model calls, let the
//! workers end their turns, close WebSockets, close MCP servers, join every thread by a deadline.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::agent::{tools, Agent, Deps};
use crate::config::Config;
use crate::http::api::Api;
use crate::llm::runtime::LlmRuntime;
use crate::mcp::catalog::Catalog;
use crate::mcp::extension::{purge_activations, McpExtension};
use crate::mcp::manager::{ManagerConfig, McpManager};
use crate::memory_jobs::consolidator::Consolidator;
use crate::memory_jobs::dream::{Dream, DreamControl};
use crate::security::AccessPolicy;
use crate::store::cache::ChatCache;
use crate::store::chats::ChatStore;
use crate::store::memory_files::MemoryFiles;
use crate::util::fsx;
use crate::util::url::is_loopback;
use crate::ws::{hub::Hub, WsShared};

/// How long [`Server::stop`] waits for threads in all; a thread still running then is logged
/// by name (`event=server.thread_unfinished`) and ends with the process.
const STOP_DEADLINE: Duration = Duration::from_secs(5);
/// How long stopping WebSocket clients get to write their queued frames before their sockets
/// are shut (a reading client needs well under a millisecond; only one that stopped reading
/// waits this out).
const WS_DRAIN: Duration = Duration::from_millis(100);

/// A running server; [`Server::stop`] shuts it down.
pub struct Server {
    pub(crate) http_port: u16,
    pub(crate) ws_port: u16,
    pub agent: Arc<Agent>,
    pub hub: Arc<Hub>,
    shutdown: Arc<AtomicBool>,
    ws: Arc<WsShared>,
    ws_addr: std::net::SocketAddr,
    /// Shared with the `http` thread, so stop can [`tiny_http::Server::unblock`] it.
    http: Arc<tiny_http::Server>,
    /// In start order; joined in reverse, after the workers.
    threads: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    /// Dropping it stops the dream and housekeep timer threads.
    timers_stop: Option<crossbeam_channel::Sender<()>>,
    api: Arc<Api>,
    pub(crate) mcp: Arc<McpManager>,
}

#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Creates a directory of the server's own data (0700).
fn dir(path: &std::path::Path, what: &str) -> Result<(), Error> {
    fsx::create_private_dirs(path)
        .map_err(|e| Error(format!("cannot create the {what} directory {}: {e}", path.display())))
}

/// Creates the data layout, binds, and starts every thread.
pub fn start(mut config: Config) -> Result<Server, Error> {
    // Only the access policy needs the token; it keeps a digest, and this copy is wiped below.
    // The legacy key is needed once, to migrate it into llm.json, and wiped after.
    let token = config.token.take();
    let legacy_key = config.deepseek_api_key.take();
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
    // The workspace is the user's: ordinary modes.
    std::fs::create_dir_all(&config.workspace_dir)
        .map_err(|e| Error(format!("cannot create the workspace directory {}: {e}", config.workspace_dir.display())))?;
    // An older install made these 0755 with 0644 files inside: closing the roots puts every
    // file below out of other users' reach.
    for root in [&config.data_dir, &config.memory_dir, &config.config_dir] {
        fsx::tighten_dir(root);
    }
    crate::net::raise_nofile_limit();

    let workspace = config.workspace_dir.canonicalize().unwrap_or_else(|_| config.workspace_dir.clone());
    let protected = vec![config.data_dir.join("skills")];
    let chats = Arc::new(ChatStore::new(&config.memory_dir));
    let repaired = chats.recover_pending();
    if repaired > 0 {
        log::warn!("event=history.recovered_interrupted_turns chats={repaired}");
    }
    let memory = Arc::new(MemoryFiles::new(&config.memory_dir));
    let llm = Arc::new(
        LlmRuntime::load(
            config.llm_settings_path(),
            config.llm_timeout,
            legacy_key.as_ref().map(|k| k.expose().as_str()),
            config.deepseek_api_base.as_deref(),
        )
        .with_secrets(config.secrets.clone())
        .with_ledger(Arc::new(crate::ledger::Ledger::open(&config.data_dir))),
    );
    drop(legacy_key);
    let hub =
        Arc::new(Hub::with_marks(config.replay_ttl, Arc::new(crate::store::seq::SeqFiles::new(Arc::clone(&chats)))));
    let (consolidator, consolidate_thread) =
        Consolidator::start(Arc::clone(&chats), config.consolidate_chars.min(config.context_budget_chars / 2));
    let (timers_stop, timers_rx) = crossbeam_channel::bounded::<()>(0);
    let mut threads = vec![consolidate_thread];
    // Search: the index loads (or rebuilds) on its own thread; queries wait for it briefly.
    let search = crate::search::Search::new(Arc::clone(&chats), crate::search::Params::default());
    threads.push(search.start(timers_rx.clone()).map_err(|e| Error(format!("cannot start search-index: {e}")))?);
    // The dream thread runs with the timer off too: `POST /api/dream/run` asks it for a run.
    let dream_control = Arc::new(DreamControl::new(&config.memory_dir, config.dream_interval));
    {
        let dream = Dream { chats: Arc::clone(&chats), memory: Arc::clone(&memory), llm: Arc::clone(&llm) };
        let (stop, control) = (timers_rx.clone(), Arc::clone(&dream_control));
        threads.push(
            thread::Builder::new()
                .name("dream".into())
                .spawn(move || crate::memory_jobs::dream::run_loop(&dream, &control, &stop))
                .map_err(|e| Error(format!("cannot start dream: {e}")))?,
        );
    }

    // MCP: both catalogs load now (an invalid entry stops start-up); nothing connects yet.
    let mcp_catalog =
        Catalog::load(config.project_dir.as_deref(), &config.data_dir).map_err(|e| Error(e.to_string()))?;
    // The manager's tool calls all come from turns, whose users the elicitations reach: its
    // connections declare the capability.
    let mut mcp_config = ManagerConfig::from_config(&config);
    mcp_config.client.elicitation = true;
    let mcp = Arc::new(McpManager::new(mcp_config, mcp_catalog).with_secrets(config.secrets.clone()));
    let elicitations = Arc::new(crate::agent::elicit::Elicitations::new(hub.clone(), config.mcp.elicitation_timeout));
    // The exec sandbox: its start-up probe says whether `exec` is confined here; where it is
    // not, every `exec` asks the owner first (`agent::approvals::policy::decide`).
    let sandbox = Arc::new(crate::sandbox::Sandbox::start(
        &config.sandbox,
        &crate::sandbox::ServerDirs {
            data: &config.data_dir,
            memory: &config.memory_dir,
            config: &config.config_dir,
            log: &config.log_dir,
            workspace: &workspace,
        },
    ));
    log_sandbox(&sandbox, &config);
    let sandbox_active = sandbox.active();
    let approvals = Arc::new(
        crate::agent::approvals::Approvals::new(
            hub.clone(),
            config.approval_timeout,
            sandbox_active,
            Arc::new(crate::agent::approvals::policy::PolicyStore::load(&config.config_dir)),
        )
        .with_control_log(Arc::clone(sandbox.control_log())),
    );

    // Skills: built-ins installed, catalog scanned; the dependency probe sees the real registry.
    let tool_settings = tools::ToolSettings {
        search: tools::search_history::SearchHandle(Some(Arc::clone(&search))),
        ..tools::ToolSettings::from_config(&config, Arc::clone(&sandbox))
    };
    let builtin_tools = tools::builtins_with(&tool_settings, &config.secrets);
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
        let (tools, vars, probe_mcp) = (registry.clone(), config.vars.map().clone(), Arc::clone(&mcp));
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
    let skills_ext: Arc<dyn crate::tool::TurnExtension> =
        Arc::new(crate::skills::ext::SkillsExtension::new(skill_tools, Arc::clone(&evolution), config.llm_timeout));

    // Rewind checkpoints: the server's own directories are never watched nor restored, even
    // when they sit inside the workspace.
    let (checkpoints, project_checkpoints) = if config.checkpoint_max_bytes == 0 {
        (None, None)
    } else {
        let skip: Vec<std::path::PathBuf> = [&config.data_dir, &config.memory_dir, &config.config_dir, &config.log_dir]
            .into_iter()
            .chain(protected.iter())
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
            .collect();
        let projects = crate::checkpoints::projects::ProjectCheckpoints::new(
            config.data_dir.join("checkpoints").join("projects"),
            skip.clone(),
            config.checkpoint_max_bytes,
        );
        let cfg = crate::checkpoints::CheckpointConfig {
            root: config.data_dir.join("checkpoints"),
            workspace: workspace.clone(),
            skip,
            max_bytes: config.checkpoint_max_bytes,
            pause_after: config.rewind_test_pause,
        };
        let store = crate::checkpoints::Checkpoints::open(cfg)
            .map_err(|e| Error(format!("cannot open the rewind checkpoints: {e}")))?;
        (Some(store), Some(projects))
    };

    let agent = Agent::new(Deps {
        cache: ChatCache::bounded(Arc::clone(&chats), config.context_budget_chars),
        chats,
        memory,
        llm: Arc::clone(&llm),
        sink: hub.clone(),
        tools: builtin_tools,
        schemas: Default::default(),
        extensions: vec![skills_ext, Arc::new(McpExtension::new(Arc::clone(&mcp)).with_elicitor(elicitations.clone()))],
        workspace,
        protected,
        consolidator: Some(consolidator),
        secrets: config.secrets.clone(),
        elicitations,
        approvals,
        checkpoints,
        projects: Arc::new(crate::projects::Projects::load(&config)),
        project_checkpoints,
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
    mcp.set_purge_hook(move |names| {
        if let Some(agent) = weak_agent.upgrade() {
            purge_activations(&agent.deps.chats, &agent.deps.cache, names);
        }
    });

    let http_listener = crate::net::listen(&config.http_host, config.http_port)
        .map_err(|e| Error(format!("cannot listen on {}:{}: {e}", config.http_host, config.http_port)))?;
    let ws_listener = crate::net::listen(&config.ws_host, config.ws_port)
        .map_err(|e| Error(format!("cannot listen on {}:{}: {e}", config.ws_host, config.ws_port)))?;
    let http_addr = http_listener.local_addr().map_err(|e| Error(e.to_string()))?;
    let ws_addr = ws_listener.local_addr().map_err(|e| Error(e.to_string()))?;
    mcp.set_oauth_redirect(crate::mcp::manager::oauth_redirect_uri(&config.http_host, http_addr.port()));
    let loopback_only = is_loopback(&config.http_host) && is_loopback(&config.ws_host);
    let policy = AccessPolicy::new(
        config.allowed_origins.clone(),
        &config.http_host,
        http_addr.port(),
        loopback_only,
        token.as_ref().map(|t| t.expose().as_str()),
    );
    drop(token);

    let shutdown = Arc::new(AtomicBool::new(false));
    let workers = agent.spawn_workers(config.workers);

    let ws = Arc::new(WsShared::new(
        Arc::clone(&hub),
        Arc::clone(&agent),
        policy.clone(),
        config.max_clients,
        config.ws_ping,
    ));
    let ws2 = Arc::clone(&ws);
    threads.push(
        thread::Builder::new()
            .name("ws-accept".into())
            .spawn(move || crate::ws::accept_loop(ws_listener, ws2))
            .map_err(|e| Error(format!("cannot start ws-accept: {e}")))?,
    );

    let http_limits = crate::http::conn_limits::for_process(crate::http::conn_limits::Limits {
        max_connections: config.max_http_connections,
        max_per_peer: config.max_http_connections_per_peer,
    });
    let http_server = Arc::new(
        tiny_http::Server::from_listener_with_config(http_listener, None, crate::http::connection_config(&http_limits))
            .map_err(|e| Error(format!("cannot start the HTTP server: {e}")))?,
    );
    let api = Arc::new(Api {
        config: Arc::clone(&config),
        policy,
        agent: Arc::clone(&agent),
        llm,
        mcp: Arc::clone(&mcp),
        ws_port: ws_addr.port(),
        skills,
        evolution,
        dream: dream_control,
        sandbox,
        search,
        assets: Default::default(),
        chats: Arc::clone(&agent.deps.chats),
        memory: Arc::clone(&agent.deps.memory),
        projects: Arc::clone(&agent.deps.projects),
        approvals: Arc::clone(&agent.deps.approvals),
        events: Arc::clone(&agent.deps.sink),
    });
    let sd = Arc::clone(&shutdown);
    let (api2, http2) = (Arc::clone(&api), Arc::clone(&http_server));
    threads.push(
        thread::Builder::new()
            .name("http".into())
            .spawn(move || crate::http::serve(http2, api2, &sd))
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
        http: http_server,
        threads,
        workers,
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

    /// Stops accepting, cancels turns, closes connections, joins every thread (by
    /// [`STOP_DEADLINE`]). Idle this takes a few milliseconds; mid-turn, about as long as the
    /// turn takes to store its partial answer. Logs `event=server.stopped duration_ms=…`.
    pub fn stop(mut self) {
        let started = Instant::now();
        let deadline = started + STOP_DEADLINE;
        // Stop accepting: wake the HTTP loop and the blocking WebSocket accept.
        self.shutdown.store(true, Ordering::SeqCst);
        self.http.unblock();
        self.ws.shutdown.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect_timeout(&self.ws_addr, Duration::from_millis(200));
        // Cancel running turns (each keeps what it streamed), refuse new ones, stop consolidation.
        self.agent.shutdown();
        // Background model calls (consolidation, Dream, discovery) fail now instead of at
        // their timeout; parked stream readers exit.
        self.api.llm.shutdown();
        self.api.evolution.shutdown();
        // Dropping the one sender wakes the dream and housekeep threads.
        self.timers_stop.take();
        // The workers store their cancelled turns and send the closing events before the
        // sockets close.
        let mut unfinished: Vec<String> =
            self.workers.drain(..).filter_map(|t| crate::util::join::join_until(t, deadline).err()).collect();
        self.hub.persist_seqs();
        self.hub.close_all();
        let drained = Instant::now() + WS_DRAIN;
        while self.ws.live_clients.load(Ordering::SeqCst) > 0 && Instant::now() < drained {
            thread::sleep(Duration::from_millis(1));
        }
        self.hub.shut_all();
        // Kill and reap stdio children, end HTTP sessions.
        self.mcp.shutdown();
        for t in self.threads.drain(..).rev() {
            unfinished.extend(crate::util::join::join_until(t, deadline).err());
        }
        unfinished.extend(self.api.evolution.join_until(deadline));
        unfinished.extend(self.ws.join_clients(deadline));
        for name in &unfinished {
            log::warn!("event=server.thread_unfinished thread={name}");
        }
        log::info!(
            "event=server.stopped duration_ms={:.1} unfinished_threads={}",
            started.elapsed().as_secs_f64() * 1000.0,
            unfinished.len()
        );
    }
}

/// Blocks until SIGINT/SIGTERM; returns the signal's name.
fn wait_for_signal(signals: &mut Signals) -> &'static str {
    match signals.forever().next() {
        Some(SIGINT) => "SIGINT",
        Some(SIGTERM) => "SIGTERM",
        _ => "a signal",
    }
}

/// Runs until SIGINT/SIGTERM.
pub fn run(config: Config) -> Result<(), Error> {
    // Every id is drawn from the OS entropy source, with no made-up fallback: fail here, not
    // on the first request.
    crate::util::rand::check().map_err(Error)?;
    crate::logging::init(
        &config.log_dir,
        config.file_log_level,
        config.console_log_level,
        config.log_retention_days,
        config.secrets.clone(),
    )
    .map_err(|e| Error(format!("cannot write logs to {}: {e}", config.log_dir.display())))?;
    for w in &config.warnings {
        log::warn!("event=config.warning message={w:?}");
        // Shown on stderr even when the console log level hides warnings.
        if config.console_log_level < log::LevelFilter::Warn {
            eprintln!("cashcode: warning: {w}");
        }
    }
    // signal-hook's handler writes to its own pipe, which `wait_for_signal` reads. (A mask
    // blocking them for `sigwait` would be inherited by every child process: std does not
    // reset it on spawn.) SIGPIPE needs nothing here: std ignores it before `main`, so a peer
    // that closes first is a write error, not a kill.
    let mut signals =
        Signals::new([SIGINT, SIGTERM]).map_err(|e| Error(format!("cannot handle SIGINT/SIGTERM: {e}")))?;
    let (http_host, ws_host) = (config.http_host.clone(), config.ws_host.clone());
    let server = start(config)?;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "http listening on http://{}:{}", display_host(&http_host), server.http_port);
    let _ = writeln!(out, "ws listening on ws://{}:{}/", display_host(&ws_host), server.ws_port);
    let _ = out.flush();
    // Start-up's code leaves the resident set; what a turn runs comes back as it runs.
    crate::util::code_pages::release();
    let signal = wait_for_signal(&mut signals);
    log::info!("event=server.stopping signal={signal}");
    server.stop();
    Ok(())
}

/// The start-up line saying which confinement layers are active; an unconfined `exec` is a
/// warning, also on stderr whatever the console log level.
fn log_sandbox(sandbox: &crate::sandbox::Sandbox, config: &Config) {
    let s = sandbox.status();
    let abi = s.landlock.abi.map_or("none".to_string(), |a| a.to_string());
    if s.active {
        log::info!(
            "event=sandbox.active landlock={} landlock_abi={abi} seccomp={} no_new_privs={} non_dumpable={} network={} read_roots={} write_roots={} note={:?}",
            s.landlock.active,
            s.seccomp.active,
            s.no_new_privs,
            s.non_dumpable,
            s.network,
            s.read_roots.len(),
            s.write_roots.len(),
            s.reason.as_deref().unwrap_or("")
        );
    } else {
        let reason = s.reason.as_deref().unwrap_or("unknown");
        log::warn!(
            "event=sandbox.inactive landlock={} landlock_abi={abi} seccomp={} non_dumpable={} reason={reason:?} message=\"exec commands run UNCONFINED, with every right of this server\"",
            s.landlock.active,
            s.seccomp.active,
            s.non_dumpable
        );
        if config.console_log_level < log::LevelFilter::Warn {
            eprintln!("cashcode: warning: exec commands run UNCONFINED, with every right of this server: {reason}");
        }
    }
}

fn display_host(h: &str) -> String {
    if h.contains(':') && !h.starts_with('[') {
        format!("[{h}]")
    } else {
        h.to_string()
    }
}
