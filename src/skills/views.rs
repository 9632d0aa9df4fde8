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
pub struct DepsView {
    pub bins: Vec<String>,
    pub env: Vec<String>,
    pub mcp_servers: Vec<String>,
    pub tools: Vec<String>,
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
pub struct SkillView {
    pub always: bool,
    pub availability: &'static str,
    /// Detail only: the body's first 4000 chars (when the package still loads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_preview: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_truncated: Option<bool>,
    pub description: String,
    pub display_name: String,
    pub enabled: bool,
    pub hash: String,
    pub missing: Vec<String>,
    pub mutable: bool,
    pub name: String,
    /// Every answer but skill_search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<DepsView>,
    /// The "+path" answers: the absolute package directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requires: Option<DepsView>,
    /// skill_search only: BM25 rounded to 4 decimals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    pub shadowed_sources: Vec<&'static str>,
    /// Replace only: the snapshot taken before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    pub source: &'static str,
    pub tags: Vec<String>,
    pub triggers: Vec<String>,
    pub validation_errors: Vec<String>,
    pub version: u64,
    /// Detail only: snapshot versions, newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions: Option<Vec<String>>,
}

impl SkillView {
    /// A skill_search hit: the record without `requires`/`optional`, plus the score.
    pub fn hit(rec: &SkillRecord, score: f64) -> SkillView {
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
    pub fn record(rec: &SkillRecord, with_path: bool) -> SkillView {
        SkillView {
            optional: Some((&rec.manifest.optional).into()),
            path: with_path.then(|| rec.path.display().to_string()),
            requires: Some((&rec.manifest.requires).into()),
            score: None,
            ..SkillView::hit(rec, 0.0)
        }
    }

    /// `PUT /api/skills/{name}`: record+path and the snapshot taken before.
    pub fn replaced(rec: &SkillRecord, snapshot: String) -> SkillView {
        SkillView { snapshot: Some(snapshot), ..SkillView::record(rec, true) }
    }
}

/// `GET /api/skills`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkillList {
    /// Every invalid package of the last refresh, `<source>:<label>` -> `[message]`.
    pub invalid: BTreeMap<String, [String; 1]>,
    pub items: Vec<SkillView>,
    pub page: usize,
    pub page_size: usize,
    pub total: usize,
}

impl SkillList {
    /// The `invalid` object of a catalog.
    pub fn invalid_of(cat: &Catalog) -> BTreeMap<String, [String; 1]> {
        cat.invalid.iter().map(|(k, v)| (k.clone(), [v.message.clone()])).collect()
    }
}

/// `GET /api/skills/{name}/content`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillContent {
    pub content: String,
    pub display_name: String,
    pub hash: String,
    pub mutable: bool,
    pub name: String,
    pub source: &'static str,
}

/// `POST /api/skills/{name}/validate`: `name` and `hash` only when the package loads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Validation {
    pub errors: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub valid: bool,
}

/// `GET /api/skills/{name}/versions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillVersions {
    pub name: String,
    pub versions: Vec<String>,
}

/// `DELETE /api/skills/invalid/{source}/{directory}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidDeleted {
    pub directory: String,
    /// Relative to `<data>/skill-snapshots`.
    pub snapshot: String,
    pub source: &'static str,
}

/// What a proposal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProposalAction {
    Create,
    Update,
}

/// pending -> rejected | applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProposalStatus {
    Pending,
    Rejected,
    Applied,
}

/// Whether a proposal's candidate parsed as a package of its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateValidation {
    pub errors: Vec<String>,
    pub valid: bool,
}

/// A self-evolution proposal: the file `proposals/<id>.json` and the API object at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub action: ProposalAction,
    /// `null` until applied; then the snapshot id (update) or `""` (create).
    pub applied_version: Option<String>,
    /// The target's hash when the proposal was made (update), else `null`.
    pub base_hash: Option<String>,
    pub candidate_content: String,
    /// Epoch seconds.
    pub created_at: f64,
    pub evidence_ids: Vec<String>,
    pub fingerprint: String,
    pub id: String,
    pub name: String,
    pub reason: String,
    pub status: ProposalStatus,
    /// Epoch seconds.
    pub updated_at: f64,
    pub validation: CandidateValidation,
}

/// `GET /api/skill-evolution/proposals`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProposalList {
    pub enabled: bool,
    /// Newest `created_at` first.
    pub items: Vec<Proposal>,
}

/// The `skill_search` tool result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchReply {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    pub skills: Vec<SkillView>,
}

/// A failed `skill_load`, printed with Python spacing in this field order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum LoadError {
    SkillNotFound { name: String, suggestions: Vec<String> },
    SkillDisabled { name: String },
    MissingDependency { name: String, missing: Vec<String> },
    McpPrepareFailed { name: String, server: String },
    InvalidSkill { detail: String },
}

/// The optional dependencies line of a loaded skill (compact, tools first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OptionalDeps<'a> {
    pub tools: &'a [String],
    pub mcp_servers: &'a [String],
}

/// The `agent_skill_manage` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ManageReply {
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
    pub fn created(rec: &SkillRecord) -> ManageReply {
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

    pub fn failed(code: &'static str, detail: String) -> ManageReply {
        ManageReply::Failed { action: "create", code, detail, success: false }
    }

    pub fn succeeded(&self) -> bool {
        matches!(self, ManageReply::Created { .. })
    }
}
