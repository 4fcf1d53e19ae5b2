//! `xdns serve`: binds every listener, runs the UDP worker threads and the tokio tasks (TCP,
//! control socket, metrics), and handles signals.
//!
//! Start-up order: load zones → load the XDP program and fill its maps → (`--takeover`: take
//! the running server's sockets and XDP links) → bind UDP, TCP, metrics (what was not
//! inherited) → attach XDP (or swap it inside the inherited links) → bind the control socket
//! → start workers → (takeover: tell the old process to stop, move the control socket over
//! the path) → log one start line. SIGHUP (or `reload` on the control socket) rebuilds the
//! zones aside and swaps them in; SIGTERM/SIGINT, or a completed takeover by a new process,
//! stop accepting, let in-flight work finish, remove the control socket (unless it is the new
//! process's by now) and return.

pub mod tcp;
pub mod udp;

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::config::{self, Config, Overrides};
use crate::xdp::{Fastpath, XdpStatus};
use crate::recursion::{self, Recursion};
use crate::reload::{self, Served};
use crate::stats::{Snapshot, Stats};
use crate::takeover::{self, Role};
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
    /// The recursive resolver, when `[resolver]` is configured (set before workers start).
    pub recursion: OnceLock<Arc<Recursion>>,
    /// Listening sockets kept for a new process taking over.
    pub takeover: takeover::State,
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
            recursion: OnceLock::new(),
            takeover: Default::default(),
        }
    }

    /// All counters, the zones served and the XDP counters (a few map reads; it does not
    /// wait for a reload).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = self.stats.snapshot();
        s.zones = self.served.load().zone_infos();
        if let Some(status) = self.xdp_status.load_full() {
            status.snapshot(&mut s);
        }
        if let Some(r) = self.recursion.get() {
            r.snapshot(&mut s);
        }
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
/// with none answering, this one starts fresh.
pub async fn run(cfg: Config, over: Overrides, takeover: bool) -> anyhow::Result<()> {
    // Register signal handlers first: a SIGHUP during start-up must not kill us.
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("installing SIGHUP handler")?;

    let load_cfg = cfg.clone();
    // Loading a big zone takes a while: a stop request meanwhile ends start-up at once.
    let load = tokio::task::spawn_blocking(move || reload::build(&load_cfg, None));
    let (served, report) = tokio::select! {
        r = load => r?,
        _ = sigterm.recv() => { tracing::info!("SIGTERM during start-up: stopping"); return Ok(()); }
        _ = sigint.recv() => { tracing::info!("SIGINT during start-up: stopping"); return Ok(()); }
    };
    for e in &report.errors {
        tracing::error!("{e}");
    }
    for name in &report.missing {
        tracing::error!(zone = %name, "zone not loaded; not served");
    }
    if takeover && !report.missing.is_empty() {
        // The running server serves these zones: replacing it would lose them.
        anyhow::bail!(
            "takeover abandoned: {} zone(s) failed to load; the running server keeps serving",
            report.missing.len()
        );
    }
    let shared = Arc::new(Shared::new(served));

    let mut fp_cfg = cfg.clone();
    if let Some(rs) = &cfg.resolver {
        // The kernel answer cache stage, for the same clients the resolver serves.
        fp_cfg.xdp.resolver = Some(xdns_bpf::runtime::ResolverStage {
            allow: rs.allow.iter().map(|p| p.parts()).collect(),
            capacity: Default::default(),
        });
    }
    let zones = shared.served.load().zones.clone();
    let load = tokio::task::spawn_blocking(move || {
        // A fresh start fills the maps after attaching, while userspace answers (a large
        // zone set takes seconds); a takeover fills them first, before it asks for sockets.
        Fastpath::load(&fp_cfg.xdp, &fp_cfg.listen, zones, fp_cfg.edns_payload, takeover)
    });
    // A stop request meanwhile ends start-up before anything is taken over from a running
    // server, which keeps serving.
    let fp = tokio::select! {
        r = load => r?.context("loading the XDP fast path")?,
        _ = sigterm.recv() => { tracing::info!("SIGTERM during start-up: stopping"); return Ok(()); }
        _ = sigint.recv() => { tracing::info!("SIGINT during start-up: stopping"); return Ok(()); }
    };
    shared.xdp_status.store(fp.as_ref().map(Fastpath::status));
    *shared.fastpath.lock().unwrap_or_else(|e| e.into_inner()) = fp;

    // Everything that can fail on this host's state has been done: ask for the sockets.
    let mut session = None;
    if takeover {
        let path = cfg.control.clone();
        session = tokio::task::spawn_blocking(move || takeover::request(&path))
            .await?
            .context("takeover")?;
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
    }
    let mut inherited = session
        .as_mut()
        .map(|s| std::mem::take(&mut s.inherited))
        .unwrap_or_default();

    // Bind everything before serving anything, so a bad address fails start-up cleanly.
    // Inherited sockets are used as they are, all of them: closing one would drop what is
    // queued in it. Fewer than `udp_workers` for an address: more are bound beside them.
    let workers = cfg.effective_udp_workers();
    let mut udp_socks = Vec::new();
    let mut tcp_listeners = Vec::new();
    for &addr in &cfg.listen {
        let mut socks: Vec<socket2::Socket> = inherited
            .take_udp(addr)
            .into_iter()
            .map(socket2::Socket::from)
            .collect();
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
    let metrics_listener = match cfg.metrics {
        Some(a) => Some(match inherited.take_metrics(a) {
            Some(fd) => {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(l).context("registering metrics listener")?
            }
            None => tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("binding metrics {a}"))?,
        }),
        None => None,
    };
    let links = std::mem::take(&mut inherited.xdp);
    let dropped = inherited.leftover();
    if !dropped.is_empty() {
        tracing::info!(addrs = ?dropped, "takeover: these addresses are no longer configured; they close when the old process exits");
    }
    drop(inherited);
    // Duplicates of every listening socket, for a later takeover of this process.
    for (addr, s) in &udp_socks {
        shared
            .takeover
            .offer(Role::Udp { addr: *addr }, s.as_fd())?;
    }
    for (addr, l) in &tcp_listeners {
        shared
            .takeover
            .offer(Role::Tcp { addr: *addr }, l.as_fd())?;
    }
    if let (Some(addr), Some(l)) = (cfg.metrics, &metrics_listener) {
        shared.takeover.offer(Role::Metrics { addr }, l.as_fd())?;
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    if let Some(rs) = &cfg.resolver {
        let rs2 = rs.clone();
        let sh = shared.clone();
        let (resolver, events) = tokio::task::spawn_blocking(move || {
            // With XDP attached, answers also go to the kernel cache, and its refresh events
            // feed the prefetcher; without, userspace caches only.
            let handles = match sh
                .fastpath
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                Some(fp) => fp.cache()?,
                None => None,
            };
            let (kernel, events): (Arc<dyn xdns_wire::AnswerCache>, _) = match handles {
                Some((k, ev)) => (Arc::new(k), Some(ev)),
                None => (Arc::new(xdns_wire::NoCache), None),
            };
            recursion::build_resolver(&rs2, kernel).map(|r| (r, events))
        })
        .await?
        .context("starting the resolver")?;
        let kernel_rx = events.map(|ev| {
            let (tx, rx) = mpsc::channel(4096);
            let sh = shared.clone();
            let _ = std::thread::Builder::new()
                .name("xdns-prefetch-fwd".into())
                .spawn(move || {
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
        tracing::info!(
            kernel_cache = kernel_rx.is_some(),
            open_files = nofile,
            "resolver ready"
        );
        resolver.spawn_prefetcher(kernel_rx);
        let (tx, rx) = mpsc::channel(rs.max_pending);
        let rec = Arc::new(Recursion {
            resolver,
            allow: ArcSwap::from_pointee(rs.allow.clone()),
            pending: tx,
            shard: shared.stats.shard(),
        });
        let _ = shared.recursion.set(rec.clone());
        tasks.push(tokio::spawn(recursion::serve_udp_pending(
            rx,
            shared.clone(),
            rec,
            stop_rx.clone(),
            rs.max_pending,
        )));
    }
    // The control socket exists before anything answers (the kernel path answers as soon as it
    // is attached), so whoever sees answers can also ask `xdns stats`.
    let control_path = cfg.control.clone();
    let (control_listener, aside) = match &session {
        Some(_) => {
            let (l, aside) = control::bind_aside(&control_path)?;
            (l, Some(aside))
        }
        None => (control::bind(&control_path)?, None),
    };

    // The kernel path: on a takeover, the program is swapped inside the inherited links.
    let fp_shared = shared.clone();
    let attached = tokio::task::spawn_blocking(move || {
        match fp_shared.fastpath.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(fp) => fp.attach(links),
            None => {
                if !links.is_empty() {
                    tracing::info!("XDP not configured: the inherited links are detached when the old process exits");
                }
                Ok(())
            }
        }
    })
    .await?
    .context("attaching the XDP program");
    if let Err(e) = attached {
        let _ = std::fs::remove_file(aside.as_deref().unwrap_or(&control_path));
        return Err(e);
    }
    let mut threads = Vec::new();
    for (n, (addr, sock)) in udp_socks.into_iter().enumerate() {
        let wildcard = addr.ip().is_unspecified();
        threads.push(
            udp::spawn(sock, wildcard, shared.clone(), format!("xdns-udp-{n}"))
                .context("starting UDP worker")?,
        );
    }
    let limit = Arc::new(Semaphore::new(cfg.tcp.max_connections));
    for (_, l) in tcp_listeners {
        let l = tokio::net::TcpListener::from_std(l).context("registering TCP listener")?;
        tasks.push(tokio::spawn(tcp::serve(
            l,
            shared.clone(),
            cfg.tcp.clone(),
            limit.clone(),
            stop_rx.clone(),
        )));
    }
    if let Some(l) = metrics_listener {
        tasks.push(tokio::spawn(metrics::serve(
            l,
            shared.clone(),
            stop_rx.clone(),
        )));
    }
    let (req_tx, mut req_rx) = mpsc::channel::<Request>(8);
    tasks.push(tokio::spawn(control::serve(
        control_listener,
        shared.clone(),
        req_tx,
        stop_rx.clone(),
    )));

    // Both processes serve now. The old one stops once it has our word; until its `ok`, a
    // failure here leaves it serving (it takes its XDP links back when we are gone).
    let mut taken_from = None;
    if let (Some(s), Some(aside)) = (session, &aside) {
        // A stop asked during start-up abandons the takeover: committing, then stopping,
        // would leave nobody serving.
        let stop_asked = tokio::select! {
            biased;
            _ = sigterm.recv() => Some("SIGTERM"),
            _ = sigint.recv() => Some("SIGINT"),
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
        tracing::info!(
            pid,
            "takeover: the old process is stopping; control socket moved here"
        );
        taken_from = Some(pid);
    }
    let control_id = control::socket_id(&control_path);

    let zones: Vec<String> = shared
        .served
        .load()
        .zone_infos()
        .iter()
        .map(|z| format!("{} serial {}", z.name, z.serial))
        .collect();
    tracing::info!(
        listen = ?cfg.listen,
        udp_workers = workers,
        control = %control_path.display(),
        metrics = ?cfg.metrics,
        xdp = shared.fastpath.lock().map(|f| f.is_some()).unwrap_or(false),
        zones = ?zones,
        resolver = cfg.resolver.is_some(),
        taken_over_from = ?taken_from,
        "xdns started"
    );

    let mut current = cfg;
    let mut handed_to = None;
    loop {
        let reload = tokio::select! {
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); break; }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); break; }
            _ = sighup.recv() => true,
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
            tokio::select! {
                c = do_reload(&shared, current.clone(), &over) => current = c,
                _ = sigterm.recv() => { tracing::info!("SIGTERM during a reload: stopping"); break; }
                _ = sigint.recv() => { tracing::info!("SIGINT during a reload: stopping"); break; }
            }
        }
    }

    // A fill or reload of the kernel maps under way gives up at its next chunk: its data
    // would be thrown away with the maps, and it holds the fast path until it ends.
    if let Some(status) = shared.xdp_status.load_full() {
        status.abandon_writes();
    }
    stop(&shared, stop_tx, tasks, threads).await;
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
}

/// How long a stop waits for recursive resolutions under way.
const RESOLVING_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

fn remove_control(path: &PathBuf) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove control socket");
        }
    }
}

/// Reload configuration and zones; returns the configuration now in force.
async fn do_reload(shared: &Arc<Shared>, current: Config, over: &Overrides) -> Config {
    let stats = &shared.stats;
    stats.reloads.fetch_add(1, Ordering::Relaxed);
    let path = current.path.clone();
    let over2 = over.clone();
    let new_cfg = match tokio::task::spawn_blocking(move || config::load(&path, &over2)).await {
        Ok(Ok(c)) => c,
        Ok(Err(errs)) => {
            for e in &errs {
                tracing::error!("{e}");
            }
            tracing::error!("reload failed: configuration invalid; nothing changed");
            stats.reload_failures.fetch_add(1, Ordering::Relaxed);
            return current;
        }
        Err(e) => {
            tracing::error!(error = %e, "reload failed");
            stats.reload_failures.fetch_add(1, Ordering::Relaxed);
            return current;
        }
    };
    let changed = reload::restart_needed(&current, &new_cfg);
    if !changed.is_empty() {
        tracing::warn!(settings = ?changed, "restart needed: these changed settings keep their running values");
    }
    let old = shared.served.load_full();
    let mut build_cfg = new_cfg.clone();
    if changed.iter().any(|c| c == "edns_payload") {
        build_cfg.edns_payload = current.edns_payload; // as the kernel's, until a restart
    }
    let edns_payload = build_cfg.edns_payload;
    let (served, report) =
        match tokio::task::spawn_blocking(move || reload::build(&build_cfg, Some(&old))).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "reload failed");
                stats.reload_failures.fetch_add(1, Ordering::Relaxed);
                return current;
            }
        };
    for e in &report.errors {
        tracing::error!("{e}");
    }
    for name in &report.kept_old {
        tracing::error!(zone = %name, "zone failed to load; the previous version keeps serving");
    }
    for name in &report.missing {
        tracing::error!(zone = %name, "zone failed to load; not served");
    }
    let failed = (report.kept_old.len() + report.missing.len()) as u64;
    stats
        .zone_loads
        .fetch_add(report.loaded as u64, Ordering::Relaxed);
    stats
        .zone_load_failures
        .fetch_add(failed, Ordering::Relaxed);
    if failed > 0 {
        stats.reload_failures.fetch_add(1, Ordering::Relaxed);
    }
    let zones = served.zones.clone();
    shared.served.store(Arc::new(served));

    let fp_shared = shared.clone();
    let xdp = tokio::task::spawn_blocking(move || {
        fp_shared
            .fastpath
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|fp| fp.reload(zones))
    })
    .await;
    match xdp {
        Ok(Some(Err(e))) => {
            tracing::error!(error = %e, "XDP reload failed; the kernel answers from the old zones")
        }
        Err(e) => tracing::error!(error = %e, "XDP reload failed"),
        _ => {}
    }
    let zones: Vec<String> = shared
        .served
        .load()
        .zone_infos()
        .iter()
        .map(|z| format!("{} serial {}", z.name, z.serial))
        .collect();
    tracing::info!(zones = ?zones, loaded = report.loaded, failed, "reloaded");
    // Settings that need a restart keep their running values.
    // `[resolver] allow` applies at once (userspace and the kernel cache stage), and so do
    // the resolver's tunables.
    let mut resolver = current.resolver.clone();
    if let (Some(cur), Some(new), Some(rec)) = (
        resolver.as_mut(),
        new_cfg.resolver.as_ref(),
        shared.recursion.get(),
    ) {
        if cur.allow != new.allow {
            rec.allow.store(Arc::new(new.allow.clone()));
            cur.allow = new.allow.clone();
            let allow: Vec<_> = new.allow.iter().map(|p| p.parts()).collect();
            let fp_shared = shared.clone();
            let r = tokio::task::spawn_blocking(move || {
                fp_shared
                    .fastpath
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .map(|fp| fp.set_allow(allow))
            })
            .await;
            match r {
                Ok(Some(Err(e))) => tracing::error!(error = %e, "XDP allow list not updated"),
                Err(e) => tracing::error!(error = %e, "XDP allow list not updated"),
                _ => {}
            }
            tracing::info!(allow = ?new.allow, "resolver allow list replaced");
        }
        // Timeouts, fan-out, prefetch, limits, TTL caps: at once, caches kept. What needs a
        // restart was reported above and keeps its running value.
        let before = rec.resolver.config();
        rec.resolver.reconfigure(&new.resolver);
        let now = rec.resolver.config();
        if now != before {
            tracing::info!(settings = ?now, "resolver settings replaced");
        }
        cur.resolver = (*now).clone();
    }
    Config {
        zones: new_cfg.zones,
        edns_payload,
        resolver,
        ..current
    }
}
