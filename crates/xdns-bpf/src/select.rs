//! The kernel's lookup (`bpf/lookup.h`) over [`MemMaps`]: what body would the XDP program
//! pick? Tests compare it with the engine's `select` for whole query corpora.

use crate::data::{answer_key, Kind, NODE_CUT, NODE_NODATA_APEX, NODE_WILDCARD};
use crate::hash::{suffix_hashes, FILTER_APEX_NX, FILTER_CUT, FILTER_NODE, FILTER_WILDCARD};
use crate::maps::MemMaps;
use crate::types::{xdns_answer, xdns_answer_key, xdns_node, xdns_node_key};

/// Why the kernel would not answer from its maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// `XDNS_PASS_NO_ZONE`
    NoZone,
    /// `XDNS_PASS_NO_BODY`
    NoBody,
}

/// The chosen body: its key and answer value.
#[derive(Clone, Copy, Debug)]
pub struct Chosen {
    pub key: xdns_answer_key,
    pub answer: xdns_answer,
}

/// Select the body for (lowercased wire `qname`, `qtype`) in generation `gen`: the
/// exact-name fast path (Type(qtype) at the whole name, base length checked), then the
/// closest encloser deepest suffix first (none with fewer labels than the label floor), each
/// lookup only when its presence-filter bit is set, then
/// the engine's order (an exact node marked `XDNS_NODE_NODATA_APEX` takes `Other` from its
/// apex, and so does a DS query at a cut that has no `Type(DS)` body).
pub fn select(maps: &MemMaps, seed: u64, gen: u32, qname: &[u8], qtype: u16) -> Result<Chosen, Miss> {
    let get = |hash: u64, kind: Kind| {
        let (k, t) = kind.abi();
        let key = xdns_answer_key { hash, r#gen, qtype: t, kind: k, _pad: 0 };
        maps.answer(&key).map(|a| Chosen { key, answer: *a })
    };
    let suffixes = suffix_hashes(seed, qname);
    // suffixes[j] has j labels; those below the label floor are not looked up
    let floor = maps.floor as usize;
    if let (Some(&(0, whole)), true) = (suffixes.last(), suffixes.len() > floor) {
        if maps.maybe(r#gen, whole, 1 + u32::from(qtype)) {
            if let Some(c) = get(whole, Kind::Type(qtype)) {
                if usize::from(c.answer.base_len) == qname.len() {
                    return Ok(c);
                }
            }
        }
    }
    // The deepest suffix that may exist, when flagged, answers without its node: the referral
    // at a cut (the cut itself too), NXDOMAIN at an apex, Wildcard at a wildcard parent (the
    // base length guards as in the fast path).
    // (not for DS: at a cut itself that is the parent's NODATA, which needs the node)
    let deepest = suffixes.iter().skip(floor).rev().find(|&&(_, h)| maps.maybe(r#gen, h, FILTER_NODE));
    if let (Some(&(off, hash)), false) = (deepest, qtype == DS) {
        let direct = if maps.maybe(r#gen, hash, FILTER_CUT) {
            // every node may have an Other body; only a cut's, the referral, is not authoritative
            get(hash, Kind::Other).filter(|c| c.answer.flags & 0x0400 == 0)
        } else if off == 0 {
            None
        } else if maps.maybe(r#gen, hash, FILTER_APEX_NX) {
            get(hash, Kind::NxDomain)
        } else if maps.maybe(r#gen, hash, FILTER_WILDCARD) {
            get(hash, Kind::Wildcard(qtype)).or_else(|| get(hash, Kind::WildcardOther))
        } else {
            None
        };
        if let Some(c) = direct.filter(|c| usize::from(c.answer.base_len) == qname.len() - off) {
            return Ok(c);
        }
    }
    let mut ce: Option<(u64, usize, xdns_node)> = None;
    for &(off, hash) in suffixes.iter().skip(floor).rev() {
        if !maps.maybe(r#gen, hash, FILTER_NODE) {
            continue;
        }
        let key = xdns_node_key { hash, r#gen, _pad: 0 };
        if let Some(n) = maps.node(&key) {
            if usize::from(n.name_len) == qname.len() - off {
                ce = Some((hash, qname.len() - off, *n));
                break;
            }
        }
    }
    let (hash, len, node) = ce.ok_or(Miss::NoZone)?;
    let exact = len == qname.len();
    let found = if node.flags & NODE_CUT != 0 {
        // DS at the cut itself without a Type(DS) body (the fast path's miss): the apex's NODATA
        let ds_at_cut = exact && qtype == DS && node.cut_hash == hash;
        get(if ds_at_cut { node.apex_hash } else { node.cut_hash }, Kind::Other)
    } else if exact {
        get(if node.flags & NODE_NODATA_APEX != 0 { node.apex_hash } else { hash }, Kind::Other)
    } else if node.flags & NODE_WILDCARD != 0 {
        get(hash, Kind::Wildcard(qtype)).or_else(|| get(hash, Kind::WildcardOther))
    } else {
        get(node.apex_hash, Kind::NxDomain)
    };
    found.ok_or(Miss::NoBody)
}

const DS: u16 = 43;

/// The answer key the kernel would use for an engine body key, for comparisons.
pub fn key_of(seed: u64, gen: u32, base: &[u8], kind: Kind) -> xdns_answer_key {
    answer_key(seed, gen, base, kind)
}
