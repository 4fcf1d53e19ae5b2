//! Ad-hoc comparison with a running Knot DNS serving tests/zones (ignored by default; the
//! formal differential suite lives elsewhere). Run with
//! `XDNS_KNOT=127.0.0.53:53531 cargo test -p xdns-zone --test engine_vs_knot -- --ignored`.
mod engine_support;
use engine_support::*;
use std::net::UdpSocket;
use std::time::Duration;
use xdns_zone::Transport;

/// Queries where xdns deliberately follows Knot; (name, qtype, edns).
const CASES: &[(&str, u16, bool)] = &[
    ("www.example.com.", 1, false),
    ("WwW.ExAmPlE.cOm.", 28, true),
    ("www.example.com.", 65, false),
    ("www.example.com.", 15, false),
    ("example.com.", 6, false),
    ("example.com.", 2, false),
    ("example.com.", 15, true),
    ("example.com.", 16, false),
    ("example.com.", 257, false),
    ("example.com.", 48, false),
    ("example.com.", 255, false),
    ("example.com.", 43, false),
    ("mixed.case.example.com.", 1, false),
    ("case.example.com.", 1, false),
    ("txt.example.com.", 16, true),
    ("big.example.com.", 16, false),
    ("big.example.com.", 16, true),
    ("_sip._udp.example.com.", 33, false),
    ("sip.example.com.", 35, false),
    ("sip.example.com.", 255, false),
    ("ptr.example.com.", 12, false),
    ("host.example.com.", 13, false),
    ("host.example.com.", 44, false),
    ("host.example.com.", 255, false),
    ("_443._tcp.www.example.com.", 52, false),
    ("_tcp.www.example.com.", 52, false),
    ("_dns.example.com.", 64, false),
    ("generic.example.com.", 65400, false),
    ("generic-a.example.com.", 1, false),
    ("a.example.com.", 1, false),
    ("a.example.com.", 5, false),
    ("a.example.com.", 15, false),
    ("a.example.com.", 255, false),
    ("b.example.com.", 28, false),
    ("loop1.example.com.", 1, false),
    ("loop2.example.com.", 5, false),
    ("out.example.com.", 1, false),
    ("dangling.example.com.", 1, false),
    ("foo.wild.example.com.", 1, false),
    ("foo.wild.example.com.", 16, false),
    ("foo.wild.example.com.", 28, false),
    ("a.b.c.wild.example.com.", 255, false),
    ("*.wild.example.com.", 1, false),
    ("wild.example.com.", 1, false),
    ("foo.wcname.example.com.", 1, false),
    ("foo.wcname.example.com.", 5, false),
    ("foo.wcname.example.com.", 15, false),
    ("q.ent.example.com.", 1, false),
    ("y.ent.example.com.", 1, false),
    ("z.y.ent.example.com.", 1, false),
    ("x.y.ent.example.com.", 1, false),
    ("sub.example.com.", 1, false),
    ("sub.example.com.", 2, false),
    ("sub.example.com.", 43, false),
    ("sub.example.com.", 255, false),
    ("ns.sub.example.com.", 1, false),
    ("a.b.sub.example.com.", 43, false),
    ("ext.example.com.", 1, false),
    ("ext.example.com.", 43, false),
    ("deep.below.ext.example.com.", 28, true),
    ("svc.example.com.", 1, false),
    ("api.svc.example.com.", 1, false),
    ("hosts.example.com.", 1, false),
    ("h1.hosts.example.com.", 28, false),
    ("h2.hosts.example.com.", 28, false),
    ("last.example.com.", 1, false),
    ("nope.example.com.", 1, false),
    ("a.very.long.name.that.does.not.exist.anywhere.example.com.", 1, true),
    ("example.net.", 2, false),
    ("www.example.net.", 255, false),
    ("nope.example.net.", 1, false),
];

#[test]
#[ignore]
fn same_as_knot() {
    let Ok(addr) = std::env::var("XDNS_KNOT") else { return };
    let zones = zone_set();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut failures = Vec::new();
    for (i, (name, t, edns)) in CASES.iter().enumerate() {
        let e = edns.then_some(Edns { payload: 1232, dnssec_ok: false, version: 0 });
        let q = query(i as u16, name, *t, e);
        let (_, ours) = ask(&zones, &q, Transport::Udp);
        sock.send_to(&q, &addr).unwrap();
        let mut buf = [0u8; 65535];
        let n = sock.recv(&mut buf).unwrap();
        let theirs = &buf[..n];
        let (mut a, mut b) = (check(&q, &ours), check(&q, theirs));
        if a.len != b.len {
            println!("{name} {t}: length xdns {} knot {} (compression differs)", a.len, b.len);
        }
        (a.len, b.len) = (0, 0);
        // Cosmetic differences xdns keeps on purpose: RRsets in zone-file order (Knot sorts
        // them canonically) and RDATA names in zone-file case (Knot lowercases them).
        for s in [&mut a, &mut b] {
            for sec in [&mut s.answer, &mut s.authority, &mut s.additional] {
                for r in sec.iter_mut() {
                    *r = r.to_ascii_lowercase();
                }
                sec.sort();
            }
        }
        if a != b {
            failures.push(format!("{name} {t}:\n  xdns {a:?}\n  knot {b:?}"));
        }
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}
