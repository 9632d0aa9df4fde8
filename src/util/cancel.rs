//! Cancellation token for one turn: a flag for cheap polling, a channel whose sender is
//! dropped on cancel, so any thread blocked in `select!` on [`CancelToken::wait_chan`] wakes at
//! once, and closers ([`CancelToken::on_cancel`]) that cancel runs to interrupt a blocking call
//! in flight (shutting the socket a model stream or a web fetch reads from). Here rather than
//! in `agent` because the LLM client, the tools and MCP calls wait on it too; any thread may
//! hold a clone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

use super::sync;

#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

struct Inner {
    flag: AtomicBool,
    /// Cancelled because the chat was deleted: nothing of the turn may be written.
    discard: AtomicBool,
    state: Mutex<State>,
    rx: Receiver<()>,
}

type Closer = Box<dyn FnOnce() + Send>;

struct State {
    // Dropping the sender disconnects `rx`: every select on it becomes ready.
    tx: Option<Sender<()>>,
    /// Registered closers with their ids; cancel takes and runs them all.
    closers: Vec<(u64, Closer)>,
    next_id: u64,
}

/// A registered closer: dropping it unregisters the closer (the call it guards is over).
#[must_use = "the closer is unregistered when this guard drops"]
pub(crate) struct OnCancel<'a> {
    token: &'a CancelToken,
    id: u64,
}

impl Drop for OnCancel<'_> {
    fn drop(&mut self) {
        self.token.lock().closers.retain(|(id, _)| *id != self.id);
    }
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
                state: Mutex::new(State { tx: Some(tx), closers: Vec::new(), next_id: 0 }),
                rx,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        sync::lock(&self.inner.state)
    }

    pub fn cancel(&self) {
        self.inner.flag.store(true, Ordering::SeqCst);
        let closers = {
            let mut st = self.lock();
            st.tx.take();
            std::mem::take(&mut st.closers)
        };
        // Outside the lock: a closer may take locks of its own (ureq's pool).
        for (_, close) in closers {
            close();
        }
    }

    /// Registers `close` to run on cancel, for as long as the returned guard lives: it must
    /// make the blocking call it guards return promptly (shut its socket). On a token already
    /// cancelled it runs at once. It runs at most once, on the cancelling thread.
    pub(crate) fn on_cancel(&self, close: impl FnOnce() + Send + 'static) -> OnCancel<'_> {
        let mut st = self.lock();
        let id = st.next_id;
        st.next_id += 1;
        // Checked under the lock `cancel` takes its closers with: a closer registered after
        // that would otherwise never run.
        if st.tx.is_none() {
            drop(st);
            close();
        } else {
            st.closers.push((id, Box::new(close)));
        }
        OnCancel { token: self, id }
    }

    /// Cancels and forbids persisting anything (the chat is being deleted).
    pub(crate) fn discard(&self) {
        self.inner.discard.store(true, Ordering::SeqCst);
        self.cancel();
    }

    pub(crate) fn is_discarded(&self) -> bool {
        self.inner.discard.load(Ordering::SeqCst)
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    /// A receiver that becomes ready (disconnected) when the token is cancelled.
    pub(crate) fn wait_chan(&self) -> &Receiver<()> {
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

    #[test]
    fn closers_run_once_on_cancel_unless_their_guard_is_gone() {
        use std::sync::atomic::AtomicUsize;
        let t = CancelToken::new();
        let ran = Arc::new(AtomicUsize::new(0));
        let count = |ran: &Arc<AtomicUsize>| {
            let ran = Arc::clone(ran);
            move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }
        };
        let dropped = Arc::new(AtomicUsize::new(0));
        drop(t.on_cancel(count(&dropped)));
        let kept = t.on_cancel(count(&ran));
        let t2 = t.clone();
        std::thread::spawn(move || t2.cancel()).join().unwrap();
        t.cancel();
        drop(kept);
        assert_eq!(ran.load(Ordering::SeqCst), 1, "a live closer runs once however often cancel is called");
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "an unregistered closer never runs");
        // Registered after cancel: runs at once.
        let late = Arc::new(AtomicUsize::new(0));
        let _g = t.on_cancel(count(&late));
        assert_eq!(late.load(Ordering::SeqCst), 1);
    }
}
