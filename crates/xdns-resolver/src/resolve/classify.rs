//! Reply classification: what one upstream reply means for the question asked, as a pure
//! function of the question (name, type), the zone of the server asked and the parsed reply
//! ([`classify`] → [`Class`]). Records are scrubbed on the way: only owners inside the zone of
//! the server asked (the bailiwick) are used; glue only for NS names of the referral; a
//! referral must lead strictly downwards, towards the name.

use xdns_wire::name::is_subdomain;

use super::{RCODE_NOERROR, RCODE_NXDOMAIN};
use crate::msg::{rtype, Reply, Rr};

/// What a step (one name of a CNAME chain) found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// RCODE of the answer (NOERROR or NXDOMAIN).
    pub rcode: u16,
    /// The answer records, in chain order: DNAME, its synthesised CNAME, ..., the data.
    pub answer: Vec<Rr>,
    /// The SOA proving a negative end of the chain (RFC 2308), when there is one.
    pub authority: Vec<Rr>,
    /// The CNAME chain leaves the zone: continue with this name.
    pub next: Option<Vec<u8>>,
}

/// What a reply means for the question. Every record in a class is from inside the zone of
/// the server asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    /// The name has data of the type asked (NOERROR, `next` empty), directly or at the end of
    /// a CNAME/DNAME chain; or a CNAME chain from the name stops without data: it ends there
    /// (the reply's RCODE and SOA) when the reply is NXDOMAIN or proves NODATA (AA, an SOA,
    /// the chain's end inside the zone), else it goes on at `next`.
    Answer(Step),
    /// NXDOMAIN for the name itself, with the SOA of a zone above it when given.
    NxDomain(Option<Rr>),
    /// NOERROR without data or referral, from an authoritative server or with an SOA above the
    /// name: the name exists without the type asked (or is an empty non-terminal).
    NoData(Option<Rr>),
    /// A delegation to `zone`, strictly below the zone asked and at or above the name (the
    /// answer section empty or AA unset): its NS records and the A/AAAA glue for their
    /// targets.
    Referral {
        /// The child zone (lowercased wire name).
        zone: Vec<u8>,
        /// NS records of the child zone.
        ns: Vec<Rr>,
        /// Addresses of the NS targets from the additional section, inside the zone asked.
        glue: Vec<Rr>,
    },
    /// Nothing usable: an RCODE other than NOERROR or NXDOMAIN, or a non-authoritative reply
    /// without data, SOA or downward referral (an upward or sideways referral, only
    /// out-of-bailiwick records).
    Lame,
}

/// Classifies a reply from a server of `zone` for `name`/`qtype` (records outside `zone` are
/// ignored: the bailiwick rule), following at most `max_cname` CNAMEs inside the reply.
/// `name` and `zone` are lowercased wire names, as the owners of a parsed [`Reply`] are.
pub fn classify(reply: &Reply, name: &[u8], qtype: u16, zone: &[u8], max_cname: usize) -> Class {
    let rcode = reply.rcode();
    if rcode != RCODE_NOERROR && rcode != RCODE_NXDOMAIN {
        return Class::Lame;
    }
    let in_bw = |owner: &[u8]| is_subdomain(owner, zone);
    let mut cur = name.to_vec();
    let mut chain: Vec<Rr> = Vec::new();
    let mut found = false;
    for _ in 0..=max_cname {
        let at: Vec<&Rr> = reply
            .answer
            .iter()
            .filter(|r| r.owner == cur && in_bw(&r.owner))
            .collect();
        let data: Vec<Rr> = at
            .iter()
            .filter(|r| r.rtype == qtype || (qtype == rtype::ANY && r.rtype != rtype::CNAME))
            .map(|r| (*r).clone())
            .collect();
        if !data.is_empty() {
            chain.extend(data);
            found = true;
            break;
        }
        if qtype == rtype::CNAME {
            break;
        }
        match at
            .iter()
            .find(|r| r.rtype == rtype::CNAME)
            .and_then(|c| c.target().map(|t| (c, t)))
        {
            Some((c, t)) if !chain.iter().any(|r| r.owner == t) => {
                // A DNAME above `cur` that synthesised this CNAME goes first (RFC 6672 §3.4).
                for d in reply.answer.iter().filter(|r| {
                    r.rtype == rtype::DNAME
                        && r.owner != cur
                        && in_bw(&r.owner)
                        && is_subdomain(&cur, &r.owner)
                }) {
                    if !chain.contains(d) {
                        chain.push(d.clone());
                    }
                }
                chain.push((*c).clone());
                cur = t;
            }
            _ => break,
        }
    }
    let soa = reply
        .authority
        .iter()
        .find(|r| r.rtype == rtype::SOA && in_bw(&r.owner) && is_subdomain(&cur, &r.owner))
        .cloned();
    if found {
        return Class::Answer(Step {
            rcode: RCODE_NOERROR,
            answer: chain,
            authority: vec![],
            next: None,
        });
    }
    if !chain.is_empty() {
        // The chain stops at `cur` without data.
        // NXDOMAIN, or NODATA proven by the same zone: the chain ends here.
        let ends =
            rcode == RCODE_NXDOMAIN || (soa.is_some() && reply.authoritative() && in_bw(&cur));
        let step = if ends {
            Step {
                rcode,
                answer: chain,
                authority: soa.into_iter().collect(),
                next: None,
            }
        } else {
            Step {
                rcode,
                answer: chain,
                authority: vec![],
                next: Some(cur),
            }
        };
        return Class::Answer(step);
    }
    if rcode == RCODE_NXDOMAIN {
        return Class::NxDomain(soa);
    }
    // A referral: NS records of a zone strictly between the server's zone and the name.
    let child = reply
        .authority
        .iter()
        .find(|r| {
            r.rtype == rtype::NS
                && r.owner != zone
                && in_bw(&r.owner)
                && is_subdomain(name, &r.owner)
        })
        .map(|r| r.owner.clone());
    if let Some(child) = child {
        if reply.answer.is_empty() || !reply.authoritative() {
            let ns: Vec<Rr> = reply
                .authority
                .iter()
                .filter(|r| r.rtype == rtype::NS && r.owner == child)
                .cloned()
                .collect();
            let names: Vec<Vec<u8>> = ns.iter().filter_map(Rr::target).collect();
            let glue: Vec<Rr> = reply
                .additional
                .iter()
                .filter(|r| {
                    (r.rtype == rtype::A || r.rtype == rtype::AAAA)
                        && in_bw(&r.owner)
                        && names.contains(&r.owner)
                })
                .cloned()
                .collect();
            return Class::Referral {
                zone: child,
                ns,
                glue,
            };
        }
    }
    if soa.is_some() || reply.authoritative() {
        return Class::NoData(soa);
    }
    Class::Lame
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record with TTL 300 (shared by the tests of the resolve modules).
    pub(crate) fn rr(owner: &str, rtype: u16, rdata: Vec<u8>) -> Rr {
        Rr {
            owner: xdns_wire::name::from_presentation(owner).unwrap(),
            rtype,
            ttl: 300,
            rdata,
        }
    }

    /// A name in wire form.
    pub(crate) fn n(s: &str) -> Vec<u8> {
        xdns_wire::name::from_presentation(s).unwrap()
    }

    /// A DNAME answer: the DNAME, then the synthesised CNAME, then the data; a DNAME from
    /// outside the server's zone is dropped with the rest of the out-of-bailiwick data.
    #[test]
    fn dname_comes_with_its_cname() {
        let reply = Reply {
            flags: 0x8400,
            answer: vec![
                rr("old.example.", rtype::DNAME, n("new.example.")),
                rr("www.old.example.", rtype::CNAME, n("www.new.example.")),
                rr("www.new.example.", rtype::A, vec![198, 18, 0, 1]),
                rr("evil.", rtype::DNAME, n("x.")),
            ],
            ..Reply::default()
        };
        let Class::Answer(step) =
            classify(&reply, &n("www.old.example."), rtype::A, &n("example."), 8)
        else {
            panic!("not an answer");
        };
        let types: Vec<u16> = step.answer.iter().map(|r| r.rtype).collect();
        assert_eq!(types, vec![rtype::DNAME, rtype::CNAME, rtype::A]);
        assert_eq!(step.next, None);
    }

    /// Referrals: downward only, glue only for the referral's NS names inside the zone asked.
    #[test]
    fn referral_table() {
        let glue = |o: &str| rr(o, rtype::A, vec![198, 18, 0, 9]);
        // (zone asked, NS owner, NS target, glue owners, referral?, glue kept)
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            &'static [&'static str],
            bool,
            usize,
        );
        let table: &[Case] = &[
            (
                "test.",
                "example.test.",
                "ns.example.test.",
                &["ns.example.test."],
                true,
                1,
            ),
            (
                "test.",
                "example.test.",
                "ns.example.net.",
                &["ns.example.net."],
                true,
                0,
            ),
            (
                "test.",
                "example.test.",
                "ns.example.test.",
                &["other.test."],
                true,
                0,
            ),
            (
                "example.test.",
                "test.",
                "ns.test.",
                &["ns.test."],
                false,
                0,
            ),
            (
                "example.test.",
                "example.test.",
                "ns.example.test.",
                &[],
                false,
                0,
            ),
            ("test.", "other.test.", "ns.other.test.", &[], false, 0),
        ];
        for (zone, owner, target, glues, is_ref, kept) in table {
            let reply = Reply {
                flags: 0x8000,
                authority: vec![rr(owner, rtype::NS, n(target))],
                additional: glues.iter().map(|g| glue(g)).collect(),
                ..Reply::default()
            };
            match classify(&reply, &n("www.example.test."), rtype::A, &n(zone), 8) {
                Class::Referral { zone: z, glue, .. } => {
                    assert!(is_ref, "{zone} {owner}");
                    assert_eq!(z, n(owner));
                    assert_eq!(glue.len(), *kept, "{zone} {owner} {glues:?}");
                }
                other => assert!(!is_ref, "{zone} {owner}: {other:?}"),
            }
        }
    }

    /// Every class and the rule that leads to it. Each row: what it shows, the question (name,
    /// type), the zone of the server asked, the reply, and the expected class.
    #[test]
    fn classification_table() {
        const AA: u16 = 0x8400; // QR AA, NOERROR
        const NOAA: u16 = 0x8000; // QR, NOERROR
        let reply = |flags: u16, answer: Vec<Rr>, authority: Vec<Rr>, additional: Vec<Rr>| Reply {
            flags,
            answer,
            authority,
            additional,
            ..Reply::default()
        };
        let a = |o: &str| rr(o, rtype::A, vec![198, 18, 0, 1]);
        let aaaa = |o: &str| rr(o, rtype::AAAA, [0x20, 1, 0x0d, 0xb8].repeat(4));
        let txt = |o: &str| rr(o, rtype::TXT, b"\x02hi".to_vec());
        let ns = |o: &str, t: &str| rr(o, rtype::NS, n(t));
        let cname = |o: &str, t: &str| rr(o, rtype::CNAME, n(t));
        let dname = |o: &str, t: &str| rr(o, rtype::DNAME, n(t));
        let soa = |o: &str| {
            let mut d = n("ns.example.test.");
            d.extend(n("host.example.test."));
            d.extend([0, 0, 0, 1, 0, 0, 14, 16, 0, 0, 7, 8, 0, 9, 58, 128, 0, 0, 1, 44]);
            rr(o, rtype::SOA, d)
        };
        let answer = |rcode: u16, answer: Vec<Rr>, authority: Vec<Rr>, next: Option<&str>| {
            Class::Answer(Step {
                rcode,
                answer,
                authority,
                next: next.map(n),
            })
        };
        let www = "www.example.test.";
        let zone = "example.test.";
        // (what, name, qtype, zone asked, reply, expected)
        let table: Vec<(&str, &str, u16, &str, Reply, Class)> = vec![
            (
                "data for the name",
                www, rtype::A, zone,
                reply(AA, vec![a(www)], vec![], vec![]),
                answer(0, vec![a(www)], vec![], None),
            ),
            (
                "data without AA is still taken",
                www, rtype::A, zone,
                reply(NOAA, vec![a(www)], vec![], vec![]),
                answer(0, vec![a(www)], vec![], None),
            ),
            (
                "ANY takes every type at the name",
                www, rtype::ANY, zone,
                reply(AA, vec![a(www), txt(www)], vec![], vec![]),
                answer(0, vec![a(www), txt(www)], vec![], None),
            ),
            (
                "qtype CNAME: the CNAME is the data",
                www, rtype::CNAME, zone,
                reply(AA, vec![cname(www, "mail.example.test."), a("mail.example.test.")], vec![], vec![]),
                answer(0, vec![cname(www, "mail.example.test.")], vec![], None),
            ),
            (
                "CNAME chain to data inside the reply",
                www, rtype::A, zone,
                reply(AA, vec![cname(www, "mail.example.test."), a("mail.example.test.")], vec![], vec![]),
                answer(0, vec![cname(www, "mail.example.test."), a("mail.example.test.")], vec![], None),
            ),
            (
                "CNAME out of the zone: go on at its target",
                www, rtype::A, zone,
                reply(AA, vec![cname(www, "www.other.test.")], vec![], vec![]),
                answer(0, vec![cname(www, "www.other.test.")], vec![], Some("www.other.test.")),
            ),
            (
                "data for a target outside the zone is not taken (bailiwick)",
                www, rtype::A, zone,
                reply(AA, vec![cname(www, "www.evil."), a("www.evil.")], vec![], vec![]),
                answer(0, vec![cname(www, "www.evil.")], vec![], Some("www.evil.")),
            ),
            (
                "CNAME then NXDOMAIN: the chain ends with the SOA",
                www, rtype::A, zone,
                reply(0x8403, vec![cname(www, "gone.example.test.")], vec![soa(zone)], vec![]),
                answer(3, vec![cname(www, "gone.example.test.")], vec![soa(zone)], None),
            ),
            (
                "CNAME then NODATA proven by the zone (AA, SOA)",
                www, rtype::A, zone,
                reply(AA, vec![cname(www, "mail.example.test.")], vec![soa(zone)], vec![]),
                answer(0, vec![cname(www, "mail.example.test.")], vec![soa(zone)], None),
            ),
            (
                "CNAME then an SOA without AA proves nothing: go on",
                www, rtype::A, zone,
                reply(NOAA, vec![cname(www, "mail.example.test.")], vec![soa(zone)], vec![]),
                answer(0, vec![cname(www, "mail.example.test.")], vec![], Some("mail.example.test.")),
            ),
            (
                "CNAME loop inside the reply stops at the repeat",
                www, rtype::A, zone,
                reply(AA, vec![cname(www, "x.example.test."), cname("x.example.test.", www)], vec![], vec![]),
                answer(0, vec![cname(www, "x.example.test.")], vec![], Some("x.example.test.")),
            ),
            (
                "DNAME before the CNAME it synthesised",
                "www.old.example.test.", rtype::A, zone,
                reply(
                    AA,
                    vec![
                        cname("www.old.example.test.", "www.new.example.test."),
                        dname("old.example.test.", "new.example.test."),
                        a("www.new.example.test."),
                    ],
                    vec![],
                    vec![],
                ),
                answer(
                    0,
                    vec![
                        dname("old.example.test.", "new.example.test."),
                        cname("www.old.example.test.", "www.new.example.test."),
                        a("www.new.example.test."),
                    ],
                    vec![],
                    None,
                ),
            ),
            (
                "NXDOMAIN with the zone's SOA",
                www, rtype::A, zone,
                reply(0x8403, vec![], vec![soa(zone)], vec![]),
                Class::NxDomain(Some(soa(zone))),
            ),
            (
                "NXDOMAIN without SOA",
                www, rtype::A, zone,
                reply(0x8003, vec![], vec![], vec![]),
                Class::NxDomain(None),
            ),
            (
                "NXDOMAIN: an SOA from outside the zone is dropped",
                www, rtype::A, zone,
                reply(0x8403, vec![], vec![soa("evil.")], vec![]),
                Class::NxDomain(None),
            ),
            (
                "NODATA: AA and the SOA",
                www, rtype::A, zone,
                reply(AA, vec![], vec![soa(zone)], vec![]),
                Class::NoData(Some(soa(zone))),
            ),
            (
                "NODATA: an SOA above the name without AA",
                www, rtype::A, zone,
                reply(NOAA, vec![], vec![soa(zone)], vec![]),
                Class::NoData(Some(soa(zone))),
            ),
            (
                "NODATA: AA alone",
                www, rtype::A, zone,
                reply(AA, vec![], vec![], vec![]),
                Class::NoData(None),
            ),
            (
                "NODATA: AA, data of another type only",
                www, rtype::AAAA, zone,
                reply(AA, vec![a(www)], vec![], vec![]),
                Class::NoData(None),
            ),
            (
                "an SOA below the name is no proof; no AA: lame",
                www, rtype::A, zone,
                reply(NOAA, vec![], vec![soa("sub.www.example.test.")], vec![]),
                Class::Lame,
            ),
            (
                "referral: NS of the child, glue only for its NS names inside the zone asked",
                www, rtype::A, "test.",
                reply(
                    NOAA,
                    vec![],
                    vec![ns(zone, "ns1.example.test."), ns(zone, "ns.other.")],
                    vec![
                        a("ns1.example.test."),
                        aaaa("ns1.example.test."),
                        a("ns.other."),
                        a("unrelated.test."),
                    ],
                ),
                Class::Referral {
                    zone: n(zone),
                    ns: vec![ns(zone, "ns1.example.test."), ns(zone, "ns.other.")],
                    glue: vec![a("ns1.example.test."), aaaa("ns1.example.test.")],
                },
            ),
            (
                "referral with AA and an empty answer is still a referral",
                www, rtype::A, zone,
                reply(AA, vec![], vec![ns(www, "ns.www.example.test.")], vec![]),
                Class::Referral {
                    zone: n(www),
                    ns: vec![ns(www, "ns.www.example.test.")],
                    glue: vec![],
                },
            ),
            (
                "AA with an answer: NS below the zone is no referral (NODATA)",
                www, rtype::A, zone,
                reply(AA, vec![a("other.example.test.")], vec![ns(www, "ns.www.example.test.")], vec![]),
                Class::NoData(None),
            ),
            (
                "upward referral: lame",
                www, rtype::A, zone,
                reply(NOAA, vec![], vec![ns("test.", "ns.test.")], vec![a("ns.test.")]),
                Class::Lame,
            ),
            (
                "referral to the zone asked itself: lame",
                www, rtype::A, zone,
                reply(NOAA, vec![], vec![ns(zone, "ns.example.test.")], vec![]),
                Class::Lame,
            ),
            (
                "sideways referral (not above the name): lame",
                www, rtype::A, "test.",
                reply(NOAA, vec![], vec![ns("other.test.", "ns.other.test.")], vec![]),
                Class::Lame,
            ),
            (
                "empty NOERROR without AA: lame",
                www, rtype::A, zone,
                reply(NOAA, vec![], vec![], vec![]),
                Class::Lame,
            ),
            (
                "SERVFAIL with data: lame",
                www, rtype::A, zone,
                reply(0x8402, vec![a(www)], vec![], vec![]),
                Class::Lame,
            ),
            (
                "REFUSED: lame",
                www, rtype::A, zone,
                reply(0x8005, vec![], vec![], vec![]),
                Class::Lame,
            ),
            (
                "extended RCODE from OPT (BADVERS): lame",
                www, rtype::A, zone,
                Reply {
                    ext_rcode: 1,
                    ..reply(AA, vec![a(www)], vec![], vec![])
                },
                Class::Lame,
            ),
        ];
        for (what, name, qtype, zone, reply, want) in table {
            let got = classify(&reply, &n(name), qtype, &n(zone), 8);
            assert_eq!(got, want, "{what}");
        }
    }
}
