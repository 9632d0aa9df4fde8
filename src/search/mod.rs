//! Search over every chat (docs/search.md): the [`Search`] service holds the inverted index
//! ([`index`]), keeps it current and answers queries for `GET /api/search`, the
//! `search_history` tool and `cashcode eval locomo` alike.
//!
//! Threads: [`crate::store::chats::ChatStore`] tells it of every append, rewrite, metadata write
//! and delete ([`HistoryObserver`], called on the writer's thread under the chat's lock): that
//! only queues the news on a bounded channel (a full queue marks the chat for a whole re-read
//! instead), so a turn never waits on indexing. The `search-index` thread reads the new lines
//! back from history.jsonl, indexes them, and writes the index file
//! (`<memory>/.search/index.bin`, 0600 in a 0700 directory, atomic rename, SHA-256 checked)
//! after 30 s without news (at least every 5 minutes) and when the server stops. At start-up it
//! loads that file and re-reads every chat whose history length or modification time differs
//! from what the file recorded (a chat dropped in by hand or from an old install, a crash before
//! the last write), and every chat when the file is missing, of another version or damaged; a
//! query that finds the memory root changed has it compare again. Queries run on the caller's
//! thread (`http-slow`, a worker).

pub mod eval;
pub(crate) mod index;
pub(crate) mod tokens;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde::Serialize;

pub use index::Params;
use index::{Filter, Index, Role};

use crate::store::chats::{valid_chat_id, ChatStore, HistoryObserver, Record, DEFAULT_TITLE};
use crate::util::{fsx, sync};

/// News the indexer has not handled yet; beyond it a chat is re-read whole instead.
const QUEUE: usize = 4096;
/// Bytes of a record's text that are indexed (the rest of a long tool result is not).
const MAX_TEXT: usize = 32 * 1024;
/// Lines longer than this are not indexed at all.
const MAX_LINE: u64 = 8 * 1024 * 1024;
/// The index file's first bytes: the format and tokeniser version. Another value rebuilds.
const MAGIC: &[u8; 12] = b"CCSEARCH\x00\x00\x00\x03";
/// How long the indexer waits after the last change before it writes the index file. Rarely
/// is enough: what a crash loses is read again from the histories at start-up.
const PERSIST_IDLE: Duration = Duration::from_secs(30);
/// Under a steady stream of news, the file is still written this often.
const PERSIST_EVERY: Duration = Duration::from_secs(300);
/// Candidates a phrase query checks against their records' text at most.
const MAX_VERIFY: usize = 2000;
/// The most results one query pages through (`after` + `limit`).
pub const MAX_DEPTH: usize = 1000;
/// Characters of context a snippet shows around its first match.
const SNIPPET_CHARS: usize = 200;
/// Marks around a matched term in a snippet (docs/search.md §6). The same characters in the
/// text itself are shown as `‹` and `›`.
pub const MARK_OPEN: char = '«';
pub const MARK_CLOSE: char = '»';

enum Job {
    Appended {
        chat: String,
        lines: Vec<(u64, u32)>,
    },
    Reread(String),
    Retitle(String),
    Deleted(String),
    /// The memory root changed (a chat directory was added or removed behind the server's back):
    /// compare every chat with the index, as at start-up.
    Rescan,
}

/// How far the indexer is: started-up, and jobs sent and handled.
#[derive(Default)]
struct Progress {
    ready: bool,
    sent: u64,
    done: u64,
}

/// One query (docs/search.md §6).
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub q: String,
    pub chat_id: Option<String>,
    /// Roles to keep (`None`: all).
    pub roles: Option<Vec<String>>,
    /// Sortable timestamps ([`stamp_key`]), inclusive.
    pub from: Option<u64>,
    pub to: Option<u64>,
    pub limit: usize,
    /// Results to skip (the previous page's `next`).
    pub after: usize,
}

/// One result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Hit {
    pub chat_id: String,
    pub cursor: u64,
    pub role: String,
    pub timestamp: String,
    pub title: String,
    pub snippet: String,
}

/// One page of results, best first; `next` is the `after` of the next page.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub hits: Vec<Hit>,
    pub next: Option<usize>,
}

pub struct Search {
    chats: Arc<ChatStore>,
    file: PathBuf,
    params: Params,
    index: RwLock<Index>,
    tx: Sender<Job>,
    rx: Receiver<Job>,
    /// Chats whose news did not fit in the queue: re-read whole.
    overflow: Mutex<HashSet<String>>,
    progress: Mutex<Progress>,
    moved: Condvar,
    /// The memory root's modification time at the last scan.
    root_mtime: Mutex<i64>,
    /// The `search-index` thread runs: queries wait for it. Without it (the eval, benches) the
    /// caller handles the queue with [`Search::drain`].
    threaded: std::sync::atomic::AtomicBool,
}

impl Search {
    /// The service over `chats`' memory root; nothing is read until [`Search::start`] (or
    /// [`Search::open_now`]). Installs itself as the store's observer.
    pub fn new(chats: Arc<ChatStore>, params: Params) -> Arc<Search> {
        // Unbounded, with the cap checked on send (`send`): a bounded channel writes every one
        // of its slots when it is made, a quarter MiB of an idle server's memory.
        let (tx, rx) = crossbeam_channel::unbounded();
        let file = chats.root().join(".search").join("index.bin");
        let s = Arc::new(Search {
            chats: Arc::clone(&chats),
            file,
            params,
            index: RwLock::new(Index::default()),
            tx,
            rx,
            overflow: Mutex::new(HashSet::new()),
            progress: Mutex::new(Progress::default()),
            moved: Condvar::new(),
            root_mtime: Mutex::new(0),
            threaded: std::sync::atomic::AtomicBool::new(false),
        });
        chats.observe(Arc::clone(&s) as Arc<dyn HistoryObserver>);
        s
    }

    /// Starts the `search-index` thread: it loads or rebuilds the index, then follows the
    /// news until `stop` disconnects, and writes the index file last.
    pub fn start(self: &Arc<Self>, stop: Receiver<()>) -> io::Result<std::thread::JoinHandle<()>> {
        let me = Arc::clone(self);
        self.threaded.store(true, std::sync::atomic::Ordering::SeqCst);
        std::thread::Builder::new().name("search-index".into()).spawn(move || me.run(&stop))
    }

    /// Loads or rebuilds the index on the calling thread (the eval and benches, without the
    /// indexer thread: appends then wait in the queue until [`Search::drain`]).
    pub fn open_now(&self) {
        self.startup();
    }

    fn run(&self, stop: &Receiver<()>) {
        self.startup();
        let mut dirty_since: Option<Instant> = None;
        loop {
            let wait = if dirty_since.is_some() { PERSIST_IDLE } else { Duration::from_secs(3600) };
            crossbeam_channel::select! {
                recv(self.rx) -> job => {
                    if let Ok(job) = job {
                        self.handle(job);
                        dirty_since.get_or_insert_with(Instant::now);
                    }
                }
                recv(stop) -> _ => break,
                default(wait) => {
                    if dirty_since.take().is_some() {
                        self.persist();
                    }
                }
            }
            if self.reread_overflow() {
                dirty_since.get_or_insert_with(Instant::now);
            }
            // Under a steady stream of news, still write the file now and then.
            if dirty_since.is_some_and(|t| t.elapsed() > PERSIST_EVERY) {
                dirty_since = None;
                self.persist();
            }
        }
        self.drain();
        self.persist();
    }

    /// Handles every queued job on the calling thread.
    pub fn drain(&self) {
        while let Ok(job) = self.rx.try_recv() {
            self.handle(job);
        }
        self.reread_overflow();
    }

    fn handle(&self, job: Job) {
        match job {
            Job::Appended { chat, lines } => self.index_lines(&chat, &lines),
            Job::Reread(chat) => self.reindex_chat(&chat),
            Job::Retitle(chat) => self.retitle(&chat),
            Job::Deleted(chat) => {
                let mut ix = sync::write(&self.index);
                if let Some(&c) = ix.chat_ids.get(&chat) {
                    ix.remove_chat(c);
                }
            }
            Job::Rescan => {
                let n = self.reconcile();
                if n > 0 {
                    log::info!("event=search.rescanned chats_reread={n}");
                }
            }
        }
        let mut p = sync::lock(&self.progress);
        p.done += 1;
        self.moved.notify_all();
    }

    fn reread_overflow(&self) -> bool {
        let chats: Vec<String> = sync::lock(&self.overflow).drain().collect();
        for c in &chats {
            self.reindex_chat(c);
        }
        !chats.is_empty()
    }

    fn send(&self, job: Job, chat: &str) {
        // Every send holds `progress`, so the queue never passes the cap.
        let mut p = sync::lock(&self.progress);
        if self.tx.len() < QUEUE && self.tx.send(job).is_ok() {
            p.sent += 1;
        } else {
            drop(p);
            sync::lock(&self.overflow).insert(chat.to_string());
        }
    }

    /// Waits (at most `deadline`) until start-up is done and the news queued before the call
    /// is indexed, so a search right after a turn finds it.
    fn settle(&self, deadline: Duration) {
        let until = Instant::now() + deadline;
        let mut p = sync::lock(&self.progress);
        let target = p.sent;
        while !(p.ready && p.done >= target) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            p = self.moved.wait_timeout(p, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Indexes the whole of one chat again from its files, on the calling thread: its history
    /// and title replace whatever the index held for it (a chat gone from disk leaves it).
    /// Imports call this so their chats are searchable at once.
    pub fn reindex_chat(&self, chat: &str) {
        if !valid_chat_id(chat) {
            return;
        }
        let Some(path) = self.chats.history_path(chat) else { return };
        let Some(dir) = self.chats.dir(chat) else { return };
        if !dir.is_dir() {
            let mut ix = sync::write(&self.index);
            if let Some(&c) = ix.chat_ids.get(chat) {
                ix.remove_chat(c);
            }
            return;
        }
        let (docs, file_len, mtime) = read_chat(&path);
        let title = self.title_of(chat);
        let title_tokens = tokens::tokens(&title);
        let mut ix = sync::write(&self.index);
        let c = ix.chat_slot(chat);
        ix.clear_chat(c);
        for d in &docs {
            ix.add(c, d.role, d.cursor, d.offset, d.line_len, d.stamp, &d.tokens);
        }
        ix.chats[c as usize].file_len = file_len;
        ix.chats[c as usize].mtime = mtime;
        set_title(&mut ix, c, title, &title_tokens);
    }

    /// Indexes the chat's title again when it changed (a chat the index lacks is read whole).
    fn retitle(&self, chat: &str) {
        let title = self.title_of(chat);
        let known = {
            let ix = sync::read(&self.index);
            ix.chat_ids.get(chat).filter(|&&c| ix.chats[c as usize].alive).map(|&c| ix.chats[c as usize].title == title)
        };
        match known {
            Some(true) => {}
            Some(false) => {
                let t = tokens::tokens(&title);
                let mut ix = sync::write(&self.index);
                let c = ix.chat_slot(chat);
                set_title(&mut ix, c, title, &t);
            }
            None => self.reindex_chat(chat),
        }
    }

    fn title_of(&self, chat: &str) -> String {
        let meta = self.chats.read_metadata(chat);
        meta.get("title").and_then(|t| t.as_str()).unwrap_or("").to_string()
    }

    /// Indexes appended lines, read back from the file (lines already indexed by a whole
    /// re-read are skipped).
    fn index_lines(&self, chat: &str, lines: &[(u64, u32)]) {
        let Some(path) = self.chats.history_path(chat) else { return };
        let Ok(Some(file)) = fsx::open_regular(&path) else { return };
        let indexed = {
            let ix = sync::read(&self.index);
            ix.chat_ids.get(chat).filter(|&&c| ix.chats[c as usize].alive).map(|&c| ix.chats[c as usize].file_len)
        };
        let Some(indexed) = indexed else {
            // A chat the index has never seen (new, or appended before start-up ended).
            self.reindex_chat(chat);
            return;
        };
        let mut docs = Vec::new();
        let mut end = indexed;
        for &(offset, len) in lines {
            if offset < indexed {
                continue;
            }
            let mut buf = vec![0u8; len as usize];
            if u64::from(len) > MAX_LINE || file.read_exact_at(&mut buf, offset).is_err() {
                continue;
            }
            if let Some(d) = parse_doc(&buf, offset) {
                docs.push(d);
            }
            end = end.max(offset + u64::from(len) + 1);
        }
        let mtime = fs::metadata(&path).map(|m| mtime_ns(&m)).unwrap_or(0);
        let mut ix = sync::write(&self.index);
        let Some(&c) = ix.chat_ids.get(chat) else { return };
        for d in &docs {
            ix.add(c, d.role, d.cursor, d.offset, d.line_len, d.stamp, &d.tokens);
        }
        ix.chats[c as usize].file_len = end;
        ix.chats[c as usize].mtime = mtime;
        if ix.wants_compaction() {
            ix.compact();
        }
    }

    /// Loads the index file and re-reads what changed behind it; then marks the service ready.
    fn startup(&self) {
        let started = Instant::now();
        let (loaded, why) = match fs::read(&self.file) {
            Ok(bytes) => match decode_file(&bytes) {
                Some(ix) => (ix, "loaded"),
                None => (Index::default(), "damaged"),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Index::default(), "missing"),
            Err(_) => (Index::default(), "unreadable"),
        };
        *sync::write(&self.index) = loaded;
        let reread = self.reconcile();
        if reread > 0 || why != "loaded" {
            self.persist();
        }
        let docs = sync::read(&self.index).live_docs();
        log::info!(
            "event=search.ready index={why} chats_reread={reread} documents={docs} duration_ms={:.1}",
            started.elapsed().as_secs_f64() * 1000.0
        );
        let mut p = sync::lock(&self.progress);
        p.ready = true;
        self.moved.notify_all();
    }

    fn root_mtime(&self) -> i64 {
        fs::metadata(self.chats.root()).map(|m| mtime_ns(&m)).unwrap_or(0)
    }

    /// Re-reads every chat whose history length, modification time or title differs from the
    /// index, and drops chats gone from disk. Returns how many chats changed.
    fn reconcile(&self) -> usize {
        *sync::lock(&self.root_mtime) = self.root_mtime();
        let mut on_disk = HashSet::new();
        let mut reread = 0usize;
        if let Ok(rd) = fs::read_dir(self.chats.root()) {
            for entry in rd.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') || !valid_chat_id(&name) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let (len, mtime) =
                    fs::metadata(entry.path().join("history.jsonl")).map(|m| (m.len(), mtime_ns(&m))).unwrap_or((0, 0));
                let title = self.title_of(&name);
                let known = {
                    let ix = sync::read(&self.index);
                    ix.chat_ids.get(&name).filter(|&&c| ix.chats[c as usize].alive).map(|&c| {
                        let k = &ix.chats[c as usize];
                        (k.file_len == len && k.mtime == mtime, k.title == title)
                    })
                };
                match known {
                    Some((true, true)) => {}
                    Some((true, false)) => {
                        let t = tokens::tokens(&title);
                        let mut ix = sync::write(&self.index);
                        let c = ix.chat_slot(&name);
                        set_title(&mut ix, c, title, &t);
                    }
                    _ => {
                        self.reindex_chat(&name);
                        reread += 1;
                    }
                }
                on_disk.insert(name);
            }
        }
        {
            let mut ix = sync::write(&self.index);
            let gone: Vec<u32> = ix
                .chats
                .iter()
                .enumerate()
                .filter(|(_, c)| c.alive && !on_disk.contains(&c.id))
                .map(|(i, _)| i as u32)
                .collect();
            for c in &gone {
                ix.remove_chat(*c);
            }
            reread += gone.len();
        }
        reread
    }

    /// Writes the index file (compacting the index first).
    pub fn persist(&self) {
        let body = sync::write(&self.index).encode();
        use sha2::Digest;
        let mut bytes = Vec::with_capacity(body.len() + 44);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&sha2::Sha256::digest(&body));
        bytes.extend_from_slice(&body);
        if let Err(e) = fsx::write_atomic(&self.file, &bytes, true) {
            log::warn!("event=search.persist_failed error={:?}", e.kind());
        }
    }

    /// The index file's size and the documents indexed (benches).
    pub fn stats(&self) -> (u64, u64) {
        let size = fs::metadata(&self.file).map(|m| m.len()).unwrap_or(0);
        (size, sync::read(&self.index).live_docs())
    }

    /// One page of results, best first (docs/search.md §6). Waits up to a second for start-up
    /// and for news already queued.
    pub fn search(&self, req: &Request) -> Results {
        // A chat directory added or removed behind the server's back changes the root's time.
        let threaded = self.threaded.load(std::sync::atomic::Ordering::SeqCst);
        if threaded && sync::lock(&self.progress).ready {
            let now = self.root_mtime();
            let mut seen = sync::lock(&self.root_mtime);
            if *seen != now {
                *seen = now;
                drop(seen);
                self.send(Job::Rescan, "");
            }
        }
        if threaded {
            self.settle(Duration::from_secs(1));
        }
        let (keys, phrases) = parse_query(&req.q);
        let empty = Results { hits: Vec::new(), next: None };
        if keys.is_empty() {
            return empty;
        }
        let want = (req.after + req.limit).min(MAX_DEPTH) + 1;
        let candidates: Vec<Candidate> = {
            let ix = sync::read(&self.index);
            let chat = match &req.chat_id {
                Some(id) => match ix.chat_ids.get(id) {
                    Some(&c) => Some(c),
                    None => return empty,
                },
                None => None,
            };
            let roles = req.roles.as_ref().map(|r| r.iter().filter_map(|r| Role::parse(r)).collect());
            let filter = Filter { chat, roles, from: req.from, to: req.to };
            let take = if phrases.is_empty() { want } else { MAX_VERIFY };
            ix.rank(&keys, &filter, self.params, take)
                .into_iter()
                .map(|(d, _)| {
                    let doc = &ix.docs[d as usize];
                    let chat = &ix.chats[doc.chat as usize];
                    Candidate {
                        chat_id: chat.id.clone(),
                        title: chat.title.clone(),
                        role: doc.role,
                        cursor: doc.cursor,
                        offset: doc.offset,
                        line_len: doc.line_len,
                    }
                })
                .collect()
        };
        let mut files: HashMap<String, Option<fs::File>> = HashMap::new();
        let mut hits = Vec::new();
        for c in candidates {
            if hits.len() >= want {
                break;
            }
            let (text, timestamp) = if c.role == Role::Title {
                (c.title.clone(), String::new())
            } else {
                let file = files.entry(c.chat_id.clone()).or_insert_with(|| {
                    self.chats.history_path(&c.chat_id).and_then(|p| fsx::open_regular(&p).ok().flatten())
                });
                let Some(file) = file else { continue };
                let mut buf = vec![0u8; c.line_len as usize];
                if file.read_exact_at(&mut buf, c.offset).is_err() {
                    continue;
                }
                let Ok(r) = serde_json::from_slice::<Record>(&buf) else { continue };
                if r.cursor != c.cursor {
                    continue;
                }
                let Some((_, text)) = record_text(&r) else { continue };
                (text, r.timestamp)
            };
            if !phrases.iter().all(|p| has_phrase(&text, p)) {
                continue;
            }
            let title = if c.title.is_empty() { DEFAULT_TITLE.to_string() } else { c.title };
            hits.push(Hit {
                chat_id: c.chat_id,
                cursor: c.cursor,
                role: c.role.name().to_string(),
                timestamp,
                title,
                snippet: snippet(&text, &keys),
            });
        }
        let more = hits.len() > req.after + req.limit && req.after + req.limit < MAX_DEPTH;
        let hits: Vec<Hit> = hits.into_iter().skip(req.after).take(req.limit).collect();
        Results { next: more.then_some(req.after + req.limit), hits }
    }
}

struct Candidate {
    chat_id: String,
    title: String,
    role: Role,
    cursor: u64,
    offset: u64,
    line_len: u32,
}

impl HistoryObserver for Search {
    fn appended(&self, chat: &str, lines: &[(u64, u32)]) {
        self.send(Job::Appended { chat: chat.to_string(), lines: lines.to_vec() }, chat);
    }

    fn rewritten(&self, chat: &str) {
        self.send(Job::Reread(chat.to_string()), chat);
    }

    fn retitled(&self, chat: &str) {
        self.send(Job::Retitle(chat.to_string()), chat);
    }

    fn deleted(&self, chat: &str) {
        self.send(Job::Deleted(chat.to_string()), chat);
    }
}

fn set_title(ix: &mut Index, c: u32, title: String, tokens: &[tokens::Token]) {
    ix.drop_title(c);
    if !tokens.is_empty() {
        ix.add(c, Role::Title, 0, 0, 0, 0, tokens);
    }
    ix.chats[c as usize].title = title;
}

fn mtime_ns(m: &fs::Metadata) -> i64 {
    m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec())
}

fn decode_file(bytes: &[u8]) -> Option<Index> {
    use sha2::Digest;
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (sum, body) = (rest.get(..32)?, rest.get(32..)?);
    if sha2::Sha256::digest(body).as_slice() != sum {
        return None;
    }
    Index::decode(body)
}

/// A record ready to index.
struct NewDoc {
    role: Role,
    cursor: u64,
    offset: u64,
    line_len: u32,
    stamp: u64,
    tokens: Vec<tokens::Token>,
}

fn parse_doc(line: &[u8], offset: u64) -> Option<NewDoc> {
    let r: Record = serde_json::from_slice(line).ok()?;
    let (role, text) = record_text(&r)?;
    let mut cut = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(NewDoc {
        role,
        cursor: r.cursor,
        offset,
        line_len: line.len() as u32,
        stamp: stamp_key(&r.timestamp, false).unwrap_or(0),
        tokens: tokens::tokens(&text[..cut]),
    })
}

/// Every indexable record of a history file, with the file's length (up to its last complete
/// line) and modification time.
fn read_chat(path: &Path) -> (Vec<NewDoc>, u64, i64) {
    let Ok(Some(file)) = fsx::open_regular(path) else { return (Vec::new(), 0, 0) };
    let mtime = file.metadata().map(|m| mtime_ns(&m)).unwrap_or(0);
    let mut reader = BufReader::new(file);
    let mut docs = Vec::new();
    let mut offset = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if line.last() != Some(&b'\n') {
                    break; // a torn tail: indexed once it is complete
                }
                let body = &line[..n - 1];
                if (body.len() as u64) <= MAX_LINE {
                    if let Some(d) = parse_doc(body, offset) {
                        docs.push(d);
                    }
                }
                offset += n as u64;
            }
        }
    }
    (docs, offset, mtime)
}

/// What a record contributes to the index: the text of user and assistant messages (never
/// reasoning), a tool call's name and arguments, a tool's result. Summaries, unknown roles and
/// `search_history`'s own results (earlier hits, quoted again) are not indexed.
fn record_text(r: &Record) -> Option<(Role, String)> {
    let role = Role::parse(&r.role).filter(|r| *r != Role::Title)?;
    if role == Role::Tool && r.name.as_deref() == Some("search_history") {
        return None;
    }
    let mut text = r.content.clone();
    if role == Role::ToolCalls {
        for call in r.tool_calls.as_ref().and_then(|v| v.as_array()).into_iter().flatten() {
            let f = &call["function"];
            let name = f["name"].as_str().unwrap_or("");
            let args = match &f["arguments"] {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(name);
            text.push(' ');
            text.push_str(&args);
        }
    }
    Some((role, text))
}

/// A timestamp as a sortable number: `YYYY-MM-DD`, then optionally `[ T]HH:MM[:SS]` (history's
/// `YYYY-MM-DD HH:MM`, the original's ISO form). A date alone is its first second, or with
/// `end_of_day` its last. `None` for anything else.
pub fn stamp_key(s: &str, end_of_day: bool) -> Option<u64> {
    let s = s.trim();
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let part = s.get(r)?;
        (!part.is_empty() && part.bytes().all(|c| c.is_ascii_digit())).then(|| part.parse().ok()).flatten()
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let (mut h, mut min, mut sec) = if end_of_day { (23, 59, 59) } else { (0, 0, 0) };
    if b.len() > 10 {
        if !matches!(b[10], b' ' | b'T') || b.len() < 16 || b[13] != b':' {
            return None;
        }
        h = num(11..13)?;
        min = num(14..16)?;
        sec = if b.len() >= 19 && b[16] == b':' { num(17..19)? } else { 0 };
        if h > 23 || min > 59 || sec > 60 {
            return None;
        }
    }
    Some(((((y * 13 + m) * 32 + d) * 24 + h) * 60 + min) * 60 + sec)
}

/// A phrase: its tokens' keys and their positions relative to the first.
type Phrase = Vec<(String, u32)>;

/// The query's keys (everything, phrases included) and its quoted phrases.
fn parse_query(q: &str) -> (Vec<String>, Vec<Phrase>) {
    let mut phrases = Vec::new();
    for (i, part) in q.split('"').enumerate() {
        // Odd parts are inside quotes (an unclosed quote runs to the end).
        if i % 2 == 1 {
            let toks = tokens::query_tokens(part);
            if toks.len() > 1 {
                let first = toks[0].pos;
                phrases.push(toks.into_iter().map(|t| (t.key, t.pos - first)).collect());
            }
        }
    }
    let keys = tokens::query_tokens(&q.replace('"', " ")).into_iter().map(|t| t.key).collect();
    (keys, phrases)
}

/// Whether `text` holds the phrase's tokens at the phrase's relative positions.
fn has_phrase(text: &str, phrase: &Phrase) -> bool {
    let toks = tokens::tokens(text);
    let mut at: HashMap<&str, HashSet<u32>> = HashMap::new();
    for t in &toks {
        at.entry(t.key.as_str()).or_default().insert(t.pos);
    }
    let Some((k0, _)) = phrase.first() else { return true };
    let Some(starts) = at.get(k0.as_str()) else { return false };
    starts.iter().any(|&p| phrase.iter().all(|(k, rel)| at.get(k.as_str()).is_some_and(|s| s.contains(&(p + rel)))))
}

/// A window of `text` around its first match, whitespace collapsed, matched terms between
/// [`MARK_OPEN`] and [`MARK_CLOSE`].
pub(crate) fn snippet(text: &str, keys: &[String]) -> String {
    let keyset: HashSet<&str> = keys.iter().map(String::as_str).collect();
    let mut spans: Vec<(usize, usize)> = tokens::tokens(text)
        .into_iter()
        .filter(|t| keyset.contains(t.key.as_str()))
        .map(|t| (t.start, t.end))
        .collect();
    spans.sort_unstable();
    let first = spans.first().map_or(0, |s| s.0);
    // Start up to a third of the window before the first match, at a character boundary.
    let before: Vec<usize> = text[..first].char_indices().map(|(i, _)| i).collect();
    let start = before.len().checked_sub(SNIPPET_CHARS / 3).map_or(0, |i| before[i]);
    let end = text[start..].char_indices().nth(SNIPPET_CHARS).map_or(text.len(), |(i, _)| start + i);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    let mut at = start;
    let mut last_space = false;
    let mut push = |out: &mut String, s: &str| {
        for c in s.chars() {
            let c = match c {
                MARK_OPEN => '‹',
                MARK_CLOSE => '›',
                c => c,
            };
            if c.is_whitespace() {
                if !last_space {
                    out.push(' ');
                }
                last_space = true;
            } else {
                out.push(c);
                last_space = false;
            }
        }
    };
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (s, e) in spans {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    for (s, e) in merged {
        if e <= start || s < at {
            continue;
        }
        if s >= end {
            break;
        }
        let e = e.min(end);
        push(&mut out, &text[at..s]);
        out.push(MARK_OPEN);
        push(&mut out, &text[s..e]);
        out.push(MARK_CLOSE);
        at = e;
    }
    push(&mut out, &text[at..end]);
    if end < text.len() {
        out.push('…');
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(q: &str) -> Vec<String> {
        parse_query(q).0
    }

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn setup() -> (Dir, Arc<ChatStore>, Arc<Search>) {
        let dir = std::env::temp_dir().join(format!("cc-search-{}", crate::util::rand::hex(6)));
        fs::create_dir_all(&dir).unwrap();
        let store = Arc::new(ChatStore::new(&dir));
        let search = Search::new(Arc::clone(&store), Params::default());
        search.open_now();
        (Dir(dir), store, search)
    }

    fn find(s: &Search, q: &str) -> Vec<(String, u64)> {
        let r = s.search(&Request { q: q.into(), limit: 100, roles: Some(vec!["user".into()]), ..Request::default() });
        r.hits.into_iter().filter(|h| h.snippet.contains(MARK_OPEN)).map(|h| (h.chat_id, h.cursor)).collect()
    }

    /// More news than the queue holds: the chats that did not fit are read whole, nothing is lost.
    #[test]
    fn a_full_queue_loses_nothing() {
        let (_d, store, search) = setup();
        for i in 0..QUEUE + 500 {
            let mut r = [Record::new("user", format!("entry{} common", i % 7))];
            store.append(if i % 2 == 0 { "even" } else { "odd" }, &mut r).unwrap();
        }
        assert!(!sync::lock(&search.overflow).is_empty(), "the queue overflowed");
        search.drain();
        assert_eq!(find(&search, "common").len(), 100, "a page");
        let all = search.search(&Request { q: "entry3".into(), limit: 100, after: 0, ..Request::default() });
        assert!(all.next.is_some());
        let (_, docs) = search.stats();
        assert_eq!(docs as usize, QUEUE + 500);
    }

    /// The file round-trips; a damaged or foreign one is rebuilt from the histories; appends,
    /// rewinds and deletes made while no index was looking are found at the next start.
    #[test]
    fn the_index_file_is_reloaded_checked_and_rebuilt() {
        let (d, store, search) = setup();
        store.append("a", &mut [Record::new("user", "alpha beta"), Record::new("assistant", "gamma")]).unwrap();
        store.append("b", &mut [Record::new("user", "alpha 北京")]).unwrap();
        search.drain();
        search.persist();
        let file = d.0.join(".search/index.bin");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let before = find(&search, "alpha");
        assert_eq!(before.len(), 2);
        drop(search);

        // Reloaded as it was; a chat appended to behind its back is read again.
        let again = |store: &Arc<ChatStore>| {
            let s = Search::new(Arc::clone(store), Params::default());
            s.open_now();
            s
        };
        let plain = Arc::new(ChatStore::new(&d.0));
        plain.append("b", &mut [Record::new("user", "delta")]).unwrap();
        let s = again(&plain);
        assert_eq!(find(&s, "alpha"), before);
        assert_eq!(find(&s, "delta"), [("b".to_string(), 2)]);
        assert_eq!(find(&s, "北京"), [("b".to_string(), 1)]);
        s.persist();

        // Every kind of damage rebuilds the same answers.
        let good = fs::read(&file).unwrap();
        let mut flipped = good.clone();
        let n = flipped.len();
        flipped[n / 2] ^= 1;
        let mut other_version = good.clone();
        other_version[11] ^= 0xff;
        for bad in [flipped, good[..good.len() / 2].to_vec(), other_version, b"garbage".to_vec(), Vec::new()] {
            fs::write(&file, &bad).unwrap();
            let s = again(&plain);
            assert_eq!(find(&s, "alpha"), before);
            assert_eq!(find(&s, "delta"), [("b".to_string(), 2)]);
        }

        // A rewind and a delete while nobody indexed: gone at the next start.
        let s = again(&plain);
        s.persist();
        drop(s);
        plain.rewind_history("a", 1, 0).unwrap();
        plain.delete("b").unwrap();
        let s = again(&plain);
        assert!(find(&s, "alpha").is_empty());
        assert!(find(&s, "delta").is_empty());
        // And live: news through the observer (a store has one observer for good: a fresh one).
        let fresh = Arc::new(ChatStore::new(&d.0));
        let live = again(&fresh);
        fresh.append("c", &mut [Record::new("user", "epsilon")]).unwrap();
        live.drain();
        assert_eq!(find(&live, "epsilon"), [("c".to_string(), 1)]);
        fresh.rewind_history("c", 1, 0).unwrap();
        live.drain();
        assert!(find(&live, "epsilon").is_empty());
    }

    #[test]
    fn stamps_sort_and_dates_cover_their_day() {
        let a = stamp_key("2024-03-01 09:30", false).unwrap();
        let b = stamp_key("2024-03-01T09:31:05", false).unwrap();
        assert!(a < b);
        assert!(stamp_key("2024-03-01", true).unwrap() > b);
        assert!(stamp_key("2024-03-01", false).unwrap() < a);
        assert!(stamp_key("2024-02-29 23:59", false).unwrap() < stamp_key("2024-03-01", false).unwrap());
        for bad in ["", "yesterday", "2024-13-01", "2024-1-01", "2024-01-01X", "2024-01-01 25:00", "２０２４-01-01"]
        {
            assert_eq!(stamp_key(bad, false), None, "{bad}");
        }
    }

    #[test]
    fn phrases_need_their_words_in_order() {
        let (k, p) = parse_query("\"green tea\" cake");
        assert_eq!(k, ["green", "tea", "cak"]);
        assert!(has_phrase("I like green tea a lot", &p[0]));
        assert!(!has_phrase("tea, green or black", &p[0]));
        // Stop words keep their place: "cup of tea" is not "cup tea".
        let (_, p) = parse_query("\"cup of tea\"");
        assert!(has_phrase("a cup of tea", &p[0]));
        assert!(!has_phrase("cup tea", &p[0]));
        let (_, p) = parse_query("\"北京天气\"");
        assert!(has_phrase("今天北京天气很好", &p[0]));
        assert!(!has_phrase("北京的天气", &p[0]));
    }

    #[test]
    fn snippets_mark_matches_around_the_first() {
        assert_eq!(snippet("I like Green  tea\nvery much", &keys("green tea")), "I like «Green» «tea» very much");
        assert_eq!(snippet("我爱北京天安门", &keys("北京")), "我爱«北京»天安门");
        assert_eq!(snippet("a «quoted» tea", &keys("tea")), "a ‹quoted› «tea»");
        let long = format!("{} needle {}", "word ".repeat(200), "tail ".repeat(200));
        let s = snippet(&long, &keys("needle"));
        assert!(s.starts_with('…') && s.ends_with('…') && s.contains("«needle»"), "{s}");
        assert!(s.chars().count() <= SNIPPET_CHARS + 4);
    }
}
