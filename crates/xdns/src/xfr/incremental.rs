//! An IXFR applied to the secondary's zone in place: only what the differences touch is
//! changed and validated, and the new version is swapped in whole (readers see the old
//! version or the new, never a mix).
//!
//! The zone served is immutable (`Arc<Zone>`, shared with every reader), so the differences
//! go to a second copy of it, the *spare*: the version served before the last change, which
//! nobody reads once the swap is done. Before the next change the spare is brought level with
//! the version served by copying the few nodes that change touched ([`Spare::stale`]); the
//! differences are then applied to it, it is validated where they touched, and it becomes
//! the version served. The cost is one more copy of each secondary zone in memory, made in
//! the background after a full transfer or the start ([`State::prepare`]).
//!
//! Applying keeps an undo log (the first-touched original of every node and child count),
//! so a change that is refused leaves the copy as it was. What is refused, and what is not
//! decided here:
//!
//! | case | outcome |
//! |---|---|
//! | a deletion of a record the zone does not have; a difference that does not start at our serial; the last serial not the new SOA's | [`ApplyError::Mismatch`]: the copy and the primary's history disagree (the caller transfers the whole zone) |
//! | an owner outside the zone; the new version fails validation (CNAME beside other data, SOA or DS misplaced, no SOA or NS at the apex); the new serial not newer than ours | [`ApplyError::Invalid`]: the old version keeps serving |
//! | an added record whose TTL differs from its RRset's (the whole path keeps the smallest TTL per RRset over records the copy no longer knows), an RRSIG excepted | [`ApplyError::Fallback`]: the caller builds the zone whole |
//! | an added RRSIG whose TTL differs from the node's RRSIG set's (a signer gives each signature its covered RRset's TTL) | applied in place: the set's TTL becomes the smallest of its signatures' covered RRsets' TTLs, as a full load of a signer's records gives it; writers give each signature its covered TTL again ([`Node::record_ttl`]) |
//! | a signed zone | applied in place, validated where it changed, its NSEC/NSEC3 chains around the changed names (below) |
//! | a signed zone that became unsigned or the reverse, RRSIGs in a zone whose apex SOA is unsigned, a new NSEC3PARAM, a delegation added above names that were there (they leave the chain), no denial data of the version served; a delegation removed with names below it (DS below it may now stand at no cut) | applied in place, validated whole ([`Applied::validation`] says why) |
//! | no spare (first change after a full transfer, or the old version still in use) | the version served is copied first ([`Applied::copied`] says why) |
//!
//! Validation in place runs the loader's [`validate`] on a view of the zone that holds the
//! touched names and their ancestors: a zone that was valid can only gain errors at a name
//! whose records changed or, for DS, below a cut that went away (the whole-zone case above).
//! A signed zone's chains are checked around the changed names ([`LocalChains`]): an
//! owner's link can only break where its own NSEC/NSEC3 changed or the owner after it came or
//! went, so the changed owners and the owner before each changed name (canonical order; NSEC3:
//! hash order) are checked against their successors in the whole chain, which the new
//! version's denial data gives. The findings are a whole validation's at those owners; as
//! there, a broken chain is a warning (the zone is served, [`Applied::warnings`]), and errors
//! (CNAME beside signed data, ...) refuse the change.
//!
//! The denial data (NSEC owners in canonical order, NSEC3 owners in hash order, which DO=1
//! answers' proofs and the chain checks look up) is not rebuilt for each version: the spare
//! keeps its own copy (made with the spare), brought level with the version served for the
//! names the last change touched and then with the new version for the names this one
//! touched ([`Denial::update`]: a binary search and at most one insert or removal per name),
//! and the new version is installed with it built. A refused change puts it back level with
//! the version served with the nodes.

use std::path::Path;
use std::sync::{Arc, Weak};

use hashbrown::{HashMap, HashSet};
use xdns_zone::dnssec::{covered, Denial, DenialCell};
use xdns_zone::load::key_to_text;
use xdns_zone::validate::{in_zone, out_of_zone_reason, type_name, validate, Findings, LocalChains, ZoneView};
use xdns_zone::{LoadError, NameKey, Node, Rrset, Zone};

use super::client::{Diff, Rec, SOA};
use super::serial;

const NS: u16 = 2;
const RRSIG: u16 = 46;
const NSEC3PARAM: u16 = 51;

/// Why differences were not applied in place.
#[derive(Debug)]
pub enum ApplyError {
    /// Our copy and the primary's history disagree: transfer the whole zone.
    Mismatch(String),
    /// The new version is not a valid zone: refused, the old version keeps serving.
    Invalid(Vec<LoadError>),
    /// Not decided in place: build the zone whole (the reason is counted).
    Fallback(String),
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::Mismatch(m) | ApplyError::Fallback(m) => f.write_str(m),
            ApplyError::Invalid(errs) => {
                let first = errs.first().map(|e| e.to_string()).unwrap_or_default();
                write!(f, "the new version does not validate ({} errors, first: {first})", errs.len())
            }
        }
    }
}

/// A new version made in place.
#[derive(Debug)]
pub struct Applied {
    pub zone: Zone,
    /// Every name whose node was created, changed or removed (empty non-terminals included).
    pub touched: Vec<NameKey>,
    /// Why the version served had to be copied first (no spare), if it was.
    pub copied: Option<String>,
    /// Why the new version was validated whole, if it was.
    pub validation: Option<String>,
    /// The validation's warnings (where it changed; the caller logs them).
    pub warnings: Vec<LoadError>,
}

/// The previous version and the names where it differs from the version served.
struct Spare {
    zone: Arc<Zone>,
    stale: Vec<NameKey>,
}

/// What one secondary zone keeps for changes in place.
#[derive(Default)]
pub struct State {
    spare: Option<Spare>,
    /// Number of child nodes of every name that has some, in the version served: a node left
    /// without records is removed only when nothing is below it.
    children: HashMap<NameKey, u32>,
    /// The version served that `spare` and `children` describe.
    version: Weak<Zone>,
}

fn parent(name: &[u8]) -> Option<&[u8]> {
    match name.first() {
        Some(0) | None => None,
        Some(&l) => name.get(1 + l as usize..),
    }
}

fn child_counts(zone: &Zone) -> HashMap<NameKey, u32> {
    let mut c: HashMap<NameKey, u32> = HashMap::new();
    for k in zone.nodes.keys() {
        if k[..] != zone.apex[..] {
            if let Some(p) = parent(k) {
                match c.get_mut(p) {
                    Some(n) => *n += 1,
                    None => {
                        c.insert(p.into(), 1);
                    }
                }
            }
        }
    }
    c
}

impl State {
    /// Make a spare of `served` (a whole copy) and its child counts: after a full transfer or
    /// the start, in the background, so that the next change need not.
    pub fn prepare(&mut self, served: &Arc<Zone>) {
        if self.version.upgrade().is_some_and(|v| Arc::ptr_eq(&v, served)) && self.spare.is_some() {
            return;
        }
        let mut copy = (**served).clone();
        // its own denial data (the version served's, built now if nobody asked for it yet),
        // which the next change updates in place
        copy.denial = DenialCell::with(Arc::new(served.dnssec().clone()));
        self.children = child_counts(served);
        self.spare = Some(Spare { zone: Arc::new(copy), stale: Vec::new() });
        self.version = Arc::downgrade(served);
    }

    /// `new` (made by [`Self::apply`] from `old`) is served now: `old` becomes the spare.
    pub fn installed(&mut self, old: Arc<Zone>, new: &Arc<Zone>, touched: Vec<NameKey>) {
        self.spare = Some(Spare { zone: old, stale: touched });
        self.version = Arc::downgrade(new);
    }

    /// Someone still holds the spare (the stored copy's writer, a transfer out): the next
    /// change would copy the zone whole.
    pub fn spare_in_use(&self) -> bool {
        self.spare.as_ref().is_some_and(|s| Arc::strong_count(&s.zone) > 1)
    }

    /// A private copy equal to `served` (its denial data taken out, level with `served`'s
    /// when there is some), and why it had to be copied whole (if it had).
    fn take_copy(&mut self, served: &Arc<Zone>) -> (Zone, Option<String>, Option<Denial>) {
        // the version served's denial data, copied (only when the spare has none of its own)
        let served_denial = || served.denial.built().map(|d| (**d).clone());
        let known = self.version.upgrade().is_some_and(|v| Arc::ptr_eq(&v, served));
        let reason = match self.spare.take() {
            _ if !known => "no copy of the version served was kept",
            None => "no spare copy yet",
            Some(sp) => match Arc::try_unwrap(sp.zone) {
                Ok(mut z) => {
                    for n in &sp.stale {
                        match served.nodes.get(n) {
                            Some(node) => {
                                z.nodes.insert(n.clone(), node.clone());
                            }
                            None => {
                                z.nodes.remove(n);
                            }
                        }
                    }
                    z.serial = served.serial;
                    z.file = served.file.clone();
                    let denial = match z.denial.take().map(Arc::try_unwrap) {
                        Some(Ok(mut d)) => {
                            d.update(&z, &sp.stale);
                            Some(d)
                        }
                        _ => served_denial(),
                    };
                    return (z, None, denial);
                }
                Err(_) => "the previous version is still in use",
            },
        };
        if !known {
            self.children = child_counts(served);
            self.version = Arc::downgrade(served);
        }
        let mut z = (**served).clone();
        z.denial = Default::default();
        (z, Some(reason.to_string()), served_denial())
    }

    /// Apply `diffs` (in order, from `served`'s serial) to a copy of `served`: the new version,
    /// or why not (module docs). On any error the state still describes `served`.
    pub fn apply(&mut self, served: &Arc<Zone>, diffs: &[Diff]) -> Result<Applied, ApplyError> {
        let (mut zone, copied, mut denial) = self.take_copy(served);
        let mut tx = Tx { zone: &mut zone, children: &mut self.children, saved: HashMap::new(), saved_children: HashMap::new() };
        let r = tx.run(served, diffs, denial.as_mut());
        let out = match r {
            Ok(checked) => {
                let mut touched: Vec<NameKey> = tx.saved.into_keys().collect();
                touched.sort_unstable();
                Ok((touched, checked))
            }
            Err(e) => {
                let names: Vec<NameKey> = tx.saved.keys().cloned().collect();
                tx.rollback();
                // the denial data follows the nodes back to the version served
                if let Some(d) = denial.as_mut() {
                    d.update(&zone, &names);
                }
                Err(e)
            }
        };
        if let Some(d) = denial {
            zone.denial = DenialCell::with(Arc::new(d));
        }
        match out {
            Ok((touched, (validation, warnings))) => {
                let soa = zone.nodes.get(&zone.apex).and_then(|n| n.rrset(SOA)).and_then(|s| s.rdata.first());
                zone.serial = soa.and_then(serial::soa_serial).unwrap_or(0);
                Ok(Applied { zone, touched, copied, validation, warnings })
            }
            Err(e) => {
                // the copy is the version served again: the spare of the next change
                self.spare = Some(Spare { zone: Arc::new(zone), stale: Vec::new() });
                Err(e)
            }
        }
    }
}

/// One application, with its undo log.
struct Tx<'a> {
    zone: &'a mut Zone,
    children: &'a mut HashMap<NameKey, u32>,
    /// The original of every node touched (`None`: it did not exist).
    saved: HashMap<NameKey, Option<Node>>,
    saved_children: HashMap<NameKey, Option<u32>>,
}

impl Tx<'_> {
    fn save(&mut self, name: &[u8]) {
        if !self.saved.contains_key(name) {
            self.saved.insert(name.into(), self.zone.nodes.get(name).cloned());
        }
    }

    fn count(&mut self, name: &[u8], add: bool) {
        if !self.saved_children.contains_key(name) {
            self.saved_children.insert(name.into(), self.children.get(name).copied());
        }
        let n = self.children.get(name).copied().unwrap_or(0);
        let n = if add { n + 1 } else { n.saturating_sub(1) };
        if n == 0 {
            self.children.remove(name);
        } else {
            self.children.insert(name.into(), n);
        }
    }

    /// The node at `name`, created with its missing ancestors (empty non-terminals).
    fn node_mut(&mut self, name: &[u8]) -> &mut Node {
        if !self.zone.nodes.contains_key(name) {
            let mut cur = name;
            loop {
                if self.zone.nodes.contains_key(cur) {
                    break;
                }
                self.save(cur);
                self.zone.nodes.insert(cur.into(), Node::default());
                if cur == &self.zone.apex[..] {
                    break;
                }
                let Some(p) = parent(cur) else { break };
                self.count(p, true);
                cur = p;
            }
        }
        self.save(name);
        self.zone.nodes.get_mut(name).expect("created above")
    }

    fn rollback(self) {
        for (k, v) in self.saved {
            match v {
                Some(n) => {
                    self.zone.nodes.insert(k, n);
                }
                None => {
                    self.zone.nodes.remove(&k);
                }
            }
        }
        for (k, v) in self.saved_children {
            match v {
                Some(n) => {
                    self.children.insert(k, n);
                }
                None => {
                    self.children.remove(&k);
                }
            }
        }
    }

    fn delete(&mut self, d: &Diff, r: &Rec) -> Result<(), ApplyError> {
        let missing = || {
            ApplyError::Mismatch(format!(
                "difference {} → {} deletes a {} record at {} that is not in the zone",
                d.from,
                d.to,
                type_name(r.rtype),
                key_to_text(&r.owner)
            ))
        };
        let has = self.zone.nodes.get(&r.owner[..]).and_then(|n| n.rrset(r.rtype)).is_some_and(|s| s.rdata.contains(&r.rdata));
        if !has {
            return Err(missing());
        }
        let node = self.node_mut(&r.owner);
        let i = node.rrsets.binary_search_by_key(&r.rtype, |s| s.rtype).map_err(|_| missing())?;
        let set = &mut node.rrsets[i];
        set.rdata.retain(|x| *x != r.rdata);
        if set.rdata.is_empty() {
            node.rrsets.remove(i);
        }
        Ok(())
    }

    fn add(&mut self, r: &Rec) -> Result<(), ApplyError> {
        if !in_zone(&self.zone.apex, &r.owner) {
            let file = self.zone.file.clone();
            return Err(ApplyError::Invalid(vec![LoadError { file, line: None, reason: out_of_zone_reason(&r.owner, &self.zone.apex) }]));
        }
        if let Some(set) = self.zone.nodes.get(&r.owner[..]).and_then(|n| n.rrset(r.rtype)) {
            // a signature carries the TTL of the RRset it covers (RFC 4034 §3), not one TTL
            // per node: the RRSIG set's own is set again once all records are in
            // ([`Self::rrsig_ttls`])
            if set.ttl != r.ttl && r.rtype != RRSIG {
                return Err(ApplyError::Fallback(format!(
                    "an added {} record at {} has TTL {}, its RRset {}",
                    type_name(r.rtype),
                    key_to_text(&r.owner),
                    r.ttl,
                    set.ttl
                )));
            }
            if set.rdata.contains(&r.rdata) {
                return Ok(());
            }
        }
        let node = self.node_mut(&r.owner);
        match node.rrsets.binary_search_by_key(&r.rtype, |s| s.rtype) {
            Ok(i) => {
                let set = &mut node.rrsets[i];
                set.ttl = set.ttl.min(r.ttl);
                set.rdata.push(&r.rdata)
            }
            Err(i) => node.rrsets.insert(i, Rrset { rtype: r.rtype, ttl: r.ttl, rdata: xdns_zone::Rdatas::one(&r.rdata) }),
        }
        Ok(())
    }

    /// The RRSIG set of every touched node takes the TTL the loader gives it from a signer's
    /// records, each with its covered RRset's TTL: the smallest of its signatures' covered
    /// RRsets' TTLs (a signature covering no RRset here counts with the set's own). Writers
    /// give each signature its covered TTL again ([`Node::record_ttl`]).
    fn rrsig_ttls(&mut self) {
        let names: Vec<NameKey> = self.saved.keys().cloned().collect();
        for name in names {
            let Some(node) = self.zone.nodes.get_mut(&name) else { continue };
            let Ok(i) = node.rrsets.binary_search_by_key(&RRSIG, |s| s.rtype) else { continue };
            let own = node.rrsets[i].ttl;
            let ttl = node.rrsets[i]
                .rdata
                .iter()
                .map(|rd| covered(rd).and_then(|t| node.rrset(t)).map_or(own, |c| c.ttl))
                .min()
                .unwrap_or(own);
            node.rrsets[i].ttl = ttl;
        }
    }

    /// Nodes left without records and without children go, and so, in turn, may their
    /// parents (longest names first: a child before its parent).
    fn prune(&mut self) {
        let mut heap: std::collections::BinaryHeap<(usize, NameKey)> =
            self.saved.keys().map(|k| (k.len(), k.clone())).collect();
        let mut seen: HashSet<NameKey> = HashSet::new();
        while let Some((_, name)) = heap.pop() {
            if !seen.insert(name.clone()) || name[..] == self.zone.apex[..] {
                continue;
            }
            let empty = self.zone.nodes.get(&name).is_some_and(|n| n.rrsets.is_empty());
            if !empty || self.children.get(&name).copied().unwrap_or(0) > 0 {
                continue;
            }
            self.save(&name);
            self.zone.nodes.remove(&name);
            if let Some(p) = parent(&name) {
                let p: NameKey = p.into();
                self.count(&p, false);
                heap.push((p.len(), p));
            }
        }
    }

    /// Apply and validate (`denial`: the copy's denial data, level with `served`'s, brought
    /// level with the new version); `Ok` with the reason it was validated whole (if it was)
    /// and the warnings.
    fn run(&mut self, served: &Zone, diffs: &[Diff], mut denial: Option<&mut Denial>) -> Result<(Option<String>, Vec<LoadError>), ApplyError> {
        let mut at = served.serial;
        for d in diffs {
            if d.from != at {
                return Err(ApplyError::Mismatch(format!("a difference starts at serial {}, the zone is at {at}", d.from)));
            }
            for r in &d.deleted {
                self.delete(d, r)?;
            }
            for r in &d.added {
                self.add(r)?;
            }
            at = d.to;
        }
        self.prune();
        self.rrsig_ttls();
        if let Some(d) = denial.as_deref_mut() {
            let names: Vec<&[u8]> = self.saved.keys().map(|k| &k[..]).collect();
            d.update(self.zone, &names);
        }
        let findings = self.validate(served, denial.as_deref())?;
        if !findings.0.errors.is_empty() {
            return Err(ApplyError::Invalid(findings.0.errors));
        }
        let apex = &self.zone.apex;
        let soa = self.zone.nodes.get(apex).and_then(|n| n.rrset(SOA)).and_then(|s| s.rdata.first());
        let new = soa.and_then(serial::soa_serial);
        if new != Some(at) {
            return Err(ApplyError::Mismatch(format!("the differences end at serial {at}, the new SOA has {new:?}")));
        }
        if !serial::gt(at, served.serial) {
            let file = self.zone.file.clone();
            let reason = format!("the new serial {at} is not newer than the one served ({})", served.serial);
            return Err(ApplyError::Invalid(vec![LoadError { file, line: None, reason }]));
        }
        Ok((findings.1, findings.0.warnings))
    }

    /// The findings of the new version where it changed (or whole, with the reason).
    /// `denial`: the new version's NSEC/NSEC3 owners, for a signed zone's chains.
    fn validate(&self, served: &Zone, denial: Option<&Denial>) -> Result<(Findings, Option<String>), ApplyError> {
        let has = |n: &Option<Node>, t: u16| n.as_ref().is_some_and(|n| n.rrset(t).is_some());
        let now = |k: &[u8], t: u16| self.zone.nodes.get(k).is_some_and(|n| n.rrset(t).is_some());
        let (was_signed, signed) = (xdns_zone::compile::is_signed(served), xdns_zone::compile::is_signed(self.zone));
        let apex_set = |z: &Zone, t: u16| z.nodes.get(&z.apex).and_then(|n| n.rrset(t)).map(|s| s.rdata.clone());
        let cut_gone = self.saved.iter().find(|(k, old)| {
            k[..] != self.zone.apex[..] && has(old, NS) && !now(k, NS) && self.children.get(&k[..]).copied().unwrap_or(0) > 0
        });
        let whole = if was_signed != signed {
            Some(format!("the zone became {} (the apex SOA's signature came or went)", if signed { "signed" } else { "unsigned" }))
        } else if !signed && self.saved.iter().any(|(k, old)| has(old, RRSIG) || now(k, RRSIG)) {
            Some("RRSIGs in a zone whose apex SOA is not signed".to_string())
        } else if signed && denial.is_none() {
            Some("a signed zone without NSEC/NSEC3 owners of the version served to check its chains against".to_string())
        } else if signed && apex_set(served, NSEC3PARAM) != apex_set(self.zone, NSEC3PARAM) {
            Some("the NSEC3PARAM changed (another NSEC3 chain)".to_string())
        } else if let Some((k, _)) = cut_gone {
            Some(format!("the delegation at {} went away with names below it", key_to_text(k)))
        } else if signed {
            // names that were below a new cut leave the chains: their neighbours' links change
            let had_children = |k: &[u8]| match self.saved_children.get(k) {
                Some(before) => before.unwrap_or(0) > 0,
                None => self.children.get(k).copied().unwrap_or(0) > 0,
            };
            self.saved
                .iter()
                .find(|(k, old)| k[..] != self.zone.apex[..] && !has(old, NS) && now(k, NS) && had_children(k))
                .map(|(k, _)| format!("a delegation at {} came above names below it (they leave the NSEC/NSEC3 chain)", key_to_text(k)))
        } else {
            None
        };
        if let Some(why) = whole {
            return Ok((validate(&*self.zone), Some(why)));
        }
        let mut names: HashSet<&[u8]> = HashSet::new();
        for k in self.saved.keys() {
            let mut cur: &[u8] = k;
            while names.insert(cur) && cur != &self.zone.apex[..] {
                match parent(cur) {
                    Some(p) => cur = p,
                    None => break,
                }
            }
        }
        names.insert(&self.zone.apex);
        let changed: Vec<&[u8]> = self.saved.keys().map(|k| &k[..]).collect();
        let view = Touched { zone: self.zone, names: names.into_iter().collect(), changed, denial: denial.filter(|_| signed) };
        Ok((validate(&view), None))
    }
}

/// A zone seen through the names a change touched (and their ancestors): [`validate`] checks
/// only those, with the whole zone behind [`ZoneView::node`].
struct Touched<'a> {
    zone: &'a Zone,
    names: Vec<&'a [u8]>,
    /// The names themselves changed (no ancestors), for the chains.
    changed: Vec<&'a [u8]>,
    /// A signed zone's NSEC/NSEC3 owners (its chains are checked around `changed`).
    denial: Option<&'a Denial>,
}

impl ZoneView for Touched<'_> {
    fn apex(&self) -> &[u8] {
        &self.zone.apex
    }
    fn node(&self, name: &[u8]) -> Option<&Node> {
        self.zone.nodes.get(name)
    }
    fn for_each_node(&self, f: &mut dyn FnMut(&[u8], &Node)) {
        for n in &self.names {
            if let Some(node) = self.zone.nodes.get(*n) {
                f(n, node)
            }
        }
    }
    fn file(&self) -> &Path {
        &self.zone.file
    }
    fn locate(&self, _name: &[u8], _rtype: u16, _nth: usize) -> Option<(std::path::PathBuf, usize)> {
        None
    }
    fn chains(&self) -> Option<LocalChains<'_>> {
        self.denial.map(|denial| LocalChains { denial, changed: &self.changed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfr::journal;
    use bytes::Bytes;
    use std::collections::BTreeMap;
    use xdns_zone::{load_zone, ZoneSet, ZoneSource};

    const APEX: &str = "t.";

    fn key(s: &str) -> NameKey {
        xdns_zone::load::text_to_key(s).unwrap()
    }

    /// A zone of `hosts` (owner → records in zone-file syntax), the SOA at `serial`.
    fn text(serial: u32, hosts: &BTreeMap<String, Vec<String>>) -> String {
        let mut t = format!("$ORIGIN {APEX}\n$TTL 300\n@ SOA ns1 h {serial} 7200 3600 1209600 60\n@ NS ns1\nns1 A 198.18.0.1\n");
        for (h, recs) in hosts {
            for r in recs {
                t.push_str(&format!("{h} {r}\n"));
            }
        }
        t
    }

    fn load(dir: &Path, t: &str) -> Result<Zone, Vec<LoadError>> {
        let f = dir.join("z.zone");
        std::fs::write(&f, t).unwrap();
        load_zone(&ZoneSource { name: APEX.into(), file: f }, None)
    }

    /// The zone with every RRset's records sorted: RRset order is the server's choice, and
    /// the whole path's (a hash set) is arbitrary.
    fn sorted(z: &Zone) -> BTreeMap<NameKey, Vec<Rrset>> {
        z.nodes
            .iter()
            .map(|(k, n)| {
                let mut rr = n.rrsets.clone();
                rr.iter_mut().for_each(|r| r.rdata.sort());
                (k.clone(), rr)
            })
            .collect()
    }

    /// What the kernel is given for a zone (its nodes and every compiled answer), records
    /// in sorted order.
    fn kernel(z: &Zone) -> xdns_bpf::data::KernelData {
        let mut z = z.clone();
        z.denial = Default::default();
        for n in z.nodes.values_mut() {
            n.rrsets.iter_mut().for_each(|r| r.rdata.sort());
        }
        let mut set = ZoneSet::default();
        set.zones.insert(z.apex.clone(), Arc::new(z));
        xdns_bpf::data::compile_kernel_data(&set)
    }

    /// The whole path: every record, the differences applied, built and validated.
    fn whole(old: &Zone, diffs: &[Diff]) -> Result<Zone, String> {
        let mut set = journal::records_of(old);
        journal::apply(&mut set, diffs)?;
        journal::build_zone(&old.apex, &old.file, &set).map_err(|e| format!("{e:?}"))
    }

    fn diff_of(old: &Zone, new: &Zone) -> Diff {
        journal::diff(&journal::records_of(old), &journal::records_of(new), old.serial, new.serial)
    }

    fn rec(owner: &str, rtype: u16, ttl: u32, rdata: &[u8]) -> Rec {
        Rec { owner: key(owner), rtype, ttl, rdata: Bytes::copy_from_slice(rdata) }
    }

    /// The oracle: random sequences of IXFRs applied in place give the zone a full load of
    /// the resulting zone file gives (and the whole path), record for record, and the same
    /// kernel data (nodes, every compiled answer). Changes: addresses added and removed at
    /// existing and new names, names several labels deep (empty non-terminals come and go),
    /// CNAMEs, TXT, delegations with glue added and removed (one with a name below it:
    /// validated whole), a TTL change of a whole RRset (in place), and records added with a
    /// TTL unlike their RRset's (the whole path, by its reason). The spare is recycled from
    /// the previous version every time (nothing is copied whole after the first).
    #[test]
    fn random_ixfrs_in_place_equal_a_full_load() {
        let dir = std::env::temp_dir().join(format!("xdns-incremental-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for i in 0..30 {
            hosts.insert(format!("h{i}"), vec![format!("A 198.18.1.{i}")]);
        }
        hosts.insert("alias".into(), vec!["CNAME h4".into()]);
        hosts.insert("mail".into(), vec!["MX 10 h1".into()]);
        let mut serial = 1;
        let mut served = Arc::new(load(&dir, &text(serial, &hosts)).unwrap());
        let mut state = State::default();
        state.prepare(&served);
        let (mut in_place, mut fallbacks, mut whole_checks) = (0, 0, 0);
        for round in 0..150 {
            let before = hosts.clone();
            let h = format!("h{}", next(36));
            let mut ttl_clash = false;
            match next(10) {
                0 | 1 => hosts.entry(h).or_default().push(format!("A 198.18.3.{}", next(250))),
                2 => {
                    hosts.remove(&h);
                }
                3 => hosts.entry(h).or_default().push(format!("AAAA 2001:db8::{}", next(999))),
                4 => {
                    let deep = format!("a{}.b{}.c", next(3), next(3));
                    if hosts.remove(&deep).is_none() {
                        hosts.insert(deep, vec![format!("TXT \"v{}\"", next(9))]);
                    }
                }
                5 => {
                    hosts.insert("alias".into(), vec![format!("CNAME {h}")]);
                }
                6 => {
                    // a delegation and its glue, or without it again
                    let d = format!("d{}", next(3));
                    if hosts.remove(&d).is_some() {
                        // half the time a name stays below the cut that goes
                        if next(2) == 0 {
                            hosts.remove(&format!("ns.{d}"));
                        }
                    } else {
                        hosts.insert(d.clone(), vec![format!("NS ns.{d}")]);
                        hosts.insert(format!("ns.{d}"), vec![format!("A 198.18.6.{}", next(250))]);
                    }
                }
                7 => {
                    // a whole RRset with a new TTL (deleted, then added)
                    let recs: Vec<String> = hosts.get(&h).into_iter().flatten().filter(|r| r.starts_with("A ")).cloned().collect();
                    if !recs.is_empty() {
                        let ttl = 100 + next(50);
                        let rest: Vec<String> = hosts[&h].iter().filter(|r| !r.starts_with("A ") && !r.contains("IN A")).cloned().collect();
                        let mut all: Vec<String> = rest;
                        all.extend(recs.iter().map(|r| format!("{ttl} IN {r}")));
                        hosts.insert(h.clone(), all);
                    }
                }
                8 => {
                    // one more record with a TTL unlike its RRset's
                    if hosts.get(&h).is_some_and(|r| r.iter().any(|x| x.starts_with("A "))) {
                        hosts.get_mut(&h).unwrap().push(format!("77 IN A 198.18.7.{}", next(250)));
                        ttl_clash = true;
                    }
                }
                _ => hosts.entry(h).or_default().push(format!("TXT \"r{round}\"")),
            }
            // the loader keeps the smallest TTL per RRset and names must not be both
            // CNAME and something else: keep the model a valid zone
            let new_zone = match load(&dir, &text(serial + 1, &hosts)) {
                Ok(z) => z,
                Err(_) => {
                    hosts = before;
                    continue;
                }
            };
            serial += 1;
            let mut d = diff_of(&served, &new_zone);
            if ttl_clash {
                // as a primary sends it: the one new record, with its own TTL
                let had = |r: &Rec| served.nodes.get(&r.owner).and_then(|n| n.rrset(r.rtype)).is_some_and(|s| s.rdata.contains(&r.rdata));
                d.deleted.retain(|r| r.rtype == SOA);
                d.added.retain(|r| r.rtype == SOA || !had(r));
            }
            let diffs = vec![d];
            let want = whole(&served, &diffs).unwrap_or_else(|e| panic!("round {round}: the whole path refused: {e}"));
            assert_eq!(sorted(&want), sorted(&new_zone), "round {round}: the whole path and a full load agree");
            match state.apply(&served, &diffs) {
                Ok(a) => {
                    assert!(a.copied.is_none(), "round {round}: the spare was recycled, not copied: {:?}", a.copied);
                    whole_checks += usize::from(a.validation.is_some());
                    assert_eq!(a.zone.serial, serial, "round {round}");
                    assert_eq!(sorted(&a.zone), sorted(&new_zone), "round {round}: in place equals a full load");
                    assert_eq!(kernel(&a.zone), kernel(&new_zone), "round {round}: the kernel's data");
                    let new = Arc::new(a.zone);
                    let old = std::mem::replace(&mut served, new.clone());
                    state.installed(old, &new, a.touched);
                    in_place += 1;
                }
                Err(ApplyError::Fallback(why)) => {
                    assert!(ttl_clash, "round {round}: an unexpected fallback: {why}");
                    assert!(why.contains("TTL"), "{why}");
                    fallbacks += 1;
                    // the caller builds the zone whole and copies a new spare
                    let new = Arc::new(want);
                    state = State::default();
                    state.prepare(&new);
                    served = new;
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        assert!(in_place > 100 && fallbacks > 0 && whole_checks > 0, "{in_place} {fallbacks} {whole_checks}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Bad differences are refused with a reason, and the copy is left exactly as the
    /// version served (the next good change applies to it, nothing copied whole).
    #[test]
    fn bad_differences_are_refused_and_leave_the_copy_alone() {
        let dir = std::env::temp_dir().join(format!("xdns-incremental-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
        hosts.insert("www".into(), vec!["A 198.18.0.9".into()]);
        hosts.insert("sub".into(), vec!["NS ns.sub".into()]);
        hosts.insert("ns.sub".into(), vec!["A 198.18.0.10".into()]);
        let served = Arc::new(load(&dir, &text(10, &hosts)).unwrap());
        let mut state = State::default();
        state.prepare(&served);
        let soa = |s: u32| {
            let mut rd = served.nodes[&key(APEX)].rrset(SOA).unwrap().rdata[0].to_vec();
            let at = rd.len() - 20;
            rd[at..at + 4].copy_from_slice(&s.to_be_bytes());
            rd
        };
        let soa_rec = |s: u32| rec(APEX, SOA, 300, &soa(s));
        let step = |from: u32, to: u32, deleted: Vec<Rec>, added: Vec<Rec>| Diff {
            from,
            to,
            deleted: [vec![soa_rec(from)], deleted].concat(),
            added: [vec![soa_rec(to)], added].concat(),
        };
        let a = |ip: [u8; 4]| ip.to_vec();
        let cases: Vec<(&str, Vec<Diff>, &str)> = vec![
            ("a deletion of a record not there", vec![step(10, 11, vec![rec("www.t.", 1, 300, &a([198, 18, 0, 99]))], vec![])], "not in the zone"),
            ("CNAME beside an address", vec![step(10, 11, vec![], vec![rec("www.t.", 5, 300, &key("x.t."))])], "CNAME beside other data"),
            ("the serial going backwards", vec![step(10, 9, vec![], vec![rec("new.t.", 1, 300, &a([1, 2, 3, 4]))])], "not newer"),
            ("a difference from another serial", vec![step(8, 11, vec![], vec![])], "starts at serial 8"),
            ("an owner outside the zone", vec![step(10, 11, vec![], vec![rec("www.u.", 1, 300, &a([1, 2, 3, 4]))])], "out-of-zone"),
            ("SOA below the apex", vec![step(10, 11, vec![], vec![rec("www.t.", SOA, 300, &soa(5))])], "not at the zone apex"),
            ("DS at a name that is not a cut", vec![step(10, 11, vec![], vec![rec("www.t.", 43, 300, &[0, 1, 8, 2, 0xaa])])], "not a zone cut"),
            ("the apex NS deleted", vec![step(10, 11, vec![rec(APEX, NS, 300, &key("ns1.t."))], vec![])], "missing NS"),
            // the second difference is bad: the first is undone too
            (
                "a good difference then a bad one",
                vec![
                    step(10, 11, vec![], vec![rec("ok.deep.t.", 1, 300, &a([1, 1, 1, 1]))]),
                    step(11, 12, vec![], vec![rec("www.t.", 5, 300, &key("x.t."))]),
                ],
                "CNAME beside other data",
            ),
        ];
        let before = sorted(&served);
        for (what, diffs, reason) in cases {
            let e = state.apply(&served, &diffs).expect_err(what);
            let msg = e.to_string();
            assert!(msg.contains(reason), "{what}: {msg}");
            assert!(!matches!(e, ApplyError::Fallback(_)), "{what}: {msg}");
            // the whole path refuses it too
            assert!(whole(&served, &diffs).is_err() || what.contains("backwards") || what.contains("another serial"), "{what}");
            assert_eq!(sorted(&served), before, "{what}: the version served is untouched");
        }
        assert!(matches!(
            state.apply(&served, &[step(10, 11, vec![rec("www.t.", 1, 300, &a([198, 18, 0, 9]))], vec![rec("www.t.", 5, 300, &key("x.t."))])]),
            Ok(Applied { copied: None, .. })
        ), "after refusals the copy is the version served: a good change applies to it in place");

        // two differences in one IXFR: a name three labels deep comes and goes again; its
        // empty non-terminals go with it, and only the SOA differs from the version served
        let mut state = State::default();
        state.prepare(&served);
        let deep = rec("a.b.c.t.", 1, 300, &a([1, 1, 1, 1]));
        let diffs = [step(10, 11, vec![], vec![deep.clone()]), step(11, 12, vec![deep], vec![])];
        let got = state.apply(&served, &diffs).unwrap();
        assert_eq!(got.zone.serial, 12);
        assert!(got.touched.contains(&key("b.c.t.")) && !got.zone.nodes.contains_key(&key("b.c.t.")));
        let without_apex = |z: &Zone| {
            let mut m = sorted(z);
            m.remove(&key(APEX));
            m
        };
        assert_eq!(without_apex(&got.zone), without_apex(&served));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A signer of the test zones, signing as Knot does (its rules, not its keys): an RRSIG
    /// for every authoritative RRset (at a cut: DS and NSEC only; glue and NS at a cut
    /// unsigned) with the TTL of the RRset it covers; NSEC at every authoritative name (TTL the
    /// SOA minimum), or NSEC3 opt-out (SHA-1, no salt, no extra iterations: every name but
    /// glue and insecure cuts, empty non-terminals included) with NSEC3PARAM at the apex; a
    /// DNSKEY. The signature bytes stand in for ECDSA P-256's (64 bytes, a hash of the signed
    /// RRset: the same RRset keeps its signature, a changed one gets a new one, as a signer
    /// re-signs what changed); nothing here verifies them.
    mod signer {
        use super::*;
        use crate::xfr::journal::RecordSet;
        use std::collections::{BTreeMap, BTreeSet};
        use std::hash::{Hash, Hasher};
        use xdns_zone::dnssec::{canonical_cmp, nsec3_label, Nsec3Params};

        pub const NSEC: u16 = 47;
        pub const NSEC3: u16 = 50;
        const DNSKEY: u16 = 48;
        const DS: u16 = 43;

        fn bitmap(types: &BTreeSet<u16>) -> Vec<u8> {
            let mut out = Vec::new();
            let mut win: BTreeMap<u8, [u8; 32]> = BTreeMap::new();
            for t in types {
                let w = win.entry((t >> 8) as u8).or_insert([0; 32]);
                w[usize::from(*t as u8 / 8)] |= 0x80 >> (*t as u8 % 8);
            }
            for (n, bits) in win {
                let len = bits.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
                out.push(n);
                out.push(len as u8);
                out.extend_from_slice(&bits[..len]);
            }
            out
        }

        fn labels(name: &[u8]) -> u8 {
            let n = xdns_wire::name::label_count(name) as u8;
            if name.get(..2) == Some(b"\x01*") { n - 1 } else { n }
        }

        /// `set` (an unsigned zone's records) signed; `nsec3`: opt-out NSEC3, else NSEC.
        pub fn sign(set: &RecordSet, apex: &[u8], nsec3: bool) -> RecordSet {
            let mut nodes: BTreeMap<NameKey, BTreeMap<u16, (u32, Vec<Bytes>)>> = BTreeMap::new();
            for ((o, t, rd), ttl) in set {
                let e = nodes.entry(o.clone()).or_default().entry(*t).or_insert((*ttl, Vec::new()));
                e.0 = e.0.min(*ttl);
                e.1.push(rd.clone());
            }
            let soa = &nodes[apex][&SOA].1[0];
            let minimum = u32::from_be_bytes(soa[soa.len() - 4..].try_into().unwrap());
            let neg_ttl = minimum.min(nodes[apex][&SOA].0);
            nodes.get_mut(apex).unwrap().insert(DNSKEY, (3600, vec![Bytes::from([&[1u8, 1, 3, 13][..], &[7u8; 64][..]].concat())]));
            let cut = |n: &[u8], nodes: &BTreeMap<NameKey, BTreeMap<u16, (u32, Vec<Bytes>)>>| n != apex && nodes.get(n).is_some_and(|x| x.contains_key(&NS));
            // names with an ancestor cut below the apex: glue, occluded
            let below = |n: &[u8], nodes: &BTreeMap<NameKey, BTreeMap<u16, (u32, Vec<Bytes>)>>| {
                let mut cur = parent(n);
                while let Some(p) = cur {
                    if p == apex {
                        return false;
                    }
                    if cut(p, nodes) {
                        return true;
                    }
                    cur = parent(p);
                }
                false
            };
            let mut all: BTreeSet<NameKey> = BTreeSet::new();
            for o in nodes.keys() {
                let mut cur: &[u8] = o;
                while all.insert(cur.into()) && cur != apex {
                    cur = parent(cur).unwrap();
                }
            }
            let mut chain: Vec<NameKey> = Vec::new();
            for n in &all {
                let has = nodes.contains_key(n);
                let insecure = cut(n, &nodes) && !nodes[n].contains_key(&DS);
                if below(n, &nodes) || (!nsec3 && !has) || (nsec3 && insecure) {
                    continue;
                }
                chain.push(n.clone());
            }
            let mut out: BTreeMap<NameKey, BTreeMap<u16, (u32, Vec<Bytes>)>> = nodes.clone();
            let mut sign_at: Vec<(NameKey, u16)> = Vec::new();
            for (n, sets) in &nodes {
                if below(n, &nodes) {
                    continue;
                }
                let is_cut = cut(n, &nodes);
                for t in sets.keys() {
                    if !is_cut || *t == DS {
                        sign_at.push((n.clone(), *t));
                    }
                }
            }
            if !nsec3 {
                chain.sort_by(|a, b| canonical_cmp(a, b));
                for (i, n) in chain.iter().enumerate() {
                    let next = &chain[(i + 1) % chain.len()];
                    let mut types: BTreeSet<u16> = nodes[n].keys().copied().collect();
                    types.extend([RRSIG, NSEC]);
                    let rd = [&next[..], &bitmap(&types)[..]].concat();
                    out.get_mut(n).unwrap().insert(NSEC, (neg_ttl, vec![Bytes::from(rd)]));
                    sign_at.push((n.clone(), NSEC));
                }
            } else {
                let p = Nsec3Params { algorithm: 1, iterations: 0, salt: Vec::new() };
                out.get_mut(apex).unwrap().insert(NSEC3PARAM, (0, vec![Bytes::from_static(&[1, 0, 0, 0, 0])]));
                sign_at.push((apex.into(), NSEC3PARAM));
                let mut hashed: Vec<(Box<[u8]>, NameKey)> = chain.iter().map(|n| (nsec3_label(n, &p).unwrap(), n.clone())).collect();
                hashed.sort();
                for (i, (h, n)) in hashed.iter().enumerate() {
                    let next = &hashed[(i + 1) % hashed.len()].0;
                    let raw: Vec<u8> = domain::utils::base32::decode_hex(std::str::from_utf8(next).unwrap()).unwrap();
                    let mut types: BTreeSet<u16> = nodes.get(n).map(|s| s.keys().copied().collect()).unwrap_or_default();
                    if !types.is_empty() {
                        types.insert(RRSIG);
                    }
                    if n[..] == *apex {
                        types.extend([NSEC3PARAM, DNSKEY]);
                    }
                    let mut rd = vec![1u8, 1, 0, 0, 0, raw.len() as u8];
                    rd.extend_from_slice(&raw);
                    rd.extend_from_slice(&bitmap(&types));
                    let owner: NameKey = [&[h.len() as u8][..], h, apex].concat().into();
                    out.entry(owner.clone()).or_default().insert(NSEC3, (neg_ttl, vec![Bytes::from(rd)]));
                    sign_at.push((owner, NSEC3));
                }
            }
            let mut signed = RecordSet::new();
            for (n, sets) in &out {
                for (t, (ttl, rds)) in sets {
                    for rd in rds {
                        signed.insert((n.clone(), *t, rd.clone()), *ttl);
                    }
                }
            }
            for (n, t) in sign_at {
                let (ttl, rds) = &out[&n][&t];
                let mut sorted = rds.clone();
                sorted.sort();
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (&n, t, ttl, &sorted).hash(&mut h);
                let mut sig = Vec::with_capacity(64);
                for i in 0..8u64 {
                    (h.finish(), i).hash(&mut h);
                    sig.extend_from_slice(&h.finish().to_be_bytes());
                }
                let mut rd = Vec::new();
                rd.extend_from_slice(&t.to_be_bytes());
                rd.extend_from_slice(&[13, labels(&n)]);
                rd.extend_from_slice(&ttl.to_be_bytes());
                rd.extend_from_slice(&1_900_000_000u32.to_be_bytes());
                rd.extend_from_slice(&1_700_000_000u32.to_be_bytes());
                rd.extend_from_slice(&4711u16.to_be_bytes());
                rd.extend_from_slice(apex);
                rd.extend_from_slice(&sig);
                signed.insert((n, RRSIG, Bytes::from(rd)), *ttl);
            }
            signed
        }
    }

    /// A signed version of `hosts` (NSEC, or NSEC3 opt-out): its records, and the zone a full
    /// load of them written as a zone file gives.
    fn signed_version(dir: &Path, serial: u32, hosts: &BTreeMap<String, Vec<String>>, nsec3: bool) -> (journal::RecordSet, Zone) {
        let plain = load(dir, &text(serial, hosts)).unwrap_or_else(|e| panic!("{e:?}"));
        let set = signer::sign(&journal::records_of(&plain), &key(APEX), nsec3);
        let f = dir.join("signed.zone");
        journal::write(&f, &key(APEX), &set).unwrap();
        let zone = load_zone(&ZoneSource { name: APEX.into(), file: f }, None).unwrap_or_else(|e| panic!("{e:?}"));
        (set, zone)
    }

    /// The chain warnings a validation found.
    fn chain_warnings(w: &[LoadError]) -> Vec<String> {
        let mut v: Vec<String> = w.iter().map(|e| e.reason.clone()).filter(|r| r.contains("chain broken")).collect();
        v.sort();
        v
    }

    /// The oracle for signed zones, NSEC and NSEC3 opt-out: each change re-signed as a signer
    /// does (the new RRSIGs, the NSEC/NSEC3 neighbours, the SOA) and sent as the difference of
    /// the two signed versions, applied in place, equals a full load of the signed zone file
    /// record for record, with the kernel's data, and with denial data equal to the loaded
    /// zone's (updated in place, not rebuilt); validated where it changed (never whole), no
    /// chain warning, nothing copied. Changes: names added (with an added RRSIG whose TTL,
    /// 300, is not the node's RRSIG set's, the NSEC's 60) and removed, names several labels
    /// deep (NSEC3: empty non-terminals hashed), records added to existing names, secure and
    /// insecure delegations (opt-out: no NSEC3 for those) with glue.
    #[test]
    fn signed_ixfrs_in_place_equal_a_full_load() {
        for nsec3 in [false, true] {
            let dir = std::env::temp_dir().join(format!("xdns-incremental-signed-{nsec3}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let mut next = |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for i in 0..20 {
                hosts.insert(format!("h{i}"), vec![format!("A 198.18.1.{i}")]);
            }
            hosts.insert("sec".into(), vec!["NS ns.sec".into(), "DS 1 13 2 aabbccdd".into()]);
            hosts.insert("ns.sec".into(), vec!["A 198.18.5.1".into()]);
            let mut serial = 1;
            let (mut set, first) = signed_version(&dir, serial, &hosts, nsec3);
            let mut served = Arc::new(first);
            let mut state = State::default();
            state.prepare(&served);
            let mut rounds = 0;
            for round in 0..40 {
                let before = hosts.clone();
                let h = format!("h{}", next(26));
                match next(6) {
                    0 | 1 => hosts.entry(h).or_default().push(format!("A 198.18.3.{}", next(250))),
                    2 => {
                        hosts.remove(&h);
                    }
                    3 => {
                        let deep = format!("a{}.b{}.c", next(3), next(3));
                        if hosts.remove(&deep).is_none() {
                            hosts.insert(deep, vec![format!("TXT \"v{}\"", next(9))]);
                        }
                    }
                    4 => {
                        let d = format!("d{}", next(3));
                        if hosts.remove(&d).is_some() {
                            hosts.remove(&format!("ns.{d}"));
                        } else {
                            let mut recs = vec![format!("NS ns.{d}")];
                            if next(2) == 0 {
                                recs.push("DS 2 13 2 ddeeff00".into());
                            }
                            hosts.insert(d.clone(), recs);
                            hosts.insert(format!("ns.{d}"), vec![format!("A 198.18.6.{}", next(250))]);
                        }
                    }
                    _ => hosts.entry(h).or_default().push(format!("TXT \"r{round}\"")),
                }
                if load(&dir, &text(serial + 1, &hosts)).is_err() {
                    hosts = before;
                    continue;
                }
                serial += 1;
                let (new_set, new_zone) = signed_version(&dir, serial, &hosts, nsec3);
                let diffs = vec![journal::diff(&set, &new_set, serial - 1, serial)];
                assert!(diffs[0].added.iter().any(|r| r.rtype == RRSIG), "round {round}: the change is re-signed");
                let want = whole(&served, &diffs).unwrap_or_else(|e| panic!("round {round}: the whole path refused: {e}"));
                assert_eq!(sorted(&want), sorted(&new_zone), "round {round}: the whole path and a full load agree");
                let a = state.apply(&served, &diffs).unwrap_or_else(|e| panic!("nsec3 {nsec3} round {round}: {e}"));
                assert!(a.copied.is_none(), "round {round}: {:?}", a.copied);
                assert_eq!(a.validation, None, "round {round}: validated where it changed");
                assert_eq!(chain_warnings(&a.warnings), Vec::<String>::new(), "round {round}");
                assert_eq!(sorted(&a.zone), sorted(&new_zone), "nsec3 {nsec3} round {round}: in place equals a full load");
                let d = a.zone.denial.built().expect("denial data carried over");
                assert_eq!(**d, *new_zone.dnssec(), "round {round}: the denial data a full load builds");
                assert!(d.signed && (d.nsec3.is_some() == nsec3) && (d.nsec.is_empty() == nsec3), "round {round}");
                assert_eq!(kernel(&a.zone), kernel(&new_zone), "round {round}: the kernel's data");
                // written out (a transfer, the journal, the stored copy) each RRSIG has its
                // covered RRset's TTL: the records of the full load
                assert_eq!(journal::records_of(&a.zone), new_set, "round {round}: the records written");
                let new = Arc::new(a.zone);
                let old = std::mem::replace(&mut served, new.clone());
                state.installed(old, &new, a.touched);
                set = new_set;
                rounds += 1;
            }
            assert!(rounds > 30, "{rounds}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// An added RRSIG whose TTL (its covered RRset's, 300) is not the node's RRSIG set's (the
    /// NSEC's, 60) is applied in place (the whole path once), and written back with its
    /// covered TTL, the NSEC's signature with 60.
    #[test]
    fn an_added_rrsig_keeps_its_covered_ttl() {
        let dir = std::env::temp_dir().join(format!("xdns-incremental-rrsig-ttl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
        hosts.insert("h1".into(), vec!["A 198.18.0.9".into()]);
        let (set, first) = signed_version(&dir, 1, &hosts, false);
        let served = Arc::new(first);
        hosts.get_mut("h1").unwrap().push("AAAA 2001:db8::9".into());
        let (new_set, new_zone) = signed_version(&dir, 2, &hosts, false);
        let diffs = vec![journal::diff(&set, &new_set, 1, 2)];
        let h1 = key("h1.t.");
        assert_eq!(served.nodes[&h1].rrset(RRSIG).unwrap().ttl, 60, "the RRSIG set has the NSEC's TTL");
        let sig = diffs[0].added.iter().find(|r| r.rtype == RRSIG && r.owner == h1 && covered(&r.rdata) == Some(28)).expect("AAAA signed");
        assert_eq!(sig.ttl, 300);
        let mut state = State::default();
        state.prepare(&served);
        let a = state.apply(&served, &diffs).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sorted(&a.zone), sorted(&new_zone));
        let recs = journal::records_of(&a.zone);
        let ttl_of = |t: u16| recs.iter().find(|((o, rt, rd), _)| *o == h1 && *rt == RRSIG && covered(rd) == Some(t)).map(|(_, ttl)| *ttl);
        assert_eq!((ttl_of(1), ttl_of(28), ttl_of(signer::NSEC)), (Some(300), Some(300), Some(60)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Bad differences to a signed zone (NSEC, NSEC3 opt-out): a name added or removed without
    /// the link of the name before it re-signed breaks the chain: validated where it changed,
    /// the change gives the chain warnings a whole validation of the new version gives (the
    /// loader's rule: a warning, the zone is served), and only those; CNAME beside signed data
    /// is refused with the whole path's error and the old version keeps serving, its copy and
    /// denial data left as they were (the next good change applies in place and equals a
    /// full load).
    #[test]
    fn signed_chains_broken_or_bad_changes_as_a_whole_validation() {
        for nsec3 in [false, true] {
            let dir = std::env::temp_dir().join(format!("xdns-incremental-signed-bad-{nsec3}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for i in 0..12 {
                hosts.insert(format!("h{i}"), vec![format!("A 198.18.1.{i}")]);
            }
            let (set, first) = signed_version(&dir, 10, &hosts, nsec3);
            let served = Arc::new(first);
            let mut state = State::default();
            state.prepare(&served);
            let chain_type = if nsec3 { signer::NSEC3 } else { signer::NSEC };
            // the difference to `hosts2`, less the chain's changes at names other than `keep`
            // (and, NSEC3, its hashed owner)
            let broken = |hosts2: &BTreeMap<String, Vec<String>>, keep: &str| {
                let (new_set, _) = signed_version(&dir, 11, hosts2, nsec3);
                let mut d = journal::diff(&set, &new_set, 10, 11);
                let keep = key(keep);
                let p = xdns_zone::dnssec::Nsec3Params { algorithm: 1, iterations: 0, salt: Vec::new() };
                let hashed = xdns_zone::dnssec::nsec3_label(&keep, &p).unwrap();
                let mine = |o: &NameKey| *o == keep || o.get(1..1 + hashed.len()) == Some(&hashed[..]);
                let chain = |r: &Rec| r.rtype == chain_type || (r.rtype == RRSIG && covered(&r.rdata) == Some(chain_type));
                d.deleted.retain(|r| !chain(r) || mine(&r.owner));
                d.added.retain(|r| !chain(r) || mine(&r.owner));
                vec![d]
            };
            let mut added = hosts.clone();
            added.insert("new".into(), vec!["A 198.18.2.1".into()]);
            let mut removed = hosts.clone();
            removed.remove("h5");
            for (what, diffs) in [("a name added", broken(&added, "new.t.")), ("a name removed", broken(&removed, "h5.t."))] {
                let want = whole(&served, &diffs).unwrap_or_else(|e| panic!("{what}: {e}"));
                let whole_warnings = chain_warnings(&xdns_zone::validate::validate(&want).warnings);
                assert!(!whole_warnings.is_empty(), "nsec3 {nsec3} {what}: the chain is broken");
                let a = state.apply(&served, &diffs).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(a.validation, None, "{what}: validated where it changed");
                assert_eq!(chain_warnings(&a.warnings), whole_warnings, "nsec3 {nsec3} {what}: the whole validation's warnings");
                assert_eq!(sorted(&a.zone), sorted(&want), "{what}");
                assert_eq!(**a.zone.denial.built().unwrap(), *want.dnssec(), "{what}");
                // not installed: the next apply starts from the version served again
                state = State::default();
                state.prepare(&served);
            }
            // CNAME beside signed data: refused as the whole path refuses it
            let h3 = key("h3.t.");
            let mut cname = hosts.clone();
            cname.get_mut("h3").unwrap().push("CNAME h4".into());
            let (cname_set, _) = {
                // the loader refuses the zone file: sign the records directly
                let plain = load(&dir, &text(11, &hosts)).unwrap();
                let mut recs = journal::records_of(&plain);
                recs.insert((h3.clone(), 5, Bytes::from(key("h4.t.").to_vec())), 300);
                (signer::sign(&recs, &key(APEX), nsec3), ())
            };
            let diffs = vec![journal::diff(&set, &cname_set, 10, 11)];
            let before = sorted(&served);
            let whole_err = whole(&served, &diffs).expect_err("the whole path refuses it");
            match state.apply(&served, &diffs) {
                Err(ApplyError::Invalid(errs)) => {
                    assert!(errs.iter().any(|e| e.reason.contains("CNAME beside other data") && whole_err.contains(&e.reason)), "{errs:?} / {whole_err}")
                }
                other => panic!("nsec3 {nsec3}: {:?}", other.map(|a| a.touched)),
            }
            assert_eq!(sorted(&served), before, "the version served is untouched");
            // the good change after it: in place on the copy left level, denial data included
            let (good_set, good) = signed_version(&dir, 11, &added, nsec3);
            let a = state.apply(&served, &[journal::diff(&set, &good_set, 10, 11)]).unwrap_or_else(|e| panic!("{e}"));
            assert!(a.copied.is_none() && a.validation.is_none(), "{:?} {:?}", a.copied, a.validation);
            assert_eq!(sorted(&a.zone), sorted(&good));
            assert_eq!(**a.zone.denial.built().unwrap(), *good.dnssec(), "nsec3 {nsec3}: the denial data after a refusal");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// Bench (prints a table and a chart; no timed assertion): the userspace apply of a
    /// one-record change (a name added, re-signed as a signer does) to a signed zone of
    /// `XDNS_BENCH_RECORDS` hosts (default 2,000; 1,000,000 for issue 28), NSEC and NSEC3
    /// opt-out: in place (the spare prepared, the version served's denial data built, as the
    /// kernel's compile builds it), against the whole path the secondary took before (every
    /// record, the differences applied, built and validated, its denial data built on first
    /// use). Both give the same zone and denial data.
    ///
    /// `XDNS_BENCH_RECORDS=1000000 cargo test --release -p xdns --bin xdns signed_one_record_apply_bench -- --nocapture`
    #[test]
    fn signed_one_record_apply_bench() {
        let n: usize = std::env::var("XDNS_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
        let mut rows: Vec<(&str, f64, f64)> = Vec::new();
        for nsec3 in [false, true] {
            let dir = std::env::temp_dir().join(format!("xdns-incremental-bench-{nsec3}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for i in 0..n {
                hosts.insert(format!("h{i}"), vec![format!("A 198.18.{}.{}", (i >> 8) & 255, i & 255)]);
            }
            let plain = load(&dir, &text(1, &hosts)).unwrap();
            drop(hosts);
            let unsigned1 = journal::records_of(&plain);
            drop(plain);
            let mut unsigned2 = unsigned1.clone();
            let soa = unsigned2.keys().find(|k| k.1 == SOA).unwrap().clone();
            let ttl = unsigned2.remove(&soa).unwrap();
            let mut rd = soa.2.to_vec();
            let at = rd.len() - 20;
            rd[at..at + 4].copy_from_slice(&2u32.to_be_bytes());
            unsigned2.insert((soa.0.clone(), SOA, Bytes::from(rd)), ttl);
            unsigned2.insert((key("new-host.t."), 1, Bytes::from_static(&[198, 18, 9, 9])), 300);
            let s1 = signer::sign(&unsigned1, &key(APEX), nsec3);
            let s2 = signer::sign(&unsigned2, &key(APEX), nsec3);
            let diffs = vec![journal::diff(&s1, &s2, 1, 2)];
            drop((unsigned1, unsigned2, s2));
            let served = Arc::new(journal::build_zone(&key(APEX), &dir.join("z.zone"), &s1).unwrap());
            drop(s1);
            let _ = served.dnssec();
            let mut state = State::default();
            state.prepare(&served);
            let t = std::time::Instant::now();
            let a = state.apply(&served, &diffs).unwrap_or_else(|e| panic!("{e}"));
            let in_place = t.elapsed().as_secs_f64() * 1e3;
            assert!(a.copied.is_none() && a.validation.is_none(), "{:?} {:?}", a.copied, a.validation);
            let t = std::time::Instant::now();
            let w = whole(&served, &diffs).unwrap();
            let _ = w.dnssec();
            let whole_ms = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(**a.zone.denial.built().unwrap(), *w.dnssec());
            assert_eq!(a.zone.nodes.len(), w.nodes.len());
            for (k, node) in &w.nodes {
                let mut x = a.zone.nodes[k].clone();
                let mut y = node.clone();
                x.rrsets.iter_mut().chain(y.rrsets.iter_mut()).for_each(|r| r.rdata.sort());
                assert_eq!(x, y, "{}", key_to_text(k));
            }
            rows.push((if nsec3 { "NSEC3 opt-out" } else { "NSEC" }, in_place, whole_ms));
            let _ = std::fs::remove_dir_all(&dir);
        }
        println!("\nsigned zone of {n} hosts, one name added (re-signed): userspace apply");
        println!("| chain | in place ms | whole ms | whole / in place |\n|---|---:|---:|---:|");
        for (c, i, w) in &rows {
            println!("| {c} | {i:.1} | {w:.1} | {:.0}x |", w / i);
        }
        for (c, i, w) in &rows {
            let bar = |v: f64| "#".repeat(((v / w) * 50.0).ceil() as usize);
            println!("{c:>14} in place {:<50} {i:.1} ms\n{c:>14} whole    {:<50} {w:.1} ms", bar(*i), bar(*w));
        }
    }
}
