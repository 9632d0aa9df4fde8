//! CashCode: a locally hosted personal AI agent server.
//!
//! Modules in reading order, bottom-up along their layers (ARCHITECTURE.md "Layers"; each
//! imports only modules of the groups before its own, checked by `tests/suite/layering.rs`):
//! shared helpers; secrets and the WebSocket wire types; configuration, logging, listeners,
//! access policy, on-disk stores and the LLM client; the bus; the tool contract; Skills and the
//! memory jobs; MCP; the agent (workers, turns, built-in tools); the WebSocket front door; the
//! HTTP front door and housekeeping; and `app`, which builds the channels and threads.

// 0
pub mod util;

// 1
pub mod ledger;
pub mod secrets;
pub(crate) mod wire;

// 2
pub mod config;
pub mod llm;
pub(crate) mod logging;
pub(crate) mod net;
pub(crate) mod security;
pub mod store;

// 3
pub mod bus;
pub(crate) mod projects;
pub mod search;

// 4
pub mod tool;

// 5
pub mod memory_jobs;
pub mod skills;

// 6
pub mod mcp;

// 7
pub mod agent;

// 8
pub mod ws;

// 9
pub(crate) mod housekeep;
pub mod http;

// 10
pub mod acp;
pub mod app;
pub mod startup;
