//! A rewind of one chat's workspace changes (docs/http-api.md "Rewind") and its undo: the plan
//! ([`super::plan`], a pure function over the turn records and what is on disk), the preview's
//! diffs, and the application under a journal. Restores are atomic per path (a temp file beside
//! it, then `renameat`) and go through the workspace confinement (`Workspace::parent_of`); the
//! journal (`<checkpoints>/journal.json`, fsynced before the first change) lists every target
//! state, so a rewind a crash interrupted is finished at the next start ([`recover`]). An applied
//! rewind leaves a record of what it replaced (`TurnRecord::undo`, one per chat, in the byte
//! budget like any turn) that [`Checkpoints::undo`] puts back. Runs on an `http-slow` thread under
//! the store's lock (no hook records anything meanwhile); recovery in `app`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;
use serde::{Deserialize, Serialize};

pub use super::plan::Force;
use super::plan::{self, Disk, Op, Plan, Step, Why, CHANGED_DURING_RECOVERY};
use super::state::{lstat, read_capped, Stat, State};
use super::{Checkpoints, Entry, Inner, TurnRecord, UndoOf};
use crate::util::fsx;
use crate::workspace::Workspace;

/// Text files up to this size get a diff in the preview.
const DIFF_MAX_INPUT: u64 = 256 << 10;
/// A diff longer than this is cut (with a note).
const DIFF_MAX_CHARS: usize = 64 << 10;

/// One path a rewind puts back.
#[derive(Debug, Clone, Serialize)]
pub struct FileAction {
    pub path: String,
    /// `restore` (content or mode back), `create` (it was removed), `delete` (the chat made it).
    pub action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
}

/// A path left as it is (or, in `failed`, whose restore failed): a stable `code` the client
/// translates, and the English `reason`. A conflict's preview carries the diff an "overwrite
/// anyway" would apply.
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub path: String,
    pub code: &'static str,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
}

impl Refusal {
    fn of(path: &str, why: Why) -> Refusal {
        Refusal { path: path.to_string(), code: why.code(), reason: why.text().to_string(), diff: None, binary: false }
    }

    /// A restore that failed (`code` says which step).
    pub fn failed(path: &str, code: &'static str, reason: String) -> Refusal {
        Refusal { path: path.to_string(), code, reason, diff: None, binary: false }
    }
}

/// The answer of a rewind, an undo, or their dry runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub files: Vec<FileAction>,
    /// Changed outside this chat: left alone unless forced (then also in `files`).
    pub conflicts: Vec<Refusal>,
    /// No copy to restore from (over the cap, evicted, the store was full).
    pub not_rewindable: Vec<Refusal>,
    /// Some of the turns' copies were evicted to stay under the byte budget.
    pub evicted: bool,
    /// Paths whose restore failed (applied rewinds only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<Refusal>,
}

impl Report {
    fn of(plan: &Plan) -> Report {
        Report {
            files: plan
                .steps
                .iter()
                .map(|s| FileAction { path: s.path.clone(), action: s.action, diff: None, binary: false })
                .collect(),
            conflicts: plan.conflicts.iter().map(|(p, w)| Refusal::of(p, *w)).collect(),
            not_rewindable: plan.not_rewindable.iter().map(|(p, w)| Refusal::of(p, *w)).collect(),
            evicted: plan.evicted,
            failed: Vec::new(),
        }
    }
}

/// What a rewind is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    /// The history position of message K (`TurnRecord::position`).
    pub from: u64,
    /// K itself, and whether the chat's messages go too: kept for the undo.
    pub before_message: u64,
    pub chat: bool,
    pub force: Force,
    pub dry_run: bool,
}

/// An undo's answer besides its files.
#[derive(Debug)]
pub struct Undone {
    /// The rewind's message index, and whether it took the chat's messages out too.
    pub before_message: u64,
    pub chat: bool,
    pub report: Report,
}

/// Why an undo cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UndoRefusal {
    /// No applied rewind of the chat's files is kept.
    Nothing,
    /// A turn of the chat changed files since the rewind.
    NewerTurn,
}

#[derive(Serialize, Deserialize)]
struct Journal {
    chat_id: String,
    ops: Vec<Op>,
    /// The chat's records as they are once the ops ran (the paths put back removed).
    records: Vec<TurnRecord>,
    /// The same records before the rewind: recovery puts back the entries of the paths it left
    /// alone, so the next preview lists them as conflicts.
    #[serde(default)]
    original: Vec<TurnRecord>,
}

/// The workspace as the plan sees it: what is there now, read on demand.
struct Live<'a>(&'a Path);

impl Disk for Live<'_> {
    fn stat(&self, rel: &str) -> Option<Stat> {
        lstat(&self.0.join(rel)).ok().flatten()
    }
    fn hash(&self, rel: &str) -> Option<String> {
        read_capped(&self.0.join(rel)).ok().flatten().map(|b| crate::util::hash::sha256_hex(&b))
    }
    fn through_link(&self, rel: &str) -> bool {
        through_link(&self.0.join(rel))
    }
}

impl Checkpoints {
    /// Rewinds what chat `chat_id` changed in its turns at history position `ask.from` or later
    /// (see `TurnRecord::position`); a dry run only reports, with diffs.
    pub fn rewind(&self, chat_id: &str, ask: &Ask) -> Report {
        let mut inner = self.lock();
        let ws = match Workspace::from_paths(&self.cfg.workspace, &self.cfg.skip) {
            Ok(ws) => ws,
            Err(e) => return Report { failed: vec![Refusal::failed(".", "workspace", e)], ..Report::default() },
        };
        let recs: Vec<TurnRecord> =
            self.chat_records(chat_id).into_iter().filter(|r| r.undo.is_none() && r.position() >= ask.from).collect();
        let forgotten = self.horizon(chat_id).is_some_and(|h| h >= ask.from);
        let mut plan = plan::plan(recs, forgotten, &ask.force, &Live(&self.cfg.workspace));
        let mut report = Report::of(&plan);
        if ask.dry_run {
            self.add_diffs(&mut report, &plan);
            return report;
        }
        // What each path holds now, kept for the undo (free room only: the copies the rewind
        // restores from must not be evicted to make it).
        let mut undo_entries = BTreeMap::new();
        let mut held = Vec::new();
        for s in &plan.steps {
            let before = match &s.from {
                State::File { mode, size, meta, .. } => {
                    let blob = self.copy_in(&mut inner, &self.cfg.workspace.join(&s.path), false);
                    held.extend(blob.clone());
                    State::File { mode: *mode, size: *size, blob, meta: *meta }
                }
                other => other.clone(),
            };
            undo_entries.insert(s.path.clone(), Entry { before, after: s.target.clone(), conflict: None });
        }
        let original: Vec<TurnRecord> =
            self.chat_records(chat_id).into_iter().filter(|r| plan.records.iter().any(|p| p.seq == r.seq)).collect();
        let failed = self.execute(&ws, chat_id, &plan.steps, &plan.records, &original, &mut report);
        // What was put back is no longer a change of this chat; the baseline sees it as it is
        // now, so a command running in another chat is not charged with it.
        for rec in &mut plan.records {
            if let Some(orig) = original.iter().find(|r| r.seq == rec.seq) {
                for p in &failed {
                    if let Some(e) = orig.entries.get(p) {
                        rec.entries.insert(p.clone(), e.clone());
                    }
                }
            }
        }
        undo_entries.retain(|p, _| !failed.contains(p));
        self.settle(&mut inner, &plan.steps);
        for rec in &plan.records {
            self.save_record(&mut inner, rec);
        }
        self.drop_undo(&mut inner, chat_id);
        if !undo_entries.is_empty() {
            let seq = inner.next_seq;
            inner.next_seq += 1;
            let rec = TurnRecord {
                seq,
                chat_id: chat_id.to_string(),
                start_cursor: ask.from,
                user_cursor: None,
                evicted: false,
                entries: undo_entries,
                undo: Some(Box::new(UndoOf {
                    before_message: ask.before_message,
                    chat: ask.chat,
                    originals: original,
                })),
            };
            self.save_record(&mut inner, &rec);
        }
        for b in held {
            self.release(&mut inner, &b);
        }
        self.sweep(&mut inner);
        log::info!("event=rewind.applied chat_id={chat_id} files={} failed={}", plan.steps.len(), failed.len());
        report
    }

    /// Forgets the chat's kept undo (a newer rewind of its messages alone replaces it).
    pub fn forget_undo(&self, chat_id: &str) {
        let mut inner = self.lock();
        self.drop_undo(&mut inner, chat_id);
        self.sweep(&mut inner);
    }

    /// The chat's last rewind, if its files are kept: what an undo would put back (`dry_run`)
    /// or puts back, with the chat's records as they were before the rewind.
    pub fn undo(&self, chat_id: &str, force: &Force, dry_run: bool) -> Result<Undone, UndoRefusal> {
        let mut inner = self.lock();
        let recs = self.chat_records(chat_id);
        let Some(rec) = recs.iter().rev().find(|r| r.undo.is_some()).cloned() else {
            return Err(UndoRefusal::Nothing);
        };
        if recs.iter().any(|r| r.undo.is_none() && r.seq > rec.seq) {
            return Err(UndoRefusal::NewerTurn);
        }
        let of = rec.undo.clone().expect("found by its undo");
        let plan = plan::plan(vec![rec.clone()], false, force, &Live(&self.cfg.workspace));
        let mut report = Report::of(&plan);
        let undone = |report| Undone { before_message: of.before_message, chat: of.chat, report };
        if dry_run {
            self.add_diffs(&mut report, &plan);
            return Ok(undone(report));
        }
        let ws = match Workspace::from_paths(&self.cfg.workspace, &self.cfg.skip) {
            Ok(ws) => ws,
            Err(e) => {
                report.files.clear();
                report.failed.push(Refusal::failed(".", "workspace", e));
                return Ok(undone(report));
            }
        };
        // Once the files are back the chat's records are as before the rewind, and the undo
        // record goes (a crash mid-way finishes the same from the journal).
        let mut records = of.originals.clone();
        records.push(TurnRecord { entries: BTreeMap::new(), undo: None, evicted: false, ..rec.clone() });
        self.execute(&ws, chat_id, &plan.steps, &records, &[], &mut report);
        self.settle(&mut inner, &plan.steps);
        for r in &of.originals {
            self.save_record(&mut inner, r);
        }
        self.drop_undo(&mut inner, chat_id);
        self.sweep(&mut inner);
        log::info!("event=rewind.undone chat_id={chat_id} files={}", plan.steps.len());
        Ok(undone(report))
    }

    /// Removes the chat's undo records.
    fn drop_undo(&self, inner: &mut Inner, chat_id: &str) {
        for mut r in self.chat_records(chat_id).into_iter().filter(|r| r.undo.is_some()) {
            r.entries.clear();
            r.undo = None;
            r.evicted = false;
            self.save_record(inner, &r);
            self.drop_turn(inner, r.seq);
        }
    }

    /// The baseline sees each path put back as it is now.
    fn settle(&self, inner: &mut Inner, steps: &[Step]) {
        for s in steps {
            let stat = lstat(&self.cfg.workspace.join(&s.path)).ok().flatten();
            self.refresh_known(inner, &s.path, stat, false);
        }
    }

    /// Runs the steps under a journal naming `records` as they are once done; the failed
    /// paths go to `report.failed` and are returned. A journal that cannot be written stops it
    /// before any change (every path then counts as failed).
    fn execute(
        &self,
        ws: &Workspace,
        chat_id: &str,
        steps: &[Step],
        records: &[TurnRecord],
        original: &[TurnRecord],
        report: &mut Report,
    ) -> BTreeSet<String> {
        let mut ops: Vec<Op> = steps
            .iter()
            .map(|s| Op { path: s.path.clone(), target: s.target.clone(), from: Some(s.from.clone()) })
            .collect();
        ops.sort_by_key(order);
        let journal =
            Journal { chat_id: chat_id.to_string(), ops, records: records.to_vec(), original: original.to_vec() };
        let path = self.cfg.root.join("journal.json");
        let written =
            serde_json::to_vec(&journal).map_err(io::Error::other).and_then(|b| fsx::write_atomic(&path, &b, true));
        if let Err(e) = written {
            log::error!("event=rewind.journal_failed chat_id={chat_id} error_kind={:?}", e.kind());
            report.failed.push(Refusal::failed(".", "journal", "could not write the rewind journal".into()));
            report.files.clear();
            return steps.iter().map(|s| s.path.clone()).collect();
        }
        let mut failed = BTreeSet::new();
        for (i, op) in journal.ops.iter().enumerate() {
            if self.cfg.pause_after == Some(i) {
                // Test-only (CASHCODE_TEST_REWIND_PAUSE): stop here for good, journal written,
                // so a test can kill the process mid-rewind.
                log::warn!("event=rewind.test_pause done={i}");
                loop {
                    std::thread::park();
                }
            }
            if let Err(e) = apply(ws, &self.blobs, op) {
                log::warn!("event=rewind.restore_failed chat_id={chat_id} error={e:?}");
                report.failed.push(Refusal::failed(&op.path, "restore_failed", e));
                failed.insert(op.path.clone());
            }
        }
        if let Err(e) = std::fs::remove_file(&path) {
            log::error!("event=rewind.journal_remove_failed error_kind={:?}", e.kind());
        }
        fsx::sync_dir(&self.cfg.root);
        failed
    }

    /// The preview's diffs: for each path put back, and for each conflict (what overwriting it
    /// anyway would do).
    fn add_diffs(&self, report: &mut Report, plan: &Plan) {
        let target = |p: &str| -> Option<State> {
            plan.steps
                .iter()
                .find(|s| s.path == p)
                .map(|s| s.target.clone())
                .or_else(|| plan.records.iter().flat_map(|r| r.entries.get(p)).next().map(|e| e.before.clone()))
        };
        for f in &mut report.files {
            if let Some(t) = target(&f.path) {
                (f.diff, f.binary) = self.diff(&f.path, &t);
            }
        }
        for c in &mut report.conflicts {
            if c.code == Why::ThroughLink.code() {
                continue;
            }
            if let Some(t) = target(&c.path) {
                (c.diff, c.binary) = self.diff(&c.path, &t);
            }
        }
    }

    /// The preview's diff from what is there now to what the rewind puts back (text files up
    /// to [`DIFF_MAX_INPUT`]); `binary` when either side is not UTF-8 text.
    fn diff(&self, rel: &str, target: &State) -> (Option<String>, bool) {
        let abs = self.cfg.workspace.join(rel);
        let abs = abs.as_path();
        let current = lstat(abs).ok().flatten();
        let now: Option<Vec<u8>> = match current.as_ref() {
            Some(s) if s.is_file() => {
                if s.meta.size > DIFF_MAX_INPUT {
                    return (None, false);
                }
                match read_capped(abs) {
                    Ok(Some(b)) => Some(b),
                    _ => return (None, false),
                }
            }
            Some(_) => return (None, false),
            None => None,
        };
        let then: Option<Vec<u8>> = match target {
            State::File { blob: Some(h), size, .. } => {
                if *size > DIFF_MAX_INPUT {
                    return (None, false);
                }
                match self.blobs.read(h) {
                    Ok(b) => Some(b),
                    Err(_) => return (None, false),
                }
            }
            State::Absent => None,
            _ => return (None, false),
        };
        if now.is_none() && then.is_none() {
            return (None, false);
        }
        let (a, b) = (now.unwrap_or_default(), then.unwrap_or_default());
        let (Ok(a), Ok(b)) = (std::str::from_utf8(&a), std::str::from_utf8(&b)) else {
            return (None, true);
        };
        if a.contains('\0') || b.contains('\0') {
            return (None, true);
        }
        let diff = similar::TextDiff::from_lines(a, b);
        let mut text =
            diff.unified_diff().context_radius(3).header(&format!("a/{rel}"), &format!("b/{rel}")).to_string();
        if text.len() > DIFF_MAX_CHARS {
            let cut = crate::util::text::take_chars(&text, DIFF_MAX_CHARS).to_string();
            text = format!("{cut}\n[diff cut at {DIFF_MAX_CHARS} characters]\n");
        }
        (Some(text), false)
    }
}

/// Whether an existing ancestor directory of `abs` is not itself (a symlink in the way).
fn through_link(abs: &Path) -> bool {
    let mut dir = abs.parent();
    while let Some(d) = dir {
        if d.exists() {
            return std::fs::canonicalize(d).map_or(true, |real| real != d);
        }
        dir = d.parent();
    }
    false
}

/// The order ops run in: entries removed first (deepest first), directories made (shallowest
/// first), then files and links, then directories removed (deepest first).
fn order(op: &Op) -> (u8, i64, String) {
    let depth = op.path.matches('/').count() as i64;
    match &op.target {
        State::Absent => (0, -depth, op.path.clone()),
        State::Dir { .. } => (1, depth, op.path.clone()),
        _ => (2, depth, op.path.clone()),
    }
}

/// Puts one path into its target state; safe to run again on a path already there.
fn apply(ws: &Workspace, blobs: &super::blobs::Blobs, op: &Op) -> Result<(), String> {
    let (dir, name) = ws.parent_of(&op.path, true)?;
    let fail = |what: &str, e: Errno| format!("{what} failed: {}", io::Error::from(e));
    let current = nix::sys::stat::fstatat(&dir, name.as_os_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok();
    let is_dir = current.is_some_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR);
    let remove = |dir_too: bool| -> Result<(), String> {
        let flag = if dir_too { UnlinkatFlags::RemoveDir } else { UnlinkatFlags::NoRemoveDir };
        match nix::unistd::unlinkat(&dir, name.as_os_str(), flag) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(Errno::ENOTEMPTY) | Err(Errno::EEXIST) => {
                Err("the directory holds entries this chat did not make; left in place".to_string())
            }
            Err(e) => Err(fail("removing", e)),
        }
    };
    match &op.target {
        State::Absent => remove(is_dir),
        State::Dir { mode } => {
            if current.is_some() && !is_dir {
                remove(false)?;
            }
            match nix::sys::stat::mkdirat(&dir, name.as_os_str(), Mode::from_bits_truncate(*mode)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(fail("making the directory", e)),
            }
            let fd = nix::fcntl::openat(
                &dir,
                name.as_os_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| fail("opening the directory", e))?;
            nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(*mode)).map_err(|e| fail("setting the mode", e))
        }
        State::File { mode, blob: Some(h), .. } => {
            let bytes = blobs.read(h).map_err(|e| format!("reading the kept copy failed: {e}"))?;
            let tmp = temp_name(&name);
            let _ = nix::unistd::unlinkat(&dir, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
            let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let fd = nix::fcntl::openat(&dir, tmp.as_os_str(), flags, Mode::from_bits_truncate(0o600))
                .map_err(|e| fail("creating the temp file", e))?;
            let mut f = File::from(fd);
            let written = f
                .write_all(&bytes)
                .and_then(|_| nix::sys::stat::fchmod(&f, Mode::from_bits_truncate(*mode)).map_err(io::Error::from))
                .and_then(|_| f.sync_data());
            drop(f);
            if let Err(e) = written {
                let _ = nix::unistd::unlinkat(&dir, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
                return Err(format!("writing failed: {e}"));
            }
            if is_dir {
                remove(true)?;
            }
            nix::fcntl::renameat(&dir, tmp.as_os_str(), &dir, name.as_os_str()).map_err(|e| fail("renaming", e))
        }
        State::Symlink { target } => {
            let tmp = temp_name(&name);
            let _ = nix::unistd::unlinkat(&dir, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
            nix::unistd::symlinkat(target.as_str(), &dir, tmp.as_os_str()).map_err(|e| fail("making the link", e))?;
            if is_dir {
                remove(true)?;
            }
            nix::fcntl::renameat(&dir, tmp.as_os_str(), &dir, name.as_os_str()).map_err(|e| fail("renaming", e))
        }
        State::File { blob: None, .. } | State::Other => Err("no copy to restore from".to_string()),
    }
}

/// The temp name a restore of `name` writes first: fixed per name, so a rerun after a crash
/// replaces a leftover instead of leaving it.
fn temp_name(name: &OsStr) -> std::ffi::OsString {
    let mut bytes = b".".to_vec();
    bytes.extend_from_slice(&name.as_bytes()[..name.len().min(200)]);
    bytes.extend_from_slice(b".cashcode-rewind");
    std::ffi::OsString::from(OsStr::from_bytes(&bytes))
}

/// At start-up: finishes the rewind a crash interrupted, then removes the journal. A step runs
/// only where its path is still in the state recorded when the rewind was planned (or is already
/// in its target state); anything else was changed since, by the owner between the crash and
/// this start, and is left as it is: logged, its entries kept in the chat's records with a
/// conflict reason the next preview shows. Returns how many paths it went over.
pub(crate) fn recover(cp: &Checkpoints) -> io::Result<usize> {
    let path = cp.cfg.root.join("journal.json");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let Ok(journal) = serde_json::from_slice::<Journal>(&bytes) else {
        // A torn journal was never complete: no op ran before it was fsynced.
        std::fs::remove_file(&path)?;
        return Ok(0);
    };
    let ws = Workspace::from_paths(&cp.cfg.workspace, &cp.cfg.skip).map_err(io::Error::other)?;
    let mut left = BTreeSet::new();
    for op in &journal.ops {
        let abs = cp.cfg.workspace.join(&op.path);
        let current = if through_link(&abs) { None } else { Some(lstat(&abs).ok().flatten()) };
        let Some(current) = current else {
            left.insert(op.path.clone());
            continue;
        };
        if op.target.matches(current.as_ref(), &abs) {
            continue;
        }
        if !op.from.as_ref().is_some_and(|from| from.matches(current.as_ref(), &abs)) {
            log::warn!("event=rewind.recover_conflict chat_id={} path={:?}", journal.chat_id, op.path);
            left.insert(op.path.clone());
            continue;
        }
        if let Err(e) = apply(&ws, &cp.blobs, op) {
            log::warn!("event=rewind.recover_op_failed chat_id={} error={e:?}", journal.chat_id);
            left.insert(op.path.clone());
        }
    }
    // The paths put back leave the chat's records, as after a rewind that ran to its end; those
    // left alone keep their entries, marked as conflicts.
    let mut records = journal.records.clone();
    for rec in &mut records {
        let Some(orig) = journal.original.iter().find(|r| r.seq == rec.seq) else { continue };
        for p in &left {
            if let Some(e) = orig.entries.get(p) {
                let mut e = e.clone();
                e.conflict = Some(CHANGED_DURING_RECOVERY.to_string());
                rec.entries.insert(p.clone(), e);
            }
        }
    }
    for rec in &records {
        let file = cp.record_path(&rec.chat_id, rec.seq);
        if rec.entries.is_empty() && !rec.evicted {
            match std::fs::remove_file(&file) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        } else {
            serde_json::to_vec(rec).map_err(io::Error::other).and_then(|b| fsx::write_replace(&file, &b))?;
        }
    }
    std::fs::remove_file(&path)?;
    Ok(journal.ops.len())
}
