//! The seeded name hash of `bpf/hash.h`.
//!
//! Two levels: each label (its length octet and bytes, read as little-endian 64-bit words, the
//! last zero padded) is hashed on its own into `seed`; the label hashes of a suffix are then
//! absorbed root first into `seed ^ SUFFIX` and finalised. The kernel hashes labels as its
//! label walk meets them (first label first) and chains them root first afterwards, so every
//! suffix's hash costs one step more than the next shorter one's.

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;
const SUFFIX: u64 = 0x5bd1_e995_5bd1_e995;

#[inline]
fn step(s: u64, w: u64) -> u64 {
    let s = (s ^ w).wrapping_mul(MUL);
    s ^ (s >> 32)
}

#[inline]
fn fin(mut s: u64) -> u64 {
    s ^= s >> 33;
    s = s.wrapping_mul(0xff51_afd7_ed55_8ccd);
    s ^= s >> 33;
    s = s.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    s ^ (s >> 33)
}

/// Hash of one label, `label` = its length octet and bytes (already lowercased).
fn label_hash(seed: u64, label: &[u8]) -> u64 {
    label.chunks(8).fold(seed, |h, c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        step(h, u64::from_le_bytes(w))
    })
}

/// `(offset, label hash)` of every label of a valid uncompressed wire name, first label first.
fn labels(seed: u64, name: &[u8]) -> Vec<(usize, u64)> {
    let mut out = Vec::with_capacity(8);
    let mut i = 0usize;
    while i < name.len() {
        let end = (i + 1 + name[i] as usize).min(name.len());
        out.push((i, label_hash(seed, &name[i..end])));
        i = end;
    }
    out
}

/// Presence-filter tag of a node (`XDNS_FILTER_NODE`); a `Type(qtype)` answer's is `1 + qtype`.
pub const FILTER_NODE: u32 = 0;
/// Tag of an apex without a wildcard child, not at a cut: NXDOMAIN below it is its own
/// `NxDomain` body (`XDNS_FILTER_APEX_NX`).
pub const FILTER_APEX_NX: u32 = 0x10001;
/// Tag of a node with a wildcard child, not at a cut (`XDNS_FILTER_WILDCARD`).
pub const FILTER_WILDCARD: u32 = 0x10002;
/// Tag of a zone cut itself: its referral (`Other`) answers for it and the names below it
/// (`XDNS_FILTER_CUT`).
pub const FILTER_CUT: u32 = 0x10003;

/// Where the presence filter keeps the bit of key (`hash`, `tag`) (`xdns_filter_pos`, hash.h):
/// bit `x & 63` of word `(x >> 6) & mask` of the generation's half.
pub fn filter_pos(hash: u64, tag: u32) -> u64 {
    hash.wrapping_add(u64::from(tag).wrapping_mul(MUL))
}

/// Answer-table position of key (`hash`, `kind`, `qtype`) (`xdns_table_pos`, hash.h): its
/// bucket is this masked to the half.
pub fn table_pos(hash: u64, kind: u8, qtype: u16) -> u32 {
    let k = u64::from(kind) << 16 | u64::from(qtype);
    ((hash ^ k.wrapping_mul(MUL)) >> 32) as u32
}

/// Answer-table bucket of key (`hash`, `kind`, `qtype`) among `buckets` (`xdns_table_bucket`,
/// hash.h): its position scaled to the count, the high half of a 32 x 32-bit product.
pub fn table_bucket(hash: u64, kind: u8, qtype: u16, buckets: u32) -> u32 {
    ((u64::from(table_pos(hash, kind, qtype)) * u64::from(buckets)) >> 32) as u32
}

/// Resolver-cache bucket of key (`hash`, `qtype`, DO) (`xdns_cache_pos`, hash.h), before the
/// mask.
pub fn cache_pos(hash: u64, qtype: u16, dnssec_ok: bool) -> u32 {
    let k = u64::from(dnssec_ok) << 16 | u64::from(qtype);
    ((hash ^ k.wrapping_mul(MUL)) >> 32) as u32
}

/// Bit of a bucket's first entry's `idx` (`XDNS_TABLE_SPILLED`): a key of this bucket is not
/// in the table, so a miss there must look in the hash map.
pub const TABLE_SPILLED: u32 = 0x8000_0000;

/// The pseudo kind of a node in the answer table (`XDNS_TABLE_NODE`, xdns_abi.h): its key is
/// (name hash, this kind, qtype 0, gen), its record a `struct xdns_node`.
pub const TABLE_NODE: u8 = 0x7f;

/// The `meta` word of a table entry (`XDNS_TABLE_META`, xdns_abi.h); never 0 (an empty entry).
pub fn table_meta(kind: u8, qtype: u16, gen: u32) -> u32 {
    u32::from(qtype) | u32::from(kind) << 16 | (0x80 | (gen & 0x7f)) << 24
}

/// Hash of one lowercased wire name (`\x03www\x07example\x03com\x00`).
pub fn name_hash(seed: u64, name: &[u8]) -> u64 {
    // the label hashes on the stack (a name of at most 255 bytes has at most 128 labels): no
    // allocation, as the fill hashes every name two to four times
    let mut hashes = [0u64; 128];
    let (mut n, mut i) = (0usize, 0usize);
    while i < name.len() {
        if n == hashes.len() {
            // longer than any valid name: the general path
            return fin(labels(seed, name).iter().rev().fold(seed ^ SUFFIX, |s, &(_, h)| step(s, h)));
        }
        let end = (i + 1 + name[i] as usize).min(name.len());
        hashes[n] = label_hash(seed, &name[i..end]);
        n += 1;
        i = end;
    }
    fin(hashes[..n].iter().rev().fold(seed ^ SUFFIX, |s, &h| step(s, h)))
}

/// Presence-filter position of a guard prefix (`xdns_guard_pos` in `bpf/hash.h`): its masked
/// address words, and `meta` = length | family << 8 | generation parity << 16.
pub fn guard_pos(seed: u64, a0: u64, a1: u64, meta: u32) -> u64 {
    let x = (a0 ^ seed).wrapping_mul(MUL) ^ a1.wrapping_add(u64::from(meta)).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    x ^ (x >> 29)
}

/// Multipliers of the memo hash's three words (`XDNS_MEMO_MUL` in `bpf/memo.h`).
const MEMO_MUL: [u64; 3] = [MUL, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9];

/// Hash of a question in the XDP memo (`bpf/memo.h`) under data generation `gen`: `question`
/// = the bytes after the DNS header (at most 255). Its first 24 bytes enter, each word mixed
/// with the seeded start and multiplied apart, with no final avalanche: the set is taken from
/// the top bits (`memo_set`).
pub fn memo_hash(seed: u64, gen: u32, question: &[u8]) -> u64 {
    let s = step(seed ^ 0x6d65_6d6f, u64::from(gen));
    let h = question.chunks(8).take(3).zip(MEMO_MUL).fold(s, |h, (c, m)| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h ^ (u64::from_le_bytes(w) ^ s).wrapping_mul(m)
    });
    match h {
        0 => 1,
        h => h,
    }
}

/// The memo set (of `sets`, a power of two) of a question hash: its top bits, as
/// `xdns_memo_set` takes them.
pub fn memo_set(hash: u64, sets: u32) -> u32 {
    debug_assert!(sets.is_power_of_two() && sets >= 2);
    (hash >> (64 - sets.trailing_zeros())) as u32
}

/// Hash of every suffix that starts a label, from the root up: `(offset, hash)`.
/// The name must be a valid uncompressed wire name.
pub fn suffix_hashes(seed: u64, name: &[u8]) -> Vec<(usize, u64)> {
    let mut s = seed ^ SUFFIX;
    labels(seed, name)
        .iter()
        .rev()
        .map(|&(off, h)| {
            s = step(s, h);
            (off, fin(s))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared vector table (also the expected values for the C side, which the kernel
    /// fixtures exercise: every kernel answer needs the C hash to equal this one).
    #[test]
    fn vectors() {
        let table = include_str!("../tests/hash_vectors.txt");
        let mut n = 0;
        for line in table.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let seed = u64::from_str_radix(f[0], 16).unwrap();
            let name: Vec<u8> = (0..f[1].len() / 2)
                .map(|i| u8::from_str_radix(&f[1][2 * i..2 * i + 2], 16).unwrap())
                .collect();
            let want = u64::from_str_radix(f[2], 16).unwrap();
            assert_eq!(name_hash(seed, &name), want, "{line}");
            n += 1;
        }
        assert!(n >= 8);
    }

    #[test]
    fn suffixes_equal_whole_name_hashes() {
        let name = b"\x03www\x07example\x03com\x00";
        let sh = suffix_hashes(7, name);
        assert_eq!(sh.len(), 4);
        for (off, h) in sh {
            assert_eq!(h, name_hash(7, &name[off..]));
        }
    }

    /// The stack buffer of `name_hash` holds 128 label hashes: a name of the most labels a
    /// valid name has (127 and the root), and one longer (not a valid name, but hashed all
    /// the same), give the hash of the general path.
    #[test]
    fn most_labels_hash_like_the_general_path() {
        for labels_n in [127usize, 128, 129, 300] {
            let mut name: Vec<u8> = (0..labels_n - 1).flat_map(|i| [1u8, b'a' + (i % 26) as u8]).collect();
            name.push(0);
            let general = fin(labels(9, &name).iter().rev().fold(9 ^ SUFFIX, |s, &(_, h)| step(s, h)));
            assert_eq!(name_hash(9, &name), general, "{labels_n} labels");
        }
    }
}
