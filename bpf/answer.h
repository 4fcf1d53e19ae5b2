/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * answer.h - turn the query into its response in place:
 *   header | question (untouched) | body (shifted pointers) | OPT
 * then swap addresses and ports, fix lengths and checksums. The UDP checksum is computed from
 * pieces: the question's sum (taken while parsing), the body's precomputed sum (byte-swapped
 * when the body starts at an odd offset) corrected for each fixup, the header and OPT we build.
 */
#ifndef XDNS_ANSWER_H
#define XDNS_ANSWER_H

#include "stage.h"
#include "lookup.h"
#include "rrl.h"

#define XDNS_REPLY_TTL 64

_Static_assert((XDNS_MAX_FIXUPS & (XDNS_MAX_FIXUPS - 1)) == 0, "fix[] is indexed with a mask");

/* What goes into the response besides the question. */
struct xdns_reply {
	__u64 sum;              /* unfolded checksum of the DNS message being built */
	__u32 body_at;          /* DNS-relative offset of the body (= end of the question) */
	__u32 blen;             /* body bytes sent */
	__u32 dns_out;          /* DNS response length */
	__u16 delta;            /* qlen - base_len: added to each fixup pointer */
	__u16 flags;
	__u16 an, ns, ar;
	__u16 opt;              /* 1: our OPT record follows (the query had one; never in a slip) */
};

/* Argument of the fixup and TTL walks. */
struct xdns_fixup_ctx {
	struct xdp_md *ctx;
	struct xdns_scratch *sc;        /* looked up once by the program */
	const __u16 *offs;              /* the body's fixup (or TTL) offsets, read in place */
	const __u8 *bytes;              /* TTL walk: the entry's body ... */
	__u64 cap;                      /* ... and the length of its size class */
};

/*
 * Shift compression pointer `index` of the copied body by delta, by direct packet access: 0
 * when shifted or beyond the bytes sent, 1 past the last pointer, -1 when it lies outside the
 * linear part of a multi-buffer frame (xdns_fixup_step then uses the load/store helpers). The
 * offset is read from the body's entry in place, the old value back from the packet (just
 * copied from the body); state lives in the scratch map. The checksum needs no work per
 * pointer (csum.h, xdns_csum_grown): the steps count the pointers they shifted (answer.done),
 * those at odd DNS offsets apart (answer.odd).
 */
static __always_inline int xdns_fixup_direct(struct xdp_md *ctx, struct xdns_scratch *sc, const __u16 *offs,
					     __u32 index)
{
	__u32 f, at;
	__u16 new;
	__u8 *p;

	if (index >= sc->answer.n)
		return 1;
	f = offs[index & (XDNS_MAX_FIXUPS - 1)];
	if (f + 2 > sc->answer.blen)
		return 0;
	at = sc->answer.at + f;
	/* at <= 0x3fff bounds the pointer for the verifier; larger offsets take the helpers */
	p = (__u8 *)(long)ctx->data + (at & 0x3fff);
	if (at > 0x3fff || (void *)(p + 2) > (void *)(long)ctx->data_end)
		return -1;
	new = (((__u16)p[0] << 8) | p[1]) + sc->answer.delta;
	p[0] = new >> 8;
	p[1] = new & 0xff;
	sc->answer.done++;
	sc->answer.odd += (sc->answer.body_at + f) & 1;
	return 0;
}

/* A step of the fixup walk: pointer sc->answer.from + index, by the helpers where it must. */
static __always_inline long xdns_fixup_step(__u64 index, void *arg)
{
	struct xdns_fixup_ctx *fc = arg;
	struct xdp_md *ctx = fc->ctx;
	struct xdns_scratch *sc = fc->sc;
	__u32 f, at;
	__u16 new;
	__u8 w[2];
	int rc;

	if (!sc)
		return 1;
	index += sc->answer.from;
	rc = xdns_fixup_direct(ctx, sc, fc->offs, index);
	if (rc >= 0)
		return rc;
	f = fc->offs[index & (XDNS_MAX_FIXUPS - 1)];
	at = sc->answer.at + f;
	if (bpf_xdp_load_bytes(ctx, at, w, 2)) {
		sc->answer.err = 1;
		return 1;
	}
	new = (((__u16)w[0] << 8) | w[1]) + sc->answer.delta;
	w[0] = new >> 8;
	w[1] = new & 0xff;
	if (bpf_xdp_store_bytes(ctx, at, w, 2)) {
		sc->answer.err = 1;
		return 1;
	}
	sc->answer.done++;
	sc->answer.odd += (sc->answer.body_at + f) & 1;
	return 0;
}

XDNS_BATCHED(xdns_fixup_steps, xdns_fixup_step)

/*
 * Copy a class S body (8 <= blen <= XDNS_CLASS_S_LEN) by direct packet access (word.h,
 * xdns_copy16). Returns 1 when the helper must copy (shorter body, or the frame is shorter
 * than expected).
 */
static __always_inline int xdns_copy_small(struct xdp_md *ctx, __u32 at, const __u8 *bytes, __u32 blen)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *dst;

	if (at > 0x3fff)
		return 1;
	dst = data + at;
	return xdns_copy16(dst, bytes, dst, data_end, blen, XDNS_CLASS_S_LEN);
}

/* Copy the first r->blen body bytes (none for an empty body) after the question. */
static __always_inline int xdns_put_body(struct xdp_md *ctx, __u32 at, const __u8 *bytes, __u32 cap,
					 const struct xdns_reply *r)
{
	__u32 blen = r->blen;

	if (blen == 0)
		return 0;
	if (blen > cap)
		return -1;
	if (cap == XDNS_CLASS_S_LEN && !xdns_copy_small(ctx, at, bytes, blen)) {
		/* copied */
	} else if (bpf_xdp_store_bytes(ctx, at, (void *)bytes, blen))
		return -1;
	return 0;
}

/*
 * Shift every fixup pointer of the copied body by delta; adds the checksum change to r->sum.
 * The first XDNS_FIXUPS_INLINE pointers are shifted inline: an NXDOMAIN body usually has
 * three (the SOA's owner and its two names), and the walk's callback cost a call, whose
 * return is dear here (docs/perf/2026-11-22-per-packet-cost.md, "Calls are dear"). The walk takes the rest, if any.
 */
#define XDNS_FIXUPS_INLINE 3
static __always_inline int xdns_put_fixups(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 at,
					   const __u16 *fixups, __u32 nfix, struct xdns_reply *r)
{
	struct xdns_fixup_ctx fc = { .ctx = ctx, .sc = sc, .offs = fixups };
	__u32 k;
	int rc = 0;

	if (r->delta == 0 || r->blen == 0 || nfix == 0)
		return 0;
	sc->answer.n = nfix < XDNS_MAX_FIXUPS ? nfix : XDNS_MAX_FIXUPS;
	sc->answer.at = at;
	sc->answer.body_at = r->body_at;
	sc->answer.blen = r->blen;
	sc->answer.delta = r->delta;
	sc->answer.err = 0;
	sc->answer.done = 0;
	sc->answer.odd = 0;
#pragma unroll
	for (k = 0; k < XDNS_FIXUPS_INLINE; k++) {
		rc = xdns_fixup_direct(ctx, sc, fixups, k);
		if (rc)
			break;
	}
	if (rc != 1 && sc->answer.n > k) {
		sc->answer.from = k;
		bpf_loop(XDNS_TURNS(XDNS_MAX_FIXUPS), xdns_fixup_steps, &fc, 0);
		if (sc->answer.err)
			return -1;
	}
	r->sum += xdns_csum_grown((__u64)r->delta * (sc->answer.done - sc->answer.odd), (__u64)r->delta * sc->answer.odd);
	return 0;
}

/* Pick the part of the body that fits (DESIGN-NOTES.md, truncation) and the header fields. */
/*
 * `pre`, `pre_ns`: bytes and records of an apex part written before the body (a signed zone's
 * DO=1 NODATA, xdns_put_prefix; 0 for every other answer): the body follows it, and the whole
 * fits or the reply is truncated (such a body has no additional section to drop).
 */
static __always_inline enum xdns_verdict xdns_plan(const struct xdns_query *q, const struct xdns_answer *a,
						    struct xdns_reply *r, __u32 pre, __u16 pre_ns)
{
	__u32 limit = 512, optlen = q->has_opt ? XDNS_OPT_LEN : 0;
	__u16 part;

	if (q->has_opt) {
		__u32 lim = q->payload < xdns_cfg.edns_payload ? q->payload : xdns_cfg.edns_payload;

		if (lim > limit)
			limit = lim;
	}
	if (q->qlen < a->base_len)
		return XDNS_PASS_NO_BODY;
	/* a signed zone's DO=1 answer carries RRSIGs and proofs chosen per name: userspace's
	 * (not a DO body: a NODATA's own part, XDNS_DNSSEC_NAME_PART, is one) */
	if (q->do_bit && a->dnssec == 1)
		return XDNS_PASS_DNSSEC;
	r->delta = q->qlen - a->base_len;
	r->body_at = XDNS_HDR_LEN + q->qlen + 4 + pre;
	r->flags = XDNS_F_QR | (q->flags & (XDNS_F_RD | XDNS_F_CD)) | (a->flags & XDNS_BODY_FLAGS);
	r->opt = q->has_opt;
	r->an = a->ancount;
	r->ns = a->nscount;
	r->ar = a->arcount;
	if (r->body_at + a->len + optlen <= limit) {
		r->blen = a->len;
		r->ns += pre_ns;
		part = a->csum;
	} else if (!a->ar_required && r->body_at + a->an_ns_len + optlen <= limit) {
		r->blen = a->an_ns_len;
		r->ar = 0;
		part = a->csum_an_ns;
	} else {
		r->body_at -= pre;
		r->blen = 0;
		r->an = r->ns = r->ar = 0;
		r->flags |= XDNS_F_TC;
		part = 0;
	}
	if (r->blen && a->class == XDNS_CLASS_USERSPACE)
		return XDNS_PASS_BODY_LARGE;
	if (r->blen && r->delta && a->nfixups > XDNS_MAX_FIXUPS)
		return XDNS_PASS_FIXUPS;
	r->sum = q->qsum + ((r->body_at & 1) ? xdns_csum_swap(part) : part);
	r->dns_out = r->body_at + r->blen + optlen;
	return XDNS_CONTINUE;
}

/* The body bytes of one answer: exactly one pointer is set, the one of its size class. */
struct xdns_body_ref {
	struct xdns_answer_s *s;
	struct xdns_body_m *m;
	struct xdns_body_l *l;
};

/*
 * Find the body bytes of `a` before the frame is touched: class S bytes are in `a`'s record,
 * and so are those of a class M answer of the answer table (body_ver XDNS_BODY_INLINE: `s`
 * then points at a struct xdns_answer_m, which xdns_put_dns tells by the class); other M and
 * L bodies are looked up (under the answer's body_ver, xdns_abi.h), and if a reload or an
 * in-place change deleted them meanwhile, the packet still goes to userspace intact. (A value
 * found stays valid until the program returns; a table record is never rewritten while its
 * generation is readable.) Separate typed pointers let the verifier know each one's size;
 * an inline M record shares `s` with class S, so both reach the gate and the resize as one
 * verifier state (a record pointer into the same page array).
 */
static __always_inline int xdns_body_get(struct xdns_answer_key *key, struct xdns_answer_s *a,
					 struct xdns_body_ref *ref)
{
	if (a->ans.class == XDNS_CLASS_S ||
	    (a->ans.class == XDNS_CLASS_M && a->ans.body_ver == XDNS_BODY_INLINE)) {
		ref->s = a;
		return 0;
	}
	key->_pad = a->ans.body_ver;
	if (a->ans.class == XDNS_CLASS_M) {
		ref->m = bpf_map_lookup_elem(&xdns_bodies_m, key);
		return ref->m ? 0 : -1;
	}
	if (a->ans.class == XDNS_CLASS_L) {
		ref->l = bpf_map_lookup_elem(&xdns_bodies_l, key);
		return ref->l ? 0 : -1;
	}
	return -1;
}

/*
 * Write OPT (after the r->blen body bytes at DNS offset r->body_at) and the header, by direct
 * packet access (the frame is linear: the program is not multi-buffer).
 */
static __always_inline int xdns_put_head(struct xdp_md *ctx, const struct xdns_scratch *sc,
					 const struct xdns_pkt *pkt, const struct xdns_query *q, struct xdns_reply *r)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 at = pkt->dns_off + r->body_at + r->blen;
	__u16 ar = r->ar + (r->opt ? 1 : 0);   /* our OPT record counts in ARCOUNT */
	__u8 *hdr, *opt, dob;

	if (r->opt) {
		if (at > 0x3fff)
			return -1;
		opt = data + at;
		if ((void *)(opt + XDNS_OPT_LEN) > data_end)
			return -1;
		/*
		 * root, type OPT, class = our payload, TTL = 0, 0, DO, 0, RDLENGTH 0: bytes 0..7 as
		 * one little-endian word, then 7..10 (byte 7 again) as another
		 */
		dob = q->do_bit ? 0x80 : 0;
		xdns_st64(opt, ((__u64)XDNS_TYPE_OPT << 16) | ((__u64)(xdns_cfg.edns_payload >> 8) << 24) |
				       ((__u64)(xdns_cfg.edns_payload & 0xff) << 32) | ((__u64)dob << 56));
		*(__u32 *)(opt + 7) = dob;
		/* only bytes 2..4 and 7 can be non-zero */
		r->sum += xdns_csum_byte(r->body_at + r->blen + 2, XDNS_TYPE_OPT) +
			  xdns_csum_byte(r->body_at + r->blen + 3, xdns_cfg.edns_payload >> 8) +
			  xdns_csum_byte(r->body_at + r->blen + 4, xdns_cfg.edns_payload & 0xff) +
			  xdns_csum_byte(r->body_at + r->blen + 7, dob);
		if (XDNS_ECHO_ON && sc->guard.echo_len) {
			/* the query's COOKIE option echoed (rrl.h, xdns_cookie_echo): RDLENGTH 28,
			 * code 10, length 24, the 24 bytes; dns_out counted them */
			__u32 b = r->body_at + r->blen;
			__u8 *o = opt + XDNS_OPT_LEN;

			if ((void *)(o + XDNS_COOKIE_OPT_LEN) > data_end)
				return -1;
			opt[10] = XDNS_COOKIE_OPT_LEN;
			*(__u32 *)o = bpf_htonl(10 << 16 | 24);
			xdns_st64(o + 4, sc->guard.echo[0]);
			xdns_st64(o + 12, sc->guard.echo[1]);
			xdns_st64(o + 20, sc->guard.echo[2]);
			r->sum += xdns_csum_byte(b + 10, XDNS_COOKIE_OPT_LEN) + xdns_csum_byte(b + 12, 10) +
				  xdns_csum_byte(b + 14, 24) +
				  (((b + 15) & 1) ? xdns_csum_swap((__u16)sc->guard.echo_sum) : (__u16)sc->guard.echo_sum);
		}
	}
	if (pkt->dns_off > XDNS_DNS_OFF_MAX)
		return -1;
	hdr = data + pkt->dns_off;
	if ((void *)(hdr + XDNS_HDR_LEN) > data_end)
		return -1;
	/* the ID is the query's, in place; then flags and the four counts, big-endian */
	*(__u16 *)(hdr + 2) = bpf_htons(r->flags);
	xdns_st64(hdr + 4, (__u64)bpf_htons(1) | ((__u64)bpf_htons(r->an) << 16) | ((__u64)bpf_htons(r->ns) << 32) |
				   ((__u64)bpf_htons(ar) << 48));
	/* header words: ID, flags, QDCOUNT, ANCOUNT, NSCOUNT, ARCOUNT (big-endian, even offsets) */
	r->sum += bpf_ntohs(q->id) + r->flags + 1 + r->an + r->ns + ar;
	return 0;
}

/* Write header, body and OPT into the (already resized) frame. */
static __always_inline int xdns_put_dns(struct xdp_md *ctx, struct xdns_scratch *sc, const struct xdns_pkt *pkt,
					const struct xdns_query *q, const struct xdns_body_ref *ref,
					const struct xdns_answer *a, struct xdns_reply *r)
{
	__u32 at = pkt->dns_off + r->body_at;
	int err;

	if (r->blen) {
		const __u16 *fixups;

		if (ref->s && a->class == XDNS_CLASS_S) {
			err = xdns_put_body(ctx, at, ref->s->data, XDNS_CLASS_S_LEN, r);
			fixups = (const __u16 *)(ref->s->data + XDNS_FIX_AT(a->len));
		} else if (ref->s) {
			/* an inline class M record (xdns_body_get): fixups after its bytes */
			__u32 fix = XDNS_FIX_AT_M(a->len);

			if (fix > XDNS_CLASS_M_LEN)
				return -1;
			err = xdns_put_body(ctx, at, ref->s->data, XDNS_CLASS_M_LEN, r);
			fixups = (const __u16 *)(ref->s->data + fix);
		} else if (ref->m) {
			err = xdns_put_body(ctx, at, ref->m->bytes, XDNS_CLASS_M_LEN, r);
			fixups = ref->m->fixups;
		} else if (ref->l) {
			err = xdns_put_body(ctx, at, ref->l->bytes, XDNS_CLASS_L_LEN, r);
			fixups = ref->l->fixups;
		} else
			return -1;
		if (err || xdns_put_fixups(ctx, sc, at, fixups, a->nfixups, r))
			return -1;
	}
	return xdns_put_head(ctx, sc, pkt, q, r);
}

/*
 * Copy the first `len` bytes of an apex part (len checked against its class's length: the
 * blocks past it are never read) and its first XDNS_PRE_FIXUPS pointers.
 */
static __always_inline void xdns_prefix_copy(struct xdns_scratch *sc, const __u16 *fix, const __u8 *bytes, __u32 len)
{
	__u64 *dst = (__u64 *)sc->pre.fix;
	const __u64 *src = (const __u64 *)fix;
	__u32 i;

#pragma unroll
	for (i = 0; i < XDNS_PRE_FIXUPS / 4; i++)
		dst[i] = src[i];
	dst = (__u64 *)sc->pre.bytes;
	src = (const __u64 *)bytes;
	for (i = 0; i < XDNS_CLASS_L_LEN / 64; i++) {      /* a bounded loop: the verifier walks it */
		if (i * 64 >= len)
			break;
		dst[i * 8] = src[i * 8];
		dst[i * 8 + 1] = src[i * 8 + 1];
		dst[i * 8 + 2] = src[i * 8 + 2];
		dst[i * 8 + 3] = src[i * 8 + 3];
		dst[i * 8 + 4] = src[i * 8 + 4];
		dst[i * 8 + 5] = src[i * 8 + 5];
		dst[i * 8 + 6] = src[i * 8 + 6];
		dst[i * 8 + 7] = src[i * 8 + 7];
	}
}

/*
 * A signed zone's DO=1 NODATA whose body, just found for the question of `qlen` bytes in
 * generation `gen`, is the name's own part (XDNS_DNSSEC_NAME_PART or XDNS_DNSSEC_PROOF_PART,
 * xdns_abi.h; the caller checked that it is for this exact name and has no additional
 * records): find the apex part (`kind`: XDNS_KIND_APEX_DO or XDNS_KIND_APEX_PROOF_DO, at the
 * apex of the closest encloser the walk found) and copy it, bytes and pointers, into sc->pre, so
 * that the frame is written from one place whatever the map (xdns_put_prefix). Anything
 * missing leaves the packet intact for userspace: the walk found no node (no apex hash), the
 * apex part is gone (a reload or an in-place change), not of class M or L, longer than the
 * question's name, or has more pointers than XDNS_PRE_FIXUPS. A global function: verified
 * once. Returns XDNS_CONTINUE or the pass verdict.
 */
__attribute__((noinline)) int xdns_prefix_load(struct xdns_scratch *sc, __u32 qlen, __u32 gen, __u32 kind)
{
	struct xdns_body_ref ref = {};
	struct xdns_answer_s *p;
	__u32 vi, table, len;

	if (!sc || !sc->lookup.ce_found || qlen > 255)
		return XDNS_PASS_NO_BODY;
	vi = sc->memo.last_v;
	table = sc->memo.last_table;
	sc->pre.key.gen = gen;
	sc->pre.key._pad = 0;
	p = xdns_answer_get(sc, &sc->pre.key, sc->lookup.ce.apex_hash, kind, 0);
	/* the own part's address stays the answer's (a spilled own part, which a spilled apex
	 * part overwrote in this CPU's spill slot, the caller looks up again) */
	sc->memo.last_v = vi;
	sc->memo.last_table = table;
	if (!p || p->ans.base_len > qlen || (p->ans.class != XDNS_CLASS_M && p->ans.class != XDNS_CLASS_L))
		return XDNS_PASS_NO_BODY;
	if (p->ans.nfixups > XDNS_PRE_FIXUPS)
		return XDNS_PASS_FIXUPS;
	if (xdns_body_get(&sc->pre.key, p, &ref))
		return XDNS_PASS_NO_BODY;
	len = p->ans.len;
	if (ref.s && p->ans.class == XDNS_CLASS_M && len <= XDNS_CLASS_M_LEN) {
		/* an inline class M record of the answer table (xdns_body_get): fixups after its bytes */
		__u32 fix = XDNS_FIX_AT_M(len);

		if (fix > XDNS_CLASS_M_LEN)
			return XDNS_PASS_NO_BODY;
		xdns_prefix_copy(sc, (const __u16 *)(ref.s->data + fix), ref.s->data, len);
	} else if (ref.m && len <= XDNS_CLASS_M_LEN)
		xdns_prefix_copy(sc, ref.m->fixups, ref.m->bytes, len);
	else if (ref.l && len <= XDNS_CLASS_L_LEN)
		xdns_prefix_copy(sc, ref.l->fixups, ref.l->bytes, len);
	else
		return XDNS_PASS_NO_BODY;
	sc->pre.len = len;
	sc->pre.ns = p->ans.nscount;
	sc->pre.csum = p->ans.csum;
	sc->pre.nfix = p->ans.nfixups;
	sc->pre.delta = qlen - p->ans.base_len;
	return XDNS_CONTINUE;
}

/*
 * The apex part of a signed zone's DO=1 NODATA (xdns_prefix_load: copied into sc->pre before
 * the frame was touched; none when sc->pre.len is 0) at the end of the question of `qlen`
 * bytes (the DNS message at frame offset `dns_off`), its pointers shifted by sc->pre.delta
 * (question length - apex length) by direct packet access, as an NXDOMAIN body's. Leaves the
 * checksum of what it wrote, at its own parity, in sc->pre.sum. The name's own part (after
 * it) is xdns_put_dns's. A global function: verified once. Returns 0, or -1 when the frame
 * could not be written.
 */
__attribute__((noinline)) int xdns_put_prefix(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 dns_off, __u32 qlen)
{
	__u32 len, qend = XDNS_HDR_LEN + qlen + 4, delta, k;
	__u16 part;
	int rc = 0;

	if (!sc)
		return -1;
	sc->pre.sum = 0;
	len = *(volatile __u16 *)&sc->pre.len;
	if (len == 0)
		return 0;
	if (len > XDNS_CLASS_L_LEN || qlen > 255 || dns_off > XDNS_DNS_OFF_MAX)
		return -1;
	if (bpf_xdp_store_bytes(ctx, dns_off + qend, sc->pre.bytes, len))
		return -1;
	part = sc->pre.csum;
	sc->pre.sum = (qend & 1) ? xdns_csum_swap(part) : part;
	delta = sc->pre.delta;
	if (delta == 0)
		return 0;
	sc->answer.n = sc->pre.nfix < XDNS_PRE_FIXUPS ? sc->pre.nfix : XDNS_PRE_FIXUPS;
	sc->answer.at = dns_off + qend;
	sc->answer.body_at = qend;
	sc->answer.blen = len;
	sc->answer.delta = delta;
	sc->answer.done = 0;
	sc->answer.odd = 0;
#pragma unroll
	for (k = 0; k < XDNS_PRE_FIXUPS; k++) {
		rc = xdns_fixup_direct(ctx, sc, sc->pre.fix, k);
		if (rc)
			break;
	}
	if (rc < 0)
		return -1;
	sc->pre.sum += xdns_csum_grown((__u64)delta * (sc->answer.done - sc->answer.odd), (__u64)delta * sc->answer.odd);
	return 0;
}

/*
 * Move the first `keep` bytes of the frame `head` bytes down (to the new start after the head
 * grew), by direct packet access, upwards (safe: the destination is below the source), in
 * blocks of 32 bytes: one bounds check each way per block, not per word, which quarters the
 * verifier's walk of the loop (the time is the same: docs/perf/2026-11-24-answered-path-instructions.md). The last 32 bytes are
 * read before anything is written and stored last, so a `keep` that is not a multiple of 32
 * needs no tail loop.
 * Returns -1 when the frame is shorter than expected (nothing the caller can undo: drop).
 */
static __always_inline int xdns_move_down(struct xdp_md *ctx, __u32 head, __u32 keep)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *src, *dst = data;
	__u64 l0, l1, l2, l3;
	__u32 i, k32;

	if (head > XDNS_HEAD_GROW || keep < 32 || keep > XDNS_MOVE_MAX)
		return -1;
	src = data + head;
	k32 = keep - 32;
	asm volatile("" : "+r"(k32));   /* one variable offset, no negative constant after it */
	if ((void *)(src + k32 + 32) > data_end)
		return -1;
	l0 = xdns_ld64(src + k32);
	l1 = xdns_ld64(src + k32 + 8);
	l2 = xdns_ld64(src + k32 + 16);
	l3 = xdns_ld64(src + k32 + 24);
#pragma unroll
	for (i = 0; i < XDNS_MOVE_MAX / 32; i++) {
		if (i * 32 + 32 > keep)
			break;
		if ((void *)(src + i * 32 + 32) > data_end || (void *)(dst + i * 32 + 32) > data_end)
			return -1;
		xdns_st64(dst + i * 32, xdns_ld64(src + i * 32));
		xdns_st64(dst + i * 32 + 8, xdns_ld64(src + i * 32 + 8));
		xdns_st64(dst + i * 32 + 16, xdns_ld64(src + i * 32 + 16));
		xdns_st64(dst + i * 32 + 24, xdns_ld64(src + i * 32 + 24));
	}
	if ((void *)(dst + k32 + 32) > data_end)
		return -1;
	xdns_st64(dst + k32, l0);
	xdns_st64(dst + k32 + 8, l1);
	xdns_st64(dst + k32 + 16, l2);
	xdns_st64(dst + k32 + 24, l3);
	return 0;
}

/*
 * Make the frame `grow` bytes longer (or shorter). The tail is tried first: no copy. Where the
 * driver leaves too little tailroom (veth and generic XDP hand over skb data with only
 * allocation slack behind it) the head grows into the XDP headroom instead, up to
 * XDNS_HEAD_GROW bytes and the tail for the rest, and the headers and question (the first
 * `keep` bytes, all that is still read) move to the new start, so every offset in `pkt` stays
 * valid. Every reply tries the tail first: on veth the slack often suffices, and the head
 * path writes lines in front of the frame that nothing has touched (a per-CPU hint that sent
 * every reply to the head after one refusal was slower: docs/perf).
 * Returns 0 when resized, 1 when the frame is unchanged (pass it on), -1 when the frame
 * changed and the move failed (drop).
 */
static __always_inline int xdns_resize(struct xdp_md *ctx, __u32 keep, long grow)
{
	__u32 head;

	if (grow == 0)
		return 0;
	if (!bpf_xdp_adjust_tail(ctx, (int)grow))
		return 0;
	if (grow < 0 || keep < 32 || keep > XDNS_MOVE_MAX)
		return 1;
	head = grow < XDNS_HEAD_GROW ? (__u32)grow : XDNS_HEAD_GROW;
	if (bpf_xdp_adjust_head(ctx, -(int)head))
		return 1;
	if ((__u32)grow > head && bpf_xdp_adjust_tail(ctx, (int)((__u32)grow - head))) {
		/* give the headroom back: nothing was moved yet */
		return bpf_xdp_adjust_head(ctx, (int)head) ? -1 : 1;
	}
	return xdns_move_down(ctx, head, keep);
}

/* IPv4 options are not echoed: move Ethernet + the fixed IPv4 header forward over them. */
static __always_inline int xdns_strip_ip_options(struct xdp_md *ctx, struct xdns_pkt *pkt)
{
	__u8 head[18 + 20];
	__u32 n = pkt->l3_off + 20, shift = pkt->ip_hlen - 20;

	if (pkt->ipv6 || shift == 0)
		return 0;
	if (n > sizeof(head) || n < 34 || shift > 40)
		return -1;
	if (bpf_xdp_load_bytes(ctx, 0, head, n))
		return -1;
	if (bpf_xdp_adjust_head(ctx, shift))
		return -1;
	if (bpf_xdp_store_bytes(ctx, 0, head, n))
		return -1;
	pkt->ip_hlen = 20;
	pkt->l4_off -= shift;
	pkt->dns_off -= shift;
	return 0;
}

/* Swap MACs, addresses and ports; set lengths; compute the IPv4 and UDP checksums. */
static __always_inline int xdns_put_l2_l4(struct xdp_md *ctx, const struct xdns_pkt *pkt, struct xdns_reply *r)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u32 l3 = pkt->l3_off, ulen = sizeof(struct udphdr) + r->dns_out;
	__u64 s = 0, macs, dst;
	__u16 port;

	if (l3 != 14 && l3 != 18)
		return -1;
	if ((void *)(eth + 1) > data_end)
		return -1;
	/*
	 * Swap the MACs (bytes 0..5 and 6..11) with one 8-byte and one 4-byte word each way,
	 * little-endian: the old source becomes bytes 0..5, the old destination bytes 6..11.
	 * Through the stack (three 6-byte copies) the verifier works less, but the swap was
	 * measurably slower (docs/perf/2026-11-27-code-comment-figures.md).
	 */
	macs = xdns_ld64(eth);
	dst = macs & 0xffffffffffffULL;
	xdns_st64(eth, (macs >> 48) | ((__u64) * (__u32 *)((__u8 *)eth + 8) << 16) | (dst << 48));
	*(__u32 *)((__u8 *)eth + 8) = (__u32)(dst >> 16);

	if (!pkt->ipv6) {
		struct iphdr *ip = data + l3;
		__u16 *w = (__u16 *)ip;
		__u32 a, b;
		__u64 addrs;

		udp = (void *)(ip + 1);
		if ((void *)(udp + 1) > data_end)
			return -1;
		/*
		 * Both checksums from values read before any header byte is written: summing the
		 * header back from memory loaded 16-bit words over bytes just stored with other
		 * widths, and each such load waits for those stores to retire. Words as they sit in
		 * memory (csum.h): version 4 and IHL 5 with the TOS, length, ID, fragment field, TTL
		 * and protocol, the addresses (swapping them changes no sum).
		 */
		a = ip->saddr;
		b = ip->daddr;
		addrs = (a & 0xffff) + (a >> 16) + (b & 0xffff) + (b >> 16);
		s = ((w[0] & bpf_htons(0x00ff)) | bpf_htons(0x4500)) + bpf_htons(sizeof(*ip) + ulen) + w[2] + w[3] +
		    bpf_htons((XDNS_REPLY_TTL << 8) | IPPROTO_UDP) + addrs;
		ip->saddr = b;
		ip->daddr = a;
		ip->ihl = 5;
		ip->tot_len = bpf_htons(sizeof(*ip) + ulen);
		ip->ttl = XDNS_REPLY_TTL;
		/* ten 16-bit words at most: far below 2^32, so two folding steps each */
		ip->check = ~xdns_csum_fold32(s);
		s = xdns_csum_swap(xdns_csum_fold32(addrs));
	} else {
		struct ipv6hdr *ip6 = data + l3;
		struct in6_addr a;

		udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > data_end)
			return -1;
		a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		ip6->payload_len = bpf_htons(ulen);
		ip6->hop_limit = XDNS_REPLY_TTL;
		s = xdns_csum_words(&ip6->saddr, 4);
	}
	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	udp->len = bpf_htons(ulen);
	udp->check = 0;
	/* pseudo header: addresses (above), protocol, UDP length; then the UDP header and DNS. */
	s += IPPROTO_UDP + ulen;
	s += bpf_ntohs(udp->source) + bpf_ntohs(udp->dest) + ulen;
	s += r->sum;
	port = ~xdns_csum_fold(s);
	udp->check = bpf_htons(port ? port : 0xffff);
	return 0;
}

/*
 * The slip (rrl.h): the query's header and question, TC=1, no record, no OPT (as xdns's
 * userspace slips and Knot's mod-rrl), from the gate's inputs in sc->guard. Returns
 * XDNS_ANSWERED_SLIP with the frame rewritten; XDNS_DROP_RRL when the frame could not be cut
 * (untouched: the limited answer is dropped instead); XDNS_DROP_REWRITE when a helper failed
 * halfway.
 */
static __always_inline enum xdns_verdict xdns_put_slip(struct xdp_md *ctx, struct xdns_scratch *sc)
{
	struct xdns_pkt p = {};
	struct xdns_query q = {};
	struct xdns_reply r = {};
	__u32 frame, qlen = sc->guard.gate_qlen;
	long grow;

	p.l3_off = sc->guard.gate_l3;
	p.ip_hlen = sc->guard.gate_ip_hlen;
	p.dns_off = sc->guard.gate_dns_off;
	p.ipv6 = sc->guard.gate_ipv6 != 0;
	p.l4_off = p.l3_off + p.ip_hlen;
	if ((p.l3_off != 14 && p.l3_off != 18) || p.dns_off > XDNS_DNS_OFF_MAX || qlen == 0 || qlen > 255 ||
	    p.ip_hlen < 20 || p.ip_hlen > 60)
		return XDNS_DROP_RRL;
	q.id = sc->guard.gate_id;
	r.body_at = XDNS_HDR_LEN + qlen + 4;
	r.dns_out = r.body_at;
	r.flags = sc->guard.gate_flags | XDNS_F_TC;
	r.sum = sc->guard.gate_sum;
	frame = ctx->data_end - ctx->data;
	grow = (long)(p.dns_off + r.dns_out) - (long)frame;
	/* never longer than the query, which holds the question: the tail only shrinks */
	if (grow > 0 || (grow < 0 && bpf_xdp_adjust_tail(ctx, (int)grow)))
		return XDNS_DROP_RRL;
	if (xdns_put_head(ctx, sc, &p, &q, &r))
		return XDNS_DROP_REWRITE;
	if (xdns_strip_ip_options(ctx, &p))
		return XDNS_DROP_REWRITE;
	if (xdns_put_l2_l4(ctx, &p, &r))
		return XDNS_DROP_REWRITE;
	return XDNS_ANSWERED_SLIP;
}

/*
 * The answer stage: the reply to query q from the answer at `vi` of xdns_vals (found by the lookup
 * or the question memo; `key` names its M or L body), written in place. Returns XDNS_ANSWERED
 * with the frame rewritten, a pass reason with the frame untouched, or XDNS_DROP_REWRITE when
 * a helper failed halfway. The one source of the answer for both ways in: the verifier walks
 * this once.
 */
static __always_inline enum xdns_verdict xdns_answer_stage(struct xdp_md *ctx, struct xdns_scratch *sc,
							    struct xdns_pkt *pkt, const struct xdns_query *q,
							    struct xdns_answer_key *key, __u32 vi)
{
	struct xdns_reply r = {};
	struct xdns_body_ref body = {};
	struct xdns_answer_s *a;
	enum xdns_verdict v;
	__u32 frame;
	long grow;
	int moved;

	a = xdns_val(vi);
	if (!a)
		return XDNS_PASS_NO_BODY;
	v = xdns_plan(q, &a->ans, &r, *(volatile __u16 *)&sc->pre.len, sc->pre.ns);
	if (v != XDNS_CONTINUE)
		return v;
	if (r.blen) {
		if (xdns_body_get(key, a, &body))
			return XDNS_PASS_NO_BODY;
	}
	/* the guard's gate (rrl.h): RRL, cookies, answer features; nothing without the guard */
	v = xdns_rrl_stage(ctx, sc, pkt, q, &a->ans, r.flags, r.dns_out, q->qsum, (__u64)XDNS_RRL_FROM_ZONE << 32 | vi);
	if (v != XDNS_CONTINUE)
		return v;
	if (XDNS_ECHO_ON)
		r.dns_out += sc->guard.echo_len & XDNS_COOKIE_OPT_LEN;  /* an echoed COOKIE (rrl.h) */
	frame = ctx->data_end - ctx->data;
	grow = (long)(pkt->dns_off + r.dns_out) - (long)frame;
	moved = xdns_resize(ctx, pkt->dns_off + XDNS_HDR_LEN + q->qlen + 4, grow);
	if (moved)
		return moved > 0 ? XDNS_PASS_TAIL : XDNS_DROP_REWRITE;
	if (!(r.flags & XDNS_F_TC) && sc->pre.len) {
		/* a signed zone's DO=1 NODATA: the apex part first */
		if (xdns_put_prefix(ctx, sc, pkt->dns_off, q->qlen))
			return XDNS_DROP_REWRITE;
		r.sum += sc->pre.sum;
	}
	if (xdns_put_dns(ctx, sc, pkt, q, &body, &a->ans, &r))
		return XDNS_DROP_REWRITE;
	if (xdns_strip_ip_options(ctx, pkt))
		return XDNS_DROP_REWRITE;
	if (xdns_put_l2_l4(ctx, pkt, &r))
		return XDNS_DROP_REWRITE;
	return XDNS_ANSWERED;
}

#endif /* XDNS_ANSWER_H */
