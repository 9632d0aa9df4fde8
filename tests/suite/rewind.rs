//! Rewind (docs/http-api.md §4.1) through the real binary and the fake model: a chat
//! puts back exactly what its `write_file`, `edit_file` and `exec` calls changed (created files
//! removed, deleted directories recreated, renames undone, modes and binary content restored
//! byte for byte), leaves other chats' and the owner's changes alone and reports them as
//! conflicts, lists files over the copy cap as not rewindable; the chat's messages move to an
//! archive and come back with undo until the next turn; a running turn is a 409; a rewind
//! killed mid-journal is finished at the next start; and a property test of random changes by
//! two chats running at once plus the owner's edits.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

/// Runs one turn of `chat` whose model calls `calls` (one step), then answers "ok". The
/// replies are routed by `tag`, which the message carries, so chats may run at the same time.
fn send_turn(fake: &FakeLlm, ws: &mut WsClient, chat: &str, tag: &str, text: &str, calls: &[(&str, Value)]) {
    if !calls.is_empty() {
        let specs: Vec<ToolCallSpec> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                ToolCallSpec::new(&format!("call_{tag}_{i}_{}", rand_tag()), name, &[&args.to_string()])
            })
            .collect();
        fake.push_for(tag, Reply::tool_calls(&specs));
    }
    fake.push_for(tag, Reply::text(&["ok"]));
    ws.message(chat, &format!("{tag} {text}"), "openai_compatible");
}

fn turn(fake: &FakeLlm, ws: &mut WsClient, chat: &str, tag: &str, text: &str, calls: &[(&str, Value)]) {
    send_turn(fake, ws, chat, tag, text, calls);
    let events = ws.turn_events(chat);
    assert_eq!(events.last().map(|e| e["event"].clone()), Some(json!("done")), "{events:#?}");
}

fn rand_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst).to_string()
}

/// Index of the user message containing `text` in `GET …/messages`.
fn index_of(server: &TestServer, chat: &str, text: &str) -> u64 {
    let msgs = server.get(&format!("/api/sessions/{chat}/messages")).json()["messages"].as_array().cloned().unwrap();
    msgs.iter().position(|m| m["role"] == "user" && m["content"].as_str().unwrap_or("").contains(text)).unwrap() as u64
}

fn rewind(server: &TestServer, chat: &str, body: Value) -> Value {
    let r = server.post(&format!("/api/sessions/{chat}/rewind"), &body);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn paths(list: &Value) -> Vec<String> {
    list.as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect()
}

fn actions(report: &Value) -> Vec<(String, String)> {
    report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_string(), f["action"].as_str().unwrap().to_string()))
        .collect()
}

/// Every path below `root` with its content (`None` for directories) and mode.
fn tree(root: &Path) -> BTreeMap<String, (Option<Vec<u8>>, u32)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (Option<Vec<u8>>, u32)>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let m = fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            if m.is_dir() {
                out.insert(rel, (None, mode));
                walk(root, &p, out);
            } else {
                out.insert(rel, (Some(fs::read(&p).unwrap()), mode));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn rewind_puts_back_exactly_what_the_chat_changed() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let w = server.home.join("workspace");
    fs::create_dir_all(w.join("old/sub")).unwrap();
    fs::write(w.join("old/x.txt"), "x\n").unwrap();
    let binary: Vec<u8> = (0..=255u8).chain([0, 159, 146, 150]).collect();
    fs::write(w.join("old/sub/y.bin"), &binary).unwrap();
    fs::write(w.join("m1.txt"), "move me\n").unwrap();
    fs::write(w.join("script.sh"), "echo hi\n").unwrap();
    fs::set_permissions(w.join("script.sh"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(w.join("shared.txt"), "base\n").unwrap();
    fs::write(w.join("edit.txt"), "alpha\nbeta\n").unwrap();
    fs::write(w.join("big.bin"), vec![7u8; 9_000_000]).unwrap();
    let initial = tree(&w);

    let mut ws = WsClient::connect(&server);
    let a = ws.new_chat();
    turn(&fake, &mut ws, &a, "[A]", "first", &[("write_file", json!({"path":"notes/new.txt","content":"hello\n"}))]);
    turn(
        &fake,
        &mut ws,
        &a,
        "[A]",
        "second",
        &[
            ("edit_file", json!({"path":"edit.txt","old_string":"beta","new_string":"gamma"})),
            (
                "exec",
                json!({"command":"rm -r old && mv m1.txt m2.txt && chmod 755 script.sh && printf '\\000\\001\\377' > bin.dat && printf more >> big.bin && echo changed > shared.txt"}),
            ),
        ],
    );
    let b = ws.new_chat();
    turn(&fake, &mut ws, &b, "[B]", "bee", &[("write_file", json!({"path":"b.txt","content":"B\n"}))]);
    // The owner edits a file the chat changed.
    fs::write(w.join("shared.txt"), "owner edit\n").unwrap();

    let k = index_of(&server, &a, "first");
    assert_eq!(k, 0);
    let preview = rewind(&server, &a, json!({"before_message": k, "dry_run": true}));
    assert_eq!(preview["dry_run"], true);
    assert_eq!(preview["message"], "[A] first");
    assert_eq!(
        actions(&preview),
        [
            ("bin.dat", "delete"),
            ("edit.txt", "restore"),
            ("m1.txt", "create"),
            ("m2.txt", "delete"),
            ("notes", "delete"),
            ("notes/new.txt", "delete"),
            ("old", "create"),
            ("old/sub", "create"),
            ("old/sub/y.bin", "create"),
            ("old/x.txt", "create"),
            ("script.sh", "restore"),
        ]
        .map(|(p, a)| (p.to_string(), a.to_string()))
    );
    let files = preview["files"].as_array().unwrap();
    let edit = files.iter().find(|f| f["path"] == "edit.txt").unwrap();
    assert_eq!(edit["diff"], "--- a/edit.txt\n+++ b/edit.txt\n@@ -1,2 +1,2 @@\n alpha\n-gamma\n+beta\n");
    assert_eq!(files.iter().find(|f| f["path"] == "old/sub/y.bin").unwrap()["binary"], true);
    assert_eq!(files.iter().find(|f| f["path"] == "bin.dat").unwrap()["binary"], true);
    assert_eq!(
        preview["conflicts"],
        json!([{
            "path": "shared.txt",
            "code": "changed_outside",
            "reason": "changed outside this chat since this chat changed it",
            "diff": "--- a/shared.txt\n+++ b/shared.txt\n@@ -1 +1 @@\n-owner edit\n+base\n",
        }])
    );
    assert_eq!(paths(&preview["not_rewindable"]), ["big.bin"]);
    assert_eq!(preview["evicted"], false);
    // A dry run touches nothing.
    assert_eq!(fs::read_to_string(w.join("notes/new.txt")).unwrap(), "hello\n");

    let done = rewind(&server, &a, json!({"before_message": k}));
    assert_eq!(done["dry_run"], false);
    assert_eq!(actions(&done), actions(&preview));
    assert!(done.get("failed").is_none(), "{done}");
    let ev = ws.recv_until(|v| v["event"] == "rewound");
    let last = ev.last().unwrap();
    assert_eq!((&last["chat_id"], &last["before_message"]), (&json!(a), &json!(0)));

    let mut now = tree(&w);
    // The chat's changes are gone; B's file, the owner's edit and the file over the cap stay.
    assert_eq!(now.remove("b.txt").unwrap().0.unwrap(), b"B\n");
    assert_eq!(now.get("shared.txt").unwrap().0.as_deref(), Some(&b"owner edit\n"[..]));
    assert_eq!(now.remove("big.bin").unwrap().0.unwrap().len(), 9_000_004);
    let mut expect = initial.clone();
    expect.remove("big.bin");
    expect.insert("shared.txt".into(), (Some(b"owner edit\n".to_vec()), expect["shared.txt"].1));
    assert_eq!(now, expect);

    // Nothing left to do; the conflict is still reported until forced.
    let again = rewind(&server, &a, json!({"before_message": k, "dry_run": true}));
    assert_eq!(actions(&again), Vec::<(String, String)>::new());
    assert_eq!(paths(&again["conflicts"]), ["shared.txt"]);
    let forced = rewind(&server, &a, json!({"before_message": k, "force": true}));
    assert_eq!(actions(&forced), [("shared.txt".to_string(), "restore".to_string())]);
    assert_eq!(fs::read_to_string(w.join("shared.txt")).unwrap(), "base\n");
    // B's own rewind still removes its file.
    let kb = index_of(&server, &b, "bee");
    let rb = rewind(&server, &b, json!({"before_message": kb}));
    assert_eq!(actions(&rb), [("b.txt".to_string(), "delete".to_string())]);
    assert!(!w.join("b.txt").exists());

    // The store is private.
    let store = server.home.join("data/checkpoints");
    assert_eq!(fs::metadata(&store).unwrap().permissions().mode() & 0o777, 0o700);
    for e in fs::read_dir(store.join("blobs")).unwrap().flatten() {
        assert_eq!(e.metadata().unwrap().permissions().mode() & 0o777, 0o700);
        for f in fs::read_dir(e.path()).unwrap().flatten() {
            assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        }
    }
}

#[test]
fn chat_rewind_archives_messages_and_undo_puts_them_back() {
    let OneChat { fake, server, mut ws, .. } = one_chat();
    let chat = ws.new_chat();
    turn(&fake, &mut ws, &chat, "[C]", "one", &[]);
    turn(&fake, &mut ws, &chat, "[C]", "two", &[("write_file", json!({"path":"two.txt","content":"2"}))]);
    let url = format!("/api/sessions/{chat}/rewind");
    let count =
        |s: &TestServer| s.get(&format!("/api/sessions/{chat}/messages")).json()["messages"].as_array().unwrap().len();
    assert_eq!(count(&server), 4);

    // K must be a user message.
    let r = server.post(&url, &json!({"before_message": 1}));
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(server.post(&url, &json!({"before_message": 9})).status, 422);
    assert_eq!(server.post(&url, &json!({"before_message": "x"})).status, 422);
    assert_eq!(server.post(&url, &json!({})).status, 422);
    assert_eq!(server.post("/api/sessions/nope/rewind", &json!({"before_message": 0})).status, 404);
    assert_eq!(server.post(&format!("{url}/undo"), &json!({})).status, 409);

    let k = index_of(&server, &chat, "two");
    let r = rewind(&server, &chat, json!({"before_message": k, "chat": true, "files": true}));
    assert_eq!(r["removed_messages"], 4, "user, tool call, tool result, answer");
    assert_eq!(r["message"], "[C] two");
    assert_eq!(actions(&r), [("two.txt".to_string(), "delete".to_string())]);
    assert_eq!(count(&server), 2);
    let archive: Value =
        serde_json::from_slice(&fs::read(server.chat_dir(&chat).join("rewound.json")).unwrap()).unwrap();
    assert_eq!(archive[0]["lines"].as_array().unwrap().len(), 4);
    assert_eq!(history_records(&server.home, &chat).len(), 2);

    let r = server.post(&format!("{url}/undo"), &json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(count(&server), 4);
    assert!(!server.chat_dir(&chat).join("rewound.json").exists());
    assert_eq!(server.post(&format!("{url}/undo"), &json!({})).status, 409);

    // After the next turn the archive stays an archive, and cursors keep rising.
    rewind(&server, &chat, json!({"before_message": k, "chat": true, "files": false}));
    turn(&fake, &mut ws, &chat, "[C]", "three", &[]);
    let r = server.post(&format!("{url}/undo"), &json!({}));
    assert_eq!(r.status, 409, "{}", r.body);
    let cursors: Vec<u64> =
        history_records(&server.home, &chat).iter().map(|r| r["cursor"].as_u64().unwrap()).collect();
    assert_eq!(cursors, [1, 2, 7, 8]);
    // The model no longer sees the removed turn.
    let reqs = fake.chat_requests();
    let last = convo(&reqs.last().unwrap().body);
    assert!(!last.iter().any(|(_, c)| c.contains("[C] two")), "{last:?}");

    // A running turn: 409.
    let gate = Gate::new();
    fake.push_for("[C]", Reply::text(&["slow"]).gate_before_head(&gate));
    ws.message(&chat, "[C] four", "openai_compatible");
    gate.wait_reached(WAIT);
    let r = server.post(&url, &json!({"before_message": 0, "dry_run": true}));
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(server.post(&format!("{url}/undo"), &json!({})).status, 409);
    gate.open();
    ws.turn_events(&chat);
}

/// Overwriting conflicts one file at a time, and undo of the files: a files-only rewind is
/// undone file for file (the owner's edits come back, the chat's messages stay), an undo whose
/// file the owner changed again lists it as a conflict with its diff until forced, and undo is
/// refused once nothing is kept.
#[test]
fn per_file_overwrite_and_undo_of_the_files() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let w = server.home.join("workspace");
    fs::create_dir_all(&w).unwrap();
    fs::write(w.join("b.txt"), "b0\n").unwrap();
    fs::write(w.join("c.txt"), "c0\n").unwrap();
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    let calls = [
        ("write_file", json!({"path": "a.txt", "content": "a1\n"})),
        ("write_file", json!({"path": "b.txt", "content": "b1\n"})),
        ("write_file", json!({"path": "c.txt", "content": "c1\n"})),
    ];
    turn(&fake, &mut ws, &chat, "[U]", "write", &calls);
    fs::write(w.join("b.txt"), "owner b\n").unwrap();
    fs::write(w.join("c.txt"), "owner c\n").unwrap();
    let k = index_of(&server, &chat, "write");
    let url = format!("/api/sessions/{chat}/rewind");

    // Shapes of `force`.
    let too_many: Vec<String> = (0..4097).map(|i| format!("f{i}")).collect();
    for bad in [json!([1]), json!("maybe"), json!({"b.txt": true}), json!(["x".repeat(5000)]), json!(too_many)] {
        let r = server.post(&url, &json!({"before_message": k, "force": bad}));
        assert_eq!(r.status, 422, "{bad}: {}", r.body);
    }
    assert_eq!(server.post(&format!("{url}/undo"), &json!({"dry_run": "x"})).status, 422);

    let preview = rewind(&server, &chat, json!({"before_message": k, "dry_run": true}));
    let conflicts = preview["conflicts"].as_array().unwrap();
    assert_eq!(paths(&preview["conflicts"]), ["b.txt", "c.txt"]);
    assert!(conflicts.iter().all(|c| c["code"] == "changed_outside"), "{preview}");
    assert_eq!(conflicts[0]["diff"], "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-owner b\n+b0\n");

    let done = rewind(&server, &chat, json!({"before_message": k, "force": ["b.txt"]}));
    assert_eq!(actions(&done), [("a.txt", "delete"), ("b.txt", "restore")].map(|(p, a)| (p.into(), a.into())));
    assert!(!w.join("a.txt").exists());
    assert_eq!(fs::read_to_string(w.join("b.txt")).unwrap(), "b0\n");
    assert_eq!(fs::read_to_string(w.join("c.txt")).unwrap(), "owner c\n", "not named: left alone");
    ws.recv_until(|v| v["event"] == "rewound");

    // The undo's preview, then the undo: what the rewind replaced comes back.
    let r = server.post(&format!("{url}/undo"), &json!({"dry_run": true}));
    assert_eq!(r.status, 200, "{}", r.body);
    let p = r.json();
    assert_eq!((&p["restored"], &p["dry_run"], &p["before_message"]), (&json!(false), &json!(true), &json!(k)));
    assert_eq!(actions(&p), [("a.txt", "create"), ("b.txt", "restore")].map(|(p, a)| (p.into(), a.into())));
    assert!(!w.join("a.txt").exists(), "a dry run changes nothing");
    let r = server.post(&format!("{url}/undo"), &json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["restored"], false, "a files-only rewind took no messages");
    assert_eq!(fs::read_to_string(w.join("a.txt")).unwrap(), "a1\n");
    assert_eq!(fs::read_to_string(w.join("b.txt")).unwrap(), "owner b\n");
    assert_eq!(fs::read_to_string(w.join("c.txt")).unwrap(), "owner c\n");
    let ev = ws.recv_until(|v| v["event"] == "rewound");
    assert_eq!(ev.last().unwrap()["before_message"], json!(k));
    assert_eq!(server.post(&format!("{url}/undo"), &json!({})).status, 409, "nothing kept any more");

    // The chat's changes are its own again: a second rewind finds them.
    let again = rewind(&server, &chat, json!({"before_message": k, "force": true, "chat": true}));
    assert_eq!(paths(&again["files"]), ["a.txt", "b.txt", "c.txt"]);
    assert_eq!(fs::read_to_string(w.join("c.txt")).unwrap(), "c0\n");
    // The owner writes a.txt again after the rewind: the undo lists it until forced.
    fs::write(w.join("a.txt"), "owner a\n").unwrap();
    let p = server.post(&format!("{url}/undo"), &json!({"dry_run": true})).json();
    assert_eq!(p["restored"], true, "this rewind took the messages too");
    assert_eq!(paths(&p["conflicts"]), ["a.txt"]);
    assert_eq!(p["conflicts"][0]["diff"], "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-owner a\n+a1\n");
    let r = server.post(&format!("{url}/undo"), &json!({"force": ["a.txt"]}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(fs::read_to_string(w.join("a.txt")).unwrap(), "a1\n");
    assert_eq!(fs::read_to_string(w.join("c.txt")).unwrap(), "owner c\n");
    let msgs = server.get(&format!("/api/sessions/{chat}/messages")).json()["messages"].as_array().unwrap().len();
    assert_eq!(msgs, 2, "the messages came back with the files");
}

/// A consolidation whose model call is held while a chat rewind takes out the messages it
/// summarises: released afterwards, its summary is never stored (archived messages are never
/// distilled), and consolidation goes on working for the turns after the rewind.
#[test]
fn a_summary_over_rewound_messages_is_never_stored() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "400").start();
    server.configure_llm(&fake);
    let gate = Gate::new();
    let (stale, fresh) = ("STALE SUMMARY of the a blocks", "FRESH SUMMARY of the later blocks");
    fake.push_completion(Reply::completion(stale).gate_before_head(&gate));
    // Later summaries (turns after the rewind may cross the threshold more than once).
    fake.set_completion_fallback(Reply::completion(fresh));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let send = |ws: &mut WsClient, u: &str, a: &str| {
        fake.push(Reply::text(&[&a.repeat(100)]));
        ws.message(&chat, &u.repeat(150), "openai_compatible");
        let events = ws.turn_events(&chat);
        assert_eq!(events.last().expect("events")["event"], "done");
    };
    // Turn 2 crosses the threshold: the summariser is asked about turn 1 and held there.
    send(&mut ws, "a", "A");
    send(&mut ws, "b", "B");
    gate.wait_reached(WAIT);
    let r = rewind(&server, &chat, json!({"before_message": 0, "chat": true, "files": false}));
    assert_eq!(r["removed_messages"], 4);
    gate.open();
    // The consolidate thread runs one job at a time, and a chat gets a new job only once its
    // last one ended: the fresh summary is stored after the held job was done with.
    let mut turns = 0;
    let summaries = loop {
        let (u, a) = [("c", "C"), ("d", "D"), ("e", "E"), ("f", "F"), ("g", "G"), ("h", "H")][turns];
        send(&mut ws, u, a);
        turns += 1;
        let found: Vec<Value> =
            history_records(&server.home, &chat).into_iter().filter(|r| r["role"] == "summary").collect();
        if found.iter().any(|r| r["content"] == fresh) {
            break found;
        }
        if turns == 6 {
            // The fresh job may still be at the model when the last turn ended.
            break wait_for("the fresh summary", WAIT, || {
                let found: Vec<Value> =
                    history_records(&server.home, &chat).into_iter().filter(|r| r["role"] == "summary").collect();
                found.iter().any(|r| r["content"] == fresh).then_some(found)
            });
        }
    };
    assert!(summaries.iter().all(|r| r["content"] == fresh), "only summaries over kept messages: {summaries:#?}");
    let history = fs::read_to_string(server.chat_dir(&chat).join("history.jsonl")).unwrap();
    assert!(!history.contains(stale) && !history.contains(&"a".repeat(150)), "{history}");
    // The later summaries were computed over the messages after the rewind only.
    let bg: Vec<_> = fake.requests().into_iter().filter(|r| r.is_chat() && r.body["stream"] != json!(true)).collect();
    assert!(bg.len() >= 2);
    for req in &bg[1..] {
        let transcript = req.body.to_string();
        assert!(!transcript.contains(&"a".repeat(150)) && !transcript.contains(&"b".repeat(150)), "{transcript}");
    }
    assert!(bg[1].body.to_string().contains(&"c".repeat(150)));
}

#[test]
fn a_rewind_killed_mid_journal_is_finished_at_the_next_start() {
    let fake = FakeLlm::start();
    let mut server = TestServer::builder().env("CASHCODE_TEST_REWIND_PAUSE", "2").start();
    server.configure_llm(&fake);
    let w = server.home.join("workspace");
    fs::create_dir_all(&w).unwrap();
    fs::write(w.join("keep.txt"), "v1\n").unwrap();
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    turn(
        &fake,
        &mut ws,
        &chat,
        "[K]",
        "go",
        &[("exec", json!({"command":"for i in 1 2 3 4 5; do echo $i > f$i.txt; done; echo v2 > keep.txt"}))],
    );
    let url = format!("{}/api/sessions/{chat}/rewind", server.http_base());
    let stuck = std::thread::spawn(move || {
        let _ = http_agent(Duration::from_secs(30))
            .post(&url)
            .header("content-type", "application/json")
            .send(r#"{"before_message": 0}"#);
    });
    server.wait_log("event=rewind.test_pause", 1);
    assert!(server.home.join("data/checkpoints/journal.json").exists());
    let left = (1..=5).filter(|i| w.join(format!("f{i}.txt")).exists()).count();
    assert_eq!(left, 3, "two of the six paths were put back before the pause");
    server.kill();
    stuck.join().unwrap();
    server.set_env("CASHCODE_TEST_REWIND_PAUSE", None);
    server.restart();
    assert!(!server.home.join("data/checkpoints/journal.json").exists());
    assert_eq!(tree(&w), BTreeMap::from([("keep.txt".to_string(), (Some(b"v1\n".to_vec()), 0o644))]));
    let r = rewind(&server, &chat, json!({"before_message": 0, "dry_run": true}));
    assert_eq!((r["files"].clone(), r["conflicts"].clone()), (json!([]), json!([])));
}

/// The owner's edits and new files made between the crash and the restart
/// survive recovery, whether their path's step had run before the kill or not; the paths left
/// alone are logged and the next preview lists them as conflicts.
#[test]
fn recovery_after_a_kill_never_overwrites_what_the_owner_changed_meanwhile() {
    let fake = FakeLlm::start();
    let mut server = TestServer::builder().env("CASHCODE_TEST_REWIND_PAUSE", "2").start();
    server.configure_llm(&fake);
    let w = server.home.join("workspace");
    fs::create_dir_all(&w).unwrap();
    fs::write(w.join("keep.txt"), "v1\n").unwrap();
    fs::write(w.join("same.txt"), "s1\n").unwrap();
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    let cmd = "for i in 1 2 3 4 5; do echo $i > f$i.txt; done; echo v2 > keep.txt; echo s2 > same.txt";
    turn(&fake, &mut ws, &chat, "[K]", "go", &[("exec", json!({ "command": cmd }))]);
    let url = format!("{}/api/sessions/{chat}/rewind", server.http_base());
    let stuck = std::thread::spawn(move || {
        let _ = http_agent(Duration::from_secs(30))
            .post(&url)
            .header("content-type", "application/json")
            .send(r#"{"before_message": 0}"#);
    });
    server.wait_log("event=rewind.test_pause", 1);
    // The deletes run first (f1, f2 done), then the restores (keep.txt, same.txt not yet).
    assert!(!w.join("f1.txt").exists() && !w.join("f2.txt").exists() && w.join("f3.txt").exists());
    server.kill();
    stuck.join().unwrap();
    // The owner, before the restart: writes a new f1.txt where the rewind had deleted the chat's,
    // edits f4.txt (its delete had not run), and edits keep.txt (its restore had not run).
    fs::write(w.join("f1.txt"), "the owner's new file\n").unwrap();
    fs::write(w.join("f4.txt"), "the owner's edit\n").unwrap();
    fs::write(w.join("keep.txt"), "the owner's v3\n").unwrap();
    server.set_env("CASHCODE_TEST_REWIND_PAUSE", None);
    server.restart();
    assert!(!server.home.join("data/checkpoints/journal.json").exists());
    let file = |s: &str| (Some(s.as_bytes().to_vec()), 0o644);
    assert_eq!(
        tree(&w),
        BTreeMap::from([
            ("f1.txt".to_string(), file("the owner's new file\n")),
            ("f4.txt".to_string(), file("the owner's edit\n")),
            ("keep.txt".to_string(), file("the owner's v3\n")),
            // Untouched by the owner: its step ran at recovery as before.
            ("same.txt".to_string(), file("s1\n")),
        ])
    );
    for p in ["f1.txt", "f4.txt", "keep.txt"] {
        assert!(server.log_text().contains(&format!("event=rewind.recover_conflict chat_id={chat} path={p:?}")), "{p}");
    }
    let r = rewind(&server, &chat, json!({"before_message": 0, "dry_run": true}));
    assert_eq!(r["files"], json!([]), "{r:#}");
    let mut conflicts = paths(&r["conflicts"]);
    conflicts.sort();
    assert_eq!(conflicts, ["f1.txt", "f4.txt", "keep.txt"], "{r:#}");
    assert!(r["conflicts"].as_array().unwrap().iter().all(|c| c["reason"].as_str().unwrap().contains("interrupted")));
    // A plain rewind still leaves them; the owner may force it, and then it is their choice.
    let r = rewind(&server, &chat, json!({"before_message": 0}));
    assert_eq!(r["files"], json!([]), "{r:#}");
    assert_eq!(fs::read_to_string(w.join("keep.txt")).unwrap(), "the owner's v3\n");
}

/// The crate's seeded generator, so a failing seed can be replayed.
type Rng = cashcode::util::prng::Prng;

/// One random tool call of a chat working in its own directory `dir`.
fn random_call(rng: &mut Rng, dir: &str, round: usize) -> (&'static str, Value) {
    let f = format!("{dir}/f{}.txt", rng.below(4));
    let g = format!("{dir}/f{}.txt", rng.below(4));
    let d = format!("{dir}/d{}", rng.below(2));
    match rng.below(8) {
        7 => ("exec", json!({"command": format!("[ -d {d} ] && mv {d} {dir}/moved{round}; true")})),
        0 | 1 => ("write_file", json!({"path": f, "content": format!("{dir} round {round} {}\n", rng.next_u64())})),
        2 => ("exec", json!({"command": format!("mkdir -p {d} && printf '\\000{round}' > {d}/bin{}", rng.below(2))})),
        3 => ("exec", json!({"command": format!("rm -rf {d}")})),
        4 => ("exec", json!({"command": format!("[ -f {f} ] && mv {f} {g}.moved; true")})),
        5 => (
            "exec",
            json!({"command": format!("echo more{round} >> {f}; chmod {} {f}", ["600", "644", "755"][rng.below(3)])}),
        ),
        _ => ("exec", json!({"command": format!("rm -f {f}")})),
    }
}

#[test]
fn property_two_chats_at_once_and_the_owner() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let w = server.home.join("workspace");
    for dir in ["a", "b", "o"] {
        fs::create_dir_all(w.join(dir)).unwrap();
        for i in 0..3 {
            fs::write(w.join(format!("{dir}/f{i}.txt")), format!("{dir} initial {i}\n")).unwrap();
        }
    }
    let seed = std::env::var("REWIND_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x9E37_79B9_7F4A_7C15u64);
    let mut rng = Rng::new(seed);
    let initial = tree(&w);
    let mut wa = WsClient::connect(&server);
    let mut wb = WsClient::connect(&server);
    let a = wa.new_chat();
    let b = wb.new_chat();
    let mut owner_writes: std::collections::HashMap<String, Vec<Vec<u8>>> = Default::default();
    for round in 0..6 {
        let calls_a: Vec<(&str, Value)> = (0..1 + rng.below(3)).map(|_| random_call(&mut rng, "a", round)).collect();
        let calls_b: Vec<(&str, Value)> = (0..1 + rng.below(3)).map(|_| random_call(&mut rng, "b", round)).collect();
        // Both chats run their turns at the same time.
        send_turn(&fake, &mut wa, &a, "[A]", &format!("round {round}"), &calls_a);
        send_turn(&fake, &mut wb, &b, "[B]", &format!("round {round}"), &calls_b);
        for (ws, chat) in [(&mut wa, &a), (&mut wb, &b)] {
            let events = ws.turn_events(chat);
            assert_eq!(events.last().unwrap()["event"], "done", "seed {seed}: {events:#?}");
        }
        // The owner edits between turns: their own files and, now and then, one of A's.
        fs::write(w.join(format!("o/f{}.txt", rng.below(3))), format!("owner {round}\n")).unwrap();
        if rng.below(3) == 0 {
            let p = format!("a/f{}.txt", rng.below(4));
            let text = format!("owner wrote {round}\n");
            fs::write(w.join(&p), &text).unwrap();
            owner_writes.entry(p).or_default().push(text.into_bytes());
        }
    }
    let before = tree(&w);
    let report = rewind(&server, &a, json!({"before_message": 0}));
    let after = tree(&w);
    // Reported: conflicts, and restores that failed (a directory still holding a conflict).
    let mut conflicts = paths(&report["conflicts"]);
    conflicts.extend(report.get("failed").map(paths).unwrap_or_default());
    let restored = paths(&report["files"]);
    assert!(report["not_rewindable"].as_array().unwrap().is_empty(), "seed {seed}: {report}");
    // Outside A's directory nothing changed, and nothing there was restored.
    for (p, v) in &before {
        if !p.starts_with("a/") && p != "a" {
            assert_eq!(after.get(p), Some(v), "seed {seed}: {p} changed by A's rewind; {report}");
            assert!(!restored.contains(p), "seed {seed}: {p} restored; {report}");
        }
    }
    for p in after.keys() {
        assert!(before.contains_key(p) || p.starts_with("a/"), "seed {seed}: {p} appeared");
    }
    // Inside it, every path is as it was before A changed it: as at the start, or as the owner
    // left it before A's changes; anything else is a reported conflict (the owner edited it
    // between or after A's changes, or a command of B ran at the same time).
    for p in initial.keys().chain(after.keys()).filter(|p| p.starts_with("a/")) {
        if conflicts.iter().any(|c| c == p) {
            continue;
        }
        let got = after.get(p);
        let owners =
            got.and_then(|(c, _)| c.clone()).is_some_and(|c| owner_writes.get(p).is_some_and(|w| w.contains(&c)));
        assert!(got == initial.get(p) || owners, "seed {seed}: {p} not restored ({got:?}); {report}");
    }
    // The owner's last word on one of A's files is never overwritten.
    for (p, (content, _)) in before.iter().filter(|(p, _)| p.starts_with("a/")) {
        let last_owner = owner_writes.get(p).and_then(|w| w.last());
        if content.is_some() && content.as_ref() == last_owner {
            assert_eq!(after.get(p).map(|v| &v.0), Some(content), "seed {seed}: owner's {p} overwritten; {report}");
        }
    }
    // B's rewind then takes back B's directory, A's rewound state untouched.
    let rb = rewind(&server, &b, json!({"before_message": 0}));
    let end = tree(&w);
    for (p, v) in &after {
        if !p.starts_with("b/") && p != "b" {
            assert_eq!(end.get(p), Some(v), "seed {seed}: {p} changed by B's rewind; {rb}");
        }
    }
    let mut b_conflicts = paths(&rb["conflicts"]);
    b_conflicts.extend(rb.get("failed").map(paths).unwrap_or_default());
    for p in initial.keys().chain(end.keys()).filter(|p| p.starts_with("b/")) {
        if !b_conflicts.contains(p) {
            assert_eq!(end.get(p), initial.get(p), "seed {seed}: {p} not restored by B; {rb}");
        }
    }
}

/// A directory the chat made, swapped for a symlink to a directory outside the workspace: even a
/// forced rewind never follows it (the restore enters every component with O_NOFOLLOW), and a
/// diff never shows the outside file.
#[test]
fn a_forced_rewind_never_follows_a_symlink_swapped_in() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let w = server.home.join("workspace");
    let outside = server.home.join("outside");
    fs::create_dir_all(&w).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("f.txt"), "outside secret\n").unwrap();
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    turn(&fake, &mut ws, &chat, "[S]", "go", &[("write_file", json!({"path":"d/f.txt","content":"mine\n"}))]);
    fs::remove_dir_all(w.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, w.join("d")).unwrap();

    let preview = rewind(&server, &chat, json!({"before_message": 0, "dry_run": true}));
    assert_eq!(paths(&preview["conflicts"]), ["d", "d/f.txt"], "{preview}");
    assert!(!preview.to_string().contains("outside secret"), "{preview}");
    let forced_preview = rewind(&server, &chat, json!({"before_message": 0, "force": true, "dry_run": true}));
    assert!(!forced_preview.to_string().contains("outside secret"), "{forced_preview}");
    let forced = rewind(&server, &chat, json!({"before_message": 0, "force": true}));
    assert_eq!(paths(&forced["conflicts"]), ["d", "d/f.txt"], "{forced}");
    assert_eq!(actions(&forced), [("d".to_string(), "delete".to_string())]);
    assert_eq!(fs::read_to_string(outside.join("f.txt")).unwrap(), "outside secret\n");
    // The link itself (a path the chat made, forced) is removed; what it pointed to stays.
    assert!(fs::symlink_metadata(w.join("d")).is_err());
    assert!(outside.join("f.txt").exists());
}

/// Over `CASHCODE_CHECKPOINT_MAX_BYTES` the oldest turn's copies go first; the preview says so
/// and lists its paths as not rewindable, while the newer turn still rewinds.
#[test]
fn over_the_budget_the_oldest_turn_is_evicted_and_the_preview_says_so() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CHECKPOINT_MAX_BYTES", "3000").start();
    server.configure_llm(&fake);
    let w = server.home.join("workspace");
    fs::create_dir_all(&w).unwrap();
    fs::write(w.join("f1.txt"), "a".repeat(1500)).unwrap();
    fs::write(w.join("f2.txt"), "b".repeat(1500)).unwrap();
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    turn(&fake, &mut ws, &chat, "[E]", "one", &[("write_file", json!({"path":"f1.txt","content":"x"}))]);
    turn(&fake, &mut ws, &chat, "[E]", "two", &[("write_file", json!({"path":"f2.txt","content":"y"}))]);
    let r = rewind(&server, &chat, json!({"before_message": 0, "dry_run": true}));
    assert_eq!(r["evicted"], true, "{r}");
    assert_eq!(paths(&r["not_rewindable"]), ["f1.txt"]);
    assert_eq!(actions(&r), [("f2.txt".to_string(), "restore".to_string())]);
    let k = index_of(&server, &chat, "two");
    let r = rewind(&server, &chat, json!({"before_message": k}));
    assert_eq!(r["evicted"], false, "{r}");
    assert_eq!(fs::read_to_string(w.join("f2.txt")).unwrap(), "b".repeat(1500));
    assert_eq!(fs::read_to_string(w.join("f1.txt")).unwrap(), "x");
}
