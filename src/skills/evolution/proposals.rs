//! The proposal store (docs/skills.md §12, docs/storage.md §8, docs/http-api.md §8): turning the generator's
//! reply into a pending proposal file, the rule that a pending or applied proposal blocks its
//! fingerprint, and list/get/reject/approve. One lock serialises every proposal file. The
//! `skill-evolution` thread stores; the HTTP thread lists and decides. Approval goes through the
//! one skill store, so it is checked like any other create or replace.

use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::evidence::Evidence;
use super::{lock, read_all, write_json};
use crate::skills::service::{CreateRequest, ReplaceRequest, SkillService};
use crate::skills::views::{CandidateValidation, Proposal, ProposalAction, ProposalStatus};
use crate::skills::{Result, SkillError, Source};
use crate::util::{rand, text, time};

/// The `proposals/` directory.
pub(crate) struct Proposals {
    dir: PathBuf,
    skills: Arc<SkillService>,
    /// Serialises proposal files (storing, approve, reject).
    lock: Mutex<()>,
}

fn not_found() -> SkillError {
    SkillError::not_found("proposal not found")
}

impl Proposals {
    pub(crate) fn new(dir: PathBuf, skills: Arc<SkillService>) -> Proposals {
        Proposals { dir, skills, lock: Mutex::new(()) }
    }

    /// Holds the proposal lock (the recurrence check takes it too).
    pub(crate) fn guard(&self) -> MutexGuard<'_, ()> {
        lock(&self.lock)
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Every readable proposal, newest `created_at` first (id breaks ties).
    pub(crate) fn list(&self) -> Vec<Proposal> {
        let mut items: Vec<Proposal> = read_all(&self.dir);
        items.sort_by(|a, b| {
            b.created_at.partial_cmp(&a.created_at).unwrap_or(std::cmp::Ordering::Equal).then_with(|| b.id.cmp(&a.id))
        });
        items
    }

    /// A pending or applied proposal with this fingerprint stops new generation (rejected ones
    /// do not). Call with the lock held.
    pub(crate) fn blocked(&self, fp: &str) -> bool {
        read_all::<Proposal>(&self.dir)
            .iter()
            .any(|p| p.fingerprint == fp && matches!(p.status, ProposalStatus::Pending | ProposalStatus::Applied))
    }

    /// Stores the generator's `reply` as a pending proposal unless the fingerprint got blocked
    /// meanwhile. A reply that is not one JSON object asking to create a skill, or to update an
    /// agent skill, is dropped (`Ok(None)`); an invalid candidate is stored with its errors.
    pub(crate) fn store(&self, reply: &str, evidence: &[Evidence], fp: &str) -> Result<Option<Proposal>> {
        let _g = self.guard();
        if self.blocked(fp) {
            return Ok(None);
        }
        let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(reply.trim()) else {
            return Ok(None);
        };
        let action = match obj.get("action").and_then(Value::as_str) {
            Some("create") => ProposalAction::Create,
            Some("update") => ProposalAction::Update,
            _ => return Ok(None),
        };
        let (Some(name), Some(content)) =
            (obj.get("name").and_then(Value::as_str), obj.get("candidate_content").and_then(Value::as_str))
        else {
            return Ok(None);
        };
        let name = name.trim().to_string();
        let target = self.skills.get(&name);
        if action == ProposalAction::Update && target.as_ref().is_none_or(|r| r.source != Source::Agent) {
            return Ok(None);
        }
        let validation = match SkillService::check_content(&name, content) {
            Ok(_) => CandidateValidation { errors: Vec::new(), valid: true },
            Err(e) => CandidateValidation { errors: vec![e.message().to_string()], valid: false },
        };
        let reason = obj
            .get("reason")
            .and_then(Value::as_str)
            .map(|r| text::take_chars(r.trim(), 500).to_string())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "Reusable workflow evidence".into());
        let now = time::now_epoch();
        let proposal = Proposal {
            action,
            applied_version: None,
            base_hash: target.map(|r| r.hash.clone()),
            candidate_content: content.to_string(),
            created_at: now,
            evidence_ids: evidence.iter().map(|e| e.id.clone()).collect(),
            fingerprint: fp.to_string(),
            id: rand::hex(16),
            name,
            reason,
            status: ProposalStatus::Pending,
            updated_at: now,
            validation,
        };
        write_json(&self.path(&proposal.id), &proposal)?;
        Ok(Some(proposal))
    }

    /// `GET …/{id}`.
    pub(crate) fn get(&self, id: &str) -> Result<Proposal> {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(not_found());
        }
        let bytes = fs::read(self.path(id)).map_err(|_| not_found())?;
        serde_json::from_slice(&bytes).map_err(|_| not_found())
    }

    fn pending(&self, id: &str) -> Result<Proposal> {
        let p = self.get(id)?;
        if p.status != ProposalStatus::Pending {
            return Err(SkillError::Conflict("proposal is not pending".into()));
        }
        Ok(p)
    }

    /// `POST …/{id}/reject`.
    pub(crate) fn reject(&self, id: &str) -> Result<Proposal> {
        let _g = self.guard();
        let mut p = self.pending(id)?;
        p.status = ProposalStatus::Rejected;
        p.updated_at = time::now_epoch();
        write_json(&self.path(id), &p)?;
        Ok(p)
    }

    /// `POST …/{id}/approve`: re-validates, then creates an agent skill or replaces one
    /// (agent-owned only, at the base hash, snapshot first). Never applied automatically.
    pub(crate) fn approve(&self, id: &str) -> Result<Proposal> {
        let _g = self.guard();
        let mut p = self.pending(id)?;
        if !p.validation.valid {
            return Err(SkillError::invalid("proposal candidate is invalid"));
        }
        let applied = match p.action {
            ProposalAction::Create => {
                self.skills.create(CreateRequest {
                    name: p.name.clone(),
                    content: p.candidate_content.clone(),
                    source: Source::Agent,
                    support_files: Default::default(),
                    enabled: true,
                    reason: Some(p.reason.clone()),
                })?;
                String::new()
            }
            ProposalAction::Update => {
                let (_, snapshot) = self.skills.replace(
                    &p.name,
                    ReplaceRequest {
                        content: p.candidate_content.clone(),
                        support_files: None,
                        // An update proposal without a base hash cannot prove freshness.
                        expected_hash: Some(p.base_hash.clone().unwrap_or_else(|| "missing-base-hash".into())),
                        agent_only: true,
                    },
                )?;
                snapshot
            }
        };
        p.status = ProposalStatus::Applied;
        p.applied_version = Some(applied);
        p.updated_at = time::now_epoch();
        write_json(&self.path(id), &p)?;
        Ok(p)
    }
}
