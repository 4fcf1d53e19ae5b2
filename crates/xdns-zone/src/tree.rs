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
    pub rdata: Rdatas,
}

/// The RDATA of one RRset, packed into one buffer: each record is a 16-bit big-endian length
/// and its bytes. One allocation per RRset instead of a vector of handles into shared arenas
/// (32 bytes per record for the handle alone); records are read in order, which is how every
/// user reads them (RRsets are small; `get(i)` scans).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Rdatas {
    buf: Vec<u8>,
}

impl Rdatas {
    /// An empty set.
    pub const fn new() -> Rdatas {
        Rdatas { buf: Vec::new() }
    }
    /// A set of one record.
    pub fn one(rd: &[u8]) -> Rdatas {
        let mut r = Rdatas { buf: Vec::with_capacity(2 + rd.len()) };
        r.push(rd);
        r
    }
    /// Number of records.
    pub fn len(&self) -> usize {
        self.iter().count()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Appends a record (at most 65,535 bytes: longer RDATA is not representable on the wire).
    pub fn push(&mut self, rd: &[u8]) {
        let n = u16::try_from(rd.len()).expect("RDATA longer than 65535 octets");
        self.buf.extend_from_slice(&n.to_be_bytes());
        self.buf.extend_from_slice(rd);
    }
    /// The records in order.
    pub fn iter(&self) -> RdataIter<'_> {
        RdataIter { buf: &self.buf }
    }
    pub fn first(&self) -> Option<&[u8]> {
        self.iter().next()
    }
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        self.iter().nth(i)
    }
    pub fn contains(&self, rd: &[u8]) -> bool {
        self.iter().any(|x| x == rd)
    }
    /// Keeps the records for which `f` is true, in order.
    pub fn retain(&mut self, mut f: impl FnMut(&[u8]) -> bool) {
        let old = std::mem::take(self);
        for rd in old.iter() {
            if f(rd) {
                self.push(rd);
            }
        }
        self.shrink_to_fit();
    }
    /// Sorts the records by their bytes.
    pub fn sort(&mut self) {
        let mut v: Vec<&[u8]> = self.iter().collect();
        v.sort();
        let mut out = Rdatas { buf: Vec::with_capacity(self.buf.len()) };
        v.into_iter().for_each(|rd| out.push(rd));
        *self = out;
    }
    /// Replaces record `i` (no-op when out of range).
    pub fn set(&mut self, i: usize, rd: &[u8]) {
        let old = std::mem::take(self);
        for (j, x) in old.iter().enumerate() {
            self.push(if j == i { rd } else { x });
        }
    }
    /// Gives back spare capacity (the loader grows sets one record at a time).
    pub fn shrink_to_fit(&mut self) {
        self.buf.shrink_to_fit();
    }
    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.buf.capacity()
    }
}

impl std::fmt::Debug for Rdatas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().map(Bytes::copy_from_slice)).finish()
    }
}

impl std::ops::Index<usize> for Rdatas {
    type Output = [u8];
    fn index(&self, i: usize) -> &[u8] {
        self.get(i).expect("RDATA index out of range")
    }
}

impl<T: AsRef<[u8]>> FromIterator<T> for Rdatas {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Rdatas {
        let mut r = Rdatas::new();
        it.into_iter().for_each(|x| r.push(x.as_ref()));
        r.shrink_to_fit();
        r
    }
}

impl<T: AsRef<[u8]>> From<Vec<T>> for Rdatas {
    fn from(v: Vec<T>) -> Rdatas {
        v.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a Rdatas {
    type Item = &'a [u8];
    type IntoIter = RdataIter<'a>;
    fn into_iter(self) -> RdataIter<'a> {
        self.iter()
    }
}

/// The records of an [`Rdatas`], in order.
#[derive(Clone)]
pub struct RdataIter<'a> {
    buf: &'a [u8],
}

impl<'a> Iterator for RdataIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let (h, rest) = self.buf.split_first_chunk::<2>()?;
        let n = u16::from_be_bytes(*h) as usize;
        let (rd, rest) = rest.split_at(n);
        self.buf = rest;
        Some(rd)
    }
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

    /// The TTL record `rd` of this node's `rr` is written with, one record at a time (a
    /// transfer, the journal, a stored copy): the RRset's, except for an RRSIG, which takes
    /// the TTL of the RRset it covers here (RFC 4034 §3). A node's RRSIGs are one RRset whose
    /// TTL is the smallest of them (the loader's rule for any RRset), which would otherwise
    /// write every signature with the shortest TTL of the node (an A's with the NSEC's). An
    /// RRSIG covering a type absent here keeps the RRSIG set's TTL.
    pub fn record_ttl(&self, rr: &Rrset, rd: &[u8]) -> u32 {
        if rr.rtype != xdns_wire::rtype::RRSIG {
            return rr.ttl;
        }
        crate::dnssec::covered(rd).and_then(|t| self.rrset(t)).map_or(rr.ttl, |c| c.ttl)
    }
}

/// A loaded, validated zone.
#[derive(Debug)]
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
    /// Records in the zone, counted on first use ([`Zone::record_count`]): counting walks
    /// every node, too slow to do for each `xdns stats` on a zone of millions of records.
    records: std::sync::OnceLock<u64>,
}

/// A clone counts its records afresh: it is made to be changed (an IXFR applied to it).
impl Clone for Zone {
    fn clone(&self) -> Zone {
        Zone {
            apex: self.apex.clone(),
            nodes: self.nodes.clone(),
            file: self.file.clone(),
            serial: self.serial,
            denial: self.denial.clone(),
            records: Default::default(),
        }
    }
}

impl Zone {
    /// A zone of these nodes (its DNSSEC data is built when first needed).
    pub fn new(apex: NameKey, nodes: HashMap<NameKey, Node>, file: PathBuf, serial: u32) -> Zone {
        Zone { apex, nodes, file, serial, denial: Default::default(), records: Default::default() }
    }

    /// This zone, whose records its builder counted: `records` (saves [`Self::record_count`]
    /// the walk over every node).
    pub(crate) fn counted(self, records: u64) -> Zone {
        let _ = self.records.set(records);
        self
    }

    /// Number of records (RDATAs of every RRset), counted once: a zone shared between
    /// threads (`Arc<Zone>`) is not changed any more. Count a zone you are still changing
    /// yourself (or change a clone).
    pub fn record_count(&self) -> u64 {
        *self.records.get_or_init(|| self.nodes.values().flat_map(|n| n.rrsets.iter()).map(|r| r.rdata.len() as u64).sum())
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
