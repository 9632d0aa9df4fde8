//! One WebSocket connection: the handshake (Origin, Host and token checks, under one deadline
//! for the whole of it) on a `ws-handshake` thread, then, on its `ws-client-N` thread, reading
//! and handling frames, pinging a peer that went quiet and dropping one that stays silent.
//! Every frame (events, pings, pong and close replies) goes straight to the socket when that
//! cannot block (`Conn::send`, `ws::direct`); what the socket does not take at once is queued
//! for a `ws-writer-N` thread, started then, which owns every write that may wait. A slow
//! reader on the other end fills its capped queue and is dropped; it never blocks a worker.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use super::hub::{Conn, Out, StartWriter};
use super::protocol::{self, Frame, MAX_MESSAGE};
use super::WsShared;
use crate::bus::TurnRequest;
use crate::security::query_param;
use crate::security::AccessPolicy;
use crate::wire::Event;

/// How long a refused connection waits for the peer's close reply.
const REFUSE_LINGER: Duration = Duration::from_secs(2);
/// During the handshake, reads wake at least this often to see the deadline and server stop.
const HANDSHAKE_SLICE: Duration = Duration::from_millis(250);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
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
/// handshake and through the connection afterwards (direct when that cannot block, else
/// queued for the writer thread), so frames never interleave. During the handshake every read
/// and write is held to the handshake's deadline: a peer sending a few bytes now and then
/// gains nothing, the whole handshake ends at the deadline.
pub(crate) struct ReaderIo {
    stream: TcpStream,
    conn: Option<Arc<Conn>>,
    /// The handshake's deadline and the server's stop flag; `None` once it completed.
    handshake: Option<(Instant, Arc<WsShared>)>,
}

/// The error a read or write gets once the handshake's deadline passed (or the server stops).
fn expired() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "handshake deadline passed")
}

impl ReaderIo {
    /// Time left for the handshake, at most `slice`; an error once none is left.
    fn handshake_time(&self, slice: Duration) -> io::Result<Option<Duration>> {
        let Some((deadline, shared)) = &self.handshake else { return Ok(None) };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || shared.shutdown.load(Ordering::Relaxed) {
            return Err(expired());
        }
        Ok(Some(left.min(slice)))
    }
}

impl Read for ReaderIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(wait) = self.handshake_time(HANDSHAKE_SLICE)? else { return self.stream.read(buf) };
            self.stream.set_read_timeout(Some(wait))?;
            match self.stream.read(buf) {
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
                r => return r,
            }
        }
    }
}

impl Write for ReaderIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.conn {
            None => {
                if let Some(wait) = self.handshake_time(Duration::MAX)? {
                    self.stream.set_write_timeout(Some(wait))?;
                }
                self.stream.write(buf)
            }
            Some(conn) => {
                if !conn.send(Out::Raw(buf.to_vec())) {
                    return Err(io::Error::new(io::ErrorKind::BrokenPipe, "connection closed"));
                }
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &self.conn {
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
fn handshake(io: ReaderIo, id: u64, policy: &AccessPolicy) -> Option<WebSocket<ReaderIo>> {
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
    match tungstenite::accept_hdr_with_config(io, callback, Some(ws_config())) {
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

/// Runs the handshake of one connection (on a `ws-handshake` thread) by `deadline`; once it
/// completed, takes a client slot and starts the connection's `ws-client-N` thread, or, past
/// `CASHCODE_MAX_CLIENTS`, closes it with 1013.
pub(crate) fn handshake_and_start(stream: TcpStream, id: u64, deadline: Instant, shared: &Arc<WsShared>) {
    // Accepted non-blocking (so it could wait parked); reads here wait, under the deadline.
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let _ = stream.set_nodelay(true);
    let io = ReaderIo { stream, conn: None, handshake: Some((deadline, Arc::clone(shared))) };
    let Some(mut ws) = handshake(io, id, &shared.policy) else { return };
    ws.get_mut().handshake = None;
    let _ = ws.get_mut().stream.set_write_timeout(Some(WRITE_TIMEOUT));
    if shared.live_clients.fetch_add(1, Ordering::SeqCst) >= shared.max_clients {
        shared.live_clients.fetch_sub(1, Ordering::SeqCst);
        refuse_full(ws, id, shared);
        return;
    }
    super::start_client(ws, id, shared);
}

/// A connection over `CASHCODE_MAX_CLIENTS`: the handshake completed (so a browser sees a
/// close code rather than a failed connection); now a close with 1013 (Try Again Later). The
/// peer's close reply is awaited at most [`REFUSE_LINGER`] (less at server stop).
fn refuse_full(mut ws: WebSocket<ReaderIo>, id: u64, shared: &WsShared) {
    log::warn!("event=ws.client.refused reason=max_clients max={} conn={id}", shared.max_clients);
    let frame = CloseFrame { code: CloseCode::Again, reason: "too many clients, try again later".into() };
    if ws.close(Some(frame)).is_err() {
        return;
    }
    let _ = ws.get_mut().stream.set_read_timeout(Some(HANDSHAKE_SLICE));
    let deadline = Instant::now() + REFUSE_LINGER;
    // Frames the peer sent meanwhile are dropped; another error includes the close completing.
    while Instant::now() < deadline && !shared.shutdown.load(Ordering::Relaxed) {
        match ws.read() {
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
}

/// Serves one connection whose handshake completed until it closes (its `ws-client-N` thread).
pub(crate) fn serve(mut ws: WebSocket<ReaderIo>, id: u64, shared: &WsShared) {
    let Ok(conn_stream) = ws.get_ref().stream.try_clone() else { return };
    // Reads wake after a ping interval of silence, to ping the peer or drop it.
    let ping_interval = shared.ping_interval;
    let _ = ws.get_mut().stream.set_read_timeout(Some(ping_interval));
    let (tx, rx) = super::hub::out_queue();
    let start: StartWriter = Box::new(move |conn: &Arc<Conn>| {
        let (stream, conn) = (conn.clone_stream()?, Arc::clone(conn));
        thread::Builder::new()
            .name(format!("ws-writer-{id}"))
            .stack_size(super::CLIENT_STACK)
            .spawn(move || write_loop(stream, &rx, &conn))
    });
    let client_id = format!("client-{}", crate::util::rand::hex(6));
    let conn = Conn::with_writer(id, tx, conn_stream, start);
    ws.get_mut().conn = Some(Arc::clone(&conn));

    let chat_id = crate::util::rand::uuid4();
    shared.hub.subscribe(&chat_id, &conn);
    let waiting = shared.agent.waiting_chats();
    conn.send_text(Event::Ready { chat_id: &chat_id, client_id: &client_id, waiting: &waiting }.to_text(None));
    log::debug!("event=ws.client.connected conn={id}");

    let (mut last_seen, mut last_ping) = (Instant::now(), Instant::now());
    // Checked before the first read too: a client subscribed after the hub closed every
    // connection at stop ends here instead of waiting for its peer.
    while !shared.shutdown.load(Ordering::SeqCst) {
        let msg = match ws.read() {
            Ok(m) => m,
            Err(tungstenite::Error::Capacity(_)) => {
                send_error(&conn, &format!("message too large (max {MAX_MESSAGE} bytes)"), None);
                break;
            }
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A ping interval without a frame from the peer.
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
            {
                if last_seen.elapsed() >= ping_interval * 2 && last_ping.elapsed() >= ping_interval {
                    log::info!("event=ws.client.timeout conn={id}");
                    break;
                }
                last_ping = Instant::now();
                if ws.send(Message::Ping(Vec::new().into())).is_err() || conn.is_closed() {
                    break;
                }
                continue;
            }
            Err(_) => break,
        };
        last_seen = Instant::now();
        let text = match msg {
            Message::Text(t) => t.to_string(),
            Message::Binary(b) => match String::from_utf8(b.to_vec()) {
                Ok(t) => t,
                Err(_) => continue, // undecodable binary frames are ignored, as the original does
            },
            Message::Close(_) => continue, // the reply is sent; the next read ends the loop
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
    conn.end();
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
        Frame::NewChat { project } => {
            let chat_id = crate::util::rand::uuid4();
            if let Some(p) = project {
                if let Err(detail) = shared.agent.bind_project(&chat_id, &p) {
                    return send_error(conn, &detail, None);
                }
            }
            shared.hub.attach(&chat_id, conn, None);
        }
        Frame::Attach { chat_id, after_seq } => {
            shared.hub.attach(&chat_id, conn, after_seq);
            // Requests still waiting are shown again, whatever the replay held.
            for event in shared.agent.pending_requests(&chat_id) {
                conn.send_text(event);
            }
        }
        Frame::Cancel { chat_id } => {
            conn.send_text(Event::StopAck { chat_id: &chat_id }.to_text(None));
            shared.agent.cancel(&chat_id);
        }
        Frame::ApprovalResponse { chat_id, id, decision } => {
            // Only a request waiting in this very chat under this id is answered.
            if let Err(e) = shared.agent.answer_approval(&chat_id, &id, &decision) {
                send_error(conn, &e.detail(), None);
            }
        }
        Frame::ElicitationResponse { chat_id, id, action, content } => {
            // No `chat_id` on the error: the turn goes on and the form stays open.
            if let Err(e) = shared.agent.answer_elicitation(&chat_id, &id, &action, content.as_ref()) {
                send_error(conn, &e.detail(), None);
            }
        }
        Frame::Message { chat_id, content, selection, project } => {
            if let Some(p) = project {
                if let Err(detail) = shared.agent.bind_first_message(&chat_id, &p) {
                    return send_error(conn, &detail, Some(&chat_id));
                }
            }
            shared.hub.subscribe(&chat_id, conn);
            let req = TurnRequest { chat_id: chat_id.clone(), content, selection };
            if let Err(detail) = shared.agent.submit(req) {
                send_error(conn, &detail, Some(&chat_id));
            }
        }
    }
}

/// The writer thread: waits for the queue, then drains it in batches under the connection's
/// write lock (so a direct write, `Conn::send`, never overtakes a queued frame) and flushes
/// once per batch, until `Out::Close`, a write error, or the connection's end.
fn write_loop(stream: TcpStream, rx: &Receiver<Out>, conn: &Conn) {
    let mut ws = WebSocket::from_raw_socket(stream, Role::Server, Some(ws_config()));
    let mut ready = Select::new();
    ready.recv(rx);
    loop {
        ready.ready();
        let held = conn.write_lock();
        let mut ok = true;
        let mut close = false;
        let mut taken = 0;
        while taken < 256 {
            let out = match rx.try_recv() {
                Ok(out) => {
                    conn.dequeued(&out);
                    out
                }
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
