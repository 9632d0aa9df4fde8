//! The typed wire of the Skills surface: every body `/api/skills…` and `/api/skill-evolution…`
//! return (docs/http-api.md §7–§8), the stored proposal object (docs/storage.md §8), and the JSON texts
//! the skill tools give the model (docs/skills.md §5–§8). Services build these values; the HTTP
//! thread or the turn worker serialises them.
//!
//! Field order is the byte order on the wire. The original answered with key-sorted JSON maps
//! and so did every release of this server (serde_json without `preserve_order`), so the HTTP
//! bodies declare their fields alphabetically; the skill_load errors keep the original's
//! insertion order and Python spacing ([`crate::util::pyjson`]). `tests/suite/skills_wire.rs`
//! pins one full response of each shape.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::catalog::{Catalog, SkillRecord};
use super::frontmatter::Deps;

/// `requires` / `optional` of a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DepsView {
    pub(crate) bins: Vec<String>,
    pub(crate) env: Vec<String>,
    pub(crate) mcp_servers: Vec<String>,
    pub(crate) tools: Vec<String>,
}

impl From<&Deps> for DepsView {
    fn from(d: &Deps) -> Self {
        DepsView {
            bins: d.bins.clone(),
            env: d.env.clone(),
            mcp_servers: d.mcp_servers.clone(),
            tools: d.tools.clone(),
        }
    }
}

/// A skill record (`to_dict`) and the extras some answers add. The constructors say which
/// answer carries which extra; an absent extra is not written at all.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SkillView {
    pub(crate) always: bool,
    pub(crate) availability: &'static str,
    /// Detail only: the body's first 4000 chars (when the package still loads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) body_preview: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) body_truncated: Option<bool>,
    pub(crate) description: String,
    pub(crate) display_name: String,
    pub(crate) enabled: bool,
    pub(crate) hash: String,
    pub(crate) missing: Vec<String>,
    pub(crate) mutable: bool,
    pub(crate) name: String,
    /// Every answer but skill_search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) optional: Option<DepsView>,
    /// The "+path" answers: the absolute package directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) requires: Option<DepsView>,
    /// skill_search only: BM25 rounded to 4 decimals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) score: Option<f64>,
    pub(crate) shadowed_sources: Vec<&'static str>,
    /// Replace only: the snapshot taken before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) snapshot: Option<String>,
    pub(crate) source: &'static str,
    pub(crate) tags: Vec<String>,
    pub(crate) triggers: Vec<String>,
    pub(crate) validation_errors: Vec<String>,
    pub(crate) version: u64,
    /// Detail only: snapshot versions, newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) versions: Option<Vec<String>>,
}

impl SkillView {
    /// A skill_search hit: the record without `requires`/`optional`, plus the score.
    pub(crate) fn hit(rec: &SkillRecord, score: f64) -> SkillView {
        let m = &rec.manifest;
        SkillView {
            always: m.always,
            availability: rec.availability(),
            body_preview: None,
            body_truncated: None,
            description: m.description.clone(),
            display_name: m.label().to_string(),
            enabled: rec.enabled,
            hash: rec.hash.clone(),
            missing: rec.missing.clone(),
            mutable: rec.source.mutable(),
            name: m.name.clone(),
            optional: None,
            path: None,
            requires: None,
            score: Some((score * 10_000.0).round() / 10_000.0),
            shadowed_sources: rec.shadowed_sources.iter().map(|s| s.as_str()).collect(),
            snapshot: None,
            source: rec.source.as_str(),
            tags: m.tags.clone(),
            triggers: m.triggers.clone(),
            validation_errors: Vec::new(),
            version: m.version,
            versions: None,
        }
    }

    /// The record dict; `path` only with `with_path` (list items and imports have none).
    pub(crate) fn record(rec: &SkillRecord, with_path: bool) -> SkillView {
        SkillView {
            optional: Some((&rec.manifest.optional).into()),
            path: with_path.then(|| rec.path.display().to_string()),
            requires: Some((&rec.manifest.requires).into()),
            score: None,
            ..SkillView::hit(rec, 0.0)
        }
    }

    /// `PUT /api/skills/{name}`: record+path and the snapshot taken before.
    pub(crate) fn replaced(rec: &SkillRecord, snapshot: String) -> SkillView {
        SkillView { snapshot: Some(snapshot), ..SkillView::record(rec, true) }
    }
}

/// `GET /api/skills`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkillList {
    /// Every invalid package of the last refresh, `<source>:<label>` -> `[message]`.
    pub(crate) invalid: BTreeMap<String, [String; 1]>,
    pub(crate) items: Vec<SkillView>,
    pub(crate) page: usize,
    pub(crate) page_size: usize,
    pub(crate) total: usize,
}

impl SkillList {
    /// The `invalid` object of a catalog.
    pub(crate) fn invalid_of(cat: &Catalog) -> BTreeMap<String, [String; 1]> {
        cat.invalid.iter().map(|(k, v)| (k.clone(), [v.message.clone()])).collect()
    }
}

/// `GET /api/skills/{name}/content`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SkillContent {
    pub(crate) content: String,
    pub(crate) display_name: String,
    pub(crate) hash: String,
    pub(crate) mutable: bool,
    pub(crate) name: String,
    pub(crate) source: &'static str,
}

/// `POST /api/skills/{name}/validate`: `name` and `hash` only when the package loads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Validation {
    pub(crate) errors: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    pub(crate) valid: bool,
}

/// `GET /api/skills/{name}/versions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SkillVersions {
    pub(crate) name: String,
    pub(crate) versions: Vec<String>,
}

/// `DELETE /api/skills/invalid/{source}/{directory}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct InvalidDeleted {
    pub(crate) directory: String,
    /// Relative to `<data>/skill-snapshots`.
    pub(crate) snapshot: String,
    pub(crate) source: &'static str,
}

/// What a proposal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ProposalAction {
    Create,
    Update,
}

/// pending -> rejected | applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ProposalStatus {
    Pending,
    Rejected,
    Applied,
}

/// Whether a proposal's candidate parsed as a package of its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CandidateValidation {
    pub(crate) errors: Vec<String>,
    pub(crate) valid: bool,
}

/// A self-evolution proposal: the file `proposals/<id>.json` and the API object at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Proposal {
    pub(crate) action: ProposalAction,
    /// `null` until applied; then the snapshot id (update) or `""` (create).
    pub(crate) applied_version: Option<String>,
    /// The target's hash when the proposal was made (update), else `null`.
    pub(crate) base_hash: Option<String>,
    pub(crate) candidate_content: String,
    /// Epoch seconds.
    pub(crate) created_at: f64,
    pub(crate) evidence_ids: Vec<String>,
    pub(crate) fingerprint: String,
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) reason: String,
    pub(crate) status: ProposalStatus,
    /// Epoch seconds.
    pub(crate) updated_at: f64,
    pub(crate) validation: CandidateValidation,
}

/// `GET /api/skill-evolution/proposals`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ProposalList {
    pub(crate) enabled: bool,
    /// Newest `created_at` first.
    pub(crate) items: Vec<Proposal>,
}

/// The `skill_search` tool result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchReply {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) query: Option<String>,
    pub(crate) skills: Vec<SkillView>,
}

/// A failed `skill_load`, printed with Python spacing in this field order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub(crate) enum LoadError {
    SkillNotFound { name: String, suggestions: Vec<String> },
    SkillDisabled { name: String },
    MissingDependency { name: String, missing: Vec<String> },
    McpPrepareFailed { name: String, server: String },
    InvalidSkill { detail: String },
}

/// The optional dependencies line of a loaded skill (compact, tools first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct OptionalDeps<'a> {
    pub(crate) tools: &'a [String],
    pub(crate) mcp_servers: &'a [String],
}

/// The `agent_skill_manage` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum ManageReply {
    Created {
        action: &'static str,
        display_name: String,
        enabled: bool,
        hash: String,
        name: String,
        source: &'static str,
        success: bool,
    },
    Failed {
        action: &'static str,
        code: &'static str,
        detail: String,
        success: bool,
    },
}

impl ManageReply {
    pub(crate) fn created(rec: &SkillRecord) -> ManageReply {
        ManageReply::Created {
            action: "create",
            display_name: rec.manifest.label().to_string(),
            enabled: true,
            hash: rec.hash.clone(),
            name: rec.name().to_string(),
            source: "agent",
            success: true,
        }
    }

    pub(crate) fn failed(code: &'static str, detail: String) -> ManageReply {
        ManageReply::Failed { action: "create", code, detail, success: false }
    }

    pub(crate) fn succeeded(&self) -> bool {
        matches!(self, ManageReply::Created { .. })
    }
}
