//! How many HTTP connections the server keeps open, in all and from one peer: the settings
//! (`CASHCODE_MAX_HTTP_CONNECTIONS`, `CASHCODE_MAX_HTTP_CONNECTIONS_PER_PEER`) checked once at
//! start-up, on the main thread, against the open-files limit (`RLIMIT_NOFILE`, whose soft
//! limit `net::raise_nofile_limit` has already raised as far as the hard one allows). The
//! vendored tiny_http's accept thread enforces them ([`super::connection_config`]).

use nix::sys::resource::{getrlimit, Resource};

/// Descriptors kept out of the HTTP share whatever the limit: listeners, log files, stdio,
/// files being read or written, MCP and `exec` child pipes, the LLM's sockets.
const RESERVED_FDS: u64 = 128;
/// HTTP connections get at most this fraction (1/n) of the descriptors above
/// [`RESERVED_FDS`]; the rest stays for WebSocket clients (one or two each), MCP servers
/// and files. Each HTTP connection holds one descriptor while open.
const HTTP_SHARE: u64 = 4;

/// The connection limits in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) max_per_peer: usize,
}

/// The configured limits, lowered to fit `nofile` (the soft open-files limit) when they do
/// not: the total to its HTTP share, the per-peer limit in proportion (so that one peer can
/// still take only its part). Returns the limits and whether they were lowered.
pub(crate) fn fit(configured: Limits, nofile: Option<u64>) -> (Limits, bool) {
    let Some(nofile) = nofile else { return (configured, false) };
    let share = usize::try_from(nofile.saturating_sub(RESERVED_FDS) / HTTP_SHARE).unwrap_or(usize::MAX).max(1);
    if configured.max_connections <= share {
        return (configured, false);
    }
    let max_connections = share;
    let scaled = (configured.max_per_peer as u128 * share as u128 / configured.max_connections as u128) as usize;
    let max_per_peer = scaled.clamp(1, max_connections);
    (Limits { max_connections, max_per_peer }, true)
}

/// The limits for this process: `configured` checked against `RLIMIT_NOFILE`, with one log
/// line saying what is in force (a warning when it had to be lowered).
pub(crate) fn for_process(configured: Limits) -> Limits {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => (Some(soft), Some(hard)),
        Err(_) => (None, None),
    };
    // RLIM_INFINITY is u64::MAX: no lowering.
    let (limits, lowered) = fit(configured, soft);
    let show = |v: Option<u64>| v.map_or_else(|| "unknown".to_string(), |v| v.to_string());
    if lowered {
        log::warn!(
            "event=http.connection_limits max_connections={} max_per_peer={} configured_max_connections={} configured_max_per_peer={} nofile_soft={} nofile_hard={} lowered=true (raise the open-files limit to keep the configured ones)",
            limits.max_connections,
            limits.max_per_peer,
            configured.max_connections,
            configured.max_per_peer,
            show(soft),
            show(hard)
        );
    } else {
        log::info!(
            "event=http.connection_limits max_connections={} max_per_peer={} nofile_soft={} nofile_hard={} lowered=false",
            limits.max_connections,
            limits.max_per_peer,
            show(soft),
            show(hard)
        );
    }
    limits
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Limits = Limits { max_connections: 512, max_per_peer: 128 };

    #[test]
    fn limits_that_fit_are_kept() {
        assert_eq!(fit(DEFAULT, None), (DEFAULT, false));
        assert_eq!(fit(DEFAULT, Some(u64::MAX)), (DEFAULT, false));
        assert_eq!(fit(DEFAULT, Some(1 << 20)), (DEFAULT, false));
        // 128 reserved + 4 x 512.
        assert_eq!(fit(DEFAULT, Some(128 + 4 * 512)), (DEFAULT, false));
    }

    #[test]
    fn limits_over_the_descriptor_share_are_lowered_in_proportion() {
        assert_eq!(fit(DEFAULT, Some(128 + 4 * 512 - 1)), (Limits { max_connections: 511, max_per_peer: 127 }, true));
        // prlimit --nofile=256: 32 connections, 8 from one peer.
        assert_eq!(fit(DEFAULT, Some(256)), (Limits { max_connections: 32, max_per_peer: 8 }, true));
        // The common soft limit where the hard one cannot be raised.
        assert_eq!(fit(DEFAULT, Some(1024)), (Limits { max_connections: 224, max_per_peer: 56 }, true));
        // A per-peer limit equal to the total (one reverse proxy) stays equal to it.
        let proxy = Limits { max_connections: 512, max_per_peer: 512 };
        assert_eq!(fit(proxy, Some(256)), (Limits { max_connections: 32, max_per_peer: 32 }, true));
        // Never below one.
        assert_eq!(fit(DEFAULT, Some(20)), (Limits { max_connections: 1, max_per_peer: 1 }, true));
    }
}
