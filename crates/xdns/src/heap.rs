//! Handing freed heap memory back to the kernel after the large, short-lived allocations of a
//! zone load: the compiled kernel data, the encoded chunks of a map fill, a replaced zone set.
//!
//! glibc's allocator keeps what a program frees in its arenas for later allocations, and
//! returns only the top of the main heap on its own. After a load those freed blocks are
//! scattered below live zone data, so the resident size stays at the load's peak; for a
//! 1M-record zone that is about 190 MiB that nothing will use again until the next reload.
//! `malloc_trim(0)` walks every arena and releases each free page with `madvise`, so the
//! steady resident size is the zone data. The next reload allocates them again.

/// Current resident size of this process in MiB (0 if `/proc` cannot be read).
pub fn rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

/// Give the allocator's free pages back to the kernel, after `what` (for the log), and log the
/// resident size before and after. Call it once the large temporary data is dropped.
pub fn release_freed(what: &str) {
    let before = rss_mib();
    trim();
    let after = rss_mib();
    tracing::info!(after = what, rss_mib_before = before, rss_mib = after, "freed memory returned to the kernel");
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim takes the allocator's own locks and only releases free pages; it
    // may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators (musl's) return freed memory on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(test)]
mod tests {
    /// A large block freed in pieces among live ones is given back: the resident size falls
    /// after the trim (glibc keeps such pages otherwise).
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn trim_returns_scattered_free_blocks() {
        // Many small blocks, every other one freed: holes that the heap's top cannot give back.
        let mut blocks: Vec<Vec<u8>> = (0..400_000).map(|i| vec![(i % 251) as u8; 400]).collect();
        let keep: Vec<Vec<u8>> = blocks.iter().step_by(8).cloned().collect();
        blocks.clear();
        blocks.shrink_to_fit();
        let before = super::rss_mib();
        super::trim();
        let after = super::rss_mib();
        assert!(keep.iter().all(|b| b.len() == 400));
        assert!(after + 50 < before, "resident size {before} MiB -> {after} MiB");
    }
}
