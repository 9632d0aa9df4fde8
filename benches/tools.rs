//! Benchmark of the built-in `grep` tool over a 10,000-file workspace.
//! Builds the tree in a temp directory, runs several patterns a few times each and
//! prints the median wall time. Run: `cargo bench --bench tools` (release profile). Without
//! `--bench` (`cargo test --bench tools`, a debug build) it is a smoke run: 1,000 files, one run
//! of each pattern.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cashcode::agent::tools::grep::Grep;
use cashcode::store::memory_files::MemoryFiles;
use cashcode::tool::{Tool, TurnCtx};
use cashcode::util::cancel::CancelToken;
use serde_json::{json, Map};

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;
const RUNS: usize = 7;

fn main() {
    let (dirs, runs) = if std::env::args().any(|a| a == "--bench") { (DIRS, RUNS) } else { (10, 1) };
    let tmp = std::env::temp_dir().join(format!("cc-bench-tools-{}", std::process::id()));
    let ws = tmp.join("ws");
    let started = Instant::now();
    let mut bytes = 0usize;
    for d in 0..dirs {
        let dir = ws.join(format!("pkg{d:03}"));
        fs::create_dir_all(&dir).expect("create bench dir");
        for f in 0..FILES_PER_DIR {
            let mut text = String::new();
            for line in 0..40 {
                text.push_str(&format!(
                    "fn function_{d}_{f}_{line}(value: usize) -> usize {{ value * {line} + {f} }} // filler text\n"
                ));
            }
            // A rare needle: one file in a thousand.
            if (d * FILES_PER_DIR + f) % 1000 == 7 {
                text.push_str("let NEEDLE_marker = 42; // findme\n");
            }
            bytes += text.len();
            fs::write(dir.join(format!("file{f:03}.rs")), text).expect("write bench file");
        }
    }
    println!(
        "workspace: {} files, {:.1} MiB, built in {:.2?}",
        dirs * FILES_PER_DIR,
        bytes as f64 / (1 << 20) as f64,
        started.elapsed()
    );
    let ctx = TurnCtx {
        chat_id: "bench".into(),
        workspace: fs::canonicalize(&ws).expect("canonical workspace"),
        protected: Vec::<PathBuf>::new(),
        memory: Arc::new(MemoryFiles::new(&tmp.join("memory"))),
        cancel: CancelToken::new(),
        state: Default::default(),
        confinement: Default::default(),
        checkpoint: None,
    };
    let cases = [
        ("literal, rare", "NEEDLE_marker", ""),
        ("regex with literal prefilter", r"NEEDLE_\w+ = \d+", ""),
        ("regex without literal", r"(?i)needle_[a-z]+ = \d{2}", ""),
        ("regex, no literal, every line", r"\d{5,}[xy]", ""),
        ("no match, file_pattern", "does_not_occur", "*.rs"),
    ];
    for (label, pattern, file_pattern) in cases {
        let mut args = Map::new();
        args.insert("pattern".into(), json!(pattern));
        args.insert("file_pattern".into(), json!(file_pattern));
        let mut times: Vec<Duration> = Vec::new();
        let mut first_line = String::new();
        for _ in 0..runs {
            let t = Instant::now();
            let out = Grep.run(&args, &ctx);
            times.push(t.elapsed());
            first_line = out.for_model.lines().next().unwrap_or("").to_string();
        }
        times.sort();
        println!(
            "grep {label:<30} median {:>9.2?}  (min {:.2?}, max {:.2?}, {runs} runs) -> {first_line}",
            times[runs / 2],
            times[0],
            times[runs - 1]
        );
    }
    let _ = fs::remove_dir_all(&tmp);
}
