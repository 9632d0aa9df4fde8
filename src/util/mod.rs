//! Small shared helpers with no state: time formatting, randomness, atomic file writes,
//! text cutting and secret redaction. Any thread may call them.

pub mod fsx;
pub mod prng;
pub mod rand;
pub mod redact;
pub mod sse;
pub mod text;
pub mod time;
