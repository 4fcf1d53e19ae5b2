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
//! Rates are what the kernel counted for the entry (packets dropped because of it) divided by
//! the interval; the daemon passes them with [`Monitor::set_rate`]. Time is in seconds on any
//! clock the caller likes, as long as it is the same one throughout.

use std::collections::HashMap;

use crate::lists::Prefix;

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
    pub prefix: Prefix,
    /// Who blocked it.
    pub origin: Origin,
    /// Why, in words (a [`crate::detect::Reason`] rendered, or "manual").
    pub reason: String,
    /// When it was first blocked (caller's seconds).
    pub since: u64,
    /// When it expires, if ever.
    pub expires: Option<u64>,
    /// Last measured rate, packets/s.
    pub rate_pps: f64,
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
    /// An operator removed it.
    Operator,
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
    entries: HashMap<Prefix, BlockEntry>,
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

    /// Blocks `prefix` at time `now`. `ttl` (seconds) applies to manual entries; detected
    /// entries use the configured `detected_ttl` unless `ttl` is given.
    pub fn block(
        &mut self,
        now: u64,
        prefix: Prefix,
        origin: Origin,
        reason: &str,
        ttl: Option<u64>,
        rate_pps: f64,
    ) -> Blocked {
        let ttl = match origin {
            Origin::Manual => ttl,
            Origin::Detected => ttl.or(self.cfg.detected_ttl),
        };
        let expires = ttl.map(|t| now.saturating_add(t));
        if let Some(e) = self.entries.get_mut(&prefix) {
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
            e.rate_pps = rate_pps;
            e.calm = 0;
            return Blocked::Updated;
        }
        if self.entries.len() >= self.cfg.max_entries {
            return Blocked::Full;
        }
        self.entries.insert(
            prefix,
            BlockEntry {
                prefix,
                origin,
                reason: reason.to_string(),
                since: now,
                expires,
                rate_pps,
                calm: 0,
                calm_tick: 0,
            },
        );
        Blocked::Added
    }

    /// Removes an entry on an operator's request.
    pub fn unblock(&mut self, prefix: &Prefix) -> Option<BlockEntry> {
        self.entries.remove(prefix)
    }

    /// Records the rate measured for an entry this interval (ignored if not blocked).
    pub fn set_rate(&mut self, prefix: &Prefix, pps: f64) {
        if let Some(e) = self.entries.get_mut(prefix) {
            e.rate_pps = if pps.is_finite() && pps >= 0.0 {
                pps
            } else {
                e.rate_pps
            };
        }
    }

    /// One interval: expires entries, then walks detected entries from the lowest rate up and
    /// unblocks those calm for `hysteresis` intervals. Returns what came off, for the kernel
    /// maps and the hardware tier.
    pub fn tick(&mut self, now: u64, threshold_pps: f64) -> Vec<(Prefix, Unblock)> {
        self.tick += 1;
        let tick = self.tick;
        let mut out: Vec<(Prefix, Unblock)> = self
            .entries
            .values()
            .filter(|e| e.expires.is_some_and(|x| x <= now))
            .map(|e| (e.prefix, Unblock::Expired))
            .collect();
        out.sort_by_key(|e| e.0);
        for (p, _) in &out {
            self.entries.remove(p);
        }

        let mut walk: Vec<(f64, Prefix)> = self
            .entries
            .values()
            .filter(|e| e.origin == Origin::Detected)
            .map(|e| (e.rate_pps, e.prefix))
            .collect();
        walk.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut calm_out = Vec::new();
        for (rate, prefix) in walk {
            // Stop at the first rate at or above the threshold (or a NaN threshold).
            if rate.partial_cmp(&threshold_pps) != Some(std::cmp::Ordering::Less) {
                break;
            }
            let Some(e) = self.entries.get_mut(&prefix) else {
                continue;
            };
            // An entry not visited last tick was above the threshold then: its streak restarts.
            e.calm = if e.calm_tick + 1 == tick {
                e.calm.saturating_add(1)
            } else {
                1
            };
            e.calm_tick = tick;
            if e.calm >= self.cfg.hysteresis.max(1) {
                calm_out.push(prefix);
            }
        }
        for p in calm_out {
            self.entries.remove(&p);
            out.push((p, Unblock::Calm));
        }
        // Entries above the threshold show a zero streak.
        for e in self.entries.values_mut() {
            if e.calm_tick != tick {
                e.calm = 0;
            }
        }
        out
    }

    /// The entry for `prefix`, if blocked.
    pub fn get(&self, prefix: &Prefix) -> Option<&BlockEntry> {
        self.entries.get(prefix)
    }

    /// Number of blocked entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is blocked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries, heaviest first (what `xdns guard list` prints, and the input of top-K).
    pub fn entries(&self) -> Vec<&BlockEntry> {
        let mut v: Vec<&BlockEntry> = self.entries.values().collect();
        v.sort_by(|a, b| {
            b.rate_pps
                .total_cmp(&a.rate_pps)
                .then(a.prefix.cmp(&b.prefix))
        });
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

    fn p(s: &str) -> Prefix {
        crate::lists::parse_prefix(s).unwrap()
    }

    fn ip_host(i: u8) -> Prefix {
        Prefix::host(IpAddr::from([192, 0, 2, i]))
    }

    #[test]
    fn calm_entries_leave_after_the_hysteresis_lowest_first() {
        let mut m = Monitor::new(MonitorConfig {
            hysteresis: 3,
            detected_ttl: None,
            ..Default::default()
        });
        for (i, rate) in [(1u8, 10.0), (2, 50.0), (3, 5000.0)] {
            assert_eq!(
                m.block(0, ip_host(i), Origin::Detected, "rate", None, rate),
                Blocked::Added
            );
        }
        let threshold = 100.0;
        assert!(m.tick(1, threshold).is_empty());
        assert!(m.tick(2, threshold).is_empty());
        assert_eq!(m.get(&ip_host(1)).unwrap().calm, 2);
        assert_eq!(m.get(&ip_host(3)).unwrap().calm, 0);
        let out = m.tick(3, threshold);
        assert_eq!(
            out,
            vec![(ip_host(1), Unblock::Calm), (ip_host(2), Unblock::Calm)]
        );
        // The heavy one stays as long as it floods.
        for t in 4..20 {
            assert!(m.tick(t, threshold).is_empty());
        }
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn a_pulse_above_the_threshold_restarts_the_streak() {
        let mut m = Monitor::new(MonitorConfig {
            hysteresis: 3,
            detected_ttl: None,
            ..Default::default()
        });
        let a = ip_host(1);
        m.block(0, a, Origin::Detected, "rate", None, 10.0);
        assert!(m.tick(1, 100.0).is_empty());
        assert!(m.tick(2, 100.0).is_empty());
        m.set_rate(&a, 900.0); // the attack pulses back
        assert!(m.tick(3, 100.0).is_empty());
        assert_eq!(m.get(&a).unwrap().calm, 0);
        m.set_rate(&a, 10.0);
        assert!(m.tick(4, 100.0).is_empty());
        assert!(m.tick(5, 100.0).is_empty());
        assert_eq!(m.tick(6, 100.0), vec![(a, Unblock::Calm)]);
    }

    #[test]
    fn manual_entries_stay_until_their_time() {
        let mut m = Monitor::new(MonitorConfig {
            hysteresis: 1,
            ..Default::default()
        });
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
            assert!(m.tick(t, 1e9).is_empty(), "t = {t}");
        }
        assert_eq!(
            m.tick(1600, 1e9),
            vec![(p("198.51.100.0/24"), Unblock::Expired)]
        );
        for t in 1601..5000 {
            assert!(m.tick(t, 1e9).is_empty());
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
        let mut m = Monitor::new(MonitorConfig {
            hysteresis: 100,
            detected_ttl: Some(60),
            ..Default::default()
        });
        let a = ip_host(9);
        m.block(0, a, Origin::Detected, "rate", None, 1e6);
        assert_eq!(
            m.block(50, a, Origin::Detected, "rate", None, 1e6),
            Blocked::Updated
        );
        assert!(m.tick(60, 10.0).is_empty(), "extended to 110");
        assert_eq!(m.tick(110, 10.0), vec![(a, Unblock::Expired)]);
    }

    #[test]
    fn manual_block_turns_a_detected_entry_manual() {
        let mut m = Monitor::new(MonitorConfig {
            hysteresis: 1,
            detected_ttl: Some(60),
            ..Default::default()
        });
        let a = ip_host(4);
        m.block(0, a, Origin::Detected, "rate 9000 pkt/s", None, 9000.0);
        m.block(1, a, Origin::Manual, "manual", None, 0.0);
        let e = m.get(&a).unwrap();
        assert_eq!(
            (e.origin, e.expires, e.reason.as_str()),
            (Origin::Manual, None, "manual")
        );
        // A later detection does not shorten or relabel it.
        m.block(2, a, Origin::Detected, "rate", None, 10.0);
        let e = m.get(&a).unwrap();
        assert_eq!(
            (e.origin, e.expires, e.reason.as_str()),
            (Origin::Manual, None, "manual")
        );
        assert!(m.tick(3, 1e9).is_empty());
        assert!(m.tick(100_000, 1e9).is_empty());
    }

    #[test]
    fn full_table_refuses_and_durations_parse() {
        let mut m = Monitor::new(MonitorConfig {
            max_entries: 2,
            ..Default::default()
        });
        assert_eq!(
            m.block(0, ip_host(1), Origin::Detected, "r", None, 1.0),
            Blocked::Added
        );
        assert_eq!(
            m.block(0, ip_host(2), Origin::Detected, "r", None, 1.0),
            Blocked::Added
        );
        assert_eq!(
            m.block(0, ip_host(3), Origin::Detected, "r", None, 1.0),
            Blocked::Full
        );
        assert_eq!(m.len(), 2);
        assert_eq!(
            m.entries()[0].prefix,
            ip_host(1),
            "equal rates: prefix order"
        );

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
