//! Start-up configuration: command-line flags, then environment variables, then the `.env`
//! files the owner put in place (the installation's and the config directory's, or the one
//! `--env-file` names; never one in the working directory), then defaults, resolved once into
//! a validated [`Config`] on the main thread. Nothing reads the environment after start-up
//! (the LLM legacy migration reads its two variables from here too).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound::{Excluded, Included};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::secrets::{is_secret_name, url_passwords, Secrets, REDACTED};
use crate::util::secret::Secret;
use crate::util::url::is_loopback;

pub(crate) const DEFAULT_HTTP_PORT: u16 = 8000;
pub(crate) const DEFAULT_WS_PORT: u16 = 8765;
pub(crate) const DEFAULT_HOST: &str = "127.0.0.1";
/// Seconds between Dream runs.
pub(crate) const DEFAULT_DREAM_INTERVAL_SECS: u64 = 300;
/// Characters of in-memory context that trigger consolidation.
pub(crate) const DEFAULT_CONSOLIDATE_CHARS: usize = 40_000;
/// Most characters one model request may hold (`CASHCODE_CONTEXT_BUDGET_CHARS`): system prompt,
/// tool schemas, context and the turn so far. Sized for common 128k-token models: about 50k
/// tokens of English and, at the usual 0.6 tokens per CJK character, about 120k of Chinese.
pub(crate) const DEFAULT_CONTEXT_BUDGET_CHARS: usize = 200_000;
/// The smallest budget accepted: the system prompt and tool schemas alone take several thousand.
pub(crate) const MIN_CONTEXT_BUDGET_CHARS: usize = 4_000;
/// The largest budget accepted.
pub(crate) const MAX_CONTEXT_BUDGET_CHARS: usize = 1 << 30;
pub(crate) const DEFAULT_WORKERS: usize = 32;
/// Largest accepted `CASHCODE_WORKERS`.
pub(crate) const MAX_WORKERS: usize = 1024;
/// Days a rotated log file is kept (`CASHCODE_LOG_RETENTION_DAYS`, at most 3650).
pub(crate) const DEFAULT_LOG_RETENTION_DAYS: u32 = 10;
/// The Vite dev server's origins, allowed only in dev mode (`--dev`, `CASHCODE_DEV=1`).
pub(crate) const DEV_ORIGINS: &[&str] = &["http://127.0.0.1:5173", "http://localhost:5173"];
/// LLM HTTP timeout for connect and for each read (the SDK's 60 s).
pub(crate) const DEFAULT_LLM_TIMEOUT: Duration = Duration::from_secs(60);
/// Time for a whole HTTP request body to arrive (`CASHCODE_HTTP_BODY_TIMEOUT`).
pub(crate) const DEFAULT_HTTP_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the replay ring of a chat without subscribers and events is kept for `attach`
/// replay (`CASHCODE_REPLAY_TTL`).
pub(crate) const DEFAULT_REPLAY_TTL: Duration = Duration::from_secs(600);
/// Concurrent WebSocket connections (`CASHCODE_MAX_CLIENTS`); past it a new one is closed
/// with 1013 right after its handshake. Each costs a small-stack thread (two while a slow
/// socket needs its writer) and about 35 KiB.
pub(crate) const DEFAULT_MAX_CLIENTS: usize = 2048;
/// Largest accepted `CASHCODE_MAX_CLIENTS`.
pub(crate) const MAX_MAX_CLIENTS: usize = 65_536;
/// HTTP connections open at once (`CASHCODE_MAX_HTTP_CONNECTIONS`); one more is answered 503
/// and closed before a thread is spent on it. Each holds a thread and a descriptor.
pub(crate) const DEFAULT_MAX_HTTP_CONNECTIONS: usize = 512;
/// HTTP connections open at once from one peer IP (`CASHCODE_MAX_HTTP_CONNECTIONS_PER_PEER`).
/// A browser opens at most 6 to a host; a reverse proxy is one peer for all its users.
pub(crate) const DEFAULT_MAX_HTTP_CONNECTIONS_PER_PEER: usize = 128;
/// A WebSocket peer silent this long is pinged; silent for two of these, it is dropped
/// (`CASHCODE_WS_PING_SECS`).
pub(crate) const DEFAULT_WS_PING: Duration = Duration::from_secs(20);
/// How long an approval request waits for the owner before it counts as declined
/// (`CASHCODE_APPROVAL_TIMEOUT`).
pub(crate) const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);
/// The `exec` tool's command timeout, the contract's 30 s (`CASHCODE_EXEC_TIMEOUT_SECS`).
pub(crate) const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes the rewind checkpoint store may hold before its oldest turns are evicted
/// (`CASHCODE_CHECKPOINT_MAX_BYTES`; 0 turns checkpoints off).
pub(crate) const DEFAULT_CHECKPOINT_MAX_BYTES: u64 = 1 << 30;

pub const HELP: &str = "\
cashcode - a locally hosted personal AI agent server

USAGE: cashcode [FLAGS]
       cashcode eval locomo FILE   recall benchmark of the search over a LoCoMo-format file

Flags override environment variables, which override .env files, which override defaults.
The .env files read are <checkout>/.env (the installation: --project-dir, or the checkout
holding the binary) and <config dir>/.env, or only the file --env-file names; a .env in the
working directory is ignored (with a warning) unless it is one of those.

  --port N               HTTP port (env CASHCODE_PORT, default 8000; 0 = any free port)
  --host ADDR            HTTP bind address (env CASHCODE_HOST, default 127.0.0.1)
  --ws-host ADDR         WebSocket bind address (env WS_HOST, default 127.0.0.1)
  --ws-port N            WebSocket port (env WS_PORT, default 8765; 0 = any free port)
  --allowed-origins L    comma list of extra browser origins (env CASHCODE_ALLOWED_ORIGINS)
  --dev                  also allow the Vite dev server's origins, http://127.0.0.1:5173 and
                         http://localhost:5173 (env CASHCODE_DEV=1)
  --token T              required for non-loopback binds (env CASHCODE_TOKEN); 16+ characters
  --token-file PATH      read the token from a file instead, trimmed (env CASHCODE_TOKEN_FILE)
  --home DIR             base for the default data/memory/log/workspace dirs (env CASHCODE_HOME)
  --data-dir DIR         data root (env CASHCODE_DATA_DIR, default <home>/data)
  --memory-dir DIR       chats, MEMORY.md, SOUL.md (env MEMORY_DIR, default <home>/memory)
  --config-dir DIR       LLM settings root (env CASHCODE_CONFIG_DIR, default OS config dir)
  --workspace-dir DIR    file/exec tool workspace (env WORKSPACE_DIR, default <home>/workspace)
  --log-dir DIR          cashcode.log location (env CASHCODE_LOG_DIR, default <home>/logs)
  --project-dir DIR      checkout holding mcp_servers/ and client/dist (env CASHCODE_PROJECT_DIR)
  --dream-interval S     seconds between Dream runs (env DREAM_INTERVAL, default 300; 0 = off)
  --workers N            turn worker threads (env CASHCODE_WORKERS, default 32)
  --env-file PATH        the one .env file to read, instead of <checkout>/.env and
                         <config dir>/.env (it must exist)
  -h, --help             print this help
  -V, --version          print the version

Environment only (the README lists every setting):

  CASHCODE_WEB_SEARCH_URL=URL  web_search endpoint, http or https (default
                         https://api.duckduckgo.com/, the DuckDuckGo Instant Answer API)
  CASHCODE_WEB_FETCH_ALLOW_PRIVATE=1   let web_fetch reach loopback, private and link-local
                         addresses (default 0: public internet addresses only)
  CASHCODE_MCP_CONNECT_TIMEOUT=S   MCP connect + handshake + tool listing (default 30)
  CASHCODE_MCP_CALL_TIMEOUT=S      MCP tool call without progress (default 30)
  CASHCODE_MCP_REQUEST_TIMEOUT=S   other MCP requests (default 30)
  CASHCODE_MCP_MAX_CALL_TIME=S     hard maximum of one MCP tool call (default 600)
  CASHCODE_MCP_ELICITATION_TIMEOUT=S  how long the user has to answer a server's form
                         during a tool call before it is declined (default 120)
                         (MCP values are seconds, 0 < S <= 86400)
  CASHCODE_CONTEXT_BUDGET_CHARS=N  most characters in one model request (default 200000,
                         min 4000); a smaller context length reported by the provider wins
  CASHCODE_MAX_CLIENTS=N concurrent WebSocket clients, 1..65536 (default 2048); one more is
                         closed with code 1013 (try again later) after its handshake
  CASHCODE_MAX_HTTP_CONNECTIONS=N  HTTP connections open at once, 1..65536 (default 512);
                         one more is answered 503 and closed at once
  CASHCODE_MAX_HTTP_CONNECTIONS_PER_PEER=N  the same from one IP address (default 128)
                         (both lowered at start-up to fit the open-files limit, logged)
  CASHCODE_WS_PING_SECS=S  ping a WebSocket client silent for S seconds and drop one silent
                         for two pings, 1..3600 (default 20)
  CASHCODE_EXEC_TIMEOUT_SECS=S  the exec tool's command timeout, 1..86400 (default 30)
  CASHCODE_APPROVAL_TIMEOUT=S  how long a tool call waits for the owner's approval before
                         it is declined, 1..86400 (default 120)
  CASHCODE_CHECKPOINT_MAX_BYTES=N  bytes of workspace copies kept for rewind (default
                         1073741824); the oldest turns' copies go first; 0 turns rewind off
  CASHCODE_SANDBOX=on|off  confine exec commands (Landlock, seccomp; default on). off runs
                         them with every right the server has, and says so at start-up
  CASHCODE_SANDBOX_NETWORK=1  let confined commands open network sockets (default 0;
                         needs CASHCODE_TOKEN)
  CASHCODE_SANDBOX_UNIX_SOCKETS=1  let confined commands open Unix sockets (default 0)
  CASHCODE_SANDBOX_DISK_RESERVE_MB=N  free space confined commands leave on the data
                         directory's filesystem: a call is stopped below it (default 512)
  CASHCODE_SANDBOX_READ=P:P   extra read+execute roots for confined commands (':'-separated)
  CASHCODE_SANDBOX_WRITE=P:P  extra read+write roots for confined commands (':'-separated)
  CASHCODE_PROJECT_ROOTS=P:P  directories a chat may be bound to as its project, and what is
                         under them (':'-separated; default: the workspace alone)

  Skill self-evolution (off by default; integers below their minimum are raised to it):
  SKILL_EVOLUTION_ENABLED=1            propose Skills from repeated successful turns (1/true/yes)
  SKILL_EVOLUTION_MIN_TOOL_CALLS=N     tool calls a turn needs to count (default 2, min 1)
  SKILL_EVOLUTION_RECURRENCE=N         matching turns before a proposal (default 2, min 2)
  SKILL_EVOLUTION_MAX_CONTEXT_CHARS=N  proposal prompt size (default 12000, min 1000)
  SKILL_EVOLUTION_MAX_CONCURRENT=N     proposals generated at once (default 1, min 1)
  SKILL_EVOLUTION_MAX_EVIDENCE=N       evidence files kept (default 500, min 10)
";

/// Tokens shorter than this draw a start-up warning.
pub(crate) const MIN_TOKEN_CHARS: usize = 16;
/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// MCP client timeouts (`CASHCODE_MCP_*`, seconds, 0 < s <= 86400); the manager hands them to
/// every connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct McpConfig {
    /// Connect, handshake and the first `tools/list`.
    pub connect_timeout: Duration,
    /// A tool call with no progress notification for this long fails.
    pub(crate) call_timeout: Duration,
    /// Every other request.
    pub(crate) request_timeout: Duration,
    /// Hard maximum of one tool call, progress or not (the user's time on a form excluded).
    pub(crate) max_call_time: Duration,
    /// How long a server's elicitation form waits for the user before it is declined.
    pub(crate) elicitation_timeout: Duration,
}

/// MCP: spawn/open + initialize must finish within this.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// MCP: a tool call without progress fails after this (the original's 30 s).
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// MCP: `tools/list`, `ping` and other short requests.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// MCP: progress can extend a call up to this, never further.
pub(crate) const DEFAULT_MAX_CALL_TIME: Duration = Duration::from_secs(600);
/// `CASHCODE_MCP_ELICITATION_TIMEOUT` default.
pub(crate) const DEFAULT_ELICITATION_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_call_time: DEFAULT_MAX_CALL_TIME,
            elicitation_timeout: DEFAULT_ELICITATION_TIMEOUT,
        }
    }
}

/// Fully resolved configuration, passed to every constructor. Its `Debug` output never shows
/// a secret: the token and the legacy key are [`Secret`]s, secret-named variables print
/// redacted ([`Vars`]) and the registry prints only its size.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) http_host: String,
    pub(crate) http_port: u16,
    pub(crate) ws_host: String,
    pub(crate) ws_port: u16,
    /// Browser origins allowed besides the server's own HTTP origin.
    pub(crate) allowed_origins: Vec<String>,
    /// From `CASHCODE_TOKEN` or the file named by `CASHCODE_TOKEN_FILE`.
    pub(crate) token: Option<Secret<String>>,
    pub data_dir: PathBuf,
    pub memory_dir: PathBuf,
    pub(crate) config_dir: PathBuf,
    pub(crate) workspace_dir: PathBuf,
    /// `CASHCODE_PROJECT_ROOTS`: directories under which a chat may be bound to a project
    /// (`src/projects.rs`; none: the workspace alone, unless the Safety page lists some).
    pub(crate) project_roots: Vec<PathBuf>,
    pub(crate) log_dir: PathBuf,
    /// Checkout holding `mcp_servers/` and `client/dist`, if one was found.
    pub project_dir: Option<PathBuf>,
    pub(crate) client_dir: Option<PathBuf>,
    /// `None` disables Dream.
    pub(crate) dream_interval: Option<Duration>,
    pub(crate) consolidate_chars: usize,
    /// Most characters one model request may hold (before the provider's own limit).
    pub(crate) context_budget_chars: usize,
    /// How long a chat's recent events stay replayable after its last event with nobody attached.
    pub(crate) replay_ttl: Duration,
    /// Concurrent WebSocket connections served; the next one is closed with 1013.
    pub(crate) max_clients: usize,
    /// HTTP connections open at once, in all and from one peer IP (before the start-up check
    /// against the open-files limit, `http::conn_limits`).
    pub(crate) max_http_connections: usize,
    pub(crate) max_http_connections_per_peer: usize,
    /// Silence after which a WebSocket peer is pinged (twice: dropped).
    pub(crate) ws_ping: Duration,
    /// The `exec` tool's command timeout (`CASHCODE_EXEC_TIMEOUT_SECS`).
    pub(crate) exec_timeout: Duration,
    /// How long an approval request waits for the owner (`CASHCODE_APPROVAL_TIMEOUT`).
    pub(crate) approval_timeout: Duration,
    /// Size bound of the rewind checkpoint store (`CASHCODE_CHECKPOINT_MAX_BYTES`, 0: off).
    pub(crate) checkpoint_max_bytes: u64,
    /// Test-only (`CASHCODE_TEST_REWIND_PAUSE`): an applied rewind stops for good after this
    /// many restored files, its journal written, so a test can kill the process mid-rewind.
    pub(crate) rewind_test_pause: Option<usize>,
    /// The `exec` tool's confinement (`CASHCODE_SANDBOX*`).
    pub(crate) sandbox: SandboxConfig,
    pub(crate) workers: usize,
    pub(crate) llm_timeout: Duration,
    /// A request body still arriving after this is cut with 408.
    pub(crate) http_body_timeout: Duration,
    pub(crate) log_retention_days: u32,
    /// `web_search` endpoint (`CASHCODE_WEB_SEARCH_URL`, an http(s) URL); `None` is the
    /// tool's default.
    pub(crate) web_search_url: Option<String>,
    /// `web_fetch` may connect to loopback, private and link-local addresses.
    pub(crate) web_fetch_allow_private: bool,
    pub mcp: McpConfig,
    pub(crate) file_log_level: log::LevelFilter,
    pub(crate) console_log_level: log::LevelFilter,
    /// `SKILL_EVOLUTION_*`.
    pub(crate) skill_evolution: SkillEvolutionConfig,
    /// Legacy one-time migration inputs (read only when llm.json does not exist).
    pub(crate) deepseek_api_key: Option<Secret<String>>,
    pub(crate) deepseek_api_base: Option<String>,
    /// Every variable seen (env + .env): the skills dependency probe checks `requires.env`
    /// against them. Settings are parsed into the typed fields above, never read from here.
    pub(crate) vars: Vars,
    /// Known secret values, seeded with the token and the secret variables' values; shared
    /// (live) with the LLM runtime, the MCP manager, the turn loop and the logger.
    pub(crate) secrets: Secrets,
    /// Problems worth telling the operator that do not stop start-up (a short token, a token
    /// file others can read); `app::run` logs them once logging is up.
    pub(crate) warnings: Vec<String>,
}

/// The `exec` tool's confinement settings (`src/sandbox/mod.rs` builds the policy from them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SandboxConfig {
    /// `CASHCODE_SANDBOX` (default on); off only when the owner says so.
    pub(crate) enabled: bool,
    /// `CASHCODE_SANDBOX_NETWORK`: network sockets (all but Unix ones) allowed.
    pub(crate) network: bool,
    /// `CASHCODE_SANDBOX_UNIX_SOCKETS`: `socket(AF_UNIX)` allowed (pathname sockets outside the
    /// workspace become reachable: session buses, agents, docker).
    pub(crate) unix_sockets: bool,
    /// `CASHCODE_SANDBOX_READ`: extra read + execute roots (absolute, existing).
    pub(crate) read: Vec<PathBuf>,
    /// `CASHCODE_SANDBOX_WRITE`: extra read + write roots (absolute, existing).
    pub(crate) write: Vec<PathBuf>,
    /// The server's own `PATH` and `HOME` (the process environment, not `.env`): the toolchains
    /// a command may run, and the directory whose rest stays out of its reach.
    pub(crate) env_path: Option<String>,
    pub(crate) env_home: Option<PathBuf>,
    /// `CASHCODE_SANDBOX_DISK_RESERVE_MB`, in bytes: free space a confined command leaves on
    /// the filesystem of the server's data (its sandbox `HOME` and `TMPDIR` live there), so
    /// chats can always be saved.
    pub(crate) disk_reserve: u64,
}

/// Default of `CASHCODE_SANDBOX_DISK_RESERVE_MB`: 512 MiB.
pub(crate) const DEFAULT_SANDBOX_DISK_RESERVE: u64 = 512 * 1024 * 1024;

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            enabled: true,
            network: false,
            unix_sockets: false,
            read: Vec::new(),
            write: Vec::new(),
            env_path: None,
            env_home: None,
            disk_reserve: DEFAULT_SANDBOX_DISK_RESERVE,
        }
    }
}

/// A `:`-separated list of directories (`CASHCODE_SANDBOX_READ`/`_WRITE`,
/// `CASHCODE_PROJECT_ROOTS`): each resolved against `cwd` and required to exist, so a typo does
/// not silently grant nothing.
fn sandbox_roots(vars: &Vars, cwd: &Path, name: &str) -> Result<Vec<PathBuf>, Error> {
    let Some(raw) = vars.get(name) else { return Ok(Vec::new()) };
    let mut roots = Vec::new();
    for part in raw.split(':').map(str::trim).filter(|p| !p.is_empty()) {
        let path = resolve(cwd, part);
        if !path.exists() {
            return Err(Error(format!("{name}: {} does not exist", path.display())));
        }
        roots.push(path);
    }
    Ok(roots)
}

/// Skill self-evolution (docs/skills.md §12): the switch and its thresholds, validated at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkillEvolutionConfig {
    pub(crate) enabled: bool,
    /// Tool calls a successful turn needs before it counts as evidence.
    pub(crate) min_tool_calls: usize,
    /// Evidence files with one fingerprint that trigger a proposal.
    pub(crate) recurrence: usize,
    /// Longest proposal prompt, in chars.
    pub(crate) max_context_chars: usize,
    /// Proposals generated at once.
    pub(crate) max_concurrent: usize,
    /// Evidence files kept (newest by mtime).
    pub(crate) max_evidence: usize,
}

impl Default for SkillEvolutionConfig {
    fn default() -> Self {
        SkillEvolutionConfig {
            enabled: false,
            min_tool_calls: 2,
            recurrence: 2,
            max_context_chars: 12_000,
            max_concurrent: 1,
            max_evidence: 500,
        }
    }
}

impl SkillEvolutionConfig {
    /// Reads `SKILL_EVOLUTION_*` from `get` (trimmed, non-empty values): the switch is on for
    /// 1/true/yes (any case), integers are raised to their minimum, a non-integer is an error.
    pub(crate) fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let d = SkillEvolutionConfig::default();
        let int = |key: &str, default: usize, min: usize| -> Result<usize, Error> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse::<i64>()
                    .map(|n| n.max(min as i64) as usize)
                    .map_err(|_| Error(format!("{key} must be an integer"))),
            }
        };
        Ok(SkillEvolutionConfig {
            enabled: get("SKILL_EVOLUTION_ENABLED")
                .is_some_and(|v| matches!(v.trim().to_lowercase().as_str(), "1" | "true" | "yes")),
            min_tool_calls: int("SKILL_EVOLUTION_MIN_TOOL_CALLS", d.min_tool_calls, 1)?,
            recurrence: int("SKILL_EVOLUTION_RECURRENCE", d.recurrence, 2)?,
            max_context_chars: int("SKILL_EVOLUTION_MAX_CONTEXT_CHARS", d.max_context_chars, 1000)?,
            max_concurrent: int("SKILL_EVOLUTION_MAX_CONCURRENT", d.max_concurrent, 1)?,
            max_evidence: int("SKILL_EVOLUTION_MAX_EVIDENCE", d.max_evidence, 10)?,
        })
    }
}

/// What the command line asked for.
pub enum Command {
    Run(Box<Config>),
    Help,
    Version,
}

#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

const FLAGS: &[(&str, &str)] = &[
    ("--port", "CASHCODE_PORT"),
    ("--host", "CASHCODE_HOST"),
    ("--ws-host", "WS_HOST"),
    ("--ws-port", "WS_PORT"),
    ("--allowed-origins", "CASHCODE_ALLOWED_ORIGINS"),
    ("--token", "CASHCODE_TOKEN"),
    ("--token-file", "CASHCODE_TOKEN_FILE"),
    ("--home", "CASHCODE_HOME"),
    ("--data-dir", "CASHCODE_DATA_DIR"),
    ("--memory-dir", "MEMORY_DIR"),
    ("--config-dir", "CASHCODE_CONFIG_DIR"),
    ("--workspace-dir", "WORKSPACE_DIR"),
    ("--log-dir", "CASHCODE_LOG_DIR"),
    ("--project-dir", "CASHCODE_PROJECT_DIR"),
    ("--dream-interval", "DREAM_INTERVAL"),
    ("--workers", "CASHCODE_WORKERS"),
];

/// Switches: a flag without a value that sets its variable to `1`.
const SWITCHES: &[(&str, &str)] = &[("--dev", "CASHCODE_DEV")];

/// Parses flags and the process environment. `secrets` are the secret variables taken out of
/// the environment at start-up ([`crate::secrets::take_from_environment`]); they count as
/// environment variables here.
pub fn from_args_env(args: impl IntoIterator<Item = String>, secrets: Vec<(String, String)>) -> Result<Command, Error> {
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    env.extend(secrets);
    let cwd = std::env::current_dir().map_err(|e| Error(format!("cannot read the current directory: {e}")))?;
    let exe = std::env::current_exe().ok();
    parse(args, env, &cwd, exe.as_deref())
}

/// Every variable seen (flags, environment, `.env`), as given. `Debug` shows a secret-named
/// variable's value as redacted. The typed readers below are the one way `parse` reads a
/// setting: the value trimmed, an empty one unset, a bad one an [`Error`] naming the variable.
#[derive(Clone, Default)]
pub(crate) struct Vars(BTreeMap<String, String>);

impl fmt::Debug for Vars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| {
                (k, if is_secret_name(k) || url_passwords(v).next().is_some() { REDACTED } else { v.as_str() })
            }))
            .finish()
    }
}

/// Whether `name=value` is registered as a secret value ([`known_secrets`]): a secret name that
/// does not name a place (`*_FILE`, `*_PATH`, `*_DIR`: the token file's content is registered
/// as the token), or a value with URL credentials.
fn is_secret_value(name: &str, value: &str) -> bool {
    let names_place = ["_FILE", "_PATH", "_DIR"].iter().any(|s| name.to_ascii_uppercase().ends_with(s));
    is_secret_name(name) && !names_place || url_passwords(value).next().is_some()
}

/// `0 < s <= 86400`, the MCP timeouts' range.
const MCP_SECS: (Bound<f64>, Bound<f64>) = (Excluded(0.0), Included(86_400.0));

impl Vars {
    /// Every variable, as given (the skills dependency probe), secret values replaced by
    /// [`REDACTED`] once the config is parsed.
    pub(crate) fn map(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// Wipes every secret value ([`is_secret_value`]) and leaves [`REDACTED`] in its place, so
    /// the variable still reads as set.
    fn forget_secrets(&mut self) {
        for (k, v) in self.0.iter_mut() {
            if is_secret_value(k, v) {
                zeroize::Zeroize::zeroize(v);
                v.push_str(REDACTED);
            }
        }
    }

    /// `name`'s value, trimmed; `None` when unset or blank.
    fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
    }

    /// `name` as a `T` within `range`, `None` when unset; else `{name} must be {expected}, got '…'`.
    fn num<T: FromStr + PartialOrd>(
        &self,
        name: &str,
        range: impl RangeBounds<T>,
        expected: &str,
    ) -> Result<Option<T>, Error> {
        self.get(name)
            .map(|v| v.parse::<T>().ok().filter(|n| range.contains(n)).ok_or_else(|| must_be(name, expected, &v)))
            .transpose()
    }

    /// A whole number in `1..=max`; the error names the range, then `unit`.
    fn count<T: FromStr + PartialOrd + From<u8> + fmt::Display>(
        &self,
        name: &str,
        max: T,
        unit: &str,
    ) -> Result<Option<T>, Error> {
        let expected = format!("1..{max}{unit}");
        self.num(name, T::from(1)..=max, &expected)
    }

    /// Seconds, fractions allowed, within `range` (which keeps out NaN, infinity and negatives).
    fn secs(&self, name: &str, range: impl RangeBounds<f64>, expected: &str) -> Result<Option<Duration>, Error> {
        Ok(self.num(name, range, expected)?.map(Duration::from_secs_f64))
    }

    /// A switch: 1/true/yes/on or 0/false/no/off, any case.
    fn flag(&self, name: &str) -> Result<Option<bool>, Error> {
        self.get(name)
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(must_be(name, "1 or 0", &v)),
            })
            .transpose()
    }

    /// A log level (`warning` is `warn`), `default` when unset.
    fn level(&self, name: &str, default: log::LevelFilter) -> Result<log::LevelFilter, Error> {
        match self.get(name) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("warning") => Ok(log::LevelFilter::Warn),
            Some(v) => v.parse().map_err(|_| must_be(name, "a log level", &v)),
        }
    }

    /// A directory, relative ones against `cwd`.
    fn dir(&self, cwd: &Path, name: &str) -> Option<PathBuf> {
        self.get(name).map(|p| resolve(cwd, &p))
    }
}

fn must_be(name: &str, expected: &str, got: &str) -> Error {
    Error(format!("{name} must be {expected}, got '{got}'"))
}

/// What the command line asked for before any variable is read.
enum Cli {
    Help,
    Version,
    /// The flags' values by variable name, and the `.env` file named by `--env-file`.
    Run(BTreeMap<&'static str, String>, Option<PathBuf>),
}

fn read_args(args: impl IntoIterator<Item = String>, cwd: &Path) -> Result<Cli, Error> {
    let mut flags: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut env_file: Option<PathBuf> = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Cli::Help),
            "-V" | "--version" => return Ok(Cli::Version),
            "--env-file" => {
                let v = inline.or_else(|| it.next()).ok_or_else(|| Error("--env-file needs a value".into()))?;
                env_file = Some(resolve(cwd, &v));
            }
            _ if inline.is_none() && SWITCHES.iter().any(|(f, _)| *f == name) => {
                let (_, var) = SWITCHES.iter().find(|(f, _)| *f == name).expect("just found");
                flags.insert(var, "1".into());
            }
            _ => {
                let (flag, var) = FLAGS
                    .iter()
                    .find(|(f, _)| *f == name)
                    .ok_or_else(|| Error(format!("unknown argument '{arg}' (see --help)")))?;
                let v = inline.or_else(|| it.next()).ok_or_else(|| Error(format!("{flag} needs a value")))?;
                flags.insert(var, v);
            }
        }
    }
    Ok(Cli::Run(flags, env_file))
}

/// The `.env` files, then the environment, then the flags, each overriding the one before.
///
/// Which `.env` files is decided from the environment and the flags alone (a `.env` cannot
/// move where `.env` files are read from): the one `--env-file` names, which must exist; else
/// the installation's (`<checkout>/.env`: `CASHCODE_PROJECT_DIR`, or the checkout holding the
/// executable) and then the config directory's (`<config dir>/.env`), each optional. A `.env`
/// in the working directory that is none of these is not read: whoever put a file where the
/// server happens to be started (a cloned repository, a workspace the model wrote to) must not
/// widen its origins, bind address or network guard. It gets one warning naming it.
fn gather(
    flags: BTreeMap<&'static str, String>,
    env_file: Option<PathBuf>,
    env: BTreeMap<String, String>,
    cwd: &Path,
    exe: Option<&Path>,
    warnings: &mut Vec<String>,
) -> Result<Vars, Error> {
    let mut outer = env;
    for (k, v) in flags {
        outer.insert(k.to_string(), v);
    }
    let early = Vars(outer.clone());
    let files = match env_file {
        Some(f) => vec![(f, true)],
        None => {
            let install = early.dir(cwd, "CASHCODE_PROJECT_DIR").or_else(|| find_project(exe));
            let config_root = early.dir(cwd, "CASHCODE_CONFIG_DIR").unwrap_or_else(|| default_config_root(early.map()));
            install.map(|d| (d.join(".env"), false)).into_iter().chain([(config_root.join(".env"), false)]).collect()
        }
    };
    // The copies made here of secret values are wiped as they go (see `Vars::forget_secrets`).
    early.0.into_values().for_each(|mut v| zeroize::Zeroize::zeroize(&mut v));
    let mut vars = BTreeMap::new();
    for (file, required) in &files {
        match std::fs::read_to_string(file) {
            Ok(mut text) => {
                put_all(&mut vars, parse_dotenv(&text));
                zeroize::Zeroize::zeroize(&mut text);
            }
            Err(e) if *required => return Err(Error(format!("cannot read {}: {e}", file.display()))),
            Err(_) => {}
        }
    }
    let here = cwd.join(".env");
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if here.is_file() && !files.iter().any(|(f, _)| same(f, &here)) {
        warnings.push(format!(
            "ignored {}: .env files are read from the installation and the config directory, or from --env-file",
            here.display()
        ));
    }
    put_all(&mut vars, outer);
    Ok(Vars(vars))
}

/// `vars` with `more` added over it; a value replaced is wiped (it may be a secret).
fn put_all(vars: &mut BTreeMap<String, String>, more: impl IntoIterator<Item = (String, String)>) {
    for (k, v) in more {
        if let Some(mut old) = vars.insert(k, v) {
            zeroize::Zeroize::zeroize(&mut old);
        }
    }
}

/// Pure core of [`from_args_env`], testable without touching the process environment.
pub(crate) fn parse(
    args: impl IntoIterator<Item = String>,
    env: BTreeMap<String, String>,
    cwd: &Path,
    exe: Option<&Path>,
) -> Result<Command, Error> {
    let mut warnings = Vec::new();
    let (vars, sandbox_env) = match read_args(args, cwd)? {
        Cli::Help => return Ok(Command::Help),
        Cli::Version => return Ok(Command::Version),
        Cli::Run(flags, env_file) => {
            let own = (env.get("PATH").cloned(), env.get("HOME").map(PathBuf::from));
            (gather(flags, env_file, env, cwd, exe, &mut warnings)?, own)
        }
    };

    let project_dir = vars.dir(cwd, "CASHCODE_PROJECT_DIR").or_else(|| find_project(exe));
    let home = match vars.dir(cwd, "CASHCODE_HOME") {
        Some(h) => h,
        None => match &project_dir {
            Some(p) => p.clone(),
            None => default_home(vars.map()),
        },
    };
    let dir = |var: &str, default: PathBuf| vars.dir(cwd, var).unwrap_or(default);

    let dream = vars.num("DREAM_INTERVAL", .., "whole seconds")?.unwrap_or(DEFAULT_DREAM_INTERVAL_SECS);
    let workers = vars.count("CASHCODE_WORKERS", MAX_WORKERS, "")?.unwrap_or(DEFAULT_WORKERS);
    let consolidate_chars =
        vars.num("CASHCODE_CONSOLIDATE_CHARS", .., "a number")?.unwrap_or(DEFAULT_CONSOLIDATE_CHARS);
    let context_budget_chars = vars
        .num(
            "CASHCODE_CONTEXT_BUDGET_CHARS",
            MIN_CONTEXT_BUDGET_CHARS..=MAX_CONTEXT_BUDGET_CHARS,
            &format!("{MIN_CONTEXT_BUDGET_CHARS}..{MAX_CONTEXT_BUDGET_CHARS}"),
        )?
        .unwrap_or(DEFAULT_CONTEXT_BUDGET_CHARS);
    let replay_ttl =
        vars.count("CASHCODE_REPLAY_TTL", 86_400, " seconds")?.map_or(DEFAULT_REPLAY_TTL, Duration::from_secs);
    let max_clients = vars.count("CASHCODE_MAX_CLIENTS", MAX_MAX_CLIENTS, "")?.unwrap_or(DEFAULT_MAX_CLIENTS);
    let max_http_connections =
        vars.count("CASHCODE_MAX_HTTP_CONNECTIONS", 65_536, "")?.unwrap_or(DEFAULT_MAX_HTTP_CONNECTIONS);
    let max_http_connections_per_peer = vars
        .count("CASHCODE_MAX_HTTP_CONNECTIONS_PER_PEER", 65_536, "")?
        .unwrap_or(DEFAULT_MAX_HTTP_CONNECTIONS_PER_PEER);
    let ws_ping = vars.count("CASHCODE_WS_PING_SECS", 3600, "")?.map_or(DEFAULT_WS_PING, Duration::from_secs);
    let exec_timeout =
        vars.count("CASHCODE_EXEC_TIMEOUT_SECS", 86_400, " seconds")?.map_or(DEFAULT_EXEC_TIMEOUT, Duration::from_secs);
    let approval_timeout = vars
        .count("CASHCODE_APPROVAL_TIMEOUT", 86_400, " seconds")?
        .map_or(DEFAULT_APPROVAL_TIMEOUT, Duration::from_secs);
    let checkpoint_max_bytes = vars
        .num("CASHCODE_CHECKPOINT_MAX_BYTES", 0..=u64::MAX, "a number of bytes")?
        .unwrap_or(DEFAULT_CHECKPOINT_MAX_BYTES);
    let rewind_test_pause = vars.num("CASHCODE_TEST_REWIND_PAUSE", 0..=usize::MAX, "a number")?;
    let llm_timeout = vars
        .secs("CASHCODE_LLM_TIMEOUT", (Excluded(0.0), Excluded(86_400.0)), "seconds")?
        .unwrap_or(DEFAULT_LLM_TIMEOUT);
    let http_body_timeout = vars
        .secs("CASHCODE_HTTP_BODY_TIMEOUT", (Excluded(0.0), Included(3600.0)), "seconds (0 < s <= 3600)")?
        .unwrap_or(DEFAULT_HTTP_BODY_TIMEOUT);
    let log_retention_days = vars.count("CASHCODE_LOG_RETENTION_DAYS", 3650, "")?.unwrap_or(DEFAULT_LOG_RETENTION_DAYS);
    let web_fetch_allow_private = vars.flag("CASHCODE_WEB_FETCH_ALLOW_PRIVATE")?.unwrap_or(false);
    let sandbox = SandboxConfig {
        enabled: vars.flag("CASHCODE_SANDBOX")?.unwrap_or(true),
        network: vars.flag("CASHCODE_SANDBOX_NETWORK")?.unwrap_or(false),
        unix_sockets: vars.flag("CASHCODE_SANDBOX_UNIX_SOCKETS")?.unwrap_or(false),
        read: sandbox_roots(&vars, cwd, "CASHCODE_SANDBOX_READ")?,
        write: sandbox_roots(&vars, cwd, "CASHCODE_SANDBOX_WRITE")?,
        env_path: sandbox_env.0,
        env_home: sandbox_env.1,
        disk_reserve: vars
            .num("CASHCODE_SANDBOX_DISK_RESERVE_MB", 0..=u64::MAX >> 20, "a number of MiB")?
            .map_or(DEFAULT_SANDBOX_DISK_RESERVE, |mb| mb << 20),
    };
    let web_search_url = match vars.get("CASHCODE_WEB_SEARCH_URL") {
        None => None,
        Some(v) => match crate::util::url::Origin::check(&v) {
            Ok(_) => Some(v),
            // User info may be a password: the message does not repeat the value.
            Err(crate::util::url::UrlError::Credentials) => {
                return Err(Error("CASHCODE_WEB_SEARCH_URL must not carry user info (user:password@)".into()))
            }
            Err(crate::util::url::UrlError::NotHttp) => {
                return Err(must_be("CASHCODE_WEB_SEARCH_URL", "an http or https URL", &v))
            }
        },
    };
    let mcp = {
        let secs = |var: &str, default: Duration| -> Result<Duration, Error> {
            Ok(vars.secs(var, MCP_SECS, "seconds (0 < s <= 86400)")?.unwrap_or(default))
        };
        let d = McpConfig::default();
        McpConfig {
            connect_timeout: secs("CASHCODE_MCP_CONNECT_TIMEOUT", d.connect_timeout)?,
            call_timeout: secs("CASHCODE_MCP_CALL_TIMEOUT", d.call_timeout)?,
            request_timeout: secs("CASHCODE_MCP_REQUEST_TIMEOUT", d.request_timeout)?,
            max_call_time: secs("CASHCODE_MCP_MAX_CALL_TIME", d.max_call_time)?,
            elicitation_timeout: secs("CASHCODE_MCP_ELICITATION_TIMEOUT", d.elicitation_timeout)?,
        }
    };

    let token = read_token(&vars, cwd, &mut warnings)?;
    let secrets = known_secrets(&vars, token.as_deref());
    let skill_evolution = SkillEvolutionConfig::from_vars(|k| vars.get(k))?;
    let client_dir =
        vars.dir(cwd, "CASHCODE_CLIENT_DIR").or_else(|| project_dir.as_ref().map(|p| p.join("client").join("dist")));

    let mut config = Config {
        http_host: vars.get("CASHCODE_HOST").unwrap_or_else(|| DEFAULT_HOST.into()),
        http_port: vars.num("CASHCODE_PORT", .., "a port number")?.unwrap_or(DEFAULT_HTTP_PORT),
        ws_host: vars.get("WS_HOST").unwrap_or_else(|| DEFAULT_HOST.into()),
        ws_port: vars.num("WS_PORT", .., "a port number")?.unwrap_or(DEFAULT_WS_PORT),
        allowed_origins: parse_origins(
            vars.get("CASHCODE_ALLOWED_ORIGINS").as_deref(),
            vars.flag("CASHCODE_DEV")?.unwrap_or(false),
        ),
        token: token.map(Secret::new),
        data_dir: dir("CASHCODE_DATA_DIR", home.join("data")),
        memory_dir: dir("MEMORY_DIR", home.join("memory")),
        config_dir: dir("CASHCODE_CONFIG_DIR", default_config_root(vars.map())),
        workspace_dir: dir("WORKSPACE_DIR", home.join("workspace")),
        project_roots: sandbox_roots(&vars, cwd, "CASHCODE_PROJECT_ROOTS")?,
        log_dir: dir("CASHCODE_LOG_DIR", home.join("logs")),
        project_dir,
        client_dir,
        dream_interval: (dream > 0).then(|| Duration::from_secs(dream)),
        consolidate_chars,
        context_budget_chars,
        replay_ttl,
        max_clients,
        max_http_connections,
        max_http_connections_per_peer,
        ws_ping,
        exec_timeout,
        approval_timeout,
        checkpoint_max_bytes,
        rewind_test_pause,
        sandbox,
        workers,
        llm_timeout,
        http_body_timeout,
        log_retention_days,
        web_search_url,
        web_fetch_allow_private,
        mcp,
        file_log_level: vars.level("CASHCODE_FILE_LOG_LEVEL", log::LevelFilter::Debug)?,
        console_log_level: vars.level("CASHCODE_CONSOLE_LOG_LEVEL", log::LevelFilter::Info)?,
        skill_evolution,
        deepseek_api_key: vars.get("DEEPSEEK_API_KEY").map(Secret::new),
        deepseek_api_base: vars.get("DEEPSEEK_API_BASE"),
        secrets,
        warnings,
        vars,
    };
    // Registered for redaction above and read into the fields that use them: no clear copy
    // stays in the variable map (it is cloned into the skills probe, which needs only to know
    // that they are set).
    config.vars.forget_secrets();
    if config.token.is_none() && !(is_loopback(&config.http_host) && is_loopback(&config.ws_host)) {
        return Err(Error(
            "binding to a non-loopback address requires CASHCODE_TOKEN (or --token, or a --token-file) to be set"
                .into(),
        ));
    }
    // Confined commands with network sockets reach the server's own ports over loopback, where
    // no token is asked for by default: one could rewrite the approval policy or the LLM
    // settings through the API. With a token they need it, and it is withheld from them.
    if config.token.is_none() && config.sandbox.enabled && config.sandbox.network {
        return Err(Error(
            "CASHCODE_SANDBOX_NETWORK=1 requires CASHCODE_TOKEN (or --token, or a --token-file) to be set: confined \
             commands with network access could otherwise call the server's own API over loopback"
                .into(),
        ));
    }
    Ok(Command::Run(Box::new(config)))
}

/// The access token from `CASHCODE_TOKEN` or the file `CASHCODE_TOKEN_FILE` names (not both);
/// a short one adds a warning.
fn read_token(vars: &Vars, cwd: &Path, warnings: &mut Vec<String>) -> Result<Option<String>, Error> {
    let token = match (vars.get("CASHCODE_TOKEN"), vars.get("CASHCODE_TOKEN_FILE")) {
        (Some(_), Some(_)) => {
            return Err(Error("set CASHCODE_TOKEN (--token) or CASHCODE_TOKEN_FILE (--token-file), not both".into()))
        }
        (Some(t), None) => Some(t),
        (None, Some(p)) => Some(read_token_file(&resolve(cwd, &p), warnings)?),
        (None, None) => None,
    };
    if token.as_ref().is_some_and(|t| t.chars().count() < MIN_TOKEN_CHARS) {
        warnings.push(format!(
            "the access token is shorter than {MIN_TOKEN_CHARS} characters and easy to guess; use a long random one (e.g. `openssl rand -hex 32`)"
        ));
    }
    Ok(token)
}

/// Known secret values: the token and every secret-named variable, except those naming a
/// place (`*_FILE`, `*_PATH`, `*_DIR`: the token file's content is registered as the token).
fn known_secrets(vars: &Vars, token: Option<&str>) -> Secrets {
    let secrets = Secrets::new();
    let mut values: Vec<String> = token.map(str::to_string).into_iter().collect();
    for (k, v) in vars.map() {
        if is_secret_value(k, v) {
            values.push(v.clone());
            values.extend(url_passwords(v).map(str::to_string));
        }
    }
    secrets.set("config", values);
    secrets
}

impl Config {
    /// A config for tests and embedding: everything under `home`, ephemeral ports, no Dream.
    pub fn for_home(home: &Path) -> Config {
        let mut env = BTreeMap::new();
        env.insert("CASHCODE_HOME".into(), home.display().to_string());
        env.insert("CASHCODE_CONFIG_DIR".into(), home.join("config").display().to_string());
        env.insert("CASHCODE_PORT".into(), "0".into());
        env.insert("WS_PORT".into(), "0".into());
        env.insert("DREAM_INTERVAL".into(), "0".into());
        match parse(Vec::new(), env, home, None) {
            Ok(Command::Run(c)) => *c,
            _ => unreachable!("the fixed test environment always parses"),
        }
    }

    /// LLM settings file path: `<config root>/settings/llm.json`.
    pub fn llm_settings_path(&self) -> PathBuf {
        self.config_dir.join("settings").join("llm.json")
    }
}

/// The token in `path`: one line, surrounding whitespace trimmed, not empty. A file that group
/// or others may read adds a warning.
fn read_token_file(path: &Path, warnings: &mut Vec<String>) -> Result<String, Error> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| Error(format!("cannot read the token file {shown}: {e}")))?;
    if !meta.is_file() || meta.len() > MAX_TOKEN_FILE_BYTES {
        return Err(Error(format!(
            "the token file {shown} must be a regular file of at most {MAX_TOKEN_FILE_BYTES} bytes"
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| Error(format!("cannot read the token file {shown}: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| Error(format!("the token file {shown} is not UTF-8 text")))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Error(format!("the token file {shown} is empty")));
    }
    if token.chars().any(|c| c.is_control()) {
        return Err(Error(format!("the token file {shown} must hold the token on one line")));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o044 != 0 {
            warnings.push(format!(
                "the token file {shown} is readable by group or others (mode {mode:03o}); run `chmod 600 {shown}`"
            ));
        }
    }
    Ok(token.to_string())
}

/// `CASHCODE_ALLOWED_ORIGINS`: comma list, trimmed, trailing `/` removed; in dev mode the Vite
/// dev server's origins are added.
pub(crate) fn parse_origins(raw: Option<&str>, dev: bool) -> Vec<String> {
    let mut list: Vec<String> = raw
        .unwrap_or("")
        .split(',')
        .map(|s| s.trim().trim_end_matches('/').to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if dev {
        list.extend(DEV_ORIGINS.iter().map(|s| s.to_string()).filter(|o| !list.contains(o)).collect::<Vec<_>>());
    }
    list
}

/// `KEY=value` lines; `#` comments, optional `export`, single or double quotes.
pub(crate) fn parse_dotenv(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (k, v) = line.split_once('=')?;
            let v = v.trim();
            let v = if v.len() >= 2
                && ((v.starts_with('"') && v.ends_with('"')) || (v.starts_with('\'') && v.ends_with('\'')))
            {
                &v[1..v.len() - 1]
            } else {
                v.split(" #").next().unwrap_or(v).trim()
            };
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

fn resolve(cwd: &Path, p: &str) -> PathBuf {
    let expanded = match p.strip_prefix("~") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest.trim_start_matches('/')))
        }
        _ => None,
    };
    let path = expanded.unwrap_or_else(|| PathBuf::from(p));
    if path.is_absolute() {
        path
    } else {
        cwd.join(path)
    }
}

/// The checkout holding the executable (`<checkout>/target/release/cashcode`), recognised by
/// `mcp_servers/mcp_config.json` next to a `Cargo.toml`. Never the working directory: a
/// repository the server happens to be started in would otherwise supply the client files,
/// the MCP catalog and the `.env`.
fn find_project(exe: Option<&Path>) -> Option<PathBuf> {
    let is_project =
        |d: &Path| d.join("Cargo.toml").is_file() && d.join("mcp_servers").join("mcp_config.json").is_file();
    exe.and_then(|e| e.ancestors().skip(1).find(|d| is_project(d))).map(Path::to_path_buf)
}

fn home_dir(vars: &BTreeMap<String, String>) -> PathBuf {
    vars.get("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."))
}

fn default_home(vars: &BTreeMap<String, String>) -> PathBuf {
    if cfg!(target_os = "macos") {
        home_dir(vars).join("Library/Application Support/CashCode")
    } else if cfg!(windows) {
        vars.get("LOCALAPPDATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| home_dir(vars).join("AppData/Local"))
            .join("CashCode")
    } else {
        vars.get("XDG_DATA_HOME")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home_dir(vars).join(".local/share"))
            .join("cashcode")
    }
}

/// The original's OS-specific config root (docs/storage.md §4).
fn default_config_root(vars: &BTreeMap<String, String>) -> PathBuf {
    if cfg!(windows) {
        vars.get("LOCALAPPDATA")
            .or_else(|| vars.get("APPDATA"))
            .map(PathBuf::from)
            .unwrap_or_else(|| home_dir(vars).join("AppData/Local"))
            .join("CashCode")
    } else if cfg!(target_os = "macos") {
        home_dir(vars).join("Library/Application Support/CashCode")
    } else {
        vars.get("XDG_CONFIG_HOME")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home_dir(vars).join(".config"))
            .join("cashcode")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A configuration with every directory under `base` (for other modules' unit tests).
    pub(crate) fn config_in(base: &Path) -> Config {
        let home = base.display().to_string();
        match parse(["--home".to_string(), home], BTreeMap::new(), base, None) {
            Ok(Command::Run(mut c)) => {
                c.config_dir = base.join("config");
                *c
            }
            _ => panic!("a configuration under {}", base.display()),
        }
    }

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Config, Error> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        match parse(args.iter().map(|s| s.to_string()), env, Path::new("/nonexistent-cwd"), None)? {
            Command::Run(c) => Ok(*c),
            _ => Err(Error("not run".into())),
        }
    }

    fn token(c: &Config) -> Option<&str> {
        c.token.as_ref().map(|t| t.expose().as_str())
    }

    #[test]
    fn flags_override_env() {
        let c = run(&["--port", "9001", "--ws-port=0"], &[("CASHCODE_PORT", "9000"), ("HOME", "/h")]).unwrap();
        assert_eq!(c.http_port, 9001);
        assert_eq!(c.ws_port, 0);
        assert_eq!(c.memory_dir, PathBuf::from("/h/.local/share/cashcode/memory"));
        assert_eq!(c.config_dir, PathBuf::from("/h/.config/cashcode"));
    }

    #[test]
    fn relative_dirs_resolve_against_cwd() {
        let c = run(&[], &[("MEMORY_DIR", "mem"), ("CASHCODE_DATA_DIR", "/abs/data")]).unwrap();
        assert_eq!(c.memory_dir, PathBuf::from("/nonexistent-cwd/mem"));
        assert_eq!(c.data_dir, PathBuf::from("/abs/data"));
    }

    #[test]
    fn rejects_bad_values() {
        assert!(run(&["--port", "x"], &[]).is_err());
        assert!(run(&["--bogus"], &[]).is_err());
        assert!(run(&[], &[("WS_HOST", "0.0.0.0")]).is_err());
        assert!(run(&[], &[("WS_HOST", "0.0.0.0"), ("CASHCODE_TOKEN", "t")]).is_ok());
        for bad in ["0", "-1", "x", "86401"] {
            assert!(run(&[], &[("CASHCODE_REPLAY_TTL", bad)]).is_err(), "CASHCODE_REPLAY_TTL={bad}");
        }
        assert_eq!(run(&[], &[("CASHCODE_REPLAY_TTL", "5")]).unwrap().replay_ttl, Duration::from_secs(5));
        assert_eq!(run(&[], &[]).unwrap().replay_ttl, DEFAULT_REPLAY_TTL);
        for bad in ["abc", "-1", "3999", "2000000000"] {
            assert!(
                run(&[], &[("CASHCODE_CONTEXT_BUDGET_CHARS", bad)]).is_err(),
                "CASHCODE_CONTEXT_BUDGET_CHARS={bad}"
            );
        }
        assert_eq!(run(&[], &[("CASHCODE_CONTEXT_BUDGET_CHARS", "5000")]).unwrap().context_budget_chars, 5000);
        assert_eq!(run(&[], &[]).unwrap().context_budget_chars, DEFAULT_CONTEXT_BUDGET_CHARS);
        for bad in ["0", "-1", "x", "65537"] {
            assert!(run(&[], &[("CASHCODE_MAX_CLIENTS", bad)]).is_err(), "CASHCODE_MAX_CLIENTS={bad}");
        }
        assert_eq!(run(&[], &[("CASHCODE_MAX_CLIENTS", "2")]).unwrap().max_clients, 2);
        assert_eq!(run(&[], &[]).unwrap().max_clients, DEFAULT_MAX_CLIENTS);
        for bad in ["0", "-1", "x", "3601", "1.5"] {
            assert!(run(&[], &[("CASHCODE_WS_PING_SECS", bad)]).is_err(), "CASHCODE_WS_PING_SECS={bad}");
        }
        assert_eq!(run(&[], &[("CASHCODE_WS_PING_SECS", "2")]).unwrap().ws_ping, Duration::from_secs(2));
        assert_eq!(run(&[], &[]).unwrap().ws_ping, DEFAULT_WS_PING);
        for bad in ["0", "-1", "x", "86401", "1.5"] {
            assert!(run(&[], &[("CASHCODE_EXEC_TIMEOUT_SECS", bad)]).is_err(), "CASHCODE_EXEC_TIMEOUT_SECS={bad}");
        }
        assert_eq!(run(&[], &[("CASHCODE_EXEC_TIMEOUT_SECS", "2")]).unwrap().exec_timeout, Duration::from_secs(2));
        assert_eq!(run(&[], &[]).unwrap().exec_timeout, Duration::from_secs(30));
        for bad in ["0", "-1", "x", "86401", "1.5"] {
            assert!(run(&[], &[("CASHCODE_APPROVAL_TIMEOUT", bad)]).is_err(), "CASHCODE_APPROVAL_TIMEOUT={bad}");
        }
        assert_eq!(run(&[], &[("CASHCODE_APPROVAL_TIMEOUT", "5")]).unwrap().approval_timeout, Duration::from_secs(5));
        assert_eq!(run(&[], &[]).unwrap().approval_timeout, DEFAULT_APPROVAL_TIMEOUT);
        for bad in ["0", "-1", "x", "3601"] {
            assert!(run(&[], &[("CASHCODE_HTTP_BODY_TIMEOUT", bad)]).is_err(), "CASHCODE_HTTP_BODY_TIMEOUT={bad}");
        }
        let c = run(&[], &[("CASHCODE_HTTP_BODY_TIMEOUT", "0.5")]).unwrap();
        assert_eq!(c.http_body_timeout, Duration::from_millis(500));
        assert_eq!(run(&[], &[]).unwrap().http_body_timeout, DEFAULT_HTTP_BODY_TIMEOUT);
    }

    /// Every numeric setting: its default, both ends of its range, and the exact message for
    /// a value outside it or not a number.
    #[test]
    fn numeric_settings_defaults_bounds_and_messages() {
        let err = |var: &str, v: &str| run(&[], &[(var, v)]).unwrap_err().to_string();
        let ok = |var: &str, v: &str| run(&[], &[(var, v)]).unwrap();
        let d = run(&[], &[]).unwrap();

        assert_eq!((d.http_port, d.ws_port), (DEFAULT_HTTP_PORT, DEFAULT_WS_PORT));
        assert_eq!((ok("CASHCODE_PORT", "0").http_port, ok("WS_PORT", "65535").ws_port), (0, 65535));
        for bad in ["65536", "-1", "x", "80.0"] {
            assert_eq!(err("CASHCODE_PORT", bad), format!("CASHCODE_PORT must be a port number, got '{bad}'"));
            assert_eq!(err("WS_PORT", bad), format!("WS_PORT must be a port number, got '{bad}'"));
        }

        assert_eq!(d.dream_interval, Some(Duration::from_secs(DEFAULT_DREAM_INTERVAL_SECS)));
        assert_eq!(ok("DREAM_INTERVAL", "0").dream_interval, None);
        assert_eq!(ok("DREAM_INTERVAL", " 7 ").dream_interval, Some(Duration::from_secs(7)));
        for bad in ["-1", "1.5", "x"] {
            assert_eq!(err("DREAM_INTERVAL", bad), format!("DREAM_INTERVAL must be whole seconds, got '{bad}'"));
        }

        assert_eq!(d.workers, DEFAULT_WORKERS);
        assert_eq!((ok("CASHCODE_WORKERS", "1").workers, ok("CASHCODE_WORKERS", "1024").workers), (1, 1024));
        for bad in ["0", "1025", "x"] {
            assert_eq!(err("CASHCODE_WORKERS", bad), format!("CASHCODE_WORKERS must be 1..1024, got '{bad}'"));
        }

        assert_eq!(d.consolidate_chars, DEFAULT_CONSOLIDATE_CHARS);
        assert_eq!(ok("CASHCODE_CONSOLIDATE_CHARS", "0").consolidate_chars, 0);
        for bad in ["-1", "x"] {
            assert_eq!(
                err("CASHCODE_CONSOLIDATE_CHARS", bad),
                format!("CASHCODE_CONSOLIDATE_CHARS must be a number, got '{bad}'")
            );
        }

        let budget = |v: &str| ok("CASHCODE_CONTEXT_BUDGET_CHARS", v).context_budget_chars;
        assert_eq!((budget("4000"), budget("1073741824")), (4000, 1 << 30));
        for bad in ["3999", "1073741825"] {
            assert_eq!(
                err("CASHCODE_CONTEXT_BUDGET_CHARS", bad),
                format!("CASHCODE_CONTEXT_BUDGET_CHARS must be 4000..1073741824, got '{bad}'")
            );
        }

        assert_eq!(ok("CASHCODE_REPLAY_TTL", "86400").replay_ttl, Duration::from_secs(86_400));
        assert_eq!(err("CASHCODE_REPLAY_TTL", "0"), "CASHCODE_REPLAY_TTL must be 1..86400 seconds, got '0'");
        assert_eq!(ok("CASHCODE_MAX_CLIENTS", "65536").max_clients, 65_536);
        assert_eq!(err("CASHCODE_MAX_CLIENTS", "65537"), "CASHCODE_MAX_CLIENTS must be 1..65536, got '65537'");
        assert_eq!(d.max_http_connections, DEFAULT_MAX_HTTP_CONNECTIONS);
        assert_eq!(d.max_http_connections_per_peer, DEFAULT_MAX_HTTP_CONNECTIONS_PER_PEER);
        assert_eq!(ok("CASHCODE_MAX_HTTP_CONNECTIONS", "8").max_http_connections, 8);
        assert_eq!(ok("CASHCODE_MAX_HTTP_CONNECTIONS_PER_PEER", "2").max_http_connections_per_peer, 2);
        assert_eq!(
            err("CASHCODE_MAX_HTTP_CONNECTIONS", "0"),
            "CASHCODE_MAX_HTTP_CONNECTIONS must be 1..65536, got '0'"
        );
        assert_eq!(
            err("CASHCODE_MAX_HTTP_CONNECTIONS_PER_PEER", "65537"),
            "CASHCODE_MAX_HTTP_CONNECTIONS_PER_PEER must be 1..65536, got '65537'"
        );
        assert_eq!(ok("CASHCODE_WS_PING_SECS", "3600").ws_ping, Duration::from_secs(3600));
        assert_eq!(err("CASHCODE_WS_PING_SECS", "0"), "CASHCODE_WS_PING_SECS must be 1..3600, got '0'");

        assert_eq!(d.log_retention_days, DEFAULT_LOG_RETENTION_DAYS);
        assert_eq!(ok("CASHCODE_LOG_RETENTION_DAYS", "3650").log_retention_days, 3650);
        assert_eq!(ok("CASHCODE_LOG_RETENTION_DAYS", "1").log_retention_days, 1);
        for bad in ["0", "3651", "99999999999", "x"] {
            assert_eq!(
                err("CASHCODE_LOG_RETENTION_DAYS", bad),
                format!("CASHCODE_LOG_RETENTION_DAYS must be 1..3650, got '{bad}'")
            );
        }

        assert_eq!(d.llm_timeout, DEFAULT_LLM_TIMEOUT);
        assert_eq!(ok("CASHCODE_LLM_TIMEOUT", "0.5").llm_timeout, Duration::from_millis(500));
        assert_eq!(ok("CASHCODE_LLM_TIMEOUT", "86399").llm_timeout, Duration::from_secs(86_399));
        for bad in ["0", "86400", "-1", "x", "NaN", "inf"] {
            assert_eq!(err("CASHCODE_LLM_TIMEOUT", bad), format!("CASHCODE_LLM_TIMEOUT must be seconds, got '{bad}'"));
        }
        assert_eq!(ok("CASHCODE_HTTP_BODY_TIMEOUT", "3600").http_body_timeout, Duration::from_secs(3600));
        assert_eq!(
            err("CASHCODE_HTTP_BODY_TIMEOUT", "3601"),
            "CASHCODE_HTTP_BODY_TIMEOUT must be seconds (0 < s <= 3600), got '3601'"
        );
    }

    #[test]
    fn log_levels() {
        let d = run(&[], &[]).unwrap();
        assert_eq!((d.file_log_level, d.console_log_level), (log::LevelFilter::Debug, log::LevelFilter::Info));
        let c = run(&[], &[("CASHCODE_FILE_LOG_LEVEL", "Warning"), ("CASHCODE_CONSOLE_LOG_LEVEL", "off")]).unwrap();
        assert_eq!((c.file_log_level, c.console_log_level), (log::LevelFilter::Warn, log::LevelFilter::Off));
        assert_eq!(
            run(&[], &[("CASHCODE_CONSOLE_LOG_LEVEL", "loud")]).unwrap_err().to_string(),
            "CASHCODE_CONSOLE_LOG_LEVEL must be a log level, got 'loud'"
        );
    }

    #[test]
    fn web_fetch_private_switch() {
        assert!(!run(&[], &[]).unwrap().web_fetch_allow_private);
        for (v, want) in [("1", true), ("TRUE", true), ("yes", true), ("0", false), ("off", false), ("", false)] {
            assert_eq!(
                run(&[], &[("CASHCODE_WEB_FETCH_ALLOW_PRIVATE", v)]).unwrap().web_fetch_allow_private,
                want,
                "{v}"
            );
        }
        let e = run(&[], &[("CASHCODE_WEB_FETCH_ALLOW_PRIVATE", "maybe")]).unwrap_err();
        assert_eq!(e.to_string(), "CASHCODE_WEB_FETCH_ALLOW_PRIVATE must be 1 or 0, got 'maybe'");
        assert!(HELP.contains("CASHCODE_WEB_FETCH_ALLOW_PRIVATE"));
    }

    #[test]
    fn web_search_url_is_an_http_url() {
        assert_eq!(run(&[], &[]).unwrap().web_search_url, None);
        let c = run(&[], &[("CASHCODE_WEB_SEARCH_URL", " http://127.0.0.1:9/search ")]).unwrap();
        assert_eq!(c.web_search_url.as_deref(), Some("http://127.0.0.1:9/search"));
        assert_eq!(run(&[], &[("CASHCODE_WEB_SEARCH_URL", "")]).unwrap().web_search_url, None);
        let e = run(&[], &[("CASHCODE_WEB_SEARCH_URL", "ftp://x/")]).unwrap_err();
        assert_eq!(e.to_string(), "CASHCODE_WEB_SEARCH_URL must be an http or https URL, got 'ftp://x/'");
        let e = run(&[], &[("CASHCODE_WEB_SEARCH_URL", "https://me:hunter2@x/")]).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(HELP.contains("CASHCODE_WEB_SEARCH_URL"));
    }

    #[test]
    fn mcp_timeouts_are_parsed_once() {
        assert_eq!(run(&[], &[]).unwrap().mcp, McpConfig::default());
        assert_eq!(McpConfig::default().max_call_time, Duration::from_secs(600));
        let c = run(
            &[],
            &[
                ("CASHCODE_MCP_CONNECT_TIMEOUT", "5"),
                ("CASHCODE_MCP_CALL_TIMEOUT", "0.25"),
                ("CASHCODE_MCP_REQUEST_TIMEOUT", " 3 "),
                ("CASHCODE_MCP_MAX_CALL_TIME", "86400"),
                ("CASHCODE_MCP_ELICITATION_TIMEOUT", "7"),
            ],
        )
        .unwrap();
        let want = McpConfig {
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_millis(250),
            request_timeout: Duration::from_secs(3),
            max_call_time: Duration::from_secs(86_400),
            elicitation_timeout: Duration::from_secs(7),
        };
        assert_eq!(c.mcp, want);
        for bad in ["0", "-1", "x", "86401", "inf", "NaN"] {
            let e = run(&[], &[("CASHCODE_MCP_CALL_TIMEOUT", bad)]).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("CASHCODE_MCP_CALL_TIMEOUT must be seconds (0 < s <= 86400), got '{bad}'")
            );
        }
        let readme = include_str!("../docs/settings.md");
        for var in [
            "CASHCODE_MCP_CONNECT_TIMEOUT",
            "CASHCODE_MCP_CALL_TIMEOUT",
            "CASHCODE_MCP_REQUEST_TIMEOUT",
            "CASHCODE_MCP_MAX_CALL_TIME",
            "CASHCODE_MCP_ELICITATION_TIMEOUT",
        ] {
            assert!(HELP.contains(var) && readme.contains(var), "{var}");
        }
    }

    /// Every variable `--help` names has its row in docs/settings.md.
    #[test]
    fn every_variable_in_help_is_documented() {
        let doc = include_str!("../docs/settings.md");
        // The name before each `=`: `CASHCODE_PORT=N`, `SKILL_EVOLUTION_ENABLED=1`.
        let named: Vec<&str> = HELP
            .split('=')
            .filter_map(|before| {
                let start = before.rfind(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))?;
                Some(&before[start + 1..]).filter(|v| v.len() > 3 && v.starts_with(|c: char| c.is_ascii_uppercase()))
            })
            .collect();
        assert!(named.len() > 20, "{named:?}");
        for var in named {
            assert!(doc.contains(var), "{var} is in --help but not in docs/settings.md");
        }
    }

    #[test]
    fn origins_and_dotenv() {
        assert_eq!(parse_origins(Some(" http://a:1/ , http://b "), false), vec!["http://a:1", "http://b"]);
        assert_eq!(parse_origins(None, false), Vec::<String>::new());
        assert_eq!(parse_origins(None, true), DEV_ORIGINS);
        assert_eq!(parse_origins(Some("http://localhost:5173,http://a"), true).len(), 3);
        let kv = parse_dotenv("# c\nexport A=1\nB=\"two words\"\nC=x # note\n");
        assert_eq!(kv, vec![("A".into(), "1".into()), ("B".into(), "two words".into()), ("C".into(), "x".into())]);
    }

    #[test]
    fn token_file_is_read_trimmed_and_checked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cc-token-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        let write = |text: &str, mode: u32| {
            std::fs::write(&file, text).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let path = file.display().to_string();
        write("  0123456789abcdef-long-enough\n", 0o600);
        let c = run(&["--token-file", &path], &[]).unwrap();
        assert_eq!(token(&c), Some("0123456789abcdef-long-enough"));
        assert_eq!(c.warnings, Vec::<String>::new());
        let c = run(&[], &[("CASHCODE_TOKEN_FILE", &path), ("WS_HOST", "0.0.0.0")]).unwrap();
        assert_eq!(token(&c), Some("0123456789abcdef-long-enough"), "the file counts as a token");
        assert_eq!(c.secrets.redact("x 0123456789abcdef-long-enough"), "x [REDACTED]");
        assert_eq!(c.secrets.redact(&path), path, "the file's path is not a secret");

        write("0123456789abcdef-long-enough", 0o644);
        let c = run(&["--token-file", &path], &[]).unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("readable by group or others (mode 644)"), "{:?}", c.warnings);

        write(" \n\t\n", 0o600);
        assert!(run(&["--token-file", &path], &[]).unwrap_err().0.contains("is empty"));
        write("two\nlines", 0o600);
        assert!(run(&["--token-file", &path], &[]).unwrap_err().0.contains("one line"));
        assert!(run(&["--token-file", &dir.join("missing").display().to_string()], &[]).is_err());
        write("0123456789abcdef-long-enough", 0o600);
        let both = run(&["--token-file", &path], &[("CASHCODE_TOKEN", "other-token-value")]).unwrap_err();
        assert!(both.0.contains("not both"), "{both}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn short_tokens_warn() {
        let c = run(&[], &[("CASHCODE_TOKEN", "short-tok")]).unwrap();
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("shorter than 16 characters"), "{:?}", c.warnings);
        assert!(!c.warnings[0].contains("short-tok"), "the warning must not show the token");
        assert_eq!(run(&[], &[("CASHCODE_TOKEN", "0123456789abcdef")]).unwrap().warnings, Vec::<String>::new());
        assert_eq!(run(&[], &[]).unwrap().warnings, Vec::<String>::new());
    }

    #[test]
    fn url_credentials_and_word_named_variables_are_known_secrets() {
        let vars = Vars(BTreeMap::from([
            ("DATABASE_URL".to_string(), "postgres://app:hunter22-pw@db/app".to_string()),
            ("DB_PASS".to_string(), "pass-VALUE-1".to_string()),
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("HTTPS_PROXY".to_string(), "http://me:proxy-pw-77@proxy:3128".to_string()),
        ]));
        let s = known_secrets(&vars, None);
        assert_eq!(s.redact("url=postgres://app:hunter22-pw@db/app"), "url=[REDACTED]");
        assert_eq!(
            s.redact("pw=hunter22-pw db=pass-VALUE-1 p=/usr/bin:/bin"),
            "pw=[REDACTED] db=[REDACTED] p=/usr/bin:/bin"
        );
        assert_eq!(s.redact("p=proxy-pw-77"), "p=[REDACTED]", "a proxy's password is redacted too");
        let dbg = format!("{vars:?}");
        assert!(
            !dbg.contains("proxy-pw")
                && !dbg.contains("hunter22")
                && !dbg.contains("pass-VALUE")
                && dbg.contains("/usr/bin:/bin"),
            "{dbg}"
        );
    }

    #[test]
    fn debug_never_prints_a_secret() {
        let c = run(
            &["--token", "tok-VALUE-0123456789"],
            &[
                ("DEEPSEEK_API_KEY", "sk-deep-VALUE-42"),
                ("GITHUB_TOKEN", "ghp-VALUE-777"),
                ("SKILL_EVOLUTION_ENABLED", "1"),
            ],
        )
        .unwrap();
        let dbg = format!("{c:?}");
        for secret in ["tok-VALUE-0123456789", "sk-deep-VALUE-42", "ghp-VALUE-777"] {
            assert!(!dbg.contains(secret), "{secret} in {dbg}");
        }
        assert!(
            dbg.contains(r#""GITHUB_TOKEN": "[REDACTED]""#) && dbg.contains(r#""SKILL_EVOLUTION_ENABLED": "1""#),
            "{dbg}"
        );
        assert!(dbg.contains("token: Some(\"[REDACTED]\")"), "{dbg}");
        assert!(dbg.contains("deepseek_api_key: Some(\"[REDACTED]\")"), "{dbg}");
        // Every field is printed: derived, so none can be left out.
        for field in ["http_body_timeout", "web_search_url", "web_fetch_allow_private", "skill_evolution: Skill"] {
            assert!(dbg.contains(field), "{field} in {dbg}");
        }
        // The secret variables are known values to redact; ordinary ones are not.
        assert_eq!(c.secrets.redact("a sk-deep-VALUE-42 b ghp-VALUE-777 c 1"), "a [REDACTED] b [REDACTED] c 1");
        // The variable map keeps no clear secret: the redact-only `GITHUB_TOKEN` (and the used
        // ones, held in their own fields) read as set, with the marker for a value.
        let v = c.vars.map();
        assert!(v.values().all(|x| !x.contains("VALUE-")), "{v:?}");
        assert_eq!(v.get("GITHUB_TOKEN").map(String::as_str), Some(REDACTED));
        assert_eq!(v.get("SKILL_EVOLUTION_ENABLED").map(String::as_str), Some("1"));
        assert_eq!(c.deepseek_api_key.as_ref().map(|k| k.expose().as_str()), Some("sk-deep-VALUE-42"));
    }

    #[test]
    fn skill_evolution_defaults_minimums_and_errors() {
        let evo = |pairs: &[(&str, &str)]| run(&[], pairs).map(|c| c.skill_evolution);
        assert_eq!(evo(&[]).unwrap(), SkillEvolutionConfig::default());
        let c = evo(&[
            ("SKILL_EVOLUTION_ENABLED", "Yes"),
            ("SKILL_EVOLUTION_MIN_TOOL_CALLS", "0"),
            ("SKILL_EVOLUTION_RECURRENCE", "1"),
            ("SKILL_EVOLUTION_MAX_CONTEXT_CHARS", "5"),
            ("SKILL_EVOLUTION_MAX_CONCURRENT", " 3 "),
            ("SKILL_EVOLUTION_MAX_EVIDENCE", "-2"),
        ])
        .unwrap();
        assert_eq!(
            c,
            SkillEvolutionConfig {
                enabled: true,
                min_tool_calls: 1,
                recurrence: 2,
                max_context_chars: 1000,
                max_concurrent: 3,
                max_evidence: 10
            }
        );
        for v in ["1", "true", "TRUE", "yes"] {
            assert!(evo(&[("SKILL_EVOLUTION_ENABLED", v)]).unwrap().enabled, "{v}");
        }
        for v in ["0", "on", "no", "", "  "] {
            assert!(!evo(&[("SKILL_EVOLUTION_ENABLED", v)]).unwrap().enabled, "{v}");
        }
        // An empty value is unset, like every other variable.
        assert_eq!(evo(&[("SKILL_EVOLUTION_RECURRENCE", " ")]).unwrap().recurrence, 2);
        assert_eq!(
            evo(&[("SKILL_EVOLUTION_RECURRENCE", "two")]).unwrap_err().to_string(),
            "SKILL_EVOLUTION_RECURRENCE must be an integer"
        );
        assert!(evo(&[("SKILL_EVOLUTION_MAX_EVIDENCE", "1.5")]).is_err());
        for key in ["ENABLED", "MIN_TOOL_CALLS", "RECURRENCE", "MAX_CONTEXT_CHARS", "MAX_CONCURRENT", "MAX_EVIDENCE"] {
            assert!(HELP.contains(&format!("SKILL_EVOLUTION_{key}=")), "{key} is listed in --help");
        }
    }

    /// Dev origins only in dev mode: `--dev` or `CASHCODE_DEV`, any switch spelling.
    #[test]
    fn dev_origins_need_the_dev_switch() {
        assert_eq!(run(&[], &[]).unwrap().allowed_origins, Vec::<String>::new());
        assert_eq!(run(&["--dev"], &[]).unwrap().allowed_origins, DEV_ORIGINS);
        assert_eq!(run(&[], &[("CASHCODE_DEV", "yes")]).unwrap().allowed_origins, DEV_ORIGINS);
        assert_eq!(run(&[], &[("CASHCODE_DEV", "0")]).unwrap().allowed_origins, Vec::<String>::new());
        assert!(run(&["--dev=1"], &[]).is_err());
        assert!(run(&[], &[("CASHCODE_DEV", "maybe")]).is_err());
        assert!(HELP.contains("--dev") && HELP.contains("CASHCODE_DEV"));
    }

    /// The sandbox's network switch needs the token (confined commands could call the API over
    /// loopback otherwise); with the sandbox off it changes nothing and is not checked.
    #[test]
    fn the_sandbox_network_needs_a_token() {
        let err = run(&[], &[("CASHCODE_SANDBOX_NETWORK", "1")]).unwrap_err().0;
        assert!(err.contains("CASHCODE_SANDBOX_NETWORK") && err.contains("CASHCODE_TOKEN"), "{err}");
        let tok = ("CASHCODE_TOKEN", "0123456789abcdef-long-enough");
        assert!(run(&[], &[("CASHCODE_SANDBOX_NETWORK", "1"), tok]).unwrap().sandbox.network);
        assert!(run(&[], &[("CASHCODE_SANDBOX_NETWORK", "1"), ("CASHCODE_SANDBOX", "off")]).is_ok());
        assert!(!run(&[], &[("CASHCODE_SANDBOX_NETWORK", "0")]).unwrap().sandbox.network);
    }

    /// `.env` files come from the installation and the config directory, or `--env-file`
    /// alone; one in the working directory is ignored with a warning naming it, unless it is
    /// one of those.
    #[test]
    fn dotenv_files_come_from_where_the_owner_put_them() {
        let root = std::env::temp_dir().join(format!("cc-dotenv-{}", crate::util::rand::hex(6)));
        let (install, conf, cwd) = (root.join("install"), root.join("conf"), root.join("cwd"));
        for d in [&install, &conf, &cwd] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(install.join(".env"), "A=install\nB=install\nWS_PORT=1\n").unwrap();
        std::fs::write(conf.join(".env"), "B=conf\nC=conf\n").unwrap();
        std::fs::write(cwd.join(".env"), "CASHCODE_ALLOWED_ORIGINS=http://evil.example\nD=cwd\n").unwrap();
        let env = |extra: &[(&str, &str)]| -> BTreeMap<String, String> {
            [("CASHCODE_PROJECT_DIR", install.to_str().unwrap()), ("CASHCODE_CONFIG_DIR", conf.to_str().unwrap())]
                .iter()
                .chain(extra)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let cfg = |args: &[&str], env: BTreeMap<String, String>, cwd: &Path| match parse(
            args.iter().map(|s| s.to_string()),
            env,
            cwd,
            None,
        ) {
            Ok(Command::Run(c)) => *c,
            Ok(_) => panic!("not a run"),
            Err(e) => panic!("{e}"),
        };
        let c = cfg(&[], env(&[("WS_PORT", "0")]), &cwd);
        let v = c.vars.map();
        assert_eq!(
            (v.get("A"), v.get("B"), v.get("C"), v.get("D")),
            (Some(&"install".into()), Some(&"conf".into()), Some(&"conf".into()), None)
        );
        assert_eq!(c.ws_port, 0, "the environment wins over every .env");
        assert!(c.allowed_origins.is_empty(), "the working directory's .env widened the origins");
        let warned: Vec<_> = c.warnings.iter().filter(|w| w.contains(".env")).collect();
        assert_eq!(warned.len(), 1, "{:?}", c.warnings);
        assert!(warned[0].contains(&cwd.join(".env").display().to_string()), "{}", warned[0]);

        // Started from the installation itself: its .env is read and nothing is warned about.
        let c = cfg(&[], env(&[]), &install);
        assert_eq!(c.vars.map().get("A").map(String::as_str), Some("install"));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);

        // --env-file is the only one read (relative to the working directory); it must exist.
        std::fs::write(root.join("chosen.env"), "E=chosen\nCASHCODE_ALLOWED_ORIGINS=http://mine.example\n").unwrap();
        let c = cfg(&["--env-file", "../chosen.env"], env(&[]), &cwd);
        let v = c.vars.map();
        assert_eq!((v.get("A"), v.get("E")), (None, Some(&"chosen".into())));
        assert_eq!(c.allowed_origins, ["http://mine.example"]);
        let c = cfg(&["--env-file", ".env"], env(&[]), &cwd);
        assert_eq!(c.vars.map().get("D").map(String::as_str), Some("cwd"), "named explicitly, it is read");
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let e = parse(["--env-file".to_string(), "missing.env".to_string()], env(&[]), &cwd, None).err().unwrap();
        assert!(e.0.contains("missing.env"), "{e}");

        // The working directory is no installation, even when it looks like a checkout.
        std::fs::write(cwd.join("Cargo.toml"), "").unwrap();
        std::fs::create_dir_all(cwd.join("mcp_servers")).unwrap();
        std::fs::write(cwd.join("mcp_servers/mcp_config.json"), "{}").unwrap();
        let mut plain = env(&[]);
        plain.remove("CASHCODE_PROJECT_DIR");
        let c = cfg(&[], plain, &cwd);
        assert_eq!(c.project_dir, None);
        assert!(c.vars.map().get("D").is_none() && c.allowed_origins.is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
