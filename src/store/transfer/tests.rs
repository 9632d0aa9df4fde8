//! Export → import round trips, the foreign shapes, ATIF's schema and every hostile file.

use std::fs;
use std::io::{Cursor, Write};
use std::path::PathBuf;

use serde_json::{json, Map, Value};
use zip::write::SimpleFileOptions;

use super::export::{self, Format};
use super::import::{self, Source};
use super::*;
use crate::store::chats::{ChatStore, Record};

fn store() -> (ChatStore, PathBuf) {
    let d = std::env::temp_dir().join(format!("cc-transfer-{}", crate::util::rand::hex(6)));
    fs::create_dir_all(&d).unwrap();
    (ChatStore::new(&d), d)
}

/// Every file and directory under `root`, with each file's bytes: "nothing changed" compares two.
fn snapshot(root: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
                out.push((rel, Vec::new()));
            } else {
                out.push((rel, fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A chat with every record kind, non-ASCII text, reasoning and a summary.
fn seed(s: &ChatStore, id: &str) {
    let mut user = Record::new("user", "列出文件 please `ls`");
    user.mentioned_skills = Some(json!(["weather"]));
    let mut calls = Record::new("tool_calls", "[TOOL_CALLS: list_dir]");
    calls.tool_calls = Some(
        json!([{"id": "call_a1", "function": {"arguments": "{\"path\":\".\"}", "name": "list_dir"}, "type": "function"}]),
    );
    let mut result = Record::new("tool", "a.txt\nb ```fence``` .md");
    result.tool_call_id = Some("call_a1".into());
    result.name = Some("list_dir".into());
    s.append(id, &mut [user, calls, result, Record::new("assistant", "Two files: **a.txt** and b.md")]).unwrap();
    let mut summary = Record::new("summary", "earlier: listed files");
    summary.keep_from_cursor = Some(3);
    s.append(id, &mut [summary]).unwrap();
    // A record the typed reader does not know all of: a reasoning model's answer.
    let path = s.history_path(id).unwrap();
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(
        b"{\"cursor\": 6, \"timestamp\": \"2026-01-02 03:04\", \"role\": \"assistant\", \"content\": \"Done.\", \"reasoning_content\": \"The user wants files.\\nSo list them.\"}\n",
    )
    .unwrap();
    fs::write(s.root().join(".cursor"), b"").ok();
    fs::write(path.parent().unwrap().join(".cursor"), b"6").unwrap();
    let mut meta = Map::new();
    meta.insert("title".into(), json!("文件 listing"));
    s.write_metadata(id, &meta).unwrap();
}

#[test]
fn native_export_imports_back_byte_for_byte_under_a_new_id() {
    let (s, root) = store();
    seed(&s, "c1");
    let jsonl = export::one(&s, "c1", Format::Jsonl).unwrap().unwrap();
    assert_eq!(jsonl, fs::read(s.history_path("c1").unwrap()).unwrap());

    // Into the same store: the id is taken, so the copy gets a fresh one; the original stays.
    let before = fs::read(s.history_path("c1").unwrap()).unwrap();
    let (source, chats) = import::read("c1.jsonl", &jsonl).unwrap();
    assert_eq!(source, Source::Native);
    let done = import::write(&s, &chats).unwrap();
    assert_eq!(done.len(), 1);
    assert_ne!(done[0].chat_id, "c1");
    assert!(import::history_is(&s, &done[0].chat_id, &jsonl));
    assert!(import::history_is(&s, "c1", &before));
    // The store continues the copy where it ended: .cursor holds the last cursor.
    s.append(&done[0].chat_id, &mut [Record::new("user", "next")]).unwrap();
    let h = s.read_history(&done[0].chat_id).unwrap();
    assert_eq!(h.records.last().unwrap().cursor, 7);

    // The zip into an empty store: ids, bytes and titles kept.
    let zip = export::all(&s, Format::Jsonl).unwrap();
    let (s2, root2) = store();
    let (source, chats) = import::read("all.zip", &zip).unwrap();
    assert_eq!(source, Source::NativeZip);
    let done = import::write(&s2, &chats).unwrap();
    assert_eq!(done.len(), 2);
    for info in s.list().unwrap() {
        let bytes = fs::read(s.history_path(&info.chat_id).unwrap()).unwrap();
        assert!(import::history_is(&s2, &info.chat_id, &bytes));
        assert_eq!(s2.read_metadata(&info.chat_id), s.read_metadata(&info.chat_id));
    }
    assert!(fs::read_dir(&root2).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().starts_with(".import")));
    let _ = fs::remove_dir_all(root);
    let _ = fs::remove_dir_all(root2);
}

#[test]
fn markdown_shows_turns_tools_reasoning_and_dates() {
    let (s, root) = store();
    seed(&s, "c1");
    let md = String::from_utf8(export::one(&s, "c1", Format::Markdown).unwrap().unwrap()).unwrap();
    assert!(md.starts_with("# 文件 listing\n"), "{md}");
    for want in [
        "## User · ",
        "\n\n## Assistant · ",
        "列出文件 please `ls`",
        "**Tool call** `list_dir` (call_a1)",
        "\"path\": \".\"",
        "<details><summary>Result of <code>list_dir</code></summary>",
        "````text\na.txt\nb ```fence``` .md\n````",
        "## Assistant · 2026-01-02 03:04",
        "<details><summary>Thinking</summary>\n\n> The user wants files.\n> So list them.",
        "## Summary of earlier turns",
        "- Records: 6",
    ] {
        assert!(md.contains(want), "missing {want:?} in\n{md}");
    }
    // The tool step sits under the assistant's heading of its turn, not the user's.
    assert!(md.find("## Assistant · ").unwrap() < md.find("**Tool call**").unwrap(), "{md}");
    let _ = fs::remove_dir_all(root);
}

/// Harbor's pydantic models (`extra = "forbid"` everywhere) and its validator's rules, field by
/// field: required fields and their types, no unknown key, sequential step ids, agent-only fields
/// on agent steps only, each observation answering a call of its own step.
fn check_atif(t: &Value) {
    fn keys(v: &Value, required: &[&str], optional: &[&str], what: &str) {
        let o = v.as_object().unwrap_or_else(|| panic!("{what} is not an object"));
        for k in required {
            assert!(o.contains_key(*k), "{what} lacks {k}");
        }
        for k in o.keys() {
            assert!(required.contains(&k.as_str()) || optional.contains(&k.as_str()), "{what} has unknown {k}");
        }
    }
    keys(
        t,
        &["schema_version", "session_id", "agent", "steps"],
        &["notes", "final_metrics", "continued_trajectory_ref", "extra"],
        "trajectory",
    );
    assert!(["ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4", "ATIF-v1.5"]
        .contains(&t["schema_version"].as_str().unwrap()));
    assert!(t["session_id"].is_string());
    keys(&t["agent"], &["name", "version"], &["model_name", "tool_definitions", "extra"], "agent");
    let steps = t["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    for (n, st) in steps.iter().enumerate() {
        keys(
            st,
            &["step_id", "source", "message"],
            &[
                "timestamp",
                "model_name",
                "reasoning_effort",
                "reasoning_content",
                "tool_calls",
                "observation",
                "metrics",
                "is_copied_context",
                "extra",
            ],
            "step",
        );
        assert_eq!(st["step_id"].as_u64(), Some(n as u64 + 1));
        let source = st["source"].as_str().unwrap();
        assert!(["user", "agent", "system"].contains(&source));
        assert!(st["message"].is_string());
        if let Some(ts) = st.get("timestamp") {
            let ts = ts.as_str().unwrap();
            assert!(ts.len() == 19 && &ts[10..11] == "T", "ISO 8601: {ts}");
        }
        if source != "agent" {
            for k in ["model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"] {
                assert!(st.get(k).is_none(), "{k} on a {source} step");
            }
        }
        let mut ids = Vec::new();
        for c in st.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            keys(c, &["tool_call_id", "function_name", "arguments"], &[], "tool call");
            assert!(c["arguments"].is_object());
            ids.push(c["tool_call_id"].as_str().unwrap().to_string());
        }
        if let Some(o) = st.get("observation") {
            keys(o, &["results"], &[], "observation");
            for r in o["results"].as_array().unwrap() {
                keys(r, &["content"], &["source_call_id", "subagent_trajectory_ref"], "result");
                assert!(ids.contains(&r["source_call_id"].as_str().unwrap().to_string()));
            }
        }
        if let Some(m) = st.get("metrics") {
            keys(
                m,
                &[],
                &[
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_tokens",
                    "cost_usd",
                    "prompt_token_ids",
                    "completion_token_ids",
                    "logprobs",
                    "extra",
                ],
                "metrics",
            );
        }
        assert!(st.get("extra").is_none_or(Value::is_object));
    }
    if let Some(f) = t.get("final_metrics") {
        keys(
            f,
            &[],
            &[
                "total_prompt_tokens",
                "total_completion_tokens",
                "total_cached_tokens",
                "total_cost_usd",
                "total_steps",
                "extra",
            ],
            "final_metrics",
        );
    }
}

#[test]
fn atif_follows_the_schema() {
    let (s, root) = store();
    seed(&s, "c1");
    // A step with usage, and a result whose call is not in the step before it.
    let path = s.history_path("c1").unwrap();
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"cursor\": 7, \"timestamp\": \"2026-01-02 03:05\", \"role\": \"tool_calls\", \"content\": \"[TOOL_CALLS: x]\", \"tool_calls\": [{\"id\": \"k\", \"function\": {\"name\": \"x\", \"arguments\": \"not json\"}}], \"usage\": {\"prompt_tokens\": 10, \"completion_tokens\": 2}}\n").unwrap();
    f.write_all(b"{\"cursor\": 8, \"timestamp\": \"2026-01-02 03:05\", \"role\": \"tool\", \"content\": \"orphan\", \"tool_call_id\": \"zz\"}\n").unwrap();
    let t: Value = serde_json::from_slice(&export::one(&s, "c1", Format::Atif).unwrap().unwrap()).unwrap();
    check_atif(&t);
    let steps = t["steps"].as_array().unwrap();
    assert_eq!(steps[0]["source"], "user");
    assert_eq!(steps[1]["tool_calls"][0]["arguments"], json!({"path": "."}));
    assert_eq!(steps[1]["observation"]["results"][0]["source_call_id"], "call_a1");
    assert_eq!(steps[4]["reasoning_content"], "The user wants files.\nSo list them.");
    assert_eq!(steps[5]["metrics"], json!({"prompt_tokens": 10, "completion_tokens": 2}));
    assert_eq!(steps[5]["extra"]["unparsed_arguments"]["k"], "not json");
    assert_eq!(steps[6]["source"], "system");
    assert_eq!(t["final_metrics"]["total_steps"], 7);
    // A chat directory without records still gives a valid trajectory.
    fs::create_dir_all(root.join("empty")).unwrap();
    check_atif(&serde_json::from_slice(&export::one(&s, "empty", Format::Atif).unwrap().unwrap()).unwrap());
    let _ = fs::remove_dir_all(root);
}

/// ChatGPT's conversations.json as its export writes it: a node tree with a regenerated answer
/// (two branches), the hidden system node, a tool call and its result, an image part.
fn chatgpt_sample() -> Value {
    let node = |id: &str, parent: Option<&str>, children: &[&str], message: Value| json!({"id": id, "message": message, "parent": parent, "children": children});
    let msg = |id: &str, role: &str, ct: &str, parts: Value, t: f64, extra: Value| {
        let mut m = json!({"id": id, "author": {"role": role, "name": null, "metadata": {}}, "create_time": t,
            "update_time": null, "content": {"content_type": ct, "parts": parts}, "status": "finished_successfully",
            "end_turn": true, "weight": 1.0, "metadata": {}, "recipient": "all"});
        if let Value::Object(e) = extra {
            for (k, v) in e {
                m[k.as_str()] = v;
            }
        }
        m
    };
    json!([{
        "title": "Rust lifetimes",
        "create_time": 1_700_000_000.5,
        "update_time": 1_700_000_900.0,
        "mapping": {
            "root": node("root", None, &["sys"], Value::Null),
            "sys": node("sys", Some("root"), &["u1"], msg("sys", "system", "text", json!([""]), 1_700_000_000.0,
                json!({"metadata": {"is_visually_hidden_from_conversation": true}}))),
            "u1": node("u1", Some("sys"), &["a1", "a2"], msg("u1", "user", "multimodal_text",
                json!([{"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"}, "What is 'a?"]), 1_700_000_100.0, json!({}))),
            "a1": node("a1", Some("u1"), &[], msg("a1", "assistant", "text", json!(["first draft"]), 1_700_000_200.0, json!({}))),
            "a2": node("a2", Some("u1"), &["t1"], msg("a2", "assistant", "code", json!(null), 1_700_000_300.0,
                json!({"recipient": "python", "content": {"content_type": "code", "language": "unknown", "text": "print(1)"}}))),
            "t1": node("t1", Some("a2"), &["a3"], msg("t1", "tool", "execution_output", json!(null), 1_700_000_301.0, json!({}))),
            "a3": node("a3", Some("t1"), &[], msg("a3", "assistant", "text", json!(["A lifetime names a scope."]), 1_700_000_400.0, json!({}))),
        },
        "moderation_results": [],
        "current_node": "a3",
        "plugin_ids": null,
        "conversation_id": "6789abcd-0000-4000-8000-000000000001",
        "conversation_template_id": null,
        "gizmo_id": null,
        "is_archived": false,
        "safe_urls": [],
        "default_model_slug": "gpt-4o",
        "id": "6789abcd-0000-4000-8000-000000000001"
    }, {
        "title": "",
        "create_time": 1_700_100_000.0,
        "mapping": {
            "r": {"id": "r", "message": null, "parent": null, "children": ["u"]},
            "u": {"id": "u", "message": {"id": "u", "author": {"role": "user"}, "create_time": null,
                "content": {"content_type": "text", "parts": ["你好，世界"]}}, "parent": "r", "children": []}
        },
        "current_node": "u",
        "id": "not a valid chat id!"
    }])
}

#[test]
fn chatgpt_conversations_take_the_path_to_the_current_node() {
    let (s, root) = store();
    let bytes = serde_json::to_vec(&chatgpt_sample()).unwrap();
    let (source, chats) = import::read("conversations.json", &bytes).unwrap();
    assert_eq!(source, Source::Chatgpt);
    let done = import::write(&s, &chats).unwrap();
    assert_eq!(done[0].chat_id, "6789abcd-0000-4000-8000-000000000001");
    assert_eq!(done[0].title, "Rust lifetimes");
    let h = s.read_history(&done[0].chat_id).unwrap();
    let got: Vec<(&str, &str)> = h.records.iter().map(|r| (r.role.as_str(), r.content.as_str())).collect();
    assert_eq!(got, [("user", "[attachment]\nWhat is 'a?"), ("assistant", "A lifetime names a scope.")]);
    assert_eq!(h.records[0].timestamp, crate::util::time::minute_stamp_of(1_700_000_100));
    assert_eq!(h.records[1].cursor, 2);
    // The untitled one is named after its first message and gets a fresh id.
    assert_eq!(done[1].title, "你好，世界");
    assert!(crate::store::chats::valid_chat_id(&done[1].chat_id));
    // Imported again: nothing overwritten, new ids.
    let again = import::write(&s, &import::read("conversations.json", &bytes).unwrap().1).unwrap();
    assert_ne!(again[0].chat_id, done[0].chat_id);
    assert_eq!(s.list().unwrap().len(), 4);
    let _ = fs::remove_dir_all(root);
}

/// Open WebUI's "Export chats" file: a list of chat rows whose `chat` holds both the flat
/// `messages` and the `history` tree (a regenerated answer on another branch), timestamps in
/// seconds; and an older row with only `messages` and millisecond stamps.
fn open_webui_sample() -> Value {
    json!([{
        "id": "0f3c1d2e-1111-4222-8333-444455556666",
        "user_id": "u-1",
        "title": "Trip to Kyoto",
        "chat": {
            "id": "",
            "title": "Trip to Kyoto",
            "models": ["llama3:8b"],
            "params": {},
            "history": {
                "messages": {
                    "m1": {"id": "m1", "parentId": null, "childrenIds": ["m2", "m3"], "role": "user",
                           "content": "Plan two days in Kyoto", "timestamp": 1_710_000_000, "models": ["llama3:8b"]},
                    "m2": {"id": "m2", "parentId": "m1", "childrenIds": [], "role": "assistant",
                           "content": "old answer", "model": "llama3:8b", "timestamp": 1_710_000_010, "done": true},
                    "m3": {"id": "m3", "parentId": "m1", "childrenIds": ["m4"], "role": "assistant",
                           "content": "Day 1: Fushimi Inari", "model": "llama3:8b", "timestamp": 1_710_000_020, "done": true},
                    "m4": {"id": "m4", "parentId": "m3", "childrenIds": [], "role": "user",
                           "content": "And day 2?", "timestamp": 1_710_000_030}
                },
                "currentId": "m4"
            },
            "messages": [
                {"id": "m1", "parentId": null, "childrenIds": ["m2", "m3"], "role": "user", "content": "Plan two days in Kyoto", "timestamp": 1_710_000_000},
                {"id": "m3", "parentId": "m1", "childrenIds": ["m4"], "role": "assistant", "content": "Day 1: Fushimi Inari", "timestamp": 1_710_000_020},
                {"id": "m4", "parentId": "m3", "childrenIds": [], "role": "user", "content": "And day 2?", "timestamp": 1_710_000_030}
            ],
            "tags": [],
            "timestamp": 1_710_000_000_000i64,
            "files": []
        },
        "updated_at": 1_710_000_030,
        "created_at": 1_710_000_000,
        "share_id": null,
        "archived": false,
        "pinned": false,
        "meta": {},
        "folder_id": null
    }, {
        "id": "legacy",
        "title": "Old",
        "chat": {"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi", "timestamp": 1_600_000_000_000i64},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}], "timestamp": 1_600_000_060_000i64}
        ]},
        "created_at": 1_600_000_000
    }])
}

#[test]
fn open_webui_chats_take_the_current_branch() {
    let (s, root) = store();
    let bytes = serde_json::to_vec(&open_webui_sample()).unwrap();
    let (source, chats) = import::read("chat-export-1710000000.json", &bytes).unwrap();
    assert_eq!(source, Source::OpenWebui);
    let done = import::write(&s, &chats).unwrap();
    let h = s.read_history("0f3c1d2e-1111-4222-8333-444455556666").unwrap();
    let got: Vec<&str> = h.records.iter().map(|r| r.content.as_str()).collect();
    assert_eq!(got, ["Plan two days in Kyoto", "Day 1: Fushimi Inari", "And day 2?"]);
    assert_eq!(done[0].title, "Trip to Kyoto");
    let old = s.read_history("legacy").unwrap();
    assert_eq!(old.records.len(), 2);
    assert_eq!(old.records[1].content, "hello");
    assert_eq!(old.records[1].timestamp, crate::util::time::minute_stamp_of(1_600_000_060));
    let _ = fs::remove_dir_all(root);
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in entries {
        let opts = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        if name.ends_with('/') {
            w.add_directory(name.to_string(), opts).unwrap();
        } else {
            w.start_file(name.to_string(), opts).unwrap();
            w.write_all(data).unwrap();
        }
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn hostile_files_are_refused_and_change_nothing() {
    let (s, root) = store();
    seed(&s, "c1");
    let before = snapshot(&root);
    let good = fs::read(s.history_path("c1").unwrap()).unwrap();
    let bomb = vec![b'{'; (MAX_CHAT_BYTES + 1) as usize];
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cyclic = json!([{"title": "t", "mapping": {
        "a": {"id": "a", "message": null, "parent": "b", "children": ["b"]},
        "b": {"id": "b", "message": null, "parent": "a", "children": ["a"]}}, "current_node": "a"}]);
    let many = vec![json!({"chat": {"messages": []}}); MAX_IMPORT_CHATS + 1];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.json", Vec::new(), "empty"),
        ("x.json", b"hello".to_vec(), "not a CashCode history"),
        ("x.json", deep.into_bytes(), "nested too deeply"),
        ("x.json", bomb.clone(), "larger than"),
        ("x.jsonl", bomb, "larger than"),
        (
            "x.jsonl",
            b"{\"cursor\": 1, \"role\": \"user\"}\nnot json\n{\"cursor\": 2, \"role\": \"user\"}\n".to_vec(),
            "line 2",
        ),
        (
            "x.jsonl",
            b"{\"cursor\": 2, \"role\": \"user\"}\n{\"cursor\": 1, \"role\": \"user\"}\n".to_vec(),
            "does not rise",
        ),
        ("x.jsonl", b"\xff\xfe".to_vec(), "UTF-8"),
        ("c.json", serde_json::to_vec(&cyclic).unwrap(), "cycle"),
        ("c.json", serde_json::to_vec(&many).unwrap(), "more than 10000"),
        ("a.zip", zip_of(&[("../evil/history.jsonl", &good)]), "illegal path"),
        ("a.zip", zip_of(&[("/abs/history.jsonl", &good)]), "illegal path"),
        ("a.zip", zip_of(&[("c2/../../history.jsonl", &good)]), "not part of a CashCode export"),
        ("a.zip", zip_of(&[("c2/sub/history.jsonl", &good)]), "not part of a CashCode export"),
        ("a.zip", zip_of(&[("c\u{0}2/history.jsonl", &good)]), "illegal path"),
        ("a.zip", zip_of(&[(".hidden/history.jsonl", &good)]), "illegal path"),
        ("a.zip", zip_of(&[("c2/metadata.json", b"{}")]), "no history.jsonl"),
        ("a.zip", zip_of(&[("c2/history.jsonl", &good), ("c2/metadata.json", b"[1]")]), "metadata.json"),
        // A good chat and a bad one: neither is written.
        ("a.zip", zip_of(&[("ok/history.jsonl", &good), ("bad/history.jsonl", b"nope\n{}")]), "chat bad"),
        ("a.zip", b"PK\x03\x04 truncated".to_vec(), "not a valid zip"),
    ];
    for (name, bytes, want) in cases {
        let err = import::read(name, &bytes).expect_err(name).0;
        assert!(err.contains(want), "{name}: {err:?} lacks {want:?}");
        assert_eq!(snapshot(&root), before, "{name} changed the store");
    }
    // A zip bomb: 200 MiB of zeros deflate to a few hundred KiB; refused on the declared size
    // before inflating. One that lies about its size: the reader inflates no more than the
    // declared 100 bytes, and the checksum of those fails.
    let zeros = vec![0u8; 200 << 20];
    let z = zip_of(&[("c2/history.jsonl", &zeros)]);
    assert!(z.len() < 1 << 20);
    assert!(import::read("bomb.zip", &z).unwrap_err().0.contains("too large"));
    let lying = declare_size(z, 100);
    let err = import::read("bomb.zip", &lying).unwrap_err().0;
    assert!(err.contains("corrupt") || err.contains("expands beyond"), "{err}");
    // Too many members.
    let names: Vec<String> = (0..MAX_IMPORT_CHATS * 3 + 1).map(|n| format!("c{n}/")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
    assert!(import::read("many.zip", &zip_of(&entries)).unwrap_err().0.contains("more than"));
    assert_eq!(snapshot(&root), before);
    let _ = fs::remove_dir_all(root);
}

/// Rewrites every uncompressed-size field (local and central headers) to `size`: an archive
/// that lies about what it expands to.
fn declare_size(mut z: Vec<u8>, size: u32) -> Vec<u8> {
    let mut i = 0;
    while i + 30 < z.len() {
        if z[i..i + 4] == [0x50, 0x4b, 0x03, 0x04] {
            z[i + 22..i + 26].copy_from_slice(&size.to_le_bytes());
        } else if z[i..i + 4] == [0x50, 0x4b, 0x01, 0x02] && i + 28 < z.len() {
            z[i + 24..i + 28].copy_from_slice(&size.to_le_bytes());
        }
        i += 1;
    }
    z
}

#[test]
fn export_formats_parse_and_name_themselves() {
    assert_eq!(Format::parse("md"), Some(Format::Markdown));
    assert_eq!(Format::parse("MD"), None);
    assert_eq!(Format::Atif.ext(), "atif.json");
    // The md and atif zips hold one file per chat and are not importable as native.
    let (s, root) = store();
    seed(&s, "c1");
    seed(&s, "c2");
    for (format, names) in [(Format::Markdown, ["c1.md", "c2.md"]), (Format::Atif, ["c1.atif.json", "c2.atif.json"])] {
        let z = export::all(&s, format).unwrap();
        let a = zip::ZipArchive::new(Cursor::new(&z)).unwrap();
        let mut got: Vec<String> = a.file_names().map(|n| n.unwrap().into_owned()).collect();
        got.sort();
        assert_eq!(got, names);
        assert!(import::read("x.zip", &z).is_err());
    }
    let _ = fs::remove_dir_all(root);
}
