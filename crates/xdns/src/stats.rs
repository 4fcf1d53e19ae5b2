//! Server counters: sharded atomics written without locks on the query path, summed on demand
//! into a [`Snapshot`] that `xdns stats` prints and `/metrics` exports.
//!
//! Each UDP worker thread owns a [`Shard`]; TCP shares one. A shard counts queries by transport,
//! answers by QTYPE (all 65,536 values) and by 12-bit RCODE, truncated answers and drops by
//! reason. Counters that change rarely (TCP connections, reloads) live in [`Stats`] itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use xdns_zone::{DropReason, Outcome, Transport};

/// Why a received message got no response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropKind {
    /// Not a parsable DNS query (from the engine), or a truncated datagram.
    Malformed = 0,
    /// QR=1: a response sent to us.
    Response = 1,
    /// The answer could not be sent (socket error).
    SendFailed = 2,
    /// The engine failed unexpectedly on this message (a bug; the server keeps running).
    Internal = 3,
    /// A TCP answer longer than 65,535 bytes cannot be framed.
    TooLarge = 4,
    /// From a blocked source, or for a blocked name (`[guard]`).
    Blocked = 5,
    /// Over the response rate limit and not slipped (`[guard] rrl`).
    RateLimited = 6,
}

impl DropKind {
    /// Every reason, in counter order.
    pub const ALL: [DropKind; 7] = [
        DropKind::Malformed,
        DropKind::Response,
        DropKind::SendFailed,
        DropKind::Internal,
        DropKind::TooLarge,
        DropKind::Blocked,
        DropKind::RateLimited,
    ];

    /// Stable name used in JSON and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            DropKind::Malformed => "malformed",
            DropKind::Response => "response",
            DropKind::SendFailed => "send_failed",
            DropKind::Internal => "internal",
            DropKind::TooLarge => "too_large",
            DropKind::Blocked => "blocked",
            DropKind::RateLimited => "rate_limited",
        }
    }
}

impl From<DropReason> for DropKind {
    fn from(r: DropReason) -> Self {
        match r {
            DropReason::Malformed => DropKind::Malformed,
            DropReason::Response => DropKind::Response,
        }
    }
}

const N_QTYPE: usize = 1 << 16;
const N_RCODE: usize = 1 << 12;

/// Counters written by one thread (or by the TCP tasks together).
pub struct Shard {
    queries: [AtomicU64; 2],
    truncated: AtomicU64,
    dropped: [AtomicU64; DropKind::ALL.len()],
    qtype: Box<[AtomicU64]>,
    rcode: Box<[AtomicU64]>,
}

fn zeroed(n: usize) -> Box<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

impl Shard {
    fn new() -> Self {
        Self {
            queries: Default::default(),
            truncated: AtomicU64::new(0),
            dropped: Default::default(),
            qtype: zeroed(2 * N_QTYPE),
            rcode: zeroed(N_RCODE),
        }
    }

    /// Count one received message and what became of it.
    #[inline]
    pub fn record(&self, transport: Transport, outcome: Outcome) {
        let t = match transport {
            Transport::Udp => 0,
            Transport::Tcp => 1,
        };
        self.queries[t].fetch_add(1, Relaxed);
        match outcome {
            Outcome::Answered {
                rcode,
                qtype,
                truncated,
            } => {
                if let Some(c) = self.qtype.get(t * N_QTYPE + usize::from(qtype)) {
                    c.fetch_add(1, Relaxed);
                }
                if let Some(c) = self.rcode.get(usize::from(rcode)) {
                    c.fetch_add(1, Relaxed);
                }
                if truncated {
                    self.truncated.fetch_add(1, Relaxed);
                }
            }
            Outcome::Dropped(r) => self.drop(r.into()),
        }
    }

    /// Count one dropped message (or answer that could not be sent).
    #[inline]
    pub fn drop(&self, reason: DropKind) {
        self.dropped[reason as usize].fetch_add(1, Relaxed);
    }

    /// Count a message that failed before the engine saw it (it still counts as a query).
    #[inline]
    pub fn record_dropped(&self, transport: Transport, reason: DropKind) {
        let t = usize::from(transport == Transport::Tcp);
        self.queries[t].fetch_add(1, Relaxed);
        self.drop(reason);
    }
}

/// All counters of the server.
pub struct Stats {
    started: Instant,
    shards: Mutex<Vec<Arc<Shard>>>,
    /// TCP connections accepted.
    pub tcp_accepted: AtomicU64,
    /// TCP connections closed at once because `max_connections` were open.
    pub tcp_refused: AtomicU64,
    /// TCP connections closed by the idle timeout.
    pub tcp_idle_closed: AtomicU64,
    /// TCP connections open now.
    pub tcp_open: AtomicU64,
    /// Reloads attempted (SIGHUP or control socket).
    pub reloads: AtomicU64,
    /// Reloads with at least one error (configuration or zone).
    pub reload_failures: AtomicU64,
    /// Zones successfully loaded by reloads.
    pub zone_loads: AtomicU64,
    /// Zones that failed to load on reload (the old version kept serving).
    pub zone_load_failures: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    /// Fresh counters; uptime starts now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            shards: Mutex::new(Vec::new()),
            tcp_accepted: AtomicU64::new(0),
            tcp_refused: AtomicU64::new(0),
            tcp_idle_closed: AtomicU64::new(0),
            tcp_open: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            zone_loads: AtomicU64::new(0),
            zone_load_failures: AtomicU64::new(0),
        }
    }

    /// A new shard for one writer; it stays counted after the writer ends.
    pub fn shard(&self) -> Arc<Shard> {
        let s = Arc::new(Shard::new());
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(s.clone());
        s
    }

    /// Sum every shard. `zones` and `xdp` are filled in by the caller.
    pub fn snapshot(&self) -> Snapshot {
        let shards = self
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut snap = Snapshot {
            uptime_seconds: self.started.elapsed().as_secs(),
            ..Default::default()
        };
        let mut qtype = vec![0u64; 2 * N_QTYPE];
        let mut rcode = vec![0u64; N_RCODE];
        let mut dropped = [0u64; DropKind::ALL.len()];
        let (mut udp, mut tcp) = (0, 0);
        for s in &shards {
            udp += s.queries[0].load(Relaxed);
            tcp += s.queries[1].load(Relaxed);
            snap.truncated += s.truncated.load(Relaxed);
            for (d, c) in dropped.iter_mut().zip(s.dropped.iter()) {
                *d += c.load(Relaxed);
            }
            for (d, c) in qtype.iter_mut().zip(s.qtype.iter()) {
                *d += c.load(Relaxed);
            }
            for (d, c) in rcode.iter_mut().zip(s.rcode.iter()) {
                *d += c.load(Relaxed);
            }
        }
        snap.queries.insert("udp".into(), udp);
        snap.queries.insert("tcp".into(), tcp);
        for (i, &n) in qtype.iter().enumerate() {
            if n > 0 {
                let name = qtype_name((i % N_QTYPE) as u16);
                let proto = if i < N_QTYPE { "udp" } else { "tcp" };
                *snap.qtypes.entry(name.clone()).or_insert(0) += n;
                *snap
                    .qtypes_by_proto
                    .entry(proto.into())
                    .or_default()
                    .entry(name)
                    .or_insert(0) += n;
            }
        }
        for (r, &n) in rcode.iter().enumerate() {
            if n > 0 {
                snap.rcodes.insert(rcode_name(r as u16), n);
            }
        }
        for (d, n) in DropKind::ALL.iter().zip(dropped) {
            snap.dropped.insert(d.name().into(), n);
        }
        snap.tcp = TcpSnapshot {
            accepted: self.tcp_accepted.load(Relaxed),
            refused: self.tcp_refused.load(Relaxed),
            idle_closed: self.tcp_idle_closed.load(Relaxed),
            open: self.tcp_open.load(Relaxed),
        };
        snap.reloads = ReloadSnapshot {
            total: self.reloads.load(Relaxed),
            failed: self.reload_failures.load(Relaxed),
            zones_loaded: self.zone_loads.load(Relaxed),
            zones_failed: self.zone_load_failures.load(Relaxed),
        };
        snap
    }
}

/// Mnemonic of a QTYPE (`A`, `AAAA`, …, `TYPE65400` when unassigned).
pub fn qtype_name(t: u16) -> String {
    domain::base::iana::Rtype::from_int(t).to_string()
}

/// Mnemonic of a 12-bit RCODE (`NOERROR`, …, `BADVERS`, else `RCODE<n>`).
pub fn rcode_name(r: u16) -> String {
    let s = match r {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        6 => "YXDOMAIN",
        7 => "YXRRSET",
        8 => "NXRRSET",
        9 => "NOTAUTH",
        10 => "NOTZONE",
        11 => "DSOTYPENI",
        16 => "BADVERS",
        23 => "BADCOOKIE",
        _ => return format!("RCODE{r}"),
    };
    s.to_string()
}

/// TCP connection counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpSnapshot {
    /// Connections accepted and served.
    pub accepted: u64,
    /// Connections closed at once (over `max_connections`).
    pub refused: u64,
    /// Connections closed by the idle timeout.
    pub idle_closed: u64,
    /// Connections open now.
    pub open: u64,
}

/// Reload counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReloadSnapshot {
    /// Reloads attempted.
    pub total: u64,
    /// Reloads with at least one error.
    pub failed: u64,
    /// Zones loaded by reloads.
    pub zones_loaded: u64,
    /// Zones that failed on reload (old version kept).
    pub zones_failed: u64,
}

/// One served zone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneInfo {
    /// Apex in presentation form.
    pub name: String,
    /// SOA serial.
    pub serial: u32,
    /// Number of records.
    pub records: u64,
    /// For a secondary zone (`primaries`): where its data comes from and how transfers go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<TransferInfo>,
}

/// The transfer state of a secondary zone. Times are Unix seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransferInfo {
    /// The configured primaries, in the order they are tried.
    pub primaries: Vec<String>,
    /// Serial of the version served (none before the first transfer or stored copy).
    pub serial: Option<u32>,
    /// Where the version served came from: `none`, `file PATH` (the stored copy read at
    /// start), `axfr from ADDR` or `ixfr from ADDR`.
    pub source: String,
    /// Last successful check with a primary (a transfer, or "up to date").
    pub last_refresh: Option<u64>,
    /// Kind of the last transfer: `axfr` or `ixfr`.
    pub last_transfer: Option<String>,
    /// How long it took, from the request to serving the new version (userspace and XDP).
    pub last_transfer_ms: Option<u64>,
    /// When it completed.
    pub last_transfer_at: Option<u64>,
    /// When the primary is checked next (sooner on NOTIFY).
    pub next_refresh: Option<u64>,
    /// When the zone expires without a successful check.
    pub expires: Option<u64>,
    /// Past its expire time: answered SERVFAIL.
    pub expired: bool,
    /// Transfers done since start.
    pub transfers: u64,
    /// Failed checks since start (every primary failed).
    pub failures: u64,
    /// NOTIFY messages refused (not from a primary, unsigned or badly signed).
    pub notifies_refused: u64,
    /// The errors of the last failed check, until a check succeeds.
    pub last_error: Option<String>,
    /// How the kernel (XDP) took the last transfer: `in place: …` (an IXFR's entries
    /// updated in the active generation) or `full: REASON` (a new generation written).
    pub last_kernel_update: Option<String>,
    /// Transfers the kernel took in place, and as a full new generation.
    pub kernel_in_place: u64,
    pub kernel_full: u64,
    /// How userspace applied the last IXFR: `in place: N names[; copied whole: WHY][;
    /// validated whole: WHY]` (the differences applied to the zone, checked where they
    /// touched) or `full: REASON` (the zone built and validated whole).
    pub last_apply: Option<String>,
    /// IXFRs applied in place, built whole, and refused (the new version did not validate).
    pub apply_in_place: u64,
    pub apply_full: u64,
    pub apply_refused: u64,
}

/// The counters (or gauges) of one part of the server, exported the same way everywhere:
/// rows `GROUP.KEY` in `xdns stats`, the object `"GROUP": {"KEY": n}` in its JSON, and the
/// metric family `xdns_GROUP{LABEL="KEY"}` on `/metrics` (`_total` for counters). A part adds
/// its counters by inserting a group into [`Snapshot::groups`]; nothing else changes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "BTreeMap<String, u64>", into = "BTreeMap<String, u64>")]
pub struct Group {
    pub values: BTreeMap<String, u64>,
    /// How `/metrics` shows it; known to the server only (the JSON holds the values).
    pub meta: GroupMeta,
}

/// How `/metrics` shows a [`Group`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupMeta {
    /// The metric's help text.
    pub help: &'static str,
    /// The label that holds the key (`counter`, `interface`, ...).
    pub label: &'static str,
    /// A gauge (a level) rather than a counter (a total).
    pub gauge: bool,
}

impl Group {
    /// Counters labelled `label`.
    pub fn counters(help: &'static str, label: &'static str, values: impl IntoIterator<Item = (String, u64)>) -> Self {
        Self { values: values.into_iter().collect(), meta: GroupMeta { help, label, gauge: false } }
    }
}

/// Groups compare by their values: the metric metadata does not travel in the JSON.
impl PartialEq for Group {
    fn eq(&self, other: &Self) -> bool {
        self.values == other.values
    }
}

impl Eq for Group {}

impl From<BTreeMap<String, u64>> for Group {
    fn from(values: BTreeMap<String, u64>) -> Self {
        Self { values, meta: GroupMeta::default() }
    }
}

impl From<Group> for BTreeMap<String, u64> {
    fn from(g: Group) -> Self {
        g.values
    }
}

/// Everything `xdns stats --json` prints: a stable JSON object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Seconds since the server started.
    pub uptime_seconds: u64,
    /// Messages received, by transport: `{"udp": n, "tcp": n}`.
    pub queries: BTreeMap<String, u64>,
    /// Answers by QTYPE mnemonic.
    pub qtypes: BTreeMap<String, u64>,
    /// Answers by transport, then QTYPE mnemonic: `{"udp": {"A": n}, "tcp": {}}`.
    pub qtypes_by_proto: BTreeMap<String, BTreeMap<String, u64>>,
    /// Answers by RCODE mnemonic.
    pub rcodes: BTreeMap<String, u64>,
    /// UDP answers sent with TC=1.
    pub truncated: u64,
    /// Messages not answered, by reason (every reason always present).
    pub dropped: BTreeMap<String, u64>,
    /// TCP connection counters.
    pub tcp: TcpSnapshot,
    /// Reload counters.
    pub reloads: ReloadSnapshot,
    /// Zones served now.
    pub zones: Vec<ZoneInfo>,
    /// XDP fast path counters (empty when XDP is off).
    pub xdp: BTreeMap<String, u64>,
    /// The XDP answer table (empty when XDP is off): `answers_in_table`, and
    /// `answers_left_out`, answers found only through the slower hash map (no room in the
    /// table; a restart sizes it for the zones of the day).
    #[serde(default)]
    pub xdp_table: BTreeMap<String, u64>,
    /// With XDP on: whether zone data is in the kernel maps. A fresh start attaches the
    /// program first and fills the maps while userspace answers; until then (or after that
    /// fill failed, until a reload succeeds) the program passes every query
    /// (`xdp.pass_not_loaded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_data_active: Option<bool>,
    /// With XDP on: each configured interface and how it runs the program, asked of the
    /// kernel at the call: `native`, `generic` (the skb path: much slower; what `mode =
    /// "auto"` falls back to without driver support), `offload`, or `none` (not this
    /// process's program).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub xdp_attached: BTreeMap<String, String>,
    /// With XDP on: why an interface runs in another mode than the configured one
    /// (`"veth peer c0 has no XDP program: generic"`); interfaces running as configured (or
    /// as the kernel chose for `auto`) are absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub xdp_mode_reason: BTreeMap<String, String>,
    /// The counter groups of the parts that run ([`Group`]), by name, each a top-level
    /// object of the JSON: `xdp_memo` and `xdp_reply` (the question and reply memos),
    /// `xdp_tx_errors` and `xdp_fallbacks` (per interface) with XDP on; `resolver` with
    /// `[resolver]`. Documented in crates/xdns/README.md.
    #[serde(flatten)]
    pub groups: BTreeMap<String, Group>,
    /// While the server starts (`crate::progress`): the phase it is in (`loading zones`,
    /// `compiling answers for the kernel`, `loading the XDP program`, `starting`); absent
    /// once it serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting: Option<String>,
    /// Server time of timed answers by path (`[telemetry]`, `crate::telemetry`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub latency: BTreeMap<String, crate::telemetry::Latency>,
}

impl Snapshot {
    /// The human-readable table printed by `xdns stats`.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let mut row = |k: &str, v: &dyn std::fmt::Display| {
            let _ = writeln!(s, "{k:<32} {v}");
        };
        row("uptime_seconds", &self.uptime_seconds);
        if let Some(p) = &self.starting {
            row("starting", p);
        }
        for (k, v) in &self.queries {
            row(&format!("queries.{k}"), v);
        }
        for (k, v) in &self.qtypes {
            row(&format!("qtype.{k}"), v);
        }
        for (k, v) in &self.rcodes {
            row(&format!("rcode.{k}"), v);
        }
        row("truncated", &self.truncated);
        for (k, v) in &self.dropped {
            row(&format!("dropped.{k}"), v);
        }
        row("tcp.accepted", &self.tcp.accepted);
        row("tcp.refused", &self.tcp.refused);
        row("tcp.idle_closed", &self.tcp.idle_closed);
        row("tcp.open", &self.tcp.open);
        row("reloads.total", &self.reloads.total);
        row("reloads.failed", &self.reloads.failed);
        row("reloads.zones_loaded", &self.reloads.zones_loaded);
        row("reloads.zones_failed", &self.reloads.zones_failed);
        for z in &self.zones {
            row(
                &format!("zone.{}", z.name),
                &format!("serial {} records {}", z.serial, z.records),
            );
            if let Some(t) = &z.transfer {
                let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
                let n = &z.name;
                row(&format!("zone.{n}.source"), &t.source);
                row(&format!("zone.{n}.primaries"), &t.primaries.join(" "));
                row(&format!("zone.{n}.last_refresh"), &opt(t.last_refresh));
                row(
                    &format!("zone.{n}.last_transfer"),
                    &format!("{} {} ms at {}", t.last_transfer.as_deref().unwrap_or("-"), opt(t.last_transfer_ms), opt(t.last_transfer_at)),
                );
                row(&format!("zone.{n}.next_refresh"), &opt(t.next_refresh));
                row(&format!("zone.{n}.expires"), &opt(t.expires));
                row(&format!("zone.{n}.expired"), &u8::from(t.expired));
                row(&format!("zone.{n}.transfers"), &t.transfers);
                row(&format!("zone.{n}.failures"), &t.failures);
                row(&format!("zone.{n}.notifies_refused"), &t.notifies_refused);
                if let Some(k) = &t.last_kernel_update {
                    row(&format!("zone.{n}.kernel_update"), k);
                    row(&format!("zone.{n}.kernel_updates"), &format!("in_place {} full {}", t.kernel_in_place, t.kernel_full));
                }
                if let Some(a) = &t.last_apply {
                    row(&format!("zone.{n}.ixfr_apply"), a);
                    row(
                        &format!("zone.{n}.ixfr_applies"),
                        &format!("in_place {} full {} refused {}", t.apply_in_place, t.apply_full, t.apply_refused),
                    );
                }
                if let Some(e) = &t.last_error {
                    row(&format!("zone.{n}.last_error"), e);
                }
            }
        }
        for (k, v) in &self.xdp {
            row(&format!("xdp.{k}"), v);
        }
        for (k, v) in &self.xdp_table {
            row(&format!("xdp_table.{k}"), v);
        }
        if let Some(active) = self.xdp_data_active {
            row("xdp_data.active", &u8::from(active));
        }
        for (k, v) in &self.xdp_attached {
            row(&format!("xdp_attached.{k}"), v);
        }
        for (k, v) in &self.xdp_mode_reason {
            row(&format!("xdp_mode_reason.{k}"), v);
        }
        for (name, g) in &self.groups {
            for (k, v) in &g.values {
                row(&format!("{name}.{k}"), v);
            }
        }
        for (k, v) in crate::telemetry::table_rows(self) {
            row(&k, &v);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let q = [
            (1, "A"),
            (28, "AAAA"),
            (255, "ANY"),
            (65400, "TYPE65400"),
            (0, "TYPE0"),
        ];
        for (t, n) in q {
            assert_eq!(qtype_name(t), n);
        }
        let r = [
            (0, "NOERROR"),
            (3, "NXDOMAIN"),
            (5, "REFUSED"),
            (16, "BADVERS"),
            (12, "RCODE12"),
        ];
        for (c, n) in r {
            assert_eq!(rcode_name(c), n);
        }
    }

    #[test]
    fn shards_sum() {
        let stats = Stats::new();
        let a = stats.shard();
        let b = stats.shard();
        a.record(
            Transport::Udp,
            Outcome::Answered {
                rcode: 0,
                qtype: 1,
                truncated: false,
            },
        );
        a.record(
            Transport::Udp,
            Outcome::Answered {
                rcode: 3,
                qtype: 28,
                truncated: true,
            },
        );
        b.record(
            Transport::Tcp,
            Outcome::Answered {
                rcode: 16,
                qtype: 1,
                truncated: false,
            },
        );
        b.record(Transport::Udp, Outcome::Dropped(DropReason::Response));
        b.record_dropped(Transport::Udp, DropKind::Malformed);
        b.record(
            Transport::Udp,
            Outcome::Answered {
                rcode: 4095,
                qtype: 65535,
                truncated: false,
            },
        );
        stats.tcp_accepted.fetch_add(2, Relaxed);
        let s = stats.snapshot();
        assert_eq!(s.queries["udp"], 5);
        assert_eq!(s.queries["tcp"], 1);
        assert_eq!(s.qtypes["A"], 2);
        assert_eq!(s.qtypes["AAAA"], 1);
        assert_eq!(s.qtypes["TYPE65535"], 1);
        assert_eq!(s.qtypes_by_proto["udp"]["A"], 1);
        assert_eq!(s.qtypes_by_proto["tcp"]["A"], 1);
        assert_eq!(s.rcodes["NOERROR"], 1);
        assert_eq!(s.rcodes["NXDOMAIN"], 1);
        assert_eq!(s.rcodes["BADVERS"], 1);
        assert_eq!(s.rcodes["RCODE4095"], 1);
        assert_eq!(s.truncated, 1);
        assert_eq!(s.dropped["response"], 1);
        assert_eq!(s.dropped["malformed"], 1);
        assert_eq!(s.dropped["send_failed"], 0);
        assert_eq!(s.dropped.len(), DropKind::ALL.len());
        assert_eq!(s.tcp.accepted, 2);
    }

    #[test]
    fn json_round_trip_and_table() {
        let stats = Stats::new();
        stats.shard().record(
            Transport::Udp,
            Outcome::Answered {
                rcode: 0,
                qtype: 1,
                truncated: false,
            },
        );
        let mut s = stats.snapshot();
        s.zones.push(ZoneInfo {
            name: "example.com.".into(),
            serial: 7,
            records: 3,
            ..Default::default()
        });
        let json = serde_json::to_string(&s).unwrap();
        let back: Snapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        for key in [
            "uptime_seconds",
            "queries",
            "qtypes",
            "qtypes_by_proto",
            "rcodes",
            "truncated",
            "dropped",
            "tcp",
            "reloads",
            "zones",
            "xdp",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        let t = s.to_table();
        assert!(t.contains("qtype.A"), "{t}");
        assert!(
            t.contains("zone.example.com.") && t.contains("serial 7"),
            "{t}"
        );
    }
}
