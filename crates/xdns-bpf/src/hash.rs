//! The seeded name hash of `bpf/hash.h`.
//!
//! The name is absorbed from its last byte to its first, so the state after the length octet
//! of a label is the hash of the suffix that starts there; `fin` turns a state into a key.

const MUL: u64 = 0x0000_0100_0000_01b3;

#[inline]
fn step(s: u64, b: u8) -> u64 {
    let s = (s ^ u64::from(b)).wrapping_mul(MUL);
    s ^ (s >> 29)
}

#[inline]
fn fin(mut s: u64) -> u64 {
    s ^= s >> 33;
    s = s.wrapping_mul(0xff51_afd7_ed55_8ccd);
    s ^= s >> 33;
    s = s.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    s ^ (s >> 33)
}

/// Hash of one lowercased wire name (`\x03www\x07example\x03com\x00`).
pub fn name_hash(seed: u64, name: &[u8]) -> u64 {
    fin(name.iter().rev().fold(seed, |s, &b| step(s, b)))
}

/// Hash of every suffix that starts a label, from the root up: `(offset, hash)`.
/// The name must be a valid uncompressed wire name.
pub fn suffix_hashes(seed: u64, name: &[u8]) -> Vec<(usize, u64)> {
    let mut starts = Vec::new();
    let mut i = 0usize;
    while i < name.len() {
        starts.push(i);
        i += 1 + name[i] as usize;
    }
    let mut out = Vec::with_capacity(starts.len());
    let mut s = seed;
    let mut next = starts.len();
    for i in (0..name.len()).rev() {
        s = step(s, name[i]);
        if next > 0 && starts[next - 1] == i {
            next -= 1;
            out.push((i, fin(s)));
        }
    }
    out
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
}
