//! Crash safety (docs/storage.md §1 write discipline): the server is SIGKILLed
//! ([`TestServer::kill`]) at several points of a turn — while the model holds its first byte,
//! mid-stream, during a tool, during consolidation, during Dream, and at a sweep of arbitrary
//! moments — and restarted on the same home. Afterwards every user message whose turn reached
//! the model is in history exactly once, no record is duplicated, cursors run 1..n, every JSON
//! file parses, no write-ahead file is left, and MEMORY.md content is never lost.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// Checks every chat directory and the memory-root files; returns each chat's records.
#[track_caller]
fn check_home(home: &Path) -> BTreeMap<String, Vec<Value>> {
    let memory = home.join("memory");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&memory).expect("memory dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name == ".dream_cursor" {
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect(".dream_cursor JSON");
            assert!(v.is_object(), ".dream_cursor is an object: {v}");
            continue;
        }
        if !path.is_dir() || name.starts_with('.') {
            continue;
        }
        let recs = history_records(home, &name);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r["cursor"].as_u64(), Some(i as u64 + 1), "{name}: cursors not 1..n: {recs:#?}");
        }
        // A tool_calls record is followed by one tool record per call.
        for (i, r) in recs.iter().enumerate() {
            if r["role"] == "tool_calls" {
                let n = r["tool_calls"].as_array().map(Vec::len).unwrap_or(0);
                let results = recs[i + 1..].iter().take_while(|x| x["role"] == "tool").count();
                assert_eq!(results, n, "{name}: tool_calls without all its results");
            }
        }
        for file in std::fs::read_dir(&path).expect("chat dir").flatten() {
            let f = file.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(file.path()).expect("read chat file");
            match f.as_str() {
                "history.jsonl" => {}
                "metadata.json" => {
                    let v: Value = serde_json::from_str(&text).expect("metadata.json parses");
                    assert!(v.is_object());
                }
                ".cursor" => {
                    let c: u64 = text.trim().parse().expect(".cursor is an integer");
                    assert_eq!(c, recs.len() as u64, "{name}: .cursor");
                }
                // Kept blank between turns (rewritten in place, fsx::write_ahead); start-up
                // recovery removes every one, so a turn's record left there is a failure.
                ".pending_turn.json" => {
                    assert!(text.trim().is_empty(), "{name}: a pending turn left after start-up: {text}")
                }
                other => assert!(!other.ends_with(".json"), "{name}: stray file {other}"),
            }
        }
        out.insert(name, recs);
    }
    out
}

/// `user` record contents of a chat.
fn users(recs: &[Value]) -> Vec<String> {
    recs.iter().filter(|r| r["role"] == "user").map(|r| r["content"].as_str().unwrap_or("").to_string()).collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// One completed turn `q` -> `a`.
fn plain_turn(fake: &FakeLlm, ws: &mut WsClient, chat: &str, q: &str, a: &str) {
    fake.push(Reply::text(&[a]));
    ws.message(chat, q, "openai_compatible");
    assert_eq!(ws.turn_events(chat).last().expect("end")["event"], "done");
}

/// After the restart: the next turn's request carries `expected_users` (then the new one),
/// each exactly once.
fn next_turn_sees(fake: &FakeLlm, server: &TestServer, chat: &str, expected_users: &[&str]) {
    let mut ws = WsClient::connect(server);
    ws.attach(chat, None);
    plain_turn(fake, &mut ws, chat, "after the crash", "recovered");
    let reqs = fake.chat_requests();
    let last = reqs.iter().rev().find(|r| r.body["stream"] == json!(true)).expect("a turn request");
    let sent: Vec<String> = convo(&last.body).into_iter().filter(|(r, _)| r == "user").map(|(_, c)| c).collect();
    let mut want = strings(expected_users);
    want.push("after the crash".into());
    assert_eq!(sent, want);
}

#[test]
fn kill_while_the_model_holds_its_first_byte() {
    let OneChat { fake, mut server, mut ws, chat } = one_chat();
    plain_turn(&fake, &mut ws, &chat, "first", "one");
    let gate = Gate::new();
    fake.push(Reply::text(&["never"]).gate_before_head(&gate));
    ws.message(&chat, "second", "openai_compatible");
    gate.wait_reached(WAIT);
    server.kill();
    gate.open();
    drop(ws);

    server.restart();
    let recs = check_home(&server.home).remove(&chat).expect("chat");
    assert_eq!(users(&recs), strings(&["first", "second"]));
    assert!(recs.iter().all(|r| r["content"] != "never"));
    // A second restart does not recover the same message again.
    server.restart();
    let recs = check_home(&server.home).remove(&chat).expect("chat");
    assert_eq!(users(&recs), strings(&["first", "second"]));
    next_turn_sees(&fake, &server, &chat, &["first", "second"]);
    check_home(&server.home);
}

#[test]
fn kill_mid_stream() {
    let OneChat { fake, mut server, mut ws, chat } = one_chat();
    plain_turn(&fake, &mut ws, &chat, "first", "one");
    let gate = Gate::new();
    fake.push(Reply::text(&["Partial ", "answer"]).gate_before_chunk(1, &gate));
    ws.message(&chat, "stream please", "openai_compatible");
    ws.recv_until(|v| v["event"] == "delta");
    gate.wait_reached(WAIT);
    server.kill();
    gate.open();
    drop(ws);

    server.restart();
    let recs = check_home(&server.home).remove(&chat).expect("chat");
    assert_eq!(users(&recs), strings(&["first", "stream please"]));
    assert!(recs.iter().all(|r| !r["content"].as_str().unwrap_or("").starts_with("Partial")), "{recs:#?}");
    next_turn_sees(&fake, &server, &chat, &["first", "stream please"]);
    check_home(&server.home);
}

/// Whether a child of `parent` runs a command line containing `needle` (the exec tool's shell).
fn command_running(parent: u32, needle: &str) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    // `pid (comm) state ppid ...`: the comm may hold spaces, so split after its last `)`.
    let ppid = |pid: &str| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
    };
    procs.filter_map(Result::ok).any(|p| {
        let pid = p.file_name().to_string_lossy().into_owned();
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        // The server's child, or (a confined command) its call's reaper's.
        let up = ppid(&pid);
        (up == Some(parent) || up.and_then(|r| ppid(&r.to_string())) == Some(parent))
            && String::from_utf8_lossy(&cmdline).contains(needle)
    })
}

#[test]
fn kill_during_tool_execution() {
    let fake = FakeLlm::start();
    let mut server = TestServer::with_llm(&fake);
    std::fs::create_dir_all(server.home.join("workspace")).expect("workspace");
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    plain_turn(&fake, &mut ws, &chat, "first", "one");
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("call_w", "write_file", &["{\"path\":\"before.txt\",\"content\":\"x\"}"]),
        ToolCallSpec::new("call_x", "exec", &["{\"command\":\"sleep 2; touch after.txt\"}"]),
    ]));
    ws.message(&chat, "use tools", "openai_compatible");
    ws.recv_until(|v| v["event"] == "tool_call" && v["call_id"] == "call_x");
    let pid = server.pid;
    wait_for("the exec command running", WAIT, || command_running(pid, "touch after.txt").then_some(()));
    server.kill();
    drop(ws);
    assert!(server.home.join("workspace/before.txt").exists());

    server.restart();
    let recs = check_home(&server.home).remove(&chat).expect("chat");
    assert_eq!(users(&recs), strings(&["first", "use tools"]));
    next_turn_sees(&fake, &server, &chat, &["first", "use tools"]);
    check_home(&server.home);
}

#[test]
fn kill_during_consolidation() {
    let fake = FakeLlm::start();
    let mut server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "700").start();
    server.configure_llm(&fake);
    let gate = Gate::new();
    fake.push_completion(Reply::completion("never written").gate_before_head(&gate));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    for (u, a) in [("a", "A"), ("b", "B"), ("c", "C")] {
        plain_turn(&fake, &mut ws, &chat, &u.repeat(150), &a.repeat(100));
    }
    gate.wait_reached(WAIT);
    server.kill();
    gate.open();
    drop(ws);

    // Later consolidations (after the restart) get a real summary.
    fake.set_completion_fallback(Reply::completion("a, b and c blocks were sent"));
    server.restart();
    let recs = check_home(&server.home).remove(&chat).expect("chat");
    assert_eq!(recs.len(), 6, "no summary, nothing lost: {recs:#?}");
    let blocks: Vec<String> = ["a", "b", "c"].iter().map(|c| c.repeat(150)).collect();
    assert_eq!(users(&recs), blocks);
    let b: Vec<&str> = blocks.iter().map(String::as_str).collect();
    next_turn_sees(&fake, &server, &chat, &b);
    // That turn starts the consolidation the kill interrupted; let it store its summary (the
    // history line, then `.cursor`) before the files are checked.
    let cursor = server.chat_dir(&chat).join(".cursor");
    wait_for("the summary after the restart", WAIT, || {
        let recs = history_records(&server.home, &chat);
        let done = recs.iter().any(|r| r["role"] == "summary")
            && std::fs::read_to_string(&cursor).is_ok_and(|c| c.trim() == recs.len().to_string());
        done.then_some(())
    });
    check_home(&server.home);
}

#[test]
fn kill_during_dream_loses_no_memory() {
    let fake = FakeLlm::start();
    let home = fresh_home("crashdream");
    let dir = home.join("memory/dream-x");
    std::fs::create_dir_all(&dir).expect("chat dir");
    std::fs::write(
        dir.join("history.jsonl"),
        "{\"cursor\":1,\"timestamp\":\"2026-01-01 00:00\",\"role\":\"user\",\"content\":\"I moved to Lisbon\"}\n\
         {\"cursor\":2,\"timestamp\":\"2026-01-01 00:00\",\"role\":\"assistant\",\"content\":\"Nice!\"}\n",
    )
    .expect("history");
    std::fs::write(dir.join(".cursor"), "2").expect("cursor");
    let original = "# Memory\n- name: Ana\n- works on: CashCode\n- likes: green tea\n";
    std::fs::write(home.join("memory/MEMORY.md"), original).expect("MEMORY.md");
    let mut server = TestServer::builder().home(&home).env("DREAM_INTERVAL", "1").start();
    server.configure_llm(&fake);
    let gate = Gate::new();
    fake.push_completion(Reply::completion("Add: the user lives in Lisbon."));
    fake.push_completion(Reply::completion(&format!("{original}- city: Lisbon")).gate_before_head(&gate));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    plain_turn(&fake, &mut ws, &chat, "hello", "hi");
    gate.wait_reached(Duration::from_secs(20));
    server.kill();
    gate.open();
    drop(ws);
    assert_eq!(std::fs::read_to_string(home.join("memory/MEMORY.md")).expect("MEMORY.md"), original);
    assert!(!home.join("memory/.dream_cursor").exists());

    server.restart();
    check_home(&home);
    assert_eq!(std::fs::read_to_string(home.join("memory/MEMORY.md")).expect("MEMORY.md"), original);
    // After a turn names a model again, the same records are distilled and nothing is lost.
    fake.push_completion(Reply::completion("Add: the user lives in Lisbon."));
    fake.push_completion(Reply::completion(&format!("{original}- city: Lisbon")));
    let mut ws = WsClient::connect(&server);
    ws.attach(&chat, None);
    plain_turn(&fake, &mut ws, &chat, "again", "sure");
    let want = json!({"dream-x":2, chat.clone():4});
    wait_for("the cursors after the next Dream run", Duration::from_secs(20), || {
        let text = std::fs::read_to_string(home.join("memory/.dream_cursor")).ok()?;
        (serde_json::from_str::<Value>(&text).ok()? == want).then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(home.join("memory/MEMORY.md")).expect("MEMORY.md"),
        format!("{original}- city: Lisbon\n")
    );
    assert_eq!(std::fs::read_to_string(home.join("memory/.memory-snapshots/MEMORY.1.md")).expect("snapshot"), original);
    check_home(&home);
}

/// Kills at a sweep of moments of a streamed turn (20 ms between chunks spreads it out; the
/// last delays land after the turn was persisted), restarting each time: a user message whose
/// request reached the model is in history exactly once, one that never reached it may be
/// absent, and nothing is ever duplicated.
#[test]
fn kill_at_arbitrary_moments_of_a_turn() {
    let fake = FakeLlm::start();
    let mut server = TestServer::with_llm(&fake);
    let chat = WsClient::connect(&server).chat_id.clone();
    fake.set_fallback(
        Reply::text(&["Stream", "ed ", "answer ", "in ", "six ", "parts"]).chunk_delay(Duration::from_millis(20)),
    );
    let mut reached = Vec::new();
    for (i, delay_ms) in [0u64, 3, 10, 25, 50, 80, 110, 140, 200, 400].into_iter().enumerate() {
        let q = format!("message {i}");
        let mut ws = WsClient::connect(&server);
        ws.attach(&chat, None);
        let before = fake.chat_requests().len();
        ws.message(&chat, &q, "openai_compatible");
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(delay_ms) {
            let _ = ws.recv_within(Duration::from_millis(2));
        }
        server.kill();
        drop(ws);
        if fake.chat_requests().len() > before {
            reached.push(q.clone());
        }
        server.restart();
        let recs = check_home(&server.home).remove(&chat).unwrap_or_default();
        let got = users(&recs);
        for g in &got {
            assert_eq!(got.iter().filter(|x| *x == g).count(), 1, "{g} duplicated after kill {i}: {got:?}");
        }
        for r in &reached {
            assert!(got.contains(r), "{r} lost after kill {i}: {got:?}");
        }
        // Answers are whole or absent, never partial.
        for r in recs.iter().filter(|r| r["role"] == "assistant") {
            assert_eq!(r["content"], "Streamed answer in six parts");
        }
    }
    assert!(reached.len() >= 5, "most kills should come after the request: {reached:?}");
}

/// A crash between the history append and the `.cursor` rewrite leaves `.cursor` one turn
/// behind; the next turn must not reuse cursors already in history.jsonl (Dream cursors and
/// `keep_from_cursor` rely on them being unique).
#[test]
fn a_stale_cursor_file_does_not_make_cursors_repeat() {
    let fake = FakeLlm::start();
    let home = fresh_home("stalecur");
    let chat = "stale-cursor-1";
    let dir = home.join("memory").join(chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    std::fs::write(
        dir.join("history.jsonl"),
        "{\"cursor\":1,\"timestamp\":\"2026-01-01 00:00\",\"role\":\"user\",\"content\":\"q1\"}\n\
         {\"cursor\":2,\"timestamp\":\"2026-01-01 00:00\",\"role\":\"assistant\",\"content\":\"a1\"}\n\
         {\"cursor\":3,\"timestamp\":\"2026-01-01 00:01\",\"role\":\"user\",\"content\":\"q2\"}\n\
         {\"cursor\":4,\"timestamp\":\"2026-01-01 00:01\",\"role\":\"assistant\",\"content\":\"a2\"}\n",
    )
    .expect("history");
    // Killed after appending q2/a2 but before `.cursor` was rewritten.
    std::fs::write(dir.join(".cursor"), "2").expect("cursor");
    let server = TestServer::builder().home(&home).start();
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);
    ws.attach(chat, None);
    plain_turn(&fake, &mut ws, chat, "q3", "a3");
    let cursors: Vec<u64> = history_records(&home, chat).iter().map(|r| r["cursor"].as_u64().unwrap_or(0)).collect();
    assert_eq!(cursors, vec![1, 2, 3, 4, 5, 6], "cursors repeat after a stale .cursor");
    check_home(&home);
}
