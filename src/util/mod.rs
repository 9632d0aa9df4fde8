//! Small shared helpers: the turn cancel token, the BM25 scorer, time formatting, randomness,
//! SHA-256 hex, atomic file writes, text cutting, secret redaction and the [`secret::Secret`]
//! wrapper, the SSE parser, blocking calls on helper threads (`blocking`), joins with a
//! deadline, the allocator policy, the URL/origin parser (and the loopback test), the JSON
//! nesting check, Python-spaced JSON, the pydantic-style 422 item (`pydantic`) and lock
//! acquisition that recovers from poisoning (`sync`). Any thread may call them. The bottom
//! layer: nothing here imports another module of the crate.

pub mod blocking;
pub mod bm25;
pub mod cancel;
pub mod fsx;
pub mod hash;
pub mod join;
pub mod json;
pub mod malloc;

#[cfg(test)]
pub mod prng;
pub mod pydantic;
pub mod pyjson;
pub mod rand;
pub mod redact;
pub mod secret;
pub mod sse;
pub mod sync;
pub mod text;
pub mod time;
pub mod url;
