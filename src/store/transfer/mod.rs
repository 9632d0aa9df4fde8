//! Export and import of chats (docs/http-api.md "Export and import"): [`export`] renders one
//! chat's history as its native JSONL (the file, byte for byte), Markdown for people or an ATIF
//! v1 trajectory, and all chats as one zip; [`import`] reads our own exports, ChatGPT's
//! `conversations.json` and Open WebUI's JSON export ([`foreign`]), checks everything first and
//! only then writes each chat under a fresh directory, renamed into place so a chat appears
//! whole or not at all. Pure over bytes plus [`ChatStore`] paths; runs on an `http-slow` thread.
//!
//! Every file comes from a peer, so every dimension is bounded by a constant below and every
//! refusal is a [`Refusal`] the route turns into a 422, with nothing written.

pub(crate) mod export;
pub(crate) mod foreign;
pub(crate) mod import;
#[cfg(test)]
mod tests;

/// Chats one import may create: a generous lifetime of chats, and it bounds the zip's member
/// list and the foreign files' arrays before any of them is walked.
pub(crate) const MAX_IMPORT_CHATS: usize = 10_000;
/// Bytes one imported chat's history may have: the HTTP body cap (12 MiB) is the most one
/// upload can carry, and a zip member may not expand past it either.
pub(crate) const MAX_CHAT_BYTES: u64 = 12 * 1024 * 1024;
/// Bytes all of one zip's members may expand to (checked on the bytes actually inflated, not
/// the sizes the archive declares): a zip bomb stops here, everything held in memory meanwhile.
pub(crate) const MAX_UNPACKED_BYTES: u64 = 64 * 1024 * 1024;
/// Records one imported chat may have (a turn writes a handful; 200,000 is years of use).
pub(crate) const MAX_RECORDS: usize = 200_000;
/// Largest metadata.json accepted from a zip (ours are a few KiB: title and two LRUs).
pub(crate) const MAX_METADATA_BYTES: u64 = 256 * 1024;
/// Bytes of history the all-chats zip reads before refusing: the zip is built in memory and
/// sent as one body, so this bounds the server's memory for one export.
pub(crate) const MAX_EXPORT_BYTES: u64 = 512 * 1024 * 1024;

/// Why an import was refused: a sentence for the person who chose the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal(pub(crate) String);

impl Refusal {
    pub(crate) fn new(msg: impl Into<String>) -> Refusal {
        Refusal(msg.into())
    }
}

/// One chat ready to be written: its history bytes exactly as they will be on disk, its
/// metadata.json object, the id it would like to keep and its last cursor.
#[derive(Debug, Clone)]
pub(crate) struct NewChat {
    pub(crate) wanted_id: Option<String>,
    pub(crate) history: Vec<u8>,
    pub(crate) metadata: serde_json::Map<String, serde_json::Value>,
    pub(crate) last_cursor: u64,
    pub(crate) records: usize,
}

/// What an import wrote: each chat's id (new when its own was taken), title and record count.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Imported {
    pub(crate) chat_id: String,
    pub(crate) title: String,
    pub(crate) records: usize,
}
