//! MCP figures: `tool_search` latency over 10,000 indexed tools (p50/p99), the stdio
//! `tools/call` round trip to the Python SDK test server, and connect time (handshake +
//! `tools/list`) per transport. Run with `cargo bench --bench mcp` (release build).
//! Parts whose runtime is missing (Python SDK, Node packages) print why they were not measured.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "shared/search.rs"]
mod search;

use cashcode::mcp::client::{Client, ClientConfig};
use cashcode::mcp::transport::{HttpSpec, StdioSpec, TransportSpec};
use serde_json::Map;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The checkout's `.venv` (made by `scripts/setup.sh`) first, then `python3`/`python` on PATH.
fn python_with_sdk() -> Option<String> {
    let venv = cashcode::mcp::catalog::venv_python(&root()).display().to_string();
    [venv, "python3".into(), "python".into()].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import mcp.server.fastmcp"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(mut cmd: Command) -> Proc {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    Proc(cmd.spawn().expect("start server"))
}

fn wait_port(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn connect_times(label: &str, spec: &TransportSpec, n: usize) {
    let mut samples = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        match Client::connect("bench", spec, ClientConfig::default()).and_then(|c| {
            let tools = c.list_tools()?;
            c.close();
            Ok(tools.len())
        }) {
            Ok(_) => samples.push(t.elapsed()),
            Err(e) => {
                println!("{label}: connect failed: {e}");
                return;
            }
        }
    }
    search::report(&format!("connect + tools/list, {label}"), samples);
}

fn bench_servers() {
    let Some(py) = python_with_sdk() else {
        println!("stdio/SSE figures not measured: the Python MCP SDK is missing (pip install -r mcp_servers/requirements.txt)");
        return;
    };
    let stdio = TransportSpec::Stdio(StdioSpec {
        command: py.clone(),
        args: vec![root().join("mcp_servers/test_stdio_mcp/server.py").display().to_string()],
        env: BTreeMap::new(),
        cwd: Some(root()),
        python: None,
    });
    connect_times("stdio (Python SDK)", &stdio, 5);
    let client = Client::connect("bench", &stdio, ClientConfig::default()).expect("stdio server");
    for _ in 0..20 {
        client.call_tool("say_hello", &Map::new(), None).expect("warm-up call");
    }
    let mut samples = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        let r = client.call_tool("say_hello", &Map::new(), None).expect("call");
        samples.push(t.elapsed());
        assert_eq!(r.render(), "Hello, Cash");
    }
    search::report("stdio tools/call round trip (Python SDK say_hello)", samples);
    client.close();

    let mut cmd = Command::new(&py);
    cmd.arg(root().join("mcp_servers/test_sse_mcp/server.py"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut sse = spawn(cmd);
    let mut line = String::new();
    if let Some(out) = sse.0.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let url = line.trim().trim_start_matches("listening on ").to_string();
    let port: u16 = url.rsplit(':').next().unwrap_or("").trim_end_matches("/sse").parse().unwrap_or(0);
    if port != 0 && wait_port(port) {
        connect_times("SSE (Python SDK)", &TransportSpec::Sse(HttpSpec { url, headers: BTreeMap::new() }), 5);
    } else {
        println!("SSE figure not measured: the SDK SSE server did not start");
    }

    let js = root().join("mcp_servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !js.is_file() {
        println!("Streamable HTTP figure not measured: run `npm ci --prefix mcp_servers`");
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
    let mut cmd = Command::new("node");
    cmd.arg(&js).arg("streamableHttp").env("PORT", port.to_string()).stdout(Stdio::null()).stderr(Stdio::null());
    let _http = spawn(cmd);
    if wait_port(port) {
        let spec = TransportSpec::StreamableHttp(HttpSpec {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers: BTreeMap::new(),
        });
        connect_times("Streamable HTTP (server-everything)", &spec, 5);
    } else {
        println!("Streamable HTTP figure not measured: server-everything did not start");
    }
}

fn main() {
    // `cargo bench` passes --bench; under `cargo test --all-targets` run a quick smoke instead.
    if std::env::args().any(|a| a == "--bench") {
        search::bench_tool_search(200, 1000);
        bench_servers();
    } else {
        search::bench_tool_search(20, 20);
    }
}
