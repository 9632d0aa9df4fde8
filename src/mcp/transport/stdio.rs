//! Child-process stdio transport: newline-delimited JSON-RPC on the child's stdin/stdout.
//!
//! Threads per connection: `mcp-<server>-out` reads stdout lines and feeds the [`Inbox`];
//! `mcp-<server>-in` owns stdin and writes queued lines (so a child that stops reading can
//! never block a caller or the reader); `mcp-<server>-err` drains stderr into the log (capped,
//! redacted) and keeps a short tail for crash messages. The child runs in its own process
//! group with an allow-listed environment; close (and `Drop`) closes stdin, waits a grace
//! period, then SIGTERM and SIGKILL to the whole group, and reaps it.

use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};

use super::{join_until, lock, read_capped_line, spawn_named, Inbox, LineRead, Outgoing, StdioSpec, Transport};
use crate::mcp::{Error, Result};
use crate::util::text;

/// Parent variables a child may see (docs/tools-and-mcp.md §5); everything else comes from config.
/// None of them is secret, so the start-up removal of secret variables from the server's
/// environment changes nothing for MCP servers: a catalog entry that needs a key (say
/// `GITHUB_TOKEN`) has always had to name it in its own `env`, which is passed as configured.
pub(crate) const ENV_ALLOWLIST: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];
/// Largest stdout line (one JSON-RPC message) accepted before the connection is failed.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Longest stderr line kept (the rest of the line is dropped).
const MAX_STDERR_LINE: usize = 2000;
/// Stderr lines logged per connection; after that only counted.
const MAX_STDERR_LOG_LINES: u64 = 200;
/// Stderr lines kept for crash messages.
const STDERR_TAIL: usize = 5;
/// Queued outbound lines before `send` waits.
const WRITE_QUEUE: usize = 256;
/// How long close waits after closing stdin before SIGTERM, and after SIGTERM before SIGKILL.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(2);
const TERM_GRACE: Duration = Duration::from_secs(1);

/// A running stdio server.
pub(crate) struct StdioTransport {
    server: String,
    inbox: Arc<Inbox>,
    child: Arc<Mutex<Option<Child>>>,
    pid: u32,
    writer: Arc<Mutex<Option<Sender<String>>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    closing: Arc<AtomicBool>,
    grace: Duration,
}

impl StdioTransport {
    /// Starts the child and its three threads. `grace` is how long close waits for a clean exit.
    pub(crate) fn spawn(server: &str, spec: &StdioSpec, inbox: Arc<Inbox>, grace: Duration) -> Result<Self> {
        let mut cmd = build_command(spec);
        let program = inbox.redact(&Path::new(cmd.get_program()).display().to_string());
        let mut child = cmd.spawn().map_err(|e| Error::Spawn { command: inbox.redact(&spec.command), source: e })?;
        let pid = child.id();
        let (stdin, stdout, stderr) = match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
            _ => {
                kill_and_reap(&mut child, pid);
                return Err(Error::Closed("child pipes were not created".into()));
            }
        };
        let child = Arc::new(Mutex::new(Some(child)));
        let closing = Arc::new(AtomicBool::new(false));
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = crossbeam_channel::bounded::<String>(WRITE_QUEUE);
        let writer = Arc::new(Mutex::new(Some(tx)));

        let mut threads = Vec::new();
        let spawned = (|| -> Result<()> {
            threads.push(spawn_named(format!("mcp-{server}-in"), {
                let inbox = inbox.clone();
                move || write_loop(stdin, rx, &inbox)
            })?);
            threads.push(spawn_named(format!("mcp-{server}-err"), {
                let inbox = inbox.clone();
                let tail = tail.clone();
                move || drain_stderr(stderr, &inbox, &tail)
            })?);
            threads.push(spawn_named(format!("mcp-{server}-out"), {
                let inbox = inbox.clone();
                let child = child.clone();
                let closing = closing.clone();
                move || read_loop(stdout, &inbox, &child, &closing, &tail)
            })?);
            Ok(())
        })();
        // Replies to server requests go through the same queue, never blocking the reader.
        let w = writer.clone();
        let srv = server.to_string();
        inbox.set_replier(Box::new(move |line| {
            if let Some(tx) = lock(&w).as_ref() {
                if let Err(TrySendError::Full(_)) = tx.try_send(line) {
                    log::warn!("mcp {srv}: write queue full, dropping a reply");
                }
            }
        }));
        let t = StdioTransport {
            server: server.to_string(),
            inbox,
            child,
            pid,
            writer,
            threads: Mutex::new(threads),
            closing,
            grace,
        };
        if let Err(e) = spawned {
            t.close();
            return Err(e);
        }
        log::info!("event=mcp.stdio.started server={server} pid={pid} program={program:?}");
        Ok(t)
    }
}

impl Transport for StdioTransport {
    fn send(&self, msg: String, _kind: Outgoing<'_>, timeout: Duration) -> Result<()> {
        if let Some(reason) = self.inbox.closed_reason() {
            return Err(Error::Closed(reason));
        }
        let tx = lock(&self.writer).clone();
        let Some(tx) = tx else {
            return Err(Error::Closed("connection closed".into()));
        };
        tx.send_timeout(msg, timeout).map_err(|e| match e {
            crossbeam_channel::SendTimeoutError::Timeout(_) => {
                Error::Timeout { method: "write to server stdin".into(), after: timeout }
            }
            crossbeam_channel::SendTimeoutError::Disconnected(_) => {
                Error::Closed(self.inbox.closed_reason().unwrap_or_else(|| "stdin closed".into()))
            }
        })
    }

    fn close(&self) {
        if self.closing.swap(true, Ordering::SeqCst) {
            return;
        }
        self.inbox.close("connection closed");
        // Dropping the only sender ends the writer thread, which drops stdin: EOF to the child.
        lock(&self.writer).take();
        let child = lock(&self.child).take();
        if let Some(mut child) = child {
            let deadline = Instant::now() + self.grace;
            let mut exited = wait_exited(&mut child, self.pid, deadline);
            if !exited {
                signal_group(self.pid, nix::sys::signal::Signal::SIGTERM);
                exited = wait_exited(&mut child, self.pid, Instant::now() + TERM_GRACE);
            }
            if !exited {
                log::warn!("mcp {}: server ignored SIGTERM, killing it", self.server);
            }
            kill_and_reap(&mut child, self.pid);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        for h in lock(&self.threads).drain(..) {
            join_until(h, deadline);
        }
        log::info!("event=mcp.stdio.stopped server={}", self.server);
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.close();
    }
}

/// The child command: resolved program, args, allow-listed env overlaid by config, own group.
fn build_command(spec: &StdioSpec) -> Command {
    let mut env: Vec<(String, String)> =
        ENV_ALLOWLIST.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))).collect();
    for (k, v) in &spec.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    let path_var = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
    let program = resolve_command(&spec.command, spec.python.as_deref(), path_var.as_deref(), spec.cwd.as_deref());
    let mut cmd = Command::new(program);
    cmd.args(&spec.args).env_clear().envs(env).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Own process group, so close can signal grandchildren too (npx -> node).
        cmd.process_group(0);
    }
    cmd
}

/// The program to run. A bare `python`/`python3` runs `python` (the checkout's virtual
/// environment) when that is executable; otherwise `command` is found on `path`, where a bare
/// `python` falls back to `python3` (and vice versa) when only the other exists, so the shipped
/// catalog works on systems without a `python` alias. A relative command with a slash is taken
/// relative to `cwd`.
pub(crate) fn resolve_command(command: &str, python: Option<&Path>, path: Option<&str>, cwd: Option<&Path>) -> PathBuf {
    if command.contains('/') {
        let p = PathBuf::from(command);
        return match (p.is_relative(), cwd) {
            (true, Some(dir)) => dir.join(p),
            _ => p,
        };
    }
    let alternative = match command {
        "python" => Some("python3"),
        "python3" => Some("python"),
        _ => None,
    };
    if let Some(venv) = python.filter(|p| alternative.is_some() && is_executable(p)) {
        return venv.to_path_buf();
    }
    let find = |name: &str| -> Option<PathBuf> {
        path?.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(name)).find(|p| is_executable(p))
    };
    find(command).or_else(|| alternative.and_then(find)).unwrap_or_else(|| PathBuf::from(command))
}

fn is_executable(p: &Path) -> bool {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                m.permissions().mode() & 0o111 != 0
            }
            #[cfg(not(unix))]
            {
                true
            }
        }
        _ => false,
    }
}

fn write_loop(mut stdin: ChildStdin, rx: crossbeam_channel::Receiver<String>, inbox: &Inbox) {
    for msg in rx {
        let mut line = msg.into_bytes();
        line.push(b'\n');
        if let Err(e) = stdin.write_all(&line).and_then(|_| stdin.flush()) {
            // The reader sees EOF and reports the exit; this only explains a broken pipe early.
            log::debug!("mcp {}: stdin write failed: {e}", inbox.server());
            break;
        }
    }
}

fn read_loop(
    stdout: impl Read,
    inbox: &Inbox,
    child: &Mutex<Option<Child>>,
    closing: &AtomicBool,
    tail: &Mutex<VecDeque<String>>,
) {
    let mut r = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::new();
    let reason = loop {
        match read_capped_line(&mut r, &mut buf, MAX_LINE_BYTES) {
            Ok(LineRead::Line) => inbox.handle_text(&String::from_utf8_lossy(&buf)),
            Ok(LineRead::TooLong) => {
                break format!("server sent a message larger than {} MiB", MAX_LINE_BYTES / (1024 * 1024))
            }
            Ok(LineRead::Eof) => break String::new(),
            Err(e) => break format!("reading server stdout failed: {e}"),
        }
    };
    if closing.load(Ordering::SeqCst) {
        return;
    }
    let reason = if reason.is_empty() {
        exit_reason(child, tail)
    } else {
        // An oversized message poisons the stream: nothing after it can be trusted.
        if let Some(c) = lock(child).as_mut() {
            let _ = c.kill();
        }
        reason
    };
    log::warn!("event=mcp.stdio.ended server={} reason={:?}", inbox.server(), inbox.redact(&reason));
    inbox.close(&reason);
}

/// "server process exited (exit status: 1); stderr: …" after stdout EOF.
fn exit_reason(child: &Mutex<Option<Child>>, tail: &Mutex<VecDeque<String>>) -> String {
    // The pipe closes a moment before the exit is visible; give it a short while. The child is
    // not reaped here, so its pid keeps naming the process group until close kills and reaps.
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut status = None;
    while Instant::now() < deadline {
        let Some(pid) = lock(child).as_ref().map(Child::id) else { break };
        status = peek_exit(child, pid);
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the stderr thread catch the last lines (a traceback is usually written just before exit).
    std::thread::sleep(Duration::from_millis(50));
    let mut msg = match status {
        Some(s) => format!("server process exited ({s})"),
        None => "server closed its stdout".to_string(),
    };
    let tail: Vec<String> = lock(tail).iter().cloned().collect();
    if !tail.is_empty() {
        msg.push_str("; stderr: ");
        msg.push_str(&tail.join(" | "));
    }
    msg
}

/// How our child `pid` ended ("exit status: 3", "signal: 9"), without reaping it.
#[cfg(target_os = "linux")]
fn peek_exit(_child: &Mutex<Option<Child>>, pid: u32) -> Option<String> {
    use nix::sys::wait::WaitStatus;
    Some(match peek(pid).ok()? {
        WaitStatus::Exited(_, status) => format!("exit status: {status}"),
        WaitStatus::Signaled(_, signal, _) => format!("signal: {}", signal as i32),
        WaitStatus::StillAlive => return None,
        other => format!("status: {other:?}"),
    })
}

/// `waitid(WEXITED | WNOHANG | WNOWAIT)`: the state of our own child, leaving it unreaped.
#[cfg(target_os = "linux")]
fn peek(pid: u32) -> nix::Result<nix::sys::wait::WaitStatus> {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    waitid(Id::Pid(nix::unistd::Pid::from_raw(pid as i32)), flags)
}

#[cfg(not(target_os = "linux"))]
fn peek_exit(child: &Mutex<Option<Child>>, _pid: u32) -> Option<String> {
    match lock(child).as_mut().map(|c| c.try_wait()) {
        Some(Ok(Some(s))) => Some(s.to_string()),
        _ => None,
    }
}

fn drain_stderr(stderr: impl Read, inbox: &Inbox, tail: &Mutex<VecDeque<String>>) {
    let mut r = BufReader::with_capacity(16 * 1024, stderr);
    let mut buf = Vec::new();
    let (mut lines, mut bytes) = (0u64, 0u64);
    while let Ok(LineRead::Line | LineRead::TooLong) = read_capped_line(&mut r, &mut buf, MAX_STDERR_LINE) {
        {
            lines += 1;
            bytes += buf.len() as u64 + 1;
            let line = inbox.redact(String::from_utf8_lossy(&buf).trim_end());
            if lines <= MAX_STDERR_LOG_LINES {
                log::debug!("mcp {} stderr: {}", inbox.server(), text::take_chars(&line, 500));
            }
            if !line.trim().is_empty() {
                let mut t = lock(tail);
                if t.len() == STDERR_TAIL {
                    t.pop_front();
                }
                t.push_back(text::take_chars(line.trim(), 300).to_string());
            }
        }
    }
    log::debug!("event=mcp.stdio.stderr_closed server={} lines={lines} bytes={bytes}", inbox.server());
}

/// Waits (polling) until the child has exited, without reaping it, so its pid still names the
/// process group when we signal leftovers.
fn wait_exited(child: &mut Child, pid: u32, deadline: Instant) -> bool {
    loop {
        if has_exited(child, pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(target_os = "linux")]
fn has_exited(_child: &mut Child, pid: u32) -> bool {
    !matches!(peek(pid), Ok(nix::sys::wait::WaitStatus::StillAlive))
}

#[cfg(not(target_os = "linux"))]
fn has_exited(child: &mut Child, _pid: u32) -> bool {
    !matches!(child.try_wait(), Ok(None))
}

/// Signals our child's process group; the leader is not reaped yet, so the id is still ours.
fn signal_group(pid: u32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), sig);
}

/// SIGKILLs what is left of the group, then reaps the leader.
fn kill_and_reap(child: &mut Child, pid: u32) {
    signal_group(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executable(path: &Path) {
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    #[test]
    fn child_env_is_the_allow_list_plus_the_entrys_own() {
        assert!(ENV_ALLOWLIST.iter().all(|k| !crate::secrets::is_secret_name(k)));
        let spec = StdioSpec {
            command: "/bin/true".into(),
            args: vec![],
            env: [("GITHUB_TOKEN".to_string(), "ghp-configured".to_string())].into(),
            cwd: None,
            python: None,
        };
        let cmd = build_command(&spec);
        let envs: Vec<(String, Option<String>)> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.map(|v| v.to_string_lossy().into_owned())))
            .collect();
        assert!(envs.contains(&("GITHUB_TOKEN".into(), Some("ghp-configured".into()))), "{envs:?}");
        assert!(envs.iter().all(|(k, _)| k == "GITHUB_TOKEN" || ENV_ALLOWLIST.contains(&k.as_str())), "{envs:?}");
    }

    #[test]
    fn python_falls_back_to_python3() {
        let dir = std::env::temp_dir().join(format!("cc-mcp-path-{}", crate::util::rand::hex(4)));
        std::fs::create_dir_all(&dir).unwrap();
        let py3 = dir.join("python3");
        executable(&py3);
        let path = dir.display().to_string();
        assert_eq!(resolve_command("python", None, Some(&path), None), py3);
        assert_eq!(resolve_command("python3", None, Some(&path), None), py3);
        assert_eq!(resolve_command("nodex", None, Some(&path), None), PathBuf::from("nodex"));
        assert_eq!(
            resolve_command("bin/tool", None, Some(&path), Some(Path::new("/proj"))),
            PathBuf::from("/proj/bin/tool")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_bare_python_prefers_the_virtual_environment_when_it_exists() {
        let dir = std::env::temp_dir().join(format!("cc-mcp-venv-{}", crate::util::rand::hex(4)));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::create_dir_all(dir.join(".venv/bin")).unwrap();
        let (py3, venv) = (dir.join("bin/python3"), dir.join(".venv/bin/python"));
        executable(&py3);
        let path = dir.join("bin").display().to_string();
        // Not created yet: the PATH lookup as before.
        assert_eq!(resolve_command("python", Some(&venv), Some(&path), None), py3);
        executable(&venv);
        assert_eq!(resolve_command("python", Some(&venv), Some(&path), None), venv);
        assert_eq!(resolve_command("python3", Some(&venv), Some(&path), None), venv);
        // Only bare python commands: an explicit interpreter or another program is left alone.
        assert_eq!(
            resolve_command("/usr/bin/python3", Some(&venv), Some(&path), None),
            PathBuf::from("/usr/bin/python3")
        );
        assert_eq!(resolve_command("nodex", Some(&venv), Some(&path), None), PathBuf::from("nodex"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
