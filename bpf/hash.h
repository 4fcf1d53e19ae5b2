/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hash.h - the seeded name hash, mirrored by crates/xdns-bpf/src/hash.rs.
 *
 * Two levels, so the label walk (first label first) and the suffix chain (root first) each
 * read a name once, eight bytes at a time:
 *   label hash  h(L) = words of (length octet, label bytes) as little-endian u64, the last
 *                      zero padded, absorbed in order into `seed`;
 *   suffix hash H    = the label hashes of the suffix absorbed root first into `seed ^ SUFFIX`,
 *                      then finalised: every suffix's hash falls out of one pass.
 * Labels are lowercased before hashing. Shared test vectors: crates/xdns-bpf/tests/hash_vectors.txt.
 */
#ifndef XDNS_HASH_H
#define XDNS_HASH_H

#include <linux/types.h>

#define XDNS_HASH_MUL 0x9e3779b97f4a7c15ULL
#define XDNS_HASH_SUFFIX 0x5bd1e9955bd1e995ULL

/* Absorb one 64-bit word (a label word, or a label hash). */
static __always_inline __u64 xdns_hash_step(__u64 s, __u64 w)
{
	s ^= w;
	s *= XDNS_HASH_MUL;
	s ^= s >> 32;
	return s;
}

/* Final avalanche: the fmix64 step of MurmurHash3 (public-domain algorithm). */
static __always_inline __u64 xdns_hash_fin(__u64 s)
{
	s ^= s >> 33;
	s *= 0xff51afd7ed558ccdULL;
	s ^= s >> 33;
	s *= 0xc4ceb9fe1a85ec53ULL;
	s ^= s >> 33;
	return s;
}

/*
 * Presence filter position of a key (lookup.h): bit (x & 63) of word (x >> 6) of the
 * generation's half, x = hash + tag * MUL. Tags: XDNS_FILTER_NODE for a node, 1 + qtype for a
 * Type(qtype) answer, XDNS_FILTER_APEX_NX and XDNS_FILTER_WILDCARD for the node kinds below.
 */
#define XDNS_FILTER_NODE 0
/* A node whose deepest-encloser answer needs no node: an apex (no wildcard child, not at a
 * cut): NXDOMAIN at its own hash; a node with a wildcard child (not at a cut): Wildcard at
 * its own hash. Set beside XDNS_FILTER_NODE (lookup.h). */
#define XDNS_FILTER_APEX_NX 0x10001
#define XDNS_FILTER_WILDCARD 0x10002
/* A zone cut itself (delegation point): the referral is its Other body, at its own hash, for
 * the cut and every name below it that has no node of its own. */
#define XDNS_FILTER_CUT 0x10003
static __always_inline __u64 xdns_filter_pos(__u64 hash, __u32 tag)
{
	return hash + (__u64)tag * XDNS_HASH_MUL;
}

/*
 * Answer-table position of a key (xdns_abi.h): the bucket is the result masked to the half.
 * The name hash is final (fmix64), so its high half is spread; the kind and type move it
 * elsewhere for each body of the same name.
 */
static __always_inline __u32 xdns_table_pos(__u64 hash, __u32 kind, __u32 qtype)
{
	return (__u32)((hash ^ ((__u64)(kind << 16 | qtype) * XDNS_HASH_MUL)) >> 32);
}

/* Answer-table bucket of a key: its position scaled to the bucket count (any count, not only a
 * power of two: the index is sized to the zone), the high half of a 32 x 32-bit product. */
static __always_inline __u32 xdns_table_bucket(__u64 hash, __u32 kind, __u32 qtype, __u32 buckets)
{
	return (__u32)(((__u64)xdns_table_pos(hash, kind, qtype) * buckets) >> 32);
}

/* Cache bucket of a key (xdns_abi.h): like xdns_table_pos, with the DO bit beside the type. */
static __always_inline __u32 xdns_cache_pos(__u64 hash, __u32 qtype, __u32 do_bit)
{
	return (__u32)((hash ^ ((__u64)((do_bit & 1) << 16 | qtype) * XDNS_HASH_MUL)) >> 32);
}

/*
 * Presence-filter position of a guard prefix (guard.h, xdns_guard_filter): its masked address
 * words (xdns_guard_key.addr) and meta = length | family << 8 | parity << 16. The word is
 * (x >> 32) masked to the half, the bit x & 63. Two independent multiplies and a fold, not
 * the name hash's chain: it runs once per prefix length on every packet, and a false
 * positive costs only the hash lookup it would have made anyway. Seeded, so no outsider can
 * aim at a bit.
 */
static __always_inline __u64 xdns_guard_pos(__u64 seed, __u64 a0, __u64 a1, __u32 meta)
{
	__u64 x = (a0 ^ seed) * XDNS_HASH_MUL ^ (a1 + meta) * 0xc2b2ae3d27d4eb4fULL;

	return x ^ (x >> 29);
}

/*
 * ASCII lowercase of eight bytes at once: a byte 'A'..'Z' gains 0x20, every other byte (length
 * octets are <= 63, bytes >= 0x80 included) is kept. Per byte, with x7 its low seven bits:
 * x7 + 0x3f carries into bit 7 iff x7 >= 'A', x7 + 0x25 iff x7 > 'Z'; no carry crosses bytes.
 */
static __always_inline __u64 xdns_lower8(__u64 w)
{
	__u64 hi = 0x8080808080808080ULL, x7 = w & ~hi;
	__u64 ge_a = x7 + 0x3f3f3f3f3f3f3f3fULL, gt_z = x7 + 0x2525252525252525ULL;

	return w | (((ge_a & ~gt_z & ~w) & hi) >> 2);
}

#endif /* XDNS_HASH_H */
