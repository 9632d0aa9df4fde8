//! The model-facing skill tools that read skills (docs/skills.md §5–§7): `skill_search`,
//! `skill_load` (two-phase lazy loading: the body lives only in this turn's model context,
//! history keeps a receipt) and `skill_read_resource`, plus the state they keep within a turn
//! ([`SkillTools`]: loaded (name, hash) pairs per chat) and the explicit selection that loads
//! before the first model call. `agent_skill_manage` is in [`super::manage`], the chat's
//! `activated_*` memory in [`super::activated`], `@name` parsing in [`super::mention`].
//! Runs on the worker thread of the turn.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::sync::{Arc, Mutex, RwLock};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::activated::{activate_tools, ActivatedSkills};
use super::manage::AgentSkillManage;
use super::package;
use super::service::SkillService;
use super::views::{LoadError, OptionalDeps, SearchReply, SkillView};
use super::{SkillError, MAX_SUPPORT_FILE_BYTES, SUPPORT_DIRS};
use crate::tool::args::{lenient, parse_args};
use crate::tool::{Tool, ToolOutput, TurnCtx};
use crate::util::pyjson;
use crate::util::sync::{self, lock};

/// What the skill tools need from the rest of the agent.
pub trait SkillEnv: Send + Sync {
    /// Whether `name` is in the full tool registry (built-ins and live MCP wrappers).
    fn has_tool(&self, name: &str) -> bool;
    /// Connects a configured MCP server (as `mcp_prepare` does) and returns the names of the
    /// registered tools it owns (`mcp_<server>_*`). `Err` carries a short reason.
    fn prepare_mcp(&self, server: &str) -> Result<Vec<String>, String>;
}

/// A [`SkillEnv`] without MCP: a fixed tool list, every MCP preparation fails.
pub struct StaticEnv(pub HashSet<String>);

impl SkillEnv for StaticEnv {
    fn has_tool(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    fn prepare_mcp(&self, _server: &str) -> Result<Vec<String>, String> {
        Err("MCP is not available".into())
    }
}

/// The skill tools and the state they keep between calls of one turn. The per-turn set of
/// loaded (name, hash) pairs is keyed by chat (one turn per chat runs at a time) and reset by
/// [`SkillTools::begin_turn`]; `activated_skills` / `activated_tools` live in the turn's
/// metadata working copy, so a failed turn drops them with everything else.
pub struct SkillTools {
    pub(crate) svc: Arc<SkillService>,
    env: RwLock<Arc<dyn SkillEnv>>,
    loaded: Mutex<HashMap<String, HashSet<(String, String)>>>,
}

/// A loaded skill's three projections plus whether it was a failure.
fn projection(model: String, public: String, persisted: String) -> ToolOutput {
    ToolOutput { for_model: model, preview: Some(public), for_history: Some(persisted), failed: false, outcome: None }
}

fn load_error(e: LoadError) -> ToolOutput {
    ToolOutput { for_model: pyjson::to_string(&e), preview: None, for_history: None, failed: true, outcome: None }
}

impl SkillTools {
    pub fn new(svc: Arc<SkillService>, env: Arc<dyn SkillEnv>) -> Arc<SkillTools> {
        Arc::new(SkillTools { svc, env: RwLock::new(env), loaded: Mutex::new(HashMap::new()) })
    }

    fn env(&self) -> Arc<dyn SkillEnv> {
        Arc::clone(&sync::read(&self.env))
    }

    /// Starts a turn of `chat_id`: nothing is loaded yet.
    pub(crate) fn begin_turn(&self, chat_id: &str) {
        lock(&self.loaded).insert(chat_id.to_string(), HashSet::new());
    }

    /// Forgets the turn's loads.
    pub(crate) fn end_turn(&self, chat_id: &str) {
        lock(&self.loaded).remove(chat_id);
    }

    fn is_loaded(&self, chat_id: &str, name: &str, hash: &str) -> bool {
        lock(&self.loaded).get(chat_id).is_some_and(|s| s.contains(&(name.to_string(), hash.to_string())))
    }

    /// The model-visible skill tools, in a stable order.
    pub(crate) fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(SkillSearch(Arc::clone(self))),
            Arc::new(SkillLoad(Arc::clone(self))),
            Arc::new(SkillReadResource(Arc::clone(self))),
            Arc::new(AgentSkillManage(Arc::clone(&self.svc))),
        ]
    }

    /// The recent-skills prompt section for a chat's metadata, if any line qualifies.
    pub(crate) fn hints(&self, metadata: &Map<String, Value>) -> Option<String> {
        let s = ActivatedSkills::from_json(metadata.get("activated_skills")).summary(&self.svc);
        (!s.is_empty()).then_some(s)
    }

    /// `skill_search` result.
    pub fn search(&self, query: &str, limit: usize) -> SearchReply {
        if query.trim().is_empty() {
            return SearchReply { error: Some("query is required"), query: None, skills: Vec::new() };
        }
        let hits = self.svc.catalog().search(query, limit.clamp(1, 20), false);
        let skills = hits.iter().map(|(r, score)| SkillView::hit(r, *score)).collect();
        SearchReply { error: None, query: Some(query.to_string()), skills }
    }

    /// `skill_load` (docs/skills.md §6).
    pub(crate) fn load(&self, ctx: &TurnCtx, name: &str) -> ToolOutput {
        let env = self.env();
        let cat = self.svc.catalog();
        let Some(rec) = cat.get(name).cloned() else {
            let suggestions: Vec<String> =
                cat.search(name, 3, false).into_iter().map(|(r, _)| r.name().to_string()).collect();
            return load_error(LoadError::SkillNotFound { name: name.to_string(), suggestions });
        };
        if !rec.enabled {
            return load_error(LoadError::SkillDisabled { name: name.to_string() });
        }
        let missing: Vec<String> = rec.missing.iter().filter(|m| !m.starts_with("mcp:")).cloned().collect();
        if !missing.is_empty() {
            return load_error(LoadError::MissingDependency { name: name.to_string(), missing });
        }
        for t in &rec.manifest.requires.tools {
            if !t.starts_with("mcp_") && !env.has_tool(t) {
                let missing = vec![format!("tool:{t}")];
                return load_error(LoadError::MissingDependency { name: name.to_string(), missing });
            }
        }
        let mut activate = Vec::new();
        for server in &rec.manifest.requires.mcp_servers {
            match env.prepare_mcp(server) {
                Ok(tools) => activate.extend(tools),
                Err(_) => {
                    return load_error(LoadError::McpPrepareFailed { name: name.to_string(), server: server.clone() })
                }
            }
        }
        for t in &rec.manifest.requires.tools {
            if t.starts_with("mcp_") && env.has_tool(t) {
                activate.push(t.clone());
            }
        }
        let (rec, pkg) = match self.svc.read(&rec) {
            Ok(p) if p.parsed.hash == rec.hash && p.parsed.manifest.name == rec.name() => (rec, p),
            _ => {
                // Changed on disk since the last refresh: refresh and read again.
                let refreshed = self.svc.refresh();
                let reread = match (refreshed, self.svc.get(name)) {
                    (Ok(()), Some(r)) => self.svc.read(&r).map(|p| (r, p)),
                    (Ok(()), None) => self.svc.read(&rec).and(Err(SkillError::not_found("Skill not found"))),
                    (Err(e), _) => Err(e),
                };
                match reread {
                    Ok(x) => x,
                    Err(e) => {
                        let detail = package::sanitize(e.message(), &[&rec.path]);
                        return load_error(LoadError::InvalidSkill { detail });
                    }
                }
            }
        };
        activate_tools(ctx, &activate);
        let m = &pkg.parsed.manifest;
        let receipt = format!("[Skill loaded: {}@v{} sha256:{}]", m.name, m.version, pkg.parsed.hash);
        let fresh = lock(&self.loaded)
            .entry(ctx.chat_id.clone())
            .or_default()
            .insert((m.name.clone(), pkg.parsed.hash.clone()));
        if !fresh {
            let t = format!("{receipt} already_loaded=true");
            return projection(t.clone(), format!("Skill already loaded: {}", m.name), t);
        }
        {
            let mut st = ctx.state();
            let mut act = ActivatedSkills::from_json(st.metadata.get("activated_skills"));
            act.touch(&m.name, &m.description, m.version, &pkg.parsed.hash);
            st.metadata.insert("activated_skills".into(), act.to_json());
        }
        let optional =
            serde_json::to_string(&OptionalDeps { tools: &m.optional.tools, mcp_servers: &m.optional.mcp_servers })
                .expect("string lists serialise");
        let model = format!(
            "{receipt}\nSkill package root: {}\nOptional dependencies (not started): {optional}\n\n{}",
            rec.path.display(),
            m.body
        );
        projection(model, format!("Loaded Skill: {}", m.name), receipt)
    }

    /// `skill_read_resource` (docs/skills.md §7).
    pub(crate) fn read_resource(&self, ctx: &TurnCtx, name: &str, path: &str) -> ToolOutput {
        let not_loaded = ToolOutput::error("Error: load the Skill before reading its resources");
        let Some(rec) = self.svc.get(name) else {
            return not_loaded;
        };
        if !self.is_loaded(&ctx.chat_id, rec.name(), &rec.hash) {
            return not_loaded;
        }
        let rel = match resource_path(path) {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("Error: {e}")),
        };
        let root = match fs::canonicalize(&rec.path) {
            Ok(r) => r,
            Err(_) => return ToolOutput::error("Error: resource not found or too large"),
        };
        let target = match fs::canonicalize(root.join(&rel)) {
            Ok(t) if t.starts_with(&root) => t,
            Ok(_) => return ToolOutput::error("Error: resource path escapes the Skill package"),
            Err(_) => return ToolOutput::error("Error: resource not found or too large"),
        };
        let too_big = ToolOutput::error("Error: resource not found or too large");
        match fs::metadata(&target) {
            Ok(m) if m.is_file() && m.len() <= MAX_SUPPORT_FILE_BYTES => {}
            _ => return too_big,
        }
        let mut buf = Vec::new();
        let read = fs::File::open(&target).and_then(|f| f.take(MAX_SUPPORT_FILE_BYTES + 1).read_to_end(&mut buf));
        if read.is_err() || buf.len() as u64 > MAX_SUPPORT_FILE_BYTES {
            return too_big;
        }
        let Ok(content) = String::from_utf8(buf) else {
            return ToolOutput::error(format!("Error executing skill_read_resource: {rel} is not UTF-8 text"));
        };
        let receipt = format!("[Skill resource read: {}/{rel}]", rec.name());
        projection(format!("{receipt}\n\n{content}"), receipt.clone(), receipt)
    }

    /// Explicit selection before the runner (`mentioned_skills` + a leading `@name`): loads
    /// each, returning the bodies for the turn-only system message and the receipts to persist,
    /// or the turn's error text.
    pub(crate) fn explicit(&self, ctx: &TurnCtx, names: &[String]) -> Result<(Vec<String>, Vec<String>), String> {
        let mut bodies = Vec::new();
        let mut receipts = Vec::new();
        for n in names {
            let out = self.load(ctx, n);
            if out.failed {
                return Err(format!("Unable to load @{n}: {}", out.for_model.trim()));
            }
            bodies.push(out.for_model.clone());
            receipts.push(out.history_text().to_string());
        }
        Ok((bodies, receipts))
    }
}

/// Normalises and checks a resource path: relative, no `..`, at least two components, first a
/// support directory.
fn resource_path(raw: &str) -> Result<String, String> {
    let p = raw.replace('\\', "/");
    let p = p.trim();
    if p.is_empty() || p.starts_with('/') || package::has_drive(p) || p.contains('\0') {
        return Err("resource path must be relative to the Skill package".into());
    }
    let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    if parts.contains(&"..") {
        return Err("resource path must not contain '..'".into());
    }
    if parts.len() < 2 || !SUPPORT_DIRS.contains(&parts[0]) {
        return Err("resource path must be under references, templates, scripts, or assets".into());
    }
    Ok(parts.join("/"))
}

struct SkillSearch(Arc<SkillTools>);

/// `skill_search` arguments; like all skill tools, never refused: a query that is not a
/// string is empty (answered "query is required"), a limit that is not a non-negative
/// integer is the default.
#[derive(Deserialize)]
struct SearchArgs {
    #[serde(deserialize_with = "lenient::string")]
    query: String,
    #[serde(deserialize_with = "lenient::u64")]
    limit: Option<u64>,
}

impl Tool for SkillSearch {
    fn name(&self) -> &str {
        "skill_search"
    }

    fn description(&self) -> &str {
        "Search installed Skills (reusable workflows) by name, display name, description, tags and triggers. \
         Use it when a task might match a known workflow, then call skill_load with an exact name from the results."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the user wants to do, in a few words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 8}
            },
            "required": ["query"]
        })
    }

    fn run(&self, args: &Map<String, Value>, _ctx: &TurnCtx) -> ToolOutput {
        let SearchArgs { query, limit } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let v = self.0.search(&query, limit.unwrap_or(8).clamp(1, 20) as usize);
        let for_model = serde_json::to_string(&v).expect("the search reply serialises");
        ToolOutput { for_model, preview: None, for_history: None, failed: v.error.is_some(), outcome: None }
    }
}

struct SkillLoad(Arc<SkillTools>);

/// `skill_load` arguments: a name that is not a string is empty (answered "skill_not_found").
#[derive(Deserialize)]
struct LoadArgs {
    #[serde(deserialize_with = "lenient::string")]
    name: String,
}

impl Tool for SkillLoad {
    fn name(&self) -> &str {
        "skill_load"
    }

    fn description(&self) -> &str {
        "Load a Skill's full instructions (SKILL.md) into this turn by its exact name. The content lasts only \
         for the current turn; load it again in later turns. Required MCP tools of the Skill become available \
         in the next step."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Exact Skill name from skill_search."}},
            "required": ["name"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        match parse_args(args) {
            Ok(LoadArgs { name }) => self.0.load(ctx, name.trim()),
            Err(e) => e,
        }
    }
}

struct SkillReadResource(Arc<SkillTools>);

/// `skill_read_resource` arguments: a name or path that is not a string is empty (answered
/// like any unloaded Skill or invalid path).
#[derive(Deserialize)]
struct ResourceArgs {
    #[serde(deserialize_with = "lenient::string")]
    name: String,
    #[serde(deserialize_with = "lenient::string")]
    path: String,
}

impl Tool for SkillReadResource {
    fn name(&self) -> &str {
        "skill_read_resource"
    }

    fn description(&self) -> &str {
        "Read a text file shipped with a Skill loaded in this turn, e.g. references/guide.md or templates/x.html \
         (paths under references/, templates/, scripts/ or assets/)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The loaded Skill's name."},
                "path": {"type": "string", "description": "Package-relative path, e.g. references/guide.md."}
            },
            "required": ["name", "path"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        match parse_args(args) {
            Ok(ResourceArgs { name, path }) => self.0.read_resource(ctx, name.trim(), &path),
            Err(e) => e,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::skills::catalog::BASE_TOOLS;
    use crate::skills::package::tests::skill_md;
    use crate::skills::service::tests::{create, service};
    use crate::skills::Source;

    pub(crate) fn env() -> Arc<dyn SkillEnv> {
        Arc::new(StaticEnv(BASE_TOOLS.iter().map(|s| s.to_string()).collect()))
    }

    struct McpEnv;

    impl SkillEnv for McpEnv {
        fn has_tool(&self, name: &str) -> bool {
            BASE_TOOLS.contains(&name) || name == "mcp_files_read"
        }

        fn prepare_mcp(&self, server: &str) -> Result<Vec<String>, String> {
            match server {
                "files" => Ok(vec!["mcp_files_read".into(), "mcp_files_list".into()]),
                _ => Err("connection refused".into()),
            }
        }
    }

    pub(crate) fn ctx(dir: &std::path::Path) -> TurnCtx {
        TurnCtx {
            chat_id: "c1".into(),
            workspace: dir.to_path_buf(),
            protected: vec![],
            memory: Arc::new(crate::store::memory_files::MemoryFiles::new(dir)),
            cancel: crate::util::cancel::CancelToken::new(),
            state: Arc::new(Mutex::new(crate::tool::TurnState::default())),
            confinement: Default::default(),
            checkpoint: None,
        }
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn search_tool_shapes() {
        let (data, svc) = service("tools-search");
        let turn = SkillTools::new(svc, env());
        let tools = turn.tools();
        let out = tools[0].run(&args(json!({"query": "weather forecast", "limit": 50})), &ctx(&data));
        let v: Value = serde_json::from_str(&out.for_model).unwrap();
        assert_eq!(v["query"], "weather forecast");
        assert_eq!(v["skills"][0]["name"], "weather");
        assert!(v["skills"][0].get("requires").is_none());
        let score = v["skills"][0]["score"].as_f64().unwrap();
        assert_eq!((score * 10_000.0).round() / 10_000.0, score);
        let out = tools[0].run(&args(json!({"query": "  "})), &ctx(&data));
        assert_eq!(out.for_model, r#"{"error":"query is required","skills":[]}"#);
        assert!(out.failed);
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn search_and_manage_outputs_are_byte_identical() {
        let (data, svc) = service("tools-pin");
        let turn = SkillTools::new(Arc::clone(&svc), env());
        let c = ctx(&data);
        let manage = turn.tools()[3]
            .run(&args(json!({"action": "create", "name": "zzpin", "content": skill_md("zzpin", "tags: [zq]\n")})), &c);
        let hash = svc.get("zzpin").unwrap().hash.clone();
        assert_eq!(
            manage.for_model.replace(&hash, "<HASH>"),
            r#"{"action":"create","display_name":"zzpin","enabled":true,"hash":"<HASH>","name":"zzpin","source":"agent","success":true}"#
        );
        let found = turn.tools()[0].run(&args(json!({"query": "zzpin zq", "limit": 3})), &c);
        assert_eq!(
            found.for_model.replace(&hash, "<HASH>"),
            r#"{"query":"zzpin zq","skills":[{"always":false,"availability":"available","description":"Does zzpin things","display_name":"zzpin","enabled":true,"hash":"<HASH>","missing":[],"mutable":true,"name":"zzpin","score":4.7696,"shadowed_sources":[],"source":"agent","tags":["zq"],"triggers":[],"validation_errors":[],"version":1}]}"#
        );
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn load_projects_body_to_model_and_receipt_to_history() {
        let (data, svc) = service("tools-load");
        let turn = SkillTools::new(Arc::clone(&svc), env());
        let c = ctx(&data);
        turn.begin_turn(&c.chat_id);
        let out = turn.load(&c, "weather");
        assert!(!out.failed);
        let rec = svc.get("weather").unwrap();
        let receipt = format!("[Skill loaded: weather@v1 sha256:{}]", rec.hash);
        assert!(out.for_model.starts_with(&format!("{receipt}\nSkill package root: {}\n", rec.path.display())));
        assert!(out
            .for_model
            .contains("Optional dependencies (not started): {\"tools\":[\"web_search\"],\"mcp_servers\":[]}"));
        assert!(out.for_model.contains("wttr.in"));
        assert_eq!(out.history_text(), receipt);
        assert_eq!(out.preview_text(), "Loaded Skill: weather");
        let again = turn.load(&c, "weather");
        assert_eq!(again.history_text(), format!("{receipt} already_loaded=true"));
        assert_eq!(again.for_model, again.history_text());
        assert_eq!(again.preview_text(), "Skill already loaded: weather");
        let act = c.state().metadata["activated_skills"].clone();
        assert_eq!(act["weather"]["hash"], json!(rec.hash));
        assert_eq!(act["weather"]["version"], 1);

        let nf = turn.load(&c, "wether");
        assert!(nf.failed);
        let v: Value = serde_json::from_str(&nf.for_model).unwrap();
        assert_eq!(v["error"], "skill_not_found");
        assert!(nf.for_model.contains("\"error\": \"skill_not_found\""), "python spacing: {}", nf.for_model);

        create(&svc, "off-skill", Source::User, "");
        svc.set_enabled("off-skill", false).unwrap();
        assert_eq!(turn.load(&c, "off-skill").for_model, r#"{"error": "skill_disabled", "name": "off-skill"}"#);
        create(&svc, "needs-bin", Source::User, "requires:\n  bins: [definitely-not-installed-bin]\n");
        assert_eq!(
            turn.load(&c, "needs-bin").for_model,
            r#"{"error": "missing_dependency", "name": "needs-bin", "missing": ["bin:definitely-not-installed-bin"]}"#
        );
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn load_rereads_a_changed_package_and_reports_invalid() {
        let (data, svc) = service("tools-reload");
        let rec = create(&svc, "demo", Source::User, "");
        let turn = SkillTools::new(Arc::clone(&svc), env());
        let c = ctx(&data);
        turn.begin_turn(&c.chat_id);
        fs::write(rec.path.join("SKILL.md"), skill_md("demo", "version: 4\n")).unwrap();
        let out = turn.load(&c, "demo");
        assert!(out.history_text().starts_with("[Skill loaded: demo@v4 sha256:"), "{}", out.history_text());
        assert_eq!(svc.get("demo").unwrap().manifest.version, 4);
        fs::write(rec.path.join("SKILL.md"), "broken").unwrap();
        let out = turn.load(&c, "demo");
        assert!(out.failed);
        assert_eq!(
            out.for_model,
            r#"{"error": "invalid_skill", "detail": "SKILL.md must start with YAML frontmatter"}"#
        );
        assert!(!out.for_model.contains(&data.display().to_string()));
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn required_mcp_servers_are_prepared_and_their_tools_activated() {
        let (data, svc) = service("tools-mcp");
        svc.set_probe(Arc::new(|| {
            let mut p = crate::skills::catalog::DepProbe::base(Default::default());
            p.mcp_servers.insert("files".into());
            p.mcp_servers.insert("down".into());
            p
        }))
        .unwrap();
        create(&svc, "uses-files", Source::User, "requires:\n  mcp_servers: [files]\n  tools: [mcp_files_read]\n");
        create(&svc, "uses-down", Source::User, "requires:\n  mcp_servers: [down]\n");
        create(&svc, "uses-missing", Source::User, "requires:\n  mcp_servers: [nowhere]\n");
        let turn = SkillTools::new(Arc::clone(&svc), Arc::new(McpEnv));
        let c = ctx(&data);
        turn.begin_turn(&c.chat_id);
        assert!(!turn.load(&c, "uses-files").failed);
        let activated = c.state().metadata["activated_tools"].clone();
        let names: Vec<&String> = activated.as_object().unwrap().keys().collect();
        assert_eq!(names, ["mcp_files_list", "mcp_files_read"]);
        assert_eq!(
            turn.load(&c, "uses-down").for_model,
            r#"{"error": "mcp_prepare_failed", "name": "uses-down", "server": "down"}"#
        );
        // A server missing from the MCP catalog is reported by preparation, not as a dependency.
        assert!(turn.load(&c, "uses-missing").for_model.contains("mcp_prepare_failed"));
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn read_resource_requires_a_load_and_stays_inside() {
        let (data, svc) = service("tools-res");
        let turn = SkillTools::new(Arc::clone(&svc), env());
        let c = ctx(&data);
        turn.begin_turn(&c.chat_id);
        let before = turn.read_resource(&c, "chart-visualization", "templates/chart.html");
        assert_eq!(before.for_model, "Error: load the Skill before reading its resources");
        turn.load(&c, "chart-visualization");
        let ok = turn.read_resource(&c, "chart-visualization", " templates\\chart.html ");
        assert!(ok
            .for_model
            .starts_with("[Skill resource read: chart-visualization/templates/chart.html]\n\n<!doctype html>"));
        assert_eq!(ok.history_text(), "[Skill resource read: chart-visualization/templates/chart.html]");
        assert_eq!(ok.preview_text(), ok.history_text());
        for bad in ["../weather/SKILL.md", "/etc/passwd", "SKILL.md", "references", "templates/../../x", "C:/x"] {
            let out = turn.read_resource(&c, "chart-visualization", bad);
            assert!(out.failed && out.for_model.starts_with("Error: "), "{bad}: {}", out.for_model);
        }
        assert_eq!(
            turn.read_resource(&c, "chart-visualization", "templates/missing.html").for_model,
            "Error: resource not found or too large"
        );
        let rec = create(&svc, "bin-res", Source::User, "");
        fs::create_dir(rec.path.join("assets")).unwrap();
        fs::write(rec.path.join("assets/x.bin"), [0xffu8, 0xfe, 0]).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("/etc/hostname", rec.path.join("assets/out")).unwrap();
        svc.refresh().unwrap();
        // The escaping symlink makes the package invalid, so it cannot even be loaded.
        assert!(turn.load(&c, "bin-res").failed);
        #[cfg(unix)]
        fs::remove_file(rec.path.join("assets/out")).unwrap();
        svc.refresh().unwrap();
        assert!(!turn.load(&c, "bin-res").failed);
        assert!(turn
            .read_resource(&c, "bin-res", "assets/x.bin")
            .for_model
            .starts_with("Error executing skill_read_resource"));
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn explicit_selection_loads_each_or_fails_the_turn() {
        let (data, svc) = service("tools-explicit");
        let turn = SkillTools::new(svc, env());
        let c = ctx(&data);
        turn.begin_turn(&c.chat_id);
        let (bodies, receipts) = turn.explicit(&c, &["weather".into()]).unwrap();
        assert!(bodies[0].contains("wttr.in"));
        assert!(receipts[0].starts_with("[Skill loaded: weather@v1 sha256:"));
        assert!(bodies[0].starts_with("[Skill loaded: weather@v1 sha256:"));
        let e = turn.explicit(&c, &["nope".into()]).unwrap_err();
        assert!(e.starts_with("Unable to load @nope: {\"error\": \"skill_not_found\""), "{e}");
        fs::remove_dir_all(data).unwrap();
    }

    /// The skill tools have always been lenient: a name, path or query that is absent, null
    /// or not a string reads as "", and `limit` is a non-negative integer (anything else is
    /// the default 8) clamped to 1..=20. Unknown keys are ignored.
    #[test]
    fn argument_spellings() {
        let (data, svc) = service("tools-args");
        for i in 0..25 {
            create(&svc, &format!("zq{i:02}"), Source::User, "tags: [zqtag]\n");
        }
        let turn = SkillTools::new(Arc::clone(&svc), env());
        let c = ctx(&data);
        turn.begin_turn(&c.chat_id);
        let tools = turn.tools();
        let hits = |limit: Option<Value>| {
            let mut a = json!({"query": "zqtag", "extra": true});
            if let Some(l) = limit {
                a["limit"] = l;
            }
            let v: Value = serde_json::from_str(&tools[0].run(&args(a), &c).for_model).unwrap();
            v["skills"].as_array().unwrap().len()
        };
        assert_eq!(hits(None), 8);
        for (limit, n) in [
            (json!(null), 8),
            (json!(3), 3),
            (json!(0), 1),
            (json!(50), 20),
            (json!(u64::MAX), 20),
            (json!(-3), 8),
            (json!(5.0), 8),
            (json!(2.5), 8),
            (json!("5"), 8),
            (json!(true), 8),
            (json!([5]), 8),
        ] {
            assert_eq!(hits(Some(limit.clone())), n, "limit {limit}");
        }
        let required = r#"{"error":"query is required","skills":[]}"#;
        for a in [json!({}), json!({"query": null}), json!({"query": 5}), json!({"query": ["zqtag"]})] {
            let out = tools[0].run(&args(a.clone()), &c);
            assert!(out.failed, "{a}");
            assert_eq!(out.for_model, required, "{a}");
        }

        let not_found = r#"{"error": "skill_not_found", "name": "", "suggestions": []}"#;
        for a in [json!({}), json!({"name": null}), json!({"name": 5}), json!({"name": {"n": "weather"}})] {
            assert_eq!(tools[1].run(&args(a.clone()), &c).for_model, not_found, "{a}");
        }
        let loaded = tools[1].run(&args(json!({"name": " weather ", "version": 2})), &c);
        assert!(loaded.history_text().starts_with("[Skill loaded: weather@v1 sha256:"), "{}", loaded.history_text());

        let not_loaded = "Error: load the Skill before reading its resources";
        for a in [json!({"path": "references/x.md"}), json!({"name": 5, "path": "references/x.md"})] {
            assert_eq!(tools[2].run(&args(a.clone()), &c).for_model, not_loaded, "{a}");
        }
        let relative = "Error: resource path must be relative to the Skill package";
        for a in [
            json!({"name": "weather"}),
            json!({"name": "weather", "path": null}),
            json!({"name": " weather", "path": 7}),
        ] {
            assert_eq!(tools[2].run(&args(a.clone()), &c).for_model, relative, "{a}");
        }
        fs::remove_dir_all(data).unwrap();
    }
}
