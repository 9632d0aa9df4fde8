//! `cargo bench --bench acp`: what the editor bridge (`cashcode acp`, docs/acp.md) adds,
//! against the fake LLM with zero delay:
//! - the time from `initialize` to the first `agent_message_chunk` of a new session's first
//!   prompt (start-up of the bridge excluded: it is already running);
//! - per prompt of CHUNKS streamed chunks, the time from the request to its response through
//!   the bridge, against the same turn straight over the WebSocket, and their difference per
//!   chunk;
//! - the bridge's RSS after the runs.
//!
//! Threads: the main thread drives both paths one after the other; the fake LLM has its own.
//! Without `--bench` (the test command's smoke run) every loop runs once.

#![allow(unreachable_pub, clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use common::stats::{median, ms, rss};
use common::{FakeLlm, Reply, TestServer, WsClient};
use serde_json::{json, Value};

const CHUNKS: usize = 50;

struct Bridge {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Bridge {
    fn start(server: &TestServer) -> Bridge {
        let bin = std::env::var("CASHCODE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cashcode").to_string());
        let mut child = Command::new(bin)
            .arg("acp")
            .args(["--home", &server.home.display().to_string()])
            .args(["--port", &server.http_port.to_string(), "--ws-port", &server.ws_port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the bridge");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Bridge { child, stdin, stdout, next: 0 }
    }

    fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}).to_string();
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.next
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// Reads until the answer to `id`; returns it and when the first message chunk came.
    fn until(&mut self, id: u64, sent: Instant) -> (Value, Option<f64>) {
        let mut first = None;
        loop {
            let v = self.read();
            if first.is_none() && v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
                first = Some(ms(sent.elapsed()));
            }
            if v["id"] == id {
                return (v, first);
            }
        }
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let runs = if bench { 30 } else { 1 };
    let fake = FakeLlm::start();
    let server = TestServer::start();
    server.configure_llm(&fake);
    let ws_dir = server.home.join("workspace");
    std::fs::create_dir_all(&ws_dir).unwrap();
    let cwd = ws_dir.canonicalize().unwrap().display().to_string();
    let pieces: Vec<String> = (0..CHUNKS).map(|i| format!("w{i} ")).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();

    let mut bridge = Bridge::start(&server);
    let mut to_first = Vec::new();
    let mut through_bridge = Vec::new();
    let mut over_ws = Vec::new();
    for _ in 0..runs {
        // A new session's first answer, from `initialize` on.
        fake.push(Reply::text(&pieces));
        let t0 = Instant::now();
        let id = bridge.send("initialize", json!({"protocolVersion": 1}));
        bridge.until(id, t0);
        let id = bridge.send("session/new", json!({"cwd": cwd, "mcpServers": []}));
        let session = bridge.until(id, t0).0["result"]["sessionId"].as_str().unwrap().to_string();
        let id =
            bridge.send("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}));
        let (answer, first) = bridge.until(id, t0);
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
        to_first.push(first.expect("a chunk"));

        // The same turn through the bridge and straight over the WebSocket.
        fake.push(Reply::text(&pieces));
        let t = Instant::now();
        let id =
            bridge.send("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": "again"}]}));
        bridge.until(id, t);
        through_bridge.push(ms(t.elapsed()));

        fake.push(Reply::text(&pieces));
        let mut ws = WsClient::connect(&server);
        let chat = ws.chat_id.clone();
        let t = Instant::now();
        ws.message(&chat, "again", "openai_compatible");
        while ws.recv()["event"] != "done" {}
        over_ws.push(ms(t.elapsed()));
        ws.drop_socket();
    }
    let (rss_kib, peak_kib) = rss(bridge.child.id());
    drop(bridge.stdin);
    let _ = bridge.child.wait();

    let (b, w) = (median(through_bridge), median(over_ws));
    println!("ACP bridge, {runs} runs, medians ({CHUNKS} chunks a prompt)");
    println!("  initialize -> first agent_message_chunk (new session) {:>8.2} ms", median(to_first));
    println!("  prompt -> response through the bridge                 {b:>8.2} ms");
    println!("  message -> done straight over the WebSocket           {w:>8.2} ms");
    println!("  bridge overhead per chunk                             {:>8.3} ms", (b - w) / CHUNKS as f64);
    println!(
        "  bridge RSS (peak)                                     {:>8.1} MiB ({:.1})",
        rss_kib as f64 / 1024.0,
        peak_kib as f64 / 1024.0
    );
}
