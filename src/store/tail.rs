//! Reading history.jsonl from its end without loading it: a backward line reader in fixed
//! blocks, the budget-bounded context load built on it, and the cheap role scan paging uses
//! ([`super::paging`]). Pure file reads; run on workers (a chat's first
//! use) and the HTTP thread (paging). Memory is one block plus what the caller keeps.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::chats::Record;
use crate::util::fsx;

/// Bytes read per step when walking backwards.
const BLOCK: usize = 64 * 1024;

/// Calls `f` with each line of the file from the last to the first (without the newline;
/// blank pieces included, callers skip them) until it returns false. A missing file has none.
/// A line longer than a block is read again in one piece once its start is found, so each
/// byte is read at most twice (never once per block the line spans).
pub(crate) fn for_each_line_rev(path: &Path, mut f: impl FnMut(&[u8]) -> bool) -> io::Result<()> {
    let Some(mut file) = fsx::open_regular(path)? else { return Ok(()) };
    let mut pos = file.metadata()?.len();
    // Where the line being looked for ends (its newline, or the end of the file).
    let mut end = pos;
    let mut block = vec![0u8; BLOCK];
    let mut n = 0;
    while pos > 0 {
        n = (pos as usize).min(BLOCK);
        pos -= n as u64;
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut block[..n])?;
        // Lines whose start is in this block.
        let mut stop = n;
        while let Some(nl) = memchr::memrchr(b'\n', &block[..stop]) {
            let start = pos + nl as u64 + 1;
            let go_on = if end <= pos + n as u64 {
                f(&block[nl + 1..(end - pos) as usize])
            } else {
                f(&read_range(&mut file, start, end)?)
            };
            if !go_on {
                return Ok(());
            }
            end = start - 1;
            stop = nl;
        }
    }
    // The first line; `block` holds the file's first `n` bytes.
    if end > 0 {
        if end <= n as u64 {
            f(&block[..end as usize]);
        } else {
            f(&read_range(&mut file, 0, end)?);
        }
    }
    Ok(())
}

/// Bytes `start..end` of the file.
fn read_range(file: &mut fs::File, start: u64, end: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; (end - start) as usize];
    file.seek(SeekFrom::Start(start))?;
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// True for a line that holds nothing.
pub(crate) fn blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// The value of a record line's `role`, read without parsing: the first `"role"` key outside
/// a string escape, then `:` and a string. `None` when the line is not an object with one.
pub(crate) fn quick_role(line: &[u8]) -> Option<&[u8]> {
    if !line.trim_ascii_end().ends_with(b"}") {
        return None;
    }
    quick_role_head(line)
}

/// [`quick_role`] of a line of which only the start is at hand (its end is not checked).
pub(crate) fn quick_role_head(line: &[u8]) -> Option<&[u8]> {
    let line = line.trim_ascii();
    if !line.starts_with(b"{") {
        return None;
    }
    let key = b"\"role\"";
    let mut from = 0;
    loop {
        let at = from + line[from..].windows(key.len()).position(|w| w == key)?;
        if at > 0 && line[at - 1] == b'\\' {
            from = at + 1;
            continue;
        }
        let rest = line[at + key.len()..].trim_ascii_start();
        let rest = rest.strip_prefix(b":")?.trim_ascii_start().strip_prefix(b"\"")?;
        let close = rest.iter().position(|b| *b == b'"' || *b == b'\\')?;
        return Some(&rest[..close]);
    }
}

/// Characters a record weighs in the context (what its model message costs, roughly).
pub(crate) fn weight(r: &Record) -> usize {
    r.content.chars().count()
        + r.tool_calls.as_ref().map_or(0, |v| v.to_string().len())
        + r.reasoning_content.as_ref().map_or(0, String::len)
        + r.provider_state.as_ref().map_or(0, |v| v.to_string().len())
        + 48
}

/// The model context of a chat (docs/storage.md §3.1: the last summary and the records it keeps),
/// limited to the newest records weighing at most `max_chars`; a cut lands on a user record so
/// no tool step loses its call. Reads backwards: only the kept tail is parsed, and lines
/// further back are only searched for the summary. Returns the records and the unparsable
/// lines met.
pub(crate) fn load_context_within(path: &Path, max_chars: usize) -> io::Result<(Vec<Record>, usize)> {
    let mut rev: Vec<Record> = Vec::new();
    let mut summary: Option<Record> = None;
    let mut chars = 0usize;
    let mut full = false;
    let mut skipped = 0usize;
    for_each_line_rev(path, |line| {
        if blank(line) {
            return true;
        }
        if full && quick_role(line) != Some(b"summary") {
            return true;
        }
        let Ok(r) = serde_json::from_slice::<Record>(line) else {
            skipped += 1;
            return true;
        };
        if let Some(s) = &summary {
            let kept = r.role != "summary" && s.keep_from_cursor.is_some_and(|k| r.cursor >= k);
            if kept && !full {
                chars += weight(&r);
                rev.push(r);
                full = chars > max_chars;
                return true;
            }
            return r.role == "summary" || s.keep_from_cursor.is_some_and(|k| r.cursor >= k);
        }
        if r.role == "summary" {
            // Records already taken are after it, hence kept; the ones before it need the cursor.
            let k = r.keep_from_cursor;
            let s_cursor = r.cursor;
            rev.retain(|x| match k {
                Some(k) => x.cursor >= k,
                None => x.cursor > s_cursor,
            });
            summary = Some(r);
            return !full && k.is_some();
        }
        chars += weight(&r);
        rev.push(r);
        full = chars > max_chars;
        true
    })?;
    rev.reverse();
    if chars > max_chars {
        // Drop the oldest records until the rest fits, then up to the next user record.
        let mut cut = 0;
        while cut < rev.len() && chars > max_chars {
            chars -= weight(&rev[cut]);
            cut += 1;
        }
        while cut < rev.len() && rev[cut].role != "user" {
            cut += 1;
        }
        rev.drain(..cut);
    }
    let mut out = Vec::with_capacity(rev.len() + 1);
    out.extend(summary);
    out.extend(rev);
    Ok((out, skipped))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn write(lines: &[String]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("cc-tail-{}", crate::util::rand::hex(6)));
        fs::create_dir_all(&d).unwrap();
        let p = d.join("history.jsonl");
        fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    }

    pub(crate) fn line(cursor: u64, role: &str, content: &str) -> String {
        serde_json::json!({"cursor": cursor, "timestamp": "", "role": role, "content": content}).to_string()
    }

    #[test]
    fn lines_come_back_reversed_across_blocks() {
        let mut lines: Vec<String> = (0..5000).map(|i| line(i + 1, "user", &"x".repeat((i % 97) as usize))).collect();
        // Lines longer than a block, around block sizes, and first in the file.
        for (at, len) in [(0, 3 * BLOCK + 5), (10, BLOCK), (11, BLOCK - 1), (2000, 200 * 1024), (4999, BLOCK + 1)] {
            lines[at] = line(9999, "user", &"y".repeat(len));
        }
        let p = write(&lines);
        let mut got = Vec::new();
        for_each_line_rev(&p, |l| {
            if !blank(l) {
                got.push(String::from_utf8(l.to_vec()).unwrap());
            }
            true
        })
        .unwrap();
        got.reverse();
        assert_eq!(got, lines);
    }

    #[test]
    fn context_within_keeps_the_newest_from_a_user_record_and_the_summary() {
        let mut lines = vec![line(1, "user", "old"), line(2, "assistant", "old answer")];
        let s =
            serde_json::json!({"cursor": 3, "timestamp": "", "role": "summary", "content": "S", "keep_from_cursor": 2});
        lines.push(s.to_string());
        for i in 0..200 {
            lines.push(line(4 + 2 * i, "user", &"u".repeat(100)));
            lines.push(line(5 + 2 * i, "assistant", &"a".repeat(100)));
        }
        let p = write(&lines);
        let (recs, skipped) = load_context_within(&p, 2_000).unwrap();
        assert_eq!(skipped, 0);
        assert_eq!(recs[0].role, "summary");
        assert_eq!(recs[1].role, "user");
        assert!(recs[1..].iter().map(weight).sum::<usize>() <= 2_000);
        assert_eq!(recs.last().unwrap().cursor, 403);
        // Unlimited: exactly the smart-load rule.
        let all = super::super::chats::context_after_summary(
            super::super::chats::parse_history(&fs::read(&p).unwrap()).records,
        );
        assert_eq!(load_context_within(&p, usize::MAX).unwrap().0, all);
    }
}
