//! A zone built record by record from wire data (a zone transfer as it arrives), checked as
//! the loader checks a master file: the same insertion (one TTL per RRset, the smallest;
//! duplicates dropped; RRsets sorted by type; RDATA packed per RRset), empty non-terminals
//! added as owners arrive, owners outside the zone refused, then [`validate::validate`].
//!
//! Nothing is allocated per record: a record's owner is copied only when it is a new node, its
//! RDATA into its RRset's buffer.

use std::path::PathBuf;

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
        RecordBuilder { apex, nodes: HashMap::new(), errors: Vec::new(), refused: 0, warnings: Vec::new(), records: 0 }
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
        let inserted = if let Some(node) = self.nodes.get_mut(owner) {
            insert_rr(node, rtype, ttl, rdata)
        } else if !validate::in_zone(&self.apex, owner) {
            let reason = validate::out_of_zone_reason(owner, &self.apex);
            self.refuse(reason);
            return;
        } else {
            let mut node = Node { rrsets: Vec::with_capacity(1) };
            let r = insert_rr(&mut node, rtype, ttl, rdata);
            self.nodes.insert(owner.into(), node);
            // empty non-terminals up to the apex (ancestors of an existing node exist)
            let mut pos = 0usize;
            while owner.len() - pos > self.apex.len() {
                pos += 1 + owner[pos] as usize;
                if self.nodes.contains_key(&owner[pos..]) {
                    break;
                }
                self.nodes.insert(owner[pos..].into(), Node::default());
            }
            r
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
                    f(owner, rr.rtype, rr.ttl, rd);
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
            let findings = validate::validate(&zone);
            errors = findings.errors;
            warnings.extend(findings.warnings);
        }
        Built { zone, errors, warnings }
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
