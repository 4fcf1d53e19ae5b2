//! The checks every input of the `reply` fuzz target must pass, shared by the cargo-fuzz
//! target (`fuzz/fuzz_targets/reply.rs`) and the corpus replay test
//! (`crates/xdns-resolver/tests/reply_fuzz_corpus.rs`, plain `cargo test`).
//!
//! An upstream reply is untrusted data: whatever arrives from the network goes through
//! `xdns_resolver::msg::parse_reply`, the acceptance check `Expect::matches_message` and then
//! `resolve::classify`. None of them may panic, and what they return must hold together.

use std::sync::atomic::AtomicU32;

use xdns_resolver::msg::{parse_reply, rtype, Expect, Reply, Rr, CLASS_IN};
use xdns_resolver::resolve::{classify, Class};
use xdns_wire::name::{is_subdomain, is_valid, name_len, suffix_offsets};

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Runs `input` through the reply parser, the acceptance check and the classifier (for the
/// reply's own question, asked of every zone above its name, and for a few other types), and
/// checks what comes out. Panics (with a reason) on any violation.
pub fn check(input: &[u8]) {
    let expect = |qname: &[u8], qtype: u16| Expect {
        server: "198.18.0.1:53".parse().unwrap(),
        id: if input.len() >= 2 { be16(input, 0) } else { 0 },
        qname: qname.to_vec(),
        qtype,
        rejected: AtomicU32::new(0),
    };
    let Some(r) = parse_reply(input) else {
        // Not a reply: the acceptance check may look at it but must not panic either.
        let _ = expect(b"\x00", rtype::A).matches_message(input);
        return;
    };
    check_reply(input, &r);
    // The acceptance check accepts the reply for its own question when that question is
    // written uncompressed, class IN; a different type is refused.
    let uncompressed = input.get(12..12 + r.qname.len()) == Some(&r.qname[..]);
    if uncompressed && r.qclass == CLASS_IN {
        assert!(expect(&r.qname, r.qtype).matches_message(input), "own question refused");
        let other = r.qtype.wrapping_add(1);
        assert!(!expect(&r.qname, other).matches_message(input), "other type accepted");
    }
    let qname = r.qname.to_ascii_lowercase();
    let zones: Vec<&[u8]> = suffix_offsets(&qname).map(|p| &qname[p..]).collect();
    for zone in zones {
        for qtype in [r.qtype, rtype::A, rtype::CNAME, rtype::ANY] {
            let class = classify(&r, &qname, qtype, zone, 8);
            check_class(&r, &qname, zone, &class);
        }
    }
}

/// What a parsed reply promises: the header as sent, one valid question, no more records than
/// counted, no OPT among them, lowercased valid owners, TTLs below 2^31, names in RDATA of the
/// types that hold one decompressed into valid names.
fn check_reply(input: &[u8], r: &Reply) {
    assert!(input.len() >= 12, "a reply shorter than a header");
    assert_eq!(r.id, be16(input, 0), "ID");
    assert_eq!(r.flags, be16(input, 2), "flags");
    assert!(r.flags & 0x8000 != 0, "QR=0 accepted");
    assert_eq!(be16(input, 4), 1, "QDCOUNT");
    assert!(is_valid(&r.qname), "question name not valid");
    assert!(r.answer.len() <= usize::from(be16(input, 6)), "more answers than counted");
    assert!(r.authority.len() <= usize::from(be16(input, 8)), "more authority than counted");
    assert!(r.additional.len() <= usize::from(be16(input, 10)), "more additional than counted");
    assert!(r.rcode() <= 0xFFF, "RCODE over 12 bits");
    for rr in r.answer.iter().chain(&r.authority).chain(&r.additional) {
        check_rr(rr);
    }
}

fn check_rr(rr: &Rr) {
    assert!(is_valid(&rr.owner), "owner not valid: {rr:?}");
    assert_eq!(rr.owner, rr.owner.to_ascii_lowercase(), "owner not lowercased");
    assert_ne!(rr.rtype, rtype::OPT, "OPT kept as a record");
    assert!(rr.ttl < 0x8000_0000, "TTL with the top bit set: {rr:?}");
    assert!(rr.rdata.len() <= 65535, "RDATA longer than any message");
    match rr.rtype {
        rtype::NS | rtype::CNAME | rtype::PTR | rtype::DNAME => {
            assert!(is_valid(&rr.rdata), "target not valid: {rr:?}");
            let t = rr.target().expect("target of a name record");
            assert_eq!(t, rr.rdata.to_ascii_lowercase());
        }
        rtype::MX => {
            assert!(rr.rdata.len() > 2 && is_valid(&rr.rdata[2..]), "MX exchange: {rr:?}");
            assert_eq!(rr.target(), None);
        }
        rtype::SOA => {
            let m = name_len(&rr.rdata).expect("SOA MNAME");
            let n = name_len(&rr.rdata[m..]).expect("SOA RNAME");
            assert_eq!(rr.rdata.len(), m + n + 20, "SOA length");
            let neg = rr.soa_negative_ttl().expect("negative TTL of an SOA");
            assert!(neg <= rr.ttl, "negative TTL above the SOA's TTL");
        }
        _ => {
            assert_eq!(rr.target(), None);
            assert_eq!(rr.soa_negative_ttl(), None);
        }
    }
}

/// What a class promises: records only from the reply and from inside the zone asked; an
/// answer has records and an RCODE of NOERROR or NXDOMAIN, goes on only without an SOA; a
/// referral leads strictly downwards towards the name, with NS records of the child and glue
/// only for their targets; NXDOMAIN and NODATA match the reply's RCODE.
fn check_class(r: &Reply, name: &[u8], zone: &[u8], class: &Class) {
    let in_zone = |rr: &Rr| is_subdomain(&rr.owner, zone);
    let from = |rr: &Rr, section: &[Rr]| section.contains(rr);
    match class {
        Class::Answer(step) => {
            assert!(step.rcode == 0 || step.rcode == 3, "answer RCODE {}", step.rcode);
            assert!(!step.answer.is_empty(), "answer without records");
            for rr in &step.answer {
                assert!(from(rr, &r.answer) && in_zone(rr), "answer record {rr:?}");
            }
            for rr in &step.authority {
                assert!(from(rr, &r.authority) && in_zone(rr), "authority record {rr:?}");
                assert_eq!(rr.rtype, rtype::SOA);
            }
            if let Some(next) = &step.next {
                assert!(is_valid(next), "next name not valid");
                assert!(step.authority.is_empty(), "goes on with an SOA");
                assert_ne!(step.rcode, 3, "goes on after NXDOMAIN");
            }
        }
        Class::NxDomain(soa) => {
            assert_eq!(r.rcode(), 3, "NXDOMAIN class for RCODE {}", r.rcode());
            if let Some(s) = soa {
                assert!(s.rtype == rtype::SOA && from(s, &r.authority) && in_zone(s));
                assert!(is_subdomain(name, &s.owner), "SOA not above the name");
            }
        }
        Class::NoData(soa) => {
            assert_eq!(r.rcode(), 0, "NODATA class for RCODE {}", r.rcode());
            assert!(soa.is_some() || r.authoritative(), "NODATA without SOA or AA");
            if let Some(s) = soa {
                assert!(s.rtype == rtype::SOA && from(s, &r.authority) && in_zone(s));
                assert!(is_subdomain(name, &s.owner), "SOA not above the name");
            }
        }
        Class::Referral { zone: child, ns, glue } => {
            assert_eq!(r.rcode(), 0, "referral with RCODE {}", r.rcode());
            assert!(child != zone && is_subdomain(child, zone), "referral not downwards");
            assert!(is_subdomain(name, child), "referral away from the name");
            assert!(!ns.is_empty(), "referral without NS");
            for rr in ns {
                assert!(rr.rtype == rtype::NS && rr.owner == *child && from(rr, &r.authority));
            }
            let targets: Vec<Vec<u8>> = ns.iter().filter_map(Rr::target).collect();
            for g in glue {
                assert!(g.rtype == rtype::A || g.rtype == rtype::AAAA, "glue type {g:?}");
                assert!(from(g, &r.additional) && in_zone(g), "glue {g:?}");
                assert!(targets.contains(&g.owner), "glue for no NS name: {g:?}");
            }
        }
        Class::Lame => {}
    }
}
