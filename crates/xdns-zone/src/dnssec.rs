//! DNSSEC data of a pre-signed zone (RFC 4033/4034/4035, RFC 5155): which records prove what.
//!
//! xdns does not sign. A zone is *signed* when its apex holds an RRSIG covering the SOA; then
//! answers to queries with the DO bit carry the RRSIGs of the RRsets they hold and the
//! NSEC or NSEC3 records that prove a name or a type absent (see [`crate::compile`]). This
//! module keeps what those proofs need, built once per zone on first use ([`Denial`]):
//! the NSEC owners in canonical order (RFC 4034 §6.1) and the NSEC3 owners in hash order
//! with the chain's parameters (from NSEC3PARAM at the apex, RFC 5155 §4), searched by the
//! first eight bytes of their labels, the apex's own found once. A version made
//! by an IXFR in place gets the previous version's data updated for the names it changed
//! ([`Denial::update`], [`DenialCell::with`]), not built again from every node.
//!
//! Record data is read through `domain`'s types (`Rrsig`, `Nsec3`, `Nsec3param`).

use std::cmp::Ordering;
use std::sync::{Arc, OnceLock};

use domain::rdata::{Nsec3param, Rrsig};
use ring::digest;

use crate::tree::{NameKey, Node, Rrset, Zone};
use xdns_wire::{name, rtype};

/// The lazily built [`Denial`] of a zone (a field of [`Zone`]; cloning a zone shares it).
#[derive(Clone, Debug, Default)]
pub struct DenialCell(OnceLock<Arc<Denial>>);

impl DenialCell {
    /// The zone's denial data, built on the first call.
    pub fn get(&self, zone: &Zone) -> &Denial {
        self.0.get_or_init(|| Arc::new(Denial::build(zone)))
    }

    /// A cell holding `d` already (the data of the zone it will belong to: an IXFR applied in
    /// place updates the previous version's data, [`Denial::update`]).
    pub fn with(d: Arc<Denial>) -> DenialCell {
        DenialCell(OnceLock::from(d))
    }

    /// The data, if built.
    pub fn built(&self) -> Option<&Arc<Denial>> {
        self.0.get()
    }

    /// The data, if built, leaving the cell empty.
    pub fn take(&mut self) -> Option<Arc<Denial>> {
        self.0.take()
    }
}

/// NSEC3 chain parameters (RFC 5155 §4.1: hash algorithm 1 = SHA-1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nsec3Params {
    pub algorithm: u8,
    pub iterations: u16,
    pub salt: Vec<u8>,
}

/// What denial proofs need, per zone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Denial {
    /// The apex holds an RRSIG covering the SOA: DO=1 answers carry DNSSEC records.
    pub signed: bool,
    /// Owners of NSEC RRsets, canonical order.
    pub nsec: Vec<NameKey>,
    /// The NSEC3 chain of the NSEC3PARAM at the apex, if there is one.
    pub nsec3: Option<Nsec3Params>,
    /// NSEC3 owners whose parameters are the chain's: (first label, lowercase base32hex, which
    /// sorts as the hash does; owner), sorted. Changed only by [`Denial::build`] and
    /// [`Denial::update`], which keep `nsec3_prefixes` and the apex's owner level with it.
    pub nsec3_owners: Vec<(Box<[u8]>, NameKey)>,
    /// The first eight bytes of each label of `nsec3_owners`, in its order ([`label_prefix`]):
    /// the chain's searches run over this compact array, eight to a cache line, where one
    /// over the owners reads a label apart from its entry at every step; whole labels are
    /// compared only among equal prefixes.
    nsec3_prefixes: Vec<u64>,
    /// The zone's apex and the NSEC3 owner matching it, found once: the apex is the closest
    /// provable encloser of every opt-out delegation directly below it, so most proofs of a
    /// TLD's zone ask for it ([`Denial::nsec3_matching`] answers from here).
    apex: (NameKey, Option<NameKey>),
}

/// The first eight bytes of `label` as a big-endian number, zeros after a shorter label:
/// labels in order have their prefixes in order (equal ones where the first eight bytes are).
fn label_prefix(label: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = label.len().min(8);
    b[..n].copy_from_slice(&label[..n]);
    u64::from_be_bytes(b)
}

/// Does `node` hold only NSEC3 records (and their signatures)? Such names are not part of
/// the zone's name space (RFC 5155 §7.2.8): lookups treat them as absent.
pub fn is_nsec3_only(node: &Node) -> bool {
    !node.rrsets.is_empty()
        && node.rrsets.iter().all(|r| r.rtype == rtype::NSEC3 || r.rtype == rtype::RRSIG)
        && node.rrset(rtype::NSEC3).is_some()
}

/// Where each label of `name` starts (at most 128 labels), and how many there are.
fn label_starts(name: &[u8], out: &mut [u8; 128]) -> usize {
    let mut n = 0;
    for o in name::suffix_offsets(name) {
        if name[o] == 0 || n == out.len() {
            break;
        }
        out[n] = o as u8;
        n += 1;
    }
    n
}

/// The label starting at `at` of `n`.
fn label_at(n: &[u8], at: u8) -> &[u8] {
    let at = usize::from(at);
    &n[at + 1..at + 1 + usize::from(n[at])]
}

/// RFC 4034 §6.1 canonical order of two lowercased wire names (no allocation: binary
/// searches over a zone's owners call this a few dozen times per query).
pub fn canonical_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut sa, mut sb) = ([0u8; 128], [0u8; 128]);
    let (na, nb) = (label_starts(a, &mut sa), label_starts(b, &mut sb));
    for i in 1..=na.min(nb) {
        match label_at(a, sa[na - i]).cmp(label_at(b, sb[nb - i])) {
            Ordering::Equal => {}
            o => return o,
        }
    }
    na.cmp(&nb)
}

/// The NSEC3 hash of `owner` (lowercased wire) with `p` (RFC 5155 §5), as the lowercase
/// base32hex label of NSEC3 owners; `None` for an unknown hash algorithm.
pub fn nsec3_label(owner: &[u8], p: &Nsec3Params) -> Option<Box<[u8]>> {
    let h = nsec3_digest(owner, p)?;
    let text = domain::utils::base32::encode_string_hex(&h).to_ascii_lowercase();
    Some(text.into_bytes().into_boxed_slice())
}

/// [`nsec3_label`]'s hash as bytes, computed without allocating (an index hashes every name
/// of a zone); `None` for an unknown hash algorithm or a name or salt too long to be one.
pub fn nsec3_digest(owner: &[u8], p: &Nsec3Params) -> Option<[u8; 20]> {
    if p.algorithm != 1 || owner.len() > 255 || p.salt.len() > 255 {
        return None;
    }
    let mut buf = [0u8; 255 + 255];
    let len = owner.len() + p.salt.len();
    buf[..owner.len()].copy_from_slice(owner);
    buf[owner.len()..len].copy_from_slice(&p.salt);
    let mut h = [0u8; 20];
    h.copy_from_slice(digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, &buf[..len]).as_ref());
    for _ in 0..p.iterations {
        buf[..20].copy_from_slice(&h);
        buf[20..20 + p.salt.len()].copy_from_slice(&p.salt);
        h.copy_from_slice(digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, &buf[..20 + p.salt.len()]).as_ref());
    }
    Some(h)
}

/// The SHA-1 hash an NSEC3 owner's first label spells (base32hex, either case), `None` if it
/// spells none.
pub fn nsec3_label_digest(label: &[u8]) -> Option<[u8; 20]> {
    let bytes: Vec<u8> = domain::utils::base32::decode_hex(std::str::from_utf8(label).ok()?).ok()?;
    <[u8; 20]>::try_from(&bytes[..]).ok()
}

/// NSEC3PARAM RDATA → parameters.
pub fn nsec3param(rdata: &[u8]) -> Option<Nsec3Params> {
    let p = Nsec3param::parse(&mut domain::dep::octseq::Parser::from_ref(rdata)).ok()?;
    Some(Nsec3Params {
        algorithm: p.hash_algorithm().to_int(),
        iterations: p.iterations(),
        salt: p.salt().as_slice().to_vec(),
    })
}

/// The parameters an NSEC3 record was made with (the first 4 + salt bytes of its RDATA).
fn nsec3_record_params(rdata: &[u8]) -> Option<Nsec3Params> {
    let salt_len = usize::from(*rdata.get(4)?);
    Some(Nsec3Params {
        algorithm: rdata[0],
        iterations: u16::from_be_bytes([rdata[2], rdata[3]]),
        salt: rdata.get(5..5 + salt_len)?.to_vec(),
    })
}

/// The opt-out flag of an NSEC3 record (RFC 5155 §3.1.2.1).
pub fn nsec3_opt_out(rdata: &[u8]) -> bool {
    rdata.get(1).is_some_and(|f| f & 1 == 1)
}

/// The type an RRSIG covers, its labels field, inception and expiration (seconds, serial
/// arithmetic), read with `domain`'s `Rrsig`.
pub fn rrsig_fields(rdata: &[u8]) -> Option<(u16, u8, u32, u32)> {
    let r = Rrsig::parse(&mut domain::dep::octseq::Parser::from_ref(rdata)).ok()?;
    Some((r.type_covered().to_int(), r.labels(), r.inception().into_int(), r.expiration().into_int()))
}

/// The type an RRSIG's RDATA covers (its first two bytes).
pub fn covered(rdata: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*rdata.first()?, *rdata.get(1)?]))
}

/// The signatures in `sigs` (a node's RRSIG RRset) that cover `rtype`.
pub fn sigs_covering(sigs: Option<&Rrset>, rtype: u16) -> impl Iterator<Item = &[u8]> {
    sigs.into_iter().flat_map(|s| s.rdata.iter()).filter(move |d| covered(d) == Some(rtype))
}

impl Denial {
    /// The data of `zone`, from every node.
    pub fn build(zone: &Zone) -> Denial {
        let apex = zone.nodes.get(&*zone.apex);
        let signed = apex
            .and_then(|n| n.rrset(rtype::RRSIG))
            .is_some_and(|s| s.rdata.iter().any(|d| covered(d) == Some(rtype::SOA)));
        let mut nsec: Vec<NameKey> = Vec::new();
        let nsec3 = apex.and_then(|n| n.rrset(rtype::NSEC3PARAM)).and_then(|p| p.rdata.first()).and_then(nsec3param);
        let mut nsec3_owners = Vec::new();
        for (owner, node) in &zone.nodes {
            if node.rrset(rtype::NSEC).is_some() {
                nsec.push(owner.clone());
            }
            if let (Some(p), Some(n3)) = (&nsec3, node.rrset(rtype::NSEC3)) {
                let same = n3.rdata.iter().any(|d| nsec3_record_params(d).as_ref() == Some(p));
                if let (true, Some(label)) = (same, name::labels(owner).next()) {
                    nsec3_owners.push((label.to_ascii_lowercase().into_boxed_slice(), owner.clone()));
                }
            }
        }
        nsec.sort_unstable_by(|a, b| canonical_cmp(a, b));
        nsec3_owners.sort_unstable();
        let nsec3_prefixes = nsec3_owners.iter().map(|(l, _)| label_prefix(l)).collect();
        let mut d = Denial { signed, nsec, nsec3, nsec3_owners, nsec3_prefixes, apex: (zone.apex.clone(), None) };
        d.find_apex();
        d
    }

    /// Find the NSEC3 owner matching the apex again (after the owners changed).
    fn find_apex(&mut self) {
        let found = self.nsec3_search(&self.apex.0).and_then(|(o, m)| m.then(|| o.clone()));
        self.apex.1 = found;
    }

    /// Bring the data of a version of `zone` level with `zone`, where the two differ only at
    /// `names` (lowercased; an IXFR's touched names): each is put in or taken out of the
    /// NSEC and NSEC3 owners as its node now says, in place (a binary search and one insert or
    /// remove each), not rebuilt from every node. A changed NSEC3PARAM at the apex (another
    /// chain) rebuilds it whole. Gives whether it was rebuilt.
    pub fn update<N: AsRef<[u8]>>(&mut self, zone: &Zone, names: &[N]) -> bool {
        let apex = zone.nodes.get(&*zone.apex);
        let nsec3 = apex.and_then(|n| n.rrset(rtype::NSEC3PARAM)).and_then(|p| p.rdata.first()).and_then(nsec3param);
        if nsec3 != self.nsec3 {
            *self = Denial::build(zone);
            return true;
        }
        self.signed = apex
            .and_then(|n| n.rrset(rtype::RRSIG))
            .is_some_and(|s| s.rdata.iter().any(|d| covered(d) == Some(rtype::SOA)));
        for n in names {
            let n = n.as_ref();
            let node = zone.nodes.get(n);
            let has = node.is_some_and(|x| x.rrset(rtype::NSEC).is_some());
            match self.nsec.binary_search_by(|o| canonical_cmp(o, n)) {
                Ok(i) if !has => {
                    self.nsec.remove(i);
                }
                Err(i) if has => self.nsec.insert(i, n.into()),
                _ => {}
            }
            let (Some(p), Some(label)) = (&self.nsec3, name::labels(n).next()) else { continue };
            let label = label.to_ascii_lowercase();
            let has = node
                .and_then(|x| x.rrset(rtype::NSEC3))
                .is_some_and(|s| s.rdata.iter().any(|d| nsec3_record_params(d).as_ref() == Some(p)));
            match self.nsec3_owners.binary_search_by(|(l, o)| (&l[..], &o[..]).cmp(&(&label[..], n))) {
                Ok(i) if !has => {
                    self.nsec3_owners.remove(i);
                    self.nsec3_prefixes.remove(i);
                }
                Err(i) if has => {
                    self.nsec3_prefixes.insert(i, label_prefix(&label));
                    self.nsec3_owners.insert(i, (label.into_boxed_slice(), n.into()));
                }
                _ => {}
            }
        }
        self.find_apex();
        false
    }

    /// The NSEC owner that covers or matches `qname` (the greatest owner not after it in
    /// canonical order; before the first owner, the last wraps around).
    pub fn nsec_covering(&self, qname: &[u8]) -> Option<&NameKey> {
        let i = self.nsec.partition_point(|o| canonical_cmp(o, qname) != Ordering::Greater);
        if self.nsec.is_empty() {
            return None;
        }
        Some(&self.nsec[if i == 0 { self.nsec.len() - 1 } else { i - 1 }])
    }

    /// The NSEC3 owner whose hash is `qname`'s, if any.
    pub fn nsec3_matching(&self, qname: &[u8]) -> Option<&NameKey> {
        if qname == &self.apex.0[..] {
            return self.apex.1.as_ref();
        }
        self.nsec3_search(qname).and_then(|(o, matched)| matched.then_some(o))
    }

    /// The NSEC3 owner whose interval covers `qname`'s hash (or matches it).
    pub fn nsec3_covering(&self, qname: &[u8]) -> Option<&NameKey> {
        self.nsec3_search(qname).map(|(o, _)| o)
    }

    /// Where `qname`'s hash falls in the chain, with one hash and one search: the owner whose
    /// interval covers it or that matches it (as [`Denial::nsec3_covering`]), and whether it
    /// matches. `None` without a usable chain.
    pub fn nsec3_search(&self, qname: &[u8]) -> Option<(&NameKey, bool)> {
        let p = self.nsec3.as_ref()?;
        let h = nsec3_label(qname, p)?;
        if self.nsec3_owners.is_empty() {
            return None;
        }
        let owners = &self.nsec3_owners;
        let i = if self.nsec3_prefixes.len() == owners.len() {
            // the owners before `lo` sort before the hash, those from `hi` on after it
            let hp = label_prefix(&h);
            let lo = self.nsec3_prefixes.partition_point(|&p| p < hp);
            let hi = lo + self.nsec3_prefixes[lo..].partition_point(|&p| p == hp);
            lo + owners[lo..hi].partition_point(|(l, _)| l[..] <= h[..])
        } else {
            owners.partition_point(|(l, _)| l[..] <= h[..])
        };
        let i = if i == 0 { owners.len() - 1 } else { i - 1 };
        let (l, o) = &owners[i];
        Some((o, l[..] == h[..]))
    }
}

/// The name one label longer than `ancestor` on the way to `name` (RFC 5155's next closer
/// name), or `None` if `ancestor` is not a proper suffix of `name`.
pub fn next_closer<'n>(name: &'n [u8], ancestor: &[u8]) -> Option<&'n [u8]> {
    let mut prev = None;
    for o in name::suffix_offsets(name) {
        if &name[o..] == ancestor {
            return prev.map(|p: usize| &name[p..]);
        }
        prev = Some(o);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Rdatas;
    use hashbrown::HashMap;

    fn n(text: &str) -> Vec<u8> {
        name::from_presentation(text).unwrap().to_ascii_lowercase()
    }

    /// `t.` with NSEC3PARAM 1 0 0 - and an NSEC3 (of those parameters) at the hash of each
    /// of `chained`; `a.t.`, `b.t.`, `c.d.t.` exist (TXT).
    fn nsec3_zone(chained: &[&str]) -> Zone {
        let p = Nsec3Params { algorithm: 1, iterations: 0, salt: Vec::new() };
        let rrset = |rtype: u16, rd: &[u8]| Rrset { rtype, ttl: 60, rdata: Rdatas::one(rd) };
        let mut nodes: HashMap<NameKey, Node> = HashMap::new();
        nodes.insert(n("t.").into(), Node { rrsets: vec![rrset(rtype::NSEC3PARAM, &[1, 0, 0, 0, 0])] });
        for x in ["a.t.", "b.t.", "c.d.t."] {
            nodes.insert(n(x).into(), Node { rrsets: vec![rrset(16, b"\x01x")] });
        }
        for c in chained {
            let owner = [&[32u8][..], &nsec3_label(&n(c), &p).unwrap(), &n("t.")].concat();
            let rd = [&[1u8, 1, 0, 0, 0, 20][..], &[0; 20], &[0, 1, 0x40]].concat();
            nodes.insert(owner.into(), Node { rrsets: vec![rrset(rtype::NSEC3, &rd)] });
        }
        Zone::new(n("t.").into(), nodes, "t.zone".into(), 1)
    }

    /// What the chain says of `q` by a walk over every owner: the matching owner, and the
    /// covering one (the greatest label not after the hash, the last before the first).
    fn by_walk<'d>(d: &'d Denial, q: &[u8]) -> (Option<&'d NameKey>, Option<&'d NameKey>) {
        let h = nsec3_label(q, d.nsec3.as_ref().unwrap()).unwrap();
        let m = d.nsec3_owners.iter().find(|(l, _)| l[..] == h[..]).map(|(_, o)| o);
        let c = d.nsec3_owners.iter().rev().find(|(l, _)| l[..] <= h[..]).or(d.nsec3_owners.last()).map(|(_, o)| o);
        (m, c)
    }

    /// One search gives the matching and the covering owner, the apex's found once and found
    /// again when an in-place update changes the chain (without that, the apex would keep the
    /// NSEC3 the update took away).
    #[test]
    fn nsec3_search_matches_a_walk_and_follows_updates() {
        let names = ["t.", "a.t.", "b.t.", "d.t.", "c.d.t.", "x.t."];
        let z = nsec3_zone(&["t.", "a.t.", "d.t.", "c.d.t."]);
        let mut d = Denial::build(&z);
        assert_eq!(d.nsec3_owners.len(), 4);
        for q in names {
            let q = n(q);
            let (m, c) = by_walk(&d, &q);
            assert_eq!(d.nsec3_matching(&q), m, "{q:?}");
            assert_eq!(d.nsec3_covering(&q), c, "{q:?}");
            assert_eq!(d.nsec3_search(&q), c.map(|c| (c, m.is_some())), "{q:?}");
        }
        assert!(d.nsec3_matching(&n("t.")).is_some());
        assert!(d.nsec3_matching(&n("b.t.")).is_none());
        // the apex's NSEC3 taken away, and given back, in place
        let p = d.nsec3.clone().unwrap();
        let apex_owner = [&[32u8][..], &nsec3_label(&n("t."), &p).unwrap(), &n("t.")].concat();
        let z2 = nsec3_zone(&["a.t.", "d.t.", "c.d.t."]);
        assert!(!d.update(&z2, &[&apex_owner]));
        assert_eq!(d.nsec3_owners.len(), 3);
        assert_eq!(d.nsec3_matching(&n("t.")), None);
        assert_eq!(d.nsec3_matching(&n("t.")), by_walk(&d, &n("t.")).0);
        assert!(!d.update(&z, &[&apex_owner]));
        assert_eq!(d.nsec3_matching(&n("t.")).map(|o| &o[..]), Some(&apex_owner[..]));
        // the prefixes follow the owners through the updates
        let want: Vec<u64> = d.nsec3_owners.iter().map(|(l, _)| label_prefix(l)).collect();
        assert_eq!(d.nsec3_prefixes, want);
    }

    /// Labels that share their first eight bytes, or are shorter than eight (not hashes: a
    /// zone may hold such NSEC3 owners), are told apart by the whole label.
    #[test]
    fn nsec3_search_with_equal_prefixes() {
        let p = Nsec3Params { algorithm: 1, iterations: 0, salt: Vec::new() };
        let h = |q: &str| nsec3_label(&n(q), &p).unwrap();
        let (ha, hb) = (h("a.t."), h("b.t."));
        let mut labels: Vec<Box<[u8]>> = vec![
            ha.clone(),
            [&ha[..8], &b"0"[..]].concat().into(),
            [&ha[..8], &b"zzzz"[..]].concat().into(),
            ha[..3].into(),
            [&ha[..3], &b"\0"[..]].concat().into(),
            hb.clone(),
        ];
        labels.sort_unstable();
        let nsec3_owners: Vec<(Box<[u8]>, NameKey)> = labels.iter().map(|l| (l.clone(), [&[l.len() as u8][..], l, &n("t.")].concat().into())).collect();
        let nsec3_prefixes = nsec3_owners.iter().map(|(l, _)| label_prefix(l)).collect();
        let d = Denial { signed: true, nsec: Vec::new(), nsec3: Some(p), nsec3_owners, nsec3_prefixes, apex: (n("t.").into(), None) };
        for q in ["a.t.", "b.t.", "c.t.", "d.t.", "e.t.", "f.t.", "g.t."] {
            let q = n(q);
            let (m, c) = by_walk(&d, &q);
            assert_eq!(d.nsec3_search(&q), c.map(|c| (c, m.is_some())), "{q:?}");
        }
        assert!(d.nsec3_search(&n("a.t.")).unwrap().1);
        assert!(d.nsec3_search(&n("b.t.")).unwrap().1);
    }

    #[test]
    fn nsec3_hashes_of_rfc5155_appendix_a() {
        let p = Nsec3Params { algorithm: 1, iterations: 12, salt: vec![0xaa, 0xbb, 0xcc, 0xdd] };
        for (owner, label) in [("example.", "0p9mhaveqvm6t7vbl5lop2u3t2rp3tom"), ("a.example.", "35mthgpgcu1qg68fab165klnsnk3dpvl")] {
            assert_eq!(&nsec3_label(&n(owner), &p).unwrap()[..], label.as_bytes(), "{owner}");
            assert_eq!(nsec3_label_digest(label.as_bytes()), nsec3_digest(&n(owner), &p), "{owner}: the label spells the hash");
            assert_eq!(nsec3_label_digest(label.to_ascii_uppercase().as_bytes()), nsec3_digest(&n(owner), &p));
        }
        assert_eq!(nsec3_label_digest(b"0p9mhaveqvm6t7vbl5lop2u3t2rp3to"), None, "31 digits spell no SHA-1 hash");
        assert_eq!(nsec3_digest(&n("example."), &Nsec3Params { algorithm: 2, ..p }), None);
    }

    #[test]
    fn canonical_order_is_rfc4034_example() {
        // RFC 4034 §6.1's example, in order.
        let names = ["example.", "a.example.", "yljkjljk.a.example.", "z.a.example.", "zabc.a.example.", "z.example.", "\\001.z.example.", "*.z.example.", "\\200.z.example."];
        let keys: Vec<Vec<u8>> = names.iter().map(|s| n(s)).collect();
        for w in keys.windows(2) {
            assert_eq!(canonical_cmp(&w[0], &w[1]), Ordering::Less, "{:?} < {:?}", w[0], w[1]);
        }
    }

    #[test]
    fn nsec3_hash_is_rfc5155_appendix_a() {
        // RFC 5155 Appendix A: salt aabbccdd, 12 iterations.
        let p = Nsec3Params { algorithm: 1, iterations: 12, salt: vec![0xaa, 0xbb, 0xcc, 0xdd] };
        let cases = [
            ("example.", "0p9mhaveqvm6t7vbl5lop2u3t2rp3tom"),
            ("a.example.", "35mthgpgcu1qg68fab165klnsnk3dpvl"),
            ("ns1.example.", "2t7b4g4vsa5smi47k61mv5bv1a22bojr"),
            ("*.w.example.", "r53bq7cc2uvmubfu5ocmm6pers9tk9en"),
        ];
        for (owner, want) in cases {
            let got = nsec3_label(&n(owner), &p).unwrap();
            assert_eq!(std::str::from_utf8(&got).unwrap(), want, "{owner}");
        }
    }

    #[test]
    fn next_closer_table() {
        assert_eq!(next_closer(&n("a.b.c.example."), &n("c.example.")), Some(&n("b.c.example.")[..]));
        assert_eq!(next_closer(&n("c.example."), &n("c.example.")), None);
        assert_eq!(next_closer(&n("c.example."), &n("x.")), None);
    }
}
