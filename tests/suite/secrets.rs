//! Secrets proof: after a full scenario (LLM key configured, MCP user servers with a
//! secret header pointing at a dead port and at a local server that echoes every request
//! header back in its error body, a chat with tool calls, a 401 provider echoing the key, the
//! settings probes) neither secret appears in any file under the server's home except the two
//! files that must hold them (llm.json, servers.json), nor in any HTTP response, WebSocket
//! event, the server's stdout/stderr, or any request body the model was sent.
//!
//! Then the secrets a tool could fetch itself: the server's environment (`/proc/$PPID/environ`,
//! which the sandbox refuses to a command, read here by the test; `env`; with and without the
//! start-up re-exec) holds none of the secret variables it was
//! started with, while the token and the legacy key still work; tool results (commands
//! printing llm.json or a token from a file, an MCP tool echoing its header) are redacted of
//! every known secret, also after the key changed; and the token file with its warnings.

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

    // The last request's log line is written after its response: wait for it to land.
    server.wait_log(r#"method="GET" route="/api/skills""#, 1);
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

// ---------------------------------------------------------------------------------------------
// Secrets in the server's environment, redaction of tool results, the token file.

/// The token these tests start the server with (long enough not to draw the warning).
const ENV_TOKEN: &str = "tok-EnvSecret-0123456789abcdef";
/// A legacy key, migrated into llm.json at start-up.
const ENV_DEEPSEEK: &str = "sk-deepseek-EnvSecret-5566";
/// A variable the server does not use but must not hand out either.
const ENV_OPENAI: &str = "sk-openai-EnvSecret-7788";

fn bearer() -> String {
    format!("Bearer {ENV_TOKEN}")
}

fn authed(server: &TestServer, method: &str, path: &str, body: Option<&serde_json::Value>) -> HttpResp {
    let text = body.map(|b| b.to_string());
    server.request(method, path, &[("Authorization", &bearer())], text.as_deref())
}

fn authed_ws(server: &TestServer) -> WsClient {
    match WsClient::handshake_with(server.ws_port, &[("Authorization", &bearer())]) {
        crate::common::ws::Handshake::Accepted(c) => *c,
        crate::common::ws::Handshake::Refused(code) => panic!("ws handshake refused with {code}"),
    }
}

/// The server's environment as `/proc/<pid>/environ` shows it (what a tool's
/// `cat /proc/$PPID/environ` reads), one entry per line.
fn proc_environ(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).expect("read environ");
    String::from_utf8_lossy(&raw).replace('\0', "\n")
}

#[track_caller]
fn assert_no_env_secret(what: &str, text: &str) {
    for needle in [ENV_TOKEN, ENV_DEEPSEEK, ENV_OPENAI, "CASHCODE_TOKEN=", "DEEPSEEK_API_KEY=", "OPENAI_API_KEY="] {
        assert!(!text.contains(needle), "{needle:?} in {what}:\n{text}");
    }
}

fn secret_env_server(fake: &FakeLlm, extra: &[(&str, &str)]) -> TestServer {
    let mut b = TestServer::builder()
        .env("CASHCODE_TOKEN", ENV_TOKEN)
        .env("DEEPSEEK_API_KEY", ENV_DEEPSEEK)
        .env("DEEPSEEK_API_BASE", &fake.base())
        .env("OPENAI_API_KEY", ENV_OPENAI);
    for (k, v) in extra {
        b = b.env(k, v);
    }
    b.start()
}

/// The server still uses what it took out of its environment: the token guards the API and
/// the legacy key was migrated into llm.json (and is what the provider gets).
#[track_caller]
fn assert_secrets_still_used(server: &TestServer) {
    assert_eq!(server.get("/api/sessions").status, 401, "the token must still be required");
    assert_eq!(authed(server, "GET", "/api/sessions", None).status, 200);
    let llm = std::fs::read_to_string(server.llm_json()).expect("llm.json migrated from DEEPSEEK_API_KEY");
    assert!(llm.contains(ENV_DEEPSEEK), "{llm}");
}

#[test]
fn tools_cannot_read_the_servers_secret_environment() {
    let fake = FakeLlm::start();
    let server = secret_env_server(&fake, &[]);
    assert_secrets_still_used(&server);
    let environ = proc_environ(server.pid);
    assert!(environ.contains("glibc.malloc.tcache_count=0"), "the server re-executed itself: {environ}");
    assert_no_env_secret("/proc/<server>/environ", &environ);
    // The hand-over descriptor was closed before anything else ran.
    for fd in std::fs::read_dir(format!("/proc/{}/fd", server.pid)).expect("fd dir").flatten() {
        let target = std::fs::read_link(fd.path()).map(|p| p.display().to_string()).unwrap_or_default();
        assert!(!target.contains("cashcode-secrets"), "fd {:?} -> {target}", fd.file_name());
    }

    let mut ws = authed_ws(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("call_environ", "exec", &[r#"{"command":"cat /proc/$PPID/environ | tr '\\0' '\\n'"}"#]),
        ToolCallSpec::new("call_env", "exec", &[r#"{"command":"env"}"#]),
    ]));
    fake.push(Reply::text(&["looked"]));
    ws.message(&chat, "show me the environment", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:?}");

    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].header("authorization"), Some(format!("Bearer {ENV_DEEPSEEK}").as_str()), "migrated key used");
    let results: Vec<String> =
        convo(&reqs[1].body).into_iter().filter(|(role, _)| role == "tool").map(|(_, c)| c).collect();
    assert_eq!(results.len(), 2, "{results:?}");
    // The sandbox refuses the read of the server's environment block (SECURITY.md "Sandbox");
    // the command's own environment is there, without the secrets.
    assert!(results[0].contains("Permission denied") && !results[0].contains("CASHCODE_HOME="), "{}", results[0]);
    assert!(results[1].contains("PATH=") && results[1].contains("exit code: 0"), "{}", results[1]);
    for r in &results {
        assert!(!r.contains("[REDACTED]"), "hidden by redaction, not absent: {r}");
        assert_no_env_secret("a tool result", r);
    }
    assert_no_env_secret("WebSocket events", &serde_json::to_string(&ws.log).expect("json"));
    let history = std::fs::read_to_string(server.chat_dir(&chat).join("history.jsonl")).expect("history");
    assert!(history.contains("PATH="), "{history}");
    assert_no_env_secret("history.jsonl", &history);
}

/// With the re-exec disabled by the caller (the marker already set), the secrets are wiped from
/// the original environment block in place.
#[test]
fn without_the_re_exec_the_environment_block_is_wiped_in_place() {
    let fake = FakeLlm::start();
    let server = secret_env_server(&fake, &[("CASHCODE_MALLOC_TUNED", "-")]);
    let environ = proc_environ(server.pid);
    assert!(!environ.contains("tcache_count"), "the re-exec should have been skipped: {environ}");
    assert!(environ.contains("CASHCODE_HOME="), "{environ}");
    assert_no_env_secret("/proc/<server>/environ", &environ);
    assert_secrets_still_used(&server);
}

/// A loopback Streamable HTTP MCP server (JSON replies) with one tool, `whoami`, that answers
/// with the `X-Api-Key` header it was sent: an MCP tool result carrying a configured secret.
pub fn key_echo_mcp() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind mcp");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut got = Vec::new();
                let mut buf = [0u8; 8192];
                let head_end = loop {
                    if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&got[..head_end]).to_string();
                let header = |name: &str| {
                    head.lines().find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                    })
                };
                let len: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
                while got.len() < head_end + len {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body: serde_json::Value =
                    serde_json::from_slice(&got[head_end..head_end + len]).unwrap_or_default();
                let result = match body["method"].as_str().unwrap_or("") {
                    _ if !head.starts_with("POST") => None,
                    "initialize" => Some(json!({"protocolVersion":"2025-06-18","capabilities":{"tools":{}},
                                                "serverInfo":{"name":"keys","version":"1"}})),
                    "tools/list" => Some(json!({"tools":[{"name":"whoami","description":"Tells you your API key.",
                                                "inputSchema":{"type":"object","properties":{}}}]})),
                    "tools/call" => Some(json!({"content":[{"type":"text",
                        "text":format!("you called with key {}", header("x-api-key").unwrap_or_default())}]})),
                    _ => None,
                };
                let reply = match (result, body.get("id")) {
                    (Some(r), Some(id)) => {
                        let text = json!({"jsonrpc":"2.0","id":id,"result":r}).to_string();
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                            text.len()
                        )
                    }
                    _ if head.starts_with("POST") => {
                        "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
                    }
                    _ => {
                        "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
                    }
                };
                let _ = s.write_all(reply.as_bytes());
            });
        }
    });
    port
}

/// Every projection of every tool result is cleaned of the known secret values: the LLM key
/// (also after it changes at runtime), the token and an MCP header value, whether a command
/// printed them from a file or an MCP tool echoed them. Nothing of them reaches the events,
/// any file under memory/ or logs/, or the next model request.
#[test]
fn tool_results_are_redacted_of_known_secrets() {
    const NEW_KEY: &str = "sk-rotated-NEWKEY-998877";
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_TOKEN", ENV_TOKEN).start();
    let r = authed(&server, "PUT", "/api/settings/llm", Some(&llm_body(&fake.base(), &fake.base())));
    assert_eq!(r.status, 200, "{}", r.body);
    let mcp = key_echo_mcp();
    let r = authed(
        &server,
        "POST",
        "/api/mcp/servers",
        Some(&json!({"name":"keysrv","type":"streamable_http","display_name":"keys","description":"echoes keys",
                     "url":format!("http://127.0.0.1:{mcp}/mcp"),"headers":{"X-Api-Key":MCP_SECRET}})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    std::fs::write(server.home.join("workspace/notes.txt"), format!("token={ENV_TOKEN}\n")).expect("notes");
    // The sandbox keeps commands out of the config directory: the owner copied the file into
    // the workspace, where a command prints it.
    let llm = server.home.join("workspace/llm.json");
    std::fs::copy(server.llm_json(), &llm).expect("copy llm.json");
    let llm = llm.display().to_string();

    let mut ws = authed_ws(&server);
    let chat = ws.chat_id.clone();
    let cat = json!({"command": format!("cat {llm}")}).to_string();
    let bare = json!({"command": format!("sed -n 's/.*\"api_key\": \"\\(.*\\)\".*/\\1/p' {llm}")}).to_string();
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("call_cat", "exec", &[&cat]),
        ToolCallSpec::new("call_bare", "exec", &[&bare]),
        ToolCallSpec::new("call_notes", "read_file", &[r#"{"path":"notes.txt"}"#]),
        ToolCallSpec::new("call_prep", "mcp_prepare", &[r#"{"server_name":"keysrv"}"#]),
        ToolCallSpec::new("call_mem", "save_memory", &[r#"{"content":"User likes tea"}"#]),
    ]));
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_who", "mcp_keysrv_whoami", &["{}"])]));
    fake.push(Reply::text(&["All done."]));
    ws.message(&chat, "read the files", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:?}");

    // The key changes at runtime; the next leak of the new one is redacted too.
    let body =
        json!({"openai_compatible":{"base_url":fake.base(),"api_key":NEW_KEY},"ollama":{"base_url":fake.base()}});
    assert_eq!(authed(&server, "PUT", "/api/settings/llm", Some(&body)).status, 200);
    std::fs::copy(server.llm_json(), &llm).expect("copy llm.json");
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_cat2", "exec", &[&cat])]));
    fake.push(Reply::text(&["Again."]));
    ws.message(&chat, "and again", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("events")["event"], "done");

    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 5);
    let tool = |req: usize, id: &str| -> String {
        req_messages(&reqs[req].body)
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_else(|| panic!("no tool result {id} in request {req}"))
            .to_string()
    };
    // The leaks happened, and were cut out: what is left shows where the secret was.
    assert!(tool(1, "call_cat").contains(r#""api_key": "[REDACTED]""#), "{}", tool(1, "call_cat"));
    assert!(tool(1, "call_bare").ends_with("exit code: 0\n\n[REDACTED]"), "{}", tool(1, "call_bare"));
    assert!(tool(1, "call_notes").contains("token=[REDACTED]"), "{}", tool(1, "call_notes"));
    assert!(tool(2, "call_who").contains("you called with key [REDACTED]"), "{}", tool(2, "call_who"));
    assert!(tool(4, "call_cat2").contains(r#""api_key": "[REDACTED]""#), "{}", tool(4, "call_cat2"));

    let secrets = [KEY_MARKER, NEW_KEY, ENV_TOKEN, MCP_SECRET];
    let check = |what: &str, text: &str| {
        for s in secrets {
            assert!(!text.contains(s), "{s:?} leaked into {what}");
        }
    };
    check("WebSocket events", &serde_json::to_string(&ws.log).expect("json"));
    for r in fake.requests() {
        check(&format!("model request {}", r.path), &r.raw);
    }
    // A turn writes its log lines and history before its `done`: both turns are on disk.
    server.wait_log(&format!("event=turn.completed chat_id={chat}"), 2);
    let mut files = Vec::new();
    files_under(&server.home.join("memory"), &mut files);
    files_under(&server.home.join("logs"), &mut files);
    assert!(files.iter().any(|p| p.ends_with("history.jsonl")) && files.iter().any(|p| p.ends_with("cashcode.log")));
    for p in &files {
        check(&p.display().to_string(), &String::from_utf8_lossy(&std::fs::read(p).expect("read")));
    }
    check("stderr", &server.stderr_text());
}

/// A secret the model writes into a tool call's arguments reaches the tool as written, but the
/// `tool_call` record in history, `?tools=1`, the WebSocket events and the replay to the model
/// carry it redacted; exec output that prints a secret in base64, folded across lines, or split
/// between stdout and stderr is redacted too. Secrets here come by name word (`GITHUB_PAT`) and
/// by a URL password in an ordinary name (`DATABASE_URL`).
#[test]
fn tool_call_arguments_and_encoded_or_split_output_are_redacted() {
    const PAT: &str = "ghp-PatSecret-44556677";
    const DB_PW: &str = "DbPw-Secret-4242";
    let fake = FakeLlm::start();
    let server = TestServer::builder()
        .env("CASHCODE_TOKEN", ENV_TOKEN)
        .env("GITHUB_PAT", PAT)
        .env("DATABASE_URL", &format!("postgres://app:{DB_PW}@db/app"))
        .start();
    let r = authed(&server, "PUT", "/api/settings/llm", Some(&llm_body(&fake.base(), &fake.base())));
    assert_eq!(r.status, 200, "{}", r.body);
    let mut ws = authed_ws(&server);
    let chat = ws.chat_id.clone();
    let write = json!({"command": format!("printf %s '{ENV_TOKEN} {PAT} {DB_PW}' > args.txt")}).to_string();
    let b64 = json!({"command": format!("printf %s 'x{PAT}' | base64")}).to_string();
    let fold = json!({"command": format!("printf %s '{ENV_TOKEN}' | fold -w 7")}).to_string();
    let split = json!({"command": "printf %s \"$(cut -c1-9 args.txt)\"; printf %s \"$(cut -c10-30 args.txt)\" >&2"})
        .to_string();
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("call_write", "exec", &[&write]),
        ToolCallSpec::new("call_b64", "exec", &[&b64]),
        ToolCallSpec::new("call_fold", "exec", &[&fold]),
        ToolCallSpec::new("call_split", "exec", &[&split]),
    ]));
    fake.push(Reply::text(&["Done."]));
    ws.message(&chat, "use the keys", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("events")["event"], "done", "{:?}", ws.log);

    // The tool got the arguments as written.
    let written = std::fs::read_to_string(server.home.join("workspace/args.txt")).expect("args.txt");
    assert_eq!(written, format!("{ENV_TOKEN} {PAT} {DB_PW}"));
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 2);
    let msgs = req_messages(&reqs[1].body);
    let result = |id: &str| {
        msgs.iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_else(|| panic!("no result {id}"))
            .to_string()
    };
    for id in ["call_b64", "call_fold", "call_split"] {
        assert!(result(id).contains("[REDACTED]"), "{id}: {}", result(id));
    }
    let calls = msgs.iter().find(|m| m["tool_calls"].is_array()).expect("tool_calls message").to_string();
    assert!(calls.contains("[REDACTED]"), "{calls}");
    // The `tool_call` events show the cleaned arguments too.
    let shown = ws.log.iter().find(|e| e["call_id"] == "call_write" && e["event"] == "tool_call").expect("tool_call");
    assert!(shown["arguments"]["command"].as_str().is_some_and(|c| c.contains("[REDACTED]")), "{shown}");

    let history = authed(&server, "GET", &format!("/api/sessions/{chat}/messages?tools=1"), None);
    assert_eq!(history.status, 200, "{}", history.body);
    let history = history.body;
    assert!(history.contains("[REDACTED]"), "{history}");
    let b64_inner = "ZWNyZXQtNDQ1"; // in the base64 of "xghp-PatSecret-44556677"
    let check = |what: &str, text: &str| {
        for s in [ENV_TOKEN, PAT, DB_PW, "0123456789", b64_inner] {
            assert!(!text.contains(s), "{s:?} leaked into {what}");
        }
    };
    check("WebSocket events", &serde_json::to_string(&ws.log).expect("json"));
    check("?tools=1", &history);
    for r in fake.requests() {
        check(&format!("model request {}", r.path), &r.raw);
    }
    server.wait_log(&format!("event=turn.completed chat_id={chat}"), 1);
    let mut files = Vec::new();
    files_under(&server.home.join("memory"), &mut files);
    files_under(&server.home.join("logs"), &mut files);
    assert!(files.iter().any(|p| p.ends_with("history.jsonl")));
    for p in &files {
        check(&p.display().to_string(), &String::from_utf8_lossy(&std::fs::read(p).expect("read")));
    }
    check("stderr", &server.stderr_text());
}

/// A key printed spaced out, split by a tab or by a space and CR between stdout and stderr, or
/// straddling exec's 4096-character cut reaches neither the model, the events nor history in
/// any part (the commands read the key from a file, so no argument carries it).
#[test]
fn exec_output_spaced_split_or_cut_is_redacted_end_to_end() {
    const PAT: &str = "ghp-PatSecret-44556677";
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("GITHUB_PAT", PAT).start();
    server.configure_llm(&fake);
    let ws_dir = server.home.join("workspace");
    std::fs::create_dir_all(&ws_dir).expect("workspace");
    std::fs::write(ws_dir.join("k.txt"), PAT).expect("key file");
    let commands = [
        ("call_spaced", "sed 's/./& /g' k.txt"),
        ("call_tab", "printf '%s\\t%s' \"$(cut -c1-9 k.txt)\" \"$(cut -c10- k.txt)\""),
        ("call_streams", "printf '%s \\r' \"$(cut -c1-9 k.txt)\"; cut -c10- k.txt >&2"),
        ("call_cut", "printf '%4090s' '' | tr ' ' x; cat k.txt"),
    ];
    let calls: Vec<ToolCallSpec> = commands
        .iter()
        .map(|(id, cmd)| ToolCallSpec::new(id, "exec", &[&json!({ "command": cmd }).to_string()]))
        .collect();
    fake.push(Reply::tool_calls(&calls));
    fake.push(Reply::text(&["Done."]));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    ws.message(&chat, "print the key", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("events")["event"], "done", "{:?}", ws.log);
    let reqs = fake.chat_requests();
    let msgs = req_messages(&reqs[1].body);
    let fragments = ["PatSecret", "44556677", "ghp-P"];
    for (id, _) in commands {
        let result = msgs
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_else(|| panic!("no result {id}"));
        assert!(result.contains("[RED"), "{id}: {result}");
        let flat: String = result.chars().filter(|c| !c.is_ascii_whitespace() && *c != '\u{b}').collect();
        for f in fragments {
            assert!(!flat.contains(f), "{id}: {f:?} in {result:?}");
        }
    }
    let history = server.get(&format!("/api/sessions/{chat}/messages?tools=1")).body;
    let events = serde_json::to_string(&ws.log).expect("json");
    for (what, text) in [("history", history), ("events", events)] {
        let flat: String = text.replace("\\t", "").replace("\\r", "").replace("\\n", "").replace([' ', '\t'], "");
        for f in fragments {
            assert!(!flat.contains(f), "{f:?} in {what}");
        }
    }
}

/// `CASHCODE_TOKEN_FILE`: the token comes from the file (trimmed) and guards the API; a short
/// token and a file others can read are warned about on stderr and in the log, without the
/// token itself.
#[test]
fn token_file_is_used_and_weak_setups_are_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let home = fresh_home("tokfile");
    let file = home.join("token.txt");
    std::fs::write(&file, "  short-tok-9  \n").expect("token file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let server = TestServer::builder().home(&home).env("CASHCODE_TOKEN_FILE", &file.display().to_string()).start();
    assert_eq!(server.get("/api/sessions").status, 401);
    assert_eq!(server.request("GET", "/api/sessions", &[("Authorization", "Bearer short-tok-9")], None).status, 200);
    let stderr = server.stderr_text();
    assert!(stderr.contains("shorter than 16 characters"), "{stderr}");
    assert!(stderr.contains("readable by group or others (mode 644)"), "{stderr}");
    let log = wait_for("the warnings in cashcode.log", WAIT, || {
        let log = server.log_text();
        log.contains("readable by group or others").then_some(log)
    });
    assert!(log.contains("shorter than 16 characters"), "{log}");
    assert!(!stderr.contains("short-tok-9") && !log.contains("short-tok-9"), "the token was printed");
}

/// How many times `needle` appears in the readable memory of process `pid` (its mappings as
/// `/proc/<pid>/maps` lists them, read through `/proc/<pid>/mem`, which needs the rights of a
/// debugger: the test runs as the server's user and, for a non-dumpable server, as root).
fn copies_in_memory(pid: u32, needle: &[u8]) -> usize {
    use std::io::{Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open /proc/<pid>/mem (run as root)");
    let finder = memchr::memmem::Finder::new(needle);
    let mut found = 0;
    let mut readable = 0;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (a, b) = (u64::from_str_radix(a, 16).expect("start"), u64::from_str_radix(b, 16).expect("end"));
        let mut buf = vec![0u8; (b - a) as usize];
        if mem.seek(SeekFrom::Start(a)).is_err() || mem.read_exact(&mut buf).is_err() {
            continue;
        }
        readable += buf.len();
        found += finder.find_iter(&buf).count();
    }
    assert!(readable > 1 << 20, "read only {readable} bytes of the server's memory");
    found
}

/// The token lives in the server's memory only as a keyed digest and the LLM key once: after
/// start-up, a scan of the whole address space (what an approved escalation running as root
/// could read) finds no copy of the token and one of the key (before: 5 and 7).
/// Requests that carry it leave it in freed buffers until they are reused; the scan after
/// authenticated HTTP and WebSocket traffic and three turns reports those, and the copies of
/// the LLM key (kept once, in the runtime's settings).
#[test]
fn the_token_is_kept_only_as_a_keyed_digest_and_the_llm_key_once() {
    let fake = FakeLlm::start();
    let server = secret_env_server(&fake, &[]);
    let at_start = copies_in_memory(server.pid, ENV_TOKEN.as_bytes());
    let key_at_start = copies_in_memory(server.pid, ENV_DEEPSEEK.as_bytes());
    assert_eq!(at_start, 0, "copies of the token in the server's memory after start-up");
    assert_eq!(key_at_start, 1, "the LLM key is held once (the runtime's settings, shared by its clients)");
    for _ in 0..5 {
        assert_eq!(authed(&server, "GET", "/api/sessions", None).status, 200);
    }
    let mut ws = authed_ws(&server);
    ws.ping_sync();
    assert_eq!(server.request("GET", "/api/sessions", &[("Authorization", "Bearer wrong")], None).status, 401);
    let chat = ws.chat_id.clone();
    for _ in 0..3 {
        fake.push(Reply::text(&["ok"]));
        ws.message(&chat, "hello", "openai_compatible");
        assert_eq!(ws.turn_events(&chat).last().expect("events")["event"], "done");
    }
    assert_eq!(authed(&server, "GET", "/api/settings/llm", None).status, 200);
    let token = copies_in_memory(server.pid, ENV_TOKEN.as_bytes());
    let key = copies_in_memory(server.pid, ENV_DEEPSEEK.as_bytes());
    println!("copies in the server's memory: token {at_start} at start, {token} after traffic; LLM key {key_at_start} at start, {key} after three turns");
}
