//! Cache-stable prompts: consecutive model requests of one chat share their prefix
//! byte for byte while SOUL.md and MEMORY.md are unchanged — request N+1's messages start with
//! all of request N's messages (compared per message as serde_json text and on the raw request
//! bytes), and everything outside `messages` (model, tools in stable order, options) is
//! identical. When MEMORY.md changes (edited on disk, or by save_memory), the next turn changes
//! only the system message.

use serde_json::Value;

use crate::common::*;

/// Splits a raw request body into (text before the `messages` array, the array's text, text
/// after it), using the JSON parser only to find where the array ends.
fn split_raw(raw: &str) -> (&str, &str, &str) {
    let key = "\"messages\":";
    let at = raw.find(key).expect("a messages key") + key.len();
    let start = at + raw[at..].find('[').expect("messages array");
    let mut stream = serde_json::Deserializer::from_str(&raw[start..]).into_iter::<Value>();
    stream.next().expect("an array").expect("valid JSON array");
    let end = start + stream.byte_offset();
    (&raw[..start], &raw[start..end], &raw[end..])
}

fn serialised(body: &Value) -> Vec<String> {
    req_messages(body).iter().map(|m| serde_json::to_string(m).expect("serialise")).collect()
}

/// Request `b` extends request `a`: same non-message bytes, `a`'s messages a strict prefix.
#[track_caller]
fn extends(a: &fake_llm::Recorded, b: &fake_llm::Recorded, what: &str) {
    let (ma, mb) = (serialised(&a.body), serialised(&b.body));
    assert!(mb.len() > ma.len(), "{what}: the later request has no new messages");
    for (i, (x, y)) in ma.iter().zip(&mb).enumerate() {
        assert_eq!(x, y, "{what}: message {i} changed");
    }
    assert_eq!(a.body["tools"], b.body["tools"], "{what}: tools differ");
    let (pa, arr_a, sa) = split_raw(&a.raw);
    let (pb, arr_b, sb) = split_raw(&b.raw);
    assert_eq!(pa, pb, "{what}: bytes before messages differ");
    assert_eq!(sa, sb, "{what}: bytes after messages differ (tools, options)");
    let inner = &arr_a[..arr_a.len() - 1];
    assert!(arr_b.starts_with(inner), "{what}: raw message bytes are not a prefix");
}

/// Only the system message differs between `a` and `b`; the rest of `a` is a prefix of `b`.
#[track_caller]
fn only_system_differs(a: &fake_llm::Recorded, b: &fake_llm::Recorded, what: &str) {
    let (ma, mb) = (serialised(&a.body), serialised(&b.body));
    assert_ne!(ma[0], mb[0], "{what}: the system message reflects the new MEMORY.md");
    assert!(mb.len() > ma.len(), "{what}: no new messages");
    for i in 1..ma.len() {
        assert_eq!(ma[i], mb[i], "{what}: message {i} changed across the MEMORY.md update");
    }
    assert_eq!(a.body["tools"], b.body["tools"]);
    let (pa, _, sa) = split_raw(&a.raw);
    let (pb, _, sb) = split_raw(&b.raw);
    assert_eq!((pa, sa), (pb, sb), "{what}: only the messages may differ");
}

/// A home with a persona and one remembered fact, and a server on it.
fn cache_server(fake: &FakeLlm, tag: &str) -> TestServer {
    let home = fresh_home(tag);
    std::fs::create_dir_all(home.join("memory")).expect("memory");
    std::fs::write(home.join("memory/SOUL.md"), "You are Cachey, a careful assistant.\n").expect("SOUL.md");
    std::fs::write(home.join("memory/MEMORY.md"), "[2026-01-01 00:00] user is called Ana\n").expect("MEMORY.md");
    let server = TestServer::builder().home(&home).start();
    server.configure_llm(fake);
    std::fs::create_dir_all(home.join("workspace")).expect("workspace");
    std::fs::write(home.join("workspace/notes.txt"), "some notes\n").expect("notes");
    server
}

fn run_turn(ws: &mut WsClient, chat: &str, content: &str) {
    ws.message(chat, content, "openai_compatible");
    assert_eq!(ws.turn_events(chat).last().expect("end")["event"], "done");
}

#[test]
fn consecutive_requests_extend_the_previous_one_across_tool_turns() {
    let fake = FakeLlm::start();
    let server = cache_server(&fake, "cache");
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["Hi ", "Ana"]));
    run_turn(&mut ws, &chat, "hello");
    fake.push(Reply::text(&["Fine."]));
    run_turn(&mut ws, &chat, "how are you?");
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("call_l", "list_dir", &["{}"]),
        ToolCallSpec::new("call_r", "read_file", &["{\"path\":", "\"notes.txt\"}"]),
    ]));
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_e", "exec", &["{\"command\":\"echo cached\"}"])]));
    fake.push(Reply::text(&["You have notes."]));
    run_turn(&mut ws, &chat, "what is in my workspace?");
    fake.push(Reply::text(&["Sure."]));
    run_turn(&mut ws, &chat, "thanks");
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 6);
    let system = req_messages(&reqs[0].body)[0]["content"].as_str().expect("system").to_string();
    assert!(system.starts_with("You are Cachey, a careful assistant."), "{system}");
    assert!(system.contains("user is called Ana"), "{system}");
    // Plain turn -> plain turn, and the steps inside the tool turn.
    for i in [0, 1, 2, 3] {
        extends(&reqs[i], &reqs[i + 1], &format!("request {i} -> {}", i + 1));
    }
    // The turn after the tool turn (the assistant tool_calls messages must be sent as before).
    extends(&reqs[4], &reqs[5], "request 4 (last step of the tool turn) -> 5 (next turn)");
}

#[test]
fn a_memory_file_change_alters_only_the_system_message() {
    let fake = FakeLlm::start();
    let server = cache_server(&fake, "cachem");
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    for (q, a) in [("one", "1"), ("two", "2")] {
        fake.push(Reply::text(&[a]));
        run_turn(&mut ws, &chat, q);
    }
    let path = server.memory().join("MEMORY.md");
    let mut text = std::fs::read_to_string(&path).expect("MEMORY.md");
    text.push_str("[2026-01-02 00:00] user likes jazz\n");
    std::fs::write(&path, text).expect("MEMORY.md");
    fake.push(Reply::text(&["3"]));
    run_turn(&mut ws, &chat, "three");
    fake.push(Reply::text(&["4"]));
    run_turn(&mut ws, &chat, "four");
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 4);
    extends(&reqs[0], &reqs[1], "request 0 -> 1");
    only_system_differs(&reqs[1], &reqs[2], "request 1 -> 2");
    let system = req_messages(&reqs[2].body)[0]["content"].as_str().expect("system").to_string();
    assert!(system.contains("user likes jazz") && system.contains("user is called Ana"), "{system}");
    extends(&reqs[2], &reqs[3], "request 2 -> 3");
}

#[test]
fn save_memory_alters_only_the_system_message_of_the_next_turn() {
    let fake = FakeLlm::start();
    let server = cache_server(&fake, "caches");
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["Hello."]));
    run_turn(&mut ws, &chat, "hi");
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_m", "save_memory", &["{\"content\":\"user likes jazz\"}"])]));
    fake.push(Reply::text(&["Noted."]));
    run_turn(&mut ws, &chat, "remember that I like jazz");
    fake.push(Reply::text(&["Jazz it is."]));
    run_turn(&mut ws, &chat, "what music do I like?");
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 4);
    extends(&reqs[0], &reqs[1], "request 0 -> 1");
    // MEMORY.md changed mid-turn; the prompt is read once per turn, so the turn's follow-up
    // request still extends its first one.
    extends(&reqs[1], &reqs[2], "request 1 -> 2 (same turn as save_memory)");
    let system = req_messages(&reqs[3].body)[0]["content"].as_str().expect("system").to_string();
    assert!(system.contains("user likes jazz") && system.contains("user is called Ana"), "{system}");
    only_system_differs(&reqs[2], &reqs[3], "request 2 -> 3");
}
