//! The one parser for URLs and authorities we are handed (LLM base URLs, `Host` headers, MCP
//! server URLs, the endpoints and redirects MCP servers announce): `http::Uri` as ureq
//! re-exports it, the same parser that later sends the request, so what we compare is what
//! ureq will connect to. Also the one resolver of relative references against such a URL
//! (RFC 3986 §5.2), for MCP endpoints and redirects and for `web_fetch`'s redirects. Pure
//! functions; any thread.

use std::fmt;
use std::net::Ipv6Addr;

use ureq::http::uri::{Authority, Uri};

/// Where an http(s) URL connects, normalised for comparison: lower-case scheme and host, no
/// trailing dots on the host, IPv6 in its canonical form, the default port filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    /// `http` or `https`.
    pub(crate) scheme: &'static str,
    /// Lower-case host; IPv6 keeps its brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Origin {
    /// The origin of an absolute `http(s)://host[:port]…` URL; `None` for anything else,
    /// including URLs with user info and ports that are not a `u16`.
    pub(crate) fn of(url: &str) -> Option<Origin> {
        Origin::check(url).ok()
    }

    /// Like [`Origin::of`], saying why a URL has none: user info is [`UrlError::Credentials`]
    /// (a URL that is otherwise fine but names a user is refused for that reason), anything
    /// else [`UrlError::NotHttp`].
    pub(crate) fn check(url: &str) -> Result<Origin, UrlError> {
        let (uri, scheme) = parse_http(url)?;
        let authority = uri.authority().ok_or(UrlError::NotHttp)?;
        if authority.as_str().contains('@') {
            return Err(UrlError::Credentials);
        }
        let (host, port) = split(authority).ok_or(UrlError::NotHttp)?;
        let port = match port {
            None => default_port(scheme),
            Some(p) => p.parse::<u16>().map_err(|_| UrlError::NotHttp)?,
        };
        Ok(Origin { scheme, host: normalise_host(host).ok_or(UrlError::NotHttp)?, port })
    }
}

/// Why a URL is not a usable absolute http(s) URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UrlError {
    /// Not absolute, not http or https, no host, a bad port, or not a URL at all.
    NotHttp,
    /// `user[:password]@` in the authority.
    Credentials,
}

/// The one message every boundary gives (LLM settings and calls, MCP server URLs and
/// connections) for an `https://` URL in a build without the `tls` feature.
pub(crate) const TLS_MISSING: &str =
    "https:// endpoints need CashCode built with the `tls` feature (this build has it off); use an http:// endpoint";

/// [`TLS_MISSING`] when `url` is an `https://` URL and this build has no TLS.
pub(crate) fn tls_missing(url: &str) -> Option<&'static str> {
    let https = parse_http(url).is_ok_and(|(_, scheme)| scheme == "https");
    (https && !cfg!(feature = "tls")).then_some(TLS_MISSING)
}

/// `url` trimmed and parsed, with its scheme when that is http or https.
fn parse_http(url: &str) -> Result<(Uri, &'static str), UrlError> {
    let uri: Uri = url.trim().parse().map_err(|_| UrlError::NotHttp)?;
    let scheme = match uri.scheme_str().ok_or(UrlError::NotHttp)? {
        s if s.eq_ignore_ascii_case("http") => "http",
        s if s.eq_ignore_ascii_case("https") => "https",
        _ => return Err(UrlError::NotHttp),
    };
    Ok((uri, scheme))
}

/// `reference` (an absolute URL, `//authority…`, an absolute or relative path, or `?query`)
/// resolved against the absolute http(s) URL `base` (RFC 3986 §5.2; fragments dropped), as an
/// MCP server's SSE `endpoint` event or a redirect's `Location` may name it. `None` when `base`
/// has no http(s) origin. The result is not checked: callers compare its [`Origin`].
pub(crate) fn join(base: &str, reference: &str) -> Option<String> {
    Origin::check(base).ok()?;
    resolve(base, reference)
}

/// The RFC 3986 §5.2 resolution behind [`join`], for any http(s) `base` with an authority,
/// user info included (a URL that was fetched as given, as `web_fetch` does). Fragments are
/// dropped: they never reach a server. `None` when `base` is not such a URL; the result is not
/// checked (an absolute `reference` comes back as it is, whatever its scheme).
pub(crate) fn resolve(base: &str, reference: &str) -> Option<String> {
    let reference = reference.trim();
    let reference = reference.split('#').next().unwrap_or("");
    if has_scheme(reference) {
        return Some(reference.to_string());
    }
    let (uri, scheme) = parse_http(base).ok()?;
    let prefix = format!("{scheme}://{}", uri.authority()?.as_str());
    if let Some(rest) = reference.strip_prefix("//") {
        return Some(format!("{scheme}://{rest}"));
    }
    let (path, query) = match reference.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (reference, None),
    };
    let base_path = uri.path();
    let (merged, query) = if path.is_empty() {
        (base_path.to_string(), query.or(uri.query()))
    } else if path.starts_with('/') {
        (remove_dots(path), query)
    } else {
        // An http(s) URI's path always starts with `/`.
        let dir = base_path.rfind('/').map_or("/", |i| &base_path[..=i]);
        (remove_dots(&format!("{dir}{path}")), query)
    };
    Some(match query {
        Some(q) => format!("{prefix}{merged}?{q}"),
        None => format!("{prefix}{merged}"),
    })
}

/// `scheme:` at the start (RFC 3986 §3.1).
fn has_scheme(s: &str) -> bool {
    match s.find(':') {
        Some(i) if i > 0 => {
            let scheme = &s[..i];
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        }
        _ => false,
    }
}

/// RFC 3986 §5.2.4 on a path starting with `/`.
fn remove_dots(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').skip(1).collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
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
pub(crate) fn host(authority: &str) -> Option<String> {
    let a: Authority = authority.trim().parse().ok()?;
    split(&a).map(|(h, _)| h.to_string())
}

/// Whether a host name (IPv6 with or without brackets, a trailing dot allowed) is `localhost`
/// or a loopback address.
pub(crate) fn is_loopback(host: &str) -> bool {
    let h = host.trim_end_matches('.').trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost") || h.parse::<std::net::IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false)
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

    #[test]
    fn https_needs_the_tls_feature() {
        assert_eq!(tls_missing("http://127.0.0.1:11434/v1"), None);
        assert_eq!(tls_missing("not a url"), None);
        assert_eq!(tls_missing("HTTPS://api.example.com/v1"), (!cfg!(feature = "tls")).then_some(TLS_MISSING));
        assert!(TLS_MISSING.contains("`tls` feature"));
    }

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
    fn why_a_url_is_refused() {
        assert_eq!(Origin::check("http://user:pw@example.com/sse"), Err(UrlError::Credentials));
        assert_eq!(Origin::check("http://@x"), Err(UrlError::Credentials));
        for bad in ["file:///etc/passwd", "http://", "example.com/sse", "http://host:99999/", "ftp://x/y", ""] {
            assert_eq!(Origin::check(bad), Err(UrlError::NotHttp), "{bad:?}");
        }
        let o = Origin::check("HTTPS://Example.COM").unwrap();
        assert_eq!((o.scheme, o.host.as_str(), o.port), ("https", "example.com", 443));
        assert_eq!(Origin::check("http://[::1]:3001/mcp").unwrap().host, "[::1]");
        assert!(Origin::check("http://h?x=1").is_ok());
    }

    #[test]
    fn joins_endpoint_references() {
        let base = "http://127.0.0.1:3001/sse";
        let j = |b: &str, r: &str| join(b, r).unwrap();
        assert_eq!(j(base, "/message?sessionId=ab"), "http://127.0.0.1:3001/message?sessionId=ab");
        assert_eq!(j(base, "message?s=1"), "http://127.0.0.1:3001/message?s=1");
        assert_eq!(j(base, " /m#frag "), "http://127.0.0.1:3001/m");
        assert_eq!(j("http://h/a/b/sse", "../m"), "http://h/a/m");
        assert_eq!(j("http://h/a/sse", "./m/"), "http://h/a/m/");
        assert_eq!(j("http://h/a/sse", "../../../m"), "http://h/m");
        assert_eq!(j(base, "?sessionId=1"), "http://127.0.0.1:3001/sse?sessionId=1");
        assert_eq!(j("http://h/sse?a=1", ""), "http://h/sse?a=1");
        assert_eq!(j("http://h", "m"), "http://h/m");
        assert_eq!(j("http://h", "?q"), "http://h/?q");
        assert_eq!(j(base, "//other:1/x"), "http://other:1/x");
        assert_eq!(j(base, "https://x.test/m"), "https://x.test/m");
        assert_eq!(join("file:///x", "/m"), None);
        assert_eq!(join("http://u:p@h/sse", "/m"), None);
    }

    /// RFC 3986 §5.4: every normal and abnormal example, fragments dropped (they never reach a
    /// server), and "http:g" read the strict way (§5.4.2).
    #[test]
    fn resolves_the_rfc_3986_examples() {
        let base = "http://a/b/c/d;p?q";
        let cases = [
            // §5.4.1 normal examples
            ("g:h", "g:h"),
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q"),
            ("g#s", "http://a/b/c/g"),
            ("g?y#s", "http://a/b/c/g?y"),
            (";x", "http://a/b/c/;x"),
            ("g;x", "http://a/b/c/g;x"),
            ("g;x?y#s", "http://a/b/c/g;x?y"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../", "http://a/"),
            ("../../g", "http://a/g"),
            // §5.4.2 abnormal examples
            ("../../../g", "http://a/g"),
            ("../../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("/../g", "http://a/g"),
            ("g.", "http://a/b/c/g."),
            (".g", "http://a/b/c/.g"),
            ("g..", "http://a/b/c/g.."),
            ("..g", "http://a/b/c/..g"),
            ("./../g", "http://a/b/g"),
            ("./g/.", "http://a/b/c/g/"),
            ("g/./h", "http://a/b/c/g/h"),
            ("g/../h", "http://a/b/c/h"),
            ("g;x=1/./y", "http://a/b/c/g;x=1/y"),
            ("g;x=1/../y", "http://a/b/c/y"),
            ("g?y/./x", "http://a/b/c/g?y/./x"),
            ("g?y/../x", "http://a/b/c/g?y/../x"),
            ("g#s/./x", "http://a/b/c/g"),
            ("g#s/../x", "http://a/b/c/g"),
            ("http:g", "http:g"),
        ];
        for (reference, want) in cases {
            assert_eq!(resolve(base, reference).as_deref(), Some(want), "{reference:?}");
            assert_eq!(join(base, reference).as_deref(), Some(want), "{reference:?}");
        }
    }

    #[test]
    fn resolves_against_any_http_base() {
        // User info stays with the authority it was given for; `join` refuses such a base.
        assert_eq!(resolve("http://u:p@h/a/b", "c").as_deref(), Some("http://u:p@h/a/c"));
        assert_eq!(join("http://u:p@h/a/b", "c"), None);
        assert_eq!(resolve("HTTP://h/a", "/b").as_deref(), Some("http://h/b"));
        assert_eq!(resolve("https://h:8443/x", "//o/p").as_deref(), Some("https://o/p"));
        assert_eq!(resolve("http://h/x", "HTTPS://o/#f").as_deref(), Some("HTTPS://o/"));
        for bad in ["", "/relative", "ftp://h/x", "http:///nohost"] {
            assert_eq!(resolve(bad, "x"), None, "{bad:?}");
        }
    }

    #[test]
    fn joined_references_keep_or_leave_the_origin() {
        let base = "http://h/sse";
        let same = |r: &str| Origin::of(&join(base, r).unwrap()) == Origin::of(base);
        assert!(same("/message") && same("http://H:80/message") && same("m?x=1"));
        assert!(!same("https://h/message") && !same("http://h:81/message") && !same("//evil/x"));
        assert!(!same("http://h@evil/x"), "user info is no origin at all");
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
