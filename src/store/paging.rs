//! Paging `history.jsonl` for `GET /api/sessions/{id}/messages?limit=N[&before=K]`: a small
//! per-file index (item count and the byte offset of every `STEP`-th item) kept across requests
//! and extended by the bytes appended since, so a page costs one short read, not a scan of the
//! whole history. Runs on the HTTP thread; the index of a 100,000-item chat is a few KiB.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::tail::{blank, quick_role};
use crate::util::sync;

/// Items between two remembered offsets.
const STEP: usize = 256;
/// Bytes read per step.
const BLOCK: usize = 64 * 1024;
/// Files whose index is kept (the least recently used beyond it is dropped).
const MAX_FILES: usize = 64;
/// Bytes before the indexed length that must still be the same for the index to be extended.
const SIG: usize = 64;

/// Which records are items: the role of a line, read cheaply.
pub(crate) type Item = fn(&[u8]) -> bool;

/// One page of the messages endpoint: the item lines `start..start + lines.len()` in file
/// order and how many items the history holds.
pub(crate) struct Page {
    pub(crate) total: usize,
    pub(crate) start: usize,
    pub(crate) lines: Vec<Vec<u8>>,
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

/// Calls `f(line, offset)` for every complete line from `from` on; returns the offset just
/// after the last newline (the end of what was read as lines) and the unterminated rest.
fn scan(file: &mut fs::File, from: u64, mut f: impl FnMut(&[u8], u64) -> bool) -> io::Result<(u64, Vec<u8>)> {
    file.seek(SeekFrom::Start(from))?;
    let mut offset = from;
    let mut carry: Vec<u8> = Vec::new();
    let mut block = vec![0u8; BLOCK];
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            return Ok((offset, carry));
        }
        carry.extend_from_slice(&block[..n]);
        let mut at = 0;
        while let Some(nl) = memchr::memchr(b'\n', &carry[at..]) {
            if !f(&carry[at..at + nl], offset + at as u64) {
                return Ok((offset + (at + nl + 1) as u64, Vec::new()));
            }
            at += nl + 1;
        }
        carry.drain(..at);
        offset += at as u64;
    }
}

fn is_item(line: &[u8], item: Item) -> bool {
    !blank(line) && quick_role(line).is_some_and(item)
}

/// Brings `idx` (possibly a fresh one) up to the file's last newline; returns the rest.
fn extend(idx: &mut Index, file: &mut fs::File, item: Item) -> io::Result<Vec<u8>> {
    let (mut items, mut marks) = (idx.items, std::mem::take(&mut idx.marks));
    let (end, rest) = scan(file, idx.len, |line, at| {
        if is_item(line, item) {
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
    let mut file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Page { total: 0, start: 0, lines: Vec::new() }),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let ino = (meta.dev(), meta.ino());
    let key: Key = (path.to_path_buf(), item as usize);
    let mut guard = sync::lock(cache());
    let (map, clock) = &mut *guard;
    *clock += 1;
    let mut idx = match map.remove(&key) {
        Some(idx) if still_valid(&idx, ino, meta.len(), &mut file)? => idx,
        _ => Index { ino, len: 0, sig: Vec::new(), items: 0, marks: Vec::new(), used: 0 },
    };
    let rest = extend(&mut idx, &mut file, item)?;
    idx.used = *clock;
    // A last line still being written counts for this answer only.
    let tail_item = !rest.is_empty() && is_item(&rest, item);
    let total = idx.items + usize::from(tail_item);
    let end = before.unwrap_or(total).min(total);
    let start = end.saturating_sub(limit);
    let mut lines = Vec::with_capacity(end - start);
    if start < end {
        let mark = start / STEP;
        let mut n = mark * STEP;
        if n < idx.items {
            scan(&mut file, idx.marks[mark], |line, _| {
                if n >= end {
                    return false;
                }
                if is_item(line, item) {
                    if n >= start {
                        lines.push(line.to_vec());
                    }
                    n += 1;
                }
                n < end
            })?;
        }
        if tail_item && end == total && lines.len() < end - start {
            lines.push(rest);
        }
    }
    map.insert(key, idx);
    if map.len() > MAX_FILES {
        if let Some(old) = map.iter().min_by_key(|(_, i)| i.used).map(|(k, _)| k.clone()) {
            map.remove(&old);
        }
    }
    Ok(Page { total, start, lines })
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
        assert!(String::from_utf8_lossy(&pg.lines[2]).contains("m48"));
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
                    let got: Vec<String> = pg.lines.iter().map(|l| String::from_utf8(l.clone()).unwrap()).collect();
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
        assert!(String::from_utf8_lossy(&pg.lines[1]).contains("partial"));
        fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }
}
