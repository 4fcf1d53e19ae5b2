//! Writing a `BPF_F_MMAPABLE` array map's values through a window of it mapped into this
//! process: a plain store per byte instead of a `BPF_MAP_UPDATE_BATCH` syscall that copies
//! every key and value in and the value again into the array.
//!
//! The fill writes the staged generation's answer table (`xdns_index`, `xdns_vals` inner
//! arrays) and presence-filter half (`xdns_filter`) this way (`runtime.rs`). Only a window of
//! [`WINDOW`] bytes is mapped at a time and moved along as the writes go: a mapped page of a
//! BPF array counts in the process's resident set (and its high-water mark) like a page of its
//! own, so mapping a whole table (up to a GiB per half) would double-count the maps in every
//! memory figure. The writes go forward (records are packed in order), so each page is mapped
//! about once.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use anyhow::{bail, Context, Result};

/// Bytes mapped at a time: what the fill adds to the resident set's high-water mark (a
/// remap per window: a thousand at a GiB).
pub const WINDOW: usize = 1 << 20;

/// A moving window over the value area of one mmapable array map.
pub struct ArrayWindow {
    fd: OwnedFd,
    /// Bytes the kernel lets us map: the values (`max_entries` * the value size rounded up to
    /// 8) rounded up to a page.
    total: usize,
    page: usize,
    /// The mapping: first byte of the value area it covers, address, length.
    mapped: Option<(usize, *mut u8, usize)>,
}

// SAFETY: the mapping is shared memory owned by this value and written only through `&mut
// self`; the fd is a plain descriptor.
unsafe impl Send for ArrayWindow {}

impl ArrayWindow {
    /// A window over the array map `fd` (made with `BPF_F_MMAPABLE`) of `entries` values of
    /// `value_size` bytes; nothing mapped yet.
    pub fn new(fd: BorrowedFd<'_>, entries: usize, value_size: usize) -> Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let total = (entries * value_size.next_multiple_of(8)).next_multiple_of(page);
        let fd = fd.try_clone_to_owned().context("duplicating an array map's fd to map it")?;
        Ok(Self { fd, total, page, mapped: None })
    }

    /// The bytes `at..at + len` of the value area (value `i` starts at `i` * the value size
    /// rounded up to 8), mapped writable; the window moves when they are outside it.
    pub fn bytes(&mut self, at: usize, len: usize) -> Result<&mut [u8]> {
        let end = at.checked_add(len).filter(|&e| e <= self.total);
        let Some(end) = end else {
            bail!("bytes {at}..{} outside an array map of {} bytes", at.saturating_add(len), self.total);
        };
        let inside = matches!(self.mapped, Some((first, _, n)) if at >= first && end <= first + n);
        if !inside {
            self.unmap();
            let first = at - at % self.page;
            let n = WINDOW.max(end - first).next_multiple_of(self.page).min(self.total - first);
            // SAFETY: mapping `n` bytes of a BPF_F_MMAPABLE array map shared at a page-aligned
            // offset `first`, with `first + n` no more than its page-rounded value area (the
            // kernel refuses a mapping past it); the mapping is ours until `unmap`.
            let ptr = unsafe {
                libc::mmap(std::ptr::null_mut(), n, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, self.fd.as_raw_fd(), first as libc::off_t)
            };
            if ptr == libc::MAP_FAILED {
                bail!("mapping bytes {first}..{} of an array map: {}", first + n, std::io::Error::last_os_error());
            }
            self.mapped = Some((first, ptr.cast(), n));
        }
        let (first, ptr, _) = self.mapped.expect("mapped above");
        // SAFETY: `at..end` lies inside the mapping (checked or just made), which lives until
        // `unmap` (needs `&mut self`, so not while the slice is borrowed); only this value
        // writes through it.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr.add(at - first), len) })
    }

    /// Copy `src` to the bytes from `at` on, a window at a time.
    pub fn write(&mut self, mut at: usize, mut src: &[u8]) -> Result<()> {
        while !src.is_empty() {
            let room = WINDOW - at % self.page;
            let n = src.len().min(room);
            self.bytes(at, n)?.copy_from_slice(&src[..n]);
            (at, src) = (at + n, &src[n..]);
        }
        Ok(())
    }

    /// Drop the mapping (its pages leave the resident set); the next [`Self::bytes`] maps again.
    pub fn unmap(&mut self) {
        if let Some((_, ptr, n)) = self.mapped.take() {
            // SAFETY: unmapping exactly what `bytes` mapped; no slice into it is borrowed
            // (`&mut self`).
            unsafe { libc::munmap(ptr.cast(), n) };
        }
    }
}

impl Drop for ArrayWindow {
    fn drop(&mut self) {
        self.unmap();
    }
}
