//! Secrets proof (issue 7): after a full scenario (LLM key configured, MCP user servers with a
//! secret header pointing at a dead port and at a local server that echoes every request
//! header back in its error body, a chat with tool calls, a 401 provider echoing the key, the
//! settings probes) neither secret appears in any file under the server's home except the two
//! files that must hold them (llm.json, servers.json), nor in any HTTP response, WebSocket
//! event, the server's stdout/stderr, or any request body the model was sent.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;

use crate::common::*;

/// The MCP header value; recognisable and never expected outside servers.json.
const MCP_SECRET: &str = "MCPHDR-Zebra-77665544";

/// A loopback server answering every request with a 500 whose body echoes the request head
/// (headers included), like a badly written proxy would. Runs on its own thread.
/// Returns its port and a count of requests that carried [`MCP_SECRET`].
fn echo_server() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind echo");
    let port = l.local_addr().expect("addr").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut buf = vec![0u8; 16 * 1024];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).to_string();
                if head.contains(MCP_SECRET) {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                let body = format!("echo: {head}");
                let _ = write!(
                    s,
                    "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, hits)
}

/// Every regular file under `dir`, recursively (symlinks are not followed).
fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => files_under(&p, out),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
}

fn assert_clean(what: &str, text: &str) {
    for secret in [KEY_MARKER, MCP_SECRET] {
        if let Some(i) = text.find(secret) {
            let from = text[..i].char_indices().rev().nth(120).map(|(j, _)| j).unwrap_or(0);
            let to = (i + secret.len() + 80).min(text.len());
            panic!("secret {secret:?} leaked into {what}: ...{}...", text.get(from..to).unwrap_or(""));
        }
    }
}

#[test]
fn no_secret_in_any_file_response_event_or_model_request() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let (echo, echo_hits) = echo_server();
    let dead = dead_port();
    let headers = json!({"Authorization": format!("Bearer {MCP_SECRET}"), "X-Api-Key": MCP_SECRET});
    for (name, url) in
        [("deadsrv", format!("http://127.0.0.1:{dead}/sse")), ("echosrv", format!("http://127.0.0.1:{echo}/sse"))]
    {
        let r = server.post(
            "/api/mcp/servers",
            &json!({"name":name,"type":"sse","display_name":name,"description":"secret test","url":url,"headers":headers}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
        let r = server.post(&format!("/api/mcp/servers/{name}/connect"), &json!({}));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["status"], "error", "connecting {name} must fail: {}", r.body);
        assert_eq!(server.get(&format!("/api/mcp/servers/{name}/tools")).status, 200);
        // Updating with the masked value keeps the stored secret.
        let r = server.put(
            &format!("/api/mcp/servers/{name}"),
            &json!({"type":"sse","display_name":name,"url":url,
                    "headers":{"Authorization":"********","X-Api-Key":"********"}}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(server.get("/api/mcp/servers").status, 200);
    assert!(echo_hits.load(Ordering::SeqCst) > 0, "the echo server never saw the secret header");

    // A chat whose model calls MCP and built-in tools, then answers.
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("call_1", "mcp_prepare", &[r#"{"server_name":"echosrv"}"#]),
        ToolCallSpec::new("call_2", "mcp_prepare", &[r#"{"server_name":"deadsrv"}"#]),
        ToolCallSpec::new("call_3", "tool_search", &[r#"{"query":"weather secret"}"#]),
        ToolCallSpec::new("call_4", "write_file", &[r#"{"path":"notes.txt","content":"plain notes"}"#]),
        ToolCallSpec::new("call_5", "save_memory", &[r#"{"content":"User likes tea"}"#]),
    ]));
    fake.push(Reply::text(&["All done."]));
    ws.message(&chat, "use your tools", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:?}");

    // A provider that answers 401 and echoes the key (it never sees the MCP secret).
    let echo_body =
        format!(r#"{{"error":{{"message":"Incorrect API key provided: {TEST_KEY}","type":"invalid_request_error"}}}}"#);
    fake.push(Reply::status(401, &echo_body));
    ws.message(&chat, "second turn", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "error", "{events:?}");
    fake.set_models("/models", Reply::status(401, &echo_body));
    server.get("/api/settings/llm/models");
    server.post(
        "/api/settings/llm/test",
        &json!({"provider":"openai_compatible","openai_compatible":{"base_url":fake.base()},"ollama":{"base_url":""}}),
    );
    server.get("/api/settings/llm");
    // A third, good turn, and the reads a client makes.
    fake.push(Reply::text(&["Fine again."]));
    ws.message(&chat, "third turn", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("events")["event"], "done");
    server.get("/api/sessions");
    server.get(&format!("/api/sessions/{chat}/messages"));
    server.get("/api/skills");

    // The two files that must hold the secrets do (so this test can fail).
    let llm_json = server.llm_json();
    let servers_json = server.home.join("data/mcp/servers.json");
    assert!(std::fs::read_to_string(&llm_json).expect("llm.json").contains(KEY_MARKER));
    assert!(std::fs::read_to_string(&servers_json).expect("servers.json").contains(MCP_SECRET));

    // Let buffered log lines land.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut files = Vec::new();
    files_under(&server.home, &mut files);
    let scanned: Vec<_> = files.iter().filter(|p| **p != llm_json && **p != servers_json).collect();
    for dir in ["memory", "logs", "workspace"] {
        assert!(
            scanned.iter().any(|p| p.starts_with(server.home.join(dir))),
            "expected the scenario to write under {dir}/: {files:?}"
        );
    }
    for p in &scanned {
        let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        assert_clean(&p.display().to_string(), &String::from_utf8_lossy(&bytes));
    }
    assert_clean("HTTP responses", &server.http_seen());
    assert_clean("WebSocket events", &serde_json::to_string(&ws.log).expect("json"));
    assert_clean("stderr", &server.stderr_text());
    assert_clean("stdout", &server.stdout_text());
    for r in fake.requests() {
        assert_clean(&format!("model request body {}", r.path), &r.raw);
    }
    // The tool results the model saw name the failure without the header value.
    let reqs = fake.chat_requests();
    let second = convo(&reqs[1].body);
    let prepared = second.iter().find(|(role, c)| role == "tool" && c.contains("echosrv")).expect("mcp_prepare result");
    assert!(prepared.1.contains("failed"), "{prepared:?}");
    assert!(servers_json.starts_with(server.home.join("data")), "servers.json under data/");
}
