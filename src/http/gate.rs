//! The one decision about where a request goes, made once per request from its raw target on
//! the `http` thread, before anything else looks at the path: the API in its single canonical
//! spelling (with percent-decoded segments), the web client's files, or refused with 400. The
//! Origin/Host/token checks, the slow-route choice and the router all read this [`Target`];
//! none of them looks at the raw path again.
//!
//! The rule is about structure: `/api` and the separators must be spelt plainly (lower case,
//! single `/`, no dot segments, no `;`, `\`, control characters, and no escapes that decode to
//! a separator). Escapes inside a segment are data (`/api/skills/%E5%AD%97` is fine). A path
//! that is not canonical API but would read as `/api…` to any normaliser (decoding, case
//! folding, `\` as `/`, dot removal, `;` stripping) is refused, so it can never reach the
//! client files or the SPA fallback either.

use percent_encoding::percent_decode_str;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/api…` spelt canonically.
    Api(ApiPath),
    /// Anything else: a client file or a client route, decoded segments with empty ones
    /// dropped (assets.rs refuses anything that would leave client/dist).
    Static(Vec<String>),
    /// A path we refuse to interpret: 400 with this detail.
    Refused(&'static str),
}

/// A canonical API path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiPath {
    /// Percent-decoded segments after `api`: `/api/sessions/x` → `["sessions", "x"]`.
    pub(crate) segments: Vec<String>,
    /// The path ended in one `/` (answered with a 307 after the checks, docs/http-api.md §1).
    pub(crate) trailing_slash: bool,
}

/// How often a non-API path is percent-decoded when looking for a disguised `/api`
/// (`%2561pi` → `%61pi` → `api`); a real client file never needs more than one.
const DECODE_ROUNDS: usize = 3;

const NOT_A_PATH: &str = "invalid request path: it must start with /";
const CONTROL: &str = "invalid request path: control characters are not allowed";
const BACKSLASH: &str = "invalid request path: backslashes are not allowed";
const API_SPELLING: &str = "invalid request path: spell API paths /api/... (lower case, no escapes, dot segments, empty segments or parameters)";
const EMPTY_SEGMENT: &str = "invalid request path: empty segments (//) are not allowed in API paths";
const PARAMETERS: &str = "invalid request path: ';' is not allowed in API paths (encode it as %3B)";
const BAD_ESCAPE: &str = "invalid request path: malformed percent-escape";
const NOT_UTF8: &str = "invalid request path: escapes must decode to UTF-8";
const DOT_SEGMENT: &str = "invalid request path: dot segments are not allowed in API paths";
const ENCODED_SEPARATOR: &str =
    "invalid request path: API path segments must not encode '/', '\\' or control characters";

/// Classifies a raw request target (`/path?query`; the query is ignored).
pub fn classify(target: &str) -> Target {
    let path = target.split('?').next().unwrap_or("");
    if !path.starts_with('/') {
        return Target::Refused(NOT_A_PATH);
    }
    if path.chars().any(char::is_control) {
        return Target::Refused(CONTROL);
    }
    if path.contains('\\') {
        return Target::Refused(BACKSLASH);
    }
    if path == "/api" || path.starts_with("/api/") {
        return api(&path[4..]);
    }
    if reads_as_api(path) {
        return Target::Refused(API_SPELLING);
    }
    Target::Static(path.split('/').filter(|s| !s.is_empty()).map(decode_lossy).collect())
}

/// `rest` is what follows `/api`: empty or starting with `/`.
fn api(rest: &str) -> Target {
    let mut raw: Vec<&str> = match rest.strip_prefix('/') {
        Some(r) => r.split('/').collect(),
        None => Vec::new(),
    };
    let trailing_slash = raw.last() == Some(&"");
    if trailing_slash {
        raw.pop();
    }
    let mut segments = Vec::with_capacity(raw.len());
    for seg in raw {
        if seg.is_empty() {
            return Target::Refused(EMPTY_SEGMENT);
        }
        if seg.contains(';') {
            return Target::Refused(PARAMETERS);
        }
        if !escapes_well_formed(seg) {
            return Target::Refused(BAD_ESCAPE);
        }
        let Ok(s) = percent_decode_str(seg).decode_utf8() else {
            return Target::Refused(NOT_UTF8);
        };
        if s == "." || s == ".." {
            return Target::Refused(DOT_SEGMENT);
        }
        if s.contains(['/', '\\']) || s.chars().any(char::is_control) {
            return Target::Refused(ENCODED_SEPARATOR);
        }
        segments.push(s.into_owned());
    }
    Target::Api(ApiPath { segments, trailing_slash })
}

fn escapes_well_formed(seg: &str) -> bool {
    let b = seg.as_bytes();
    b.iter().enumerate().filter(|(_, c)| **c == b'%').all(|(i, _)| {
        b.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    })
}

/// Would a lenient reader take this path for `/api…`? Decodes (a few rounds), reads `\` as
/// `/`, drops `;params` and control characters, folds ASCII case, and looks at the first
/// segment both before and after resolving dot segments.
fn reads_as_api(path: &str) -> bool {
    let mut s = path.to_string();
    for _ in 0..DECODE_ROUNDS {
        let d = decode_lossy(&s);
        if d == s {
            break;
        }
        s = d;
    }
    let mut stack: Vec<String> = Vec::new();
    let mut first: Option<bool> = None;
    for seg in s.split(['/', '\\']) {
        let seg = seg.split([';', '?', '#']).next().unwrap_or("");
        let seg: String = seg.chars().filter(|c| !c.is_control()).collect::<String>().trim().to_ascii_lowercase();
        match seg.as_str() {
            "" | "." => {}
            ".." => {
                stack.pop();
            }
            _ => {
                first.get_or_insert(seg == "api");
                stack.push(seg);
            }
        }
    }
    first == Some(true) || stack.first().is_some_and(|s| s == "api")
}

/// `%XX` decoding (invalid escapes kept literally, invalid UTF-8 replaced): the one decoder
/// for client-file segments and query parameters.
pub(crate) fn decode_lossy(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

impl ApiPath {
    pub(crate) fn segs(&self) -> Vec<&str> {
        self.segments.iter().map(String::as_str).collect()
    }

    /// Needs the Origin check: every method but GET/HEAD/OPTIONS, and model discovery, which
    /// makes outbound calls with the stored key (docs/http-api.md §1 "LLM origin guard").
    pub(crate) fn state_changing(&self, method: &str) -> bool {
        match method {
            "GET" | "HEAD" => self.segs() == ["settings", "llm", "models"],
            "OPTIONS" => false,
            _ => true,
        }
    }

    /// The OAuth callback: a top-level navigation from the provider, so it carries neither the
    /// API token nor our Origin. It is bound instead to a pending flow by its unguessable,
    /// single-use, expiring `state` (`McpManager::oauth_callback`); GET only.
    pub(crate) fn is_oauth_callback(&self, method: &str) -> bool {
        method == "GET" && self.segs() == ["mcp", "oauth", "callback"]
    }
}

impl Target {
    /// Does this route wait on the network, or read files whose size a model or peer chose
    /// (run it on an `http-slow` thread)?
    pub(crate) fn is_slow(&self, method: &str) -> bool {
        let Target::Api(p) = self else { return false };
        match (method, p.segs().as_slice()) {
            // Histories: a page reads through lines of any length, the unpaged list reads the
            // whole file, the session list every chat's metadata; a delete waits for the
            // chat's running turn to stop.
            ("GET", ["sessions"] | ["sessions", _, "messages"]) => true,
            ("DELETE", ["sessions", _]) => true,
            // A rewind reads, diffs and restores up to every file a chat changed (an fsync each).
            ("POST", ["sessions", _, "rewind", ..]) => true,
            // Reads the matched records back from their histories (up to a thousand lines).
            ("GET", ["search"]) => true,
            // Counts the undistilled history (up to 16 MiB read).
            ("GET", ["dream"]) => true,
            (_, ["settings", "llm", _, ..]) => true,
            ("POST", ["mcp", "servers", _, "connect" | "disconnect" | "authorize" | "sign-out"]) => true,
            // Exchanges the code at the provider's token endpoint.
            ("GET", ["mcp", "oauth", "callback"]) => true,
            // Editing or deleting a server closes its connection (a stdio child gets a grace period).
            ("PUT" | "DELETE", ["mcp", "servers", _, ..]) => true,
            ("POST", ["skills", "import"]) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(segments: &[&str], trailing_slash: bool) -> Target {
        Target::Api(ApiPath { segments: segments.iter().map(|s| s.to_string()).collect(), trailing_slash })
    }

    fn refused(target: &str) -> bool {
        matches!(classify(target), Target::Refused(_))
    }

    #[test]
    fn canonical_api_paths() {
        assert_eq!(classify("/api"), api(&[], false));
        assert_eq!(classify("/api/"), api(&[], true));
        assert_eq!(classify("/api/sessions?token=x"), api(&["sessions"], false));
        assert_eq!(classify("/api/sessions/"), api(&["sessions"], true));
        assert_eq!(classify("/api/mcp/servers/a/connect"), api(&["mcp", "servers", "a", "connect"], false));
        // Escapes inside a segment are data.
        assert_eq!(classify("/api/skills/%E5%AD%97"), api(&["skills", "字"], false));
        assert_eq!(classify("/api/skills/a%3Bb/x%2E"), api(&["skills", "a;b", "x."], false));
        assert_eq!(classify("/api/sessions/%2E%2Ex"), api(&["sessions", "..x"], false));
        assert_eq!(classify("/api/%73essions"), api(&["sessions"], false));
        assert_eq!(classify("/api/skills/%2561"), api(&["skills", "%61"], false));
    }

    #[test]
    fn disguised_api_prefixes_are_refused() {
        for p in [
            "//api/x",
            "///api",
            "/%61pi/x",
            "/a%70i",
            "/%41PI/x",
            "/API/x",
            "/Api/x",
            "/aPI",
            "/./api/x",
            "/x/../api/x",
            "/%2e/api/x",
            "/%2e%2e/api/x",
            "/..%2Fapi/x",
            "/api;x/sessions",
            "/api;/x",
            "/%2Fapi/x",
            "/api%2Fx",
            "/api%2fsessions",
            "/api%5Cx",
            "/%2561pi/x",
            "/%252561pi",
            "/api%00/x",
            "/api%3F/x",
            "/api%23",
            "/%20api/x",
            "/api\\x",
            "/\\api/x",
            "/api\t/x",
            "/api\0",
            "/API//.. ",
            "/api/../x",
            "api/x",
            "*",
            "http://127.0.0.1/api/x",
            "",
        ] {
            assert!(refused(p), "{p:?} -> {:?}", classify(p));
        }
    }

    #[test]
    fn non_canonical_api_structure_is_refused() {
        for p in [
            "/api//x",
            "/api/x//",
            "/api//",
            "/api/./x",
            "/api/x/.",
            "/api/x/..",
            "/api/x/../y",
            "/api/%2e",
            "/api/%2E%2e/x",
            "/api/.%2E",
            "/api/x;y",
            "/api/sessions;jsessionid=1",
            "/api/x%2Fy",
            "/api/x%2f",
            "/api/x%5Cy",
            "/api/x%00",
            "/api/x%0A",
            "/api/x%7F",
            "/api/x%",
            "/api/x%4",
            "/api/x%zz",
            "/api/%ff",
            "/api/%C3",
        ] {
            assert!(refused(p), "{p:?} -> {:?}", classify(p));
        }
    }

    #[test]
    fn client_files_and_routes() {
        assert_eq!(classify("/"), Target::Static(vec![]));
        assert_eq!(classify("/assets/app-1.js"), Target::Static(vec!["assets".into(), "app-1.js".into()]));
        assert_eq!(classify("/chat/some-id/"), Target::Static(vec!["chat".into(), "some-id".into()]));
        assert_eq!(classify("/apix"), Target::Static(vec!["apix".into()]));
        assert_eq!(classify("/chat/api"), Target::Static(vec!["chat".into(), "api".into()]));
        assert_eq!(classify("/api.html"), Target::Static(vec!["api.html".into()]));
        // Decoded for assets.rs, which refuses anything that is not a plain file name (404).
        assert_eq!(classify("/..%2Fsecret.txt"), Target::Static(vec!["../secret.txt".into()]));
        assert_eq!(classify("/%2E%2E/secret.txt"), Target::Static(vec!["..".into(), "secret.txt".into()]));
        assert_eq!(classify("/%zz"), Target::Static(vec!["%zz".into()]));
    }

    #[test]
    fn state_changing_and_slow_routes_read_the_segments() {
        let Target::Api(models) = classify("/api/settings/llm/models/") else { panic!() };
        assert!(models.state_changing("GET") && models.state_changing("HEAD"));
        let Target::Api(sessions) = classify("/api/sessions") else { panic!() };
        assert!(!sessions.state_changing("GET") && !sessions.state_changing("OPTIONS"));
        assert!(sessions.state_changing("DELETE") && sessions.state_changing("BREW"));
        for (m, p) in [
            ("POST", "/api/settings/llm/test"),
            ("GET", "/api/settings/llm/models"),
            ("POST", "/api/mcp/servers/a/connect"),
            ("POST", "/api/mcp/servers/a/disconnect/"),
            ("PUT", "/api/mcp/servers/a"),
            ("DELETE", "/api/mcp/servers/a"),
            ("POST", "/api/skills/import"),
            ("GET", "/api/sessions"),
            ("GET", "/api/sessions/c1/messages?limit=50"),
            ("GET", "/api/sessions/c1/messages"),
            ("DELETE", "/api/sessions/c1"),
            ("GET", "/api/dream"),
            ("POST", "/api/sessions/c1/rewind"),
            ("POST", "/api/sessions/c1/rewind/undo"),
            ("GET", "/api/search?q=tea"),
        ] {
            assert!(classify(p).is_slow(m), "{m} {p}");
        }
        for (m, p) in [
            ("PUT", "/api/settings/llm"),
            ("GET", "/api/mcp/servers"),
            ("POST", "/api/mcp/servers"),
            ("GET", "/api/mcp/servers/a/tools"),
            ("POST", "/api/skills"),
            ("POST", "//api/settings/llm/test"),
            ("GET", "/settings/llm/models"),
            ("GET", "/api/health"),
            ("PATCH", "/api/sessions/c1"),
            ("POST", "/api/dream/run"),
            ("POST", "/api/search"),
        ] {
            assert!(!classify(p).is_slow(m), "{m} {p}");
        }
    }

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(decode_lossy("%2E%2E"), "..");
        assert_eq!(decode_lossy("a%2"), "a%2");
        assert_eq!(decode_lossy("%zz%41"), "%zzA");
        assert_eq!(decode_lossy("%E5%AD%97"), "字");
        assert_eq!(decode_lossy("%ff"), "\u{fffd}");
    }

    /// Whatever the input, a path that a lenient reader takes for `/api…` is never handed to
    /// the client files; and the API only ever sees decoded segments free of separators.
    #[test]
    fn random_paths_never_slip_past() {
        let mut rng = crate::util::prng::Prng::new(crate::util::prng::seed(11));
        let parts = [
            "/",
            "//",
            "api",
            "API",
            "a",
            "%61",
            "p",
            "%70",
            "i",
            "%2F",
            "%2f",
            "%5C",
            ".",
            "..",
            "%2e",
            ";",
            "x",
            "%25",
            "%",
            "%00",
            "\\",
            "sessions",
            "%E5%AD%97",
            "?",
            "#",
            " ",
        ];
        for _ in 0..crate::util::prng::cases(20_000) {
            let path: String = (0..rng.below(8)).map(|_| *rng.pick(&parts)).collect();
            let path = format!("/{path}");
            match classify(&path) {
                Target::Static(segs) => {
                    let without_query = path.split('?').next().unwrap_or("");
                    assert!(!reads_as_api(without_query), "{path:?} went to the client files");
                    assert!(segs.first().is_none_or(|s| !s.eq_ignore_ascii_case("api")), "{path:?}");
                }
                Target::Api(p) => {
                    assert!(path.starts_with("/api"), "{path:?}");
                    for s in &p.segments {
                        assert!(!s.is_empty() && s != "." && s != "..", "{path:?} -> {s:?}");
                        assert!(!s.contains(['/', '\\']) && !s.chars().any(char::is_control), "{path:?} -> {s:?}");
                    }
                }
                Target::Refused(reason) => assert!(reason.starts_with("invalid request path"), "{reason}"),
            }
        }
    }
}
