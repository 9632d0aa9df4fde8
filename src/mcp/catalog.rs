//! MCP server catalog: the read-only built-in `mcp_servers/mcp_config.json`, the user's
//! `<data>/mcp/servers.json` (SSE and Streamable HTTP entries), validation with the contract's
//! exact messages (http-api.md §6), runtime transport specs, and the tool-schema cache
//! `<data>/mcp_cache/<safe>.json` with its transport fingerprint (storage.md §6).
//!
//! Pure data plus file I/O; the manager holds the one `Catalog` behind its mutation lock, so
//! writes are serialised. Runs on whichever thread calls the manager.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::client::ToolInfo;
use super::transport::{HttpSpec, StdioSpec, TransportSpec};
use super::url::{self, UrlProblem};
use crate::util::text::py_repr;
use crate::util::{fsx, text, time};

/// The literal every header value is shown as.
pub const MASK: &str = "********";
const MAX_HEADERS: usize = 32;

pub const MSG_NAME: &str = "name must start with a lowercase letter or digit and contain only lowercase letters, digits, underscores, or hyphens (max 64)";
pub const MSG_TYPE: &str = "user MCP servers support only the sse transport";
pub const MSG_DISPLAY: &str = "display_name is required and must be at most 100 characters";
pub const MSG_DESCRIPTION: &str = "description must be at most 1000 characters";
pub const MSG_URL: &str = "url is required and must be at most 2048 characters";
pub const MSG_URL_ABS: &str = "url must be an absolute HTTP(S) URL";
pub const MSG_URL_CREDS: &str = "url must not contain embedded credentials";
pub const MSG_HEADERS_MAX: &str = "headers may contain at most 32 entries";
pub const MSG_READ_ONLY: &str = "built-in MCP servers are read-only";

/// Transport kind of an entry. `streamable_http` is our addition (the original lacks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Stdio,
    Sse,
    StreamableHttp,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Stdio => "stdio",
            Kind::Sse => "sse",
            Kind::StreamableHttp => "streamable_http",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
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
pub struct ServerConfig {
    pub name: String,
    pub kind: Kind,
    pub display_name: String,
    pub description: String,
    /// stdio only.
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// HTTP kinds only (`""` for stdio).
    pub url: String,
    /// Stored in clear; every API view masks the values.
    pub headers: BTreeMap<String, String>,
    pub builtin: bool,
}

impl ServerConfig {
    /// Header names sorted, each value the literal mask.
    pub fn masked_headers(&self) -> Value {
        Value::Object(self.headers.keys().map(|k| (k.clone(), json!(MASK))).collect())
    }

    /// Values that must never leave the process.
    pub fn secrets(&self) -> Vec<String> {
        let mut s: Vec<String> = self.headers.values().cloned().collect();
        s.extend(self.env.iter().filter(|(k, _)| crate::secrets::is_secret_name(k)).map(|(_, v)| v.clone()));
        s
    }
}

/// A refused API mutation: HTTP status plus the contract's detail string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub detail: String,
}

impl ApiError {
    fn unprocessable(detail: impl Into<String>) -> Self {
        ApiError { status: 422, detail: detail.into() }
    }

    pub fn not_found(name: &str) -> Self {
        ApiError { status: 404, detail: format!("MCP server not found: {name}") }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.detail)
    }
}

impl std::error::Error for ApiError {}

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
pub fn user_catalog_path(data_dir: &Path) -> PathBuf {
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
                body.insert("name".into(), json!(name));
                let cfg = validate_user(&Value::Object(body), None)
                    .map_err(|e| LoadError(format!("user MCP server '{name}' is invalid: {}", e.detail)))?;
                user.insert(cfg.name.clone(), cfg);
            }
        }
        Ok(Catalog { builtin, user, user_path, project_root: project_root.map(Path::to_path_buf) })
    }

    pub fn get(&self, name: &str) -> Option<&ServerConfig> {
        self.builtin.get(name).or_else(|| self.user.get(name))
    }

    /// Every entry, sorted by name (the catalog order of listings and search).
    pub fn all(&self) -> Vec<&ServerConfig> {
        let mut v: Vec<&ServerConfig> = self.builtin.values().chain(self.user.values()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub fn project_root(&self) -> Option<&Path> {
        self.project_root.as_deref()
    }

    /// `POST /api/mcp/servers`: validates, refuses duplicates, persists.
    pub fn create(&mut self, body: &Value) -> Result<ServerConfig, ApiError> {
        let cfg = validate_user(body, None)?;
        if self.get(&cfg.name).is_some() {
            return Err(ApiError { status: 409, detail: format!("MCP server already exists: {}", cfg.name) });
        }
        self.user.insert(cfg.name.clone(), cfg.clone());
        if let Err(e) = self.save_user() {
            self.user.remove(&cfg.name);
            return Err(ApiError { status: 500, detail: format!("cannot save MCP servers: {e}") });
        }
        Ok(cfg)
    }

    /// `PUT /api/mcp/servers/{name}`: 404 / 403 / validation; masked headers keep stored secrets.
    pub fn update(&mut self, name: &str, body: &Value) -> Result<ServerConfig, ApiError> {
        self.check_mutable(name)?;
        if body.get("name").is_some() {
            return Err(ApiError::unprocessable("name cannot be changed; it is taken from the URL"));
        }
        let mut with_name = match body {
            Value::Object(m) => m.clone(),
            _ => return Err(ApiError::unprocessable("body must be a JSON object")),
        };
        with_name.insert("name".into(), json!(name));
        let old = self.user.get(name).cloned();
        let cfg = validate_user(&Value::Object(with_name), old.as_ref())?;
        self.user.insert(name.to_string(), cfg.clone());
        if let Err(e) = self.save_user() {
            if let Some(old) = old {
                self.user.insert(name.to_string(), old);
            }
            return Err(ApiError { status: 500, detail: format!("cannot save MCP servers: {e}") });
        }
        Ok(cfg)
    }

    /// `DELETE /api/mcp/servers/{name}`.
    pub fn delete(&mut self, name: &str) -> Result<ServerConfig, ApiError> {
        self.check_mutable(name)?;
        let old = self.user.remove(name).ok_or_else(|| ApiError::not_found(name))?;
        if let Err(e) = self.save_user() {
            self.user.insert(name.to_string(), old);
            return Err(ApiError { status: 500, detail: format!("cannot save MCP servers: {e}") });
        }
        Ok(old)
    }

    /// 404 for unknown names, 403 for built-ins.
    pub fn check_mutable(&self, name: &str) -> Result<(), ApiError> {
        if self.builtin.contains_key(name) {
            return Err(ApiError { status: 403, detail: MSG_READ_ONLY.into() });
        }
        if !self.user.contains_key(name) {
            return Err(ApiError::not_found(name));
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
    pub fn runtime_spec(&self, cfg: &ServerConfig) -> TransportSpec {
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

fn name_ok(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn header_name_ok(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+.^_`|~-".contains(&c))
}

fn check_url(raw: &str) -> Result<String, ApiError> {
    let u = raw.trim();
    if u.is_empty() || text::char_len(u) > 2048 {
        return Err(ApiError::unprocessable(MSG_URL));
    }
    match url::parse(u) {
        Ok(_) => Ok(u.to_string()),
        Err(UrlProblem::NotHttp) => Err(ApiError::unprocessable(MSG_URL_ABS)),
        Err(UrlProblem::Credentials) => Err(ApiError::unprocessable(MSG_URL_CREDS)),
    }
}

/// Validates a headers object. `stored` supplies secrets for masked values on update.
fn check_headers(
    v: Option<&Value>,
    stored: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let map = match v {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(ApiError::unprocessable("headers must be an object")),
    };
    if map.len() > MAX_HEADERS {
        return Err(ApiError::unprocessable(MSG_HEADERS_MAX));
    }
    let mut out = BTreeMap::new();
    for (name, value) in map {
        let q = py_repr(name);
        if !header_name_ok(name) {
            return Err(ApiError::unprocessable(format!("invalid header name: {q}")));
        }
        let Value::String(value) = value else {
            return Err(ApiError::unprocessable(format!("header {q} must be a string")));
        };
        let value = if value == MASK {
            match stored.and_then(|s| s.get(name)) {
                Some(secret) => secret.clone(),
                None => {
                    return Err(ApiError::unprocessable(format!(
                        "header {q} uses a masked value without a stored secret"
                    )))
                }
            }
        } else {
            value.clone()
        };
        if value.is_empty() || text::char_len(&value) > 4096 {
            return Err(ApiError::unprocessable(format!("header {q} must be non-empty and at most 4096 characters")));
        }
        if value.contains('\r') || value.contains('\n') {
            return Err(ApiError::unprocessable(format!("header {q} must not contain newlines")));
        }
        out.insert(name.clone(), value);
    }
    Ok(out)
}

fn opt_str<'a>(body: &'a Map<String, Value>, key: &str, msg: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::unprocessable(msg)),
    }
}

/// Validates a user create/update body (with `name` already inside). `old` is the stored
/// entry on update: masked header values take their secret from it.
pub fn validate_user(body: &Value, old: Option<&ServerConfig>) -> Result<ServerConfig, ApiError> {
    const KEYS: &[&str] = &["name", "type", "display_name", "description", "url", "headers"];
    let Value::Object(body) = body else {
        return Err(ApiError::unprocessable("body must be a JSON object"));
    };
    if let Some(k) = body.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(ApiError::unprocessable(format!("unknown field: {}", py_repr(k))));
    }
    let name = opt_str(body, "name", MSG_NAME)?.unwrap_or("").trim().to_string();
    if !name_ok(&name) {
        return Err(ApiError::unprocessable(MSG_NAME));
    }
    let kind = match opt_str(body, "type", MSG_TYPE)?.map(str::trim) {
        None | Some("") => Kind::Sse,
        Some(t) => match Kind::parse(t) {
            Some(k @ (Kind::Sse | Kind::StreamableHttp)) => k,
            _ => return Err(ApiError::unprocessable(MSG_TYPE)),
        },
    };
    let display = opt_str(body, "display_name", MSG_DISPLAY)?.unwrap_or("").trim().to_string();
    if display.is_empty() || text::char_len(&display) > 100 {
        return Err(ApiError::unprocessable(MSG_DISPLAY));
    }
    let description = opt_str(body, "description", MSG_DESCRIPTION)?.unwrap_or("").trim().to_string();
    if text::char_len(&description) > 1000 {
        return Err(ApiError::unprocessable(MSG_DESCRIPTION));
    }
    let url = check_url(opt_str(body, "url", MSG_URL)?.unwrap_or(""))?;
    let headers = check_headers(body.get("headers"), old.map(|o| &o.headers))?;
    Ok(ServerConfig {
        name,
        kind,
        display_name: display,
        description,
        command: String::new(),
        args: Vec::new(),
        env: BTreeMap::new(),
        url,
        headers,
        builtin: false,
    })
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
            (check_url(&url_text).map_err(|e| e.detail)?, check_headers(e.get("headers"), None).map_err(|e| e.detail)?)
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

// ---------------------------------------------------------------------------------------------
// Tool-schema cache

/// First 16 hex chars of SHA-256 over the canonical runtime JSON (storage.md §6). Headers are
/// not part of it; stdio args are the resolved ones.
pub fn fingerprint(spec: &TransportSpec) -> String {
    let (command, args, env, url) = match spec {
        TransportSpec::Stdio(s) => (s.command.as_str(), s.args.clone(), s.env.clone(), ""),
        TransportSpec::Sse(h) | TransportSpec::StreamableHttp(h) => ("", Vec::new(), BTreeMap::new(), h.url.as_str()),
    };
    // serde_json's map is ordered by key and writes non-ASCII raw with `,`/`:` separators:
    // exactly Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False).
    let canonical = json!({"args": args, "command": command, "env": env, "url": url}).to_string();
    let digest = Sha256::digest(canonical.as_bytes());
    crate::util::rand::to_hex(&digest)[..16].to_string()
}

/// Cache file name: every char other than ASCII alphanumerics, `_` and `-` becomes `_`.
pub fn cache_path(data_dir: &Path, server: &str) -> PathBuf {
    let safe: String =
        server.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    data_dir.join("mcp_cache").join(format!("{safe}.json"))
}

/// A tool as remembered in the cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(rename = "inputSchema", default)]
    pub input_schema: Value,
}

#[derive(Serialize)]
struct CacheFile<'a> {
    transport_fingerprint: &'a str,
    cached_at: String,
    tools: Vec<CachedTool>,
    resources: [(); 0],
    prompts: [(); 0],
}

/// Writes the cache after a successful connect + listing.
pub fn write_cache(data_dir: &Path, server: &str, fingerprint: &str, tools: &[ToolInfo]) -> std::io::Result<()> {
    let file = CacheFile {
        transport_fingerprint: fingerprint,
        cached_at: time::utc_rfc3339_micros(),
        tools: tools
            .iter()
            .map(|t| CachedTool {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
            })
            .collect(),
        resources: [],
        prompts: [],
    };
    let mut text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
    text.push('\n');
    fsx::write_atomic(&cache_path(data_dir, server), text.as_bytes(), false)
}

/// Cached tools, or `None` when the file is missing, unparsable, not an object, written for
/// another transport fingerprint, or without a `tools` list.
pub fn read_cache(data_dir: &Path, server: &str, fingerprint: &str) -> Option<Vec<CachedTool>> {
    let text = fsx::read_opt(&cache_path(data_dir, server)).ok()??;
    let v: Value = serde_json::from_str(&text).ok()?;
    let obj = v.as_object()?;
    if obj.get("transport_fingerprint").and_then(Value::as_str) != Some(fingerprint) {
        return None;
    }
    let tools = obj.get("tools")?.as_array()?;
    Some(
        tools
            .iter()
            .filter_map(|t| serde_json::from_value::<CachedTool>(t.clone()).ok())
            .filter(|t| !t.name.is_empty())
            .collect(),
    )
}

/// Removes the cache file (config replaced or deleted); a missing file is fine.
pub fn delete_cache(data_dir: &Path, server: &str) {
    let p = cache_path(data_dir, server);
    if let Err(e) = std::fs::remove_file(&p) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!("mcp {server}: cannot delete tool cache: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("cc-mcp-cat-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn create_err(body: Value) -> String {
        validate_user(&body, None).unwrap_err().detail
    }

    #[test]
    fn fingerprint_matches_the_contract_example() {
        let spec = TransportSpec::Sse(HttpSpec {
            url: "http://127.0.0.1:8090/sse".into(),
            headers: BTreeMap::from([("Authorization".into(), "x".into())]),
        });
        assert_eq!(fingerprint(&spec), "3b505a005abd11ee");
    }

    #[test]
    fn validation_messages_are_exact() {
        let ok = json!({"name":"weather","display_name":"Weather","url":"https://mcp.example/sse"});
        assert_eq!(validate_user(&ok, None).unwrap().kind, Kind::Sse);
        let with = |k: &str, v: Value| {
            let mut b = ok.clone();
            b[k] = v;
            b
        };
        assert_eq!(create_err(with("name", json!("Bad Name"))), MSG_NAME);
        assert_eq!(create_err(with("type", json!("stdio"))), MSG_TYPE);
        assert_eq!(validate_user(&with("type", json!("streamable_http")), None).unwrap().kind, Kind::StreamableHttp);
        assert_eq!(create_err(with("display_name", json!("  "))), MSG_DISPLAY);
        assert_eq!(create_err(with("display_name", json!("x".repeat(101)))), MSG_DISPLAY);
        assert_eq!(create_err(with("description", json!("x".repeat(1001)))), MSG_DESCRIPTION);
        assert_eq!(create_err(with("url", json!(""))), MSG_URL);
        assert_eq!(create_err(with("url", json!("file:///etc/passwd"))), MSG_URL_ABS);
        assert_eq!(create_err(with("url", json!("http://u:p@h/sse"))), MSG_URL_CREDS);
        let many: Map<String, Value> = (0..33).map(|i| (format!("H{i}"), json!("v"))).collect();
        assert_eq!(create_err(with("headers", Value::Object(many))), MSG_HEADERS_MAX);
        assert_eq!(create_err(with("headers", json!({"Bad Name": "v"}))), "invalid header name: 'Bad Name'");
        assert_eq!(
            create_err(with("headers", json!({"X-Key": MASK}))),
            "header 'X-Key' uses a masked value without a stored secret"
        );
        assert_eq!(
            create_err(with("headers", json!({"X-Key": ""}))),
            "header 'X-Key' must be non-empty and at most 4096 characters"
        );
        assert_eq!(create_err(with("headers", json!({"X-Key": "a\nb"}))), "header 'X-Key' must not contain newlines");
        assert_eq!(create_err(with("extra", json!(1))), "unknown field: 'extra'");
        assert_eq!(py_repr("it's"), "\"it's\"");
    }

    #[test]
    fn user_catalog_round_trip_keeps_secrets_and_masks_on_update() {
        let data = tmp();
        let mut cat = Catalog::load(None, &data).unwrap();
        let body = json!({"name":"weather","display_name":"Weather","url":"https://mcp.example/sse",
                          "headers":{"Authorization":"Bearer real-secret"}});
        let created = cat.create(&body).unwrap();
        assert_eq!(created.masked_headers(), json!({"Authorization": MASK}));
        assert_eq!(cat.create(&body).unwrap_err().status, 409);
        let text = std::fs::read_to_string(user_catalog_path(&data)).unwrap();
        assert_eq!(
            text,
            "{\n  \"weather\": {\n    \"type\": \"sse\",\n    \"display_name\": \"Weather\",\n    \"description\": \"\",\n    \"url\": \"https://mcp.example/sse\",\n    \"headers\": {\n      \"Authorization\": \"Bearer real-secret\"\n    }\n  }\n}\n"
        );
        let upd = json!({"display_name":"W2","url":"https://mcp.example/sse","headers":{"Authorization":MASK}});
        let updated = cat.update("weather", &upd).unwrap();
        assert_eq!(updated.headers["Authorization"], "Bearer real-secret");
        assert_eq!(cat.update("weather", &json!({"name":"x"})).unwrap_err().status, 422);
        assert_eq!(cat.update("nope", &upd).unwrap_err(), ApiError::not_found("nope"));
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
        assert_eq!(cat.delete("local").unwrap_err(), ApiError { status: 403, detail: MSG_READ_ONLY.into() });
        let body = json!({"name":"remote","display_name":"R","url":"http://h/sse"});
        assert_eq!(cat.create(&body).unwrap_err().status, 409);
        std::fs::create_dir_all(data.join("mcp")).unwrap();
        std::fs::write(
            user_catalog_path(&data),
            r#"{"remote":{"type":"sse","display_name":"R","url":"http://h/sse"}}"#,
        )
        .unwrap();
        assert!(Catalog::load(Some(&root), &data).is_err());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn cache_is_used_only_with_a_matching_fingerprint() {
        let data = tmp();
        let tools = vec![ToolInfo {
            name: "say_hello".into(),
            description: Some("Say hello".into()),
            input_schema: json!({"type":"object","properties":{}}),
        }];
        write_cache(&data, "a.b", "0123456789abcdef", &tools).unwrap();
        assert!(cache_path(&data, "a.b").ends_with("mcp_cache/a_b.json"));
        let got = read_cache(&data, "a.b", "0123456789abcdef").unwrap();
        assert_eq!(got[0].name, "say_hello");
        assert_eq!(got[0].input_schema, json!({"type":"object","properties":{}}));
        assert!(read_cache(&data, "a.b", "ffffffffffffffff").is_none());
        std::fs::write(cache_path(&data, "a.b"), "[1]").unwrap();
        assert!(read_cache(&data, "a.b", "0123456789abcdef").is_none());
        delete_cache(&data, "a.b");
        assert!(read_cache(&data, "a.b", "0123456789abcdef").is_none());
        std::fs::remove_dir_all(data).unwrap();
    }
}
