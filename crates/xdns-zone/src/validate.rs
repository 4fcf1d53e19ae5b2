//! Zone validation (owner: loader): one SOA at the apex, apex NS present, CNAME beside other
//! data rejected, DS only at zone cuts, data below zone cuts reported, nothing below a DNAME,
//! out-of-zone records rejected.
//!
//! Validation looks at a zone through [`ZoneView`], so it runs both on the loader's
//! intermediate form (which knows the file and line of every record) and on a finished
//! [`Zone`] (which does not; findings then carry no line). A view may show only the names a
//! change touched (an IXFR applied in place); a signed zone's NSEC/NSEC3 chains are then
//! checked around those names against the whole zone's owners ([`ZoneView::chains`],
//! [`LocalChains`]), with the findings a whole check gives there.
//!
//! What is an error and what is a warning:
//!
//! | finding | kind | rule |
//! |---|---|---|
//! | no SOA at the apex | error | RFC 1035 §5.2 |
//! | more than one SOA record | error | RFC 1035 §5.2 |
//! | SOA anywhere but the apex | error | RFC 1035 §5.2 |
//! | no NS at the apex | error | RFC 1034 §4.2.1 |
//! | CNAME beside other data (RRSIG/NSEC allowed) | error | RFC 1034 §3.6.2, RFC 4035 §2.5 |
//! | more than one CNAME record at a name | error | RFC 2181 §10.1 |
//! | DS at the apex or at a name that is not a cut | error | RFC 4034 §5, RFC 3658 |
//! | owner outside the zone | error | RFC 1034 §4.2.1 (checked by the loader per record) |
//! | more than one DNAME record at a name | error | RFC 6672 §2.4 |
//! | DNAME beside NS below the apex | error | RFC 6672 §2.3 (Knot refuses it too) |
//! | any record below a DNAME's owner (NSEC3 owners excepted) | error | RFC 6672 §2.4 |
//! | data below a cut other than glue (A/AAAA) | warning | occluded, never answered |
//! | data at a cut other than NS/DS/RRSIG/NSEC | warning | occluded, never answered |
//!
//! Signed zones (any RRSIG in the zone; all warnings, the zone is served as it is):
//!
//! | finding | rule |
//! |---|---|
//! | no DNSKEY at the apex | RFC 4035 §2.1 |
//! | RRSIG expired, or expiring within [`SIG_WARN_DAYS`] days | RFC 4034 §3.1.5 |
//! | authoritative RRset without an RRSIG (NS at a cut and glue are not signed) | RFC 4035 §2.2 |
//! | NSEC chain broken: an NSEC's next name is not the next owner in canonical order | RFC 4034 §4.1.1 |
//! | NSEC3 chain broken: the same in hash order | RFC 5155 §3.1.7 |
//! | NSEC3PARAM without an NSEC3 chain of its parameters | RFC 5155 §4 |

use std::path::{Path, PathBuf};

use hashbrown::HashSet;

use crate::load::{key_to_text, LoadError};
use crate::tree::{Node, Zone};

use xdns_wire::rtype;

/// What validation needs to see of a zone.
pub trait ZoneView {
    /// The apex as a lowercased wire name.
    fn apex(&self) -> &[u8];
    /// The node at `name` (lowercased wire), if any.
    fn node(&self, name: &[u8]) -> Option<&Node>;
    /// Calls `f` for every node, in any order.
    fn for_each_node(&self, f: &mut dyn FnMut(&[u8], &Node));
    /// The zone's main file, for findings that belong to no line.
    fn file(&self) -> &Path;
    /// Where the `nth` record (0-based, in file order) of type `rtype` at `name` came from.
    fn locate(&self, name: &[u8], rtype: u16, nth: usize) -> Option<(PathBuf, usize)>;
    /// For a view of part of a zone (the names a change touched, [`Self::for_each_node`]):
    /// the whole zone's NSEC/NSEC3 owners, up to date, and every name the change touched
    /// (names it removed included). The chains are then checked around those names only
    /// ([`LocalChains`]); `None` (the default) checks them whole.
    fn chains(&self) -> Option<LocalChains<'_>> {
        None
    }
}

/// What checking the NSEC/NSEC3 chains around changed names needs ([`ZoneView::chains`]).
///
/// A link (an owner's NSEC next name, an NSEC3's next hashed owner) can only break where the
/// owner's record changed or where the owner's successor in the chain changed, that is, where
/// a name right after it came or went. So the owners checked are the changed names that are in
/// a chain and, for every changed name, the owner before it (canonical order; NSEC3: hash
/// order of its first label); each is checked against its successor in the whole chain. The
/// findings are those of a whole check at these owners; elsewhere nothing changed.
pub struct LocalChains<'a> {
    /// The zone's NSEC and NSEC3 owners ([`crate::dnssec::Denial`]), of the version checked.
    pub denial: &'a crate::dnssec::Denial,
    /// Every name whose node changed, came or went.
    pub changed: &'a [&'a [u8]],
}

impl ZoneView for Zone {
    fn apex(&self) -> &[u8] {
        &self.apex
    }
    fn node(&self, name: &[u8]) -> Option<&Node> {
        self.nodes.get(name)
    }
    fn for_each_node(&self, f: &mut dyn FnMut(&[u8], &Node)) {
        for (k, n) in &self.nodes {
            f(k, n)
        }
    }
    fn file(&self) -> &Path {
        &self.file
    }
    fn locate(&self, _name: &[u8], _rtype: u16, _nth: usize) -> Option<(PathBuf, usize)> {
        None
    }
}

/// The result of [`validate`]: errors make the zone unusable, warnings do not.
/// Both are sorted by file and line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Problems that make the zone unusable.
    pub errors: Vec<LoadError>,
    /// Problems worth reporting that do not stop the zone from being served.
    pub warnings: Vec<LoadError>,
}

/// Whether `name` is the apex or below it (both lowercased wire names).
/// Compares on label boundaries, so `xexample.com.` is not in `example.com.`.
pub fn in_zone(apex: &[u8], name: &[u8]) -> bool {
    let mut pos = 0usize;
    loop {
        let rest = match name.get(pos..) {
            Some(r) => r,
            None => return false,
        };
        if rest.len() < apex.len() {
            return false;
        }
        if rest.len() == apex.len() {
            return rest == apex;
        }
        match rest.first() {
            Some(&0) | None => return false,
            Some(&l) => pos += 1 + l as usize,
        }
    }
}

/// The reason text for a record whose owner lies outside the zone.
pub fn out_of_zone_reason(owner: &[u8], apex: &[u8]) -> String {
    format!(
        "out-of-zone record: {} is not in zone {}",
        key_to_text(owner),
        key_to_text(apex)
    )
}

/// Check a zone; see the module documentation for the rules.
pub fn validate(z: &dyn ZoneView) -> Findings {
    let apex = z.apex();
    let mut f = Findings::default();
    let finding = |name: &[u8], rtype: u16, nth: usize, reason: String| -> LoadError {
        match z.locate(name, rtype, nth) {
            Some((file, line)) => LoadError {
                file,
                line: Some(line),
                reason,
            },
            None => LoadError {
                file: z.file().to_path_buf(),
                line: None,
                reason,
            },
        }
    };

    // Apex: SOA and NS.
    match z.node(apex).and_then(|n| n.rrset(rtype::SOA)) {
        None => f.errors.push(LoadError {
            file: z.file().to_path_buf(),
            line: None,
            reason: format!("missing SOA record at the zone apex {}", key_to_text(apex)),
        }),
        Some(soa) if soa.rdata.len() > 1 => f.errors.push(finding(
            apex,
            rtype::SOA,
            1,
            "more than one SOA record at the zone apex".into(),
        )),
        Some(_) => {}
    }
    if z.node(apex).and_then(|n| n.rrset(rtype::NS)).is_none() {
        f.errors.push(LoadError {
            file: z.file().to_path_buf(),
            line: None,
            reason: format!("missing NS records at the zone apex {}", key_to_text(apex)),
        });
    }

    // Zone cuts: every node other than the apex with an NS RRset.
    // Copied (the view hands out short-lived borrows) one after the other into one buffer,
    // not one allocation each: a registry's zone is mostly cuts.
    let (mut cut_bytes, mut cut_ends) = (Vec::<u8>::new(), Vec::<usize>::new());
    z.for_each_node(&mut |name, node| {
        if name != apex && node.rrset(rtype::NS).is_some() {
            cut_bytes.extend_from_slice(name);
            cut_ends.push(cut_bytes.len());
        }
    });
    let mut cuts: HashSet<&[u8]> = HashSet::with_capacity(cut_ends.len());
    let mut from = 0;
    for &end in &cut_ends {
        cuts.insert(&cut_bytes[from..end]);
        from = end;
    }
    // The closest cut strictly above `name` (between it and the apex), as an offset into it.
    let cut_above = |name: &[u8]| -> Option<usize> {
        if cuts.is_empty() {
            return None;
        }
        let mut pos = 1 + *name.first()? as usize;
        while name.len().saturating_sub(pos) > apex.len() {
            if cuts.contains(name.get(pos..)?) {
                return Some(pos);
            }
            pos += 1 + *name.get(pos)? as usize;
        }
        None
    };

    // DNAME owners (the apex included): nothing may exist below them.
    let mut dname_keys: Vec<Box<[u8]>> = Vec::new();
    z.for_each_node(&mut |name, node| {
        if node.rrset(rtype::DNAME).is_some() {
            dname_keys.push(name.into());
        }
    });
    let dnames: HashSet<&[u8]> = dname_keys.iter().map(|k| &k[..]).collect();
    // The closest DNAME owner strictly above `name` (up to the apex, included), as an offset.
    let dname_above = |name: &[u8]| -> Option<usize> {
        if dnames.is_empty() {
            return None;
        }
        let mut pos = 1 + *name.first()? as usize;
        while name.len().saturating_sub(pos) >= apex.len() {
            if dnames.contains(name.get(pos..)?) {
                return Some(pos);
            }
            pos += 1 + *name.get(pos)? as usize;
        }
        None
    };

    z.for_each_node(&mut |name, node| {
        let is_apex = name == apex;
        let is_cut = !is_apex && node.rrset(rtype::NS).is_some();
        if let Some(owner) = dname_above(name).filter(|_| !crate::dnssec::is_nsec3_only(node)).map(|p| &name[p..]) {
            if let Some(rr) = node.rrsets.first() {
                f.errors.push(finding(
                    name,
                    rr.rtype,
                    0,
                    format!(
                        "{} record at {} is below the DNAME at {} (nothing may exist below a DNAME)",
                        type_name(rr.rtype),
                        key_to_text(name),
                        key_to_text(owner)
                    ),
                ));
            }
        }
        let above = if is_apex {
            None
        } else {
            cut_above(name).map(|p| &name[p..])
        };

        for rr in &node.rrsets {
            match rr.rtype {
                rtype::SOA if !is_apex => f.errors.push(finding(
                    name,
                    rtype::SOA,
                    0,
                    format!("SOA record at {}, not at the zone apex", key_to_text(name)),
                )),
                rtype::DS if is_apex => f.errors.push(finding(
                    name,
                    rtype::DS,
                    0,
                    "DS record at the zone apex (DS belongs to the parent zone)".into(),
                )),
                rtype::DS if !is_cut && above.is_none() => f.errors.push(finding(
                    name,
                    rtype::DS,
                    0,
                    format!(
                        "DS record at {}, which is not a zone cut",
                        key_to_text(name)
                    ),
                )),
                rtype::DNAME if rr.rdata.len() > 1 => f.errors.push(finding(
                    name,
                    rtype::DNAME,
                    1,
                    format!("more than one DNAME record at {}", key_to_text(name)),
                )),
                rtype::DNAME if is_cut => f.errors.push(finding(
                    name,
                    rtype::DNAME,
                    0,
                    format!("DNAME beside NS at {}, which is not the zone apex", key_to_text(name)),
                )),
                rtype::CNAME => {
                    if rr.rdata.len() > 1 {
                        f.errors.push(finding(
                            name,
                            rtype::CNAME,
                            1,
                            format!("more than one CNAME record at {}", key_to_text(name)),
                        ));
                    }
                    if let Some(other) = node
                        .rrsets
                        .iter()
                        .find(|o| !matches!(o.rtype, rtype::CNAME | rtype::RRSIG | rtype::NSEC))
                    {
                        f.errors.push(finding(
                            name,
                            rtype::CNAME,
                            0,
                            format!(
                                "CNAME beside other data ({}) at {}",
                                type_name(other.rtype),
                                key_to_text(name)
                            ),
                        ));
                    }
                }
                _ => {}
            }
            if let Some(cut) = above {
                if !matches!(rr.rtype, rtype::A | rtype::AAAA) {
                    f.warnings.push(finding(
                        name,
                        rr.rtype,
                        0,
                        format!(
                            "{} record at {} is below the zone cut {} and is ignored",
                            type_name(rr.rtype),
                            key_to_text(name),
                            key_to_text(cut)
                        ),
                    ));
                }
            } else if is_cut
                && !matches!(rr.rtype, rtype::NS | rtype::DS | rtype::RRSIG | rtype::NSEC)
            {
                f.warnings.push(finding(
                    name,
                    rr.rtype,
                    0,
                    format!(
                        "{} record at the zone cut {} is occluded and ignored",
                        type_name(rr.rtype),
                        key_to_text(name)
                    ),
                ));
            }
        }
    });

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32);
    dnssec_warnings(z, &cut_above, now, SIG_WARN_DAYS, &mut f.warnings, &finding);

    let key = |e: &LoadError| (e.file.clone(), e.line.unwrap_or(0), e.reason.clone());
    f.errors.sort_by_key(key);
    f.warnings.sort_by_key(key);
    f
}

/// The mnemonic of an RR type (`A`, `TYPE65400`), through `domain`.
pub fn type_name(rtype: u16) -> String {
    rtype::name(rtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Box<[u8]> {
        crate::load::text_to_key(s).expect("valid name")
    }

    #[test]
    fn in_zone_table() {
        let apex = key("example.com.");
        let cases = [
            ("example.com.", true),
            ("www.example.com.", true),
            ("a.b.example.com.", true),
            ("xexample.com.", false),
            ("com.", false),
            (".", false),
            ("example.net.", false),
            ("www.example.net.", false),
        ];
        for (name, want) in cases {
            assert_eq!(in_zone(&apex, &key(name)), want, "{name}");
        }
        // Malformed input must not panic.
        assert!(!in_zone(&apex, &[63, 1, 2]));
        assert!(!in_zone(&apex, &[]));
    }

    #[test]
    fn type_names() {
        assert_eq!(type_name(1), "A");
        assert_eq!(type_name(65400), "TYPE65400");
    }
}

/// Signatures expiring within this many days are reported (`xdns check`, load warnings).
pub const SIG_WARN_DAYS: u32 = 7;

/// The DNSSEC warnings of a signed zone (module docs), `now` in seconds since the epoch.
fn dnssec_warnings(
    z: &dyn ZoneView,
    cut_above: &dyn Fn(&[u8]) -> Option<usize>,
    now: u32,
    warn_days: u32,
    out: &mut Vec<LoadError>,
    finding: &dyn Fn(&[u8], u16, usize, String) -> LoadError,
) {
    use crate::dnssec::{canonical_cmp, nsec3param, rrsig_fields, sigs_covering};
    let apex = z.apex();
    let mut signed = false;
    z.for_each_node(&mut |_, n| signed |= n.rrset(rtype::RRSIG).is_some());
    if !signed {
        return;
    }
    let apex_node = z.node(apex);
    if apex_node.and_then(|n| n.rrset(rtype::DNSKEY)).is_none() {
        out.push(finding(apex, rtype::SOA, 0, format!("signed zone {} has no DNSKEY at the apex", key_to_text(apex))));
    }
    // Serial-number arithmetic (RFC 1982) on 32-bit times: `a` before `b`.
    let before = |a: u32, b: u32| (b.wrapping_sub(a) as i32) > 0;
    let soon = now.wrapping_add(warn_days.saturating_mul(86400));
    let mut nsec: Vec<(Box<[u8]>, Vec<u8>)> = Vec::new();
    let mut nsec3: Vec<(Box<[u8]>, Box<[u8]>, Vec<u8>)> = Vec::new();
    let param = apex_node.and_then(|n| n.rrset(rtype::NSEC3PARAM)).and_then(|p| p.rdata.first()).and_then(nsec3param);
    z.for_each_node(&mut |name, node| {
        let below = name != apex && cut_above(name).is_some();
        let is_cut = name != apex && node.rrset(rtype::NS).is_some();
        let sigs = node.rrset(rtype::RRSIG);
        if let Some(s) = sigs {
            for (i, rd) in s.rdata.iter().enumerate() {
                let Some((covered, _, _, exp)) = rrsig_fields(rd) else { continue };
                let when = if before(exp, now) {
                    "expired"
                } else if before(exp, soon) {
                    "expires within the warning window"
                } else {
                    continue;
                };
                out.push(finding(
                    name,
                    rtype::RRSIG,
                    i,
                    format!("RRSIG {} at {} {} ({} days): expiration {}", type_name(covered), key_to_text(name), when, warn_days, utc(exp)),
                ));
            }
        }
        if below {
            return;
        }
        for rr in &node.rrsets {
            let unsigned_ok = rr.rtype == rtype::RRSIG || (is_cut && rr.rtype != rtype::DS && rr.rtype != rtype::NSEC);
            if !unsigned_ok && sigs_covering(sigs, rr.rtype).next().is_none() {
                out.push(finding(name, rr.rtype, 0, format!("{} RRset at {} has no RRSIG", type_name(rr.rtype), key_to_text(name))));
            }
        }
        if let Some(next) = nsec_next(node) {
            nsec.push((name.into(), next));
        }
        if let Some(p) = &param {
            nsec3.extend(nsec3_links(name, node, p).into_iter().map(|(l, next)| (l, name.into(), next)));
        }
    });
    if let Some(local) = z.chains() {
        local_chain_warnings(z, &local, param.as_ref(), out, finding);
        return;
    }
    nsec.sort_by(|a, b| canonical_cmp(&a.0, &b.0));
    for (i, (owner, next)) in nsec.iter().enumerate() {
        let want: &[u8] = &nsec[(i + 1) % nsec.len()].0;
        if next[..] != *want {
            out.push(finding(
                owner,
                rtype::NSEC,
                0,
                format!("NSEC chain broken at {}: next name {}, the next owner in the chain is {}", key_to_text(owner), key_to_text(next), key_to_text(want)),
            ));
        }
    }
    if param.is_some() {
        if nsec3.is_empty() {
            out.push(finding(apex, rtype::NSEC3PARAM, 0, format!("NSEC3PARAM at {} without an NSEC3 chain of its parameters", key_to_text(apex))));
        } else {
            nsec3.sort();
            for (i, (label, owner, next)) in nsec3.iter().enumerate() {
                let want = &nsec3[(i + 1) % nsec3.len()].0;
                if next[..] != want[..] {
                    out.push(finding(
                        owner,
                        rtype::NSEC3,
                        0,
                        format!("NSEC3 chain broken at {}: next hashed owner {}, the next in the chain is {}", String::from_utf8_lossy(label), String::from_utf8_lossy(next), String::from_utf8_lossy(want)),
                    ));
                }
            }
        }
    }
}

/// The next name of `node`'s NSEC (lowercased), if it has one that parses: its link in the
/// NSEC chain.
fn nsec_next(node: &Node) -> Option<Vec<u8>> {
    let n = node.rrset(rtype::NSEC)?.rdata.first()?;
    let len = xdns_wire::name::name_len(n).ok()?;
    Some(n[..len].to_ascii_lowercase())
}

/// The links of `name`'s NSEC3 records of the chain `p`: (its first label, lowercased;
/// the next hashed owner as lowercase base32hex), one per record.
fn nsec3_links(name: &[u8], node: &Node, p: &crate::dnssec::Nsec3Params) -> Vec<(Box<[u8]>, Vec<u8>)> {
    let mut out = Vec::new();
    let (Some(n3), Some(label)) = (node.rrset(rtype::NSEC3), xdns_wire::name::labels(name).next()) else { return out };
    for rd in &n3.rdata {
        let salt_len = usize::from(*rd.get(4).unwrap_or(&0));
        let same = rd.first() == Some(&p.algorithm)
            && rd.get(2..4) == Some(&p.iterations.to_be_bytes()[..])
            && rd.get(5..5 + salt_len) == Some(&p.salt[..]);
        let hash_len = usize::from(*rd.get(5 + salt_len).unwrap_or(&0));
        if let (true, Some(next)) = (same, rd.get(6 + salt_len..6 + salt_len + hash_len)) {
            let next = domain::utils::base32::encode_string_hex(next).to_ascii_lowercase().into_bytes();
            out.push((label.to_ascii_lowercase().into_boxed_slice(), next));
        }
    }
    out
}

/// The chain warnings of a whole check, at the owners [`LocalChains`] says can have changed.
fn local_chain_warnings(
    z: &dyn ZoneView,
    local: &LocalChains<'_>,
    param: Option<&crate::dnssec::Nsec3Params>,
    out: &mut Vec<LoadError>,
    finding: &dyn Fn(&[u8], u16, usize, String) -> LoadError,
) {
    use crate::dnssec::canonical_cmp;
    use std::cmp::Ordering;
    let apex = z.apex();
    let d = local.denial;
    // as the whole check: names below a cut are in no chain (occluded)
    let below_cut = |name: &[u8]| {
        let mut pos = match name.first() {
            Some(&l) if l > 0 => 1 + usize::from(l),
            _ => return false,
        };
        while name.len().saturating_sub(pos) > apex.len() {
            if z.node(&name[pos..]).is_some_and(|n| n.rrset(rtype::NS).is_some()) {
                return true;
            }
            pos += 1 + usize::from(name[pos]);
        }
        false
    };

    // NSEC: owners in the chain, in canonical order (the denial data's, less the occluded and
    // those whose next name does not parse, which a whole check leaves out too)
    let in_nsec = |o: &[u8]| !below_cut(o) && z.node(o).and_then(nsec_next).is_some();
    let n = d.nsec.len();
    // the index of the first chain owner at or after `i` going forward (`step` 1) or back
    // (`step` n - 1), wrapping; None when the chain is empty
    let walk = |mut i: usize, step: usize, ok: &dyn Fn(usize) -> bool, len: usize| -> Option<usize> {
        for _ in 0..len {
            if ok(i) {
                return Some(i);
            }
            i = (i + step) % len;
        }
        None
    };
    if n > 0 {
        let ok = |i: usize| in_nsec(&d.nsec[i]);
        let mut check: Vec<usize> = Vec::new();
        for &c in local.changed {
            let at = d.nsec.partition_point(|o| canonical_cmp(o, c) == Ordering::Less);
            if at < n && d.nsec[at][..] == *c && ok(at) {
                check.push(at);
            }
            if let Some(p) = walk((at + n - 1) % n, n - 1, &ok, n) {
                check.push(p);
            }
        }
        check.sort_unstable();
        check.dedup();
        for i in check {
            let owner = &d.nsec[i][..];
            let Some(next) = z.node(owner).and_then(nsec_next) else { continue };
            let Some(s) = walk((i + 1) % n, 1, &ok, n) else { continue };
            let want = &d.nsec[s][..];
            if next[..] != *want {
                out.push(finding(
                    owner,
                    rtype::NSEC,
                    0,
                    format!("NSEC chain broken at {}: next name {}, the next owner in the chain is {}", key_to_text(owner), key_to_text(&next), key_to_text(want)),
                ));
            }
        }
    }

    // NSEC3, in hash order: the same, on the chain of the NSEC3PARAM's parameters
    let Some(p) = param else { return };
    let owners = &d.nsec3_owners;
    let n = owners.len();
    let ok = |i: usize| !below_cut(&owners[i].1) && z.node(&owners[i].1).is_some_and(|node| !nsec3_links(&owners[i].1, node, p).is_empty());
    if walk(0, 1, &ok, n).is_none() {
        out.push(finding(apex, rtype::NSEC3PARAM, 0, format!("NSEC3PARAM at {} without an NSEC3 chain of its parameters", key_to_text(apex))));
        return;
    }
    let mut check: Vec<usize> = Vec::new();
    for &c in local.changed {
        let Some(label) = xdns_wire::name::labels(c).next() else { continue };
        let label = label.to_ascii_lowercase();
        let at = owners.partition_point(|(l, o)| (&l[..], &o[..]) < (&label[..], c));
        if at < n && owners[at].1[..] == *c && ok(at) {
            check.push(at);
        }
        if let Some(p) = walk((at + n - 1) % n, n - 1, &ok, n) {
            check.push(p);
        }
    }
    check.sort_unstable();
    check.dedup();
    for i in check {
        let owner = &owners[i].1[..];
        let Some(node) = z.node(owner) else { continue };
        let mut links = nsec3_links(owner, node, p);
        links.sort();
        let Some(s) = walk((i + 1) % n, 1, &ok, n) else { continue };
        for (j, (label, next)) in links.iter().enumerate() {
            // several records of the chain at one owner follow each other (a whole check
            // sorts them by their next hashed owner)
            let want: &[u8] = if j + 1 < links.len() { &links[j + 1].0 } else { &owners[s].0 };
            if next[..] != *want {
                out.push(finding(
                    owner,
                    rtype::NSEC3,
                    0,
                    format!("NSEC3 chain broken at {}: next hashed owner {}, the next in the chain is {}", String::from_utf8_lossy(label), String::from_utf8_lossy(next), String::from_utf8_lossy(want)),
                ));
            }
        }
    }
}

/// `secs` since the epoch as `YYYY-MM-DD HH:MM:SS UTC` (the civil calendar, days to dates).
fn utc(secs: u32) -> String {
    let days = i64::from(secs / 86400);
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod utc_tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc(1_577_836_800), "2020-01-01 00:00:00 UTC");
        assert_eq!(super::utc(1_709_210_096), "2024-02-29 12:34:56 UTC");
    }
}
