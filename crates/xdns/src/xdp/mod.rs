//! The XDP fast path, as the daemon sees it: one layer.
//!
//! - [`XdpConfig`]: the `[xdp]` section.
//! - [`Fastpath`] ([`fastpath`]): the handle the daemon holds. It runs the program on a
//!   thread of its own, which owns the [`runtime::XdpRuntime`]; [`XdpStatus`] reads the
//!   counters from any thread and fills `xdns stats` / `/metrics`.
//! - [`delivery`]: which mode delivers the answers on each interface, and the guard that
//!   moves an interface that loses them.

pub mod delivery;
pub mod fastpath;
mod runtime;

use serde::{Deserialize, Serialize};

pub use delivery::{native_warning, plan};
pub use fastpath::{Fastpath, XdpStatus};
pub use runtime::{KernelUpdate, ZoneChange};

/// `[xdp]` section of the configuration.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct XdpConfig {
    /// Interfaces to attach to; empty = userspace only.
    #[serde(default)]
    pub interfaces: Vec<String>,
    /// native | generic | auto
    #[serde(default)]
    pub mode: XdpMode,
    /// The resolver's kernel answer cache (`bpf/cache.h`), set by the daemon from the
    /// `[resolver]` section (not read from `[xdp]`): `None` = authoritative only. With it, names
    /// under no served zone are answered from the cache for clients in `allow`.
    #[serde(skip)]
    pub resolver: Option<xdns_bpf::runtime::ResolverStage>,
    /// The daemon will give up root (`user = ...`): the XDP thread keeps its capabilities
    /// across the switch (`crate::privilege`). Set by the daemon, not read from `[xdp]`.
    #[serde(skip)]
    pub keep_caps: bool,
    /// The guard stage (`bpf/guard.h`), loaded when `[guard]` is configured; its lists come
    /// later (`crate::server::push_guard_lists`, through `XdpStatus::guard`). Set by the daemon, not read from `[xdp]`.
    #[serde(skip)]
    pub guard: Option<xdns_bpf::guard::GuardStage>,
    /// Kernel iteration (`bpf/kit.h`), from `[resolver] kernel_iteration`. Set by the daemon,
    /// not read from `[xdp]`.
    #[serde(skip)]
    pub kit: Option<xdns_bpf::kit::KitStage>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    Native,
    Generic,
    #[default]
    Auto,
}

/// An XDP link of the previous process, handed over on a takeover.
#[derive(Debug)]
pub struct InheritedLink {
    pub interface: String,
    /// The mode it was attached in (a link cannot change mode).
    pub mode: XdpMode,
    pub fd: std::os::fd::OwnedFd,
}

