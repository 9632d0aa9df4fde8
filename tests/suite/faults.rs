//! Fault proof beyond `provider_errors.rs`: a 429's `retry-after` is honoured
//! before the one retry; a full disk, a read-only chat store and a path blocked by a regular
//! file each give a clear `error` event, corrupt nothing already stored, leave the server
//! running, and the next turn works once the fault is gone. The disk faults mount a small
//! tmpfs (the tests run as root; without the privilege that test says so and returns).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

#[test]
fn retry_after_is_honoured_before_the_single_retry() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.push(Reply::status(429, r#"{"error":{"message":"slow down"}}"#).header("retry-after", "1.2"));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    ws.message(&chat, "hurry", "openai_compatible");
    let events = ws.turn_events(&chat);
    let detail = error_detail(events.last().expect("events"));
    assert!(detail.contains("429"), "detail {detail:?}");
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 2, "exactly one retry");
    assert_eq!(reqs[0].raw, reqs[1].raw, "the retry repeats the request");
    let gap = reqs[1].received.duration_since(reqs[0].received);
    assert!(gap >= Duration::from_millis(1150), "retried after {gap:?}, before retry-after 1.2 s");
    assert!(gap < Duration::from_secs(5), "retried after {gap:?}");

    // retry-after-ms wins over retry-after, and a retry that succeeds completes the turn.
    fake.push(
        Reply::status(503, r#"{"error":{"message":"busy"}}"#)
            .header("retry-after-ms", "300")
            .header("retry-after", "30"),
    );
    ws.message(&chat, "again", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert!(error_detail(events.last().expect("events")).contains("503"));
    let reqs = fake.chat_requests();
    let gap = reqs[3].received.duration_since(reqs[2].received);
    assert!((Duration::from_millis(290)..Duration::from_secs(5)).contains(&gap), "retry-after-ms 300 gave {gap:?}");

    fake.push(Reply::text(&["ok now"]));
    ws.message(&chat, "third", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:?}");
    assert_eq!(history_summary(&server.home, &chat), rows(&[(1, "user", "third"), (2, "assistant", "ok now")]));
}

/// A tmpfs mounted on a directory, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
    fn remount(&self, opts: &str) {
        let st = Command::new("mount").args(["-o", &format!("remount,{opts}")]).arg(&self.0).status().expect("mount");
        assert!(st.success(), "remount {opts}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem holding `dir` until a write fails; returns the filler's path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler.bin");
    let mut f = std::fs::File::create(&path).expect("create filler");
    let block = vec![0x5au8; 4096];
    while f.write_all(&block).and_then(|_| f.sync_all()).is_ok() {}
    // Small files take whole pages on tmpfs; top up byte-wise so no page has room left.
    while f.write_all(&[0x5a]).and_then(|_| f.sync_all()).is_ok() {}
    path
}

/// One turn that must fail with an error event naming a storage problem; returns the detail.
fn failing_turn(ws: &mut WsClient, fake: &FakeLlm, chat: &str, content: &str) -> String {
    fake.set_fallback(Reply::text(&["should not be stored"]));
    ws.message(chat, content, "openai_compatible");
    let events = ws.turn_events(chat);
    let last = events.last().expect("events");
    let detail = error_detail(last);
    assert!(detail.starts_with("could not save the chat history"), "detail {detail:?}");
    assert!(!detail.contains(KEY_MARKER));
    detail
}

#[test]
fn disk_full_and_read_only_store_give_errors_and_lose_nothing() {
    let fake = FakeLlm::start();
    let home = fresh_home("diskfull");
    let Some(fs) = Tmpfs::mount(&home.join("memory"), "256k") else {
        eprintln!("faults: mounting a tmpfs is not permitted here; the disk-full test did not run");
        return;
    };
    let mut server = TestServer::builder().home(&home).start();
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["stored answer"]));
    ws.message(&chat, "before the fault", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("events")["event"], "done");
    let good = rows(&[(1, "user", "before the fault"), (2, "assistant", "stored answer")]);
    assert_eq!(history_summary(&home, &chat), good);
    let history_bytes = std::fs::read(home.join("memory").join(&chat).join("history.jsonl")).expect("history");

    // Disk full: a new chat cannot be created and an existing one cannot grow.
    let filler = fill(&home.join("memory"));
    let fresh = ws.new_chat();
    let detail = failing_turn(&mut ws, &fake, &fresh, "on a full disk");
    eprintln!("disk full, new chat: {detail}");
    let long = "x".repeat(20_000);
    let detail = failing_turn(&mut ws, &fake, &chat, &long);
    eprintln!("disk full, existing chat: {detail}");
    assert!(server.alive(), "the server must survive a full disk");
    ws.ping_sync();
    // What was stored is intact: every line parses and the acknowledged turn is there.
    let now = std::fs::read(home.join("memory").join(&chat).join("history.jsonl")).expect("history");
    assert!(now.starts_with(&history_bytes), "existing history was rewritten");
    let rows_now = history_summary(&home, &chat);
    assert_eq!(rows_now[..2], good[..], "stored turn lost");
    assert!(rows_now.iter().all(|(_, _, c)| c != "should not be stored"), "an answer was half stored: {rows_now:?}");
    assert_eq!(server.get("/api/sessions").status, 200);

    // Read-only: same story, even for root.
    std::fs::remove_file(&filler).expect("remove filler");
    fs.remount("ro");
    let detail = failing_turn(&mut ws, &fake, &chat, "on a read-only disk");
    eprintln!("read-only: {detail}");
    assert!(server.alive());
    ws.ping_sync();

    // The fault goes away: the next turn works on the old chat.
    fs.remount("rw");
    fake.set_fallback(Reply::text(&["back to normal"]));
    ws.message(&chat, "after the fault", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:?}");
    let after = history_summary(&home, &chat);
    assert_eq!(after[..2], good[..]);
    let tail: Vec<_> = after[after.len() - 2..].iter().map(|(_, r, c)| (r.clone(), c.clone())).collect();
    assert_eq!(tail, pairs(&[("user", "after the fault"), ("assistant", "back to normal")]));
    server.kill();
    drop(fs);
}

#[test]
fn a_file_where_the_chat_directory_belongs_gives_an_error() {
    let OneChat { fake, server, mut ws, .. } = one_chat();
    let chat = ws.new_chat();
    let dir = server.chat_dir(&chat);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(server.memory()).expect("memory dir");
    std::fs::write(&dir, b"not a directory").expect("blocking file");
    let detail = failing_turn(&mut ws, &fake, &chat, "blocked");
    eprintln!("blocked dir: {detail}");
    assert_eq!(std::fs::read(&dir).expect("blocking file"), b"not a directory", "the blocking file was touched");
    let mut ws2 = WsClient::connect(&server);
    ws2.ping_sync();
    // Other chats are unaffected.
    let other = ws2.chat_id.clone();
    fake.push(Reply::text(&["fine"]));
    ws2.message(&other, "elsewhere", "openai_compatible");
    assert_eq!(ws2.turn_events(&other).last().expect("events")["event"], "done");
    assert_eq!(history_summary(&server.home, &other), rows(&[(1, "user", "elsewhere"), (2, "assistant", "fine")]));
    assert_eq!(
        server.get(&format!("/api/sessions/{other}/messages")).json()["messages"].as_array().map(Vec::len),
        Some(2)
    );
}
