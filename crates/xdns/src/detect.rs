//! The detection loop (`[guard] detect = true`): each interval the kernel's features become
//! blocks, and the rate monitor lifts them.
//!
//! One thread (`xdns-detect`), every `detect_interval_ms`:
//! 1. **Snapshot.** Flip the kernel's feature interval and read the one that ended
//!    (`xdns_bpf::guard::Guard::flip_interval`: no count of either interval lands in the
//!    other). Sources are counted per IPv4 /24 and IPv6 /56; queries per parent suffix and per
//!    whole name with its parent.
//! 2. **Detect.** `xdns_guard::detect::Detector` (thresholds learned from quiet intervals,
//!    entropy, water torture, amplification). For water torture the daemon tells it, per
//!    suffix, how many whole names under it were asked (distinct labels) and how many of
//!    those queries were for names the served zones do not have (counted as NXDOMAIN; a
//!    suffix with a wildcard child is never counted so), and declares the zone's labels
//!    under the suffix as known (a suffix with more labels than the detector keeps,
//!    `DetectConfig::max_known_labels`, is never blocked for unknown labels).
//! 3. **Block.** A source finding becomes a live block (origin `detected`, its reason and
//!    rate) added to the kernel's active list generation with one map update
//!    (`Guard::add_block`; a whole generation only when the active one cannot take it). A
//!    suffix finding becomes a `*.suffix` name block with an exception for each known label
//!    (exact and below), so that names the zones have keep answering. Sources the allowlist
//!    overlaps are never blocked, nor those the blocklist file already drops.
//! 4. **Monitor.** Each blocked entry's rate is what the kernel dropped for it in the
//!    interval (its list entry, plus its hardware-tier slot); the monitor lifts detected
//!    entries calm for `detect_unblock_after` intervals (lowest rate first) and every entry
//!    whose expiry passed (`detect_block_for`, or a manual block's `--for`).
//! 5. **Top-K offload** (`offload_slots = K`): `xdns_guard::topk` moves the K heaviest
//!    blocked sources into the hardware tier: `ethtool` n-tuple drop rules when the
//!    interface has them (`ethtool -k`: `ntuple-filters`), else the modelled K-slot table
//!    the XDP program checks first (a model of a NIC table, at most 16 slots).
//!
//! Everything shows in `xdns guard list` (target, origin, reason, rate, age, tier) and in the
//! `detect` counter group of `xdns stats` and `/metrics`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xdns_guard::detect::{Action, DetectConfig, Detector, LabelStat, SourceStat, SuffixStat};
use xdns_guard::lists::{NameEntry, NameMatch, Prefix};
use xdns_guard::monitor::{Blocked, MonitorConfig, Origin, Target, Thresholds};
use xdns_guard::topk::{Candidate, HardwareTier, TopK, TopKConfig};
use xdns_zone::ZoneSet;

use crate::guard::DetectSettings;
use crate::server::Shared;
use crate::stats::{Group, Snapshot};

/// What the loop did, for `xdns stats` (`detect.*`).
#[derive(Default)]
pub struct DetectCounters {
    intervals: AtomicU64,
    blocked_sources: AtomicU64,
    blocked_suffixes: AtomicU64,
    unblocked: AtomicU64,
    alarms: AtomicU64,
    refused_full: AtomicU64,
    whole_generations: AtomicU64,
    tier_installs: AtomicU64,
    tier_removals: AtomicU64,
    tier_errors: AtomicU64,
    threshold_pps: AtomicU64,
    last_interval_us: AtomicU64,
    tier_slots: AtomicU64,
    tier_modelled: AtomicU64,
}

impl DetectCounters {
    /// The `detect` group.
    pub fn snapshot(&self, s: &mut Snapshot) {
        let v = |a: &AtomicU64| a.load(Relaxed);
        let values = [
            ("intervals", v(&self.intervals)),
            ("blocked_sources", v(&self.blocked_sources)),
            ("blocked_suffixes", v(&self.blocked_suffixes)),
            ("unblocked", v(&self.unblocked)),
            ("alarms", v(&self.alarms)),
            ("refused_full", v(&self.refused_full)),
            ("whole_generations", v(&self.whole_generations)),
            ("tier_installs", v(&self.tier_installs)),
            ("tier_removals", v(&self.tier_removals)),
            ("tier_errors", v(&self.tier_errors)),
            ("threshold_pps", v(&self.threshold_pps)),
            ("last_interval_us", v(&self.last_interval_us)),
            ("tier_slots", v(&self.tier_slots)),
            ("tier_modelled", v(&self.tier_modelled)),
        ]
        .map(|(k, n)| (k.to_string(), n));
        s.groups.insert(
            "detect".into(),
            Group::counters(
                "The detection loop: intervals read, blocks made and lifted, alarms, the per-source threshold in force (packets/s), the hardware tier (tier_modelled = 1: the modelled XDP table, a model of a NIC).",
                "counter",
                values,
            ),
        );
    }
}

/// The names the served zones have, as the detector needs them: which suffix a hash stands
/// for (parents of some name), and, per suffix asked about, its children.
struct ZoneIndex {
    zones: Arc<ZoneSet>,
    parents: HashMap<u64, Vec<u8>>,
    children: HashMap<Vec<u8>, Arc<Children>>,
}

/// The names directly under a suffix in the zones.
struct Children {
    hashes: HashSet<u64>,
    labels: Vec<Vec<u8>>,
    wildcard: bool,
}

/// The parent of a wire name (`None` for the root).
fn parent(name: &[u8]) -> Option<&[u8]> {
    let len = usize::from(*name.first()?);
    (len > 0).then(|| name.get(1 + len..)).flatten()
}

impl ZoneIndex {
    fn new(zones: Arc<ZoneSet>, hash: &dyn Fn(&[u8]) -> u64) -> Self {
        let mut parents = HashMap::new();
        for z in zones.zones.values() {
            parents.insert(hash(&z.apex), z.apex.to_vec());
            for n in z.nodes.keys() {
                if let Some(p) = parent(n) {
                    if p.len() >= z.apex.len() && !parents.contains_key(&hash(p)) {
                        parents.insert(hash(p), p.to_vec());
                    }
                }
            }
        }
        Self { zones, parents, children: HashMap::new() }
    }

    fn children(&mut self, sfx: &[u8], hash: &dyn Fn(&[u8]) -> u64) -> Arc<Children> {
        if let Some(c) = self.children.get(sfx) {
            return c.clone();
        }
        let mut c = Children { hashes: HashSet::new(), labels: Vec::new(), wildcard: false };
        if let Some(z) = self.zones.find(sfx) {
            for n in z.nodes.keys() {
                if parent(n) == Some(sfx) {
                    let label = n[1..1 + usize::from(n[0])].to_vec();
                    c.wildcard |= label == b"*";
                    c.hashes.insert(hash(n));
                    c.labels.push(label);
                }
            }
        }
        let c = Arc::new(c);
        self.children.insert(sfx.to_vec(), c.clone());
        c
    }
}

/// The hardware tier in use.
enum Tier {
    Modelled(xdns_bpf::guard::ModelledTier),
    Ethtool(EthtoolRunner),
}

impl Tier {
    fn as_dyn(&mut self) -> &mut dyn HardwareTier {
        match self {
            Tier::Modelled(t) => t,
            Tier::Ethtool(t) => t,
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Tier::Modelled(_) => "hardware (modelled: XDP K-slot table)",
            Tier::Ethtool(_) => "hardware (ethtool n-tuple)",
        }
    }
}

/// Whether `ethtool -k` output says the interface has n-tuple filters: `Some(true)` on,
/// `Some(false)` off but switchable (`ethtool -K IFACE ntuple on`), `None` fixed off or absent.
pub fn ntuple_support(features: &str) -> Option<bool> {
    let line = features.lines().find(|l| l.trim_start().starts_with("ntuple-filters:"))?;
    let v = line.split_once(':')?.1.trim();
    if v.contains("[fixed]") {
        return None;
    }
    Some(v.starts_with("on"))
}

/// The `ethtool` backend: the rules `xdns_guard::topk::EthtoolTier` renders, run.
struct EthtoolRunner {
    tier: xdns_guard::topk::EthtoolTier,
}

impl EthtoolRunner {
    /// The backend on `iface` if its NIC takes n-tuple rules (switched on if off).
    fn probe(iface: &str, k: usize) -> Option<Self> {
        let out = std::process::Command::new("ethtool").arg("-k").arg(iface).output().ok()?;
        match ntuple_support(&String::from_utf8_lossy(&out.stdout))? {
            true => {}
            false => {
                let on = std::process::Command::new("ethtool").args(["-K", iface, "ntuple", "on"]).status().ok()?;
                if !on.success() {
                    return None;
                }
            }
        }
        Some(Self { tier: xdns_guard::topk::EthtoolTier::new(iface, 0, k).ok()? })
    }

    fn run(&mut self) -> Result<(), xdns_guard::topk::TierError> {
        for argv in self.tier.take_commands() {
            let out = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .output()
                .map_err(|e| xdns_guard::topk::TierError::Unsupported(format!("{}: {e}", argv.join(" "))))?;
            if !out.status.success() {
                return Err(xdns_guard::topk::TierError::Unsupported(format!(
                    "{}: {}",
                    argv.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        Ok(())
    }
}

impl HardwareTier for EthtoolRunner {
    fn capacity(&self) -> usize {
        self.tier.capacity()
    }
    fn install(&mut self, e: &xdns_guard::topk::TierEntry) -> Result<(), xdns_guard::topk::TierError> {
        self.tier.install(e)?;
        self.run().inspect_err(|_| {
            let _ = self.tier.remove(e);
            self.tier.take_commands();
        })
    }
    fn remove(&mut self, e: &xdns_guard::topk::TierEntry) -> Result<(), xdns_guard::topk::TierError> {
        self.tier.remove(e)?;
        self.run()
    }
    fn counters(&self) -> Vec<xdns_guard::topk::SlotCounter> {
        // per-rule counters are driver statistics few drivers give: none here (packets: None)
        self.tier.counters()
    }
}

/// Start the loop on its own thread; it ends at shutdown.
pub fn spawn(shared: Arc<Shared>, settings: DetectSettings, offload_slots: u32, interfaces: Vec<String>) -> std::io::Result<std::thread::JoinHandle<()>> {
    shared.live_blocks.detecting.store(true, Relaxed);
    std::thread::Builder::new().name("xdns-detect".into()).spawn(move || {
        let mut l = Loop::new(shared.clone(), settings, offload_slots, interfaces);
        let period = Duration::from_millis(u64::from(l.settings.interval_ms));
        let mut next = Instant::now() + period;
        while !shared.shutdown.load(Relaxed) {
            let now = Instant::now();
            if now < next {
                std::thread::sleep((next - now).min(Duration::from_millis(100)));
                continue;
            }
            next += period;
            if next < Instant::now() {
                next = Instant::now() + period;
            }
            if let Err(e) = l.interval() {
                tracing::warn!("guard detection: {e:#}");
            }
        }
        shared.live_blocks.detecting.store(false, Relaxed);
    })
}

struct Loop {
    shared: Arc<Shared>,
    settings: DetectSettings,
    detector: Option<Detector>,
    index: Option<ZoneIndex>,
    last_flip: Option<Instant>,
    /// Cumulative drops (list entry + tier slot) of each blocked target at the last interval.
    drops: HashMap<Target, u64>,
    topk: Option<TopK>,
    tier: Option<Tier>,
    offload_slots: u32,
    interfaces: Vec<String>,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Loop {
    fn new(shared: Arc<Shared>, settings: DetectSettings, offload_slots: u32, interfaces: Vec<String>) -> Self {
        {
            let mut m = shared.live_blocks.monitor.lock().unwrap_or_else(|e| e.into_inner());
            m.set_config(MonitorConfig { hysteresis: settings.unblock_after, detected_ttl: settings.block_for, ..MonitorConfig::default() });
        }
        Self { shared, settings, detector: None, index: None, last_flip: None, drops: HashMap::new(), topk: None, tier: None, offload_slots, interfaces }
    }

    fn interval(&mut self) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let Some(maps) = self.shared.xdp_status.load_full().and_then(|s| s.guard.clone()) else {
            return Ok(());
        };
        let Some(guard) = self.shared.guard.load_full() else {
            return Ok(());
        };
        let counters = &self.shared.live_blocks.counters;
        // 1. the snapshot
        let snap = maps.flip_interval()?;
        let secs = self.last_flip.map_or(self.settings.interval_ms as f64 / 1000.0, |t| t.elapsed().as_secs_f64().max(0.001));
        self.last_flip = Some(Instant::now());
        let allow = guard.allowlist().clone();
        let detector = self.detector.get_or_insert_with(|| {
            let cfg = DetectConfig { min_threshold_pps: f64::from(self.settings.min_rate), ..DetectConfig::default() };
            Detector::new(cfg, allow.clone())
        });
        detector.set_allowlist(allow);
        let zones = self.shared.served.load().zones.clone();
        let hash = |w: &[u8]| maps.suffix_hash(w);
        if !self.index.as_ref().is_some_and(|i| Arc::ptr_eq(&i.zones, &zones)) {
            self.index = Some(ZoneIndex::new(zones, &hash));
        }
        let index = self.index.as_mut().expect("set above");
        let wt_min = detector.config().wt_min_qps;
        let mut by_parent: HashMap<u64, Vec<&xdns_bpf::guard::NameFeature>> = HashMap::new();
        for n in &snap.names {
            by_parent.entry(n.parent).or_default().push(n);
        }
        let mut suffixes = Vec::new();
        for s in &snap.suffixes {
            let Some(name) = index.parents.get(&s.hash).cloned() else { continue };
            let mut stat = SuffixStat { suffix: name.clone(), queries: s.queries, nxdomain: 0, distinct_labels: 0, labels: Vec::new() };
            if s.queries as f64 / secs >= wt_min / 2.0 {
                let kids = index.children(&name, &hash);
                if kids.labels.len() > detector.config().max_known_labels {
                    // its known labels would not all be kept: never blocked for unknown labels
                    suffixes.push(SuffixStat { suffix: name, queries: s.queries, nxdomain: 0, distinct_labels: 0, labels: Vec::new() });
                    continue;
                }
                detector.set_known_labels(&name, kids.labels.iter().cloned());
                let names = by_parent.get(&s.hash).map_or(&[][..], |v| &v[..]);
                stat.distinct_labels = names.len() as u64;
                for n in names {
                    if kids.hashes.contains(&n.hash) {
                        // known: its label, for the detector to learn
                        if let Some(l) = kids.labels.iter().find(|l| {
                            let mut w = vec![l.len() as u8];
                            w.extend_from_slice(l);
                            w.extend_from_slice(&name);
                            hash(&w) == n.hash
                        }) {
                            stat.labels.push(LabelStat { label: l.clone(), queries: n.queries, nxdomain: 0 });
                        }
                    } else if !kids.wildcard {
                        stat.nxdomain += n.queries;
                    }
                }
            }
            suffixes.push(stat);
        }
        let sources = source_stats(&snap);
        let report = detector.observe(&xdns_guard::detect::Snapshot { seconds: secs, sources, suffixes });
        counters.intervals.fetch_add(1, Relaxed);
        counters.threshold_pps.store(report.threshold_pps as u64, Relaxed);

        // 2. blocks, under the write lock (a whole generation written meanwhile would lose them)
        let live = &self.shared.live_blocks;
        let _w = live.writing.lock().unwrap_or_else(|e| e.into_inner());
        let now = unix_now();
        let mut add = Vec::new();
        let mut names_changed = false;
        let mut whole = false;
        let mut m = live.monitor.lock().unwrap_or_else(|e| e.into_inner());
        for f in &report.findings {
            let reason = f.reason.to_string();
            match &f.action {
                Action::BlockSource { prefix, pps } => {
                    if guard.file_lists(prefix) {
                        continue;
                    }
                    match m.block(now, Target::Source(*prefix), Origin::Detected, &reason, None, *pps) {
                        Blocked::Added => {
                            tracing::warn!(source = %prefix, %reason, "guard: blocked");
                            counters.blocked_sources.fetch_add(1, Relaxed);
                            add.push(*prefix);
                        }
                        Blocked::Updated => {}
                        Blocked::Full => {
                            counters.refused_full.fetch_add(1, Relaxed);
                        }
                    }
                }
                Action::BlockUnknownLabels { suffix, keep } => {
                    let t = Target::UnknownLabels(suffix.clone());
                    let rate = match f.reason {
                        xdns_guard::detect::Reason::RandomSubdomain { qps, .. } => qps,
                        _ => 0.0,
                    };
                    match m.block(now, t.clone(), Origin::Detected, &reason, None, rate) {
                        Blocked::Added => {
                            tracing::warn!(suffix = %t, keeps = keep.len(), %reason, "guard: blocked unknown labels");
                            counters.blocked_suffixes.fetch_add(1, Relaxed);
                            live.keep.lock().unwrap_or_else(|e| e.into_inner()).insert(suffix.clone(), keep.clone());
                            names_changed = true;
                        }
                        Blocked::Updated => {}
                        Blocked::Full => {
                            counters.refused_full.fetch_add(1, Relaxed);
                        }
                    }
                }
                Action::Alarm => {
                    counters.alarms.fetch_add(1, Relaxed);
                }
            }
        }
        for p in &add {
            match maps.add_block(p) {
                Ok(xdns_bpf::guard::Added::NeedsGeneration) => whole = true,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(source = %p, "guard: block not added in the kernel, writing a generation: {e:#}");
                    whole = true;
                }
            }
        }

        // 3. rates of the blocked entries, then the monitor
        let mut tier_packets: HashMap<Prefix, Option<u64>> = HashMap::new();
        if let Some(t) = &mut self.tier {
            tier_packets.extend(t.as_dyn().counters().into_iter().map(|c| (c.entry.prefix, c.packets)));
        }
        let mut seen = HashMap::new();
        for e in m.entries().into_iter().map(|e| e.target.clone()).collect::<Vec<_>>() {
            let (total, uncounted) = match &e {
                Target::Source(p) => {
                    let tier = tier_packets.get(p).copied();
                    (maps.entry_drops(p).ok().flatten().unwrap_or(0) + tier.flatten().unwrap_or(0), matches!(tier, Some(None)))
                }
                Target::UnknownLabels(sfx) => {
                    (maps.name_drops(&NameEntry { wire: sfx.clone(), kind: NameMatch::Suffix }).ok().flatten().unwrap_or(0), false)
                }
            };
            if let Some(rate) = interval_rate(self.drops.get(&e).copied(), total, secs, uncounted) {
                m.set_rate(&e, rate);
            }
            seen.insert(e, total);
        }
        self.drops = seen;
        let thresholds = Thresholds { source_pps: report.threshold_pps, suffix_qps: wt_min };
        let gone = m.tick(now, thresholds);
        for (t, why) in &gone {
            tracing::info!(target = %t, reason = ?why, "guard: unblocked");
            counters.unblocked.fetch_add(1, Relaxed);
            match t {
                Target::Source(p) => {
                    if !guard.file_lists(p) {
                        let _ = maps.remove_block(p);
                    }
                }
                Target::UnknownLabels(_) => names_changed = true,
            }
        }
        live.publish(&m);

        // 4. the hardware tier
        if self.offload_slots > 0 {
            let tier = match &mut self.tier {
                Some(t) => Some(t),
                None => {
                    let k = self.offload_slots as usize;
                    let t = self
                        .interfaces
                        .iter()
                        .find_map(|i| EthtoolRunner::probe(i, k))
                        .map(Tier::Ethtool)
                        .or_else(|| maps.tier(k.min(xdns_bpf::guard::TIER_SLOTS)).ok().map(Tier::Modelled));
                    if let Some(t) = &t {
                        tracing::info!(tier = t.label(), slots = t_capacity(t), "guard: hardware tier");
                        counters.tier_slots.store(t_capacity(t) as u64, Relaxed);
                        counters.tier_modelled.store(u64::from(matches!(t, Tier::Modelled(_))), Relaxed);
                        self.topk = Some(TopK::new(t_capacity(t), TopKConfig::default()));
                    }
                    self.tier = t;
                    self.tier.as_mut()
                }
            };
            if let (Some(tier), Some(topk)) = (tier, self.topk.as_mut()) {
                let cands: Vec<Candidate> = m
                    .entries()
                    .into_iter()
                    .filter_map(|e| match e.target {
                        Target::Source(p) => Some(Candidate { prefix: p, pps: e.rate }),
                        Target::UnknownLabels(_) => None,
                    })
                    .collect();
                let changes = topk.plan(&cands);
                for c in &changes {
                    match c {
                        xdns_guard::topk::Change::Install(_) => counters.tier_installs.fetch_add(1, Relaxed),
                        xdns_guard::topk::Change::Remove(_) => counters.tier_removals.fetch_add(1, Relaxed),
                    };
                }
                if let Err((c, e)) = xdns_guard::topk::apply(tier.as_dyn(), &changes) {
                    counters.tier_errors.fetch_add(1, Relaxed);
                    tracing::warn!(change = ?c, "guard: hardware tier: {e}");
                    // start again from an empty view next interval
                    self.topk = Some(TopK::new(tier.as_dyn().capacity(), TopKConfig::default()));
                }
                let label = tier.label();
                let mut tiers = live.tiers.lock().unwrap_or_else(|e| e.into_inner());
                tiers.clear();
                for c in tier.as_dyn().counters() {
                    tiers.insert(c.entry.prefix, label);
                }
            }
        }
        drop(m);

        // 5. what the kernel could not take one by one
        if whole {
            counters.whole_generations.fetch_add(1, Relaxed);
            let (block, allow, _, _) = guard.kernel_lists(live);
            if let Err(e) = maps.replace_lists(&block, &allow) {
                tracing::error!("guard: the kernel's lists were not replaced (the old ones stay): {e:#}");
            }
        }
        if names_changed {
            let (_, _, names, exceptions) = guard.kernel_lists(live);
            if let Err(e) = maps.replace_names_with(&names, &exceptions) {
                tracing::error!("guard: the kernel's name blocks were not replaced: {e:#}");
            }
        }
        counters.last_interval_us.store(t0.elapsed().as_micros() as u64, Relaxed);
        Ok(())
    }
}

/// A blocked entry's drops per second over the last interval, from its drop count at the
/// interval's start (`before`; None: its first interval) and end (`total`); None when it cannot
/// be measured: the first interval, or a source in a hardware slot of a NIC that counts
/// nothing (`uncounted`: `ethtool` n-tuple rules carry no counters). Such a source's packets
/// are dropped where no counter sees them, so its rate stays the one measured before it went
/// there: the rate monitor does not lift it for a calm it cannot see (it would come back to
/// XDP, be detected again and go back to the NIC, round after round), and it ends by its
/// expiry (`detect_block_for`).
fn interval_rate(before: Option<u64>, total: u64, secs: f64, uncounted: bool) -> Option<f64> {
    match before {
        Some(b) if !uncounted => Some(total.saturating_sub(b) as f64 / secs),
        _ => None,
    }
}

/// The detector's view of the kernel's sources: packets, bytes and ANY queries per /24 or
/// /56, with the bytes of the kernel's answers to the same prefix (what the amplification
/// check weighs).
fn source_stats(snap: &xdns_bpf::guard::Snapshot) -> Vec<SourceStat> {
    let answered: HashMap<_, u64> = snap.answers.iter().map(|a| (a.prefix, a.bytes)).collect();
    snap.sources
        .iter()
        .map(|s| SourceStat {
            prefix: s.prefix,
            packets: s.packets,
            bytes: s.bytes,
            any_queries: s.any,
            response_bytes: answered.get(&s.prefix).copied().unwrap_or(0),
        })
        .collect()
}

fn t_capacity(t: &Tier) -> usize {
    match t {
        Tier::Modelled(m) => m.capacity(),
        Tier::Ethtool(e) => e.capacity(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_in_an_uncounted_hardware_slot_keep_their_rate() {
        use xdns_guard::monitor::{Monitor, MonitorConfig, Origin, Target, Thresholds};
        let p = |s: &str| Target::Source(xdns_guard::lists::parse_prefix(s).unwrap());
        let mut m = Monitor::new(MonitorConfig { hysteresis: 2, detected_ttl: Some(3600), max_entries: 16 });
        let (counted, offloaded) = (p("198.18.1.0/24"), p("198.18.2.0/24"));
        for t in [&counted, &offloaded] {
            m.block(0, t.clone(), Origin::Detected, "rate", None, 50_000.0);
        }
        let th = Thresholds { source_pps: 1000.0, suffix_qps: 50.0 };
        let mut gone = Vec::new();
        for tick in 1..=4 {
            // neither entry's counters moved this interval: the first's drops stopped, the
            // second's go on in a NIC slot that counts nothing
            for (t, uncounted) in [(&counted, false), (&offloaded, true)] {
                if let Some(rate) = interval_rate(Some(7), 7, 1.0, uncounted) {
                    m.set_rate(t, rate);
                }
            }
            gone.extend(m.tick(tick, th).into_iter().map(|(t, _)| t));
        }
        assert_eq!(gone, vec![counted], "the calm counted source is lifted, the offloaded one kept");
        assert_eq!(interval_rate(None, 9, 1.0, false), None, "no rate in an entry's first interval");
        assert_eq!(interval_rate(Some(1000), 3000, 2.0, false), Some(1000.0));
    }

    #[test]
    fn ntuple_support_reads_ethtool_k() {
        assert_eq!(ntuple_support("Features for eth0:\nntuple-filters: on\n"), Some(true));
        assert_eq!(ntuple_support("ntuple-filters: off\nreceive-hashing: on\n"), Some(false));
        assert_eq!(ntuple_support("\tntuple-filters: off [fixed]\n"), None);
        assert_eq!(ntuple_support("rx-checksumming: on\n"), None);
    }

    #[test]
    fn parents_and_children_of_names() {
        assert_eq!(parent(b"\x03www\x07example\x03com\x00"), Some(&b"\x07example\x03com\x00"[..]));
        assert_eq!(parent(b"\x00"), None);
        assert_eq!(parent(b""), None);
        assert_eq!(parent(b"\x05ab"), None); // cut short
    }

    /// The kernel's ANY count per source reaches the detector: a source mostly asking ANY is
    /// blocked as an ANY flood, one asking a few among many other queries is not, and an
    /// allowlisted one never.
    #[test]
    fn any_counts_from_the_kernel_make_any_flood_blocks() {
        use xdns_bpf::guard::{Snapshot, SourceFeature};
        let p = |s: &str| xdns_guard::lists::parse_prefix(s).unwrap();
        let src = |prefix: &str, packets, any| SourceFeature { prefix: p(prefix), packets, bytes: packets * 60, any };
        let snap = Snapshot {
            interval: 1,
            sources: vec![src("198.18.1.0/24", 100, 90), src("198.18.2.0/24", 100, 10), src("198.18.3.0/24", 100, 90), src("2001:db8:4::/56", 50, 50)],
            ..Default::default()
        };
        let stats = source_stats(&snap);
        assert_eq!(stats.iter().map(|s| s.any_queries).collect::<Vec<_>>(), [90, 10, 90, 50]);
        let allow = xdns_guard::lists::parse_prefix_list("a", "198.18.3.0/24\n").unwrap();
        let mut d = Detector::new(DetectConfig::default(), allow);
        let r = d.observe(&xdns_guard::detect::Snapshot { seconds: 1.0, sources: stats, suffixes: Vec::new() });
        let blocked: Vec<_> = r
            .findings
            .iter()
            .filter_map(|f| match &f.action {
                Action::BlockSource { prefix, .. } => Some((*prefix, f.reason.to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(
            blocked,
            [(p("198.18.1.0/24"), "ANY flood: 90 ANY q/s".to_string()), (p("2001:db8:4::/56"), "ANY flood: 50 ANY q/s".to_string())]
        );
    }
}
