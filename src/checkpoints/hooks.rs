//! The hooks a running turn calls through `TurnCtx`: [`TurnCheckpoint`] (its record),
//! [`WriteTouch`] around a file tool's write, [`ExecWatch`] around an `exec` command. They run on
//! the turn's worker.
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};

use super::state::{lstat, State};
use super::*;

/// One running turn's checkpoint, shared by its tools through `TurnCtx`.
pub struct TurnCheckpoint {
    pub(super) store: Arc<Checkpoints>,
    pub(super) record: Mutex<TurnRecord>,
    pub(super) finished: std::sync::atomic::AtomicBool,
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
    pub(super) fn note(rec: &mut TurnRecord, rel: &str, before: State, after: State, conflict: Option<&str>) {
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

    pub(super) fn chat_id(&self) -> String {
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

    pub(super) fn after_exec(self: &Arc<Self>, id: u64, overlapped: &[Weak<TurnCheckpoint>]) {
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
