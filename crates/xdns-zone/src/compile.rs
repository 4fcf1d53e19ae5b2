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
//!
//! DNSSEC ([`compile_dnssec`], a query with the DO bit to a signed zone, RFC 4035 §3.1, RFC
//! 5155 §7.2; record order as Knot DNS 3.2 writes it):
//! - every RRset written is followed by its RRSIGs (same owner, same section, the TTL of the
//!   RRset as written: the negative SOA's RRSIG gets the SOA's negative TTL);
//! - NODATA: the NSEC of the name (an empty non-terminal: the NSEC covering it), or the NSEC3
//!   matching it (none, at an opt-out delegation: the closest provable encloser proof);
//! - NXDOMAIN: the NSEC covering the name and the one covering `*.CE`; with NSEC3 the closest
//!   encloser proof (NSEC3 matching CE, covering the next closer name) and the NSEC3 covering
//!   `*.CE`;
//! - wildcard answers: the NSEC (NSEC3) covering the question name (the next closer name);
//!   wildcard NODATA adds the wildcard's own NSEC (the NSEC3 matching it);
//! - referrals: DS and its RRSIG, or the proof that there is none (NSEC at the cut; NSEC3
//!   matching it, or for an opt-out chain the closest provable encloser proof);
//! - DNSKEY, CDS, CDNSKEY and NSEC3PARAM are ordinary apex data, signed like any RRset.
//!   Glue (below a cut) has no RRSIG and gets none.
//! - a query of type RRSIG (with or without DO) gets the signatures of one RRset, the lowest
//!   type signed at the name, with that RRset's TTL, as Knot answers.
//!
//! Knot writes the RRSIGs of a section after all of its RRsets and, when a UDP answer does
//! not fit, sends what fits with TC=1; xdns writes each RRSIG after its RRset and truncates
//! as for any body (DESIGN-NOTES: no records, TC=1, unless only the additional section has to
//! go). Both make the client retry over TCP, where the answers are the same sets.

use crate::dnssec::{next_closer, sigs_covering};
use crate::lookup::{self, find, resolve, rtype, BodyKey, BodyKind, End, Found, Resolution, Want};
use crate::tree::{NameKey, Node, Rrset, Zone};
use xdns_wire::body::{BodyError, BodyWriter, Section};
use xdns_wire::response::rcode;
use xdns_wire::{name, Body};

/// Builds the body for `key` (without DNSSEC records). Never panics; a key that no longer
/// matches the zone compiles to an NXDOMAIN body.
pub fn compile(zone: &Zone, key: &BodyKey) -> Body {
    let mut b = build(zone, key, &mut Sec { qname: None, dnssec: false, written: Vec::new() });
    b.dnssec = is_signed(zone);
    b
}

/// [`compile`] for the question `qname` (lowercased wire): the same body for every kind but
/// [`BodyKind::Dname`], whose synthesised CNAME depends on the question.
pub fn compile_for(zone: &Zone, key: &BodyKey, qname: &[u8]) -> Body {
    let mut b = build(zone, key, &mut Sec { qname: Some(qname), dnssec: false, written: Vec::new() });
    b.dnssec = is_signed(zone);
    b
}

/// Builds the body for `key` answering `qname` (lowercased wire, the question the key was
/// selected for) with the DO bit: RRSIGs and denial proofs (module docs). For an unsigned zone
/// this is [`compile`]'s body. For the `Type` and `Other` kinds the body depends on the base
/// only (pass the base as `qname`: the kernel's DO bodies are compiled so); for `NxDomain` and
/// the wildcard kinds the proofs depend on the question name (userspace only).
pub fn compile_dnssec(zone: &Zone, key: &BodyKey, qname: &[u8]) -> Body {
    if !is_signed(zone) {
        return compile_for(zone, key, qname);
    }
    let mut b = build(zone, key, &mut Sec { qname: Some(qname), dnssec: true, written: Vec::new() });
    b.dnssec = true;
    b
}

/// Is `zone` signed (an RRSIG covering the SOA at the apex)? Cheap: no denial index is built.
pub fn is_signed(zone: &Zone) -> bool {
    zone.nodes
        .get(&*zone.apex)
        .and_then(|n| n.rrset(rtype::RRSIG))
        .is_some_and(|s| sigs_covering(Some(s), rtype::SOA).next().is_some())
}

fn build(zone: &Zone, key: &BodyKey, sec: &mut Sec<'_>) -> Body {
    match try_compile(zone, key, sec) {
        Ok(b) => b,
        Err(_) => Body {
            flags: rcode::SERVFAIL,
            base_len: key.base.len().min(255) as u16,
            ..Body::default()
        },
    }
}

/// DNSSEC state of one compilation.
struct Sec<'q> {
    /// The question (lowercased), when the body is compiled for one.
    qname: Option<&'q [u8]>,
    /// DNSSEC records are written (the DO bit, a signed zone).
    dnssec: bool,
    /// Owners (lowercased) and types of the denial records already written (each once).
    written: Vec<(Box<[u8]>, u16)>,
}

impl Sec<'_> {
    fn on(&self) -> bool {
        self.dnssec
    }
}

fn try_compile(zone: &Zone, key: &BodyKey, sec: &mut Sec<'_>) -> Result<Body, BodyError> {
    if sec.on() {
        if let Some((apex, own)) = nodata_split(zone, key)? {
            return Ok(join(&apex, &own));
        }
    }
    let mut w = BodyWriter::new(&key.base)?;
    let base: &[u8] = &key.base;
    // The name the question is about: the real question when known, else the base.
    let qname: Vec<u8> = sec.qname.map(<[u8]>::to_vec).unwrap_or_else(|| base.to_vec());
    match key.kind {
        BodyKind::NxDomain => nxdomain(zone, &mut w, sec, &qname)?,
        BodyKind::Type(t) => match find(zone, base) {
            Found::Exact(node) => {
                let res = resolve(zone, node, Some(base), Want::Type(t));
                write_resolution(zone, &mut w, sec, (base, true), node, &res)?;
            }
            Found::Cut(node) if t == rtype::DS => {
                w.set_aa(true);
                match node.rrset(rtype::DS) {
                    Some(ds) => write_rrset(&mut w, sec, base, true, ds, Some(node))?,
                    None => {
                        soa_authority(zone, &mut w, sec)?;
                        nodata_proof(zone, &mut w, sec, base)?;
                    }
                }
            }
            Found::Cut(_) => referral(zone, &mut w, sec, base)?,
            Found::BelowCut(cut) => referral(zone, &mut w, sec, cut)?,
            _ => nxdomain(zone, &mut w, sec, &qname)?,
        },
        BodyKind::Other => match find(zone, base) {
            Found::Exact(node) => {
                let res = resolve(zone, node, Some(base), Want::Other);
                write_resolution(zone, &mut w, sec, (base, true), node, &res)?;
            }
            Found::Cut(_) => referral(zone, &mut w, sec, base)?,
            Found::BelowCut(cut) => referral(zone, &mut w, sec, cut)?,
            _ => nxdomain(zone, &mut w, sec, &qname)?,
        },
        BodyKind::Dname(t) => dname(zone, &mut w, sec, base, &qname, t)?,
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
                    let nodata = res.chain.is_empty() && matches!(res.end, End::NoData);
                    write_resolution_wild(zone, &mut w, sec, (base, true), node, &res)?;
                    if sec.on() {
                        wildcard_proof(zone, &mut w, sec, &qname, base, nodata.then_some(&wild[..]))?;
                    }
                }
                _ => nxdomain(zone, &mut w, sec, &qname)?,
            }
        }
    }
    Ok(w.finish())
}

/// Is `key`'s DO=1 body a NODATA whose first record is the apex SOA: an existing name
/// without the type (no CNAME in front), or DS asked at a delegation without DS?
fn starts_with_soa(zone: &Zone, key: &BodyKey) -> bool {
    let want = match key.kind {
        BodyKind::Type(t) => Want::Type(t),
        BodyKind::Other => Want::Other,
        _ => return false,
    };
    match find(zone, &key.base) {
        Found::Exact(node) => {
            let res = resolve(zone, node, Some(&key.base), want);
            res.chain.is_empty() && matches!(res.end, End::NoData)
        }
        Found::Cut(node) => key.kind == BodyKind::Type(rtype::DS) && node.rrset(rtype::DS).is_none(),
        _ => false,
    }
}

/// A signed zone's DO=1 NODATA (`starts_with_soa`) in its two parts: [`apex_part`] (or
/// [`apex_proof_part`] when the proof begins with the apex's NSEC3), and the name's own proof
/// (its NSEC, the NSEC covering an empty non-terminal, the NSEC3 matching it or the closest
/// provable encloser proof, each with its RRSIGs; the apex's NSEC3 left to the first part)
/// compiled against `key`'s base with pointers into the question only
/// ([`BodyWriter::new_part`]), marked `after_apex` (and `apex_nsec3`). `None` for every other
/// key. The answer is the apex part rebased, then the own part ([`join`]): the kernel writes
/// them so (bpf/README.md "Signed zones"), userspace joins them, the same bytes.
fn nodata_split(zone: &Zone, key: &BodyKey) -> Result<Option<(Body, Body)>, BodyError> {
    match own_part(zone, key)? {
        Some(own) if own.apex_nsec3 => match apex_proof_part(zone)? {
            Some(apex) => Ok(Some((apex, own))),
            None => Ok(None),
        },
        Some(own) => Ok(Some((apex_part(zone)?, own))),
        None => Ok(None),
    }
}

/// The owner of the apex's NSEC3 when the NSEC3 proof that `at` (not the apex) has no such
/// type ([`nodata_proof`]) begins with it: `at` has no NSEC3 of its own and the apex is its
/// closest provable encloser (an opt-out delegation directly below the apex, an empty
/// non-terminal there). The same record, with its RRSIGs, begins every such proof of the zone:
/// it goes with the SOA into the apex's part ([`apex_proof_part`]), stored once.
fn apex_nsec3_first(zone: &Zone, at: &[u8]) -> Option<Box<[u8]>> {
    let d = zone.dnssec();
    d.nsec3.as_ref()?;
    if at == &zone.apex[..] || d.nsec3_matching(at).is_some() {
        return None;
    }
    let apex = d.nsec3_matching(&zone.apex)?;
    let first = name::suffix_offsets(at)
        .skip(1)
        .map(|o| &at[o..])
        .take_while(|anc| name::is_subdomain(anc, &zone.apex))
        .find_map(|anc| d.nsec3_matching(anc))?;
    (first == apex).then(|| apex.clone())
}

/// The second part of [`nodata_split`] (`None` when `key`'s body is not split).
fn own_part(zone: &Zone, key: &BodyKey) -> Result<Option<Body>, BodyError> {
    if !starts_with_soa(zone, key) {
        return Ok(None);
    }
    let mut w = BodyWriter::new_part(&key.base)?;
    w.set_aa(true);
    let mut sec = Sec { qname: Some(&key.base), dnssec: true, written: Vec::new() };
    // the apex's NSEC3 first: the apex's part holds it (counted as written, left out here)
    let apex_nsec3 = apex_nsec3_first(zone, &key.base);
    if let Some(o) = &apex_nsec3 {
        sec.written.push((o.clone(), rtype::NSEC3));
    }
    nodata_proof(zone, &mut w, &mut sec, &key.base)?;
    let mut own = w.finish();
    own.after_apex = true;
    own.apex_nsec3 = apex_nsec3.is_some();
    Ok(Some(own))
}

/// The name's own part of `key`'s DO=1 NODATA in a signed zone ([`nodata_split`]; `None` for
/// an unsigned zone, a key whose DO=1 body is not such a NODATA, or one that cannot be
/// built): what the kernel stores for the key, writing [`apex_part`] before it.
pub fn nodata_own_part(zone: &Zone, key: &BodyKey) -> Option<Body> {
    if !is_signed(zone) {
        return None;
    }
    own_part(zone, key).ok().flatten()
}

/// The first part of a signed zone's DO=1 NODATA: the apex SOA with the negative TTL and its
/// RRSIGs, in authority, AA=1, compiled against the apex (its pointers shift by the question's
/// extra length, as an NXDOMAIN body's).
pub fn apex_part(zone: &Zone) -> Result<Body, BodyError> {
    let mut w = BodyWriter::new(&zone.apex)?;
    w.set_aa(true);
    soa_authority(zone, &mut w, &Sec { qname: None, dnssec: true, written: Vec::new() })?;
    Ok(w.finish())
}

/// The first part of a signed zone's DO=1 NODATA whose proof begins with the apex's NSEC3
/// (`Body::apex_nsec3`): [`apex_part`], then that NSEC3 and its RRSIGs, compiled against the
/// apex. `None` when the zone has no NSEC3 at the apex.
pub fn apex_proof_part(zone: &Zone) -> Result<Option<Body>, BodyError> {
    let d = zone.dnssec();
    let Some(owner) = d.nsec3.as_ref().and_then(|_| d.nsec3_matching(&zone.apex)).cloned() else {
        return Ok(None);
    };
    let mut w = BodyWriter::new(&zone.apex)?;
    w.set_aa(true);
    let mut sec = Sec { qname: None, dnssec: true, written: Vec::new() };
    soa_authority(zone, &mut w, &sec)?;
    denial_at(zone, &mut w, &mut sec, &owner, rtype::NSEC3)?;
    Ok(Some(w.finish()))
}

/// The answer of the two parts of [`nodata_split`]: `apex` rebased to `own`'s base (every
/// pointer it lists shifted by the difference in length), then `own`'s bytes, its pointers
/// listed after `apex`'s.
pub fn join(apex: &Body, own: &Body) -> Body {
    let delta = own.base_len.wrapping_sub(apex.base_len);
    let mut bytes = apex.bytes.clone();
    for &f in &apex.fixups {
        if let Some(p) = bytes.get_mut(usize::from(f)..usize::from(f) + 2) {
            let v = u16::from_be_bytes([p[0], p[1]]).wrapping_add(delta);
            p.copy_from_slice(&v.to_be_bytes());
        }
    }
    let at = bytes.len() as u16;
    bytes.extend_from_slice(&own.bytes);
    let mut fixups = apex.fixups.clone();
    fixups.extend(own.fixups.iter().map(|f| f + at));
    Body {
        flags: own.flags | apex.flags,
        ancount: 0,
        nscount: apex.nscount + own.nscount,
        arcount: 0,
        an_ns_len: bytes.len() as u16,
        bytes,
        fixups,
        ar_required: false,
        base_len: own.base_len,
        dnssec: false,
        after_apex: false,
        apex_nsec3: false,
    }
}

/// Writes every record of `rrset` with owner `owner` (or the question name), then, with
/// DNSSEC, the RRSIGs of `node` covering it.
fn write_rrset(
    w: &mut BodyWriter,
    sec: &Sec<'_>,
    owner: &[u8],
    is_qname: bool,
    rrset: &Rrset,
    node: Option<&Node>,
) -> Result<(), BodyError> {
    write_rrset_ttl(w, sec, owner, is_qname, rrset, rrset.ttl, node)
}

fn write_rrset_ttl(
    w: &mut BodyWriter,
    sec: &Sec<'_>,
    owner: &[u8],
    is_qname: bool,
    rrset: &Rrset,
    ttl: u32,
    node: Option<&Node>,
) -> Result<(), BodyError> {
    for rd in &rrset.rdata {
        w.write_rr(owner, is_qname, rrset.rtype, ttl, rd)?;
    }
    if sec.on() && rrset.rtype != rtype::RRSIG {
        if let Some(node) = node {
            for sig in sigs_covering(node.rrset(rtype::RRSIG), rrset.rtype) {
                w.write_rr(owner, is_qname, rtype::RRSIG, ttl, sig)?;
            }
        }
    }
    Ok(())
}

/// The negative-caching TTL of RFC 2308 §3: min(SOA TTL, SOA MINIMUM).
fn negative_ttl(soa: &Rrset) -> u32 {
    let minimum = soa
        .rdata
        .first()
        .and_then(|rd| rd.len().checked_sub(4).map(|at| u32::from_be_bytes([rd[at], rd[at + 1], rd[at + 2], rd[at + 3]])))
        .unwrap_or(soa.ttl);
    soa.ttl.min(minimum)
}

/// The apex SOA with the negative-caching TTL of RFC 2308 §3, in authority.
fn soa_authority(zone: &Zone, w: &mut BodyWriter, sec: &Sec<'_>) -> Result<(), BodyError> {
    w.set_section(Section::Authority)?;
    let apex = zone.nodes.get(&*zone.apex);
    let Some(soa) = apex.and_then(|n| n.rrset(rtype::SOA)) else {
        return Ok(());
    };
    write_rrset_ttl(w, sec, &zone.apex, false, soa, negative_ttl(soa), apex)
}

fn nxdomain(zone: &Zone, w: &mut BodyWriter, sec: &mut Sec<'_>, qname: &[u8]) -> Result<(), BodyError> {
    w.set_aa(true);
    w.set_rcode(rcode::NXDOMAIN as u8);
    soa_authority(zone, w, sec)?;
    if sec.on() {
        nxdomain_proof(zone, w, sec, qname)?;
    }
    Ok(())
}

/// Writes the denial record of `rtype` (NSEC or NSEC3) at `owner` and its RRSIGs, in
/// authority, unless already written.
fn denial_at(zone: &Zone, w: &mut BodyWriter, sec: &mut Sec<'_>, owner: &[u8], rt: u16) -> Result<(), BodyError> {
    if sec.written.iter().any(|(o, t)| **o == *owner && *t == rt) {
        return Ok(());
    }
    let Some(node) = zone.nodes.get(owner) else { return Ok(()) };
    let Some(set) = node.rrset(rt) else { return Ok(()) };
    sec.written.push((owner.into(), rt));
    w.set_section(Section::Authority)?;
    write_rrset(w, sec, owner, false, set, Some(node))
}

/// The closest existing ancestor of `qname` (lowercased), the apex at worst.
fn closest_encloser(zone: &Zone, qname: &[u8]) -> Vec<u8> {
    for o in name::suffix_offsets(qname) {
        let s = &qname[o..];
        if zone.node(s).is_some() || s == &zone.apex[..] {
            return s.to_vec();
        }
    }
    zone.apex.to_vec()
}

/// `*.` + `ce`.
fn wildcard_of(ce: &[u8]) -> Vec<u8> {
    [&b"\x01*"[..], ce].concat()
}

/// Proof that `qname` does not exist and no wildcard applies (RFC 4035 §3.1.3.2, RFC 5155
/// §7.2.2).
fn nxdomain_proof(zone: &Zone, w: &mut BodyWriter, sec: &mut Sec<'_>, qname: &[u8]) -> Result<(), BodyError> {
    let d = zone.dnssec();
    let ce = closest_encloser(zone, qname);
    let wild = wildcard_of(&ce);
    if d.nsec3.is_some() {
        let m = d.nsec3_matching(&ce).cloned();
        let nc = next_closer(qname, &ce).and_then(|nc| d.nsec3_covering(nc)).cloned();
        let wc = d.nsec3_covering(&wild).cloned();
        for o in [m, nc, wc].into_iter().flatten() {
            denial_at(zone, w, sec, &o, rtype::NSEC3)?;
        }
    } else {
        let q = d.nsec_covering(qname).cloned();
        let wc = d.nsec_covering(&wild).cloned();
        for o in [q, wc].into_iter().flatten() {
            denial_at(zone, w, sec, &o, rtype::NSEC)?;
        }
    }
    Ok(())
}

/// Proof that the existing name `at` has no RRset of the question's type (RFC 4035
/// §3.1.3.1, RFC 5155 §7.2.3/§7.2.4).
fn nodata_proof(zone: &Zone, w: &mut BodyWriter, sec: &mut Sec<'_>, at: &[u8]) -> Result<(), BodyError> {
    if !sec.on() {
        return Ok(());
    }
    let d = zone.dnssec();
    if d.nsec3.is_some() {
        // one search tells whether `at` has an NSEC3 and, if not, which one covers it (the
        // next closer name's when its parent is the closest provable encloser)
        return match d.nsec3_search(at) {
            Some((m, true)) => denial_at(zone, w, sec, m, rtype::NSEC3),
            Some((cover, false)) => closest_provable_proof(zone, w, sec, at, cover),
            None => Ok(()),
        };
    }
    let has_own = zone.nodes.get(at).is_some_and(|n| n.rrset(rtype::NSEC).is_some());
    let o = if has_own { Some(at.into()) } else { d.nsec_covering(at).cloned() };
    match o {
        Some(o) => denial_at(zone, w, sec, &o, rtype::NSEC),
        None => Ok(()),
    }
}

/// The closest provable encloser proof of `at` (RFC 5155 §7.2.1, for a name without an NSEC3
/// of its own: an opt-out delegation): the NSEC3 matching the nearest ancestor that has one
/// and the NSEC3 covering the next closer name. `at_cover` is the NSEC3 covering `at` (the
/// next closer name when the parent has an NSEC3).
fn closest_provable_proof(
    zone: &Zone,
    w: &mut BodyWriter,
    sec: &mut Sec<'_>,
    at: &[u8],
    at_cover: &NameKey,
) -> Result<(), BodyError> {
    let d = zone.dnssec();
    for o in name::suffix_offsets(at).skip(1) {
        let anc = &at[o..];
        if !name::is_subdomain(anc, &zone.apex) {
            break;
        }
        if let Some(m) = d.nsec3_matching(anc) {
            let nc = match next_closer(at, anc) {
                Some(nc) if nc.len() == at.len() => Some(at_cover),
                nc => nc.and_then(|nc| d.nsec3_covering(nc)),
            };
            denial_at(zone, w, sec, m, rtype::NSEC3)?;
            if let Some(nc) = nc {
                denial_at(zone, w, sec, nc, rtype::NSEC3)?;
            }
            break;
        }
    }
    Ok(())
}

/// Proof for an answer synthesised from `*.ce` (RFC 4035 §3.1.3.3, RFC 5155 §7.2.6): the
/// question name does not exist. `nodata_wild` (the wildcard's name) also proves the type
/// absent at the wildcard (§3.1.3.4, RFC 5155 §7.2.5).
fn wildcard_proof(
    zone: &Zone,
    w: &mut BodyWriter,
    sec: &mut Sec<'_>,
    qname: &[u8],
    ce: &[u8],
    nodata_wild: Option<&[u8]>,
) -> Result<(), BodyError> {
    let d = zone.dnssec();
    if d.nsec3.is_some() {
        if nodata_wild.is_some() {
            if let Some(m) = d.nsec3_matching(ce).cloned() {
                denial_at(zone, w, sec, &m, rtype::NSEC3)?;
            }
        }
        if let Some(nc) = next_closer(qname, ce).and_then(|nc| d.nsec3_covering(nc)).cloned() {
            denial_at(zone, w, sec, &nc, rtype::NSEC3)?;
        }
        if let Some(wm) = nodata_wild.and_then(|wn| d.nsec3_matching(wn)).cloned() {
            denial_at(zone, w, sec, &wm, rtype::NSEC3)?;
        }
    } else {
        if let Some(wn) = nodata_wild {
            denial_at(zone, w, sec, wn, rtype::NSEC)?;
        }
        if let Some(c) = d.nsec_covering(qname).cloned() {
            denial_at(zone, w, sec, &c, rtype::NSEC)?;
        }
    }
    Ok(())
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

/// Appends A then AAAA of each in-zone target of `rrset` (each target once), with their
/// RRSIGs when DNSSEC is on and they have some.
/// Returns true if an address was written for a target at or below `required_below`.
fn additional_for(
    zone: &Zone,
    w: &mut BodyWriter,
    sec: &Sec<'_>,
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
                write_rrset(w, sec, target, false, addrs, Some(node))?;
                if required_below.is_some_and(|cut| name::is_subdomain(&key, cut)) {
                    required = true;
                }
            }
        }
    }
    Ok(required)
}

/// NS of the cut in authority (with DNSSEC: then the DS and its RRSIGs, or the proof that
/// the cut has no DS), addresses of its in-zone targets in additional, AA unchanged (0 unless
/// a CNAME chain led here).
fn referral(zone: &Zone, w: &mut BodyWriter, sec: &mut Sec<'_>, cut: &[u8]) -> Result<(), BodyError> {
    w.set_section(Section::Authority)?;
    let Some(node) = zone.nodes.get(cut) else { return Ok(()) };
    let Some(ns) = node.rrset(rtype::NS) else {
        return Ok(());
    };
    // The NS RRset at a cut is not signed (RFC 4035 §2.2): no RRSIG follows it.
    write_rrset(w, sec, cut, false, ns, None)?;
    if sec.on() {
        match node.rrset(rtype::DS) {
            Some(ds) => write_rrset(w, sec, cut, false, ds, Some(node))?,
            None => nodata_proof(zone, w, sec, cut)?,
        }
    }
    let required = additional_for(zone, w, sec, ns, Some(cut), &mut Vec::new())?;
    w.set_ar_required(required);
    Ok(())
}

/// The node that holds the RRsets of `owner` (as written in RDATA), for their RRSIGs.
fn node_of<'z>(zone: &'z Zone, owner: &[u8]) -> Option<&'z Node> {
    match find(zone, &name::to_key(owner)) {
        Found::Exact(n) => Some(n),
        _ => None,
    }
}

/// The name the end of `res` is about (lowercased): the last CNAME's target, or `start`.
fn last_name(res: &Resolution<'_>, start: &[u8]) -> Vec<u8> {
    match res.chain.last().and_then(|s| s.cname.rdata.first()) {
        Some(t) if name::is_valid(t) => name::to_key(t).into_vec(),
        _ => start.to_vec(),
    }
}

/// RFC 6672 §3.2 substitution below the DNAME at `owner`: the DNAME (with its RRSIGs), the
/// CNAME synthesised for the question (TTL of the DNAME, unsigned, RFC 6672 §3.3), then, when
/// the new name lies in the zone, its answer as a CNAME target's (data, NODATA, NXDOMAIN with
/// the SOA, a referral, a wildcard's synthesis; another DNAME ends the answer there). YXDOMAIN
/// when the new name would exceed 255 bytes (RFC 6672 §2.2). A base without a DNAME (a stale
/// key) or a question not below it compiles to NXDOMAIN.
fn dname(zone: &Zone, w: &mut BodyWriter, sec: &mut Sec<'_>, owner: &[u8], qname: &[u8], qtype: u16) -> Result<(), BodyError> {
    let node = zone.nodes.get(owner);
    let set = node.and_then(|n| n.rrset(rtype::DNAME));
    let Some((set, target)) = set.and_then(|s| s.rdata.first().filter(|t| name::is_valid(t)).map(|t| (s, t))) else {
        return nxdomain(zone, w, sec, qname);
    };
    if qname.len() <= owner.len() || !name::is_subdomain(qname, owner) {
        return nxdomain(zone, w, sec, qname);
    }
    w.set_aa(true);
    write_rrset(w, sec, owner, false, set, node)?;
    let prefix = &qname[..qname.len() - owner.len()];
    if prefix.len() + target.len() > 255 {
        w.set_rcode(rcode::YXDOMAIN as u8);
        return Ok(());
    }
    let new = name::to_key(&[prefix, target].concat());
    w.write_rr(&[], true, rtype::CNAME, set.ttl, &new)?;
    let want = Want::Type(qtype);
    match find(zone, &new) {
        Found::Exact(n) => {
            let res = resolve(zone, n, Some(&new), want);
            write_resolution(zone, w, sec, (&new, false), n, &res)?;
        }
        Found::Wildcard { ce, node: n } => {
            let res = resolve(zone, n, None, want);
            let nodata = res.chain.is_empty() && matches!(res.end, End::NoData);
            write_resolution_wild(zone, w, sec, (&new, false), n, &res)?;
            if sec.on() {
                let wild = wildcard_of(ce);
                wildcard_proof(zone, w, sec, &new, ce, nodata.then_some(&wild[..]))?;
            }
        }
        Found::Cut(_) => referral(zone, w, sec, &new)?,
        Found::BelowCut(cut) => referral(zone, w, sec, cut)?,
        Found::NxDomain => nxdomain(zone, w, sec, &new)?,
        Found::BelowDname { .. } | Found::OutOfZone => {}
    }
    Ok(())
}

/// Writes a CNAME chain and its end, starting at the exact node `start` (`base.0`, written as
/// the question's pointer when `base.1`).
fn write_resolution(
    zone: &Zone,
    w: &mut BodyWriter,
    sec: &mut Sec<'_>,
    base: (&[u8], bool),
    start: &Node,
    res: &Resolution<'_>,
) -> Result<(), BodyError> {
    write_chain(zone, w, sec, base, start, res)?;
    let last = last_name(res, base.0);
    match &res.end {
        End::NoData => {
            soa_authority(zone, w, sec)?;
            nodata_proof(zone, w, sec, &last)?;
        }
        End::NxDomain => nxdomain(zone, w, sec, &last)?,
        _ => {}
    }
    Ok(())
}

/// Writes a chain synthesised from the wildcard node `start` (owner: the question); the
/// wildcard proofs are the caller's.
fn write_resolution_wild(
    zone: &Zone,
    w: &mut BodyWriter,
    sec: &mut Sec<'_>,
    base: (&[u8], bool),
    start: &Node,
    res: &Resolution<'_>,
) -> Result<(), BodyError> {
    write_chain(zone, w, sec, base, start, res)?;
    let base = base.0;
    match &res.end {
        End::NoData => {
            soa_authority(zone, w, sec)?;
            if !res.chain.is_empty() {
                let last = last_name(res, base);
                nodata_proof(zone, w, sec, &last)?;
            }
        }
        End::NxDomain => {
            let last = last_name(res, base);
            nxdomain(zone, w, sec, &last)?;
        }
        _ => {}
    }
    Ok(())
}

/// The CNAMEs of `res`, the end's data or referral (negative ends are the callers'). The
/// start's records are owned by `base`, written as the question's pointer when `base.1`.
fn write_chain(
    zone: &Zone,
    w: &mut BodyWriter,
    sec: &mut Sec<'_>,
    (base, base_is_qname): (&[u8], bool),
    start: &Node,
    res: &Resolution<'_>,
) -> Result<(), BodyError> {
    w.set_aa(true);
    for step in &res.chain {
        match &step.owner {
            None => write_rrset(w, sec, base, base_is_qname, step.cname, Some(start))?,
            Some(o) => write_rrset(w, sec, o, false, step.cname, node_of(zone, o))?,
        }
    }
    match &res.end {
        End::Data(rrset) if rrset.rtype == rtype::RRSIG => {
            let (owner, is_qname, node) = match &res.end_owner {
                None => (base, base_is_qname, Some(start)),
                Some(o) => (&o[..], false, node_of(zone, o)),
            };
            write_rrsig_answer(w, owner, is_qname, rrset, node)?;
        }
        End::Data(rrset) => {
            match &res.end_owner {
                None => write_rrset(w, sec, base, base_is_qname, rrset, Some(start))?,
                Some(o) => write_rrset(w, sec, o, false, rrset, node_of(zone, o))?,
            }
            additional_for(zone, w, sec, rrset, None, &mut Vec::new())?;
        }
        End::Referral(cut) => referral(zone, w, sec, cut)?,
        End::NoData | End::NxDomain | End::OutOfZone | End::ChainCut => {}
    }
    Ok(())
}

/// The answer to a query of type RRSIG (Knot DNS 3.2; RFC 8482 lets a server return a subset):
/// the signatures covering one type, the lowest signed at the node, with that RRset's TTL
/// (RFC 4034 §3: an RRSIG's TTL is its RRset's), whatever the DO bit.
fn write_rrsig_answer(
    w: &mut BodyWriter,
    owner: &[u8],
    is_qname: bool,
    sigs: &Rrset,
    node: Option<&Node>,
) -> Result<(), BodyError> {
    let Some(t) = sigs.rdata.iter().filter_map(crate::dnssec::covered).min() else {
        return Ok(());
    };
    let ttl = node.and_then(|n| n.rrset(t)).map_or(sigs.ttl, |r| r.ttl);
    for sig in sigs_covering(Some(sigs), t) {
        w.write_rr(owner, is_qname, rtype::RRSIG, ttl, sig)?;
    }
    Ok(())
}

/// Every key of [`lookup::enumerate`] with its compiled body.
pub fn compile_all(zone: &Zone) -> impl Iterator<Item = (BodyKey, Body)> + '_ {
    keys_in_order(zone).map(move |k| {
        let b = compile(zone, &k);
        (k, b)
    })
}

/// The keys of [`lookup::enumerate`], in its order (names sorted, each name's keys as
/// [`lookup::keys_of_name`] gives them, the apex's `NxDomain` last), made one name at a time:
/// only the sorted name references are held, not every key of the zone at once (a zone of
/// millions of names compiles in a stream into the kernel maps).
pub fn keys_in_order(zone: &Zone) -> impl Iterator<Item = BodyKey> + '_ {
    let mut names: Vec<&[u8]> = zone.nodes.keys().map(|k| &k[..]).collect();
    names.sort_unstable();
    keys_of_names(zone, names)
}

/// [`keys_in_order`] with the zone's names given, sorted (a caller that needs them sorted
/// for more than the keys sorts them once).
pub fn keys_of_names<'a>(zone: &'a Zone, names: impl IntoIterator<Item = &'a [u8]> + 'a) -> impl Iterator<Item = BodyKey> + 'a {
    let mut buf = Vec::new();
    names
        .into_iter()
        .flat_map(move |nm| {
            buf.clear();
            lookup::keys_of_name(zone, nm, &mut buf);
            std::mem::take(&mut buf)
        })
        .chain(std::iter::once(BodyKey { base: zone.apex.clone(), kind: BodyKind::NxDomain }))
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
                    Some(r) => r.rdata.push(&rd),
                    None => v.push(Rrset { rtype: t, ttl, rdata: crate::tree::Rdatas::one(&rd) }),
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
        Zone::new(n("t."), nodes, "t.zone".into(), 1)
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

    /// The streamed keys are `enumerate`'s, in its order.
    #[test]
    fn keys_in_order_is_enumerate() {
        for z in [zone(), signed()] {
            let want: Vec<BodyKey> = lookup::enumerate(&z).collect();
            assert!(want.len() > 5);
            assert_eq!(keys_in_order(&z).collect::<Vec<_>>(), want);
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
        z.nodes.insert(n("big.t."), Node { rrsets: vec![Rrset { rtype: 16, ttl: 1, rdata: big.into() }] });
        let b = compile(&z, &BodyKey { base: n("big.t."), kind: BodyKind::Type(16) });
        assert_eq!(b.flags, rcode::SERVFAIL);
        assert!(b.bytes.is_empty());
        assert_eq!(b.base_len, 7);
    }

    /// A tiny NSEC-signed zone: t. (SOA NS DNSKEY NSEC→a.t.), a.t. (A NSEC→c.t.), c.t. (A
    /// NSEC→t.); every RRset "signed" (RRSIG RDATA: the covered type, then filler).
    fn signed() -> Zone {
        let sig = |t: u16| -> Vec<u8> { [&t.to_be_bytes()[..], &[13, 2, 0, 0, 14, 16], &[0; 12], &n("t.")[..], &[7; 8]].concat() };
        let nsec = |next: &str, types: &[u8]| -> Vec<u8> { [&n(next)[..], &[0, types.len() as u8], types].concat() };
        let mut z = zone();
        z.nodes.clear();
        let mut soa = [n("ns.t."), n("h.t.")].concat();
        soa.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 1, 44]);
        let mut put = |name: &str, sets: Vec<(u16, Vec<Vec<u8>>)>| {
            let mut v: Vec<Rrset> = sets
                .into_iter()
                .map(|(t, rds)| Rrset { rtype: t, ttl: 3600, rdata: rds.into_iter().map(Bytes::from).collect() })
                .collect();
            v.sort_by_key(|r| r.rtype);
            z.nodes.insert(n(name), Node { rrsets: v });
        };
        put("t.", vec![(6, vec![soa]), (2, vec![n("ns.t.").into()]), (48, vec![vec![1, 1, 3, 13, 9]]), (47, vec![nsec("a.t.", &[0x22])]), (46, vec![sig(6), sig(2), sig(48), sig(47)])]);
        put("a.t.", vec![(1, vec![vec![198, 18, 0, 1]]), (47, vec![nsec("c.t.", &[0x40])]), (46, vec![sig(1), sig(47)])]);
        put("c.t.", vec![(1, vec![vec![198, 18, 0, 2]]), (47, vec![nsec("t.", &[0x40])]), (46, vec![sig(1), sig(47)])]);
        z
    }

    #[test]
    fn dnssec_bodies() {
        let z = signed();
        assert!(is_signed(&z));
        // DO=0: marked, no DNSSEC records.
        let plain = compile(&z, &BodyKey { base: n("a.t."), kind: BodyKind::Type(1) });
        assert!(plain.dnssec);
        assert_eq!((plain.ancount, plain.nscount), (1, 0));
        // DO=1 positive: A + RRSIG(A).
        let b = compile_dnssec(&z, &BodyKey { base: n("a.t."), kind: BodyKind::Type(1) }, &n("a.t."));
        assert_eq!((b.ancount, b.nscount, b.arcount), (2, 0, 0));
        // NODATA: SOA, RRSIG SOA, NSEC a.t., its RRSIG.
        let b = compile_dnssec(&z, &BodyKey { base: n("a.t."), kind: BodyKind::Other }, &n("a.t."));
        assert_eq!((b.flags, b.ancount, b.nscount), (0x0400, 0, 4));
        // NXDOMAIN b.t.: SOA+sig, NSEC a.t. (covers b.t.)+sig, NSEC t. (covers *.t.)+sig.
        let b = compile_dnssec(&z, &BodyKey { base: n("t."), kind: BodyKind::NxDomain }, &n("b.t."));
        assert_eq!((b.flags, b.ancount, b.nscount), (0x0403, 0, 6));
        // NXDOMAIN d.t.: covered by c.t.'s NSEC (wraps to t.), *.t. by t.'s: 6 again.
        let d = compile_dnssec(&z, &BodyKey { base: n("t."), kind: BodyKind::NxDomain }, &n("d.t."));
        assert_eq!(d.nscount, 6);
        assert_ne!(d.bytes, b.bytes, "the proof depends on the name");
        // NXDOMAIN 0.t. (before a.t., after *.t.): t.'s NSEC covers both: written once.
        let z0 = compile_dnssec(&z, &BodyKey { base: n("t."), kind: BodyKind::NxDomain }, &n("0.t."));
        assert_eq!(z0.nscount, 4);
        // RRSIG query: the signatures of the lowest signed type only (NS at the apex).
        let r = compile(&z, &BodyKey { base: n("t."), kind: BodyKind::Type(46) });
        assert_eq!(r.ancount, 1);
        // An unsigned zone: compile_dnssec is compile.
        let u = zone();
        let k = BodyKey { base: n("t."), kind: BodyKind::NxDomain };
        assert_eq!(compile_dnssec(&u, &k, &n("x.t.")), compile(&u, &k));
        assert!(!compile(&u, &k).dnssec);
    }
}

