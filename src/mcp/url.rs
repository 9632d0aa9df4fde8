//! Just enough HTTP(S) URL handling for MCP: validation of configured URLs (absolute, http or
//! https, a host, no embedded credentials) and resolution of the relative `endpoint` URIs that
//! legacy SSE servers announce. Pure functions; any thread.

/// The parts of an absolute `http(s)://` URL we care about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// Lower-case `http` or `https`.
    pub scheme: String,
    /// Lower-case host (IPv6 keeps its brackets).
    pub host: String,
    pub port: Option<u16>,
    /// Path (starting with `/`, or empty) plus `?query`, without the fragment.
    pub path_and_query: String,
}

impl HttpUrl {
    /// Port after defaults (80/443), for same-origin checks.
    pub fn effective_port(&self) -> u16 {
        self.port.unwrap_or(if self.scheme == "https" { 443 } else { 80 })
    }

    pub fn same_origin(&self, other: &HttpUrl) -> bool {
        self.scheme == other.scheme && self.host == other.host && self.effective_port() == other.effective_port()
    }

    /// `scheme://host[:port]`.
    pub fn origin(&self) -> String {
        match self.port {
            Some(p) => format!("{}://{}:{p}", self.scheme, self.host),
            None => format!("{}://{}", self.scheme, self.host),
        }
    }

    fn path(&self) -> &str {
        self.path_and_query.split('?').next().unwrap_or("")
    }
}

/// Why a URL is not a usable absolute HTTP(S) URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlProblem {
    NotHttp,
    Credentials,
}

/// Parses an absolute http(s) URL.
pub fn parse(s: &str) -> Result<HttpUrl, UrlProblem> {
    let (scheme, rest) = s.split_once("://").ok_or(UrlProblem::NotHttp)?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(UrlProblem::NotHttp);
    }
    let rest = rest.split('#').next().unwrap_or("");
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or(UrlProblem::NotHttp)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(UrlProblem::NotHttp)?),
        };
        (format!("[{h}]"), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    let port = match port {
        None | Some("") => None,
        Some(p) => Some(p.parse::<u16>().map_err(|_| UrlProblem::NotHttp)?),
    };
    if host.is_empty() || host == "[]" || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlProblem::NotHttp);
    }
    if userinfo.is_some() {
        return Err(UrlProblem::Credentials);
    }
    let path_and_query = if tail.starts_with('?') { format!("/{tail}") } else { tail.to_string() };
    Ok(HttpUrl { scheme, host: host.to_ascii_lowercase(), port, path_and_query })
}

/// Resolves `reference` against the absolute `base` (RFC 3986 §5.2, without fragments).
pub fn resolve(base: &str, reference: &str) -> Result<String, UrlProblem> {
    let reference = reference.trim();
    if has_scheme(reference) {
        return Ok(reference.to_string());
    }
    let b = parse(base)?;
    let reference = reference.split('#').next().unwrap_or("");
    if let Some(rest) = reference.strip_prefix("//") {
        return Ok(format!("{}://{rest}", b.scheme));
    }
    let (path, query) = match reference.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (reference, None),
    };
    let merged = if path.is_empty() {
        let base_path = if b.path().is_empty() { "/" } else { b.path() };
        let query = query.map(str::to_string).or_else(|| b.path_and_query.split_once('?').map(|(_, q)| q.to_string()));
        return Ok(match query {
            Some(q) => format!("{}{base_path}?{q}", b.origin()),
            None => format!("{}{base_path}", b.origin()),
        });
    } else if path.starts_with('/') {
        remove_dots(path)
    } else {
        let dir = match b.path().rfind('/') {
            Some(i) => &b.path()[..=i],
            None => "/",
        };
        remove_dots(&format!("{dir}{path}"))
    };
    Ok(match query {
        Some(q) => format!("{}{merged}?{q}", b.origin()),
        None => format!("{}{merged}", b.origin()),
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_like_the_catalog_needs() {
        let u = parse("http://127.0.0.1:8090/sse").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path_and_query.as_str()), ("127.0.0.1", Some(8090), "/sse"));
        assert_eq!(parse("HTTPS://Example.COM").unwrap().host, "example.com");
        assert_eq!(parse("file:///etc/passwd"), Err(UrlProblem::NotHttp));
        assert_eq!(parse("http://"), Err(UrlProblem::NotHttp));
        assert_eq!(parse("example.com/sse"), Err(UrlProblem::NotHttp));
        assert_eq!(parse("http://user:pw@example.com/sse"), Err(UrlProblem::Credentials));
        assert_eq!(parse("http://host:99999/"), Err(UrlProblem::NotHttp));
        assert_eq!(parse("http://[::1]:3001/mcp").unwrap().host, "[::1]");
        assert_eq!(parse("http://h?x=1").unwrap().path_and_query, "/?x=1");
    }

    #[test]
    fn resolves_endpoint_references() {
        let base = "http://127.0.0.1:3001/sse";
        assert_eq!(resolve(base, "/message?sessionId=ab").unwrap(), "http://127.0.0.1:3001/message?sessionId=ab");
        assert_eq!(resolve(base, "message?s=1").unwrap(), "http://127.0.0.1:3001/message?s=1");
        assert_eq!(resolve("http://h/a/b/sse", "../m").unwrap(), "http://h/a/m");
        assert_eq!(resolve("http://h/a/sse", "./m/").unwrap(), "http://h/a/m/");
        assert_eq!(resolve(base, "?sessionId=1").unwrap(), "http://127.0.0.1:3001/sse?sessionId=1");
        assert_eq!(resolve(base, "//other:1/x").unwrap(), "http://other:1/x");
        assert_eq!(resolve(base, "https://x.test/m").unwrap(), "https://x.test/m");
    }

    #[test]
    fn origin_comparison_uses_default_ports() {
        let a = parse("http://h/sse").unwrap();
        assert!(a.same_origin(&parse("http://H:80/message").unwrap()));
        assert!(!a.same_origin(&parse("https://h/message").unwrap()));
        assert!(!a.same_origin(&parse("http://h:81/message").unwrap()));
    }
}
