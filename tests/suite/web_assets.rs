//! The built web client served at `/` (src/http/assets.rs): files by path, `index.html` for
//! client routes, long caching for hashed assets, nothing outside the client directory, and
//! `/api` never shadowed.

use serde_json::json;

use crate::common::*;

#[test]
fn serves_the_client_build_and_nothing_else() {
    let home = fresh_home("assets");
    let dist = home.join("dist");
    std::fs::create_dir_all(dist.join("assets")).expect("mkdir");
    std::fs::write(dist.join("index.html"), "<!doctype html><title>CashCode</title>").expect("write");
    std::fs::write(dist.join("assets/app-1234.js"), "console.log(1)").expect("write");
    std::fs::write(home.join("secret.txt"), "outside").expect("write");
    let server = TestServer::builder().home(&home).env("CASHCODE_CLIENT_DIR", &dist.display().to_string()).start();

    let r = server.get("/");
    assert_eq!((r.status, r.body.as_str()), (200, "<!doctype html><title>CashCode</title>"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));

    let r = server.get("/assets/app-1234.js");
    assert_eq!((r.status, r.body.as_str()), (200, "console.log(1)"));
    assert_eq!(r.header("content-type"), Some("text/javascript; charset=utf-8"));
    assert_eq!(r.header("cache-control"), Some("public, max-age=31536000, immutable"));

    // Client-side routes get the app; missing files and escapes do not.
    assert_eq!(server.get("/chat/some-id").status, 200);
    server.get("/assets/missing.js").expect(404, json!({"detail":"Not Found"}));
    server.get("/..%2Fsecret.txt").expect(404, json!({"detail":"Not Found"}));
    server.get("/%2E%2E/secret.txt").expect(404, json!({"detail":"Not Found"}));
    server.get("/.hidden").expect(404, json!({"detail":"Not Found"}));
    // The API keeps its own 404s.
    server.get("/api/nope").expect(404, json!({"detail":"Not Found"}));
    assert_eq!(server.get("/api/health").status, 200);
}

/// Every answer says `nosniff` and may not be framed; the client's pages carry a policy that
/// lets them talk only to this server's API and the WebSocket `/api/client-config` names, for
/// whichever loopback name the page was loaded from.
#[test]
fn answers_carry_nosniff_no_framing_and_the_pages_a_tight_csp() {
    let home = fresh_home("assets-csp");
    let dist = home.join("dist");
    std::fs::create_dir_all(&dist).expect("mkdir");
    std::fs::write(dist.join("index.html"), "<!doctype html><title>CashCode</title>").expect("write");
    let server = TestServer::builder().home(&home).env("CASHCODE_CLIENT_DIR", &dist.display().to_string()).start();
    let ws = server.ws_port;
    for host in [format!("127.0.0.1:{}", server.http_port), format!("localhost:{}", server.http_port)] {
        let name = host.split(':').next().unwrap_or_default().to_string();
        let page = server.request("GET", "/chat/x", &[("Host", &host)], None);
        assert_eq!(page.status, 200);
        let csp = page.header("content-security-policy").unwrap_or_default().to_string();
        for directive in [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data: blob: https:",
            &format!("connect-src 'self' ws://{name}:{ws} wss://{name}:{ws}"),
            "object-src 'none'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.split(';').any(|d| d.trim() == directive), "{directive:?} missing from {csp:?}");
        }
        assert!(!csp.contains("unsafe-"), "{csp}");
        let config = server.request("GET", "/api/client-config", &[("Host", &host)], None);
        assert_eq!(config.json()["ws_url"], format!("ws://{name}:{ws}/"), "the policy and client-config agree");
        assert_eq!(page.header("x-frame-options"), Some("DENY"));
        assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    }
    // API answers, errors and refusals included: nosniff, no framing, a policy that loads nothing.
    for (method, path, headers) in [
        ("GET", "/api/health", vec![]),
        ("GET", "/api/nope", vec![]),
        ("GET", "/api%2Fx", vec![]),
        ("PUT", "/api/settings/llm", vec![("Origin", "http://evil.example")]),
        ("GET", "/assets/missing.js", vec![]),
    ] {
        let r = server.request(method, path, &headers, None);
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{method} {path} ({})", r.status);
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{method} {path}");
        let csp = r.header("content-security-policy").unwrap_or_default();
        if path.starts_with("/api/") {
            assert_eq!(csp, "default-src 'none'; frame-ancestors 'none'", "{method} {path}");
        } else {
            assert!(csp.contains("frame-ancestors 'none'"), "{method} {path}: {csp}");
        }
    }
}
