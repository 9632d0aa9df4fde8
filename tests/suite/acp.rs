//! `cashcode acp` (docs/acp.md) driven by ACP clients we did not write: the official
//! TypeScript SDK's client (`tests/acp/client.mjs`, `@agentclientprotocol/sdk`) and the
//! official Python SDK's (`tests/acp/client.py`, `agent-client-protocol`), against the real
//! server and the fake model; and by raw lines, for what an editor may get wrong (malformed
//! JSON-RPC, unknown methods, an oversize line, closing stdin). Needs `bash scripts/setup.sh
//! --test` (the SDKs in `tests/acp/node_modules` and `.venv`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::common::*;

fn acp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp")
}

fn bin() -> String {
    std::env::var("CASHCODE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cashcode").to_string())
}

/// The flags that make `cashcode acp` read the test server's configuration.
fn flags(server: &TestServer) -> Vec<String> {
    vec![
        "--home".into(),
        server.home.display().to_string(),
        "--port".into(),
        server.http_port.to_string(),
        "--ws-port".into(),
        server.ws_port.to_string(),
    ]
}

fn server() -> (FakeLlm, TestServer, PathBuf) {
    let fake = FakeLlm::start();
    let server = TestServer::start();
    server.configure_llm(&fake);
    let ws = server.home.join("workspace");
    std::fs::create_dir_all(&ws).expect("workspace");
    (fake, server, ws.canonicalize().expect("workspace path"))
}

/// Runs a client script to its end; returns its report lines by step.
fn run_client(program: &str, script: &str, scenario: &str, ws: &Path, server: &TestServer) -> Vec<Value> {
    let out = Command::new(program)
        .arg(acp_dir().join(script))
        .arg(scenario)
        .arg(ws)
        .arg(bin())
        .args(flags(server))
        .stderr(Stdio::piped())
        .output()
        .expect("run the ACP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(
        out.status.success() && lines.iter().all(|l| l["step"] != "failed"),
        "{script} {scenario}: {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

fn step<'a>(lines: &'a [Value], name: &str) -> &'a Value {
    lines.iter().find(|l| l["step"] == name).unwrap_or_else(|| panic!("no step {name} in {lines:#?}"))
}

/// Scripts the model for the TypeScript client's main scenario: a plain answer, a file
/// written, two escalated commands (one allowed, one rejected), a slow answer to cancel.
fn script_main(fake: &FakeLlm) {
    fake.push(Reply::text(&["Hel", "lo ", "there"]));
    fake.push(Reply::tool_calls(&[ToolCallSpec::new(
        "w1",
        "write_file",
        &[&json!({"path": "a.txt", "content": "one\n"}).to_string()],
    )]));
    fake.push(Reply::text(&["written"]));
    for (id, file) in [("e1", "allowed.txt"), ("e2", "rejected.txt")] {
        let args = json!({"command": format!("echo ran > {file}"), "sandbox_permissions": "require_escalated",
                          "justification": "test"});
        fake.push(Reply::tool_calls(&[ToolCallSpec::new(id, "exec", &[&args.to_string()])]));
        fake.push(Reply::text(&["after ", id]));
    }
    fake.push(Reply::text(&["cut at the cap"]).with_finish("length"));
    fake.push(Reply::text(&["I can't"]).with_finish("content_filter"));
    let slow: Vec<String> = (0..200).map(|i| format!("w{i} ")).collect();
    let slow: Vec<&str> = slow.iter().map(String::as_str).collect();
    fake.push(Reply::text(&slow).chunk_delay(std::time::Duration::from_millis(50)));
}

#[test]
fn the_typescript_sdk_client_prompts_runs_tools_asks_and_cancels() {
    let (fake, server, ws) = server();
    script_main(&fake);
    let lines = run_client("node", "client.mjs", "main", &ws, &server);

    let init = step(&lines, "initialize");
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["capabilities"]["loadSession"], true);
    let new = step(&lines, "new");
    let options = &new["configOptions"][0];
    assert_eq!((&options["id"], &options["category"]), (&json!("model"), &json!("model")));
    assert!(options["options"].as_array().is_some_and(|o| o.len() == 3), "{options}");

    let plain = step(&lines, "plain");
    assert_eq!((&plain["stopReason"], &plain["answer"]), (&json!("end_turn"), &json!("Hello there")));

    let tool = step(&lines, "tool");
    assert_eq!(tool["tools"], json!([{"title": "write_file: a.txt", "kind": "edit"}]));
    assert_eq!(tool["toolEnds"][0]["status"], "completed");
    // The edit reaches the editor as a diff; each model call's usage as a `usage_update`.
    let diff = json!({"type": "diff", "path": ws.join("a.txt").display().to_string(), "newText": "one\n"});
    assert_eq!(tool["toolEnds"][0]["content"][0], diff);
    assert!(tool["usage"].as_array().is_some_and(|u| u.len() == 2 && u[1]["used"].as_u64() > Some(0)), "{tool}");
    assert_eq!(tool["answer"], "written");
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).expect("a.txt"), "one\n");

    // Allowed once: the command ran; rejected: nothing ran, and the turn still ended normally.
    assert_eq!(step(&lines, "allow")["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(ws.join("allowed.txt")).expect("allowed.txt"), "ran\n");
    assert_eq!(step(&lines, "reject")["stopReason"], "end_turn");
    assert!(!ws.join("rejected.txt").exists(), "a rejected command must not run");
    let asked = step(&lines, "permissions")["permissions"].as_array().cloned().unwrap_or_default();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked
        .iter()
        .all(|p| p["options"][0] == "allow_once" && p["options"].as_array().unwrap().contains(&json!("reject_once"))));

    // A reply cut at the provider's output cap, and one its filter stopped.
    assert_eq!(step(&lines, "cut")["stopReason"], "max_tokens");
    assert_eq!(step(&lines, "cut")["answer"], "cut at the cap");
    assert_eq!(step(&lines, "refused")["stopReason"], "refusal");

    let cancel = step(&lines, "cancel");
    assert_eq!(cancel["stopReason"], "cancelled");
    assert!(cancel["answer"].as_str().is_some_and(|a| a.starts_with("w0 ") && a.len() < 1000), "{cancel}");
    assert_eq!(step(&lines, "exit")["code"], 0, "the bridge ends cleanly when stdin closes");

    // The same chat, from another editor window: listed, and loaded with its transcript.
    let lines = run_client("node", "client.mjs", "load", &ws, &server);
    let list = step(&lines, "list")["sessions"].as_array().cloned().unwrap_or_default();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["cwd"], json!(ws.display().to_string()));
    let load = step(&lines, "load");
    assert!(load["user"].as_str().is_some_and(|u| u.starts_with("say hello")), "{load}");
    assert!(load["answer"].as_str().is_some_and(|a| a.starts_with("Hello there")), "{load}");
    let kinds: Vec<&str> = load["kinds"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(kinds.contains(&"tool_call") && kinds.contains(&"tool_call_update"), "{kinds:?}");
    assert_eq!(step(&lines, "load-missing")["code"], -32002);
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

/// A session's `cwd` is its chat's project; one outside the allowed roots is refused with the
/// setting to change named, and nothing is created.
#[test]
fn a_cwd_outside_the_allowed_roots_is_refused_with_the_setting_named() {
    let (_fake, server, _ws) = server();
    let elsewhere = server.home.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("elsewhere");
    let lines = run_client("node", "client.mjs", "outside", &elsewhere, &server);
    let new = step(&lines, "new");
    assert_eq!((&new["ok"], &new["code"]), (&json!(false), &json!(-32602)), "{new}");
    assert!(new["message"].as_str().is_some_and(|m| m.contains("CASHCODE_PROJECT_ROOTS")), "{new}");
    assert_eq!(server.get("/api/sessions").json()["sessions"], json!([]));
}

/// A session opened in a folder under the workspace is a chat bound to that project: its tools
/// work there, the list shows it there, and loading it elsewhere is refused.
#[test]
fn a_session_in_a_project_folder_works_there() {
    let (fake, server, ws) = server();
    let project = ws.join("app");
    std::fs::create_dir_all(&project).expect("project");
    fake.push(Reply::tool_calls(&[ToolCallSpec::new(
        "w1",
        "write_file",
        &[&json!({"path": "a.txt", "content": "one\n"}).to_string()],
    )]));
    fake.push(Reply::text(&["written"]));
    let mut editor = RawBridge::start(&server);
    editor.request("initialize", json!({"protocolVersion": 1}));
    let id = editor.request("session/new", json!({"cwd": project, "mcpServers": []}));
    let chat = editor.until("session/new", |v| v["id"] == id).last().unwrap()["result"]["sessionId"]
        .as_str()
        .expect("session")
        .to_string();
    let id =
        editor.request("session/prompt", json!({"sessionId": chat, "prompt": [{"type": "text", "text": "write"}]}));
    editor.until("the prompt's end", |v| v["id"] == id);
    assert_eq!(std::fs::read_to_string(project.join("a.txt")).expect("a.txt"), "one\n");
    assert!(!ws.join("a.txt").exists());
    let id = editor.request("session/list", json!({"cwd": project}));
    let listed = editor.until("session/list", |v| v["id"] == id).pop().unwrap();
    assert_eq!(listed["result"]["sessions"][0]["sessionId"], json!(chat), "{listed}");
    assert_eq!(listed["result"]["sessions"][0]["cwd"], json!(project));
    let id = editor.request("session/list", json!({"cwd": ws}));
    assert_eq!(editor.until("session/list", |v| v["id"] == id).pop().unwrap()["result"]["sessions"], json!([]));
    let id = editor.request("session/load", json!({"sessionId": chat, "cwd": ws, "mcpServers": []}));
    let refused = editor.until("session/load", |v| v["id"] == id).pop().unwrap();
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

#[test]
fn the_python_sdk_client_prompts_and_is_asked() {
    let (fake, server, ws) = server();
    fake.push(Reply::text(&["Bonjour"]));
    let args = json!({"command": "echo py > py.txt", "sandbox_permissions": "require_escalated", "justification": "t"});
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("p1", "exec", &[&args.to_string()])]));
    fake.push(Reply::text(&["done"]));
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let lines = run_client(python.to_str().expect("path"), "client.py", "main", &ws, &server);
    assert_eq!(step(&lines, "initialize")["protocolVersion"], 1);
    let plain = step(&lines, "plain");
    assert_eq!((&plain["stopReason"], &plain["answer"]), (&json!("end_turn"), &json!("Bonjour")));
    let allow = step(&lines, "allow");
    assert_eq!((&allow["stopReason"], &allow["asked"]), (&json!("end_turn"), &json!(1)));
    assert_eq!(std::fs::read_to_string(ws.join("py.txt")).expect("py.txt"), "py\n");
    assert!(step(&lines, "list")["count"].as_u64().is_some_and(|n| n >= 1));
}

/// Raw lines an editor may get wrong: each gets a JSON-RPC error (or is ignored, for
/// notifications), and the bridge answers the next request.
#[test]
fn bad_input_gets_json_rpc_errors_and_the_bridge_keeps_running() {
    let (_fake, server, _ws) = server();
    let mut child = Command::new(bin())
        .arg("acp")
        .args(flags(&server))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the bridge");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut ask = |line: &[u8]| -> Value {
        stdin.write_all(line).and_then(|()| stdin.write_all(b"\n")).expect("write");
        let mut answer = String::new();
        stdout.read_line(&mut answer).expect("read");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
    };
    let huge =
        format!(r#"{{"jsonrpc":"2.0","id":9,"method":"initialize","params":{{"x":"{}"}}}}"#, "a".repeat(9 << 20));
    let deep = format!(r#"{{"jsonrpc":"2.0","id":8,"method":"x","params":{}{}}}"#, "[".repeat(500), "]".repeat(500));
    let cases: Vec<(Vec<u8>, Value, i64)> = vec![
        (b"{oops".to_vec(), Value::Null, -32700),
        (b"[]".to_vec(), Value::Null, -32600),
        (br#"{"id":1,"method":"initialize"}"#.to_vec(), json!(1), -32600),
        (br#"{"jsonrpc":"2.0","id":2,"method":"no/such"}"#.to_vec(), json!(2), -32601),
        (br#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"nope","prompt":[{"type":"text","text":"x"}]}}"#.to_vec(), json!(3), -32002),
        (br#"{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{}}"#.to_vec(), json!(4), -32602),
        (br#"{"jsonrpc":"2.0","id":5,"method":"session/new","params":{"cwd":"relative","mcpServers":[]}}"#.to_vec(), json!(5), -32602),
        (huge.into_bytes(), Value::Null, -32600),
        (deep.into_bytes(), Value::Null, -32600),
    ];
    for (line, id, code) in cases {
        let a = ask(&line);
        assert_eq!((&a["id"], &a["error"]["code"]), (&id, &json!(code)), "{a}");
    }
    let ok = ask(br#"{"jsonrpc":"2.0","id":"last","method":"initialize","params":{"protocolVersion":1}}"#);
    assert_eq!((&ok["id"], &ok["result"]["protocolVersion"]), (&json!("last"), &json!(1)), "{ok}");
    drop(stdin);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}");
    // The server and its chats are untouched.
    assert_eq!(server.get("/api/health").status, 200);
}

/// The server stopping ends the bridge (an editor then shows the agent as stopped) instead of
/// leaving it answering nothing.
#[test]
fn the_bridge_ends_when_the_server_goes_away() {
    let (_fake, mut server, _ws) = server();
    let mut child = Command::new(bin())
        .arg("acp")
        .args(flags(&server))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the bridge");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n")
        .expect("write");
    let mut line = String::new();
    stdout.read_line(&mut line).expect("initialize answer");
    server.kill();
    let status = wait_for("the bridge to end", WAIT, || child.try_wait().ok().flatten());
    assert!(!status.success(), "{status:?}");
}

/// A bridge driven line by line (for what the SDK scenarios cannot arrange: another door
/// answering first).
struct RawBridge {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<Value>,
    next: u64,
}

impl RawBridge {
    fn start(server: &TestServer) -> RawBridge {
        let mut child = Command::new(bin())
            .arg("acp")
            .args(flags(server))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the bridge");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(serde_json::from_str(&line).expect("a JSON line")).is_err() {
                    break;
                }
            }
        });
        RawBridge { child, stdin, lines, next: 0 }
    }

    fn send(&mut self, v: Value) {
        self.stdin.write_all(format!("{v}\n").as_bytes()).expect("write");
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let id = self.next;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Lines until one matches; returns all of them.
    fn until(&mut self, what: &str, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let v = self.lines.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no {what}; saw {seen:#?}"));
            let end = stop(&v);
            seen.push(v);
            if end {
                return seen;
            }
        }
    }
}

impl Drop for RawBridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The editor and the web client are two doors of one agent: the web client sees the editor's
/// turn live and can answer its approval first (the editor's request is then withdrawn and its
/// late answer ignored), and a turn the web client starts streams into the editor.
#[test]
fn the_editor_and_the_web_client_share_one_chat_and_one_approval() {
    let (fake, server, ws_dir) = server();
    let mut editor = RawBridge::start(&server);
    editor.request("initialize", json!({"protocolVersion": 1}));
    let id = editor.request("session/new", json!({"cwd": ws_dir, "mcpServers": []}));
    let created = editor.until("session/new's answer", |v| v["id"] == id);
    let chat = created.last().unwrap()["result"]["sessionId"].as_str().expect("session id").to_string();
    let mut web = WsClient::connect(&server);
    web.attach(&chat, None);

    let args =
        json!({"command": "echo web > web.txt", "sandbox_permissions": "require_escalated", "justification": "t"});
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("x1", "exec", &[&args.to_string()])]));
    fake.push(Reply::text(&["approved on the web"]));
    let prompt =
        editor.request("session/prompt", json!({"sessionId": chat, "prompt": [{"type": "text", "text": "go"}]}));
    let asked = editor.until("a permission request", |v| v["method"] == "session/request_permission");
    let ask = asked.last().unwrap().clone();
    assert_eq!(ask["params"]["sessionId"], json!(chat));
    // The web client gets the same request and answers first.
    let req = web.recv_until(|v| v["event"] == "approval_request").pop().expect("approval_request");
    web.send(&json!({"type": "approval_response", "chat_id": chat, "id": req["id"], "decision": "approve"}));
    let rest = editor.until("the prompt's end", |v| v["id"] == prompt);
    let withdrawn = rest.iter().find(|v| v["method"] == "$/cancel_request").expect("the request withdrawn");
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    assert_eq!(rest.last().unwrap()["result"]["stopReason"], "end_turn", "{rest:#?}");
    // The editor's late "reject" changes nothing: the command ran on the web client's answer.
    editor.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "reject_once"}}}));
    assert_eq!(std::fs::read_to_string(ws_dir.join("web.txt")).expect("web.txt"), "web\n");
    let web_turn = web.turn_events(&chat);
    let answer: String = web_turn.iter().filter(|e| e["event"] == "delta").filter_map(|e| e["text"].as_str()).collect();
    assert_eq!(answer, "approved on the web", "the web client watched the editor's turn live");

    // A turn from the web client streams into the editor's session.
    fake.push(Reply::text(&["from ", "the web"]));
    web.message(&chat, "hello from the browser", "openai_compatible");
    let _ = web.turn_events(&chat);
    let seen = editor.until("the web turn's text", |v| v["params"]["update"]["content"]["text"] == "the web");
    let text: String = seen
        .iter()
        .filter(|v| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|v| v["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(text, "from the web");
}
