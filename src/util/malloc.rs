//! glibc allocator policy for a server whose load comes in bursts of short-lived threads (one
//! per WebSocket client, two while its writer thread runs). [`tune_at_startup`] runs first
//! thing on the main thread; [`release_free_memory`] on whichever thread sees a burst end.
//!
//! Measured with three 1,000-client bursts (`BENCH_ONLY=burst cargo bench --bench load`), RSS
//! once the bursts' chats had gone quiet, against 7.4 MiB idle: glibc's defaults held 26-33 MiB.
//! Two things kept the pages. Each long-lived thread (workers; then also parked stream readers)
//! keeps freed chunks in its own cache, where `malloc_trim` cannot reach them; 4 MiB were pinned,
//! spread over 16 arenas. glibc also keeps up to 40 MiB of dead threads' stacks. Both settings
//! are glibc tunables, which are read only when a process starts, so the process runs itself
//! again with them set: one `execve` at start-up. With them the same bursts leave 11.9-15.3 MiB
//! (ten bursts: a saw-tooth under 18.5 MiB), and the heap in use after each is flat at 1.1 MiB.
//! Tunables the caller sets in `GLIBC_TUNABLES` override these. (Pinning the mmap and trim
//! thresholds with `mallopt` made no difference; capping the arenas at 1, 2 or 4 made none
//! either. Thread caches back on, measured again after model streams moved onto the workers:
//! no CPU gain, 6 MiB more RSS after the 500-client runs.)
//!
//! Measured after the thread work (`cargo bench --bench server`, 3 runs each):
//! RSS after the 500-client runs 26.1 MiB with these tunables, 37.7 MiB with glibc's defaults
//! (`GLIBC_TUNABLES` overriding them).

/// Set on the re-executed process: `-` if `GLIBC_TUNABLES` was unset before, else `=` and its
/// value. Both are restored before any thread or child process starts.
const MARKER: &str = "CASHCODE_MALLOC_TUNED";
/// Thread caches off; dead threads' stacks unmapped rather than kept for reuse.
const TUNABLES: &str = "glibc.malloc.tcache_count=0:glibc.pthread.stack_cache_size=0";

/// Applies the policy: re-executes the binary with the tunables unless this process already
/// is that run, then restores the caller's environment. Call before any thread starts.
/// `prepare` gets the re-exec's command just before `exec` (`main` hands the secrets over
/// there, out of band, so the new image's envp has none); what it returns is kept until `exec`
/// and dropped if `exec` fails. If the re-exec fails the server runs on glibc's defaults.
pub fn tune_at_startup<T>(prepare: impl FnOnce(&mut std::process::Command) -> T) {
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = prepare;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::ffi::OsStrExt;
        match std::env::var_os(MARKER) {
            None => {
                let before = std::env::var_os("GLIBC_TUNABLES");
                // The caller's own tunables come last, so they win.
                let mut tunables = std::ffi::OsString::from(TUNABLES);
                let mut marker = std::ffi::OsString::from("-");
                if let Some(b) = &before {
                    tunables.push(":");
                    tunables.push(b);
                    marker = std::ffi::OsString::from("=");
                    marker.push(b);
                }
                if let Ok(exe) = std::env::current_exe() {
                    use std::os::unix::process::CommandExt;
                    let mut args = std::env::args_os();
                    let mut again = std::process::Command::new(exe);
                    again.arg0(args.next().unwrap_or_default()).args(args);
                    again.env("GLIBC_TUNABLES", &tunables).env(MARKER, &marker);
                    // Kept until exec; dropped when exec fails.
                    let _prepared = prepare(&mut again);
                    // Returns only if exec failed: carry on untuned.
                    let _ = again.exec();
                }
            }
            Some(marker) => {
                std::env::remove_var(MARKER);
                match marker.as_bytes().split_first() {
                    Some((b'=', before)) => std::env::set_var("GLIBC_TUNABLES", std::ffi::OsStr::from_bytes(before)),
                    _ => std::env::remove_var("GLIBC_TUNABLES"),
                }
            }
        }
    }
}

/// Hands heap pages freed by a burst of work back to the OS. glibc keeps freed pages in its
/// arenas (one per busy thread), so without this the process would hold a burst's high-water
/// RSS for the rest of its life.
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns unused pages to the OS; it has no preconditions and
    // glibc makes it thread-safe (it takes each arena's lock). Raw libc: a glibc extension no
    // safe wrapper covers.
    unsafe {
        libc::malloc_trim(0);
    }
}
