//! The one integration-test binary: every test starts the real `cashcode` binary on ephemeral
//! ports with its own temporary home and talks to it over WebSocket and HTTP, with a scripted
//! fake OpenAI-compatible server standing in for the model; `suite::mcp_real` drives the MCP
//! client in-process against real MCP servers. Tests run in parallel threads (under
//! `cargo nextest`, one process each).
//! `suite::layering` starts nothing: it reads `src/` and checks the crate's module layers.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

mod common;
mod suite;
