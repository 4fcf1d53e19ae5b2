//! Latency telemetry (issue 27, stage 5): which answers are timed, the userspace paths'
//! histograms, the in-band probe option in userspace answers, and the rules pushed to the
//! kernel (`xdns_bpf::telemetry`, `bpf/telemetry.h`).
//!
//! Rules come from `[telemetry] rules` and from `xdns telemetry add|del|list` on the control
//! socket (a reload sets the file's rules again). The same rules select kernel answers (the
//! XDP program reads them from its map, replaced whole while traffic flows) and userspace
//! answers ([`Telemetry::select`]); with none, nothing is timed and no clock is read.
//!
//! Userspace transmit times: the UDP workers ask the kernel for a software (or the NIC's)
//! transmit timestamp of each timed answer (`SO_TIMESTAMPING`, per message, with an ID of
//! their own: `SCM_TS_OPT_ID`), read them from the socket's error queue without waiting, and
//! match them to the answers with [`TxStamps`]; a stamp that does not come back within
//! [`TxStamps::PATIENCE_NS`] (or while [`TxStamps::MAX_WAITING`] answers wait) is counted
//! lost, and the time read before sending is used. [`TxClock`] says which clock gave each.
//!
//! Upstream queries: [`Upstream`] wraps the resolver's network and times each exchange that
//! got a reply (path `resolver_upstream`, selected by the same rules: `dst=` is the server
//! asked, `src=` never matches).
//!
//! In-band probes: a query whose OPT record carries option [`OPTION`] (65050, local use),
//! empty or 16 bytes, and whose answer is selected, gets the option back in its answer's OPT
//! with 16 bytes: the server's receive and transmit ns, u64 big-endian. Only their
//! difference means something (the kernel uses its monotonic clock, userspace the socket's
//! receive timestamp and `CLOCK_REALTIME`).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use serde::{Deserialize, Serialize};
pub use xdns_bpf::telemetry::{Histogram, Rule, MAX_RULES, OPTION, PATHS, PROBE_LEN, RESOLVER_HIT, RESOLVER_MISS, RESOLVER_UPSTREAM, USER_AUTH};
use xdns_bpf::telemetry::{KERNEL_AUTH, KERNEL_CACHE};
use xdns_bpf::telemetry::{bucket, TelemetryMaps, BUCKETS};

/// A histogram many threads add to.
struct AtomicHist {
    count: AtomicU64,
    sum: AtomicU64,
    b: Box<[AtomicU64]>,
}

impl AtomicHist {
    fn new() -> Self {
        Self { count: AtomicU64::new(0), sum: AtomicU64::new(0), b: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect() }
    }

    fn record(&self, ns: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(ns, Ordering::Relaxed);
        self.b[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> Histogram {
        Histogram {
            count: self.count.load(Ordering::Relaxed),
            sum_ns: self.sum.load(Ordering::Relaxed),
            buckets: self.b.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
        }
    }
}

/// The rules and their sampling counters (shared with [`Upstream`]).
#[derive(Default)]
struct Selection {
    rules: ArcSwap<Vec<Rule>>,
    seen: [AtomicU64; MAX_RULES],
    /// Some rule may select an answer the UDP workers send (user_auth, resolver_hit,
    /// resolver_miss): they then ask the kernel for timestamps. Written with the rules.
    udp: std::sync::atomic::AtomicBool,
}

impl Selection {
    fn on(&self) -> bool {
        !self.rules.load().is_empty()
    }

    fn store(&self, rules: Vec<Rule>) {
        const UDP: u8 = 1 << USER_AUTH | 1 << RESOLVER_HIT | 1 << RESOLVER_MISS;
        let udp = rules.iter().any(|r| r.paths == 0 || r.paths & UDP != 0);
        self.rules.store(Arc::new(rules));
        self.udp.store(udp, Ordering::Relaxed);
    }

    fn select(&self, path: usize, client: IpAddr, server: IpAddr, qname: &[u8], qtype: u16) -> bool {
        let rules = self.rules.load();
        for (i, r) in rules.iter().enumerate() {
            if r.matches(path, client, server, qname, qtype) {
                return r.sample <= 1 || self.seen[i].fetch_add(1, Ordering::Relaxed).is_multiple_of(u64::from(r.sample));
            }
        }
        false
    }
}

/// The server's telemetry state (in `Shared`).
pub struct Telemetry {
    sel: Arc<Selection>,
    /// user_auth, resolver_hit, resolver_miss
    hists: [AtomicHist; 3],
    /// resolver_upstream (the resolver's network holds it too)
    upstream: Arc<Upstream>,
    probes: AtomicU64,
    probe_bad: AtomicU64,
    probe_room: AtomicU64,
    rx_hw: AtomicU64,
    rx_sw: AtomicU64,
    rx_clock: AtomicU64,
    /// By [`TxClock`]: software, hardware, read, lost.
    tx: [AtomicU64; 4],
    /// The kernel's maps, with XDP on.
    kernel: ArcSwapOption<TelemetryMaps>,
    /// `[dnstap] xdp`: the kernel answers the rules select go to dnstap too.
    dnstap_xdp: std::sync::atomic::AtomicBool,
    /// The thread reading the kernel's dnstap events (with the kernel's maps).
    tap_reader: std::sync::Mutex<Option<crate::dnstap::kernel::Reader>>,
}

impl Default for Telemetry {
    fn default() -> Self {
        let sel = Arc::new(Selection::default());
        Self {
            upstream: Arc::new(Upstream { sel: sel.clone(), hist: AtomicHist::new() }),
            sel,
            hists: [AtomicHist::new(), AtomicHist::new(), AtomicHist::new()],
            probes: AtomicU64::new(0),
            probe_bad: AtomicU64::new(0),
            probe_room: AtomicU64::new(0),
            rx_hw: AtomicU64::new(0),
            rx_sw: AtomicU64::new(0),
            rx_clock: AtomicU64::new(0),
            tx: Default::default(),
            kernel: ArcSwapOption::empty(),
            dnstap_xdp: Default::default(),
            tap_reader: Default::default(),
        }
    }
}

/// Where a userspace answer's transmit time came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxClock {
    /// The kernel's software transmit stamp, from the socket's error queue.
    Software,
    /// The NIC's transmit stamp (raw hardware), from the error queue.
    Hardware,
    /// Read just before sending (no error-queue stamp asked for: the resolver's answers, a
    /// kernel without `SCM_TS_OPT_ID`, a send that failed).
    Read,
    /// Asked for, but it never came back in time: the time read before sending.
    Lost,
}

/// Where a userspace answer's receive time came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxClock {
    /// The NIC's timestamp (SO_TIMESTAMPING, raw hardware).
    Hardware,
    /// The kernel's, on receive (SO_TIMESTAMPING, software).
    Software,
    /// None came with the datagram: the time userspace read it.
    Read,
}

impl Telemetry {
    /// May a rule select answers the UDP workers send? (One atomic load: the cost of
    /// telemetry off per batch of datagrams.) Rules for the kernel's paths or the resolver's
    /// upstream queries alone leave the workers' sockets without timestamps.
    pub fn on(&self) -> bool {
        self.sel.udp.load(Ordering::Relaxed)
    }

    /// The upstream queries' timer, for the resolver's network ([`Upstream`]).
    pub fn upstream(&self) -> Arc<Upstream> {
        self.upstream.clone()
    }

    /// Use the kernel's maps from now on, give them the rules, and read their dnstap events.
    pub fn attach_kernel(&self, maps: Option<TelemetryMaps>) {
        let maps = maps.map(Arc::new);
        let mut reader = self.tap_reader.lock().unwrap_or_else(|e| e.into_inner());
        *reader = None; // the old reader stops first
        self.kernel.store(maps.clone());
        self.push();
        if let Some(m) = maps {
            match crate::dnstap::kernel::Reader::start(m) {
                Ok(r) => *reader = Some(r),
                Err(e) => tracing::error!("dnstap from XDP: cannot start the reader thread: {e}"),
            }
        }
    }

    /// `[dnstap] xdp` (at start and reload): whether the kernel answers the rules select go
    /// to dnstap too.
    pub fn set_dnstap_xdp(&self, on: bool) {
        if self.dnstap_xdp.swap(on, Ordering::Relaxed) != on {
            self.push();
        }
    }

    /// Give the kernel the rules that may select its answers (none: telemetry off there, one
    /// map read per packet and no more), and whether their answers go to dnstap.
    fn push(&self) {
        if let Some(k) = self.kernel.load_full() {
            if let Err(e) = k.set_rules_tap(&kernel_rules(&self.sel.rules.load()), self.dnstap_xdp.load(Ordering::Relaxed)) {
                tracing::error!("XDP telemetry rules not replaced: {e:#}");
            }
        }
    }

    /// Replace the rules (the configuration's, at start and reload).
    pub fn set(&self, rules: Vec<Rule>) {
        self.sel.store(rules);
        self.push();
    }

    /// `telemetry list | add RULE | del N | del all`: the control socket's reply line.
    pub fn command(&self, cmd: &str) -> String {
        let rest = cmd.trim().strip_prefix("telemetry").unwrap_or("").trim();
        let (verb, arg) = rest.split_once(' ').map_or((rest, ""), |(v, a)| (v, a.trim()));
        let cur = self.sel.rules.load_full();
        let list = |rules: &[Rule]| {
            let items: Vec<String> = rules.iter().enumerate().map(|(i, r)| format!("{}: {r}", i + 1)).collect();
            format!("ok {}{}{}", rules.len(), if items.is_empty() { "" } else { "; " }, items.join("; "))
        };
        match verb {
            "list" if arg.is_empty() => list(&cur),
            "add" => match Rule::parse(if arg.is_empty() { "all" } else { arg }) {
                Ok(r) if cur.len() < MAX_RULES => {
                    let mut v = (*cur).clone();
                    v.push(r);
                    self.set(v.clone());
                    list(&v)
                }
                Ok(_) => format!("error: at most {MAX_RULES} rules"),
                Err(e) => format!("error: {e:#}"),
            },
            "del" if arg == "all" => {
                self.set(Vec::new());
                list(&[])
            }
            "del" => match arg.parse::<usize>() {
                Ok(n) if n >= 1 && n <= cur.len() => {
                    let mut v = (*cur).clone();
                    v.remove(n - 1);
                    self.set(v.clone());
                    list(&v)
                }
                _ => format!("error: no rule `{}` (xdns telemetry list numbers them from 1)", arg.escape_debug()),
            },
            _ => "error: usage: telemetry list | add RULE | del N | del all".to_string(),
        }
    }

    /// Does a rule select this userspace answer (sampling counted)?
    pub fn select(&self, path: usize, client: IpAddr, server: IpAddr, qname: &[u8], qtype: u16) -> bool {
        self.sel.select(path, client, server, qname, qtype)
    }

    /// Count one timed userspace answer of `path` (USER_AUTH, RESOLVER_HIT, RESOLVER_MISS)
    /// and the clocks of its receive and transmit times.
    pub fn record(&self, path: usize, ns: u64, clock: RxClock, tx: TxClock) {
        if let Some(h) = path.checked_sub(USER_AUTH).and_then(|i| self.hists.get(i)) {
            h.record(ns);
        }
        match clock {
            RxClock::Hardware => &self.rx_hw,
            RxClock::Software => &self.rx_sw,
            RxClock::Read => &self.rx_clock,
        }
        .fetch_add(1, Ordering::Relaxed);
        self.tx[tx as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Count the outcome of a probe write.
    pub fn probe_outcome(&self, p: ProbeWrite) {
        match p {
            ProbeWrite::Written => &self.probes,
            ProbeWrite::Bad => &self.probe_bad,
            ProbeWrite::NoRoom => &self.probe_room,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Histograms (kernel and userspace) and counters into `s`.
    pub fn snapshot(&self, s: &mut crate::stats::Snapshot) {
        let mut hists: Vec<Histogram> = vec![Histogram::default(), Histogram::default()];
        let mut c = [
            ("rules", self.sel.rules.load().len() as u64),
            ("probes", self.probes.load(Ordering::Relaxed)),
            ("probe_bad", self.probe_bad.load(Ordering::Relaxed)),
            ("probe_room", self.probe_room.load(Ordering::Relaxed)),
            ("rx_hardware", self.rx_hw.load(Ordering::Relaxed)),
            ("rx_software", self.rx_sw.load(Ordering::Relaxed)),
            ("rx_read", self.rx_clock.load(Ordering::Relaxed)),
            ("rx_xdp_ktime", 0),
            ("tx_software", self.tx[TxClock::Software as usize].load(Ordering::Relaxed)),
            ("tx_hardware", self.tx[TxClock::Hardware as usize].load(Ordering::Relaxed)),
            ("tx_read", self.tx[TxClock::Read as usize].load(Ordering::Relaxed)),
            ("tx_lost", self.tx[TxClock::Lost as usize].load(Ordering::Relaxed)),
            ("dnstap_xdp_events", 0),
            ("dnstap_xdp_ring_full", 0),
            ("dnstap_xdp_too_long", 0),
            ("dnstap_xdp_read", crate::dnstap::kernel::READ.load(Ordering::Relaxed)),
        ];
        if let Some(k) = self.kernel.load_full() {
            if let Ok(kh) = k.histograms() {
                for (i, h) in kh.iter().enumerate() {
                    hists[i] = h.hist.clone();
                    c[1].1 += h.probes;
                    c[2].1 += h.probe_bad;
                    c[3].1 += h.probe_room;
                    c[7].1 += h.rx_ktime;
                    c[12].1 += h.dtap_events;
                    c[13].1 += h.dtap_full;
                    c[14].1 += h.dtap_long;
                }
            }
        }
        hists.extend(self.hists.iter().map(AtomicHist::read));
        hists.push(self.upstream.hist.read());
        for (i, h) in hists.iter().enumerate() {
            s.latency.insert(PATHS[i].to_string(), Latency::of(h));
        }
        s.groups.insert(
            "telemetry".into(),
            crate::stats::Group::counters("Telemetry: rules set, in-band probes (written, bad option, no room), receive and transmit clocks of timed userspace answers (tx_lost: error-queue stamp never came back), dnstap from XDP (events the kernel wrote, lost to a full ring, not made for a message too long; read by the daemon).", "counter", c.iter().map(|(k, v)| (k.to_string(), *v))),
        );
    }
}

/// The rules that may select an answer of a kernel path (kernel_auth, kernel_cache), in
/// their order. A rule for userspace paths or upstream queries only never selects one (the
/// set's summary, `xdns_bpf::telemetry::summarize`, gives it no address bit, but the kernel
/// would still check every packet against that summary): left out, a set of such rules alone
/// leaves the kernel's telemetry off (one map read per packet).
fn kernel_rules(rules: &[Rule]) -> Vec<Rule> {
    const KERNEL: u8 = 1 << KERNEL_AUTH | 1 << KERNEL_CACHE;
    rules.iter().filter(|r| r.paths == 0 || r.paths & KERNEL != 0).cloned().collect()
}

/// A selected query waiting for its answer: what [`Telemetry::finish`] needs.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    pub path: usize,
    /// Receive time, ns of `CLOCK_REALTIME`.
    pub rx: u64,
    pub clock: RxClock,
    /// The probe option's data length, if the query carried one.
    pub probe: Option<usize>,
    /// Largest answer the client takes.
    pub limit: usize,
}

impl Telemetry {
    /// The selection for a received query answered on `path` (or to be resolved:
    /// RESOLVER_MISS); `None` when telemetry is off or no rule selects it.
    pub fn start(&self, path: usize, query: &[u8], client: IpAddr, server: IpAddr, rx: (u64, RxClock), our_payload: u16) -> Option<Timed> {
        if !self.on() {
            return None;
        }
        let a = asked(query)?;
        if !self.select(path, client, server, a.qname, a.qtype) {
            return None;
        }
        let limit = if a.probe.is_some() { usize::from(a.payload.min(our_payload).max(512)) } else { 512 };
        Some(Timed { path, rx: rx.0, clock: rx.1, probe: a.probe, limit })
    }

    /// The answer is about to be sent: its transmit time (read now), the probe option, the
    /// histogram.
    pub fn finish(&self, t: Timed, answer: &mut Vec<u8>) {
        let tx = self.stamp_probe(t, answer);
        self.record(t.path, tx.saturating_sub(t.rx), t.clock, TxClock::Read);
    }

    /// The answer is about to be sent and its transmit time comes later (from the error
    /// queue, [`TxStamps`]): the probe option (with the time read now, the only one an
    /// answer can carry); returns that time.
    pub fn stamp_probe(&self, t: Timed, answer: &mut Vec<u8>) -> u64 {
        let tx = realtime_ns();
        match t.probe {
            Some(0) | Some(PROBE_LEN) => self.probe_outcome(write_probe(answer, t.rx, tx, t.limit)),
            Some(_) => self.probe_outcome(ProbeWrite::Bad),
            None => {}
        }
        tx
    }
}

/// A timed answer sent with a transmit stamp asked for, waiting for it.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    id: u32,
    timed: Timed,
    /// The time read just before sending (CLOCK_REALTIME ns): used if no stamp comes.
    sent: u64,
}

/// One UDP worker's timed answers waiting for their transmit stamps from the socket's error
/// queue, matched by the ID each was sent with (`SCM_TS_OPT_ID`). Stamps that never come
/// back are counted lost ([`TxClock::Lost`]) after [`Self::PATIENCE_NS`], or at once when
/// more than [`Self::MAX_WAITING`] answers wait; the answer is then recorded with the time
/// read before sending. Nothing here blocks.
#[derive(Debug, Default)]
pub struct TxStamps {
    last: u32,
    waiting: VecDeque<Waiting>,
}

impl TxStamps {
    /// Answers waiting at most; past it the oldest is counted lost.
    pub const MAX_WAITING: usize = 4096;
    /// How long a stamp is waited for (ns).
    pub const PATIENCE_NS: u64 = 1_000_000_000;

    /// The ID to send the next timed answer with (never 0).
    pub fn next_id(&mut self) -> u32 {
        self.last = self.last.wrapping_add(1).max(1);
        self.last
    }

    /// How many answers wait for their stamp.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Answer `id` of `timed` was sent at `sent` (read before sending).
    pub fn sent(&mut self, tel: &Telemetry, id: u32, timed: Timed, sent: u64) {
        if self.waiting.len() >= Self::MAX_WAITING {
            if let Some(w) = self.waiting.pop_front() {
                tel.record(w.timed.path, w.sent.saturating_sub(w.timed.rx), w.timed.clock, TxClock::Lost);
            }
        }
        self.waiting.push_back(Waiting { id, timed, sent });
    }

    /// A stamp read from the error queue: ID `id`, software time `sw` and raw hardware time
    /// `hw` (0: absent). An answer received on the NIC's clock takes the NIC's transmit
    /// time, any other the kernel's; a stamp on the other clock, or of an ID no answer waits
    /// for (already counted lost, or not ours), is ignored. Returns whether it matched.
    pub fn stamp(&mut self, tel: &Telemetry, id: u32, sw: u64, hw: u64) -> bool {
        // IDs wait in the order they were given (gaps where a send failed): a binary search
        // on the distance from the oldest, wrapping included
        let Some(base) = self.waiting.front().map(|w| w.id) else {
            return false;
        };
        let Ok(i) = self.waiting.binary_search_by_key(&id.wrapping_sub(base), |w| w.id.wrapping_sub(base)) else {
            return false;
        };
        let w = self.waiting[i];
        let (at, clock) = match w.timed.clock {
            RxClock::Hardware => (hw, TxClock::Hardware),
            RxClock::Software | RxClock::Read => (sw, TxClock::Software),
        };
        if at == 0 {
            return false;
        }
        self.waiting.remove(i);
        tel.record(w.timed.path, at.saturating_sub(w.timed.rx), w.timed.clock, clock);
        true
    }

    /// Count lost the answers that waited longer than [`Self::PATIENCE_NS`] at `now`
    /// (CLOCK_REALTIME ns); returns how many.
    pub fn expire(&mut self, tel: &Telemetry, now: u64) -> usize {
        let mut n = 0;
        while let Some(w) = self.waiting.front().copied() {
            if w.sent.saturating_add(Self::PATIENCE_NS) > now {
                break;
            }
            self.waiting.pop_front();
            tel.record(w.timed.path, w.sent.saturating_sub(w.timed.rx), w.timed.clock, TxClock::Lost);
            n += 1;
        }
        n
    }

    /// Count every waiting answer lost (stamping is being turned off).
    pub fn give_up(&mut self, tel: &Telemetry) {
        self.expire(tel, u64::MAX);
    }
}

/// The resolver's network with each upstream exchange timed (path `resolver_upstream`):
/// from just before the query is sent to its reply, for the exchanges a rule selects
/// (`dst=` is the server asked, `qname=`/`qtype=` its question; `src=` never matches) and
/// that got a reply. With no rules: one atomic load per exchange.
pub struct Upstream {
    sel: Arc<Selection>,
    hist: AtomicHist,
}

impl Upstream {
    /// Is this upstream query (to `server`) to be timed?
    pub fn select(&self, query: &[u8], server: IpAddr) -> bool {
        if !self.sel.on() {
            return false;
        }
        let Some(a) = asked(query) else {
            return false;
        };
        let unspecified = match server {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        };
        self.sel.select(RESOLVER_UPSTREAM, unspecified, server, a.qname, a.qtype)
    }

    /// Count one timed exchange.
    pub fn record(&self, ns: u64) {
        self.hist.record(ns);
    }
}

/// A resolver network whose exchanges [`Upstream`] times.
pub struct TimedNetwork<N>(pub N, pub Arc<Upstream>);

impl<N: xdns_resolver::Network> xdns_resolver::Network for TimedNetwork<N> {
    fn udp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a xdns_resolver::msg::Expect,
        timeout: std::time::Duration,
    ) -> xdns_resolver::net::BoxFut<'a, std::io::Result<Vec<u8>>> {
        Box::pin(async move { self.timed(query, expect, self.0.udp(query, expect, timeout)).await })
    }

    fn tcp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a xdns_resolver::msg::Expect,
        timeout: std::time::Duration,
    ) -> xdns_resolver::net::BoxFut<'a, std::io::Result<Vec<u8>>> {
        Box::pin(async move { self.timed(query, expect, self.0.tcp(query, expect, timeout)).await })
    }
}

impl<N> TimedNetwork<N> {
    async fn timed(
        &self,
        query: &[u8],
        expect: &xdns_resolver::msg::Expect,
        exchange: impl std::future::Future<Output = std::io::Result<Vec<u8>>>,
    ) -> std::io::Result<Vec<u8>> {
        let start = self.1.select(query, expect.server.ip()).then(std::time::Instant::now);
        let r = exchange.await;
        if let (Some(t), Ok(_)) = (start, &r) {
            self.1.record(t.elapsed().as_nanos() as u64);
        }
        r
    }
}

/// One path's server time, for `xdns stats` and `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub sum_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// Cumulative counts at the export bounds (`le` in ns): `[le, count]`.
    pub buckets: Vec<[u64; 2]>,
}

impl Latency {
    fn of(h: &Histogram) -> Self {
        let q = |p| h.quantile(p).unwrap_or(0);
        let bounds = xdns_bpf::telemetry::export_bounds();
        let cum = h.cumulative(&bounds);
        Self {
            count: h.buckets.iter().sum(),
            sum_ns: h.sum_ns,
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            buckets: bounds.into_iter().zip(cum).map(|(b, c)| [b, c]).collect(),
        }
    }
}

/// `xdns_latency_seconds` histograms (OpenMetrics text), one per path.
pub fn metrics_text(s: &crate::stats::Snapshot) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if s.latency.is_empty() {
        return out;
    }
    let _ = writeln!(out, "# TYPE xdns_latency_seconds histogram");
    let _ = writeln!(out, "# HELP xdns_latency_seconds Server time of timed answers (telemetry rules), by path.");
    for (path, l) in &s.latency {
        for [le, c] in &l.buckets {
            let _ = writeln!(out, "xdns_latency_seconds_bucket{{path=\"{path}\",le=\"{}\"}} {c}", (*le + 1) as f64 / 1e9);
        }
        let _ = writeln!(out, "xdns_latency_seconds_bucket{{path=\"{path}\",le=\"+Inf\"}} {}", l.count);
        let _ = writeln!(out, "xdns_latency_seconds_sum{{path=\"{path}\"}} {}", l.sum_ns as f64 / 1e9);
        let _ = writeln!(out, "xdns_latency_seconds_count{{path=\"{path}\"}} {}", l.count);
    }
    out
}

/// Rows of `xdns stats`: percentiles per path that has counts.
pub fn table_rows(s: &crate::stats::Snapshot) -> Vec<(String, String)> {
    s.latency
        .iter()
        .filter(|(_, l)| l.count > 0)
        .map(|(p, l)| {
            let us = |ns: u64| format!("{:.1}", ns as f64 / 1000.0);
            (format!("latency.{p}"), format!("n {} p50 {} p90 {} p99 {} p99.9 {} µs", l.count, us(l.p50_ns), us(l.p90_ns), us(l.p99_ns), us(l.p999_ns)))
        })
        .collect()
}

/// How writing the probe option went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeWrite {
    Written,
    /// The query's option was neither empty nor 16 bytes.
    Bad,
    /// The answer had no OPT record to extend, or no room under the size limit.
    NoRoom,
}

/// What telemetry needs of a query: its name (wire), type, and the probe option's data
/// length if it carries one.
pub struct Asked<'a> {
    pub qname: &'a [u8],
    pub qtype: u16,
    pub probe: Option<usize>,
    pub payload: u16,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Skip a (possibly compressed) name at `pos`; the offset after it.
fn skip_name(b: &[u8], mut pos: usize) -> Option<usize> {
    for _ in 0..128 {
        let l = *b.get(pos)?;
        match l {
            0 => return Some(pos + 1),
            l if l & 0xc0 == 0xc0 => return Some(pos + 2),
            l if l < 64 => pos += 1 + usize::from(l),
            _ => return None,
        }
    }
    None
}

/// Read a query (one question, then its additional records) for telemetry; `None` when it
/// is not one we would time.
pub fn asked(q: &[u8]) -> Option<Asked<'_>> {
    if be16(q, 4)? != 1 || be16(q, 6)? != 0 || be16(q, 8)? != 0 {
        return None;
    }
    let ar = be16(q, 10)?;
    let end = skip_name(q, 12)?;
    let qname = &q[12..end];
    let qtype = be16(q, end)?;
    let mut pos = end + 4;
    let (mut probe, mut payload) = (None, 512);
    for _ in 0..ar {
        let n = skip_name(q, pos)?;
        let (ty, class) = (be16(q, n)?, be16(q, n + 2)?);
        let rdlen = usize::from(be16(q, n + 8)?);
        let rd = n + 10;
        if rd + rdlen > q.len() {
            return None;
        }
        if ty == xdns_wire::rtype::OPT {
            payload = class.max(512);
            let mut o = rd;
            while o + 4 <= rd + rdlen {
                let (code, len) = (be16(q, o)?, usize::from(be16(q, o + 2)?));
                if code == OPTION {
                    probe = Some(len);
                }
                o += 4 + len;
            }
        }
        pos = rd + rdlen;
    }
    Some(Asked { qname, qtype, probe, payload })
}

/// Append the probe option (receive `rx`, transmit `tx` ns) to the OPT record of `answer`,
/// which may grow to `limit` bytes.
pub fn write_probe(answer: &mut Vec<u8>, rx: u64, tx: u64, limit: usize) -> ProbeWrite {
    let Some(at) = opt_rdlen_at(answer) else {
        return ProbeWrite::NoRoom;
    };
    if answer.len() + 4 + PROBE_LEN > limit {
        return ProbeWrite::NoRoom;
    }
    let rdlen = usize::from(u16::from_be_bytes([answer[at], answer[at + 1]]));
    let end = at + 2 + rdlen;
    let mut opt = Vec::with_capacity(4 + PROBE_LEN);
    opt.extend_from_slice(&OPTION.to_be_bytes());
    opt.extend_from_slice(&(PROBE_LEN as u16).to_be_bytes());
    opt.extend_from_slice(&rx.to_be_bytes());
    opt.extend_from_slice(&tx.to_be_bytes());
    answer.splice(end..end, opt);
    answer[at..at + 2].copy_from_slice(&((rdlen + 4 + PROBE_LEN) as u16).to_be_bytes());
    ProbeWrite::Written
}

/// The data of the probe option in an answer's OPT record, if it has one.
pub fn asked_answer(m: &[u8]) -> Option<&[u8]> {
    let at = opt_rdlen_at(m)?;
    let rdlen = usize::from(be16(m, at)?);
    let (mut o, end) = (at + 2, at + 2 + rdlen);
    if end > m.len() {
        return None;
    }
    while o + 4 <= end {
        let (code, len) = (be16(m, o)?, usize::from(be16(m, o + 2)?));
        if o + 4 + len > end {
            return None;
        }
        if code == OPTION {
            return Some(&m[o + 4..o + 4 + len]);
        }
        o += 4 + len;
    }
    None
}

/// Offset of the RDLENGTH of the answer's OPT record.
fn opt_rdlen_at(m: &[u8]) -> Option<usize> {
    let counts = [be16(m, 4)?, be16(m, 6)?, be16(m, 8)?, be16(m, 10)?];
    let mut pos = 12;
    for _ in 0..counts[0] {
        pos = skip_name(m, pos)? + 4;
    }
    let rrs = u32::from(counts[1]) + u32::from(counts[2]) + u32::from(counts[3]);
    for i in 0..rrs {
        let n = skip_name(m, pos)?;
        let ty = be16(m, n)?;
        let rdlen = usize::from(be16(m, n + 8)?);
        if ty == xdns_wire::rtype::OPT && i >= u32::from(counts[1]) + u32::from(counts[2]) {
            return Some(n + 8);
        }
        pos = n + 10 + rdlen;
        if pos > m.len() {
            return None;
        }
    }
    None
}

/// Nanoseconds of `CLOCK_REALTIME` now (the clock of socket receive timestamps).
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(options: &[u8]) -> Vec<u8> {
        let mut m = vec![0xbe, 0xef, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1];
        m.extend_from_slice(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01");
        m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
        m.extend_from_slice(&(options.len() as u16).to_be_bytes());
        m.extend_from_slice(options);
        m
    }

    #[test]
    fn probe_found_and_written() {
        let q = query(&[0xfe, 0x1a, 0, 0]);
        let a = asked(&q).unwrap();
        assert_eq!((a.qtype, a.probe, a.payload), (1, Some(0), 1232));
        assert_eq!(a.qname, b"\x03www\x07example\x03com\x00");
        let q16 = query(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0xfe, 0x1a, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(asked(&q16).unwrap().probe, Some(16));
        assert_eq!(asked(&query(&[])).unwrap().probe, None);
        assert_eq!(asked(&query(&[0xfe, 0x1a, 0, 3, 1, 2, 3])).unwrap().probe, Some(3));
        assert!(asked(&query(&[0xfe, 0x1a, 0, 16, 1])).is_none() || asked(&query(&[0xfe, 0x1a, 0, 16, 1])).unwrap().probe == Some(16));

        // an answer: the question, one A record (compressed owner), our OPT last
        let mut ans = q[..12 + 17 + 4].to_vec();
        ans[2] = 0x85;
        ans[7] = 1;
        ans.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 0x2c, 0, 4, 192, 0, 2, 1]);
        ans.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        let before = ans.clone();
        assert_eq!(write_probe(&mut ans, 5, 7, 1232), ProbeWrite::Written);
        assert_eq!(ans.len(), before.len() + 20);
        assert_eq!(&ans[..before.len() - 2], &before[..before.len() - 2]);
        assert_eq!(&ans[before.len() - 2..before.len() + 4], &[0, 20, 0xfe, 0x1a, 0, 16]);
        assert_eq!(u64::from_be_bytes(ans[ans.len() - 16..ans.len() - 8].try_into().unwrap()), 5);
        assert_eq!(u64::from_be_bytes(ans[ans.len() - 8..].try_into().unwrap()), 7);
        let mut small = before.clone();
        assert_eq!(write_probe(&mut small, 5, 7, before.len() + 10), ProbeWrite::NoRoom);
        assert_eq!(small, before);
        let mut no_opt = before[..before.len() - 11].to_vec();
        no_opt[11] = 0;
        assert_eq!(write_probe(&mut no_opt, 5, 7, 1232), ProbeWrite::NoRoom);
    }

    #[test]
    fn control_commands() {
        let t = Telemetry::default();
        assert!(!t.on());
        assert_eq!(t.command("telemetry list"), "ok 0");
        assert_eq!(t.command("telemetry add qtype=A sample=2"), "ok 1; 1: qtype=A sample=2");
        assert_eq!(t.command("telemetry add"), "ok 2; 1: qtype=A sample=2; 2: all");
        assert!(t.on());
        assert!(t.command("telemetry add color=red").starts_with("error: "));
        assert_eq!(t.command("telemetry del 1"), "ok 1; 1: all");
        assert!(t.command("telemetry del 5").starts_with("error: "));
        assert_eq!(t.command("telemetry del all"), "ok 0");
        assert!(t.command("telemetry frob").starts_with("error: usage"));
        let ip: IpAddr = "198.18.0.2".parse().unwrap();
        t.set(vec![Rule::parse("path=user-auth sample=3").unwrap()]);
        let n = (0..9).filter(|_| t.select(USER_AUTH, ip, ip, b"\0", 1)).count();
        assert_eq!(n, 3);
        assert!(!t.select(RESOLVER_MISS, ip, ip, b"\0", 1));
        t.record(USER_AUTH, 1500, RxClock::Software, TxClock::Read);
        let mut s = crate::stats::Snapshot::default();
        t.snapshot(&mut s);
        assert_eq!(s.latency["user_auth"].count, 1);
        assert!((1450..1550).contains(&s.latency["user_auth"].p50_ns));
        assert_eq!(s.groups["telemetry"].values["rx_software"], 1);
        let text = metrics_text(&s);
        assert!(text.contains("xdns_latency_seconds_count{path=\"user_auth\"} 1"), "{text}");
    }

    fn counters(t: &Telemetry) -> (crate::stats::Snapshot, [u64; 4]) {
        let mut s = crate::stats::Snapshot::default();
        t.snapshot(&mut s);
        let v = &s.groups["telemetry"].values;
        let c = [v["tx_software"], v["tx_hardware"], v["tx_read"], v["tx_lost"]];
        (s, c)
    }

    fn timed(path: usize, rx: u64, clock: RxClock) -> Timed {
        Timed { path, rx, clock, probe: None, limit: 512 }
    }

    #[test]
    fn transmit_stamps_matched_by_id_in_any_order() {
        let t = Telemetry::default();
        let mut w = TxStamps::default();
        let ids: Vec<u32> = (0..3).map(|_| w.next_id()).collect();
        assert_eq!(ids, [1, 2, 3]);
        // received at 1000, 2000, 3000; read before sending 100 ns later
        for (k, &id) in ids.iter().enumerate() {
            let rx = 1000 * (k as u64 + 1);
            w.sent(&t, id, timed(USER_AUTH, rx, RxClock::Software), rx + 100);
        }
        assert_eq!(w.waiting(), 3);
        // the second's stamp first; an ID nobody waits for is ignored
        assert!(w.stamp(&t, 2, 2000 + 5000, 0));
        assert!(!w.stamp(&t, 99, 1, 0));
        assert!(w.stamp(&t, 1, 1000 + 3000, 0));
        assert!(w.stamp(&t, 3, 3000 + 7000, 0));
        assert!(!w.stamp(&t, 3, 3000 + 7000, 0), "a stamp counts once");
        assert_eq!(w.waiting(), 0);
        let (s, c) = counters(&t);
        assert_eq!(c, [3, 0, 0, 0]);
        let h = &s.latency["user_auth"];
        // the stamps' times, not the send-time reads (100 ns)
        assert_eq!((h.count, h.sum_ns), (3, 15_000), "{h:?}");
        assert_eq!(s.groups["telemetry"].values["rx_software"], 3);
    }

    #[test]
    fn transmit_stamps_take_the_receive_clock() {
        let t = Telemetry::default();
        let mut w = TxStamps::default();
        // received on the NIC's clock: only the NIC's transmit stamp will do
        w.sent(&t, 1, timed(RESOLVER_HIT, 10_000, RxClock::Hardware), 50);
        assert!(!w.stamp(&t, 1, 99_999, 0), "a software stamp is on another clock");
        assert!(w.stamp(&t, 1, 99_999, 12_000));
        // received with no stamp (read time, CLOCK_REALTIME): the kernel's software stamp
        w.sent(&t, 2, timed(RESOLVER_HIT, 10_000, RxClock::Read), 10_100);
        assert!(!w.stamp(&t, 2, 0, 12_000), "a hardware stamp is on another clock");
        assert!(w.stamp(&t, 2, 13_000, 12_000));
        let (s, c) = counters(&t);
        assert_eq!(c, [1, 1, 0, 0]);
        assert_eq!(s.latency["resolver_hit"].sum_ns, 2000 + 3000);
    }

    #[test]
    fn lost_transmit_stamps_counted_not_waited_for() {
        let t = Telemetry::default();
        let mut w = TxStamps::default();
        let p = TxStamps::PATIENCE_NS;
        w.sent(&t, 1, timed(USER_AUTH, 1_000, RxClock::Software), 1_400);
        w.sent(&t, 2, timed(USER_AUTH, 2_000, RxClock::Software), 2_500);
        // not yet too old
        assert_eq!(w.expire(&t, 1_400 + p - 1), 0);
        assert_eq!(w.waiting(), 2);
        // the first's never came: lost, recorded with its send-time read (400 ns)
        assert_eq!(w.expire(&t, 1_400 + p), 1);
        assert_eq!(w.waiting(), 1);
        assert!(!w.stamp(&t, 1, 5_000, 0), "too late: already counted lost");
        assert!(w.stamp(&t, 2, 2_700, 0));
        let (s, c) = counters(&t);
        assert_eq!(c, [1, 0, 0, 1]);
        assert_eq!((s.latency["user_auth"].count, s.latency["user_auth"].sum_ns), (2, 400 + 700));
        // more than MAX_WAITING at once: the oldest are lost as new ones come
        for _ in 0..TxStamps::MAX_WAITING + 10 {
            let id = w.next_id();
            w.sent(&t, id, timed(USER_AUTH, 0, RxClock::Software), 1);
        }
        assert_eq!(w.waiting(), TxStamps::MAX_WAITING);
        assert_eq!(counters(&t).1, [1, 0, 0, 11]);
        // stamping turned off: every one still waiting is lost
        w.give_up(&t);
        assert_eq!(w.waiting(), 0);
        let (s, c) = counters(&t);
        assert_eq!(c, [1, 0, 0, 11 + TxStamps::MAX_WAITING as u64]);
        assert_eq!(s.latency["user_auth"].count, c.iter().sum::<u64>(), "every timed answer is in the histogram once");
    }

    #[test]
    fn transmit_stamp_ids_skip_zero() {
        let mut w = TxStamps { last: u32::MAX - 2, ..Default::default() };
        let t = Telemetry::default();
        // IDs across the wrap, one given to a send that failed (never waiting)
        let ids = [w.next_id(), w.next_id(), w.next_id(), w.next_id()];
        assert_eq!(ids, [u32::MAX - 1, u32::MAX, 1, 2]);
        for &id in &[ids[0], ids[2], ids[3]] {
            w.sent(&t, id, timed(USER_AUTH, 10, RxClock::Software), 20);
        }
        assert!(!w.stamp(&t, ids[1], 30, 0), "the failed send's ID waits for nothing");
        assert!(!w.stamp(&t, 0, 30, 0));
        assert!(w.stamp(&t, 2, 30, 0));
        assert!(w.stamp(&t, u32::MAX - 1, 30, 0));
        assert!(w.stamp(&t, 1, 30, 0));
        assert_eq!(w.waiting(), 0);
        assert_eq!(counters(&t).1, [3, 0, 0, 0]);
    }

    /// The kernel gets the rules that may select its answers, in order; userspace and
    /// upstream rules alone leave it none (its telemetry off).
    #[test]
    fn kernel_gets_only_rules_of_its_paths() {
        let parse = |v: &[&str]| v.iter().map(|r| Rule::parse(r).unwrap()).collect::<Vec<_>>();
        let shown = |v: Vec<Rule>| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
        let only_user = parse(&["path=user-auth", "src=198.18.0.0/15 path=resolver-hit,resolver-miss", "path=resolver-upstream"]);
        assert!(kernel_rules(&only_user).is_empty());
        let mixed = parse(&["path=user-auth", "qname=example.com", "src=198.18.0.0/15 path=kernel-cache", "path=kernel-auth,user-auth"]);
        assert_eq!(shown(kernel_rules(&mixed)), shown(parse(&["qname=example.com", "src=198.18.0.0/15 path=kernel-cache", "path=kernel-auth,user-auth"])));
    }

    #[test]
    fn udp_workers_stamp_only_for_rules_of_their_paths() {
        let t = Telemetry::default();
        assert!(!t.on(), "no rules");
        for only_elsewhere in ["path=kernel-auth", "path=kernel-cache", "path=resolver-upstream", "path=kernel-auth,resolver-upstream"] {
            t.set(vec![Rule::parse(only_elsewhere).unwrap()]);
            assert!(!t.on(), "`{only_elsewhere}` selects nothing the UDP workers send");
        }
        for theirs in ["all", "src=198.18.0.0/15", "path=user-auth", "path=resolver-hit", "path=kernel-auth,resolver-miss"] {
            t.set(vec![Rule::parse("path=kernel-auth").unwrap(), Rule::parse(theirs).unwrap()]);
            assert!(t.on(), "`{theirs}` may select a UDP worker's answer");
        }
        t.set(Vec::new());
        assert!(!t.on(), "rules removed");
    }

    #[test]
    fn upstream_queries_timed_when_a_rule_selects_them() {
        let t = Telemetry::default();
        let up = t.upstream();
        let q = query(&[]);
        let server: IpAddr = "198.18.0.9".parse().unwrap();
        assert!(!up.select(&q, server), "no rules: nothing timed");
        t.set(vec![Rule::parse("path=resolver-miss").unwrap()]);
        assert!(!up.select(&q, server), "a rule for other paths");
        t.set(vec![Rule::parse("path=resolver-upstream dst=198.18.0.0/24 qname=example.com").unwrap()]);
        assert!(up.select(&q, server));
        assert!(!up.select(&q, "198.18.1.9".parse().unwrap()), "dst is the server asked");
        t.set(vec![Rule::parse("src=198.18.0.0/15").unwrap()]);
        assert!(!up.select(&q, server), "src never matches an upstream query");
        t.set(vec![Rule::parse("all").unwrap()]);
        assert!(up.select(&q, server));
        up.record(2_000_000);
        let mut s = crate::stats::Snapshot::default();
        t.snapshot(&mut s);
        assert_eq!(s.latency["resolver_upstream"].count, 1);
        assert!(metrics_text(&s).contains("xdns_latency_seconds_count{path=\"resolver_upstream\"} 1"));
        assert!(table_rows(&s).iter().any(|(k, v)| k == "latency.resolver_upstream" && v.starts_with("n 1 ")));
    }
}
