//! The Memory page's HTTP routes (src/http/memory_routes.rs): MEMORY.md and SOUL.md read with
//! their hash and written only with the hash that was read (409 otherwise), bounded in size
//! (413), atomic 0600 writes; MEMORY.md snapshots listed, read and restored (a restore keeps
//! the replaced file as a new snapshot); snapshot ids spelt any way but the list's plain number
//! never reach a file; Dream's status and "run now" on the `dream` thread (202, 409 while a run
//! is under way, the outcome persisted across a restart).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{json, Value};

use super::gate::raw;
use crate::common::*;

/// `src/store/memory_files.rs` MAX_FILE_BYTES.
const MAX_FILE_BYTES: usize = 64 * 1024;

fn sha256(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
}

fn put_memory(server: &TestServer, which: &str, content: &str, hash: Option<&str>) -> HttpResp {
    server.put(&format!("/api/memory/{which}"), &json!({"content": content, "expected_hash": hash}))
}

#[test]
fn memory_and_soul_are_read_with_a_hash_and_written_only_with_it() {
    let server = TestServer::start();
    let mem = server.memory();
    server.get("/api/memory").expect(
        200,
        json!({"max_bytes": MAX_FILE_BYTES,
               "memory": {"content": "", "file": "MEMORY.md", "hash": sha256(""), "name": "memory", "size": 0},
               "soul": {"content": "", "file": "SOUL.md", "hash": sha256(""), "name": "soul", "size": 0}}),
    );
    // First write with the hash read: no snapshot of a blank file.
    let r = put_memory(&server, "memory", "- likes tea\n", Some(&sha256("")));
    r.expect(
        200,
        json!({"content": "- likes tea\n", "file": "MEMORY.md", "hash": sha256("- likes tea\n"), "name": "memory",
               "size": 12, "snapshot": null}),
    );
    assert_eq!(mode(&mem.join("MEMORY.md")), 0o600);
    // A stale hash is refused and changes nothing.
    put_memory(&server, "memory", "lost", Some(&sha256("")))
        .expect(409, json!({"detail": "content changed since it was read"}));
    assert_eq!(std::fs::read_to_string(mem.join("MEMORY.md")).unwrap(), "- likes tea\n");
    // Another process (save_memory, Dream) wrote meanwhile: the editor's hash is stale too.
    std::fs::write(mem.join("MEMORY.md"), "- likes tea\n- by the tool\n").unwrap();
    put_memory(&server, "memory", "mine", Some(&sha256("- likes tea\n")))
        .expect(409, json!({"detail": "content changed since it was read"}));
    let fresh = server.get("/api/memory/memory").json();
    assert_eq!(fresh["content"], "- likes tea\n- by the tool\n");
    let r = put_memory(&server, "memory", "- likes green tea\n", fresh["hash"].as_str());
    assert_eq!((r.status, r.json()["snapshot"].clone()), (200, json!("1")), "{}", r.body);
    assert_eq!(
        std::fs::read_to_string(mem.join(".memory-snapshots/MEMORY.1.md")).unwrap(),
        "- likes tea\n- by the tool\n"
    );
    assert_eq!(mode(&mem.join(".memory-snapshots/MEMORY.1.md")), 0o600);

    // SOUL.md: same rule, no snapshots; a missing hash writes unconditionally (scripts).
    let r = put_memory(&server, "soul", "You are Ana's assistant.", None);
    assert_eq!((r.status, r.json()["snapshot"].clone()), (200, Value::Null), "{}", r.body);
    assert_eq!(std::fs::read_to_string(mem.join("SOUL.md")).unwrap(), "You are Ana's assistant.");
    assert_eq!(mode(&mem.join("SOUL.md")), 0o600);
    put_memory(&server, "soul", "x", Some(&sha256("old")))
        .expect(409, json!({"detail": "content changed since it was read"}));
    assert_eq!(server.get("/api/memory").json()["soul"]["hash"], sha256("You are Ana's assistant."));
}

#[test]
fn memory_writes_are_bounded_and_shaped() {
    let server = TestServer::start();
    let mem = server.memory();
    let at_limit = "a".repeat(MAX_FILE_BYTES);
    assert_eq!(put_memory(&server, "memory", &at_limit, None).status, 200);
    for which in ["memory", "soul"] {
        let file = if which == "memory" { "MEMORY.md" } else { "SOUL.md" };
        let over = put_memory(&server, which, &format!("{at_limit}b"), None);
        over.expect(413, json!({"detail": format!("{file} may be at most {MAX_FILE_BYTES} bytes")}));
        // Multi-byte text counts in bytes; a huge body is refused before parsing.
        let cjk = "\u{5b57}".repeat(MAX_FILE_BYTES / 3 + 1);
        assert_eq!(put_memory(&server, which, &cjk, None).status, 413);
        let huge = format!("{{\"content\": \"{}\"}}", "x".repeat(2 * 1024 * 1024));
        assert_eq!(server.request("PUT", &format!("/api/memory/{which}"), &[], Some(&huge)).status, 413);
    }
    assert_eq!(std::fs::read_to_string(mem.join("MEMORY.md")).unwrap(), at_limit);
    assert!(!mem.join("SOUL.md").exists());

    // Shapes: the shared 422 items.
    server.put("/api/memory/memory", &json!({"expected_hash": null})).expect(
        422,
        json!({"detail": [{"type": "missing", "loc": ["body", "content"], "msg": "Field required", "input": {"expected_hash": null}}]}),
    );
    server.put("/api/memory/memory", &json!({"content": 5})).expect(
        422,
        json!({"detail": [{"type": "string_type", "loc": ["body", "content"], "msg": "Input should be a valid string", "input": 5}]}),
    );
    server.put("/api/memory/memory", &json!({"content": "x", "path": "../../etc/passwd"})).expect(
        422,
        json!({"detail": [{"type": "extra_forbidden", "loc": ["body", "path"], "msg": "Extra inputs are not permitted", "input": "../../etc/passwd"}]}),
    );
    assert_eq!(server.request("PUT", "/api/memory/memory", &[], Some("[1]")).status, 422);
    assert_eq!(server.request("PUT", "/api/memory/memory", &[], Some("{")).status, 422);
    // Only the two files exist.
    for name in ["MEMORY.md", "passwd", "cursor", "Memory"] {
        server
            .put(&format!("/api/memory/{name}"), &json!({"content": "x"}))
            .expect(404, json!({"detail": "memory file not found: use memory or soul"}));
    }
    assert_eq!(server.request("DELETE", "/api/memory/memory", &[], None).status, 405);
    assert_eq!(server.request("POST", "/api/memory", &[], Some("{}")).status, 405);
    assert_eq!(std::fs::read_to_string(mem.join("MEMORY.md")).unwrap(), at_limit);
}

#[test]
fn snapshots_are_listed_read_and_restored_undoably() {
    let server = TestServer::start();
    let mem = server.memory();
    server.get("/api/memory/snapshots").expect(200, json!({"snapshots": [], "total": 0}));
    for text in ["v1\n", "v2\n", "v3\n"] {
        assert_eq!(put_memory(&server, "memory", text, None).status, 200);
    }
    let list = server.get("/api/memory/snapshots").json();
    let ids: Vec<&str> = list["snapshots"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!((ids, list["total"].clone()), (vec!["2", "1"], json!(2)));
    assert_eq!(list["snapshots"][0]["size"], 3);
    assert!(list["snapshots"][0]["created_at"].as_f64().unwrap() > 1.7e9);
    let one = server.get("/api/memory/snapshots/1").json();
    assert_eq!((one["id"].clone(), one["content"].clone(), one["size"].clone()), (json!("1"), json!("v1\n"), json!(3)));

    // Restore 1: the current v3 becomes snapshot 3 first.
    let r = server.post("/api/memory/snapshots/1/restore", &json!({}));
    r.expect(
        200,
        json!({"content": "v1\n", "file": "MEMORY.md", "hash": sha256("v1\n"), "name": "memory", "size": 3, "snapshot": "3"}),
    );
    assert_eq!(server.get("/api/memory/snapshots/3").json()["content"], "v3\n");
    // ... so the restore itself can be undone.
    assert_eq!(server.request("POST", "/api/memory/snapshots/3/restore", &[], None).status, 200);
    assert_eq!(std::fs::read_to_string(mem.join("MEMORY.md")).unwrap(), "v3\n");
    assert_eq!(server.get("/api/memory/snapshots").json()["total"], 4);

    server.get("/api/memory/snapshots/99").expect(404, json!({"detail": "snapshot not found"}));
    server.post("/api/memory/snapshots/99/restore", &json!({})).expect(404, json!({"detail": "snapshot not found"}));
    assert_eq!(server.request("GET", "/api/memory/snapshots/1/restore", &[], None).status, 405);
    assert_eq!(server.request("DELETE", "/api/memory/snapshots/1", &[], None).status, 405);
}

#[test]
fn snapshot_ids_spelt_any_other_way_never_reach_a_file() {
    let server = TestServer::start();
    let mem = server.memory();
    assert_eq!(put_memory(&server, "memory", "v1\n", None).status, 200);
    assert_eq!(put_memory(&server, "memory", "v2\n", None).status, 200);
    // Files a traversal could aim at.
    std::fs::write(mem.join("secret.md"), "TOP-SECRET-1").unwrap();
    std::fs::write(mem.join(".memory-snapshots/MEMORY.x.md"), "TOP-SECRET-2").unwrap();
    std::fs::write(server.home.join("MEMORY.1.md"), "TOP-SECRET-3").unwrap();
    let before = std::fs::read_to_string(mem.join("MEMORY.md")).unwrap();
    let bad_id = "invalid snapshot id: use an id from GET /api/memory/snapshots";
    // Reach the handler, which refuses them (422).
    let handler = [
        "01",
        "0",
        "-1",
        "+1",
        "1.md",
        "MEMORY.1.md",
        "MEMORY.1",
        "x",
        "1%20",
        "%201",
        "0x1",
        "1e0",
        "%EF%BC%91",
        "99999999999999999999",
        "%2E%2E%2E",
        "...",
        "~",
        "1%2E",
        "secret",
        "%252e%252e%252fsecret.md",
        "..%252fsecret.md",
        "%2E%2Esecret.md",
        "1%3B",
        "*",
        "%2A",
    ];
    // Refused by the gate before any handler (400).
    let gate = [
        "..",
        "%2e%2e",
        "%2E%2E",
        ".%2e",
        "1%2F..",
        "..%2Fsecret.md",
        "..%2F..%2FMEMORY.1.md",
        "%2E%2E%2Fsecret.md",
        "..%5Csecret.md",
        "1%5C..",
        "1%00",
        "..;",
        "1;x",
        "%2e%2e%2f%2e%2e%2fMEMORY.1.md",
        "1%0A",
        ".",
    ];
    for id in handler.iter().chain(gate.iter()) {
        for (method, path) in
            [("GET", format!("/api/memory/snapshots/{id}")), ("POST", format!("/api/memory/snapshots/{id}/restore"))]
        {
            let (status, body) = raw(server.http_port, method, &path, &[], None);
            assert!(!body.contains("TOP-SECRET") && !body.contains("v1"), "{method} {path}: {body}");
            let d: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            if handler.contains(id) {
                assert_eq!((status, d["detail"].as_str().unwrap_or("")), (422, bad_id), "{method} {path}: {body}");
            } else {
                assert!(
                    status == 400 && d["detail"].as_str().unwrap_or("").starts_with("invalid request path"),
                    "{method} {path}: {status} {body}"
                );
            }
        }
    }
    // Raw traversals in the target itself.
    for path in [
        "/api/memory/snapshots/../../secret.md",
        "/api/memory/snapshots/1/../../../secret.md",
        "/api/memory/snapshots\\..\\secret.md",
    ] {
        let (status, body) = raw(server.http_port, "GET", path, &[], None);
        assert!(status == 400 && !body.contains("TOP-SECRET"), "{path}: {status} {body}");
    }
    assert_eq!(std::fs::read_to_string(mem.join("MEMORY.md")).unwrap(), before, "nothing was restored");
    assert_eq!(server.get("/api/memory/snapshots").json()["total"], 1);
}

/// `<home>/memory/<chat>/history.jsonl` with `n` alternating records of `content`.
fn write_chat(home: &Path, chat: &str, n: usize, content: &str) {
    let dir = home.join("memory").join(chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    let mut text = String::new();
    for i in 1..=n {
        let role = if i % 2 == 1 { "user" } else { "assistant" };
        text.push_str(
            &json!({"cursor": i, "timestamp": "2026-01-01 00:00", "role": role, "content": content}).to_string(),
        );
        text.push('\n');
    }
    std::fs::write(dir.join("history.jsonl"), text).expect("history");
    std::fs::write(dir.join(".cursor"), n.to_string()).expect("cursor");
}

fn last_run(server: &TestServer) -> Value {
    server.get("/api/dream").json()["last_run"].clone()
}

/// A Dream run whose model call is held while a chat rewind takes the messages it read out of
/// the chat: released, it writes nothing and moves no cursor (archived messages are never
/// distilled).
#[test]
fn a_dream_run_over_rewound_messages_writes_nothing() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let (_ws, chat, held) = chess_turn_then_held_dream(&server, &fake);
    let body = json!({"before_message": 0, "chat": true, "files": false});
    let r = server.post(&format!("/api/sessions/{chat}/rewind"), &body);
    assert_eq!(r.status, 200, "{}", r.body);
    held.open();
    let run = wait_for("the run's end", WAIT, || Some(last_run(&server)).filter(|r| !r.is_null()));
    assert_eq!(run["outcome"], "failed", "{run}");
    assert!(run["detail"].as_str().unwrap_or("").contains("rewound"), "{run}");
    let memory = std::fs::read_to_string(server.home.join("memory/MEMORY.md")).unwrap_or_default();
    assert!(!memory.contains("chess"), "{memory}");
    let cursors = std::fs::read_to_string(server.home.join("memory/.dream_cursor")).unwrap_or_default();
    assert!(!cursors.contains(&chat), "{cursors}");
}

#[test]
fn dream_status_and_run_now() {
    let fake = FakeLlm::start();
    let home = fresh_home("dream-api");
    std::fs::create_dir_all(home.join("memory")).unwrap();
    write_chat(&home, "dream-x", 4, "abcde");
    std::fs::write(home.join("memory/.dream_cursor"), r#"{"dream-x": 1}"#).unwrap();
    let mut server = TestServer::builder().home(&home).start();
    server.configure_llm(&fake);
    server.get("/api/dream").expect(
        200,
        json!({"batch_records": 50, "enabled": false, "interval_sec": null, "last_run": null, "next_run_at": null,
               "queued": false, "running": false,
               "undistilled": {"chars": 15, "chars_capped": false, "chats": 1, "records": 3}}),
    );

    // With the timer off, "run now" still runs; before any turn there is no model to use.
    let r = server.post("/api/dream/run", &json!({}));
    assert_eq!(r.status, 202, "{}", r.body);
    let run = wait_for("the no-model run", WAIT, || Some(last_run(&server)).filter(|r| !r.is_null()));
    assert_eq!((run["outcome"].clone(), run["trigger"].clone()), (json!("no_model"), json!("manual")));
    assert!(fake.requests().iter().all(|r| r.body["stream"] == json!(true) || !r.is_chat()));

    // A turn names the model; phase 1 is held so the second "run now" meets a running one.
    let (_ws, _chat, held) = chess_turn_then_held_dream(&server, &fake);
    server.post("/api/dream/run", &json!({})).expect(409, json!({"detail": "Dream is already running"}));
    let during = server.get("/api/dream").json();
    assert_eq!((during["running"].clone(), during["undistilled"]["chats"].clone()), (json!(true), json!(2)));
    held.open();
    let run = wait_for("the written run", WAIT, || Some(last_run(&server)).filter(|r| r["outcome"] == "written"));
    assert_eq!(
        (run["records"].clone(), run["chats"].clone(), run["detail"].clone()),
        (json!(5), json!(2), Value::Null)
    );
    assert!(run["finished_at"].as_f64().unwrap() >= run["started_at"].as_f64().unwrap());
    assert_eq!(std::fs::read_to_string(home.join("memory/MEMORY.md")).unwrap(), "- plays chess\n");
    let after = server.get("/api/dream").json();
    assert_eq!((after["running"].clone(), after["undistilled"]["records"].clone()), (json!(false), json!(0)));
    let status = home.join("memory/.dream_status.json");
    assert_eq!(mode(&status), 0o600);

    // The last outcome survives a restart; the timer, when on, says when it fires next.
    server.set_env("DREAM_INTERVAL", Some("300"));
    server.restart();
    let d = server.get("/api/dream").json();
    assert_eq!((d["enabled"].clone(), d["interval_sec"].clone()), (json!(true), json!(300)));
    let back = &d["last_run"];
    for k in ["outcome", "records", "chats", "trigger", "detail"] {
        assert_eq!(back[k], run[k], "{k} after the restart");
    }
    // Times to within a microsecond (serde_json's default float parsing is not exact).
    assert!((back["finished_at"].as_f64().unwrap() - run["finished_at"].as_f64().unwrap()).abs() < 1e-6);
    let next = d["next_run_at"].as_f64().expect("next_run_at");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now + 280.0..now + 301.0).contains(&next), "{next} vs {now}");
    assert_eq!(server.request("GET", "/api/dream/run", &[], None).status, 405);
    assert_eq!(server.request("POST", "/api/dream", &[], Some("{}")).status, 405);
}

/// One turn ("remember that I play chess"), then a Dream run started and held before its first
/// model call: the chat's id, its client and the gate holding the run (both kept alive).
fn chess_turn_then_held_dream(server: &TestServer, fake: &FakeLlm) -> (WsClient, String, Gate) {
    let mut ws = WsClient::connect(server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["fine"]));
    ws.message(&chat, "remember that I play chess", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("end")["event"], "done");
    let held = Gate::new();
    fake.push_completion(Reply::completion("Add: the user plays chess.").gate_before_head(&held));
    fake.push_completion(Reply::completion("- plays chess"));
    assert_eq!(server.post("/api/dream/run", &json!({})).status, 202);
    held.wait_reached(WAIT);
    (ws, chat, held)
}
