//! `exec` (docs/tools-and-mcp.md §3): runs `sh -c <command>` in the workspace; called on the turn's
//! worker thread, which waits on the child with a deadline while one thread drains each pipe
//! and one reaps the shell. The shell leads its own process group, and a confined one its own
//! session (no controlling terminal), so a timeout or a cancelled turn kills the whole group
//! (and a confined call's reaper everything the call started). Output is captured with a byte cap
//! per stream and shown cut to 4096 characters. Environment variables whose names look like
//! secrets (`crate::secrets::is_secret_name`) are not passed to the command; the server took
//! them out of its own environment at start-up, so this only guards against one set later.
//! Commands run confined by `crate::sandbox` (SECURITY.md "Sandbox"). Whether a call runs
//! confined (`ctx.confinement`) is the turn loop's decision (`agent::approvals::policy`): the
//! `sandbox_permissions` argument only asks for it, and a call decided `Sandboxed` while the
//! sandbox is off is refused here rather than run unconfined.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, select, Receiver};
use serde_json::{json, Map, Value};

use crate::agent::approvals::policy::ExecArgs;
use crate::sandbox::control_files::{escalated_git_env, Snapshot};
use crate::sandbox::{Confined, Sandbox};
use crate::tool::args::parse_args;
use crate::tool::{fmt_secs, Confinement, Tool, ToolOutput, TurnCtx};
use crate::util::sync;
use crate::workspace::Workspace;

/// The contract's command timeout.
pub(crate) const DEFAULT_TIMEOUT: Duration = crate::config::DEFAULT_EXEC_TIMEOUT;
/// Characters of output shown to the model.
pub(crate) const MAX_OUTPUT_CHARS: usize = 4096;
/// Bytes kept per stream (the rest is drained and only counted).
pub(crate) const MAX_CAPTURE_BYTES: usize = 64 << 10;
/// How long pipes may stay open after the shell exited (a background child holding them)
/// before the group is killed.
const PIPE_GRACE: Duration = Duration::from_secs(1);
/// How long to wait for the kernel to deliver SIGKILL and the shell to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(5);

pub struct Exec {
    pub(crate) timeout: Duration,
    /// Known secret values, redacted from stdout and stderr together before the output is cut.
    pub(crate) secrets: crate::secrets::Secrets,
    /// The confinement commands run in (off when the kernel offers none or the owner said so).
    pub(crate) sandbox: Arc<Sandbox>,
}

impl Default for Exec {
    fn default() -> Self {
        Exec {
            timeout: DEFAULT_TIMEOUT,
            secrets: crate::secrets::Secrets::new(),
            sandbox: Arc::new(Sandbox::off("not configured")),
        }
    }
}

impl Exec {
    /// An `exec` tool with the contract's timeout, confined by `sandbox` when it is active
    /// (benches; the server builds it in `builtins_with`).
    pub fn new(sandbox: Arc<Sandbox>) -> Exec {
        Exec { sandbox, ..Exec::default() }
    }

    /// The sandbox to run a call in, from the turn loop's decision: `Ok(None)` runs unconfined
    /// (an approved escalation), an error when the call was decided `Sandboxed` but there is
    /// no sandbox (the decision assumed one; running unconfined would skip the owner).
    fn sandbox_for(&self, confinement: Confinement) -> Result<Option<&Sandbox>, String> {
        match confinement {
            Confinement::Unconfined => Ok(None),
            Confinement::Sandboxed if self.sandbox.active() => Ok(Some(&self.sandbox)),
            Confinement::Sandboxed => {
                Err("the sandbox is not active, so this command needs the owner's approval first".into())
            }
        }
    }
}

/// One drained pipe: the first bytes and the total count.
#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
    total: u64,
    done: bool,
}

enum Outcome {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
    /// Stopped because the data directory's filesystem fell below the reserve: `(free,
    /// reserve)` in bytes.
    DiskLow(u64, u64),
}

/// `n` bytes in MiB, for messages.
fn mib(n: u64) -> u64 {
    n >> 20
}

impl Tool for Exec {
    fn name(&self) -> &str {
        "exec"
    }

    fn description(&self) -> &str {
        "Run a shell command (sh -c) in the working directory and return its exit code and \
         output (stdout then stderr, cut to 4096 characters). Commands are killed after 30 \
         seconds. Commands run in a sandbox: they may read and write the working directory and \
         read the system, with no network. When a command truly needs the network or files \
         outside, set sandbox_permissions to \"require_escalated\" and say why in \
         justification: the owner is asked first and may decline. Ask the user before running \
         anything destructive."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command line."},
                "sandbox_permissions": {
                    "type": "string",
                    "enum": ["use_default", "require_escalated"],
                    "description": "use_default (the sandbox) unless the command needs the network or files outside the working directory."
                },
                "justification": {
                    "type": "string",
                    "description": "With require_escalated: one sentence for the owner on why the command must run outside the sandbox."
                }
            },
            "required": ["command"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        // `sandbox_permissions` and `justification` are checked here but decided on by the turn
        // loop before this runs; only `ctx.confinement` says how the child runs.
        let ExecArgs { command, .. } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let command = command.as_str();
        if command.trim().is_empty() {
            return ToolOutput::error("command must not be empty");
        }
        if command.contains('\0') {
            return ToolOutput::error("command contains a NUL byte");
        }
        let ws = match ctx.open_workspace() {
            Ok(w) => w,
            Err(e) => return ToolOutput::error(e),
        };
        if ctx.cancel.is_cancelled() {
            return ToolOutput::error(format!("Command cancelled: {command}"));
        }
        let sandbox = match self.sandbox_for(ctx.confinement) {
            Ok(s) => s,
            Err(e) => return ToolOutput::error(format!("Command not run: {e}")),
        };
        self.run_command(command, &ws, sandbox, ctx)
    }
}

impl Exec {
    /// Spawns `sh -c command` in the workspace (in `sandbox` when given) and waits for it (deadline,
    /// cancel), returning the contract's result text.
    fn run_command(&self, command: &str, ws: &Workspace, sandbox: Option<&Sandbox>, ctx: &TurnCtx) -> ToolOutput {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(ws.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A confined call gets a session of its own; an approved escalation, which may do
        // anything its user can anyway, keeps `posix_spawn` (a `pre_exec` step makes std
        // `fork` the server: about 1 ms at 32 MiB, benches/README.md) with a group of its own.
        match sandbox {
            Some(_) => own_session(&mut cmd),
            None => drop(cmd.process_group(0)),
        }
        for (name, value) in std::env::vars_os() {
            if crate::secrets::is_secret_var(&name.to_string_lossy(), &value.to_string_lossy()) {
                cmd.env_remove(name);
            }
        }
        // A confined command may not change the project's version-control control files: they
        // are put back after it (src/sandbox/control_files.rs). An escalated one runs git without
        // hooks or fsmonitor.
        let control = match sandbox {
            Some(_) => Some(Snapshot::take(ws.root())),
            None => {
                escalated_git_env(&mut cmd);
                None
            }
        };
        // Rewind: the workspace is scanned now and again when this guard drops, after the
        // command's group is gone (src/checkpoints).
        let _checkpoint = ctx.checkpoint.as_ref().map(|c| c.watch_exec());
        if let Some((free, reserve)) = sandbox.and_then(Sandbox::disk_low) {
            return ToolOutput::error(format!(
                "Failed to start command: the disk holding CashCode's data has {} MiB free, less than the {} MiB kept for saving chats (CASHCODE_SANDBOX_DISK_RESERVE_MB); free some space first",
                mib(free),
                mib(reserve)
            ));
        }
        let confined: Option<Confined> = match sandbox {
            Some(sandbox) => match sandbox.prepare(ws.root(), &ctx.chat_id) {
                Ok(prepared) => Some(prepared.apply(&mut cmd)),
                Err(e) => return ToolOutput::error(format!("Failed to start command: {e}")),
            },
            None => None,
        };
        // Kept whole until the call is over: its TMPDIR and process group go when it drops.
        let reaped = confined.as_ref().is_some_and(|c| c.reaped);
        log::debug!("event=exec.spawn confined={}", sandbox.is_some());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return ToolOutput::error(format!("Failed to start command: {e}")),
        };
        let pgid = child.id() as libc::pid_t;
        let stop = Stop { pgid, reaped };
        let out = Arc::new(Mutex::new(Capture::default()));
        let err = Arc::new(Mutex::new(Capture::default()));
        let (pipe_tx, pipe_rx) = bounded::<()>(2);
        if let Some(s) = child.stdout.take() {
            drain(s, out.clone(), pipe_tx.clone());
        }
        if let Some(s) = child.stderr.take() {
            drain(s, err.clone(), pipe_tx.clone());
        }
        drop(pipe_tx);
        let (status_tx, status_rx) = bounded(1);
        let reaper = thread::Builder::new().name("exec-wait".into()).stack_size(64 << 10).spawn(move || {
            let _ = status_tx.send(child.wait());
        });
        if let Err(e) = reaper {
            stop.now();
            return ToolOutput::error(format!("Failed to start command: {e}"));
        }

        let deadline = after(self.timeout);
        // A confined call's disk check; an approved escalation is the owner's to run.
        let disk_check = match sandbox {
            Some(_) => crossbeam_channel::tick(crate::sandbox::DISK_CHECK_EVERY),
            None => crossbeam_channel::never(),
        };
        let outcome = loop {
            select! {
                recv(status_rx) -> st => match st {
                    Ok(Ok(st)) => break Outcome::Exited(st),
                    _ => {
                        stop.now();
                        return ToolOutput::error(format!("Waiting for command failed: {command}"));
                    }
                },
                recv(ctx.cancel.wait_chan()) -> _ => break Outcome::Cancelled,
                recv(deadline) -> _ => break Outcome::TimedOut,
                recv(disk_check) -> _ => {
                    if let Some((free, reserve)) = sandbox.and_then(Sandbox::disk_low) {
                        break Outcome::DiskLow(free, reserve);
                    }
                }
            }
        };
        if !matches!(outcome, Outcome::Exited(_)) {
            stop.now();
            if status_rx.recv_timeout(REAP_WAIT).is_err() {
                stop.group();
            }
        }
        // Collect the pipes; a background child still holding them gets the group killed (a
        // reaper's call has none left: it exits after the last of them).
        if !wait_pipes(&pipe_rx, PIPE_GRACE) {
            stop.group();
            wait_pipes(&pipe_rx, PIPE_GRACE);
        }
        let mut text = combined(&out, &err, &self.secrets);
        let changed = control.map(|c| c.restore()).unwrap_or_default();
        if !changed.is_empty() {
            log::warn!("event=exec.control_files_restored chat_id={} count={}", ctx.chat_id, changed.len());
            self.sandbox.control_log().record(&ctx.chat_id, &changed);
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&format!(
                "[sandbox] Version-control control files are read-only to sandboxed commands; changes put back or \
                 reported to the owner: {}",
                changed.join(", ")
            ));
        }
        match outcome {
            Outcome::Exited(st) => {
                let code = st.code().unwrap_or_else(|| -st.signal().unwrap_or(0));
                let body = if text.is_empty() { "(no output)".to_string() } else { text };
                let out = ToolOutput::ok(format!("$ {command}\nexit code: {code}\n\n{body}"));
                if code == 0 {
                    out
                } else {
                    out.ended("failed")
                }
            }
            Outcome::TimedOut => {
                let mut msg = format!("Command timed out ({}): {command}", fmt_secs(self.timeout));
                if !text.is_empty() {
                    msg.push_str(&format!("\n\nPartial output:\n{text}"));
                }
                ToolOutput::error(msg).ended("timeout")
            }
            Outcome::Cancelled => ToolOutput::error(format!("Command cancelled: {command}")),
            Outcome::DiskLow(free, reserve) => {
                log::warn!("event=exec.stopped reason=disk_low free_mib={} reserve_mib={}", mib(free), mib(reserve));
                let mut msg = format!(
                    "Command stopped: the disk holding CashCode's data fell to {} MiB free, below the {} MiB kept for saving chats (CASHCODE_SANDBOX_DISK_RESERVE_MB): {command}",
                    mib(free),
                    mib(reserve)
                );
                if !text.is_empty() {
                    msg.push_str(&format!("\n\nPartial output:\n{text}"));
                }
                ToolOutput::error(msg)
            }
        }
    }
}

/// Makes the child the leader of a new session (and of its process group, which a timeout
/// or cancel kills): no controlling terminal, so nothing it runs can read from or type into
/// the terminal the server was started in (`TIOCSTI`), nor get its `SIGINT`/`SIGHUP`. Installed
/// before the sandbox's step, which runs after it.
fn own_session(cmd: &mut Command) {
    // SAFETY: setsid is one system call on no memory of ours: async-signal-safe, allocates
    // nothing. It cannot fail in a freshly forked child (not a group leader yet).
    unsafe {
        cmd.pre_exec(|| nix::unistd::setsid().map(drop).map_err(std::io::Error::from));
    }
}

/// How a call's processes are ended.
struct Stop {
    /// The spawned process: the shell (and its group), or a confined call's reaper.
    pgid: libc::pid_t,
    /// `pgid` is the call's reaper (`sandbox`), which kills all the call started,
    /// also what left the group.
    reaped: bool,
}

impl Stop {
    fn now(&self) {
        if self.reaped && self.pgid > 0 {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pgid), nix::sys::signal::Signal::SIGTERM);
        } else {
            self.group();
        }
    }

    /// The group the shell leads (an unconfined call; a reaper that did not end in time).
    fn group(&self) {
        if self.pgid > 0 {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pgid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Drains a pipe on its own thread, keeping the first [`MAX_CAPTURE_BYTES`].
fn drain(mut r: impl Read + Send + 'static, cap: Arc<Mutex<Capture>>, done: crossbeam_channel::Sender<()>) {
    let spawned = thread::Builder::new().name("exec-pipe".into()).stack_size(64 << 10).spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut c = sync::lock(&cap);
                    let room = MAX_CAPTURE_BYTES.saturating_sub(c.bytes.len());
                    c.bytes.extend_from_slice(&buf[..n.min(room)]);
                    c.total += n as u64;
                }
            }
        }
        sync::lock(&cap).done = true;
        let _ = done.send(());
    });
    // Without a reader the pipe may fill and block the child until the timeout kills it.
    if let Err(e) = spawned {
        log::warn!("exec: could not start a pipe reader: {e}");
    }
}

/// Waits until both pipe readers finished (channel closed) or `grace` passed.
fn wait_pipes(rx: &Receiver<()>, grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    loop {
        match rx.recv_deadline(deadline) {
            Ok(()) => continue,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return true,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => return false,
        }
    }
}

/// stdout then stderr, decoded lossily, redacted as one text (a secret split between the two
/// streams is found whole; the turn loop redacts every tool result again), then cut to
/// [`MAX_OUTPUT_CHARS`] with the total noted: redacting first, so the cut cannot leave the
/// start of a secret behind.
fn combined(out: &Mutex<Capture>, err: &Mutex<Capture>, secrets: &crate::secrets::Secrets) -> String {
    let (o, e) = (sync::lock(out), sync::lock(err));
    let mut text = String::from_utf8_lossy(&o.bytes).into_owned();
    let stderr = String::from_utf8_lossy(&e.bytes);
    if !text.is_empty() && !stderr.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&stderr);
    let text = secrets.redact(&text).into_owned();
    let uncaptured = (o.total - o.bytes.len() as u64) + (e.total - e.bytes.len() as u64);
    let chars = text.chars().count() as u64 + uncaptured;
    let text = text.trim_end().to_string();
    if chars as usize > MAX_OUTPUT_CHARS {
        let cut = crate::util::text::take_chars(&text, MAX_OUTPUT_CHARS);
        format!("{cut}\n\n[output truncated, total {chars} chars]")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::Sandbox;
    use std::path::Path;

    fn run(sb: &Sandbox, exec: &Exec, command: &str) -> ToolOutput {
        let mut a = Map::new();
        a.insert("command".into(), json!(command));
        // What the turn loop decides for a call that asks for nothing (`approval::decide`).
        let confinement = if exec.sandbox.active() { Confinement::Sandboxed } else { Confinement::Unconfined };
        exec.run(&a, &TurnCtx { confinement, ..sb.ctx.clone() })
    }

    fn alive(pid: &str) -> bool {
        // A zombie (not yet reaped by init) counts as dead.
        match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
            Ok(s) => !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
            Err(_) => false,
        }
    }

    #[test]
    fn runs_in_workspace_with_exit_code() {
        let sb = Sandbox::new();
        sb.write("here.txt", "");
        let out = run(&sb, &Exec::default(), "ls here.txt; echo err >&2; exit 3");
        // A non-zero exit is the model's to read, and marked `failed` for the tool block.
        let want = ToolOutput::ok("$ ls here.txt; echo err >&2; exit 3\nexit code: 3\n\nhere.txt\nerr").ended("failed");
        assert_eq!(out, want);
        assert_eq!(out.outcome_name(), "failed");
        let out = run(&sb, &Exec::default(), "true");
        assert_eq!(out.for_model, "$ true\nexit code: 0\n\n(no output)");
        assert_eq!(out.outcome_name(), "ok");
        let out = run(&sb, &Exec::default(), "kill -9 $$");
        assert_eq!(out.for_model, "$ kill -9 $$\nexit code: -9\n\n(no output)");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let sb = Sandbox::new();
        let exec = Exec { timeout: Duration::from_millis(300), ..Exec::default() };
        let start = Instant::now();
        let out = run(&sb, &exec, "sleep 30 & echo $! > bg.pid; echo started; wait");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(out.failed);
        assert_eq!(
            out.for_model,
            "Error: Command timed out (0.3s): sleep 30 & echo $! > bg.pid; echo started; wait\n\nPartial output:\nstarted"
        );
        let pid = std::fs::read_to_string(sb.ws.join("bg.pid")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        while alive(&pid) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(&pid), "background child survived the timeout");
        assert_eq!(fmt_secs(DEFAULT_TIMEOUT), "30s");
    }

    #[test]
    fn oversize_output_is_cut_with_total() {
        let sb = Sandbox::new();
        let out = run(&sb, &Exec::default(), "yes x | head -c 100000");
        let expect_body = "x\n".repeat(2048);
        assert_eq!(
            out.for_model,
            format!(
                "$ yes x | head -c 100000\nexit code: 0\n\n{}\n\n[output truncated, total 100000 chars]",
                &expect_body[..4096]
            )
        );
    }

    #[test]
    fn cancel_kills_promptly() {
        let sb = Sandbox::new();
        let cancel = sb.ctx.cancel.clone();
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            cancel.cancel();
        });
        let start = Instant::now();
        let out = run(&sb, &Exec::default(), "sleep 20");
        t.join().unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(out.for_model, "Error: Command cancelled: sleep 20");
        assert!(out.failed);
    }

    #[test]
    fn detached_pipe_holder_does_not_stall() {
        let sb = Sandbox::new();
        let start = Instant::now();
        let out = run(&sb, &Exec::default(), "sleep 20 & echo hi");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(out.for_model, "$ sleep 20 & echo hi\nexit code: 0\n\nhi");
    }

    /// With the sandbox active, a call decided `Sandboxed` runs in it: the workspace and the
    /// call's TMPDIR are writable (the TMPDIR is gone afterwards), a file beside the workspace
    /// is neither readable nor writable, and sockets are refused.
    #[test]
    fn a_sandboxed_call_runs_in_the_sandbox_when_active() {
        let sb = Sandbox::new();
        let data = sb.tmp.join("data");
        let sandbox = Arc::new(crate::sandbox::Sandbox::with_defaults(&data, &sb.ws));
        assert!(sandbox.active(), "this kernel offers Landlock and seccomp: {:?}", sandbox.status());
        let exec = Exec { sandbox, ..Exec::default() };
        assert!(matches!(exec.sandbox_for(Confinement::Sandboxed), Ok(Some(_))));
        assert!(matches!(exec.sandbox_for(Confinement::Unconfined), Ok(None)));
        // Decided `Sandboxed` without a sandbox: refused, never run unconfined.
        assert!(Exec::default().sandbox_for(Confinement::Sandboxed).is_err());
        let secret = sb.outside.join("secret.txt");
        let out = run(
            &sb,
            &exec,
            &format!(
                "echo in > here.txt && cat here.txt; echo t > \"$TMPDIR/t\" && echo \"$TMPDIR\"; cat {s}; echo x >> {s}; \
                 python3 -c 'import socket; socket.socket()'",
                s = secret.display()
            ),
        );
        let text = &out.for_model;
        assert!(text.contains("\nin\n") && text.contains("Permission denied"), "{text}");
        assert!(!text.contains("TOPSECRET") && text.contains("PermissionError"), "{text}");
        let tmp = text.lines().find(|l| l.contains("/sandbox/tmp/")).expect("TMPDIR line");
        assert!(!Path::new(tmp).exists(), "{tmp} left behind");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "TOPSECRET\n");
        // Unconfined, the same read works: the refusal above was the sandbox's.
        let out = run(&sb, &Exec::default(), &format!("cat {}", secret.display()));
        assert!(out.for_model.contains("TOPSECRET"), "{}", out.for_model);
    }

    /// Every spelling of a bad or odd `command` keeps the wording the model always got;
    /// unknown keys (a timeout, say) are ignored.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        for (args, text) in [
            (json!({}), "Error: missing required argument 'command'"),
            (json!({"command": null}), "Error: missing required argument 'command'"),
            (json!({"command": 5}), "Error: argument 'command' must be a string"),
            (json!({"command": ["ls"]}), "Error: argument 'command' must be a string"),
            (json!({"command": "  "}), "Error: command must not be empty"),
            (json!({"command": "true", "timeout": 1}), "$ true\nexit code: 0\n\n(no output)"),
            (json!({"command": "true", "approved": true}), "$ true\nexit code: 0\n\n(no output)"),
            (json!({"command": "true", "sandbox_permissions": "use_default"}), "$ true\nexit code: 0\n\n(no output)"),
            (
                json!({"command": "true", "sandbox_permissions": "require_escalated", "justification": "net"}),
                "$ true\nexit code: 0\n\n(no output)",
            ),
            (
                json!({"command": "true", "sandbox_permissions": "root"}),
                "Error: argument 'sandbox_permissions' must be one of `use_default`, `require_escalated`",
            ),
            (json!({"command": "true", "justification": 5}), "Error: argument 'justification' must be a string"),
        ] {
            // Decided unconfined (no sandbox here): the arguments alone decide nothing.
            let ctx = TurnCtx { confinement: Confinement::Unconfined, ..sb.ctx.clone() };
            let args = args.as_object().cloned().unwrap_or_default();
            assert_eq!(Exec::default().run(&args, &ctx).for_model, text, "{args:?}");
        }
    }

    /// stdout and stderr are redacted together and before the cut: a key split between the
    /// streams (with a space and the join's newline between its halves) goes whole, and a key
    /// straddling the 4096-character cut leaves no prefix behind.
    #[test]
    fn output_is_redacted_over_both_streams_before_it_is_cut() {
        let sb = Sandbox::new();
        let key = "sk-live-0123456789abcdef";
        let exec = Exec::default();
        exec.secrets.set("llm", [key.to_string()]);
        let out = run(&sb, &exec, "printf 'a sk-live-0123 '; printf '456789abcdef b' >&2");
        assert_eq!(
            out.for_model,
            "$ printf 'a sk-live-0123 '; printf '456789abcdef b' >&2\nexit code: 0\n\na [REDACTED] b"
        );
        let out = run(&sb, &exec, "printf '%4090s' '' | tr ' ' x; printf '\\n%s\\n' 'sk-live-0123456789abcdef' >&2");
        let body = out.for_model.split_once("\n\n").map(|(_, b)| b).unwrap_or_default();
        assert!(body.starts_with(&"x".repeat(4090)), "{body:?}");
        assert!(!body.contains("sk-l") && body.contains("[RED"), "{body:?}");
    }
}
