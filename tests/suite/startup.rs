//! Start-up and configuration: `--help`, the `.env` file (real environment
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
    // The config directory's .env (the harness sets CASHCODE_CONFIG_DIR to <home>/config).
    std::fs::create_dir_all(home.join("config")).expect("config dir");
    std::fs::write(
        home.join("config/.env"),
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

/// A `.env` in the directory the server is started from (a cloned repository, a workspace the
/// model wrote to) is not read: it cannot widen the allowed origins or open `web_fetch` to
/// private addresses, and one warning names it.
#[test]
fn a_dotenv_in_the_working_directory_is_ignored_with_a_warning() {
    let home = fresh_home("cwd-dotenv");
    let planted = home.join(".env");
    std::fs::write(
        &planted,
        "CASHCODE_ALLOWED_ORIGINS=http://evil.example\nCASHCODE_DEV=1\nCASHCODE_WEB_FETCH_ALLOW_PRIVATE=1\n",
    )
    .expect("write .env");
    let server = TestServer::builder().home(&home).start();
    for origin in ["http://evil.example", "http://127.0.0.1:5173"] {
        assert!(
            matches!(WsClient::handshake(server.ws_port, Some(origin)), Handshake::Refused(403)),
            "{origin} was allowed by the working directory's .env"
        );
        let r = server.request("PUT", "/api/settings/llm", &[("Origin", origin)], Some("{}"));
        r.expect(403, json!({"detail":"Origin is not allowed"}));
    }
    let warning = format!("ignored {}", planted.display());
    let log = server.wait_log(&warning, 1);
    assert_eq!(log.matches(&warning).count(), 1, "one warning");
    assert!(server.stderr_text().contains(&warning), "stderr names the file:\n{}", server.stderr_text());
}

/// `--env-file PATH` is the one `.env` read; a missing one stops start-up with its name.
#[test]
fn env_file_flag_names_the_one_file_read() {
    let home = fresh_home("env-file");
    let chosen = home.join("chosen.env");
    std::fs::write(&chosen, "CASHCODE_ALLOWED_ORIGINS=http://chosen.example\n").expect("write");
    std::fs::create_dir_all(home.join("config")).expect("config dir");
    std::fs::write(home.join("config/.env"), "CASHCODE_ALLOWED_ORIGINS=http://config.example\n").expect("write");
    let server = TestServer::builder().home(&home).arg("--env-file").arg(&chosen.display().to_string()).start();
    assert!(matches!(WsClient::handshake(server.ws_port, Some("http://chosen.example")), Handshake::Accepted(_)));
    assert!(matches!(WsClient::handshake(server.ws_port, Some("http://config.example")), Handshake::Refused(403)));
    let (code, _, err) = run_to_exit(&["--env-file", "/nonexistent/cashcode.env"], &[]);
    assert!(code.is_some_and(|c| c != 0), "{code:?}");
    assert!(err.contains("/nonexistent/cashcode.env"), "{err}");
}
