//! Latency telemetry (issue 27, stage 5): which answers are timed, the userspace paths'
//! histograms, the in-band probe option in userspace answers, and the rules pushed to the
//! kernel (`xdns_bpf::telemetry`, `bpf/telemetry.h`).
//!
//! Rules come from `[telemetry] rules` and from `xdns telemetry add|del|list` on the control
//! socket (a reload sets the file's rules again). The same rules select kernel answers (the
//! XDP program reads them from its map, replaced whole while traffic flows) and userspace
//! answers ([`Telemetry::select`]); with none, nothing is timed and no clock is read.
//!
//! In-band probes: a query whose OPT record carries option [`OPTION`] (65050, local use),
//! empty or 16 bytes, and whose answer is selected, gets the option back in its answer's OPT
//! with 16 bytes: the server's receive and transmit ns, u64 big-endian. Only their
//! difference means something (the kernel uses its monotonic clock, userspace the socket's
//! receive timestamp and `CLOCK_REALTIME`).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use serde::{Deserialize, Serialize};
pub use xdns_bpf::telemetry::{Histogram, Rule, MAX_RULES, OPTION, PATHS, PROBE_LEN, RESOLVER_HIT, RESOLVER_MISS, USER_AUTH};
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

/// The server's telemetry state (in `Shared`).
pub struct Telemetry {
    rules: ArcSwap<Vec<Rule>>,
    seen: [AtomicU64; MAX_RULES],
    /// user_auth, resolver_hit, resolver_miss
    hists: [AtomicHist; 3],
    probes: AtomicU64,
    probe_bad: AtomicU64,
    probe_room: AtomicU64,
    rx_hw: AtomicU64,
    rx_sw: AtomicU64,
    rx_clock: AtomicU64,
    /// The kernel's maps, with XDP on.
    kernel: ArcSwapOption<TelemetryMaps>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self {
            rules: ArcSwap::from_pointee(Vec::new()),
            seen: Default::default(),
            hists: [AtomicHist::new(), AtomicHist::new(), AtomicHist::new()],
            probes: AtomicU64::new(0),
            probe_bad: AtomicU64::new(0),
            probe_room: AtomicU64::new(0),
            rx_hw: AtomicU64::new(0),
            rx_sw: AtomicU64::new(0),
            rx_clock: AtomicU64::new(0),
            kernel: ArcSwapOption::empty(),
        }
    }
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
    /// Are any rules set? (One atomic load: the cost of telemetry off per datagram.)
    pub fn on(&self) -> bool {
        !self.rules.load().is_empty()
    }

    /// Use the kernel's maps from now on, and give them the rules.
    pub fn attach_kernel(&self, maps: Option<TelemetryMaps>) {
        self.kernel.store(maps.map(Arc::new));
        self.push();
    }

    fn push(&self) {
        if let Some(k) = self.kernel.load_full() {
            if let Err(e) = k.set_rules(&self.rules.load()) {
                tracing::error!("XDP telemetry rules not replaced: {e:#}");
            }
        }
    }

    /// Replace the rules (the configuration's, at start and reload).
    pub fn set(&self, rules: Vec<Rule>) {
        self.rules.store(Arc::new(rules));
        self.push();
    }

    /// `telemetry list | add RULE | del N | del all`: the control socket's reply line.
    pub fn command(&self, cmd: &str) -> String {
        let rest = cmd.trim().strip_prefix("telemetry").unwrap_or("").trim();
        let (verb, arg) = rest.split_once(' ').map_or((rest, ""), |(v, a)| (v, a.trim()));
        let cur = self.rules.load_full();
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
        let rules = self.rules.load();
        for (i, r) in rules.iter().enumerate() {
            if r.matches(path, client, server, qname, qtype) {
                return r.sample <= 1 || self.seen[i].fetch_add(1, Ordering::Relaxed).is_multiple_of(u64::from(r.sample));
            }
        }
        false
    }

    /// Count one timed userspace answer of `path` (USER_AUTH, RESOLVER_HIT, RESOLVER_MISS).
    pub fn record(&self, path: usize, ns: u64, clock: RxClock) {
        if let Some(h) = path.checked_sub(USER_AUTH).and_then(|i| self.hists.get(i)) {
            h.record(ns);
        }
        match clock {
            RxClock::Hardware => &self.rx_hw,
            RxClock::Software => &self.rx_sw,
            RxClock::Read => &self.rx_clock,
        }
        .fetch_add(1, Ordering::Relaxed);
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
            ("rules", self.rules.load().len() as u64),
            ("probes", self.probes.load(Ordering::Relaxed)),
            ("probe_bad", self.probe_bad.load(Ordering::Relaxed)),
            ("probe_room", self.probe_room.load(Ordering::Relaxed)),
            ("rx_hardware", self.rx_hw.load(Ordering::Relaxed)),
            ("rx_software", self.rx_sw.load(Ordering::Relaxed)),
            ("rx_read", self.rx_clock.load(Ordering::Relaxed)),
            ("rx_xdp_ktime", 0),
        ];
        if let Some(k) = self.kernel.load_full() {
            if let Ok(kh) = k.histograms() {
                for (i, h) in kh.iter().enumerate() {
                    hists[i] = h.hist.clone();
                    c[1].1 += h.probes;
                    c[2].1 += h.probe_bad;
                    c[3].1 += h.probe_room;
                    c[7].1 += h.rx_ktime;
                }
            }
        }
        hists.extend(self.hists.iter().map(AtomicHist::read));
        for (i, h) in hists.iter().enumerate() {
            s.latency.insert(PATHS[i].to_string(), Latency::of(h));
        }
        s.groups.insert(
            "telemetry".into(),
            crate::stats::Group::counters("Telemetry: rules set, in-band probes (written, bad option, no room), receive clocks of timed answers.", "counter", c.iter().map(|(k, v)| (k.to_string(), *v))),
        );
    }
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

    /// The answer is about to be sent: its transmit time, the probe option, the histogram.
    pub fn finish(&self, t: Timed, answer: &mut Vec<u8>) {
        let tx = realtime_ns();
        match t.probe {
            Some(0) | Some(PROBE_LEN) => self.probe_outcome(write_probe(answer, t.rx, tx, t.limit)),
            Some(_) => self.probe_outcome(ProbeWrite::Bad),
            None => {}
        }
        self.record(t.path, tx.saturating_sub(t.rx), t.clock);
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
        t.record(USER_AUTH, 1500, RxClock::Software);
        let mut s = crate::stats::Snapshot::default();
        t.snapshot(&mut s);
        assert_eq!(s.latency["user_auth"].count, 1);
        assert!((1450..1550).contains(&s.latency["user_auth"].p50_ns));
        assert_eq!(s.groups["telemetry"].values["rx_software"], 1);
        let text = metrics_text(&s);
        assert!(text.contains("xdns_latency_seconds_count{path=\"user_auth\"} 1"), "{text}");
    }
}
