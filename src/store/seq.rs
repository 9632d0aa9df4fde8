//! Each chat's WebSocket `seq` high-water mark, in `.seq` beside its history (one decimal
//! number), so event numbers keep rising across restarts; [`SeqMarks`] is what the hub asks
//! for, defined here so the store implements it without importing the hub. Written by
//! the hub once per block of seqs and at a clean stop, under the hub's lock; a chat without a
//! directory (no history, no metadata) keeps its mark in memory only, so marks never create
//! chats. Overwritten in place without fsync: a mark lost to a power cut only costs a reload.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use super::chats::ChatStore;
use crate::util::fsx;

const FILE: &str = ".seq";

/// Where each chat's `seq` high-water mark survives a restart ([`SeqFiles`] in the server). The
/// hub writes a mark above every seq it hands out before handing them out, in blocks of
/// `SEQ_BLOCK` (ws/hub.rs), and the exact last seq at a clean stop; a chat met for the first
/// time since start goes on from its mark, so `seq` never goes backwards across restarts.
pub(crate) trait SeqMarks: Send + Sync {
    fn load(&self, chat_id: &str) -> u64;
    /// False when the mark could not be written (then the hub tries again on the next event).
    fn save(&self, chat_id: &str, mark: u64) -> bool;
}

pub(crate) struct SeqFiles {
    chats: Arc<ChatStore>,
}

impl SeqFiles {
    pub(crate) fn new(chats: Arc<ChatStore>) -> SeqFiles {
        SeqFiles { chats }
    }

    fn path(&self, chat_id: &str) -> Option<PathBuf> {
        self.chats.dir(chat_id).map(|d| d.join(FILE))
    }
}

impl SeqMarks for SeqFiles {
    fn load(&self, chat_id: &str) -> u64 {
        let Some(path) = self.path(chat_id) else { return 0 };
        fs::read(&path)
            .ok()
            .filter(|b| b.len() <= 32)
            .and_then(|b| std::str::from_utf8(&b).ok()?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    }

    fn save(&self, chat_id: &str, mark: u64) -> bool {
        let Some(dir) = self.chats.dir(chat_id) else { return false };
        // Overwritten in place like `.cursor` (marks only grow, so no byte of an older one
        // survives): no new file per block, and the hub's lock is held for one `pwrite`. The
        // file is never created with its directory, so a mark never creates a deleted chat.
        if let Err(e) = fsx::overwrite_counter(&dir.join(FILE), mark.to_string().as_bytes()) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("event=ws.seq_mark_failed chat_id={chat_id} error_kind={:?}", e.kind());
            }
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_live_beside_existing_chats_only() {
        let d = std::env::temp_dir().join(format!("cc-seq-{}", crate::util::rand::hex(6)));
        fs::create_dir_all(d.join("c1")).unwrap();
        let marks = SeqFiles::new(Arc::new(ChatStore::new(&d)));
        assert_eq!(marks.load("c1"), 0);
        assert!(marks.save("c1", 2048));
        assert_eq!(marks.load("c1"), 2048);
        assert!(!marks.save("nodir", 7));
        assert!(!d.join("nodir").exists(), "a mark never creates a chat");
        assert_eq!(marks.load("nodir"), 0);
        assert_eq!(marks.load("../x"), 0);
        fs::write(d.join("c1/.seq"), "garbage").unwrap();
        assert_eq!(marks.load("c1"), 0);
        fs::remove_dir_all(&d).ok();
    }
}
