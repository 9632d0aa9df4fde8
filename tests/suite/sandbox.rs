//! The `exec` sandbox (SECURITY.md "Sandbox") against the real binary: the fake model
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
use std::os::fd::FromRawFd;
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
            "call_process_limit",
            "landlock",
            "network",
            "no_new_privs",
            "non_dumpable",
            "read_roots",
            "reason",
            "seccomp",
            "unix_sockets",
            "write_roots"
        ]
    );
    assert!(s["landlock"]["abi"].is_i64() && s["read_roots"][0].is_string(), "{s:#}");
    assert_eq!((&s["network"], &s["unix_sockets"]), (&json!("off"), &json!("off")));
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

/// `CASHCODE_SANDBOX_NETWORK=1` lets commands connect; the filesystem stays confined. It needs
/// the token (start-up refuses it without one), which confined commands do not get: over
/// loopback, one reaches the server's HTTP and WebSocket ports but is refused there (401), so
/// it cannot rewrite the approval policy.
#[test]
fn the_network_setting_allows_sockets() {
    let (code, out, err) = crate::common::server::run_to_exit(&[], &[("CASHCODE_SANDBOX_NETWORK", "1")]);
    assert!(matches!(code, Some(c) if c != 0), "started without a token: {out}\n{err}");
    assert!(!out.contains("listening on"), "{out}");
    assert!(err.contains("CASHCODE_SANDBOX_NETWORK=1 requires CASHCODE_TOKEN"), "{err}");

    let fake = FakeLlm::start();
    let server =
        TestServer::builder().env("CASHCODE_SANDBOX_NETWORK", "1").bearer("network-sandbox-token-0123456789").start();
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

    // The server's own API, from inside: the policy route and the WebSocket handshake.
    let body = r#"{"tools": {"exec_escalated": "auto"}}"#;
    let put = format!(
        "PUT /api/settings/approvals HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nContent-Type: application/json\\r\\n\
         Content-Length: {}\\r\\nConnection: close\\r\\n\\r\\n{body}",
        body.len()
    );
    let upgrade = "GET / HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n\\r\\n";
    let send = |port: u16, req: &str| {
        format!(
            "python3 -c 'import socket; s = socket.create_connection((\"127.0.0.1\", {port}), 3); \
             s.sendall(b\"{}\"); print(s.recv(200).split(b\"\\r\\n\")[0].decode())'",
            req.replace('"', "\\\""),
        )
    };
    let (http, ws_port) = (server.http_base(), server.ws_url());
    let port_of = |u: &str| u.trim_end_matches('/').rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let r = exec_all(
        &fake,
        &mut ws,
        &[send(port_of(&http), &put), send(port_of(&ws_port), upgrade), "echo token=[$CASHCODE_TOKEN]".into()],
    );
    assert_ok(&r[0], &["HTTP/1.1 401"]);
    assert_ok(&r[1], &["HTTP/1.1 401"]);
    assert_ok(&r[2], &["token=[]"]);
    assert_eq!(server.get("/api/settings/approvals").json()["tools"]["exec_escalated"], "ask");
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

/// The owner's terminal: a server started in a terminal (a pty as its controlling
/// terminal and stdin, as `scripts/start.sh` typed into a shell) runs commands in their own
/// session, without `/dev/tty`, and `TIOCSTI` refused. A command tries to queue a command line
/// for the owner's shell, on `/dev/tty` and, from a child that left its group and waited, again
/// after the turn; after the server stops, a shell reads the terminal: nothing it runs comes
/// from a command, while a line the test typed itself does run (the shell reads this terminal).
#[test]
fn no_command_reaches_the_owners_terminal() {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the given integers; no name or settings.
    let opened =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    let fake = FakeLlm::start();
    let mut server = TestServer::builder().terminal(slave).start();
    server.configure_llm(&fake);
    assert_fully_confined(&status(&server));
    let home = server.home.canonicalize().expect("home");
    let pwned = home.join("pwned");
    let inject = format!(
        "import fcntl, os, sys, termios\n\
         line = b'touch {p}\\n'\n\
         for name, open_it in [('tty', lambda: os.open('/dev/tty', os.O_RDWR)), ('stdin', lambda: 0)]:\n\
         \x20   try:\n\
         \x20       fd = open_it()\n\
         \x20       for c in line: fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))\n\
         \x20       print(name, 'injected')\n\
         \x20   except OSError as e:\n\
         \x20       print(name, 'refused', e.errno)\n",
        p = pwned.display()
    );
    std::fs::write(home.join("workspace/inject.py"), &inject).expect("script");
    let mut ws = WsClient::connect(&server);
    let r = exec_all(
        &fake,
        &mut ws,
        &[
            "ps -o tty= -p $$; ps -o sid= -p $$; echo ppid $PPID".into(),
            "python3 inject.py".into(),
            "setsid sh -c 'sleep 1; python3 inject.py > late.txt' > /dev/null 2>&1 < /dev/null & echo started".into(),
        ],
    );
    // No controlling terminal ("?"), and a session of the call's own (led by its reaper, the
    // shell's parent).
    let lines: Vec<&str> = r[0].lines().skip(3).map(str::trim).collect();
    assert_eq!(lines.first(), Some(&"?"), "{}", r[0]);
    assert_eq!(lines.get(1).map(|s| format!("ppid {s}")).as_deref(), lines.get(2).copied(), "{}", r[0]);
    // `/dev/tty`: no terminal (ENXIO 6) or not granted (EACCES 13); stdin (`/dev/null`):
    // seccomp's EPERM (1) before the driver's ENOTTY.
    assert_ok(&r[1], &["stdin refused 1"]);
    assert!(r[1].contains("tty refused 6") || r[1].contains("tty refused 13"), "{}", r[1]);
    assert_ok(&r[2], &["started"]);
    std::thread::sleep(std::time::Duration::from_secs(3));
    server.terminate(std::time::Duration::from_secs(10));

    // The owner's shell after the server stopped: it reads what is queued on the terminal, a
    // typed control line, and end of input.
    let control = home.join("typed");
    let typed = format!("\ntouch {}\n\x04", control.display());
    // SAFETY: write of a live buffer to our own descriptor.
    let n = unsafe { libc::write(master, typed.as_ptr().cast(), typed.len()) };
    assert_eq!(n, typed.len() as isize);
    // SAFETY: dup of our own descriptor, handed to the shell as its stdin.
    let stdin = unsafe { std::os::fd::OwnedFd::from_raw_fd(libc::dup(slave)) };
    let mut sh = std::process::Command::new("sh").stdin(stdin).spawn().expect("sh");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sh.try_wait().expect("wait").is_none() {
        assert!(std::time::Instant::now() < deadline, "the shell did not reach end of input");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(control.exists(), "the shell did not read the terminal: the test proves nothing");
    assert!(!pwned.exists(), "a command's line ran in the owner's shell");
    // SAFETY: closing our own descriptors once.
    unsafe {
        libc::close(master);
        libc::close(slave);
    }
}

/// Unix sockets: a pathname listener outside the workspace (a session bus, an agent)
/// cannot be reached; `socketpair` still works; `CASHCODE_SANDBOX_UNIX_SOCKETS=1` opens them.
#[test]
fn unix_sockets_are_refused_unless_allowed() {
    let dir = fresh_home("sbx-unix");
    let path = dir.join("bus.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("listen");
    listener.set_nonblocking(true).expect("nonblocking");
    let connect = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); s.sendall(b\"hi\")'",
        path.display()
    );
    let pair =
        "python3 -c 'import socket; a, b = socket.socketpair(); a.sendall(b\"pair\"); print(b.recv(4).decode())'";
    for allowed in [false, true] {
        let fake = FakeLlm::start();
        let server =
            TestServer::builder().env("CASHCODE_SANDBOX_UNIX_SOCKETS", if allowed { "1" } else { "0" }).start();
        server.configure_llm(&fake);
        let s = status(&server);
        assert_fully_confined(&s);
        assert_eq!(s["unix_sockets"], if allowed { "on" } else { "off" });
        let mut ws = WsClient::connect(&server);
        let r = exec_all(&fake, &mut ws, &[connect.clone(), pair.into()]);
        assert_ok(&r[1], &["pair"]);
        if allowed {
            assert_ok(&r[0], &[]);
            let (mut conn, _) = listener.accept().expect("the connection arrived");
            let mut got = Vec::new();
            conn.read_to_end(&mut got).expect("read");
            assert_eq!(got, b"hi");
        } else {
            assert_refused(&r[0], "PermissionError");
            assert!(listener.accept().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock), "it arrived");
        }
    }
}

/// Files other local users could run with our rights, and SysV IPC: no setuid or
/// setgid mode, by `chmod`, `install -m`, creating with the mode, or `mknod`; as root, no
/// extended attributes (file capabilities are `security.capability`) and no CAP_SETFCAP or
/// CAP_FSETID; SysV shared memory, queues and semaphores refused.
#[test]
fn no_setuid_files_file_capabilities_or_sysv_ipc() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    assert_fully_confined(&status(&server));
    let wsd = server.home.canonicalize().expect("home").join("workspace");
    let mut ws = WsClient::connect(&server);
    let ipc = "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); \
               r = [l.shmget(0, 4096, 0o1600), l.msgget(0, 0o1600), l.semget(0, 1, 0o1600), l.shmat(0, None, 0)]; \
               print(r, ctypes.get_errno()); raise SystemExit(any(x != -1 for x in r))'";
    let r = exec_all(
        &fake,
        &mut ws,
        &[
            "cp /usr/bin/id a && chmod u+s a".into(),
            "cp /usr/bin/id b && chmod 2755 b".into(),
            "install -m 4755 /usr/bin/id c".into(),
            "python3 -c 'import os; os.open(\"d\", os.O_CREAT | os.O_WRONLY, 0o4755)'".into(),
            "python3 -c 'import os; os.mknod(\"e\", 0o106755)'".into(),
            "cp /usr/bin/id f && python3 -c 'import os; os.setxattr(\"f\", \"security.capability\", bytes(20))'".into(),
            ipc.into(),
            "cp /usr/bin/id g && chmod 755 g && ./g -u".into(),
        ],
    );
    assert_refused(&r[0], "Operation not permitted");
    assert_refused(&r[1], "Operation not permitted");
    assert_refused(&r[2], "Operation not permitted");
    assert_refused(&r[3], "PermissionError");
    assert_refused(&r[4], "PermissionError");
    assert_refused(&r[5], "Error");
    assert_ok(&r[6], &[&format!("[-1, -1, -1, -1] {}", libc_eperm())]);
    assert_ok(&r[7], &[]);
    for f in ["a", "b", "c", "d", "e"] {
        if let Ok(m) = std::fs::metadata(wsd.join(f)) {
            assert_eq!(m.mode() & 0o6000, 0, "{f} has a setuid/setgid bit");
        }
    }
    assert!(xattr_names(&wsd.join("f")).is_empty(), "an extended attribute was set");
    if std::fs::metadata("/proc/self").expect("proc").uid() == 0 {
        // CAP_FSETID (4) and CAP_SETFCAP (31) are out of the command's bounding set.
        let r = exec_one(&fake, &mut ws, "grep CapBnd /proc/self/status");
        let bnd = r.lines().find_map(|l| l.strip_prefix("CapBnd:")).expect("CapBnd");
        let bits = u64::from_str_radix(bnd.trim(), 16).expect("hex");
        assert_eq!(bits & (1 << 4 | 1 << 31), 0, "{r}");
        assert_ne!(bits & 1, 0, "CAP_CHOWN is kept: {r}");
        let r = exec_one(
            &fake,
            &mut ws,
            "python3 -c 'import os; open(\"h\", \"w\"); os.setxattr(\"h\", \"user.x\", b\"1\")'",
        );
        assert_refused(&r, "PermissionError");
    }
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

/// The names of `path`'s extended attributes (`listxattr`).
fn xattr_names(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    let mut buf = [0u8; 1024];
    // SAFETY: a NUL-terminated path and a buffer of the given length, both live.
    let n = unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    buf[..n.max(0) as usize].to_vec()
}

/// `PATH` entries under `$HOME`: `~/.local/bin` grants that directory, not
/// `~/.local` with its keyrings and history.
#[test]
fn a_path_entry_under_home_grants_only_itself() {
    let home = fresh_home("sbx-path");
    for d in [".local/bin", ".local/share/keyrings", ".local/share/app"] {
        std::fs::create_dir_all(home.join(d)).expect("dir");
    }
    std::fs::write(home.join(".local/bin/hello"), "#!/bin/sh\necho hello-from-bin\n").expect("script");
    std::fs::set_permissions(home.join(".local/bin/hello"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(home.join(".local/share/keyrings/login.keyring"), "KEYRING-SECRET\n").expect("keyring");
    std::fs::write(home.join(".local/share/app/state"), "APP-STATE\n").expect("state");
    let path = format!("{}:{}", home.join(".local/bin").display(), std::env::var("PATH").unwrap_or_default());
    let fake = FakeLlm::start();
    let server = TestServer::builder().home(&home).env("PATH", &path).start();
    server.configure_llm(&fake);
    let s = status(&server);
    assert_fully_confined(&s);
    let home = home.canonicalize().expect("home");
    let roots: Vec<&str> = s["read_roots"].as_array().expect("roots").iter().filter_map(Value::as_str).collect();
    assert!(roots.contains(&home.join(".local/bin").to_str().expect("utf-8")), "{roots:?}");
    assert!(!roots.iter().any(|r| home.join(".local").starts_with(r)), "{roots:?}");
    let mut ws = WsClient::connect(&server);
    let r = exec_all(
        &fake,
        &mut ws,
        &[
            "hello".into(),
            format!("cat {}", home.join(".local/share/keyrings/login.keyring").display()),
            format!("cat {}", home.join(".local/share/app/state").display()),
        ],
    );
    assert_ok(&r[0], &["hello-from-bin"]);
    assert_refused(&r[1], "Permission denied");
    assert_refused(&r[2], "Permission denied");
    assert!(!r[1].contains("KEYRING-SECRET") && !r[2].contains("APP-STATE"));
}

/// Survivors: what a call started ends with the call, also what left its process
/// group and session (`setsid`, as the probe did) — at the shell's normal end and at the
/// timeout — and no later write lands in the workspace. The call's `kill` reaches only its own
/// processes: one of the test's, outside, lives on.
#[test]
fn everything_a_call_started_ends_with_it() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_EXEC_TIMEOUT_SECS", "2").start();
    server.configure_llm(&fake);
    assert_fully_confined(&status(&server));
    let wsd = server.home.canonicalize().expect("home").join("workspace");
    let mut bystander = std::process::Command::new("sleep").arg("60").spawn().expect("sleep");
    let escape = |n: u32| {
        format!(
            "setsid sh -c 'echo $$ > s{n}.pid; sleep 3; echo late > late{n}.txt' < /dev/null > /dev/null 2>&1 & \
             (sh -c 'sleep 3; echo late > double{n}.txt' < /dev/null > /dev/null 2>&1 &) ; sleep 0.5; echo started"
        )
    };
    let mut ws = WsClient::connect(&server);
    let r = exec_all(&fake, &mut ws, &[escape(1), format!("{}; sleep 30", escape(2))]);
    assert_ok(&r[0], &["started"]);
    assert!(r[1].contains("timed out"), "{}", r[1]);
    std::thread::sleep(std::time::Duration::from_secs(4));
    for n in [1, 2] {
        let pid = std::fs::read_to_string(wsd.join(format!("s{n}.pid"))).expect("pid file");
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        assert!(stat.is_empty() || stat.contains(") Z"), "call {n}'s setsid child lives: {stat}");
        for f in [format!("late{n}.txt"), format!("double{n}.txt")] {
            assert!(!wsd.join(&f).exists(), "{f} was written after the call ended");
        }
    }
    assert!(bystander.try_wait().expect("wait").is_none(), "a process outside the call was killed");
    let _ = bystander.kill();
    let _ = bystander.wait();
    // The server is unharmed and runs the next call.
    assert_ok(&exec_one(&fake, &mut ws, "echo next"), &["next"]);
}

/// One sandbox `HOME` per chat: a `.gitconfig` one chat's command wrote (an alias
/// that runs a shell command) is not read in another chat; the same chat keeps its own.
#[test]
fn each_chat_has_its_own_home() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    assert_fully_confined(&status(&server));
    let mut ws = WsClient::connect(&server);
    let plant = "git config --global alias.st '!echo planted' && git st && echo \"$HOME\"";
    let a = exec_one(&fake, &mut ws, plant);
    assert_ok(&a, &["planted"]);
    // `exec_one` runs each command in a new chat.
    let b = exec_one(&fake, &mut ws, "git st 2>&1; cat \"$HOME/.gitconfig\" 2>&1; echo \"$HOME\"");
    assert!(!b.contains("planted"), "chat A's .gitconfig ran in chat B:\n{b}");
    let home_of = |r: &str| r.lines().last().map(str::to_string).expect("HOME line");
    assert_ne!(home_of(&a), home_of(&b));
    assert!(home_of(&b)
        .starts_with(&server.home.canonicalize().expect("home").join("data/sandbox/home/").display().to_string()));
}

/// Free bytes on the filesystem holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("df").args(["-B1", "--output=avail"]).arg(path).output().expect("df runs");
    String::from_utf8_lossy(&out.stdout).lines().nth(1).and_then(|l| l.trim().parse().ok()).expect("df's figure")
}

/// A command filling the disk never leaves the server unable to save a chat: with the reserve
/// set 512 MiB under what is free (room for other tests' writes meanwhile), a `dd` of 8 GiB into the sandbox `HOME` is stopped once the
/// free space falls under the reserve (checked every 250 ms), the turn and its result are saved,
/// and the next confined command is refused before it starts, naming the setting.
#[test]
fn a_command_filling_the_disk_is_stopped_at_the_reserve() {
    let fake = FakeLlm::start();
    let probe = TestServer::builder().start();
    let reserve_mib = (free_bytes(&probe.home) >> 20).saturating_sub(512);
    drop(probe);
    let server = TestServer::builder().env("CASHCODE_SANDBOX_DISK_RESERVE_MB", &reserve_mib.to_string()).start();
    server.configure_llm(&fake);
    let mut ws = WsClient::connect(&server);
    let r = exec_one(&fake, &mut ws, "dd if=/dev/zero of=\"$HOME/fill\" bs=1M count=8192 2>&1; echo finished");
    assert!(r.starts_with("Error: Command stopped: the disk holding CashCode's data fell to"), "{r}");
    assert!(r.contains("CASHCODE_SANDBOX_DISK_RESERVE_MB") && !r.contains("\nfinished"), "{r}");
    let fill = std::fs::read_dir(server.home.join("data/sandbox/home"))
        .expect("sandbox homes")
        .filter_map(|e| std::fs::metadata(e.ok()?.path().join("fill")).ok())
        .map(|m| m.len())
        .next()
        .expect("the fill file");
    assert!(fill < 6 << 30, "dd wrote {} MiB before it was stopped", fill >> 20);
    // Still below the reserve: the next command does not start; the chat keeps saving.
    let r = exec_one(&fake, &mut ws, "echo never");
    assert!(r.starts_with("Error: Failed to start command: the disk holding CashCode's data has"), "{r}");
    let chats = server.get("/api/sessions").json();
    assert!(chats["sessions"].as_array().is_some_and(|c| c.len() == 2), "{chats}");
    println!("disk reserve {reserve_mib} MiB: dd stopped after {} MiB", fill >> 20);
    let _ = std::fs::remove_dir_all(server.home.join("data/sandbox/home"));
}

/// A command that forks without end (here: 300 sleepers) no longer takes the server's process
/// budget: with the server in a `pids` group with room for 100 more tasks, the call's own group
/// is limited to leave it 64, so the owner connects five WebSocket clients while the sleepers
/// hold their share (before: 114 sleepers made every connect fail). The call's group is gone
/// when the call ends.
#[test]
fn a_command_forking_without_end_leaves_the_server_its_threads() {
    use crate::suite::http_limits::PidsCgroup;
    let Some(group) = PidsCgroup::create() else {
        eprintln!("SKIPPED: no writable pids cgroup (/sys/fs/cgroup/pids) to limit tasks in");
        return;
    };
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_EXEC_TIMEOUT_SECS", "8").start();
    server.configure_llm(&fake);
    group.write("cgroup.procs", &server.pid.to_string());
    let idle: u64 = group.read("pids.current").parse().expect("pids.current");
    group.write("pids.max", &(idle + 100).to_string());
    assert_eq!(status(&server)["call_process_limit"], true);

    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    let fork = "(i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); done) 2>/dev/null; exec sleep 3";
    let args = json!({ "command": fork }).to_string();
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_0", "exec", &[&args])]));
    fake.push(Reply::text(&["done"]));
    ws.message(&chat, "fork", "openai_compatible");
    // Until the sleepers stop growing in number (the call's limit, or the whole group's).
    let mut last = (0u64, std::time::Instant::now());
    wait_for("the sleepers to take all they can", WAIT, || {
        let now: u64 = group.read("pids.current").parse().ok()?;
        if now != last.0 {
            last = (now, std::time::Instant::now());
        }
        (now >= idle + 20 && last.1.elapsed() > std::time::Duration::from_millis(500)).then_some(())
    });
    let held: u64 = group.read("pids.current").parse().expect("pids.current");
    for _ in 0..5 {
        let mut owner = WsClient::connect(&server);
        owner.ping_sync();
    }
    let peak: u64 = group.read("pids.peak").parse().unwrap_or(0);
    let events = ws.turn_events(&chat);
    assert_eq!(events.last().expect("events")["event"], "done", "{events:#?}");
    assert!(peak <= idle + 100, "peak {peak}");
    let left: Vec<_> = std::fs::read_dir(&group.0)
        .expect("group dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("cashcode-call-"))
        .collect();
    assert!(left.is_empty(), "the call's group is removed: {left:?}");
    println!("pids: server idle {idle} tasks, {held} with the sleepers (peak {peak}); five owner connects served");
    drop(server);
}

/// Version-control control files of the project are read-only to confined commands: a command
/// that sets `core.fsmonitor`, plants a hook and edits `.git/info/exclude` finds them put back
/// after it, and is told so; the owner's next approval dialog in that chat lists them. An
/// escalated git runs with hooks and fsmonitor off, even where the repository sets them
/// (planted here by the test itself, as a nested repository or a race could leave them).
#[test]
fn control_files_are_read_only_to_confined_commands_and_escalated_git_runs_no_hooks() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    assert_fully_confined(&status(&server));
    let wsd = server.home.join("workspace");
    std::fs::create_dir_all(&wsd).expect("workspace");
    let out = server.home.join("outside");
    std::fs::create_dir_all(&out).expect("outside");
    let git = |args: &[&str]| {
        let st = std::process::Command::new("git").args(args).current_dir(&wsd).status().expect("git");
        assert!(st.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    let config = std::fs::read_to_string(wsd.join(".git/config")).expect("config");
    let o = out.display();
    let mut ws = WsClient::connect(&server);
    let chat = ws.new_chat();
    let plant = format!(
        "git config core.fsmonitor 'touch {o}/fsmonitor; false' && printf '#!/bin/sh\\ntouch {o}/hook\\n' > \
         .git/hooks/post-commit && chmod +x .git/hooks/post-commit && echo '*.secret' >> .git/info/exclude && \
         echo ordinary > work.txt && grep -c fsmonitor .git/config"
    );
    let args = json!({"command": plant}).to_string();
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_0", "exec", &[&args])]));
    fake.push(Reply::text(&["done"]));
    let before = fake.chat_requests().len();
    ws.message(&chat, "plant", "openai_compatible");
    assert_eq!(ws.turn_events(&chat).last().unwrap()["event"], "done");
    let reqs = fake.wait_chat_requests(before + 2, WAIT);
    let result = req_messages(&reqs[before + 1].body).last().unwrap()["content"].as_str().unwrap().to_string();
    assert_ok(&result, &["\n1\n", "control files are read-only", ".git/config", ".git/hooks/post-commit"]);
    assert_eq!(std::fs::read_to_string(wsd.join(".git/config")).unwrap(), config, "config put back");
    assert!(!wsd.join(".git/hooks/post-commit").exists(), "hook removed");
    assert!(!std::fs::read_to_string(wsd.join(".git/info/exclude")).unwrap().contains("*.secret"));
    assert_eq!(std::fs::read_to_string(wsd.join("work.txt")).unwrap(), "ordinary\n", "other files are the command's");

    // The same plants, made by the owner's own hand; an approved escalated commit and status
    // run neither, and the dialog lists what the chat's commands changed.
    git(&["config", "core.fsmonitor", &format!("touch {o}/fsmonitor; false")]);
    std::fs::write(wsd.join(".git/hooks/post-commit"), format!("#!/bin/sh\ntouch {o}/hook\n")).unwrap();
    std::fs::set_permissions(wsd.join(".git/hooks/post-commit"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let command = "git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m x && git status --short";
    let args = json!({"command": command, "sandbox_permissions": "require_escalated"}).to_string();
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_1", "exec", &[&args])]));
    fake.push(Reply::text(&["done"]));
    let before = fake.chat_requests().len();
    ws.message(&chat, "commit", "openai_compatible");
    let frames = ws.recv_until(|v| v["event"] == "approval_request" || v["event"] == "error");
    let req = frames.last().unwrap().clone();
    assert_eq!(req["event"], "approval_request", "{frames:#?}");
    assert_eq!(req["control_files"], json!([".git/config", ".git/hooks/post-commit", ".git/info/exclude"]), "{req}");
    ws.send(&json!({"type": "approval_response", "chat_id": chat, "id": req["id"], "decision": "approve"}));
    assert_eq!(ws.turn_events(&chat).last().unwrap()["event"], "done");
    let reqs = fake.wait_chat_requests(before + 2, WAIT);
    let result = req_messages(&reqs[before + 1].body).last().unwrap()["content"].as_str().unwrap().to_string();
    assert_ok(&result, &[]);
    let ran: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(ran.is_empty(), "an escalated git ran {ran:?}:\n{result}");
    // Sanity: the owner's git, without the server's settings, does run the hook.
    git(&["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "y"]);
    assert!(out.join("hook").exists(), "the planted hook is a working one");
}
