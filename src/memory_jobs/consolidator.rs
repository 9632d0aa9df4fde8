//! Context compression (docs/agent-and-memory.md §9), run on the `consolidate` thread so it never
//! delays the next turn. When a chat's in-memory context reaches the threshold, the older part
//! (including any previous summary: summaries are cumulative) is summarised by one model call,
//! a `summary` record with `keep_from_cursor` is appended, and only then is the cached context
//! swapped. A failure changes nothing; so does a chat rewind (`POST …/rewind`, `chat: true`) that
//! took out any record the summary was computed over, checked before the model call and again,
//! under the chat's lock, when the summary is appended. Cuts always land on a user message, so a tool call is
//! never separated from its result. [`Consolidator::close`] (server stop) ends the thread before
//! its next job; queued jobs are dropped (they are redone after a later turn).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{bounded, select, Receiver, Sender, TryRecvError};
use serde_json::json;

use crate::llm::client::LlmClient;
use crate::store::cache::{ChatState, SUMMARY_MARKER};
use crate::store::chats::{ChatStore, Record};
use crate::util::sync::{self, lock};

pub(crate) const KEEP_RATIO: f64 = 0.5;
pub(crate) const SUMMARY_TIMEOUT: Duration = Duration::from_secs(120);
const QUEUE: usize = 256;
const SUMMARY_PROMPT: &str = "You summarise a conversation between a user and an assistant completely, keeping every key \
fact: each question the user asked, the assistant's core answers, and any personal information the user mentioned. \
Content marked with [\u{5386}\u{53f2}\u{6458}\u{8981}] is a previous summary: keep all of its information and merge the new \
conversation into it (append, never replace). Write in the third person, in chronological order, in at most about \
800 characters. Output only the summary.";

/// A compression job for one chat.
pub(crate) struct Job {
    pub(crate) chat_id: String,
    pub(crate) state: Arc<Mutex<ChatState>>,
    pub(crate) client: Arc<LlmClient>,
    pub(crate) model: String,
}

/// What to compress: the records before `keep_from` and the cursor the summary keeps from.
#[derive(Debug, PartialEq)]
pub(crate) struct Plan {
    pub(crate) compress: usize,
    pub(crate) keep_from_cursor: u64,
}

/// Decides whether and where to cut (pure, on the cached records which carry cursors).
pub(crate) fn plan(records: &[Record], threshold: usize) -> Option<Plan> {
    let total: usize = records.iter().map(|r| r.content.chars().count()).sum();
    if total < threshold || records.is_empty() {
        return None;
    }
    let target = (total as f64 * KEEP_RATIO).floor() as usize;
    let mut acc = 0;
    let mut keep_from = records.len();
    for i in (0..records.len()).rev() {
        acc += records[i].content.chars().count();
        if acc >= target {
            keep_from = i;
            break;
        }
    }
    while keep_from < records.len() && records[keep_from].role != "user" {
        keep_from += 1;
    }
    if keep_from >= records.len() {
        keep_from = records.iter().rposition(|r| r.role == "user")?;
    }
    if keep_from == 0 || records[keep_from].cursor == 0 {
        return None;
    }
    Some(Plan { compress: keep_from, keep_from_cursor: records[keep_from].cursor })
}

pub(crate) struct Consolidator {
    tx: Sender<Job>,
    running: Arc<Mutex<HashSet<String>>>,
    threshold: usize,
    /// The only sender of the thread's stop channel: [`Consolidator::close`] drops it.
    stop: Mutex<Option<Sender<()>>>,
}

impl Consolidator {
    /// Starts the `consolidate` thread; it exits on [`Consolidator::close`] (or when the
    /// consolidator is dropped).
    pub(crate) fn start(chats: Arc<ChatStore>, threshold: usize) -> (Arc<Consolidator>, std::thread::JoinHandle<()>) {
        let (tx, rx) = bounded::<Job>(QUEUE);
        let (stop, stopped) = bounded::<()>(0);
        let running = Arc::new(Mutex::new(HashSet::new()));
        let r2 = Arc::clone(&running);
        let handle = std::thread::Builder::new()
            .name("consolidate".into())
            .spawn(move || work(&rx, &stopped, &chats, &r2, threshold))
            .expect("spawning the consolidate thread at start-up");
        (Arc::new(Consolidator { tx, running, threshold, stop: Mutex::new(Some(stop)) }), handle)
    }

    /// Called at the end of a successful turn: queues a job if the chat is over the threshold
    /// and no job for it is pending or running.
    pub(crate) fn maybe_schedule(&self, job: Job) {
        let over = {
            let st = lock(&job.state);
            // The running total first: below the threshold there is nothing to plan.
            st.content_chars() >= self.threshold && plan(st.records(), self.threshold).is_some()
        };
        if !over {
            return;
        }
        let mut running = sync::lock(&self.running);
        if running.contains(&job.chat_id) {
            return;
        }
        let id = job.chat_id.clone();
        if self.tx.try_send(job).is_ok() {
            running.insert(id);
        }
    }

    /// Stops the thread: it finishes the job it is running (server stop shuts the LLM agents
    /// down, so a model call in flight fails at once) and runs no queued one.
    pub(crate) fn close(&self) {
        sync::lock(&self.stop).take();
    }
}

fn work(
    rx: &Receiver<Job>,
    stop: &Receiver<()>,
    chats: &ChatStore,
    running: &Mutex<HashSet<String>>,
    threshold: usize,
) {
    loop {
        let job = select! {
            recv(rx) -> job => match job {
                Ok(job) => job,
                Err(_) => return,
            },
            recv(stop) -> _ => return,
        };
        // Both may be ready at once and select picks either: a closed consolidator runs nothing.
        if matches!(stop.try_recv(), Err(TryRecvError::Disconnected)) {
            return;
        }
        match consolidate(&job, chats, threshold) {
            Ok(true) => log::info!("event=consolidation.completed chat_id={}", job.chat_id),
            Ok(false) => {}
            Err(e) => log::warn!("event=consolidation.failed chat_id={} error=\"{e}\"", job.chat_id),
        }
        sync::lock(running).remove(&job.chat_id);
    }
}

/// Runs one job. `Ok(false)` when nothing needed doing.
pub(crate) fn consolidate(job: &Job, chats: &ChatStore, threshold: usize) -> Result<bool, String> {
    let (transcript, plan, newest) = {
        let st = lock(&job.state);
        let Some(plan) = plan(st.records(), threshold) else { return Ok(false) };
        let older: Vec<&Record> = st.records()[..plan.compress].iter().collect();
        // A chat rewind takes out every record from its cut on: while the newest record this
        // summary rests on is in the history, so is everything it summarises.
        let newest = older.iter().map(|r| r.cursor).max().unwrap_or(0);
        (super::transcript(&older, SUMMARY_MARKER), plan, newest)
    };
    // A job queued before a rewind holds the context as it was: rewound messages are not sent.
    if !chats.holds_cursor(&job.chat_id, newest).map_err(|e| format!("read failed: {:?}", e.kind()))? {
        return Ok(false);
    }
    let messages =
        vec![json!({"role": "system", "content": SUMMARY_PROMPT}), json!({"role": "user", "content": transcript})];
    let summary = job
        .client
        .complete(&crate::ledger::Job::new("consolidate", Some(&job.chat_id)), &job.model, messages, SUMMARY_TIMEOUT)
        .map_err(|e| e.to_string())?;
    let summary = summary.trim();
    let summary = if summary.is_empty() { "[summary unavailable]" } else { summary };
    let mut rec = Record::new("summary", summary);
    rec.keep_from_cursor = Some(plan.keep_from_cursor);
    let mut records = [rec];
    // Durable first; memory is swapped only after the append succeeded. A rewind that took
    // messages out while the model wrote the summary voids it (archived messages are never
    // distilled); the next turn over the threshold schedules a new one.
    let stored = chats
        .append_if_kept(&job.chat_id, newest, &mut records)
        .map_err(|e| format!("append failed: {:?}", e.kind()))?;
    if !stored {
        log::info!("event=consolidation.discarded chat_id={} reason=rewound", job.chat_id);
        return Ok(false);
    }
    let [summary_rec] = records;
    let mut st = lock(&job.state);
    let kept = st.records().iter().filter(|r| r.role != "summary" && r.cursor >= plan.keep_from_cursor).cloned();
    let context = std::iter::once(summary_rec).chain(kept).collect();
    st.replace(context);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(cursor: u64, role: &str, len: usize) -> Record {
        let mut r = Record::new(role, "x".repeat(len));
        r.cursor = cursor;
        r
    }

    #[test]
    fn plan_cuts_at_a_user_message() {
        let records = vec![
            rec(1, "user", 100),
            rec(2, "tool_calls", 10),
            rec(3, "tool", 100),
            rec(4, "assistant", 100),
            rec(5, "user", 10),
            rec(6, "assistant", 100),
        ];
        assert_eq!(plan(&records, 1000), None);
        let p = plan(&records, 100).unwrap();
        // Newest half is ~210 chars: records 6,5,4 reach it at index 3 (assistant) -> moved to the user at 4.
        assert_eq!(p, Plan { compress: 4, keep_from_cursor: 5 });
    }

    #[test]
    fn close_ends_the_thread_while_the_consolidator_is_still_shared() {
        let dir = std::env::temp_dir().join(format!("cc-consolidate-{}", crate::util::rand::hex(6)));
        let (c, handle) = Consolidator::start(Arc::new(ChatStore::new(&dir)), 100);
        let kept = Arc::clone(&c);
        let started = std::time::Instant::now();
        c.close();
        while !handle.is_finished() {
            assert!(started.elapsed() < Duration::from_secs(2), "the consolidate thread ignored close");
            std::thread::sleep(Duration::from_millis(1));
        }
        handle.join().unwrap();
        drop(kept);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn plan_never_returns_an_empty_compress_set() {
        let records = vec![rec(1, "user", 10_000), rec(2, "assistant", 10)];
        assert_eq!(plan(&records, 100), None);
    }
}
