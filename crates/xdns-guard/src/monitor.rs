//! The rate monitor: the set of blocked entries with their measured rates, and when each
//! comes off the list.
//!
//! Why: detection blocks quickly, so something must unblock as reliably, or a spoofed flood
//! that borrowed a legitimate resolver's address would keep that resolver out forever. After
//! the rate monitor of Miano et al. (IEEE Access 2019, §IV), each interval the monitor walks the
//! blocked entries **from the lowest measured rate up** and unblocks those whose rate stayed
//! below the normal-traffic threshold for `hysteresis` consecutive intervals; the walk stops
//! at the first entry at or above the threshold, since every later one is higher. One calm
//! interval is not enough (hysteresis), because attacks pulse.
//!
//! Every entry also has an expiry: detected entries get `detected_ttl` (a safety net should the
//! rate never be measured), manual ones (`xdns guard block ADDR --for 10m`) the time given, or
//! none. **Manual entries are never unblocked by the rate walk**: only their expiry or
//! `xdns guard unblock` removes them. Blocking an entry that is already blocked keeps the
//! later expiry, and a manual block turns a detected entry into a manual one.
//!
//! Two kinds of entries ([`Target`]): source prefixes, and suffixes blocked for unknown labels
//! (the water-torture block of [`crate::detect`]). Each kind is walked against its own
//! threshold ([`Thresholds`]): the detector's per-source threshold in packets/s, and the
//! water-torture minimum in queries/s.
//!
//! Rates are what the kernel counted for the entry (packets dropped because of it) divided by
//! the interval; the daemon passes them with [`Monitor::set_rate`]. Time is in seconds on any
//! clock the caller likes, as long as it is the same one throughout.

use std::collections::HashMap;
use std::fmt;

use crate::lists::Prefix;

/// What a blocked entry blocks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Queries from a source prefix.
    Source(Prefix),
    /// Queries under a suffix (lowercase wire format) whose next label is not a known one.
    UnknownLabels(Vec<u8>),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Source(p) => write!(f, "{p}"),
            Target::UnknownLabels(wire) => {
                // Presentation form, labels as printable ASCII or \DDD.
                write!(f, "*.")?;
                let mut i = 0;
                while let Some(&len) = wire.get(i) {
                    if len == 0 {
                        break;
                    }
                    let label = wire.get(i + 1..i + 1 + usize::from(len)).unwrap_or(&[]);
                    for &b in label {
                        if b.is_ascii_graphic() && b != b'.' && b != b'\\' {
                            write!(f, "{}", b as char)?;
                        } else {
                            write!(f, "\\{b:03}")?;
                        }
                    }
                    write!(f, ".")?;
                    i += 1 + usize::from(len);
                }
                Ok(())
            }
        }
    }
}

/// Who put an entry on the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The detector.
    Detected,
    /// An operator (`xdns guard block`) or the blocklist file.
    Manual,
}

/// One blocked entry, as `xdns guard list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockEntry {
    /// What is blocked.
    pub target: Target,
    /// Who blocked it.
    pub origin: Origin,
    /// Why, in words (a [`crate::detect::Reason`] rendered, or "manual").
    pub reason: String,
    /// When it was first blocked (caller's seconds).
    pub since: u64,
    /// When it expires, if ever.
    pub expires: Option<u64>,
    /// Last measured rate: packets/s for a source, queries/s for a suffix.
    pub rate: f64,
    /// Consecutive intervals below the threshold so far.
    pub calm: u32,
    calm_tick: u64,
}

/// Why an entry came off the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unblock {
    /// Its expiry passed.
    Expired,
    /// It stayed below the threshold for the hysteresis.
    Calm,
}

/// The normal-traffic thresholds an interval's walk compares rates with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// For sources, packets/s: the detector's [`crate::detect::Report::threshold_pps`].
    pub source_pps: f64,
    /// For suffixes, queries/s: the detector's `wt_min_qps`.
    pub suffix_qps: f64,
}

/// Monitor parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorConfig {
    /// Consecutive calm intervals before a detected entry is unblocked. Default 5.
    pub hysteresis: u32,
    /// Expiry of detected entries, seconds; `None` = only the rate walk removes them.
    /// Default 3600.
    pub detected_ttl: Option<u64>,
    /// Most entries kept; further blocks are refused (the kernel map is this size).
    /// Default 1,048,576.
    pub max_entries: usize,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            hysteresis: 5,
            detected_ttl: Some(3600),
            max_entries: 1 << 20,
        }
    }
}

/// The blocked set and its unblocking rules.
#[derive(Debug, Clone, Default)]
pub struct Monitor {
    cfg: MonitorConfig,
    entries: HashMap<Target, BlockEntry>,
    tick: u64,
}

/// What [`Monitor::block`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// A new entry: the kernel map must get it.
    Added,
    /// Already there; expiry, reason or origin updated.
    Updated,
    /// The table is full; nothing changed.
    Full,
}

impl Monitor {
    /// An empty monitor.
    pub fn new(cfg: MonitorConfig) -> Self {
        Monitor {
            cfg,
            entries: HashMap::new(),
            tick: 0,
        }
    }

    /// Replaces the parameters (the entries stay; a smaller `max_entries` refuses new
    /// blocks until enough are lifted).
    pub fn set_config(&mut self, cfg: MonitorConfig) {
        self.cfg = cfg;
    }

    /// Blocks `target` at time `now`. `ttl` (seconds) applies to manual entries; detected
    /// entries use the configured `detected_ttl` unless `ttl` is given. `rate` is the rate
    /// that triggered the block (0 for a manual one).
    pub fn block(
        &mut self,
        now: u64,
        target: Target,
        origin: Origin,
        reason: &str,
        ttl: Option<u64>,
        rate: f64,
    ) -> Blocked {
        let ttl = match origin {
            Origin::Manual => ttl,
            Origin::Detected => ttl.or(self.cfg.detected_ttl),
        };
        let expires = ttl.map(|t| now.saturating_add(t));
        let rate = if rate.is_finite() && rate >= 0.0 {
            rate
        } else {
            0.0
        };
        if let Some(e) = self.entries.get_mut(&target) {
            // Manual wins; a manual entry without expiry stays without one.
            if origin == Origin::Manual && e.origin == Origin::Detected {
                e.origin = Origin::Manual;
                e.expires = expires;
            } else {
                e.expires = match (e.expires, expires) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ if e.origin == Origin::Manual && origin == Origin::Detected => e.expires,
                    _ => None,
                };
            }
            if origin == e.origin {
                e.reason = reason.to_string();
            }
            e.rate = rate;
            e.calm = 0;
            return Blocked::Updated;
        }
        if self.entries.len() >= self.cfg.max_entries {
            return Blocked::Full;
        }
        self.entries.insert(
            target.clone(),
            BlockEntry {
                target,
                origin,
                reason: reason.to_string(),
                since: now,
                expires,
                rate,
                calm: 0,
                calm_tick: 0,
            },
        );
        Blocked::Added
    }

    /// Removes an entry on an operator's request.
    pub fn unblock(&mut self, target: &Target) -> Option<BlockEntry> {
        self.entries.remove(target)
    }

    /// Records the rate measured for an entry this interval (ignored if not blocked, or if
    /// not a finite non-negative number).
    pub fn set_rate(&mut self, target: &Target, rate: f64) {
        if let Some(e) = self.entries.get_mut(target) {
            if rate.is_finite() && rate >= 0.0 {
                e.rate = rate;
            }
        }
    }

    /// One interval: expires entries, then walks detected entries of each kind from the
    /// lowest rate up and unblocks those calm for `hysteresis` intervals. Returns what came
    /// off (expired first, in target order; then calm ones, lowest rate first), for the
    /// kernel maps and the hardware tier.
    pub fn tick(&mut self, now: u64, thresholds: Thresholds) -> Vec<(Target, Unblock)> {
        self.tick += 1;
        let tick = self.tick;
        let mut out: Vec<(Target, Unblock)> = self
            .entries
            .values()
            .filter(|e| e.expires.is_some_and(|x| x <= now))
            .map(|e| (e.target.clone(), Unblock::Expired))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        for (t, _) in &out {
            self.entries.remove(t);
        }

        let mut sources = Vec::new();
        let mut suffixes = Vec::new();
        for e in self
            .entries
            .values()
            .filter(|e| e.origin == Origin::Detected)
        {
            match e.target {
                Target::Source(_) => sources.push((e.rate, e.target.clone())),
                Target::UnknownLabels(_) => suffixes.push((e.rate, e.target.clone())),
            }
        }
        for (mut walk, threshold) in [
            (sources, thresholds.source_pps),
            (suffixes, thresholds.suffix_qps),
        ] {
            walk.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            for (rate, target) in walk {
                // Stop at the first rate at or above the threshold (or a NaN threshold).
                if rate.partial_cmp(&threshold) != Some(std::cmp::Ordering::Less) {
                    break;
                }
                let Some(e) = self.entries.get_mut(&target) else {
                    continue;
                };
                // An entry not visited last tick was above the threshold then: its streak
                // restarts.
                e.calm = if e.calm_tick + 1 == tick {
                    e.calm.saturating_add(1)
                } else {
                    1
                };
                e.calm_tick = tick;
                if e.calm >= self.cfg.hysteresis.max(1) {
                    self.entries.remove(&target);
                    out.push((target, Unblock::Calm));
                }
            }
        }
        // Entries above the threshold show a zero streak.
        for e in self.entries.values_mut() {
            if e.calm_tick != tick {
                e.calm = 0;
            }
        }
        out
    }

    /// The entry for `target`, if blocked.
    pub fn get(&self, target: &Target) -> Option<&BlockEntry> {
        self.entries.get(target)
    }

    /// Number of blocked entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is blocked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries, heaviest first (what `xdns guard list` prints).
    pub fn entries(&self) -> Vec<&BlockEntry> {
        let mut v: Vec<&BlockEntry> = self.entries.values().collect();
        v.sort_by(|a, b| {
            b.rate
                .total_cmp(&a.rate)
                .then_with(|| a.target.cmp(&b.target))
        });
        v
    }

    /// The blocked source prefixes with their rates (the input of [`crate::topk::TopK::plan`]).
    pub fn source_rates(&self) -> Vec<(Prefix, f64)> {
        let mut v: Vec<(Prefix, f64)> = self
            .entries
            .values()
            .filter_map(|e| match e.target {
                Target::Source(p) => Some((p, e.rate)),
                Target::UnknownLabels(_) => None,
            })
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }
}

/// Parses a duration as `xdns guard block --for` takes it: `90`, `90s`, `10m`, `2h`, `1d`.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?} (e.g. 90s, 10m, 2h, 1d)"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "bad duration unit {unit:?} in {s:?} (s, m, h or d)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("duration {s:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn p(s: &str) -> Target {
        Target::Source(crate::lists::parse_prefix(s).unwrap())
    }

    fn host(i: u8) -> Target {
        Target::Source(Prefix::host(IpAddr::from([192, 0, 2, i])))
    }

    fn th(pps: f64) -> Thresholds {
        Thresholds {
            source_pps: pps,
            suffix_qps: 50.0,
        }
    }

    fn cfg(hysteresis: u32, detected_ttl: Option<u64>) -> MonitorConfig {
        MonitorConfig {
            hysteresis,
            detected_ttl,
            ..Default::default()
        }
    }

    #[test]
    fn calm_entries_leave_after_the_hysteresis_lowest_first() {
        let mut m = Monitor::new(cfg(3, None));
        for (i, rate) in [(1u8, 10.0), (2, 50.0), (3, 5000.0)] {
            assert_eq!(
                m.block(0, host(i), Origin::Detected, "rate", None, rate),
                Blocked::Added
            );
        }
        assert!(m.tick(1, th(100.0)).is_empty());
        assert!(m.tick(2, th(100.0)).is_empty());
        assert_eq!(m.get(&host(1)).unwrap().calm, 2);
        assert_eq!(m.get(&host(3)).unwrap().calm, 0);
        assert_eq!(
            m.tick(3, th(100.0)),
            vec![(host(1), Unblock::Calm), (host(2), Unblock::Calm)]
        );
        // The heavy one stays as long as it floods.
        for t in 4..20 {
            assert!(m.tick(t, th(100.0)).is_empty());
        }
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn a_pulse_above_the_threshold_restarts_the_streak() {
        let mut m = Monitor::new(cfg(3, None));
        let a = host(1);
        m.block(0, a.clone(), Origin::Detected, "rate", None, 10.0);
        assert!(m.tick(1, th(100.0)).is_empty());
        assert!(m.tick(2, th(100.0)).is_empty());
        m.set_rate(&a, 900.0); // the attack pulses back
        assert!(m.tick(3, th(100.0)).is_empty());
        assert_eq!(m.get(&a).unwrap().calm, 0);
        m.set_rate(&a, 10.0);
        m.set_rate(&a, f64::NAN); // ignored
        assert!(m.tick(4, th(100.0)).is_empty());
        assert!(m.tick(5, th(100.0)).is_empty());
        assert_eq!(m.tick(6, th(100.0)), vec![(a, Unblock::Calm)]);
    }

    #[test]
    fn suffix_blocks_are_walked_against_their_own_threshold() {
        let mut m = Monitor::new(cfg(2, None));
        let wt = Target::UnknownLabels(b"\x05zone3\x07example\x00".to_vec());
        assert_eq!(wt.to_string(), "*.zone3.example.");
        m.block(
            0,
            wt.clone(),
            Origin::Detected,
            "random subdomains",
            None,
            20_000.0,
        );
        m.block(0, host(1), Origin::Detected, "rate", None, 80.0);
        // 80 pkt/s is calm for a source (threshold 100) but the flood under the suffix goes on.
        assert!(m.tick(1, th(100.0)).is_empty());
        assert_eq!(m.tick(2, th(100.0)), vec![(host(1), Unblock::Calm)]);
        // The flood stops: 10 q/s < 50 for two intervals.
        m.set_rate(&wt, 10.0);
        assert!(m.tick(3, th(100.0)).is_empty());
        assert_eq!(m.tick(4, th(100.0)), vec![(wt, Unblock::Calm)]);
        assert_eq!(
            Target::UnknownLabels(b"\x03a.b\x01\x5c\x00".to_vec()).to_string(),
            "*.a\\046b.\\092.",
            "dots and backslashes inside labels are escaped"
        );
    }

    #[test]
    fn manual_entries_stay_until_their_time() {
        let mut m = Monitor::new(cfg(1, Some(3600)));
        let ttl = parse_duration("10m").unwrap();
        m.block(
            1000,
            p("198.51.100.0/24"),
            Origin::Manual,
            "manual",
            Some(ttl),
            0.0,
        );
        m.block(1000, p("203.0.113.7"), Origin::Manual, "manual", None, 0.0);
        for t in 1001..1600 {
            assert!(m.tick(t, th(1e9)).is_empty(), "t = {t}");
        }
        assert_eq!(
            m.tick(1600, th(1e9)),
            vec![(p("198.51.100.0/24"), Unblock::Expired)]
        );
        for t in 1601..5000 {
            assert!(m.tick(t, th(1e9)).is_empty());
        }
        assert!(
            m.get(&p("203.0.113.7")).is_some(),
            "no --for: only an operator removes it"
        );
        assert!(m.unblock(&p("203.0.113.7")).is_some());
        assert!(m.is_empty());
    }

    #[test]
    fn detected_entries_expire_and_reblocking_extends() {
        let mut m = Monitor::new(cfg(100, Some(60)));
        let a = host(9);
        m.block(0, a.clone(), Origin::Detected, "rate", None, 1e6);
        assert_eq!(
            m.block(50, a.clone(), Origin::Detected, "rate", None, 1e6),
            Blocked::Updated
        );
        assert!(m.tick(60, th(10.0)).is_empty(), "extended to 110");
        assert_eq!(m.tick(110, th(10.0)), vec![(a, Unblock::Expired)]);
    }

    #[test]
    fn manual_block_turns_a_detected_entry_manual() {
        let mut m = Monitor::new(cfg(1, Some(60)));
        let a = host(4);
        m.block(
            0,
            a.clone(),
            Origin::Detected,
            "rate 9000 pkt/s",
            None,
            9000.0,
        );
        m.block(1, a.clone(), Origin::Manual, "manual", None, 0.0);
        let e = m.get(&a).unwrap();
        assert_eq!(
            (e.origin, e.expires, e.reason.as_str()),
            (Origin::Manual, None, "manual")
        );
        // A later detection does not shorten or relabel it.
        m.block(2, a.clone(), Origin::Detected, "rate", None, 10.0);
        let e = m.get(&a).unwrap();
        assert_eq!(
            (e.origin, e.expires, e.reason.as_str()),
            (Origin::Manual, None, "manual")
        );
        assert!(m.tick(3, th(1e9)).is_empty());
        assert!(m.tick(100_000, th(1e9)).is_empty());
    }

    #[test]
    fn full_table_refuses_and_listing_order() {
        let mut m = Monitor::new(MonitorConfig {
            max_entries: 3,
            ..Default::default()
        });
        assert_eq!(
            m.block(0, host(2), Origin::Detected, "r", None, 1.0),
            Blocked::Added
        );
        assert_eq!(
            m.block(0, host(1), Origin::Detected, "r", None, 1.0),
            Blocked::Added
        );
        assert_eq!(
            m.block(0, host(3), Origin::Detected, "r", None, 7.0),
            Blocked::Added
        );
        assert_eq!(
            m.block(0, host(4), Origin::Detected, "r", None, 1.0),
            Blocked::Full
        );
        assert_eq!(m.len(), 3);
        let order: Vec<Target> = m.entries().iter().map(|e| e.target.clone()).collect();
        assert_eq!(
            order,
            vec![host(3), host(1), host(2)],
            "heaviest first, then prefix order"
        );
        let rates = m.source_rates();
        assert_eq!(rates.len(), 3);
        assert_eq!(rates[2].1, 7.0);
    }

    #[test]
    fn durations_parse() {
        let rows = [
            ("90", Ok(90)),
            ("90s", Ok(90)),
            ("10m", Ok(600)),
            ("2h", Ok(7200)),
            ("1d", Ok(86_400)),
        ];
        for (s, want) in rows {
            assert_eq!(parse_duration(s), want, "{s}");
        }
        for bad in ["", "m", "10x", "-5m", "1.5h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("999999999999999999d")
            .unwrap_err()
            .contains("too long"));
    }
}
