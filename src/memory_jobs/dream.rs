//! Dream (agent-and-memory.md §10), on the `dream` timer thread: every `DREAM_INTERVAL`, the
//! unprocessed history of all chats goes through two model calls (analysis, then the full new
//! MEMORY.md). Better than the original: each chat's cursor advances only over the records that
//! were actually sent; a failed, empty or destructive result changes nothing; an accepted
//! rewrite keeps the previous MEMORY.md as a numbered snapshot; each run is bounded in records,
//! characters and model calls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{select, tick, Receiver};
use serde_json::json;

use crate::agent::prompt::SUMMARY_MARKER;
use crate::llm::runtime::LlmRuntime;
use crate::store::chats::{ChatStore, Record};
use crate::store::memory_files::MemoryFiles;

/// Records per run.
pub const BATCH: usize = 50;
/// Characters of transcript per run (the token bound).
pub const MAX_CHARS: usize = 24_000;
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

const PHASE1: &str = "You are a memory analyst. Read the newest conversation history together with the current \
long-term memory and write a concise report listing: (1) facts to add (identity, preferences, ongoing projects), \
(2) existing entries to update, (3) stale entries to delete. Keep only information with long-term value; ignore \
small talk and one-off requests.";
const PHASE2: &str =
    "You are the editor of MEMORY.md. Apply the analysis report to the current file: keep entries that \
are still valid, add, update and delete entries as the report says, and write clean Markdown grouped by category \
(user information, projects, preferences, ...). Output only the file content, without any preamble. Output nothing \
if nothing is worth recording.";

/// Why a run did nothing, or what it did.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    NothingNew,
    NoModel,
    Failed(String),
    Rejected(&'static str),
    Written { records: usize, chats: usize },
}

pub struct Dream {
    pub chats: Arc<ChatStore>,
    pub memory: Arc<MemoryFiles>,
    pub llm: Arc<LlmRuntime>,
}

/// The timer loop: one run per `interval` until `shutdown` disconnects.
pub fn run_loop(dream: &Dream, interval: Duration, shutdown: &Receiver<()>) {
    let ticker = tick(interval);
    loop {
        select! {
            recv(ticker) -> _ => {
                let outcome = dream.run();
                match &outcome {
                    Outcome::Written { records, chats } => log::info!("event=dream.written records={records} chats={chats}"),
                    Outcome::NoModel => log::info!("event=dream.skipped reason=\"no model has been used since start-up; a chat turn sets it\""),
                    Outcome::NothingNew => log::debug!("event=dream.skipped reason=\"no new history\""),
                    Outcome::Failed(e) => log::warn!("event=dream.failed error=\"{e}\""),
                    Outcome::Rejected(why) => log::warn!("event=dream.rejected reason=\"{why}\""),
                }
            }
            recv(shutdown) -> _ => break,
        }
    }
}

impl Dream {
    /// One run.
    pub fn run(&self) -> Outcome {
        let cursors = self.memory.dream_cursors();
        let mut pending: Vec<(String, Record)> = Vec::new();
        let chats = match self.chats.list() {
            Ok(c) => c,
            Err(e) => return Outcome::Failed(format!("cannot list chats: {:?}", e.kind())),
        };
        for s in chats {
            let after = cursors.get(&s.chat_id).copied().unwrap_or(0);
            if let Ok(h) = self.chats.read_history(&s.chat_id) {
                pending.extend(h.records.into_iter().filter(|r| r.cursor > after).map(|r| (s.chat_id.clone(), r)));
            }
        }
        if pending.is_empty() {
            return Outcome::NothingNew;
        }
        pending.sort_by(|a, b| a.1.timestamp.cmp(&b.1.timestamp));
        let mut batch: Vec<&(String, Record)> = Vec::new();
        let mut chars = 0;
        for item in pending.iter() {
            let len = item.1.content.chars().count().min(4000) + 40;
            if batch.len() == BATCH || (!batch.is_empty() && chars + len > MAX_CHARS) {
                break;
            }
            chars += len;
            batch.push(item);
        }
        let Some((client, model)) = self.llm.acquire_last() else { return Outcome::NoModel };

        let records: Vec<&Record> = batch.iter().map(|(_, r)| r).collect();
        let mut text = super::transcript(&records, SUMMARY_MARKER);
        if text.chars().count() > MAX_CHARS {
            text = crate::util::text::take_chars(&text, MAX_CHARS).to_string();
        }
        let old = self.memory.memory().unwrap_or_default();
        let shown = if old.trim().is_empty() { "(no memory yet)".to_string() } else { old.clone() };
        let analysis = match client.complete(
            &model,
            vec![
                json!({"role": "system", "content": PHASE1}),
                json!({"role": "user", "content": format!("## Latest conversation history\n{text}\n\n## Current long-term memory\n{shown}")}),
            ],
            PHASE_TIMEOUT,
        ) {
            Ok(a) if !a.trim().is_empty() => a,
            Ok(_) => return Outcome::Failed("empty analysis".into()),
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        let new_memory = match client.complete(
            &model,
            vec![
                json!({"role": "system", "content": PHASE2}),
                json!({"role": "user", "content": format!("## Analysis report\n{analysis}\n\n## Current MEMORY.md\n{shown}")}),
            ],
            PHASE_TIMEOUT,
        ) {
            Ok(m) => m,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        let new_memory = strip_fence(new_memory.trim());
        if new_memory.is_empty() {
            if old.trim().is_empty() {
                // Nothing worth recording yet: the records were processed all the same.
                return match self.advance(cursors, &pending, batch.len()) {
                    Ok(()) => Outcome::Written { records: batch.len(), chats: chats_in(&batch) },
                    Err(e) => Outcome::Failed(e),
                };
            }
            return Outcome::Rejected("the model returned an empty MEMORY.md");
        }
        if let Some(why) = destructive(&old, new_memory, &analysis) {
            return Outcome::Rejected(why);
        }
        match self.memory.replace_memory(&old, new_memory) {
            Ok(true) => {}
            Ok(false) => return Outcome::Failed("MEMORY.md changed during the run; retrying next time".into()),
            Err(e) => return Outcome::Failed(format!("cannot write MEMORY.md: {:?}", e.kind())),
        }
        match self.advance(cursors, &pending, batch.len()) {
            Ok(()) => Outcome::Written { records: batch.len(), chats: chats_in(&batch) },
            Err(e) => Outcome::Failed(e),
        }
    }

    /// Advances each chat's cursor over the longest run of its pending records (in cursor
    /// order) that all went into this batch, so nothing left out is ever skipped.
    fn advance(
        &self,
        mut cursors: BTreeMap<String, u64>,
        pending: &[(String, Record)],
        batch_len: usize,
    ) -> Result<(), String> {
        let included = &pending[..batch_len];
        let mut per_chat: BTreeMap<&str, Vec<(u64, bool)>> = BTreeMap::new();
        for (i, (chat, r)) in pending.iter().enumerate() {
            per_chat.entry(chat.as_str()).or_default().push((r.cursor, i < included.len()));
        }
        for (chat, mut recs) in per_chat {
            recs.sort_unstable();
            let done: Vec<u64> = recs.iter().take_while(|(_, inc)| *inc).map(|(c, _)| *c).collect();
            if let Some(last) = done.last() {
                cursors.insert(chat.to_string(), *last);
            }
        }
        self.memory.write_dream_cursors(&cursors).map_err(|e| format!("cannot write .dream_cursor: {:?}", e.kind()))
    }
}

fn chats_in(batch: &[&(String, Record)]) -> usize {
    let mut ids: Vec<&str> = batch.iter().map(|(c, _)| c.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.len()
}

/// Models sometimes wrap the file in a Markdown fence.
fn strip_fence(s: &str) -> &str {
    let Some(rest) = s.strip_prefix("```") else { return s };
    let rest = rest.split_once('\n').map(|(_, r)| r).unwrap_or("");
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

/// A rewrite that loses most of the file is refused unless the analysis asked for removals.
pub fn destructive(old: &str, new: &str, analysis: &str) -> Option<&'static str> {
    let old_lines: Vec<&str> = old.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if old_lines.len() < 3 {
        return None;
    }
    let kept = old_lines.iter().filter(|l| new.contains(&l[..l.len().min(40)])).count();
    let shrinks = new.len() * 10 < old.len() * 4;
    let drops = kept * 2 < old_lines.len();
    let a = analysis.to_lowercase();
    let asked = ["delete", "remove", "stale", "outdated", "obsolete", "drop"].iter().any(|w| a.contains(w));
    if (shrinks || drops) && !asked {
        Some("the rewrite would drop most of MEMORY.md without the analysis asking for removals")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destructive_rewrites_are_caught() {
        let old = "- name: Ana\n- likes tea\n- works on Rust\n- lives in Paris\n";
        assert!(destructive(old, "- name: Ana", "Add nothing.").is_some());
        assert!(destructive(old, "- name: Ana", "Delete the stale entries.").is_none());
        assert!(destructive(
            old,
            "# User\n- name: Ana\n- likes tea\n- works on Rust\n- lives in Paris\n- new",
            "Add x"
        )
        .is_none());
        assert!(destructive("a\nb", "", "").is_none());
    }

    #[test]
    fn fences_are_stripped() {
        assert_eq!(strip_fence("```markdown\n# M\n- a\n```"), "# M\n- a");
        assert_eq!(strip_fence("# M"), "# M");
    }
}
