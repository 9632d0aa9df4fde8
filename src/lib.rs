//! CashCode: a locally hosted personal AI agent server.
//!
//! Modules in reading order: configuration, shared helpers, on-disk stores, the LLM client,
//! the bus and the agent (turns and tools), then the two front doors (WebSocket and HTTP),
//! access policy, and `app`, which builds the channels and threads.

pub mod agent;
pub mod app;
pub mod bus;
pub mod config;
pub mod housekeep;
pub mod http;
pub mod llm;
pub mod logging;
pub mod mcp;
pub mod memory_jobs;
pub mod net;
pub mod secrets;
pub mod security;
pub mod skills;
pub mod store;
pub mod tool;
pub mod util;
pub mod wire;
pub mod ws;
