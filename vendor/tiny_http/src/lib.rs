//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]
// (cashcode patch) Upstream has two unused items; a registry crate's lints are capped, a path
// dependency's are not, so they are allowed here rather than printed on every build.
#![allow(dead_code, unused_imports)]

#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
use zeroize::Zeroizing;

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;

pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ConnectionConfig, ListenAddr, Listener};
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;

mod client;
mod common;
mod connection;
mod request;
mod response;
mod ssl;
mod test;
mod util;

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr()
    listening_addr: ListenAddr,

    // (cashcode patch) the open connections
    slots: Arc<connection::Slots>,
}

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

/// (cashcode patch) How often the accept thread logs a lasting problem (failed accepts,
/// refused or dropped connections): once when it starts, then at most this often.
const TROUBLE_LOG_EVERY: Duration = Duration::from_secs(10);

/// (cashcode patch) How often a connection thread waiting for its request's answer checks
/// whether the server has stopped (a request still queued when it stops is never answered).
const HAND_OFF_POLL: Duration = Duration::from_millis(500);

/// (cashcode patch) Pause after a failed `accept` whose cause may last (out of descriptors
/// or memory): the pending connection stays in the backlog, and retrying at once would spin.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// (cashcode patch) The accept thread's troubles, logged without flooding the log.
#[derive(Default)]
struct AcceptTrouble {
    failed: u64,
    refused: u64,
    dropped: u64,
    last_log: Option<std::time::Instant>,
}

impl AcceptTrouble {
    fn due(&mut self) -> bool {
        let now = std::time::Instant::now();
        if self
            .last_log
            .map_or(true, |t| now.duration_since(t) >= TROUBLE_LOG_EVERY)
        {
            self.last_log = Some(now);
            true
        } else {
            false
        }
    }

    /// Logs a failed accept; returns how long to pause before the next.
    fn accept_failed(&mut self, e: &IoError) -> Duration {
        self.failed += 1;
        if self.due() {
            log::error!(
                "event=http.accept.failed error={:?} failures={} (accepting goes on)",
                e.to_string(),
                self.failed
            );
        }
        match e.kind() {
            // about one connection only: the next may be fine
            IoErrorKind::ConnectionAborted
            | IoErrorKind::ConnectionReset
            | IoErrorKind::Interrupted => Duration::ZERO,
            _ => ACCEPT_RETRY_PAUSE,
        }
    }

    fn accepted(&mut self) {
        if self.failed > 0 {
            // rate limited too: under descriptor pressure accepts can fail and succeed in turn
            if self.due() {
                log::warn!("event=http.accept.resumed after_failures={}", self.failed);
            }
            self.failed = 0;
        }
    }

    fn refused(&mut self, open: usize) {
        self.refused += 1;
        if self.due() {
            log::warn!(
                "event=http.connection.refused reason=limit refused={} open={}",
                self.refused,
                open
            );
        }
    }

    fn spawn_failed(&mut self, e: &IoError) {
        self.dropped += 1;
        if self.due() {
            log::error!(
                "event=http.connection.dropped reason=no_thread error={:?} dropped={}",
                e.to_string(),
                self.dropped
            );
        }
    }
}

/// (cashcode patch) Waits until the request handed over with `answers`' sender is answered,
/// and writes the answer if it is handed back here. `true` when the connection may read its
/// next request (answered here or on the application's thread, or upgraded: the readers
/// sequence the rest), `false` when it ends: the server stopped first, or the answer could not
/// be written (a write timed out on a peer that does not read; what follows a partial answer
/// would not be understood).
fn write_handed_off(answers: &mpsc::Receiver<request::HandOff>, stopped: &AtomicBool) -> bool {
    loop {
        match answers.recv_timeout(HAND_OFF_POLL) {
            Ok(answer) => return answer.write(),
            Err(mpsc::RecvTimeoutError::Disconnected) => return true,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stopped.load(Relaxed) {
                    return false;
                }
            }
        }
    }
}

// this trait is to make sure that Server implements Share and Send
#[doc(hidden)]
trait MustBeShareDummy: Sync + Send {}
#[doc(hidden)]
impl MustBeShareDummy for Server {}

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,

    /// If `Some`, then the server will use SSL to encode the communications.
    pub ssl: Option<SslConfig>,
}

/// Configuration of the server for SSL.
#[derive(Debug, Clone)]
pub struct SslConfig {
    /// Contains the public certificate to send to clients.
    pub certificate: Vec<u8>,
    /// Contains the ultra-secret private key used to decode communications.
    pub private_key: Vec<u8>,
}

impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: None,
        })
    }

    /// Shortcut for an HTTPS server on a specific address.
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    #[inline]
    pub fn https<A>(
        addr: A,
        config: SslConfig,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: Some(config),
        })
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
            ssl: None,
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = config.addr.bind()?;
        Self::from_listener(listener, config.ssl)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::from_listener_with_config(listener, ssl_config, ConnectionConfig::default())
    }

    /// (cashcode patch) `from_listener`, with `connections` applied to every accepted
    /// connection. Timeouts belong on the accepted sockets, not on the listener: on Linux a
    /// listener's `SO_RCVTIMEO` also bounds `accept`, and the accept thread ends on its first
    /// error, so a quiet spell that long would stop the server.
    pub fn from_listener_with_config<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
        connections: ConnectionConfig,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        // A zero timeout is refused by the socket call; refused here, once, rather than
        // closing every connection.
        if connections.read_timeout == Some(Duration::ZERO)
            || connections.write_timeout == Some(Duration::ZERO)
            || connections.head_timeout == Some(Duration::ZERO)
        {
            return Err("a connection timeout of zero".into());
        }
        let listener = listener.into();
        // building the "close" variable
        let close_trigger = Arc::new(AtomicBool::new(false));

        // building the TcpListener
        let (server, local_addr) = {
            let local_addr = listener.local_addr()?;
            log::debug!("Server listening on {}", local_addr);
            (listener, local_addr)
        };

        // building the SSL capabilities
        #[cfg(all(feature = "ssl-openssl", feature = "ssl-rustls"))]
        compile_error!(
            "Features 'ssl-openssl' and 'ssl-rustls' must not be enabled at the same time"
        );
        #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
        type SslContext = ();
        #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
        type SslContext = crate::ssl::SslContextImpl;
        let ssl: Option<SslContext> = {
            match ssl_config {
                #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
                Some(config) => Some(SslContext::from_pem(
                    config.certificate,
                    Zeroizing::new(config.private_key),
                )?),
                #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
                Some(_) => return Err(
                    "Building a server with SSL requires enabling the `ssl` feature in tiny-http"
                        .into(),
                ),
                None => None,
            }
        };

        // creating a task where server.accept() is continuously called
        // and ClientConnection objects are pushed in the messages queue
        let messages = MessagesQueue::with_capacity(8);

        // (cashcode patch) the open connections, counted against `connections`' limits
        let slots = connection::Slots::new(&connections);

        let inside_close_trigger = close_trigger.clone();
        let inside_messages = messages.clone();
        let inside_slots = Arc::clone(&slots);
        // (cashcode patch) named, and an error rather than a panic when it cannot start
        let accept_thread = thread::Builder::new().name("http-accept".into());
        accept_thread.spawn(move || {
            // a tasks pool is used to dispatch the connections into threads
            let tasks_pool = util::TaskPool::new();
            let slots = inside_slots;
            let mut trouble = AcceptTrouble::default();

            log::debug!("Running accept thread");
            while !inside_close_trigger.load(Relaxed) {
                // (cashcode patch) An accept error never ends this loop (upstream broke out
                // on the first one, and HTTP was gone for good while the process lived on):
                // it is logged and accepting resumes after a pause when the cause may last
                // (out of descriptors or memory), at once when it concerned one connection.
                let (sock, addr) = match server.accept(&connections) {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        if inside_close_trigger.load(Relaxed) {
                            break;
                        }
                        let pause = trouble.accept_failed(&e);
                        if !pause.is_zero() {
                            thread::sleep(pause);
                        }
                        continue;
                    }
                };
                trouble.accepted();

                // (cashcode patch) over a limit: answered 503 and closed here, before any
                // thread or buffer is spent on it
                let slot = match slots.admit(addr.map(|a| a.ip())) {
                    Some(slot) => slot,
                    None => {
                        sock.refuse_busy();
                        trouble.refused(slots.open());
                        continue;
                    }
                };

                use util::RefinedTcpStream;
                let (read_closable, write_closable) = match ssl {
                    None => RefinedTcpStream::new(connection::Shared::new(
                        sock,
                        &connections,
                        Some(slot),
                    )),
                    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
                    Some(ref ssl) => {
                        // trying to apply SSL over the connection
                        // if an error occurs, we just close the socket and resume listening
                        let sock = match ssl.accept(sock) {
                            Ok(s) => s,
                            Err(_) => continue,
                        };

                        RefinedTcpStream::new_with_slot(sock, slot)
                    }
                    #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
                    Some(ref _ssl) => unreachable!(),
                };

                let client = ClientConnection::new(write_closable, read_closable);
                let messages = inside_messages.clone();
                let stopped = inside_close_trigger.clone();
                let mut client = Some(client);
                let spawned = tasks_pool.spawn(Box::new(move || {
                    if let Some(client) = client.take() {
                        // Synchronization is needed for HTTPS requests to avoid a deadlock
                        if client.secure() {
                            let (sender, receiver) = mpsc::channel();
                            for rq in client {
                                messages.push(rq.with_notify_sender(sender.clone()).into());
                                // (cashcode patch) a request dropped unanswered ends the
                                // connection instead of panicking this thread
                                if receiver.recv().is_err() {
                                    break;
                                }
                            }
                        } else if connections.write_on_connection {
                            // (cashcode patch) This thread writes each answer handed to it,
                            // and reads the next request only after that: the application's
                            // threads never wait on a slow reader.
                            for rq in client {
                                let (sender, answers) = mpsc::channel();
                                messages.push(rq.with_hand_off(sender).into());
                                if !write_handed_off(&answers, &stopped) {
                                    break;
                                }
                            }
                        } else {
                            for rq in client {
                                messages.push(rq.into());
                            }
                        }
                    }
                }));
                // (cashcode patch) no thread for it: this one connection is closed (the task,
                // which owns it, was dropped) and accepting goes on
                if let Err(e) = spawned {
                    trouble.spawn_failed(&e);
                }
            }
            log::debug!("Terminating accept thread");
        })?;

        // result
        Ok(Server {
            messages,
            close: close_trigger,
            listening_addr: local_addr,
            slots,
        })
    }

    /// Returns an iterator for all the incoming requests.
    ///
    /// The iterator will return `None` if the server socket is shutdown.
    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addr.clone()
    }

    /// Returns the number of clients currently connected to the server.
    ///
    /// (cashcode patch) upstream left this `unimplemented!()`; it counts open connections.
    pub fn num_connections(&self) -> usize {
        self.slots.open()
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close.store(true, Relaxed);
        // Connect briefly to ourselves to unblock the accept thread
        let maybe_stream = match &self.listening_addr {
            ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
            #[cfg(unix)]
            ListenAddr::Unix(addr) => {
                // TODO: use connect_addr when its stabilized.
                let path = addr.as_pathname().unwrap();
                std::os::unix::net::UnixStream::connect(path).map(Connection::from)
            }
        };
        if let Ok(stream) = maybe_stream {
            let _ = stream.shutdown(Shutdown::Both);
        }

        #[cfg(unix)]
        if let ListenAddr::Unix(addr) = &self.listening_addr {
            if let Some(path) = addr.as_pathname() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
