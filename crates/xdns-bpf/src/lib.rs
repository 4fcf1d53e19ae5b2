//! The XDP fast path of xdns: the skeleton of `bpf/xdns.bpf.c`, the compiler from zones to
//! kernel map entries, the map loader with atomic generation flips, and attach/detach.
//!
//! Layers, each testable alone:
//! - [`hash`]: the seeded suffix hash, the same function as `bpf/hash.h`.
//! - [`data`]: `compile_kernel_data(&ZoneSet)` -> [`data::KernelData`] (names and bodies), and
//!   its encoding into the ABI structs of `bpf/xdns_abi.h` for one generation.
//! - [`maps`]: the [`maps::KernelMaps`] trait (real maps or in memory) and the
//!   [`maps::Loader`] that writes a generation, flips it, and deletes the old one.
//! - [`select`]: the kernel's lookup re-expressed over in-memory maps, to compare with the
//!   engine's `select` without root.
//! - [`runtime`]: load, attach (BPF link), test-run and counters with libbpf.
//! - [`iface`]: what an interface does with `XDP_TX` frames: a veth's peer, the driver's
//!   `XDP_TX` error counters (rtnetlink, ethtool).
//! - [`cache`]: the resolver's answer cache in the kernel ([`cache::KernelCache`], an
//!   `xdns_wire::AnswerCache`), its refresh events ([`cache::PrefetchEvents`]) and allow list.
//! - [`inpath`]: the in-path cache's own program (`bpf/inpath.bpf.c`, issue 26): load, attach,
//!   counters, flush.
//! - [`guard`]: the guard stage's maps (issue 25): source lists from `xdns_guard::lists`, the
//!   modelled hardware tier (an `xdns_guard::topk::HardwareTier`), feature snapshots, counters.
//! - [`telemetry`]: stage 5 (issue 27): selection rules, the histogram bucket math shared with
//!   userspace, the kernel histograms.
//! - [`kit`]: kernel iteration (issue 32): the zone map, the pending queries userspace claims,
//!   the counters.
//! - [`threads`]: a thread created by the daemon's XDP thread gives up the capabilities it
//!   inherits.
//! - `window`: the fill's writes into mmapable array maps (answer table, presence filter)
//!   through a window of them mapped into the process.

#[allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, unused_imports)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/xdns.skel.rs"));
}

/// An id of the BPF program this binary carries (FNV-1a, 64 bits, of the generated skeleton,
/// which embeds the compiled object), in hex: two builds run the same kernel program when
/// their ids match (`xdns --version`).
pub fn build_id() -> &'static str {
    include!(concat!(env!("OUT_DIR"), "/build_id.rs"))
}

/// The ABI types of `bpf/xdns_abi.h`, generated from the program's BTF.
pub use skel::types;

pub mod cache;
pub mod data;
pub mod delta;
pub mod guard;
pub mod hash;
pub mod inpath;
pub mod kit;
pub mod iface;
pub mod maps;
mod ring;
pub mod route;
pub mod runtime;
pub mod select;
pub mod telemetry;
pub mod threads;
mod window;

include!(concat!(env!("OUT_DIR"), "/verdicts.rs"));

/// Name of verdict `v` (`"answered"`, `"pass_qname"`, ...) as shown by stats and metrics.
pub fn verdict_name(v: usize) -> Option<String> {
    let raw = VERDICT_NAMES.get(v)?;
    Some(raw.trim_start_matches("XDNS_").to_ascii_lowercase())
}
