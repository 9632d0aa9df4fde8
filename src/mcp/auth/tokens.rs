//! What an authorization leaves behind: the tokens, the client registration they were issued
//! to, and where they were issued. Stored per server in `<data>/mcp/oauth/<server>.json`
//! (mode 0600 in a 0700 directory, written atomically through `util::fsx`); never returned
//! by the API, logged or put in history (`Debug` prints no secret). Any thread.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::util::fsx;

/// Longest token or secret we accept from a peer.
pub(crate) const MAX_SECRET_LEN: usize = 8 * 1024;
/// Largest stored file read back.
const MAX_FILE: usize = 256 * 1024;
/// A token this close to its expiry counts as expired (clock skew, the request's own time).
const EXPIRY_MARGIN_SECS: u64 = 30;

#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TokenSet {
    pub(crate) access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) refresh_token: Option<String>,
    /// Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<u64>,
    /// The scopes we asked for (what step-up compares against).
    #[serde(default)]
    pub(crate) requested_scopes: Vec<String>,
}

impl TokenSet {
    pub(crate) fn expired(&self) -> bool {
        self.expires_at.is_some_and(|at| now_secs() + EXPIRY_MARGIN_SECS >= at)
    }

    pub(crate) fn secrets(&self) -> Vec<String> {
        std::iter::once(self.access_token.clone()).chain(self.refresh_token.clone()).collect()
    }
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("access_token", &"[REDACTED]")
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| "[REDACTED]"))
            .field("expires_at", &self.expires_at)
            .field("requested_scopes", &self.requested_scopes)
            .finish()
    }
}

/// A client identity at one authorization server.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ClientCreds {
    pub(crate) client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_secret: Option<String>,
    /// `none`, `client_secret_basic`, `client_secret_post` or `private_key_jwt`.
    #[serde(default)]
    pub(crate) auth_method: String,
    /// PKCS#8 PEM of an ES256 key, for `private_key_jwt` (pre-registered clients only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) private_key_pem: Option<String>,
}

impl ClientCreds {
    pub(crate) fn secrets(&self) -> Vec<String> {
        self.client_secret.iter().chain(self.private_key_pem.iter()).cloned().collect()
    }
}

impl std::fmt::Debug for ClientCreds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCreds")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "[REDACTED]"))
            .field("auth_method", &self.auth_method)
            .finish()
    }
}

/// One server's stored authorization.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stored {
    /// The server URL it was obtained for; a stored file for another URL is ignored.
    pub(crate) server_url: String,
    pub(crate) issuer: String,
    pub(crate) token_endpoint: String,
    pub(crate) resource: String,
    /// A client this server registered for us (dynamic registration), reused next time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client: Option<ClientCreds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tokens: Option<TokenSet>,
}

impl Stored {
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut v = self.tokens.as_ref().map(TokenSet::secrets).unwrap_or_default();
        v.extend(self.client.as_ref().map(ClientCreds::secrets).unwrap_or_default());
        v
    }
}

/// The file of one server's authorization.
#[derive(Debug, Clone)]
pub(crate) struct TokenStore {
    path: PathBuf,
}

impl TokenStore {
    /// `<data>/mcp/oauth/<server>.json`; `server` is a validated catalog name.
    pub(crate) fn new(data_dir: &Path, server: &str) -> TokenStore {
        TokenStore { path: data_dir.join("mcp").join("oauth").join(format!("{server}.json")) }
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The stored authorization for `server_url`, if any (unreadable or foreign files: none).
    pub(crate) fn load(&self, server_url: &str) -> Option<Stored> {
        let text = fsx::read_opt(&self.path).ok()??;
        if text.len() > MAX_FILE || crate::util::json::too_deep(text.as_bytes(), 8).is_some() {
            return None;
        }
        let s: Stored = serde_json::from_str(&text).ok()?;
        (s.server_url == server_url).then_some(s)
    }

    pub(crate) fn save(&self, s: &Stored) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(s).map_err(std::io::Error::other)?;
        fsx::write_atomic(&self.path, &bytes, true)
    }

    pub(crate) fn delete(&self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn stored_tokens_are_private_bound_to_their_url_and_never_debug_printed() {
        let dir = std::env::temp_dir().join(format!("cc-oauth-store-{}", crate::util::rand::hex(6)));
        let store = TokenStore::new(&dir, "srv");
        let s = Stored {
            server_url: "http://127.0.0.1:1/mcp".into(),
            tokens: Some(TokenSet {
                access_token: "at-secret-123456".into(),
                refresh_token: Some("rt-secret-123456".into()),
                expires_at: Some(now_secs() + 3600),
                requested_scopes: vec!["a".into()],
            }),
            ..Stored::default()
        };
        store.save(&s).unwrap();
        let mode = std::fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(store.path().parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(dmode, 0o700);
        assert_eq!(store.load("http://127.0.0.1:1/mcp"), Some(s.clone()));
        assert_eq!(store.load("http://127.0.0.1:2/mcp"), None, "a file for another URL is ignored");
        let dbg = format!("{s:?}");
        assert!(!dbg.contains("at-secret") && !dbg.contains("rt-secret"), "{dbg}");
        assert!(!s.tokens.as_ref().unwrap().expired());
        assert!(TokenSet { expires_at: Some(now_secs() + 5), ..TokenSet::default() }.expired());
        store.delete().unwrap();
        store.delete().unwrap();
        assert_eq!(store.load("http://127.0.0.1:1/mcp"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
