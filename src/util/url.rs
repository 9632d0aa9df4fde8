//! The one parser for URLs and authorities we are handed (LLM base URLs, `Host` headers):
//! `http::Uri` as ureq re-exports it, the same parser that later sends the request, so what we
//! compare is what ureq will connect to. Pure functions; any thread.

use std::fmt;
use std::net::Ipv6Addr;

use ureq::http::uri::{Authority, Uri};

/// Where an http(s) URL connects, normalised for comparison: lower-case scheme and host, no
/// trailing dots on the host, IPv6 in its canonical form, the default port filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `http` or `https`.
    pub scheme: &'static str,
    /// Lower-case host; IPv6 keeps its brackets.
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// The origin of an absolute `http(s)://host[:port]…` URL; `None` for anything else,
    /// including URLs with user info and ports that are not a `u16`.
    pub fn of(url: &str) -> Option<Origin> {
        let uri: Uri = url.trim().parse().ok()?;
        let scheme = match uri.scheme_str()? {
            s if s.eq_ignore_ascii_case("http") => "http",
            s if s.eq_ignore_ascii_case("https") => "https",
            _ => return None,
        };
        let (host, port) = split(uri.authority()?)?;
        let port = match port {
            None => default_port(scheme),
            Some(p) => p.parse::<u16>().ok()?,
        };
        Some(Origin { scheme, host: normalise_host(host)?, port })
    }
}

/// `scheme://host[:port]`, the port left out when it is the scheme's default.
impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port == default_port(self.scheme) {
            write!(f, "{}://{}", self.scheme, self.host)
        } else {
            write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

/// The host an authority such as a `Host` header names, as given (IPv6 with brackets);
/// `None` when it does not parse or carries user info.
pub fn host(authority: &str) -> Option<String> {
    let a: Authority = authority.trim().parse().ok()?;
    split(&a).map(|(h, _)| h.to_string())
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" {
        443
    } else {
        80
    }
}

/// Host and port text of an authority without user info (`a@b` is refused: in a URL it is a
/// credential, in a Host header it is not valid at all).
fn split(a: &Authority) -> Option<(&str, Option<&str>)> {
    let s = a.as_str();
    if s.contains('@') {
        return None;
    }
    let host = a.host();
    if host.is_empty() {
        return None;
    }
    let port = match &s[host.len()..] {
        "" => None,
        rest => Some(rest.strip_prefix(':')?),
    };
    Some((host, port))
}

fn normalise_host(host: &str) -> Option<String> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return Some(match inner.parse::<Ipv6Addr>() {
            Ok(ip) => format!("[{ip}]"),
            Err(_) => host.to_ascii_lowercase(),
        });
    }
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    (!h.is_empty()).then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(url: &str) -> Option<String> {
        Origin::of(url).map(|o| o.to_string())
    }

    #[test]
    fn origins_are_normalised() {
        assert_eq!(origin("https://API.Example.com./v1").as_deref(), Some("https://api.example.com"));
        assert_eq!(Origin::of("http://x"), Origin::of("HTTP://X:80/other"));
        assert_eq!(Origin::of("https://x/v1"), Origin::of("https://x:443"));
        assert_ne!(Origin::of("http://x"), Origin::of("https://x"));
        assert_ne!(Origin::of("http://x"), Origin::of("http://x:8080"));
        assert_ne!(Origin::of("http://x"), Origin::of("http://x.evil"));
        assert_eq!(origin("http://x:1").as_deref(), Some("http://x:1"));
        assert_eq!(origin("http://[0:0::1]:8080/v1").as_deref(), Some("http://[::1]:8080"));
        assert_eq!(Origin::of("http://127.0.0.1:11434/v1").map(|o| o.port), Some(11434));
    }

    #[test]
    fn what_is_not_an_http_origin() {
        for bad in [
            "",
            "x",
            "ftp://x",
            "http://",
            "http://:80",
            "http://x:99999",
            "http://x:",
            "http://u:p@x",
            "http://@x",
            "http://x y",
            "http://.",
            "/relative",
        ] {
            assert_eq!(Origin::of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hosts_of_authorities() {
        assert_eq!(host("127.0.0.1:8000").as_deref(), Some("127.0.0.1"));
        assert_eq!(host("localhost").as_deref(), Some("localhost"));
        assert_eq!(host("[::1]:8765").as_deref(), Some("[::1]"));
        assert_eq!(host("Evil.Example:1").as_deref(), Some("Evil.Example"));
        assert_eq!(host("evil.example@127.0.0.1"), None);
        assert_eq!(host(""), None);
        assert_eq!(host("a b"), None);
        assert_eq!(host("[::1"), None);
    }
}
