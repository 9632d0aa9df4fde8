//! The security headers of HTTP answers, run on whichever thread answers (`http`, `http-body`,
//! `http-slow`): every answer says `nosniff` and may not be framed; the web client's pages get
//! a Content-Security-Policy that lets them load only their own scripts and styles and talk
//! only to this server's API and WebSocket (SECURITY.md "Who may talk to the server").

/// Added to every answer.
pub(crate) const ALWAYS: [(&str, &str); 3] =
    [("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer")];

/// The policy of answers that are not client pages (JSON, text): they load nothing and are
/// never framed.
const NOTHING: &str = "default-src 'none'; frame-ancestors 'none'";

/// The client page's policy. `ws_host` is the host the page was loaded from (as in
/// `/api/client-config`, which tells the page where its WebSocket is), `ws_port` the bound
/// WebSocket port.
///
/// Images: the page's own files and `data:`/`blob:` URLs render; remote images only over
/// https, and the client shows those as links until the owner clicks one (Markdown.tsx), so
/// an answer cannot make the browser contact a host on its own. Styles and scripts come only
/// from the build (no inline code, no `eval`); React and KaTeX set styles through the CSSOM,
/// which `style-src` does not govern. Fonts may be `data:` URLs: the build inlines KaTeX's
/// smallest fonts into its CSS.
pub(crate) fn client_csp(ws_host: &str, ws_port: u16) -> String {
    format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob: https:; \
         font-src 'self' data:; connect-src 'self' ws://{ws_host}:{ws_port} wss://{ws_host}:{ws_port}; \
         object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// Adds [`ALWAYS`] and the no-content policy, each unless the answer set its own (the OAuth
/// callback page sets its policy and referrer rule).
pub(crate) fn harden(headers: &mut Vec<(String, String)>) {
    let defaults = ALWAYS.iter().chain([&("Content-Security-Policy", NOTHING)]);
    let missing: Vec<(String, String)> = defaults
        .filter(|(name, _)| !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    headers.extend(missing);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_is_hardened_and_keeps_its_own_policy() {
        let mut h = vec![("Content-Type".to_string(), "application/json".to_string())];
        harden(&mut h);
        let get = |h: &[(String, String)], k: &str| {
            h.iter().filter(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.clone()).collect::<Vec<_>>()
        };
        assert_eq!(get(&h, "x-content-type-options"), ["nosniff"]);
        assert_eq!(get(&h, "x-frame-options"), ["DENY"]);
        assert_eq!(get(&h, "content-security-policy"), [NOTHING]);
        let mut page = vec![
            ("Content-Security-Policy".to_string(), client_csp("localhost", 8765)),
            ("Referrer-Policy".to_string(), "same-origin".to_string()),
        ];
        harden(&mut page);
        assert_eq!(get(&page, "referrer-policy"), ["same-origin"], "an answer's own value stays, once");
        assert_eq!(get(&page, "x-frame-options"), ["DENY"]);
        let csp = get(&page, "content-security-policy");
        assert_eq!(csp.len(), 1);
        assert!(csp[0].contains("connect-src 'self' ws://localhost:8765 wss://localhost:8765;"), "{}", csp[0]);
        assert!(csp[0].contains("frame-ancestors 'none'") && csp[0].contains("script-src 'self';"), "{}", csp[0]);
        assert!(!csp[0].contains("unsafe"), "{}", csp[0]);
    }
}
