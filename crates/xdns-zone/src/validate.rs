//! Zone validation (owner: loader): one SOA at the apex, apex NS present, CNAME beside other
//! data rejected, DS only at zone cuts, data below zone cuts reported, out-of-zone records
//! rejected.
//!
//! Validation looks at a zone through [`ZoneView`], so it runs both on the loader's
//! intermediate form (which knows the file and line of every record) and on a finished
//! [`Zone`] (which does not; findings then carry no line).
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
//! | data below a cut other than glue (A/AAAA) | warning | occluded, never answered |
//! | data at a cut other than NS/DS/RRSIG/NSEC | warning | occluded, never answered |

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
    // Owned copies: the view hands out short-lived borrows.
    let mut cut_keys: Vec<Box<[u8]>> = Vec::new();
    z.for_each_node(&mut |name, node| {
        if name != apex && node.rrset(rtype::NS).is_some() {
            cut_keys.push(name.into());
        }
    });
    let cuts: HashSet<&[u8]> = cut_keys.iter().map(|k| &k[..]).collect();
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

    z.for_each_node(&mut |name, node| {
        let is_apex = name == apex;
        let is_cut = !is_apex && node.rrset(rtype::NS).is_some();
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
