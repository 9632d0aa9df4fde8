//! The process set-up `main` runs first, on the main thread before any other thread or child
//! exists, in this order; each step is here because a test fails without it.
//!
//! 1. **Secrets leave the environment** (`secrets::take_from_environment`): API keys and the
//!    token are moved out of `environ` (and the initial environment block wiped), so no tool,
//!    MCP server or `/proc/<pid>/environ` read finds them (`secrets.rs`).
//! 2. **Inherited descriptors close on exec** (`util::fds`): a descriptor a supervisor or shell
//!    left open never reaches a command or an MCP server (`file_modes.rs`).
//! 3. **The allocator re-exec** (`util::malloc`): glibc's tunables are read only when a process
//!    starts, so the process runs itself again with them set, handing the secrets to the new
//!    image through a sealed memfd; it keeps the resident set a third smaller after bursts of
//!    clients (benches/README.md).
//! 4. **Non-dumpable** (`sandbox::protect_server_process`): no process of the same uid can
//!    read this image's memory, which now holds the secrets; `execve` resets the flag, so it is
//!    set after step 3 (`sandbox.rs::escape_attempts_are_refused`).
//!
//! What needs the configuration (logging, the entropy check, the open-files limit, signal
//! handling) comes after, in `app::run` and `app::start`.

/// Runs the steps above; returns the secrets taken from the environment, for the
/// configuration to read.
pub fn prepare_process() -> Vec<(String, String)> {
    let secrets = crate::secrets::take_from_environment();
    crate::util::fds::close_inherited_on_exec();
    crate::util::malloc::tune_at_startup(|again| crate::secrets::hand_over(again, &secrets));
    crate::sandbox::protect_server_process();
    secrets
}
