//! The byte budget (`CASHCODE_CHECKPOINT_MAX_BYTES`): reference counts of the blobs, copying a
//! file in, removing what nothing refers to, and evicting the oldest turns (then baseline
//! copies) to make room; a chat's evicted records beyond [`MAX_STUBS`] go, raising its horizon.
//! Under the store's lock.
use std::fs;
use std::path::Path;

use super::state::read_capped;
use super::*;

impl Checkpoints {
    pub(super) fn add_ref(&self, inner: &mut Inner, hash: &str, size: Option<u64>) {
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
    pub(super) fn release(&self, inner: &mut Inner, hash: &str) {
        let Some(r) = inner.blobs.get_mut(hash) else { return };
        r.refs = r.refs.saturating_sub(1);
        if r.refs == 0 {
            inner.dead.push(hash.to_string());
        }
    }

    /// Removes the blobs that ended an operation without a reference.
    pub(super) fn sweep(&self, inner: &mut Inner) {
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
    pub(super) fn copy_in(&self, inner: &mut Inner, path: &Path, evict: bool) -> Option<String> {
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

    /// Drops copies until `need` more bytes fit: whole turns, oldest first (their records stay,
    /// marked evicted, so a rewind can say what it cannot restore), then baseline copies.
    pub(super) fn enforce_budget(&self, inner: &mut Inner, need: u64) {
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
    pub(super) fn prune_stubs(&self, inner: &mut Inner, chat_id: &str) {
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
}
