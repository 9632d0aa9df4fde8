//! Who may talk to the server: browser Origin allow-list (plus the server's own HTTP origin),
//! Host header check against DNS rebinding, and the bearer token required on non-loopback
//! binds. The token is kept only as its keyed digest (`secrets::keyed_digest`), and a given
//! token is compared by digest in constant time, so the server's memory holds no copy of it to
//! find. Pure policy, used by the HTTP thread and WS reader threads.

use crate::util::url::is_loopback;

#[derive(Debug, Clone)]
pub(crate) struct AccessPolicy {
    /// `CASHCODE_ALLOWED_ORIGINS` (or the Vite defaults).
    pub(crate) allowed_origins: Vec<String>,
    /// The origins of the client we serve ourselves.
    pub(crate) own_origins: Vec<String>,
    /// Whether both listeners are bound to loopback (then the Host header must be loopback too).
    pub(crate) loopback_only: bool,
    /// The keyed digest of the configured token.
    token: Option<[u8; 32]>,
}

impl AccessPolicy {
    pub(crate) fn new(
        allowed: Vec<String>,
        http_host: &str,
        http_port: u16,
        loopback_only: bool,
        token: Option<&str>,
    ) -> Self {
        let mut own = vec![
            format!("http://127.0.0.1:{http_port}"),
            format!("http://localhost:{http_port}"),
            format!("http://[::1]:{http_port}"),
        ];
        let h = format!("http://{http_host}:{http_port}");
        if !own.contains(&h) {
            own.push(h);
        }
        let token = token.map(|t| crate::secrets::keyed_digest(t.as_bytes()));
        AccessPolicy { allowed_origins: allowed, own_origins: own, loopback_only, token }
    }

    /// A request without Origin (a local script) passes; a browser Origin must be listed
    /// exactly (case-sensitive, as the original compares it).
    pub(crate) fn origin_allowed(&self, origin: Option<&str>) -> bool {
        match origin {
            None => true,
            Some(o) => self.is_listed(o),
        }
    }

    /// Is `origin` one CORS should answer for?
    pub(crate) fn is_listed(&self, origin: &str) -> bool {
        self.allowed_origins.iter().any(|a| a == origin) || self.own_origins.iter().any(|a| a == origin)
    }

    /// DNS rebinding guard: on a loopback bind the Host header must name a loopback host.
    pub(crate) fn host_allowed(&self, host: Option<&str>) -> bool {
        if !self.loopback_only {
            return true;
        }
        let Some(h) = host else { return true };
        crate::util::url::host(h).is_some_and(|name| is_loopback(&name))
    }

    /// The token check; passes when no token is configured. `query_token` is for the
    /// WebSocket handshake only (a browser cannot set headers there); HTTP passes `None`.
    pub(crate) fn token_ok(&self, authorization: Option<&str>, query_token: Option<&str>) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        let given = authorization
            .and_then(|a| a.strip_prefix("Bearer ").or_else(|| a.strip_prefix("bearer ")))
            .or(query_token)
            .unwrap_or("");
        constant_time_eq(&crate::secrets::keyed_digest(given.trim().as_bytes()), expected)
    }
}

/// Compares without an early exit on the first differing byte.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

/// Value of `name` in a query string (no percent-decoding needed for tokens we issue).
pub(crate) fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == name).map(|(_, v)| v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> AccessPolicy {
        AccessPolicy::new(vec!["http://localhost:5173".into()], "127.0.0.1", 8000, true, None)
    }

    #[test]
    fn origins() {
        let p = policy();
        assert!(p.origin_allowed(None));
        assert!(p.origin_allowed(Some("http://localhost:5173")));
        assert!(p.origin_allowed(Some("http://127.0.0.1:8000")));
        assert!(!p.origin_allowed(Some("http://evil.example")));
        assert!(!p.origin_allowed(Some("http://LOCALHOST:5173")));
    }

    #[test]
    fn hosts_and_tokens() {
        let p = policy();
        assert!(p.host_allowed(Some("127.0.0.1:8000")));
        assert!(p.host_allowed(Some("localhost")));
        assert!(p.host_allowed(Some("[::1]:8765")));
        assert!(!p.host_allowed(Some("evil.example:8000")));
        assert!(!p.host_allowed(Some("evil.example@127.0.0.1:8000")));
        assert!(!p.host_allowed(Some("127.0.0.1 evil")));
        let mut t = policy();
        t.token = Some(crate::secrets::keyed_digest(b"s3cret"));
        assert!(t.token_ok(Some("Bearer s3cret"), None));
        assert!(t.token_ok(None, Some("s3cret")));
        assert!(!t.token_ok(Some("Bearer s3cre"), None));
        assert!(!t.token_ok(None, None));
        assert!(constant_time_eq(b"ab", b"ab") && !constant_time_eq(b"ab", b"abc"));
    }
}
