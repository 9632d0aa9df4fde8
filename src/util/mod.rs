//! Small shared helpers: the turn cancel token, time formatting, randomness, atomic file writes,
//! text cutting, secret redaction, the SSE parser, parked helper threads, joins with a deadline,
//! the allocator policy, the URL/origin parser and the JSON nesting check. Any thread may call them.

pub mod cancel;
pub mod fsx;
pub mod join;
pub mod json;
pub mod malloc;
pub mod parked;
pub mod prng;
pub mod rand;
pub mod redact;
pub mod sse;
pub mod text;
pub mod time;
pub mod url;
