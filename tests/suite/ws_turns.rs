//! Event order and persistence of complete turns: plain, follow-up, Ollama routing, tool
//! turns (single, parallel, failing, max iterations), unconfigured providers, queued turns,
//! parallel chats and two clients on one chat (docs/ws-protocol.md §2, §4–6; docs/agent-and-memory.md).

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

const LONG_CONTENT: &str = "  Hello\n\tthere   world, this is a long first message indeed  ";
const LONG_TITLE: &str = "Hello there world, this is a long first ";

#[test]
fn plain_turn_streams_the_models_chunks_and_persists() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let chunks = ["Hel", "lo, ", "wörld ", "🙂!", " 0123456789abcdefghij"];
    fake.push(Reply::text(&chunks));

    ws.message(&chat, LONG_CONTENT, "openai_compatible");
    let events = ws.turn_events(&chat);
    let (masked, last) = mask_turn(&events, 1);
    assert_eq!(masked, plain_answer(&chat, Some(LONG_TITLE), &chunks));
    let answer = chunks.concat();

    // The request: streamed, the chosen model, the key, system prompt then the verbatim user text.
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/chat/completions"));
    assert_eq!(r.header("authorization"), Some(format!("Bearer {TEST_KEY}").as_str()));
    assert_eq!(r.body["model"], MODEL);
    assert_eq!(r.body["stream"], true);
    let msgs = req_messages(&r.body);
    assert_eq!(msgs.len(), 2, "system + user: {msgs:?}");
    assert_eq!(msgs[0]["role"], "system");
    assert!(msgs[0]["content"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(msgs[1], json!({"role":"user","content":LONG_CONTENT}));

    // Persistence: two records, cursor file, title in metadata, session listed.
    assert_eq!(history_summary(&server.home, &chat), rows(&[(1, "user", LONG_CONTENT), (2, "assistant", &answer)]));
    assert_eq!(std::fs::read_to_string(server.chat_dir(&chat).join(".cursor")).expect(".cursor"), "2");
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(server.chat_dir(&chat).join("metadata.json")).expect("metadata"))
            .expect("metadata is JSON");
    assert_eq!(meta["title"], LONG_TITLE);
    // metadata.json: 2-space indented object, no trailing newline.
    let meta_text = std::fs::read_to_string(server.chat_dir(&chat).join("metadata.json")).expect("metadata");
    assert!(meta_text.starts_with("{\n  \"") && meta_text.ends_with('}'), "{meta_text:?}");
    // history.jsonl: one object per line, common fields in the original's key order, raw UTF-8.
    let raw = std::fs::read_to_string(server.chat_dir(&chat).join("history.jsonl")).expect("history");
    assert!(raw.ends_with('\n'));
    for line in raw.lines() {
        let pos: Vec<usize> = ["\"cursor\"", "\"timestamp\"", "\"role\"", "\"content\""]
            .iter()
            .map(|k| line.find(k).unwrap_or_else(|| panic!("{k} missing in {line}")))
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "key order in {line}");
    }
    assert!(raw.contains("wörld 🙂!"), "non-ASCII must be written raw: {raw}");
    let list = server.get("/api/sessions").json();
    assert_eq!(list["sessions"].as_array().map(Vec::len), Some(1));
    assert_eq!(list["sessions"][0]["chat_id"], chat.as_str());
    assert_eq!(list["sessions"][0]["title"], LONG_TITLE);
    server.get(&format!("/api/sessions/{chat}/messages")).expect(
        200,
        json!({"chat_id":chat,"messages":[
            {"role":"user","content":LONG_CONTENT},{"role":"assistant","content":answer}]}),
    );

    // A follow-up: no new title, seq continues, the model sees the whole conversation.
    fake.push(Reply::text(&["Sure."]));
    ws.message(&chat, "and again?", "openai_compatible");
    let events = ws.turn_events(&chat);
    let (masked, _) = mask_turn(&events, last + 1);
    assert_eq!(masked, plain_answer(&chat, None, &["Sure."]));
    let reqs = fake.chat_requests();
    assert_eq!(convo(&reqs[1].body), pairs(&[("user", LONG_CONTENT), ("assistant", &answer), ("user", "and again?")]));
    assert_ne!(stream_id_of(&events), 0);
    assert_eq!(
        history_summary(&server.home, &chat),
        rows(&[
            (1, "user", LONG_CONTENT),
            (2, "assistant", &answer),
            (3, "user", "and again?"),
            (4, "assistant", "Sure.")
        ])
    );
}

#[test]
fn empty_answer_sends_no_delta_but_still_ends_the_stream() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    fake.push(Reply::text(&[]));
    ws.message(&chat, "say nothing", "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
    assert_eq!(masked, plain_answer(&chat, Some("say nothing"), &[]));
    assert_eq!(history_summary(&server.home, &chat), rows(&[(1, "user", "say nothing"), (2, "assistant", "")]));
}

#[test]
fn ollama_turn_uses_v1_path_and_placeholder_key() {
    let OneChat { fake, server: _server, mut ws, chat } = one_chat();
    fake.push(Reply::text(&["local ", "answer"]));
    ws.message(&chat, "hi ollama", "ollama");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
    assert_eq!(masked, plain_answer(&chat, Some("hi ollama"), &["local ", "answer"]));
    let reqs = fake.chat_requests();
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer ollama-local"));
    assert_eq!(reqs[0].body["model"], MODEL);
}

#[test]
fn tool_turn_event_order_and_history() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let call = ToolCallSpec::new("call_a1", "save_memory", &["{\"content\":", " \"User likes", " green tea\"}"]);
    fake.push(Reply::tool_calls(std::slice::from_ref(&call)));
    fake.push(Reply::text(&["Noted", "!"]));

    ws.message(&chat, "remember: I like green tea", "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
    let saved = "Saved to long-term memory: User likes green tea";
    assert_eq!(
        masked,
        vec![
            ev_title(&chat, "remember: I like green tea"),
            // `arguments`: our extension, the arguments the fragments assembled to.
            json!({"event":"tool_call","chat_id":chat,"tool_name":"save_memory","stream_id":"SID","call_id":"call_a1",
                   "arguments":{"content":"User likes green tea"}}),
            json!({"event":"tool_result","chat_id":chat,"tool_name":"save_memory","result":saved,"stream_id":"SID","call_id":"call_a1"}),
            ev_delta(&chat, "Noted"),
            ev_delta(&chat, "!"),
            ev_end(&chat),
            ev_done(&chat),
        ]
    );

    // MEMORY.md got the fact as a timestamped line.
    let memory = std::fs::read_to_string(server.memory().join("MEMORY.md")).expect("MEMORY.md");
    let line = memory.lines().last().expect("a line");
    assert!(
        line.len() > 19
            && line.starts_with('[')
            && is_minute_stamp(&line[1..17])
            && &line[17..] == "] User likes green tea",
        "MEMORY.md line {line:?}"
    );

    // First request offered save_memory; second carried the assembled call and its result.
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 2);
    let tools = reqs[0].body["tools"].as_array().expect("tools offered");
    assert!(
        tools.iter().any(|t| t["type"] == "function" && t["function"]["name"] == "save_memory"),
        "save_memory not offered: {tools:?}"
    );
    assert_eq!(reqs[0].body["tool_choice"], "auto");
    let msgs = req_messages(&reqs[1].body);
    let n = msgs.len();
    assert_eq!(msgs[n - 3], json!({"role":"user","content":"remember: I like green tea"}));
    assert_eq!(msgs[n - 2]["role"], "assistant");
    assert_eq!(
        msgs[n - 2]["tool_calls"],
        json!([{"id":"call_a1","type":"function",
                "function":{"name":"save_memory","arguments":call.full_args()}}])
    );
    assert_eq!(msgs[n - 1]["role"], "tool");
    assert_eq!(msgs[n - 1]["tool_call_id"], "call_a1");
    assert_eq!(msgs[n - 1]["content"], saved);

    // history.jsonl: user, tool_calls, tool, assistant.
    let recs = history_records(&server.home, &chat);
    assert_eq!(
        history_summary(&server.home, &chat),
        rows(&[
            (1, "user", "remember: I like green tea"),
            (2, "tool_calls", "[TOOL_CALLS: save_memory]"),
            (3, "tool", saved),
            (4, "assistant", "Noted!")
        ])
    );
    assert_eq!(
        recs[1]["tool_calls"],
        json!([{"id":"call_a1","type":"function",
                "function":{"name":"save_memory","arguments":call.full_args()}}])
    );
    assert_eq!(recs[2]["tool_call_id"], "call_a1");
    assert_eq!(recs[2]["name"], "save_memory");
    // The HTTP view shows only user/assistant.
    server.get(&format!("/api/sessions/{chat}/messages")).expect(
        200,
        json!({"chat_id":chat,"messages":[
            {"role":"user","content":"remember: I like green tea"},
            {"role":"assistant","content":"Noted!"}]}),
    );
}

#[test]
fn parallel_tool_calls_are_assembled_by_index_and_run_in_order() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let a = ToolCallSpec::new("call_x", "save_memory", &["{\"con", "tent\": \"Fact", " one\"}"]);
    let b = ToolCallSpec::new("call_y", "save_memory", &["{\"content\"", ": \"Fact two\"}"]);
    fake.push(Reply::tool_calls(&[a.clone(), b.clone()]));
    fake.push(Reply::text(&["Both saved."]));
    ws.message(&chat, "save two facts", "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
    let tc = |id: &str, fact: &str| {
        json!({"event":"tool_call","chat_id":chat,"tool_name":"save_memory","stream_id":"SID","call_id":id,
                                           "arguments":{"content":fact}})
    };
    let tr = |id: &str, r: &str| json!({"event":"tool_result","chat_id":chat,"tool_name":"save_memory","result":r,"stream_id":"SID","call_id":id});
    assert_eq!(
        masked,
        vec![
            ev_title(&chat, "save two facts"),
            tc("call_x", "Fact one"),
            tr("call_x", "Saved to long-term memory: Fact one"),
            tc("call_y", "Fact two"),
            tr("call_y", "Saved to long-term memory: Fact two"),
            ev_delta(&chat, "Both saved."),
            ev_end(&chat),
            ev_done(&chat),
        ]
    );
    let recs = history_records(&server.home, &chat);
    assert_eq!(recs[1]["content"], "[TOOL_CALLS: save_memory, save_memory]");
    assert_eq!(
        recs[1]["tool_calls"],
        json!([
            {"id":"call_x","type":"function","function":{"name":"save_memory","arguments":a.full_args()}},
            {"id":"call_y","type":"function","function":{"name":"save_memory","arguments":b.full_args()}}
        ])
    );
    assert_eq!(
        history_summary(&server.home, &chat).into_iter().map(|(c, r, _)| (c, r)).collect::<Vec<_>>(),
        vec![
            (1, "user".to_string()),
            (2, "tool_calls".to_string()),
            (3, "tool".to_string()),
            (4, "tool".to_string()),
            (5, "assistant".to_string())
        ]
    );
}

#[test]
fn failing_and_unknown_tools_become_results_not_errors() {
    let OneChat { fake, server: _server, mut ws, chat } = one_chat();
    // An unknown tool, and save_memory with arguments that are not a JSON object (-> {}).
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("call_u", "no_such_tool", &["{}"]),
        ToolCallSpec::new("call_v", "save_memory", &["[1,", "2]"]),
    ]));
    fake.push(Reply::text(&["Recovered."]));
    ws.message(&chat, "try tools", "openai_compatible");
    let events = ws.turn_events(&chat);
    let (masked, _) = mask_turn(&events, 1);
    let kinds: Vec<(String, String)> = masked
        .iter()
        .map(|e| (e["event"].as_str().unwrap_or("").to_string(), e["call_id"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(
        kinds,
        pairs(&[
            ("session_updated", ""),
            ("tool_call", "call_u"),
            ("tool_result", "call_u"),
            ("tool_call", "call_v"),
            ("tool_result", "call_v"),
            ("delta", ""),
            ("stream_end", ""),
            ("done", "")
        ])
    );
    assert_eq!(masked[1]["tool_name"], "no_such_tool");
    let unknown = masked[2]["result"].as_str().expect("result");
    assert!(unknown.starts_with("Error"), "unknown tool result {unknown:?}");
    assert!(unknown.chars().count() <= 200);
    assert_eq!(masked[4]["result"], "Content is empty; nothing saved.");
    assert_eq!(masked[5], ev_delta(&chat, "Recovered."));
    // The model saw both results, answered to the matching ids.
    let msgs = req_messages(&fake.chat_requests()[1].body);
    let tool_msgs: Vec<&Value> = msgs.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_msgs.len(), 2);
    assert_eq!(tool_msgs[0]["tool_call_id"], "call_u");
    assert_eq!(tool_msgs[1]["tool_call_id"], "call_v");
}

#[test]
fn fifth_tool_round_is_followed_by_a_final_call_without_tools() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    for i in 0..5 {
        let args = format!("{{\"content\":\"fact {i}\"}}");
        fake.push(Reply::tool_calls(&[ToolCallSpec::new(&format!("call_{i}"), "save_memory", &[&args])]));
    }
    fake.push(Reply::text(&["Best effort answer."]));
    ws.message(&chat, "loop forever", "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
    let names: Vec<&str> = masked.iter().map(|e| e["event"].as_str().unwrap_or("")).collect();
    let mut expected = vec!["session_updated"];
    for _ in 0..5 {
        expected.extend(["tool_call", "tool_result"]);
    }
    expected.extend(["delta", "stream_end", "done"]);
    assert_eq!(names, expected);
    assert_eq!(masked[11], ev_delta(&chat, "Best effort answer."));
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 6);
    for r in &reqs[..5] {
        assert!(r.body["tools"].as_array().is_some_and(|t| !t.is_empty()));
    }
    let last = &reqs[5].body;
    assert!(
        last.get("tools").is_none_or(|t| t.as_array().is_some_and(Vec::is_empty) || t.is_null()),
        "the final call must not offer tools: {:?}",
        last.get("tools")
    );
    let msgs = req_messages(last);
    let tail = msgs.last().expect("messages");
    assert_eq!(tail["role"], "user");
    assert_ne!(tail["content"], "loop forever");
    // The extra instruction is not persisted: user, 5 x (tool_calls, tool), assistant.
    let roles: Vec<String> = history_summary(&server.home, &chat).into_iter().map(|(_, r, _)| r).collect();
    let mut want = vec!["user".to_string()];
    for _ in 0..5 {
        want.push("tool_calls".into());
        want.push("tool".into());
    }
    want.push("assistant".into());
    assert_eq!(roles, want);
}

#[test]
fn unconfigured_provider_gives_an_error_and_creates_nothing() {
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    ws.message(&chat, "hello?", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.len(), 1, "only the error: {events:?}");
    let detail = error_detail(&events[0]);
    assert!(detail.contains("LLM not configured") && detail.contains("openai_compatible"), "detail {detail:?}");
    let (masked, _) = mask_turn(&events, 1);
    assert_eq!(masked, vec![json!({"event":"error","detail":detail,"chat_id":chat})]);
    assert!(!server.chat_dir(&chat).exists(), "no chat directory for an unconfigured turn");
    server.get("/api/sessions").expect(200, json!({"sessions":[]}));

    // Only Ollama configured: an openai_compatible turn is still unconfigured.
    let fake = FakeLlm::start();
    server
        .put("/api/settings/llm", &json!({"openai_compatible":{"base_url":""},"ollama":{"base_url":fake.base()}}))
        .expect(
            200,
            json!({"configured":true,
                   "openai_compatible":{"base_url":"","ready":false,"api_key_configured":false},
                   "ollama":{"base_url":fake.base(),"ready":true}}),
        );
    ws.message(&chat, "hello again", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.len(), 1, "only the error: {events:?}");
    let detail = error_detail(&events[0]);
    assert!(detail.contains("LLM not configured") && detail.contains("openai_compatible"));
    assert!(fake.chat_requests().is_empty());
    assert!(!server.chat_dir(&chat).exists());
}

#[test]
fn queued_turns_on_one_chat_run_in_order() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let gate = Gate::new();
    fake.push(Reply::text(&["first ", "answer"]).gate_before_chunk(1, &gate));
    fake.push(Reply::text(&["second answer"]));
    ws.message(&chat, "one", "openai_compatible");
    ws.message(&chat, "two", "openai_compatible");
    // The first turn is held mid-stream; the second must not start meanwhile.
    gate.wait_reached(WAIT);
    assert_eq!(fake.chat_requests().len(), 1, "second turn started before the first ended");
    gate.open();
    let first = ws.turn_events(&chat);
    let second = ws.turn_events(&chat);
    let (m1, last) = mask_turn(&first, 1);
    assert_eq!(m1, plain_answer(&chat, Some("one"), &["first ", "answer"]));
    let (m2, _) = mask_turn(&second, last + 1);
    assert_eq!(m2, plain_answer(&chat, None, &["second answer"]));
    assert_ne!(stream_id_of(&first), stream_id_of(&second), "each turn has its own stream_id");
    let reqs = fake.chat_requests();
    assert_eq!(convo(&reqs[1].body), pairs(&[("user", "one"), ("assistant", "first answer"), ("user", "two")]));
    assert_eq!(
        history_summary(&server.home, &chat),
        rows(&[
            (1, "user", "one"),
            (2, "assistant", "first answer"),
            (3, "user", "two"),
            (4, "assistant", "second answer")
        ])
    );
}

#[test]
fn different_chats_run_in_parallel() {
    let OneChat { fake, server: _server, mut ws, chat: a } = one_chat();
    let b = ws.new_chat();
    let gate = Gate::new();
    fake.push(Reply::text(&["slow"]).gate_before_head(&gate));
    fake.push(Reply::text(&["fast"]));
    ws.message(&a, "chat a", "openai_compatible");
    fake.wait_chat_requests(1, WAIT);
    gate.wait_reached(WAIT);
    ws.message(&b, "chat b", "openai_compatible");
    // B finishes while A is still waiting for its model.
    let frames = ws.turn_frames(&b);
    let b_events: Vec<Value> = frames.iter().filter(|f| f["chat_id"] == b.as_str()).cloned().collect();
    let (mb, _) = mask_turn(&b_events, 1);
    assert_eq!(mb, plain_answer(&b, Some("chat b"), &["fast"]));
    let a_before: Vec<Value> = frames.iter().filter(|f| f["chat_id"] == a.as_str()).cloned().collect();
    gate.open();
    let mut a_events = a_before;
    a_events.extend(ws.turn_events(&a));
    let (ma, _) = mask_turn(&a_events, 1);
    assert_eq!(ma, plain_answer(&a, Some("chat a"), &["slow"]));
}

#[test]
fn two_clients_on_one_chat_see_the_same_events() {
    let OneChat { fake, server, ws: mut a, .. } = one_chat();
    let mut b = WsClient::connect(&server);
    let chat = a.chat_id.clone();
    assert_eq!(b.attach(&chat, None), 0);
    // Attaching twice does not duplicate the subscription.
    assert_eq!(b.attach(&chat, None), 0);
    fake.push(Reply::text(&["shared ", "answer"]));
    a.message(&chat, "from a", "openai_compatible");
    let ea = a.turn_events(&chat);
    let eb = b.turn_events(&chat);
    assert_eq!(ea, eb, "both subscribers get identical frames");
    let (masked, last) = mask_turn(&ea, 1);
    assert_eq!(masked, plain_answer(&chat, Some("from a"), &["shared ", "answer"]));

    // B starts the next turn; A (not the sender) sees it too.
    fake.push(Reply::text(&["reply to b"]));
    b.message(&chat, "from b", "openai_compatible");
    let eb = b.turn_events(&chat);
    let ea = a.turn_events(&chat);
    assert_eq!(ea, eb);
    let (masked, _) = mask_turn(&eb, last + 1);
    assert_eq!(masked, plain_answer(&chat, None, &["reply to b"]));
    // A frame-level reply goes only to its sender.
    b.send(&json!({"type":"ping"}));
    assert_eq!(b.recv(), json!({"event":"pong"}));
    a.ping_sync();
}

#[test]
fn events_of_other_chats_are_not_delivered() {
    let OneChat { fake, server, ws: mut a, .. } = one_chat();
    let mut b = WsClient::connect(&server);
    let chat = a.chat_id.clone();
    fake.push(Reply::text(&["private"]));
    a.message(&chat, "only for a", "openai_compatible");
    a.turn_events(&chat);
    // B never subscribed to A's chat: its next frame is the pong.
    b.ping_sync();
    assert!(b.recv_within(Duration::from_millis(100)).is_none());
}

#[test]
fn slow_subscriber_never_blocks_the_turn_or_other_clients() {
    let OneChat { fake, server, ws: mut fast, .. } = one_chat();
    let mut slow = WsClient::connect(&server);
    let chat = fast.chat_id.clone();
    assert_eq!(slow.attach(&chat, None), 0);
    // ~12 MB of deltas in 12 turns (an answer is capped at 1 MiB): more than any socket buffer
    // plus a bounded per-client queue.
    const TURNS: usize = 12;
    let piece = "0123456789abcdef".repeat(128);
    let pieces: Vec<&str> = (0..500).map(|_| piece.as_str()).collect();
    let mut next_seq = 1;
    for turn in 0..TURNS {
        fake.push(Reply::text(&pieces));
        fast.message(&chat, "flood", "openai_compatible");
        // The slow client reads nothing meanwhile; the fast one gets every whole turn.
        let events = fast.turn_events(&chat);
        let (masked, last) = mask_turn(&events, next_seq);
        assert_eq!(masked, plain_answer(&chat, (turn == 0).then_some("flood"), &pieces));
        next_seq = last + 1;
    }
    wait_for("the flooded turns to be persisted", WAIT, || {
        (history_records(&server.home, &chat).len() == 2 * TURNS).then_some(())
    });
    // The slow client either got everything in order or was dropped; never a gap.
    let (mut expected_seq, mut done) = (1, 0);
    loop {
        match slow.recv_or_closed(WAIT) {
            Ok(Some(v)) => {
                assert_eq!(v["seq"], json!(expected_seq), "gap in the slow client's stream");
                expected_seq += 1;
                done += usize::from(v["event"] == "done");
                if done == TURNS {
                    break;
                }
            }
            Ok(None) => panic!("the slow client was neither served nor dropped"),
            Err(_) => break,
        }
    }
    // The server is healthy for everyone else.
    fake.push(Reply::text(&["still fine"]));
    fast.message(&chat, "after the flood", "openai_compatible");
    let events = fast.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done");
    let mut other = WsClient::connect(&server);
    other.ping_sync();
}

#[test]
fn titles_count_code_points_and_large_content_is_kept_verbatim() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONTEXT_BUDGET_CHARS", "4000000").start();
    // Content far over the default context budget, sent whole (the budget is what limits it).
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["ok"]));
    ws.message(&chat, &"汉".repeat(45), "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
    assert_eq!(masked, plain_answer(&chat, Some(&"汉".repeat(40)), &["ok"]));

    // ~900 KB of content (under the 1 MiB frame limit), with control characters and emoji.
    let big = format!("\r\n  start\u{0}{}\tend 🙂  ", "lorem ipsum ".repeat(75_000));
    let chat2 = ws.new_chat();
    fake.push(Reply::text(&["big ok"]));
    ws.message(&chat2, &big, "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat2), 1);
    assert_eq!(masked[0]["title"].as_str().map(|t| t.chars().count()), Some(40));
    assert_eq!(masked[1..].to_vec(), plain_answer(&chat2, None, &["big ok"]));
    let reqs = fake.chat_requests();
    let msgs = req_messages(&reqs[1].body);
    assert_eq!(msgs.last().expect("user")["content"], big.as_str());
    assert_eq!(history_records(&server.home, &chat2)[0]["content"], big.as_str());
}

#[test]
fn saving_settings_mid_turn_does_not_switch_the_running_turn() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let gate = Gate::new();
    fake.push(
        Reply::tool_calls(&[ToolCallSpec::new("call_m", "save_memory", &["{\"content\":\"mid\"}"])])
            .gate_before_head(&gate),
    );
    fake.push(Reply::text(&["same client"]));
    ws.message(&chat, "long turn", "openai_compatible");
    gate.wait_reached(WAIT);
    // New credentials while the turn waits for its first model call.
    server
        .put(
            "/api/settings/llm",
            &json!({"openai_compatible":{"base_url":fake.base(),"api_key":"sk-new-KEY2"},"ollama":{"base_url":""}}),
        )
        .expect(
            200,
            json!({"configured":true,
                   "openai_compatible":{"base_url":fake.base(),"ready":true,"api_key_configured":true},
                   "ollama":{"base_url":"","ready":false}}),
        );
    gate.open();
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done");
    fake.push(Reply::text(&["new client"]));
    ws.message(&chat, "next turn", "openai_compatible");
    ws.turn_events(&chat);
    let auths: Vec<String> =
        fake.chat_requests().iter().map(|r| r.header("authorization").unwrap_or("").to_string()).collect();
    let old = format!("Bearer {TEST_KEY}");
    assert_eq!(auths, vec![old.clone(), old, "Bearer sk-new-KEY2".to_string()]);
}

#[test]
fn tool_result_events_carry_the_first_200_code_points_only() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let fact = "é".repeat(300);
    let args = json!({ "content": fact }).to_string();
    // Split the arguments mid-way, inside the run of two-byte characters, on a char boundary.
    let mid = args.char_indices().nth(args.chars().count() / 2).map(|(i, _)| i).expect("middle");
    let (a, b) = args.split_at(mid);
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_long", "save_memory", &[a, b])]));
    fake.push(Reply::text(&["saved"]));
    ws.message(&chat, "remember a long fact", "openai_compatible");
    let events = ws.turn_events(&chat);
    let full = format!("Saved to long-term memory: {fact}");
    let preview: String = full.chars().take(200).collect();
    let result = events.iter().find(|e| e["event"] == "tool_result").expect("tool_result");
    assert_eq!(result["result"], preview.as_str());
    // The model and the history get the whole text.
    let msgs = req_messages(&fake.chat_requests()[1].body);
    assert_eq!(msgs.last().expect("tool message")["content"], full.as_str());
    let recs = history_records(&server.home, &chat);
    assert_eq!(recs[2]["content"], full.as_str());
}

#[test]
fn sse_framing_variants_are_understood() {
    // What real providers and proxies send: keep-alive comments, CRLF line ends, `data:`
    // without a space, `event:` lines, a line split across TCP writes, null content.
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let c = |text: &str| {
        json!({"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":text},"finish_reason":null}]})
            .to_string()
    };
    let first = format!("data: {}\n\n", c("Hel"));
    let (split_a, split_b) = first.split_at(20);
    fake.push(Reply::raw_sse(&[
        ": OPENROUTER PROCESSING\n\n",
        split_a,
        split_b,
        &format!("data:{}\r\n\r\n", c("lo")),
        &format!("event: message\ndata: {}\n\n", c(" world")),
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":null},\"finish_reason\":null}]}\n\n",
        ": ping\n\n",
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    ]));
    ws.message(&chat, "variants", "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
    assert_eq!(masked, plain_answer(&chat, Some("variants"), &["Hel", "lo", " world"]));
    assert_eq!(history_summary(&server.home, &chat)[1], (2, "assistant".to_string(), "Hello world".to_string()));
}

#[test]
fn model_connections_are_kept_alive_across_turns() {
    // A new TCP (for https providers: TLS) connection per model call costs a handshake on
    // every turn and tool round; an answer read to its end leaves the connection reusable.
    let OneChat { fake, server: _server, mut ws, chat } = one_chat();
    for i in 0..4 {
        fake.push(Reply::text(&["Hello", " again"]));
        ws.message(&chat, &format!("turn {i}"), "openai_compatible");
        assert_eq!(ws.turn_events(&chat).last().expect("events")["event"], "done");
    }
    let conns: std::collections::BTreeSet<u64> = fake.chat_requests().iter().map(|r| r.conn).collect();
    assert_eq!(conns.len(), 1, "4 sequential model calls used {} connections", conns.len());
}
