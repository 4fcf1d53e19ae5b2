/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* dns.h - DNS header, question (lowercased copy in scratch) and optional OPT record. */
#ifndef XDNS_DNS_H
#define XDNS_DNS_H

#include "stage.h"
#include "parse.h"
#include "csum.h"
#include "hash.h"
#include "word.h"

#define XDNS_HDR_LEN 12
#define XDNS_OPT_LEN 11         /* root owner, type, class, ttl, rdlength */
#define XDNS_TYPE_OPT 41
#define XDNS_TYPE_DS 43
#define XDNS_CLASS_IN 1
#define XDNS_F_QR 0x8000
#define XDNS_F_OPCODE 0x7800
#define XDNS_F_AA 0x0400
#define XDNS_F_TC 0x0200
#define XDNS_F_RD 0x0100
#define XDNS_F_CD 0x0010
#define XDNS_EDNS_DO 0x8000
#define XDNS_BODY_FLAGS 0x040F  /* AA and RCODE: the only header bits a body sets */
#define XDNS_MAX_OPTIONS 8      /* EDNS options walked; more go to userspace */
/* Largest DNS offset: Ethernet + VLAN + IPv4 with options + UDP (18 + 60 + 8 = 86). */
#define XDNS_DNS_OFF_MAX 128

/* What the query asked, for the lookup and the answer. */
struct xdns_query {
	__u64 qsum;             /* unfolded checksum of the question bytes (from DNS offset 12) */
	__u32 qlen;             /* wire length of the question name */
	__u32 nlab;             /* entries in scratch.label_off (the root included) */
	__u16 id;               /* network order, echoed as is */
	__u16 flags;            /* host order */
	__u16 qtype;
	__u16 payload;          /* client's EDNS UDP payload size */
	__u8 has_opt;
	__u8 do_bit;
	__u8 cookie_len;        /* length of the first COOKIE option's data (0: none; rrl.h) */
	__u8 _pad;
	__u32 probe;            /* telemetry's probe option (telemetry.h): 0 absent, else data length + 1 */
	__u16 cookie_at;        /* ... the COOKIE option's frame offset */
	__u16 _pad2[3];
};

#include "response.h"

/*
 * Header: a query we may answer? (Direct packet access: the header is in the linear part.)
 * A response (QR=1) leaves here for the response stage (response.h), with only q->id and
 * q->flags set, and its verdict is final.
 */
static __always_inline enum xdns_verdict xdns_parse_header(struct xdp_md *ctx, struct xdns_scratch *sc,
							    const struct xdns_pkt *pkt, struct xdns_query *q,
							    __u16 *arcount)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = pkt->dns_off;
	__u16 *h;

	if (pkt->dns_len < XDNS_HDR_LEN || off > XDNS_DNS_OFF_MAX)
		return XDNS_PASS_DNS_SHORT;
	h = data + off;
	if ((void *)(h + 6) > data_end)
		return XDNS_PASS_DNS_SHORT;
	q->id = h[0];
	q->flags = bpf_ntohs(h[1]);
	if (q->flags & XDNS_F_QR)
		return xdns_response_stage(ctx, sc, pkt, q);
	if (pkt->kit)
		return XDNS_DROP_KIT_MALFORMED;        /* a query to a reserved port (kit.h) */
	if (q->flags & XDNS_F_OPCODE)
		return XDNS_PASS_DNS_OPCODE;
	if (h[2] != bpf_htons(1) || h[3] || h[4] || bpf_ntohs(h[5]) > 1)
		return XDNS_PASS_DNS_COUNTS;
	*arcount = bpf_ntohs(h[5]);
	return XDNS_CONTINUE;
}

/*
 * The words of one label (n = its length octet and bytes, 2..64) at name[pos]: eight bytes at
 * a time, the last word masked to the label. The original words go into the checksum
 * (`lanes`), the lowercased ones into the label hash (hash.h). Returns the label hash.
 */
static __always_inline __u64 xdns_label_words(struct xdns_scratch *sc, __u32 pos, __u32 n, __u64 *lanes)
{
	__u64 w, lw, h = xdns_cfg.seed;
	__u32 j, off, left;

#pragma unroll
	for (j = 0; j < 8; j++) {
		if (j * 8 >= n)
			break;
		off = (pos + j * 8) & 0xff;
		w = xdns_ld64(&sc->walk.name[off]);
		left = n - j * 8;
		if (left < 8)
			w &= (1ULL << (left * 8)) - 1;  /* little-endian: the label's bytes are low */
		*lanes += (w & 0xffffffff) + (w >> 32);
		lw = xdns_lower8(w);
		h = xdns_hash_step(h, lw);
	}
	return h;
}

/*
 * Label `index` of the question name: its length octet (<= 63: no compression pointer, no
 * extended label type) and that it fits, its offset, its words (checksum by the parity of the
 * label's offset, hash). Returns 1 after the root label or a bad one (qlen stays 0 then).
 * (Step of a batched bpf_loop body, maps.h.) State lives in the scratch map: values read back
 * from it are unknown to the verifier, so this is verified once per place it is inlined,
 * whatever the label lengths.
 */
static __always_inline long xdns_qname_label(__u64 index, void *arg)
{
	struct xdns_scratch *sc = ((struct xdns_walk_ctx *)arg)->sc;
	__u64 lanes = 0;
	__u32 pos, len;

	if (!sc)
		return 1;
	pos = *(volatile __u32 *)&sc->walk.next;
	if (pos >= sc->walk.avail || pos > 254 || index > 127)
		return 1;
	len = sc->walk.name[pos & 0xff];
	if (len > 63 || pos + 1 + len > sc->walk.avail)
		return 1;
	sc->walk.label_off[index & 127] = pos;
	if (len == 0) {
		sc->walk.lh[index & 127] = xdns_hash_step(xdns_cfg.seed, 0);
		sc->walk.qlen = pos + 1;
		sc->walk.nlab = (index & 127) + 1;
		return 1;
	}
	sc->walk.next = pos + 1 + len;
	sc->walk.lh[index & 127] = xdns_label_words(sc, pos, len + 1, &lanes);
	sc->walk.sum[pos & 1] += lanes;
	return 0;
}

XDNS_BATCHED(xdns_qname_labels, xdns_qname_label)

/*
 * Copy `avail` (8..255) bytes after the DNS header into sc->walk.name by direct packet access
 * (word.h, xdns_copy_words). Returns 1 when the helper must copy instead (shorter, or not in
 * the linear frame).
 */
static __always_inline int xdns_name_copy(struct xdp_md *ctx, __u32 dns_off, struct xdns_scratch *sc, __u32 avail)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *src;

	if (dns_off > XDNS_DNS_OFF_MAX || avail > 255)
		return 1;
	src = data + dns_off + XDNS_HDR_LEN;
	return xdns_copy_words(sc->walk.name, src, data_end, avail, sizeof(sc->walk.name));
}

/* The bytes after the DNS header, up to 255 (the name and what follows it), into sc->walk.name. */
static __always_inline enum xdns_verdict xdns_name_fetch(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							  struct xdns_scratch *sc)
{
	__u32 avail = pkt->dns_len - XDNS_HDR_LEN;

	if (pkt->dns_len <= XDNS_HDR_LEN)
		return XDNS_PASS_QNAME;
	if (avail > 255)
		avail = 255;
	/* avail is 1..255 here; the mask makes that visible to the verifier */
	avail = ((avail - 1) & 0xff) + 1;
	if (xdns_name_copy(ctx, pkt->dns_off, sc, avail) &&
	    bpf_xdp_load_bytes(ctx, pkt->dns_off + XDNS_HDR_LEN, sc->walk.name, avail))
		return XDNS_PASS_QNAME;
	sc->walk.avail = avail;
	return XDNS_CONTINUE;
}

/*
 * Question name (fetched into scratch): walk its labels (a bpf_loop, which keeps the
 * verifier's work independent of the name length): check them, record where each starts,
 * hash each (lowercased) and sum the original bytes into q->qsum.
 */
static __always_inline enum xdns_verdict xdns_qname_walk(struct xdns_scratch *sc, struct xdns_query *q)
{
	struct xdns_walk_ctx wc = { .sc = sc };
	__u32 qlen, nlab;

	sc->walk.qlen = 0;
	sc->walk.nlab = 0;
	sc->walk.next = 0;
	sc->walk.sum[0] = 0;
	sc->walk.sum[1] = 0;
	bpf_loop(XDNS_TURNS(128), xdns_qname_labels, &wc, 0);
	qlen = *(volatile __u32 *)&sc->walk.qlen;
	nlab = *(volatile __u32 *)&sc->walk.nlab;
	if (qlen == 0 || qlen > 255 || nlab == 0 || nlab > 128)
		return XDNS_PASS_QNAME;
	q->qlen = qlen;
	q->nlab = nlab;
	/*
	 * Words loaded little-endian at an even offset hold the big-endian 16-bit words byte
	 * swapped; at an odd offset they hold them as they count (the byte at the odd offset is a
	 * low half). The name starts at DNS offset 12 (even).
	 */
	q->qsum = xdns_csum_swap(xdns_csum_fold(sc->walk.sum[0])) + xdns_csum_fold(sc->walk.sum[1]);
	return XDNS_CONTINUE;
}

/*
 * EDNS options must tile the RDATA exactly (code, length, data), as userspace requires (else
 * FORMERR there); the first COOKIE option's place and length are kept in q for the guard's
 * cookie check (rrl.h), the telemetry probe option's length in q->probe (telemetry.h), the
 * others ignored. `at` is the frame offset of the RDATA. Returns 0 when well formed.
 */
static __always_inline int xdns_options_ok(struct xdp_md *ctx, __u32 at, __u32 rdlen, struct xdns_query *q)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 pos = 0, i, o, len, code, clen, big, x, m;
	__u8 *h;

	for (i = 0; i < XDNS_MAX_OPTIONS; i++) {
		if (pos == rdlen)
			return 0;
		if (pos + 4 > rdlen)
			return -1;
		o = at + pos;
		if (o > 0x3fff)
			return -1;
		h = data + o;
		if ((void *)(h + 4) > data_end)
			return -1;
		len = ((__u32)h[2] << 8) | h[3];
		code = ((__u32)h[0] << 8) | h[1];
		/*
		 * Both options below are noted without a branch: a branch per option would split
		 * the verifier's states (with the main program near its 1M-step limit).
		 * The first COOKIE option (code 10), for the guard's cookie check (rrl.h): its
		 * length (1 for an empty one; over 255, malformed anyway, kept as 255, never a
		 * valid cookie) and place. m is 1 only for a COOKIE while none was seen.
		 */
		m = ((code ^ 10) - 1) >> 31;
		m &= ((__u32)q->cookie_len - 1) >> 31;
		asm volatile("" : "+r"(m));
		clen = len | ((len - 1) >> 31);                 /* 0 -> 1 */
		big = (255 - clen) >> 31;                       /* 1 iff clen > 255 */
		clen = (clen & (big - 1)) | (255 & -big);
		q->cookie_len += m * clen;
		q->cookie_at += m * (o + 4);
		/* the telemetry probe option (XDNS_TEL_OPTION): its data length + 1 into q->probe */
		x = (code ^ XDNS_TEL_OPTION);
		m = (x - 1) >> 31;      /* 1 iff x == 0 (x < 2^16) */
		asm volatile("" : "+r"(m));
		q->probe |= m * (len + 1);
		pos += 4 + len;
	}
	return pos == rdlen ? 0 : -1;
}

/*
 * Type and class, then the optional OPT record, then nothing. (Direct packet access.)
 * `known_tc`: a memo hit, whose question (type and class included) is byte for byte one that
 * passed here before, and whose q->qsum already holds them (memo.h): only the OPT record and
 * the end are read.
 */
static __always_inline enum xdns_verdict xdns_parse_tail(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							  struct xdns_query *q, __u16 arcount, int known_tc)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = XDNS_HDR_LEN + q->qlen;     /* DNS-relative */
	__u32 at = pkt->dns_off;
	__u8 *tc, *opt;
	__u16 qclass;

	if (off + 4 > pkt->dns_len || at > XDNS_DNS_OFF_MAX || off > XDNS_HDR_LEN + 255)
		return XDNS_PASS_QNAME;
	if (!known_tc) {
		tc = data + at + off;
		if ((void *)(tc + 4) > data_end)
			return XDNS_PASS_QNAME;
		q->qtype = ((__u16)tc[0] << 8) | tc[1];
		qclass = ((__u16)tc[2] << 8) | tc[3];
		/* right after the name: at DNS offset 12 + qlen (the parity of qlen) */
		if (q->qlen & 1)
			q->qsum += xdns_csum_swap(q->qtype) + xdns_csum_swap(qclass);
		else
			q->qsum += (__u32)q->qtype + qclass;
		if (qclass != XDNS_CLASS_IN)
			return XDNS_PASS_QCLASS;
		if (q->qtype == XDNS_TYPE_OPT || (q->qtype >= 128 && q->qtype <= 254))
			return XDNS_PASS_QTYPE_META;
	}
	off += 4;

	q->has_opt = 0;
	q->do_bit = 0;
	q->payload = 0;
	q->cookie_len = 0;
	q->cookie_at = 0;
	q->probe = 0;
	if (arcount) {
		__u16 rdlen;

		if (off + XDNS_OPT_LEN > pkt->dns_len)
			return XDNS_PASS_EDNS_BAD;
		opt = data + at + off;
		if ((void *)(opt + XDNS_OPT_LEN) > data_end)
			return XDNS_PASS_EDNS_BAD;
		if (opt[0] != 0 || opt[1] != 0 || opt[2] != XDNS_TYPE_OPT)
			return XDNS_PASS_EDNS_BAD;
		if (opt[6] != 0)
			return XDNS_PASS_EDNS_VERSION;
		rdlen = ((__u16)opt[9] << 8) | opt[10];
		q->payload = ((__u16)opt[3] << 8) | opt[4];
		q->do_bit = (opt[7] & 0x80) ? 1 : 0;
		off += XDNS_OPT_LEN;
		if (off + rdlen > pkt->dns_len)
			return XDNS_PASS_EDNS_BAD;
		if (xdns_options_ok(ctx, at + off, rdlen, q))
			return XDNS_PASS_EDNS_BAD;
		off += rdlen;
		q->has_opt = 1;
	}
	if (off != pkt->dns_len)
		return XDNS_PASS_TRAILING;
	return XDNS_CONTINUE;
}

#endif /* XDNS_DNS_H */
