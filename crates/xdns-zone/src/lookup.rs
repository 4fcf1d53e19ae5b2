//! RFC 1034 §4.3.2 lookup on a [`Zone`], producing the *body key* of docs/DESIGN-NOTES.md.
//!
//! [`select`] decides which precompiled body answers a question; [`crate::compile::compile`]
//! builds that body. Both walk the tree with the same functions ([`find`] for one name,
//! [`resolve`] for the CNAME chain), so a key always compiles to the answer `select` meant.
//!
//! Behaviour, checked against Knot DNS 3.2 (and NSD 4.6 where noted):
//! - A node with NS below the apex is a zone cut. Queries at or below it get a referral keyed
//!   at the cut (`Other`), except DS at the cut itself, answered from the parent side
//!   (`Type(43)`: the DS RRset, or NODATA).
//! - CNAMEs are followed inside the zone only (Knot; NSD also follows into other zones it
//!   serves, which would make a body depend on another zone). A chain stops when a target was
//!   already visited (the loop is shown once, as Knot and NSD do) or after
//!   [`MAX_CNAME_CHAIN`] records.
//! - A chain that leads into a delegation ends with the referral (CNAMEs in the answer, NS in
//!   authority, glue, AA=1), as Knot does.
//! - Wildcards follow RFC 4592: `*.CE` applies when the name does not exist and CE is its
//!   closest encloser (an empty non-terminal is an existing name, so it blocks the wildcard);
//!   the wildcard node queried literally is an ordinary exact match.
//! - ANY (RFC 8482): one RRset, the one with the lowest type (Knot, over UDP and TCP alike;
//!   NSD answers the SOA at the apex instead). `transport` is accepted so this policy can
//!   differ per transport later; today it does not.
//! - DNAME (RFC 6672): a name below a DNAME owner is answered by substitution, keyed at the
//!   owner ([`BodyKind::Dname`]: the DNAME, the CNAME synthesised for the question, then the
//!   new name's answer when it lies in the zone, as Knot and NSD follow it). The body depends
//!   on the question name: userspace compiles it per query; the kernel never holds it. The
//!   owner itself is ordinary data. A CNAME chain reaching a name below a DNAME ends there
//!   (the client asks again for the target).

use crate::respond::Transport;
use crate::tree::{NameKey, Node, Rrset, Zone};
use xdns_wire::name;

/// RR type numbers: the workspace's one table, from `domain` (re-exported here for the users
/// of `xdns_zone::lookup::rtype`).
pub use xdns_wire::rtype;

/// Longest CNAME chain followed (records in the answer). Knot DNS and NSD both cut chains;
/// 16 is ample for real zones and bounds the work per query.
pub const MAX_CNAME_CHAIN: usize = 16;

/// Which body of a base name answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BodyKind {
    /// The exact node's body for this qtype (data, DS at a cut, CNAME chain ending in data,
    /// or ANY).
    Type(u16),
    /// The exact node's body for every other qtype: NODATA, referral, or a CNAME chain that
    /// ends without data.
    Other,
    /// Wildcard synthesis from `*.base` for this qtype.
    Wildcard(u16),
    /// Wildcard synthesis from `*.base` for every other qtype (NODATA or a chain without data).
    WildcardOther,
    /// NXDOMAIN (base is the apex).
    NxDomain,
    /// DNAME substitution for this qtype, the base being the DNAME's owner (RFC 6672): the
    /// body depends on the question name, so it is never enumerated (userspace only).
    Dname(u16),
}

/// The key of a precompiled body: the base name (lowercased wire) and which body.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BodyKey {
    /// The base name: the question name for exact matches, the closest encloser for wildcard
    /// answers, the cut for referrals below it, the apex for NXDOMAIN.
    pub base: NameKey,
    /// Which body of that name.
    pub kind: BodyKind,
}

/// Where one name lands in a zone (no CNAME processing).
#[derive(Clone, Copy, Debug)]
pub enum Found<'z, 'n> {
    /// The name exists (possibly as an empty non-terminal) and is authoritative data.
    Exact(&'z Node),
    /// The name is a zone cut (NS below the apex).
    Cut(&'z Node),
    /// The name is below the cut `cut` (a suffix of the name).
    BelowCut(&'n [u8]),
    /// The name does not exist; the wildcard `*.ce` (`ce` a suffix of the name) applies.
    Wildcard {
        /// The closest encloser.
        ce: &'n [u8],
        /// The wildcard node `*.ce`.
        node: &'z Node,
    },
    /// The name is below `owner` (a suffix of the name), which owns a DNAME (RFC 6672):
    /// the name is substituted, whether or not it exists.
    BelowDname {
        /// The DNAME's owner.
        owner: &'n [u8],
        /// Its node.
        node: &'z Node,
    },
    /// The name does not exist and no wildcard applies.
    NxDomain,
    /// The name is not at or below the apex.
    OutOfZone,
}

fn has_ns(node: &Node) -> bool {
    node.rrset(rtype::NS).is_some()
}

fn has_dname(node: &Node) -> bool {
    node.rrset(rtype::DNAME).is_some()
}

/// Looks up one lowercased wire name in `zone` (RFC 1034 §4.3.2 step 3, without CNAMEs).
///
/// Nodes borrow from the zone, names (suffixes of `name`) from `name`.
pub fn find<'z, 'n>(zone: &'z Zone, name: &'n [u8]) -> Found<'z, 'n> {
    // The label offsets, on the stack: a name of at most 255 bytes has at most 128 labels
    // and the root (every name of a zone and every question; anything longer takes the heap).
    // The compile and every userspace answer call this: no allocation per call.
    let mut stack = [0usize; 130];
    let (mut n, mut heap) = (0usize, Vec::new());
    for o in name::suffix_offsets(name) {
        match stack.get_mut(n) {
            Some(s) if heap.is_empty() => {
                *s = o;
                n += 1;
            }
            _ => {
                if heap.is_empty() {
                    heap.extend_from_slice(&stack[..n]);
                }
                heap.push(o);
            }
        }
    }
    let offsets: &[usize] = if heap.is_empty() { &stack[..n] } else { &heap };
    let Some(apex_idx) = offsets.iter().position(|&o| name[o..] == *zone.apex) else {
        return Found::OutOfZone;
    };
    let Some(mut node) = zone.nodes.get(&*zone.apex) else {
        return Found::NxDomain;
    };
    if apex_idx > 0 && has_dname(node) {
        return Found::BelowDname { owner: &name[offsets[apex_idx]..], node };
    }
    // Walk down from the apex, one label at a time.
    for i in (0..apex_idx).rev() {
        let here = &name[offsets[i]..];
        match zone.node(here) {
            Some(n) => {
                node = n;
                if has_ns(n) {
                    return if i == 0 { Found::Cut(n) } else { Found::BelowCut(here) };
                }
                if i > 0 && has_dname(n) {
                    return Found::BelowDname { owner: here, node: n };
                }
            }
            None => {
                let ce = &name[offsets[i + 1]..];
                // `*.<ce>`, on the stack for any name of at most 255 bytes
                let (mut buf, long);
                let wild: &[u8] = match ce.len() {
                    l if l <= 255 => {
                        buf = [0u8; 257];
                        buf[..2].copy_from_slice(b"\x01*");
                        buf[2..2 + l].copy_from_slice(ce);
                        &buf[..2 + l]
                    }
                    _ => {
                        long = [&b"\x01*"[..], ce].concat();
                        &long
                    }
                };
                return match zone.nodes.get(wild) {
                    Some(w) => Found::Wildcard { ce, node: w },
                    None => Found::NxDomain,
                };
            }
        }
    }
    Found::Exact(node)
}

/// What the answer must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// RRsets of this type (ANY: the node's lowest-type RRset).
    Type(u16),
    /// Nothing: the body shared by every qtype without its own body.
    Other,
}

/// How a resolution ends.
#[derive(Clone, Debug)]
pub enum End<'z> {
    /// The RRset answering the question, owned by the last name of the chain.
    Data(&'z Rrset),
    /// The name exists but has no matching data.
    NoData,
    /// The last name is at or below the cut `cut` (lowercased wire).
    Referral(NameKey),
    /// The last name does not exist.
    NxDomain,
    /// The last CNAME points out of the zone.
    OutOfZone,
    /// The chain was cut (loop, too long, or its target substituted by a DNAME).
    ChainCut,
}

/// One CNAME record in the answer: its owner (the question for the first step, else the
/// previous target as written in the RDATA) and the CNAME RRset.
#[derive(Clone, Debug)]
pub struct Step<'z> {
    /// Owner, uncompressed wire, case as written in the zone; `None` means the question name.
    pub owner: Option<Vec<u8>>,
    /// The CNAME RRset.
    pub cname: &'z Rrset,
}

/// A full resolution: the CNAME chain and how it ends.
#[derive(Clone, Debug)]
pub struct Resolution<'z> {
    /// CNAMEs in answer order.
    pub chain: Vec<Step<'z>>,
    /// Owner of the final data (`None`: the question name).
    pub end_owner: Option<Vec<u8>>,
    /// How it ends.
    pub end: End<'z>,
}

/// The RRset `want` selects at a node, if any.
fn matching(node: &Node, want: Want) -> Option<&Rrset> {
    match want {
        Want::Type(rtype::ANY) => node.rrsets.iter().min_by_key(|r| r.rtype),
        Want::Type(t) => node.rrset(t),
        Want::Other => None,
    }
}

/// Follows RFC 1034 §4.3.2 from an authoritative node `start` (exact or wildcard) whose owner
/// is the question, through CNAMEs inside the zone.
///
/// `start_name` is the start node's own name (lowercased) when it is an exact match, so that a
/// loop back to it is shown once; `None` for a wildcard node (the body must not depend on the
/// question name).
pub fn resolve<'z>(
    zone: &'z Zone,
    start: &'z Node,
    start_name: Option<&[u8]>,
    want: Want,
) -> Resolution<'z> {
    let mut res = Resolution { chain: Vec::new(), end_owner: None, end: End::NoData };
    let mut node = start;
    let mut owner: Option<Vec<u8>> = None;
    let mut visited: Vec<NameKey> = start_name.map(|s| vec![s.into()]).unwrap_or_default();
    loop {
        if let Some(rrset) = matching(node, want) {
            res.end_owner = owner;
            res.end = End::Data(rrset);
            return res;
        }
        let Some(cname) = node.rrset(rtype::CNAME) else {
            res.end_owner = owner;
            res.end = End::NoData;
            return res;
        };
        res.chain.push(Step { owner: owner.take(), cname });
        let target = match cname.rdata.first() {
            Some(t) if name::is_valid(t) => t.to_vec(),
            _ => {
                res.end = End::ChainCut;
                return res;
            }
        };
        let key = name::to_key(&target);
        if res.chain.len() >= MAX_CNAME_CHAIN || visited.contains(&key) {
            res.end = End::ChainCut;
            return res;
        }
        visited.push(key.clone());
        match find(zone, &key) {
            Found::Exact(n) => node = n,
            Found::Wildcard { node: n, .. } => node = n,
            Found::Cut(_) => {
                res.end = End::Referral(key);
                return res;
            }
            Found::BelowCut(cut) => {
                res.end = End::Referral(cut.into());
                return res;
            }
            Found::NxDomain => {
                res.end = End::NxDomain;
                return res;
            }
            // substituted by a DNAME: the chain stops at its CNAME (module docs)
            Found::BelowDname { .. } => {
                res.end = End::ChainCut;
                return res;
            }
            Found::OutOfZone => {
                res.end = End::OutOfZone;
                return res;
            }
        }
        owner = Some(target);
    }
}

/// Chooses the body for `qtype` at `qname` (lowercased wire, at or below the apex; a name
/// outside the zone gets the NXDOMAIN key).
pub fn select(zone: &Zone, qname: &[u8], qtype: u16, transport: Transport) -> BodyKey {
    let _ = transport; // ANY is answered the same over UDP and TCP (see module docs).
    let key = |base: &[u8], kind| BodyKey { base: base.into(), kind };
    match find(zone, qname) {
        Found::Exact(node) => match resolve(zone, node, Some(qname), Want::Type(qtype)).end {
            End::Data(_) => key(qname, BodyKind::Type(qtype)),
            _ => key(qname, BodyKind::Other),
        },
        Found::Cut(_) if qtype == rtype::DS => key(qname, BodyKind::Type(rtype::DS)),
        Found::Cut(_) => key(qname, BodyKind::Other),
        Found::BelowCut(cut) => key(cut, BodyKind::Other),
        Found::Wildcard { ce, node } => match resolve(zone, node, None, Want::Type(qtype)).end {
            End::Data(_) => key(ce, BodyKind::Wildcard(qtype)),
            _ => key(ce, BodyKind::WildcardOther),
        },
        Found::BelowDname { owner, .. } => key(owner, BodyKind::Dname(qtype)),
        Found::NxDomain | Found::OutOfZone => key(&zone.apex, BodyKind::NxDomain),
    }
}

/// The qtypes with a body of their own at an authoritative node: its own types, ANY if it has
/// data, and the types at the end of its CNAME chain.
fn own_types(zone: &Zone, node: &Node, start_name: Option<&[u8]>) -> Vec<u16> {
    let mut types: Vec<u16> = node.rrsets.iter().map(|r| r.rtype).collect();
    if !node.rrsets.is_empty() {
        types.push(rtype::ANY);
    }
    if node.rrset(rtype::CNAME).is_some() {
        // Find the node the chain ends at: its types are answered through the chain.
        let mut n = node;
        let mut seen: Vec<NameKey> = Vec::new();
        while let Some(c) = n.rrset(rtype::CNAME) {
            let Some(t) = c.rdata.first().filter(|t| name::is_valid(t)) else { break };
            let k = name::to_key(t);
            if seen.contains(&k) || seen.len() >= MAX_CNAME_CHAIN {
                break;
            }
            seen.push(k.clone());
            match find(zone, &k) {
                Found::Exact(next) | Found::Wildcard { node: next, .. } => n = next,
                _ => break,
            }
        }
        if !std::ptr::eq(n, node) && n.rrset(rtype::CNAME).is_none() {
            types.extend(n.rrsets.iter().map(|r| r.rtype));
        }
    }
    types.sort_unstable();
    types.dedup();
    // Keep only what `select` really answers with a body of its own (the chain check above is
    // a superset when the walk was cut short).
    types.retain(|&t| matches!(resolve(zone, node, start_name, Want::Type(t)).end, End::Data(_)));
    types
}

/// The keys [`enumerate`] lists for the name `nm` of `zone` (lowercased wire), in its order:
/// the name's `Other` and `Type` keys, a cut's `Other` and `Type(DS)`, and for a wildcard
/// name `*.X` the `WildcardOther` and `Wildcard` keys at `X`. Nothing for a name that is not
/// a node (or only under a cut). An incremental kernel update recompiles these for the names
/// a transfer changed.
pub fn keys_of_name(zone: &Zone, nm: &[u8], keys: &mut Vec<BodyKey>) {
    let base = || -> NameKey { nm.into() };
    match find(zone, nm) {
        Found::Exact(node) => {
            keys.push(BodyKey { base: base(), kind: BodyKind::Other });
            for t in own_types(zone, node, Some(nm)) {
                keys.push(BodyKey { base: base(), kind: BodyKind::Type(t) });
            }
            if nm.starts_with(b"\x01*") {
                if let Some(ce) = name::parent(nm) {
                    keys.push(BodyKey { base: ce.into(), kind: BodyKind::WildcardOther });
                    for t in own_types(zone, node, None) {
                        keys.push(BodyKey { base: ce.into(), kind: BodyKind::Wildcard(t) });
                    }
                }
            }
        }
        Found::Cut(_) => {
            keys.push(BodyKey { base: base(), kind: BodyKind::Other });
            keys.push(BodyKey { base: base(), kind: BodyKind::Type(rtype::DS) });
        }
        _ => {}
    }
}

/// Every key [`select`] can return for UDP queries to `zone`, each once. The XDP program
/// precompiles exactly these bodies; any qtype at a node without a `Type(t)` key here selects
/// that node's `Other` body.
pub fn enumerate(zone: &Zone) -> impl Iterator<Item = BodyKey> {
    let mut keys: Vec<BodyKey> = Vec::new();
    let mut names: Vec<&NameKey> = zone.nodes.keys().collect();
    names.sort();
    for nm in names {
        keys_of_name(zone, nm, &mut keys);
    }
    keys.push(BodyKey { base: zone.apex.clone(), kind: BodyKind::NxDomain });
    keys.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hashbrown::HashMap;

    fn n(text: &str) -> NameKey {
        name::from_presentation(text).unwrap().to_ascii_lowercase().into_boxed_slice()
    }

    fn rr(rtype: u16, rdata: &[&[u8]]) -> Rrset {
        Rrset { rtype, ttl: 300, rdata: rdata.iter().map(|d| Bytes::copy_from_slice(d)).collect() }
    }

    /// A small zone: apex, www (A), c (CNAME www), d (CNAME nowhere), ENT e (x.e exists),
    /// *.w (A), cut sub (NS, DS) with glue, loop1/loop2.
    fn zone() -> Zone {
        let mut nodes: HashMap<NameKey, Node> = HashMap::new();
        let mut put = |name: &str, mut rrsets: Vec<Rrset>| {
            rrsets.sort_by_key(|r| r.rtype);
            nodes.insert(n(name), Node { rrsets });
        };
        let soa = [&n("ns.t.")[..], &n("h.t.")[..], &[0u8; 20][..]].concat();
        put("t.", vec![rr(6, &[&soa]), rr(2, &[&n("ns.t.")])]);
        put("ns.t.", vec![rr(1, &[&[198, 18, 0, 1]])]);
        put("www.t.", vec![rr(1, &[&[198, 18, 0, 2]]), rr(28, &[&[0; 16]])]);
        put("c.t.", vec![rr(5, &[&n("www.t.")])]);
        put("d.t.", vec![rr(5, &[&n("nowhere.t.")])]);
        put("e.t.", vec![]);
        put("x.e.t.", vec![rr(1, &[&[198, 18, 0, 3]])]);
        put("*.e.t.", vec![rr(16, &[b"\x01w"])]);
        put("w.t.", vec![]);
        put("*.w.t.", vec![rr(1, &[&[198, 18, 0, 4]])]);
        put("sub.t.", vec![rr(2, &[&n("ns.sub.t.")]), rr(43, &[b"\x00\x01"])]);
        put("ns.sub.t.", vec![rr(1, &[&[198, 18, 0, 5]])]);
        put("loop1.t.", vec![rr(5, &[&n("loop2.t.")])]);
        put("loop2.t.", vec![rr(5, &[&n("loop1.t.")])]);
        Zone::new(n("t."), nodes, "t.zone".into(), 1)
    }

    #[test]
    fn select_table() {
        let z = zone();
        use BodyKind::*;
        let cases: &[(&str, u16, &str, BodyKind)] = &[
            ("www.t.", 1, "www.t.", Type(1)),
            ("WWW.T.", 28, "www.t.", Type(28)),
            ("www.t.", 15, "www.t.", Other),
            ("www.t.", 255, "www.t.", Type(255)),
            ("t.", 2, "t.", Type(2)),
            ("t.", 43, "t.", Other),
            ("c.t.", 1, "c.t.", Type(1)),
            ("c.t.", 5, "c.t.", Type(5)),
            ("c.t.", 15, "c.t.", Other),
            ("c.t.", 255, "c.t.", Type(255)),
            ("d.t.", 1, "d.t.", Other),
            ("loop1.t.", 1, "loop1.t.", Other),
            ("e.t.", 1, "e.t.", Other),
            ("e.t.", 255, "e.t.", Other),
            ("y.e.t.", 16, "e.t.", Wildcard(16)),
            ("y.e.t.", 1, "e.t.", WildcardOther),
            ("z.x.e.t.", 1, "t.", NxDomain),
            ("a.b.w.t.", 1, "w.t.", Wildcard(1)),
            ("*.w.t.", 1, "*.w.t.", Type(1)),
            ("sub.t.", 1, "sub.t.", Other),
            ("sub.t.", 43, "sub.t.", Type(43)),
            ("ns.sub.t.", 1, "sub.t.", Other),
            ("a.b.sub.t.", 43, "sub.t.", Other),
            ("nope.t.", 1, "t.", NxDomain),
        ];
        for (q, t, base, kind) in cases {
            let qk = n(q);
            let got = select(&z, &qk, *t, Transport::Udp);
            assert_eq!(got, BodyKey { base: n(base), kind: *kind }, "{q} {t}");
            assert_eq!(select(&z, &qk, *t, Transport::Tcp), got, "{q} {t} tcp");
        }
    }

    /// DNAME (RFC 6672): every name below an owner is substituted, whether it exists or not
    /// (occluded data, a would-be wildcard), the owner itself is ordinary data; an apex DNAME
    /// substitutes every name below the apex; a CNAME chain stops at a name below a DNAME;
    /// `enumerate` lists no key for substituted names (the kernel never holds them).
    #[test]
    fn dname_substitutes_every_name_below_its_owner() {
        let mut z = zone();
        let dn = |t: &str| rr(39, &[&n(t)]);
        z.nodes.insert(n("dn.t."), Node { rrsets: vec![dn("other.example.")] });
        z.nodes.insert(n("hidden.dn.t."), Node { rrsets: vec![rr(1, &[&[198, 18, 0, 9]])] });
        z.nodes.insert(n("*.dn.t."), Node { rrsets: vec![rr(1, &[&[198, 18, 0, 8]])] });
        z.nodes.insert(n("to.t."), Node { rrsets: vec![rr(5, &[&n("x.dn.t.")])] });
        use BodyKind::*;
        for (q, t, base, kind) in [
            ("x.dn.t.", 1, "dn.t.", Dname(1)),
            ("a.b.dn.t.", 28, "dn.t.", Dname(28)),
            ("hidden.dn.t.", 1, "dn.t.", Dname(1)),
            ("y.dn.t.", 39, "dn.t.", Dname(39)),
            ("dn.t.", 39, "dn.t.", Type(39)),
            ("dn.t.", 1, "dn.t.", Other),
            ("to.t.", 1, "to.t.", Other),
        ] {
            assert_eq!(select(&z, &n(q), t, Transport::Udp), BodyKey { base: n(base), kind }, "{q} {t}");
        }
        assert!(matches!(find(&z, &n("x.dn.t.")), Found::BelowDname { owner, .. } if owner == &n("dn.t.")[..]));
        let to = z.nodes.get(&n("to.t.")[..]).unwrap();
        assert!(matches!(resolve(&z, to, Some(&n("to.t.")), Want::Type(1)).end, End::ChainCut));
        assert!(enumerate(&z).all(|k| !matches!(k.kind, Dname(_)) && k.base[..] != n("hidden.dn.t.")[..]));
        // at the apex: every name below it, existing or not
        let apex = z.nodes.get_mut(&n("t.")[..]).unwrap();
        apex.rrsets.push(dn("example."));
        apex.rrsets.sort_by_key(|r| r.rtype);
        for q in ["www.t.", "nope.t.", "a.b.sub.t."] {
            assert_eq!(select(&z, &n(q), 1, Transport::Udp), BodyKey { base: n("t."), kind: Dname(1) }, "{q}");
        }
        assert_eq!(select(&z, &n("t."), 2, Transport::Udp), BodyKey { base: n("t."), kind: Type(2) });
    }

    /// `find` keeps a name's label offsets on the stack up to 130 of them (every name of at
    /// most 255 bytes) and on the heap beyond: names of 2 to 300 labels land where their
    /// suffixes say (the wildcard of their closest encloser, the cut above them, NXDOMAIN),
    /// either way.
    #[test]
    fn find_with_many_labels() {
        let z = zone();
        for k in [1usize, 120, 125, 126, 127, 128, 129, 200, 300] {
            let under = |suffix: &str| [&b"\x01a"[..].repeat(k)[..], &n(suffix)[..]].concat();
            let w = under("w.t.");
            assert!(matches!(find(&z, &w), Found::Wildcard { ce, .. } if ce == &n("w.t.")[..]), "{k} labels below w.t.");
            let e = under("e.t.");
            assert!(matches!(find(&z, &e), Found::Wildcard { ce, .. } if ce == &n("e.t.")[..]), "{k} labels below e.t.");
            let cut = under("ns.sub.t.");
            assert!(matches!(find(&z, &cut), Found::BelowCut(c) if c == &n("sub.t.")[..]), "{k} labels below sub.t.");
            let nx = under("www.t.");
            assert!(matches!(find(&z, &nx), Found::NxDomain), "{k} labels below www.t.");
            assert!(matches!(find(&z, &under("org.")), Found::OutOfZone), "{k} labels below org.");
        }
    }

    #[test]
    fn chain_and_loop_resolution() {
        let z = zone();
        let Found::Exact(c) = find(&z, &n("c.t.")) else { panic!("c.t. must exist") };
        let r = resolve(&z, c, Some(&n("c.t.")), Want::Type(1));
        assert_eq!(r.chain.len(), 1);
        assert!(r.chain[0].owner.is_none());
        assert!(matches!(r.end, End::Data(rr) if rr.rtype == 1));
        assert_eq!(r.end_owner.as_deref(), Some(&n("www.t.")[..]));
        let Found::Exact(l) = find(&z, &n("loop1.t.")) else { panic!("loop1 must exist") };
        let r = resolve(&z, l, Some(&n("loop1.t.")), Want::Type(1));
        assert_eq!(r.chain.len(), 2, "the loop is shown once");
        assert!(matches!(r.end, End::ChainCut));
        let Found::Exact(d) = find(&z, &n("d.t.")) else { panic!("d must exist") };
        assert!(matches!(resolve(&z, d, None, Want::Other).end, End::NxDomain));
        assert!(matches!(find(&z, &n("x.org.")), Found::OutOfZone));
    }

    #[test]
    fn enumerate_covers_select() {
        let z = zone();
        let keys: Vec<BodyKey> = enumerate(&z).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len(), "no duplicates");
        let names = ["t.", "www.t.", "c.t.", "d.t.", "e.t.", "y.e.t.", "*.e.t.", "a.w.t.", "sub.t.", "ns.sub.t.", "q.sub.t.", "loop1.t.", "nope.t.", "z.x.e.t."];
        for q in names {
            for t in [0u16, 1, 2, 5, 6, 15, 16, 28, 43, 255, 65400] {
                let k = select(&z, &n(q), t, Transport::Udp);
                assert!(keys.contains(&k), "{q} {t} -> {k:?} not enumerated");
                let has_type = keys.contains(&BodyKey { base: k.base.clone(), kind: BodyKind::Type(t) });
                if matches!(k.kind, BodyKind::Other) && k.base == n(q) {
                    assert!(!has_type, "{q} {t}: Type key exists but Other selected");
                }
                if !has_type && k.base == n(q) {
                    assert_eq!(k.kind, BodyKind::Other, "{q} {t}");
                }
            }
        }
    }
}
