//! The request gate (src/http/gate.rs) over the wire. Every spelling of an API path that is
//! not the canonical one (`//api`, `/%61pi`, `/API`, `/api//x`, dot segments, `;`, `\`,
//! encoded separators, NUL, …) is refused with 400 or checked exactly like the canonical
//! path, for every state-changing route with a foreign Origin and for every route without the
//! token; no handler runs and no state changes. The same route table, spelt canonically with
//! the right Origin and token, reaches every handler, so a gate that refused everything would
//! fail here. Requests go over a raw socket: an HTTP client would normalise the targets.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

const TOKEN: &str = "gate-test-token-0123456789";

/// One API route: `/api/{rest}`; `ok` is what its handler answers when reached canonically
/// (in table order), `detail` pins a handler-made 4xx body.
struct Route {
    method: &'static str,
    rest: String,
    body: Option<String>,
    ok: u16,
    detail: Option<Value>,
}

fn route(method: &'static str, rest: &str, body: Option<Value>, ok: u16) -> Route {
    Route { method, rest: rest.to_string(), body: body.map(|b| b.to_string()), ok, detail: None }
}

fn skill_md(name: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: A gate test skill\n---\n{body}\n")
}

/// Every state-changing route of src/http/api.rs, against existing state (`chat`, the MCP
/// server and skill `keep`, the `keep` snapshot `version`, MEMORY.md snapshot 1), in an order in which each
/// canonical call succeeds.
fn state_changing(chat: &str, version: &str, llm_base: &str, dead: &str) -> Vec<Route> {
    let with_detail = |mut r: Route, detail: Value| {
        r.detail = Some(detail);
        r
    };
    vec![
        route("PATCH", &format!("sessions/{chat}"), Some(json!({"title": "renamed"})), 200),
        route("PUT", "settings/llm", Some(llm_body(llm_base, llm_base)), 200),
        route(
            "POST",
            "settings/llm/test",
            Some(
                json!({"provider": "ollama", "openai_compatible": {"base_url": llm_base}, "ollama": {"base_url": llm_base}}),
            ),
            200,
        ),
        route("GET", "settings/llm/models", None, 200),
        route("POST", "mcp/servers", Some(json!({"name": "evil", "display_name": "Evil", "url": dead})), 201),
        route("PUT", "mcp/servers/keep", Some(json!({"display_name": "Changed", "url": dead})), 200),
        route("POST", "mcp/servers/keep/connect", None, 200),
        route("POST", "mcp/servers/keep/disconnect", None, 200),
        // `keep` is an SSE server: OAuth is for Streamable HTTP ones.
        with_detail(
            route("POST", "mcp/servers/keep/authorize", None, 400),
            json!("OAuth applies to Streamable HTTP servers without an Authorization header"),
        ),
        route("POST", "mcp/servers/keep/sign-out", None, 200),
        route("POST", "mcp/servers/keep/changes/approve", Some(json!({"tools": ["x"]})), 200),
        route("DELETE", "mcp/servers/keep", None, 204),
        route("POST", "skills", Some(json!({"name": "evil", "content": skill_md("evil", "evil")})), 201),
        route("PUT", "skills/keep", Some(json!({"content": skill_md("keep", "changed")})), 200),
        route("POST", "skills/keep/validate", None, 200),
        route("PATCH", "skills/keep/enabled", Some(json!({"enabled": false})), 200),
        route("POST", &format!("skills/keep/rollback/{version}"), None, 200),
        with_detail(
            route("POST", "skills/import", Some(json!({})), 422),
            json!([{"type": "missing", "loc": ["body", "file"], "msg": "Field required", "input": null}]),
        ),
        with_detail(
            route("DELETE", "skills/invalid/user/nothing", None, 404),
            json!("invalid Skill package not found"),
        ),
        with_detail(route("POST", "skill-evolution/proposals/p-1/approve", None, 404), json!("proposal not found")),
        with_detail(route("POST", "skill-evolution/proposals/p-1/reject", None, 404), json!("proposal not found")),
        route("PUT", "memory/memory", Some(json!({"content": "- changed\n"})), 200),
        route("PUT", "memory/soul", Some(json!({"content": "persona", "expected_hash": null})), 200),
        route("POST", "memory/snapshots/1/restore", None, 200),
        route("POST", "dream/run", None, 202),
        route("DELETE", "skills/keep", None, 204),
        route("DELETE", &format!("sessions/{chat}"), None, 204),
    ]
}

/// Every GET route of src/http/api.rs.
fn reads(chat: &str) -> Vec<Route> {
    [
        "health",
        "client-config",
        "sessions",
        &format!("sessions/{chat}/messages"),
        "settings/llm",
        "settings/llm/models",
        "mcp/servers",
        "mcp/servers/keep/tools",
        "mcp/servers/keep/changes",
        "skills",
        "skills/keep",
        "skills/keep/content",
        "skills/keep/versions",
        "skill-evolution/proposals",
        "skill-evolution/proposals/p-1",
        "memory",
        "memory/memory",
        "memory/soul",
        "memory/snapshots",
        "memory/snapshots/1",
        "dream",
    ]
    .iter()
    .map(|rest| route("GET", rest, None, 200))
    .collect()
}

/// How the gate must answer a spelling when the Origin or token is wrong.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Its own 400 `{"detail": "invalid request path: …"}`.
    Refused,
    /// The same check as the canonical path (403 Origin / 401 token).
    Checked,
}

/// Spellings of `/api/{rest}`: canonical ones (checked) and non-canonical ones (refused).
fn spellings(rest: &str, port: u16) -> Vec<(String, Expect)> {
    use Expect::*;
    let mut v = vec![
        (format!("/api/{rest}"), Checked),
        (format!("/api/{rest}/"), Checked),
        (format!("/api/{rest}?x=1&token={TOKEN}"), Checked),
        (format!("//api/{rest}"), Refused),
        (format!("///api/{rest}"), Refused),
        (format!("/%61pi/{rest}"), Refused),
        (format!("/a%70i/{rest}"), Refused),
        (format!("/%2561pi/{rest}"), Refused),
        (format!("/API/{rest}"), Refused),
        (format!("/Api/{rest}"), Refused),
        (format!("/api//{rest}"), Refused),
        (format!("/api/{rest}//"), Refused),
        (format!("/api/./{rest}"), Refused),
        (format!("/api/{rest}/.."), Refused),
        (format!("/api/{rest}/."), Refused),
        (format!("/api/x/../{rest}"), Refused),
        (format!("/api/%2e%2e/api/{rest}"), Refused),
        (format!("/api/{rest}/%2E"), Refused),
        (format!("/./api/{rest}"), Refused),
        (format!("/x/../api/{rest}"), Refused),
        (format!("/%2e%2e/api/{rest}"), Refused),
        (format!("/api;x/{rest}"), Refused),
        (format!("/api/{rest};x=1"), Refused),
        (format!("/api\\{rest}"), Refused),
        (format!("/api/{rest}\\"), Refused),
        (format!("/%2Fapi/{rest}"), Refused),
        (format!("/api%2F{rest}"), Refused),
        (format!("/api%2f{rest}"), Refused),
        (format!("/api%5C{rest}"), Refused),
        (format!("/api/{rest}%00"), Refused),
        (format!("/api/{rest}%2F"), Refused),
        (format!("/api/{rest}%"), Refused),
        (format!("/api%00/{rest}"), Refused),
        (format!("http://127.0.0.1:{port}/api/{rest}"), Refused),
    ];
    if let Some((first, tail)) = rest.split_once('/') {
        v.push((format!("/api/{first}%2F{tail}"), Refused));
        v.push((format!("/api/{first}%2f{tail}"), Refused));
    }
    v
}

/// Sends the request exactly as written; returns (status, body).
pub(super) fn raw(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("write request");
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap_or_else(|e| panic!("{method} {target}: reading the response: {e}"));
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or_else(|| panic!("{method} {target}: no status line in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn detail(body: &str) -> String {
    serde_json::from_str::<Value>(body).ok().and_then(|v| v["detail"].as_str().map(str::to_string)).unwrap_or_default()
}

/// Asserts that `(status, body)` is the gate's answer and not a handler's.
#[track_caller]
fn assert_gate(what: &str, expect: Expect, check: (u16, &str), (status, body): (u16, String)) {
    match expect {
        Expect::Refused => assert!(
            status == 400 && detail(&body).starts_with("invalid request path"),
            "{what}: expected the gate's 400, got {status} {body}"
        ),
        Expect::Checked => assert_eq!((status, detail(&body).as_str()), check, "{what}: {body}"),
    }
}

/// What a reached handler could have changed, read with `auth` headers.
fn state(server: &TestServer, fake: Option<&FakeLlm>, auth: &[(&str, &str)]) -> Vec<String> {
    let mut out: Vec<String> = [
        "/api/sessions",
        "/api/mcp/servers",
        "/api/skills",
        "/api/skills/keep/content",
        "/api/skills/keep/versions",
        "/api/skill-evolution/proposals",
        "/api/memory",
        "/api/memory/snapshots",
        "/api/dream",
    ]
    .iter()
    .map(|p| {
        let (status, body) = raw(server.http_port, "GET", p, auth, None);
        format!("{p} {status} {body}")
    })
    .collect();
    out.push(String::from_utf8_lossy(&std::fs::read(server.llm_json()).unwrap_or_default()).into_owned());
    if let Some(f) = fake {
        out.push(format!("provider requests: {}", f.requests().len()));
    }
    out
}

/// A chat on disk, an MCP server and a skill named `keep` (with one snapshot); returns the
/// chat id and the snapshot version.
fn seed(server: &TestServer, auth: &[(&str, &str)], dead: &str) -> (String, String) {
    let chat = "gate-chat-1".to_string();
    let dir = server.chat_dir(&chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    std::fs::write(
        dir.join("history.jsonl"),
        "{\"cursor\":1,\"role\":\"user\",\"content\":\"keep me\",\"timestamp\":\"2026-01-01 00:00\"}\n",
    )
    .expect("history");
    let post = |path: &str, body: Value| raw(server.http_port, "POST", path, auth, Some(&body.to_string()));
    let put = |path: &str, body: Value| raw(server.http_port, "PUT", path, auth, Some(&body.to_string()));
    let (s, b) = post("/api/mcp/servers", json!({"name": "keep", "display_name": "Keep", "url": dead}));
    assert_eq!(s, 201, "{b}");
    let (s, b) = post("/api/skills", json!({"name": "keep", "content": skill_md("keep", "v1")}));
    assert_eq!(s, 201, "{b}");
    let (s, b) = put("/api/skills/keep", json!({"content": skill_md("keep", "v2")}));
    assert_eq!(s, 200, "{b}");
    let version = serde_json::from_str::<Value>(&b).expect("json")["snapshot"].as_str().expect("snapshot").to_string();
    // MEMORY.md written twice: snapshot 1 exists.
    for text in ["- one\n", "- two\n"] {
        let (s, b) = put("/api/memory/memory", json!({"content": text}));
        assert_eq!(s, 200, "{b}");
    }
    (chat, version)
}

/// Runs the table canonically with `auth`: every handler is reached and answers as listed.
fn canonical_calls_reach_the_handlers(server: &TestServer, routes: &[Route], auth: &[(&str, &str)]) {
    for r in routes {
        let path = format!("/api/{}", r.rest);
        let (status, body) = raw(server.http_port, r.method, &path, auth, r.body.as_deref());
        assert_eq!(status, r.ok, "{} {path}: {body}", r.method);
        if let Some(d) = &r.detail {
            let got: Value =
                serde_json::from_str(&body).unwrap_or_else(|e| panic!("{} {path}: {e} in {body}", r.method));
            assert_eq!(&got["detail"], d, "{} {path}", r.method);
        }
    }
}

#[test]
fn foreign_origins_pass_no_spelling_of_any_state_changing_route() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let dead = format!("http://127.0.0.1:{}/sse", dead_port());
    let (chat, version) = seed(&server, &[], &dead);
    let routes = state_changing(&chat, &version, &fake.base(), &dead);
    let before = state(&server, Some(&fake), &[]);

    let forbidden = (403, "Origin is not allowed");
    for origin in ["http://evil.example", "null"] {
        for r in &routes {
            for (target, expect) in spellings(&r.rest, server.http_port) {
                let got = raw(server.http_port, r.method, &target, &[("Origin", origin)], r.body.as_deref());
                assert_gate(&format!("{} {target:?} from {origin}", r.method), expect, forbidden, got);
            }
        }
    }
    assert_eq!(state(&server, Some(&fake), &[]), before, "a refused request changed state");
    assert!(!server.home.join("data/skills/user/evil").exists(), "a refused request created a skill");

    // The server's own origin gets through the same gate to every handler.
    let own = server.http_base();
    canonical_calls_reach_the_handlers(&server, &routes, &[("Origin", &own)]);
    assert!(fake.requests().iter().any(|r| r.path.ends_with("/models")), "discovery reached the provider");
    assert_ne!(state(&server, Some(&fake), &[]), before);
}

#[test]
fn without_the_token_no_spelling_reaches_any_route() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_TOKEN", TOKEN).start();
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("Authorization", bearer.as_str())];
    let (s, b) = raw(
        server.http_port,
        "PUT",
        "/api/settings/llm",
        &auth,
        Some(&llm_body(&fake.base(), &fake.base()).to_string()),
    );
    assert_eq!(s, 200, "{b}");
    let dead = format!("http://127.0.0.1:{}/sse", dead_port());
    let (chat, version) = seed(&server, &auth, &dead);
    let routes = state_changing(&chat, &version, &fake.base(), &dead);
    let mut every = reads(&chat);
    every.extend(state_changing(&chat, &version, &fake.base(), &dead));
    let before = state(&server, Some(&fake), &auth);

    let unauthorized = (401, "a valid token is required");
    let wrong = [("Authorization", "Bearer gate-test-token-012345678")];
    let none: [(&str, &str); 0] = [];
    for r in &every {
        for (target, expect) in spellings(&r.rest, server.http_port) {
            for headers in [&wrong[..], &none[..]] {
                let got = raw(server.http_port, r.method, &target, headers, r.body.as_deref());
                assert_gate(&format!("{} {target:?} {headers:?}", r.method), expect, unauthorized, got);
            }
        }
        // HEAD and plain OPTIONS are checked too (never a preflight answer without a token).
        for method in ["HEAD", "OPTIONS"] {
            let (status, _) = raw(server.http_port, method, &format!("/api/{}", r.rest), &[], None);
            assert_eq!(status, 401, "{method} /api/{}", r.rest);
        }
    }
    assert_eq!(state(&server, Some(&fake), &auth), before, "a request without the token changed state");

    // With the token, every read and every state-changing handler is reached.
    for r in reads(&chat) {
        let path = format!("/api/{}", r.rest);
        let (status, body) = raw(server.http_port, "GET", &path, &auth, None);
        let d = detail(&body);
        assert!(status == 200 || (status == 404 && !d.is_empty() && d != "Not Found"), "GET {path}: {status} {body}");
    }
    canonical_calls_reach_the_handlers(&server, &routes, &auth);

    // The OAuth callback is the one route without the token (a provider's redirect carries
    // none): it reaches its handler, which wants a pending flow's `state`; its other
    // spellings are refused like every route's.
    for (target, expect) in spellings("mcp/oauth/callback", server.http_port) {
        let (status, body) = raw(server.http_port, "GET", &target, &none, None);
        match expect {
            Expect::Refused => {
                assert!(status == 400 && detail(&body).starts_with("invalid request path"), "{target:?}: {body}")
            }
            // The trailing-slash spelling is redirected to the canonical one, as for every GET.
            Expect::Checked if target.ends_with('/') => assert_eq!(status, 307, "{target:?}: {body}"),
            Expect::Checked => {
                assert_eq!(status, 400, "{target:?}: {body}");
                assert!(body.contains("unknown, was already used, or has expired"), "{target:?}: {body}");
            }
        }
    }
    let (status, _) = raw(server.http_port, "POST", "/api/mcp/oauth/callback", &none, None);
    assert_eq!(status, 401, "only GET of the callback goes without the token");
}

#[test]
fn escapes_inside_segments_are_data_and_redirects_follow_the_checks() {
    let server = TestServer::builder().env("CASHCODE_DEV", "1").start();
    // UTF-8 and other escaped bytes inside a segment reach the handler, which decides.
    for (path, want) in [
        ("/api/skills/%E5%AD%97", "Skill not found"),
        ("/api/sessions/%E5%AD%97/messages", "session not found"),
        ("/api/skills/a%3Bb", "Skill not found"),
        ("/api/sessions/%2E%2Ex/messages", "session not found"),
    ] {
        let (status, body) = raw(server.http_port, "GET", path, &[], None);
        assert_eq!((status, detail(&body).as_str()), (404, want), "{path}");
    }
    // The trailing-slash redirect of docs/http-api.md §1 is still there, after the checks.
    let (status, _) = raw(server.http_port, "GET", "/api/sessions/", &[], None);
    assert_eq!(status, 307);
    let (status, body) =
        raw(server.http_port, "DELETE", "/api/sessions/x/", &[("Origin", "http://evil.example")], None);
    assert_eq!((status, detail(&body).as_str()), (403, "Origin is not allowed"));
    // A CORS preflight is answered as before.
    let (status, body) = raw(
        server.http_port,
        "OPTIONS",
        "/api/settings/llm",
        &[("Origin", "http://127.0.0.1:5173"), ("Access-Control-Request-Method", "PUT")],
        None,
    );
    assert_eq!((status, body.as_str()), (200, "OK"));
}

#[test]
fn disguised_api_paths_never_fall_back_to_the_client() {
    let home = fresh_home("gate-assets");
    let dist = home.join("dist");
    std::fs::create_dir_all(dist.join("assets")).expect("mkdir");
    std::fs::write(dist.join("index.html"), "<!doctype html><title>CashCode</title>").expect("write");
    let server = TestServer::builder().home(&home).env("CASHCODE_CLIENT_DIR", &dist.display().to_string()).start();
    for (target, _) in spellings("sessions", server.http_port).into_iter().filter(|(_, e)| *e == Expect::Refused) {
        let (status, body) = raw(server.http_port, "GET", &target, &[], None);
        assert!(status == 400 && detail(&body).starts_with("invalid request path"), "{target:?}: {status} {body}");
    }
    // Client routes and files keep working; names that merely contain "api" are client routes.
    for path in ["/", "/chat/some-id", "/apis", "/chat/api"] {
        let (status, body) = raw(server.http_port, "GET", path, &[], None);
        assert_eq!((status, body.as_str()), (200, "<!doctype html><title>CashCode</title>"), "{path}");
    }
    let (status, _) = raw(server.http_port, "GET", "/assets\\..\\..\\secret.txt", &[], None);
    assert_eq!(status, 400);
}
