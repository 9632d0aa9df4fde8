//! Small shared helpers: time formatting, randomness, atomic file writes, text cutting, secret
//! redaction, the SSE parser, and parked helper threads. Any thread may call them.

pub mod fsx;
pub mod parked;
pub mod prng;
pub mod rand;
pub mod redact;
pub mod sse;
pub mod text;
pub mod time;
