/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * word.h - eight-byte loads and stores at any address. clang turns a memcpy of 8 bytes from a
 * pointer it cannot prove aligned into eight byte loads and shifts; x86-64 runs unaligned
 * 64-bit moves at full speed and the verifier checks bounds, not alignment (strict alignment
 * is off there), so these say what is meant: one instruction each.
 */
#ifndef XDNS_WORD_H
#define XDNS_WORD_H

#include <linux/types.h>

static __always_inline __u64 xdns_ld64(const void *p)
{
	return *(const __u64 *)p;
}

static __always_inline void xdns_st64(void *p, __u64 w)
{
	*(__u64 *)p = w;
}

/*
 * The whole sixteen-byte chunks of n bytes (n <= room), each an aligned pair of words from
 * dst, one bounds check of `edge` (src or dst, the packet side) per chunk. Returns 1 when the
 * packet is shorter.
 */
static __always_inline int xdns_copy_chunks(__u8 *dst, const __u8 *src, const __u8 *edge, const void *data_end,
					    __u32 n, __u32 room)
{
	int i;

#pragma unroll
	for (i = 0; i < room / 16; i++) {
		if (i * 16 + 16 > n)
			break;
		if ((const void *)(edge + i * 16 + 16) > data_end)
			return 1;
		xdns_st64(dst + i * 16, xdns_ld64(src + i * 16));
		xdns_st64(dst + i * 16 + 8, xdns_ld64(src + i * 16 + 8));
	}
	return 0;
}

/*
 * Copy n bytes (8 <= n <= room; room a power of two, the size of the non-packet buffer) from
 * src to dst, one side in the packet: `edge` (src or dst, whichever is the packet pointer) is
 * bounds-checked against data_end once per sixteen bytes. Sixteen at a time, the last sixteen
 * ending exactly at n (overlapping the chunk before); under 16, the first eight and the last
 * eight. Nothing is written past n. A check with its address arithmetic cost more than the
 * eight bytes it guarded (docs/perf/2026-11-24-answered-path-instructions.md). Returns 1 when
 * the packet is shorter than that (the caller takes a helper, or passes).
 */
static __always_inline int xdns_copy16(__u8 *dst, const __u8 *src, const __u8 *edge, const void *data_end, __u32 n,
				       __u32 room)
{
	__u32 t;

	if (n < 8 || n > room)
		return 1;
	if (n < 16) {
		if ((const void *)(edge + 8) > data_end)
			return 1;
		xdns_st64(dst, xdns_ld64(src));
		t = (n - 8) & 7;
		if ((const void *)(edge + t + 8) > data_end)
			return 1;
		xdns_st64(dst + t, xdns_ld64(src + t));
		return 0;
	}
	if (xdns_copy_chunks(dst, src, edge, data_end, n, room))
		return 1;
	if (n & 15) {
		t = (n - 16) & (room - 1);
		asm volatile("" : "+r"(t));     /* keep the check: clang may prove it, the verifier not */
		if (t > room - 16)
			return 1;
		if ((const void *)(edge + t + 16) > data_end)
			return 1;
		xdns_st64(dst + t, xdns_ld64(src + t));
		xdns_st64(dst + t + 8, xdns_ld64(src + t + 8));
	}
	return 0;
}

/*
 * Copy n bytes (8 <= n < room; room a power of two, the size of dst) from the packet at src
 * into dst (not in the packet) as whole words at multiples of 8 from dst: sixteen bytes per
 * bounds check, then an aligned word if n & 8, then the last n & 7 bytes, read as the eight
 * bytes ending at n and shifted down, so the bytes of dst from n to the next multiple of 8
 * become zero. Every later aligned eight-byte load of dst is then one earlier store, which the
 * CPU forwards while the stores are still in flight; xdns_copy16's overlapping last chunk
 * left stores that straddle those loads, and a load that overlaps two stores waits for both
 * to reach the cache. Returns 1 when the packet is shorter than that.
 */
static __always_inline int xdns_copy_words(__u8 *dst, const __u8 *src, const void *data_end, __u32 n, __u32 room)
{
	__u32 t, c;

	if (n < 8 || n >= room)
		return 1;
	if (xdns_copy_chunks(dst, src, src, data_end, n, room))
		return 1;
	t = n & (room - 16);
	if (n & 8) {
		if ((const void *)(src + t + 8) > data_end)
			return 1;
		xdns_st64(dst + t, xdns_ld64(src + t));
		t += 8;
	}
	c = n & 7;
	if (c) {
		__u32 e = (n - 8) & (room - 1);

		if (e > room - 8 || t > room - 8)
			return 1;
		if ((const void *)(src + e + 8) > data_end)
			return 1;
		xdns_st64(dst + t, xdns_ld64(src + e) >> ((8 - c) * 8));
	}
	return 0;
}

/*
 * Are the first n bytes at a and at b equal (n <= room, both buffers at least `room` bytes, a
 * constant multiple of 8)? Whole eight-byte words, then the last n & 7 bytes masked, so
 * whatever follows n in either buffer does not count. Aligned loads where both buffers are:
 * the memo and reply memo compare sc->walk.name, as xdns_copy_words stored it, with their slots.
 */
static __always_inline int xdns_same_bytes(const __u8 *a, const __u8 *b, __u32 n, const __u32 room)
{
	__u64 diff = 0;
	__u32 e;
	int i;

#pragma clang loop unroll(full)
	for (i = 0; i < room / 8; i++)
		if ((__u32)i * 8 + 8 <= n)
			diff |= xdns_ld64(&a[i * 8]) ^ xdns_ld64(&b[i * 8]);
	if (n & 7) {
		e = n & 0xf8;
		if (e > room - 8)
			return 0;
		diff |= (xdns_ld64(&a[e]) ^ xdns_ld64(&b[e])) & ((1ULL << ((n & 7) * 8)) - 1);
	}
	return diff == 0;
}

#endif /* XDNS_WORD_H */
