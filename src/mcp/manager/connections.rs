//! The lifecycle of each server's connection: explicit and lazy connect (handshake +
//! `tools/list`, checked against the pins, before "connected"), coalesced per server by its
//! connect lock; disconnect (closes the transport, unregisters its tools, asks the host to purge
//! activations); the `tools/list_changed` refresh; noticing a dead connection (status with
//! redacted errors); the on-demand reconnect of a call (on an `mcp-<server>-reconnect` thread,
//! waited for by the calling worker); shutdown. Runs on HTTP handlers and turn workers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Live, McpManager, Slot, GONE, NOT_CONFIGURED};
use crate::mcp::auth;
use crate::mcp::cache;
use crate::mcp::catalog::ServerConfig;
use crate::mcp::client::{AuthHandle, Client, ToolInfo};
use crate::mcp::status::{redact_line, redact_status, Status};
use crate::mcp::tool::LiveTool;
use crate::mcp::views::ServerView;
use crate::mcp::{Error, McpError, Result};
use crate::util::cancel::CancelToken;
use crate::util::sync::lock;
use crate::util::text;

impl McpManager {
    /// `POST /api/mcp/servers/{name}/connect`: the server's view after one connect attempt
    /// (`error` with its status line when it failed).
    pub fn connect(&self, name: &str) -> Result<ServerView, McpError> {
        let cfg = self.configured(name)?;
        let _ = self.connect_server(name);
        Ok(self.view(&cfg))
    }

    /// `POST /api/mcp/servers/{name}/disconnect`.
    pub fn disconnect(&self, name: &str) -> Result<ServerView, McpError> {
        let cfg = self.configured(name)?;
        self.disconnect_inner(name, true);
        lock(&self.slot(name).state).user_off = true;
        Ok(self.view(&cfg))
    }

    /// Connects (or reuses the live connection) and returns the server's tools. The error is
    /// the redacted status line. Used by the API, `mcp_prepare`, per-turn selection and skills.
    pub fn connect_server(&self, name: &str) -> std::result::Result<Vec<Arc<LiveTool>>, String> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err("server is shutting down".into());
        }
        let slot = self.slot(name);
        let seen = slot.attempts.load(Ordering::SeqCst);
        let _c = lock(&slot.connect);
        let Some(cfg) = self.server_config(name) else {
            let mut st = lock(&slot.state);
            st.status = Status::Error;
            st.error = Some(NOT_CONFIGURED.into());
            return Err(NOT_CONFIGURED.into());
        };
        if let (Status::Connected, _, Some(live)) = self.observe(name) {
            if live.client.take_list_changed() {
                return Ok(self.relist(name, &slot, live));
            }
            return Ok(live.tools.clone());
        }
        if slot.attempts.load(Ordering::SeqCst) != seen {
            // Another caller's attempt failed while this one waited: one attempt for all.
            if let (Status::Error, Some(e), _) = self.observe(name) {
                return Err(e);
            }
        }
        {
            let mut st = lock(&slot.state);
            st.status = Status::Connecting;
            st.error = None;
            st.user_off = false;
        }
        let spec = lock(&self.catalog).runtime_spec(&cfg);
        let fingerprint = cache::fingerprint(&spec);
        let secrets = cfg.secrets();
        let started = std::time::Instant::now();
        let mut client_cfg = self.cfg.client.clone();
        client_cfg.auth = self.oauth_for(&cfg).map(|o| AuthHandle(o as Arc<dyn auth::Authorizer>));
        let outcome = match Client::connect(name, &spec, client_cfg) {
            Err(e) => Err(Failure::Handshake(e)),
            Ok(client) => match client.list_tools() {
                Ok(tools) => Ok((client, tools)),
                Err(e) => {
                    client.close();
                    Err(Failure::Discovery(e))
                }
            },
        };
        slot.attempts.fetch_add(1, Ordering::SeqCst);
        match outcome {
            Ok((client, tools)) => {
                let (accepted, held) = self.accept(&cfg, &tools);
                self.write_cache_for(name, &fingerprint, &accepted);
                let live = Arc::new(Live {
                    client: Arc::new(client),
                    tools: self.register(name, &accepted),
                    listed: tools,
                    held,
                });
                let out = live.tools.clone();
                {
                    let mut st = lock(&slot.state);
                    st.status = Status::Connected;
                    st.error = None;
                    st.live = Some(live);
                    st.auth_required = false;
                }
                self.bump();
                log::info!(
                    "event=mcp.connected server={name} tools={} duration_ms={}",
                    out.len(),
                    started.elapsed().as_millis()
                );
                Ok(out)
            }
            Err(e) => {
                let needs_auth = matches!(
                    &e,
                    Failure::Handshake(Error::AuthorizationRequired(_))
                        | Failure::Discovery(Error::AuthorizationRequired(_))
                );
                let msg = match &e {
                    Failure::Handshake(e) => redact_status(e, &secrets),
                    Failure::Discovery(e) => {
                        let line = format!("{}: tool discovery failed ({e})", e.kind());
                        redact_line(&line, &secrets)
                    }
                };
                let msg = if msg.trim().is_empty() { "MCP connection failed".to_string() } else { msg };
                log::warn!("event=mcp.connect.failed server={name} error={msg:?}");
                let mut st = lock(&slot.state);
                st.status = Status::Error;
                st.error = Some(msg.clone());
                st.live = None;
                st.auth_required = needs_auth;
                Err(msg)
            }
        }
    }

    /// Checks a fresh listing against the server's pins (recording new tools and changes) and
    /// splits it into the tools to register and the original names held for approval.
    fn accept(&self, cfg: &ServerConfig, tools: &[ToolInfo]) -> (Vec<ToolInfo>, Vec<String>) {
        let mut p = self.pins_of(cfg);
        let (held, changed) = p.check(tools);
        if changed {
            if let Err(e) = p.save(&self.cfg.data_dir, &cfg.name) {
                log::warn!("event=mcp.pins.write_failed server={} error_kind={:?}", cfg.name, e.kind());
            }
        }
        if !held.is_empty() {
            log::warn!("event=mcp.tools.changed server={} held={}", cfg.name, held.len());
        }
        (tools.iter().filter(|t| !held.contains(&t.name)).cloned().collect(), held)
    }

    /// Assigns names and builds wrappers for `tools` of `server`, forgetting names of tools
    /// that disappeared.
    pub(super) fn register(&self, server: &str, tools: &[ToolInfo]) -> Vec<Arc<LiveTool>> {
        let mut names = lock(&self.names);
        let mut out: Vec<Arc<LiveTool>> =
            tools.iter().map(|t| Arc::new(LiveTool::new(names.assign(server, &t.name), server, t))).collect();
        let keep: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
        let stale: Vec<String> =
            names.remove_server(server).into_iter().filter(|n| !keep.contains(&n.as_str())).collect();
        // remove_server dropped every name: put the kept ones back in the same order.
        for t in &out {
            names.assign(server, &t.original_name);
        }
        drop(names);
        if !stale.is_empty() {
            log::debug!("mcp {server}: {} tools gone after refresh", stale.len());
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Lists the tools of a live connection again (after `tools/list_changed`); keeps the old
    /// list on failure. Caller holds the slot's connect lock and has consumed the flag.
    pub(super) fn relist(&self, name: &str, slot: &Slot, live: Arc<Live>) -> Vec<Arc<LiveTool>> {
        match live.client.list_tools() {
            Ok(tools) => {
                let Some(c) = self.server_config(name) else { return live.tools.clone() };
                let (accepted, held) = self.accept(&c, &tools);
                let fp = cache::fingerprint(&lock(&self.catalog).runtime_spec(&c));
                self.write_cache_for(name, &fp, &accepted);
                let fresh = Arc::new(Live {
                    client: live.client.clone(),
                    tools: self.register(name, &accepted),
                    listed: tools,
                    held,
                });
                let out = fresh.tools.clone();
                lock(&slot.state).live = Some(fresh);
                self.bump();
                log::info!("event=mcp.tools.refreshed server={name} tools={}", out.len());
                out
            }
            Err(e) => {
                log::warn!("event=mcp.tools.refresh_failed server={name} error={:?}", redact_status(&e, &[]));
                live.tools.clone()
            }
        }
    }

    pub(super) fn write_cache_for(&self, name: &str, fingerprint: &str, tools: &[ToolInfo]) {
        if let Err(e) = cache::write_cache(&self.cfg.data_dir, name, fingerprint, tools) {
            log::warn!("event=mcp.cache.write_failed server={name} error_kind={:?}", e.kind());
        }
    }

    pub(super) fn disconnect_inner(&self, name: &str, purge: bool) {
        let slot = self.slot(name);
        let _c = lock(&slot.connect);
        let live = {
            let mut st = lock(&slot.state);
            st.status = Status::Disconnected;
            st.error = None;
            st.live.take()
        };
        let removed = lock(&self.names).remove_server(name);
        if let Some(live) = live {
            live.client.close();
            log::info!("event=mcp.disconnected server={name}");
        }
        self.bump();
        if purge && !removed.is_empty() {
            let hook = lock(&self.purge_hook).clone();
            if let Some(hook) = hook {
                hook(&removed);
            }
        }
    }

    /// Status, error and live handle after noticing a dead connection.
    pub(super) fn observe(&self, name: &str) -> (Status, Option<String>, Option<Arc<Live>>) {
        let slot = self.slot(name);
        let dead = {
            let mut st = lock(&slot.state);
            match &st.live {
                Some(live) if live.client.dead_reason().is_some() => {
                    let live = st.live.take();
                    st.status = Status::Disconnected;
                    st.error = Some(GONE.into());
                    live
                }
                _ => None,
            }
        };
        if let Some(live) = dead {
            log::warn!(
                "event=mcp.connection.lost server={name} reason={:?}",
                live.client.dead_reason().unwrap_or_default()
            );
            lock(&self.names).remove_server(name);
            live.client.close();
            self.bump();
        }
        let st = lock(&slot.state);
        (st.status, st.error.clone(), st.live.clone())
    }

    /// Whether `server` has a live connection now (a dead one is noticed first).
    pub fn is_connected(&self, server: &str) -> bool {
        matches!(self.observe(server), (Status::Connected, _, Some(_)))
    }

    pub(super) fn user_off(&self, server: &str) -> bool {
        lock(&self.slot(server).state).user_off
    }

    /// Connects `server` for a call of one of its tools, on a helper thread, so the caller
    /// waits at most the connect budget (connect + `tools/list`) and wakes on `cancel`.
    /// Concurrent callers share one attempt (the connect lock and `attempts` coalesce them).
    pub(crate) fn reconnect_for_call(
        self: &Arc<Self>,
        server: &str,
        cancel: &CancelToken,
    ) -> std::result::Result<(), String> {
        use crate::util::blocking::Stop;
        if self.user_off(server) {
            return Err("the user disconnected it; connect it in the MCP market or with mcp_prepare".into());
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (mgr, name) = (Arc::clone(self), server.to_string());
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-{}-reconnect", text::take_chars(server, 20)))
            .stack_size(256 * 1024)
            .spawn(move || {
                let _ = tx.send(mgr.connect_server(&name).map(|_| ()));
            });
        if let Err(e) = spawned {
            return Err(format!("cannot start the reconnect: {e}"));
        }
        let budget =
            self.cfg.client.connect_timeout + self.cfg.client.request_timeout + std::time::Duration::from_secs(2);
        // The wait of every blocking call of a turn (`util::blocking`); the connect itself ends
        // at its own timeouts, so the thread cannot outlive the budget by much.
        match crate::util::blocking::wait(&rx, Some(cancel), std::time::Instant::now() + budget) {
            Ok(r) => r,
            Err(Stop::Gone) => Err("the reconnect ended without an answer".into()),
            Err(Stop::Cancelled) => Err("cancelled".into()),
            Err(Stop::Overdue) => Err(format!("no connection within {}s", crate::mcp::fmt_secs(budget))),
        }
    }

    /// Closes every connection (stdio children are killed and reaped), in parallel.
    pub fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let slots: Vec<(String, Arc<Slot>)> = lock(&self.slots).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let lives: Vec<(String, Arc<Live>)> = slots
            .iter()
            .filter_map(|(n, s)| {
                let mut st = lock(&s.state);
                st.status = Status::Disconnected;
                st.live.take().map(|l| (n.clone(), l))
            })
            .collect();
        std::thread::scope(|scope| {
            for (name, live) in &lives {
                scope.spawn(move || {
                    live.client.close();
                    log::debug!("mcp {name}: closed at shutdown");
                });
            }
        });
    }
}

/// Distinguishes a failed handshake from a failed `tools/list` for the status line.
enum Failure {
    Handshake(Error),
    Discovery(Error),
}
