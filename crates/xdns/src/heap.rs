//! Handing freed heap memory back to the kernel after the large, short-lived allocations of a
//! zone load: the compiled kernel data, the encoded chunks of a map fill, a replaced zone set.
//!
//! glibc's allocator keeps what a program frees in its arenas for later allocations, and
//! returns only the top of the main heap on its own. After a load those freed blocks are
//! scattered below live zone data, so the resident size stays at the load's peak; for a
//! 1M-record zone that is about 190 MiB that nothing will use again until the next reload.
//! `malloc_trim(0)` walks every arena and releases each free page with `madvise`, so the
//! steady resident size is the zone data. The next reload allocates them again.
//!
//! [`HugePages`], the daemon's global allocator: glibc's, with every block of 2 MiB or more
//! marked for transparent huge pages (`MADV_HUGEPAGE`) before its first use. A large zone's
//! structures (the zone's node map, the compiled answer table's buckets and presence filter,
//! the fill's chunks) are read and written at random, and with 4 KiB pages most of those
//! accesses also miss the TLB (twice as costly on a virtual machine). Debian's kernels give huge
//! pages only to memory marked so (`/sys/kernel/mm/transparent_hugepage/enabled` is
//! `madvise`); the mark changes nothing where huge pages are off or already on for all.

use std::alloc::{GlobalAlloc, Layout, System};

/// Size of a transparent huge page on x86-64 and arm64 (4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// The system allocator, its blocks of [`HUGE_PAGE`] bytes or more marked `MADV_HUGEPAGE`:
/// the whole huge pages inside each (module docs).
pub struct HugePages;

impl HugePages {
    fn advise(ptr: *mut u8, len: usize) {
        if ptr.is_null() || len < HUGE_PAGE {
            return;
        }
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + len) & !(HUGE_PAGE - 1);
        if end > start {
            // SAFETY: [start, end) lies inside the block the allocator just gave out; the
            // advice changes how its pages are backed, never their contents. A refusal (a
            // kernel without THP) leaves 4 KiB pages, as without the call.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
}

// SAFETY: every block comes from `System` with the caller's layout and goes back to it
// unchanged; `advise` only marks pages inside a block.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        Self::advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`. A fresh mapping is zero without being touched, so its pages are
        // still unbacked when marked.
        let p = unsafe { System.alloc_zeroed(layout) };
        Self::advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        Self::advise(p, new_size);
        p
    }
}

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
    /// The VmFlags of the mapping of /proc/self/smaps that holds `addr`.
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-') && !r.ends_with(':')) {
                let (a, b) = range.split_once('-').expect("a range");
                let (a, b) = (usize::from_str_radix(a, 16).unwrap_or(0), usize::from_str_radix(b, 16).unwrap_or(0));
                inside = (a..b).contains(&addr);
            } else if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.trim().to_string();
                }
            }
        }
        panic!("no mapping holds {addr:#x}")
    }

    /// A block of several huge pages is marked for them (`hg`) in every way it is made: fresh,
    /// zeroed, grown from a small one.
    #[test]
    fn large_blocks_are_marked_for_huge_pages() {
        use std::alloc::{GlobalAlloc, Layout};
        let a = super::HugePages;
        let big = Layout::from_size_align(8 << 20, 8).expect("layout");
        let small = Layout::from_size_align(64 << 10, 8).expect("layout");
        // SAFETY: each block is used inside its layout and freed with it.
        unsafe {
            let p = a.alloc(big);
            let z = a.alloc_zeroed(big);
            let g = a.realloc(a.alloc(small), small, 16 << 20);
            for (what, ptr, len) in [("alloc", p, 8 << 20), ("alloc_zeroed", z, 8 << 20), ("realloc", g, 16 << 20)] {
                assert!(!ptr.is_null(), "{what}");
                let inner = (ptr as usize).next_multiple_of(super::HUGE_PAGE);
                assert!(inner + super::HUGE_PAGE <= ptr as usize + len, "{what}: a whole huge page inside");
                let flags = vm_flags(inner);
                assert!(flags.split_whitespace().any(|f| f == "hg"), "{what}: VmFlags {flags}");
            }
            a.dealloc(p, big);
            a.dealloc(z, big);
            a.dealloc(g, Layout::from_size_align(16 << 20, 8).expect("layout"));
        }
    }

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
