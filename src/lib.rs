//! CashCode: a locally hosted personal AI agent server.
//!
//! Modules in reading order: configuration, shared helpers, on-disk stores, the LLM client,
//! the agent (turns and tools), then the two front doors (WebSocket and HTTP) and `app`, which
//! builds the channels and threads.

pub mod agent;
pub mod config;
pub mod mcp;
pub mod store;
pub mod util;
