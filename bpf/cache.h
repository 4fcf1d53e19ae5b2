/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * cache.h - the resolver's answer cache: a name under no served zone, asked with RD=1 and CD=0
 * by a client in `xdns_allow`, is answered from `xdns_cache_{s,m,l}` while the entry lives:
 *   header (client's ID, QR, RD, RA, RCODE) | question (as sent) | body (TTLs aged) | OPT
 * exactly as xdns_wire::cache::replay builds it in userspace. Everything else passes.
 *
 * The key holds the full-name hash (a by-product of the encloser walk), the type, the DO bit
 * and the name length; the value holds them all, the name itself included, compared before
 * use, so a hash collision or an entry being rewritten is a miss, never a wrong answer.
 * Bodies are compiled against the question name: no fixups (delta is 0).
 */
#ifndef XDNS_CACHE_H
#define XDNS_CACHE_H

#include "stage.h"
#include "answer.h"
#include "memo.h"

#define XDNS_F_RA 0x0080
#define XDNS_NS_PER_S 1000000000ULL
/* Two ticks at the lowest HZ Linux runs with (10 ms at HZ=100): see xdns_cache_now. */
#define XDNS_COARSE_SLACK_NS 20000000ULL
/* Keep the compiler from moving loads of the entry across this point. */
#define xdns_barrier() asm volatile("" ::: "memory")

_Static_assert((XDNS_CACHE_MAX_RRS & (XDNS_CACHE_MAX_RRS - 1)) == 0, "ttl[] is indexed with a mask");

/* The cache entry found for a query: exactly one pointer is set, the one of its size class. */
struct xdns_cache_ref {
	struct xdns_cache_s *s;
	struct xdns_cache_m *m;
	struct xdns_cache_l *l;
};

/* Argument of the comparison loop: the entry's head. */
struct xdns_cache_cmp_ctx {
	const struct xdns_cache_meta *mt;
	struct xdns_scratch *sc;        /* looked up once by the program */
};

/*
 * Does the question name's word at byte `off` (scratch, as sent, the last one masked to the
 * name's `qlen` bytes), lowercased, equal the entry's (zero padded)? Adds the word as sent to
 * *sum. `off` is a multiple of 8 below 256.
 */
static __always_inline int xdns_cache_word_same(const struct xdns_scratch *sc, const struct xdns_cache_meta *mt,
						__u32 off, __u32 qlen, __u64 *sum)
{
	__u32 left = qlen - off;
	__u64 a, mask = left < 8 ? (1ULL << (left * 8)) - 1 : ~0ULL;  /* little-endian: low bytes */

	a = xdns_ld64(&sc->walk.name[off]) & mask;
	*sum += (a & 0xffffffff) + (a >> 32);
	return xdns_lower8(a) == xdns_ld64(&mt->name[off]);
}

/* Word `index` of the name compare, from the loop (step of a batched bpf_loop body). */
static __always_inline long xdns_cache_cmp_word(__u64 index, void *arg)
{
	struct xdns_cache_cmp_ctx *c = arg;
	struct xdns_scratch *sc = c->sc;

	if (!sc || index >= sc->cache.cmp_words || index >= 32)
		return 1;
	if (!xdns_cache_word_same(sc, c->mt, (index & 31) * 8, sc->walk.qlen, &sc->cache.cmp_sum)) {
		sc->cache.cmp_diff = 1;
		return 1;
	}
	return 0;
}

XDNS_BATCHED_REST(xdns_cache_cmp_words, xdns_cache_cmp_word, 4)

/*
 * Is the entry's name the question name, letter case aside? (sc->walk.qlen is the question's wire
 * length.) Length octets (<= 63) are never letters, so equal bytes mean the same labels: a
 * question equal to a (valid) entry name is that name. Also sums the name as sent into
 * sc->cache.cmp_sum (the name's checksum, for a question that came through a hint).
 */
static __always_inline int xdns_cache_same_name(struct xdns_scratch *sc, const struct xdns_cache_meta *mt)
{
	struct xdns_cache_cmp_ctx c = { .mt = mt, .sc = sc };
	__u32 qlen = sc->walk.qlen, k;
	__u64 sum = 0;

	/*
	 * The first four words inline, with the length and the sum in registers (as loop steps
	 * they went through scratch: two loads and a read-modify-write per word); a longer name
	 * goes on in the loop from word 4.
	 */
#pragma unroll
	for (k = 0; k < 4; k++) {
		if (k * 8 >= qlen)
			break;
		if (!xdns_cache_word_same(sc, mt, k * 8, qlen, &sum))
			return 0;
	}
	sc->cache.cmp_sum = sum;
	if (qlen <= 32)
		return 1;
	sc->cache.cmp_words = (qlen + 7) / 8;
	sc->cache.cmp_diff = 0;
	bpf_loop(XDNS_TURNS(32 - 4), xdns_cache_cmp_words, &c, 0);
	return !sc->cache.cmp_diff;
}

/*
 * Store at p the big-endian TTL read at src, lowered by sub seconds, not below 0; returns the
 * seconds taken off. One 32-bit load and store (unaligned in the packet: x86-64 takes it,
 * word.h), not four bytes each.
 */
static __always_inline __u32 xdns_ttl_aged(__u8 *p, const __u8 *src, __u32 sub)
{
	__u32 old = bpf_ntohl(*(const __u32 *)src);
	__u32 new = old > sub ? old - sub : 0;

	*(__u32 *)p = bpf_htonl(new);
	return old - new;
}

/*
 * Age one record's TTL (step of a batched bpf_loop body, `index` = record): read it from the
 * entry (not back from the packet, where the copy has just stored it: xdns_put_ttls), store
 * it lowered by the elapsed seconds into the packet, and add what it lost to ttl_even or
 * ttl_odd by the parity of its DNS offset: the pass turns those into the checksum change at
 * the end (csum.h, xdns_csum_shrunk). Offsets are ascending: the first beyond the bytes sent
 * ends the pass.
 * Direct packet access (no helper call per TTL); a TTL outside the linear part of a
 * multi-buffer frame uses the store helper.
 */
static __always_inline long xdns_ttl_step(__u64 index, void *arg)
{
	struct xdns_fixup_ctx *fc = arg;
	struct xdp_md *ctx = fc->ctx;
	struct xdns_scratch *sc = fc->sc;
	__u32 f, at, lost;
	__u8 w[4] __attribute__((aligned(4)));  /* the verifier wants stack words aligned */
	__u8 *p;

	if (!sc || index >= sc->cache.ttl_n)
		return 1;
	f = fc->offs[index & (XDNS_CACHE_MAX_RRS - 1)];
	if (f + 4 > sc->answer.blen || f > fc->cap - 4)
		return 1;
	at = sc->answer.at + f;
	/* at <= 0x3fff bounds the pointer for the verifier; larger offsets take the helper */
	p = (__u8 *)(long)ctx->data + (at & 0x3fff);
	if (at <= 0x3fff && (void *)(p + 4) <= (void *)(long)ctx->data_end) {
		lost = xdns_ttl_aged(p, fc->bytes + f, sc->cache.ttl_sub);
	} else {
		lost = xdns_ttl_aged(w, fc->bytes + f, sc->cache.ttl_sub);
		if (bpf_xdp_store_bytes(ctx, at, w, 4)) {
			sc->answer.err = 1;
			return 1;
		}
	}
	if ((sc->answer.body_at + f) & 1)
		sc->cache.ttl_odd += lost;
	else
		sc->cache.ttl_even += lost;
	return 0;
}

XDNS_BATCHED(xdns_ttl_steps, xdns_ttl_step)

/*
 * Rewrite the TTLs of the records sent (body `bytes` of the entry, `cap` the length of its
 * size class); adds the checksum change to r->sum. Each old TTL comes from the entry, not
 * back from the packet: its four bytes there straddle two of the copy's eight-byte stores (at
 * body offset 6 after a compressed owner), and such a load waits until both stores reach
 * the cache (README.md, "Loads the CPU can forward"). The caller checks the entry's tags
 * after this, so what was read was one write of it.
 */
static __always_inline int xdns_put_ttls(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 at,
					 const struct xdns_cache_meta *mt, const __u8 *bytes, __u32 cap, __u32 sub,
					 struct xdns_reply *r)
{
	struct xdns_fixup_ctx fc = { .ctx = ctx, .sc = sc, .offs = mt->ttl_off, .bytes = bytes, .cap = cap };
	__u32 n = mt->nttl;

	if (sub == 0 || r->blen == 0 || n == 0)
		return 0;
	if (n == 1) {
		/* one record (the usual A/AAAA answer): inline, no loop, direct access only */
		__u32 f = mt->ttl_off[0], at1 = at + f, lost;
		__u8 *p = (__u8 *)(long)ctx->data + (at1 & 0x3fff);

		if (f + 4 <= r->blen && f <= cap - 4 && at1 <= 0x3fff &&
		    (void *)(p + 4) <= (void *)(long)ctx->data_end) {
			lost = xdns_ttl_aged(p, bytes + f, sub);
			r->sum += (r->body_at + f) & 1 ? xdns_csum_shrunk(0, lost) : xdns_csum_shrunk(lost, 0);
			return 0;
		}
	}
	sc->cache.ttl_n = n < XDNS_CACHE_MAX_RRS ? n : XDNS_CACHE_MAX_RRS;
	sc->cache.ttl_sub = sub;
	sc->answer.at = at;
	sc->answer.body_at = r->body_at;
	sc->answer.blen = r->blen;
	sc->answer.err = 0;
	sc->cache.ttl_even = 0;
	sc->cache.ttl_odd = 0;
	bpf_loop(XDNS_TURNS(XDNS_CACHE_MAX_RRS), xdns_ttl_steps, &fc, 0);
	if (sc->answer.err)
		return -1;
	r->sum += xdns_csum_shrunk(sc->cache.ttl_even, sc->cache.ttl_odd);
	return 0;
}

/*
 * Is the client (source address) in the allow list? (Direct packet access to the address.)
 * A list of at most XDNS_ALLOW_INLINE prefixes is compared inline (`xdns_allow_inline`, a few
 * instructions per prefix) with the address in registers; a longer one takes the LPM trie
 * lookup, whose key is built only then.
 */
static __always_inline int xdns_cache_allowed(struct xdp_md *ctx, const struct xdns_pkt *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_allow_table *t;
	__u32 l3 = pkt->l3_off, zero = 0, slot, i;
	__u64 a0, a1 = 0;
	__u8 family;

	if (l3 != 14 && l3 != 18)
		return 0;
	/* the address as xdns_allow_key.addr holds it, read as two native-endian words */
	if (pkt->ipv6) {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		a0 = xdns_ld64(&ip6->saddr);
		a1 = xdns_ld64((__u8 *)&ip6->saddr + 8);
		family = 6;
	} else {
		struct iphdr *ip = data + l3;

		if ((void *)(ip + 1) > data_end)
			return 0;
		a0 = ip->saddr;         /* bytes 4..7 of the key's address are zero */
		family = 4;
	}
	t = bpf_map_lookup_elem(&xdns_allow_inline, &zero);
	slot = t ? t->n : 0;
	if (slot == 1 || slot == 2) {
		t = bpf_map_lookup_elem(&xdns_allow_inline, &slot);
		if (t && t->n <= XDNS_ALLOW_INLINE) {
			for (i = 0; i < XDNS_ALLOW_INLINE; i++) {
				const struct xdns_allow_prefix *e = &t->p[i];

				if (i >= t->n)
					break;
				if (e->family == family && (a0 & e->mask[0]) == e->addr[0] &&
				    (a1 & e->mask[1]) == e->addr[1])
					return 1;
			}
			return 0;
		}
	}
	{
		struct xdns_allow_key k = {};

		k.family = family;
		k.prefixlen = 8 + (family == 6 ? 128 : 32);
		__builtin_memcpy(&k.addr[0], &a0, 8);
		__builtin_memcpy(&k.addr[8], &a1, 8);
		return bpf_map_lookup_elem(&xdns_allow, &k) != NULL;
	}
}

/* reply.h: keep the reply just written (a global function, defined there). */
int xdns_reply_learn(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 dns_off, __u32 body_at, __u64 sum);

/* One refresh event per entry: the first hit at or after prefetch_ns wins the flag. */
static __always_inline void xdns_cache_prefetch(struct xdns_cache_meta *mt, const struct xdns_query *q, __u64 now)
{
	struct xdns_cache_event *ev;

	if (now < mt->prefetch_ns || mt->prefetch_sent)
		return;
	if (__sync_val_compare_and_swap(&mt->prefetch_sent, 0, 1) != 0)
		return;
	ev = bpf_ringbuf_reserve(&xdns_cache_events, sizeof(*ev), 0);
	if (!ev) {
		mt->prefetch_sent = 0;  /* ring full: a later hit tries again */
		return;
	}
	__builtin_memcpy(ev->name, mt->name, sizeof(ev->name));
	ev->qtype = q->qtype;
	ev->do_bit = q->do_bit;
	ev->name_len = q->qlen;
	ev->_pad = 0;
	bpf_ringbuf_submit(ev, 0);
}

/*
 * The entry of `key` (xdns_abi.h): its bucket's four entries compared without a branch
 * (xdns_ways_match). Returns its index (size class above XDNS_CACHE_SLOT, slot below), or
 * XDNS_HINT_NONE on a miss.
 */
static __always_inline __u32 xdns_cache_find(const struct xdns_cache_key *key)
{
	__u32 meta = XDNS_CACHE_META(key->qtype, key->do_bit, key->name_len), b;
	struct xdns_cache_bucket *bk;
	__u64 found;

	b = xdns_cache_pos(key->hash, key->qtype, key->do_bit) & xdns_cfg.cache_mask;
	bk = bpf_map_lookup_elem(&xdns_cache_idx, &b);
	if (!bk)
		return XDNS_HINT_NONE;
	found = xdns_ways_match(bk->e, key->hash, meta, ~0u);
	return found ? (__u32)(found - 1) : XDNS_HINT_NONE;
}

/*
 * The value of entry index `idx` in the array of its size class: sets the one pointer of
 * `ref` for that class (array lookups, inlined).
 */
static __always_inline void xdns_cache_value(__u32 idx, struct xdns_cache_ref *ref)
{
	__u32 slot = idx & XDNS_CACHE_SLOT;

	if ((idx >> 30) == 0)
		ref->s = bpf_map_lookup_elem(&xdns_cache_s, &slot);
	else if ((idx >> 30) == 1)
		ref->m = bpf_map_lookup_elem(&xdns_cache_m, &slot);
	else
		ref->l = bpf_map_lookup_elem(&xdns_cache_l, &slot);
}

/*
 * CLOCK_MONOTONIC as of the last tick (the coarse clock, a few ns to read instead of ~50 in a
 * guest), read once per tick on each CPU: it changes only at a tick, and the tick advances
 * jiffies first (an inlined load). A value read between the two updates of one tick is kept
 * until the next, so it lags by less than two ticks: an entry counts as expired
 * XDNS_COARSE_SLACK_NS early, so it is never served late; TTLs age at most that late.
 */
static __always_inline __u64 xdns_cache_now(struct xdns_scratch *sc)
{
	__u64 j = bpf_jiffies64();

	if (j != sc->cache.clock_jiffies) {
		sc->cache.clock_ns = bpf_ktime_get_coarse_ns();
		sc->cache.clock_jiffies = j;
	}
	return sc->cache.clock_ns;
}

/* Did a hint (memo.h) lead to this packet's entry? (Read afresh: see xdns_cache_answer.) */
static __always_inline int xdns_cache_hinted(struct xdns_scratch *sc)
{
	return *(volatile __u32 *)&sc->hint.ref != XDNS_HINT_NONE;
}

/*
 * The cache stage, for a query whose name is under no served zone: either the encloser walk
 * found that and left the whole name's hash in sc->lookup.sfx[], or a hint (memo.h) names the entry
 * (sc->hint.ref), and then the walk did not run: q->qsum holds the type and class only, and
 * the name's sum comes from the comparison. Returns XDNS_CACHE_ANSWERED with the frame
 * rewritten, or a pass reason with the frame untouched (XDNS_DROP_REWRITE if a helper failed
 * halfway).
 */
static __always_inline enum xdns_verdict xdns_cache_answer(struct xdp_md *ctx, struct xdns_scratch *sc,
							    struct xdns_pkt *pkt, const struct xdns_query *q)
{
	struct xdns_cache_key key = {};
	struct xdns_cache_ref ref = {};
	struct xdns_cache_meta *mt;
	const __u8 *bytes;
	struct xdns_reply r = {};
	enum xdns_verdict v;
	__u64 now, el, tag_end, until, qsum;
	__u32 frame, sub, idx, cap;
	long grow;
	int moved;

	if (!xdns_cache_allowed(ctx, pkt))
		return XDNS_PASS_NOT_ALLOWED;
	if (!(q->flags & XDNS_F_RD))
		return XDNS_PASS_RD0;
	if (q->flags & XDNS_F_CD)
		return XDNS_PASS_CACHE_CD;
	if (q->nlab == 0 || q->nlab > 128 || q->qlen > 255)
		return XDNS_PASS_CACHE_MISS;
	/*
	 * Whether a hint led here is read from the scratch map each time it matters, not kept in
	 * a variable, so that nothing the verifier tracks tells the two ways in apart once the
	 * entry is found.
	 */
	idx = sc->hint.ref;
	if (idx == XDNS_HINT_NONE) {
		if (sc->lookup.nsfx != q->nlab)
			return XDNS_PASS_CACHE_MISS;
		key.hash = sc->lookup.sfx[(q->nlab - 1) & 127];        /* the whole name's */
		key.qtype = q->qtype;
		key.do_bit = q->do_bit;
		key.name_len = q->qlen;
		idx = xdns_cache_find(&key);
		if (idx == XDNS_HINT_NONE)
			return XDNS_PASS_CACHE_MISS;
	}
	xdns_cache_value(idx, &ref);
	if (ref.s) {
		mt = &ref.s->m;
		tag_end = ref.s->tag_end;
		bytes = ref.s->bytes;
		cap = XDNS_CLASS_S_LEN;
	} else if (ref.m) {
		mt = &ref.m->m;
		tag_end = ref.m->tag_end;
		bytes = ref.m->bytes;
		cap = XDNS_CLASS_M_LEN;
	} else if (ref.l) {
		mt = &ref.l->m;
		tag_end = ref.l->tag_end;
		bytes = ref.l->bytes;
		cap = XDNS_CLASS_L_LEN;
	} else {
		return XDNS_PASS_CACHE_MISS;
	}
	xdns_barrier();
	/* a value being written (tag_end 0 or stale) fails the tag check below */
	if (tag_end == 0 || mt->qtype != q->qtype || mt->do_bit != q->do_bit || mt->ans.base_len != q->qlen ||
	    !xdns_cache_same_name(sc, mt)) {
		if (xdns_cache_hinted(sc))
			xdns_hint_forget(sc);
		return XDNS_PASS_CACHE_MISS;
	}
	if (!xdns_cache_hinted(sc))
		xdns_hint_learn(sc, idx, q->qlen, q->nlab);
	/* less than two ticks late: entries expire XDNS_COARSE_SLACK_NS early, never late */
	now = xdns_cache_now(sc);
	if (now + XDNS_COARSE_SLACK_NS >= mt->expires_ns)
		return XDNS_PASS_CACHE_EXPIRED;
	el = now > mt->stored_ns ? (now - mt->stored_ns) / XDNS_NS_PER_S : 0;
	sub = el > 0xffffffffULL ? 0xffffffff : (__u32)el;

	v = xdns_plan(q, &mt->ans, &r, 0, 0);
	if (v != XDNS_CONTINUE)
		return v == XDNS_PASS_NO_BODY ? XDNS_PASS_CACHE_MISS : v;
	r.flags = (r.flags & ~XDNS_F_AA) | XDNS_F_RA;
	/* through a hint: the name's sum (it starts at DNS offset 12, even: dns.h's sum[0]) */
	qsum = q->qsum;
	if (xdns_cache_hinted(sc))
		qsum += xdns_csum_swap(xdns_csum_fold(sc->cache.cmp_sum));
	r.sum += qsum - q->qsum;
	xdns_barrier();
	if (mt->tag != tag_end)
		return XDNS_PASS_CACHE_RACE;
	/* the guard's gate (rrl.h): RRL, cookies, answer features; nothing without the guard */
	v = xdns_rrl_stage(ctx, sc, pkt, q, &mt->ans, r.flags, r.dns_out, qsum, (__u64)XDNS_RRL_FROM_CACHE << 32 | idx);
	if (v != XDNS_CONTINUE)
		return v;
	if (XDNS_ECHO_ON)
		r.dns_out += sc->guard.echo_len & XDNS_COOKIE_OPT_LEN;  /* an echoed COOKIE (rrl.h) */
	xdns_cache_prefetch(mt, q, now);

	frame = ctx->data_end - ctx->data;
	grow = (long)(pkt->dns_off + r.dns_out) - (long)frame;
	moved = xdns_resize(ctx, pkt->dns_off + r.body_at, grow);
	if (moved)
		return moved > 0 ? XDNS_PASS_TAIL : XDNS_DROP_REWRITE;
	/* the entry's body (`bytes`, `cap` of them in its size class); a cached answer may have none */
	if (xdns_put_body(ctx, pkt->dns_off + r.body_at, bytes, cap, &r))
		return XDNS_DROP_REWRITE;
	if (xdns_put_ttls(ctx, sc, pkt->dns_off + r.body_at, mt, bytes, cap, sub, &r))
		return XDNS_DROP_REWRITE;
	/* every read of the entry is done: was it the same entry throughout? */
	xdns_barrier();
	if (mt->tag != tag_end)
		return XDNS_DROP_CACHE_RACE;
	if (xdns_put_head(ctx, sc, pkt, q, &r))
		return XDNS_DROP_REWRITE;
	if (xdns_strip_ip_options(ctx, pkt))
		return XDNS_DROP_REWRITE;
	if (xdns_put_l2_l4(ctx, pkt, &r))
		return XDNS_DROP_REWRITE;
	if (xdns_cache_hinted(sc)) {
		sc->memo_hits++;        /* userspace reports hint hits as memo hits */
		/*
		 * Asked before: keep the reply (reply.h) until the TTLs would age one more second,
		 * the entry expires (less the clock's slack) or its prefetch is due, if not sent.
		 */
		/* a reply carrying this client's cookie is kept for no one else */
		if (el < 0xffffffffULL && !(XDNS_ECHO_ON && sc->guard.echo_len)) {
			until = mt->stored_ns + (el + 1) * XDNS_NS_PER_S;
			if (until > mt->expires_ns - XDNS_COARSE_SLACK_NS)
				until = mt->expires_ns - XDNS_COARSE_SLACK_NS;
			if (!mt->prefetch_sent && until > mt->prefetch_ns)
				until = mt->prefetch_ns;
			sc->reply.ref = idx;
			sc->reply.tag = tag_end;
			sc->reply.until = until;
			xdns_barrier();
			if (mt->tag == tag_end)
				xdns_reply_learn(ctx, sc, pkt->dns_off, r.body_at, r.sum - bpf_ntohs(q->id));
		}
	}
	return XDNS_CACHE_ANSWERED;
}

#endif /* XDNS_CACHE_H */
