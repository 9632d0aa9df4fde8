//! Explicit skill selection in a user message (docs/skills.md §6, docs/agent-and-memory.md §3): the
//! structured `mentioned_skills` names plus a leading `@name` (removed from what the model sees),
//! deduplicated in that order. The turn builds the system message that carries the loaded
//! bodies (`agent::turn`). Pure string functions; run on the turn's worker thread.

use super::is_valid_name;

/// A leading `@name` (`^@([a-z0-9][a-z0-9._-]{0,63})(\s+|$)`): the name and the text after it.
pub(crate) fn leading_mention(content: &str) -> Option<(String, String)> {
    let rest = content.strip_prefix('@')?;
    let end = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    let after = &rest[end..];
    if !is_valid_name(name) || !(after.is_empty() || after.starts_with(char::is_whitespace)) {
        return None;
    }
    Some((name.to_string(), after.trim_start().to_string()))
}

/// Names to load for a turn: structured selections first, then the legacy `@name`, deduplicated.
pub(crate) fn selected_skills(mentioned: &[String], content: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let legacy = leading_mention(content).map(|(n, _)| n);
    for n in mentioned.iter().cloned().chain(legacy) {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_mentions_and_selection_order() {
        assert_eq!(leading_mention("@weather what now"), Some(("weather".into(), "what now".into())));
        assert_eq!(leading_mention("@weather"), Some(("weather".into(), String::new())));
        assert_eq!(leading_mention("@weather\n\tx"), Some(("weather".into(), "x".into())));
        assert_eq!(leading_mention("@weather, hi"), None);
        assert_eq!(leading_mention("@Weather hi"), None);
        assert_eq!(leading_mention(" @weather hi"), None);
        assert_eq!(leading_mention(&format!("@{} x", "a".repeat(65))), None);
        assert_eq!(selected_skills(&["github".into(), "weather".into()], "@weather hi"), vec!["github", "weather"]);
    }
}
