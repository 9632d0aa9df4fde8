//! Model-facing MCP tool names: the contract's `mcp_{server}_{tool}`, mapped to what
//! OpenAI-style APIs accept (`^[a-zA-Z0-9_-]{1,64}$`), with a reverse table so a call can be
//! routed back to `(server, original tool name)`. Pure; the manager owns the table.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

/// Longest function name providers accept.
pub(crate) const MAX_NAME: usize = 64;

/// Whether `name` is acceptable as a function name for every provider.
#[cfg(test)]
pub(crate) fn is_valid(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `mcp_{server}_{tool}` with every other character replaced by `_`; names over 64 bytes keep
/// a readable head plus 8 hex chars of a hash of the original pair, so they stay unique.
pub(crate) fn wrapped_name(server: &str, tool: &str) -> String {
    let raw = format!("mcp_{server}_{tool}");
    let clean: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if clean.len() <= MAX_NAME {
        clean
    } else {
        hashed(&clean, server, tool)
    }
}

fn hashed(clean: &str, server: &str, tool: &str) -> String {
    let digest = Sha256::digest(format!("{server}\0{tool}").as_bytes());
    let hex = crate::util::rand::to_hex(&digest[..4]);
    // `clean` is ASCII, so byte slicing is safe.
    format!("{}_{hex}", &clean[..MAX_NAME - 9])
}

/// Wrapped name <-> (server, original tool name), unique across all live servers.
#[derive(Debug, Default, Clone)]
pub(crate) struct NameTable {
    reverse: HashMap<String, (String, String)>,
    forward: HashMap<(String, String), String>,
}

impl NameTable {
    /// The name for `(server, tool)`, assigning one on first sight. Two originals that clean
    /// to the same name (`a.b` and `a_b`) get distinct names via the hash suffix.
    pub(crate) fn assign(&mut self, server: &str, tool: &str) -> String {
        let key = (server.to_string(), tool.to_string());
        if let Some(n) = self.forward.get(&key) {
            return n.clone();
        }
        let mut name = wrapped_name(server, tool);
        if self.reverse.contains_key(&name) {
            let clean = format!("{name}{}", "_".repeat(MAX_NAME));
            name = hashed(&clean, server, tool);
            let mut i = 2;
            while self.reverse.contains_key(&name) {
                name = format!("{}_{i}", &hashed(&clean, server, tool)[..MAX_NAME - 4]);
                i += 1;
            }
        }
        self.reverse.insert(name.clone(), key.clone());
        self.forward.insert(key, name.clone());
        name
    }

    pub(crate) fn resolve(&self, wrapped: &str) -> Option<(&str, &str)> {
        self.reverse.get(wrapped).map(|(s, t)| (s.as_str(), t.as_str()))
    }

    /// Forgets every name of `server`; returns them.
    pub(crate) fn remove_server(&mut self, server: &str) -> Vec<String> {
        let names: Vec<String> =
            self.reverse.iter().filter(|(_, (s, _))| s == server).map(|(n, _)| n.clone()).collect();
        for n in &names {
            if let Some(key) = self.reverse.remove(n) {
                self.forward.remove(&key);
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract_and_the_provider_pattern() {
        assert_eq!(wrapped_name("test_stdio_mcp", "say_hello"), "mcp_test_stdio_mcp_say_hello");
        assert_eq!(wrapped_name("everything", "get-sum"), "mcp_everything_get-sum");
        assert_eq!(wrapped_name("srv", "files.read v2"), "mcp_srv_files_read_v2");
        let long = wrapped_name(&"s".repeat(40), &"t".repeat(40));
        assert_eq!(long.len(), 64);
        assert!(is_valid(&long));
        assert_ne!(long, wrapped_name(&"s".repeat(40), &"t".repeat(41)));
        assert!(!is_valid(""));
        assert!(!is_valid("a.b"));
    }

    #[test]
    fn table_keeps_collisions_apart_and_reverses() {
        let mut t = NameTable::default();
        let a = t.assign("srv", "a.b");
        let b = t.assign("srv", "a_b");
        assert_eq!(a, "mcp_srv_a_b");
        assert_ne!(a, b);
        assert!(is_valid(&b));
        assert_eq!(t.resolve(&b), Some(("srv", "a_b")));
        assert_eq!(t.assign("srv", "a.b"), a);
        let other = t.assign("other", "x");
        let mut removed = t.remove_server("srv");
        removed.sort();
        let mut want = vec![a.clone(), b];
        want.sort();
        assert_eq!(removed, want);
        assert!(t.resolve(&a).is_none());
        assert_eq!(t.resolve(&other), Some(("other", "x")));
    }
}
