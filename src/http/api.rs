//! The `/api` router: a pure function from [`Req`] to [`Resp`] over the services, dispatching
//! on the canonical segments the gate decided on. Each area keeps its handlers in its own
//! module; this file only dispatches.

use std::sync::Arc;

use serde::Serialize;

use super::gate::Target;
use super::{
    assets, headers, llm_routes, mcp_routes, memory_routes, project_routes, safety_routes, search_route, sessions,
    skills_routes, transfer_routes, Req, Resp,
};
use crate::agent::Agent;
use crate::config::Config;
use crate::llm::runtime::LlmRuntime;
use crate::mcp::manager::McpManager;
use crate::security::AccessPolicy;

/// Services the HTTP handlers use.
pub struct Api {
    pub(crate) config: Arc<Config>,
    pub(crate) policy: AccessPolicy,
    pub(crate) agent: Arc<Agent>,
    pub(crate) llm: Arc<LlmRuntime>,
    pub(crate) mcp: Arc<McpManager>,
    /// The WebSocket port actually bound (for `/api/client-config`).
    pub(crate) ws_port: u16,
    pub(crate) skills: Arc<crate::skills::service::SkillService>,
    pub(crate) evolution: Arc<crate::skills::evolution::Evolution>,
    pub(crate) dream: Arc<crate::memory_jobs::dream::DreamControl>,
    /// The `exec` confinement, for its read-only status.
    pub(crate) sandbox: Arc<crate::sandbox::Sandbox>,
    /// The index over every chat (`GET /api/search`).
    pub(crate) search: Arc<crate::search::Search>,
    /// The web client's files, read once.
    pub(crate) assets: assets::Cache,
    /// The stores the routes read and write directly (the use cases that keep the agent's
    /// state in step are `Agent` methods).
    pub(crate) chats: Arc<crate::store::chats::ChatStore>,
    pub(crate) memory: Arc<crate::store::memory_files::MemoryFiles>,
    pub(crate) projects: Arc<crate::projects::Projects>,
    pub(crate) approvals: Arc<crate::agent::approvals::Approvals>,
    /// The hub, for what it knows of running turns (`turn_seq`).
    pub(crate) events: Arc<dyn crate::bus::EventSink>,
}

impl Api {
    /// Dispatches on the gate's decision (the checks in `http::guarded` have already run).
    pub fn route(&self, req: &Req) -> Resp {
        let path = match &req.target {
            Target::Api(p) => p,
            Target::Static(segments) => {
                let mut r = assets::serve(&self.assets, self.config.client_dir.as_deref(), &req.method, segments);
                r.headers
                    .push(("Content-Security-Policy".into(), headers::client_csp(&self.page_host(req), self.ws_port)));
                return r;
            }
            Target::Refused(reason) => return Resp::detail(400, reason),
        };
        if path.trailing_slash {
            let mut r = Resp::text(307, "");
            r.headers.push(("Location".into(), req.path.trim_end_matches('/').to_string()));
            return r;
        }
        let m = req.method.as_str();
        match path.segs().as_slice() {
            ["health"] => only(m, &["GET"]).unwrap_or_else(|| Resp::ok(&Health { service: "cashcode", status: "ok" })),
            ["client-config"] => only(m, &["GET"]).unwrap_or_else(|| self.client_config(req)),
            ["sessions", rest @ ..] => sessions::route(self, m, rest, req),
            ["settings", "llm", rest @ ..] => llm_routes::route(self, m, rest, req),
            ["settings", "prices"] => super::usage_routes::route_prices(self, m, req),
            ["settings", "budgets"] => super::usage_routes::route_budgets(self, m, req),
            ["usage", rest @ ..] => super::usage_routes::route_usage(self, m, rest, req),
            ["settings", "approvals"] => safety_routes::route_approvals(self, m, req),
            ["settings", "approvals", "grants"] => safety_routes::route_grants(self, m, req),
            ["settings", "projects"] => project_routes::route_settings(self, m, req),
            ["settings", "sandbox"] => only(m, &["GET"]).unwrap_or_else(|| Resp::ok(self.sandbox.status())),
            ["mcp", "servers", rest @ ..] => mcp_routes::route(self, m, rest, req),
            ["mcp", "oauth", "callback"] => mcp_routes::oauth_callback(self, m, req),
            ["skills", rest @ ..] => skills_routes::route(self, m, rest, req),
            ["skill-evolution", rest @ ..] => skills_routes::route_evolution(self, m, rest),
            ["memory", rest @ ..] => memory_routes::route(self, m, rest, req),
            ["search"] => only(m, &["GET"]).unwrap_or_else(|| search_route::search(self, req)),
            ["dream", rest @ ..] => memory_routes::route_dream(self, m, rest),
            ["export"] => only(m, &["GET"]).unwrap_or_else(|| transfer_routes::export_all(self, req)),
            ["import"] => only(m, &["POST"]).unwrap_or_else(|| transfer_routes::import(self, req)),
            _ => Resp::detail(404, "Not Found"),
        }
    }

    /// The host name the page was loaded from: its WebSocket goes there too, so cookies and
    /// origins line up (`/api/client-config` and the page's `connect-src` agree).
    fn page_host(&self, req: &Req) -> String {
        // Only name and address characters: the host is also written into a header value.
        let plain =
            |h: &String| h.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
        req.header("host").and_then(crate::util::url::host).filter(plain).unwrap_or_else(|| self.config.ws_host.clone())
    }

    fn client_config(&self, req: &Req) -> Resp {
        Resp::ok(&ClientConfig { ws_url: format!("ws://{}:{}/", self.page_host(req), self.ws_port) })
    }
}

// The two bodies this file answers itself. Fields in key order: they were once `serde_json`
// maps (sorted keys) and clients keep seeing the same bytes.

/// `GET /api/health`.
#[derive(Serialize)]
struct Health {
    service: &'static str,
    status: &'static str,
}

/// `GET /api/client-config`: where the page's WebSocket connects.
#[derive(Serialize)]
struct ClientConfig {
    ws_url: String,
}

/// 405 unless `method` is one of `allowed`.
pub(crate) fn only(method: &str, allowed: &[&str]) -> Option<Resp> {
    (!allowed.contains(&method)).then(|| Resp::detail(405, "Method Not Allowed"))
}
