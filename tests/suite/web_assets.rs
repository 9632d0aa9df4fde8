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
