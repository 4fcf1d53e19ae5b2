//! The hardware tier: which K blocked sources sit in the few NIC filter slots, and the
//! backends behind one trait.
//!
//! Why: a NIC drops a packet before it costs the host anything, but it has only a handful of
//! filter slots (tens to a few thousand) and installing a rule is slow. After Miano et al.
//! (IEEE Access 2019, Algorithm 1), the K heaviest blocked sources go to the hardware and the
//! rest stay in XDP; what matters is moving a source only when it pays.
//!
//! The rule ([`TopK::plan`]), each interval, given every blocked entry with its measured rate:
//! 1. slots whose entry is no longer blocked are freed;
//! 2. the entries not in hardware are taken heaviest first (equal rates: lower prefix first);
//!    each goes into a free slot if there is one, else it replaces the **lightest** slot only if
//!    the benefit `candidate rate / slot rate` exceeds the threshold `T(V)`; the first candidate
//!    that does not qualify ends the pass (every later one is lighter).
//!
//! The threshold falls as the total attack volume `V` (packets/s over all blocked entries)
//! rises:
//!
//! ```text
//! T(V) = benefit_min + (benefit_max − benefit_min) / (1 + V / volume_ref)
//! ```
//!
//! Why this shape: a swap costs a rule removal and an install (milliseconds on real NICs, and
//! the slot is empty meanwhile), while what it gains is the host CPU for the difference in
//! rates. When the attack is small the host copes anyway, so only a large gain
//! (`benefit_max`, default 2×) justifies the churn; when the attack is large every packet the
//! host does not see counts, so a smaller gain suffices, down to `benefit_min` (default 1.25×).
//! `T` is halfway between the two at `V = volume_ref` (default 1 Mpkt/s, about where one core
//! of XDP drop saturates on common hardware). `benefit_min > 1` guarantees that equal rates,
//! or rates fluctuating within ±`(benefit_min − 1)/2`, never cause a swap.
//!
//! Backends implement [`HardwareTier`]: [`MemoryTier`] (an in-memory model, also what the
//! kernel "modelled tier" mirrors) and [`EthtoolTier`], which renders `ethtool -N` commands and
//! parses `ethtool -n` listings as pure functions; the daemon runs the commands.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::lists::{Prefix, V4Prefix, V6Prefix};

/// Parameters of the swap rule.
#[derive(Debug, Clone, PartialEq)]
pub struct TopKConfig {
    /// Benefit threshold with no attack volume. Default 2.0.
    pub benefit_max: f64,
    /// Benefit threshold as the volume grows without bound; keep it above 1. Default 1.25.
    pub benefit_min: f64,
    /// Volume (packets/s) at which the threshold is halfway. Default 1,000,000.
    pub volume_ref_pps: f64,
}

impl Default for TopKConfig {
    fn default() -> Self {
        TopKConfig {
            benefit_max: 2.0,
            benefit_min: 1.25,
            volume_ref_pps: 1_000_000.0,
        }
    }
}

impl TopKConfig {
    /// `T(V)`, the benefit a candidate must exceed to replace a slot at total volume `v_pps`.
    pub fn benefit_threshold(&self, v_pps: f64) -> f64 {
        let v = if v_pps.is_finite() && v_pps > 0.0 {
            v_pps
        } else {
            0.0
        };
        let vref = if self.volume_ref_pps > 0.0 {
            self.volume_ref_pps
        } else {
            1.0
        };
        self.benefit_min + (self.benefit_max - self.benefit_min) / (1.0 + v / vref)
    }
}

/// A rule in the hardware tier: a slot (rule location) and the source prefix it drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TierEntry {
    /// Slot index, 0..capacity.
    pub slot: u32,
    /// The source prefix.
    pub prefix: Prefix,
}

/// A blocked entry offered to the tier, with its rate this interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The blocked prefix.
    pub prefix: Prefix,
    /// Its packets/s (kernel drops plus hardware drops).
    pub pps: f64,
}

/// One step of a plan, applied in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Take this rule out.
    Remove(TierEntry),
    /// Put this rule in.
    Install(TierEntry),
}

/// The top-K selector: its view of the slots and their last rates.
#[derive(Debug, Clone)]
pub struct TopK {
    cfg: TopKConfig,
    slots: Vec<Option<(Prefix, f64)>>,
}

impl TopK {
    /// `k` slots, all empty.
    pub fn new(k: usize, cfg: TopKConfig) -> Self {
        TopK {
            cfg,
            slots: vec![None; k],
        }
    }

    /// What each slot holds.
    pub fn slots(&self) -> Vec<Option<Prefix>> {
        self.slots.iter().map(|s| s.map(|(p, _)| p)).collect()
    }

    /// Decides this interval's changes from every blocked entry and its rate, and records
    /// them as done (apply them with [`apply`]).
    pub fn plan(&mut self, blocked: &[Candidate]) -> Vec<Change> {
        let mut changes = Vec::new();
        let rates: HashMap<Prefix, f64> = blocked
            .iter()
            .map(|c| {
                (
                    c.prefix,
                    if c.pps.is_finite() && c.pps > 0.0 {
                        c.pps
                    } else {
                        0.0
                    },
                )
            })
            .collect();
        let volume: f64 = rates.values().sum();
        let t = self.cfg.benefit_threshold(volume);

        // 1. Free slots whose entry was unblocked; refresh the others' rates.
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some((p, r)) = s {
                match rates.get(p) {
                    Some(&now) => *r = now,
                    None => {
                        changes.push(Change::Remove(TierEntry {
                            slot: i as u32,
                            prefix: *p,
                        }));
                        *s = None;
                    }
                }
            }
        }

        // 2. Heaviest first; equal rates in prefix order so the outcome never depends on the
        //    caller's ordering.
        let mut cands: Vec<(f64, Prefix)> = rates
            .iter()
            .filter(|(p, &r)| {
                r > 0.0 && !self.slots.iter().any(|s| s.is_some_and(|(q, _)| q == **p))
            })
            .map(|(p, &r)| (r, *p))
            .collect();
        cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));

        for (rate, prefix) in cands {
            if let Some(free) = self.slots.iter().position(|s| s.is_none()) {
                self.slots[free] = Some((prefix, rate));
                changes.push(Change::Install(TierEntry {
                    slot: free as u32,
                    prefix,
                }));
                continue;
            }
            // The lightest slot; among equals the highest index, deterministically.
            let Some((i, (old, old_rate))) = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.map(|v| (i, v)))
                .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1).then(b.0.cmp(&a.0)))
            else {
                break; // k = 0
            };
            let benefit = if old_rate > 0.0 {
                rate / old_rate
            } else {
                f64::INFINITY
            };
            if benefit <= t {
                break;
            }
            changes.push(Change::Remove(TierEntry {
                slot: i as u32,
                prefix: old,
            }));
            changes.push(Change::Install(TierEntry {
                slot: i as u32,
                prefix,
            }));
            self.slots[i] = Some((prefix, rate));
        }
        changes
    }
}

/// Why a tier operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TierError {
    /// The slot is not below the capacity.
    SlotOutOfRange {
        /// The slot asked for.
        slot: u32,
        /// The tier's capacity.
        capacity: usize,
    },
    /// Something is already installed in the slot.
    SlotBusy(u32),
    /// The slot does not hold that entry.
    NotInstalled(TierEntry),
    /// The backend cannot express this entry (e.g. an interface name it refuses).
    Unsupported(String),
}

impl fmt::Display for TierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TierError::SlotOutOfRange { slot, capacity } => {
                write!(f, "slot {slot} out of range (capacity {capacity})")
            }
            TierError::SlotBusy(s) => write!(f, "slot {s} is in use"),
            TierError::NotInstalled(e) => write!(f, "slot {} does not hold {}", e.slot, e.prefix),
            TierError::Unsupported(why) => write!(f, "unsupported: {why}"),
        }
    }
}

impl std::error::Error for TierError {}

/// Per-slot drop counter, where the backend has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCounter {
    /// The rule.
    pub entry: TierEntry,
    /// Packets it dropped so far; `None` when the driver does not say.
    pub packets: Option<u64>,
}

/// A hardware (or modelled) filter table of fixed capacity.
pub trait HardwareTier {
    /// Number of slots.
    fn capacity(&self) -> usize;
    /// Puts `entry` in its slot, which must be free.
    fn install(&mut self, entry: &TierEntry) -> Result<(), TierError>;
    /// Takes `entry` out of its slot, which must hold it.
    fn remove(&mut self, entry: &TierEntry) -> Result<(), TierError>;
    /// The installed rules and their counters, by slot.
    fn counters(&self) -> Vec<SlotCounter>;
}

/// Applies a plan in order, stopping at the first error (returned with the change).
pub fn apply(tier: &mut dyn HardwareTier, changes: &[Change]) -> Result<(), (Change, TierError)> {
    for c in changes {
        let r = match c {
            Change::Remove(e) => tier.remove(e),
            Change::Install(e) => tier.install(e),
        };
        r.map_err(|err| (*c, err))?;
    }
    Ok(())
}

fn check_slot(slot: u32, capacity: usize) -> Result<usize, TierError> {
    let i = slot as usize;
    if i < capacity {
        Ok(i)
    } else {
        Err(TierError::SlotOutOfRange { slot, capacity })
    }
}

/// An in-memory tier: K slots with a packet counter each. Tests use it, and the kernel's
/// modelled tier (a K-slot map checked first in XDP) has the same behaviour.
#[derive(Debug, Clone)]
pub struct MemoryTier {
    slots: Vec<Option<(Prefix, u64)>>,
}

impl MemoryTier {
    /// `k` empty slots.
    pub fn new(k: usize) -> Self {
        MemoryTier {
            slots: vec![None; k],
        }
    }

    /// A packet from `src` reaches the tier: if a slot matches (first match by slot order),
    /// its counter goes up and the packet is dropped (`true`).
    pub fn hit(&mut self, src: IpAddr) -> bool {
        for (p, n) in self.slots.iter_mut().flatten() {
            if p.contains(src) {
                *n += 1;
                return true;
            }
        }
        false
    }
}

impl HardwareTier for MemoryTier {
    fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn install(&mut self, entry: &TierEntry) -> Result<(), TierError> {
        let i = check_slot(entry.slot, self.slots.len())?;
        if self.slots[i].is_some() {
            return Err(TierError::SlotBusy(entry.slot));
        }
        self.slots[i] = Some((entry.prefix, 0));
        Ok(())
    }

    fn remove(&mut self, entry: &TierEntry) -> Result<(), TierError> {
        clear_slot(&mut self.slots, entry)
    }

    fn counters(&self) -> Vec<SlotCounter> {
        slot_counters(&self.slots, |&n| Some(n))
    }
}

/// Empty the slot of `entry`, which must hold its prefix.
fn clear_slot<T>(slots: &mut [Option<(Prefix, T)>], entry: &TierEntry) -> Result<(), TierError> {
    let i = check_slot(entry.slot, slots.len())?;
    match &slots[i] {
        Some((p, _)) if *p == entry.prefix => {
            slots[i] = None;
            Ok(())
        }
        _ => Err(TierError::NotInstalled(*entry)),
    }
}

/// The counter of every filled slot (`packets` reads its count, when the tier has one).
fn slot_counters<T>(slots: &[Option<(Prefix, T)>], packets: impl Fn(&T) -> Option<u64>) -> Vec<SlotCounter> {
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            s.as_ref().map(|(prefix, n)| SlotCounter { entry: TierEntry { slot: i as u32, prefix: *prefix }, packets: packets(n) })
        })
        .collect()
}

/// Renders the `ethtool` argv that installs a drop rule for UDP from `prefix` at rule
/// location `loc` on `iface`. ethtool's `m` mask marks the bits to *ignore*, so a `/24` is
/// `m 0.0.0.255`; a host prefix has no mask.
pub fn render_install(iface: &str, loc: u32, prefix: &Prefix) -> Result<Vec<String>, TierError> {
    check_iface(iface)?;
    let (flow, addr, mask) = match prefix {
        Prefix::V4(p) => {
            let ignore = if p.len >= 32 { 0 } else { u32::MAX >> p.len };
            (
                "udp4",
                Ipv4Addr::from(p.addr).to_string(),
                (ignore != 0).then(|| Ipv4Addr::from(ignore).to_string()),
            )
        }
        Prefix::V6(p) => {
            let ignore = if p.len >= 128 { 0 } else { u128::MAX >> p.len };
            (
                "udp6",
                Ipv6Addr::from(p.addr).to_string(),
                (ignore != 0).then(|| Ipv6Addr::from(ignore).to_string()),
            )
        }
    };
    let mut argv: Vec<String> = ["ethtool", "-N", iface, "flow-type", flow, "src-ip", &addr]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(m) = mask {
        argv.push("m".to_string());
        argv.push(m);
    }
    argv.extend(["action", "-1", "loc"].iter().map(|s| s.to_string()));
    argv.push(loc.to_string());
    Ok(argv)
}

/// Renders the `ethtool` argv that deletes the rule at `loc` on `iface`.
pub fn render_delete(iface: &str, loc: u32) -> Result<Vec<String>, TierError> {
    check_iface(iface)?;
    Ok(vec![
        "ethtool".into(),
        "-N".into(),
        iface.into(),
        "delete".into(),
        loc.to_string(),
    ])
}

fn check_iface(iface: &str) -> Result<(), TierError> {
    // Linux IFNAMSIZ is 16 with the NUL; names cannot hold '/', whitespace or ':'.
    let ok = !iface.is_empty()
        && iface.len() < 16
        && !iface.starts_with('-')
        && iface
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
    if ok {
        Ok(())
    } else {
        Err(TierError::Unsupported(format!("interface name {iface:?}")))
    }
}

/// The flow type of a listed rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// UDP over IPv4.
    Udp4,
    /// UDP over IPv6.
    Udp6,
    /// Anything else (not one of ours).
    Other,
}

/// One rule from an `ethtool -n` listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRule {
    /// Rule location ("Filter: N").
    pub loc: u32,
    /// Its flow type.
    pub flow: Flow,
    /// The source prefix, when the address and mask describe one.
    pub src: Option<Prefix>,
    /// Whether the action is drop.
    pub drop: bool,
}

/// Parses the output of `ethtool -n IFACE` (or `--show-ntuple`): the rules with their
/// location, flow type, source prefix (from address and ignore-mask) and whether they drop.
/// Lines it does not know are skipped; it never fails.
pub fn parse_rule_listing(text: &str) -> Vec<ListedRule> {
    let mut rules = Vec::new();
    let mut cur: Option<ListedRule> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(n) = line.strip_prefix("Filter:") {
            if let Some(r) = cur.take() {
                rules.push(r);
            }
            cur = n.trim().parse().ok().map(|loc| ListedRule {
                loc,
                flow: Flow::Other,
                src: None,
                drop: false,
            });
            continue;
        }
        let Some(r) = cur.as_mut() else { continue };
        if let Some(t) = line.strip_prefix("Rule Type:") {
            r.flow = match t.trim() {
                "UDP over IPv4" => Flow::Udp4,
                "UDP over IPv6" => Flow::Udp6,
                _ => Flow::Other,
            };
        } else if let Some(rest) = line.strip_prefix("Src IP addr:") {
            let mut it = rest.split_whitespace();
            let addr = it.next();
            let mask = match (it.next(), it.next()) {
                (Some("mask:"), m) => m,
                _ => None,
            };
            r.src = addr.and_then(|a| prefix_from_ignore_mask(a, mask.unwrap_or("0.0.0.0")));
        } else if let Some(a) = line.strip_prefix("Action:") {
            r.drop = a.trim() == "Drop";
        }
    }
    if let Some(r) = cur {
        rules.push(r);
    }
    rules
}

/// A prefix from an address and an ethtool ignore-mask, if the mask is contiguous low bits.
fn prefix_from_ignore_mask(addr: &str, mask: &str) -> Option<Prefix> {
    match (addr.parse::<IpAddr>().ok()?, mask.parse::<IpAddr>().ok()) {
        (IpAddr::V4(a), m) => {
            let m = match m {
                Some(IpAddr::V4(m)) => u32::from(m),
                _ => 0,
            };
            let len = m.leading_zeros() as u8;
            let contiguous = m == 0 || m == u32::MAX >> len;
            (contiguous && u32::from(a) & m == 0).then_some(Prefix::V4(V4Prefix {
                addr: a.octets(),
                len,
            }))
        }
        (IpAddr::V6(a), m) => {
            let m = match m {
                Some(IpAddr::V6(m)) => u128::from(m),
                _ => 0,
            };
            let len = m.leading_zeros() as u8;
            let contiguous = m == 0 || m == u128::MAX >> len;
            (contiguous && u128::from(a) & m == 0).then_some(Prefix::V6(V6Prefix {
                addr: a.octets(),
                len,
            }))
        }
    }
}

/// The `ethtool` n-tuple backend, as pure state: installs and removals queue argv vectors
/// the daemon runs ([`EthtoolTier::take_commands`]); slot `i` is rule location
/// `first_loc + i`. Counters are filled by the daemon from driver statistics where they
/// exist ([`EthtoolTier::record_counter`]); otherwise they are `None`.
#[derive(Debug, Clone)]
pub struct EthtoolTier {
    iface: String,
    first_loc: u32,
    slots: Vec<Option<(Prefix, Option<u64>)>>,
    pending: Vec<Vec<String>>,
}

impl EthtoolTier {
    /// A tier of `capacity` rules on `iface` starting at location `first_loc`.
    pub fn new(iface: &str, first_loc: u32, capacity: usize) -> Result<Self, TierError> {
        check_iface(iface)?;
        if u64::from(first_loc) + capacity as u64 > u64::from(u32::MAX) {
            return Err(TierError::Unsupported(
                "rule locations past 2^32".to_string(),
            ));
        }
        Ok(EthtoolTier {
            iface: iface.to_string(),
            first_loc,
            slots: vec![None; capacity],
            pending: Vec::new(),
        })
    }

    /// The commands queued since the last call, in order.
    pub fn take_commands(&mut self) -> Vec<Vec<String>> {
        std::mem::take(&mut self.pending)
    }

    /// Records a slot's counter read from driver statistics.
    pub fn record_counter(&mut self, slot: u32, packets: u64) {
        if let Some(Some((_, c))) = self.slots.get_mut(slot as usize) {
            *c = Some(packets);
        }
    }

    /// Compares our slots with an `ethtool -n` listing: the slots whose rule is missing or
    /// different on the NIC (to reinstall), and the locations in our range the NIC holds but
    /// we do not (to delete).
    pub fn drift(&self, listing: &[ListedRule]) -> (Vec<TierEntry>, Vec<u32>) {
        let on_nic: HashMap<u32, &ListedRule> = listing.iter().map(|r| (r.loc, r)).collect();
        let mut missing = Vec::new();
        let mut stray = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let loc = self.first_loc + i as u32;
            match (s, on_nic.get(&loc)) {
                (Some((p, _)), Some(r)) if r.drop && r.src == Some(*p) => {}
                (Some((p, _)), _) => missing.push(TierEntry {
                    slot: i as u32,
                    prefix: *p,
                }),
                (None, Some(_)) => stray.push(loc),
                (None, None) => {}
            }
        }
        (missing, stray)
    }
}

impl HardwareTier for EthtoolTier {
    fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn install(&mut self, entry: &TierEntry) -> Result<(), TierError> {
        let i = check_slot(entry.slot, self.slots.len())?;
        if self.slots[i].is_some() {
            return Err(TierError::SlotBusy(entry.slot));
        }
        let argv = render_install(&self.iface, self.first_loc + entry.slot, &entry.prefix)?;
        self.pending.push(argv);
        self.slots[i] = Some((entry.prefix, None));
        Ok(())
    }

    fn remove(&mut self, entry: &TierEntry) -> Result<(), TierError> {
        let delete = render_delete(&self.iface, self.first_loc + entry.slot)?;
        clear_slot(&mut self.slots, entry)?;
        self.pending.push(delete);
        Ok(())
    }

    fn counters(&self) -> Vec<SlotCounter> {
        slot_counters(&self.slots, |&n| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lists::parse_prefix;

    fn h(i: u32) -> Prefix {
        Prefix::host(IpAddr::V4(Ipv4Addr::from(0xc633_6400 + i))) // 198.51.100.i
    }

    fn cands(rates: &[(u32, f64)]) -> Vec<Candidate> {
        rates
            .iter()
            .map(|&(i, pps)| Candidate { prefix: h(i), pps })
            .collect()
    }

    fn held(t: &TopK) -> Vec<Option<u32>> {
        t.slots()
            .iter()
            .map(|s| {
                s.map(|p| {
                    u32::from_be_bytes(match p {
                        Prefix::V4(v) => v.addr,
                        _ => [0; 4],
                    }) - 0xc633_6400
                })
            })
            .collect()
    }

    #[test]
    fn threshold_falls_with_volume() {
        let c = TopKConfig::default();
        assert_eq!(c.benefit_threshold(0.0), 2.0);
        assert!((c.benefit_threshold(1e6) - 1.625).abs() < 1e-12);
        assert!(c.benefit_threshold(1e12) > 1.25 && c.benefit_threshold(1e12) < 1.26);
        let mut last = f64::INFINITY;
        for v in [0.0, 1e3, 1e5, 1e6, 1e7, 1e9] {
            let t = c.benefit_threshold(v);
            assert!(t < last || v == 0.0);
            last = t;
        }
        assert_eq!(c.benefit_threshold(f64::NAN), 2.0);
        assert_eq!(c.benefit_threshold(-5.0), 2.0);
    }

    #[test]
    fn fills_heaviest_first_and_holds_under_fluctuation() {
        let mut t = TopK::new(3, TopKConfig::default());
        let first = t.plan(&cands(&[(1, 100.0), (2, 500.0), (3, 300.0), (4, 200.0)]));
        assert_eq!(
            first,
            vec![
                Change::Install(TierEntry {
                    slot: 0,
                    prefix: h(2)
                }),
                Change::Install(TierEntry {
                    slot: 1,
                    prefix: h(3)
                }),
                Change::Install(TierEntry {
                    slot: 2,
                    prefix: h(4)
                }),
            ]
        );
        // Recorded sequence: every rate wobbles ±15% each interval, h(1) catches up with h(4).
        let seq: [[f64; 4]; 6] = [
            [110.0, 450.0, 330.0, 180.0],
            [180.0, 520.0, 280.0, 210.0],
            [210.0, 480.0, 310.0, 190.0],
            [200.0, 500.0, 300.0, 200.0], // tie between h(1) and h(4)
            [230.0, 560.0, 260.0, 200.0],
            [190.0, 470.0, 340.0, 220.0],
        ];
        for (n, r) in seq.iter().enumerate() {
            let c = cands(&[(1, r[0]), (2, r[1]), (3, r[2]), (4, r[3])]);
            assert_eq!(t.plan(&c), vec![], "interval {n}: no churn");
        }
        assert_eq!(held(&t), vec![Some(2), Some(3), Some(4)]);
    }

    #[test]
    fn ties_are_stable_whatever_the_input_order() {
        let rates = [(5, 1000.0), (6, 1000.0), (7, 1000.0), (8, 1000.0)];
        let mut a = TopK::new(2, TopKConfig::default());
        let mut b = TopK::new(2, TopKConfig::default());
        let mut rev = cands(&rates);
        rev.reverse();
        assert_eq!(a.plan(&cands(&rates)), b.plan(&rev));
        assert_eq!(held(&a), vec![Some(5), Some(6)]);
        for _ in 0..10 {
            assert!(a.plan(&cands(&rates)).is_empty());
        }
    }

    #[test]
    fn rising_attack_takes_the_lightest_slot() {
        let mut t = TopK::new(2, TopKConfig::default());
        t.plan(&cands(&[(1, 1000.0), (2, 400.0)]));
        // Volume 1.4k + 700 ≈ 2.1 kpps: T ≈ 1.998. 700/400 = 1.75: not enough.
        assert!(t
            .plan(&cands(&[(1, 1000.0), (2, 400.0), (3, 700.0)]))
            .is_empty());
        // h(3) rises to 900: 900/400 = 2.25 > T.
        let c = t.plan(&cands(&[(1, 1000.0), (2, 400.0), (3, 900.0)]));
        assert_eq!(
            c,
            vec![
                Change::Remove(TierEntry {
                    slot: 1,
                    prefix: h(2)
                }),
                Change::Install(TierEntry {
                    slot: 1,
                    prefix: h(3)
                })
            ]
        );
    }

    #[test]
    fn big_attack_lowers_the_bar() {
        // The same 1.5× gain is refused in a small attack and taken in a huge one.
        let mut small = TopK::new(1, TopKConfig::default());
        small.plan(&cands(&[(1, 1000.0)]));
        assert!(small.plan(&cands(&[(1, 1000.0), (2, 1500.0)])).is_empty());

        let mut big = TopK::new(1, TopKConfig::default());
        let mut base = cands(&[(1, 1_000_000.0)]);
        big.plan(&base);
        // 20 more sources, each lighter, make the volume ~ 13 Mpkt/s: T ≈ 1.30.
        base.extend((100..120).map(|i| Candidate {
            prefix: h(i),
            pps: 500_000.0,
        }));
        base.push(Candidate {
            prefix: h(2),
            pps: 1_500_000.0,
        });
        let c = big.plan(&base);
        assert_eq!(
            c.last(),
            Some(&Change::Install(TierEntry {
                slot: 0,
                prefix: h(2)
            }))
        );
    }

    #[test]
    fn falling_attack_and_unblocked_entries() {
        let mut t = TopK::new(2, TopKConfig::default());
        t.plan(&cands(&[(1, 5000.0), (2, 4000.0), (3, 100.0)]));
        assert_eq!(held(&t), vec![Some(1), Some(2)]);
        // h(1) falls to nearly nothing while h(3) keeps going.
        let c = t.plan(&cands(&[(1, 10.0), (2, 4000.0), (3, 100.0)]));
        assert_eq!(
            c,
            vec![
                Change::Remove(TierEntry {
                    slot: 0,
                    prefix: h(1)
                }),
                Change::Install(TierEntry {
                    slot: 0,
                    prefix: h(3)
                })
            ]
        );
        // h(2) was unblocked by the monitor: its slot is freed, and h(1) (still blocked)
        // takes it because a free slot costs nothing.
        let c = t.plan(&cands(&[(1, 10.0), (3, 100.0)]));
        assert_eq!(
            c,
            vec![
                Change::Remove(TierEntry {
                    slot: 1,
                    prefix: h(2)
                }),
                Change::Install(TierEntry {
                    slot: 1,
                    prefix: h(1)
                })
            ]
        );
        // Everyone unblocked: the tier empties.
        let c = t.plan(&[]);
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|c| matches!(c, Change::Remove(_))));
        assert_eq!(held(&t), vec![None, None]);
    }

    #[test]
    fn k_larger_than_the_attackers() {
        let mut t = TopK::new(8, TopKConfig::default());
        let c = t.plan(&cands(&[(1, 10.0), (2, 20.0), (3, 0.0)]));
        assert_eq!(c.len(), 2, "a silent entry is not worth a rule");
        assert_eq!(
            held(&t),
            vec![Some(2), Some(1), None, None, None, None, None, None]
        );
        for _ in 0..5 {
            assert!(t.plan(&cands(&[(1, 10.0), (2, 20.0), (3, 0.0)])).is_empty());
        }
        let mut none = TopK::new(0, TopKConfig::default());
        assert!(none.plan(&cands(&[(1, 1e9)])).is_empty());
    }

    #[test]
    fn plans_apply_to_the_memory_tier() {
        let mut t = TopK::new(2, TopKConfig::default());
        let mut tier = MemoryTier::new(2);
        for rates in [
            vec![(1, 100.0), (2, 200.0)],
            vec![(1, 100.0), (2, 200.0), (3, 900.0)],
            vec![(2, 200.0), (3, 900.0)],
            vec![],
        ] {
            let plan = t.plan(&cands(&rates));
            apply(&mut tier, &plan).unwrap();
            let installed: Vec<Option<Prefix>> = {
                let mut v = vec![None; 2];
                for c in tier.counters() {
                    v[c.entry.slot as usize] = Some(c.entry.prefix);
                }
                v
            };
            assert_eq!(installed, t.slots(), "tier and selector agree");
        }
        let mut tier = MemoryTier::new(1);
        let e = TierEntry {
            slot: 0,
            prefix: parse_prefix("192.0.2.0/24").unwrap(),
        };
        tier.install(&e).unwrap();
        assert_eq!(tier.install(&e), Err(TierError::SlotBusy(0)));
        assert!(tier.hit("192.0.2.9".parse().unwrap()));
        assert!(!tier.hit("192.0.3.9".parse().unwrap()));
        assert_eq!(tier.counters()[0].packets, Some(1));
        let other = TierEntry {
            slot: 0,
            prefix: h(1),
        };
        assert_eq!(tier.remove(&other), Err(TierError::NotInstalled(other)));
        let far = TierEntry {
            slot: 5,
            prefix: h(1),
        };
        assert_eq!(
            tier.install(&far),
            Err(TierError::SlotOutOfRange {
                slot: 5,
                capacity: 1
            })
        );
    }

    #[test]
    fn ethtool_commands() {
        let rows = [
            ("198.51.100.7", 1000, "ethtool -N eth0 flow-type udp4 src-ip 198.51.100.7 action -1 loc 1000"),
            ("198.51.100.0/24", 1001, "ethtool -N eth0 flow-type udp4 src-ip 198.51.100.0 m 0.0.0.255 action -1 loc 1001"),
            ("2001:db8::1", 7, "ethtool -N eth0 flow-type udp6 src-ip 2001:db8::1 action -1 loc 7"),
            (
                "2001:db8:aa::/48",
                8,
                "ethtool -N eth0 flow-type udp6 src-ip 2001:db8:aa:: m ::ffff:ffff:ffff:ffff:ffff action -1 loc 8",
            ),
        ];
        for (p, loc, want) in rows {
            assert_eq!(
                render_install("eth0", loc, &parse_prefix(p).unwrap())
                    .unwrap()
                    .join(" "),
                want
            );
        }
        assert_eq!(
            render_delete("eth0", 1000).unwrap().join(" "),
            "ethtool -N eth0 delete 1000"
        );
        for bad in ["", "-x", "eth0 x", "a/b", "averyveryverylongname"] {
            assert!(render_install(bad, 0, &h(1)).is_err(), "{bad:?}");
        }

        let mut tier = EthtoolTier::new("ens1f0", 100, 2).unwrap();
        tier.install(&TierEntry {
            slot: 1,
            prefix: h(7),
        })
        .unwrap();
        tier.remove(&TierEntry {
            slot: 1,
            prefix: h(7),
        })
        .unwrap();
        let cmds: Vec<String> = tier.take_commands().iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            cmds,
            vec![
                "ethtool -N ens1f0 flow-type udp4 src-ip 198.51.100.7 action -1 loc 101"
                    .to_string(),
                "ethtool -N ens1f0 delete 101".to_string(),
            ]
        );
        assert!(tier.take_commands().is_empty());
    }

    const LISTING: &str = "\
4 RX rings available
Total 4 rules

Filter: 100
\tRule Type: UDP over IPv4
\tSrc IP addr: 198.51.100.7 mask: 0.0.0.0
\tDest IP addr: 0.0.0.0 mask: 255.255.255.255
\tTOS: 0x0 mask: 0xff
\tSrc port: 0 mask: 0xffff
\tDest port: 0 mask: 0xffff
\tAction: Drop

Filter: 101
\tRule Type: UDP over IPv6
\tSrc IP addr: 2001:db8:aa:: mask: ::ffff:ffff:ffff:ffff:ffff
\tDest IP addr: :: mask: ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff
\tTraffic Class: 0x0 mask: 0xff
\tProtocol: 0 mask: 0xff
\tL4 bytes: 0x0 mask: 0xffffffff
\tAction: Drop

Filter: 102
\tRule Type: TCP over IPv4
\tSrc IP addr: 0.0.0.0 mask: 255.255.255.255
\tDest IP addr: 192.0.2.1 mask: 0.0.0.0
\tAction: Direct to queue 3

Filter: 5
\tRule Type: UDP over IPv4
\tSrc IP addr: 10.0.0.0 mask: 0.255.0.255
\tAction: Drop
";

    #[test]
    fn ethtool_listing_parses_and_drift_is_found() {
        let rules = parse_rule_listing(LISTING);
        assert_eq!(rules.len(), 4);
        assert_eq!(
            rules[0],
            ListedRule {
                loc: 100,
                flow: Flow::Udp4,
                src: Some(h(7)),
                drop: true
            }
        );
        assert_eq!(
            rules[1].src,
            Some(parse_prefix("2001:db8:aa::/48").unwrap())
        );
        assert_eq!((rules[1].flow, rules[1].drop), (Flow::Udp6, true));
        assert_eq!((rules[2].flow, rules[2].drop), (Flow::Other, false));
        assert_eq!(rules[2].src, Some(parse_prefix("0.0.0.0/0").unwrap()));
        assert_eq!(rules[3].src, None, "a non-contiguous mask is not a prefix");

        // We hold h(7) at 100 (matches) and h(8) at 101 (the NIC has something else); 102 is
        // in our range but not ours.
        let mut tier = EthtoolTier::new("eth0", 100, 3).unwrap();
        tier.install(&TierEntry {
            slot: 0,
            prefix: h(7),
        })
        .unwrap();
        tier.install(&TierEntry {
            slot: 1,
            prefix: h(8),
        })
        .unwrap();
        let (missing, stray) = tier.drift(&rules);
        assert_eq!(
            missing,
            vec![TierEntry {
                slot: 1,
                prefix: h(8)
            }]
        );
        assert_eq!(stray, vec![102]);
        tier.record_counter(0, 42);
        assert_eq!(tier.counters()[0].packets, Some(42));
        assert_eq!(tier.counters()[1].packets, None);

        for junk in [
            "",
            "Filter:",
            "Filter: x\nAction: Drop",
            "Src IP addr:",
            "Filter: 1\n\tSrc IP addr: zz mask: 1",
        ] {
            let _ = parse_rule_listing(junk);
        }
        assert_eq!(parse_rule_listing("Filter: 9\n\tSrc IP addr:\n").len(), 1);
    }
}
