//! Engine tests on the shared test zones (tests/zones/example.com.zone, example.net.zone):
//! every answer kind through `respond`, responses parsed with `domain`.
mod engine_support;
use engine_support::*;

use domain::base::iana::Rcode;
use xdns_wire::name;
use xdns_zone::{
    compile, enumerate, select, BodyKind, DropReason, Outcome, RespondConfig, Transport, ZoneSet,
};

const SOA: &str =
    "example.com 300 SOA ns1.example.com. hostmaster.example.com. 2024060101 7200 3600 1209600 300";
const SUB_NS: [&str; 2] =
    ["sub.example.com 3600 NS ns.sub.example.com.", "sub.example.com 3600 NS ns2.sub.example.com."];
const SUB_GLUE: [&str; 3] = [
    "ns.sub.example.com 3600 A 198.18.0.53",
    "ns.sub.example.com 3600 AAAA 2001:db8::53",
    "ns2.sub.example.com 3600 A 198.18.0.54",
];

struct Case {
    what: &'static str,
    qname: &'static str,
    qtype: u16,
    rcode: Rcode,
    aa: bool,
    answer: &'static [&'static str],
    authority: &'static [&'static str],
    additional: &'static [&'static str],
}

#[allow(clippy::too_many_arguments)]
const fn c(
    what: &'static str,
    qname: &'static str,
    qtype: u16,
    rcode: Rcode,
    aa: bool,
    answer: &'static [&'static str],
    authority: &'static [&'static str],
    additional: &'static [&'static str],
) -> Case {
    Case { what, qname, qtype, rcode, aa, answer, authority, additional }
}

const NOERROR: Rcode = Rcode::NOERROR;
const NXDOMAIN: Rcode = Rcode::NXDOMAIN;

/// Answers over UDP without EDNS. Expectations match Knot DNS 3.2 on the same zone (checked
/// with kdig and `engine_vs_knot.rs`).
const CASES: &[Case] = &[
    c("exact A", "www.example.com.", 1, NOERROR, true, &["www.example.com 300 A 198.18.0.10"], &[], &[]),
    c("exact AAAA, owner folded", "ns2.example.com.", 28, NOERROR, true, &["ns2.example.com 3600 AAAA 2001:db8::2"], &[], &[]),
    c("upper-case owner in file", "ns2.example.com.", 1, NOERROR, true, &["ns2.example.com 3600 A 198.18.0.2"], &[], &[]),
    c("RFC 3597 form of A", "generic-a.example.com.", 1, NOERROR, true, &["generic-a.example.com 3600 A 198.18.0.99"], &[], &[]),
    c("apex MX + in-zone target A", "example.com.", 15, NOERROR, true,
        &["example.com 86400 MX 10 Mail.example.com.", "example.com 86400 MX 20 mx2.example.net."], &[],
        &["Mail.example.com 3600 A 198.18.0.25"]),
    c("apex NS + addresses", "example.com.", 2, NOERROR, true,
        &["example.com 3600 NS ns1.example.com.", "example.com 3600 NS ns2.example.com."], &[],
        &["ns1.example.com 3600 A 198.18.0.1", "ns1.example.com 3600 AAAA 2001:db8::1", "ns2.example.com 3600 A 198.18.0.2", "ns2.example.com 3600 AAAA 2001:db8::2"]),
    c("SOA", "example.com.", 6, NOERROR, true,
        &["example.com 3600 SOA ns1.example.com. hostmaster.example.com. 2024060101 7200 3600 1209600 300"], &[], &[]),
    c("SRV + target A", "_sip._udp.example.com.", 33, NOERROR, true,
        &["_sip._udp.example.com 3600 SRV 10 5 5060 sip.example.com"], &[], &["sip.example.com 3600 A 198.18.0.30"]),
    c("SVCB + target addresses", "_dns.example.com.", 64, NOERROR, true,
        &["_dns.example.com 3600 SVCB 1 www.example.com. alpn=dot port=853"], &[],
        &["www.example.com 300 A 198.18.0.10", "www.example.com 300 AAAA 2001:db8::10"]),
    c("CNAME chain", "a.example.com.", 1, NOERROR, true,
        &["a.example.com 3600 CNAME b.example.com.", "b.example.com 3600 CNAME www.example.com.", "www.example.com 300 A 198.18.0.10"], &[], &[]),
    c("CNAME query does not follow", "a.example.com.", 5, NOERROR, true, &["a.example.com 3600 CNAME b.example.com."], &[], &[]),
    c("CNAME chain to NODATA", "a.example.com.", 15, NOERROR, true,
        &["a.example.com 3600 CNAME b.example.com.", "b.example.com 3600 CNAME www.example.com."], &[SOA], &[]),
    c("CNAME loop shown once", "loop1.example.com.", 1, NOERROR, true,
        &["loop1.example.com 3600 CNAME loop2.example.com.", "loop2.example.com 3600 CNAME loop1.example.com."], &[], &[]),
    c("CNAME out of zone", "out.example.com.", 1, NOERROR, true, &["out.example.com 3600 CNAME www.example.net."], &[], &[]),
    c("dangling CNAME: NXDOMAIN (RFC 6604)", "dangling.example.com.", 1, NXDOMAIN, true,
        &["dangling.example.com 3600 CNAME nowhere.example.com."], &[SOA], &[]),
    c("wildcard", "foo.wild.example.com.", 1, NOERROR, true, &["foo.wild.example.com 3600 A 198.18.0.40"], &[], &[]),
    c("wildcard TXT", "Foo.Wild.example.com.", 16, NOERROR, true, &["Foo.Wild.example.com 3600 TXT \"wildcard\""], &[], &[]),
    c("wildcard NODATA", "foo.wild.example.com.", 28, NOERROR, true, &[], &[SOA], &[]),
    c("wildcard node queried directly", "*.wild.example.com.", 1, NOERROR, true, &["*.wild.example.com 3600 A 198.18.0.40"], &[], &[]),
    c("wildcard parent ENT is NODATA", "wild.example.com.", 1, NOERROR, true, &[], &[SOA], &[]),
    c("wildcard CNAME", "foo.wcname.example.com.", 1, NOERROR, true,
        &["foo.wcname.example.com 3600 CNAME www.example.com.", "www.example.com 300 A 198.18.0.10"], &[], &[]),
    c("wildcard below ent", "q.ent.example.com.", 1, NOERROR, true, &["q.ent.example.com 3600 A 198.18.0.41"], &[], &[]),
    c("ENT y.ent blocks *.ent", "z.y.ent.example.com.", 1, NXDOMAIN, true, &[], &[SOA], &[]),
    c("ENT itself NODATA", "y.ent.example.com.", 1, NOERROR, true, &[], &[SOA], &[]),
    c("NODATA", "www.example.com.", 15, NOERROR, true, &[], &[SOA], &[]),
    c("NXDOMAIN", "nope.example.com.", 1, NXDOMAIN, true, &[], &[SOA], &[]),
    c("referral with glue", "sub.example.com.", 1, NOERROR, false, &[], &SUB_NS, &SUB_GLUE),
    c("referral for NS at the cut", "sub.example.com.", 2, NOERROR, false, &[], &SUB_NS, &SUB_GLUE),
    c("referral below cut (occluded name)", "ns.sub.example.com.", 1, NOERROR, false, &[], &SUB_NS, &SUB_GLUE),
    c("referral below cut (no node)", "a.b.sub.example.com.", 16, NOERROR, false, &[], &SUB_NS, &SUB_GLUE),
    c("DS below cut is referral", "a.sub.example.com.", 43, NOERROR, false, &[], &SUB_NS, &SUB_GLUE),
    c("referral without glue", "ext.example.com.", 1, NOERROR, false, &[],
        &["ext.example.com 3600 NS ns1.example.net.", "ext.example.com 3600 NS ns2.example.org."], &[]),
    c("DS at cut from parent", "sub.example.com.", 43, NOERROR, true,
        &["sub.example.com 3600 DS 12345 13 2 ddc6e2b224d0fd821669202258386936fc9ce2899e215eec6322b95f8dd96d6a"], &[], &[]),
    c("DS at cut without DS: NODATA", "ext.example.com.", 43, NOERROR, true, &[], &[SOA], &[]),
    c("ANY: lowest type (NS at apex)", "example.com.", 255, NOERROR, true,
        &["example.com 3600 NS ns1.example.com.", "example.com 3600 NS ns2.example.com."], &[],
        &["ns1.example.com 3600 A 198.18.0.1", "ns1.example.com 3600 AAAA 2001:db8::1", "ns2.example.com 3600 A 198.18.0.2", "ns2.example.com 3600 AAAA 2001:db8::2"]),
    c("ANY at CNAME: the CNAME", "a.example.com.", 255, NOERROR, true, &["a.example.com 3600 CNAME b.example.com."], &[], &[]),
    c("ANY at ENT: NODATA", "y.ent.example.com.", 255, NOERROR, true, &[], &[SOA], &[]),
    c("ANY at cut: referral", "sub.example.com.", 255, NOERROR, false, &[], &SUB_NS, &SUB_GLUE),
    c("ANY via wildcard", "x.wild.example.com.", 255, NOERROR, true, &["x.wild.example.com 3600 A 198.18.0.40"], &[], &[]),
    c("$ORIGIN change", "api.svc.example.com.", 1, NOERROR, true, &["api.svc.example.com 3600 A 198.18.0.61"], &[], &[]),
    c("$INCLUDE origin", "h1.hosts.example.com.", 28, NOERROR, true, &["h1.hosts.example.com 600 AAAA 2001:db8::71"], &[], &[]),
    c("second zone", "www.example.net.", 1, NOERROR, true, &["www.example.net 1800 A 198.18.1.10"], &[], &[]),
    c("qtype 0: NODATA (NSD; Knot says NOTIMP)", "www.example.com.", 0, NOERROR, true, &[], &[SOA], &[]),
];

#[test]
fn answer_kinds() {
    let z = zone_set();
    for case in CASES {
        let s = udp(&z, case.qname, case.qtype);
        let what = case.what;
        assert_eq!(s.rcode, case.rcode, "{what}");
        assert_eq!(s.aa, case.aa, "{what}");
        assert!(!s.tc, "{what}");
        assert_eq!(s.answer, case.answer, "{what}");
        assert_eq!(s.authority, case.authority, "{what}");
        assert_eq!(s.additional, case.additional, "{what}");
        assert_eq!(s.opt, None, "{what}: no OPT without EDNS");
    }
}

#[test]
fn same_answers_over_tcp_and_with_edns() {
    let z = zone_set();
    for case in CASES {
        let plain = udp(&z, case.qname, case.qtype);
        let e = Edns { payload: 1232, dnssec_ok: true, version: 0 };
        let q = query(9, case.qname, case.qtype, Some(e));
        let (_, r) = ask(&z, &q, Transport::Tcp);
        let s = check(&q, &r);
        assert_eq!(s.opt, Some((1232, true, case.rcode.to_int() as u16)), "{}: OPT with DO echoed", case.what);
        assert_eq!((s.answer, s.authority, s.additional), (plain.answer, plain.authority, plain.additional), "{}", case.what);
    }
}

fn raw(id: u16, flags: u16, counts: [u16; 4], rest: &[&[u8]]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    for c in counts {
        m.extend_from_slice(&c.to_be_bytes());
    }
    for r in rest {
        m.extend_from_slice(r);
    }
    m
}

const WWW: &[u8] = b"\x03www\x07example\x03com\x00";
const IN_A: &[u8] = b"\x00\x01\x00\x01";
const OPT: &[u8] = b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00";
const OPT_V1: &[u8] = b"\x00\x00\x29\x04\xd0\x00\x01\x00\x00\x00\x00";

#[test]
fn errors_and_drops() {
    let z = zone_set();
    #[allow(clippy::type_complexity)] // a fixture table: one row a case
    let cases: Vec<(&str, Vec<u8>, Transport, Option<(Rcode, u16, bool, bool)>, Option<DropReason>)> = vec![
        // (what, message, transport, Some((header rcode, full rcode, question echoed, OPT)), drop)
        ("short", vec![0; 11], Transport::Udp, None, Some(DropReason::Malformed)),
        ("QR=1", raw(1, 0x8000, [1, 0, 0, 0], &[WWW, IN_A]), Transport::Udp, None, Some(DropReason::Response)),
        ("bad question", raw(1, 0, [1, 0, 0, 0], &[b"\x03www"]), Transport::Udp, None, Some(DropReason::Malformed)),
        ("QDCOUNT=0", raw(1, 0, [0, 0, 0, 0], &[]), Transport::Udp, Some((Rcode::FORMERR, 1, false, false)), None),
        ("QDCOUNT=2", raw(1, 0, [2, 0, 0, 0], &[WWW, IN_A, WWW, IN_A]), Transport::Udp, Some((Rcode::FORMERR, 1, false, false)), None),
        ("two OPT", raw(1, 0, [1, 0, 0, 2], &[WWW, IN_A, OPT, OPT]), Transport::Udp, Some((Rcode::FORMERR, 1, true, false)), None),
        ("trailing garbage", raw(1, 0, [1, 0, 0, 0], &[WWW, IN_A, b"\x01"]), Transport::Udp, Some((Rcode::FORMERR, 1, true, false)), None),
        ("opcode NOTIFY", raw(1, 4 << 11, [1, 0, 0, 0], &[WWW, b"\x00\x06\x00\x01"]), Transport::Udp, Some((Rcode::NOTIMP, 4, true, false)), None),
        ("EDNS version 1", raw(1, 0, [1, 0, 0, 1], &[WWW, IN_A, OPT_V1]), Transport::Udp, Some((Rcode::NOERROR, 16, true, true)), None),
        ("class CH", raw(1, 0, [1, 0, 0, 0], &[WWW, b"\x00\x01\x00\x03"]), Transport::Udp, Some((Rcode::REFUSED, 5, true, false)), None),
        ("not our zone", raw(1, 0, [1, 0, 0, 0], &[b"\x03www\x07example\x03org\x00", IN_A]), Transport::Udp, Some((Rcode::REFUSED, 5, true, false)), None),
        ("root", raw(1, 0, [1, 0, 0, 0], &[b"\x00", IN_A]), Transport::Udp, Some((Rcode::REFUSED, 5, true, false)), None),
        ("AXFR over UDP", raw(1, 0, [1, 0, 0, 0], &[b"\x07example\x03com\x00", b"\x00\xfc\x00\x01"]), Transport::Udp, Some((Rcode::NOTIMP, 4, true, false)), None),
        ("AXFR over TCP", raw(1, 0, [1, 0, 0, 0], &[b"\x07example\x03com\x00", b"\x00\xfc\x00\x01"]), Transport::Tcp, Some((Rcode::REFUSED, 5, true, false)), None),
        ("IXFR", raw(1, 0, [1, 0, 0, 0], &[b"\x07example\x03com\x00", b"\x00\xfb\x00\x01"]), Transport::Tcp, Some((Rcode::REFUSED, 5, true, false)), None),
    ];
    for (what, msg, tr, want, drop) in cases {
        let (o, out) = ask(&z, &msg, tr);
        if let Some(d) = drop {
            assert_eq!(o, Outcome::Dropped(d), "{what}");
            assert!(out.is_empty(), "{what}");
            continue;
        }
        let (hdr, full, with_q, opt) = want.unwrap();
        let Outcome::Answered { rcode, truncated, .. } = o else { panic!("{what}: {o:?}") };
        assert_eq!(rcode, full, "{what}");
        assert!(!truncated, "{what}");
        let m = domain::base::Message::from_octets(out.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(m.header().id(), 1, "{what}");
        assert!(m.header().qr() && !m.header().aa(), "{what}");
        assert_eq!(m.header().rcode(), hdr, "{what}");
        assert_eq!(m.header_counts().qdcount(), with_q as u16, "{what}");
        assert_eq!(m.header_counts().ancount() + m.header_counts().nscount(), 0, "{what}");
        assert_eq!(m.opt().is_some(), opt, "{what}");
        if full == 16 {
            assert_eq!(m.opt_rcode().to_int(), 16, "{what}: BADVERS in the OPT");
            assert_eq!(m.opt().unwrap().version(), 0, "{what}");
        }
        if with_q {
            // The question is echoed byte for byte (these queries use no compression).
            let qlen = xdns_wire::name::name_len(&msg[12..]).unwrap() + 4;
            assert_eq!(out[12..12 + qlen], msg[12..12 + qlen], "{what}");
        }
    }
}

#[test]
fn class_any_answered_as_in() {
    // QCLASS ANY: the IN data with AA set and the question echoed with class ANY, as Knot does.
    let z = zone_set();
    let msg = raw(1, 0, [1, 0, 0, 1], &[WWW, b"\x00\x01\x00\xff", OPT]);
    let (o, out) = ask(&z, &msg, Transport::Udp);
    assert!(matches!(o, Outcome::Answered { rcode: 0, .. }), "{o:?}");
    let m = domain::base::Message::from_octets(out.clone()).unwrap();
    assert!(m.header().aa());
    assert_eq!(m.header_counts().ancount(), 1);
    let qlen = WWW.len() + 4;
    assert_eq!(out[12..12 + qlen], msg[12..12 + qlen]);
}

#[test]
fn mixed_case_question_echoed_and_used_for_owners() {
    let z = zone_set();
    let q = query(77, "WwW.eXaMpLe.CoM.", 1, None);
    let (_, r) = ask(&z, &q, Transport::Udp);
    assert_eq!(&r[12..29], b"\x03WwW\x07eXaMpLe\x03CoM\x00");
    let s = check(&q, &r);
    assert_eq!(s.answer, ["WwW.eXaMpLe.CoM 300 A 198.18.0.10"]);
}

#[test]
fn truncation() {
    let z = zone_set();
    // big TXT: 6 records of ~190 bytes, > 512 and < 1232.
    let q = query(5, "big.example.com.", 16, None);
    let (o, r) = ask(&z, &q, Transport::Udp);
    assert_eq!(o, Outcome::Answered { rcode: 0, qtype: 16, truncated: true });
    let s = check(&q, &r);
    assert!(s.tc && s.aa && s.answer.is_empty() && s.opt.is_none());
    assert!(r.len() <= 512);
    // With EDNS 1232 it fits.
    let q = query(5, "big.example.com.", 16, Some(Edns { payload: 1232, dnssec_ok: false, version: 0 }));
    let (o, r) = ask(&z, &q, Transport::Udp);
    assert_eq!(o, Outcome::Answered { rcode: 0, qtype: 16, truncated: false });
    let s = check(&q, &r);
    assert_eq!(s.answer.len(), 6);
    assert!(!s.tc && r.len() > 512 && r.len() <= 1232);
    // EDNS payload 512 (and below: treated as 512): truncated, OPT kept.
    for payload in [512u16, 100] {
        let q = query(5, "big.example.com.", 16, Some(Edns { payload, dnssec_ok: true, version: 0 }));
        let (_, r) = ask(&z, &q, Transport::Udp);
        let s = check(&q, &r);
        assert!(s.tc && s.answer.is_empty(), "payload {payload}");
        assert_eq!(s.opt, Some((1232, true, 0)), "payload {payload}");
    }
    // Our payload caps the client's.
    let q = query(5, "big.example.com.", 16, Some(Edns { payload: 4096, dnssec_ok: false, version: 0 }));
    let mut out = Vec::new();
    let o = xdns_zone::respond(&z, &q, Transport::Udp, &RespondConfig { edns_payload: 600 }, &mut out);
    assert_eq!(o, Outcome::Answered { rcode: 0, qtype: 16, truncated: true });
    assert_eq!(check(&q, &out).opt, Some((600, false, 0)));
    // TCP: never truncated.
    let q = query(5, "big.example.com.", 16, None);
    let (o, r) = ask(&z, &q, Transport::Tcp);
    assert_eq!(o, Outcome::Answered { rcode: 0, qtype: 16, truncated: false });
    assert_eq!(check(&q, &r).answer.len(), 6);
}

#[test]
fn additional_dropped_or_truncated_per_requirement() {
    // A zone where the referral glue and the apex-NS additional only fit without additional.
    use bytes::Bytes;
    use std::sync::Arc;
    use xdns_zone::{Node, Rrset, Zone};
    let key = |s: &str| name::from_presentation(s).unwrap().into_boxed_slice();
    let mut nodes = hashbrown::HashMap::new();
    let mut soa = [key("ns.t."), key("h.t.")].concat();
    soa.extend_from_slice(&[0; 20]);
    let long = |i: usize| format!("{}{i}.t.", "n".repeat(60));
    let mut ns_rd: Vec<Bytes> = Vec::new();
    for i in 0..6 {
        ns_rd.push(Bytes::from(key(&format!("{}.d.t.", "g".repeat(50) + &i.to_string())).to_vec()));
    }
    let mut apex_ns: Vec<Bytes> = (0..6).map(|i| Bytes::from(key(&long(i)).to_vec())).collect();
    apex_ns.truncate(6);
    nodes.insert(key("t."), Node { rrsets: vec![
        Rrset { rtype: 2, ttl: 60, rdata: apex_ns.into() },
        Rrset { rtype: 6, ttl: 60, rdata: vec![Bytes::from(soa)].into() },
    ] });
    for i in 0..6 {
        nodes.insert(key(&long(i)), Node { rrsets: vec![Rrset { rtype: 1, ttl: 60, rdata: vec![Bytes::from_static(&[198, 18, 0, 1])].into() }] });
        nodes.insert(key(&format!("{}.d.t.", "g".repeat(50) + &i.to_string())), Node { rrsets: vec![Rrset { rtype: 1, ttl: 60, rdata: vec![Bytes::from_static(&[198, 18, 0, 2])].into() }] });
    }
    nodes.insert(key("d.t."), Node { rrsets: vec![Rrset { rtype: 2, ttl: 60, rdata: ns_rd.into() }] });
    let zone = Zone::new(key("t."), nodes, "t".into(), 1);
    let mut set = ZoneSet::default();
    set.zones.insert(zone.apex.clone(), Arc::new(zone));
    // Apex NS: additional not required -> dropped, TC=0.
    let q = query(1, "t.", 2, None);
    let (o, r) = ask(&set, &q, Transport::Udp);
    let s = check(&q, &r);
    assert_eq!(o, Outcome::Answered { rcode: 0, qtype: 2, truncated: false });
    assert_eq!((s.answer.len(), s.additional.len(), s.tc), (6, 0, false));
    // Referral with in-domain glue that does not fit: TC=1.
    let q = query(1, "x.d.t.", 1, None);
    let (o, r) = ask(&set, &q, Transport::Udp);
    let s = check(&q, &r);
    assert_eq!(o, Outcome::Answered { rcode: 0, qtype: 1, truncated: true });
    assert!(s.tc && s.authority.is_empty());
    // Over TCP the glue is there.
    let (_, r) = ask(&set, &q, Transport::Tcp);
    assert_eq!(check(&q, &r).additional.len(), 6);
}

#[test]
fn fixups_with_long_question_names() {
    let z = zone_set();
    let long = format!("{}.{}.{}.", "a".repeat(63), "b".repeat(63), "c".repeat(40));
    // NXDOMAIN keyed at the apex, delta = 170.
    let q1 = format!("{long}example.com.");
    let q = query(3, &q1, 1, None);
    let (_, r) = ask(&z, &q, Transport::Udp);
    let s = check(&q, &r);
    assert_eq!(s.rcode, Rcode::NXDOMAIN);
    assert_eq!(s.authority, [SOA]);
    // Wildcard keyed at wild.example.com, with a CNAME-free synthesis and at wcname (CNAME).
    let q2 = format!("{long}wild.example.com.");
    let q = query(3, &q2, 16, None);
    let (_, r) = ask(&z, &q, Transport::Udp);
    let s = check(&q, &r);
    assert_eq!(s.answer, [format!("{} 3600 TXT \"wildcard\"", q2.trim_end_matches('.'))]);
    let q3 = format!("{long}wcname.example.com.");
    let q = query(3, &q3, 1, None);
    let (_, r) = ask(&z, &q, Transport::Udp);
    let s = check(&q, &r);
    assert_eq!(
        s.answer,
        [format!("{} 3600 CNAME www.example.com.", q3.trim_end_matches('.')), "www.example.com 300 A 198.18.0.10".into()]
    );
    // Referral keyed at the cut.
    let q4 = format!("{long}sub.example.com.");
    let q = query(3, &q4, 1, None);
    let (_, r) = ask(&z, &q, Transport::Udp);
    let s = check(&q, &r);
    assert_eq!(s.authority, SUB_NS);
    assert_eq!(s.additional, SUB_GLUE);
}

/// The XDP engineer precompiles exactly `enumerate`; `select` must never need anything else,
/// and a qtype without its own `Type(t)` key at an existing node selects that node's `Other`.
#[test]
fn enumerate_covers_every_selection() {
    let z = zone_set();
    let zone = z.zones.values().find(|z| &*z.apex == b"\x07example\x03com\x00").unwrap();
    let keys: std::collections::HashSet<_> = enumerate(zone).collect();
    let mut names: Vec<Vec<u8>> = zone.nodes.keys().map(|k| k.to_vec()).collect();
    for extra in ["x.wild.example.com.", "a.b.wild.example.com.", "x.wcname.example.com.", "q.ent.example.com.", "z.y.ent.example.com.", "a.sub.example.com.", "x.ext.example.com.", "nope.example.com."] {
        names.push(name::from_presentation(extra).unwrap());
    }
    let qtypes: Vec<u16> = (0..=260).chain([32769, 65400, 65535]).collect();
    for n in &names {
        for &t in &qtypes {
            let k = select(zone, n, t, Transport::Udp);
            assert!(keys.contains(&k), "{} {t}: {k:?} not enumerated", name::to_presentation(n));
            let own = xdns_zone::BodyKey { base: n.clone().into_boxed_slice(), kind: BodyKind::Type(t) };
            if zone.nodes.contains_key(n.as_slice()) && !keys.contains(&own) {
                assert!(
                    *k.base != **n || k.kind == BodyKind::Other,
                    "{} {t}: no Type key but {k:?}",
                    name::to_presentation(n)
                );
            }
        }
    }
    // Every enumerated body replays into a well-formed message at its own base name.
    for k in &keys {
        let body = compile(zone, k);
        assert_eq!(body.base_len as usize, k.base.len());
        let qtype = match k.kind {
            BodyKind::Type(t) | BodyKind::Wildcard(t) => t,
            _ => 1,
        };
        let mut qname = k.base.to_vec();
        if matches!(k.kind, BodyKind::Wildcard(_) | BodyKind::WildcardOther | BodyKind::NxDomain) {
            qname = [b"\x07unknown".as_slice(), &qname].concat();
        }
        let q = xdns_wire::Query::parse(&raw(1, 0, [1, 0, 0, 0], &[&qname, &qtype.to_be_bytes(), b"\x00\x01"])).unwrap();
        let mut out = Vec::new();
        let a = xdns_wire::assemble(&q, &body, &xdns_wire::Limits::tcp(1232), &mut out).unwrap();
        assert!(!a.truncated);
        let m = domain::base::Message::from_octets(out).unwrap();
        for rr in m.answer().unwrap().chain(m.authority().unwrap()).chain(m.additional().unwrap()) {
            rr.unwrap().into_record::<domain::rdata::AllRecordData<_, domain::base::ParsedName<_>>>().unwrap().unwrap();
        }
    }
    assert!(keys.len() > 50, "{} keys", keys.len());
}
