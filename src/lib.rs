//! CashCode: a locally hosted personal AI agent server.
//!
//! Modules in reading order, bottom-up along their layers (ARCHITECTURE.md "Layers"; each
//! imports only modules of the groups before its own, checked by `tests/suite/layering.rs`):
//! shared helpers; secrets and the WebSocket wire types; configuration, logging, listeners,
//! access policy, on-disk stores and the LLM client; the kernel sandbox and the workspace
//! confinement; the bus, projects, search and the rewind checkpoints; the tool contract; Skills
//! and the memory jobs; MCP; the agent (workers, turns, built-in tools, the approval gate and
//! policy, the rewind use cases); the WebSocket front door; the HTTP front door and
//! housekeeping; and `app`, which builds the channels and threads.

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
pub mod sandbox;
pub(crate) mod workspace;

// 4
pub mod bus;
pub mod checkpoints;
pub(crate) mod projects;
pub mod search;

// 5
pub mod tool;

// 6
pub mod memory_jobs;
pub mod skills;

// 7
pub mod mcp;

// 8
pub mod agent;

// 9
pub mod ws;

// 10
pub(crate) mod housekeep;
pub mod http;

// 11
pub mod acp;
pub mod app;
pub mod startup;
