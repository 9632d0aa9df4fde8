//! Benchmark of the rewind checkpoints: on a 10,000-file workspace, the cost of the
//! checkpoint around one `write_file` and around one `exec` (the first `exec` after start fills
//! the baseline with a full scan; later ones drain the inotify queue), the time to rewind 100
//! changed files, and the store's size after a 100-turn chat. In-process, the store called as the tools call it. Run:
//! `cargo bench --bench checkpoints` (release); without `--bench` a 1,000-file smoke run.

// Test code: an `unwrap` that fails fails the bench.
#![allow(unreachable_pub, clippy::unwrap_used)]

use std::fs;
use std::time::{Duration, Instant};

use cashcode::checkpoints::rewind::Ask;
use cashcode::checkpoints::{CheckpointConfig, Checkpoints};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (dirs, runs) = if full { (100, 50) } else { (10, 5) };
    let tmp = std::env::temp_dir().join(format!("cc-bench-cp-{}", std::process::id()));
    let ws = tmp.join("ws");
    for d in 0..dirs {
        let dir = ws.join(format!("pkg{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            fs::write(dir.join(format!("file{f:03}.rs")), format!("// {d} {f}\n").repeat(60)).unwrap();
        }
    }
    let ws = fs::canonicalize(&ws).unwrap();
    let cp = Checkpoints::open(CheckpointConfig {
        root: tmp.join("data/checkpoints"),
        workspace: ws.clone(),
        skip: Vec::new(),
        max_bytes: 1 << 30,
        pause_after: None,
    })
    .unwrap();
    println!("workspace: {} files", dirs * 100);

    // Per write_file: the two hooks around a write of a 2 KiB file.
    let turn = cp.begin_turn("bench", 0);
    let mut w = Vec::new();
    for i in 0..runs {
        let path = ws.join(format!("pkg000/file{:03}.rs", i % 100));
        let t = Instant::now();
        let touch = turn.before_write(&path);
        fs::write(&path, format!("// changed {i}\n").repeat(100)).unwrap();
        drop(touch);
        w.push(t.elapsed());
    }
    println!("checkpoint per write_file: median {:.3} ms", median(w).as_secs_f64() * 1e3);

    // One full metadata scan (the first exec's, and the fallback when events were lost).
    let mut sc = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let (found, _) = cashcode::checkpoints::state::scan(&ws, &[]);
        sc.push(t.elapsed());
        assert!(found.len() >= dirs * 100);
    }
    println!("one metadata scan of the workspace: median {:.3} ms", median(sc).as_secs_f64() * 1e3);

    // Per exec: the first fills the baseline (full scan); later ones look through inotify.
    // Meanwhile another chat's write_file runs in a loop: its longest checkpoint shows how long
    // the baseline held the store's lock at once.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (cp, ws, stop) = (std::sync::Arc::clone(&cp), ws.clone(), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            let turn = cp.begin_turn("other", 0);
            let (mut longest, mut n) = (Duration::ZERO, 0u32);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let path = ws.join(format!("pkg002/file{:03}.rs", n % 100));
                let t = Instant::now();
                let touch = turn.before_write(&path);
                fs::write(&path, format!("// other {n}\n")).unwrap();
                drop(touch);
                longest = longest.max(t.elapsed());
                n += 1;
            }
            turn.finish(Some(1));
            (longest, n)
        })
    };
    let t = Instant::now();
    drop(turn.watch_exec());
    let first = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (longest, n) = other.join().unwrap();
    println!("first exec since start (baseline copy of every file): {:.1} ms", first.as_secs_f64() * 1e3);
    println!(
        "another chat's write_file meanwhile: {n} done, the longest {:.1} ms (the lock is not held across the baseline)",
        longest.as_secs_f64() * 1e3
    );
    let mut e = Vec::new();
    for i in 0..runs {
        let t = Instant::now();
        let watch = turn.watch_exec();
        fs::write(ws.join(format!("pkg001/file{:03}.rs", i % 100)), format!("// exec {i}\n")).unwrap();
        drop(watch);
        e.push(t.elapsed());
    }
    println!("checkpoint per exec (1 file changed): median {:.3} ms", median(e).as_secs_f64() * 1e3);
    turn.finish(Some(1));

    // Rewind of 100 changed files (one turn that changed them through exec).
    let turn = cp.begin_turn("rewind", 10);
    let watch = turn.watch_exec();
    for f in 0..100 {
        fs::write(ws.join(format!("pkg002/file{f:03}.rs")), "rewritten\n").unwrap();
    }
    drop(watch);
    turn.finish(Some(11));
    let t = Instant::now();
    let preview = cp.rewind("rewind", &Ask { from: 11, dry_run: true, ..Default::default() });
    let dry = t.elapsed();
    let t = Instant::now();
    let report = cp.rewind("rewind", &Ask { from: 11, ..Default::default() });
    println!(
        "rewind of {} files: preview (diffs) {:.1} ms, applied {:.1} ms",
        report.files.len(),
        dry.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(preview.files.len(), 100);

    // A 100-turn chat: each turn writes one file and runs one command that changes another.
    let base = cp.stored_bytes();
    for i in 0..100u64 {
        let turn = cp.begin_turn("long", 100 + 2 * i);
        let path = ws.join(format!("pkg003/file{:03}.rs", i % 100));
        let touch = turn.before_write(&path);
        fs::write(&path, format!("// turn {i}\n").repeat(80)).unwrap();
        drop(touch);
        let watch = turn.watch_exec();
        fs::write(ws.join(format!("pkg004/file{:03}.rs", i % 100)), format!("// turn {i} exec\n").repeat(40)).unwrap();
        drop(watch);
        turn.finish(Some(101 + 2 * i));
    }
    println!(
        "store after a 100-turn chat: {:.2} MiB over the baseline ({:.2} MiB in all, workspace {:.2} MiB)",
        (cp.stored_bytes() - base) as f64 / (1 << 20) as f64,
        cp.stored_bytes() as f64 / (1 << 20) as f64,
        (dirs * 100 * 720) as f64 / (1 << 20) as f64
    );
    let _ = fs::remove_dir_all(&tmp);
}
