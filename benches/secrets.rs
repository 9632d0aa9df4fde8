//! Benchmark of secret redaction (`Secrets::redact`), which runs on every log line, tool result,
//! history record and model request: a 1 MiB tool output holding a secret every 1,000 lines,
//! with 10 secrets of one length and with 10 secrets of 10 lengths, and a 110-byte log line;
//! medians of 9 runs. Run: `cargo bench --bench secrets` (release profile). Without `--bench`
//! (`cargo test --bench secrets`, a debug build) it is a smoke run: one run of each.

// Test code: an `unwrap` that fails fails the bench.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use cashcode::secrets::Secrets;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runs = if std::env::args().any(|a| a == "--bench") { 9 } else { 1 };
    let same: Vec<String> = (0..10).map(|i| format!("sk-secret-value-{i:02}-0123456789abcdef")).collect();
    let varied: Vec<String> = (0..10).map(|i| format!("sk-{}-{i}", "x9Qz".repeat(3 + i))).collect();
    let line =
        "2026-12-02T14:00:00.123Z INFO event=turn.done chat=0f3a9c1e-77aa-4b1e-9c1e-0123456789ab tokens=1234 ms=567";
    for (name, keys) in [("10 secrets of one length", &same), ("10 secrets of 10 lengths", &varied)] {
        let mut text = String::with_capacity(1 << 20);
        let (mut i, mut planted) = (0, 0);
        while text.len() < 1 << 20 {
            text.push_str("some ordinary tool output line with numbers 12345 and words\n");
            if i % 1000 == 0 {
                text.push_str(&keys[i / 1000 % 10]);
                planted += 1;
            }
            i += 1;
        }
        let s = Secrets::new();
        s.set("config", keys.clone());
        let found = s.redact(&text).matches("[REDACTED]").count();
        assert_eq!(found, planted, "every planted secret is redacted");
        let (mut big, mut small) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let t = Instant::now();
            black_box(s.redact(black_box(&text)));
            big.push(t.elapsed());
            let t = Instant::now();
            for _ in 0..10_000 {
                black_box(s.redact(black_box(line)));
            }
            small.push(t.elapsed() / 10_000);
        }
        println!("{name}: 1 MiB tool output {:.2?}, 110-byte log line {:.2?}", median(big), median(small));
    }
}
