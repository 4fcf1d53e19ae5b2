//! A reload (SIGHUP, or `reload` on the control socket), component by component: the
//! configuration is read again; the zones are built aside and swapped in; the fast path gets
//! the new zones in its maps; the resolver takes its new `allow` and tunables; `[dnstap]`
//! changes start a new writer (`crate::dnstap::install`). Settings that
//! need a restart keep their running values (logged: `xdns serve --takeover` applies them).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Shared;
use crate::config::{self, Config, Overrides};
use crate::reload;
use crate::xdp::Fastpath;

/// Reload configuration and zones; returns the configuration now in force.
pub async fn reload(shared: &Arc<Shared>, current: Config, over: &Overrides) -> Config {
    let stats = &shared.stats;
    stats.reloads.fetch_add(1, Ordering::Relaxed);
    let Some(mut new_cfg) = read_config(&current, over).await else {
        stats.reload_failures.fetch_add(1, Ordering::Relaxed);
        return current;
    };
    let changed = reload::restart_needed(&current, &new_cfg);
    if !changed.is_empty() {
        tracing::warn!(settings = ?changed, "restart needed: these changed settings keep their running values");
    }
    if changed.iter().any(|c| c == "guard") {
        new_cfg.guard = current.guard.clone(); // added or removed with XDP on: as the kernel's
    }
    let mut build_cfg = new_cfg.clone();
    if changed.iter().any(|c| c == "edns_payload") {
        build_cfg.edns_payload = current.edns_payload; // as the kernel's, until a restart
    }
    // secondary zones and keys stay as started (restart needed, listed above)
    build_cfg.secondaries = current.secondaries.clone();
    build_cfg.keys = current.keys.clone();
    build_cfg.catalogs = current.catalogs.clone();
    let edns_payload = build_cfg.edns_payload;
    // one swap at a time: a transfer landing meanwhile waits, and is not undone by this one
    let swap = shared.swap.lock().await;
    let Some((loaded, failed)) = zones(shared, build_cfg).await else {
        return current;
    };
    fastpath(shared).await;
    drop(swap);
    guard(shared, &new_cfg).await;
    tracing::info!(zones = ?zone_list(shared), loaded, failed, "reloaded");
    let resolver = resolver(shared, &current, &new_cfg).await;
    let tap = new_cfg.dnstap.clone();
    let _ = tokio::task::spawn_blocking(move || crate::dnstap::install(tap.as_ref())).await;
    if new_cfg.telemetry != current.telemetry {
        shared.telemetry.set(new_cfg.telemetry.clone()); // the file's rules replace live edits
    }
    shared.telemetry.set_dnstap_xdp(new_cfg.dnstap.as_ref().is_some_and(|d| d.xdp));
    Config { zones: new_cfg.zones, edns_payload, resolver, guard: new_cfg.guard, dnstap: new_cfg.dnstap, telemetry: new_cfg.telemetry, ..current }
}

/// `[guard]` again: its lists read anew and swapped in whole; a list that fails to load keeps
/// the running guard (logged, counted as a failed reload).
async fn guard(shared: &Arc<Shared>, new_cfg: &Config) {
    let Some(settings) = &new_cfg.guard else {
        if shared.guard.swap(None).is_some() {
            tracing::info!("[guard] removed");
        }
        return;
    };
    let previous = shared.guard.load_full();
    match crate::guard::Guard::load(settings, previous.as_deref()) {
        Ok(g) => {
            shared.guard.store(Some(Arc::new(g)));
            tracing::info!("[guard] lists reloaded");
            super::push_guard_lists(shared).await;
        }
        Err(errs) => {
            for e in &errs {
                tracing::error!("{e}");
            }
            tracing::error!("[guard] not reloaded: the running lists stay");
            shared.stats.reload_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The configuration file read again with the same overrides; `None` (errors logged) when
/// it is invalid: nothing changes.
async fn read_config(current: &Config, over: &Overrides) -> Option<Config> {
    let path = current.path.clone();
    let over = over.clone();
    match tokio::task::spawn_blocking(move || config::load(&path, &over)).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(errs)) => {
            for e in &errs {
                tracing::error!("{e}");
            }
            tracing::error!("reload failed: configuration invalid; nothing changed");
            None
        }
        Err(e) => {
            tracing::error!(error = %e, "reload failed");
            None
        }
    }
}

/// The zones of `cfg`, built aside from the served ones (a zone that fails keeps its old
/// version) and swapped in: how many loaded and failed. `None` when the build itself could
/// not run (nothing changed).
async fn zones(shared: &Arc<Shared>, cfg: Config) -> Option<(usize, u64)> {
    let stats = &shared.stats;
    let old = shared.served.load_full();
    let old_served = old.clone();
    let (served, report) = match tokio::task::spawn_blocking(move || reload::build(&cfg, Some(&old))).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "reload failed");
            stats.reload_failures.fetch_add(1, Ordering::Relaxed);
            return None;
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
    stats.zone_loads.fetch_add(report.loaded as u64, Ordering::Relaxed);
    stats.zone_load_failures.fetch_add(failed, Ordering::Relaxed);
    if failed > 0 {
        stats.reload_failures.fetch_add(1, Ordering::Relaxed);
    }
    let served = Arc::new(served);
    shared.served.store(served.clone());
    crate::xfr::primary::notify_changed(Some(&old_served), &served);
    Some((report.loaded, failed))
}

/// The zones now served, `NAME serial N`, for the log.
pub fn zone_list(shared: &Shared) -> Vec<String> {
    shared.served.load().zone_infos().iter().map(|z| format!("{} serial {}", z.name, z.serial)).collect()
}

/// The served zones into the kernel's maps (a new generation, flipped in when complete; if it
/// does not fit, the old data is retired rather than left answering: `XdpRuntime::reload`).
pub async fn fastpath(shared: &Arc<Shared>) {
    // the program deferred at start is loaded with these zones (and filled) instead
    if super::start::load_deferred(shared).await {
        return;
    }
    let zones = shared.served.load().zones.clone();
    match with_fastpath(shared, move |fp| fp.reload(zones)).await {
        Some(Err(e)) => tracing::error!(error = %format!("{e:#}"), "XDP reload failed"),
        Some(Ok(())) => {}
        // without XDP nothing else frees the old zones' memory back (the XDP thread does
        // after its reload)
        None => crate::heap::release_freed("a zone reload"),
    }
}

/// The served zones into the kernel's maps after one zone's `change` (a transfer's): in
/// place when the kernel can (`XdpRuntime::update`), else as [`fastpath`]. `None` without
/// XDP or when the kernel update failed (logged).
pub async fn fastpath_change(shared: &Arc<Shared>, change: crate::xdp::ZoneChange) -> Option<crate::xdp::KernelUpdate> {
    if super::start::load_deferred(shared).await {
        return Some(crate::xdp::KernelUpdate::Full { reason: "the program deferred at start loaded with these zones".into() });
    }
    let zones = shared.served.load().zones.clone();
    match with_fastpath(shared, move |fp| fp.update(zones, change)).await {
        Some(Err(e)) => {
            tracing::error!(error = %format!("{e:#}"), "XDP reload failed");
            None
        }
        Some(Ok(u)) => Some(u),
        None => {
            crate::heap::release_freed("a zone reload");
            None
        }
    }
}

/// `[resolver] allow` applies at once (userspace and the kernel cache stage), and so do the
/// resolver's tunables, caches kept; what needs a restart was reported and keeps its running
/// value. Returns the resolver settings now in force.
async fn resolver(shared: &Arc<Shared>, current: &Config, new_cfg: &Config) -> Option<crate::recursion::ResolverSettings> {
    let mut settings = current.resolver.clone();
    let (Some(cur), Some(new), Some(rec)) = (settings.as_mut(), new_cfg.resolver.as_ref(), shared.recursion.get())
    else {
        return settings;
    };
    if cur.allow != new.allow {
        rec.allow.store(Arc::new(new.allow.clone()));
        cur.allow = new.allow.clone();
        let allow: Vec<_> = new.allow.iter().map(|p| p.parts()).collect();
        if let Some(Err(e)) = with_fastpath(shared, move |fp| fp.set_allow(allow)).await {
            tracing::error!(error = %e, "XDP allow list not updated");
        }
        tracing::info!(allow = ?new.allow, "resolver allow list replaced");
    }
    let before = rec.resolver.config();
    rec.resolver.reconfigure(&new.resolver);
    let now = rec.resolver.config();
    if now.max_ttl != before.max_ttl || now.max_negative_ttl != before.max_negative_ttl {
        crate::kit::set_ttl_caps(now.max_ttl, now.max_negative_ttl);
    }
    if now != before {
        tracing::info!(settings = ?now, "resolver settings replaced");
    }
    cur.resolver = (*now).clone();
    settings
}

/// Run `f` on the fast path (blocking: its calls wait for the XDP thread) when there is one.
async fn with_fastpath<T: Send + 'static>(
    shared: &Arc<Shared>,
    f: impl FnOnce(&Fastpath) -> anyhow::Result<T> + Send + 'static,
) -> Option<anyhow::Result<T>> {
    let sh = shared.clone();
    let r = tokio::task::spawn_blocking(move || sh.fastpath.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(f)).await;
    r.unwrap_or_else(|e| Some(Err(anyhow::anyhow!("the XDP call failed: {e}"))))
}
