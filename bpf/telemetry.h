/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * telemetry.h - the telemetry stage (stage 5): server time of the answers the kernel sends,
 * selected by rules userspace rewrites while traffic flows, kept in per-CPU log-linear
 * histograms, and written back in band into queries that carry the probe option.
 *
 * Three parts around the other stages (xdns.bpf.c):
 *   begin   before the parse stage: one read of xdns_tel_ctl; no active set: nothing more (no
 *           clock read, no other map); else the set's summary (inline bitmaps of the client's
 *           and server's address bits): clear, nothing more; else the rules the query's
 *           addresses allow on a kernel path (family, client and server prefix), and only
 *           when some rule is left the receive time (bpf_ktime_get_ns). Rules that ask no
 *           question are decided here.
 *   select  once the question is known (xdns_tel_select, a global function: verified once),
 *           for the rules left that ask it: qname suffix, qtype, as a mask in scratch; none:
 *           the answer leaves without the end half.
 *   end     a program of its own (xdns_tel_xdp), tail-called for an answer about to leave
 *           with XDP_TX that a rule selects: the first rule for its path with its 1 in N,
 *           the histogram of its path, and for a query that carried option XDNS_TEL_OPTION
 *           (empty or 16 bytes) the option in the answer's OPT: receive ns and transmit ns,
 *           big-endian, this host's monotonic clock.
 * The probe option itself is noticed by the walk of the OPT record (dns.h) without a
 * branch, and left in scratch.tel.probe.
 *
 * dnstap from XDP (the set's `dnstap` on): the begin half, once some rule may select the query
 * by its addresses, copies the query's DNS message into scratch (xdns_tel_keep_query: one
 * bpf_xdp_load_bytes, before any stage rewrites the frame in place); the end half, for an
 * answer its rule selects (1 in N included), adds the answer as sent, the addresses, ports and
 * both times, and writes the record to the ring buffer xdns_tel_events (xdns_tel_emit); a
 * full ring or a message too long is counted (xdns_tel_hist: dtap_full, dtap_long), never
 * waited for.
 */
#ifndef XDNS_TELEMETRY_H
#define XDNS_TELEMETRY_H

#include "stage.h"
#include "maps.h"
#include "csum.h"
#include "parse.h"
#include "word.h"

/* scratch.tel.slot: does the answer go on to the end half (xdns_tel_prog's slot 0)? */
#define XDNS_TEL_END 0          /* yes: rules select the query (the begin half or the selection) */
#define XDNS_TEL_DONE 1         /* no: no rule selects the query, or telemetry is off */
#define XDNS_TEL_ASK 2          /* the addresses allow rules that ask the question: the main
				 * program calls the selection (the reply memo: the end half) */

#define XDNS_TEL_GROW 20        /* option code, length, 16 bytes */

/* scratch.tel.dtap: the query kept for dnstap (xdns_tel_keep_query)? */
#define XDNS_TEL_DTAP_NONE 0    /* no: dnstap from XDP off, or not a message to keep */
#define XDNS_TEL_DTAP_KEPT 1    /* yes: rec.data holds rec.h.qlen bytes of it */
#define XDNS_TEL_DTAP_LONG 2    /* no: longer than XDNS_TEL_DQ_MAX (counted if selected) */

/* A big-endian 8 bytes at `p` (packet or map memory), as a number. */
static __always_inline __u64 xdns_tel_be64(const __u8 *p)
{
	__u64 v;

	__builtin_memcpy(&v, p, 8);
	return __builtin_bswap64(v);
}

/* Is the address (c0, c1: its 16 bytes as two big-endian numbers, IPv4 in the top of c0)
 * under the prefix `p` of `len` bits (1..128, as userspace writes it)? Masks from the
 * length, no byte loop. No clamp of `len`: a known constant there makes the verifier track
 * it precisely, and the rule loop's states multiply (a length above 128 masks as 128). */
static __always_inline int xdns_tel_in(__u64 c0, __u64 c1, const __u8 *p, __u32 len)
{
	__u64 m0, m1;

	m0 = len >= 64 ? ~0ULL : ~0ULL << ((64 - len) & 63);
	m1 = len > 64 ? ~0ULL << ((128 - len) & 63) : 0;
	return (((c0 ^ xdns_tel_be64(p)) & m0) | ((c1 ^ xdns_tel_be64(p + 8)) & m1)) == 0;
}

/*
 * dnstap from XDP: the query's DNS message (the UDP payload after the headers at `l3`, of
 * family `fam`) into the record being built (scratch.tel.rec.data), with one
 * bpf_xdp_load_bytes, while the frame is still the query; longer than XDNS_TEL_DQ_MAX: not
 * copied, marked (the end half counts it if the answer is selected). A global function:
 * verified once.
 */
__attribute__((noinline)) int xdns_tel_keep_query(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 l3, __u32 fam)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *ip, *u;
	__u32 l4, len;

	if (!sc)
		return 0;
	sc->tel.dtap = XDNS_TEL_DTAP_NONE;
	if (l3 > 18)    /* 14 or 18 (one compare: the verifier's bound for the packet pointer) */
		return 0;
	ip = (__u8 *)data + l3;
	if ((void *)(ip + 40) > data_end)
		return 0;
	l4 = fam == 4 ? l3 + (ip[0] & 0xf) * 4 : l3 + 40;
	asm volatile("" : "+r"(l4));    /* keep the check: clang knows it holds, the verifier not */
	if (l4 > 80)
		return 0;
	u = (__u8 *)data + l4;
	if ((void *)(u + 8) > data_end)
		return 0;
	len = ((__u32)u[4] << 8) | u[5];
	if (len < 8 + 12)
		return 0;
	len -= 8;
	if (len > XDNS_TEL_DQ_MAX) {
		sc->tel.dtap = XDNS_TEL_DTAP_LONG;
		return 0;
	}
	if (bpf_xdp_load_bytes(ctx, l4 + 8, sc->tel.rec.data, len))
		return 0;
	sc->tel.rec.h.qlen = len;
	sc->tel.dtap = XDNS_TEL_DTAP_KEPT;
	return 0;
}

/*
 * dnstap from XDP: the answer about to leave (`h`: its path's counters), with the query kept
 * by the begin half, as one record of the ring buffer xdns_tel_events (struct xdns_tel_event,
 * the query's bytes, the answer's); the caller has set the times and the path. A full ring:
 * counted (dtap_full), never waited for; an answer longer than XDNS_TEL_DR_MAX: counted
 * (dtap_long). A global function: verified once.
 */
__attribute__((noinline)) int xdns_tel_emit(struct xdp_md *ctx, struct xdns_scratch *sc, struct xdns_tel_hist *h)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_tel_event *e;
	__u8 *p = data, *ip, *u;
	__u32 l3, l4, qlen, rlen;
	__u16 proto;

	if (!sc || !h)
		return 0;
	e = &sc->tel.rec.h;
	if ((void *)(p + 14) > data_end)
		return 0;
	proto = ((__u16)p[12] << 8) | p[13];
	l3 = 14;
	e->vlan = 0;
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		if ((void *)(p + 18) > data_end)
			return 0;
		e->vlan = (((__u16)p[14] << 8) | p[15]) & 0xfff;
		proto = ((__u16)p[16] << 8) | p[17];
		l3 = 18;
	}
	ip = p + l3;
	if ((void *)(ip + 40) > data_end)
		return 0;
	/* the answer's source is the server, its destination the client */
	__builtin_memset(e->client, 0, 32);
	if (proto == ETH_P_IP) {
		e->family = 4;
		__builtin_memcpy(e->server, ip + 12, 4);
		__builtin_memcpy(e->client, ip + 16, 4);
		l4 = l3 + (ip[0] & 0xf) * 4;
	} else if (proto == ETH_P_IPV6) {
		e->family = 6;
		__builtin_memcpy(e->server, ip + 8, 16);
		__builtin_memcpy(e->client, ip + 24, 16);
		l4 = l3 + 40;
	} else {
		return 0;
	}
	if (l4 > 80)
		return 0;
	u = p + l4;
	if ((void *)(u + 8) > data_end)
		return 0;
	e->server_port = ((__u16)u[0] << 8) | u[1];
	e->client_port = ((__u16)u[2] << 8) | u[3];
	rlen = ((__u32)u[4] << 8) | u[5];
	if (rlen < 8 + 12)
		return 0;
	rlen -= 8;
	if (rlen > XDNS_TEL_DR_MAX) {
		h->dtap_long++;
		return 0;
	}
	qlen = e->qlen;
	if (qlen == 0 || qlen > XDNS_TEL_DQ_MAX)
		return 0;
	if (bpf_xdp_load_bytes(ctx, l4 + 8, sc->tel.rec.data + qlen, rlen))
		return 0;
	e->rlen = rlen;
	e->_pad = 0;
	if (bpf_ringbuf_output(&xdns_tel_events, e, sizeof(*e) + qlen + rlen, 0))
		h->dtap_full++;
	else
		h->dtap_events++;
	return 0;
}

/*
 * The rules of the active set the query's addresses allow on a kernel path (family, client
 * and server prefix, read here from the frame), as a mask in scratch.tel.mask; slot
 * XDNS_TEL_DONE when there are none, XDNS_TEL_ASK when one of them asks the question (name,
 * type), else XDNS_TEL_END (decided). Returns whether the mask has a rule. A global function:
 * verified once (inline, the rule loop's states multiplied the main program's past 1M).
 */
__attribute__((noinline)) int xdns_tel_by_addr(struct xdp_md *ctx, struct xdns_scratch *sc, struct xdns_tel_ctl *ctl)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_tel_set *set;
	__u32 i, fam, l3, active;
	__u64 c0, c1, s0, s1;
	__u8 *p = data, *ip;
	__u16 proto;

	if (!sc || !ctl)
		return 0;
	sc->tel.probe = 0;      /* the reply memo answers before the OPT walk sets it */
	sc->tel.dtap = XDNS_TEL_DTAP_NONE;
	sc->tel.decided = 0;
	sc->tel.mask = 0;
	sc->tel.slot = XDNS_TEL_DONE;
	active = ctl->active;
	if (active != 1 && active != 2)
		return 0;
	set = &ctl->sets[(active - 1) & 1];
	if ((void *)(p + 14) > data_end)
		return 0;
	proto = ((__u16)p[12] << 8) | p[13];
	l3 = 14;
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		if ((void *)(p + 18) > data_end)
			return 0;
		proto = ((__u16)p[16] << 8) | p[17];
		l3 = 18;
	}
	ip = p + l3;
	if (proto == ETH_P_IP) {
		if ((void *)(ip + 20) > data_end)
			return 0;
		fam = 4;
		c0 = xdns_tel_be64(ip + 12);    /* source 12..15, destination 16..19 */
		s0 = c0 << 32;
		c0 &= 0xffffffff00000000ULL;
		c1 = 0;
		s1 = 0;
	} else if (proto == ETH_P_IPV6) {
		if ((void *)(ip + 40) > data_end)
			return 0;
		fam = 6;
		c0 = xdns_tel_be64(ip + 8);
		c1 = xdns_tel_be64(ip + 16);
		s0 = xdns_tel_be64(ip + 24);
		s1 = xdns_tel_be64(ip + 32);
	} else {
		return 0;
	}
	/* the mask and "asks the question" go through scratch (volatile: clang kept them on the
	 * stack, known to the verifier, and its states doubled per rule) */
	for (i = 0; i < XDNS_TEL_RULES; i++) {
		struct xdns_tel_rule *r = &set->rules[i];

		if (i >= set->nrules)
			break;
		if (r->paths && !(r->paths & ((1U << XDNS_TEL_KERNEL_AUTH) | (1U << XDNS_TEL_KERNEL_CACHE))))
			continue;
		if (r->family && r->family != fam)
			continue;
		if (r->src_len && !xdns_tel_in(c0, c1, r->src, r->src_len))
			continue;
		if (r->dst_len && !xdns_tel_in(s0, s1, r->dst, r->dst_len))
			continue;
		*(volatile __u32 *)&sc->tel.mask |= 1U << i;
		if (r->qtype || r->sfx_len)
			*(volatile __u32 *)&sc->tel.slot = XDNS_TEL_ASK;
	}
	if (!*(volatile __u32 *)&sc->tel.mask)
		return 0;       /* slot XDNS_TEL_DONE: no clock read */
	sc->tel.set = active;
	if (set->dnstap)        /* dnstap from XDP: the query, before the stages rewrite it */
		xdns_tel_keep_query(ctx, sc, l3, fam);
	if (*(volatile __u32 *)&sc->tel.slot != XDNS_TEL_ASK) {
		sc->tel.decided = active;
		sc->tel.slot = XDNS_TEL_END;
	}
	return 1;
}

/*
 * The pre-filter: does the active set's summary `s` (xdns_abi.h, struct xdns_tel_sum) admit
 * the frame's client and server addresses? 0: no rule of the set may select it by address.
 * Inline in the main program, straight-line: one tag at most, IPv4 or IPv6, one bounds check
 * (40 bytes of IP header: every query the kernel can answer has that many), the client's bit,
 * and only when it is set the server's. Not IP, or shorter: 0 (nothing the kernel answers).
 */
static __always_inline int xdns_tel_pre(struct xdp_md *ctx, const struct xdns_tel_sum *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data, *ip;
	__u64 c, d;
	__u32 f, i;
	__u16 proto;

	if ((void *)(p + 18) > data_end)
		return 0;
	proto = *(__u16 *)(p + 12);
	ip = p + 14;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		proto = *(__u16 *)(p + 16);
		ip = p + 18;
	}
	if ((void *)(ip + 40) > data_end)
		return 0;
	if (proto == bpf_htons(ETH_P_IP)) {
		f = 0;          /* family * 2: the client's bitmap; f + 1: the server's */
		c = (__u64)bpf_ntohl(*(__u32 *)(ip + 12)) << 32;
		d = (__u64)bpf_ntohl(*(__u32 *)(ip + 16)) << 32;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		f = 2;
		c = __builtin_bswap64(xdns_ld64(ip + 8));
		d = __builtin_bswap64(xdns_ld64(ip + 24));
	} else {
		return 0;
	}
	i = (__u32)(c >> (s->shift[f] & 63)) & ((1U << XDNS_TEL_SUM_BITS) - 1);
	if (!((s->bits[f * XDNS_TEL_SUM_WORDS + (i >> 6)] >> (i & 63)) & 1))
		return 0;
	i = (__u32)(d >> (s->shift[f + 1] & 63)) & ((1U << XDNS_TEL_SUM_BITS) - 1);
	return (s->bits[(f + 1) * XDNS_TEL_SUM_WORDS + (i >> 6)] >> (i & 63)) & 1;
}

/*
 * The begin half, before the parse stage. Telemetry off: one array read, nothing more (no
 * store, no clock). On: the active set's summary first (xdns_tel_pre, inline; skipped when it
 * admits every address, `any`); it rules the addresses out: slot done, and nothing more (no
 * call, no clock). Else the rules the query's addresses allow (xdns_tel_by_addr); none: no
 * clock read. Some, none of them asking the
 * question: decided there (no selection call later). Else the main program's selection
 * (xdns_tel_select) checks the question against the rules left. Returns the receive time
 * (bpf_ktime_get_ns) when some rule may select the query, else 0.
 */
static __always_inline __u64 xdns_tel_begin(struct xdp_md *ctx, struct xdns_scratch *sc)
{
	__u32 zero = 0, active;
	struct xdns_tel_ctl *ctl = bpf_map_lookup_elem(&xdns_tel_ctl, &zero);
	struct xdns_tel_sum *sum;

	if (!ctl)
		return 0;
	active = ctl->active;
	if (!active)
		return 0;
	sum = &ctl->sets[(active - 1) & 1].sum;
	if (!sum->any && !xdns_tel_pre(ctx, sum)) {
		/* volatile: clang must not carry the known slot into the stages (their code would
		 * be split in two, as a store on the "off" way once did) */
		*(volatile __u32 *)&sc->tel.slot = XDNS_TEL_DONE;
		/*
		 * The time 0, read back from memory: unknown to the verifier. clang lays this way
		 * out as the fall-through, which the verifier walks first; a known 0 here had it
		 * verify the stages twice, with 0 and then with the clock's unknown time, which a
		 * known 0 does not subsume (docs/perf/2026-11-30-telemetry-prefilter.md). Unknown
		 * here, every later way (the clock's time, the known 0s) is pruned.
		 */
		*(volatile __u64 *)&sc->tel.t0 = 0;
		return *(volatile __u64 *)&sc->tel.t0;
	}
	if (!xdns_tel_by_addr(ctx, sc, ctl))
		return 0;
	return bpf_ktime_get_ns();
}

/* floor(log2 v) for v > 0. */
static __always_inline __u32 xdns_tel_log2(__u64 v)
{
	__u32 e = 0;

	if (v >> 32) { v >>= 32; e += 32; }
	if (v >> 16) { v >>= 16; e += 16; }
	if (v >> 8) { v >>= 8; e += 8; }
	if (v >> 4) { v >>= 4; e += 4; }
	if (v >> 2) { v >>= 2; e += 2; }
	if (v >> 1) { e += 1; }
	return e;
}

/* The histogram bucket of `v` ns (xdns_abi.h; Rust twin xdns_bpf::telemetry::bucket). */
static __always_inline __u32 xdns_tel_bucket(__u64 v)
{
	__u32 e, b;

	if (v < (1ULL << XDNS_TEL_SUB_BITS))
		return (__u32)v;
	e = xdns_tel_log2(v);
	b = ((e - XDNS_TEL_SUB_BITS + 1) << XDNS_TEL_SUB_BITS) +
	    (__u32)(v >> (e - XDNS_TEL_SUB_BITS)) - (1U << XDNS_TEL_SUB_BITS);
	return b < XDNS_TEL_BUCKETS ? b : XDNS_TEL_BUCKETS - 1;
}

/* Does `addr` (len bytes) fall under prefix `p`/`bits`? */
static __always_inline int xdns_tel_prefix(const __u8 *addr, const __u8 *p, __u32 bits)
{
	__u32 i, n;
	__u8 mask;

	for (i = 0; i < 16; i++) {
		if (bits == 0)
			return 1;
		n = bits >= 8 ? 8 : bits;
		mask = (__u8)(0xff00 >> n);
		if ((addr[i] ^ p[i]) & mask)
			return 0;
		bits -= n;
	}
	return 1;
}

/*
 * The question name's label starts into scratch.tel, from the bytes the fetch stage copied
 * (walk.name); with `find`, its length and type too (a reply-memo answer, which skipped the
 * walk). A global function: verified once.
 */
__attribute__((noinline)) int xdns_tel_walk(struct xdns_scratch *sc, int find)
{
	__u32 i, pos;

	if (!sc)
		return 0;
	__builtin_memset(sc->tel.label_starts, 0, 32);
	pos = 0;
	for (i = 0; i < 128; i++) {
		__u32 at = pos;
		__u8 l;

		asm volatile("" : "+r"(at));    /* keep the masks: the verifier needs them */
		l = sc->walk.name[at & 255];
		sc->tel.label_starts[(at >> 6) & 3] |= 1ULL << (at & 63);
		if (l == 0 || l > 63)
			break;
		pos += l + 1;
		if (pos > 254)
			break;
	}
	if (!find)
		return 0;
	sc->tel.qlen = 0;
	sc->tel.qtype = 0;
	if (pos <= 253) {
		__u32 at = pos;

		asm volatile("" : "+r"(at));
		at &= 255;
		if (at <= 253 && sc->walk.name[at] == 0) {
			sc->tel.qlen = at + 1;
			sc->tel.qtype = ((__u32)sc->walk.name[at + 1] << 8) | sc->walk.name[at + 2];
		}
	}
	return 0;
}

/*
 * Does the question (scratch.tel.qlen, qtype; the name in walk.name) meet rule `r`'s type
 * and name suffix? The suffix's bytes first (lowercased), the label boundary only when they
 * are equal: a name the suffix does not end is not walked. A global function: verified once.
 */
__attribute__((noinline)) int xdns_tel_match_q(struct xdns_scratch *sc, struct xdns_tel_rule *r)
{
	__u32 i, start, at;
	__u8 c;

	if (!sc || !r)
		return 0;
	if (r->qtype && r->qtype != sc->tel.qtype)
		return 0;
	if (!r->sfx_len)
		return 1;
	if (r->sfx_len > XDNS_TEL_SFX_MAX || r->sfx_len > sc->tel.qlen)
		return 0;
	start = sc->tel.qlen - r->sfx_len;
	for (i = 0; i < XDNS_TEL_SFX_MAX; i++) {
		if (i >= r->sfx_len)
			break;
		at = start + i;
		asm volatile("" : "+r"(at));
		c = sc->walk.name[at & 255];
		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		if (c != r->sfx[i])
			return 0;
	}
	if (!sc->tel.walked) {
		xdns_tel_walk(sc, 0);
		sc->tel.walked = 1;
	}
	asm volatile("" : "+r"(start));
	return !!(sc->tel.label_starts[(start >> 6) & 3] & (1ULL << (start & 63)));
}

/* Does rule `r` select this answer (before sampling)? A global function: verified once. */
__attribute__((noinline)) int xdns_tel_match(struct xdns_scratch *sc, struct xdns_tel_rule *r, __u32 path)
{
	if (!sc || !r)
		return 0;
	if (r->paths && !(r->paths & (path < XDNS_TEL_PATHS ? 1U << path : 3U)))
		return 0;       /* path XDNS_TEL_PATHS: either kernel path */
	if (r->family && r->family != sc->tel.family)
		return 0;
	if (r->src_len && !xdns_tel_prefix(sc->tel.client, r->src, r->src_len > 128 ? 128 : r->src_len))
		return 0;
	if (r->dst_len && !xdns_tel_prefix(sc->tel.server, r->dst, r->dst_len > 128 ? 128 : r->dst_len))
		return 0;
	return xdns_tel_match_q(sc, r);
}

/* Move the first `len` bytes of the frame from offset XDNS_TEL_GROW to 0, in 64-byte pieces
 * (a global function: verified once). */
__attribute__((noinline)) int xdns_tel_move_down(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 len)
{
	__u8 *buf;
	__u32 i, off;
	__u64 n;

	if (!sc)
		return -1;
	buf = sc->walk.name;    /* the walk is over: its name buffer is free */


	for (i = 0; i < 32; i++) {
		off = i * 64;
		if (off >= len)
			return 0;
		n = len - off;
		if (n > 64)
			n = 64;
		asm volatile("" : "+r"(n));     /* the checks below are the verifier's bounds */
		if (n == 0 || n > 64)
			return 0;
		if (bpf_xdp_load_bytes(ctx, off + XDNS_TEL_GROW, buf, n))
			return -1;
		if (bpf_xdp_store_bytes(ctx, off, buf, n))
			return -1;
	}
	return len <= 32 * 64 ? 0 : -1;
}

/* Count `t1 - t0` ns of server time in histogram `h`. */
static __always_inline void xdns_tel_count(struct xdns_tel_hist *h, __u64 t0, __u64 t1)
{
	__u64 d = t1 > t0 ? t1 - t0 : 0;
	__u32 b = xdns_tel_bucket(d);

	h->count++;
	h->sum_ns += d;
	h->rx_ktime++;
	asm volatile("" : "+r"(b));     /* keep the mask: the verifier needs it */
	h->b[b & (XDNS_TEL_BUCKETS - 1)]++;
}

/*
 * The selection, in the main program once the question is known, for a query whose
 * addresses allow rules that ask the question (slot XDNS_TEL_ASK, the begin half's mask):
 * those rules' type and name suffix against the question's length the walk or the memo found
 * (`qlen`) and its type (from the fetch stage's copy). The mask left is the rules that select
 * the query; none: slot XDNS_TEL_DONE, and the answer leaves without the end half (no tail
 * call, no second clock read). A global function: verified once, whatever state the main
 * program reaches it in.
 */
__attribute__((noinline)) int xdns_tel_select(struct xdns_scratch *sc, __u32 qlen)
{
	struct xdns_tel_ctl *ctl;
	struct xdns_tel_set *set;
	__u32 zero = 0, i, at, active;

	if (!sc)
		return 0;
	ctl = bpf_map_lookup_elem(&xdns_tel_ctl, &zero);
	active = sc->tel.set;
	if (!ctl || !ctl->active || (active != 1 && active != 2)) {
		sc->tel.slot = XDNS_TEL_DONE;   /* off since: the next packets skip this call */
		return 0;
	}
	set = &ctl->sets[(active - 1) & 1];     /* the set the begin half's mask is of */

	/* the question: its length as found, the type after it */
	at = qlen;
	sc->tel.walked = 0;
	if (at == 0 || at > 253) {
		xdns_tel_walk(sc, 1);
		sc->tel.walked = 1;
	} else {
		asm volatile("" : "+r"(at));
		at &= 255;
		if (at > 253)
			return 0;
		sc->tel.qlen = at;
		sc->tel.qtype = ((__u32)sc->walk.name[at] << 8) | sc->walk.name[at + 1];
	}

	for (i = 0; i < XDNS_TEL_RULES; i++) {
		if (!(*(volatile __u32 *)&sc->tel.mask & (1U << i)))
			continue;
		if (!xdns_tel_match_q(sc, &set->rules[i]))
			*(volatile __u32 *)&sc->tel.mask &= ~(1U << i);
	}
	sc->tel.decided = active;       /* the set the mask is of */
	sc->tel.slot = *(volatile __u32 *)&sc->tel.mask ? XDNS_TEL_END : XDNS_TEL_DONE;
	return 0;
}

/*
 * The end half, for an answer leaving with XDP_TX that some rule selects on the question
 * (scratch.tel.mask, xdns_tel_select; or any answer of the reply memo, selected here): the
 * first rule for its path decides, with its 1 in N; count the server time and write the probe
 * option if asked. Returns the verdict to count: `v`, or
 * drop_rewrite when the frame was left half moved (a helper failed midway).
 */
static __always_inline int xdns_tel_end(struct xdp_md *ctx, __u32 v, __u64 t0)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_tel_ctl *ctl;
	struct xdns_tel_set *set;
	struct xdns_tel_hist *h;
	struct xdns_scratch *sc;
	__u32 zero = 0, path, i, pos, l3, l4, dns, dlen, frame, probe, mask, sel = 0, moved = 0;
	__u64 t1, s;
	__u16 proto, old_udp, csum;
	__u8 *p, *opt, *u, *ip;

	if (v == XDNS_ANSWERED)
		path = XDNS_TEL_KERNEL_AUTH;
	else if (v == XDNS_CACHE_ANSWERED)
		path = XDNS_TEL_KERNEL_CACHE;
	else
		return v;
	sc = bpf_map_lookup_elem(&xdns_scratch, &zero);
	h = bpf_map_lookup_elem(&xdns_tel_hist, &path);
	if (!sc || !h)
		return v;

	/* the answer's headers: Ethernet, one tag, IPv4 (no options left) or IPv6, UDP */
	p = data;
	if ((void *)(p + 14) > data_end)
		return v;
	proto = ((__u16)p[12] << 8) | p[13];
	l3 = 14;
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		if ((void *)(p + 18) > data_end)
			return v;
		proto = ((__u16)p[16] << 8) | p[17];
		l3 = 18;
	}
	ip = p + l3;
	if (proto == ETH_P_IP) {
		if ((void *)(ip + 20) > data_end)
			return v;
		l4 = l3 + (ip[0] & 0xf) * 4;
	} else if (proto == ETH_P_IPV6) {
		if ((void *)(ip + 40) > data_end)
			return v;
		l4 = l3 + 40;
	} else {
		return v;
	}
	if (l4 > 80)
		return v;
	u = p + l4;
	if ((void *)(u + 8) > data_end)
		return v;
	old_udp = ((__u16)u[4] << 8) | u[5];
	dns = l4 + 8;
	if (old_udp < 8 + 12)
		return v;
	dlen = old_udp - 8;

	ctl = bpf_map_lookup_elem(&xdns_tel_ctl, &zero);
	if (!ctl)
		return v;
	i = sc->tel.decided;
	if (i != 1 && i != 2)
		i = ctl->active;
	if (i != 1 && i != 2)
		return v;
	set = &ctl->sets[(i - 1) & 1];
	if (!sc->tel.decided) {
		/* answered before the question was known (the reply memo): select on the answer,
		 * whose addresses are swapped */
		__builtin_memset(sc->tel.client, 0, 32);
		if (proto == ETH_P_IP) {
			sc->tel.family = 4;
			__builtin_memcpy(sc->tel.server, ip + 12, 4);
			__builtin_memcpy(sc->tel.client, ip + 16, 4);
		} else {
			if ((void *)(ip + 40) > data_end)
				return v;
			sc->tel.family = 6;
			__builtin_memcpy(sc->tel.server, ip + 8, 16);
			__builtin_memcpy(sc->tel.client, ip + 24, 16);
		}
		xdns_tel_walk(sc, 1);
		sc->tel.walked = 1;
		mask = 0;
		for (i = 0; i < XDNS_TEL_RULES; i++) {
			if (i >= set->nrules)
				break;
			if (xdns_tel_match(sc, &set->rules[i], path))
				mask |= 1U << i;
		}
	} else {
		mask = sc->tel.mask;
	}
	/* the first rule selecting the query on this path decides, with its 1 in N */
	for (i = 0; i < XDNS_TEL_RULES; i++) {
		struct xdns_tel_rule *r = &set->rules[i];
		__u32 n;

		if (!(mask & (1U << i)))
			continue;
		if (r->paths && !(r->paths & (1U << path)))
			continue;
		n = r->sample;
		if (n > 1 && (sc->tel.seen[i]++ % n) != 0)
			return v;
		sel = 1;
		break;
	}
	if (!sel)
		return v;

	probe = sc->tel.probe;
	if (probe != 0 && probe != 1 && probe != 1 + XDNS_TEL_PROBE_LEN) {
		h->probe_bad++;
		probe = 0;
	}
	if (probe) {
		/* the answer ends with our OPT record (answer.h): root, type 41, ..., RDLENGTH 0 */
		if (dlen < 12 + 11 || dlen > 4096) {
			probe = 0;
		} else {
			pos = dns + dlen - 11;
			if (pos > 2048)
				return v;
			opt = p + pos;
			if ((void *)(opt + 11) > data_end)
				return v;
			if (opt[0] != 0 || opt[1] != 0 || opt[2] != 41 || opt[9] != 0 || opt[10] != 0)
				probe = 0;
		}
		if (!probe) {
			h->probe_room++;
		} else {
			frame = (__u32)(data_end - data);
			if (bpf_xdp_adjust_tail(ctx, XDNS_TEL_GROW)) {
				if (bpf_xdp_adjust_head(ctx, -XDNS_TEL_GROW)) {
					h->probe_room++;
					probe = 0;
				} else {
					moved = 1;
					if (xdns_tel_move_down(ctx, sc, frame))
						return XDNS_DROP_REWRITE;
				}
			}
		}
	}

	t1 = bpf_ktime_get_ns();
	xdns_tel_count(h, t0, t1);
	if (!probe)
		goto tap;

	/* the option after the OPT record, then the lengths and checksums that cover it */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	p = data;
	pos = dns + dlen - 1;   /* RDLENGTH's low byte; the option follows */
	if (pos > 2048)
		return XDNS_DROP_REWRITE;
	opt = p + pos;
	if ((void *)(opt + 1 + XDNS_TEL_GROW) > data_end)
		return XDNS_DROP_REWRITE;
	ip = p + (l3 & 31);
	u = p + (l4 & 127);
	if ((void *)(ip + 40) > data_end || (void *)(u + 8) > data_end)
		return XDNS_DROP_REWRITE;
	opt[0] = XDNS_TEL_GROW;         /* RDLENGTH (its high byte is 0) */
	opt[1] = XDNS_TEL_OPTION >> 8;
	opt[2] = XDNS_TEL_OPTION & 0xff;
	opt[3] = 0;
	opt[4] = XDNS_TEL_PROBE_LEN;
	for (i = 0; i < 8; i++) {
		opt[5 + i] = (__u8)(t0 >> (56 - 8 * i));
		opt[13 + i] = (__u8)(t1 >> (56 - 8 * i));
	}
	u[4] = (__u8)((old_udp + XDNS_TEL_GROW) >> 8);
	u[5] = (__u8)(old_udp + XDNS_TEL_GROW);
	if (proto == ETH_P_IP) {
		__u16 tot = ((__u16)ip[2] << 8) | ip[3];
		__u16 ck = ((__u16)ip[10] << 8) | ip[11];

		s = (__u64)(__u16)~ck + (__u16)~tot + (__u16)(tot + XDNS_TEL_GROW);
		ck = ~xdns_csum_fold(s);
		tot += XDNS_TEL_GROW;
		ip[2] = tot >> 8;
		ip[3] = (__u8)tot;
		ip[10] = ck >> 8;
		ip[11] = (__u8)ck;
	} else {
		__u16 pl = ((__u16)ip[4] << 8) | ip[5];

		pl += XDNS_TEL_GROW;
		ip[4] = pl >> 8;
		ip[5] = (__u8)pl;
	}
	csum = ((__u16)u[6] << 8) | u[7];
	if (csum == 0 && proto == ETH_P_IP)
		goto tap;       /* no UDP checksum over IPv4: none to keep */
	/* UDP length twice (header and pseudo-header), RDLENGTH, the option's bytes */
	s = (__u16)~csum;
	s += 2 * ((__u64)(__u16)~old_udp + (__u16)(old_udp + XDNS_TEL_GROW));
	s += xdns_csum_byte(8 + dlen - 1, XDNS_TEL_GROW);
	{
		__u64 w = (__u64)(XDNS_TEL_OPTION) + XDNS_TEL_PROBE_LEN;

		for (i = 0; i < 4; i++) {
			w += (t0 >> (48 - 16 * i)) & 0xffff;
			w += (t1 >> (48 - 16 * i)) & 0xffff;
		}
		/* words at the option's parity: from UDP offset 8 + dlen */
		s += (dlen & 1) ? xdns_csum_swap(xdns_csum_fold(w)) : xdns_csum_fold(w);
	}
	csum = ~xdns_csum_fold(s);
	if (csum == 0)
		csum = 0xffff;
	u[6] = csum >> 8;
	u[7] = (__u8)csum;
	h->probes++;
	(void)moved;
tap:
	/* dnstap from XDP: the answer as it leaves, with the query the begin half kept */
	if (sc->tel.dtap == XDNS_TEL_DTAP_KEPT) {
		sc->tel.rec.h.rx_ns = t0;
		sc->tel.rec.h.tx_ns = t1;
		sc->tel.rec.h.path = path;
		xdns_tel_emit(ctx, sc, h);
	} else if (sc->tel.dtap == XDNS_TEL_DTAP_LONG) {
		h->dtap_long++;
	}
	return v;
}

#endif /* XDNS_TELEMETRY_H */
