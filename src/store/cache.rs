//! The in-memory view of each chat the turns work on: the context records since the last
//! summary and the metadata object, cached for recently used chats (bounded) and loaded with
//! the smart-load rules on first use. Also maps records to model messages, and keeps them
//! serialised so a turn copies its context instead of rebuilding it. Used by workers, the HTTP
//! thread, consolidation, the `housekeep` thread and MCP's activation purge.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::chats::{ChatStore, Record};
use super::replay::{self, Replay};
use crate::util::sync;

/// Prefix of a consolidation summary when sent to the model (the original's "history summary").
pub(crate) const SUMMARY_MARKER: &str = "[\u{5386}\u{53f2}\u{6458}\u{8981}]";

/// Chats kept in memory, and what their records may weigh together
/// ([`crate::store::tail::weight`]); past either, the least recently used chats no turn holds
/// are dropped and reloaded from disk when used again. The count is sized for 500 clients'
/// chats in use at once (at 256 they evicted each other and every turn could reload its chat
/// from disk) without keeping every burst's chats (each costs a few KiB even when short); the
/// weight keeps a few long chats from holding more than about 16 million characters.
pub(crate) const CACHE_CHATS: usize = 640;
pub(crate) const CACHE_WEIGHT: usize = 16_000_000;

#[derive(Debug, Default)]
pub(crate) struct ChatState {
    /// Records the model context is built from (last summary first, if any): the newest that
    /// weigh at most `keep_chars` (plus a quarter of slack, so trimming is rare).
    records: Vec<Record>,
    pub(crate) metadata: Map<String, Value>,
    /// `to_messages(records)` serialised, and how many records it covers.
    wire: Option<Wire>,
    /// Characters of records kept in memory (0 = unbounded).
    keep_chars: usize,
    /// What the records weigh ([`crate::store::tail::weight`]).
    weight: usize,
    /// Characters of the records' contents (what consolidation's threshold counts).
    content_chars: usize,
}

fn content_chars(records: &[Record]) -> usize {
    records.iter().map(|r| r.content.chars().count()).sum()
}

/// The context's model messages, each serialised once, with where each group starts. A group
/// is one message, or an assistant tool-call message with its results: the unit the context
/// budget keeps or drops, so a tool call never loses its result.
#[derive(Debug, Default)]
struct Wire {
    covered: usize,
    /// Whose provider state the messages carry (`None`: nobody's).
    replay: Option<Replay>,
    messages: Vec<Box<RawValue>>,
    /// (index of its first message, characters of the comma-joined list before it) of each group.
    groups: Vec<(usize, usize)>,
    /// Characters of the messages joined by commas.
    chars: usize,
    /// The first group is the summary (always sent when the budget allows it).
    summary_head: bool,
}

impl Wire {
    fn push(&mut self, records: &[Record]) {
        for m in to_messages_for(records, self.replay.as_ref()) {
            let raw = serde_json::value::to_raw_value(&m).expect("a Value always serialises");
            if !self.messages.is_empty() {
                self.chars += 1;
            }
            if m["role"] != "tool" {
                self.groups.push((self.messages.len(), self.chars));
            }
            self.chars += raw.get().chars().count();
            self.messages.push(raw);
        }
    }
}

/// The part of a chat's context a request sends: the summary (when it fits), then the newest
/// messages that fit. Borrowed from the cached serialisation.
#[derive(Debug, Default)]
pub(crate) struct Context<'a> {
    pub(crate) summary: &'a [Box<RawValue>],
    pub(crate) rest: &'a [Box<RawValue>],
}

impl ChatState {
    #[cfg(test)]
    pub(crate) fn new(records: Vec<Record>, metadata: Map<String, Value>) -> Self {
        Self::bounded(records, metadata, 0)
    }

    /// A state that keeps at most about `keep_chars` of records in memory (0 = all).
    pub(crate) fn bounded(records: Vec<Record>, metadata: Map<String, Value>, keep_chars: usize) -> Self {
        let weight = records.iter().map(crate::store::tail::weight).sum();
        let content_chars = content_chars(&records);
        let mut st = ChatState { records, metadata, wire: None, keep_chars, weight, content_chars };
        st.trim();
        st
    }

    pub(crate) fn records(&self) -> &[Record] {
        &self.records
    }

    /// Characters of the records' contents, kept up to date so a turn's end need not count.
    pub(crate) fn content_chars(&self) -> usize {
        self.content_chars
    }

    /// Appends a persisted turn. The serialised messages grow by the new records alone when
    /// no tool step straddles the boundary (then both mappings are the same).
    pub(crate) fn extend(&mut self, new: Vec<Record>) {
        let old = self.records.len();
        let clean =
            self.records.last().is_none_or(|r| r.role != "tool_calls") && new.first().is_none_or(|r| r.role != "tool");
        self.weight += new.iter().map(crate::store::tail::weight).sum::<usize>();
        self.content_chars += content_chars(&new);
        self.records.extend(new);
        match &mut self.wire {
            Some(w) if w.covered == old && clean => {
                w.push(&self.records[old..]);
                w.covered = self.records.len();
            }
            _ => self.wire = None,
        }
        self.trim();
    }

    /// Past `keep_chars` and a quarter, drops the oldest records (never the summary) down to
    /// `keep_chars`, cutting at a user record so no tool step is split. Nothing leaves
    /// history.jsonl; the serialised form is rebuilt on next use.
    fn trim(&mut self) {
        if self.keep_chars == 0 || self.weight <= self.keep_chars + self.keep_chars / 4 {
            return;
        }
        let first = usize::from(self.records.first().is_some_and(|r| r.role == "summary"));
        let mut cut = first;
        let mut weight = self.weight;
        while cut < self.records.len() && weight > self.keep_chars {
            weight -= crate::store::tail::weight(&self.records[cut]);
            cut += 1;
        }
        while cut < self.records.len() && self.records[cut].role != "user" {
            weight -= crate::store::tail::weight(&self.records[cut]);
            cut += 1;
        }
        if cut > first {
            self.content_chars -= content_chars(&self.records[first..cut]);
            self.records.drain(first..cut);
            self.records.shrink_to(self.records.len() * 2);
            self.weight = weight;
            self.wire = None;
        }
    }

    /// Swaps in a new context (consolidation).
    pub(crate) fn replace(&mut self, records: Vec<Record>) {
        self.weight = records.iter().map(crate::store::tail::weight).sum();
        self.content_chars = content_chars(&records);
        self.records = records;
        self.wire = None;
        self.trim();
    }

    fn wire(&mut self, replay: Option<&Replay>) -> &Wire {
        let len = self.records.len();
        if self.wire.as_ref().is_none_or(|w| w.covered != len || w.replay.as_ref() != replay) {
            let mut w = Wire {
                covered: len,
                replay: replay.cloned(),
                summary_head: self.records.first().is_some_and(|r| r.role == "summary" && !r.content.is_empty()),
                ..Wire::default()
            };
            w.push(&self.records);
            self.wire = Some(w);
        }
        self.wire.as_ref().expect("just built")
    }

    /// The context as the comma-joined JSON of its model messages (empty when there are none):
    /// byte for byte what serialising [`to_messages`] gives.
    #[cfg(test)]
    pub(crate) fn messages_json(&mut self) -> String {
        let w = self.wire(None);
        w.messages.iter().map(|m| m.get()).collect::<Vec<_>>().join(",")
    }

    /// The summary and the newest groups of the context that fit in `max_chars` characters
    /// as part of a comma-joined list, commas included (`after_others`: other messages are in
    /// the list, so the context costs one comma more). Returns them, the characters they add,
    /// and whether anything of the context was left out.
    /// Stored provider state goes back for `replay`'s provider and model only.
    pub(crate) fn context(
        &mut self,
        after_others: bool,
        max_chars: usize,
        replay: Option<&Replay>,
    ) -> (Context<'_>, usize, bool) {
        let sep = usize::from(after_others);
        let w = self.wire(replay);
        if w.messages.is_empty() {
            return (Context::default(), 0, false);
        }
        if w.chars + sep <= max_chars {
            return (Context { summary: &[], rest: &w.messages }, w.chars + sep, false);
        }
        // The summary group, if it fits, then the newest groups that fit after it.
        let mut out = Context::default();
        let mut added = 0;
        let mut head_end = 0; // index of the first group not in the head
        if w.summary_head {
            let end = w.groups.get(1).map_or((w.messages.len(), w.chars), |g| (g.0, g.1 - 1));
            if end.1 + sep <= max_chars {
                out.summary = &w.messages[..end.0];
                added = end.1 + sep;
                head_end = 1;
            }
        }
        let room = max_chars - added;
        let tail_sep = usize::from(after_others || added > 0);
        // The oldest group whose suffix (plus a comma) fits in the room.
        let from = w.groups[head_end..].iter().position(|g| w.chars - g.1 + tail_sep <= room).map(|i| i + head_end);
        if let Some(i) = from {
            let (at, before) = w.groups[i];
            out.rest = &w.messages[at..];
            added += w.chars - before + tail_sep;
        }
        (out, added, true)
    }

    /// [`ChatState::context`] appended to `out`, a comma-joined list.
    #[cfg(test)]
    pub(crate) fn push_context(&mut self, out: &mut String, max_chars: usize) -> (usize, bool) {
        let after_others = !out.is_empty();
        let (ctx, added, left_out) = self.context(after_others, max_chars, None);
        for m in ctx.summary.iter().chain(ctx.rest) {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(m.get());
        }
        (added, left_out)
    }
}

/// chat id -> (last use, state, its weight when last seen).
type CacheMap = HashMap<String, (Instant, Arc<Mutex<ChatState>>, usize)>;

#[derive(Default)]
struct Cached {
    map: CacheMap,
    /// Sum of the map's weights.
    weight: usize,
}

pub(crate) struct ChatCache {
    store: Arc<ChatStore>,
    inner: Mutex<Cached>,
    /// [`CACHE_CHATS`] and [`CACHE_WEIGHT`] (smaller in tests).
    max_chats: usize,
    max_weight: usize,
    /// Characters of context loaded and kept per chat (0 = all of it).
    keep_chars: usize,
}

impl ChatCache {
    #[cfg(test)]
    pub(crate) fn new(store: Arc<ChatStore>) -> Self {
        Self::bounded(store, 0)
    }

    /// A cache that loads and keeps at most about `keep_chars` of each chat's newest context
    /// (the context budget), so a chat's memory does not grow with its history.
    pub(crate) fn bounded(store: Arc<ChatStore>, keep_chars: usize) -> Self {
        ChatCache {
            store,
            inner: Mutex::new(Cached::default()),
            max_chats: CACHE_CHATS,
            max_weight: CACHE_WEIGHT,
            keep_chars,
        }
    }

    /// The per-chat bound given to [`ChatCache::bounded`] (0 = none).
    pub(crate) fn keep_chars(&self) -> usize {
        self.keep_chars
    }

    /// The chat's state, loading it from disk if it is not cached.
    pub(crate) fn get(&self, chat_id: &str) -> Arc<Mutex<ChatState>> {
        {
            let mut g = self.cached();
            let c = &mut *g;
            if let Some(e) = c.map.get_mut(chat_id) {
                e.0 = Instant::now();
                // The weight as of the last turn (a turn holding the state has it locked).
                if let Ok(st) = e.1.try_lock() {
                    c.weight = c.weight - e.2 + st.weight;
                    e.2 = st.weight;
                }
                return Arc::clone(&e.1);
            }
        }
        let loaded = match self.store.load_context_within(chat_id, self.keep_chars) {
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
        let state = ChatState::bounded(loaded, self.store.read_metadata(chat_id), self.keep_chars);
        let weight = state.weight;
        let mut g = self.cached();
        let c = &mut *g;
        // Another thread may have loaded it meanwhile: keep the first.
        let out = match c.map.get(chat_id) {
            Some(e) => Arc::clone(&e.1),
            None => {
                let state = Arc::new(Mutex::new(state));
                c.map.insert(chat_id.to_string(), (Instant::now(), Arc::clone(&state), weight));
                c.weight += weight;
                state
            }
        };
        if c.map.len() > self.max_chats || c.weight > self.max_weight {
            // The least recently used chats nobody else holds, oldest first, until both
            // bounds hold again with a sixteenth to spare: a server meeting new chats all the
            // time scans the map once per many of them, not at each.
            let (low_chats, low_weight) =
                (self.max_chats - self.max_chats / 16, self.max_weight - self.max_weight / 16);
            let mut idle: Vec<(Instant, &String, usize)> = c
                .map
                .iter()
                .filter(|(id, (_, s, _))| id.as_str() != chat_id && Arc::strong_count(s) == 1)
                .map(|(id, (t, _, w))| (*t, id, *w))
                .collect();
            idle.sort_unstable_by_key(|e| e.0);
            let (mut len, mut weight) = (c.map.len(), c.weight);
            let victims: Vec<String> = idle
                .into_iter()
                .take_while(|(_, _, w)| {
                    let over = len > low_chats || weight > low_weight;
                    (len, weight) = (len - 1, weight - w);
                    over
                })
                .map(|(_, id, _)| id.clone())
                .collect();
            for id in victims {
                if let Some((_, _, w)) = c.map.remove(&id) {
                    c.weight -= w;
                }
            }
        }
        out
    }

    fn cached(&self) -> MutexGuard<'_, Cached> {
        sync::lock(&self.inner)
    }

    /// Drops the chats unused for `idle` that no turn holds, with their remembered history
    /// tails, so a server that went quiet gives their memory back. Returns how many.
    /// Called by the housekeeping timer.
    pub(crate) fn expire_idle(&self, idle: Duration) -> usize {
        let mut expired = Vec::new();
        {
            let mut g = self.cached();
            let c = &mut *g;
            let mut freed = 0;
            c.map.retain(|id, (used, state, weight)| {
                let keep = used.elapsed() < idle || Arc::strong_count(state) > 1;
                if !keep {
                    expired.push(id.clone());
                    freed += *weight;
                }
                keep
            });
            c.weight -= freed;
            if !expired.is_empty() {
                c.map.shrink_to_fit();
            }
        }
        for id in &expired {
            self.store.forget_tail(id);
        }
        expired.len()
    }

    /// The cached state, if any (rename updates it without loading).
    pub(crate) fn peek(&self, chat_id: &str) -> Option<Arc<Mutex<ChatState>>> {
        self.cached().map.get(chat_id).map(|e| Arc::clone(&e.1))
    }

    /// Drops a chat from memory (deleted chats must not resurrect old context).
    pub(crate) fn forget(&self, chat_id: &str) {
        let mut c = self.cached();
        if let Some((_, _, w)) = c.map.remove(chat_id) {
            c.weight -= w;
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.cached().map.len()
    }

    /// What the cached chats weighed when last seen.
    #[cfg(test)]
    pub(crate) fn weight(&self) -> usize {
        self.cached().weight
    }
}

/// Maps context records to model messages (docs/storage.md §3.1 "Mapping"), without any
/// provider state.
#[cfg(test)]
pub(crate) fn to_messages(records: &[Record]) -> Vec<Value> {
    to_messages_for(records, None)
}

/// [`to_messages`] for a request to `replay`'s provider and model: assistant messages carry
/// the state that provider and model stored on them (`store::replay`).
pub(crate) fn to_messages_for(records: &[Record], replay: Option<&Replay>) -> Vec<Value> {
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        match r.role.as_str() {
            "user" if !r.content.is_empty() => out.push(json!({"role": r.role, "content": r.content})),
            "assistant" if !r.content.is_empty() => {
                let mut m = json!({"role": r.role, "content": r.content});
                replay::apply(&mut m, r.provider_state.as_ref(), replay);
                out.push(m);
            }
            "tool_calls" => {
                if let Some(calls) = r.tool_calls.as_ref().and_then(Value::as_array).filter(|a| !a.is_empty()) {
                    out.push(assistant_calls(&r.content, calls, r.provider_state.as_ref(), replay));
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

/// The assistant message of a tool step: the one form both a turn's own tool loop and later
/// requests send, so consecutive requests extend each other byte for byte.
pub(crate) fn assistant_calls(content: &str, calls: &[Value], state: Option<&Value>, replay: Option<&Replay>) -> Value {
    let mut m = json!({"role": "assistant", "content": content, "tool_calls": calls});
    replay::apply(&mut m, state, replay);
    m
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
    fn the_cache_is_bounded_by_weight_and_count_and_keeps_held_chats() {
        let dir = std::env::temp_dir().join(format!("cc-cache-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Arc::new(ChatStore::new(&dir));
        let mut cache = ChatCache::new(Arc::clone(&store));
        let one = crate::store::tail::weight(&rec("user", &"x".repeat(1_000)));
        (cache.max_chats, cache.max_weight) = (4, 3 * one + one / 2);
        for id in ["a", "b", "c", "d", "e"] {
            store.append(id, &mut [rec("user", &"x".repeat(1_000))]).unwrap();
        }
        let held = cache.get("a");
        for id in ["b", "c"] {
            cache.get(id);
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!((cache.len(), cache.weight()), (3, 3 * one));
        // Past the weight: the oldest chat nobody holds goes (b), the held one stays.
        cache.get("d");
        assert!(cache.peek("a").is_some() && cache.peek("b").is_none(), "a is held, b was the oldest idle");
        assert_eq!(cache.weight(), 3 * one);
        // Light chats: the count bounds them.
        (cache.max_chats, cache.max_weight) = (2, usize::MAX);
        cache.get("e");
        assert_eq!(cache.len(), 2);
        assert!(cache.peek("a").is_some() && cache.peek("e").is_some());
        cache.forget("e");
        assert_eq!(cache.weight(), one);
        drop(held);
        assert_eq!(cache.expire_idle(Duration::ZERO), 1);
        assert_eq!((cache.len(), cache.weight()), (0, 0));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn eviction_goes_a_sixteenth_below_the_bound_oldest_first() {
        let dir = std::env::temp_dir().join(format!("cc-cache-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Arc::new(ChatStore::new(&dir));
        let mut cache = ChatCache::new(Arc::clone(&store));
        cache.max_chats = 32;
        let ids: Vec<String> = (0..40).map(|i| format!("c{i:02}")).collect();
        for id in &ids[..32] {
            cache.get(id);
        }
        assert_eq!(cache.len(), 32, "at the bound nothing goes");
        std::thread::sleep(Duration::from_millis(2));
        cache.get(&ids[0]); // used again: no longer the oldest
        cache.get(&ids[32]);
        assert_eq!(cache.len(), 30, "one over: down to 32 - 32/16");
        assert!(cache.peek(&ids[0]).is_some() && cache.peek(&ids[32]).is_some());
        assert_eq!((1..32).filter(|i| cache.peek(&ids[*i]).is_none()).count(), 3);
        // The next two fit in the slack without a scan.
        cache.get(&ids[33]);
        cache.get(&ids[34]);
        assert_eq!(cache.len(), 32);
        std::fs::remove_dir_all(&dir).ok();
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
        assert_eq!(sync::lock(&again).messages_json(), r#"{"content":"hi","role":"user"}"#);
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

#[cfg(test)]
mod budget_tests {
    use super::*;

    fn rec(role: &str, content: &str) -> Record {
        Record::new(role, content)
    }

    /// Over the budget, the summary and the newest whole groups are sent; a tool call keeps its result.
    #[test]
    fn push_context_keeps_summary_and_whole_tool_steps() {
        let mut tc = rec("tool_calls", "[TOOL_CALLS: a]");
        tc.tool_calls = Some(json!([{"id": "1", "function": {"name": "a"}}]));
        let mut tool = rec("tool", &"r".repeat(300));
        tool.tool_call_id = Some("1".into());
        let mut recs = vec![rec("summary", "S")];
        for i in 0..20 {
            recs.push(rec("user", &format!("question {i} {}", "q".repeat(200))));
            recs.push(tc.clone());
            recs.push(tool.clone());
            recs.push(rec("assistant", &format!("answer {i}")));
        }
        let mut st = ChatState::new(recs, Map::new());
        let full = st.messages_json().to_string();
        for max in [0, 10, 100, 600, 1_000, 3_000, full.chars().count() - 1] {
            let mut out = String::from("{\"role\":\"system\"}");
            let before = out.chars().count();
            let (added, left_out) = st.push_context(&mut out, max);
            assert!(left_out);
            assert_eq!(out.chars().count() - before, added);
            assert!(added <= max, "{added} > {max}");
            let v: Value = serde_json::from_str(&format!("[{out}]")).unwrap();
            let msgs = v.as_array().unwrap();
            if max >= 100 {
                assert!(msgs[1]["content"].as_str().unwrap().ends_with(" S"), "summary first");
            }
            for (i, m) in msgs.iter().enumerate() {
                if m["role"] == "tool" {
                    assert!(msgs[i - 1].get("tool_calls").is_some(), "a result follows its call");
                }
                if m.get("tool_calls").is_some() {
                    assert_eq!(msgs.get(i + 1).map(|n| &n["role"]), Some(&json!("tool")));
                }
            }
        }
        let mut out = String::new();
        assert_eq!(st.push_context(&mut out, usize::MAX), (full.chars().count(), false));
        assert_eq!(out, full);
    }

    #[test]
    fn bounded_state_keeps_its_records_near_the_bound() {
        let mut st = ChatState::bounded(vec![rec("summary", "S")], Map::new(), 2_000);
        for i in 0..500 {
            st.extend(vec![rec("user", &format!("u{i} {}", "x".repeat(100))), rec("assistant", "ok")]);
            let w: usize = st.records().iter().map(crate::store::tail::weight).sum();
            assert!(w <= 2_000 + 500 + 200, "weight {w}");
            assert_eq!(st.records()[0].role, "summary");
            assert!(st.records().len() < 2 || st.records()[1].role == "user");
            assert_eq!(st.content_chars(), content_chars(st.records()), "after {i} turns");
        }
        assert!(st.records().last().unwrap().content == "ok");
        st.replace(vec![rec("summary", "短的"), rec("user", "q")]);
        assert_eq!(st.content_chars(), 3);
        let fresh = to_messages(st.records()).iter().map(Value::to_string).collect::<Vec<_>>().join(",");
        assert_eq!(st.messages_json(), fresh);
    }
}
