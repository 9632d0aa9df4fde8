//! Skill self-evolution (docs/skills.md §12), off by default: the gate on successful turns, the
//! background worker (a short-lived `skill-evolution` thread per qualifying turn under a
//! counting semaphore, with a bounded backlog), recurrence, and the restricted proposal
//! generator (one LLM call through a caller-supplied closure, no tools). Evidence files are in
//! [`evidence`], the proposal store in [`proposals`], the switches in
//! [`crate::config::SkillEvolutionConfig`]. Turn workers call [`Evolution::schedule_turn`]; the
//! HTTP thread calls the proposal methods.

pub(crate) mod evidence;
pub(crate) mod proposals;

use std::collections::BTreeSet;
use std::fs;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

pub(crate) use self::evidence::TurnTrace;
use self::evidence::{fingerprint, Evidence, EvidenceDir};
use self::proposals::Proposals;
use super::package;
use super::service::SkillService;
use super::views::{Proposal, ProposalList, SkillView};
use super::{Result, SkillError};
use crate::config::SkillEvolutionConfig;
use crate::util::sync::{self, lock};
use crate::util::{fsx, text};

/// The proposal generator: OpenAI-style messages in, the model's reply text out.
pub(crate) type Generator = dyn Fn(&[Value]) -> std::result::Result<String, String> + Send + Sync;

/// How long a queued turn waits for a free evolution slot before it is dropped.
const SLOT_WAIT: Duration = Duration::from_secs(300);
/// Turns that may wait for a slot at once.
const MAX_WAITING: usize = 16;
/// Chars of the skill-creator body the prompt carries as the contract.
const CONTRACT_CHARS: usize = 5000;
/// Existing skills the prompt lists.
const EXISTING_SKILLS: usize = 80;

const RULES: [&str; 6] = [
    "Reply with one JSON object only, no code fences, no prose.",
    "Shape: {\"action\": \"create\"|\"update\", \"name\": \"<slug>\", \"candidate_content\": \"<complete SKILL.md>\", \"reason\": \"<why>\"}.",
    "Use action update only for an existing Skill whose source is agent; otherwise create with a new name.",
    "candidate_content must be a complete SKILL.md with YAML frontmatter following the contract.",
    "Describe the reusable workflow only: no one-off identifiers, failures, secrets, personal data or project status.",
    "Propose at most one Skill. If the evidence shows no reusable workflow, reply {\"action\": \"none\"}.",
];

const SYSTEM_PROMPT: &str = "You are a restricted Skill proposal generator for CashCode. You cannot modify files, call tools or access the network. You only read the workflow evidence and reply with a single JSON proposal as instructed.";

/// The generator's user message (fields in the original's key order).
#[derive(Serialize)]
struct PromptPayload<'a> {
    contract: String,
    evidence: Vec<PromptEvidence<'a>>,
    existing_skills: ExistingSkills<'a>,
    rules: [&'static str; 6],
}

#[derive(Serialize)]
struct PromptEvidence<'a> {
    assistant: &'a str,
    tool_receipts: &'a [String],
    tools: &'a [String],
    user: &'a str,
}

/// Full record dicts, or just name, description and source when the prompt runs long.
#[derive(Serialize)]
#[serde(untagged)]
enum ExistingSkills<'a> {
    Full(Vec<SkillView>),
    Slim(Vec<SlimSkill<'a>>),
}

#[derive(Serialize)]
struct SlimSkill<'a> {
    description: &'a str,
    name: &'a str,
    source: &'static str,
}

/// The evolution service.
pub(crate) struct Evolution {
    pub(crate) cfg: SkillEvolutionConfig,
    evidence: EvidenceDir,
    proposals: Proposals,
    skills: Arc<SkillService>,
    slots: (Mutex<usize>, Condvar),
    waiting: AtomicUsize,
    /// Fingerprints whose proposal is being generated right now.
    in_flight: Mutex<BTreeSet<String>>,
    /// The `skill-evolution` threads not yet joined (finished ones are pruned at each spawn);
    /// `Server::stop` joins the rest.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Set by [`Evolution::shutdown`]: no new turn is taken and waiting ones give up.
    stopping: AtomicBool,
}

/// Writes `v` as 2-space-indented JSON, atomically.
fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| SkillError::Internal(e.to_string()))?;
    fsx::write_atomic(path, text.as_bytes(), false)?;
    Ok(())
}

/// Every `*.json` file in `dir` that parses as a `T` (hidden and unreadable files skipped).
fn read_all<T: DeserializeOwned>(dir: &Path) -> Vec<T> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            !n.starts_with('.') && n.ends_with(".json")
        })
        .filter_map(|e| fs::read(e.path()).ok().and_then(|b| serde_json::from_slice(&b).ok()))
        .collect()
}

impl Evolution {
    pub(crate) fn new(cfg: SkillEvolutionConfig, skills: Arc<SkillService>) -> Arc<Evolution> {
        let base = skills.paths().evolution.clone();
        Arc::new(Evolution {
            evidence: EvidenceDir { dir: base.join("evidence"), max: cfg.max_evidence },
            proposals: Proposals::new(base.join("proposals"), Arc::clone(&skills)),
            cfg,
            skills,
            slots: (Mutex::new(0), Condvar::new()),
            waiting: AtomicUsize::new(0),
            in_flight: Mutex::new(BTreeSet::new()),
            threads: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
        })
    }

    /// Whether a finished turn qualifies for evidence.
    pub(crate) fn gate(&self, t: &TurnTrace) -> bool {
        self.cfg.enabled && t.success && t.tools.len() >= self.cfg.min_tool_calls
    }

    /// Called after every persisted turn: when the gate passes, processes the turn on a
    /// background thread (at most `max_concurrent` at once). Returns whether it was queued.
    pub(crate) fn schedule_turn(self: &Arc<Self>, trace: TurnTrace, generator: Arc<Generator>) -> bool {
        if !self.gate(&trace) || self.stopping.load(Ordering::SeqCst) {
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
        match spawned {
            Ok(handle) => {
                let mut threads = lock(&self.threads);
                threads.retain(|t| !t.is_finished());
                threads.push(handle);
                true
            }
            Err(_) => {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                false
            }
        }
    }

    /// Refuses new turns and wakes the ones waiting for a slot (they drop their evidence).
    /// A generator call under way ends with the LLM runtime's shutdown.
    pub(crate) fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let (m, cv) = &self.slots;
        let _g = lock(m);
        cv.notify_all();
    }

    /// Joins the `skill-evolution` threads by `deadline`; returns the names of those still running.
    pub(crate) fn join_until(&self, deadline: Instant) -> Vec<String> {
        let threads = std::mem::take(&mut *lock(&self.threads));
        threads.into_iter().filter_map(|t| crate::util::join::join_until(t, deadline).err()).collect()
    }

    fn acquire_slot(&self) -> bool {
        let (m, cv) = &self.slots;
        let mut n = lock(m);
        let deadline = std::time::Instant::now() + SLOT_WAIT;
        while *n >= self.cfg.max_concurrent {
            if self.stopping.load(Ordering::SeqCst) {
                return false;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            n = sync::wait_timeout(cv, n, left);
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
    pub(crate) fn process_turn(&self, t: &TurnTrace, generator: &Generator) -> Result<Option<Proposal>> {
        if !self.gate(t) {
            return Ok(None);
        }
        let fp = fingerprint(&t.user, &t.tools);
        self.evidence.record(&Evidence::of(t, fp.clone()))?;
        let recent = {
            let _g = self.proposals.guard();
            match self.evidence.recurring(&fp, self.cfg.recurrence) {
                Some(recent) if !self.proposals.blocked(&fp) && lock(&self.in_flight).insert(fp.clone()) => recent,
                _ => return Ok(None),
            }
        };
        // The LLM call runs without the proposal lock, so approve/reject never wait on it; the
        // in-flight set keeps a second worker from generating for the same fingerprint.
        let reply = generator(&self.prompt(&recent));
        let stored = match reply {
            Ok(r) => self.proposals.store(&r, &recent, &fp),
            Err(e) => {
                log::info!("event=skill_evolution.generator_failed error={:?}", package::sanitize(&e, &[]));
                Ok(None)
            }
        };
        lock(&self.in_flight).remove(&fp);
        stored
    }

    /// The restricted generator's two messages.
    fn prompt(&self, evidence: &[Evidence]) -> Vec<Value> {
        let cat = self.skills.catalog();
        let contract = cat
            .get("skill-creator")
            .and_then(|r| self.skills.read(r).ok())
            .map(|p| text::take_chars(&p.parsed.manifest.body, CONTRACT_CHARS).to_string())
            .unwrap_or_default();
        let existing = || cat.records.values().take(EXISTING_SKILLS);
        let mut payload = PromptPayload {
            contract,
            evidence: evidence
                .iter()
                .map(|e| PromptEvidence {
                    assistant: &e.assistant,
                    tool_receipts: &e.tool_receipts,
                    tools: &e.tools,
                    user: &e.user,
                })
                .collect(),
            existing_skills: ExistingSkills::Full(existing().map(|r| SkillView::record(r, false)).collect()),
            rules: RULES,
        };
        let mut body = serde_json::to_string(&payload).expect("the prompt serialises");
        if text::char_len(&body) > self.cfg.max_context_chars {
            // Drop the bulky skill dicts to names and descriptions before cutting blindly.
            payload.existing_skills = ExistingSkills::Slim(
                existing()
                    .map(|r| SlimSkill {
                        description: &r.manifest.description,
                        name: r.name(),
                        source: r.source.as_str(),
                    })
                    .collect(),
            );
            body = serde_json::to_string(&payload).expect("the prompt serialises");
        }
        let body = text::take_chars(&body, self.cfg.max_context_chars).to_string();
        vec![json!({"role": "system", "content": SYSTEM_PROMPT}), json!({"role": "user", "content": body})]
    }

    // ----- API -------------------------------------------------------------------------

    /// `GET /api/skill-evolution/proposals`.
    pub(crate) fn list(&self) -> ProposalList {
        ProposalList { enabled: self.cfg.enabled, items: self.proposals.list() }
    }

    /// `GET …/{id}`.
    pub(crate) fn get(&self, id: &str) -> Result<Proposal> {
        self.proposals.get(id)
    }

    /// `POST …/{id}/reject`.
    pub(crate) fn reject(&self, id: &str) -> Result<Proposal> {
        self.proposals.reject(id)
    }

    /// `POST …/{id}/approve`.
    pub(crate) fn approve(&self, id: &str) -> Result<Proposal> {
        self.proposals.approve(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::package::tests::skill_md;
    use crate::skills::service::tests::{create, service};
    use crate::skills::service::ReplaceRequest;
    use crate::skills::views::ProposalStatus;
    use crate::skills::Source;
    use crate::util::hash::sha256_hex;
    use std::sync::atomic::AtomicUsize;

    fn on(tweak: impl FnOnce(&mut SkillEvolutionConfig)) -> SkillEvolutionConfig {
        let mut c = SkillEvolutionConfig { enabled: true, ..Default::default() };
        tweak(&mut c);
        c
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
        evo.evidence.all().len()
    }

    #[test]
    fn two_matching_successful_turns_produce_one_proposal_and_approval_applies_it() {
        let (data, svc) = service("evo-flow");
        let c = on(|_| {});
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
        let ev = &evo.evidence.all()[0];
        assert_eq!(ev.assistant, "done; token=[REDACTED]");
        assert_eq!(ev.tool_receipts, ["[Skill loaded receipt] fetched"]);
        assert_eq!(ev.chat_id_hash, sha256_hex(b"chat-1")[..12]);
        assert_eq!(calls.load(Ordering::SeqCst), 0);

        let p = evo
            .process_turn(&trace("weather in paris 4", &["write_file", "web_fetch"], true), &generator)
            .unwrap()
            .expect("second matching turn must propose");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(p.status, ProposalStatus::Pending);
        assert_eq!((p.validation.valid, p.validation.errors.len()), (true, 0));
        assert_eq!(p.evidence_ids.len(), 2);
        assert_eq!(p.base_hash, None);
        assert_eq!(p.reason, "asked twice");
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
        assert_eq!(evo.list().items.len(), 1);
        assert!(evo.list().enabled);

        let id = p.id.as_str();
        assert!(svc.get("paris-weather-report").is_none(), "proposals are never auto-applied");
        let applied = evo.approve(id).unwrap();
        assert_eq!(applied.status, ProposalStatus::Applied);
        assert_eq!(applied.applied_version.as_deref(), Some(""));
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
        let evo = Evolution::new(on(|_| {}), Arc::clone(&svc));
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
        assert!(!bad.validation.valid);
        let e = evo.approve(&bad.id).unwrap_err();
        assert_eq!((e.status(), e.message()), (422, "proposal candidate is invalid"));
        let rejected = evo.reject(&bad.id).unwrap();
        assert_eq!(rejected.status, ProposalStatus::Rejected);

        let up = propose(
            json!({"action": "update", "name": "mine", "candidate_content": skill_md("mine", "version: 2\n")})
                .to_string(),
        )
        .unwrap();
        assert_eq!(up.base_hash, Some(svc.get("mine").unwrap().hash.clone()));
        // Changed since the proposal was made: stale base hash.
        svc.replace("mine", ReplaceRequest { content: skill_md("mine", "version: 3\n"), ..Default::default() })
            .unwrap();
        let e = evo.approve(&up.id).unwrap_err();
        assert_eq!((e.status(), e.message()), (409, "Skill content changed since it was read"));
        assert_eq!(evo.get(&up.id).unwrap().status, ProposalStatus::Pending);

        let up2 = propose(
            json!({"action": "update", "name": "mine", "candidate_content": skill_md("mine", "version: 4\n")})
                .to_string(),
        )
        .unwrap();
        let versions_before = svc.versions("mine").unwrap().len();
        let applied = evo.approve(&up2.id).unwrap();
        assert_eq!(svc.get("mine").unwrap().manifest.version, 4);
        let versions = svc.versions("mine").unwrap();
        assert_eq!(versions.len(), versions_before + 1, "approval snapshots first");
        assert_eq!(applied.applied_version.as_ref(), Some(&versions[0]));
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn evidence_is_pruned_and_scheduling_respects_the_gate() {
        let (data, svc) = service("evo-prune");
        let evo = Evolution::new(
            on(|c| {
                c.max_evidence = 10;
                c.recurrence = 100;
            }),
            Arc::clone(&svc),
        );
        let never = |_: &[Value]| -> std::result::Result<String, String> { Err("unused".into()) };
        for i in 0..14 {
            evo.process_turn(&trace(&format!("task {i}"), &["a", "b"], true), &never).unwrap();
        }
        assert_eq!(evidence_count(&evo), 10);
        let off = Evolution::new(SkillEvolutionConfig::default(), Arc::clone(&svc));
        assert!(!off.schedule_turn(trace("x", &["a", "b"], true), Arc::new(never)));
        // A scheduled turn runs on its own thread and writes its evidence there.
        assert!(evo.schedule_turn(trace("fresh", &["a", "b"], true), Arc::new(never)));
        // The worker writes the evidence, then prunes: wait for both.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let all = evo.evidence.all();
            if all.len() == 10 && all.iter().any(|e| e.user == "fresh") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "background evidence never appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
        fs::remove_dir_all(data).unwrap();
    }

    #[test]
    fn shutdown_refuses_new_turns_and_joins_the_waiting_and_running_threads() {
        let (data, svc) = service("evo-stop");
        // The one slot is held by a turn whose generator blocks until released.
        let (release, hold) = crossbeam_channel::bounded::<()>(0);
        let (entered_tx, entered) = crossbeam_channel::bounded::<()>(1);
        let blocking = move |_: &[Value]| -> std::result::Result<String, String> {
            let _ = entered_tx.try_send(());
            let _ = hold.recv();
            Err("released".into())
        };
        let evo = Evolution::new(
            on(|c| {
                c.max_concurrent = 1;
                c.recurrence = 1;
            }),
            Arc::clone(&svc),
        );
        assert!(evo.schedule_turn(trace("first", &["a", "b"], true), Arc::new(blocking)));
        entered.recv_timeout(Duration::from_secs(10)).expect("the generator never ran");
        // A second turn waits for the slot (SLOT_WAIT is minutes).
        let never = |_: &[Value]| -> std::result::Result<String, String> { Err("unused".into()) };
        assert!(evo.schedule_turn(trace("second", &["c", "d"], true), Arc::new(never)));
        evo.shutdown();
        assert!(!evo.schedule_turn(trace("third", &["e", "f"], true), Arc::new(never)));
        // The waiting thread leaves at once; the running one when its model call ends.
        let t0 = Instant::now();
        drop(release);
        assert_eq!(evo.join_until(Instant::now() + Duration::from_secs(5)), Vec::<String>::new());
        assert!(t0.elapsed() < Duration::from_secs(2), "joining took {:?}", t0.elapsed());
        assert!(lock(&evo.threads).is_empty());
        fs::remove_dir_all(data).unwrap();
    }
}
