//! The bridge's line to the owner's CashCode (docs/acp.md §3): where it listens (read from the
//! same configuration the server reads), a server started in the background when none answers,
//! the WebSocket the `acp-ws` thread owns, and the few HTTP reads the bridge needs (the chat
//! list, a chat's messages, the models). A token, when set, travels in the `Authorization`
//! header only and is never printed.

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::WebSocket;

use crate::config::Config;

/// How long a server started by the bridge may take to listen.
const START_WAIT: Duration = Duration::from_secs(20);
/// Connect timeout to the server's own ports (loopback: anything slower is not a server).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// One HTTP read of the bridge (the chat list, a page of messages, the model discovery, which
/// asks the providers and is bounded by the server at 15 s).
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest HTTP answer read.
const MAX_HTTP_BYTES: u64 = 64 << 20;

/// Where the server is and how to show who we are.
pub(crate) struct Endpoint {
    ws: (String, u16),
    http: (String, u16),
    token: Option<String>,
    agent: ureq::Agent,
}

/// The address to dial for a listener bound to `host`: an unspecified bind is reached on
/// loopback.
fn dial_host(host: &str) -> String {
    match host.trim_matches(|c| c == '[' || c == ']') {
        "0.0.0.0" | "" => "127.0.0.1".to_string(),
        "::" => "::1".to_string(),
        h => h.to_string(),
    }
}

impl Endpoint {
    pub(crate) fn from_config(cfg: &Config) -> Endpoint {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(HTTP_TIMEOUT))
            .proxy(None)
            .user_agent(concat!("cashcode-acp/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Endpoint {
            ws: (dial_host(&cfg.ws_host), cfg.ws_port),
            http: (dial_host(&cfg.http_host), cfg.http_port),
            token: cfg.token.as_ref().map(|t| t.expose().clone()),
            agent,
        }
    }

    fn ws_addr(&self) -> io::Result<SocketAddr> {
        (self.ws.0.as_str(), self.ws.1)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the WebSocket host has no address"))
    }

    /// Whether something accepts connections on the WebSocket port.
    pub(crate) fn listening(&self) -> bool {
        self.ws_addr().is_ok_and(|a| TcpStream::connect_timeout(&a, CONNECT_TIMEOUT).is_ok())
    }

    /// Starts this binary as a server in the background with the bridge's own flags (so it
    /// reads the same configuration), detached from the editor's process group, and waits
    /// until it listens.
    pub(crate) fn start_server(&self, args: &[String], cfg: &Config) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the cashcode binary: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
        // The secret variables left the environment at start-up; give back the ones the
        // server uses, so it starts as it would from the same shell.
        if let Some(t) = &cfg.token {
            cmd.env("CASHCODE_TOKEN", t.expose());
        }
        if let Some(k) = &cfg.deepseek_api_key {
            cmd.env("DEEPSEEK_API_KEY", k.expose());
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot start cashcode: {e}"))?;
        let deadline = Instant::now() + START_WAIT;
        while Instant::now() < deadline {
            if self.listening() {
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "the CashCode server started for this editor exited at once ({status}); run `cashcode` in a terminal to see why"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("the CashCode server started for this editor did not listen within {} s", START_WAIT.as_secs()))
    }

    /// Opens the WebSocket; the caller owns it on one thread.
    pub(crate) fn open_ws(&self) -> Result<WebSocket<TcpStream>, String> {
        let addr = self.ws_addr().map_err(|e| format!("cannot resolve {}: {e}", self.ws.0))?;
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| format!("cannot reach CashCode at {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        let host = if self.ws.0.contains(':') { format!("[{}]", self.ws.0) } else { self.ws.0.clone() };
        let mut req = format!("ws://{host}:{}/", self.ws.1).into_client_request().map_err(|e| e.to_string())?;
        if let Some(t) = &self.token {
            let v = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| "the token is not a header value")?;
            req.headers_mut().insert("Authorization", v);
        }
        match tungstenite::client(req, stream) {
            Ok((ws, _)) => Ok(ws),
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
                Err(format!("CashCode refused the connection ({}): check CASHCODE_TOKEN", resp.status()))
            }
            Err(e) => Err(format!("WebSocket handshake with CashCode failed: {e}")),
        }
    }

    /// `GET /api<path>` as JSON; `Err((status, detail))` for an answer that is not 200.
    pub(crate) fn get(&self, path: &str) -> Result<Value, (u16, String)> {
        let host = if self.http.0.contains(':') { format!("[{}]", self.http.0) } else { self.http.0.clone() };
        let url = format!("http://{host}:{}/api{path}", self.http.1);
        let mut req = self.agent.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.call().map_err(|e| (0, format!("cannot reach CashCode's HTTP API: {e}")))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_HTTP_BYTES)
            .read_to_vec()
            .map_err(|e| (status, format!("unreadable answer from CashCode: {e}")))?;
        let body: Value =
            serde_json::from_slice(&bytes).map_err(|e| (status, format!("unreadable answer from CashCode: {e}")))?;
        if status == 200 {
            Ok(body)
        } else {
            let detail = body.get("detail").and_then(Value::as_str).unwrap_or("error").to_string();
            Err((status, detail))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_binds_are_dialled_on_loopback() {
        assert_eq!(dial_host("0.0.0.0"), "127.0.0.1");
        assert_eq!(dial_host("::"), "::1");
        assert_eq!(dial_host("[::]"), "::1");
        assert_eq!(dial_host("127.0.0.1"), "127.0.0.1");
        assert_eq!(dial_host("localhost"), "localhost");
    }
}
