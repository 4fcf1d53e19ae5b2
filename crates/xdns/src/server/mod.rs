//! `xdns serve`: binds every listener, runs the UDP worker threads and the tokio tasks (TCP,
//! control socket, metrics), and handles signals.
//!
//! Start-up order: load zones → start XDP → bind UDP, TCP, metrics → start workers → bind the
//! control socket (its existence means "ready") → log one start line. SIGHUP (or `reload` on
//! the control socket) rebuilds the zones aside and swaps them in; SIGTERM/SIGINT stop
//! accepting, let in-flight work finish, remove the control socket and return.

pub mod tcp;
pub mod udp;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::config::{self, Config, Overrides};
use crate::fastpath::Fastpath;
use crate::recursion::{self, Recursion};
use crate::reload::{self, Served};
use crate::stats::{Snapshot, Stats};
use crate::{control, metrics};

/// State shared by every thread and task.
pub struct Shared {
    /// What queries are answered from; loaded once per UDP batch or TCP query.
    pub served: ArcSwap<Served>,
    /// Counters.
    pub stats: Stats,
    /// Set once on shutdown; UDP workers poll it.
    pub shutdown: AtomicBool,
    /// The XDP fast path, when attached.
    pub fastpath: Mutex<Option<Fastpath>>,
    /// The recursive resolver, when `[resolver]` is configured (set before workers start).
    pub recursion: OnceLock<Arc<Recursion>>,
}

impl Shared {
    /// Shared state serving `served`, with fresh counters.
    pub fn new(served: Served) -> Self {
        Self {
            served: ArcSwap::from_pointee(served),
            stats: Stats::new(),
            shutdown: AtomicBool::new(false),
            fastpath: Mutex::new(None),
            recursion: OnceLock::new(),
        }
    }

    /// All counters, the zones served and the XDP counters (blocking: asks the XDP thread).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = self.stats.snapshot();
        s.zones = self.served.load().zone_infos();
        if let Some(fp) = self
            .fastpath
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            s.xdp = fp.counters().into_iter().collect();
        }
        if let Some(r) = self.recursion.get() {
            s.resolver = r
                .resolver
                .counters
                .snapshot()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            s.resolver
                .insert("cache_entries".into(), r.resolver.cache_len() as u64);
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
}

/// Run the server until SIGTERM/SIGINT. `over` is re-applied on every reload.
pub async fn run(cfg: Config, over: Overrides) -> anyhow::Result<()> {
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
    let fp = tokio::task::spawn_blocking(move || {
        Fastpath::start(&fp_cfg.xdp, &fp_cfg.listen, zones, fp_cfg.edns_payload)
    })
    .await?
    .context("starting the XDP fast path")?;
    *shared.fastpath.lock().unwrap_or_else(|e| e.into_inner()) = fp;

    // Bind everything before serving anything, so a bad address fails start-up cleanly.
    let workers = cfg.effective_udp_workers();
    let mut udp_socks = Vec::new();
    let mut tcp_listeners = Vec::new();
    for &addr in &cfg.listen {
        for _ in 0..workers {
            udp_socks.push((
                addr,
                udp::bind(addr).with_context(|| format!("binding UDP {addr}"))?,
            ));
        }
        tcp_listeners.push(tcp::bind(addr).with_context(|| format!("binding TCP {addr}"))?);
    }
    let metrics_listener = match cfg.metrics {
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("binding metrics {a}"))?,
        ),
        None => None,
    };

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
    let mut threads = Vec::new();
    for (n, (addr, sock)) in udp_socks.into_iter().enumerate() {
        let wildcard = addr.ip().is_unspecified();
        threads.push(
            udp::spawn(sock, wildcard, shared.clone(), format!("xdns-udp-{n}"))
                .context("starting UDP worker")?,
        );
    }
    let limit = Arc::new(Semaphore::new(cfg.tcp.max_connections));
    for l in tcp_listeners {
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
    let control_path = cfg.control.clone();
    let control_listener = control::bind(&control_path)?;
    tasks.push(tokio::spawn(control::serve(
        control_listener,
        shared.clone(),
        req_tx,
        stop_rx.clone(),
    )));

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
        "xdns started"
    );

    let mut current = cfg;
    loop {
        tokio::select! {
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); break; }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); break; }
            _ = sighup.recv() => { current = do_reload(&shared, current, &over).await; }
            Some(Request::Reload) = req_rx.recv() => { current = do_reload(&shared, current, &over).await; }
        }
    }

    shared.shutdown.store(true, Ordering::Relaxed);
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let _ = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    })
    .await;
    remove_control(&control_path);
    let fp = shared
        .fastpath
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let _ = tokio::task::spawn_blocking(move || drop(fp)).await;
    tracing::info!("xdns stopped");
    Ok(())
}

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
    let build_cfg = new_cfg.clone();
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
    // `[resolver] allow` applies at once (userspace and the kernel cache stage).
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
    }
    Config {
        zones: new_cfg.zones,
        edns_payload: new_cfg.edns_payload,
        resolver,
        ..current
    }
}
