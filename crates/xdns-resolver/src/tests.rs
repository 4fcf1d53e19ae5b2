//! Resolution against the in-memory tree of [`crate::fake`].

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use xdns_wire::{AnswerCache, CacheKey, CachedAnswer};

use crate::fake::{n, records, Behaviour::*, FakeNet, Zone};
use crate::msg::{parse_reply, rtype};
use crate::{Clock, Config, ResolveError, Resolver, RootHints};

const NS: u64 = 1_000_000_000;

/// Records every kernel cache insertion.
#[derive(Default)]
struct Recorder(Mutex<Vec<CachedAnswer>>);
impl AnswerCache for Recorder {
    fn insert(&self, a: &CachedAnswer) -> Result<(), String> {
        self.0.lock().unwrap().push(a.clone());
        Ok(())
    }
    fn remove(&self, _: &CacheKey) -> Result<(), String> {
        Ok(())
    }
}

fn zone(apex: &str, text: &str) -> Zone {
    Zone {
        apex: n(apex),
        records: records(text),
    }
}

/// The tree: root (one silent root server), `test.`, `net.`, leaf zones with glue, glueless,
/// cross-zone CNAMEs, spoofing, truncating and out-of-bailiwick glue.
fn tree() -> Arc<FakeNet> {
    let net = FakeNet {
        poison: vec![6, 6, 6, 6],
        ..Default::default()
    };
    let root = zone(
        ".",
        ". 86400 SOA a.root-servers.test. nstld.test. 1 1800 900 604800 86400
         . 518400 NS a.root-servers.test.
         . 518400 NS b.root-servers.test.
         test. 172800 NS ns1.nic.test.
         test. 172800 NS ns2.nic.test.
         ns1.nic.test. 172800 A 198.18.1.1
         ns2.nic.test. 172800 A 198.18.1.2
         net. 172800 NS ns.nic.net.
         ns.nic.net. 172800 A 198.18.2.1",
    );
    net.add("198.18.0.1", Normal, vec![root.clone()]);
    net.add("198.18.0.2", Silent, vec![root]);
    let test = zone(
        "test.",
        "test. 900 SOA ns1.nic.test. h.test. 1 1800 900 604800 120
         test. 172800 NS ns1.nic.test.
         example.test. 3600 NS ns1.example.test.
         ns1.example.test. 3600 A 198.18.3.1
         glueless.test. 3600 NS ns.dns-host.net.
         spoofed.test. 3600 NS ns.spoofed.test.
         ns.spoofed.test. 3600 A 198.18.5.1
         poisoned.test. 3600 NS ns.poisoned.test.
         ns.poisoned.test. 3600 A 198.18.5.2
         tc.test. 3600 NS ns.tc.test.
         ns.tc.test. 3600 A 198.18.6.1
         old.test. 3600 NS ns.old.test.
         ns.old.test. 3600 A 198.18.6.2
         shortglue.test. 3600 NS ns.shortglue.test.
         ns.shortglue.test. 60 A 198.18.6.3
         evil.test. 3600 NS ns.example.net.
         ns.example.net. 3600 A 6.6.6.6
         nxns.test. 3600 NS a.nxns.net.
         nxns.test. 3600 NS b.nxns.net.
         nxns.test. 3600 NS c.nxns.net.
         nxns.test. 3600 NS d.nxns.net.
         nxns.test. 3600 NS e.nxns.net.
         nxns.test. 3600 NS f.nxns.net.
         nxns.test. 3600 NS g.nxns.net.
         nxns.test. 3600 NS h.nxns.net.",
    );
    net.add("198.18.1.1", Normal, vec![test.clone()]);
    net.add("198.18.1.2", Silent, vec![test]);
    net.add(
        "198.18.2.1",
        Normal,
        vec![zone(
            "net.",
            "net. 900 SOA ns.nic.net. h.net. 1 1800 900 604800 300
             net. 172800 NS ns.nic.net.
             dns-host.net. 3600 NS ns.dns-host.net.
             ns.dns-host.net. 3600 A 198.18.2.2
             example.net. 3600 NS ns.example.net.
             ns.example.net. 3600 A 198.18.2.3",
        )],
    );
    net.add(
        "198.18.2.2",
        Normal,
        vec![zone(
            "dns-host.net.",
            "dns-host.net. 900 SOA ns.dns-host.net. h.net. 1 1800 900 604800 300
             ns.dns-host.net. 3600 A 198.18.4.1",
        )],
    );
    net.add(
        "198.18.2.3",
        Normal,
        vec![
            zone(
                "example.net.",
                "example.net. 900 SOA ns.example.net. h.net. 1 1800 900 604800 300
                 ns.example.net. 3600 A 198.18.2.3
                 www.example.net. 3600 A 198.18.2.80",
            ),
            zone(
                "evil.test.",
                "evil.test. 900 SOA ns.example.net. h.net. 1 1800 900 604800 300
                 www.evil.test. 3600 A 198.18.2.81",
            ),
        ],
    );
    net.add(
        "198.18.4.1",
        Normal,
        vec![zone(
            "glueless.test.",
            "glueless.test. 900 SOA ns.dns-host.net. h.test. 1 1800 900 604800 300
             www.glueless.test. 3600 A 198.18.4.80",
        )],
    );
    net.add(
        "198.18.3.1",
        Normal,
        vec![zone(
            "example.test.",
            "example.test. 300 SOA ns1.example.test. h.example.test. 1 1800 900 604800 60
             example.test. 3600 NS ns1.example.test.
             ns1.example.test. 3600 A 198.18.3.1
             www.example.test. 300 A 198.18.3.80
             www.example.test. 300 A 198.18.3.81
             local.example.test. 300 CNAME www.example.test.
             alias.example.test. 300 CNAME www.glueless.test.
             far.example.test. 300 CNAME www.example.net.
             dangle.example.test. 300 CNAME nothere.example.test.
             a.sub.example.test. 300 TXT x
             short.example.test. 20 A 198.18.3.82",
        )],
    );
    let leaf = |apex: &str, ip: &str| {
        zone(
            apex,
            &format!(
                "{apex} 900 SOA ns.{apex} h.test. 1 1800 900 604800 300\nwww.{apex} 3600 A {ip}"
            ),
        )
    };
    net.add(
        "198.18.5.1",
        SpoofThenAnswer,
        vec![leaf("spoofed.test.", "198.18.5.80")],
    );
    net.add(
        "198.18.5.2",
        SpoofOnly,
        vec![leaf("poisoned.test.", "198.18.5.81")],
    );
    net.add(
        "198.18.6.1",
        Truncate,
        vec![leaf("tc.test.", "198.18.6.80")],
    );
    net.add("198.18.6.2", NoEdns, vec![leaf("old.test.", "198.18.6.81")]);
    net.add(
        "198.18.6.3",
        Normal,
        vec![leaf("shortglue.test.", "198.18.6.82")],
    );
    Arc::new(net)
}

fn hints() -> RootHints {
    RootHints::parse(
        ". 3600000 NS a.root-servers.test.\n\
         . 3600000 NS b.root-servers.test.\n\
         a.root-servers.test. 3600000 A 198.18.0.1\n\
         b.root-servers.test. 3600000 A 198.18.0.2\n",
        Path::new("hints"),
    )
    .unwrap()
}

struct Setup {
    net: Arc<FakeNet>,
    res: Arc<Resolver>,
    clock: Arc<AtomicU64>,
    kernel: Arc<Recorder>,
}

fn setup(cfg: Config) -> Setup {
    let net = tree();
    let clock = Arc::new(AtomicU64::new(1_000 * NS));
    let kernel = Arc::new(Recorder::default());
    let res = Resolver::new(
        cfg,
        &hints(),
        net.clone(),
        kernel.clone(),
        Clock::Manual(clock.clone()),
    );
    Setup {
        net,
        res,
        clock,
        kernel,
    }
}

/// Without root priming (the tests below count queries from the hints on; priming has tests
/// of its own).
fn cfg() -> Config {
    Config {
        prime_root: false,
        qname_minimisation: false,
        upstream_timeout: Duration::from_millis(100),
        resolve_timeout: Duration::from_secs(3),
        ..Config::default()
    }
}

fn key(name: &str, qtype: u16) -> CacheKey {
    CacheKey {
        qname: n(name),
        qtype,
        dnssec_ok: false,
    }
}

/// The answer as a message (replayed for a plain query) and its parse.
fn replay(a: &CachedAnswer, now: u64) -> crate::msg::Reply {
    let mut q = Vec::new();
    q.extend_from_slice(&[0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend_from_slice(&a.qname);
    q.extend_from_slice(&a.qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    let q = xdns_wire::Query::parse(&q).unwrap();
    let out = xdns_wire::cache::replay(a, &q, now, &xdns_wire::Limits::tcp(1232)).unwrap();
    parse_reply(&out).unwrap()
}

fn a_records(r: &crate::msg::Reply) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = r
        .answer
        .iter()
        .filter(|rr| rr.rtype == rtype::A)
        .map(|rr| IpAddr::from(<[u8; 4]>::try_from(&rr.rdata[..]).unwrap()))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn resolution_table() {
    // (question, type, rcode, A records in the answer, CNAMEs in the answer, SOA in authority)
    type Case = (&'static str, u16, u16, &'static [&'static str], usize, bool);
    let table: &[Case] = &[
        (
            "www.example.test.",
            rtype::A,
            0,
            &["198.18.3.80", "198.18.3.81"],
            0,
            false,
        ),
        (
            "WWW.Example.TEST.",
            rtype::A,
            0,
            &["198.18.3.80", "198.18.3.81"],
            0,
            false,
        ),
        (
            "www.glueless.test.",
            rtype::A,
            0,
            &["198.18.4.80"],
            0,
            false,
        ),
        (
            "local.example.test.",
            rtype::A,
            0,
            &["198.18.3.80", "198.18.3.81"],
            1,
            false,
        ),
        (
            "alias.example.test.",
            rtype::A,
            0,
            &["198.18.4.80"],
            1,
            false,
        ),
        ("far.example.test.", rtype::A, 0, &["198.18.2.80"], 1, false),
        ("dangle.example.test.", rtype::A, 3, &[], 1, true),
        ("nx.example.test.", rtype::A, 3, &[], 0, true),
        ("nothing.test.", rtype::A, 3, &[], 0, true),
        ("nothing.", rtype::A, 3, &[], 0, true),
        ("www.example.test.", rtype::AAAA, 0, &[], 0, true),
        ("sub.example.test.", rtype::A, 0, &[], 0, true),
        ("www.spoofed.test.", rtype::A, 0, &["198.18.5.80"], 0, false),
        ("www.tc.test.", rtype::A, 0, &["198.18.6.80"], 0, false),
        ("www.old.test.", rtype::A, 0, &["198.18.6.81"], 0, false),
        ("www.evil.test.", rtype::A, 0, &["198.18.2.81"], 0, false),
    ];
    for (minimise, (name, qtype, rcode, addrs, cnames, soa)) in [false, true]
        .iter()
        .flat_map(|m| table.iter().map(move |c| (*m, c)))
    {
        let s = setup(Config {
            qname_minimisation: minimise,
            ..cfg()
        });
        let k = CacheKey {
            qname: n(name),
            qtype: *qtype,
            dnssec_ok: false,
        };
        let a = s
            .res
            .resolve(k.clone())
            .await
            .unwrap_or_else(|e| panic!("{name} (minimise {minimise}): {e}"));
        assert_eq!(a.qname, n(name), "{name}: key lowercased");
        let r = replay(&a, s.clock.load(Relaxed));
        assert_eq!(r.rcode(), *rcode, "{name}");
        let want: Vec<IpAddr> = addrs.iter().map(|a| a.parse().unwrap()).collect();
        assert_eq!(a_records(&r), want, "{name}");
        assert_eq!(
            r.answer
                .iter()
                .filter(|rr| rr.rtype == rtype::CNAME)
                .count(),
            *cnames,
            "{name}"
        );
        assert_eq!(
            r.authority.iter().any(|rr| rr.rtype == rtype::SOA),
            *soa,
            "{name}"
        );
        assert!(r.flags & 0x0080 != 0, "{name}: RA");
        assert!(r.flags & 0x0400 == 0, "{name}: AA clear");
        // Nothing from the forged replies or the out-of-bailiwick glue was used.
        assert_eq!(s.net.count("6.6.6.6"), 0, "{name}");
        assert!(
            !a_records(&r).contains(&"6.6.6.6".parse().unwrap()),
            "{name}"
        );
        // The same answer went to the kernel cache.
        let k2 = s.kernel.0.lock().unwrap();
        assert!(
            k2.iter()
                .any(|x| x.qname == a.qname && x.qtype == *qtype && x.body == a.body),
            "{name}"
        );
        if *name == "www.spoofed.test." {
            assert!(
                s.res.counters.rejected_replies.load(Relaxed) >= 4,
                "{name}: forged replies counted"
            );
        }
        if *name == "www.tc.test." {
            assert_eq!(s.res.counters.tcp_fallbacks.load(Relaxed), 1);
        }
    }
}

#[tokio::test]
async fn qname_minimisation_shows_each_server_one_label_more() {
    let s = setup(Config {
        qname_minimisation: true,
        ..cfg()
    });
    let a = s
        .res
        .resolve(key("a.b.c.www.example.test.", rtype::A))
        .await
        .unwrap();
    assert_eq!(replay(&a, s.clock.load(Relaxed)).rcode(), 3);
    let seen = s.net.seen.lock().unwrap().clone();
    let root: Vec<_> = seen
        .iter()
        .filter(|(ip, _, _)| ip.to_string() == "198.18.0.1")
        .map(|(_, n, t)| (xdns_wire::name::to_presentation(n), *t))
        .collect();
    assert_eq!(root, vec![("test.".to_string(), rtype::A)]);
    let tld: Vec<_> = seen
        .iter()
        .filter(|(ip, _, _)| ip.to_string() == "198.18.1.1")
        .map(|(_, n, _)| xdns_wire::name::to_presentation(n))
        .collect();
    assert_eq!(tld, vec!["example.test.".to_string()]);
    // The leaf: www exists (data), c.www does not: the full name is then asked (relaxed).
    let leaf: Vec<_> = seen
        .iter()
        .filter(|(ip, _, _)| ip.to_string() == "198.18.3.1")
        .map(|(_, n, _)| xdns_wire::name::to_presentation(n))
        .collect();
    assert_eq!(
        leaf,
        vec![
            "www.example.test.",
            "c.www.example.test.",
            "a.b.c.www.example.test."
        ]
    );
}

/// A cold CNAME chain across zones (example.test. -> glueless.test., whose server is named in
/// net.) takes one upstream round per zone cut it needs and no more: the target continues from
/// the cached `test.` cut (not from the root), the glueless NS name from the root's `net.`, and
/// each round is one query (the staggered second server is never asked when the first answers
/// at once). Every query is sent from the resolution's own task: no task is spawned per
/// upstream query, so a reply wakes the resolution directly (the spawn and its hand-off were
/// about a fifth of each round of a cold resolution in the lab).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_cname_chain_across_zones_takes_one_round_per_cut() {
    let s = setup(Config {
        qname_minimisation: true,
        fanout: 2,
        fanout_delay: Duration::from_millis(500),
        upstream_timeout: Duration::from_secs(2),
        ..cfg()
    });
    // Both servers of the root and of test. answer: the order they are tried in is random.
    s.net.set_behaviour("198.18.0.2", Normal);
    s.net.set_behaviour("198.18.1.2", Normal);
    let t0 = std::time::Instant::now();
    let a = s
        .res
        .resolve(key("alias.example.test.", rtype::A))
        .await
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    let r = replay(&a, s.clock.load(Relaxed));
    assert_eq!(a_records(&r), vec![IpAddr::from([198, 18, 4, 80])]);
    let asked: Vec<String> = s
        .net
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, n, _)| xdns_wire::name::to_presentation(n))
        .collect();
    assert_eq!(
        asked,
        vec![
            "test.",               // root
            "example.test.",       // test.
            "alias.example.test.", // example.test.: CNAME www.glueless.test.
            "glueless.test.",      // test. (cached cut): NS ns.dns-host.net., no glue
            "net.",                // root, for the NS name
            "dns-host.net.",       // net.: glue for ns.dns-host.net.
            "ns.dns-host.net.",    // dns-host.net.: its authoritative address
            "www.glueless.test.",  // glueless.test.
        ]
    );
    assert_eq!(s.res.counters.upstream_queries.load(Relaxed), 8);
    let tasks = s.net.tasks.lock().unwrap().clone();
    assert!(tasks[0].is_some());
    assert!(
        tasks.iter().all(|t| *t == tasks[0]),
        "queries sent from several tasks: {tasks:?}"
    );
}

#[tokio::test]
async fn negative_ttl_is_min_of_soa_ttl_and_minimum() {
    let s = setup(cfg());
    let a = s
        .res
        .resolve(key("nx.example.test.", rtype::A))
        .await
        .unwrap();
    // SOA TTL 300, MINIMUM 60.
    assert_eq!(a.expires_at_ns - a.stored_at_ns, 60 * NS);
    let r = replay(&a, a.stored_at_ns);
    assert_eq!(r.authority[0].ttl, 60);
    assert_eq!(a.body.flags, 3, "RCODE only, AA clear");
}

#[tokio::test]
async fn poisoning_attempt_fails_and_failure_is_cached() {
    let s = setup(cfg());
    let e = s
        .res
        .resolve(key("www.poisoned.test.", rtype::A))
        .await
        .unwrap_err();
    assert_eq!(e, ResolveError::Failed);
    assert!(s.res.counters.rejected_replies.load(Relaxed) >= 5);
    let before = s.net.total.load(Relaxed);
    let e = s
        .res
        .resolve(key("www.poisoned.test.", rtype::A))
        .await
        .unwrap_err();
    assert_eq!(e, ResolveError::CachedFailure);
    assert_eq!(
        s.net.total.load(Relaxed),
        before,
        "failure cache: no new queries"
    );
    // After failure_ttl, it is tried again.
    s.clock.fetch_add(6 * NS, Relaxed);
    let _ = s.res.resolve(key("www.poisoned.test.", rtype::A)).await;
    assert!(s.net.total.load(Relaxed) > before);
}

#[tokio::test]
async fn cache_hits_and_ttl_decrease() {
    let s = setup(cfg());
    let k = key("www.example.test.", rtype::A);
    assert!(s.res.cached(&k).is_none());
    let a = s.res.resolve(k.clone()).await.unwrap();
    let before = s.net.total.load(Relaxed);
    s.clock.fetch_add(100 * NS + NS / 2, Relaxed);
    let hit = s.res.cached(&k).expect("cached");
    assert_eq!(hit.body, a.body);
    let r = replay(&hit, s.clock.load(Relaxed));
    assert!(r.answer.iter().all(|rr| rr.ttl == 200), "{:?}", r.answer);
    let _ = s.res.resolve(k.clone()).await.unwrap();
    assert_eq!(s.net.total.load(Relaxed), before, "served from cache");
    // A second name in the same zone starts at the cached cut: one query only.
    let _ = s
        .res
        .resolve(key("local.example.test.", rtype::A))
        .await
        .unwrap();
    assert_eq!(s.net.total.load(Relaxed), before + 1);
    // Expired: asked again.
    s.clock.fetch_add(300 * NS, Relaxed);
    assert!(s.res.cached(&k).is_none());
    assert_eq!(s.res.counters.cache_hits.load(Relaxed), 1);
    assert_eq!(s.res.counters.cache_misses.load(Relaxed), 2);
}

#[tokio::test]
async fn nxdomain_cut_answers_names_below() {
    let s = setup(cfg());
    s.res
        .resolve(key("nx.example.test.", rtype::A))
        .await
        .unwrap();
    let before = s.net.total.load(Relaxed);
    let a = s
        .res
        .resolve(key("deep.below.nx.example.test.", 16))
        .await
        .unwrap();
    assert_eq!(
        s.net.total.load(Relaxed),
        before,
        "RFC 8020: no query below an NXDOMAIN"
    );
    assert_eq!(replay(&a, s.clock.load(Relaxed)).rcode(), 3);
    assert_eq!(s.res.counters.nxdomain_cut_hits.load(Relaxed), 1);
}

/// `xdns flush NAME`: one name's answers of every type go, other names stay; an NXDOMAIN
/// cut above the name goes too (it would still deny the name); `--subtree` takes every
/// name below as well.
#[tokio::test]
async fn flush_name_forgets_one_name_or_a_subtree() {
    let s = setup(cfg());
    let www_a = key("www.example.test.", rtype::A);
    let www_txt = key("www.example.test.", 16);
    let x1 = key("x1.example.test.", rtype::A);
    for k in [&www_a, &www_txt, &x1] {
        s.res.resolve(k.clone()).await.unwrap();
    }
    s.res.resolve(key("nx.example.test.", rtype::A)).await.unwrap();
    assert_eq!(s.res.flush_name(&www_a.qname, false), 2, "A and TXT of www");
    assert!(s.res.cached(&www_a).is_none() && s.res.cached(&www_txt).is_none());
    assert!(s.res.cached(&x1).is_some(), "another name stays");
    // Flushing a name below the NXDOMAIN drops the cut: the next ask goes upstream.
    let below = key("deep.nx.example.test.", rtype::A);
    assert_eq!(s.res.flush_name(&below.qname, false), 0);
    let before = s.net.total.load(Relaxed);
    s.res.resolve(below).await.unwrap();
    assert!(s.net.total.load(Relaxed) > before, "the NXDOMAIN cut above was forgotten");
    let apex = key("example.test.", rtype::A);
    assert_eq!(s.res.flush_name(&apex.qname, false), 0, "nothing cached at the apex itself");
    assert!(s.res.cached(&x1).is_some(), "a name flush is not a subtree flush");
    assert!(s.res.flush_name(&apex.qname, true) >= 1);
    assert!(s.res.cached(&x1).is_none(), "--subtree takes the names below");
}

#[tokio::test]
async fn serve_stale_when_authorities_are_silent() {
    let s = setup(cfg());
    let k = key("www.example.test.", rtype::A);
    s.res.resolve(k.clone()).await.unwrap();
    // Expire, and silence the leaf server.
    s.clock.fetch_add(400 * NS, Relaxed);
    s.net.set_behaviour("198.18.3.1", Silent);
    let a = s.res.resolve(k.clone()).await.unwrap();
    let r = replay(&a, s.clock.load(Relaxed));
    assert_eq!(a_records(&r).len(), 2);
    assert!(r.answer.iter().all(|rr| rr.ttl == 30), "{:?}", r.answer);
    assert_eq!(s.res.counters.stale_answers.load(Relaxed), 1);
    assert!(s.res.counters.upstream_timeouts.load(Relaxed) >= 1);
    // Past the stale window: SERVFAIL.
    s.clock.fetch_add(2 * 86_400 * NS, Relaxed);
    assert!(s.res.resolve(k).await.is_err());
}

#[tokio::test]
async fn stale_answer_after_the_client_response_timer() {
    let s = setup(Config {
        upstream_timeout: Duration::from_secs(2),
        resolve_timeout: Duration::from_secs(3),
        stale_answer_after: Duration::from_millis(200),
        ..cfg()
    });
    let k = key("www.example.test.", rtype::A);
    s.res.resolve(k.clone()).await.unwrap();
    s.clock.fetch_add(400 * NS, Relaxed);
    s.net.set_behaviour("198.18.3.1", Silent);
    let t0 = std::time::Instant::now();
    let a = s.res.resolve(k.clone()).await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "{:?}",
        t0.elapsed()
    );
    let r = replay(&a, s.clock.load(Relaxed));
    assert!(r.answer.iter().all(|rr| rr.ttl == 30), "{:?}", r.answer);
    // No stale data: the timer does not apply, the question waits for the resolution.
    let t0 = std::time::Instant::now();
    let _ = s.res.resolve(key("new.example.test.", rtype::A)).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn silent_server_fails_over_and_is_ranked_last() {
    let s = setup(Config { fanout: 1, ..cfg() });
    for i in 0..4 {
        s.res
            .resolve(key(&format!("n{i}.nothing{i}.test."), rtype::A))
            .await
            .unwrap();
    }
    // The silent TLD server was tried at most a few times, the live one every time.
    assert!(
        s.net.count("198.18.1.2") <= 3,
        "{}",
        s.net.count("198.18.1.2")
    );
    assert!(s.net.count("198.18.1.1") >= 1);
}

#[tokio::test]
async fn redundant_queries_take_the_first_reply() {
    // fanout 2: the silent root server does not delay resolution.
    let s = setup(Config {
        fanout: 2,
        upstream_timeout: Duration::from_secs(2),
        ..cfg()
    });
    let t0 = std::time::Instant::now();
    s.res
        .resolve(key("www.example.test.", rtype::A))
        .await
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
    assert!(s.net.count("198.18.0.1") >= 1);
}

#[tokio::test]
async fn staggered_fanout_asks_the_next_server_only_when_needed() {
    // The root has one live and one silent server. With a delay, the silent one may be asked
    // first once, but then ranks last: later questions go to the live one alone.
    let s = setup(Config {
        fanout: 2,
        fanout_delay: Duration::from_millis(150),
        upstream_timeout: Duration::from_secs(2),
        ..cfg()
    });
    for i in 0..6 {
        s.res
            .resolve(key(&format!("n.nothing{i}."), rtype::A))
            .await
            .unwrap();
    }
    assert_eq!(s.net.count("198.18.0.1"), 6);
    assert!(
        s.net.count("198.18.0.2") <= 1,
        "{}",
        s.net.count("198.18.0.2")
    );
    // All at once: both are asked every time.
    let s = setup(Config {
        fanout: 2,
        fanout_delay: Duration::ZERO,
        ..cfg()
    });
    for i in 0..3 {
        s.res
            .resolve(key(&format!("n.nothing{i}."), rtype::A))
            .await
            .unwrap();
    }
    assert_eq!(s.net.count("198.18.0.2"), 3);
}

#[tokio::test]
async fn glue_expiring_before_its_ns_records_is_fetched_again() {
    let s = setup(cfg());
    s.res
        .resolve(key("www.shortglue.test.", rtype::A))
        .await
        .unwrap();
    // The NS records (3600 s) are still cached, their glue (60 s) is not.
    s.clock.fetch_add(120 * NS, Relaxed);
    let before = s.net.count("198.18.1.1");
    let a = s
        .res
        .resolve(key("other.shortglue.test.", rtype::A))
        .await
        .unwrap();
    assert_eq!(replay(&a, s.clock.load(Relaxed)).rcode(), 3);
    assert_eq!(
        s.net.count("198.18.1.1"),
        before + 1,
        "asked test. again for the glue"
    );
}

#[tokio::test]
async fn nxns_work_is_capped() {
    let s = setup(Config {
        max_queries: 20,
        max_glueless: 4,
        ..cfg()
    });
    let e = s
        .res
        .resolve(key("www.nxns.test.", rtype::A))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ResolveError::Budget | ResolveError::Failed),
        "{e}"
    );
    assert!(
        s.net.total.load(Relaxed) <= 20,
        "{}",
        s.net.total.load(Relaxed)
    );
}

#[tokio::test]
async fn concurrent_questions_share_one_resolution() {
    // Fan-out all at once, so the query count does not depend on which root is tried first.
    let s = setup(Config {
        fanout_delay: Duration::ZERO,
        ..cfg()
    });
    let k = key("www.glueless.test.", rtype::A);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let r = s.res.clone();
        let k = k.clone();
        set.spawn(async move { r.resolve(k).await });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap().unwrap();
    }
    // As many queries as one resolution alone.
    let one = setup(Config {
        fanout_delay: Duration::ZERO,
        ..cfg()
    });
    one.res.resolve(k).await.unwrap();
    assert!(s.net.total.load(Relaxed) <= one.net.total.load(Relaxed));
}

#[tokio::test]
async fn prefetch_refreshes_hot_entries() {
    let s = setup(cfg());
    s.res.spawn_prefetcher(None);
    let k = key("www.example.test.", rtype::A);
    s.res.resolve(k.clone()).await.unwrap();
    let inserted = s.kernel.0.lock().unwrap().len();
    // TTL 300, window 10 %: at 280 s a hit asks for a refresh.
    s.clock.fetch_add(280 * NS, Relaxed);
    assert!(s.res.cached(&k).is_some());
    for _ in 0..100 {
        if s.kernel.0.lock().unwrap().len() > inserted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(s.res.counters.prefetches.load(Relaxed), 1);
    let fresh = s.res.cached(&k).unwrap();
    assert_eq!(fresh.stored_at_ns, s.clock.load(Relaxed), "refreshed entry");
    // Kernel prefetch requests arrive through a channel too.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let s2 = setup(cfg());
    s2.res.spawn_prefetcher(Some(rx));
    tx.send(key("www.glueless.test.", rtype::A)).await.unwrap();
    for _ in 0..100 {
        if s2
            .res
            .cached(&key("www.glueless.test.", rtype::A))
            .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(s2.res.counters.prefetches.load(Relaxed), 1);
}

#[tokio::test]
async fn flush_empties_the_caches() {
    let s = setup(cfg());
    let k = key("www.glueless.test.", rtype::A);
    s.res.resolve(k.clone()).await.unwrap();
    let cold = s.net.total.load(Relaxed);
    assert_eq!(s.res.flush(), 1);
    assert!(s.res.cached(&k).is_none());
    s.res.resolve(k).await.unwrap();
    // A cold resolution again, from the root hints.
    assert!(
        s.net.total.load(Relaxed) >= 2 * cold - 2,
        "{} {}",
        cold,
        s.net.total.load(Relaxed)
    );
}

#[tokio::test]
async fn cache_is_bounded() {
    let s = setup(Config {
        cache_entries: 32,
        ..cfg()
    });
    for i in 0..100 {
        s.res
            .resolve(key(&format!("x{i}.example.test."), rtype::A))
            .await
            .unwrap();
    }
    assert!(s.res.cache_len() <= 32 + 16, "{}", s.res.cache_len());
    assert!(s.res.counters.evictions.load(Relaxed) > 0);
}

#[tokio::test]
async fn forwarders_are_asked_with_rd() {
    let s = setup(Config {
        forwarders: vec!["198.18.3.1:53".parse().unwrap()],
        ..cfg()
    });
    let a = s
        .res
        .resolve(key("www.example.test.", rtype::A))
        .await
        .unwrap();
    assert_eq!(a_records(&replay(&a, 0)).len(), 2);
    assert_eq!(s.net.total.load(Relaxed), 1);
}

/// The real network on loopback: one authority serving the whole tree below `.` on 127.0.0.1
/// and ::1 (same port), forging a reply from another port before each genuine one, and
/// answering TC=1 over UDP for `tc.` names (then honestly over TCP).
mod system_network {
    use super::*;
    use crate::fake::{authority, message, Behaviour, Server};
    use crate::SystemNetwork;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn server() -> Server {
        Server {
            zones: vec![zone(
                ".",
                ". 86400 SOA a.root. h.root. 1 1800 900 604800 60
                 www.example. 300 A 198.18.9.1
                 www.tc.example. 300 A 198.18.9.2",
            )],
            behaviour: Behaviour::Normal,
        }
    }

    fn reply(q: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let r = crate::msg::parse_reply(&{
            let mut m = q.to_vec();
            m[2] |= 0x80;
            m
        })?;
        let key = r.qname.to_ascii_lowercase();
        let id = u16::from_be_bytes([q[0], q[1]]);
        if !tcp && key.starts_with(b"\x03www\x02tc") {
            return Some(message(id, 0x0600, &r.qname, r.qtype, [&[], &[], &[]]));
        }
        let (flags, s) = authority(&server(), &key, r.qtype)?;
        Some(message(id, flags, &r.qname, r.qtype, [&s[0], &s[1], &s[2]]))
    }

    fn forged(q: &[u8]) -> Vec<u8> {
        let mut m = q.to_vec();
        m[2] |= 0x80;
        let r = crate::msg::parse_reply(&m).unwrap();
        let id = u16::from_be_bytes([q[0], q[1]]);
        let poison = vec![(
            r.qname.to_ascii_lowercase(),
            r.qtype,
            86400,
            vec![6, 6, 6, 6],
        )];
        message(id, 0x0400, &r.qname, r.qtype, [&poison, &[], &[]])
    }

    /// Starts the authority on `ip` (UDP and TCP, same port); returns the port.
    async fn start(ip: &str, port: u16) -> u16 {
        let udp = tokio::net::UdpSocket::bind((ip.parse::<IpAddr>().unwrap(), port))
            .await
            .unwrap();
        let port = udp.local_addr().unwrap().port();
        let forger = tokio::net::UdpSocket::bind((ip.parse::<IpAddr>().unwrap(), 0))
            .await
            .unwrap();
        let tcp = tokio::net::TcpListener::bind((ip.parse::<IpAddr>().unwrap(), port))
            .await
            .unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            loop {
                let Ok((n, from)) = udp.recv_from(&mut buf).await else {
                    return;
                };
                if let Some(r) = reply(&buf[..n], false) {
                    // Forged: a poisoned answer with the right ID and question, from
                    // another port.
                    let f = forged(&buf[..n]);
                    let _ = forger.send_to(&f, from).await;
                    let _ = udp.send_to(&r, from).await;
                }
            }
        });
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = tcp.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let Ok(len) = s.read_u16().await else { return };
                    let mut q = vec![0u8; len as usize];
                    if s.read_exact(&mut q).await.is_err() {
                        return;
                    }
                    if let Some(r) = reply(&q, true) {
                        let _ = s.write_all(&(r.len() as u16).to_be_bytes()).await;
                        let _ = s.write_all(&r).await;
                    }
                });
            }
        });
        port
    }

    async fn run(hints_text: &str, port: u16, ipv4: bool, ipv6: bool) {
        let hints = RootHints::parse(hints_text, Path::new("hints")).unwrap();
        let res = Resolver::new(
            Config {
                upstream_port: port,
                ipv4,
                ipv6,
                ..cfg()
            },
            &hints,
            Arc::new(SystemNetwork),
            Arc::new(xdns_wire::NoCache),
            Clock::Monotonic,
        );
        let a = res.resolve(key("WWW.example.", rtype::A)).await.unwrap();
        let r = replay(&a, a.stored_at_ns);
        assert_eq!(a_records(&r), vec!["198.18.9.1".parse::<IpAddr>().unwrap()]);
        // The reply from the other port was never even seen (connected socket) or was
        // rejected; the genuine one was taken.
        let a = res.resolve(key("www.tc.example.", rtype::A)).await.unwrap();
        assert_eq!(
            a_records(&replay(&a, a.stored_at_ns)),
            vec!["198.18.9.2".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(res.counters.tcp_fallbacks.load(Relaxed), 1);
        let a = res.resolve(key("nx.example.", rtype::A)).await.unwrap();
        assert_eq!(replay(&a, a.stored_at_ns).rcode(), 3);
    }

    #[tokio::test]
    async fn ipv4_udp_tcp_fallback_and_wrong_port_ignored() {
        let port = start("127.0.0.1", 0).await;
        run(". 1 NS a.root.\na.root. 1 A 127.0.0.1\n", port, true, true).await;
    }

    #[tokio::test]
    async fn ipv6_upstream() {
        if std::net::UdpSocket::bind("[::1]:0").is_err() {
            return; // no IPv6 loopback here
        }
        let port = start("::1", 0).await;
        run(
            ". 1 NS a.root.\na.root. 1 AAAA ::1\na.root. 1 A 127.0.0.1\n",
            port,
            false,
            true,
        )
        .await;
    }
}

/// Replies mutated at random never make the parser or the resolution panic.
#[test]
fn parse_reply_survives_mutations() {
    use rand::Rng;
    let base = crate::fake::message(
        7,
        0x0400,
        &n("www.example.test."),
        1,
        [
            &records("www.example.test. 300 CNAME a.example.test.\na.example.test. 300 A 1.2.3.4"),
            &records("example.test. 300 SOA a.example.test. h.example.test. 1 2 3 4 5"),
            &records("ns.example.test. 300 A 1.2.3.5"),
        ],
    );
    let mut rng = rand::rng();
    for _ in 0..20_000 {
        let mut m = base.clone();
        for _ in 0..rng.random_range(1..6) {
            let at = rng.random_range(0..m.len());
            m[at] = rng.random();
        }
        if rng.random_bool(0.2) {
            m.truncate(rng.random_range(0..m.len()));
        }
        if let Some(r) = parse_reply(&m) {
            let _ = r.rcode();
            for rr in r.answer.iter().chain(&r.authority) {
                let _ = rr.target();
                let _ = rr.soa_negative_ttl();
            }
        }
    }
}

/// The root zone as the root servers serve it for priming: `.` NS a and b.root-servers.test
/// (TTL `ttl`) with addresses: a at 198.18.0.1, b at `b`; the delegations of `tree`'s root.
fn primed_root(b: &str, ttl: u32) -> Zone {
    zone(
        ".",
        &format!(
            ". 86400 SOA a.root-servers.test. nstld.test. 1 1800 900 604800 86400
             . {ttl} NS a.root-servers.test.
             . {ttl} NS b.root-servers.test.
             a.root-servers.test. {ttl} A 198.18.0.1
             b.root-servers.test. {ttl} A {b}
             other.root-servers.test. {ttl} A 198.18.0.66
             test. 172800 NS ns1.nic.test.
             test. 172800 NS ns2.nic.test.
             ns1.nic.test. 172800 A 198.18.1.1
             ns2.nic.test. 172800 A 198.18.1.2
             net. 172800 NS ns.nic.net.
             ns.nic.net. 172800 A 198.18.2.1"
        ),
    )
}

/// `. NS` questions the fake network saw.
fn priming_queries(net: &FakeNet) -> usize {
    net.seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, name, t)| name == &[0] && *t == rtype::NS)
        .count()
}

fn root_addrs(res: &Resolver, name: &str) -> Vec<IpAddr> {
    res.root_servers()
        .into_iter()
        .find(|(n_, _)| *n_ == n(name))
        .map(|(_, a)| a)
        .unwrap_or_default()
}

/// RFC 8109: the first question waits for the priming, whose answer moves b.root-servers.test
/// from its hinted address (198.18.0.2, silent: stale) to 198.18.0.3; from then on the root is
/// asked there, never at the stale address. Addresses of names outside the NS set are not used.
#[tokio::test]
async fn priming_replaces_a_stale_hint_address() {
    let s = setup(Config {
        prime_root: true,
        ..cfg()
    });
    let root = primed_root("198.18.0.3", 518_400);
    s.net.add("198.18.0.1", Normal, vec![root.clone()]);
    s.net.add("198.18.0.3", Normal, vec![root]);
    assert_eq!(
        root_addrs(&s.res, "b.root-servers.test."),
        vec!["198.18.0.2".parse::<IpAddr>().unwrap()]
    );
    s.res
        .resolve(key("www.example.test.", rtype::A))
        .await
        .unwrap();
    let first = s.net.seen.lock().unwrap()[0].clone();
    assert_eq!(
        (first.1, first.2),
        (vec![0], rtype::NS),
        "priming came first"
    );
    assert!(s.res.root_primed());
    assert_eq!(s.res.counters.primings.load(Relaxed), 1);
    let asked = priming_queries(&s.net); // 2 when the silent address was asked first
    assert!((1..=2).contains(&asked), "{asked}");
    assert_eq!(
        root_addrs(&s.res, "b.root-servers.test."),
        vec!["198.18.0.3".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(
        root_addrs(&s.res, "a.root-servers.test."),
        vec!["198.18.0.1".parse::<IpAddr>().unwrap()]
    );
    assert!(s
        .res
        .root_servers()
        .iter()
        .all(|(n_, _)| *n_ != n("other.root-servers.test.")));
    // a falls silent: b answers at its primed address; the stale one is not asked again, also
    // after a flush (the primed root set stays, like the hints did).
    s.net.set_behaviour("198.18.0.1", Silent);
    let stale = s.net.count("198.18.0.2");
    assert_eq!(s.res.flush(), 1);
    s.res
        .resolve(key("www.glueless.test.", rtype::A))
        .await
        .unwrap();
    assert!(s.net.count("198.18.0.3") >= 1);
    assert_eq!(s.net.count("198.18.0.2"), stale);
    assert_eq!(s.net.count("198.18.0.66"), 0);
    assert_eq!(
        priming_queries(&s.net),
        asked,
        "no second priming before the TTL runs out"
    );
}

/// When priming fails (root servers silent, or an answer without addresses for the NS names),
/// the hints are used and the question is answered; priming is tried again 30 s later.
#[tokio::test]
async fn priming_failure_falls_back_to_hints() {
    // The tree's own root zone has no addresses for its NS names: not a usable priming answer.
    let s = setup(Config {
        prime_root: true,
        ..cfg()
    });
    assert!(!s.res.prime().await);
    assert!(!s.res.root_primed());
    assert_eq!(s.res.counters.priming_failures.load(Relaxed), 1);
    assert_eq!(s.res.root_servers(), hints().servers);
    let asked = priming_queries(&s.net);
    s.res
        .resolve(key("www.example.test.", rtype::A))
        .await
        .unwrap();
    assert_eq!(
        priming_queries(&s.net),
        asked,
        "the failure is not retried at once"
    );

    // Every root server silent at start: the first question waits for the failed priming,
    // then goes on with the hints (a answers again by then).
    let s = setup(Config {
        prime_root: true,
        ..cfg()
    });
    let root = primed_root("198.18.0.3", 518_400);
    s.net.add("198.18.0.1", Silent, vec![root.clone()]);
    s.net.add("198.18.0.3", Normal, vec![root]);
    assert!(!s.res.prime().await);
    assert_eq!(s.res.root_servers(), hints().servers);
    s.net.set_behaviour("198.18.0.1", Normal);
    s.res
        .resolve(key("www.example.test.", rtype::A))
        .await
        .unwrap();
    assert!(!s.res.root_primed());
    // 30 s later the next question primes again (in the background), and it works now.
    s.clock.fetch_add(31 * NS, Relaxed);
    s.res
        .resolve(key("x.example.test.", rtype::A))
        .await
        .unwrap();
    for _ in 0..200 {
        if s.res.root_primed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(s.res.root_primed());
    assert_eq!(
        root_addrs(&s.res, "b.root-servers.test."),
        vec!["198.18.0.3".parse::<IpAddr>().unwrap()]
    );
}

/// The primed set lives as long as its TTL (600 s here): questions before then do not prime;
/// the first question after primes again in the background (it is answered without waiting)
/// and the new answer's addresses replace the old ones.
#[tokio::test]
async fn priming_again_when_the_root_ns_ttl_runs_out() {
    let s = setup(Config {
        prime_root: true,
        ..cfg()
    });
    let v1 = primed_root("198.18.0.3", 600);
    for ip in ["198.18.0.1", "198.18.0.3"] {
        s.net.add(ip, Normal, vec![v1.clone()]);
    }
    s.res
        .resolve(key("www.example.test.", rtype::A))
        .await
        .unwrap();
    assert_eq!(s.res.counters.primings.load(Relaxed), 1);
    let asked = priming_queries(&s.net);
    s.clock.fetch_add(599 * NS, Relaxed);
    s.res
        .resolve(key("x1.example.test.", rtype::A))
        .await
        .unwrap();
    assert_eq!(priming_queries(&s.net), asked, "TTL not run out yet");
    // The root zone now puts b at 198.18.0.4.
    let v2 = primed_root("198.18.0.4", 600);
    for ip in ["198.18.0.1", "198.18.0.3", "198.18.0.4"] {
        s.net.add(ip, Normal, vec![v2.clone()]);
    }
    s.clock.fetch_add(2 * NS, Relaxed);
    s.res
        .resolve(key("x2.example.test.", rtype::A))
        .await
        .unwrap();
    for _ in 0..200 {
        if s.res.counters.primings.load(Relaxed) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(s.res.counters.primings.load(Relaxed), 2);
    let asked = priming_queries(&s.net);
    assert_eq!(
        root_addrs(&s.res, "b.root-servers.test."),
        vec!["198.18.0.4".parse::<IpAddr>().unwrap()]
    );
    // And the new set lives another 600 s.
    s.clock.fetch_add(300 * NS, Relaxed);
    s.res
        .resolve(key("x3.example.test.", rtype::A))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(priming_queries(&s.net), asked);
    assert_eq!(s.res.counters.primings.load(Relaxed), 2);
}

/// Issue 29: a flood of random names under a zone whose only server stopped answering. The
/// first wave may have at most the server's ceiling of queries outstanding (the rest fail at
/// once with `Quota`); its timeouts lower the server's bound to the floor, so the next wave
/// costs at most that many queries; a healthy zone resolves meanwhile; when the server
/// answers again, its bound grows back.
#[tokio::test]
async fn flood_of_a_dead_zone_is_bounded_and_fails_at_once() {
    let s = setup(Config {
        fanout: 1,
        fetches_per_server: 40,
        fetches_per_zone: 1000,
        fetches_floor: 2,
        failure_ttl: 0,
        ..cfg()
    });
    s.res.resolve(key("www.example.test.", rtype::A)).await.unwrap();
    s.net.set_behaviour("198.18.3.1", Silent);
    let dead: IpAddr = "198.18.3.1".parse().unwrap();
    let wave = |from: usize, count: usize| {
        let mut set = tokio::task::JoinSet::new();
        for i in from..from + count {
            let r = s.res.clone();
            set.spawn(async move {
                let t = std::time::Instant::now();
                (r.resolve(key(&format!("r{i}.example.test."), rtype::A)).await, t.elapsed())
            });
        }
        set
    };
    let mut first = wave(0, 300);
    // the healthy zone resolves while the flood waits on the dead server
    s.res.resolve(key("www.example.net.", rtype::A)).await.unwrap();
    let (mut quota, mut failed) = (0, 0);
    // "At once": no refused query waited as long as the quickest one that went to the dead
    // server (at least the 100 ms upstream timeout). Compared with each other rather than
    // with a fixed bound: on a loaded machine the runtime's turns stretch both alike.
    let (mut slowest_refused, mut quickest_failed) = (Duration::ZERO, Duration::MAX);
    while let Some(r) = first.join_next().await {
        match r.unwrap() {
            (Err(ResolveError::Quota), took) => {
                quota += 1;
                slowest_refused = slowest_refused.max(took);
            }
            (Err(_), took) => {
                failed += 1;
                quickest_failed = quickest_failed.min(took);
            }
            (Ok(_), _) => panic!("the dead zone answered"),
        }
    }
    assert_eq!((quota, failed), (260, 40));
    assert!(quickest_failed >= Duration::from_millis(100), "{quickest_failed:?}");
    assert!(slowest_refused < quickest_failed, "refused after {slowest_refused:?}, a timeout took {quickest_failed:?}");
    assert_eq!(s.net.count("198.18.3.1"), 1 + 40);
    assert_eq!(s.res.server_quota(dead).unwrap().limit, 2);
    let c = s.res.counters.snapshot();
    let get = |k: &str| c.iter().find(|(n, _)| *n == k).unwrap().1;
    assert_eq!(get("quota_failures"), 260);
    assert_eq!(get("quota_server_refusals"), 260);
    // the second wave: two queries, the rest fail at once
    let mut second = wave(1000, 100);
    while second.join_next().await.is_some() {}
    assert_eq!(s.net.count("198.18.3.1"), 1 + 40 + 2);
    // the server is back: each reply lets one more query out
    s.net.set_behaviour("198.18.3.1", Normal);
    for i in 0..5 {
        let r = s.res.resolve(key(&format!("back{i}.example.test."), rtype::A)).await;
        assert!(r.is_ok() || r == Err(ResolveError::Quota), "{r:?}");
    }
    let q = s.res.server_quota(dead).map_or(40, |q| q.limit);
    assert!(q >= 5, "{q}");
}

/// The same question asked many times at once while its zone is dead: one resolution, one
/// upstream query, every asker gets its result (coalescing holds under a flood).
#[tokio::test]
async fn identical_questions_in_a_flood_share_one_resolution() {
    let s = setup(Config { fanout: 1, failure_ttl: 0, ..cfg() });
    s.res.resolve(key("www.example.test.", rtype::A)).await.unwrap();
    s.net.set_behaviour("198.18.3.1", Silent);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let r = s.res.clone();
        set.spawn(async move { r.resolve(key("same.example.test.", rtype::A)).await });
    }
    let mut n = 0;
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap(), Err(ResolveError::Failed));
        n += 1;
    }
    assert_eq!(n, 200);
    assert_eq!(s.net.count("198.18.3.1"), 2);
    let c = s.res.counters.snapshot();
    assert_eq!(c.iter().find(|(k, _)| *k == "coalesced").unwrap().1, 199);
}

/// What kernel iteration would get: the reply of `server` to `name`/`qtype` (full name, RD=0),
/// asked outside the resolver.
async fn asked_directly(net: &FakeNet, server: &str, name: &str, qtype: u16) -> Vec<u8> {
    use crate::net::Network;
    let server: std::net::SocketAddr = format!("{server}:53").parse().unwrap();
    let q = crate::msg::build_query(0x4242, &n(name), qtype, false, 1232);
    let expect = crate::msg::Expect {
        server,
        id: 0x4242,
        qname: n(name),
        qtype,
        rejected: Default::default(),
    };
    net.udp(&q, &expect, Duration::from_millis(100)).await.unwrap()
}

fn handed(zone: &str, server: &str, reply: Vec<u8>) -> crate::Handed {
    crate::Handed {
        zone: n(zone),
        server: format!("{server}:53").parse().unwrap(),
        reply,
        rtt: Some(Duration::from_millis(3)),
    }
}

/// The delegations kernel iteration copies: every cut learnt below the root with its known
/// addresses (glue, or resolved NS names), expiring with the earlier of its NS set and
/// those addresses; the generation moves when they change.
#[tokio::test]
async fn delegations_are_the_cuts_learnt_with_their_addresses() {
    let s = setup(cfg());
    assert!(s.res.delegations(4).is_empty(), "the root is not one of them");
    let g0 = s.res.infra_generation();
    for q in ["www.example.test.", "www.glueless.test.", "www.shortglue.test."] {
        s.res.resolve(key(q, rtype::A)).await.unwrap();
    }
    assert!(s.res.infra_generation() > g0);
    let now = s.clock.load(Relaxed);
    let mut d = s.res.delegations(4);
    d.sort_by(|a, b| a.zone.cmp(&b.zone));
    let got: Vec<(String, Vec<String>, u64)> = d
        .iter()
        .map(|d| {
            (
                xdns_wire::name::to_presentation(&d.zone),
                d.addrs.iter().map(|a| a.to_string()).collect(),
                (d.expires_ns - now) / NS,
            )
        })
        .collect();
    let want = |z: &str, a: &[&str], ttl: u64| (z.to_string(), a.iter().map(|s| s.to_string()).collect::<Vec<_>>(), ttl);
    assert!(got.contains(&want("example.test.", &["198.18.3.1"], 3600)), "{got:?}");
    assert!(got.contains(&want("glueless.test.", &["198.18.4.1"], 3600)), "{got:?}");
    assert!(got.contains(&want("shortglue.test.", &["198.18.6.3"], 60)), "glue TTL 60: {got:?}");
    let test = got.iter().find(|g| g.0 == "test.").unwrap();
    assert_eq!(test.2, 86400, "NS TTL 172800 capped by max_ttl");
    assert_eq!(test.1.len(), 2, "{test:?}");
    // one per family at most when asked so; the first is the best known (a silent server has
    // no RTT yet here, so by address)
    assert!(s.res.delegations(1).iter().all(|d| d.addrs.len() == 1));
    // expired cuts are left out
    s.clock.fetch_add(61 * NS, Relaxed);
    assert!(!s.res.delegations(4).iter().any(|d| d.zone == n("shortglue.test.")));
    let g1 = s.res.infra_generation();
    s.res.flush_name(&n("example.test."), false);
    assert!(s.res.infra_generation() > g1);
    assert!(!s.res.delegations(4).iter().any(|d| d.zone == n("example.test.")));
}

/// A referral the kernel got from the root is followed as the resolver's own: no root query
/// of the resolver's, the cut cached, the answer as a cold resolution gives it.
#[tokio::test]
async fn handed_referral_continues_from_the_child() {
    let s = setup(cfg());
    let reply = asked_directly(&s.net, "198.18.0.1", "www.example.test.", rtype::A).await;
    let (r, used) = s.res.resolve_handed(key("www.example.test.", rtype::A), handed(".", "198.18.0.1", reply)).await;
    assert_eq!(used, crate::HandedUse::Referral);
    let a = r.unwrap();
    let now = s.clock.load(Relaxed);
    assert_eq!(a_records(&replay(&a, now)), vec!["198.18.3.80".parse::<IpAddr>().unwrap(), "198.18.3.81".parse().unwrap()]);
    assert_eq!(s.net.count("198.18.0.1"), 1, "the root asked once, by the 'kernel'");
    assert_eq!(s.net.count("198.18.1.1"), 1);
    assert_eq!(s.net.count("198.18.3.1"), 1);
    assert!(s.res.delegations(4).iter().any(|d| d.zone == n("test.")));
    assert_eq!(s.kernel.0.lock().unwrap().len(), 1, "pushed to the kernel cache");
}

/// A final answer the kernel got is cached exactly as the resolver caches its own (the same
/// body, TTLs, negative caching with the SOA), with no upstream query of the resolver's.
#[tokio::test]
async fn handed_final_answers_are_cached_as_the_resolvers_own() {
    for (name, qtype, rcode) in [
        ("www.example.test.", rtype::A, 0u16),
        ("local.example.test.", rtype::A, 0),
        ("nothere.example.test.", rtype::A, 3),
        ("www.example.test.", rtype::AAAA, 0),
    ] {
        let own = setup(cfg());
        let want = own.res.resolve(key(name, qtype)).await.unwrap();
        let s = setup(cfg());
        s.res.resolve(key("ns1.example.test.", rtype::A)).await.unwrap();
        let before = s.net.total.load(Relaxed);
        let reply = asked_directly(&s.net, "198.18.3.1", name, qtype).await;
        let (r, used) = s.res.resolve_handed(key(name, qtype), handed("example.test.", "198.18.3.1", reply)).await;
        assert_eq!(used, crate::HandedUse::Answer, "{name}");
        let got = r.unwrap();
        assert_eq!(s.net.total.load(Relaxed), before + 1, "{name}: only the 'kernel' query");
        assert_eq!(got.body, want.body, "{name}: the resolver's own body");
        assert_eq!(got.expires_at_ns - got.stored_at_ns, want.expires_at_ns - want.stored_at_ns, "{name}");
        assert_eq!(replay(&got, got.stored_at_ns).rcode(), rcode, "{name}");
        // cached: the next question is a hit
        assert!(s.res.cached(&key(name, qtype)).is_some(), "{name}");
        assert_eq!(s.kernel.0.lock().unwrap().last().unwrap().body, want.body, "{name}");
    }
}

/// The inline variant (the daemon's ring reader): a final answer in hand is done at the
/// first poll (nothing awaited: the reply goes out with its batch), cached exactly as
/// `resolve_handed` caches it; a referral driven on gives the same answer, and a resolution
/// of the same question asked meanwhile shares it (one resolution).
#[tokio::test]
async fn handed_inline_final_answers_are_ready_at_the_first_poll() {
    use std::future::Future;
    let name = "www.example.test.";
    let own = setup(cfg());
    let want = own.res.resolve(key(name, rtype::A)).await.unwrap();
    let s = setup(cfg());
    s.res.resolve(key("ns1.example.test.", rtype::A)).await.unwrap();
    let reply = asked_directly(&s.net, "198.18.3.1", name, rtype::A).await;
    let mut fut = Box::pin(s.res.resolve_handed_inline(key(name, rtype::A), handed("example.test.", "198.18.3.1", reply)));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let std::task::Poll::Ready((r, used)) = fut.as_mut().poll(&mut cx) else { panic!("a final answer in hand must not wait") };
    assert_eq!(used, crate::HandedUse::Answer);
    assert_eq!(r.unwrap().body, want.body);
    assert!(s.res.cached(&key(name, rtype::A)).is_some());
    assert!(s.res.inflight_len() == 0, "the leader's place is given back");
    // a referral from the root, driven to its end, and the same question asked meanwhile:
    // one resolution, the same answer for both
    let s = setup(cfg());
    let reply = asked_directly(&s.net, "198.18.0.1", name, rtype::A).await;
    let (inline, joiner) = tokio::join!(
        s.res.resolve_handed_inline(key(name, rtype::A), handed(".", "198.18.0.1", reply)),
        s.res.resolve(key(name, rtype::A))
    );
    let (r, used) = inline;
    assert_eq!(used, crate::HandedUse::Referral);
    let a = r.unwrap();
    assert_eq!(joiner.unwrap().body, a.body, "the joiner gets the leader's answer");
    assert_eq!(a.body, want.body);
    assert_eq!(s.net.count("198.18.3.1"), 1, "one resolution, not two");
}

/// Redundant queries (kernel iteration's failure prevention, sent by the daemon): asked as
/// the resolver asks its own (the spoofer's forged ID, case, question and source are not
/// taken: the genuine answer, or nothing from a server that only forges), the reply used
/// as a handed one; the wait before one is `fanout_delay` for a server with no answer yet
/// (or only timeouts), twice its SRTT when longer; three kernel queries lost to a redundant
/// answer hold the silent server down, and a held server is never the redundant choice.
#[tokio::test]
async fn redundant_queries_follow_the_resolvers_rules() {
    let ip = |a: &str| a.parse::<IpAddr>().unwrap();
    // a timeout long enough for a wait of twice a first SRTT (still mostly the initial 200 ms)
    let s = setup(Config { upstream_timeout: Duration::from_millis(1000), ..cfg() });
    let delay = s.res.config().fanout_delay;
    assert_eq!(s.res.redundant_after(ip("198.18.9.9")), Some(delay), "no sample yet");
    // forgeries first, then the real reply: only the real one is taken
    let rejected = s.res.counters.rejected_replies.load(Relaxed);
    let h = s.res.ask_redundant(&n("spoofed.test."), ip("198.18.5.1"), &n("www.spoofed.test."), rtype::A).await.unwrap();
    assert!(s.res.counters.rejected_replies.load(Relaxed) > rejected, "the forgeries were seen and rejected");
    assert_eq!(h.server, "198.18.5.1:53".parse().unwrap());
    let (r, used) = s.res.resolve_handed(key("www.spoofed.test.", rtype::A), h).await;
    assert_eq!(used, crate::HandedUse::Answer);
    assert_eq!(a_records(&replay(&r.unwrap(), s.clock.load(Relaxed))), vec![ip("198.18.5.80")]);
    // a server that only forges: nothing
    assert!(s.res.ask_redundant(&n("poisoned.test."), ip("198.18.5.2"), &n("www.poisoned.test."), rtype::A).await.is_none());
    // bailiwick: test.'s referral to evil.test. carries out-of-bailiwick glue (ns.example.net.
    // 6.6.6.6); asked redundantly, it is classified as the kernel's would be: never used
    let h = s.res.ask_redundant(&n("test."), ip("198.18.1.1"), &n("www.evil.test."), rtype::A).await.unwrap();
    let (r, used) = s.res.resolve_handed(key("www.evil.test.", rtype::A), h).await;
    // the glue out of the zone asked is no glue: a glueless referral, its NS name resolved
    assert_eq!(used, crate::HandedUse::Glueless);
    assert_eq!(a_records(&replay(&r.unwrap(), 0)), vec![ip("198.18.2.81")]);
    assert_eq!(s.net.count("6.6.6.6"), 0, "the out-of-bailiwick glue was not used");
    // the zone said asked must hold the name: a reply for a name outside it is lame
    let h = s.res.ask_redundant(&n("test."), ip("198.18.2.1"), &n("www.example.net."), rtype::A).await.unwrap();
    let (_, used) = s.res.resolve_handed(key("www.example.net.", rtype::A), h).await;
    assert_eq!(used, crate::HandedUse::Lame);
    // a fast server's wait follows its RTT, not below fanout_delay
    let w = s.res.redundant_after(ip("198.18.5.1")).unwrap();
    assert!(w >= delay && w < s.res.handed_wait(ip("198.18.5.1")), "{w:?}");
    // a silent server: lost three times, held down, never chosen while held
    let dead = ip("198.18.9.9");
    assert!(!s.res.note_handed_lost(dead));
    assert_eq!(s.res.redundant_after(dead), Some(delay), "timeouts are no sample: fanout_delay again");
    assert!(!s.res.note_handed_lost(dead));
    assert!(s.res.note_handed_lost(dead), "held down at the third");
    assert!(s.res.held_down(dead));
    assert_eq!(s.res.redundant_server(&[dead, ip("198.18.5.1")], &[ip("198.18.5.1")]), None);
    assert_eq!(s.res.redundant_server(&[dead, ip("198.18.5.1")], &[dead]), Some(ip("198.18.5.1")));
    assert_eq!(s.res.redundant_server(&[ip("198.18.5.1")], &[ip("198.18.5.1")]), None, "no other server");
    // one server at a time: no redundant queries
    let one = setup(Config { fanout: 1, ..cfg() });
    assert_eq!(one.res.redundant_after(ip("198.18.9.9")), None);
}

/// Replies the iteration cannot take leave the question to an ordinary resolution (which
/// still gets the right answer), and say why; out-of-bailiwick glue in a handed referral is
/// never used.
#[tokio::test]
async fn unusable_handed_replies_fall_back_to_a_resolution() {
    use crate::HandedUse::*;
    let s = setup(cfg());
    // TC=1
    s.res.resolve(key("ns1.example.test.", rtype::A)).await.unwrap();
    let reply = asked_directly(&s.net, "198.18.1.1", "www.tc.test.", rtype::A).await;
    let (_, used) = s.res.resolve_handed(key("www.tc.test.", rtype::A), handed("test.", "198.18.1.1", reply)).await;
    assert_eq!(used, Referral);
    let reply = asked_directly(&s.net, "198.18.6.1", "x.tc.test.", rtype::A).await;
    let (r, used) = s.res.resolve_handed(key("x.tc.test.", rtype::A), handed("tc.test.", "198.18.6.1", reply)).await;
    assert_eq!((used, r.map(|a| replay(&a, 0).rcode()).ok()), (Truncated, Some(3)));
    // SERVFAIL, REFUSED, FORMERR to the kernel's EDNS query, another RCODE (NOTIMP): each
    // counted apart, each resolved afresh
    for (i, (rcode, why)) in [(2u8, Servfail), (5, Refused), (1, EdnsFallback), (4, Rcode)].into_iter().enumerate() {
        let name = format!("a{i}.example.test.");
        let mut reply = asked_directly(&s.net, "198.18.3.1", &name, rtype::A).await;
        reply[3] = (reply[3] & 0xf0) | rcode;
        let (r, used) = s.res.resolve_handed(key(&name, rtype::A), handed("example.test.", "198.18.3.1", reply)).await;
        assert_eq!((used, r.map(|a| replay(&a, 0).rcode()).ok()), (why, Some(3)), "{name}");
        assert!(!used.used());
    }
    // malformed
    let (r, used) = s.res.resolve_handed(key("www.example.test.", rtype::A), handed("example.test.", "198.18.3.1", vec![1, 2, 3])).await;
    assert_eq!(used, Malformed);
    assert!(r.is_ok());
    // lame: the root's referral to test. said to come from example.test.'s server
    let reply = asked_directly(&s.net, "198.18.0.1", "b.example.test.", rtype::A).await;
    let (r, used) = s.res.resolve_handed(key("b.example.test.", rtype::A), handed("example.test.", "198.18.0.1", reply)).await;
    assert_eq!(used, Lame);
    assert_eq!(r.map(|a| replay(&a, 0).rcode()).ok(), Some(3));
    // a name outside the zone said asked
    let reply = asked_directly(&s.net, "198.18.2.1", "www.example.net.", rtype::A).await;
    let (_, used) = s.res.resolve_handed(key("www.example.net.", rtype::A), handed("test.", "198.18.2.1", reply)).await;
    assert_eq!(used, Lame);
    // out-of-bailiwick glue (ns.example.net. 6.6.6.6 in test.'s referral to evil.test.)
    let reply = asked_directly(&s.net, "198.18.1.1", "www.evil.test.", rtype::A).await;
    let (r, used) = s.res.resolve_handed(key("www.evil.test.", rtype::A), handed("test.", "198.18.1.1", reply)).await;
    assert_eq!(used, Glueless, "the glue out of the zone asked is no glue");
    let a = r.unwrap();
    assert_eq!(a_records(&replay(&a, 0)), vec!["198.18.2.81".parse::<IpAddr>().unwrap()]);
    assert_eq!(s.net.count("6.6.6.6"), 0, "the out-of-bailiwick glue was not used");
    // cached already: the reply is not needed
    let reply = asked_directly(&s.net, "198.18.3.1", "www.example.test.", rtype::A).await;
    let (_, used) = s.res.resolve_handed(key("www.example.test.", rtype::A), handed("example.test.", "198.18.3.1", reply)).await;
    assert_eq!(used, Joined);
}

/// Replies the iteration takes but finishes with more work of its own say which: a referral
/// without glue (the NS names resolved), a CNAME leaving the zone asked (the chain followed
/// from its end), a DNAME (RFC 6672: the DNAME kept in the answer, the synthesised CNAME's
/// target resolved); each gives the answer a cold resolution gives.
#[tokio::test]
async fn handed_replies_that_leave_the_zone_say_how() {
    use crate::HandedUse::*;
    let s = setup(cfg());
    // test.'s referral to glueless.test.: NS ns.dns-host.net., no glue
    let reply = asked_directly(&s.net, "198.18.1.1", "www.glueless.test.", rtype::A).await;
    let (r, used) = s.res.resolve_handed(key("www.glueless.test.", rtype::A), handed("test.", "198.18.1.1", reply)).await;
    assert_eq!(used, Glueless);
    assert!(used.used());
    assert_eq!(a_records(&replay(&r.unwrap(), 0)), vec!["198.18.4.80".parse::<IpAddr>().unwrap()]);
    // a referral with glue is a plain referral
    let reply = asked_directly(&s.net, "198.18.1.1", "www.example.test.", rtype::A).await;
    let (_, used) = s.res.resolve_handed(key("www.example.test.", rtype::A), handed("test.", "198.18.1.1", reply)).await;
    assert_eq!(used, Referral);
    // example.test.'s CNAME to www.glueless.test.
    s.res.resolve(key("ns1.example.test.", rtype::A)).await.unwrap();
    let reply = asked_directly(&s.net, "198.18.3.1", "alias.example.test.", rtype::A).await;
    let (r, used) = s.res.resolve_handed(key("alias.example.test.", rtype::A), handed("example.test.", "198.18.3.1", reply)).await;
    assert_eq!(used, CnameOut);
    assert_eq!(a_records(&replay(&r.unwrap(), 0)), vec!["198.18.4.80".parse::<IpAddr>().unwrap()]);
    // a CNAME within the zone, answered there, is a plain answer
    let reply = asked_directly(&s.net, "198.18.3.1", "local.example.test.", rtype::A).await;
    let (_, used) = s.res.resolve_handed(key("local.example.test.", rtype::A), handed("example.test.", "198.18.3.1", reply)).await;
    assert_eq!(used, Answer);
    // a DNAME (dn.example.test. DNAME example.net.) and the CNAME synthesised from it
    let qname = n("www.dn.example.test.");
    let reply = crate::fake::message(
        0x4242,
        0x0400,
        &qname,
        rtype::A,
        [
            &records("dn.example.test. 300 DNAME example.net.\nwww.dn.example.test. 300 CNAME www.example.net."),
            &[],
            &[],
        ],
    );
    let (r, used) = s.res.resolve_handed(key("www.dn.example.test.", rtype::A), handed("example.test.", "198.18.3.1", reply)).await;
    assert_eq!(used, Dname);
    assert!(used.used());
    let m = replay(&r.unwrap(), 0);
    assert_eq!(m.rcode(), 0);
    let types: Vec<u16> = m.answer.iter().map(|rr| rr.rtype).collect();
    assert!(types.contains(&rtype::DNAME) && types.contains(&rtype::CNAME), "{types:?}");
    assert_eq!(a_records(&m), vec!["198.18.2.80".parse::<IpAddr>().unwrap()]);
}

/// How long a kernel query is waited for: four times the server's SRTT plus fanout_delay,
/// 150 ms at least, upstream_timeout for a server with no sample; a kernel query taken back
/// raises the server's SRTT (a lower bound), so the next wait is longer.
#[tokio::test]
async fn handed_wait_follows_the_servers_rtt() {
    let mut c = cfg();
    c.upstream_timeout = Duration::from_secs(5);
    let (most, fan) = (c.upstream_timeout, c.fanout_delay);
    let s = setup(c);
    let a: IpAddr = "198.18.3.1".parse().unwrap();
    assert_eq!(s.res.handed_wait(a), most, "no sample: upstream_timeout");
    s.res.resolve(key("www.example.test.", rtype::A)).await.unwrap();
    let w = s.res.handed_wait(a);
    assert!(w >= Duration::from_millis(150).max(fan) && w < most, "a sample (SRTT blended from 200 ms): {w:?} < {most:?}");
    s.res.note_handed_timeout(a, Duration::from_secs(3));
    let w2 = s.res.handed_wait(a);
    assert!(w2 > w, "taken back after 3 s: a longer wait ({w:?} -> {w2:?})");
    assert_eq!(s.res.handed_wait("198.18.9.9".parse().unwrap()), most);
}
