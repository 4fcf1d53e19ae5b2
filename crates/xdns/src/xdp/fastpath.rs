//! Hosts the [`XdpRuntime`] on a thread of its own.
//!
//! The runtime holds kernel objects that need not be `Send`, and its calls may block on map
//! updates; keeping it on one dedicated thread and talking to it over a channel lets the async
//! parts of the daemon (reload, stats) use it without caring about either. Dropping the
//! [`Fastpath`] stops the thread, which drops the runtime and closes its links: that detaches
//! the program unless a new process took the links over (then they live on with its program).
//!
//! Counters are not asked of the thread: a fill or reload of a large zone set keeps it busy
//! for seconds, and `xdns stats` and `/metrics` must answer meanwhile. [`XdpStatus`] reads
//! them from the kernel maps directly (duplicated fds), from any thread.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use xdns_zone::ZoneSet;

use super::delivery::{Delivery, DeliveryReport, GUARD_PERIOD};
use super::runtime::XdpRuntime;
use super::{InheritedLink, XdpConfig};

/// How long a caller waits for the XDP thread before giving up, except for a reload, which
/// waits for its end however long the fill takes: a reload reported failed while it goes on
/// and succeeds would mislead the operator.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

enum Cmd {
    Reload(Arc<ZoneSet>, mpsc::Sender<anyhow::Result<()>>),
    Update(Arc<ZoneSet>, super::runtime::ZoneChange, mpsc::Sender<anyhow::Result<super::runtime::KernelUpdate>>),
    Attach(Vec<InheritedLink>, mpsc::Sender<anyhow::Result<()>>),
    Links(mpsc::Sender<anyhow::Result<Vec<InheritedLink>>>),
    Reclaim(mpsc::Sender<anyhow::Result<()>>),
    Cache(mpsc::Sender<anyhow::Result<Option<CacheHandles>>>),
    Kit(mpsc::Sender<anyhow::Result<Option<xdns_bpf::kit::KitMaps>>>),
    SetAllow(
        Vec<(std::net::IpAddr, u8)>,
        mpsc::Sender<anyhow::Result<()>>,
    ),
    /// Nothing: answered once every command before it is done (a fill after an attach too).
    Idle(mpsc::Sender<anyhow::Result<()>>),
}

/// What `xdns stats` and `/metrics` show of the fast path.
#[derive(Debug, Default)]
pub struct XdpCounters {
    /// Packets per verdict, summed over CPUs.
    pub verdicts: Vec<(String, u64)>,
    /// Answers of the active data in the answer table, and answers only in the slower hash
    /// map (no room in the table).
    pub table: (usize, usize),
    /// The question memo: questions answered through it, and questions written into it.
    pub memo: (u64, u64),
    /// The reply memo (resolver): cache hits answered with a reply kept whole, replies kept.
    pub reply: (u64, u64),
    /// Zone data is in the kernel maps (false while a fresh start fills them, or after that
    /// fill failed: the program then passes every query to userspace).
    pub data_active: bool,
    /// Each configured interface and how it runs the program now: "native", "generic",
    /// "offload", or "none" (not this program: a takeover handed the link on, or the
    /// interface is gone).
    pub attached: Vec<(String, &'static str)>,
    /// Each interface whose driver counts `XDP_TX` frames it failed to send: that count
    /// (answers the program sent that never left; see `xdp::XdpRuntime::guard`).
    pub tx_errors: Vec<(String, u64)>,
    /// Why an interface runs in another mode than the configured one, and how often the
    /// delivery guard moved it to generic mode.
    pub delivery: Vec<Delivery>,
}

/// What any thread may use of the fast path without waiting for the XDP thread: its counters,
/// and telling it that the process stops.
pub struct XdpStatus {
    reader: xdns_bpf::runtime::StatusReader,
    /// `XdpProgram::abandon_handle`: set, a fill or reload under way gives up.
    abandon: Arc<AtomicBool>,
    /// The configured interfaces.
    interfaces: Vec<String>,
    /// The answer table's counts for the active data: userspace state of the loader, which
    /// the XDP thread publishes here after each fill or reload (`None` until data is first
    /// active: `data_active` waits for them, so that it never shows with the counts of none).
    table: Mutex<Option<(usize, usize)>>,
    /// The delivery guard's report, written by the XDP thread.
    delivery: DeliveryReport,
    /// Each interface's `XDP_TX` error counters (`None`: its driver shows none), read on
    /// demand.
    tx: Mutex<Vec<(String, Option<xdns_bpf::iface::TxErrors>)>>,
    /// The guard stage's maps (`[guard]`), for the detector's thread: feature snapshots,
    /// blocks added one by one, the modelled tier.
    pub guard: Option<xdns_bpf::guard::Guard>,
    /// Entries written by the fill or reload under way (or the last one), of its total.
    fill: Arc<xdns_bpf::maps::FillProgress>,
    /// The telemetry stage's maps (`crate::telemetry`).
    telemetry: Mutex<Option<xdns_bpf::telemetry::TelemetryMaps>>,
}

impl XdpStatus {
    /// The telemetry stage's maps, handed over once (to `crate::telemetry`).
    pub fn telemetry(&self) -> anyhow::Result<xdns_bpf::telemetry::TelemetryMaps> {
        self.telemetry.lock().unwrap_or_else(|e| e.into_inner()).take().ok_or_else(|| anyhow::anyhow!("telemetry maps already taken"))
    }

    /// Every counter, read now. A failed map read (none expected while the maps exist) gives
    /// that part's default.
    pub fn counters(&self) -> XdpCounters {
        let table = *self.table.lock().unwrap_or_else(|e| e.into_inner());
        XdpCounters {
            verdicts: self.reader.counters().unwrap_or_default(),
            table: table.unwrap_or_default(),
            memo: self.reader.memo_counts().unwrap_or_default(),
            reply: self.reader.reply_counts().unwrap_or_default(),
            data_active: table.is_some() && self.reader.generation().is_ok_and(|g| g != 0),
            attached: self
                .interfaces
                .iter()
                .map(|i| (i.clone(), self.reader.attached_as(i).ok().flatten().unwrap_or("none")))
                .collect(),
            tx_errors: self
                .tx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter_mut()
                .filter_map(|(i, tx)| Some((i.clone(), tx.as_mut()?.read().ok().flatten()?)))
                .collect(),
            delivery: self.delivery.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// Everything `xdns stats` and `/metrics` show of the fast path, read now, into `s`.
    pub fn snapshot(&self, s: &mut crate::stats::Snapshot) {
        use crate::stats::Group;
        let c = self.counters();
        fn named(pairs: [(&str, u64); 2]) -> impl Iterator<Item = (String, u64)> + '_ {
            pairs.into_iter().map(|(k, v)| (k.to_string(), v))
        }
        s.xdp = c.verdicts.into_iter().collect();
        s.xdp_table = named([("answers_in_table", c.table.0 as u64), ("answers_left_out", c.table.1 as u64)]).collect();
        s.xdp_data_active = Some(c.data_active);
        s.xdp_attached = c.attached.into_iter().map(|(i, how)| (i, how.to_string())).collect();
        let mut groups = vec![
            ("xdp_memo", Group::counters(
                "XDP question memo (resolver: cache hints): questions answered through it (hits) and written into it (kept).",
                "counter", named([("hits", c.memo.0), ("kept", c.memo.1)]))),
            ("xdp_reply", Group::counters(
                "XDP reply memo (resolver): cache hits answered with a reply kept whole for their exact query (hits), replies written (kept).",
                "counter", named([("hits", c.reply.0), ("kept", c.reply.1)]))),
            ("xdp_fill", {
                let (written, total) = self.fill.get();
                let mut g = Group::counters(
                    "Entries (names and answers) of the zone data being written to the kernel maps, or last written: written and total.",
                    "entries", named([("written", written), ("total", total)]));
                g.meta.gauge = true;
                g
            }),
            ("xdp_tx_errors", Group::counters(
                "XDP_TX frames the interface's driver failed to send (ethtool statistics): kernel answers that never left.",
                "interface", c.tx_errors)),
        ];
        let mut fallbacks = Vec::new();
        for d in c.delivery {
            if let Some(r) = d.reason {
                s.xdp_mode_reason.insert(d.interface.clone(), r);
            }
            fallbacks.push((d.interface, d.fallbacks));
        }
        if let Ok(Some(g)) = self.reader.guard_counters() {
            let mut v = vec![
                ("allowed".to_string(), g.allowed),
                ("feature_full".to_string(), g.feature_full),
                ("suffix_full".to_string(), g.suffix_full),
                ("rrl_full".to_string(), g.rrl_full),
                ("cookie_bad".to_string(), g.cookie_bad),
                ("cookie_echoed".to_string(), g.cookie_echoed),
                ("answer_feature_full".to_string(), g.answer_full),
                ("nxdomain_feature_full".to_string(), g.nxdomain_full),
            ];
            v.extend(g.tier_hits.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, &n)| (format!("modelled_tier_slot_{i}"), n)));
            groups.push(("xdp_guard", Group::counters(
                "XDP guard stage: sources let through by an allow prefix, packets the feature maps could not count, kernel answers the RRL map could not account, COOKIE options whose server cookie did not verify in XDP, kernel answers that echoed a fresh valid server cookie, drops per slot of the modelled hardware tier (a model of a NIC table). Its drops, RRL drops, slips and cookie passes are verdicts (xdp).",
                "counter", v)));
        }
        groups.push(("xdp_fallbacks", Group::counters(
            "Times the delivery guard moved the interface from native to generic XDP because answers were lost (mode auto).",
            "interface", fallbacks)));
        for (name, g) in groups {
            if !g.values.is_empty() {
                s.groups.insert(name.to_string(), g);
            }
        }
    }

    /// Answers sent by the program (`answered` + `cache_answered`), all CPUs.
    fn answered(&self) -> u64 {
        let v = self.reader.counters().unwrap_or_default();
        v.iter().filter(|(k, _)| k == "answered" || k == "cache_answered").map(|(_, n)| n).sum()
    }

    /// The process stops: a fill or reload of the kernel maps under way gives up at its next
    /// chunk (its data would go with the maps), so that stopping need not wait for it. The
    /// active data keeps answering until the program goes.
    pub fn abandon_writes(&self) {
        self.abandon.store(true, Ordering::Relaxed);
    }

    fn publish_table(&self, rt: &XdpRuntime) {
        let counts = rt.table_counts();
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if rt.data_active() || table.is_some() {
            *table = Some(counts);
        }
    }
}

/// The guard stage's lists: block and allow prefixes, blocked names.
pub type GuardLists = (
    xdns_guard::lists::PrefixList,
    xdns_guard::lists::PrefixList,
    xdns_guard::lists::NameList,
    Vec<xdns_guard::lists::NameEntry>,
);

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
    status: Arc<XdpStatus>,
    /// Set once the process has switched user: the XDP thread then keeps only the
    /// capabilities it needs, at its next turn (a fill under way finishes first).
    restrict_caps: Arc<AtomicBool>,
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
        let (started_tx, started_rx) = mpsc::channel::<anyhow::Result<Option<Arc<XdpStatus>>>>();
        let (tx, rx) = mpsc::channel::<Cmd>();
        let cfg = cfg.clone();
        let listen = listen.to_vec();
        let restrict_caps = Arc::new(AtomicBool::new(false));
        let restrict = restrict_caps.clone();
        let thread = std::thread::Builder::new()
            .name("xdns-xdp".into())
            .spawn(move || {
                // set before anything else, so that the switch of user, whenever it comes
                // (while this thread fills the maps, say), leaves this thread its capabilities
                // until it restricts them below, between two commands
                if cfg.keep_caps {
                    if let Err(e) = crate::privilege::keep_caps_across_switch() {
                        tracing::warn!("XDP thread: {e:#}: a fill of the maps during the switch of user may fail (a reload fills them)");
                    }
                }
                let mut restricted = false;
                let start = || -> anyhow::Result<Option<(XdpRuntime, Arc<XdpStatus>)>> {
                    let Some(mut rt) = XdpRuntime::load(&cfg, &listen, &zones, edns_payload)? else {
                        return Ok(None);
                    };
                    if fill {
                        rt.fill()?;
                    }
                    let status = XdpStatus {
                        reader: rt.status_reader()?,
                        abandon: rt.abandon_handle(),
                        fill: rt.fill_progress(),
                        telemetry: Mutex::new(rt.telemetry().ok()),
                        interfaces: cfg.interfaces.clone(),
                        table: Mutex::new(rt.data_active().then(|| rt.table_counts())),
                        delivery: rt.delivery_report(),
                        guard: rt.guard_maps().ok(),
                        tx: Mutex::new(
                            cfg.interfaces
                                .iter()
                                .map(|i| (i.clone(), xdns_bpf::iface::TxErrors::probe(i).ok().filter(|t| !t.counters.is_empty())))
                                .collect(),
                        ),
                    };
                    Ok(Some((rt, Arc::new(status))))
                };
                let (mut rt, status) = match start() {
                    Ok(Some((mut rt, status))) => {
                        let _ = started_tx.send(Ok(Some(status.clone())));
                        rt.index_zones();
                        (rt, status)
                    }
                    Ok(None) => {
                        let _ = started_tx.send(Ok(None));
                        return;
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return;
                    }
                };
                drop(zones);
                loop {
                    if !restricted && restrict.load(Ordering::Relaxed) {
                        restricted = true;
                        match crate::privilege::restrict_thread_caps(&crate::privilege::XDP_THREAD_CAPS) {
                            Ok(()) => tracing::info!("XDP thread keeps CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON, nothing else"),
                            Err(e) => tracing::error!("XDP thread capabilities: {e:#}"),
                        }
                    }
                    // between commands, and at least every GUARD_PERIOD: the delivery guard
                    let cmd = match rx.recv_timeout(GUARD_PERIOD) {
                        Ok(cmd) => cmd,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            rt.guard(status.answered());
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    };
                    match cmd {
                        Cmd::Reload(z, reply) => {
                            let done = rt.reload(&z);
                            if done.as_ref().is_err_and(abandoned) {
                                tracing::info!("XDP: reload abandoned: stopping");
                            }
                            status.publish_table(&rt);
                            rt.index_zones();
                            let _ = reply.send(done);
                        }
                        Cmd::Update(z, change, reply) => {
                            let done = rt.update(&z, &change);
                            status.publish_table(&rt);
                            // after a full reload in its place (in place, built already)
                            rt.index_zones();
                            let _ = reply.send(done);
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
                                let filled = rt.fill();
                                match filled {
                                    Err(e) if abandoned(&e) => tracing::info!("XDP: filling the maps abandoned: stopping"),
                                    Err(e) => tracing::error!(
                                        "{e:#}; the kernel passes every query to userspace until a reload succeeds"
                                    ),
                                    Ok(()) => {}
                                }
                                status.publish_table(&rt);
                                rt.index_zones();
                            }
                        }
                        Cmd::Links(reply) => {
                            let _ = reply.send(rt.link_fds());
                        }
                        Cmd::Reclaim(reply) => {
                            let _ = reply.send(rt.reclaim_links());
                        }
                        Cmd::Cache(reply) => {
                            let _ = reply.send(rt.cache());
                        }
                        Cmd::Kit(reply) => {
                            let _ = reply.send(rt.kit_maps());
                        }
                        Cmd::SetAllow(allow, reply) => {
                            let _ = reply.send(rt.set_allow(&allow));
                        }
                        Cmd::Idle(reply) => {
                            let _ = reply.send(Ok(()));
                        }
                    }
                }
            })?;
        match started_rx.recv() {
            Ok(Ok(Some(status))) => Ok(Some(Self {
                tx: Some(tx),
                thread: Some(thread),
                status,
                restrict_caps,
            })),
            Ok(Ok(None)) => {
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

    /// Give the kernel a new zone set (blocking until the new data is active or the reload
    /// failed, however long that takes; call from a blocking context).
    pub fn reload(&self, zones: Arc<ZoneSet>) -> anyhow::Result<()> {
        self.call_within(None, |reply| Cmd::Reload(zones, reply))
    }

    /// Give the kernel a zone set that differs from its own by one zone's `change` (in place
    /// when it can: `XdpRuntime::update`); blocking, like [`Self::reload`].
    pub fn update(&self, zones: Arc<ZoneSet>, change: super::runtime::ZoneChange) -> anyhow::Result<super::runtime::KernelUpdate> {
        self.call_within(None, |reply| Cmd::Update(zones, change, reply))
    }

    /// Attach to the configured interfaces, taking over `inherited` links where they match
    /// (blocking), then fill the maps if [`Self::load`] did not. Returns once attached;
    /// `data_active` in the counters tells when the data is in.
    pub fn attach(&self, inherited: Vec<InheritedLink>) -> anyhow::Result<()> {
        self.call(|reply| Cmd::Attach(inherited, reply))
    }

    /// Return once the XDP thread has done every command sent before (the fill that follows
    /// an attach included), however long that takes (blocking).
    pub fn idle(&self) -> anyhow::Result<()> {
        self.call_within(None, Cmd::Idle)
    }

    /// Duplicates of the attached links, to hand to a new process (blocking).
    pub fn links(&self) -> anyhow::Result<Vec<InheritedLink>> {
        self.call(Cmd::Links)
    }

    /// Point the links at this process's program again (blocking).
    pub fn reclaim_links(&self) -> anyhow::Result<()> {
        self.call(Cmd::Reclaim)
    }

    /// The counters' reader, for any thread, whatever the XDP thread is doing.
    pub fn status(&self) -> Arc<XdpStatus> {
        self.status.clone()
    }

    /// The kernel answer cache and its refresh-event reader (blocking). `Ok(None)` when the
    /// cache stage is off (`XdpConfig::resolver` unset). Call once: the event reader is the one
    /// consumer of the ring buffer.
    pub fn cache(&self) -> anyhow::Result<Option<CacheHandles>> {
        self.call(Cmd::Cache)
    }

    /// Kernel iteration's maps (blocking); `Ok(None)` when it is off.
    pub fn kit(&self) -> anyhow::Result<Option<xdns_bpf::kit::KitMaps>> {
        self.call(Cmd::Kit)
    }

    /// Replace the resolver's allow list in the kernel (blocking).
    pub fn set_allow(&self, allow: Vec<(std::net::IpAddr, u8)>) -> anyhow::Result<()> {
        self.call(|reply| Cmd::SetAllow(allow, reply))
    }

    /// The process has switched user: the XDP thread drops every capability but
    /// `CAP_NET_ADMIN` and `CAP_BPF` at its next turn (it logs it), without waiting here for a
    /// fill under way.
    pub fn restrict_caps_soon(&self) {
        self.restrict_caps.store(true, Ordering::Relaxed);
    }

    /// Send the command `make` builds around a reply channel, and wait for the reply up to
    /// [`CALL_TIMEOUT`].
    fn call<T>(&self, make: impl FnOnce(mpsc::Sender<anyhow::Result<T>>) -> Cmd) -> anyhow::Result<T> {
        self.call_within(Some(CALL_TIMEOUT), make)
    }

    /// As [`Self::call`], waiting up to `timeout` (`None`: until the thread replies or stops).
    fn call_within<T>(
        &self,
        timeout: Option<Duration>,
        make: impl FnOnce(mpsc::Sender<anyhow::Result<T>>) -> Cmd,
    ) -> anyhow::Result<T> {
        let (reply, rx) = mpsc::channel();
        self.send(make(reply))?;
        match timeout {
            Some(t) => rx
                .recv_timeout(t)
                .map_err(|_| anyhow::anyhow!("the XDP thread did not answer"))?,
            None => rx
                .recv()
                .map_err(|_| anyhow::anyhow!("the XDP thread stopped before answering"))?,
        }
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

/// An install given up because the process stops (`XdpStatus::abandon_writes`).
pub(super) fn abandoned(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<xdns_bpf::maps::Abandoned>())
}

impl Drop for Fastpath {
    fn drop(&mut self) {
        // a fill under way (a fresh start's) gives up: the thread is joined below
        self.status.abandon_writes();
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
