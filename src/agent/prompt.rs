//! The system prompt (docs/agent-and-memory.md §4). Byte-stable for unchanged SOUL.md and
//! MEMORY.md: no timestamps, no map iteration; volatile hints are appended after the stable part.

/// Persona used when SOUL.md is missing or blank.
pub(crate) const DEFAULT_PERSONA: &str = "You are CashCode, a capable local-first assistant with persistent memory.\n\
Call `save_memory` when the user explicitly asks you to remember something durable (name, job, \
preferences, ongoing projects). Do not save temporary queries or casual chat.";

/// Fixed skill-usage rules appended to every system prompt.
pub(crate) const SKILL_USAGE: &str =
    "Use `skill_search` to find reusable workflows (Skills), then `skill_load` an exact \
result before following it. Skill bodies last only for the current turn; load them again in later turns. \
When the user explicitly asks to create a Skill, load `skill-creator` and use `agent_skill_manage`. Never \
create or edit managed Skill files with `write_file`, `edit_file`, `exec`, curl or ad-hoc HTTP. Claim \
success only when the tool returns `success=true`; on a validation failure, fix the content and retry only \
through `agent_skill_manage`, or report the failure.";

/// Stable part: persona, remembered information, skill usage. `hints` (recently activated
/// skills) come last so everything before them stays cacheable.
pub(crate) fn system_prompt(soul: Option<&str>, memory: Option<&str>, hints: Option<&str>) -> String {
    let mut s = String::with_capacity(2048);
    s.push_str(soul.map(str::trim).filter(|t| !t.is_empty()).unwrap_or(DEFAULT_PERSONA));
    if let Some(m) = memory.map(str::trim).filter(|t| !t.is_empty()) {
        s.push_str("\n\n## Remembered information\n");
        s.push_str(m);
    }
    s.push_str("\n\n## Skill usage\n");
    s.push_str(SKILL_USAGE);
    if let Some(h) = hints.map(str::trim).filter(|t| !t.is_empty()) {
        s.push_str("\n\n");
        s.push_str(h);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembles_in_order() {
        let p = system_prompt(Some("Soul"), Some("- likes tea\n"), None);
        assert!(p.starts_with("Soul\n\n## Remembered information\n- likes tea\n\n## Skill usage\n"));
        let d = system_prompt(None, Some("  "), Some("## Recently activated Skills\n- a"));
        assert!(d.starts_with(DEFAULT_PERSONA));
        assert!(!d.contains("Remembered"));
        assert!(d.ends_with("- a"));
        assert_eq!(system_prompt(Some("x"), None, None), system_prompt(Some("x"), None, None));
    }
}
