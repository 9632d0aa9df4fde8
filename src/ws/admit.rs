//! Admission of accepted WebSocket connections to their opening handshake, apart from the
//! `CASHCODE_MAX_CLIENTS` budget (which only a completed handshake draws on). A connection is
//! either handed to a handshake thread at once (at most [`MAX_HANDSHAKES`] running, at most
//! [`MAX_HANDSHAKES_PER_PEER`] for one peer), parked (a descriptor and a few bytes, no thread;
//! at most [`MAX_PARKED`], [`MAX_PARKED_PER_PEER`] per peer) until a handshake thread is free
//! for it, or refused at once. A handshake has [`HANDSHAKE_DEADLINE`] from the moment a thread
//! takes it, for the whole of it; a connection parked longer than [`MAX_PARKED_FOR`] is
//! dropped unserved. Parked connections are taken oldest first, and [`MAX_PARKED_FOR`] is
//! longer than the deadline: a connection parked behind handshakes that all started before it
//! always gets a thread, as each of those ends by its deadline.
//!
//! When the waiting room is full, a newcomer from a peer with fewer parked connections than
//! the peer holding the most takes the place of that peer's oldest one, which is closed: a
//! flood from a few addresses (127.0.0.2 to 127.0.0.7 are all loopback) fills the room only
//! until the owner arrives, and never locks the owner out.
//!
//! Why parking rather than refusing past the running cap: a legitimate burst from one address
//! (a reverse proxy, a page opening several sockets, the load benches' thousand clients) must
//! wait a moment, not fail; while one peer that never finishes its handshakes holds only its
//! own share of threads, so another peer's handshake runs at once.
//!
//! [`Gate::admit`] runs on `ws-accept`; [`Gate::finish`] on each `ws-handshake` thread as it
//! ends a handshake (and takes the next parked connection, if any, on the same thread).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::util::sync;

/// The whole opening handshake, from the moment a thread takes it to the `101` written.
pub(crate) const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// Longest wait for a handshake thread.
pub(crate) const MAX_PARKED_FOR: Duration = Duration::from_secs(10);
/// Handshake threads running at one time.
pub(crate) const MAX_HANDSHAKES: usize = 64;
/// Handshake threads running for one peer ([`peer_key`]) at one time.
pub(crate) const MAX_HANDSHAKES_PER_PEER: usize = 16;
/// Connections waiting for a handshake thread, at least (twice `CASHCODE_MAX_CLIENTS` when
/// that is more: [`Limits::for_clients`]).
pub(crate) const MAX_PARKED: usize = 1024;
/// Connections of one peer waiting for a handshake thread, at least (`CASHCODE_MAX_CLIENTS`
/// when that is more).
pub(crate) const MAX_PARKED_PER_PEER: usize = 256;
/// Parked connections asked whether their request head is complete, per handshake ended.
pub(crate) const MAX_READY_CHECKS: usize = 256;

/// The address a peer is counted by: IPv4 (also when mapped into IPv6) as is, IPv6 by its
/// /64, the block one host is usually given.
pub(crate) fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// A connection admitted to its handshake.
#[derive(Debug)]
pub(crate) struct Pending<T> {
    pub(crate) item: T,
    pub(crate) peer: IpAddr,
    /// The end of the whole handshake (taken by a thread + [`HANDSHAKE_DEADLINE`]); while
    /// parked, the end of the wait.
    pub(crate) deadline: Instant,
}

/// Which limit refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// This peer has [`MAX_PARKED_PER_PEER`] waiting.
    Peer,
    /// [`MAX_PARKED`] are waiting.
    All,
}

impl Full {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Full::Peer => "peer",
            Full::All => "all",
        }
    }
}

#[derive(Debug)]
pub(crate) enum Admit<T> {
    /// Start a handshake thread for it now.
    Run(Pending<T>),
    /// Waiting; a finishing handshake thread takes it ([`Gate::finish`]).
    Parked,
    /// Waiting in the place of an older parked connection of the peer that had the most
    /// parked, which is handed back to be closed.
    Displaced(T, IpAddr),
    /// Close it at once.
    Refused(T, Full),
}

/// The limits, as numbers so unit tests can use small ones.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) running: usize,
    pub(crate) running_per_peer: usize,
    pub(crate) parked: usize,
    pub(crate) parked_per_peer: usize,
    pub(crate) deadline: Duration,
    pub(crate) parked_for: Duration,
}

impl Limits {
    pub(crate) const DEFAULT: Limits = Limits {
        running: MAX_HANDSHAKES,
        running_per_peer: MAX_HANDSHAKES_PER_PEER,
        parked: MAX_PARKED,
        parked_per_peer: MAX_PARKED_PER_PEER,
        deadline: HANDSHAKE_DEADLINE,
        parked_for: MAX_PARKED_FOR,
    };

    /// The limits for a server admitting `max_clients` clients: the waiting room grows with the
    /// client budget, so a burst of legitimate clients from one address up to
    /// `CASHCODE_MAX_CLIENTS` (a local script, the load benches, a reverse proxy) waits for a
    /// handshake thread rather than being refused; a parked connection costs one descriptor and
    /// no thread.
    pub(crate) fn for_clients(max_clients: usize) -> Limits {
        Limits {
            parked: MAX_PARKED.max(max_clients.saturating_mul(2)),
            parked_per_peer: MAX_PARKED_PER_PEER.max(max_clients),
            ..Limits::DEFAULT
        }
    }
}

struct State<T> {
    running: HashMap<IpAddr, usize>,
    running_total: usize,
    parked: VecDeque<Pending<T>>,
    parked_per_peer: HashMap<IpAddr, usize>,
}

/// The handshake admission state shared by `ws-accept` and the handshake threads.
pub(crate) struct Gate<T> {
    limits: Limits,
    state: Mutex<State<T>>,
}

fn dec(map: &mut HashMap<IpAddr, usize>, peer: &IpAddr) {
    if let Some(n) = map.get_mut(peer) {
        *n -= 1;
        if *n == 0 {
            map.remove(peer);
        }
    }
}

impl<T> State<T> {
    fn has_room(&self, limits: &Limits, peer: &IpAddr) -> bool {
        self.running_total < limits.running && self.running.get(peer).copied().unwrap_or(0) < limits.running_per_peer
    }

    fn start(&mut self, peer: IpAddr) {
        self.running_total += 1;
        *self.running.entry(peer).or_default() += 1;
    }

    /// Drops parked connections whose deadline passed (closing them).
    fn sweep(&mut self, now: Instant) {
        if !self.parked.iter().any(|p| p.deadline <= now) {
            return;
        }
        let mut kept = VecDeque::with_capacity(self.parked.len());
        for p in self.parked.drain(..) {
            if p.deadline <= now {
                dec(&mut self.parked_per_peer, &p.peer);
            } else {
                kept.push_back(p);
            }
        }
        self.parked = kept;
    }
}

impl<T> Gate<T> {
    pub(crate) fn new(limits: Limits) -> Self {
        Gate {
            limits,
            state: Mutex::new(State {
                running: HashMap::new(),
                running_total: 0,
                parked: VecDeque::new(),
                parked_per_peer: HashMap::new(),
            }),
        }
    }

    /// A connection just accepted from `peer` (a [`peer_key`]) at `now`.
    pub(crate) fn admit(&self, item: T, peer: IpAddr, now: Instant) -> Admit<T> {
        let mut s = sync::lock(&self.state);
        s.sweep(now);
        if s.has_room(&self.limits, &peer) {
            s.start(peer);
            return Admit::Run(Pending { item, peer, deadline: now + self.limits.deadline });
        }
        let pending = Pending { item, peer, deadline: now + self.limits.parked_for };
        if s.parked_per_peer.get(&peer).copied().unwrap_or(0) >= self.limits.parked_per_peer {
            return Admit::Refused(pending.item, Full::Peer);
        }
        let mut displaced = None;
        if s.parked.len() >= self.limits.parked {
            let mine = s.parked_per_peer.get(&peer).copied().unwrap_or(0);
            let busiest = s.parked_per_peer.iter().max_by_key(|(_, n)| **n).map(|(p, n)| (*p, *n));
            match busiest {
                // Only a peer with at least two more than the newcomer's gives up a place, so
                // two peers never take turns displacing each other.
                Some((top, n)) if n > mine + 1 => {
                    let i =
                        s.parked.iter().position(|p| p.peer == top).expect("a parked connection of the peer counted");
                    let old = s.parked.remove(i).expect("in range");
                    dec(&mut s.parked_per_peer, &top);
                    displaced = Some((old.item, top));
                }
                _ => return Admit::Refused(pending.item, Full::All),
            }
        }
        *s.parked_per_peer.entry(peer).or_default() += 1;
        s.parked.push_back(pending);
        match displaced {
            Some((item, from)) => Admit::Displaced(item, from),
            None => Admit::Parked,
        }
    }

    /// A handshake for `peer` ended (or its thread never started); returns the parked
    /// connection to serve next, already counted as running: among those whose peer has room,
    /// the oldest that is `ready` (its whole request head has arrived, so its handshake takes
    /// microseconds; at most [`MAX_READY_CHECKS`] are asked), else the oldest. So an owner
    /// whose browser sent its head at once is not kept waiting behind connections that
    /// trickle theirs, even from the same address.
    pub(crate) fn finish(&self, peer: IpAddr, now: Instant, mut ready: impl FnMut(&T) -> bool) -> Option<Pending<T>> {
        let mut s = sync::lock(&self.state);
        s.running_total = s.running_total.saturating_sub(1);
        dec(&mut s.running, &peer);
        s.sweep(now);
        let i = {
            let mut eligible = s.parked.iter().enumerate().filter(|(_, p)| s.has_room(&self.limits, &p.peer));
            let first = eligible.next()?.0;
            std::iter::once(first)
                .chain(eligible.map(|(i, _)| i))
                .take(MAX_READY_CHECKS)
                .find(|&i| ready(&s.parked[i].item))
                .unwrap_or(first)
        };
        let mut next = s.parked.remove(i)?;
        dec(&mut s.parked_per_peer, &next.peer);
        s.start(next.peer);
        next.deadline = now + self.limits.deadline;
        Some(next)
    }

    /// Drops every parked connection (at stop).
    pub(crate) fn clear(&self) {
        let mut s = sync::lock(&self.state);
        s.parked.clear();
        s.parked_per_peer.clear();
    }

    /// (running, parked), for logs and tests.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let s = sync::lock(&self.state);
        (s.running_total, s.parked.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Limits = Limits {
        running: 4,
        running_per_peer: 2,
        parked: 5,
        parked_per_peer: 3,
        deadline: Duration::from_secs(5),
        parked_for: Duration::from_secs(10),
    };

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn run<T: std::fmt::Debug>(a: Admit<T>) -> Pending<T> {
        match a {
            Admit::Run(p) => p,
            other => panic!("expected Run, got {other:?}"),
        }
    }

    #[test]
    fn peers_are_counted_by_ipv4_address_or_ipv6_slash_64() {
        assert_eq!(peer_key(ip("10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(peer_key(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(peer_key(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(peer_key(ip("2001:db8:1:2:bbbb::9")), peer_key(ip("2001:db8:1:2::77")));
        assert_ne!(peer_key(ip("2001:db8:1:3::1")), peer_key(ip("2001:db8:1:2::1")));
    }

    /// One peer gets its share of running handshakes, then parks, then is refused; another
    /// peer still runs at once; finishing hands the oldest eligible parked connection over.
    #[test]
    fn one_peer_cannot_take_every_handshake_and_parked_ones_run_in_order() {
        let g = Gate::new(SMALL);
        let now = Instant::now();
        let (a, b, c) = (ip("127.0.0.2"), ip("127.0.0.1"), ip("127.0.0.3"));
        let a1 = run(g.admit("a1", a, now));
        let _a2 = run(g.admit("a2", a, now));
        for n in ["a3", "a4", "a5"] {
            assert!(matches!(g.admit(n, a, now), Admit::Parked), "{n}");
        }
        assert!(matches!(g.admit("a6", a, now), Admit::Refused("a6", Full::Peer)));
        let b1 = run(g.admit("b1", b, now));
        let _b2 = run(g.admit("b2", b, now));
        assert_eq!(g.counts(), (4, 3));
        // Everything running: b and c park behind a; the park is full after c1. c2 takes
        // the place of a's oldest (a has 3 parked, c 1); then c3 is refused (a 2, c 2).
        assert!(matches!(g.admit("b3", b, now), Admit::Parked));
        assert!(matches!(g.admit("c1", c, now), Admit::Parked));
        assert!(matches!(g.admit("c2", c, now), Admit::Displaced("a3", p) if p == a));
        assert!(matches!(g.admit("c3", c, now), Admit::Refused("c3", Full::All)));
        // a1 ends: the oldest parked that fits is a4 (a has room again).
        let next = g.finish(a1.peer, now, |_| false).expect("a4 runs");
        assert_eq!((next.item, next.peer), ("a4", a));
        // b1 ends: b has room, a does not (a2, a3 run) -> b3, not a4.
        assert_eq!(g.finish(b1.peer, now, |_| false).expect("b3 runs").item, "b3");
        assert_eq!(g.counts(), (4, 3));
    }

    #[test]
    fn a_connection_parked_too_long_is_dropped_unserved_and_a_taken_one_gets_the_whole_deadline() {
        let g = Gate::new(SMALL);
        let t0 = Instant::now();
        let p = ip("127.0.0.2");
        let first = run(g.admit(1, p, t0));
        assert_eq!(first.deadline, t0 + SMALL.deadline);
        run(g.admit(2, p, t0));
        assert!(matches!(g.admit(3, p, t0), Admit::Parked));
        assert!(matches!(g.admit(4, p, t0 + Duration::from_secs(3)), Admit::Parked));
        // At t0 + 11 s, 3 has waited past `parked_for`; 4 (parked at 3 s) has not, and its
        // handshake gets the whole deadline from now.
        let later = t0 + Duration::from_secs(11);
        let four = g.finish(p, later, |_| false).expect("4 runs");
        assert_eq!((four.item, four.deadline), (4, later + SMALL.deadline));
        assert_eq!(g.counts(), (2, 0));
        for n in [5, 6, 7] {
            assert!(matches!(g.admit(n, p, later), Admit::Parked));
        }
        assert_eq!(g.counts(), (2, 3));
        // Expired ones are swept on admit too, freeing the peer's parking.
        assert!(matches!(g.admit(8, p, later + Duration::from_secs(11)), Admit::Parked));
        assert_eq!(g.counts(), (2, 1));
        g.clear();
        assert_eq!(g.counts().1, 0);
    }

    /// A parked connection whose head has arrived goes before older ones still trickling
    /// theirs, from the same peer too; without one, the oldest goes.
    #[test]
    fn a_parked_connection_with_its_head_complete_goes_first() {
        let g = Gate::new(SMALL);
        let now = Instant::now();
        let p = ip("127.0.0.2");
        let t1 = run(g.admit("trickle-1", p, now));
        let t2 = run(g.admit("trickle-2", p, now));
        for n in ["trickle-3", "owner", "trickle-4"] {
            assert!(matches!(g.admit(n, p, now), Admit::Parked));
        }
        let next = g.finish(t1.peer, now, |item| *item == "owner").expect("one runs");
        assert_eq!(next.item, "owner");
        let next = g.finish(t2.peer, now, |_| false).expect("one runs");
        assert_eq!(next.item, "trickle-3");
    }

    /// Six flooding addresses fill the waiting room; the owner's address still gets a place,
    /// each time at the expense of the peer holding the most.
    #[test]
    fn a_flood_from_several_addresses_never_keeps_another_peer_out_of_the_waiting_room() {
        let limits = Limits { running: 2, running_per_peer: 1, parked: 12, parked_per_peer: 4, ..SMALL };
        let g = Gate::new(limits);
        let now = Instant::now();
        let flood: Vec<IpAddr> = (2..8).map(|i| ip(&format!("127.0.0.{i}"))).collect();
        let mut refused = 0;
        for round in 0..10 {
            for f in &flood {
                match g.admit(round, *f, now) {
                    Admit::Run(_) | Admit::Parked | Admit::Displaced(..) => {}
                    Admit::Refused(..) => refused += 1,
                }
            }
        }
        assert!(refused > 0, "the flood overflows the room");
        assert_eq!(g.counts(), (2, 12));
        // The owner gets a place (a browser needs one socket) at the expense of a flooder
        // holding two; a second would take the owner past a fair share and is refused.
        let owner = ip("127.0.0.1");
        assert!(matches!(g.admit(100, owner, now), Admit::Displaced(..)));
        assert!(matches!(g.admit(101, owner, now), Admit::Refused(101, Full::All)));
        assert_eq!(g.counts(), (2, 12));
        // The flood goes on: flooders displace only each other, never the owner's place.
        for f in &flood {
            let _ = g.admit(200, *f, now);
        }
        let next = (0..2).filter_map(|_| g.finish(flood[0], now, |item| *item == 100)).map(|p| p.item).next();
        assert_eq!(next, Some(100), "the owner's parked connection is still there and goes first");
    }

    #[test]
    fn finishing_without_parked_connections_frees_the_slot() {
        let g = Gate::new(SMALL);
        let now = Instant::now();
        let p = ip("127.0.0.2");
        let a = run(g.admit((), p, now));
        let _b = run(g.admit((), p, now));
        assert!(g.finish(a.peer, now, |_| false).is_none());
        assert_eq!(g.counts(), (1, 0));
        run(g.admit((), p, now));
    }
}
