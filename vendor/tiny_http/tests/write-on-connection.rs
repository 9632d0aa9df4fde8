//! (cashcode patch) `ConnectionConfig::write_on_connection`: an answer given to
//! `respond_from_connection` is written by its connection's own thread, so the thread that
//! answered goes on while a peer never reads; pipelined requests are still answered in order,
//! one dropped unanswered still gets its 500, and `Connection: close` still ends the
//! connection.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use tiny_http::{ConnectionConfig, Header, Response, Server};

fn server(write_on_connection: bool) -> (Server, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = ConnectionConfig {
        // far longer than the wait of the client that must be answered meanwhile: a write
        // blocked on the peer that never reads would hold the answering thread past it
        write_timeout: Some(Duration::from_secs(120)),
        write_on_connection,
        ..ConnectionConfig::default()
    };
    (
        Server::from_listener_with_config(listener, None, config).unwrap(),
        port,
    )
}

/// What the server sends until it closes.
fn until_closed(mut s: TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("still open or failed: {}", e),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A connection that asks for `path` `times` times, pipelined, and never reads.
fn never_reads(port: u16, path: &str, times: usize) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let one = format!("GET {} HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
    s.write_all(one.repeat(times).as_bytes()).unwrap();
    s
}

/// More than loopback's socket buffers hold (Linux: at most 4 MiB to send, 6 MiB to receive).
const BIG: usize = 16 * 1024 * 1024;

/// One thread answers every request: `/big` with [`BIG`] bytes, anything else with its path.
/// Each path is sent on the returned channel once its answer is given.
fn answer_all(server: Server) -> mpsc::Receiver<String> {
    let (answered, paths) = mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(rq) = server.recv() {
            let url = rq.url().to_string();
            let body = if url == "/big" {
                vec![b'x'; BIG]
            } else {
                url.as_bytes().to_vec()
            };
            rq.respond_from_connection(Response::from_data(body))
                .unwrap();
            let _ = answered.send(url);
        }
    });
    paths
}

fn ask(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        path
    )
    .unwrap();
    until_closed(s)
}

#[test]
fn peers_that_never_read_do_not_hold_up_the_answering_thread() {
    let (server, port) = server(true);
    let answered = answer_all(server);
    let stalled: Vec<TcpStream> = (0..4).map(|_| never_reads(port, "/big", 2)).collect();
    // The answering thread gives all four their answer (written on it, the first blocked it
    // for the 120 s write timeout)...
    for _ in 0..4 {
        let path = answered.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(path, "/big");
    }
    // ...and answers others while those four still hold their answers unread.
    for i in 0..3 {
        let path = format!("/other-{}", i);
        let answer = ask(port, &path);
        assert!(answer.starts_with("HTTP/1.1 200 "), "{:?}", answer);
        assert!(answer.ends_with(&path), "{:?}", answer);
    }
    drop(stalled);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (server, port) = server(true);
    let _answered = answer_all(server);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /1 HTTP/1.1\r\nHost: localhost\r\n\r\n\
         GET /2 HTTP/1.1\r\nHost: localhost\r\n\r\n\
         GET /3 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let answer = until_closed(s);
    let bodies: Vec<&str> = answer
        .split("HTTP/1.1 200 ")
        .skip(1)
        .map(|a| a.rsplit("\r\n\r\n").next().unwrap())
        .collect();
    assert_eq!(bodies, ["/1", "/2", "/3"], "{:?}", answer);
}

#[test]
fn a_request_dropped_unanswered_gets_500_and_the_connection_goes_on() {
    let (server, port) = server(true);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /dropped HTTP/1.1\r\nHost: localhost\r\n\r\n\
         GET /inline HTTP/1.1\r\nHost: localhost\r\n\r\n\
         GET /last HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .unwrap();
    let rq = server
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert_eq!(rq.url(), "/dropped");
    drop(rq);
    // `respond` (written here) works on such a server too
    let rq = server
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert_eq!(rq.url(), "/inline");
    rq.respond(Response::from_string("inline")).unwrap();
    // a response saying `Connection: close` is the connection's last
    let rq = server
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert_eq!(rq.url(), "/last");
    let close = Header::from_bytes(&b"Connection"[..], &b"close"[..]).unwrap();
    rq.respond_from_connection(Response::from_string("last").with_header(close))
        .unwrap();
    let answer = until_closed(s);
    assert!(answer.starts_with("HTTP/1.1 500 "), "{:?}", answer);
    let inline = answer.find("HTTP/1.1 200 ").expect("the second answer");
    assert!(answer[inline..].contains("inline"), "{:?}", answer);
    assert!(answer.ends_with("last"), "{:?}", answer);
}

#[test]
fn without_the_setting_the_answer_is_written_by_the_caller() {
    let (server, port) = server(false);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /a HTTP/1.1\r\nHost: localhost\r\n\r\n\
         GET /b HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    // upstream's read-ahead: both requests are read before either is answered
    let a = server
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    let b = server
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    // `b`'s answer waits for `a`'s, on the thread that gives it
    let b = std::thread::spawn(move || b.respond_from_connection(Response::from_string("b")));
    a.respond_from_connection(Response::from_string("a"))
        .unwrap();
    b.join().unwrap().unwrap();
    let answer = until_closed(s);
    assert!(answer.find("\r\n\r\na").unwrap() < answer.find("\r\n\r\nb").unwrap());
}

#[test]
fn an_answer_whose_write_times_out_ends_its_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = ConnectionConfig {
        write_timeout: Some(Duration::from_millis(300)),
        write_on_connection: true,
        ..ConnectionConfig::default()
    };
    let server =
        std::sync::Arc::new(Server::from_listener_with_config(listener, None, config).unwrap());
    let answering = std::sync::Arc::clone(&server);
    std::thread::spawn(move || {
        while let Ok(rq) = answering.recv() {
            rq.respond_from_connection(Response::from_data(vec![b'x'; BIG]))
                .unwrap();
        }
    });
    // Never reads: the first answer's write times out, and the second request is never read
    // after a partial answer; the connection is closed although the peer keeps its socket.
    let _stalled = never_reads(port, "/big", 2);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.num_connections() == 0 {
        assert!(std::time::Instant::now() < deadline, "never connected");
        std::thread::sleep(Duration::from_millis(5));
    }
    while server.num_connections() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "still open after its write timed out"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
