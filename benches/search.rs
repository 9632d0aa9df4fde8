//! `cargo bench --bench search`: the search index (docs/search.md) in process, no server.
//! - build: 100,000 messages in 1,000 chats written through the store, then indexed from their
//!   files at start-up (`Search::open_now`, the rebuild a missing index file causes): messages/s;
//! - the index file's bytes per message, and the process's RSS after the build;
//! - query p50/p95 over 200 queries of one to three words drawn from the corpus' vocabulary;
//! - the cost an append adds: the store's append of one record with the index's observer
//!   installed, against the same with none (medians of 5 runs of 2,000 appends), and the work
//!   the index thread then does per record (reading it back, tokenising, indexing).
//!
//! Without `--bench` (`cargo test --bench search`) it is a smoke run: 2,000 messages, 20 queries.

#![allow(unreachable_pub, dead_code, clippy::unwrap_used)]

#[path = "../tests/common/stats.rs"]
mod stats;

use std::sync::Arc;
use std::time::Instant;

use cashcode::search::{Params, Request, Search};
use cashcode::store::chats::{ChatStore, Record};
use cashcode::util::prng::Prng;

fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// A deterministic word stream: a Zipf-ish vocabulary of 20,000 made-up words and some Chinese.
struct Words(Prng);

impl Words {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn word(&mut self) -> String {
        let r = self.next();
        // Rank ~ 1/u: frequent words are short ranks.
        let u = (r % 1_000_000) as f64 / 1_000_000.0;
        let rank = ((20_000f64).powf(u)) as u64;
        if rank.is_multiple_of(17) {
            let cjk = ['北', '京', '天', '气', '长', '城', '茶', '书', '猫', '海'];
            return (0..2).map(|i| cjk[((rank / 17 + i) % 10) as usize]).collect();
        }
        let syll = ["ka", "lo", "mi", "ter", "zu", "pha", "ne", "ro", "sil", "va", "dun", "ex"];
        let mut w = String::new();
        let mut n = rank;
        loop {
            w.push_str(syll[(n % 12) as usize]);
            n /= 12;
            if n == 0 {
                break;
            }
        }
        w
    }

    fn text(&mut self, words: usize) -> String {
        (0..words).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

fn main() {
    let messages = if smoke() { 2_000 } else { 100_000 };
    let queries = if smoke() { 20 } else { 200 };
    let chats = messages / 100;
    let dir = std::env::temp_dir().join(format!("cc-bench-search-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut words = Words(Prng::new(0x9E37_79B9_7F4A_7C15));
    {
        let store = ChatStore::new(&dir);
        for c in 0..chats {
            let mut recs: Vec<Record> = (0..100)
                .map(|i| {
                    let n = 8 + (words.next() % 40) as usize;
                    Record::new(if i % 2 == 0 { "user" } else { "assistant" }, words.text(n))
                })
                .collect();
            store.append_stamped(&format!("chat{c}"), &mut recs, "2026-01-01 10:00").unwrap();
        }
    }
    let store = Arc::new(ChatStore::new(&dir));
    let search = Search::new(Arc::clone(&store), Params::default());
    let t = Instant::now();
    search.open_now();
    let build = t.elapsed();
    let (bytes, docs) = search.stats();
    let (rss_kib, _) = stats::rss(std::process::id());
    println!(
        "build: {messages} messages in {:.2} s = {:.0} messages/s; index file {:.1} bytes/message; RSS {:.1} MiB; {docs} documents",
        build.as_secs_f64(),
        messages as f64 / build.as_secs_f64(),
        bytes as f64 / messages as f64,
        rss_kib as f64 / 1024.0
    );
    assert_eq!(docs as usize, messages);

    let mut times = Vec::new();
    let mut found = 0;
    for i in 0..queries {
        let q = words.text(1 + i % 3);
        let t = Instant::now();
        let r = search.search(&Request { q, limit: 20, ..Request::default() });
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        found += usize::from(!r.hits.is_empty());
    }
    times.sort_by(f64::total_cmp);
    let p = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "query at {messages} messages: p50 {:.2} ms, p95 {:.2} ms ({found}/{queries} found something)",
        p(0.5),
        p(0.95)
    );

    // Append cost: with the index observing vs a store without.
    let plain = ChatStore::new(&dir);
    let store_ref = Arc::clone(&store);
    let n = if smoke() { 200 } else { 2_000 };
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut indexing = Vec::new();
    for run in 0..5 {
        for (store, out) in [(&*store, &mut with), (&plain, &mut without)] {
            let chat = format!("append{run}{}", out.len());
            let t = Instant::now();
            for _ in 0..n {
                let mut r = [Record::new("user", "a short appended message about kalomi and 北京")];
                store.append(&chat, &mut r).unwrap();
            }
            out.push(t.elapsed().as_secs_f64() * 1000.0 / n as f64);
            let t = Instant::now();
            search.drain();
            if std::ptr::eq(store, &*store_ref) {
                indexing.push(t.elapsed().as_secs_f64() * 1000.0 / n as f64);
            }
        }
    }
    indexing.sort_by(f64::total_cmp);
    with.sort_by(f64::total_cmp);
    without.sort_by(f64::total_cmp);
    println!(
        "append: {:.4} ms with the index observing, {:.4} ms without: {:.4} ms added per record (median of 5 x {n})",
        with[2],
        without[2],
        with[2] - without[2]
    );
    println!("indexing on the search-index thread: {:.4} ms per appended record (median of 5)", indexing[2]);
    let _ = std::fs::remove_dir_all(&dir);
}
