//! Legacy HTTP+SSE transport (2024-11-05): a long-lived `GET <url>` event stream carries the
//! server's messages; the first `endpoint` event names (often relatively) where each of our
//! messages is POSTed, answered `202 Accepted`.
//!
//! Threads: `mcp-<server>-sse` owns the GET stream (only this thread ever blocks on it; close
//! shuts the stream agent's socket under the read, so it ends at once and is joined).
//! POSTs run on the caller's thread with a timeout; replies to server requests run on a short
//! `mcp-<server>-reply` thread so the reader never waits on the network.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{
    body_snippet, content_type, http_agent, join_until, lock, read_body_text, send_following, spawn_named, HttpSpec,
    HttpTimeouts, Inbox, Outgoing, Transport,
};
use crate::mcp::{Error, Result};
use crate::util::sse::SseReader;
use crate::util::url::{self, Origin};

/// Idle limit on the event stream (the original's 300 s SSE read timeout).
pub(crate) const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest POST response body we read (it is normally `Accepted`).
const MAX_POST_BODY: u64 = 64 * 1024;
/// Concurrent reply threads allowed; beyond that replies to server requests are dropped.
const MAX_REPLIERS: usize = 4;
/// Timeout of a reply POST to a server request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct SseTransport {
    server: String,
    inbox: Arc<Inbox>,
    agent: ureq::Agent,
    endpoint: String,
    headers: BTreeMap<String, String>,
    closed: Arc<AtomicBool>,
    /// The reader's agent: shutting it down interrupts the stream read.
    stream_agent: ureq::Agent,
    reader: Mutex<Option<JoinHandle<()>>>,
}

impl SseTransport {
    /// Opens the stream and waits (at most `connect_timeout`) for the `endpoint` event.
    pub(crate) fn connect(server: &str, spec: &HttpSpec, inbox: Arc<Inbox>, connect_timeout: Duration) -> Result<Self> {
        let base = Origin::of(&spec.url).ok_or_else(|| Error::Config("url must be an absolute HTTP(S) URL".into()))?;
        let closed = Arc::new(AtomicBool::new(false));
        let (ep_tx, ep_rx) = crossbeam_channel::bounded::<Result<String>>(1);
        let stream_agent =
            http_agent(HttpTimeouts { connect: connect_timeout, global: None, per_read: Some(STREAM_IDLE_TIMEOUT) });
        let reader = spawn_named(format!("mcp-{server}-sse"), {
            let inbox = inbox.clone();
            let closed = closed.clone();
            let spec = spec.clone();
            let agent = stream_agent.clone();
            move || stream_loop(&agent, &spec, &base, &inbox, &closed, &ep_tx, connect_timeout)
        })?;
        let endpoint = match ep_rx.recv_timeout(connect_timeout) {
            Ok(Ok(ep)) => ep,
            Ok(Err(e)) => {
                closed.store(true, Ordering::SeqCst);
                join_until(reader, Instant::now() + Duration::from_millis(100));
                return Err(e);
            }
            Err(_) => {
                closed.store(true, Ordering::SeqCst);
                stream_agent.shutdown();
                join_until(reader, Instant::now() + Duration::from_millis(500));
                inbox.close("no endpoint event");
                return Err(Error::Timeout {
                    method: "connect (waiting for the endpoint event)".into(),
                    after: connect_timeout,
                });
            }
        };
        log::info!("event=mcp.sse.opened server={server}");
        let agent = http_agent(HttpTimeouts {
            connect: connect_timeout,
            global: Some(connect_timeout.max(REPLY_TIMEOUT)),
            per_read: None,
        });
        let active = Arc::new(AtomicUsize::new(0));
        {
            let (agent, endpoint, headers) = (agent.clone(), endpoint.clone(), spec.headers.clone());
            let inbox_w = Arc::downgrade(&inbox);
            let srv = server.to_string();
            inbox.set_replier(Box::new(move |line| {
                if active.fetch_add(1, Ordering::SeqCst) >= MAX_REPLIERS {
                    active.fetch_sub(1, Ordering::SeqCst);
                    log::warn!("mcp {srv}: too many pending replies, dropping one");
                    return;
                }
                let (agent, endpoint, headers, inbox_w, active) =
                    (agent.clone(), endpoint.clone(), headers.clone(), inbox_w.clone(), active.clone());
                let spawned = spawn_named(format!("mcp-{srv}-reply"), move || {
                    if let Some(inbox) = inbox_w.upgrade() {
                        if let Err(e) = post(&agent, &endpoint, &headers, line, REPLY_TIMEOUT, &inbox) {
                            log::debug!("mcp {}: reply failed: {e}", inbox.server());
                        }
                    }
                    active.fetch_sub(1, Ordering::SeqCst);
                });
                if spawned.is_err() {
                    log::warn!("mcp {srv}: cannot start a reply thread");
                }
            }));
        }
        Ok(SseTransport {
            server: server.to_string(),
            inbox,
            agent,
            endpoint,
            headers: spec.headers.clone(),
            closed,
            stream_agent,
            reader: Mutex::new(Some(reader)),
        })
    }
}

impl Transport for SseTransport {
    fn send(&self, msg: String, _kind: Outgoing<'_>, timeout: Duration) -> Result<()> {
        if let Some(reason) = self.inbox.closed_reason() {
            return Err(Error::Closed(reason));
        }
        post(&self.agent, &self.endpoint, &self.headers, msg, timeout, &self.inbox)
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.inbox.close("connection closed");
        // The reader is usually blocked in a read: closing its socket ends it.
        self.stream_agent.clone().shutdown();
        if let Some(h) = lock(&self.reader).take() {
            join_until(h, Instant::now() + Duration::from_millis(500));
        }
        log::info!("event=mcp.sse.closed server={}", self.server);
    }
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.close();
    }
}

fn post(
    agent: &ureq::Agent,
    endpoint: &str,
    headers: &BTreeMap<String, String>,
    msg: String,
    timeout: Duration,
    inbox: &Inbox,
) -> Result<()> {
    // The endpoint is on the configured origin (checked when it was announced).
    let (resp, _) = send_following(inbox, endpoint, endpoint, "POST", "POST to the message endpoint", |url| {
        let mut req =
            agent.post(url).config().timeout_global(Some(timeout)).build().header("Content-Type", "application/json");
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        req.send(msg.as_str())
    })?;
    let status = resp.status().as_u16();
    let body = read_body_text(resp.into_body(), MAX_POST_BODY).unwrap_or_default();
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(Error::Status { status, detail: body_snippet(inbox, &body) })
    }
}

fn stream_loop(
    agent: &ureq::Agent,
    spec: &HttpSpec,
    base: &Origin,
    inbox: &Inbox,
    closed: &AtomicBool,
    ep_tx: &crossbeam_channel::Sender<Result<String>>,
    connect_timeout: Duration,
) {
    let opened = send_following(inbox, &spec.url, &spec.url, "GET", "opening the event stream", |url| {
        let mut req = agent
            .get(url)
            .config()
            .timeout_recv_response(Some(connect_timeout))
            .build()
            .header("Accept", "text/event-stream")
            .header("Cache-Control", "no-cache");
        for (k, v) in &spec.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        req.call()
    });
    let (resp, stream_url) = match opened {
        Ok(r) => r,
        Err(e) => {
            let _ = ep_tx.try_send(Err(e));
            return;
        }
    };
    let status = resp.status().as_u16();
    if status != 200 {
        let body = read_body_text(resp.into_body(), MAX_POST_BODY).unwrap_or_default();
        let _ = ep_tx.try_send(Err(Error::Status { status, detail: body_snippet(inbox, &body) }));
        return;
    }
    let ctype = content_type(&resp);
    if !ctype.starts_with("text/event-stream") {
        let _ = ep_tx.try_send(Err(Error::Protocol(format!(
            "expected an event stream, got content type '{}'",
            inbox.redact(&ctype)
        ))));
        return;
    }
    let mut reader = SseReader::new(resp.into_body().into_reader());
    let mut announced = false;
    let reason = loop {
        if closed.load(Ordering::SeqCst) {
            return;
        }
        match reader.next_event() {
            Ok(Some(ev)) => match ev.event.as_str() {
                "endpoint" if !announced => {
                    announced = true;
                    let _ = ep_tx.try_send(endpoint_url(base, &stream_url, &ev.data, inbox));
                }
                "message" => inbox.handle_text(&ev.data),
                _ => {}
            },
            Ok(None) => break "server closed the event stream".to_string(),
            Err(e) => break format!("event stream failed: {e}"),
        }
    };
    if !announced {
        let _ = ep_tx.try_send(Err(Error::Closed(reason.clone())));
    }
    if !closed.load(Ordering::SeqCst) {
        log::warn!("event=mcp.sse.ended server={} reason={:?}", inbox.server(), inbox.redact(&reason));
        inbox.close(&reason);
    }
}

/// Resolves the announced endpoint against the URL that answered the stream (after same-origin
/// redirects) and insists on the configured origin (a server must not redirect our messages,
/// with their headers, elsewhere).
fn endpoint_url(base: &Origin, base_text: &str, data: &str, inbox: &Inbox) -> Result<String> {
    let resolved =
        url::join(base_text, data).ok_or_else(|| Error::Protocol("endpoint event is not a valid URI".into()))?;
    match Origin::of(&resolved) {
        Some(o) if o == *base => Ok(resolved),
        _ => Err(Error::Protocol(format!(
            "endpoint '{}' is not on the server's origin",
            inbox.redact(crate::util::text::take_chars(&resolved, 200))
        ))),
    }
}
