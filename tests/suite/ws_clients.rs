//! The WebSocket client cap (`CASHCODE_MAX_CLIENTS`): a connection past it completes its
//! handshake, receives a close with code 1013 (Try Again Later) and a reason, and never a
//! `ready`; once a served client leaves, a new one is served again.

use std::net::TcpStream;
use std::time::Duration;

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

use crate::common::ws::{connect_from, ended_by_server, Trickler};
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

/// Handshake threads per peer (`ws::admit::MAX_HANDSHAKES_PER_PEER`) and overall
/// (`MAX_HANDSHAKES`), and connections one peer may have waiting (`MAX_PARKED_PER_PEER`).
const RUNNING_PER_PEER: usize = 16;
const RUNNING: usize = 64;
const PARKED_PER_PEER: usize = 256;
/// `ws::admit::HANDSHAKE_DEADLINE` (counted from when a thread takes the handshake).
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// Slack for a loaded debug build on top of the deadline.
const DEADLINE_SLACK: Duration = Duration::from_secs(3);

/// Refusals before the handshake are bounded and cost nothing: one peer with every handshake
/// thread and parking place it may use gets its next connection closed at once (a 503, no
/// handshake), logged once; the owner on another address still gets the client-cap refusal
/// (1013 after a handshake), and once the peer's sockets go it is handled again.
#[test]
fn past_the_handshake_caps_a_connection_is_closed_at_once_without_a_handshake() {
    let server = TestServer::builder().env("CASHCODE_MAX_CLIENTS", "1").start();
    let mut a = WsClient::connect(&server);
    let idle: Vec<TcpStream> =
        (0..RUNNING_PER_PEER + PARKED_PER_PEER).map(|_| connect_from([127, 0, 0, 2], server.ws_port)).collect();
    let extra = connect_from([127, 0, 0, 2], server.ws_port);
    wait_for("the extra connection closed at once", WAIT, || ended_by_server(&extra).then_some(()));
    wait_for("the refusal logged", WAIT, || {
        server.log_text().contains("event=ws.handshake.refused reason=busy scope=peer peer=127.0.0.2").then_some(())
    });
    let refused = (1013, "too many clients, try again later".to_string());
    assert_eq!(attempt(server.ws_port).err(), Some(refused.clone()), "another peer is handled at once");
    drop(idle);
    // Until the server has seen the idle sockets go, 127.0.0.2 may still be refused.
    let code = wait_for("127.0.0.2 handled again", WAIT, || {
        let s = connect_from([127, 0, 0, 2], server.ws_port);
        s.set_read_timeout(Some(Duration::from_millis(500))).expect("read timeout");
        match tungstenite::client(format!("ws://127.0.0.1:{}/", server.ws_port), s) {
            Ok((mut ws, _)) => loop {
                match ws.read() {
                    Ok(Message::Close(Some(f))) => break Some(u16::from(f.code)),
                    Ok(_) => {}
                    Err(e) => panic!("after the handshake, expected the 1013 close: {e}"),
                }
            },
            Err(_) => None,
        }
    });
    assert_eq!(code, 1013);
    a.ping_sync();
}

/// The issue's case: a peer trickling unfinished handshakes (300 from 127.0.0.2, far more than
/// `CASHCODE_MAX_CLIENTS=2`) holds no client slot: the owner connects twice (the whole client
/// budget) and chats while they trickle; a third owner connection gets the 1013 refusal; the
/// peer's connections past its caps were closed at once.
#[test]
fn trickling_handshakes_hold_no_client_slot_and_the_owner_connects_and_chats() {
    let fake = FakeLlm::start();
    let server = TestServer::builder().env("CASHCODE_MAX_CLIENTS", "2").start();
    server.configure_llm(&fake);
    let mut tricklers: Vec<Trickler> = (0..300).map(|_| Trickler::open([127, 0, 0, 2], server.ws_port)).collect();
    let over = 300 - RUNNING_PER_PEER - PARKED_PER_PEER;
    wait_for("the connections past the caps closed", WAIT, || {
        let ended = tricklers.iter().filter(|t| ended_by_server(&t.stream)).count();
        (ended >= over).then_some(())
    });
    let mut a = WsClient::connect(&server);
    let mut b = WsClient::connect(&server);
    let chat = a.new_chat();
    fake.push(Reply::text(&["hello ", "owner"]));
    a.message(&chat, "hi", "openai_compatible");
    let events = a.turn_events(&chat);
    assert_eq!(events.last().map(|v| v["event"].clone()), Some(serde_json::json!("done")), "{events:#?}");
    b.ping_sync();
    let refused = (1013, "too many clients, try again later".to_string());
    assert_eq!(attempt(server.ws_port).err(), Some(refused), "the two owner clients are the whole budget");
    let open = tricklers.iter_mut().map(Trickler::drip).filter(|open| *open).count();
    println!("{open} of 300 tricklers still open, the owner connected and chatted");
}

/// The probe that locked the owner out (3 of 45 connects served): tricklers from 127.0.0.2 to
/// 127.0.0.7 (all loopback) take every handshake thread and fill the waiting room (1,024, 256 an
/// address). The owner's connects from 127.0.0.1 each take the place of a parked trickler of
/// the busiest address, and are served as the first threads free (at the handshake deadline).
#[test]
fn tricklers_from_six_loopback_addresses_never_lock_the_owner_out() {
    let server = TestServer::builder().start();
    let tricklers: Vec<Trickler> =
        (0..6 * 200).map(|i| Trickler::open([127, 0, 0, 2 + (i % 6) as u8], server.ws_port)).collect();
    let over = 6 * 200 - RUNNING - 1024;
    wait_for("the connections past the caps closed", WAIT, || {
        let ended = tricklers.iter().filter(|t| ended_by_server(&t.stream)).count();
        (ended >= over).then_some(())
    });
    let started = std::time::Instant::now();
    let mut owner = WsClient::connect(&server);
    let waited = started.elapsed();
    owner.ping_sync();
    assert!(waited <= HANDSHAKE_DEADLINE + DEADLINE_SLACK, "the owner waited {waited:?}");
    let mut second = WsClient::connect(&server);
    second.ping_sync();
    let open = tricklers.iter().filter(|t| !ended_by_server(&t.stream)).count();
    println!("owner behind 1,200 tricklers from 6 addresses: served after {waited:?}; {open} tricklers open");
}

/// One deadline for the whole handshake: 64 peers' worth of tricklers (16 from each of four
/// addresses) fill every handshake thread while sending a 130-byte header line each second, so
/// no per-read timeout ever fires; each is dropped at the deadline after it connected. The
/// owner, connecting meanwhile, waits parked (no thread, no refusal) and is served as soon as
/// threads free up.
#[test]
fn a_trickling_handshake_is_dropped_at_the_deadline_and_a_parked_owner_is_then_served() {
    let server = TestServer::builder().env("CASHCODE_MAX_CLIENTS", "2").start();
    let mut tricklers: Vec<Trickler> =
        (0..RUNNING).map(|i| Trickler::open([127, 0, 0, 2 + (i / RUNNING_PER_PEER) as u8], server.ws_port)).collect();
    let dripper = std::thread::spawn(move || {
        let until = Deadline::after(HANDSHAKE_DEADLINE + WAIT);
        while tricklers.iter_mut().map(|t| t.drip()).fold(false, |open, o| open | o) && !until.passed() {
            std::thread::sleep(Duration::from_secs(1));
        }
        tricklers
    });
    let started = std::time::Instant::now();
    let mut owner = WsClient::connect(&server);
    let waited = started.elapsed();
    owner.ping_sync();
    let tricklers = dripper.join().expect("dripper");
    for t in &tricklers {
        let ended = t.ended.expect("every trickler is ended by the server");
        assert!(ended <= HANDSHAKE_DEADLINE + DEADLINE_SLACK, "a trickler lasted {ended:?}");
    }
    println!("owner parked behind {RUNNING} tricklers waited {waited:?}");
    wait_for("the tricklers' ends logged", WAIT, || {
        server.log_text().contains("handshake deadline passed").then_some(())
    });
}

/// The issue's figure case, all from one address: 40 tricklers with `CASHCODE_MAX_CLIENTS=40`
/// (before: they held all 40 client slots and the owner got 1013 for as long as they
/// trickled). Now they hold 16 handshake threads and 24 parking places and no client slot; the
/// owner, on the same address, sends its head at once, so the first handshake thread to free
/// up (at the deadline of a trickler) takes it ahead of the 24 parked tricklers.
#[test]
fn an_owner_on_the_tricklers_address_is_served_when_the_first_handshake_thread_frees() {
    let server = TestServer::builder().env("CASHCODE_MAX_CLIENTS", "40").start();
    let mut tricklers: Vec<Trickler> = (0..40).map(|_| Trickler::open([127, 0, 0, 2], server.ws_port)).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = std::sync::Arc::clone(&stop);
    let dripper = std::thread::spawn(move || {
        let until = Deadline::after(3 * HANDSHAKE_DEADLINE + WAIT);
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) && !until.passed() {
            for t in &mut tricklers {
                t.drip();
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let started = std::time::Instant::now();
    let stream = connect_from([127, 0, 0, 2], server.ws_port);
    stream.set_read_timeout(Some(WAIT)).expect("read timeout");
    let (mut ws, _) = tungstenite::client(format!("ws://127.0.0.1:{}/", server.ws_port), stream)
        .expect("the owner's handshake completes");
    let first = ws.read().expect("the first frame");
    let waited = started.elapsed();
    let v: serde_json::Value = serde_json::from_str(first.to_text().expect("text")).expect("JSON");
    assert_eq!(v["event"], "ready", "{v}");
    assert!(waited <= HANDSHAKE_DEADLINE + DEADLINE_SLACK, "the owner waited {waited:?}");
    println!("owner on the address of 40 tricklers (MAX_CLIENTS=40) served after {waited:?}");
    ws.get_ref().set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
    ping(&mut ws);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    dripper.join().expect("dripper");
}

/// Under a descriptor limit far below what a flood needs (`prlimit` on the running server), a
/// flood of unfinished handshakes makes `accept` fail with EMFILE; the listener logs, pauses and
/// retries, and once the flood is released a client is served again within seconds.
#[test]
fn a_handshake_flood_under_a_small_descriptor_limit_leaves_the_listener_accepting() {
    let server = TestServer::builder().start();
    let mut a = WsClient::connect(&server);
    let open = std::fs::read_dir(format!("/proc/{}/fd", server.pid)).expect("/proc/<pid>/fd").count();
    let limit = open + 12;
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &server.pid.to_string(), &format!("--nofile={limit}:{limit}")])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit --pid {} --nofile={limit}", server.pid);
    let flood: Vec<TcpStream> = (0..100).map(|_| connect_from([127, 0, 0, 1], server.ws_port)).collect();
    wait_for("accept failing with EMFILE", WAIT, || {
        let log = server.log_text();
        (log.contains("event=ws.accept.failed") && log.contains("os error 24")).then_some(())
    });
    a.ping_sync();
    drop(flood);
    let started = std::time::Instant::now();
    let mut b = wait_for("a client served again", WAIT, || match try_attempt(server.ws_port) {
        Some(Ok(ws)) => Some(ws),
        _ => None,
    });
    println!("served again {:?} after the flood was released", started.elapsed());
    ping(&mut b);
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
