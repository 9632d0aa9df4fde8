//! Benchmark of the usage ledger's reports: a server whose ledger holds 100,000 records (30
//! chats, 3 models, 5 jobs, 30 days, written as the server writes them) answers
//! `GET /api/usage` grouped by day, chat, model and job, and a `GET /api/usage/records` page;
//! medians of 21 requests each, over HTTP on loopback (so the figure includes the request's
//! own round trip). Also prints the ledger's bytes per row. Run: `cargo bench --bench usage`.

#![allow(unreachable_pub, clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{fresh_home, TestServer};
use serde_json::json;

const ROWS: usize = 100_000;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runs = if std::env::args().any(|a| a == "--bench") { 21 } else { 3 };
    let home = fresh_home("usage-bench");
    let dir = home.join("data").join("usage");
    std::fs::create_dir_all(&dir).unwrap();
    let start_ms: u64 = 1_796_000_000_000 - 30 * 86_400_000;
    let mut text = String::new();
    let jobs = ["turn", "turn", "turn", "consolidate", "dream", "skill_evolution"];
    for i in 0..ROWS {
        let ts = start_ms + (i as u64) * (30 * 86_400_000 / ROWS as u64);
        let row = json!({"ts": ts, "chat_id": format!("0f3a9c1e-77aa-4b1e-9c1e-{:012}", i % 30),
            "job": jobs[i % jobs.len()], "provider": "openai_compatible", "model": format!("model-{}", i % 3),
            "input_tokens": 12_000 + i % 5000, "cached_input_tokens": 8_000, "cache_write_tokens": 0,
            "output_tokens": 300 + i % 700, "reasoning_tokens": i % 100, "duration_ms": 1800 + i % 900,
            "outcome": "ok", "source": "reported"});
        text.push_str(&row.to_string());
        text.push('\n');
    }
    std::fs::write(dir.join("2026-11.jsonl"), &text).unwrap();
    println!("ledger bytes per row: {:.0}", text.len() as f64 / ROWS as f64);
    let server = TestServer::builder().home(&home).start();
    let prices = json!({"models": [{"provider": "openai_compatible", "model": "model-1", "input": 0.27,
        "cached_input": 0.07, "output": 1.1, "currency": "USD"}]});
    assert_eq!(server.put("/api/settings/prices", &prices).status, 200);
    for group in ["day", "chat", "model", "job"] {
        let mut times = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let r = server.get(&format!("/api/usage?group_by={group}"));
            times.push(t.elapsed());
            assert_eq!(r.status, 200);
            assert_eq!(r.json()["total"]["requests"], ROWS);
        }
        println!(
            "GET /api/usage?group_by={group} over {ROWS} records: median {:.2} ms",
            median(times).as_secs_f64() * 1e3
        );
    }
    let mut times = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let r = server.get("/api/usage/records?limit=1000&cursor=50000");
        times.push(t.elapsed());
        assert_eq!(r.json()["records"].as_array().unwrap().len(), 1000);
    }
    println!("GET /api/usage/records?limit=1000: median {:.2} ms", median(times).as_secs_f64() * 1e3);
}
