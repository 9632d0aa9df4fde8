//! Small shared helpers: the turn cancel token, the BM25 scorer, time formatting, randomness,
//! SHA-256 hex, atomic file writes, text cutting, secret redaction, the SSE parser, blocking
//! calls on helper threads (`blocking`), joins with a deadline, the allocator policy, the
//! URL/origin parser (and the loopback test), the JSON nesting check and Python-spaced JSON.
//! Any thread may call them. The bottom layer: nothing here imports another module of the
//! crate.

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
pub mod pyjson;
pub mod rand;
pub mod redact;
pub mod sse;
pub mod text;
pub mod time;
pub mod url;
