//! The guard stage (bpf/guard.h) through BPF_PROG_TEST_RUN (needs root): fixture tables of
//! source → verdict over IPv4, IPv6 and VLAN frames for both list structures, allowlist over
//! blocklist, longest prefix, the modelled tier and its counters, feature snapshots, atomic
//! list replacement under test runs from another thread, the 1M-entry load, the verifier's
//! count for both program flavours, and the ns/packet table of docs/perf.

mod common;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::*;
use xdns_bpf::guard::{Choice, GuardStage, Structure};
use xdns_bpf::runtime::{test_run_fd, ResolverStage, XdpProgram};
use xdns_guard::lists::{parse_name_list, parse_prefix, parse_prefix_list, Prefix, PrefixList};
use xdns_guard::topk::{HardwareTier, TierEntry};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;

fn stage() -> GuardStage {
    GuardStage { capacity: 1 << 20, tier_slots: 4, features: true, names: 4096, feature_prefixes: 4096, feature_suffixes: 4096, rrl_accounts: 4096 }
}

fn list(s: &str) -> PrefixList {
    parse_prefix_list("test", s).unwrap()
}

/// A query for www.example.com A from `src` (the lab's server address of its family).
fn from(src: &str, vlan: bool) -> Vec<u8> {
    let ip: IpAddr = src.parse().unwrap();
    let mut net = match ip {
        IpAddr::V4(a) => Net { src: a.octets().to_vec(), ..Net::v4() },
        IpAddr::V6(a) => Net { src: a.octets().to_vec(), ..Net::v6() },
    };
    if vlan {
        net.vlan = Some((0x8100, 42));
    }
    frame(&net, &query(&wire("www.example.com"), 1, None))
}

fn blocklist() -> PrefixList {
    list(
        "198.18.1.0/24\n198.18.2.7\n198.18.3.0/24\n198.18.3.128/25\n\
         2001:db8:1::/48\n2001:db8:2:3::/64\n2001:db8:9::5\n",
    )
}

fn allowlist() -> PrefixList {
    // 198.18.3.0/24 blocked, but its upper half allowed; 2001:db8:1:5::/64 allowed inside a
    // blocked /48; 198.18.1.9 allowed inside a blocked /24
    list("198.18.1.9\n198.18.3.128/25\n2001:db8:1:5::/64\n")
}

/// (source, verdict): the table both structures must give, for each frame shape.
fn rows() -> Vec<(&'static str, &'static str)> {
    vec![
        ("198.18.1.1", "drop_blocked"),        // /24
        ("198.18.1.9", "pass_not_loaded"),     // allow /32 inside the blocked /24
        ("198.18.2.7", "drop_blocked"),        // /32
        ("198.18.2.8", "pass_not_loaded"),     // its neighbour, not listed
        ("198.18.3.1", "drop_blocked"),        // lower half of a blocked /24
        ("198.18.3.200", "pass_not_loaded"),   // upper half: allow /25 beats block /25 and /24
        ("198.18.7.3", "drop_tier"),           // tier slot 0
        ("198.18.0.2", "pass_not_loaded"),     // the lab client
        ("2001:db8:1::1", "drop_blocked"),     // /48
        ("2001:db8:1:5::1", "pass_not_loaded"), // allow /64 inside the /48
        ("2001:db8:1:6::1", "drop_blocked"),
        ("2001:db8:2:3::77", "drop_blocked"),  // /64
        ("2001:db8:2:4::77", "pass_not_loaded"),
        ("2001:db8:9::5", "drop_blocked"),     // /128
        ("2001:db8:9::6", "pass_not_loaded"),
        ("2001:db8:7::1", "drop_tier"),        // tier slot 1
        ("2001:db8::2", "pass_not_loaded"),    // the lab client
    ]
}

fn check_table(prog: &XdpProgram, label: &str, tier: bool) -> Vec<String> {
    let mut failures = Vec::new();
    for vlan in [false, true] {
        for (src, want) in rows() {
            let want = if want == "drop_tier" && !tier { "pass_not_loaded" } else { want };
            let f = from(src, vlan);
            let (act, out, moved) = verdict(prog, &f);
            let want_act = if want.starts_with("drop_") { XDP_DROP } else { XDP_PASS };
            if act != want_act || moved != [want] || (act == XDP_PASS && out != f) {
                failures.push(format!("{label} vlan={vlan} {src}: want {want}, got action {act} {moved:?}"));
            }
        }
    }
    failures
}

/// Every source verdict, both structures, IPv4, IPv6 and VLAN frames: first with neither
/// tier nor features (the stage's inline path), then with a tier slot per family and the
/// features counted (its global function), which must agree.
#[test]
fn guard_fixture_table() {
    require_root("guard_fixture_table");
    let mut failures = Vec::new();
    let plain = load_with(None, Some(GuardStage { features: false, ..stage() }));
    let g = plain.guard().unwrap();
    for choice in [Choice::Hash, Choice::Lpm, Choice::Auto] {
        let r = g.replace_lists_with(&blocklist(), &allowlist(), choice).unwrap();
        let want = if choice == Choice::Lpm { Structure::Lpm } else { Structure::Hash };
        assert_eq!((r.v4, r.v6), (want, want), "{choice:?}");
        failures.extend(check_table(&plain, &format!("inline {choice:?}"), false));
    }
    assert_eq!(g.entry_drops(&parse_prefix("198.18.1.0/24").unwrap()).unwrap(), Some(2));
    assert_eq!(g.counters().unwrap().allowed, 3 * 2 * 3);

    let prog = load_with(None, Some(stage()));
    let g = prog.guard().unwrap();
    let mut tier = g.tier(4).unwrap();
    let t0 = TierEntry { slot: 0, prefix: parse_prefix("198.18.7.0/24").unwrap() };
    let t1 = TierEntry { slot: 1, prefix: parse_prefix("2001:db8:7::/48").unwrap() };
    tier.install(&t0).unwrap();
    tier.install(&t1).unwrap();
    for choice in [Choice::Hash, Choice::Lpm, Choice::Auto] {
        g.replace_lists_with(&blocklist(), &allowlist(), choice).unwrap();
        failures.extend(check_table(&prog, &format!("tier+features {choice:?}"), true));
    }
    // other traffic never meets the lists: a frame to another port from a blocked source
    let mut net = Net { src: vec![198, 18, 1, 1], ..Net::v4() };
    net.dport = 5353;
    let (act, _, moved) = verdict(&prog, &frame(&net, &query(&wire("www.example.com"), 1, None)));
    assert_eq!((act, moved), (XDP_PASS, vec!["pass_not_our_addr".to_string()]));
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // per-entry drops (this generation: the Auto pass, both frame shapes) and the tier's slots
    assert_eq!(g.entry_drops(&parse_prefix("198.18.1.0/24").unwrap()).unwrap(), Some(2));
    assert_eq!(g.entry_drops(&parse_prefix("2001:db8:9::5").unwrap()).unwrap(), Some(2));
    assert_eq!(g.entry_drops(&parse_prefix("203.0.113.0/24").unwrap()).unwrap(), None);
    let c = tier.counters();
    assert_eq!(c.len(), 2);
    assert_eq!((c[0].entry, c[0].packets), (t0, Some(6)));
    assert_eq!((c[1].entry, c[1].packets), (t1, Some(6)));
    // allowed: 3 rows per pass per shape (198.18.1.9, 198.18.3.200, 2001:db8:1:5::1)
    assert_eq!(g.counters().unwrap().allowed, 3 * 2 * 3);
    // a removed slot stops dropping
    tier.remove(&t0).unwrap();
    let (act, _, moved) = verdict(&prog, &from("198.18.7.3", false));
    assert_eq!((act, moved), (XDP_PASS, vec!["pass_not_loaded".to_string()]));
    assert!(tier.install(&TierEntry { slot: 1, prefix: t0.prefix }).is_err(), "slot 1 is busy");
    // the tier alone, no list: still checked
    g.replace_lists(&PrefixList::new(), &PrefixList::new()).unwrap();
    assert_eq!(verdict(&prog, &from("2001:db8:7::1", true)).2, ["drop_tier"]);
    assert_eq!(verdict(&prog, &from("198.18.1.1", true)).2, ["pass_not_loaded"]);
}

/// A query for `name` from the lab client.
fn asking(name: &str, v6: bool, vlan: bool) -> Vec<u8> {
    let mut net = if v6 { Net::v6() } else { Net::v4() };
    if vlan {
        net.vlan = Some((0x88a8, 7));
    }
    frame(&net, &query(&wire(name), 1, None))
}

/// Name blocks: exact names and "*.suffix" entries, any case, over IPv4, IPv6 and VLAN.
#[test]
fn guard_name_blocks() {
    require_root("guard_name_blocks");
    let prog = load_with(None, Some(GuardStage { features: false, ..stage() }));
    let g = prog.guard().unwrap();
    let names = parse_name_list("names", "blocked.example.com\n*.evil.test\n*.a.b.c.d.e.f.g.h.test\n").unwrap();
    let r = g.replace_names(&names).unwrap();
    assert_eq!(r.entries, 3);
    let rows = [
        ("blocked.example.com", "drop_name"),
        ("BLOCKED.Example.COM", "drop_name"),
        ("www.blocked.example.com", "pass_not_loaded"), // exact only
        ("example.com", "pass_not_loaded"),
        ("x.evil.test", "drop_name"),
        ("deep.er.X.EVIL.test", "drop_name"),
        ("evil.test", "pass_not_loaded"), // strictly under the suffix
        ("notevil.test", "pass_not_loaded"),
        ("z.a.b.c.d.e.f.g.h.test", "drop_name"), // a suffix nine labels deep
        ("a.b.c.d.e.f.g.h.test", "pass_not_loaded"),
    ];
    let mut failures = Vec::new();
    for (v6, vlan) in [(false, false), (true, false), (false, true), (true, true)] {
        for (name, want) in rows {
            let f = asking(name, v6, vlan);
            let (act, out, moved) = verdict(&prog, &f);
            let want_act = if want == "drop_name" { XDP_DROP } else { XDP_PASS };
            if act != want_act || moved != [want] || (act == XDP_PASS && out != f) {
                failures.push(format!("v6={v6} vlan={vlan} {name}: want {want}, got {act} {moved:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(g.name_drops(&names.entries[0]).unwrap(), Some(8));
    assert_eq!(g.name_drops(&names.entries[1]).unwrap(), Some(8));
    // replaced: the old entries are gone, the new ones are there
    let names2 = parse_name_list("names", "*.example.com\n").unwrap();
    g.replace_names(&names2).unwrap();
    assert_eq!(verdict(&prog, &asking("x.evil.test", false, false)).2, ["pass_not_loaded"]);
    assert_eq!(verdict(&prog, &asking("blocked.example.com", false, false)).2, ["drop_name"]);
    // malformed queries keep their own verdict
    let mut bad = query(&wire("x.evil.test"), 1, None);
    bad[12] = 0xc0; // a compression pointer as the first label
    assert_eq!(verdict(&prog, &frame(&Net::v4(), &bad)).2, ["pass_qname"]);
}

/// The water-torture block: `*.example.com` blocked with exceptions for its known labels
/// (exact and below): names under a known label go on, unknown labels drop as `drop_name`.
#[test]
fn guard_name_exceptions_for_known_labels() {
    require_root("guard_name_exceptions_for_known_labels");
    let prog = load_with(None, Some(GuardStage { features: false, ..stage() }));
    let g = prog.guard().unwrap();
    let block = parse_name_list("detect", "*.example.com\n").unwrap();
    let keep = parse_name_list("keep", "www.example.com\n*.www.example.com\nmail.example.com\n*.mail.example.com\n").unwrap();
    g.replace_names_with(&block, &keep.entries).unwrap();
    let rows = [
        ("www.example.com", "pass_not_loaded"),
        ("WWW.example.COM", "pass_not_loaded"),
        ("a.b.www.example.com", "pass_not_loaded"),
        ("mail.example.com", "pass_not_loaded"),
        ("example.com", "pass_not_loaded"), // the suffix itself is not under it
        ("xk3j9q.example.com", "drop_name"),
        ("a.xk3j9q.example.com", "drop_name"),
        ("wwww.example.com", "drop_name"),
        ("www.example.org", "pass_not_loaded"),
    ];
    for (name, want) in rows {
        for v6 in [false, true] {
            assert_eq!(verdict(&prog, &asking(name, v6, false)).2, [want], "{name} v6={v6}");
        }
    }
    // back to no names: everything goes on
    g.replace_names(&Default::default()).unwrap();
    assert_eq!(verdict(&prog, &asking("xk3j9q.example.com", false, false)).2, ["pass_not_loaded"]);
}

/// Blocks added to and taken out of the active generation one by one: dropped from the next
/// packet, a prefix already listed left alone, and the next whole generation replaces them.
#[test]
fn guard_incremental_blocks() {
    require_root("guard_incremental_blocks");
    let prog = load_with(None, Some(GuardStage { features: false, ..stage() }));
    let g = prog.guard().unwrap();
    use xdns_bpf::guard::Added;
    let p24 = parse_prefix("198.18.9.0/24").unwrap();
    // no generation yet: a whole one is needed
    assert_eq!(g.add_block(&p24).unwrap(), Added::NeedsGeneration);
    g.reserve_lengths(Some(24), Some(56));
    g.replace_lists(&list("198.18.1.0/24\n2001:db8:1::/48\n"), &PrefixList::new()).unwrap();
    assert_eq!(verdict(&prog, &from("198.18.9.5", false)).2, ["pass_not_loaded"]);
    assert_eq!(g.add_block(&p24).unwrap(), Added::Added);
    assert_eq!(verdict(&prog, &from("198.18.9.5", false)).2, ["drop_blocked"]);
    assert_eq!(g.entry_drops(&p24).unwrap(), Some(1));
    let p56 = parse_prefix("2001:db8:9:100::/56").unwrap();
    assert_eq!(g.add_block(&p56).unwrap(), Added::Added);
    assert_eq!(verdict(&prog, &from("2001:db8:9:1ff::1", false)).2, ["drop_blocked"]);
    assert_eq!(g.add_block(&parse_prefix("198.18.1.0/24").unwrap()).unwrap(), Added::Listed);
    // a length the generation does not probe
    assert_eq!(g.add_block(&parse_prefix("198.18.10.0/23").unwrap()).unwrap(), Added::NeedsGeneration);
    assert!(g.remove_block(&p24).unwrap());
    assert!(!g.remove_block(&p24).unwrap());
    assert_eq!(verdict(&prog, &from("198.18.9.5", false)).2, ["pass_not_loaded"]);
    // a new generation without them, then with one: the old generation is gone whole
    g.replace_lists(&list("198.18.1.0/24\n"), &PrefixList::new()).unwrap();
    assert_eq!(verdict(&prog, &from("2001:db8:9:1ff::1", false)).2, ["pass_not_loaded"]);
    assert_eq!(verdict(&prog, &from("198.18.1.1", false)).2, ["drop_blocked"]);
    // in the trie too
    let mut text = String::new();
    for len in 16..=32u8 {
        text.push_str(&format!("{}\n", Prefix::covering("198.19.255.255".parse().unwrap(), len)));
    }
    let r = g.replace_lists(&list(&text), &PrefixList::new()).unwrap();
    assert_eq!(r.v4, Structure::Lpm);
    assert_eq!(g.add_block(&p24).unwrap(), Added::Added);
    assert_eq!(verdict(&prog, &from("198.18.9.5", false)).2, ["drop_blocked"]);
    assert_eq!(g.add_block(&parse_prefix("198.19.255.0/24").unwrap()).unwrap(), Added::Listed);
    assert!(g.remove_block(&p24).unwrap());
    assert_eq!(verdict(&prog, &from("198.18.9.5", false)).2, ["pass_not_loaded"]);
    assert_eq!(verdict(&prog, &from("198.19.0.1", false)).2, ["drop_blocked"]);
}

/// Full maps: a list larger than the maps were sized for is refused with a clear error and
/// the active lists stay whole (still dropping what they dropped); overlapping prefixes are
/// one entry each, the longest deciding.
#[test]
fn guard_full_maps_and_overlaps_lose_nothing() {
    require_root("guard_full_maps_and_overlaps_lose_nothing");
    let prog = load_with(None, Some(GuardStage { capacity: 4, features: false, ..stage() }));
    let g = prog.guard().unwrap();
    g.reserve_lengths(Some(24), None);
    g.replace_lists(&list("198.18.1.0/24\n198.18.1.0/25\n198.18.1.7\n"), &PrefixList::new()).unwrap();
    assert_eq!(verdict(&prog, &from("198.18.1.200", false)).2, ["drop_blocked"]);
    let e = g.replace_lists(&list("198.18.2.1\n198.18.2.2\n198.18.2.3\n198.18.2.4\n198.18.2.5\n"), &PrefixList::new()).unwrap_err();
    assert!(format!("{e:#}").contains("sized for 4"), "{e:#}");
    assert_eq!(verdict(&prog, &from("198.18.1.200", false)).2, ["drop_blocked"], "the old list is gone");
    assert_eq!(verdict(&prog, &from("198.18.2.1", false)).2, ["pass_not_loaded"]);
    assert_eq!(g.entry_drops(&parse_prefix("198.18.1.7").unwrap()).unwrap(), Some(0));
    // one more fits, the next is refused with an error
    assert_eq!(g.add_block(&parse_prefix("198.18.9.0/24").unwrap()).unwrap(), xdns_bpf::guard::Added::Added);
    let e = g.add_block(&parse_prefix("198.18.10.0/24").unwrap()).unwrap_err();
    assert!(format!("{e:#}").contains("full"), "{e:#}");
    assert_eq!(verdict(&prog, &from("198.18.9.1", false)).2, ["drop_blocked"]);
    assert_eq!(verdict(&prog, &from("198.18.1.7", false)).2, ["drop_blocked"]);
}

/// Lists with more prefix lengths than the hash structure probes go to the trie on their own
/// (Auto), and the answers stay those of the longest match.
#[test]
fn guard_many_lengths_take_the_trie() {
    require_root("guard_many_lengths_take_the_trie");
    let prog = load_with(None, Some(GuardStage { features: false, ..stage() }));
    let g = prog.guard().unwrap();
    let mut text = String::new();
    for len in 16..=32u8 {
        // nested prefixes of 17 lengths in 198.19.0.0/16, none holding 198.18.0.2
        let p = Prefix::covering("198.19.255.255".parse().unwrap(), len);
        text.push_str(&format!("{p}\n"));
    }
    let r = g.replace_lists(&list(&text), &PrefixList::new()).unwrap();
    assert_eq!((r.v4, r.v6), (Structure::Lpm, Structure::None));
    assert!(g.replace_lists_with(&list(&text), &PrefixList::new(), Choice::Hash).is_err());
    assert_eq!(verdict(&prog, &from("198.18.0.2", false)).2, ["pass_not_loaded"]);
    assert_eq!(verdict(&prog, &from("198.19.0.2", false)).2, ["drop_blocked"]);
    assert_eq!(verdict(&prog, &from("2001:db8::2", false)).2, ["pass_not_loaded"]);
}

/// Features: packets and bytes per source /24 and /56, by interval. A snapshot holds exactly
/// the packets run before its flip; those after it go to the next interval.
#[test]
fn guard_feature_snapshots() {
    require_root("guard_feature_snapshots");
    let prog = load_with(None, Some(stage()));
    let g = prog.guard().unwrap();
    let a = from("198.18.5.1", false);
    let b = from("198.18.5.200", true); // same /24, with a VLAN tag
    let c = from("2001:db8:5:6::1", false);
    for _ in 0..3 {
        prog.test_run(&a).unwrap();
    }
    prog.test_run(&b).unwrap();
    prog.test_run(&c).unwrap();
    let s1 = g.flip_interval().unwrap();
    assert_eq!(s1.interval, 1);
    let ip_len = |f: &[u8], vlan: bool| (f.len() - 14 - if vlan { 4 } else { 0 }) as u64;
    let want_v4 = 3 * ip_len(&a, false) + ip_len(&b, true);
    assert_eq!(s1.sources.len(), 2, "{s1:?}");
    assert_eq!(s1.sources[0].prefix, parse_prefix("198.18.5.0/24").unwrap());
    assert_eq!((s1.sources[0].packets, s1.sources[0].bytes), (4, want_v4));
    assert_eq!(s1.sources[1].prefix, parse_prefix("2001:db8:5::/56").unwrap());
    assert_eq!((s1.sources[1].packets, s1.sources[1].bytes), (1, ip_len(&c, false)));
    // queries per suffix: the five asked for www.example.com, under example.com
    let parent = g.suffix_hash(&wire("EXAMPLE.com"));
    let qlen = wire("www.example.com").len() as u64;
    assert_eq!(s1.suffixes.iter().map(|x| (x.hash, x.len, x.queries, x.name_bytes)).collect::<Vec<_>>(), [(parent, 13, 5, 5 * qlen)]);
    // and per whole name, with its parent
    let whole = g.suffix_hash(&wire("www.example.com"));
    assert_eq!(s1.names.iter().map(|x| (x.hash, x.len, x.parent, x.queries)).collect::<Vec<_>>(), [(whole, qlen as u32, parent, 5)]);
    // the next interval starts empty and counts on its own
    prog.test_run(&c).unwrap();
    // a name with one label has no parent but the root: not counted
    prog.test_run(&frame(&Net::v4(), &query(&wire("com"), 1, None))).unwrap();
    let s2 = g.flip_interval().unwrap();
    assert_eq!(s2.interval, 2);
    assert_eq!(s2.suffixes.iter().map(|x| (x.hash, x.queries)).collect::<Vec<_>>(), [(parent, 1)]);
    assert_eq!(s2.sources.iter().map(|s| (s.prefix, s.packets)).collect::<Vec<_>>(), [(parse_prefix("198.18.0.0/24").unwrap(), 1), (parse_prefix("2001:db8:5::/56").unwrap(), 1)]);
    // interval 3 reuses interval 1's slot: the old counts are reset, not added to
    prog.test_run(&a).unwrap();
    let s3 = g.flip_interval().unwrap();
    assert_eq!(s3.sources.iter().map(|s| (s.prefix, s.packets)).collect::<Vec<_>>(), [(parse_prefix("198.18.5.0/24").unwrap(), 1)]);
    // dropped packets are counted too (the rate monitor needs the rates of blocked sources)
    g.replace_lists(&list("198.18.5.0/24\n"), &PrefixList::new()).unwrap();
    assert_eq!(verdict(&prog, &a).2, ["drop_blocked"]);
    assert_eq!(g.flip_interval().unwrap().sources[0].packets, 1);
}

/// ANY queries count per source (amplification): into the `any` of the packet's own source
/// entry, beside its packets; the root's and a TLD's ANY too; other types not; a slot reused
/// by a later interval starts again at 0; over IPv4, IPv6 and VLAN.
#[test]
fn guard_feature_snapshots_count_any_per_source() {
    require_root("guard_feature_snapshots_count_any_per_source");
    stay_on_one_cpu();
    let prog = load_with(None, Some(stage()));
    let g = prog.guard().unwrap();
    g.flip_interval().unwrap();
    let net = |src: &str, vlan: bool| {
        let ip: IpAddr = src.parse().unwrap();
        let mut n = match ip {
            IpAddr::V4(a) => Net { src: a.octets().to_vec(), ..Net::v4() },
            IpAddr::V6(a) => Net { src: a.octets().to_vec(), ..Net::v6() },
        };
        if vlan {
            n.vlan = Some((0x8100, 42));
        }
        n
    };
    let ask = |n: &Net, name: &str, qtype: u16| prog.test_run(&frame(n, &query(&wire(name), qtype, None))).unwrap();
    let (a, b, c) = (net("198.18.7.1", false), net("2001:db8:7::1", false), net("198.18.8.1", true));
    for n in [&a, &b, &c] {
        ask(n, "www.example.com", 255);
        ask(n, "example.com", 255);
        ask(n, "com", 255);
        ask(n, "", 255); // the root
        ask(n, "www.example.com", 1);
        ask(n, "www.example.com", 28);
    }
    ask(&a, "www.example.com", 255);
    let s = g.flip_interval().unwrap();
    let got = |p: &str| s.sources.iter().find(|x| x.prefix == parse_prefix(p).unwrap()).map(|x| (x.packets, x.any));
    assert_eq!(got("198.18.7.0/24"), Some((7, 5)), "{s:?}");
    assert_eq!(got("2001:db8:7::/56"), Some((6, 4)), "{s:?}");
    assert_eq!(got("198.18.8.0/24"), Some((6, 4)), "VLAN: {s:?}");
    // the next interval: A queries only; then interval 3 reuses this slot, from 0
    ask(&a, "www.example.com", 1);
    assert_eq!(g.flip_interval().unwrap().sources.iter().map(|x| x.any).sum::<u64>(), 0);
    ask(&a, "www.example.com", 1);
    ask(&a, "www.example.com", 255);
    let s3 = g.flip_interval().unwrap();
    assert_eq!(s3.sources.iter().map(|x| (x.packets, x.any)).collect::<Vec<_>>(), [(2, 1)], "{s3:?}");
}

/// Snapshots taken while another thread runs packets: every packet lands in exactly one
/// interval, and each snapshot is final when returned (reading it again later gives the same).
#[test]
fn guard_snapshots_under_load_never_mix_intervals() {
    require_root("guard_snapshots_under_load_never_mix_intervals");
    let prog = load_with(None, Some(stage()));
    let g = prog.guard().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let fd = prog.prog_fd().try_clone_to_owned().unwrap();
    let runner = {
        let (stop, sent) = (stop.clone(), sent.clone());
        let f = from("198.18.6.1", false);
        std::thread::spawn(move || {
            use std::os::fd::AsFd;
            while !stop.load(Ordering::Relaxed) {
                test_run_fd(fd.as_fd(), &f).unwrap();
                sent.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut snaps = Vec::new();
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        snaps.push(g.flip_interval().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    runner.join().unwrap();
    snaps.push(g.flip_interval().unwrap());
    let total: u64 = snaps.iter().flat_map(|s| &s.sources).map(|s| s.packets).sum();
    assert_eq!(total, sent.load(Ordering::Relaxed), "every packet counted once, in one interval");
    let queries: u64 = snaps.iter().flat_map(|s| &s.suffixes).map(|s| s.queries).sum();
    assert_eq!(queries, total, "every query counted once under its suffix, in one interval");
    // a finished interval does not change afterwards (its slot may be reused two flips later,
    // so only the last two are still in the map)
    let last = snaps.last().unwrap();
    assert_eq!(&g.read_interval(last.interval).unwrap(), last);
}

/// A list replaced over and over while another thread runs packets: a source blocked in both
/// lists (by different prefixes and structures) is dropped on every run, and a source in
/// neither always passes; never a mix.
#[test]
fn guard_list_replacement_is_atomic_under_load() {
    require_root("guard_list_replacement_is_atomic_under_load");
    let prog = load_with(None, Some(GuardStage { features: false, ..stage() }));
    let g = prog.guard().unwrap();
    let mut filler = String::new();
    for i in 0..2000u32 {
        filler.push_str(&format!("203.0.{}.{}\n", i / 256, i % 256));
    }
    let l1 = list(&format!("{filler}198.18.8.8\n2001:db8:8::8\n"));
    let l2 = list(&format!("{filler}198.18.8.0/24\n2001:db8:8::/48\n"));
    g.replace_lists(&l1, &PrefixList::new()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let fd = prog.prog_fd().try_clone_to_owned().unwrap();
    let runner = {
        let stop = stop.clone();
        let frames = [(from("198.18.8.8", false), XDP_DROP), (from("2001:db8:8::8", true), XDP_DROP), (from("198.18.9.9", false), XDP_PASS)];
        std::thread::spawn(move || {
            use std::os::fd::AsFd;
            let mut runs = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (f, want) in &frames {
                    let (act, _) = test_run_fd(fd.as_fd(), f).unwrap();
                    assert_eq!(act, *want, "run {runs}: a replacement showed a mixed list");
                    runs += 1;
                }
            }
            runs
        })
    };
    for i in 0..40 {
        let choice = [Choice::Hash, Choice::Lpm][i % 2];
        g.replace_lists_with(if i % 3 == 0 { &l1 } else { &l2 }, &PrefixList::new(), choice).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let runs = runner.join().expect("the runner saw a mixed list");
    println!("{runs} runs during 40 replacements");
    assert!(runs > 0);
}

fn mixed(n: usize) -> PrefixList {
    xdns_bpf::guard::synthetic_blocklist(n)
}

/// One million prefixes: load time, reload time, the answers after each.
#[test]
fn guard_million_entry_list() {
    require_root("guard_million_entry_list");
    let prog = load_with(None, Some(GuardStage { features: false, ..stage() }));
    let g = prog.guard().unwrap();
    let t = Instant::now();
    let big = mixed(1_000_000);
    println!("built the list in {:?}", t.elapsed());
    let probe4 = big.v4.iter().find(|p| p.len == 24).unwrap();
    let inside = format!("{}.{}.{}.77", probe4.addr[0], probe4.addr[1], probe4.addr[2]);
    for (what, choice) in [("load", Choice::Auto), ("reload", Choice::Auto), ("trie", Choice::Lpm)] {
        let r = g.replace_lists_with(&big, &PrefixList::new(), choice).unwrap();
        println!("guard {what}: {} entries ({:?}/{:?}, lengths {:?} {:?}) in {:?}", r.entries, r.v4, r.v6, r.lengths4, r.lengths6, r.elapsed);
        assert_eq!(r.entries, 1_000_000);
        assert_eq!(verdict(&prog, &from(&inside, false)).2, ["drop_blocked"], "{what}");
        assert_eq!(verdict(&prog, &from("198.18.0.2", false)).2, ["pass_not_loaded"], "{what}");
        assert_eq!(verdict(&prog, &from("2001:db8::2", false)).2, ["pass_not_loaded"], "{what}");
    }
}

/// ns/packet of an allowed query (the lab client, no match) and of a blocked one, by list size
/// and structure, against the stage off. Printed for docs/perf; not asserted.
#[test]
fn guard_perf() {
    require_root("guard_perf");
    let off = load();
    let prog = load_with(None, Some(GuardStage { features: false, ..stage() }));
    let g = prog.guard().unwrap();
    let q4 = from("198.18.0.2", false);
    let q6 = from("2001:db8::2", false);
    let runs = 3000;
    let best = |p: &XdpProgram, f: &[u8]| (0..3).map(|_| p.bench(f, runs).unwrap()).min().unwrap();
    println!("perf guard off: v4 {} ns, v6 {} ns", best(&off, &q4), best(&off, &q6));
    let none = PrefixList::new();
    println!("perf guard on, no list: v4 {} ns, v6 {} ns", best(&prog, &q4), best(&prog, &q6));
    for n in [1usize, 1000, 100_000, 1_000_000] {
        let l = mixed(n);
        let hit4 = l.v4.iter().find(|p| p.len == 32).map(|p| format!("{}.{}.{}.{}", p.addr[0], p.addr[1], p.addr[2], p.addr[3]));
        // an allowed source among the listed ones (the trie walks deep there): the /32's
        // neighbour, in no listed prefix
        let near4 = l.v4.iter().filter(|p| p.len == 32).find_map(|p| {
            let a = std::net::Ipv4Addr::from(u32::from_be_bytes(p.addr) ^ 1);
            (!l.contains(IpAddr::V4(a))).then(|| a.to_string())
        });
        let near6 = l.v6.iter().filter(|p| p.len == 128).find_map(|p| {
            let a = std::net::Ipv6Addr::from(u128::from_be_bytes(p.addr) ^ 1);
            (!l.contains(IpAddr::V6(a))).then(|| a.to_string())
        });
        for choice in [Choice::Hash, Choice::Lpm] {
            let r = g.replace_lists_with(&l, &none, choice).unwrap();
            let hit = hit4.as_ref().map_or(0, |h| best(&prog, &from(h, false)));
            let n4 = near4.as_ref().map_or(0, |h| best(&prog, &from(h, false)));
            let n6 = near6.as_ref().map_or(0, |h| best(&prog, &from(h, false)));
            println!(
                "perf {n:>8} entries {:?}: allowed v4 {} ns, v6 {} ns; allowed among listed v4 {n4} ns, v6 {n6} ns; blocked v4 /32 {} ns (load {:?})",
                choice,
                best(&prog, &q4),
                best(&prog, &q6),
                hit,
                r.elapsed
            );
        }
    }
}

/// Both program flavours load with the stage on, with the features (detection) and without:
/// without, RRL and the cookie echo are decided in the answer and cache stages themselves
/// (bpf/rrl.h), paths the features' program does not have. Each of the four loads then runs
/// with RRL and cookies each on and off (set at run time: the same program): a blocked source
/// is dropped and an allowed one answered. Prints the verifier's count.
#[test]
fn guard_verifier_both_flavours() {
    require_root("guard_verifier_both_flavours");
    for (resolver, features) in [(false, true), (false, false), (true, true), (true, false)] {
        let resolver = resolver.then(|| ResolverStage { allow: vec![], capacity: xdns_bpf::cache::CacheCapacity { s: 64, m: 64, l: 64 } });
        let flavour = if resolver.is_some() { "resolver" } else { "authoritative" };
        let mut prog = load_with(resolver, Some(GuardStage { features, ..stage() }));
        let (insns, verified) = prog.insn_count().unwrap();
        println!("verified {flavour} program with the guard (features {features}): {insns} instructions, {verified} processed by the verifier");
        assert!(verified < 1_000_000);
        prog.install(&www_example_com()).unwrap();
        prog.guard().unwrap().replace_lists(&blocklist(), &allowlist()).unwrap();
        for (rate, cookies) in [(0, false), (1000, false), (0, true), (1000, true)] {
            let s = xdns_bpf::guard::RrlSettings { rate, slip: 2, ipv4_prefix: 24, ipv6_prefix: 56, cookies: cookies.then_some((*b"0123456789abcdef", None)) };
            prog.guard().unwrap().set_rrl(&s).unwrap();
            let what = format!("{flavour}, features {features}, rate {rate}, cookies {cookies}");
            assert_eq!(verdict(&prog, &from("198.18.1.1", false)).2, ["drop_blocked"], "{what}");
            assert_eq!(verdict(&prog, &from("198.18.200.1", false)).2, ["answered"], "{what}");
            assert_eq!(verdict(&prog, &from("2001:db8:200::1", true)).2, ["answered"], "{what}");
        }
    }
}
