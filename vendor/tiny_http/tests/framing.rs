//! (cashcode patch) Strict framing: every head whose body framing a proxy could read
//! differently is answered 400 with `Connection: close` and the connection is closed, before
//! any body byte is read; what follows the head (here a second request) is never parsed.
//! Unambiguous framing (lengths, chunked, keep-alive) keeps working.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use tiny_http::{Response, Server};

fn server() -> (Server, u16) {
    let server = Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    (server, port)
}

/// Sends `bytes`, then reads until the server closes. A close with bytes still unread by the
/// server can arrive as a reset after the answer; both count as closed. Panics if the
/// connection stays open.
fn exchange(port: u16, bytes: &[u8]) -> String {
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match client.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the connection was not closed ({}); got {:?}",
                e,
                String::from_utf8_lossy(&got)
            ),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The request that follows each refused head: answered only if it were parsed.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: localhost\r\n\r\n";

fn refused(server: &Server, port: u16, fields: &str, body: &str) {
    let sent = format!("POST /upload HTTP/1.1\r\nHost: localhost\r\n{fields}\r\n{body}{SMUGGLED}");
    let out = exchange(port, sent.as_bytes());
    assert!(
        out.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{:?}: {:?}",
        fields,
        out
    );
    assert!(
        out.contains("\r\nConnection: close\r\n"),
        "{:?}: {:?}",
        fields,
        out
    );
    assert_eq!(
        out.matches("HTTP/1.1 ").count(),
        1,
        "{fields:?}: one answer only: {out:?}"
    );
    assert!(
        server.try_recv().unwrap().is_none(),
        "{:?}: a request reached the application",
        fields
    );
}

#[test]
fn ambiguous_content_lengths_are_400_and_close() {
    let (server, port) = server();
    for fields in [
        "Content-Length: 2\r\nContent-Length: 5\r\n",
        "Content-Length: 5\r\nContent-Length: 5\r\n",
        "Content-Length: +2\r\n",
        "Content-Length: -2\r\n",
        "Content-Length: 2, 2\r\n",
        "Content-Length: 2,2\r\n",
        "Content-Length: 2 2\r\n",
        "Content-Length: 0x2\r\n",
        "Content-Length: 2x\r\n",
        "Content-Length:\r\n",
        "Content-Length: 18446744073709551616\r\n",
        "Content-Length: 340282366920938463463374607431768211456\r\n",
    ] {
        refused(&server, port, fields, "hi");
    }
}

#[test]
fn transfer_encodings_other_than_one_chunked_are_400_and_close() {
    let (server, port) = server();
    for fields in [
        "Content-Length: 7\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        "Transfer-Encoding: xchunked\r\n",
        "Transfer-Encoding: chunked-x\r\n",
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding: identity\r\n",
        "Transfer-Encoding:\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    ] {
        refused(&server, port, fields, "0\r\n\r\n");
    }
}

#[test]
fn duplicate_host_or_origin_is_400_and_close() {
    let (server, port) = server();
    for fields in [
        "Host: evil.example\r\n",
        "host: localhost\r\n",
        "Origin: http://localhost\r\nOrigin: http://evil.example\r\n",
        "Origin: http://localhost\r\norigin: http://localhost\r\n",
    ] {
        refused(&server, port, fields, "");
    }
}

#[test]
fn folded_lines_and_bare_line_breaks_are_400_and_close() {
    let (server, port) = server();
    for fields in [
        "X-A: b\r\n Content-Length: 2\r\n",
        "X-A: b\r\n\tContent-Length: 2\r\n",
        "X-A: b\nContent-Length: 2\r\n",
        "X-A: b\rContent-Length: 2\r\n",
        "Content-Length: \x0b2\r\n",
    ] {
        refused(&server, port, fields, "hi");
    }
}

/// Answers every request with its method, URL and body until the server is dropped.
fn echo(server: Server) {
    thread::spawn(move || {
        for mut rq in server.incoming_requests() {
            let mut body = String::new();
            rq.as_reader().read_to_string(&mut body).unwrap();
            let text = format!("{} {} {}", rq.method(), rq.url(), body);
            rq.respond(Response::from_string(text)).unwrap();
        }
    });
}

#[test]
fn plain_lengths_chunked_bodies_and_keep_alive_still_work() {
    let (server, port) = server();
    echo(server);
    let big = "x".repeat(5000);
    let sent = format!(
        "POST /a HTTP/1.1\r\nHost: localhost\r\nOrigin: http://localhost\r\nContent-Length:  5 \r\n\r\nhello\
         POST /b HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
         POST /c HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n{big}\
         GET /d HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        big.len()
    );
    let out = exchange(port, sent.as_bytes());
    assert_eq!(out.matches("HTTP/1.1 200 OK\r\n").count(), 4, "{:?}", out);
    assert!(out.contains("POST /a hello"), "{:?}", out);
    assert!(out.contains("POST /b abc"), "{:?}", out);
    assert!(out.contains(&format!("POST /c {big}")), "{:?}", out);
    assert!(out.ends_with("GET /d "), "{:?}", out);
}
