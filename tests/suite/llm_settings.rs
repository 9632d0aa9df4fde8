//! LLM settings API (docs/http-api.md §5, docs/llm-settings.md): the public shape, validation and its
//! exact messages, key handling (blank keeps, clear, never returned or logged), the file
//! format, `/test` and `/models` for both providers, load errors (503) and the legacy
//! DEEPSEEK_* migration.

use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use crate::common::*;

fn public(openai: &str, key: bool, ollama: &str) -> Value {
    let o_ready = !openai.is_empty() && key;
    let l_ready = !ollama.is_empty();
    json!({"configured": o_ready || l_ready,
           "openai_compatible":{"base_url":openai,"ready":o_ready,"api_key_configured":key},
           "ollama":{"base_url":ollama,"ready":l_ready}})
}

fn file_json(server: &TestServer) -> Value {
    serde_json::from_str(&std::fs::read_to_string(server.llm_json()).expect("llm.json")).expect("llm.json is JSON")
}

#[test]
fn settings_roundtrip_file_format_and_key_rules() {
    let server = TestServer::start();
    server.get("/api/settings/llm").expect(200, public("", false, ""));
    assert!(!server.llm_json().exists());

    let r = server.put(
        "/api/settings/llm",
        &json!({"openai_compatible":{"base_url":"  https://provider.example/v1/  ","api_key":format!("  {TEST_KEY}  ")},
                "ollama":{"base_url":"http://127.0.0.1:11434/v1/"}}),
    );
    r.expect(200, public("https://provider.example/v1", true, "http://127.0.0.1:11434"));
    server.get("/api/settings/llm").expect(200, public("https://provider.example/v1", true, "http://127.0.0.1:11434"));
    let text = std::fs::read_to_string(server.llm_json()).expect("llm.json");
    assert!(text.ends_with("}\n"), "pretty JSON with a trailing newline: {text:?}");
    assert!(text.contains("\n  \"version\": 2"), "2-space indent: {text:?}");
    assert_eq!(
        file_json(&server),
        json!({"version":2,"openai_compatible":{"base_url":"https://provider.example/v1","api_key":TEST_KEY},
               "ollama":{"base_url":"http://127.0.0.1:11434"}})
    );
    let mode = std::fs::metadata(server.llm_json()).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "llm.json mode {mode:o}");

    // Blank or null key keeps the stored one.
    for key in [json!(""), json!("   "), json!(null)] {
        server
            .put(
                "/api/settings/llm",
                &json!({"openai_compatible":{"base_url":"https://provider.example/v1","api_key":key},"ollama":{"base_url":""}}),
            )
            .expect(200, public("https://provider.example/v1", true, ""));
        assert_eq!(file_json(&server)["openai_compatible"]["api_key"], TEST_KEY);
    }
    server
        .put(
            "/api/settings/llm",
            &json!({"openai_compatible":{"base_url":"https://provider.example/v1"},"ollama":{"base_url":""}}),
        )
        .expect(200, public("https://provider.example/v1", true, ""));
    // Clearing the key needs another ready provider.
    let before = std::fs::read(server.llm_json()).expect("llm.json");
    server
        .put("/api/settings/llm", &json!({"openai_compatible":{"base_url":"https://provider.example/v1","clear_api_key":true},"ollama":{"base_url":""}}))
        .expect(422, json!({"detail":"at least one provider connection is required"}));
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), before, "a failed save changes nothing");
    server
        .put("/api/settings/llm", &json!({"openai_compatible":{"base_url":"https://provider.example/v1","clear_api_key":true},"ollama":{"base_url":"http://127.0.0.1:11434"}}))
        .expect(200, public("https://provider.example/v1", false, "http://127.0.0.1:11434"));
    assert_eq!(file_json(&server)["openai_compatible"]["api_key"], "");
}

#[test]
fn settings_validation_errors() {
    let server = TestServer::start();
    let put = |body: Value| server.put("/api/settings/llm", &body);
    let detail = |d: &str| json!({"detail": d});
    let ok_ollama = json!({"base_url":"http://127.0.0.1:11434"});
    let with_openai = |o: Value| json!({"openai_compatible":o,"ollama":{"base_url":""}});

    // Shape errors: 422 in list form with loc/msg.
    let r = put(json!({}));
    assert_eq!(r.status, 422, "{}", r.body);
    let items = r.json()["detail"].as_array().cloned().expect("list detail");
    let mut locs: Vec<Value> = items.iter().map(|i| i["loc"].clone()).collect();
    locs.sort_by_key(|l| l.to_string());
    assert_eq!(locs, vec![json!(["body", "ollama"]), json!(["body", "openai_compatible"])]);
    for i in &items {
        assert_eq!((i["type"].clone(), i["msg"].clone()), (json!("missing"), json!("Field required")));
    }
    let r = put(json!({"openai_compatible":{"base_url":""}}));
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["detail"][0]["loc"], json!(["body", "ollama"]));
    for body in [
        json!({"openai_compatible":{"base_url":""},"ollama":ok_ollama,"extra":1}),
        json!({"openai_compatible":{"base_url":"","model":"m"},"ollama":ok_ollama}),
        json!({"openai_compatible":{"base_url":""},"ollama":{"base_url":"http://x","model":"m"}}),
        json!({"openai_compatible":{"base_url":5},"ollama":ok_ollama}),
        json!({"openai_compatible":{"base_url":"","clear_api_key":"yes"},"ollama":ok_ollama}),
        json!({"openai_compatible":"x","ollama":ok_ollama}),
        json!([1]),
    ] {
        let r = put(body.clone());
        assert_eq!(r.status, 422, "{body}: {}", r.body);
        let d = r.json()["detail"].clone();
        assert!(
            d.as_array()
                .is_some_and(|a| !a.is_empty() && a.iter().all(|i| i["loc"].is_array() && i["msg"].is_string()))
                || d.is_string(),
            "{body}: {d}"
        );
    }
    let r = server.request("PUT", "/api/settings/llm", &[], Some("{not json"));
    assert_eq!(r.status, 422);

    // Domain errors: exact string details.
    put(json!({"openai_compatible":{"base_url":""},"ollama":{"base_url":""}}))
        .expect(422, detail("at least one provider connection is required"));
    put(with_openai(json!({"base_url":"https://x.example"})))
        .expect(422, detail("at least one provider connection is required"));
    put(with_openai(json!({"base_url":"","api_key":"sk-only-key"})))
        .expect(422, detail("at least one provider connection is required"));
    put(with_openai(json!({"base_url":"https://x.example","api_key":"sk-x","clear_api_key":true})))
        .expect(422, detail("api_key and clear_api_key cannot be submitted together"));
    let f = "openai_compatible.base_url";
    for (url, msg) in [
        ("ftp://x.example", format!("{f} must be an http or https URL")),
        ("x.example", format!("{f} must be an http or https URL")),
        ("http://", format!("{f} must be an http or https URL")),
        ("http://user:pw@x.example", format!("{f} must not contain credentials")),
        ("http://x.example/?q=1", format!("{f} must not contain query or fragment")),
        ("http://x.example/#frag", format!("{f} must not contain query or fragment")),
    ] {
        put(with_openai(json!({"base_url":url,"api_key":"sk-x"}))).expect(422, detail(&msg));
    }
    put(json!({"openai_compatible":{"base_url":""},"ollama":{"base_url":"file:///tmp"}}))
        .expect(422, detail("ollama.base_url must be an http or https URL"));
    let long_url = format!("https://x.example/{}", "p".repeat(2040));
    assert_eq!(put(with_openai(json!({"base_url":long_url,"api_key":"sk-x"}))).status, 422);
    let r = put(with_openai(json!({"base_url":"https://x.example","api_key":"k".repeat(16385)})));
    assert_eq!(r.status, 422);
    assert!(r.json()["detail"].as_str().is_some_and(|d| d.ends_with("is too long")), "{}", r.body);
    // The longest key is fine.
    put(with_openai(json!({"base_url":"https://x.example","api_key":"k".repeat(16384)})))
        .expect(200, public("https://x.example", true, ""));
    assert!(!server.http_seen().contains(&"k".repeat(100)), "the key came back in a response");
}

#[test]
fn key_never_appears_in_responses_logs_or_events() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    server.get("/api/settings/llm");
    server.get("/api/settings/llm/models");
    server.post(
        "/api/settings/llm/test",
        &json!({"provider":"openai_compatible","openai_compatible":{"base_url":fake.base()},"ollama":{"base_url":fake.base()}}),
    );
    // A 401 whose body echoes the key, on /models and on a turn.
    fake.set_models(
        "/models",
        Reply::status(401, &format!(r#"{{"error":{{"message":"Incorrect API key provided: {TEST_KEY}"}}}}"#)),
    );
    let r = server.post(
        "/api/settings/llm/test",
        &json!({"provider":"openai_compatible","openai_compatible":{"base_url":fake.base()},"ollama":{"base_url":""}}),
    );
    assert_eq!(r.status, 400);
    assert!(r.json()["detail"].as_str().is_some_and(|d| d.starts_with("Authentication failed")), "{}", r.body);
    let r = server.get("/api/settings/llm/models");
    assert_eq!(r.status, 200);
    let e = r.json()["providers"]["openai_compatible"]["error"].clone();
    assert!(e.as_str().is_some_and(|d| d.starts_with("Authentication failed")), "{e}");
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let secret_text = "zebra-unique-user-text-42";
    fake.push(Reply::text(&["answer-unique-model-text-77"]));
    ws.message(&chat, secret_text, "openai_compatible");
    ws.turn_events(&chat);
    fake.push(Reply::status(401, &format!(r#"{{"error":{{"message":"bad key {TEST_KEY}"}}}}"#)));
    ws.message(&chat, "again", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert!(error_detail(events.last().expect("error")).contains("401"));

    // The key was really used...
    assert!(fake.chat_requests().iter().all(|r| r.header("authorization") == Some(&format!("Bearer {TEST_KEY}"))));
    // ...and shows up nowhere else.
    let frames: String = ws.log.iter().map(Value::to_string).collect();
    let log = server.log_text();
    assert!(!log.is_empty(), "cashcode.log is written");
    for (what, text) in [
        ("HTTP responses", server.http_seen()),
        ("WebSocket frames", frames),
        ("cashcode.log", log.clone()),
        ("stderr", server.stderr_text()),
        ("stdout", server.stdout_text()),
    ] {
        assert!(!text.contains(KEY_MARKER), "the API key leaked into {what}");
    }
    // Message texts are not logged either.
    assert!(!log.contains(secret_text), "user text in cashcode.log");
    assert!(!log.contains("answer-unique-model-text-77"), "model text in cashcode.log");
}

#[test]
fn connection_test_route() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let before = std::fs::read(server.llm_json()).expect("llm.json");
    fake.set_models("/v1/models", Reply::json(json!({"data":[{"id":"qwen3:8b"},{"id":"llama3"}]})));
    // Ollama probe: /v1/models with the placeholder key; nothing saved.
    server
        .post(
            "/api/settings/llm/test",
            &json!({"provider":"ollama","openai_compatible":{"base_url":""},"ollama":{"base_url":format!("{}/v1", fake.base())}}),
        )
        .expect(200, json!({"success":true,"provider":"ollama","model_count":2,"message":"Connected, found 2 models"}));
    let probe = fake.requests().into_iter().find(|r| r.path == "/v1/models").expect("probe");
    assert_eq!(probe.header("authorization"), Some("Bearer ollama-local"));
    // openai_compatible with no key in the body uses the stored one.
    server
        .post(
            "/api/settings/llm/test",
            &json!({"provider":"openai_compatible","openai_compatible":{"base_url":fake.base()},"ollama":{"base_url":""}}),
        )
        .expect(200, json!({"success":true,"provider":"openai_compatible","model_count":2,"message":"Connected, found 2 models"}));
    let probe = fake.requests().into_iter().find(|r| r.path == "/models").expect("probe");
    assert_eq!(probe.header("authorization"), Some(format!("Bearer {TEST_KEY}").as_str()));
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), before, "test never saves");

    // Failures: 400 with a friendly category.
    let dead = format!("http://127.0.0.1:{}", dead_port());
    let r = server.post(
        "/api/settings/llm/test",
        &json!({"provider":"ollama","openai_compatible":{"base_url":""},"ollama":{"base_url":dead}}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["detail"].as_str().is_some_and(|d| d.starts_with("Cannot reach")), "{}", r.body);
    fake.set_models("/models", Reply::status(429, r#"{"error":{"message":"slow down"}}"#));
    let r = server.post(
        "/api/settings/llm/test",
        &json!({"provider":"openai_compatible","openai_compatible":{"base_url":fake.base(),"api_key":"sk-other"},"ollama":{"base_url":""}}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["detail"].as_str().is_some_and(|d| d.contains("busy")), "{}", r.body);
    // Bad provider id: list-form 422; provider not ready in the candidate: 422.
    let r = server.post(
        "/api/settings/llm/test",
        &json!({"provider":"bogus","openai_compatible":{"base_url":""},"ollama":{"base_url":""}}),
    );
    assert_eq!(r.status, 422);
    assert!(r.json()["detail"].is_array(), "{}", r.body);
    let r = server.post(
        "/api/settings/llm/test",
        &json!({"provider":"ollama","openai_compatible":{"base_url":fake.base()},"ollama":{"base_url":""}}),
    );
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), before);
}

#[test]
fn model_discovery_for_both_providers() {
    let fake = FakeLlm::start();
    let server = TestServer::start();
    server
        .get("/api/settings/llm/models")
        .expect(200, json!({"models":[],"providers":{"openai_compatible":{"ready":false,"error":null},"ollama":{"ready":false,"error":null}}}));
    server.configure_llm(&fake);
    let mut many: Vec<Value> = vec![
        json!({"id":"b-model"}),
        json!({"id":"  Alpha  "}),
        json!({"id":"b-model"}),
        json!({"id":""}),
        json!({"id":5}),
        json!({"name":"no id"}),
        json!({"id":"x".repeat(257)}),
        json!({"id":"Zeta"}),
        json!({"id":"apple"}),
    ];
    // Only the first 500 items count.
    for i in 0..600 {
        many.push(json!({"id": format!("zz-{i:03}")}));
    }
    fake.set_models("/models", Reply::json(json!({"object":"list","data":many})));
    fake.set_models("/v1/models", Reply::json(json!({"data":[{"id":"qwen3:8b"},{"id":"Llama3"}]})));
    let r = server.get("/api/settings/llm/models");
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let mut want: Vec<Value> = ["Alpha", "apple", "b-model", "Zeta"]
        .iter()
        .map(|id| json!({"provider":"openai_compatible","id":id}))
        .collect();
    let mut zz: Vec<String> = (0..491).map(|i| format!("zz-{i:03}")).collect();
    zz.sort();
    want.extend(zz.iter().map(|id| json!({"provider":"openai_compatible","id":id})));
    want.push(json!({"provider":"ollama","id":"Llama3"}));
    want.push(json!({"provider":"ollama","id":"qwen3:8b"}));
    assert_eq!(
        v["providers"],
        json!({"openai_compatible":{"ready":true,"error":null},"ollama":{"ready":true,"error":null}})
    );
    assert_eq!(v["models"].as_array().map(Vec::len), Some(want.len()));
    assert_eq!(v["models"], json!(want));
    let reqs = fake.requests();
    let oa = reqs.iter().find(|r| r.path == "/models").expect("openai probe");
    assert_eq!(oa.header("authorization"), Some(format!("Bearer {TEST_KEY}").as_str()));
    let ol = reqs.iter().find(|r| r.path == "/v1/models").expect("ollama probe");
    assert_eq!(ol.header("authorization"), Some("Bearer ollama-local"));

    // One provider down: still 200, its error set, the other's models listed.
    let dead = format!("http://127.0.0.1:{}", dead_port());
    server.put("/api/settings/llm", &llm_body(&fake.base(), &dead));
    fake.set_models("/models", Reply::json(json!({"data":[{"id":"only"}]})));
    let v = server.get("/api/settings/llm/models").json();
    assert_eq!(v["models"], json!([{"provider":"openai_compatible","id":"only"}]));
    assert_eq!(v["providers"]["openai_compatible"], json!({"ready":true,"error":null}));
    assert_eq!(v["providers"]["ollama"]["ready"], true);
    assert!(v["providers"]["ollama"]["error"].as_str().is_some_and(|e| e.starts_with("Cannot reach")), "{v}");
}

#[test]
fn unreadable_settings_file_gives_503_and_an_unconfigured_runtime() {
    for content in [
        "{not json",
        "{\"version\":3,\"openai_compatible\":{},\"ollama\":{}}",
        "{\"version\":2,\"openai_compatible\":{\"base_url\":\"ftp://x\",\"api_key\":\"k\"},\"ollama\":{}}",
    ] {
        let home = fresh_home("badllm");
        std::fs::create_dir_all(home.join("config/settings")).expect("mkdir");
        std::fs::write(home.join("config/settings/llm.json"), content).expect("write");
        let server = TestServer::builder().home(&home).start();
        let unusable = json!({"detail":"the LLM settings file is invalid or unreadable"});
        server.get("/api/settings/llm").expect(503, unusable.clone());
        server.get("/api/settings/llm/models").expect(503, unusable);
        let mut ws = WsClient::connect(&server);
        let chat = ws.chat_id.clone();
        ws.message(&chat, "hi", "openai_compatible");
        let events = ws.turn_events(&chat);
        assert!(error_detail(&events[0]).contains("LLM not configured"), "{content}");
        // The file is never echoed.
        assert!(!server.http_seen().contains("not json"));
    }
}

#[test]
fn legacy_deepseek_env_is_migrated_once() {
    let fake = FakeLlm::start();
    let home = fresh_home("deepseek");
    let mut server = TestServer::builder()
        .home(&home)
        .env("DEEPSEEK_API_KEY", "  sk-legacy-KEY987  ")
        .env("DEEPSEEK_API_BASE", &fake.base())
        .env("DEEPSEEK_MODEL", "deepseek-chat")
        .start();
    server.get("/api/settings/llm").expect(200, public(&fake.base(), true, ""));
    assert_eq!(
        file_json(&server),
        json!({"version":2,"openai_compatible":{"base_url":fake.base(),"api_key":"sk-legacy-KEY987"},"ollama":{"base_url":""}})
    );
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    fake.push(Reply::text(&["migrated"]));
    ws.message(&chat, "hi", "openai_compatible");
    ws.turn_events(&chat);
    assert_eq!(fake.chat_requests()[0].header("authorization"), Some("Bearer sk-legacy-KEY987"));
    // Once the file exists the variables are never read again.
    let before = std::fs::read(server.llm_json()).expect("llm.json");
    server.set_env("DEEPSEEK_API_KEY", Some("sk-another-KEY000"));
    server.restart();
    server.get("/api/settings/llm").expect(200, public(&fake.base(), true, ""));
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), before);
    // Without the file and without a key: nothing is created.
    let server2 = TestServer::builder().env("DEEPSEEK_API_KEY", "   ").start();
    assert!(!server2.llm_json().exists());
    server2.get("/api/settings/llm").expect(200, public("", false, ""));
}

fn moved(origin: &str) -> Value {
    json!({"detail": format!("the endpoint changed to {origin}; enter its API key again")})
}

fn bearer_of(r: &fake_llm::Recorded) -> String {
    r.header("authorization").unwrap_or("").to_string()
}

#[test]
fn the_stored_key_never_follows_a_new_endpoint() {
    let stored = FakeLlm::start();
    let attacker = FakeLlm::start();
    let server = TestServer::with_llm(&stored);
    let before = std::fs::read(server.llm_json()).expect("llm.json");
    let generic = |o: Value| json!({"openai_compatible": o, "ollama": {"base_url": ""}});
    let probe = |provider: &str, o: Value, ollama: &str| json!({"provider": provider, "openai_compatible": o, "ollama": {"base_url": ollama}});

    // A new origin without a key: 422 naming it, nothing saved, the new endpoint never called.
    let away = attacker.base();
    server.put("/api/settings/llm", &generic(json!({"base_url": format!("{away}/v1")}))).expect(422, moved(&away));
    server.put("/api/settings/llm", &generic(json!({"base_url": away, "api_key": "  "}))).expect(422, moved(&away));
    server
        .post("/api/settings/llm/test", &probe("openai_compatible", json!({"base_url": away}), ""))
        .expect(422, moved(&away));
    // Same host, another name, scheme or port: another origin.
    for other in [
        format!("http://localhost:{}", stored.port()),
        format!("https://127.0.0.1:{}", stored.port()),
        format!("http://127.0.0.1:{}", attacker.port()),
    ] {
        server
            .post("/api/settings/llm/test", &probe("openai_compatible", json!({"base_url": other}), ""))
            .expect(422, moved(&other));
    }
    assert!(attacker.requests().is_empty(), "the new endpoint was called: {:?}", attacker.requests());
    assert!(stored.requests().is_empty(), "a refused probe reached the stored endpoint");
    assert_eq!(std::fs::read(server.llm_json()).expect("llm.json"), before);

    // The same origin however it is spelt (case, another path): the stored key is reused there.
    let same = format!("HTTP://127.0.0.1:{}/v1/", stored.port());
    let r = server.post("/api/settings/llm/test", &probe("openai_compatible", json!({"base_url": same}), ""));
    assert_eq!(r.status, 200, "{}", r.body);
    let calls = stored.requests();
    assert_eq!(
        calls.iter().map(|c| (c.path.as_str(), bearer_of(c))).collect::<Vec<_>>(),
        [("/v1/models", format!("Bearer {TEST_KEY}"))]
    );

    // An Ollama probe needs no Generic key, so an edited Generic address does not block it.
    let r = server.post("/api/settings/llm/test", &probe("ollama", json!({"base_url": away}), &stored.base()));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(bearer_of(stored.requests().last().expect("ollama probe")), "Bearer ollama-local");

    // A key sent with the new endpoint is the one used; then same-origin edits keep it.
    let r = server.post(
        "/api/settings/llm/test",
        &probe("openai_compatible", json!({"base_url": away, "api_key": "sk-new-endpoint-KEY"}), ""),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    server
        .put("/api/settings/llm", &generic(json!({"base_url": away, "api_key": "sk-new-endpoint-KEY"})))
        .expect(200, public(&away, true, ""));
    server
        .put("/api/settings/llm", &generic(json!({"base_url": format!("{away}/v1/")})))
        .expect(200, public(&format!("{away}/v1"), true, ""));
    assert_eq!(file_json(&server)["openai_compatible"]["api_key"], "sk-new-endpoint-KEY");
    let seen: Vec<String> = attacker.requests().iter().map(bearer_of).collect();
    assert_eq!(seen, ["Bearer sk-new-endpoint-KEY"]);
    // And the old key is not carried back to the first endpoint either.
    let home = stored.base();
    server.put("/api/settings/llm", &generic(json!({"base_url": home}))).expect(422, moved(&home));
}

#[test]
fn default_ports_case_and_trailing_dots_are_one_origin() {
    let server = TestServer::start();
    let put = |o: Value| server.put("/api/settings/llm", &json!({"openai_compatible": o, "ollama": {"base_url": ""}}));
    put(json!({"base_url": "http://Provider.Example", "api_key": TEST_KEY}))
        .expect(200, public("http://Provider.Example", true, ""));
    for same in ["http://provider.example:80/v1", "HTTP://PROVIDER.EXAMPLE./v2", "http://provider.example.:80"] {
        let r = put(json!({"base_url": same}));
        assert_eq!(
            (r.status, r.json()["openai_compatible"]["api_key_configured"].clone()),
            (200, json!(true)),
            "{same}: {}",
            r.body
        );
    }
    assert_eq!(file_json(&server)["openai_compatible"]["api_key"], TEST_KEY);
    put(json!({"base_url": "https://provider.example"})).expect(422, moved("https://provider.example"));
    put(json!({"base_url": "http://provider.example:8080/v1"})).expect(422, moved("http://provider.example:8080"));
    put(json!({"base_url": "https://provider.example", "api_key": "sk-tls-KEY"}))
        .expect(200, public("https://provider.example", true, ""));
    put(json!({"base_url": "https://PROVIDER.example:443/v1"}))
        .expect(200, public("https://PROVIDER.example:443/v1", true, ""));
    assert_eq!(file_json(&server)["openai_compatible"]["api_key"], "sk-tls-KEY");
    put(json!({"base_url": "https://provider.example:8443"})).expect(422, moved("https://provider.example:8443"));
}

/// A build without the `tls` feature (`--no-default-features`) refuses `https://` LLM and MCP
/// endpoints at save and at the connection test with one message naming the feature; plain
/// HTTP to a local provider works in both builds.
#[test]
fn https_endpoints_need_the_tls_feature() {
    const TLS_MISSING: &str =
        "https:// endpoints need CashCode built with the `tls` feature (this build has it off); use an http:// endpoint";
    let server = TestServer::start();
    let https = json!({"openai_compatible":{"base_url":"https://provider.example/v1","api_key":TEST_KEY},
                       "ollama":{"base_url":""}});
    let local =
        json!({"openai_compatible":{"base_url":"","api_key":""},"ollama":{"base_url":"http://127.0.0.1:11434"}});
    server.put("/api/settings/llm", &local).expect(200, public("", false, "http://127.0.0.1:11434"));
    let mcp = json!({"name":"remote","type":"streamable_http","display_name":"Remote","description":"tls",
                     "url":"https://mcp.example/mcp"});
    // The binary's own build decides, so a run against another build (`CASHCODE_TEST_BIN`)
    // expects that build's answers; without an override it is this build.
    let features = crate::common::server::server_features();
    if std::env::var_os("CASHCODE_TEST_BIN").is_none() {
        let built: Vec<&str> = [(cfg!(feature = "tls"), "tls"), (cfg!(feature = "oauth"), "oauth")]
            .into_iter()
            .filter_map(|(on, f)| on.then_some(f))
            .collect();
        assert_eq!(features, built, "--version names the build's features");
    }
    if features.iter().any(|f| f == "tls") {
        server.put("/api/settings/llm", &https).expect(200, public("https://provider.example/v1", true, ""));
        assert_eq!(server.post("/api/mcp/servers", &mcp).status, 201);
    } else {
        server.put("/api/settings/llm", &https).expect(422, json!({"detail": TLS_MISSING}));
        let mut test = https.clone();
        test["provider"] = json!("openai_compatible");
        server.post("/api/settings/llm/test", &test).expect(422, json!({"detail": TLS_MISSING}));
        server.post("/api/mcp/servers", &mcp).expect(422, json!({"detail": TLS_MISSING}));
    }
}
