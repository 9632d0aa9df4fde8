//! Small shared helpers: the turn cancel token, the BM25 scorer, time formatting, randomness,
//! SHA-256 hex, atomic file writes, text cutting, secret redaction and the [`secret::Secret`]
//! wrapper, the SSE parser, blocking calls on helper threads (`blocking`), joins with a
//! deadline, the allocator policy, the URL/origin parser (and the loopback test), the address guard of outbound requests
//! (`netguard`: `web_fetch` and MCP OAuth), the JSON
//! nesting check, Python-spaced JSON, the pydantic-style 422 item (`pydantic`), the one reader
//! of JSON bodies that finds them (`body`), and lock acquisition that recovers from poisoning
//! (`sync`). Any thread may call them. The bottom
//! layer: nothing here imports another module of the crate.

pub(crate) mod blocking;
pub(crate) mod bm25;
pub(crate) mod body;
pub mod cancel;
pub(crate) mod code_pages;
pub mod fds;
pub(crate) mod fsx;
pub(crate) mod hash;
pub(crate) mod join;
pub(crate) mod json;
pub mod malloc;
pub(crate) mod netguard;

pub mod prng;
pub(crate) mod pydantic;
pub(crate) mod pyjson;
pub(crate) mod rand;
pub(crate) mod redact;
pub(crate) mod secret;
pub(crate) mod sse;
pub(crate) mod sync;
pub(crate) mod text;
pub(crate) mod time;
pub(crate) mod url;
