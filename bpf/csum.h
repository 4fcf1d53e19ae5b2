/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * csum.h - Internet checksum pieces. Sums are kept unfolded in a u64 as big-endian 16-bit words:
 * a byte at an even offset is the high half of a word, at an odd offset the low half.
 */
#ifndef XDNS_CSUM_H
#define XDNS_CSUM_H

#include <linux/types.h>

/* Contribution of byte `b` at offset `pos` (parity is what matters). */
static __always_inline __u64 xdns_csum_byte(__u32 pos, __u8 b)
{
	return (pos & 1) ? (__u64)b : ((__u64)b << 8);
}

/*
 * Fold a sum below 2^32 to 16 bits (not complemented): the first step leaves at most
 * 0xffff + 0xffff, the second at most 0xfffe + 1.
 */
static __always_inline __u16 xdns_csum_fold32(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* Fold an unfolded sum to 16 bits (not complemented): two 32-bit steps leave it below 2^32. */
static __always_inline __u16 xdns_csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	return xdns_csum_fold32(s);
}

/* A folded 16-bit sum computed at an even offset, moved to an odd one: swap its bytes. */
static __always_inline __u16 xdns_csum_swap(__u16 s)
{
	return (__u16)((s << 8) | (s >> 8));
}

/*
 * Sum of `n` (constant) 8-byte words at `p`, which sits at an even offset: little-endian words
 * hold the big-endian 16-bit words byte swapped, so the folded lane sum is swapped back.
 */
static __always_inline __u64 xdns_csum_words(const void *p, __u32 n)
{
	__u64 s = 0, w;
	__u32 i;

#pragma unroll
	for (i = 0; i < n; i++) {
		w = *(const __u64 *)((const __u8 *)p + i * 8);
		s += (w & 0xffffffff) + (w >> 32);
	}
	return xdns_csum_swap(xdns_csum_fold(s));
}

/*
 * Checksum change of big-endian fields (of any width) that grew by `d_even` in total at even
 * offsets and by `d_odd` at odd ones, none of them wrapping: a field's 16-bit words sum to its
 * value modulo 0xffff (where 2^16 is 1), and a field at an odd offset straddles the words,
 * which multiplies that by 2^8 (a byte swap). So a pass that adds the same amount to many
 * fields only counts them by parity.
 */
static __always_inline __u64 xdns_csum_grown(__u64 d_even, __u64 d_odd)
{
	return d_even + (d_odd << 8);
}

/* The same for fields that shrank: the one's complement of that growth. */
static __always_inline __u64 xdns_csum_shrunk(__u64 d_even, __u64 d_odd)
{
	return 0xffff - xdns_csum_fold(d_even + (d_odd << 8));
}

#endif /* XDNS_CSUM_H */
