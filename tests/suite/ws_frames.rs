//! Frame-level handling (docs/ws-protocol.md §1, §3, §3.1): the typed-envelope rule, unknown types,
//! every `message` validation error in its documented order, chat-id rules, binary frames and
//! the 1 MiB size limit. Each bad frame gets exactly one `error` reply to its sender and the
//! connection (and the server) keeps working.

use serde_json::{json, Value};
use tungstenite::Message;

use crate::common::*;

const MAX_FRAME: usize = 1_048_576;

fn llm() -> Value {
    json!({"provider":"openai_compatible","model":MODEL})
}

/// Sends `frame` and asserts the single reply and that nothing else follows.
#[track_caller]
fn expect_error(ws: &mut WsClient, frame: &Value, want: Value) {
    let got = ws.reply_to(frame);
    assert_eq!(got, want, "frame {frame}");
}

#[test]
fn envelope_errors_and_ping_pong() {
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    let envelope = json!({"event":"error","detail":"typed JSON envelope required"});
    for bad in [
        "hello",
        "",
        "   ",
        "[1,2]",
        "\"ping\"",
        "42",
        "null",
        "{}",
        "{\"type\":5}",
        "{\"type\":null}",
        "{\"type\":[\"ping\"]}",
        "{\"type\":\"ping\"",
        "{bad json}",
    ] {
        ws.send_text(bad);
        assert_eq!(ws.recv(), envelope, "frame {bad:?}");
    }
    ws.send_text("  {\"type\":\"ping\",\"extra\":{\"ignored\":true}}  ");
    assert_eq!(ws.recv(), json!({"event":"pong"}));
    expect_error(&mut ws, &json!({"type":"bogus"}), json!({"event":"error","detail":"unknown type: 'bogus'"}));
    expect_error(&mut ws, &json!({"type":"it's"}), json!({"event":"error","detail":"unknown type: \"it's\""}));
    expect_error(&mut ws, &json!({"type":""}), json!({"event":"error","detail":"unknown type: ''"}));
    ws.ping_sync();
    // The server is fine for others too.
    let mut other = WsClient::connect(&server);
    other.ping_sync();
}

#[test]
fn chat_id_rules_for_attach_cancel_and_message() {
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    let invalid = json!({"event":"error","detail":"invalid chat_id"});
    let long = "a".repeat(65);
    let bad_ids = [
        json!(null),
        json!(""),
        json!("a/b"),
        json!(".."),
        json!("has space"),
        json!("ünïcode"),
        json!(long),
        json!(5),
        json!(["x"]),
    ];
    for id in &bad_ids {
        for ty in ["attach", "cancel", "stop"] {
            expect_error(&mut ws, &json!({"type":ty,"chat_id":id}), invalid.clone());
        }
        // Message: the chat id is checked first, before content and metadata.
        expect_error(&mut ws, &json!({"type":"message","chat_id":id,"content":"","metadata":5}), invalid.clone());
    }
    for ty in ["attach", "cancel", "stop", "message"] {
        expect_error(&mut ws, &json!({"type":ty}), invalid.clone());
    }
    // The full id alphabet and the 64-char maximum are accepted; existence is not checked.
    let ok64 = format!("Az09_:-{}", "x".repeat(57));
    assert_eq!(ws.attach(&ok64, None), 0);
    ws.send(&json!({"type":"cancel","chat_id":ok64}));
    assert_eq!(ws.recv(), json!({"event":"stop_ack","chat_id":ok64}));
    ws.ping_sync();
}

#[test]
fn message_content_errors_carry_the_chat_id() {
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let missing = json!({"event":"error","detail":"missing content","chat_id":chat});
    for content in [json!(null), json!(""), json!(" \n\t "), json!(5), json!(["hi"]), json!({"t":"hi"})] {
        expect_error(
            &mut ws,
            &json!({"type":"message","chat_id":chat,"content":content,"metadata":{"llm":llm()}}),
            missing.clone(),
        );
    }
    // Content is checked before metadata.
    expect_error(&mut ws, &json!({"type":"message","chat_id":chat,"metadata":"bad"}), missing);
    ws.ping_sync();
}

#[test]
fn every_metadata_validation_error() {
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let skill = |n: usize| -> Vec<Value> { (0..n).map(|i| json!({"name":format!("s{i}")})).collect() };
    let mcp = |n: usize| -> Vec<Value> { (0..n).map(|i| json!({"server":format!("m{i}")})).collect() };
    let long_label = "L".repeat(101);
    let cases: Vec<(Value, &str)> = vec![
        // metadata itself
        (json!(null), "llm selection is required"),
        (json!("x"), "metadata must be an object"),
        (json!([]), "metadata must be an object"),
        (json!(7), "metadata must be an object"),
        // llm
        (json!({}), "llm selection is required"),
        (json!({"llm":null}), "llm selection is required"),
        (json!({"llm":"openai_compatible"}), "llm must be an object"),
        (json!({"llm":[]}), "llm must be an object"),
        (json!({"llm":{"provider":"openai","model":"m"}}), "llm.provider is invalid"),
        (json!({"llm":{"model":"m"}}), "llm.provider is invalid"),
        (json!({"llm":{"provider":5,"model":"m"}}), "llm.provider is invalid"),
        (json!({"llm":{"provider":"OLLAMA","model":"m"}}), "llm.provider is invalid"),
        (json!({"llm":{"provider":"ollama"}}), "llm.model must be a string"),
        (json!({"llm":{"provider":"ollama","model":5}}), "llm.model must be a string"),
        (json!({"llm":{"provider":"ollama","model":null}}), "llm.model must be a string"),
        (json!({"llm":{"provider":"ollama","model":"   "}}), "llm.model is invalid"),
        (json!({"llm":{"provider":"ollama","model":"a".repeat(257)}}), "llm.model is invalid"),
        (json!({"llm":{"provider":"ollama","model":"a\u{0}b"}}), "llm.model is invalid"),
        // the count: raw lengths, duplicates included; after llm, before item checks
        (
            json!({"llm":llm(),"mentioned_skills":skill(5),"selected_mcp_connectors":mcp(4)}),
            "at most 8 Skill/MCP selections are allowed",
        ),
        (
            json!({"llm":llm(),"mentioned_skills":vec![json!({"name":"same"}); 9]}),
            "at most 8 Skill/MCP selections are allowed",
        ),
        (
            json!({"llm":llm(),"selected_mcp_connectors":vec![json!(5); 9]}),
            "at most 8 Skill/MCP selections are allowed",
        ),
        (json!({"llm":{"provider":"nope","model":"m"},"mentioned_skills":skill(9)}), "llm.provider is invalid"),
        // mentioned_skills items
        (json!({"llm":llm(),"mentioned_skills":"weather"}), "mentioned_skills must be a list"),
        (json!({"llm":llm(),"mentioned_skills":{"name":"w"}}), "mentioned_skills must be a list"),
        (json!({"llm":llm(),"mentioned_skills":[5]}), "mentioned_skills entries must be objects"),
        (json!({"llm":llm(),"mentioned_skills":["weather"]}), "mentioned_skills entries must be objects"),
        (json!({"llm":llm(),"mentioned_skills":[{}]}), "mentioned_skills.name is invalid"),
        (json!({"llm":llm(),"mentioned_skills":[{"name":5}]}), "mentioned_skills.name is invalid"),
        (json!({"llm":llm(),"mentioned_skills":[{"name":"Weather"}]}), "mentioned_skills.name is invalid"),
        (json!({"llm":llm(),"mentioned_skills":[{"name":"-lead"}]}), "mentioned_skills.name is invalid"),
        (json!({"llm":llm(),"mentioned_skills":[{"name":"a b"}]}), "mentioned_skills.name is invalid"),
        (json!({"llm":llm(),"mentioned_skills":[{"name":"a".repeat(65)}]}), "mentioned_skills.name is invalid"),
        (json!({"llm":llm(),"mentioned_skills":[{"name":"w","label":5}]}), "mentioned_skills.label must be a string"),
        (
            json!({"llm":llm(),"mentioned_skills":[{"name":"w","label":long_label}]}),
            "mentioned_skills.label must be at most 100 characters",
        ),
        // selected_mcp_connectors items
        (json!({"llm":llm(),"selected_mcp_connectors":"x"}), "selected_mcp_connectors must be a list"),
        (json!({"llm":llm(),"selected_mcp_connectors":[null]}), "selected_mcp_connectors entries must be objects"),
        (json!({"llm":llm(),"selected_mcp_connectors":[{"name":"x"}]}), "selected_mcp_connectors.server is invalid"),
        (
            json!({"llm":llm(),"selected_mcp_connectors":[{"server":"a.b"}]}),
            "selected_mcp_connectors.server is invalid",
        ),
        (json!({"llm":llm(),"selected_mcp_connectors":[{"server":"UP"}]}), "selected_mcp_connectors.server is invalid"),
        (
            json!({"llm":llm(),"selected_mcp_connectors":[{"server":"ok","label":[]}]}),
            "selected_mcp_connectors.label must be a string",
        ),
        (
            json!({"llm":llm(),"selected_mcp_connectors":[{"server":"ok","label":"é".repeat(101)}]}),
            "selected_mcp_connectors.label must be at most 100 characters",
        ),
        // the first failing list wins in field order: skills before MCP
        (
            json!({"llm":llm(),"mentioned_skills":[5],"selected_mcp_connectors":"x"}),
            "mentioned_skills entries must be objects",
        ),
    ];
    for (metadata, detail) in cases {
        expect_error(
            &mut ws,
            &json!({"type":"message","chat_id":chat,"content":"hi","metadata":metadata}),
            json!({"event":"error","detail":detail,"chat_id":chat}),
        );
    }
    // Absent metadata is the same as null.
    expect_error(
        &mut ws,
        &json!({"type":"message","chat_id":chat,"content":"hi"}),
        json!({"event":"error","detail":"llm selection is required","chat_id":chat}),
    );
    ws.ping_sync();
    // Nothing was queued or created.
    assert!(!server.chat_dir(&chat).exists());
}

#[test]
fn valid_edge_metadata_is_accepted() {
    // Accepted frames reach the turn, which (nothing configured) reports "LLM not configured";
    // that proves validation passed: labels of exactly 100 chars, 8 selections with nulls,
    // a 256-char model, padded model/labels, unknown extra keys.
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let label = "é".repeat(100);
    let metadatas = vec![
        json!({"llm":{"provider":"ollama","model":"m".repeat(256)}}),
        json!({"llm":{"provider":"ollama","model":"  padded  "},"revert_keep_user_turns":3}),
        json!({"llm":llm(),"mentioned_skills":null,"selected_mcp_connectors":null}),
        json!({"llm":llm(),"mentioned_skills":[{"name":" weather ","label":label},{"name":"weather"}],
               "selected_mcp_connectors":[{"server":"m1","label":"  "},{"server":"m2","label":"a\u{0}b"}]}),
        json!({"llm":llm(),"mentioned_skills":[{"name":"a.b_c-d"},{"name":"x"},{"name":"y"},{"name":"z"}],
               "selected_mcp_connectors":[{"server":"a_b-c"},{"server":"q"},{"server":"r"},{"server":"s"}]}),
    ];
    for metadata in metadatas {
        let provider = metadata["llm"]["provider"].as_str().unwrap_or("").to_string();
        ws.send(&json!({"type":"message","chat_id":chat,"content":"hi","metadata":metadata}));
        let v = ws.recv();
        let detail = v["detail"].as_str().unwrap_or("");
        assert!(
            v["event"] == "error"
                && v["chat_id"] == chat.as_str()
                && detail.contains("LLM not configured")
                && detail.contains(&provider),
            "metadata {metadata} was not accepted: {v:?}"
        );
    }
}

/// A message frame nesting `depth` levels: envelope, `metadata`, then objects in an ignored key.
fn nested_message(chat: &str, depth: usize) -> String {
    let extra = depth - 2;
    format!(
        r#"{{"type":"message","chat_id":"{chat}","content":"hi","metadata":{{"llm":{},"x":{}1{}}}}}"#,
        llm(),
        r#"{"a":"#.repeat(extra),
        "}".repeat(extra)
    )
}

#[test]
fn frames_nest_at_most_32_levels() {
    // The deepest frame accepted is parsed on the real `ws-client` thread (128 KiB stack; a
    // debug build is the worst case) and reaches the turn; one level deeper, and serde_json's
    // own limit far deeper, are refused as invalid JSON before parsing.
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    ws.send_text(&nested_message(&chat, 32));
    let v = ws.recv();
    assert!(
        v["event"] == "error" && v["detail"].as_str().unwrap_or("").contains("LLM not configured"),
        "the 32-level frame was not accepted: {v}"
    );
    for depth in [33, 128, 129, 100_000] {
        ws.send_text(&nested_message(&chat, depth));
        assert_eq!(ws.recv(), json!({"event":"error","detail":"typed JSON envelope required"}), "depth {depth}");
    }
    ws.ping_sync();
}

#[test]
fn oversized_frames_get_an_error_and_the_connection_survives() {
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    let too_large = json!({"event":"error","detail":"message too large (max 1048576 bytes)"});
    // Exactly 1 MiB is allowed.
    let head = "{\"type\":\"ping\",\"pad\":\"";
    let pad = "x".repeat(MAX_FRAME - head.len() - 2);
    let exact = format!("{head}{pad}\"}}");
    assert_eq!(exact.len(), MAX_FRAME);
    ws.send_text(&exact);
    assert_eq!(ws.recv(), json!({"event":"pong"}));
    // One byte more is refused, text or binary, and the connection stays.
    let over = format!("{head}{pad}x\"}}");
    assert_eq!(over.len(), MAX_FRAME + 1);
    ws.send_text(&over);
    assert_eq!(ws.recv(), too_large);
    ws.ping_sync();
    ws.send_raw(Message::binary(over.clone().into_bytes()));
    assert_eq!(ws.recv(), too_large);
    ws.ping_sync();
    // Far over the limit (4 MiB) as well.
    let huge = "y".repeat(4 * MAX_FRAME);
    ws.send_text(&huge);
    assert_eq!(ws.recv(), too_large);
    ws.ping_sync();
    let mut other = WsClient::connect(&server);
    other.ping_sync();
}

#[test]
fn binary_frames_are_decoded_as_text_and_bad_utf8_is_ignored() {
    let server = TestServer::start();
    let mut ws = WsClient::connect(&server);
    ws.send_raw(Message::binary(b"{\"type\":\"ping\"}".to_vec()));
    assert_eq!(ws.recv(), json!({"event":"pong"}));
    ws.send_raw(Message::binary(vec![0xff, 0xfe, 0x7b]));
    // Silently ignored: the next frame is the pong of the following ping.
    ws.ping_sync();
    ws.send_raw(Message::binary(b"nope".to_vec()));
    assert_eq!(ws.recv(), json!({"event":"error","detail":"typed JSON envelope required"}));
}

#[test]
fn a_client_joining_ever_new_chats_stays_subscribed_to_the_newest_1024() {
    let OneChat { fake, server, ws: mut flood, chat: first } = one_chat();
    let newest: Vec<String> = (0..1024).map(|_| flood.new_chat()).collect();
    // The connection's own chat was the oldest of 1,025: it was left; the newest are kept.
    let mut b = WsClient::connect(&server);
    for (chat, text) in [(&first, "left"), (&newest[0], "kept")] {
        fake.push(Reply::text(&[text]));
        b.message(chat, text, "openai_compatible");
        b.turn_events(chat);
    }
    let frames = flood.turn_frames(&newest[0]);
    assert!(frames.iter().all(|v| v["chat_id"] != first.as_str()), "the chat it left still reached it: {frames:?}");
    let (masked, _) = mask_turn(&frames, 1);
    assert_eq!(masked, plain_answer(&newest[0], Some("kept"), &["kept"]));
    flood.ping_sync();
}

#[test]
fn new_chat_and_attach_subscribe() {
    let OneChat { fake, server, mut ws, .. } = one_chat();
    let chat = ws.new_chat();
    assert_ne!(chat, ws.chat_id);
    let other = ws.new_chat();
    assert_ne!(chat, other);
    // The new chat has no files until a message is sent.
    assert!(!server.chat_dir(&chat).exists());
    // A second client starts a turn on `chat`; the first one, subscribed by new_chat, sees it.
    let mut b = WsClient::connect(&server);
    fake.push(Reply::text(&["seen"]));
    b.message(&chat, "via b", "openai_compatible");
    let (masked, _) = mask_turn(&ws.turn_events(&chat), 1);
    assert_eq!(masked, plain_answer(&chat, Some("via b"), &["seen"]));
    b.turn_events(&chat);
}
