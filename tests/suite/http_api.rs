//! HTTP basics and the sessions API (docs/http-api.md §1–4): health, request ids, 404/405/307,
//! sessions list/messages/rename/delete, and chat-id validation on every session route
//! (`%2E%2E` must never reach the file system).

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::common::*;

#[test]
fn health_request_ids_and_unknown_routes() {
    let server = TestServer::start();
    let a = server.get("/api/health");
    a.expect(200, json!({"status":"ok","service":"cashcode"}));
    let b = server.get("/api/health");
    let ida = a.header("x-request-id").expect("x-request-id").to_string();
    let idb = b.header("x-request-id").expect("x-request-id").to_string();
    assert!(is_lower_hex(&ida, 32) && is_lower_hex(&idb, 32), "{ida} {idb}");
    assert_ne!(ida, idb);

    let r = server.get("/api/nope");
    r.expect(404, json!({"detail":"Not Found"}));
    assert!(r.header("x-request-id").is_some_and(|id| is_lower_hex(id, 32)));
    let r = server.get("/nope");
    r.expect(404, json!({"detail":"Not Found"}));
    let r = server.post("/api/health", &json!({}));
    r.expect(405, json!({"detail":"Method Not Allowed"}));
    assert!(r.header("x-request-id").is_some_and(|id| is_lower_hex(id, 32)));
    let r = server.request("HEAD", "/api/health", &[], None);
    assert_eq!(r.status, 405);
    let r = server.request("DELETE", "/api/sessions", &[], None);
    r.expect(405, json!({"detail":"Method Not Allowed"}));
    // Trailing slash: redirect to the slash-less path.
    let r = server.get("/api/sessions/");
    assert_eq!(r.status, 307);
    let loc = r.header("location").expect("location");
    assert!(loc == "/api/sessions" || loc == format!("{}/api/sessions", server.http_base()), "location {loc}");
    assert!(r.header("x-request-id").is_some_and(|id| is_lower_hex(id, 32)));
}

#[test]
fn sessions_list_messages_rename_delete() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    server.get("/api/sessions").expect(200, json!({"sessions":[]}));
    let mut ws = WsClient::connect(&server);
    let a = ws.chat_id.clone();
    let b = ws.new_chat();
    fake.push(Reply::text(&["answer a"]));
    ws.message(&a, "chat a", "openai_compatible");
    ws.turn_events(&a);
    fake.push(Reply::text(&["answer b"]));
    ws.message(&b, "chat b", "openai_compatible");
    ws.turn_events(&b);
    // Make the order unambiguous: a's history is older.
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(server.chat_dir(&a).join("history.jsonl"))
        .expect("open history")
        .set_modified(old)
        .expect("set mtime");
    let mtime_b =
        std::fs::metadata(server.chat_dir(&b).join("history.jsonl")).expect("meta").modified().expect("mtime");
    // Hidden entries and plain files in the memory root are not chats.
    std::fs::create_dir_all(server.memory().join(".hidden-chat")).expect("mkdir");
    std::fs::write(server.memory().join("stray-file"), "x").expect("write");
    server.get("/api/sessions").expect(
        200,
        json!({"sessions":[
            {"chat_id":b,"title":"chat b","updated_at":utc_naive_iso(mtime_b)},
            {"chat_id":a,"title":"chat a","updated_at":utc_naive_iso(old)}]}),
    );
    server.get(&format!("/api/sessions/{a}/messages")).expect(
        200,
        json!({"chat_id":a,"messages":[{"role":"user","content":"chat a"},{"role":"assistant","content":"answer a"}]}),
    );
    server.get("/api/sessions/no-such-chat/messages").expect(404, json!({"detail":"session not found"}));

    // Rename: trimmed, persisted, no WS event; unknown keys in metadata.json are kept.
    let meta_path = server.chat_dir(&a).join("metadata.json");
    let mut meta: Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).expect("meta")).expect("json");
    meta["x_custom"] = json!({"kept":true});
    std::fs::write(&meta_path, serde_json::to_string_pretty(&meta).expect("json")).expect("write");
    server
        .patch(&format!("/api/sessions/{a}"), &json!({"title":"  Renamed chat  "}))
        .expect(200, json!({"chat_id":a,"title":"Renamed chat"}));
    ws.ping_sync();
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).expect("meta")).expect("json");
    assert_eq!(meta["title"], "Renamed chat");
    assert_eq!(meta["x_custom"], json!({"kept":true}));
    let r = server.patch(&format!("/api/sessions/{a}"), &json!({"title":"   "}));
    assert_eq!(r.status, 422);
    let detail = r.json()["detail"].clone();
    assert_eq!(detail[0]["msg"], "Value error, title must not be empty", "{detail}");
    assert_eq!(detail[0]["loc"], json!(["body", "title"]));
    let r = server.patch(&format!("/api/sessions/{a}"), &json!({}));
    assert_eq!(r.status, 422);
    let d = r.json()["detail"][0].clone();
    assert_eq!(
        (d["type"].clone(), d["loc"].clone(), d["msg"].clone()),
        (json!("missing"), json!(["body", "title"]), json!("Field required"))
    );
    let r = server.patch(&format!("/api/sessions/{a}"), &json!({"title":5}));
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["detail"][0]["loc"], json!(["body", "title"]));
    assert_eq!(server.request("PATCH", &format!("/api/sessions/{a}"), &[], Some("not json")).status, 422);
    server
        .patch("/api/sessions/no-such-chat", &json!({"title":"x"}))
        .expect(404, json!({"detail":"session not found"}));
    // The renamed title survives the next turn (no auto-title, no overwrite).
    fake.push(Reply::text(&["more"]));
    ws.message(&a, "another message", "openai_compatible");
    let events = ws.turn_events(&a);
    assert!(events.iter().all(|e| e["event"] != "session_updated"));
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).expect("meta")).expect("json");
    assert_eq!(meta["title"], "Renamed chat");
    assert_eq!(meta["x_custom"], json!({"kept":true}));

    // Delete.
    let r = server.delete(&format!("/api/sessions/{b}"));
    assert_eq!((r.status, r.body.as_str()), (204, ""));
    assert!(r.header("x-request-id").is_some());
    assert!(!server.chat_dir(&b).exists());
    server.get(&format!("/api/sessions/{b}/messages")).expect(404, json!({"detail":"session not found"}));
    server.delete(&format!("/api/sessions/{b}")).expect(404, json!({"detail":"session not found"}));
    let list = server.get("/api/sessions").json();
    assert_eq!(list["sessions"].as_array().map(Vec::len), Some(1));
    assert_eq!(list["sessions"][0]["chat_id"], a.as_str());
}

#[test]
fn session_routes_reject_bad_chat_ids() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    fake.push(Reply::text(&["x"]));
    ws.message(&chat, "precious", "openai_compatible");
    ws.turn_events(&chat);
    // Something next to the memory root that a traversal would hit.
    std::fs::write(server.home.join("sibling.txt"), "do not touch").expect("write");
    let not_found = json!({"detail":"session not found"});
    let long = "a".repeat(65);
    // Ids that spell a dot segment or encode a separator or NUL are refused by the request gate
    // (400) before any handler; the others are the handler's "session not found".
    let structural = ["%2E%2E", "%2e%2e", "..%2F..", "%2E%2E%2F%2E%2E", "a%2Fb", "%00"];
    let bad = structural.iter().copied().chain(["has%20space", long.as_str(), ".hidden"]);
    for id in bad {
        for (method, path, body) in [
            ("GET", format!("/api/sessions/{id}/messages"), None),
            ("PATCH", format!("/api/sessions/{id}"), Some(r#"{"title":"x"}"#)),
            ("DELETE", format!("/api/sessions/{id}"), None),
        ] {
            let r = server.request(method, &path, &[], body);
            if structural.contains(&id) {
                assert_eq!(r.status, 400, "{method} {path}: {}", r.body);
                let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
                assert!(detail.starts_with("invalid request path"), "{method} {path}: {detail}");
            } else {
                r.expect(404, not_found.clone());
            }
        }
    }
    assert!(server.memory().is_dir(), "the memory root survived");
    assert!(server.chat_dir(&chat).join("history.jsonl").is_file());
    assert_eq!(std::fs::read_to_string(server.home.join("sibling.txt")).expect("sibling"), "do not touch");
    assert!(server.home.join("config/settings/llm.json").is_file());
    assert_eq!(server.get("/api/sessions").json()["sessions"][0]["chat_id"], chat.as_str());
}

#[test]
fn a_failed_first_turn_leaves_a_listed_session() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    fake.push(Reply::status(500, r#"{"error":{"message":"boom"}}"#));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    ws.message(&chat, "doomed but titled", "openai_compatible");
    ws.turn_events(&chat);
    let list = server.get("/api/sessions").json();
    let entry = &list["sessions"][0];
    assert_eq!(entry["chat_id"], chat.as_str());
    assert_eq!(entry["title"], "doomed but titled");
    assert!(is_naive_iso(entry["updated_at"].as_str().expect("updated_at")));
    server.get(&format!("/api/sessions/{chat}/messages")).expect(200, json!({"chat_id":chat,"messages":[]}));
}

#[test]
fn rename_during_a_turn_survives_the_turns_own_metadata_write() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let gate = Gate::new();
    fake.push(Reply::text(&["slow ", "answer"]).gate_before_chunk(1, &gate));
    ws.message(&chat, "auto title", "openai_compatible");
    gate.wait_reached(WAIT);
    server
        .patch(&format!("/api/sessions/{chat}"), &json!({"title":"Manual title"}))
        .expect(200, json!({"chat_id":chat,"title":"Manual title"}));
    gate.open();
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done");
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(server.chat_dir(&chat).join("metadata.json")).expect("metadata"))
            .expect("JSON");
    assert_eq!(meta["title"], "Manual title");
    assert_eq!(server.get("/api/sessions").json()["sessions"][0]["title"], "Manual title");
}

#[test]
fn a_deleted_session_starts_fresh() {
    // The original keeps the deleted chat's context in memory (docs/agent-and-memory.md §12.9,
    // marked weak); a message to the same id must not resurrect it.
    let OneChat { fake, server, mut ws, chat } = one_chat();
    fake.push(Reply::text(&["old answer"]));
    ws.message(&chat, "old question", "openai_compatible");
    let events = ws.turn_events(&chat);
    let (_, last) = mask_turn(&events, 1);
    assert_eq!(server.delete(&format!("/api/sessions/{chat}")).status, 204);
    fake.push(Reply::text(&["new answer"]));
    ws.message(&chat, "new question", "openai_compatible");
    let events = ws.turn_events(&chat);
    let (masked, _) = mask_turn(&events, last + 1);
    assert_eq!(masked, plain_answer(&chat, Some("new question"), &["new answer"]));
    assert_eq!(convo(&fake.chat_requests()[1].body), pairs(&[("user", "new question")]));
    assert_eq!(
        history_summary(&server.home, &chat),
        rows(&[(1, "user", "new question"), (2, "assistant", "new answer")])
    );
}

#[test]
fn a_stalled_http_client_does_not_block_other_requests() {
    // A client that announces a body and never sends it must not stall the API for everyone
    // ("every blocking wait has a timeout").
    use std::io::Write;
    let server = TestServer::start();
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", server.http_port)).expect("connect");
    stalled
        .write_all(
            format!(
                "PATCH /api/sessions/abc HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"ti",
                server.http_port
            )
            .as_bytes(),
        )
        .expect("write");
    stalled.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(100));
    // Other requests are answered promptly (on another thread, with a deadline).
    assert_eq!(
        health_within(&server, Duration::from_secs(5)),
        Some(200),
        "GET /api/health stalled behind a client that never finished its request body"
    );
    drop(stalled);
}

#[test]
fn deleting_a_chat_mid_turn_does_not_resurrect_it() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let never = Gate::new();
    fake.push(Reply::text(&["partial ", "never"]).gate_before_chunk(1, &never));
    ws.message(&chat, "delete me while I talk", "openai_compatible");
    never.wait_reached(WAIT);
    ws.recv_until(|v| v["event"] == "delta");
    assert_eq!(server.delete(&format!("/api/sessions/{chat}")).status, 204);
    // The turn ends for the client...
    let events = ws.turn_events(&chat);
    let last = events.last().expect("a closing event");
    assert!(last["event"] == "done" || last["event"] == "error", "{events:?}");
    // ...and the deleted chat stays deleted.
    ws.ping_sync();
    assert!(
        !server.chat_dir(&chat).exists(),
        "the chat directory came back: {:?}",
        history_records(&server.home, &chat)
    );
    server.get("/api/sessions").expect(200, json!({"sessions":[]}));
    server.get(&format!("/api/sessions/{chat}/messages")).expect(404, json!({"detail":"session not found"}));
    never.open();
}

#[test]
fn many_hanging_discovery_requests_do_not_block_the_api() {
    // Model discovery waits on the network (up to 15 s per provider). However many such
    // requests are in flight, the rest of the API must keep answering.
    let fake = FakeLlm::start();
    let server = TestServer::start();
    server
        .put(
            "/api/settings/llm",
            &json!({"openai_compatible":{"base_url":fake.base(),"api_key":TEST_KEY},"ollama":{"base_url":""}}),
        )
        .expect(
            200,
            json!({"configured":true,
                   "openai_compatible":{"base_url":fake.base(),"ready":true,"api_key_configured":true},
                   "ollama":{"base_url":"","ready":false}}),
        );
    let never = Gate::new();
    fake.set_models("/models", Reply::json(json!({"data":[]})).gate_before_head(&never));
    let port = server.http_port;
    let agent = || -> ureq::Agent { http_agent(Duration::from_secs(40)) };
    let n = 24;
    for _ in 0..n {
        let a = agent();
        std::thread::spawn(move || {
            let _ = a.get(format!("http://127.0.0.1:{port}/api/settings/llm/models")).call();
        });
    }
    // Wait until the hang is in effect (a probe is held by the model service); not even
    // that happening means the discovery requests themselves are starved.
    wait_for("a discovery probe to reach the model service", WAIT, || {
        fake.requests().iter().any(|r| r.path == "/models").then_some(())
    });
    let (tx, rx) = crossbeam_channel::bounded(1);
    let a = agent();
    std::thread::spawn(move || {
        let r = a.get(format!("http://127.0.0.1:{port}/api/health")).call().map(|r| r.status().as_u16());
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    let got = rx.recv_timeout(Duration::from_secs(5));
    never.open();
    assert_eq!(got.ok(), Some(Ok(200)), "GET /api/health stalled behind hanging discovery requests");
}

#[test]
fn json_bodies_nest_at_most_64_levels() {
    // The deepest body accepted reaches the handler (a skill is created); one level deeper is
    // refused as invalid JSON before serde_json parses it, at the byte where it got too deep.
    let server = TestServer::start();
    let body = |name: &str, depth: usize| {
        let inner = depth - 1;
        let content = format!("---\nname: {name}\ndescription: d\n---\n\nbody\n");
        format!(
            r#"{{"name":"{name}","content":{},"x":{}1{}}}"#,
            json!(content),
            r#"{"a":"#.repeat(inner),
            "}".repeat(inner)
        )
    };
    let ok = server.request("POST", "/api/skills", &[], Some(&body("deepest", 64)));
    assert_eq!(ok.status, 201, "{}", ok.body);
    let deeper = body("deeper", 65);
    let at = deeper.find(r#""x":"#).expect("x") + 4 + r#"{"a":"#.len() * 63;
    let r = server.request("POST", "/api/skills", &[], Some(&deeper));
    assert_eq!(r.status, 422, "{}", r.body);
    let d = r.json()["detail"][0].clone();
    assert_eq!(
        (d["type"].clone(), d["loc"].clone(), d["ctx"]["error"].clone()),
        (json!("json_invalid"), json!(["body", at]), json!(format!("nesting deeper than 64 levels at byte {at}")))
    );
    assert_eq!(server.get("/api/skills/deeper").status, 404);
}

/// The typed views of health, client-config, sessions and LLM settings answer the same bytes
/// the earlier `json!` bodies did (keys sorted): a field order change is a wire change.
#[test]
fn typed_bodies_are_byte_identical() {
    let fake = FakeLlm::start();
    let server = TestServer::start();
    let body = |r: HttpResp, status: u16| {
        assert_eq!(r.status, status, "{}", r.body);
        r.body
    };
    assert_eq!(body(server.get("/api/health"), 200), r#"{"service":"cashcode","status":"ok"}"#);
    let port = server.ws_url().rsplit(':').next().unwrap_or_default().trim_end_matches('/').to_string();
    let r = server.request("GET", "/api/client-config", &[("Host", "localhost:1")], None);
    assert_eq!(body(r, 200), format!(r#"{{"ws_url":"ws://localhost:{port}/"}}"#));
    assert_eq!(body(server.get("/api/sessions"), 200), r#"{"sessions":[]}"#);

    let models = r#"{"models":[],"providers":{"ollama":{"error":null,"ready":false},"openai_compatible":{"error":null,"ready":false}}}"#;
    assert_eq!(body(server.get("/api/settings/llm/models"), 200), models);
    let b = fake.base();
    let public = format!(
        r#"{{"configured":true,"ollama":{{"base_url":"{b}","ready":true}},"openai_compatible":{{"api_key_configured":true,"base_url":"{b}","ready":true}}}}"#
    );
    assert_eq!(body(server.put("/api/settings/llm", &llm_body(&b, &b)), 200), public);
    assert_eq!(body(server.get("/api/settings/llm"), 200), public);
    fake.set_models("/v1/models", Reply::json(json!({"data":[{"id":"qwen3:8b"}]})));
    fake.set_models("/models", Reply::status(429, r#"{"error":{"message":"slow down"}}"#));
    let r = server.post(
        "/api/settings/llm/test",
        &json!({"provider":"ollama","openai_compatible":{"base_url":b},"ollama":{"base_url":b}}),
    );
    assert_eq!(
        body(r, 200),
        r#"{"message":"Connected, found 1 models","model_count":1,"provider":"ollama","success":true}"#
    );
    let r = server.get("/api/settings/llm/models");
    let error = r.json()["providers"]["openai_compatible"]["error"].as_str().map(str::to_string).expect("error");
    let want = format!(
        r#"{{"models":[{{"id":"qwen3:8b","provider":"ollama"}}],"providers":{{"ollama":{{"error":null,"ready":true}},"openai_compatible":{{"error":"{error}","ready":true}}}}}}"#
    );
    assert_eq!(body(r, 200), want);

    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["answer"]));
    ws.message(&chat, "question", "ollama");
    ws.turn_events(&chat);
    let records = [
        json!({"role":"user","content":"q1","mentioned_skills":[{"name":"weather","label":"Weather"}],
               "selected_mcp_connectors":[{"server":"weather-mcp","label":"Weather MCP"}]}),
        json!({"role":"assistant","content":"a1"}),
        json!({"role":"tool","content":"hidden","tool_call_id":"t1"}),
    ];
    let lines: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(server.chat_dir(&chat).join("history.jsonl"), lines).expect("write history");
    let r = server.get(&format!("/api/sessions/{chat}/messages"));
    assert_eq!(
        body(r, 200),
        format!(
            r#"{{"chat_id":"{chat}","messages":[{{"content":"q1","mentioned_skills":[{{"label":"Weather","name":"weather"}}],"role":"user","selected_mcp_connectors":[{{"label":"Weather MCP","server":"weather-mcp"}}]}},{{"content":"a1","role":"assistant"}}]}}"#
        )
    );
    let r = server.patch(&format!("/api/sessions/{chat}"), &json!({"title":"  New name "}));
    assert_eq!(body(r, 200), format!(r#"{{"chat_id":"{chat}","title":"New name"}}"#));
    let r = server.get("/api/sessions");
    let updated = r.json()["sessions"][0]["updated_at"].as_str().map(str::to_string).expect("updated_at");
    assert_eq!(
        body(r, 200),
        format!(r#"{{"sessions":[{{"chat_id":"{chat}","title":"New name","updated_at":"{updated}"}}]}}"#)
    );
}
