//! What one zone's new version changes in the kernel's data, without compiling the zone whole
//! (issue 28: an IXFR that changes a few records updates only what changed).
//!
//! [`zone_delta`] is given the old and new zone sets (the new one differs from the old only in
//! the zone at `apex`), the owners the transfer changed, and what a [`ZoneIndex`] keeps of the
//! zone. It finds every name whose kernel entries can differ:
//! - the changed owners and their ancestors up to the apex (empty non-terminals appear and
//!   disappear; the apex always, its SOA serial changes);
//! - at a name that stays but becomes or stops being a delegation (NS below the apex), every
//!   name below it (their zone cut, and whether they have bodies of their own, change). A
//!   delegation added or removed with its whole subtree (NS, glue, DS: a registry's change)
//!   brings its names along as changed owners, and no other name is looked at;
//! - owners whose records name one of those (NS, MX, SRV, SVCB, HTTPS targets: the addresses in
//!   the additional section; CNAME targets: the chain), or a name below one whose existence or
//!   cut changed (a chain may now end elsewhere: NXDOMAIN, a wildcard, a referral) or below
//!   one of them that is a cut (a chain ends in its referral), and CNAMEs pointing at any of
//!   them, transitively. A wildcard `*.X` among them (added, removed or changed, or a
//!   dependent itself) counts as every name below `X` that does not exist, which its
//!   synthesis answers: chains to such a name are dependents too (and its own keys, the
//!   `Wildcard` ones at `X`, and `X`'s node with its wildcard flag are compiled as a changed
//!   owner's). A DNAME's owner added, removed or changed counts the same way (a chain to a
//!   name below it stops at the DNAME: lookup's module docs). The zone is scanned for those
//!   owners only when the index says some exist: an
//!   affected name pointed at by records of owners not affected themselves (counts by
//!   target), or a moved name, an affected cut or a changed wildcard's parent among the
//!   suffixes of CNAME targets (always for a wildcard at the apex);
//! - when the SOA changed, every name with a stored SOA-carrying body ([`soa_bound`]). Names
//!   answering NODATA from the apex's body (`XDNS_NODE_NODATA_APEX`), delegations without DS
//!   (their DS NODATA is the apex's, `data::shareable`, in a signed zone too), NXDOMAIN (one
//!   body at the apex) and a signed zone's DO=1 NODATA, a delegation's DS NODATA included
//!   (the apex part written before each name's own) need nothing: they are rebased from the
//!   apex's bodies by the kernel.
//!
//!
//! Signed zones (NSEC). A signed zone's DO=1 bodies are compiled beside the plain ones
//! (`data::ZoneCompiler`). A DO=1 NODATA whose first record is the SOA is stored in two parts
//! (bpf/README.md "Signed zones"): the apex's SOA part once (`Kind::ApexDo`, at the apex,
//! recompiled at every change) and each name's own proof; a DO=0 NODATA that is the apex's,
//! rebased, is shared as in unsigned zones. So the SOA-bound names of a signed zone are those
//! of an unsigned one (a CNAME chain ending in NODATA or NXDOMAIN) plus the names whose own
//! part is a proof of another owner ([`proof_elsewhere`]: an empty non-terminal's NODATA is the NSEC covering
//! it, which a name added or removed beside it moves without the transfer naming it); those
//! are recompiled at every change, the SOA changed or not. What is not SOA-bound changes only
//! with its owner's records, which the transfer brings (a signing primary sends the new
//! RRSIGs and the NSEC records of the neighbours): a name's own NSEC and its RRSIG, a referral
//! with DS (and its RRSIG) or with the cut's NSEC proving none, a positive answer and its
//! RRSIGs. A CNAME chain through a wildcard's synthesis carries no proof of its own
//! (`compile` writes the wildcard proofs of the question's own synthesis only, whose keys
//! have no DO body); the oracle test has one ending in a referral, whose owner carries no
//! SOA, with names coming and going beside the wildcard. A one-record change of a large
//! signed zone then recompiles the changed owners, their NSEC neighbours, their ancestors
//! and the apex (`signed_zone_above_the_limit_changes_in_place`: 400 names, limit 64).
//!
//! Signed zones (NSEC3). The same holds, but a name's proof is NSEC3 records at hashed owners,
//! which the transfer names instead of the name; [`Nsec3Index`] maps them back. A name with an
//! NSEC3 of its own is proved by it (its DO=1 NODATA's own part; a delegation's referral
//! without DS): it is found by its hash. A name without one (opt-out: an insecure delegation,
//! an empty non-terminal above insecure delegations only) is proved by the closest provable
//! encloser proof (its DO=1 referral or DS NODATA, an empty non-terminal's NODATA): the NSEC3
//! of its nearest ancestor that has one (its encloser) and the NSEC3 covering its next closer
//! name: it is found by that name's hash, and through its encloser. So for every changed NSEC3
//! owner of the chain (added, removed, its bitmap or its next hashed owner changed, re-signed)
//! the names whose stored bodies can carry it are: the name hashing to it; the names without an
//! NSEC3 of their own whose next closer name hashes into its interval, in either version (from
//! its owner up to the next owner of that version's chain: a record coming or going splits or
//! joins its neighbour's); and when the name hashing to it is an encloser, every name it
//! encloses (the apex's NSEC3 is in the proof of every opt-out delegation below the apex: more
//! of them than the limit fall back). Those names are compiled as changed owners are; a
//! delegation among them counts as an affected cut (a chain to a name below it ends in its
//! referral, which carries its proof). A NODATA's own part is NSEC3 records only, never another
//! owner's NSEC: no name is recompiled at every change for its proof ([`proof_elsewhere`] is
//! NSEC's). The index holds every name of the zone once (60-bit hash prefixes and names, in a
//! sorted array over one buffer of names, [`ProofSet`]: a prefix shared by two names
//! recompiles both) and a count per encloser. It is built after each full generation: a
//! SHA-1 per name (no text, no allocation), whether the hash is an NSEC3 owner's by a binary
//! search of the owners' hashes (decoded once), the name's ancestors below the apex looked up
//! for a cut (none for a TLD's delegations); a change hashes only the names it compiles. A
//! chain whose parameters change (NSEC3PARAM: every hashed owner moves) and a hash algorithm
//! other than SHA-1 are not handled.
//!
//! It then compiles those names' keys in both versions ([`xdns_zone::lookup::keys_of_name`],
//! by the full compile's per-key rules, `data::ZoneCompiler`: shared NODATA and DO=1 bodies
//! included) and returns the differences. What it does not handle returns the reason (the
//! caller falls back to a full generation): more affected names than `limit`, an NSEC3 chain
//! whose parameters changed. Names (and keys) of a served zone nested below the one changed
//! are that zone's, as in the full compile: left out.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};

use xdns_wire::{name, Body};
use xdns_zone::dnssec::{next_closer, nsec3_digest, nsec3_label_digest, Nsec3Params};
use xdns_zone::lookup::{keys_of_name, BodyKey, BodyKind};
use xdns_zone::{Zone, ZoneSet};

use crate::data::{owned_by, owns_dname, parent, AnswerEntry, Kind, NodeEntry, ZoneCompiler};

/// A node's entry before and after (`None`: absent), with "has an `Other` body of its own".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeChange {
    pub name: Vec<u8>,
    pub old: Option<(NodeEntry, bool)>,
    pub new: Option<(NodeEntry, bool)>,
}

/// A body before and after (`None`: absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerChange {
    pub base: Vec<u8>,
    pub kind: Kind,
    pub old: Option<Body>,
    pub new: Option<Body>,
}

/// The kernel entries one zone change touches.
#[derive(Clone, Debug, Default)]
pub struct Delta {
    pub nodes: Vec<NodeChange>,
    pub answers: Vec<AnswerChange>,
    /// Names compiled in both versions.
    pub names: usize,
    /// For each name compiled: does it now have a stored SOA-carrying body (the caller's
    /// [`soa_bound`] set, kept current)?
    pub soa_bound: Vec<(Vec<u8>, bool)>,
    /// Was the zone scanned for owners pointing at the affected names (module docs)?
    pub scanned: bool,
}

/// What [`zone_delta`] keeps of a zone between changes, so that a change need not look at
/// every name: the names with stored SOA-carrying bodies ([`soa_bound`]); for every name inside
/// the zone that records point at (NS, MX, SRV, SVCB, HTTPS, CNAME targets), by hash, how many
/// records do; the hashes of every suffix inside the zone of every CNAME target; an
/// NSEC3-signed zone's names by the hashes of their proofs ([`Nsec3Index`]).
///
/// A zone with more SOA-carrying names than a change may recompile (`limit` of [`Self::build`])
/// keeps none of this: every change of a zone changes its SOA serial, so none of its changes
/// can be made in place, and the sets would only hold memory
/// (docs/perf/2026-11-29-zone-memory-1m.md).
#[derive(Clone, Debug, Default)]
pub struct ZoneIndex {
    pub soa_bound: HashSet<Vec<u8>>,
    /// Records pointing at each in-zone name, by [`target_hash`]; kept exact by
    /// [`Self::update`] (the old records of a changed owner taken out, the new put in).
    pub targets: HashMap<u64, u32>,
    /// Every suffix below the apex of every CNAME target (the target included), by
    /// [`target_hash`]; only added to (a stale one costs a scan, never an answer).
    pub cname_suffixes: HashSet<u64>,
    /// `Some(limit)`: more names than `limit` carry the SOA; the sets above are left empty.
    pub soa_bound_over: Option<usize>,
    /// An NSEC3-signed zone's names by the hashes of their proofs (module docs).
    pub nsec3: Option<Nsec3Index>,
}

/// The names of an NSEC3-signed zone by the NSEC3 records their stored proofs carry (module
/// docs, "Signed zones (NSEC3)"): every name that has keys (not glue, not a hashed owner),
/// the apex included, in one of two [`ProofSet`]s by [`hash_key`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nsec3Index {
    /// The chain the hashes are of (the NSEC3PARAM at the apex).
    pub params: Nsec3Params,
    /// Names with an NSEC3 of their own, by their hash.
    pub matched: ProofSet,
    /// Names without one (opt-out), by the hash of their next closer name.
    pub covered: ProofSet,
    /// For each encloser of names in `covered` (by [`target_hash`]): how many it encloses.
    pub enclosers: HashMap<u64, u32>,
}

/// Names by a 60-bit hash prefix ([`hash_key`]), a prefix shared by several names holding
/// each: what [`Nsec3Index`] keeps, built once for a whole zone and changed a few names at a
/// time. The bulk is one sorted array of (prefix, where the name starts in one buffer of
/// wire names): 16 bytes and the name's own bytes a name, no allocation of its own. A name
/// taken out is marked in place ([`GONE`]: a binary search, nothing moved) and a name put
/// back (a name recompiled keeps its proof) loses the mark; a name new to the array joins a
/// small ordered set beside it. When that set outgrows a sixteenth of the array the two are
/// merged into a new array (once per many changes: a pass over the index).
#[derive(Clone, Debug, Default)]
pub struct ProofSet {
    /// (prefix, start of the name in `names`, with [`GONE`] when taken out), by prefix then name.
    sorted: Vec<(u64, u32)>,
    /// The names of `sorted`, one after another (wire names end themselves).
    names: Vec<u8>,
    /// Names put in since the last merge, not in `sorted`.
    added: BTreeSet<(u64, Box<[u8]>)>,
    /// Entries of `sorted` marked [`GONE`].
    gone: usize,
}

/// The mark of a name taken out of a [`ProofSet`]'s array (its bytes stay in the buffer, so
/// that it can be put back).
const GONE: u32 = 1 << 31;

/// Below this many names put in, [`ProofSet::insert`] never merges (a few in tests, so that
/// the oracle tests merge too).
const PROOF_SET_SPARE: usize = if cfg!(test) { 4 } else { 1024 };

impl ProofSet {
    /// The set of `entries` (any order, no duplicates).
    fn from_entries(mut entries: Vec<(u64, &[u8])>) -> Self {
        entries.sort_unstable();
        let mut set = ProofSet { sorted: Vec::with_capacity(entries.len()), ..Default::default() };
        set.names.reserve_exact(entries.iter().map(|(_, n)| n.len()).sum());
        for (k, n) in entries {
            set.push(k, n);
        }
        set
    }

    /// Append (the caller keeps the order); names past 2 GiB of names (never a zone's)
    /// go to `added`.
    fn push(&mut self, k: u64, n: &[u8]) {
        if self.names.len() + n.len() < GONE as usize {
            self.sorted.push((k, self.names.len() as u32));
            self.names.extend_from_slice(n);
        } else {
            self.added.insert((k, n.into()));
        }
    }

    /// The wire name starting at `at` (without the mark) of the buffer.
    fn name_at(&self, at: u32) -> &[u8] {
        let rest = &self.names[(at & !GONE) as usize..];
        &rest[..name::name_len(rest).unwrap_or(rest.len())]
    }

    /// The index in `sorted` of (`k`, `n`), marked or not.
    fn position(&self, k: u64, n: &[u8]) -> Option<usize> {
        let from = self.sorted.partition_point(|e| e.0 < k);
        (from..self.sorted.len()).take_while(|&i| self.sorted[i].0 == k).find(|&i| self.name_at(self.sorted[i].1) == n)
    }

    /// How many names the set holds.
    pub fn len(&self) -> usize {
        self.sorted.len() - self.gone + self.added.len()
    }

    /// Does the set hold no name?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Put (`k`, `n`) in.
    fn insert(&mut self, k: u64, n: &[u8]) {
        match self.position(k, n) {
            Some(i) => {
                if self.sorted[i].1 & GONE != 0 {
                    self.sorted[i].1 &= !GONE;
                    self.gone -= 1;
                }
            }
            None => {
                self.added.insert((k, n.into()));
                if self.added.len() > PROOF_SET_SPARE.max(self.sorted.len() / 16) {
                    self.merge();
                }
            }
        }
    }

    /// Take (`k`, `n`) out.
    fn remove(&mut self, k: u64, n: &[u8]) {
        if let Some(i) = self.position(k, n) {
            if self.sorted[i].1 & GONE == 0 {
                self.sorted[i].1 |= GONE;
                self.gone += 1;
            }
        } else {
            self.added.remove(&(k, Box::from(n)));
        }
    }

    /// One array again, without the marked names.
    fn merge(&mut self) {
        let all: Vec<(u64, Vec<u8>)> = self.iter().map(|(k, n)| (k, n.to_vec())).collect();
        *self = ProofSet::from_entries(all.iter().map(|(k, n)| (*k, &n[..])).collect());
    }

    /// Every (prefix, name), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let sorted = self.sorted.iter().filter(|e| e.1 & GONE == 0).map(|&(k, at)| (k, self.name_at(at)));
        sorted.chain(self.added.iter().map(|(k, n)| (*k, &n[..])))
    }

    /// The names whose prefix is in `from..=to`, wrapping past the greatest prefix when
    /// `to < from` (the last NSEC3 owner's interval), into `out`.
    fn range_into(&self, from: u64, to: u64, out: &mut HashSet<Vec<u8>>) {
        let spans: [(u64, u64); 2] = if from <= to { [(from, to), (1, 0)] } else { [(from, u64::MAX), (0, to)] };
        for (lo, hi) in spans.into_iter().filter(|(lo, hi)| lo <= hi) {
            let start = self.sorted.partition_point(|e| e.0 < lo);
            for &(_, at) in self.sorted[start..].iter().take_while(|e| e.0 <= hi).filter(|e| e.1 & GONE == 0) {
                out.insert(self.name_at(at).to_vec());
            }
            out.extend(self.added.range((lo, Box::<[u8]>::default())..).take_while(|(k, _)| *k <= hi).map(|(_, n)| n.to_vec()));
        }
    }
}

/// The same names: how the array, the marks and the set beside it hold them does not count.
impl PartialEq for ProofSet {
    fn eq(&self, other: &Self) -> bool {
        fn sorted(s: &ProofSet) -> Vec<(u64, &[u8])> {
            let mut v: Vec<(u64, &[u8])> = s.iter().collect();
            v.sort_unstable();
            v
        }
        self.len() == other.len() && sorted(self) == sorted(other)
    }
}

impl Eq for ProofSet {}

/// Where a name's stored proofs find their NSEC3 records ([`Nsec3Index`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proof {
    /// The NSEC3 matching the name, by [`hash_key`].
    Matched(u64),
    /// The closest provable encloser proof: the NSEC3 covering the next closer name (its
    /// [`hash_key`]) and the NSEC3 matching the encloser (its [`target_hash`]).
    Covered(u64, u64),
}

/// The first 60 bits of the hash an NSEC3 owner's label (base32hex, lowercase) spells, in
/// the top of a `u64`: ordered as the hashes are (equal for hashes sharing those bits).
fn hash_key(label: &[u8]) -> u64 {
    let digit = |c: u8| match c.to_ascii_lowercase() {
        c @ b'0'..=b'9' => c - b'0',
        c @ b'a'..=b'v' => c - b'a' + 10,
        _ => 0,
    };
    (0..12).fold(0u64, |k, i| k << 5 | u64::from(digit(label.get(i).copied().unwrap_or(b'0')))) << 4
}

/// [`hash_key`] of the label that spells `digest`: its first 60 bits.
fn digest_key(digest: &[u8; 20]) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) & !0xf
}

/// Has the chain of `p` in `zone` an owner of the hash `label` (base32hex, lowercase): an
/// NSEC3 record of these parameters at `label.<apex>`? (One node lookup: a binary search of
/// the zone's NSEC3 owners costs a cache miss a step.)
fn matched(zone: &Zone, p: &Nsec3Params, label: &[u8]) -> bool {
    let mut owner = [0u8; 256];
    let len = 1 + label.len() + zone.apex.len();
    if label.len() > 63 || len > 255 {
        return false;
    }
    owner[0] = label.len() as u8;
    owner[1..1 + label.len()].copy_from_slice(label);
    owner[1 + label.len()..len].copy_from_slice(&zone.apex);
    let same = |d: &[u8]| {
        let salt = d.get(4).map(|&n| usize::from(n));
        d.first() == Some(&p.algorithm)
            && d.get(2..4) == Some(&p.iterations.to_be_bytes()[..])
            && salt.and_then(|n| d.get(5..5 + n)) == Some(&p.salt[..])
    };
    zone.nodes.get(&owner[..len]).and_then(|n| n.rrset(NSEC3)).is_some_and(|s| s.rdata.iter().any(same))
}

/// Has the apex of `zone` an RRset of `rtype`?
fn apex_has(zone: &Zone, rtype: u16) -> bool {
    zone.nodes.get(&zone.apex[..]).is_some_and(|n| n.rrset(rtype).is_some())
}

/// Has `nm`, a name of `zone` (a node, not a hashed owner), keys of its own: is it at or
/// above every zone cut and DNAME on its way from the apex (`lookup::find` gives `Exact` or
/// `Cut`)? Only its ancestors below the apex are looked up (none for a TLD's delegation);
/// `apex_dname`: the apex holds a DNAME.
fn keyed(zone: &Zone, nm: &[u8], apex_dname: bool) -> bool {
    if nm == &zone.apex[..] {
        return true;
    }
    if apex_dname || !name::is_subdomain(nm, &zone.apex) {
        return false;
    }
    name::suffix_offsets(nm)
        .skip(1)
        .map(|o| &nm[o..])
        .take_while(|a| a.len() > zone.apex.len())
        .all(|a| zone.node(a).is_some_and(|n| n.rrset(NS).is_none() && n.rrset(DNAME).is_none()))
}

/// The NSEC3 owner label (base32hex, lowercase: RFC 4648 §7) spelling `digest`.
fn digest_label(digest: &[u8; 20]) -> [u8; 32] {
    const DIGITS: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let mut out = [0u8; 32];
    // five bytes are eight digits
    for (group, digits) in digest.chunks_exact(5).zip(out.chunks_exact_mut(8)) {
        let bits = group.iter().fold(0u64, |b, &x| b << 8 | u64::from(x));
        for (i, d) in digits.iter_mut().enumerate() {
            *d = DIGITS[(bits >> (35 - 5 * i) & 31) as usize];
        }
    }
    out
}

/// The hashes of a zone's NSEC3 owners of the chain (`Denial::nsec3_owners`, whose labels
/// spell them in base32hex), as bytes, sorted: one binary search tells whether a name has an
/// NSEC3 of its own (labels that spell no SHA-1 hash match no name).
fn owner_digests(zone: &Zone) -> Vec<[u8; 20]> {
    let mut out: Vec<[u8; 20]> = zone
        .dnssec()
        .nsec3_owners
        .iter()
        .filter_map(|(label, _)| nsec3_label_digest(label))
        .collect();
    out.sort_unstable();
    out
}

impl Nsec3Index {
    /// The index of `zone` when it is signed with NSEC3 of a known hash algorithm.
    fn build<'z>(zone: &'z Zone) -> Option<Self> {
        if !xdns_zone::compile::is_signed(zone) {
            return None;
        }
        let params = zone.dnssec().nsec3.clone()?;
        nsec3_digest(&zone.apex, &params)?;
        let owners = owner_digests(zone);
        let ix = Nsec3Index { params, matched: ProofSet::default(), covered: ProofSet::default(), enclosers: HashMap::new() };
        // a hash per name: half of them on a second thread when there is one
        let names: Vec<&'z [u8]> = zone.nodes.iter().filter(|(_, n)| !xdns_zone::dnssec::is_nsec3_only(n)).map(|(k, _)| &k[..]).collect();
        let owned = |h: &[u8; 20]| owners.binary_search(h).is_ok();
        let apex_dname = apex_has(zone, DNAME);
        let proofs = |part: &[&'z [u8]]| -> Vec<(Proof, &'z [u8])> {
            let mut memo = HashMap::new();
            part.iter().filter_map(|nm| Some((ix.proof_with(zone, &owned, apex_dname, nm, &mut memo)?, *nm))).collect()
        };
        let (a, b) = names.split_at(names.len() / 2);
        let (a, b) = std::thread::scope(|s| {
            let other = std::thread::Builder::new().name("xdns-nsec3-index".into()).spawn_scoped(s, || {
                // created by the XDP thread: none of its capabilities, now or after the switch of user
                crate::threads::no_caps_after_switch();
                proofs(b)
            });
            match other {
                // a panic there is a bug of the hashing: the same one as on this thread
                Ok(h) => (proofs(a), h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
                Err(_) => (proofs(&names), Vec::new()),
            }
        });
        let (mut matched, mut covered, mut enclosers) = (Vec::new(), Vec::new(), HashMap::new());
        for (proof, nm) in a.into_iter().chain(b) {
            match proof {
                Proof::Matched(k) => matched.push((k, nm)),
                Proof::Covered(k, e) => {
                    covered.push((k, nm));
                    *enclosers.entry(e).or_default() += 1;
                }
            }
        }
        let (matched, covered) = (ProofSet::from_entries(matched), ProofSet::from_entries(covered));
        Some(Nsec3Index { matched, covered, enclosers, ..ix })
    }

    /// Where the stored proofs of `nm` in `zone` find their NSEC3 records, `None` for a name
    /// without keys (glue, a hashed owner) or without a proof (a broken chain); `memo`: whether
    /// an ancestor has an NSEC3, across calls. Each hash is looked for as an owner's node.
    fn proof<'n>(&self, zone: &Zone, nm: &'n [u8], memo: &mut HashMap<&'n [u8], Option<u64>>) -> Option<Proof> {
        let owned = |h: &[u8; 20]| matched(zone, &self.params, &digest_label(h));
        zone.node(nm)?;
        self.proof_with(zone, &owned, apex_has(zone, DNAME), nm, memo)
    }

    /// [`Self::proof`], `owned` telling whether a hash is an NSEC3 owner's of the chain.
    /// `apex_dname`: the apex holds a DNAME (no name below it has keys).
    fn proof_with<'n>(
        &self,
        zone: &Zone,
        owned: &dyn Fn(&[u8; 20]) -> bool,
        apex_dname: bool,
        nm: &'n [u8],
        memo: &mut HashMap<&'n [u8], Option<u64>>,
    ) -> Option<Proof> {
        if !keyed(zone, nm, apex_dname) {
            return None;
        }
        let h = nsec3_digest(nm, &self.params)?;
        if owned(&h) {
            return Some(Proof::Matched(digest_key(&h)));
        }
        for o in name::suffix_offsets(nm).skip(1) {
            let anc = &nm[o..];
            if !name::is_subdomain(anc, &zone.apex) {
                break;
            }
            let has = match memo.get(anc) {
                Some(has) => *has,
                None => {
                    let has = nsec3_digest(anc, &self.params).filter(|a| owned(a)).map(|_| target_hash(anc));
                    *memo.entry(anc).or_insert(has)
                }
            };
            if let Some(e) = has {
                let nc = next_closer(nm, anc)?;
                let k = if nc == nm { digest_key(&h) } else { digest_key(&nsec3_digest(nc, &self.params)?) };
                return Some(Proof::Covered(k, e));
            }
        }
        None
    }

    /// Take `nm` out of the sets as `zone` proves it, or put it in.
    fn count(&mut self, zone: &Zone, nm: &[u8], add: bool) {
        let proof = self.proof(zone, nm, &mut HashMap::new());
        let (set, k) = match proof {
            Some(Proof::Matched(k)) => (&mut self.matched, k),
            Some(Proof::Covered(k, e)) => {
                let n = self.enclosers.entry(e).or_default();
                *n = if add { *n + 1 } else { n.saturating_sub(1) };
                if *n == 0 {
                    self.enclosers.remove(&e);
                }
                (&mut self.covered, k)
            }
            None => return,
        };
        if add {
            set.insert(k, nm);
        } else {
            set.remove(k, nm);
        }
    }

    /// The names whose stored proofs can carry an NSEC3 record of an owner in `changed`, in
    /// `old` or in `new` (module docs), or why there are too many.
    fn proved_by(&self, old: &Zone, new: &Zone, changed: &[Vec<u8>], limit: usize) -> Result<HashSet<Vec<u8>>, String> {
        let mut out: HashSet<Vec<u8>> = HashSet::new();
        for c in changed {
            let c = lower(c);
            if parent(&c) != Some(&old.apex[..]) {
                continue;
            }
            let Some(label) = name::labels(&c).next() else { continue };
            let k = hash_key(label);
            let mut in_chain = false;
            for z in [old, new] {
                let owners = &z.dnssec().nsec3_owners;
                let Ok(i) = owners.binary_search_by(|(l, o)| (&l[..], &o[..]).cmp(&(label, &c[..]))) else { continue };
                in_chain = true;
                // the names covered by its interval in this version
                self.covered.range_into(k, hash_key(&owners[(i + 1) % owners.len()].0), &mut out);
            }
            if !in_chain {
                continue;
            }
            let mut matched = HashSet::new();
            self.matched.range_into(k, k, &mut matched);
            for e in &matched {
                let n = self.enclosers.get(&target_hash(e)).copied().unwrap_or(0) as usize;
                if n > limit {
                    return Err(format!("the NSEC3 of {}, in the proofs of {n} names without their own, changed", name::to_presentation(e)));
                }
                if n > 0 {
                    out.extend(self.covered.iter().filter(|(_, x)| x.len() > e.len() && name::is_subdomain(x, e)).map(|(_, x)| x.to_vec()));
                }
            }
            out.extend(matched);
            if out.len() > limit {
                return Err(format!("more than {limit} names' NSEC3 proofs changed"));
            }
        }
        Ok(out)
    }
}

/// Target hashes: any fixed hash of the lowercased name `n` (only compared with itself).
fn target_hash(n: &[u8]) -> u64 {
    crate::hash::name_hash(0x7461_7267_6574, n)
}

impl ZoneIndex {
    /// The index of `zone` (one pass over its records), with `soa_bound` from a full compile
    /// (which may stop gathering past `limit`); nothing but the limit when there are more.
    pub fn build(zone: &Zone, soa_bound: HashSet<Vec<u8>>, limit: usize) -> Self {
        if soa_bound.len() > limit {
            return ZoneIndex { soa_bound_over: Some(limit), ..Default::default() };
        }
        let mut ix = ZoneIndex { soa_bound, nsec3: Nsec3Index::build(zone), ..Default::default() };
        for node in zone.nodes.values() {
            ix.count_node(&zone.apex, node, true);
        }
        ix
    }

    /// Count the records of `node` at `owner` in (`add`) or out.
    fn count_node(&mut self, apex: &[u8], node: &xdns_zone::Node, add: bool) {
        for rr in &node.rrsets {
            for rd in &rr.rdata {
                let Some(t) = in_zone_target(rr.rtype, rd, apex) else { continue };
                let h = target_hash(&t);
                if add {
                    *self.targets.entry(h).or_default() += 1;
                    if rr.rtype == CNAME {
                        for o in name::suffix_offsets(&t) {
                            if t.len() - o <= apex.len() {
                                break;
                            }
                            self.cname_suffixes.insert(target_hash(&t[o..]));
                        }
                    }
                } else if let Some(n) = self.targets.get_mut(&h) {
                    *n -= 1;
                    if *n == 0 {
                        self.targets.remove(&h);
                    }
                }
            }
        }
    }

    /// Take in a change from `old` to `new` (the zone's versions) applied in place:
    /// `delta`'s SOA-bound names, and the records of the changed owners (those of `old` taken
    /// out of the counts, those of `new` put in).
    pub fn update(&mut self, old: &Zone, new: &Zone, changed: &[Vec<u8>], delta: &Delta) {
        for (n, b) in &delta.soa_bound {
            if *b {
                self.soa_bound.insert(n.clone());
            } else {
                self.soa_bound.remove(n);
            }
        }
        let mut seen = HashSet::new();
        for c in changed {
            let c = lower(c);
            if !seen.insert(c.clone()) {
                continue;
            }
            if let Some(node) = old.nodes.get(&c[..]) {
                self.count_node(&old.apex, node, false);
            }
            if let Some(node) = new.nodes.get(&c[..]) {
                self.count_node(&new.apex, node, true);
            }
        }
        // every name whose proof can have moved was compiled (module docs)
        if let Some(ix) = &mut self.nsec3 {
            for (n, _) in &delta.soa_bound {
                ix.count(old, n, false);
                ix.count(new, n, true);
            }
        }
    }
}

const NS: u16 = 2;
const CNAME: u16 = 5;
const SOA: u16 = 6;
const MX: u16 = 15;
const SRV: u16 = 33;
const NSEC3: u16 = 50;
const DNAME: u16 = 39;
const NSEC3PARAM: u16 = 51;
const SVCB: u16 = 64;
const HTTPS: u16 = 65;

/// Does `b` carry the apex SOA (an authoritative negative answer: an SOA record in its
/// authority section)? A CNAME chain ending in a referral is authoritative and has NS there,
/// no SOA. Bytes that do not parse count as carrying it.
pub fn carries_soa(b: &Body) -> bool {
    if b.nscount == 0 || b.flags & 0x0400 == 0 {
        return false;
    }
    // the type of each record of the answer and authority sections, in order
    let mut at = 0usize;
    let bytes = &b.bytes[..usize::from(b.an_ns_len).min(b.bytes.len())];
    for i in 0..usize::from(b.ancount) + usize::from(b.nscount) {
        // the owner: labels up to the root, or up to a compression pointer
        loop {
            match bytes.get(at) {
                Some(0) => {
                    at += 1;
                    break;
                }
                Some(l) if l & 0xC0 == 0xC0 => {
                    at += 2;
                    break;
                }
                Some(&l) if l < 64 => at += 1 + usize::from(l),
                _ => return true,
            }
        }
        let (Some(t), Some(rdlen)) = (bytes.get(at..at + 2), bytes.get(at + 8..at + 10)) else { return true };
        if i >= usize::from(b.ancount) && t == SOA.to_be_bytes() {
            return true;
        }
        at += 10 + usize::from(u16::from_be_bytes([rdlen[0], rdlen[1]]));
    }
    false
}

/// Is `b` a DO=1 NODATA's own part ([`Body::after_apex`]) whose proof is not the name's own
/// NSEC (first owner not the question, `0xC00C`): an empty non-terminal's, the NSEC covering
/// it, which a name added or removed beside it changes without the transfer naming it. Not
/// NSEC3 records, which are all at other (hashed) owners: [`Nsec3Index`] finds the names
/// they prove.
pub fn proof_elsewhere(b: &Body) -> bool {
    b.after_apex && b.bytes.get(..2) != Some(&[0xC0, 0x0C][..]) && first_type(&b.bytes) != Some(NSEC3)
}

/// The type of the first record of `bytes` (after its owner: labels up to the root, or up to
/// a compression pointer); `None` when they do not parse.
fn first_type(bytes: &[u8]) -> Option<u16> {
    let mut at = 0usize;
    loop {
        match *bytes.get(at)? {
            0 => break at += 1,
            l if l & 0xC0 == 0xC0 => break at += 2,
            l if l < 64 => at += 1 + usize::from(l),
            _ => return None,
        }
    }
    bytes.get(at..at + 2).map(|t| u16::from_be_bytes([t[0], t[1]]))
}

/// The name a serial change must recompile for the stored body `a` if it carries the SOA
/// (or is a proof of another owner's, [`proof_elsewhere`]): its base, or for a wildcard body
/// the wildcard's name (`*.base`), whose keys give it.
fn bound_name(a: &AnswerEntry) -> Option<Vec<u8>> {
    (carries_soa(&a.body) || proof_elsewhere(&a.body)).then(|| match a.kind {
        Kind::Wildcard(_) | Kind::WildcardOther => [&b"\x01*"[..], &a.base].concat(),
        _ => a.base.clone(),
    })
}

/// The names of the zone at `apex` whose stored bodies (`answers` of a full compile) carry the
/// SOA ([`bound_name`]), the apex excluded: what a serial change must recompile besides the
/// apex.
pub fn soa_bound(answers: &[AnswerEntry], apex: &[u8]) -> HashSet<Vec<u8>> {
    answers
        .iter()
        .filter(|a| name::is_subdomain(&a.base, apex))
        .filter_map(bound_name)
        .filter(|n| n != apex)
        .collect()
}

/// [`soa_bound`] of every zone of `zones` at once, by apex (one pass over `answers`).
pub fn soa_bound_by_zone(zones: &ZoneSet, answers: &[AnswerEntry]) -> HashMap<Vec<u8>, HashSet<Vec<u8>>> {
    let mut out: HashMap<Vec<u8>, HashSet<Vec<u8>>> = HashMap::new();
    for a in answers {
        let Some(n) = bound_name(a) else { continue };
        let Some(z) = zones.find(&a.base) else { continue };
        if *n != z.apex[..] {
            out.entry(z.apex.to_vec()).or_default().insert(n);
        }
    }
    out
}

/// The name a record's RDATA points at, for the types whose answers depend on it (its bytes
/// only: SVCB and HTTPS parameters after it left off).
fn target(rtype: u16, rdata: &[u8]) -> Option<&[u8]> {
    let skip = match rtype {
        NS | CNAME => 0,
        MX | SVCB | HTTPS => 2,
        SRV => 6,
        _ => return None,
    };
    let t = rdata.get(skip..)?;
    name::name_len(t).ok().map(|len| &t[..len])
}

/// [`target`] lowercased (copied only when it has capitals), when it lies inside the zone at
/// `apex` (the apex included).
fn in_zone_target<'a>(rtype: u16, rdata: &'a [u8], apex: &[u8]) -> Option<Cow<'a, [u8]>> {
    let t = target(rtype, rdata)?;
    let t = if t.iter().any(u8::is_ascii_uppercase) { Cow::Owned(lower(t)) } else { Cow::Borrowed(t) };
    name::is_subdomain(&t, apex).then_some(t)
}

/// The apex's RRsets but its SOA.
fn apex_but_soa(zone: &Zone) -> Vec<&xdns_zone::tree::Rrset> {
    zone.nodes.get(&zone.apex[..]).map_or(Vec::new(), |n| n.rrsets.iter().filter(|r| r.rtype != SOA).collect())
}

/// The highest zone cut between the apex (excluded) and `name` (included).
fn cut_of(zone: &Zone, name: &[u8]) -> Option<Vec<u8>> {
    let mut cut = None;
    let mut cur = name;
    while cur != &zone.apex[..] {
        if zone.nodes.get(cur).is_some_and(|n| n.rrset(NS).is_some()) {
            cut = Some(cur.to_vec());
        }
        cur = parent(cur)?;
    }
    cut
}

/// One name's node and stored bodies in `zone`, compiled by the full compile's per-key rules
/// (`data::ZoneCompiler`: NODATA shared with the apex's, a signed zone's DO bodies; none for
/// names and keys `owned` says a served child zone answers), and whether one of them carries
/// the SOA.
fn name_state(
    zone: &Zone,
    owned: &dyn Fn(&[u8]) -> bool,
    compiler: &mut ZoneCompiler<'_>,
    nm: &[u8],
) -> (Option<(NodeEntry, bool)>, Vec<AnswerEntry>, bool) {
    if !owned(nm) {
        return (None, Vec::new(), false);
    }
    let mut keys = Vec::new();
    keys_of_name(zone, nm, &mut keys);
    if nm == &zone.apex[..] {
        keys.push(BodyKey { base: zone.apex.clone(), kind: BodyKind::NxDomain });
    }
    let mut answers = Vec::with_capacity(keys.len());
    for key in keys {
        answers.extend(compiler.key(key).into_iter().flatten());
    }
    let bound = nm != &zone.apex[..] && answers.iter().any(|a| carries_soa(&a.body) || proof_elsewhere(&a.body));
    let node = zone.node(nm).map(|_| {
        let mut wild = Vec::with_capacity(nm.len() + 2);
        wild.extend_from_slice(b"\x01*");
        wild.extend_from_slice(nm);
        let own = answers.iter().any(|a| a.kind == Kind::Other && a.base == nm);
        let n = NodeEntry {
            name: nm.to_vec(),
            apex: zone.apex.to_vec(),
            cut: cut_of(zone, nm),
            wildcard: zone.nodes.contains_key(&wild[..]) || zone.nodes.get(nm).is_some_and(owns_dname),
        };
        (n, own)
    });
    (node, answers, bound)
}

fn lower(n: &[u8]) -> Vec<u8> {
    n.to_ascii_lowercase()
}

/// The changes of the zone at `apex` from `old` to `new` for the kernel (module docs), or why
/// the caller should write a full generation instead.
pub fn zone_delta(
    old: &ZoneSet,
    new: &ZoneSet,
    apex: &[u8],
    changed: &[Vec<u8>],
    index: &ZoneIndex,
    limit: usize,
) -> Result<Delta, String> {
    let soa_bound = &index.soa_bound;
    if let Some(n) = index.soa_bound_over {
        return Err(format!("more than {n} names have stored bodies carrying the SOA, which every change changes"));
    }
    let (Some(oz), Some(nz)) = (old.zones.get(apex), new.zones.get(apex)) else {
        return Err("the zone was added or removed".into());
    };
    if old.zones.len() != new.zones.len() || new.zones.keys().any(|a| !old.zones.contains_key(a)) {
        return Err("the served zones changed".into());
    }
    // A signed zone: every name whose stored bodies carry the SOA is recompiled at every
    // change, the SOA changed or not (module docs, "Signed zones").
    let signed = xdns_zone::compile::is_signed(oz) || xdns_zone::compile::is_signed(nz);
    let nsec3 = if signed && [oz, nz].iter().any(|z| z.nodes.get(&z.apex[..]).is_some_and(|n| n.rrset(NSEC3PARAM).is_some())) {
        match &index.nsec3 {
            Some(ix) if [oz, nz].iter().all(|z| z.dnssec().nsec3.as_ref() == Some(&ix.params)) => Some(ix),
            Some(_) => return Err("the NSEC3 chain's parameters changed (every hashed owner moves)".into()),
            None => return Err("an NSEC3-signed zone whose names are not indexed by hash (the chain is new, or of an unknown hash)".into()),
        }
    } else {
        None
    };
    // the changed owners and their ancestors up to the apex; names that stay but become or
    // stop being a delegation
    let mut affected: HashSet<Vec<u8>> = HashSet::new();
    let mut flipped: Vec<Vec<u8>> = Vec::new();
    for c in changed {
        let c = lower(c);
        if !name::is_subdomain(&c, apex) {
            return Err("a changed owner outside the zone".into());
        }
        let (on, nn) = (oz.nodes.get(&c[..]), nz.nodes.get(&c[..]));
        let has = |n: Option<&xdns_zone::Node>, t| n.is_some_and(|n| n.rrset(t).is_some());
        if c != apex && has(on, NS) != has(nn, NS) && oz.node(&c).is_some() && nz.node(&c).is_some() {
            flipped.push(c.clone());
        }
        let mut cur: &[u8] = &c;
        loop {
            affected.insert(cur.to_vec());
            if cur == apex {
                break;
            }
            cur = parent(cur).ok_or("a changed owner outside the zone")?;
        }
    }
    affected.insert(apex.to_vec());
    // below a name that stays and becomes (or stops being) a cut, every name changes cut
    if !flipped.is_empty() {
        for z in [oz, nz] {
            for k in z.nodes.keys() {
                if flipped.iter().any(|c| k.len() > c.len() && name::is_subdomain(k, c)) {
                    affected.insert(k.to_vec());
                }
            }
            if affected.len() > limit {
                return Err(format!("more than {limit} names below a changed delegation"));
            }
        }
    }
    // names whose proofs carry a changed NSEC3 record (module docs): a cut among them is
    // affected (chains end in its referral, which carries its proof), the others are compiled
    let mut proved: Vec<Vec<u8>> = Vec::new();
    if let Some(ix) = nsec3 {
        for n in ix.proved_by(oz, nz, changed, limit)? {
            if n != apex && [oz, nz].iter().any(|z| z.nodes.get(&n[..]).is_some_and(|x| x.rrset(NS).is_some())) {
                affected.insert(n);
            } else {
                proved.push(n);
            }
        }
    }
    // names whose existence or cut changed: where a chain to a name below them ends changes
    let mut moved: Vec<Vec<u8>> =
        affected.iter().filter(|n| oz.node(n).is_some() != nz.node(n).is_some()).cloned().collect();
    moved.extend(flipped.iter().cloned());
    let mut lens = [false; 256];
    affected.iter().for_each(|n| lens[n.len().min(255)] = true);
    // a cut in either version: a chain to a name below it ends in its referral
    let is_cut = |n: &[u8]| n != apex && [oz, nz].iter().any(|z| z.nodes.get(n).is_some_and(|x| x.rrset(NS).is_some()));
    // `*.X` in a set: a chain to a name below X that does not exist is synthesised from it;
    // a DNAME's owner X in a set (either version): a chain to any name below X stops there
    let owns = |n: &[u8]| [oz, nz].iter().any(|z| z.nodes.get(n).is_some_and(owns_dname));
    let wild_parents = |set: &HashSet<Vec<u8>>| -> Vec<Vec<u8>> {
        let wild = set.iter().filter(|n| n.starts_with(b"\x01*")).filter_map(|n| parent(n)).map(<[u8]>::to_vec);
        wild.chain(set.iter().filter(|n| owns(n)).cloned()).collect()
    };
    let depends = |t: &[u8], set: &HashSet<Vec<u8>>, wilds: &[Vec<u8>], lens: &[bool; 256]| -> bool {
        let has = |n: &[u8]| lens[n.len().min(255)] && set.contains(n);
        let below = |e: &Vec<u8>| t.len() > e.len() && name::is_subdomain(t, e);
        has(t)
            || moved.iter().any(below)
            || wilds.iter().any(below)
            || name::suffix_offsets(t).skip(1).map(|o| &t[o..]).take_while(|s| s.len() > apex.len()).any(|s| has(s) && is_cut(s))
    };
    let wilds = wild_parents(&affected);
    // Scan for dependents only when some may exist: an affected name that records of owners
    // not affected point at (the index's count is more than the affected owners' own
    // records give), or a moved name above (or at) a CNAME target.
    let mut from_affected: HashMap<u64, u32> = HashMap::new();
    for a in &affected {
        let Some(node) = oz.nodes.get(&a[..]) else { continue };
        for rr in &node.rrsets {
            for rd in &rr.rdata {
                if let Some(t) = in_zone_target(rr.rtype, rd, apex).filter(|t| affected.contains(&t[..])) {
                    *from_affected.entry(target_hash(&t)).or_default() += 1;
                }
            }
        }
    }
    // (the apex changes at every change, its SOA: chains ending in a NODATA or NXDOMAIN
    // carry the SOA and are recompiled as SOA-bound names; only other changes of the apex's
    // records make the names pointing at it dependents)
    let apex_same = apex_but_soa(oz) == apex_but_soa(nz);
    let pointed_at = affected.iter().filter(|n| !(apex_same && &n[..] == apex)).any(|n| {
        let h = target_hash(n);
        index.targets.get(&h).copied().unwrap_or(0) > from_affected.get(&h).copied().unwrap_or(0)
    });
    let scan = pointed_at
        || wilds.iter().any(|w| &w[..] == apex)
        || moved.iter().chain(affected.iter().filter(|n| is_cut(n))).chain(&wilds).any(|e| index.cname_suffixes.contains(&target_hash(e)));
    // one pass over the new version: direct dependents, and the CNAME edges for the closure
    let mut cnames: Vec<(&[u8], Cow<'_, [u8]>)> = Vec::new();
    let mut dependents: HashSet<Vec<u8>> = HashSet::new();
    let to_scan = if scan { Some(&nz.nodes) } else { None };
    for (owner, node) in to_scan.into_iter().flatten() {
        for rr in &node.rrsets {
            for rd in &rr.rdata {
                let Some(t) = in_zone_target(rr.rtype, rd, apex) else { continue };
                if depends(&t[..], &affected, &wilds, &lens) {
                    dependents.insert(owner.to_vec());
                }
                if rr.rtype == CNAME {
                    cnames.push((owner, t));
                }
            }
        }
    }
    // CNAMEs to anything affected, transitively
    let mut all: HashSet<Vec<u8>> = affected.union(&dependents).cloned().collect();
    loop {
        all.iter().for_each(|n| lens[n.len().min(255)] = true);
        let wilds = wild_parents(&all);
        let more: Vec<Vec<u8>> = cnames
            .iter()
            .filter(|(o, t)| !all.contains(*o) && depends(t, &all, &wilds, &lens))
            .map(|(o, _)| o.to_vec())
            .collect();
        if more.is_empty() {
            break;
        }
        if all.len() > limit {
            return Err(format!("more than {limit} names depend on the change"));
        }
        all.extend(more);
    }
    all.extend(proved);
    let soa_changed = oz.nodes.get(apex).and_then(|n| n.rrset(SOA)) != nz.nodes.get(apex).and_then(|n| n.rrset(SOA));
    if soa_changed || signed {
        if soa_bound.len() > limit {
            return Err(format!("the SOA changed and {} names have stored bodies carrying it", soa_bound.len()));
        }
        all.extend(soa_bound.iter().cloned());
    }
    if all.len() > limit {
        return Err(format!("{} names to recompile (limit {limit})", all.len()));
    }
    // compile both versions of every affected name and compare
    let (mut o_comp, mut n_comp) = (ZoneCompiler::new(old, oz), ZoneCompiler::new(new, nz));
    let mut names: Vec<Vec<u8>> = all.into_iter().collect();
    names.sort_unstable();
    let mut d = Delta { names: names.len(), scanned: scan, ..Default::default() };
    // names of a served zone nested below this one are that zone's (the same zones in both)
    let (o_owned, n_owned) = (owned_by(old, oz), owned_by(new, nz));
    for nm in &names {
        let (on, oa, _) = name_state(oz, &o_owned, &mut o_comp, nm);
        let (nn, na, bound) = name_state(nz, &n_owned, &mut n_comp, nm);
        d.soa_bound.push((nm.clone(), bound));
        if on != nn {
            d.nodes.push(NodeChange { name: nm.clone(), old: on, new: nn });
        }
        let mut olds: HashMap<(Vec<u8>, Kind), Body> = oa.into_iter().map(|a| ((a.base, a.kind), a.body)).collect();
        for a in na {
            let old = olds.remove(&(a.base.clone(), a.kind));
            if old.as_ref() != Some(&a.body) {
                d.answers.push(AnswerChange { base: a.base, kind: a.kind, old, new: Some(a.body) });
            }
        }
        let mut gone: Vec<_> = olds.into_iter().collect();
        gone.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for ((base, kind), body) in gone {
            d.answers.push(AnswerChange { base, kind, old: Some(body), new: None });
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::compile_kernel_data;
    use crate::hash::table_meta;
    use crate::maps::{bytes_of, Loader, MemMaps};
    use crate::types::{xdns_answer, xdns_answer_key};
    use std::sync::Arc;

    const APEX: &str = "t.";

    type Hosts = std::collections::BTreeMap<String, Vec<String>>;

    fn shaped() -> MemMaps {
        let mut m = MemMaps::default();
        (m.table_shape, m.filter_words) = ((64, 512 * 128), 256);
        m
    }

    /// A zone of `hosts` (host name → records), the SOA at `serial`.
    fn text(serial: u32, hosts: &std::collections::BTreeMap<String, Vec<String>>) -> String {
        let mut t = format!("$ORIGIN {APEX}\n$TTL 300\n@ SOA ns1 h {serial} 7200 3600 1209600 60\n@ NS ns1\nns1 A 198.18.0.1\n");
        for (h, recs) in hosts {
            for r in recs {
                t.push_str(&format!("{h} {r}\n"));
            }
        }
        t
    }

    fn load(dir: &std::path::Path, t: &str) -> ZoneSet {
        let f = dir.join("z.zone");
        std::fs::write(&f, t).unwrap();
        let z = xdns_zone::load_zone(&xdns_zone::ZoneSource { name: APEX.into(), file: f }, None).unwrap();
        let mut set = ZoneSet::default();
        set.zones.insert(z.apex.clone(), Arc::new(z));
        set
    }

    /// Owners whose records differ (what an IXFR's records name).
    fn owners(old: &ZoneSet, new: &ZoneSet) -> Vec<Vec<u8>> {
        let (o, n) = (old.zones.values().next().unwrap(), new.zones.values().next().unwrap());
        let mut v: Vec<Vec<u8>> = o.nodes.keys().chain(n.nodes.keys()).map(|k| k.to_vec()).collect();
        v.sort();
        v.dedup();
        v.retain(|k| {
            let (a, b) = (o.nodes.get(&k[..]).map(|x| &x.rrsets), n.nodes.get(&k[..]).map(|x| &x.rrsets));
            a != b && (a.is_some_and(|r| !r.is_empty()) || b.is_some_and(|r| !r.is_empty()))
        });
        v
    }

    /// What the kernel finds for `key` in `maps` (the table, then the hash map where the
    /// bucket is spilled), with the body bytes.
    /// The answer's `body_ver` is left out (0): which version an in-place change left is the
    /// kernel's business, the bytes found under it are what counts.
    fn found(maps: &MemMaps, key: &xdns_answer_key) -> Option<(xdns_answer, Option<Vec<u8>>)> {
        let half = &maps.table[(key.gen & 1) as usize];
        let body = |a: &xdns_answer| maps.bodies.get(bytes_of(&crate::maps::body_key(key, a))).map(|b| b.1.clone());
        let with = |a: &xdns_answer| (xdns_answer { body_ver: 0, ..*a }, body(a));
        if half.index.is_empty() {
            return maps.answer(key).map(with);
        }
        let b = crate::hash::table_bucket(key.hash, key.kind, key.qtype, half.index.len() as u32) as usize;
        let meta = table_meta(key.kind, key.qtype, key.gen);
        let bucket = &half.index[b];
        if let Some(e) = bucket.e.iter().find(|e| e.hash == key.hash && e.meta == meta) {
            let a = half.vals[&(e.idx & !crate::hash::TABLE_SPILLED)];
            // class S bytes are inline in the value; the test keeps them in `bodies` too
            return Some(with(&a));
        }
        if bucket.e[0].idx & crate::hash::TABLE_SPILLED != 0 {
            return maps.answer(key).map(with);
        }
        None
    }

    /// The oracle: random IXFR-like changes applied in place to the active generation leave
    /// the kernel's maps as a full encode of the resulting zone writes them: the same nodes,
    /// the same answers and bodies found through the table or the hash map, no key of the
    /// old version left, every presence bit of the fresh filter set; and the memo's epoch
    /// moves on at every update. Changes: addresses added and removed at existing and new
    /// names (new names several labels deep: empty non-terminals come and go), MX and SRV
    /// targets whose addresses change (additional sections), CNAMEs to changed names,
    /// TXT, the apex's own data (a CNAME points at the apex), and the serial of every
    /// version; in the zone with wildcards, wildcard owners added, removed and changed (their
    /// data, their types, a wildcard CNAME's target), a wildcard at the apex and one under a
    /// new empty non-terminal, a DNAME added, removed and retargeted, with CNAME chains
    /// through them. The index's target counts stay
    /// those of a fresh build.
    #[test]
    fn random_changes_in_place_equal_a_full_encode() {
        // with a wildcard (a chain to a name below it ends at a new name, or the wildcard)
        // and without
        random_changes(true, 1);
        random_changes(false, 1);
        // the serial kept (a reload of an edited file): no name is recompiled because it
        // carries the SOA, so every dependency above has to be found by its own rule
        random_changes(true, 0);
        random_changes(false, 0);
    }

    fn random_changes(wildcard: bool, serial_step: u32) {
        let mut hosts: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
        for i in 0..40 {
            hosts.insert(format!("h{i}"), vec![format!("A 198.18.1.{i}")]);
        }
        hosts.insert("mail".into(), vec!["MX 10 h1".into(), "MX 20 h2.t.".into()]);
        hosts.insert("_sip._udp".into(), vec!["SRV 0 0 5060 h3".into()]);
        hosts.insert("alias".into(), vec!["CNAME h4".into()]);
        hosts.insert("alias2".into(), vec!["CNAME alias".into()]);
        hosts.insert("dangling".into(), vec!["CNAME x.y.gone".into()]);
        hosts.insert("apexalias".into(), vec!["CNAME t.".into()]);
        if wildcard {
            hosts.insert("*.wild".into(), vec!["A 198.18.2.1".into()]);
            hosts.insert("wa".into(), vec!["CNAME q.r.wild".into()]);
            // a chain through a wildcard's CNAME: wb's answer holds h2's addresses
            hosts.insert("*.w2".into(), vec!["CNAME h2".into()]);
            hosts.insert("wb".into(), vec!["CNAME q.w2".into()]);
        }
        let rounds: u64 = if wildcard { 120 } else { 60 };
        let (in_place, _) = changes_in_place(text, &format!("h{wildcard}{serial_step}"), hosts, rounds, serial_step, LIMIT, |hosts, next, _| {
            let h = format!("h{}", next(45));
            match next(if wildcard { 14 } else { 9 }) {
                0 => hosts.entry(h).or_default().push(format!("A 198.18.3.{}", next(250))),
                1 => {
                    hosts.remove(&h);
                }
                2 => hosts.entry(h).or_default().push(format!("AAAA 2001:db8::{}", next(999))),
                3 => {
                    let deep = format!("a{}.b{}.c", next(3), next(3));
                    if hosts.remove(&deep).is_none() {
                        hosts.insert(deep, vec![format!("TXT \"v{}\"", next(9))]);
                    }
                }
                4 => {
                    hosts.insert("alias".into(), vec![format!("CNAME {h}")]);
                }
                5 => {
                    hosts.insert("x.y.gone".into(), vec!["A 198.18.4.4".into()]);
                    if wildcard {
                        // wa's chain now ends at r.wild (NXDOMAIN), not at *.wild
                        hosts.insert("r.wild".into(), vec!["TXT \"r\"".into()]);
                    }
                }
                6 => {
                    hosts.remove("x.y.gone");
                    hosts.remove("r.wild");
                }
                7 => {
                    // the apex's own data (apexalias's chain ends there)
                    hosts.insert("@".into(), vec![format!("A 198.18.6.{}", next(250))]);
                }
                8 => {
                    hosts.insert("h2".into(), vec![format!("A 198.18.5.{}", next(250))]);
                }
                // wildcard owners changed (only in the zone with wildcards)
                9 => match next(3) {
                    // *.wild's data, its types, or the wildcard gone (wa's chain ends in
                    // NXDOMAIN) and back
                    0 => {
                        hosts.insert("*.wild".into(), vec![format!("A 198.18.2.{}", next(250))]);
                    }
                    1 => {
                        hosts.insert("*.wild".into(), vec![format!("TXT \"w{}\"", next(9)), "AAAA 2001:db8::2".into()]);
                    }
                    _ => {
                        if hosts.remove("*.wild").is_none() {
                            hosts.insert("*.wild".into(), vec!["A 198.18.2.3".into()]);
                        }
                    }
                },
                10 => {
                    // the wildcard's CNAME points elsewhere (wb's chain follows it)
                    hosts.insert("*.w2".into(), vec![format!("CNAME h{}", next(45))]);
                }
                11 => {
                    // a wildcard at the apex: dangling's chain (x.y.gone) and every other
                    // name of the zone that does not exist end there
                    if hosts.remove("*").is_none() {
                        hosts.insert("*".into(), vec![format!("A 198.18.12.{}", next(250))]);
                    }
                }
                12 => {
                    // a wildcard under a name that does not exist yet (an empty non-terminal
                    // comes with it), and a chain to a name below it
                    if hosts.remove("*.n.e2").is_none() {
                        hosts.insert("*.n.e2".into(), vec![format!("TXT \"e{}\"", next(9))]);
                    }
                    hosts.insert("wc".into(), vec!["CNAME z.n.e2".into()]);
                }
                _ => {
                    // a DNAME's owner comes and goes, its name staying (TXT instead) or not
                    // (wd's chain stops at the DNAME, or ends in NXDOMAIN), or its target changes
                    let dname = hosts.get("dn").is_some_and(|r| r[0].starts_with("DNAME"));
                    match next(3) {
                        0 if dname => drop(hosts.remove("dn")),
                        1 if dname => drop(hosts.insert("dn".into(), vec!["TXT \"plain\"".into()])),
                        _ => drop(hosts.insert("dn".into(), vec![format!("DNAME t{}.example.", next(9))])),
                    }
                    hosts.insert("wd".into(), vec!["CNAME q.dn".into()]);
                }
            }
        });
        assert_eq!(in_place as u64, rounds);
    }

    /// A registry's zone (issue 28's TLD shape): delegations `dN` with two NS each, in-zone
    /// name servers with glue (A, some AAAA) for a share, out-of-zone ones for the rest, DS for
    /// a share; a wildcard under a delegation-less name, CNAMEs to a delegation, to a name
    /// below one (the chain ends in its referral) and to a name that may become one.
    fn tld_hosts() -> std::collections::BTreeMap<String, Vec<String>> {
        let mut hosts: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
        for i in 0..30 {
            tld_delegation(&mut hosts, i, i % 3 == 0, i % 5 == 0, i);
        }
        hosts.insert("*.w1".into(), vec!["A 198.18.2.1".into()]);
        hosts.insert("www1".into(), vec!["CNAME d1".into()]);
        hosts.insert("www2".into(), vec!["CNAME x.d3".into()]);
        hosts.insert("www3".into(), vec!["CNAME x.d40".into()]);
        hosts.insert("www4".into(), vec!["CNAME q.w1".into()]);
        hosts
    }

    /// Delegation `d{i}` with in-zone name servers and glue (`glue`), or a hoster's; a DS.
    fn tld_delegation(hosts: &mut std::collections::BTreeMap<String, Vec<String>>, i: u64, glue: bool, ds: bool, v: u64) {
        let d = format!("d{i}");
        if glue {
            hosts.insert(d.clone(), vec![format!("NS ns1.{d}"), format!("NS ns2.{d}")]);
            hosts.insert(format!("ns1.{d}"), vec![format!("A 198.18.6.{}", v % 250), format!("AAAA 2001:db8::{v}")]);
            hosts.insert(format!("ns2.{d}"), vec![format!("A 198.18.7.{}", v % 250)]);
        } else {
            hosts.insert(d.clone(), vec![format!("NS ns1.hoster{}.example.", i % 4), format!("NS ns2.hoster{}.example.", i % 4)]);
        }
        if ds {
            hosts.get_mut(&d).unwrap().push(format!("DS {} 13 2 {:064x}", 10000 + i, i + 1));
        }
    }

    fn tld_remove(hosts: &mut std::collections::BTreeMap<String, Vec<String>>, i: u64) {
        let d = format!("d{i}");
        hosts.retain(|k, _| *k != d && !k.ends_with(&format!(".{d}")));
    }

    /// The oracle on a registry's zone: every kind of change a registry makes, applied in
    /// place, leaves the maps as a full encode of the result writes them: delegations added
    /// (NS, glue, DS at once) and removed with their glue, a DS added and removed, a glue
    /// address changed, name servers moved into and out of the zone, another delegation's
    /// glue named, a name that stays and becomes a delegation (or stops being one: the names
    /// below it change cut), a CNAME's target below a new delegation. Typical registry
    /// changes (a delegation added with glue, a DS, a hoster's delegation removed) do not
    /// scan the zone.
    #[test]
    fn tld_changes_in_place_equal_a_full_encode() {
        let (in_place, scans) = changes_in_place(text, "tld", tld_hosts(), 80, 1, LIMIT, |hosts, next, round| {
            let i = 30 + next(20);
            let d = format!("d{i}");
            match next(9) {
                0 => {
                    tld_remove(hosts, i);
                    tld_delegation(hosts, i, next(2) == 0, next(2) == 0, round);
                }
                1 => tld_remove(hosts, i),
                2 => {
                    let had = hosts.get(&d).is_some_and(|r| r.iter().any(|r| r.starts_with("DS")));
                    if let Some(r) = hosts.get_mut(&d) {
                        r.retain(|r| !r.starts_with("DS"));
                        if !had {
                            r.push(format!("DS {} 13 2 {:064x}", 20000 + round, round + 7));
                        }
                    }
                }
                3 => {
                    if hosts.contains_key(&format!("ns1.{d}")) {
                        hosts.insert(format!("ns1.{d}"), vec![format!("A 198.18.8.{}", next(250))]);
                    }
                }
                4 => {
                    // name servers moved in or out of the zone, glue left behind or added
                    if let Some(r) = hosts.get_mut(&d) {
                        let out = r.iter().any(|r| r.contains("ns1.d"));
                        r.retain(|r| !r.starts_with("NS"));
                        if out {
                            r.push("NS ns.hoster9.example.".into());
                        } else {
                            r.push(format!("NS ns1.{d}"));
                            hosts.insert(format!("ns1.{d}"), vec![format!("A 198.18.9.{}", next(250))]);
                        }
                    }
                }
                5 => {
                    // another delegation's name server as this one's
                    let j = next(10) * 3;
                    tld_remove(hosts, i);
                    hosts.insert(d, vec![format!("NS ns1.d{j}")]);
                }
                6 => {
                    // a name that stays becomes a delegation, or stops being one
                    let e = "e1".to_string();
                    match hosts.get(&e) {
                        Some(r) if r.iter().any(|r| r.starts_with("NS")) => {
                            hosts.insert(e, vec!["TXT \"back\"".into()]);
                        }
                        Some(_) => {
                            hosts.insert(e, vec!["TXT \"cut\"".into(), "NS ns.e1".into()]);
                        }
                        None => {
                            hosts.insert(e, vec!["TXT \"plain\"".into()]);
                            hosts.insert("ns.e1".into(), vec!["A 198.18.10.1".into()]);
                            hosts.insert("x.y.e1".into(), vec!["TXT \"below\"".into()]);
                        }
                    }
                }
                7 => {
                    // www3's target x.d40 is below d40: its chain ends in d40's referral
                    if hosts.contains_key("d40") {
                        tld_remove(hosts, 40);
                    } else {
                        tld_delegation(hosts, 40, next(2) == 0, false, round);
                    }
                }
                _ => {
                    hosts.insert(format!("d{}", next(30)), vec![format!("NS ns1.hoster{}.example.", next(4))]);
                }
            }
        });
        assert_eq!(in_place, 80);
        assert!(scans < 40, "most changes need no scan of the zone: {scans} of 80 scanned");
        // the registry's common changes, one by one: none scans
        let dir = std::env::temp_dir().join(format!("xdns-delta-tld1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hosts = tld_hosts();
        let old = load(&dir, &text(1, &hosts));
        let apex = xdns_wire::name::from_presentation(APEX).unwrap();
        let data = compile_kernel_data(&old);
        let index = ZoneIndex::build(old.zones.values().next().unwrap(), soa_bound(&data.answers, &apex), 1000);
        type Change = Box<dyn Fn(&mut Hosts)>;
        let cases: Vec<(&str, Change)> = vec![
            ("a delegation added with glue and DS", Box::new(|h: &mut Hosts| tld_delegation(h, 60, true, true, 1))),
            ("a hoster's delegation added", Box::new(|h: &mut Hosts| tld_delegation(h, 61, false, false, 1))),
            ("a hoster's delegation removed", Box::new(|h: &mut Hosts| tld_remove(h, 4))),
            ("a DS added", Box::new(|h: &mut Hosts| h.get_mut("d2").unwrap().push(format!("DS 1 13 2 {:064x}", 255)))),
            ("a DS removed", Box::new(|h: &mut Hosts| h.get_mut("d5").unwrap().retain(|r| !r.starts_with("DS")))),
            ("a glue address changed", Box::new(|h: &mut Hosts| drop(h.insert("ns2.d6".into(), vec!["A 198.18.11.1".into()])))),
        ];
        for (what, change) in cases {
            let mut h = hosts.clone();
            change(&mut h);
            let new = load(&dir, &text(2, &h));
            let d = zone_delta(&old, &new, &apex, &owners(&old, &new), &index, 1000).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(!d.scanned, "{what}: the zone was scanned");
            // the changed names, their parent (the apex) and the SOA-bound names, no more
            let names: Vec<String> = d.soa_bound.iter().map(|(n, _)| xdns_wire::name::to_presentation(n)).collect();
            assert!(d.names <= 4 + index.soa_bound.len(), "{what}: {names:?} compiled (SOA-bound: {:?})", index.soa_bound);
        }
    }

    /// The in-place limit (names a change may recompile) of most tests here.
    const LIMIT: usize = 1000;

    /// Apply `rounds` changes made by `change(hosts, random, round)` to the zone of `hosts`
    /// (its text made by `render(serial, hosts)`) in place, each checked against a full encode
    /// of the result (the oracle above), the serial moved on by `serial_step` each time, with
    /// the in-place limit `limit`. Returns the changes made in place and how many scanned the
    /// zone.
    fn changes_in_place(
        render: fn(u32, &Hosts) -> String,
        tag: &str,
        mut hosts: std::collections::BTreeMap<String, Vec<String>>,
        rounds: u64,
        serial_step: u32,
        limit: usize,
        mut change: impl FnMut(&mut std::collections::BTreeMap<String, Vec<String>>, &mut dyn FnMut(u64) -> u64, u64),
    ) -> (usize, usize) {
        let dir = std::env::temp_dir().join(format!("xdns-delta-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let seed = 77;
        let mut serial = 1;
        let mut zones = load(&dir, &render(serial, &hosts));
        let mut maps = shaped();
        let mut loader = Loader::new(seed);
        let data = compile_kernel_data(&zones);
        let first = zones.zones.values().next().unwrap().clone();
        let mut index = ZoneIndex::build(&first, soa_bound(&data.answers, &first.apex), limit);
        loader.install(&mut maps, &data).unwrap();
        let apex = xdns_wire::name::from_presentation(APEX).unwrap();
        let (mut in_place, mut scans) = (0, 0);
        for round in 0..rounds {
            change(&mut hosts, &mut next, round);
            serial += serial_step;
            let new = load(&dir, &render(serial, &hosts));
            let changed = owners(&zones, &new);
            let delta = zone_delta(&zones, &new, &apex, &changed, &index, limit).unwrap_or_else(|e| panic!("round {round}: {e}"));
            scans += usize::from(delta.scanned);
            let epoch = maps.epoch;
            loader.apply(&mut maps, &delta).unwrap_or_else(|e| panic!("round {round}: {e}"));
            in_place += 1;
            assert_eq!(maps.epoch, epoch + 1, "round {round}: the memo forgets");
            index.update(zones.zones.values().next().unwrap(), new.zones.values().next().unwrap(), &changed, &delta);
            // the oracle: a fresh full encode of the new version in generation 1
            let fresh_data = compile_kernel_data(&new);
            assert_eq!(index.soa_bound, soa_bound(&fresh_data.answers, &apex), "round {round}: SOA-bound names kept current");
            let full = ZoneIndex::build(new.zones.values().next().unwrap(), HashSet::new(), 1000);
            assert_eq!(full.targets, index.targets, "round {round}: the target counts kept exact");
            assert!(full.cname_suffixes.is_subset(&index.cname_suffixes), "round {round}: every CNAME target suffix kept");
            assert_eq!(full.nsec3, index.nsec3, "round {round}: the names by NSEC3 hash kept exact");
            same_as_full_encode(&maps, &fresh_data, seed, round);
            zones = new;
        }
        (in_place, scans)
    }

    std::thread_local! {
        /// Bodies found at version 1 by [`same_as_full_encode`] on this test's thread.
        static VERSIONED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// The `xdns_answer_key` whose bytes are `k`.
    fn key_of(k: &[u8]) -> xdns_answer_key {
        let mut key = xdns_answer_key::default();
        // SAFETY: `k` is the bytes of an `xdns_answer_key` (`bytes_of` wrote them), a plain
        // `#[repr(C)]` struct whose every bit pattern is valid; the slice covers exactly
        // `key`, which it borrows mutably for this copy only.
        let raw = unsafe { std::slice::from_raw_parts_mut((&mut key as *mut xdns_answer_key).cast::<u8>(), std::mem::size_of::<xdns_answer_key>()) };
        raw.copy_from_slice(k);
        key
    }

    /// The oracle's comparison: `maps`, updated in place, hold what a fresh install of
    /// `fresh_data` (a full compile of the new version) writes (module tests' oracle).
    fn same_as_full_encode(maps: &MemMaps, fresh_data: &crate::data::KernelData, seed: u64, round: u64) {
        let mut fresh = shaped();
        Loader::new(seed).install(&mut fresh, fresh_data).unwrap();
        assert_eq!(maps.gen, fresh.gen);
        let raw = |m: &HashMap<Vec<u8>, _>| -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
            m.iter().map(|(k, v)| (k.clone(), bytes_of(v).to_vec())).collect()
        };
        assert_eq!(raw(&maps.nodes), raw(&fresh.nodes), "round {round}: nodes");
        let keys: std::collections::HashSet<&Vec<u8>> = maps.answers.keys().chain(fresh.answers.keys()).collect();
        for k in keys {
            let mut key = xdns_answer_key::default();
            // SAFETY: `k` is the bytes of an `xdns_answer_key` (`bytes_of` wrote them),
            // a plain `#[repr(C)]` struct whose every bit pattern is valid; the slice
            // covers exactly `key`, which it borrows mutably for this copy only.
            let raw = unsafe { std::slice::from_raw_parts_mut((&mut key as *mut xdns_answer_key).cast::<u8>(), std::mem::size_of::<xdns_answer_key>()) };
            raw.copy_from_slice(k);
            let want = found(&fresh, &key);
            let got = found(maps, &key);
            let fmt = |f: &Option<(xdns_answer, Option<Vec<u8>>)>| f.as_ref().map(|(a, b)| (bytes_of(a).to_vec(), b.clone()));
            assert_eq!(fmt(&got), fmt(&want), "round {round}: answer {key:?}");
        }
        let rawa = |m: &HashMap<Vec<u8>, xdns_answer>| -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
            m.iter().map(|(k, v)| (k.clone(), bytes_of(&xdns_answer { body_ver: 0, ..*v }).to_vec())).collect()
        };
        assert_eq!(rawa(&maps.answers), rawa(&fresh.answers), "round {round}: the hash map holds every answer, no old one");
        // the bytes of each answer at its version, none at the other (the old ones deleted)
        let versioned = maps.bodies.keys().filter(|k| k[15] != 0).count();
        // each body's bytes keyed at version 0 (the key's last byte)
        let at_version_zero = |bodies: &HashMap<Vec<u8>, _>| -> HashMap<Vec<u8>, _> {
            bodies
                .iter()
                .map(|(k, v)| {
                    let mut k: Vec<u8> = k.clone();
                    k[15] = 0;
                    (k, Clone::clone(v))
                })
                .collect()
        };
        let at_zero = at_version_zero(&maps.bodies);
        assert_eq!(at_zero.len(), maps.bodies.len(), "round {round}: one version of each body's bytes ({versioned} at 1)");
        VERSIONED.with(|v| v.set(v.get() + versioned));
        // (a fresh install keeps the bytes of its inline class M records at `BODY_INLINE`)
        let fresh_at_zero = at_version_zero(&fresh.bodies);
        assert_eq!(at_zero, fresh_at_zero, "round {round}: body bytes");
        for (k, a) in &maps.answers {
            assert!(maps.bodies.contains_key(bytes_of(&crate::maps::body_key(&key_of(k), a))) || a.class == 3, "round {round}: bytes at the answer's version");
        }
        let (f, g) = (fresh.filter[1].as_ref().unwrap(), maps.filter[1].as_ref().unwrap());
        assert!(f.words().iter().zip(g.words()).all(|(a, b)| a & b == *a), "round {round}: every fresh presence bit set");
    }

    /// How [`sign`] proves names absent.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Chain {
        Nsec,
        /// SHA-1, no salt, no extra iterations; `opt_out`: insecure delegations and the empty
        /// non-terminals above insecure delegations only have no NSEC3 (RFC 5155 §7.1).
        Nsec3 { opt_out: bool },
    }

    /// [`text`] signed with NSEC ([`sign`]).
    fn signed_text(serial: u32, hosts: &Hosts) -> String {
        sign(serial, hosts, Chain::Nsec)
    }

    /// [`text`] signed with NSEC3 ([`sign`]).
    fn nsec3_text(serial: u32, hosts: &Hosts) -> String {
        sign(serial, hosts, Chain::Nsec3 { opt_out: false })
    }

    /// [`text`] signed with NSEC3 opt-out ([`sign`]).
    fn nsec3_optout_text(serial: u32, hosts: &Hosts) -> String {
        sign(serial, hosts, Chain::Nsec3 { opt_out: true })
    }

    /// [`text`] signed the way a signer leaves it (the signatures are not valid, which the
    /// server does not check): an RRSIG for every authoritative RRset (at a cut only DS), an
    /// NSEC chain in canonical order over the names with records (glue below a cut left
    /// out) or an NSEC3 chain in hash order over the names and empty non-terminals (with
    /// NSEC3PARAM at the apex), the SOA's RRSIG made anew at every serial (its key tag field
    /// is the serial).
    fn sign(serial: u32, hosts: &Hosts, chain: Chain) -> String {
        let mut t = text(serial, hosts);
        t.push_str("@ DNSKEY 257 3 13 AAAA\n");
        if chain != Chain::Nsec {
            t.push_str("@ NSEC3PARAM 1 0 0 -\n");
        }
        // owner (absolute) → types, from the records written
        let mut types: std::collections::BTreeMap<Vec<u8>, std::collections::BTreeSet<String>> = Default::default();
        for line in t.lines().skip(2) {
            let mut f = line.split_whitespace();
            let (Some(owner), Some(ty)) = (f.next(), f.next()) else { continue };
            let abs = if owner == "@" { APEX.to_string() } else { format!("{owner}.{APEX}") };
            types.entry(name::from_presentation(&abs).unwrap().to_ascii_lowercase()).or_default().insert(ty.to_string());
        }
        let apex = name::from_presentation(APEX).unwrap();
        let cuts: Vec<Vec<u8>> = types.iter().filter(|(o, ts)| **o != apex && ts.contains("NS")).map(|(o, _)| o.clone()).collect();
        let mut owners: Vec<Vec<u8>> =
            types.keys().filter(|o| !cuts.iter().any(|c| o.len() > c.len() && name::is_subdomain(o, c))).cloned().collect();
        owners.sort_by(|a, b| xdns_zone::dnssec::canonical_cmp(a, b));
        let nsec = (chain == Chain::Nsec).then(|| "NSEC".to_string());
        let sig = |t: &mut String, own: &str, labels: usize, ty: &str| {
            let tag = if ty == "SOA" { serial } else { 4711 };
            t.push_str(&format!("{own} RRSIG {ty} 13 {labels} 300 20300101000000 20200101000000 {tag} {APEX} AAAA\n"));
        };
        for (i, o) in owners.iter().enumerate() {
            let own = name::to_presentation(o);
            let labels = name::label_count(o) - usize::from(o.starts_with(b"\x01*"));
            let cut = cuts.contains(o);
            let ts = &types[o];
            for ty in ts.iter().filter(|ty| !cut || *ty == "DS").chain(nsec.iter()) {
                sig(&mut t, &own, labels, ty);
            }
            if chain == Chain::Nsec {
                let next = name::to_presentation(&owners[(i + 1) % owners.len()]);
                let bitmap: Vec<&str> = ts.iter().map(String::as_str).chain(["RRSIG", "NSEC"]).collect();
                t.push_str(&format!("{own} NSEC {next} {}\n", bitmap.join(" ")));
            }
        }
        let Chain::Nsec3 { opt_out } = chain else { return t };
        // the names of the chain: the owners (with opt-out not the insecure cuts) and their
        // ancestors (empty non-terminals)
        let insecure = |o: &Vec<u8>| cuts.contains(o) && !types[o].contains("DS");
        let mut names: std::collections::BTreeSet<Vec<u8>> = Default::default();
        for o in owners.iter().filter(|o| !opt_out || !insecure(o)) {
            let mut cur = &o[..];
            while names.insert(cur.to_vec()) && cur != &apex[..] {
                cur = parent(cur).unwrap();
            }
        }
        let p = xdns_zone::dnssec::Nsec3Params { algorithm: 1, iterations: 0, salt: Vec::new() };
        let mut hashed: Vec<(String, &Vec<u8>)> =
            names.iter().map(|n| (String::from_utf8(xdns_zone::dnssec::nsec3_label(n, &p).unwrap().into_vec()).unwrap(), n)).collect();
        hashed.sort();
        for (i, (h, n)) in hashed.iter().enumerate() {
            let own = format!("{h}.{APEX}");
            let next = hashed[(i + 1) % hashed.len()].0.to_ascii_uppercase();
            let mut bitmap: Vec<&str> = types.get(*n).map(|ts| ts.iter().map(String::as_str).collect()).unwrap_or_default();
            if !bitmap.is_empty() {
                bitmap.push("RRSIG");
            }
            t.push_str(&format!("{own} NSEC3 1 {} 0 - {next} {}\n", u8::from(opt_out), bitmap.join(" ")));
            sig(&mut t, &own, 2, "NSEC3");
        }
        t
    }

    /// The zone the signed oracles start from: 30 hosts, an MX and a CNAME to them, a CNAME
    /// to a name that does not exist, a wildcard and a CNAME synthesised from it, a delegation
    /// with glue.
    fn signed_hosts() -> Hosts {
        let mut hosts = Hosts::new();
        for i in 0..30 {
            hosts.insert(format!("h{i}"), vec![format!("A 198.18.1.{i}")]);
        }
        hosts.insert("mail".into(), vec!["MX 10 h1".into()]);
        hosts.insert("alias".into(), vec!["CNAME h4".into()]);
        hosts.insert("dangling".into(), vec!["CNAME x.y.gone".into()]);
        hosts.insert("*.wild".into(), vec!["A 198.18.2.1".into()]);
        hosts.insert("wa".into(), vec!["CNAME q.r.wild".into()]);
        hosts.insert("sub".into(), vec!["NS ns.sub".into()]);
        hosts.insert("ns.sub".into(), vec!["A 198.18.7.1".into()]);
        hosts
    }

    /// The changes the signed oracles share, by `arm` (0 to 4): an address added at host `h`
    /// (the host with it), the host removed, an AAAA added (a type at an existing name), a
    /// name several labels deep added or removed (empty non-terminals), `alias` retargeted.
    fn host_change(hosts: &mut Hosts, next: &mut dyn FnMut(u64) -> u64, h: String, arm: u64) {
        match arm {
            0 => hosts.entry(h).or_default().push(format!("A 198.18.3.{}", next(250))),
            1 => drop(hosts.remove(&h)),
            2 => hosts.entry(h).or_default().push(format!("AAAA 2001:db8::{}", next(999))),
            3 => {
                let deep = format!("a{}.b{}.c", next(3), next(3));
                if hosts.remove(&deep).is_none() {
                    hosts.insert(deep, vec![format!("TXT \"v{}\"", next(9))]);
                }
            }
            _ => drop(hosts.insert("alias".into(), vec![format!("CNAME {h}")])),
        }
    }

    /// The oracle on an NSEC-signed zone (issue 28): records added and removed with their
    /// RRSIGs and the NSEC neighbours that change with them, names several labels deep
    /// (empty non-terminals, whose NODATA proof is another owner's NSEC), CNAMEs retargeted
    /// and chains through a wildcard (whose proof of no closer name is the NSEC covering the
    /// question), the wildcard's data, the apex's data, a delegation's DS added and removed
    /// and a delegation added and removed with its glue, the SOA re-signed at every change
    /// and once kept: every change is made in place (the zone is below the limit) and leaves
    /// the maps, the DO=1 bodies included, as a full encode writes them.
    #[test]
    fn signed_changes_in_place_equal_a_full_encode() {
        for serial_step in [1, 0] {
            let mut hosts = signed_hosts();
            // a chain through a wildcard ending in a referral: no SOA in wr's bodies
            hosts.insert("*.w2".into(), vec!["CNAME x.sub".into()]);
            hosts.insert("wr".into(), vec!["CNAME q.w2".into()]);
            let rounds = 80;
            let (in_place, _) = changes_in_place(signed_text, &format!("signed{serial_step}"), hosts, rounds, serial_step, LIMIT, |hosts, next, _| {
                let h = format!("h{}", next(35));
                match next(10) {
                    arm @ 0..=4 => host_change(hosts, next, h, arm),
                    5 => {
                        // names in the wildcard's range come and go: wa's chain is
                        // synthesised, its proof the NSEC of the name before q.r.wild
                        let n = ["p.wild", "r.wild", "a.wild", "x.y.gone", "p.w2", "r.w2"][next(6) as usize];
                        if hosts.remove(n).is_none() {
                            hosts.insert(n.into(), vec!["TXT \"n\"".into()]);
                        }
                    }
                    6 => drop(hosts.insert("*.wild".into(), vec![format!("A 198.18.2.{}", next(250))])),
                    7 => drop(hosts.insert("@".into(), vec![format!("A 198.18.6.{}", next(250))])),
                    8 => {
                        // the delegation's DS comes and goes (a referral with DS, or the NSEC
                        // proving there is none)
                        let r = hosts.get_mut("sub").unwrap();
                        if r.len() > 1 {
                            r.truncate(1);
                        } else {
                            r.push(format!("DS 1 13 2 {:064X}", next(1 << 30)));
                        }
                    }
                    _ => {
                        // a delegation added or removed with its glue
                        if hosts.remove("sub2").is_some() {
                            hosts.remove("ns.sub2");
                        } else {
                            hosts.insert("sub2".into(), vec!["NS ns.sub2".into()]);
                            hosts.insert("ns.sub2".into(), vec!["A 198.18.7.2".into()]);
                        }
                    }
                }
            });
            assert_eq!(in_place as u64, rounds);
        }
        assert!(VERSIONED.with(|v| v.get()) > 0, "class M bodies changed in place, under the other version");
    }

    /// A signed zone (NSEC) of 400 names changed in place with an in-place limit of 64 names
    /// (issue 28): no name's stored DO=1 NODATA carries the SOA (the apex part is stored
    /// once, `Kind::ApexDo`), so a change recompiles the changed owners, their NSEC
    /// neighbours and the apex only, the SOA re-signed or not; the empty non-terminals that
    /// come and go have proofs of other owners (recompiled at every change, few). Every change
    /// leaves the maps as a full encode writes them.
    #[test]
    fn signed_zone_above_the_limit_changes_in_place() {
        for serial_step in [1, 0] {
            let mut hosts = Hosts::new();
            for i in 0..400 {
                hosts.insert(format!("h{i}"), vec![format!("A 198.18.1.{}", i % 250)]);
            }
            let rounds = 30;
            let (in_place, _) = changes_in_place(signed_text, &format!("signed-large{serial_step}"), hosts, rounds, serial_step, 64, |hosts, next, _| {
                let h = format!("h{}", next(420));
                match next(4) {
                    0 => hosts.entry(h).or_default().push(format!("A 198.18.3.{}", next(250))),
                    1 => drop(hosts.remove(&h)),
                    2 => {
                        let deep = format!("a{}.b{}.c", next(3), next(3));
                        if hosts.remove(&deep).is_none() {
                            hosts.insert(deep, vec![format!("TXT \"v{}\"", next(9))]);
                        }
                    }
                    _ => drop(hosts.insert("@".into(), vec![format!("A 198.18.6.{}", next(250))])),
                }
            });
            assert_eq!(in_place as u64, rounds);
        }
    }

    /// The oracle on an NSEC3-signed zone, opt-out and not (issue 28): a name's proofs are
    /// NSEC3 records at hashed owners, which the transfer names instead of the name. Names
    /// added and removed (their neighbours' next hashed owners change: the names hashing to
    /// them are found by hash), a type added at an existing name (its NSEC3's bitmap), names
    /// several labels deep (empty non-terminals), a delegation's DS added and removed (under
    /// opt-out it enters and leaves the chain), secure delegations added and removed with
    /// glue (the chain changes), insecure ones (under opt-out the chain does not: their
    /// referral's closest provable encloser proof covers them), an insecure delegation below
    /// an empty non-terminal that a secure sibling brings into the chain and takes out again
    /// (the first one's encloser moves), CNAMEs to names below a delegation of each kind
    /// (their chains end in its referral, which carries its proof), the wildcard, the apex's
    /// data (its NSEC3, in every opt-out proof below the apex), the SOA re-signed at every
    /// change and once kept: every change is made in place and leaves the maps, the DO=1
    /// bodies included, as a full encode writes them; the index by hash stays that of a
    /// fresh build.
    #[test]
    fn nsec3_changes_in_place_equal_a_full_encode() {
        for (render, tag) in [(nsec3_text as fn(u32, &Hosts) -> String, "nsec3"), (nsec3_optout_text, "nsec3-optout")] {
            for serial_step in [1, 0] {
                let mut hosts = signed_hosts();
                for i in 0..6 {
                    hosts.insert(format!("d{i}"), vec![format!("NS ns{}.hoster.example.", i % 2)]);
                }
                hosts.insert("s0".into(), vec!["NS ns.hoster.example.".into(), format!("DS 1 13 2 {:064X}", 7)]);
                // an insecure delegation below an empty non-terminal (under opt-out not in
                // the chain: the apex is the encloser, `ent` the next closer name)
                hosts.insert("x.ent".into(), vec!["NS ns.hoster.example.".into()]);
                // chains ending in referrals: an insecure delegation's, a secure one's
                hosts.insert("toins".into(), vec!["CNAME q.d1".into()]);
                hosts.insert("tosec".into(), vec!["CNAME q.s0".into()]);
                hosts.insert("toent".into(), vec!["CNAME q.x.ent".into()]);
                let rounds = 90;
                let (in_place, _) = changes_in_place(render, &format!("{tag}{serial_step}"), hosts, rounds, serial_step, LIMIT, |hosts, next, round| {
                    let h = format!("h{}", next(35));
                    match next(12) {
                        arm @ 0..=4 => host_change(hosts, next, h, arm),
                        5 => {
                            let n = ["p.wild", "r.wild", "x.y.gone"][next(3) as usize];
                            if hosts.remove(n).is_none() {
                                hosts.insert(n.into(), vec!["TXT \"n\"".into()]);
                            }
                        }
                        6 => drop(hosts.insert("@".into(), vec![format!("A 198.18.6.{}", next(250))])),
                        7 => {
                            // sub's DS comes and goes (under opt-out sub enters and leaves the chain)
                            let r = hosts.get_mut("sub").unwrap();
                            if r.len() > 1 {
                                r.truncate(1);
                            } else {
                                r.push(format!("DS 1 13 2 {:064X}", next(1 << 30)));
                            }
                        }
                        8 => {
                            // a secure delegation added or removed with its glue
                            let s = format!("s{}", 1 + next(4));
                            if hosts.remove(&s).is_some() {
                                hosts.remove(&format!("ns.{s}"));
                            } else {
                                hosts.insert(s.clone(), vec![format!("NS ns.{s}"), format!("DS 2 13 2 {:064X}", round + 1)]);
                                hosts.insert(format!("ns.{s}"), vec!["A 198.18.7.2".into()]);
                            }
                        }
                        9 => {
                            // an insecure delegation added or removed
                            let d = format!("d{}", next(10));
                            if hosts.remove(&d).is_none() {
                                hosts.insert(d, vec!["NS ns.hoster.example.".into()]);
                            }
                        }
                        10 => {
                            // a secure sibling below `ent`: ent enters the chain (the
                            // encloser of x.ent) and leaves it again
                            if hosts.remove("y.ent").is_none() {
                                hosts.insert("y.ent".into(), vec!["NS ns.hoster.example.".into(), format!("DS 3 13 2 {:064X}", round + 1)]);
                            }
                        }
                        _ => {
                            // an insecure delegation below a new empty non-terminal
                            if hosts.remove("z.e3").is_none() {
                                hosts.insert("z.e3".into(), vec!["NS ns.hoster.example.".into()]);
                            }
                        }
                    }
                });
                assert_eq!(in_place as u64, rounds);
            }
        }
    }

    /// An NSEC3-signed zone (opt-out) of 400 names and a few insecure delegations, changed in
    /// place with an in-place limit of 64 names (issue 28): a change recompiles the changed
    /// owners (the hashed owners among them), the names hashing to the changed NSEC3 records
    /// (a new name's neighbour in hash order), the opt-out delegations their intervals cover,
    /// the SOA-bound names (the delegations' DS NODATA) and the apex, the SOA re-signed or
    /// not. Every change leaves the maps as a full encode writes them.
    #[test]
    fn nsec3_zone_above_the_limit_changes_in_place() {
        for serial_step in [1, 0] {
            let mut hosts = Hosts::new();
            for i in 0..400 {
                hosts.insert(format!("h{i}"), vec![format!("A 198.18.1.{}", i % 250)]);
            }
            for i in 0..8 {
                hosts.insert(format!("d{i}"), vec!["NS ns.hoster.example.".into()]);
            }
            let rounds = 30;
            let (in_place, _) = changes_in_place(nsec3_optout_text, &format!("nsec3-large{serial_step}"), hosts, rounds, serial_step, 64, |hosts, next, _| {
                let h = format!("h{}", next(420));
                match next(4) {
                    0 => hosts.entry(h).or_default().push(format!("A 198.18.3.{}", next(250))),
                    1 => drop(hosts.remove(&h)),
                    2 => {
                        let d = format!("d{}", next(12));
                        if hosts.remove(&d).is_none() {
                            hosts.insert(d, vec!["NS ns.hoster.example.".into()]);
                        }
                    }
                    _ => {
                        let deep = format!("a{}.b{}.c", next(3), next(3));
                        if hosts.remove(&deep).is_none() {
                            hosts.insert(deep, vec![format!("TXT \"v{}\"", next(9))]);
                        }
                    }
                }
            });
            assert_eq!(in_place as u64, rounds);
        }
    }

    /// What an NSEC3-signed zone's in-place path declines, with its reason: a new chain (the
    /// salt changed: every hashed owner moves); the apex's NSEC3 changed (a type added at the
    /// apex) when more names than the limit carry it in their proofs (under opt-out, insecure
    /// delegations below empty non-terminals not in the chain, and those non-terminals). Below
    /// the limit the same change is made, every name the apex encloses recompiled: the empty
    /// non-terminals too, which nothing else brings (they carry no SOA).
    #[test]
    fn nsec3_fallbacks_say_why() {
        let dir = std::env::temp_dir().join(format!("xdns-delta-n3fb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut hosts = Hosts::new();
        for i in 0..10 {
            hosts.insert(format!("x.e{i}"), vec!["NS ns.hoster.example.".into()]);
        }
        let old = load(&dir, &nsec3_optout_text(1, &hosts));
        let apex = xdns_wire::name::from_presentation(APEX).unwrap();
        let zone = old.zones.values().next().unwrap();
        let index = ZoneIndex::build(zone, soa_bound(&compile_kernel_data(&old).answers, &apex), 1000);
        let n3 = index.nsec3.as_ref().unwrap();
        assert_eq!((n3.matched.len(), n3.covered.len()), (2, 20), "the apex and ns1 matched, the delegations and their parents covered");
        let mut h = hosts.clone();
        h.insert("@".into(), vec!["TXT \"apex\"".into()]);
        let new = load(&dir, &nsec3_optout_text(2, &h));
        let d = zone_delta(&old, &new, &apex, &owners(&old, &new), &index, 1000).unwrap();
        for i in 0..10 {
            let ent = xdns_wire::name::from_presentation(&format!("e{i}.{APEX}")).unwrap();
            assert!(d.soa_bound.iter().any(|(n, _)| *n == ent), "e{i} recompiled: the apex's NSEC3 is in its proof");
        }
        let e = zone_delta(&old, &new, &apex, &owners(&old, &new), &index, 19).unwrap_err();
        assert!(e.contains("in the proofs of 20 names"), "{e}");
        let salted = load(&dir, &nsec3_optout_text(2, &hosts).replace("NSEC3PARAM 1 0 0 -", "NSEC3PARAM 1 0 0 AB"));
        let e = zone_delta(&old, &salted, &apex, &owners(&old, &salted), &index, 1000).unwrap_err();
        assert!(e.contains("parameters changed"), "{e}");
    }

    /// Nested zones: a parent `t.`, a served child `sub.t.` below it and a grandchild
    /// `deep.sub.t.` below that. Changes to each zone, made in place, leave the maps as a
    /// full encode of the whole set writes them: what the parent holds at and below the
    /// child's apex (the delegation, its glue, names the child answers) never reaches the
    /// kernel, whatever the parent changes there; the child's own names, wildcard and
    /// delegation to the grandchild do, and names below the grandchild's apex are the
    /// grandchild's.
    #[test]
    fn nested_zones_change_in_place_equal_a_full_encode() {
        let dir = std::env::temp_dir().join(format!("xdns-delta-nested-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let apexes = ["t.", "sub.t.", "deep.sub.t."];
        let mut recs: Vec<Vec<String>> = vec![
            vec!["sub NS ns.sub".into(), "ns.sub A 198.18.0.2".into(), "x.sub A 198.18.0.3".into(), "www A 198.18.0.4".into(),
                 "alias CNAME www.sub".into()],
            vec!["www A 198.18.1.1".into(), "*.w A 198.18.1.2".into(), "deep NS ns.deep".into(), "ns.deep A 198.18.1.3".into(),
                 "a.deep A 198.18.1.4".into(), "toalias CNAME nosuch.w".into()],
            vec!["a A 198.18.2.1".into(), "b TXT \"b\"".into()],
        ];
        let load_all = |recs: &[Vec<String>], serials: &[u32; 3]| -> ZoneSet {
            let mut set = ZoneSet::default();
            for (i, apex) in apexes.iter().enumerate() {
                let mut t = format!("$ORIGIN {apex}\n$TTL 300\n@ SOA ns1 h {} 7200 3600 1209600 60\n@ NS ns1\nns1 A 198.18.9.{i}\n", serials[i]);
                recs[i].iter().for_each(|r| t.push_str(&format!("{r}\n")));
                let f = dir.join(format!("z{i}.zone"));
                std::fs::write(&f, t).unwrap();
                let z = xdns_zone::load_zone(&xdns_zone::ZoneSource { name: (*apex).into(), file: f }, None).unwrap();
                set.zones.insert(z.apex.clone(), Arc::new(z));
            }
            set
        };
        // (zone, record to add, or to remove when present)
        let edits: Vec<(usize, &str)> = vec![
            (0, "www A 198.18.0.5"),            // the parent's own name
            (0, "x.sub A 198.18.0.6"),          // held by the parent below the child's apex
            (0, "ns.sub A 198.18.0.7"),         // the delegation's glue
            (0, "y.deep.sub TXT \"p\""),        // below the grandchild's apex
            (1, "new A 198.18.1.9"),            // the child's own new name
            (1, "*.w A 198.18.1.8"),            // the child's wildcard
            (1, "ns.deep A 198.18.1.7"),        // the child's glue for the grandchild
            (1, "z.a.deep TXT \"c\""),          // held by the child below the grandchild's apex
            (2, "a A 198.18.2.2"),              // the grandchild's own name
            (2, "c.b TXT \"g\""),               // an empty non-terminal's child in the grandchild
            (0, "www A 198.18.0.5"),            // removed again
            (1, "*.w A 198.18.1.8"),
            (2, "c.b TXT \"g\""),
        ];
        let mut serials = [1u32; 3];
        let mut zones = load_all(&recs, &serials);
        let seed = 91;
        let mut maps = shaped();
        let mut loader = Loader::new(seed);
        let data = compile_kernel_data(&zones);
        let bound = crate::delta::soa_bound_by_zone(&zones, &data.answers);
        let mut index: HashMap<Vec<u8>, ZoneIndex> = zones
            .zones
            .iter()
            .map(|(a, z)| (a.to_vec(), ZoneIndex::build(z, bound.get(&a[..]).cloned().unwrap_or_default(), 1000)))
            .collect();
        loader.install(&mut maps, &data).unwrap();
        for (round, (zi, rec)) in edits.iter().enumerate() {
            let r = &mut recs[*zi];
            match r.iter().position(|x| x == rec) {
                Some(p) => drop(r.remove(p)),
                None => r.push(rec.to_string()),
            }
            serials[*zi] += 1;
            let new = load_all(&recs, &serials);
            let apex = xdns_wire::name::from_presentation(apexes[*zi]).unwrap();
            let (o, n) = (&zones.zones[&apex[..]], &new.zones[&apex[..]]);
            let changed: Vec<Vec<u8>> = o
                .nodes
                .keys()
                .chain(n.nodes.keys())
                .filter(|k| o.nodes.get(&k[..]).map(|x| &x.rrsets) != n.nodes.get(&k[..]).map(|x| &x.rrsets))
                .map(|k| k.to_vec())
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            // the other zones stay the same objects, as the runtime requires
            let mut new_set = zones.clone();
            new_set.zones.insert(apex.clone().into_boxed_slice(), n.clone());
            let ix = index.get_mut(&apex).unwrap();
            let delta = zone_delta(&zones, &new_set, &apex, &changed, ix, 1000).unwrap_or_else(|e| panic!("round {round}: {e}"));
            loader.apply(&mut maps, &delta).unwrap_or_else(|e| panic!("round {round}: {e}"));
            ix.update(o, n, &changed, &delta);
            same_as_full_encode(&maps, &compile_kernel_data(&new_set), seed, round as u64);
            zones = new_set;
        }
    }

    /// Which compiled bodies carry the SOA: negative answers (NODATA, NXDOMAIN, a chain
    /// ending in either), not a chain ending in a referral (authoritative, NS in authority),
    /// a referral or a positive answer.
    #[test]
    fn digest_key_and_label_are_the_owner_labels() {
        let p = Nsec3Params { algorithm: 1, iterations: 12, salt: vec![0xaa, 0xbb, 0xcc, 0xdd] };
        for owner in ["example.", "a.example.", "*.w.example."] {
            let wire = xdns_wire::name::from_presentation(owner).unwrap();
            let label = xdns_zone::dnssec::nsec3_label(&wire, &p).unwrap();
            let d = nsec3_digest(&wire, &p).unwrap();
            assert_eq!(&digest_label(&d)[..], &label[..], "{owner}");
            assert_eq!(digest_key(&d), hash_key(&label), "{owner}: the key the owner's label gives");
        }
    }

    #[test]
    fn proof_set_takes_out_puts_back_merges_and_wraps() {
        let n = |s: &str| xdns_wire::name::from_presentation(s).unwrap();
        let (a, b, c, d) = (n("a.test."), n("b.test."), n("c.test."), n("d.test."));
        let mut set = ProofSet::from_entries(vec![(0x30, &b[..]), (0x10, &a[..]), (0x30, &c[..])]);
        let range = |set: &ProofSet, from, to| {
            let mut out = HashSet::new();
            set.range_into(from, to, &mut out);
            let mut v: Vec<Vec<u8>> = out.into_iter().collect();
            v.sort();
            v
        };
        assert_eq!(range(&set, 0x30, 0x30), vec![b.clone(), c.clone()], "a prefix shared by two names gives both");
        assert_eq!(range(&set, 0x20, 0x10), vec![a.clone(), b.clone(), c.clone()], "wrapping past the greatest prefix");
        assert_eq!(range(&set, 0x20, 0x20), Vec::<Vec<u8>>::new());
        set.remove(0x30, &b);
        set.remove(0x30, &b);
        assert_eq!((set.len(), range(&set, 0x30, 0x30)), (2, vec![c.clone()]), "taken out once, whatever the calls");
        set.insert(0x30, &b);
        assert_eq!((set.len(), set.added.len()), (3, 0), "put back where it was marked");
        set.insert(0x20, &d);
        set.remove(0x10, &a);
        assert_eq!(range(&set, 0x10, 0x20), vec![d.clone()], "a new name beside the array, a marked one left out");
        let fresh = ProofSet::from_entries(vec![(0x20, &d[..]), (0x30, &b[..]), (0x30, &c[..])]);
        assert_eq!(set, fresh, "the same names as a set built afresh");
        for i in 0..=PROOF_SET_SPARE as u64 {
            set.insert(0x40 + (i << 4), &a);
        }
        assert!(set.gone == 0 && set.added.len() <= PROOF_SET_SPARE, "merged past the spare room (the marks dropped)");
        assert_eq!(set.len(), 3 + PROOF_SET_SPARE + 1);
        assert_eq!(range(&set, 0x30, 0x40), vec![a.clone(), b.clone(), c.clone()]);
    }

    #[test]
    fn carries_soa_reads_the_authority_section() {
        let dir = std::env::temp_dir().join(format!("xdns-delta-soa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut hosts = Hosts::new();
        hosts.insert("a".into(), vec!["A 198.18.0.9".into()]);
        hosts.insert("sub".into(), vec!["NS ns.sub".into(), "NS ns.other.".into()]);
        hosts.insert("ns.sub".into(), vec!["A 198.18.0.10".into()]);
        hosts.insert("toref".into(), vec!["CNAME x.sub".into()]);
        hosts.insert("tonx".into(), vec!["CNAME nothere".into()]);
        hosts.insert("toa".into(), vec!["CNAME a".into()]);
        let set = load(&dir, &text(1, &hosts));
        let z = set.zones.values().next().unwrap();
        let body = |n: &str, kind: BodyKind| {
            let base = xdns_wire::name::from_presentation(&format!("{n}.{APEX}")).unwrap().into_boxed_slice();
            xdns_zone::compile::compile(z, &BodyKey { base, kind })
        };
        let cases = [
            ("a", BodyKind::Other, true),
            ("a", BodyKind::Type(1), false),
            ("a", BodyKind::NxDomain, true),
            ("sub", BodyKind::Other, false),
            ("sub", BodyKind::Type(43), true),
            ("toref", BodyKind::Type(1), false),
            ("tonx", BodyKind::Type(1), true),
            ("toa", BodyKind::Type(16), true),
            ("toa", BodyKind::Type(1), false),
        ];
        for (n, kind, want) in cases {
            let b = body(n, kind);
            assert_eq!(carries_soa(&b), want, "{n} {kind:?}: {b:?}");
        }
        assert!(body("toref", BodyKind::Type(1)).flags & 0x0400 != 0 && body("toref", BodyKind::Type(1)).nscount > 0, "AA and NS: the old test said SOA");
    }

    /// What the incremental path declines, with its reason: more names than the limit. A new
    /// delegation and a new wildcard are made in place.
    #[test]
    fn fallbacks_say_why() {
        let dir = std::env::temp_dir().join(format!("xdns-delta-fb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut hosts = std::collections::BTreeMap::new();
        hosts.insert("a".to_string(), vec!["A 198.18.0.9".to_string()]);
        let old = load(&dir, &text(1, &hosts));
        let apex = xdns_wire::name::from_presentation(APEX).unwrap();
        let try_with = |k: &str, v: &str| {
            let mut h = hosts.clone();
            h.insert(k.into(), vec![v.into()]);
            let new = load(&dir, &text(2, &h));
            zone_delta(&old, &new, &apex, &owners(&old, &new), &ZoneIndex::default(), 1000).map(|_| ())
        };
        assert_eq!(try_with("sub", "NS ns.other."), Ok(()));
        assert_eq!(try_with("*.w", "A 198.18.0.7"), Ok(()));
        assert!(try_with("b", "A 198.18.0.8").is_ok());
        let mut h = hosts.clone();
        h.insert("b".into(), vec!["A 198.18.0.8".into()]);
        let new = load(&dir, &text(2, &h));
        let index = ZoneIndex { soa_bound: (0..5).map(|i| vec![i]).collect(), ..Default::default() };
        let e = zone_delta(&old, &new, &apex, &owners(&old, &new), &index, 3).unwrap_err();
        assert!(e.contains("SOA changed and 5 names"), "{e}");
        // built over the limit: only the count is kept, and no change is made in place
        let bound: HashSet<Vec<u8>> = (0..5).map(|i| vec![i]).collect();
        let zone = old.zones.values().next().unwrap();
        let kept = ZoneIndex::build(zone, bound.clone(), 5);
        assert_eq!((kept.soa_bound.len(), kept.soa_bound_over), (5, None));
        assert!(!kept.targets.is_empty(), "the zone's targets are indexed");
        let over = ZoneIndex::build(zone, bound, 4);
        assert_eq!(over.soa_bound_over, Some(4));
        assert!(over.soa_bound.is_empty() && over.targets.is_empty(), "nothing kept but the count");
        let e = zone_delta(&old, &new, &apex, &owners(&old, &new), &over, 1000).unwrap_err();
        assert!(e.contains("more than 4 names have stored bodies carrying the SOA"), "{e}");
    }
}
