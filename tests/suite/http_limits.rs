//! The HTTP listener stays up under exhaustion, and the head is checked before the body: the
//! real binary under a small open-files limit (as `prlimit --nofile=256:256` sets it) and in
//! a `pids` cgroup with room for a few threads, flooded with idle sockets from many loopback
//! addresses, then released: `/api/health` must answer again within seconds. In token mode,
//! requests without the token are answered 401 from their head, before a body reader is
//! taken, before `100 Continue`, before any body byte is read. Raw sockets on the test thread;
//! other peers are other loopback addresses (127.0.0.2 and up).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{health_within, until_closed, wait_for, Deadline, TestServer};

/// How soon an answer that waits on nothing must come (debug build, busy box).
const PROMPT: Duration = Duration::from_secs(5);
/// How soon after a flood is released `/api/health` must answer again.
const BACK_WITHIN: Duration = Duration::from_secs(5);
/// The server's whole-head deadline (src/http/mod.rs `HEAD_TIMEOUT`).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const TOKEN: &str = "limits-test-token-0123456789";

/// A connection to the server's `port` from the loopback address `ip`, so the server sees
/// another peer.
pub(crate) fn connect_from(port: u16, ip: Ipv4Addr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.bind(&SocketAddr::from((ip, 0)).into()).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
    s.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into()).unwrap_or_else(|e| panic!("connect from {ip}: {e}"));
    let s: TcpStream = s.into();
    s.set_nodelay(true).expect("nodelay");
    s
}

/// Whether the server has closed `s` (after an answer or without one); `false` while it is
/// open with nothing more to read.
pub(crate) fn closed_by_server(s: &TcpStream) -> bool {
    s.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 512];
    let mut r = s;
    loop {
        match r.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

/// Opens `n` idle connections spread over `peers` loopback addresses (127.0.0.2 on), then
/// waits until all but `admitted` of them have been closed by the server; returns the ones
/// still open. Panics if more or fewer stay open once the refusals are done.
fn flood_idle(port: u16, n: usize, peers: u8, admitted: usize) -> Vec<TcpStream> {
    let socks: Vec<TcpStream> =
        (0..n).map(|i| connect_from(port, Ipv4Addr::new(127, 0, 0, 2 + (i % peers as usize) as u8))).collect();
    let mut open: Vec<TcpStream> = Vec::new();
    let mut pending = socks;
    let deadline = Deadline::after(PROMPT);
    loop {
        pending.retain(|s| !closed_by_server(s));
        if pending.len() <= admitted || deadline.passed() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    open.append(&mut pending);
    assert_eq!(open.len(), admitted, "connections the server kept open out of {n}");
    open
}

/// Polls `/api/health` until it answers 200; the time that took.
fn health_back(server: &TestServer) -> Duration {
    let started = Instant::now();
    wait_for("/api/health answering 200 again", BACK_WITHIN, || {
        (health_within(server, PROMPT) == Some(200)).then_some(())
    });
    started.elapsed()
}

#[test]
fn under_256_descriptors_a_flood_meets_the_lowered_cap_and_health_returns_after_release() {
    let server = TestServer::builder().nofile(256, 256).start();
    // 256 descriptors: 128 kept back, a quarter of the rest for HTTP, a quarter of that per peer.
    let log = server.wait_log("event=http.connection_limits", 1);
    let line = log.lines().find(|l| l.contains("event=http.connection_limits")).expect("the limits line");
    assert!(
        line.contains("max_connections=32 max_per_peer=8")
            && line.contains("nofile_soft=256")
            && line.contains("lowered=true"),
        "{line}"
    );
    assert_eq!(log.matches("event=http.connection_limits").count(), 1, "one line at start-up");

    // 200 idle sockets from 25 addresses (8 each, each address within its own cap): the
    // first 32 are kept, every other one is answered and closed at once.
    let started = Instant::now();
    let held = flood_idle(server.http_port, 200, 25, 32);
    let refused_in = started.elapsed();
    // The cap is full, but the owner (127.0.0.1, no connection yet) is served: its
    // connection takes the place of the oldest idle one of an address holding two, which is
    // shut down; addresses holding one each keep theirs.
    let during = health_within(&server, PROMPT);
    assert_eq!(during, Some(200), "the owner is served while the flood holds the cap");
    let dropped = held.iter().filter(|s| closed_by_server(s)).count();
    assert!((1..=2).contains(&dropped), "the owner's connections displaced {dropped} idle ones");
    drop(held);
    let back = health_back(&server);
    println!(
        "http-limits nofile=256: 200 idle sockets -> 32 held, 168 refused in {refused_in:?}; owner while full: {during:?} ({dropped} idle displaced); back {back:?} after release"
    );
    server.wait_log("event=http.connection.refused", 1);
    assert!(!server.log_text().contains("Error accepting"), "tiny_http's accept thread failed");
}

/// The probe that locked the owner out: idle connections from 127.0.0.2 to 127.0.0.7 fill
/// the HTTP cap (512, 128 a peer); every one of the owner's 64 requests from 127.0.0.1, each
/// on a new connection, is answered 200 while the flood holds (before: 63 of 64 were 503).
#[test]
fn a_flood_from_six_loopback_addresses_never_locks_the_owner_out_of_http() {
    let server = TestServer::builder().env("CASHCODE_TOKEN", TOKEN).start();
    let held = flood_idle(server.http_port, 6 * 128, 6, 512);
    let mut served = 0;
    for _ in 0..64 {
        let mut s = TcpStream::connect(("127.0.0.1", server.http_port)).expect("connect");
        s.set_read_timeout(Some(PROMPT)).expect("timeout");
        let req = format!(
            "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).expect("request");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        served += usize::from(out.starts_with(b"HTTP/1.1 200"));
    }
    assert_eq!(served, 64, "the owner's requests answered 200 while the flood held the cap");
    let open = held.iter().filter(|s| !closed_by_server(s)).count();
    assert!(open >= 512 - 64, "{open} of the flood's connections still open");
    println!("http-limits flood 127.0.0.2-7: owner served {served}/64, flood kept {open}/512");
}

#[test]
fn under_256_descriptors_a_websocket_and_http_flood_leaves_http_serving_after_release() {
    // The WebSocket listener spends descriptors the HTTP caps do not count; whatever it
    // leaves, HTTP accepting goes on (a failed accept is retried) and comes back.
    let server = TestServer::builder().nofile(256, 256).start();
    let ws: Vec<TcpStream> = (0..220).filter_map(|_| TcpStream::connect(("127.0.0.1", server.ws_port)).ok()).collect();
    let http: Vec<TcpStream> =
        (0..100).map(|i| connect_from(server.http_port, Ipv4Addr::new(127, 0, 1, 1 + (i % 50) as u8))).collect();
    // Wait until the server has taken or turned away the HTTP flood (each one either open
    // in a slot or closed): not before, or the release would race the accepts.
    // Wait until the flood has met a limit: out of descriptors (accepts fail and are
    // retried), or the HTTP cap turning the rest away. Not before, or the release would
    // race the accepts.
    wait_for("the flood to meet a limit", PROMPT, || {
        let closed = http.iter().filter(|s| closed_by_server(s)).count();
        (closed >= 100 - 32 || server.log_text().contains("event=http.accept.failed")).then_some(())
    });
    let failed_accepts = server.log_text().matches("event=http.accept.failed").count();
    drop((ws, http));
    let back = health_back(&server);
    println!("http-limits nofile=256: 220 idle WebSocket + 100 idle HTTP sockets; accept failures logged {failed_accepts}; health back {back:?} after release");
    let mut client = crate::common::WsClient::connect(&server);
    let _ = client.new_chat();
}

#[test]
fn the_soft_descriptor_limit_is_raised_toward_the_hard_one() {
    let server = TestServer::builder().nofile(256, 8192).start();
    let log = server.wait_log("event=http.connection_limits", 1);
    let line = log.lines().find(|l| l.contains("event=http.connection_limits")).expect("the limits line");
    assert!(
        line.contains("max_connections=512 max_per_peer=128")
            && line.contains("nofile_soft=8192 nofile_hard=8192")
            && line.contains("lowered=false"),
        "{line}"
    );
    assert_eq!(health_within(&server, PROMPT), Some(200));
}

/// A cgroup-v1 `pids` group of its own, removed on drop (its processes must be gone).
pub(crate) struct PidsCgroup(pub(crate) PathBuf);

impl PidsCgroup {
    /// `None` where no writable `pids` hierarchy is mounted (the test then says so and ends).
    pub(crate) fn create() -> Option<PidsCgroup> {
        let root = PathBuf::from("/sys/fs/cgroup/pids");
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let dir = root.join(format!("cashcode-test-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(PidsCgroup(dir))
    }
    pub(crate) fn write(&self, file: &str, value: &str) {
        std::fs::write(self.0.join(file), value).unwrap_or_else(|e| panic!("write {file} {value}: {e}"));
    }
    pub(crate) fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap_or_default().trim().to_string()
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        for _ in 0..200 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn under_a_thread_limit_connections_without_a_thread_are_dropped_and_health_returns() {
    // RLIMIT_NPROC does not bind root; a pids cgroup limits threads for everyone.
    let Some(group) = PidsCgroup::create() else {
        eprintln!("SKIPPED: no writable pids cgroup (/sys/fs/cgroup/pids) to limit threads in");
        return;
    };
    let mut server = TestServer::start();
    assert_eq!(health_within(&server, PROMPT), Some(200));
    group.write("cgroup.procs", &server.pid.to_string());
    let threads: u64 = group.read("pids.current").parse().expect("pids.current");
    // Room for 4 more threads beyond the idle connection threads the pool keeps.
    group.write("pids.max", &(threads + 4).to_string());

    let flood: Vec<TcpStream> =
        (0..60).map(|_| TcpStream::connect(("127.0.0.1", server.http_port)).expect("connect")).collect();
    let log = server.wait_log("event=http.connection.dropped reason=no_thread", 1);
    let dropped = wait_for("connections without a thread to be closed", PROMPT, || {
        let n = flood.iter().filter(|s| closed_by_server(s)).count();
        (n >= 40).then_some(n)
    });
    assert!(server.alive(), "the server died under the thread limit");
    drop(flood);
    let back = health_back(&server);
    let peak = group.read("pids.peak");
    println!(
        "http-limits pids.max={}: 60 idle sockets, {dropped} closed for want of a thread (peak {peak} tasks); health back {back:?} after release",
        threads + 4
    );
    assert!(log.contains("event=http.connection.dropped"), "{log}");
    assert!(!server.log_text().contains("panicked"), "a thread panicked:\n{}", server.log_text());
    group.write("pids.max", "max");
    server.kill();
}

fn raw(port: u16, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s.write_all(bytes).expect("write");
    s
}

fn upload_head(port: u16, len: usize, extra: &str) -> String {
    format!(
        "PATCH /api/sessions/nope HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n{extra}\r\n"
    )
}

#[test]
fn without_the_token_a_12_mb_upload_is_401_from_its_head() {
    let server = TestServer::builder().env("CASHCODE_TOKEN", TOKEN).start();
    let port = server.http_port;
    // The head alone: the server must not wait for the 12 MB it announces.
    let started = Instant::now();
    let answer = until_closed(raw(port, upload_head(port, 12 * 1024 * 1024, "").as_bytes()), PROMPT);
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{answer}");
    assert!(answer.contains("\r\nConnection: close\r\n"), "{answer}");
    assert!(answer.ends_with(r#"{"detail":"a valid token is required"}"#), "{answer}");

    // `Expect: 100-continue`: the refusal, and never a `100 Continue`.
    let answer = until_closed(raw(port, upload_head(port, 5000, "Expect: 100-continue\r\n").as_bytes()), PROMPT);
    assert!(answer.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    // A foreign Origin is refused from the head the same way (403).
    let answer = until_closed(
        raw(
            port,
            upload_head(
                port,
                5000,
                &format!("Authorization: Bearer {TOKEN}\r\nOrigin: http://evil.example\r\nExpect: 100-continue\r\n"),
            )
            .as_bytes(),
        ),
        PROMPT,
    );
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");

    // With the token, `100 Continue` comes once the head passed, then the answer.
    let body = json!({"title": "x".repeat(4000)}).to_string();
    let mut s = raw(
        port,
        upload_head(
            port,
            body.len(),
            &format!("Authorization: Bearer {TOKEN}\r\nExpect: 100-continue\r\nConnection: close\r\n"),
        )
        .as_bytes(),
    );
    s.set_read_timeout(Some(PROMPT)).expect("timeout");
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).expect("100 Continue");
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 100 Continue\r\n"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    s.write_all(body.as_bytes()).expect("body");
    let answer = until_closed(s, PROMPT);
    // Read and routed: the session does not exist.
    assert!(answer.starts_with("HTTP/1.1 404 Not Found\r\n"), "{answer}");
    assert!(answer.ends_with(r#"{"detail":"session not found"}"#), "{answer}");
    println!("http-limits token mode: 12 MB upload without the token answered 401 in {took:?}");
}

#[test]
fn unauthenticated_stalled_uploads_never_hold_a_body_reader() {
    let server = TestServer::builder().env("CASHCODE_TOKEN", TOKEN).start();
    let port = server.http_port;
    // 30 uploads without the token from the owner's own address, each announcing 100 KB and
    // sending a little: five times what one peer may upload at once.
    let stalled: Vec<TcpStream> =
        (0..30).map(|_| raw(port, format!("{}{{\"ti", upload_head(port, 100_000, "")).as_bytes())).collect();
    for s in stalled {
        let answer = until_closed(s, PROMPT);
        assert!(answer.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{answer}");
        assert!(answer.contains("\r\nConnection: close\r\n"), "{answer}");
    }
    // The owner's upload, over the 1 KiB tiny_http reads with the head, gets a reader.
    let title = "t".repeat(3000);
    let r = server.request(
        "PATCH",
        "/api/sessions/nope",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        Some(&json!({ "title": title }).to_string()),
    );
    // Read and routed (not 429/503 for want of a reader): the session does not exist.
    r.expect(404, json!({"detail": "session not found"}));
}

#[test]
fn a_trickled_head_is_cut_at_the_whole_head_deadline() {
    let server = TestServer::start();
    let mut s = TcpStream::connect(("127.0.0.1", server.http_port)).expect("connect");
    s.write_all(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").expect("start of a head");
    let mut w = s.try_clone().expect("clone");
    let started = Instant::now();
    let trickle = std::thread::spawn(move || {
        // Pacing: one byte a second, well within the 15 s read timeout, never a whole head.
        let mut sent = 0u32;
        while w.write_all(b"a").is_ok() && sent < 60 {
            sent += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
        sent
    });
    s.set_read_timeout(Some(HEAD_TIMEOUT * 3)).expect("timeout");
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap_or(0);
    let held = started.elapsed();
    drop(s);
    let sent = trickle.join().expect("trickle");
    assert_eq!(n, 0, "the server answered half a head");
    assert!(held < HEAD_TIMEOUT + Duration::from_secs(4), "a trickled head held its connection for {held:?}");
    println!("http-limits trickled head: cut after {held:?} ({sent} bytes trickled)");
    assert_eq!(health_within(&server, PROMPT), Some(200));
}

/// Size of the stand-in client bundle: more than loopback's socket buffers hold between a
/// server and a peer that never reads (Linux: at most 4 MiB to send, 6 MiB to receive).
const BUNDLE: usize = 16 * 1024 * 1024;

/// A home whose served client (`CASHCODE_CLIENT_DIR`) has an `index.html` and a
/// [`BUNDLE`]-byte `assets/bundle.js`; returns the server on it.
fn server_with_a_big_bundle(tag: &str) -> TestServer {
    let home = crate::common::fresh_home(tag);
    let dist = home.join("dist");
    std::fs::create_dir_all(dist.join("assets")).expect("dist");
    std::fs::write(dist.join("index.html"), "<!doctype html><title>t</title>").expect("index");
    std::fs::write(dist.join("assets/bundle.js"), vec![b'x'; BUNDLE]).expect("bundle");
    TestServer::builder().home(&home).env("CASHCODE_CLIENT_DIR", &dist.display().to_string()).start()
}

#[test]
fn peers_that_never_read_the_bundle_leave_the_api_answering() {
    let server = server_with_a_big_bundle("stall-read");
    let port = server.http_port;
    const STALLERS: usize = 8;
    let get = format!("GET /assets/bundle.js HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    // No token is needed for the client's files: anyone who can connect can do this. Each asks
    // twice, pipelined, and never reads.
    let stalled: Vec<TcpStream> = (0..STALLERS)
        .map(|i| {
            let mut s = connect_from(port, Ipv4Addr::new(127, 0, 0, 2 + (i % 4) as u8));
            s.write_all(get.repeat(2).as_bytes()).expect("write");
            s
        })
        .collect();
    // `http` has answered all of them (logged once each answer is handed over; with the
    // answers written on `http`, the first held it for the 15 s write timeout)...
    server.wait_log(r#"route="/assets/bundle.js" status=200"#, STALLERS);
    // ...and answers the owner while all of them still hold their answers unread.
    let asked = Instant::now();
    assert_eq!(health_within(&server, PROMPT), Some(200), "health while {STALLERS} peers never read");
    assert_eq!(server.get("/api/sessions").status, 200);
    assert_eq!(server.get("/api/client-config").status, 200);
    assert!(asked.elapsed() < PROMPT, "the API took {:?} while peers stalled", asked.elapsed());
    // The stallers' second requests were never read: one request per connection waits at most.
    assert_eq!(server.log_text().matches(r#"route="/assets/bundle.js""#).count(), STALLERS);
    drop(stalled);
}

#[test]
fn pipelined_requests_on_one_connection_are_answered_in_order() {
    let server = server_with_a_big_bundle("pipelined");
    let port = server.http_port;
    let host = format!("Host: 127.0.0.1:{port}");
    let rqs = format!(
        "GET /api/health HTTP/1.1\r\n{host}\r\n\r\n\
         GET /api/nope HTTP/1.1\r\n{host}\r\n\r\n\
         GET /assets/bundle.js HTTP/1.1\r\n{host}\r\n\r\n\
         GET /api/sessions HTTP/1.1\r\n{host}\r\nConnection: close\r\n\r\n"
    );
    let answer = until_closed(raw(port, rqs.as_bytes()), Duration::from_secs(30));
    let statuses: Vec<&str> = answer.match_indices("HTTP/1.1 ").map(|(at, _)| &answer[at + 9..at + 12]).collect();
    // The bundle is all `x`, so no status line hides in it.
    assert_eq!(statuses, ["200", "404", "200", "200"], "{}", head(&answer));
    // The third answer is the whole bundle (tiny_http sends a body this big chunked).
    let third: Vec<usize> = answer.match_indices("HTTP/1.1 ").map(|(at, _)| at).collect();
    let bundle = &answer[third[2]..third[3]];
    let (head3, mut chunks) = bundle.split_once("\r\n\r\n").expect("the bundle's head");
    assert!(head3.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{head3}");
    let mut body = String::new();
    while let Some((size, rest)) = chunks.split_once("\r\n") {
        let n = usize::from_str_radix(size, 16).expect("chunk size");
        body.push_str(&rest[..n]);
        chunks = &rest[n + 2..];
        if n == 0 {
            break;
        }
    }
    assert!(body.len() == BUNDLE && body.bytes().all(|b| b == b'x'), "the whole bundle, in its place");
    let sessions = server.get("/api/sessions").body;
    assert!(answer.ends_with(&sessions), "the session list last: {}", &answer[answer.len() - 200..]);
}

fn head(s: &str) -> String {
    s.chars().take(600).collect()
}
