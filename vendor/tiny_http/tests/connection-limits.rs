//! (cashcode patch) The limits of `ConnectionConfig`: connections over `max_connections` are
//! answered 503 and closed by the accept thread, a place frees when its connection closes,
//! and a head must arrive whole within `head_timeout` however its bytes are spread.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tiny_http::{ConnectionConfig, Response, Server};

fn server(config: ConnectionConfig) -> (Server, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (
        Server::from_listener_with_config(listener, None, config).unwrap(),
        port,
    )
}

/// What the server sends until it closes (a reset counts as the close).
fn until_closed(mut s: TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
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

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "{}", what);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn connections_over_the_limit_get_503_and_a_freed_place_is_taken_again() {
    let (server, port) = server(ConnectionConfig {
        max_connections: Some(3),
        ..ConnectionConfig::default()
    });
    let held: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    wait_until("three connections counted", || {
        server.num_connections() == 3
    });

    for _ in 0..5 {
        let extra = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let answer = until_closed(extra);
        assert!(
            answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{:?}",
            answer
        );
        assert!(answer.contains("\r\nConnection: close\r\n"), "{:?}", answer);
    }
    assert_eq!(server.num_connections(), 3);

    drop(held);
    wait_until("closed connections freed their places", || {
        server.num_connections() == 0
    });
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        client,
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let rq = server
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .expect("a request once places are free");
    rq.respond(Response::from_string("hello")).unwrap();
    assert!(until_closed(client).ends_with("hello"));
}

#[test]
fn a_trickled_head_is_cut_at_the_head_deadline() {
    let head_timeout = Duration::from_millis(600);
    let (server, port) = server(ConnectionConfig {
        read_timeout: Some(Duration::from_secs(5)),
        head_timeout: Some(head_timeout),
        ..ConnectionConfig::default()
    });
    let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut writer = client.try_clone().unwrap();
    let started = Instant::now();
    let trickle = std::thread::spawn(move || {
        // Each byte well within the 5 s read timeout; the head would take 10 s in all.
        for b in b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n" {
            if writer.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let answer = until_closed(client);
    let took = started.elapsed();
    assert_eq!(answer, "", "a head cut at its deadline gets no answer");
    assert!(took >= head_timeout, "cut after {:?}", took);
    assert!(took < Duration::from_secs(4), "held for {:?}", took);
    assert!(
        server.try_recv().unwrap().is_none(),
        "a request came through"
    );
    let _ = trickle.join();
    wait_until("the place is freed", || server.num_connections() == 0);
}

#[test]
fn the_head_deadline_restarts_for_each_request_and_spares_the_body() {
    let head_timeout = Duration::from_millis(500);
    let (server, port) = server(ConnectionConfig {
        read_timeout: Some(Duration::from_secs(5)),
        head_timeout: Some(head_timeout),
        ..ConnectionConfig::default()
    });
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // A 2 KiB body (read by the application, not with the head) sent slower than the head
    // deadline, then a second request on the same connection.
    write!(
        client,
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2048\r\n\r\n"
    )
    .unwrap();
    let mut rq = server
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    let mut writer = client.try_clone().unwrap();
    let body = std::thread::spawn(move || {
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(300));
            writer.write_all(&[b'x'; 512]).unwrap();
        }
    });
    let mut got = Vec::new();
    rq.as_reader().read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), 2048);
    body.join().unwrap();
    rq.respond(Response::from_string("one")).unwrap();
    write!(
        client,
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let rq = server
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .expect("the second head, sent at once, is read");
    rq.respond(Response::from_string("two")).unwrap();
    let answer = until_closed(client);
    assert!(answer.ends_with("two"), "{:?}", answer);
}
