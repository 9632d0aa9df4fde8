//! The agent's in-memory view of each chat: the context records since the last summary and
//! the metadata object, cached for recently used chats (bounded) and loaded with the smart-load
//! rules on first use. Also maps records to model messages, and keeps them serialised so a turn
//! copies its context instead of rebuilding it. Used by workers and the HTTP thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::prompt::SUMMARY_MARKER;
use crate::store::chats::{ChatStore, Record};

/// Chats kept in memory; older idle ones are reloaded from disk when used again.
pub const CACHE_CHATS: usize = 256;

#[derive(Debug, Default)]
pub struct ChatState {
    /// Records the model context is built from (last summary first, if any).
    records: Vec<Record>,
    pub metadata: Map<String, Value>,
    /// `to_messages(records)` serialised and comma-joined, and how many records it covers.
    wire: Option<(usize, String)>,
}

impl ChatState {
    pub fn new(records: Vec<Record>, metadata: Map<String, Value>) -> Self {
        ChatState { records, metadata, wire: None }
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Appends a persisted turn. The serialised messages grow by the new records alone when
    /// no tool step straddles the boundary (then both mappings are the same).
    pub fn extend(&mut self, new: Vec<Record>) {
        let old = self.records.len();
        let clean =
            self.records.last().is_none_or(|r| r.role != "tool_calls") && new.first().is_none_or(|r| r.role != "tool");
        self.records.extend(new);
        match &mut self.wire {
            Some((covered, json)) if *covered == old && clean => {
                push_messages(json, &self.records[old..]);
                *covered = self.records.len();
            }
            _ => self.wire = None,
        }
    }

    /// Swaps in a new context (consolidation).
    pub fn replace(&mut self, records: Vec<Record>) {
        self.records = records;
        self.wire = None;
    }

    /// The context as the comma-joined JSON of its model messages (empty when there are none):
    /// byte for byte what serialising [`to_messages`] gives, built once and then extended.
    pub fn messages_json(&mut self) -> &str {
        let len = self.records.len();
        if self.wire.as_ref().is_none_or(|(covered, _)| *covered != len) {
            let mut json = String::new();
            push_messages(&mut json, &self.records);
            self.wire = Some((len, json));
        }
        self.wire.as_ref().map_or("", |(_, json)| json.as_str())
    }
}

/// Appends the messages of `records` to a comma-joined JSON list.
fn push_messages(json: &mut String, records: &[Record]) {
    for m in to_messages(records) {
        if !json.is_empty() {
            json.push(',');
        }
        json.push_str(&m.to_string());
    }
}

/// chat id -> (last use, state).
type CacheMap = HashMap<String, (Instant, Arc<Mutex<ChatState>>)>;

pub struct ChatCache {
    store: Arc<ChatStore>,
    inner: Mutex<CacheMap>,
}

pub fn lock(state: &Mutex<ChatState>) -> MutexGuard<'_, ChatState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl ChatCache {
    pub fn new(store: Arc<ChatStore>) -> Self {
        ChatCache { store, inner: Mutex::new(HashMap::new()) }
    }

    /// The chat's state, loading it from disk if it is not cached.
    pub fn get(&self, chat_id: &str) -> Arc<Mutex<ChatState>> {
        if let Some(e) = self.map().get_mut(chat_id) {
            e.0 = Instant::now();
            return Arc::clone(&e.1);
        }
        let loaded = match self.store.load_context(chat_id) {
            Ok(h) => {
                if h.skipped_lines > 0 {
                    log::warn!(
                        "event=history.lines_skipped chat_id={chat_id} skipped={} torn_tail={}",
                        h.skipped_lines,
                        h.torn_tail
                    );
                }
                h.records
            }
            Err(e) => {
                log::error!("event=history.load_failed chat_id={chat_id} error_kind={:?}", e.kind());
                Vec::new()
            }
        };
        let state = Arc::new(Mutex::new(ChatState::new(loaded, self.store.read_metadata(chat_id))));
        let mut g = self.map();
        // Another thread may have loaded it meanwhile: keep the first.
        let entry = g.entry(chat_id.to_string()).or_insert((Instant::now(), state));
        let out = Arc::clone(&entry.1);
        if g.len() > CACHE_CHATS {
            // Evict the least recently used chat nobody else holds.
            if let Some(victim) = g
                .iter()
                .filter(|(id, (_, s))| id.as_str() != chat_id && Arc::strong_count(s) == 1)
                .min_by_key(|(_, (t, _))| *t)
                .map(|(id, _)| id.clone())
            {
                g.remove(&victim);
            }
        }
        out
    }

    fn map(&self) -> MutexGuard<'_, CacheMap> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the chats unused for `idle` that no turn holds, with their remembered history
    /// tails, so a server that went quiet gives their memory back. Returns how many.
    /// Called by the housekeeping timer.
    pub fn expire_idle(&self, idle: Duration) -> usize {
        let mut expired = Vec::new();
        {
            let mut map = self.map();
            map.retain(|id, (used, state)| {
                let keep = used.elapsed() < idle || Arc::strong_count(state) > 1;
                if !keep {
                    expired.push(id.clone());
                }
                keep
            });
            if !expired.is_empty() {
                map.shrink_to_fit();
            }
        }
        for id in &expired {
            self.store.forget_tail(id);
        }
        expired.len()
    }

    /// The cached state, if any (rename updates it without loading).
    pub fn peek(&self, chat_id: &str) -> Option<Arc<Mutex<ChatState>>> {
        self.map().get(chat_id).map(|e| Arc::clone(&e.1))
    }

    /// Drops a chat from memory (deleted chats must not resurrect old context).
    pub fn forget(&self, chat_id: &str) {
        self.map().remove(chat_id);
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Maps context records to model messages (storage.md §3.1 "Mapping").
pub fn to_messages(records: &[Record]) -> Vec<Value> {
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        match r.role.as_str() {
            "user" | "assistant" if !r.content.is_empty() => out.push(json!({"role": r.role, "content": r.content})),
            "tool_calls" => {
                if let Some(calls) = r.tool_calls.as_ref().and_then(Value::as_array).filter(|a| !a.is_empty()) {
                    out.push(json!({"role": "assistant", "content": r.content, "tool_calls": calls}));
                }
            }
            "tool" => {
                if let Some(id) = r.tool_call_id.as_deref().filter(|id| !id.is_empty()) {
                    if !r.content.is_empty() {
                        let mut m = json!({"role": "tool", "tool_call_id": id, "content": r.content});
                        if let Some(n) = &r.name {
                            m["name"] = Value::String(n.clone());
                        }
                        out.push(m);
                    }
                }
            }
            "summary" if !r.content.is_empty() => {
                out.push(json!({"role": "assistant", "content": format!("{SUMMARY_MARKER} {}", r.content)}))
            }
            _ => {}
        }
    }
    drop_orphans(out)
}

/// Keeps the tool protocol valid for providers: an assistant `tool_calls` message must be
/// followed by a tool message for each of its ids, and a tool message needs its call.
fn drop_orphans(msgs: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(msgs.len());
    let mut i = 0;
    while i < msgs.len() {
        let m = &msgs[i];
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            let ids: Vec<&str> = calls.iter().filter_map(|c| c.get("id").and_then(Value::as_str)).collect();
            let mut j = i + 1;
            let mut results = Vec::new();
            while j < msgs.len() && msgs[j]["role"] == "tool" {
                results.push(msgs[j].clone());
                j += 1;
            }
            // Results for other ids are orphans and dropped; the step needs one result per id.
            results.retain(|r| ids.iter().any(|id| r["tool_call_id"] == *id));
            let complete = !ids.is_empty() && ids.iter().all(|id| results.iter().any(|r| r["tool_call_id"] == *id));
            if complete {
                out.push(m.clone());
                out.extend(results);
            }
            i = j;
            continue;
        }
        if m["role"] != "tool" {
            out.push(m.clone());
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(role: &str, content: &str) -> Record {
        Record::new(role, content)
    }

    #[test]
    fn idle_chats_expire_with_their_tails_unless_a_turn_holds_them() {
        let dir = std::env::temp_dir().join(format!("cc-cache-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Arc::new(ChatStore::new(&dir));
        let cache = ChatCache::new(Arc::clone(&store));
        for id in ["a", "b", "c"] {
            store.append(id, &mut [rec("user", "hi")]).unwrap();
            cache.get(id);
        }
        assert_eq!((cache.len(), store.remembered_tails()), (3, 3));
        let held = cache.get("b");
        assert_eq!(cache.expire_idle(Duration::from_secs(60)), 0, "nothing is idle yet");
        std::thread::sleep(Duration::from_millis(30));
        cache.get("c");
        assert_eq!(cache.expire_idle(Duration::from_millis(20)), 1, "only a: b is held, c was just used");
        assert!(cache.peek("a").is_none() && cache.peek("b").is_some() && cache.peek("c").is_some());
        assert_eq!(store.remembered_tails(), 2);
        drop(held);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(cache.expire_idle(Duration::from_millis(20)), 2);
        assert_eq!((cache.len(), store.remembered_tails()), (0, 0));
        // An expired chat comes back from disk intact.
        let again = cache.get("a");
        assert_eq!(lock(&again).messages_json(), r#"{"content":"hi","role":"user"}"#);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn maps_roles_and_drops_orphans() {
        let mut tc = rec("tool_calls", "[TOOL_CALLS: save_memory]");
        tc.tool_calls =
            Some(json!([{"id": "c1", "type": "function", "function": {"name": "save_memory", "arguments": "{}"}}]));
        let mut t = rec("tool", "Saved");
        t.tool_call_id = Some("c1".into());
        t.name = Some("save_memory".into());
        let mut orphan = rec("tool", "x");
        orphan.tool_call_id = Some("zz".into());
        let msgs = to_messages(&[
            rec("summary", "S"),
            rec("user", "hi"),
            rec("assistant", ""),
            tc,
            t,
            orphan,
            rec("assistant", "done"),
        ]);
        let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["assistant", "user", "assistant", "tool", "assistant"]);
        assert_eq!(msgs[0]["content"], format!("{SUMMARY_MARKER} S"));
        assert_eq!(msgs[3]["name"], "save_memory");
    }

    /// The cached serialisation equals a fresh one after every kind of change.
    #[test]
    fn messages_json_tracks_extend_and_replace() {
        let check = |st: &mut ChatState| {
            let fresh = to_messages(st.records()).iter().map(Value::to_string).collect::<Vec<_>>().join(",");
            assert_eq!(st.messages_json(), fresh);
        };
        let mut tc = rec("tool_calls", "[TOOL_CALLS: a]");
        tc.tool_calls = Some(json!([{"id": "1", "function": {"name": "a"}}]));
        let mut tool = rec("tool", "r");
        tool.tool_call_id = Some("1".into());
        let mut st = ChatState::new(vec![rec("summary", "S"), rec("user", "u")], Map::new());
        check(&mut st);
        st.extend(vec![tc.clone(), tool.clone(), rec("assistant", "a")]);
        check(&mut st);
        // A step split across two appends is only complete when both are mapped together.
        st.extend(vec![rec("user", "v"), tc]);
        check(&mut st);
        st.extend(vec![tool, rec("assistant", "b")]);
        check(&mut st);
        assert!(st.messages_json().contains(r#""content":"b""#));
        st.replace(vec![rec("user", "only")]);
        assert_eq!(st.messages_json(), r#"{"content":"only","role":"user"}"#);
        st.replace(Vec::new());
        assert_eq!(st.messages_json(), "");
    }

    #[test]
    fn incomplete_tool_step_is_dropped() {
        let mut tc = rec("tool_calls", "[TOOL_CALLS: a, b]");
        tc.tool_calls = Some(json!([{"id": "1", "function": {"name": "a"}}, {"id": "2", "function": {"name": "b"}}]));
        let mut t = rec("tool", "r");
        t.tool_call_id = Some("1".into());
        let msgs = to_messages(&[rec("user", "u"), tc, t, rec("assistant", "a")]);
        assert_eq!(msgs.len(), 2);
    }
}
