/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hash.h - the seeded name hash, mirrored by crates/xdns-bpf/src/hash.rs.
 *
 * A name is hashed byte by byte from its LAST byte (the root) towards its first, so the state
 * after consuming the byte at a label's length octet is the hash of that suffix: one pass gives
 * the hash of every suffix. Shared test vectors: crates/xdns-bpf/tests/hash_vectors.txt.
 */
#ifndef XDNS_HASH_H
#define XDNS_HASH_H

#include <linux/types.h>

#define XDNS_HASH_MUL 0x100000001b3ULL

/* Absorb one (already lowercased) byte. */
static __always_inline __u64 xdns_hash_step(__u64 s, __u8 b)
{
	s ^= b;
	s *= XDNS_HASH_MUL;
	s ^= s >> 29;
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

#endif /* XDNS_HASH_H */
