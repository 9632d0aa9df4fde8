//! End-to-end tests of skills inside real turns: a whole server (`app::start`) against a fake
//! OpenAI-compatible endpoint on 127.0.0.1 that replays a script and records every request.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bus::Selection;
use crate::bus::TurnRequest;
use crate::llm::Provider;

/// One scripted streamed reply.
enum Reply {
    Text(String),
    /// `(tool name, arguments JSON)` calls in one assistant message.
    Tools(Vec<(String, Value)>),
}

struct FakeLlm {
    port: u16,
    streams: Arc<Mutex<VecDeque<Reply>>>,
    completes: Arc<Mutex<VecDeque<String>>>,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

fn sse(reply: &Reply) -> String {
    let mut out = String::new();
    let mut push = |v: Value| out.push_str(&format!("data: {v}\n\n"));
    match reply {
        Reply::Text(t) => {
            push(json!({"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}]}));
            push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
        }
        Reply::Tools(calls) => {
            let tc: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"index": i, "id": format!("call_{i}"), "type": "function",
                           "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            push(json!({"choices": [{"index": 0, "delta": {"tool_calls": tc}, "finish_reason": null}]}));
            push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
        }
    }
    out.push_str("data: [DONE]\n\n");
    out
}

impl FakeLlm {
    fn start() -> FakeLlm {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("fake llm binds");
        let port = server.server_addr().to_ip().expect("ip listener").port();
        let fake = FakeLlm {
            port,
            streams: Arc::default(),
            completes: Arc::default(),
            requests: Arc::default(),
            stop: Arc::default(),
        };
        let (streams, completes, requests, stop) =
            (fake.streams.clone(), fake.completes.clone(), fake.requests.clone(), fake.stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let Ok(Some(mut rq)) = server.recv_timeout(Duration::from_millis(100)) else { continue };
                let mut body = String::new();
                let _ = rq.as_reader().read_to_string(&mut body);
                let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                requests.lock().unwrap().push(v.clone());
                let resp = if v["stream"] == true {
                    let reply = streams.lock().unwrap().pop_front().unwrap_or(Reply::Text("(script ended)".into()));
                    tiny_http::Response::from_string(sse(&reply)).with_header(
                        tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"text/event-stream"[..]).unwrap(),
                    )
                } else {
                    let text = completes.lock().unwrap().pop_front().unwrap_or_default();
                    tiny_http::Response::from_string(
                        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
                            .to_string(),
                    )
                    .with_header(tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]).unwrap())
                };
                let _ = rq.respond(resp);
            }
        });
        fake
    }

    fn script(&self, replies: Vec<Reply>) {
        self.streams.lock().unwrap().extend(replies);
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

struct World {
    home: PathBuf,
    llm: FakeLlm,
    server: Option<crate::app::Server>,
}

impl World {
    fn new(tag: &str, vars: &[(&str, &str)]) -> World {
        let llm = FakeLlm::start();
        let home = std::env::temp_dir().join(format!("cc-skills-e2e-{tag}-{}", crate::util::rand::hex(6)));
        let mut cfg = crate::config::Config::for_home(&home);
        cfg.deepseek_api_key = Some("sk-test-key-123456".into());
        cfg.deepseek_api_base = Some(format!("http://127.0.0.1:{}/v1", llm.port));
        for (k, v) in vars {
            cfg.vars.insert(k.to_string(), v.to_string());
        }
        let server = crate::app::start(cfg).expect("server starts");
        World { home, llm, server: Some(server) }
    }

    fn server(&self) -> &crate::app::Server {
        self.server.as_ref().expect("running")
    }

    /// Submits a turn and waits (with a deadline) until the chat is idle again.
    fn turn(&self, chat: &str, content: &str, mentioned: &[&str]) {
        let agent = &self.server().agent;
        agent
            .submit(TurnRequest {
                chat_id: chat.into(),
                content: content.into(),
                selection: Selection {
                    provider: Provider::OpenAiCompatible,
                    model: "fake-model".into(),
                    mentioned_skills: mentioned.iter().map(|n| json!({"name": n})).collect(),
                    selected_mcp_connectors: Vec::new(),
                },
            })
            .expect("turn queued");
        let deadline = Instant::now() + Duration::from_secs(20);
        while agent.busy(chat) {
            assert!(Instant::now() < deadline, "turn did not finish");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn history(&self, chat: &str) -> Vec<Value> {
        let text =
            std::fs::read_to_string(self.home.join("memory").join(chat).join("history.jsonl")).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

#[test]
fn mentioned_skill_body_reaches_the_model_and_only_the_receipt_is_persisted() {
    let w = World::new("mention", &[]);
    // A user skill with a recognisable body marker.
    let md = "---\nname: trip\ndescription: Trip planning steps\n---\n\n# Trip\n\nBODY-MARKER-7 do things.\n";
    w.server()
        .api()
        .skills
        .create(crate::skills::service::CreateRequest {
            name: "trip".into(),
            content: md.into(),
            source: crate::skills::Source::User,
            support_files: Default::default(),
            enabled: true,
            reason: None,
        })
        .unwrap();
    w.llm.script(vec![Reply::Text("Sunny.".into())]);
    w.turn("chat-a", "how is the weather?", &["trip"]);
    let reqs = w.llm.requests();
    assert_eq!(reqs.len(), 1);
    let msgs = reqs[0]["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["role"], "system");
    let selected = msgs[1]["content"].as_str().unwrap();
    assert!(selected.starts_with("The user explicitly selected these Skills:\n\n[Skill loaded: trip@v1 sha256:"));
    assert!(selected.contains("BODY-MARKER-7"), "the SKILL.md body is sent to the model");
    let tools: Vec<&str> =
        reqs[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    for t in ["skill_search", "skill_load", "skill_read_resource", "agent_skill_manage"] {
        assert!(tools.contains(&t), "{t} visible: {tools:?}");
    }

    let h = w.history("chat-a");
    let roles: Vec<&str> = h.iter().map(|r| r["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"]);
    assert_eq!(h[0]["mentioned_skills"], json!([{"name": "trip"}]));
    let receipt = h[1]["content"].as_str().unwrap();
    assert!(receipt.starts_with("[Skill loaded: trip@v1 sha256:") && receipt.ends_with(']'));
    assert_eq!(h[2]["content"], "Sunny.");
    let raw = std::fs::read_to_string(w.home.join("memory/chat-a/history.jsonl")).unwrap();
    assert!(!raw.contains("BODY-MARKER-7"), "skill bodies are never persisted");
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(w.home.join("memory/chat-a/metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["activated_skills"]["trip"]["version"], 1);

    // Next turn: the summary hint names the skill, the body is gone.
    w.llm.script(vec![Reply::Text("Ok.".into())]);
    w.turn("chat-a", "@trip and tomorrow?", &[]);
    let reqs = w.llm.requests();
    let msgs = reqs[1]["messages"].as_array().unwrap();
    let system = msgs[0]["content"].as_str().unwrap();
    assert!(system.contains("## Recently activated Skills\n"), "{system}");
    assert!(system.contains("- trip: Trip planning steps"));
    assert_eq!(msgs.last().unwrap()["content"], "and tomorrow?", "a leading @name is removed for the model");
    assert!(msgs[1]["content"].as_str().unwrap().contains("BODY-MARKER-7"), "legacy @name loads the skill");
    assert_eq!(w.history("chat-a")[3]["content"], "@trip and tomorrow?", "stored content is unchanged");

    // A skill with an unmet dependency cannot be selected.
    let md = "---\nname: needs-bin\ndescription: d\nrequires:\n  bins: [cc-no-such-binary]\n---\n\nBody.\n";
    w.server()
        .api()
        .skills
        .create(crate::skills::service::CreateRequest {
            name: "needs-bin".into(),
            content: md.into(),
            source: crate::skills::Source::User,
            support_files: Default::default(),
            enabled: true,
            reason: None,
        })
        .unwrap();
    w.turn("chat-c", "hi", &["needs-bin"]);
    assert_eq!(w.llm.requests().len(), 2);
    assert!(w.history("chat-c").is_empty());

    // An unknown selection fails the turn before the model is called; nothing is persisted.
    w.turn("chat-b", "hi", &["no-such-skill"]);
    assert_eq!(w.llm.requests().len(), 2);
    assert!(w.history("chat-b").is_empty());
}

#[test]
fn agent_skill_manage_in_a_turn_publishes_into_the_catalog() {
    let w = World::new("manage", &[]);
    let content =
        "---\nname: e2e-notes\ndisplay_name: 笔记\ndescription: Keep tidy notes\n---\n\n# Notes\n\n1. Write.\n";
    w.llm.script(vec![
        Reply::Tools(vec![("skill_load".into(), json!({"name": "skill-creator"}))]),
        Reply::Tools(vec![(
            "agent_skill_manage".into(),
            json!({"action": "create", "name": "e2e-notes", "content": content, "reason": "user asked"}),
        )]),
        Reply::Text("Created.".into()),
    ]);
    w.turn("chat-m", "please create a notes skill", &[]);
    let skills = &w.server().api().skills;
    let rec = skills.get("e2e-notes").expect("visible in the catalog");
    assert_eq!(rec.source, crate::skills::Source::Agent);
    let reqs = w.llm.requests();
    assert_eq!(reqs.len(), 3);
    let tool_msg = reqs[2]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap().clone();
    let result: Value = serde_json::from_str(tool_msg["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["success"], true);
    assert_eq!(result["display_name"], "笔记");
    // skill_load's body went to the model, the history keeps the receipt only.
    let load_msg =
        &reqs[1]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap()["content"];
    assert!(load_msg.as_str().unwrap().contains("agent_skill_manage"));
    let h = w.history("chat-m");
    let tool_rows: Vec<&str> =
        h.iter().filter(|r| r["role"] == "tool").map(|r| r["content"].as_str().unwrap()).collect();
    assert!(tool_rows[0].starts_with("[Skill loaded: skill-creator@v1 sha256:") && !tool_rows[0].contains('\n'));
}

#[test]
fn evolution_proposes_after_two_matching_turns_and_ignores_failed_ones() {
    let w = World::new("evo", &[("SKILL_EVOLUTION_ENABLED", "1")]);
    let two_tools = || {
        vec![
            Reply::Tools(vec![
                ("skill_search".into(), json!({"query": "weather"})),
                ("skill_search".into(), json!({"query": "forecast"})),
            ]),
            Reply::Text("Here is the plan.".into()),
        ]
    };
    let evo = w.server().api().evolution.clone();
    let evidence_dir = w.home.join("data/skill-evolution/evidence");
    let evidence = || std::fs::read_dir(&evidence_dir).map(|d| d.count()).unwrap_or(0);
    let wait_for = |what: &str, f: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    // A turn whose tool failed leaves no evidence.
    w.llm.script(vec![
        Reply::Tools(vec![
            ("skill_load".into(), json!({"name": "missing-skill"})),
            ("skill_search".into(), json!({"query": "x"})),
        ]),
        Reply::Text("Sorry.".into()),
    ]);
    w.turn("chat-e", "plan my trip 1", &[]);
    // The gate runs synchronously on the worker before the chat goes idle: nothing was queued.
    assert_eq!(evidence(), 0);

    let proposal = json!({"action": "create", "name": "trip-planner", "reason": "repeated",
        "candidate_content": "---\nname: trip-planner\ndescription: Plan a trip\n---\n\n# Trip\n\n1. Search.\n"});
    w.llm.completes.lock().unwrap().push_back(proposal.to_string());
    w.llm.script(two_tools());
    w.turn("chat-e", "plan my trip 2", &[]);
    wait_for("first evidence", &|| evidence() == 1);
    w.llm.script(two_tools());
    w.turn("chat-f", "Plan my trip 3", &[]);
    wait_for("a proposal", &|| evo.list()["items"].as_array().is_some_and(|i| !i.is_empty()));
    let items = evo.list()["items"].clone();
    let p = &items[0];
    assert_eq!((p["name"].as_str(), p["status"].as_str()), (Some("trip-planner"), Some("pending")));
    let generator_req = w.llm.requests().into_iter().find(|r| r["stream"] == false).expect("generator called");
    assert!(generator_req.get("tools").is_none(), "the evolver gets no tools");
    let applied = evo.approve(p["id"].as_str().unwrap()).unwrap();
    assert_eq!(applied["status"], "applied");
    assert_eq!(w.server().api().skills.get("trip-planner").unwrap().source, crate::skills::Source::Agent);
}
