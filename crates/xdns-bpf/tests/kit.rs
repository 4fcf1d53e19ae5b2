//! Kernel iteration (bpf/kit.h, issue 32; needs root): fixture tables through
//! BPF_PROG_TEST_RUN. A cache miss in → verdict → the exact query out (its random ID, port
//! and letter case read back from the pending entry the kernel recorded), IPv4 and IPv6; the
//! misses the kernel hands over untouched, by reason; and the response side: the genuine
//! response passes to userspace, every spoofing case is dropped and counted.
//!
//! The next hop comes from bpf_fib_lookup, so the rows run in a network namespace made for
//! the test: a veth interface with a route to the "servers" and permanent neighbour entries
//! for them. A server with no route there is the fib-failure row (handed over, untouched).

mod common;

use std::net::IpAddr;
use std::process::Command;

use common::*;
use xdns_bpf::kit::{AnswerCaps, KitHop, KitMaps, KitStage, KitZone};
use xdns_bpf::runtime::{Capacity, LoadConfig, ResolverStage, XdpProgram};

const A: u16 = 1;
const AAAA: u16 = 28;
const PORTS: (u16, u16) = (61000, 61255);
const ROOT4: [u8; 4] = [198, 18, 5, 53];
const ORG4: [u8; 4] = [198, 18, 5, 54];
const ROOT6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x53];
const ORG6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x54];
const NS: u16 = 2;
const SEED: u64 = 0x5eed_0123_4567_89ab;
const ROOT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x53];
const ORG_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x54];
const DEV_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];

fn sh(args: &[&str]) {
    let o = Command::new(args[0]).args(&args[1..]).output().expect(args[0]);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A namespace with a veth interface towards the servers; deleted on drop.
struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Self {
        let n = Self::without_forwarding(tag);
        // forwarding, for the row that comes in on kd1 and leaves on kd0 (bpf_redirect)
        sh(&["ip", "netns", "exec", &n.0, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]);
        n
    }

    /// The namespace with forwarding off, as on any host by default: bpf_fib_lookup refuses
    /// every lookup from its interfaces (BPF_FIB_LKUP_RET_FWD_DISABLED).
    fn without_forwarding(tag: &str) -> Self {
        let ns = format!("xdnskit{tag}{}", std::process::id());
        sh(&["ip", "netns", "add", &ns]);
        let n = Ns(ns);
        let ip = |a: &[&str]| {
            let mut v = vec!["ip", "-n", n.0.as_str()];
            v.extend_from_slice(a);
            sh(&v);
        };
        ip(&["link", "add", "kd0", "address", "02:00:00:00:00:10", "type", "veth", "peer", "name", "kd1"]);
        ip(&["link", "set", "kd0", "up"]);
        ip(&["link", "set", "kd1", "up"]);
        ip(&["link", "set", "lo", "up"]);
        ip(&["addr", "add", "198.18.5.1/24", "dev", "kd0"]);
        ip(&["addr", "add", "2001:db8:5::1/64", "dev", "kd0", "nodad"]);
        ip(&["neigh", "add", "198.18.5.53", "lladdr", "02:00:00:00:00:53", "dev", "kd0", "nud", "permanent"]);
        ip(&["neigh", "add", "198.18.5.54", "lladdr", "02:00:00:00:00:54", "dev", "kd0", "nud", "permanent"]);
        ip(&["-6", "neigh", "add", "2001:db8:5::53", "lladdr", "02:00:00:00:00:53", "dev", "kd0", "nud", "permanent"]);
        ip(&["-6", "neigh", "add", "2001:db8:5::54", "lladdr", "02:00:00:00:00:54", "dev", "kd0", "nud", "permanent"]);
        n
    }

    /// The index of interface `dev` in the namespace.
    fn ifindex(&self, dev: &str) -> u32 {
        let o = Command::new("ip").args(["-n", &self.0, "-o", "link", "show", dev]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).split(':').next().unwrap().trim().parse().unwrap()
    }

    /// Run `f` on a thread inside the namespace (setns is per thread).
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_netns(&self.0, f)
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}


fn load_kit(pending: u32, guard: Option<xdns_bpf::guard::GuardStage>) -> XdpProgram {
    let cfg = LoadConfig {
        listen: vec!["198.18.0.1:53".parse().unwrap(), "[2001:db8::1]:53".parse().unwrap()],
        edns_payload: OUR_PAYLOAD,
        seed: Some(SEED),
        capacity: Capacity { nodes: 256, answers: 256, bodies_m: 256, bodies_l: 256, table_vals: 0, table_bytes: 0 },
        resolver: Some(ResolverStage {
            allow: vec![("198.18.0.0".parse().unwrap(), 15), ("2001:db8::".parse().unwrap(), 32)],
            capacity: xdns_bpf::cache::CacheCapacity { s: 1024, m: 256, l: 128 },
        }),
        guard,
        kit: Some(KitStage { ports: PORTS, pending, zones: 64 }),
    };
    let mut prog = XdpProgram::load(&cfg).expect("load with kernel iteration (verifier)");
    prog.install(&www_example_com()).unwrap();
    prog
}

fn ip(b: &[u8]) -> IpAddr {
    if b.len() == 4 {
        IpAddr::from(<[u8; 4]>::try_from(b).unwrap())
    } else {
        IpAddr::from(<[u8; 16]>::try_from(b).unwrap())
    }
}

fn zones(k: &KitMaps) {
    k.set_zone(&KitZone { name: vec![0], addrs: vec![ip(&ROOT4), ip(&ROOT6)], expires_ns: u64::MAX }).unwrap();
    k.set_zone(&KitZone { name: wire("example.org"), addrs: vec![ip(&ORG4)], expires_ns: u64::MAX }).unwrap();
    // expired: never chosen (its parent, the root, is)
    k.set_zone(&KitZone { name: wire("expired.net"), addrs: vec![ip(&ORG4)], expires_ns: 1 }).unwrap();
    // no route in the namespace: bpf_fib_lookup fails
    k.set_zone(&KitZone { name: wire("nowhere.test"), addrs: vec!["203.0.113.9".parse().unwrap(), "2001:db9::9".parse().unwrap()], expires_ns: u64::MAX }).unwrap();
    // IPv6 servers only
    k.set_zone(&KitZone { name: wire("six.test"), addrs: vec![ip(&ROOT6)], expires_ns: u64::MAX }).unwrap();
}

/// Run the program on `f` received on `ifindex`: (XDP action, output frame, verdicts moved).
fn run(prog: &XdpProgram, f: &[u8], ifindex: u32) -> (u32, Vec<u8>, Vec<String>) {
    let before = prog.counters().unwrap();
    let (act, out) = prog.test_run_on(f, ifindex).unwrap();
    let after = prog.counters().unwrap();
    let moved = before.iter().zip(&after).filter(|(b, a)| a.1 != b.1).map(|(_, a)| a.0.clone()).collect();
    (act, out, moved)
}

fn counter(prog: &XdpProgram, name: &str) -> u64 {
    prog.counters().unwrap().into_iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no verdict {name}")).1
}

/// The query the kernel must have sent: the client's frame with the server's headers, our
/// header (`id`, RD=0, one question, our OPT), the name `sent` (as recorded), the type.
fn expected_query(net: &Net, server: &[u8], mac: [u8; 6], port: u16, id: u16, sent: &[u8], qtype: u16) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
    m.extend_from_slice(sent);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&[0, 0, 41]);
    m.extend_from_slice(&OUR_PAYLOAD.to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    let out = Net {
        src_mac: DEV_MAC,
        dst_mac: mac,
        src: net.dst.clone(),
        dst: server.to_vec(),
        sport: port,
        dport: 53,
        ttl: 64,
        frag: 0x4000,
        ..net.clone()
    };
    let mut f = frame(&out, &m);
    if !net.v6 {
        ipv4_id_zero(&mut f);
    }
    f
}

/// The kernel's IPv4 header has ID 0 (the frame builder writes 0x1234): set it, and the
/// header checksum again.
fn ipv4_id_zero(f: &mut [u8]) {
    f[18] = 0;
    f[19] = 0;
    f[24] = 0;
    f[25] = 0;
    let c = !fold(sum16(&f[14..34], 0));
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// The (port, ID) of a query frame the kernel sent.
fn port_id(f: &[u8], v6: bool) -> (u16, u16) {
    let l4 = if v6 { 54 } else { 34 };
    (u16::from_be_bytes([f[l4], f[l4 + 1]]), u16::from_be_bytes([f[l4 + 8], f[l4 + 9]]))
}

/// A response from `server`:`sport` to our `port`, with `id` and the question `name`/`qtype`.
fn response(v6: bool, server: &[u8], sport: u16, port: u16, id: u16, name: &[u8], qtype: u16) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[0x80, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(name);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    let base = if v6 { Net::v6() } else { Net::v4() };
    let net = Net { src: server.to_vec(), dst: base.dst.clone(), sport, dport: port, src_mac: ROOT_MAC, dst_mac: DEV_MAC, ..base };
    frame(&net, &m)
}

#[test]
fn kit_programs_pass_the_verifier() {
    require_root("kit_programs_pass_the_verifier");
    for guard in [None, Some(xdns_bpf::guard::GuardStage { capacity: 1024, tier_slots: 4, features: true, names: 1024, feature_prefixes: 1024, feature_suffixes: 1024, rrl_accounts: 1024 })] {
        let on = guard.is_some();
        let prog = load_kit(64, guard);
        let (_, main) = prog.insn_count().unwrap();
        let [(_, out), (_, inp)] = prog.kit_insn_counts().unwrap();
        println!("verified: resolver program with kernel iteration (guard {on}) {main}, xdns_kit_out_xdp {out}, xdns_kit_in_xdp {inp}");
        assert!(main < 1_000_000 && out < 1_000_000 && inp < 1_000_000);
        assert!(out > 0 && inp > 0, "both kit programs were verified");
    }
}

/// A miss row: (what, frame, server asked, its MAC, the zone expected to be asked).
struct Out {
    what: &'static str,
    net: Net,
    qname: &'static str,
    qtype: u16,
    server: Vec<u8>,
    mac: [u8; 6],
}

#[test]
fn misses_are_rewritten_into_queries_and_responses_checked() {
    require_root("misses_are_rewritten_into_queries_and_responses_checked");
    stay_on_one_cpu();
    let ns = Ns::new("a");
    let (kd0, kd1) = (ns.ifindex("kd0"), ns.ifindex("kd1"));
    let verdict = |prog: &XdpProgram, f: &[u8]| run(prog, f, kd0);
    ns.run(|| {
        let prog = load_kit(1024, None);
        let kit = prog.kit().unwrap();
        zones(&kit);
        let rows = vec![
            Out { what: "ipv4, the root", net: Net::v4(), qname: "www.example.net", qtype: A, server: ROOT4.to_vec(), mac: ROOT_MAC },
            Out { what: "ipv6, the root", net: Net::v6(), qname: "www.example.net", qtype: AAAA, server: ROOT6.to_vec(), mac: ROOT_MAC },
            Out { what: "ipv4, the deepest cut", net: Net::v4(), qname: "a.b.WWW.Example.Org", qtype: A, server: ORG4.to_vec(), mac: ORG_MAC },
            Out { what: "ipv4, the cut itself", net: Net::v4(), qname: "example.org", qtype: A, server: ORG4.to_vec(), mac: ORG_MAC },
            Out { what: "ipv6, a cut without IPv6: its parent is not asked either (handed over)", net: Net::v6(), qname: "www.example.org", qtype: A, server: vec![], mac: [0; 6] },
            Out { what: "ipv4, an expired cut: the root", net: Net::v4(), qname: "x.expired.net", qtype: A, server: ROOT4.to_vec(), mac: ROOT_MAC },
        ];
        for r in rows {
            let q = query(&wire(r.qname), r.qtype, Opt::new(1232, false));
            let f = frame(&r.net, &q);
            let before = kit.counters().unwrap();
            let (act, out, moved) = verdict(&prog, &f);
            if r.server.is_empty() {
                assert_eq!(moved, vec!["pass_kit_handover".to_string()], "{}", r.what);
                assert_eq!(out, f, "{}: untouched", r.what);
                assert_eq!(kit.counters().unwrap().handover[2], before.handover[2] + 1, "{}: reason family", r.what);
                continue;
            }
            assert_eq!(moved, vec!["kit_sent".to_string()], "{}: {:?}", r.what, kit.counters().unwrap());
            assert_eq!(act, 3, "{}: XDP_TX (the servers are behind the interface it came in)", r.what);
            assert!(checksums_ok(&out), "{}: checksums", r.what);
            let (port, id) = port_id(&out, r.net.v6);
            assert!((PORTS.0..=PORTS.1).contains(&port), "{}: port {port} in the reserved range", r.what);
            let p = kit.claim(ip(&r.server), port, id).unwrap().unwrap_or_else(|| panic!("{}: a pending entry for the query sent", r.what));
            assert_eq!(p.qname, wire(r.qname), "{}: the client's name, as sent", r.what);
            assert!(p.sent_name.eq_ignore_ascii_case(&wire(r.qname)), "{}: the same name sent", r.what);
            assert_eq!((p.qtype, p.id, p.flags, p.payload), (r.qtype, 0xbeef, 0x0100, Some(1232)), "{}", r.what);
            assert_eq!(p.client, std::net::SocketAddr::new(ip(&r.net.src), r.net.sport), "{}", r.what);
            assert_eq!(p.local, ip(&r.net.dst), "{}", r.what);
            assert_eq!(out, expected_query(&r.net, &r.server, r.mac, port, id, &p.sent_name, r.qtype), "{}: exact bytes", r.what);
            assert_eq!(kit.counters().unwrap().sent, before.sent + 1, "{}", r.what);
        }
        assert_eq!(kit.pending_len(), 0, "every entry claimed");

        // 0x20: over many queries for a long name, both cases of its letters are sent
        let name = wire("abcdefghijklmnopqrstuvwxyz.example.net");
        let (mut upper, mut lower) = (0, 0);
        let mut ids = std::collections::BTreeSet::new();
        let mut ports = std::collections::BTreeSet::new();
        for _ in 0..16 {
            let (_, out, moved) = verdict(&prog, &frame(&Net::v4(), &query(&name, A, None)));
            assert_eq!(moved, vec!["kit_sent".to_string()]);
            let (port, id) = port_id(&out, false);
            ids.insert(id);
            ports.insert(port);
            let p = kit.claim(ip(&ROOT4), port, id).unwrap().expect("pending");
            upper += p.sent_name.iter().filter(|c| c.is_ascii_uppercase()).count();
            lower += p.sent_name.iter().filter(|c| c.is_ascii_lowercase()).count();
            assert_eq!(p.payload, None, "no EDNS from the client");
        }
        assert!(upper > 100 && lower > 100, "random case: {upper} upper, {lower} lower");
        // 16 draws: of 65536 IDs, two repeats happen once in ~10^6 runs; of the 256 ports
        // three repeats happen once in ~80 runs (a CI run failed on 13 distinct), seven once
        // in ~10^6: so at least 15 IDs and 9 ports
        assert!(ids.len() >= 15 && ports.len() >= 9, "random IDs {ids:?} and ports {ports:?}");

        // handed over untouched, by reason
        let mut vlan = Net::v4();
        vlan.vlan = Some((0x8100, 42));
        let mut opts = Net::v4();
        opts.ip_opts = vec![1, 1, 1, 0];
        let cookie = Some(Opt { payload: 1232, dnssec_ok: false, version: 0, options: vec![0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8] });
        for (what, net, name, opt, reason) in [
            ("no route to the server (fib)", Net::v4(), "a.nowhere.test", None, 5),
            ("no route to the server (fib), ipv6", Net::v6(), "a.nowhere.test", None, 5),
            ("a cut with IPv6 servers only, an IPv4 client", Net::v4(), "www.six.test", None, 2),
            ("one VLAN tag", vlan, "www.example.net", None, 3),
            ("IPv4 options", opts, "www.example.net", None, 3),
            ("a client cookie", Net::v4(), "www.example.net", cookie, 3),
        ] {
            let f = frame(&net, &query(&wire(name), A, opt));
            let before = kit.counters().unwrap();
            let (act, out, moved) = verdict(&prog, &f);
            assert_eq!((act, moved), (2, vec!["pass_kit_handover".to_string()]), "{what}");
            assert_eq!(out, f, "{what}: untouched");
            assert_eq!(kit.counters().unwrap().handover[reason], before.handover[reason] + 1, "{what}: reason {}", xdns_bpf::kit::HANDOVER[reason]);
        }
        assert_eq!(kit.pending_len(), 0, "nothing recorded for a handover");

        // no kernel iteration where the cache stage does not send the query on
        let mut rd0 = query(&wire("www.example.net"), A, None);
        rd0[2] = 0;
        let (_, _, moved) = verdict(&prog, &frame(&Net::v4(), &rd0));
        assert_eq!(moved, vec!["pass_rd0".to_string()]);

        // the response side: one query out, then its spoofs and the genuine answer
        for v6 in [false, true] {
            let net = if v6 { Net::v6() } else { Net::v4() };
            let server: Vec<u8> = if v6 { ROOT6.to_vec() } else { ROOT4.to_vec() };
            let (_, out, moved) = verdict(&prog, &frame(&net, &query(&wire("www.example.net"), A, None)));
            assert_eq!(moved, vec!["kit_sent".to_string()]);
            let (port, id) = port_id(&out, v6);
            let sent = {
                let p = kit.claim(ip(&server), port, id).unwrap().unwrap();
                // put it back as the kernel had it: claim and re-send is simpler; take the name
                p.sent_name
            };
            // claiming removed the entry: send again and keep it this time
            let (_, out, _) = verdict(&prog, &frame(&net, &query(&wire("www.example.net"), A, None)));
            let (port, id) = port_id(&out, v6);
            let sent2 = dns_of(&out)[12..12 + sent.len()].to_vec();
            let mut flipped = sent2.clone();
            let at = flipped.iter().position(|c| c.is_ascii_alphabetic()).unwrap();
            flipped[at] ^= 0x20;
            let other_port = if port == PORTS.1 { PORTS.0 } else { port + 1 };
            let other_server: Vec<u8> = if v6 { SERVER_V6.to_vec() } else { CLIENT_V4.to_vec() };
            let spoofs: Vec<(&str, Vec<u8>, &str)> = vec![
                ("wrong ID", response(v6, &server, 53, port, id ^ 1, &sent2, A), "drop_kit_unsolicited"),
                ("wrong port (of the range)", response(v6, &server, 53, other_port, id, &sent2, A), "drop_kit_unsolicited"),
                ("wrong server", response(v6, &other_server, 53, port, id, &sent2, A), "drop_kit_unsolicited"),
                ("from port 5353", response(v6, &server, 5353, port, id, &sent2, A), "drop_kit_src_port"),
                ("the name in another case", response(v6, &server, 53, port, id, &flipped, A), "drop_kit_question"),
                ("another type", response(v6, &server, 53, port, id, &sent2, AAAA), "drop_kit_question"),
                ("another name", response(v6, &server, 53, port, id, &wire("www.example.com"), A), "drop_kit_question"),
            ];
            for (what, f, want) in spoofs {
                let (act, _, moved) = verdict(&prog, &f);
                assert_eq!((act, moved), (1, vec![want.to_string()]), "{what} (ipv6 {v6}): XDP_DROP");
            }
            let mut q = response(v6, &server, 53, port, id, &sent2, A);
            let d = q.len() - dns_of(&q).len();
            q[d + 2] = 0;
            let (_, _, moved) = verdict(&prog, &{
                // a query (QR=0) to a reserved port: the checksum does not matter to the program
                q.clone()
            });
            assert_eq!(moved, vec!["drop_kit_malformed".to_string()], "a query to a reserved port");
            let before = kit.counters().unwrap();
            let genuine = response(v6, &server, 53, port, id, &sent2, A);
            let (act, _, moved) = verdict(&prog, &genuine);
            assert_eq!((act, moved), (1, vec!["kit_handed".to_string()]), "the genuine response (ipv6 {v6}), after the spoofs: handed over, XDP_DROP");
            let after = kit.counters().unwrap();
            assert_eq!((after.responses, after.handed), (before.responses + 1, before.handed + 1));
            let ev = kit.take_events().unwrap();
            assert_eq!(ev.len(), 1, "one record in the ring");
            assert_eq!((ev[0].server, ev[0].port, ev[0].id), (ip(&server), port, id));
            assert_eq!(ev[0].msg, dns_of(&genuine).to_vec(), "the response as received");
            assert_eq!((ev[0].pending.sent_name.clone(), ev[0].pending.hops), (sent2.clone(), 1), "with its entry");
            assert!(kit.claim(ip(&server), port, id).unwrap().is_none(), "the kernel claimed it: userspace cannot");
            let (_, _, moved) = verdict(&prog, &response(v6, &server, 53, port, id, &sent2, A));
            assert_eq!(moved, vec!["drop_kit_unsolicited".to_string()], "a second copy after the claim");
        }
        // a response to a port outside the range is not ours
        let (_, _, moved) = verdict(&prog, &response(false, &ROOT4, 53, PORTS.1 + 1, 7, &wire("x"), A));
        assert_eq!(moved, vec!["pass_not_our_addr".to_string()]);
        assert!(counter(&prog, "kit_sent") > 0);

        // in on kd1, out on kd0: the forwarding lookup, bpf_redirect
        let net = Net::v4();
        let (act, out, moved) = run(&prog, &frame(&net, &query(&wire("www.example.net"), A, None)), kd1);
        assert_eq!((act, moved), (4, vec!["kit_redirected".to_string()]), "XDP_REDIRECT");
        let (port, id) = port_id(&out, false);
        let p = kit.claim(ip(&ROOT4), port, id).unwrap().expect("pending");
        assert_eq!(out, expected_query(&net, &ROOT4, ROOT_MAC, port, id, &p.sent_name, A), "exact bytes, redirected");
    });
}

/// Forwarding off (the default of every host): both bpf_fib_lookup tries fail, so the next
/// hop comes from the daemon's table `xdns_kit_hops`: a live entry gives the interface and
/// both MACs (the frame carries exactly the MACs written, not the neighbour table's), XDP_TX
/// out of the interface the query came in or a redirect to another; no entry or an expired
/// one hands the miss over untouched (`fib`), as before the table.
#[test]
fn without_forwarding_the_next_hop_comes_from_the_daemons_table() {
    require_root("without_forwarding_the_next_hop_comes_from_the_daemons_table");
    stay_on_one_cpu();
    let ns = Ns::without_forwarding("h");
    let (kd0, kd1) = (ns.ifindex("kd0"), ns.ifindex("kd1"));
    let ours: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa1];
    let gw: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
    ns.run(|| {
        let prog = load_kit(1024, None);
        let kit = prog.kit().unwrap();
        zones(&kit);
        let fib = |v6: bool, what: &str| {
            let net = if v6 { Net::v6() } else { Net::v4() };
            let f = frame(&net, &query(&wire("www.example.net"), A, None));
            let before = kit.counters().unwrap();
            let (act, out, moved) = run(&prog, &f, kd0);
            assert_eq!((act, moved), (2, vec!["pass_kit_handover".to_string()]), "{what}");
            assert_eq!(out, f, "{what}: untouched");
            let after = kit.counters().unwrap();
            assert_eq!(after.handover[5], before.handover[5] + 1, "{what}: reason fib");
            assert_eq!((after.hop_miss, after.hop_table), (before.hop_miss + 1, before.hop_table), "{what}: a table miss");
        };
        for v6 in [false, true] {
            fib(v6, &format!("no entry (ipv6 {v6})"));
        }
        let now = {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        for (v6, server) in [(false, ROOT4.to_vec()), (true, ROOT6.to_vec())] {
            let net = if v6 { Net::v6() } else { Net::v4() };
            // expired: as if absent
            kit.set_hop(ip(&server), &KitHop { ifindex: kd0, smac: ours, dmac: gw, expires_ns: now.saturating_sub(1) }).unwrap();
            fib(v6, &format!("an expired entry (ipv6 {v6})"));
            // live, out of the interface the query came in: XDP_TX with the MACs written
            kit.set_hop(ip(&server), &KitHop { ifindex: kd0, smac: ours, dmac: gw, expires_ns: u64::MAX }).unwrap();
            let before = kit.counters().unwrap();
            let (act, out, moved) = run(&prog, &frame(&net, &query(&wire("www.example.net"), A, None)), kd0);
            assert_eq!((act, moved), (3, vec!["kit_sent".to_string()]), "ipv6 {v6}: XDP_TX");
            let (port, id) = port_id(&out, v6);
            let p = kit.claim(ip(&server), port, id).unwrap().expect("pending");
            let mut want = expected_query(&net, &server, gw, port, id, &p.sent_name, A);
            want[6..12].copy_from_slice(&ours);
            assert_eq!(out, want, "ipv6 {v6}: exact bytes, the table's MACs");
            assert!(checksums_ok(&out));
            let after = kit.counters().unwrap();
            assert_eq!((after.hop_table, after.hop_miss, after.sent), (before.hop_table + 1, before.hop_miss, before.sent + 1), "ipv6 {v6}");
            // live, out of another interface: redirected there
            kit.set_hop(ip(&server), &KitHop { ifindex: kd1, smac: ours, dmac: gw, expires_ns: u64::MAX }).unwrap();
            let (act, out, moved) = run(&prog, &frame(&net, &query(&wire("www.example.net"), A, None)), kd0);
            assert_eq!((act, moved), (4, vec!["kit_redirected".to_string()]), "ipv6 {v6}: XDP_REDIRECT");
            let (port, id) = port_id(&out, v6);
            let p = kit.claim(ip(&server), port, id).unwrap().expect("pending");
            let mut want = expected_query(&net, &server, gw, port, id, &p.sent_name, A);
            want[6..12].copy_from_slice(&ours);
            assert_eq!(out, want, "ipv6 {v6}: exact bytes, redirected");
            assert_eq!(kit.hop(ip(&server)).unwrap().map(|h| h.ifindex), Some(kd1));
            kit.remove_hop(ip(&server)).unwrap();
            assert_eq!(kit.hop(ip(&server)).unwrap(), None);
            fib(v6, &format!("the entry removed (ipv6 {v6})"));
        }
        assert_eq!(kit.pending_len(), 0, "every entry claimed, none left by a handover");
    });
}

#[test]
fn a_full_pending_map_hands_misses_over() {
    require_root("a_full_pending_map_hands_misses_over");
    stay_on_one_cpu();
    let ns = Ns::new("b");
    let kd0 = ns.ifindex("kd0");
    let verdict = |prog: &XdpProgram, f: &[u8]| run(prog, f, kd0);
    ns.run(|| {
        let prog = load_kit(1, None);
        let kit = prog.kit().unwrap();
        zones(&kit);
        let f = frame(&Net::v4(), &query(&wire("www.example.net"), A, None));
        let (_, _, moved) = verdict(&prog, &f);
        assert_eq!(moved, vec!["kit_sent".to_string()]);
        let (act, out, moved) = verdict(&prog, &f);
        assert_eq!((act, moved), (2, vec!["pass_kit_handover".to_string()]), "the second miss finds the map full");
        assert_eq!(out, f);
        assert_eq!(kit.counters().unwrap().handover[4], 1, "reason pending_full");
        assert_eq!(kit.claim_older(u64::MAX).unwrap().len(), 1, "the timer claims the one sent");
        let (_, _, moved) = verdict(&prog, &f);
        assert_eq!(moved, vec!["kit_sent".to_string()], "room again");
    });
}

/// A response message to our query `id` for `sent`/`qtype` with header `flags` (QR=1 added),
/// no records yet: [`add`] appends them.
fn message(id: u16, flags: u16, sent: &[u8], qtype: u16) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&(0x8000 | flags).to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(sent);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m
}

/// Append a record of class IN to `section` (1 answer, 2 authority, 3 additional); the
/// offset of its rdata (for compression pointers to it).
fn add(m: &mut Vec<u8>, section: usize, owner: &[u8], rtype: u16, ttl: u32, rdata: &[u8]) -> usize {
    let at = 4 + 2 * section;
    let n = u16::from_be_bytes([m[at], m[at + 1]]) + 1;
    m[at..at + 2].copy_from_slice(&n.to_be_bytes());
    m.extend_from_slice(owner);
    m.extend_from_slice(&rtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&ttl.to_be_bytes());
    m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    m.extend_from_slice(rdata);
    m.len() - rdata.len()
}

/// A pointer to offset `off`.
fn ptr(off: usize) -> Vec<u8> {
    vec![0xc0 | (off >> 8) as u8, off as u8]
}

/// An OPT record (payload 1232, no options) at the end of the additional section.
fn opt(m: &mut Vec<u8>) {
    let n = u16::from_be_bytes([m[10], m[11]]) + 1;
    m[10..12].copy_from_slice(&n.to_be_bytes());
    m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
}

/// The frame of message `m` from `server`:53 to our `port`.
fn from_server(v6: bool, server: &[u8], port: u16, m: &[u8]) -> Vec<u8> {
    let base = if v6 { Net::v6() } else { Net::v4() };
    let net = Net { src: server.to_vec(), dst: base.dst.clone(), sport: 53, dport: port, src_mac: ROOT_MAC, dst_mac: DEV_MAC, ..base };
    frame(&net, m)
}

/// A referral to `cut` for the question sent: NS `ns` (each with the glue given, A or AAAA
/// by length), TTL 3600, and an OPT.
fn referral(id: u16, sent: &[u8], qtype: u16, cut: &str, ns: &[(&str, Vec<Vec<u8>>)]) -> Vec<u8> {
    let mut m = message(id, 0, sent, qtype);
    for (name, _) in ns {
        add(&mut m, 2, &wire(cut), NS, 3600, &wire(name));
    }
    for (name, glue) in ns {
        for a in glue {
            add(&mut m, 3, &wire(name), if a.len() == 4 { A } else { AAAA }, 3600, a);
        }
    }
    opt(&mut m);
    m
}

/// A client's miss for `name` sent by the kernel: (server's port, ID, the name as sent).
fn ask(prog: &XdpProgram, ifindex: u32, v6: bool, name: &str, qtype: u16) -> (u16, u16, Vec<u8>) {
    let net = if v6 { Net::v6() } else { Net::v4() };
    let (_, out, moved) = run(prog, &frame(&net, &query(&wire(name), qtype, Opt::new(1232, false))), ifindex);
    assert_eq!(moved, vec!["kit_sent".to_string()], "{name}: sent by the kernel");
    let (port, id) = port_id(&out, v6);
    let q = wire(name).len();
    (port, id, dns_of(&out)[12..12 + q].to_vec())
}

#[test]
fn referrals_with_glue_are_followed_in_the_kernel() {
    require_root("referrals_with_glue_are_followed_in_the_kernel");
    stay_on_one_cpu();
    let ns = Ns::new("c");
    let kd0 = ns.ifindex("kd0");
    ns.run(|| {
        let prog = load_kit(1024, None);
        let kit = prog.kit().unwrap();
        zones(&kit);

        // the rewrite, IPv4 and IPv6: a referral from the root, its owner and one NS name
        // compressed, glue for the second NS name only (by a pointer to its NS rdata)
        for (v6, tld, qtype) in [(false, "net", A), (true, "six", AAAA)] {
            let (root, next, base): (Vec<u8>, Vec<u8>, Net) =
                if v6 { (ROOT6.to_vec(), ORG6.to_vec(), Net::v6()) } else { (ROOT4.to_vec(), ORG4.to_vec(), Net::v4()) };
            let name = format!("www.example.{tld}");
            let (port, id, sent) = ask(&prog, kd0, v6, &name, qtype);
            let mut m = message(id, 0, &sent, qtype);
            let tld_at = 12 + wire(&name).len() - wire(tld).len();
            add(&mut m, 2, &ptr(tld_at), NS, 172800, &[&b"\x01a\x04gtld"[..], &ptr(tld_at)].concat());
            let b_at = add(&mut m, 2, &wire(&tld.to_uppercase()), NS, 86400, &wire(&format!("b.gtld.{tld}")));
            add(&mut m, 3, &ptr(b_at), A, 172800, &ORG4);
            add(&mut m, 3, &ptr(b_at), AAAA, 172800, &ORG6);
            opt(&mut m);
            let before = kit.counters().unwrap();
            let (act, out, moved) = run(&prog, &from_server(v6, &root, port, &m), kd0);
            assert_eq!((act, moved), (3, vec!["kit_referral_followed".to_string()]), "ipv6 {v6}: XDP_TX, the next query");
            assert!(checksums_ok(&out), "ipv6 {v6}: checksums");
            let (port2, id2) = port_id(&out, v6);
            assert!((PORTS.0..=PORTS.1).contains(&port2), "a port of the range");
            assert!(kit.claim(ip(&root), port, id).unwrap().is_none(), "ipv6 {v6}: the old entry is gone");
            let raw = kit.peek(ip(&next), port2, id2).unwrap().expect("the new entry, under the glue's address");
            assert_eq!((raw.hops, raw.zone_len), (2, wire(tld).len() as u8), "hop 2, the cut {tld}.");
            assert_eq!(raw.zone_hash, xdns_bpf::hash::name_hash(SEED, &wire(tld)), "keyed as userspace keys {tld}.");
            let p = kit.claim(ip(&next), port2, id2).unwrap().expect("the new entry, under the glue's address");
            assert_eq!(out, expected_query(&base, &next, ORG_MAC, port2, id2, &p.sent_name, qtype), "ipv6 {v6}: exact bytes");
            assert_eq!(p.qname, wire(&name), "the client's name kept");
            assert!(p.sent_name.eq_ignore_ascii_case(&sent), "the same name, in its own case");
            assert_eq!((p.qtype, p.id, p.flags, p.payload), (qtype, 0xbeef, 0x0100, Some(1232)), "the client's state kept");
            assert_eq!(p.client, std::net::SocketAddr::new(ip(&base.src), base.sport));
            assert_eq!(p.local, ip(&base.dst));
            let after = kit.counters().unwrap();
            assert_eq!((after.hops, after.learnt), (before.hops + 1, before.learnt + 1), "one hop followed, one cut learnt");
            let z = kit.zones().unwrap().into_iter().find(|z| z.name == wire(tld)).expect("the cut learnt");
            assert_eq!(z.addrs, vec![ip(&ORG4), ip(&ORG6)], "both families of glue");
            assert!(z.expires_ns < u64::MAX && z.expires_ns > p.sent_ns + 86_000 * 1_000_000_000, "expiry from the smaller NS TTL");
            // the next miss under it goes straight to the cut learnt
            let net = if v6 { Net::v6() } else { Net::v4() };
            let (_, out, moved) = run(&prog, &frame(&net, &query(&wire(&format!("other.{tld}")), qtype, None)), kd0);
            assert_eq!(moved, vec!["kit_sent".to_string()]);
            let (port3, id3) = port_id(&out, v6);
            assert!(kit.claim(ip(&next), port3, id3).unwrap().is_some(), "asked at the cut learnt");
        }

        // a referral coming in on kd1 leaves on kd0: the forwarding lookup, bpf_redirect
        let kd1 = ns.ifindex("kd1");
        let (port, id, sent) = ask(&prog, kd0, false, "www.example.redir", A);
        let m = referral(id, &sent, A, "redir", &[("ns.redir", vec![ORG4.to_vec()])]);
        let (act, out, moved) = run(&prog, &from_server(false, &ROOT4, port, &m), kd1);
        assert_eq!((act, moved), (4, vec!["kit_referral_redirected".to_string()]), "XDP_REDIRECT");
        let (port2, id2) = port_id(&out, false);
        let p = kit.claim(ip(&ORG4), port2, id2).unwrap().expect("the new entry");
        assert_eq!(out, expected_query(&Net::v4(), &ORG4, ORG_MAC, port2, id2, &p.sent_name, A), "exact bytes, redirected");

        // a cut below the root, to be asked (its servers at ORG4)
        kit.set_zone(&KitZone { name: wire("upward.test"), addrs: vec![ip(&ORG4)], expires_ns: u64::MAX }).unwrap();
        let glue = |a: &[u8; 4]| vec![a.to_vec()];
        // handed to userspace untouched, the entry left for it to claim
        type Make = Box<dyn Fn(u16, &[u8]) -> Vec<u8>>;
        let rows: Vec<(&str, &str, Make, &str)> = vec![
            ("out-of-bailiwick NS owner (not above the name)", "www.example.test",
             Box::new(move |id, s| referral(id, s, A, "example.com", &[("ns.example.com", glue(&ORG4))])), "pass_kit_bailiwick"),
            ("upward referral (to the root, asked at upward.test)", "www.upward.test",
             Box::new(move |id, s| referral(id, s, A, ".", &[("a.root.test", glue(&ORG4))])), "pass_kit_bailiwick"),
            ("upward referral (to test)", "www.upward.test",
             Box::new(move |id, s| referral(id, s, A, "test", &[("ns.upward.test", glue(&ORG4))])), "pass_kit_bailiwick"),
            ("sideways referral (the cut asked itself)", "www.upward.test",
             Box::new(move |id, s| referral(id, s, A, "upward.test", &[("ns.upward.test", glue(&ORG4))])), "pass_kit_bailiwick"),
            ("out-of-bailiwick glue (asked at upward.test, glue under net)", "www.upward.test",
             Box::new(move |id, s| referral(id, s, A, "www.upward.test", &[("ns.elsewhere.net", glue(&ORG4))])), "pass_kit_glueless"),
            ("glue for no NS name", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = message(id, 0, s, A);
                 add(&mut m, 2, &wire("test"), NS, 3600, &wire("ns.test"));
                 add(&mut m, 3, &wire("other.test"), A, 3600, &ORG4);
                 m
             }), "pass_kit_glueless"),
            ("glueless", "www.example.test",
             Box::new(move |id, s| referral(id, s, A, "test", &[("ns.test", vec![])])), "pass_kit_glueless"),
            ("glue of the other family only", "www.example.test",
             Box::new(move |id, s| referral(id, s, A, "test", &[("ns.test", vec![ORG6.to_vec()])])), "pass_kit_glueless"),
            ("NS owners of two names", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = message(id, 0, s, A);
                 add(&mut m, 2, &wire("test"), NS, 3600, &wire("ns.test"));
                 add(&mut m, 2, &wire("example.test"), NS, 3600, &wire("ns.test"));
                 add(&mut m, 3, &wire("ns.test"), A, 3600, &ORG4);
                 m
             }), "pass_kit_bailiwick"),
            ("truncated: rdlength past the end", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = referral(id, s, A, "test", &[("ns.test", glue(&ORG4))]);
                 m.truncate(m.len() - 13);
                 m
             }), "pass_kit_unparsed"),
            ("malformed: a compression pointer forward", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = message(id, 0, s, A);
                 let at = m.len() + 2;
                 add(&mut m, 2, &ptr(at + 200), NS, 3600, &wire("ns.test"));
                 add(&mut m, 3, &wire("ns.test"), A, 3600, &ORG4);
                 m
             }), "pass_kit_unparsed"),
            ("malformed: a pointer to itself", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = message(id, 0, s, A);
                 let at = m.len();
                 add(&mut m, 2, &ptr(at), NS, 3600, &wire("ns.test"));
                 add(&mut m, 3, &wire("ns.test"), A, 3600, &ORG4);
                 m
             }), "pass_kit_unparsed"),
            ("TC=1", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = referral(id, s, A, "test", &[("ns.test", glue(&ORG4))]);
                 m[2] |= 0x02;
                 m
             }), "kit_handed"),
            ("AA=1 (an answer, not a referral)", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = referral(id, s, A, "test", &[("ns.test", glue(&ORG4))]);
                 m[2] |= 0x04;
                 m
             }), "kit_handed"),
            ("NXDOMAIN", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = referral(id, s, A, "test", &[("ns.test", glue(&ORG4))]);
                 m[3] |= 3;
                 m
             }), "kit_handed"),
            ("SOA in authority (no data)", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = message(id, 0, s, A);
                 add(&mut m, 2, &wire("test"), 6, 3600, &[&wire("ns.test")[..], &wire("h.test"), &[0; 20]].concat());
                 add(&mut m, 2, &wire("test"), NS, 3600, &wire("ns.test"));
                 add(&mut m, 3, &wire("ns.test"), A, 3600, &ORG4);
                 m
             }), "kit_handed"),
            ("an answer", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = message(id, 0, s, A);
                 add(&mut m, 1, &ptr(12), A, 3600, &ORG4);
                 m
             }), "kit_handed"),
            ("an answer longer than the kernel reads (XDNS_KIT_RESP_MAX): the socket's", "www.example.test",
             Box::new(move |id, s| {
                 let mut m = message(id, 0, s, A);
                 for _ in 0..130 {
                     add(&mut m, 1, &ptr(12), A, 3600, &ORG4);
                 }
                 assert!(m.len() > 1984);
                 m
             }), "pass_kit_response"),
        ];
        for (what, name, make, want) in rows {
            let server = if name.contains("upward") { ORG4 } else { ROOT4 };
            let (port, id, sent) = ask(&prog, kd0, false, name, A);
            let f = from_server(false, &server, port, &make(id, &sent));
            let before = kit.counters().unwrap();
            let (act, out, moved) = run(&prog, &f, kd0);
            if want == "kit_handed" {
                // a final response: handed over in the ring with its entry, claimed by the kernel
                assert_eq!((act, moved), (1, vec![want.to_string()]), "{what}: XDP_DROP");
                let after = kit.counters().unwrap();
                assert_eq!((after.responses, after.hops, after.handed), (before.responses + 1, before.hops, before.handed + 1), "{what}: accepted, handed over");
                let ev = kit.take_events().unwrap();
                assert_eq!(ev.len(), 1, "{what}: one record");
                assert_eq!((ev[0].server, ev[0].port, ev[0].id, ev[0].pending.hops), (ip(&server), port, id, 1), "{what}");
                assert_eq!(ev[0].msg, dns_of(&f).to_vec(), "{what}: the response as received");
                assert!(kit.peek(ip(&server), port, id).unwrap().is_none(), "{what}: the entry claimed");
                continue;
            }
            assert_eq!((act, moved), (2, vec![want.to_string()]), "{what}: XDP_PASS");
            assert_eq!(out, f, "{what}: untouched");
            let after = kit.counters().unwrap();
            assert_eq!((after.responses, after.hops), (before.responses + 1, before.hops), "{what}: accepted, not followed");
            let p = kit.peek(ip(&server), port, id).unwrap().unwrap_or_else(|| panic!("{what}: the entry left for userspace"));
            assert_eq!(p.hops, 1, "{what}");
            assert!(kit.claim(ip(&server), port, id).unwrap().is_some());
        }
        assert!(kit.zones().unwrap().iter().all(|z| z.name != wire("test") && z.name != wire("example.com")), "nothing learnt from a referral not followed");

        // the hop limit: a chain of referrals one label deeper each, glue under the cut asked;
        // the kernel sends XDNS_KIT_HOPS (8) queries, the next referral goes to userspace
        let name = "a.b.c.d.e.f.g.h.i.j.hops.test";
        let labels: Vec<&str> = name.split('.').collect();
        let (mut port, mut id, mut sent) = ask(&prog, kd0, false, name, A);
        let mut server = ROOT4;
        for hop in 1..=8u8 {
            let cut = labels[labels.len() - hop as usize..].join(".");
            let m = referral(id, &sent, A, &cut, &[(&format!("ns.{cut}"), vec![ORG4.to_vec()])]);
            let f = from_server(false, &server, port, &m);
            let (act, out, moved) = run(&prog, &f, kd0);
            if hop == 8 {
                assert_eq!((act, moved), (2, vec!["pass_kit_hop_limit".to_string()]), "the ninth query is userspace's");
                assert_eq!(out, f, "untouched");
                let p = kit.peek(ip(&server), port, id).unwrap().expect("the entry left for userspace");
                assert_eq!((p.hops, p.zone_len), (8, wire(&labels[labels.len() - 7..].join(".")).len() as u8), "the eighth query, to the seventh cut");
                assert!(kit.claim(ip(&server), port, id).unwrap().is_some());
                break;
            }
            assert_eq!((act, moved), (3, vec!["kit_referral_followed".to_string()]), "hop {hop} followed");
            (port, id) = port_id(&out, false);
            sent = dns_of(&out)[12..12 + sent.len()].to_vec();
            server = ORG4;
            let p = kit.peek(ip(&server), port, id).unwrap().expect("the new entry");
            assert_eq!((p.hops, p.zone_len), (hop + 1, wire(&cut).len() as u8), "hop {hop}: the entry sent to {cut}");
        }
        assert_eq!(kit.pending_len(), 0);
    });
}

const TXT: u16 = 16;
const MAX_TTL: u32 = 3600;
const MAX_NEG_TTL: u32 = 900;
const CAPS: AnswerCaps = AnswerCaps { max_ttl: MAX_TTL, max_negative_ttl: Some(MAX_NEG_TTL) };

/// The reply userspace sends for the final answer `records` (owner, type, TTL, RDATA, as the
/// server sent them) to the client's query `q`: the cache body as the resolver's
/// `make_answer` compiles it (owner the question, TTLs capped to `MAX_TTL`, a TTL with the top
/// bit set 0), replayed for the client by xdns_wire::cache::replay_into at the time it was
/// stored, with the daemon's limits (`Limits::udp`, our payload).
fn userspace_reply(q: &[u8], records: &[(u16, u32, Vec<u8>)]) -> Vec<u8> {
    let query = xdns_wire::Query::parse(q).unwrap();
    let qq = query.question.as_ref().unwrap();
    let key = qq.qname().to_ascii_lowercase();
    let mut w = xdns_wire::BodyWriter::new(&key).unwrap();
    w.set_rcode(0);
    for (t, ttl, rdata) in records {
        let ttl = if ttl & 0x8000_0000 != 0 { 0 } else { *ttl };
        w.write_rr(&key, true, *t, ttl.min(MAX_TTL), rdata).unwrap();
    }
    replay(&query, w.finish())
}

/// `body` stored in the cache for `query` and replayed for it by xdns_wire::cache::replay_into
/// at the time it was stored, with the daemon's limits (`Limits::udp`, our payload).
fn replay(query: &xdns_wire::Query, body: xdns_wire::Body) -> Vec<u8> {
    let qq = query.question.as_ref().unwrap();
    let a = xdns_wire::CachedAnswer {
        qname: qq.qname().to_ascii_lowercase(),
        qtype: qq.qtype,
        dnssec_ok: query.edns.as_ref().is_some_and(|e| e.dnssec_ok),
        body,
        stored_at_ns: 1_000_000_000,
        expires_at_ns: u64::MAX,
        prefetch_at_ns: u64::MAX,
    };
    let mut out = Vec::new();
    xdns_wire::cache::replay_into(&a, query, 1_000_000_000, &xdns_wire::Limits::udp(query.edns.as_ref(), OUR_PAYLOAD), &mut out).unwrap();
    out
}

/// The reply userspace sends for a negative answer (RCODE `rcode`, NXDOMAIN or NODATA) whose
/// SOA has owner `owner` (lowercased), TTL `ttl` and RDATA `rdata` with its names
/// decompressed (as xdns_resolver::msg reads them, case kept), to the client's query `q`: the
/// cache body as the resolver's `make_answer` compiles it (the SOA in authority, owner the
/// pointer to the question when it is the question, its TTL min(TTL, MINIMUM) capped to
/// `MAX_NEG_TTL`, a TTL with the top bit set 0), replayed for the client ([`replay`]).
fn userspace_negative(q: &[u8], rcode: u8, owner: &[u8], ttl: u32, rdata: &[u8]) -> Vec<u8> {
    let query = xdns_wire::Query::parse(q).unwrap();
    let key = query.question.as_ref().unwrap().qname().to_ascii_lowercase();
    let mut w = xdns_wire::BodyWriter::new(&key).unwrap();
    w.set_rcode(rcode);
    w.set_section(xdns_wire::Section::Authority).unwrap();
    let ttl = if ttl & 0x8000_0000 != 0 { 0 } else { ttl };
    let m = &rdata[rdata.len() - 4..];
    let ttl = ttl.min(u32::from_be_bytes([m[0], m[1], m[2], m[3]])).min(MAX_NEG_TTL);
    w.write_rr(owner, owner == &key[..], SOA, ttl, rdata).unwrap();
    replay(&query, w.finish())
}

/// A response the kernel must not answer: `name`'s miss (`qtype`, the client's EDNS `copt`)
/// sent by the kernel, then `make`'s response to it (built for the ID and the question as
/// sent) from `server`: handed over (XDP_DROP, `kit_handed`), not answered, and put in the
/// ring unchanged for userspace to answer.
#[allow(clippy::too_many_arguments)]
fn handed_over(
    prog: &XdpProgram,
    kit: &KitMaps,
    ifindex: u32,
    what: &str,
    name: &str,
    qtype: u16,
    copt: Option<Opt>,
    server: &[u8],
    make: &dyn Fn(u16, &[u8]) -> Vec<u8>,
) {
    let q = query(&wire(name), qtype, copt);
    let (_, out, moved) = run(prog, &frame(&Net::v4(), &q), ifindex);
    assert_eq!(moved, vec!["kit_sent".to_string()], "{what}: sent by the kernel");
    let (port, id) = port_id(&out, false);
    let sent = dns_of(&out)[12..12 + wire(name).len()].to_vec();
    let m = make(id, &sent);
    let before = kit.counters().unwrap();
    let (act, _, moved) = run(prog, &from_server(false, server, port, &m), ifindex);
    assert_eq!((act, moved), (1, vec!["kit_handed".to_string()]), "{what}: handed over, XDP_DROP");
    let after = kit.counters().unwrap();
    assert_eq!((after.answered, after.handed), (before.answered, before.handed + 1), "{what}: not answered");
    let ev = kit.take_events().unwrap();
    assert_eq!(ev.len(), 1, "{what}: one record");
    assert!(!ev[0].answered, "{what}: for userspace to answer");
    assert_eq!(ev[0].msg, m, "{what}: the response as received");
}

/// The frame of message `m` from us (`base.dst`:53) to the client (`base.src`:`base.sport`),
/// as the kernel writes it: the query frame's MACs swapped (back the way it came; not the
/// route's: the interface's own MAC is DEV_MAC, the query was sent to SERVER_MAC), TTL 64,
/// IPv4 ID 0 and DF.
fn to_client(base: &Net, m: &[u8]) -> Vec<u8> {
    let out = Net { frag: 0x4000, ..base.reply() };
    let mut f = frame(&out, m);
    if !base.v6 {
        ipv4_id_zero(&mut f);
    }
    f
}

/// A final answer of the common shape (bpf/README.md, "Kernel iteration", the shape's rule):
/// the kernel rewrites the response into the reply userspace would send, byte for byte
/// (`userspace_reply`), sends it to the client (`kit_answered`, XDP_TX here: the client is
/// behind the interface the response came in), claims the entry and hands the response over
/// marked answered (for the cache). Every other shape, and every shape with the kernel's
/// answers off, is handed over unanswered as before (`kit_handed`).
#[test]
fn final_answers_of_the_common_shape_are_answered_by_the_kernel() {
    require_root("final_answers_of_the_common_shape_are_answered_by_the_kernel");
    stay_on_one_cpu();
    let ns = Ns::new("d");
    let kd0 = ns.ifindex("kd0");
    ns.run(|| {
        let prog = load_kit(1024, None);
        let kit = prog.kit().unwrap();
        zones(&kit);
        kit.set_answers(Some(CAPS)).unwrap();
        let a4 = |x: u8| vec![198, 18, 7, x];
        let a6 = |x: u8| [&[0x20u8, 1, 0x0d, 0xb8, 0, 7][..], &[0u8; 9], &[x]].concat();
        let txt = |s: &str| [&[s.len() as u8][..], s.as_bytes()].concat();

        // (what, client's family, name, type, client's OPT, the server's records, server OPT)
        type Row = (&'static str, bool, &'static str, u16, Option<Opt>, Vec<(u16, u32, Vec<u8>)>, bool);
        let rows: Vec<Row> = vec![
            ("ipv4, A, EDNS; TTLs: one capped, one with the top bit set", false, "www.example.net", A, Opt::new(1232, false),
             vec![(A, 86400, a4(1)), (A, 300, a4(2)), (A, 0x8000_0001, a4(3))], true),
            ("ipv6, AAAA, the client's mixed case, DO=1, no server OPT", true, "WwW.ExAmple.NET", AAAA, Opt::new(4096, true),
             vec![(AAAA, 600, a6(1))], false),
            ("ipv4, TXT, no EDNS from the client", false, "t.Example.net", TXT, None,
             vec![(TXT, 60, txt("v=spf1 -all")), (TXT, 60, [txt("two"), txt("strings")].concat())], true),
            ("ipv6, A, a small client payload (below 512: 512)", true, "small.example.net", A, Opt::new(300, false),
             vec![(A, 120, a4(9))], true),
        ];
        for (what, v6, name, qtype, copt, records, sopt) in rows {
            let net = if v6 { Net::v6() } else { Net::v4() };
            let server = if v6 { ROOT6.to_vec() } else { ROOT4.to_vec() };
            let q = query(&wire(name), qtype, copt);
            let (_, out, moved) = run(&prog, &frame(&net, &q), kd0);
            assert_eq!(moved, vec!["kit_sent".to_string()], "{what}: sent by the kernel");
            let (port, id) = port_id(&out, v6);
            let sent = dns_of(&out)[12..12 + wire(name).len()].to_vec();
            let mut m = message(id, 0x0400, &sent, qtype);
            for (t, ttl, rdata) in &records {
                add(&mut m, 1, &ptr(12), *t, *ttl, rdata);
            }
            if sopt {
                opt(&mut m);
            }
            let resp = from_server(v6, &server, port, &m);
            let before = kit.counters().unwrap();
            let (act, out, moved) = run(&prog, &resp, kd0);
            assert_eq!((act, moved), (3, vec!["kit_answered".to_string()]), "{what}: answered by the kernel, XDP_TX");
            let want = userspace_reply(&q, &records);
            assert_eq!(dns_of(&out), &want[..], "{what}: the bytes userspace sends");
            assert_eq!(out, to_client(&net, &want), "{what}: the whole frame");
            assert!(checksums_ok(&out), "{what}: checksums");
            let after = kit.counters().unwrap();
            assert_eq!((after.answered, after.handed), (before.answered + 1, before.handed + 1), "{what}: answered, handed over");
            let ev = kit.take_events().unwrap();
            assert_eq!(ev.len(), 1, "{what}: one record");
            assert!(ev[0].answered, "{what}: marked answered");
            assert_eq!((ev[0].server, ev[0].port, ev[0].id), (ip(&server), port, id), "{what}");
            assert_eq!(ev[0].msg, m, "{what}: the response as received, for the cache");
            assert_eq!(ev[0].pending.qname, wire(name), "{what}: the client's state");
            assert!(kit.peek(ip(&server), port, id).unwrap().is_none(), "{what}: the entry claimed");
        }

        // not the shape: handed over unanswered, as before
        let edns = || Opt::new(1232, false);
        type Bad = (&'static str, &'static str, u16, Option<Opt>, Box<dyn Fn(u16, &[u8]) -> Vec<u8>>);
        let rows: Vec<Bad> = vec![
            ("AA=0", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0, s, A);
                add(&mut m, 1, &ptr(12), A, 300, &[198, 18, 7, 1]);
                m
            })),
            ("a CNAME", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, A);
                add(&mut m, 1, &ptr(12), 5, 300, &wire("web.example.net"));
                add(&mut m, 1, &wire("web.example.net"), A, 300, &[198, 18, 7, 1]);
                m
            })),
            ("two RRsets (A and AAAA at the name)", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, A);
                add(&mut m, 1, &ptr(12), A, 300, &[198, 18, 7, 1]);
                add(&mut m, 1, &ptr(12), AAAA, 300, &ORG6);
                m
            })),
            ("TC=1", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0600, s, A);
                add(&mut m, 1, &ptr(12), A, 300, &[198, 18, 7, 1]);
                m
            })),
            ("a name-bearing type (MX)", "www.example.net", 15, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, 15);
                add(&mut m, 1, &ptr(12), 15, 300, &[&[0, 10][..], &ptr(12)].concat());
                m
            })),
            ("larger than the client takes (512, no EDNS): TC=1 is userspace's", "www.example.net", TXT, None, Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, TXT);
                add(&mut m, 1, &ptr(12), TXT, 300, &[&[255u8][..], &[b'x'; 255]].concat());
                add(&mut m, 1, &ptr(12), TXT, 300, &[&[255u8][..], &[b'y'; 255]].concat());
                m
            })),
            ("an authority section", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, A);
                add(&mut m, 1, &ptr(12), A, 300, &[198, 18, 7, 1]);
                add(&mut m, 2, &wire("net"), NS, 300, &wire("a.gtld.net"));
                m
            })),
            ("the owner written out, not a pointer", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, A);
                add(&mut m, 1, &wire("www.example.net"), A, 300, &[198, 18, 7, 1]);
                m
            })),
            ("an extended RCODE in the server's OPT", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, A);
                add(&mut m, 1, &ptr(12), A, 300, &[198, 18, 7, 1]);
                opt(&mut m);
                let n = m.len();
                m[n - 6] = 1;
                m
            })),
            ("an A record of 5 bytes", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, A);
                add(&mut m, 1, &ptr(12), A, 300, &[198, 18, 7, 1, 0]);
                m
            })),
            ("a byte after the message", "www.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, A);
                add(&mut m, 1, &ptr(12), A, 300, &[198, 18, 7, 1]);
                m.push(0);
                m
            })),
            ("the kernel's answers off", "off.example.net", A, edns(), Box::new(|id, s| {
                let mut m = message(id, 0x0400, s, A);
                add(&mut m, 1, &ptr(12), A, 300, &[198, 18, 7, 1]);
                m
            })),
        ];
        for (what, name, qtype, copt, make) in rows {
            if name.starts_with("off.") {
                kit.set_answers(None).unwrap();
            }
            handed_over(&prog, &kit, kd0, what, name, qtype, copt, &ROOT4, &*make);
        }
        assert_eq!(kit.pending_len(), 0, "every entry claimed once");
    });
}

/// With forwarding off (the default host): bpf_fib_lookup refuses every lookup and the
/// daemon's next-hop table holds servers only, yet the kernel's own answer reaches the client,
/// back the way the query came: out of the interface the query came in on (XDP_TX, or
/// redirected there when the response came in on another), from the MAC the query was sent
/// to, to the MAC it came from (here a router's). No lookup for the client (`hop_miss` stays).
#[test]
fn without_forwarding_kernel_answers_go_back_the_way_the_query_came() {
    require_root("without_forwarding_kernel_answers_go_back_the_way_the_query_came");
    stay_on_one_cpu();
    let ns = Ns::without_forwarding("w");
    let (kd0, kd1) = (ns.ifindex("kd0"), ns.ifindex("kd1"));
    let ours: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa1];
    let router: [u8; 6] = [0x02, 0, 0, 0, 0, 0xc1];
    ns.run(|| {
        let prog = load_kit(1024, None);
        let kit = prog.kit().unwrap();
        zones(&kit);
        kit.set_answers(Some(CAPS)).unwrap();
        for server in [ip(&ROOT4), ip(&ROOT6)] {
            kit.set_hop(server, &KitHop { ifindex: kd0, smac: DEV_MAC, dmac: ROOT_MAC, expires_ns: u64::MAX }).unwrap();
        }
        // (client's family, the query's interface, its verdict, the answer's XDP action and verdict)
        let rows = [
            (false, kd0, "kit_sent", 3, "kit_answered"),
            (true, kd0, "kit_sent", 3, "kit_answered"),
            (false, kd1, "kit_redirected", 4, "kit_answered_redirected"),
            (true, kd1, "kit_redirected", 4, "kit_answered_redirected"),
        ];
        for (v6, qin, sent_v, act_want, verdict) in rows {
            let what = format!("ipv6 {v6}, the query in on {}", if qin == kd0 { "kd0" } else { "kd1" });
            let net = Net { src_mac: router, dst_mac: ours, ..if v6 { Net::v6() } else { Net::v4() } };
            let server = if v6 { ROOT6.to_vec() } else { ROOT4.to_vec() };
            let name = "www.example.net";
            let q = query(&wire(name), A, Opt::new(1232, false));
            let (_, out, moved) = run(&prog, &frame(&net, &q), qin);
            assert_eq!(moved, vec![sent_v.to_string()], "{what}: sent by the kernel (the table's next hop)");
            let (port, id) = port_id(&out, v6);
            let sent = dns_of(&out)[12..12 + wire(name).len()].to_vec();
            let records = vec![(A, 300, vec![198, 18, 7, 1])];
            let mut m = message(id, 0x0400, &sent, A);
            add(&mut m, 1, &ptr(12), A, 300, &records[0].2);
            opt(&mut m);
            let before = kit.counters().unwrap();
            let (act, out, moved) = run(&prog, &from_server(v6, &server, port, &m), kd0);
            assert_eq!((act, moved), (act_want, vec![verdict.to_string()]), "{what}: answered by the kernel");
            let want = userspace_reply(&q, &records);
            assert_eq!(out, to_client(&net, &want), "{what}: the whole frame");
            assert_eq!((&out[0..6], &out[6..12]), (&router[..], &ours[..]), "{what}: the query's MACs, swapped");
            assert!(checksums_ok(&out), "{what}: checksums");
            let after = kit.counters().unwrap();
            assert_eq!((after.answered, after.handed, after.hop_miss), (before.answered + 1, before.handed + 1, before.hop_miss),
                       "{what}: answered, handed over for the cache, no next-hop lookup for the client");
            let ev = kit.take_events().unwrap();
            assert_eq!(ev.len(), 1, "{what}: one record");
            assert!(ev[0].answered, "{what}: marked answered");
        }
        assert_eq!(kit.pending_len(), 0, "every entry claimed once");
    });
}

const SOA: u16 = 6;

/// Where a name of an SOA record ends as a server writes it: the root label, a pointer to
/// this suffix of the question, or a pointer into MNAME after its first `n` labels.
#[derive(Clone, Copy)]
enum End {
    Root,
    Q(&'static str),
    InMname(usize),
}

/// An SOA record as a server writes it: each name as (labels written out, its end).
#[derive(Clone, Copy)]
struct Soa {
    owner: (&'static str, End),
    mname: (&'static str, End),
    rname: (&'static str, End),
    ttl: u32,
    minimum: u32,
}

/// A name written as `n` says, for a message whose question name is `sent`, with MNAME at
/// `mname` (its offset, its decompressed form): (its bytes, its decompressed form).
fn enc(sent: &[u8], n: (&str, End), mname: Option<(usize, &[u8])>) -> (Vec<u8>, Vec<u8>) {
    let mut lit = wire(n.0);
    lit.pop();
    let (p, tail) = match n.1 {
        End::Root => (vec![0], vec![0]),
        End::Q(sfx) => {
            let w = wire(sfx);
            let j = (0..sent.len()).find(|&j| sent[j..].eq_ignore_ascii_case(&w)).expect("a suffix of the question");
            (ptr(12 + j), sent[j..].to_vec())
        }
        End::InMname(k) => {
            let (at, mu) = mname.expect("MNAME written before");
            let mut off = 0;
            for _ in 0..k {
                off += 1 + mu[off] as usize;
            }
            (ptr(at + off), mu[off..].to_vec())
        }
    };
    ([&lit[..], &p].concat(), [&lit[..], &tail].concat())
}

/// Append SOA `s` to the authority section of `m` (question name `sent`): (its owner
/// lowercased, its RDATA with the names decompressed).
fn add_soa(m: &mut Vec<u8>, sent: &[u8], s: &Soa) -> (Vec<u8>, Vec<u8>) {
    let n = u16::from_be_bytes([m[8], m[9]]) + 1;
    m[8..10].copy_from_slice(&n.to_be_bytes());
    let (ob, ou) = enc(sent, s.owner, None);
    m.extend_from_slice(&ob);
    m.extend_from_slice(&SOA.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&s.ttl.to_be_bytes());
    let len_at = m.len();
    m.extend_from_slice(&[0, 0]);
    let (mb, mu) = enc(sent, s.mname, None);
    let at = m.len();
    m.extend_from_slice(&mb);
    let (rb, ru) = enc(sent, s.rname, Some((at, &mu)));
    m.extend_from_slice(&rb);
    let nums = [&2026113001u32.to_be_bytes()[..], &7200u32.to_be_bytes(), &900u32.to_be_bytes(), &1209600u32.to_be_bytes(), &s.minimum.to_be_bytes()].concat();
    m.extend_from_slice(&nums);
    let rdlen = (m.len() - len_at - 2) as u16;
    m[len_at..len_at + 2].copy_from_slice(&rdlen.to_be_bytes());
    (ou.to_ascii_lowercase(), [&mu[..], &ru, &nums].concat())
}

/// Negative final answers (NXDOMAIN, NODATA) of the shape the kernel answers (bpf/README.md,
/// "Kernel answers"): the SOA alone in authority, owned by a suffix of the question at or
/// below the zone asked, its names compressed as userspace's body writer compresses them
/// (pointers to the question, or RNAME's into MNAME).
/// The kernel rewrites the response into the reply userspace sends, byte for byte
/// (`userspace_negative`: the negative TTL, the compression, the client's question, OPT, DO,
/// RCODE), sends it (`kit_answered`), claims the entry and hands the response over marked
/// answered (for the cache). Every other shape, and negatives with their answers off, is
/// handed over unanswered as before.
#[test]
fn negative_final_answers_of_the_common_shape_are_answered_by_the_kernel() {
    require_root("negative_final_answers_of_the_common_shape_are_answered_by_the_kernel");
    stay_on_one_cpu();
    let ns = Ns::new("n");
    let kd0 = ns.ifindex("kd0");
    ns.run(|| {
        let prog = load_kit(1024, None);
        let kit = prog.kit().unwrap();
        zones(&kit);
        kit.set_answers(Some(CAPS)).unwrap();
        let edns = || Opt::new(1232, false);
        let net_soa = Soa { owner: ("", End::Q("example.net")), mname: ("ns1", End::Q("example.net")), rname: ("hostmaster", End::Q("example.net")), ttl: 3600, minimum: 300 };

        // (what, client's family, name, type, client's OPT, the server (ipv4: root or
        // example.org's), RCODE, the SOA, server OPT)
        type Row = (&'static str, bool, &'static str, u16, Option<Opt>, [u8; 4], u8, Soa, bool);
        let rows: Vec<Row> = vec![
            ("NXDOMAIN, ipv4, A, EDNS; the SOA of example.net, both names a label and a pointer; TTL above MINIMUM",
             false, "nx.example.net", A, edns(), ROOT4, 3, net_soa, true),
            ("NODATA, ipv6, AAAA, the client's mixed case, DO=1, no server OPT; owner the question; MNAME written out (another TLD); TTL below MINIMUM",
             true, "WwW.Example.NET", AAAA, Opt::new(4096, true), ROOT4, 0,
             Soa { owner: ("", End::Q("www.example.net")), mname: ("ns.Provider.ORG", End::Root), rname: ("Hostmaster", End::Q("example.net")), ttl: 120, minimum: 3600 }, false),
            ("NXDOMAIN from the root, TXT, no EDNS: owner the root, both names written out; TTL and MINIMUM over the cap",
             false, "x.nonexistent", TXT, None, ROOT4, 3,
             Soa { owner: ("", End::Root), mname: ("a.root-servers.net", End::Root), rname: ("nstld.verisign-grs.com", End::Root), ttl: 86400, minimum: 86400 }, true),
            ("NXDOMAIN, ipv6: a TTL with the top bit set (0); owner a suffix two labels up; RNAME a pointer alone",
             true, "a.b.example.net", A, edns(), ROOT4, 3,
             Soa { owner: ("", End::Q("b.example.net")), mname: ("ns1", End::Q("example.net")), rname: ("", End::Q("example.net")), ttl: 0x8000_0010, minimum: 300 }, true),
            ("NODATA from example.org's server (the cut asked, owner at it); two labels written out before each pointer",
             false, "host.example.org", A, edns(), ORG4, 0,
             Soa { owner: ("", End::Q("example.org")), mname: ("ns.dns", End::Q("example.org")), rname: ("admin.mail", End::Q("example.org")), ttl: 600, minimum: 60 }, true),
            ("NXDOMAIN, ipv4, A: MNAME written out (another TLD), RNAME a label and a pointer into MNAME (provider.org)",
             false, "nx.example.net", A, edns(), ROOT4, 3,
             Soa { mname: ("ns.provider.org", End::Root), rname: ("hostmaster", End::InMname(1)), ..net_soa }, true),
            ("NODATA, ipv6, TXT: RNAME two labels and a pointer to MNAME's TLD (a hosted zone's SOA)",
             true, "www.example.net", TXT, edns(), ROOT4, 0,
             Soa { owner: ("", End::Q("example.net")), mname: ("ns-1.awsdns-2.com", End::Root), rname: ("awsdns-hostmaster.amazon", End::InMname(2)), ttl: 900, minimum: 86400 }, true),
        ];
        for (what, v6, name, qtype, copt, server4, rcode, soa, sopt) in rows {
            let net = if v6 { Net::v6() } else { Net::v4() };
            let server = if v6 { ROOT6.to_vec() } else { server4.to_vec() };
            let q = query(&wire(name), qtype, copt);
            let (_, out, moved) = run(&prog, &frame(&net, &q), kd0);
            assert_eq!(moved, vec!["kit_sent".to_string()], "{what}: sent by the kernel");
            let (port, id) = port_id(&out, v6);
            let sent = dns_of(&out)[12..12 + wire(name).len()].to_vec();
            let mut m = message(id, 0x0400 | u16::from(rcode), &sent, qtype);
            let (owner, rdata) = add_soa(&mut m, &sent, &soa);
            if sopt {
                opt(&mut m);
            }
            let resp = from_server(v6, &server, port, &m);
            let before = kit.counters().unwrap();
            let (act, out, moved) = run(&prog, &resp, kd0);
            assert_eq!((act, moved), (3, vec!["kit_answered".to_string()]), "{what}: answered by the kernel, XDP_TX");
            let want = userspace_negative(&q, rcode, &owner, soa.ttl, &rdata);
            assert_eq!(dns_of(&out), &want[..], "{what}: the bytes userspace sends");
            assert_eq!(out, to_client(&net, &want), "{what}: the whole frame");
            assert!(checksums_ok(&out), "{what}: checksums");
            let after = kit.counters().unwrap();
            assert_eq!((after.answered, after.handed), (before.answered + 1, before.handed + 1), "{what}: answered, handed over");
            let ev = kit.take_events().unwrap();
            assert_eq!(ev.len(), 1, "{what}: one record");
            assert!(ev[0].answered, "{what}: marked answered");
            assert_eq!(ev[0].msg, m, "{what}: the response as received, for the cache");
            assert!(kit.peek(ip(&server), port, id).unwrap().is_none(), "{what}: the entry claimed");
        }

        // not the shape: handed over unanswered, as before
        let other = |rname: (&'static str, End)| Soa { mname: ("ns.provider.org", End::Root), rname, ..net_soa };
        type Bad = (&'static str, &'static str, [u8; 4], Box<dyn Fn(u16, &[u8]) -> Vec<u8>>);
        let neg = |flags: u16, soa: Soa| -> Box<dyn Fn(u16, &[u8]) -> Vec<u8>> {
            Box::new(move |id, s| {
                let mut m = message(id, flags, s, A);
                add_soa(&mut m, s, &soa);
                opt(&mut m);
                m
            })
        };
        let rows: Vec<Bad> = vec![
            ("two SOAs", "nx.example.net", ROOT4, Box::new(move |id, s| {
                let mut m = message(id, 0x0403, s, A);
                add_soa(&mut m, s, &net_soa);
                add_soa(&mut m, s, &net_soa);
                m
            })),
            ("the SOA of a name not a suffix of the question", "nx.example.net", ROOT4,
             neg(0x0403, Soa { owner: ("other", End::Q("example.net")), ..net_soa })),
            ("the SOA of a zone above the one asked (org, example.org asked)", "x.nx.example.org", ORG4,
             neg(0x0403, Soa { owner: ("", End::Q("org")), mname: ("ns1", End::Q("example.org")), rname: ("hostmaster", End::Q("example.org")), ..net_soa })),
            ("an NSEC and its RRSIG in authority (a signed negative)", "nx.example.net", ROOT4, Box::new(move |id, s| {
                let mut m = message(id, 0x0403, s, A);
                add_soa(&mut m, s, &net_soa);
                add(&mut m, 2, &ptr(12), 47, 300, &[&wire("zz.example.net")[..], &[0, 6, 0x40, 0, 0, 0, 0, 3]].concat());
                add(&mut m, 2, &ptr(12), 46, 300, &[0, 47, 8, 3, 0, 0, 1, 44, 0, 0, 0, 1, 0, 0, 0, 0, 0x12, 0x34, 7, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 3, b'n', b'e', b't', 0, 1, 2, 3]);
                m
            })),
            ("an A record in additional", "nx.example.net", ROOT4, Box::new(move |id, s| {
                let mut m = message(id, 0x0403, s, A);
                add_soa(&mut m, s, &net_soa);
                add(&mut m, 3, &wire("ns1.example.net"), A, 300, &[198, 18, 7, 1]);
                m
            })),
            ("a CNAME in answer, then NXDOMAIN", "nx.example.net", ROOT4, Box::new(move |id, s| {
                let mut m = message(id, 0x0403, s, A);
                add(&mut m, 1, &ptr(12), 5, 300, &wire("gone.example.net"));
                add_soa(&mut m, s, &net_soa);
                m
            })),
            ("MNAME written out where userspace points to the question (net)", "nx.example.net", ROOT4,
             neg(0x0403, Soa { mname: ("ns1.example.net", End::Root), ..net_soa })),
            ("MNAME compressed less than userspace does (example written out)", "nx.example.net", ROOT4,
             neg(0x0403, Soa { mname: ("ns1.example", End::Q("net")), ..net_soa })),
            ("RNAME a pointer into MNAME, compressed less than userspace does (provider written out)",
             "nx.example.net", ROOT4, neg(0x0403, other(("hostmaster.provider", End::InMname(2))))),
            ("RNAME ending where MNAME ends, the same last label written out (userspace points into MNAME)",
             "nx.example.net", ROOT4, neg(0x0403, other(("hostmaster.provider.org", End::Root)))),
            ("AA=0", "nx.example.net", ROOT4, neg(0x0003, net_soa)),
            ("SERVFAIL with an SOA", "nx.example.net", ROOT4, neg(0x0402, net_soa)),
            ("TC=1", "nx.example.net", ROOT4, neg(0x0603, net_soa)),
            ("a byte after the message", "nx.example.net", ROOT4, Box::new(move |id, s| {
                let mut m = message(id, 0x0403, s, A);
                add_soa(&mut m, s, &net_soa);
                m.push(0);
                m
            })),
            ("negative answers off", "off.example.net", ROOT4, neg(0x0403, net_soa)),
        ];
        for (what, name, server, make) in rows {
            if name.starts_with("off.") {
                kit.set_answers(Some(AnswerCaps { max_negative_ttl: None, ..CAPS })).unwrap();
            }
            handed_over(&prog, &kit, kd0, what, name, A, edns(), &server, &*make);
        }
        assert_eq!(kit.pending_len(), 0, "every entry claimed once");
    });
}
