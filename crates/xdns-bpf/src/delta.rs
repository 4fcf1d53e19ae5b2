//! What one zone's new version changes in the kernel's data, without compiling the zone whole
//! (issue 28: an IXFR that changes a few records updates only what changed).
//!
//! [`zone_delta`] is given the old and new zone sets (the new one differs from the old only in
//! the zone at `apex`), the owners the transfer changed, and the names of the zone whose stored
//! bodies carry the apex SOA (NODATA/NXDOMAIN bodies not shared with the apex, [`soa_bound`]).
//! It finds every name whose kernel entries can differ:
//! - the changed owners and their ancestors up to the apex (empty non-terminals appear and
//!   disappear; the apex always, its SOA serial changes);
//! - owners whose records name one of those (NS, MX, SRV, SVCB, HTTPS targets: the addresses in
//!   the additional section; CNAME targets: the chain), or a name below one whose existence
//!   changed, and CNAMEs pointing at any of them, transitively;
//! - when the SOA changed, every name with a stored SOA-carrying body. Names answering NODATA
//!   from the apex's body (`XDNS_NODE_NODATA_APEX`), delegations without DS (their DS NODATA
//!   is the apex's, `data::shareable`) and NXDOMAIN (one body at the apex) need nothing: they
//!   are rebased from the apex's bodies by the kernel.
//!
//! It then compiles those names' keys in both versions ([`xdns_zone::lookup::keys_of_name`],
//! the same rules as [`crate::data::compile_kernel_data`], shared NODATA included) and returns
//! the differences. What it does not handle returns the reason (the caller falls back to a
//! full generation): signed zones, nested zones, changed delegations (NS below the apex),
//! wildcard owners, DNAME, and more affected names than `limit`.

use std::collections::{HashMap, HashSet};

use xdns_wire::{name, Body};
use xdns_zone::lookup::{keys_of_name, BodyKey, BodyKind};
use xdns_zone::{Zone, ZoneSet};

use crate::data::{parent, same_when_rebased, shareable, AnswerEntry, Kind, NodeEntry};

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
}

/// What [`zone_delta`] keeps of a zone between changes, so that a change need not look at
/// every name: the names with stored SOA-carrying bodies ([`soa_bound`]), a hash of every name
/// that records point at (NS, MX, SRV, SVCB, HTTPS, CNAME targets: a hit means "scan for the
/// owners"), and whether the zone has wildcards (then a new or removed name can change what a
/// target below it matches, so every change scans) or DNAME (no in-place updates).
///
/// A zone with more SOA-carrying names than a change may recompile (`limit` of [`Self::build`];
/// a TLD's delegations without DS, whose DS NODATA bodies carry the SOA) keeps none of this:
/// every change of a zone changes its SOA serial, so none of its changes can be made in place,
/// and the sets would only hold memory (docs/perf/2026-11-29-zone-memory-1m.md).
#[derive(Clone, Debug, Default)]
pub struct ZoneIndex {
    pub soa_bound: HashSet<Vec<u8>>,
    pub targets: HashSet<u64>,
    pub wildcards: bool,
    pub dname: bool,
    /// `Some(limit)`: more names than `limit` carry the SOA; the sets above are left empty.
    pub soa_bound_over: Option<usize>,
}

/// Target hashes: any fixed hash of the lowercased name (only compared with itself).
fn target_hash(n: &[u8]) -> u64 {
    crate::hash::name_hash(0x7461_7267_6574, &lower(n))
}

impl ZoneIndex {
    /// The index of `zone` (one pass over its records), with `soa_bound` from a full compile
    /// (which may stop gathering past `limit`); nothing but the limit when there are more.
    pub fn build(zone: &Zone, soa_bound: HashSet<Vec<u8>>, limit: usize) -> Self {
        if soa_bound.len() > limit {
            return ZoneIndex { soa_bound_over: Some(limit), ..Default::default() };
        }
        let mut ix = ZoneIndex { soa_bound, ..Default::default() };
        for (owner, node) in &zone.nodes {
            ix.add_node(owner, node);
        }
        ix
    }

    fn add_node(&mut self, owner: &[u8], node: &xdns_zone::Node) {
        self.wildcards |= owner.starts_with(b"\x01*");
        for rr in &node.rrsets {
            self.dname |= rr.rtype == DNAME;
            for rd in &rr.rdata {
                if let Some(t) = target(rr.rtype, rd) {
                    self.targets.insert(target_hash(t));
                }
            }
        }
    }

    /// Take in a change applied in place: `delta`'s SOA-bound names, and the records of the
    /// changed owners in `zone` (the new version; hashes are only added: a stale one costs a
    /// scan, never an answer).
    pub fn update(&mut self, zone: &Zone, changed: &[Vec<u8>], delta: &Delta) {
        for (n, b) in &delta.soa_bound {
            if *b {
                self.soa_bound.insert(n.clone());
            } else {
                self.soa_bound.remove(n);
            }
        }
        for c in changed {
            if let Some(node) = zone.nodes.get(&lower(c)[..]) {
                self.add_node(&lower(c), node);
            }
        }
    }
}

const NS: u16 = 2;
const CNAME: u16 = 5;
const SOA: u16 = 6;
const MX: u16 = 15;
const SRV: u16 = 33;
const DNAME: u16 = 39;
const SVCB: u16 = 64;
const HTTPS: u16 = 65;

/// Does `b` carry the apex SOA (an authoritative negative answer)?
pub fn carries_soa(b: &Body) -> bool {
    b.nscount > 0 && b.flags & 0x0400 != 0
}

/// The name a serial change must recompile for the stored body `a` if it carries the SOA:
/// its base, or for a wildcard body the wildcard's name (`*.base`), whose keys give it.
fn bound_name(a: &AnswerEntry) -> Option<Vec<u8>> {
    carries_soa(&a.body).then(|| match a.kind {
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

/// The name a record's RDATA points at, for the types whose answers depend on it.
fn target(rtype: u16, rdata: &[u8]) -> Option<&[u8]> {
    let skip = match rtype {
        NS | CNAME => 0,
        MX | SVCB | HTTPS => 2,
        SRV => 6,
        _ => return None,
    };
    rdata.get(skip..)
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

/// One name's node and stored bodies in `zone` (sharing NODATA with `apex_other` as
/// `data::zone_answers` does), and whether one of them carries the SOA.
fn name_state(zone: &Zone, apex_other: &Body, nm: &[u8]) -> (Option<(NodeEntry, bool)>, Vec<AnswerEntry>, bool) {
    let mut keys = Vec::new();
    keys_of_name(zone, nm, &mut keys);
    if nm == &zone.apex[..] {
        keys.push(BodyKey { base: zone.apex.clone(), kind: BodyKind::NxDomain });
    }
    let mut answers = Vec::with_capacity(keys.len());
    for key in keys {
        let body = xdns_zone::compile::compile(zone, &key);
        if shareable(&key, &zone.apex) && same_when_rebased(apex_other, &body) {
            continue;
        }
        answers.push(AnswerEntry { base: key.base.into_vec(), kind: key.kind.into(), body });
    }
    let bound = nm != &zone.apex[..] && answers.iter().any(|a| carries_soa(&a.body));
    let node = zone.node(nm).map(|_| {
        let mut wild = Vec::with_capacity(nm.len() + 2);
        wild.extend_from_slice(b"\x01*");
        wild.extend_from_slice(nm);
        let own = answers.iter().any(|a| a.kind == Kind::Other && a.base == nm);
        let n = NodeEntry {
            name: nm.to_vec(),
            apex: zone.apex.to_vec(),
            cut: cut_of(zone, nm),
            wildcard: zone.nodes.contains_key(&wild[..]),
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
    if index.dname {
        return Err("the zone has DNAME records".into());
    }
    if let Some(n) = index.soa_bound_over {
        return Err(format!("more than {n} names have stored bodies carrying the SOA, which every change changes"));
    }
    let (Some(oz), Some(nz)) = (old.zones.get(apex), new.zones.get(apex)) else {
        return Err("the zone was added or removed".into());
    };
    if new.zones.keys().any(|a| &a[..] != apex && (name::is_subdomain(a, apex) || name::is_subdomain(apex, a))) {
        return Err("nested zones".into());
    }
    if xdns_zone::compile::is_signed(oz) || xdns_zone::compile::is_signed(nz) {
        return Err("signed zone".into());
    }
    // the changed owners and their ancestors up to the apex
    let mut affected: HashSet<Vec<u8>> = HashSet::new();
    for c in changed {
        let c = lower(c);
        if !name::is_subdomain(&c, apex) {
            return Err("a changed owner outside the zone".into());
        }
        if c.starts_with(b"\x01*") {
            return Err("a wildcard changed".into());
        }
        let (on, nn) = (oz.nodes.get(&c[..]), nz.nodes.get(&c[..]));
        let rr = |n: Option<&xdns_zone::Node>, t| n.and_then(|n| n.rrset(t)).cloned();
        if c != apex && rr(on, NS) != rr(nn, NS) {
            return Err("a delegation changed".into());
        }
        if rr(on, DNAME).is_some() || rr(nn, DNAME).is_some() {
            return Err("DNAME".into());
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
    // names whose existence changed: targets at or below them depend on them
    let gone_or_new: Vec<Vec<u8>> =
        affected.iter().filter(|n| oz.node(n).is_some() != nz.node(n).is_some()).cloned().collect();
    let mut lens = [false; 256];
    affected.iter().for_each(|n| lens[n.len().min(255)] = true);
    let depends = |t: &[u8], set: &HashSet<Vec<u8>>, lens: &[bool; 256]| -> bool {
        (lens[t.len().min(255)] && set.contains(&lower(t)))
            || gone_or_new.iter().any(|e| t.len() > e.len() && name::is_subdomain(&lower(t), e))
    };
    // one pass over the new version: direct dependents, and the CNAME edges for the closure;
    // needless when no record points at an affected name and no wildcard can be involved
    let mut cnames: Vec<(&[u8], &[u8])> = Vec::new();
    let mut dependents: HashSet<Vec<u8>> = HashSet::new();
    let scan = index.wildcards || affected.iter().any(|n| index.targets.contains(&target_hash(n)));
    let to_scan = if scan { Some(&nz.nodes) } else { None };
    for (owner, node) in to_scan.into_iter().flatten() {
        for rr in &node.rrsets {
            if rr.rtype == DNAME {
                return Err("the zone has DNAME records".into());
            }
            for rd in &rr.rdata {
                let Some(t) = target(rr.rtype, rd) else { continue };
                if rr.rtype == CNAME {
                    cnames.push((owner, t));
                }
                if depends(t, &affected, &lens) {
                    dependents.insert(owner.to_vec());
                }
            }
        }
    }
    // CNAMEs to anything affected, transitively
    let mut all: HashSet<Vec<u8>> = affected.union(&dependents).cloned().collect();
    loop {
        all.iter().for_each(|n| lens[n.len().min(255)] = true);
        let more: Vec<Vec<u8>> = cnames
            .iter()
            .filter(|(o, t)| !all.contains(*o) && depends(t, &all, &lens))
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
    let soa_changed = oz.nodes.get(apex).and_then(|n| n.rrset(SOA)) != nz.nodes.get(apex).and_then(|n| n.rrset(SOA));
    if soa_changed {
        if soa_bound.len() > limit {
            return Err(format!("the SOA changed and {} names have stored bodies carrying it", soa_bound.len()));
        }
        all.extend(soa_bound.iter().cloned());
    }
    if all.len() > limit {
        return Err(format!("{} names to recompile (limit {limit})", all.len()));
    }
    // compile both versions of every affected name and compare
    let apex_key = BodyKey { base: apex.into(), kind: BodyKind::Other };
    let (o_apex, n_apex) = (xdns_zone::compile::compile(oz, &apex_key), xdns_zone::compile::compile(nz, &apex_key));
    let mut names: Vec<Vec<u8>> = all.into_iter().collect();
    names.sort_unstable();
    let mut d = Delta { names: names.len(), ..Default::default() };
    for nm in &names {
        let (on, oa, _) = name_state(oz, &o_apex, nm);
        let (nn, na, bound) = name_state(nz, &n_apex, nm);
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
    fn found(maps: &MemMaps, key: &xdns_answer_key) -> Option<(xdns_answer, Option<Vec<u8>>)> {
        let half = &maps.table[(key.gen & 1) as usize];
        let body = || maps.bodies.get(bytes_of(key)).map(|b| b.1.clone());
        if half.index.is_empty() {
            return maps.answer(key).map(|a| (*a, body()));
        }
        let b = crate::hash::table_bucket(key.hash, key.kind, key.qtype, half.index.len() as u32) as usize;
        let meta = table_meta(key.kind, key.qtype, key.gen);
        let bucket = &half.index[b];
        if let Some(e) = bucket.e.iter().find(|e| e.hash == key.hash && e.meta == meta) {
            let a = half.vals[&(e.idx & !crate::hash::TABLE_SPILLED)];
            // class S bytes are inline in the value; the test keeps them in `bodies` too
            return Some((a, body()));
        }
        if bucket.e[0].idx & crate::hash::TABLE_SPILLED != 0 {
            return maps.answer(key).map(|a| (*a, body()));
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
    /// TXT, and the serial of every version.
    #[test]
    fn random_changes_in_place_equal_a_full_encode() {
        // with a wildcard every change scans the zone for dependents; without, only changes
        // to names that records point at
        random_changes(true);
        random_changes(false);
    }

    fn random_changes(wildcard: bool) {
        let dir = std::env::temp_dir().join(format!("xdns-delta-{}-{wildcard}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut hosts: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
        for i in 0..40 {
            hosts.insert(format!("h{i}"), vec![format!("A 198.18.1.{i}")]);
        }
        hosts.insert("mail".into(), vec!["MX 10 h1".into(), "MX 20 h2.t.".into()]);
        hosts.insert("_sip._udp".into(), vec!["SRV 0 0 5060 h3".into()]);
        hosts.insert("alias".into(), vec!["CNAME h4".into()]);
        hosts.insert("alias2".into(), vec!["CNAME alias".into()]);
        hosts.insert("dangling".into(), vec!["CNAME x.y.gone".into()]);
        if wildcard {
            hosts.insert("*.wild".into(), vec!["A 198.18.2.1".into()]);
        }
        let seed = 77;
        let mut serial = 1;
        let mut zones = load(&dir, &text(serial, &hosts));
        let mut maps = shaped();
        let mut loader = Loader::new(seed);
        let data = compile_kernel_data(&zones);
        let first = zones.zones.values().next().unwrap().clone();
        let mut index = ZoneIndex::build(&first, soa_bound(&data.answers, &first.apex), 1000);
        assert_eq!(index.wildcards, wildcard);
        loader.install(&mut maps, &data).unwrap();
        let apex = xdns_wire::name::from_presentation(APEX).unwrap();
        let mut in_place = 0;
        for round in 0..60 {
            let h = format!("h{}", next(45));
            match next(8) {
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
                }
                6 => {
                    hosts.remove("x.y.gone");
                }
                _ => {
                    hosts.insert("h2".into(), vec![format!("A 198.18.5.{}", next(250))]);
                }
            }
            serial += 1;
            let new = load(&dir, &text(serial, &hosts));
            let changed = owners(&zones, &new);
            let delta = zone_delta(&zones, &new, &apex, &changed, &index, 1000).unwrap_or_else(|e| panic!("round {round}: {e}"));
            let epoch = maps.epoch;
            loader.apply(&mut maps, &delta).unwrap_or_else(|e| panic!("round {round}: {e}"));
            in_place += 1;
            assert_eq!(maps.epoch, epoch + 1, "round {round}: the memo forgets");
            index.update(new.zones.values().next().unwrap(), &changed, &delta);
            // the oracle: a fresh full encode of the new version in generation 1
            let fresh_data = compile_kernel_data(&new);
            assert_eq!(index.soa_bound, soa_bound(&fresh_data.answers, &apex), "round {round}: SOA-bound names kept current");
            let full = ZoneIndex::build(new.zones.values().next().unwrap(), HashSet::new(), 1000);
            assert!(full.targets.is_subset(&index.targets), "round {round}: every target hash kept");
            let mut fresh = shaped();
            Loader::new(seed).install(&mut fresh, &fresh_data).unwrap();
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
                let got = found(&maps, &key);
                let fmt = |f: &Option<(xdns_answer, Option<Vec<u8>>)>| f.as_ref().map(|(a, b)| (bytes_of(a).to_vec(), b.clone()));
                assert_eq!(fmt(&got), fmt(&want), "round {round}: answer {key:?}");
            }
            let rawa = |m: &HashMap<Vec<u8>, xdns_answer>| -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
                m.iter().map(|(k, v)| (k.clone(), bytes_of(v).to_vec())).collect()
            };
            assert_eq!(rawa(&maps.answers), rawa(&fresh.answers), "round {round}: the hash map holds every answer, no old one");
            assert_eq!(maps.bodies, fresh.bodies, "round {round}: body bytes");
            let (f, g) = (fresh.filter[1].as_ref().unwrap(), maps.filter[1].as_ref().unwrap());
            assert!(f.words().iter().zip(g.words()).all(|(a, b)| a & b == *a), "round {round}: every fresh presence bit set");
            zones = new;
        }
        assert_eq!(in_place, 60);
    }

    /// What the incremental path declines, with its reason: a delegation, a wildcard, a
    /// signed zone's change; and more names than the limit.
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
        assert_eq!(try_with("sub", "NS ns.other."), Err("a delegation changed".into()));
        assert_eq!(try_with("*.w", "A 198.18.0.7"), Err("a wildcard changed".into()));
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
