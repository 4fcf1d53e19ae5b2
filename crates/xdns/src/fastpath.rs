//! Hosts the [`XdpRuntime`] on a thread of its own.
//!
//! The runtime holds kernel objects that need not be `Send`, and its calls may block on map
//! updates; keeping it on one dedicated thread and talking to it over a channel lets the async
//! parts of the daemon (reload, stats) use it without caring about either. Dropping the
//! [`Fastpath`] stops the thread, which drops the runtime and closes its links: that detaches
//! the program unless a new process took the links over (then they live on with its program).

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use xdns_zone::ZoneSet;

use crate::xdp::{InheritedLink, XdpConfig, XdpRuntime};

/// How long a caller waits for the XDP thread before giving up.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[allow(dead_code)] // Cache and SetAllow: used once the resolver is wired in (issue 4)
enum Cmd {
    Reload(Arc<ZoneSet>, mpsc::Sender<anyhow::Result<()>>),
    Attach(Vec<InheritedLink>, mpsc::Sender<anyhow::Result<()>>),
    Links(mpsc::Sender<anyhow::Result<Vec<InheritedLink>>>),
    Reclaim(mpsc::Sender<anyhow::Result<()>>),
    Counters(mpsc::Sender<XdpCounters>),
    Cache(mpsc::Sender<anyhow::Result<Option<CacheHandles>>>),
    SetAllow(
        Vec<(std::net::IpAddr, u8)>,
        mpsc::Sender<anyhow::Result<()>>,
    ),
}

/// What the XDP thread reports for `xdns stats` and `/metrics`.
#[derive(Debug, Default)]
pub struct XdpCounters {
    /// Packets per verdict, summed over CPUs.
    pub verdicts: Vec<(String, u64)>,
    /// Answers of the active data in the answer table, and answers only in the slower hash
    /// map (no room in the table).
    pub table: (usize, usize),
    /// The question memo: questions answered through it, and questions written into it.
    pub memo: (u64, u64),
    /// Zone data is in the kernel maps (false while a fresh start fills them, or after that
    /// fill failed: the program then passes every query to userspace).
    pub data_active: bool,
}

/// The kernel answer cache (give it to the resolver as its `AnswerCache`) and the reader of
/// its refresh events (keys to resolve again before they expire).
pub type CacheHandles = (
    xdns_bpf::cache::KernelCache,
    xdns_bpf::cache::PrefetchEvents,
);

/// Handle to the thread that owns the attached XDP program.
pub struct Fastpath {
    tx: Option<mpsc::Sender<Cmd>>,
    thread: Option<JoinHandle<()>>,
}

impl Fastpath {
    /// Load the program on a thread of its own, not attached yet ([`Self::attach`]). With
    /// `fill`, its maps are filled before this returns (a takeover: everything that can fail
    /// is done before the running server is asked for its sockets); without, `attach` fills
    /// them after attaching. `Ok(None)` when no interface is configured.
    pub fn load(
        cfg: &XdpConfig,
        listen: &[SocketAddr],
        zones: Arc<ZoneSet>,
        edns_payload: u16,
        fill: bool,
    ) -> anyhow::Result<Option<Self>> {
        if cfg.interfaces.is_empty() {
            return Ok(None);
        }
        let (started_tx, started_rx) = mpsc::channel::<anyhow::Result<bool>>();
        let (tx, rx) = mpsc::channel::<Cmd>();
        let cfg = cfg.clone();
        let listen = listen.to_vec();
        let thread = std::thread::Builder::new()
            .name("xdns-xdp".into())
            .spawn(move || {
                let loaded = XdpRuntime::load(&cfg, &listen, &zones, edns_payload).and_then(|rt| match rt {
                    Some(mut rt) if fill => rt.fill().map(|()| Some(rt)),
                    rt => Ok(rt),
                });
                let mut rt = match loaded {
                    Ok(Some(rt)) => {
                        let _ = started_tx.send(Ok(true));
                        rt
                    }
                    Ok(None) => {
                        let _ = started_tx.send(Ok(false));
                        return;
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return;
                    }
                };
                drop(zones);
                while let Ok(cmd) = rx.recv() {
                    match cmd {
                        Cmd::Reload(z, reply) => {
                            let _ = reply.send(rt.reload(&z));
                        }
                        Cmd::Attach(links, reply) => {
                            // A takeover filled the maps at load: the previous program answers
                            // until ours, complete, is swapped in. A fresh start attaches
                            // without data: the program passes every query to the userspace
                            // sockets (already bound), which answer while the maps fill here.
                            // A failed fill leaves it so, logged; a reload tries again.
                            let attached = rt.attach(links);
                            let ok = attached.is_ok();
                            let _ = reply.send(attached);
                            if ok {
                                if let Err(e) = rt.fill() {
                                    tracing::error!("{e:#}; the kernel passes every query to userspace until a reload succeeds");
                                }
                            }
                        }
                        Cmd::Links(reply) => {
                            let _ = reply.send(rt.link_fds());
                        }
                        Cmd::Reclaim(reply) => {
                            let _ = reply.send(rt.reclaim_links());
                        }
                        Cmd::Counters(reply) => {
                            let _ = reply.send(XdpCounters {
                                verdicts: rt.counters(),
                                table: rt.table_counts(),
                                memo: rt.memo_counts(),
                                data_active: rt.data_active(),
                            });
                        }
                        Cmd::Cache(reply) => {
                            let _ = reply.send(rt.cache());
                        }
                        Cmd::SetAllow(allow, reply) => {
                            let _ = reply.send(rt.set_allow(&allow));
                        }
                    }
                }
            })?;
        match started_rx.recv() {
            Ok(Ok(true)) => Ok(Some(Self {
                tx: Some(tx),
                thread: Some(thread),
            })),
            Ok(Ok(false)) => {
                let _ = thread.join();
                Ok(None)
            }
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                anyhow::bail!("the XDP thread stopped while starting")
            }
        }
    }

    /// Give the kernel a new zone set (blocking; call from a blocking context).
    pub fn reload(&self, zones: Arc<ZoneSet>) -> anyhow::Result<()> {
        self.call(|reply| Cmd::Reload(zones, reply))
    }

    /// Attach to the configured interfaces, taking over `inherited` links where they match
    /// (blocking), then fill the maps if [`Self::load`] did not. Returns once attached;
    /// `data_active` in the counters tells when the data is in.
    pub fn attach(&self, inherited: Vec<InheritedLink>) -> anyhow::Result<()> {
        self.call(|reply| Cmd::Attach(inherited, reply))
    }

    /// Duplicates of the attached links, to hand to a new process (blocking).
    pub fn links(&self) -> anyhow::Result<Vec<InheritedLink>> {
        self.call(Cmd::Links)
    }

    /// Point the links at this process's program again (blocking).
    pub fn reclaim_links(&self) -> anyhow::Result<()> {
        self.call(Cmd::Reclaim)
    }

    /// Every XDP counter (blocking; call from a blocking context). Empty if the thread is gone.
    pub fn counters(&self) -> XdpCounters {
        let (reply, rx) = mpsc::channel();
        if self.send(Cmd::Counters(reply)).is_err() {
            return XdpCounters::default();
        }
        rx.recv_timeout(CALL_TIMEOUT).unwrap_or_default()
    }

    /// The kernel answer cache and its refresh-event reader (blocking). `Ok(None)` when the
    /// cache stage is off (`XdpConfig::resolver` unset). Call once: the event reader is the one
    /// consumer of the ring buffer.
    pub fn cache(&self) -> anyhow::Result<Option<CacheHandles>> {
        self.call(Cmd::Cache)
    }

    /// Replace the resolver's allow list in the kernel (blocking).
    pub fn set_allow(&self, allow: Vec<(std::net::IpAddr, u8)>) -> anyhow::Result<()> {
        self.call(|reply| Cmd::SetAllow(allow, reply))
    }

    /// Send the command `make` builds around a reply channel, and wait for the reply.
    fn call<T>(&self, make: impl FnOnce(mpsc::Sender<anyhow::Result<T>>) -> Cmd) -> anyhow::Result<T> {
        let (reply, rx) = mpsc::channel();
        self.send(make(reply))?;
        rx.recv_timeout(CALL_TIMEOUT)
            .map_err(|_| anyhow::anyhow!("the XDP thread did not answer"))?
    }

    fn send(&self, cmd: Cmd) -> anyhow::Result<()> {
        match &self.tx {
            Some(tx) => tx
                .send(cmd)
                .map_err(|_| anyhow::anyhow!("the XDP thread has stopped")),
            None => anyhow::bail!("the XDP thread has stopped"),
        }
    }
}

impl Drop for Fastpath {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_interfaces_means_no_fastpath() {
        let r = Fastpath::load(
            &XdpConfig::default(),
            &[],
            Arc::new(ZoneSet::default()),
            1232,
            false,
        );
        assert!(matches!(r, Ok(None)));
    }
}
