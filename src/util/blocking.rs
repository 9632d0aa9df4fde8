//! The one pattern for a blocking call that must not hold up, or outlive, its turn: run it on
//! a named helper thread of a [`Pool`] and wait for it with [`wait`], which returns at the first
//! of the result, the turn's [`CancelToken`] or a deadline. [`Pool::call`] is both in one.
//! A caller that stops waiting must also stop the call itself (shut the socket it blocks on:
//! ureq's `Agent::shutdown`), so the helper ends with the turn instead of finishing in the dark;
//! its late result is dropped. [`wait`] is also how MCP callers wait for their reply (their
//! transports' reader threads are per connection, not per call).
//!
//! A pool keeps threads parked between calls: a job goes to an idle parked thread, else to a
//! new one; after its job a thread parks again and exits once it had no work for `idle_for`.
//! That saves a thread spawn per call. Jobs are handed over from the calling thread (a
//! worker); they run on threads named after the pool (`llm-stream`, `tool-net`).
//! [`Pool::stop`] (server stop, or dropping the pool) wakes every parked thread so it exits at
//! once, and [`Pool::join_until`] joins them.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, RecvTimeoutError, Sender};

use super::cancel::CancelToken;

/// Why [`wait`] (or [`Pool::call`]) returned without a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The turn's token was cancelled.
    Cancelled,
    /// The deadline passed.
    Overdue,
    /// The sending side is gone without a result (the job panicked, or could not start).
    Gone,
}

/// Waits for one value on `rx` until `deadline`, waking at once when `cancel` fires. A token
/// already cancelled wins over a value already there: a cancelled turn never takes a late result.
pub fn wait<T>(rx: &Receiver<T>, cancel: Option<&CancelToken>, deadline: Instant) -> Result<T, Stop> {
    let Some(cancel) = cancel else {
        return rx.recv_deadline(deadline).map_err(|e| match e {
            RecvTimeoutError::Timeout => Stop::Overdue,
            RecvTimeoutError::Disconnected => Stop::Gone,
        });
    };
    if cancel.is_cancelled() {
        return Err(Stop::Cancelled);
    }
    select! {
        recv(rx) -> r => match r {
            _ if cancel.is_cancelled() => Err(Stop::Cancelled),
            Ok(v) => Ok(v),
            Err(_) => Err(Stop::Gone),
        },
        recv(cancel.wait_chan()) -> _ => Err(Stop::Cancelled),
        default(deadline.saturating_duration_since(Instant::now())) => Err(Stop::Overdue),
    }
}

pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long a thread that left the idle list too late waits for the job already handed to it.
const HANDOFF: Duration = Duration::from_secs(5);

type Idle = Arc<Mutex<Vec<Sender<Job>>>>;

pub struct Pool {
    name: &'static str,
    stack: usize,
    max_idle: usize,
    idle_for: Duration,
    idle: Idle,
    /// The only sender of the stop channel every parked thread also waits on.
    stop: Mutex<Option<Sender<()>>>,
    stopped: Receiver<()>,
    /// Threads started and not yet seen finished (pruned at each start).
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn lock(idle: &Idle) -> MutexGuard<'_, Vec<Sender<Job>>> {
    idle.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    pub fn new(name: &'static str, stack: usize, max_idle: usize, idle_for: Duration) -> Self {
        let (stop, stopped) = bounded(0);
        Pool {
            name,
            stack,
            max_idle,
            idle_for,
            idle: Arc::new(Mutex::new(Vec::new())),
            stop: Mutex::new(Some(stop)),
            stopped,
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Runs `work` on a pool thread and waits for its result with [`wait`]: `Cancelled` at
    /// once when `cancel` fires (also when it already had), `Overdue` after `limit`. The caller
    /// then stops the work (see the module header); its result is dropped.
    pub fn call<T: Send + 'static>(
        &self,
        cancel: &CancelToken,
        limit: Duration,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Stop> {
        if cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        let (tx, rx) = bounded(1);
        if let Err(e) = self.run(Box::new(move || {
            let _ = tx.send(work());
        })) {
            log::warn!("blocking: cannot start a {} thread: {e}", self.name);
            return Err(Stop::Gone);
        }
        wait(&rx, Some(cancel), Instant::now() + limit)
    }

    /// Runs `job` on a parked thread, or on a new one when none is idle.
    pub fn run(&self, mut job: Job) -> std::io::Result<()> {
        loop {
            let Some(tx) = lock(&self.idle).pop() else { break };
            match tx.send(job) {
                Ok(()) => return Ok(()),
                // That thread exited meanwhile: try the next one.
                Err(e) => job = e.into_inner(),
            }
        }
        let (idle, max_idle, idle_for) = (Arc::clone(&self.idle), self.max_idle, self.idle_for);
        let stopped = self.stopped.clone();
        let handle = thread::Builder::new()
            .name(self.name.into())
            .stack_size(self.stack)
            .spawn(move || park_loop(job, &idle, &stopped, max_idle, idle_for))?;
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        threads.retain(|h| !h.is_finished());
        threads.push(handle);
        Ok(())
    }

    /// Threads parked right now.
    pub fn idle(&self) -> usize {
        lock(&self.idle).len()
    }

    /// The threads' name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Wakes every parked thread so it exits now instead of after `idle_for`; a thread running
    /// a job exits when the job returns. The pool can still run jobs afterwards (on threads that
    /// exit after their job).
    pub fn stop(&self) {
        self.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// After [`Pool::stop`]: joins the pool's threads until `deadline`; returns how
    /// many were still running then.
    pub fn join_until(&self, deadline: Instant) -> usize {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        threads.into_iter().map(|h| super::join::join_until(h, deadline)).filter(Result::is_err).count()
    }
}

fn park_loop(first: Job, idle: &Idle, stopped: &Receiver<()>, max_idle: usize, idle_for: Duration) {
    let mut job = first;
    loop {
        if std::panic::catch_unwind(AssertUnwindSafe(job)).is_err() {
            return;
        }
        let (tx, rx) = bounded::<Job>(1);
        {
            let mut list = lock(idle);
            // Stopped: never park (a disconnected stop channel stays ready).
            if list.len() >= max_idle || stopped.try_recv().is_err_and(|e| e.is_disconnected()) {
                return;
            }
            list.push(tx.clone());
        }
        // Stopped or idle too long: leave, unless a caller already took this thread's sender.
        let next = select! {
            recv(rx) -> j => j.ok(),
            recv(stopped) -> _ => None,
            default(idle_for) => None,
        };
        job = match next {
            Some(j) => j,
            None => {
                let mut list = lock(idle);
                if let Some(i) = list.iter().position(|t| t.same_channel(&tx)) {
                    list.swap_remove(i);
                    return;
                }
                // A caller took this thread's sender before it could leave: its job is coming.
                drop(list);
                match rx.recv_timeout(HANDOFF) {
                    Ok(j) => j,
                    Err(_) => return,
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn wait_for(what: impl Fn() -> bool) {
        for _ in 0..500 {
            if what() {
                return;
            }
            thread::sleep(Duration::from_millis(2));
        }
        panic!("condition not reached");
    }

    #[test]
    fn reuses_parked_threads_and_lets_idle_ones_go() {
        let pool = Pool::new("t-parked", 64 * 1024, 2, Duration::from_millis(200));
        let ran = Arc::new(AtomicUsize::new(0));
        let ids = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5 {
            let (ran2, ids) = (Arc::clone(&ran), Arc::clone(&ids));
            pool.run(Box::new(move || {
                ids.lock().unwrap().push(thread::current().id());
                ran2.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap();
            wait_for(|| ran.load(Ordering::SeqCst) == i + 1 && pool.idle() == 1);
        }
        assert_eq!(ran.load(Ordering::SeqCst), 5);
        let ids = ids.lock().unwrap();
        assert!(ids.iter().all(|id| *id == ids[0]), "one thread ran every job in turn");
        // Idle threads leave.
        wait_for(|| pool.idle() == 0);
        let (tx, rx) = bounded(1);
        pool.run(Box::new(move || tx.send(7).unwrap())).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(7));
    }

    #[test]
    fn stop_wakes_parked_threads_at_once_and_join_collects_them() {
        let pool = Pool::new("t-parked", 64 * 1024, 4, Duration::from_secs(60));
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let ran = Arc::clone(&ran);
            pool.run(Box::new(move || {
                thread::sleep(Duration::from_millis(20));
                ran.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap();
        }
        wait_for(|| ran.load(Ordering::SeqCst) == 3 && pool.idle() == 3);
        let started = Instant::now();
        pool.stop();
        assert_eq!(pool.join_until(Instant::now() + Duration::from_secs(5)), 0);
        assert!(started.elapsed() < Duration::from_secs(1), "parked threads waited out idle_for");
        assert_eq!(pool.idle(), 0);
        // A stopped pool still runs jobs; their threads exit afterwards instead of parking.
        let (tx, rx) = bounded(1);
        pool.run(Box::new(move || tx.send(5).unwrap())).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(5));
        assert_eq!(pool.join_until(Instant::now() + Duration::from_secs(5)), 0);
        assert_eq!(pool.idle(), 0);
    }

    #[test]
    fn concurrent_jobs_all_run_and_idle_is_bounded() {
        let pool = Pool::new("t-parked", 64 * 1024, 3, Duration::from_secs(5));
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..20 {
            let ran = Arc::clone(&ran);
            pool.run(Box::new(move || {
                thread::sleep(Duration::from_millis(20));
                ran.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap();
        }
        wait_for(|| ran.load(Ordering::SeqCst) == 20);
        wait_for(|| pool.idle() == 3);
        // A panicking job takes its thread down but not the pool.
        pool.run(Box::new(|| panic!("job panics"))).unwrap();
        let (tx, rx) = bounded(1);
        pool.run(Box::new(move || tx.send(1).unwrap())).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1));
    }

    #[test]
    fn wait_returns_the_value_or_stops_at_cancel_or_deadline() {
        let (tx, rx) = bounded(1);
        tx.send(3).unwrap();
        let cancel = CancelToken::new();
        assert_eq!(wait(&rx, Some(&cancel), Instant::now() + Duration::from_secs(5)), Ok(3));
        let started = Instant::now();
        assert_eq!(wait(&rx, Some(&cancel), Instant::now() + Duration::from_millis(30)), Err(Stop::Overdue));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(wait(&rx, None, Instant::now() + Duration::from_millis(1)), Err(Stop::Overdue));
        // A value already there is not taken once the token is cancelled.
        tx.send(4).unwrap();
        cancel.cancel();
        assert_eq!(wait(&rx, Some(&cancel), Instant::now() + Duration::from_secs(5)), Err(Stop::Cancelled));
        drop(tx);
        assert_eq!(wait(&rx, None, Instant::now() + Duration::from_secs(5)), Ok(4));
        assert_eq!(wait(&rx, None, Instant::now() + Duration::from_secs(5)), Err(Stop::Gone));
    }

    #[test]
    fn call_returns_at_cancel_while_the_job_still_blocks() {
        let pool = Pool::new("t-blocking", 64 * 1024, 2, Duration::from_secs(5));
        assert_eq!(pool.call(&CancelToken::new(), Duration::from_secs(5), || 9), Ok(9));
        let cancel = CancelToken::new();
        let (release, blocked) = bounded::<()>(0);
        let (entered_tx, entered) = bounded(1);
        let c2 = cancel.clone();
        let waiter = thread::spawn(move || {
            let started = Instant::now();
            let r = pool.call(&c2, Duration::from_secs(30), move || {
                entered_tx.send(()).unwrap();
                let _ = blocked.recv_timeout(Duration::from_secs(10));
                1
            });
            (r, started.elapsed(), pool)
        });
        entered.recv_timeout(Duration::from_secs(5)).unwrap();
        cancel.cancel();
        let (r, took, pool) = waiter.join().unwrap();
        assert_eq!(r, Err(Stop::Cancelled));
        assert!(took < Duration::from_secs(5), "waited for the job: {took:?}");
        // The caller stops the work; the thread then parks again.
        drop(release);
        wait_for(|| pool.idle() == 1);
        // A token cancelled before the call runs nothing.
        let ran = Arc::new(AtomicUsize::new(0));
        let ran2 = Arc::clone(&ran);
        assert_eq!(
            pool.call(&cancel, Duration::from_secs(5), move || ran2.fetch_add(1, Ordering::SeqCst)),
            Err(Stop::Cancelled)
        );
        // Overdue after the limit; a panicking job is `Gone`.
        assert_eq!(
            pool.call(&CancelToken::new(), Duration::from_millis(20), || thread::sleep(Duration::from_millis(300))),
            Err(Stop::Overdue)
        );
        assert_eq!(
            pool.call(&CancelToken::new(), Duration::from_secs(5), || -> u8 { panic!("job panics") }),
            Err(Stop::Gone)
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }
}
