//! Which addresses outbound requests may connect to (the SSRF guard of `web_fetch` and of MCP
//! OAuth): a pure classifier of IPv4/IPv6 addresses (loopback, private, link-local, CGNAT,
//! unique-local, multicast, reserved, and the IPv6 forms that embed such an IPv4 address), and
//! ureq [`Resolver`]s that resolve a host, drop every refused address and hand ureq only the
//! ones they checked, so the connection goes to exactly what was checked (no DNS-rebinding
//! gap): [`GuardedResolver`] for `web_fetch`, [`PeerResolver`] for requests made on an MCP
//! server's behalf. Runs on the thread making the request (the web_fetch helper, an MCP
//! transport or `http-slow` thread).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;

use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// Why an address is not reachable through `web_fetch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// `0.0.0.0/8`, `::` (connecting to them reaches this host).
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `169.254/16` (the cloud metadata address among them), `fe80::/10`.
    LinkLocal,
    /// Carrier-grade NAT, `100.64.0.0/10`.
    SharedCgnat,
    /// `fc00::/7`, and the deprecated site-local `fec0::/10`.
    UniqueLocal,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// Documentation, benchmarking, protocol-assignment and future-use ranges; IPv6 outside
    /// the global unicast `2000::/3`.
    Reserved,
    /// Any address but loopback, for a plain `http://` request that may only stay on this
    /// host (never returned by [`classify`]).
    Cleartext,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Blocked::Unspecified => "an unspecified (this-host) address",
            Blocked::Loopback => "a loopback address",
            Blocked::Private => "a private-network address",
            Blocked::LinkLocal => "a link-local address (this includes the cloud metadata service)",
            Blocked::SharedCgnat => "a carrier-grade NAT address",
            Blocked::UniqueLocal => "a unique-local (private IPv6) address",
            Blocked::Multicast => "a multicast address",
            Blocked::Broadcast => "the broadcast address",
            Blocked::Reserved => "a reserved, non-public address",
            Blocked::Cleartext => "not a loopback address, and plain http goes to loopback only",
        })
    }
}

/// `None` for a public internet address, else why it is refused. IPv6 forms that carry an
/// IPv4 address (mapped, compatible, SIIT, NAT64, 6to4, Teredo) are judged by that address.
pub(crate) fn classify(ip: IpAddr) -> Option<Blocked> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Blocked> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => Blocked::Unspecified,
        (127, _, _) => Blocked::Loopback,
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Blocked::Private,
        (169, 254, _) => Blocked::LinkLocal,
        (100, 64..=127, _) => Blocked::SharedCgnat,
        _ if ip.is_broadcast() => Blocked::Broadcast,
        (224..=239, _, _) => Blocked::Multicast,
        // 192.0.0/24 protocol assignments, 192.0.2/24 + 198.51.100/24 + 203.0.113/24
        // documentation, 198.18/15 benchmarking, 240/4 future use.
        (192, 0, 0) | (192, 0, 2) | (198, 18..=19, _) | (198, 51, 100) | (203, 0, 113) | (240..=255, _, _) => {
            Blocked::Reserved
        }
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Blocked> {
    let s = ip.segments();
    let low_v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if ip.is_unspecified() {
        return Some(Blocked::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Blocked::Loopback);
    }
    match s {
        // IPv4-compatible ::a.b.c.d, IPv4-mapped ::ffff:a.b.c.d, SIIT ::ffff:0:a.b.c.d,
        // NAT64 64:ff9b::a.b.c.d: the IPv4 address decides.
        [0, 0, 0, 0, 0, 0, _, _] | [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => {
            return classify_v4(low_v4)
        }
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => return classify_v4(low_v4),
        // Local-use NAT64 (RFC 8215) translates into the operator's own networks.
        [0x64, 0xff9b, 1, ..] => return Some(Blocked::Reserved),
        // 6to4 2002:aabb:ccdd::/48 carries a.b.c.d.
        [0x2002, hi, lo, ..] => {
            return classify_v4(Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8));
        }
        // Teredo 2001:0::/32: the client's IPv4 address is stored inverted in the last 32 bits.
        [0x2001, 0, ..] => return classify_v4(Ipv4Addr::from(!u32::from(low_v4))),
        _ => {}
    }
    Some(match s[0] {
        0xfc00..=0xfdff => Blocked::UniqueLocal,
        0xfe80..=0xfebf => Blocked::LinkLocal,
        0xfec0..=0xfeff => Blocked::UniqueLocal,
        0xff00..=0xffff => Blocked::Multicast,
        // Documentation 2001:db8::/32 and 3fff::/20, ORCHID 2001:10::/28 and 2001:20::/28,
        // benchmarking 2001:2::/48.
        0x2001 if s[1] == 0xdb8 || (0x10..=0x2f).contains(&s[1]) || (s[1] == 2 && s[2] == 0) => Blocked::Reserved,
        0x3fff if s[1] <= 0x0fff => Blocked::Reserved,
        0x2000..=0x3fff => return None,
        // Everything else outside global unicast 2000::/3 (e.g. the 100::/64 discard prefix).
        _ => Blocked::Reserved,
    })
}

/// An IPv4 address in any spelling `inet_aton` accepts: one to four parts, each decimal,
/// octal (leading `0`) or hex (`0x`), the last part filling the remaining bytes, so
/// `2130706433`, `0x7f.1`, `0177.0.0.1` and `127.1` are all 127.0.0.1. Parsing these ourselves
/// makes the check independent of how the C library would read them.
pub(crate) fn parse_ipv4_loose(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(4);
    for p in &parts {
        let (digits, radix) = match p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            Some(hex) => (hex, 16),
            None if p.len() > 1 && p.starts_with('0') => (&p[1..], 8),
            None => (*p, 10),
        };
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            return None;
        }
        nums.push(u32::from_str_radix(digits, radix).ok()?);
    }
    let (last, head) = nums.split_last()?;
    if head.iter().any(|&n| n > 255) {
        return None;
    }
    let tail_bits = 8 * (4 - head.len() as u32);
    if tail_bits < 32 && *last >> tail_bits != 0 {
        return None;
    }
    let value = head.iter().enumerate().fold(0u32, |acc, (i, &n)| acc | (n << (24 - 8 * i as u32))) | last;
    Some(Ipv4Addr::from(value))
}

/// Which resolved addresses `web_fetch` may connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddrPolicy {
    /// Public internet addresses only (the default).
    PublicOnly,
    /// Every address (`CASHCODE_WEB_FETCH_ALLOW_PRIVATE=1`).
    Any,
    /// Public addresses plus exactly this one: lets tests serve on 127.0.0.1 while every
    /// other address still goes through the classifier.
    #[cfg(test)]
    PublicAnd(IpAddr),
}

impl AddrPolicy {
    pub(crate) fn from_allow_private(allow: bool) -> Self {
        if allow {
            AddrPolicy::Any
        } else {
            AddrPolicy::PublicOnly
        }
    }

    /// `Err(why)` when `ip` may not be contacted.
    pub(crate) fn check(self, ip: IpAddr) -> Result<(), Blocked> {
        match self {
            AddrPolicy::Any => Ok(()),
            AddrPolicy::PublicOnly => classify(ip).map_or(Ok(()), Err),
            #[cfg(test)]
            AddrPolicy::PublicAnd(extra) if extra == ip => Ok(()),
            #[cfg(test)]
            AddrPolicy::PublicAnd(_) => classify(ip).map_or(Ok(()), Err),
        }
    }
}

/// The resolver refused every address of a host; travels inside `ureq::Error::Io`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) host: String,
    pub(crate) ip: IpAddr,
    pub(crate) why: Blocked,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bare = self.host.trim_start_matches('[').trim_end_matches(']');
        if bare.parse::<IpAddr>().ok() == Some(self.ip) {
            write!(f, "{} is {}", self.ip, self.why)
        } else {
            write!(f, "{} resolves to {}, {}", self.host, self.ip, self.why)
        }
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// The refusal inside a ureq error, if that is what it is.
    pub(crate) fn from_ureq(e: &ureq::Error) -> Option<&Refused> {
        match e {
            ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<Refused>(),
            _ => None,
        }
    }
}

/// Resolves like ureq's default resolver (numeric hosts without DNS), then keeps only the
/// addresses the policy allows; ureq connects to nothing else.
#[derive(Debug)]
pub(crate) struct GuardedResolver {
    pub(crate) policy: AddrPolicy,
    inner: DefaultResolver,
}

impl GuardedResolver {
    pub(crate) fn new(policy: AddrPolicy) -> Self {
        GuardedResolver { policy, inner: DefaultResolver::default() }
    }
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        checked(&self.inner, uri, config, timeout, self.policy, false)
    }
}

/// `uri`'s addresses: a numeric host in any spelling ([`parse_ipv4_loose`], IPv6) without
/// DNS, else ureq's default resolution.
fn addresses(
    inner: &DefaultResolver,
    uri: &Uri,
    config: &ureq::config::Config,
    timeout: NextTimeout,
) -> Result<ResolvedSocketAddrs, ureq::Error> {
    let host = uri.host().unwrap_or("");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let literal = bare.parse::<Ipv6Addr>().map(IpAddr::V6).ok().or_else(|| parse_ipv4_loose(bare).map(IpAddr::V4));
    match literal {
        Some(ip) => {
            let https = uri.scheme_str() == Some("https");
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let mut one = inner.empty();
            one.push(SocketAddr::new(ip, port));
            Ok(one)
        }
        None => inner.resolve(uri, config, timeout),
    }
}

/// `uri`'s addresses that `policy` allows (and, with `cleartext_loopback_only`, only loopback
/// ones for plain `http://`); an error naming the first refused one when none is left.
fn checked(
    inner: &DefaultResolver,
    uri: &Uri,
    config: &ureq::config::Config,
    timeout: NextTimeout,
    policy: AddrPolicy,
    cleartext_loopback_only: bool,
) -> Result<ResolvedSocketAddrs, ureq::Error> {
    let host = uri.host().unwrap_or("");
    let found = addresses(inner, uri, config, timeout)?;
    let cleartext = cleartext_loopback_only && uri.scheme_str() != Some("https");
    let mut allowed = inner.empty();
    let mut refused = None;
    for addr in found.iter() {
        let verdict = policy.check(addr.ip()).and_then(|()| {
            if cleartext && classify(addr.ip()) != Some(Blocked::Loopback) {
                Err(Blocked::Cleartext)
            } else {
                Ok(())
            }
        });
        match verdict {
            Ok(()) => allowed.push(*addr),
            Err(why) => {
                refused.get_or_insert(Refused { host: host.to_string(), ip: addr.ip(), why });
            }
        }
    }
    match refused {
        Some(r) if allowed.is_empty() => Err(ureq::Error::Io(io::Error::new(io::ErrorKind::PermissionDenied, r))),
        _ if allowed.is_empty() => Err(ureq::Error::HostNotFound),
        _ => Ok(allowed),
    }
}

/// The guard of requests made on a peer's behalf (MCP OAuth: the metadata, registration,
/// token and authorization endpoints an MCP server's documents name), on the resolved
/// address: public addresses only, unless the peer itself resolves to non-public addresses
/// only (a server the owner runs on this host or the LAN may name its neighbours); plain
/// `http://` only to loopback addresses. The peer is resolved once, on the first request; if
/// it cannot be, it counts as public.
#[derive(Debug)]
pub(crate) struct PeerResolver {
    peer: Option<Uri>,
    peer_local: OnceLock<bool>,
    inner: DefaultResolver,
}

impl PeerResolver {
    /// `peer` is the URL of the server the requests are made for.
    pub(crate) fn new(peer: &str) -> Self {
        PeerResolver { peer: peer.parse().ok(), peer_local: OnceLock::new(), inner: DefaultResolver::default() }
    }
}

impl Resolver for PeerResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let local = *self.peer_local.get_or_init(|| {
            let found = self.peer.as_ref().map(|p| addresses(&self.inner, p, config, timeout));
            matches!(found, Some(Ok(a)) if !a.is_empty() && a.iter().all(|s| classify(s.ip()).is_some()))
        });
        let policy = if local { AddrPolicy::Any } else { AddrPolicy::PublicOnly };
        checked(&self.inner, uri, config, timeout, policy, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_a_table_of_addresses() {
        use Blocked::*;
        let table: &[(&str, Option<Blocked>)] = &[
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("10.0.0.1", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("192.168.1.1", Some(Private)),
            ("169.254.169.254", Some(LinkLocal)),
            ("100.64.0.1", Some(SharedCgnat)),
            ("100.127.255.255", Some(SharedCgnat)),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("255.255.255.255", Some(Broadcast)),
            ("240.0.0.1", Some(Reserved)),
            ("192.0.0.170", Some(Reserved)),
            ("192.0.2.1", Some(Reserved)),
            ("198.18.0.1", Some(Reserved)),
            ("198.51.100.7", Some(Reserved)),
            ("203.0.113.9", Some(Reserved)),
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("93.184.216.34", None),
            ("192.0.3.1", None),
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:7f00:1", Some(Loopback)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some(Loopback)),
            ("::10.0.0.1", Some(Private)),
            ("::ffff:0:192.168.0.1", Some(Private)),
            ("64:ff9b::7f00:1", Some(Loopback)),
            ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
            ("64:ff9b::808:808", None),
            ("64:ff9b:1::1", Some(Reserved)),
            ("2002:7f00:1::", Some(Loopback)),
            ("2002:c0a8:101::1", Some(Private)),
            ("2002:808:808::1", None),
            // Teredo: client 127.0.0.1 stored inverted (0x80ff_fffe).
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", Some(Loopback)),
            ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", None),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("fec0::1", Some(UniqueLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("ff02::1", Some(Multicast)),
            ("100::1", Some(Reserved)),
            ("2001:db8::1", Some(Reserved)),
            ("2001:10::1", Some(Reserved)),
            ("3fff::1", Some(Reserved)),
            ("2606:4700:4700::1111", None),
            ("2a00:1450:4001::200e", None),
        ];
        for (text, want) in table {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(classify(ip), *want, "{text}");
        }
    }

    #[test]
    fn parses_odd_ipv4_spellings() {
        let lo = Some(Ipv4Addr::LOCALHOST);
        for s in ["127.0.0.1", "2130706433", "0x7f.1", "0x7F000001", "127.1", "127.0.1", "0177.0.0.1", "0x7f.0.0.0x1"] {
            assert_eq!(parse_ipv4_loose(s), lo, "{s}");
        }
        assert_eq!(parse_ipv4_loose("169.254.43518"), Some(Ipv4Addr::new(169, 254, 169, 254)));
        assert_eq!(parse_ipv4_loose("0"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(parse_ipv4_loose("4294967295"), Some(Ipv4Addr::BROADCAST));
        for s in [
            "",
            ".",
            "1.2.3.4.5",
            "256.1",
            "1.2.3.256",
            "4294967296",
            "0x",
            "08",
            "1..2",
            "a.b",
            "example.com",
            "1.2.3.4.",
        ] {
            assert_eq!(parse_ipv4_loose(s), None, "{s}");
        }
    }

    /// The peer guard on resolved addresses: public only for a public peer, anything for a
    /// local one; plain http to loopback only either way.
    #[test]
    fn peer_guard_checks_what_names_resolve_to() {
        let config = ureq::Agent::config_builder().build();
        let verdict = |peer: &str, url: &str| -> Result<(), Blocked> {
            let r = PeerResolver::new(peer);
            match r.resolve(&url.parse().unwrap(), &config, NextTimeout::default()) {
                Ok(_) => Ok(()),
                Err(e) => Err(Refused::from_ureq(&e).unwrap_or_else(|| panic!("{url}: {e}")).why),
            }
        };
        let remote = "https://93.184.216.34/mcp";
        for url in ["https://127.1/", "https://2130706433/", "https://[::ffff:7f00:1]/", "https://0x7f.1:8/"] {
            assert_eq!(verdict(remote, url), Err(Blocked::Loopback), "{url}");
        }
        assert_eq!(verdict(remote, "https://169.254.169.254/"), Err(Blocked::LinkLocal));
        assert_eq!(verdict(remote, "https://192.168.0.1/"), Err(Blocked::Private));
        assert_eq!(verdict(remote, "https://8.8.8.8/"), Ok(()));
        assert_eq!(verdict(remote, "http://8.8.8.8/"), Err(Blocked::Cleartext));
        for local in ["http://127.0.0.1:9/mcp", "http://127.1:9/", "https://192.168.1.5/mcp"] {
            assert_eq!(verdict(local, "https://10.0.0.1/"), Ok(()), "{local}");
            assert_eq!(verdict(local, "http://127.1:5/"), Ok(()), "{local}");
            assert_eq!(verdict(local, "http://10.0.0.1/"), Err(Blocked::Cleartext), "{local}");
        }
    }

    #[test]
    fn policy_and_refusal_text() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(AddrPolicy::PublicOnly.check(lo), Err(Blocked::Loopback));
        assert_eq!(AddrPolicy::Any.check(lo), Ok(()));
        assert_eq!(AddrPolicy::PublicAnd(lo).check(lo), Ok(()));
        assert_eq!(AddrPolicy::PublicAnd(lo).check("127.0.0.2".parse().unwrap()), Err(Blocked::Loopback));
        assert_eq!(AddrPolicy::from_allow_private(false), AddrPolicy::PublicOnly);
        let r = Refused { host: "127.0.0.1".into(), ip: lo, why: Blocked::Loopback };
        assert_eq!(r.to_string(), "127.0.0.1 is a loopback address");
        let r = Refused { host: "0x7f.1".into(), ip: lo, why: Blocked::Loopback };
        assert_eq!(r.to_string(), "0x7f.1 resolves to 127.0.0.1, a loopback address");
        let r = Refused { host: "[::1]".into(), ip: "::1".parse().unwrap(), why: Blocked::Loopback };
        assert_eq!(r.to_string(), "::1 is a loopback address");
    }
}
