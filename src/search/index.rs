//! The in-memory inverted index over every chat (docs/search.md §3): one document per history
//! record (and one per chat title), postings of term frequencies, BM25 with a share of each
//! record's neighbours' scores, and the index file's binary form. Plain data: the
//! [`super::Search`] service holds it behind a lock; the indexer thread writes it, queries read it.

use std::collections::HashMap;

use super::tokens::Token;

/// "No document" in a neighbour link.
pub(crate) const NONE: u32 = u32::MAX;

/// What a document holds: a history record of one of these roles, or a chat's title.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    User = 0,
    Assistant = 1,
    ToolCalls = 2,
    Tool = 3,
    Title = 4,
}

impl Role {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolCalls => "tool_calls",
            Role::Tool => "tool",
            Role::Title => "title",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool_calls" => Role::ToolCalls,
            "tool" => Role::Tool,
            "title" => Role::Title,
            _ => return None,
        })
    }

    fn from_u8(b: u8) -> Option<Role> {
        [Role::User, Role::Assistant, Role::ToolCalls, Role::Tool, Role::Title].get(usize::from(b)).copied()
    }
}

/// One indexed record.
#[derive(Debug, Clone)]
pub(crate) struct Doc {
    pub(crate) chat: u32,
    pub(crate) cursor: u64,
    /// Where the record's line sits in history.jsonl (snippets and phrases read it back).
    pub(crate) offset: u64,
    pub(crate) line_len: u32,
    /// Tokens in the document.
    pub(crate) len: u32,
    pub(crate) role: Role,
    /// The timestamp as a sortable key ([`super::stamp_key`]).
    pub(crate) stamp: u64,
    /// The chat's record before and after this one.
    pub(crate) prev: u32,
    pub(crate) next: u32,
    pub(crate) alive: bool,
}

/// One indexed chat.
#[derive(Debug, Clone)]
pub(crate) struct Chat {
    pub(crate) id: String,
    pub(crate) title: String,
    /// history.jsonl's length and modification time (ns) when it was last indexed: another
    /// value at start-up means the file changed behind the index.
    pub(crate) file_len: u64,
    pub(crate) mtime: i64,
    pub(crate) last_doc: u32,
    pub(crate) title_doc: u32,
    pub(crate) alive: bool,
}

/// The ranking's free parameters (docs/search.md §4; chosen with `cashcode eval locomo`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub k1: f32,
    pub b: f32,
    /// Share of the better neighbour's score a record gets.
    pub neighbour: f32,
}

impl Default for Params {
    fn default() -> Self {
        Params { k1: 1.2, b: 0.5, neighbour: 0.5 }
    }
}

/// Filters a query applies before ranking.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub(crate) chat: Option<u32>,
    pub(crate) roles: Option<Vec<Role>>,
    pub(crate) from: Option<u64>,
    pub(crate) to: Option<u64>,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Index {
    pub(crate) docs: Vec<Doc>,
    pub(crate) chats: Vec<Chat>,
    pub(crate) chat_ids: HashMap<String, u32>,
    pub(crate) postings: HashMap<String, Vec<(u32, u32)>>,
    live_docs: u64,
    live_len: u64,
    dead_docs: u64,
}

impl Index {
    pub(crate) fn live_docs(&self) -> u64 {
        self.live_docs
    }

    /// The chat's slot, created empty when new (or revived after a delete).
    pub(crate) fn chat_slot(&mut self, id: &str) -> u32 {
        if let Some(&c) = self.chat_ids.get(id) {
            self.chats[c as usize].alive = true;
            return c;
        }
        let c = self.chats.len() as u32;
        self.chats.push(Chat {
            id: id.to_string(),
            title: String::new(),
            file_len: 0,
            mtime: 0,
            last_doc: NONE,
            title_doc: NONE,
            alive: true,
        });
        self.chat_ids.insert(id.to_string(), c);
        c
    }

    /// Adds a record (or title) document; records link to the chat's previous record.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        chat: u32,
        role: Role,
        cursor: u64,
        offset: u64,
        line_len: u32,
        stamp: u64,
        tokens: &[Token],
    ) -> u32 {
        let id = self.docs.len() as u32;
        let mut tf: HashMap<&str, u32> = HashMap::new();
        for t in tokens {
            *tf.entry(t.key.as_str()).or_default() += 1;
        }
        for (k, n) in tf {
            match self.postings.get_mut(k) {
                Some(list) => list.push((id, n)),
                None => {
                    self.postings.insert(k.to_string(), vec![(id, n)]);
                }
            }
        }
        let c = &mut self.chats[chat as usize];
        let prev = if role == Role::Title { NONE } else { c.last_doc };
        if role == Role::Title {
            c.title_doc = id;
        } else {
            c.last_doc = id;
        }
        if prev != NONE {
            self.docs[prev as usize].next = id;
        }
        let len = tokens.len() as u32;
        self.docs.push(Doc { chat, cursor, offset, line_len, len, role, stamp, prev, next: NONE, alive: true });
        self.live_docs += 1;
        self.live_len += u64::from(len);
        id
    }

    fn kill(&mut self, d: u32) {
        let doc = &mut self.docs[d as usize];
        if doc.alive {
            doc.alive = false;
            self.live_docs -= 1;
            self.live_len -= u64::from(doc.len);
            self.dead_docs += 1;
        }
    }

    /// Takes the chat's title document out.
    pub(crate) fn drop_title(&mut self, chat: u32) {
        let t = std::mem::replace(&mut self.chats[chat as usize].title_doc, NONE);
        if t != NONE {
            self.kill(t);
        }
    }

    /// Takes every document of the chat out (its records and title); the slot stays for a
    /// re-index.
    pub(crate) fn clear_chat(&mut self, chat: u32) {
        self.drop_title(chat);
        let mut d = std::mem::replace(&mut self.chats[chat as usize].last_doc, NONE);
        // A damaged chain ends at the first document already taken out.
        while d != NONE && self.docs[d as usize].alive {
            let prev = self.docs[d as usize].prev;
            self.kill(d);
            d = prev;
        }
        let c = &mut self.chats[chat as usize];
        c.file_len = 0;
        c.mtime = 0;
    }

    pub(crate) fn remove_chat(&mut self, chat: u32) {
        self.clear_chat(chat);
        self.chats[chat as usize].alive = false;
    }

    /// Whether dead documents are worth a compaction (a quarter of all, and some).
    pub(crate) fn wants_compaction(&self) -> bool {
        self.dead_docs > 1024 && self.dead_docs * 4 > self.docs.len() as u64
    }

    /// Drops dead documents and dead chats, renumbering the rest.
    pub(crate) fn compact(&mut self) {
        if self.dead_docs == 0 && self.chats.iter().all(|c| c.alive) {
            return;
        }
        let mut chat_map = vec![NONE; self.chats.len()];
        let mut chats = Vec::new();
        for (i, c) in self.chats.iter().enumerate() {
            if c.alive {
                chat_map[i] = chats.len() as u32;
                chats.push(c.clone());
            }
        }
        let mut doc_map = vec![NONE; self.docs.len()];
        let mut docs = Vec::with_capacity(self.live_docs as usize);
        for (i, d) in self.docs.iter().enumerate() {
            if d.alive && chat_map[d.chat as usize] != NONE {
                doc_map[i] = docs.len() as u32;
                let mut d = d.clone();
                d.chat = chat_map[d.chat as usize];
                docs.push(d);
            }
        }
        let remap = |d: u32| if d == NONE { NONE } else { doc_map[d as usize] };
        for d in &mut docs {
            d.prev = remap(d.prev);
            d.next = remap(d.next);
        }
        for c in &mut chats {
            c.last_doc = remap(c.last_doc);
            c.title_doc = remap(c.title_doc);
        }
        self.postings.retain(|_, list| {
            list.retain_mut(|(d, _)| {
                *d = doc_map[*d as usize];
                *d != NONE
            });
            list.shrink_to_fit();
            !list.is_empty()
        });
        self.chat_ids = chats.iter().enumerate().map(|(i, c)| (c.id.clone(), i as u32)).collect();
        self.docs = docs;
        self.chats = chats;
        self.dead_docs = 0;
        self.live_docs = self.docs.len() as u64;
        self.live_len = self.docs.iter().map(|d| u64::from(d.len)).sum();
    }

    fn passes(&self, d: &Doc, f: &Filter) -> bool {
        d.alive
            && f.chat.is_none_or(|c| c == d.chat)
            && f.roles.as_ref().is_none_or(|r| r.contains(&d.role))
            && f.from.is_none_or(|from| d.role == Role::Title || d.stamp >= from)
            && f.to.is_none_or(|to| d.role == Role::Title || d.stamp <= to)
    }

    /// The `k` best matching documents, best first: BM25 over the query's keys (each counted
    /// once), plus `neighbour` times the better of its two neighbours' BM25, so a record that
    /// answers in the context of the one before it is found from either. Ties: newer first.
    /// Scores live in dense arrays (one slot per document) and only the best `k` are sorted.
    pub(crate) fn rank(&self, keys: &[String], filter: &Filter, p: Params, k: usize) -> Vec<(u32, f32)> {
        let n = self.live_docs.max(1) as f32;
        let avgdl = (self.live_len as f32 / n).max(1.0);
        let mut base = vec![0f32; self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for key in keys {
            if seen.contains(&key.as_str()) {
                continue;
            }
            seen.push(key);
            let Some(list) = self.postings.get(key) else { continue };
            let df = if self.dead_docs == 0 {
                list.len()
            } else {
                list.iter().filter(|(d, _)| self.docs[*d as usize].alive).count()
            } as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln().max(0.0);
            for &(d, tf) in list {
                let doc = &self.docs[d as usize];
                if !doc.alive {
                    continue;
                }
                let tf = tf as f32;
                let part = tf * (p.k1 + 1.0) / (tf + p.k1 * (1.0 - p.b + p.b * doc.len as f32 / avgdl));
                let slot = &mut base[d as usize];
                if *slot == 0.0 {
                    touched.push(d);
                }
                *slot += idf * part;
            }
        }
        let score = |d: u32| if d == NONE { 0.0 } else { base[d as usize] };
        let mut done = vec![false; self.docs.len()];
        let mut out: Vec<(u32, f32)> = Vec::with_capacity(touched.len() * 2);
        let mut consider = |d: u32, out: &mut Vec<(u32, f32)>| {
            if d == NONE || std::mem::replace(&mut done[d as usize], true) {
                return;
            }
            let doc = &self.docs[d as usize];
            if !self.passes(doc, filter) {
                return;
            }
            let s = score(d) + p.neighbour * score(doc.prev).max(score(doc.next));
            if s > 0.0 {
                out.push((d, s));
            }
        };
        for &d in &touched {
            consider(d, &mut out);
            if p.neighbour > 0.0 {
                let doc = &self.docs[d as usize];
                consider(doc.prev, &mut out);
                consider(doc.next, &mut out);
            }
        }
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0));
        if out.len() > k {
            out.select_nth_unstable_by(k, order);
            out.truncate(k);
        }
        out.sort_by(order);
        out
    }

    /// The index file's body (docs/search.md §5): compact first, then chats, documents and
    /// postings as LEB128 integers, document ids delta-coded.
    pub(crate) fn encode(&mut self) -> Vec<u8> {
        self.compact();
        let mut w = Vec::with_capacity(self.docs.len() * 64);
        put(&mut w, self.chats.len() as u64);
        for c in &self.chats {
            put_str(&mut w, &c.id);
            put_str(&mut w, &c.title);
            put(&mut w, c.file_len);
            put(&mut w, c.mtime as u64);
            put(&mut w, u64::from(c.last_doc));
            put(&mut w, u64::from(c.title_doc));
        }
        put(&mut w, self.docs.len() as u64);
        for d in &self.docs {
            put(&mut w, u64::from(d.chat));
            put(&mut w, d.cursor);
            put(&mut w, d.offset);
            put(&mut w, u64::from(d.line_len));
            put(&mut w, u64::from(d.len));
            w.push(d.role as u8);
            put(&mut w, d.stamp);
            put(&mut w, u64::from(d.prev));
            put(&mut w, u64::from(d.next));
        }
        put(&mut w, self.postings.len() as u64);
        for (k, list) in &self.postings {
            put_str(&mut w, k);
            put(&mut w, list.len() as u64);
            let mut last = 0u32;
            for &(d, tf) in list {
                put(&mut w, u64::from(d - last));
                put(&mut w, u64::from(tf));
                last = d;
            }
        }
        w
    }

    /// Reads what [`Index::encode`] wrote; `None` on anything out of place (the caller rebuilds).
    pub(crate) fn decode(bytes: &[u8]) -> Option<Index> {
        let mut r = Reader { b: bytes, at: 0 };
        let mut ix = Index::default();
        let nchats = r.count(bytes.len())?;
        for i in 0..nchats {
            let id = r.string()?;
            let title = r.string()?;
            let file_len = r.int()?;
            let mtime = r.int()? as i64;
            let last_doc = r.u32()?;
            let title_doc = r.u32()?;
            ix.chat_ids.insert(id.clone(), i as u32);
            ix.chats.push(Chat { id, title, file_len, mtime, last_doc, title_doc, alive: true });
        }
        let ndocs = r.count(bytes.len())?;
        for _ in 0..ndocs {
            let chat = r.u32()?;
            let cursor = r.int()?;
            let offset = r.int()?;
            let line_len = r.u32()?;
            let len = r.u32()?;
            let role = Role::from_u8(r.byte()?)?;
            let stamp = r.int()?;
            let prev = r.u32()?;
            let next = r.u32()?;
            if chat as usize >= nchats {
                return None;
            }
            ix.live_len += u64::from(len);
            ix.docs.push(Doc { chat, cursor, offset, line_len, len, role, stamp, prev, next, alive: true });
        }
        ix.live_docs = ix.docs.len() as u64;
        let link_ok = |d: u32| d == NONE || (d as usize) < ndocs;
        if !ix.docs.iter().all(|d| link_ok(d.prev) && link_ok(d.next))
            || !ix.chats.iter().all(|c| link_ok(c.last_doc) && link_ok(c.title_doc))
        {
            return None;
        }
        let nterms = r.count(bytes.len())?;
        for _ in 0..nterms {
            let k = r.string()?;
            let n = r.count(bytes.len())?;
            let mut list = Vec::with_capacity(n);
            let mut last = 0u64;
            for _ in 0..n {
                last += r.int()?;
                let tf = r.u32()?;
                if last >= ndocs as u64 {
                    return None;
                }
                list.push((last as u32, tf));
            }
            ix.postings.insert(k, list);
        }
        (r.at == bytes.len()).then_some(ix)
    }
}

fn put(w: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            w.push(byte);
            return;
        }
        w.push(byte | 0x80);
    }
}

fn put_str(w: &mut Vec<u8>, s: &str) {
    put(w, s.len() as u64);
    w.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.b.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn int(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.int()?).ok()
    }

    /// A count that cannot exceed the bytes left (each item takes at least one byte).
    fn count(&mut self, total: usize) -> Option<usize> {
        let n = usize::try_from(self.int()?).ok()?;
        (n <= total.saturating_sub(self.at)).then_some(n)
    }

    fn string(&mut self) -> Option<String> {
        let n = self.count(self.b.len())?;
        let s = std::str::from_utf8(self.b.get(self.at..self.at + n)?).ok()?.to_string();
        self.at += n;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tokens::tokens;
    use super::*;

    fn index(texts: &[(&str, &str)]) -> Index {
        let mut ix = Index::default();
        for (i, (chat, text)) in texts.iter().enumerate() {
            let c = ix.chat_slot(chat);
            ix.add(c, Role::User, i as u64 + 1, 0, 0, 0, &tokens(text));
        }
        ix
    }

    fn keys(q: &str) -> Vec<String> {
        tokens(q).into_iter().map(|t| t.key).collect()
    }

    #[test]
    fn bm25_prefers_rare_terms_and_short_documents() {
        let ix = index(&[
            ("a", "tea tea tea with milk and a long story about nothing in particular at all"),
            ("a", "green tea"),
            ("a", "coffee"),
            ("b", "milk"),
        ]);
        let p = Params { neighbour: 0.0, ..Params::default() };
        let hits = ix.rank(&keys("green tea"), &Filter::default(), p, 10);
        assert_eq!(hits[0].0, 1, "{hits:?}");
        assert_eq!(hits.len(), 2);
        let hits = ix.rank(&keys("milk"), &Filter::default(), p, 10);
        assert_eq!(hits[0].0, 3, "the short document first: {hits:?}");
        // Filters.
        let only_a = Filter { chat: ix.chat_ids.get("a").copied(), ..Filter::default() };
        assert_eq!(ix.rank(&keys("milk"), &only_a, p, 10).iter().map(|h| h.0).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn neighbours_lend_part_of_their_score() {
        let ix = index(&[("a", "where did you go on holiday"), ("a", "we went to Lisbon"), ("b", "unrelated")]);
        let p = Params { neighbour: 0.5, ..Params::default() };
        let hits = ix.rank(&keys("holiday"), &Filter::default(), p, 10);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [0, 1]);
        assert!((hits[1].1 - hits[0].1 * 0.5).abs() < 1e-5);
    }

    #[test]
    fn cleared_chats_leave_results_and_compaction_keeps_the_rest() {
        let mut ix = index(&[("a", "alpha"), ("b", "alpha beta"), ("a", "alpha gamma")]);
        let a = ix.chat_ids["a"];
        ix.remove_chat(a);
        let p = Params::default();
        let hits = ix.rank(&keys("alpha"), &Filter::default(), p, 10);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [1]);
        ix.compact();
        assert_eq!(ix.docs.len(), 1);
        assert_eq!(ix.chats.len(), 1);
        let hits = ix.rank(&keys("beta"), &Filter::default(), p, 10);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [0]);
        assert!(ix.rank(&keys("gamma"), &Filter::default(), p, 10).is_empty());
    }

    #[test]
    fn encode_decode_round_trips_and_rejects_damage() {
        let mut ix = index(&[("a", "alpha 北京"), ("b", "alpha beta"), ("a", "gamma")]);
        let c = ix.chat_ids["b"];
        ix.chats[c as usize].title = "标题".into();
        let bytes = ix.encode();
        let back = Index::decode(&bytes).expect("decodes");
        assert_eq!(back.docs.len(), 3);
        assert_eq!(back.chats[c as usize].title, "标题");
        let p = Params::default();
        assert_eq!(
            back.rank(&keys("北京"), &Filter::default(), p, 10),
            ix.rank(&keys("北京"), &Filter::default(), p, 10)
        );
        // Every truncation and a run of flipped bytes is refused or decodes to something
        // consistent, never a panic.
        for cut in 0..bytes.len() {
            assert!(Index::decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0xff;
            let _ = Index::decode(&bad);
        }
    }
}
