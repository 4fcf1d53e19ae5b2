//! From zones to kernel map entries.
//!
//! [`KernelData`] is what the kernel needs, independent of hashing and generations: every
//! name that exists (with its apex, zone cut and wildcard facts) and every body the lookup can
//! select. [`encode`] turns it into the ABI structs for one generation and seed.
//!
//! Shared NODATA bodies: most names answer "no such type" with the apex SOA only, the same
//! bytes as the apex's own `Other` body once its compression pointers are shifted by the
//! difference in name length, which is what the kernel does for NXDOMAIN bodies anyway. So
//! [`compile_kernel_data`] leaves a name's `Other` body out when it is exactly the apex's,
//! rebased ([`same_when_rebased`]), and [`encode`] marks every node without an `Other` body of
//! its own `XDNS_NODE_NODATA_APEX`: the kernel then looks `Other` up at the apex. The same
//! holds for the NODATA a delegation without DS answers to a DS query (the parent's answer,
//! AA=1, the apex SOA): its `Type(DS)` body is left out when it is the apex's `Other` rebased
//! ([`shareable`]), and the kernel, asked for DS at the cut itself and finding no `Type(DS)`
//! body there, takes the apex's `Other`. So no per-name body carries the SOA for such a cut,
//! and a change of the SOA serial has nothing to rewrite there (issue 28; a TLD's
//! delegations are mostly without DS).
//!
//! Signed zones (issue 28): every `Type` and `Other` key also gets its DO=1 body
//! (`xdns_zone::compile::compile_dnssec`, the base standing for the question) as
//! [`Kind::TypeDo`] / [`Kind::OtherDo`], and NXDOMAIN and wildcard keys get none (the kernel
//! passes those DO=1 queries, bpf/README.md "Signed zones"). A DO=1 NODATA whose first record
//! is the SOA is stored as the name's own part only (`compile::nodata_own_part`,
//! `Body::after_apex`); the apex part comes once, with the apex's `NxDomain` key
//! ([`Kind::ApexDo`]), and the kernel writes it before the own part. In an NSEC3 zone a proof
//! that begins with the apex's NSEC3 (the closest provable encloser proof of an opt-out
//! delegation's DS NODATA or an empty non-terminal directly below the apex) leaves that record
//! to a second apex part ([`Kind::ApexProofDo`]: the SOA, the apex's NSEC3, their RRSIGs;
//! `Body::apex_nsec3`), so that such an own part is the covering NSEC3 alone. A signed zone's
//! DO=0 NODATA is shared with the apex's as an unsigned zone's, its DS at a delegation without
//! DS too: the kernel finds the delegation's DO body (`TypeDo(DS)`, an own part) at the node
//! its walk found (bpf/README.md "Signed zones").

use std::collections::{HashMap, HashSet};

use xdns_wire::Body;
use xdns_zone::lookup::{BodyKey, BodyKind};
use xdns_zone::ZoneSet;

use crate::hash::name_hash;
use crate::types::{
    xdns_answer, xdns_answer_key, xdns_answer_s, xdns_body_class, xdns_body_kind, xdns_body_l,
    xdns_body_m, xdns_node, xdns_node_key,
};

/// Body key kinds (DESIGN-NOTES.md); numbered by `enum xdns_body_kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Type(u16),
    Other,
    Wildcard(u16),
    WildcardOther,
    NxDomain,
    /// A signed zone's `Type` body for DO=1 queries (RRSIGs and proofs).
    TypeDo(u16),
    /// A signed zone's `Other` body for DO=1 queries (for a NODATA: the name's own part,
    /// [`Body::after_apex`], after the apex's [`Kind::ApexDo`]).
    OtherDo,
    /// At a signed zone's apex: the first part of every DO=1 NODATA that is split (the SOA
    /// and its RRSIGs, `xdns_zone::compile::apex_part`).
    ApexDo,
    /// At an NSEC3 zone's apex: the first part of the DO=1 NODATA whose proof begins with the
    /// apex's NSEC3 (`Body::apex_nsec3`): [`Kind::ApexDo`]'s records, then that NSEC3 and its
    /// RRSIGs (`xdns_zone::compile::apex_proof_part`).
    ApexProofDo,
}

impl Kind {
    /// `(kind, qtype)` as stored in `struct xdns_answer_key`.
    pub fn abi(self) -> (u8, u16) {
        let (k, t) = match self {
            Kind::Type(t) => (xdns_body_kind::XDNS_KIND_TYPE, t),
            Kind::Other => (xdns_body_kind::XDNS_KIND_OTHER, 0),
            Kind::Wildcard(t) => (xdns_body_kind::XDNS_KIND_WILDCARD, t),
            Kind::WildcardOther => (xdns_body_kind::XDNS_KIND_WILDCARD_OTHER, 0),
            Kind::NxDomain => (xdns_body_kind::XDNS_KIND_NXDOMAIN, 0),
            Kind::TypeDo(t) => (xdns_body_kind::XDNS_KIND_TYPE_DO, t),
            Kind::OtherDo => (xdns_body_kind::XDNS_KIND_OTHER_DO, 0),
            Kind::ApexDo => (xdns_body_kind::XDNS_KIND_APEX_DO, 0),
            Kind::ApexProofDo => (xdns_body_kind::XDNS_KIND_APEX_PROOF_DO, 0),
        };
        (k.0 as u8, t)
    }
}

/// `xdns_node.flags` bits (`XDNS_NODE_*` of `bpf/xdns_abi.h`; `#define`s are not in the BTF).
pub const NODE_APEX: u16 = 0x1;
pub const NODE_CUT: u16 = 0x2;
pub const NODE_WILDCARD: u16 = 0x4;
/// The node's `Other` body is its apex's, rebased (no entry of its own).
pub const NODE_NODATA_APEX: u16 = 0x8;
/// `xdns_answer.dnssec` of a DO=1 NODATA's own part ([`Body::after_apex`]): the kernel writes
/// the apex's [`Kind::ApexDo`] part before it (`XDNS_DNSSEC_NAME_PART`).
pub const DNSSEC_NAME_PART: u8 = 2;
/// `xdns_answer.dnssec` of an own part after the apex's NSEC3 (`Body::apex_nsec3`): the
/// kernel writes the apex's [`Kind::ApexProofDo`] part before it (`XDNS_DNSSEC_PROOF_PART`).
pub const DNSSEC_PROOF_PART: u8 = 3;

/// One existing name, as the kernel's lookup sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEntry {
    /// Lowercased wire name.
    pub name: Vec<u8>,
    /// Apex of the zone that answers for this name.
    pub apex: Vec<u8>,
    /// The zone cut at or above this name (never the apex), if any.
    pub cut: Option<Vec<u8>>,
    /// `*.name` exists, or the name owns a DNAME: the names below it that are not nodes are
    /// answered per question (`Wildcard` bodies at the name; none at a DNAME's owner, so the
    /// kernel hands those questions to userspace, which substitutes).
    pub wildcard: bool,
}

/// One selectable body: the body key and the engine's compiled bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerEntry {
    /// Base name of the body (lowercased wire).
    pub base: Vec<u8>,
    pub kind: Kind,
    pub body: Body,
}

/// Everything the kernel maps hold for one zone set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelData {
    pub nodes: Vec<NodeEntry>,
    pub answers: Vec<AnswerEntry>,
}

impl From<xdns_zone::lookup::BodyKind> for Kind {
    fn from(k: xdns_zone::lookup::BodyKind) -> Self {
        use xdns_zone::lookup::BodyKind as B;
        match k {
            B::Type(t) => Kind::Type(t),
            B::Other => Kind::Other,
            B::Wildcard(t) => Kind::Wildcard(t),
            B::WildcardOther => Kind::WildcardOther,
            B::NxDomain => Kind::NxDomain,
            // the engine's `enumerate` never lists it (the body depends on the question)
            B::Dname(_) => unreachable!("DNAME substitutions are not compiled for the kernel"),
        }
    }
}

/// Everything the kernel needs for `zones`: the nodes of [`kernel_nodes`] and, for every key
/// of the engine's `enumerate`, the engine's compiled body (bytes never re-encoded here).
/// Keys whose base name belongs to another (child) zone served here are left out, so a
/// parent's referral never shadows the child's own answers. A name's `Other` body (and a
/// cut's `Type(DS)` body) that is the apex's `Other` body rebased ([`same_when_rebased`]) is
/// left out too: the kernel answers it from the apex's (see the module documentation).
///
/// Order: zones by apex, then the engine's `enumerate` order (names sorted), so the same zones
/// always give the same data without sorting every body.
///
/// This holds every body at once; the daemon streams the same entries, in the same order,
/// from [`answers`] and [`nodes`] straight into the kernel maps (`maps::Stream`).
pub fn compile_kernel_data(zones: &ZoneSet) -> KernelData {
    KernelData { nodes: kernel_nodes(zones), answers: answers(zones).collect() }
}

/// How often the daemon reports the answers compiled so far, in answers.
pub const PROGRESS_EVERY: usize = 16384;

/// The served zones, sorted by apex.
fn zones_in_order(zones: &ZoneSet) -> Vec<&xdns_zone::Zone> {
    let mut v: Vec<&xdns_zone::Zone> = zones.zones.values().map(|z| &**z).collect();
    v.sort_unstable_by(|a, b| a.apex.cmp(&b.apex));
    v
}

/// Is `name` (a name of `zone`) answered by `zone`, i.e. not by a served child zone below it
/// (`ZoneSet::find` picks the longest apex)? Without a served zone below `zone`'s apex, every
/// name of it is, and no lookup is needed.
pub(crate) fn owned_by<'a>(zones: &'a ZoneSet, zone: &'a xdns_zone::Zone) -> impl Fn(&[u8]) -> bool + 'a {
    let has_child = zones.zones.keys().any(|a| a.len() > zone.apex.len() && xdns_wire::name::is_subdomain(a, &zone.apex));
    move |name: &[u8]| !has_child || zones.find(name).is_some_and(|z| z.apex == zone.apex)
}

/// The bodies [`compile_kernel_data`] holds, compiled one key at a time as the iterator is
/// advanced (nothing is collected): zones by apex, each in [`zone_answers`]' order.
pub fn answers(zones: &ZoneSet) -> impl Iterator<Item = AnswerEntry> + '_ {
    zones_in_order(zones).into_iter().flat_map(move |zone| zone_answers(zones, zone))
}

/// The bodies of one zone of `zones` the kernel stores, in the engine's `enumerate` order,
/// compiled as the iterator is advanced: keys of names of another served zone and shareable
/// `Other` bodies (see [`compile_kernel_data`]) are skipped; a signed zone's `Type` and
/// `Other` keys give their DO body first, then the plain one.
pub fn zone_answers<'a>(zones: &'a ZoneSet, zone: &'a xdns_zone::Zone) -> impl Iterator<Item = AnswerEntry> + 'a {
    compiled(zones, zone, xdns_zone::compile::keys_in_order(zone))
}

/// [`zone_answers`] with the zone's names given, sorted ([`answers_then_nodes`]).
fn zone_answers_of<'a>(
    zones: &'a ZoneSet,
    zone: &'a xdns_zone::Zone,
    names: impl IntoIterator<Item = &'a [u8]> + 'a,
) -> impl Iterator<Item = AnswerEntry> + 'a {
    compiled(zones, zone, xdns_zone::compile::keys_of_names(zone, names))
}

/// The entries of `keys` of `zone`, compiled one key at a time ([`ZoneCompiler::key`]).
fn compiled<'a>(
    zones: &'a ZoneSet,
    zone: &'a xdns_zone::Zone,
    keys: impl Iterator<Item = BodyKey> + 'a,
) -> impl Iterator<Item = AnswerEntry> + 'a {
    let mut c = ZoneCompiler::new(zones, zone);
    keys.flat_map(move |key| c.key(key).into_iter().flatten())
}

/// The per-key rules of [`zone_answers`], shared with the size estimate ([`Shape::estimate`])
/// and with the in-place changes (`delta::zone_delta`, which compiles a name's keys by them).
pub(crate) struct ZoneCompiler<'a> {
    zone: &'a xdns_zone::Zone,
    apex: Rebased,
    owned: Box<dyn Fn(&[u8]) -> bool + 'a>,
    signed: bool,
}

impl<'a> ZoneCompiler<'a> {
    pub(crate) fn new(zones: &'a ZoneSet, zone: &'a xdns_zone::Zone) -> Self {
        let apex_key = BodyKey { base: zone.apex.clone(), kind: BodyKind::Other };
        Self {
            zone,
            apex: Rebased::new(xdns_zone::compile::compile(zone, &apex_key)),
            owned: Box::new(owned_by(zones, zone)),
            signed: xdns_zone::compile::is_signed(zone),
        }
    }

    /// Does the key belong to this zone (not to a served child zone)?
    fn owns(&self, key: &BodyKey) -> bool {
        (self.owned)(&key.base)
    }

    /// The entries of one key: its DO body (signed zones; for a NODATA whose first record is
    /// the SOA, the name's own part only), its plain body (`None` when another zone owns the
    /// key or the body is the apex's NODATA, rebased); at a signed zone's apex, with its
    /// `NxDomain` key, first the apex parts of the split NODATA bodies ([`Kind::ApexDo`],
    /// and in an NSEC3 zone [`Kind::ApexProofDo`]).
    pub(crate) fn key(&mut self, key: BodyKey) -> [Option<AnswerEntry>; 4] {
        if !self.owns(&key) {
            return [None, None, None, None];
        }
        let mut body = xdns_zone::compile::compile(self.zone, &key);
        // The writer grew the bytes by doubling: up to half of them spare (≈ 48 bytes an
        // answer, 2026-11-29-large-zone-peak.md), for as long as the entry is held.
        body.bytes.shrink_to_fit();
        body.fixups.shrink_to_fit();
        // A signed zone's node answering NODATA with the apex's body keeps its own DO body:
        // the kernel looks it up at the node's hash, and a delegation's DS NODATA at the
        // delegation's (its `TypeDo(DS)`, bpf/xdns.bpf.c).
        let share = shareable(&key, &self.zone.apex) && self.apex.matches(&body);
        let at_apex = self.signed && key.kind == BodyKind::NxDomain && key.base == self.zone.apex;
        let apex_entry = |kind: Kind, mut b: Body| {
            b.bytes.shrink_to_fit();
            b.fixups.shrink_to_fit();
            AnswerEntry { base: key.base.to_vec(), kind, body: b }
        };
        let apex_part = at_apex
            .then(|| xdns_zone::compile::apex_part(self.zone).ok())
            .flatten()
            .map(|b| apex_entry(Kind::ApexDo, b));
        let apex_proof = at_apex
            .then(|| xdns_zone::compile::apex_proof_part(self.zone).ok().flatten())
            .flatten()
            .map(|b| apex_entry(Kind::ApexProofDo, b));
        let do_kind = match key.kind {
            BodyKind::Type(t) if self.signed => Some(Kind::TypeDo(t)),
            BodyKind::Other if self.signed => Some(Kind::OtherDo),
            _ => None,
        };
        let d = do_kind.map(|k| {
            // The base stands for the question: these kinds' proofs depend on it alone. A
            // NODATA's own part is stored alone (the kernel writes the apex part before it),
            // a delegation's DS NODATA too when its DO=0 body is the apex's (else the fast
            // path finds that body, without the walk that gives the apex: stored whole).
            let split = (k == Kind::OtherDo || (k == Kind::TypeDo(DS) && share))
                .then(|| xdns_zone::compile::nodata_own_part(self.zone, &key))
                .flatten();
            let mut b = match split {
                Some(own) if !own.bytes.is_empty() => own,
                _ => xdns_zone::compile::compile_dnssec(self.zone, &key, &key.base),
            };
            b.dnssec = false; // it is the DO=1 answer: the kernel sends it
            b.bytes.shrink_to_fit();
            b.fixups.shrink_to_fit();
            AnswerEntry { base: key.base.clone().into_vec(), kind: k, body: b }
        });
        let p = (!share).then(|| AnswerEntry { base: key.base.into_vec(), kind: key.kind.into(), body });
        [apex_part, apex_proof, d, p]
    }
}

/// May `key`'s body be left out when it is the apex's `Other` body rebased? A name's `Other`
/// (its NODATA; the kernel takes the apex's for a node marked `XDNS_NODE_NODATA_APEX`) and a
/// `Type(DS)` (at a cut without DS, the NODATA the parent answers: the kernel takes the
/// apex's `Other` when the cut itself is asked for DS and has no `Type(DS)` body, bpf/lookup.h).
/// Never the apex's own.
pub fn shareable(key: &BodyKey, apex: &[u8]) -> bool {
    matches!(key.kind, BodyKind::Other | BodyKind::Type(DS)) && &key.base[..] != apex
}

const DS: u16 = 43;

/// What the kernel maps must hold for a zone set, to size them before the program is loaded
/// (`runtime::Capacity::for_shape`): exact from the data ([`Self::of`]) or estimated from the
/// zones without holding any body ([`Self::estimate`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub nodes: usize,
    pub answers: usize,
    /// Bodies of class M and L (bytes in their own maps).
    pub class_m: usize,
    pub class_l: usize,
    /// Bytes of the answer table's records of every answer ([`record_len`]).
    pub record_bytes: u64,
}

impl Shape {
    fn add(&mut self, body: &Body) {
        match body.bytes.len() {
            n if n <= CLASS_S_LEN => {}
            n if n <= CLASS_M_LEN => self.class_m += 1,
            _ => self.class_l += 1,
        }
        self.answers += 1;
        let (a, v) = encode_body(body);
        self.record_bytes += record_len(&a, &v) as u64;
    }

    /// The exact shape of `data`.
    pub fn of(data: &KernelData) -> Self {
        let mut s = Shape { nodes: data.nodes.len(), ..Default::default() };
        data.answers.iter().for_each(|a| s.add(&a.body));
        s
    }

    /// The shape of [`compile_kernel_data`]`(zones)` without holding its bodies: the nodes
    /// counted exactly, the answers from the keys of a sample of the names compiled (every
    /// name when the zones have at most [`Self::EXACT_NAMES`]; else the names whose hash falls
    /// in one bucket of [`Self::SAMPLE`], so the same names are picked by every estimate of a
    /// zone), scaled to every name. A few percent off at worst for zones of millions of
    /// names; the maps get headroom on top (`Capacity::for_shape`). Two threads share the
    /// names, each taking every other one of the zone's node map (the start-up runs nothing
    /// else meanwhile); the sums do not depend on how the names are shared out.
    pub fn estimate(zones: &ZoneSet) -> Self {
        let names: usize = zones.zones.values().map(|z| z.nodes.len()).sum();
        let every = if names <= Self::EXACT_NAMES { 1 } else { Self::SAMPLE as u64 };
        let (a, b) = std::thread::scope(|s| {
            let other = std::thread::Builder::new().name("xdns-estimate".into()).spawn_scoped(s, || {
                // created by the XDP thread: none of its capabilities, now or after the switch of user
                crate::threads::no_caps_after_switch();
                Self::estimate_part(zones, every, 1, 2)
            });
            match other {
                Ok(h) => {
                    let a = Self::estimate_part(zones, every, 0, 2);
                    // a panic there is a bug of the compile: the same one as on this thread
                    let b = h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
                    (a, b)
                }
                // no thread to be had: this one compiles every sampled name
                Err(_) => (Self::estimate_part(zones, every, 0, 1), EstimatePart::default()),
            }
        });
        let (sampled, exact, picked) = (a.sampled.sum(&b.sampled), a.exact.sum(&b.exact), a.picked + b.picked);
        let scale = |v: u64| if picked == 0 { 0 } else { (v as u128 * names as u128).div_ceil(picked as u128) as u64 };
        Shape {
            nodes: exact.nodes,
            answers: exact.answers + scale(sampled.answers as u64) as usize,
            class_m: exact.class_m + scale(sampled.class_m as u64) as usize,
            class_l: exact.class_l + scale(sampled.class_l as u64) as usize,
            record_bytes: exact.record_bytes + scale(sampled.record_bytes),
        }
    }

    /// Part `part` of `parts` of [`Self::estimate`] with one name in `every` sampled: of the
    /// names whose turn (their place in the zone's node map) falls to `part`, the nodes
    /// counted and the sampled ones (by name hash) compiled; part 0 also counts the apexes'
    /// NXDOMAIN bodies.
    fn estimate_part(zones: &ZoneSet, every: u64, part: usize, parts: usize) -> EstimatePart {
        let mut out = EstimatePart::default();
        let mut keys = Vec::new();
        for zone in zones_in_order(zones) {
            let mut c = ZoneCompiler::new(zones, zone);
            for (nm, node) in zone.nodes.iter().skip(part).step_by(parts) {
                if kernel_node(&c.owned, nm, node) {
                    out.exact.nodes += 1;
                }
                if !crate::hash::name_hash(0x5a3b_1e57, nm).is_multiple_of(every) {
                    continue;
                }
                out.picked += 1;
                keys.clear();
                xdns_zone::lookup::keys_of_name(zone, nm, &mut keys);
                for key in keys.drain(..) {
                    c.key(key).iter().flatten().for_each(|a| out.sampled.add(&a.body));
                }
            }
            if part == 0 {
                // the apex's NXDOMAIN body: one per zone, counted as is
                let apex = c.key(BodyKey { base: zone.apex.clone(), kind: BodyKind::NxDomain });
                apex.iter().flatten().for_each(|a| out.exact.add(&a.body));
            }
        }
        out
    }

    fn sum(&self, o: &Shape) -> Shape {
        Shape {
            nodes: self.nodes + o.nodes,
            answers: self.answers + o.answers,
            class_m: self.class_m + o.class_m,
            class_l: self.class_l + o.class_l,
            record_bytes: self.record_bytes + o.record_bytes,
        }
    }

    /// Zone sets of at most this many names are measured exactly (every body compiled once).
    pub const EXACT_NAMES: usize = 1 << 16;
    /// One name in this many is compiled for the estimate of larger zone sets.
    pub const SAMPLE: usize = 16;
}

/// What one part of [`Shape::estimate`] counted: the sampled names' bodies, what is counted
/// exactly (nodes, the apexes' NXDOMAIN bodies), and how many names were sampled.
#[derive(Default)]
struct EstimatePart {
    sampled: Shape,
    exact: Shape,
    picked: u64,
}

/// Would the kernel send exactly `own` when it answers with `shared` (compiled against a
/// base name `own.base_len - shared.base_len` bytes shorter) instead? It adds that delta to
/// every pointer listed in `fixups` and copies everything else: so the header fields, the
/// length and the fixup offsets must be equal, the bytes equal once shifted, and the fixups
/// few enough for the kernel to apply them (else it passes a shifted body to userspace).
pub fn same_when_rebased(shared: &Body, own: &Body) -> bool {
    let Some(delta) = own.base_len.checked_sub(shared.base_len) else { return false };
    heads_match(shared, own) && rebase(shared, delta).as_deref().is_some_and(|b| b == &own.bytes[..])
}

/// Everything but the bytes and the base length agrees, and the kernel can apply the fixups.
fn heads_match(shared: &Body, own: &Body) -> bool {
    (shared.flags, shared.ancount, shared.nscount, shared.arcount, shared.an_ns_len, shared.ar_required, shared.dnssec)
        == (own.flags, own.ancount, own.nscount, own.arcount, own.an_ns_len, own.ar_required, own.dnssec)
        && shared.bytes.len() == own.bytes.len()
        && shared.fixups == own.fixups
        && shared.fixups.len() <= MAX_FIXUPS
}

/// `body`'s bytes with every fixup pointer shifted by `delta`, as the kernel writes them
/// (`None` if a fixup lies outside the body).
fn rebase(body: &Body, delta: u16) -> Option<Vec<u8>> {
    let mut b = body.bytes.clone();
    for &f in &body.fixups {
        let p = b.get_mut(usize::from(f)..usize::from(f) + 2)?;
        let v = u16::from_be_bytes([p[0], p[1]]).wrapping_add(delta);
        p.copy_from_slice(&v.to_be_bytes());
    }
    Some(b)
}

/// The apex's `Other` body and its rebased bytes for each delta met so far.
struct Rebased {
    body: Body,
    by_delta: HashMap<u16, Option<Vec<u8>>>,
}

impl Rebased {
    fn new(body: Body) -> Self {
        Self { body, by_delta: HashMap::new() }
    }

    /// [`same_when_rebased`] against the apex's body, rebasing once per delta.
    fn matches(&mut self, own: &Body) -> bool {
        let Some(delta) = own.base_len.checked_sub(self.body.base_len) else { return false };
        if !heads_match(&self.body, own) {
            return false;
        }
        let body = &self.body;
        let bytes = self.by_delta.entry(delta).or_insert_with(|| rebase(body, delta));
        bytes.as_deref().is_some_and(|b| b == &own.bytes[..])
    }
}

/// Wire length and label count (root excluded) of a valid wire name.
pub fn name_shape(name: &[u8]) -> (usize, usize) {
    let (mut i, mut labels) = (0usize, 0usize);
    while i < name.len() && name[i] != 0 {
        labels += 1;
        i += 1 + name[i] as usize;
    }
    (name.len(), labels)
}

/// The parent of a wire name (`None` for the root).
pub fn parent(name: &[u8]) -> Option<&[u8]> {
    match name.first() {
        Some(0) | None => None,
        Some(&l) => name.get(1 + l as usize..),
    }
}

/// The nodes of every zone: a name belongs to the zone with the longest apex above it
/// (`ZoneSet::find`), exactly as the userspace lookup picks the zone; names a parent zone holds
/// below a served child zone's apex are left out. Zones by apex, names sorted.
pub fn kernel_nodes(zones: &ZoneSet) -> Vec<NodeEntry> {
    nodes(zones).collect()
}

/// Is `(name, node)` of `zone` one of its nodes in the kernel: answered by `zone` (`owned`,
/// see [`owned_by`]) and in its name space (NSEC3-only names are not: the engine's
/// `Zone::node`)? Read from the node itself, without looking the name up again.
fn kernel_node(owned: &dyn Fn(&[u8]) -> bool, name: &[u8], node: &xdns_zone::Node) -> bool {
    owned(name) && !xdns_zone::dnssec::is_nsec3_only(node)
}

/// Each zone of `zones` (by apex) with all its names sorted: the order of its answers
/// (`keys_in_order`) and of its nodes.
fn sorted_names(zones: &ZoneSet) -> Vec<(&xdns_zone::Zone, Vec<&[u8]>)> {
    zones_in_order(zones)
        .into_iter()
        .map(|zone| {
            let mut names: Vec<&[u8]> = zone.nodes.keys().map(|k| &k[..]).collect();
            names.sort_unstable();
            (zone, names)
        })
        .collect()
}

/// Does `node` own a DNAME (RFC 6672: every name below it is substituted)?
pub(crate) fn owns_dname(node: &xdns_zone::Node) -> bool {
    node.rrset(xdns_zone::lookup::rtype::DNAME).is_some()
}

/// The names of `zone` that have a wildcard child (`*.<name>` exists): a zone has few
/// wildcards, so this small set answers for every name what a lookup of `*.<name>` would.
fn wildcard_parents(zone: &xdns_zone::Zone) -> std::collections::HashSet<&[u8]> {
    zone.nodes.keys().filter(|k| k.starts_with(b"\x01*")).filter_map(|k| parent(k)).collect()
}

/// [`kernel_nodes`], made one node at a time as the iterator is advanced (each zone's sorted
/// name references are held, not the entries).
pub fn nodes(zones: &ZoneSet) -> impl Iterator<Item = NodeEntry> + '_ {
    sorted_names(zones).into_iter().flat_map(move |(zone, names)| zone_nodes(zones, zone, names))
}

/// The nodes of `zone` in the kernel, of its sorted `names` (all of them: the names of a
/// served child zone and NSEC3-only names are left out here).
fn zone_nodes<'a>(
    zones: &'a ZoneSet,
    zone: &'a xdns_zone::Zone,
    names: impl IntoIterator<Item = &'a [u8]> + 'a,
) -> impl Iterator<Item = NodeEntry> + 'a {
    let owned = owned_by(zones, zone);
    // Without a delegation in the zone no name is at or below a cut: no walk up.
    let has_cut = zone.nodes.iter().any(|(n, node)| n[..] != zone.apex[..] && node.rrset(2).is_some());
    let wild = wildcard_parents(zone);
    let apex = &zone.apex[..];
    names.into_iter().filter_map(move |name| {
        let node = zone.nodes.get(name)?;
        if !kernel_node(&owned, name, node) {
            return None;
        }
        // The highest zone cut between the apex (excluded) and the name (included): the name
        // itself from its node, its ancestors looked up.
        let mut cut = (has_cut && name != apex && node.rrset(2).is_some()).then_some(name);
        let mut cur = parent(name).filter(|_| has_cut && name != apex);
        while let Some(c) = cur.filter(|c| *c != apex) {
            if zone.nodes.get(c).is_some_and(|n| n.rrset(2).is_some()) {
                cut = Some(c);
            }
            cur = parent(c);
        }
        Some(NodeEntry { name: name.to_vec(), apex: apex.to_vec(), cut: cut.map(<[u8]>::to_vec), wildcard: wild.contains(name) || owns_dname(node) })
    })
}

/// [`answers`] and then [`nodes`] (the same entries in the same order) for one consumer that
/// takes every answer before the first node: each zone's names are sorted once for both.
#[allow(clippy::type_complexity)]
pub fn answers_then_nodes(zones: &ZoneSet) -> (impl Iterator<Item = AnswerEntry> + '_, impl Iterator<Item = NodeEntry> + '_) {
    type Sorted<'a> = std::rc::Rc<Vec<(&'a xdns_zone::Zone, Vec<&'a [u8]>)>>;
    /// The sorted names of the `i`-th zone, read from the shared lists.
    fn names<'a>(s: &Sorted<'a>, i: usize) -> impl Iterator<Item = &'a [u8]> + 'a {
        let s = s.clone();
        (0..s[i].1.len()).map(move |j| s[i].1[j])
    }
    let sorted: Sorted<'_> = std::rc::Rc::new(sorted_names(zones));
    let (s, t) = (sorted.clone(), sorted);
    let answers = (0..s.len()).flat_map(move |i| zone_answers_of(zones, s[i].0, names(&s, i)));
    let nodes = (0..t.len()).flat_map(move |i| zone_nodes(zones, t[i].0, names(&t, i)));
    (answers, nodes)
}
/// Folded one's-complement sum of `bytes` as big-endian 16-bit words (odd tail padded).
pub fn csum16(bytes: &[u8]) -> u16 {
    let mut s: u64 = 0;
    for c in bytes.chunks(2) {
        s += u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0));
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Body bytes in the size class that holds them.
#[derive(Clone)]
pub enum BodyValue {
    /// Inline in the answer record: the bytes and the first [`MAX_FIXUPS`] fixups.
    S { bytes: Vec<u8>, fixups: Vec<u16> },
    M(Box<xdns_body_m>),
    L(Box<xdns_body_l>),
    /// Larger than the largest class: answered by userspace only.
    Userspace,
}

/// Fixups stored per body (`XDNS_MAX_FIXUPS`), from the generated layout.
pub const MAX_FIXUPS: usize = std::mem::offset_of!(xdns_body_m, bytes) / 2;
/// Bytes of the answer header that begins every record (`struct xdns_answer`).
pub const HEADER_LEN: usize = std::mem::size_of::<xdns_answer>();
/// Body bytes of each size class (`XDNS_CLASS_{S,M,L}_LEN`), from the generated layouts.
pub const CLASS_S_LEN: usize =
    std::mem::size_of::<xdns_answer_s>() - std::mem::offset_of!(xdns_answer_s, data) - 2 * MAX_FIXUPS;
pub const CLASS_M_LEN: usize = std::mem::size_of::<xdns_body_m>() - std::mem::offset_of!(xdns_body_m, bytes);
pub const CLASS_L_LEN: usize = std::mem::size_of::<xdns_body_l>() - std::mem::offset_of!(xdns_body_l, bytes);
/// Largest body the kernel stores.
pub const MAX_KERNEL_BODY: usize = CLASS_L_LEN;
/// Answer-table pages (`XDNS_PAGE`, `XDNS_PAGE_SLACK` of `bpf/xdns_abi.h`): records start in
/// the first `PAGE` bytes of a page value and end in its slack at the latest.
pub const PAGE: usize = 1 << 15;
pub const PAGE_SLACK: usize = 640;
/// `body_ver` of a class M answer placed in the answer table (`XDNS_BODY_INLINE`): its bytes
/// and fixups are in its record ([`write_record`]), not in `xdns_bodies_m`.
pub const BODY_INLINE: u8 = 2;
/// Bytes per CPU of the spill slots after the table's two halves (`XDNS_SPILL_SLOT`).
pub const SPILL_SLOT: usize = 256;

fn fill<const N: usize>(fixups: &mut [u16; MAX_FIXUPS], bytes: &mut [u8; N], body: &Body) {
    for (d, s) in fixups.iter_mut().zip(&body.fixups) {
        *d = *s;
    }
    bytes[..body.bytes.len()].copy_from_slice(&body.bytes);
}

/// Offset in the record's data of a class S body's fixups (`XDNS_FIX_AT`): after the bytes, even.
pub fn fix_at(len: usize) -> usize {
    (len + 1) & 0xfe
}

/// Offset in an inline class M record's data of its fixups (`XDNS_FIX_AT_M`): after the
/// bytes, even.
pub fn fix_at_m(len: usize) -> usize {
    (len + 1) & 0x3fe
}

/// The answer value and body bytes of one body.
pub fn encode_body(body: &Body) -> (xdns_answer, BodyValue) {
    let n = body.bytes.len();
    let an_ns = usize::from(body.an_ns_len).min(n);
    let value = if n <= CLASS_S_LEN {
        let fixups = body.fixups.iter().take(MAX_FIXUPS).copied().collect();
        BodyValue::S { bytes: body.bytes.to_vec(), fixups }
    } else if n <= CLASS_M_LEN {
        let mut b = Box::<xdns_body_m>::default();
        fill(&mut b.fixups, &mut b.bytes, body);
        BodyValue::M(b)
    } else if n <= MAX_KERNEL_BODY {
        let mut b = Box::<xdns_body_l>::default();
        fill(&mut b.fixups, &mut b.bytes, body);
        BodyValue::L(b)
    } else {
        BodyValue::Userspace
    };
    let class = match value {
        BodyValue::S { .. } => xdns_body_class::XDNS_CLASS_S,
        BodyValue::M(_) => xdns_body_class::XDNS_CLASS_M,
        BodyValue::L(_) => xdns_body_class::XDNS_CLASS_L,
        BodyValue::Userspace => xdns_body_class::XDNS_CLASS_USERSPACE,
    };
    let a = xdns_answer {
        flags: body.flags,
        ancount: body.ancount,
        nscount: body.nscount,
        arcount: body.arcount,
        len: n as u16,
        an_ns_len: an_ns as u16,
        base_len: body.base_len,
        csum: csum16(&body.bytes),
        csum_an_ns: csum16(&body.bytes[..an_ns]),
        nfixups: body.fixups.len().min(u16::MAX as usize) as u16,
        ar_required: u8::from(body.ar_required),
        class: class.0 as u8,
        dnssec: match (body.after_apex, body.apex_nsec3) {
            (true, true) => DNSSEC_PROOF_PART,
            (true, false) => DNSSEC_NAME_PART,
            _ => u8::from(body.dnssec),
        },
        body_ver: 0,
    };
    (a, value)
}

/// Bytes of the answer table's record of one body (`struct xdns_answer_s`, packed): the
/// header, then for class S the bytes and, at [`fix_at`], the fixups; for class M the same
/// (`struct xdns_answer_m`, `answer.body_ver` [`BODY_INLINE`]: fixups at [`fix_at_m`], the
/// first [`MAX_FIXUPS`]); class L the header alone; a multiple of four.
pub fn record_len(answer: &xdns_answer, body: &BodyValue) -> usize {
    let data = match body {
        BodyValue::S { bytes, fixups } => fix_at(bytes.len()) + 2 * fixups.len(),
        BodyValue::M(_) => fix_at_m(usize::from(answer.len)) + 2 * usize::from(answer.nfixups).min(MAX_FIXUPS),
        _ => 0,
    };
    (HEADER_LEN + data).next_multiple_of(4)
}

/// Write the record of one body into `out` (at least [`record_len`] bytes long): a class M
/// body's bytes and fixups only when `answer` says they are inline ([`BODY_INLINE`], the
/// answer table's records), else the header alone (an `xdns_answers` value's).
pub fn write_record(out: &mut [u8], answer: &xdns_answer, body: &BodyValue) {
    out[..HEADER_LEN].copy_from_slice(crate::maps::bytes_of(answer));
    let (bytes, fixups, at): (&[u8], &[u16], usize) = match body {
        BodyValue::S { bytes, fixups } => (bytes, fixups, fix_at(bytes.len())),
        BodyValue::M(b) if answer.body_ver == BODY_INLINE => {
            let n = usize::from(answer.len);
            (&b.bytes[..n], &b.fixups[..usize::from(answer.nfixups).min(MAX_FIXUPS)], fix_at_m(n))
        }
        _ => return,
    };
    let data = &mut out[HEADER_LEN..];
    data[..bytes.len()].copy_from_slice(bytes);
    for (i, f) in fixups.iter().enumerate() {
        data[at + 2 * i..at + 2 * i + 2].copy_from_slice(&f.to_ne_bytes());
    }
}

/// The `xdns_answers` value of one body: its record, zero-padded to the whole struct.
pub fn answer_value(answer: &xdns_answer, body: &BodyValue) -> Box<xdns_answer_s> {
    let mut v = Box::<xdns_answer_s>::default();
    let mut buf = vec![0u8; std::mem::size_of::<xdns_answer_s>()];
    write_record(&mut buf, answer, body);
    v.ans = *answer;
    v.data.copy_from_slice(&buf[HEADER_LEN..]);
    v
}

/// Map entries of one generation.
#[derive(Clone, Default)]
pub struct Encoded {
    pub nodes: Vec<(xdns_node_key, xdns_node)>,
    pub answers: Vec<(xdns_answer_key, xdns_answer, BodyValue)>,
}

/// The key of body (`base`, `kind`) in generation `gen`.
pub fn answer_key(seed: u64, gen: u32, base: &[u8], kind: Kind) -> xdns_answer_key {
    let (k, qtype) = kind.abi();
    xdns_answer_key { hash: name_hash(seed, base), r#gen, qtype, kind: k, _pad: 0 }
}

/// Names that have an `Other` body of their own in `answers`; a node not among them (and
/// neither apex nor cut) gets `XDNS_NODE_NODATA_APEX`.
pub fn own_other<'a>(answers: impl IntoIterator<Item = &'a AnswerEntry>) -> HashSet<&'a [u8]> {
    answers.into_iter().filter(|a| a.kind == Kind::Other).map(|a| &a.base[..]).collect()
}

/// Does `n` answer NODATA with its apex's body (`XDNS_NODE_NODATA_APEX`)? Yes when it is
/// neither apex nor at a cut and has no `Other` body of its own (`own_other`).
pub fn shares_apex_nodata(n: &NodeEntry, own_other: bool) -> bool {
    n.name != n.apex && n.cut.is_none() && !own_other
}

/// The `xdns_nodes` entry of `n` in generation `gen`. `own_other`: does `n` have an `Other`
/// body of its own? A node that is neither apex nor cut and has none answers NODATA with its
/// apex's (`XDNS_NODE_NODATA_APEX`; when the apex has none either, the kernel passes, as it
/// would without the flag).
pub fn encode_node(n: &NodeEntry, own_other: bool, seed: u64, gen: u32) -> (xdns_node_key, xdns_node) {
    encode_node_hashed(n, own_other, name_hash(seed, &n.name), name_hash(seed, &n.apex), seed, gen)
}

/// [`encode_node`] given the hashes of `n`'s name and apex (`name_hash(seed, ..)`), which the
/// loader has at hand: it looks the name's hash up in its own-`Other` set, and the apex is
/// the same for every node of a zone. The cut's hash is the name's when `n` is the cut.
pub fn encode_node_hashed(
    n: &NodeEntry,
    own_other: bool,
    hash: u64,
    apex_hash: u64,
    seed: u64,
    gen: u32,
) -> (xdns_node_key, xdns_node) {
    debug_assert_eq!((hash, apex_hash), (name_hash(seed, &n.name), name_hash(seed, &n.apex)));
    let (len, labels) = name_shape(&n.name);
    let (_, apex_labels) = name_shape(&n.apex);
    let mut v = xdns_node {
        apex_hash,
        name_len: len as u8,
        labels: labels as u8,
        apex_labels: apex_labels as u8,
        ..Default::default()
    };
    if n.name == n.apex {
        v.flags |= NODE_APEX;
    }
    if let Some(cut) = &n.cut {
        v.flags |= NODE_CUT;
        v.cut_hash = if *cut == n.name { hash } else { name_hash(seed, cut) };
        v.cut_labels = name_shape(cut).1 as u8;
    }
    if n.wildcard {
        v.flags |= NODE_WILDCARD;
    }
    if shares_apex_nodata(n, own_other) {
        v.flags |= NODE_NODATA_APEX;
    }
    (xdns_node_key { hash, r#gen, _pad: 0 }, v)
}

/// The map entry of one body: key, answer value and body bytes.
pub fn encode_answer(a: &AnswerEntry, seed: u64, gen: u32) -> (xdns_answer_key, xdns_answer, BodyValue) {
    let (v, body) = encode_body(&a.body);
    (answer_key(seed, gen, &a.base, a.kind), v, body)
}

/// Encode `data` for generation `gen` with hash seed `seed` (all at once; the loader encodes
/// chunk by chunk with [`encode_node`] and [`encode_answer`]).
pub fn encode(data: &KernelData, seed: u64, gen: u32) -> Encoded {
    let own = own_other(&data.answers);
    Encoded {
        nodes: data.nodes.iter().map(|n| encode_node(n, own.contains(&n.name[..]), seed, gen)).collect(),
        answers: data.answers.iter().map(|a| encode_answer(a, seed, gen)).collect(),
    }
}

/// Bytes of kernel map memory one entry of each kind costs (hash-map element header, key and
/// value rounded to 8; the allocator's own rounding comes on top), for capacity reports.
pub fn bytes_per_entry() -> [(&'static str, usize); 4] {
    const ELEM: usize = 48; // struct htab_elem on 64-bit, rounded
    let r8 = |n: usize| n.div_ceil(8) * 8;
    let ak = std::mem::size_of::<xdns_answer_key>();
    [
        ("node", ELEM + r8(std::mem::size_of::<xdns_node_key>()) + r8(std::mem::size_of::<xdns_node>())),
        // in the hash map (answers left out of the table): class S bodies live inline in the
        // answer value; M and L have a body entry besides
        ("answer+body S", ELEM + r8(ak) + r8(std::mem::size_of::<xdns_answer_s>())),
        ("answer+body M", 2 * ELEM + 2 * r8(ak) + r8(std::mem::size_of::<xdns_answer_s>()) + r8(std::mem::size_of::<xdns_body_m>())),
        ("answer+body L", 2 * ELEM + 2 * r8(ak) + r8(std::mem::size_of::<xdns_answer_s>()) + r8(std::mem::size_of::<xdns_body_l>())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants read from the generated layouts match `bpf/xdns_abi.h`.
    #[test]
    fn layout_constants() {
        assert_eq!((MAX_FIXUPS, CLASS_S_LEN, CLASS_M_LEN, CLASS_L_LEN), (32, 128, 512, 1280));
    }

    /// A signed zone's kernel data: every `Type` and `Other` key has its DO body (marked not
    /// `dnssec`: the kernel sends it), the DO=0 bodies are marked, NXDOMAIN and wildcard keys
    /// have no DO body. A name's DO=0 NODATA is the apex's (left out, the node flagged); its
    /// DO=1 NODATA is its own part only (NSEC and RRSIG, `after_apex`), the apex part (SOA and
    /// its RRSIG) stored once at the apex: the two joined are the userspace answer. The same
    /// zone unsigned: no DO kinds, nothing marked, NODATA bodies shared.
    #[test]
    fn signed_zone_kernel_data() {
        let sig = |t: &str, l: u8| format!("RRSIG {t} 13 {l} 3600 20300101000000 20200101000000 1 s.test. AAAA");
        let unsigned = "$TTL 3600\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 198.18.0.1\nwww A 198.18.0.2\n*.w A 198.18.0.3\n";
        let signed = format!(
            "{unsigned}@ {}\n@ {}\n@ DNSKEY 257 3 13 AAAA\n@ {}\n@ NSEC ns1 NS SOA RRSIG NSEC DNSKEY\n@ {}\n\
             ns1 {}\nns1 NSEC *.w A RRSIG NSEC\nns1 {}\n*.w {}\n*.w NSEC www A RRSIG NSEC\n*.w {}\n\
             www {}\nwww NSEC s.test. A RRSIG NSEC\nwww {}\n",
            sig("SOA", 2), sig("NS", 2), sig("DNSKEY", 2), sig("NSEC", 2), sig("A", 3), sig("NSEC", 3),
            sig("A", 3), sig("NSEC", 3), sig("A", 3), sig("NSEC", 3)
        );
        let dir = std::env::temp_dir().join(format!("xdns-bpf-signed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |text: &str| {
            let f = dir.join("z.zone");
            std::fs::write(&f, text).unwrap();
            let z = xdns_zone::load_zone(&xdns_zone::ZoneSource { name: "s.test.".into(), file: f }, None).unwrap();
            let mut set = ZoneSet::default();
            set.zones.insert(z.apex.clone(), std::sync::Arc::new(z));
            compile_kernel_data(&set)
        };
        let www = xdns_wire::name::from_presentation("www.s.test.").unwrap();
        let d = load(&signed);
        let has = |base: &[u8], k: Kind| d.answers.iter().find(|a| a.base == base && a.kind == k);
        let do_a = has(&www, Kind::TypeDo(1)).expect("www A has its DO body");
        assert!(!do_a.body.dnssec && do_a.body.ancount == 2, "A and its RRSIG, sent by the kernel");
        assert!(has(&www, Kind::Type(1)).unwrap().body.dnssec, "the DO=0 body is marked");
        assert!(has(&www, Kind::Other).is_none(), "www's DO=0 NODATA is the apex's");
        let own_part = &has(&www, Kind::OtherDo).expect("www's DO=1 NODATA").body;
        assert!(own_part.after_apex && !own_part.dnssec && (own_part.ancount, own_part.nscount) == (0, 2), "NSEC and RRSIG");
        assert_eq!(&own_part.bytes[..2], &[0xC0, 0x0C], "owner: the question");
        assert_eq!(encode_body(own_part).0.dnssec, DNSSEC_NAME_PART);
        let apex = xdns_wire::name::from_presentation("s.test.").unwrap();
        let apex_part = &has(&apex, Kind::ApexDo).expect("the apex part").body;
        assert_eq!((apex_part.flags, apex_part.ancount, apex_part.nscount, apex_part.base_len), (0x0400, 0, 2, apex.len() as u16), "SOA and RRSIG");
        assert!(!apex_part.after_apex && d.answers.iter().filter(|a| a.kind == Kind::ApexDo).count() == 1);
        // joined, the two parts are what userspace answers
        let zones = self::signed_zones(&dir, &signed);
        let z = zones.zones.values().next().unwrap();
        let key = BodyKey { base: www.clone().into_boxed_slice(), kind: BodyKind::Other };
        let mut whole = xdns_zone::compile::compile_dnssec(z, &key, &www);
        whole.dnssec = false;
        assert_eq!(xdns_zone::compile::join(apex_part, own_part), whole);
        assert!(d.answers.iter().all(|a| !matches!(a.kind, Kind::NxDomain | Kind::Wildcard(_) | Kind::WildcardOther) || a.body.dnssec));
        let type_do = d.answers.iter().filter(|a| matches!(a.kind, Kind::TypeDo(_))).count();
        let types = d.answers.iter().filter(|a| matches!(a.kind, Kind::Type(_))).count();
        assert_eq!(type_do, types, "one DO body per Type key");
        let other_do = d.answers.iter().filter(|a| a.kind == Kind::OtherDo).count();
        assert_eq!(other_do, d.nodes.len(), "one DO=1 NODATA (or referral) per node");
        let own = own_other(&d.answers);
        let www_node = d.nodes.iter().find(|n| n.name == www).unwrap();
        assert!(shares_apex_nodata(www_node, own.contains(&www[..])));
        let u = load(unsigned);
        assert!(u.answers.iter().all(|a| !a.body.dnssec && !matches!(a.kind, Kind::TypeDo(_) | Kind::OtherDo)));
        assert!(u.answers.iter().all(|a| !(a.base == www && a.kind == Kind::Other)), "www's NODATA is the apex's");
    }

    /// A delegation without DS in a signed zone (issue 30): its DO=0 DS NODATA is the apex's
    /// (no `Type(DS)` stored), its DO=1 DS NODATA an own part (`TypeDo(DS)`, no SOA), so it is
    /// not SOA-bound (NSEC). NSEC: the cut's NSEC (owner: the question), after the apex's SOA part.
    /// NSEC3 with opt-out: the NSEC3 covering it and its RRSIG, after the apex's second part
    /// (`ApexProofDo`: the SOA, the apex's NSEC3, their RRSIGs), stored once; joined, the parts
    /// are userspace's answer.
    #[test]
    fn signed_delegation_ds_nodata_is_split() {
        use xdns_zone::dnssec::{nsec3_label, Nsec3Params};
        let sig = |t: &str, l: u8| format!("RRSIG {t} 13 {l} 3600 20300101000000 20200101000000 1 s.test. AAAA");
        let head = format!(
            "$TTL 3600\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\n@ DNSKEY 257 3 13 AAAA\n@ {}\n@ {}\n@ {}\n\
             ns1 A 198.18.0.1\nns1 {}\nd NS ns.other.\n",
            sig("SOA", 2), sig("NS", 2), sig("DNSKEY", 2), sig("A", 3)
        );
        let nsec = format!(
            "{head}@ NSEC d NS SOA RRSIG NSEC DNSKEY\n@ {}\nd NSEC ns1 NS RRSIG NSEC\nd {}\nns1 NSEC s.test. A RRSIG NSEC\nns1 {}\n",
            sig("NSEC", 2), sig("NSEC", 3), sig("NSEC", 3)
        );
        let p = Nsec3Params { algorithm: 1, iterations: 0, salt: Vec::new() };
        let h = |n: &str| String::from_utf8(nsec3_label(&xdns_wire::name::from_presentation(n).unwrap(), &p).unwrap().into_vec()).unwrap();
        let (ha, hn) = (h("s.test."), h("ns1.s.test."));
        let nsec3 = format!(
            "{head}@ NSEC3PARAM 1 0 0 -\n@ {}\n{ha} NSEC3 1 1 0 - {} NS SOA RRSIG DNSKEY NSEC3PARAM\n{ha} {}\n{hn} NSEC3 1 1 0 - {} A RRSIG\n{hn} {}\n",
            sig("NSEC3PARAM", 2), hn.to_ascii_uppercase(), sig("NSEC3", 3), ha.to_ascii_uppercase(), sig("NSEC3", 3)
        );
        let dir = std::env::temp_dir().join(format!("xdns-bpf-signed-ds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let apex = xdns_wire::name::from_presentation("s.test.").unwrap();
        let d = xdns_wire::name::from_presentation("d.s.test.").unwrap();
        for (what, text, with_nsec3) in [("NSEC", &nsec, false), ("NSEC3 opt-out", &nsec3, true)] {
            let zones = signed_zones(&dir, text);
            let data = compile_kernel_data(&zones);
            let has = |base: &[u8], k: Kind| data.answers.iter().find(|a| a.base == base && a.kind == k).map(|a| &a.body);
            assert!(has(&d, Kind::Type(DS)).is_none(), "{what}: d's DO=0 DS NODATA is the apex's");
            let own = has(&d, Kind::TypeDo(DS)).expect("d's DO=1 DS NODATA");
            assert!(own.after_apex && !crate::delta::carries_soa(own), "{what}: its own part, no SOA");
            assert_eq!((own.apex_nsec3, own.nscount), (with_nsec3, 2), "{what}: one proof record and its RRSIG");
            assert_eq!(own.bytes[..2] == [0xC0, 0x0C], !with_nsec3, "{what}: NSEC: the cut's own");
            let first = if with_nsec3 { Kind::ApexProofDo } else { Kind::ApexDo };
            let apex_part = has(&apex, first).expect("the apex part");
            assert_eq!(apex_part.nscount, if with_nsec3 { 4 } else { 2 }, "{what}: the apex part");
            assert_eq!(has(&apex, Kind::ApexProofDo).is_some(), with_nsec3, "{what}: the NSEC3 part, only there");
            assert_eq!(encode_body(own).0.dnssec, if with_nsec3 { DNSSEC_PROOF_PART } else { DNSSEC_NAME_PART });
            let z = zones.zones.values().next().unwrap();
            let key = BodyKey { base: d.clone().into_boxed_slice(), kind: BodyKind::Type(DS) };
            let mut whole = xdns_zone::compile::compile_dnssec(z, &key, &d);
            whole.dnssec = false;
            assert_eq!(whole.nscount, 2 + own.nscount + if with_nsec3 { 2 } else { 0 }, "{what}");
            assert_eq!(xdns_zone::compile::join(apex_part, own), whole, "{what}: joined, userspace's answer");
            // (an NSEC3 own part is another owner's record: which names it proves is the NSEC3
            // mapping's of delta.rs, not the SOA's; it carries no SOA, checked above)
            if !with_nsec3 {
                assert!(!crate::delta::soa_bound(&data.answers, &apex).contains(&d[..]), "{what}: d is not SOA-bound");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The zone set of one zone `s.test.` of `text`, loaded from a file in `dir`.
    fn signed_zones(dir: &std::path::Path, text: &str) -> ZoneSet {
        let f = dir.join("z2.zone");
        std::fs::write(&f, text).unwrap();
        let z = xdns_zone::load_zone(&xdns_zone::ZoneSource { name: "s.test.".into(), file: f }, None).unwrap();
        let mut set = ZoneSet::default();
        set.zones.insert(z.apex.clone(), std::sync::Arc::new(z));
        set
    }

    /// The nodes as the kernel needs them, found the plain way: every name looked up, each
    /// ancestor up to the apex looked up for the highest cut, `*.<name>` looked up for the
    /// wildcard flag (the loader's walk before the names were sorted once for the answers and
    /// the nodes: `zone_nodes` must give exactly these).
    fn nodes_by_lookups(zones: &ZoneSet) -> Vec<NodeEntry> {
        let mut out = Vec::new();
        for zone in zones_in_order(zones) {
            let owned = owned_by(zones, zone);
            let mut names: Vec<&[u8]> = zone.nodes.keys().map(|k| &k[..]).filter(|n| owned(n) && zone.node(n).is_some()).collect();
            names.sort_unstable();
            for name in names {
                let mut cut = None;
                let mut cur = name;
                while cur != &zone.apex[..] {
                    if zone.nodes.get(cur).is_some_and(|n| n.rrset(2).is_some()) {
                        cut = Some(cur.to_vec());
                    }
                    cur = parent(cur).unwrap();
                }
                let wild = [&b"\x01*"[..], name].concat();
                out.push(NodeEntry { name: name.to_vec(), apex: zone.apex.to_vec(), cut, wildcard: zone.nodes.contains_key(&wild[..]) || zone.nodes.get(name).is_some_and(owns_dname) });
            }
        }
        out
    }

    /// `nodes` (and the nodes of `answers_then_nodes`, whose names are sorted once for both)
    /// give exactly the nodes found by looking every name and ancestor up, on zones with cuts
    /// at and below the first level, glue and names below cuts, an empty non-terminal above a
    /// cut, wildcards (one below a cut), a served child zone whose names the parent holds too,
    /// an NSEC3-only name (not a node) and a zone without any delegation; and
    /// `answers_then_nodes`' answers are `answers`' (same entries, same order).
    #[test]
    fn nodes_from_sorted_names_match_lookups() {
        let dir = std::env::temp_dir().join(format!("xdns-bpf-nodes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut set = ZoneSet::default();
        let mut add = |apex: &str, text: &str, nsec3_only: Option<&str>| {
            let f = dir.join(format!("{apex}zone"));
            std::fs::write(&f, text).unwrap();
            let mut z = xdns_zone::load_zone(&xdns_zone::ZoneSource { name: apex.into(), file: f }, None).unwrap();
            if let Some(n) = nsec3_only {
                let rdata = [&[1u8, 0, 0, 1, 0, 0, 20][..], &[7; 20], &[0, 2, 0, 1]].concat();
                let rrsets = vec![xdns_zone::Rrset { rtype: 50, ttl: 300, rdata: xdns_zone::Rdatas::one(&rdata) }];
                z.nodes.insert(xdns_wire::name::from_presentation(n).unwrap().into_boxed_slice(), xdns_zone::Node { rrsets });
            }
            set.zones.insert(z.apex.clone(), std::sync::Arc::new(z));
        };
        add(
            "tld.",
            "$TTL 300\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 198.18.0.1\n\
             d1 NS ns.d1\nns.d1 A 198.18.0.2\nx.ns.d1 A 198.18.0.3\nd2 NS ns1\nd2 DS 1 13 2 ddc6e2b224d0fd821669202258386936fc9ce2899e215eec6322b95f8dd96d6a\n\
             a.ent NS ns1\nb.a.ent A 198.18.0.4\n*.w A 198.18.0.5\n*.d1 A 198.18.0.6\nw2 TXT x\n\
             *.w2 TXT y\nchild NS ns1\nwww.child A 198.18.0.7\nc CNAME d1\n",
            Some("0p9mhaveqvm6t7vbl5lop2u3t2rp3tom.tld."),
        );
        add("child.tld.", "$TTL 60\n@ SOA ns1.tld. h 1 7200 3600 1209600 300\n@ NS ns1.tld.\nwww A 198.18.1.1\nsub.x A 198.18.1.2\n", None);
        add("flat.test.", "$TTL 60\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 198.18.2.1\n*.w A 198.18.2.2\n", None);
        std::fs::remove_dir_all(&dir).unwrap();
        let want = nodes_by_lookups(&set);
        assert!(want.iter().any(|n| n.cut.is_some() && n.cut.as_deref() != Some(&n.name[..])), "a name below a cut");
        assert!(want.iter().filter(|n| n.wildcard).count() >= 3, "names with wildcard children");
        assert_eq!(nodes(&set).collect::<Vec<_>>(), want);
        let (answers, nodes_after) = answers_then_nodes(&set);
        assert_eq!(answers.collect::<Vec<_>>(), super::answers(&set).collect::<Vec<_>>());
        assert_eq!(nodes_after.collect::<Vec<_>>(), want);
        let nsec3 = xdns_wire::name::from_presentation("0p9mhaveqvm6t7vbl5lop2u3t2rp3tom.tld.").unwrap();
        assert!(want.iter().all(|n| n.name != nsec3), "an NSEC3-only name is no node");
    }

    /// An answer record (the table's, packed): the header, the class S bytes at once after
    /// it, the fixups at the next even offset, the length a multiple of four; the hash map's
    /// value is the same record padded with zeros. A class M record of the table is laid out
    /// as class S's ([`BODY_INLINE`]); its hash-map value, and class L, are the header alone.
    #[test]
    fn record_layout() {
        let body = Body { flags: 0x0400, ancount: 1, bytes: vec![0xab; 7], fixups: vec![0x0102, 0x0304], an_ns_len: 7, base_len: 5, ..Default::default() };
        let (a, v) = encode_body(&body);
        assert_eq!((HEADER_LEN, fix_at(7), fix_at(8)), (24, 8, 8));
        assert_eq!(record_len(&a, &v), 24 + 8 + 4);
        let mut rec = vec![0xee; record_len(&a, &v)];
        write_record(&mut rec, &a, &v);
        assert_eq!(&rec[..HEADER_LEN], crate::maps::bytes_of(&a));
        assert_eq!(&rec[24..31], &[0xab; 7]);
        assert_eq!(&rec[32..36], &[0x0102u16.to_ne_bytes(), 0x0304u16.to_ne_bytes()].concat()[..]);
        let full = answer_value(&a, &v);
        assert_eq!(&crate::maps::bytes_of(&*full)[24..36], &{
            let mut r = rec[24..36].to_vec();
            r[7] = 0; // the pad byte before the fixups, zero in the hash map's value
            r
        }[..]);
        assert!(crate::maps::bytes_of(&*full)[36..].iter().all(|&b| b == 0));
        let big = Body { bytes: (0..=CLASS_S_LEN as u8).collect(), fixups: vec![0x0506, 0x0708, 0x090a], ..Default::default() };
        let (mut ma, m) = encode_body(&big);
        assert!(matches!(m, BodyValue::M(_)));
        assert_eq!((fix_at_m(129), fix_at_m(130), fix_at_m(512)), (130, 130, 512));
        assert_eq!(record_len(&ma, &m), 24 + 130 + 6, "bytes, fixups at the next even offset, a multiple of four");
        let (ma2, m2) = encode_body(&Body { bytes: vec![7; 130], fixups: vec![1, 2, 3, 4], ..Default::default() });
        assert_eq!(record_len(&ma2, &m2), 24 + 130 + 8 + 2, "rounded up to four");
        // the hash map's value: the header alone (the bytes are in xdns_bodies_m)
        assert!(crate::maps::bytes_of(&*answer_value(&ma, &m))[HEADER_LEN..].iter().all(|&b| b == 0));
        ma.body_ver = BODY_INLINE;
        let mut rec = vec![0xee; record_len(&ma, &m)];
        write_record(&mut rec, &ma, &m);
        assert_eq!(&rec[..HEADER_LEN], crate::maps::bytes_of(&ma));
        assert_eq!(&rec[24..24 + 129], &big.bytes[..]);
        let fix: Vec<u8> = [0x0506u16, 0x0708, 0x090a].iter().flat_map(|f| f.to_ne_bytes()).collect();
        assert_eq!(&rec[24 + 130..24 + 136], &fix[..]);
        let longest = Body { bytes: vec![1; CLASS_S_LEN], fixups: vec![0; MAX_FIXUPS + 5], ..Default::default() };
        let (sa, s) = encode_body(&longest);
        assert_eq!(record_len(&sa, &s), std::mem::size_of::<xdns_answer_s>(), "the largest class S record is the whole struct");
        let longest_m = Body { bytes: vec![1; CLASS_M_LEN], fixups: vec![0; MAX_FIXUPS + 5], ..Default::default() };
        let (la, l) = encode_body(&longest_m);
        assert_eq!(record_len(&la, &l), HEADER_LEN + CLASS_M_LEN + 2 * MAX_FIXUPS, "the largest record is an inline M (struct xdns_answer_m)");
        // the kernel reads a record's fixups at up to 254 bytes into its data (class S), 512
        // (inline class M): the page's slack
        assert!(HEADER_LEN + 254 + 2 * MAX_FIXUPS <= PAGE_SLACK && record_len(&sa, &s) <= SPILL_SLOT);
        const { assert!(HEADER_LEN + CLASS_M_LEN + 2 * MAX_FIXUPS <= PAGE_SLACK) }
    }

    /// Checksums of bodies: odd lengths pad with zero, sums fold.
    #[test]
    fn csum16_table() {
        for (bytes, want) in [(&[][..], 0u16), (&[0x12][..], 0x1200), (&[0x12, 0x34, 0x56][..], 0x6834), (&[0xff, 0xff, 0x00, 0x01][..], 0x0001)] {
            assert_eq!(csum16(bytes), want, "{bytes:02x?}");
        }
    }
}
