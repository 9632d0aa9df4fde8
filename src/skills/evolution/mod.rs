//! Skill self-evolution (skills.md §12, storage.md §8), off by default: the env switches, the
//! gate on successful turns, redacted evidence files, the workflow fingerprint, recurrence,
//! the restricted proposal generator (one LLM call through a caller-supplied closure, no tools)
//! and the proposal store with approve/reject. Turn workers call [`Evolution::schedule_turn`],
//! which processes on a short-lived `skill-evolution` thread under a counting semaphore; the
//! HTTP thread calls the proposal methods.

use std::collections::BTreeSet;
use std::fs;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::package;
use super::service::{CreateRequest, ReplaceRequest, SkillService};
use super::{sha256_hex, Result, SkillError, Source};
use crate::util::{fsx, rand, text, time};

/// The proposal generator: OpenAI-style messages in, the model's reply text out.
pub type Generator = dyn Fn(&[Value]) -> std::result::Result<String, String> + Send + Sync;

/// How long a queued turn waits for a free evolution slot before it is dropped.
const SLOT_WAIT: Duration = Duration::from_secs(300);
/// Turns that may wait for a slot at once.
const MAX_WAITING: usize = 16;

/// The env switches, validated once at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvolutionConfig {
    pub enabled: bool,
    pub min_tool_calls: usize,
    pub recurrence: usize,
    pub max_context_chars: usize,
    pub max_concurrent: usize,
    pub max_evidence: usize,
}

impl Default for EvolutionConfig {
    fn default() -> Self {
        EvolutionConfig {
            enabled: false,
            min_tool_calls: 2,
            recurrence: 2,
            max_context_chars: 12_000,
            max_concurrent: 1,
            max_evidence: 500,
        }
    }
}

impl EvolutionConfig {
    /// Reads the `SKILL_EVOLUTION_*` variables; a non-integer value is a startup error.
    pub fn from_config(cfg: &crate::config::Config) -> std::result::Result<Self, String> {
        Self::from_lookup(|k| cfg.var(k).map(str::to_string))
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> std::result::Result<Self, String> {
        let d = EvolutionConfig::default();
        let int = |key: &str, default: usize, min: usize| -> std::result::Result<usize, String> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse::<i64>()
                    .map(|n| (n.max(min as i64)) as usize)
                    .map_err(|_| format!("{key} must be an integer")),
            }
        };
        Ok(EvolutionConfig {
            enabled: get("SKILL_EVOLUTION_ENABLED")
                .map(|v| matches!(v.trim().to_lowercase().as_str(), "1" | "true" | "yes"))
                .unwrap_or(false),
            min_tool_calls: int("SKILL_EVOLUTION_MIN_TOOL_CALLS", d.min_tool_calls, 1)?,
            recurrence: int("SKILL_EVOLUTION_RECURRENCE", d.recurrence, 2)?,
            max_context_chars: int("SKILL_EVOLUTION_MAX_CONTEXT_CHARS", d.max_context_chars, 1000)?,
            max_concurrent: int("SKILL_EVOLUTION_MAX_CONCURRENT", d.max_concurrent, 1)?,
            max_evidence: int("SKILL_EVOLUTION_MAX_EVIDENCE", d.max_evidence, 10)?,
        })
    }
}

/// What a finished, persisted turn hands to evolution.
#[derive(Debug, Clone, Default)]
pub struct TurnTrace {
    pub chat_id: String,
    pub user: String,
    pub assistant: String,
    /// Every tool call name in order (duplicates count; explicit @-loads excluded).
    pub tools: Vec<String>,
    /// Persisted tool-message texts.
    pub tool_receipts: Vec<String>,
    /// No failed tool call and the iteration limit not hit.
    pub success: bool,
}

impl TurnTrace {
    /// Builds the trace from the records a turn persisted: the first `user` record, the last
    /// record (the answer), every `tool` record (explicit-selection receipts are `assistant`
    /// records, so they never count). A tool failed when its stored text says so by the
    /// runner's rule (agent-and-memory.md §13).
    pub fn from_records(chat_id: &str, records: &[crate::store::chats::Record], hit_limit: bool) -> TurnTrace {
        let user = records.iter().find(|r| r.role == "user").map(|r| r.content.clone()).unwrap_or_default();
        let assistant = records.last().filter(|r| r.role == "assistant").map(|r| r.content.clone()).unwrap_or_default();
        let tool_records: Vec<_> = records.iter().filter(|r| r.role == "tool").collect();
        let failed = tool_records.iter().any(|r| tool_text_failed(&r.content));
        TurnTrace {
            chat_id: chat_id.to_string(),
            user,
            assistant,
            tools: tool_records.iter().map(|r| r.name.clone().unwrap_or_default()).collect(),
            tool_receipts: tool_records.iter().map(|r| r.content.clone()).collect(),
            success: !hit_limit && !failed,
        }
    }
}

/// The runner's error rule: text starting with `Error`, or a JSON object with a truthy
/// `error` or `success: false`.
pub fn tool_text_failed(text: &str) -> bool {
    let t = text.trim_start();
    if t.starts_with("Error") {
        return true;
    }
    if !t.starts_with('{') {
        return false;
    }
    match serde_json::from_str::<Value>(t) {
        Ok(Value::Object(o)) => {
            let truthy = |v: &Value| match v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Object(m) => !m.is_empty(),
            };
            o.get("error").is_some_and(truthy) || o.get("success") == Some(&Value::Bool(false))
        }
        _ => false,
    }
}

/// The evolution service.
pub struct Evolution {
    pub cfg: EvolutionConfig,
    evidence_dir: PathBuf,
    proposals_dir: PathBuf,
    skills: Arc<SkillService>,
    slots: (Mutex<usize>, Condvar),
    waiting: AtomicUsize,
    /// Serialises proposal files (storing, approve, reject).
    lock: Mutex<()>,
    /// Fingerprints whose proposal is being generated right now.
    in_flight: Mutex<BTreeSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lowercase, standalone digit runs -> `#`, whitespace collapsed, first 500 chars, then
/// `|` + sorted unique tool names joined by `|`; SHA-256, first 24 hex.
pub fn fingerprint(user: &str, tools: &[String]) -> String {
    let lower: Vec<char> = user.to_lowercase().chars().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(lower.len());
    let mut i = 0;
    while i < lower.len() {
        let c = lower[i];
        if c.is_ascii_digit() {
            let start = i;
            while i < lower.len() && lower[i].is_ascii_digit() {
                i += 1;
            }
            let before_ok = start == 0 || !word(lower[start - 1]);
            let after_ok = i == lower.len() || !word(lower[i]);
            if before_ok && after_ok {
                out.push('#');
            } else {
                out.extend(&lower[start..i]);
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    let norm = text::collapse_ws(&out);
    let norm = text::take_chars(&norm, 500);
    let tools: BTreeSet<&str> = tools.iter().map(String::as_str).collect();
    let joined: Vec<&str> = tools.into_iter().collect();
    sha256_hex(format!("{norm}|{}", joined.join("|")).as_bytes())[..24].to_string()
}

const SECRET_LABELS: [&str; 6] = ["api_key", "api-key", "apikey", "token", "password", "secret"];

/// Evidence redaction: `label: value` / `label=value` -> `label=[REDACTED]`, skill-load receipts
/// -> `[Skill loaded receipt]`, plus the shared redactor (bearer tokens, `sk-` keys); then cut.
pub fn sanitize_evidence(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    'outer: while i < s.len() {
        if s[i..].starts_with("[Skill loaded:") {
            if let Some(end) = s[i..].find(']') {
                out.push_str("[Skill loaded receipt]");
                i += end + 1;
                continue;
            }
        }
        for label in SECRET_LABELS {
            if b.len() >= i + label.len() && b[i..i + label.len()].eq_ignore_ascii_case(label.as_bytes()) {
                let mut j = i + label.len();
                while j < b.len() && b[j] == b' ' {
                    j += 1;
                }
                if j < b.len() && (b[j] == b':' || b[j] == b'=') {
                    j += 1;
                    while j < b.len() && matches!(b[j], b' ' | b'"' | b'\'') {
                        j += 1;
                    }
                    let end = j + s[j..]
                        .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '&' | '}'))
                        .unwrap_or(s.len() - j);
                    if end > j {
                        out.push_str(&s[i..i + label.len()]);
                        out.push_str("=[REDACTED]");
                        i = end;
                        continue 'outer;
                    }
                }
            }
        }
        let ch = s[i..].chars().next().expect("i is on a char boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    let out = crate::util::redact::redact(&out);
    text::take_chars(&out, max).to_string()
}

impl Evolution {
    pub fn new(cfg: EvolutionConfig, skills: Arc<SkillService>) -> Arc<Evolution> {
        let base = skills.paths().evolution.clone();
        Arc::new(Evolution {
            cfg,
            evidence_dir: base.join("evidence"),
            proposals_dir: base.join("proposals"),
            skills,
            slots: (Mutex::new(0), Condvar::new()),
            waiting: AtomicUsize::new(0),
            lock: Mutex::new(()),
            in_flight: Mutex::new(BTreeSet::new()),
        })
    }

    /// Whether a finished turn qualifies for evidence.
    pub fn gate(&self, t: &TurnTrace) -> bool {
        self.cfg.enabled && t.success && t.tools.len() >= self.cfg.min_tool_calls
    }

    /// Called after every persisted turn: when the gate passes, processes the turn on a
    /// background thread (at most `max_concurrent` at once). Returns whether it was queued.
    pub fn schedule_turn(self: &Arc<Self>, trace: TurnTrace, generator: Arc<Generator>) -> bool {
        if !self.gate(&trace) {
            return false;
        }
        // Bounded backlog: beyond it, evidence of a burst of turns is dropped, not queued.
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            log::warn!("event=skill_evolution.dropped reason=\"backlog full\"");
            return false;
        }
        let me = Arc::clone(self);
        let spawned =
            std::thread::Builder::new().name("skill-evolution".into()).stack_size(256 * 1024).spawn(move || {
                let got = me.acquire_slot();
                me.waiting.fetch_sub(1, Ordering::SeqCst);
                if !got {
                    log::warn!("event=skill_evolution.dropped reason=\"no free slot\"");
                    return;
                }
                let run = std::panic::catch_unwind(AssertUnwindSafe(|| me.process_turn(&trace, generator.as_ref())));
                match run {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        log::warn!("event=skill_evolution.failed error={:?}", package::sanitize(&e.to_string(), &[]))
                    }
                    Err(_) => log::error!("event=skill_evolution.panicked"),
                }
                me.release_slot();
            });
        if spawned.is_err() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    fn acquire_slot(&self) -> bool {
        let (m, cv) = &self.slots;
        let mut n = lock(m);
        let deadline = std::time::Instant::now() + SLOT_WAIT;
        while *n >= self.cfg.max_concurrent {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            n = cv.wait_timeout(n, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        *n += 1;
        true
    }

    fn release_slot(&self) {
        let (m, cv) = &self.slots;
        *lock(m) -= 1;
        cv.notify_one();
    }

    /// Records the evidence and, on recurrence, asks the generator for a proposal.
    /// Returns the new proposal, if one was stored.
    pub fn process_turn(&self, t: &TurnTrace, generator: &Generator) -> Result<Option<Value>> {
        if !self.gate(t) {
            return Ok(None);
        }
        let fp = fingerprint(&t.user, &t.tools);
        let id = package::version_id();
        let evidence = json!({
            "id": id,
            "fingerprint": fp,
            "chat_id_hash": &sha256_hex(t.chat_id.as_bytes())[..12],
            "user": sanitize_evidence(&t.user, 2000),
            "assistant": sanitize_evidence(&t.assistant, 2500),
            "tools": t.tools,
            "tool_receipts": t.tool_receipts.iter().map(|r| sanitize_evidence(r, 500)).collect::<Vec<_>>(),
            "created_at": time::now_epoch(),
        });
        write_json(&self.evidence_dir.join(format!("{id}.json")), &evidence)?;
        self.prune_evidence();

        let recent = {
            let _g = lock(&self.lock);
            let mut matches: Vec<Value> =
                read_dir_json(&self.evidence_dir).into_iter().filter(|e| e["fingerprint"] == json!(fp)).collect();
            if matches.len() < self.cfg.recurrence || self.blocked(&fp) || !lock(&self.in_flight).insert(fp.clone()) {
                return Ok(None);
            }
            matches.sort_by(|a, b| {
                let ka = (a["created_at"].as_f64().unwrap_or(0.0), a["id"].as_str().unwrap_or(""));
                let kb = (b["created_at"].as_f64().unwrap_or(0.0), b["id"].as_str().unwrap_or(""));
                ka.partial_cmp(&kb).unwrap_or(std::cmp::Ordering::Equal)
            });
            matches.split_off(matches.len() - self.cfg.recurrence)
        };
        // The LLM call runs without the proposal lock, so approve/reject never wait on it; the
        // in-flight set keeps a second worker from generating for the same fingerprint.
        let messages = self.prompt(&recent);
        let reply = generator(&messages);
        let stored = match reply {
            Ok(r) => {
                let _g = lock(&self.lock);
                if self.blocked(&fp) {
                    Ok(None)
                } else {
                    self.store_proposal(&r, &recent, &fp)
                }
            }
            Err(e) => {
                log::info!("event=skill_evolution.generator_failed error={:?}", package::sanitize(&e, &[]));
                Ok(None)
            }
        };
        lock(&self.in_flight).remove(&fp);
        stored
    }

    /// A pending or applied proposal with this fingerprint stops new generation
    /// (rejected ones do not).
    fn blocked(&self, fp: &str) -> bool {
        self.proposals()
            .iter()
            .any(|p| p["fingerprint"] == json!(fp) && matches!(p["status"].as_str(), Some("pending" | "applied")))
    }

    /// The restricted generator's two messages.
    fn prompt(&self, evidence: &[Value]) -> Vec<Value> {
        let cat = self.skills.catalog();
        let contract = cat
            .get("skill-creator")
            .and_then(|r| self.skills.read(r).ok())
            .map(|p| text::take_chars(&p.parsed.manifest.body, 5000).to_string())
            .unwrap_or_default();
        let existing: Vec<Value> = cat.records.values().take(80).map(|r| r.to_json(false)).collect();
        let rules = [
            "Reply with one JSON object only, no code fences, no prose.",
            "Shape: {\"action\": \"create\"|\"update\", \"name\": \"<slug>\", \"candidate_content\": \"<complete SKILL.md>\", \"reason\": \"<why>\"}.",
            "Use action update only for an existing Skill whose source is agent; otherwise create with a new name.",
            "candidate_content must be a complete SKILL.md with YAML frontmatter following the contract.",
            "Describe the reusable workflow only: no one-off identifiers, failures, secrets, personal data or project status.",
            "Propose at most one Skill. If the evidence shows no reusable workflow, reply {\"action\": \"none\"}.",
        ];
        let payload = json!({
            "contract": contract,
            "existing_skills": existing,
            "evidence": evidence.iter().map(|e| json!({
                "user": e["user"], "assistant": e["assistant"], "tools": e["tools"], "tool_receipts": e["tool_receipts"],
            })).collect::<Vec<_>>(),
            "rules": rules,
        });
        let mut body = payload.to_string();
        if text::char_len(&body) > self.cfg.max_context_chars {
            // Drop the bulky skill dicts to names and descriptions before cutting blindly.
            let mut slim = payload.clone();
            slim["existing_skills"] = json!(cat
                .records
                .values()
                .take(80)
                .map(|r| json!({"name": r.name(), "description": r.manifest.description, "source": r.source.as_str()}))
                .collect::<Vec<_>>());
            body = slim.to_string();
        }
        let body = text::take_chars(&body, self.cfg.max_context_chars).to_string();
        vec![
            json!({"role": "system", "content": "You are a restricted Skill proposal generator for CashCode. You cannot modify files, call tools or access the network. You only read the workflow evidence and reply with a single JSON proposal as instructed."}),
            json!({"role": "user", "content": body}),
        ]
    }

    fn store_proposal(&self, reply: &str, evidence: &[Value], fp: &str) -> Result<Option<Value>> {
        let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(reply.trim()) else {
            return Ok(None);
        };
        let action = obj.get("action").and_then(Value::as_str).unwrap_or("");
        if action != "create" && action != "update" {
            return Ok(None);
        }
        let (Some(name), Some(content)) =
            (obj.get("name").and_then(Value::as_str), obj.get("candidate_content").and_then(Value::as_str))
        else {
            return Ok(None);
        };
        let name = name.trim().to_string();
        let target = self.skills.get(&name);
        if action == "update" && target.as_ref().is_none_or(|r| r.source != Source::Agent) {
            return Ok(None);
        }
        let validation = match SkillService::check_content(&name, content) {
            Ok(_) => json!({"valid": true, "errors": []}),
            Err(e) => json!({"valid": false, "errors": [e.message()]}),
        };
        let reason = obj
            .get("reason")
            .and_then(Value::as_str)
            .map(|r| text::take_chars(r.trim(), 500).to_string())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "Reusable workflow evidence".into());
        let now = time::now_epoch();
        let id = rand::hex(16);
        let proposal = json!({
            "id": id,
            "action": action,
            "name": name,
            "candidate_content": content,
            "reason": reason,
            "evidence_ids": evidence.iter().map(|e| e["id"].clone()).collect::<Vec<_>>(),
            "base_hash": target.map(|r| r.hash.clone()),
            "status": "pending",
            "validation": validation,
            "created_at": now,
            "updated_at": now,
            "applied_version": Value::Null,
            "fingerprint": fp,
        });
        write_json(&self.proposal_path(&id), &proposal)?;
        Ok(Some(proposal))
    }

    /// Keeps the newest `max_evidence` files by mtime (name breaks ties).
    fn prune_evidence(&self) {
        let Ok(rd) = fs::read_dir(&self.evidence_dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, String, PathBuf)> = rd
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.ends_with(".json") && !n.starts_with('.')
            })
            .filter_map(|e| {
                let m = e.metadata().ok()?.modified().ok()?;
                Some((m, e.file_name().to_string_lossy().into_owned(), e.path()))
            })
            .collect();
        if files.len() <= self.cfg.max_evidence {
            return;
        }
        files.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        for (_, _, p) in files.into_iter().skip(self.cfg.max_evidence) {
            let _ = fs::remove_file(p);
        }
    }

    fn proposal_path(&self, id: &str) -> PathBuf {
        self.proposals_dir.join(format!("{id}.json"))
    }

    fn proposals(&self) -> Vec<Value> {
        read_dir_json(&self.proposals_dir)
    }

    // ----- API -------------------------------------------------------------------------

    /// `GET /api/skill-evolution/proposals`.
    pub fn list(&self) -> Value {
        let mut items = self.proposals();
        items.sort_by(|a, b| {
            b["created_at"]
                .as_f64()
                .unwrap_or(0.0)
                .partial_cmp(&a["created_at"].as_f64().unwrap_or(0.0))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| b["id"].as_str().cmp(&a["id"].as_str()))
        });
        json!({"enabled": self.cfg.enabled, "items": items})
    }

    /// `GET …/{id}`.
    pub fn get(&self, id: &str) -> Result<Value> {
        let not_found = || SkillError::invalid("proposal not found");
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(not_found());
        }
        let bytes = fs::read(self.proposal_path(id)).map_err(|_| not_found())?;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(not_found()),
        }
    }

    fn pending(&self, id: &str) -> Result<Map<String, Value>> {
        let Value::Object(p) = self.get(id)? else {
            return Err(SkillError::invalid("proposal not found"));
        };
        if p.get("status").and_then(Value::as_str) != Some("pending") {
            return Err(SkillError::Conflict("proposal is not pending".into()));
        }
        Ok(p)
    }

    /// `POST …/{id}/reject`.
    pub fn reject(&self, id: &str) -> Result<Value> {
        let _g = lock(&self.lock);
        let mut p = self.pending(id)?;
        p.insert("status".into(), json!("rejected"));
        p.insert("updated_at".into(), json!(time::now_epoch()));
        let v = Value::Object(p);
        write_json(&self.proposal_path(id), &v)?;
        Ok(v)
    }

    /// `POST …/{id}/approve`: re-validates, then creates an agent skill or replaces one
    /// (agent-owned only, at the base hash, snapshot first). Never applied automatically.
    pub fn approve(&self, id: &str) -> Result<Value> {
        let _g = lock(&self.lock);
        let mut p = self.pending(id)?;
        if p.get("validation").and_then(|v| v.get("valid")).and_then(Value::as_bool) != Some(true) {
            return Err(SkillError::invalid("proposal candidate is invalid"));
        }
        let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (action, name, content, reason) = (s("action"), s("name"), s("candidate_content"), s("reason"));
        let applied = match action.as_str() {
            "create" => {
                self.skills.create(CreateRequest {
                    name: name.clone(),
                    content,
                    source: Source::Agent,
                    support_files: Default::default(),
                    enabled: true,
                    reason: Some(reason),
                })?;
                String::new()
            }
            "update" => {
                let expected = p.get("base_hash").and_then(Value::as_str).map(str::to_string);
                let (_, snapshot) = self.skills.replace(
                    &name,
                    ReplaceRequest {
                        content,
                        support_files: None,
                        // An update proposal without a base hash cannot prove freshness.
                        expected_hash: Some(expected.unwrap_or_else(|| "missing-base-hash".into())),
                        agent_only: true,
                    },
                )?;
                snapshot
            }
            _ => return Err(SkillError::invalid("proposal candidate is invalid")),
        };
        p.insert("status".into(), json!("applied"));
        p.insert("applied_version".into(), json!(applied));
        p.insert("updated_at".into(), json!(time::now_epoch()));
        let v = Value::Object(p);
        write_json(&self.proposal_path(id), &v)?;
        Ok(v)
    }
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| SkillError::Internal(e.to_string()))?;
    fsx::write_atomic(path, text.as_bytes(), false)?;
    Ok(())
}

/// Every readable `*.json` object in `dir` (hidden and unreadable files skipped).
fn read_dir_json(dir: &Path) -> Vec<Value> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with('.') || !n.ends_with(".json") {
            continue;
        }
        if let Ok(Value::Object(o)) =
            fs::read(e.path()).map_err(|_| ()).and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|_| ()))
        {
            out.push(Value::Object(o));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::package::tests::skill_md;
    use crate::skills::service::tests::{create, service};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn cfg(pairs: &[(&str, &str)]) -> std::result::Result<EvolutionConfig, String> {
        let m: std::collections::BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        EvolutionConfig::from_lookup(|k| m.get(k).cloned())
    }

    fn trace(user: &str, tools: &[&str], success: bool) -> TurnTrace {
        TurnTrace {
            chat_id: "chat-1".into(),
            user: user.into(),
            assistant: "done; token=abc123".into(),
            tools: tools.iter().map(|s| s.to_string()).collect(),
            tool_receipts: vec!["[Skill loaded: weather@v1 sha256:aa] fetched".into()],
            success,
        }
    }

    fn evidence_count(evo: &Evolution) -> usize {
        read_dir_json(&evo.evidence_dir).len()
    }

    #[test]
    fn config_defaults_minimums_and_errors() {
        assert_eq!(cfg(&[]).unwrap(), EvolutionConfig::default());
        let c = cfg(&[
            ("SKILL_EVOLUTION_ENABLED", "Yes"),
            ("SKILL_EVOLUTION_MIN_TOOL_CALLS", "0"),
            ("SKILL_EVOLUTION_RECURRENCE", "1"),
            ("SKILL_EVOLUTION_MAX_CONTEXT_CHARS", "5"),
            ("SKILL_EVOLUTION_MAX_CONCURRENT", "3"),
            ("SKILL_EVOLUTION_MAX_EVIDENCE", "2"),
        ])
        .unwrap();
        assert_eq!(
            c,
            EvolutionConfig {
                enabled: true,
                min_tool_calls: 1,
                recurrence: 2,
                max_context_chars: 1000,
                max_concurrent: 3,
                max_evidence: 10
            }
        );
        for v in ["1", "true", "TRUE", "yes"] {
            assert!(cfg(&[("SKILL_EVOLUTION_ENABLED", v)]).unwrap().enabled, "{v}");
        }
        for v in ["0", "on", "no", ""] {
            assert!(!cfg(&[("SKILL_EVOLUTION_ENABLED", v)]).unwrap().enabled, "{v}");
        }
        assert_eq!(
            cfg(&[("SKILL_EVOLUTION_RECURRENCE", "two")]).unwrap_err(),
            "SKILL_EVOLUTION_RECURRENCE must be an integer"
        );
        assert!(cfg(&[("SKILL_EVOLUTION_MAX_EVIDENCE", "1.5")]).is_err());
    }

    #[test]
    fn fingerprint_normalises_numbers_whitespace_and_tool_order() {
        let a = fingerprint("Weather in  Paris for 3 days", &["web_fetch".into(), "write_file".into()]);
        let b = fingerprint(
            "weather in paris for 12 days\n",
            &["write_file".into(), "web_fetch".into(), "web_fetch".into()],
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 24);
        assert_ne!(a, fingerprint("weather in paris for 3 days", &["web_fetch".into()]));
        // Digits inside words are not standalone.
        assert_ne!(fingerprint("v2 api", &[]), fingerprint("v3 api", &[]));
        assert_eq!(fingerprint("item 2024-01-02", &[]), fingerprint("item 1999-12-31", &[]));
        let expected = &sha256_hex("weather in paris for # days|web_fetch|write_file".as_bytes())[..24];
        assert_eq!(a, expected);
    }

    #[test]
    fn evidence_is_redacted_and_bounded() {
        assert_eq!(
            sanitize_evidence("use API_KEY: sk-abc and password=hunter2, ok", 2000),
            "use API_KEY=[REDACTED] and password=[REDACTED], ok"
        );
        assert_eq!(sanitize_evidence("[Skill loaded: weather@v1 sha256:ab] then", 2000), "[Skill loaded receipt] then");
        assert_eq!(text::char_len(&sanitize_evidence(&"字".repeat(3000), 2000)), 2000);
        assert_eq!(sanitize_evidence("Authorization: Bearer xyz", 100), "Authorization: [REDACTED]");
    }

    #[test]
    fn two_matching_successful_turns_produce_one_proposal_and_approval_applies_it() {
        let (data, svc) = service("evo-flow");
        let c = cfg(&[("SKILL_EVOLUTION_ENABLED", "1")]).unwrap();
        let evo = Evolution::new(c, Arc::clone(&svc));
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
        let (c2, s2) = (Arc::clone(&calls), Arc::clone(&seen));
        let generator = move |msgs: &[Value]| -> std::result::Result<String, String> {
            c2.fetch_add(1, Ordering::SeqCst);
            s2.lock().unwrap().extend(msgs.iter().cloned());
            Ok(json!({"action": "create", "name": "paris-weather-report", "reason": "asked twice",
                      "candidate_content": skill_md("paris-weather-report", "")})
            .to_string())
        };

        // A failed tool turn and a turn with too few tool calls leave no evidence.
        assert!(evo
            .process_turn(&trace("weather in paris", &["web_fetch", "write_file"], false), &generator)
            .unwrap()
            .is_none());
        assert!(evo.process_turn(&trace("weather in paris", &["web_fetch"], true), &generator).unwrap().is_none());
        assert_eq!(evidence_count(&evo), 0);

        assert!(evo
            .process_turn(&trace("weather in Paris 3", &["web_fetch", "write_file"], true), &generator)
            .unwrap()
            .is_none());
        assert_eq!(evidence_count(&evo), 1);
        let ev = &read_dir_json(&evo.evidence_dir)[0];
        assert_eq!(ev["assistant"], "done; token=[REDACTED]");
        assert_eq!(ev["tool_receipts"], json!(["[Skill loaded receipt] fetched"]));
        assert_eq!(ev["chat_id_hash"], json!(&sha256_hex(b"chat-1")[..12]));
        assert_eq!(calls.load(Ordering::SeqCst), 0);

        let p = evo
            .process_turn(&trace("weather in paris 4", &["write_file", "web_fetch"], true), &generator)
            .unwrap()
            .expect("second matching turn must propose");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(p["status"], "pending");
        assert_eq!(p["validation"], json!({"valid": true, "errors": []}));
        assert_eq!(p["evidence_ids"].as_array().unwrap().len(), 2);
        assert_eq!(p["base_hash"], Value::Null);
        assert_eq!(p["reason"], "asked twice");
        let msgs = seen.lock().unwrap().clone();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0]["role"], "system");
        let user = msgs[1]["content"].as_str().unwrap();
        assert!(text::char_len(user) <= 12_000);
        assert!(user.contains("agent_skill_manage"), "the skill-creator contract is included");

        // A pending proposal with the same fingerprint blocks another generation.
        assert!(evo
            .process_turn(&trace("weather in paris 5", &["web_fetch", "write_file"], true), &generator)
            .unwrap()
            .is_none());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(evo.list()["items"].as_array().unwrap().len(), 1);
        assert_eq!(evo.list()["enabled"], true);

        let id = p["id"].as_str().unwrap();
        assert!(svc.get("paris-weather-report").is_none(), "proposals are never auto-applied");
        let applied = evo.approve(id).unwrap();
        assert_eq!(applied["status"], "applied");
        assert_eq!(applied["applied_version"], "");
        let rec = svc.get("paris-weather-report").unwrap();
        assert_eq!(rec.source, Source::Agent);
        let e = evo.approve(id).unwrap_err();
        assert_eq!((e.status(), e.message()), (409, "proposal is not pending"));
        assert_eq!(evo.reject(id).unwrap_err().status(), 409);
        assert_eq!(evo.get("nope").unwrap_err().status(), 404);
        assert_eq!(evo.get("../x").unwrap_err().status(), 404);
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn update_proposals_recheck_ownership_hash_and_validation() {
        let (data, svc) = service("evo-update");
        let evo = Evolution::new(cfg(&[("SKILL_EVOLUTION_ENABLED", "true")]).unwrap(), Arc::clone(&svc));
        create(&svc, "mine", Source::Agent, "");
        create(&svc, "users", Source::User, "");
        let reply = Arc::new(Mutex::new(String::new()));
        let r2 = Arc::clone(&reply);
        let generator = move |_: &[Value]| -> std::result::Result<String, String> { Ok(r2.lock().unwrap().clone()) };
        let mut n = 0;
        let mut propose = |text: String| {
            *reply.lock().unwrap() = text;
            n += 1;
            let user = format!("task number{n}x");
            evo.process_turn(&trace(&user, &["exec", "grep"], true), &generator).unwrap();
            evo.process_turn(&trace(&user, &["exec", "grep"], true), &generator).unwrap()
        };
        // Unparsable, fenced, unknown action, or update of a non-agent skill: dropped.
        assert!(propose("not json".into()).is_none());
        assert!(propose(format!(
            "```json\n{}\n```",
            json!({"action": "create", "name": "x", "candidate_content": "y"})
        ))
        .is_none());
        assert!(propose(json!({"action": "delete", "name": "mine", "candidate_content": "y"}).to_string()).is_none());
        assert!(propose(
            json!({"action": "update", "name": "users", "candidate_content": skill_md("users", "")}).to_string()
        )
        .is_none());
        assert!(propose(
            json!({"action": "update", "name": "ghost", "candidate_content": skill_md("ghost", "")}).to_string()
        )
        .is_none());

        // An invalid candidate is stored but cannot be approved.
        let bad = propose(json!({"action": "create", "name": "bad", "candidate_content": "nope"}).to_string()).unwrap();
        assert_eq!(bad["validation"]["valid"], false);
        let e = evo.approve(bad["id"].as_str().unwrap()).unwrap_err();
        assert_eq!((e.status(), e.message()), (422, "proposal candidate is invalid"));
        let rejected = evo.reject(bad["id"].as_str().unwrap()).unwrap();
        assert_eq!(rejected["status"], "rejected");

        let up = propose(
            json!({"action": "update", "name": "mine", "candidate_content": skill_md("mine", "version: 2\n")})
                .to_string(),
        )
        .unwrap();
        assert_eq!(up["base_hash"], json!(svc.get("mine").unwrap().hash));
        // Changed since the proposal was made: stale base hash.
        svc.replace("mine", ReplaceRequest { content: skill_md("mine", "version: 3\n"), ..Default::default() })
            .unwrap();
        let e = evo.approve(up["id"].as_str().unwrap()).unwrap_err();
        assert_eq!((e.status(), e.message()), (409, "Skill content changed since it was read"));
        assert_eq!(evo.get(up["id"].as_str().unwrap()).unwrap()["status"], "pending");

        let up2 = propose(
            json!({"action": "update", "name": "mine", "candidate_content": skill_md("mine", "version: 4\n")})
                .to_string(),
        )
        .unwrap();
        let versions_before = svc.versions("mine").unwrap().len();
        let applied = evo.approve(up2["id"].as_str().unwrap()).unwrap();
        assert_eq!(svc.get("mine").unwrap().manifest.version, 4);
        let versions = svc.versions("mine").unwrap();
        assert_eq!(versions.len(), versions_before + 1, "approval snapshots first");
        assert_eq!(applied["applied_version"], json!(versions[0]));
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn evidence_is_pruned_and_scheduling_respects_the_gate() {
        let (data, svc) = service("evo-prune");
        let evo = Evolution::new(
            cfg(&[
                ("SKILL_EVOLUTION_ENABLED", "1"),
                ("SKILL_EVOLUTION_MAX_EVIDENCE", "10"),
                ("SKILL_EVOLUTION_RECURRENCE", "100"),
            ])
            .unwrap(),
            Arc::clone(&svc),
        );
        let never = |_: &[Value]| -> std::result::Result<String, String> { Err("unused".into()) };
        for i in 0..14 {
            evo.process_turn(&trace(&format!("task {i}"), &["a", "b"], true), &never).unwrap();
        }
        assert_eq!(evidence_count(&evo), 10);
        let off = Evolution::new(EvolutionConfig::default(), Arc::clone(&svc));
        assert!(!off.schedule_turn(trace("x", &["a", "b"], true), Arc::new(never)));
        // A scheduled turn runs on its own thread and writes its evidence there.
        assert!(evo.schedule_turn(trace("fresh", &["a", "b"], true), Arc::new(never)));
        // The worker writes the evidence, then prunes: wait for both.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let all = read_dir_json(&evo.evidence_dir);
            if all.len() == 10 && all.iter().any(|e| e["user"] == "fresh") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "background evidence never appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
        fs::remove_dir_all(data).unwrap();
    }
}
