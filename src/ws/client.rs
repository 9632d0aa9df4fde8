//! One WebSocket connection: the handshake (Origin, Host and token checks), then this thread
//! reads and handles frames while a `ws-writer-N` thread owns every socket write that may wait
//! (queued events, pong/close replies from the reader, keepalive pings); an event reaches the
//! socket without it only when that cannot block (`Conn::send`, `ws::direct`). A slow reader
//! on the other end fills its capped queue and is dropped; it never blocks a worker.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use super::hub::{Conn, Out};
use super::protocol::{self, Frame, MAX_MESSAGE};
use super::wire::Event;
use super::WsShared;
use crate::bus::TurnRequest;
use crate::security::query_param;
use crate::security::AccessPolicy;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refused connection waits for the peer's close reply.
const REFUSE_LINGER: Duration = Duration::from_secs(2);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
pub const PING_INTERVAL: Duration = Duration::from_secs(20);
/// Hard cap on one message; past [`MAX_MESSAGE`] we answer with an error but keep reading.
const HARD_MAX_MESSAGE: usize = 16 * 1024 * 1024;

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(8 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(HARD_MAX_MESSAGE)
        .max_message_size(Some(HARD_MAX_MESSAGE))
        .max_frame_size(Some(HARD_MAX_MESSAGE))
}

/// The reader side's stream: reads the socket; writes go straight to the socket during the
/// handshake and to the writer thread's queue afterwards, so only one thread writes frames.
struct ReaderIo {
    stream: TcpStream,
    out: Option<Sender<Out>>,
}

impl Read for ReaderIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }
}

impl Write for ReaderIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.out {
            None => self.stream.write(buf),
            Some(tx) => {
                super::hub::push(tx, Out::Raw(buf.to_vec()))
                    .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "writer gone"))?;
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &self.out {
            None => self.stream.flush(),
            Some(_) => Ok(()),
        }
    }
}

fn header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

#[allow(clippy::result_large_err)] // the handshake callback's error type is fixed by tungstenite
fn refuse(status: u16, msg: &str) -> ErrorResponse {
    let mut r = ErrorResponse::new(Some(msg.to_string()));
    *r.status_mut() =
        tungstenite::http::StatusCode::from_u16(status).unwrap_or(tungstenite::http::StatusCode::FORBIDDEN);
    r
}

/// The server side of the opening handshake (Host, Origin and token checks); `None` when it
/// failed or was refused (logged).
fn handshake(stream: TcpStream, id: u64, policy: &AccessPolicy) -> Option<WebSocket<ReaderIo>> {
    #[allow(clippy::result_large_err)] // the error type is tungstenite's
    let callback = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        if !policy.host_allowed(header(req, "host")) {
            return Err(refuse(403, "Host is not allowed"));
        }
        if !policy.origin_allowed(header(req, "origin")) {
            return Err(refuse(403, "Origin is not allowed"));
        }
        let query = req.uri().query().unwrap_or("");
        if !policy.token_ok(header(req, "authorization"), query_param(query, "token")) {
            return Err(refuse(401, "a valid token is required"));
        }
        Ok(resp)
    };
    match tungstenite::accept_hdr_with_config(ReaderIo { stream, out: None }, callback, Some(ws_config())) {
        Ok(ws) => Some(ws),
        Err(e) => {
            log::info!(
                "event=ws.handshake.refused conn={id} error=\"{}\"",
                crate::util::redact::redact(&e.to_string())
            );
            None
        }
    }
}

/// A connection over `CASHCODE_MAX_CLIENTS`: the handshake completes (so a browser sees a
/// close code rather than a failed connection), then a close with 1013 (Try Again Later).
/// The peer's close reply is awaited at most [`REFUSE_LINGER`].
pub fn refuse_full(stream: TcpStream, id: u64, shared: &WsShared) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let Some(mut ws) = handshake(stream, id, &shared.policy) else { return };
    log::warn!("event=ws.client.refused reason=max_clients max={} conn={id}", shared.max_clients);
    let frame = CloseFrame { code: CloseCode::Again, reason: "too many clients, try again later".into() };
    if ws.close(Some(frame)).is_err() {
        return;
    }
    let _ = ws.get_mut().stream.set_read_timeout(Some(REFUSE_LINGER));
    let deadline = Instant::now() + REFUSE_LINGER;
    // Frames the peer sent meanwhile are dropped; a read error includes the close completing.
    while Instant::now() < deadline && ws.read().is_ok() {}
}

/// Serves one connection until it closes.
pub fn serve(stream: TcpStream, id: u64, shared: &WsShared) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let (write_stream, close_stream) = match (stream.try_clone(), stream.try_clone()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return,
    };
    let Some(mut ws) = handshake(stream, id, &shared.policy) else { return };
    let _ = ws.get_mut().stream.set_read_timeout(None);
    let (tx, rx) = super::hub::out_queue();
    ws.get_mut().out = Some(tx.clone());
    let client_id = format!("client-{}", crate::util::rand::hex(6));
    let conn = Conn::new(id, client_id.clone(), tx, Some(close_stream));
    let last_seen = Arc::new(AtomicU64::new(0));
    let started = Instant::now();

    let writer = {
        let conn = Arc::clone(&conn);
        let last_seen = Arc::clone(&last_seen);
        thread::Builder::new()
            .name(format!("ws-writer-{id}"))
            .stack_size(super::CLIENT_STACK)
            .spawn(move || write_loop(write_stream, &rx, &conn, &last_seen, started))
    };
    let Ok(writer) = writer else {
        conn.close();
        return;
    };

    let chat_id = crate::util::rand::uuid4();
    shared.hub.subscribe(&chat_id, &conn);
    conn.send_text(Event::Ready { chat_id: &chat_id, client_id: &client_id }.to_text(None));
    log::debug!("event=ws.client.connected conn={id}");

    loop {
        let msg = match ws.read() {
            Ok(m) => m,
            Err(tungstenite::Error::Capacity(_)) => {
                send_error(&conn, &format!("message too large (max {MAX_MESSAGE} bytes)"), None);
                break;
            }
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        last_seen.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        let text = match msg {
            Message::Text(t) => t.to_string(),
            Message::Binary(b) => match String::from_utf8(b.to_vec()) {
                Ok(t) => t,
                Err(_) => continue, // undecodable binary frames are ignored, as the original does
            },
            Message::Close(_) => continue, // the reply is queued; the next read ends the loop
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
        };
        if shared.shutdown.load(Ordering::Relaxed) {
            break;
        }
        handle(&text, &conn, shared);
        if conn.is_closed() {
            break;
        }
    }
    shared.hub.disconnect(&conn);
    conn.send(Out::Close);
    let _ = writer.join();
    conn.close();
    log::debug!("event=ws.client.closed conn={id}");
}

fn send_error(conn: &Conn, detail: &str, chat_id: Option<&str>) {
    conn.send_text(Event::error(detail, chat_id).to_text(None));
}

/// Handles one text message from the client.
fn handle(text: &str, conn: &Arc<Conn>, shared: &WsShared) {
    if text.len() > MAX_MESSAGE {
        send_error(conn, &format!("message too large (max {MAX_MESSAGE} bytes)"), None);
        return;
    }
    let frame = match protocol::parse_frame(text) {
        Ok(f) => f,
        Err(r) => return send_error(conn, &r.detail, r.chat_id.as_deref()),
    };
    match frame {
        Frame::Ping => {
            conn.send_text(Event::Pong.to_text(None));
        }
        Frame::NewChat => {
            let chat_id = crate::util::rand::uuid4();
            shared.hub.attach(&chat_id, conn, None);
        }
        Frame::Attach { chat_id, after_seq } => shared.hub.attach(&chat_id, conn, after_seq),
        Frame::Cancel { chat_id } => {
            conn.send_text(Event::StopAck { chat_id: &chat_id }.to_text(None));
            shared.agent.cancel(&chat_id);
        }
        Frame::ElicitationResponse { chat_id, id, action, content } => {
            // No `chat_id` on the error: the turn goes on and the form stays open.
            if let Err(detail) = shared.agent.deps.elicitations.answer(&chat_id, &id, &action, content.as_ref()) {
                send_error(conn, &detail, None);
            }
        }
        Frame::Message { chat_id, content, selection } => {
            shared.hub.subscribe(&chat_id, conn);
            let req = TurnRequest { chat_id: chat_id.clone(), content, selection };
            if let Err(detail) = shared.agent.submit(req) {
                send_error(conn, &detail, Some(&chat_id));
            }
        }
    }
}

/// The writer thread: waits for the queue, then drains it in batches under the connection's
/// write lock (so a direct write, `Conn::send`, never overtakes a queued frame), flushes once
/// per batch, pings when idle, and closes a peer that answered nothing for two ping intervals.
fn write_loop(stream: TcpStream, rx: &Receiver<Out>, conn: &Conn, last_seen: &AtomicU64, started: Instant) {
    let mut ws = WebSocket::from_raw_socket(stream, Role::Server, Some(ws_config()));
    let mut last_ping = Instant::now();
    let mut ready = Select::new();
    ready.recv(rx);
    loop {
        if ready.ready_timeout(PING_INTERVAL).is_err() {
            let seen = Duration::from_millis(last_seen.load(Ordering::Relaxed));
            if started.elapsed().saturating_sub(seen) > PING_INTERVAL * 2 && last_ping.elapsed() >= PING_INTERVAL {
                log::info!("event=ws.client.timeout conn={}", conn.id);
                break;
            }
            last_ping = Instant::now();
            let _held = conn.write_lock();
            if ws.send(Message::Ping(Vec::new().into())).is_err() {
                break;
            }
            continue;
        }
        let held = conn.write_lock();
        let mut ok = true;
        let mut close = false;
        let mut taken = 0;
        while taken < 256 {
            let out = match rx.try_recv() {
                Ok(out) => out,
                // Empty (another batch took it), or every sender gone.
                Err(e) => {
                    close = e.is_disconnected();
                    break;
                }
            };
            taken += 1;
            let r = match out {
                Out::Text(t) => ws.write(Message::Text(t.as_ref().into())),
                Out::Raw(bytes) => {
                    ws.flush().and_then(|_| ws.get_mut().write_all(&bytes).map_err(tungstenite::Error::Io))
                }
                Out::Close => {
                    close = true;
                    break;
                }
            };
            if r.is_err() {
                ok = false;
                break;
            }
        }
        if !ok || ws.flush().is_err() || close {
            // Closed before the lock is let go: no direct write follows the last frame.
            conn.close();
            drop(held);
            break;
        }
    }
    let _ = ws.flush();
    conn.close();
}
