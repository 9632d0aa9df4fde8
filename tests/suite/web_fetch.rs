//! `web_fetch` through a real turn (docs/tools-and-mcp.md §3) where a page is hostile: markup that
//! made the old extraction quadratic is read in bounded time while the API keeps answering; a
//! cancelled fetch of a page that never ends ends the turn at once and leaves no thread and no
//! open connection behind; the default configuration refuses loopback addresses before
//! connecting.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

const ALLOW_PRIVATE: &str = "CASHCODE_WEB_FETCH_ALLOW_PRIVATE";

/// A one-shot page server on 127.0.0.1: after the request head it writes `head`, then calls
/// `body` with the socket until that returns. Reports "sent" once the head is out and
/// "closed" when `body` returned (the client hung up, or the page ended).
fn page_server(
    head: String,
    body: impl FnOnce(&mut std::net::TcpStream) + Send + 'static,
) -> (String, crossbeam_channel::Receiver<&'static str>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind page server");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = crossbeam_channel::bounded(4);
    std::thread::spawn(move || {
        let Ok((mut sock, _)) = listener.accept() else { return };
        let mut reader = BufReader::new(sock.try_clone().expect("clone socket"));
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
        if sock.write_all(head.as_bytes()).is_err() {
            return;
        }
        let _ = tx.send("sent");
        body(&mut sock);
        let _ = tx.send("closed");
    });
    (format!("http://127.0.0.1:{port}/page"), rx)
}

/// The server process's thread names, sorted, but for the threads serving connections
/// (`http-conn`, kept idle a few seconds after a request, and `ws-handshake`), which come and
/// go with the test's own requests.
fn threads(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut names: Vec<String> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .filter(|name| !matches!(name.as_str(), "http-conn" | "ws-handshake"))
        .collect();
    names.sort();
    names
}

fn fetch_call(url: &str) -> Reply {
    Reply::tool_calls(&[ToolCallSpec::new("call_f", "web_fetch", &[&json!({"url":url}).to_string()])])
}

/// The text of the `tool` message the model got after the fetch.
fn tool_message(fake: &FakeLlm) -> String {
    let reqs = fake.wait_chat_requests(2, WAIT);
    let msgs = req_messages(&reqs[1].body);
    let last: &Value = msgs.last().expect("tool message");
    assert_eq!((&last["role"], &last["tool_call_id"]), (&json!("tool"), &json!("call_f")));
    last["content"].as_str().expect("content").to_string()
}

/// 1.6 MB of `<!--` (the old extraction needed minutes for a tenth of it), sent slowly in
/// 64 KiB pieces: the tool answers within a few seconds, and `/api/health` answers throughout.
#[test]
fn hostile_page_is_read_in_bounded_time_while_health_answers() {
    let page = format!("<title>T</title>{}", "<!--".repeat(400_000));
    let head = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n", page.len());
    let (url, events) = page_server(head, move |sock| {
        for piece in page.as_bytes().chunks(64 * 1024) {
            if sock.write_all(piece).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let fake = FakeLlm::start();
    let server = TestServer::builder().env(ALLOW_PRIVATE, "1").start();
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(fetch_call(&url));
    fake.push(Reply::text(&["done"]));
    let sent = Instant::now();
    ws.message(&chat, "read it", "openai_compatible");
    let mut frames = Vec::new();
    let mut health_checks = 0;
    let mut slowest = Duration::ZERO;
    while !frames.iter().any(|v: &Value| v["event"] == "done" || v["event"] == "error") {
        assert!(sent.elapsed() < Duration::from_secs(30), "the turn did not end: {frames:#?}");
        let asked = Instant::now();
        server.get("/api/health").expect(200, json!({"status":"ok","service":"cashcode"}));
        slowest = slowest.max(asked.elapsed());
        health_checks += 1;
        if let Some(v) = ws.recv_within(Duration::from_millis(50)) {
            if v["event"] == "tool_result" {
                let took = sent.elapsed();
                assert!(took < Duration::from_secs(10), "the fetch took {took:?}");
            }
            frames.push(v);
        }
    }
    assert!(slowest < Duration::from_secs(2), "slowest /api/health: {slowest:?}");
    assert!(health_checks > 1, "health was asked while the turn ran");
    let result = frames.iter().find(|v| v["event"] == "tool_result").expect("tool_result");
    assert_eq!(result["result"], json!(format!("[From {url}]\n\nT")));
    assert_eq!(tool_message(&fake), format!("[From {url}]\n\nT"));
    assert_eq!(frames.last().expect("end")["event"], "done");
    assert_eq!(events.recv_timeout(WAIT), Ok("sent"));
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

/// A page that never ends, cancelled mid-download: the turn ends at once, the connection is
/// closed within seconds (not after the 15 s request timeout), and the server runs the same
/// threads as before the fetch (it ran on the turn's worker).
#[test]
fn cancelled_fetch_leaves_nothing_behind() {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<!--".to_string();
    let (url, events) = page_server(head, |sock| {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            if sock.write_all(&[b'-'; 64]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let fake = FakeLlm::start();
    let server = TestServer::builder().env(ALLOW_PRIVATE, "1").start();
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let before = threads(server.pid);
    fake.push(fetch_call(&url));
    ws.message(&chat, "read it", "openai_compatible");
    ws.recv_until(|v| v["event"] == "tool_call");
    assert_eq!(events.recv_timeout(WAIT), Ok("sent"));
    let cancelled = Instant::now();
    ws.send(&json!({"type":"cancel","chat_id":chat}));
    let frames = ws.turn_frames(&chat);
    let last = frames.last().expect("closing frame");
    assert_eq!((&last["event"], &last["detail"]), (&json!("error"), &json!("cancelled")), "{frames:#?}");
    assert!(cancelled.elapsed() < Duration::from_secs(2), "cancel took {:?}", cancelled.elapsed());
    assert_eq!(events.recv_timeout(Duration::from_secs(3)), Ok("closed"), "the page connection was closed");
    wait_for("the threads from before the fetch", Duration::from_secs(3), || {
        (threads(server.pid) == before).then_some(())
    });
    assert_eq!(fake.chat_requests().len(), 1, "no model call after the cancel");
}

/// Without the switch, a page on 127.0.0.1 is refused before any connection is made.
#[test]
fn default_config_refuses_loopback_pages() {
    let trap = TcpListener::bind("127.0.0.1:0").expect("bind trap");
    trap.set_nonblocking(true).expect("nonblocking");
    let port = trap.local_addr().expect("addr").port();
    let OneChat { fake, server: _server, mut ws, .. } = one_chat();
    for (url, why) in [
        (format!("http://127.0.0.1:{port}/"), "127.0.0.1 is a loopback address".to_string()),
        (format!("http://0x7f.1:{port}/"), "0x7f.1 resolves to 127.0.0.1, a loopback address".to_string()),
        (format!("http://[::ffff:7f00:1]:{port}/"), "::ffff:127.0.0.1 is a loopback address".to_string()),
    ] {
        let chat = ws.new_chat();
        fake.clear_requests();
        fake.push(fetch_call(&url));
        fake.push(Reply::text(&["done"]));
        ws.message(&chat, "read it", "openai_compatible");
        let events = ws.turn_events(&chat);
        assert_eq!(events.last().expect("end")["event"], "done", "{events:#?}");
        let want = format!(
            "Error: Fetching {url} refused: {why}; web_fetch only reaches public internet addresses, not \
             loopback, private, link-local or other internal networks"
        );
        assert_eq!(tool_message(&fake), want);
    }
    let mut buf = [0u8; 1];
    match trap.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((mut s, _)) => panic!("the refused fetch connected: {:?}", s.read(&mut buf)),
        Err(e) => panic!("trap: {e}"),
    }
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}
