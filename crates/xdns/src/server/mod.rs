//! `xdns serve`: binds every listener, runs the UDP worker threads and the tokio tasks (TCP,
//! control socket, metrics), and handles signals.
//!
//! Start-up order: bind the control socket (a fresh start: `xdns stats` shows the progress,
//! `crate::progress`) → load zones → load the XDP program and fill its maps → (`--takeover`: take
//! the running server's sockets and XDP links) → bind UDP, TCP, metrics (what was not
//! inherited) → attach XDP (or swap it inside the inherited links) → (takeover: bind the
//! control socket aside) → start workers → (takeover: tell the old process to stop, move the control socket over
//! the path) → log one start line. SIGHUP (or `reload` on the control socket) rebuilds the
//! zones aside and swaps them in; SIGTERM/SIGINT, or a completed takeover by a new process,
//! stop accepting, let in-flight work finish, remove the control socket (unless it is the new
//! process's by now) and return.
//!
//! The parts, each started by a phase of [`start`], reloaded by [`reconfigure`], asked for
//! its counters by [`Shared::snapshot`] and stopped by [`stop`]: the served zones
//! (`crate::reload`), the XDP fast path (`crate::xdp::Fastpath`), the resolver
//! (`crate::recursion::Recursion`), and the transports (`udp`, `tcp`, the control socket and
//! `/metrics`), which hand every message to the one query plan (`crate::query`).

mod reconfigure;
pub use reconfigure::fastpath as refill_fastpath;
pub use reconfigure::fastpath_change as update_fastpath;
mod slots;
mod start;
mod systemd;
pub mod tcp;
pub mod udp;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, Overrides};
use crate::recursion::Recursion;
use crate::reload::Served;
use crate::stats::{Snapshot, Stats};
use crate::takeover;
use crate::xdp::{Fastpath, XdpStatus};
use crate::{control, metrics};

/// State shared by every thread and task.
pub struct Shared {
    /// What queries are answered from; loaded once per UDP batch or TCP query.
    pub served: ArcSwap<Served>,
    /// Counters.
    pub stats: Stats,
    /// Set once on shutdown; UDP workers poll it.
    pub shutdown: AtomicBool,
    /// The XDP fast path, when attached. Its calls may block for as long as a reload's fill:
    /// counters are read through `xdp_status` instead.
    pub fastpath: Mutex<Option<Fastpath>>,
    /// What the fast path offers without its lock (`Fastpath::status`): counters, and telling
    /// a fill or reload under way to give up at shutdown. Set and cleared with `fastpath`.
    pub xdp_status: ArcSwapOption<XdpStatus>,
    /// The configuration to load the XDP program with once the first zone data is served, when
    /// start-up deferred it ([`start::defers_fastpath`]: nothing for the kernel to hold yet);
    /// taken by the first swap of zones (`refill_fastpath`), which loads, attaches and fills it.
    pub fastpath_deferred: Mutex<Option<Config>>,
    /// The recursive resolver, when `[resolver]` is configured (set before workers start).
    pub recursion: OnceLock<Arc<Recursion>>,
    /// Listening sockets kept for a new process taking over.
    pub takeover: takeover::State,
    /// The TCP connection slots of every listener (set before the listeners start).
    pub tcp_slots: OnceLock<Arc<slots::Slots>>,
    /// The UDP workers' heartbeats, for the systemd watchdog.
    pub heartbeats: Arc<systemd::Heartbeats>,
    /// `[guard]` in userspace (swapped whole on reload), when configured.
    pub guard: ArcSwapOption<crate::guard::Guard>,
    /// The in-path cache (`[inpath]`), when configured (set before workers start).
    pub inpath: OnceLock<Arc<crate::inpath::Inpath>>,
    /// Blocks made live (`xdns guard block`), with or without `[guard]`.
    pub live_blocks: crate::guard::LiveBlocks,
    /// Latency telemetry: rules, userspace histograms, the kernel's maps.
    pub telemetry: Arc<crate::telemetry::Telemetry>,
    /// Held while the served zones are swapped and the XDP maps refilled (a reload, a zone
    /// transfer): one at a time, each from the state the previous one left.
    pub swap: tokio::sync::Mutex<()>,
}

impl Shared {
    /// Shared state serving `served`, with fresh counters.
    pub fn new(served: Served) -> Self {
        Self {
            served: ArcSwap::from_pointee(served),
            stats: Stats::new(),
            shutdown: AtomicBool::new(false),
            fastpath: Mutex::new(None),
            xdp_status: ArcSwapOption::empty(),
            fastpath_deferred: Mutex::new(None),
            recursion: OnceLock::new(),
            takeover: Default::default(),
            tcp_slots: OnceLock::new(),
            heartbeats: Default::default(),
            guard: ArcSwapOption::empty(),
            inpath: OnceLock::new(),
            live_blocks: Default::default(),
            telemetry: Default::default(),
            swap: tokio::sync::Mutex::new(()),
        }
    }

    /// All counters, the zones served and the XDP counters (a few map reads; it does not
    /// wait for a reload).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = self.stats.snapshot();
        let served = self.served.load();
        s.zones = served.zone_infos();
        if let Some(reg) = &served.xfr {
            for sec in &reg.list() {
                let info = sec.info();
                match s.zones.iter_mut().find(|z| z.name == sec.cfg.name) {
                    Some(z) => z.transfer = Some(info),
                    None => s.zones.push(crate::stats::ZoneInfo {
                        name: sec.cfg.name.clone(),
                        transfer: Some(info),
                        ..Default::default()
                    }),
                }
            }
        }
        if let Some(status) = self.xdp_status.load_full() {
            status.snapshot(&mut s);
        } else if self.fastpath_deferred.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            // XDP configured, its program not loaded yet: the kernel holds no zone data
            s.xdp_data_active = Some(false);
        }
        crate::progress::STARTUP.snapshot(&mut s);
        if let Some(r) = self.recursion.get() {
            r.snapshot(&mut s);
        }
        crate::kit::snapshot(&mut s);
        if let Some(slots) = self.tcp_slots.get() {
            slots.snapshot(&mut s);
        }
        if let Some(g) = self.guard.load_full() {
            g.snapshot(&mut s);
        }
        if self.live_blocks.detecting.load(Ordering::Relaxed) {
            self.live_blocks.counters.snapshot(&mut s);
        }
        if let Some(i) = self.inpath.get() {
            i.snapshot(&mut s);
        }
        crate::dnstap::snapshot(&mut s);
        self.telemetry.snapshot(&mut s);
        s
    }
}

/// Resolves when shutdown has been requested (or the sender is gone).
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|&v| v).await;
}

/// Requests to the main loop from the control socket.
#[derive(Debug)]
pub enum Request {
    /// Reload configuration and zones, like SIGHUP.
    Reload,
    /// A new process (`pid`) took the sockets and XDP links over and serves: stop.
    HandedOver { pid: u32 },
}

/// Run the server until SIGTERM/SIGINT, or until a new process has taken over. `over` is
/// re-applied on every reload. With `takeover`, a server answering on the control socket hands
/// its sockets and XDP links to this one once it is ready to serve (see [`crate::takeover`]);
/// with none answering, this one starts fresh. The phases are in [`start`], the reload in
/// [`reconfigure`].
pub async fn run(cfg: Config, over: Overrides, takeover: bool) -> anyhow::Result<()> {
    let mut signals = start::Signals::install()?;
    let control_path = cfg.control.clone();
    crate::progress::STARTUP.start(!cfg.xdp.interfaces.is_empty());
    // Nothing is served until the zones are loaded and swapped in below.
    let shared = Arc::new(Shared::new(Served::default()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let (req_tx, mut req_rx) = mpsc::channel::<Request>(8);
    let mut tasks = Vec::new();
    // A fresh start answers `xdns stats` from here on: loading and compiling a zone set of
    // millions of records takes minutes, and its progress shows there (`crate::progress`).
    // A reload asked meanwhile is queued. A takeover binds its socket aside later: until it
    // is done, the running server answers on the path.
    let mut early_control = if takeover {
        None
    } else {
        let l = control::bind(&control_path)?;
        tasks.push(tokio::spawn(control::serve(l, shared.clone(), req_tx.clone(), stop_rx.clone())));
        Some(ControlFile::new(&control_path))
    };
    // Loading a big zone set or the XDP program takes a while: a stop request meanwhile ends
    // start-up at once, before anything is taken over from a running server.
    let Some(served) = signals.unless_stopped(start::zones(&cfg, takeover)).await else {
        return Ok(());
    };
    shared.served.store(Arc::new(served?));
    // Secondary zones start transferring now, while the XDP program loads (the verifier
    // takes seconds) and the sockets are bound; what they bring is swapped in only once
    // start-up is done, as before: the swap lock is held until then.
    let gate = shared.clone();
    let startup = gate.swap.lock().await;
    crate::xfr::primary::set_sources(&cfg.listen);
    tasks.extend(crate::xfr::secondary::spawn(&shared, stop_rx.clone()));
    if let Some(g) = &cfg.guard {
        let guard = crate::guard::Guard::load(g, None).map_err(|e| anyhow::anyhow!("[guard]: {}", e.join("; ")))?;
        shared.guard.store(Some(Arc::new(guard)));
    }
    crate::dnstap::install(cfg.dnstap.as_ref());
    crate::progress::STARTUP.set_phase(crate::progress::Phase::CompilingAnswers);
    // Kernel iteration on by default (`kernel_iteration` unset) needs its port range free:
    // bound here, before the program is loaded, and kept for crate::kit::reserve; a port
    // taken turns it off with a warning (set explicitly, the reservation's error stops the
    // start instead). A takeover inherits the running server's sockets for them.
    let mut cfg = cfg;
    let mut kit_probed = Vec::new();
    let xdp_on = !cfg.xdp.interfaces.is_empty();
    if let Some(rs) = cfg.resolver.as_mut().filter(|rs| rs.kernel_iteration && rs.kit_setting.is_none() && xdp_on && !takeover) {
        match crate::kit::probe_ports(rs.kit_ports) {
            Ok(socks) => kit_probed = socks,
            Err((port, e)) => {
                tracing::warn!(
                    port,
                    error = %e,
                    "[resolver] kernel_iteration (on by default) is off: port {port} of kernel_iteration_ports is taken; \
                     free it or choose another range, or set kernel_iteration = false to silence this"
                );
                rs.kernel_iteration = false;
            }
        }
    }
    let cfg = cfg;
    // A secondary with nothing to serve yet (no stored copy) gives the kernel nothing to
    // hold: the program is loaded once the first zone data is swapped in, so that its
    // verifier run does not take a core from the transfer; userspace answers meanwhile.
    let deferred = start::defers_fastpath(&cfg, &shared.served.load(), takeover);
    let fp = if deferred {
        // what the load would refuse first: an interface that does not exist fails the start
        // now, not the first transfer's swap
        for i in &cfg.xdp.interfaces {
            xdns_bpf::iface::ifindex(i).with_context(|| format!("loading the XDP fast path: [xdp] interfaces: {i}"))?;
        }
        tracing::info!("XDP: program load deferred until the first zone data (secondary zones with no stored copy); userspace answers meanwhile");
        *shared.fastpath_deferred.lock().unwrap_or_else(|e| e.into_inner()) = Some(cfg.clone());
        Ok(None)
    } else {
        let Some(fp) = signals.unless_stopped(start::fastpath(&cfg, &shared, takeover)).await else {
            return Ok(());
        };
        fp
    };
    let fp = fp?;
    crate::progress::STARTUP.set_phase(crate::progress::Phase::Starting);
    shared.xdp_status.store(fp.as_ref().map(Fastpath::status));
    shared.telemetry.set(cfg.telemetry.clone());
    let tap_xdp = cfg.dnstap.as_ref().is_some_and(|d| d.xdp);
    shared.telemetry.set_dnstap_xdp(tap_xdp);
    if tap_xdp && fp.is_none() && !deferred {
        tracing::warn!("[dnstap] xdp = true, but no XDP program is loaded: only userspace answers are logged");
    }
    shared.telemetry.attach_kernel(fp.as_ref().and_then(|f| f.status().telemetry().ok()));
    *shared.fastpath.lock().unwrap_or_else(|e| e.into_inner()) = fp;
    push_guard_lists(&shared).await;
    if let Some(icfg) = &cfg.inpath {
        let ip = crate::inpath::Inpath::start(icfg).map_err(|e| e.context("[inpath]"))?;
        let _ = shared.inpath.set(Arc::new(ip));
    }

    // Everything that can fail on this host's state has been done: ask for the sockets.
    let mut session = if takeover { start::take_over(&cfg).await? } else { None };
    let mut inherited = session.as_mut().map(|s| std::mem::take(&mut s.inherited)).unwrap_or_default();
    let mut kit_inherited = std::mem::take(&mut inherited.kit);
    kit_inherited.extend(kit_probed);
    let listeners = start::Listeners::bind(&cfg, inherited, &shared).await?;
    // kernel iteration's source ports, reserved before the program can send from them (taken
    // from the running server on a takeover)
    let kit_reserved = match &cfg.resolver {
        Some(rs) if rs.kernel_iteration && !cfg.xdp.interfaces.is_empty() => Some(crate::kit::reserve(rs.kit_ports, &mut kit_inherited, &shared)?),
        _ => None,
    };
    drop(kit_inherited);

    tasks.extend(start::resolver(&cfg, &shared, stop_rx.clone()).await?);
    // The control socket exists before anything answers (the kernel path answers as soon as it
    // is attached), so whoever sees answers can also ask `xdns stats`.
    let (control_listener, aside) = match &session {
        Some(_) => {
            let (l, aside) = control::bind_aside(&control_path)?;
            (Some(l), Some(aside))
        }
        // bound at the start; or a --takeover that found no server to take over: bound now
        None if early_control.is_some() => (None, None),
        None => {
            let l = control::bind(&control_path)?;
            early_control = Some(ControlFile::new(&control_path));
            (Some(l), None)
        }
    };
    let _control_file = early_control; // removes the socket if start-up fails from here on
    if let Err(e) = start::attach(&shared, listeners.xdp_links).await {
        let _ = std::fs::remove_file(aside.as_deref().unwrap_or(&control_path));
        return Err(e);
    }
    // Everything that needs root is open: give it up before userspace reads a packet.
    let ours = aside.as_deref().unwrap_or(&control_path);
    if let Err(e) = start::drop_privileges(&cfg, &shared, ours).await {
        let _ = std::fs::remove_file(aside.as_deref().unwrap_or(&control_path));
        return Err(e);
    }

    let workers = cfg.effective_udp_workers();
    let mut threads = Vec::new();
    let mut answer_socks = Vec::new();
    for (n, (addr, sock)) in listeners.udp.into_iter().enumerate() {
        let wildcard = addr.ip().is_unspecified();
        let sock = Arc::new(sock);
        answer_socks.push((addr, sock.clone()));
        threads.push(udp::spawn(sock, wildcard, shared.clone(), format!("xdns-udp-{n}")).context("starting UDP worker")?);
    }
    // kernel iteration's handover: the reserved ports, bound above, read from here (crate::kit)
    if let Some(reserved) = kit_reserved {
        tasks.extend(crate::kit::spawn(&cfg, &shared, reserved, answer_socks, stop_rx.clone())?);
    }
    let slots = shared.tcp_slots.get_or_init(|| slots::Slots::new(cfg.tcp.clone())).clone();
    for (_, l) in listeners.tcp {
        let l = tokio::net::TcpListener::from_std(l).context("registering TCP listener")?;
        tasks.push(tokio::spawn(tcp::serve(l, shared.clone(), cfg.tcp.clone(), slots.clone(), stop_rx.clone())));
    }
    if let Some(l) = listeners.metrics {
        tasks.push(tokio::spawn(metrics::serve(l, shared.clone(), stop_rx.clone())));
    }
    // started: the secondaries' first versions may be swapped in
    drop(startup);
    crate::progress::STARTUP.set_phase(crate::progress::Phase::Serving);
    // secondaries of our zones learn at once that we (re)started
    crate::xfr::primary::notify_changed(None, &shared.served.load());
    if let Some(l) = control_listener {
        tasks.push(tokio::spawn(control::serve(l, shared.clone(), req_tx, stop_rx.clone())));
    }

    // Both processes serve now. The old one stops once it has our word; until its `ok`, a
    // failure here leaves it serving (it takes its XDP links back when we are gone).
    let mut taken_from = None;
    if let (Some(s), Some(aside)) = (session, &aside) {
        // A stop asked during start-up abandons the takeover: committing, then stopping,
        // would leave nobody serving.
        let stop_asked = tokio::select! {
            biased;
            sig = signals.stop() => Some(sig),
            _ = std::future::ready(()) => None,
        };
        if let Some(sig) = stop_asked {
            drop(s); // the running server, told nothing, takes its XDP links back at once
            let _ = std::fs::remove_file(aside);
            stop(&shared, stop_tx, tasks, threads).await;
            tracing::info!("{sig} during start-up: takeover abandoned; the running server keeps serving");
            return Ok(());
        }
        let pid = s.pid;
        let committed = tokio::task::spawn_blocking(move || s.commit()).await?;
        let committed = committed.and_then(|()| control::install(aside, &control_path));
        if let Err(e) = committed {
            let _ = std::fs::remove_file(aside);
            stop(&shared, stop_tx, tasks, threads).await;
            return Err(e.context("takeover abandoned; the running server keeps serving"));
        }
        tracing::info!(pid, "takeover: the old process is stopping; control socket moved here");
        taken_from = Some(pid);
    }
    let control_id = control::socket_id(&control_path);
    tracing::info!(
        listen = ?cfg.listen,
        udp_workers = workers,
        control = %control_path.display(),
        metrics = ?cfg.metrics,
        xdp = shared.fastpath.lock().map(|f| f.is_some()).unwrap_or(false),
        xdp_deferred = deferred,
        zones = ?reconfigure::zone_list(&shared),
        resolver = cfg.resolver.is_some(),
        inpath = cfg.inpath.is_some(),
        taken_over_from = ?taken_from,
        "xdns started"
    );
    systemd::ready();
    tasks.push(tokio::spawn(expire_live_blocks(shared.clone(), stop_rx.clone())));
    let xdp_on = shared.xdp_status.load().is_some();
    let detector = match cfg.guard.as_ref().and_then(|g| Some((g.detect.clone()?, g.offload_slots))) {
        Some((d, k)) if xdp_on => Some(crate::detect::spawn(shared.clone(), d, k, cfg.xdp.interfaces.clone())?),
        Some(_) => {
            tracing::warn!("[guard] detect: no XDP program attached, nothing to read: detection is off");
            None
        }
        None => None,
    };
    if shared.inpath.get().is_some() {
        tasks.push(tokio::spawn(sweep_inpath(shared.clone(), stop_rx.clone())));
    }
    tasks.extend(systemd::spawn_watchdog(shared.heartbeats.clone(), stop_rx.clone()));

    let mut current = cfg;
    let mut handed_to = None;
    loop {
        let reload = tokio::select! {
            sig = signals.next() => match sig {
                Some(sig) => { tracing::info!("{sig}: stopping"); break; }
                None => true, // SIGHUP
            },
            Some(req) = req_rx.recv() => match req {
                Request::Reload => true,
                Request::HandedOver { pid } => {
                    tracing::info!(pid, "takeover: the new process serves; stopping without detaching XDP");
                    handed_to = Some(pid);
                    break;
                }
            },
        };
        if reload {
            // A stop request during a reload (seconds for a large zone set) ends it where it
            // waits: stopping discards its result anyway, and the XDP fill gives up below.
            systemd::reloading();
            tokio::select! {
                c = reconfigure::reload(&shared, current.clone(), &over) => { current = c; systemd::reloaded(); }
                sig = signals.stop() => { tracing::info!("{sig} during a reload: stopping"); break; }
            }
        }
    }

    systemd::stopping();
    // A fill or reload of the kernel maps under way gives up at its next chunk: its data
    // would be thrown away with the maps, and it holds the fast path until it ends.
    if let Some(status) = shared.xdp_status.load_full() {
        status.abandon_writes();
    }
    stop(&shared, stop_tx, tasks, threads).await;
    if let Some(d) = detector {
        // it sees the shutdown flag within 100 ms
        let _ = tokio::task::spawn_blocking(move || d.join()).await;
    }
    // the in-path cache detaches: the host forwards as before
    if let Some(i) = shared.inpath.get() {
        i.stop();
    }
    // After a takeover the path holds the new process's socket: leave it.
    if control_id.is_some() && control::socket_id(&control_path) == control_id {
        remove_control(&control_path);
    }
    // Closing our link fds detaches nothing the new process holds too.
    shared.xdp_status.store(None);
    let sh = shared.clone();
    let _ = tokio::task::spawn_blocking(move || {
        // waits for an abandoned reload to let go of the fast path (one chunk)
        let fp = sh.fastpath.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(fp);
    })
    .await;
    match handed_to {
        Some(pid) => tracing::info!(pid, "xdns stopped; handed over"),
        None => tracing::info!("xdns stopped"),
    }
    Ok(())
}

/// Stop serving: close the duplicates kept for a takeover, stop reading, let in-flight work
/// finish and wait for it. UDP workers go first (each answers what it received), while the
/// resolver still takes the cache misses they hand it; then the tasks (TCP connections drain);
/// then recursive resolutions under way get a moment to answer.
async fn stop(
    shared: &Arc<Shared>,
    stop_tx: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
) {
    shared.takeover.withdraw();
    shared.shutdown.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    })
    .await;
    let t = std::time::Instant::now();
    if let Some(rec) = shared.recursion.get() {
        // Misses handed over by the workers, not yet taken by the resolver's task.
        while rec.pending.capacity() < rec.pending.max_capacity() && t.elapsed() < RESOLVING_GRACE {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    // Resolutions under way hold the resolver (one clone each; the OnceLock holds the last),
    // and the runtime drops them on return.
    if let Some(rec) = shared.recursion.get() {
        while Arc::strong_count(rec) > 1 && t.elapsed() < RESOLVING_GRACE {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    // dnstap last: it ends its stream once everything above has been answered (and logged)
    let _ = tokio::task::spawn_blocking(crate::dnstap::shutdown).await;
}

/// Once a second, the live blocks whose time has come are lifted and the cookie secret is
/// rotated when its lifetime is over (`[guard] cookie_secret_lifetime`; the kernel's copy is
/// written at once); once a minute the kernel's RRL and cookie settings are written again,
/// which refreshes the offset from the program's clock to Unix time (cookie timestamps; the
/// clocks drift apart as NTP slews).
async fn expire_live_blocks(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
                ticks = ticks.wrapping_add(1);
                let guard = shared.guard.load_full();
                let rotated = guard.as_ref().is_some_and(|g| g.rotate_cookies_if_due(std::time::Instant::now()));
                if rotated {
                    let rotations = guard.as_ref().and_then(|g| g.cookies()).map_or(0, |c| c.rotations());
                    tracing::info!(rotations, "guard: cookie secret rotated (the previous one verifies until the next rotation)");
                }
                if shared.live_blocks.expire() {
                    push_guard_lists(&shared).await;
                } else if rotated || ticks.is_multiple_of(60) {
                    push_guard_rrl(&shared).await;
                }
            }
        }
    }
}

/// Once a second, the in-path cache's expired entries are deleted (so that memory follows
/// what lives; a cache of more than 64k entries a map is swept a part each second).
async fn sweep_inpath(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
                if let Some(i) = shared.inpath.get() {
                    let i = i.clone();
                    let _ = tokio::task::spawn_blocking(move || i.sweep()).await;
                }
            }
        }
    }
}

/// The kernel guard stage's lists, whole: `[guard]`'s files with the live blocks added
/// (nothing without `[guard]` or without XDP: userspace applies them alone then).
pub async fn push_guard_lists(shared: &Arc<Shared>) {
    let sh = shared.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || push_guard_lists_now(&sh)).await {
        tracing::error!("XDP guard lists not replaced: {e}");
    }
}

/// [`push_guard_lists`] from a blocking context: the lists are taken and written under the
/// live blocks' write lock, so that a block the detector adds meanwhile is not lost.
pub fn push_guard_lists_now(shared: &Arc<Shared>) {
    let Some(guard) = shared.guard.load_full() else {
        return;
    };
    let Some(maps) = shared.xdp_status.load_full().and_then(|s| s.guard.clone()) else {
        return;
    };
    let _w = shared.live_blocks.writing.lock().unwrap_or_else(|e| e.into_inner());
    // the RRL settings first: with the kernel's RRL on, the lists carry the whole allowlist
    // (allowlisted sources are never limited; xdns_bpf::guard::Guard::replace_lists)
    write_guard_rrl(&guard, &maps);
    let (block, allow, names, exceptions) = guard.kernel_lists(&shared.live_blocks);
    let t = std::time::Instant::now();
    match maps.replace_lists(&block, &allow).and_then(|l| Ok((l, maps.replace_names_with(&names, &exceptions)?))) {
        Ok((lists, named)) => tracing::info!(
            entries = lists.entries,
            names = named.entries,
            seconds = t.elapsed().as_secs_f32(),
            "XDP: guard lists replaced"
        ),
        Err(e) => tracing::error!("XDP guard lists not replaced (the kernel keeps the old ones): {e:#}"),
    }
}

/// The kernel's RRL and cookie settings alone (see [`push_guard_lists`], which writes them too).
pub async fn push_guard_rrl(shared: &Arc<Shared>) {
    let Some(guard) = shared.guard.load_full() else {
        return;
    };
    let Some(maps) = shared.xdp_status.load_full().and_then(|s| s.guard.clone()) else {
        return;
    };
    write_guard_rrl(&guard, &maps);
}

/// RRL and cookies on kernel answers (`bpf/rrl.h`), and the clock offset of cookie
/// timestamps: a few stores into the stage's control value.
fn write_guard_rrl(guard: &crate::guard::Guard, maps: &xdns_bpf::guard::Guard) {
    let rrl = guard.kernel_rrl();
    match maps.set_rrl(&rrl) {
        Ok(()) => tracing::debug!(rate = rrl.rate, slip = rrl.slip, cookies = rrl.cookies.is_some(), "XDP: guard RRL and cookies set"),
        Err(e) => tracing::error!("XDP guard RRL settings not written: {e:#}"),
    }
}

/// How long a stop waits for recursive resolutions under way.
const RESOLVING_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// The control socket bound at the start of a fresh start: removed when start-up ends early
/// (an error, a stop signal), unless the path holds another socket by then.
struct ControlFile {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

impl ControlFile {
    fn new(path: &std::path::Path) -> Self {
        Self { path: path.to_path_buf(), id: control::socket_id(path) }
    }
}

impl Drop for ControlFile {
    fn drop(&mut self) {
        if self.id.is_some() && control::socket_id(&self.path) == self.id {
            remove_control(&self.path);
        }
    }
}

fn remove_control(path: &PathBuf) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove control socket");
        }
    }
}
