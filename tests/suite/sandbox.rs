//! The `exec` sandbox (issue 26, SECURITY.md "Sandbox") against the real binary: the fake model
//! makes `exec` calls and the test reads what the commands got. Ordinary work (python3, node,
//! git, make, sed/awk/grep/find, a project's unittest run) works confined; each escape attempt
//! of SECURITY.md's table is refused, and the test checks the effect did not happen (no file
//! written, no connection or datagram arrived, the server's secrets not printed). The settings:
//! the network switch, extra read and write roots (a granted root holding the server's data is
//! split around it), and `CASHCODE_SANDBOX=off`, which is reported loudly. This machine's
//! kernel offers Landlock ABI 7 and seccomp: a kernel without them fails these tests, it does
//! not skip them.

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

/// Runs `commands` as `exec` calls of one turn in a fresh chat; returns each tool result.
fn exec_all(fake: &FakeLlm, ws: &mut WsClient, commands: &[String]) -> Vec<String> {
    let chat = ws.new_chat();
    let args: Vec<String> = commands.iter().map(|c| json!({ "command": c }).to_string()).collect();
    let calls: Vec<ToolCallSpec> =
        args.iter().enumerate().map(|(i, a)| ToolCallSpec::new(&format!("call_{i}"), "exec", &[a])).collect();
    fake.push(Reply::tool_calls(&calls));
    fake.push(Reply::text(&["done"]));
    let before = fake.chat_requests().len();
    ws.message(&chat, "run these", "openai_compatible");
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:#?}");
    let reqs = fake.wait_chat_requests(before + 2, WAIT);
    let msgs = req_messages(&reqs[before + 1].body);
    (0..commands.len())
        .map(|i| {
            msgs.iter()
                .find(|m| m["role"] == "tool" && m["tool_call_id"] == format!("call_{i}"))
                .and_then(|m| m["content"].as_str())
                .unwrap_or_else(|| panic!("no result for call_{i}"))
                .to_string()
        })
        .collect()
}

fn exec_one(fake: &FakeLlm, ws: &mut WsClient, command: &str) -> String {
    exec_all(fake, ws, &[command.to_string()]).remove(0)
}

/// The exit code `exec` reported.
fn exit_code(result: &str) -> i32 {
    result
        .lines()
        .find_map(|l| l.strip_prefix("exit code: "))
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or_else(|| panic!("no exit code in {result:?}"))
}

#[track_caller]
fn assert_ok(result: &str, expect: &[&str]) {
    assert_eq!(exit_code(result), 0, "{result}");
    for e in expect {
        assert!(result.contains(e), "{e:?} missing from:\n{result}");
    }
}

#[track_caller]
fn assert_refused(result: &str, expect: &str) {
    assert_ne!(exit_code(result), 0, "not refused:\n{result}");
    assert!(result.contains(expect), "{expect:?} missing from:\n{result}");
}

fn status(server: &TestServer) -> Value {
    let r = server.get("/api/settings/sandbox");
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// The kernel must offer what the sandbox relies on; on this machine it does (Landlock ABI 7).
#[track_caller]
fn assert_fully_confined(s: &Value) {
    assert_eq!(s["available"], true, "the kernel offers no confinement: {s:#}");
    assert_eq!(s["active"], true, "{s:#}");
    assert_eq!(s["landlock"]["active"], true, "{s:#}");
    let abi = s["landlock"]["abi"].as_i64().expect("abi");
    assert!(abi >= 6, "Landlock ABI {abi} lacks the scoping these tests check (ABI 6, Linux 6.12)");
    assert_eq!(s["seccomp"]["active"], true, "{s:#}");
    assert_eq!((&s["no_new_privs"], &s["non_dumpable"]), (&json!(true), &json!(true)), "{s:#}");
    assert_eq!(s["reason"], Value::Null, "{s:#}");
}

#[test]
fn status_shape_and_ordinary_work_runs_confined() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    let s = status(&server);
    assert_fully_confined(&s);
    let mut keys: Vec<&str> = s.as_object().expect("object").keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "active",
            "available",
            "landlock",
            "network",
            "no_new_privs",
            "non_dumpable",
            "read_roots",
            "reason",
            "seccomp",
            "write_roots"
        ]
    );
    assert!(s["landlock"]["abi"].is_i64() && s["read_roots"][0].is_string(), "{s:#}");
    assert_eq!(s["network"], "off");
    let log = server.wait_log("event=sandbox.active", 1);
    let line = log.lines().find(|l| l.contains("event=sandbox.active")).expect("the start-up line");
    assert!(line.contains("landlock=true") && line.contains("seccomp=true") && line.contains("network=off"), "{line}");
    let home = server.home.canonicalize().expect("home");
    let roots: Vec<String> = ["read_roots", "write_roots"]
        .iter()
        .flat_map(|k| s[k].as_array().expect("roots").iter().map(|v| v.as_str().expect("root").to_string()))
        .collect();
    for r in roots.iter().map(Path::new) {
        for own in ["data", "memory", "config", "logs"].map(|d| home.join(d)) {
            // Neither a root above one of the server's directories, nor one inside (but the
            // sandbox's own HOME and TMPDIR under data/sandbox).
            assert!(!own.starts_with(r), "{} grants {}", r.display(), own.display());
            assert!(
                !r.starts_with(&own) || r.starts_with(home.join("data/sandbox")),
                "{} is inside {}",
                r.display(),
                own.display()
            );
        }
    }
    assert!(roots.contains(&home.join("workspace").display().to_string()), "{roots:?}");

    let mut ws = WsClient::connect(&server);
    let unittest = "mkdir -p proj && printf 'import unittest\\nclass T(unittest.TestCase):\\n    def test_add(self):\\n        self.assertEqual(1 + 1, 2)\\n' > proj/test_add.py && cd proj && python3 -m unittest 2>&1";
    let git = "git init -q repo && cd repo && echo hi > a.txt && git add a.txt \
               && git -c user.name=t -c user.email=t@example.com commit -qm first \
               && echo there >> a.txt && git diff --stat && git log --oneline | wc -l";
    let results = exec_all(
        &fake,
        &mut ws,
        &[
            "python3 -c 'import json, sys; print(json.dumps({\"major\": sys.version_info[0]}))'".into(),
            "node -e 'console.log(6 * 7)'".into(),
            git.into(),
            "printf 'all:\\n\\techo built > out.txt\\n' > Makefile && make -s && cat out.txt".into(),
            "printf 'a 1\\nb 2\\n' > t.txt && sed 's/a/A/' t.txt | awk '{s += $2} END {print \"sum\", s}' \
             && grep -c b t.txt && find . -name t.txt"
                .into(),
            unittest.into(),
            "echo \"tmp=$TMPDIR\"; f=$(mktemp) && echo ok > \"$f\" && cat \"$f\"; echo err > /dev/stderr; \
             head -c 4 /dev/urandom | wc -c; echo \"home=$HOME\"; touch \"$HOME/.keep\" && echo home-writable"
                .into(),
        ],
    );
    assert_ok(&results[0], &["{\"major\": 3}"]);
    assert_ok(&results[1], &["42"]);
    assert_ok(&results[2], &["1 file changed, 1 insertion(+)", "\n1"]);
    assert_ok(&results[3], &["built"]);
    assert_ok(&results[4], &["sum 3", "\n1\n", "./t.txt"]);
    assert_ok(&results[5], &["Ran 1 test", "OK"]);
    let sandbox_dir = home.join("data/sandbox");
    assert_ok(
        &results[6],
        &[&format!("tmp={}/tmp/", sandbox_dir.display()), "\nok\n", "err", "\n4\n", "home-writable"],
    );
    assert!(results[6].contains(&format!("home={}/home", sandbox_dir.display())), "{}", results[6]);
    // Each call's TMPDIR is removed when the call is over.
    let left: Vec<_> = std::fs::read_dir(sandbox_dir.join("tmp")).expect("tmp root").flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

/// The escape table of SECURITY.md ("Sandbox"), one row each. Every command runs as the test's own user
/// would (root on CI), and the effect is checked besides the refusal.
#[test]
fn escape_attempts_are_refused() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    assert_fully_confined(&status(&server));
    let home = server.home.canonicalize().expect("home");
    let wsd = home.join("workspace");
    std::fs::write(home.join("beside.txt"), "BESIDE-SECRET-1234\n").expect("beside");
    std::os::unix::fs::symlink(home.join("beside.txt"), wsd.join("planted-link")).expect("symlink");
    let pid = server.pid;
    let user_home = std::env::var("HOME").expect("HOME");
    let bashrc = Path::new(&user_home).join(".bashrc");
    let bashrc_before = std::fs::read(&bashrc).ok();
    let host_tmp = std::env::temp_dir().join(format!("cashcode-escape-{}", std::process::id()));
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp listener");
    tcp.set_nonblocking(true).expect("nonblocking");
    let tcp_port = tcp.local_addr().expect("addr").port();
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_nonblocking(true).expect("nonblocking");
    let udp_port = udp.local_addr().expect("addr").port();
    let llm_json = server.llm_json();
    assert!(llm_json.exists());

    let mut ws = WsClient::connect(&server);
    let commands: Vec<String> = vec![
        format!("echo pwned > {}/outside.txt", home.display()),
        format!("echo pwned >> {}", bashrc.display()),
        format!("echo pwned > {}", host_tmp.display()),
        format!("cat {}/beside.txt", home.display()),
        format!("cat {}", llm_json.display()),
        format!("ls {}/data {}/memory {}/logs", home.display(), home.display(), home.display()),
        format!("cat /proc/{pid}/environ"),
        format!("head -c 64 /proc/{pid}/mem"),
        format!("ls -l /proc/{pid}/fd/"),
    ];
    let r = exec_all(&fake, &mut ws, &commands);
    for (i, res) in r.iter().enumerate() {
        assert_refused(res, "Permission denied");
        assert!(!res.contains("BESIDE-SECRET") && !res.contains(KEY_MARKER), "{}: {res}", commands[i]);
    }
    assert!(!home.join("outside.txt").exists());
    assert_eq!(std::fs::read(&bashrc).ok(), bashrc_before, "~/.bashrc changed");
    assert!(!host_tmp.exists());

    let py_tcp = format!("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {tcp_port}), 3)'");
    let py_udp = format!(
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", {udp_port}))'"
    );
    let py_ptrace = format!(
        "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); r = libc.ptrace(16, {pid}, 0, 0); \
         print(\"attach\", r, ctypes.get_errno()); raise SystemExit(r != 0)'"
    );
    let commands: Vec<String> = vec![
        py_tcp,
        format!("curl -sS --max-time 3 http://127.0.0.1:{tcp_port}/"),
        py_udp,
        "cat planted-link".into(),
        format!("ln {}/beside.txt hardlink", home.display()),
        "unshare -r id".into(),
        "mkdir -p mnt && mount -t tmpfs none mnt".into(),
        py_ptrace,
        format!("kill -0 {pid}"),
    ];
    let r = exec_all(&fake, &mut ws, &commands);
    assert_refused(&r[0], "PermissionError");
    assert_refused(&r[1], "curl");
    assert_refused(&r[2], "PermissionError");
    assert_refused(&r[3], "Permission denied");
    assert!(!r[3].contains("BESIDE-SECRET"), "{}", r[3]);
    assert_refused(&r[4], "hardlink");
    assert!(!wsd.join("hardlink").exists());
    assert_refused(&r[5], "Operation not permitted");
    assert_refused(&r[6], "mount");
    assert_refused(&r[7], &format!("attach -1 {}", libc_eperm()));
    assert_refused(&r[8], "Operation not permitted");
    assert!(tcp.accept().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock), "a TCP connection arrived");
    let mut buf = [0u8; 16];
    assert!(udp.recv(&mut buf).is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock), "a datagram arrived");
    let _ = tcp.accept().map(|(mut s, _)| s.read(&mut buf));

    setuid_gains_nothing(&fake, &mut ws, &wsd);
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

/// `EPERM`'s number, as Python prints `ctypes.get_errno()`.
fn libc_eperm() -> i32 {
    1
}

/// no_new_privs: a setuid binary runs with the caller's ids. As root, a copy of `id` owned by
/// `nobody` with the setuid bit shows it: run outside the sandbox it reports nobody's uid, in
/// it root's. As another user, `su` cannot switch.
fn setuid_gains_nothing(fake: &FakeLlm, ws: &mut WsClient, wsd: &Path) {
    let r = exec_one(fake, ws, "grep NoNewPrivs /proc/self/status");
    assert_ok(&r, &["NoNewPrivs:\t1"]);
    let uid = std::fs::metadata("/proc/self").expect("proc").uid();
    if uid == 0 {
        let suid = wsd.join("suid-id");
        std::fs::copy("/usr/bin/id", &suid).expect("copy id");
        std::os::unix::fs::chown(&suid, Some(65534), None).expect("chown");
        std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        let outside = std::process::Command::new(&suid).arg("-u").output().expect("run suid-id");
        assert_eq!(String::from_utf8_lossy(&outside.stdout).trim(), "65534", "the setuid bit works here");
        let r = exec_one(fake, ws, "./suid-id -u");
        assert_eq!(r, "$ ./suid-id -u\nexit code: 0\n\n0", "the setuid bit was honoured inside the sandbox");
    } else {
        let r = exec_one(fake, ws, "su -c id root < /dev/null");
        assert_ne!(exit_code(&r), 0, "{r}");
    }
}

/// `CASHCODE_SANDBOX_NETWORK=1` lets commands connect; the filesystem stays confined.
#[test]
fn the_network_setting_allows_sockets() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_SANDBOX_NETWORK", "1").start();
    server.configure_llm(&fake);
    let s = status(&server);
    assert_fully_confined(&s);
    assert_eq!(s["network"], "on");
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp listener");
    let port = tcp.local_addr().expect("addr").port();
    let mut ws = WsClient::connect(&server);
    let r = exec_all(
        &fake,
        &mut ws,
        &[
            format!(
                "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3).sendall(b\"hi\")'"
            ),
            format!("cat {}", server.llm_json().display()),
        ],
    );
    assert_ok(&r[0], &[]);
    let (mut conn, _) = tcp.accept().expect("the connection arrived");
    let mut got = Vec::new();
    conn.read_to_end(&mut got).expect("read");
    assert_eq!(got, b"hi");
    assert_refused(&r[1], "Permission denied");
}

/// Extra roots: read-only and read-write. A read root that holds the server's directories
/// grants everything in it but them.
#[test]
fn extra_roots_and_the_split_around_the_servers_directories() {
    let fake = FakeLlm::start();
    let home = fresh_home("sbx-roots");
    let (ro, rw) = (home.join("ro"), home.join("rw"));
    std::fs::create_dir_all(&ro).expect("ro");
    std::fs::create_dir_all(&rw).expect("rw");
    std::fs::write(ro.join("in.txt"), "READABLE\n").expect("ro file");
    std::fs::write(home.join("top.txt"), "TOP\n").expect("top file");
    let server = TestServer::builder()
        .home(&home)
        .env("CASHCODE_SANDBOX_READ", &format!("{}:{}", ro.display(), home.display()))
        .env("CASHCODE_SANDBOX_WRITE", &rw.display().to_string())
        .start();
    server.configure_llm(&fake);
    let s = status(&server);
    assert_fully_confined(&s);
    let canon = home.canonicalize().expect("home");
    let reads: Vec<&str> = s["read_roots"].as_array().expect("roots").iter().filter_map(Value::as_str).collect();
    assert!(reads.contains(&canon.join("top.txt").to_str().expect("utf-8")), "{reads:?}");
    assert!(!reads.iter().any(|r| canon.join("data").starts_with(r)), "{reads:?}");
    let mut ws = WsClient::connect(&server);
    let r = exec_all(
        &fake,
        &mut ws,
        &[
            format!("cat {}/in.txt {}/top.txt", ro.display(), home.display()),
            format!("echo x > {}/new.txt", ro.display()),
            format!("echo written > {}/new.txt && cat {}/new.txt", rw.display(), rw.display()),
            format!("cat {}", server.llm_json().display()),
            format!("ls {}/data", home.display()),
        ],
    );
    assert_ok(&r[0], &["READABLE", "TOP"]);
    assert_refused(&r[1], "Permission denied");
    assert_ok(&r[2], &["written"]);
    assert_refused(&r[3], "Permission denied");
    assert_refused(&r[4], "Permission denied");
    assert_eq!(std::fs::read_to_string(rw.join("new.txt")).expect("rw file"), "written\n");
}

/// A workspace that holds the server's directories (`WORKSPACE_DIR` = the server's home) is
/// granted without them: its other entries are writable, the server's are not, and (Landlock
/// rules cover whole trees) nothing can be created at its top level, as start-up warns.
#[test]
fn a_workspace_holding_the_servers_directories_is_split_around_them() {
    let fake = FakeLlm::start();
    let home = fresh_home("sbx-wshome");
    std::fs::create_dir_all(home.join("proj")).expect("proj");
    let server = TestServer::builder().home(&home).env("WORKSPACE_DIR", &home.display().to_string()).start();
    server.configure_llm(&fake);
    assert_fully_confined(&status(&server));
    server.wait_log("event=sandbox.workspace_split", 1);
    let mut ws = WsClient::connect(&server);
    let r = exec_all(
        &fake,
        &mut ws,
        &[
            "echo mine > proj/notes.txt && cat proj/notes.txt".into(),
            "ls data".into(),
            "cat config/settings/llm.json".into(),
            "echo x > top.txt".into(),
        ],
    );
    assert_ok(&r[0], &["mine"]);
    for res in &r[1..] {
        assert_refused(res, "Permission denied");
    }
}

/// A root that does not exist stops start-up with its name.
#[test]
fn a_missing_extra_root_is_a_start_up_error() {
    let (code, _, err) =
        crate::common::server::run_to_exit(&[], &[("CASHCODE_SANDBOX_READ", "/nonexistent-sandbox-root")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("CASHCODE_SANDBOX_READ: /nonexistent-sandbox-root does not exist"), "{err}");
}

/// `CASHCODE_SANDBOX=off` is the owner's explicit choice: reported by the route, in the log
/// and on stderr; commands then run with the server's rights. The route needs the token like
/// every settings route.
#[test]
fn turning_the_sandbox_off_is_explicit_and_loud() {
    const TOKEN: &str = "sandbox-test-token-0123456789";
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_SANDBOX", "off").env("CASHCODE_TOKEN", TOKEN).start();
    assert_eq!(server.get("/api/settings/sandbox").status, 401);
    let auth = format!("Bearer {TOKEN}");
    let r = server.request("GET", "/api/settings/sandbox", &[("Authorization", &auth)], None);
    assert_eq!(r.status, 200, "{}", r.body);
    let s = r.json();
    assert_eq!((&s["available"], &s["active"]), (&json!(true), &json!(false)), "{s:#}");
    assert_eq!(s["reason"], "turned off by CASHCODE_SANDBOX=off");
    assert!(server.stderr_text().contains("exec commands run UNCONFINED"), "{}", server.stderr_text());
    server.wait_log("event=sandbox.inactive", 1);
    let r = server.request("POST", "/api/settings/sandbox", &[("Authorization", &auth)], Some("{}"));
    assert_eq!(r.status, 405, "{}", r.body);
    drop(fake);
}
