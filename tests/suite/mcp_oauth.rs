//! MCP OAuth through the real server: a Streamable HTTP server that answers 401 shows
//! `auth: "required"`, `authorize` returns the provider's URL (PKCE S256, state, resource),
//! the provider's redirect lands on CashCode's callback route, which completes the flow once
//! (bad and reused states are refused), the server then connects with the token, and
//! sign-out forgets it. The tokens never appear in a response, the log or stderr, and their
//! file is 0600. The provider and the MCP server are one small loopback fake.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

/// Records of the fake: what the authorization request said, tokens handed out.
#[derive(Default)]
struct Seen {
    /// code -> (code_challenge, method, resource)
    codes: HashMap<String, (String, String, String)>,
    tokens: Vec<String>,
    authorize_queries: Vec<String>,
    token_forms: Vec<String>,
    /// `expires_in` of tokens from a code (0: expired at once, so the next use refreshes);
    /// refreshed ones last an hour.
    expires_in: u64,
}

struct FakeProvider {
    base: String,
    seen: Arc<Mutex<Seen>>,
    server: Arc<tiny_http::Server>,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

fn form(body: &str) -> HashMap<String, String> {
    cashcode::mcp::auth::flow::query_params(&format!("?{body}")).into_iter().collect()
}

fn start_provider() -> FakeProvider {
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
    let port = server.server_addr().to_ip().expect("ip").port();
    let base = format!("http://127.0.0.1:{port}");
    let seen: Arc<Mutex<Seen>> = Arc::new(Mutex::new(Seen { expires_in: 3600, ..Seen::default() }));
    let (srv, s, b) = (server.clone(), seen.clone(), base.clone());
    std::thread::spawn(move || {
        for mut rq in srv.incoming_requests() {
            let mut body = String::new();
            let _ = std::io::Read::read_to_string(rq.as_reader(), &mut body);
            let url = rq.url().to_string();
            let path = url.split('?').next().unwrap_or("").to_string();
            let auth = rq
                .headers()
                .iter()
                .find(|h| h.field.equiv("Authorization"))
                .map(|h| h.value.as_str().to_string())
                .unwrap_or_default();
            let json_resp = |status: u16, v: Value| {
                tiny_http::Response::from_string(v.to_string())
                    .with_status_code(status)
                    .with_header(tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap())
            };
            let resp = match (rq.method().as_str(), path.as_str()) {
                ("GET", "/.well-known/oauth-protected-resource/mcp") => json_resp(
                    200,
                    json!({"resource": format!("{b}/mcp"), "authorization_servers": [b], "scopes_supported": ["mcp:tools"]}),
                ),
                ("GET", "/.well-known/oauth-authorization-server") => json_resp(
                    200,
                    json!({"issuer": b, "authorization_endpoint": format!("{b}/authorize"),
                        "token_endpoint": format!("{b}/token"), "registration_endpoint": format!("{b}/register"),
                        "response_types_supported": ["code"], "code_challenge_methods_supported": ["S256"],
                        "token_endpoint_auth_methods_supported": ["none"]}),
                ),
                ("POST", "/register") => json_resp(201, json!({"client_id": "fake-client"})),
                ("GET", "/authorize") => {
                    let q: HashMap<String, String> =
                        cashcode::mcp::auth::flow::query_params(&url).into_iter().collect();
                    let code = format!("code-{}", s.lock().unwrap().codes.len());
                    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
                    let mut seen = s.lock().unwrap();
                    seen.authorize_queries.push(url.clone());
                    seen.codes
                        .insert(code.clone(), (get("code_challenge"), get("code_challenge_method"), get("resource")));
                    let loc = format!("{}?code={code}&state={}", get("redirect_uri"), get("state"));
                    tiny_http::Response::from_string("")
                        .with_status_code(302)
                        .with_header(tiny_http::Header::from_bytes("Location", loc.as_bytes()).unwrap())
                }
                ("POST", "/token") => {
                    let f = form(&body);
                    let mut seen = s.lock().unwrap();
                    seen.token_forms.push(body.clone());
                    let refresh = f.get("grant_type").map(String::as_str) == Some("refresh_token")
                        && f.get("refresh_token").map(String::as_str) == Some("tok-REFRESH-very-secret")
                        && f.get("resource").is_some_and(|r| r.ends_with("/mcp"));
                    let ok = refresh
                        || f.get("grant_type").map(String::as_str) == Some("authorization_code")
                            && seen.codes.remove(f.get("code").map(String::as_str).unwrap_or("")).is_some_and(
                                |(challenge, method, resource)| {
                                    method == "S256"
                                        && Some(&resource) == f.get("resource")
                                        && cashcode::mcp::auth::pkce::challenge_of(
                                            f.get("code_verifier").map(String::as_str).unwrap_or(""),
                                        ) == challenge
                                },
                            );
                    if ok {
                        let token = format!("tok-ACCESS-{}", seen.tokens.len() + 1000);
                        seen.tokens.push(token.clone());
                        json_resp(
                            200,
                            json!({"access_token": token, "token_type": "Bearer", "expires_in": if refresh { 3600 } else { seen.expires_in },
                                "refresh_token": "tok-REFRESH-very-secret"}),
                        )
                    } else {
                        json_resp(400, json!({"error": "invalid_grant"}))
                    }
                }
                ("POST", "/mcp") => {
                    let bearer = auth.strip_prefix("Bearer ").unwrap_or("");
                    if !s.lock().unwrap().tokens.iter().any(|t| t == bearer) {
                        let challenge = format!(
                            "Bearer error=\"invalid_token\", resource_metadata=\"{b}/.well-known/oauth-protected-resource/mcp\""
                        );
                        json_resp(401, json!({"error": "invalid_token"})).with_header(
                            tiny_http::Header::from_bytes("WWW-Authenticate", challenge.as_bytes()).unwrap(),
                        )
                    } else {
                        let msg: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                        let id = msg.get("id").cloned();
                        match msg.get("method").and_then(Value::as_str).unwrap_or("") {
                            "initialize" => json_resp(
                                200,
                                json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-11-25",
                                    "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}}),
                            ),
                            "tools/list" => json_resp(
                                200,
                                json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                                    {"name": "whoami", "inputSchema": {"type": "object"}}]}}),
                            ),
                            _ if id.is_none() => tiny_http::Response::from_string("").with_status_code(202),
                            _ => json_resp(200, json!({"jsonrpc": "2.0", "id": id, "result": {}})),
                        }
                    }
                }
                _ => tiny_http::Response::from_string("not found").with_status_code(404),
            };
            let _ = rq.respond(resp);
        }
    });
    FakeProvider { base, seen, server }
}

fn find<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["servers"].as_array().and_then(|a| a.iter().find(|s| s["name"] == name)).expect("server listed")
}

/// What a browser does with the authorization URL: one GET, the provider's redirect read.
fn visit(url: &str) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder().max_redirects(0).http_status_as_error(false).build().into();
    let resp = agent.get(url).call().expect("provider answers");
    assert_eq!(resp.status().as_u16(), 302);
    resp.headers().get("location").and_then(|v| v.to_str().ok()).expect("redirect").to_string()
}

#[test]
fn authorize_callback_connect_and_sign_out() {
    let fake = start_provider();
    let server = TestServer::start();
    let created = server.post(
        "/api/mcp/servers",
        &json!({"name": "oa", "type": "streamable_http", "display_name": "OAuth test", "url": format!("{}/mcp", fake.base)}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.json()["auth"], Value::Null);

    // Connect without a token: the server's 401 shows as "authorization needed".
    let c = server.post("/api/mcp/servers/oa/connect", &json!({}));
    assert_eq!(c.json()["auth"], "required", "{}", c.body);
    assert_eq!(c.json()["connected"], false);
    assert_eq!(find(&server.get("/api/mcp/servers").json(), "oa")["auth"], "required");

    // Authorize: the provider's URL with PKCE S256, a state, the resource and the scopes.
    let a = server.post("/api/mcp/servers/oa/authorize", &json!({}));
    assert_eq!(a.status, 200, "{}", a.body);
    let url = a.json()["authorization_url"].as_str().expect("url").to_string();
    assert!(url.starts_with(&format!("{}/authorize?", fake.base)), "{url}");
    for part in ["code_challenge_method=S256", "client_id=fake-client", "scope=mcp%3Atools", "state="] {
        assert!(url.contains(part), "{part} missing in {url}");
    }
    let callback = visit(&url);
    let prefix = format!("http://127.0.0.1:{}/api/mcp/oauth/callback?", server.http_port);
    assert!(callback.starts_with(&prefix), "{callback}");
    let path = &callback["http://127.0.0.1:".len() + server.http_port.to_string().len()..];

    // A wrong state is refused and consumes nothing; the right one works exactly once.
    let forged = path.replace("state=", "state=x");
    let bad = server.request("GET", &forged, &[], None);
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("unknown, was already used, or has expired"), "{}", bad.body);
    let ok = server.request("GET", path, &[], None);
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.header("content-type").unwrap_or("").starts_with("text/html"));
    assert_eq!(ok.header("cache-control"), Some("no-store"));
    assert!(ok.header("content-security-policy").is_some_and(|c| c.starts_with("default-src 'none'")));
    assert!(ok.body.contains("oa"), "{}", ok.body);
    let again = server.request("GET", path, &[], None);
    assert_eq!(again.status, 400, "a callback is single-use: {}", again.body);

    let token_forms = fake.seen.lock().unwrap().token_forms.clone();
    assert_eq!(token_forms.len(), 1, "one code exchange: {token_forms:?}");
    let view = find(&server.get("/api/mcp/servers").json(), "oa").clone();
    assert_eq!(view["auth"], "authorized", "{view}");

    // The token file is private.
    let file = server.home.join("data/mcp/oauth/oa.json");
    assert_eq!(std::fs::metadata(&file).expect("token file").permissions().mode() & 0o777, 0o600);

    // Connect now sends the token; the tools are there.
    let c = server.post("/api/mcp/servers/oa/connect", &json!({}));
    assert_eq!(c.json()["connected"], true, "{}", c.body);
    assert_eq!(c.json()["tool_count"], 1);
    let tools = server.get("/api/mcp/servers/oa/tools");

    // Never a token in a response, the log or stderr.
    let access = fake.seen.lock().unwrap().tokens.clone();
    assert_eq!(access.len(), 1);
    let s = server.post("/api/mcp/servers/oa/sign-out", &json!({}));
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.json()["auth"], Value::Null, "{}", s.body);
    assert_eq!(s.json()["connected"], false);
    assert!(!file.exists(), "sign-out deletes the stored tokens");
    let everything = [
        created.body,
        c.body,
        a.body,
        ok.body,
        view.to_string(),
        tools.body,
        s.body,
        server.get("/api/mcp/servers").body,
        server.log_text(),
        server.stderr_text(),
        server.stdout_text(),
    ]
    .join("\n");
    for secret in [access[0].as_str(), "tok-REFRESH-very-secret"] {
        assert!(!everything.contains(secret), "{secret} leaked");
    }
    assert!(server.log_text().contains("event=mcp.oauth.authorized"), "the flow is logged (without tokens)");

    // After sign-out the next connect asks again.
    let c = server.post("/api/mcp/servers/oa/connect", &json!({}));
    assert_eq!(c.json()["auth"], "required", "{}", c.body);
}

#[test]
fn the_callback_needs_no_api_token_but_a_pending_state() {
    let fake = start_provider();
    let token = "oauth-test-token-0123456789";
    let server = TestServer::builder().env("CASHCODE_TOKEN", token).start();
    let bearer = format!("Bearer {token}");
    let auth = [("Authorization", bearer.as_str())];
    let body = json!({"name": "oa", "type": "streamable_http", "display_name": "OAuth test", "url": format!("{}/mcp", fake.base)}).to_string();
    assert_eq!(server.request("POST", "/api/mcp/servers", &auth, Some(&body)).status, 201);
    // authorize itself needs the API token.
    assert_eq!(server.request("POST", "/api/mcp/servers/oa/authorize", &[], None).status, 401);
    let a = server.request("POST", "/api/mcp/servers/oa/authorize", &auth, None);
    assert_eq!(a.status, 200, "{}", a.body);
    let url = a.json()["authorization_url"].as_str().unwrap().to_string();
    let callback = visit(&url);
    let path = callback.split_once("/api/").map(|(_, p)| format!("/api/{p}")).unwrap();
    // No state, an empty one, a different one: refused, the flow stays pending.
    for bad in
        ["/api/mcp/oauth/callback", "/api/mcp/oauth/callback?code=x&state=", "/api/mcp/oauth/callback?code=x&state=abc"]
    {
        let r = server.request("GET", bad, &[], None);
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    // The provider's redirect carries no API token and no Origin, and is accepted.
    let ok = server.request("GET", &path, &[], None);
    assert_eq!(ok.status, 200, "{}", ok.body);
    let list = server.request("GET", "/api/mcp/servers", &auth, None);
    assert_eq!(find(&list.json(), "oa")["auth"], "authorized");
    let within = Duration::from_secs(5);
    assert!(health_within(&server, within).is_some());
}

#[test]
fn an_expired_token_is_refreshed_before_use() {
    let fake = start_provider();
    fake.seen.lock().unwrap().expires_in = 0;
    let server = TestServer::start();
    let body = json!({"name": "oa", "type": "streamable_http", "display_name": "OAuth test", "url": format!("{}/mcp", fake.base)});
    assert_eq!(server.post("/api/mcp/servers", &body).status, 201);
    let url = server.post("/api/mcp/servers/oa/authorize", &json!({})).json()["authorization_url"]
        .as_str()
        .unwrap()
        .to_string();
    let callback = visit(&url);
    let path = callback.split_once("/api/").map(|(_, p)| format!("/api/{p}")).unwrap();
    assert_eq!(server.request("GET", &path, &[], None).status, 200);
    // The stored token is already expired: connect refreshes it first and uses the new one.
    let c = server.post("/api/mcp/servers/oa/connect", &json!({}));
    assert_eq!(c.json()["connected"], true, "{}", c.body);
    let seen = fake.seen.lock().unwrap();
    assert!(seen.token_forms.iter().any(|f| f.contains("grant_type=refresh_token")), "{:?}", seen.token_forms);
    assert_eq!(seen.tokens.len(), 2, "one token from the code, one from the refresh");
    let log = server.log_text();
    assert!(log.contains("event=mcp.oauth.refreshed"), "the refresh is logged");
    for t in seen.tokens.iter().map(String::as_str).chain(["tok-REFRESH-very-secret"]) {
        assert!(!log.contains(t) && !c.body.contains(t), "{t} leaked");
    }
}
