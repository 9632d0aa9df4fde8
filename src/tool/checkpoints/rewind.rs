//! A rewind of one chat's workspace changes (docs/http-api.md "Rewind"): the plan (every path
//! the chat's turns from message K on changed, with the state to put back, or why not: a
//! conflict, an evicted or missing copy), the preview's diffs, and the application under a
//! journal. Restores are atomic per path (a temp file beside it, then `renameat`) and go
//! through the workspace confinement (`Workspace::parent_of`); the journal
//! (`<checkpoints>/journal.json`, fsynced before the first change) lists every target state, so
//! a rewind a crash interrupted is finished at the next start ([`recover`]). Runs on an `http-slow`
//! thread under the store's lock (no hook records anything meanwhile); recovery in `app`.

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

use super::state::{lstat, read_capped, State, FILE_CAP};
use super::{Checkpoints, TurnRecord, INTERLEAVED};
use crate::tool::workspace::Workspace;
use crate::util::fsx;

/// Text files up to this size get a diff in the preview.
const DIFF_MAX_INPUT: u64 = 256 << 10;
/// A diff longer than this is cut (with a note).
const DIFF_MAX_CHARS: usize = 64 << 10;
const CHANGED_SINCE: &str = "changed since this chat changed it";
const THROUGH_LINK: &str = "its directory is now reached through a symbolic link; left alone";

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

/// A path left as it is, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub path: String,
    pub reason: String,
}

/// The answer of a rewind or its dry run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub files: Vec<FileAction>,
    /// Changed by someone else: left alone unless forced (then also in `files`).
    pub conflicts: Vec<Refusal>,
    /// No copy to restore from (over the cap, evicted, the store was full).
    pub not_rewindable: Vec<Refusal>,
    /// Some of the turns' copies were evicted to stay under the byte budget.
    pub evicted: bool,
    /// Paths whose restore failed (applied rewinds only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<Refusal>,
}

/// One journalled step: the state `path` must end in, and the state it was in when the rewind
/// was planned (recovery runs the step only from there, see [`recover`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Op {
    path: String,
    target: State,
    /// `None` in a journal of an older version: recovery then leaves the path alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<State>,
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

/// The reason the preview gives for a path recovery left alone.
const CHANGED_DURING_RECOVERY: &str =
    "changed after a rewind was interrupted (the server stopped mid-way); left as it is";

struct Plan {
    report: Report,
    ops: Vec<Op>,
    /// The chosen turns' records with the entries that are put back (or already were) removed.
    records: Vec<TurnRecord>,
}

impl Checkpoints {
    /// Rewinds what chat `chat_id` changed in its turns at history position `from` or later
    /// (see `TurnRecord::position`); `dry_run` only reports.
    pub fn rewind(&self, chat_id: &str, from: u64, force: bool, dry_run: bool) -> Report {
        let mut inner = self.lock();
        let ws = match Workspace::from_paths(&self.cfg.workspace, &self.cfg.skip) {
            Ok(ws) => ws,
            Err(e) => {
                let mut r = Report::default();
                r.failed.push(Refusal { path: ".".into(), reason: e });
                return r;
            }
        };
        let mut plan = self.plan(chat_id, from, force, !dry_run);
        if dry_run {
            return plan.report;
        }
        plan.ops.sort_by_key(order);
        let original: Vec<TurnRecord> =
            self.chat_records(chat_id).into_iter().filter(|r| plan.records.iter().any(|p| p.seq == r.seq)).collect();
        let journal =
            Journal { chat_id: chat_id.to_string(), ops: plan.ops.clone(), records: plan.records.clone(), original };
        let path = self.cfg.root.join("journal.json");
        let written =
            serde_json::to_vec(&journal).map_err(io::Error::other).and_then(|b| fsx::write_atomic(&path, &b, true));
        if let Err(e) = written {
            log::error!("event=rewind.journal_failed chat_id={chat_id} error_kind={:?}", e.kind());
            plan.report.failed.push(Refusal { path: ".".into(), reason: "could not write the rewind journal".into() });
            plan.report.files.clear();
            return plan.report;
        }
        let mut failed = BTreeSet::new();
        for (i, op) in plan.ops.iter().enumerate() {
            if self.cfg.pause_after == Some(i) {
                // Test-only (CASHCODE_TEST_REWIND_PAUSE): stop here for good, journal written,
                // so a test can kill the process mid-rewind.
                log::warn!("event=rewind.test_pause done={i}");
                loop {
                    std::thread::park();
                }
            }
            if let Err(e) = apply(&ws, &self.blobs, op) {
                log::warn!("event=rewind.restore_failed chat_id={chat_id} error={e:?}");
                plan.report.failed.push(Refusal { path: op.path.clone(), reason: e });
                failed.insert(op.path.clone());
            }
        }
        if let Err(e) = std::fs::remove_file(&path) {
            log::error!("event=rewind.journal_remove_failed error_kind={:?}", e.kind());
        }
        fsx::sync_dir(&self.cfg.root);
        // What was put back is no longer a change of this chat; the baseline sees it as it is
        // now, so a command running in another chat is not charged with it.
        for rec in &mut plan.records {
            if let Some(orig) = self.chat_records(chat_id).into_iter().find(|r| r.seq == rec.seq) {
                for p in &failed {
                    if let Some(e) = orig.entries.get(p) {
                        rec.entries.insert(p.clone(), e.clone());
                    }
                }
            }
        }
        for op in &plan.ops {
            let stat = lstat(&self.cfg.workspace.join(&op.path)).ok().flatten();
            self.refresh_known(&mut inner, &op.path, stat, false);
        }
        for rec in &plan.records {
            self.save_record(&mut inner, rec);
        }
        self.sweep(&mut inner);
        log::info!("event=rewind.applied chat_id={chat_id} files={} failed={}", plan.ops.len(), failed.len());
        plan.report
    }

    fn plan(&self, chat_id: &str, from: u64, force: bool, applying: bool) -> Plan {
        let recs: Vec<TurnRecord> = self.chat_records(chat_id).into_iter().filter(|r| r.position() >= from).collect();
        let mut chains: BTreeMap<&str, Vec<&TurnRecord>> = BTreeMap::new();
        for r in &recs {
            for p in r.entries.keys() {
                chains.entry(p.as_str()).or_default().push(r);
            }
        }
        // Turns past the chat's horizon were forgotten: any path may have been theirs first, so
        // no state before `from` is known for certain.
        let forgotten = self.horizon(chat_id).is_some_and(|h| h >= from);
        let mut report = Report { evicted: forgotten || recs.iter().any(|r| r.evicted), ..Report::default() };
        let mut ops = Vec::new();
        let mut settled: BTreeSet<String> = BTreeSet::new();
        for (p, chain) in &chains {
            let entries: Vec<&super::Entry> = chain.iter().map(|r| &r.entries[*p]).collect();
            let target = &entries[0].before;
            let expected = &entries[entries.len() - 1].after;
            let refuse = |reason: &str| Refusal { path: p.to_string(), reason: reason.to_string() };
            if forgotten {
                report.not_rewindable.push(refuse(
                    "older changes of this chat were evicted and forgotten to keep the checkpoint store \
                     under CASHCODE_CHECKPOINT_MAX_BYTES",
                ));
                continue;
            }
            if chain.iter().any(|r| r.evicted) {
                report.not_rewindable.push(refuse(
                    "its copy was evicted to keep the checkpoint store under CASHCODE_CHECKPOINT_MAX_BYTES",
                ));
                continue;
            }
            match target {
                State::File { blob: None, size, .. } if *size > FILE_CAP => {
                    report.not_rewindable.push(refuse("larger than the 8 MiB copy cap: no copy was kept"));
                    continue;
                }
                State::File { blob: None, .. } => {
                    report
                        .not_rewindable
                        .push(refuse("no copy was kept (a hard-linked file, or the checkpoint store was full)"));
                    continue;
                }
                State::Other => {
                    report.not_rewindable.push(refuse("not a file, directory or symbolic link"));
                    continue;
                }
                _ => {}
            }
            let abs = self.cfg.workspace.join(p);
            // A path whose directory is reached through a symlink now is never read (no diff of
            // a file outside) nor written, forced or not.
            if through_link(&abs) {
                report.conflicts.push(refuse(THROUGH_LINK));
                continue;
            }
            let current = lstat(&abs).ok().flatten();
            if target.matches(current.as_ref(), &abs) {
                settled.insert(p.to_string());
                continue;
            }
            let mut conflict = entries.iter().find_map(|e| e.conflict.clone());
            if conflict.is_none() && entries.windows(2).any(|w| !w[0].after.same(&w[1].before)) {
                conflict = Some(INTERLEAVED.to_string());
            }
            if conflict.is_none() && !expected.matches(current.as_ref(), &abs) {
                conflict = Some(CHANGED_SINCE.to_string());
            }
            if let Some(reason) = conflict {
                report.conflicts.push(refuse(&reason));
                if !force {
                    continue;
                }
            }
            let action = match (target, &current) {
                (State::Absent, _) => "delete",
                (_, None) => "create",
                _ => "restore",
            };
            let (diff, binary) = if applying { (None, false) } else { self.diff(p, &abs, current.as_ref(), target) };
            report.files.push(FileAction { path: p.to_string(), action, diff, binary });
            let from = applying.then(|| {
                let hash = match &current {
                    Some(s) if s.is_file() => {
                        read_capped(&abs).ok().flatten().map(|b| crate::util::hash::sha256_hex(&b))
                    }
                    _ => None,
                };
                State::of(current.as_ref(), hash)
            });
            ops.push(Op { path: p.to_string(), target: target.clone(), from });
            settled.insert(p.to_string());
        }
        let records = recs
            .into_iter()
            .map(|mut r| {
                r.entries.retain(|p, _| !settled.contains(p));
                r
            })
            .collect();
        Plan { report, ops, records }
    }

    /// The preview's diff from what is there now to what the rewind puts back (text files up
    /// to [`DIFF_MAX_INPUT`]); `binary` when either side is not UTF-8 text.
    fn diff(
        &self,
        rel: &str,
        abs: &Path,
        current: Option<&super::state::Stat>,
        target: &State,
    ) -> (Option<String>, bool) {
        let now: Option<Vec<u8>> = match current {
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
