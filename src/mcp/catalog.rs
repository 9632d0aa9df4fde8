//! MCP server catalog: the read-only built-in `mcp_servers/mcp_config.json` and the user's
//! `<data>/mcp/servers.json` (SSE and Streamable HTTP entries): loading, create / update /
//! delete with persistence, and the runtime transport specs. Entry rules live in
//! [`super::validate`], the tool-schema cache in [`super::cache`].
//!
//! Pure data plus file I/O; the manager holds the one `Catalog` behind its mutation lock, so
//! writes are serialised. Runs on whichever thread calls the manager.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::refusal::McpError;
use super::transport::{HttpSpec, StdioSpec, TransportSpec};
use super::validate::{check_headers, check_url, name_ok, validate_user, ServerEntry, MSG_NAME};
use crate::util::body::summary;
use crate::util::fsx;
use crate::util::text;

/// Transport kind of an entry. `streamable_http` is our addition (the original lacks it).
/// Serialises as [`Kind::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    Stdio,
    Sse,
    StreamableHttp,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Stdio => "stdio",
            Kind::Sse => "sse",
            Kind::StreamableHttp => "streamable_http",
        }
    }

    pub(super) fn parse(s: &str) -> Option<Kind> {
        match s {
            "stdio" => Some(Kind::Stdio),
            "sse" => Some(Kind::Sse),
            "streamable_http" | "streamableHttp" | "streamable-http" | "http" => Some(Kind::StreamableHttp),
            _ => None,
        }
    }
}

/// One configured server (built-in or user).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerConfig {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) display_name: String,
    pub(crate) description: String,
    /// stdio only.
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    /// HTTP kinds only (`""` for stdio).
    pub(crate) url: String,
    /// Stored in clear; every API view masks the values.
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) builtin: bool,
}

impl ServerConfig {
    /// Values that must never leave the process.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut s: Vec<String> = self.headers.values().cloned().collect();
        s.extend(self.env.iter().filter(|(k, _)| crate::secrets::is_secret_name(k)).map(|(_, v)| v.clone()));
        s
    }
}

/// Why a catalog file cannot be used (startup fails on it, as in the original).
#[derive(Debug)]
pub struct LoadError(pub String);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// Both catalogs plus where the user one lives.
#[derive(Debug, Clone)]
pub struct Catalog {
    builtin: BTreeMap<String, ServerConfig>,
    user: BTreeMap<String, ServerConfig>,
    user_path: PathBuf,
    project_root: Option<PathBuf>,
}

/// `<data>/mcp/servers.json`.
pub(crate) fn user_catalog_path(data_dir: &Path) -> PathBuf {
    data_dir.join("mcp").join("servers.json")
}

impl Catalog {
    /// Loads `<project>/mcp_servers/mcp_config.json` (missing -> empty) and the user file
    /// (missing -> empty). Any invalid entry, or a user name equal to a built-in, is an error.
    pub fn load(project_root: Option<&Path>, data_dir: &Path) -> Result<Catalog, LoadError> {
        let mut builtin = BTreeMap::new();
        if let Some(root) = project_root {
            let path = root.join("mcp_servers").join("mcp_config.json");
            let text = fsx::read_opt(&path).map_err(|e| LoadError(format!("cannot read {}: {e}", path.display())))?;
            if let Some(text) = text {
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| LoadError(format!("{} is not valid JSON: {e}", path.display())))?;
                let Value::Object(entries) = v else {
                    return Err(LoadError(format!("{} must be a JSON object", path.display())));
                };
                for (name, entry) in entries {
                    let cfg = parse_builtin(&name, &entry)
                        .map_err(|e| LoadError(format!("built-in MCP server '{name}' is invalid: {e}")))?;
                    builtin.insert(name, cfg);
                }
            }
        }
        let user_path = user_catalog_path(data_dir);
        let mut user = BTreeMap::new();
        let text =
            fsx::read_opt(&user_path).map_err(|e| LoadError(format!("cannot read {}: {e}", user_path.display())))?;
        if let Some(text) = text {
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| LoadError(format!("{} is not valid JSON: {e}", user_path.display())))?;
            let Value::Object(entries) = v else {
                return Err(LoadError(format!("{} must be a JSON object", user_path.display())));
            };
            for (name, entry) in entries {
                if builtin.contains_key(&name) {
                    return Err(LoadError(format!("user MCP server '{name}' has the name of a built-in server")));
                }
                let mut body = match entry {
                    Value::Object(m) => m,
                    _ => return Err(LoadError(format!("user MCP server '{name}' is not an object"))),
                };
                if let Some(d) = body.remove("displayName") {
                    body.entry("display_name").or_insert(d);
                }
                // The key is the name; a `name` inside the entry is not read.
                body.remove("name");
                let invalid = |e: &dyn fmt::Display| LoadError(format!("user MCP server '{name}' is invalid: {e}"));
                let entry =
                    ServerEntry::from_json(&Value::Object(body)).map_err(|issues| invalid(&summary(&issues)))?;
                let cfg = validate_user(&name, entry, None).map_err(|e| invalid(&e))?;
                user.insert(cfg.name.clone(), cfg);
            }
        }
        Ok(Catalog { builtin, user, user_path, project_root: project_root.map(Path::to_path_buf) })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&ServerConfig> {
        self.builtin.get(name).or_else(|| self.user.get(name))
    }

    /// Every entry, sorted by name (the catalog order of listings and search).
    pub(crate) fn all(&self) -> Vec<&ServerConfig> {
        let mut v: Vec<&ServerConfig> = self.builtin.values().chain(self.user.values()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// `POST /api/mcp/servers`: validates, refuses duplicates, persists.
    pub(crate) fn create(&mut self, name: &str, entry: ServerEntry) -> Result<ServerConfig, McpError> {
        let cfg = validate_user(name, entry, None)?;
        if self.get(&cfg.name).is_some() {
            return Err(McpError::Exists(cfg.name));
        }
        self.user.insert(cfg.name.clone(), cfg.clone());
        if let Err(e) = self.save_user() {
            self.user.remove(&cfg.name);
            return Err(McpError::NotSaved(e));
        }
        Ok(cfg)
    }

    /// `PUT /api/mcp/servers/{name}`: unknown, built-in, then the rules; masked headers keep
    /// the stored secrets.
    pub(crate) fn update(&mut self, name: &str, entry: ServerEntry) -> Result<ServerConfig, McpError> {
        self.check_mutable(name)?;
        let old = self.user.get(name).cloned();
        let cfg = validate_user(name, entry, old.as_ref())?;
        self.user.insert(name.to_string(), cfg.clone());
        if let Err(e) = self.save_user() {
            if let Some(old) = old {
                self.user.insert(name.to_string(), old);
            }
            return Err(McpError::NotSaved(e));
        }
        Ok(cfg)
    }

    /// `DELETE /api/mcp/servers/{name}`.
    pub(crate) fn delete(&mut self, name: &str) -> Result<ServerConfig, McpError> {
        self.check_mutable(name)?;
        let old = self.user.remove(name).ok_or_else(|| McpError::NotFound(name.to_string()))?;
        if let Err(e) = self.save_user() {
            self.user.insert(name.to_string(), old);
            return Err(McpError::NotSaved(e));
        }
        Ok(old)
    }

    /// Unknown names are not found; built-ins are read-only.
    pub(crate) fn check_mutable(&self, name: &str) -> Result<(), McpError> {
        if self.builtin.contains_key(name) {
            return Err(McpError::ReadOnly);
        }
        if !self.user.contains_key(name) {
            return Err(McpError::NotFound(name.to_string()));
        }
        Ok(())
    }

    fn save_user(&self) -> std::io::Result<()> {
        #[derive(Serialize)]
        struct Entry<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            display_name: &'a str,
            description: &'a str,
            url: &'a str,
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            headers: &'a BTreeMap<String, String>,
        }
        let entries: BTreeMap<&str, Entry<'_>> = self
            .user
            .values()
            .map(|c| {
                (
                    c.name.as_str(),
                    Entry {
                        kind: c.kind.as_str(),
                        display_name: &c.display_name,
                        description: &c.description,
                        url: &c.url,
                        headers: &c.headers,
                    },
                )
            })
            .collect();
        let mut text = serde_json::to_string_pretty(&entries).map_err(std::io::Error::other)?;
        text.push('\n');
        // Header values are secrets in clear text: keep the file private.
        fsx::write_atomic(&self.user_path, text.as_bytes(), true)
    }

    /// What the transport needs: for stdio, args that name existing files under the project
    /// root become absolute (flags such as `-m` are left alone); the cwd is the project root;
    /// a built-in entry whose command is a bare `python`/`python3` runs the checkout's virtual
    /// environment when there is one (see [`venv_python`]).
    pub(crate) fn runtime_spec(&self, cfg: &ServerConfig) -> TransportSpec {
        match cfg.kind {
            Kind::Stdio => TransportSpec::Stdio(StdioSpec {
                python: match &self.project_root {
                    Some(root) if cfg.builtin && matches!(cfg.command.as_str(), "python" | "python3") => {
                        Some(venv_python(root))
                    }
                    _ => None,
                },
                command: cfg.command.clone(),
                args: cfg
                    .args
                    .iter()
                    .map(|a| match &self.project_root {
                        Some(root) if Path::new(a).is_relative() && root.join(a).exists() => {
                            root.join(a).display().to_string()
                        }
                        _ => a.clone(),
                    })
                    .collect(),
                env: cfg.env.clone(),
                cwd: self.project_root.clone(),
            }),
            Kind::Sse => TransportSpec::Sse(HttpSpec { url: cfg.url.clone(), headers: cfg.headers.clone() }),
            Kind::StreamableHttp => {
                TransportSpec::StreamableHttp(HttpSpec { url: cfg.url.clone(), headers: cfg.headers.clone() })
            }
        }
    }
}

/// `<project>/.venv/bin/python`: the virtual environment `scripts/setup.sh` creates with the
/// pinned MCP SDK (a Debian/Ubuntu `python3` refuses `pip install`, PEP 668). Built-in entries
/// run `python` with it when it exists, as if the user had activated it; the transport checks
/// at every spawn, so creating or deleting `.venv` needs no restart.
pub fn venv_python(project_root: &Path) -> PathBuf {
    if cfg!(windows) {
        project_root.join(".venv").join("Scripts").join("python.exe")
    } else {
        project_root.join(".venv").join("bin").join("python")
    }
}

fn parse_builtin(name: &str, entry: &Value) -> Result<ServerConfig, String> {
    if !name_ok(name) {
        return Err(MSG_NAME.into());
    }
    let Value::Object(e) = entry else {
        return Err("entry must be an object".into());
    };
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").trim().to_string();
    let command = s("command");
    let url_text = s("url");
    let kind = match e.get("type").and_then(Value::as_str).map(str::trim) {
        Some(t) if !t.is_empty() => Kind::parse(t).ok_or_else(|| format!("unsupported type '{t}'"))?,
        _ if !command.is_empty() => Kind::Stdio,
        _ if url_text.trim_end_matches('/').ends_with("/sse") => Kind::Sse,
        _ if !url_text.is_empty() => Kind::StreamableHttp,
        _ => return Err("type cannot be inferred: set command or url".into()),
    };
    let args = match e.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string).ok_or("args must be a list of strings"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("args must be a list of strings".into()),
    };
    let env = match e.get("env") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())).ok_or("env values must be strings"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("env must be an object of strings".into()),
    };
    let (url, headers) = match kind {
        Kind::Stdio => {
            if command.is_empty() {
                return Err("stdio servers need a command".into());
            }
            (String::new(), BTreeMap::new())
        }
        Kind::Sse | Kind::StreamableHttp => {
            let headers = match e.get("headers") {
                None | Some(Value::Null) => BTreeMap::new(),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())).ok_or("header values must be strings"))
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("headers must be an object of strings".into()),
            };
            (
                check_url(&url_text).map_err(|e| e.to_string())?,
                check_headers(&headers, None).map_err(|e| e.to_string())?,
            )
        }
    };
    let display = s("display_name");
    let display = if display.is_empty() { name.to_string() } else { display };
    Ok(ServerConfig {
        name: name.to_string(),
        kind,
        display_name: text::take_chars(&display, 100).to_string(),
        description: text::take_chars(&s("description"), 1000).to_string(),
        command,
        args,
        env,
        url,
        headers,
        builtin: true,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mcp::cache::fingerprint;
    use crate::mcp::validate::MASK;

    fn entry(v: Value) -> ServerEntry {
        serde_json::from_value(v).unwrap()
    }

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("cc-mcp-cat-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn user_catalog_round_trip_keeps_secrets_and_masks_on_update() {
        let data = tmp();
        let mut cat = Catalog::load(None, &data).unwrap();
        let body = entry(json!({"display_name":"Weather","url":"https://mcp.example/sse",
                                "headers":{"Authorization":"Bearer real-secret"}}));
        assert_eq!(cat.create("weather", body.clone()).unwrap().headers["Authorization"], "Bearer real-secret");
        assert!(matches!(cat.create("weather", body).unwrap_err(), McpError::Exists(n) if n == "weather"));
        let text = std::fs::read_to_string(user_catalog_path(&data)).unwrap();
        assert_eq!(
            text,
            "{\n  \"weather\": {\n    \"type\": \"sse\",\n    \"display_name\": \"Weather\",\n    \"description\": \"\",\n    \"url\": \"https://mcp.example/sse\",\n    \"headers\": {\n      \"Authorization\": \"Bearer real-secret\"\n    }\n  }\n}\n"
        );
        let upd = entry(json!({"display_name":"W2","url":"https://mcp.example/sse","headers":{"Authorization":MASK}}));
        let updated = cat.update("weather", upd.clone()).unwrap();
        assert_eq!(updated.headers["Authorization"], "Bearer real-secret");
        assert!(
            serde_json::from_value::<ServerEntry>(json!({"name":"x"})).is_err(),
            "the name is not part of an entry"
        );
        assert!(matches!(cat.update("nope", upd).unwrap_err(), McpError::NotFound(n) if n == "nope"));
        let reloaded = Catalog::load(None, &data).unwrap();
        assert_eq!(reloaded.get("weather").unwrap().display_name, "W2");
        cat.delete("weather").unwrap();
        assert!(Catalog::load(None, &data).unwrap().get("weather").is_none());
        std::fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn builtin_catalog_is_read_only_and_collisions_fail_loading() {
        let root = tmp();
        let data = root.join("data");
        std::fs::create_dir_all(root.join("mcp_servers")).unwrap();
        std::fs::write(
            root.join("mcp_servers/mcp_config.json"),
            r#"{"local": {"command": "python", "args": ["mcp_servers/x.py", "-u"]},
                "js": {"command": "node", "args": ["mcp_servers/x.js"]},
                "remote": {"url": "http://127.0.0.1:8090/sse", "display_name": "Remote"}}"#,
        )
        .unwrap();
        std::fs::write(root.join("mcp_servers/x.py"), "").unwrap();
        let mut cat = Catalog::load(Some(&root), &data).unwrap();
        let local = cat.get("local").unwrap().clone();
        assert_eq!((local.kind, local.display_name.as_str(), local.builtin), (Kind::Stdio, "local", true));
        assert_eq!(cat.get("remote").unwrap().kind, Kind::Sse);
        let spec = cat.runtime_spec(&local);
        match &spec {
            TransportSpec::Stdio(s) => {
                assert_eq!(s.args, vec![root.join("mcp_servers/x.py").display().to_string(), "-u".to_string()]);
                assert_eq!((s.command.as_str(), s.python.clone()), ("python", Some(root.join(".venv/bin/python"))));
            }
            other => panic!("unexpected {other:?}"),
        }
        // The fingerprint is the original's: the venv interpreter is not part of it, so a tool
        // cache written by the original (command `python`) stays valid.
        let TransportSpec::Stdio(mut without) = spec.clone() else { unreachable!() };
        without.python = None;
        assert_eq!(fingerprint(&spec), fingerprint(&TransportSpec::Stdio(without)));
        match cat.runtime_spec(cat.get("js").unwrap()) {
            TransportSpec::Stdio(s) => assert_eq!((s.command.as_str(), s.python), ("node", None)),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(cat.delete("local").unwrap_err(), McpError::ReadOnly));
        let body = entry(json!({"display_name":"R","url":"http://h/sse"}));
        assert!(matches!(cat.create("remote", body).unwrap_err(), McpError::Exists(_)));
        std::fs::create_dir_all(data.join("mcp")).unwrap();
        std::fs::write(
            user_catalog_path(&data),
            r#"{"remote":{"type":"sse","display_name":"R","url":"http://h/sse"}}"#,
        )
        .unwrap();
        assert!(Catalog::load(Some(&root), &data).is_err());
        std::fs::remove_dir_all(root).unwrap();
    }
}
