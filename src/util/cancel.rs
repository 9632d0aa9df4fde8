//! Cancellation token for one turn: a flag for cheap polling plus a channel whose sender is
//! dropped on cancel, so any thread blocked in `select!` on [`CancelToken::wait_chan`] wakes at once.
//! Here rather than in `agent` because the LLM client, the tools and MCP calls wait on it too;
//! any thread may hold a clone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

struct Inner {
    flag: AtomicBool,
    /// Cancelled because the chat was deleted: nothing of the turn may be written.
    discard: AtomicBool,
    // Dropping the sender disconnects `rx`: every select on it becomes ready.
    tx: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    pub fn new() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(1);
        CancelToken {
            inner: Arc::new(Inner {
                flag: AtomicBool::new(false),
                discard: AtomicBool::new(false),
                tx: Mutex::new(Some(tx)),
                rx,
            }),
        }
    }

    pub fn cancel(&self) {
        self.inner.flag.store(true, Ordering::SeqCst);
        if let Ok(mut tx) = self.inner.tx.lock() {
            tx.take();
        }
    }

    /// Cancels and forbids persisting anything (the chat is being deleted).
    pub fn discard(&self) {
        self.inner.discard.store(true, Ordering::SeqCst);
        self.cancel();
    }

    pub fn is_discarded(&self) -> bool {
        self.inner.discard.load(Ordering::SeqCst)
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    /// A receiver that becomes ready (disconnected) when the token is cancelled.
    pub fn wait_chan(&self) -> &Receiver<()> {
        &self.inner.rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cancel_wakes_waiters() {
        let t = CancelToken::new();
        let t2 = t.clone();
        let h = std::thread::spawn(move || t2.wait_chan().recv_timeout(Duration::from_secs(5)).is_err());
        std::thread::sleep(Duration::from_millis(20));
        t.cancel();
        assert!(h.join().unwrap());
        assert!(t.is_cancelled());
    }
}
