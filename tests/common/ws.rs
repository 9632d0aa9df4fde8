//! [`WsClient`]: a blocking tungstenite client for the server's WebSocket, with deadlines on
//! every read and a log of every frame received (for secrecy checks). Runs on the test thread.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::HandshakeError;
use tungstenite::http::HeaderValue;
use tungstenite::{Message, WebSocket};

use super::{is_lower_hex, is_uuid4, msg, Deadline, TestServer, WAIT};

pub struct WsClient {
    ws: WebSocket<TcpStream>,
    /// The default chat from `ready`.
    pub chat_id: String,
    pub client_id: String,
    /// Every JSON frame received, in order.
    pub log: Vec<Value>,
    /// Whether `usage` and `budget_warning` events are returned (`suite::usage`); other
    /// tests see the turn's events as the original protocol has them (they stay in `log`, as
    /// do the `waiting` events every connection gets and each turn's `turn_started`).
    pub usage_events: bool,
}

/// Outcome of a handshake attempt.
pub enum Handshake {
    Accepted(Box<WsClient>),
    /// Refused with this HTTP status.
    Refused(u16),
}

fn open_socket(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the ws port");
    s.set_nodelay(true).expect("nodelay");
    s.set_write_timeout(Some(Duration::from_secs(20))).expect("write timeout");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    s
}

impl WsClient {
    /// Connects without an Origin header (a local script) and reads `ready`.
    pub fn connect(server: &TestServer) -> Self {
        let bearer = server.token().map(|t| format!("Bearer {t}"));
        let headers: Vec<(&'static str, &str)> = bearer.iter().map(|b| ("Authorization", b.as_str())).collect();
        match Self::handshake_with(server.ws_port, &headers) {
            Handshake::Accepted(c) => *c,
            Handshake::Refused(code) => panic!("ws handshake refused with {code}"),
        }
    }

    /// Connects with an optional `Origin` header; reads and checks `ready` when accepted.
    pub fn handshake(port: u16, origin: Option<&str>) -> Handshake {
        match origin {
            Some(o) => Self::handshake_with(port, &[("Origin", o)]),
            None => Self::handshake_with(port, &[]),
        }
    }

    /// Connects with extra (or replaced) handshake headers, e.g. `Origin` or `Host`.
    pub fn handshake_with(port: u16, headers: &[(&'static str, &str)]) -> Handshake {
        let mut req = format!("ws://127.0.0.1:{port}/").into_client_request().expect("ws request");
        for (k, v) in headers {
            req.headers_mut().insert(*k, HeaderValue::from_str(v).expect("header value"));
        }
        let stream = open_socket(port);
        match tungstenite::client(req, stream) {
            Ok((ws, _resp)) => {
                let mut c = WsClient {
                    ws,
                    chat_id: String::new(),
                    client_id: String::new(),
                    log: Vec::new(),
                    usage_events: false,
                };
                c.ws.get_ref().set_read_timeout(Some(Duration::from_millis(50))).expect("read timeout");
                let ready = c.recv();
                let chat = ready["chat_id"].as_str().unwrap_or("").to_string();
                let client = ready["client_id"].as_str().unwrap_or("").to_string();
                assert!(is_uuid4(&chat), "ready.chat_id {chat:?} is not a uuid4");
                assert!(
                    client.starts_with("client-") && is_lower_hex(&client[7..], 12),
                    "ready.client_id {client:?} is not client-<12 hex>"
                );
                // Exactly the original's `ready`, plus `waiting` (our extension) only while a
                // chat waits for the owner.
                let mut want = json!({"event":"ready","chat_id":chat,"client_id":client});
                if let Some(w) = ready.get("waiting") {
                    assert!(w.as_array().is_some_and(|a| !a.is_empty()), "{ready}");
                    want["waiting"] = w.clone();
                }
                assert_eq!(ready, want, "first frame must be exactly ready");
                c.chat_id = chat;
                c.client_id = client;
                Handshake::Accepted(Box::new(c))
            }
            Err(HandshakeError::Failure(tungstenite::Error::Http(resp))) => Handshake::Refused(resp.status().as_u16()),
            Err(e) => panic!("ws handshake failed unexpectedly: {e}"),
        }
    }

    pub fn send(&mut self, v: &Value) {
        self.send_raw(Message::text(v.to_string()));
    }
    pub fn send_text(&mut self, s: &str) {
        self.send_raw(Message::text(s.to_string()));
    }
    pub fn send_raw(&mut self, m: Message) {
        let deadline = Deadline::after(WAIT);
        let mut res = self.ws.send(m);
        // A write that hit the socket timeout leaves the rest queued; keep flushing.
        while let Err(tungstenite::Error::Io(e)) = &res {
            if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) || deadline.passed() {
                break;
            }
            res = self.ws.flush();
        }
        res.unwrap_or_else(|e| panic!("ws send failed: {e}"));
    }

    /// The next JSON frame, or `None` when `within` passes first.
    pub fn recv_within(&mut self, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str())
                        .unwrap_or_else(|e| panic!("server sent non-JSON text {t:?}: {e}"));
                    self.log.push(v.clone());
                    if !self.usage_events && matches!(v["event"].as_str(), Some("usage" | "budget_warning")) {
                        continue;
                    }
                    // Broadcast to every connection (`suite::approvals` reads them from `log`), and
                    // the turn's opening echo of its message (`suite::turn_started`).
                    if matches!(v["event"].as_str(), Some("waiting" | "turn_started")) {
                        continue;
                    }
                    return Some(v);
                }
                Ok(Message::Binary(b)) => panic!("server sent a binary frame: {b:?}"),
                Ok(Message::Close(c)) => panic!("server closed the connection: {c:?}"),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => panic!("ws read failed: {e}"),
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }

    /// Like [`WsClient::recv_within`] but reports a closed or broken connection as `Err`
    /// instead of panicking (for clients the server is expected to drop).
    pub fn recv_or_closed(&mut self, within: Duration) -> Result<Option<Value>, String> {
        let deadline = Instant::now() + within;
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str())
                        .unwrap_or_else(|e| panic!("server sent non-JSON text {t:?}: {e}"));
                    self.log.push(v.clone());
                    if !self.usage_events && matches!(v["event"].as_str(), Some("usage" | "budget_warning")) {
                        continue;
                    }
                    // Broadcast to every connection (`suite::approvals` reads them from `log`), and
                    // the turn's opening echo of its message (`suite::turn_started`).
                    if matches!(v["event"].as_str(), Some("waiting" | "turn_started")) {
                        continue;
                    }
                    return Ok(Some(v));
                }
                Ok(Message::Close(c)) => return Err(format!("closed: {c:?}")),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => return Err(e.to_string()),
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// The next JSON frame; panics after [`WAIT`].
    #[track_caller]
    pub fn recv(&mut self) -> Value {
        match self.recv_within(WAIT) {
            Some(v) => v,
            None => panic!("no frame within {WAIT:?}; received so far: {:#?}", self.log),
        }
    }

    /// Frames up to and including the first one matching `stop`.
    pub fn recv_until(&mut self, mut stop: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let v = self.recv();
            let end = stop(&v);
            out.push(v);
            if end {
                return out;
            }
        }
    }

    /// Every frame until the turn of `chat` ends (`done` or an `error` for that chat).
    pub fn turn_frames(&mut self, chat: &str) -> Vec<Value> {
        self.recv_until(|v| v["chat_id"] == chat && (v["event"] == "done" || v["event"] == "error"))
    }

    /// Only the frames for `chat`, until its turn ends.
    pub fn turn_events(&mut self, chat: &str) -> Vec<Value> {
        self.turn_frames(chat).into_iter().filter(|v| v["chat_id"] == chat && v["event"] != "stop_ack").collect()
    }

    /// Sends `ping` and asserts the very next frame is `pong`: nothing else was pending.
    #[track_caller]
    pub fn ping_sync(&mut self) {
        self.send(&json!({"type":"ping"}));
        let v = self.recv();
        assert_eq!(v, json!({"event":"pong"}), "expected pong as the next frame");
    }

    /// Sends a frame and returns the one reply (for frame-validation errors).
    #[track_caller]
    pub fn reply_to(&mut self, v: &Value) -> Value {
        self.send(v);
        self.recv()
    }

    pub fn new_chat(&mut self) -> String {
        let v = self.reply_to(&json!({"type":"new_chat"}));
        let chat = v["chat_id"].as_str().unwrap_or("").to_string();
        assert!(is_uuid4(&chat), "new_chat id {chat:?} is not a uuid4");
        assert_eq!(v, json!({"event":"attached","chat_id":chat,"last_seq":0}));
        chat
    }

    /// `attach` (optionally with `after_seq`); returns the `attached` frame's `last_seq`.
    pub fn attach(&mut self, chat: &str, after_seq: Option<u64>) -> u64 {
        let mut frame = json!({"type":"attach","chat_id":chat});
        if let Some(n) = after_seq {
            frame["after_seq"] = json!(n);
        }
        let v = self.reply_to(&frame);
        let last = v["last_seq"].as_u64().unwrap_or_else(|| panic!("attached without an integer last_seq: {v:?}"));
        assert_eq!(v, json!({"event":"attached","chat_id":chat,"last_seq":last}));
        last
    }

    /// Sends a message turn with the test model.
    pub fn message(&mut self, chat: &str, content: &str, provider: &str) {
        self.send(&msg(chat, content, provider));
    }

    /// Drops the TCP connection without a close handshake.
    pub fn drop_socket(self) {
        let _ = self.ws.get_ref().shutdown(std::net::Shutdown::Both);
    }
}

/// A TCP connection to `port` on 127.0.0.1 from the loopback source address `src` (any
/// 127.x.y.z works on Linux without configuration), so tests can play several peers.
pub fn connect_from(src: [u8; 4], port: u16) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let from = std::net::SocketAddr::from((src, 0));
    socket.bind(&from.into()).unwrap_or_else(|e| panic!("bind to {from}: {e}"));
    let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    socket.connect(&to.into()).unwrap_or_else(|e| panic!("connect {from} -> {to}: {e}"));
    let s: TcpStream = socket.into();
    s.set_nodelay(true).expect("nodelay");
    s
}

/// Whether the server ended this connection: a read without waiting sees the end, a reset,
/// or an answer (a refusal before the handshake is a 503 and a close); `false` while the
/// connection is open and silent.
pub fn ended_by_server(s: &TcpStream) -> bool {
    use std::io::Read;
    s.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 256];
    let ended = !matches!((&*s).read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).expect("blocking");
    ended
}

/// A peer that opens a WebSocket handshake and never finishes it: the request line and
/// `Host` at once, then one 130-byte header line per [`Trickler::drip`] (enough bytes per
/// packet to pass tungstenite's own small-packet check, so only a deadline ends it).
pub struct Trickler {
    pub stream: TcpStream,
    pub opened: Instant,
    /// When the server was first seen to have ended it.
    pub ended: Option<Duration>,
    drips: usize,
}

impl Trickler {
    pub fn open(src: [u8; 4], port: u16) -> Trickler {
        use std::io::Write;
        let mut stream = connect_from(src, port);
        stream.set_write_timeout(Some(Duration::from_secs(5))).expect("write timeout");
        let opened = Instant::now();
        let start = format!(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Version: 13\r\n"
        );
        let _ = stream.write_all(start.as_bytes());
        Trickler { stream, opened, ended: None, drips: 0 }
    }

    /// Sends one more header line unless the server already ended the connection; returns
    /// whether it is still open.
    pub fn drip(&mut self) -> bool {
        use std::io::Write;
        if self.ended.is_some() {
            return false;
        }
        if ended_by_server(&self.stream) {
            self.ended = Some(self.opened.elapsed());
            return false;
        }
        self.drips += 1;
        let line = format!("X-Pad-{:04}: {}\r\n", self.drips, "a".repeat(130 - 14));
        if self.stream.write_all(line.as_bytes()).is_err() {
            self.ended = Some(self.opened.elapsed());
            return false;
        }
        true
    }
}
