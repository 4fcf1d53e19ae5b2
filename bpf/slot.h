/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * slot.h - per-CPU slots in sets of two ways, as the question memo (memo.h), the resolver's
 * reply memo (reply.h) and the in-path cache's reply memo (inpath.h) keep them: a query's
 * words, admission at the second sighting, and the reply slots (struct xdns_reply_memo)
 * compared and picked. No maps here: each program has its own run of slots per CPU.
 */
#ifndef XDNS_SLOT_H
#define XDNS_SLOT_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "xdns_abi.h"
#include "word.h"

/* Word `i` of a question, only the bytes below `n` (little-endian: the low bytes). */
static __always_inline __u64 xdns_memo_word(const __u8 *name, int i, __u32 n)
{
	__u64 w = xdns_ld64(&name[i * 8]);
	__u32 left = n - (__u32)i * 8;

	if (left < 8)
		w &= (1ULL << (left * 8)) - 1;
	return w;
}

/*
 * A set's sightings (`seen` of its two ways, the newer first): is `h` (a key's low half) in
 * neither? Then it is a first sighting: note it, dropping the older of the two, and return 1;
 * else 0 (seen before: keep it). The question memo and the reply memos admit so.
 */
static __always_inline int xdns_first_sighting(__u32 *seen0, __u32 *seen1, __u32 h)
{
	if (*seen0 == h || *seen1 == h)
		return 0;
	*seen1 = *seen0;
	*seen0 = h;
	return 1;
}

/* The first of the two reply slots of key h's set, in this CPU's run of XDNS_REPLY_SLOTS. */
#define XDNS_REPLY_SET_SHIFT (64 - __builtin_ctz(XDNS_REPLY_SLOTS / 2))
_Static_assert((XDNS_REPLY_SLOTS & (XDNS_REPLY_SLOTS - 1)) == 0, "reply sets are indexed by hash bits");
_Static_assert(XDNS_REPLY_MAX_Q % 8 == 0 && XDNS_REPLY_MAX_Q < 256, "q[] is compared in words");

static __always_inline __u32 xdns_reply_set(__u64 h)
{
	return bpf_get_smp_processor_id() * XDNS_REPLY_SLOTS + ((__u32)(h >> XDNS_REPLY_SET_SHIFT) << 1);
}

/*
 * Is reply slot t's query this one: its flags and ARCOUNT, and its n bytes after the header
 * (q, n <= XDNS_REPLY_MAX_Q, a buffer of at least XDNS_REPLY_MAX_Q bytes)? (The caller has
 * matched the hash.)
 */
static __always_inline int xdns_reply_slot_is(const struct xdns_reply_memo *t, const __u8 *q, __u32 n, __u16 qflags,
					      __u16 qar)
{
	return t->qn == n && t->qflags == qflags && t->qar == qar && xdns_same_bytes(q, t->q, n, XDNS_REPLY_MAX_Q);
}

/*
 * The way of set (t0, t1) that keeps this query's reply (key h): the one holding this query
 * already (a new second, a new write of the entry); else, at its second sighting, an empty
 * one, else the one not holding another query of the same hash (one name asked with and
 * without EDNS, say, whose first bytes are the same), else the two in turn (`kept`: the
 * caller's count of replies kept). NULL at a first sighting: not kept.
 */
static __always_inline struct xdns_reply_memo *xdns_reply_slot_pick(struct xdns_reply_memo *t0, struct xdns_reply_memo *t1,
								    __u64 h, const __u8 *q, __u32 n, __u16 qflags,
								    __u16 qar, __u64 kept)
{
	if (t0->hash == h && xdns_reply_slot_is(t0, q, n, qflags, qar))
		return t0;
	if (t1->hash == h && xdns_reply_slot_is(t1, q, n, qflags, qar))
		return t1;
	if (xdns_first_sighting(&t0->seen, &t1->seen, (__u32)h))
		return NULL;
	if (t0->hash == 0)
		return t0;
	if (t1->hash == 0)
		return t1;
	if (t0->hash == h || t1->hash == h)
		return t0->hash == h ? t1 : t0;
	return (kept & 1) ? t1 : t0;
}

/* Write slot t's key part: the query's n bytes after the header (zero padded), flags, ARCOUNT. */
static __always_inline void xdns_reply_slot_key(struct xdns_reply_memo *t, const __u8 *q, __u32 n, __u16 qflags,
						__u16 qar)
{
	int i;

#pragma clang loop unroll(full)
	for (i = 0; i < XDNS_REPLY_MAX_Q / 8; i++)
		xdns_st64(&t->q[i * 8], (__u32)i * 8 < n ? xdns_memo_word(q, i, n) : 0);
	t->qn = n;
	t->qflags = qflags;
	t->qar = qar;
}

#endif /* XDNS_SLOT_H */
