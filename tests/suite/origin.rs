//! Origin rules: the WebSocket handshake refuses browser origins that are neither allowed nor
//! the server's own HTTP origin (403) and accepts scripts without Origin; state-changing HTTP
//! routes refuse them with `403 {"detail":"Origin is not allowed"}`; CORS headers and
//! preflights follow docs/http-api.md §1.

use serde_json::json;

use crate::common::ws::Handshake;
use crate::common::*;

fn accepted(port: u16, origin: Option<&str>) -> bool {
    match WsClient::handshake(port, origin) {
        Handshake::Accepted(mut c) => {
            c.ping_sync();
            true
        }
        Handshake::Refused(code) => {
            assert_eq!(code, 403, "refusals are HTTP 403");
            false
        }
    }
}

#[test]
fn ws_handshake_origin_check_with_defaults() {
    let server = TestServer::start();
    let own = server.http_base();
    assert!(accepted(server.ws_port, None), "a script without Origin is accepted");
    assert!(accepted(server.ws_port, Some(&own)), "the server's own origin {own}");
    let own_localhost = format!("http://localhost:{}", server.http_port);
    assert!(accepted(server.ws_port, Some(&own_localhost)), "the server's own origin {own_localhost}");
    for bad in [
        "http://evil.example",
        "http://127.0.0.1:5173",
        "http://localhost:5173",
        "https://127.0.0.1:5173",
        "http://127.0.0.1:5174",
        "http://localhost:5173.evil.example",
        "null",
        "HTTP://127.0.0.1:5173",
    ] {
        assert!(!accepted(server.ws_port, Some(bad)), "origin {bad} must be refused");
    }
    // Refusals do not hurt the server.
    assert!(accepted(server.ws_port, None));
}

/// The Vite dev server's origins (`:5173`) are refused unless the server runs in dev mode
/// (`--dev` or `CASHCODE_DEV=1`), on the WebSocket and on state-changing HTTP routes alike.
#[test]
fn dev_origins_are_allowed_only_with_the_dev_flag() {
    let body = llm_body("http://127.0.0.1:9", "").to_string();
    for (dev, server) in [
        (false, TestServer::start()),
        (true, TestServer::builder().env("CASHCODE_DEV", "1").start()),
        (false, TestServer::builder().env("CASHCODE_DEV", "0").start()),
    ] {
        for origin in ["http://127.0.0.1:5173", "http://localhost:5173"] {
            assert_eq!(accepted(server.ws_port, Some(origin)), dev, "ws {origin} dev={dev}");
            let r = server.request("PUT", "/api/settings/llm", &[("Origin", origin)], Some(&body));
            assert_eq!(r.status, if dev { 200 } else { 403 }, "http {origin} dev={dev}: {}", r.body);
            assert_eq!(r.header("access-control-allow-origin").is_some(), dev, "CORS for {origin} dev={dev}");
        }
        assert!(!accepted(server.ws_port, Some("http://127.0.0.1:5174")));
    }
}

#[test]
fn ws_and_http_origin_check_with_a_configured_list() {
    let server = TestServer::builder()
        .env("CASHCODE_ALLOWED_ORIGINS", " http://app.example:3000/ , https://ui.example ")
        .start();
    assert!(accepted(server.ws_port, Some("http://app.example:3000")));
    assert!(accepted(server.ws_port, Some("https://ui.example")));
    assert!(accepted(server.ws_port, Some(&server.http_base())));
    assert!(!accepted(server.ws_port, Some("http://127.0.0.1:5173")), "defaults replaced");
    let body = llm_body("http://127.0.0.1:9", "");
    let r =
        server.request("PUT", "/api/settings/llm", &[("Origin", "http://app.example:3000")], Some(&body.to_string()));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("access-control-allow-origin"), Some("http://app.example:3000"));
    let r = server.request("PUT", "/api/settings/llm", &[("Origin", "http://127.0.0.1:5173")], Some(&body.to_string()));
    r.expect(403, json!({"detail":"Origin is not allowed"}));
}

#[test]
fn state_changing_http_routes_refuse_foreign_origins() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    // A chat to rename/delete.
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["hi"]));
    ws.message(&chat, "keep me", "openai_compatible");
    ws.turn_events(&chat);
    let provider_calls = settle_context_lookup(&fake);
    let settings_before = std::fs::read(server.llm_json()).expect("llm.json");

    let evil = [("Origin", "http://evil.example")];
    let forbidden = json!({"detail":"Origin is not allowed"});
    let body = llm_body("http://127.0.0.1:1", "").to_string();
    server.request("PUT", "/api/settings/llm", &evil, Some(&body)).expect(403, forbidden.clone());
    let test_body =
        json!({"provider":"openai_compatible","openai_compatible":{"base_url":fake.base()},"ollama":{"base_url":""}})
            .to_string();
    server.request("POST", "/api/settings/llm/test", &evil, Some(&test_body)).expect(403, forbidden.clone());
    server.request("GET", "/api/settings/llm/models", &evil, None).expect(403, forbidden.clone());
    server
        .request("PATCH", &format!("/api/sessions/{chat}"), &evil, Some(r#"{"title":"pwned"}"#))
        .expect(403, forbidden.clone());
    server.request("DELETE", &format!("/api/sessions/{chat}"), &evil, None).expect(403, forbidden);
    // Nothing changed, and the guarded routes made no provider call.
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), settings_before);
    assert!(server.chat_dir(&chat).join("history.jsonl").exists());
    assert_eq!(server.get("/api/sessions").json()["sessions"][0]["title"], "keep me");
    assert_eq!(fake.requests().len(), provider_calls, "no provider call for a refused origin");
    // Reads are not guarded; without Origin everything works.
    assert_eq!(server.request("GET", "/api/settings/llm", &evil, None).status, 200);
    assert_eq!(server.request("GET", "/api/sessions", &evil, None).status, 200);
    let ok = server.request(
        "PATCH",
        &format!("/api/sessions/{chat}"),
        &[("Origin", &server.http_base())],
        Some(r#"{"title":"renamed"}"#),
    );
    ok.expect(200, json!({"chat_id":chat,"title":"renamed"}));
}

#[test]
fn cors_headers_and_preflight() {
    let server = TestServer::builder().env("CASHCODE_DEV", "1").start();
    let allowed = "http://127.0.0.1:5173";
    let r = server.request("GET", "/api/health", &[("Origin", allowed)], None);
    r.expect(200, json!({"status":"ok","service":"cashcode"}));
    assert_eq!(r.header("access-control-allow-origin"), Some(allowed));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert!(
        r.header("vary").is_some_and(|v| v.to_ascii_lowercase().contains("origin")),
        "vary: {:?}",
        r.header("vary")
    );
    // A foreign origin on a read: served, without CORS headers.
    let r = server.request("GET", "/api/health", &[("Origin", "http://evil.example")], None);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), None);
    // Preflight from an allowed origin.
    let r = server.request(
        "OPTIONS",
        "/api/settings/llm",
        &[
            ("Origin", allowed),
            ("Access-Control-Request-Method", "PUT"),
            ("Access-Control-Request-Headers", "content-type,x-custom"),
        ],
        None,
    );
    assert_eq!((r.status, r.body.as_str()), (200, "OK"));
    assert_eq!(r.header("access-control-allow-origin"), Some(allowed));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    let methods = r.header("access-control-allow-methods").unwrap_or("").to_ascii_uppercase();
    for m in ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        assert!(methods.contains(m), "allow-methods {methods:?} lacks {m}");
    }
    let headers = r.header("access-control-allow-headers").unwrap_or("").to_ascii_lowercase();
    assert!(headers.contains("content-type") && headers.contains("x-custom"), "allow-headers {headers:?}");
    assert!(r.header("x-request-id").is_some_and(|id| is_lower_hex(id, 32)));
    // Preflight from elsewhere.
    let r = server.request(
        "OPTIONS",
        "/api/settings/llm",
        &[("Origin", "http://evil.example"), ("Access-Control-Request-Method", "PUT")],
        None,
    );
    assert_eq!((r.status, r.body.as_str()), (400, "Disallowed CORS origin"));
    assert_eq!(r.header("access-control-allow-origin"), None);
}

#[test]
fn foreign_host_headers_are_refused_on_a_loopback_bind() {
    // DNS-rebinding guard (lead's extension): a loopback server answers only loopback Host names.
    let server = TestServer::start();
    let r = server.request("GET", "/api/sessions", &[("Host", "evil.example:8000")], None);
    r.expect(403, json!({"detail":"Host is not allowed"}));
    for host in ["localhost", "127.0.0.1:1234", "[::1]:80"] {
        let r = server.request("GET", "/api/health", &[("Host", host)], None);
        assert_eq!(r.status, 200, "Host {host}");
    }
    match WsClient::handshake_with(server.ws_port, &[("Host", "rebind.example")]) {
        Handshake::Refused(code) => assert_eq!(code, 403),
        Handshake::Accepted(_) => panic!("a foreign Host must be refused on the WebSocket"),
    }
    assert!(accepted(server.ws_port, None));
}
