//! The integration tests, one module per area of the contract.

mod consolidation;
mod crash;
mod faults;
mod gate;
mod harness;
mod http_api;
mod legacy_data;
mod llm_settings;
mod load;
mod memory;
mod origin;
mod prompt_cache;
mod provider_errors;
mod restart;
mod secrets;
mod security;
mod skills_turns;
mod skills_wire;
mod startup;
mod tools_turns;
mod web_assets;
mod web_fetch;
mod ws_cancel;
mod ws_frames;
mod ws_replay;
mod ws_turns;
