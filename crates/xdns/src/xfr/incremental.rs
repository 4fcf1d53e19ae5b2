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
//! | an added record whose TTL differs from its RRset's (the whole path keeps the smallest TTL per RRset over records the copy no longer knows) | [`ApplyError::Fallback`]: the caller builds the zone whole |
//! | a signed zone (NSEC/NSEC3 chain checks are whole-zone); a delegation removed with names below it (DS below it may now stand at no cut) | applied in place, validated whole ([`Applied::validation`] says why) |
//! | no spare (first change after a full transfer, or the old version still in use) | the version served is copied first ([`Applied::copied`] says why) |
//!
//! Validation in place runs the loader's [`validate`] on a view of the zone that holds the
//! touched names and their ancestors: a zone that was valid can only gain errors at a name
//! whose records changed or, for DS, below a cut that went away (the whole-zone case above).

use std::path::Path;
use std::sync::{Arc, Weak};

use hashbrown::{HashMap, HashSet};
use xdns_zone::load::key_to_text;
use xdns_zone::validate::{in_zone, out_of_zone_reason, type_name, validate, Findings, ZoneView};
use xdns_zone::{LoadError, NameKey, Node, Rrset, Zone};

use super::client::{Diff, Rec, SOA};
use super::serial;

const NS: u16 = 2;
const RRSIG: u16 = 46;

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
        copy.denial = Default::default();
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

    /// A private copy equal to `served`, and why it had to be copied whole (if it had).
    fn take_copy(&mut self, served: &Arc<Zone>) -> (Zone, Option<String>) {
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
                    z.denial = Default::default();
                    return (z, None);
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
        (z, Some(reason.to_string()))
    }

    /// Apply `diffs` (in order, from `served`'s serial) to a copy of `served`: the new version,
    /// or why not (module docs). On any error the state still describes `served`.
    pub fn apply(&mut self, served: &Arc<Zone>, diffs: &[Diff]) -> Result<Applied, ApplyError> {
        let (mut zone, copied) = self.take_copy(served);
        let mut tx = Tx { zone: &mut zone, children: &mut self.children, saved: HashMap::new(), saved_children: HashMap::new() };
        let r = tx.run(served, diffs);
        let out = match r {
            Ok(validation) => {
                let mut touched: Vec<NameKey> = tx.saved.into_keys().collect();
                touched.sort_unstable();
                Ok((touched, validation))
            }
            Err(e) => {
                tx.rollback();
                Err(e)
            }
        };
        match out {
            Ok((touched, validation)) => {
                let soa = zone.nodes.get(&zone.apex).and_then(|n| n.rrset(SOA)).and_then(|s| s.rdata.first());
                zone.serial = soa.and_then(serial::soa_serial).unwrap_or(0);
                Ok(Applied { zone, touched, copied, validation })
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
            if set.ttl != r.ttl {
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
            Ok(i) => node.rrsets[i].rdata.push(&r.rdata),
            Err(i) => node.rrsets.insert(i, Rrset { rtype: r.rtype, ttl: r.ttl, rdata: xdns_zone::Rdatas::one(&r.rdata) }),
        }
        Ok(())
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

    /// Apply and validate; `Ok(Some(reason))` when validated whole.
    fn run(&mut self, served: &Zone, diffs: &[Diff]) -> Result<Option<String>, ApplyError> {
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
        let findings = self.validate(served)?;
        for w in findings.0.warnings.iter().take(100) {
            tracing::warn!("{w}");
        }
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
        Ok(findings.1)
    }

    /// The findings of the new version where it changed (or whole, with the reason).
    fn validate(&self, served: &Zone) -> Result<(Findings, Option<String>), ApplyError> {
        let has = |n: &Option<Node>, t: u16| n.as_ref().is_some_and(|n| n.rrset(t).is_some());
        let signed = xdns_zone::compile::is_signed(served)
            || xdns_zone::compile::is_signed(self.zone)
            || self.saved.iter().any(|(k, old)| has(old, RRSIG) || self.zone.nodes.get(k).is_some_and(|n| n.rrset(RRSIG).is_some()));
        let whole = if signed {
            Some("a signed zone (its NSEC/NSEC3 chains are checked whole)".to_string())
        } else {
            self.saved
                .iter()
                .find(|(k, old)| {
                    k[..] != self.zone.apex[..]
                        && has(old, NS)
                        && self.zone.nodes.get(&k[..]).is_none_or(|n| n.rrset(NS).is_none())
                        && self.children.get(&k[..]).copied().unwrap_or(0) > 0
                })
                .map(|(k, _)| format!("the delegation at {} went away with names below it", key_to_text(k)))
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
        let view = Touched { zone: self.zone, names: names.into_iter().collect() };
        Ok((validate(&view), None))
    }
}

/// A zone seen through the names a change touched (and their ancestors): [`validate`] checks
/// only those, with the whole zone behind [`ZoneView::node`].
struct Touched<'a> {
    zone: &'a Zone,
    names: Vec<&'a [u8]>,
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
}
