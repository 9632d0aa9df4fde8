//! Security proof: foreign browser Origins cannot drive the agent over the WebSocket
//! or any state-changing HTTP route, the server's own origin can; a DNS-rebinding Host is
//! refused on both listeners; a non-loopback bind refuses to start without `CASHCODE_TOKEN`
//! and, with one, both listeners demand it (HTTP in `Authorization` only; the WebSocket also
//! takes `?token=`). Servers bound to 0.0.0.0 are only ever reached through 127.0.0.1.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::json;
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::HandshakeError;
use tungstenite::http::HeaderValue;

use crate::common::server::{cashcode_command, run_to_exit};
use crate::common::ws::Handshake;
use crate::common::*;

/// Every state-changing route with a body that would be accepted from an allowed origin.
fn state_changing_routes(chat: &str) -> Vec<(&'static str, String, Option<String>)> {
    vec![
        ("PUT", "/api/settings/llm".into(), Some(llm_body("http://127.0.0.1:9", "").to_string())),
        (
            "POST",
            "/api/settings/llm/test".into(),
            Some(json!({"provider":"ollama","ollama":{"base_url":"http://127.0.0.1:9"}}).to_string()),
        ),
        ("GET", "/api/settings/llm/models".into(), None),
        ("PATCH", format!("/api/sessions/{chat}"), Some(r#"{"title":"pwned"}"#.into())),
        ("DELETE", format!("/api/sessions/{chat}"), None),
        (
            "POST",
            "/api/mcp/servers".into(),
            Some(json!({"name":"evil","display_name":"Evil","url":"http://127.0.0.1:9/sse"}).to_string()),
        ),
        (
            "POST",
            "/api/skills".into(),
            Some(json!({"name":"evil","content":"---\nname: evil\ndescription: x\n---\nbody"}).to_string()),
        ),
        ("POST", "/api/skills/import".into(), Some("{}".into())),
    ]
}

#[test]
fn foreign_origins_are_refused_everywhere_and_the_own_origin_is_allowed() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    fake.push(Reply::text(&["hi"]));
    ws.message(&chat, "keep me", "openai_compatible");
    ws.turn_events(&chat);
    let provider_calls = settle_context_lookup(&fake);
    let llm_before = std::fs::read(server.llm_json()).expect("llm.json");
    let sessions_before = server.get("/api/sessions").json();

    let own = server.http_base();
    let foreign = [
        "http://evil.example",
        &format!("http://evil.example:{}", server.http_port),
        &format!("http://127.0.0.1.evil.example:{}", server.http_port),
        &format!("https://127.0.0.1:{}", server.http_port),
        &format!("http://127.0.0.1:{}", server.ws_port),
        "null",
    ];
    for origin in foreign {
        match WsClient::handshake(server.ws_port, Some(origin)) {
            Handshake::Refused(code) => assert_eq!(code, 403, "ws origin {origin}"),
            Handshake::Accepted(_) => panic!("ws handshake accepted foreign origin {origin}"),
        }
        for (method, path, body) in state_changing_routes(&chat) {
            let r = server.request(method, &path, &[("Origin", origin)], body.as_deref());
            assert_eq!(
                (r.status, r.json()),
                (403, json!({"detail":"Origin is not allowed"})),
                "{method} {path} from {origin}"
            );
        }
    }
    // Nothing changed and no provider probe was made on a refused request.
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), llm_before);
    assert_eq!(server.get("/api/sessions").json(), sessions_before);
    assert_eq!(fake.requests().len(), provider_calls, "a refused origin reached the provider");
    assert!(!server.home.join("data/mcp/servers.json").exists(), "a refused origin created an MCP server");
    assert_eq!(server.get("/api/skills/evil").status, 404, "a refused origin created a skill");

    // The server's own origin (the web client it serves) drives both listeners.
    match WsClient::handshake(server.ws_port, Some(&own)) {
        Handshake::Accepted(mut c) => c.ping_sync(),
        Handshake::Refused(code) => panic!("own origin {own} refused with {code}"),
    }
    let r = server.request("PATCH", &format!("/api/sessions/{chat}"), &[("Origin", &own)], Some(r#"{"title":"mine"}"#));
    r.expect(200, json!({"chat_id":chat,"title":"mine"}));
    assert_eq!(r.header("access-control-allow-origin"), Some(own.as_str()));
    let r = server.request("DELETE", &format!("/api/sessions/{chat}"), &[("Origin", &own)], None);
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(!server.chat_dir(&chat).exists(), "deleted from the own origin");
}

#[test]
fn dns_rebinding_hosts_are_refused_on_both_listeners() {
    let server = TestServer::start();
    for host in [
        format!("evil.example:{}", server.http_port),
        "evil.example".to_string(),
        format!("127.0.0.1.evil.example:{}", server.http_port),
        format!("localhost.evil.example:{}", server.http_port),
    ] {
        for (method, path) in [("GET", "/api/sessions"), ("GET", "/api/settings/llm"), ("DELETE", "/api/sessions/x")] {
            let r = server.request(method, path, &[("Host", &host)], None);
            r.expect(403, json!({"detail":"Host is not allowed"}));
        }
        let ws_host = host.replace(&server.http_port.to_string(), &server.ws_port.to_string());
        match WsClient::handshake_with(server.ws_port, &[("Host", &ws_host)]) {
            Handshake::Refused(code) => assert_eq!(code, 403, "ws Host {ws_host}"),
            Handshake::Accepted(_) => panic!("ws accepted rebinding Host {ws_host}"),
        }
    }
    // Loopback names keep working on both.
    let r = server.request("GET", "/api/health", &[("Host", &format!("localhost:{}", server.http_port))], None);
    assert_eq!(r.status, 200);
    match WsClient::handshake_with(server.ws_port, &[("Host", &format!("127.0.0.1:{}", server.ws_port))]) {
        Handshake::Accepted(mut c) => c.ping_sync(),
        Handshake::Refused(code) => panic!("loopback Host refused with {code}"),
    }
}

#[test]
fn non_loopback_binds_refuse_to_start_without_a_token() {
    for env in [
        vec![("WS_HOST", "0.0.0.0")],
        vec![("CASHCODE_HOST", "0.0.0.0")],
        vec![("CASHCODE_HOST", "0.0.0.0"), ("WS_HOST", "0.0.0.0")],
        vec![("CASHCODE_HOST", "0.0.0.0"), ("CASHCODE_TOKEN", "")],
    ] {
        let (code, out, err) = run_to_exit(&[], &env);
        assert!(matches!(code, Some(c) if c != 0), "env {env:?} must fail to start, got exit {code:?}\n{out}\n{err}");
        assert!(!out.contains("listening on"), "env {env:?} announced a listener: {out}");
        assert!(err.contains("CASHCODE_TOKEN"), "env {env:?}: the error must name CASHCODE_TOKEN: {err}");
    }
}

/// A server bound to 0.0.0.0 on both listeners (the harness only parses 127.0.0.1 lines).
struct WideServer {
    child: Child,
    home: std::path::PathBuf,
    http_port: u16,
    ws_port: u16,
}

impl WideServer {
    fn start(token: &str) -> Self {
        let home = fresh_home("wide");
        let mut child = cashcode_command(&home)
            .env("CASHCODE_HOST", "0.0.0.0")
            .env("WS_HOST", "0.0.0.0")
            .env("CASHCODE_TOKEN", token)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cashcode");
        let (tx, rx) = crossbeam_channel::unbounded();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Deadline::after(Duration::from_secs(10));
        let (mut http, mut ws) = (None, None);
        while http.is_none() || ws.is_none() {
            let line = rx.recv_timeout(deadline.remaining()).expect("both listening lines");
            if let Some(p) = line.strip_prefix("http listening on http://0.0.0.0:") {
                http = Some(p.trim().parse::<u16>().expect("http port"));
            } else if let Some(p) = line.strip_prefix("ws listening on ws://0.0.0.0:") {
                ws = Some(p.trim().trim_end_matches('/').parse::<u16>().expect("ws port"));
            }
        }
        WideServer { child, home, http_port: http.expect("http"), ws_port: ws.expect("ws") }
    }

    fn http(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let agent = http_agent(Duration::from_secs(20));
        let mut b =
            ureq::http::Request::builder().method(method).uri(format!("http://127.0.0.1:{}{path}", self.http_port));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut resp = agent.run(b.body(()).expect("request")).expect("transport");
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().expect("body"))
    }

    /// Handshake on `ws://127.0.0.1:<port>/<path_query>` with extra headers; `Ok` = accepted.
    fn ws(&self, path_query: &str, headers: &[(&'static str, &str)]) -> Result<(), u16> {
        let mut req =
            format!("ws://127.0.0.1:{}/{path_query}", self.ws_port).into_client_request().expect("ws request");
        for (k, v) in headers {
            req.headers_mut().insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        let s = TcpStream::connect(("127.0.0.1", self.ws_port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        match tungstenite::client(req, s) {
            Ok((mut ws, _)) => {
                let ready = ws.read().expect("ready frame");
                assert!(ready.to_text().expect("text").contains("\"ready\""), "first frame {ready:?}");
                Ok(())
            }
            Err(HandshakeError::Failure(tungstenite::Error::Http(r))) => Err(r.status().as_u16()),
            Err(e) => panic!("unexpected handshake error {e}"),
        }
    }
}

impl Drop for WideServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

#[test]
fn with_a_token_both_listeners_require_it() {
    let token = "tok-Very-Secret-4242";
    let server = WideServer::start(token);
    let bearer = format!("Bearer {token}");
    let unauthorized = json!({"detail":"a valid token is required"});
    for (method, path) in [("GET", "/api/sessions"), ("GET", "/api/settings/llm"), ("DELETE", "/api/sessions/x")] {
        let (status, body) = server.http(method, path, &[]);
        assert_eq!((status, serde_json::from_str::<serde_json::Value>(&body).ok()), (401, Some(unauthorized.clone())));
        for bad in
            ["Bearer tok-Very-Secret-424", "Bearer tok-Very-Secret-42421", "Basic dG9rOng=", "tok-Very-Secret-4242"]
        {
            let (status, _) = server.http(method, path, &[("Authorization", bad)]);
            assert_eq!(status, 401, "{method} {path} with Authorization {bad:?}");
        }
        let (status, _) = server.http(method, &format!("{path}?token=wrong"), &[]);
        assert_eq!(status, 401);
    }
    let (status, body) = server.http("GET", "/api/sessions", &[("Authorization", &bearer)]);
    assert_eq!(status, 200, "{body}");
    // HTTP does not take the token from the query: it would end up in logs and history.
    for (method, path) in [("GET", "/api/sessions"), ("DELETE", "/api/sessions/x")] {
        let (status, body) = server.http(method, &format!("{path}?token={token}"), &[]);
        assert_eq!((status, serde_json::from_str::<serde_json::Value>(&body).ok()), (401, Some(unauthorized.clone())));
    }
    // The non-loopback bind does not do the Host check, but Origin rules still apply.
    let (status, _) =
        server.http("DELETE", "/api/sessions/x", &[("Authorization", &bearer), ("Origin", "http://evil.example")]);
    assert_eq!(status, 403);

    assert_eq!(server.ws("", &[]), Err(401));
    assert_eq!(server.ws("?token=wrong", &[]), Err(401));
    assert_eq!(server.ws("", &[("Authorization", "Bearer nope")]), Err(401));
    assert_eq!(server.ws("", &[("Authorization", &bearer)]), Ok(()));
    assert_eq!(server.ws(&format!("?token={token}"), &[]), Ok(()));
    assert_eq!(server.ws("", &[("Authorization", &bearer), ("Origin", "http://evil.example")]), Err(403));
}
