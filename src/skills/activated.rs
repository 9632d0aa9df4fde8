//! What a chat remembers of its skill use between turns, in its metadata (docs/skills.md §6,
//! docs/agent-and-memory.md §4): the `activated_skills` LRU (12 entries: description, version, hash,
//! last use) with the `## Recently activated Skills` prompt section built from it, and the MCP
//! tools a skill load activates in `activated_tools`. Pure data over the turn's metadata
//! working copy; runs on the turn's worker thread.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::service::SkillService;
use crate::tool::TurnCtx;
use crate::util::{text, time};

/// Most skills kept in a chat's `activated_skills`.
pub(crate) const ACTIVATED_CAPACITY: usize = 12;
/// Longest recent-skills prompt section, in chars.
pub(crate) const SUMMARY_MAX_CHARS: usize = 1800;
/// Most tools kept in a chat's `activated_tools` (shared with MCP activations).
pub(crate) const ACTIVATED_TOOLS_CAPACITY: usize = 50;

/// One entry of the chat's `activated_skills` (fields in the stored key order).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Activated {
    pub(crate) description: String,
    pub(crate) hash: String,
    pub(crate) last_used: f64,
    pub(crate) version: u64,
}

/// The chat's `activated_skills` LRU (metadata.json).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ActivatedSkills(pub(crate) BTreeMap<String, Activated>);

impl ActivatedSkills {
    /// Reads the metadata value; malformed entries are dropped.
    pub(crate) fn from_json(v: Option<&Value>) -> ActivatedSkills {
        let mut out = BTreeMap::new();
        if let Some(Value::Object(o)) = v {
            for (name, e) in o {
                let (Some(desc), Some(version), Some(hash)) = (
                    e.get("description").and_then(Value::as_str),
                    e.get("version").and_then(Value::as_u64),
                    e.get("hash").and_then(Value::as_str),
                ) else {
                    continue;
                };
                out.insert(
                    name.clone(),
                    Activated {
                        description: desc.to_string(),
                        version,
                        hash: hash.to_string(),
                        last_used: e.get("last_used").and_then(Value::as_f64).unwrap_or(0.0),
                    },
                );
            }
        }
        let mut s = ActivatedSkills(out);
        s.evict();
        s
    }

    pub(crate) fn to_json(&self) -> Value {
        serde_json::to_value(&self.0).expect("activated skills serialise")
    }

    /// Records a successful load now.
    pub(crate) fn touch(&mut self, name: &str, description: &str, version: u64, hash: &str) {
        // Strictly increasing stamps keep the LRU order exact for loads within one clock tick.
        let newest = self.0.values().map(|a| a.last_used).fold(0.0, f64::max);
        let now = time::now_epoch().max(newest + 1e-6);
        self.0.insert(
            name.to_string(),
            Activated {
                description: text::take_chars(description, 160).to_string(),
                version,
                hash: hash.to_string(),
                last_used: now,
            },
        );
        self.evict();
    }

    fn evict(&mut self) {
        while self.0.len() > ACTIVATED_CAPACITY {
            let oldest = self
                .0
                .iter()
                .min_by(|a, b| a.1.last_used.partial_cmp(&b.1.last_used).unwrap_or(std::cmp::Ordering::Equal))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.0.remove(&k);
                }
                None => break,
            }
        }
    }

    /// Names, most recently used first.
    pub(crate) fn recent_first(&self) -> Vec<(&String, &Activated)> {
        let mut v: Vec<_> = self.0.iter().collect();
        v.sort_by(|a, b| {
            b.1.last_used.partial_cmp(&a.1.last_used).unwrap_or(std::cmp::Ordering::Equal).then_with(|| a.0.cmp(b.0))
        });
        v
    }

    /// The `## Recently activated Skills` prompt section, or `""` when no line qualifies.
    /// Deleted and disabled skills are skipped; a changed hash is marked stale.
    pub(crate) fn summary(&self, svc: &SkillService) -> String {
        let cat = svc.catalog();
        let mut out = String::from(
            "## Recently activated Skills\nThese are hints only: call skill_load before relying on any of them.",
        );
        let mut lines = 0;
        for (name, a) in self.recent_first() {
            let Some(rec) = cat.get(name) else { continue };
            if !rec.enabled {
                continue;
            }
            let mut line = format!("\n- {name}: {}", text::take_chars(&a.description, 160));
            if rec.hash != a.hash {
                line.push_str(" (stale; reload required)");
            }
            if text::char_len(&out) + text::char_len(&line) > SUMMARY_MAX_CHARS {
                break;
            }
            out.push_str(&line);
            lines += 1;
        }
        if lines == 0 {
            String::new()
        } else {
            out
        }
    }
}

/// Adds MCP tool names to the turn's `activated_tools` LRU (`{name: epoch seconds}`, max 50).
pub(crate) fn activate_tools(ctx: &TurnCtx, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let mut st = ctx.state();
    let mut map = match st.metadata.get("activated_tools") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let now = time::now_epoch();
    for n in names {
        map.insert(n.clone(), json!(now));
    }
    while map.len() > ACTIVATED_TOOLS_CAPACITY {
        let oldest = map
            .iter()
            .min_by(|a, b| {
                let (x, y) = (a.1.as_f64().unwrap_or(0.0), b.1.as_f64().unwrap_or(0.0));
                x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal)
            })
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => {
                map.remove(&k);
            }
            None => break,
        }
    }
    st.metadata.insert("activated_tools".into(), Value::Object(map));
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::skills::service::tests::service;

    #[test]
    fn activated_skills_lru_and_summary() {
        let (data, svc) = service("tools-lru");
        let mut a = ActivatedSkills::default();
        for i in 0..15 {
            a.touch(&format!("s{i}"), &"d".repeat(300), 1, "h");
        }
        assert_eq!(a.0.len(), ACTIVATED_CAPACITY);
        assert!(!a.0.contains_key("s0") && !a.0.contains_key("s2") && a.0.contains_key("s3"));
        assert_eq!(a.0["s3"].description.len(), 160);
        let back = ActivatedSkills::from_json(Some(&a.to_json()));
        assert_eq!(back, a);

        let w = svc.get("weather").unwrap();
        let g = svc.get("github").unwrap();
        let mut a = ActivatedSkills::default();
        a.touch("weather", "Weather things", 1, &w.hash);
        a.touch("github", "GitHub things", 1, "old-hash");
        a.touch("deleted", "Gone", 1, "x");
        let s = a.summary(&svc);
        assert_eq!(
            s,
            "## Recently activated Skills\nThese are hints only: call skill_load before relying on any of them.\n\
             - github: GitHub things (stale; reload required)\n- weather: Weather things"
        );
        assert_ne!(g.hash, "old-hash");
        assert_eq!(ActivatedSkills::default().summary(&svc), "");
        let mut big = ActivatedSkills::default();
        for n in ["weather", "github", "chart-visualization", "skill-creator"] {
            big.touch(n, &"x".repeat(160), 1, "h");
        }
        let s = big.summary(&svc);
        assert!(text::char_len(&s) <= SUMMARY_MAX_CHARS);
        fs::remove_dir_all(data).unwrap();
    }
}
