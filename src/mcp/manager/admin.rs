//! Administration: the server list, catalog create / update / delete over typed, once-validated
//! entries ([`ServerEntry`]; a change closes the connection, forgets caches and purges
//! activations), and the review of tools held by pinning (`changes`, their approval). Runs on
//! HTTP handlers; `is_held` also on turn workers.

use std::sync::Arc;

use super::{Live, McpManager, SlotState};
use crate::mcp::cache;
use crate::mcp::catalog::ServerConfig;
use crate::mcp::client::ToolInfo;
use crate::mcp::names::wrapped_name;
use crate::mcp::pins;
use crate::mcp::validate::ServerEntry;
use crate::mcp::views::{Change, ChangeList, ServerList, ServerView, Version};
use crate::mcp::McpError;
use crate::util::sync::lock;

impl McpManager {
    /// `GET /api/mcp/servers`.
    pub fn list(&self) -> ServerList {
        let cfgs: Vec<ServerConfig> = lock(&self.catalog).all().into_iter().cloned().collect();
        ServerList { servers: cfgs.iter().map(|c| self.view(c)).collect() }
    }

    /// One server as the API shows it.
    pub fn dto(&self, name: &str) -> Result<ServerView, McpError> {
        let cfg = self.configured(name)?;
        Ok(self.view(&cfg))
    }

    /// `POST /api/mcp/servers`: adds a user server, disconnected (its name must be free).
    pub fn create(&self, name: &str, entry: ServerEntry) -> Result<ServerView, McpError> {
        let _m = lock(&self.mutation);
        let cfg = lock(&self.catalog).create(name, entry)?;
        cache::delete_cache(&self.cfg.data_dir, &cfg.name);
        let slot = self.slot(&cfg.name);
        *lock(&slot.state) = SlotState::default();
        self.bump();
        log::info!("event=mcp.server.created server={}", cfg.name);
        self.catalog_changed();
        Ok(self.view(&cfg))
    }

    /// `PUT /api/mcp/servers/{name}`: replaces the config, closes the connection, purges
    /// activations, deletes the cache.
    pub fn update(&self, name: &str, entry: ServerEntry) -> Result<ServerView, McpError> {
        let _m = lock(&self.mutation);
        let cfg = lock(&self.catalog).update(name, entry)?;
        self.disconnect_inner(name, true);
        self.drop_oauth(name, false);
        cache::delete_cache(&self.cfg.data_dir, name);
        let slot = self.slot(name);
        *lock(&slot.state) = SlotState::default();
        self.bump();
        log::info!("event=mcp.server.updated server={name}");
        self.catalog_changed();
        Ok(self.view(&cfg))
    }

    /// `DELETE /api/mcp/servers/{name}`.
    pub fn delete(&self, name: &str) -> Result<(), McpError> {
        let _m = lock(&self.mutation);
        lock(&self.catalog).check_mutable(name)?;
        self.disconnect_inner(name, true);
        self.drop_oauth(name, true);
        cache::delete_cache(&self.cfg.data_dir, name);
        let _ = std::fs::remove_file(pins::pins_path(&self.cfg.data_dir, name));
        lock(&self.catalog).delete(name)?;
        lock(&self.slots).remove(name);
        self.bump();
        log::info!("event=mcp.server.deleted server={name}");
        self.catalog_changed();
        Ok(())
    }

    /// `GET /api/mcp/servers/{name}/changes`: each held tool's approved and new version.
    pub(crate) fn changes(&self, name: &str) -> Result<ChangeList, McpError> {
        let cfg = self.configured(name)?;
        let p = self.pins_of(&cfg);
        let changes = p
            .pending
            .iter()
            .map(|(tool, new)| Change {
                name: wrapped_name(name, tool),
                new: Version::of(new),
                old: p.tools.get(tool).map(Version::of),
                original_name: tool.clone(),
            })
            .collect();
        Ok(ChangeList { changes, server: name.to_string() })
    }

    /// `POST /api/mcp/servers/{name}/changes/approve`: pins the pending versions of `only`
    /// (original names; all when `None`) and, when connected, registers them at once.
    pub(crate) fn approve_changes(&self, name: &str, only: Option<&[String]>) -> Result<ChangeList, McpError> {
        let cfg = self.configured(name)?;
        let slot = self.slot(name);
        let _c = lock(&slot.connect);
        let mut p = self.pins_of(&cfg);
        let approved = p.approve(only);
        if !approved.is_empty() {
            p.save(&self.cfg.data_dir, name).map_err(McpError::NotSaved)?;
            log::info!("event=mcp.tools.approved server={name} tools={}", approved.len());
            let current = lock(&slot.state).live.clone();
            if let Some(live) = current {
                let held = p.held_among(&live.listed);
                let accepted: Vec<ToolInfo> = live.listed.iter().filter(|t| !held.contains(&t.name)).cloned().collect();
                let fp = cache::fingerprint(&lock(&self.catalog).runtime_spec(&cfg));
                self.write_cache_for(name, &fp, &accepted);
                let fresh = Arc::new(Live {
                    client: live.client.clone(),
                    tools: self.register(name, &accepted),
                    listed: live.listed.clone(),
                    held,
                });
                lock(&slot.state).live = Some(fresh);
            }
            self.bump();
        }
        drop(_c);
        self.changes(name)
    }

    /// Whether `tool` (original name) of `server` has a change waiting for approval.
    pub(crate) fn is_held(&self, server: &str, tool: &str) -> bool {
        self.server_config(server).is_some_and(|c| self.pins_of(&c).pending.contains_key(tool))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::mcp::catalog::Catalog;
    use crate::mcp::client::ClientConfig;
    use crate::mcp::manager::ManagerConfig;

    fn entry(v: Value) -> ServerEntry {
        serde_json::from_value(v).unwrap()
    }

    fn wire(v: &impl serde::Serialize) -> String {
        serde_json::to_string(v).unwrap()
    }

    /// The bodies of `/api/mcp/servers…` byte for byte (keys in today's order), from a
    /// catalog with a built-in stdio entry, a user SSE entry with a header and a tool cache,
    /// and a user entry whose connect fails.
    #[test]
    fn http_bodies_are_pinned_byte_for_byte() {
        let root = std::env::temp_dir().join(format!("cc-mcp-wire-{}", crate::util::rand::hex(6)));
        let data = root.join("data");
        std::fs::create_dir_all(root.join("mcp_servers")).unwrap();
        std::fs::write(
            root.join("mcp_servers/mcp_config.json"),
            r#"{"local": {"command": "node", "args": ["x.js"], "description": "Local tools"}}"#,
        )
        .unwrap();
        let catalog = Catalog::load(Some(&root), &data).unwrap();
        let mgr = McpManager::new(ManagerConfig { client: ClientConfig::default(), data_dir: data.clone() }, catalog);

        let created = mgr
            .create(
                "weather",
                entry(json!({"display_name": "Weather", "url": "https://mcp.example/sse",
                             "headers": {"X-Key": "secret-value", "Authorization": "Bearer t"}})),
            )
            .unwrap();
        assert_eq!(
            wire(&created),
            r#"{"builtin":false,"connected":false,"description":"","display_name":"Weather","headers":{"Authorization":"********","X-Key":"********"},"mutable":true,"name":"weather","status":"disconnected","status_error":null,"tool_count":0,"type":"sse","url":"https://mcp.example/sse"}"#
        );
        assert_eq!(
            wire(&mgr.tools_listing("weather").unwrap()),
            r#"{"display_name":"Weather","server":"weather","source":"none","status":"disconnected","status_error":null,"tool_count":0,"tools":[]}"#
        );
        let weather = mgr.server_config("weather").unwrap();
        let spec = lock(&mgr.catalog).runtime_spec(&weather);
        let tools = vec![
            ToolInfo {
                name: "forecast".into(),
                description: Some("Forecast".into()),
                input_schema: json!({"type": "object"}),
            },
            ToolInfo { name: "alerts".into(), description: None, input_schema: json!({}) },
        ];
        cache::write_cache(&data, "weather", &cache::fingerprint(&spec), &tools).unwrap();
        assert_eq!(
            wire(&mgr.tools_listing("weather").unwrap()),
            r#"{"display_name":"Weather","server":"weather","source":"cache","status":"disconnected","status_error":null,"tool_count":0,"tools":[{"callable":false,"description":"Forecast","input_schema":{"type":"object"},"name":"mcp_weather_forecast","original_name":"forecast","source":"cache"},{"callable":false,"description":"","input_schema":{},"name":"mcp_weather_alerts","original_name":"alerts","source":"cache"}]}"#
        );

        // A closed port on loopback: the connect fails at once with a status line.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        mgr.create("dead", entry(json!({"display_name": "Dead", "url": format!("http://127.0.0.1:{port}/sse")})))
            .unwrap();
        let failed = wire(&mgr.connect("dead").unwrap());
        let prefix = r#"{"builtin":false,"connected":false,"description":"","display_name":"Dead","headers":{},"mutable":true,"name":"dead","status":"error","status_error":"ConnectError: "#;
        let suffix = format!(r#"","tool_count":0,"type":"sse","url":"http://127.0.0.1:{port}/sse"}}"#);
        assert!(failed.starts_with(prefix) && failed.ends_with(&suffix), "{failed}");
        let dead = format!(
            r#"{{"builtin":false,"connected":false,"description":"","display_name":"Dead","headers":{{}},"mutable":true,"name":"dead","status":"disconnected","status_error":null,"tool_count":0,"type":"sse","url":"http://127.0.0.1:{port}/sse"}}"#
        );
        assert_eq!(wire(&mgr.disconnect("dead").unwrap()), dead);

        assert_eq!(
            wire(&mgr.list()),
            format!(
                r#"{{"servers":[{dead},{{"builtin":true,"connected":false,"description":"Local tools","display_name":"local","headers":{{}},"mutable":false,"name":"local","status":"disconnected","status_error":null,"tool_count":0,"type":"stdio","url":""}},{}]}}"#,
                wire(&created)
            )
        );
        assert!(matches!(mgr.dto("nope").unwrap_err(), McpError::NotFound(n) if n == "nope"));
        assert_eq!(created.auth, None, "no OAuth state on an SSE server");
        assert!(matches!(mgr.tools_listing("nope").unwrap_err(), McpError::NotFound(n) if n == "nope"));
        std::fs::remove_dir_all(root).unwrap();
    }
}
