//! Per-interval attack detection on a snapshot of traffic features.
//!
//! Why: blocklists written by hand come too late for a flood. Each interval (≤ 1 s) the
//! daemon reads the kernel's per-CPU feature counters into a [`Snapshot`] and asks the
//! [`Detector`] what to block; the decisions, each with its [`Reason`], go to the blocklist
//! maps and to `xdns guard list`. The detector keeps only small learned state (baselines,
//! a bounded set of suspects and of known labels), never reads a clock, and never blocks a
//! source the allowlist covers.
//!
//! What it decides, in order:
//! 1. **Per-source rate.** A source prefix whose packet rate exceeds the learned threshold in
//!    [`DetectConfig::confirm`] consecutive intervals is blocked, at once if it is over
//!    [`DetectConfig::immediate`] times the threshold. The threshold is
//!    `max(min_threshold_pps, margin × baseline)`, where the baseline is an EWMA of a high
//!    quantile (default: the maximum) of the per-source rates seen in *quiet* intervals. The
//!    maximum rather than a median+MAD is learned on purpose: a legitimate heavy client (a big
//!    resolver) is the tail of normal traffic, and a median-based bound would block it. To keep
//!    an attacker from teaching the baseline upwards, learning is frozen in every interval with
//!    any finding, and one quiet interval may raise the baseline by at most `max_growth`×.
//! 2. **Entropy shifts.** Shannon entropy (bits) of the source distribution and of the qname
//!    suffix distribution, compared with an EWMA mean and mean absolute deviation learned in
//!    quiet intervals: a shift beyond `max(entropy_k × deviation, entropy_min_shift)` raises an
//!    [`Action::Alarm`] (many spoofed small sources raise source entropy; one hammered zone
//!    lowers qname entropy). An alarm blocks nothing by itself but freezes learning.
//! 3. **Random subdomain ("water torture").** A suffix with at least `wt_min_qps` queries/s,
//!    whose queries are mostly distinct labels (`distinct_labels / queries ≥ wt_unique_share`)
//!    and mostly NXDOMAIN (`≥ wt_nx_share`), is blocked *for unknown labels only*: the action
//!    carries the labels that must keep being answered — those the daemon declared from the
//!    zone ([`Detector::set_known_labels`]) plus those learned from answered queries in quiet
//!    intervals.
//! 4. **Amplification.** A source (the victim, as the spoofed queries carry its address) that
//!    receives more than `amp_min_bps` response bytes/s at more than `amp_factor`× the bytes it
//!    sent, or whose queries are mostly `ANY` (`≥ any_share` of them, at ≥ `any_min_qps`), is
//!    blocked.
//!
//! The first `warmup` intervals only learn. The snapshot's source granularity (host or prefix)
//! is the kernel's choice; the detector blocks what it is given.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::lists::{Prefix, PrefixList};

/// Traffic of one source prefix during the interval.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceStat {
    /// The source prefix (the kernel's aggregation: host, /24, /56, …).
    pub prefix: Prefix,
    /// Queries (packets) received from it.
    pub packets: u64,
    /// Bytes received from it.
    pub bytes: u64,
    /// Of its queries, how many asked for `ANY`.
    pub any_queries: u64,
    /// Bytes of responses sent to it.
    pub response_bytes: u64,
}

/// Queries for one label directly left of a suffix, as sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelStat {
    /// The label, lowercase, without its length byte.
    pub label: Vec<u8>,
    /// Queries for names under this label.
    pub queries: u64,
    /// Of those, how many were answered NXDOMAIN.
    pub nxdomain: u64,
}

/// Queries under one qname suffix (the zone, or the parent of the queried name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuffixStat {
    /// The suffix in lowercase wire format.
    pub suffix: Vec<u8>,
    /// Queries whose name is under the suffix.
    pub queries: u64,
    /// Of those, answered NXDOMAIN.
    pub nxdomain: u64,
    /// Distinct labels directly left of the suffix (an estimate is fine).
    pub distinct_labels: u64,
    /// A sample of those labels with their counts (may be empty); used to learn known labels.
    pub labels: Vec<LabelStat>,
}

/// The features of one interval.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// Length of the interval in seconds; a non-positive or non-finite value counts as 1.
    pub seconds: f64,
    /// Per source prefix.
    pub sources: Vec<SourceStat>,
    /// Per qname suffix.
    pub suffixes: Vec<SuffixStat>,
}

/// Detection parameters; see the module docs for what each controls.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectConfig {
    /// Intervals that only learn, at start. Default 3.
    pub warmup: u32,
    /// Floor of the per-source threshold, packets/s. Default 200 (RRL's default rate).
    pub min_threshold_pps: f64,
    /// Threshold = margin × baseline. Default 2.
    pub margin: f64,
    /// Quantile of per-source rates learned, 0..=1. Default 1 (the maximum).
    pub quantile: f64,
    /// EWMA weight of a new quiet interval. Default 0.1.
    pub alpha: f64,
    /// A quiet interval may raise the baseline at most this factor. Default 2.
    pub max_growth: f64,
    /// Consecutive intervals over threshold before a block. Default 2.
    pub confirm: u32,
    /// A source over `immediate × threshold` is blocked in its first interval over, without
    /// waiting for `confirm`: a flood far above anything legitimate loses its victims' answers
    /// for one interval fewer (docs/perf/2026-11-29-guard-goals.md). Default 10;
    /// `f64::INFINITY` always confirms.
    pub immediate: f64,
    /// Entropy alarm at this many mean absolute deviations. Default 4.
    pub entropy_k: f64,
    /// Smallest entropy shift (bits) that raises an alarm. Default 1.
    pub entropy_min_shift: f64,
    /// Water torture: minimum queries/s under the suffix. Default 50.
    pub wt_min_qps: f64,
    /// Water torture: minimum share of distinct labels among queries. Default 0.5.
    pub wt_unique_share: f64,
    /// Water torture: minimum NXDOMAIN share. Default 0.5.
    pub wt_nx_share: f64,
    /// Labels remembered per suffix. Default 4096.
    pub max_known_labels: usize,
    /// Suffixes whose labels are remembered. Default 4096.
    pub max_suffixes: usize,
    /// Amplification: minimum response bytes/s to one source. Default 1,000,000.
    pub amp_min_bps: f64,
    /// Amplification: minimum response/query byte ratio. Default 10.
    pub amp_factor: f64,
    /// ANY flood: minimum share of ANY among a source's queries. Default 0.5.
    pub any_share: f64,
    /// ANY flood: minimum ANY queries/s from the source. Default 20.
    pub any_min_qps: f64,
    /// Sources over threshold remembered for confirmation. Default 1,048,576.
    pub max_suspects: usize,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            warmup: 3,
            min_threshold_pps: 200.0,
            margin: 2.0,
            quantile: 1.0,
            alpha: 0.1,
            max_growth: 2.0,
            confirm: 2,
            immediate: 10.0,
            entropy_k: 4.0,
            entropy_min_shift: 1.0,
            wt_min_qps: 50.0,
            wt_unique_share: 0.5,
            wt_nx_share: 0.5,
            max_known_labels: 4096,
            max_suffixes: 4096,
            amp_min_bps: 1_000_000.0,
            amp_factor: 10.0,
            any_share: 0.5,
            any_min_qps: 20.0,
            max_suspects: 1 << 20,
        }
    }
}

/// Which distribution an entropy alarm is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Packets per source prefix.
    Sources,
    /// Queries per qname suffix.
    Qnames,
}

/// Why an action was taken; `Display` is the text of `xdns guard list`'s reason column.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The source's rate was over the learned threshold.
    Rate {
        /// Its packets/s.
        pps: f64,
        /// The threshold, packets/s.
        threshold: f64,
    },
    /// An entropy shift.
    Entropy {
        /// Which distribution.
        of: Distribution,
        /// Entropy this interval, bits.
        bits: f64,
        /// Learned mean, bits.
        baseline: f64,
    },
    /// Random-subdomain flood under a suffix.
    RandomSubdomain {
        /// Queries/s under the suffix.
        qps: f64,
        /// Distinct labels / queries.
        unique_share: f64,
        /// NXDOMAIN / queries.
        nx_share: f64,
    },
    /// Responses to the source far larger than its queries (reflection victim).
    Amplification {
        /// Response bytes/s to the source.
        bps: f64,
        /// Response bytes / query bytes.
        factor: f64,
    },
    /// Mostly `ANY` queries from the source.
    AnyFlood {
        /// ANY queries/s.
        qps: f64,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Rate { pps, threshold } => {
                write!(f, "rate {pps:.0} pkt/s > learned threshold {threshold:.0}")
            }
            Reason::Entropy { of, bits, baseline } => {
                let what = match of {
                    Distribution::Sources => "source",
                    Distribution::Qnames => "qname",
                };
                write!(f, "{what} entropy {bits:.2} bits vs baseline {baseline:.2}")
            }
            Reason::RandomSubdomain {
                qps,
                unique_share,
                nx_share,
            } => write!(
                f,
                "random subdomains: {qps:.0} q/s, {:.0}% unique labels, {:.0}% NXDOMAIN",
                unique_share * 100.0,
                nx_share * 100.0
            ),
            Reason::Amplification { bps, factor } => {
                write!(
                    f,
                    "amplification: {bps:.0} response B/s, {factor:.1}x the query bytes"
                )
            }
            Reason::AnyFlood { qps } => write!(f, "ANY flood: {qps:.0} ANY q/s"),
        }
    }
}

/// What the daemon should do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Block this source prefix; `pps` is its measured rate (for the monitor and top-K).
    BlockSource {
        /// The prefix to block.
        prefix: Prefix,
        /// Its packets/s this interval.
        pps: f64,
    },
    /// Drop queries under `suffix` whose label directly left of it is not in `keep`.
    BlockUnknownLabels {
        /// The suffix, lowercase wire format.
        suffix: Vec<u8>,
        /// Labels (lowercase, no length byte) that must still be answered; sorted.
        keep: Vec<Vec<u8>>,
    },
    /// Something is wrong but nothing specific to block; learning is frozen.
    Alarm,
}

/// One decision with its reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// What to do.
    pub action: Action,
    /// Why.
    pub reason: Reason,
}

/// The outcome of one interval.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// Decisions, sources first.
    pub findings: Vec<Finding>,
    /// The per-source threshold in force this interval, packets/s (the monitor's
    /// normal-traffic threshold).
    pub threshold_pps: f64,
    /// Whether learning was skipped this interval because something was found or suspected.
    pub frozen: bool,
}

/// EWMA of a value and of its absolute deviation.
#[derive(Debug, Clone, Copy, Default)]
struct Baseline {
    mean: f64,
    dev: f64,
    n: u32,
}

impl Baseline {
    fn learn(&mut self, x: f64, alpha: f64) {
        if self.n == 0 {
            self.mean = x;
            self.dev = 0.0;
        } else {
            self.dev = (1.0 - alpha) * self.dev + alpha * (x - self.mean).abs();
            self.mean = (1.0 - alpha) * self.mean + alpha * x;
        }
        self.n = self.n.saturating_add(1);
    }
}

/// The detector: learned baselines and bounded memory between intervals.
#[derive(Debug, Clone)]
pub struct Detector {
    cfg: DetectConfig,
    allow: PrefixList,
    intervals: u32,
    rate: Baseline,
    src_entropy: Baseline,
    qname_entropy: Baseline,
    suspects: HashMap<Prefix, u32>,
    declared: HashMap<Vec<u8>, HashSet<Vec<u8>>>,
    learned: HashMap<Vec<u8>, HashSet<Vec<u8>>>,
}

impl Detector {
    /// A detector with nothing learned; `allow` is the allowlist (never blocked).
    pub fn new(cfg: DetectConfig, allow: PrefixList) -> Self {
        Detector {
            cfg,
            allow,
            intervals: 0,
            rate: Baseline::default(),
            src_entropy: Baseline::default(),
            qname_entropy: Baseline::default(),
            suspects: HashMap::new(),
            declared: HashMap::new(),
            learned: HashMap::new(),
        }
    }

    /// The configuration in force (`wt_min_qps` is the monitor's suffix threshold).
    pub fn config(&self) -> &DetectConfig {
        &self.cfg
    }

    /// Replaces the allowlist (on reload).
    pub fn set_allowlist(&mut self, allow: PrefixList) {
        self.allow = allow;
    }

    /// Declares the labels directly under `suffix` that exist in the zone (the daemon knows
    /// them from the zone data); they are always in a water-torture block's `keep`.
    pub fn set_known_labels(&mut self, suffix: &[u8], labels: impl IntoIterator<Item = Vec<u8>>) {
        let set: HashSet<Vec<u8>> = labels
            .into_iter()
            .map(|l| l.to_ascii_lowercase())
            .take(self.cfg.max_known_labels)
            .collect();
        self.declared.insert(suffix.to_ascii_lowercase(), set);
    }

    /// The per-source threshold (packets/s) that would apply now.
    pub fn threshold_pps(&self) -> f64 {
        let learned = if self.rate.n == 0 {
            0.0
        } else {
            self.cfg.margin * self.rate.mean
        };
        learned.max(self.cfg.min_threshold_pps)
    }

    /// Whether an allowlist entry overlaps `p` (covers it, or lies inside it): blocking `p`
    /// would then drop an allowlisted address. Linear in the allowlist for the second case;
    /// allowlists are short.
    pub fn is_allowed(&self, p: &Prefix) -> bool {
        let network = match p {
            Prefix::V4(v) => std::net::IpAddr::from(v.addr),
            Prefix::V6(v) => std::net::IpAddr::from(v.addr),
        };
        if self
            .allow
            .longest_match(network)
            .is_some_and(|a| a.len() <= p.len())
        {
            return true;
        }
        match p {
            Prefix::V4(_) => self
                .allow
                .v4
                .iter()
                .any(|a| a.len >= p.len() && p.contains(a.addr.into())),
            Prefix::V6(_) => self
                .allow
                .v6
                .iter()
                .any(|a| a.len >= p.len() && p.contains(a.addr.into())),
        }
    }

    /// Examines one interval and returns what to block and why.
    pub fn observe(&mut self, snap: &Snapshot) -> Report {
        let secs = if snap.seconds.is_finite() && snap.seconds > 0.0 {
            snap.seconds
        } else {
            1.0
        };
        let warm = self.intervals >= self.cfg.warmup;
        self.intervals = self.intervals.saturating_add(1);
        let threshold = self.threshold_pps();
        let mut findings = Vec::new();

        // 1 and 4: per source.
        let mut suspects = HashMap::new();
        for s in &snap.sources {
            if self.is_allowed(&s.prefix) {
                continue;
            }
            let pps = s.packets as f64 / secs;
            let resp_bps = s.response_bytes as f64 / secs;
            let factor = s.response_bytes as f64 / (s.bytes.max(1)) as f64;
            let any_qps = s.any_queries as f64 / secs;
            let reason = if resp_bps > self.cfg.amp_min_bps && factor > self.cfg.amp_factor {
                Some(Reason::Amplification {
                    bps: resp_bps,
                    factor,
                })
            } else if any_qps >= self.cfg.any_min_qps
                && s.any_queries as f64 >= self.cfg.any_share * s.packets as f64
            {
                Some(Reason::AnyFlood { qps: any_qps })
            } else if warm && pps > threshold {
                let seen = self.suspects.get(&s.prefix).copied().unwrap_or(0) + 1;
                if seen >= self.cfg.confirm || pps > self.cfg.immediate * threshold {
                    Some(Reason::Rate { pps, threshold })
                } else {
                    if suspects.len() < self.cfg.max_suspects {
                        suspects.insert(s.prefix, seen);
                    }
                    None
                }
            } else {
                None
            };
            if let Some(reason) = reason {
                findings.push(Finding {
                    action: Action::BlockSource {
                        prefix: s.prefix,
                        pps,
                    },
                    reason,
                });
            }
        }
        self.suspects = suspects;
        let suspicious = !self.suspects.is_empty();

        // 3: random subdomains.
        for sfx in &snap.suffixes {
            let q = sfx.queries as f64;
            if q <= 0.0 {
                continue;
            }
            let qps = q / secs;
            let unique_share = (sfx.distinct_labels as f64 / q).min(1.0);
            let nx_share = (sfx.nxdomain as f64 / q).min(1.0);
            if qps >= self.cfg.wt_min_qps
                && unique_share >= self.cfg.wt_unique_share
                && nx_share >= self.cfg.wt_nx_share
            {
                let suffix = sfx.suffix.to_ascii_lowercase();
                let mut keep: Vec<Vec<u8>> = self
                    .declared
                    .get(&suffix)
                    .into_iter()
                    .chain(self.learned.get(&suffix))
                    .flatten()
                    .cloned()
                    .collect();
                keep.sort();
                keep.dedup();
                findings.push(Finding {
                    action: Action::BlockUnknownLabels { suffix, keep },
                    reason: Reason::RandomSubdomain {
                        qps,
                        unique_share,
                        nx_share,
                    },
                });
            }
        }

        // 2: entropy.
        let h_src = entropy(snap.sources.iter().map(|s| s.packets));
        let h_q = entropy(snap.suffixes.iter().map(|s| s.queries));
        for (of, h, base) in [
            (Distribution::Sources, h_src, &self.src_entropy),
            (Distribution::Qnames, h_q, &self.qname_entropy),
        ] {
            if warm && base.n > 0 {
                let bound = (self.cfg.entropy_k * base.dev).max(self.cfg.entropy_min_shift);
                if (h - base.mean).abs() > bound {
                    findings.push(Finding {
                        action: Action::Alarm,
                        reason: Reason::Entropy {
                            of,
                            bits: h,
                            baseline: base.mean,
                        },
                    });
                }
            }
        }

        // Learning, only in quiet intervals.
        let frozen = !findings.is_empty() || suspicious;
        if !frozen {
            self.learn(snap, secs, h_src, h_q);
        }
        Report {
            findings,
            threshold_pps: threshold,
            frozen,
        }
    }

    fn learn(&mut self, snap: &Snapshot, secs: f64, h_src: f64, h_q: f64) {
        let a = self.cfg.alpha;
        let mut rates: Vec<f64> = snap
            .sources
            .iter()
            .filter(|s| !self.is_allowed(&s.prefix))
            .map(|s| s.packets as f64 / secs)
            .collect();
        if !rates.is_empty() {
            let q = self.cfg.quantile.clamp(0.0, 1.0);
            let k = ((rates.len() - 1) as f64 * q).round() as usize;
            let k = k.min(rates.len() - 1);
            let (_, x, _) = rates.select_nth_unstable_by(k, |a, b| a.total_cmp(b));
            let mut x = *x;
            if self.rate.n > 0 {
                x = x.min(self.rate.mean * self.cfg.max_growth.max(1.0));
            }
            if x.is_finite() {
                self.rate.learn(x, a);
            }
        }
        if h_src.is_finite() && h_q.is_finite() {
            self.src_entropy.learn(h_src, a);
            self.qname_entropy.learn(h_q, a);
        }
        for sfx in &snap.suffixes {
            let key = sfx.suffix.to_ascii_lowercase();
            if !self.learned.contains_key(&key) && self.learned.len() >= self.cfg.max_suffixes {
                continue;
            }
            let answered: Vec<Vec<u8>> = sfx
                .labels
                .iter()
                .filter(|l| l.queries > l.nxdomain)
                .map(|l| l.label.to_ascii_lowercase())
                .collect();
            if answered.is_empty() {
                continue;
            }
            let set = self.learned.entry(key).or_default();
            for l in answered {
                if set.len() >= self.cfg.max_known_labels {
                    break;
                }
                set.insert(l);
            }
        }
    }
}

/// Shannon entropy in bits of the distribution given by counts.
pub fn entropy(counts: impl Iterator<Item = u64> + Clone) -> f64 {
    let total: f64 = counts.clone().map(|c| c as f64).sum();
    if total <= 0.0 {
        return 0.0;
    }
    counts
        .filter(|&c| c > 0)
        .map(|c| {
            let p = c as f64 / total;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lists::parse_prefix_list;
    use std::net::{IpAddr, Ipv4Addr};

    fn v4(i: u32) -> Prefix {
        Prefix::host(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
    }

    fn src(prefix: Prefix, packets: u64) -> SourceStat {
        SourceStat {
            prefix,
            packets,
            bytes: packets.saturating_mul(40),
            any_queries: 0,
            response_bytes: packets.saturating_mul(100),
        }
    }

    fn wire(name: &str) -> Vec<u8> {
        crate::lists::name_to_wire(name).unwrap()
    }

    /// Normal traffic: 200 sources at 5..25 pkt/s, one heavy resolver at 150 pkt/s, queries
    /// over 20 zones with a few labels each, all answered.
    fn normal(tick: u64) -> Snapshot {
        let mut sources: Vec<SourceStat> = (0..200)
            .map(|i| src(v4(i), 5 + (i as u64 * 7 + tick) % 21))
            .collect();
        sources.push(src(v4(9999), 150 + tick % 10));
        let suffixes = (0..20)
            .map(|z| SuffixStat {
                suffix: wire(&format!("zone{z}.example")),
                queries: 100 + (z * 13 + tick) % 30,
                nxdomain: 2,
                distinct_labels: 4,
                labels: ["www", "mail", "api", "cdn"]
                    .iter()
                    .map(|l| LabelStat {
                        label: l.as_bytes().to_vec(),
                        queries: 25,
                        nxdomain: 0,
                    })
                    .collect(),
            })
            .collect();
        Snapshot {
            seconds: 1.0,
            sources,
            suffixes,
        }
    }

    fn trained() -> Detector {
        let mut d = Detector::new(DetectConfig::default(), PrefixList::new());
        for t in 0..30 {
            let r = d.observe(&normal(t));
            assert!(
                r.findings.is_empty(),
                "normal interval {t}: {:?}",
                r.findings
            );
        }
        d
    }

    fn blocked_sources(r: &Report) -> Vec<Prefix> {
        r.findings
            .iter()
            .filter_map(|f| match f.action {
                Action::BlockSource { prefix, .. } => Some(prefix),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn normal_traffic_blocks_nothing_and_learns_the_heavy_client() {
        let d = trained();
        let t = d.threshold_pps();
        assert!(
            t > 300.0 && t < 400.0,
            "threshold {t} = 2 × the heavy client's ~155 pkt/s"
        );
    }

    #[test]
    fn flood_from_n_sources_is_blocked_within_two_intervals() {
        let mut d = trained();
        let attackers: Vec<Prefix> = (0..50).map(|i| v4(100_000 + i)).collect();
        let mut blocked = HashSet::new();
        for interval in 0..2 {
            let mut snap = normal(100 + interval);
            snap.sources.extend(attackers.iter().map(|&p| src(p, 5000)));
            let r = d.observe(&snap);
            assert!(
                r.frozen,
                "interval {interval}: learning must freeze under attack"
            );
            blocked.extend(blocked_sources(&r));
            for f in &r.findings {
                if let Reason::Rate { pps, threshold } = f.reason {
                    assert_eq!(pps, 5000.0);
                    assert!(
                        threshold < 400.0,
                        "the flood did not teach the threshold: {threshold}"
                    );
                }
            }
        }
        let want: HashSet<Prefix> = attackers.iter().copied().collect();
        assert_eq!(blocked, want, "exactly the attackers, nobody else");
    }

    #[test]
    fn flood_far_over_threshold_is_blocked_in_its_first_interval() {
        // 5000 pkt/s is over 10× the threshold (~310): blocked at once; 1500 (about 5×)
        // waits for the second interval, as does everything with `immediate` off.
        for (immediate, pps, first) in [(10.0, 5000, true), (10.0, 1500, false), (f64::INFINITY, 5000, false)] {
            let mut d = trained();
            d.cfg.immediate = immediate;
            let attacker = v4(200_000);
            let mut snap = normal(100);
            snap.sources.push(src(attacker, pps));
            let got = blocked_sources(&d.observe(&snap));
            assert_eq!(got == vec![attacker], first, "immediate {immediate}, {pps} pkt/s: first interval blocked {got:?}");
            assert!(got.iter().all(|p| *p == attacker), "only the attacker: {got:?}");
            let mut snap = normal(101);
            snap.sources.push(src(attacker, pps));
            let got = blocked_sources(&d.observe(&snap));
            assert!(first || got == vec![attacker], "immediate {immediate}, {pps} pkt/s: second interval {got:?}");
        }
    }

    #[test]
    fn heavy_legitimate_client_under_threshold_is_never_blocked() {
        let mut d = trained();
        for t in 0..100 {
            let mut snap = normal(t);
            // The heavy client at 1.8× its usual rate, under the 2× margin.
            snap.sources.last_mut().unwrap().packets = 280;
            let r = d.observe(&snap);
            assert!(
                blocked_sources(&r).is_empty(),
                "interval {t}: {:?}",
                r.findings
            );
        }
    }

    #[test]
    fn slow_ramp_cannot_teach_the_threshold_fast() {
        let mut d = trained();
        let before = d.threshold_pps();
        // A source doubles its rate every quiet interval it is not caught.
        let mut rate = 200u64;
        let mut caught = false;
        for t in 0..20 {
            let mut snap = normal(t);
            snap.sources.push(src(v4(77_777), rate));
            let r = d.observe(&snap);
            if blocked_sources(&r).contains(&v4(77_777)) {
                caught = true;
                break;
            }
            rate *= 2;
        }
        assert!(
            caught,
            "threshold went from {before} to {}",
            d.threshold_pps()
        );
    }

    #[test]
    fn allowlisted_sources_are_never_blocked() {
        let allow = parse_prefix_list("trusted.txt", "10.1.0.0/16\n10.0.0.7\n").unwrap();
        let mut d = Detector::new(
            DetectConfig {
                warmup: 0,
                confirm: 1,
                ..DetectConfig::default()
            },
            allow,
        );
        let flood = Snapshot {
            seconds: 1.0,
            sources: vec![
                src(v4(7), 1_000_000), // allowlisted host
                src(Prefix::covering("10.1.2.3".parse().unwrap(), 24), 1_000_000), // inside an allowed /16
                src(Prefix::covering("10.0.0.0".parse().unwrap(), 24), 1_000_000), // contains 10.0.0.7
                src(v4(8), 1_000_000),
            ],
            suffixes: vec![],
        };
        let r = d.observe(&flood);
        assert_eq!(blocked_sources(&r), vec![v4(8)]);
    }

    #[test]
    fn random_subdomain_flood_blocks_unknown_labels_only() {
        let mut d = trained();
        let victim = wire("zone3.example");
        d.set_known_labels(&victim, [b"ftp".to_vec()]);
        let mut snap = normal(200);
        let s = snap
            .suffixes
            .iter_mut()
            .find(|s| s.suffix == victim)
            .unwrap();
        s.queries = 20_000;
        s.nxdomain = 19_950;
        s.distinct_labels = 19_800;
        let r = d.observe(&snap);
        let wt: Vec<_> = r
            .findings
            .iter()
            .filter_map(|f| match &f.action {
                Action::BlockUnknownLabels { suffix, keep } => {
                    Some((suffix.clone(), keep.clone(), f.reason.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(wt.len(), 1, "{:?}", r.findings);
        assert_eq!(wt[0].0, victim);
        let keep: Vec<&[u8]> = wt[0].1.iter().map(|l| &l[..]).collect();
        assert_eq!(
            keep,
            vec![&b"api"[..], b"cdn", b"ftp", b"mail", b"www"],
            "declared + learned names still answer"
        );
        assert!(wt[0]
            .2
            .to_string()
            .starts_with("random subdomains: 20000 q/s, 99% unique labels, 100% NXDOMAIN"));
        assert!(
            blocked_sources(&r).is_empty(),
            "no source is blamed for a spread-out PRSD flood"
        );
    }

    #[test]
    fn busy_zone_with_few_labels_is_not_water_torture() {
        let mut d = trained();
        let mut snap = normal(300);
        // Ten times the traffic, but the same few labels, mostly answered.
        snap.suffixes[0].queries = 50_000;
        snap.suffixes[0].nxdomain = 100;
        let r = d.observe(&snap);
        assert!(!r
            .findings
            .iter()
            .any(|f| matches!(f.action, Action::BlockUnknownLabels { .. })));
        // Unique labels that are answered (a wildcard zone) are not either.
        let mut snap = normal(301);
        snap.suffixes[1].queries = 50_000;
        snap.suffixes[1].distinct_labels = 49_000;
        snap.suffixes[1].nxdomain = 10;
        let r = d.observe(&snap);
        assert!(!r
            .findings
            .iter()
            .any(|f| matches!(f.action, Action::BlockUnknownLabels { .. })));
    }

    #[test]
    fn amplification_and_any_floods() {
        let mut d = trained();
        let mut snap = normal(400);
        // Victim: small queries, 2 MB/s of answers, 50×.
        snap.sources.push(SourceStat {
            prefix: v4(5000),
            packets: 1000,
            bytes: 40_000,
            any_queries: 0,
            response_bytes: 2_000_000,
        });
        // ANY from a low-rate source.
        snap.sources.push(SourceStat {
            prefix: v4(5001),
            packets: 60,
            bytes: 2400,
            any_queries: 50,
            response_bytes: 60_000,
        });
        let r = d.observe(&snap);
        let reasons: Vec<(Prefix, String)> = r
            .findings
            .iter()
            .filter_map(|f| match f.action {
                Action::BlockSource { prefix, .. } => Some((prefix, f.reason.to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(
            reasons,
            vec![
                (
                    v4(5000),
                    "amplification: 2000000 response B/s, 50.0x the query bytes".to_string()
                ),
                (v4(5001), "ANY flood: 50 ANY q/s".to_string()),
            ]
        );
    }

    #[test]
    fn entropy_shift_raises_an_alarm_and_freezes_learning() {
        let mut d = trained();
        let before = d.threshold_pps();
        let mut snap = normal(500);
        // 20,000 spoofed sources at 3 pkt/s each: under every per-source threshold.
        snap.sources
            .extend((0..20_000).map(|i| src(v4(200_000 + i), 3)));
        let r = d.observe(&snap);
        assert!(blocked_sources(&r).is_empty());
        let alarm = r
            .findings
            .iter()
            .find(|f| f.action == Action::Alarm)
            .expect("an alarm");
        match alarm.reason {
            Reason::Entropy {
                of: Distribution::Sources,
                bits,
                baseline,
            } => assert!(bits > baseline + 1.0),
            ref other => panic!("{other:?}"),
        }
        assert!(r.frozen);
        assert_eq!(d.threshold_pps(), before);
    }

    #[test]
    fn warmup_only_learns_and_odd_inputs_do_not_panic() {
        let mut d = Detector::new(DetectConfig::default(), PrefixList::new());
        let mut snap = normal(0);
        snap.sources.push(src(v4(1), 1_000_000));
        for _ in 0..3 {
            assert!(blocked_sources(&d.observe(&snap)).is_empty());
        }
        for seconds in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300] {
            let s = Snapshot {
                seconds,
                sources: vec![src(v4(3), u64::MAX), src(v4(4), 0)],
                suffixes: vec![SuffixStat {
                    suffix: vec![],
                    queries: u64::MAX,
                    nxdomain: u64::MAX,
                    distinct_labels: u64::MAX,
                    labels: vec![],
                }],
            };
            let _ = d.observe(&s);
        }
        let _ = d.observe(&Snapshot::default());
        assert!(d.threshold_pps().is_finite());
        assert_eq!(entropy([].into_iter()), 0.0);
        assert!((entropy([1u64, 1, 1, 1].into_iter()) - 2.0).abs() < 1e-9);
    }
}
