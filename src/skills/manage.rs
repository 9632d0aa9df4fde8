//! `agent_skill_manage` (docs/skills.md §8): the model's create-only authoring tool. Validates the
//! arguments like the original's schema, creates an agent skill through the one store and
//! verifies the published record, answering with a typed result the model reads. Runs on the
//! turn's worker thread (the store serialises it with every other mutation).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};

use super::package;
use super::service::{CreateRequest, SkillService};
use super::views::ManageReply;
use super::{SkillError, Source};
use crate::tool::args::{read_args, Problem};
use crate::tool::{Tool, ToolOutput, TurnCtx};
use crate::util::text;

/// `agent_skill_manage`: create-only authoring in the agent root (docs/skills.md §8).
pub(crate) struct AgentSkillManage(pub(crate) Arc<SkillService>);

/// Only `create` is supported; any other value, or none, is `unsupported_action`.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Action {
    Create,
}

/// The arguments in the order they are checked: the refusal is about the first one at fault,
/// whatever order the model wrote them in. A wrong `name` or `content` is one refusal.
#[derive(Deserialize)]
struct Args {
    action: Action,
    #[serde(deserialize_with = "reason")]
    reason: Option<String>,
    #[serde(deserialize_with = "support_files")]
    support_files: BTreeMap<String, String>,
    name: String,
    content: String,
}

/// At most 500 characters once trimmed; stored trimmed.
fn reason<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let refused = || D::Error::custom("reason must be a string of at most 500 characters");
    match Option::<String>::deserialize(d).map_err(|_| refused())? {
        Some(r) if text::char_len(r.trim()) > 500 => Err(refused()),
        r => Ok(r.map(|r| r.trim().to_string())),
    }
}

/// An object of at most 64 string values (the count is checked first); absent is empty.
fn support_files<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let files = Option::<Map<String, Value>>::deserialize(d)
        .map_err(|_| D::Error::custom("support_files must be an object"))?
        .unwrap_or_default();
    if files.len() > 64 {
        return Err(D::Error::custom("support_files may hold at most 64 files"));
    }
    files
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            _ => Err(D::Error::custom("support_files values must be strings")),
        })
        .collect()
}

impl AgentSkillManage {
    /// The result of one call.
    pub(crate) fn manage(&self, args: &Map<String, Value>) -> ManageReply {
        let fail = |code: &'static str, detail: &str| {
            ManageReply::failed(code, package::sanitize(detail, &[&self.0.paths().agent]))
        };
        let Args { action: Action::Create, reason, support_files, name, content } = match read_args(args) {
            Ok(a) => a,
            Err(e) => {
                return match (e.field, e.problem) {
                    ("action", _) => fail("unsupported_action", "only action \"create\" is supported"),
                    (_, Problem::Refused(detail)) => fail("validation_error", &detail),
                    _ => fail("validation_error", "name and content must be strings"),
                }
            }
        };
        let (name, content) = (name.as_str(), content.as_str());
        let name = match super::validate_name(name) {
            Ok(n) => n,
            Err(e) => return fail("validation_error", e.message()),
        };
        let expected_hash = match super::frontmatter::parse(content, Some(&name)) {
            Ok(p) => p.hash,
            Err(e) => return fail("validation_error", e.message()),
        };
        let created = self.0.create(CreateRequest {
            name: name.clone(),
            content: content.to_string(),
            source: Source::Agent,
            support_files,
            enabled: true,
            reason,
        });
        match created {
            Ok(rec) if rec.source == Source::Agent && rec.hash == expected_hash => ManageReply::created(&rec),
            Ok(_) | Err(SkillError::Internal(_)) => fail("publication_failed", "Skill publication failed unexpectedly"),
            Err(SkillError::Conflict(m)) => fail("conflict", &m),
            Err(SkillError::Permission(m)) => fail("permission_denied", &m),
            Err(SkillError::Invalid(m) | SkillError::NotFound(m)) => fail("validation_error", &m),
        }
    }
}

impl Tool for AgentSkillManage {
    fn name(&self) -> &str {
        "agent_skill_manage"
    }

    fn description(&self) -> &str {
        "Create a new managed Skill in the agent Skill root. Use ONLY when the user explicitly asks to create or \
         save a Skill (load the skill-creator Skill first for the contract). `name` must match \
         ^[a-z0-9][a-z0-9._-]{0,63}$ (ASCII slug); put a localized or human-readable title in the frontmatter \
         `display_name`. `content` is the complete SKILL.md. On a validation_error, fix the content and call this \
         tool again - never write Skill files with file tools, shell or HTTP. Only a result with success=true \
         confirms the Skill was created."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["create"]},
                "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$"},
                "content": {"type": "string"},
                "support_files": {"type": "object", "maxProperties": 64, "additionalProperties": {"type": "string"}},
                "reason": {"type": "string", "maxLength": 500}
            },
            "required": ["action", "name", "content"],
            "additionalProperties": false
        })
    }

    fn run(&self, args: &Map<String, Value>, _ctx: &TurnCtx) -> ToolOutput {
        let v = self.manage(args);
        let for_model = serde_json::to_string(&v).expect("the manage reply serialises");
        ToolOutput { for_model, preview: None, for_history: None, failed: !v.succeeded(), outcome: None }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::skills::package::tests::skill_md;
    use crate::skills::service::tests::service;
    use crate::skills::tools::tests::{ctx, env};
    use crate::skills::tools::SkillTools;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn agent_skill_manage_creates_and_reports_codes() {
        let (data, svc) = service("tools-manage");
        let tool = AgentSkillManage(Arc::clone(&svc));
        let ok = serde_json::to_value(tool.manage(&args(json!({
            "action": "create", "name": "renzhi-niuqu",
            "content": skill_md("renzhi-niuqu", "display_name: 认知扭曲\n"),
            "support_files": {"references/notes.md": "n"}, "reason": "user asked"
        }))))
        .unwrap();
        assert_eq!(ok["success"], true);
        assert_eq!(ok["display_name"], "认知扭曲");
        assert_eq!(ok["source"], "agent");
        assert!(ok.get("path").is_none());
        let rec = svc.get("renzhi-niuqu").unwrap();
        assert_eq!(rec.source, Source::Agent);
        assert_eq!(ok["hash"], json!(rec.hash));
        let turn = SkillTools::new(Arc::clone(&svc), env());
        let c = ctx(&data);
        turn.begin_turn(&c.chat_id);
        assert_eq!(turn.search("认知扭曲", 8).skills[0].name, "renzhi-niuqu");

        let code = |v: Value| match tool.manage(&args(v)) {
            ManageReply::Failed { code, .. } => code,
            created => panic!("expected a failure, got {created:?}"),
        };
        assert_eq!(code(json!({"action": "delete", "name": "x", "content": ""})), "unsupported_action");
        assert_eq!(
            code(json!({"action": "create", "name": "renzhi-niuqu", "content": skill_md("renzhi-niuqu", "")})),
            "conflict"
        );
        assert_eq!(
            code(json!({"action": "create", "name": "weather", "content": skill_md("weather", "")})),
            "conflict"
        );
        assert_eq!(code(json!({"action": "create", "name": "Bad", "content": "x"})), "validation_error");
        assert_eq!(code(json!({"action": "create", "name": "ok", "content": "no frontmatter"})), "validation_error");
        assert_eq!(
            code(json!({"action": "create", "name": "ok", "content": skill_md("ok", ""), "reason": "r".repeat(501)})),
            "validation_error"
        );
        assert_eq!(
            code(json!({"action": "create", "name": "ok", "content": skill_md("ok", ""), "support_files": {"a": 1}})),
            "validation_error"
        );
        assert_eq!(
            code(
                json!({"action": "create", "name": "ok", "content": skill_md("ok", ""), "support_files": {"../x": "1"}})
            ),
            "validation_error"
        );
        svc.fail_refreshes.store(1, std::sync::atomic::Ordering::SeqCst);
        let v = tool.manage(&args(json!({"action": "create", "name": "late", "content": skill_md("late", "")})));
        assert_eq!(v, ManageReply::failed("publication_failed", "Skill publication failed unexpectedly".into()));
        assert!(!svc.paths().agent.join("late").exists());
        let out = tool.run(&args(json!({"action": "x", "name": "a", "content": ""})), &ctx(&data));
        assert!(out.failed);
        fs::remove_dir_all(data).unwrap();
    }

    /// Each refusal keeps its code and detail, and the checks keep their order: action, then
    /// reason, then support_files, then name and content, whatever order the keys come in.
    #[test]
    fn argument_spellings() {
        let (data, svc) = service("tools-manage-args");
        let tool = AgentSkillManage(Arc::clone(&svc));
        let unsupported = ("unsupported_action", "only action \"create\" is supported");
        let reason = ("validation_error", "reason must be a string of at most 500 characters");
        let object = ("validation_error", "support_files must be an object");
        let values = ("validation_error", "support_files values must be strings");
        let at_most = ("validation_error", "support_files may hold at most 64 files");
        let strings = ("validation_error", "name and content must be strings");
        let many: Map<String, Value> = (0..65).map(|i| (format!("references/{i}.md"), json!(i))).collect();
        let ok = skill_md("argpin", "");
        for (a, (code, detail)) in [
            (json!({}), unsupported),
            (json!({"action": null, "name": "x", "content": "y"}), unsupported),
            (json!({"action": 5}), unsupported),
            (json!({"action": ["create"]}), unsupported),
            (json!({"action": "Create"}), unsupported),
            (json!({"reason": 5, "action": "delete"}), unsupported),
            (json!({"name": 5, "support_files": 5, "reason": 5, "action": "create"}), reason),
            (json!({"action": "create", "reason": "r".repeat(501)}), reason),
            (json!({"action": "create", "reason": ["r"]}), reason),
            (json!({"action": "create", "name": 5, "support_files": 5, "reason": null}), object),
            (json!({"action": "create", "support_files": []}), object),
            (json!({"action": "create", "support_files": "references/a.md"}), object),
            (json!({"action": "create", "support_files": many}), at_most),
            (json!({"action": "create", "support_files": {"a": 1}, "name": 5}), values),
            (json!({"action": "create", "support_files": {"a": null}}), values),
            (json!({"action": "create"}), strings),
            (json!({"action": "create", "support_files": null, "name": "x"}), strings),
            (json!({"action": "create", "content": "x"}), strings),
            (json!({"action": "create", "name": "x", "content": 5}), strings),
            (json!({"action": "create", "name": null, "content": "x"}), strings),
        ] {
            assert_eq!(tool.manage(&args(a.clone())), ManageReply::failed(code, detail.into()), "{a}");
        }
        // Null reason and support_files are absent; a reason is trimmed before its length
        // is counted; unknown keys are ignored.
        let created = tool.manage(&args(json!({
            "action": "create", "name": "argpin", "content": ok, "reason": format!(" {} ", "r".repeat(500)),
            "support_files": null, "overwrite": true
        })));
        assert!(created.succeeded(), "{created:?}");
        fs::remove_dir_all(data).unwrap();
    }
}
