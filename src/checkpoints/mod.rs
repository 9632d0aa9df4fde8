//! Rewind checkpoints (design and cost in ARCHITECTURE.md "Checkpoints"): before a
//! turn first changes a workspace path, through `write_file`, `edit_file` or a command run by
//! `exec`, its prior state is kept, so the chat can later put back exactly what it changed.
//!
//! - [`Checkpoints`] is the store, one per server: the turn records (`turns/<chat>/<seq>.json`,
//!   a path's state before the turn first touched it and after the turn last did), the
//!   content-addressed blobs ([`blobs`]), the byte budget (`CASHCODE_CHECKPOINT_MAX_BYTES`,
//!   oldest turns evicted first) and the *baseline*: the last seen [`state::Stat`] of every
//!   workspace path, with a copy of each file up to [`state::FILE_CAP`].
//! - [`TurnCheckpoint`] is one running turn's record, handed to the tools in `TurnCtx`. The file
//!   tools call [`TurnCheckpoint::before_write`] (the returned guard records the result when
//!   dropped); `exec` holds an [`ExecWatch`] around its command: a metadata scan before (what
//!   changed since the last scan is copied into the baseline, not charged to the chat) and after
//!   (what differs is the command's, its prior state taken from the baseline).
//! - [`rewind`] plans and applies a rewind with a journal.
//!
//! Hooks run on the turn's worker; a rewind on the HTTP thread; start-up recovery in `app`.
//! Everything under the one store lock, never held while a command runs nor across the first
//! baseline's scan and copies (`Checkpoints::build_baseline`).

pub(crate) mod blobs;
pub mod plan;
pub mod projects;
pub mod rewind;
pub mod state;
pub(crate) mod watch;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde::{Deserialize, Serialize};

use self::blobs::Blobs;
use self::state::{lstat, read_capped, scan, scan_under, Kind, Stat, State, FILE_CAP};
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

    fn chat_dir(&self, chat_id: &str) -> PathBuf {
        self.cfg.root.join("turns").join(chat_id)
    }

    fn record_path(&self, chat_id: &str, seq: u64) -> PathBuf {
        self.chat_dir(chat_id).join(format!("{seq:016}.json"))
    }

    /// The stored records of one chat, oldest first.
    pub(crate) fn chat_records(&self, chat_id: &str) -> Vec<TurnRecord> {
        let mut out: Vec<TurnRecord> = Vec::new();
        if !crate::store::chats::valid_chat_id(chat_id) {
            return out;
        }
        let Ok(rd) = fs::read_dir(self.chat_dir(chat_id)) else { return out };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(".json") {
                if let Some(r) = fs::read(e.path()).ok().and_then(|b| serde_json::from_slice::<TurnRecord>(&b).ok()) {
                    out.push(r);
                }
            }
        }
        out.sort_by_key(|r| r.seq);
        out
    }

    fn all_records(&self) -> Vec<TurnRecord> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(self.cfg.root.join("turns")) else { return out };
        for e in rd.flatten() {
            out.extend(self.chat_records(&e.file_name().to_string_lossy()));
        }
        out
    }

    /// Writes a record and brings the blob references in step with it.
    fn save_record(&self, inner: &mut Inner, rec: &TurnRecord) {
        let blobs = rec.blobs();
        let old = inner.turns.get(&rec.seq).map(|t| t.blobs.clone()).unwrap_or_default();
        for b in blobs.difference(&old) {
            self.add_ref(inner, b, None);
        }
        for b in old.difference(&blobs) {
            self.release(inner, b);
        }
        let (open, old_bytes) = inner.turns.get(&rec.seq).map_or((false, 0), |t| (t.open, t.record_bytes));
        let path = self.record_path(&rec.chat_id, rec.seq);
        let written = if rec.entries.is_empty() && !rec.evicted {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(0),
            }
        } else {
            serde_json::to_vec(rec)
                .map_err(io::Error::other)
                .and_then(|b| fsx::write_replace(&path, &b).map(|()| b.len() as u64))
        };
        let record_bytes = match written {
            Ok(n) => n,
            Err(e) => {
                log::error!("event=checkpoint.write_failed chat_id={} error_kind={:?}", rec.chat_id, e.kind());
                old_bytes
            }
        };
        inner.total = inner.total.saturating_sub(old_bytes) + record_bytes;
        inner.turns.insert(rec.seq, TurnIdx { chat_id: rec.chat_id.clone(), blobs, open, record_bytes });
    }

    /// Forgets a turn's index entry, and its record's bytes in the budget.
    fn drop_turn(&self, inner: &mut Inner, seq: u64) {
        if let Some(t) = inner.turns.remove(&seq) {
            inner.total = inner.total.saturating_sub(t.record_bytes);
        }
    }

    fn add_ref(&self, inner: &mut Inner, hash: &str, size: Option<u64>) {
        let r = inner.blobs.entry(hash.to_string()).or_insert(BlobRef { size: 0, refs: 0 });
        r.refs += 1;
        if let Some(s) = size {
            if r.size == 0 && s > 0 {
                r.size = s;
                inner.total += s;
            }
        }
    }

    /// Drops one reference; a blob left with none is removed by [`Checkpoints::sweep`] at the
    /// end of the operation (a record about to refer to it may still be saved).
    fn release(&self, inner: &mut Inner, hash: &str) {
        let Some(r) = inner.blobs.get_mut(hash) else { return };
        r.refs = r.refs.saturating_sub(1);
        if r.refs == 0 {
            inner.dead.push(hash.to_string());
        }
    }

    /// Removes the blobs that ended an operation without a reference.
    fn sweep(&self, inner: &mut Inner) {
        for hash in std::mem::take(&mut inner.dead) {
            if inner.blobs.get(&hash).is_some_and(|r| r.refs == 0) {
                let size = inner.blobs.remove(&hash).map_or(0, |r| r.size);
                inner.total = inner.total.saturating_sub(size);
                self.blobs.remove(&hash);
            }
        }
    }

    /// Copies the file at `path` (up to [`FILE_CAP`]) into the blob store for the baseline and
    /// returns its hash, referenced once by the caller. `None`: too large, unreadable, or no
    /// room in the budget. Only a pre-image a file tool needs (`evict`) makes room by evicting
    /// the oldest turns; the baseline's speculative copies take free room only.
    fn copy_in(&self, inner: &mut Inner, path: &Path, evict: bool) -> Option<String> {
        let bytes = read_capped(path).ok().flatten()?;
        let size = bytes.len() as u64;
        let hash = crate::util::hash::sha256_hex(&bytes);
        if !inner.blobs.contains_key(&hash) {
            if evict {
                self.enforce_budget(inner, size);
            }
            if inner.total + size > self.cfg.max_bytes {
                return None;
            }
            if self.blobs.put(&bytes).is_err() {
                return None;
            }
        }
        // An empty file still needs its (empty) blob counted once for the reference.
        self.add_ref(inner, &hash, Some(size.max(1)));
        Some(hash)
    }

    /// Updates the baseline entry of `rel` to `stat`, copying a file's content unless the
    /// baseline already holds it for that very metadata. Returns the state it now records.
    fn refresh_known(&self, inner: &mut Inner, rel: &str, stat: Option<Stat>, evict: bool) -> State {
        if let Some(k) = inner.known.get(rel) {
            if Some(&k.stat) == stat.as_ref() && (k.blob.is_some() || !k.stat.is_file() || k.stat.meta.size > FILE_CAP)
            {
                return State::of(Some(&k.stat), k.blob.clone());
            }
        }
        let path = self.cfg.workspace.join(rel);
        let blob = match &stat {
            Some(s) if s.is_file() && s.meta.size <= FILE_CAP => self.copy_in(inner, &path, evict),
            _ => None,
        };
        if let Some(old) = inner.known.remove(rel) {
            if let Some(b) = old.blob {
                self.release(inner, &b);
            }
        }
        let state = State::of(stat.as_ref(), blob.clone());
        if let Some(stat) = stat {
            inner.known.insert(rel.to_string(), Known { stat, blob });
        }
        state
    }

    /// The baseline's state of `rel` (Absent when it has none).
    fn known_state(inner: &Inner, rel: &str) -> State {
        inner.known.get(rel).map_or(State::Absent, |k| State::of(Some(&k.stat), k.blob.clone()))
    }

    /// Drops copies until `need` more bytes fit: whole turns, oldest first (their records stay,
    /// marked evicted, so a rewind can say what it cannot restore), then baseline copies.
    fn enforce_budget(&self, inner: &mut Inner, need: u64) {
        let max = self.cfg.max_bytes;
        while inner.total + need > max {
            let Some(seq) = inner.turns.iter().find(|(_, t)| !t.open && !t.blobs.is_empty()).map(|(s, _)| *s) else {
                break;
            };
            let chat = inner.turns[&seq].chat_id.clone();
            let path = self.record_path(&chat, seq);
            match fs::read(&path).ok().and_then(|b| serde_json::from_slice::<TurnRecord>(&b).ok()) {
                Some(mut rec) => {
                    rec.strip();
                    log::info!("event=checkpoint.evicted chat_id={chat} seq={seq}");
                    self.save_record(inner, &rec);
                    self.sweep(inner);
                    self.prune_stubs(inner, &chat);
                }
                None => {
                    let blobs = inner.turns.get_mut(&seq).map(|t| std::mem::take(&mut t.blobs)).unwrap_or_default();
                    for b in blobs {
                        self.release(inner, &b);
                    }
                    self.sweep(inner);
                }
            }
        }
        if inner.total + need > max {
            let held: Vec<String> =
                inner.known.iter().filter(|(_, k)| k.blob.is_some()).map(|(p, _)| p.clone()).collect();
            for p in held {
                if inner.total + need <= max {
                    break;
                }
                if let Some(b) = inner.known.get_mut(&p).and_then(|k| k.blob.take()) {
                    self.release(inner, &b);
                    self.sweep(inner);
                }
            }
        }
    }

    /// Keeps a chat's evicted records to the newest [`MAX_STUBS`]: the older ones go, the
    /// horizon written first (a crash between leaves stubs behind, never a dropped turn past
    /// the horizon).
    fn prune_stubs(&self, inner: &mut Inner, chat_id: &str) {
        let stubs: Vec<TurnRecord> =
            self.chat_records(chat_id).into_iter().filter(|r| r.evicted && r.undo.is_none()).collect();
        if stubs.len() <= MAX_STUBS {
            return;
        }
        let gone = &stubs[..stubs.len() - MAX_STUBS];
        let horizon = gone.iter().map(TurnRecord::position).max().unwrap_or(0).max(self.horizon(chat_id).unwrap_or(0));
        if let Err(e) = fsx::write_replace(&self.chat_dir(chat_id).join(HORIZON), horizon.to_string().as_bytes()) {
            log::error!("event=checkpoint.write_failed chat_id={chat_id} error_kind={:?}", e.kind());
            return;
        }
        for rec in gone {
            self.drop_turn(inner, rec.seq);
            if let Err(e) = fs::remove_file(self.record_path(chat_id, rec.seq)) {
                log::warn!("event=checkpoint.stub_remove_failed chat_id={chat_id} error_kind={:?}", e.kind());
            }
        }
    }

    /// The chat's horizon: the highest position of its dropped stubs (`None`: none dropped).
    pub(crate) fn horizon(&self, chat_id: &str) -> Option<u64> {
        if !crate::store::chats::valid_chat_id(chat_id) {
            return None;
        }
        fs::read_to_string(self.chat_dir(chat_id).join(HORIZON)).ok()?.trim().parse().ok()
    }

    /// The workspace-relative form of an absolute, symlink-free path the store watches.
    fn rel_of(&self, path: &Path) -> Option<String> {
        if self.cfg.skip.iter().any(|s| path.starts_with(s)) {
            return None;
        }
        let rel = path.strip_prefix(&self.cfg.workspace).ok()?;
        let s = rel.to_str()?;
        (!s.is_empty()).then(|| s.to_string())
    }

    /// Brings the baseline in step with the workspace: a full scan, each path whose metadata
    /// moved since the last one copied again. Returns the scan.
    fn sync_baseline(&self, inner: &mut Inner) {
        if inner.baseline_ready {
            if let Some((changed, now)) = self.dirty_changes(inner) {
                self.absorb(inner, &changed, &now);
                return;
            }
        }
        let (changed, now) = self.full_changes(inner);
        if inner.baseline_ready {
            self.absorb(inner, &changed, &now);
        } else {
            for p in &changed {
                self.refresh_known(inner, p, now.get(p).cloned(), false);
            }
        }
        inner.baseline_ready = true;
    }

    /// Every path whose metadata differs from the baseline, by a full scan (which also sets up
    /// the inotify watch again: watches first, then the scan that counts, so nothing falls
    /// between them).
    fn full_changes(&self, inner: &mut Inner) -> (Vec<String>, HashMap<String, Stat>) {
        inner.watch = None;
        let (watch, now) = self.watch_and_scan();
        inner.watch = watch;
        let mut changed: Vec<String> =
            inner.known.keys().filter(|p| !now.contains_key(*p) && !inner.writing.contains_key(*p)).cloned().collect();
        changed.extend(
            now.iter()
                .filter(|(p, st)| !inner.writing.contains_key(*p) && inner.known.get(*p).is_none_or(|k| k.stat != **st))
                .map(|(p, _)| p.clone()),
        );
        (changed, now)
    }

    /// Sets up the inotify watch on every directory and scans the workspace (watches first,
    /// then the scan that counts). The watch is `None` when it could not cover everything.
    fn watch_and_scan(&self) -> (Option<watch::Watch>, HashMap<String, Stat>) {
        let root = &self.cfg.workspace;
        let mut watch = watch::Watch::new();
        let (first, _) = scan(root, &self.cfg.skip);
        let mut ok = watch.is_some();
        if let Some(w) = watch.as_mut() {
            ok &= w.add(root, "");
            for (p, st) in &first {
                if ok && st.kind == Kind::Dir {
                    ok &= w.add(root, p);
                }
            }
        }
        let (now, truncated) = scan(root, &self.cfg.skip);
        if let Some(w) = watch.as_mut() {
            for (p, st) in &now {
                if ok && st.kind == Kind::Dir && !first.contains_key(p) {
                    ok &= w.add(root, p);
                }
            }
        }
        ((ok && !truncated).then_some(watch).flatten(), now)
    }

    /// The first baseline, taken without holding the store's lock across the scan and the
    /// copies, so other chats' file tools are not held up by it. The watch is set up before
    /// the scan: whatever changes from then on is in its queue. Each file is read outside the
    /// lock and kept only if its metadata is the scan's after the read; it enters the baseline
    /// under the lock, one file at a time, unless a file tool recorded it meanwhile (its entry
    /// is newer). The caller's look ([`Checkpoints::sync_baseline`]) then drains the queue
    /// under the lock, so the baseline it hands the command is as exact as a locked scan's.
    fn build_baseline(&self) {
        if self.lock().baseline_ready {
            return;
        }
        let _one = sync::lock(&self.building);
        if self.lock().baseline_ready {
            return;
        }
        let (watch, now) = self.watch_and_scan();
        let root = &self.cfg.workspace;
        let mut unsure = Vec::new();
        for (p, st) in &now {
            if !st.is_file() || st.meta.size > FILE_CAP {
                continue;
            }
            let path = root.join(p);
            let bytes = match read_capped(&path) {
                Ok(Some(b)) if lstat(&path).ok().flatten().as_ref() == Some(st) => b,
                _ => {
                    unsure.push(p.clone());
                    continue;
                }
            };
            let hash = crate::util::hash::sha256_hex(&bytes);
            let size = bytes.len() as u64;
            let mut inner = self.lock();
            if inner.known.contains_key(p) || inner.writing.contains_key(p) {
                continue;
            }
            if !inner.blobs.contains_key(&hash) {
                // Speculative copies take free room only (as `copy_in` without `evict`).
                if inner.total + size > self.cfg.max_bytes || self.blobs.put(&bytes).is_err() {
                    inner.known.insert(p.clone(), Known { stat: st.clone(), blob: None });
                    continue;
                }
            }
            self.add_ref(&mut inner, &hash, Some(size.max(1)));
            inner.known.insert(p.clone(), Known { stat: st.clone(), blob: Some(hash) });
        }
        #[cfg(test)]
        if let Some((reached, open)) = sync::lock(&self.baseline_pause).take() {
            let _ = reached.send(());
            let _ = open.recv();
        }
        let mut inner = self.lock();
        // Paths the loop did not settle: what the scan saw that no copy stands for yet, files
        // whose read raced a change, and entries of earlier file tools the scan did not find.
        let mut check: Vec<String> = unsure;
        check.extend(now.keys().filter(|p| !inner.known.contains_key(*p)).cloned());
        check.extend(inner.known.keys().filter(|p| !now.contains_key(*p)).cloned());
        for (p, st) in &now {
            if (!st.is_file() || st.meta.size > FILE_CAP) && inner.known.get(p).is_none_or(|k| k.stat != *st) {
                check.push(p.clone());
            }
        }
        check.sort();
        check.dedup();
        for p in check {
            if inner.writing.contains_key(&p) {
                continue;
            }
            let stat = lstat(&root.join(&p)).ok().flatten();
            self.refresh_known(&mut inner, &p, stat, false);
        }
        match watch {
            Some(w) => {
                inner.watch = Some(w);
                inner.baseline_ready = true;
            }
            // No watch to drain: the caller's look scans again under the lock, as before.
            None => inner.watch = None,
        }
        self.sweep(&mut inner);
    }

    /// The paths the inotify events since the last look name, those that differ from the
    /// baseline, with what is there now; `None` when the events cannot be trusted (then the
    /// caller scans everything). A directory that appeared is watched and scanned whole; one
    /// that went (or moved) takes every baseline path below it along.
    fn dirty_changes(&self, inner: &mut Inner) -> Option<(Vec<String>, HashMap<String, Stat>)> {
        let mut w = inner.watch.take()?;
        let dirty = w.drain()?;
        let root = &self.cfg.workspace;
        let mut cands: HashMap<String, Option<Stat>> = HashMap::new();
        let mut new_dirs = Vec::new();
        for p in dirty {
            let abs = root.join(&p);
            if self.cfg.skip.iter().any(|s| abs.starts_with(s)) {
                continue;
            }
            let stat = lstat(&abs).ok().flatten();
            let was_dir = inner.known.get(&p).is_some_and(|k| k.stat.kind == Kind::Dir);
            let is_dir = stat.as_ref().is_some_and(|st| st.kind == Kind::Dir);
            if was_dir || is_dir {
                let prefix = format!("{p}/");
                for k in inner.known.keys().filter(|k| k.starts_with(&prefix)) {
                    if !cands.contains_key(k) {
                        cands.insert(k.clone(), lstat(&root.join(k)).ok().flatten());
                    }
                }
            }
            if is_dir {
                new_dirs.push(p.clone());
            }
            cands.insert(p, stat);
        }
        while let Some(d) = new_dirs.pop() {
            if !w.add(root, &d) {
                return None;
            }
            for (q, st) in scan_under(root, &d, &self.cfg.skip) {
                if st.kind == Kind::Dir && !w.add(root, &q) {
                    return None;
                }
                cands.insert(q, Some(st));
            }
        }
        inner.watch = Some(w);
        let changed = cands
            .iter()
            .filter(|(p, st)| !inner.writing.contains_key(*p) && inner.known.get(*p).map(|k| &k.stat) != st.as_ref())
            .map(|(p, _)| p.clone())
            .collect();
        let now = cands.into_iter().filter_map(|(p, st)| st.map(|st| (p, st))).collect();
        Some((changed, now))
    }

    /// Takes changes found outside a command's own window into the baseline. While commands
    /// run they may be theirs: each running command's turn records them, as a conflict.
    fn absorb(&self, inner: &mut Inner, changed: &[String], now: &HashMap<String, Stat>) {
        let running: Vec<Arc<TurnCheckpoint>> = inner.running.values().filter_map(Weak::upgrade).collect();
        let mut notes = Vec::new();
        let mut held = Vec::new();
        for p in changed {
            let before = Checkpoints::known_state(inner, p);
            if let Some(b) = before.blob() {
                self.add_ref(inner, b, None);
                held.push(b.to_string());
            }
            let after = self.refresh_known(inner, p, now.get(p).cloned(), false);
            notes.push((p, before, after));
        }
        if !notes.is_empty() {
            for turn in &running {
                let mut rec = sync::lock(&turn.record);
                for (p, before, after) in &notes {
                    TurnCheckpoint::note(&mut rec, p, before.clone(), after.clone(), Some(CONCURRENT_EXEC));
                }
                self.save_record(inner, &rec);
            }
        }
        for b in held {
            self.release(inner, &b);
        }
    }
}

fn strip_blob(s: &mut State) {
    if let State::File { blob, .. } = s {
        *blob = None;
    }
}

/// One running turn's checkpoint, shared by its tools through `TurnCtx`.
pub struct TurnCheckpoint {
    store: Arc<Checkpoints>,
    record: Mutex<TurnRecord>,
    finished: std::sync::atomic::AtomicBool,
}

impl TurnCheckpoint {
    /// Sets the chat's history position the turn began at (known once its write-ahead exists).
    pub fn set_start(&self, start_cursor: u64) {
        sync::lock(&self.record).start_cursor = start_cursor;
    }

    /// Ends the turn's record: `user_cursor` is where its user message was stored (`None` when
    /// the turn stored nothing). Later calls do nothing.
    pub fn finish(&self, user_cursor: Option<u64>) {
        if self.finished.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut inner = self.store.lock();
        let mut rec = sync::lock(&self.record);
        rec.user_cursor = user_cursor;
        if let Some(t) = inner.turns.get_mut(&rec.seq) {
            t.open = false;
        }
        if rec.entries.is_empty() {
            self.store.drop_turn(&mut inner, rec.seq);
        } else {
            self.store.save_record(&mut inner, &rec);
        }
        self.store.enforce_budget(&mut inner, 0);
        self.store.sweep(&mut inner);
    }

    /// Merges a change of `rel` into the record: the first change keeps `before`; a later one
    /// whose `before` is not what this turn left marks the entry.
    fn note(rec: &mut TurnRecord, rel: &str, before: State, after: State, conflict: Option<&str>) {
        match rec.entries.get_mut(rel) {
            Some(e) => {
                if !e.after.same(&before) && e.conflict.is_none() {
                    e.conflict = Some(INTERLEAVED.to_string());
                }
                e.after = after;
                if let Some(c) = conflict {
                    e.conflict.get_or_insert_with(|| c.to_string());
                }
            }
            None => {
                rec.entries.insert(rel.to_string(), Entry { before, after, conflict: conflict.map(str::to_string) });
            }
        }
    }

    /// Before a file tool writes `resolved` (absolute, symlink-free, inside the workspace):
    /// keeps the prior state of the file and of each missing parent directory it may create.
    /// The returned guard records what is there once it is dropped (after the write).
    pub fn before_write(&self, resolved: &Path) -> Option<WriteTouch<'_>> {
        let store = &self.store;
        let rel = store.rel_of(resolved)?;
        let mut paths = vec![rel];
        let mut dir = resolved.parent();
        while let Some(d) = dir {
            if d == store.cfg.workspace || !d.starts_with(&store.cfg.workspace) || d.exists() {
                break;
            }
            paths.extend(store.rel_of(d));
            dir = d.parent();
        }
        let mut inner = store.lock();
        let mut now = HashMap::new();
        let mut changed = Vec::new();
        for p in &paths {
            let stat = lstat(&store.cfg.workspace.join(p)).ok().flatten();
            if inner.known.get(p).map(|k| &k.stat) != stat.as_ref() {
                changed.push(p.clone());
            }
            if let Some(s) = stat {
                now.insert(p.clone(), s);
            }
        }
        store.absorb(&mut inner, &changed, &now);
        let seq = sync::lock(&self.record).seq;
        for p in &paths {
            inner.writing.insert(p.clone(), seq);
        }
        let mut rec = sync::lock(&self.record);
        let mut befores = Vec::with_capacity(paths.len());
        for p in &paths {
            befores.push(store.refresh_known(&mut inner, p, now.get(p).cloned(), true));
        }
        // Held until the guard saved the record that refers to them.
        let mut held = Vec::new();
        for b in &befores {
            if let Some(h) = b.blob() {
                store.add_ref(&mut inner, h, None);
                held.push(h.to_string());
            }
        }
        // Seen but not yet changed: only the before-states are noted now.
        for (p, b) in paths.iter().zip(&befores) {
            if !rec.entries.contains_key(p) {
                rec.entries.insert(p.clone(), Entry { before: b.clone(), after: b.clone(), conflict: None });
            } else if let Some(e) = rec.entries.get_mut(p) {
                if !e.after.same(b) && e.conflict.is_none() {
                    e.conflict = Some(INTERLEAVED.to_string());
                }
            }
        }
        Some(WriteTouch { cp: self, paths, held })
    }

    fn chat_id(&self) -> String {
        sync::lock(&self.record).chat_id.clone()
    }

    /// Around one `exec` command: the baseline is brought up to date now (changes since the
    /// last scan are not this chat's); what differs when the guard drops is charged to it.
    pub fn watch_exec(self: &Arc<Self>) -> ExecWatch {
        self.store.build_baseline();
        let mut inner = self.store.lock();
        self.store.sync_baseline(&mut inner);
        let id = inner.next_exec;
        inner.next_exec += 1;
        let overlapped: Vec<Weak<TurnCheckpoint>> = inner.running.values().cloned().collect();
        inner.running.insert(id, Arc::downgrade(self));
        inner.started.push_back((id, Arc::downgrade(self)));
        while inner.started.len() > EXEC_LOG {
            inner.started.pop_front();
        }
        ExecWatch { cp: Arc::clone(self), id, overlapped }
    }

    fn after_exec(self: &Arc<Self>, id: u64, overlapped: &[Weak<TurnCheckpoint>]) {
        let store = &self.store;
        let mut inner = store.lock();
        let chat = self.chat_id();
        inner.running.remove(&id);
        // Turns of other chats whose commands ran during this one: at its start, now, or
        // started since (an evicted log entry counts as unknown, hence overlapping).
        let mut others: Vec<Arc<TurnCheckpoint>> = Vec::new();
        let lost = inner.started.front().is_some_and(|(i, _)| *i > id);
        let candidates = overlapped
            .iter()
            .chain(inner.running.values())
            .chain(inner.started.iter().filter(|(i, _)| *i > id).map(|(_, w)| w));
        for w in candidates {
            if let Some(t) = w.upgrade() {
                if t.chat_id() != chat && !others.iter().any(|o| Arc::ptr_eq(o, &t)) {
                    others.push(t);
                }
            }
        }
        // A path another chat's file tool is writing right now is recorded by that tool.
        let (mut changed, now) = match store.dirty_changes(&mut inner) {
            Some(found) => found,
            None => store.full_changes(&mut inner),
        };
        if changed.is_empty() {
            return;
        }
        changed.sort();
        let conflict = (lost || !others.is_empty()).then_some(CONCURRENT_EXEC);
        let mut notes = Vec::with_capacity(changed.len());
        let mut held = Vec::new();
        for p in &changed {
            let before = Checkpoints::known_state(&inner, p);
            // The baseline's copy of the prior content must outlive the baseline entry, held
            // until the records that refer to it are saved.
            if let Some(b) = before.blob() {
                store.add_ref(&mut inner, b, None);
                held.push(b.to_string());
            }
            let after = store.refresh_known(&mut inner, p, now.get(p).cloned(), false);
            notes.push((p, before, after));
        }
        for turn in std::iter::once(self).chain(others.iter()) {
            let mut rec = sync::lock(&turn.record);
            for (p, before, after) in &notes {
                Self::note(&mut rec, p, before.clone(), after.clone(), conflict);
            }
            store.save_record(&mut inner, &rec);
        }
        for b in held {
            store.release(&mut inner, &b);
        }
        store.sweep(&mut inner);
    }
}

impl Drop for TurnCheckpoint {
    fn drop(&mut self) {
        self.finish(None);
    }
}

/// Records the after-state of the paths a file tool was about to write, when dropped.
pub struct WriteTouch<'a> {
    cp: &'a TurnCheckpoint,
    paths: Vec<String>,
    held: Vec<String>,
}

impl Drop for WriteTouch<'_> {
    fn drop(&mut self) {
        let store = &self.cp.store;
        let mut inner = store.lock();
        for p in &self.paths {
            inner.writing.remove(p);
        }
        let mut rec = sync::lock(&self.cp.record);
        for p in &self.paths {
            let stat = lstat(&store.cfg.workspace.join(p)).ok().flatten();
            let after = store.refresh_known(&mut inner, p, stat, false);
            if let Some(e) = rec.entries.get_mut(p) {
                e.after = after;
            }
        }
        // Paths seen but left exactly as they were are no change of this turn.
        rec.entries.retain(|_, e| e.conflict.is_some() || e.before != e.after);
        store.save_record(&mut inner, &rec);
        for b in std::mem::take(&mut self.held) {
            store.release(&mut inner, &b);
        }
        store.sweep(&mut inner);
    }
}

/// Held around one `exec` command; the scan after it runs when dropped.
pub struct ExecWatch {
    cp: Arc<TurnCheckpoint>,
    id: u64,
    overlapped: Vec<Weak<TurnCheckpoint>>,
}

impl Drop for ExecWatch {
    fn drop(&mut self) {
        let overlapped = std::mem::take(&mut self.overlapped);
        self.cp.after_exec(self.id, &overlapped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
