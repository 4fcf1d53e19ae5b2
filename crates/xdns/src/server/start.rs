//! The start-up phases of `xdns serve`, in the order [`super::run`] calls them. Each phase
//! either completes or fails start-up cleanly: nothing is served, and on a takeover the
//! running server is left serving, until every phase that can fail on this host's state has
//! been passed.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, watch};

use super::{tcp, udp, Shared};
use crate::config::Config;
use crate::recursion::{self, Recursion};
use crate::reload::{self, Served};
use crate::takeover::{self, Inherited, Role};
use crate::xdp::{Fastpath, InheritedLink};

/// The signals the server answers, registered before anything else: a SIGHUP during start-up
/// must not kill it.
pub struct Signals {
    pub term: Signal,
    pub int: Signal,
    pub hup: Signal,
}

impl Signals {
    pub fn install() -> anyhow::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
            hup: signal(SignalKind::hangup()).context("installing SIGHUP handler")?,
        })
    }

    /// The name of a stop signal (SIGTERM or SIGINT) once one arrives.
    pub async fn stop(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }

    /// The next signal: `Some(name)` for a stop (SIGTERM, SIGINT), `None` for SIGHUP.
    pub async fn next(&mut self) -> Option<&'static str> {
        tokio::select! {
            _ = self.term.recv() => Some("SIGTERM"),
            _ = self.int.recv() => Some("SIGINT"),
            _ = self.hup.recv() => None,
        }
    }

    /// `work`'s result, or `None` if a stop signal came first (logged: start-up stops).
    pub async fn unless_stopped<T>(&mut self, work: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = work => Some(r),
            sig = self.stop() => {
                tracing::info!("{sig} during start-up: stopping");
                None
            }
        }
    }
}

/// Load every zone (on a blocking thread: a big zone takes a while). Errors are logged; a
/// takeover with a zone that failed is abandoned, since the running server serves it.
pub async fn zones(cfg: &Config, takeover: bool) -> anyhow::Result<Served> {
    let load_cfg = cfg.clone();
    let (served, report) = tokio::task::spawn_blocking(move || reload::build(&load_cfg, None)).await?;
    for e in &report.errors {
        tracing::error!("{e}");
    }
    for name in &report.missing {
        tracing::error!(zone = %name, "zone not loaded; not served");
    }
    if takeover && !report.missing.is_empty() {
        anyhow::bail!(
            "takeover abandoned: {} zone(s) failed to load; the running server keeps serving",
            report.missing.len()
        );
    }
    crate::heap::release_freed("loading the zones");
    Ok(served)
}

/// Load the XDP program (the verifier runs here) with the resolver's cache stage when
/// `[resolver]` is set. A fresh start fills the maps after attaching, while userspace answers
/// (a large zone set takes seconds); a takeover fills them here, before it asks for sockets.
/// `None` without `[xdp] interfaces`.
pub async fn fastpath(cfg: &Config, shared: &Shared, takeover: bool) -> anyhow::Result<Option<Fastpath>> {
    let mut fp_cfg = cfg.clone();
    if let Some(rs) = &cfg.resolver {
        // The kernel answer cache stage, for the same clients the resolver serves.
        fp_cfg.xdp.resolver = Some(xdns_bpf::runtime::ResolverStage {
            allow: rs.allow.iter().map(|p| p.parts()).collect(),
            capacity: Default::default(),
        });
        // kernel iteration: the daemon has reserved the ports (crate::kit) before this
        fp_cfg.xdp.kit = rs.kernel_iteration.then(|| xdns_bpf::kit::KitStage { ports: rs.kit_ports, pending: rs.kit_pending, ..Default::default() });
        let off = if rs.kernel_iteration {
            crate::kit::forwarding_off(&cfg.xdp.interfaces, std::path::Path::new("/proc/sys/net"))
        } else {
            Vec::new()
        };
        if !off.is_empty() {
            tracing::info!(
                interfaces = %off.join(", "),
                "[resolver] kernel_iteration: forwarding is off on these XDP interfaces, so bpf_fib_lookup gives \
                 the kernel no next hop from them: the kernel uses the daemon's next-hop table (routes and \
                 neighbours of the zone map's servers, refreshed every second); a server not in it yet is \
                 asked from userspace"
            );
        }
    }
    fp_cfg.xdp.keep_caps = cfg.run_as.is_some();
    fp_cfg.xdp.guard = cfg.guard.as_ref().map(|g| xdns_bpf::guard::GuardStage {
        // the detector reads the features; the modelled tier takes the offload slots
        // (at most its 16) where no NIC takes n-tuple rules
        features: g.detect.is_some(),
        tier_slots: g.offload_slots.min(xdns_bpf::guard::TIER_SLOTS as u32),
        feature_suffixes: if g.detect.is_some() { 1 << 18 } else { 65536 },
        ..Default::default()
    });
    let zones = shared.served.load().zones.clone();
    tokio::task::spawn_blocking(move || {
        Fastpath::load(&fp_cfg.xdp, &fp_cfg.listen, zones, fp_cfg.edns_payload, takeover)
    })
    .await?
    .context("loading the XDP fast path")
}

/// Whether start-up leaves the XDP program unloaded until the first zone data is served
/// ([`load_deferred`]): a fresh start (no takeover) with `[xdp] interfaces` whose zone set is
/// empty at start while secondary zones (or catalogs) are to bring it: a secondary with no
/// stored copy, say. Its verifier run would otherwise take a core from the first transfer,
/// for maps sized for nothing, that the first transfer outgrows at once. Userspace answers
/// every query meanwhile (no program attached: no packet is passed or answered by XDP).
/// Kept at start whenever the program serves something without zones or must be loaded
/// with privileges the process gives up: `[resolver]` (the kernel cache, kernel iteration),
/// `[guard]`, `user`.
pub fn defers_fastpath(cfg: &Config, served: &Served, takeover: bool) -> bool {
    !takeover
        && !cfg.xdp.interfaces.is_empty()
        && served.zones.zones.is_empty()
        && (!cfg.secondaries.is_empty() || !cfg.catalogs.is_empty())
        && cfg.resolver.is_none()
        && cfg.guard.is_none()
        && cfg.run_as.is_none()
}

/// Load the XDP program deferred at start ([`defers_fastpath`]) with the zones served now,
/// attach it and fill its maps, as a fresh start does (userspace answers meanwhile). Called
/// by the first swap of zones, with the swap lock held; returns once the fill is done (or
/// abandoned at shutdown), as the reload it replaces would: what follows a swap, such as a
/// secondary's spare copy, does not run beside the fill. `false` when nothing was deferred or the
/// zone set is still empty (the caller refills as usual); `true` once it took the load
/// (also when the load failed: logged, userspace keeps answering every query).
pub async fn load_deferred(shared: &Arc<Shared>) -> bool {
    // left in place until the program's status is published, so that `xdns stats` says
    // `xdp_data_active: false` throughout (the swap lock keeps a second call out)
    let cfg = {
        let d = shared.fastpath_deferred.lock().unwrap_or_else(|e| e.into_inner());
        match d.as_ref() {
            Some(c) if !shared.served.load().zones.zones.is_empty() => c.clone(),
            _ => return false,
        }
    };
    if shared.shutdown.load(Ordering::Relaxed) {
        return true;
    }
    let t = std::time::Instant::now();
    let fp = match fastpath(&cfg, shared, false).await {
        Ok(Some(fp)) => fp,
        Ok(None) => {
            *shared.fastpath_deferred.lock().unwrap_or_else(|e| e.into_inner()) = None;
            return true;
        }
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "XDP: the deferred program load failed; userspace answers every query (the next swap of zones tries again)");
            return true;
        }
    };
    shared.xdp_status.store(Some(fp.status()));
    *shared.fastpath_deferred.lock().unwrap_or_else(|e| e.into_inner()) = None;
    shared.telemetry.attach_kernel(fp.status().telemetry().ok());
    *shared.fastpath.lock().unwrap_or_else(|e| e.into_inner()) = Some(fp);
    match attach(shared, Vec::new()).await {
        Ok(()) => {
            tracing::info!(seconds = t.elapsed().as_secs_f32(), "XDP: program loaded with the first zone data and attached; filling its maps");
            // the fill runs on the XDP thread after the attach: wait for it (a failed fill is
            // logged there, and the next swap's reload tries again)
            let sh = shared.clone();
            let _ = tokio::task::spawn_blocking(move || {
                sh.fastpath.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(Fastpath::idle)
            })
            .await;
        }
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "XDP: the deferred program did not attach; userspace answers every query");
            shared.xdp_status.store(None);
            let sh = shared.clone();
            let _ = tokio::task::spawn_blocking(move || drop(sh.fastpath.lock().unwrap_or_else(|e| e.into_inner()).take())).await;
        }
    }
    true
}

/// The sockets the server answers on, bound (or inherited) before anything is served, so
/// that a bad address fails start-up cleanly.
pub struct Listeners {
    pub udp: Vec<(SocketAddr, socket2::Socket)>,
    pub tcp: Vec<(SocketAddr, std::net::TcpListener)>,
    pub metrics: Option<tokio::net::TcpListener>,
    /// The previous process's XDP links, for the fast path to adopt.
    pub xdp_links: Vec<InheritedLink>,
}

impl Listeners {
    /// Bind every listener of `cfg`, using the inherited sockets as they are, all of them
    /// (closing one would drop what is queued in it); with fewer than `udp_workers` for an
    /// address, more are bound beside them. Duplicates of each are offered for a later
    /// takeover of this process.
    pub async fn bind(cfg: &Config, mut inherited: Inherited, shared: &Shared) -> anyhow::Result<Self> {
        let workers = cfg.effective_udp_workers();
        let mut udp_socks = Vec::new();
        let mut tcp_listeners = Vec::new();
        for &addr in &cfg.listen {
            let mut socks: Vec<socket2::Socket> =
                inherited.take_udp(addr).into_iter().map(socket2::Socket::from).collect();
            while socks.len() < workers {
                socks.push(udp::bind(addr).with_context(|| format!("binding UDP {addr}"))?);
            }
            udp_socks.extend(socks.into_iter().map(|s| (addr, s)));
            let tcp = match inherited.take_tcp(addr) {
                Some(fd) => std::net::TcpListener::from(fd),
                None => tcp::bind(addr).with_context(|| format!("binding TCP {addr}"))?,
            };
            tcp.set_nonblocking(true)?;
            tcp_listeners.push((addr, tcp));
        }
        let metrics = match cfg.metrics {
            Some(a) => Some(match inherited.take_metrics(a) {
                Some(fd) => {
                    let l = std::net::TcpListener::from(fd);
                    l.set_nonblocking(true)?;
                    tokio::net::TcpListener::from_std(l).context("registering metrics listener")?
                }
                None => tokio::net::TcpListener::bind(a).await.with_context(|| format!("binding metrics {a}"))?,
            }),
            None => None,
        };
        let xdp_links = std::mem::take(&mut inherited.xdp);
        let dropped = inherited.leftover();
        if !dropped.is_empty() {
            tracing::info!(addrs = ?dropped, "takeover: these addresses are no longer configured; they close when the old process exits");
        }
        drop(inherited);
        for (addr, s) in &udp_socks {
            shared.takeover.offer(Role::Udp { addr: *addr }, s.as_fd())?;
        }
        for (addr, l) in &tcp_listeners {
            shared.takeover.offer(Role::Tcp { addr: *addr }, l.as_fd())?;
        }
        if let (Some(addr), Some(l)) = (cfg.metrics, &metrics) {
            shared.takeover.offer(Role::Metrics { addr }, l.as_fd())?;
        }
        Ok(Self { udp: udp_socks, tcp: tcp_listeners, metrics, xdp_links })
    }
}

/// Start the resolver of `[resolver]`: with XDP attached its answers also go to the kernel
/// cache, whose refresh events feed its prefetcher (forwarded by a thread of their own);
/// without, it caches in userspace only. Returns the task that answers the UDP queries the
/// workers hand it (`None` without `[resolver]`).
pub async fn resolver(
    cfg: &Config,
    shared: &Arc<Shared>,
    stop_rx: watch::Receiver<bool>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(rs) = &cfg.resolver else {
        return Ok(None);
    };
    let rs2 = rs.clone();
    let sh = shared.clone();
    let upstream = shared.telemetry.upstream();
    let (resolver, events) = tokio::task::spawn_blocking(move || {
        let handles = match sh.fastpath.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(fp) => fp.cache()?,
            None => None,
        };
        let (kernel, events): (Arc<dyn xdns_wire::AnswerCache>, _) = match handles {
            Some((k, ev)) => (Arc::new(k), Some(ev)),
            None => (Arc::new(xdns_wire::NoCache), None),
        };
        recursion::build_resolver(&rs2, kernel, upstream).map(|r| (r, events))
    })
    .await?
    .context("starting the resolver")?;
    let kernel_rx = events.map(|ev| {
        let (tx, rx) = mpsc::channel(4096);
        let sh = shared.clone();
        let _ = std::thread::Builder::new().name("xdns-prefetch-fwd".into()).spawn(move || {
            while !sh.shutdown.load(Ordering::Relaxed) {
                if let Some(k) = ev.recv_timeout(std::time::Duration::from_millis(200)) {
                    // Full: this refresh is skipped; the entry is fetched on its next miss.
                    let _ = tx.try_send(k);
                }
            }
        });
        rx
    });
    let nofile = recursion::raise_nofile_limit();
    tracing::info!(kernel_cache = kernel_rx.is_some(), open_files = nofile, "resolver ready");
    resolver.spawn_prefetcher(kernel_rx);
    let (tx, rx) = mpsc::channel(rs.max_pending);
    let rec = Arc::new(Recursion {
        resolver,
        allow: ArcSwap::from_pointee(rs.allow.clone()),
        pending: tx,
        shard: shared.stats.shard(),
    });
    let _ = shared.recursion.set(rec.clone());
    Ok(Some(tokio::spawn(recursion::serve_udp_pending(rx, shared.clone(), rec, stop_rx, rs.max_pending))))
}

/// Attach the XDP program, or swap it inside the links inherited on a takeover.
pub async fn attach(shared: &Arc<Shared>, links: Vec<InheritedLink>) -> anyhow::Result<()> {
    let sh = shared.clone();
    tokio::task::spawn_blocking(move || match sh.fastpath.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(fp) => fp.attach(links),
        None => {
            if !links.is_empty() {
                tracing::info!("XDP not configured: the inherited links are detached when the old process exits");
            }
            Ok(())
        }
    })
    .await?
    .context("attaching the XDP program")
}

/// On a takeover, ask the server running on the control socket for its sockets and XDP links
/// (`None`: none answers; start fresh).
pub async fn take_over(cfg: &Config) -> anyhow::Result<Option<takeover::Session>> {
    let path = cfg.control.clone();
    let session = tokio::task::spawn_blocking(move || takeover::request(&path)).await?.context("takeover")?;
    match &session {
        Some(s) => tracing::info!(
            pid = s.pid,
            udp = s.inherited.udp.len(),
            tcp = s.inherited.tcp.len(),
            xdp_links = s.inherited.xdp.len(),
            "takeover: received the running server's sockets and XDP links"
        ),
        None => tracing::info!(
            control = %cfg.control.display(),
            "takeover: no server answers on the control socket; starting fresh"
        ),
    }
    Ok(session)
}

/// Give up root (`user` in the configuration; see [`crate::privilege`]): the control socket
/// and its directory to that user; then the XDP thread keeps `CAP_NET_ADMIN`, `CAP_BPF` and `CAP_PERFMON`
/// across the switch while every other thread loses every capability; then no_new_privs and
/// the seccomp deny list on every thread. Called once everything that needs root is open,
/// before anything reads a packet in userspace.
pub async fn drop_privileges(cfg: &Config, shared: &Arc<Shared>, control: &std::path::Path) -> anyhow::Result<()> {
    use crate::privilege;
    let Some(who) = cfg.run_as.clone() else {
        return Ok(());
    };
    privilege::hand_over_path(control, &who)?;
    let sh = shared.clone();
    // The XDP thread made the switch leave its capabilities alone when it started
    // (`XdpConfig::keep_caps`): it may be filling the maps now (seconds for a large zone
    // set), and it restricts itself to its three at its next turn; nothing here waits for it.
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        privilege::switch_user(&who)?;
        if let Some(fp) = sh.fastpath.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            fp.restrict_caps_soon();
        }
        privilege::deny_syscalls()?;
        Ok(())
    })
    .await?
    .context("dropping privileges")?;
    tracing::info!(
        user = %privilege::current_user(),
        uid = cfg.run_as.as_ref().map_or(0, |r| r.uid),
        gid = cfg.run_as.as_ref().map_or(0, |r| r.gid),
        xdp_thread_caps = "CAP_NET_ADMIN CAP_BPF CAP_PERFMON",
        "privileges dropped: every other thread holds no capability; no_new_privs and seccomp on"
    );
    Ok(())
}
