//! Lock acquisition that recovers from poisoning, the one policy for every `Mutex` and `RwLock`
//! in the server. Any thread.
//!
//! Why poison is recovered rather than propagated: a panic while a guard was held is caught
//! by the request's or job's `catch_unwind` (or ends only its own thread), and the server goes
//! on serving. Every value behind these locks is kept valid between statements (maps, counters,
//! queues, caches, handles), so the worst a panicking holder leaves is a half-done update of
//! one entry, never memory unsafety. Propagating the poison instead would turn one failed
//! request into a panic in every later user of that lock: the whole chat, hub or service
//! would be dead until restart.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// `m.lock()`, taking the guard even when an earlier holder panicked.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `l.read()`, taking the guard even when an earlier writer panicked.
pub(crate) fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// `l.write()`, taking the guard even when an earlier writer panicked.
pub(crate) fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// `cv.wait_timeout(guard, dur)`, the guard back even when the mutex was poisoned meanwhile;
/// whether the wait timed out is left to the caller's own deadline.
pub(crate) fn wait_timeout<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>, dur: Duration) -> MutexGuard<'a, T> {
    cv.wait_timeout(guard, dur).unwrap_or_else(PoisonError::into_inner).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_is_still_served() {
        let m = Arc::new(Mutex::new(1));
        let l = Arc::new(RwLock::new(1));
        let (m2, l2) = (Arc::clone(&m), Arc::clone(&l));
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().expect("first holder");
            let _w = l2.write().expect("first writer");
            panic!("poison both");
        })
        .join();
        assert!(m.is_poisoned() && l.is_poisoned());
        *lock(&m) += 1;
        *write(&l) += 1;
        assert_eq!((*lock(&m), *read(&l)), (2, 2));
        let cv = Condvar::new();
        assert_eq!(*wait_timeout(&cv, lock(&m), Duration::from_millis(1)), 2);
    }
}
