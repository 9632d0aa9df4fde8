//! The turn records on disk (`turns/<chat>/<seq>.json`) and the chat's horizon: reading them,
//! and writing one with the blob references and the byte count kept in step. Called under the
//! store's lock by the hooks, the budget and a rewind.
use std::fs;
use std::io;
use std::path::PathBuf;

use super::*;

impl Checkpoints {
    pub(super) fn chat_dir(&self, chat_id: &str) -> PathBuf {
        self.cfg.root.join("turns").join(chat_id)
    }

    pub(super) fn record_path(&self, chat_id: &str, seq: u64) -> PathBuf {
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

    pub(super) fn all_records(&self) -> Vec<TurnRecord> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(self.cfg.root.join("turns")) else { return out };
        for e in rd.flatten() {
            out.extend(self.chat_records(&e.file_name().to_string_lossy()));
        }
        out
    }

    /// Writes a record and brings the blob references in step with it.
    pub(super) fn save_record(&self, inner: &mut Inner, rec: &TurnRecord) {
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
    pub(super) fn drop_turn(&self, inner: &mut Inner, seq: u64) {
        if let Some(t) = inner.turns.remove(&seq) {
            inner.total = inner.total.saturating_sub(t.record_bytes);
        }
    }

    /// The chat's horizon: the highest position of its dropped stubs (`None`: none dropped).
    pub(crate) fn horizon(&self, chat_id: &str) -> Option<u64> {
        if !crate::store::chats::valid_chat_id(chat_id) {
            return None;
        }
        fs::read_to_string(self.chat_dir(chat_id).join(HORIZON)).ok()?.trim().parse().ok()
    }
}
