//! A home with one chat of [`HISTORY_RECORDS`] records (alternating user and assistant), the
//! large-history fixture of `--bench load` and `--bench server`'s footprint figures.

use std::io::Write;

use super::common::fresh_home;

pub const HISTORY_RECORDS: usize = 100_000;

/// The home and the chat's id.
pub fn big_history_home() -> (std::path::PathBuf, String) {
    let home = fresh_home("bighist");
    let chat = "0f0e0d0c-0b0a-4908-8706-050403020100".to_string();
    let dir = home.join("memory").join(&chat);
    std::fs::create_dir_all(&dir).expect("chat dir");
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("history.jsonl")).expect("history"));
    for i in 0..HISTORY_RECORDS {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let rec = serde_json::json!({"cursor": i + 1, "timestamp": "2026-01-01 12:00", "role": role,
                                     "content": format!("message number {i} with some ordinary words in it")});
        writeln!(f, "{rec}").expect("write record");
    }
    f.flush().expect("flush");
    std::fs::write(dir.join(".cursor"), HISTORY_RECORDS.to_string()).expect("cursor");
    std::fs::write(
        dir.join("metadata.json"),
        serde_json::json!({"title":"big","created_at":"2026-01-01T12:00:00","updated_at":"2026-01-01T12:00:00"})
            .to_string(),
    )
    .expect("metadata");
    (home, chat)
}
