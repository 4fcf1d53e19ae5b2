/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * inpath_learn.h - the in-path cache's response side: a response from a configured server is
 * learnt only when it answers a query this program forwarded (client address and port,
 * server address, ID, the question with its letter case), within the timeout, first of its
 * kind; and only when it is a complete NOERROR or NXDOMAIN answer the cache can replay
 * (no TC, OPT last with version 0 and only COOKIE/PADDING, cut off, records that parse, at most
 * XDNS_INPATH_TTLS of them, a negative answer with its SOA: RFC 2308). Every response is
 * forwarded untouched, learnt or not; why not is counted.
 */
#ifndef XDNS_INPATH_LEARN_H
#define XDNS_INPATH_LEARN_H

#include "inpath.h"

/* The bytes of a pending record before its name: what a response's check copies. */
#define XDNS_INPATH_PEND_HEAD __builtin_offsetof(struct xdns_inpath_pend, name)

struct xdns_inpath_walk_ctx {
	struct xdns_inpath_scratch *sc;
};

/* One record of the response in scratch (a bpf_loop step, `i` = record): its TTL's place. */
static long xdns_inpath_rr_step(__u64 i, void *arg)
{
	struct xdns_inpath_walk_ctx *c = arg;
	struct xdns_inpath_scratch *sc = c->sc;
	const __u8 *m;
	__u32 off, start, len, j, ttl, rd, rdlen, min;
	__u16 type;
	__u8 l;

	if (!sc || i >= sc->w_n || i >= XDNS_INPATH_TTLS + 1)
		return 1;
	m = sc->buf + XDNS_INPATH_DNS_AT;
	off = sc->w_off;
	len = sc->w_len;
	if (len > XDNS_INPATH_MSG)
		goto form;
	start = off;
	for (j = 0; j < 128; j++) {
		if (off >= len || off >= XDNS_INPATH_MSG)
			goto form;
		l = m[off];
		if (l == 0) {
			off++;
			break;
		}
		if ((l & 0xc0) == 0xc0) {
			off += 2;
			break;
		}
		if (l > 63)
			goto form;
		off += l + 1;
	}
	if (j == 128 || off + 10 > len || off > XDNS_INPATH_MSG - 10)
		goto form;
	type = bpf_ntohs(*(const __u16 *)(m + off));
	ttl = bpf_ntohl(*(const __u32 *)(m + off + 4));
	rdlen = bpf_ntohs(*(const __u16 *)(m + off + 8));
	rd = off + 10;
	if (rd + rdlen > len)
		goto form;
	if (type == 41) {
		/* OPT: the last record, in the additional section, root owner, version 0, no options */
		if (i + 1 != sc->w_n || i < sc->w_ns_end || off != start + 1) {
			sc->w_err = XDNS_INPATH_REJECT_EDNS;
			return 1;
		}
		if (ttl >> 24) {
			sc->w_err = XDNS_INPATH_REJECT_RCODE;  /* an extended RCODE: BADVERS, BADCOOKIE, ... */
			return 1;
		}
		if (((ttl >> 16) & 0xff) != 0) {
			sc->w_err = XDNS_INPATH_REJECT_EDNS;
			return 1;
		}
		sc->w_seen |= 1;
		sc->w_opt_rd = rd;      /* its options: checked and stripped by the caller */
		sc->w_opt_len = rdlen;
	} else {
		if (sc->e.nttl >= XDNS_INPATH_TTLS)
			goto form;
		sc->e.ttl_off[sc->e.nttl & (XDNS_INPATH_TTLS - 1)] = off + 4;
		sc->e.nttl++;
		if (ttl > 0x7fffffff)
			ttl = 0;        /* RFC 2181 8: a TTL with the top bit set is zero */
		if (ttl < sc->w_min_ttl)
			sc->w_min_ttl = ttl;
		if (type == 6 && i >= sc->w_an && i < sc->w_ns_end) {
			/* RFC 2308 5: a negative answer lives min(SOA TTL, SOA MINIMUM) */
			__u32 end = rd + rdlen;

			asm volatile("" : "+r"(end));   /* one bounded value, not a sum of two */
			if (rdlen < 22 || end > XDNS_INPATH_MSG || end < 4)
				goto form;
			min = bpf_ntohl(*(const __u32 *)(m + end - 4));
			if (min > ttl)
				min = ttl;
			if (!(sc->w_seen & 2) || min < sc->w_neg_ttl)
				sc->w_neg_ttl = min;
			sc->w_seen |= 2;
		}
	}
	sc->w_off = rd + rdlen;
	sc->w_i = i + 1;
	return 0;
form:
	sc->w_err = XDNS_INPATH_REJECT_FORM;
	return 1;
}

/*
 * Is the message's question (sc->buf) the recorded one, byte for byte: the name as recorded
 * in slot p (read in place), type and class as copied into sc->pend?
 */
__attribute__((noinline)) int xdns_inpath_same_question(struct xdns_inpath_scratch *sc, struct xdns_inpath_pend *p,
							__u32 qlen)
{
	const __u8 *m;
	__u32 k;

	qlen &= 0x1ff;
	if (!sc || !p || qlen == 0 || qlen > 255)
		return 0;
	m = sc->buf + XDNS_INPATH_DNS_AT;
	for (k = 0; k < 32; k++) {
		if (k * 8 >= qlen)
			break;
		if ((xdns_ld64(m + 12 + k * 8) & xdns_inpath_mask(qlen - k * 8)) != xdns_ld64(p->name + k * 8))
			return 0;
	}
	return *(const __u16 *)(m + 12 + qlen) == sc->pend.qtype && *(const __u16 *)(m + 12 + qlen + 2) == sc->pend.qclass;
}

/*
 * The records after the question (at, rest bytes) into the entry's area, TTL offsets made
 * relative, then the lowercased name (sc->qname, qlen bytes, from xdns_inpath_key) from the
 * next multiple of 8. Returns the area's bytes used (round8(rest) + round8(qlen): the entry's
 * size class), or -1 when it exceeds the large class's.
 */
__attribute__((noinline)) int xdns_inpath_store_rest(struct xdns_inpath_scratch *sc, __u32 at, __u32 rest, __u32 qlen)
{
	const __u8 *m;
	__u64 w, sum = 0;
	__u32 k, na, i;

	rest &= 0x7ff;
	at &= 0x1ff;
	qlen &= 0x1ff;
	if (!sc || rest > XDNS_INPATH_D_L || at > 12 + 255 + 4 || qlen > 255)
		return -1;
	na = (rest + 7) & ~7U;
	if (na + ((qlen + 7) & ~7U) > XDNS_INPATH_D_L)
		return -1;
	m = sc->buf + XDNS_INPATH_DNS_AT;
	sc->e.rest_len = rest;
	/* the bytes and their checksum (a reply adds it, nothing summed per hit) */
	for (k = 0; k < XDNS_INPATH_D_L / 8; k++) {
		if (k * 8 >= rest)
			break;
		w = xdns_ld64(m + at + k * 8) & xdns_inpath_mask(rest - k * 8);
		xdns_st64(sc->e.d + k * 8, w);
		sum += (w & 0xffffffff) + (w >> 32);
	}
	/* the name after them (the query side compares it there: xdns_inpath_name_eq_*) */
	for (k = 0; k < 32; k++) {
		if (k * 8 >= qlen)
			break;
		i = na + k * 8;
		asm volatile("" : "+r"(i));     /* one register, checked as it is used */
		if (i > XDNS_INPATH_D_L - 8)
			return -1;
		xdns_st64(sc->e.d + i, xdns_ld64(sc->qname + k * 8));
	}
	sc->e.rest_sum = xdns_inpath_fold16(sum);
	sc->e.opt_sum = 0;
	if ((sc->e.eflags & XDNS_INPATH_E_OPT) && rest >= XDNS_INPATH_OPT_LEN) {
		/* the OPT alone (the TC=1 reply), as if at an even offset */
		const __u8 *o = sc->e.d + ((rest - XDNS_INPATH_OPT_LEN) & 0x7ff);
		__u64 os = 0;

		if (rest - XDNS_INPATH_OPT_LEN <= XDNS_INPATH_D_L - XDNS_INPATH_OPT_LEN) {
			w = xdns_ld64(o);
			os = (w & 0xffffffff) + (w >> 32);
			os += (__u64)o[8] + ((__u64)o[9] << 8) + (__u64)o[10];
		}
		sc->e.opt_sum = xdns_inpath_fold16(os);
	}
	for (k = 0; k < XDNS_INPATH_TTLS; k++) {
		if (k >= sc->e.nttl)
			break;
		sc->e.ttl_off[k] -= at;
	}
	return na + ((qlen + 7) & ~7U);
}

/* A response from a configured server, on an upstream interface. */
static __always_inline enum xdns_inpath_verdict xdns_inpath_learn(struct xdp_md *ctx, struct xdns_inpath_scratch *sc,
								  const struct xdns_inpath_pkt *pkt)
{
	struct xdns_inpath_walk_ctx wc = { .sc = sc };
	struct xdns_inpath_pend_key k = {};
	struct xdns_inpath_pend *p;
	__u32 slot;
	struct xdns_inpath_entry_head *o;
	struct xdns_inpath_tags *tags;
	__u8 *m = sc->buf + XDNS_INPATH_DNS_AT;
	__u32 len = pkt->dns_len, copy, qlen, at, rest, n, an, ns, ar, ttl, set, way, key, pick = 0, evict = 0, k8, opt_len;
	__u32 small;
	__u64 old;
	int used;
	int opts = 0;
	__u16 flags;
	__u64 now, best = ~0ULL, h, ptag;

	if (len < 12)
		return XDNS_INPATH_PASS_OTHER;
	copy = len > XDNS_INPATH_MSG ? XDNS_INPATH_MSG : len;
	if (copy < 12 || bpf_xdp_load_bytes(ctx, pkt->dns_off, m, copy))
		return XDNS_INPATH_PASS_OTHER;
	flags = bpf_ntohs(*(__u16 *)(m + 2));
	if (!(flags & 0x8000))
		return XDNS_INPATH_PASS_OTHER;          /* a query from the server's side */

	__builtin_memcpy(k.client, pkt->dst, 16);
	__builtin_memcpy(k.server, pkt->src, 16);
	k.cport = pkt->dport;
	k.id = *(__u16 *)m;
	slot = xdns_inpath_pend_slot(&k);
	p = bpf_map_lookup_elem(&xdns_inpath_pending, &slot);
	if (!p || p->tag == 0 || XDNS_INPATH_KW(&p->key, 0) != XDNS_INPATH_KW(&k, 0) ||
	    XDNS_INPATH_KW(&p->key, 1) != XDNS_INPATH_KW(&k, 1) || XDNS_INPATH_KW(&p->key, 2) != XDNS_INPATH_KW(&k, 2) ||
	    XDNS_INPATH_KW(&p->key, 3) != XDNS_INPATH_KW(&k, 3) || XDNS_INPATH_KW(&p->key, 4) != XDNS_INPATH_KW(&k, 4))
		return XDNS_INPATH_REJECT_UNSOLICITED;
	if (__sync_fetch_and_add(&p->done, 1) != 0)
		return XDNS_INPATH_REJECT_DUPLICATE;
	/*
	 * The record's fields, not its name (compared in place below): the tag read first, the
	 * fields, the name, then the tag again. A query of this slot rewriting it meanwhile (tag
	 * cleared first, set last: xdns_inpath_record) fails one of the checks; x86 keeps loads
	 * in order, the compiler barriers keep them so.
	 */
	ptag = *(volatile __u64 *)&p->tag;
	asm volatile("" ::: "memory");
	__builtin_memcpy(&sc->pend, p, XDNS_INPATH_PEND_HEAD);
	/* rewritten meanwhile by another query of this slot: not the record the response answers */
	if (ptag != xdns_inpath_pend_tag(&sc->pend) || XDNS_INPATH_KW(&sc->pend.key, 0) != XDNS_INPATH_KW(&k, 0) ||
	    XDNS_INPATH_KW(&sc->pend.key, 1) != XDNS_INPATH_KW(&k, 1) || XDNS_INPATH_KW(&sc->pend.key, 2) != XDNS_INPATH_KW(&k, 2) ||
	    XDNS_INPATH_KW(&sc->pend.key, 3) != XDNS_INPATH_KW(&k, 3) || XDNS_INPATH_KW(&sc->pend.key, 4) != XDNS_INPATH_KW(&k, 4))
		return XDNS_INPATH_REJECT_UNSOLICITED;
	now = bpf_ktime_get_ns();
	/* the stamp may be ahead of this clock by the query side's slack (xdns_inpath_now) */
	if (now > sc->pend.sent_ns && now - sc->pend.sent_ns > xdns_inpath_cfg.timeout_ns)
		return XDNS_INPATH_REJECT_LATE;
	qlen = sc->pend.qlen;
	if (qlen == 0 || qlen > 255 || *(__u16 *)(m + 4) != bpf_htons(1) || 12 + qlen + 4 > copy)
		return XDNS_INPATH_REJECT_QUESTION;
	/* the question, exactly as asked (the case of every letter too) */
	if (!xdns_inpath_same_question(sc, p, qlen))
		return XDNS_INPATH_REJECT_QUESTION;
	asm volatile("" ::: "memory");
	if (*(volatile __u64 *)&p->tag != ptag)
		return XDNS_INPATH_REJECT_UNSOLICITED;  /* rewritten while its name was compared */
	if (len > XDNS_INPATH_MSG)
		return XDNS_INPATH_REJECT_SIZE;
	if (flags & 0x7800)
		return XDNS_INPATH_REJECT_FORM;         /* another opcode */
	if (flags & 0x0200)
		return XDNS_INPATH_REJECT_TRUNCATED;
	if ((flags & 0xf) != 0 && (flags & 0xf) != 3)
		return XDNS_INPATH_REJECT_RCODE;

	/* the records: where their TTLs are, how long the answer lives */
	an = bpf_ntohs(*(__u16 *)(m + 6));
	ns = bpf_ntohs(*(__u16 *)(m + 8));
	ar = bpf_ntohs(*(__u16 *)(m + 10));
	n = an + ns + ar;
	if (n > XDNS_INPATH_TTLS + 1)
		return XDNS_INPATH_REJECT_FORM;
	at = 12 + qlen + 4;
	sc->w_off = at;
	sc->w_len = len;
	sc->w_i = 0;
	sc->w_n = n;
	sc->w_an = an;
	sc->w_ns_end = an + ns;
	sc->w_min_ttl = 0xffffffff;
	sc->w_neg_ttl = 0;
	sc->w_err = 0;
	sc->w_seen = 0;
	sc->w_opt_rd = 0;
	sc->w_opt_len = 0;
	sc->e.nttl = 0;
	bpf_loop(XDNS_INPATH_TTLS + 1, xdns_inpath_rr_step, &wc, 0);
	if (sc->w_err)
		return sc->w_err;
	if (sc->w_i != n || sc->w_off != len)
		return XDNS_INPATH_REJECT_FORM;         /* records missing, or bytes after them */
	if ((flags & 0xf) == 3 || an == 0) {
		if (!(sc->w_seen & 2))
			return XDNS_INPATH_REJECT_FORM; /* RFC 2308 5: no SOA, not cached */
		ttl = sc->w_neg_ttl;
	} else {
		ttl = sc->w_min_ttl;
	}
	if (ttl > xdns_inpath_cfg.max_ttl)
		ttl = xdns_inpath_cfg.max_ttl;
	if (ttl == 0)
		return XDNS_INPATH_REJECT_TTL;

	/* the entry, built whole in scratch */
	__builtin_memcpy(sc->srv, pkt->src, 16);
	h = xdns_inpath_key(sc, 1, qlen, (__u32)sc->pend.qtype | ((__u32)sc->pend.qclass << 16), sc->pend.kflags);
	sc->e.hash = h;
	sc->e.stored_ns = now;
	sc->e.expires_ns = now + (__u64)ttl * XDNS_NS;
	sc->e.used_ns = now;
	sc->e.qlen = qlen;
	sc->e.qtype = sc->pend.qtype;
	sc->e.qclass = sc->pend.qclass;
	sc->e.kflags = sc->pend.kflags;
#pragma unroll
	for (k8 = 0; k8 < 5; k8++)
		sc->e.hdr[k8] = *(__u16 *)(m + 2 + k8 * 2);
	/*
	 * The OPT's options are the server's words to this client (its cookie, padding): never
	 * replayed to another. Stored without them (the OPT is last: the message ends with its
	 * rdata); the answer is the server's for any client of the same question.
	 */
	sc->e.eflags = 0;
	opt_len = 0;
	if (sc->w_seen & 1) {
		sc->e.eflags = XDNS_INPATH_E_OPT;
		opt_len = sc->w_opt_len;
		if (opt_len) {
			opts = xdns_inpath_opts(sc, sc->w_opt_rd, len);
			if (opts < 0 || sc->w_opt_rd + opt_len != len)
				return XDNS_INPATH_REJECT_EDNS;
		}
	}
	if ((sc->pend.qopt & XDNS_INPATH_Q_COOKIE) && !(opts & XDNS_INPATH_Q_COOKIE))
		sc->e.eflags |= XDNS_INPATH_E_NO_COOKIE;
	rest = len - opt_len - at;
	if (rest > XDNS_INPATH_MSG)
		return XDNS_INPATH_REJECT_SIZE;
	if (opt_len) {
		/* the OPT's RDLEN: zero (in the message, before it is copied and summed) */
		k8 = len - opt_len - 2;
		if (rest < XDNS_INPATH_OPT_LEN || k8 > XDNS_INPATH_MSG - 2)
			return XDNS_INPATH_REJECT_FORM;
		*(__u16 *)(m + k8) = 0;
	}
	used = xdns_inpath_store_rest(sc, at, rest, qlen);
	if (used < 0)
		return XDNS_INPATH_REJECT_SIZE;
	small = used <= XDNS_INPATH_D_S;

	/* its place: the same question's way, an empty or expired one, else the least recently used */
	set = (__u32)h & xdns_inpath_cfg.set_mask;
	tags = bpf_map_lookup_elem(&xdns_inpath_tags, &set);
	if (!tags)
		return XDNS_INPATH_REJECT_NOMEM;        /* never: set <= set_mask < the array's size */
	for (way = 0; way < XDNS_INPATH_WAYS; way++) {
		key = set * XDNS_INPATH_WAYS + way;
		/* a way without a tag holds nothing the query side can find: taken as empty */
		old = tags->h[way];
		o = old ? xdns_inpath_entry_get(old >> 63, &key) : NULL;
		if (!o || (o->hash == h && o->qlen == qlen && o->qtype == sc->e.qtype && o->qclass == sc->e.qclass &&
			   o->kflags == sc->e.kflags)) {
			pick = way;
			evict = 0;
			break;
		}
		if (o->expires_ns <= now) {
			if (best != 0) {
				best = 0;
				pick = way;
				evict = 0;
			}
		} else if (o->used_ns < best) {
			best = o->used_ns;
			pick = way;
			evict = 1;
		}
	}
	key = set * XDNS_INPATH_WAYS + pick;
	/* the small class's map takes the entry's first bytes: the head and XDNS_INPATH_D_S of its area */
	if (bpf_map_update_elem(small ? (void *)&xdns_inpath_cache_s : (void *)&xdns_inpath_cache, &key, &sc->e, BPF_ANY))
		return XDNS_INPATH_REJECT_NOMEM;
	old = tags->h[pick & (XDNS_INPATH_WAYS - 1)];
	tags->stamp[pick & (XDNS_INPATH_WAYS - 1)] = now;
	tags->h[pick & (XDNS_INPATH_WAYS - 1)] = h | ((__u64)small << 63);
	/* the way changed class: its element in the other map goes, now that no tag names it */
	if (old && (__u32)(old >> 63) != small)
		bpf_map_delete_elem((old >> 63) ? (void *)&xdns_inpath_cache_s : (void *)&xdns_inpath_cache, &key);
	if (evict)
		sc->evicted++;
	return XDNS_INPATH_LEARNED;
}

#endif /* XDNS_INPATH_LEARN_H */
