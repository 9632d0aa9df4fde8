//! Start-up and configuration (issue 2 scope): `--help`, the `.env` file (real environment
//! wins), refusing a busy port or a non-loopback bind without a token with a clear message,
//! and the two `listening` lines on 127.0.0.1.

use serde_json::json;

use crate::common::server::run_to_exit;
use crate::common::ws::Handshake;
use crate::common::*;

#[test]
fn help_prints_usage_and_exits_zero() {
    let (code, out, _) = run_to_exit(&["--help"], &[]);
    assert_eq!(code, Some(0));
    for flag in [
        "--port",
        "WS_PORT",
        "CASHCODE_ALLOWED_ORIGINS",
        "MEMORY_DIR",
        "CASHCODE_CONFIG_DIR",
        "DREAM_INTERVAL",
        "CASHCODE_MAX_CLIENTS",
    ] {
        assert!(out.contains(flag), "--help does not mention {flag}:\n{out}");
    }
}

#[test]
fn a_busy_port_or_an_unsafe_bind_fails_clearly() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port().to_string();
    let (code, out, err) = run_to_exit(&[], &[("WS_PORT", &port)]);
    assert!(code.is_some_and(|c| c != 0), "must exit non-zero on a busy port, got {code:?}");
    assert!(err.contains(&port), "stderr should name the port: {err}");
    assert!(!out.contains("ws listening"), "{out}");
    let (code, _, err) = run_to_exit(&["--port", &port], &[]);
    assert!(code.is_some_and(|c| c != 0), "busy HTTP port: {code:?}");
    assert!(err.contains(&port), "stderr should name the port: {err}");
    drop(busy);
    // Listening beyond loopback without a token is refused.
    let (code, _, err) = run_to_exit(&[], &[("WS_HOST", "0.0.0.0")]);
    assert!(code.is_some_and(|c| c != 0), "non-loopback bind without a token: {code:?}");
    assert!(err.contains("CASHCODE_TOKEN"), "{err}");
}

#[test]
fn dotenv_is_read_and_the_real_environment_wins() {
    let home = fresh_home("dotenv");
    std::fs::write(
        home.join(".env"),
        "# settings\nCASHCODE_ALLOWED_ORIGINS=http://dotenv.example\nexport DREAM_INTERVAL=0\nWS_PORT=1\n",
    )
    .expect("write .env");
    // WS_PORT=0 from the real environment beats the .env value.
    let server = TestServer::builder().home(&home).start();
    assert_ne!(server.ws_port, 1);
    match WsClient::handshake(server.ws_port, Some("http://dotenv.example")) {
        Handshake::Accepted(mut c) => c.ping_sync(),
        Handshake::Refused(code) => panic!("the .env origin was not applied ({code})"),
    }
    let r = server.request("PUT", "/api/settings/llm", &[("Origin", "http://127.0.0.1:5173")], Some("{}"));
    r.expect(403, json!({"detail":"Origin is not allowed"}));
}
