//! What the sandbox adds to one `exec` call (goal <= 2 ms): the `exec` tool runs `true`
//! in a workspace, unconfined and confined (Landlock ruleset built per call, TMPDIR made and
//! removed, `fork` instead of `posix_spawn`, the `pre_exec` system calls), alternating the two
//! in rounds so drift hits both; prints the median of each and the difference. A 32 MiB ballast
//! of touched memory stands in for the server's resident set (its page tables are what `fork`
//! copies; `BENCH_BALLAST_MIB` sets another size, e.g. 8 for an idle server; `BENCH_GIT=1` makes
//! the workspace a git repository, whose control files a confined call checks). Run:
//! `cargo bench --bench exec` (release profile). Without `--bench` it is a smoke run of 5 calls
//! each.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cashcode::agent::tools::exec::Exec;
use cashcode::sandbox::Sandbox;
use cashcode::store::memory_files::MemoryFiles;
use cashcode::tool::{Confinement, Tool, TurnCtx};
use cashcode::util::cancel::CancelToken;
use serde_json::{json, Map};

const CALLS: usize = 200;
const ROUNDS: usize = 5;
/// MiB of touched memory by default: the server's peak RSS after 500 clients (README).
const BALLAST_MIB: usize = 32;

fn main() {
    let (calls, rounds) = if std::env::args().any(|a| a == "--bench") { (CALLS, ROUNDS) } else { (5, 1) };
    let tmp = std::env::temp_dir().join(format!("cc-bench-exec-{}", std::process::id()));
    let ws = tmp.join("ws");
    fs::create_dir_all(&ws).expect("workspace");
    let ws = fs::canonicalize(&ws).expect("canonical workspace");
    // `BENCH_GIT=1`: the workspace is a git repository, whose control files each confined
    // call copies and checks (`sandbox::control_files`).
    if std::env::var_os("BENCH_GIT").is_some() {
        let st = std::process::Command::new("git").args(["init", "-q"]).current_dir(&ws).status();
        assert!(st.is_ok_and(|s| s.success()), "git init");
    }
    let data = tmp.join("data");
    fs::create_dir_all(&data).expect("data");
    let mib = std::env::var("BENCH_BALLAST_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(BALLAST_MIB);
    let ballast: Vec<u8> = (0..mib << 20).map(|i| i as u8).collect();

    let sandbox = Arc::new(Sandbox::with_defaults(&data, &ws));
    assert!(sandbox.active(), "the kernel offers no confinement: nothing to measure");
    let confined = Exec::new(sandbox);
    let unconfined = Exec::default();
    let ctx = TurnCtx {
        chat_id: "bench".into(),
        workspace: ws.clone(),
        protected: Vec::<PathBuf>::new(),
        memory: Arc::new(MemoryFiles::new(&tmp.join("memory"))),
        cancel: CancelToken::new(),
        state: Default::default(),
        confinement: Confinement::Sandboxed,
        checkpoint: None,
    };
    // An approved escalation: the same call outside the sandbox.
    let ctx_off = TurnCtx { confinement: Confinement::Unconfined, ..ctx.clone() };
    let mut args = Map::new();
    args.insert("command".into(), json!("true"));
    let run = |exec: &Exec, ctx: &TurnCtx, into: &mut Vec<Duration>| {
        for _ in 0..calls {
            let t = Instant::now();
            let out = exec.run(&args, ctx);
            into.push(t.elapsed());
            assert_eq!(out.for_model, "$ true\nexit code: 0\n\n(no output)");
        }
    };
    // The bare process start for scale: `sh -c true` by posix_spawn (what std uses without a
    // pre_exec step) and by fork (what it uses with one).
    let bare = |fork: bool, into: &mut Vec<Duration>| {
        for _ in 0..calls {
            let t = Instant::now();
            let mut cmd = std::process::Command::new("sh");
            cmd.args(["-c", "true"]).current_dir(&ws);
            if fork {
                // SAFETY: an empty step; it only makes std fork.
                unsafe {
                    std::os::unix::process::CommandExt::pre_exec(&mut cmd, || Ok(()));
                }
            }
            assert!(cmd.status().unwrap().success());
            into.push(t.elapsed());
        }
    };
    let (mut off, mut on, mut spawn, mut fork) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        run(&unconfined, &ctx_off, &mut off);
        run(&confined, &ctx, &mut on);
        bare(false, &mut spawn);
        bare(true, &mut fork);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (m_off, m_on) = (median(&mut off), median(&mut on));
    println!("ballast {mib} MiB of touched memory");
    println!("exec `true` unconfined  median {m_off:>9.2?}  ({} calls)", off.len());
    println!("exec `true` confined    median {m_on:>9.2?}  ({} calls)", on.len());
    println!("sandbox cost per call   {:>9.2?}", m_on.saturating_sub(m_off));
    let (m_spawn, m_fork) = (median(&mut spawn), median(&mut fork));
    println!(
        "bare sh -c true: posix_spawn {m_spawn:.2?}, fork {m_fork:.2?} (of the cost, {:.2?} is fork)",
        m_fork.saturating_sub(m_spawn)
    );
    std::hint::black_box(&ballast);
    let _ = fs::remove_dir_all(&tmp);
}
