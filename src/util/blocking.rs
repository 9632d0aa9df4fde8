//! The one pattern for a blocking call that must not hold up, or outlive, its turn:
//! [`interruptible`] runs it on the thread that needs its result (a worker), bounded by its own
//! timeouts, and while it runs the turn's [`CancelToken`] holds a closer
//! ([`CancelToken::on_cancel`]) that shuts the socket it blocks on (ureq's `Agent::shutdown`),
//! so cancel makes it return at once: model streams (`llm::client`) and the web tools. A
//! reply that another thread reads (an MCP transport's reader, per connection) is waited for
//! with [`wait`], which returns at the first of the reply, the token or a deadline.

use std::time::Instant;

use crossbeam_channel::{select, Receiver, RecvTimeoutError};

use super::cancel::CancelToken;

/// Why [`wait`] returned without a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The turn's token was cancelled.
    Cancelled,
    /// The deadline passed.
    Overdue,
    /// The sending side is gone without a result (its reader ended).
    Gone,
}

/// Runs `call` on this thread; a cancel meanwhile shuts `agent`, closing the socket under a
/// read still waiting. `None` when the token is cancelled by the time `call` returns: what a
/// shut socket made it return (an error, or a body cut short) is never a result.
pub(crate) fn interruptible<T>(cancel: &CancelToken, agent: &ureq::Agent, call: impl FnOnce() -> T) -> Option<T> {
    let out = {
        let closing = agent.clone();
        let _closer = cancel.on_cancel(move || closing.shutdown());
        call()
    };
    (!cancel.is_cancelled()).then_some(out)
}

/// Waits for one value on `rx` until `deadline`, waking at once when `cancel` fires. A token
/// already cancelled wins over a value already there: a cancelled turn never takes a late result.
pub(crate) fn wait<T>(rx: &Receiver<T>, cancel: Option<&CancelToken>, deadline: Instant) -> Result<T, Stop> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;
    use std::time::Duration;

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
}
