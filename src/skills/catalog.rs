//! The effective catalog: one scan of the three roots (docs/skills.md §4) into immutable records,
//! shadowing, availability from a dependency probe, invalid-package diagnostics and the search
//! index. A `Catalog` is built whole and shared behind an `Arc`, so readers on any thread never
//! wait for a refresh; its JSON shapes live in [`super::views`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::frontmatter::Manifest;
use super::package::{self, bounded};
use super::search::{doc_tokens, SkillIndex};
use super::Source;
use crate::tool::BUILTIN_NAMES;
use crate::util::hash::sha256_hex;

/// Diagnostics kept per refresh; more invalid packages are silently not listed.
pub(crate) const MAX_INVALID: usize = 100;

/// What the dependency check compares against.
#[derive(Debug, Clone, Default)]
pub struct DepProbe {
    /// Names in the full tool registry (MCP wrappers excluded: `mcp_*` never counts as missing).
    pub(crate) tools: BTreeSet<String>,
    /// Configured (not necessarily connected) MCP server names.
    pub(crate) mcp_servers: BTreeSet<String>,
    /// Environment (process env + .env), also the source of `PATH`.
    pub(crate) vars: BTreeMap<String, String>,
}

/// The always-present tools of the base registry (docs/http-api.md §7): the built-ins, then
/// `agent_skill_manage`.
pub(crate) const BASE_TOOLS: [&str; BUILTIN_NAMES.len() + 1] = {
    let mut all = ["agent_skill_manage"; BUILTIN_NAMES.len() + 1];
    let mut i = 0;
    while i < BUILTIN_NAMES.len() {
        all[i] = BUILTIN_NAMES[i];
        i += 1;
    }
    all
};

impl DepProbe {
    /// A probe with the base tools, no MCP servers and the given variables.
    pub fn base(vars: BTreeMap<String, String>) -> DepProbe {
        DepProbe { tools: BASE_TOOLS.iter().map(|s| s.to_string()).collect(), mcp_servers: BTreeSet::new(), vars }
    }

    fn on_path(&self, bin: &str, cache: &mut HashMap<String, bool>) -> bool {
        if let Some(v) = cache.get(bin) {
            return *v;
        }
        let found = !bin.contains('/')
            && self
                .vars
                .get("PATH")
                .map(|p| std::env::split_paths(p).any(|d| is_executable(&d.join(bin))))
                .unwrap_or(false);
        cache.insert(bin.to_string(), found);
        found
    }

    /// `missing` in the contract's order: bins, env, tools, MCP servers.
    fn missing(&self, m: &Manifest, cache: &mut HashMap<String, bool>) -> Vec<String> {
        let r = &m.requires;
        let mut out = Vec::new();
        for b in &r.bins {
            if !self.on_path(b, cache) {
                out.push(format!("bin:{b}"));
            }
        }
        for e in &r.env {
            if self.vars.get(e).is_none_or(|v| v.is_empty()) {
                out.push(format!("env:{e}"));
            }
        }
        for t in &r.tools {
            if !t.starts_with("mcp_") && !self.tools.contains(t) {
                out.push(format!("tool:{t}"));
            }
        }
        for s in &r.mcp_servers {
            if !self.mcp_servers.contains(s) {
                out.push(format!("mcp:{s}"));
            }
        }
        out
    }
}

fn is_executable(p: &Path) -> bool {
    let Ok(m) = fs::metadata(p) else { return false };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        m.is_file() && m.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        m.is_file()
    }
}

/// One effective skill.
#[derive(Debug, Clone)]
pub struct SkillRecord {
    /// The manifest with `body` emptied (bodies are read on demand, not kept in memory).
    pub(crate) manifest: Manifest,
    pub(crate) source: Source,
    pub(crate) path: PathBuf,
    pub(crate) enabled: bool,
    pub(crate) missing: Vec<String>,
    pub(crate) hash: String,
    pub(crate) shadowed_sources: Vec<Source>,
}

impl SkillRecord {
    pub(crate) fn name(&self) -> &str {
        &self.manifest.name
    }

    pub(crate) fn availability(&self) -> &'static str {
        if !self.enabled {
            "disabled"
        } else if !self.missing.is_empty() {
            "missing_dependency"
        } else {
            "available"
        }
    }
}

/// A package directory that failed the loader.
#[derive(Debug, Clone)]
pub(crate) struct InvalidEntry {
    /// The raw directory name inside the root (the label in the key may be bounded).
    pub(crate) dir: String,
    pub(crate) message: String,
}

/// One immutable scan result.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub records: BTreeMap<String, Arc<SkillRecord>>,
    /// Keyed `<source>:<label>` (the invalid-delete selector).
    pub(crate) invalid: BTreeMap<String, InvalidEntry>,
    pub(crate) revision: u64,
    index: SkillIndex,
}

/// Scans `roots` (in precedence order, lowest first) into a catalog.
pub(crate) fn scan(roots: &[(Source, PathBuf)], probe: &DepProbe, revision: u64) -> std::io::Result<Catalog> {
    let mut candidates: BTreeMap<String, Vec<SkillRecord>> = BTreeMap::new();
    let mut invalid = BTreeMap::new();
    let mut bin_cache = HashMap::new();
    for (source, root) in roots {
        let mut children: Vec<(String, PathBuf)> = match fs::read_dir(root) {
            Ok(rd) => {
                rd.filter_map(|e| e.ok()).map(|e| (e.file_name().to_string_lossy().into_owned(), e.path())).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        children.sort_by(|a, b| a.0.to_lowercase().cmp(&b.0.to_lowercase()).then(a.0.cmp(&b.0)));
        for (name, path) in children {
            if name.starts_with('.') || !fs::metadata(&path).map(|m| m.is_dir()).unwrap_or(false) {
                continue;
            }
            match package::read_package(&path, None) {
                Ok(pkg) => {
                    let mut manifest = pkg.parsed.manifest;
                    manifest.body = String::new();
                    let missing = if pkg.enabled { probe.missing(&manifest, &mut bin_cache) } else { Vec::new() };
                    candidates.entry(manifest.name.clone()).or_default().push(SkillRecord {
                        manifest,
                        source: *source,
                        path,
                        enabled: pkg.enabled,
                        missing,
                        hash: pkg.parsed.hash,
                        shadowed_sources: Vec::new(),
                    });
                }
                Err(e) => {
                    if invalid.len() < MAX_INVALID {
                        let key = invalid_key(*source, &name, &invalid);
                        invalid.insert(
                            key,
                            InvalidEntry { dir: name.clone(), message: package::sanitize(e.message(), &[root, &path]) },
                        );
                    }
                }
            }
        }
    }
    let records: BTreeMap<String, Arc<SkillRecord>> = candidates
        .into_iter()
        .map(|(name, mut recs)| {
            recs.sort_by_key(|r| r.source);
            let mut top = recs.pop().expect("every candidate list has one record");
            top.shadowed_sources = recs.iter().map(|r| r.source).collect();
            (name, Arc::new(top))
        })
        .collect();
    let index = SkillIndex::build(
        records
            .values()
            .map(|r| {
                let m = &r.manifest;
                let (tags, triggers) = (m.tags.join(" "), m.triggers.join(" "));
                let tokens = doc_tokens(&[&m.name, m.label(), &m.description, &tags, &triggers]);
                (m.name.clone(), tokens, r.enabled)
            })
            .collect(),
    );
    Ok(Catalog { records, invalid, revision, index })
}

/// `<source>:<label>`; the label is the bounded directory name, disambiguated by a hash suffix.
fn invalid_key(source: Source, name: &str, taken: &BTreeMap<String, InvalidEntry>) -> String {
    let mut label = bounded(name, 80);
    if label.is_empty() {
        label = "unknown".into();
    }
    let key = format!("{}:{label}", source.as_str());
    if !taken.contains_key(&key) {
        return key;
    }
    let short = bounded(name, 71);
    format!("{}:{short}~{}", source.as_str(), &sha256_hex(name.as_bytes())[..8])
}

impl Catalog {
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<SkillRecord>> {
        self.records.get(name)
    }

    /// Search over records; disabled ones only with `include_disabled`.
    pub(crate) fn search(&self, query: &str, limit: usize, include_disabled: bool) -> Vec<(Arc<SkillRecord>, f64)> {
        self.index
            .rank(query, limit, include_disabled)
            .into_iter()
            .filter_map(|(name, s)| self.records.get(name).map(|r| (Arc::clone(r), s)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::package::tests::{make_pkg, tmp};
    use crate::skills::views::{SkillList, SkillView};

    fn roots(base: &Path) -> Vec<(Source, PathBuf)> {
        Source::ALL
            .iter()
            .map(|s| {
                let p = base.join(s.as_str());
                fs::create_dir_all(&p).unwrap();
                (*s, p)
            })
            .collect()
    }

    #[test]
    fn precedence_and_shadowing() {
        let base = tmp("cat-prec");
        let r = roots(&base);
        make_pkg(&r[0].1, "shared", "");
        make_pkg(&r[1].1, "shared", "");
        make_pkg(&r[2].1, "shared", "");
        make_pkg(&r[0].1, "builtin-only", "");
        make_pkg(&r[1].1, "user-over-builtin", "");
        make_pkg(&r[0].1, "user-over-builtin", "");
        let c = scan(&r, &DepProbe::default(), 1).unwrap();
        let s = c.get("shared").unwrap();
        assert_eq!(s.source, Source::Agent);
        assert_eq!(s.shadowed_sources, vec![Source::Builtin, Source::User]);
        let u = c.get("user-over-builtin").unwrap();
        assert_eq!(u.source, Source::User);
        assert_eq!(SkillView::record(u, false).shadowed_sources, ["builtin"]);
        assert_eq!(c.get("builtin-only").unwrap().shadowed_sources, vec![]);
        assert!(!SkillView::record(c.get("builtin-only").unwrap(), false).mutable);
        // An invalid higher-precedence package does not shadow the valid lower one.
        let bad = r[2].1.join("builtin-only");
        fs::create_dir(&bad).unwrap();
        let c = scan(&r, &DepProbe::default(), 2).unwrap();
        assert_eq!(c.get("builtin-only").unwrap().source, Source::Builtin);
        assert_eq!(c.invalid["agent:builtin-only"].message, "SKILL.md not found");
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn hidden_and_plain_files_are_skipped_and_invalid_is_reported_sanitised() {
        let base = tmp("cat-inv");
        let r = roots(&base);
        make_pkg(&r[1].1, ".hidden", "");
        fs::write(r[1].1.join("loose.md"), "x").unwrap();
        let broken = r[1].1.join("broken");
        fs::create_dir(&broken).unwrap();
        fs::write(broken.join("private-file.txt"), "x").unwrap();
        fs::write(broken.join("SKILL.md"), "x").unwrap();
        let c = scan(&r, &DepProbe::default(), 1).unwrap();
        assert!(c.records.is_empty());
        assert_eq!(c.invalid.len(), 1);
        let msg = &c.invalid["user:broken"].message;
        assert_eq!(msg, "unsupported package entry: private-file.txt");
        let all = serde_json::to_string(&SkillList::invalid_of(&c)).unwrap();
        assert!(!all.contains(&base.display().to_string()));
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn invalid_labels_are_bounded_and_disambiguated() {
        let mut taken = BTreeMap::new();
        let long = "x".repeat(100);
        let k = invalid_key(Source::User, &long, &taken);
        assert_eq!(k, format!("user:{}...", "x".repeat(77)));
        taken.insert(k.clone(), InvalidEntry { dir: long.clone(), message: String::new() });
        let long2 = format!("{}y", "x".repeat(99));
        let k2 = invalid_key(Source::User, &long2, &taken);
        assert_eq!(k2, format!("user:{}...~{}", "x".repeat(68), &sha256_hex(long2.as_bytes())[..8]));
        assert_eq!(invalid_key(Source::Agent, "a\u{1}b", &taken), "agent:a b");
    }

    #[test]
    fn availability_and_missing_order() {
        let base = tmp("cat-deps");
        let r = roots(&base);
        let bin_dir = base.join("bin");
        fs::create_dir(&bin_dir).unwrap();
        fs::write(bin_dir.join("present"), "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(bin_dir.join("present"), fs::Permissions::from_mode(0o755)).unwrap();
        }
        make_pkg(
            &r[1].1,
            "deps",
            "requires:\n  tools: [web_fetch, nope, mcp_x_y]\n  mcp_servers: [srv, other]\n  bins: [present, absent]\n  env: [SET_VAR, EMPTY_VAR, UNSET_VAR]\n",
        );
        let off = make_pkg(&r[1].1, "switched", "requires:\n  bins: [absent]\n");
        fs::write(off.join("_meta.json"), r#"{"enabled": 0}"#).unwrap();
        let mut probe = DepProbe::base(BTreeMap::from([
            ("PATH".to_string(), bin_dir.display().to_string()),
            ("SET_VAR".to_string(), "1".to_string()),
            ("EMPTY_VAR".to_string(), String::new()),
        ]));
        probe.mcp_servers.insert("srv".into());
        let c = scan(&r, &probe, 1).unwrap();
        let d = c.get("deps").unwrap();
        assert_eq!(d.missing, vec!["bin:absent", "env:EMPTY_VAR", "env:UNSET_VAR", "tool:nope", "mcp:other"]);
        assert_eq!(d.availability(), "missing_dependency");
        assert_eq!(c.get("switched").unwrap().availability(), "disabled");
        // Disabled skills are excluded from search unless asked; missing-dependency ones stay.
        assert_eq!(c.search("switched", 10, false).len(), 0);
        assert_eq!(c.search("switched", 10, true).len(), 1);
        assert_eq!(c.search("deps", 10, false).len(), 1);
        fs::remove_dir_all(base).unwrap();
    }
}
