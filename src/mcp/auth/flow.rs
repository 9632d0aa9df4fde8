//! The OAuth HTTP exchanges, each bounded (10 s, 256 KiB, JSON depth 16, no redirects
//! followed: a metadata document or token endpoint that redirects is treated as absent or
//! failed): metadata fetches, dynamic client registration (RFC 7591), the token endpoint
//! (authorization_code, refresh_token, client_credentials) with the four client
//! authentications (`none`, `client_secret_basic`, `client_secret_post`, `private_key_jwt`
//! with ES256, RFC 7523), and the headless user agent that follows an authorization URL with
//! GET until the provider redirects to our `redirect_uri`. Runs on the caller's thread (an
//! MCP transport thread or an `http-slow` handler).

use std::io::Read;
use std::time::Duration;

use serde_json::{json, Value};

use super::discovery::{endpoint_allowed, split_scopes, ServerMetadata};
use super::pkce::b64;
#[cfg(feature = "oauth")]
use super::pkce::{b64_decode, b64url};
use super::tokens::{now_secs, ClientCreds, TokenSet, MAX_SECRET_LEN};
use crate::mcp::{Error, Result};
use crate::util::netguard::{PeerResolver, Refused};
use crate::util::text;
use ureq::unversioned::transport::DefaultConnector;

/// Whole-exchange limit of one OAuth request.
pub(crate) const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest document or token response read.
const MAX_BODY: u64 = 256 * 1024;
/// Deepest JSON accepted from metadata, registration and token responses.
const MAX_DEPTH: usize = 16;
/// Redirects the headless user agent follows before reaching the redirect URI.
const MAX_AGENT_REDIRECTS: usize = 5;

/// One ureq agent for every OAuth request of one MCP server: explicit timeouts, statuses as
/// values, no redirects of its own, and every address checked where it is resolved
/// ([`PeerResolver`]: public addresses only unless the server itself is on a non-public one,
/// plain http to loopback only), so no name or spelling reaches what the URL check would
/// refuse. No proxy: a proxy would resolve the host itself, unchecked.
#[derive(Clone)]
pub(crate) struct Http {
    agent: ureq::Agent,
}

/// A metadata fetch: the document, or why there is none (a status or a non-JSON body).
pub(crate) enum Fetched {
    Json(Value),
    Missing(u16),
}

impl Http {
    /// The agent for OAuth requests on behalf of the MCP server at `server_url`.
    pub(crate) fn for_server(server_url: &str) -> Http {
        Http::new(server_url, EXCHANGE_TIMEOUT)
    }

    pub(crate) fn new(server_url: &str, timeout: Duration) -> Http {
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(timeout))
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(None)
            .user_agent(concat!("cashcode-mcp/", env!("CARGO_PKG_VERSION")))
            .build();
        let agent = ureq::Agent::with_parts(config, DefaultConnector::default(), PeerResolver::new(server_url));
        Http { agent }
    }

    /// GETs a metadata document (the URL must already have passed [`endpoint_allowed`]).
    pub(crate) fn get_json(&self, url: &str) -> Result<Fetched> {
        let resp = self
            .agent
            .get(url)
            .header("Accept", "application/json")
            .header("MCP-Protocol-Version", crate::mcp::client::PROTOCOL_VERSION)
            .call()
            .map_err(|e| net_error(url, e))?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Ok(Fetched::Missing(status));
        }
        Ok(match read_json(resp.into_body()) {
            Some(v) => Fetched::Json(v),
            None => Fetched::Missing(status),
        })
    }

    fn post(&self, url: &str, body: PostBody<'_>, basic: Option<(&str, &str)>) -> Result<(u16, Value)> {
        if !endpoint_allowed(url) {
            return Err(Error::Auth(format!("refusing endpoint {} (https, or http on loopback only)", short(url))));
        }
        let mut req = self.agent.post(url).header("Accept", "application/json");
        if let Some((id, secret)) = basic {
            let pair = format!("{}:{}", enc(id), enc(secret));
            req = req.header("Authorization", format!("Basic {}", b64(pair.as_bytes())).as_str());
        }
        let resp = match body {
            PostBody::Form(pairs) => {
                let text: Vec<String> = pairs.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect();
                req.header("Content-Type", "application/x-www-form-urlencoded").send(text.join("&").as_str())
            }
            PostBody::Json(v) => req.header("Content-Type", "application/json").send(v.to_string().as_str()),
        }
        .map_err(|e| net_error(url, e))?;
        let status = resp.status().as_u16();
        Ok((status, read_json(resp.into_body()).unwrap_or(Value::Null)))
    }
}

enum PostBody<'a> {
    Form(&'a [(String, String)]),
    Json(&'a Value),
}

fn read_json(body: ureq::Body) -> Option<Value> {
    let mut buf = Vec::new();
    body.into_reader().take(MAX_BODY).read_to_end(&mut buf).ok()?;
    if crate::util::json::too_deep(&buf, MAX_DEPTH).is_some() {
        return None;
    }
    serde_json::from_slice(&buf).ok()
}

/// A network failure, naming the URL's origin only (never a query, which may hold a code).
fn net_error(url: &str, e: ureq::Error) -> Error {
    if let Some(r) = Refused::from_ureq(&e) {
        return Error::Auth(format!("refusing {}: {r}", short(url)));
    }
    let what = match e {
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        other => text::take_chars(&crate::util::redact::redact(&other.to_string()), 200).to_string(),
    };
    Error::Auth(format!("request to {} failed: {what}", short(url)))
}

/// `scheme://authority/path` of a URL, cut to 200 characters (no query: it may hold secrets).
pub(crate) fn short(url: &str) -> String {
    let no_query = url.split(['?', '#']).next().unwrap_or("");
    text::take_chars(no_query, 200).to_string()
}

/// Percent-encodes everything but RFC 3986 unreserved characters (query and form values).
pub(crate) fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The query parameters of a URL (`+` is a space), first occurrence of each kept.
pub fn query_params(url: &str) -> Vec<(String, String)> {
    let query = url.split('#').next().unwrap_or("").split_once('?').map(|(_, q)| q).unwrap_or("");
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in query.split('&').take(64) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let dec = |s: &str| percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
        let k = dec(k);
        if !k.is_empty() && !out.iter().any(|(o, _)| *o == k) {
            out.push((k, dec(v)));
        }
    }
    out
}

/// What we ask a registration endpoint for.
pub(crate) struct Registration<'a> {
    pub(crate) client_name: &'a str,
    pub(crate) redirect_uri: &'a str,
    pub(crate) scope: Option<String>,
}

/// Dynamic client registration (RFC 7591): a public client when the server takes `none`,
/// else a confidential one with the method it supports.
pub(crate) fn register(
    http: &Http,
    meta: &ServerMetadata,
    endpoint: &str,
    r: &Registration<'_>,
) -> Result<ClientCreds> {
    let method = ["none", "client_secret_basic", "client_secret_post"]
        .into_iter()
        .find(|m| meta.supports_auth_method(m))
        .unwrap_or("client_secret_basic");
    let mut body = json!({
        "client_name": r.client_name,
        "redirect_uris": [r.redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
    });
    if let Some(s) = &r.scope {
        body["scope"] = json!(s);
    }
    let (status, v) = http.post(endpoint, PostBody::Json(&body), None)?;
    if !(200..300).contains(&status) {
        return Err(Error::Auth(format!("client registration answered HTTP {status}{}", oauth_error(&v))));
    }
    let field = |k: &str| v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= MAX_SECRET_LEN);
    let client_id =
        field("client_id").ok_or_else(|| Error::Auth("client registration returned no client_id".into()))?;
    let client_secret = field("client_secret").map(String::from);
    let auth_method = match field("token_endpoint_auth_method") {
        Some(m) => m.to_string(),
        None => choose_auth_method(meta, client_secret.is_some(), false),
    };
    Ok(ClientCreds { client_id: client_id.to_string(), client_secret, auth_method, private_key_pem: None })
}

/// The token-endpoint authentication for a client: a key signs a JWT, a secret goes the way
/// the server supports (Basic first, the RFC 6749 default), nothing means a public client.
pub(crate) fn choose_auth_method(meta: &ServerMetadata, has_secret: bool, has_key: bool) -> String {
    if has_key {
        "private_key_jwt".into()
    } else if !has_secret {
        "none".into()
    } else if !meta.supports_auth_method("client_secret_basic") && meta.supports_auth_method("client_secret_post") {
        "client_secret_post".into()
    } else {
        "client_secret_basic".into()
    }
}

/// What a token request carries besides the client authentication.
pub(crate) struct Grant {
    pub(crate) form: Vec<(String, String)>,
    pub(crate) scopes: Vec<String>,
}

/// One token request; the client authenticates as its `auth_method` says. `audience` is the
/// issuer, the `aud` of a `private_key_jwt` assertion.
pub(crate) fn token(
    http: &Http,
    endpoint: &str,
    audience: &str,
    client: &ClientCreds,
    grant: Grant,
) -> Result<TokenSet> {
    let mut form = grant.form;
    let mut basic = None;
    match client.auth_method.as_str() {
        "client_secret_basic" => {
            let secret = client.client_secret.as_deref().unwrap_or("");
            basic = Some((client.client_id.as_str(), secret));
        }
        "client_secret_post" => {
            form.push(("client_id".into(), client.client_id.clone()));
            form.push(("client_secret".into(), client.client_secret.clone().unwrap_or_default()));
        }
        "private_key_jwt" => {
            let pem = client
                .private_key_pem
                .as_deref()
                .ok_or_else(|| Error::Auth("private_key_jwt needs a private key".into()))?;
            form.push(("client_id".into(), client.client_id.clone()));
            form.push((
                "client_assertion_type".into(),
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".into(),
            ));
            form.push(("client_assertion".into(), jwt_assertion(pem, &client.client_id, audience)?));
        }
        _ => form.push(("client_id".into(), client.client_id.clone())),
    }
    let (status, v) = http.post(endpoint, PostBody::Form(&form), basic)?;
    if status != 200 {
        return Err(Error::Auth(format!("the token endpoint answered HTTP {status}{}", oauth_error(&v))));
    }
    parse_token_response(&v, grant.scopes)
}

fn parse_token_response(v: &Value, requested: Vec<String>) -> Result<TokenSet> {
    let access = v
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= MAX_SECRET_LEN && s.bytes().all(|b| (0x21..0x7f).contains(&b)))
        .ok_or_else(|| Error::Auth("the token response has no usable access_token".into()))?;
    let kind = v.get("token_type").and_then(Value::as_str).unwrap_or("");
    if !kind.eq_ignore_ascii_case("bearer") {
        return Err(Error::Auth(format!("unsupported token_type '{}'", text::take_chars(kind, 40))));
    }
    let expires_at =
        v.get("expires_in").and_then(Value::as_u64).map(|s| now_secs().saturating_add(s.min(10 * 365 * 86400)));
    let refresh_token = v
        .get("refresh_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= MAX_SECRET_LEN)
        .map(String::from);
    // What we asked for is what step-up compares with; a narrower grant shows in `scope`.
    let requested_scopes = match v.get("scope").and_then(Value::as_str) {
        Some(granted) if !requested.is_empty() => {
            let g = split_scopes(granted);
            requested.into_iter().filter(|s| g.contains(s)).collect()
        }
        _ => requested,
    };
    Ok(TokenSet { access_token: access.to_string(), refresh_token, expires_at, requested_scopes })
}

/// ` (error: description)` from an OAuth error body, short; empty when there is none.
fn oauth_error(v: &Value) -> String {
    let code = v.get("error").and_then(Value::as_str).unwrap_or("");
    if code.is_empty() {
        return String::new();
    }
    let desc = v.get("error_description").and_then(Value::as_str).unwrap_or("");
    let one: String = format!("{code}: {desc}").chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    format!(" ({})", text::take_chars(one.trim_end_matches([':', ' ']), 200))
}

/// An RFC 7523 client assertion signed with ES256: `iss` = `sub` = client id, `aud` = the
/// issuer, five minutes valid, a random `jti`.
#[cfg(feature = "oauth")]
pub(crate) fn jwt_assertion(pem: &str, client_id: &str, audience: &str) -> Result<String> {
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    let der = pem_body(pem).ok_or_else(|| Error::Auth("the private key is not a PKCS#8 PEM".into()))?;
    let rng = SystemRandom::new();
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng)
        .map_err(|_| Error::Auth("the private key is not a P-256 (ES256) PKCS#8 key".into()))?;
    let now = now_secs();
    let header = json!({"alg": "ES256", "typ": "JWT"});
    let claims = json!({
        "iss": client_id, "sub": client_id, "aud": audience,
        "iat": now, "exp": now + 300, "jti": crate::util::rand::uuid4(),
    });
    let signing_input = format!("{}.{}", b64url(header.to_string().as_bytes()), b64url(claims.to_string().as_bytes()));
    let sig = key
        .sign(&rng, signing_input.as_bytes())
        .map_err(|_| Error::Auth("signing the client assertion failed".into()))?;
    Ok(format!("{signing_input}.{}", b64url(sig.as_ref())))
}

/// A build without the `oauth` feature cannot sign: the client is refused, naming the feature.
#[cfg(not(feature = "oauth"))]
pub(crate) fn jwt_assertion(_pem: &str, _client_id: &str, _audience: &str) -> Result<String> {
    Err(Error::Auth("private_key_jwt needs CashCode built with the `oauth` feature (this build has it off)".into()))
}

#[cfg(feature = "oauth")]
fn pem_body(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN PRIVATE KEY-----")? + "-----BEGIN PRIVATE KEY-----".len();
    let end = pem[start..].find("-----END PRIVATE KEY-----")? + start;
    b64_decode(&pem[start..end])
}

/// Follows an authorization URL with GET, as a browser would without a person: the test
/// providers of the conformance suite redirect at once to the redirect URI with the code.
/// Returns that redirect (the callback URL). Every hop must pass [`endpoint_allowed`].
pub(crate) fn follow_headless(http: &Http, url: &str, redirect_uri: &str) -> Result<String> {
    let mut current = url.to_string();
    for _ in 0..MAX_AGENT_REDIRECTS {
        if !endpoint_allowed(&current) {
            return Err(Error::Auth(format!("refusing authorization page {}", short(&current))));
        }
        let resp = http.agent.get(&current).call().map_err(|e| net_error(&current, e))?;
        let status = resp.status().as_u16();
        let location = resp.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or("").trim().to_string();
        if !(300..400).contains(&status) || location.is_empty() {
            return Err(Error::AuthorizationRequired(format!(
                "the authorization page {} needs a person (HTTP {status})",
                short(&current)
            )));
        }
        let next = crate::util::url::join(&current, &location)
            .ok_or_else(|| Error::Auth("the authorization page redirected to an invalid URL".into()))?;
        if next.starts_with(redirect_uri) {
            return Ok(next);
        }
        current = next;
    }
    Err(Error::Auth("too many redirects on the authorization page".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_and_query_parsing_round_trip() {
        assert_eq!(enc("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
        let q = query_params("http://127.0.0.1/cb?code=a%2Bb&state=x+y&code=second#frag");
        assert_eq!(q, vec![("code".to_string(), "a+b".to_string()), ("state".to_string(), "x y".to_string())]);
        assert!(query_params("http://x/").is_empty());
        assert_eq!(short("https://as.example/t?code=secret#f"), "https://as.example/t");
    }

    #[test]
    fn token_responses_are_checked() {
        let ok = parse_token_response(
            &json!({"access_token": "abc", "token_type": "bearer", "expires_in": 60, "scope": "a"}),
            vec!["a".into(), "b".into()],
        )
        .unwrap();
        assert_eq!(ok.requested_scopes, vec!["a"]);
        assert!(ok.expires_at.is_some());
        for bad in [
            json!({"token_type": "Bearer"}),
            json!({"access_token": "abc", "token_type": "mac"}),
            json!({"access_token": "a b", "token_type": "Bearer"}),
            json!({"access_token": "x".repeat(MAX_SECRET_LEN + 1), "token_type": "Bearer"}),
        ] {
            assert!(parse_token_response(&bad, vec![]).is_err(), "{bad}");
        }
        assert_eq!(
            oauth_error(&json!({"error": "invalid_client", "error_description": "no\nway"})),
            " (invalid_client: no way)"
        );
        assert_eq!(oauth_error(&Value::Null), "");
    }

    #[test]
    #[cfg(feature = "oauth")]
    fn es256_assertions_verify_with_the_public_key() {
        use ring::signature::{
            EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING,
        };
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", b64(pkcs8.as_ref()));
        let public = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap()
            .public_key()
            .as_ref()
            .to_vec();
        let jwt = jwt_assertion(&pem, "client-1", "https://as.example").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        use base64::Engine;
        let dec = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).unwrap();
        let claims: Value = serde_json::from_slice(&dec(parts[1])).unwrap();
        assert_eq!(
            (claims["iss"].as_str(), claims["sub"].as_str(), claims["aud"].as_str()),
            (Some("client-1"), Some("client-1"), Some("https://as.example"))
        );
        let input = format!("{}.{}", parts[0], parts[1]);
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &public)
            .verify(input.as_bytes(), &dec(parts[2]))
            .expect("signature verifies");
        assert!(jwt_assertion("not a pem", "c", "a").is_err());
        assert!(jwt_assertion("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----", "c", "a").is_err());
    }
}
