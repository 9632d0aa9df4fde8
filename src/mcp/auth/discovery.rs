//! Discovery for the MCP authorization spec (2025-11-25): the `WWW-Authenticate` challenge
//! (RFC 6750 §3, RFC 9728 §5.1), the protected-resource metadata locations (RFC 9728 §3.1),
//! the authorization-server metadata locations (RFC 8414 §3.1 with the OpenID Connect
//! fallbacks, in the spec's order), parsing both documents, the resource-match rule and the
//! endpoint rule (https, or http on a loopback host). Pure functions; any thread.

use serde_json::Value;
use ureq::http::Uri;

use crate::util::url::Origin;

/// Longest challenge header we read.
const MAX_CHALLENGE: usize = 8 * 1024;
/// Most scopes taken from any one source.
const MAX_SCOPES: usize = 64;
/// Longest URL we accept from a document or a header.
const MAX_URL: usize = 2048;

/// What a `Bearer` challenge said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub(crate) resource_metadata: Option<String>,
    pub(crate) scope: Option<Vec<String>>,
    pub(crate) error: Option<String>,
}

impl Challenge {
    /// Parses the `Bearer` challenge of a `WWW-Authenticate` value (other schemes and
    /// unknown parameters are skipped; quoted strings may hold commas and `\"`).
    pub(crate) fn parse(header: &str) -> Challenge {
        let header = crate::util::text::take_chars(header, MAX_CHALLENGE);
        let mut out = Challenge::default();
        let mut in_bearer = false;
        for (key, value) in params(header) {
            match (key, value) {
                (scheme, None) => in_bearer = scheme.eq_ignore_ascii_case("bearer"),
                (k, Some(v)) if in_bearer => match k.to_ascii_lowercase().as_str() {
                    "resource_metadata" if v.len() <= MAX_URL => out.resource_metadata = Some(v),
                    "scope" => out.scope = Some(split_scopes(&v)),
                    "error" => out.error = Some(crate::util::text::take_chars(&v, 64).to_string()),
                    _ => {}
                },
                _ => {}
            }
        }
        out
    }

    pub(crate) fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

/// Tokens of a challenge list: `(scheme, None)` for an auth-scheme, `(key, Some(value))` for
/// a parameter. A scheme is a bare token followed by whitespace and a parameter or a comma.
fn params(s: &str) -> Vec<(String, Option<String>)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b',' || b[i].is_ascii_whitespace()) {
            i += 1;
        }
        let start = i;
        while i < b.len() && !(b[i] == b'=' || b[i] == b',' || b[i].is_ascii_whitespace()) {
            i += 1;
        }
        if start == i {
            i += 1;
            continue;
        }
        let token = s[start..i].to_string();
        let mut j = i;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if j < b.len() && b[j] == b'=' {
            j += 1;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            let mut value = String::new();
            if j < b.len() && b[j] == b'"' {
                j += 1;
                let mut bytes = Vec::new();
                while j < b.len() && b[j] != b'"' {
                    if b[j] == b'\\' && j + 1 < b.len() {
                        j += 1;
                    }
                    bytes.push(b[j]);
                    j += 1;
                }
                j += 1;
                value = String::from_utf8_lossy(&bytes).into_owned();
            } else {
                let vs = j;
                while j < b.len() && b[j] != b',' && !b[j].is_ascii_whitespace() {
                    j += 1;
                }
                value.push_str(&s[vs..j]);
            }
            out.push((token, Some(value)));
            i = j;
        } else {
            // token68 after a scheme (`Basic abc==`) or a scheme: a token68 has no `=` pair.
            out.push((token, None));
            i = j;
        }
    }
    out
}

/// Scopes are space-separated; duplicates dropped, order kept, count capped.
pub(crate) fn split_scopes(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for sc in s.split_ascii_whitespace() {
        if sc.len() <= 256 && !out.iter().any(|o| o == sc) && out.len() < MAX_SCOPES {
            out.push(sc.to_string());
        }
    }
    out
}

/// An endpoint or metadata URL we may contact: absolute, no user info, https, or plain http
/// only on a loopback host (SECURITY.md: OAuth traffic never goes out in clear text).
pub(crate) fn endpoint_allowed(url: &str) -> bool {
    if url.len() > MAX_URL || url.contains('#') {
        return false;
    }
    match Origin::of(url) {
        Some(o) => o.scheme == "https" || crate::util::url::is_loopback(&o.host),
        None => false,
    }
}

/// `scheme://authority` and the path (without a trailing `/`, `""` for the root) of a URL.
fn split_url(url: &str) -> Option<(String, String)> {
    let uri: Uri = url.trim().parse().ok()?;
    let scheme = uri.scheme_str()?;
    let authority = uri.authority()?.as_str();
    let path = uri.path().trim_end_matches('/').to_string();
    Some((format!("{scheme}://{authority}"), path))
}

/// The server URL without query and fragment: the `resource` we ask tokens for when the
/// server publishes no metadata (RFC 8707 §2: no fragment).
pub(crate) fn canonical_resource(server_url: &str) -> Option<String> {
    let (base, path) = split_url(server_url)?;
    Some(format!("{}{path}", base.to_ascii_lowercase()))
}

/// Where to look for the protected-resource metadata when the challenge names none: the
/// path-based location first, then the root (RFC 9728 §3.1; MCP 2025-11-25).
pub(crate) fn prm_locations(server_url: &str) -> Vec<String> {
    let Some((base, path)) = split_url(server_url) else { return Vec::new() };
    let mut out = Vec::new();
    if !path.is_empty() {
        out.push(format!("{base}/.well-known/oauth-protected-resource{path}"));
    }
    out.push(format!("{base}/.well-known/oauth-protected-resource"));
    out
}

/// Where to look for the authorization-server metadata of `issuer`, in the spec's order:
/// with a path, RFC 8414 path insertion, OpenID path insertion, OpenID path appending;
/// without one, RFC 8414 then OpenID.
pub(crate) fn as_metadata_locations(issuer: &str) -> Vec<String> {
    let Some((base, path)) = split_url(issuer) else { return Vec::new() };
    if path.is_empty() {
        vec![
            format!("{base}/.well-known/oauth-authorization-server"),
            format!("{base}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{base}/.well-known/oauth-authorization-server{path}"),
            format!("{base}/.well-known/openid-configuration{path}"),
            format!("{base}{path}/.well-known/openid-configuration"),
        ]
    }
}

/// Whether the metadata's `resource` covers the server URL: same origin, and its path is the
/// server path or a parent of it on a segment boundary (RFC 9728 §3.3 asks for identity; MCP
/// servers at `/mcp` commonly publish their origin).
pub(crate) fn resource_matches(resource: &str, server_url: &str) -> bool {
    if resource.contains('#') {
        return false;
    }
    let (Some(a), Some(b)) = (Origin::of(resource), Origin::of(server_url)) else { return false };
    if a != b {
        return false;
    }
    let (Some((_, rp)), Some((_, sp))) = (split_url(resource), split_url(server_url)) else { return false };
    rp.is_empty() || sp == rp || sp.starts_with(&format!("{rp}/"))
}

/// The protected-resource metadata fields we use.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ResourceMetadata {
    pub(crate) resource: Option<String>,
    pub(crate) authorization_servers: Vec<String>,
    pub(crate) scopes_supported: Option<Vec<String>>,
}

impl ResourceMetadata {
    pub(crate) fn from_json(v: &Value) -> Option<ResourceMetadata> {
        let o = v.as_object()?;
        Some(ResourceMetadata {
            resource: o.get("resource").and_then(Value::as_str).filter(|s| s.len() <= MAX_URL).map(String::from),
            authorization_servers: strings(o.get("authorization_servers"))
                .into_iter()
                .filter(|s| s.len() <= MAX_URL)
                .collect(),
            scopes_supported: o.get("scopes_supported").map(|s| strings(Some(s))),
        })
    }
}

/// The authorization-server metadata fields we use (RFC 8414 §2).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ServerMetadata {
    pub(crate) issuer: Option<String>,
    pub(crate) authorization_endpoint: Option<String>,
    pub(crate) token_endpoint: String,
    pub(crate) registration_endpoint: Option<String>,
    pub(crate) grant_types_supported: Option<Vec<String>>,
    pub(crate) token_endpoint_auth_methods_supported: Option<Vec<String>>,
    pub(crate) code_challenge_methods_supported: Option<Vec<String>>,
    pub(crate) client_id_metadata_document_supported: bool,
    /// True when built from the 2025-03-26 fallback (no metadata document at all).
    pub(crate) fallback: bool,
}

impl ServerMetadata {
    pub(crate) fn from_json(v: &Value) -> Option<ServerMetadata> {
        let o = v.as_object()?;
        let url = |k: &str| o.get(k).and_then(Value::as_str).filter(|s| s.len() <= MAX_URL).map(String::from);
        let list = |k: &str| o.get(k).map(|s| strings(Some(s)));
        Some(ServerMetadata {
            issuer: url("issuer"),
            authorization_endpoint: url("authorization_endpoint"),
            token_endpoint: url("token_endpoint")?,
            registration_endpoint: url("registration_endpoint"),
            grant_types_supported: list("grant_types_supported"),
            token_endpoint_auth_methods_supported: list("token_endpoint_auth_methods_supported"),
            code_challenge_methods_supported: list("code_challenge_methods_supported"),
            client_id_metadata_document_supported: o
                .get("client_id_metadata_document_supported")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            fallback: false,
        })
    }

    /// The 2025-03-26 defaults for a server without metadata: `/authorize`, `/token` and
    /// `/register` at the authorization base URL (the MCP server's origin).
    pub(crate) fn fallback(base: &str) -> ServerMetadata {
        let base = base.trim_end_matches('/');
        ServerMetadata {
            issuer: Some(base.to_string()),
            authorization_endpoint: Some(format!("{base}/authorize")),
            token_endpoint: format!("{base}/token"),
            registration_endpoint: Some(format!("{base}/register")),
            fallback: true,
            ..ServerMetadata::default()
        }
    }

    /// PKCE S256 is advertised. A metadata document without `code_challenge_methods_supported`
    /// means no PKCE, and the spec says to refuse; only the no-metadata fallback is exempt.
    pub(crate) fn supports_s256(&self) -> bool {
        self.fallback || self.code_challenge_methods_supported.as_ref().is_some_and(|m| m.iter().any(|x| x == "S256"))
    }

    pub(crate) fn supports_grant(&self, grant: &str) -> bool {
        match &self.grant_types_supported {
            Some(g) => g.iter().any(|x| x == grant),
            // RFC 8414 §2: the default is authorization_code and implicit.
            None => grant == "authorization_code",
        }
    }

    pub(crate) fn supports_auth_method(&self, method: &str) -> bool {
        match &self.token_endpoint_auth_methods_supported {
            Some(m) => m.iter().any(|x| x == method),
            // RFC 8414 §2: the default is client_secret_basic.
            None => method == "client_secret_basic",
        }
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).take(MAX_SCOPES).map(String::from).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn challenges_are_parsed_with_quotes_commas_and_other_schemes() {
        let c = Challenge::parse(
            r#"Basic realm="x", Bearer error="insufficient_scope", scope="mcp:basic mcp:write", resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp", error_description="a, \"b\"""#,
        );
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert!(c.insufficient_scope());
        assert_eq!(c.scope, Some(vec!["mcp:basic".to_string(), "mcp:write".to_string()]));
        assert_eq!(c.resource_metadata.as_deref(), Some("http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp"));
        // Parameters of another scheme are not ours.
        let d = Challenge::parse(r#"Basic scope="nope", resource_metadata="http://evil""#);
        assert_eq!(d, Challenge::default());
        let e = Challenge::parse("Bearer scope=unquoted,error=invalid_token");
        assert_eq!(e.scope, Some(vec!["unquoted".to_string()]));
        assert_eq!(e.error.as_deref(), Some("invalid_token"));
        // Garbage never panics.
        for s in ["", "=", "Bearer =\"", "Bearer a=\"unterminated", "\"\"\"", "Bearer ,,,, =, x"] {
            let _ = Challenge::parse(s);
        }
    }

    #[test]
    fn well_known_locations_follow_the_spec_order() {
        assert_eq!(
            prm_locations("http://localhost:3000/mcp/"),
            vec![
                "http://localhost:3000/.well-known/oauth-protected-resource/mcp",
                "http://localhost:3000/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(prm_locations("https://a.example"), vec!["https://a.example/.well-known/oauth-protected-resource"]);
        assert_eq!(
            as_metadata_locations("http://localhost:1/tenant1"),
            vec![
                "http://localhost:1/.well-known/oauth-authorization-server/tenant1",
                "http://localhost:1/.well-known/openid-configuration/tenant1",
                "http://localhost:1/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            as_metadata_locations("https://as.example/"),
            vec![
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration"
            ]
        );
        assert!(as_metadata_locations("not a url").is_empty());
    }

    #[test]
    fn resources_must_cover_the_server_url() {
        assert!(resource_matches("http://localhost:3000/mcp", "http://localhost:3000/mcp"));
        assert!(resource_matches("http://localhost:3000", "http://localhost:3000/mcp"));
        assert!(resource_matches("http://LOCALHOST:3000/", "http://localhost:3000/mcp/x"));
        assert!(!resource_matches("https://evil.example.com/mcp", "http://localhost:3000/mcp"));
        assert!(!resource_matches("http://localhost:3000/mcpx", "http://localhost:3000/mcp"));
        assert!(!resource_matches("http://localhost:3000/other", "http://localhost:3000/mcp"));
        assert!(!resource_matches("http://localhost:3001/mcp", "http://localhost:3000/mcp"));
        assert!(!resource_matches("http://localhost:3000/mcp#x", "http://localhost:3000/mcp"));
        assert_eq!(canonical_resource("HTTP://Example.COM/mcp/?q=1").as_deref(), Some("http://example.com/mcp"));
    }

    #[test]
    fn endpoints_must_be_https_or_loopback_http() {
        assert!(endpoint_allowed("https://as.example/token"));
        assert!(endpoint_allowed("http://127.0.0.1:9/token"));
        assert!(endpoint_allowed("http://localhost:9/token"));
        assert!(endpoint_allowed("http://[::1]:9/token"));
        assert!(!endpoint_allowed("http://as.example/token"));
        assert!(!endpoint_allowed("http://10.0.0.1/token"));
        assert!(!endpoint_allowed("ftp://as.example/token"));
        assert!(!endpoint_allowed("https://user:pw@as.example/token"));
        assert!(!endpoint_allowed("javascript:alert(1)"));
        assert!(!endpoint_allowed("https://as.example/token#frag"));
    }

    #[test]
    fn metadata_documents_are_parsed_and_s256_is_required() {
        let m = ServerMetadata::from_json(&json!({
            "issuer": "https://as.example", "authorization_endpoint": "https://as.example/a",
            "token_endpoint": "https://as.example/t", "code_challenge_methods_supported": ["plain"],
            "grant_types_supported": ["client_credentials"], "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            "client_id_metadata_document_supported": true
        }))
        .unwrap();
        assert!(!m.supports_s256());
        assert!(m.supports_grant("client_credentials") && !m.supports_grant("authorization_code"));
        assert!(m.supports_auth_method("private_key_jwt") && !m.supports_auth_method("none"));
        assert!(m.client_id_metadata_document_supported);
        let no_pkce = ServerMetadata::from_json(&json!({"token_endpoint": "https://as.example/t"})).unwrap();
        assert!(!no_pkce.supports_s256(), "absent code_challenge_methods_supported means no PKCE");
        assert!(no_pkce.supports_auth_method("client_secret_basic") && no_pkce.supports_grant("authorization_code"));
        assert!(ServerMetadata::fallback("http://127.0.0.1:5/").supports_s256());
        assert_eq!(ServerMetadata::fallback("http://127.0.0.1:5/").token_endpoint, "http://127.0.0.1:5/token");
        assert!(ServerMetadata::from_json(&json!({"issuer": "x"})).is_none(), "a token endpoint is required");
        assert!(ServerMetadata::from_json(&json!([1, 2])).is_none());
        let prm = ResourceMetadata::from_json(&json!({"resource": "https://r", "authorization_servers": ["https://as", 5], "scopes_supported": ["a", "b"]})).unwrap();
        assert_eq!(prm.authorization_servers, vec!["https://as"]);
        assert_eq!(prm.scopes_supported, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(split_scopes(" a  b a "), vec!["a", "b"]);
    }
}
