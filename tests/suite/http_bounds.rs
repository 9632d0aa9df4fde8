//! Bounded HTTP requests before any check: request heads (64 KiB, 100 fields -> 431, read
//! with bounded memory, cut when they stall), a deadline for each whole body, per-peer body readers, and refusals
//! that end the connection instead of draining it. Raw sockets on the test thread and on
//! writer threads; peers other than 127.0.0.1 are other loopback addresses (127.0.0.2).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::server::HttpResp;
use crate::common::stats::rss;
use crate::common::{health_within, http_agent, until_closed, TestServer};

/// The limits the server promises (README, vendor/tiny_http/PATCHES.md).
const MAX_HEAD: usize = 64 * 1024;
const MAX_FIELDS: usize = 100;
const PER_PEER: usize = 6;

/// How soon an answer that does not wait on anything must come (debug build, busy box).
const PROMPT: Duration = Duration::from_secs(5);

fn connect(server: &TestServer) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", server.http_port)).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// A connection to the server from another loopback address, so the server sees another peer.
fn connect_from(server: &TestServer, ip: Ipv4Addr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let sockaddr = |a: SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
        sin_zero: [0; 8],
    };
    let local = sockaddr(SocketAddrV4::new(ip, 0));
    let remote = sockaddr(SocketAddrV4::new(Ipv4Addr::LOCALHOST, server.http_port));
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket syscalls on a descriptor this function owns until TcpStream does.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        assert_eq!(libc::bind(fd, &local as *const _ as *const libc::sockaddr, len), 0, "bind {ip}");
        assert_eq!(libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len), 0, "connect from {ip}");
        stream.set_nodelay(true).expect("nodelay");
        stream
    }
}

/// Writes `bytes` on a thread (they may not fit the socket buffers), ignoring a server that
/// closes before taking them all; returns how many were written.
fn write_in_background(s: &TcpStream, bytes: Vec<u8>) -> std::thread::JoinHandle<usize> {
    let mut w = s.try_clone().expect("clone");
    std::thread::spawn(move || {
        let mut sent = 0;
        for piece in bytes.chunks(64 * 1024) {
            if w.write_all(piece).is_err() {
                break;
            }
            sent += piece.len();
        }
        sent
    })
}

fn status_line(answer: &str) -> &str {
    answer.lines().next().unwrap_or("")
}

fn has_header(answer: &str, line: &str) -> bool {
    let head = answer.split("\r\n\r\n").next().unwrap_or("");
    head.lines().any(|l| l.eq_ignore_ascii_case(line))
}

/// The JSON body of a raw answer.
fn body_json(answer: &str) -> serde_json::Value {
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer:?}"))
}

/// A GET of /api/health (the connection's last) whose head is exactly `len` bytes, CRLFs
/// included, padded in one header.
fn head_of(port: u16, len: usize) -> Vec<u8> {
    let head = |pad: &str| {
        format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nX-Pad: {pad}\r\n\r\n")
    };
    head(&"a".repeat(len - head("").len())).into_bytes()
}

/// A GET of /api/health (the connection's last) with `n` header fields in all.
fn fields(port: u16, n: usize) -> Vec<u8> {
    let extra: String = (2..n).map(|i| format!("X-Field-{i}: {i}\r\n")).collect();
    format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}Connection: close\r\n\r\n").into_bytes()
}

#[test]
fn a_head_over_64_kib_is_431_and_ends_the_connection() {
    let server = TestServer::start();
    let port = server.http_port;

    // Exactly the limit is a request like any other.
    let s = connect(&server);
    let writer = write_in_background(&s, head_of(port, MAX_HEAD));
    let answer = until_closed(s, PROMPT);
    assert_eq!(status_line(&answer), "HTTP/1.1 200 OK", "{answer:.200}");
    assert_eq!(writer.join().expect("writer"), MAX_HEAD);

    // A 70 KiB header line: 431, `Connection: close`, and the connection really ends.
    let s = connect(&server);
    let _writer = write_in_background(&s, head_of(port, 70 * 1024));
    let answer = until_closed(s, PROMPT);
    assert_eq!(status_line(&answer), "HTTP/1.1 431 Request Header Fields Too Large", "{answer:.200}");
    assert!(has_header(&answer, "Connection: close"), "{answer}");

    assert_eq!(health_within(&server, PROMPT), Some(200));
}

#[test]
fn more_than_100_header_fields_is_431_and_100_small_ones_are_fine() {
    let server = TestServer::start();
    let port = server.http_port;

    let s = connect(&server);
    let _w = write_in_background(&s, fields(port, MAX_FIELDS));
    let answer = until_closed(s, PROMPT);
    assert_eq!(status_line(&answer), "HTTP/1.1 200 OK", "{answer:.300}");
    assert_eq!(body_json(&answer), json!({"status": "ok", "service": "cashcode"}), "{answer}");

    let s = connect(&server);
    let _w = write_in_background(&s, fields(port, MAX_FIELDS + 1));
    let answer = until_closed(s, PROMPT);
    assert_eq!(status_line(&answer), "HTTP/1.1 431 Request Header Fields Too Large", "{answer:.300}");

    assert_eq!(health_within(&server, PROMPT), Some(200));
}

#[test]
fn a_streamed_header_line_is_cut_early_with_memory_bounded() {
    // One connection streams a header line of 64 MiB (CASHCODE_TEST_HEAD_MIB to measure other
    // sizes) without a CRLF. The server stops reading at 64 KiB: the writer is cut off after
    // what the socket buffers hold, and the server's peak RSS grows by a fraction of what was
    // sent (unpatched tiny_http buffered all of it).
    let mib: usize = std::env::var("CASHCODE_TEST_HEAD_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let stream = mib * 1024 * 1024;
    let server = TestServer::start();
    assert_eq!(health_within(&server, PROMPT), Some(200));
    let (rss_before, peak_before) = rss(server.pid);
    assert!(peak_before > 0, "no VmHWM for pid {}", server.pid);

    let s = connect(&server);
    let mut line = format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nX-Long: ", server.http_port).into_bytes();
    line.resize(stream, b'a');
    let writer = write_in_background(&s, line);
    let started = Instant::now();
    let sent = writer.join().expect("writer");
    let took = started.elapsed();
    let (rss_during, peak_after) = rss(server.pid);
    drop(s);

    let grew_kib = peak_after.saturating_sub(peak_before);
    eprintln!(
        "streamed header line: {sent} of {stream} bytes accepted in {took:?}; RSS {rss_before} KiB before, {rss_during} KiB after the stream; peak {peak_before} -> {peak_after} KiB"
    );
    assert!(sent < stream / 4, "the server kept reading the header line: {sent} bytes accepted");
    assert!(grew_kib < 8 * 1024, "peak RSS grew by {grew_kib} KiB while a header line streamed");
    assert_eq!(health_within(&server, PROMPT), Some(200));
}

/// The head of a PATCH that announces `len` body bytes.
fn patch_head(port: u16, len: usize) -> String {
    format!(
        "PATCH /api/sessions/nope HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
}

#[test]
fn a_stalled_head_is_cut_at_the_socket_timeout() {
    // tiny_http gives each accepted connection the server's 15 s read timeout and 10 s for a
    // whole head (vendor/tiny_http/PATCHES.md); a head that stops arriving ends there.
    let server = TestServer::start();
    let mut stalled = connect(&server);
    stalled.write_all(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n").expect("write half a head");
    stalled.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let n = stalled.read(&mut buf).unwrap_or(0);
    let waited = started.elapsed();
    assert_eq!(n, 0, "the server answered half a request head");
    assert!(waited < Duration::from_secs(25), "a stalled connection was held for {waited:?}");
    assert_eq!(health_within(&server, PROMPT), Some(200));
    assert!(!server.log_text().contains("Error accepting"), "tiny_http's accept thread failed");
}

#[test]
fn a_trickled_body_is_cut_at_the_body_deadline() {
    // Each byte comes well within the 15 s socket timeout; the whole body never would.
    let server = TestServer::builder().env("CASHCODE_HTTP_BODY_TIMEOUT", "1").start();
    let mut s = connect(&server);
    s.write_all(patch_head(server.http_port, 100_000).as_bytes()).expect("head");
    let mut w = s.try_clone().expect("clone");
    let trickle = std::thread::spawn(move || {
        // Pacing the upload, not waiting for the server: one byte every 50 ms until cut off.
        let mut sent = 0usize;
        while sent < 100_000 && w.write_all(b" ").is_ok() {
            sent += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        sent
    });
    let started = Instant::now();
    let answer = until_closed(s, Duration::from_secs(10));
    let took = started.elapsed();
    assert_eq!(status_line(&answer), "HTTP/1.1 408 Request Timeout", "{answer}");
    assert!(has_header(&answer, "Connection: close"), "{answer}");
    assert_eq!(body_json(&answer), json!({"detail": "the request body did not arrive in time"}), "{answer}");
    assert!(took < Duration::from_secs(5), "cut after {took:?}, the deadline is 1 s");
    let sent = trickle.join().expect("trickle");
    assert!(sent < 1_000, "the trickle went on after the cut: {sent} bytes");
    assert_eq!(health_within(&server, PROMPT), Some(200));
}

#[test]
fn trickling_uploads_from_one_peer_do_not_hold_up_another() {
    let server = TestServer::start();
    let port = server.http_port;
    let other = Ipv4Addr::new(127, 0, 0, 2);
    // One more stalled upload than a peer may have: each announces 100 KB and sends a little.
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut stalled = Vec::new();
    for i in 0..=PER_PEER {
        let mut s = connect_from(&server, other);
        s.write_all(format!("{}{{\"ti", patch_head(port, 100_000)).as_bytes()).expect("stalled upload");
        let mut r = s.try_clone().expect("clone");
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let n = r.read(&mut buf).unwrap_or(0);
            let _ = tx.send((i, String::from_utf8_lossy(&buf[..n]).into_owned()));
        });
        stalled.push(s);
    }
    // Exactly one of them is refused at once, whichever the server saw last.
    let (_, refused) = rx.recv_timeout(PROMPT).expect("the upload over the per-peer limit was not refused");
    assert_eq!(status_line(&refused), "HTTP/1.1 429 Too Many Requests", "{refused}");
    assert!(has_header(&refused, "Connection: close"), "{refused}");

    // Another peer's request with a body (over the 1 KiB that tiny_http reads itself) and a
    // request without one are answered promptly.
    let title = "t".repeat(2000);
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let base = server.http_base();
    std::thread::spawn(move || {
        let agent = http_agent(Duration::from_secs(30));
        let r = agent
            .patch(format!("{base}/api/sessions/nope"))
            .header("Content-Type", "application/json")
            .send(json!({ "title": title }).to_string())
            .map(|mut r| (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default()));
        let _ = done_tx.send(r.map_err(|e| e.to_string()));
    });
    let got = done_rx.recv_timeout(PROMPT).expect("a body from another peer waited behind the trickling uploads");
    let (status, body) = got.expect("transport");
    HttpResp { status, headers: Vec::new(), body }.expect(404, json!({"detail": "session not found"}));
    assert_eq!(health_within(&server, PROMPT), Some(200));
    assert!(rx.try_recv().is_err(), "a stalled upload within the limit was answered early");
    drop(stalled);
}

#[test]
fn a_huge_content_length_is_refused_without_reading_and_the_server_lives() {
    // Unpatched tiny_http drained the unread body into one buffer of the announced size on
    // drop: this request aborted the server.
    let server = TestServer::start();
    let mut s = connect(&server);
    s.write_all(patch_head(server.http_port, 1 << 60).as_bytes()).expect("head");
    s.write_all(b"{\"title\": \"x\"}").expect("some body");
    let answer = until_closed(s, PROMPT);
    assert_eq!(status_line(&answer), "HTTP/1.1 413 Payload Too Large", "{answer}");
    assert!(has_header(&answer, "Connection: close"), "{answer}");
    assert_eq!(health_within(&server, PROMPT), Some(200));
}

#[test]
fn a_chunked_body_is_data_and_one_over_the_cap_is_refused_unread() {
    let server = TestServer::start();
    let port = server.http_port;
    // What a chunked body carries, here a whole request, is the body, never the next request.
    let smuggled = format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let mut s = connect(&server);
    let request = format!(
        "POST /api/skills HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         {:x}\r\n{smuggled}\r\n0\r\n\r\n",
        smuggled.len()
    );
    s.write_all(request.as_bytes()).expect("request");
    let answer = until_closed(s, PROMPT);
    assert_eq!(status_line(&answer), "HTTP/1.1 422 Unprocessable Entity", "the body was read as JSON: {answer}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "a second answer came on the connection: {answer}");

    // Past 12 MiB of payload: 413, the connection closes, and the rest is not parsed.
    let mut s = connect(&server);
    let head = format!("POST /api/skills HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n\r\n");
    s.write_all(head.as_bytes()).expect("head");
    let piece = vec![b' '; 1 << 20];
    let writer = {
        let mut s = s.try_clone().expect("clone");
        std::thread::spawn(move || {
            for _ in 0..13 {
                let chunk = [format!("{:x}\r\n", piece.len()).into_bytes(), piece.clone(), b"\r\n".to_vec()].concat();
                if s.write_all(&chunk).is_err() {
                    return;
                }
            }
            let _ = s.write_all(format!("0\r\n\r\n{smuggled}").as_bytes());
        })
    };
    let answer = until_closed(s, PROMPT);
    let _ = writer.join();
    assert_eq!(status_line(&answer), "HTTP/1.1 413 Payload Too Large", "{answer}");
    assert!(has_header(&answer, "Connection: close"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "a second answer came on the connection: {answer}");
    assert_eq!(health_within(&server, PROMPT), Some(200));
}
