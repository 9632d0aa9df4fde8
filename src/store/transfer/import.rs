//! Import: recognise the file ([`read`]), check all of it into [`NewChat`]s without touching the
//! disk, then [`write`] them: each chat is built in a hidden staging directory under the memory
//! root (names starting with `.` are never taken for chats) and renamed into place without
//! replacing anything, so a chat appears whole or not at all and an existing chat is never
//! overwritten (its id taken, the import gets a new one). Runs on an `http-slow` thread.

use std::collections::BTreeMap;
use std::io::{self, Cursor, Read};
use std::path::Path;

use serde_json::{json, Map, Value};

use super::{foreign, Imported, NewChat, Refusal, MAX_CHAT_BYTES, MAX_IMPORT_CHATS, MAX_METADATA_BYTES};
use super::{MAX_RECORDS, MAX_UNPACKED_BYTES};
use crate::store::chats::{valid_chat_id, ChatStore, Record};
use crate::util::{fsx, rand, text};

/// Characters of the first user message an imported chat without a title is named after: as
/// long as the title a chat's first turn sets.
pub(crate) const TITLE_CHARS: usize = 40;
/// Tries at a fresh id when a chat appears under the chosen one between the check and the rename.
const RENAME_TRIES: usize = 4;

/// Which kind of file was imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Source {
    /// One chat's history.jsonl.
    Native,
    /// Our all-chats zip.
    NativeZip,
    /// ChatGPT's `conversations.json`.
    Chatgpt,
    /// Open WebUI's chat export.
    OpenWebui,
}

/// Recognises and checks `bytes` (the uploaded file named `filename`), writing nothing.
pub(crate) fn read(filename: &str, bytes: &[u8]) -> Result<(Source, Vec<NewChat>), Refusal> {
    if bytes.is_empty() {
        return Err(Refusal::new("the file is empty"));
    }
    if bytes.starts_with(b"PK") {
        return Ok((Source::NativeZip, zip_chats(bytes)?));
    }
    let stem = filename.rsplit(['/', '\\']).next().unwrap_or("");
    if stem.to_ascii_lowercase().ends_with(".jsonl") || first_line_is_record(bytes) {
        let id = stem.strip_suffix(".jsonl").filter(|s| valid_chat_id(s)).map(str::to_string);
        return Ok((Source::Native, vec![native(bytes, id, None)?]));
    }
    foreign::read(bytes)
}

/// Whether the first line is one of our history records (a JSON object with `cursor` and `role`).
fn first_line_is_record(bytes: &[u8]) -> bool {
    let line = bytes.split(|b| *b == b'\n').next().unwrap_or(b"");
    matches!(serde_json::from_slice::<Value>(line), Ok(Value::Object(m)) if m.contains_key("cursor") && m.contains_key("role"))
}

/// Checks one chat's history.jsonl: UTF-8, every line a record (a torn, unterminated last line
/// is kept as the server's own reader keeps it: skipped), cursors rising, at least one record.
/// The bytes are kept exactly as given.
pub(crate) fn native(
    bytes: &[u8],
    wanted_id: Option<String>,
    meta: Option<Map<String, Value>>,
) -> Result<NewChat, Refusal> {
    if bytes.len() as u64 > MAX_CHAT_BYTES {
        return Err(Refusal::new(format!("a chat history is larger than {} MiB", MAX_CHAT_BYTES >> 20)));
    }
    if std::str::from_utf8(bytes).is_err() {
        return Err(Refusal::new("the history is not UTF-8 text"));
    }
    let mut last: u64 = 0;
    let mut records = 0usize;
    let mut first_user: Option<String> = None;
    let pieces: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    for (n, line) in pieces.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let r = match serde_json::from_slice::<Record>(line) {
            Ok(r) => r,
            Err(_) if n + 1 == pieces.len() => continue,
            Err(e) => return Err(Refusal::new(format!("line {} is not a history record: {e}", n + 1))),
        };
        if r.role.is_empty() || r.cursor <= last {
            return Err(Refusal::new(format!("line {} has no role or a cursor that does not rise", n + 1)));
        }
        last = r.cursor;
        records += 1;
        if records > MAX_RECORDS {
            return Err(Refusal::new(format!("a chat has more than {MAX_RECORDS} records")));
        }
        if first_user.is_none() && r.role == "user" {
            first_user = Some(r.content);
        }
    }
    if records == 0 {
        return Err(Refusal::new("the history holds no records"));
    }
    let mut metadata = meta.unwrap_or_default();
    if metadata.get("title").and_then(Value::as_str).is_none_or(str::is_empty) {
        if let Some(t) = first_user.map(|u| text::take_chars(&text::collapse_ws(&u), TITLE_CHARS).to_string()) {
            metadata.insert("title".into(), json!(t));
        }
    }
    Ok(NewChat { wanted_id, history: bytes.to_vec(), metadata, last_cursor: last, records })
}

/// Our all-chats zip: only `<chat id>/history.jsonl`, `<chat id>/metadata.json` and the
/// `<chat id>/` directories; every member name, kind and size checked before any is inflated,
/// and the inflated bytes counted as they come.
fn zip_chats(bytes: &[u8]) -> Result<Vec<NewChat>, Refusal> {
    let bad = || Refusal::new("the file is not a valid zip archive");
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|_| bad())?;
    if zip.len() > MAX_IMPORT_CHATS * 3 {
        return Err(Refusal::new(format!("the archive has more than {MAX_IMPORT_CHATS} chats")));
    }
    if zip.has_duplicate_names() {
        return Err(Refusal::new("the archive has duplicate member names"));
    }
    // (id, is metadata, member index)
    let mut plan: Vec<(String, bool, usize)> = Vec::new();
    let mut declared: u64 = 0;
    for index in 0..zip.len() {
        let f = zip.by_index_raw(index).map_err(|_| bad())?;
        let name = f.name().map_err(|_| Refusal::new("the archive has a member with an illegal path"))?.to_string();
        let (id, file) = name.split_once('/').unwrap_or((&name, ""));
        if !valid_chat_id(id) || id.starts_with('.') {
            return Err(Refusal::new(format!("the archive has a member with an illegal path: {:?}", clip(&name))));
        }
        let kind = (f.external_attributes() >> 16) & 0o170_000;
        let is_meta = match file {
            "" => {
                if kind != 0 && kind != 0o040_000 {
                    return Err(Refusal::new("the archive has a symlink or special file"));
                }
                continue;
            }
            "history.jsonl" => false,
            "metadata.json" => true,
            _ => {
                return Err(Refusal::new(format!(
                    "the archive has a member that is not part of a CashCode export: {:?}",
                    clip(&name)
                )))
            }
        };
        if kind != 0 && kind != 0o100_000 {
            return Err(Refusal::new("the archive has a symlink or special file"));
        }
        if f.encrypted() {
            return Err(Refusal::new("encrypted archives are not supported"));
        }
        let cap = if is_meta { MAX_METADATA_BYTES } else { MAX_CHAT_BYTES };
        if f.size() > cap {
            return Err(Refusal::new(format!("the archive member {name:?} is too large")));
        }
        declared += f.size();
        if declared > MAX_UNPACKED_BYTES {
            return Err(Refusal::new(format!("the archive expands beyond {} MiB", MAX_UNPACKED_BYTES >> 20)));
        }
        plan.push((id.to_string(), is_meta, index));
    }
    // id -> (history.jsonl, metadata.json)
    type Files = (Option<Vec<u8>>, Option<Vec<u8>>);
    let mut chats: BTreeMap<String, Files> = BTreeMap::new();
    let mut total: u64 = 0;
    for (id, is_meta, index) in plan {
        let f = zip.by_index(index).map_err(|_| bad())?;
        let cap = if is_meta { MAX_METADATA_BYTES } else { MAX_CHAT_BYTES };
        let mut data = Vec::new();
        // Declared sizes are the archive's claim; the inflated bytes are what counts.
        f.take(cap + 1).read_to_end(&mut data).map_err(|_| Refusal::new("the archive is corrupt"))?;
        total += data.len() as u64;
        if data.len() as u64 > cap || total > MAX_UNPACKED_BYTES {
            return Err(Refusal::new(format!("the archive expands beyond {} MiB", MAX_UNPACKED_BYTES >> 20)));
        }
        let slot = chats.entry(id).or_default();
        if is_meta {
            slot.1 = Some(data);
        } else {
            slot.0 = Some(data);
        }
    }
    if chats.is_empty() {
        return Err(Refusal::new("the archive holds no chats"));
    }
    if chats.len() > MAX_IMPORT_CHATS {
        return Err(Refusal::new(format!("the archive has more than {MAX_IMPORT_CHATS} chats")));
    }
    let mut out = Vec::with_capacity(chats.len());
    for (id, (history, meta)) in chats {
        let history = history.ok_or_else(|| Refusal::new(format!("chat {id} in the archive has no history.jsonl")))?;
        let meta = match meta {
            None => None,
            Some(m) => match serde_json::from_slice::<Value>(&m) {
                Ok(Value::Object(o)) => Some(o),
                _ => return Err(Refusal::new(format!("chat {id} in the archive has an unreadable metadata.json"))),
            },
        };
        let chat = native(&history, Some(id.clone()), meta).map_err(|r| Refusal::new(format!("chat {id}: {}", r.0)))?;
        out.push(chat);
    }
    Ok(out)
}

/// At most 80 characters of a name for a message.
fn clip(s: &str) -> &str {
    text::take_chars(s, 80)
}

/// Writes every chat (all checked already): each built in a staging directory, then renamed
/// into place under its wanted id when that is free, else a fresh UUID. On any failure the
/// chats already placed are removed again, so the import changes nothing.
pub(crate) fn write(store: &ChatStore, chats: &[NewChat]) -> io::Result<Vec<Imported>> {
    let root = store.root();
    fsx::create_private_dirs(root)?;
    let staging = root.join(format!(".import-{}", rand::hex(8)));
    fsx::create_private_dir(&staging)?;
    let result = place_all(store, &staging, chats);
    let _ = fsx::remove_tree(&staging);
    result
}

fn place_all(store: &ChatStore, staging: &Path, chats: &[NewChat]) -> io::Result<Vec<Imported>> {
    for (k, chat) in chats.iter().enumerate() {
        let dir = staging.join(k.to_string());
        fsx::create_private_dir(&dir)?;
        let write = |name: &str, bytes: &[u8]| -> io::Result<()> {
            let mut f = fsx::private_options().write(true).create_new(true).open(dir.join(name))?;
            io::Write::write_all(&mut f, bytes)?;
            f.sync_all()
        };
        write("history.jsonl", &chat.history)?;
        write(".cursor", chat.last_cursor.to_string().as_bytes())?;
        write("metadata.json", serde_json::to_string_pretty(&chat.metadata).map_err(io::Error::other)?.as_bytes())?;
        fsx::sync_dir(&dir);
    }
    let mut placed: Vec<Imported> = Vec::with_capacity(chats.len());
    for (k, chat) in chats.iter().enumerate() {
        match place(store, &staging.join(k.to_string()), chat.wanted_id.as_deref()) {
            Ok(id) => placed.push(Imported {
                chat_id: id,
                title: chat.metadata.get("title").and_then(Value::as_str).unwrap_or("").to_string(),
                records: chat.records,
            }),
            Err(e) => {
                for p in &placed {
                    if let Some(d) = store.dir(&p.chat_id) {
                        let _ = fsx::remove_tree(&d);
                    }
                }
                return Err(e);
            }
        }
    }
    fsx::sync_dir(store.root());
    Ok(placed)
}

/// Renames one staged chat into the root without replacing anything; its id.
fn place(store: &ChatStore, from: &Path, wanted: Option<&str>) -> io::Result<String> {
    let mut id = match wanted {
        Some(w) if valid_chat_id(w) && !w.starts_with('.') && !store.exists(w) => w.to_string(),
        _ => rand::uuid4(),
    };
    for _ in 0..RENAME_TRIES {
        let to = store.root().join(&id);
        match rename_noreplace(from, &to) {
            Ok(()) => return Ok(id),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => id = rand::uuid4(),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free chat id"))
}

/// `rename` that fails with `AlreadyExists` rather than replace `to` (an empty directory there
/// would otherwise be replaced silently).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE).map_err(io::Error::from)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::fs;
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, "chat exists"));
    }
    fs::rename(from, to)
}

/// Whether `id`'s directory under the store holds exactly `bytes` as its history (tests).
#[cfg(test)]
pub(crate) fn history_is(store: &ChatStore, id: &str, bytes: &[u8]) -> bool {
    store.history_path(id).and_then(|p| std::fs::read(p).ok()).as_deref() == Some(bytes)
}
