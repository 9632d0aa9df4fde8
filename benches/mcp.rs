//! MCP figures: `tool_search` latency over 10,000 indexed tools (p50/p99), the stdio
//! `tools/call` round trip to the Python SDK test server, and connect time (handshake +
//! `tools/list`) per transport. Run with `cargo bench --bench mcp` (release build).
//! Parts whose runtime is missing (Python SDK, Node packages) print why they were not measured.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cashcode::mcp::client::{Client, ClientConfig};
use cashcode::mcp::search::{self, DocKind, SearchDoc, SearchIndex};
use cashcode::mcp::transport::{HttpSpec, StdioSpec, TransportSpec};
use serde_json::Map;

const WORDS: &[&str] = &[
    "weather",
    "forecast",
    "github",
    "issue",
    "pull",
    "request",
    "file",
    "read",
    "write",
    "search",
    "query",
    "database",
    "table",
    "row",
    "email",
    "send",
    "calendar",
    "event",
    "create",
    "delete",
    "update",
    "list",
    "image",
    "resize",
    "convert",
    "translate",
    "text",
    "summary",
    "stock",
    "price",
    "map",
    "route",
    "geocode",
    "slack",
    "message",
    "channel",
    "invoice",
    "payment",
    "user",
    "account",
    "deploy",
    "build",
    "log",
    "metric",
];
const CJK: &[&str] = &["天气", "查询", "文件", "搜索", "邮件", "日历", "图片", "翻译", "地图", "股票"];

/// Deterministic xorshift, so runs are comparable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1000.0,
        percentile(&samples, 0.99).as_secs_f64() * 1000.0,
        samples[samples.len() - 1].as_secs_f64() * 1000.0
    );
}

fn bench_search(servers: usize, queries: usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut docs = Vec::with_capacity(10_000);
    for s in 0..servers {
        let server = format!("server{s}");
        let display = format!("{} {}", rng.pick(WORDS), rng.pick(WORDS));
        let sdesc = format!("Tools for {} and {} {}", rng.pick(WORDS), rng.pick(WORDS), rng.pick(CJK));
        for t in 0..50 {
            let tool = format!("{}{}{t}", rng.pick(WORDS), capitalise(rng.pick(WORDS)));
            let desc = (0..12).map(|_| rng.pick(WORDS)).collect::<Vec<_>>().join(" ") + " " + rng.pick(CJK);
            let kind =
                if t % 2 == 0 { DocKind::Live { wrapped: format!("mcp_{server}_{tool}") } } else { DocKind::Cached };
            docs.push(SearchDoc::tool(&server, &display, &sdesc, &tool, &desc, kind));
        }
    }
    let started = Instant::now();
    let index = SearchIndex::build(docs);
    println!("tool_search index build over {} tools: {:.1} ms", index.len(), started.elapsed().as_secs_f64() * 1000.0);
    let queries: Vec<String> = (0..queries)
        .map(|i| match i % 4 {
            0 => rng.pick(WORDS).to_string(),
            1 => format!("{} {}", rng.pick(WORDS), rng.pick(WORDS)),
            2 => format!("{} {} {}", rng.pick(WORDS), rng.pick(CJK), rng.pick(WORDS)),
            _ => format!("{}{}", rng.pick(WORDS), capitalise(rng.pick(WORDS))),
        })
        .collect();
    let mut samples = Vec::with_capacity(queries.len());
    let mut hits = 0;
    for q in &queries {
        let t = Instant::now();
        let found = index.search(q, search::DEFAULT_LIMIT);
        let text = search::render(q, &found, &[]);
        samples.push(t.elapsed());
        hits += found.len() + usize::from(text.is_empty());
    }
    report(&format!("tool_search query over {} tools (search + render, limit 8)", index.len()), samples);
    println!("  ({hits} hits returned in total)");
}

fn capitalise(w: &str) -> String {
    let mut c = w.chars();
    c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python_with_sdk() -> Option<String> {
    ["python3", "python"].into_iter().map(str::to_string).find(|p| {
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
    report(&format!("connect + tools/list, {label}"), samples);
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
    report("stdio tools/call round trip (Python SDK say_hello)", samples);
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
        bench_search(200, 1000);
        bench_servers();
    } else {
        bench_search(20, 20);
    }
}
