//! Small shared helpers: time formatting, randomness, atomic file writes, text cutting, secret
//! redaction, the SSE parser, parked helper threads, joins with a deadline and the allocator
//! policy. Any thread may call them.

pub mod fsx;
pub mod join;
pub mod malloc;
pub mod parked;
pub mod prng;
pub mod rand;
pub mod redact;
pub mod sse;
pub mod text;
pub mod time;
