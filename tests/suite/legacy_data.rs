//! Data written by the original loads unchanged (docs/storage.md §2–4, docs/agent-and-memory.md §4, §8):
//! hand-written fixtures in the original's layout (Python `json.dumps` records with summaries,
//! receipts, legacy records, garbage lines; metadata.json; MEMORY.md; SOUL.md; llm.json v1/v2)
//! must list, read, feed the next model request (persona, remembered information, last summary
//! plus tail) and be appended to without rewriting a byte.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::common::*;

const SUM: &str = "438ec720-df71-4ac3-ac72-74555a5c155a";
const LEGACY: &str = "legacy_chat:01";
const FAILED: &str = "9a1b2c3d-0000-4000-8000-000000000001";
const SUMMARY: &str = "小明 is building a bookkeeping app in Rust; asked about the weather; it will rain.";
const RECEIPT: &str =
    "[Skill loaded: weather@v1 sha256:6be82893c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90ade1]";

fn set_mtime(path: &Path, t: SystemTime) {
    std::fs::File::open(path).expect("open for mtime").set_modified(t).expect("set mtime");
}

/// A home holding the original's memory root and the given llm.json fixture; returns the home
/// and the three chats' listing times.
fn original_home(fake: &FakeLlm, llm_fixture: &str) -> (std::path::PathBuf, [SystemTime; 3]) {
    let home = fresh_home("orig");
    copy_fixture_tree(&fixture("original"), &home, &fake.base());
    std::fs::create_dir_all(home.join("config/settings")).expect("mkdir");
    let llm = std::fs::read_to_string(fixture(llm_fixture)).expect("llm fixture");
    std::fs::write(home.join("config/settings/llm.json"), llm.replace("{{BASE}}", &fake.base()))
        .expect("write llm.json");
    let now = SystemTime::now();
    let times = [now - Duration::from_secs(3600), now - Duration::from_secs(7200), now - Duration::from_secs(10800)];
    let mem = home.join("memory");
    set_mtime(&mem.join(SUM).join("history.jsonl"), times[0]);
    set_mtime(&mem.join(LEGACY).join("history.jsonl"), times[1]);
    set_mtime(&mem.join(FAILED), times[2]);
    (home, times)
}

fn default_title(t: &Value) -> bool {
    t == "\u{65B0}\u{5BF9}\u{8BDD}" || t == "New chat"
}

#[test]
fn original_chats_list_read_and_continue() {
    let fake = FakeLlm::start();
    let (home, times) = original_home(&fake, "llm_v2.json");
    let history_path = home.join("memory").join(SUM).join("history.jsonl");
    let original_bytes = std::fs::read(&history_path).expect("history");
    let server = TestServer::builder().home(&home).start();

    // Sessions list: all three, newest first, default title for the untitled legacy chat.
    let list = server.get("/api/sessions").json();
    let sessions = list["sessions"].as_array().expect("sessions").clone();
    assert_eq!(sessions.len(), 3, "{list}");
    assert_eq!(sessions[0], json!({"chat_id":SUM,"title":"小明的记账应用","updated_at":utc_naive_iso(times[0])}));
    assert_eq!(sessions[1]["chat_id"], LEGACY);
    assert!(default_title(&sessions[1]["title"]), "{}", sessions[1]);
    assert_eq!(sessions[1]["updated_at"], utc_naive_iso(times[1]));
    assert_eq!(sessions[2], json!({"chat_id":FAILED,"title":"Failed first turn","updated_at":utc_naive_iso(times[2])}));

    // Messages: user/assistant only, file order, summaries do not hide older records, empty
    // records kept, selections re-sanitised, nothing else.
    server.get(&format!("/api/sessions/{SUM}/messages")).expect(
        200,
        json!({"chat_id":SUM,"messages":[
            {"role":"user","content":"我叫小明，我在做一个记账应用"},
            {"role":"assistant","content":"好的，小明！"},
            {"role":"user","content":"remember that I prefer Rust"},
            {"role":"assistant","content":"Noted: you prefer Rust."},
            {"role":"user","content":"weather please","mentioned_skills":[{"name":"weather","label":"Weather"}]},
            {"role":"assistant","content":RECEIPT},
            {"role":"assistant","content":"It will rain."},
            {"role":"user","content":"and tomorrow?"},
            {"role":"assistant","content":""},
            {"role":"user","content":"last question","selected_mcp_connectors":[{"server":"weather-mcp","label":"Weather MCP"}]},
            {"role":"assistant","content":"last answer"}]}),
    );
    server.get(&format!("/api/sessions/{LEGACY}/messages")).expect(
        200,
        json!({"chat_id":LEGACY,"messages":[
            {"role":"user","content":"old question"},{"role":"assistant","content":"old answer"}]}),
    );
    server.get(&format!("/api/sessions/{FAILED}/messages")).expect(200, json!({"chat_id":FAILED,"messages":[]}));
    assert_eq!(std::fs::read(&history_path).expect("history"), original_bytes, "reading rewrote history");

    // The next turn: stored key, persona from SOUL.md, MEMORY.md, last summary + tail.
    let mut ws = WsClient::connect(&server);
    assert!(ws.attach(SUM, None) < u64::MAX);
    fake.push(Reply::text(&["继续", "吧"]));
    ws.message(SUM, "what do you know?", "openai_compatible");
    let events = ws.turn_events(SUM);
    let first = events[0]["seq"].as_u64().expect("seq");
    let (masked, _) = mask_turn(&events, first);
    assert_eq!(masked, plain_answer(SUM, None, &["继续", "吧"]), "no auto-title for a titled chat");
    let req = &fake.chat_requests()[0];
    assert_eq!(req.header("authorization"), Some("Bearer sk-v2-stored-KEY777"));
    let msgs = req_messages(&req.body);
    let system = msgs[0]["content"].as_str().expect("system text");
    assert_eq!(msgs[0]["role"], "system");
    let soul = std::fs::read_to_string(fixture("original/memory/SOUL.md")).expect("SOUL.md");
    let memory = std::fs::read_to_string(fixture("original/memory/MEMORY.md")).expect("MEMORY.md");
    assert!(system.starts_with(soul.trim()), "system prompt must start with SOUL.md: {system:?}");
    assert!(!system.contains("local-first assistant"), "default persona used despite SOUL.md");
    assert!(system.contains(&format!("## Remembered information\n{}", memory.trim())), "MEMORY.md missing: {system:?}");
    assert!(!system.contains("OLD SUMMARY"));
    // After the system message: the last summary, then every non-summary record with
    // cursor >= 4 mapped to messages (empty and unknown records skipped), then the new text.
    let rest: Vec<Value> = msgs[1..].to_vec();
    assert_eq!(rest.len(), 12, "{rest:#?}");
    assert_eq!(rest[0]["role"], "assistant");
    let s = rest[0]["content"].as_str().expect("summary text");
    assert!(s.ends_with(SUMMARY) && s.len() > SUMMARY.len(), "summary message {s:?}");
    assert_eq!(rest[1], json!({"role":"user","content":"remember that I prefer Rust"}));
    assert_eq!(rest[2]["role"], "assistant");
    assert_eq!(
        rest[2]["tool_calls"],
        json!([{"id":"call_old1","type":"function","function":{"name":"save_memory","arguments":"{\"content\": \"User prefers Rust\"}"}}])
    );
    assert_eq!(rest[3]["role"], "tool");
    assert_eq!(rest[3]["tool_call_id"], "call_old1");
    assert_eq!(rest[3]["content"], "Saved to long-term memory: User prefers Rust");
    let plain: Vec<(String, String)> = rest[4..]
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or("").to_string(), m["content"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(
        plain,
        pairs(&[
            ("assistant", "Noted: you prefer Rust."),
            ("user", "weather please"),
            ("assistant", RECEIPT),
            ("assistant", "It will rain."),
            ("user", "and tomorrow?"),
            ("user", "last question"),
            ("assistant", "last answer"),
            ("user", "what do you know?")
        ])
    );

    // Appended, never rewritten: the original bytes are a prefix; cursors continue from .cursor.
    let after = std::fs::read(&history_path).expect("history");
    assert!(after.starts_with(&original_bytes), "history.jsonl was rewritten");
    let tail = String::from_utf8(after[original_bytes.len()..].to_vec()).expect("utf-8");
    let new: Vec<Value> = tail.lines().map(|l| serde_json::from_str(l).expect("new record")).collect();
    assert_eq!(new.len(), 2);
    assert_eq!(
        (new[0]["cursor"].clone(), new[0]["role"].clone(), new[0]["content"].clone()),
        (json!(17), json!("user"), json!("what do you know?"))
    );
    assert_eq!(
        (new[1]["cursor"].clone(), new[1]["role"].clone(), new[1]["content"].clone()),
        (json!(18), json!("assistant"), json!("继续吧"))
    );
    assert!(tail.contains("继续吧"), "non-ASCII is written raw");
    assert_eq!(std::fs::read_to_string(home.join("memory").join(SUM).join(".cursor")).expect(".cursor"), "18");
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join("memory").join(SUM).join("metadata.json")).expect("metadata"),
    )
    .expect("metadata JSON");
    assert_eq!(meta["title"], "小明的记账应用");
    assert_eq!(meta["x_custom"], json!({"kept":true}));
    // MEMORY.md and SOUL.md are untouched.
    assert_eq!(std::fs::read_to_string(home.join("memory/MEMORY.md")).expect("MEMORY.md"), memory);
    assert_eq!(std::fs::read_to_string(home.join("memory/SOUL.md")).expect("SOUL.md"), soul);
}

#[test]
fn legacy_untitled_chat_continues_without_a_title() {
    let fake = FakeLlm::start();
    let (home, _) = original_home(&fake, "llm_v2.json");
    let server = TestServer::builder().home(&home).start();
    let mut ws = WsClient::connect(&server);
    ws.attach(LEGACY, None);
    fake.push(Reply::text(&["new answer"]));
    ws.message(LEGACY, "new question", "openai_compatible");
    let events = ws.turn_events(LEGACY);
    let first = events[0]["seq"].as_u64().expect("seq");
    let (masked, _) = mask_turn(&events, first);
    assert_eq!(masked, plain_answer(LEGACY, None, &["new answer"]));
    let msgs = req_messages(&fake.chat_requests()[0].body);
    assert_eq!(msgs.len(), 6, "system + 4 history + user: {msgs:#?}");
    assert_eq!(msgs[1], json!({"role":"user","content":"old question"}));
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_leg");
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], "call_leg");
    assert_eq!(msgs[4], json!({"role":"assistant","content":"old answer"}));
    assert_eq!(msgs[5], json!({"role":"user","content":"new question"}));
    // No .cursor file: the next cursor comes from the last line.
    assert_eq!(
        history_summary(&home, LEGACY)[4..].to_vec(),
        rows(&[(5, "user", "new question"), (6, "assistant", "new answer")])
    );
    let list = server.get("/api/sessions").json();
    let entry = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["chat_id"] == LEGACY)
        .cloned()
        .expect("legacy chat listed");
    assert!(default_title(&entry["title"]), "legacy chat got a title: {entry}");
}

#[test]
fn llm_json_v1_loads_and_is_upgraded_on_the_next_save() {
    let fake = FakeLlm::start();
    let (home, _) = original_home(&fake, "llm_v1.json");
    let server = TestServer::builder().home(&home).start();
    let view = json!({"configured":true,
        "openai_compatible":{"base_url":fake.base(),"ready":true,"api_key_configured":true},
        "ollama":{"base_url":fake.base(),"ready":true}});
    server.get("/api/settings/llm").expect(200, view.clone());
    let before = std::fs::read(server.llm_json()).expect("llm.json");

    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["from ollama"]));
    ws.message(&chat, "via ollama", "ollama");
    ws.turn_events(&chat);
    fake.push(Reply::text(&["from openai"]));
    ws.message(&chat, "via openai", "openai_compatible");
    ws.turn_events(&chat);
    let reqs = fake.chat_requests();
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer ollama-local"));
    assert_eq!(reqs[1].path, "/chat/completions");
    assert_eq!(reqs[1].header("authorization"), Some("Bearer sk-v1-legacy-KEY555"));
    // The model comes from the message, never from the v1 file.
    assert_eq!(reqs[0].body["model"], MODEL);
    assert_eq!(reqs[1].body["model"], MODEL);
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), before, "loading never rewrites");

    // A save with a blank key keeps it and writes version 2 without the legacy fields.
    server
        .put(
            "/api/settings/llm",
            &json!({"openai_compatible":{"base_url":fake.base(),"api_key":""},"ollama":{"base_url":fake.base()}}),
        )
        .expect(200, view);
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(server.llm_json()).expect("llm.json")).expect("JSON");
    assert_eq!(
        file,
        json!({"version":2,"openai_compatible":{"base_url":fake.base(),"api_key":"sk-v1-legacy-KEY555"},
               "ollama":{"base_url":fake.base()}})
    );
}

#[test]
fn llm_json_v2_loads_unchanged() {
    let fake = FakeLlm::start();
    let (home, _) = original_home(&fake, "llm_v2.json");
    let before = std::fs::read(home.join("config/settings/llm.json")).expect("llm.json");
    let server = TestServer::builder().home(&home).start();
    server.get("/api/settings/llm").expect(
        200,
        json!({"configured":true,
            "openai_compatible":{"base_url":fake.base(),"ready":true,"api_key_configured":true},
            "ollama":{"base_url":"","ready":false}}),
    );
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    ws.message(&chat, "ollama is not configured", "ollama");
    let events = ws.turn_events(&chat);
    let detail = error_detail(&events[0]);
    assert!(detail.contains("LLM not configured") && detail.contains("ollama"), "{detail}");
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), before);
}

#[test]
fn default_persona_and_no_memory_heading_in_a_fresh_home() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    fake.push(Reply::text(&["hi"]));
    ws.message(&chat, "hello", "openai_compatible");
    ws.turn_events(&chat);
    let msgs = req_messages(&fake.chat_requests()[0].body);
    let system = msgs[0]["content"].as_str().expect("system");
    assert!(system.contains("CashCode"), "default persona: {system:?}");
    assert!(!system.contains("## Remembered information"), "no MEMORY.md, no heading");
    // MEMORY.md written later is picked up by the next turn without a restart.
    std::fs::create_dir_all(server.memory()).expect("mkdir");
    std::fs::write(server.memory().join("MEMORY.md"), "- likes tea\n").expect("write");
    std::fs::write(server.memory().join("SOUL.md"), "You are Pennywise, a frugal helper.\n").expect("write");
    fake.push(Reply::text(&["ok"]));
    ws.message(&chat, "again", "openai_compatible");
    ws.turn_events(&chat);
    let msgs = req_messages(&fake.chat_requests()[1].body);
    let system = msgs[0]["content"].as_str().expect("system");
    assert!(system.starts_with("You are Pennywise, a frugal helper."), "{system:?}");
    assert!(system.contains("\n\n## Remembered information\n- likes tea"), "{system:?}");
}

#[test]
fn the_original_variables_point_at_an_existing_install() {
    // An original checkout: server/memory, server/data, server/logs and a config root.
    let fake = FakeLlm::start();
    let install = fresh_home("install");
    let server_dir = install.join("server");
    copy_fixture_tree(&fixture("original/memory"), &server_dir.join("memory"), &fake.base());
    std::fs::create_dir_all(install.join("cfg/settings")).expect("mkdir");
    let llm = std::fs::read_to_string(fixture("llm_v2.json")).expect("llm fixture");
    std::fs::write(install.join("cfg/settings/llm.json"), llm.replace("{{BASE}}", &fake.base())).expect("write");
    let server = TestServer::builder()
        .env("MEMORY_DIR", &server_dir.join("memory").display().to_string())
        .env("CASHCODE_DATA_DIR", &server_dir.join("data").display().to_string())
        .env("CASHCODE_LOG_DIR", &server_dir.join("logs").display().to_string())
        .env("CASHCODE_CONFIG_DIR", &install.join("cfg").display().to_string())
        .start();
    let list = server.get("/api/sessions").json();
    let mut ids: Vec<String> = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["chat_id"].as_str().unwrap_or("").to_string())
        .collect();
    ids.sort();
    let mut want = vec![LEGACY.to_string(), SUM.to_string(), FAILED.to_string()];
    want.sort();
    assert_eq!(ids, want);
    server.get("/api/settings/llm").expect(
        200,
        json!({"configured":true,
            "openai_compatible":{"base_url":fake.base(),"ready":true,"api_key_configured":true},
            "ollama":{"base_url":"","ready":false}}),
    );
    assert!(server_dir.join("logs/cashcode.log").is_file(), "log in CASHCODE_LOG_DIR");
    assert!(server_dir.join("data").is_dir(), "data root created");
    // Nothing went to the default home locations.
    assert!(!server.home.join("memory").exists());
    let mut ws = WsClient::connect(&server);
    ws.attach(SUM, None);
    fake.push(Reply::text(&["from the old install"]));
    ws.message(SUM, "still there?", "openai_compatible");
    ws.turn_events(SUM);
    let sys = req_messages(&fake.chat_requests()[0].body)[0]["content"].as_str().unwrap_or("").to_string();
    assert!(sys.contains("## Remembered information\n# Long-term memory"), "{sys:?}");
    let text = std::fs::read_to_string(server_dir.join("memory").join(SUM).join("history.jsonl")).expect("history");
    let last: Value = serde_json::from_str(text.lines().last().expect("a line")).expect("JSON");
    assert_eq!(last["content"], "from the old install");
    let _ = std::fs::remove_dir_all(&install);
}
