//! The modules together, as the daemon will drive them each interval: snapshot → detect →
//! monitor → top-K → hardware tier. A flood starts, is blocked, the heaviest sources go to the
//! tier, the flood stops, everything is lifted; the legitimate sources are never touched.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use xdns_guard::detect::{Action, DetectConfig, Detector, Snapshot, SourceStat};
use xdns_guard::lists::{Prefix, PrefixList};
use xdns_guard::monitor::{Monitor, MonitorConfig, Origin, Target, Thresholds};
use xdns_guard::topk::{apply, Candidate, HardwareTier, MemoryTier, TopK, TopKConfig};

fn host(net: u32, i: u32) -> Prefix {
    Prefix::host(IpAddr::V4(Ipv4Addr::from(net + i)))
}

fn stat(prefix: Prefix, packets: u64) -> SourceStat {
    SourceStat {
        prefix,
        packets,
        bytes: packets * 60,
        any_queries: 0,
        response_bytes: packets * 120,
    }
}

#[test]
fn flood_is_blocked_offloaded_and_lifted() {
    let legit: Vec<Prefix> = (0..100).map(|i| host(0x0a00_0000, i)).collect();
    // Ten attackers, 2k to 20k pkt/s.
    let attackers: Vec<(Prefix, u64)> = (0..10)
        .map(|i| (host(0xc000_0200, i), 2000 * (i as u64 + 1)))
        .collect();
    let attack = 20..40u64; // the intervals with a flood

    let mut detector = Detector::new(DetectConfig::default(), PrefixList::new());
    let mut monitor = Monitor::new(MonitorConfig {
        hysteresis: 3,
        ..Default::default()
    });
    let mut topk = TopK::new(4, TopKConfig::default());
    let mut tier = MemoryTier::new(4);
    let mut blocked_at = None;
    let mut lifted_at = None;

    for t in 0..60u64 {
        let flooding = attack.contains(&t);
        let blocked: HashSet<Prefix> = monitor.source_rates().into_iter().map(|(p, _)| p).collect();
        // What the kernel sees: blocked sources are dropped before feature extraction and
        // counted per entry instead.
        let mut sources: Vec<SourceStat> = legit
            .iter()
            .enumerate()
            .map(|(i, &p)| stat(p, 10 + (i as u64 + t) % 40))
            .collect();
        for &(p, pps) in &attackers {
            let rate = if flooding { pps } else { 0 };
            if blocked.contains(&p) {
                monitor.set_rate(&Target::Source(p), rate as f64);
            } else if rate > 0 {
                sources.push(stat(p, rate));
            }
        }
        let report = detector.observe(&Snapshot {
            seconds: 1.0,
            sources,
            suffixes: vec![],
        });
        for f in &report.findings {
            if let Action::BlockSource { prefix, pps } = f.action {
                assert!(
                    !legit.contains(&prefix),
                    "interval {t}: a legitimate source was blocked"
                );
                monitor.block(
                    t,
                    Target::Source(prefix),
                    Origin::Detected,
                    &f.reason.to_string(),
                    None,
                    pps,
                );
            }
        }
        let thresholds = Thresholds {
            source_pps: report.threshold_pps,
            suffix_qps: detector.config().wt_min_qps,
        };
        monitor.tick(t, thresholds);
        let cands: Vec<Candidate> = monitor
            .source_rates()
            .into_iter()
            .map(|(prefix, pps)| Candidate { prefix, pps })
            .collect();
        apply(&mut tier, &topk.plan(&cands)).unwrap();

        let n_blocked = monitor.source_rates().len();
        if n_blocked == attackers.len() && blocked_at.is_none() {
            blocked_at = Some(t);
            // The tier holds the four heaviest.
            let mut in_tier: Vec<Prefix> = tier.counters().iter().map(|c| c.entry.prefix).collect();
            in_tier.sort();
            let mut heaviest: Vec<Prefix> = attackers[6..].iter().map(|a| a.0).collect();
            heaviest.sort();
            assert_eq!(in_tier, heaviest, "interval {t}");
        }
        if blocked_at.is_some() && n_blocked == 0 && lifted_at.is_none() {
            lifted_at = Some(t);
            assert!(tier.counters().is_empty(), "the tier empties with the list");
        }
    }
    assert_eq!(
        blocked_at,
        Some(21),
        "blocked in the flood's second interval"
    );
    // The flood stops at 40: calm in 40, 41, 42 → lifted at 42.
    assert_eq!(lifted_at, Some(42));
    assert_eq!(tier.capacity(), 4);
}
