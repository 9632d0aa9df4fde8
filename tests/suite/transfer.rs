//! Export and import over the real HTTP listener (docs/http-api.md "Export and import"): a chat's
//! JSONL is its history byte for byte, the all-chats zip imports back byte for byte without
//! overwriting anything, bad parameters and hostile files get a 422 and change nothing, and a
//! foreign page cannot import.

use std::io::Read;
use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

const HISTORY: &str = concat!(
    "{\"cursor\": 1, \"timestamp\": \"2026-03-01 09:15\", \"role\": \"user\", \"content\": \"列出文件\"}\n",
    "{\"cursor\": 2, \"timestamp\": \"2026-03-01 09:15\", \"role\": \"tool_calls\", \"content\": \"[TOOL_CALLS: list_dir]\", \"tool_calls\": [{\"id\": \"call_a1\", \"function\": {\"arguments\": \"{\\\"path\\\":\\\".\\\"}\", \"name\": \"list_dir\"}, \"type\": \"function\"}]}\n",
    "{\"cursor\": 3, \"timestamp\": \"2026-03-01 09:15\", \"role\": \"tool\", \"content\": \"a.txt\", \"tool_call_id\": \"call_a1\", \"name\": \"list_dir\"}\n",
    "{\"cursor\": 4, \"timestamp\": \"2026-03-01 09:15\", \"role\": \"assistant\", \"content\": \"One file.\"}\n",
);

fn home_with_chat() -> std::path::PathBuf {
    let home = fresh_home("transfer");
    let dir = home.join("memory/c1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("history.jsonl"), HISTORY).unwrap();
    std::fs::write(dir.join("metadata.json"), "{\n  \"title\": \"文件\"\n}").unwrap();
    home
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// GET returning (status, content-disposition, body bytes).
fn get_bytes(server: &TestServer, path: &str) -> (u16, String, Vec<u8>) {
    let mut r = agent().get(&format!("{}{path}", server.http_base())).call().unwrap();
    let cd = r.headers().get("content-disposition").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let mut body = Vec::new();
    r.body_mut().as_reader().read_to_end(&mut body).unwrap();
    (r.status().as_u16(), cd, body)
}

fn upload(server: &TestServer, filename: &str, data: &[u8], origin: Option<&str>) -> (u16, Value) {
    let mut body = Vec::new();
    body.extend_from_slice(
        format!("--B0und\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
    );
    body.extend_from_slice(data);
    body.extend_from_slice(b"\r\n--B0und--\r\n");
    let mut req = agent()
        .post(&format!("{}/api/import", server.http_base()))
        .header("Content-Type", "multipart/form-data; boundary=B0und");
    if let Some(o) = origin {
        req = req.header("Origin", o);
    }
    let mut r = req.send(&body[..]).unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Every path and file under the memory root, for "nothing changed".
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
                out.push((rel, Vec::new()));
            } else {
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn export_then_import_round_trips_byte_for_byte() {
    let home = home_with_chat();
    let server = TestServer::builder().home(&home).start();
    let (s, cd, body) = get_bytes(&server, "/api/sessions/c1/export?format=jsonl");
    assert_eq!((s, cd.as_str()), (200, "attachment; filename=\"c1.jsonl\""));
    assert_eq!(body, HISTORY.as_bytes());
    let (s, cd, md) = get_bytes(&server, "/api/sessions/c1/export?format=md");
    assert_eq!((s, cd.as_str()), (200, "attachment; filename=\"c1.md\""));
    assert!(String::from_utf8(md).unwrap().contains("**Tool call** `list_dir` (call_a1)"));
    let (s, _, atif) = get_bytes(&server, "/api/sessions/c1/export?format=atif");
    let atif: Value = serde_json::from_slice(&atif).unwrap();
    assert_eq!(
        (s, &atif["schema_version"], &atif["steps"][1]["observation"]["results"][0]["content"]),
        (200, &json!("ATIF-v1.4"), &json!("a.txt"))
    );

    // Bad parameters: the house 422; unknown chats and hostile ids: 404.
    let r = server.get("/api/sessions/c1/export?format=xml");
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["detail"][0]["loc"], json!(["query", "format"]));
    assert_eq!(server.get("/api/export?format=").status, 422);
    assert_eq!(server.get("/api/sessions/none/export").status, 404);
    assert_eq!(server.get("/api/sessions/..%2F..%2Fetc/export").status / 100, 4);

    let (s, cd, zip) = get_bytes(&server, "/api/export?format=jsonl");
    assert_eq!(s, 200);
    assert!(cd.starts_with("attachment; filename=\"cashcode-chats-") && cd.ends_with("-jsonl.zip\""), "{cd}");

    // Imported into the same server: c1 is taken, so the copy gets a new id; both byte-equal.
    let (s, v) = upload(&server, "all.zip", &zip, None);
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["source"], "native_zip");
    let new_id = v["imported"][0]["chat_id"].as_str().unwrap().to_string();
    assert_ne!(new_id, "c1");
    assert_eq!(v["imported"][0]["title"], "文件");
    assert_eq!(std::fs::read(server.chat_dir(&new_id).join("history.jsonl")).unwrap(), HISTORY.as_bytes());
    assert_eq!(std::fs::read(server.chat_dir("c1").join("history.jsonl")).unwrap(), HISTORY.as_bytes());
    // The import is listed and readable at once.
    let list = server.get("/api/sessions").json();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 2);
    let msgs = server.get(&format!("/api/sessions/{new_id}/messages")).json();
    assert_eq!(msgs["messages"][0]["content"], "列出文件");
    // ... and found by search as soon as the import has answered.
    let hits = server.get("/api/search?q=%E5%88%97%E5%87%BA%E6%96%87%E4%BB%B6&limit=50").json();
    let chats: Vec<&str> = hits["hits"].as_array().unwrap().iter().filter_map(|h| h["chat_id"].as_str()).collect();
    assert!(chats.contains(&new_id.as_str()), "{hits}");

    // One chat's JSONL, named by its id: also a new id, same bytes.
    let (s, v) = upload(&server, "c1.jsonl", HISTORY.as_bytes(), None);
    assert_eq!(s, 201, "{v}");
    let one = v["imported"][0]["chat_id"].as_str().unwrap();
    assert_eq!(std::fs::read(server.chat_dir(one).join("history.jsonl")).unwrap(), HISTORY.as_bytes());
}

#[test]
fn hostile_imports_get_a_422_and_change_nothing() {
    let home = home_with_chat();
    let server = TestServer::builder().home(&home).start();
    let before = tree(&server.memory());
    let traversal = {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        w.start_file("../escape/history.jsonl", zip::write::SimpleFileOptions::default()).unwrap();
        std::io::Write::write_all(&mut w, HISTORY.as_bytes()).unwrap();
        w.finish().unwrap().into_inner()
    };
    let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
    for (name, data, want) in [
        ("evil.zip", traversal, "illegal path"),
        ("deep.json", deep.into_bytes(), "nested too deeply"),
        ("x.json", b"{\"hello\": 1}".to_vec(), "not a CashCode history"),
        (
            "x.jsonl",
            b"{\"cursor\": 1, \"role\": \"user\"}\ngarbage\n{\"cursor\": 2, \"role\": \"user\"}\n".to_vec(),
            "line 2",
        ),
    ] {
        let (s, v) = upload(&server, name, &data, None);
        assert_eq!(s, 422, "{name}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.starts_with("Cannot import this file: ") && detail.contains(want), "{name}: {detail}");
        assert_eq!(tree(&server.memory()), before, "{name} changed the memory root");
    }
    // No file part: the house shape 422.
    let r = server.post("/api/import", &json!({}));
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["detail"][0]["loc"], json!(["body", "file"]));
    // A foreign page cannot import (the gate's origin rule), even a valid file.
    let (s, _) = upload(&server, "c1.jsonl", HISTORY.as_bytes(), Some("http://evil.example"));
    assert_eq!(s, 403);
    assert_eq!(tree(&server.memory()), before);
    assert_eq!(server.get("/api/health").status, 200);
}
