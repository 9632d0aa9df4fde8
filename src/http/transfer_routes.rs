//! `/api/sessions/{id}/export`, `/api/export` and `/api/import` (docs/http-api.md "Export and
//! import"): query and upload shapes, status codes and download headers; the formats and every
//! check of an uploaded file are `store::transfer`'s. Runs on an `http-slow` thread (gate.rs).

use serde::Serialize;
use serde_json::{json, Value};

use super::api::Api;
use super::shape::Issue;
use super::{multipart, Req, Resp};
use crate::store::chats::valid_chat_id;
use crate::store::transfer::export::{self, ExportError, Format};
use crate::store::transfer::import::{self, Source};
use crate::store::transfer::Imported;
use crate::util::time;

/// `format` from the query (default `jsonl`), or the 422 naming the three choices.
fn format(req: &Req) -> Result<Format, Resp> {
    let raw = req.query_param("format").unwrap_or_else(|| "jsonl".into());
    Format::parse(&raw).ok_or_else(|| {
        Resp::shape(vec![Issue::new(
            "literal_error",
            &["query", "format"],
            "Input should be 'jsonl', 'md' or 'atif'",
            json!(raw),
        )
        .with_ctx(json!({"expected": "'jsonl', 'md' or 'atif'"}))])
    })
}

fn download(body: Vec<u8>, content_type: &'static str, filename: &str) -> Resp {
    let mut r = Resp { status: 200, content_type, body: super::Body::Owned(body), headers: Vec::new() };
    // Names are built from chat ids and fixed words only: plain ASCII, nothing to escape.
    r.headers.push(("Content-Disposition".into(), format!("attachment; filename=\"{filename}\"")));
    r.headers.push(("Cache-Control".into(), "no-store".into()));
    r
}

/// `GET /api/sessions/{id}/export?format=jsonl|md|atif`.
pub(crate) fn export_one(api: &Api, id: &str, req: &Req) -> Resp {
    let format = match format(req) {
        Ok(f) => f,
        Err(r) => return r,
    };
    if !valid_chat_id(id) {
        return Resp::detail(404, "session not found");
    }
    match export::one(&api.chats, id, format) {
        Ok(Some(body)) => download(body, format.content_type(), &format!("{id}.{}", format.ext())),
        Ok(None) => Resp::detail(404, "session not found"),
        Err(e) => {
            log::error!("event=export.read_failed chat_id={id} error_kind={:?}", e.kind());
            Resp::detail(500, "unable to read the session")
        }
    }
}

/// `GET /api/export?format=jsonl|md|atif`: every chat in one zip.
pub(crate) fn export_all(api: &Api, req: &Req) -> Resp {
    let format = match format(req) {
        Ok(f) => f,
        Err(r) => return r,
    };
    match export::all(&api.chats, format) {
        Ok(zip) => {
            let stamp: String = time::minute_stamp().chars().filter(char::is_ascii_digit).collect();
            download(zip, "application/zip", &format!("cashcode-chats-{stamp}-{}.zip", format.name()))
        }
        Err(ExportError::TooLarge) => Resp::detail(
            422,
            &format!(
                "the chats together are larger than {} MiB; export them one by one",
                crate::store::transfer::MAX_EXPORT_BYTES >> 20
            ),
        ),
        Err(ExportError::Io(e)) => {
            log::error!("event=export.all_failed error_kind={:?}", e.kind());
            Resp::detail(500, "unable to export the sessions")
        }
    }
}

/// `POST /api/import` (multipart, field `file`): 201 with the chats written, else 422 and
/// nothing written.
pub(crate) fn import(api: &Api, req: &Req) -> Resp {
    let ct = req.header("content-type").unwrap_or("");
    let Some((filename, data)) = multipart::file(ct, &req.body, "file") else {
        return Resp::shape(vec![Issue::new("missing", &["body", "file"], "Field required", Value::Null)]);
    };
    let (source, chats) = match import::read(&filename, data) {
        Ok(parsed) => parsed,
        Err(refusal) => return Resp::detail(422, &format!("Cannot import this file: {}", refusal.0)),
    };
    let chats_store = &api.chats;
    match import::write(chats_store, &chats) {
        Ok(imported) => {
            index_imported(api, &imported);
            log::info!("event=import.done source={source:?} chats={}", imported.len());
            Resp::json(201, &ImportView { source, imported })
        }
        Err(e) => {
            log::error!("event=import.write_failed error_kind={:?}", e.kind());
            Resp::detail(500, "unable to write the imported chats; nothing was imported")
        }
    }
}

/// Makes the imported chats searchable at once, before the 201: each is indexed whole on this
/// thread rather than left to the index thread's next look at the memory root.
fn index_imported(api: &Api, imported: &[Imported]) {
    for chat in imported {
        api.search.reindex_chat(&chat.chat_id);
    }
}

/// `POST /api/import`'s answer.
#[derive(Serialize)]
struct ImportView {
    source: Source,
    imported: Vec<Imported>,
}
