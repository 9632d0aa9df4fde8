//! The one skill store + catalog instance shared by the HTTP routes, the agent tools and
//! evolution (docs/skills.md §1, §9): roots, refresh, and every mutation under one process-wide lock
//! with hidden-temp-dir builds and atomic renames: create, replace, enable, delete and import.
//! Snapshot-backed operations (versions, rollback, invalid-package deletion) are in
//! [`snapshots`], the read side (list, detail, content, validate) in [`super::read`]. Called from the HTTP thread and from turn
//! workers; readers take an `Arc<Catalog>` and never block on a refresh.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::json;

use super::catalog::{self, Catalog, DepProbe, SkillRecord};
use super::frontmatter;
use super::package;
use super::{is_valid_name, validate_name, Result, SkillError, Source};
use crate::util::hash::sha256_hex;
use crate::util::sync::{self, lock};

mod snapshots;
use crate::util::{fsx, time};

/// Read-only message for every mutation of a built-in.
pub(crate) const BUILTIN_READ_ONLY: &str = "built-in Skills are read-only";
/// Stale `expected_hash`.
pub(crate) const CONTENT_CHANGED: &str = "Skill content changed since it was read";

/// Where skills live on disk.
#[derive(Debug, Clone)]
pub struct SkillPaths {
    pub builtin: PathBuf,
    pub user: PathBuf,
    pub(crate) agent: PathBuf,
    pub(crate) snapshots: PathBuf,
    pub(crate) evolution: PathBuf,
}

impl SkillPaths {
    /// The standard layout under a data root; built-ins are materialised in `<data>/skills/builtin`.
    pub fn under(data: &Path) -> SkillPaths {
        SkillPaths {
            builtin: data.join("skills").join("builtin"),
            user: data.join("skills").join("user"),
            agent: data.join("skills").join("agent"),
            snapshots: data.join("skill-snapshots"),
            evolution: data.join("skill-evolution"),
        }
    }

    pub(crate) fn root(&self, s: Source) -> &Path {
        match s {
            Source::Builtin => &self.builtin,
            Source::User => &self.user,
            Source::Agent => &self.agent,
        }
    }

    fn ensure(&self) -> std::io::Result<()> {
        for d in [&self.builtin, &self.user, &self.agent, &self.snapshots] {
            fsx::create_private_dirs(d)?;
        }
        fsx::create_private_dirs(&self.evolution.join("evidence"))?;
        fsx::create_private_dirs(&self.evolution.join("proposals"))
    }
}

/// Produces the current dependency probe (tool registry, MCP catalog, env) at refresh time.
pub type ProbeFn = dyn Fn() -> DepProbe + Send + Sync;

/// A create request (`POST /api/skills`, `agent_skill_manage`, approved evolution proposals).
#[derive(Debug, Clone)]
pub(crate) struct CreateRequest {
    pub(crate) name: String,
    pub(crate) content: String,
    pub(crate) source: Source,
    pub(crate) support_files: BTreeMap<String, String>,
    pub(crate) enabled: bool,
    /// `creation_reason` in `_meta.json` (agent-created skills only).
    pub(crate) reason: Option<String>,
}

/// A replace request (`PUT /api/skills/{name}`, approved update proposals).
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplaceRequest {
    pub(crate) content: String,
    /// `None`: keep every other file byte for byte; `Some`: rebuild with exactly these files.
    pub(crate) support_files: Option<BTreeMap<String, String>>,
    pub(crate) expected_hash: Option<String>,
    /// Evolution may only touch agent skills.
    pub(crate) agent_only: bool,
}

/// `GET /api/skills` filters (already parsed and bounds-checked by the route).
#[derive(Debug, Clone)]
pub struct ListQuery {
    pub source: Option<String>,
    pub enabled: Option<bool>,
    pub availability: Option<String>,
    pub query: Option<String>,
    pub page: usize,
    pub page_size: usize,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery { source: None, enabled: None, availability: None, query: None, page: 1, page_size: 50 }
    }
}

/// Removes a hidden build directory when dropped unless it was published.
pub(crate) struct TempDir(pub(crate) Option<PathBuf>);

impl TempDir {
    pub(crate) fn path(&self) -> &Path {
        self.0.as_deref().expect("temp dir is present until published")
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            if let Err(e) = package::remove_tree(&p) {
                log::warn!("event=skills.temp_cleanup_failed kind={:?}", e.kind());
            }
        }
    }
}

/// The shared skill store and catalog.
pub struct SkillService {
    paths: SkillPaths,
    catalog: Mutex<Arc<Catalog>>,
    /// Serialises every mutation and refresh (the original's single store lock).
    op: Mutex<()>,
    probe: RwLock<Arc<ProbeFn>>,
    #[cfg(test)]
    pub(crate) fail_refreshes: std::sync::atomic::AtomicU32,
}

impl SkillService {
    /// Creates the roots and runs the first refresh.
    pub fn new(paths: SkillPaths, probe: Arc<ProbeFn>) -> Result<Arc<SkillService>> {
        paths.ensure()?;
        let svc = Arc::new(SkillService {
            paths,
            catalog: Mutex::new(Arc::new(Catalog::default())),
            op: Mutex::new(()),
            probe: RwLock::new(probe),
            #[cfg(test)]
            fail_refreshes: std::sync::atomic::AtomicU32::new(0),
        });
        svc.recover();
        svc.refresh()?;
        Ok(svc)
    }

    /// Crash recovery in the mutable roots: a `.<name>.<hex>.bak` whose package is missing was
    /// left between the two renames of a swap and is put back; other leftover build dirs
    /// (`*.tmp`, stale backups) are removed. Hidden entries are never packages, so this only
    /// tidies.
    fn recover(&self) {
        for source in [Source::User, Source::Agent] {
            let root = self.paths.root(source);
            let Ok(rd) = fs::read_dir(root) else { continue };
            for e in rd.filter_map(|e| e.ok()) {
                let n = e.file_name().to_string_lossy().into_owned();
                let Some(hidden) = n.strip_prefix('.') else { continue };
                let path = e.path();
                let restored = hidden
                    .strip_suffix(".bak")
                    .and_then(|stem| stem.rsplit_once('.'))
                    .filter(|(name, hex)| is_valid_name(name) && hex.len() == 16)
                    .filter(|(name, _)| fs::symlink_metadata(root.join(name)).is_err())
                    .map(|(name, _)| fs::rename(&path, root.join(name)).is_ok())
                    .unwrap_or(false);
                if restored {
                    log::warn!("event=skills.recovered_backup source={} name={:?}", source.as_str(), hidden);
                } else if n.ends_with(".tmp") || n.ends_with(".bak") {
                    if let Err(err) = package::remove_tree(&path) {
                        log::warn!("event=skills.leftover_cleanup_failed kind={:?}", err.kind());
                    }
                }
            }
        }
    }

    /// The server's service: roots under the data dir, the embedded built-ins installed, and
    /// a dependency probe over `tools` (the full registry) and the config's variables. MCP
    /// server names come later through [`SkillService::set_probe`].
    pub(crate) fn from_config(cfg: &crate::config::Config, tools: BTreeSet<String>) -> Result<Arc<SkillService>> {
        let paths = SkillPaths::under(&cfg.data_dir);
        super::builtin::install(&paths.builtin)?;
        let vars = cfg.vars.map().clone();
        SkillService::new(
            paths,
            Arc::new(move || DepProbe { tools: tools.clone(), mcp_servers: Default::default(), vars: vars.clone() }),
        )
    }

    pub(crate) fn paths(&self) -> &SkillPaths {
        &self.paths
    }

    /// Replaces the dependency probe and refreshes (after MCP config changes too).
    pub(crate) fn set_probe(&self, probe: Arc<ProbeFn>) -> Result<()> {
        *sync::write(&self.probe) = probe;
        self.refresh()
    }

    /// The current catalog snapshot.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&lock(&self.catalog))
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<SkillRecord>> {
        self.catalog().get(name).cloned()
    }

    /// Rescans all roots.
    pub fn refresh(&self) -> Result<()> {
        let _g = lock(&self.op);
        self.refresh_locked()
    }

    fn refresh_locked(&self) -> Result<()> {
        #[cfg(test)]
        {
            use std::sync::atomic::Ordering;
            if self.fail_refreshes.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                return Err(SkillError::Internal("injected refresh failure".into()));
            }
        }
        let probe = (sync::read(&self.probe))();
        let roots: Vec<(Source, PathBuf)> =
            Source::ALL.iter().map(|s| (*s, self.paths.root(*s).to_path_buf())).collect();
        let revision = self.catalog().revision + 1;
        let cat = catalog::scan(&roots, &probe, revision)?;
        *lock(&self.catalog) = Arc::new(cat);
        Ok(())
    }

    fn record(&self, name: &str) -> Result<Arc<SkillRecord>> {
        self.get(name).ok_or_else(|| SkillError::not_found(format!("Skill not found: {name}")))
    }

    fn mutable_record(&self, name: &str, agent_only: bool) -> Result<Arc<SkillRecord>> {
        let rec = self.record(name)?;
        if !rec.source.mutable() {
            return Err(SkillError::Permission(BUILTIN_READ_ONLY.into()));
        }
        if agent_only && rec.source != Source::Agent {
            return Err(SkillError::Permission("evolution can modify only agent Skills".into()));
        }
        Ok(rec)
    }

    /// Sources whose root already holds an entry called `name` (valid or not).
    pub(crate) fn sources_holding(&self, name: &str) -> Vec<Source> {
        Source::ALL.into_iter().filter(|s| fs::symlink_metadata(self.paths.root(*s).join(name)).is_ok()).collect()
    }

    fn check_available(&self, name: &str) -> Result<()> {
        let taken = self.sources_holding(name);
        if taken.is_empty() {
            return Ok(());
        }
        let list: Vec<&str> = taken.iter().map(|s| s.as_str()).collect();
        Err(SkillError::Conflict(format!("Skill already exists in {}: {name}", list.join(", "))))
    }

    // ----- mutations -------------------------------------------------------------------

    /// Creates a package in the user or agent root.
    pub(crate) fn create(&self, req: CreateRequest) -> Result<Arc<SkillRecord>> {
        let name = validate_name(&req.name)?;
        let parsed = frontmatter::parse(&req.content, Some(&name))?;
        if req.source == Source::Builtin {
            return Err(SkillError::Permission(BUILTIN_READ_ONLY.into()));
        }
        let support = check_support_map(&req.support_files)?;
        let _g = lock(&self.op);
        self.check_available(&name)?;
        let root = self.paths.root(req.source);
        let tmp = TempDir(Some(package::hidden_temp(root, &name, "tmp")));
        let meta =
            package::fresh_meta(req.source, req.enabled, req.reason.as_deref().filter(|_| req.source == Source::Agent));
        package::write_package(tmp.path(), &parsed.text, &support, &meta)?;
        package::read_package(tmp.path(), Some(&name))?;
        self.publish(tmp, &root.join(&name), req.source, &parsed.hash)
    }

    /// Renames a validated temp dir into place, refreshes and verifies the new record;
    /// on any failure after the rename the published dir is removed again.
    fn publish(&self, mut tmp: TempDir, dest: &Path, source: Source, hash: &str) -> Result<Arc<SkillRecord>> {
        fs::rename(tmp.path(), dest)?;
        tmp.disarm();
        crate::util::fsx::sync_dir(dest.parent().unwrap_or(dest));
        let name = package::dir_name(dest);
        let verified = self.refresh_locked().and_then(|()| {
            self.get(&name)
                .filter(|r| r.source == source && r.hash == hash)
                .ok_or_else(|| SkillError::Internal("Skill publication could not be verified".into()))
        });
        match verified {
            Ok(rec) => Ok(rec),
            Err(e) => {
                let _ = package::remove_tree(dest);
                let _ = self.refresh_locked();
                Err(e)
            }
        }
    }

    /// Replaces a mutable package's SKILL.md (and optionally its support files).
    /// Validates before touching anything: a rejected edit changes nothing and adds no version.
    pub(crate) fn replace(&self, name: &str, req: ReplaceRequest) -> Result<(Arc<SkillRecord>, String)> {
        let _g = lock(&self.op);
        let rec = self.mutable_record(name, req.agent_only)?;
        if let Some(expected) = req.expected_hash.as_deref().filter(|h| !h.is_empty()) {
            if current_hash(&rec.path)? != expected {
                return Err(SkillError::Conflict(CONTENT_CHANGED.into()));
            }
        }
        let parsed = frontmatter::parse(&req.content, Some(name))?;
        let support = req.support_files.as_ref().map(check_support_map).transpose()?;
        let root = self.paths.root(rec.source);
        let tmp = TempDir(Some(package::hidden_temp(root, name, "tmp")));
        match &support {
            None => {
                package::copy_tree(&rec.path, tmp.path())?;
                fsx::write_private(&tmp.path().join("SKILL.md"), parsed.text.as_bytes())?;
            }
            Some(files) => {
                let meta = package::fresh_meta(rec.source, rec.enabled, None);
                package::write_package(tmp.path(), &parsed.text, files, &meta)?;
            }
        }
        package::read_package(tmp.path(), Some(name))?;
        let snapshot = self.snapshot(&rec)?;
        self.swap(tmp, &rec.path)?;
        self.refresh_locked()?;
        Ok((self.record(name)?, snapshot))
    }

    /// Swaps a validated temp dir with the live package: live -> `.bak`, temp -> live,
    /// backup removed; if the second rename fails the backup is put back.
    fn swap(&self, mut tmp: TempDir, live: &Path) -> Result<()> {
        let parent = live.parent().unwrap_or(live);
        let bak = package::hidden_temp(parent, &package::dir_name(live), "bak");
        fs::rename(live, &bak)?;
        if let Err(e) = fs::rename(tmp.path(), live) {
            fs::rename(&bak, live)?;
            return Err(e.into());
        }
        tmp.disarm();
        crate::util::fsx::sync_dir(parent);
        if let Err(e) = package::remove_tree(&bak) {
            log::warn!("event=skills.backup_cleanup_failed kind={:?}", e.kind());
        }
        Ok(())
    }

    /// Sets `enabled` in `_meta.json` (read-modify-write).
    pub(crate) fn set_enabled(&self, name: &str, enabled: bool) -> Result<Arc<SkillRecord>> {
        let _g = lock(&self.op);
        let rec = self.mutable_record(name, false)?;
        let pkg = package::read_package(&rec.path, Some(name))?;
        let mut meta = pkg.meta;
        meta.insert("enabled".into(), json!(enabled));
        meta.insert("updated_at".into(), json!(time::now_epoch()));
        package::write_meta(&rec.path, &meta)?;
        self.refresh_locked()?;
        self.record(name)
    }

    /// Snapshots, then removes a mutable package.
    pub fn delete(&self, name: &str) -> Result<()> {
        let _g = lock(&self.op);
        let rec = self.mutable_record(name, false)?;
        self.snapshot(&rec)?;
        package::remove_tree(&rec.path)?;
        self.refresh_locked()
    }

    /// Imports a ZIP archive into the user root (docs/skills.md §10).
    pub fn import_zip(&self, bytes: &[u8]) -> Result<Arc<SkillRecord>> {
        let (tmp, parsed) = super::import::unpack(bytes, &self.paths.user)?;
        let name = parsed.manifest.name.clone();
        let _g = lock(&self.op);
        self.check_available(&name)?;
        package::write_meta(tmp.path(), &package::fresh_meta(Source::User, true, None))?;
        package::read_package(tmp.path(), Some(&name))?;
        self.publish(tmp, &self.paths.user.join(&name), Source::User, &parsed.hash)
    }
}

/// Hash of the normalised SKILL.md currently on disk.
fn current_hash(dir: &Path) -> Result<String> {
    let bytes = fs::read(dir.join("SKILL.md")).map_err(|_| SkillError::not_found("SKILL.md not found"))?;
    let text = String::from_utf8(bytes).map_err(|_| SkillError::invalid("SKILL.md must be UTF-8"))?;
    Ok(sha256_hex(frontmatter::normalize_newlines(&text).as_bytes()))
}

/// Checks every support path; returns the normalised map (duplicates after normalising refused).
fn check_support_map(files: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (k, v) in files {
        let p = package::check_support_path(k)?;
        if v.len() as u64 > super::MAX_SUPPORT_FILE_BYTES {
            return Err(SkillError::invalid(format!("supporting file is too large: {}", package::bounded(&p, 120))));
        }
        if out.insert(p.clone(), v.clone()).is_some() {
            return Err(SkillError::invalid(format!("duplicate support path: {}", package::bounded(&p, 120))));
        }
    }
    // A path that is both a file and a parent directory cannot be written.
    for k in out.keys() {
        if out.keys().any(|o| o.starts_with(&format!("{k}/"))) {
            return Err(SkillError::invalid(format!(
                "support path conflicts with a directory: {}",
                package::bounded(k, 120)
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::Value;

    use super::*;
    use crate::skills::import::tests::build;
    use crate::skills::package::tests::{make_pkg, skill_md, tmp};
    use crate::skills::views::SkillView;
    use std::sync::atomic::Ordering;

    pub(crate) fn service(tag: &str) -> (PathBuf, Arc<SkillService>) {
        let data = tmp(tag);
        let paths = SkillPaths::under(&data);
        crate::skills::builtin::install(&paths.builtin).unwrap();
        let svc = SkillService::new(paths, Arc::new(|| DepProbe::base(Default::default()))).unwrap();
        (data, svc)
    }

    pub(crate) fn create(svc: &SkillService, name: &str, source: Source, extra: &str) -> Arc<SkillRecord> {
        svc.create(CreateRequest {
            name: name.into(),
            content: skill_md(name, extra),
            source,
            support_files: BTreeMap::new(),
            enabled: true,
            reason: None,
        })
        .unwrap()
    }

    /// Every path below `dir`, sorted (to prove an operation changed nothing).
    pub(crate) fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        fn walk(d: &Path, base: &Path, out: &mut Vec<(String, Vec<u8>)>) {
            let Ok(rd) = fs::read_dir(d) else { return };
            for e in rd {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(base).unwrap().display().to_string();
                if p.is_dir() {
                    out.push((rel, Vec::new()));
                    walk(&p, base, out);
                } else {
                    out.push((rel, fs::read(&p).unwrap_or_default()));
                }
            }
        }
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    pub(crate) fn req(content: String) -> ReplaceRequest {
        ReplaceRequest { content, ..Default::default() }
    }

    #[test]
    fn create_validates_publishes_and_refuses_collisions() {
        let (data, svc) = service("svc-create");
        let mut files = BTreeMap::new();
        files.insert("references\\guide.md".to_string(), "guide".to_string());
        let rec = svc
            .create(CreateRequest {
                name: " demo ".into(),
                content: skill_md("demo", "display_name: 演示\n"),
                source: Source::User,
                support_files: files,
                enabled: false,
                reason: Some("ignored for user".into()),
            })
            .unwrap();
        assert_eq!(rec.source, Source::User);
        assert!(!rec.enabled);
        assert_eq!(rec.availability(), "disabled");
        assert_eq!(fs::read_to_string(rec.path.join("references/guide.md")).unwrap(), "guide");
        let meta: Value = serde_json::from_slice(&fs::read(rec.path.join("_meta.json")).unwrap()).unwrap();
        assert_eq!(meta["source"], "user");
        assert_eq!(meta["agentCreated"], false);
        assert_eq!(meta["storage_version"], 1);
        assert!(meta.get("creation_reason").is_none());
        assert_eq!(SkillView::record(&rec, true).path, Some(rec.path.display().to_string()));

        // Name taken in any root, whatever is there.
        let e = svc
            .create(CreateRequest {
                name: "demo".into(),
                content: skill_md("demo", ""),
                source: Source::Agent,
                support_files: BTreeMap::new(),
                enabled: true,
                reason: None,
            })
            .unwrap_err();
        assert_eq!(e, SkillError::Conflict("Skill already exists in user: demo".into()));
        assert_eq!(e.status(), 409);
        fs::create_dir(svc.paths().agent.join("legacy")).unwrap();
        fs::create_dir(svc.paths().user.join("legacy")).unwrap();
        let e = svc.create(CreateRequest {
            name: "legacy".into(),
            content: skill_md("legacy", ""),
            source: Source::User,
            support_files: BTreeMap::new(),
            enabled: true,
            reason: None,
        });
        assert_eq!(e.unwrap_err().message(), "Skill already exists in user, agent: legacy");
        let e = svc.create(CreateRequest {
            name: "weather".into(),
            content: skill_md("weather", ""),
            source: Source::User,
            support_files: BTreeMap::new(),
            enabled: true,
            reason: None,
        });
        assert_eq!(e.unwrap_err().message(), "Skill already exists in builtin: weather");

        // Invalid inputs: nothing written.
        let before = tree(&svc.paths().user);
        let bad = |name: &str, content: String, source: Source, files: &[(&str, &str)]| {
            svc.create(CreateRequest {
                name: name.into(),
                content,
                source,
                support_files: files.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
                enabled: true,
                reason: None,
            })
            .unwrap_err()
        };
        assert_eq!(bad("Bad", skill_md("bad", ""), Source::User, &[]).status(), 422);
        assert_eq!(
            bad("x", skill_md("y", ""), Source::User, &[]).message(),
            "frontmatter name must match the package directory"
        );
        let e = bad("x", skill_md("x", ""), Source::Builtin, &[]);
        assert_eq!((e.status(), e.message()), (403, BUILTIN_READ_ONLY));
        assert_eq!(
            bad("x", skill_md("x", ""), Source::User, &[("../x", "a")]).message(),
            "support path must be package-relative"
        );
        assert_eq!(
            bad("x", skill_md("x", ""), Source::User, &[("docs/x", "a")]).message(),
            "support path must be under references, templates, scripts, or assets"
        );
        assert_eq!(tree(&svc.paths().user), before);
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn agent_create_records_reason_and_shadows_lower_sources() {
        let (data, svc) = service("svc-agent");
        make_pkg(&svc.paths().user, "github", "");
        svc.refresh().unwrap();
        let rec = svc.get("github").unwrap();
        assert_eq!(rec.source, Source::User);
        assert_eq!(rec.shadowed_sources, vec![Source::Builtin]);
        assert_eq!(rec.availability(), "available", "the user copy declares no gh binary");
        let r = svc
            .create(CreateRequest {
                name: "helper".into(),
                content: skill_md("helper", ""),
                source: Source::Agent,
                support_files: BTreeMap::new(),
                enabled: true,
                reason: Some("  user asked  ".into()),
            })
            .unwrap();
        let meta: Value = serde_json::from_slice(&fs::read(r.path.join("_meta.json")).unwrap()).unwrap();
        assert_eq!(meta["agentCreated"], true);
        assert_eq!(meta["creation_reason"], "user asked");
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn replace_checks_hash_and_validation_before_touching_anything() {
        let (data, svc) = service("svc-replace");
        let rec = create(&svc, "demo", Source::User, "");
        fs::create_dir(rec.path.join("assets")).unwrap();
        let bin: Vec<u8> = (0..=255u8).rev().cycle().take(3000).collect();
        fs::write(rec.path.join("assets/blob.bin"), &bin).unwrap();
        let meta_before = fs::read(rec.path.join("_meta.json")).unwrap();
        let before = tree(&data);

        let stale = svc.replace(
            "demo",
            ReplaceRequest {
                content: skill_md("demo", "version: 2\n"),
                expected_hash: Some("0".repeat(64)),
                ..Default::default()
            },
        );
        assert_eq!(stale.unwrap_err(), SkillError::Conflict(CONTENT_CHANGED.into()));
        let renamed = svc.replace("demo", req(skill_md("other", ""))).unwrap_err();
        assert_eq!((renamed.status(), renamed.message()), (422, "frontmatter name must match the package directory"));
        let empty = svc.replace("demo", req("---\nname: demo\ndescription: d\n---\n".into()));
        assert_eq!(empty.unwrap_err().message(), "SKILL.md body cannot be empty");
        assert_eq!(tree(&data), before, "a rejected edit must change nothing and add no version");
        assert!(svc.versions("demo").unwrap().is_empty());

        let current = svc.get("demo").unwrap().hash.clone();
        let (r, snap) = svc
            .replace(
                "demo",
                ReplaceRequest {
                    content: skill_md("demo", "display_name: New label\nversion: 2\n").replace('\n', "\r\n"),
                    expected_hash: Some(current),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(r.manifest.version, 2);
        assert_eq!(r.manifest.label(), "New label");
        assert_eq!(r.path, rec.path, "editing display_name keeps name and path");
        assert_eq!(fs::read(r.path.join("assets/blob.bin")).unwrap(), bin);
        assert_eq!(fs::read(r.path.join("_meta.json")).unwrap(), meta_before);
        assert!(!fs::read_to_string(r.path.join("SKILL.md")).unwrap().contains('\r'));
        assert_eq!(svc.versions("demo").unwrap(), vec![snap.clone()]);

        // With support_files the package is rebuilt from exactly those files, enabled kept.
        svc.set_enabled("demo", false).unwrap();
        let mut files = BTreeMap::new();
        files.insert("templates/t.txt".to_string(), "tpl".to_string());
        let (r, _) = svc
            .replace(
                "demo",
                ReplaceRequest {
                    content: skill_md("demo", "version: 3\n"),
                    support_files: Some(files),
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(!r.path.join("assets").exists());
        assert_eq!(fs::read_to_string(r.path.join("templates/t.txt")).unwrap(), "tpl");
        assert!(!r.enabled);
        assert_eq!(svc.versions("demo").unwrap().len(), 2);
        // No temp or backup dirs left in the root.
        let names: Vec<String> = fs::read_dir(&svc.paths().user)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["demo"]);
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn builtins_are_read_only_and_delete_snapshots() {
        let (data, svc) = service("svc-ro");
        for e in [
            svc.replace("weather", req(skill_md("weather", ""))).unwrap_err(),
            svc.set_enabled("weather", false).unwrap_err(),
            svc.delete("weather").unwrap_err(),
            svc.rollback("weather", "1-a").unwrap_err(),
        ] {
            assert_eq!((e.status(), e.message()), (403, BUILTIN_READ_ONLY));
        }
        let rec = create(&svc, "gone", Source::User, "");
        svc.delete("gone").unwrap();
        assert!(!rec.path.exists());
        assert!(svc.get("gone").is_none());
        let snaps = fs::read_dir(svc.paths().snapshots.join("user/gone")).unwrap().count();
        assert_eq!(snaps, 1);
        assert_eq!(svc.delete("gone").unwrap_err().status(), 404);
        // Disabled skills stay listed but leave search and the available filter.
        create(&svc, "quiet", Source::User, "");
        svc.set_enabled("quiet", false).unwrap();
        let list =
            svc.list(&ListQuery { enabled: Some(true), availability: Some("available".into()), ..Default::default() });
        assert!(!list.items.iter().any(|i| i.name == "quiet"));
        assert!(svc.catalog().search("quiet", 10, false).is_empty());
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn startup_restores_an_interrupted_swap_and_removes_leftovers() {
        let data = tmp("svc-recover");
        let paths = SkillPaths::under(&data);
        fs::create_dir_all(&paths.user).unwrap();
        fs::create_dir_all(&paths.agent).unwrap();
        // Crash between "live -> .bak" and "tmp -> live": only the backup holds the package.
        let bak = paths.user.join(".demo.0123456789abcdef.bak");
        fs::create_dir(&bak).unwrap();
        fs::write(bak.join("SKILL.md"), skill_md("demo", "")).unwrap();
        let tmp_left = paths.user.join(".demo.fedcba9876543210.tmp");
        fs::create_dir(&tmp_left).unwrap();
        // A stale backup next to an intact package is just removed.
        make_pkg(&paths.agent, "kept", "");
        let stale = paths.agent.join(".kept.00000000000000aa.bak");
        fs::create_dir(&stale).unwrap();
        fs::create_dir(paths.user.join(".skill-import.1111111111111111.tmp")).unwrap();
        let svc = SkillService::new(paths.clone(), Arc::new(DepProbe::default)).unwrap();
        assert_eq!(svc.get("demo").unwrap().source, Source::User);
        assert!(svc.get("kept").is_some());
        let names = |d: &Path| {
            let mut v: Vec<String> =
                fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
            v.sort();
            v
        };
        assert_eq!(names(&paths.user), ["demo"]);
        assert_eq!(names(&paths.agent), ["kept"]);
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn failed_refresh_after_publish_leaves_nothing() {
        let (data, svc) = service("svc-pubfail");
        let before = tree(&svc.paths().agent);
        svc.fail_refreshes.store(1, Ordering::SeqCst);
        let e = svc
            .create(CreateRequest {
                name: "late".into(),
                content: skill_md("late", ""),
                source: Source::Agent,
                support_files: BTreeMap::new(),
                enabled: true,
                reason: None,
            })
            .unwrap_err();
        assert_eq!(e.status(), 500);
        assert!(!e.message().contains(&data.display().to_string()));
        assert_eq!(tree(&svc.paths().agent), before);
        assert!(svc.get("late").is_none());
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn import_ignores_archive_meta_and_refuses_conflicts_in_every_root() {
        let (data, svc) = service("svc-import");
        let zip = build(&[
            ("SKILL.md", skill_md("zipped", "").into_bytes(), 0),
            ("_meta.json", br#"{"source":"builtin","enabled":false,"agentCreated":true}"#.to_vec(), 0),
            ("assets/a.bin", vec![9, 8, 7], 0),
        ]);
        let rec = svc.import_zip(&zip).unwrap();
        assert_eq!(rec.source, Source::User);
        assert!(rec.enabled);
        let meta: Value = serde_json::from_slice(&fs::read(rec.path.join("_meta.json")).unwrap()).unwrap();
        assert_eq!((meta["source"].as_str(), meta["agentCreated"].as_bool()), (Some("user"), Some(false)));

        create(&svc, "agentish", Source::Agent, "");
        for name in ["zipped", "agentish", "weather"] {
            let zip = build(&[("SKILL.md", skill_md(name, "").into_bytes(), 0)]);
            let before_user = tree(&svc.paths().user);
            let rev = svc.catalog().revision;
            let e = svc.import_zip(&zip).unwrap_err();
            assert_eq!(e.status(), 409, "{name}");
            assert_eq!(tree(&svc.paths().user), before_user);
            assert_eq!(svc.catalog().revision, rev, "a rejected import must not refresh");
        }
        fs::remove_dir_all(data).unwrap();
    }
}
