//! File modes: everything the server keeps for itself (data, memory, log and config
//! directories) is the user's alone, directories 0700 and files without group or other bits,
//! while files that tools make in the workspace keep the ordinary modes; an older install's
//! wider roots are closed at start-up.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::common::*;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display())).permissions().mode() & 0o777
}

/// Every entry below `dir` (and `dir` itself), symlinks not followed.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() => walk(&e.path(), out),
            Ok(_) => out.push(e.path()),
            Err(_) => {}
        }
    }
}

#[test]
fn server_files_are_private_and_workspace_files_are_not() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let mcp = super::secrets::key_echo_mcp();
    let r = server.post(
        "/api/mcp/servers",
        &json!({"name":"keysrv","type":"streamable_http","display_name":"keys","description":"modes",
                "url":format!("http://127.0.0.1:{mcp}/mcp"),"headers":{"X-Api-Key":"mode-test-key-123"}}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("call_1", "exec", &[r#"{"command":"echo made > by-exec.txt"}"#]),
        ToolCallSpec::new("call_2", "write_file", &[r#"{"path":"sub/by-tool.txt","content":"x"}"#]),
        ToolCallSpec::new("call_3", "save_memory", &[r#"{"content":"User likes tea"}"#]),
        ToolCallSpec::new("call_4", "mcp_prepare", &[r#"{"server_name":"keysrv"}"#]),
    ]));
    fake.push(Reply::text(&["Done."]));
    ws.message(&chat, "make some files", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("events")["event"], "done");
    // A rename rewrites metadata.json outside a turn.
    let r = server.patch(&format!("/api/sessions/{chat}"), &json!({"title":"renamed"}));
    assert!(r.status < 300, "{}", r.body);

    let mut entries = Vec::new();
    for root in ["data", "memory", "logs", "config"] {
        walk(&server.home.join(root), &mut entries);
    }
    let chat_dir = server.chat_dir(&chat);
    for expected in [
        chat_dir.join("history.jsonl"),
        chat_dir.join("metadata.json"),
        chat_dir.join(".cursor"),
        server.memory().join("MEMORY.md"),
        server.home.join("logs/cashcode.log"),
        server.llm_json(),
        server.home.join("data/mcp/servers.json"),
    ] {
        assert!(entries.contains(&expected), "{} was not written: {entries:?}", expected.display());
    }
    assert!(
        entries.iter().any(|p| p.starts_with(server.home.join("data/mcp_cache")) && p.is_file()),
        "no MCP cache file: {entries:?}"
    );
    assert!(entries.iter().any(|p| p.ends_with("SKILL.md")), "no installed skill: {entries:?}");
    let wide: Vec<String> =
        entries.iter().filter(|p| mode(p) & 0o077 != 0).map(|p| format!("{:o} {}", mode(p), p.display())).collect();
    assert_eq!(wide, Vec::<String>::new(), "group/other may reach these");
    for p in &entries {
        if p.is_dir() {
            assert_eq!(mode(p), 0o700, "{}", p.display());
        }
    }

    // The workspace is the user's own: tools leave ordinary modes there (those of a file this
    // test makes, under the same umask).
    let ws_dir = server.home.join("workspace");
    let reference = ws_dir.join("by-test.txt");
    std::fs::write(&reference, "x").expect("write");
    assert_eq!(mode(&ws_dir.join("by-exec.txt")), mode(&reference));
    assert_eq!(mode(&ws_dir.join("sub/by-tool.txt")), mode(&reference));
    assert_ne!(mode(&ws_dir), 0o700, "the workspace directory is not the server's to close");
}

#[test]
fn an_older_installs_wide_roots_are_closed_at_start_up() {
    let home = fresh_home("oldmodes");
    let chat = "5b7a36c2-8a3e-4d8e-9a51-2f7b0c1d2e3f";
    let set = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
    for d in ["data", "logs", "config/settings"] {
        std::fs::create_dir_all(home.join(d)).expect("mkdir");
    }
    std::fs::create_dir_all(home.join("memory").join(chat)).expect("mkdir");
    std::fs::write(home.join("memory").join(chat).join("history.jsonl"), "").expect("history");
    std::fs::write(home.join("logs/cashcode.log"), "old line\n").expect("log");
    for d in ["data", "memory", "logs", "config", "config/settings"] {
        set(&home.join(d), 0o755);
    }
    set(&home.join("logs/cashcode.log"), 0o644);
    let server = TestServer::builder().home(&home).start();
    for d in ["data", "memory", "logs", "config"] {
        assert_eq!(mode(&server.home.join(d)), 0o700, "{d}");
    }
    assert_eq!(mode(&server.home.join("logs/cashcode.log")), 0o600);
    // The old chat still loads (the server owns the files; only others lost access).
    assert_eq!(server.get(&format!("/api/sessions/{chat}/messages")).status, 200);
}
