//! End to end (needs root): a veth pair between two network namespaces created for the test,
//! the program attached natively on the server side, and `kdig` in the client namespace
//! getting its answers from the kernel while nothing listens on port 53. The namespaces are
//! deleted at the end, also when the test fails.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use common::*;
use xdns_bpf::data::compile_kernel_data;
use xdns_bpf::runtime::AttachMode;
use xdns_zone::{load_zone, ZoneSet, ZoneSource};

fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0]).args(&args[1..]).output().expect(args[0])
}

fn ok(args: &[&str]) {
    let o = sh(args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Two namespaces and a veth pair (`xd<tag>0` server side, `xd<tag>1` client side); removed on
/// drop. `tag` keeps tests of one process apart.
struct Lab {
    srv: String,
    cli: String,
}

impl Lab {
    fn new(tag: char) -> Self {
        let id = std::process::id();
        sweep_stale_netns(&format!("xdns{tag}"));
        let lab = Lab { srv: format!("xdns{tag}{id}s"), cli: format!("xdns{tag}{id}c") };
        let (d0, d1) = (format!("xd{tag}0"), format!("xd{tag}1"));
        ok(&["ip", "netns", "add", &lab.srv]);
        ok(&["ip", "netns", "add", &lab.cli]);
        ok(&["ip", "link", "add", &d0, "netns", &lab.srv, "type", "veth", "peer", "name", &d1, "netns", &lab.cli]);
        for (ns, dev, v4, v6) in [(&lab.srv, &d0, "198.18.0.1/24", "2001:db8::1/64"), (&lab.cli, &d1, "198.18.0.2/24", "2001:db8::2/64")] {
            ok(&["ip", "-n", ns, "addr", "add", v4, "dev", dev]);
            ok(&["ip", "-n", ns, "addr", "add", v6, "dev", dev, "nodad"]);
            ok(&["ip", "-n", ns, "link", "set", dev, "up"]);
            ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        lab
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.srv]);
        let _ = sh(&["ip", "netns", "del", &self.cli]);
    }
}

/// The kernel data of tests/zones/example.com.zone.
fn example_com_kernel_data() -> xdns_bpf::data::KernelData {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zones");
    let z = load_zone(&ZoneSource { name: "example.com.".into(), file: dir.join("example.com.zone") }, None).unwrap();
    let mut zones = ZoneSet::default();
    zones.zones.insert(z.apex.clone(), Arc::new(z));
    compile_kernel_data(&zones)
}


/// Give the veth `dev` in namespace `ns` an XDP receive ring, as a real peer must for native
/// `XDP_TX` to reach it: the same program with an empty listen set (it passes everything).
/// GRO on the peer did not enable that ring on this kernel (6.18). Detached on drop.
fn peer_program(ns: &str, dev: &str) -> xdns_bpf::runtime::XdpProgram {
    let cfg = xdns_bpf::runtime::LoadConfig {
        listen: vec![],
        edns_payload: OUR_PAYLOAD,
        seed: Some(1),
        capacity: xdns_bpf::runtime::Capacity { nodes: 16, answers: 16, bodies_m: 16, bodies_l: 16, table_vals: 0, table_bytes: 0 },
        resolver: None,
        guard: None,
        kit: None,
    };
    in_netns(ns, || {
        let mut p = xdns_bpf::runtime::XdpProgram::load(&cfg).unwrap();
        p.attach(dev, AttachMode::Native).unwrap();
        p
    })
}

#[test]
fn kdig_answered_by_the_kernel() {
    require_root("kdig_answered_by_the_kernel");
    let data = example_com_kernel_data();

    let lab = Lab::new('T');
    let srv = lab.srv.clone();
    let cli = lab.cli.clone();
    let peer = peer_program(&cli, "xdT1");
    in_netns(&srv, move || {
        let mut prog = load();
        prog.install(&data).unwrap();
        prog.attach("xdT0", AttachMode::Native).expect("native XDP on veth");
        // Nothing listens on port 53 in the server namespace: only XDP can answer.
        let mut outputs = Vec::new();
        for (server, q) in [
            ("198.18.0.1", vec!["www.example.com", "A"]),
            ("2001:db8::1", vec!["WwW.ExAmple.com", "AAAA"]),
            ("198.18.0.1", vec!["+dnssec", "nope.example.com", "A"]),
            ("198.18.0.1", vec!["+noedns", "big.example.com", "TXT"]),
        ] {
            let at = format!("@{server}");
            let mut args = vec!["ip", "netns", "exec", cli.as_str(), "kdig", at.as_str(), "+timeout=2", "+retry=0"];
            args.extend(q.iter().copied());
            let o = sh(&args);
            outputs.push(format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
        }
        let c = prog.counters().unwrap();
        let answered = c.iter().find(|x| x.0 == "answered").unwrap().1;
        println!("{}", outputs.join("\n----\n"));
        println!("counters: {:?}", c.into_iter().filter(|x| x.1 > 0).collect::<Vec<_>>());
        assert!(outputs[0].contains("198.18.0.10"), "A answer: {}", outputs[0]);
        assert!(outputs[1].contains("2001:db8::10"), "AAAA over IPv6: {}", outputs[1]);
        assert!(outputs[2].contains("NXDOMAIN"), "NXDOMAIN: {}", outputs[2]);
        assert!(outputs[3].contains("TC"), "truncated without EDNS: {}", outputs[3]);
        assert!(answered >= 4, "answered {answered}");
        prog.detach_all();
    });
    drop(peer);
    drop(lab);
}

/// The resolver cache over a real veth (root): entries inserted through `KernelCache` are
/// answered by XDP to `kdig` (nothing listens on port 53) with RA set and TTLs aged; a hit in
/// the prefetch window reaches the `PrefetchEvents` reader; RD=0 gets no answer from XDP.
/// (Over veth, a frame's tailroom depends on how the sender's skb was allocated; the program
/// grows the head instead, up to XDNS_HEAD_GROW bytes, so a reply much longer than that can
/// still fall to userspace (`pass_tail`); the IPv6 row asks for a short answer.)
#[test]
fn kdig_answered_from_the_cache() {
    use std::time::Duration;
    use xdns_wire::body::{BodyWriter, Section};
    use xdns_wire::{AnswerCache, CacheKey, CachedAnswer};
    require_root("kdig_answered_from_the_cache");
    let data = example_com_kernel_data();
    let now = {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let s = 1_000_000_000u64;
    // The entries are aged from `now`; loading the programs (the verifier) takes seconds on a
    // loaded machine, so the TTL check allows for the time that really passed.
    let t0 = std::time::Instant::now();
    let cached = |name: &str, qtype: u16, body: xdns_wire::Body, age: u64, ttl: u64| CachedAnswer {
        qname: wire(name),
        qtype,
        dnssec_ok: false,
        body,
        stored_at_ns: now - age * s - s / 4,
        expires_at_ns: now - age * s - s / 4 + ttl * s,
        prefetch_at_ns: u64::MAX,
    };
    let a_body = |name: &str, ttl: u32, addr: [u8; 4]| {
        let mut w = BodyWriter::new(&wire(name)).unwrap();
        w.write_rr(&wire(name), true, 1, ttl, &addr).unwrap();
        w.finish()
    };
    let mut nx = BodyWriter::new(&wire("nx.example.org")).unwrap();
    nx.set_rcode(3);
    nx.set_section(Section::Authority).unwrap();
    let mut soa = wire("ns1.example.org");
    soa.extend(wire("hostmaster.example.org"));
    soa.extend([0u8; 20]);
    nx.write_rr(&wire("example.org"), false, 6, 900, &soa).unwrap();
    // In its prefetch window already, and far from expiry: loading the programs on a loaded
    // machine took over 10 s once, and an entry 50 s into a 60 s TTL had expired by then.
    let mut hot = cached("hot.example.org", 1, a_body("hot.example.org", 60, [198, 18, 7, 7]), 5, 60);
    hot.prefetch_at_ns = hot.stored_at_ns + s;
    let entries = vec![
        cached("cached.example.org", 1, a_body("cached.example.org", 300, [198, 18, 1, 1]), 10, 300),
        cached("nx.example.org", 28, nx.finish(), 100, 900),
        hot,
    ];

    let lab = Lab::new('C');
    let srv = lab.srv.clone();
    let cli = lab.cli.clone();
    let peer = peer_program(&cli, "xdC1");
    in_netns(&srv, move || {
        let cfg = xdns_bpf::runtime::LoadConfig {
            listen: vec!["198.18.0.1:53".parse().unwrap(), "[2001:db8::1]:53".parse().unwrap()],
            edns_payload: OUR_PAYLOAD,
            seed: None,
            capacity: xdns_bpf::runtime::Capacity { nodes: 4096, answers: 4096, bodies_m: 4096, bodies_l: 1024, table_vals: 0, table_bytes: 0 },
            resolver: Some(xdns_bpf::runtime::ResolverStage {
                allow: vec![xdns_bpf::cache::parse_prefix("198.18.0.0/15").unwrap(), xdns_bpf::cache::parse_prefix("2001:db8::/32").unwrap()],
                capacity: xdns_bpf::cache::CacheCapacity { s: 1024, m: 256, l: 64 },
            }),
            guard: None,
            kit: None,
        };
        let mut prog = xdns_bpf::runtime::XdpProgram::load(&cfg).unwrap();
        prog.install(&data).unwrap();
        let cache = prog.cache().unwrap();
        let events = prog.prefetch_events().unwrap();
        for e in &entries {
            cache.insert(e).unwrap();
        }
        prog.attach("xdC0", AttachMode::Native).expect("native XDP on veth");
        let mut outputs = Vec::new();
        for (server, q) in [
            ("2001:db8::1", vec!["Cached.Example.org", "A"]),
            ("198.18.0.1", vec!["nx.example.org", "AAAA"]),
            ("198.18.0.1", vec!["+norecurse", "cached.example.org", "A"]),
            ("198.18.0.1", vec!["hot.example.org", "A"]),
            ("198.18.0.1", vec!["www.example.com", "A"]),
        ] {
            let at = format!("@{server}");
            // One try (the counters below count each ask once), 3 s for it: under load a 1 s
            // wait was seen to end before the answer came.
            let mut args = vec!["ip", "netns", "exec", cli.as_str(), "kdig", at.as_str(), "+timeout=3", "+retry=0"];
            args.extend(q.iter().copied());
            let o = sh(&args);
            outputs.push(format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
        }
        let c = prog.counters().unwrap();
        println!("{}", outputs.join("\n----\n"));
        println!("counters: {:?}", c.iter().filter(|x| x.1 > 0).collect::<Vec<_>>());
        let count = |n: &str| c.iter().find(|x| x.0 == n).map_or(0, |x| x.1);
        let ttl = outputs[0]
            .lines()
            .find(|l| l.contains("198.18.1.1"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|t| t.parse::<u32>().ok());
        let waited = t0.elapsed().as_secs() as u32;
        let aged = ttl.map(|t| 300 - t);
        assert!(aged.is_some_and(|a| (10..=12 + waited).contains(&a)), "TTL aged by 10 s (+{waited} s of test): {}", outputs[0]);
        assert!(outputs[0].contains("qr rd ra"), "RA set, AA clear: {}", outputs[0]);
        assert!(outputs[1].contains("NXDOMAIN"), "negative entry: {}", outputs[1]);
        assert!(!outputs[2].contains("198.18.1.1"), "RD=0 is not answered by XDP: {}", outputs[2]);
        assert!(outputs[4].contains("aa"), "served zone answered authoritatively: {}", outputs[4]);
        assert_eq!(count("cache_answered"), 3);
        assert_eq!(count("pass_rd0"), 1);
        assert!(count("answered") >= 1);
        let ev = events.recv_timeout(Duration::from_secs(2));
        assert_eq!(ev, Some(CacheKey { qname: wire("hot.example.org"), qtype: 1, dnssec_ok: false }));
        cache.remove(&ev.unwrap()).unwrap();
        prog.detach_all();
    });
    drop(peer);
    drop(lab);
}

/// Native `XDP_TX` on a veth whose peer has no XDP program (a container's or a namespace's
/// veth, as users have them): the answers are lost, `iface::veth_peer` says why before
/// anything is sent, and the driver's `xdp_tx_errors` counts the loss. A native program on the
/// peer, or generic mode, gets the same answers through. Also: a pair inside one namespace,
/// and a device that is no veth.
#[test]
fn veth_peer_without_xdp_loses_native_tx() {
    use xdns_bpf::iface::{veth_peer, PeerXdp, TxErrors};
    require_root("veth_peer_without_xdp_loses_native_tx");
    let data = example_com_kernel_data();
    let lab = Lab::new('D');
    let srv = lab.srv.clone();
    let cli = lab.cli.clone();
    let kdig = |cli: &str| {
        let o = sh(&["ip", "netns", "exec", cli, "kdig", "@198.18.0.1", "+timeout=1", "+retry=0", "www.example.com", "A"]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    in_netns(&srv, || {
        assert_eq!(veth_peer("xdD0").unwrap(), PeerXdp::NoProgram { peer: "xdD1".into(), elsewhere: true });
        assert_eq!(veth_peer("lo").unwrap(), PeerXdp::NotVeth);
        ok(&["ip", "link", "add", "xdD2", "type", "veth", "peer", "name", "xdD3"]);
        assert_eq!(veth_peer("xdD2").unwrap(), PeerXdp::NoProgram { peer: "xdD3".into(), elsewhere: false });
    });
    let (mut prog, mut tx) = in_netns(&srv, || {
        let mut prog = load();
        prog.install(&data).unwrap();
        prog.attach("xdD0", AttachMode::Native).expect("native XDP on veth");
        let tx = TxErrors::probe("xdD0").unwrap();
        (prog, tx)
    });
    assert_eq!(tx.driver, "veth");
    assert!(tx.known_driver() && !tx.counters.is_empty(), "{:?}", tx.counters);
    let before = in_netns(&srv, || tx.read().unwrap().unwrap());
    let lost = kdig(&cli);
    let after = in_netns(&srv, || tx.read().unwrap().unwrap());
    assert!(!lost.contains("198.18.0.10"), "native XDP_TX reached a peer without XDP: {lost}");
    assert!(after > before, "xdp_tx_errors {before} -> {after}");
    let answered = prog.counters().unwrap().into_iter().find(|x| x.0 == "answered").unwrap().1;
    assert!(answered >= 1, "the program did answer (the driver lost it): {answered}");

    // generic mode on the same veth: delivered through the normal transmit path
    prog.detach_all();
    in_netns(&srv, || prog.attach("xdD0", AttachMode::Generic).expect("generic XDP"));
    let generic = kdig(&cli);
    assert!(generic.contains("198.18.0.10"), "generic mode: {generic}");

    // a native program on the peer gives it the XDP receive ring
    let peer = peer_program(&cli, "xdD1");
    prog.detach_all();
    in_netns(&srv, || {
        assert_eq!(veth_peer("xdD0").unwrap(), PeerXdp::Ready { peer: "xdD1".into() });
        prog.attach("xdD0", AttachMode::Native).unwrap();
    });
    let native = kdig(&cli);
    assert!(native.contains("198.18.0.10"), "native with a peer program: {native}");
    prog.detach_all();
    drop(peer);
    drop(lab);
}
