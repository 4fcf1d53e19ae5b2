//! Control-plane core of the xdns flood guard (issue 25): pure decisions, no I/O, no clock,
//! no BPF. The kernel stage and the daemon call these functions and own the side effects.
//!
//! - [`lists`]: the `blocklist`, `allowlist` and `block_names` files, parsed for the kernel maps.
//! - [`rrl`]: response rate limiting per client prefix × response class × name.
//! - [`cookies`]: DNS Cookies (RFC 7873) with RFC 9018 server cookies.
//! - [`detect`]: per-interval detection on a feature snapshot (floods, entropy, water torture,
//!   amplification).
//! - [`monitor`]: the rate monitor that unblocks sources once they calm down, and expiry.
//! - [`topk`]: which K blocked sources sit in the hardware tier, and the tier backends.
//!
//! Time is always passed in by the caller (seconds or nanoseconds as each API says), so every
//! decision is reproducible in a table test.

#![warn(missing_docs)]

pub mod cookies;
pub mod detect;
pub mod lists;
pub mod monitor;
pub mod rrl;
pub mod topk;
