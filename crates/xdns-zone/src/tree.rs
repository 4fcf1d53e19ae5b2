//! In-memory zone data: the contract between the loader and the lookup.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use hashbrown::HashMap;

/// A domain name as lowercased, uncompressed wire bytes (`\x03www\x07example\x03com\x00`).
/// Lookup keys everywhere (userspace maps, BPF maps) are this form.
pub type NameKey = Box<[u8]>;

/// One RRset: all records of one type at one owner (class is always IN).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rrset {
    pub rtype: u16,
    /// RFC 2181 §5.2: one TTL per RRset; the loader uses the smallest TTL seen and warns.
    pub ttl: u32,
    /// Uncompressed wire RDATA of each record, names as written in the zone file (case kept),
    /// duplicates removed, in zone-file order.
    pub rdata: Vec<Bytes>,
}

/// A node of the zone tree. Empty non-terminals exist as nodes with no RRsets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// RRsets sorted by type.
    pub rrsets: Vec<Rrset>,
}

impl Node {
    pub fn rrset(&self, rtype: u16) -> Option<&Rrset> {
        self.rrsets
            .binary_search_by_key(&rtype, |r| r.rtype)
            .ok()
            .map(|i| &self.rrsets[i])
    }
}

/// A loaded, validated zone.
#[derive(Clone, Debug)]
pub struct Zone {
    /// The apex, as a lowercased wire name.
    pub apex: NameKey,
    /// Every name in the zone, including empty non-terminals between the apex and each owner,
    /// and the names below zone cuts (occluded data is kept but never answered from).
    pub nodes: HashMap<NameKey, Node>,
    /// The file the zone came from (for messages).
    pub file: PathBuf,
    /// SOA serial, for logs and stats.
    pub serial: u32,
    /// DNSSEC denial data (NSEC/NSEC3 chains), built on first use ([`crate::dnssec`]).
    pub denial: crate::dnssec::DenialCell,
}

impl Zone {
    /// A zone of these nodes (its DNSSEC data is built when first needed).
    pub fn new(apex: NameKey, nodes: HashMap<NameKey, Node>, file: PathBuf, serial: u32) -> Zone {
        Zone { apex, nodes, file, serial, denial: Default::default() }
    }

    /// The zone's DNSSEC data.
    pub fn dnssec(&self) -> &crate::dnssec::Denial {
        self.denial.get(self)
    }

    /// The node of `name` in the zone's name space: NSEC3-only names (RFC 5155 §7.2.8) are
    /// not part of it.
    pub fn node(&self, name: &[u8]) -> Option<&Node> {
        self.nodes.get(name).filter(|n| !crate::dnssec::is_nsec3_only(n))
    }
}

/// All zones served, keyed by apex. Immutable once built; reload builds a new one.
#[derive(Clone, Debug, Default)]
pub struct ZoneSet {
    pub zones: HashMap<NameKey, Arc<Zone>>,
}

impl ZoneSet {
    /// The zone with the longest apex that is a suffix of `qname` (lowercased wire), if any.
    pub fn find(&self, qname: &[u8]) -> Option<&Arc<Zone>> {
        let mut pos = 0usize;
        loop {
            if let Some(z) = self.zones.get(&qname[pos..]) {
                return Some(z);
            }
            let len = *qname.get(pos)? as usize;
            if len == 0 {
                return None;
            }
            pos += 1 + len;
        }
    }
}
