//! Provider conformance (docs/llm-settings.md "Providers"): streams recorded from real provider
//! APIs (tests/fixtures/providers, sources in its README) played by the fake model server,
//! which enforces the strict rules those APIs enforce (DeepSeek's `reasoning_content`
//! pass-back, Gemini's thought signatures, call ids echoed) and answers a breach with the
//! provider's own 400. Each provider: a tool turn, the next turn, and one after a restart;
//! the streamed answer is exactly the provider's text, with none of its reasoning, and the
//! reasoning arrives as `reasoning` events and stays on the stored answer.

use serde_json::{json, Value};

use crate::common::*;

struct Scenario {
    provider: &'static str,
    model: &'static str,
    /// A recorded stream that calls a tool, and one that answers.
    tool: &'static str,
    answer: &'static str,
    rules: &'static [Strict],
}

/// The text and the shown reasoning a recorded stream carries (the first reasoning key it
/// uses, else the text of its `reasoning_details`).
fn expected(name: &str) -> (String, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers").join(name);
    let (mut text, mut by_key, mut details, mut key) = (String::new(), String::new(), String::new(), None);
    for line in std::fs::read_to_string(path).expect(name).lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect(name);
        let d = &v["choices"][0]["delta"];
        for k in ["reasoning_content", "reasoning"] {
            if let Some(t) = d[k].as_str() {
                if *key.get_or_insert(k) == k {
                    by_key.push_str(t);
                }
            }
        }
        for item in d["reasoning_details"].as_array().into_iter().flatten() {
            details.push_str(item["text"].as_str().unwrap_or(""));
        }
        text.push_str(d["content"].as_str().unwrap_or(""));
    }
    (text, if key.is_some() { by_key } else { details })
}

fn frame(chat: &str, content: &str, s: &Scenario) -> Value {
    json!({"type":"message","chat_id":chat,"content":content,"metadata":{"llm":{"provider":s.provider,"model":s.model}}})
}

/// One turn to its end: the answer deltas and the reasoning events, joined; panics on an
/// `error` (a provider's 400 included).
fn turn(ws: &mut WsClient, chat: &str, content: &str, s: &Scenario) -> (String, String) {
    ws.send(&frame(chat, content, s));
    let events = ws.turn_events(chat);
    let last = events.last().expect("events");
    assert_eq!(last["event"], "done", "{}: the turn failed: {last}", s.model);
    let join = |kind: &str| -> String {
        events.iter().filter(|e| e["event"] == kind).map(|e| e["text"].as_str().expect("text")).collect()
    };
    // Reasoning comes before the answer within each model call: never after a delta of it.
    for e in events.iter().filter(|e| e["event"] == "reasoning") {
        assert!(e["stream_id"].is_u64() && e["seq"].is_u64(), "{e}");
    }
    (join("delta"), join("reasoning"))
}

fn run(s: &Scenario) {
    let fake = FakeLlm::start();
    for rule in s.rules {
        fake.enforce(*rule);
    }
    let mut server = TestServer::with_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let (tool_text, tool_reasoning) = expected(s.tool);
    let (answer_text, answer_reasoning) = expected(s.answer);

    // The tool turn: the recorded tool call (to a tool we lack: its error is the result),
    // then the recorded answer.
    fake.push(Reply::recorded(s.tool));
    fake.push(Reply::recorded(s.answer));
    let (text, reasoning) = turn(&mut ws, &chat, "use the tool", s);
    assert_eq!(text, format!("{tool_text}{answer_text}"), "{}: the answer is the provider's text", s.model);
    assert_eq!(reasoning, format!("{tool_reasoning}{answer_reasoning}"), "{}", s.model);
    if !reasoning.is_empty() {
        assert!(!text.contains(&reasoning), "{}: reasoning leaked into the answer", s.model);
    }

    // The next turn, and one after a restart: the fake refuses any request that lost the
    // provider's state, as the real API would.
    fake.push(Reply::recorded(s.answer));
    let (text, _) = turn(&mut ws, &chat, "and now?", s);
    assert_eq!(text, answer_text);
    drop(ws);
    server.restart();
    let mut ws = WsClient::connect(&server);
    ws.attach(&chat, None);
    fake.push(Reply::recorded(s.answer));
    let (text, _) = turn(&mut ws, &chat, "after restart", s);
    assert_eq!(text, answer_text);

    // History and the messages API carry the reasoning on the answer, not in it.
    let msgs = server.get(&format!("/api/sessions/{chat}/messages")).json();
    let answers: Vec<&Value> =
        msgs["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").collect();
    assert_eq!(answers.len(), 3, "{msgs}");
    assert_eq!(answers[0]["content"], format!("{tool_text}{answer_text}"));
    match reasoning.is_empty() {
        true => assert!(answers[0].get("reasoning_content").is_none(), "{msgs}"),
        false => {
            assert_eq!(answers[0]["reasoning_content"], reasoning, "{msgs}");
            assert!(answers[0]["reasoning_ms"].is_u64(), "{msgs}");
        }
    }
    assert!(fake.take_failures().is_empty());
}

#[test]
fn deepseek_thinking_with_a_tool_call() {
    let s = Scenario {
        provider: "openai_compatible",
        model: "deepseek-reasoner",
        tool: "deepseek-tool-call.chunks.txt",
        answer: "deepseek-reasoning.chunks.txt",
        rules: &[Strict::DeepSeekReasoning, Strict::EchoIds],
    };
    run(&s);
}

#[test]
fn gemini_3_thought_signatures() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "gemini-3-pro-preview",
        tool: "gemini-tool-call.chunks.txt",
        answer: "gemini-text.chunks.txt",
        rules: &[Strict::GeminiSignatures, Strict::EchoIds],
    });
}

#[test]
fn openrouter_reasoning_details() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "anthropic/claude-sonnet-4.5",
        tool: "openrouter-tool-call.chunks.txt",
        answer: "openrouter-text.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn moonshot_kimi() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "kimi-k2-thinking",
        tool: "kimi-tool-call.chunks.txt",
        answer: "kimi-reasoning.chunks.txt",
        rules: &[Strict::DeepSeekReasoning, Strict::EchoIds],
    });
}

#[test]
fn qwen_dashscope_compatible() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "qwen3-max",
        tool: "qwen-tool-call.chunks.txt",
        answer: "qwen-reasoning.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn zai_glm_keeps_the_name_a_later_fragment_blanks() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "glm-4.6",
        tool: "glm-tool-call.chunks.txt",
        answer: "glm-text.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn mistral_ids_without_index() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "mistral-small-latest",
        tool: "mistral-tool-call.chunks.txt",
        answer: "mistral-text.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn groq_usage_in_x_groq() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "llama-3.3-70b-versatile",
        tool: "groq-tool-call.chunks.txt",
        answer: "groq-text.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn xai_grok() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "grok-3-mini",
        tool: "xai-tool-call.chunks.txt",
        answer: "xai-text.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn azure_filter_results_first() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "gpt-4.1",
        tool: "azure-tool-call.chunks.txt",
        answer: "azure-text.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn anthropic_compatible_indexes_from_one() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "claude-haiku-4-5",
        tool: "anthropic-tool-call.chunks.txt",
        answer: "anthropic-text.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn ollama_v1_reasoning() {
    run(&Scenario {
        provider: "ollama",
        model: "qwen3:8b",
        tool: "ollama-tool-call.chunks.txt",
        answer: "ollama-text.chunks.txt",
        rules: &[Strict::EchoIds],
    });
}

#[test]
fn llama_cpp_reasoning_parser() {
    run(&Scenario {
        provider: "openai_compatible",
        model: "Qwen3-8B-Q4_K_M.gguf",
        tool: "llamacpp-tool-call.chunks.txt",
        answer: "llamacpp-text.chunks.txt",
        rules: &[Strict::DeepSeekReasoning, Strict::EchoIds],
    });
}

/// The state goes back verbatim to the provider and model that produced it, and never to
/// another model of the chat; the first request after the tool call already carries it.
#[test]
fn state_is_sent_back_verbatim_and_only_to_its_model() {
    let fake = FakeLlm::start();
    fake.enforce(Strict::DeepSeekReasoning);
    fake.enforce(Strict::GeminiSignatures);
    let server = TestServer::with_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let gemini = Scenario {
        provider: "openai_compatible",
        model: "gemini-3-pro-preview",
        tool: "gemini-tool-call.chunks.txt",
        answer: "gemini-text.chunks.txt",
        rules: &[],
    };
    fake.push(Reply::recorded(gemini.tool));
    fake.push(Reply::recorded(gemini.answer));
    turn(&mut ws, &chat, "run echo", &gemini);
    let reqs = fake.chat_requests();
    let call = &reqs[1].body["messages"].as_array().unwrap().iter().find(|m| m["tool_calls"].is_array()).unwrap()
        ["tool_calls"][0];
    assert_eq!(call["id"], "function-call-4167386371281263574");
    assert_eq!(
        call["extra_content"],
        json!({"google":{"thought_signature":"EjQKMgEMOdbHO0Gd+c9Mxk4ELwPGbpCEcp2mFfYYLix2UVtBH3fL8GECc4+JITVnHF4qZDsA"}})
    );

    // Another model of the chat never sees Gemini's signature.
    let other = Scenario { model: "mistral-small-latest", ..gemini };
    fake.push(Reply::recorded("mistral-text.chunks.txt"));
    turn(&mut ws, &chat, "switch", &other);
    let reqs = fake.chat_requests();
    let raw = &reqs.last().unwrap().raw;
    assert!(!raw.contains("thought_signature") && !raw.contains("extra_content"), "{raw}");

    // Back on Gemini: the signature goes back again.
    let back = Scenario { model: "gemini-3-pro-preview", ..other };
    fake.push(Reply::recorded("gemini-text.chunks.txt"));
    turn(&mut ws, &chat, "back", &back);
    assert!(fake.chat_requests().last().unwrap().raw.contains("thought_signature"));
    assert!(fake.take_failures().is_empty());
}

/// A chat whose tool step carries no state (older history, another model) gets
/// `"reasoning_content": ""` on it once DeepSeek is known to want the field; the stored
/// history is never rewritten.
#[test]
fn deepseek_gets_empty_reasoning_on_foreign_tool_calls() {
    let OneChat { fake, server, mut ws, chat } = one_chat();
    let mistral = Scenario {
        provider: "openai_compatible",
        model: "mistral-small-latest",
        tool: "mistral-tool-call.chunks.txt",
        answer: "mistral-text.chunks.txt",
        rules: &[],
    };
    fake.push(Reply::recorded(mistral.tool));
    fake.push(Reply::recorded(mistral.answer));
    turn(&mut ws, &chat, "weather", &mistral);
    fake.enforce(Strict::DeepSeekReasoning);
    let deepseek = Scenario { model: "deepseek-reasoner", ..mistral };
    fake.push(Reply::recorded("deepseek-tool-call.chunks.txt"));
    fake.push(Reply::recorded("deepseek-reasoning.chunks.txt"));
    turn(&mut ws, &chat, "again with deepseek", &deepseek);
    let last = fake.chat_requests().last().unwrap().body.clone();
    let steps: Vec<&Value> =
        last["messages"].as_array().unwrap().iter().filter(|m| m["tool_calls"].is_array()).collect();
    assert_eq!(steps.len(), 2, "{last}");
    assert_eq!(steps[0]["reasoning_content"], "", "the foreign step gets an empty field");
    assert!(steps[1]["reasoning_content"].as_str().is_some_and(|r| r.starts_with("The user")), "{last}");
    let history = std::fs::read_to_string(server.chat_dir(&chat).join("history.jsonl")).unwrap();
    let first_step: Value = serde_json::from_str(history.lines().nth(1).unwrap()).unwrap();
    assert_eq!(first_step["role"], "tool_calls");
    assert!(
        first_step.get("reasoning_content").is_none() && first_step.get("provider_state").is_none(),
        "{first_step}"
    );
}

/// A provider's refusal in any body shape gives its own message with the status.
#[test]
fn strict_provider_errors_name_their_message() {
    let OneChat { fake, server: _server, mut ws, chat } = one_chat();
    for (body, want) in [
        (GEMINI_400, "Function call is missing a thought_signature"),
        (DEEPSEEK_400, "The reasoning_content in the thinking mode must be passed back to the API."),
        ("Bad Request: model is not loaded", "Bad Request: model is not loaded"),
    ] {
        fake.push(Reply::status(400, body));
        // A new text each time: the fake takes an identical request for a retry.
        ws.message(&chat, want, "openai_compatible");
        let events = ws.turn_events(&chat);
        let detail = events.last().unwrap()["detail"].as_str().unwrap().to_string();
        assert!(detail.contains("HTTP 400") && detail.contains(want), "{detail}");
    }
}

fn deepseek() -> Scenario {
    Scenario {
        provider: "openai_compatible",
        model: "deepseek-reasoner",
        tool: "deepseek-tool-call.chunks.txt",
        answer: "deepseek-reasoning.chunks.txt",
        rules: &[],
    }
}

/// After a context-budget cut drops the chat's oldest turn, the tool step still sent carries
/// its reasoning (the fake refuses the request otherwise).
#[test]
fn state_survives_a_context_budget_cut() {
    let fake = FakeLlm::start();
    fake.enforce(Strict::DeepSeekReasoning);
    fake.set_completion_fallback(Reply::completion("SUMMARY"));
    let mut server = TestServer::with_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let s = deepseek();
    let long = "x".repeat(4000);
    fake.push(Reply::recorded("mistral-text.chunks.txt"));
    turn(&mut ws, &chat, &long, &s);
    fake.push(Reply::recorded(s.tool));
    fake.push(Reply::recorded(s.answer));
    turn(&mut ws, &chat, "use the tool", &s);
    // A budget that holds the tool turn but not the long one before it.
    let with_tool_step = fake.chat_requests().last().unwrap().raw.chars().count();
    drop(ws);
    server.set_env("CASHCODE_CONTEXT_BUDGET_CHARS", Some(&(with_tool_step - 2500).to_string()));
    server.restart();
    let mut ws = WsClient::connect(&server);
    ws.attach(&chat, None);
    fake.push(Reply::recorded(s.answer));
    turn(&mut ws, &chat, "after the cut", &s);
    let last = fake.chat_requests().into_iter().rfind(|r| r.body["stream"] == json!(true)).unwrap();
    assert!(!last.raw.contains(&long), "the long turn was cut");
    let step = last.body["messages"].as_array().unwrap().iter().find(|m| m["tool_calls"].is_array()).cloned();
    let (_, reasoning) = expected(s.tool);
    assert_eq!(step.expect("the tool step was kept")["reasoning_content"], reasoning);
}

/// Reasoning never reaches a consolidation summary's input or the chat's title.
#[test]
fn reasoning_stays_out_of_summaries_and_titles() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_CONSOLIDATE_CHARS", "300").start();
    server.configure_llm(&fake);
    fake.set_completion_fallback(Reply::completion("SUMMARY"));
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let s = deepseek();
    fake.push(Reply::recorded(s.tool));
    fake.push(Reply::recorded(s.answer));
    turn(&mut ws, &chat, "how many r in strawberry", &s);
    fake.push(Reply::recorded(s.answer));
    turn(&mut ws, &chat, "and in raspberry", &s);
    wait_for("a summary record", WAIT, || {
        history_records(&server.home, &chat).into_iter().find(|r| r["role"] == "summary")
    });
    let summariser: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.is_chat() && r.body["stream"] != json!(true))
        .map(|r| r.body["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect())
        .collect();
    assert!(!summariser.is_empty());
    let (answer, reasoning) = expected(s.answer);
    let (_, tool_reasoning) = expected(s.tool);
    let snippet = |r: &str| r.chars().take(40).collect::<String>();
    for raw in &summariser {
        assert!(raw.contains(&answer[..20]), "the transcript holds the answers: {raw}");
        assert!(!raw.contains(&snippet(&reasoning)) && !raw.contains(&snippet(&tool_reasoning)), "{raw}");
    }
    let sessions = server.get("/api/sessions").json();
    assert_eq!(sessions["sessions"][0]["title"], "how many r in strawberry");
}
