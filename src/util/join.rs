//! Joining a thread with a deadline: std's `join` waits forever, and server stop must not (a
//! thread blocked past the deadline is reported by name and left to end with the process).
//! Called by whichever thread is stopping others.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a waiting join looks again (threads usually end well within a millisecond of
/// being told to; a coarser poll would make an idle stop measurably slower).
const POLL: Duration = Duration::from_millis(1);

/// Joins `h` if it ends before `deadline`; otherwise returns its name (still running).
pub(crate) fn join_until(h: JoinHandle<()>, deadline: Instant) -> Result<(), String> {
    while !h.is_finished() && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    if h.is_finished() {
        // A panic in it was already reported by the panic hook.
        let _ = h.join();
        Ok(())
    } else {
        Err(h.thread().name().unwrap_or("unnamed").to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_a_finished_thread_and_names_a_running_one() {
        let done = std::thread::Builder::new().name("t-done".into()).spawn(|| {}).unwrap();
        assert_eq!(join_until(done, Instant::now() + Duration::from_secs(5)), Ok(()));
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let blocked = std::thread::Builder::new()
            .name("t-blocked".into())
            .spawn(move || {
                let _ = rx.recv();
            })
            .unwrap();
        assert_eq!(join_until(blocked, Instant::now() + Duration::from_millis(20)), Err("t-blocked".to_string()));
        drop(tx);
    }
}
