use ascii::AsciiString;

use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{BufReader, BufWriter, ErrorKind, Read};

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::{HTTPVersion, Header, Method};
use crate::connection::Shared;
use crate::util::RefinedTcpStream;
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::Request;

/// Most bytes of a request head (the request line and the header lines, CRLFs included) read
/// from a client; past it the request is answered 431 and the connection closed. (cashcode
/// patch: without a bound one endless line grew memory without limit, upstream issue #56.)
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Most header fields in a request head; one more is answered like [`MAX_HEAD_BYTES`].
/// (cashcode patch)
const MAX_HEADER_FIELDS: usize = 100;

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: IoResult<Option<SocketAddr>>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<BufReader<RefinedTcpStream>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<BufReader<RefinedTcpStream>>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // true if the connection goes through SSL
    secure: bool,

    // (cashcode patch) set by a request of this connection whose body was dropped before its
    // end or whose response said `Connection: close`: no further request is read
    close: Arc<AtomicBool>,

    // (cashcode patch) the plain connection, which keeps the request head deadline
    shared: Option<Arc<Shared>>,
}

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    WrongRequestLine,
    WrongHeader(HTTPVersion),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
    /// (cashcode patch) the head is longer than MAX_HEAD_BYTES or has more than
    /// MAX_HEADER_FIELDS fields
    HeadTooLarge,
    /// (cashcode patch) the head frames its body ambiguously (see `check_framing`)
    BadFraming(HTTPVersion),
}

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    pub fn new(
        write_socket: RefinedTcpStream,
        mut read_socket: RefinedTcpStream,
    ) -> ClientConnection {
        let remote_addr = read_socket.peer_addr();
        let secure = read_socket.secure();
        let shared = read_socket.shared();

        let mut source = SequentialReaderBuilder::new(BufReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            secure,
            close: Arc::new(AtomicBool::new(false)),
            shared,
        }
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Reads the next line from self.next_header_source.
    ///
    /// Reads until `CRLF` is reached. The next read will start
    ///  at the first byte of the new line.
    ///
    /// (cashcode patch) Reads at most `budget` bytes, which it decreases by what it read: the
    /// head never takes more memory than its budget.
    fn read_next_line(&mut self, budget: &mut usize) -> Result<AsciiString, ReadError> {
        let mut buf = Vec::new();
        let mut prev_byte_was_cr = false;

        loop {
            if *budget == 0 {
                return Err(ReadError::HeadTooLarge);
            }
            *budget -= 1;

            let byte = self.next_header_source.by_ref().bytes().next();

            // The previous request left the rest of its body unread (or said it was the last):
            // what follows is not a request.
            if self.close.load(Ordering::SeqCst) {
                let closed = IoError::new(ErrorKind::ConnectionAborted, "connection closed");
                return Err(ReadError::ReadIoError(closed));
            }

            let byte = match byte {
                Some(b) => b.map_err(ReadError::ReadIoError)?,
                None => {
                    let eof = IoError::new(ErrorKind::ConnectionAborted, "Unexpected EOF");
                    return Err(ReadError::ReadIoError(eof));
                }
            };

            if byte == b'\n' && prev_byte_was_cr {
                buf.pop(); // removing the '\r'
                return AsciiString::from_ascii(buf).map_err(|_| {
                    let e = IoError::new(ErrorKind::InvalidInput, "Header is not in ASCII");
                    ReadError::ReadIoError(e)
                });
            }

            prev_byte_was_cr = byte == b'\r';

            buf.push(byte);
        }
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    ///
    /// (cashcode patch) Once the requests before it are done, the whole head (and a body of
    /// up to 1 KiB that `new_request` reads with it) must arrive within the connection's
    /// head deadline: a peer sending a byte now and then no longer holds the connection.
    fn read(&mut self) -> Result<Request, ReadError> {
        self.next_header_source
            .wait_turn()
            .map_err(ReadError::ReadIoError)?;
        // The previous request ended the connection: not a byte more is read (waiting for one
        // kept a refused upload's connection open until its peer sent more or timed out).
        if self.close.load(Ordering::SeqCst) {
            let closed = IoError::new(ErrorKind::ConnectionAborted, "connection closed");
            return Err(ReadError::ReadIoError(closed));
        }
        if let Some(shared) = &self.shared {
            shared.start_head();
        }
        let request = self.read_head();
        if let Some(shared) = &self.shared {
            shared.end_head();
        }
        request
    }

    fn read_head(&mut self) -> Result<Request, ReadError> {
        let mut budget = MAX_HEAD_BYTES;
        let (method, path, version, headers) = {
            // reading the request line
            let (method, path, version) = {
                let line = self.read_next_line(&mut budget)?;

                parse_request_line(
                    line.as_str().trim(), // TODO: remove this conversion
                )?
            };

            // getting all headers
            let headers = {
                let mut headers = Vec::new();
                loop {
                    let line = self.read_next_line(&mut budget)?;

                    if line.is_empty() {
                        break;
                    };
                    if headers.len() == MAX_HEADER_FIELDS {
                        return Err(ReadError::HeadTooLarge);
                    }
                    // (cashcode patch) a folded line or a control character (a bare CR or LF
                    // among them) is a line boundary some other parser sees differently
                    if !is_plain_field_line(line.as_bytes()) {
                        return Err(ReadError::BadFraming(version));
                    }
                    headers.push(match FromStr::from_str(line.as_str().trim()) {
                        // TODO: remove this conversion
                        Ok(h) => h,
                        _ => return Err(ReadError::WrongHeader(version)),
                    });
                }

                headers
            };

            (method, path, version, headers)
        };

        // (cashcode patch) refused while nothing of the body is read and before `100 Continue`
        if check_framing(&headers).is_err() {
            return Err(ReadError::BadFraming(version));
        }

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            *self.remote_addr.as_ref().unwrap(),
            data_source,
            writer,
            Arc::clone(&self.close),
        )
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
            }
        })?;

        // return the request
        Ok(request)
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        use crate::{Response, StatusCode};

        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests {
            return None;
        }

        loop {
            let rq = match self.read() {
                Err(ReadError::WrongRequestLine) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400));
                    response
                        .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                        .ok();
                    return None; // we don't know where the next request would start,
                                 // se we have to close
                }

                Err(ReadError::WrongHeader(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400));
                    response.raw_print(writer, ver, &[], false, None).ok();
                    return None; // we don't know where the next request would start,
                                 // se we have to close
                }

                Err(ReadError::ReadIoError(ref err)) if err.kind() == ErrorKind::TimedOut => {
                    // request timeout
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(408));
                    response
                        .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                        .ok();
                    return None; // closing the connection
                }

                Err(ReadError::ExpectationFailed(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(417));
                    response.raw_print(writer, ver, &[], true, None).ok();
                    return None; // TODO: should be recoverable, but needs handling in case of body
                }

                Err(ReadError::HeadTooLarge) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(431)).with_header(
                        Header::from_bytes(&b"Connection"[..], &b"close"[..]).unwrap(),
                    );
                    response
                        .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                        .ok();
                    return None; // the rest of the head is still unread: closing
                }

                // (cashcode patch) where this body ends is in doubt, so is where the next
                // request would start: closing
                Err(ReadError::BadFraming(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400)).with_header(
                        Header::from_bytes(&b"Connection"[..], &b"close"[..]).unwrap(),
                    );
                    response.raw_print(writer, ver, &[], false, None).ok();
                    return None;
                }

                Err(ReadError::ReadIoError(_)) => return None,

                Ok(rq) => rq,
            };

            // checking HTTP version
            if *rq.http_version() > (1, 1) {
                let writer = self.sink.next().unwrap();
                let response = Response::from_string(
                    "This server only supports HTTP versions 1.0 and 1.1".to_owned(),
                )
                .with_status_code(StatusCode(505));
                response
                    .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                    .ok();
                continue;
            }

            // updating the status of the connection
            let connection_header = rq
                .headers()
                .iter()
                .find(|h| h.field.equiv("Connection"))
                .map(|h| h.value.as_str());

            let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

            match lowercase {
                Some(ref val) if val.contains("close") => self.no_more_requests = true,
                Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
                Some(ref val)
                    if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
                {
                    self.no_more_requests = true
                }
                None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
                _ => (),
            };

            // returning the request
            return Some(rq);
        }
    }
}

/// (cashcode patch) Whether a header line is one field on one line: it does not start with
/// whitespace (an obsolete folded continuation, RFC 9112 5.2) and holds no control character
/// but HTAB (a bare CR or LF, RFC 9112 2.2). A proxy that reads either as a line boundary, or
/// a fold as part of the previous field, would see different headers than this server.
fn is_plain_field_line(line: &[u8]) -> bool {
    let folded = matches!(line.first(), Some(b' ' | b'\t'));
    !folded && line.iter().all(|&b| b == b'\t' || !b.is_ascii_control())
}

/// (cashcode patch) Why a head's body framing is refused. Behind a proxy, any spelling the
/// proxy and this server could read differently lets one client's body be taken as another
/// request (request smuggling), so only the unambiguous ones pass (RFC 9112 6.1, 6.3, 7;
/// RFC 9110 8.6):
/// at most one `Content-Length`, of 1*DIGIT fitting a u64 and a usize (no sign, no list);
/// at most one `Transfer-Encoding`, exactly `chunked` (any case); never both; at most one
/// `Host` and one `Origin` (which the application checks: a proxy and the application must not
/// pick different ones). Values arrive trimmed of surrounding SP/HTAB (`Header::from_str`;
/// other whitespace is a control character, refused by `is_plain_field_line`).
fn check_framing(headers: &[Header]) -> Result<(), &'static str> {
    use std::convert::TryFrom;

    let count = |name: &'static str| headers.iter().filter(|h| h.field.equiv(name)).count();
    let value = |name: &'static str| {
        headers
            .iter()
            .find(|h| h.field.equiv(name))
            .map(|h| h.value.as_str())
    };
    if count("Content-Length") > 1 {
        return Err("more than one Content-Length");
    }
    if count("Transfer-Encoding") > 1 {
        return Err("more than one Transfer-Encoding");
    }
    if count("Host") > 1 {
        return Err("more than one Host");
    }
    if count("Origin") > 1 {
        return Err("more than one Origin");
    }
    let length = value("Content-Length");
    let coding = value("Transfer-Encoding");
    if length.is_some() && coding.is_some() {
        return Err("both Content-Length and Transfer-Encoding");
    }
    if let Some(length) = length {
        let digits = !length.is_empty() && length.bytes().all(|b| b.is_ascii_digit());
        // `u64::from_str` alone would take a leading `+`
        let fits = length
            .parse::<u64>()
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .is_some();
        if !digits || !fits {
            return Err("a Content-Length that is not one decimal number");
        }
    }
    if let Some(coding) = coding {
        if !coding.eq_ignore_ascii_case("chunked") {
            return Err("a Transfer-Encoding other than chunked");
        }
    }
    Ok(())
}

/// Parses a "HTTP/1.1" string.
fn parse_http_version(version: &str) -> Result<HTTPVersion, ReadError> {
    let (major, minor) = match version {
        "HTTP/0.9" => (0, 9),
        "HTTP/1.0" => (1, 0),
        "HTTP/1.1" => (1, 1),
        "HTTP/2.0" => (2, 0),
        "HTTP/3.0" => (3, 0),
        _ => return Err(ReadError::WrongRequestLine),
    };

    Ok(HTTPVersion(major, minor))
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
fn parse_request_line(line: &str) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(' ');

    let method = parts.next().and_then(|w| w.parse().ok());
    let path = parts.next().map(ToOwned::to_owned);
    let version = parts.next().and_then(|w| parse_http_version(w).ok());

    method
        .and_then(|method| Some((method, path?, version?)))
        .ok_or(ReadError::WrongRequestLine)
}

#[cfg(test)]
mod test {
    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line("GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line("GET /hello").is_err());
        assert!(super::parse_request_line("qsd qsd qsd").is_err());
    }

    // (cashcode patch) the head limits and the close flag, over a loopback connection.

    use super::{ClientConnection, MAX_HEADER_FIELDS, MAX_HEAD_BYTES};
    use crate::util::RefinedTcpStream;
    use crate::{Header, Response};
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};

    /// A connection whose client sends `input` (on its own thread: it may not fit the socket
    /// buffers) and then ends its side; the client stream is returned for the answers.
    fn connection(input: Vec<u8>) -> (ClientConnection, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut writer = client.try_clone().unwrap();
        std::thread::spawn(move || {
            // The server may close before it has read everything.
            let _ = writer.write_all(&input);
            let _ = writer.shutdown(Shutdown::Write);
        });
        let (read, write) = RefinedTcpStream::new(crate::connection::Connection::from(server));
        (ClientConnection::new(write, read), client)
    }

    /// A GET whose head is `len` bytes long in all, padded in one header.
    fn head_of(len: usize) -> Vec<u8> {
        let fixed = "GET / HTTP/1.1\r\nX-Pad: \r\n\r\n".len();
        let pad = "a".repeat(len - fixed);
        format!("GET / HTTP/1.1\r\nX-Pad: {pad}\r\n\r\n").into_bytes()
    }

    fn fields(n: usize) -> Vec<u8> {
        let fields: String = (0..n).map(|i| format!("X-F{i}: v\r\n")).collect();
        format!("GET / HTTP/1.1\r\n{fields}\r\n").into_bytes()
    }

    fn answer(mut client: TcpStream) -> String {
        let mut out = String::new();
        let _ = client.read_to_string(&mut out);
        out
    }

    #[test]
    fn a_head_of_max_bytes_is_read_and_one_byte_more_is_431() {
        let (mut conn, _client) = connection(head_of(MAX_HEAD_BYTES));
        let rq = conn
            .next()
            .expect("a head of exactly the limit is a request");
        let fixed = "GET / HTTP/1.1\r\nX-Pad: \r\n\r\n".len();
        assert_eq!(rq.headers()[0].value.len(), MAX_HEAD_BYTES - fixed);

        let (mut conn, client) = connection(head_of(MAX_HEAD_BYTES + 1));
        assert!(conn.next().is_none());
        drop(conn);
        let out = answer(client);
        assert!(
            out.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{}",
            out
        );
        assert!(out.contains("\r\nConnection: close\r\n"), "{}", out);
    }

    #[test]
    fn an_endless_line_is_refused_at_the_limit() {
        let mut line = b"GET /".to_vec();
        line.resize(4 * MAX_HEAD_BYTES, b'a');
        let (mut conn, client) = connection(line);
        assert!(conn.next().is_none());
        drop(conn);
        assert!(answer(client).starts_with("HTTP/1.1 431 "));
    }

    #[test]
    fn max_fields_are_read_and_one_more_is_431() {
        let (mut conn, _client) = connection(fields(MAX_HEADER_FIELDS));
        assert_eq!(
            conn.next().expect("request").headers().len(),
            MAX_HEADER_FIELDS
        );

        let (mut conn, client) = connection(fields(MAX_HEADER_FIELDS + 1));
        assert!(conn.next().is_none());
        drop(conn);
        assert!(answer(client).starts_with("HTTP/1.1 431 "));
    }

    /// A body that looks like a request, then a real next request.
    fn post_then_get() -> Vec<u8> {
        let body = "GET /smuggled HTTP/1.1\r\n\r\n".repeat(100);
        format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}GET /next HTTP/1.1\r\n\r\n",
            body.len()
        )
        .into_bytes()
    }

    #[test]
    fn a_body_read_to_its_end_keeps_the_connection() {
        let (mut conn, _client) = connection(post_then_get());
        let mut rq = conn.next().expect("the POST");
        let mut body = String::new();
        rq.as_reader().read_to_string(&mut body).unwrap();
        assert_eq!(body, "GET /smuggled HTTP/1.1\r\n\r\n".repeat(100));
        drop(rq);
        assert_eq!(conn.next().expect("the next request").url(), "/next");
    }

    #[test]
    fn a_body_left_unread_ends_the_connection() {
        let (mut conn, _client) = connection(post_then_get());
        let mut rq = conn.next().expect("the POST");
        let mut first = [0u8; 10];
        rq.as_reader().read_exact(&mut first).unwrap();
        drop(rq);
        assert!(
            conn.next().is_none(),
            "the rest of the body must not be read as a request"
        );
    }

    #[test]
    fn a_connection_close_response_is_the_last() {
        let (mut conn, client) =
            connection(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n".to_vec());
        let rq = conn.next().expect("the first GET");
        let close = Header::from_bytes(&b"Connection"[..], &b"close"[..]).unwrap();
        rq.respond(Response::empty(200).with_header(close)).unwrap();
        assert!(conn.next().is_none());
        drop(conn);
        let out = answer(client);
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{}", out);
        assert!(out.contains("\r\nConnection: close\r\n"), "{}", out);
    }

    // (cashcode patch) strict framing: the spellings a proxy could read differently.

    fn head(lines: &[&str]) -> Vec<Header> {
        lines.iter().map(|l| l.parse().expect("a header")).collect()
    }

    #[test]
    fn unambiguous_framing_passes() {
        for lines in [
            &[][..],
            &["Host: a", "Origin: http://a", "Content-Length: 0"][..],
            &["Content-Length: 12"][..],
            &["Content-Length:  007 "][..],
            &["Content-Length:\t18446744073709551615\t"][..],
            &["Transfer-Encoding: chunked"][..],
            &["transfer-encoding: CHUNKED", "Expect: 100-continue"][..],
        ] {
            assert_eq!(super::check_framing(&head(lines)), Ok(()), "{:?}", lines);
        }
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        for lines in [
            &["Content-Length: 2", "Content-Length: 3"][..],
            &["Content-Length: 2", "content-length: 2"][..],
            &["Content-Length: +2"][..],
            &["Content-Length: -2"][..],
            &["Content-Length: 2, 2"][..],
            &["Content-Length: 2,2"][..],
            &["Content-Length: 2 2"][..],
            &["Content-Length: 0x10"][..],
            &["Content-Length: 2a"][..],
            &["Content-Length: 1e3"][..],
            &["Content-Length:"][..],
            &["Content-Length: 18446744073709551616"][..],
            &["Content-Length: 99999999999999999999999"][..],
            &["Content-Length: 2", "Transfer-Encoding: chunked"][..],
            &["Transfer-Encoding: chunked", "Content-Length: 0"][..],
            &["Transfer-Encoding: xchunked"][..],
            &["Transfer-Encoding: chunkedx"][..],
            &["Transfer-Encoding: gzip, chunked"][..],
            &["Transfer-Encoding: chunked, chunked"][..],
            &["Transfer-Encoding: gzip"][..],
            &["Transfer-Encoding: identity"][..],
            &["Transfer-Encoding:"][..],
            &["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"][..],
            &["Host: a", "Host: a"][..],
            &["Host: a", "host: b"][..],
            &["Origin: http://a", "Origin: http://b"][..],
        ] {
            assert!(super::check_framing(&head(lines)).is_err(), "{:?}", lines);
        }
    }

    #[test]
    fn folded_lines_and_control_characters_are_refused() {
        assert!(super::is_plain_field_line(b"X-A: b\tc"));
        assert!(super::is_plain_field_line(b"Content-Length: 5"));
        for line in [
            &b" Content-Length: 5"[..],
            b"\tContent-Length: 5",
            b"X-A: b\nContent-Length: 5",
            b"X-A: b\rContent-Length: 5",
            b"Content-Length: 5\r",
            b"Content-Length: \x0b5",
            b"Content-Length: 5\x0c",
            b"X-A: \x00",
            b"X-A: \x7f",
        ] {
            assert!(!super::is_plain_field_line(line), "{:?}", line);
        }
    }

    #[test]
    fn ambiguous_framing_is_400_with_connection_close_before_the_body() {
        let smuggled = b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 30\r\n\r\n\
            GET /smuggled HTTP/1.1\r\n\r\n";
        let (mut conn, client) = connection(smuggled.to_vec());
        assert!(conn.next().is_none());
        drop(conn);
        let out = answer(client);
        assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{}", out);
        assert!(out.contains("\r\nConnection: close\r\n"), "{}", out);
        assert_eq!(out.matches("HTTP/1.1").count(), 1, "{}", out);

        let folded = b"GET / HTTP/1.1\r\nX-A: b\r\n Content-Length: 5\r\n\r\nhello".to_vec();
        let (mut conn, client) = connection(folded);
        assert!(conn.next().is_none());
        drop(conn);
        assert!(answer(client).starts_with("HTTP/1.1 400 "));
    }
}
