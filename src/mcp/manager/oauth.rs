//! OAuth for Streamable HTTP servers, as the server drives it for a browser: one `OAuth` per
//! server (stored tokens loaded on first use, its secrets published to the redaction registry),
//! handed to the transport as its `Authorizer`; `authorize` starts a flow (discovery, maybe
//! registration; network-bound, on an `http-slow` thread) and parks its `PendingFlow` by
//! `state`; the callback takes it out once and exchanges the code; sign-out forgets the tokens.

use std::sync::Arc;

use super::{McpManager, NOT_CONFIGURED};
use crate::mcp::auth::{self, OAuth};
use crate::mcp::catalog::{Kind, ServerConfig};
use crate::mcp::status::redact_status;
use crate::mcp::views::{Authorization, ServerView};
use crate::mcp::McpError;
use crate::util::sync::lock;

/// The callback route of browser OAuth flows (`http::mcp_routes`).
pub(crate) const OAUTH_CALLBACK_PATH: &str = "/api/mcp/oauth/callback";
/// Browser flows waiting for their callback at once (older ones are dropped first).
const MAX_PENDING_FLOWS: usize = 16;

/// Where OAuth providers send the browser back: CashCode's own callback route on its HTTP
/// listener (loopback and wildcard binds as `127.0.0.1`).
pub(crate) fn oauth_redirect_uri(http_host: &str, port: u16) -> String {
    let h = http_host;
    let host = if crate::util::url::is_loopback(h) || h == "0.0.0.0" || h == "::" || h == "[::]" {
        "127.0.0.1".to_string()
    } else if h.contains(':') && !h.starts_with('[') {
        format!("[{h}]")
    } else {
        h.to_string()
    };
    format!("http://{host}:{port}{OAUTH_CALLBACK_PATH}")
}

impl McpManager {
    /// Sets the OAuth redirect URI ([`oauth_redirect_uri`] of the bound HTTP listener), before
    /// any request is served.
    pub(crate) fn set_oauth_redirect(&self, uri: String) {
        *lock(&self.redirect_uri) = uri;
    }

    /// `"authorized"` with a token held, `"required"` when the last connect asked for one.
    pub(super) fn auth_state(&self, cfg: &ServerConfig) -> Option<&'static str> {
        let oauth = self.oauth_for(cfg)?;
        if oauth.authorized() {
            Some("authorized")
        } else if lock(&self.slot(&cfg.name).state).auth_required {
            Some("required")
        } else {
            None
        }
    }

    /// The OAuth state of a Streamable HTTP server (none for other kinds, or when the owner
    /// configured an `Authorization` header), loading stored tokens on first use.
    pub(super) fn oauth_for(&self, cfg: &ServerConfig) -> Option<Arc<OAuth>> {
        if cfg.kind != Kind::StreamableHttp || cfg.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
            return None;
        }
        let mut map = lock(&self.oauth);
        if let Some(o) = map.get(&cfg.name) {
            return Some(o.clone());
        }
        let settings = auth::Settings {
            client_name: "CashCode".into(),
            redirect_uri: lock(&self.redirect_uri).clone(),
            ..auth::Settings::default()
        };
        let (all, secrets, name) = (self.oauth_secrets.clone(), self.secrets.clone(), cfg.name.clone());
        let sink = Arc::new(move |values: Vec<String>| {
            let mut all = lock(&all);
            all.insert(name.clone(), values);
            secrets.set("mcp-oauth", all.values().flatten().cloned().collect::<Vec<_>>());
        });
        let o = Arc::new(
            OAuth::new(&cfg.url, settings, Arc::new(auth::Browser))
                .with_secret_sink(sink)
                .with_store(auth::tokens::TokenStore::new(&self.cfg.data_dir, &cfg.name)),
        );
        map.insert(cfg.name.clone(), o.clone());
        Some(o)
    }

    /// Forgets a server's OAuth state; with `delete`, its stored tokens too.
    pub(super) fn drop_oauth(&self, name: &str, delete: bool) {
        let o = lock(&self.oauth).remove(name);
        lock(&self.flows).retain(|_, (n, _)| n != name);
        if delete {
            let r = match o {
                Some(o) => o.sign_out(),
                None => auth::tokens::TokenStore::new(&self.cfg.data_dir, name).delete(),
            };
            if let Err(e) = r {
                log::warn!("event=mcp.oauth.delete_failed server={name} error_kind={:?}", e.kind());
            }
        }
        let mut all = lock(&self.oauth_secrets);
        all.remove(name);
        self.secrets.set("mcp-oauth", all.values().flatten().cloned().collect::<Vec<_>>());
    }

    /// `POST /api/mcp/servers/{name}/authorize`: starts a browser flow and returns the URL
    /// to open. Network-bound (discovery, maybe registration).
    pub(crate) fn authorize(&self, name: &str) -> Result<Authorization, McpError> {
        let cfg = self.configured(name)?;
        let oauth = self.oauth_for(&cfg).ok_or(McpError::NoOAuth)?;
        let flow = oauth.begin().map_err(|e| {
            let msg = redact_status(&e, &cfg.secrets());
            log::warn!("event=mcp.oauth.begin_failed server={name} error={msg:?}");
            McpError::Upstream(msg)
        })?;
        let url = flow.url.clone();
        let mut flows = lock(&self.flows);
        flows.retain(|_, (_, f)| !f.expired());
        while flows.len() >= MAX_PENDING_FLOWS {
            let oldest = flows.iter().min_by_key(|(_, (_, f))| f.created).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => flows.remove(&k),
                None => break,
            };
        }
        flows.insert(flow.state.clone(), (name.to_string(), flow));
        log::info!("event=mcp.oauth.flow_started server={name}");
        Ok(Authorization { authorization_url: url })
    }

    /// `GET /api/mcp/oauth/callback`: the flow named by `state` is taken out (single use,
    /// whatever the outcome) and completed. Returns the server's name, or why not (already
    /// redacted, safe to show).
    pub(crate) fn oauth_callback(&self, params: &[(String, String)]) -> std::result::Result<String, String> {
        let state = params.iter().find(|(k, _)| k == "state").map(|(_, v)| v.as_str()).unwrap_or("");
        let taken = lock(&self.flows).remove(state);
        let Some((name, flow)) = taken else {
            log::warn!("event=mcp.oauth.callback_refused reason=unknown_state");
            return Err("This authorization link is unknown, was already used, or has expired.".into());
        };
        if flow.expired() {
            log::warn!("event=mcp.oauth.callback_refused server={name} reason=expired");
            return Err("This authorization took too long. Start it again from CashCode.".into());
        }
        let cfg = self.server_config(&name).ok_or_else(|| NOT_CONFIGURED.to_string())?;
        let oauth = self.oauth_for(&cfg).ok_or_else(|| NOT_CONFIGURED.to_string())?;
        match oauth.finish(flow, params) {
            Ok(()) => {
                lock(&self.slot(&name).state).auth_required = false;
                Ok(name)
            }
            Err(e) => {
                let msg = redact_status(&e, &cfg.secrets());
                log::warn!("event=mcp.oauth.callback_failed server={name} error={msg:?}");
                Err(msg)
            }
        }
    }

    /// `POST /api/mcp/servers/{name}/sign-out`: disconnects and forgets the tokens.
    pub(crate) fn sign_out(&self, name: &str) -> Result<ServerView, McpError> {
        let cfg = self.configured(name)?;
        self.disconnect_inner(name, true);
        if let Some(o) = self.oauth_for(&cfg) {
            if let Err(e) = o.sign_out() {
                log::warn!("event=mcp.oauth.delete_failed server={name} error_kind={:?}", e.kind());
                return Err(McpError::TokensKept(e));
            }
        }
        log::info!("event=mcp.oauth.signed_out server={name}");
        Ok(self.view(&cfg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::catalog::Catalog;
    use crate::mcp::client::ClientConfig;
    use crate::mcp::manager::ManagerConfig;
    use crate::mcp::validate::ServerEntry;
    use serde_json::json;

    /// A callback whose flow expired is refused and consumes it; an unknown or reused state
    /// is refused the same way; a flow's state is compared whole.
    #[test]
    fn oauth_callbacks_need_a_live_single_use_state() {
        let root = std::env::temp_dir().join(format!("cc-mcp-oauth-{}", crate::util::rand::hex(6)));
        let data = root.join("data");
        let catalog = Catalog::load(None, &data).unwrap();
        let mgr = McpManager::new(ManagerConfig { client: ClientConfig::default(), data_dir: data }, catalog);
        let entry: ServerEntry = serde_json::from_value(
            json!({"type": "streamable_http", "display_name": "OA", "url": "http://127.0.0.1:9/mcp"}),
        )
        .unwrap();
        mgr.create("oa", entry).unwrap();
        let old = auth::PendingFlow::for_test("s-old", auth::FLOW_TTL + std::time::Duration::from_secs(1));
        lock(&mgr.flows).insert("s-old".into(), ("oa".into(), old));
        let params = |s: &str| vec![("code".to_string(), "c".to_string()), ("state".to_string(), s.to_string())];
        let e = mgr.oauth_callback(&params("s-old")).unwrap_err();
        assert!(e.contains("took too long"), "{e}");
        let e = mgr.oauth_callback(&params("s-old")).unwrap_err();
        assert!(e.contains("unknown, was already used"), "an expired flow is gone after one try: {e}");
        let fresh = auth::PendingFlow::for_test("s-new", std::time::Duration::ZERO);
        lock(&mgr.flows).insert("s-new".into(), ("oa".into(), fresh));
        assert!(mgr.oauth_callback(&params("s-ne")).unwrap_err().contains("unknown"));
        assert!(mgr.oauth_callback(&params("")).unwrap_err().contains("unknown"));
        assert_eq!(lock(&mgr.flows).len(), 1, "refused callbacks leave the pending flow alone");
        let _ = std::fs::remove_dir_all(root);
    }
}
