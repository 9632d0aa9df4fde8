//! The agent: worker pool, the turn (ReAct loop), tools.

pub mod cancel;
pub mod tools;
