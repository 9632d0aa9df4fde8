//! `web_fetch` (docs/tools-and-mcp.md §3): GETs an http(s) URL with ureq and returns readable text:
//! scripts, styles, comments and tags removed, common entities decoded, whitespace collapsed,
//! cut to 3000 characters. The request runs on the turn's worker, bounded by the call's own
//! deadline (ureq's global timeout, and checked between every read of the body); cancel shuts
//! the call's agent ([`crate::util::blocking::interruptible`]), which closes the socket under a
//! read still waiting, so the turn gets control back at once.
//!
//! Beyond the original: only http/https is accepted; the connection goes only to addresses
//! `netguard` allows (public ones by default, checked on the resolved address of every
//! redirect hop, which are followed here, not by ureq); the download is capped at
//! [`DEFAULT_MAX_BYTES`]; the text is extracted while the body streams in, in one forward pass
//! (each byte looked at a bounded number of times), and reading stops once
//! [`MAX_COUNTED_CHARS`] of text exist; media types that cannot be text are refused.

use std::io::Read;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Map, Value};
use ureq::unversioned::transport::DefaultConnector;

use crate::tool::args::parse_args;
use crate::tool::{fmt_secs, Tool, ToolOutput, TurnCtx};
use crate::util::blocking;
use crate::util::cancel::CancelToken;
use crate::util::netguard::{AddrPolicy, GuardedResolver, Refused};

/// The contract's overall fetch timeout.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// Bytes downloaded at most; the rest of a larger body is not read.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 2 << 20;
/// Characters of text returned.
pub(crate) const MAX_TEXT_CHARS: usize = 3000;
/// Characters of text counted for the `total N chars` note; once a page has more, the rest
/// is not read and the note says `total over N chars`.
pub(crate) const MAX_COUNTED_CHARS: usize = 30_000;
/// Redirect hops followed (each target is checked again).
pub(crate) const MAX_REDIRECTS: usize = 10;
/// The contract's User-Agent for web_fetch and web_search.
pub(crate) const USER_AGENT: &str = "Mozilla/5.0 (compatible; CashCode/1.0)";
/// Connect timeout (never longer than the overall timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes asked of the body per read; the deadline and cancel token are checked between reads.
const READ_CHUNK: usize = 8 * 1024;
/// What the model is told about a refused address.
const REFUSAL_NOTE: &str = "web_fetch only reaches public internet addresses, not loopback, private, \
                            link-local or other internal networks";

pub(crate) struct WebFetch {
    pub(crate) timeout: Duration,
    pub(crate) max_bytes: u64,
    /// Which resolved addresses may be contacted.
    pub(crate) policy: AddrPolicy,
}

impl Default for WebFetch {
    fn default() -> Self {
        WebFetch::new(AddrPolicy::PublicOnly)
    }
}

impl WebFetch {
    pub(crate) fn new(policy: AddrPolicy) -> Self {
        WebFetch { timeout: DEFAULT_TIMEOUT, max_bytes: DEFAULT_MAX_BYTES, policy }
    }
}

/// A ureq agent with the tool timeouts; HTTP error statuses come back as responses. Used by
/// `web_search`, whose endpoint is configured by the operator, not chosen by the model.
pub(crate) fn http_agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
        .http_status_as_error(false)
        .user_agent(USER_AGENT)
        .max_redirects(10)
        .build()
        .into()
}

/// The agent of one fetch: no automatic redirects (each hop is checked here), every address
/// through [`GuardedResolver`]. A proxy from the environment would resolve the host itself,
/// unchecked, so none is used unless every address is allowed anyway.
fn fetch_agent(timeout: Duration, policy: AddrPolicy) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
        .http_status_as_error(false)
        .user_agent(USER_AGENT)
        .max_redirects(0)
        .input_buffer_size(16 * 1024)
        .output_buffer_size(8 * 1024);
    let config = if policy == AddrPolicy::Any { config } else { config.proxy(None) };
    ureq::Agent::with_parts(config.build(), DefaultConnector::default(), GuardedResolver::new(policy))
}

/// True for timeouts from ureq, whether raised directly or from the body reader.
pub(crate) fn is_timeout(e: &ureq::Error) -> bool {
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

/// Why a fetch stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Cancelled,
    Overdue,
}

/// The deadline and cancel token the helper checks between steps.
pub(super) struct Budget {
    pub(super) deadline: Instant,
    pub(super) cancel: CancelToken,
}

impl Budget {
    pub(super) fn check(&self) -> Result<(), Stop> {
        if self.cancel.is_cancelled() {
            Err(Stop::Cancelled)
        } else if Instant::now() >= self.deadline {
            Err(Stop::Overdue)
        } else {
            Ok(())
        }
    }

    pub(super) fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

#[derive(Deserialize)]
struct Args {
    url: String,
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
        let Args { url } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let url = url.trim();
        let lower = url.to_ascii_lowercase();
        let rest = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://"));
        match rest {
            Some(r) if !r.is_empty() && !r.starts_with('/') => {}
            Some(_) => return ToolOutput::error(format!("Fetching {url} failed: the URL has no host")),
            None => return ToolOutput::error(format!("Only http:// and https:// URLs can be fetched: {url}")),
        }
        let agent = fetch_agent(self.timeout, self.policy);
        let budget = Budget { deadline: Instant::now() + self.timeout, cancel: ctx.cancel.clone() };
        blocking::interruptible(&ctx.cancel, &agent, || fetch(url, &agent, &budget, self.timeout, self.max_bytes))
            .unwrap_or_else(|| ToolOutput::error(format!("Fetching {url} was cancelled")))
    }
}

/// The GET with its redirect hops and the streamed text extraction.
fn fetch(url: &str, agent: &ureq::Agent, budget: &Budget, timeout: Duration, max_bytes: u64) -> ToolOutput {
    let stopped = |s: Stop| match s {
        Stop::Cancelled => ToolOutput::error(format!("Fetching {url} was cancelled")),
        Stop::Overdue => ToolOutput::error(format!("Fetching {url} timed out ({})", fmt_secs(timeout))),
    };
    let mut target = url.to_string();
    let mut hops = 0;
    let mut resp = loop {
        if let Err(s) = budget.check() {
            return stopped(s);
        }
        let call = agent.get(&target).config().timeout_global(Some(budget.remaining())).build().call();
        let resp = match call {
            Ok(r) => r,
            Err(e) => {
                if let Some(r) = Refused::from_ureq(&e) {
                    return ToolOutput::error(if hops == 0 {
                        format!("Fetching {url} refused: {r}; {REFUSAL_NOTE}")
                    } else {
                        format!("Fetching {url} refused: it redirects to {target}, and {r}; {REFUSAL_NOTE}")
                    });
                }
                if let Err(s) = budget.check() {
                    return stopped(s);
                }
                if is_timeout(&e) {
                    return stopped(Stop::Overdue);
                }
                return ToolOutput::error(format!("Fetching {url} failed: {e}"));
            }
        };
        let location = resp.headers().get("location").and_then(|v| v.to_str().ok());
        let (true, Some(location)) = (resp.status().is_redirection(), location) else {
            break resp;
        };
        if hops == MAX_REDIRECTS {
            return ToolOutput::error(format!("Fetching {url} failed: more than {MAX_REDIRECTS} redirects"));
        }
        match join_location(&target, location) {
            Some(next) => target = next,
            None => {
                return ToolOutput::error(format!(
                    "Fetching {url} failed: it redirects to {location}, which is not an http(s) URL"
                ))
            }
        }
        hops += 1;
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
    let page = match read_text(&mut resp.body_mut().as_reader(), budget, max_bytes) {
        Ok(p) => p,
        Err(ReadFailure::Stopped(s)) => return stopped(s),
        Err(ReadFailure::Io(e)) => {
            return match budget.check() {
                Err(s) => stopped(s),
                Ok(()) if is_io_timeout(&e) => stopped(Stop::Overdue),
                Ok(()) => ToolOutput::error(format!("Fetching {url} failed: {e}")),
            }
        }
    };
    let text = page.text;
    let mut body = if text.over {
        format!("{}\n\n[content truncated, total over {MAX_COUNTED_CHARS} chars]", text.text)
    } else if text.total > MAX_TEXT_CHARS {
        format!("{}\n\n[content truncated, total {} chars]", text.text, text.total)
    } else {
        text.text
    };
    if page.capped {
        body.push_str(&format!("\n\n[download stopped at {max_bytes} bytes; the page is larger]"));
    }
    ToolOutput::ok(format!("[From {url}]\n\n{body}"))
}

/// A `Location` value resolved against the URL that sent it ([`crate::util::url::resolve`]);
/// `None` unless the result is an http(s) URL with a host, the test the tool's own URL passes.
fn join_location(base: &str, location: &str) -> Option<String> {
    let joined = crate::util::url::resolve(base, location)?;
    let lower = joined.to_ascii_lowercase();
    let rest = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://"))?;
    (!rest.is_empty() && !rest.starts_with('/')).then_some(joined)
}

/// What [`read_text`] made of a body.
struct Page {
    text: Text,
    /// The body had more than `max_bytes`.
    capped: bool,
}

enum ReadFailure {
    Stopped(Stop),
    Io(std::io::Error),
}

/// Streams a body into the extractor: at most `max_bytes`, stopping once enough text exists,
/// checking the budget before every read.
fn read_text(body: &mut dyn Read, budget: &Budget, max_bytes: u64) -> Result<Page, ReadFailure> {
    let mut extractor = Extractor::new(MAX_TEXT_CHARS, MAX_COUNTED_CHARS);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut taken: u64 = 0;
    let mut capped = false;
    loop {
        budget.check().map_err(ReadFailure::Stopped)?;
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadFailure::Io(e)),
        };
        let room = max_bytes - taken;
        let take = (n as u64).min(room) as usize;
        taken += take as u64;
        if extractor.feed(&buf[..take]) {
            break;
        }
        if take < n {
            capped = true;
            break;
        }
    }
    Ok(Page { text: extractor.finish(), capped })
}

/// Readable text from HTML (or any text): drops script/style/noscript/template elements and
/// comments, removes tags (block-level ones become line breaks), decodes entities, collapses
/// blanks. The whole text, uncut.
#[cfg(test)]
pub(crate) fn html_to_text(html: &str) -> String {
    let mut extractor = Extractor::new(usize::MAX, usize::MAX);
    extractor.feed_str(html);
    extractor.finish().text
}

/// Extracted text: its first `keep` characters and how many there are in all.
#[derive(Debug, PartialEq)]
pub(crate) struct Text {
    pub(crate) text: String,
    pub(crate) total: usize,
    /// More than the counting limit: `total` is only a lower bound.
    pub(crate) over: bool,
}

/// Elements whose content is not text, dropped up to their closing tag (or the end).
const RAW_ELEMENTS: [&str; 4] = ["script", "style", "noscript", "template"];
/// Longest tag name compared with anything (`blockquote`).
const MAX_NAME: usize = 10;
/// Longest entity name looked at between `&` and `;`, in bytes.
const MAX_ENTITY: usize = 10;

/// Where the single forward pass is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Text,
    /// After a `<` in text.
    Lt,
    /// Reading a tag's name; `closing` after `</`.
    TagName {
        closing: bool,
    },
    /// Inside a tag after its name, until `>`.
    Tag {
        block: bool,
    },
    /// After `<!` and this many `-`.
    Bang(u8),
    /// Inside `<!-- … -->`; `dashes` is the run of `-` just seen (the opener's count).
    Comment {
        dashes: u8,
    },
    /// Inside a raw-text element (`RAW_ELEMENTS[kind]`), `matched` bytes of `</name` seen.
    Raw {
        kind: usize,
        matched: usize,
    },
    /// After `</name` of a raw-text element, until `>`.
    RawClose,
    /// After `&`; the name so far is in `Extractor::entity`.
    Entity,
}

/// The streaming HTML-to-text state machine: bytes in (any chunking), text out. Every input
/// byte is decoded once and passes through a constant number of states; only a failed entity
/// re-reads its at most [`MAX_ENTITY`] bytes, so the pass is linear.
pub(crate) struct Extractor {
    /// The start of a UTF-8 sequence split across chunks (at most 3 bytes).
    carry: Vec<u8>,
    state: State,
    name: [u8; MAX_NAME],
    name_len: usize,
    /// The tag name is longer than [`MAX_NAME`]: it matches nothing.
    name_long: bool,
    /// The entity name after `&` so far (ASCII only: nothing else can be in one).
    entity: [u8; MAX_ENTITY],
    entity_len: usize,
    tidy: Tidy,
}

impl Extractor {
    /// Keeps the first `keep` characters of text and counts up to `count_limit` of them.
    pub(crate) fn new(keep: usize, count_limit: usize) -> Self {
        Extractor {
            carry: Vec::new(),
            state: State::Text,
            name: [0; MAX_NAME],
            name_len: 0,
            name_long: false,
            entity: [0; MAX_ENTITY],
            entity_len: 0,
            tidy: Tidy::new(Sink::new(keep, count_limit)),
        }
    }

    /// Feeds the next bytes (decoded as UTF-8, invalid sequences as U+FFFD, like
    /// `String::from_utf8_lossy` on the whole body). True once the counting limit is passed:
    /// further input cannot change what is kept.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> bool {
        let joined;
        let mut rest = bytes;
        if !self.carry.is_empty() {
            let mut j = std::mem::take(&mut self.carry);
            j.extend_from_slice(bytes);
            joined = j;
            rest = &joined;
        }
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.feed_str(s);
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    self.feed_str(std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            self.char('\u{fffd}');
                            rest = &bad[n..];
                        }
                        None => {
                            self.carry = bad.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        self.tidy.out.enough()
    }

    pub(crate) fn feed_str(&mut self, s: &str) {
        for c in s.chars() {
            self.char(c);
        }
    }

    /// Ends the input: an incomplete UTF-8 sequence becomes U+FFFD, a pending `<` or failed
    /// `&` is text, unclosed tags, comments and raw-text elements run to the end.
    pub(crate) fn finish(mut self) -> Text {
        if !self.carry.is_empty() {
            self.carry.clear();
            self.char('\u{fffd}');
        }
        loop {
            match self.state {
                State::Lt => {
                    self.tidy.push('<');
                    self.state = State::Text;
                }
                State::Entity => self.entity_failed(None),
                _ => break,
            }
        }
        self.tidy.out.finish()
    }

    fn char(&mut self, c: char) {
        match self.state {
            State::Text => match c {
                '<' => self.state = State::Lt,
                '&' => {
                    self.entity_len = 0;
                    self.state = State::Entity;
                }
                _ => self.tidy.push(c),
            },
            State::Lt => match c {
                'a'..='z' | 'A'..='Z' => {
                    self.name_len = 0;
                    self.name_long = false;
                    self.push_name(c);
                    self.state = State::TagName { closing: false };
                }
                '/' => {
                    self.name_len = 0;
                    self.name_long = false;
                    self.state = State::TagName { closing: true };
                }
                '!' => self.state = State::Bang(0),
                '?' => self.state = State::Tag { block: false },
                _ => {
                    // Not a tag: the `<` is text, and `c` is read as text again.
                    self.tidy.push('<');
                    self.state = State::Text;
                    self.char(c);
                }
            },
            State::TagName { closing } => {
                if c.is_ascii_alphanumeric() {
                    self.push_name(c);
                } else if c == '/' && closing && self.name_len == 0 {
                    // `<//p>` is still `p`.
                } else {
                    let name = if self.name_long {
                        ""
                    } else {
                        std::str::from_utf8(&self.name[..self.name_len]).unwrap_or("")
                    };
                    let raw = RAW_ELEMENTS.iter().position(|r| *r == name);
                    match raw {
                        Some(kind) if !closing && (c == '>' || c == '/' || c.is_ascii_whitespace()) => {
                            self.state = State::Raw { kind, matched: 0 };
                        }
                        _ => {
                            let block = is_block_tag(name);
                            self.state = State::Tag { block };
                            self.char(c);
                        }
                    }
                }
            }
            State::Tag { block } => {
                if c == '>' {
                    if block {
                        self.tidy.push('\n');
                    }
                    self.state = State::Text;
                }
            }
            State::Bang(dashes) => {
                self.state = match c {
                    '-' if dashes == 1 => State::Comment { dashes: 2 },
                    '-' => State::Bang(1),
                    '>' => State::Text,
                    _ => State::Tag { block: false },
                }
            }
            State::Comment { dashes } => {
                self.state = match c {
                    '-' => State::Comment { dashes: (dashes + 1).min(2) },
                    '>' if dashes >= 2 => State::Text,
                    _ => State::Comment { dashes: 0 },
                }
            }
            State::Raw { kind, matched } => {
                let name = RAW_ELEMENTS[kind].as_bytes();
                let want = if matched == 0 {
                    b'<'
                } else if matched == 1 {
                    b'/'
                } else {
                    name[matched - 2]
                };
                let lower = c.to_ascii_lowercase();
                self.state = if c.is_ascii() && lower as u8 == want {
                    if matched + 1 == name.len() + 2 {
                        State::RawClose
                    } else {
                        State::Raw { kind, matched: matched + 1 }
                    }
                } else {
                    State::Raw { kind, matched: usize::from(c == '<') }
                };
            }
            State::RawClose => {
                if c == '>' {
                    self.state = State::Text;
                }
            }
            State::Entity => {
                let name = std::str::from_utf8(&self.entity[..self.entity_len]).unwrap_or("");
                if c == ';' {
                    match entity(name) {
                        Some(decoded) => {
                            self.tidy.push(decoded);
                            self.state = State::Text;
                        }
                        None => self.entity_failed(Some(c)),
                    }
                } else if self.entity_len == MAX_ENTITY || !(c.is_ascii_alphanumeric() || c == '#' || c == '+') {
                    // No entity name is this long or holds `c` (`+` is a sign `&#+65;` allows).
                    self.entity_failed(Some(c));
                } else {
                    self.entity[self.entity_len] = c as u8;
                    self.entity_len += 1;
                }
            }
        }
    }

    fn push_name(&mut self, c: char) {
        if self.name_len == MAX_NAME {
            self.name_long = true;
        } else {
            self.name[self.name_len] = c.to_ascii_lowercase() as u8;
            self.name_len += 1;
        }
    }

    /// Not an entity: the `&` is text and what followed it is read again as text.
    fn entity_failed(&mut self, next: Option<char>) {
        let (seen, len) = (self.entity, self.entity_len);
        self.tidy.push('&');
        self.state = State::Text;
        for c in seen[..len].iter().map(|&b| char::from(b)).chain(next) {
            self.char(c);
        }
    }
}

fn is_block_tag(name: &str) -> bool {
    matches!(
        name,
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

/// Whitespace as the contract wants it, streamed: CR and CRLF are line breaks, runs of
/// spaces/tabs/no-break spaces inside a line become one space, lines are trimmed, and more
/// than one blank line in a row becomes one.
struct Tidy {
    line_has_word: bool,
    /// A separator followed the last word of the line.
    gap: bool,
    after_cr: bool,
    /// Blank lines in a row so far (only 0, 1, 2 matter).
    blank_run: u8,
    out: Sink,
}

impl Tidy {
    fn new(out: Sink) -> Self {
        Tidy { line_has_word: false, gap: false, after_cr: false, blank_run: 0, out }
    }

    fn push(&mut self, c: char) {
        let after_cr = std::mem::replace(&mut self.after_cr, c == '\r');
        match c {
            '\n' if after_cr => {}
            '\r' | '\n' => self.end_line(),
            ' ' | '\t' | '\u{a0}' => self.gap |= self.line_has_word,
            _ => {
                if self.gap {
                    self.out.push(' ');
                }
                self.gap = false;
                self.line_has_word = true;
                self.out.push(c);
            }
        }
    }

    fn end_line(&mut self) {
        self.blank_run = if self.line_has_word { 0 } else { (self.blank_run + 1).min(2) };
        if self.blank_run < 2 {
            self.out.push('\n');
        }
        self.line_has_word = false;
        self.gap = false;
    }
}

/// The text's first `keep` characters and its length, with leading and trailing whitespace
/// trimmed as `str::trim` would: whitespace is held back until a later character shows it
/// is inside the text.
struct Sink {
    text: String,
    kept: usize,
    keep: usize,
    total: usize,
    count_limit: usize,
    started: bool,
    /// Whitespace since the last other character (its first part, up to what is kept).
    pending: String,
    pending_len: usize,
}

impl Sink {
    fn new(keep: usize, count_limit: usize) -> Self {
        Sink {
            text: String::new(),
            kept: 0,
            keep,
            total: 0,
            count_limit,
            started: false,
            pending: String::new(),
            pending_len: 0,
        }
    }

    fn push(&mut self, c: char) {
        if c.is_whitespace() {
            if self.started {
                self.pending_len += 1;
                if self.kept + self.pending_len <= self.keep {
                    self.pending.push(c);
                }
            }
            return;
        }
        self.total += self.pending_len + 1;
        self.kept += self.pending.chars().count();
        self.text.push_str(&self.pending);
        self.pending.clear();
        self.pending_len = 0;
        if self.kept < self.keep {
            self.text.push(c);
            self.kept += 1;
        }
        self.started = true;
    }

    fn enough(&self) -> bool {
        self.total > self.count_limit
    }

    fn finish(self) -> Text {
        Text { over: self.enough(), total: self.total, text: self.text }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::util::text::take_chars;
    use crate::workspace::tests::Sandbox;
    use std::io::{BufRead, BufReader, Write};
    use std::net::{IpAddr, Ipv4Addr, TcpListener};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::thread;

    /// A one-route local server answering every request with `status`, `content_type`,
    /// `body`, after `delay`. Returns the base URL; the thread ends after `requests`.
    pub(crate) fn serve(
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

    /// The tool as tests use it: public addresses plus 127.0.0.1, where the test pages live.
    fn local() -> WebFetch {
        WebFetch::new(AddrPolicy::PublicAnd(IpAddr::V4(Ipv4Addr::LOCALHOST)))
    }

    fn run(tool: &WebFetch, url: &str) -> ToolOutput {
        let sb = Sandbox::new();
        let mut a = Map::new();
        a.insert("url".into(), json!(url));
        tool.run(&a, &sb.ctx)
    }

    /// A listener nobody answers on; `untouched` asserts no connection ever reached it.
    struct Trap(TcpListener);

    impl Trap {
        fn on(ip: &str) -> Trap {
            let l = TcpListener::bind((ip, 0)).unwrap();
            l.set_nonblocking(true).unwrap();
            Trap(l)
        }

        fn port(&self) -> u16 {
            self.0.local_addr().unwrap().port()
        }

        #[track_caller]
        fn untouched(&self) {
            match self.0.accept() {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                other => panic!("a connection reached the trap: {other:?}"),
            }
        }
    }

    #[test]
    fn converts_html_to_text() {
        let html = "<html><head><title>T</title><STYLE>body{x:1}</STYLE>\
            <script type=\"x\">alert('<b>')</script></head>\
            <body><!-- hidden --><h1>Hello&nbsp;&amp; welcome</h1>\n\n\n\n<p>a   b\t c &lt;ok&gt; &#233;&#x263A;</p>\
            <p>1 < 2</p></body></html>";
        assert_eq!(html_to_text(html), "T\n\nHello & welcome\n\na b c <ok> é☺\n\n1 < 2");
        let (url, h) = serve(200, "text/html; charset=utf-8", html.as_bytes().to_vec(), Duration::ZERO, 1);
        let out = run(&local(), &format!("{url}/page"));
        assert_eq!(out, ToolOutput::ok(format!("[From {url}/page]\n\nT\n\nHello & welcome\n\na b c <ok> é☺\n\n1 < 2")));
        assert_eq!(h.join().unwrap(), ["/page"]);
    }

    /// Outputs of the two-pass extraction this single pass replaced (compared on these and on
    /// hundreds of thousands of random inputs); the last rows are where it differs on purpose.
    #[test]
    fn keeps_the_old_extraction_output() {
        let same = [
            ("<!-->x", "x"),
            ("<!--->x", "x"),
            ("<!-- a -- > b -->c", "c"),
            ("<!x>y", "y"),
            ("<!->y", "y"),
            ("&amp", "&amp"),
            ("x&amp;&lt;&#65;&#x42;&#X43;&bogus;&;&#;", "x&<ABC&bogus;&;&#;"),
            ("&#+65;&#x+41;", "AA"),
            ("a\r\nb\rc\n\r\nd", "a\nb\nc\n\nd"),
            ("a&nbsp;&nbsp;b&#160;c", "a b c"),
            ("\u{2003}a b\u{2003}", "a b"),
            ("\x0c\n\n\n\x0cz", "z"),
            ("<p>a</p>\n\n\n<p>b</p>", "a\n\nb"),
            ("<br/>x<br>y<hr>z", "x\ny\nz"),
            ("<script>a</script b>c", "c"),
            ("<script>a</scriptx>b", "b"),
            ("<scripts>a</scripts>b", "ab"),
            ("<script\nsrc=x>a</SCRIPT>b", "b"),
            ("<noscript>n</noscript>t<template>q</template>u", "tu"),
            ("<h1x>a</h1x>b", "ab"),
            ("<//p>a", "a"),
            ("< p>a", "< p>a"),
            ("a < b > c", "a < b > c"),
            ("<?xml v?>x", "x"),
            ("&éééééééééé;", "&éééééééééé;"),
            ("&abcdefghij;", "&abcdefghij;"),
            ("&#x1F600;&#1114112;&#xD800;", "😀\u{fffd}\u{fffd}"),
            ("a&&amp;b", "a&&b"),
            ("<a title=\"x>y\">z</a>", "y\">z"),
            ("x<", "x<"),
            ("x&#", "x&#"),
            ("<b", ""),
            ("  \n\n  lead", "lead"),
            ("a\u{85}", "a"),
            ("\u{a0}\u{a0}x\u{a0}\u{a0}", "x"),
            ("<script>never closed", ""),
            ("<sCrIpT>x</ScRiPt >y<style/>z", "y"),
        ];
        for (html, want) in same {
            assert_eq!(html_to_text(html), want, "{html:?}");
        }
        // An unclosed comment now runs to the end (the old pass kept text after a later `>`);
        // a comment opener inside a tag is part of that tag; an entity is not glued together
        // across a tag (the old pass removed tags before decoding).
        let changed = [("a<!-- b > c", "a"), ("<b x='<!--'>t-->u", "t-->u"), ("&<b>lt;", "&lt;")];
        for (html, want) in changed {
            assert_eq!(html_to_text(html), want, "{html:?}");
        }
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
        let mut rng = crate::util::prng::Prng::new(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.next_u64();
        for _ in 0..20_000 {
            // The length is drawn afresh each round (a length of 0 must not freeze the seed).
            let len = next() % 40;
            let text: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
            let _ = html_to_text(&text);
        }
        assert_eq!(html_to_text("&#0;&#x41;&bogus;"), "\u{fffd}A&bogus;");
        assert_eq!(html_to_text("<sCrIpT>x</ScRiPt >y"), "y");
    }

    /// Any chunking of the bytes gives the text of the whole body decoded lossily at once.
    #[test]
    fn chunking_does_not_change_the_text() {
        let mut samples: Vec<Vec<u8>> = [
            "<p>é中😀 &amp;&#x263A;</p><!-- c --><script>x</script>tail &lt",
            "<title>T</title>\r\n\r\n\r\nline&nbsp;two <br> three",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        samples.push(b"bad \xff\xfe utf8 \xe2\x82 cut \xf0\x9f\x98".to_vec());
        samples.push(b"\xe2\x82\x41 <p>x</p>\xc3".to_vec());
        for bytes in samples {
            let want = html_to_text(&String::from_utf8_lossy(&bytes));
            for size in [1, 2, 3, 5, 7, 64] {
                let mut ex = Extractor::new(usize::MAX, usize::MAX);
                for chunk in bytes.chunks(size) {
                    ex.feed(chunk);
                }
                assert_eq!(ex.finish().text, want, "chunks of {size}: {bytes:?}");
            }
        }
        // Kept and counted characters: the first `keep`, the exact total up to the limit.
        let words = "<p>word</p> ".repeat(2000);
        let full = html_to_text(&words);
        let mut ex = Extractor::new(MAX_TEXT_CHARS, MAX_COUNTED_CHARS);
        assert!(!ex.feed(words.as_bytes()));
        let t = ex.finish();
        assert_eq!(
            t,
            Text { text: take_chars(&full, MAX_TEXT_CHARS).to_string(), total: full.chars().count(), over: false }
        );
        let mut ex = Extractor::new(10, 100);
        assert!(ex.feed(words.as_bytes()), "past the counting limit");
        let t = ex.finish();
        assert_eq!((t.text.as_str(), t.over), ("word\n\nword", true));
    }

    /// Hostile markup ends in time linear in its size (the old extraction rescanned to the end
    /// at every unclosed `<!--`: 100 KB took 1.6 s, 800 KB minutes).
    #[test]
    fn hostile_markup_is_linear() {
        let cases: [(&str, String, usize); 6] = [
            ("800 KB of <!--", "<!--".repeat(200_000), 0),
            ("1 MB of <", "<".repeat(1 << 20), 1 << 20),
            ("1 MB of <script>", "<script>".repeat(1 << 17), 0),
            ("1 MB of nested <div>", "<div>".repeat(200_000) + "x" + &"</div>".repeat(200_000), 1),
            ("1 MB of &#", "&#".repeat(1 << 19), 1 << 20),
            ("1 MB of <a & <!", "<a &<!".repeat(170_000), 0),
        ];
        for (what, html, chars) in cases {
            let start = Instant::now();
            let text = html_to_text(&html);
            let took = start.elapsed();
            eprintln!("{what}: {took:?}");
            assert_eq!(text.chars().count(), chars, "{what}");
            assert!(took < Duration::from_secs(3), "{what} took {took:?}");
        }
    }

    #[test]
    fn caps_download_and_text() {
        let body = "word ".repeat(20_000).into_bytes();
        let (url, h) = serve(200, "text/plain", body, Duration::ZERO, 1);
        let tool = WebFetch { max_bytes: 10_000, ..local() };
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

    /// A page with far more text than is counted is not read to its end.
    #[test]
    fn stops_reading_once_enough_text() {
        let body = "word ".repeat(300_000).into_bytes();
        let (url, h) = serve(200, "text/plain", body, Duration::ZERO, 1);
        let out = run(&local(), &url).for_model;
        let expect_text = take_chars(&"word ".repeat(1000), 3000).to_string();
        assert_eq!(out, format!("[From {url}]\n\n{expect_text}\n\n[content truncated, total over 30000 chars]"));
        h.join().unwrap();
        // An endless body of text ends the same way.
        let budget = Budget { deadline: Instant::now() + Duration::from_secs(20), cancel: CancelToken::new() };
        let page = read_text(&mut std::io::repeat(b'a'), &budget, u64::MAX).ok().expect("stops by itself");
        assert!(page.text.over && !page.capped);
    }

    /// The body loop gives up at the deadline or on cancel even when the page never ends and
    /// never produces text.
    #[test]
    fn reading_stops_on_deadline_and_cancel() {
        let endless = || std::io::Read::chain(&b"<!--"[..], std::io::repeat(b'-'));
        let budget = Budget { deadline: Instant::now() + Duration::from_millis(300), cancel: CancelToken::new() };
        let start = Instant::now();
        assert!(matches!(read_text(&mut endless(), &budget, u64::MAX), Err(ReadFailure::Stopped(Stop::Overdue))));
        assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());

        let cancel = CancelToken::new();
        let budget = Budget { deadline: Instant::now() + Duration::from_secs(60), cancel: cancel.clone() };
        let canceller = thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            cancel.cancel();
        });
        let start = Instant::now();
        assert!(matches!(read_text(&mut endless(), &budget, u64::MAX), Err(ReadFailure::Stopped(Stop::Cancelled))));
        assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
        canceller.join().unwrap();
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
        assert_eq!(run(&local(), &url).for_model, format!("Error: HTTP error 404: {url}"));
        h.join().unwrap();
        let (url, h) = serve(200, "image/png", vec![0x89, b'P'], Duration::ZERO, 1);
        assert!(run(&local(), &url).for_model.contains("is not text"));
        h.join().unwrap();
        // Nothing listens on a port we just closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/");
        assert!(run(&local(), &url).for_model.starts_with(&format!("Error: Fetching {url} failed: ")));
    }

    /// The default tool refuses internal addresses however they are spelled, before connecting.
    #[test]
    fn refuses_internal_addresses_in_any_spelling() {
        let trap = Trap::on("127.0.0.1");
        let p = trap.port();
        let tool = WebFetch { timeout: Duration::from_secs(3), ..WebFetch::default() };
        let refused = |url: &str, why: &str| {
            let out = run(&tool, url);
            let want = format!("Error: Fetching {url} refused: {why}; {REFUSAL_NOTE}");
            assert_eq!(out.for_model, want, "{url}");
            assert!(out.failed);
        };
        let lo = "127.0.0.1 is a loopback address";
        refused(&format!("http://127.0.0.1:{p}/"), lo);
        refused(&format!("HTTP://127.0.0.1:{p}/x?y"), lo);
        refused(&format!("http://2130706433:{p}/"), "2130706433 resolves to 127.0.0.1, a loopback address");
        refused(&format!("http://0x7f.1:{p}/"), "0x7f.1 resolves to 127.0.0.1, a loopback address");
        refused(&format!("http://127.1:{p}/"), "127.1 resolves to 127.0.0.1, a loopback address");
        refused(&format!("http://0177.0.0.1:{p}/"), "0177.0.0.1 resolves to 127.0.0.1, a loopback address");
        refused(&format!("http://[::ffff:7f00:1]:{p}/"), "::ffff:127.0.0.1 is a loopback address");
        refused(&format!("http://[::ffff:127.0.0.1]:{p}/"), "::ffff:127.0.0.1 is a loopback address");
        refused(&format!("http://[::1]:{p}/"), "::1 is a loopback address");
        refused(&format!("http://0.0.0.0:{p}/"), "0.0.0.0 is an unspecified (this-host) address");
        refused(&format!("https://127.0.0.1:{p}/"), lo);
        refused(
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254 is a link-local address (this includes the cloud metadata service)",
        );
        refused("http://10.0.0.1/", "10.0.0.1 is a private-network address");
        refused("http://192.168.1.1:8080/", "192.168.1.1 is a private-network address");
        refused("http://100.64.0.1/", "100.64.0.1 is a carrier-grade NAT address");
        refused("http://[fd00::1]/", "fd00::1 is a unique-local (private IPv6) address");
        refused("http://[fe80::1]/", "fe80::1 is a link-local address (this includes the cloud metadata service)");
        let out = run(&tool, &format!("http://localhost:{p}/")).for_model;
        assert!(
            out.starts_with(&format!("Error: Fetching http://localhost:{p}/ refused: localhost resolves to ")),
            "{out}"
        );
        trap.untouched();
        // The same spellings do reach loopback when every address is allowed.
        let (url, h) = serve(200, "text/plain", b"reached".to_vec(), Duration::ZERO, 3);
        let port = url.rsplit(':').next().unwrap().to_string();
        let any = WebFetch::new(AddrPolicy::Any);
        for host in ["2130706433", "0x7f.1", "127.1"] {
            let u = format!("http://{host}:{port}/");
            assert_eq!(run(&any, &u).for_model, format!("[From {u}]\n\nreached"));
        }
        h.join().unwrap();
    }

    /// A server on 127.0.0.1 that answers by path: `(status, location, body)`.
    fn routes(answer: fn(&str) -> (u16, Option<String>, &'static str)) -> String {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        thread::spawn(move || {
            while let Ok(Some(req)) = server.recv_timeout(Duration::from_secs(10)) {
                let (status, location, body) = answer(req.url());
                let mut resp = tiny_http::Response::from_string(body).with_status_code(status);
                if let Some(l) = location {
                    resp = resp.with_header(tiny_http::Header::from_bytes("Location", l).unwrap());
                }
                let _ = req.respond(resp);
            }
        });
        format!("http://127.0.0.1:{port}")
    }

    /// Redirects are followed here, each hop resolved and checked again: a public (here:
    /// the allowed 127.0.0.1) page cannot bounce the fetch into an internal address.
    #[test]
    fn redirects_are_followed_and_each_hop_is_checked() {
        static TRAP_PORT: AtomicUsize = AtomicUsize::new(0);
        let trap = Trap::on("127.0.0.2");
        TRAP_PORT.store(trap.port() as usize, Ordering::SeqCst);
        let base = routes(|path| match path {
            "/start" => (302, Some("/middle".into()), ""),
            "/middle" => (301, Some("final?x=1#frag".into()), ""),
            "/final?x=1" => (200, None, "<p>done</p>"),
            "/to-private" => (302, Some(format!("http://127.0.0.2:{}/secret", TRAP_PORT.load(Ordering::SeqCst))), ""),
            "/to-metadata" => (307, Some("http://169.254.169.254/latest/meta-data/".into()), ""),
            "/to-ftp" => (302, Some("ftp://example.com/x".into()), ""),
            "/loop" => (302, Some("/loop".into()), ""),
            "/no-location" => (302, None, ""),
            _ => (404, None, "no"),
        });
        let tool = WebFetch { timeout: Duration::from_secs(5), ..local() };
        assert_eq!(run(&tool, &format!("{base}/start")).for_model, format!("[From {base}/start]\n\ndone"));
        let url = format!("{base}/to-private");
        let trap_url = format!("http://127.0.0.2:{}/secret", trap.port());
        assert_eq!(
            run(&tool, &url).for_model,
            format!("Error: Fetching {url} refused: it redirects to {trap_url}, and 127.0.0.2 is a loopback address; {REFUSAL_NOTE}")
        );
        trap.untouched();
        let url = format!("{base}/to-metadata");
        assert!(run(&tool, &url).for_model.starts_with(&format!(
            "Error: Fetching {url} refused: it redirects to http://169.254.169.254/latest/meta-data/, and 169.254.169.254 is a link-local"
        )));
        let url = format!("{base}/to-ftp");
        assert_eq!(
            run(&tool, &url).for_model,
            format!("Error: Fetching {url} failed: it redirects to ftp://example.com/x, which is not an http(s) URL")
        );
        let url = format!("{base}/loop");
        assert_eq!(run(&tool, &url).for_model, format!("Error: Fetching {url} failed: more than 10 redirects"));
        let url = format!("{base}/no-location");
        assert_eq!(run(&tool, &url).for_model, format!("Error: HTTP error 302: {url}"));
    }

    #[test]
    fn joins_redirect_locations() {
        let cases = [
            ("http://a.com/x/y?q", "/z", Some("http://a.com/z")),
            ("http://a.com/x/y?q", "z?1", Some("http://a.com/x/z?1")),
            ("http://a.com", "z", Some("http://a.com/z")),
            ("http://a.com/x/y", "?p=1", Some("http://a.com/x/y?p=1")),
            ("https://a.com:8443/x", "//b.org/p", Some("https://b.org/p")),
            ("http://a.com/x", "HTTPS://b.org/#f", Some("HTTPS://b.org/")),
            ("http://a.com/x", " http://[::1]:9/ ", Some("http://[::1]:9/")),
            ("http://a.com/x", "ftp://b/", None),
            ("http://a.com/x", "javascript:alert(1)", None),
            ("http://a.com/x", "http:///nohost", None),
        ];
        for (base, loc, want) in cases {
            assert_eq!(join_location(base, loc).as_deref(), want, "{base} + {loc}");
        }
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
        let out = local().run(&a, &sb.ctx);
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(out.for_model, format!("Error: Fetching {url} was cancelled"));
        t.join().unwrap();
        h.join().unwrap();
    }

    #[test]
    fn times_out() {
        let (url, h) = serve(200, "text/plain", b"late".to_vec(), Duration::from_millis(1500), 1);
        let tool = WebFetch { timeout: Duration::from_millis(300), ..local() };
        let start = std::time::Instant::now();
        assert_eq!(run(&tool, &url).for_model, format!("Error: Fetching {url} timed out (0.3s)"));
        assert!(start.elapsed() < Duration::from_secs(2));
        h.join().unwrap();
    }

    /// A page that never ends: after the headers, `<!--` and then `-` every few ms (`stall`:
    /// nothing at all). The receiver gets the moment the client hung up.
    pub(crate) fn trickle(stall: bool) -> (String, crossbeam_channel::Receiver<&'static str>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = crossbeam_channel::bounded(4);
        thread::spawn(move || {
            let Ok((mut sock, _)) = listener.accept() else { return };
            let mut reader = BufReader::new(sock.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<!--";
            if sock.write_all(head.as_bytes()).is_err() {
                return;
            }
            let _ = tx.send("sent");
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(30) {
                if stall {
                    // A closed peer shows as end-of-file (or an error) on our side.
                    sock.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                    match std::io::Read::read(&mut reader, &mut [0u8; 64]) {
                        Ok(0) => break,
                        Err(e)
                            if e.kind() != std::io::ErrorKind::WouldBlock
                                && e.kind() != std::io::ErrorKind::TimedOut =>
                        {
                            break
                        }
                        _ => {}
                    }
                } else if sock.write_all(&[b'-'; 64]).is_err() {
                    break;
                } else {
                    thread::sleep(Duration::from_millis(5));
                }
            }
            let _ = tx.send("closed");
        });
        (format!("http://127.0.0.1:{port}/"), rx)
    }

    /// After cancel or timeout the call returns and the connection is closed, both well before
    /// the request's own 15 s timeout, also when the server sends nothing at all.
    #[test]
    fn cancel_and_timeout_free_the_helper() {
        for stall in [false, true] {
            let (url, events) = trickle(stall);
            let tool = local();
            let sb = Sandbox::new();
            let cancel = sb.ctx.cancel.clone();
            let canceller = thread::spawn(move || {
                assert_eq!(events.recv_timeout(Duration::from_secs(10)), Ok("sent"));
                thread::sleep(Duration::from_millis(100));
                cancel.cancel();
                events.recv_timeout(Duration::from_secs(3))
            });
            let mut a = Map::new();
            a.insert("url".into(), json!(url));
            assert_eq!(tool.run(&a, &sb.ctx).for_model, format!("Error: Fetching {url} was cancelled"));
            assert_eq!(canceller.join().unwrap(), Ok("closed"), "stall {stall}: the connection was closed");
        }
        let (url, events) = trickle(false);
        let tool = WebFetch { timeout: Duration::from_millis(600), ..local() };
        assert_eq!(run(&tool, &url).for_model, format!("Error: Fetching {url} timed out (0.6s)"));
        assert_eq!(events.recv_timeout(Duration::from_secs(1)), Ok("sent"));
        assert_eq!(events.recv_timeout(Duration::from_secs(2)), Ok("closed"));
    }

    /// Every spelling of a bad or odd `url` keeps the wording the model always got; unknown
    /// keys are ignored.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        let tool = WebFetch::new(AddrPolicy::from_allow_private(false));
        for (args, text) in [
            (json!({}), "Error: missing required argument 'url'"),
            (json!({"url": null}), "Error: missing required argument 'url'"),
            (json!({"url": 5}), "Error: argument 'url' must be a string"),
            (json!({"url": {"href": "http://x"}}), "Error: argument 'url' must be a string"),
            (
                json!({"url": " ftp://x ", "headers": {}}),
                "Error: Only http:// and https:// URLs can be fetched: ftp://x",
            ),
        ] {
            assert_eq!(sb.call(&tool, args.clone()).for_model, text, "{args}");
        }
    }
}
