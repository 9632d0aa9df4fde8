//! Paging `history.jsonl` for `GET /api/sessions/{id}/messages?limit=N[&before=K]`: a small
//! per-file index (item count and the byte offset of every `STEP`-th item) kept across requests
//! and extended by the bytes appended since, so a page costs one short read, not a scan of the
//! whole history. Lines are read in one pass (a long line costs its length, once) and only
//! their first [`MAX_ITEM_BYTES`] are kept; a page holds at most [`MAX_PAGE_BYTES`]. Runs on an
//! `http-slow` thread; the index cache's lock is never held over file reads. The index of a
//! 100,000-item chat is a few KiB.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::chats::Record;
use super::tail::{blank, quick_role, quick_role_head};
use crate::util::{fsx, sync};

/// Items between two remembered offsets.
const STEP: usize = 256;
/// Bytes read per step.
const BLOCK: usize = 64 * 1024;
/// Files whose index is kept (the least recently used beyond it is dropped).
const MAX_FILES: usize = 64;
/// Bytes before the indexed length that must still be the same for the index to be extended.
const SIG: usize = 64;
/// Bytes of one item a page holds: a longer line is served cut ([`PagedLine::record`]).
pub(crate) const MAX_ITEM_BYTES: usize = 2 * 1024 * 1024;
/// Bytes of items one page holds: past it the page starts later (fewer items, `start` says
/// where), so one page never holds more than this and one item.
pub(crate) const MAX_PAGE_BYTES: usize = 16 * 1024 * 1024;

/// Which records are items: the role of a line, read cheaply.
pub(crate) type Item = fn(&[u8]) -> bool;

/// One page of the messages endpoint: the item lines `start..start + lines.len()` in file
/// order and how many items the history holds.
pub(crate) struct Page {
    pub(crate) total: usize,
    pub(crate) start: usize,
    pub(crate) lines: Vec<PagedLine>,
}

/// One item's line: its first [`MAX_ITEM_BYTES`] and its whole length.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PagedLine {
    pub(crate) head: Vec<u8>,
    pub(crate) len: u64,
}

impl PagedLine {
    fn new(head: &[u8], len: u64) -> PagedLine {
        PagedLine { head: head.to_vec(), len }
    }

    /// Whether the line is longer than what was kept.
    pub(crate) fn is_cut(&self) -> bool {
        self.len > self.head.len() as u64
    }

    /// The record; `None` when the line does not parse. A cut line gives the fields before
    /// its `content` (cursor, timestamp, role) and the start of the content that was kept,
    /// followed by a note saying how long it is (the fields after the content are lost).
    pub(crate) fn record(&self) -> Option<Record> {
        if !self.is_cut() {
            return serde_json::from_slice(&self.head).ok();
        }
        let role = std::str::from_utf8(quick_role_head(&self.head)?).ok()?;
        let mut r = fields_before_content(&self.head)
            .filter(|r| r.role == role)
            .unwrap_or_else(|| Record::new(role, String::new()));
        r.content = content_start(&self.head).unwrap_or_default();
        r.content.push_str(&cut_note(self.len));
        Some(r)
    }
}

/// What a cut item's content ends with.
pub(crate) fn cut_note(len: u64) -> String {
    format!("\n\n[Cut here: this message is {len} bytes; a page shows its first {MAX_ITEM_BYTES}.]")
}

/// The record of the fields a cut line holds before `"content":` (the store writes `cursor`,
/// `timestamp` and `role` first): that part, closed as an object, parsed by serde.
fn fields_before_content(head: &[u8]) -> Option<Record> {
    let key = b",\"content\":";
    let at = head.windows(key.len()).position(|w| w == key)?;
    let mut obj = head[..at].to_vec();
    obj.push(b'}');
    serde_json::from_slice(&obj).ok()
}

/// Calls `f` with every record of the history in file order (an unterminated last line
/// included) until it returns false; a line longer than [`MAX_ITEM_BYTES`] gives its cut
/// record ([`PagedLine::record`]), lines that do not parse are skipped. Memory: one block and
/// one item's head, however long the lines (Dream reads pending records with it).
pub(crate) fn records(path: &Path, mut f: impl FnMut(Record) -> bool) -> io::Result<()> {
    let mut file = match fsx::open_regular(path)? {
        Some(file) => file,
        None => return Ok(()),
    };
    let mut go_on = true;
    let mut each = |head: &[u8], len: u64| {
        if !blank(head) {
            let line = PagedLine { head: head.to_vec(), len };
            if let Some(r) = line.record() {
                go_on = f(r);
            }
        }
        go_on
    };
    let (_, rest) = scan(&mut file, 0, |head, len, _| each(head, len))?;
    if rest.len > 0 {
        each(&rest.head, rest.len);
    }
    Ok(())
}

/// The decoded start of the `content` string of a record line cut inside it (records are
/// written with `content` after `cursor`, `timestamp` and `role`, none of which can hold the
/// key). JSON decoding is serde's: the kept bytes are closed as a string, less a few at the
/// end while they end inside an escape or a UTF-8 sequence.
fn content_start(head: &[u8]) -> Option<String> {
    let key = b"\"content\":\"";
    let at = head.windows(key.len()).position(|w| w == key)? + key.len();
    let body = &head[at..];
    // A content that ends before the cut (a cut in a later field): up to its closing quote.
    let mut escaped = false;
    for (i, b) in body.iter().enumerate() {
        match (escaped, b) {
            (false, b'\\') => escaped = true,
            (false, b'"') => return serde_json::from_slice(&head[at - 1..at + i + 1]).ok(),
            _ => escaped = false,
        }
    }
    // `\uXXXX\uXXXX` is the longest piece that only decodes whole.
    (0..=12.min(body.len())).find_map(|less| {
        let mut quoted = Vec::with_capacity(body.len() + 2);
        quoted.push(b'"');
        quoted.extend_from_slice(&body[..body.len() - less]);
        quoted.push(b'"');
        serde_json::from_slice::<String>(&quoted).ok()
    })
}

/// What is known of one file up to `len` (always just after a newline).
struct Index {
    ino: (u64, u64),
    len: u64,
    sig: Vec<u8>,
    items: usize,
    /// `marks[i]` = byte offset of item `i * STEP`.
    marks: Vec<u64>,
    used: u64,
}

type Key = (PathBuf, usize);

fn cache() -> &'static Mutex<(HashMap<Key, Index>, u64)> {
    static CACHE: OnceLock<Mutex<(HashMap<Key, Index>, u64)>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new((HashMap::new(), 0)))
}

fn read_at(file: &mut fs::File, at: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.seek(SeekFrom::Start(at))?;
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// The unterminated end of a scan: its first [`MAX_ITEM_BYTES`] and its length.
type Rest = PagedLine;

/// Calls `f(head, len, offset)` for every complete line from `from` on, `head` being the
/// line's first [`MAX_ITEM_BYTES`] and `len` its length; returns the offset just after the last
/// newline (the end of what was read as lines) and the unterminated rest. Every byte is looked
/// at once: a long line is never searched again from its start.
fn scan(file: &mut fs::File, from: u64, mut f: impl FnMut(&[u8], u64, u64) -> bool) -> io::Result<(u64, Rest)> {
    file.seek(SeekFrom::Start(from))?;
    // Where the current line starts, its kept head and its length so far.
    let mut offset = from;
    let mut head: Vec<u8> = Vec::new();
    let mut len = 0u64;
    let keep = |head: &mut Vec<u8>, bytes: &[u8]| {
        let room = MAX_ITEM_BYTES.saturating_sub(head.len());
        head.extend_from_slice(&bytes[..bytes.len().min(room)]);
    };
    let mut block = vec![0u8; BLOCK];
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            return Ok((offset, PagedLine { head, len }));
        }
        let mut at = 0;
        while let Some(nl) = memchr::memchr(b'\n', &block[at..n]) {
            let piece = &block[at..at + nl];
            len += nl as u64;
            let go_on = if head.is_empty() && len == nl as u64 {
                // The whole line is in this block: no copy.
                f(&piece[..piece.len().min(MAX_ITEM_BYTES)], len, offset)
            } else {
                keep(&mut head, piece);
                f(&head, len, offset)
            };
            offset += len + 1;
            if !go_on {
                return Ok((offset, PagedLine { head: Vec::new(), len: 0 }));
            }
            head.clear();
            len = 0;
            at += nl + 1;
        }
        keep(&mut head, &block[at..n]);
        len += (n - at) as u64;
    }
}

/// Whether a line (of which `head` was kept, `len` bytes in all) is an item.
fn is_item(head: &[u8], len: u64, item: Item) -> bool {
    let role = if len > head.len() as u64 { quick_role_head(head) } else { quick_role(head) };
    !blank(head) && role.is_some_and(item)
}

/// Brings `idx` (possibly a fresh one) up to the file's last newline; returns the rest.
fn extend(idx: &mut Index, file: &mut fs::File, item: Item) -> io::Result<Rest> {
    let (mut items, mut marks) = (idx.items, std::mem::take(&mut idx.marks));
    let (end, rest) = scan(file, idx.len, |line, len, at| {
        if is_item(line, len, item) {
            if items % STEP == 0 {
                marks.push(at);
            }
            items += 1;
        }
        true
    })?;
    idx.items = items;
    idx.marks = marks;
    if end != idx.len {
        let from = end.saturating_sub(SIG as u64);
        idx.sig = read_at(file, from, (end - from) as usize)?;
        idx.len = end;
    }
    Ok(rest)
}

/// Whether the cached index still describes the start of the file (same inode, not shorter,
/// the bytes before its end unchanged): history is append-only, a rewrite starts over.
fn still_valid(idx: &Index, ino: (u64, u64), len: u64, file: &mut fs::File) -> io::Result<bool> {
    if idx.ino != ino || len < idx.len {
        return Ok(false);
    }
    let from = idx.len - idx.sig.len() as u64;
    Ok(read_at(file, from, idx.sig.len())? == idx.sig)
}

/// The at most `limit` items just before item index `before` (default: the end), where an
/// item is a line whose role passes `item`.
pub(crate) fn page(path: &Path, limit: usize, before: Option<usize>, item: Item) -> io::Result<Page> {
    let Some(mut file) = fsx::open_regular(path)? else {
        return Ok(Page { total: 0, start: 0, lines: Vec::new() });
    };
    let meta = file.metadata()?;
    let ino = (meta.dev(), meta.ino());
    let key: Key = (path.to_path_buf(), item as usize);
    // The index is taken out of the cache for the file reads and put back after, so the
    // cache's lock is held only for map operations (a request paging one long history never
    // holds up another's). Two requests for one file at once each build their own.
    let taken = sync::lock(cache()).0.remove(&key);
    let mut idx = match taken {
        Some(idx) if still_valid(&idx, ino, meta.len(), &mut file)? => idx,
        _ => Index { ino, len: 0, sig: Vec::new(), items: 0, marks: Vec::new(), used: 0 },
    };
    let rest = extend(&mut idx, &mut file, item)?;
    // A last line still being written counts for this answer only.
    let tail_item = rest.len > 0 && is_item(&rest.head, rest.len, item);
    let total = idx.items + usize::from(tail_item);
    let end = before.unwrap_or(total).min(total);
    let mut start = end.saturating_sub(limit);
    let mut lines = std::collections::VecDeque::with_capacity(end - start);
    let mut bytes = 0usize;
    // Keeps the page within MAX_PAGE_BYTES by letting its oldest items go.
    let mut add = |lines: &mut std::collections::VecDeque<PagedLine>, line: PagedLine, start: &mut usize| {
        bytes += line.head.len();
        lines.push_back(line);
        while bytes > MAX_PAGE_BYTES && lines.len() > 1 {
            if let Some(old) = lines.pop_front() {
                bytes -= old.head.len();
                *start += 1;
            }
        }
    };
    if start < end {
        let mark = start / STEP;
        let mut n = mark * STEP;
        let first = start;
        if n < idx.items {
            scan(&mut file, idx.marks[mark], |line, len, _| {
                if n >= end {
                    return false;
                }
                if is_item(line, len, item) {
                    if n >= first {
                        add(&mut lines, PagedLine::new(line, len), &mut start);
                    }
                    n += 1;
                }
                n < end
            })?;
        }
        if tail_item && end == total && start + lines.len() < end {
            add(&mut lines, rest, &mut start);
        }
    }
    let mut guard = sync::lock(cache());
    let (map, clock) = &mut *guard;
    *clock += 1;
    idx.used = *clock;
    map.insert(key, idx);
    if map.len() > MAX_FILES {
        if let Some(old) = map.iter().min_by_key(|(_, i)| i.used).map(|(k, _)| k.clone()) {
            map.remove(&old);
        }
    }
    Ok(Page { total, start, lines: lines.into() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tail::quick_role;
    use crate::store::tail::tests::{line, write};

    fn user(r: &[u8]) -> bool {
        r == b"user"
    }

    #[test]
    fn pages_count_items_and_cut_before() {
        let mut lines = Vec::new();
        for i in 0..50u64 {
            lines.push(line(i + 1, if i % 5 == 4 { "tool" } else { "user" }, &format!("m{i}")));
        }
        lines.push("not json".into());
        let p = write(&lines);
        let item: Item = user;
        let pg = page(&p, 3, None, item).unwrap();
        assert_eq!((pg.total, pg.start, pg.lines.len()), (40, 37, 3));
        assert!(String::from_utf8_lossy(&pg.lines[2].head).contains("m48"));
        let pg = page(&p, 3, Some(2), item).unwrap();
        assert_eq!((pg.start, pg.lines.len()), (0, 2));
        let pg = page(&p, 10, Some(0), item).unwrap();
        assert_eq!((pg.start, pg.lines.len()), (0, 0));
        let pg = page(&p, 10, Some(1000), item).unwrap();
        assert_eq!((pg.start, pg.lines.len()), (30, 10));
        assert_eq!(quick_role(br#"{"content":"\"role\":\"x\"","role": "user"}"#), Some(&b"user"[..]));
    }

    /// Every page of every size agrees with a plain filter of the file, while the file grows
    /// (the index is extended) and after it is rewritten (the index starts over).
    #[test]
    fn pages_match_a_plain_filter_as_the_file_grows_and_is_rewritten() {
        let mut lines: Vec<String> = Vec::new();
        let p = write(&[]);
        let check = |lines: &[String]| {
            let items: Vec<&String> = lines.iter().filter(|l| quick_role(l.as_bytes()) == Some(b"user")).collect();
            for limit in [1, 7, 256, 300, 1000] {
                for before in
                    [None, Some(0), Some(1), Some(255), Some(256), Some(257), Some(items.len()), Some(usize::MAX)]
                {
                    let pg = page(&p, limit, before, user).unwrap();
                    let end = before.unwrap_or(items.len()).min(items.len());
                    let start = end.saturating_sub(limit);
                    assert_eq!((pg.total, pg.start), (items.len(), start), "limit {limit} before {before:?}");
                    let got: Vec<String> =
                        pg.lines.iter().map(|l| String::from_utf8(l.head.clone()).unwrap()).collect();
                    let want: Vec<String> = items[start..end].iter().map(|s| s.to_string()).collect();
                    assert_eq!(got, want, "limit {limit} before {before:?}");
                }
            }
        };
        for round in 0..4u64 {
            for i in 0..700u64 {
                let role = if i % 3 == 2 { "tool" } else { "user" };
                lines.push(line(round * 1000 + i, role, &format!("r{round} m{i} {}", "x".repeat((i % 13) as usize))));
            }
            fs::write(&p, lines.join("\n") + "\n").unwrap();
            check(&lines);
        }
        // A rewrite of the same length with other content is noticed.
        let rewritten: Vec<String> = lines.iter().map(|l| l.replace("\"user\"", "\"usex\"")).collect();
        fs::write(&p, rewritten.join("\n") + "\n").unwrap();
        assert_eq!(page(&p, 10, None, user).unwrap().total, 0);
        // An unterminated last line counts, and is served, until it is finished.
        lines.truncate(10);
        let mut text = lines.join("\n") + "\n";
        text.push_str(&line(99, "user", "partial"));
        fs::write(&p, &text).unwrap();
        let pg = page(&p, 2, None, user).unwrap();
        let n = lines.iter().filter(|l| l.contains("\"user\"")).count();
        assert_eq!((pg.total, pg.lines.len()), (n + 1, 2));
        assert!(String::from_utf8_lossy(&pg.lines[1].head).contains("partial"));
        fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    /// A record line as the store writes it (`role` before `content`).
    fn rec_line(cursor: u64, role: &str, content: &str) -> String {
        let mut r = Record::new(role, content.to_string());
        r.cursor = cursor;
        serde_json::to_string(&r).unwrap()
    }

    /// Lines far longer than a block and than the item cap: the index and the pages are right,
    /// a long item comes cut to its first bytes with the note, and a page keeps within its
    /// byte bound by starting later.
    #[test]
    fn long_lines_are_paged_in_one_pass_and_served_cut() {
        let huge = format!("{}\n\"é\"{}", "a".repeat(MAX_ITEM_BYTES - 3), "b".repeat(3 * MAX_ITEM_BYTES));
        let mut lines = vec![rec_line(1, "user", "q1"), rec_line(2, "assistant", &huge), rec_line(3, "user", "q2")];
        for i in 0..9 {
            lines.push(rec_line(4 + i, "assistant", &"m".repeat(MAX_ITEM_BYTES - 200)));
        }
        lines.push(rec_line(13, "user", "last"));
        let p = write(&lines);
        let pg = page(&p, 3, Some(3), user_or_assistant).unwrap();
        assert_eq!((pg.total, pg.start, pg.lines.len()), (13, 0, 3));
        let cut = &pg.lines[1];
        assert!(cut.is_cut() && cut.head.len() == MAX_ITEM_BYTES && cut.len == lines[1].len() as u64);
        let r = cut.record().unwrap();
        assert_eq!((r.role.as_str(), r.cursor), ("assistant", 2));
        let kept = r.content.strip_suffix(&cut_note(cut.len)).expect("the note ends it");
        assert!(huge.starts_with(kept) && kept.len() > MAX_ITEM_BYTES - 100, "{}", kept.len());
        assert_eq!(pg.lines[2].record().unwrap().content, "q2");
        // 11 items asked for, ~2 MiB each: the page holds the newest that fit 16 MiB.
        let pg = page(&p, 11, None, user_or_assistant).unwrap();
        let bytes: usize = pg.lines.iter().map(|l| l.head.len()).sum();
        assert!(bytes <= MAX_PAGE_BYTES, "{bytes}");
        assert_eq!(pg.start + pg.lines.len(), 13);
        // "last" and eight of the items just under 2 MiB.
        assert_eq!(pg.lines.len(), 9);
        assert!(pg.lines.last().unwrap().record().unwrap().content == "last");
        fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    fn user_or_assistant(r: &[u8]) -> bool {
        r == b"user" || r == b"assistant"
    }

    /// A line cut anywhere in its content gives the decoded start of it: never a broken
    /// escape or character, and a cut after the content keeps the whole content.
    #[test]
    fn a_cut_content_decodes_up_to_the_cut() {
        let content = "x\"\\\u{1}é😀\n末";
        let full = rec_line(7, "assistant", content);
        for cut in 0..full.len() {
            let got = content_start(&full.as_bytes()[..cut]);
            let at = full.find("\"content\":\"").unwrap() + 11;
            if cut < at {
                assert_eq!(got, None, "{cut}");
            } else {
                let got = got.unwrap_or_else(|| panic!("cut at {cut}"));
                assert!(content.starts_with(&got), "{cut}: {got:?}");
            }
        }
        assert_eq!(content_start(full.as_bytes()).as_deref(), Some(content));
    }
}
