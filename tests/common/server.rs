//! [`TestServer`]: the real `cashcode` binary in a fresh temporary home on ephemeral ports,
//! plus a small blocking HTTP client for its API. The child is killed on drop; when the test is
//! failing, its stderr and `cashcode.log` are printed. Background threads drain the child's
//! stdout and stderr; everything else runs on the test thread.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver};
use serde_json::Value;

use super::{fresh_home, llm_body, Deadline, FakeLlm};

/// Start-up bound: both `listening on` lines must appear within this.
const START_LIMIT: Duration = Duration::from_secs(10);

/// A running server under test.
pub struct TestServer {
    pub home: PathBuf,
    pub http_port: u16,
    pub ws_port: u16,
    env: Vec<(String, String)>,
    /// Command-line arguments.
    args: Vec<String>,
    /// A file the server inherits at this descriptor number without FD_CLOEXEC.
    inherit: Option<(i32, PathBuf)>,
    /// The server's open-files limit (soft, hard), as `prlimit --nofile=soft:hard` sets it.
    nofile: Option<(u64, u64)>,
    /// A terminal (pty slave descriptor) the server runs in: its controlling terminal and stdin.
    terminal: Option<i32>,
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<String>>,
    /// Every HTTP response body and header block this harness received (for secrecy checks).
    seen: Arc<Mutex<Vec<String>>>,
    agent: ureq::Agent,
    /// How long the last start took until both listeners were announced.
    pub startup: Duration,
    pub pid: u32,
    bearer: Option<String>,
}

/// Builder for per-test environment overrides.
pub struct ServerBuilder {
    home: Option<PathBuf>,
    env: Vec<(String, String)>,
    args: Vec<String>,
    inherit: Option<(i32, PathBuf)>,
    nofile: Option<(u64, u64)>,
    terminal: Option<i32>,
    bearer: Option<String>,
}

impl ServerBuilder {
    /// Runs the server in a terminal, as `scripts/start.sh` typed into a shell does: `slave`
    /// (a pty's slave side, open in the test) becomes its controlling terminal and stdin.
    pub fn terminal(mut self, slave: i32) -> Self {
        self.terminal = Some(slave);
        self
    }
    /// A command-line argument (flags such as `--env-file PATH` or `--dev`).
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    /// The server inherits `path`, open for reading, at descriptor `fd` without FD_CLOEXEC (as
    /// from a shell's `exec 5<file`).
    pub fn inherit_fd(mut self, fd: i32, path: &Path) -> Self {
        self.inherit = Some((fd, path.to_path_buf()));
        self
    }
    /// Starts the server with this open-files limit (soft, hard), as under
    /// `prlimit --nofile=soft:hard`.
    pub fn nofile(mut self, soft: u64, hard: u64) -> Self {
        self.nofile = Some((soft, hard));
        self
    }
    /// Starts the server with `CASHCODE_TOKEN=token`, which this harness's requests and
    /// WebSocket clients then send on their own (as the owner's client would).
    pub fn bearer(mut self, token: &str) -> Self {
        self.bearer = Some(token.into());
        self.env("CASHCODE_TOKEN", token)
    }
    /// Uses an existing (pre-populated) home instead of a fresh one.
    pub fn home(mut self, home: &Path) -> Self {
        self.home = Some(home.to_path_buf());
        self
    }
    pub fn start(self) -> TestServer {
        let home = self.home.unwrap_or_else(|| fresh_home("srv"));
        let mut env = vec![
            ("CASHCODE_HOME".to_string(), home.display().to_string()),
            ("CASHCODE_CONFIG_DIR".to_string(), home.join("config").display().to_string()),
            ("CASHCODE_PORT".to_string(), "0".to_string()),
            ("WS_PORT".to_string(), "0".to_string()),
            ("DREAM_INTERVAL".to_string(), "0".to_string()),
            ("CASHCODE_PROJECT_DIR".to_string(), env!("CARGO_MANIFEST_DIR").to_string()),
            // API tests do not depend on whether client/dist was built; assets.rs tests set it.
            ("CASHCODE_CLIENT_DIR".to_string(), home.join("no-client").display().to_string()),
        ];
        for (k, v) in self.env {
            env.retain(|(ek, _)| *ek != k);
            env.push((k, v));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .proxy(None)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        let mut s = TestServer {
            home,
            http_port: 0,
            ws_port: 0,
            env,
            args: self.args,
            inherit: self.inherit,
            nofile: self.nofile,
            terminal: self.terminal,
            child: None,
            stderr: Arc::new(Mutex::new(String::new())),
            stdout: Arc::new(Mutex::new(String::new())),
            seen: Arc::new(Mutex::new(Vec::new())),
            agent,
            startup: Duration::ZERO,
            pid: 0,
            bearer: self.bearer,
        };
        s.spawn();
        s
    }
}

fn drain(
    mut r: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
    lines: Option<crossbeam_channel::Sender<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(&mut r);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    into.lock().expect("output lock").push_str(&line);
                    if let Some(tx) = &lines {
                        let _ = tx.send(line.trim_end().to_string());
                    }
                }
            }
        }
    })
}

impl TestServer {
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            home: None,
            env: Vec::new(),
            args: Vec::new(),
            inherit: None,
            nofile: None,
            terminal: None,
            bearer: None,
        }
    }

    /// A server in a fresh home with the default environment.
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// A server whose LLM settings point both providers at `fake` (Ollama via `/v1`).
    pub fn with_llm(fake: &FakeLlm) -> Self {
        let s = Self::start();
        s.configure_llm(fake);
        s
    }

    fn spawn(&mut self) {
        let mut cmd = bare_command(&self.home);
        cmd.env("RUST_BACKTRACE", "1").args(&self.args).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // Opened here (close-on-exec, so only the dup below reaches the server); kept open until
        // the spawn returned.
        let inherited =
            self.inherit.as_ref().map(|(fd, path)| (*fd, std::fs::File::open(path).expect("inherited file")));
        if let Some((target, file)) = &inherited {
            use std::os::unix::io::AsRawFd;
            use std::os::unix::process::CommandExt;
            let (target, source) = (*target, file.as_raw_fd());
            // SAFETY: the closure runs in the forked child before exec and calls only dup2 and
            // fcntl, both async-signal-safe, on `source` (open until the spawn returns) and the
            // child's own `target`; it allocates nothing and touches no lock.
            unsafe {
                cmd.pre_exec(move || {
                    // dup2 onto itself keeps the flags: FD_CLOEXEC is cleared either way.
                    if libc::dup2(source, target) < 0 || libc::fcntl(target, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some((soft, hard)) = self.nofile {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
            // SAFETY: the closure runs in the forked child before exec and calls only
            // setrlimit, which is async-signal-safe, on a value copied in; it allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some(slave) = self.terminal {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs in the forked child before exec and calls only setsid,
            // ioctl and dup2, all async-signal-safe, on the test's open descriptor; it
            // allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setsid() < 0 || libc::ioctl(slave, libc::TIOCSCTTY, 0) < 0 || libc::dup2(slave, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let started = Instant::now();
        let mut child = cmd.spawn().expect("spawn cashcode");
        drop(inherited);
        self.pid = child.id();
        let (tx, rx) = unbounded();
        drain(child.stdout.take().expect("stdout"), self.stdout.clone(), Some(tx));
        drain(child.stderr.take().expect("stderr"), self.stderr.clone(), None);
        self.child = Some(child);
        let (http, ws) = self.read_ports(&rx);
        self.startup = started.elapsed();
        self.http_port = http;
        self.ws_port = ws;
    }

    fn read_ports(&mut self, rx: &Receiver<String>) -> (u16, u16) {
        let deadline = Deadline::after(START_LIMIT);
        let (mut http, mut ws) = (None, None);
        while http.is_none() || ws.is_none() {
            match rx.recv_timeout(deadline.remaining()) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("http listening on http://127.0.0.1:") {
                        http = Some(rest.trim().parse::<u16>().expect("http port"));
                    } else if let Some(rest) = line.strip_prefix("ws listening on ws://127.0.0.1:") {
                        ws = Some(rest.trim().trim_end_matches('/').parse::<u16>().expect("ws port"));
                    }
                }
                Err(_) => {
                    let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                    panic!(
                        "server did not announce both listeners within {START_LIMIT:?} (exit: {status:?})\nstdout:\n{}\nstderr:\n{}",
                        self.stdout.lock().expect("lock"),
                        self.stderr.lock().expect("lock")
                    );
                }
            }
        }
        (http.expect("http"), ws.expect("ws"))
    }

    /// SIGKILLs the server (a crash: nothing is flushed or cleaned up).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM (a graceful stop) and waits for the process to exit; returns its exit code
    /// and how long the exit took. Panics if it is still running after `within`.
    pub fn terminate(&mut self, within: Duration) -> (Option<i32>, Duration) {
        let mut child = self.child.take().expect("the server is running");
        let sent = Instant::now();
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = Deadline::after(within);
        loop {
            if let Some(status) = child.try_wait().expect("wait for the server") {
                return (status.code(), sent.elapsed());
            }
            if deadline.passed() {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not exit within {within:?} of SIGTERM\nlog:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Kills the server and starts it again on the same home and environment (new ports).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Stops the server with SIGTERM (a clean stop) and starts it again on the same home.
    pub fn restart_clean(&mut self) {
        self.terminate(Duration::from_secs(10));
        self.spawn();
    }

    /// Changes (or with `None` removes) a variable for the next [`TestServer::restart`].
    pub fn set_env(&mut self, k: &str, v: Option<&str>) {
        self.env.retain(|(ek, _)| ek != k);
        if let Some(v) = v {
            self.env.push((k.to_string(), v.to_string()));
        }
    }

    /// Whether the child is still running.
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn memory(&self) -> PathBuf {
        self.home.join("memory")
    }
    pub fn chat_dir(&self, chat: &str) -> PathBuf {
        self.memory().join(chat)
    }
    pub fn llm_json(&self) -> PathBuf {
        self.home.join("config/settings/llm.json")
    }
    /// Waits until cashcode.log holds `marker` at least `count` times: a logged event after
    /// which what a test checks has been decided. Returns the log then.
    pub fn wait_log(&self, marker: &str, count: usize) -> String {
        super::wait_for(&format!("{count} x {marker:?} in cashcode.log"), super::WAIT, || {
            let log = self.log_text();
            (log.matches(marker).count() >= count).then_some(log)
        })
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.home.join("logs/cashcode.log")).unwrap_or_default()
    }
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }
    pub fn stdout_text(&self) -> String {
        self.stdout.lock().expect("lock").clone()
    }
    /// Everything the harness saw over HTTP so far.
    pub fn http_seen(&self) -> String {
        self.seen.lock().expect("lock").join("\n")
    }

    pub fn http_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}/", self.ws_port)
    }

    /// The token this harness sends on its own ([`ServerBuilder::bearer`]), if any.
    pub fn token(&self) -> Option<&str> {
        self.bearer.as_deref()
    }

    /// Any request; `headers` are sent as given, `body` (if any) as UTF-8 text. With a
    /// [`ServerBuilder::bearer`] token and no `Authorization` among `headers`, the token is sent.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> HttpResp {
        let url = format!("{}{path}", self.http_base());
        let mut b = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(t) = self.token() {
            if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("authorization")) {
                b = b.header("Authorization", format!("Bearer {t}"));
            }
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let result = match body {
            Some(text) => {
                let req = b.header("Content-Type", "application/json").body(text.to_string()).expect("build request");
                self.agent.run(req)
            }
            None => {
                let req = b.body(()).expect("build request");
                self.agent.run(req)
            }
        };
        let mut resp = result.unwrap_or_else(|e| panic!("{method} {path}: transport error {e}"));
        let status = resp.status().as_u16();
        let headers: Vec<(String, String)> = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).to_string()))
            .collect();
        let body = if method == "HEAD" {
            String::new()
        } else {
            resp.body_mut()
                .with_config()
                .limit(64 * 1024 * 1024)
                .read_to_string()
                .unwrap_or_else(|e| panic!("{method} {path}: reading body failed: {e}"))
        };
        let mut seen = self.seen.lock().expect("lock");
        seen.push(format!("{headers:?}"));
        seen.push(body.clone());
        HttpResp { status, headers, body }
    }

    pub fn get(&self, path: &str) -> HttpResp {
        self.request("GET", path, &[], None)
    }
    pub fn put(&self, path: &str, body: &Value) -> HttpResp {
        self.request("PUT", path, &[], Some(&body.to_string()))
    }
    pub fn post(&self, path: &str, body: &Value) -> HttpResp {
        self.request("POST", path, &[], Some(&body.to_string()))
    }
    pub fn patch(&self, path: &str, body: &Value) -> HttpResp {
        self.request("PATCH", path, &[], Some(&body.to_string()))
    }
    pub fn delete(&self, path: &str) -> HttpResp {
        self.request("DELETE", path, &[], None)
    }

    /// Points openai_compatible (with [`super::TEST_KEY`]) and Ollama at `fake`.
    pub fn configure_llm(&self, fake: &FakeLlm) {
        let r = self.put("/api/settings/llm", &llm_body(&fake.base(), &fake.base()));
        assert_eq!(r.status, 200, "configuring the LLM failed: {}", r.body);
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "==== cashcode home: {}\n==== stderr:\n{}\n==== cashcode.log:\n{}",
                self.home.display(),
                self.stderr_text(),
                self.log_text()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.home);
        }
    }
}

/// The binary with a clean environment (PATH only, plus glibc's allocator variables for
/// experiments), `home` as HOME and working directory, UTC, stdin closed. `CASHCODE_TEST_BIN`
/// names another build of the server, so a bench can compare two builds in one sitting.
pub fn bare_command(home: &Path) -> Command {
    let bin = std::env::var_os("CASHCODE_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_cashcode").into());
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .current_dir(home)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TZ", "UTC")
        .stdin(Stdio::null());
    for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("MALLOC_") || k == "GLIBC_TUNABLES") {
        cmd.env(k, v);
    }
    cmd
}

/// [`bare_command`] with everything under `home`, ephemeral ports and Dream off.
pub fn cashcode_command(home: &Path) -> Command {
    let mut cmd = bare_command(home);
    cmd.env("CASHCODE_HOME", home)
        .env("CASHCODE_CONFIG_DIR", home.join("config"))
        .env("CASHCODE_PORT", "0")
        .env("WS_PORT", "0")
        .env("DREAM_INTERVAL", "0");
    cmd
}

/// The optional features of the server under test, from its `--version` line (`cashcode X
/// (features: tls, oauth)`): a suite run against another build through `CASHCODE_TEST_BIN`
/// expects what that build does.
pub fn server_features() -> Vec<String> {
    let (code, out, err) = run_to_exit(&["--version"], &[]);
    assert_eq!(code, Some(0), "cashcode --version: {err}");
    let list = out.split_once("(features: ").and_then(|(_, rest)| rest.split_once(')')).map(|(l, _)| l);
    let list = list.unwrap_or_else(|| panic!("no feature list in {out:?}"));
    list.split(", ").filter(|f| *f != "none").map(str::to_string).collect()
}

/// Runs the binary to completion (for start-up failures and `--help`) with the test
/// environment plus `env`, in a fresh home; returns (exit code, stdout, stderr). Killed after
/// 10 s if it does not exit by itself.
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let home = fresh_home("exit");
    let mut cmd = cashcode_command(&home);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn cashcode");
    let out = Arc::new(Mutex::new(String::new()));
    let err = Arc::new(Mutex::new(String::new()));
    let drains = [
        drain(child.stdout.take().expect("stdout"), out.clone(), None),
        drain(child.stderr.take().expect("stderr"), err.clone(), None),
    ];
    let deadline = Deadline::after(START_LIMIT);
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break st.code();
        }
        if deadline.passed() {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The drain threads end at the closed pipes' end; a stray grandchild could hold a pipe
    // open, so the wait is bounded and what was read by then is returned.
    let read_all = Deadline::after(super::WAIT);
    while !drains.iter().all(|d| d.is_finished()) && !read_all.passed() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = std::fs::remove_dir_all(&home);
    let o = out.lock().expect("lock").clone();
    let e = err.lock().expect("lock").clone();
    (status, o, e)
}

/// A buffered HTTP response.
#[derive(Debug, Clone)]
pub struct HttpResp {
    pub status: u16,
    /// Lowercase names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): status {} body {:?}", self.status, self.body))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }
    /// Asserts the status and the whole JSON body.
    #[track_caller]
    pub fn expect(&self, status: u16, body: Value) {
        assert_eq!((self.status, self.json()), (status, body), "unexpected response, raw body {:?}", self.body);
    }
}
