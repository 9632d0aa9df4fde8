//! The read side of the skill store (docs/skills.md §9 "Other API", docs/http-api.md §7): the list with
//! filters and search, detail, content (refreshing first when the file changed on disk),
//! validate, and the package re-read the tools and evolution share. Every answer is a typed
//! view ([`super::views`]). Runs on the HTTP thread and on turn workers; reads a catalog
//! snapshot and never takes the store lock (only `content` may refresh).

use std::sync::Arc;

use super::catalog::SkillRecord;
use super::frontmatter::{self, Parsed};
use super::package::{self, Package};
use super::service::{ListQuery, SkillService};
use super::views::{SkillContent, SkillList, SkillView, Validation};
use super::{is_valid_name, validate_name, Result, SkillError};

/// Chars of the body a detail answer previews.
const BODY_PREVIEW_CHARS: usize = 4000;

fn not_found() -> SkillError {
    SkillError::not_found("Skill not found")
}

impl SkillService {
    /// Re-reads the effective package of a record (skill_load, detail, validate).
    pub(crate) fn read(&self, rec: &SkillRecord) -> Result<Package> {
        package::read_package(&rec.path, Some(rec.name()))
    }

    /// `GET /api/skills`: without a query the name-sorted records, with one the search hits
    /// (disabled included) by score; then filtered and paged.
    pub fn list(&self, q: &ListQuery) -> SkillList {
        let cat = self.catalog();
        let query = q.query.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let recs: Vec<Arc<SkillRecord>> = match query {
            Some(text) => cat.search(text, 10_000, true).into_iter().map(|(r, _)| r).collect(),
            None => cat.records.values().cloned().collect(),
        };
        let filtered: Vec<Arc<SkillRecord>> = recs
            .into_iter()
            .filter(|r| q.source.as_deref().is_none_or(|s| r.source.as_str() == s))
            .filter(|r| q.enabled.is_none_or(|e| r.enabled == e))
            .filter(|r| q.availability.as_deref().is_none_or(|a| r.availability() == a))
            .collect();
        let start = q.page.saturating_sub(1).saturating_mul(q.page_size);
        SkillList {
            invalid: SkillList::invalid_of(&cat),
            items: filtered.iter().skip(start).take(q.page_size).map(|r| SkillView::record(r, false)).collect(),
            page: q.page,
            page_size: q.page_size,
            total: filtered.len(),
        }
    }

    /// `GET /api/skills/{name}`: record+path, the body preview (or the reason the package no
    /// longer loads) and the versions.
    pub(crate) fn detail(&self, name: &str) -> Result<SkillView> {
        let rec = self.get(name).ok_or_else(not_found)?;
        let mut v = SkillView::record(&rec, true);
        match self.read(&rec) {
            Ok(pkg) => {
                let body = &pkg.parsed.manifest.body;
                let preview = crate::util::text::take_chars(body, BODY_PREVIEW_CHARS);
                v.body_truncated = Some(preview.len() < body.len());
                v.body_preview = Some(preview.to_string());
            }
            Err(e) => v.validation_errors = vec![package::sanitize(e.message(), &[&rec.path])],
        }
        v.versions = Some(self.versions_of(&rec));
        Ok(v)
    }

    /// `GET /api/skills/{name}/content`; refreshes first when the file changed on disk.
    pub(crate) fn content(&self, name: &str) -> Result<SkillContent> {
        if !is_valid_name(name) {
            return Err(SkillError::invalid(super::INVALID_NAME));
        }
        let mut rec = self.get(name).ok_or_else(not_found)?;
        let mut pkg = self.read(&rec);
        if pkg.as_ref().map(|p| p.parsed.hash != rec.hash).unwrap_or(true) {
            self.refresh()?;
            rec = self.get(name).ok_or_else(not_found)?;
            pkg = self.read(&rec);
        }
        let pkg = pkg.map_err(|e| e.with_message(package::sanitize(e.message(), &[&rec.path])))?;
        Ok(SkillContent {
            content: pkg.parsed.text,
            display_name: pkg.parsed.manifest.label().to_string(),
            hash: pkg.parsed.hash,
            mutable: rec.source.mutable(),
            name: rec.name().to_string(),
            source: rec.source.as_str(),
        })
    }

    /// `POST /api/skills/{name}/validate`: re-reads the package (an invalid one is still 200).
    pub(crate) fn validate(&self, name: &str) -> Result<Validation> {
        let rec = self.get(name).ok_or_else(not_found)?;
        Ok(match self.read(&rec) {
            Ok(pkg) => Validation {
                errors: Vec::new(),
                hash: Some(pkg.parsed.hash),
                name: Some(rec.name().to_string()),
                valid: true,
            },
            Err(e) => Validation {
                errors: vec![package::sanitize(e.message(), &[&rec.path])],
                hash: None,
                name: None,
                valid: false,
            },
        })
    }

    /// Parses candidate content as a package named `name` would (evolution validation).
    pub(crate) fn check_content(name: &str, content: &str) -> Result<Parsed> {
        let name = validate_name(name)?;
        frontmatter::parse(content, Some(&name))
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::skills::package::tests::skill_md;
    use crate::skills::service::tests::{create, service};
    use crate::skills::Source;

    #[test]
    fn list_search_detail_content_and_validate() {
        let (data, svc) = service("svc-list");
        create(&svc, "renzhi-niuqu", Source::User, "display_name: 认知扭曲\ntags: [psychology]\n");
        let names = |l: &SkillList| l.items.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
        let l = svc.list(&ListQuery::default());
        assert_eq!(l.total, 5);
        assert_eq!(names(&l), ["chart-visualization", "github", "renzhi-niuqu", "skill-creator", "weather"]);
        assert!(l.items.iter().all(|i| i.path.is_none() && i.requires.is_some()));
        let l = svc.list(&ListQuery { page: 2, page_size: 2, ..Default::default() });
        assert_eq!(names(&l), ["renzhi-niuqu", "skill-creator"]);
        let l = svc.list(&ListQuery { page: 9, ..Default::default() });
        assert!(l.items.is_empty());
        let l = svc.list(&ListQuery { source: Some("builtin".into()), ..Default::default() });
        assert_eq!(l.total, 4);
        let l = svc.list(&ListQuery { query: Some("认知扭曲".into()), ..Default::default() });
        assert_eq!(l.items[0].name, "renzhi-niuqu");
        let l = svc.list(&ListQuery { query: Some("!!!".into()), ..Default::default() });
        assert_eq!(l.total, 0);
        assert!(svc.get("认知扭曲").is_none(), "lookup by display name fails");

        let d = svc.detail("renzhi-niuqu").unwrap();
        assert_eq!(d.body_preview.as_deref(), Some("# renzhi-niuqu\n\nSteps."));
        assert_eq!(d.body_truncated, Some(false));
        assert_eq!(d.versions, Some(vec![]));
        assert!(d.path.is_some());
        assert_eq!(svc.detail("nope").unwrap_err().message(), "Skill not found");

        let c = svc.content("renzhi-niuqu").unwrap();
        assert_eq!((c.display_name.as_str(), c.mutable, c.source), ("认知扭曲", true, "user"));
        assert_eq!(svc.content("Bad Name").unwrap_err().status(), 422);
        assert_eq!(svc.content("nope").unwrap_err().status(), 404);
        // An edit made on disk behind our back is picked up (content refreshes).
        let p = svc.get("renzhi-niuqu").unwrap().path.clone();
        fs::write(p.join("SKILL.md"), skill_md("renzhi-niuqu", "version: 7\n").replace('\n', "\r\n")).unwrap();
        let c = svc.content("renzhi-niuqu").unwrap();
        assert!(!c.content.contains('\r'));
        assert_eq!(svc.get("renzhi-niuqu").unwrap().manifest.version, 7);
        assert_eq!(c.hash, svc.get("renzhi-niuqu").unwrap().hash);

        let v = svc.validate("renzhi-niuqu").unwrap();
        assert_eq!((v.valid, v.name.as_deref()), (true, Some("renzhi-niuqu")));
        fs::write(p.join("extra.txt"), "x").unwrap();
        let v = svc.validate("renzhi-niuqu").unwrap();
        let errors = vec!["unsupported package entry: extra.txt".to_string()];
        assert_eq!(v, Validation { errors: errors.clone(), hash: None, name: None, valid: false });
        let d = svc.detail("renzhi-niuqu").unwrap();
        assert_eq!((d.validation_errors, d.body_preview), (errors, None));
        assert_eq!(svc.validate("nope").unwrap_err().status(), 404);
        fs::remove_dir_all(data).unwrap();
    }
}
