//! `web_fetch` (tools-and-mcp.md §3): GETs an http(s) URL with ureq (blocking, on the turn's
//! worker thread) and returns readable text: scripts, styles, comments and tags removed,
//! common entities decoded, whitespace collapsed, cut to 3000 characters. Beyond the original:
//! only http/https is accepted, the download is capped at [`DEFAULT_MAX_BYTES`], connect and
//! overall timeouts are set, and media types that cannot be text are refused.

use std::io::Read;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{arg_str, cancellable, fmt_secs, Interrupted, Tool, ToolOutput, TurnCtx};
use crate::util::text::take_chars;

/// The contract's overall fetch timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// Bytes downloaded at most; the rest of a larger body is not read.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 20;
/// Characters of text returned.
pub const MAX_TEXT_CHARS: usize = 3000;
/// The contract's User-Agent for web_fetch and web_search.
pub const USER_AGENT: &str = "Mozilla/5.0 (compatible; CashCode/1.0)";
/// Extra wait for the helper thread beyond the request timeout before giving up on it.
pub(crate) const GRACE: Duration = Duration::from_secs(2);
/// Connect timeout (never longer than the overall timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct WebFetch {
    pub timeout: Duration,
    pub max_bytes: u64,
}

impl Default for WebFetch {
    fn default() -> Self {
        WebFetch { timeout: DEFAULT_TIMEOUT, max_bytes: DEFAULT_MAX_BYTES }
    }
}

/// A ureq agent with the tool timeouts; HTTP error statuses come back as responses.
pub fn http_agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
        .http_status_as_error(false)
        .user_agent(USER_AGENT)
        .max_redirects(10)
        .build()
        .into()
}

/// True for timeouts from ureq, whether raised directly or from the body reader.
pub fn is_timeout(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::Timeout(_) => true,
        ureq::Error::Io(io) => is_io_timeout(io),
        _ => false,
    }
}

fn is_io_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
        || e.to_string().contains("timeout")
}

impl Tool for WebFetch {
    fn name(&self) -> &str {
        "web_fetch"
    }

    fn description(&self) -> &str {
        "Fetch a web page (http or https) and return its readable text (HTML tags, scripts and \
         styles removed), cut to 3000 characters."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"url": {"type": "string", "description": "The http:// or https:// URL to fetch."}},
            "required": ["url"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let url = match arg_str(args, "url") {
            Ok(u) => u.trim(),
            Err(e) => return e,
        };
        let lower = url.to_ascii_lowercase();
        let rest = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://"));
        match rest {
            Some(r) if !r.is_empty() && !r.starts_with('/') => {}
            Some(_) => return ToolOutput::error(format!("Fetching {url} failed: the URL has no host")),
            None => return ToolOutput::error(format!("Only http:// and https:// URLs can be fetched: {url}")),
        }
        let (owned, timeout, max_bytes) = (url.to_string(), self.timeout, self.max_bytes);
        match cancellable(&ctx.cancel, timeout + GRACE, move || fetch(&owned, timeout, max_bytes)) {
            Ok(out) => out,
            Err(Interrupted::Cancelled) => ToolOutput::error(format!("Fetching {url} was cancelled")),
            Err(Interrupted::Overdue) => {
                ToolOutput::error(format!("Fetching {url} timed out ({})", fmt_secs(self.timeout)))
            }
        }
    }
}

/// The blocking GET and text extraction (runs on the helper thread of [`cancellable`]).
fn fetch(url: &str, timeout: Duration, max_bytes: u64) -> ToolOutput {
    let timed_out = || ToolOutput::error(format!("Fetching {url} timed out ({})", fmt_secs(timeout)));
    let mut resp = match http_agent(timeout).get(url).call() {
        Ok(r) => r,
        Err(e) if is_timeout(&e) => return timed_out(),
        Err(e) => return ToolOutput::error(format!("Fetching {url} failed: {e}")),
    };
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        return ToolOutput::error(format!("HTTP error {status}: {url}"));
    }
    let mime = resp.body().mime_type().unwrap_or("").to_ascii_lowercase();
    if ["image/", "audio/", "video/", "font/"].iter().any(|p| mime.starts_with(p))
        || mime == "application/octet-stream"
        || mime == "application/zip"
    {
        return ToolOutput::error(format!("Fetching {url} failed: content type {mime} is not text"));
    }
    let mut bytes = Vec::new();
    let read = resp.body_mut().as_reader().take(max_bytes + 1).read_to_end(&mut bytes);
    if let Err(e) = read {
        return if is_io_timeout(&e) { timed_out() } else { ToolOutput::error(format!("Fetching {url} failed: {e}")) };
    }
    let capped = bytes.len() as u64 > max_bytes;
    bytes.truncate(max_bytes as usize);
    let text = html_to_text(&String::from_utf8_lossy(&bytes));
    let total = text.chars().count();
    let mut body = if total > MAX_TEXT_CHARS {
        format!("{}\n\n[content truncated, total {total} chars]", take_chars(&text, MAX_TEXT_CHARS))
    } else {
        text
    };
    if capped {
        body.push_str(&format!("\n\n[download stopped at {} bytes; the page is larger]", max_bytes));
    }
    ToolOutput::ok(format!("[From {url}]\n\n{body}"))
}

/// Readable text from HTML (or any text): drops script/style elements and comments, removes
/// tags (block-level ones become line breaks), decodes entities, collapses blanks.
pub fn html_to_text(html: &str) -> String {
    let no_blocks = remove_elements(html);
    let mut out = String::with_capacity(no_blocks.len());
    let bytes = no_blocks.as_bytes();
    let mut i = 0;
    while i < no_blocks.len() {
        let b = bytes[i];
        let starts_tag = b == b'<'
            && bytes.get(i + 1).is_some_and(|&n| n.is_ascii_alphabetic() || n == b'/' || n == b'!' || n == b'?');
        if starts_tag {
            match no_blocks[i..].find('>') {
                Some(end) => {
                    let tag = &no_blocks[i + 1..i + end];
                    if is_block_tag(tag) {
                        out.push('\n');
                    }
                    i += end + 1;
                    continue;
                }
                None => break,
            }
        }
        let ch = no_blocks[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    let decoded = decode_entities(&out);
    tidy_whitespace(&decoded)
}

/// Removes `<script>…</script>`, `<style>…</style>` (any case, across lines) and `<!-- -->`.
fn remove_elements(html: &str) -> String {
    // ASCII lower-casing keeps byte offsets identical, so positions map back to `html`.
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len());
    let mut i = 0;
    while let Some(rel) = lower[i..].find('<') {
        let at = i + rel;
        out.push_str(&html[i..at]);
        let rest = &lower[at..];
        let end = if rest.starts_with("<!--") {
            rest.find("-->").map(|e| at + e + 3)
        } else if let Some(name) = ["script", "style", "noscript", "template"].into_iter().find(|n| {
            rest[1..].starts_with(n)
                && rest[1 + n.len()..].bytes().next().is_some_and(|c| c == b'>' || c == b'/' || c.is_ascii_whitespace())
        }) {
            let close = format!("</{name}");
            rest.find(&close)
                .map(|c| match rest[c..].find('>') {
                    Some(g) => at + c + g + 1,
                    None => lower.len(),
                })
                .or(Some(lower.len()))
        } else {
            None
        };
        match end {
            Some(e) => i = e,
            None => {
                out.push('<');
                i = at + 1;
            }
        }
        if i >= html.len() {
            return out;
        }
    }
    out.push_str(&html[i..]);
    out
}

fn is_block_tag(tag: &str) -> bool {
    let name: String = tag
        .trim_start_matches('/')
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    matches!(
        name.as_str(),
        "br" | "p"
            | "div"
            | "li"
            | "tr"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "section"
            | "article"
            | "header"
            | "footer"
            | "ul"
            | "ol"
            | "table"
            | "pre"
            | "blockquote"
            | "title"
            | "hr"
            | "dt"
            | "dd"
    )
}

fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let tail = &rest[amp..];
        // Byte search: `;` is ASCII, so its index is a char boundary even in multibyte text.
        let semi = tail.bytes().take(12).position(|b| b == b';');
        let decoded = semi.and_then(|e| entity(&tail[1..e]).map(|c| (c, e + 1)));
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &tail[len..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return Some(char::from_u32(code).filter(|&c| c != '\0').unwrap_or('\u{fffd}'));
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "copy" => '©',
        "reg" => '®',
        "trade" => '™',
        "hellip" => '…',
        "mdash" => '—',
        "ndash" => '–',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "laquo" => '«',
        "raquo" => '»',
        "middot" => '·',
        "bull" => '•',
        "deg" => '°',
        "times" => '×',
        "euro" => '€',
        "pound" => '£',
        "yen" => '¥',
        "cent" => '¢',
        "sect" => '§',
        "para" => '¶',
        _ => return None,
    })
}

/// Spaces/tabs collapsed, lines trimmed, 3+ newlines → 2, whole text trimmed.
fn tidy_whitespace(s: &str) -> String {
    let s = s.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = String::with_capacity(s.len());
    let mut blank_run = 0;
    for line in s.split('\n') {
        let line = line.split([' ', '\t', '\u{a0}']).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.trim().to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::agent::tools::workspace::tests::Sandbox;
    use std::thread;

    /// A one-route local server answering every request with `status`, `content_type`,
    /// `body`, after `delay`. Returns the base URL; the thread ends after `requests`.
    pub fn serve(
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
        delay: Duration,
        requests: usize,
    ) -> (String, thread::JoinHandle<Vec<String>>) {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        let h = thread::spawn(move || {
            let mut urls = Vec::new();
            for _ in 0..requests {
                let Ok(Some(req)) = server.recv_timeout(Duration::from_secs(10)) else {
                    break;
                };
                urls.push(req.url().to_string());
                thread::sleep(delay);
                let resp = tiny_http::Response::from_data(body.clone())
                    .with_status_code(status)
                    .with_header(tiny_http::Header::from_bytes("Content-Type", content_type).unwrap());
                let _ = req.respond(resp);
            }
            urls
        });
        (format!("http://127.0.0.1:{port}"), h)
    }

    fn run(tool: &WebFetch, url: &str) -> ToolOutput {
        let sb = Sandbox::new();
        let mut a = Map::new();
        a.insert("url".into(), json!(url));
        tool.run(&a, &sb.ctx)
    }

    #[test]
    fn converts_html_to_text() {
        let html = "<html><head><title>T</title><STYLE>body{x:1}</STYLE>\
            <script type=\"x\">alert('<b>')</script></head>\
            <body><!-- hidden --><h1>Hello&nbsp;&amp; welcome</h1>\n\n\n\n<p>a   b\t c &lt;ok&gt; &#233;&#x263A;</p>\
            <p>1 < 2</p></body></html>";
        assert_eq!(html_to_text(html), "T\n\nHello & welcome\n\na b c <ok> é☺\n\n1 < 2");
        let (url, h) = serve(200, "text/html; charset=utf-8", html.as_bytes().to_vec(), Duration::ZERO, 1);
        let out = run(&WebFetch::default(), &format!("{url}/page"));
        assert_eq!(out, ToolOutput::ok(format!("[From {url}/page]\n\nT\n\nHello & welcome\n\na b c <ok> é☺\n\n1 < 2")));
        assert_eq!(h.join().unwrap(), ["/page"]);
    }

    #[test]
    fn never_panics_on_odd_markup() {
        let samples = [
            "&é;&#xZZ;&#99999999;&#0;&amp",
            "<script>never closed",
            "<!-- open comment",
            "<p unterminated",
            "a<b>c</b>é<",
            "&éééééééééé;",
            "<sCrIpT>x</ScRiPt >y<style/>z",
        ];
        for s in samples {
            let _ = html_to_text(s);
        }
        let alphabet: Vec<char> = "<>&;#x!-/scriptyle é中\n\t0a".chars().collect();
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            let text: String = (0..(seed % 24))
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            let _ = html_to_text(&text);
        }
        assert_eq!(html_to_text("&#0;&#x41;&bogus;"), "\u{fffd}A&bogus;");
        assert_eq!(html_to_text("<sCrIpT>x</ScRiPt >y"), "y");
    }

    #[test]
    fn caps_download_and_text() {
        let body = "word ".repeat(20_000).into_bytes();
        let (url, h) = serve(200, "text/plain", body, Duration::ZERO, 1);
        let tool = WebFetch { max_bytes: 10_000, ..WebFetch::default() };
        let out = run(&tool, &url).for_model;
        let expect_text = take_chars(&"word ".repeat(2000), 3000).to_string();
        assert_eq!(
            out,
            format!(
                "[From {url}]\n\n{expect_text}\n\n[content truncated, total 9999 chars]\n\n\
                 [download stopped at 10000 bytes; the page is larger]"
            )
        );
        h.join().unwrap();
    }

    #[test]
    fn refuses_other_schemes_and_reports_errors() {
        for u in ["file:///etc/passwd", "ftp://x/y", "gopher://a", "javascript:alert(1)", "/etc/passwd"] {
            let out = run(&WebFetch::default(), u);
            assert!(out.failed);
            assert_eq!(out.for_model, format!("Error: Only http:// and https:// URLs can be fetched: {u}"));
        }
        assert!(run(&WebFetch::default(), "http:///x").failed);
        let (url, h) = serve(404, "text/html", b"nope".to_vec(), Duration::ZERO, 1);
        assert_eq!(run(&WebFetch::default(), &url).for_model, format!("Error: HTTP error 404: {url}"));
        h.join().unwrap();
        let (url, h) = serve(200, "image/png", vec![0x89, b'P'], Duration::ZERO, 1);
        assert!(run(&WebFetch::default(), &url).for_model.contains("is not text"));
        h.join().unwrap();
        // Nothing listens on a port we just closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/");
        assert!(run(&WebFetch::default(), &url).for_model.starts_with(&format!("Error: Fetching {url} failed: ")));
    }

    #[test]
    fn cancel_returns_promptly() {
        let (url, h) = serve(200, "text/plain", b"late".to_vec(), Duration::from_millis(3000), 1);
        let sb = Sandbox::new();
        let cancel = sb.ctx.cancel.clone();
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            cancel.cancel();
        });
        let start = std::time::Instant::now();
        let mut a = Map::new();
        a.insert("url".into(), json!(url));
        let out = WebFetch::default().run(&a, &sb.ctx);
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(out.for_model, format!("Error: Fetching {url} was cancelled"));
        t.join().unwrap();
        h.join().unwrap();
    }

    #[test]
    fn times_out() {
        let (url, h) = serve(200, "text/plain", b"late".to_vec(), Duration::from_millis(1500), 1);
        let tool = WebFetch { timeout: Duration::from_millis(300), ..WebFetch::default() };
        let start = std::time::Instant::now();
        assert_eq!(run(&tool, &url).for_model, format!("Error: Fetching {url} timed out (0.3s)"));
        assert!(start.elapsed() < Duration::from_secs(2));
        h.join().unwrap();
    }
}
