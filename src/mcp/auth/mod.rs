//! The client side of the MCP authorization spec (2025-11-25) for Streamable HTTP servers.
//!
//! Reading order: [`discovery`] (challenge, metadata locations and documents, the resource and
//! endpoint rules) · [`pkce`] (S256, `state`) · [`flow`] (the bounded HTTP exchanges) ·
//! [`tokens`] (what is stored, 0600). This file holds [`OAuth`], one server's authorization
//! state, which the transport consults through [`Authorizer`]: `bearer()` before each request
//! (refreshing an expired token), `challenge()` on a 401 or 403 (refresh, a new authorization,
//! or step-up to more scopes; retried at most [`MAX_ROUNDS`] times per request by the
//! transport, and a 403 for scopes already asked for is final).
//!
//! How an authorization-code flow gets its code is the pluggable [`UserAgent`]: the headless
//! one (`cashcode-mcp-client`, the conformance suite) follows the URL with GET; in the server
//! the user's browser does ([`OAuth::begin`] returns a [`PendingFlow`] whose URL the web
//! client opens, the callback route calls [`OAuth::finish`]).
//!
//! Runs on the caller's thread (an MCP transport thread or an `http-slow` handler); every wait
//! is a bounded HTTP exchange. Tokens are never logged or returned: `Debug` hides them, and
//! every value is published to the server's redaction registry as soon as it is known.

pub(crate) mod discovery;
pub mod flow;
pub mod pkce;
pub(crate) mod tokens;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use discovery::{Challenge, ResourceMetadata, ServerMetadata};
use flow::{Fetched, Grant, Http, Registration};
use tokens::{ClientCreds, Stored, TokenSet, TokenStore};

use super::{Error, Result};
use crate::util::sync::lock;

/// Authorizations (or refreshes) one request may trigger before it fails.
pub(crate) const MAX_ROUNDS: usize = 3;
/// How long a pending browser flow may wait for its callback.
pub(crate) const FLOW_TTL: Duration = Duration::from_secs(600);

/// What the transport asks before and after each request.
pub trait Authorizer: Send + Sync {
    /// The access token to send, refreshed first when it has expired; `None` before any.
    fn bearer(&self) -> Option<String>;
    /// The server answered `status` (401 or 403) with this `WWW-Authenticate`. `Ok` means a
    /// new token is in place and the request should be sent again.
    fn challenge(&self, status: u16, www_authenticate: Option<&str>) -> Result<()>;
}

/// How the authorization URL is visited.
pub(crate) trait UserAgent: Send + Sync {
    /// `Ok(Some(callback_url))` when the agent completed the visit itself; `Ok(None)` when a
    /// person must (the flow then waits for the callback route).
    fn visit(&self, http: &Http, authorization_url: &str, redirect_uri: &str) -> Result<Option<String>>;
    /// True when a person has to visit: a challenge then ends at once with
    /// `AuthorizationRequired`, without discovery or registration on the request's thread.
    fn needs_person(&self) -> bool {
        false
    }
}

/// Follows the URL with GET (the conformance suite's providers redirect at once).
pub(crate) struct Headless;

impl UserAgent for Headless {
    fn visit(&self, http: &Http, url: &str, redirect_uri: &str) -> Result<Option<String>> {
        flow::follow_headless(http, url, redirect_uri).map(Some)
    }
}

/// The server's agent: the user's browser, through the web client.
pub(crate) struct Browser;

impl UserAgent for Browser {
    fn visit(&self, _: &Http, _: &str, _: &str) -> Result<Option<String>> {
        Ok(None)
    }
    fn needs_person(&self) -> bool {
        true
    }
}

/// Which grant to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum GrantChoice {
    /// Authorization code, unless a pre-registered client meets a server that offers only
    /// `client_credentials`.
    #[default]
    Auto,
    /// `client_credentials` (machine-to-machine, no user).
    ClientCredentials,
}

/// How this client presents itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    pub(crate) client_name: String,
    pub(crate) redirect_uri: String,
    /// An https URL of our client ID metadata document, used as `client_id` where the server
    /// supports it (`client_id_metadata_document_supported`).
    pub(crate) client_metadata_url: Option<String>,
    /// A client registered out of band (its `auth_method` may be empty: chosen from metadata).
    pub(crate) preregistered: Option<ClientCreds>,
    pub(crate) grant: GrantChoice,
}

/// A browser flow waiting for its callback: bound to one `state`, used once, expiring.
pub(crate) struct PendingFlow {
    pub(crate) state: String,
    pub(crate) url: String,
    verifier: String,
    redirect_uri: String,
    found: Found,
    client: ClientCreds,
    scopes: Vec<String>,
    pub(crate) created: Instant,
}

impl std::fmt::Debug for PendingFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingFlow([REDACTED])")
    }
}

impl PendingFlow {
    pub(crate) fn expired(&self) -> bool {
        self.created.elapsed() > FLOW_TTL
    }

    /// A flow started `age` ago, for the callback's tests.
    #[cfg(test)]
    pub(crate) fn for_test(state: &str, age: Duration) -> PendingFlow {
        PendingFlow {
            state: state.to_string(),
            url: String::new(),
            verifier: String::new(),
            redirect_uri: String::new(),
            found: Found { prm: None, meta: ServerMetadata::default(), issuer: String::new(), resource: String::new() },
            client: ClientCreds::default(),
            scopes: Vec::new(),
            created: Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
        }
    }
}

/// Where discovery led.
#[derive(Debug, Clone)]
struct Found {
    prm: Option<ResourceMetadata>,
    meta: ServerMetadata,
    issuer: String,
    resource: String,
}

type SecretSink = Arc<dyn Fn(Vec<String>) + Send + Sync>;

#[derive(Default)]
struct Inner {
    stored: Option<Stored>,
    /// The last challenge the server sent (its scope and metadata URL).
    last: Challenge,
    found: Option<Found>,
}

/// One server's authorization state.
pub struct OAuth {
    server_url: String,
    settings: Settings,
    agent: Arc<dyn UserAgent>,
    store: Option<TokenStore>,
    http: Http,
    inner: Mutex<Inner>,
    on_secrets: Option<SecretSink>,
}

impl OAuth {
    pub(crate) fn new(server_url: &str, settings: Settings, agent: Arc<dyn UserAgent>) -> OAuth {
        OAuth {
            server_url: server_url.to_string(),
            settings,
            agent,
            store: None,
            http: Http::for_server(server_url),
            inner: Mutex::new(Inner::default()),
            on_secrets: None,
        }
    }

    /// Keeps tokens in `store` (loaded now, written after every change).
    pub(crate) fn with_store(mut self, store: TokenStore) -> OAuth {
        let stored = store.load(&self.server_url);
        self.store = Some(store);
        lock(&self.inner).stored = stored;
        self.publish();
        self
    }

    /// Tells `sink` every secret value (tokens, client secrets) whenever they change.
    pub(crate) fn with_secret_sink(mut self, sink: SecretSink) -> OAuth {
        self.on_secrets = Some(sink);
        self.publish();
        self
    }

    fn publish(&self) {
        if let Some(sink) = &self.on_secrets {
            let mut v = lock(&self.inner).stored.as_ref().map(Stored::secrets).unwrap_or_default();
            v.extend(self.settings.preregistered.as_ref().map(ClientCreds::secrets).unwrap_or_default());
            sink(v);
        }
    }

    /// Whether a token is held (maybe expired but refreshable).
    pub(crate) fn authorized(&self) -> bool {
        lock(&self.inner).stored.as_ref().and_then(|s| s.tokens.as_ref()).is_some()
    }

    /// Forgets the tokens (and the registered client), on disk too.
    pub(crate) fn sign_out(&self) -> std::io::Result<()> {
        lock(&self.inner).stored = None;
        if let Some(s) = &self.store {
            s.delete()?;
        }
        self.publish();
        Ok(())
    }

    fn save(&self, stored: Stored) {
        if let Some(s) = &self.store {
            if let Err(e) = s.save(&stored) {
                log::warn!("event=mcp.oauth.store_failed error_kind={:?}", e.kind());
            }
        }
        lock(&self.inner).stored = Some(stored);
        self.publish();
    }

    /// Probes the server without a token, so its challenge (scope, metadata URL) is known
    /// before a browser flow starts.
    fn probe(&self) {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": super::client::PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": self.settings.client_name, "version": env!("CARGO_PKG_VERSION")}}});
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(flow::EXCHANGE_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let resp = agent
            .post(&self.server_url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .send(body.to_string().as_str());
        if let Ok(r) = resp {
            if let Some(h) = r.headers().get("www-authenticate").and_then(|v| v.to_str().ok()) {
                lock(&self.inner).last = Challenge::parse(h);
            }
        }
    }

    /// [`discovery::endpoint_allowed`], and a loopback address only for a server that is on
    /// loopback itself: a remote server's metadata cannot point us at local services.
    fn allowed(&self, url: &str) -> bool {
        let local = |u: &str| crate::util::url::Origin::of(u).is_some_and(|o| crate::util::url::is_loopback(&o.host));
        discovery::endpoint_allowed(url) && (!local(url) || local(&self.server_url))
    }

    fn fetch(&self, url: &str) -> Result<Option<serde_json::Value>> {
        if !self.allowed(url) {
            return Err(Error::Auth(format!(
                "refusing metadata URL {} (https, or http on loopback only)",
                flow::short(url)
            )));
        }
        Ok(match self.http.get_json(url)? {
            Fetched::Json(v) => Some(v),
            Fetched::Missing(status) => {
                log::debug!("mcp oauth: no metadata at {} (HTTP {status})", flow::short(url));
                None
            }
        })
    }

    /// Protected-resource metadata, then the authorization server's.
    fn discover(&self, challenge: &Challenge) -> Result<Found> {
        let mut prm = None;
        match &challenge.resource_metadata {
            Some(url) => {
                let v =
                    self.fetch(url)?.ok_or_else(|| Error::Auth("the resource_metadata document is missing".into()))?;
                prm = Some(ResourceMetadata::from_json(&v).ok_or_else(|| Error::Auth("bad resource metadata".into()))?);
            }
            None => {
                for url in discovery::prm_locations(&self.server_url) {
                    if let Some(v) = self.fetch(&url)? {
                        prm = ResourceMetadata::from_json(&v);
                        if prm.is_some() {
                            break;
                        }
                    }
                }
            }
        }
        let origin_base = {
            let o = crate::util::url::Origin::of(&self.server_url)
                .ok_or_else(|| Error::Config("url must be an absolute HTTP(S) URL".into()))?;
            let (default, host) = (if o.scheme == "https" { 443 } else { 80 }, o.host.clone());
            if o.port == default {
                format!("{}://{host}", o.scheme)
            } else {
                format!("{}://{host}:{}", o.scheme, o.port)
            }
        };
        let (issuer, resource) = match &prm {
            Some(p) => {
                let resource =
                    p.resource.clone().ok_or_else(|| Error::Auth("the resource metadata names no resource".into()))?;
                if !discovery::resource_matches(&resource, &self.server_url) {
                    return Err(Error::Auth(format!(
                        "the resource metadata is for {} , not this server; refusing to authorize",
                        flow::short(&resource)
                    )));
                }
                let issuer = p
                    .authorization_servers
                    .first()
                    .cloned()
                    .ok_or_else(|| Error::Auth("the resource metadata names no authorization server".into()))?;
                (issuer, resource)
            }
            // 2025-03-26: the MCP server's origin is the authorization server.
            None => (
                origin_base.clone(),
                discovery::canonical_resource(&self.server_url).unwrap_or_else(|| self.server_url.clone()),
            ),
        };
        let mut meta = None;
        for url in discovery::as_metadata_locations(&issuer) {
            if let Some(v) = self.fetch(&url)? {
                if let Some(m) = ServerMetadata::from_json(&v) {
                    meta = Some(m);
                    break;
                }
            }
        }
        let meta = match meta {
            Some(m) => m,
            None if prm.is_none() => ServerMetadata::fallback(&issuer),
            None => return Err(Error::Auth("the authorization server publishes no metadata".into())),
        };
        if let Some(iss) = &meta.issuer {
            // RFC 8414 §3.3 wants identity; providers with tenant paths often publish their
            // origin, so the origin must match (a document naming another host is refused).
            if crate::util::url::Origin::of(iss) != crate::util::url::Origin::of(&issuer) {
                return Err(Error::Auth("the authorization server metadata names another issuer".into()));
            }
        }
        for url in
            [Some(&meta.token_endpoint), meta.authorization_endpoint.as_ref(), meta.registration_endpoint.as_ref()]
                .into_iter()
                .flatten()
        {
            if !self.allowed(url) {
                return Err(Error::Auth(format!(
                    "refusing endpoint {} (https, or http on loopback only)",
                    flow::short(url)
                )));
            }
        }
        Ok(Found { prm, meta, issuer, resource })
    }

    /// The client to use at this server: pre-registered, the one registered before, a
    /// metadata-document URL, or a fresh registration.
    fn client_for(&self, found: &Found, scope: Option<String>) -> Result<(ClientCreds, bool)> {
        if let Some(c) = &self.settings.preregistered {
            let mut c = c.clone();
            if c.auth_method.is_empty() {
                c.auth_method =
                    flow::choose_auth_method(&found.meta, c.client_secret.is_some(), c.private_key_pem.is_some());
            }
            return Ok((c, false));
        }
        if let Some(s) = lock(&self.inner).stored.as_ref().filter(|s| s.issuer == found.issuer) {
            if let Some(c) = &s.client {
                return Ok((c.clone(), true));
            }
        }
        if found.meta.client_id_metadata_document_supported {
            if let Some(url) = &self.settings.client_metadata_url {
                let c = ClientCreds { client_id: url.clone(), auth_method: "none".into(), ..ClientCreds::default() };
                return Ok((c, false));
            }
        }
        let endpoint = found.meta.registration_endpoint.as_deref().ok_or_else(|| {
            Error::Auth("the authorization server offers no dynamic client registration; configure a client id".into())
        })?;
        let reg =
            Registration { client_name: &self.settings.client_name, redirect_uri: &self.settings.redirect_uri, scope };
        let c = flow::register(&self.http, &found.meta, endpoint, &reg)?;
        log::info!("event=mcp.oauth.registered server_url={:?}", flow::short(&self.server_url));
        Ok((c, true))
    }

    /// Scopes for a new authorization: the challenge's, else all the resource supports, else
    /// none (the parameter is then omitted). Step-up adds what was asked before.
    fn scopes_for(&self, challenge: &Challenge, found: &Found, previous: &[String]) -> Vec<String> {
        let mut out: Vec<String> = previous.to_vec();
        let base = challenge
            .scope
            .clone()
            .or_else(|| found.prm.as_ref().and_then(|p| p.scopes_supported.clone()))
            .unwrap_or_default();
        for s in base {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    fn use_client_credentials(&self, found: &Found) -> bool {
        match self.settings.grant {
            GrantChoice::ClientCredentials => true,
            GrantChoice::Auto => {
                self.settings
                    .preregistered
                    .as_ref()
                    .is_some_and(|c| c.client_secret.is_some() || c.private_key_pem.is_some())
                    && found.meta.supports_grant("client_credentials")
                    && !found.meta.supports_grant("authorization_code")
            }
        }
    }

    /// Starts an authorization: discovery, client, PKCE, the URL to open. `previous` are the
    /// scopes of the current token (step-up keeps them).
    fn start(&self, challenge: &Challenge, previous: &[String]) -> Result<PendingFlow> {
        let found = self.discover(challenge)?;
        lock(&self.inner).found = Some(found.clone());
        let scopes = self.scopes_for(challenge, &found, previous);
        let scope = (!scopes.is_empty()).then(|| scopes.join(" "));
        let (client, registered) = self.client_for(&found, scope.clone())?;
        if registered {
            // Keep the registration (not the tokens yet) so a second flow reuses it.
            let mut s = lock(&self.inner).stored.clone().unwrap_or_default();
            s.server_url = self.server_url.clone();
            s.issuer = found.issuer.clone();
            s.token_endpoint = found.meta.token_endpoint.clone();
            s.resource = found.resource.clone();
            s.client = Some(client.clone());
            self.save(s);
        }
        if !found.meta.supports_s256() {
            return Err(Error::Auth("the authorization server does not offer PKCE S256; refusing to authorize".into()));
        }
        let endpoint = found
            .meta
            .authorization_endpoint
            .clone()
            .ok_or_else(|| Error::Auth("the authorization server has no authorization endpoint".into()))?;
        let pkce = pkce::Pkce::new();
        let state = pkce::new_state();
        let mut params: Vec<(&str, String)> = vec![
            ("response_type", "code".into()),
            ("client_id", client.client_id.clone()),
            ("redirect_uri", self.settings.redirect_uri.clone()),
            ("code_challenge", pkce.challenge.clone()),
            ("code_challenge_method", "S256".into()),
            ("state", state.clone()),
            ("resource", found.resource.clone()),
        ];
        if let Some(s) = &scope {
            params.push(("scope", s.clone()));
        }
        let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", flow::enc(v))).collect();
        let sep = if endpoint.contains('?') { '&' } else { '?' };
        let url = format!("{endpoint}{sep}{}", query.join("&"));
        Ok(PendingFlow {
            state,
            url,
            verifier: pkce.verifier,
            redirect_uri: self.settings.redirect_uri.clone(),
            found,
            client,
            scopes,
            created: Instant::now(),
        })
    }

    /// A browser flow for the server's authorize route.
    pub(crate) fn begin(&self) -> Result<PendingFlow> {
        let mut challenge = lock(&self.inner).last.clone();
        if challenge == Challenge::default() {
            self.probe();
            challenge = lock(&self.inner).last.clone();
        }
        self.start(&challenge, &[])
    }

    /// Completes a flow from its callback URL's parameters: checks `state` (constant time),
    /// refuses an expired flow or a provider error, exchanges the code with the verifier.
    pub(crate) fn finish(&self, flow: PendingFlow, params: &[(String, String)]) -> Result<()> {
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        if !get("state").is_some_and(|s| pkce::same(s, &flow.state)) {
            return Err(Error::Auth("the callback's state does not match the flow".into()));
        }
        if flow.expired() {
            return Err(Error::Auth("the authorization took too long; start again".into()));
        }
        if let Some(e) = get("error") {
            return Err(Error::Auth(format!("the provider refused: {}", crate::util::text::take_chars(e, 80))));
        }
        let code = get("code").filter(|c| !c.is_empty() && c.len() <= tokens::MAX_SECRET_LEN);
        let code = code.ok_or_else(|| Error::Auth("the callback carries no code".into()))?;
        let grant = Grant {
            form: vec![
                ("grant_type".into(), "authorization_code".into()),
                ("code".into(), code.to_string()),
                ("redirect_uri".into(), flow.redirect_uri.clone()),
                ("code_verifier".into(), flow.verifier.clone()),
                ("resource".into(), flow.found.resource.clone()),
            ],
            scopes: flow.scopes.clone(),
        };
        let tokens = flow::token(&self.http, &flow.found.meta.token_endpoint, &flow.found.issuer, &flow.client, grant)?;
        self.keep(&flow.found, Some(flow.client), tokens);
        log::info!("event=mcp.oauth.authorized server_url={:?}", flow::short(&self.server_url));
        Ok(())
    }

    fn keep(&self, found: &Found, client: Option<ClientCreds>, tokens: TokenSet) {
        let previous_client = lock(&self.inner).stored.as_ref().and_then(|s| s.client.clone());
        // Pre-registered credentials are configuration, not state: never written here.
        let client = match (&self.settings.preregistered, client) {
            (Some(_), _) => None,
            (None, Some(c)) => Some(c),
            (None, None) => previous_client,
        };
        self.save(Stored {
            server_url: self.server_url.clone(),
            issuer: found.issuer.clone(),
            token_endpoint: found.meta.token_endpoint.clone(),
            resource: found.resource.clone(),
            client,
            tokens: Some(tokens),
        });
    }

    fn client_credentials(&self, found: &Found, scopes: Vec<String>) -> Result<()> {
        let (client, _) = self.client_for(found, None)?;
        let mut form = vec![
            ("grant_type".to_string(), "client_credentials".to_string()),
            ("resource".into(), found.resource.clone()),
        ];
        if !scopes.is_empty() {
            form.push(("scope".into(), scopes.join(" ")));
        }
        let tokens =
            flow::token(&self.http, &found.meta.token_endpoint, &found.issuer, &client, Grant { form, scopes })?;
        self.keep(found, None, tokens);
        log::info!("event=mcp.oauth.client_credentials server_url={:?}", flow::short(&self.server_url));
        Ok(())
    }

    /// Uses the refresh token; `Ok(false)` when there is none. A refused refresh drops the
    /// tokens (the user has to authorize again).
    fn refresh(&self) -> Result<bool> {
        let Some(stored) = lock(&self.inner).stored.clone() else { return Ok(false) };
        let Some(tokens) = stored.tokens.clone() else { return Ok(false) };
        let Some(refresh) = tokens.refresh_token.clone() else { return Ok(false) };
        let client = self.settings.preregistered.clone().map(|mut c| {
            if c.auth_method.is_empty() {
                c.auth_method = if c.client_secret.is_some() { "client_secret_basic".into() } else { "none".into() };
            }
            c
        });
        let Some(client) = client.or(stored.client.clone()) else { return Ok(false) };
        let grant = Grant {
            form: vec![
                ("grant_type".into(), "refresh_token".into()),
                ("refresh_token".into(), refresh.clone()),
                ("resource".into(), stored.resource.clone()),
            ],
            scopes: tokens.requested_scopes.clone(),
        };
        match flow::token(&self.http, &stored.token_endpoint, &stored.issuer, &client, grant) {
            Ok(mut fresh) => {
                if fresh.refresh_token.is_none() {
                    fresh.refresh_token = Some(refresh);
                }
                let mut s = stored;
                s.tokens = Some(fresh);
                self.save(s);
                log::info!("event=mcp.oauth.refreshed server_url={:?}", flow::short(&self.server_url));
                Ok(true)
            }
            Err(e) => {
                log::warn!(
                    "event=mcp.oauth.refresh_failed server_url={:?} error={:?}",
                    flow::short(&self.server_url),
                    self.redact(&e.to_string())
                );
                let mut s = stored;
                s.tokens = None;
                self.save(s);
                Ok(false)
            }
        }
    }

    /// Text with this server's secret values removed (errors that quote a peer).
    fn redact(&self, text: &str) -> String {
        let mut v = lock(&self.inner).stored.as_ref().map(Stored::secrets).unwrap_or_default();
        v.extend(self.settings.preregistered.as_ref().map(ClientCreds::secrets).unwrap_or_default());
        let known: Vec<&str> = v.iter().map(String::as_str).collect();
        crate::util::redact::redact_with(text, &known)
    }

    /// A new token through the configured agent, or `AuthorizationRequired`.
    fn authorize(&self, challenge: &Challenge, previous: &[String]) -> Result<()> {
        if self.agent.needs_person() {
            return Err(Error::AuthorizationRequired("sign in on the server's authorization page".into()));
        }
        let found = self.discover(challenge)?;
        if self.use_client_credentials(&found) {
            let scopes = self.scopes_for(challenge, &found, previous);
            return self.client_credentials(&found, scopes);
        }
        let flow = self.start(challenge, previous)?;
        match self.agent.visit(&self.http, &flow.url, &flow.redirect_uri)? {
            Some(callback) => {
                let params = flow::query_params(&callback);
                self.finish(flow, &params)
            }
            None => Err(Error::AuthorizationRequired("open the server's authorization page".into())),
        }
    }
}

impl Authorizer for OAuth {
    fn bearer(&self) -> Option<String> {
        let expired = lock(&self.inner).stored.as_ref().and_then(|s| s.tokens.as_ref()).map(TokenSet::expired);
        if expired == Some(true) {
            let _ = self.refresh();
        }
        lock(&self.inner).stored.as_ref().and_then(|s| s.tokens.as_ref()).map(|t| t.access_token.clone())
    }

    fn challenge(&self, status: u16, www_authenticate: Option<&str>) -> Result<()> {
        let challenge = www_authenticate.map(Challenge::parse).unwrap_or_default();
        lock(&self.inner).last = challenge.clone();
        let current = lock(&self.inner).stored.as_ref().and_then(|s| s.tokens.clone());
        if status == 403 {
            if !challenge.insufficient_scope() {
                return Err(Error::Auth("the server refused the token (HTTP 403)".into()));
            }
            let held = current.map(|t| t.requested_scopes).unwrap_or_default();
            let wanted = challenge.scope.clone().unwrap_or_default();
            if wanted.is_empty() || wanted.iter().all(|s| held.contains(s)) {
                // Asking again for what was already granted cannot help (no loop).
                return Err(Error::Auth(
                    "the server wants scopes this authorization already asked for (HTTP 403)".into(),
                ));
            }
            log::info!("event=mcp.oauth.step_up scopes={:?}", wanted);
            return self.authorize(&challenge, &held);
        }
        if current.is_some() {
            if self.refresh()? {
                return Ok(());
            }
            // The server no longer takes this token and it cannot be refreshed: forget it (the
            // registered client stays), so the status says "required" rather than "authorized".
            let stored = lock(&self.inner).stored.clone();
            if let Some(mut s) = stored.filter(|s| s.tokens.is_some()) {
                s.tokens = None;
                self.save(s);
            }
        }
        self.authorize(&challenge, &[])
    }
}

/// The headless authorizer of `cashcode-mcp-client`: redirect URI on loopback (never
/// contacted; the provider's redirect is read, not followed), an optional client ID metadata
/// document URL, and a pre-registered client from `context` when it names one (the
/// conformance suite's `MCP_CONFORMANCE_CONTEXT`: `client_id`, `client_secret`,
/// `private_key_pem`). Tokens stay in memory.
pub fn headless(server_url: &str, context: Option<&str>, client_metadata_url: Option<String>) -> OAuth {
    let ctx: serde_json::Value = context
        .filter(|c| c.len() <= 64 * 1024 && crate::util::json::too_deep(c.as_bytes(), 8).is_none())
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    let field = |k: &str| ctx.get(k).and_then(serde_json::Value::as_str).filter(|s| !s.is_empty()).map(String::from);
    let preregistered = field("client_id").map(|client_id| ClientCreds {
        client_id,
        client_secret: field("client_secret"),
        auth_method: String::new(),
        private_key_pem: field("private_key_pem"),
    });
    let grant = match &preregistered {
        Some(c) if c.private_key_pem.is_some() => GrantChoice::ClientCredentials,
        _ => GrantChoice::Auto,
    };
    let settings = Settings {
        client_name: "cashcode-mcp-client".into(),
        redirect_uri: "http://127.0.0.1/cashcode-mcp-client/callback".into(),
        client_metadata_url,
        preregistered,
        grant,
    };
    OAuth::new(server_url, settings, Arc::new(Headless))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn browser(url: &str) -> OAuth {
        OAuth::new(url, Settings::default(), Arc::new(Browser))
    }

    #[test]
    fn a_remote_server_cannot_point_discovery_at_loopback() {
        let remote = browser("https://mcp.example/mcp");
        assert!(remote.allowed("https://as.example/.well-known/oauth-authorization-server"));
        assert!(!remote.allowed("http://127.0.0.1:8000/api/sessions"));
        assert!(!remote.allowed("https://localhost/x"));
        assert!(!remote.allowed("http://as.example/token"));
        let local = browser("http://127.0.0.1:9/mcp");
        assert!(local.allowed("http://localhost:10/token"));
        assert!(local.allowed("https://as.example/token"));
    }

    /// The name check above sees `127.1` or `[::ffff:7f00:1]` as some remote host; the address
    /// they resolve to is checked where the request connects, so a remote server's metadata
    /// reaches no local service in any spelling, and nothing connects.
    #[test]
    fn a_remote_server_cannot_point_discovery_at_loopback_in_any_spelling() {
        let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        trap.set_nonblocking(true).unwrap();
        let p = trap.local_addr().unwrap().port();
        // A public address literal: no DNS needed to know the server is remote.
        let remote = browser("https://93.184.216.34/mcp");
        for host in ["127.1", "2130706433", "0x7f.1", "[::ffff:7f00:1]", "[::ffff:127.0.0.1]"] {
            let url = format!("https://{host}:{p}/.well-known/oauth-authorization-server");
            assert!(remote.allowed(&url), "{url}: the name check alone lets it through");
            let e = remote.fetch(&url).err().unwrap_or_else(|| panic!("{url} was fetched"));
            assert!(e.to_string().contains("a loopback address"), "{url}: {e}");
        }
        for url in ["https://169.254.169.254/latest", "https://10.0.0.1/token", "https://[fd00::1]/token"] {
            let e = remote.fetch(url).err().unwrap_or_else(|| panic!("{url} was fetched"));
            assert!(e.to_string().contains("refusing"), "{url}: {e}");
        }
        assert!(trap.accept().is_err(), "a refused endpoint was connected to");
        // A local server's own loopback endpoints are reached, over http too.
        let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let q = peer.local_addr().unwrap().port();
        let answer = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut c, _) = peer.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        });
        let local = browser("http://127.0.0.1:9/mcp");
        assert!(matches!(local.fetch(&format!("http://127.0.0.1:{q}/x")), Ok(None)));
        answer.join().unwrap();
    }

    #[test]
    fn challenges_without_a_person_end_in_authorization_required_and_403s_do_not_loop() {
        let o = browser("http://127.0.0.1:9/mcp");
        assert!(matches!(o.challenge(401, Some("Bearer")), Err(Error::AuthorizationRequired(_))));
        assert!(matches!(o.challenge(401, None), Err(Error::AuthorizationRequired(_))));
        // A 403 that is not about scopes is final.
        assert!(matches!(o.challenge(403, Some("Bearer error=\"invalid_token\"")), Err(Error::Auth(_))));
        // A token that already asked for the challenged scopes is not re-authorized.
        lock(&o.inner).stored = Some(Stored {
            tokens: Some(TokenSet {
                access_token: "at-0123456789".into(),
                requested_scopes: vec!["a".into(), "b".into()],
                ..TokenSet::default()
            }),
            ..Stored::default()
        });
        let e = o.challenge(403, Some("Bearer error=\"insufficient_scope\", scope=\"a\""));
        assert!(matches!(e, Err(Error::Auth(ref m)) if m.contains("already asked for")), "{e:?}");
        // More scopes: step-up, which needs the person here.
        let e = o.challenge(403, Some("Bearer error=\"insufficient_scope\", scope=\"a c\""));
        assert!(matches!(e, Err(Error::AuthorizationRequired(_))), "{e:?}");
        assert_eq!(o.bearer().as_deref(), Some("at-0123456789"));
        assert!(o.authorized());
        // A 401 for a token that cannot be refreshed drops it.
        assert!(matches!(
            o.challenge(401, Some("Bearer error=\"invalid_token\"")),
            Err(Error::AuthorizationRequired(_))
        ));
        assert!(!o.authorized() && o.bearer().is_none());
        o.sign_out().unwrap();
        assert!(!o.authorized());
    }

    #[test]
    fn headless_reads_a_preregistered_client_from_the_context() {
        let o = headless(
            "http://127.0.0.1:9/mcp",
            Some(r#"{"name":"x","client_id":"id-1","client_secret":"sec-0123456789"}"#),
            None,
        );
        let c = o.settings.preregistered.clone().expect("client");
        assert_eq!((c.client_id.as_str(), c.client_secret.as_deref()), ("id-1", Some("sec-0123456789")));
        assert_eq!(o.settings.grant, GrantChoice::Auto);
        let k = headless("http://127.0.0.1:9/mcp", Some(r#"{"client_id":"id","private_key_pem":"pem"}"#), None);
        assert_eq!(k.settings.grant, GrantChoice::ClientCredentials);
        for bad in [None, Some("not json"), Some("[[[[[[[[[[[[1]]]]]]]]]]]]"), Some(r#"{"client_id": 5}"#)] {
            assert!(headless("http://127.0.0.1:9/mcp", bad, None).settings.preregistered.is_none(), "{bad:?}");
        }
    }
}
