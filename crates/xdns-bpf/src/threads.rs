//! Threads this crate and the daemon's XDP thread create: their capabilities.
//!
//! The daemon's XDP thread keeps its capabilities across the switch of user
//! (`SECBIT_NO_SETUID_FIXUP`, see the daemon's `privilege` module); a thread it creates
//! inherits that bit and its capabilities, and must give them up itself when it needs none
//! (the prefetch reader, the fill's compiling thread).

/// On the calling thread, which needs no capability: none after the process gives up root.
/// It inherited its creator's securebits (the daemon's XDP thread keeps its capabilities
/// across the switch of user): before the switch they are cleared, so the switch clears this
/// thread's capabilities as any other's (it keeps `CAP_SETUID` until then: glibc changes the
/// uid of every thread, and aborts the process if one of them may not); after it, it drops
/// what it holds.
pub fn no_caps_after_switch() {
    /// `SECBIT_NO_SETUID_FIXUP | SECBIT_KEEP_CAPS` (linux/securebits.h)
    const KEEP: libc::c_ulong = (1 << 2) | (1 << 4);
    // SAFETY: prctl with integer arguments only; securebits are per thread. Clearing them
    // needs CAP_SETPCAP, which a thread created before the switch holds.
    unsafe {
        let bits = libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0);
        if bits > 0 && bits as libc::c_ulong & KEEP != 0 {
            libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong & !KEEP, 0, 0, 0);
        }
        libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
    }
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        use caps::{CapSet, CapsHashSet};
        let _ = caps::clear(None, CapSet::Ambient);
        for set in [CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
            let _ = caps::set(None, set, &CapsHashSet::new());
        }
    }
}
