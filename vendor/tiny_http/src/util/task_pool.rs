use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

/// Manages a collection of threads.
///
/// A new thread is created every time all the existing threads are full.
/// Any idle thread will automatically die after a few seconds.
pub struct TaskPool {
    sharing: Arc<Sharing>,
    // (cashcode patch)
    stack_size: usize,
}

struct Sharing {
    // list of the tasks to be done by worker threads
    todo: Mutex<VecDeque<Box<dyn FnMut() + Send>>>,

    // condvar that will be notified whenever a task is added to `todo`
    condvar: Condvar,

    // number of total worker threads running
    active_tasks: AtomicUsize,

    // number of idle worker threads
    waiting_tasks: AtomicUsize,
}

/// Minimum number of active threads.
static MIN_THREADS: usize = 4;

/// (cashcode patch) Stack of a connection thread: it parses heads and hands requests over.
const STACK_SIZE: usize = 512 * 1024;

struct Registration<'a> {
    nb: &'a AtomicUsize,
}

impl<'a> Registration<'a> {
    fn new(nb: &'a AtomicUsize) -> Registration<'a> {
        nb.fetch_add(1, Ordering::Release);
        Registration { nb }
    }
}

impl<'a> Drop for Registration<'a> {
    fn drop(&mut self) {
        self.nb.fetch_sub(1, Ordering::Release);
    }
}

impl TaskPool {
    pub fn new() -> TaskPool {
        Self::with_stack_size(STACK_SIZE)
    }

    /// (cashcode patch) A pool whose threads get `stack_size` bytes of stack.
    fn with_stack_size(stack_size: usize) -> TaskPool {
        let pool = TaskPool {
            sharing: Arc::new(Sharing {
                todo: Mutex::new(VecDeque::new()),
                condvar: Condvar::new(),
                active_tasks: AtomicUsize::new(0),
                waiting_tasks: AtomicUsize::new(0),
            }),
            stack_size,
        };

        for _ in 0..MIN_THREADS {
            // (cashcode patch) a pool short of threads starts them as tasks come
            let _ = pool.add_thread(None);
        }

        pool
    }

    /// Executes a function in a thread.
    /// If no thread is available, spawns a new one.
    ///
    /// (cashcode patch) When that thread cannot be started (a thread or memory limit), the
    /// error is returned and `code` is dropped without running; the pool stays usable.
    /// Upstream panicked while holding the queue's lock, which ended the accept thread and
    /// poisoned the lock for every connection thread.
    pub fn spawn(&self, code: Box<dyn FnMut() + Send>) -> io::Result<()> {
        let mut queue = self
            .sharing
            .todo
            .lock()
            .unwrap_or_else(PoisonError::into_inner);

        // (cashcode patch) A woken thread counts as waiting until it has taken its task, so
        // only the waiting threads beyond the queued tasks are free: comparing with 0 left a
        // burst of connections queued behind busy ones until one of those ended.
        if self.sharing.waiting_tasks.load(Ordering::Acquire) <= queue.len() {
            self.add_thread(Some(code))
        } else {
            queue.push_back(code);
            self.sharing.condvar.notify_one();
            Ok(())
        }
    }

    fn add_thread(&self, initial_fn: Option<Box<dyn FnMut() + Send>>) -> io::Result<()> {
        let sharing = self.sharing.clone();

        let builder = thread::Builder::new()
            .name("http-conn".into())
            .stack_size(self.stack_size);
        builder.spawn(move || {
            let sharing = sharing;
            let _active_guard = Registration::new(&sharing.active_tasks);

            if let Some(mut f) = initial_fn {
                f();
            }

            loop {
                let mut task: Box<dyn FnMut() + Send> = {
                    let mut todo = sharing.todo.lock().unwrap_or_else(PoisonError::into_inner);

                    let task;
                    loop {
                        if let Some(poped_task) = todo.pop_front() {
                            task = poped_task;
                            break;
                        }
                        let _waiting_guard = Registration::new(&sharing.waiting_tasks);

                        let received =
                            if sharing.active_tasks.load(Ordering::Acquire) <= MIN_THREADS {
                                todo = sharing
                                    .condvar
                                    .wait(todo)
                                    .unwrap_or_else(PoisonError::into_inner);
                                true
                            } else {
                                let (new_lock, waitres) = sharing
                                    .condvar
                                    .wait_timeout(todo, Duration::from_millis(5000))
                                    .unwrap_or_else(PoisonError::into_inner);
                                todo = new_lock;
                                !waitres.timed_out()
                            };

                        if !received && todo.is_empty() {
                            return;
                        }
                    }

                    task
                };

                task();
            }
        })?;
        Ok(())
    }
}

impl Drop for TaskPool {
    fn drop(&mut self) {
        self.sharing
            .active_tasks
            .store(999_999_999, Ordering::Release);
        self.sharing.condvar.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::TaskPool;
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::channel;
    use std::time::{Duration, Instant};

    // (cashcode patch)
    #[test]
    fn a_burst_of_long_tasks_all_start() {
        let pool = TaskPool::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.sharing.waiting_tasks.load(Ordering::Acquire) < 4 {
            assert!(
                Instant::now() < deadline,
                "the pool's threads never became idle"
            );
            std::thread::yield_now();
        }
        let (started, starts) = channel();
        let (release, released) = channel::<()>();
        let released = std::sync::Arc::new(std::sync::Mutex::new(released));
        for i in 0..16 {
            let (started, released) = (started.clone(), released.clone());
            let _ = pool.spawn(Box::new(move || {
                started.send(i).unwrap();
                // Holds its thread like a connection that stays open.
                let _ = released
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(30));
            }));
        }
        for _ in 0..16 {
            let left = deadline.saturating_duration_since(Instant::now());
            starts
                .recv_timeout(left)
                .expect("a task waited behind busy threads");
        }
        drop(release);
    }

    // (cashcode patch) A thread that cannot be started (here: a stack no address space
    // holds) is an error for that one task, which is dropped unrun; the pool goes on.
    #[test]
    fn a_thread_that_cannot_start_drops_its_task_and_the_pool_goes_on() {
        let pool = TaskPool::with_stack_size(usize::MAX / 2);
        assert_eq!(pool.sharing.active_tasks.load(Ordering::Acquire), 0);
        let (dropped, was_dropped) = channel::<()>();
        let (ran, has_run) = channel::<()>();
        let err = pool
            .spawn(Box::new(move || {
                let _keep = &dropped;
                ran.send(()).unwrap();
            }))
            .expect_err("a thread with that stack cannot start");
        assert!(!err.to_string().is_empty());
        assert!(has_run.try_recv().is_err(), "the task ran");
        // The task's captures were dropped with it (a connection would be closed).
        assert_eq!(
            was_dropped.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        );
        let mut pool = pool;
        pool.stack_size = 64 * 1024;
        let (done, is_done) = channel();
        pool.spawn(Box::new(move || done.send(()).unwrap()))
            .expect("the pool starts threads again");
        is_done
            .recv_timeout(Duration::from_secs(5))
            .expect("the task ran");
    }
}
