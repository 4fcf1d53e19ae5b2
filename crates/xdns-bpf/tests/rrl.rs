//! RRL, server cookies and answer features on kernel answers (bpf/rrl.h) through
//! BPF_PROG_TEST_RUN (needs root): every new verdict over IPv4, IPv6 and VLAN frames, the
//! exact bytes of the TC=1 slip, the accounts (per client prefix, class and answer), cookies
//! valid, invalid, expired, malformed and made with the previous secret, the answer features
//! in one interval's snapshot, and the same for resolver cache answers.

mod common;
#[path = "common/rrl_fixture.rs"]
mod rrl_fixture;

use common::*;
use rrl_fixture::{client_and_server_cookie, cookie_opt, net, zones, SECRET};
use xdns_bpf::cache::CacheCapacity;
use xdns_bpf::data::compile_kernel_data;
use xdns_bpf::guard::{GuardStage, RrlSettings};
use xdns_bpf::runtime::{ResolverStage, XdpProgram};
use xdns_wire::body::{BodyWriter, Section};
use xdns_wire::CachedAnswer;

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const OLD_SECRET: [u8; 16] = *b"fedcba9876543210";

fn stage(features: bool) -> GuardStage {
    GuardStage { capacity: 1024, tier_slots: 0, features, names: 1024, feature_prefixes: 1024, feature_suffixes: 1024, rrl_accounts: 4096 }
}

fn prog(features: bool, rrl: RrlSettings) -> XdpProgram {
    prog_with(stage(features), rrl)
}

fn prog_with(stage: GuardStage, rrl: RrlSettings) -> XdpProgram {
    let mut p = load_with(None, Some(stage));
    p.install(&compile_kernel_data(&zones())).unwrap();
    p.guard().unwrap().set_rrl(&rrl).unwrap();
    p
}

fn rrl(rate: u32, slip: u32, cookies: bool) -> RrlSettings {
    RrlSettings { rate, slip, ipv4_prefix: 24, ipv6_prefix: 56, cookies: cookies.then_some((SECRET, None)) }
}

fn shapes() -> [(&'static str, &'static str, &'static str); 3] {
    // (shape, a client, a client of another prefix)
    [("ipv4", "198.18.5.7", "198.18.6.7"), ("ipv6", "2001:db8:5::7", "2001:db8:6::7"), ("vlan", "198.18.7.7", "198.18.8.7")]
}

/// RRL settings whose accounts are per address (/32, /128): the memo tests' clients, many more
/// than the /24s of 198.18.0.0/15, so that some share any one of the memo's slots.
fn rrl_hosts(rate: u32, slip: u32) -> RrlSettings {
    RrlSettings { rate, slip, ipv4_prefix: 32, ipv6_prefix: 128, cookies: None }
}

/// How many clients the memo tests try (`host`) when they look for accounts by memo slot.
const HOSTS: u32 = 0xe000;

/// The memo tests' `i`-th client (i < HOSTS): 198.18.16.0 on, 2001:db8::1000 on, never a
/// shape's own client.
fn host(shape: &str, i: u32) -> String {
    let i = 0x1000 + i;
    if shape == "ipv6" {
        format!("2001:db8::{i:x}")
    } else {
        format!("198.18.{}.{}", i >> 8 & 0xff, i & 0xff)
    }
}

fn now() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as u32
}

/// A client cookie with a server cookie made by `secret` for `src` at `at`.
fn full_cookie(secret: &[u8; 16], src: &str, at: u32) -> Vec<u8> {
    client_and_server_cookie(secret, b"client01", src, at)
}

/// The slip for `q` (a query without OPT from `n`): header (ID, QR AA RD TC, one question) and
/// the question, nothing else, from the server back to the client.
fn slip_bytes(n: &Net, q: &[u8]) -> Vec<u8> {
    let mut dns = q.to_vec();
    dns[2] = 0x80 | 0x04 | 0x02 | 0x01; // QR, AA, TC, RD
    dns[3] = 0;
    dns[6..12].fill(0);
    frame(&n.reply(), &dns)
}

/// Over the rate: drops, every slip-th a TC=1 slip with the exact bytes; another prefix and
/// another class of answer have their own accounts; all over IPv4, IPv6 and VLAN.
#[test]
fn rrl_drops_and_slips_kernel_answers() {
    require_root("rrl_drops_and_slips_kernel_answers");
    stay_on_one_cpu();
    let p = prog(false, rrl(3, 2, false));
    let mut failed = Vec::new();
    for (shape, src, other) in shapes() {
        let n = net(shape, src);
        let q = query(&wire("www.example.com"), 1, None);
        let f = frame(&n, &q);
        let mut got = Vec::new();
        for i in 0..8 {
            let (act, out, moved) = verdict(&p, &f);
            got.push(moved.join(","));
            if moved == ["answered_slip"] {
                if act != XDP_TX || out != slip_bytes(&n, &q) || !checksums_ok(&out) {
                    failed.push(format!("{shape}: slip {i}: action {act}, bytes {:02x?}", out));
                }
            } else if moved == ["drop_rrl"] && act != XDP_DROP {
                failed.push(format!("{shape}: drop_rrl with action {act}"));
            }
        }
        let want = ["answered", "answered", "answered", "drop_rrl", "answered_slip", "drop_rrl", "answered_slip", "drop_rrl"];
        if got != want {
            failed.push(format!("{shape}: {got:?}, want {want:?}"));
        }
        // another /24 (/56): its own account
        let (_, _, moved) = verdict(&p, &frame(&net(shape, other), &q));
        if moved != ["answered"] {
            failed.push(format!("{shape}: another prefix: {moved:?}"));
        }
        // another answer (AAAA of the same name): its own account
        let (_, _, moved) = verdict(&p, &frame(&n, &query(&wire("www.example.com"), 28, None)));
        if moved != ["answered"] {
            failed.push(format!("{shape}: another answer: {moved:?}"));
        }
        // NXDOMAIN: every name that does not exist shares the apex's account (Knot, BIND)
        let nx: Vec<_> = (0..5)
            .map(|i| verdict(&p, &frame(&n, &query(&wire(&format!("nx{i}.example.com")), 1, None))).2.join(","))
            .collect();
        if nx != ["answered", "answered", "answered", "drop_rrl", "answered_slip"] {
            failed.push(format!("{shape}: NXDOMAIN names: {nx:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A limited answer to a query with EDNS slips without OPT: header and question only, as
/// userspace's slip and Knot's; slip = 0 never slips; rate 0 turns RRL off.
#[test]
fn rrl_slip_has_no_opt_and_settings_apply_at_once() {
    require_root("rrl_slip_has_no_opt_and_settings_apply_at_once");
    stay_on_one_cpu();
    let p = prog(false, rrl(1, 1, false));
    let n = net("ipv4", "198.18.9.1");
    let q = query(&wire("www.example.com"), 1, Opt::new(1232, true));
    let f = frame(&n, &q);
    assert_eq!(verdict(&p, &f).2, ["answered"]);
    let (act, out, moved) = verdict(&p, &f);
    assert_eq!((act, moved), (XDP_TX, vec!["answered_slip".to_string()]));
    let plain = query(&wire("www.example.com"), 1, None);
    let want = slip_bytes(&n, &plain);
    assert_eq!(out, want, "the slip carries no OPT");
    p.guard().unwrap().set_rrl(&rrl(1, 0, false)).unwrap();
    for _ in 0..3 {
        assert_eq!(verdict(&p, &f).2, ["drop_rrl"], "slip 0: never");
    }
    p.guard().unwrap().set_rrl(&rrl(0, 2, false)).unwrap();
    for _ in 0..3 {
        assert_eq!(verdict(&p, &f).2, ["answered"], "rate 0: no RRL in the kernel");
    }
}

/// Cookies: a valid server cookie is never limited: a fresh one of the current secret is
/// answered in the kernel (its echo: `fresh_cookies_are_echoed_in_kernel_answers`), one of the
/// previous secret passes to userspace, however many; a client cookie alone, a bad hash, an expired or future stamp, another
/// version and a malformed option are limited like any answer and within the rate passed
/// for userspace to add a cookie; over IPv4, IPv6 and VLAN.
#[test]
fn cookies_valid_bypass_rrl_others_are_limited() {
    require_root("cookies_valid_bypass_rrl_others_are_limited");
    stay_on_one_cpu();
    let p = prog(false, RrlSettings { cookies: Some((SECRET, Some(OLD_SECRET))), ..rrl(1, 0, true) });
    let g = p.guard().unwrap();
    let mut failed = Vec::new();
    for (shape, src, _) in shapes() {
        let n = net(shape, src);
        let ask = |name: &str, c: &[u8]| verdict(&p, &frame(&n, &query(&wire(name), 1, cookie_opt(c)))).2.join(",");
        let t = now();
        for (what, c, want) in [
            ("current secret", full_cookie(&SECRET, src, t), "answered"),
            ("current secret, 31 minutes old", full_cookie(&SECRET, src, t - 1860), "pass_cookie"),
            ("previous secret", full_cookie(&OLD_SECRET, src, t - 100), "pass_cookie"),
        ] {
            let got: Vec<_> = (0..4).map(|_| ask("www.example.com", &c)).collect();
            if got.iter().any(|v| v != want) {
                failed.push(format!("{shape}: valid cookie ({what}): {got:?}"));
            }
        }
        let mut other_version = full_cookie(&SECRET, src, t);
        other_version[8] = 2;
        let mut bad_hash = full_cookie(&SECRET, src, t);
        bad_hash[23] ^= 1;
        let other_ip = if src.contains(':') { "2001:db8:99::1" } else { "198.18.99.1" };
        let cases: [(&str, Vec<u8>); 7] = [
            ("client cookie only", b"client01".to_vec()),
            ("bad hash", bad_hash),
            ("expired", full_cookie(&SECRET, src, t - 3700)),
            ("future", full_cookie(&SECRET, src, t + 400)),
            ("another version", other_version),
            ("another address's", full_cookie(&SECRET, other_ip, t)),
            ("malformed (10 bytes)", b"0123456789".to_vec()),
        ];
        for (i, (what, c)) in cases.iter().enumerate() {
            // each case its own name (account): first within the rate, then limited
            let name = match i {
                0 => "www.example.com",
                1 => "ns1.example.com",
                2 => "ns2.example.com",
                3 => "mail.example.com",
                4 => "mixed.case.example.com",
                5 => "example.com",
                _ => "www.example.com",
            };
            let qt = if i == 6 { 28 } else { 1 };
            let q = |c: &[u8]| verdict(&p, &frame(&n, &query(&wire(name), qt, cookie_opt(c)))).2.join(",");
            let got = [q(c), q(c)];
            if got != ["pass_cookie_new", "drop_rrl"] {
                failed.push(format!("{shape}: {what}: {got:?}"));
            }
        }
    }
    let bad = g.counters().unwrap().cookie_bad;
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // per shape: bad hash, expired, future, version, address, malformed, twice each
    assert_eq!(bad, 3 * 6 * 2, "cookie_bad counts server cookies that did not verify");
}

/// A fresh valid server cookie (the current secret, at most 30 minutes old) is answered in
/// the kernel with its COOKIE option echoed (RFC 9018 §4.3): exactly the answer to the query
/// without a cookie, plus the option as userspace adds it (`xdns_wire::opt::push_option`, the
/// daemon's `Guard::end`), checksums right; never rate limited (rate 1, four times); a
/// positive answer, an NXDOMAIN and a referral-less NODATA, IPv4, IPv6 and VLAN; counted in
/// `cookie_echoed`. An answer that would pass the client's payload with the option goes to
/// userspace. (The resolver's cache answers: `resolver_cache_answers_echo_fresh_cookies`.)
#[test]
fn fresh_cookies_are_echoed_in_kernel_answers() {
    require_root("fresh_cookies_are_echoed_in_kernel_answers");
    stay_on_one_cpu();
    let p = prog(false, RrlSettings { cookies: Some((SECRET, Some(OLD_SECRET))), ..rrl(1, 0, true) });
    let plain = prog(false, rrl(0, 0, false));
    let g = p.guard().unwrap();
    let mut failed = Vec::new();
    let mut echoed = 0;
    for (shape, src, _) in shapes() {
        let n = net(shape, src);
        for (name, qt) in [("www.example.com", 1), ("gone.example.com", 1), ("www.example.com", 99)] {
            let c = full_cookie(&SECRET, src, now() - 600);
            let (act, out, _) = verdict(&plain, &frame(&n, &query(&wire(name), qt, Opt::new(1232, false))));
            assert_eq!(act, XDP_TX, "{shape} {name}: the plain answer");
            let mut dns = dns_of(&out).to_vec();
            assert!(xdns_wire::opt::push_option(&mut dns, 10, &c));
            let want = frame(&n.reply(), &dns);
            for i in 0..4 {
                let (act, got, moved) = verdict(&p, &frame(&n, &query(&wire(name), qt, cookie_opt(&c))));
                if act != XDP_TX || moved != ["answered"] || got != want || !checksums_ok(&got) {
                    failed.push(format!("{shape} {name}/{qt} #{i}: {moved:?}\n got  {got:02x?}\n want {want:02x?}"));
                }
                echoed += 1;
            }
        }
        // big.example.com TXT (1202 bytes over IPv4) fits a payload of 1210 but for the
        // option: userspace's
        let big = "big.example.com";
        let (_, out, _) = verdict(&plain, &frame(&n, &query(&wire(big), 16, Opt::new(1210, false))));
        let len = dns_of(&out).len();
        assert!(len <= 1210 && len + 28 > 1210 && out[out.len() - len + 2] & 2 == 0, "{shape}: big TXT is {len} bytes, untruncated");
        let mut o = cookie_opt(&full_cookie(&SECRET, src, now())).unwrap();
        o.payload = 1210;
        let (_, _, moved) = verdict(&p, &frame(&n, &query(&wire(big), 16, Some(o))));
        if moved != ["pass_cookie"] {
            failed.push(format!("{shape}: over the payload with the option: {moved:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert_eq!(g.counters().unwrap().cookie_echoed, echoed, "cookie_echoed counts the echoed answers");
}

/// The resolver program (cache stage) with `guard` (None: the guard off) and RRL as given,
/// the zones installed and `entries` in its cache.
fn resolver_prog(guard: Option<GuardStage>, rrl: Option<RrlSettings>, entries: &[CachedAnswer]) -> XdpProgram {
    let allow = vec![("198.18.0.0".parse().unwrap(), 15), ("2001:db8::".parse().unwrap(), 32)];
    let r = ResolverStage { allow, capacity: CacheCapacity { s: 1024, m: 256, l: 128 } };
    let mut p = load_with(Some(r), guard);
    p.install(&compile_kernel_data(&zones())).unwrap();
    if let Some(s) = rrl {
        p.guard().unwrap().set_rrl(&s).unwrap();
    }
    let cache = p.cache().unwrap();
    for e in entries {
        assert_eq!(cache.try_insert(e).unwrap(), Ok(()), "{:?} cached in the kernel", e.qname);
    }
    p
}

/// Two resolver cache entries under no served zone, stored 10.5 s ago: host.example.org A
/// (positive) and nx.example.org A (NXDOMAIN with the SOA).
fn cache_entries() -> Vec<CachedAnswer> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let stored = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64 - 10_500_000_000;
    let entry = |name: &str, body: xdns_wire::Body| CachedAnswer {
        qname: wire(name),
        qtype: 1,
        dnssec_ok: false,
        body,
        stored_at_ns: stored,
        expires_at_ns: stored + 300_000_000_000,
        prefetch_at_ns: u64::MAX,
    };
    let n = wire("host.example.org");
    let mut w = BodyWriter::new(&n).unwrap();
    w.write_rr(&n, true, 1, 300, &[198, 18, 1, 1]).unwrap();
    let host = w.finish();
    let mut soa = wire("ns1.example.org");
    soa.extend(wire("hostmaster.example.org"));
    for v in [2026112901u32, 7200, 3600, 1209600, 300] {
        soa.extend_from_slice(&v.to_be_bytes());
    }
    let mut w = BodyWriter::new(&wire("nx.example.org")).unwrap();
    w.set_rcode(3);
    w.set_section(Section::Authority).unwrap();
    w.write_rr(&wire("example.org"), false, 6, 300, &soa).unwrap();
    vec![entry("host.example.org", host), entry("nx.example.org", w.finish())]
}

/// Resolver cache answers with a fresh valid server cookie (the resolver program with the
/// guard and without the features, which loads since its entry's frame shrank, bpf/README.md
/// "Stack"): answered in the kernel with the COOKIE option echoed, exactly the cache answer
/// of the program without the guard to the query without a cookie plus the option as
/// userspace adds it, checksums right; never rate limited (rate 1, four times: the first
/// through the name walk, the others through the cache hint); a positive answer and an
/// NXDOMAIN, IPv4, IPv6 and VLAN; counted in `cookie_echoed`; a cookie of the previous secret
/// still passes to userspace.
#[test]
fn resolver_cache_answers_echo_fresh_cookies() {
    require_root("resolver_cache_answers_echo_fresh_cookies");
    stay_on_one_cpu();
    let entries = cache_entries();
    let p = resolver_prog(Some(stage(false)), Some(RrlSettings { cookies: Some((SECRET, Some(OLD_SECRET))), ..rrl(1, 0, true) }), &entries);
    let plain = resolver_prog(None, None, &entries);
    let g = p.guard().unwrap();
    let mut failed = Vec::new();
    let mut echoed = 0;
    for (shape, src, _) in shapes() {
        let n = net(shape, src);
        for name in ["host.example.org", "nx.example.org"] {
            let c = full_cookie(&SECRET, src, now() - 600);
            let (act, out, moved) = verdict(&plain, &frame(&n, &query(&wire(name), 1, Opt::new(1232, false))));
            assert_eq!((act, moved), (XDP_TX, vec!["cache_answered".to_string()]), "{shape} {name}: the plain cache answer");
            let mut dns = dns_of(&out).to_vec();
            assert!(xdns_wire::opt::push_option(&mut dns, 10, &c));
            let want = frame(&n.reply(), &dns);
            for i in 0..4 {
                let (act, got, moved) = verdict(&p, &frame(&n, &query(&wire(name), 1, cookie_opt(&c))));
                if act != XDP_TX || moved != ["cache_answered"] || got != want || !checksums_ok(&got) {
                    failed.push(format!("{shape} {name} #{i}: {moved:?}\n got  {got:02x?}\n want {want:02x?}"));
                }
                echoed += 1;
            }
            let old = full_cookie(&OLD_SECRET, src, now() - 100);
            let (_, _, moved) = verdict(&p, &frame(&n, &query(&wire(name), 1, cookie_opt(&old))));
            if moved != ["pass_cookie"] {
                failed.push(format!("{shape} {name}: a cookie of the previous secret: {moved:?}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert_eq!(g.counters().unwrap().cookie_echoed, echoed, "cookie_echoed counts the echoed cache answers");
}

/// RRL on resolver cache answers, decided inline (no features): over the rate they are
/// dropped and every slip-th one is a TC=1 slip with the exact bytes (the query's header with
/// QR, TC and RA set, AA clear, no record, no OPT; the question); with cookies on, a query
/// without a cookie is limited alike, and one with a client cookie only goes through the gate
/// (within the rate, to userspace for a new cookie); IPv4, IPv6 and VLAN.
#[test]
fn resolver_cache_answers_are_rate_limited_and_slip() {
    require_root("resolver_cache_answers_are_rate_limited_and_slip");
    stay_on_one_cpu();
    let entries = cache_entries();
    let mut failed = Vec::new();
    for cookies in [false, true] {
        let p = resolver_prog(Some(stage(false)), Some(rrl(1, 2, cookies)), &entries);
        for (shape, src, other) in shapes() {
            let n = net(shape, src);
            let q = query(&wire("host.example.org"), 1, None);
            let f = frame(&n, &q);
            let mut slip = q.clone();
            slip[2] = 0x80 | 0x02 | 0x01; // QR, TC, RD
            slip[3] = 0x80; // RA
            slip[6..12].fill(0);
            let want_slip = frame(&n.reply(), &slip);
            let mut got = Vec::new();
            for i in 0..6 {
                let (act, out, moved) = verdict(&p, &f);
                if moved == ["answered_slip"] && (act != XDP_TX || out != want_slip || !checksums_ok(&out)) {
                    failed.push(format!("cookies {cookies} {shape}: slip {i}: action {act}\n got  {out:02x?}\n want {want_slip:02x?}"));
                }
                if moved == ["drop_rrl"] && act != XDP_DROP {
                    failed.push(format!("cookies {cookies} {shape}: drop_rrl with action {act}"));
                }
                got.push(moved.join(","));
            }
            let want = ["cache_answered", "drop_rrl", "answered_slip", "drop_rrl", "answered_slip", "drop_rrl"];
            if got != want {
                failed.push(format!("cookies {cookies} {shape}: {got:?}, want {want:?}"));
            }
            // another prefix: its own account
            let (_, _, moved) = verdict(&p, &frame(&net(shape, other), &q));
            if moved != ["cache_answered"] {
                failed.push(format!("cookies {cookies} {shape}: another prefix: {moved:?}"));
            }
            if cookies {
                // a client cookie alone, the NXDOMAIN entry (its own account): through the gate
                let qc = |c: &[u8]| verdict(&p, &frame(&n, &query(&wire("nx.example.org"), 1, cookie_opt(c)))).2.join(",");
                let got = [qc(b"client01"), qc(b"client01")];
                if got != ["pass_cookie_new", "drop_rrl"] {
                    failed.push(format!("{shape}: client cookie only: {got:?}"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Cookies off: COOKIE options are not looked at (the kernel answers as a server without
/// cookies), and valid ones get no bypass.
#[test]
fn cookies_off_answers_cookie_queries() {
    require_root("cookies_off_answers_cookie_queries");
    stay_on_one_cpu();
    let p = prog(false, rrl(1, 0, false));
    let n = net("ipv4", "198.18.10.1");
    let f = frame(&n, &query(&wire("www.example.com"), 1, cookie_opt(&full_cookie(&SECRET, "198.18.10.1", now()))));
    assert_eq!(verdict(&p, &f).2, ["answered"]);
    assert_eq!(verdict(&p, &f).2, ["drop_rrl"]);
}

/// The answer features: kernel answers and bytes per client prefix, NXDOMAIN answers per
/// queried parent, in one interval's snapshot; RRL drops and cookie passes are not answers.
#[test]
fn answer_features_in_snapshots() {
    require_root("answer_features_in_snapshots");
    stay_on_one_cpu();
    let p = prog(true, rrl(100, 2, true));
    let g = p.guard().unwrap();
    g.flip_interval().unwrap();
    let n = net("ipv4", "198.18.11.3");
    let mut bytes = 0u64;
    for i in 0..3 {
        let (_, out, moved) = verdict(&p, &frame(&n, &query(&wire(&format!("gone{i}.example.com")), 1, None)));
        assert_eq!(moved, ["answered"]);
        bytes += (out.len() - 14) as u64;
    }
    for _ in 0..2 {
        let (_, out, _) = verdict(&p, &frame(&n, &query(&wire("www.example.com"), 1, None)));
        bytes += (out.len() - 14) as u64;
    }
    // a cookie query passed: no kernel answer
    assert_eq!(verdict(&p, &frame(&n, &query(&wire("www.example.com"), 1, cookie_opt(b"client01")))).2, ["pass_cookie_new"]);
    let s = g.flip_interval().unwrap();
    let a = s.answers.iter().find(|a| a.prefix == xdns_bpf::guard::feature_prefix("198.18.11.3".parse().unwrap())).expect("the client's answers");
    assert_eq!((a.answers, a.bytes), (5, bytes));
    let parent = g.suffix_hash(&wire("example.com"));
    let nx = s.nxdomains.iter().find(|x| x.hash == parent).expect("NXDOMAIN under example.com");
    assert_eq!((nx.nxdomains, nx.len), (3, wire("example.com").len() as u32));
    let next = g.flip_interval().unwrap();
    assert!(next.answers.is_empty() && next.nxdomains.is_empty(), "the next interval starts empty");
}

/// The gate's passes never touch the frame; a malformed COOKIE option length beyond 255 too.
#[test]
fn cookie_passes_leave_the_frame_whole() {
    require_root("cookie_passes_leave_the_frame_whole");
    stay_on_one_cpu();
    let p = prog(false, RrlSettings { cookies: Some((SECRET, Some(OLD_SECRET))), ..rrl(5, 2, true) });
    for (shape, src, _) in shapes() {
        let n = net(shape, src);
        for c in [full_cookie(&SECRET, src, now() - 1860), full_cookie(&OLD_SECRET, src, now()), b"client01".to_vec(), vec![7u8; 300]] {
            let f = frame(&n, &query(&wire("www.example.com"), 1, cookie_opt(&c)));
            let (act, out, moved) = verdict(&p, &f);
            assert_eq!(act, XDP_PASS, "{shape}: {moved:?}");
            assert_eq!(out, f, "{shape}: a pass leaves the frame as it came");
        }
    }
}

/// Allowlisted clients are never rate limited (issue 25): with the kernel's RRL on, the whole
/// allowlist is in the guard's lists, and the gate skips RRL for a source the guard stage
/// matched to an allow prefix, whether or not a block prefix holds it too; a client outside
/// the allowlist in the same account's place is limited; over IPv4, IPv6 and VLAN.
#[test]
fn rrl_never_limits_allowlisted_sources() {
    require_root("rrl_never_limits_allowlisted_sources");
    stay_on_one_cpu();
    let p = prog(false, rrl(1, 2, false));
    let g = p.guard().unwrap();
    let list = |s: &str| xdns_guard::lists::parse_prefix_list("t", s).unwrap();
    let allow = list("198.18.20.0/24\n198.18.30.0/24\n2001:db8:20::/48\n");
    let mut failed = Vec::new();
    // first an allowlist alone (no block prefix), then under a block prefix
    for (round, block) in ["", "198.18.0.0/16\n198.18.20.9\n2001:db8::/32\n"].into_iter().enumerate() {
        g.replace_lists(&list(block), &allow).unwrap();
        let before = g.counters().unwrap().allowed;
        let others = [format!("198.19.{round}.7"), format!("2001:db9:{round}::7"), format!("198.19.1{round}.9")];
        for ((shape, src), other) in [("ipv4", "198.18.20.9"), ("ipv6", "2001:db8:20::7"), ("vlan", "198.18.30.9")].into_iter().zip(&others) {
            let q = query(&wire("www.example.com"), 1, None);
            for i in 0..6 {
                let (act, _, moved) = verdict(&p, &frame(&net(shape, src), &q));
                if act != XDP_TX || moved != ["answered"] {
                    failed.push(format!("{block:?} {shape}: allowlisted {src}, query {i}: action {act}, {moved:?}"));
                }
            }
            // outside the allowlist (and the blocklist): limited as before
            let got: Vec<_> = (0..3).map(|_| verdict(&p, &frame(&net(shape, other.as_str()), &q)).2.join(",")).collect();
            if got != ["answered", "drop_rrl", "answered_slip"] {
                failed.push(format!("{block:?} {shape}: {other}: {got:?}"));
            }
        }
        let allowed = g.counters().unwrap().allowed - before;
        if allowed != 18 {
            failed.push(format!("{block:?}: {allowed} packets matched an allow prefix, want 18"));
        }
    }
    // with the kernel's RRL off, the lists go back to allow prefixes under blocks only
    g.set_rrl(&rrl(0, 2, false)).unwrap();
    let r = g.replace_lists(&list(""), &allow).unwrap();
    assert_eq!(r.entries, 0, "no block: no allow prefix written");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The daemon's rotation of the cookie secret, as the kernel sees it: each rotation writes
/// (new current, previous); a cookie made before a rotation passes as valid after one and
/// is an invalid cookie after two (limited, then passed for a new cookie); IPv4 and IPv6.
#[test]
fn a_cookie_outlives_one_rotation_not_two() {
    require_root("a_cookie_outlives_one_rotation_not_two");
    stay_on_one_cpu();
    let mut secrets = xdns_guard::cookies::CookieSecrets::new(OLD_SECRET);
    let settings = |s: &xdns_guard::cookies::CookieSecrets| RrlSettings { cookies: Some((*s.current(), s.previous().copied())), ..rrl(100, 2, true) };
    let p = prog(false, settings(&secrets));
    let g = p.guard().unwrap();
    let mut failed = Vec::new();
    let cookies: Vec<_> = ["198.18.40.1", "2001:db8:40::1"].iter().map(|src| (*src, full_cookie(&OLD_SECRET, src, now()))).collect();
    let ask = |src: &str, c: &[u8]| verdict(&p, &frame(&net(if src.contains(':') { "ipv6" } else { "ipv4" }, src), &query(&wire("www.example.com"), 1, cookie_opt(c)))).2.join(",");
    // fresh under the current secret: echoed by the kernel; under the previous: userspace's
    for (round, want) in ["answered", "pass_cookie", "pass_cookie_new"].into_iter().enumerate() {
        if round > 0 {
            secrets.rotate([round as u8; 16]);
            g.set_rrl(&settings(&secrets)).unwrap();
        }
        for (src, c) in &cookies {
            let got = ask(src, c);
            if got != want {
                failed.push(format!("after {round} rotations, {src}: {got}, want {want}"));
            }
        }
    }
    // a cookie of the current secret is answered
    for (src, _) in &cookies {
        let got = ask(src, &full_cookie(&[2u8; 16], src, now()));
        if got != "answered" {
            failed.push(format!("current secret, {src}: {got}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The verified cookies the kernel keeps per CPU (`xdns_guard_cookies`, bpf/rrl.h) answer
/// only for what was verified: once a client's cookie is echoed, the same 24 bytes from
/// another address, with one bit of the hash or the stamp changed, are not echoed (they are
/// invalid: limited, then passed for a new cookie), while the client's own still is, however
/// often; another client's own cookie is verified on its own, and the first client's still
/// answers after it. IPv4, IPv6 and VLAN.
#[test]
fn a_verified_cookie_answers_only_for_its_bytes_and_address() {
    require_root("a_verified_cookie_answers_only_for_its_bytes_and_address");
    stay_on_one_cpu();
    let p = prog(false, rrl(1, 0, true));
    let mut failed = Vec::new();
    for (shape, src, other) in shapes() {
        let t = now() - 60;
        let c = full_cookie(&SECRET, src, t);
        let ask = |from: &str, c: &[u8], name: &str| verdict(&p, &frame(&net(shape, from), &query(&wire(name), 1, cookie_opt(c)))).2.join(",");
        for i in 0..3 {
            let got = ask(src, &c, "www.example.com");
            if got != "answered" {
                failed.push(format!("{shape}: the client's own cookie, #{i}: {got}"));
            }
        }
        let mut hash = c.clone();
        hash[20] ^= 0x40;
        let mut stamp = c.clone();
        stamp[15] ^= 1;
        // each its own name (account): within the rate, passed for a new cookie, then limited
        for (what, from, bytes, name) in [
            ("from another address", other, c.clone(), "ns1.example.com"),
            ("one bit of the hash", src, hash, "ns2.example.com"),
            ("one bit of the stamp", src, stamp, "mail.example.com"),
        ] {
            let got = [ask(from, &bytes, name), ask(from, &bytes, name)];
            if got != ["pass_cookie_new", "drop_rrl"] {
                failed.push(format!("{shape}: the client's cookie {what}: {got:?}"));
            }
        }
        // the other client's own cookie verifies on its own, and the first still answers
        let oc = full_cookie(&SECRET, other, t);
        for (from, cookie) in [(other, &oc), (src, &c), (other, &oc)] {
            let got = ask(from, cookie, "www.example.com");
            if got != "answered" {
                failed.push(format!("{shape}: {from}'s own cookie after the other's: {got}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The account table (xdns_abi.h: sets of xdns_guard::RRL_WAYS ways) with one set, where
/// every account collides: four accounts share it and keep their own buckets whichever way
/// each took (the one in the last way too); a fifth evicts the one updated longest ago,
/// which alone restarts full, and counts as a live account evicted (`rrl_full`); the
/// newcomer is limited at the rate like any account. IPv4, IPv6 and VLAN.
#[test]
fn rrl_table_collisions_ways_and_eviction() {
    require_root("rrl_table_collisions_ways_and_eviction");
    stay_on_one_cpu();
    assert_eq!(xdns_bpf::guard::rrl_sets(4), 1);
    assert_eq!(xdns_bpf::guard::rrl_sets(5), 2);
    assert_eq!(xdns_bpf::guard::rrl_sets(262_144), 65_536);
    let mut failed = Vec::new();
    for (shape, _, _) in shapes() {
        // Rate 1 refills a bucket a second after its last update, so the sequence below decides
        // only when it runs within that second. The tests of this binary share one CPU and CI
        // runs them beside each other: a run that took longer is repeated (up to five times, a
        // fresh table each), a run that was quick enough and failed is a failure.
        for attempt in 1..=5 {
            let started = std::time::Instant::now();
            let got = collisions_ways_and_eviction(shape);
            let took = started.elapsed();
            if got.is_empty() {
                break;
            }
            if took < std::time::Duration::from_millis(900) {
                failed.extend(got);
                break;
            }
            eprintln!("{shape}: attempt {attempt} took {took:?}, past the refill period: {got:?}");
            if attempt == 5 {
                failed.push(format!("{shape}: five attempts each took a second or more; the last: {got:?}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// One run of `rrl_table_collisions_ways_and_eviction` on a fresh table: what went wrong.
fn collisions_ways_and_eviction(shape: &str) -> Vec<String> {
    let mut failed = Vec::new();
    // a fresh table for each shape: one set of four ways
    let p = prog_with(GuardStage { rrl_accounts: 4, ..stage(false) }, rrl(1, 0, false));
    let g = p.guard().unwrap();
    let q = query(&wire("www.example.com"), 1, None);
    let client = |i: u32| {
        let src = if shape == "ipv6" { format!("2001:db8:{i:x}::7") } else { format!("198.18.{i}.7") };
        frame(&net(shape, &src), &q)
    };
    // the action alone (a rate-1 bucket refills in a second: reading the verdict counters
    // around every run made the test slow enough, on a loaded machine, for one to refill);
    // the verdicts are checked in total at the end
    let frames: Vec<_> = (0..=5).map(client).collect();
    let count = |name: &str| p.counters().unwrap().into_iter().find(|(n, _)| n == name).map_or(0, |(_, c)| c);
    let (answered0, limited0) = (count("answered"), count("drop_rrl"));
    let ask = |i: u32| match p.test_run(&frames[i as usize]).unwrap().0 {
        XDP_TX => "answered".to_string(),
        XDP_DROP => "drop_rrl".to_string(),
        a => format!("action {a}"),
    };
    // four prefixes, a tick or more apart (the account's clock is the coarse one): each
    // gets its answer, then is limited (rate 1: a token a second, so that a slow run
    // does not refill a bucket before the checks below); the ways hold four buckets
    for i in 1..=4 {
        let got: Vec<_> = (0..2).map(|_| ask(i)).collect();
        if got != ["answered", "drop_rrl"] {
            failed.push(format!("{shape}: account {i} in a shared set: {got:?}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    // each still limited: no account overwrote another's way
    let again: Vec<_> = (1..=4).map(&ask).collect();
    if again != ["drop_rrl"; 4] {
        failed.push(format!("{shape}: the four accounts after filling the set: {again:?}"));
    }
    let full = g.counters().unwrap().rrl_full;
    // a fifth: it takes the way of account 1 (updated longest ago), which restarts full
    let fifth: Vec<_> = (0..2).map(|_| ask(5)).collect();
    if fifth != ["answered", "drop_rrl"] {
        failed.push(format!("{shape}: the fifth account: {fifth:?}"));
    }
    if g.counters().unwrap().rrl_full != full + 1 {
        failed.push(format!("{shape}: rrl_full {} -> {}, want one eviction", full, g.counters().unwrap().rrl_full));
    }
    let after: Vec<_> = (1..=4).map(&ask).collect();
    if after != ["answered", "drop_rrl", "drop_rrl", "drop_rrl"] {
        failed.push(format!("{shape}: after the eviction: {after:?}, want account 1 alone restarted"));
    }
    // 4 + 1 + 1 answered, 4 + 4 + 1 + 3 limited, each counted under its verdict
    let (answered, limited) = (count("answered") - answered0, count("drop_rrl") - limited0);
    if (answered, limited) != (6, 12) {
        failed.push(format!("{shape}: verdicts counted: answered {answered}, drop_rrl {limited}; want 6, 12"));
    }
    failed
}

/// The paths `examples/rrl_gate.rs` times (the bench of the <= 1.15x goal: `bench/guard.py
/// --gate`; no time is asserted here) answer as the bench assumes: with the guard, RRL at a
/// rate never reached and cookies on, a plain query gets the guard-off answer byte for byte,
/// every time (its account pays, never limits); a fresh valid cookie is echoed, the same
/// bytes whether it is verified by a SipHash (first query) or compared with the kept copy
/// (the same cookie again), and each of many new client cookies is echoed too; the guard off
/// answers the cookie query ignoring the option.
#[test]
fn gate_bench_paths_answer_alike() {
    require_root("gate_bench_paths_answer_alike");
    stay_on_one_cpu();
    let mut off = load();
    off.install(&compile_kernel_data(&zones())).unwrap();
    let on = prog(false, rrl(1_000_000_000, 2, true));
    let g = on.guard().unwrap();
    let mut failed = Vec::new();
    let mut echoed = 0;
    for (shape, src, _) in shapes() {
        let n = net(shape, src);
        let f = frame(&n, &query(&wire("www.example.com"), 1, None));
        let (act, want, moved) = verdict(&off, &f);
        assert!(act == XDP_TX && moved == ["answered"], "{shape}: the guard off answers: {moved:?}");
        for i in 0..50 {
            let (act, got, moved) = verdict(&on, &f);
            if act != XDP_TX || moved != ["answered"] || got != want {
                failed.push(format!("{shape} plain #{i}: {moved:?}\n got  {got:02x?}\n want {want:02x?}"));
            }
        }
        let t = now();
        let fc = frame(&n, &query(&wire("www.example.com"), 1, cookie_opt(&full_cookie(&SECRET, src, t))));
        let (act, _, moved) = verdict(&off, &fc);
        assert!(act == XDP_TX && moved == ["answered"], "{shape}: the guard off answers the cookie query: {moved:?}");
        let (act, first, moved) = verdict(&on, &fc);
        assert!(act == XDP_TX && moved == ["answered"] && checksums_ok(&first), "{shape}: a fresh cookie is echoed: {moved:?}");
        echoed += 1;
        for i in 0..50 {
            let (act, got, moved) = verdict(&on, &fc);
            if act != XDP_TX || moved != ["answered"] || got != first {
                failed.push(format!("{shape} kept cookie #{i}: {moved:?}\n got  {got:02x?}\n want {first:02x?}"));
            }
            echoed += 1;
        }
        for i in 1..=50u64 {
            let client = (7u64 << 32 | i).to_le_bytes();
            let c = client_and_server_cookie(&SECRET, &client, src, t);
            let (act, got, moved) = verdict(&on, &frame(&n, &query(&wire("www.example.com"), 1, cookie_opt(&c))));
            let opt = cookie_opt_of(dns_of(&got));
            if act != XDP_TX || moved != ["answered"] || opt.as_deref() != Some(&c[..]) || !checksums_ok(&got) {
                failed.push(format!("{shape} new cookie #{i}: {moved:?}, echoed {opt:02x?}"));
            }
            echoed += 1;
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert_eq!(g.counters().unwrap().cookie_echoed, echoed, "cookie_echoed counts the echoed answers");
}

/// The data of the COOKIE option of a reply's OPT (the last record), if any.
fn cookie_opt_of(dns: &[u8]) -> Option<Vec<u8>> {
    // an echoed option is the OPT's last 28 bytes: code 10, length 24, the cookie
    let tail = dns.get(dns.len().checked_sub(28)?..)?;
    (tail[..4] == [0, 10, 0, 24]).then(|| tail[4..].to_vec())
}

/// The RRL memo (bpf/rrl.h, `xdns_rrl_memo`): an answer of an account its CPU decided by the
/// bucket's call before pays that account's bucket inline (a hit, `rrl_memo_hits`), with the
/// guard-off answer's exact bytes; the limited answers are the call's (drop, slip: its exact
/// bytes); two accounts in turn hit when their memo slots differ and miss when they share one,
/// with the same verdicts either way; and a hit never pays another account's bucket (another
/// answer of the same client keeps its own count). IPv4, IPv6, VLAN.
#[test]
fn rrl_memo_hits_and_misses() {
    require_root("rrl_memo_hits_and_misses");
    stay_on_one_cpu();
    let mut off = load();
    off.install(&compile_kernel_data(&zones())).unwrap();
    let mut failed = Vec::new();
    for (shape, src, _) in shapes() {
        let n = net(shape, src);
        let a = query(&wire("www.example.com"), 1, None);
        let aaaa = query(&wire("www.example.com"), 28, None);
        let fa = frame(&n, &a);
        let f6 = frame(&n, &aaaa);
        let want = |f: &[u8]| {
            let (act, out, moved) = verdict(&off, f);
            assert!(act == XDP_TX && moved == ["answered"] && checksums_ok(&out), "{shape}: the guard off answers");
            out
        };
        // frames asked in turn: the verdicts (an answer's bytes checked against the guard off's)
        // and the hits they added
        let run = |p: &XdpProgram, seq: &[&Vec<u8>], failed: &mut Vec<String>, what: &str| -> (Vec<String>, u64) {
            let h0 = p.guard().unwrap().counters().unwrap().rrl_memo_hits;
            let mut got = Vec::new();
            for (i, f) in seq.iter().enumerate() {
                let (act, out, moved) = verdict(p, f);
                if moved == ["answered"] && (act != XDP_TX || out != want(f)) {
                    failed.push(format!("{shape} {what} #{i}: action {act}, bytes {out:02x?}"));
                }
                got.push(moved.join(","));
            }
            (got, p.guard().unwrap().counters().unwrap().rrl_memo_hits - h0)
        };
        // one account: the first answer inserts it (the call), the next two pay inline, the
        // limited ones are the call's (drop, slip every 2nd: the slip's bytes as without it)
        let p = prog(false, rrl(3, 2, false));
        let (got, hits) = run(&p, &[&fa; 8], &mut failed, "one account");
        let want_seq = ["answered", "answered", "answered", "drop_rrl", "answered_slip", "drop_rrl", "answered_slip", "drop_rrl"];
        if got != want_seq || hits != 2 {
            failed.push(format!("{shape} one account: {got:?}, {hits} hits; want {want_seq:?}, 2 hits"));
        }
        let (act, out, moved) = verdict(&p, &fa);
        if moved != ["answered_slip"] || act != XDP_TX || out != slip_bytes(&n, &a) {
            failed.push(format!("{shape} one account, the slip: {moved:?} {out:02x?}"));
        }
        // which clients' accounts (per address) share the memo slot of `fa`'s: asked between
        // two of fa's answers, a client in another slot leaves the second a hit, one in the
        // same slot makes it a miss (rate never reached)
        let p = prog(false, rrl_hosts(1_000_000_000, 2));
        let mut other_slot = None;
        let mut same_slot = None;
        for i in 0..HOSTS {
            let fb = frame(&net(shape, &host(shape, i)), &a);
            let (got, _) = run(&p, &[&fa, &fb], &mut failed, "slot probe");
            let (again, hits) = run(&p, &[&fa], &mut failed, "slot probe");
            if got != ["answered"; 2] || again != ["answered"] {
                failed.push(format!("{shape} slot probe {i}: {got:?} {again:?}"));
            }
            match hits {
                1 if other_slot.is_none() => other_slot = Some(fb),
                0 if same_slot.is_none() => same_slot = Some(fb),
                _ => {}
            }
            if other_slot.is_some() && same_slot.is_some() {
                break;
            }
        }
        let (Some(fb), Some(fc)) = (other_slot, same_slot) else {
            failed.push(format!("{shape}: {HOSTS} clients, none in another memo slot or none in the same"));
            continue;
        };
        // two accounts in turn, rate 3: the same verdicts whether they hit or miss (fa's
        // account per address too)
        let want_seq = ["answered", "answered", "answered", "answered", "answered", "answered", "drop_rrl", "drop_rrl"];
        for (what, fx, want_hits) in [("another slot", &fb, 4), ("the same slot", &fc, 0)] {
            let p = prog(false, rrl_hosts(3, 2));
            let seq: Vec<&Vec<u8>> = (0..4).flat_map(|_| [&fa, fx]).collect();
            let (got, hits) = run(&p, &seq, &mut failed, what);
            if got != want_seq || hits != want_hits {
                failed.push(format!("{shape} two prefixes in turn, {what}: {got:?}, {hits} hits; want {want_seq:?}, {want_hits} hits"));
            }
        }
        // another answer of the same client (another account, whatever the slots): each keeps
        // its own three answers, so no hit paid the other's bucket
        let p = prog(false, rrl(3, 2, false));
        let (got, _) = run(&p, &[&fa, &f6, &f6, &f6, &fa, &fa, &fa, &f6], &mut failed, "two answers");
        let want_seq = ["answered", "answered", "answered", "answered", "answered", "answered", "drop_rrl", "drop_rrl"];
        if got != want_seq {
            failed.push(format!("{shape} two answers of one client: {got:?}; want {want_seq:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The memo keeps no bucket of its own: what another path spends from the account (here the
/// gate, which accounts a client-cookie query like the answer, as another CPU's call or memo
/// would) is gone for it too. Rate 3: a plain answer (the call), a client-cookie query (the
/// gate: `pass_cookie_new`), a plain answer (the memo), and the fourth is limited; a copy of
/// the bucket per CPU would have answered it. And a memo whose way another account took (the
/// gate's new accounts fill the one set of a four-account table and evict the oldest) misses:
/// the account is made again by the call, restarts full, and its next answer hits.
#[test]
fn rrl_memo_spends_the_shared_bucket() {
    require_root("rrl_memo_spends_the_shared_bucket");
    stay_on_one_cpu();
    let mut failed = Vec::new();
    for (shape, src, _) in shapes() {
        let n = net(shape, src);
        let plain = frame(&n, &query(&wire("www.example.com"), 1, None));
        let client_only = frame(&n, &query(&wire("www.example.com"), 1, cookie_opt(b"client01")));
        let p = prog(false, rrl(3, 0, true));
        let g = p.guard().unwrap();
        let h0 = g.counters().unwrap().rrl_memo_hits;
        let got: Vec<_> = [&plain, &client_only, &plain, &plain].iter().map(|f| verdict(&p, f).2.join(",")).collect();
        let hits = g.counters().unwrap().rrl_memo_hits - h0;
        if got != ["answered", "pass_cookie_new", "answered", "drop_rrl"] || hits != 1 {
            failed.push(format!("{shape}: one bucket, two paths: {got:?}, {hits} hits; want answered, pass_cookie_new, answered, drop_rrl, 1 hit"));
        }

        // eviction: one set of four ways
        let p = prog_with(GuardStage { rrl_accounts: 4, ..stage(false) }, rrl(2, 0, true));
        let g = p.guard().unwrap();
        let client = |i: u32| if shape == "ipv6" { format!("2001:db8:{i:x}::7") } else { format!("198.18.{i}.7") };
        let first = frame(&net(shape, &client(1)), &query(&wire("www.example.com"), 1, None));
        let mut got = vec![verdict(&p, &first).2.join(",")];
        // four other accounts through the gate: three empty ways, then the oldest (account 1's)
        for i in 2..=5 {
            got.push(verdict(&p, &frame(&net(shape, &client(i)), &query(&wire("www.example.com"), 1, cookie_opt(b"client01")))).2.join(","));
        }
        let full0 = g.counters().unwrap().rrl_full;
        let h0 = g.counters().unwrap().rrl_memo_hits;
        let again = verdict(&p, &first).2.join(",");
        let h1 = g.counters().unwrap().rrl_memo_hits;
        let full1 = g.counters().unwrap().rrl_full;
        let third = verdict(&p, &first).2.join(",");
        let h2 = g.counters().unwrap().rrl_memo_hits;
        let fourth = verdict(&p, &first).2.join(",");
        let want_fill = ["answered", "pass_cookie_new", "pass_cookie_new", "pass_cookie_new", "pass_cookie_new"];
        if got != want_fill {
            failed.push(format!("{shape}: filling the set: {got:?}, want {want_fill:?}"));
        }
        if again != "answered" || h1 != h0 || full1 != full0 + 1 {
            failed.push(format!("{shape}: after its way was taken: {again}, hits +{}, rrl_full +{}; want answered by the call (a miss), one eviction", h1 - h0, full1 - full0));
        }
        if third != "answered" || h2 != h1 + 1 || fourth != "drop_rrl" {
            failed.push(format!("{shape}: the account made again: {third} (hits +{}), then {fourth}; want answered by the memo, then drop_rrl", h2 - h1));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The memo's slots (`xdns_guard_rrl_memo`, a cheap hash of the key) collide: accounts that
/// share a slot take it in turn and never pay each other's bucket. Three prefixes in one slot,
/// asked in turn at rate 3: each gets its own three answers, then drops, and none hits. An
/// account whose slot another took and which then comes back is decided by the call, which
/// refills the slot with the same shared bucket (its balance goes on, it does not restart):
/// A, A (a hit), C (same slot), A (the call: its third token), A (no token: dropped), one hit.
/// And 16 accounts in distinct slots, asked in turn, all hit once the call has made them.
#[test]
fn rrl_memo_slot_collisions_never_share_a_bucket() {
    require_root("rrl_memo_slot_collisions_never_share_a_bucket");
    stay_on_one_cpu();
    let mut failed = Vec::new();
    for (shape, src, _) in shapes() {
        let a = query(&wire("www.example.com"), 1, None);
        let fa = frame(&net(shape, src), &a);
        let run = |p: &XdpProgram, seq: &[&Vec<u8>]| -> (Vec<String>, u64) {
            let h0 = p.guard().unwrap().counters().unwrap().rrl_memo_hits;
            let got = seq.iter().map(|f| verdict(p, f).2.join(",")).collect();
            (got, p.guard().unwrap().counters().unwrap().rrl_memo_hits - h0)
        };
        // clients whose accounts (per address) share fa's slot (rate never reached): asked
        // between two of fa's answers, the second misses
        let p = prog(false, rrl_hosts(1_000_000_000, 0));
        let mut same = Vec::new();
        for i in 0..HOSTS {
            let fb = frame(&net(shape, &host(shape, i)), &a);
            run(&p, &[&fa, &fb]);
            if run(&p, &[&fa]).1 == 0 {
                same.push(fb);
            }
            if same.len() == 2 {
                break;
            }
        }
        if same.len() < 2 {
            failed.push(format!("{shape}: {HOSTS} clients, fewer than two in the memo slot of the first's account"));
            continue;
        }
        let (fc, fd) = (&same[0], &same[1]);

        let p = prog(false, rrl_hosts(3, 0));
        let seq: Vec<&Vec<u8>> = (0..4).flat_map(|_| [&fa, fc, fd]).collect();
        let (got, hits) = run(&p, &seq);
        let mut want = vec!["answered"; 9];
        want.extend(["drop_rrl"; 3]);
        if got != want || hits != 0 {
            failed.push(format!("{shape} three accounts in one slot: {got:?}, {hits} hits; want {want:?}, 0 hits"));
        }

        let p = prog(false, rrl_hosts(3, 0));
        let (got, hits) = run(&p, &[&fa, &fa, fc, &fa, &fa]);
        let want = ["answered", "answered", "answered", "answered", "drop_rrl"];
        if got != want || hits != 1 {
            failed.push(format!("{shape} a slot taken and taken back: {got:?}, {hits} hits; want {want:?}, 1 hit"));
        }

        // 16 clients whose accounts' slots differ, found greedily: a client that leaves every
        // one chosen before a hit on a second pass takes a slot of its own
        let p = prog(false, rrl_hosts(1_000_000_000, 0));
        let mut distinct: Vec<Vec<u8>> = Vec::new();
        for i in 0..HOSTS {
            let f = frame(&net(shape, &host(shape, i)), &a);
            let mut seq = vec![&f];
            seq.extend(distinct.iter());
            run(&p, &seq);
            if run(&p, &seq).1 == seq.len() as u64 {
                distinct.push(f);
            }
            if distinct.len() == 16 {
                break;
            }
        }
        if distinct.len() != 16 {
            failed.push(format!("{shape}: {} clients in distinct memo slots, want 16", distinct.len()));
            continue;
        }
        let p = prog(false, rrl_hosts(1_000_000_000, 0));
        let seq: Vec<&Vec<u8>> = (0..3).flat_map(|_| distinct.iter()).collect();
        let (got, hits) = run(&p, &seq);
        if got.iter().any(|g| g != "answered") || hits != 32 {
            failed.push(format!("{shape} 16 accounts in 16 slots, three rounds: {hits} hits, want 32; {got:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
