//! A zone built record by record from wire data (a zone transfer as it arrives), checked as
//! the loader checks a master file: the same insertion (one TTL per RRset, the smallest;
//! duplicates dropped; RRsets sorted by type; RDATA packed per RRset), empty non-terminals
//! added as owners arrive, owners outside the zone refused, then [`validate::validate`].
//!
//! Nothing is allocated per record: a record's owner is copied only when it is a new node, its
//! RDATA into its RRset's buffer.
//!
//! Validation looks only where it can find something: the builder notes, as records arrive,
//! the owners of the types the rules are about (SOA, CNAME, DS) and whether the zone has
//! cuts (NS below the apex) or signatures (RRSIG). Without cuts and signatures no other node
//! can break a rule (see `validate`'s table), so [`RecordBuilder::build`] validates the apex
//! and the noted owners only; with either, the whole zone, as the loader does.

use std::path::PathBuf;

use hashbrown::hash_map::EntryRef;
use hashbrown::HashMap;

use crate::load::{insert_rr, key_to_text, settle_rrsets, Inserted, LoadError, MAX_ERRORS, MAX_WARNINGS};
use crate::tree::{NameKey, Node, Zone};
use crate::validate;

/// A zone in the making.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordBuilder {
    apex: NameKey,
    nodes: HashMap<NameKey, Node>,
    /// Reasons of refused records (at most [`MAX_ERRORS`]) and how many there were.
    errors: Vec<String>,
    refused: usize,
    /// TTL differences within an RRset (at most [`MAX_WARNINGS`]).
    warnings: Vec<String>,
    records: usize,
    /// Owners (not the apex) of SOA, CNAME and DS records, in arrival order (repeats
    /// possible): all that validation has to look at when `whole` is false.
    notable: Vec<NameKey>,
    /// A cut (NS below the apex) or a signature arrived: validation must see every node.
    whole: bool,
    /// The apex has a node (made by its own record or as an ancestor).
    apex_present: bool,
}

/// What [`RecordBuilder::build`] made: the zone (validated only when `errors` is empty).
#[derive(Debug)]
pub struct Built {
    pub zone: Zone,
    pub errors: Vec<LoadError>,
    pub warnings: Vec<LoadError>,
}

impl RecordBuilder {
    /// An empty zone at `apex` (a lowercased wire name).
    pub fn new(apex: NameKey) -> Self {
        Self::with_capacity(apex, 0)
    }

    /// [`RecordBuilder::new`] with room for `nodes` names (e.g. the previous version's count),
    /// so that the node table does not grow step by step as a large zone arrives.
    pub fn with_capacity(apex: NameKey, nodes: usize) -> Self {
        RecordBuilder {
            apex,
            nodes: HashMap::with_capacity(nodes),
            errors: Vec::new(),
            refused: 0,
            warnings: Vec::new(),
            records: 0,
            notable: Vec::new(),
            whole: false,
            apex_present: false,
        }
    }

    /// The apex.
    pub fn apex(&self) -> &[u8] {
        &self.apex
    }

    /// Records added so far (duplicates and refused ones included).
    pub fn records(&self) -> usize {
        self.records
    }

    /// Add one record: `owner` a lowercased wire name, `rdata` uncompressed wire RDATA.
    pub fn add(&mut self, owner: &[u8], rtype: u16, ttl: u32, rdata: &[u8]) {
        self.records += 1;
        if rdata.len() > 65_535 {
            self.refuse(format!("{}: RDATA longer than 65535 octets", key_to_text(owner)));
            return;
        }
        use xdns_wire::rtype::{CNAME, DS, NS, RRSIG, SOA};
        match rtype {
            RRSIG => self.whole = true,
            NS if owner != &self.apex[..] => self.whole = true,
            SOA | CNAME | DS if owner != &self.apex[..] && !self.whole => self.notable.push(owner.into()),
            _ => {}
        }
        // one hash of the owner, whether its node exists or is made here
        let inserted = match self.nodes.entry_ref(owner) {
            EntryRef::Occupied(mut node) => insert_rr(node.get_mut(), rtype, ttl, rdata),
            EntryRef::Vacant(_) if !validate::in_zone(&self.apex, owner) => {
                let reason = validate::out_of_zone_reason(owner, &self.apex);
                self.refuse(reason);
                return;
            }
            EntryRef::Vacant(vacant) => {
                let mut node = Node { rrsets: Vec::with_capacity(1) };
                let r = insert_rr(&mut node, rtype, ttl, rdata);
                vacant.insert_with_key(owner.into(), node);
                self.ancestors(owner);
                r
            }
        };
        // RRSIGs take the TTL of the RRset each covers (RFC 4034 §3): no warning, as the loader
        if let (Inserted::TtlDiffers { old, new }, false) = (inserted, rtype == xdns_wire::rtype::RRSIG) {
            if self.warnings.len() < MAX_WARNINGS {
                self.warnings.push(format!(
                    "TTL {new} differs from TTL {old} of the {} RRset at {}; using {}",
                    validate::type_name(rtype),
                    key_to_text(owner),
                    old.min(new)
                ));
            }
        }
    }

    /// The empty non-terminals above the new node `owner` (in the zone), up to the first
    /// ancestor that exists (whose ancestors exist too). The apex, once present, is known
    /// without a hash.
    fn ancestors(&mut self, owner: &[u8]) {
        if owner.len() == self.apex.len() {
            self.apex_present = true;
            return;
        }
        let mut pos = 0usize;
        while owner.len() - pos > self.apex.len() {
            pos += 1 + owner[pos] as usize;
            let name = &owner[pos..];
            if name.len() == self.apex.len() && self.apex_present {
                break;
            }
            match self.nodes.entry_ref(name) {
                EntryRef::Occupied(_) => break,
                EntryRef::Vacant(v) => {
                    v.insert_with_key(name.into(), Node::default());
                }
            }
            if name.len() == self.apex.len() {
                self.apex_present = true;
            }
        }
    }

    fn refuse(&mut self, reason: String) {
        self.refused += 1;
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(reason);
        }
    }

    /// Every record added (duplicates dropped), in no particular order: for tests and for
    /// writing a refused copy out.
    pub fn for_each_record(&self, mut f: impl FnMut(&[u8], u16, u32, &[u8])) {
        for (owner, node) in &self.nodes {
            for rr in &node.rrsets {
                for rd in &rr.rdata {
                    f(owner, rr.rtype, node.record_ttl(rr, rd), rd);
                }
            }
        }
    }

    /// The zone, validated when no record was refused; errors and warnings name `file`
    /// (where the copy is kept) and the owner.
    pub fn build(mut self, file: PathBuf) -> Built {
        settle_rrsets(&mut self.nodes);
        let serial = self
            .nodes
            .get(&self.apex)
            .and_then(|n| n.rrset(xdns_wire::rtype::SOA))
            .and_then(|s| s.rdata.first())
            .filter(|d| d.len() >= 20)
            .map(|d| u32::from_be_bytes(d[d.len() - 20..d.len() - 16].try_into().unwrap_or_default()))
            .unwrap_or(0);
        let err = |reason: String| LoadError { file: file.clone(), line: None, reason };
        let mut errors: Vec<LoadError> = self.errors.into_iter().map(err).collect();
        if self.refused > errors.len() {
            errors.push(err(format!("{} more records refused", self.refused - errors.len())));
        }
        let mut warnings: Vec<LoadError> = self.warnings.into_iter().map(err).collect();
        let zone = Zone::new(self.apex, self.nodes, file, serial);
        if errors.is_empty() {
            let findings = if self.whole {
                validate::validate(&zone)
            } else {
                let mut names = self.notable;
                names.sort_unstable();
                names.dedup();
                validate::validate(&Only { zone: &zone, names: &names })
            };
            errors = findings.errors;
            warnings.extend(findings.warnings);
        }
        Built { zone, errors, warnings }
    }
}

/// A zone as validation sees it, narrowed to the apex and `names` (those of a zone without
/// cuts or signatures that the rules are about).
struct Only<'a> {
    zone: &'a Zone,
    names: &'a [NameKey],
}

impl validate::ZoneView for Only<'_> {
    fn apex(&self) -> &[u8] {
        &self.zone.apex
    }
    fn node(&self, name: &[u8]) -> Option<&Node> {
        self.zone.nodes.get(name)
    }
    fn for_each_node(&self, f: &mut dyn FnMut(&[u8], &Node)) {
        let apex = std::iter::once(&self.zone.apex).filter(|a| !self.names.contains(a));
        for name in apex.chain(self.names) {
            if let Some(n) = self.zone.nodes.get(name) {
                f(name, n)
            }
        }
    }
    fn file(&self) -> &std::path::Path {
        &self.zone.file
    }
    fn locate(&self, _name: &[u8], _rtype: u16, _nth: usize) -> Option<(PathBuf, usize)> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::text_to_key;

    fn soa(serial: u32) -> Vec<u8> {
        let mut v = b"\x02ns\x04test\x00\x01h\x04test\x00".to_vec();
        for n in [serial, 60, 60, 600, 60] {
            v.extend_from_slice(&n.to_be_bytes());
        }
        v
    }

    fn k(s: &str) -> NameKey {
        text_to_key(s).unwrap()
    }

    #[test]
    fn builds_as_the_loader_does() {
        let mut b = RecordBuilder::new(k("test."));
        b.add(&k("test."), 6, 60, &soa(7));
        b.add(&k("test."), 2, 60, b"\x02ns\x04test\x00");
        b.add(&k("ns.test."), 1, 60, &[198, 18, 0, 1]);
        b.add(&k("a.b.c.test."), 1, 60, &[198, 18, 0, 2]);
        b.add(&k("a.b.c.test."), 1, 30, &[198, 18, 0, 3]);
        b.add(&k("a.b.c.test."), 1, 60, &[198, 18, 0, 2]); // duplicate
        b.add(&k("a.b.c.test."), 16, 60, b"\x01x");
        let Built { zone, errors, warnings } = b.build("f".into());
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(zone.serial, 7);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].reason.contains("TTL 30 differs from TTL 60"), "{warnings:?}");
        let n = &zone.nodes[&k("a.b.c.test.")];
        assert_eq!(n.rrsets.iter().map(|r| r.rtype).collect::<Vec<_>>(), vec![1, 16]);
        assert_eq!(n.rrsets[0].ttl, 30);
        assert_eq!(n.rrsets[0].rdata.iter().collect::<Vec<_>>(), vec![&[198, 18, 0, 2][..], &[198, 18, 0, 3][..]]);
        // empty non-terminals
        assert!(zone.nodes[&k("b.c.test.")].rrsets.is_empty());
        assert!(zone.nodes[&k("c.test.")].rrsets.is_empty());
        assert_eq!(zone.nodes.len(), 5);
    }

    /// The nodes (with the empty non-terminals and the apex) do not depend on the order the
    /// records arrive in: the apex first (an AXFR), last, or made as an ancestor first.
    #[test]
    fn nodes_do_not_depend_on_arrival_order() {
        let recs: Vec<(&str, u16, Vec<u8>)> = vec![
            ("test.", 6, soa(7)),
            ("test.", 2, b"\x02ns\x04test\x00".to_vec()),
            ("a.b.c.test.", 1, vec![198, 18, 0, 1]),
            ("d.c.test.", 1, vec![198, 18, 0, 2]),
            ("e.test.", 1, vec![198, 18, 0, 3]),
            ("f.e.test.", 16, b"\x01x".to_vec()),
        ];
        let nodes = |order: &[usize]| {
            let mut b = RecordBuilder::new(k("test."));
            for &i in order {
                let (owner, t, rd) = &recs[i];
                b.add(&k(owner), *t, 60, rd);
            }
            let types = |node: &Node| {
                let mut t: Vec<u16> = node.rrsets.iter().map(|r| r.rtype).collect();
                t.sort_unstable();
                t
            };
            let mut v: Vec<(NameKey, Vec<u16>)> = b.nodes.iter().map(|(n, node)| (n.clone(), types(node))).collect();
            v.sort();
            v
        };
        let want = nodes(&[0, 1, 2, 3, 4, 5]);
        let names: Vec<NameKey> = want.iter().map(|(n, _)| n.clone()).collect();
        let mut expect: Vec<NameKey> =
            ["test.", "c.test.", "b.c.test.", "a.b.c.test.", "d.c.test.", "e.test.", "f.e.test."].iter().map(|n| k(n)).collect();
        expect.sort();
        assert_eq!(names, expect);
        assert_eq!(want.iter().find(|(n, _)| *n == k("test.")).map(|(_, t)| t.clone()), Some(vec![2, 6]));
        for order in [[2, 3, 4, 5, 0, 1], [5, 2, 0, 3, 1, 4], [4, 0, 5, 1, 3, 2]] {
            assert_eq!(nodes(&order), want, "{order:?}");
        }
        // no record at the apex (yet): the apex is an empty non-terminal
        let below = nodes(&[2, 3, 4, 5]);
        assert_eq!(below.iter().find(|(n, _)| *n == k("test.")).map(|(_, t)| t.clone()), Some(vec![]), "{below:?}");
        assert_eq!(below.len(), 7);
    }

    /// The narrowed validation finds what the whole one finds, with and without cuts and
    /// signatures.
    #[test]
    fn narrowed_validation_finds_what_the_whole_finds() {
        type Recs = Vec<(&'static str, u16, Vec<u8>)>;
        let a = |x: u8| vec![198, 18, 0, x];
        let cases: Vec<(&str, Recs)> = vec![
            ("plain", vec![("a.test.", 1, a(1)), ("b.c.test.", 16, b"\x01x".to_vec())]),
            ("cname beside data", vec![("a.test.", 5, b"\x01b\x04test\x00".to_vec()), ("a.test.", 1, a(1))]),
            ("two cnames", vec![("a.test.", 5, b"\x01b\x04test\x00".to_vec()), ("a.test.", 5, b"\x01c\x04test\x00".to_vec())]),
            ("ds not at a cut", vec![("a.test.", 43, vec![0, 1, 8, 2, 1, 2, 3, 4]), ("a.test.", 1, a(1))]),
            ("ds at the apex", vec![("test.", 43, vec![0, 1, 8, 2, 1, 2, 3, 4])]),
            ("data below a cut", vec![
                ("sub.test.", 2, b"\x02ns\x03sub\x04test\x00".to_vec()),
                ("x.sub.test.", 16, b"\x01x".to_vec()),
                ("ns.sub.test.", 1, a(2)),
                ("sub.test.", 16, b"\x01y".to_vec()),
                ("sub.test.", 43, vec![0, 1, 8, 2, 1, 2, 3, 4]),
            ]),
            ("signed", vec![("a.test.", 1, a(1)), ("a.test.", 46, vec![0, 1, 8, 2, 0, 0, 0, 60, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 4, b't', b'e', b's', b't', 0, 9])]),
        ];
        for (what, recs) in cases {
            let mut b = RecordBuilder::new(k("test."));
            b.add(&k("test."), 6, 60, &soa(7));
            b.add(&k("test."), 2, 60, b"\x02ns\x04test\x00");
            for (owner, t, rd) in &recs {
                b.add(&k(owner), *t, 60, rd);
            }
            let built = b.build("f".into());
            let whole = validate::validate(&built.zone);
            let mut want = whole.warnings.clone();
            want.sort_by_key(|e| e.reason.clone());
            let mut got = built.warnings.clone();
            got.sort_by_key(|e| e.reason.clone());
            assert_eq!(built.errors, whole.errors, "{what}");
            assert_eq!(got, want, "{what}");
            let expect_errors = matches!(what, "cname beside data" | "two cnames" | "ds not at a cut" | "ds at the apex");
            assert_eq!(!built.errors.is_empty(), expect_errors, "{what}: {:?}", built.errors);
        }
    }

    #[test]
    fn refused_and_invalid() {
        let mut b = RecordBuilder::new(k("test."));
        b.add(&k("test."), 6, 60, &soa(7));
        b.add(&k("test."), 2, 60, b"\x02ns\x04test\x00");
        b.add(&k("other."), 1, 60, &[1, 2, 3, 4]);
        let built = b.build("f".into());
        assert_eq!(built.errors.len(), 1, "{:?}", built.errors);
        assert!(built.errors[0].to_string().starts_with("f: "), "{}", built.errors[0]);
        // no NS at the apex: the validation's error
        let mut b = RecordBuilder::new(k("test."));
        b.add(&k("test."), 6, 60, &soa(7));
        let built = b.build("f".into());
        assert!(built.errors.iter().any(|e| e.reason.contains("missing NS")), "{:?}", built.errors);
    }
}
