//! Compile a body key into an [`xdns_wire::Body`]: the answer, authority and additional
//! sections, compressed against the key's base name.
//!
//! Section contents follow Knot DNS 3.2 (NSD 4.6 differs where noted):
//! - Positive answers carry no authority NS (Knot; NSD adds the apex NS and their addresses).
//! - NODATA and NXDOMAIN carry the apex SOA in authority with TTL = min(SOA TTL, SOA MINIMUM)
//!   (RFC 2308 §3).
//! - A/AAAA of in-zone targets of NS, MX, SRV, SVCB and HTTPS answers go to additional, per target in
//!   record order, A before AAAA, each target once (Knot; occluded glue included, as Knot does).
//! - Referrals: AA=0, the cut's NS in authority, A/AAAA of targets inside the zone in
//!   additional; the additional section is *required* (RFC 9471: truncate rather than drop)
//!   when a target is at or below the cut (in-domain glue).
//! - CNAME chains: each CNAME, then the end: the data (owner = last target), or the SOA for
//!   NODATA / NXDOMAIN (RCODE from the last name, RFC 6604), or the referral, or nothing (out of
//!   zone, loop). AA=1.
//! - Wildcard synthesis writes the question name (pointer `0xC00C`) as owner.
//! - A body that cannot be built (over 64 KiB) becomes SERVFAIL with no records.

use crate::lookup::{self, find, resolve, rtype, BodyKey, BodyKind, End, Found, Resolution, Want};
use crate::tree::{Rrset, Zone};
use xdns_wire::body::{BodyError, BodyWriter, Section};
use xdns_wire::response::rcode;
use xdns_wire::{name, Body};

/// Builds the body for `key`. Never panics; a key that no longer matches the zone compiles to
/// an NXDOMAIN body.
pub fn compile(zone: &Zone, key: &BodyKey) -> Body {
    match try_compile(zone, key) {
        Ok(b) => b,
        Err(_) => Body {
            flags: rcode::SERVFAIL,
            base_len: key.base.len().min(255) as u16,
            ..Body::default()
        },
    }
}

fn try_compile(zone: &Zone, key: &BodyKey) -> Result<Body, BodyError> {
    let mut w = BodyWriter::new(&key.base)?;
    let base: &[u8] = &key.base;
    match key.kind {
        BodyKind::NxDomain => nxdomain(zone, &mut w)?,
        BodyKind::Type(t) => match find(zone, base) {
            Found::Exact(node) => {
                let res = resolve(zone, node, Some(base), Want::Type(t));
                write_resolution(zone, &mut w, base, &res)?;
            }
            Found::Cut(node) if t == rtype::DS => {
                w.set_aa(true);
                match node.rrset(rtype::DS) {
                    Some(ds) => write_rrset(&mut w, base, true, ds)?,
                    None => soa_authority(zone, &mut w)?,
                }
            }
            Found::Cut(_) => referral(zone, &mut w, base)?,
            Found::BelowCut(cut) => referral(zone, &mut w, cut)?,
            _ => nxdomain(zone, &mut w)?,
        },
        BodyKind::Other => match find(zone, base) {
            Found::Exact(node) => {
                let res = resolve(zone, node, Some(base), Want::Other);
                write_resolution(zone, &mut w, base, &res)?;
            }
            Found::Cut(_) => referral(zone, &mut w, base)?,
            Found::BelowCut(cut) => referral(zone, &mut w, cut)?,
            _ => nxdomain(zone, &mut w)?,
        },
        BodyKind::Wildcard(_) | BodyKind::WildcardOther => {
            let want = match key.kind {
                BodyKind::Wildcard(t) => Want::Type(t),
                _ => Want::Other,
            };
            let mut wild = Vec::with_capacity(base.len() + 2);
            wild.extend_from_slice(b"\x01*");
            wild.extend_from_slice(base);
            match find(zone, &wild) {
                Found::Exact(node) => {
                    let res = resolve(zone, node, None, want);
                    write_resolution(zone, &mut w, base, &res)?;
                }
                _ => nxdomain(zone, &mut w)?,
            }
        }
    }
    Ok(w.finish())
}

/// Writes every record of `rrset` with owner `owner` (or the question name).
fn write_rrset(w: &mut BodyWriter, owner: &[u8], is_qname: bool, rrset: &Rrset) -> Result<(), BodyError> {
    for rd in &rrset.rdata {
        w.write_rr(owner, is_qname, rrset.rtype, rrset.ttl, rd)?;
    }
    Ok(())
}

/// The apex SOA with the negative-caching TTL of RFC 2308 §3, in authority.
fn soa_authority(zone: &Zone, w: &mut BodyWriter) -> Result<(), BodyError> {
    w.set_section(Section::Authority)?;
    let Some(soa) = zone.nodes.get(&*zone.apex).and_then(|n| n.rrset(rtype::SOA)) else {
        return Ok(());
    };
    for rd in &soa.rdata {
        let minimum = rd
            .len()
            .checked_sub(4)
            .map(|at| u32::from_be_bytes([rd[at], rd[at + 1], rd[at + 2], rd[at + 3]]))
            .unwrap_or(soa.ttl);
        w.write_rr(&zone.apex, false, rtype::SOA, soa.ttl.min(minimum), rd)?;
    }
    Ok(())
}

fn nxdomain(zone: &Zone, w: &mut BodyWriter) -> Result<(), BodyError> {
    w.set_aa(true);
    w.set_rcode(rcode::NXDOMAIN as u8);
    soa_authority(zone, w)
}

/// The target name inside RDATA of NS, MX, SRV, SVCB and HTTPS, for additional-section
/// processing (a root target, "no target" or "the owner itself" in SVCB, adds nothing).
fn target_of(rtype: u16, rdata: &[u8]) -> Option<&[u8]> {
    let at = match rtype {
        rtype::NS => 0,
        rtype::MX | rtype::SVCB | rtype::HTTPS => 2,
        rtype::SRV => 6,
        _ => return None,
    };
    let t = rdata.get(at..)?;
    // SVCB/HTTPS RDATA continues after the name (SvcParams): only the name's bytes count.
    let len = name::name_len(t).ok()?;
    (len > 1).then_some(&t[..len])
}

/// Appends A then AAAA of each in-zone target of `rrset` (each target once).
/// Returns true if an address was written for a target at or below `required_below`.
fn additional_for(
    zone: &Zone,
    w: &mut BodyWriter,
    rrset: &Rrset,
    required_below: Option<&[u8]>,
    seen: &mut Vec<Box<[u8]>>,
) -> Result<bool, BodyError> {
    let mut required = false;
    for rd in &rrset.rdata {
        let Some(target) = target_of(rrset.rtype, rd) else { continue };
        let target = match name::name_len(target) {
            Ok(len) => &target[..len],
            Err(_) => continue,
        };
        let key = name::to_key(target);
        if seen.contains(&key) || !name::is_subdomain(&key, &zone.apex) {
            continue;
        }
        seen.push(key.clone());
        let Some(node) = zone.nodes.get(&key) else { continue };
        for t in [rtype::A, rtype::AAAA] {
            if let Some(addrs) = node.rrset(t) {
                w.set_section(Section::Additional)?;
                write_rrset(w, target, false, addrs)?;
                if required_below.is_some_and(|cut| name::is_subdomain(&key, cut)) {
                    required = true;
                }
            }
        }
    }
    Ok(required)
}

/// NS of the cut in authority, addresses of its in-zone targets in additional, AA unchanged
/// (0 unless a CNAME chain led here).
fn referral(zone: &Zone, w: &mut BodyWriter, cut: &[u8]) -> Result<(), BodyError> {
    w.set_section(Section::Authority)?;
    let Some(ns) = zone.nodes.get(cut).and_then(|n| n.rrset(rtype::NS)) else {
        return Ok(());
    };
    write_rrset(w, cut, false, ns)?;
    let required = additional_for(zone, w, ns, Some(cut), &mut Vec::new())?;
    w.set_ar_required(required);
    Ok(())
}

/// Writes a CNAME chain and its end.
fn write_resolution(zone: &Zone, w: &mut BodyWriter, base: &[u8], res: &Resolution<'_>) -> Result<(), BodyError> {
    w.set_aa(true);
    for step in &res.chain {
        match &step.owner {
            None => write_rrset(w, base, true, step.cname)?,
            Some(o) => write_rrset(w, o, false, step.cname)?,
        }
    }
    match &res.end {
        End::Data(rrset) => {
            match &res.end_owner {
                None => write_rrset(w, base, true, rrset)?,
                Some(o) => write_rrset(w, o, false, rrset)?,
            }
            additional_for(zone, w, rrset, None, &mut Vec::new())?;
        }
        End::NoData => soa_authority(zone, w)?,
        End::NxDomain => nxdomain(zone, w)?,
        End::Referral(cut) => referral(zone, w, cut)?,
        End::OutOfZone | End::ChainCut => {}
    }
    Ok(())
}

/// Every key of [`lookup::enumerate`] with its compiled body.
pub fn compile_all(zone: &Zone) -> impl Iterator<Item = (BodyKey, Body)> + '_ {
    lookup::enumerate(zone).map(move |k| {
        let b = compile(zone, &k);
        (k, b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{NameKey, Node};
    use bytes::Bytes;
    use hashbrown::HashMap;

    fn n(text: &str) -> NameKey {
        name::from_presentation(text).unwrap().to_ascii_lowercase().into_boxed_slice()
    }

    fn zone() -> Zone {
        let mut nodes: HashMap<NameKey, Node> = HashMap::new();
        let mut put = |name: &str, rrsets: Vec<(u16, u32, Vec<u8>)>| {
            let mut v: Vec<Rrset> = Vec::new();
            for (t, ttl, rd) in rrsets {
                match v.iter_mut().find(|r| r.rtype == t) {
                    Some(r) => r.rdata.push(Bytes::from(rd)),
                    None => v.push(Rrset { rtype: t, ttl, rdata: vec![Bytes::from(rd)] }),
                }
            }
            v.sort_by_key(|r| r.rtype);
            nodes.insert(n(name), Node { rrsets: v });
        };
        let mut soa = [n("ns.t."), n("h.t.")].concat();
        soa.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 1, 44]);
        put("t.", vec![(6, 3600, soa), (2, 3600, n("ns.t.").into()), (15, 60, [&[0, 10][..], &n("mx.t.")].concat())]);
        put("ns.t.", vec![(1, 60, vec![198, 18, 0, 1]), (28, 60, vec![0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])]);
        put("mx.t.", vec![(1, 60, vec![198, 18, 0, 2])]);
        put("sub.t.", vec![(2, 60, n("ns.sub.t.").into()), (2, 60, n("ns.other.").into())]);
        put("ns.sub.t.", vec![(1, 60, vec![198, 18, 0, 3])]);
        Zone { apex: n("t."), nodes, file: "t.zone".into(), serial: 1 }
    }

    #[test]
    fn bodies_table() {
        let z = zone();
        // (what, base, kind, flags, an, ns, ar, ar_required)
        let cases: &[(&str, &str, BodyKind, u16, u16, u16, u16, bool)] = &[
            ("apex MX with additional", "t.", BodyKind::Type(15), 0x0400, 1, 0, 1, false),
            ("apex NS with A+AAAA", "t.", BodyKind::Type(2), 0x0400, 1, 0, 2, false),
            ("NODATA", "ns.t.", BodyKind::Other, 0x0400, 0, 1, 0, false),
            ("NXDOMAIN", "t.", BodyKind::NxDomain, 0x0403, 0, 1, 0, false),
            ("referral with glue", "sub.t.", BodyKind::Other, 0, 0, 2, 1, true),
            ("DS at cut without DS: NODATA", "sub.t.", BodyKind::Type(43), 0x0400, 0, 1, 0, false),
            ("stale wildcard key", "nope.t.", BodyKind::WildcardOther, 0x0403, 0, 1, 0, false),
        ];
        for (what, base, kind, flags, an, ns, ar, req) in cases {
            let b = compile(&z, &BodyKey { base: n(base), kind: *kind });
            assert_eq!(b.flags, *flags, "{what}");
            assert_eq!((b.ancount, b.nscount, b.arcount), (*an, *ns, *ar), "{what}");
            assert_eq!(b.ar_required, *req, "{what}");
            assert_eq!(b.base_len as usize, n(base).len(), "{what}");
        }
    }

    #[test]
    fn negative_ttl_is_min_of_soa_ttl_and_minimum() {
        let z = zone();
        let b = compile(&z, &BodyKey { base: n("t."), kind: BodyKind::NxDomain });
        // owner pointer (2) + type (2) + class (2) then TTL: SOA MINIMUM is 300 < 3600.
        assert_eq!(&b.bytes[6..10], &300u32.to_be_bytes());
    }

    #[test]
    fn oversized_body_is_servfail() {
        let mut z = zone();
        let big: Vec<Bytes> = (0..300u16).map(|i| Bytes::from([&i.to_be_bytes()[..], &[b'x'; 250]].concat())).collect();
        z.nodes.insert(n("big.t."), Node { rrsets: vec![Rrset { rtype: 16, ttl: 1, rdata: big }] });
        let b = compile(&z, &BodyKey { base: n("big.t."), kind: BodyKind::Type(16) });
        assert_eq!(b.flags, rcode::SERVFAIL);
        assert!(b.bytes.is_empty());
        assert_eq!(b.base_len, 7);
    }
}
