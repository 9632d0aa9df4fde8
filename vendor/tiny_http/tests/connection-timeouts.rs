//! (cashcode patch) `Server::from_listener_with_config` puts its timeouts on each accepted
//! connection and none on the listener.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use tiny_http::{ConnectionConfig, Response, Server};

const TIMEOUT: Duration = Duration::from_millis(300);

fn server() -> (Server, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = ConnectionConfig {
        read_timeout: Some(TIMEOUT),
        write_timeout: Some(TIMEOUT),
        ..ConnectionConfig::default()
    };
    (
        Server::from_listener_with_config(listener, None, config).unwrap(),
        port,
    )
}

#[test]
fn a_stalled_head_is_closed_at_the_read_timeout() {
    let (_server, port) = server();
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(client, "GET / HTTP/1.1\r\nHost: localhost\r\n").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let n = client.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the server answered half a request head");
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "a stalled head was held for {:?}",
        waited
    );
}

#[test]
fn a_quiet_spell_longer_than_the_timeouts_does_not_stop_accepting() {
    let (server, port) = server();
    thread::sleep(TIMEOUT * 3);
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        client,
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let rq = server
        .recv_timeout(Duration::from_secs(5))
        .expect("the accept thread is still running")
        .expect("the request arrived");
    rq.respond(Response::from_string("hello")).unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{}", answer);
    assert!(answer.ends_with("hello"), "{}", answer);
}

#[test]
fn a_zero_timeout_is_refused() {
    for config in [
        ConnectionConfig {
            read_timeout: Some(Duration::ZERO),
            ..ConnectionConfig::default()
        },
        ConnectionConfig {
            write_timeout: Some(Duration::ZERO),
            ..ConnectionConfig::default()
        },
        ConnectionConfig {
            head_timeout: Some(Duration::ZERO),
            ..ConnectionConfig::default()
        },
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(Server::from_listener_with_config(listener, None, config).is_err());
    }
}
