//! MCP client tests against real servers: the official Python SDK stdio and SSE test servers,
//! `@modelcontextprotocol/server-everything` over stdio, SSE and Streamable HTTP, and a
//! misbehaving raw stdio server (crash, hang, garbage, huge lines, progress, server requests).
//!
//! Required runtimes are checked up front: a missing one fails the test with the command that
//! installs it (nothing is skipped silently). Setup: `bash scripts/setup.sh`, which creates the
//! checkout's `.venv/` with the pinned Python SDK (every Python server here runs on that
//! interpreter, as the built-in catalog entry does) and runs `npm ci --prefix mcp_servers`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cashcode::mcp::catalog::Catalog;
use cashcode::mcp::client::{Client, ClientConfig, Content};
use cashcode::mcp::manager::{ManagerConfig, McpManager};
use cashcode::mcp::transport::{HttpSpec, StdioSpec, TransportSpec};
use cashcode::mcp::validate::ServerEntry;
use cashcode::mcp::{Error, McpError};
use cashcode::util::cancel::CancelToken;
use serde_json::{json, Map, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var("PATH").ok()?.split(':').map(|d| Path::new(d).join(cmd)).find(|p| p.is_file())
}

/// The set-up's virtual environment interpreter (`.venv/bin/python`); fails clearly without it.
fn python() -> String {
    let venv = cashcode::mcp::catalog::venv_python(&root());
    assert!(venv.is_file(), "MCP tests need {}: run `bash scripts/setup.sh`", venv.display());
    venv.display().to_string()
}

fn require_python_sdk() {
    let ok = Command::new(python())
        .args(["-c", "import mcp.server.fastmcp"])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "the official Python MCP SDK is missing from .venv: run `bash scripts/setup.sh`");
}

/// Live threads of this process whose name is `name` (Linux keeps 15 bytes of it).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

fn everything_js() -> PathBuf {
    assert!(which("node").is_some(), "MCP tests need Node.js (node) on PATH");
    let p = root().join("mcp_servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(p.is_file(), "server-everything is not installed: run `bash scripts/setup.sh --test`");
    p
}

fn tmp_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let d = std::env::temp_dir().join(format!("cc-mcp-real-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fast_cfg() -> ClientConfig {
    ClientConfig {
        connect_timeout: Duration::from_secs(20),
        call_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
        max_call_time: Duration::from_secs(60),
        stdio_grace: Duration::from_millis(500),
        ..ClientConfig::default()
    }
}

/// A background server process killed (with its group) on drop.
struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `server-everything` on `port` over `transport` (`sse` or `streamableHttp`).
fn everything(js: &Path, transport: &str, port: u16) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(js).arg(transport).env("PORT", port.to_string()).stdout(Stdio::null()).stderr(Stdio::null());
    cmd
}

fn spawn_group(mut cmd: Command) -> ServerProcess {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    ServerProcess(cmd.spawn().expect("start test server"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts the server `make` builds for a port on a free port and waits until it listens. The
/// port is free when chosen but may be taken before the server binds it (another test's client
/// socket, say); a server that exits instead of listening is started again on another port.
fn spawn_listening(make: impl Fn(u16) -> Command) -> (ServerProcess, u16) {
    for _ in 0..5 {
        let port = free_port();
        let mut server = spawn_group(make(port));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (server, port);
            }
            if server.0.try_wait().ok().flatten().is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "test server did not listen on {port} within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("test server exited five times without listening");
}

fn wait_port(port: u16, within: Duration) {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "test server did not listen on {port} within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn fixture(mode: &str, log: Option<&Path>) -> TransportSpec {
    let mut env = BTreeMap::new();
    if let Some(l) = log {
        env.insert("MCP_FIXTURE_LOG".to_string(), l.display().to_string());
    }
    TransportSpec::Stdio(StdioSpec {
        command: python(),
        args: vec![root().join("tests/fixtures/mcp/misbehaving.py").display().to_string(), mode.to_string()],
        env,
        cwd: None,
        python: None,
    })
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

/// A manager answer as the JSON the HTTP surface sends.
/// A user server entry (the body of `POST /api/mcp/servers` without its name).
fn entry(v: Value) -> ServerEntry {
    serde_json::from_value(v).unwrap()
}

fn wire(v: impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap()
}

fn text_of(r: &cashcode::mcp::client::CallResult) -> String {
    r.render()
}

// ------------------------------------------------------------------------------------------
// Official Python SDK servers

#[test]
fn python_sdk_stdio_builtin_through_the_manager() {
    require_python_sdk();
    let data = tmp_dir("stdio-builtin");
    let catalog = Catalog::load(Some(&root()), &data).unwrap();
    let mgr = McpManager::new(ManagerConfig { client: fast_cfg(), data_dir: data.clone() }, catalog);
    let purged: Arc<Mutex<Vec<String>>> = Arc::default();
    let p = purged.clone();
    mgr.set_purge_hook(move |names| p.lock().unwrap().extend(names.iter().cloned()));

    let list = wire(mgr.list());
    let names: Vec<&str> = list["servers"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["test_sse_mcp", "test_stdio_mcp"]);
    assert_eq!(list["servers"][1]["status"], "disconnected");
    assert_eq!(wire(mgr.tools_listing("test_stdio_mcp").unwrap())["source"], "none");

    let dto = wire(mgr.connect("test_stdio_mcp").unwrap());
    assert_eq!(dto["status"], "connected", "{dto}");
    assert_eq!(
        (dto["connected"].clone(), dto["tool_count"].clone(), dto["type"].clone()),
        (json!(true), json!(1), json!("stdio"))
    );
    let listing = wire(mgr.tools_listing("test_stdio_mcp").unwrap());
    assert_eq!(listing["source"], "live");
    assert_eq!(listing["tools"][0]["name"], "mcp_test_stdio_mcp_say_hello");
    assert_eq!(listing["tools"][0]["callable"], true);

    let r = mgr.call("mcp_test_stdio_mcp_say_hello", &Map::new(), None).unwrap();
    assert_eq!(text_of(&r), "Hello, Cash");
    assert!(!r.is_error);

    let idx = mgr.search_index();
    let hits = idx.search("say hello", 5);
    assert_eq!(hits[0].0.tool, "say_hello");
    assert!(matches!(hits[0].0.kind, cashcode::mcp::search::DocKind::Live { .. }));

    let dto = wire(mgr.disconnect("test_stdio_mcp").unwrap());
    assert_eq!((dto["status"].clone(), dto["tool_count"].clone()), (json!("disconnected"), json!(0)));
    assert_eq!(*purged.lock().unwrap(), vec!["mcp_test_stdio_mcp_say_hello".to_string()]);
    let cached = wire(mgr.tools_listing("test_stdio_mcp").unwrap());
    assert_eq!(cached["source"], "cache");
    assert_eq!(cached["tools"][0]["callable"], false);
    assert_eq!(cached["tools"][0]["original_name"], "say_hello");
    let idx = mgr.search_index();
    let hits = idx.search("hello", 5);
    assert_eq!(hits[0].0.kind, cashcode::mcp::search::DocKind::Cached);
    // The SSE entry has neither cache nor live tools: a stub.
    let hits = idx.search("SSE test", 5);
    assert!(hits.iter().any(|(d, _)| d.server == "test_sse_mcp" && d.kind == cashcode::mcp::search::DocKind::Stub));
    mgr.shutdown();
    std::fs::remove_dir_all(data).unwrap();
}

#[test]
fn python_sdk_sse_server() {
    require_python_sdk();
    let mut cmd = Command::new(python());
    cmd.arg(root().join("mcp_servers/test_sse_mcp/server.py"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut server = spawn_group(cmd);
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("listening on ").expect("announce line").to_string();
    let port: u16 = url.rsplit(':').next().unwrap().trim_end_matches("/sse").parse().unwrap();
    wait_port(port, Duration::from_secs(20));

    let spec = TransportSpec::Sse(HttpSpec { url, headers: BTreeMap::new() });
    let client = Client::connect("pysse", &spec, fast_cfg()).unwrap();
    let tools = client.list_tools().unwrap();
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["say_hello"]);
    let r = client.call_tool("say_hello", &Map::new(), None).unwrap();
    assert_eq!(text_of(&r), "Hello, Cash");
    client.ping().unwrap();
    assert_eq!(threads_named("mcp-pysse-sse"), 1);
    client.close();
    assert!(client.dead_reason().is_some());
    // Close interrupts the stream read and joins the reader (it used to wait for the 300 s
    // idle timeout, detached).
    assert_eq!(threads_named("mcp-pysse-sse"), 0);
}

// ------------------------------------------------------------------------------------------
// server-everything over the three transports

const EVERYTHING_TOOLS: &[&str] = &[
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "simulate-research-query",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
];

fn exercise_everything(client: &Client) {
    let mut names: Vec<String> = client.list_tools().unwrap().into_iter().map(|t| t.name).collect();
    names.sort();
    assert_eq!(names, EVERYTHING_TOOLS);

    let r = client.call_tool("echo", &args(json!({"message": "hi there"})), None).unwrap();
    assert_eq!(text_of(&r), "Echo: hi there");
    let r = client.call_tool("get-sum", &args(json!({"a": 2, "b": 40})), None).unwrap();
    assert!(text_of(&r).contains("42"), "{}", text_of(&r));
    assert!(!r.is_error);

    // Failures come back as isError results, surfaced with an Error prefix.
    let r = client.call_tool("get-sum", &args(json!({"a": "two"})), None).unwrap();
    assert!(r.is_error);
    assert!(text_of(&r).starts_with("Error: "), "{}", text_of(&r));
    let r = client.call_tool("no-such-tool", &Map::new(), None).unwrap();
    assert!(r.is_error);

    // Non-text content is described, never dumped as base64.
    let r = client.call_tool("get-tiny-image", &Map::new(), None).unwrap();
    assert!(r.content.iter().any(|c| matches!(c, Content::Image { .. })));
    assert!(text_of(&r).contains("[image image/png,"), "{}", text_of(&r));

    // Progress notifications keep a call alive past its base timeout.
    let started = Instant::now();
    let r = client
        .call_tool_with_timeout(
            "trigger-long-running-operation",
            &args(json!({"duration": 3, "steps": 6})),
            None,
            Duration::from_millis(1500),
        )
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(2500));
    assert!(r.progress_events >= 4, "progress events: {}", r.progress_events);
    assert!(text_of(&r).contains("completed"), "{}", text_of(&r));
}

fn expect_list_changed(client: &Client) {
    // server-everything registers capability-dependent tools right after `initialized` and
    // announces it with tools/list_changed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !client.take_list_changed() {
        assert!(Instant::now() < deadline, "no notifications/tools/list_changed within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(client.list_tools().unwrap().len(), EVERYTHING_TOOLS.len());
}

#[test]
fn everything_over_stdio() {
    let js = everything_js();
    let spec = TransportSpec::Stdio(StdioSpec {
        command: "npx".into(),
        args: vec!["-y".into(), "@modelcontextprotocol/server-everything".into()],
        env: BTreeMap::new(),
        cwd: Some(root().join("mcp_servers")),
        python: None,
    });
    assert!(js.is_file());
    let client = Client::connect("evhttp", &spec, fast_cfg()).unwrap();
    assert_eq!(client.server_info().protocol_version, "2025-11-25");
    expect_list_changed(&client);
    exercise_everything(&client);
    client.close();
}

#[test]
fn everything_over_sse() {
    let js = everything_js();
    let (_server, port) = spawn_listening(|port| everything(&js, "sse", port));
    let spec = TransportSpec::Sse(HttpSpec { url: format!("http://127.0.0.1:{port}/sse"), headers: BTreeMap::new() });
    let client = Client::connect("everything", &spec, fast_cfg()).unwrap();
    expect_list_changed(&client);
    exercise_everything(&client);
    client.close();
}

#[test]
fn everything_over_streamable_http() {
    let js = everything_js();
    let (_server, port) = spawn_listening(|port| everything(&js, "streamableHttp", port));
    let url = format!("http://127.0.0.1:{port}/mcp");
    let spec = TransportSpec::StreamableHttp(HttpSpec { url: url.clone(), headers: BTreeMap::new() });
    let client = Client::connect("evhttp", &spec, fast_cfg()).unwrap();
    assert_eq!(client.server_info().protocol_version, "2025-11-25");
    expect_list_changed(&client);
    exercise_everything(&client);

    // An expired session (404) is initialised again transparently.
    let session = client.session_id().expect("server-everything assigns a session id");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    let status = agent.delete(&url).header("Mcp-Session-Id", session.as_str()).call().unwrap().status();
    assert!(status.is_success(), "DELETE answered {status}");
    let r = client.call_tool("echo", &args(json!({"message": "again"})), None).unwrap();
    assert_eq!(text_of(&r), "Echo: again");
    let new_session = client.session_id().unwrap();
    assert_ne!(new_session, session);

    // Close ends the session with DELETE: the old id is unknown afterwards (the TypeScript SDK
    // answers 400 "No valid session ID provided" rather than the spec's 404). The notification
    // stream's reader is joined, not left blocked in its read.
    client.close();
    assert_eq!(threads_named("mcp-evhttp-get"), 0);
    let probe = agent
        .post(&url)
        .header("Mcp-Session-Id", new_session.as_str())
        .header("Accept", "application/json, text/event-stream")
        .content_type("application/json")
        .send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .unwrap();
    assert!(matches!(probe.status().as_u16(), 400 | 404), "{}", probe.status());
}

// ------------------------------------------------------------------------------------------
// Misbehaving servers

#[test]
fn stdio_crash_mid_call_is_a_clear_retryable_error() {
    let client = Client::connect("crashy", &fixture("crash", None), fast_cfg()).unwrap();
    assert_eq!(client.list_tools().unwrap()[0].name, "echo");
    let started = Instant::now();
    let err = client.call_tool("echo", &args(json!({"text": "x"})), None).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "crash noticed late: {:?}", started.elapsed());
    let msg = err.to_string();
    assert!(matches!(err, Error::Closed(_)), "{err:?}");
    assert!(msg.contains("exit status: 3") && msg.contains("fatal: boom while calling"), "{msg}");
    assert!(err.retryable());
    assert!(client.dead_reason().is_some());
    assert!(matches!(client.ping(), Err(Error::Closed(_))));
}

#[test]
fn a_server_flooding_stderr_keeps_answering_and_its_crash_message_stays_short() {
    // 32 MiB of stderr (with 2 MiB lines) while calls go on: the drain keeps the pipe from
    // filling (the server would block on its next write) and keeps only a short tail.
    let dir = tmp_dir("flood");
    let log = dir.join("calls.log");
    let client = Client::connect("flood", &fixture("stderr-flood", Some(&log)), fast_cfg()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut calls = 0;
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("flood done") {
        assert!(Instant::now() < deadline, "the server never finished writing its stderr: the pipe was not drained");
        let started = Instant::now();
        let r = client.call_tool("echo", &args(json!({"text": format!("n{calls}")})), None).unwrap();
        assert!(text_of(&r).contains(&format!("echo: n{calls}")));
        assert!(started.elapsed() < Duration::from_secs(5), "a call took {:?} during the flood", started.elapsed());
        calls += 1;
    }
    let r = client.call_tool("echo", &args(json!({"text": "after"})), None).unwrap();
    assert!(text_of(&r).contains("echo: after"));
    let err = client.call_tool("echo", &args(json!({"text": "crash"})), None).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("exit status: 5") && msg.contains("last words"), "{msg}");
    assert!(msg.len() < 2_500, "crash message of {} bytes", msg.len());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn manager_notices_a_crashed_server_and_reconnects_on_the_next_call() {
    let proj = tmp_dir("crash-proj");
    std::fs::create_dir_all(proj.join("mcp_servers")).unwrap();
    let script = root().join("tests/fixtures/mcp/misbehaving.py");
    let cfg = json!({
        "crashy": {"command": python(), "args": [script.display().to_string(), "crash"], "display_name": "Crashy"},
        "fine": {"command": python(), "args": [script.display().to_string(), "ok"]},
    });
    std::fs::write(proj.join("mcp_servers/mcp_config.json"), cfg.to_string()).unwrap();
    let data = proj.join("data");
    let mgr = McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: data },
        Catalog::load(Some(&proj), &proj.join("data")).unwrap(),
    );
    assert_eq!(wire(mgr.connect("crashy").unwrap())["status"], "connected");
    let err = mgr.call("mcp_crashy_echo", &args(json!({"text": "x"})), None).unwrap_err();
    assert!(matches!(err, Error::Closed(_)), "{err:?}");
    let dto = wire(mgr.dto("crashy").unwrap());
    assert_eq!(dto["status"], "disconnected");
    assert_eq!(dto["status_error"], "connection is no longer available");
    // The wrapper's next call reconnects (and this fixture crashes again: a fresh error).
    let err = mgr.call_on("crashy", "echo", &args(json!({"text": "x"})), None).unwrap_err();
    assert!(err.to_string().contains("fatal: boom while calling"), "{err}");
    assert!(matches!(mgr.call("mcp_crashy_echo", &Map::new(), None), Err(Error::Closed(_))));
    // The other server is unaffected, and works through the name table.
    assert_eq!(wire(mgr.connect("fine").unwrap())["tool_count"], 1);
    let r = mgr.call("mcp_fine_echo", &args(json!({"text": "hey"})), None).unwrap();
    assert!(text_of(&r).starts_with("echo: hey"));
    // Input schemas are normalised for providers.
    let listing = wire(mgr.tools_listing("fine").unwrap());
    assert_eq!(
        listing["tools"][0]["input_schema"],
        json!({"type":"object","properties":{"text":{"type":"string","nullable":true}},"required":["text"]})
    );
    mgr.shutdown();
    std::fs::remove_dir_all(proj).unwrap();
}

#[test]
fn hanging_call_times_out_and_sends_cancelled() {
    let dir = tmp_dir("hang");
    let log = dir.join("log.txt");
    let cfg = ClientConfig { call_timeout: Duration::from_secs(1), ..fast_cfg() };
    let client = Client::connect("hang", &fixture("hang", Some(&log)), cfg).unwrap();
    let started = Instant::now();
    let err = client.call_tool("echo", &Map::new(), None).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(3), "{took:?}");
    assert_eq!(err.to_string(), "MCP request 'tools/call' timed out after 1s");
    // The connection survives a timed-out call.
    client.ping().unwrap();
    let seen = std::fs::read_to_string(&log).unwrap();
    assert!(seen.lines().any(|l| l == "notifications/cancelled"), "{seen}");
    client.close();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn cancel_token_interrupts_a_call() {
    let dir = tmp_dir("cancel");
    let log = dir.join("log.txt");
    let client = Client::connect("hang", &fixture("hang", Some(&log)), fast_cfg()).unwrap();
    let token = CancelToken::new();
    let t2 = token.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        t2.cancel();
    });
    let started = Instant::now();
    let err = client.call_tool("echo", &Map::new(), Some(&token)).unwrap_err();
    assert!(matches!(err, Error::Cancelled), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    client.ping().unwrap();
    assert!(std::fs::read_to_string(&log).unwrap().contains("notifications/cancelled"));
    client.close();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn progress_extends_the_deadline_up_to_the_hard_maximum() {
    let cfg = ClientConfig { call_timeout: Duration::from_secs(1), ..fast_cfg() };
    let client = Client::connect("progress", &fixture("progress", None), cfg).unwrap();
    let r = client.call_tool("echo", &Map::new(), None).unwrap();
    assert_eq!(text_of(&r), "done after 6 steps");
    assert!(r.progress_events >= 5);
    client.close();

    let cfg =
        ClientConfig { call_timeout: Duration::from_secs(1), max_call_time: Duration::from_millis(2500), ..fast_cfg() };
    let client = Client::connect("forever", &fixture("progress-forever", None), cfg).unwrap();
    let started = Instant::now();
    let err = client.call_tool("echo", &Map::new(), None).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(took >= Duration::from_millis(2400) && took < Duration::from_secs(4), "{took:?}");
    client.close();
}

#[test]
fn garbage_lines_are_skipped_and_huge_lines_fail_the_connection() {
    let client = Client::connect("garbage", &fixture("garbage", None), fast_cfg()).unwrap();
    assert_eq!(client.list_tools().unwrap().len(), 1);
    client.close();

    let client = Client::connect("huge", &fixture("huge", None), fast_cfg()).unwrap();
    let err = client.call_tool("echo", &Map::new(), None).unwrap_err();
    assert!(err.to_string().contains("larger than 16 MiB"), "{err}");
    assert!(err.retryable());
    client.close();
}

#[test]
fn server_requests_get_ping_answers_and_method_not_found() {
    let client = Client::connect("srv", &fixture("server-requests", None), fast_cfg()).unwrap();
    let r = client.call_tool("echo", &Map::new(), None).unwrap();
    let got: Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert_eq!(
        got,
        json!([
            {"jsonrpc": "2.0", "id": "srv-1", "result": {}},
            {"jsonrpc": "2.0", "id": "srv-2", "error": {"code": -32601, "message": "Method not found"}}
        ])
    );
    client.close();
}

#[test]
fn pagination_content_types_and_is_error() {
    let client = Client::connect("pages", &fixture("paginate", None), fast_cfg()).unwrap();
    let names: Vec<String> = client.list_tools().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, vec!["t1", "t2", "t3"]);
    client.close();

    let client = Client::connect("ok", &fixture("ok", None), fast_cfg()).unwrap();
    let r = client.call_tool("echo", &args(json!({"text": "hi"})), None).unwrap();
    assert_eq!(
        text_of(&r),
        "echo: hi\n[image image/png, 5 bytes]\n[audio audio/wav, 3 bytes]\n[resource link file:///a.txt (a.txt)]\n[resource mem://x]\ninner"
    );
    assert_eq!(r.structured, Some(json!({"echo": "hi"})));
    client.close();

    let client = Client::connect("err", &fixture("is-error", None), fast_cfg()).unwrap();
    let r = client.call_tool("echo", &Map::new(), None).unwrap();
    assert!(r.is_error);
    assert_eq!(text_of(&r), "Error: no such city");
    client.close();
}

#[test]
fn list_changed_refreshes_the_managers_tools() {
    let proj = tmp_dir("lc-proj");
    std::fs::create_dir_all(proj.join("mcp_servers")).unwrap();
    let script = root().join("tests/fixtures/mcp/misbehaving.py");
    let cfg = json!({"lc": {"command": python(), "args": [script.display().to_string(), "list-changed"]}});
    std::fs::write(proj.join("mcp_servers/mcp_config.json"), cfg.to_string()).unwrap();
    let mgr = McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: proj.join("data") },
        Catalog::load(Some(&proj), &proj.join("data")).unwrap(),
    );
    mgr.connect("lc").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let names: Vec<String> = mgr.live_tools_of("lc").iter().map(|t| t.name.clone()).collect();
        if names == ["mcp_lc_added_later", "mcp_lc_echo"] {
            break;
        }
        assert!(Instant::now() < deadline, "tools never refreshed: {names:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(wire(mgr.dto("lc").unwrap())["tool_count"], 2);
    mgr.shutdown();
    std::fs::remove_dir_all(proj).unwrap();
}

#[test]
fn startup_failures_are_clear() {
    let err = Client::connect("v", &fixture("bad-version", None), fast_cfg()).unwrap_err();
    assert_eq!(err.to_string(), "MCP server chose unsupported protocol version '1999-01-01'");

    let cfg = ClientConfig { connect_timeout: Duration::from_secs(1), ..fast_cfg() };
    let started = Instant::now();
    let err = Client::connect("slow", &fixture("slow-start", None), cfg).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());

    let err = Client::connect("gone", &fixture("exit-at-start", None), fast_cfg()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("exit status: 7") && msg.contains("ImportError"), "{msg}");

    let spec = TransportSpec::Stdio(StdioSpec {
        command: "definitely-not-a-command-xyz".into(),
        args: vec![],
        env: BTreeMap::new(),
        cwd: None,
        python: None,
    });
    let err = Client::connect("missing", &spec, fast_cfg()).unwrap_err();
    assert!(matches!(err, Error::Spawn { .. }), "{err:?}");
}

#[test]
fn dead_url_connect_failure_is_redacted() {
    let data = tmp_dir("dead-url");
    let mgr = McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: data.clone() },
        Catalog::load(None, &data).unwrap(),
    );
    let port = free_port();
    for (name, kind, path) in [("dead-sse", "sse", "sse"), ("dead-http", "streamable_http", "mcp")] {
        let body = json!({"type": kind, "display_name": "Dead",
                          "url": format!("http://127.0.0.1:{port}/{path}?token=topsecret-123"),
                          "headers": {"Authorization": "Bearer topsecret-123", "X-Api-Key": "k3y-value-9"}});
        let created = wire(mgr.create(name, entry(body)).unwrap());
        assert_eq!(created["headers"], json!({"Authorization": "********", "X-Api-Key": "********"}));
        assert_eq!(created["status"], "disconnected");
        let dto = wire(mgr.connect(name).unwrap());
        assert_eq!(dto["status"], "error", "{dto}");
        assert_eq!(dto["connected"], false);
        let err = dto["status_error"].as_str().unwrap();
        assert!(err.starts_with("ConnectError: "), "{err}");
        assert!(!err.contains("topsecret") && !err.contains("k3y-value"), "{err}");
        assert!(err.chars().count() <= 500);
        // The URL is shown as configured; header values never are.
        let listed = wire(mgr.list()).to_string();
        assert!(!listed.contains("Bearer topsecret") && !listed.contains("k3y-value"), "{listed}");
    }
    std::fs::remove_dir_all(data).unwrap();
}

// ------------------------------------------------------------------------------------------
// Wiring: the turn extension's tools and the /api/mcp routes of the real server

use cashcode::mcp::extension::McpExtension;
use cashcode::tool::{Tool, TurnCtx, TurnExtension, TurnState};

fn turn_ctx(dir: &Path, metadata: Map<String, Value>) -> TurnCtx {
    TurnCtx {
        chat_id: "chat-1".into(),
        workspace: dir.to_path_buf(),
        protected: Vec::new(),
        memory: Arc::new(cashcode::store::memory_files::MemoryFiles::new(dir)),
        cancel: CancelToken::new(),
        state: Arc::new(Mutex::new(TurnState { metadata, ..TurnState::default() })),
        confinement: Default::default(),
        checkpoint: None,
    }
}

fn visible(ext: &McpExtension, ctx: &TurnCtx) -> Vec<Arc<dyn Tool>> {
    ext.tools(&ctx.state())
}

fn names_of(tools: &[Arc<dyn Tool>]) -> Vec<String> {
    tools.iter().map(|t| t.name().to_string()).collect()
}

fn run_tool(tools: &[Arc<dyn Tool>], name: &str, a: Value, ctx: &TurnCtx) -> cashcode::tool::ToolOutput {
    let tool = tools.iter().find(|t| t.name() == name).unwrap_or_else(|| panic!("{name} is not visible"));
    tool.run(&args(a), ctx)
}

#[test]
fn deferred_activation_search_prepare_call_and_a_later_turn() {
    require_python_sdk();
    let dir = tmp_dir("deferred");
    let mgr = Arc::new(McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: dir.join("data") },
        Catalog::load(Some(&root()), &dir.join("data")).unwrap(),
    ));
    let ext = McpExtension::new(mgr.clone());
    let ctx = turn_ctx(&dir, Map::new());

    // Only the meta tools are visible; MCP tools stay hidden until activated.
    let tools = visible(&ext, &ctx);
    assert_eq!(names_of(&tools), vec!["tool_search", "mcp_prepare"]);
    assert_eq!(
        run_tool(&tools, "tool_search", json!({"query": "  "}), &ctx).for_model,
        "Please provide search keywords."
    );
    let found = run_tool(&tools, "tool_search", json!({"query": "say hello"}), &ctx).for_model;
    assert!(found.contains("mcp_prepare(server_name=\"test_stdio_mcp\")"), "{found}");
    assert_eq!(
        run_tool(&tools, "mcp_prepare", json!({"server_name": ""}), &ctx).for_model,
        "Error: server_name must not be empty."
    );
    let unknown = run_tool(&tools, "mcp_prepare", json!({"server_name": "nope"}), &ctx);
    assert_eq!(unknown.for_model, "Error: connecting MCP server 'nope' failed; check the configuration.");
    assert!(unknown.failed);

    let prepared = run_tool(&tools, "mcp_prepare", json!({"server_name": "test_stdio_mcp"}), &ctx);
    assert_eq!(
        prepared.for_model,
        "MCP server 'test_stdio_mcp' connected. Activated 1 tools: mcp_test_stdio_mcp_say_hello"
    );
    let tools = visible(&ext, &ctx);
    assert_eq!(names_of(&tools), vec!["tool_search", "mcp_prepare", "mcp_test_stdio_mcp_say_hello"]);
    let out = run_tool(&tools, "mcp_test_stdio_mcp_say_hello", json!({}), &ctx);
    assert_eq!((out.for_model.as_str(), out.failed), ("Hello, Cash", false));

    // The activation is in the turn's metadata (persisted by the turn at its end); a later
    // turn of the chat starts from it and sees the tool directly.
    let meta = ctx.state().metadata.clone();
    assert!(meta["activated_tools"]["mcp_test_stdio_mcp_say_hello"].as_f64().unwrap() > 1.7e9);
    let later = turn_ctx(&dir, meta);
    let tools = visible(&ext, &later);
    assert_eq!(run_tool(&tools, "mcp_test_stdio_mcp_say_hello", json!({}), &later).for_model, "Hello, Cash");

    // tool_search over a live server activates matching tools in a fresh chat.
    let fresh = turn_ctx(&dir, Map::new());
    let text = run_tool(&visible(&ext, &fresh), "tool_search", json!({"query": "hello"}), &fresh).for_model;
    assert!(text.contains("- **mcp_test_stdio_mcp_say_hello**"), "{text}");
    assert!(text.contains("1 tools activated"), "{text}");
    assert!(names_of(&visible(&ext, &fresh)).contains(&"mcp_test_stdio_mcp_say_hello".to_string()));

    // After a disconnect the activated name is invisible (not registered).
    mgr.disconnect("test_stdio_mcp").unwrap();
    assert_eq!(names_of(&visible(&ext, &later)), vec!["tool_search", "mcp_prepare"]);
    mgr.shutdown();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn selected_connectors_are_turn_only_and_failures_fail_the_turn() {
    require_python_sdk();
    let dir = tmp_dir("selected");
    let mgr = Arc::new(McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: dir.join("data") },
        Catalog::load(Some(&root()), &dir.join("data")).unwrap(),
    ));
    let ext = McpExtension::new(mgr.clone());
    let ctx = turn_ctx(&dir, Map::new());
    let req = |servers: Value| cashcode::bus::TurnRequest {
        chat_id: "chat-1".into(),
        content: "hi".into(),
        selection: cashcode::bus::Selection {
            provider: cashcode::llm::Provider::OpenAiCompatible,
            model: "m".into(),
            mentioned_skills: vec![],
            selected_mcp_connectors: servers.as_array().unwrap().clone(),
        },
    };
    let mut prep = cashcode::tool::Preparation::default();
    ext.prepare(&req(json!([{"server": "test_stdio_mcp"}, {"server": "test_stdio_mcp"}])), &ctx, &mut prep).unwrap();
    let turn_tools = {
        let st = ctx.state();
        assert!(!st.metadata.contains_key("activated_tools"), "selections are never persisted");
        st.turn_tools.clone()
    };
    assert_eq!(names_of(&turn_tools), vec!["mcp_test_stdio_mcp_say_hello"]);
    // Tools run without the state lock held (the turn releases it), as here.
    assert_eq!(turn_tools[0].run(&Map::new(), &ctx).for_model, "Hello, Cash");
    assert!(!ctx.state().metadata.contains_key("activated_tools"));
    // A selected server that cannot connect fails the turn with its status line.
    let port = free_port();
    let body = json!({"display_name": "Down", "url": format!("http://127.0.0.1:{port}/sse")});
    mgr.create("down", entry(body)).unwrap();
    let err = ext.prepare(&req(json!([{"server": "down"}])), &ctx, &mut prep).unwrap_err();
    assert!(err.starts_with("Unable to prepare MCP down: ConnectError: "), "{err}");
    let err = ext.prepare(&req(json!([{"server": "nope"}])), &ctx, &mut prep).unwrap_err();
    assert_eq!(err, "Unable to prepare MCP nope: MCP server is not configured");

    // A server without tools cannot be used for a turn.
    let proj = dir.join("proj");
    std::fs::create_dir_all(proj.join("mcp_servers")).unwrap();
    let script = root().join("tests/fixtures/mcp/misbehaving.py");
    let cfg = json!({"empty": {"command": python(), "args": [script.display().to_string(), "many-0"]}});
    std::fs::write(proj.join("mcp_servers/mcp_config.json"), cfg.to_string()).unwrap();
    let empty_mgr = Arc::new(McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: proj.join("data") },
        Catalog::load(Some(&proj), &proj.join("data")).unwrap(),
    ));
    let empty_ext = McpExtension::new(empty_mgr.clone());
    let err = empty_ext.prepare(&req(json!([{"server": "empty"}])), &ctx, &mut prep).unwrap_err();
    assert_eq!(err, "Unable to use MCP empty: no tools were discovered");
    empty_mgr.shutdown();
    mgr.shutdown();
    std::fs::remove_dir_all(dir).unwrap();
}

fn req(method: &str, path: &str, body: Value) -> cashcode::http::Req {
    cashcode::http::Req {
        method: method.into(),
        path: path.into(),
        target: cashcode::http::gate::classify(path),
        query: String::new(),
        headers: Vec::new(),
        body: if body.is_null() { Vec::new() } else { body.to_string().into_bytes() },
    }
}

fn call(api: &cashcode::http::api::Api, method: &str, path: &str, body: Value) -> (u16, Value) {
    let r = api.route(&req(method, path, body));
    let v = if r.body.is_empty() { Value::Null } else { serde_json::from_slice(&r.body).unwrap() };
    (r.status, v)
}

#[test]
fn marketplace_routes_of_the_real_server() {
    require_python_sdk();
    let home = tmp_dir("routes");
    let mut config = cashcode::config::Config::for_home(&home);
    config.project_dir = Some(root());
    config.mcp.connect_timeout = Duration::from_secs(20);
    let server = cashcode::app::start(config.clone()).unwrap();
    let api = server.api();

    let (s, v) = call(&api, "GET", "/api/mcp/servers", Value::Null);
    assert_eq!(s, 200);
    let names: Vec<&str> = v["servers"].as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["test_sse_mcp", "test_stdio_mcp"]);
    assert_eq!(
        v["servers"][1],
        json!({"name": "test_stdio_mcp", "display_name": "stdio test MCP",
               "description": v["servers"][1]["description"], "type": "stdio", "url": "", "headers": {},
               "builtin": true, "mutable": false, "status": "disconnected", "connected": false,
               "status_error": null, "tool_count": 0})
    );

    let body = json!({"name": "weather", "display_name": "Weather", "url": "http://127.0.0.1:9/sse",
                      "headers": {"Authorization": "Bearer real-secret"}});
    let (s, v) = call(&api, "POST", "/api/mcp/servers", body.clone());
    assert_eq!(s, 201, "{v}");
    assert_eq!(
        v,
        json!({"name": "weather", "display_name": "Weather", "description": "", "type": "sse",
               "url": "http://127.0.0.1:9/sse", "headers": {"Authorization": "********"}, "builtin": false,
               "mutable": true, "status": "disconnected", "connected": false, "status_error": null, "tool_count": 0})
    );
    assert_eq!(call(&api, "POST", "/api/mcp/servers", body).0, 409);
    let dup_builtin = json!({"name": "test_stdio_mcp", "display_name": "x", "url": "http://h/sse"});
    assert_eq!(
        call(&api, "POST", "/api/mcp/servers", dup_builtin),
        (409, json!({"detail": "MCP server already exists: test_stdio_mcp"}))
    );
    let stdio = json!({"name": "local", "type": "stdio", "display_name": "x", "url": "http://h/sse"});
    assert_eq!(
        call(&api, "POST", "/api/mcp/servers", stdio),
        (422, json!({"detail": "user MCP servers support only the sse transport"}))
    );
    let (s, v) =
        call(&api, "POST", "/api/mcp/servers", json!({"display_name": "x", "url": "http://h/sse", "bogus": 1}));
    assert_eq!(s, 422);
    let kinds: Vec<&str> = v["detail"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["missing", "extra_forbidden"]);
    let bad = json!({"name": "Bad Name", "display_name": "x", "url": "http://h/sse"});
    assert_eq!(call(&api, "POST", "/api/mcp/servers", bad).0, 422);
    let nl = json!({"name": "nl", "display_name": "x", "url": "http://h/sse", "headers": {"X": "a\nb"}});
    assert_eq!(
        call(&api, "POST", "/api/mcp/servers", nl),
        (422, json!({"detail": "header 'X' must not contain newlines"}))
    );

    let upd =
        json!({"display_name": "Weather 2", "url": "http://127.0.0.1:9/sse", "headers": {"Authorization": "********"}});
    let (s, v) = call(&api, "PUT", "/api/mcp/servers/weather", upd.clone());
    assert_eq!((s, v["display_name"].clone()), (200, json!("Weather 2")));
    let stored = std::fs::read_to_string(config.data_dir.join("mcp/servers.json")).unwrap();
    assert!(stored.contains("Bearer real-secret"), "the masked value keeps the stored secret");
    assert_eq!(
        call(&api, "PUT", "/api/mcp/servers/test_stdio_mcp", upd.clone()),
        (403, json!({"detail": "built-in MCP servers are read-only"}))
    );
    assert_eq!(
        call(&api, "PUT", "/api/mcp/servers/nope", upd.clone()),
        (404, json!({"detail": "MCP server not found: nope"}))
    );
    let mut with_name = upd.clone();
    with_name["name"] = json!("weather");
    assert_eq!(call(&api, "PUT", "/api/mcp/servers/weather", with_name).0, 422);

    // Dead URL: 200 with status error, redacted.
    let (s, v) = call(&api, "POST", "/api/mcp/servers/weather/connect", Value::Null);
    assert_eq!((s, v["status"].clone(), v["connected"].clone()), (200, json!("error"), json!(false)));
    assert!(v["status_error"].as_str().unwrap().starts_with("ConnectError: "), "{v}");
    assert!(!v.to_string().contains("real-secret"));
    assert_eq!(call(&api, "POST", "/api/mcp/servers/nope/connect", Value::Null).0, 404);
    assert_eq!(call(&api, "GET", "/api/mcp/servers/nope/tools", Value::Null).0, 404);

    // A chat on disk with an activation of the stdio tool: disconnect purges it.
    let chat = config.memory_dir.join("chat-a");
    std::fs::create_dir_all(&chat).unwrap();
    std::fs::write(
        chat.join("metadata.json"),
        json!({"title": "t", "activated_tools": {"mcp_test_stdio_mcp_say_hello": 1.0, "mcp_other_x": 2.0}}).to_string(),
    )
    .unwrap();
    let (s, v) = call(&api, "POST", "/api/mcp/servers/test_stdio_mcp/connect", Value::Null);
    assert_eq!((s, v["status"].clone(), v["tool_count"].clone()), (200, json!("connected"), json!(1)), "{v}");
    let (_, v) = call(&api, "GET", "/api/mcp/servers/test_stdio_mcp/tools", Value::Null);
    assert_eq!(
        v,
        json!({"server": "test_stdio_mcp", "display_name": "stdio test MCP", "source": "live", "status": "connected",
               "status_error": null, "tool_count": 1,
               "tools": [{"name": "mcp_test_stdio_mcp_say_hello", "original_name": "say_hello",
                          "description": "Say hello to Cash. Use it to check that the MCP connection works.",
                          "input_schema": {"type": "object", "properties": {}, "required": [], "title": "say_helloArguments"},
                          "source": "live", "callable": true}]})
    );
    let (s, v) = call(&api, "POST", "/api/mcp/servers/test_stdio_mcp/disconnect", Value::Null);
    assert_eq!((s, v["status"].clone()), (200, json!("disconnected")));
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(chat.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["activated_tools"], json!({"mcp_other_x": 2.0}));
    let (_, v) = call(&api, "GET", "/api/mcp/servers/test_stdio_mcp/tools", Value::Null);
    assert_eq!((v["source"].clone(), v["tools"][0]["callable"].clone()), (json!("cache"), json!(false)));

    assert_eq!(call(&api, "DELETE", "/api/mcp/servers/test_stdio_mcp", Value::Null).0, 403);
    assert_eq!(call(&api, "DELETE", "/api/mcp/servers/weather", Value::Null), (204, Value::Null));
    assert_eq!(call(&api, "DELETE", "/api/mcp/servers/weather", Value::Null).0, 404);
    assert_eq!(call(&api, "PATCH", "/api/mcp/servers", Value::Null).0, 405);

    // Shutdown kills a connected stdio child.
    call(&api, "POST", "/api/mcp/servers/test_stdio_mcp/connect", Value::Null);
    server.stop();
    std::fs::remove_dir_all(home).unwrap();
}

// ------------------------------------------------------------------------------------------
// The official client conformance suite (2025-11-25 client scenarios our client implements)

#[test]
fn official_client_conformance_scenarios() {
    everything_js();
    let suite = root().join("mcp_servers/node_modules/@modelcontextprotocol/conformance");
    assert!(suite.is_dir(), "the conformance suite is not installed: run `npm ci --prefix mcp_servers`");
    let client = env!("CARGO_BIN_EXE_cashcode-mcp-client");
    let scenarios = ["initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"];
    for (scenario, (passed, text)) in scenarios.iter().zip(run_conformance(client, &scenarios)) {
        assert!(passed, "conformance scenario {scenario} failed:\n{text}");
    }
}

/// Runs `npx conformance client` for each scenario, two at a time (each is a separate suite
/// server on its own ephemeral port, mostly waiting on Node start-up; more at once would only
/// compete for the CPU); returns, in the order given, whether it passed and its output.
fn run_conformance(client: &str, scenarios: &[&str]) -> Vec<(bool, String)> {
    const AT_ONCE: usize = 2;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = Mutex::new(vec![(false, String::new()); scenarios.len()]);
    std::thread::scope(|s| {
        for _ in 0..AT_ONCE {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(scenario) = scenarios.get(i) else { return };
                let out = Command::new("npx")
                    .args(["conformance", "client", "--command", client, "--scenario", scenario])
                    .current_dir(root().join("mcp_servers"))
                    .output()
                    .expect("run npx conformance");
                let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
                let passed = out.status.success() && text.contains("OVERALL: PASSED");
                results.lock().unwrap()[i] = (passed, text);
            });
        }
    });
    results.into_inner().unwrap()
}

/// The conformance suite's 19 `auth/*` client scenarios (OAuth: metadata discovery, client ID
/// metadata documents, dynamic and pre-registered clients, scope selection and step-up, the
/// token-endpoint authentications, resource checks, the 2025-03-26 fallbacks and the
/// client-credentials grants), each run with `cashcode-mcp-client` and its headless user agent.
/// Every failing scenario is named with its output.
#[test]
fn official_client_conformance_auth_scenarios() {
    everything_js();
    let suite = root().join("mcp_servers/node_modules/@modelcontextprotocol/conformance");
    assert!(suite.is_dir(), "the conformance suite is not installed: run `npm ci --prefix mcp_servers`");
    // The suite's CIMD scenario expects this URL as the client id (a client's metadata
    // document must live at an https URL; the suite's provider does not fetch it).
    let client = format!(
        "{} --client-metadata-url https://conformance-test.local/client-metadata.json",
        env!("CARGO_BIN_EXE_cashcode-mcp-client")
    );
    let scenarios = [
        "auth/metadata-default",
        "auth/metadata-var1",
        "auth/metadata-var2",
        "auth/metadata-var3",
        "auth/basic-cimd",
        "auth/scope-from-www-authenticate",
        "auth/scope-from-scopes-supported",
        "auth/scope-omitted-when-undefined",
        "auth/scope-step-up",
        "auth/scope-retry-limit",
        "auth/token-endpoint-auth-basic",
        "auth/token-endpoint-auth-post",
        "auth/token-endpoint-auth-none",
        "auth/resource-mismatch",
        "auth/pre-registration",
        "auth/2025-03-26-oauth-metadata-backcompat",
        "auth/2025-03-26-oauth-endpoint-fallback",
        "auth/client-credentials-jwt",
        "auth/client-credentials-basic",
    ];
    let mut failed = Vec::new();
    for (scenario, (passed, text)) in scenarios.iter().zip(run_conformance(&client, &scenarios)) {
        if !passed {
            failed.push(format!("--- {scenario} ---\n{text}"));
        }
    }
    assert!(failed.is_empty(), "{} of {} auth scenarios failed:\n{}", failed.len(), scenarios.len(), failed.join("\n"));
}

// ------------------------------------------------------------------------------------------
// The full chat flow through the real server with a scripted OpenAI-compatible fake LLM

/// One scripted model answer.
enum Step {
    Text(&'static str),
    Call(&'static str, Value),
    /// One reply that makes several tool calls at once.
    Calls(Vec<(&'static str, Value)>),
}

/// tiny_http on 127.0.0.1:0 answering each `/chat/completions` with the next step as an SSE
/// stream, recording every request body; a request beyond the script gets HTTP 500.
struct FakeLlm {
    url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
    script: Arc<Mutex<std::collections::VecDeque<Step>>>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeLlm {
    fn start() -> FakeLlm {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
        let script: Arc<Mutex<std::collections::VecDeque<Step>>> = Arc::default();
        let (srv, b, sc) = (server.clone(), bodies.clone(), script.clone());
        let thread = std::thread::spawn(move || {
            for mut rq in srv.incoming_requests() {
                let mut body = String::new();
                let _ = std::io::Read::read_to_string(rq.as_reader(), &mut body);
                let Ok(v) = serde_json::from_str::<Value>(&body) else {
                    let _ = rq.respond(tiny_http::Response::from_string("bad json").with_status_code(400));
                    continue;
                };
                b.lock().unwrap().push(v);
                let step = sc.lock().unwrap().pop_front();
                let chunks: Vec<Value> = match step {
                    None => {
                        let _ = rq.respond(tiny_http::Response::from_string("script exhausted").with_status_code(500));
                        continue;
                    }
                    Some(Step::Text(t)) => vec![
                        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": t}}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                    ],
                    Some(Step::Call(name, a)) => vec![
                        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0,
                            "id": format!("call_{name}"), "type": "function",
                            "function": {"name": name, "arguments": a.to_string()}}]}}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
                    ],
                    Some(Step::Calls(calls)) => {
                        let tool_calls: Vec<Value> = calls
                            .iter()
                            .enumerate()
                            .map(|(i, (name, a))| {
                                json!({"index": i, "id": format!("call_{i}_{name}"), "type": "function",
                                "function": {"name": name, "arguments": a.to_string()}})
                            })
                            .collect();
                        vec![
                            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": tool_calls}}]}),
                            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
                        ]
                    }
                };
                let mut sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                sse.push_str("data: [DONE]\n\n");
                let header = tiny_http::Header::from_bytes("Content-Type", "text/event-stream").unwrap();
                let _ = rq.respond(tiny_http::Response::from_string(sse).with_header(header));
            }
        });
        FakeLlm { url: format!("http://127.0.0.1:{port}/v1"), bodies, script, server, thread: Some(thread) }
    }

    fn push(&self, steps: Vec<Step>) {
        self.script.lock().unwrap().extend(steps);
    }

    fn requests(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A server on a fresh home whose LLM settings point at `llm`.
fn start_server(
    tag: &str,
    project: &Path,
    llm: &FakeLlm,
) -> (cashcode::app::Server, cashcode::config::Config, PathBuf) {
    let home = tmp_dir(tag);
    let mut config = cashcode::config::Config::for_home(&home);
    config.project_dir = Some(project.to_path_buf());
    let settings = config.llm_settings_path();
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(
        &settings,
        json!({"version": 2, "openai_compatible": {"base_url": llm.url, "api_key": "sk-test-key-123456"},
               "ollama": {"base_url": ""}})
        .to_string(),
    )
    .unwrap();
    let server = cashcode::app::start(config.clone()).unwrap();
    (server, config, home)
}

/// Submits a message and collects the chat's events until `done` or `error`.
fn run_turn(server: &cashcode::app::Server, chat_id: &str, content: &str) -> Vec<Value> {
    let (tx, rx) = crossbeam_channel::bounded(4096);
    let conn = cashcode::ws::hub::Conn::new(7, tx, None);
    server.hub.subscribe(chat_id, &conn);
    server
        .agent
        .submit(cashcode::bus::TurnRequest {
            chat_id: chat_id.into(),
            content: content.into(),
            selection: cashcode::bus::Selection {
                provider: cashcode::llm::Provider::OpenAiCompatible,
                model: "fake-model".into(),
                mentioned_skills: vec![],
                selected_mcp_connectors: vec![],
            },
        })
        .unwrap();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let out = rx.recv_timeout(left).expect("turn did not finish within 60 s");
        if let cashcode::ws::hub::Out::Text(t) = out {
            let v: Value = serde_json::from_str(&t).unwrap();
            let name = v["event"].as_str().unwrap_or("").to_string();
            events.push(v);
            if name == "done" || name == "error" {
                server.hub.disconnect(&conn);
                return events;
            }
        }
    }
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|t| t.iter().map(|x| x["function"]["name"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn results_of(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["event"] == "tool_result")
        .map(|e| (e["tool_name"].as_str().unwrap().to_string(), e["result"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn chat_flow_search_prepare_call_then_call_directly_in_a_later_turn() {
    require_python_sdk();
    let llm = FakeLlm::start();
    let (server, config, home) = start_server("flow", &root(), &llm);
    llm.push(vec![
        Step::Call("tool_search", json!({"query": "say hello"})),
        Step::Call("mcp_prepare", json!({"server_name": "test_stdio_mcp"})),
        Step::Call("mcp_test_stdio_mcp_say_hello", json!({})),
        Step::Text("The tool said: Hello, Cash"),
    ]);
    let events = run_turn(&server, "mcp-flow", "please greet me with the MCP tool");
    assert_eq!(events.last().unwrap()["event"], "done", "{events:?}");
    let results = results_of(&events);
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0].0, "tool_search");
    assert!(results[0].1.contains("test_stdio_mcp"), "{}", results[0].1);
    assert_eq!(results[1].0, "mcp_prepare");
    assert!(results[1].1.starts_with("MCP server 'test_stdio_mcp' connected. Activated 1 tools"), "{}", results[1].1);
    assert_eq!(results[2], ("mcp_test_stdio_mcp_say_hello".to_string(), "Hello, Cash".to_string()));

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 4);
    assert!(tool_names(&reqs[0]).contains(&"tool_search".to_string()));
    assert!(!tool_names(&reqs[0]).iter().any(|n| n == "mcp_test_stdio_mcp_say_hello"), "hidden until activated");
    assert!(tool_names(&reqs[2]).iter().any(|n| n == "mcp_test_stdio_mcp_say_hello"), "visible once prepared");
    let tool_msgs: Vec<&Value> =
        reqs[3]["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_msgs.last().unwrap()["content"], "Hello, Cash");
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(config.memory_dir.join("mcp-flow/metadata.json")).unwrap())
            .unwrap();
    assert!(meta["activated_tools"]["mcp_test_stdio_mcp_say_hello"].is_number(), "{meta}");

    // A later turn calls the activated tool directly.
    llm.push(vec![Step::Call("mcp_test_stdio_mcp_say_hello", json!({})), Step::Text("Again: Hello, Cash")]);
    let events = run_turn(&server, "mcp-flow", "again please");
    assert_eq!(events.last().unwrap()["event"], "done", "{events:?}");
    assert_eq!(results_of(&events), vec![("mcp_test_stdio_mcp_say_hello".to_string(), "Hello, Cash".to_string())]);
    let reqs = llm.requests();
    assert!(tool_names(&reqs[4]).iter().any(|n| n == "mcp_test_stdio_mcp_say_hello"));

    // Disconnecting purges the activation from the cached chat and from metadata.json.
    let (s, _) = call(&server.api(), "POST", "/api/mcp/servers/test_stdio_mcp/disconnect", Value::Null);
    assert_eq!(s, 200);
    let read_meta = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(config.memory_dir.join("mcp-flow/metadata.json")).unwrap())
            .unwrap()
    };
    assert_eq!(read_meta()["activated_tools"], json!({}));
    llm.push(vec![Step::Text("bye")]);
    let events = run_turn(&server, "mcp-flow", "bye");
    assert_eq!(events.last().unwrap()["event"], "done");
    let last = llm.requests().last().unwrap().clone();
    assert!(!tool_names(&last).iter().any(|n| n.starts_with("mcp_test")), "{:?}", tool_names(&last));
    assert_eq!(read_meta()["activated_tools"], json!({}));
    server.stop();
    std::fs::remove_dir_all(home).unwrap();
}

#[test]
fn prompt_size_does_not_grow_with_connected_but_inactive_tools() {
    let project = tmp_dir("inactive-proj");
    std::fs::create_dir_all(project.join("mcp_servers")).unwrap();
    let script = root().join("tests/fixtures/mcp/misbehaving.py");
    let cfg = json!({
        "five": {"command": python(), "args": [script.display().to_string(), "many-5"]},
        "fifty": {"command": python(), "args": [script.display().to_string(), "many-50"]},
    });
    std::fs::write(project.join("mcp_servers/mcp_config.json"), cfg.to_string()).unwrap();
    let llm = FakeLlm::start();
    let (server, _config, home) = start_server("inactive", &project, &llm);
    let api = server.api();
    let size = |chat: &str| -> (usize, Vec<String>) {
        llm.push(vec![Step::Text("ok")]);
        let events = run_turn(&server, chat, "hello");
        assert_eq!(events.last().unwrap()["event"], "done", "{events:?}");
        let req = llm.requests().last().unwrap().clone();
        let system = req["messages"][0]["content"].as_str().unwrap().len();
        (system + req["tools"].to_string().len(), tool_names(&req))
    };
    let (zero, names0) = size("chat-0");
    assert_eq!(call(&api, "POST", "/api/mcp/servers/five/connect", Value::Null).1["tool_count"], 5);
    let (five, names5) = size("chat-5");
    assert_eq!(call(&api, "POST", "/api/mcp/servers/fifty/connect", Value::Null).1["tool_count"], 50);
    let (fifty, names50) = size("chat-50");
    println!("first request (system prompt + tools) bytes: 0 tools {zero}, 5 tools {five}, 55 tools {fifty}");
    assert_eq!((five, fifty), (zero, zero));
    assert_eq!((&names5, &names50), (&names0, &names0));
    assert!(!names0.iter().any(|n| n.starts_with("mcp_five") || n.starts_with("mcp_fifty")));
    server.stop();
    std::fs::remove_dir_all(home).unwrap();
    std::fs::remove_dir_all(project).unwrap();
}

fn processes_with(marker: &str) -> usize {
    let out = Command::new("pgrep").args(["-f", marker]).output().expect("pgrep");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn close_kills_a_stubborn_server_and_its_process_group() {
    assert!(which("pgrep").is_some(), "this test needs pgrep (procps)");
    let marker = format!("cc-marker-{}", std::process::id());
    let spec = match fixture("stubborn", None) {
        TransportSpec::Stdio(mut s) => {
            s.args.push(marker.clone());
            TransportSpec::Stdio(s)
        }
        other => other,
    };
    let cfg = ClientConfig { stdio_grace: Duration::from_millis(300), ..fast_cfg() };
    let client = Client::connect("stubborn", &spec, cfg).unwrap();
    client.ping().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while processes_with(&marker) < 2 {
        assert!(Instant::now() < deadline, "server and grandchild did not both start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    client.close();
    // Grace (0.3 s) + SIGTERM grace (1 s) + SIGKILL to the group, then the leader is reaped.
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    let deadline = Instant::now() + Duration::from_secs(3);
    while processes_with(&marker) > 0 {
        assert!(Instant::now() < deadline, "processes survived close: {}", processes_with(&marker));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn concurrent_connects_of_one_server_coalesce() {
    let proj = tmp_dir("coalesce");
    std::fs::create_dir_all(proj.join("mcp_servers")).unwrap();
    let log = proj.join("log.txt");
    let script = root().join("tests/fixtures/mcp/misbehaving.py");
    let cfg = json!({"one": {"command": python(), "args": [script.display().to_string(), "ok"],
                             "env": {"MCP_FIXTURE_LOG": log.display().to_string()}}});
    std::fs::write(proj.join("mcp_servers/mcp_config.json"), cfg.to_string()).unwrap();
    let mgr = Arc::new(McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: proj.join("data") },
        Catalog::load(Some(&proj), &proj.join("data")).unwrap(),
    ));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let m = mgr.clone();
            std::thread::spawn(move || m.connect_server("one").map(|t| t.len()))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), Ok(1));
    }
    let inits = std::fs::read_to_string(&log).unwrap().lines().filter(|l| *l == "initialize").count();
    assert_eq!(inits, 1, "one connection for four concurrent connects");
    mgr.shutdown();
    std::fs::remove_dir_all(proj).unwrap();
}

#[test]
fn user_server_lifecycle_against_a_live_sse_server() {
    let js = everything_js();
    let (_server, port) = spawn_listening(|port| everything(&js, "sse", port));
    let data = tmp_dir("user-sse");
    let mgr = McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: data.clone() },
        Catalog::load(None, &data).unwrap(),
    );
    let purged: Arc<Mutex<Vec<String>>> = Arc::default();
    let p = purged.clone();
    mgr.set_purge_hook(move |names| p.lock().unwrap().extend(names.iter().cloned()));
    let url = format!("http://127.0.0.1:{port}/sse");
    let body = json!({"display_name": "Everything", "url": url, "headers": {"X-Api-Key": "abc-secret-value"}});
    mgr.create("everything", entry(body)).unwrap();
    let dto = wire(mgr.connect("everything").unwrap());
    assert_eq!((dto["status"].clone(), dto["tool_count"].clone()), (json!("connected"), json!(13)), "{dto}");
    let cache = cashcode::mcp::cache::cache_path(&data, "everything");
    assert!(cache.is_file());
    let cached: Value = serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
    assert_eq!(cached["tools"].as_array().unwrap().len(), 13);
    assert!(!std::fs::read_to_string(&cache).unwrap().contains("abc-secret-value"));
    let r = mgr.call("mcp_everything_echo", &args(json!({"message": "via manager"})), None).unwrap();
    assert_eq!(text_of(&r), "Echo: via manager");

    // Replacing the config closes the connection, purges activations, deletes the cache.
    let upd = json!({"display_name": "Everything 2", "url": url, "headers": {"X-Api-Key": "********"}});
    let dto = wire(mgr.update("everything", entry(upd)).unwrap());
    assert_eq!((dto["status"].clone(), dto["tool_count"].clone()), (json!("disconnected"), json!(0)));
    assert_eq!(purged.lock().unwrap().len(), 13);
    assert!(!cache.exists());
    assert!(mgr.call("mcp_everything_echo", &Map::new(), None).is_err());
    assert_eq!(wire(mgr.connect("everything").unwrap())["status"], "connected");
    mgr.delete("everything").unwrap();
    assert!(!cache.exists());
    assert!(matches!(mgr.dto("everything").unwrap_err(), McpError::NotFound(_)), "404");
    mgr.shutdown();
    std::fs::remove_dir_all(data).unwrap();
}

#[test]
fn a_skill_requiring_an_mcp_server_connects_it_and_activates_its_tools() {
    require_python_sdk();
    let llm = FakeLlm::start();
    let home = tmp_dir("skill-mcp");
    let mut config = cashcode::config::Config::for_home(&home);
    config.project_dir = Some(root());
    let pkg = config.data_dir.join("skills/user/greeter");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("SKILL.md"),
        "---\nname: greeter\ndescription: Greets the user through the MCP test server.\nrequires:\n  mcp_servers: [test_stdio_mcp]\n---\n\nCall mcp_test_stdio_mcp_say_hello and repeat its answer.\n",
    )
    .unwrap();
    let settings = config.llm_settings_path();
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(
        &settings,
        json!({"version": 2, "openai_compatible": {"base_url": llm.url, "api_key": "sk-test-key-123456"},
               "ollama": {"base_url": ""}})
        .to_string(),
    )
    .unwrap();
    let later = config.data_dir.join("skills/user/later");
    std::fs::create_dir_all(&later).unwrap();
    std::fs::write(
        later.join("SKILL.md"),
        "---\nname: later\ndescription: Needs a server configured later.\nrequires:\n  mcp_servers: [weather]\n---\n\nUse the weather server.\n",
    )
    .unwrap();
    let server = cashcode::app::start(config.clone()).unwrap();
    // Configuring the missing server refreshes the skill catalog.
    let (_, rec) = call(&server.api(), "GET", "/api/skills/later", Value::Null);
    assert_eq!(rec["availability"], "missing_dependency", "{rec}");
    let body = json!({"name": "weather", "display_name": "Weather", "url": "http://127.0.0.1:9/sse"});
    assert_eq!(call(&server.api(), "POST", "/api/mcp/servers", body).0, 201);
    let (_, rec) = call(&server.api(), "GET", "/api/skills/later", Value::Null);
    assert_eq!(rec["availability"], "available", "{rec}");
    // The skill's MCP dependency is configured, so it is available.
    let (status, greeter) = call(&server.api(), "GET", "/api/skills/greeter", Value::Null);
    assert_eq!((status, greeter["availability"].clone()), (200, json!("available")), "{greeter}");

    llm.push(vec![
        Step::Call("skill_load", json!({"name": "greeter"})),
        Step::Call("mcp_test_stdio_mcp_say_hello", json!({})),
        Step::Text("Hello, Cash"),
    ]);
    let events = run_turn(&server, "skill-chat", "greet me");
    assert_eq!(events.last().unwrap()["event"], "done", "{events:?}");
    let results = results_of(&events);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[1], ("mcp_test_stdio_mcp_say_hello".to_string(), "Hello, Cash".to_string()));
    server.stop();
    std::fs::remove_dir_all(home).unwrap();
}

/// A tiny_http server answering every request with `status`, `content_type` and `body`.
fn canned_server(status: u16, content_type: &'static str, body: &'static str) -> (u16, Arc<tiny_http::Server>) {
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
    let port = server.server_addr().to_ip().unwrap().port();
    let s = server.clone();
    std::thread::spawn(move || {
        for rq in s.incoming_requests() {
            let h = tiny_http::Header::from_bytes("Content-Type", content_type).unwrap();
            let _ = rq.respond(tiny_http::Response::from_string(body).with_status_code(status).with_header(h));
        }
    });
    (port, server)
}

#[test]
fn http_servers_that_hang_or_answer_garbage_fail_cleanly() {
    let cfg = ClientConfig { connect_timeout: Duration::from_secs(1), ..fast_cfg() };
    let headers = BTreeMap::from([("Authorization".to_string(), "Bearer hdr-secret-777".to_string())]);
    let spec = |kind: &str, url: String| {
        let h = HttpSpec { url, headers: headers.clone() };
        if kind == "sse" {
            TransportSpec::Sse(h)
        } else {
            TransportSpec::StreamableHttp(h)
        }
    };

    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().take(8).flatten() {
            held.push(s);
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    for (kind, path) in [("sse", "sse"), ("http", "mcp")] {
        let started = Instant::now();
        let err =
            Client::connect("hang", &spec(kind, format!("http://127.0.0.1:{port}/{path}")), cfg.clone()).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(4), "{kind}: {:?}", started.elapsed());
        assert!(matches!(err, Error::Timeout { .. } | Error::Connect(_)), "{kind}: {err:?}");
        assert!(err.retryable());
    }

    // Answers HTML instead of MCP.
    let (port, html) = canned_server(200, "text/html", "<html>hello</html>");
    let err = Client::connect("html", &spec("sse", format!("http://127.0.0.1:{port}/sse")), cfg.clone()).unwrap_err();
    assert_eq!(err.to_string(), "MCP protocol error: expected an event stream, got content type 'text/html'");
    let err = Client::connect("html", &spec("http", format!("http://127.0.0.1:{port}/mcp")), cfg.clone()).unwrap_err();
    assert_eq!(err.to_string(), "MCP protocol error: unexpected reply content type 'text/html'");
    html.unblock();

    // An error page that echoes the credential is redacted.
    let (port, echo) = canned_server(500, "text/plain", "denied for Bearer hdr-secret-777");
    for (kind, path) in [("sse", "sse"), ("http", "mcp")] {
        let err =
            Client::connect("echo", &spec(kind, format!("http://127.0.0.1:{port}/{path}")), cfg.clone()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Status { status: 500, .. }), "{kind}: {err:?}");
        assert!(!msg.contains("hdr-secret-777"), "{kind}: {msg}");
    }
    echo.unblock();
}

// ------------------------------------------------------------------------------------------
// One reply with tool_search + mcp_prepare + the call; on-demand reconnects

/// In one model reply the model searches, prepares the server and calls the tool prepare just
/// activated: the calls run in order and the third succeeds, for Python SDK and
/// server-everything servers over stdio (`node` and a venv interpreter in the project
/// catalog), legacy SSE and Streamable HTTP.
#[test]
fn one_reply_searches_prepares_and_calls_over_every_transport() {
    require_python_sdk();
    let js = everything_js();
    let (_sse, sse_port) = spawn_listening(|port| everything(&js, "sse", port));
    let (_http, http_port) = spawn_listening(|port| everything(&js, "streamableHttp", port));
    let project = tmp_dir("one-reply-proj");
    std::fs::create_dir_all(project.join("mcp_servers")).unwrap();
    let hello = root().join("mcp_servers/test_stdio_mcp/server.py");
    let cfg = json!({
        "hello": {"command": python(), "args": [hello.display().to_string()]},
        "ev_stdio": {"command": "node", "args": [js.display().to_string()]},
    });
    std::fs::write(project.join("mcp_servers/mcp_config.json"), cfg.to_string()).unwrap();
    let llm = FakeLlm::start();
    let (server, _config, home) = start_server("one-reply", &project, &llm);
    let api = server.api();
    let (s, b) = call(
        &api,
        "POST",
        "/api/mcp/servers",
        json!({"name": "ev_sse", "display_name": "Everything SSE",
        "url": format!("http://127.0.0.1:{sse_port}/sse")}),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(
        &api,
        "POST",
        "/api/mcp/servers",
        json!({"name": "ev_http", "type": "streamable_http",
        "display_name": "Everything HTTP", "url": format!("http://127.0.0.1:{http_port}/mcp")}),
    );
    assert_eq!(s, 201, "{b}");

    let cases: [(&str, &str, Value, &str); 4] = [
        ("hello", "mcp_hello_say_hello", json!({}), "Hello, Cash"),
        ("ev_stdio", "mcp_ev_stdio_echo", json!({"message": "over stdio"}), "Echo: over stdio"),
        ("ev_sse", "mcp_ev_sse_echo", json!({"message": "over sse"}), "Echo: over sse"),
        ("ev_http", "mcp_ev_http_echo", json!({"message": "over http"}), "Echo: over http"),
    ];
    for (server_name, tool, a, want) in cases {
        let chat = format!("one-reply-{server_name}");
        llm.push(vec![
            Step::Calls(vec![
                ("tool_search", json!({"query": "echo hello"})),
                ("mcp_prepare", json!({"server_name": server_name})),
                (tool, a),
            ]),
            Step::Text("done"),
        ]);
        let before = llm.requests().len();
        let events = run_turn(&server, &chat, "use the tool");
        assert_eq!(events.last().unwrap()["event"], "done", "{events:?}");
        let results = results_of(&events);
        let names: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["tool_search", "mcp_prepare", tool], "{results:?}");
        assert!(results[1].1.starts_with(&format!("MCP server '{server_name}' connected. Activated ")), "{results:?}");
        assert_eq!(results[2].1, want, "{server_name}: {results:?}");
        let reqs = llm.requests();
        assert!(!tool_names(&reqs[before]).iter().any(|n| n == tool), "{tool} was hidden before the reply");
        assert!(tool_names(&reqs[before + 1]).iter().any(|n| n == tool), "{tool} is visible after it");
    }
    server.stop();
    std::fs::remove_dir_all(home).unwrap();
    std::fs::remove_dir_all(project).unwrap();
}

/// A pinned.py stdio catalog in a fresh project: (manager, start log, pid file, desc file).
fn pinned_manager(tag: &str) -> (Arc<McpManager>, PathBuf, PathBuf, PathBuf, PathBuf) {
    let proj = tmp_dir(tag);
    std::fs::create_dir_all(proj.join("mcp_servers")).unwrap();
    let (log, pid, desc) = (proj.join("starts.txt"), proj.join("pid.txt"), proj.join("desc.txt"));
    std::fs::write(&desc, "Looks up the weather for a city.").unwrap();
    let script = root().join("tests/fixtures/mcp/pinned.py");
    let cfg = json!({"pinned": {"command": python(), "args": [script.display().to_string()],
        "env": {"PIN_LOG": log.display().to_string(), "PIN_PID_FILE": pid.display().to_string(),
                "PIN_DESC_FILE": desc.display().to_string()}}});
    std::fs::write(proj.join("mcp_servers/mcp_config.json"), cfg.to_string()).unwrap();
    let mgr = Arc::new(McpManager::new(
        ManagerConfig { client: fast_cfg(), data_dir: proj.join("data") },
        Catalog::load(Some(&proj), &proj.join("data")).unwrap(),
    ));
    (mgr, proj, log, pid, desc)
}

fn starts(log: &Path) -> usize {
    std::fs::read_to_string(log).map(|t| t.lines().count()).unwrap_or(0)
}

fn kill_pid_file(mgr: &McpManager, pid: &Path) {
    let pid: i32 = std::fs::read_to_string(pid).unwrap().trim().parse().unwrap();
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while mgr.is_connected("pinned") {
        assert!(Instant::now() < deadline, "the manager did not notice the killed child");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Four chats call an activated tool of a crashed server at once: the server is started
/// once, every call runs. When it cannot start, the four share one failed attempt, each
/// gets the status line, and a cancelled caller stops waiting at once.
#[test]
fn concurrent_on_demand_reconnects_of_one_server_connect_once() {
    require_python_sdk();
    let (mgr, proj, log, pid, desc) = pinned_manager("ondemand");
    let ext = McpExtension::new(mgr.clone());
    let mut meta = Map::new();
    meta.insert("activated_tools".into(), json!({"mcp_pinned_lookup": 1.0}));
    // Never connected, no cache: nothing to offer yet.
    assert_eq!(names_of(&visible(&ext, &turn_ctx(&proj, meta.clone()))), vec!["tool_search", "mcp_prepare"]);
    assert_eq!(mgr.connect_server("pinned").unwrap().len(), 2);
    kill_pid_file(&mgr, &pid);
    assert_eq!(starts(&log), 1);

    let run_all = |n: usize| -> Vec<cashcode::tool::ToolOutput> {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (ext, proj, meta) = (McpExtension::new(mgr.clone()), proj.clone(), meta.clone());
                std::thread::spawn(move || {
                    let ctx = turn_ctx(&proj, meta);
                    let tools = visible(&ext, &ctx);
                    run_tool(&tools, "mcp_pinned_lookup", json!({"city": format!("c{i}")}), &ctx)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    };
    let outs = run_all(4);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!((o.for_model.as_str(), o.failed), (format!("Weather in c{i}: sunny").as_str(), false));
    }
    assert_eq!(starts(&log), 2, "one reconnect for four concurrent calls");

    kill_pid_file(&mgr, &pid);
    std::fs::remove_file(&desc).unwrap();
    let outs = run_all(4);
    for o in &outs {
        assert!(o.failed);
        assert!(
            o.for_model.starts_with(
                "Error: MCP server 'pinned' of tool 'mcp_pinned_lookup' is not connected and reconnecting failed: "
            ),
            "{}",
            o.for_model
        );
    }
    assert_eq!(starts(&log), 3, "one failed attempt shared by four calls");

    // A cancelled turn does not wait for the connect.
    std::fs::write(&desc, "Looks up the weather for a city.").unwrap();
    let ctx = turn_ctx(&proj, meta.clone());
    let tools = visible(&ext, &ctx);
    ctx.cancel.cancel();
    let started = Instant::now();
    let out = run_tool(&tools, "mcp_pinned_lookup", json!({"city": "x"}), &ctx);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(out.for_model, "Error: MCP tool 'mcp_pinned_lookup' was cancelled");
    mgr.shutdown();
    std::fs::remove_dir_all(proj).unwrap();
}
