//! `/api/memory…` and `/api/dream…`: what the agent remembers, for the client's Memory page.
//! MEMORY.md and SOUL.md are read with their sha256 and written back only with the hash that
//! was read (409 otherwise, like skills); MEMORY.md's numbered snapshots are listed, read and
//! restored (a restore snapshots the current file first, so it is undoable); Dream's status is
//! read and a run is asked for. Bodies are read by the one body extractor ([`super::shape::body`]);
//! the typed views below are the wire. Handlers run on the `http` thread; the Dream run itself
//! happens on the `dream` thread, so `POST /api/dream/run` answers 202 at once.
//!
//! Field order is the byte order on the wire: alphabetical, like every other body here.

use serde::{Deserialize, Serialize};

use super::api::{only, Api};
use super::shape::body;
use super::{Req, Resp};
use crate::memory_jobs::dream::{self, DreamState, LastRun, Undistilled};
use crate::store::memory_files::{FileText, SnapshotInfo, Which, WriteError, MAX_FILE_BYTES};
use crate::util::body::{Extras, Model};

const CHANGED: &str = "content changed since it was read";
const BAD_SNAPSHOT_ID: &str = "invalid snapshot id: use an id from GET /api/memory/snapshots";
const NO_SNAPSHOT: &str = "snapshot not found";
const NO_FILE: &str = "memory file not found: use memory or soul";
const DREAM_BUSY: &str = "Dream is already running";

/// A JSON body bigger than this cannot hold a content within [`MAX_FILE_BYTES`] (even with
/// every byte escaped as `\uXXXX`), so it is refused before parsing.
const MAX_PUT_BODY: usize = MAX_FILE_BYTES * 6 + 4096;

pub(crate) fn route(api: &Api, m: &str, rest: &[&str], req: &Req) -> Resp {
    match rest {
        [] => only(m, &["GET"]).unwrap_or_else(|| files(api)),
        ["snapshots"] => only(m, &["GET"]).unwrap_or_else(|| snapshots(api)),
        ["snapshots", id] => only(m, &["GET"]).unwrap_or_else(|| snapshot(api, id)),
        ["snapshots", id, "restore"] => only(m, &["POST"]).unwrap_or_else(|| restore(api, id)),
        [which] => match Which::parse(which) {
            None => Resp::detail(404, NO_FILE),
            Some(w) => match m {
                "GET" => io(api.memory.read(w).map(|t| Resp::ok(&FileView::of(w, t)))),
                "PUT" => write(api, w, req),
                _ => Resp::detail(405, "Method Not Allowed"),
            },
        },
        _ => Resp::detail(404, "Not Found"),
    }
}

pub(crate) fn route_dream(api: &Api, m: &str, rest: &[&str]) -> Resp {
    match rest {
        [] => only(m, &["GET"]).unwrap_or_else(|| Resp::ok(&dream_view(api, api.dream.state()))),
        ["run"] => only(m, &["POST"]).unwrap_or_else(|| match api.dream.request_run() {
            Ok(state) => Resp::json(202, &dream_view(api, state)),
            Err(dream::Busy) => Resp::detail(409, DREAM_BUSY),
        }),
        _ => Resp::detail(404, "Not Found"),
    }
}

/// The one place memory-file I/O errors become HTTP (the path stays in the log).
fn io(r: std::io::Result<Resp>) -> Resp {
    r.unwrap_or_else(|e| {
        log::error!("event=memory.io_error error={:?}", e.kind());
        Resp::detail(500, "memory storage failed")
    })
}

fn files(api: &Api) -> Resp {
    let m = &api.memory;
    io((|| {
        Ok(Resp::ok(&FilesView {
            max_bytes: MAX_FILE_BYTES,
            memory: FileView::of(Which::Memory, m.read(Which::Memory)?),
            soul: FileView::of(Which::Soul, m.read(Which::Soul)?),
        }))
    })())
}

/// `PUT /api/memory/{memory|soul}`.
#[derive(Deserialize)]
struct WriteBody {
    content: String,
    expected_hash: Option<Option<String>>,
}

impl Model for WriteBody {
    const EXTRAS: Extras = Extras::Forbid;
}

fn write(api: &Api, which: Which, req: &Req) -> Resp {
    if req.body.len() > MAX_PUT_BODY {
        return too_large(which);
    }
    let b: WriteBody = match body(req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let files = &api.memory;
    match files.write(which, &b.content, b.expected_hash.flatten().as_deref()) {
        Ok(snapshot) => io(files
            .read(which)
            .map(|t| Resp::ok(&SavedView { file: FileView::of(which, t), snapshot: snapshot.map(|n| n.to_string()) }))),
        Err(WriteError::Changed) => Resp::detail(409, CHANGED),
        Err(WriteError::TooLarge) => too_large(which),
        Err(WriteError::Io(e)) => io(Err(e)),
    }
}

fn too_large(which: Which) -> Resp {
    Resp::detail(413, &format!("{} may be at most {MAX_FILE_BYTES} bytes", which.file_name()))
}

/// A snapshot id as the list gives it: a decimal number without sign or leading zeros. The
/// file path is built from the number alone.
fn snapshot_id(id: &str) -> Result<u64, Resp> {
    let canonical = !id.is_empty() && id.len() <= 19 && id.bytes().all(|b| b.is_ascii_digit()) && !id.starts_with('0');
    match id.parse::<u64>() {
        Ok(n) if canonical => Ok(n),
        _ => Err(Resp::detail(422, BAD_SNAPSHOT_ID)),
    }
}

fn snapshots(api: &Api) -> Resp {
    io(api.memory.snapshot_list().map(|(list, total)| {
        Resp::ok(&SnapshotsView { snapshots: list.iter().map(SnapshotItem::of).collect(), total })
    }))
}

fn snapshot(api: &Api, id: &str) -> Resp {
    let n = match snapshot_id(id) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let files = &api.memory;
    io((|| {
        let Some(content) = files.snapshot_text(n)? else { return Ok(Resp::detail(404, NO_SNAPSHOT)) };
        let (list, _) = files.snapshot_list()?;
        let info = list.into_iter().find(|s| s.id == n);
        Ok(Resp::ok(&SnapshotView {
            created_at: info.as_ref().map_or(0.0, |s| s.created_at),
            id: n.to_string(),
            size: content.len() as u64,
            content,
        }))
    })())
}

fn restore(api: &Api, id: &str) -> Resp {
    let n = match snapshot_id(id) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let files = &api.memory;
    io((|| match files.restore(n)? {
        None => Ok(Resp::detail(404, NO_SNAPSHOT)),
        Some(snapshot) => Ok(Resp::ok(&SavedView {
            file: FileView::of(Which::Memory, files.read(Which::Memory)?),
            snapshot: snapshot.map(|n| n.to_string()),
        })),
    })())
}

fn dream_view(api: &Api, state: DreamState) -> DreamView {
    DreamView {
        batch_records: dream::BATCH,
        enabled: api.dream.interval.is_some(),
        interval_sec: api.dream.interval.map(|d| d.as_secs()),
        last_run: state.last,
        next_run_at: state.next_run_at,
        queued: state.queued,
        running: state.running,
        undistilled: dream::undistilled(&api.chats, &api.memory),
    }
}

// ---- The wire ----

/// One editable file: `GET /api/memory/{memory|soul}` and inside the other answers.
#[derive(Serialize)]
pub(crate) struct FileView {
    pub(crate) content: String,
    /// `MEMORY.md` or `SOUL.md`.
    pub(crate) file: &'static str,
    /// sha256 of the content as read; send it back as `expected_hash`.
    pub(crate) hash: String,
    /// `memory` or `soul`.
    pub(crate) name: &'static str,
    pub(crate) size: usize,
}

impl FileView {
    fn of(which: Which, t: FileText) -> FileView {
        FileView { size: t.content.len(), content: t.content, file: which.file_name(), hash: t.hash, name: which.key() }
    }
}

/// `GET /api/memory`.
#[derive(Serialize)]
pub(crate) struct FilesView {
    pub(crate) max_bytes: usize,
    pub(crate) memory: FileView,
    pub(crate) soul: FileView,
}

/// `PUT /api/memory/{memory|soul}` and `POST …/snapshots/{id}/restore`: the file now, and the
/// snapshot that keeps what it replaced (`null` for SOUL.md or a blank file).
#[derive(Serialize)]
pub(crate) struct SavedView {
    #[serde(flatten)]
    pub(crate) file: FileView,
    pub(crate) snapshot: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct SnapshotItem {
    /// Epoch seconds (the snapshot file's mtime).
    pub(crate) created_at: f64,
    pub(crate) id: String,
    pub(crate) size: u64,
}

impl SnapshotItem {
    fn of(s: &SnapshotInfo) -> SnapshotItem {
        SnapshotItem { created_at: s.created_at, id: s.id.to_string(), size: s.size }
    }
}

/// `GET /api/memory/snapshots`: newest first, at most 200; `total` counts them all.
#[derive(Serialize)]
pub(crate) struct SnapshotsView {
    pub(crate) snapshots: Vec<SnapshotItem>,
    pub(crate) total: usize,
}

/// `GET /api/memory/snapshots/{id}`.
#[derive(Serialize)]
pub(crate) struct SnapshotView {
    pub(crate) content: String,
    pub(crate) created_at: f64,
    pub(crate) id: String,
    pub(crate) size: u64,
}

/// `GET /api/dream` and `POST /api/dream/run` (202).
#[derive(Serialize)]
pub(crate) struct DreamView {
    /// Records one run distils at most.
    pub(crate) batch_records: usize,
    /// The timer is on (`DREAM_INTERVAL` > 0); "run now" works either way.
    pub(crate) enabled: bool,
    pub(crate) interval_sec: Option<u64>,
    pub(crate) last_run: Option<LastRun>,
    pub(crate) next_run_at: Option<f64>,
    pub(crate) queued: bool,
    pub(crate) running: bool,
    pub(crate) undistilled: Undistilled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_ids_are_plain_numbers() {
        for ok in ["1", "42", "1234567890123456789"] {
            assert!(snapshot_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "0",
            "01",
            "-1",
            "+1",
            "1.md",
            "MEMORY.1.md",
            "..",
            "1/..",
            "1 ",
            " 1",
            "١",
            "99999999999999999999",
            "0x1",
        ] {
            assert_eq!(snapshot_id(bad).err().map(|r| r.status), Some(422), "{bad:?}");
        }
    }
}
