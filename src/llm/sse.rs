//! Server-Sent Events decoding for streamed chat completions: a pull parser over any
//! `BufRead` that yields one event (its joined `data:` lines) at a time. Runs on the LLM
//! reader thread.

use std::io::{self, BufRead};

/// Longest accepted line; a longer one is a protocol error, not a memory blow-up.
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub event: Option<String>,
    pub data: String,
}

pub struct Reader<R> {
    inner: R,
    line: Vec<u8>,
}

impl<R: BufRead> Reader<R> {
    pub fn new(inner: R) -> Self {
        Reader { inner, line: Vec::with_capacity(1024) }
    }

    /// The next event, `Ok(None)` at end of stream.
    pub fn next_event(&mut self) -> io::Result<Option<Event>> {
        let mut data: Option<String> = None;
        let mut event = None;
        loop {
            self.line.clear();
            let n = read_line_capped(&mut self.inner, &mut self.line, MAX_LINE)?;
            if n == 0 {
                // EOF: a pending event without its blank line is still dispatched.
                return Ok(data.map(|data| Event { event, data }));
            }
            let line = trim_eol(&self.line);
            if line.is_empty() {
                if let Some(d) = data.take() {
                    return Ok(Some(Event { event, data: d }));
                }
                event = None;
                continue;
            }
            if line[0] == b':' {
                continue;
            }
            let text = std::str::from_utf8(line)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "stream line is not UTF-8"))?;
            let (field, value) = match text.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (text, ""),
            };
            match field {
                "data" => match &mut data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => data = Some(value.to_string()),
                },
                "event" => event = Some(value.to_string()),
                _ => {}
            }
        }
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &line[..end]
}

/// Reads one `\n`-terminated line into `buf`, failing past `max` bytes.
pub fn read_line_capped<R: BufRead>(r: &mut R, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    let mut total = 0;
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(total);
        }
        let (used, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if total + used > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "stream line too long"));
        }
        buf.extend_from_slice(&available[..used]);
        r.consume(used);
        total += used;
        if done {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_comments_and_multiline() {
        let input = b": keepalive\n\ndata: {\"a\":1}\n\nevent: endpoint\ndata: /m?x=1\r\n\r\ndata: one\ndata: two\n\ndata: [DONE]";
        let mut r = Reader::new(&input[..]);
        assert_eq!(r.next_event().unwrap().unwrap().data, "{\"a\":1}");
        let e = r.next_event().unwrap().unwrap();
        assert_eq!((e.event.as_deref(), e.data.as_str()), (Some("endpoint"), "/m?x=1"));
        assert_eq!(r.next_event().unwrap().unwrap().data, "one\ntwo");
        assert_eq!(r.next_event().unwrap().unwrap().data, "[DONE]");
        assert_eq!(r.next_event().unwrap(), None);
    }

    #[test]
    fn caps_line_length() {
        let long = [b'a'; 100];
        let mut buf = Vec::new();
        assert!(read_line_capped(&mut &long[..], &mut buf, 50).is_err());
    }
}

#[cfg(test)]
mod property {
    use super::*;
    use crate::util::prng::Prng;

    /// Random bytes and mutated streams: the reader ends (event, EOF or error) without panics
    /// or unbounded loops, and never returns more data than it was given.
    #[test]
    fn random_streams_never_panic() {
        let mut rng = Prng::new(crate::util::prng::seed(42));
        let pieces: &[&[u8]] =
            &[b"data: ", b"event: x", b"\n", b"\r\n", b":", b"{\"a\":1}", b"[DONE]", b"\xff", b"id: 3", b" "];
        for _ in 0..crate::util::prng::cases(50_000) {
            let mut input = Vec::new();
            for _ in 0..rng.below(30) {
                if rng.chance(10) {
                    let n = rng.below(8);
                    input.extend(rng.bytes(n));
                } else {
                    let piece: &[u8] = pieces[rng.below(pieces.len())];
                    input.extend_from_slice(piece);
                }
            }
            let mut r = Reader::new(&input[..]);
            let mut total = 0;
            for _ in 0..input.len() + 2 {
                match r.next_event() {
                    Ok(Some(ev)) => {
                        total += ev.data.len();
                        assert!(total <= input.len());
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }
}
