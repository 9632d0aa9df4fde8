//! PKCE (RFC 7636, S256 only), the `state` value and the base64url helpers the OAuth client
//! uses. Pure functions over OS entropy (`util::rand`); any thread.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::util::rand;

/// One PKCE pair: the verifier stays with us, the challenge goes in the authorization URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Pkce {
    pub(crate) verifier: String,
    pub(crate) challenge: String,
}

impl std::fmt::Debug for Pkce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pkce([REDACTED])")
    }
}

impl Pkce {
    /// 32 random bytes -> a 43-character verifier (RFC 7636 §4.1 allows 43..128 of
    /// `[A-Za-z0-9-._~]`; base64url without padding stays inside that set).
    pub(crate) fn new() -> Pkce {
        let mut bytes = [0u8; 32];
        rand::fill(&mut bytes);
        let verifier = b64url(&bytes);
        let challenge = challenge_of(&verifier);
        Pkce { verifier, challenge }
    }
}

impl Default for Pkce {
    fn default() -> Self {
        Pkce::new()
    }
}

/// `BASE64URL(SHA256(verifier))`, the S256 challenge.
pub fn challenge_of(verifier: &str) -> String {
    b64url(&Sha256::digest(verifier.as_bytes()))
}

/// A fresh unguessable `state` (and single-use flow key): 32 random bytes, base64url.
pub(crate) fn new_state() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    b64url(&bytes)
}

pub(crate) fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes standard base64 ignoring whitespace (PEM bodies); `None` on anything else.
#[cfg(any(test, feature = "oauth"))]
pub(crate) fn b64_decode(text: &str) -> Option<Vec<u8>> {
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    STANDARD.decode(compact.as_bytes()).ok()
}

/// Constant-time comparison of two short strings (the `state` check).
pub(crate) fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7636_appendix_b_vector() {
        // RFC 7636 Appendix B.
        assert_eq!(
            challenge_of("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn verifiers_are_fresh_well_formed_and_match_their_challenge() {
        let a = Pkce::new();
        let b = Pkce::new();
        assert_ne!(a.verifier, b.verifier);
        assert_eq!(a.verifier.len(), 43);
        assert!(a.verifier.bytes().all(|c| c.is_ascii_alphanumeric() || b"-._~".contains(&c)));
        assert_eq!(a.challenge, challenge_of(&a.verifier));
        assert!(!format!("{a:?}").contains(&a.verifier));
        assert_ne!(new_state(), new_state());
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
        assert_eq!(b64_decode("aGVs\nbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(b64_decode("not base64!"), None);
    }
}
