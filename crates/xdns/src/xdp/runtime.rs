//! [`XdpRuntime`]: the loaded program, its maps and links, owned by the fast path's thread
//! ([`super::fastpath`]): load (the verifier runs here), fill, attach in the mode that
//! delivers ([`super::delivery`]), reload, and the delivery guard's look at each interface.
//!
//! - `load` sizes the zone maps from an estimate of the kernel's data ([`Shape::estimate`]: the
//!   names counted, a sample of the answers compiled) and loads the program; `Ok(None)` when
//!   no interface is configured. The maps are filled by `fill`, before `attach` on a takeover
//!   (the previous program answers until ours has its data) and after it on a fresh start
//!   (the program passes every query to the userspace sockets until then: `pass_not_loaded`).
//!   The fill compiles the answers as it writes them, a chunk at a time
//!   (`xdns_bpf::maps::Stream::compile`): the compiled bodies of the whole zone set are never
//!   held at once (issue 30); a reload writes its new generation the same way. Data that
//!   does not fit in maps sized from the estimate (one that undersized them) is measured
//!   exactly and installed into maps grown for it, at the first fill as at a reload
//!   (`XdpRuntime::grow_to_exact`).
//!
//! [`Shape::estimate`]: xdns_bpf::data::Shape::estimate
//! - `attach` attaches the program (BPF link) to every configured interface, or, on a
//!   takeover, switches the links handed over by the previous process to this program
//!   (`link_fds` is the other side of that hand-over).
//! - `reload` swaps the kernel's data atomically for a new zone set. Data that outgrows the
//!   zone maps sized at load (a secondary's first transfer when it had no stored copy beside
//!   zones loaded at start (with none at all, start-up defers the load to the first transfer:
//!   `server::start::defers_fastpath`), a reload
//!   or catalog member that adds many records) grows them in process: the program is loaded
//!   again with zone maps sized for the new data by the start-up rule ([`Capacity::for_shape`]),
//!   every other map reused, filled while its verifier runs on a thread of its own and the old
//!   program answers, and the links switched to it atomically once both are done
//!   (`XdpProgram::install_grown`; logged "grown program loaded" with the verifier's time, then
//!   "kernel maps grown from X to Y"). Only
//!   if that fails (the verifier, memory) is the old data retired and userspace left to answer.
//!
//! [`Capacity::for_shape`]: xdns_bpf::runtime::Capacity::for_shape
//! - `guard` is the delivery guard's periodic look ([`super::delivery`]).
//! - With `XdpConfig::resolver` set, `cache` hands out the kernel answer cache (an
//!   `xdns_wire::AnswerCache`) and the prefetch-event reader; `set_allow` replaces the allow list.
//! - Dropping the runtime detaches the program.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use xdns_zone::ZoneSet;

use super::delivery::{losing, native_warning, plan, Delivery, DeliveryReport, Guard};
use super::{InheritedLink, XdpConfig, XdpMode};

/// The attached XDP program and its maps.
pub struct XdpRuntime {
    prog: xdns_bpf::runtime::XdpProgram,
    interfaces: Vec<String>,
    mode: XdpMode,
    /// The load's zones (`installed`) are not in the maps yet ([`Self::fill`]).
    pending: bool,
    /// Entries the load's zones are expected to give (the estimate the maps were sized by),
    /// for the fill's progress.
    expected: usize,
    /// The delivery guard's state of each configured interface (see [`Self::guard`]).
    guards: Vec<Guard>,
    /// Kernel answers (`answered` + `cache_answered`) at the guard's last look.
    last_answered: u64,
    /// What the guard publishes for `xdns stats` (read from any thread).
    report: DeliveryReport,
    /// The guard stage's maps (`[guard]`): one handle whose clones share its writer state,
    /// so that every list generation follows the last one.
    guard_maps: Option<xdns_bpf::guard::Guard>,
    /// Loaded with kernel iteration (`bpf/kit.h`).
    kit: bool,
    /// The zones the active generation holds (`None`: unknown, e.g. a failed install), and
    /// for each apex the names whose stored bodies carry its SOA: what an in-place update
    /// ([`Self::update`]) starts from.
    installed: Option<Arc<ZoneSet>>,
    index: HashMap<Vec<u8>, xdns_bpf::delta::ZoneIndex>,
    /// The SOA-bound names of the last full install whose `index` is not built yet
    /// ([`Self::index_zones`]).
    unindexed: Option<SoaBound>,
}

/// One zone's new version as a transfer brought it: the owners its records changed (an
/// IXFR's deleted and added records).
#[derive(Clone, Debug)]
pub struct ZoneChange {
    pub apex: Vec<u8>,
    pub changed: Vec<Vec<u8>>,
}

/// How the kernel took a zone change ([`XdpRuntime::update`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelUpdate {
    /// Updated in place in the active generation.
    InPlace { names: usize, nodes: usize, answers: usize, micros: u64 },
    /// A full new generation, and why the change was not made in place.
    Full { reason: String },
}

impl std::fmt::Display for KernelUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelUpdate::InPlace { names, nodes, answers, micros } => write!(
                f,
                "in place: {names} names compiled, {nodes} nodes and {answers} answers written in {:.1} ms",
                *micros as f64 / 1000.0
            ),
            KernelUpdate::Full { reason } => write!(f, "full: {reason}"),
        }
    }
}

/// Most names an in-place update compiles (or an eighth of the zone's names, if more);
/// beyond, a full generation is written. (`Capacity::for_shape` sizes `xdns_bodies_m` by it.)
const IN_PLACE_LIMIT: usize = xdns_bpf::runtime::IN_PLACE_MIN_NAMES;

impl XdpRuntime {
    /// Size the kernel's data for `zones` ([`xdns_bpf::data::Shape::estimate`]) and load the
    /// program (the verifier runs here); neither filled ([`Self::fill`]) nor attached
    /// ([`Self::attach`]) yet. Map capacity is three times the initial data (room for the old
    /// and the new generation during a reload, plus growth), the answer table the initial
    /// answers and an eighth more; a reload beyond that grows the maps in process
    /// ([`Self::reload`]).
    pub fn load(
        cfg: &XdpConfig,
        listen: &[SocketAddr],
        zones: &ZoneSet,
        edns_payload: u16,
    ) -> anyhow::Result<Option<Self>> {
        if cfg.interfaces.is_empty() {
            return Ok(None);
        }
        let shape = estimate_logged(zones);
        Self::load_sized(cfg, listen, zones, edns_payload, &shape).map(Some)
    }

    /// [`Self::load`] with the zone maps sized for data of `shape` (the estimate of `zones`).
    fn load_sized(
        cfg: &XdpConfig,
        listen: &[SocketAddr],
        zones: &ZoneSet,
        edns_payload: u16,
        shape: &xdns_bpf::data::Shape,
    ) -> anyhow::Result<Self> {
        use xdns_bpf::runtime::{Capacity, LoadConfig, XdpProgram};

        crate::progress::STARTUP.compiled();
        let load = LoadConfig {
            listen: listen.to_vec(),
            edns_payload,
            seed: None,
            capacity: Capacity::for_shape(shape),
            resolver: cfg.resolver.clone(),
            guard: cfg.guard.clone(),
            kit: cfg.kit.clone(),
        };
        let t = std::time::Instant::now();
        let prog = XdpProgram::load(&load)?;
        // how close the program is to the verifier's limit of 1M instructions processed
        let verified = prog.insn_count().map_or(0, |(_, v)| v);
        tracing::info!(seconds = t.elapsed().as_secs_f32(), verified, "XDP: program loaded (verifier), maps created");
        let report = cfg
            .interfaces
            .iter()
            .map(|i| Delivery { interface: i.clone(), ..Default::default() })
            .collect();
        let guard_maps = match &cfg.guard {
            Some(g) => {
                let maps = prog.guard()?;
                if g.features {
                    // the detector blocks the feature prefixes: probe them by hash from the
                    // first generation on, so that a block is one map update
                    maps.reserve_lengths(Some(24), Some(56));
                }
                Some(maps)
            }
            None => None,
        };
        Ok(Self {
            guard_maps,
            kit: cfg.kit.is_some(),
            prog,
            interfaces: cfg.interfaces.clone(),
            mode: cfg.mode,
            pending: true,
            expected: shape.nodes + shape.answers,
            guards: Vec::new(),
            last_answered: 0,
            report: std::sync::Arc::new(std::sync::Mutex::new(report)),
            installed: Some(Arc::new(zones.clone())),
            index: HashMap::new(),
            unindexed: None,
        })
    }

    /// Fill the maps with the load's zones, compiled as they are written (nothing if a reload
    /// came first). For a large zone set this takes seconds to minutes: a fresh start attaches
    /// first and fills after, so that the userspace sockets answer meanwhile. If the data does
    /// not fit in the maps sized from the estimate (one that undersized them), the maps grow
    /// to the data's exact size ([`Self::grow_to_exact`]), as a reload's do.
    pub fn fill(&mut self) -> anyhow::Result<()> {
        use anyhow::Context;
        if !self.pending {
            return Ok(());
        }
        let Some(zones) = self.installed.clone() else {
            self.pending = false;
            return Ok(());
        };
        let filled = match install_logged(&mut self.prog, &zones, self.expected) {
            Err(e) if !super::fastpath::abandoned(&e) => self.grow_to_exact(&zones, e),
            done => done,
        };
        let filled = filled.context("filling the XDP maps");
        let out = match filled {
            Ok(bound) => {
                self.index.clear();
                self.unindexed = Some(bound);
                Ok(())
            }
            Err(e) => {
                self.installed = None;
                Err(e)
            }
        };
        self.pending = false;
        crate::heap::release_freed("filling the XDP maps");
        out
    }

    /// Build the in-place indexes ([`zone_indexes`]) of the zones the last fill or reload
    /// installed, if not built yet. Apart from the install, so that the XDP thread publishes the
    /// new data's table counts the moment it is active (`xdns stats` never shows the data
    /// active with the counts of none) and builds these after; an in-place update builds
    /// them first if it comes before.
    pub fn index_zones(&mut self) {
        if let (Some(bound), Some(zones)) = (self.unindexed.take(), self.installed.clone()) {
            self.index = zone_indexes(&zones, bound);
        }
    }

    /// Zone data is in the maps: a generation is active (none until the first fill or reload
    /// succeeds; the program passes every query meanwhile).
    pub fn data_active(&self) -> bool {
        self.prog.generation() != 0
    }

    /// Attach to every configured interface. A link in `inherited` for that interface and
    /// mode gets this program swapped in atomically (no moment without a program); one of
    /// another mode is detached first (queries meanwhile reach the userspace sockets). Links
    /// for interfaces no longer configured are only closed here: they go when the previous
    /// process, their last holder, exits.
    ///
    /// The mode is chosen so that answers arrive ([`plan`]): with `auto`, a veth whose peer
    /// cannot receive native `XDP_TX` frames gets generic mode (an inherited native link there
    /// too); with `native`, such a veth is attached as asked, with a warning.
    pub fn attach(&mut self, inherited: Vec<InheritedLink>) -> anyhow::Result<()> {
        use xdns_bpf::runtime::AttachMode;
        let mut inherited = inherited;
        for ifname in self.interfaces.clone() {
            let peer = xdns_bpf::iface::veth_peer(&ifname);
            let (mode, reason) = plan(self.mode, &ifname, &peer);
            if let Some(w) = self.mode.eq(&XdpMode::Native).then(|| native_warning(&ifname, &peer)).flatten() {
                tracing::warn!("{w}");
            }
            match inherited.iter().position(|l| l.interface == ifname) {
                Some(i) => {
                    let link = inherited.swap_remove(i);
                    if link.mode == self.mode {
                        self.prog.adopt_link(&ifname, link.fd)?;
                        tracing::info!(interface = %ifname, running = self.attached_as(&ifname),
                            "XDP: program replaced inside the inherited link");
                        if mode == AttachMode::Generic && self.attached_as(&ifname) == "native" {
                            self.prog.reattach(&ifname, mode)?;
                            tracing::warn!(interface = %ifname, reason = reason.as_deref().unwrap_or(""),
                                "XDP: the inherited link ran native, which loses answers here: attached again in generic mode");
                        }
                    } else {
                        xdns_bpf::runtime::detach_link(std::os::fd::AsFd::as_fd(&link.fd))?;
                        tracing::warn!(interface = %ifname, from = ?link.mode, to = ?self.mode,
                            "XDP: mode changed: inherited link detached, attaching again (userspace answers meanwhile)");
                        self.prog.attach(&ifname, mode)?;
                    }
                }
                None => {
                    self.prog.attach(&ifname, mode)?;
                    tracing::info!(interface = %ifname, mode = ?self.mode, running = self.attached_as(&ifname),
                        reason = reason.as_deref().unwrap_or(""), data = self.data_active(), "XDP: attached");
                }
            }
            let running = self.attached_as(&ifname);
            let reason = match reason {
                Some(r) => Some(r),
                None if self.mode == XdpMode::Auto && running == "generic" => {
                    tracing::warn!(interface = %ifname,
                        "XDP: the driver has no native XDP; the program runs on the skb path (generic), several times slower");
                    Some("the driver has no native XDP: generic".to_string())
                }
                None => None,
            };
            self.set_reason(&ifname, reason);
            self.guards.retain(|g| g.interface != ifname);
            let veth = !matches!(peer, Ok(xdns_bpf::iface::PeerXdp::NotVeth));
            self.guards.push(Guard::start(&ifname, veth));
        }
        for link in inherited {
            tracing::info!(interface = %link.interface, "XDP: interface no longer configured; detached when the previous process exits");
        }
        Ok(())
    }

    /// The delivery guard, called every [`GUARD_PERIOD`] with the kernel answers counted so
    /// far (`answered` + `cache_answered`, all CPUs). Two signs that native mode loses the
    /// answers of an interface:
    /// - its driver's `XDP_TX` errors grew by at least half the answers sent since the last
    ///   look ([`losing`]);
    /// - it is a veth whose peer no longer runs a native XDP program (one taken off while we
    ///   run; with GRO on, such a peer swallows the frames without any error count).
    ///
    /// With `mode = "auto"` such an interface is attached again in generic mode (userspace
    /// answers for that moment), logged and counted; with `native` the loss is logged once.
    pub fn guard(&mut self, answered: u64) {
        let sent = answered.saturating_sub(self.last_answered);
        self.last_answered = answered;
        let mut moved = Vec::new();
        for g in &mut self.guards {
            let mut reason = None;
            if let Some(Ok(Some(errors))) = g.tx.as_mut().map(|tx| tx.read()) {
                let lost = errors.saturating_sub(g.last_errors);
                g.last_errors = errors;
                if losing(lost, sent) {
                    reason = Some(format!("{lost} of {sent} kernel answers lost in native mode (driver XDP_TX errors): generic"));
                    if self.mode == XdpMode::Native && !g.warned {
                        g.warned = true;
                        tracing::warn!(interface = %g.interface, lost, answered = sent,
                            "XDP: the driver failed to send {lost} of {sent} kernel answers (XDP_TX errors); mode = \"native\" keeps it so: \
                             set mode = \"auto\" or \"generic\", or see README's XDP section");
                    }
                }
            }
            if reason.is_none() && g.veth && self.mode == XdpMode::Auto {
                if let Ok(p @ xdns_bpf::iface::PeerXdp::NoProgram { .. }) = xdns_bpf::iface::veth_peer(&g.interface) {
                    reason = p.why_not_native().map(|why| format!("{why} (any more): generic"));
                }
            }
            if let (Some(r), XdpMode::Auto) = (reason, self.mode) {
                moved.push((g.interface.clone(), r));
            }
        }
        for (ifname, reason) in moved {
            if self.attached_as(&ifname) != "native" {
                continue;
            }
            match self.prog.reattach(&ifname, xdns_bpf::runtime::AttachMode::Generic) {
                Ok(()) => tracing::warn!(interface = %ifname, reason = %reason,
                    "XDP: native mode loses the answers here; switched to generic mode (userspace answered meanwhile)"),
                Err(e) => tracing::error!(interface = %ifname, "XDP: switching to generic mode failed: {e:#}"),
            }
            let mut report = self.report.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(d) = report.iter_mut().find(|d| d.interface == ifname) {
                d.fallbacks += 1;
                d.reason = Some(reason);
            }
        }
    }

    /// The delivery report, for the status reader of other threads.
    pub fn delivery_report(&self) -> DeliveryReport {
        self.report.clone()
    }

    fn set_reason(&self, ifname: &str, reason: Option<String>) {
        let mut report = self.report.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = report.iter_mut().find(|d| d.interface == ifname) {
            d.reason = reason;
        }
    }

    /// How `ifname` runs our program: native, generic or offload ("none": not ours, or the
    /// query failed), for the log. With `mode = "auto"` this is what the kernel chose.
    fn attached_as(&self, ifname: &str) -> &'static str {
        self.prog.attached_as(ifname).ok().flatten().unwrap_or("none")
    }

    /// Duplicates of our links, for a new process taking over.
    pub fn link_fds(&self) -> anyhow::Result<Vec<InheritedLink>> {
        Ok(self
            .prog
            .link_fds()?
            .into_iter()
            .map(|(interface, fd)| InheritedLink {
                interface,
                mode: self.mode,
                fd,
            })
            .collect())
    }

    /// Point our links at our program again (after an abandoned takeover).
    pub fn reclaim_links(&self) -> anyhow::Result<()> {
        self.prog.reclaim_links()
    }

    /// Swap the kernel's data for `zones` atomically (new generation written, then flipped).
    ///
    /// If the new data needs larger zone maps than those of the running program (sized by the
    /// start-up rule for the data of the day), or cannot be written beside the old one, the
    /// maps grow: a program with larger zone maps takes it, and the links, in process, while
    /// the old data answers (see the module doc). If growing fails, the old data must not go
    /// on answering in the kernel while userspace serves the new zones: the old generation
    /// is retired (every query passes to userspace meanwhile, which answers from the new
    /// zones) and the install is tried once more in the room that freed. If that fails too
    /// the kernel answers nothing from zones until a reload fits; the error says so.
    pub fn reload(&mut self, zones: &Arc<ZoneSet>) -> anyhow::Result<()> {
        self.pending = false; // the load's zones are older than these
        let shape = estimate_logged(zones);
        let installed = self.install_or_retire(zones, &shape);
        let installed = match installed {
            Ok(bound) => {
                self.installed = Some(zones.clone());
                self.index.clear();
                self.unindexed = Some(bound);
                Ok(())
            }
            Err(e) => {
                self.installed = None;
                self.unindexed = None;
                Err(e)
            }
        };
        crate::heap::release_freed("an XDP reload");
        installed
    }

    /// Give the kernel `zones`, which differ from the zones it holds only by `change`: in
    /// place when [`xdns_bpf::delta::zone_delta`] and `Loader::apply` can (an IXFR of a few
    /// records: only the entries that change are written, into the active generation), else
    /// a full [`Self::reload`], whose reason is returned and logged.
    pub fn update(&mut self, zones: &Arc<ZoneSet>, change: &ZoneChange) -> anyhow::Result<KernelUpdate> {
        let zone = xdns_wire::name::to_presentation(&change.apex);
        let reason = match self.in_place(zones, change) {
            Ok(done) => {
                tracing::info!(%zone, "XDP: zone change applied {done}");
                return Ok(done);
            }
            Err(reason) => reason,
        };
        tracing::info!(%zone, %reason, "XDP: zone change not made in place: full reload");
        self.reload(zones)?;
        Ok(KernelUpdate::Full { reason })
    }

    fn in_place(&mut self, zones: &Arc<ZoneSet>, change: &ZoneChange) -> Result<KernelUpdate, String> {
        let t = std::time::Instant::now();
        if self.pending || self.prog.generation() == 0 {
            return Err("no zone data active in the kernel".into());
        }
        self.index_zones();
        let old = self.installed.clone().ok_or("the kernel's zones are not known (an install failed)")?;
        let apex = &change.apex[..];
        let others_same = old.zones.len() == zones.zones.len()
            && zones.zones.iter().all(|(a, z)| &a[..] == apex || old.zones.get(a).is_some_and(|o| Arc::ptr_eq(o, z)));
        if !others_same {
            return Err("other zones changed too".into());
        }
        let index = self.index.get(apex).ok_or("the zone's index is missing")?;
        let limit = zones.zones.get(apex).map_or(IN_PLACE_LIMIT, |z| in_place_limit(z));
        let delta = xdns_bpf::delta::zone_delta(&old, zones, apex, &change.changed, index, limit)?;
        let applied = self.prog.apply(&delta).map_err(|e| format!("{e:#}"))?;
        if let (Some(ix), Some(o), Some(z)) = (self.index.get_mut(apex), old.zones.get(apex), zones.zones.get(apex)) {
            ix.update(o, z, &change.changed, &delta);
        }
        self.installed = Some(zones.clone());
        Ok(KernelUpdate::InPlace {
            names: delta.names,
            nodes: applied.nodes,
            answers: applied.answers,
            micros: t.elapsed().as_micros() as u64,
        })
    }

    /// [`Self::reload`]'s install of `zones` (of about `shape`): into grown maps if the new
    /// data needs them or does not fit beside the old; retire the old generation if growing
    /// fails too. Each try compiles the zones again as it writes them. On success, the
    /// SOA-bound names by apex (what in-place updates start from, [`zone_indexes`]).
    fn install_or_retire(&mut self, zones: &ZoneSet, shape: &xdns_bpf::data::Shape) -> anyhow::Result<SoaBound> {
        use anyhow::Context;
        use xdns_bpf::runtime::Capacity;
        let abandoned = super::fastpath::abandoned;
        let expected = shape.nodes + shape.answers;
        let have = self.prog.capacity();
        let need = Capacity::for_shape(shape);
        let mut tried = false;
        if !have.holds(&need) {
            tried = true;
            match grow_logged(&mut self.prog, zones, expected, have.max(&need)) {
                Err(e) if !abandoned(&e) => tracing::warn!(error = %format!("{e:#}"),
                    "XDP: growing the kernel maps failed; installing into the maps sized at start"),
                done => return done,
            }
        }
        let installed = match install_logged(&mut self.prog, zones, expected) {
            Err(e) if !tried && !abandoned(&e) => {
                // the maps hold the new data, but not beside the old: new maps hold it alone
                tracing::info!(error = %format!("{e:#}"), "XDP: the new zone data does not fit beside the old");
                match grow_logged(&mut self.prog, zones, expected, have.max(&need)) {
                    Err(g) if !abandoned(&g) => {
                        tracing::warn!(error = %format!("{g:#}"), "XDP: growing the kernel maps failed");
                        Err(e)
                    }
                    done => return done,
                }
            }
            done => done,
        };
        // growing to the estimate's size failed, or was not tried: an estimate that undersized
        // the data is mended by maps of its exact size
        let installed = match installed {
            Err(e) if !abandoned(&e) => self.grow_to_exact(zones, e),
            done => done,
        };
        match installed {
            Err(e) if !abandoned(&e) && self.prog.generation() != 0 => {
                tracing::warn!(error = %format!("{e:#}"),
                    "XDP: the new zone data does not fit beside the old and the maps could not grow; old data retired (userspace answers), trying again");
                self.prog.retire().context("retiring the old kernel data")?;
                install_logged(&mut self.prog, zones, expected).context(
                    "the new zone data does not fit in the kernel maps, which could not grow: userspace answers every zone \
                     query until a reload fits (a restart sizes the maps for the zones of the day)",
                )
            }
            done => done,
        }
    }

    /// After an install of `zones` into maps sized from their estimate failed (`failed`): when
    /// their exact shape (every answer compiled once more, none held: seconds for a million
    /// names) needs larger maps than the running program's, the estimate undersized them,
    /// and `zones` are installed into maps grown for that shape; otherwise (or if that
    /// fails) `failed`, with the growth's error as context.
    fn grow_to_exact(&mut self, zones: &ZoneSet, failed: anyhow::Error) -> anyhow::Result<SoaBound> {
        use xdns_bpf::runtime::Capacity;
        let have = self.prog.capacity();
        let shape = exact_shape_logged(zones);
        let need = Capacity::for_shape(&shape);
        if have.holds(&need) {
            return Err(failed);
        }
        tracing::warn!(error = %format!("{failed:#}"), %have, %need,
            "XDP: the zone data does not fit in the kernel maps sized from its estimate: growing them to its exact size");
        grow_logged(&mut self.prog, zones, shape.nodes + shape.answers, have.max(&need))
            .map_err(|g| if super::fastpath::abandoned(&g) { g } else { failed.context(format!("growing the maps to the exact size failed too: {g:#}")) })
    }

    /// The kernel answer cache and a reader of its refresh events, for the resolver. `None`
    /// when the cache stage is off (`XdpConfig::resolver` unset).
    /// Kernel iteration's maps, when the program was loaded with it.
    pub fn kit_maps(&self) -> anyhow::Result<Option<xdns_bpf::kit::KitMaps>> {
        if !self.kit {
            return Ok(None);
        }
        Ok(Some(self.prog.kit()?))
    }

    pub fn cache(
        &self,
    ) -> anyhow::Result<
        Option<(
            xdns_bpf::cache::KernelCache,
            xdns_bpf::cache::PrefetchEvents,
        )>,
    > {
        if !self.prog.resolver_enabled() {
            return Ok(None);
        }
        Ok(Some((self.prog.cache()?, self.prog.prefetch_events()?)))
    }

    /// The guard stage's maps (a clone of the one handle). An error when the stage is not
    /// loaded (`[guard]` absent).
    pub fn guard_maps(&self) -> anyhow::Result<xdns_bpf::guard::Guard> {
        self.guard_maps.clone().ok_or_else(|| anyhow::anyhow!("the XDP program was loaded without the guard stage"))
    }

    /// Replace the resolver's allow list (e.g. after a reload of `[resolver] allow`).
    pub fn set_allow(&self, allow: &[(std::net::IpAddr, u8)]) -> anyhow::Result<()> {
        self.prog.set_allow(allow)
    }

    /// The telemetry stage's maps (rules, histograms), on duplicated fds.
    pub fn telemetry(&self) -> anyhow::Result<xdns_bpf::telemetry::TelemetryMaps> {
        self.prog.telemetry()
    }

    /// A reader of the verdict and memo counters and of the active generation, for other
    /// threads: it does not wait while this runtime fills or reloads the maps.
    pub fn status_reader(&self) -> anyhow::Result<xdns_bpf::runtime::StatusReader> {
        self.prog.status_reader()
    }

    /// Set it and a fill or reload under way gives up (`xdns_bpf::maps::Abandoned`).
    pub fn abandon_handle(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        self.prog.abandon_handle()
    }

    /// How far the fill or reload under way has got (entries written of its total).
    pub fn fill_progress(&self) -> std::sync::Arc<xdns_bpf::maps::FillProgress> {
        self.prog.fill_progress()
    }

    /// Answers of the active data in the answer table, and answers only in the hash map.
    pub fn table_counts(&self) -> (usize, usize) {
        self.prog.table_counts()
    }
}

/// The names of each zone (by apex) whose stored bodies carry its SOA
/// ([`xdns_bpf::delta::soa_bound_by_zone`]), gathered as a fill streams the answers by.
type SoaBound = HashMap<Vec<u8>, HashSet<Vec<u8>>>;

/// The most names one change of `zone` may recompile in place: past an eighth of the zone's
/// names, a full generation costs about as much.
fn in_place_limit(zone: &xdns_zone::Zone) -> usize {
    (zone.nodes.len() / 8).max(IN_PLACE_LIMIT)
}

/// What in-place updates keep of each zone ([`xdns_bpf::delta::ZoneIndex`]), from a full
/// compile's SOA-bound names.
fn zone_indexes(zones: &ZoneSet, mut bound: SoaBound) -> HashMap<Vec<u8>, xdns_bpf::delta::ZoneIndex> {
    let t = std::time::Instant::now();
    let out: HashMap<_, _> = zones
        .zones
        .iter()
        .map(|(a, z)| {
            let bound = bound.remove(&a[..]).unwrap_or_default();
            (a.to_vec(), xdns_bpf::delta::ZoneIndex::build(z, bound, in_place_limit(z)))
        })
        .collect();
    tracing::debug!(seconds = t.elapsed().as_secs_f32(), "XDP: zone indexes for in-place updates built");
    out
}

/// The size of the kernel's data for `zones`, estimated without holding it
/// ([`xdns_bpf::data::Shape::estimate`]), with the time it took in the log.
fn estimate_logged(zones: &ZoneSet) -> xdns_bpf::data::Shape {
    let t = std::time::Instant::now();
    tracing::info!(rss_mib = crate::heap::rss_mib(), "XDP: sizing the kernel maps (names counted, a sample of the answers compiled)");
    let shape = xdns_bpf::data::Shape::estimate(zones);
    tracing::info!(
        names = shape.nodes,
        answers = shape.answers,
        record_bytes = shape.record_bytes,
        seconds = t.elapsed().as_secs_f32(),
        rss_mib = crate::heap::rss_mib(),
        "XDP: kernel data sized"
    );
    shape
}

/// The exact size of the kernel's data for `zones`: every node counted and every answer
/// compiled, one at a time (none held), measured as [`xdns_bpf::data::Shape::of`] measures
/// compiled data; with the time it took in the log. For when the estimate undersized the maps.
fn exact_shape_logged(zones: &ZoneSet) -> xdns_bpf::data::Shape {
    use xdns_bpf::data::{encode_body, record_len, CLASS_M_LEN, CLASS_S_LEN};
    let t = std::time::Instant::now();
    let mut shape = xdns_bpf::data::Shape { nodes: xdns_bpf::data::nodes(zones).count(), ..Default::default() };
    for a in xdns_bpf::data::answers(zones) {
        match a.body.bytes.len() {
            n if n <= CLASS_S_LEN => {}
            n if n <= CLASS_M_LEN => shape.class_m += 1,
            _ => shape.class_l += 1,
        }
        shape.answers += 1;
        let (ans, v) = encode_body(&a.body);
        shape.record_bytes += record_len(&ans, &v) as u64;
    }
    tracing::info!(names = shape.nodes, answers = shape.answers, record_bytes = shape.record_bytes,
        seconds = t.elapsed().as_secs_f32(), "XDP: kernel data measured exactly");
    shape
}

/// What a streamed install saw go by: entries, and the SOA-bound names.
#[derive(Default)]
struct Seen {
    names: usize,
    answers: usize,
    bound: SoaBound,
    /// When the loader first asked for an entry: before it, a growth opens the program again
    /// and makes its zone maps (the verifier then runs beside the fill); nothing is written
    /// until then.
    first_read: Option<std::time::Instant>,
}

/// The kernel's data for `zones`, compiled by another thread (`compiler`, see
/// [`compiling`]) a chunk ahead of the loader that writes it, counted in `seen` (the answers
/// also in `xdns stats`' `load.answers_compiled`).
fn streamed<'a>(zones: &'a ZoneSet, expected: usize, compiled: Compiled, seen: &'a RefCell<Seen>) -> xdns_bpf::maps::Stream<'a> {
    use std::borrow::Cow;
    let mut chunks = compiled.answers.into_iter();
    let chunks = std::iter::from_fn(move || {
        seen.borrow_mut().first_read.get_or_insert_with(std::time::Instant::now);
        chunks.next()
    });
    let answers = chunks.flatten().inspect(move |a| {
        let mut s = seen.borrow_mut();
        s.answers += 1;
        if s.answers.is_multiple_of(xdns_bpf::data::PROGRESS_EVERY) {
            crate::progress::STARTUP.answers_compiled(s.answers as u64);
        }
        if xdns_bpf::delta::carries_soa(&a.body) {
            for (apex, names) in xdns_bpf::delta::soa_bound_by_zone(zones, std::slice::from_ref(a)) {
                // past the in-place limit only the excess matters (`ZoneIndex::build`)
                let limit = zones.zones.get(&apex[..]).map_or(usize::MAX, |z| in_place_limit(z));
                let set = s.bound.entry(apex).or_default();
                if set.len() <= limit {
                    set.extend(names);
                }
            }
        }
    });
    let nodes = compiled.nodes.into_iter().flatten().inspect(move |_| seen.borrow_mut().names += 1);
    xdns_bpf::maps::Stream { answers: Box::new(answers.map(Cow::Owned)), nodes: Box::new(nodes.map(Cow::Owned)), expected }
}

/// The receiving ends of a compiling thread ([`compiler`]): chunks of answers, then of nodes.
struct Compiled {
    answers: std::sync::mpsc::Receiver<Vec<xdns_bpf::data::AnswerEntry>>,
    nodes: std::sync::mpsc::Receiver<Vec<xdns_bpf::data::NodeEntry>>,
}

/// Chunks compiled ahead of the loader: enough to keep both busy, little memory (≈ 2 MB a chunk).
const COMPILED_AHEAD: usize = 2;

/// Compiles the kernel's data for `zones` into chunks of [`xdns_bpf::maps::CHUNK`] entries,
/// answers first then nodes (the loader's order), at most [`COMPILED_AHEAD`] chunks ahead of
/// the loader: on a machine of two or more cores the compile and the map writes overlap. Ends
/// early when the loader stops reading (an error, or abandoned).
fn compiler<'s, 'z: 's>(scope: &'s std::thread::Scope<'s, '_>, zones: &'z ZoneSet) -> std::io::Result<Compiled> {
    use std::sync::mpsc::sync_channel;
    let chunk = xdns_bpf::maps::CHUNK;
    let (atx, answers) = sync_channel(COMPILED_AHEAD);
    let (ntx, nodes) = sync_channel(COMPILED_AHEAD);
    std::thread::Builder::new().name("xdns-compile".into()).spawn_scoped(scope, move || {
        // created by the XDP thread: none of its capabilities, now or after the switch of user
        xdns_bpf::threads::no_caps_after_switch();
        fn send<T>(it: impl Iterator<Item = T>, chunk: usize, tx: std::sync::mpsc::SyncSender<Vec<T>>) -> bool {
            let mut buf = Vec::with_capacity(chunk);
            for x in it {
                buf.push(x);
                if buf.len() == chunk && tx.send(std::mem::replace(&mut buf, Vec::with_capacity(chunk))).is_err() {
                    return false;
                }
            }
            buf.is_empty() || tx.send(buf).is_ok()
        }
        // `data::answers` then `data::nodes`, each zone's names sorted once for both
        let (answers, nodes) = xdns_bpf::data::answers_then_nodes(zones);
        if send(answers, chunk, atx) {
            send(nodes, chunk, ntx);
        }
    })?;
    Ok(Compiled { answers, nodes })
}

/// Time between the progress lines of a fill that takes long.
const FILL_LOG_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// Installs `zones` (about `expected` entries, compiled as they are written) into a program
/// with zone maps of capacity `to`, which replaces the running one
/// ([`xdns_bpf::runtime::XdpProgram::install_grown_stream`]), logged.
fn grow_logged(
    prog: &mut xdns_bpf::runtime::XdpProgram,
    zones: &ZoneSet,
    expected: usize,
    to: xdns_bpf::runtime::Capacity,
) -> anyhow::Result<SoaBound> {
    let t = std::time::Instant::now();
    let from = prog.capacity();
    tracing::info!(%from, %to, rss_mib = crate::heap::rss_mib(),
        "XDP: the new zone data does not fit in the kernel maps: loading the program again with larger zone maps (the old data answers meanwhile)");
    let seen = compiling(prog, t, |prog, src| prog.install_grown_stream(src, to), zones, expected)?;
    // the zone maps were made before the first entry was asked for; the verifier ran on a
    // thread of its own beside the fill, which then waited for it (if it was the longer)
    let made = seen.first_read.map_or(0.0, |r| r.duration_since(t).as_secs_f32());
    let timing = prog.load_timing();
    tracing::info!(seconds = made, verifier_seconds = timing.verifier.as_secs_f32(),
        fill_seconds = timing.fill.unwrap_or_default().as_secs_f32(), waited_seconds = timing.waited.as_secs_f32(),
        "XDP: grown program loaded (zone maps made, then the verifier run beside the fill)");
    log_filled(prog, t, &format!("XDP: kernel maps grown from {from} to {to}; links switched to the new program, new data active"));
    Ok(seen.bound)
}

/// Runs `install` of `zones` compiled as written, with a progress line in the log every
/// [`FILL_LOG_PERIOD`] and the compile's counts logged at its end.
fn compiling(
    prog: &mut xdns_bpf::runtime::XdpProgram,
    t: std::time::Instant,
    install: impl FnOnce(&mut xdns_bpf::runtime::XdpProgram, xdns_bpf::maps::Stream<'_>) -> anyhow::Result<()>,
    zones: &ZoneSet,
    expected: usize,
) -> anyhow::Result<Seen> {
    tracing::info!(rss_mib = crate::heap::rss_mib(), "XDP: compiling answers for the kernel, written to its maps as they come");
    let seen = RefCell::new(Seen::default());
    let progress = prog.fill_progress();
    std::thread::scope(|s| {
        let compiled = compiler(s, zones).map_err(|e| anyhow::anyhow!("starting the compiling thread: {e}"))?;
        // the stream (and with it the receivers) goes when the install returns: the compiling
        // thread then ends at its next chunk, and the scope waits for it
        with_fill_log(progress, t, || install(prog, streamed(zones, expected, compiled, &seen)))
    })?;
    let seen = seen.into_inner();
    crate::progress::STARTUP.answers_compiled(seen.answers as u64);
    tracing::info!(names = seen.names, answers = seen.answers, seconds = t.elapsed().as_secs_f32(),
        rss_mib = crate::heap::rss_mib(), "XDP: answers compiled");
    Ok(seen)
}

/// Runs `f` (an install) with a progress line in the log every [`FILL_LOG_PERIOD`].
fn with_fill_log<T>(progress: Arc<xdns_bpf::maps::FillProgress>, t: std::time::Instant, f: impl FnOnce() -> T) -> T {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(FILL_LOG_PERIOD) {
                let (written, total) = progress.get();
                tracing::info!(written, total, seconds = t.elapsed().as_secs(), "XDP: filling the kernel maps");
            }
        });
        let out = f();
        drop(done);
        out
    })
}

/// Fills the kernel maps with `zones` (about `expected` entries), compiled as they are
/// written (a new generation, flipped in when complete), logged. The SOA-bound names by apex.
fn install_logged(prog: &mut xdns_bpf::runtime::XdpProgram, zones: &ZoneSet, expected: usize) -> anyhow::Result<SoaBound> {
    let t = std::time::Instant::now();
    // a large zone set takes seconds to write: a line every FILL_LOG_PERIOD says how far
    let seen = compiling(prog, t, |prog, src| prog.install_stream(src), zones, expected)?;
    log_filled(prog, t, "XDP: kernel maps filled (batched, chunk by chunk), new data active");
    Ok(seen.bound)
}

/// The end of a fill or a growth (started at `t`): time, memory, the answer table's counts.
fn log_filled(prog: &xdns_bpf::runtime::XdpProgram, t: std::time::Instant, what: &str) {
    let (in_table, left_out) = prog.table_counts();
    tracing::info!(
        seconds = t.elapsed().as_secs_f32(),
        rss_mib = crate::heap::rss_mib(),
        answers_in_table = in_table,
        answers_left_out = left_out,
        generation = prog.generation(),
        "{what}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdns_bpf::runtime::Capacity;

    /// `grow.test` with `n` names `h<i>`, one A record each.
    fn hosts(n: usize) -> ZoneSet {
        let dir = std::env::temp_dir().join(format!("xdns-xdp-runtime-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("$TTL 300\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 198.18.0.1\n");
        for i in 0..n {
            text.push_str(&format!("h{i} A 198.18.{}.{}\n", (i >> 8) & 255, i & 255));
        }
        let file = dir.join("grow.test.zone");
        std::fs::write(&file, text).unwrap();
        let z = xdns_zone::load_zone(&xdns_zone::ZoneSource { name: "grow.test.".into(), file }, None).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let mut set = ZoneSet::default();
        set.zones.insert(z.apex.clone(), Arc::new(z));
        set
    }

    /// The first fill at start-up, into maps sized from an estimate that undersized the data
    /// (here: maps for no zone at all), grows them to the data's exact size as a reload does,
    /// instead of failing and leaving every query to userspace. Needs root (loads the program).
    #[test]
    fn first_fill_grows_maps_the_estimate_undersized() {
        // SAFETY: geteuid cannot fail.
        assert_eq!(unsafe { libc::geteuid() }, 0, "first_fill_grows_maps_the_estimate_undersized needs root: it loads the XDP program");
        let zones = hosts(5000);
        let cfg = XdpConfig { interfaces: vec!["lo".into()], ..Default::default() };
        let listen = ["198.18.0.1:53".parse().unwrap()];
        let mut rt = XdpRuntime::load_sized(&cfg, &listen, &zones, 1232, &xdns_bpf::data::Shape::default()).expect("load (verifier)");
        let exact = exact_shape_logged(&zones);
        let need = Capacity::for_shape(&exact);
        assert!(!rt.prog.capacity().holds(&need), "the maps at load are too small for the data: {}", rt.prog.capacity());
        rt.fill().expect("the first fill grows the maps the estimate undersized");
        assert!(rt.data_active(), "a generation is active");
        assert!(rt.prog.capacity().holds(&need), "grown to the exact size: {} for {need}", rt.prog.capacity());
        let (nodes_in_table, nodes_left_out) = rt.prog.node_counts();
        assert_eq!(nodes_in_table + nodes_left_out, exact.nodes, "every node in the kernel");
        assert_eq!(rt.prog.map_entries().0, nodes_left_out, "the hash map holds the nodes the table lacks");
        let (in_table, left_out) = rt.table_counts();
        assert_eq!(in_table + left_out, exact.answers, "every answer in the kernel");
        assert!(rt.index.is_empty(), "the index waits until the counts are published");
        rt.index_zones();
        assert!(rt.index.contains_key(&b"\x04grow\x04test\x00"[..]), "the zone's index for in-place updates is built");
    }
}
