//! `ChatStore`: the per-chat directories under the memory root — `history.jsonl` (append-only,
//! one turn per append, torn tail tolerated), `.cursor`, and `metadata.json` (atomic rewrite,
//! unknown keys preserved). Called from worker threads (turns, consolidation) and the HTTP thread
//! (sessions API); appends to one chat are serialised by a striped lock.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::util::{fsx, sync, time};

/// Title shown for chats without one (the original's Chinese "New chat").
pub(crate) const DEFAULT_TITLE: &str = "\u{65b0}\u{5bf9}\u{8bdd}";
const LOCK_STRIPES: usize = 64;
/// Write-ahead file of the running turn's user message.
const PENDING: &str = ".pending_turn.json";
/// Messages a rewind took out of the chat, newest rewind last (restorable until the next turn).
pub(crate) const REWIND_ARCHIVE: &str = "rewound.json";

/// Why a chat rewind's messages cannot come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UndoBlocked {
    /// No rewind's messages are archived.
    Nothing,
    /// A turn was stored since the rewind.
    NewerTurn,
}

/// One history rewind's removed lines, as they were in history.jsonl.
#[derive(Debug, Serialize, Deserialize)]
struct Archived {
    before_message: u64,
    /// The last cursor left in history: the undo is refused once another record follows it.
    kept_last: u64,
    lines: Vec<String>,
}

/// One line of history.jsonl, fields in the original's key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default)]
    pub(crate) cursor: u64,
    #[serde(default)]
    pub(crate) timestamp: String,
    pub(crate) role: String,
    #[serde(default, deserialize_with = "string_or_empty")]
    pub(crate) content: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) mentioned_skills: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) selected_mcp_connectors: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) tool_calls: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) keep_from_cursor: Option<u64>,
    /// The turn's reasoning as shown to the user (a turn's final assistant record); never
    /// part of `content`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) reasoning_content: Option<String>,
    /// Milliseconds the model spent reasoning before it answered, over the turn's calls.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) reasoning_ms: Option<u64>,
    /// What the provider sent beside the answer, with which provider and model sent it
    /// (`store::replay`): sent back on this message to that provider and model only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) provider_state: Option<Value>,
    /// A tool result's outcome when not `ok`, and how a call outside the sandbox got there
    /// (`tool_result`'s `outcome` and `ran`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) ran: Option<String>,
    /// An answer the server wrote in the model's place (the stop at a budget): its code and
    /// fields, `{"code", "params"}`, for a client to word it in its own language.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) note: Option<Value>,
}

fn string_or_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

impl Record {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Record {
            cursor: 0,
            timestamp: String::new(),
            role: role.into(),
            content: content.into(),
            mentioned_skills: None,
            selected_mcp_connectors: None,
            tool_calls: None,
            tool_call_id: None,
            name: None,
            keep_from_cursor: None,
            reasoning_content: None,
            reasoning_ms: None,
            provider_state: None,
            outcome: None,
            ran: None,
            note: None,
        }
    }
}

/// What reading history.jsonl found.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) records: Vec<Record>,
    /// Lines that did not parse (a torn last line after a crash, or foreign garbage).
    pub(crate) skipped_lines: usize,
    /// The file did not end with a newline (a torn tail).
    pub(crate) torn_tail: bool,
}

/// A turn's write-ahead record, open until the turn has ended ([`ChatStore::begin_turn`]).
/// Kept rather than removed when blanked: see [`fsx::write_ahead`] for what a file per turn
/// costs.
#[derive(Debug)]
pub(crate) struct PendingTurn(fsx::WriteAhead, u64);

impl PendingTurn {
    /// The chat's last cursor when the turn began.
    pub(crate) fn start_cursor(&self) -> u64 {
        self.1
    }

    /// Blanks the write-ahead file: recovery skips a blank one, start-up removes it.
    pub(crate) fn end(self) {
        let _ = self.0.blank();
    }
}

/// A row of `GET /api/sessions`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SessionInfo {
    pub(crate) chat_id: String,
    pub(crate) title: String,
    pub(crate) updated_at: String,
    /// The chat's project directory (our extension), absent for a chat in the workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) project: Option<String>,
}

/// Told of every change to a chat's history or title, after it is on disk (the search index,
/// the `search` module, installed by `app`). Called with the chat's lock held: implementations only
/// queue the news, at a small bounded cost.
pub(crate) trait HistoryObserver: Send + Sync {
    /// Records were appended: each line's byte offset in history.jsonl and its length (without
    /// the newline).
    fn appended(&self, chat: &str, lines: &[(u64, u32)]);
    /// The history was rewritten (rewind, undo): read it again.
    fn rewritten(&self, chat: &str);
    /// metadata.json was written (each turn writes it; the title may have changed).
    fn retitled(&self, chat: &str);
    /// The chat is gone.
    fn deleted(&self, chat: &str);
}

pub struct ChatStore {
    root: PathBuf,
    observer: std::sync::OnceLock<std::sync::Arc<dyn HistoryObserver>>,
    stripes: Vec<Mutex<()>>,
    /// chat id -> (history.jsonl length, last cursor) as this process last read or wrote it.
    /// While the file keeps that length nobody else wrote it: the next append needs neither
    /// `.cursor` nor the tail read again (and the file ends with a newline).
    tails: Mutex<HashMap<String, Tail>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Tail {
    len: u64,
    cursor: u64,
}

/// Chats whose tail is remembered; beyond that the map is cleared (tails are cheap to re-read).
const MAX_TAILS: usize = 4096;

/// `^[A-Za-z0-9_:-]{1,64}$`
pub(crate) fn valid_chat_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-'))
}

impl ChatStore {
    pub fn new(root: &Path) -> Self {
        ChatStore {
            root: root.to_path_buf(),
            observer: std::sync::OnceLock::new(),
            stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            tails: Mutex::new(HashMap::new()),
        }
    }

    /// Installs the one observer of history changes (a second is ignored).
    pub(crate) fn observe(&self, observer: std::sync::Arc<dyn HistoryObserver>) {
        let _ = self.observer.set(observer);
    }

    /// The memory root the chat directories live in.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    fn tell(&self, f: impl FnOnce(&dyn HistoryObserver)) {
        if let Some(o) = self.observer.get() {
            f(o.as_ref());
        }
    }

    /// The chat's directory; `None` for ids that are not valid chat ids.
    pub(crate) fn dir(&self, id: &str) -> Option<PathBuf> {
        valid_chat_id(id).then(|| self.root.join(id))
    }

    pub(crate) fn exists(&self, id: &str) -> bool {
        self.dir(id).is_some_and(|d| d.is_dir())
    }

    /// Every chat directory (non-hidden, valid id), newest first by history mtime.
    pub(crate) fn list(&self) -> io::Result<Vec<SessionInfo>> {
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !valid_chat_id(&name) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let dir = entry.path();
            let mtime = fs::metadata(dir.join("history.jsonl"))
                .or_else(|_| fs::metadata(&dir))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            let meta = self.read_metadata(&name);
            let title = meta
                .get("title")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .unwrap_or(DEFAULT_TITLE)
                .to_string();
            let project = meta.get("project").and_then(Value::as_str).map(str::to_string);
            out.push(SessionInfo { chat_id: name, title, updated_at: time::local_iso_naive(mtime), project });
        }
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.chat_id.cmp(&b.chat_id)));
        Ok(out)
    }

    /// Reads every parsable record of history.jsonl (missing file -> empty).
    pub(crate) fn read_history(&self, id: &str) -> io::Result<History> {
        let Some(dir) = self.dir(id) else {
            return Ok(History::default());
        };
        let bytes = match fs::read(dir.join("history.jsonl")) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(History::default()),
            Err(e) => return Err(e),
        };
        Ok(parse_history(&bytes))
    }

    /// Records the model context is rebuilt from (docs/storage.md §3.1 "Model context rebuild"):
    /// the last summary and the records it keeps, or everything when there is no summary.
    pub(crate) fn load_context(&self, id: &str) -> io::Result<History> {
        let mut h = self.read_history(id)?;
        h.records = context_after_summary(std::mem::take(&mut h.records));
        Ok(h)
    }

    /// [`ChatStore::load_context`] limited to the newest records weighing at most `max_chars`
    /// (0 = no limit), read from the end of the file (`store::tail`).
    pub(crate) fn load_context_within(&self, id: &str, max_chars: usize) -> io::Result<History> {
        if max_chars == 0 {
            return self.load_context(id);
        }
        let Some(dir) = self.dir(id) else {
            return Ok(History::default());
        };
        let (records, skipped_lines) = super::tail::load_context_within(&dir.join("history.jsonl"), max_chars)?;
        Ok(History { records, skipped_lines, torn_tail: false })
    }

    /// Path of a chat's history.jsonl, for readers in `store::tail` (None for a bad id).
    pub(crate) fn history_path(&self, id: &str) -> Option<PathBuf> {
        self.dir(id).map(|d| d.join("history.jsonl"))
    }

    /// Appends `records` as one write with consecutive cursors and one timestamp; fills in
    /// their `cursor` and `timestamp`. A torn tail gets a newline first so no record merges with it.
    pub fn append(&self, id: &str, records: &mut [Record]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let dir = self.dir(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid chat id"))?;
        let _g = self.stripe(id);
        self.append_locked(id, &dir, records, None)
    }

    /// [`ChatStore::append`] with the records' own timestamp `stamp` instead of the current
    /// minute (the recall eval loads dated conversations this way).
    pub fn append_stamped(&self, id: &str, records: &mut [Record], stamp: &str) -> io::Result<()> {
        let dir = self.dir(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid chat id"))?;
        let _g = self.stripe(id);
        self.append_locked(id, &dir, records, Some(stamp))
    }

    /// [`ChatStore::append`] only while the record with cursor `kept` is still in the history,
    /// checked under the chat's lock, so no chat rewind ([`ChatStore::rewind_history`], which
    /// takes out every record from its cut on) falls between the check and the append. A
    /// summary computed over records that were rewound is refused this way: `Ok(false)`.
    pub(crate) fn append_if_kept(&self, id: &str, kept: u64, records: &mut [Record]) -> io::Result<bool> {
        let dir = self.dir(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid chat id"))?;
        let _g = self.stripe(id);
        if !self.holds_cursor(id, kept)? {
            return Ok(false);
        }
        self.append_locked(id, &dir, records, None).map(|()| true)
    }

    /// Whether history.jsonl still holds the record with `cursor`: read line by line up to it,
    /// each line at most its first 2 MiB (`store::paging::records`), never loaded whole.
    pub(crate) fn holds_cursor(&self, id: &str, cursor: u64) -> io::Result<bool> {
        let Some(path) = self.history_path(id) else { return Ok(false) };
        let mut found = false;
        match super::paging::records(&path, |r| {
            found |= r.cursor == cursor;
            !found && r.cursor < cursor
        }) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
            Ok(_) => Ok(found),
        }
    }

    fn append_locked(&self, id: &str, dir: &Path, records: &mut [Record], stamp: Option<&str>) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let path = dir.join("history.jsonl");
        let mut file = fsx::open_append(&path)?;
        let len = file.metadata()?.len();
        let (mut cursor, newline) = match self.tail_of_len(id, Some(len)) {
            Some(t) => (t.cursor, false),
            None => (self.last_cursor(dir)?, needs_newline(&path)?),
        };
        let stamp = stamp.map_or_else(time::minute_stamp, str::to_string);
        let mut buf = Vec::with_capacity(records.len() * 128);
        if newline {
            buf.push(b'\n');
        }
        let mut lines = Vec::with_capacity(records.len());
        for r in records.iter_mut() {
            cursor += 1;
            r.cursor = cursor;
            r.timestamp = stamp.clone();
            let start = buf.len();
            serde_json::to_writer(&mut buf, r).map_err(io::Error::other)?;
            lines.push((len + start as u64, (buf.len() - start) as u32));
            buf.push(b'\n');
        }
        if let Err(e) = fsx::append_to(&mut file, len, &buf) {
            self.forget_tail(id);
            return Err(e);
        }
        self.remember_tail(id, Tail { len: len + buf.len() as u64, cursor });
        self.tell(|o| o.appended(id, &lines));
        fsx::overwrite_counter(&dir.join(".cursor"), cursor.to_string().as_bytes())?;
        Ok(())
    }

    /// The remembered tail, if history.jsonl still has its length.
    fn known_tail(&self, id: &str, path: &Path) -> io::Result<Option<Tail>> {
        Ok(self.tail_of_len(id, file_len(path)?))
    }

    /// The remembered tail, if history.jsonl's length is `len` (`None`: no file).
    fn tail_of_len(&self, id: &str, len: Option<u64>) -> Option<Tail> {
        sync::lock(&self.tails).get(id).copied().filter(|t| Some(t.len) == len)
    }

    fn remember_tail(&self, id: &str, tail: Tail) {
        let mut tails = sync::lock(&self.tails);
        if tails.len() >= MAX_TAILS && !tails.contains_key(id) {
            tails.clear();
        }
        tails.insert(id.to_string(), tail);
    }

    /// How many chats' tails are remembered.
    #[cfg(test)]
    pub(crate) fn remembered_tails(&self) -> usize {
        sync::lock(&self.tails).len()
    }

    /// Forgets the remembered tail of `id` (it is re-read from disk when needed).
    pub(crate) fn forget_tail(&self, id: &str) {
        sync::lock(&self.tails).remove(id);
    }

    /// Chat `id`'s last written cursor (cheap: `.cursor` and the history's last 4 KiB).
    pub(crate) fn last_cursor_of(&self, id: &str) -> io::Result<u64> {
        match self.dir(id) {
            Some(dir) => self.last_cursor(&dir),
            None => Ok(0),
        }
    }

    /// Last written cursor: `.cursor`, else the last line's cursor (last 4 KiB), else 0.
    fn last_cursor(&self, dir: &Path) -> io::Result<u64> {
        // The larger of `.cursor` and the last record's cursor: a crash between the history
        // append and the `.cursor` rewrite leaves `.cursor` stale, and trusting it alone would
        // hand out the same cursors again.
        let stored = fsx::read_opt(&dir.join(".cursor"))?.and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(0);
        let Some(mut f) = fsx::open_regular(&dir.join("history.jsonl"))? else { return Ok(stored) };
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(4096)))?;
        let mut tail = Vec::new();
        f.read_to_end(&mut tail)?;
        let h = parse_history(&tail);
        Ok(h.records.iter().map(|r| r.cursor).max().unwrap_or(0).max(stored))
    }

    /// Write-ahead for a turn that reached the model: the user record goes to
    /// `.pending_turn.json` (one write; recovery treats a blank or torn file as nothing
    /// pending) so a crash mid-turn cannot lose it. [`PendingTurn::end`] blanks it after the
    /// turn was appended (or failed while the process lived).
    pub(crate) fn begin_turn(&self, id: &str, user: &Record) -> io::Result<PendingTurn> {
        let dir = self.dir(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid chat id"))?;
        let start = match self.known_tail(id, &dir.join("history.jsonl"))? {
            Some(t) => t.cursor,
            None => self.last_cursor(&dir)?,
        };
        let body = serde_json::json!({"start_cursor": start, "record": user});
        fsx::write_ahead(&dir.join(PENDING), body.to_string().as_bytes()).map(|w| PendingTurn(w, start))
    }

    /// After a crash: appends the user message of every interrupted turn that is not already
    /// in history (the crash may have hit between the append and the blanking of its
    /// write-ahead). Returns how many chats were repaired.
    pub(crate) fn recover_pending(&self) -> usize {
        let Ok(rd) = fs::read_dir(&self.root) else { return 0 };
        let mut repaired = 0;
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pending = entry.path().join(PENDING);
            if !valid_chat_id(&name) || !pending.is_file() {
                continue;
            }
            let parsed = fs::read(&pending).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let record = parsed.as_ref().and_then(|v| serde_json::from_value::<Record>(v["record"].clone()).ok());
            let start = parsed.as_ref().and_then(|v| v["start_cursor"].as_u64()).unwrap_or(0);
            if let Some(mut rec) = record {
                let already = self
                    .read_history(&name)
                    .map(|h| h.records.iter().any(|r| r.cursor > start && r.role == "user" && r.content == rec.content))
                    .unwrap_or(false);
                if !already && self.append(&name, std::slice::from_mut(&mut rec)).is_ok() {
                    repaired += 1;
                }
            }
            let _ = fs::remove_file(&pending);
        }
        repaired
    }

    /// metadata.json as an object; missing or corrupt -> empty.
    pub(crate) fn read_metadata(&self, id: &str) -> Map<String, Value> {
        self.dir(id)
            .and_then(|d| fs::read(d.join("metadata.json")).ok())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| match v {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Rewrites metadata.json atomically (2-space indent, no trailing newline).
    pub(crate) fn write_metadata(&self, id: &str, meta: &Map<String, Value>) -> io::Result<()> {
        let dir = self.dir(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid chat id"))?;
        let text = serde_json::to_string_pretty(meta).map_err(io::Error::other)?;
        fsx::write_replace(&dir.join("metadata.json"), text.as_bytes())?;
        self.tell(|o| o.retitled(id));
        Ok(())
    }

    /// Rewinds the chat's history (docs/http-api.md "Rewind"): every line from the first record
    /// whose cursor is at least `cut_cursor` on moves, byte for byte, to the chat's archive
    /// ([`REWIND_ARCHIVE`], never read by consolidation or Dream), and history.jsonl is
    /// rewritten atomically with the lines before it. Cursors keep rising past the removed
    /// ones. Returns how many records moved.
    pub(crate) fn rewind_history(&self, id: &str, cut_cursor: u64, before_message: u64) -> io::Result<usize> {
        let dir = self.dir(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid chat id"))?;
        let _g = self.stripe(id);
        let path = dir.join("history.jsonl");
        let bytes = fs::read(&path)?;
        let lines: Vec<&[u8]> =
            bytes.split(|b| *b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)).collect();
        let cut = lines
            .iter()
            .position(|l| serde_json::from_slice::<Record>(l).is_ok_and(|r| r.cursor >= cut_cursor))
            .unwrap_or(lines.len());
        if cut == lines.len() {
            return Ok(0);
        }
        let kept_last = lines[..cut]
            .iter()
            .filter_map(|l| serde_json::from_slice::<Record>(l).ok())
            .map(|r| r.cursor)
            .max()
            .unwrap_or(0);
        let mut archive = self.read_archive(&dir);
        archive.push(Archived {
            before_message,
            kept_last,
            lines: lines[cut..].iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect(),
        });
        let last = self.last_cursor(&dir)?;
        self.write_archive(&dir, &archive)?;
        let mut kept = Vec::with_capacity(bytes.len());
        for l in &lines[..cut] {
            kept.extend_from_slice(l);
            kept.push(b'\n');
        }
        fsx::write_replace(&path, &kept)?;
        fsx::overwrite_counter(&dir.join(".cursor"), last.to_string().as_bytes())?;
        self.forget_tail(id);
        self.tell(|o| o.rewritten(id));
        Ok(lines.len() - cut)
    }

    /// Puts back the messages the last history rewind archived, if nothing was stored in the
    /// chat since. `Ok(Err(reason))` when there is nothing to restore or a turn came after it;
    /// else the archived `before_message`.
    pub(crate) fn undo_rewind(&self, id: &str) -> io::Result<Result<u64, UndoBlocked>> {
        self.undo_rewind_if(id, true)
    }

    /// Whether [`Chats::undo_rewind`] would put messages back now (and the rewind's index).
    pub(crate) fn can_undo_rewind(&self, id: &str) -> io::Result<Result<u64, UndoBlocked>> {
        self.undo_rewind_if(id, false)
    }

    fn undo_rewind_if(&self, id: &str, apply: bool) -> io::Result<Result<u64, UndoBlocked>> {
        let dir = self.dir(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid chat id"))?;
        let _g = self.stripe(id);
        let mut archive = self.read_archive(&dir);
        let Some(last) = archive.pop() else { return Ok(Err(UndoBlocked::Nothing)) };
        let path = dir.join("history.jsonl");
        let now_last = self.read_history(id)?.records.iter().map(|r| r.cursor).max().unwrap_or(0);
        if now_last != last.kept_last {
            return Ok(Err(UndoBlocked::NewerTurn));
        }
        if !apply {
            return Ok(Ok(last.before_message));
        }
        let mut buf = Vec::new();
        if needs_newline(&path)? {
            buf.push(b'\n');
        }
        for l in &last.lines {
            buf.extend_from_slice(l.as_bytes());
            buf.push(b'\n');
        }
        let mut file = fsx::open_append(&path)?;
        let len = file.metadata()?.len();
        fsx::append_to(&mut file, len, &buf)?;
        self.forget_tail(id);
        self.tell(|o| o.rewritten(id));
        self.write_archive(&dir, &archive)?;
        Ok(Ok(last.before_message))
    }

    fn read_archive(&self, dir: &Path) -> Vec<Archived> {
        fs::read(dir.join(REWIND_ARCHIVE)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    fn write_archive(&self, dir: &Path, archive: &[Archived]) -> io::Result<()> {
        let path = dir.join(REWIND_ARCHIVE);
        if archive.is_empty() {
            return match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        fsx::write_atomic(&path, &serde_json::to_vec(archive).map_err(io::Error::other)?, false)
    }

    /// Removes the chat directory; `Ok(false)` when it did not exist.
    pub(crate) fn delete(&self, id: &str) -> io::Result<bool> {
        let Some(dir) = self.dir(id) else {
            return Ok(false);
        };
        let _g = self.stripe(id);
        self.forget_tail(id);
        let removed = fs::remove_dir_all(&dir);
        self.tell(|o| o.deleted(id));
        match removed {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn stripe(&self, id: &str) -> std::sync::MutexGuard<'_, ()> {
        let mut h = DefaultHasher::new();
        id.hash(&mut h);
        sync::lock(&self.stripes[(h.finish() as usize) % LOCK_STRIPES])
    }
}

/// The file's length; `None` when it does not exist.
fn file_len(path: &Path) -> io::Result<Option<u64>> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn needs_newline(path: &Path) -> io::Result<bool> {
    let Some(mut f) = fsx::open_regular(path)? else { return Ok(false) };
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    f.seek(SeekFrom::Start(len - 1))?;
    let mut b = [0u8; 1];
    f.read_exact(&mut b)?;
    Ok(b[0] != b'\n')
}

/// Parses JSONL bytes, skipping blank and unparsable lines.
pub(crate) fn parse_history(bytes: &[u8]) -> History {
    let mut h = History { torn_tail: !bytes.is_empty() && !bytes.ends_with(b"\n"), ..History::default() };
    for line in bytes.split(|b| *b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(r) => h.records.push(r),
            Err(_) => h.skipped_lines += 1,
        }
    }
    h
}

/// The last summary (if any) followed by the records it keeps.
pub(crate) fn context_after_summary(records: Vec<Record>) -> Vec<Record> {
    let Some(si) = records.iter().rposition(|r| r.role == "summary") else {
        return records;
    };
    let summary = records[si].clone();
    let keep = |r: &Record| match summary.keep_from_cursor {
        Some(k) => r.cursor >= k,
        None => r.cursor > summary.cursor,
    };
    let mut out = Vec::with_capacity(records.len() - si);
    out.push(summary.clone());
    out.extend(records.into_iter().filter(|r| r.role != "summary" && keep(r)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (ChatStore, PathBuf) {
        let d = std::env::temp_dir().join(format!("cc-chats-{}", crate::util::rand::hex(6)));
        fs::create_dir_all(&d).unwrap();
        (ChatStore::new(&d), d)
    }

    #[test]
    fn ids_are_validated() {
        assert!(valid_chat_id("438ec720-df71-4ac3-ac72-74555a5c155a"));
        assert!(valid_chat_id("a:b_c"));
        assert!(!valid_chat_id(".."));
        assert!(!valid_chat_id(""));
        assert!(!valid_chat_id(&"a".repeat(65)));
        assert!(!valid_chat_id("a/b"));
    }

    #[test]
    fn append_assigns_cursors_and_survives_torn_tail() {
        let (s, d) = store();
        let mut recs = vec![Record::new("user", "hi"), Record::new("assistant", "hello")];
        s.append("c1", &mut recs).unwrap();
        assert_eq!((recs[0].cursor, recs[1].cursor), (1, 2));
        // Simulate a crash mid-write: a torn line and a lost .cursor.
        let hp = d.join("c1/history.jsonl");
        let mut bytes = fs::read(&hp).unwrap();
        bytes.extend_from_slice(br#"{"cursor": 3, "timestamp": "x", "role": "us"#);
        fs::write(&hp, &bytes).unwrap();
        fs::remove_file(d.join("c1/.cursor")).unwrap();
        let h = s.read_history("c1").unwrap();
        assert_eq!((h.records.len(), h.skipped_lines, h.torn_tail), (2, 1, true));
        let mut more = vec![Record::new("user", "again")];
        s.append("c1", &mut more).unwrap();
        assert_eq!(more[0].cursor, 3);
        let h = s.read_history("c1").unwrap();
        assert_eq!(h.records.iter().map(|r| r.content.as_str()).collect::<Vec<_>>(), ["hi", "hello", "again"]);
        // Another writer appends complete records: the remembered tail no longer matches.
        let mut other = fs::OpenOptions::new().append(true).open(&hp).unwrap();
        std::io::Write::write_all(&mut other, b"{\"cursor\": 9, \"role\": \"user\", \"content\": \"x\"}\n").unwrap();
        let mut next = vec![Record::new("user", "n")];
        s.append("c1", &mut next).unwrap();
        assert_eq!(next[0].cursor, 10);
        // The remembered tail (no other writer): consecutive cursors, no stray newline.
        s.append("c1", &mut next).unwrap();
        assert_eq!(next[0].cursor, 11);
        let text = fs::read_to_string(&hp).unwrap();
        assert!(!text.contains("\n\n") && text.ends_with('\n'));
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn reads_python_layout_and_summary_rules() {
        let text = concat!(
            "{\"cursor\": 1, \"timestamp\": \"2026-11-30 01:40\", \"role\": \"user\", \"content\": \"a\"}\n",
            "{\"cursor\": 2, \"timestamp\": \"2026-11-30 01:40\", \"role\": \"assistant\", \"content\": \"b\"}\n",
            "{\"cursor\": 3, \"timestamp\": \"2026-11-30 01:41\", \"role\": \"user\", \"content\": \"c\"}\n",
            "{\"cursor\": 4, \"timestamp\": \"2026-11-30 01:41\", \"role\": \"summary\", \"content\": \"S\", \"keep_from_cursor\": 3}\n",
            "{\"cursor\": 5, \"timestamp\": \"2026-11-30 01:42\", \"role\": \"assistant\", \"content\": \"d\"}\n",
        );
        let h = parse_history(text.as_bytes());
        let ctx = context_after_summary(h.records);
        assert_eq!(ctx.iter().map(|r| r.content.as_str()).collect::<Vec<_>>(), ["S", "c", "d"]);
    }

    #[test]
    fn a_fifo_planted_as_a_history_is_an_error_not_a_hang() {
        let (s, d) = store();
        fs::create_dir_all(d.join("c9")).unwrap();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
        nix::unistd::mkfifo(&d.join("c9").join("history.jsonl"), mode).unwrap();
        nix::unistd::mkfifo(&d.join("c9").join(".cursor"), mode).unwrap();
        // Each would block in open(2) until a writer came, holding the turn's worker.
        assert_eq!(s.last_cursor_of("c9").unwrap_err().kind(), io::ErrorKind::InvalidData);
        let tail = crate::store::tail::for_each_line_rev(&d.join("c9").join("history.jsonl"), |_| true);
        assert_eq!(tail.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(needs_newline(&d.join("c9").join("history.jsonl")).is_err());
        assert!(fsx::read_opt(&d.join("c9").join("missing")).unwrap().is_none());
    }

    #[test]
    fn pending_turn_is_recovered_once() {
        let (s, d) = store();
        fs::create_dir_all(d.join("c3")).unwrap();
        s.begin_turn("c3", &Record::new("user", "lost?")).unwrap();
        // crash: nothing appended
        assert_eq!(s.recover_pending(), 1);
        assert_eq!(s.recover_pending(), 0);
        // crash after the append but before the pending turn ended: no duplicate
        s.begin_turn("c3", &Record::new("user", "again")).unwrap();
        s.append("c3", &mut [Record::new("user", "again"), Record::new("assistant", "ok")]).unwrap();
        assert_eq!(s.recover_pending(), 0);
        // a turn that ended leaves a blank file behind, which holds nothing to recover
        let pending = s.begin_turn("c3", &Record::new("user", "not lost")).unwrap();
        pending.end();
        let blank = fs::read(d.join("c3").join(PENDING)).unwrap();
        assert!(!blank.is_empty() && blank.iter().all(|b| *b == b' '));
        assert_eq!(s.recover_pending(), 0);
        let contents: Vec<String> = s.read_history("c3").unwrap().records.into_iter().map(|r| r.content).collect();
        assert_eq!(contents, ["lost?", "again", "ok"]);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn metadata_roundtrip_keeps_unknown_keys() {
        let (s, d) = store();
        fs::create_dir_all(d.join("c2")).unwrap();
        fs::write(d.join("c2/metadata.json"), r#"{"title": "T", "custom": {"x": 1}}"#).unwrap();
        let mut m = s.read_metadata("c2");
        m.insert("title".into(), Value::String("New".into()));
        s.write_metadata("c2", &m).unwrap();
        let back = s.read_metadata("c2");
        assert_eq!(back["custom"]["x"], 1);
        assert_eq!(back["title"], "New");
        assert_eq!(s.list().unwrap()[0].title, "New");
        assert!(s.delete("c2").unwrap());
        assert!(!s.delete("c2").unwrap());
        fs::remove_dir_all(d).unwrap();
    }
}
