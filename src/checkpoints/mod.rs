//! Rewind checkpoints (design and cost in ARCHITECTURE.md "Checkpoints"): before a
//! turn first changes a workspace path, through `write_file`, `edit_file` or a command run by
//! `exec`, its prior state is kept, so the chat can later put back exactly what it changed.
//!
//! - [`Checkpoints`] (this file) is the store, one per server, and its types; by concern:
//!   `records` (the turn records, `turns/<chat>/<seq>.json`: a path's state before the turn
//!   first touched it and after the turn last did), [`blobs`] (the content-addressed copies),
//!   `budget` (`CASHCODE_CHECKPOINT_MAX_BYTES`, oldest turns evicted first), `baseline` (the
//!   last seen [`state::Stat`] of every workspace path, with a copy of each file up to
//!   [`state::FILE_CAP`], kept current by scans and the inotify `watch`).
//! - `hooks`: [`TurnCheckpoint`] is one running turn's record, handed to the tools in `TurnCtx`.
//!   The file tools call [`TurnCheckpoint::before_write`] (the returned guard records the result
//!   when dropped); `exec` holds an [`ExecWatch`] around its command: a metadata scan before
//!   (what changed since the last scan is copied into the baseline, not charged to the chat)
//!   and after (what differs is the command's, its prior state taken from the baseline).
//! - [`plan`] decides a rewind or its undo (a pure function); [`rewind`] applies it with a
//!   journal and keeps the undo.
//!
//! Hooks run on the turn's worker; a rewind on the HTTP thread; start-up recovery in `app`.
//! Everything under the one store lock, never held while a command runs nor across the first
//! baseline's scan and copies (`Checkpoints::build_baseline`).

mod baseline;
pub(crate) mod blobs;
mod budget;
mod hooks;
pub mod plan;
pub mod projects;
mod records;
pub mod rewind;
pub mod state;
pub(crate) mod watch;

pub use hooks::{ExecWatch, TurnCheckpoint, WriteTouch};

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde::{Deserialize, Serialize};

use self::blobs::Blobs;
use self::state::{Stat, State};
use crate::util::{fsx, sync};

/// Why an entry cannot be trusted to be only this chat's change (shown as a conflict).
pub(crate) const INTERLEAVED: &str = "changed by someone else between this chat's changes";
pub(crate) const CONCURRENT_EXEC: &str = "changed while a command of another chat was running";
/// Exec starts remembered to tell whether another chat's command overlapped one.
const EXEC_LOG: usize = 256;
/// Records of evicted turns (paths only, to report them) a chat keeps; older ones are dropped
/// and the chat's horizon ([`HORIZON`]) rises past them.
pub(crate) const MAX_STUBS: usize = 16;
/// `turns/<chat>/horizon`: the highest history position of the chat's dropped stubs. A rewind
/// reaching back to it cannot know what those turns changed.
const HORIZON: &str = "horizon";

/// One path in a turn's record: its state before the turn first changed it and after the turn
/// last did; `conflict` when the change may not be the chat's alone.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) before: State,
    pub(crate) after: State,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) conflict: Option<String>,
}

/// A turn's record as stored in `turns/<chat>/<seq>.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct TurnRecord {
    /// Store-wide order of turns (eviction takes the lowest first).
    pub(crate) seq: u64,
    pub(crate) chat_id: String,
    /// The chat's last history cursor when the turn began.
    pub(crate) start_cursor: u64,
    /// The cursor of the turn's user message once it was stored (`None`: failed or cancelled).
    #[serde(default)]
    pub(crate) user_cursor: Option<u64>,
    /// The copies were dropped to stay under the byte budget; paths are kept to report them.
    #[serde(default)]
    pub(crate) evicted: bool,
    pub(crate) entries: BTreeMap<String, Entry>,
    /// Set on the record of an applied rewind, kept for its undo: its entries go from the state
    /// before the rewind (`before`) to what the rewind put back (`after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) undo: Option<Box<UndoOf>>,
}

/// What undoing a rewind puts back besides the files.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct UndoOf {
    /// The rewind's message index.
    pub(crate) before_message: u64,
    /// The rewind took the chat's messages out too.
    pub(crate) chat: bool,
    /// The chat's records as they were before the rewind (it removed the entries it put back).
    pub(crate) originals: Vec<TurnRecord>,
}

impl TurnRecord {
    /// The history position the turn belongs to: it is "from message K on" when this is at
    /// least K's cursor (a turn that stored nothing began after every message up to its start).
    pub(crate) fn position(&self) -> u64 {
        self.user_cursor.unwrap_or(self.start_cursor)
    }

    fn blobs(&self) -> HashSet<String> {
        let mut out = HashSet::new();
        if !self.evicted {
            for e in self.entries.values() {
                out.extend(e.before.blob().map(str::to_string));
                out.extend(e.after.blob().map(str::to_string));
            }
            for o in self.undo.iter().flat_map(|u| &u.originals) {
                out.extend(o.blobs());
            }
        }
        out
    }

    /// Drops every copy it refers to (eviction); the paths stay to be reported.
    fn strip(&mut self) {
        self.evicted = true;
        for e in self.entries.values_mut() {
            strip_blob(&mut e.before);
            strip_blob(&mut e.after);
        }
        for o in self.undo.iter_mut().flat_map(|u| &mut u.originals) {
            o.strip();
        }
    }
}

/// The store's view of one turn.
struct TurnIdx {
    chat_id: String,
    blobs: HashSet<String>,
    /// A running turn is never evicted.
    open: bool,
    /// Bytes of its record file, counted in the budget with the blobs.
    record_bytes: u64,
}

/// The baseline's knowledge of one path.
struct Known {
    stat: Stat,
    blob: Option<String>,
}

struct BlobRef {
    size: u64,
    refs: u32,
}

struct Inner {
    known: HashMap<String, Known>,
    /// The baseline was filled by a full scan (the first `exec` since start).
    baseline_ready: bool,
    blobs: HashMap<String, BlobRef>,
    total: u64,
    turns: BTreeMap<u64, TurnIdx>,
    next_seq: u64,
    /// Commands running now (id -> their turn) and the recent starts: a change seen while
    /// commands of several chats overlapped is charged to each of them, as a conflict.
    running: HashMap<u64, Weak<TurnCheckpoint>>,
    started: VecDeque<(u64, Weak<TurnCheckpoint>)>,
    next_exec: u64,
    /// Blobs whose last reference went during the current operation.
    dead: Vec<String>,
    /// Paths a file tool is writing now (between its two hooks): scans leave them to it.
    writing: HashMap<String, u64>,
    /// The inotify dirty set standing in for full scans (`None`: scan everything next time).
    watch: Option<watch::Watch>,
}

/// Settings of the store.
pub struct CheckpointConfig {
    /// `<data>/checkpoints`.
    pub root: PathBuf,
    /// The canonical workspace root.
    pub workspace: PathBuf,
    /// Absolute paths never watched nor restored (data directories, Skill roots).
    pub skip: Vec<PathBuf>,
    pub max_bytes: u64,
    /// Test-only: an applied rewind stops for good after this many files (see `config.rs`).
    pub pause_after: Option<usize>,
}

pub struct Checkpoints {
    cfg: CheckpointConfig,
    blobs: Blobs,
    inner: Mutex<Inner>,
    /// Held by the one `exec` taking the first baseline (the others wait for it here, while the
    /// file tools go on under `inner`).
    building: Mutex<()>,
    /// Test-only: the first baseline stops after its unlocked scan and copies, tells the first
    /// sender, and goes on when the second one sends.
    #[cfg(test)]
    baseline_pause: Mutex<Option<(crossbeam_channel::Sender<()>, crossbeam_channel::Receiver<()>)>>,
}

impl Checkpoints {
    /// Opens the store: finishes a rewind a crash interrupted (its journal), loads the turn
    /// records, and removes blobs nothing refers to any more.
    pub fn open(cfg: CheckpointConfig) -> io::Result<Arc<Checkpoints>> {
        fsx::create_private_dirs(&cfg.root.join("turns"))?;
        fsx::create_private_dirs(&cfg.root.join("blobs"))?;
        let cp = Arc::new(Checkpoints {
            blobs: Blobs::new(&cfg.root.join("blobs")),
            cfg,
            inner: Mutex::new(Inner {
                known: HashMap::new(),
                baseline_ready: false,
                blobs: HashMap::new(),
                total: 0,
                turns: BTreeMap::new(),
                next_seq: 1,
                running: HashMap::new(),
                started: VecDeque::new(),
                next_exec: 1,
                dead: Vec::new(),
                writing: HashMap::new(),
                watch: None,
            }),
            building: Mutex::new(()),
            #[cfg(test)]
            baseline_pause: Mutex::new(None),
        });
        match rewind::recover(&cp) {
            Ok(0) => {}
            Ok(n) => log::warn!("event=rewind.recovered files={n}"),
            Err(e) => log::error!("event=rewind.recover_failed error_kind={:?}", e.kind()),
        }
        let mut inner = cp.lock();
        for rec in cp.all_records() {
            inner.next_seq = inner.next_seq.max(rec.seq + 1);
            let blobs = rec.blobs();
            for b in &blobs {
                inner.blobs.entry(b.clone()).or_insert(BlobRef { size: 0, refs: 0 }).refs += 1;
            }
            let record_bytes = fs::metadata(cp.record_path(&rec.chat_id, rec.seq)).map_or(0, |m| m.len());
            inner.turns.insert(rec.seq, TurnIdx { chat_id: rec.chat_id.clone(), blobs, open: false, record_bytes });
        }
        for (hash, size) in cp.blobs.list() {
            match inner.blobs.get_mut(&hash) {
                Some(r) => r.size = size,
                None => cp.blobs.remove(&hash),
            }
        }
        inner.blobs.retain(|_, r| r.size > 0 || r.refs > 0);
        inner.total = inner.blobs.values().map(|r| r.size).sum::<u64>()
            + inner.turns.values().map(|t| t.record_bytes).sum::<u64>();
        cp.enforce_budget(&mut inner, 0);
        cp.sweep(&mut inner);
        drop(inner);
        Ok(cp)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        sync::lock(&self.inner)
    }

    /// Bytes the blobs and the turn records take now.
    pub fn stored_bytes(&self) -> u64 {
        self.lock().total
    }

    /// Starts the record of a turn of `chat_id` (nothing is written until it changes a path).
    pub fn begin_turn(self: &Arc<Self>, chat_id: &str, start_cursor: u64) -> Arc<TurnCheckpoint> {
        let mut inner = self.lock();
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner
            .turns
            .insert(seq, TurnIdx { chat_id: chat_id.to_string(), blobs: HashSet::new(), open: true, record_bytes: 0 });
        drop(inner);
        Arc::new(TurnCheckpoint {
            store: Arc::clone(self),
            record: Mutex::new(TurnRecord {
                seq,
                chat_id: chat_id.to_string(),
                start_cursor,
                user_cursor: None,
                evicted: false,
                entries: BTreeMap::new(),
                undo: None,
            }),
            finished: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

fn strip_blob(s: &mut State) {
    if let State::File { blob, .. } = s {
        *blob = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn store(max_bytes: u64) -> (Arc<Checkpoints>, PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("cc-checkpoints-{}", crate::util::rand::hex(6)));
        let ws = dir.join("ws");
        fs::create_dir_all(&ws).unwrap();
        let ws = fs::canonicalize(&ws).unwrap();
        let cfg = CheckpointConfig {
            root: dir.join("cp"),
            workspace: ws.clone(),
            skip: Vec::new(),
            max_bytes,
            pause_after: None,
        };
        (Checkpoints::open(cfg).unwrap(), ws, dir)
    }

    /// One turn at history position `cursor` that writes `content` over `path`.
    fn write_turn(cp: &Arc<Checkpoints>, path: &Path, cursor: u64, content: &str) {
        let turn = cp.begin_turn("c", cursor - 1);
        let touch = turn.before_write(path).unwrap();
        fs::write(path, content).unwrap();
        drop(touch);
        turn.finish(Some(cursor));
    }

    /// The first `exec`'s baseline is held at its pause (after its unlocked scan and copies):
    /// another chat's `write_file` goes through meanwhile, and both records come out exact.
    #[test]
    fn the_first_baseline_does_not_hold_up_other_chats_file_tools() {
        use crossbeam_channel::bounded;
        use std::time::Duration;
        let (cp, ws, dir) = store(1 << 30);
        for i in 0..50 {
            fs::write(ws.join(format!("f{i}.txt")), format!("old {i}")).unwrap();
        }
        let (reached_tx, reached) = bounded(1);
        let (open, open_rx) = bounded(1);
        *sync::lock(&cp.baseline_pause) = Some((reached_tx, open_rx));
        let a = cp.begin_turn("a", 0);
        let (a2, f1) = (Arc::clone(&a), ws.join("f1.txt"));
        let exec = std::thread::spawn(move || {
            let watch = a2.watch_exec();
            fs::write(&f1, "by a's command").unwrap();
            drop(watch);
        });
        reached.recv_timeout(Duration::from_secs(30)).expect("the baseline reached its pause");
        let b = cp.begin_turn("b", 0);
        let (b2, f2) = (Arc::clone(&b), ws.join("f2.txt"));
        let (done_tx, done) = bounded(1);
        let writer = std::thread::spawn(move || {
            let touch = b2.before_write(&f2).unwrap();
            fs::write(&f2, "by b").unwrap();
            drop(touch);
            let _ = done_tx.send(());
        });
        // Under a lock held across the baseline this never arrives while the pause lasts.
        let wrote = done.recv_timeout(Duration::from_secs(30));
        open.send(()).unwrap();
        assert!(wrote.is_ok(), "b's write_file waited for a's baseline");
        writer.join().unwrap();
        exec.join().unwrap();
        a.finish(Some(1));
        b.finish(Some(1));
        let content = |rec: &TurnRecord, p: &str| cp.blobs.read(rec.entries[p].before.blob().unwrap()).unwrap();
        let ra = &cp.chat_records("a")[0];
        assert_eq!(ra.entries.keys().collect::<Vec<_>>(), ["f1.txt"], "{ra:?}");
        assert!(ra.entries["f1.txt"].conflict.is_none(), "{ra:?}");
        assert_eq!(content(ra, "f1.txt"), b"old 1");
        let rb = &cp.chat_records("b")[0];
        assert_eq!(rb.entries.keys().collect::<Vec<_>>(), ["f2.txt"], "{rb:?}");
        assert_eq!(content(rb, "f2.txt"), b"old 2");
        let r = cp.rewind("a", &rewind::Ask { from: 1, ..Default::default() });
        assert!(r.conflicts.is_empty() && r.files.len() == 1, "{r:?}");
        assert_eq!(fs::read_to_string(ws.join("f1.txt")).unwrap(), "old 1");
        assert_eq!(fs::read_to_string(ws.join("f2.txt")).unwrap(), "by b");
        drop(cp);
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn evicted_stubs_are_bounded_and_a_rewind_past_them_restores_nothing() {
        // Room for a few copies of 500 bytes beside the records (an evicted one takes about 150).
        let (cp, ws, dir) = store(2_000 + 20 * 300);
        let f = ws.join("f.txt");
        fs::write(&f, "0".repeat(500)).unwrap();
        let turns = 3 * MAX_STUBS as u64;
        for i in 1..=turns {
            write_turn(&cp, &f, 2 * i - 1, &i.to_string().repeat(500 / i.to_string().len()));
        }
        let recs = cp.chat_records("c");
        let stubs: Vec<&TurnRecord> = recs.iter().filter(|r| r.evicted).collect();
        assert_eq!(stubs.len(), MAX_STUBS, "{} records", recs.len());
        assert!(recs.iter().any(|r| !r.evicted), "the newest turns keep their copies");
        let horizon = cp.horizon("c").expect("older stubs were dropped");
        assert!(stubs.iter().all(|r| r.position() > horizon), "horizon {horizon}");
        assert!(cp.lock().turns.len() <= recs.len(), "dropped stubs leave the index too");
        // Back past the horizon: nothing is known for certain, nothing is restored.
        let r = cp.rewind("c", &rewind::Ask { from: 1, dry_run: true, ..Default::default() });
        assert!(r.evicted && r.files.is_empty(), "{r:?}");
        assert_eq!(r.not_rewindable.iter().map(|n| n.path.as_str()).collect::<Vec<_>>(), ["f.txt"]);
        let r = cp.rewind(
            "c",
            &rewind::Ask { from: horizon, force: rewind::Force::All, dry_run: true, ..Default::default() },
        );
        assert!(r.evicted && r.files.is_empty(), "forced too: {r:?}");
        // From the newest turn: its own copy puts the file back.
        let last = 2 * turns - 1;
        let r = cp.rewind("c", &rewind::Ask { from: last, ..Default::default() });
        assert_eq!(r.files.len(), 1, "{r:?}");
        assert_eq!(fs::read_to_string(&f).unwrap(), (turns - 1).to_string().repeat(500 / 2));
        drop(cp);
        let _ = fs::remove_dir_all(dir);
    }

    /// The budget counts the turn records as well as the copies: what `stored_bytes` reports
    /// is what the store's files take, and it holds after a restart.
    #[test]
    fn turn_records_count_in_the_byte_budget() {
        let (cp, ws, dir) = store(1 << 20);
        let f = ws.join("f.txt");
        fs::write(&f, "0".repeat(100)).unwrap();
        for i in 1..=5u64 {
            write_turn(&cp, &f, 2 * i - 1, &i.to_string().repeat(100));
        }
        let on_disk = |sub: &str| -> u64 {
            fn walk(p: &Path) -> u64 {
                fs::read_dir(p).map_or(0, |rd| {
                    rd.flatten()
                        .map(|e| match e.file_type() {
                            Ok(t) if t.is_dir() => walk(&e.path()),
                            _ => e.metadata().map_or(0, |m| m.len()),
                        })
                        .sum()
                })
            }
            walk(&cp.cfg.root.join(sub))
        };
        let records: u64 = cp.lock().turns.values().map(|t| t.record_bytes).sum();
        assert!(records > 0);
        assert_eq!(records, on_disk("turns"), "the index counts every record's bytes");
        assert_eq!(cp.stored_bytes(), on_disk("blobs") + records);
        let before = cp.stored_bytes();
        let cfg = CheckpointConfig {
            root: cp.cfg.root.clone(),
            workspace: cp.cfg.workspace.clone(),
            skip: Vec::new(),
            max_bytes: cp.cfg.max_bytes,
            pause_after: None,
        };
        drop(cp);
        let again = Checkpoints::open(cfg).unwrap();
        assert_eq!(again.stored_bytes(), before, "after a restart");
        drop(again);
        let _ = fs::remove_dir_all(dir);
    }
}
