//! A pure `text/event-stream` parser over any [`Read`], following the WHATWG rules: CR, LF or
//! CRLF line ends, an optional leading BOM, `:` comments, `field: value` with one optional space
//! stripped, `data` lines joined with `\n`, dispatch on a blank line, blocks without any `data` line
//! are not dispatched (an empty `data:` is: the Streamable HTTP priming event), `retry` only when all digits.
//! Lines and events are size-capped so a hostile peer cannot exhaust memory.
//!
//! Used by the LLM streaming client and the MCP SSE and Streamable HTTP transports; runs on
//! whichever thread owns the stream (the LLM or transport reader thread).

use std::fmt;
use std::io::{self, Read};

/// Longest accepted line in bytes (an MCP `tools/list` reply arrives as one `data:` line).
pub(crate) const DEFAULT_MAX_LINE: usize = 8 * 1024 * 1024;
/// Largest accepted event (joined data) in bytes.
pub(crate) const DEFAULT_MAX_EVENT: usize = 16 * 1024 * 1024;
const READ_CHUNK: usize = 8 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event` field, `"message"` when absent or empty.
    pub(crate) event: String,
    /// The joined `data` lines (empty for a bare `data:`).
    pub(crate) data: String,
    /// The `id` field if this event block carried one.
    pub(crate) id: Option<String>,
}

#[derive(Debug)]
pub(crate) enum SseError {
    Io(io::Error),
    /// A line exceeded the cap (bytes seen so far).
    LineTooLong(usize),
    /// An event's data exceeded the cap.
    EventTooLarge(usize),
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::Io(e) => write!(f, "event stream read failed: {e}"),
            SseError::LineTooLong(n) => write!(f, "event stream line longer than {n} bytes"),
            SseError::EventTooLarge(n) => write!(f, "event stream event larger than {n} bytes"),
        }
    }
}

impl std::error::Error for SseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SseError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for SseError {
    fn from(e: io::Error) -> Self {
        SseError::Io(e)
    }
}

/// Incremental parser; call [`SseReader::next_event`] until it returns `Ok(None)` (end of stream).
pub(crate) struct SseReader<R> {
    inner: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    eof: bool,
    /// The previous line ended with CR: a following LF belongs to it.
    skip_lf: bool,
    first_line: bool,
    max_line: usize,
    max_event: usize,
    last_event_id: String,
    retry_ms: Option<u64>,
}

impl<R: Read> SseReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self::with_limits(inner, DEFAULT_MAX_LINE, DEFAULT_MAX_EVENT)
    }

    pub(crate) fn with_limits(inner: R, max_line: usize, max_event: usize) -> Self {
        SseReader {
            inner,
            buf: vec![0u8; READ_CHUNK].into_boxed_slice(),
            pos: 0,
            len: 0,
            eof: false,
            skip_lf: false,
            first_line: true,
            max_line,
            max_event,
            last_event_id: String::new(),
            retry_ms: None,
        }
    }

    /// The last `id` seen (for `Last-Event-ID` on reconnect).
    pub(crate) fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// The last valid `retry` value in milliseconds.
    pub(crate) fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Reads until the next dispatched event. At end of stream an unterminated event with
    /// data is still dispatched (lenient: some servers omit the final blank line).
    pub(crate) fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        self.next_event_with(&mut || Ok(()))
    }

    /// [`SseReader::next_event`], calling `before_read` whenever it is about to read from the
    /// stream (which may wait), and never otherwise: a caller holding work from the events
    /// already parsed (text to send on) hands it over there, so nothing waits on the network
    /// while events that arrived together are handled together. An error from `before_read`
    /// is returned instead of reading (a caller's own deadline).
    pub(crate) fn next_event_with(
        &mut self,
        before_read: &mut dyn FnMut() -> io::Result<()>,
    ) -> Result<Option<SseEvent>, SseError> {
        let mut event = String::new();
        let mut data = String::new();
        let mut has_data = false;
        let mut id: Option<String> = None;
        loop {
            let Some(line) = self.read_line(before_read)? else {
                return Ok(has_data.then(|| finish(event, data, id)));
            };
            if line.is_empty() {
                if has_data {
                    return Ok(Some(finish(event, data, id)));
                }
                event.clear();
                id = None;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_str(), ""),
            };
            match field {
                "event" => event = value.to_string(),
                "data" => {
                    if data.len() + value.len() + 1 > self.max_event {
                        return Err(SseError::EventTooLarge(self.max_event));
                    }
                    if has_data {
                        data.push('\n');
                    }
                    data.push_str(value);
                    has_data = true;
                }
                "id" if !value.contains('\0') => {
                    self.last_event_id = value.to_string();
                    id = Some(value.to_string());
                }
                "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                    self.retry_ms = value.parse().ok();
                }
                _ => {}
            }
        }
    }

    /// One line without its terminator, lossily decoded; `None` at end of stream.
    fn read_line(&mut self, before_read: &mut dyn FnMut() -> io::Result<()>) -> Result<Option<String>, SseError> {
        let mut line: Vec<u8> = Vec::new();
        let mut started = false;
        loop {
            if self.pos == self.len && (self.eof || !self.fill(before_read)?) {
                if !started {
                    return Ok(None);
                }
                break;
            }
            if self.skip_lf {
                self.skip_lf = false;
                if self.buf[self.pos] == b'\n' {
                    self.pos += 1;
                    continue;
                }
            }
            started = true;
            let chunk = &self.buf[self.pos..self.len];
            match chunk.iter().position(|b| *b == b'\n' || *b == b'\r') {
                Some(i) => {
                    line.extend_from_slice(&chunk[..i]);
                    self.skip_lf = chunk[i] == b'\r';
                    self.pos += i + 1;
                    break;
                }
                None => {
                    line.extend_from_slice(chunk);
                    self.pos = self.len;
                }
            }
            if line.len() > self.max_line {
                return Err(SseError::LineTooLong(self.max_line));
            }
        }
        if line.len() > self.max_line {
            return Err(SseError::LineTooLong(self.max_line));
        }
        let mut text = String::from_utf8_lossy(&line).into_owned();
        if self.first_line {
            self.first_line = false;
            if let Some(rest) = text.strip_prefix('\u{feff}') {
                text = rest.to_string();
            }
        }
        Ok(Some(text))
    }

    /// Refills the buffer; `false` at end of stream.
    fn fill(&mut self, before_read: &mut dyn FnMut() -> io::Result<()>) -> Result<bool, SseError> {
        before_read().map_err(SseError::Io)?;
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.pos = 0;
                    self.len = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(SseError::Io(e)),
            }
        }
    }
}

fn finish(event: String, data: String, id: Option<String>) -> SseEvent {
    SseEvent { event: if event.is_empty() { "message".into() } else { event }, data, id }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out one byte per read, to exercise every buffer boundary.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            match self.0.split_first() {
                Some((b, rest)) if !out.is_empty() => {
                    out[0] = *b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }

    fn all<R: Read>(mut r: SseReader<R>) -> Vec<SseEvent> {
        let mut v = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            v.push(e);
        }
        v
    }

    fn ev(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent { event: event.into(), data: data.into(), id: id.map(str::to_string) }
    }

    /// Hands out one of its chunks per read.
    struct Chunks(Vec<&'static [u8]>);
    impl Read for Chunks {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            let c = self.0.remove(0);
            out[..c.len()].copy_from_slice(c);
            Ok(c.len())
        }
    }

    #[test]
    fn before_read_runs_only_when_the_buffer_is_used_up() {
        // Two events and a comment-only block in the first read, the third event split over
        // two more reads.
        let mut r = SseReader::new(Chunks(vec![b"data: a\n\ndata: b\n\n: ping\n\n", b"data: ", b"c\n\n"]));
        let reads = std::cell::Cell::new(0);
        let mut count = || {
            reads.set(reads.get() + 1);
            Ok(())
        };
        assert_eq!(r.next_event_with(&mut count).unwrap().unwrap().data, "a");
        assert_eq!(reads.get(), 1, "the first event needed the first read");
        assert_eq!(r.next_event_with(&mut count).unwrap().unwrap().data, "b");
        assert_eq!(reads.get(), 1, "the second came from the same buffer");
        // The comment block is skipped, then each further chunk is a read.
        assert_eq!(r.next_event_with(&mut count).unwrap().unwrap().data, "c");
        assert_eq!(reads.get(), 3);
        assert_eq!(r.next_event_with(&mut count).unwrap(), None);
        assert_eq!(reads.get(), 4, "end of stream is found by one more read");
        // A refusal from the hook is the reader's error, and nothing is read.
        let mut r = SseReader::new(Chunks(vec![b"data: a\n\n"]));
        let mut refuse = || Err(io::Error::new(io::ErrorKind::TimedOut, "deadline"));
        assert!(matches!(r.next_event_with(&mut refuse), Err(SseError::Io(e)) if e.kind() == io::ErrorKind::TimedOut));
        assert_eq!(r.next_event().unwrap().unwrap().data, "a");
    }

    #[test]
    fn parses_endpoint_and_message_events() {
        let text =
            b"event: endpoint\ndata: /message?sessionId=abc\n\n: keep-alive\n\nevent: message\ndata: {\"id\":1}\n\n";
        assert_eq!(
            all(SseReader::new(&text[..])),
            vec![ev("endpoint", "/message?sessionId=abc", None), ev("message", "{\"id\":1}", None)]
        );
    }

    #[test]
    fn joins_data_lines_and_handles_every_line_ending() {
        let text = b"\xEF\xBB\xBFdata: a\r\ndata:b\rdata\n\r\nid: 7\ndata:  two spaces\n\n";
        let want = vec![ev("message", "a\nb\n", None), ev("message", " two spaces", Some("7"))];
        assert_eq!(all(SseReader::new(&text[..])), want);
        assert_eq!(all(SseReader::new(Trickle(text))), want);
    }

    #[test]
    fn blocks_without_data_are_not_dispatched_and_priming_events_are() {
        let text = b"id: prime-1\ndata:\n\nevent: ping\nid: 2\n\ndata: x\n\n";
        let mut r = SseReader::new(&text[..]);
        assert_eq!(r.next_event().unwrap(), Some(ev("message", "", Some("prime-1"))));
        assert_eq!(r.next_event().unwrap(), Some(ev("message", "x", None)));
        assert_eq!(r.last_event_id(), "2");
        assert_eq!(r.next_event().unwrap(), None);
    }

    #[test]
    fn retry_needs_digits_and_unterminated_event_is_dispatched_at_eof() {
        let text = b"retry: 15x\n\nretry: 1500\ndata: tail";
        let mut r = SseReader::new(&text[..]);
        assert_eq!(r.next_event().unwrap(), Some(ev("message", "tail", None)));
        assert_eq!(r.retry_ms(), Some(1500));
        assert_eq!(r.next_event().unwrap(), None);
    }

    #[test]
    fn caps_lines_and_events() {
        let long = format!("data: {}\n\n", "x".repeat(100));
        let mut r = SseReader::with_limits(long.as_bytes(), 50, 1000);
        assert!(matches!(r.next_event(), Err(SseError::LineTooLong(50))));
        let many = "data: 0123456789\n".repeat(20) + "\n";
        let mut r = SseReader::with_limits(many.as_bytes(), 50, 100);
        assert!(matches!(r.next_event(), Err(SseError::EventTooLarge(100))));
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let text = b"data: \xff\xfe ok\n\n";
        assert_eq!(all(SseReader::new(&text[..])), vec![ev("message", "\u{fffd}\u{fffd} ok", None)]);
    }
}

#[cfg(test)]
mod property {
    use super::*;
    use crate::util::prng::{cases, seed, Prng};

    /// Random byte streams through the SSE reader (small caps so the limits are hit too).
    #[test]
    fn sse_reader_never_panics_or_invents_data() {
        let mut rng = Prng::new(seed(0x55e));
        let n = cases(50_000);
        let pieces: &[&[u8]] = &[
            b"data: ",
            b"data:",
            b"event: message",
            b"event: endpoint",
            b"id: 7",
            b"retry: 10",
            b"retry: x",
            b"\n",
            b"\r\n",
            b"\r",
            b":",
            b": comment",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
            b"\xff\xfe",
            b"\xef\xbb\xbf",
            b" ",
        ];
        let mut events = 0usize;
        for _ in 0..n {
            let mut input = Vec::new();
            for _ in 0..rng.below(40) {
                if rng.chance(10) {
                    let k = rng.below(8);
                    input.extend(rng.bytes(k));
                } else {
                    let piece: &[u8] = pieces[rng.below(pieces.len())];
                    input.extend_from_slice(piece);
                }
            }
            let mut r = SseReader::with_limits(&input[..], 64, 128);
            let mut total = 0;
            for _ in 0..input.len() + 2 {
                match r.next_event() {
                    Ok(Some(ev)) => {
                        events += 1;
                        // Count chars: invalid UTF-8 becomes U+FFFD, 3 bytes for 1.
                        let chars = ev.data.chars().count();
                        total += chars;
                        assert!(total <= input.len(), "more data out than in for {input:?}");
                        assert!(chars <= 128, "event cap exceeded for {input:?}");
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
        eprintln!("sse property test: {n} streams, {events} events");
    }
}
