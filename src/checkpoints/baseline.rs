//! The baseline: the last seen state of every workspace path with a copy of each file, kept
//! current by full scans and the inotify watch (`watch`), so the prior state of what a command
//! changes is known. The first baseline is taken without the store's lock
//! ([`Checkpoints::build_baseline`]); the rest runs under it.
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};

use super::state::{lstat, read_capped, scan, scan_under, Kind, Stat, State, FILE_CAP};
use super::*;

impl Checkpoints {
    /// Updates the baseline entry of `rel` to `stat`, copying a file's content unless the
    /// baseline already holds it for that very metadata. Returns the state it now records.
    pub(super) fn refresh_known(&self, inner: &mut Inner, rel: &str, stat: Option<Stat>, evict: bool) -> State {
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
    pub(super) fn known_state(inner: &Inner, rel: &str) -> State {
        inner.known.get(rel).map_or(State::Absent, |k| State::of(Some(&k.stat), k.blob.clone()))
    }

    /// The workspace-relative form of an absolute, symlink-free path the store watches.
    pub(super) fn rel_of(&self, path: &Path) -> Option<String> {
        if self.cfg.skip.iter().any(|s| path.starts_with(s)) {
            return None;
        }
        let rel = path.strip_prefix(&self.cfg.workspace).ok()?;
        let s = rel.to_str()?;
        (!s.is_empty()).then(|| s.to_string())
    }

    /// Brings the baseline in step with the workspace: a full scan, each path whose metadata
    /// moved since the last one copied again. Returns the scan.
    pub(super) fn sync_baseline(&self, inner: &mut Inner) {
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
    pub(super) fn full_changes(&self, inner: &mut Inner) -> (Vec<String>, HashMap<String, Stat>) {
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
    pub(super) fn watch_and_scan(&self) -> (Option<watch::Watch>, HashMap<String, Stat>) {
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
    pub(super) fn build_baseline(&self) {
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
    pub(super) fn dirty_changes(&self, inner: &mut Inner) -> Option<(Vec<String>, HashMap<String, Stat>)> {
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
    pub(super) fn absorb(&self, inner: &mut Inner, changed: &[String], now: &HashMap<String, Stat>) {
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
