//! Glue between the daemon and the XDP fast path (owner: XDP work, issue 3).
//!
//! CONTRACT used by the daemon (`serve`, `reload`, `stats`):
//! - `XdpRuntime::load` compiles the kernel's data from `zones` and loads the program (the
//!   verifier runs here); returns `Ok(None)` when no interface is configured. The maps are
//!   filled by `fill`, before `attach` on a takeover (the previous program answers until
//!   ours has its data) and after it on a fresh start (the program passes every query to
//!   the userspace sockets until then, as it does before any data: `pass_not_loaded`).
//! - `attach` attaches the program (BPF link) to every configured interface, or, on a
//!   takeover, switches the links handed over by the previous process to this program
//!   (`link_fds` is the other side of that hand-over).
//! - `reload` swaps the kernel's data atomically for a new zone set.
//! - `status_reader` reads the verdict and memo counters, the active generation and how each
//!   interface runs the program from another thread, for `xdns stats` and `/metrics`, even
//!   while a fill or reload runs; `abandon_handle` makes such a fill or reload give up (a
//!   process that stops).
//! - With `XdpConfig::resolver` set, `cache` hands out the kernel answer cache (an
//!   `xdns_wire::AnswerCache`) and the prefetch-event reader; `set_allow` replaces the allow list.
//! - Dropping the runtime detaches the program.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use xdns_zone::ZoneSet;

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

/// The attached XDP program and its maps.
pub struct XdpRuntime {
    prog: xdns_bpf::runtime::XdpProgram,
    interfaces: Vec<String>,
    mode: XdpMode,
    /// Compiled at load, not in the maps yet ([`Self::fill`]).
    pending: Option<xdns_bpf::data::KernelData>,
}

impl XdpRuntime {
    /// Compile the kernel's data for `zones` and load the program (the verifier runs here);
    /// neither filled ([`Self::fill`]) nor attached ([`Self::attach`]) yet. Map capacity is
    /// three times the initial data (room for the old and the new generation during a
    /// reload, plus growth); a reload beyond that fails and keeps the old data. The answer
    /// table holds twice the initial answers (up to 2^18); a reload with more answers keeps
    /// the rest in the hash map (`answers_left_out` in the log), slower but the same answers,
    /// until a restart sizes it again.
    pub fn load(
        cfg: &XdpConfig,
        listen: &[SocketAddr],
        zones: &ZoneSet,
        edns_payload: u16,
    ) -> anyhow::Result<Option<Self>> {
        use xdns_bpf::runtime::{Capacity, LoadConfig, XdpProgram};

        if cfg.interfaces.is_empty() {
            return Ok(None);
        }
        let data = compile_logged(zones);
        let load = LoadConfig {
            listen: listen.to_vec(),
            edns_payload,
            seed: None,
            capacity: Capacity::for_data(&data),
            resolver: cfg.resolver.clone(),
        };
        let t = std::time::Instant::now();
        let prog = XdpProgram::load(&load)?;
        // how close the program is to the verifier's limit of 1M instructions processed
        let verified = prog.insn_count().map_or(0, |(_, v)| v);
        tracing::info!(seconds = t.elapsed().as_secs_f32(), verified, "XDP: program loaded (verifier), maps created");
        Ok(Some(Self {
            prog,
            interfaces: cfg.interfaces.clone(),
            mode: cfg.mode,
            pending: Some(data),
        }))
    }

    /// Fill the maps with the data compiled at load (nothing if a reload came first). For a
    /// large zone set this takes seconds: a fresh start attaches first and fills after, so
    /// that the userspace sockets answer meanwhile.
    pub fn fill(&mut self) -> anyhow::Result<()> {
        use anyhow::Context;
        if let Some(data) = self.pending.take() {
            install_logged(&mut self.prog, &data).context("filling the XDP maps")?;
        }
        Ok(())
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
    pub fn attach(&mut self, inherited: Vec<InheritedLink>) -> anyhow::Result<()> {
        use xdns_bpf::runtime::AttachMode;
        let mode = match self.mode {
            XdpMode::Native => AttachMode::Native,
            XdpMode::Generic => AttachMode::Generic,
            XdpMode::Auto => AttachMode::Auto,
        };
        let mut inherited = inherited;
        for ifname in &self.interfaces {
            match inherited.iter().position(|l| &l.interface == ifname) {
                Some(i) => {
                    let link = inherited.swap_remove(i);
                    if link.mode == self.mode {
                        self.prog.adopt_link(ifname, link.fd)?;
                        tracing::info!(interface = %ifname, running = self.attached_as(ifname),
                            "XDP: program replaced inside the inherited link");
                        continue;
                    }
                    xdns_bpf::runtime::detach_link(std::os::fd::AsFd::as_fd(&link.fd))?;
                    tracing::warn!(interface = %ifname, from = ?link.mode, to = ?self.mode,
                        "XDP: mode changed: inherited link detached, attaching again (userspace answers meanwhile)");
                    self.prog.attach(ifname, mode)?;
                }
                None => {
                    self.prog.attach(ifname, mode)?;
                    let running = self.attached_as(ifname);
                    tracing::info!(interface = %ifname, mode = ?self.mode, running, data = self.data_active(), "XDP: attached");
                    if self.mode == XdpMode::Auto && running == "generic" {
                        tracing::warn!(interface = %ifname,
                            "XDP: the driver has no native XDP; the program runs on the skb path (generic), several times slower");
                    }
                }
            }
        }
        for link in inherited {
            tracing::info!(interface = %link.interface, "XDP: interface no longer configured; detached when the previous process exits");
        }
        Ok(())
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
    pub fn reload(&mut self, zones: &ZoneSet) -> anyhow::Result<()> {
        self.pending = None; // the load's data is older than this
        let data = compile_logged(zones);
        install_logged(&mut self.prog, &data)
    }

    /// The kernel answer cache and a reader of its refresh events, for the resolver. `None`
    /// when the cache stage is off (`XdpConfig::resolver` unset).
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

    /// Replace the resolver's allow list (e.g. after a reload of `[resolver] allow`).
    pub fn set_allow(&self, allow: &[(std::net::IpAddr, u8)]) -> anyhow::Result<()> {
        self.prog.set_allow(allow)
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

    /// Answers of the active data in the answer table, and answers only in the hash map.
    pub fn table_counts(&self) -> (usize, usize) {
        self.prog.table_counts()
    }
}

/// The kernel's data for `zones`, with its size and the time it took in the log: for a large
/// zone set this and the map fill take seconds, which an operator should see, not guess.
fn compile_logged(zones: &ZoneSet) -> xdns_bpf::data::KernelData {
    let t = std::time::Instant::now();
    tracing::info!(rss_mib = rss_mib(), "XDP: compiling answers for the kernel");
    let data = xdns_bpf::data::compile_kernel_data(zones);
    // names answering NODATA from their apex's body (XDNS_NODE_NODATA_APEX), not their own
    let own = xdns_bpf::data::own_other(&data.answers);
    let shared = data
        .nodes
        .iter()
        .filter(|n| xdns_bpf::data::shares_apex_nodata(n, own.contains(&n.name[..])))
        .count();
    tracing::info!(
        names = data.nodes.len(),
        answers = data.answers.len(),
        shared_nodata = shared,
        seconds = t.elapsed().as_secs_f32(),
        rss_mib = rss_mib(),
        "XDP: answers compiled"
    );
    data
}

/// Resident memory of this process in MiB (`VmRSS`), for the phase logs; 0 if unknown.
fn rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

/// Fills the kernel maps with `data` (a new generation, flipped in when complete), logged.
fn install_logged(
    prog: &mut xdns_bpf::runtime::XdpProgram,
    data: &xdns_bpf::data::KernelData,
) -> anyhow::Result<()> {
    let t = std::time::Instant::now();
    prog.install(data)?;
    let (in_table, left_out) = prog.table_counts();
    tracing::info!(
        seconds = t.elapsed().as_secs_f32(),
        rss_mib = rss_mib(),
        answers_in_table = in_table,
        answers_left_out = left_out,
        "XDP: kernel maps filled (batched, chunk by chunk), new data active"
    );
    Ok(())
}
