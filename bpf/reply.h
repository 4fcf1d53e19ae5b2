/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * reply.h - the reply memo: a cache hit's whole reply, kept per CPU for the exact query that
 * got it, and sent again for the same query without the cache stage's work.
 *
 * The cache stage (cache.h) answers a query from its entry: it checks the entry's key against
 * the question (type, DO bit, the name letter case aside), parses the OPT record, picks what
 * fits, copies the body and ages every TTL by the whole seconds since the entry was stored.
 * For one query, byte for byte, all of that gives the same reply until one of three things
 * happens: the TTLs age by one more second, the entry is rewritten (its tag changes: a
 * refresh, an eviction, a flush), or the entry reaches its expiry or prefetch time. So the
 * stage's reply after the question (body and OPT), its header fields and its checksum are
 * kept here with those bounds (`until_ns`, `tag`), keyed by everything in the query but its ID:
 * flags, ARCOUNT, length and every byte after the header, compared in full before use. A hit
 * checks the client against the allow list (the key does not hold the address), the clock
 * and the entry's tag, then writes the kept bytes, the header and the checksums: what the
 * stage would have sent at that moment (crates/xdns-bpf/tests/cache.rs compares the two byte
 * for byte).
 *
 * Kept for a query whose entry a cache hint found (memo.h), so never at its first hit on a
 * CPU, and only at the second such hit in its set: a set remembers its last two first
 * sightings (`seen`), as the question memo does. Queries that take turns in their set faster
 * than that, because far more distinct queries hit the cache than there are slots, are not
 * kept: each would evict another before being asked again, and keeping (a helper call and
 * four lines written) cost more than the memo gave (docs/perf/2026-11-24-reply-memo.md). The slots are per CPU (a
 * run of XDNS_REPLY_SLOTS for each, in sets of two ways like xdns_memo), so no slot is ever
 * read half written. The slot is found by the memo's key of the query's first bytes and the
 * generation (a reload leaves every older slot unmatched, as it does the hints).
 */
#ifndef XDNS_REPLY_H
#define XDNS_REPLY_H

#include "stage.h"
#include "cache.h"
#include "slot.h"	/* the slots, shared with the in-path cache's reply memo */

/*
 * Is slot t's query this packet's: its flags and ARCOUNT, and its n bytes after the header
 * (sc->walk.name, n <= XDNS_REPLY_MAX_Q)? (The caller has matched the hash.)
 */
static __always_inline int xdns_reply_is_query(const struct xdns_reply_memo *t, const struct xdns_scratch *sc,
					       __u32 n, __u16 qflags, __u16 qar)
{
	return xdns_reply_slot_is(t, sc->walk.name, n, qflags, qar);
}

/* The tag of cache entry `ref` as it is now (0: none, or being written). */
static __always_inline __u64 xdns_reply_entry_tag(__u32 ref)
{
	struct xdns_cache_ref c = {};

	xdns_cache_value(ref, &c);
	if (c.s)
		return *(volatile __u64 *)&c.s->m.tag;
	if (c.m)
		return *(volatile __u64 *)&c.m->m.tag;
	if (c.l)
		return *(volatile __u64 *)&c.l->m.tag;
	return 0;
}

/*
 * A resolver program's first step for a query (header parsed into q and arcount, the bytes
 * after the header in sc->walk.name): answer it from the reply memo. Returns XDNS_CACHE_ANSWERED
 * with the frame rewritten; XDNS_CONTINUE to go on (no slot, or it may not be used now: the
 * frame is untouched, and the rest of the program decides as if this step were not there);
 * else a verdict for a frame it could not answer. Leaves the memo key in sc->memo.hash (for
 * the hints) and the query's flags and ARCOUNT for xdns_reply_learn.
 */
static __always_inline enum xdns_verdict xdns_reply_answer(struct xdp_md *ctx, struct xdns_scratch *sc,
							    struct xdns_pkt *pkt, const struct xdns_query *q,
							    __u16 arcount, __u32 gen)
{
	struct xdns_reply_memo *t;
	struct xdns_reply r = {};
	void *data, *data_end;
	__u32 n = sc->walk.avail, set, body_at, frame;
	__u8 *hdr, *dst;
	long grow;
	int moved;
	__u64 h;

	h = xdns_memo_key(sc, n, gen);
	sc->reply.qflags = q->flags;
	sc->reply.qar = arcount;
	/* with RRL or cookies on (rrl.h) the cache stage answers, through the gate */
	if (xdns_rrl_gated())
		return XDNS_CONTINUE;
	if (!h || n < 8 || n > XDNS_REPLY_MAX_Q || n + XDNS_HDR_LEN != pkt->dns_len)
		return XDNS_CONTINUE;
	set = xdns_reply_set(h);
	t = bpf_map_lookup_elem(&xdns_replies, &set);
	if (!t)
		return XDNS_CONTINUE;
	/* the two ways may hold two queries of one hash (xdns_reply_learn) */
	if (t->hash != h || !xdns_reply_is_query(t, sc, n, q->flags, arcount)) {
		set++;
		t = bpf_map_lookup_elem(&xdns_replies, &set);
		if (!t || t->hash != h || !xdns_reply_is_query(t, sc, n, q->flags, arcount))
			return XDNS_CONTINUE;
	}
	if (xdns_cache_now(sc) >= t->until_ns || !xdns_cache_allowed(ctx, pkt))
		return XDNS_CONTINUE;
	if (t->tag != xdns_reply_entry_tag(t->ref))
		return XDNS_CONTINUE;   /* rewritten since (a tag is never reused, never 0 once kept) */

	body_at = t->body_at;
	if (body_at > XDNS_HDR_LEN + XDNS_REPLY_MAX_Q || t->an < 8 || t->an > XDNS_REPLY_MAX_A)
		return XDNS_CONTINUE;   /* never kept so (xdns_reply_learn): the frame stays whole */
	r.dns_out = body_at + t->an;
	r.sum = t->sum + bpf_ntohs(q->id);
	frame = ctx->data_end - ctx->data;
	grow = (long)(pkt->dns_off + r.dns_out) - (long)frame;
	moved = xdns_resize(ctx, pkt->dns_off + body_at, grow);
	if (moved)
		return moved > 0 ? XDNS_PASS_TAIL : XDNS_DROP_REWRITE;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (pkt->dns_off > XDNS_DNS_OFF_MAX || body_at > XDNS_HDR_LEN + XDNS_REPLY_MAX_Q)
		return XDNS_DROP_REWRITE;       /* the verifier's bounds: checked above */
	hdr = data + pkt->dns_off;
	dst = hdr + body_at;
	if (xdns_copy16(dst, t->a, dst, data_end, t->an, XDNS_REPLY_MAX_A))
		return XDNS_DROP_REWRITE;
	if ((void *)(hdr + XDNS_HDR_LEN) > data_end)
		return XDNS_DROP_REWRITE;
	/* the ID is the query's, in place; then flags and the four counts */
	*(__u16 *)(hdr + 2) = t->rflags;
	xdns_st64(hdr + 4, t->counts);
	if (xdns_strip_ip_options(ctx, pkt))
		return XDNS_DROP_REWRITE;
	if (xdns_put_l2_l4(ctx, pkt, &r))
		return XDNS_DROP_REWRITE;
	sc->reply_hits++;
	return XDNS_CACHE_ANSWERED;
}

/*
 * After the cache stage answered this packet's query through a hint: keep its reply (the
 * frame as it is now: the DNS message at `dns_off`, the question ending at DNS offset
 * `body_at`; `sum` its checksum without the ID) for the query, with the entry, tag and time
 * bound the stage left in sc->reply. Takes the way that holds this query already; else, at
 * a second sighting, an empty one, else the one not holding another query of the same hash
 * (one name asked with and without EDNS, say, whose first 24 bytes are the same), else the two
 * in turn. A global function: the verifier checks it once, alone.
 */
__attribute__((noinline)) int xdns_reply_learn(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 dns_off,
					       __u32 body_at, __u64 sum)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_reply_memo *t, *t0, *t1;
	__u32 n, an, set, frame;
	__u64 h, len, counts;
	__u16 rflags;
	__u8 *hdr;

	if (!sc)
		return 0;
	h = sc->memo.hash;
	n = sc->walk.avail;
	frame = data_end - data;
	if (h == 0 || n < 8 || n > XDNS_REPLY_MAX_Q || dns_off > XDNS_DNS_OFF_MAX || body_at > XDNS_HDR_LEN + n ||
	    frame < dns_off + body_at + 8 || frame > dns_off + body_at + XDNS_REPLY_MAX_A)
		return 0;
	an = frame - dns_off - body_at;
	len = dns_off;
	asm volatile("%0 &= 0xff" : "+r"(len)); /* the bound the verifier sees (as below) */
	hdr = data + len;
	if ((void *)(hdr + XDNS_HDR_LEN) > data_end)
		return 0;
	rflags = *(__u16 *)(hdr + 2);   /* read before the helper call, which voids packet pointers */
	counts = xdns_ld64(hdr + 4);
	set = xdns_reply_set(h);
	t0 = bpf_map_lookup_elem(&xdns_replies, &set);
	set++;
	t1 = bpf_map_lookup_elem(&xdns_replies, &set);
	if (!t0 || !t1)
		return 0;
	t = xdns_reply_slot_pick(t0, t1, h, sc->walk.name, n, sc->reply.qflags, sc->reply.qar, sc->reply_kept);
	if (!t)
		return 0;       /* kept at its second sighting */
	t->hash = 0;            /* not whole until the end (nothing else runs here meanwhile) */
	len = an;
	asm volatile("%0 &= 0xff" : "+r"(len)); /* one register, checked as the helper gets it */
	if (len < 8 || len > XDNS_REPLY_MAX_A || bpf_xdp_load_bytes(ctx, dns_off + body_at, t->a, len))
		return 0;
	t->rflags = rflags;
	t->counts = counts;
	xdns_reply_slot_key(t, sc->walk.name, n, sc->reply.qflags, sc->reply.qar);
	t->body_at = body_at;
	t->an = an;
	t->sum = sum;
	t->ref = sc->reply.ref;
	t->tag = sc->reply.tag;
	t->until_ns = sc->reply.until;
	sc->reply_kept++;
	t->hash = h;
	return 0;
}

#endif /* XDNS_REPLY_H */
