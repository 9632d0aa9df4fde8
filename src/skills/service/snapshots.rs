//! Snapshot-backed store operations (docs/skills.md §9, docs/storage.md §7 "Snapshots"): the full copy
//! taken before every replace, delete and rollback, the versions listing, rollback (validated
//! before the swap, itself snapshotted first) and moving an invalid package into
//! `<snapshots>/invalid/…`. Same lock and threads as the rest of [`super::SkillService`].

use std::fs;
use std::path::Path;
use std::sync::Arc;

use super::{lock, SkillService, TempDir, BUILTIN_READ_ONLY};
use crate::skills::catalog::SkillRecord;
use crate::skills::package;
use crate::skills::views::InvalidDeleted;
use crate::skills::{Result, SkillError, Source};
use crate::util::fsx;
use crate::util::hash::sha256_hex;

impl SkillService {
    /// Full copy of the live package into `<snapshots>/<source>/<name>/<version>`.
    pub(super) fn snapshot(&self, rec: &SkillRecord) -> Result<String> {
        let dir = self.paths.snapshots.join(rec.source.as_str()).join(rec.name());
        fsx::create_private_dirs(&dir)?;
        let version = package::version_id();
        let tmp = TempDir(Some(package::hidden_temp(&dir, &version, "tmp")));
        package::copy_tree(&rec.path, tmp.path())?;
        let mut tmp = tmp;
        fs::rename(tmp.path(), dir.join(&version))?;
        tmp.disarm();
        Ok(version)
    }

    /// Snapshot versions, newest first (`[]` for built-ins).
    pub(crate) fn versions(&self, name: &str) -> Result<Vec<String>> {
        let rec = self.get(name).ok_or_else(|| SkillError::not_found("Skill not found"))?;
        Ok(self.versions_of(&rec))
    }

    pub(crate) fn versions_of(&self, rec: &SkillRecord) -> Vec<String> {
        if !rec.source.mutable() {
            return Vec::new();
        }
        let dir = self.paths.snapshots.join(rec.source.as_str()).join(rec.name());
        let mut v: Vec<String> = fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by(|a, b| b.cmp(a));
        v
    }

    /// Restores a snapshot (validated first), snapshotting the current state before.
    pub(crate) fn rollback(&self, name: &str, version: &str) -> Result<Arc<SkillRecord>> {
        if version.contains("..") || !package::is_plain_component(version) || version.starts_with('.') {
            return Err(SkillError::invalid("invalid snapshot version"));
        }
        let _g = lock(&self.op);
        let rec = self.mutable_record(name, false)?;
        let snap = self.paths.snapshots.join(rec.source.as_str()).join(name).join(version);
        if !fs::symlink_metadata(&snap).map(|m| m.is_dir()).unwrap_or(false) {
            return Err(SkillError::not_found(format!("snapshot not found: {version}")));
        }
        let root = self.paths.root(rec.source);
        let tmp = TempDir(Some(package::hidden_temp(root, name, "tmp")));
        package::copy_tree(&snap, tmp.path())?;
        package::read_package(tmp.path(), Some(name))?;
        self.snapshot(&rec)?;
        self.swap(tmp, &rec.path)?;
        self.refresh_locked()?;
        self.record(name)
    }

    /// Moves an invalid package (a diagnostic key of the last refresh) into
    /// `<snapshots>/invalid/<source>/<id>/<version>`.
    pub(crate) fn delete_invalid(&self, source: &str, directory: &str) -> Result<InvalidDeleted> {
        let source = Source::parse(source).ok_or_else(|| SkillError::invalid("invalid Skill source"))?;
        if source == Source::Builtin {
            return Err(SkillError::Permission(BUILTIN_READ_ONLY.into()));
        }
        if directory.is_empty()
            || directory == "."
            || directory == ".."
            || directory.contains('/')
            || directory.contains('\\')
        {
            return Err(SkillError::invalid("invalid Skill directory selector"));
        }
        let _g = lock(&self.op);
        let not_found = || SkillError::not_found("invalid Skill package not found");
        let cat = self.catalog();
        let entry = cat.invalid.get(&format!("{}:{directory}", source.as_str())).ok_or_else(not_found)?;
        let dir = self.paths.root(source).join(&entry.dir);
        if fs::symlink_metadata(&dir).is_err() {
            return Err(not_found());
        }
        if package::read_package(&dir, None).is_ok() {
            return Err(SkillError::Conflict("Skill package is valid and cannot be deleted as invalid".into()));
        }
        let id = &sha256_hex(format!("{}:{}", source.as_str(), entry.dir).as_bytes())[..16];
        let version = package::version_id();
        let parent = self.paths.snapshots.join("invalid").join(source.as_str()).join(id);
        fsx::create_private_dirs(&parent)?;
        let dest = parent.join(&version);
        move_dir(&dir, &dest)?;
        if let Err(e) = self.refresh_locked() {
            let _ = move_dir(&dest, &dir);
            let _ = self.refresh_locked();
            return Err(e);
        }
        Ok(InvalidDeleted {
            directory: directory.to_string(),
            snapshot: format!("invalid/{}/{id}/{version}", source.as_str()),
            source: source.as_str(),
        })
    }
}

/// Rename, or copy + remove across filesystems.
fn move_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(_) => {
            package::copy_tree(from, to)?;
            package::remove_tree(from)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::skills::package::tests::skill_md;
    use crate::skills::service::tests::{create, req, service, tree};

    #[test]
    fn versions_and_rollback_restore_bytes_exactly() {
        let (data, svc) = service("svc-rollback");
        let rec = create(&svc, "demo", Source::Agent, "");
        fs::create_dir(rec.path.join("assets")).unwrap();
        let bin: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 256) as u8).collect();
        fs::write(rec.path.join("assets/img.png"), &bin).unwrap();
        svc.refresh().unwrap();
        let original = tree(&rec.path);
        let (_, v1) = svc.replace("demo", req(skill_md("demo", "version: 2\n"))).unwrap();
        fs::write(rec.path.join("assets/img.png"), b"changed").unwrap();
        svc.set_enabled("demo", false).unwrap();
        assert_ne!(tree(&rec.path), original);

        let r = svc.rollback("demo", &v1).unwrap();
        assert_eq!(tree(&r.path), original, "rollback must restore every byte, _meta.json included");
        assert!(r.enabled);
        assert_eq!(r.manifest.version, 1);
        let versions = svc.versions("demo").unwrap();
        assert_eq!(versions.len(), 2, "rollback snapshots the current state first");
        assert!(versions[0] > versions[1]);
        // Rolling back to the pre-rollback snapshot undoes the rollback.
        let r = svc.rollback("demo", &versions[0]).unwrap();
        assert!(!r.enabled);
        assert_eq!(fs::read(r.path.join("assets/img.png")).unwrap(), b"changed");

        let e = svc.rollback("demo", "123-abc").unwrap_err();
        assert_eq!((e.status(), e.message()), (404, "snapshot not found: 123-abc"));
        assert_eq!(svc.rollback("demo", "..").unwrap_err().status(), 422);
        assert_eq!(svc.rollback("demo", "../x").unwrap_err().status(), 422);
        assert_eq!(svc.rollback("nope", &v1).unwrap_err().status(), 404);
        assert_eq!(svc.versions("weather").unwrap(), Vec::<String>::new());
        assert_eq!(svc.versions("nope").unwrap_err().message(), "Skill not found");

        // An invalid snapshot is refused before swapping.
        let snapdir = svc.paths().snapshots.join("agent/demo").join(&v1);
        fs::write(snapdir.join("SKILL.md"), "broken").unwrap();
        let before = tree(&data);
        assert_eq!(svc.rollback("demo", &v1).unwrap_err().status(), 422);
        assert_eq!(tree(&data), before);
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn invalid_delete_moves_to_snapshots() {
        let (data, svc) = service("svc-invalid");
        let broken = svc.paths().agent.join("broken");
        fs::create_dir(&broken).unwrap();
        fs::write(broken.join("SKILL.md"), "no frontmatter").unwrap();
        fs::create_dir(svc.paths().user.join("also-bad")).unwrap();
        svc.refresh().unwrap();
        let cat = svc.catalog();
        assert_eq!(cat.invalid["agent:broken"].message, "SKILL.md must start with YAML frontmatter");

        assert_eq!(svc.delete_invalid("nope", "broken").unwrap_err().message(), "invalid Skill source");
        assert_eq!(svc.delete_invalid("builtin", "broken").unwrap_err().status(), 403);
        for sel in ["", ".", "..", "../broken", "nested/broken", "nested\\broken"] {
            let e = svc.delete_invalid("agent", sel).unwrap_err();
            assert_eq!((e.status(), e.message()), (422, "invalid Skill directory selector"), "{sel}");
        }
        let e = svc.delete_invalid("agent", "missing").unwrap_err();
        assert_eq!((e.status(), e.message()), (404, "invalid Skill package not found"));

        // Refresh failure rolls the move back.
        svc.fail_refreshes.store(1, Ordering::SeqCst);
        assert!(svc.delete_invalid("agent", "broken").is_err());
        assert!(broken.join("SKILL.md").exists());

        let v = svc.delete_invalid("agent", "broken").unwrap();
        let id = &sha256_hex(b"agent:broken")[..16];
        let snap = v.snapshot.as_str();
        assert!(snap.starts_with(&format!("invalid/agent/{id}/")), "{snap}");
        assert_eq!((v.directory.as_str(), v.source), ("broken", "agent"));
        assert!(!broken.exists());
        assert_eq!(fs::read_to_string(svc.paths().snapshots.join(snap).join("SKILL.md")).unwrap(), "no frontmatter");
        assert!(!svc.catalog().invalid.contains_key("agent:broken"));

        // A repaired package is no longer deletable as invalid.
        let fixed = svc.paths().user.join("also-bad");
        fs::write(fixed.join("SKILL.md"), skill_md("also-bad", "")).unwrap();
        let e = svc.delete_invalid("user", "also-bad").unwrap_err();
        assert_eq!((e.status(), e.message()), (409, "Skill package is valid and cannot be deleted as invalid"));
        fs::remove_dir_all(data).unwrap();
    }
}
