//! systemd integration (`Type=notify`, `WatchdogSec=`; packaging/xdns.service): readiness once
//! the first zone set is served, `RELOADING`/`READY` around a reload, `STOPPING` at the end,
//! and watchdog pings that stop when a UDP worker stops turning. Without `NOTIFY_SOCKET`
//! (not started by systemd) every call does nothing.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use sd_notify::NotifyState;
use tokio::sync::watch;

/// Each UDP worker's heartbeat: bumped at every turn of its loop (at least every 200 ms, the
/// socket's read timeout), read by the watchdog.
#[derive(Default)]
pub struct Heartbeats(Mutex<Vec<(String, Arc<AtomicU64>)>>);

impl Heartbeats {
    /// A heartbeat for worker `name`.
    pub fn register(&self, name: &str) -> Arc<AtomicU64> {
        let beat = Arc::new(AtomicU64::new(0));
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push((name.to_string(), beat.clone()));
        beat
    }

    fn read(&self) -> Vec<(String, u64)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(n, b)| (n.clone(), b.load(Relaxed))).collect()
    }
}

fn notify(state: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::debug!(error = %e, "sd_notify");
    }
}

/// The server answers: the first zone set is served.
pub fn ready() {
    notify(&[NotifyState::Ready, NotifyState::Status("serving")]);
}

/// A reload begins; [`reloaded`] ends it.
pub fn reloading() {
    notify(&[NotifyState::Reloading, NotifyState::Status("reloading")]);
}

pub fn reloaded() {
    notify(&[NotifyState::Ready, NotifyState::Status("serving")]);
}

pub fn stopping() {
    notify(&[NotifyState::Stopping]);
}

/// With `WatchdogSec=` set, ping every half period while every UDP worker has turned since
/// the last look (and this task runs, so the async side lives); a worker stuck for a whole
/// period withholds the ping and systemd restarts the service.
pub fn spawn_watchdog(beats: Arc<Heartbeats>, mut stop: watch::Receiver<bool>) -> Option<tokio::task::JoinHandle<()>> {
    let period = sd_notify::watchdog_enabled().filter(|d| !d.is_zero())? / 2;
    Some(tokio::spawn(async move {
        let mut last = beats.read();
        loop {
            tokio::select! {
                _ = super::stopped(&mut stop) => break,
                _ = tokio::time::sleep(period) => {}
            }
            let now = beats.read();
            let stuck: Vec<&str> = now
                .iter()
                .filter(|(name, b)| last.iter().any(|(n, old)| n == name && old == b))
                .map(|(n, _)| n.as_str())
                .collect();
            if stuck.is_empty() {
                notify(&[NotifyState::Watchdog]);
            } else {
                tracing::error!(workers = ?stuck, "UDP workers did not turn for half a watchdog period; watchdog ping withheld");
            }
            last = now;
        }
    }))
}
