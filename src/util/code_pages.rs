//! The binary's code in the resident set. Start-up runs code no turn runs again (the
//! configuration, the sandbox's probe and roots, the search index's build), and the kernel maps
//! a 64 KiB window of the executable around every page first touched, so an idle server held
//! about 5.8 MiB of code of which a turn uses a fraction. [`release`] unmaps the executable's
//! code pages from this process; they stay in the page cache, and each page a thread runs
//! again is mapped back by a minor fault. Called on the main thread once the listeners are up,
//! and by the `housekeep` thread when quiet chats leave memory.
//!
//! Safe for the same reason the kernel may do it at any moment under memory pressure: the
//! mapping is private, read-only and never written, so its pages are the file's and come back
//! unchanged. Only the mapping holding this function's code is touched, never a writable or
//! relocated one (`.data.rel.ro` pages are private copies that must stay).
//!
//! Measured (`BENCH_ONLY=footprint cargo bench --bench server`, benches/README.md): idle RSS
//! after start-up 10.5 -> 7.1 MiB; CPU per turn and RSS after 601 turns unchanged.

/// Unmaps the executable's code pages from the resident set (Linux; elsewhere nothing).
pub(crate) fn release() {
    #[cfg(target_os = "linux")]
    if let Some((start, len)) = code_mapping() {
        if let Some(addr) = std::ptr::NonNull::new(start as *mut std::ffi::c_void) {
            // SAFETY: `addr..addr+len` is exactly one mapping of this process, read and execute
            // only and private (`code_mapping`); MADV_DONTNEED on it drops page-table entries
            // of clean file pages, which the next access maps again from the same file.
            let _ = unsafe { nix::sys::mman::madvise(addr, len, nix::sys::mman::MmapAdvise::MADV_DONTNEED) };
        }
    }
}

/// The `r-xp` mapping of `/proc/self/maps` that holds this function's code: (start, length).
#[cfg(target_os = "linux")]
fn code_mapping() -> Option<(usize, usize)> {
    let here = code_mapping as fn() -> Option<(usize, usize)> as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| mapping_holding(line, here))
}

/// `(start, length)` of a line of `/proc/<pid>/maps` when it is a private read + execute
/// mapping holding `addr`.
fn mapping_holding(line: &str, addr: usize) -> Option<(usize, usize)> {
    let mut fields = line.split_ascii_whitespace();
    let (range, perms) = (fields.next()?, fields.next()?);
    let (start, end) = range.split_once('-')?;
    let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
    (perms == "r-xp" && (start..end).contains(&addr)).then(|| (start, end - start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_private_code_mapping_holding_the_address_is_picked() {
        let line = "5581a2c00000-5581a3200000 r-xp 00400000 fd:01 1234  /usr/bin/cashcode";
        assert_eq!(mapping_holding(line, 0x5581a2c00010), Some((0x5581a2c00000, 0x600000)));
        assert_eq!(mapping_holding(line, 0x5581a3200000), None, "the end is outside");
        for perms in ["r--p", "rw-p", "r-xs", "rwxp"] {
            assert_eq!(mapping_holding(&line.replace("r-xp", perms), 0x5581a2c00010), None, "{perms}");
        }
        assert_eq!(mapping_holding("garbage", 1), None);
        // This process: the test binary's own code, released and still running.
        let (start, len) = code_mapping().expect("this code's mapping");
        assert!(len > 0 && start <= release as fn() as usize);
        release();
        assert_eq!(mapping_holding("1000-2000 r-xp 0 0:0 0", 0x1800), Some((0x1000, 0x1000)));
    }
}
