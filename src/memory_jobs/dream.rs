//! Dream (docs/agent-and-memory.md §10), on the `dream` timer thread: every `DREAM_INTERVAL`, the
//! unprocessed history of all chats goes through two model calls (analysis, then the full new
//! MEMORY.md). Better than the original: each chat's cursor advances only over the records that
//! were actually sent; a failed, empty or destructive result changes nothing; an accepted
//! rewrite keeps the previous MEMORY.md as a numbered snapshot; each run is bounded in records,
//! characters and model calls, and reads histories line by line, holding at most about
//! `2 × BATCH` records however long they are (never a whole history).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver, Sender};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::llm::runtime::LlmRuntime;
use crate::store::cache::SUMMARY_MARKER;
use crate::store::chats::{ChatStore, Record};
use crate::store::memory_files::MemoryFiles;
use crate::util::sync;

/// Records per run.
pub(crate) const BATCH: usize = 50;
/// Characters of transcript per run (the token bound).
pub(crate) const MAX_CHARS: usize = 24_000;
pub(crate) const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

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

/// The last finished run, as `GET /api/dream` shows it and `.dream_status.json` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LastRun {
    /// Epoch seconds.
    pub(crate) started_at: f64,
    pub(crate) finished_at: f64,
    /// `written`, `nothing_new`, `no_model`, `failed` or `rejected`.
    pub(crate) outcome: String,
    /// Why it failed or was rejected (redacted, at most 300 characters).
    pub(crate) detail: Option<String>,
    pub(crate) records: usize,
    pub(crate) chats: usize,
    /// `timer` or `manual`.
    pub(crate) trigger: String,
}

impl LastRun {
    fn of(outcome: &Outcome, started_at: f64, trigger: &str) -> LastRun {
        let (name, detail, records, chats) = match outcome {
            Outcome::Written { records, chats } => ("written", None, *records, *chats),
            Outcome::NothingNew => ("nothing_new", None, 0, 0),
            Outcome::NoModel => {
                ("no_model", Some("no model has been used since start-up; a chat turn sets it".to_string()), 0, 0)
            }
            Outcome::Failed(e) => ("failed", Some(e.clone()), 0, 0),
            Outcome::Rejected(why) => ("rejected", Some(why.to_string()), 0, 0),
        };
        let detail = detail.map(|d| crate::util::text::take_chars(&crate::util::redact::redact(&d), 300).to_string());
        LastRun {
            started_at,
            finished_at: crate::util::time::now_epoch(),
            outcome: name.into(),
            detail,
            records,
            chats,
            trigger: trigger.into(),
        }
    }
}

/// What the routes read about Dream.
#[derive(Debug, Clone, Default)]
pub(crate) struct DreamState {
    /// A run is under way on the `dream` thread.
    pub(crate) running: bool,
    /// A manual run was asked for and has not started yet.
    pub(crate) queued: bool,
    pub(crate) last: Option<LastRun>,
    /// Epoch seconds of the next timer run (`None` with the timer off).
    pub(crate) next_run_at: Option<f64>,
}

/// Why `request_run` refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Busy;

/// Shared between the `dream` thread and the HTTP routes.
pub(crate) struct DreamControl {
    state: Mutex<DreamState>,
    kick: Sender<()>,
    kicked: Receiver<()>,
    pub(crate) interval: Option<Duration>,
    status_path: PathBuf,
}

impl DreamControl {
    /// Loads the last run from `<memory>/.dream_status.json` (missing or corrupt: none).
    pub(crate) fn new(memory_root: &std::path::Path, interval: Option<Duration>) -> DreamControl {
        let status_path = memory_root.join(".dream_status.json");
        let last = crate::util::fsx::read_opt(&status_path)
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_str::<LastRun>(&t).ok());
        let (kick, kicked) = crossbeam_channel::bounded(1);
        let state = DreamState { last, ..DreamState::default() };
        DreamControl { state: Mutex::new(state), kick, kicked, interval, status_path }
    }

    fn lock(&self) -> MutexGuard<'_, DreamState> {
        sync::lock(&self.state)
    }

    pub(crate) fn state(&self) -> DreamState {
        self.lock().clone()
    }

    /// Asks the `dream` thread for a run now; `Busy` while one is queued or running.
    pub(crate) fn request_run(&self) -> Result<DreamState, Busy> {
        let mut st = self.lock();
        if st.running || st.queued {
            return Err(Busy);
        }
        self.kick.try_send(()).map_err(|_| Busy)?;
        st.queued = true;
        Ok(st.clone())
    }

    fn begin(&self) -> f64 {
        // A kick that arrived while the timer fired is served by this run.
        while self.kicked.try_recv().is_ok() {}
        let mut st = self.lock();
        st.running = true;
        st.queued = false;
        crate::util::time::now_epoch()
    }

    fn finish(&self, last: LastRun) {
        match serde_json::to_vec(&last) {
            Ok(bytes) => {
                if let Err(e) = crate::util::fsx::write_atomic(&self.status_path, &bytes, false) {
                    log::warn!("event=dream.status_write_failed error={:?}", e.kind());
                }
            }
            Err(e) => log::warn!("event=dream.status_write_failed error=\"{e}\""),
        }
        let mut st = self.lock();
        st.running = false;
        st.last = Some(last);
    }

    fn set_next(&self, at: Option<f64>) {
        self.lock().next_run_at = at;
    }
}

/// The `dream` thread: one run per `control.interval` (if set) and one per "run now", until
/// `shutdown` disconnects.
pub(crate) fn run_loop(dream: &Dream, control: &DreamControl, shutdown: &Receiver<()>) {
    let schedule = |control: &DreamControl| {
        control.interval.map(|every| {
            control.set_next(Some(crate::util::time::now_epoch() + every.as_secs_f64()));
            after(every)
        })
    };
    let mut timer = schedule(control);
    loop {
        let trigger = select! {
            recv(timer.clone().unwrap_or_else(never)) -> _ => {
                timer = schedule(control);
                "timer"
            }
            recv(control.kicked) -> _ => "manual",
            recv(shutdown) -> _ => break,
        };
        let started = control.begin();
        let begun = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dream.run()))
            .unwrap_or_else(|_| Outcome::Failed("the run panicked".into()));
        match &outcome {
            Outcome::Written { records, chats } => log::info!(
                "event=dream.written records={records} chats={chats} trigger={trigger} duration_ms={}",
                begun.elapsed().as_millis()
            ),
            Outcome::NoModel => {
                log::info!("event=dream.skipped reason=\"no model has been used since start-up; a chat turn sets it\"")
            }
            Outcome::NothingNew => log::debug!("event=dream.skipped reason=\"no new history\""),
            Outcome::Failed(e) => log::warn!("event=dream.failed error=\"{e}\""),
            Outcome::Rejected(why) => log::warn!("event=dream.rejected reason=\"{why}\""),
        }
        control.finish(LastRun::of(&outcome, started, trigger));
    }
}

/// History Dream has not distilled yet: records past each chat's `.dream_cursor` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Undistilled {
    pub(crate) records: u64,
    pub(crate) chats: usize,
    /// Characters of their content, counted over at most [`UNDISTILLED_READ_BYTES`] of
    /// history; `chars_capped` says the count stopped there.
    pub(crate) chars: u64,
    pub(crate) chars_capped: bool,
}

/// History bytes `undistilled` reads to count characters (the record count needs only tails).
pub(crate) const UNDISTILLED_READ_BYTES: u64 = 16 * 1024 * 1024;

/// Counts the undistilled history (on the calling thread; reads each pending chat's history
/// until [`UNDISTILLED_READ_BYTES`] are spent).
pub(crate) fn undistilled(chats: &ChatStore, memory: &MemoryFiles) -> Undistilled {
    let cursors = memory.dream_cursors();
    let mut out = Undistilled::default();
    let mut budget = UNDISTILLED_READ_BYTES;
    for s in chats.list().unwrap_or_default() {
        let after = cursors.get(&s.chat_id).copied().unwrap_or(0);
        let last = chats.last_cursor_of(&s.chat_id).unwrap_or(0);
        if last <= after {
            continue;
        }
        out.records += last - after;
        out.chats += 1;
        let size =
            chats.dir(&s.chat_id).and_then(|d| std::fs::metadata(d.join("history.jsonl")).ok()).map_or(0, |m| m.len());
        if out.chars_capped || size > budget {
            out.chars_capped = true;
            continue;
        }
        budget -= size;
        if let Ok(h) = chats.read_history(&s.chat_id) {
            out.chars +=
                h.records.iter().filter(|r| r.cursor > after).map(|r| r.content.chars().count() as u64).sum::<u64>();
        }
    }
    out
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
            pending.extend(self.pending_of(&s.chat_id, after).into_iter().map(|r| (s.chat_id.clone(), r)));
            // Only the oldest BATCH can go into this run: the rest is left for later runs
            // (a stable sort keeps the same ones a sort of everything would).
            pending.sort_by(|a, b| a.1.timestamp.cmp(&b.1.timestamp));
            pending.truncate(BATCH);
        }
        if pending.is_empty() {
            return Outcome::NothingNew;
        }
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
            &crate::ledger::Job::new("dream", None),
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
            &crate::ledger::Job::new("dream", None),
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
        // A chat rewind during the model calls took records of the batch out: nothing of this
        // run is kept (archived messages are never distilled); the next run reads again.
        if let Some(why) = self.rewound(&batch) {
            return Outcome::Failed(why);
        }
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

    /// Why the batch no longer stands: a chat whose newest batch record left its history (a
    /// chat rewind takes out every record from its cut on, so that one stands for all).
    fn rewound(&self, batch: &[&(String, Record)]) -> Option<String> {
        let mut newest: HashMap<&str, u64> = HashMap::new();
        for (chat, r) in batch {
            let n = newest.entry(chat.as_str()).or_insert(0);
            *n = (*n).max(r.cursor);
        }
        newest
            .into_iter()
            .any(|(chat, cursor)| !self.chats.holds_cursor(chat, cursor).unwrap_or(false))
            .then(|| "a chat was rewound during the run; its records are read again next time".to_string())
    }

    /// The chat's oldest [`BATCH`] records after cursor `after`, read through the history
    /// without loading it: each line at most its first 2 MiB (`store::paging::records`), each
    /// content cut to [`MAX_CHARS`] (a run's transcript never holds more), and a chat with
    /// nothing new is not read at all. So a run holds at most about `2 × BATCH` records,
    /// whatever the histories hold.
    fn pending_of(&self, chat_id: &str, after: u64) -> Vec<Record> {
        if self.chats.last_cursor_of(chat_id).unwrap_or(0) <= after {
            return Vec::new();
        }
        let Some(path) = self.chats.history_path(chat_id) else { return Vec::new() };
        let mut out = Vec::new();
        let read = crate::store::paging::records(&path, |mut r| {
            if r.cursor > after {
                if r.content.len() > MAX_CHARS {
                    r.content = crate::util::text::take_chars(&r.content, MAX_CHARS).to_string();
                }
                out.push(r);
            }
            out.len() < BATCH
        });
        if let Err(e) = read {
            log::warn!("event=dream.read_failed chat_id={chat_id} error_kind={:?}", e.kind());
        }
        out
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
pub(crate) fn destructive(old: &str, new: &str, analysis: &str) -> Option<&'static str> {
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
    fn run_now_is_refused_while_queued_or_running_and_the_outcome_persists() {
        let dir = std::env::temp_dir().join(format!("cc-dream-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let c = DreamControl::new(&dir, None);
        assert!(c.state().last.is_none());
        assert!(c.request_run().unwrap().queued);
        assert_eq!(c.request_run().err(), Some(Busy));
        let started = c.begin();
        assert!(c.kicked.try_recv().is_err(), "the kick was taken by this run");
        let st = c.state();
        assert!(st.running && !st.queued);
        assert_eq!(c.request_run().err(), Some(Busy));
        c.finish(LastRun::of(&Outcome::Failed("Authorization: Bearer sk-abcdefghijkl".into()), started, "manual"));
        let last = c.state().last.unwrap();
        assert_eq!(last.outcome, "failed");
        assert!(!last.detail.as_deref().unwrap().contains("sk-abcdefghijkl"), "{last:?}");
        assert!(c.request_run().is_ok());
        // A new process reads the last outcome back.
        // (Times to within a microsecond: serde_json's default float parsing is not exact.)
        let back = DreamControl::new(&dir, None).state().last.unwrap();
        assert_eq!((&back.outcome, &back.detail, &back.trigger), (&last.outcome, &last.detail, &last.trigger));
        assert!((back.finished_at - last.finished_at).abs() < 1e-6);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn fences_are_stripped() {
        assert_eq!(strip_fence("```markdown\n# M\n- a\n```"), "# M\n- a");
        assert_eq!(strip_fence("# M"), "# M");
    }
}
