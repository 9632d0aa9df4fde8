//! Long-term memory (docs/agent-and-memory.md §9–§10, docs/storage.md §2–3): consolidation writes exactly
//! one correct `summary` record in the background and the next turn sends summary + kept tail; a
//! failing summariser writes nothing; a slow one does not delay the next turn. Dream (timer
//! thread, `DREAM_INTERVAL=1`) rewrites MEMORY.md from its phase-2 answer, advances
//! `.dream_cursor` only over records it sent (several batches, none lost), keeps numbered
//! snapshots, refuses destructive rewrites, changes nothing when a phase fails, and waits for a
//! turn to name a model.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// `src/store/cache.rs` SUMMARY_MARKER (the original's "history summary" prefix).
const MARKER: &str = "[\u{5386}\u{53f2}\u{6458}\u{8981}]";
const PHASE1_START: &str = "You are a memory analyst";
const PHASE2_START: &str = "You are the editor of MEMORY.md";

/// Non-streamed chat requests (consolidation, Dream), in arrival order.
fn background(fake: &FakeLlm) -> Vec<fake_llm::Recorded> {
    fake.requests().into_iter().filter(|r| r.is_chat() && r.body["stream"] != json!(true)).collect()
}

/// Streamed (turn) requests.
fn turns(fake: &FakeLlm) -> Vec<fake_llm::Recorded> {
    fake.chat_requests().into_iter().filter(|r| r.body["stream"] == json!(true)).collect()
}

fn summaries(home: &Path, chat: &str) -> Vec<Value> {
    history_records(home, chat).into_iter().filter(|r| r["role"] == "summary").collect()
}

/// Runs three turns of 150 + 100 characters (750 in all: over a 700 threshold only after the
/// third).
fn three_long_turns(fake: &FakeLlm, ws: &mut WsClient, chat: &str) {
    for (u, a) in [("a", "A"), ("b", "B"), ("c", "C")] {
        fake.push(Reply::text(&[&a.repeat(100)]));
        ws.message(chat, &u.repeat(150), "openai_compatible");
        assert_eq!(ws.turn_events(chat).last().expect("events")["event"], "done");
    }
}

fn role_content(msgs: &[Value]) -> Vec<(String, String)> {
    msgs.iter()
        .map(|m| (m["role"].as_str().unwrap_or("").to_string(), m["content"].as_str().unwrap_or("").to_string()))
        .collect()
}

#[test]
fn consolidation_writes_one_summary_and_the_next_turn_sends_summary_and_tail() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "700").start();
    server.configure_llm(&fake);
    // Exactly one summariser answer: a second consolidation would be an unscripted call.
    fake.push_completion(Reply::completion("The user sent an a-block; the assistant answered with A."));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    three_long_turns(&fake, &mut ws, &chat);
    let summary = wait_for("the summary record", WAIT, || summaries(&server.home, &chat).pop());
    assert_eq!(
        summary,
        json!({"cursor":7,"timestamp":summary["timestamp"],"role":"summary",
               "content":"The user sent an a-block; the assistant answered with A.","keep_from_cursor":3})
    );
    let recs = history_records(&server.home, &chat);
    assert_eq!(recs[2]["role"], "user", "keep_from_cursor points at a user record");
    assert_eq!(recs[2]["content"], "b".repeat(150));
    // The job that wrote it has ended (the last turn ended before: no other job can start).
    server.wait_log(&format!("event=consolidation.completed chat_id={chat}"), 1);
    assert_eq!(summaries(&server.home, &chat).len(), 1, "exactly one summary record");
    assert_eq!(history_records(&server.home, &chat).len(), 7);

    // The summariser request: non-streamed, no tools, the older part as a transcript.
    let bg = background(&fake);
    assert_eq!(bg.len(), 1);
    let req = &bg[0].body;
    assert!(req.get("tools").is_none(), "no tools for the summariser");
    assert_ne!(req["stream"], json!(true));
    assert_eq!(req["model"], MODEL);
    let msgs = req_messages(req);
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["role"], "system");
    assert!(msgs[0]["content"].as_str().expect("system").contains(MARKER), "the prompt names the marker");
    let transcript = msgs[1]["content"].as_str().expect("transcript");
    let lines: Vec<&str> = transcript.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{transcript}");
    assert!(lines[0].starts_with('[') && is_minute_stamp(&lines[0][1..17]), "{transcript}");
    assert!(lines[0].ends_with(&format!("] USER: {}", "a".repeat(150))), "{transcript}");
    assert!(lines[1].ends_with(&format!("] ASSISTANT: {}", "A".repeat(100))), "{transcript}");

    // Next turn: summary (marker + space + text), the kept tail from cursor 3, the new message.
    fake.push(Reply::text(&["ok"]));
    ws.message(&chat, "what did I send?", "openai_compatible");
    ws.turn_events(&chat);
    let t = turns(&fake);
    let msgs = req_messages(&t.last().expect("turn request").body);
    assert_eq!(
        role_content(&msgs[1..]),
        pairs(&[
            ("assistant", &format!("{MARKER} The user sent an a-block; the assistant answered with A.")),
            ("user", &"b".repeat(150)),
            ("assistant", &"B".repeat(100)),
            ("user", &"c".repeat(150)),
            ("assistant", &"C".repeat(100)),
            ("user", "what did I send?"),
        ])
    );
    // The HTTP history still shows everything.
    let all = server.get(&format!("/api/sessions/{chat}/messages")).json();
    assert_eq!(all["messages"].as_array().map(Vec::len), Some(8));
    std::thread::sleep(Duration::from_millis(300));
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

#[test]
fn a_failing_summariser_writes_nothing() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "700").start();
    server.configure_llm(&fake);
    fake.set_completion_fallback(Reply::status(500, r#"{"error":{"message":"summariser down"}}"#));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    three_long_turns(&fake, &mut ws, &chat);
    wait_for("a summariser call answered", WAIT, || {
        background(&fake).iter().any(|r| r.handled.is_some()).then_some(())
    });
    // The consolidator has taken the failure (and written nothing).
    server.wait_log(&format!("event=consolidation.failed chat_id={chat}"), 1);
    let before = std::fs::read_to_string(server.chat_dir(&chat).join("history.jsonl")).expect("history");
    assert_eq!(history_records(&server.home, &chat).len(), 6);
    assert!(summaries(&server.home, &chat).is_empty());

    // The in-memory context is untouched: the next request carries all six records.
    fake.push(Reply::text(&["still whole"]));
    ws.message(&chat, "next", "openai_compatible");
    ws.turn_events(&chat);
    let msgs = req_messages(&turns(&fake).last().expect("turn").body);
    assert_eq!(msgs.len(), 1 + 6 + 1, "the whole history is still sent");
    assert_eq!(msgs[1]["content"], "a".repeat(150));
    // Only the new turn was appended.
    let after = std::fs::read_to_string(server.chat_dir(&chat).join("history.jsonl")).expect("history");
    assert!(after.starts_with(&before));
    wait_for("the second summariser attempt", WAIT, || (background(&fake).len() >= 2).then_some(()));
    server.wait_log(&format!("event=consolidation.failed chat_id={chat}"), 2);
    assert!(summaries(&server.home, &chat).is_empty());
}

#[test]
fn a_slow_summariser_does_not_delay_the_next_turn() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "700").start();
    server.configure_llm(&fake);
    fake.push_completion(Reply::completion("SLOW SUMMARY of the a-block").first_byte_delay(Duration::from_secs(3)));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    three_long_turns(&fake, &mut ws, &chat);
    wait_for("the summariser call", WAIT, || (!background(&fake).is_empty()).then_some(()));

    fake.push(Reply::text(&["yes"]));
    let sent = Instant::now();
    ws.message(&chat, "quick?", "openai_compatible");
    let events = ws.turn_events(&chat);
    let took = sent.elapsed();
    assert_eq!(events.last().expect("end")["event"], "done");
    assert!(took < Duration::from_millis(1500), "the turn waited for the summariser: {took:?}");
    assert!(summaries(&server.home, &chat).is_empty(), "the summariser was still sleeping");
    // That turn still saw the whole history.
    assert_eq!(req_messages(&turns(&fake).last().expect("turn").body).len(), 1 + 6 + 1);

    // The late summary keeps the turn that ran meanwhile (reload takes cursor >= 3).
    let summary = wait_for("the late summary", WAIT, || summaries(&server.home, &chat).pop());
    assert_eq!((summary["cursor"].as_u64(), summary["keep_from_cursor"].as_u64()), (Some(9), Some(3)));
    fake.push(Reply::text(&["five"]));
    ws.message(&chat, "and five?", "openai_compatible");
    ws.turn_events(&chat);
    let msgs = req_messages(&turns(&fake).last().expect("turn").body);
    assert_eq!(
        role_content(&msgs[1..]),
        pairs(&[
            ("assistant", &format!("{MARKER} SLOW SUMMARY of the a-block")),
            ("user", &"b".repeat(150)),
            ("assistant", &"B".repeat(100)),
            ("user", &"c".repeat(150)),
            ("assistant", &"C".repeat(100)),
            ("user", "quick?"),
            ("assistant", "yes"),
            ("user", "and five?"),
        ])
    );
    assert_eq!(summaries(&server.home, &chat).len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Dream

/// Writes `<home>/memory/<chat>/history.jsonl` (and `.cursor`) from (timestamp, role, content).
fn write_chat(home: &Path, chat: &str, records: &[(String, &str, String)]) {
    let dir = home.join("memory").join(chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    let mut text = String::new();
    for (i, (ts, role, content)) in records.iter().enumerate() {
        text.push_str(&json!({"cursor":i + 1,"timestamp":ts,"role":role,"content":content}).to_string());
        text.push('\n');
    }
    std::fs::write(dir.join("history.jsonl"), text).expect("history");
    std::fs::write(dir.join(".cursor"), records.len().to_string()).expect("cursor");
}

/// `n` alternating user/assistant records tagged `<{tag}-NNN>`, all with timestamp `ts`.
fn tagged(tag: &str, n: usize, ts: &str) -> Vec<(String, &'static str, String)> {
    (1..=n)
        .map(|i| {
            let role = if i % 2 == 1 { "user" } else { "assistant" };
            (ts.to_string(), role, format!("<{tag}-{i:03}> note number {i} about {tag}"))
        })
        .collect()
}

fn dream_cursors(home: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(home.join("memory/.dream_cursor")).ok()?;
    Some(serde_json::from_str(&text).expect(".dream_cursor is JSON"))
}

fn phase(fake: &FakeLlm, start: &str) -> Vec<fake_llm::Recorded> {
    background(fake)
        .into_iter()
        .filter(|r| req_messages(&r.body)[0]["content"].as_str().is_some_and(|s| s.starts_with(start)))
        .collect()
}

fn user_text(r: &fake_llm::Recorded) -> String {
    req_messages(&r.body)[1]["content"].as_str().expect("user content").to_string()
}

fn snapshots(home: &Path) -> Vec<String> {
    let dir = home.join("memory/.memory-snapshots");
    let mut names: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// Runs one plain turn so Dream knows a provider and model.
fn one_turn(fake: &FakeLlm, server: &TestServer, content: &str) -> String {
    let mut ws = WsClient::connect(server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["fine"]));
    ws.message(&chat, content, "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("end")["event"], "done");
    chat
}

#[test]
fn dream_processes_every_record_over_several_batches_and_keeps_snapshots() {
    let fake = FakeLlm::start();
    let home = fresh_home("dream");
    // 70 + 40 records, older than anything a turn writes; batches hold 50 records.
    write_chat(&home, "dream-a", &tagged("A", 70, "2026-01-01 00:00"));
    write_chat(&home, "dream-b", &tagged("B", 40, "2026-01-02 00:00"));
    std::fs::write(home.join("memory/MEMORY.md"), "- old fact\n").expect("MEMORY.md");
    let server = TestServer::builder().home(&home).env("DREAM_INTERVAL", "1").start();
    server.configure_llm(&fake);
    let memory_after = |k: usize| -> String {
        let mut m = "- old fact".to_string();
        for i in 1..=k {
            m.push_str(&format!("\n- fact {i}"));
        }
        m
    };
    // Up to four runs (50 + 50 + 10 + the turn's 2 records); scripted before the turn, since
    // Dream cannot run before it.
    for k in 1..=4 {
        fake.push_completion(Reply::completion(&format!("Report {k}: add fact {k}.")));
        fake.push_completion(Reply::completion(&memory_after(k)));
    }
    let chat = one_turn(&fake, &server, "hello dream");

    let want = json!({"dream-a":70,"dream-b":40,chat.clone():2});
    wait_for("all cursors advanced", Duration::from_secs(30), || {
        (dream_cursors(&home) == Some(want.clone())).then_some(())
    });
    // A further run has found nothing new (logged after it decided): no model call for it.
    wait_for("an empty Dream run after the last write", WAIT, || {
        let log = server.log_text();
        let last_write = log.rfind("event=dream.written")?;
        log[last_write..].contains("event=dream.skipped reason=\"no new history\"").then_some(())
    });
    let p1 = phase(&fake, PHASE1_START);
    let p2 = phase(&fake, PHASE2_START);
    let runs = p2.len();
    assert!((3..=4).contains(&runs), "{runs} runs");
    assert_eq!(p1.len(), runs);

    // Every record went to the model exactly once; the first batch is A-001..A-050.
    let texts: Vec<String> = p1.iter().map(user_text).collect();
    let all = texts.concat();
    for (tag, n) in [("A", 70), ("B", 40)] {
        for i in 1..=n {
            let t = format!("<{tag}-{i:03}>");
            assert_eq!(all.matches(&t).count(), 1, "{t} sent {} times", all.matches(&t).count());
        }
    }
    assert_eq!(all.matches("USER: hello dream").count(), 1);
    assert_eq!(all.matches("ASSISTANT: fine").count(), 1);
    assert_eq!(texts[0].matches("] USER: <A-").count() + texts[0].matches("] ASSISTANT: <A-").count(), 50);
    assert!(texts[0].contains("<A-050>") && !texts[0].contains("<A-051>"));
    assert!(texts[0].starts_with("## Latest conversation history\n[2026-01-01 00:00] USER: <A-001>"), "{}", texts[0]);
    assert!(texts[0].contains("## Current long-term memory\n- old fact"), "{}", texts[0]);

    // Phase 2 gets the phase-1 report and the current file; MEMORY.md is the last answer.
    for (k, r) in p2.iter().enumerate() {
        let text = user_text(r);
        assert!(text.contains(&format!("Report {}: add fact {}.", k + 1, k + 1)), "{text}");
        assert!(text.contains(&memory_after(k)), "{text}");
    }
    let memory = std::fs::read_to_string(home.join("memory/MEMORY.md")).expect("MEMORY.md");
    assert_eq!(memory, format!("{}\n", memory_after(runs)));
    // One numbered snapshot per accepted rewrite, holding the file as it was before.
    let names = snapshots(&home);
    assert_eq!(names.len(), runs, "{names:?}");
    for k in 0..runs {
        let snap = std::fs::read_to_string(home.join(format!("memory/.memory-snapshots/MEMORY.{}.md", k + 1)))
            .expect("snapshot");
        assert_eq!(snap.trim_end(), memory_after(k));
    }
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

#[test]
fn dream_waits_for_a_model_and_refuses_a_destructive_rewrite() {
    let fake = FakeLlm::start();
    let home = fresh_home("dreamd");
    write_chat(&home, "dream-c", &tagged("C", 6, "2026-01-01 00:00"));
    let original = "# Memory\n- name: Ana\n- works on: CashCode\n- likes: green tea\n- city: Porto\n";
    std::fs::write(home.join("memory/MEMORY.md"), original).expect("MEMORY.md");
    let server = TestServer::builder().home(&home).env("DREAM_INTERVAL", "1").start();
    server.configure_llm(&fake);
    // No turn yet: Dream has no model and asks nothing (a run has decided so once it logs).
    server.wait_log("event=dream.skipped", 1);
    assert!(background(&fake).is_empty(), "Dream called a model before any turn");
    assert!(server.log_text().contains("event=dream.skipped"), "the skip is logged");

    fake.push_completion(Reply::completion("Add the user's new hobby: chess."));
    fake.push_completion(Reply::completion("- hobby: chess"));
    fake.set_completion_fallback(Reply::status(500, r#"{"error":{"message":"down"}}"#));
    one_turn(&fake, &server, "I play chess now");
    wait_for("the rejection", Duration::from_secs(20), || {
        server.log_text().contains("event=dream.rejected").then_some(())
    });
    assert_eq!(std::fs::read_to_string(home.join("memory/MEMORY.md")).expect("MEMORY.md"), original);
    assert_eq!(dream_cursors(&home), None, "cursors unchanged");
    assert!(snapshots(&home).is_empty());
    // The same records are offered again on the next run.
    wait_for("a retry", Duration::from_secs(20), || (phase(&fake, PHASE1_START).len() >= 2).then_some(()));
    for r in phase(&fake, PHASE1_START) {
        let t = user_text(&r);
        assert!(t.contains("<C-001>") && t.contains("<C-006>"), "{t}");
    }
    assert_eq!(std::fs::read_to_string(home.join("memory/MEMORY.md")).expect("MEMORY.md"), original);
}

#[test]
fn a_failing_dream_phase_changes_nothing() {
    let fake = FakeLlm::start();
    let home = fresh_home("dreamf");
    write_chat(&home, "dream-f", &tagged("F", 4, "2026-01-01 00:00"));
    let original = "- name: Ana\n";
    std::fs::write(home.join("memory/MEMORY.md"), original).expect("MEMORY.md");
    let server = TestServer::builder().home(&home).env("DREAM_INTERVAL", "1").start();
    server.configure_llm(&fake);
    // Run 1: phase 1 answers, phase 2 fails; later runs: phase 1 fails.
    fake.push_completion(Reply::completion("Add: the user has a cat."));
    fake.set_completion_fallback(Reply::status(500, r#"{"error":{"message":"down"}}"#));
    let chat = one_turn(&fake, &server, "my cat is called Tom");
    wait_for("a phase-2 attempt and a later run", Duration::from_secs(20), || {
        let p1 = phase(&fake, PHASE1_START);
        (p1.len() >= 2 && !phase(&fake, PHASE2_START).is_empty()).then_some(())
    });
    // Both runs have ended (each logs its failure after it has given up).
    server.wait_log("event=dream.failed", 2);
    assert!(server.log_text().contains("event=dream.failed"));
    assert_eq!(std::fs::read_to_string(home.join("memory/MEMORY.md")).expect("MEMORY.md"), original);
    assert_eq!(dream_cursors(&home), None, "cursors unchanged");
    assert!(snapshots(&home).is_empty());
    // Every run offered the same records (nothing was skipped by a failed run).
    let p1 = phase(&fake, PHASE1_START);
    for r in &p1 {
        let t = user_text(r);
        assert!(t.contains("<F-001>") && t.contains("<F-004>"), "{t}");
    }
    assert!(user_text(p1.last().expect("a run")).contains("my cat is called Tom"));
    assert_eq!(history_records(&home, &chat).len(), 2);
}
