//! Skills inside real turns (docs/skills.md §6, §8, §12; docs/agent-and-memory.md §3): an explicitly
//! selected skill's body reaches the model while history keeps the receipt, the recent-skills
//! hint and the legacy `@name`, selections that cannot load fail the turn before the model is
//! called, `agent_skill_manage` publishes into the catalog, and self-evolution proposes after
//! two matching successful turns (never after a failed one) and applies only on approval.

use serde_json::{json, Value};

use crate::common::*;

fn create_skill(server: &TestServer, name: &str, content: &str) {
    let r = server.post("/api/skills", &json!({"name": name, "content": content}));
    assert_eq!(r.status, 201, "{}", r.body);
}

/// Sends a turn with optional `mentioned_skills` and returns its events.
fn turn(ws: &mut WsClient, chat: &str, content: &str, mentioned: &[&str]) -> Vec<Value> {
    let mut frame = msg(chat, content, "openai_compatible");
    if !mentioned.is_empty() {
        frame["metadata"]["mentioned_skills"] = json!(mentioned.iter().map(|n| json!({"name": n})).collect::<Vec<_>>());
    }
    ws.send(&frame);
    ws.turn_events(chat)
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"].as_array().map_or(Vec::new(), |tools| {
        tools.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect()
    })
}

fn last_tool_message(body: &Value) -> String {
    let msgs = req_messages(body);
    let tool = msgs.iter().rev().find(|m| m["role"] == "tool").expect("a tool message");
    tool["content"].as_str().expect("tool content").to_string()
}

#[test]
fn mentioned_skill_body_reaches_the_model_and_only_the_receipt_is_persisted() {
    let OneChat { fake, server, mut ws, .. } = one_chat();
    create_skill(
        &server,
        "trip",
        "---\nname: trip\ndescription: Trip planning steps\n---\n\n# Trip\n\nBODY-MARKER-7 do things.\n",
    );

    let chat = ws.new_chat();
    fake.push(Reply::text(&["Sunny."]));
    let events = turn(&mut ws, &chat, "how is the weather?", &["trip"]);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:#?}");
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 1);
    let msgs = req_messages(&reqs[0].body);
    assert_eq!(msgs[1]["role"], "system");
    let selected = msgs[1]["content"].as_str().expect("selection message");
    assert!(selected.starts_with("The user explicitly selected these Skills:\n\n[Skill loaded: trip@v1 sha256:"));
    assert!(selected.contains("BODY-MARKER-7"), "the SKILL.md body is sent to the model");
    let tools = tool_names(&reqs[0].body);
    for t in ["skill_search", "skill_load", "skill_read_resource", "agent_skill_manage"] {
        assert!(tools.iter().any(|n| n == t), "{t} visible: {tools:?}");
    }

    let h = history_records(&server.home, &chat);
    let roles: Vec<&str> = h.iter().map(|r| r["role"].as_str().unwrap_or("")).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"]);
    assert_eq!(h[0]["mentioned_skills"], json!([{"name": "trip"}]));
    let receipt = h[1]["content"].as_str().expect("receipt");
    assert!(receipt.starts_with("[Skill loaded: trip@v1 sha256:") && receipt.ends_with(']'), "{receipt}");
    assert_eq!(h[2]["content"], "Sunny.");
    let raw = std::fs::read_to_string(server.chat_dir(&chat).join("history.jsonl")).expect("history");
    assert!(!raw.contains("BODY-MARKER-7"), "skill bodies are never persisted");
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(server.chat_dir(&chat).join("metadata.json")).expect("metadata"))
            .expect("metadata json");
    assert_eq!(meta["activated_skills"]["trip"]["version"], 1);

    // Next turn: the summary hint names the skill; the legacy @name loads it again and is
    // removed from what the model sees, not from what is stored.
    fake.push(Reply::text(&["Ok."]));
    turn(&mut ws, &chat, "@trip and tomorrow?", &[]);
    let reqs = fake.chat_requests();
    let msgs = req_messages(&reqs[1].body);
    let system = msgs[0]["content"].as_str().expect("system prompt");
    assert!(system.contains("## Recently activated Skills\n"), "{system}");
    assert!(system.contains("- trip: Trip planning steps"));
    assert_eq!(msgs.last().expect("messages")["content"], "and tomorrow?");
    assert!(msgs[1]["content"].as_str().unwrap_or("").contains("BODY-MARKER-7"), "legacy @name loads the skill");
    assert_eq!(history_records(&server.home, &chat)[3]["content"], "@trip and tomorrow?");

    // A skill with an unmet dependency, or an unknown one, fails the turn before the model is
    // called; nothing is persisted.
    create_skill(
        &server,
        "needs-bin",
        "---\nname: needs-bin\ndescription: d\nrequires:\n  bins: [cc-no-such-binary]\n---\n\nBody.\n",
    );
    for (name, why) in [
        ("needs-bin", r#"{"error": "missing_dependency", "name": "needs-bin", "missing": ["bin:cc-no-such-binary"]}"#),
        ("no-such-skill", r#"{"error": "skill_not_found", "name": "no-such-skill", "suggestions": []}"#),
    ] {
        let chat = ws.new_chat();
        let events = turn(&mut ws, &chat, "hi", &[name]);
        let last = events.last().expect("events");
        assert_eq!(error_detail(last), format!("Unable to load @{name}: {why}"), "{events:#?}");
        assert!(history_records(&server.home, &chat).is_empty());
    }
    assert_eq!(fake.chat_requests().len(), 2, "no model call for a selection that cannot load");
}

#[test]
fn agent_skill_manage_in_a_turn_publishes_into_the_catalog() {
    let OneChat { fake, server, mut ws, .. } = one_chat();
    let content =
        "---\nname: e2e-notes\ndisplay_name: 笔记\ndescription: Keep tidy notes\n---\n\n# Notes\n\n1. Write.\n";
    let manage = json!({"action": "create", "name": "e2e-notes", "content": content, "reason": "user asked"});
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_load", "skill_load", &[r#"{"name": "skill-creator"}"#])]));
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_manage", "agent_skill_manage", &[&manage.to_string()])]));
    fake.push(Reply::text(&["Created."]));
    let chat = ws.new_chat();
    let events = turn(&mut ws, &chat, "please create a notes skill", &[]);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:#?}");

    let r = server.get("/api/skills/e2e-notes");
    assert_eq!((r.status, r.json()["source"].clone()), (200, json!("agent")), "visible in the catalog");
    let reqs = fake.chat_requests();
    assert_eq!(reqs.len(), 3);
    let result: Value = serde_json::from_str(&last_tool_message(&reqs[2].body)).expect("manage result json");
    assert_eq!((&result["success"], &result["display_name"]), (&json!(true), &json!("笔记")));
    // skill_load's body went to the model; the history keeps the receipt only.
    assert!(last_tool_message(&reqs[1].body).contains("agent_skill_manage"));
    let h = history_records(&server.home, &chat);
    let tool_rows: Vec<&str> = h.iter().filter(|r| r["role"] == "tool").filter_map(|r| r["content"].as_str()).collect();
    assert!(tool_rows[0].starts_with("[Skill loaded: skill-creator@v1 sha256:") && !tool_rows[0].contains('\n'));
}

#[test]
fn evolution_proposes_after_two_matching_turns_and_ignores_failed_ones() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("SKILL_EVOLUTION_ENABLED", "1").start();
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let evidence_dir = server.home.join("data/skill-evolution/evidence");
    let evidence_users = || -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&evidence_dir) else { return Vec::new() };
        let mut users: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
            .map(|v| v["user"].as_str().unwrap_or("").to_string())
            .collect();
        users.sort();
        users
    };
    let two_searches = |id: &str| {
        fake.push(Reply::tool_calls(&[
            ToolCallSpec::new(&format!("{id}_a"), "skill_search", &[r#"{"query": "weather"}"#]),
            ToolCallSpec::new(&format!("{id}_b"), "skill_search", &[r#"{"query": "forecast"}"#]),
        ]));
        fake.push(Reply::text(&["Here is the plan."]));
    };

    // A turn whose tool failed leaves no evidence.
    fake.push(Reply::tool_calls(&[
        ToolCallSpec::new("f_a", "skill_load", &[r#"{"name": "missing-skill"}"#]),
        ToolCallSpec::new("f_b", "skill_search", &[r#"{"query": "x"}"#]),
    ]));
    fake.push(Reply::text(&["Sorry."]));
    let chat = ws.new_chat();
    turn(&mut ws, &chat, "plan my trip 1", &[]);

    let proposal = json!({"action": "create", "name": "trip-planner", "reason": "repeated",
        "candidate_content": "---\nname: trip-planner\ndescription: Plan a trip\n---\n\n# Trip\n\n1. Search.\n"});
    fake.push_completion(Reply::completion(&proposal.to_string()));
    two_searches("t2");
    turn(&mut ws, &chat, "plan my trip 2", &[]);
    wait_for("the first evidence file", WAIT, || (!evidence_users().is_empty()).then_some(()));
    two_searches("t3");
    let other = ws.new_chat();
    turn(&mut ws, &other, "Plan my trip 3", &[]);
    let items = wait_for("a proposal", WAIT, || {
        let v = server.get("/api/skill-evolution/proposals").json();
        v["items"].as_array().filter(|i| !i.is_empty()).cloned()
    });
    assert_eq!(evidence_users(), ["Plan my trip 3", "plan my trip 2"], "the failed turn left no evidence");
    let p = &items[0];
    assert_eq!((p["name"].as_str(), p["status"].as_str()), (Some("trip-planner"), Some("pending")));
    assert!(server.get("/api/skills/trip-planner").status == 404, "proposals are never auto-applied");
    let generator = fake.requests().into_iter().find(|r| r.is_chat() && r.body["stream"] != json!(true));
    let generator = generator.expect("the generator was called");
    assert!(generator.body.get("tools").is_none(), "the evolver gets no tools");

    let id = p["id"].as_str().expect("proposal id");
    let r = server.request("POST", &format!("/api/skill-evolution/proposals/{id}/approve"), &[], None);
    assert_eq!((r.status, r.json()["status"].clone()), (200, json!("applied")));
    assert_eq!(server.get("/api/skills/trip-planner").json()["source"], "agent");
}

#[test]
fn evolution_switches_are_listed_and_validated_at_startup() {
    let (code, out, _) = crate::common::server::run_to_exit(&["--help"], &[]);
    assert_eq!(code, Some(0));
    for var in ["SKILL_EVOLUTION_ENABLED", "SKILL_EVOLUTION_RECURRENCE", "SKILL_EVOLUTION_MAX_EVIDENCE"] {
        assert!(out.contains(var), "--help lists {var}:\n{out}");
    }
    let (code, _, err) = crate::common::server::run_to_exit(&[], &[("SKILL_EVOLUTION_RECURRENCE", "two")]);
    assert_eq!(code, Some(2), "a configuration error: {err}");
    assert!(err.contains("SKILL_EVOLUTION_RECURRENCE must be an integer"), "{err}");
}
