//! Every built-in tool through a real turn (docs/tools-and-mcp.md §2–3, docs/agent-and-memory.md §5, §13):
//! the fake model requests the call, the test checks the `tool_call`/`tool_result` events
//! (call_id, 200-code-point preview), the `tool` message the model receives in the next request,
//! and the `user`, `tool_calls`, `tool`, `assistant` records. Refusals cover traversal, absolute
//! paths, symlink escapes (also through glob/grep), Skill-root writes, the exec timeout and
//! cancellation, and oversize output. Hostile search patterns (100,000 nested groups, globs
//! exponential for a backtracking matcher) are clean errors or quick answers and the server stays
//! up. A tool turn is replayed to the model after a restart.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// What one tool turn produced.
struct ToolRun {
    /// Text of the `tool` message the model got in the follow-up request.
    model_text: String,
    /// The `tool_result` event's `result`.
    preview: String,
    /// The follow-up request's messages.
    next_messages: Vec<Value>,
}

fn chars(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Runs one turn in a fresh chat in which the model calls `name` with `args` once and then
/// answers "done"; checks the events, the follow-up request and the history records.
#[track_caller]
fn tool_turn(server: &TestServer, fake: &FakeLlm, ws: &mut WsClient, name: &str, args: &Value) -> ToolRun {
    let chat = ws.new_chat();
    let id = format!("call_{}", name.replace('_', ""));
    let call = ToolCallSpec::new(&id, name, &[&args.to_string()]);
    fake.push(Reply::tool_calls(std::slice::from_ref(&call)));
    fake.push(Reply::text(&["done"]));
    let before = fake.chat_requests().len();
    ws.message(&chat, &format!("please run {name}"), "openai_compatible");
    let events = ws.turn_events(&chat);
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap_or("")).collect();
    assert_eq!(
        kinds,
        ["session_updated", "tool_call", "tool_result", "delta", "stream_end", "done"],
        "events {events:#?}"
    );
    let tc = &events[1];
    assert_eq!((&tc["tool_name"], &tc["call_id"]), (&json!(name), &json!(id)));
    let tr = &events[2];
    assert_eq!((&tr["tool_name"], &tr["call_id"]), (&json!(name), &json!(id)));
    assert_eq!(tc["stream_id"], tr["stream_id"]);
    let preview = tr["result"].as_str().expect("result string").to_string();

    let reqs = fake.wait_chat_requests(before + 2, WAIT);
    let msgs = req_messages(&reqs[before + 1].body);
    let n = msgs.len();
    assert_eq!(msgs[n - 2]["role"], "assistant");
    assert_eq!(
        msgs[n - 2]["tool_calls"],
        json!([{"id":id,"type":"function","function":{"name":name,"arguments":call.full_args()}}])
    );
    let tool = &msgs[n - 1];
    assert_eq!((&tool["role"], &tool["tool_call_id"]), (&json!("tool"), &json!(id)));
    let model_text = tool["content"].as_str().expect("tool content").to_string();
    assert_eq!(preview, chars(&model_text, 200), "the preview is the first 200 code points");

    let recs = history_records(&server.home, &chat);
    let roles: Vec<&str> = recs.iter().map(|r| r["role"].as_str().unwrap_or("")).collect();
    assert_eq!(roles, ["user", "tool_calls", "tool", "assistant"]);
    assert_eq!(recs[1]["content"], format!("[TOOL_CALLS: {name}]"));
    assert_eq!(recs[1]["tool_calls"], msgs[n - 2]["tool_calls"]);
    assert_eq!((&recs[2]["tool_call_id"], &recs[2]["name"]), (&json!(id), &json!(name)));
    assert_eq!(recs[2]["content"], json!(model_text), "history keeps the full result");
    assert_eq!(recs[3]["content"], "done");
    ToolRun { model_text, preview, next_messages: msgs }
}

fn outside(p: &str) -> String {
    format!("Error: Path '{p}' is outside the working directory; access denied")
}

#[test]
fn file_tools_and_save_memory_happy_paths() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let ws_dir = server.home.join("workspace");
    std::fs::create_dir_all(&ws_dir).expect("workspace");
    let mut ws = WsClient::connect(&server);

    let r = tool_turn(&server, &fake, &mut ws, "write_file", &json!({"path":"notes/a.txt","content":"hello\nworld\n"}));
    assert_eq!(r.model_text, "Wrote notes/a.txt (12 chars)");
    assert_eq!(std::fs::read_to_string(ws_dir.join("notes/a.txt")).expect("written"), "hello\nworld\n");

    let r = tool_turn(&server, &fake, &mut ws, "read_file", &json!({"path":"notes/a.txt"}));
    assert_eq!(r.model_text, "hello\nworld\n");

    let r = tool_turn(
        &server,
        &fake,
        &mut ws,
        "edit_file",
        &json!({"path":"notes/a.txt","old_string":"world","new_string":"there"}),
    );
    assert_eq!(r.model_text, "Replaced content in notes/a.txt");
    assert_eq!(std::fs::read_to_string(ws_dir.join("notes/a.txt")).expect("edited"), "hello\nthere\n");

    std::fs::create_dir_all(ws_dir.join("notes/sub")).expect("mkdir");
    let r = tool_turn(&server, &fake, &mut ws, "list_dir", &json!({"path":"notes"}));
    assert_eq!(r.model_text, "Directory: notes\n\n[dir] sub\n[file] a.txt");

    let r = tool_turn(&server, &fake, &mut ws, "glob", &json!({"pattern":"*.txt"}));
    assert_eq!(r.model_text, "Matched `*.txt` (1):\n\n  notes/a.txt");

    let r = tool_turn(&server, &fake, &mut ws, "grep", &json!({"pattern":"th.re"}));
    assert_eq!(r.model_text, "Matched `th.re` (1):\n\nnotes/a.txt:2: there");

    let r = tool_turn(&server, &fake, &mut ws, "save_memory", &json!({"content":"user likes oolong"}));
    assert_eq!(r.model_text, "Saved to long-term memory: user likes oolong");
    let memory = std::fs::read_to_string(server.memory().join("MEMORY.md")).expect("MEMORY.md");
    assert!(memory.ends_with("] user likes oolong\n"), "{memory:?}");
    let r = tool_turn(&server, &fake, &mut ws, "save_memory", &json!({"content":"user likes oolong"}));
    assert_eq!(r.model_text, "Already in long-term memory.");

    let r = tool_turn(&server, &fake, &mut ws, "exec", &json!({"command":"echo hi; echo oops >&2; exit 3"}));
    assert_eq!(r.model_text, "$ echo hi; echo oops >&2; exit 3\nexit code: 3\n\nhi\noops");
    let r = tool_turn(&server, &fake, &mut ws, "exec", &json!({"command":"pwd"}));
    let root = ws_dir.canonicalize().expect("canonical workspace");
    assert_eq!(r.model_text, format!("$ pwd\nexit code: 0\n\n{}", root.display()));
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

/// The server takes SIGINT/SIGTERM through a handler, never by blocking them: std does not
/// reset the signal mask of the processes it spawns, so a blocked pair would reach every
/// command, and a command's own Ctrl-C or `timeout` would stop working.
#[test]
fn exec_commands_start_with_no_signal_blocked() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    std::fs::create_dir_all(server.home.join("workspace")).expect("workspace");
    let mut ws = WsClient::connect(&server);
    let command = "awk '/^SigBlk/ {print $2}' /proc/self/status";
    let r = tool_turn(&server, &fake, &mut ws, "exec", &json!({ "command": command }));
    assert_eq!(r.model_text, format!("$ {command}\nexit code: 0\n\n0000000000000000"));
}

/// A descriptor the server inherits without FD_CLOEXEC (`exec 5<secret; cashcode`) is marked
/// close-on-exec at start-up, so an `exec` command does not get it.
#[test]
fn an_inherited_descriptor_does_not_reach_exec_commands() {
    let fake = FakeLlm::start();
    let secret = fresh_home("inherited").join("secret.txt");
    std::fs::create_dir_all(secret.parent().expect("parent")).expect("dir");
    std::fs::write(&secret, "INHERITED\n").expect("secret");
    let server = TestServer::builder().inherit_fd(5, &secret).start();
    server.configure_llm(&fake);
    std::fs::create_dir_all(server.home.join("workspace")).expect("workspace");
    let mut ws = WsClient::connect(&server);
    let command = "readlink /proc/$$/fd/5 || echo closed; cat <&5 || echo unreadable";
    let r = tool_turn(&server, &fake, &mut ws, "exec", &json!({ "command": command }));
    assert!(!r.model_text.contains("secret.txt") && !r.model_text.contains("INHERITED"), "{:?}", r.model_text);
    assert!(r.model_text.contains("closed") && r.model_text.contains("unreadable"), "{:?}", r.model_text);
    let _ = std::fs::remove_dir_all(secret.parent().expect("parent"));
}

#[test]
fn web_tools_through_a_turn() {
    let (page, _stop_page) = static_http(
        "<html><head><style>p{color:red}</style><script>var leak = 1;</script></head>\
         <body><p>Hello &amp; welcome</p></body></html>",
        "text/html",
    );
    let (search, _stop_search) = static_http(
        r#"{"Abstract":"Rust is a language.","AbstractSource":"Wikipedia","AbstractURL":"https://en.wikipedia.org/wiki/Rust",
            "RelatedTopics":[{"Text":"Cargo - the package manager","FirstURL":"https://duckduckgo.com/Cargo"},
                             {"Name":"group","Topics":[{"Text":"Clippy - lints","FirstURL":"https://duckduckgo.com/Clippy"}]}]}"#,
        "application/json",
    );
    let fake = FakeLlm::start();
    let server = TestServer::builder()
        .env("CASHCODE_WEB_SEARCH_URL", &format!("{search}/"))
        .env("CASHCODE_WEB_FETCH_ALLOW_PRIVATE", "1")
        .start();
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);

    let url = format!("{page}/page");
    let r = tool_turn(&server, &fake, &mut ws, "web_fetch", &json!({"url":url}));
    assert!(r.model_text.starts_with(&format!("[From {url}]\n\n")), "{:?}", r.model_text);
    assert!(r.model_text.contains("Hello & welcome"), "{:?}", r.model_text);
    assert!(!r.model_text.contains("leak") && !r.model_text.contains("color"), "{:?}", r.model_text);

    let r = tool_turn(&server, &fake, &mut ws, "web_fetch", &json!({"url":"file:///etc/passwd"}));
    assert!(r.model_text.starts_with("Error"), "{:?}", r.model_text);
    assert!(!r.model_text.contains("root:"), "{:?}", r.model_text);

    let r = tool_turn(&server, &fake, &mut ws, "web_search", &json!({"query":"rust lang"}));
    let t = &r.model_text;
    assert!(t.starts_with("Search: rust lang\n\n"), "{t:?}");
    assert!(t.contains("**Summary** (Wikipedia): Rust is a language."), "{t:?}");
    assert!(t.contains("Source: https://en.wikipedia.org/wiki/Rust"), "{t:?}");
    assert!(t.contains("- Cargo - the package manager\n  https://duckduckgo.com/Cargo"), "{t:?}");
    assert!(t.contains("- Clippy - lints\n  https://duckduckgo.com/Clippy"), "{t:?}");
}

/// A hard link planted in the workspace to a file outside is not a symlink, so the path checks
/// pass: read, write and edit refuse it on the opened file's link count, grep skips it and says
/// so, and the outside file is unchanged.
#[test]
fn file_tools_refuse_a_hard_link_to_a_file_outside() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let workspace = server.home.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let secret_dir = fresh_home("hardlinked");
    let secret = secret_dir.join("secret.txt");
    std::fs::write(&secret, "TOPSECRET-LINE\n").expect("secret");
    std::fs::hard_link(&secret, workspace.join("planted.txt")).expect("hard link");
    let mut ws = WsClient::connect(&server);
    let refused = "Error: planted.txt has other hard links; refusing to read or change it through the workspace";
    for (tool, args) in [
        ("read_file", json!({"path":"planted.txt"})),
        ("write_file", json!({"path":"planted.txt","content":"pwned"})),
        ("edit_file", json!({"path":"planted.txt","old_string":"TOPSECRET","new_string":"pwned"})),
    ] {
        let r = tool_turn(&server, &fake, &mut ws, tool, &args);
        assert_eq!(r.model_text, refused, "{tool}");
    }
    let r = tool_turn(&server, &fake, &mut ws, "grep", &json!({"pattern":"TOPSECRET"}));
    assert!(!r.model_text.contains("TOPSECRET-LINE"), "{:?}", r.model_text);
    assert!(r.model_text.contains("with other hard links were not searched"), "{:?}", r.model_text);
    assert_eq!(std::fs::read_to_string(&secret).expect("secret"), "TOPSECRET-LINE\n");
    let _ = std::fs::remove_dir_all(&secret_dir);
}

/// Workspace = the home (so the Skill roots under `data/skills` lie inside it); a secret file
/// lives in a separate directory outside.
#[test]
fn file_tools_refuse_escapes_and_skill_root_writes() {
    let fake = FakeLlm::start();
    let home = fresh_home("toolref");
    let secret_dir = fresh_home("secret");
    std::fs::write(secret_dir.join("secret.txt"), "TOPSECRET-LINE\n").expect("secret");
    let server = TestServer::builder().home(&home).env("WORKSPACE_DIR", &home.display().to_string()).start();
    server.configure_llm(&fake);
    // Symlinks out of the workspace: a directory and a file.
    std::os::unix::fs::symlink(&secret_dir, home.join("out")).expect("symlink dir");
    std::os::unix::fs::symlink(secret_dir.join("secret.txt"), home.join("leak.txt")).expect("symlink file");
    let skill = home.join("data/skills/user/mine/SKILL.md");
    std::fs::create_dir_all(skill.parent().expect("parent")).expect("skill dir");
    std::fs::write(&skill, "---\nname: mine\n---\nbody\n").expect("skill");
    let mut ws = WsClient::connect(&server);
    let secret_abs = secret_dir.join("secret.txt").display().to_string();

    let no_leak = |r: &ToolRun| {
        assert!(!r.model_text.contains("TOPSECRET-LINE"), "leaked: {:?}", r.model_text);
        for m in &r.next_messages {
            assert!(!m.to_string().contains("TOPSECRET-LINE"), "leaked into the request: {m}");
        }
    };

    // Traversal, absolute, symlinked directory, symlinked file: read, write, edit. The
    // traversal names a sibling of the workspace no other test or checkout uses.
    let away = format!("{}-away", home.file_name().expect("name").to_string_lossy());
    let traversal = format!("../{away}/secret.txt");
    for p in [traversal.as_str(), secret_abs.as_str(), "out/secret.txt", "leak.txt"] {
        let r = tool_turn(&server, &fake, &mut ws, "read_file", &json!({"path":p}));
        assert_eq!(r.model_text, outside(p));
        no_leak(&r);
        let r = tool_turn(&server, &fake, &mut ws, "write_file", &json!({"path":p,"content":"pwned"}));
        assert_eq!(r.model_text, outside(p));
        let r = tool_turn(
            &server,
            &fake,
            &mut ws,
            "edit_file",
            &json!({"path":p,"old_string":"TOPSECRET","new_string":"pwned"}),
        );
        assert_eq!(r.model_text, outside(p));
    }
    assert_eq!(std::fs::read_to_string(secret_dir.join("secret.txt")).expect("secret"), "TOPSECRET-LINE\n");
    assert!(!secret_dir.parent().expect("tmp").join(&away).exists());

    // Directory tools: the path argument and the patterns.
    let r = tool_turn(&server, &fake, &mut ws, "list_dir", &json!({"path":"out"}));
    assert_eq!(r.model_text, outside("out"));
    let r = tool_turn(&server, &fake, &mut ws, "list_dir", &json!({"path":"/"}));
    assert_eq!(r.model_text, outside("/"));
    for args in [json!({"pattern":"../*/secret.txt"}), json!({"pattern":"out/*"}), json!({"pattern":"**/secret.txt"})] {
        let r = tool_turn(&server, &fake, &mut ws, "glob", &args);
        let t = &r.model_text;
        assert!(t.starts_with("No files match") || t.starts_with("Error"), "glob {args} leaked: {t:?}");
    }
    for args in [
        json!({"pattern":"TOPSECRET-LIN[E]"}),
        json!({"pattern":"TOPSECRET-LIN[E]","file_pattern":"../*/*.txt"}),
        json!({"pattern":"TOPSECRET-LIN[E]","path":"out"}),
    ] {
        let r = tool_turn(&server, &fake, &mut ws, "grep", &args);
        no_leak(&r);
        assert!(
            r.model_text.starts_with("Error") || r.model_text.starts_with("No content matches"),
            "{:?}",
            r.model_text
        );
    }

    // Skill roots: reads are fine, writes and edits are refused naming agent_skill_manage.
    let rel = "data/skills/user/mine/SKILL.md";
    let r = tool_turn(&server, &fake, &mut ws, "read_file", &json!({"path":rel}));
    assert_eq!(r.model_text, "---\nname: mine\n---\nbody\n");
    let r = tool_turn(&server, &fake, &mut ws, "write_file", &json!({"path":rel,"content":"hacked"}));
    assert!(r.model_text.starts_with("Error") && r.model_text.contains("agent_skill_manage"), "{:?}", r.model_text);
    let r = tool_turn(
        &server,
        &fake,
        &mut ws,
        "write_file",
        &json!({"path":"data/skills/agent/new/SKILL.md","content":"x"}),
    );
    assert!(r.model_text.contains("agent_skill_manage"), "{:?}", r.model_text);
    let r =
        tool_turn(&server, &fake, &mut ws, "edit_file", &json!({"path":rel,"old_string":"body","new_string":"evil"}));
    assert!(r.model_text.contains("agent_skill_manage"), "{:?}", r.model_text);
    let abs = skill.display().to_string();
    let r = tool_turn(&server, &fake, &mut ws, "write_file", &json!({"path":abs,"content":"hacked"}));
    assert!(r.model_text.contains("agent_skill_manage"), "{:?}", r.model_text);
    assert_eq!(std::fs::read_to_string(&skill).expect("skill"), "---\nname: mine\n---\nbody\n");
    assert!(!home.join("data/skills/agent/new").exists());
    // An absolute path inside the workspace is accepted.
    let inside = home.join("ok.txt").display().to_string();
    let r = tool_turn(&server, &fake, &mut ws, "write_file", &json!({"path":inside,"content":"fine"}));
    assert_eq!(r.model_text, format!("Wrote {inside} (4 chars)"));
    let _ = std::fs::remove_dir_all(&secret_dir);
}

#[test]
fn oversize_outputs_are_cut_and_previews_are_200_code_points() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let ws_dir = server.home.join("workspace");
    std::fs::create_dir_all(&ws_dir).expect("workspace");
    let mut ws = WsClient::connect(&server);

    // exec: 10,000 'é' (2 bytes each) -> first 4096 chars + a note with the total.
    let r = tool_turn(
        &server,
        &fake,
        &mut ws,
        "exec",
        &json!({"command":"i=0; while [ $i -lt 1000 ]; do printf 'éééééééééé'; i=$((i+1)); done"}),
    );
    let head = "$ i=0; while [ $i -lt 1000 ]; do printf 'éééééééééé'; i=$((i+1)); done\nexit code: 0\n\n";
    assert_eq!(r.model_text, format!("{head}{}\n\n[output truncated, total 10000 chars]", "é".repeat(4096)));
    assert_eq!(r.preview.chars().count(), 200);

    // read_file: 600 lines -> 500 + note.
    let text: String = (1..=600).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws_dir.join("big.txt"), text).expect("big");
    let r = tool_turn(&server, &fake, &mut ws, "read_file", &json!({"path":"big.txt"}));
    let first: Vec<String> = (1..=500).map(|i| format!("line {i}")).collect();
    assert_eq!(r.model_text, format!("{}\n\n[content truncated, total 600 lines]", first.join("\n")));

    // list_dir: 250 entries -> 200 + note; glob: 100 results max; grep: 50 results max.
    std::fs::create_dir_all(ws_dir.join("many")).expect("many");
    for i in 0..250 {
        std::fs::write(ws_dir.join(format!("many/f{i:03}.log")), "needle\n").expect("file");
    }
    let r = tool_turn(&server, &fake, &mut ws, "list_dir", &json!({"path":"many"}));
    assert!(r.model_text.ends_with("\n\n(showing first 200 of 250)"), "{:?}", &r.model_text[r.model_text.len() - 60..]);
    assert_eq!(r.model_text.lines().filter(|l| l.starts_with("[file] ")).count(), 200);
    let r = tool_turn(&server, &fake, &mut ws, "glob", &json!({"pattern":"*.log"}));
    assert!(r.model_text.starts_with("Matched `*.log` (100):\n\n  many/f000.log\n"), "{:?}", chars(&r.model_text, 80));
    let r = tool_turn(&server, &fake, &mut ws, "grep", &json!({"pattern":"needle"}));
    assert!(r.model_text.starts_with("Matched `needle` (50):\n\n"), "{:?}", chars(&r.model_text, 80));
    assert_eq!(r.model_text.lines().filter(|l| l.ends_with(":1: needle")).count(), 50);
}

/// Patterns a model could send to crash or stall the server: a grep with 100,000 nested groups
/// (and 400, under the length cap) is a clean error, a catastrophic backtracking pattern ends,
/// and `**/*` repeated over a 33-level tree answers at once; the server keeps serving.
#[test]
fn hostile_search_patterns_leave_the_server_alive() {
    let fake = FakeLlm::start();
    let mut server = TestServer::builder().env("CASHCODE_CONTEXT_BUDGET_CHARS", "4000000").start();
    // Content far over the default context budget, sent whole (the budget is what limits it).
    server.configure_llm(&fake);
    let ws_dir = server.home.join("workspace");
    let deep: Vec<String> = (0..33).map(|i| format!("d{i}")).collect();
    let leaf = ws_dir.join(deep.join("/"));
    std::fs::create_dir_all(&leaf).expect("deep tree");
    std::fs::write(leaf.join("leaf.txt"), format!("{}!\n", "a".repeat(1_000))).expect("leaf");
    let mut ws = WsClient::connect(&server);

    let nested = format!("{}a{}", "(".repeat(100_000), ")".repeat(100_000));
    let r = tool_turn(&server, &fake, &mut ws, "grep", &json!({"pattern":nested}));
    assert_eq!(r.model_text, "Error: Invalid regex: the pattern is too long (200001 characters, at most 1000)");
    let nested = format!("{}a{}", "(".repeat(400), ")".repeat(400));
    let r = tool_turn(&server, &fake, &mut ws, "grep", &json!({"pattern":nested}));
    assert_eq!(r.model_text, "Error: Invalid regex: too many nested groups (at most 16) at position 16");
    let r = tool_turn(&server, &fake, &mut ws, "grep", &json!({"pattern":r"(a|a)*\1b"}));
    let where_ = format!("{}/leaf.txt:1", deep.join("/"));
    assert_eq!(
        r.model_text,
        format!(
            "Error: the pattern is too expensive to evaluate (backtracking limit reached at {where_}); simplify it"
        )
    );

    let started = Instant::now();
    let r = tool_turn(&server, &fake, &mut ws, "glob", &json!({"pattern":(["**/*"; 10].join("/"))}));
    assert!(r.model_text.contains(" (25):\n\n  d0/d1/d2/d3/d4/d5/d6/d7/d8/d9/\n"), "{:?}", chars(&r.model_text, 200));
    let r = tool_turn(&server, &fake, &mut ws, "glob", &json!({"pattern":(["**/*"; 50].join("/"))}));
    assert!(r.model_text.starts_with("No files match `**/*/"), "{:?}", chars(&r.model_text, 80));
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");

    assert!(server.alive(), "{}", server.stderr_text());
    server.get("/api/health").expect(200, json!({"status":"ok","service":"cashcode"}));
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

/// Waits for `marker` not to appear for `quiet` (a killed command never writes it).
fn stays_absent(marker: &Path, quiet: Duration) {
    let until = Instant::now() + quiet;
    while Instant::now() < until {
        assert!(!marker.exists(), "{} appeared: the command was not killed", marker.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The exec timeout kills the whole process group (a background child would otherwise write its
/// marker a second after the timeout) and the model gets the timeout message. The server runs
/// with `CASHCODE_EXEC_TIMEOUT_SECS=2` so the test takes seconds; the contract's 30 s default
/// is asserted by the exec tool's own unit test.
#[test]
fn exec_timeout_kills_the_whole_process_group() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_EXEC_TIMEOUT_SECS", "2").start();
    server.configure_llm(&fake);
    let ws_dir = server.home.join("workspace");
    std::fs::create_dir_all(&ws_dir).expect("workspace");
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let command = "(sleep 3; touch bg-survived) & sleep 4; touch fg-survived";
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_t", "exec", &[&json!({"command":command}).to_string()])]));
    fake.push(Reply::text(&["gave up"]));
    let started = Instant::now();
    ws.message(&chat, "run it", "openai_compatible");
    let mut events = Vec::new();
    while !events.iter().any(|e: &Value| e["event"] == "done" || e["event"] == "error") {
        let v = ws.recv_within(Duration::from_secs(30)).expect("a frame within 30 s");
        if v["chat_id"] == chat.as_str() {
            events.push(v);
        }
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(12), "took {took:?}");
    let result = events.iter().find(|e| e["event"] == "tool_result").expect("tool_result");
    let want = format!("Error: Command timed out (2s): {command}");
    assert_eq!(result["result"], json!(chars(&want, 200)));
    let reqs = fake.wait_chat_requests(2, WAIT);
    let msgs = req_messages(&reqs[1].body);
    assert_eq!(msgs.last().expect("tool message")["content"], json!(want));
    assert_eq!(events.last().expect("end")["event"], "done");
    // Until past the moments the markers would have been written (3 s and 4 s after the start).
    stays_absent(&ws_dir.join("bg-survived"), Duration::from_secs(3));
    assert!(!ws_dir.join("fg-survived").exists());
}

/// Cancelling a turn while `exec` runs kills the command group promptly; the turn ends with
/// `error "cancelled"` and nothing is persisted.
#[test]
fn cancel_during_exec_kills_the_command() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let ws_dir = server.home.join("workspace");
    std::fs::create_dir_all(&ws_dir).expect("workspace");
    let mut ws = WsClient::connect(&server);
    let chat = ws.chat_id.clone();
    let command = "(sleep 2; touch bg-survived) & sleep 3; touch fg-survived";
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_c", "exec", &[&json!({"command":command}).to_string()])]));
    ws.message(&chat, "run it", "openai_compatible");
    ws.recv_until(|v| v["event"] == "tool_call");
    let sent = Instant::now();
    ws.send(&json!({"type":"cancel","chat_id":chat}));
    let frames = ws.turn_frames(&chat);
    assert!(sent.elapsed() < Duration::from_secs(1), "cancel took {:?}", sent.elapsed());
    let last = frames.last().expect("closing frame");
    assert_eq!((&last["event"], &last["detail"]), (&json!("error"), &json!("cancelled")), "{frames:#?}");
    stays_absent(&ws_dir.join("bg-survived"), Duration::from_secs(4));
    assert!(!ws_dir.join("fg-survived").exists());
    assert_eq!(history_summary(&server.home, &chat), rows(&[]));
    assert_eq!(fake.chat_requests().len(), 1, "no model call after the cancel");
}

/// The full chain is persisted and, after a restart, replayed to the model verbatim.
#[test]
fn a_tool_turn_is_replayed_after_a_restart() {
    let OneChat { fake, mut server, mut ws, chat } = one_chat();
    let a = ToolCallSpec::new("call_w", "write_file", &["{\"path\":\"r.txt\",", "\"content\":\"persisted\"}"]);
    let b = ToolCallSpec::new("call_l", "list_dir", &["{}"]);
    fake.push(Reply::tool_calls(&[a.clone(), b.clone()]));
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_r", "read_file", &["{\"path\":\"r.txt\"}"])]));
    fake.push(Reply::text(&["All ", "done"]));
    ws.message(&chat, "write then read", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().expect("end")["event"], "done");
    let before = req_messages(&fake.chat_requests()[2].body);
    assert_eq!(before.len(), 1 + 6, "system, user, tool_calls, tool, tool, tool_calls, tool");
    drop(ws);

    server.restart();
    let mut ws = WsClient::connect(&server);
    ws.attach(&chat, None);
    fake.push(Reply::text(&["again"]));
    ws.message(&chat, "and now?", "openai_compatible");
    ws.turn_events(&chat);
    let after = req_messages(&fake.chat_requests()[3].body);
    // user, assistant(tool_calls), tool, tool, assistant(tool_calls), tool, assistant, user.
    assert_eq!(after.len(), 1 + 8);
    for (i, (x, y)) in before[1..].iter().zip(&after[1..7]).enumerate() {
        assert_eq!(x["role"], y["role"], "message {i}");
        assert_eq!(x.get("tool_calls"), y.get("tool_calls"), "message {i}");
        assert_eq!(x.get("tool_call_id"), y.get("tool_call_id"), "message {i}");
        // The step reaches the model as history replays it (`[TOOL_CALLS: …]`), before and
        // after the restart alike, so the prefix stays cacheable.
        assert_eq!(x["content"], y["content"], "message {i}");
    }
    assert_eq!(after[2]["content"], "[TOOL_CALLS: write_file, list_dir]");
    assert_eq!(after[5]["content"], "[TOOL_CALLS: read_file]");
    assert_eq!(after[2]["tool_calls"][1]["id"], "call_l");
    assert_eq!(after[6]["content"], "persisted");
    assert_eq!(after[7], json!({"role":"assistant","content":"All done"}));
    assert_eq!(after[8], json!({"role":"user","content":"and now?"}));
    let roles: Vec<String> = history_summary(&server.home, &chat).into_iter().map(|(_, r, _)| r).collect();
    assert_eq!(roles, ["user", "tool_calls", "tool", "tool", "tool_calls", "tool", "assistant", "user", "assistant"]);
}

/// The server re-executes itself with its glibc tunables (`util::malloc`): the running process
/// got them, and commands it starts see the caller's environment, not the server's. (glibc
/// cuts the variable in place while parsing it, so `environ` shows only the first tunable.)
#[test]
fn allocator_tunables_stay_out_of_child_processes() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("GLIBC_TUNABLES", "glibc.malloc.arena_max=4").start();
    server.configure_llm(&fake);
    let environ = std::fs::read(format!("/proc/{}/environ", server.pid)).expect("environ");
    let tunables = environ
        .split(|b| *b == 0)
        .filter_map(|v| std::str::from_utf8(v).ok())
        .find_map(|v| v.strip_prefix("GLIBC_TUNABLES="))
        .unwrap_or_default()
        .to_string();
    assert!(tunables.starts_with("glibc.malloc.tcache_count=0"), "not re-executed: {tunables:?}");

    let mut ws = WsClient::connect(&server);
    let r = tool_turn(&server, &fake, &mut ws, "exec", &json!({"command":"env"}));
    let lines: Vec<&str> =
        r.model_text.lines().filter(|l| l.contains("GLIBC_TUNABLES") || l.contains("MALLOC")).collect();
    assert_eq!(lines, ["GLIBC_TUNABLES=glibc.malloc.arena_max=4"], "{}", r.model_text);

    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        let server = TestServer::with_llm(&fake);
        let mut ws = WsClient::connect(&server);
        let r = tool_turn(&server, &fake, &mut ws, "exec", &json!({"command":"env"}));
        assert!(!r.model_text.contains("GLIBC_TUNABLES") && !r.model_text.contains("MALLOC"), "{}", r.model_text);
    }
}
