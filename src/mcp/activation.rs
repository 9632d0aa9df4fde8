//! The per-chat ActivatedToolSet (docs/tools-and-mcp.md §7): MCP tool names the model may see and
//! call in this chat, with last-use timestamps, capped at 50 by evicting the least recently
//! used. Persisted as `metadata.activated_tools` `{name: epoch_seconds}`. Pure data; the turn
//! worker owns one per running turn and writes it back at a successful turn end.

use serde_json::{Map, Value};

/// Most activated tools kept per chat.
pub(crate) const CAPACITY: usize = 50;

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ActivatedToolSet {
    /// Oldest first.
    entries: Vec<(String, f64)>,
    revision: u64,
}

impl ActivatedToolSet {
    /// Loads `metadata.activated_tools`; non-numeric timestamps count as 0, order is by time.
    pub(crate) fn from_json(v: Option<&Value>) -> ActivatedToolSet {
        let mut entries: Vec<(String, f64)> = match v {
            Some(Value::Object(m)) => m
                .iter()
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, t)| (k.clone(), t.as_f64().filter(|f| f.is_finite()).unwrap_or(0.0)))
                .collect(),
            _ => Vec::new(),
        };
        entries.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal));
        let mut set = ActivatedToolSet { entries, revision: 0 };
        set.evict();
        set
    }

    pub(crate) fn to_json(&self) -> Value {
        let m: Map<String, Value> = self.entries.iter().map(|(k, t)| (k.clone(), Value::from(*t))).collect();
        Value::Object(m)
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == name)
    }

    /// Names, least recently used first.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bumped whenever membership changes (a cache key for visible tool definitions).
    #[cfg(test)]
    pub(crate) fn revision(&self) -> u64 {
        self.revision
    }

    /// Adds `name` (or refreshes it). Returns true when it was not active before.
    pub(crate) fn activate(&mut self, name: &str, now: f64) -> bool {
        if self.touch(name, now) {
            return false;
        }
        self.entries.push((name.to_string(), now));
        self.evict();
        self.revision += 1;
        true
    }

    /// Marks `name` as just used; false when it is not active.
    pub(crate) fn touch(&mut self, name: &str, now: f64) -> bool {
        match self.entries.iter().position(|(k, _)| k == name) {
            Some(i) => {
                let (k, _) = self.entries.remove(i);
                self.entries.push((k, now));
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    pub(crate) fn deactivate(&mut self, name: &str) -> bool {
        self.remove_all(&[name.to_string()])
    }

    /// Drops every listed name (a disconnected server's tools); true if any was present.
    #[cfg(test)]
    pub(crate) fn remove_all(&mut self, names: &[String]) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(k, _)| !names.iter().any(|n| n == k));
        let changed = self.entries.len() != before;
        if changed {
            self.revision += 1;
        }
        changed
    }

    fn evict(&mut self) {
        if self.entries.len() > CAPACITY {
            let extra = self.entries.len() - CAPACITY;
            self.entries.drain(..extra);
        }
    }
}

/// Removes `names` from a metadata object's `activated_tools`; true when it changed.
pub(crate) fn purge_metadata(metadata: &mut Value, names: &[String]) -> bool {
    let Some(Value::Object(at)) = metadata.get_mut("activated_tools") else {
        return false;
    };
    let before = at.len();
    at.retain(|k, _| !names.iter().any(|n| n == k));
    at.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lru_evicts_the_least_recently_used_beyond_fifty() {
        let mut s = ActivatedToolSet::default();
        for i in 0..50 {
            assert!(s.activate(&format!("mcp_s_t{i}"), i as f64));
        }
        assert!(!s.activate("mcp_s_t0", 100.0)); // touch: t0 is now the newest
        assert!(s.activate("mcp_s_new", 101.0));
        assert_eq!(s.len(), 50);
        assert!(s.contains("mcp_s_t0"));
        assert!(!s.contains("mcp_s_t1"));
        assert_eq!(s.names().next(), Some("mcp_s_t2"));
    }

    #[test]
    fn loads_by_timestamp_and_round_trips() {
        let s = ActivatedToolSet::from_json(Some(&json!({"b": 2.0, "a": 5, "c": "x"})));
        assert_eq!(s.names().collect::<Vec<_>>(), vec!["c", "b", "a"]);
        assert_eq!(s.to_json(), json!({"a": 5.0, "b": 2.0, "c": 0.0}));
        let mut s = s;
        let r = s.revision();
        assert!(s.remove_all(&["b".into(), "zz".into()]));
        assert!(s.revision() > r);
        assert!(!s.deactivate("b"));
    }

    #[test]
    fn purges_metadata_keeping_other_entries() {
        let mut m = json!({"activated_tools": {"mcp_one_ping": 1.0, "mcp_two_x": 2.0}, "title": "t"});
        assert!(purge_metadata(&mut m, &["mcp_one_ping".into()]));
        assert_eq!(m, json!({"activated_tools": {"mcp_two_x": 2.0}, "title": "t"}));
        assert!(!purge_metadata(&mut m, &["mcp_one_ping".into()]));
    }
}
