//! The WebSocket client cap (`CASHCODE_MAX_CLIENTS`): a connection past it completes its
//! handshake, receives a close with code 1013 (Try Again Later) and a reason, and never a
//! `ready`; once a served client leaves, a new one is served again.

use std::net::TcpStream;
use std::time::Duration;

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

use crate::common::*;

type Socket = tungstenite::WebSocket<TcpStream>;

/// Connects, completes the handshake (a failed handshake fails the test) and returns the
/// socket once the first frame is `ready`, or the code and reason of a close that came first.
fn attempt(port: u16) -> Result<Socket, (u16, String)> {
    try_attempt(port).expect("handshake completes")
}

/// [`attempt`], with `None` when the server dropped the connection before the handshake.
fn try_attempt(port: u16) -> Option<Result<Socket, (u16, String)>> {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the ws port");
    stream.set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
    let (mut ws, resp) = tungstenite::client(format!("ws://127.0.0.1:{port}/"), stream).ok()?;
    assert_eq!(resp.status().as_u16(), 101);
    let deadline = Deadline::after(WAIT);
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON text");
                assert_eq!(v["event"], "ready", "first frame {v}");
                return Some(Ok(ws));
            }
            Ok(Message::Close(Some(f))) => return Some(Err((u16::from(f.code), f.reason.to_string()))),
            Ok(Message::Close(None)) => return Some(Err((0, String::new()))),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("ws read failed before a ready or a close: {e}"),
        }
        assert!(!deadline.passed(), "neither ready nor a close within {WAIT:?}");
    }
}

/// A JSON ping on a served socket is answered with `pong`.
fn ping(ws: &mut Socket) {
    ws.send(Message::text(r#"{"type":"ping"}"#)).expect("send ping");
    let deadline = Deadline::after(WAIT);
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                assert_eq!(t.as_str(), r#"{"event":"pong"}"#);
                return;
            }
            Ok(Message::Close(c)) => panic!("served socket closed: {c:?}"),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("ws read failed: {e}"),
        }
        assert!(!deadline.passed(), "no pong within {WAIT:?}");
    }
}

#[test]
fn past_the_cap_the_handshake_completes_and_closes_with_1013_until_a_client_leaves() {
    let server = TestServer::builder().env("CASHCODE_MAX_CLIENTS", "2").start();
    let refused = (1013, "too many clients, try again later".to_string());
    assert_eq!(u16::from(CloseCode::Again), 1013);
    let mut a = WsClient::connect(&server);
    let b = WsClient::connect(&server);
    assert_eq!(attempt(server.ws_port).err(), Some(refused.clone()));
    assert_eq!(attempt(server.ws_port).err(), Some(refused.clone()), "a refusal takes no slot and frees none");
    a.ping_sync();

    b.drop_socket();
    // The server notices the drop on b's reader thread; until then a newcomer may still be
    // refused, and each refusal must be the 1013 close.
    let mut c = wait_for("a new client to be served after one left", WAIT, || match attempt(server.ws_port) {
        Ok(ws) => Some(ws),
        Err(closed) => {
            assert_eq!(closed, refused);
            None
        }
    });
    ping(&mut c);
    assert_eq!(attempt(server.ws_port).err(), Some(refused), "a and c fill the cap again");
    a.ping_sync();
    wait_for("the refusal logged", WAIT, || {
        server.log_text().contains("event=ws.client.refused reason=max_clients max=2").then_some(())
    });
}

/// Refusals are bounded too: while 64 connections over the cap sit in their handshake, one
/// more is dropped without a handshake; once they go, refusals are the 1013 close again.
#[test]
fn refusals_in_flight_are_capped_so_a_flood_costs_no_more_threads() {
    let server = TestServer::builder().env("CASHCODE_MAX_CLIENTS", "1").start();
    let mut a = WsClient::connect(&server);
    // Connected, silent: each holds a refusal slot until its handshake times out (10 s).
    let idle: Vec<TcpStream> =
        (0..64).map(|_| TcpStream::connect(("127.0.0.1", server.ws_port)).expect("connect")).collect();
    let stream = TcpStream::connect(("127.0.0.1", server.ws_port)).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("read timeout");
    let dropped = tungstenite::client(format!("ws://127.0.0.1:{}/", server.ws_port), stream);
    assert!(dropped.is_err(), "the 65th refusal in flight must be dropped before the handshake");
    wait_for("the drop logged", WAIT, || {
        server.log_text().contains("event=ws.client.dropped reason=max_clients").then_some(())
    });
    drop(idle);
    let refused = (1013, "too many clients, try again later".to_string());
    // Until the server has seen the idle sockets go, a newcomer may still be dropped.
    wait_for("refusal slots freed", WAIT, || match try_attempt(server.ws_port) {
        None => None,
        Some(Ok(_)) => panic!("served past a cap of 1"),
        Some(Err(closed)) if closed == refused => Some(()),
        Some(Err(other)) => panic!("unexpected close {other:?}"),
    });
    a.ping_sync();
}

/// Keepalive (`CASHCODE_WS_PING_SECS=1`): a client that answers pings (tungstenite answers
/// while it reads) is pinged each quiet second and stays; one that stops reading is dropped
/// after two silent intervals, with a log line saying so.
#[test]
fn quiet_clients_are_pinged_and_silent_ones_dropped() {
    let server = TestServer::builder().env("CASHCODE_WS_PING_SECS", "1").start();
    let mut live = attempt(server.ws_port).expect("served");
    let mut silent = attempt(server.ws_port).expect("served");
    let started = std::time::Instant::now();
    let mut pings = 0;
    while started.elapsed() < Duration::from_millis(3_500) {
        match live.read() {
            Ok(Message::Ping(_)) => pings += 1,
            Ok(other) => panic!("unexpected frame {other:?}"),
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("the answering client was dropped: {e}"),
        }
    }
    assert!(pings >= 2, "{pings} pings in 3.5 quiet seconds");
    // Still served: a frame gets its answer.
    ping(&mut live);
    // The one that never read (so never answered) was dropped: its pings, then the end.
    let deadline = Deadline::after(Duration::from_secs(5));
    let mut silent_pings = 0;
    let ended = loop {
        match silent.read() {
            Ok(Message::Ping(_)) => silent_pings += 1,
            Ok(Message::Close(_)) => {}
            Ok(other) => panic!("unexpected frame {other:?}"),
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                assert!(!deadline.passed(), "the silent client is still connected");
            }
            Err(_) => break true,
        }
    };
    assert!(ended && silent_pings >= 1, "pings before the drop: {silent_pings}");
    assert!(server.log_text().contains("event=ws.client.timeout"), "no timeout logged");
    // Pings and replies went straight to the sockets: no writer thread was needed.
    assert!(!server.log_text().contains("event=ws.writer.started"), "a writer thread started");
}

/// A frame that arrives in pieces across the reader's ping timeout (`CASHCODE_WS_PING_SECS=1`,
/// 1.5 s between the pieces): the partial frame survives the timeout and is answered whole.
#[test]
fn a_frame_split_across_the_ping_timeout_is_read_whole() {
    use std::io::Write;
    let server = TestServer::builder().env("CASHCODE_WS_PING_SECS", "1").start();
    let mut ws = attempt(server.ws_port).expect("served");
    let payload = br#"{"type":"ping"}"#;
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    ws.get_mut().write_all(&frame[..7]).expect("first piece");
    std::thread::sleep(Duration::from_millis(1_500));
    ws.get_mut().write_all(&frame[7..]).expect("the rest");
    let deadline = Deadline::after(WAIT);
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                assert_eq!(t.as_str(), r#"{"event":"pong"}"#);
                break;
            }
            Ok(Message::Ping(_)) => {}
            Ok(other) => panic!("unexpected frame {other:?}"),
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("the connection broke: {e}"),
        }
        assert!(!deadline.passed(), "no pong for the split frame");
    }
}
