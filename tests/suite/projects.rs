//! A project per chat (docs/http-api.md §11, src/projects.rs) against the real binary: a chat
//! bound to a project directory works there (file tools, `exec` and its sandbox's writable
//! root, rewind), a chat without one works in the workspace as before; only directories under
//! the allowed roots can be bound, decided by the server from the symlink-resolved path however
//! the request spells it; the owner's list is checked, stored and obeyed, also by chats bound
//! before it changed.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::common::*;

fn start(env: &[(&str, &str)]) -> (FakeLlm, TestServer, PathBuf) {
    let fake = FakeLlm::start();
    let mut b = TestServer::builder();
    for (k, v) in env {
        b = b.env(k, v);
    }
    let server = b.start();
    server.configure_llm(&fake);
    let ws = server.home.join("workspace");
    std::fs::create_dir_all(&ws).expect("workspace");
    (fake, server, ws.canonicalize().expect("workspace"))
}

/// `new_chat` with a project: the new chat's id, or the error's detail.
fn new_chat(ws: &mut WsClient, project: &str) -> Result<String, String> {
    ws.send(&json!({"type": "new_chat", "project": project}));
    let v = ws.recv();
    match v["event"].as_str() {
        Some("attached") => Ok(v["chat_id"].as_str().expect("chat id").to_string()),
        Some("error") => Err(v["detail"].as_str().unwrap_or("").to_string()),
        _ => panic!("unexpected {v}"),
    }
}

/// One turn in which the model makes these calls, then says "ok".
fn turn(fake: &FakeLlm, ws: &mut WsClient, chat: &str, calls: &[(&str, Value)]) -> Vec<Value> {
    let specs: Vec<ToolCallSpec> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| ToolCallSpec::new(&format!("c{i}"), name, &[&args.to_string()]))
        .collect();
    fake.push(Reply::tool_calls(&specs));
    fake.push(Reply::text(&["ok"]));
    ws.message(chat, "work", "openai_compatible");
    ws.turn_events(chat)
}

fn results(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["event"] == "tool_result")
        .map(|e| e["result"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_chat_bound_to_a_project_works_there_and_others_in_the_workspace() {
    let (fake, server, ws_dir) = start(&[]);
    let project = ws_dir.join("app");
    std::fs::create_dir_all(&project).expect("project");
    let mut ws = WsClient::connect(&server);
    let chat = new_chat(&mut ws, &project.display().to_string()).expect("bound");
    let events = turn(
        &fake,
        &mut ws,
        &chat,
        &[
            ("write_file", json!({"path": "a.txt", "content": "in the project\n"})),
            ("exec", json!({"command": "pwd; echo x > b.txt"})),
        ],
    );
    assert_eq!(events.last().unwrap()["event"], "done", "{events:#?}");
    assert_eq!(std::fs::read_to_string(project.join("a.txt")).expect("a.txt"), "in the project\n");
    assert!(project.join("b.txt").exists() && !ws_dir.join("a.txt").exists() && !ws_dir.join("b.txt").exists());
    assert!(results(&events)[1].contains(&project.display().to_string()), "{:?}", results(&events));

    // A chat without a project works in the workspace, as before.
    let plain = ws.new_chat();
    turn(&fake, &mut ws, &plain, &[("write_file", json!({"path": "w.txt", "content": "w\n"}))]);
    assert!(ws_dir.join("w.txt").exists());

    // The list shows the project on the bound chat only.
    let sessions = server.get("/api/sessions").json()["sessions"].as_array().cloned().unwrap_or_default();
    let row = |id: &str| sessions.iter().find(|s| s["chat_id"] == id).cloned().expect("listed");
    assert_eq!(row(&chat)["project"], json!(project.display().to_string()));
    assert!(row(&plain).get("project").is_none(), "{:?}", row(&plain));
}

#[test]
fn only_directories_under_the_allowed_roots_can_be_bound_however_spelled() {
    let (_fake, server, ws_dir) = start(&[]);
    let home = server.home.canonicalize().expect("home");
    std::fs::create_dir_all(ws_dir.join("app")).expect("app");
    std::fs::create_dir_all(ws_dir.join("b")).expect("b");
    std::fs::create_dir_all(home.join("beside")).expect("beside");
    std::os::unix::fs::symlink(home.join("beside"), ws_dir.join("link-out")).expect("symlink");
    std::fs::write(ws_dir.join("file.txt"), "x").expect("file");
    let w = ws_dir.display().to_string();
    let h = home.display().to_string();
    let mut ws = WsClient::connect(&server);
    for ok in [format!("{w}/app"), format!("{w}/app/"), format!("{w}/./app"), format!("{w}/b/../app"), w.clone()] {
        assert!(new_chat(&mut ws, &ok).is_ok(), "{ok}");
    }
    for (bad, why) in [
        (format!("{w}/../beside"), "not under an allowed project root"),
        (format!("{w}/link-out"), "not under an allowed project root"),
        // `..` after a symlink leaves from the link's target, as the kernel resolves it.
        (format!("{w}/link-out/../app"), "does not exist"),
        (format!("{h}/data"), "overlaps CashCode's own directory"),
        (format!("{h}/memory"), "overlaps CashCode's own directory"),
        (h.clone(), "overlaps CashCode's own directory"),
        ("/".to_string(), "overlaps CashCode's own directory"),
        (format!("{w}/file.txt"), "is not a directory"),
        (format!("{w}/missing"), "does not exist"),
        ("app".to_string(), "must be an absolute path"),
    ] {
        let err = new_chat(&mut ws, &bad).expect_err(&bad);
        assert!(err.contains(why), "{bad}: {err}");
        let r = server.post("/api/sessions", &json!({"project": bad}));
        assert_eq!(r.status, 422, "{bad}: {}", r.body);
        assert!(r.json()["detail"][0]["msg"].as_str().is_some_and(|m| m.contains(why)), "{}", r.body);
    }
    // Only the five good requests made chats.
    let count = server.get("/api/sessions").json()["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(count, 5);
    let r = server.post("/api/sessions", &json!({"project": format!("{w}/app"), "extra": 1}));
    assert_eq!(r.status, 422);
    let r = server.post("/api/sessions", &json!({"project": format!("{w}/app")}));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["project"], json!(format!("{w}/app")));
}

#[test]
fn a_project_outside_the_workspace_is_confined_rewound_and_obeys_the_owners_list() {
    let outside = fresh_home("projects-root");
    let root = outside.canonicalize().expect("root");
    let project = root.join("repo");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(project.join("keep.txt"), "v1\n").expect("keep");
    let (fake, server, ws_dir) = start(&[("CASHCODE_PROJECT_ROOTS", root.to_str().expect("path"))]);
    let mut ws = WsClient::connect(&server);
    let chat = new_chat(&mut ws, &project.display().to_string()).expect("bound");
    // The sandbox's writable root is the project: the workspace is out of reach.
    let target = ws_dir.join("from-project.txt");
    let events = turn(
        &fake,
        &mut ws,
        &chat,
        &[
            ("write_file", json!({"path": "keep.txt", "content": "v2\n"})),
            ("exec", json!({"command": format!("echo y > made.txt; echo z > {}", target.display())})),
        ],
    );
    assert_eq!(events.last().unwrap()["event"], "done", "{events:#?}");
    assert_eq!(std::fs::read_to_string(project.join("keep.txt")).expect("keep"), "v2\n");
    assert!(project.join("made.txt").exists());
    assert!(!target.exists(), "a confined command in a project cannot write to the workspace");

    // Rewind puts the project's files back from its own store.
    let r = server
        .post(&format!("/api/sessions/{chat}/rewind"), &json!({"before_message": 0, "files": true, "chat": false}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(std::fs::read_to_string(project.join("keep.txt")).expect("keep"), "v1\n");
    assert!(!project.join("made.txt").exists());

    // The Safety page's list: checked, stored, and a narrowed list stops the bound chat.
    let r = server.put("/api/settings/projects", &json!({"roots": [format!("{}/data", server.home.display())]}));
    assert_eq!(r.status, 422, "{}", r.body);
    let r = server.put("/api/settings/projects", &json!({"roots": [ws_dir]}));
    assert_eq!(r.status, 200, "{}", r.body);
    let view = server.get("/api/settings/projects").json();
    assert_eq!(view["roots"], json!([ws_dir]));
    assert_eq!(view["env_roots"], json!([root]));
    // The environment's root still allows the project: the chat goes on.
    let events = turn(&fake, &mut ws, &chat, &[]);
    assert_eq!(events.last().unwrap()["event"], "done", "{events:#?}");
    drop(ws);
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn a_first_message_binds_and_a_bound_chat_cannot_move() {
    let (fake, server, ws_dir) = start(&[]);
    let a = ws_dir.join("a");
    let b = ws_dir.join("b");
    std::fs::create_dir_all(&a).expect("a");
    std::fs::create_dir_all(&b).expect("b");
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    fake.push(Reply::text(&["hi"]));
    let mut frame = msg(&chat, "hello", "openai_compatible");
    frame["project"] = json!(a.display().to_string());
    ws.send(&frame);
    assert_eq!(ws.turn_events(&chat).last().unwrap()["event"], "done");
    let meta: Value = serde_json::from_slice(
        &std::fs::read(server.home.join("memory").join(&chat).join("metadata.json")).expect("meta"),
    )
    .expect("json");
    assert_eq!(meta["project"], json!(a.display().to_string()));
    frame["project"] = json!(b.display().to_string());
    ws.send(&frame);
    let err = ws.recv();
    assert_eq!(err["event"], "error");
    assert!(err["detail"].as_str().is_some_and(|d| d.contains("start a new chat")), "{err}");
    assert_eq!(fake.chat_requests().len(), 1, "the refused message started no turn");
}
