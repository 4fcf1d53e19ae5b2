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

#endif /* XDNS_WORD_H */
