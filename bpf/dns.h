/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* dns.h - DNS header, question (lowercased copy in scratch) and optional OPT record. */
#ifndef XDNS_DNS_H
#define XDNS_DNS_H

#include "parse.h"
#include "csum.h"

#define XDNS_HDR_LEN 12
#define XDNS_OPT_LEN 11         /* root owner, type, class, ttl, rdlength */
#define XDNS_TYPE_OPT 41
#define XDNS_CLASS_IN 1
#define XDNS_F_QR 0x8000
#define XDNS_F_OPCODE 0x7800
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
	__u8 _pad[2];
};

/* Header: a query we may answer? (Direct packet access: the header is in the linear part.) */
static __always_inline enum xdns_verdict xdns_parse_header(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							    struct xdns_query *q, __u16 *arcount)
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
		return XDNS_PASS_DNS_RESPONSE;
	if (q->flags & XDNS_F_OPCODE)
		return XDNS_PASS_DNS_OPCODE;
	if (h[2] != bpf_htons(1) || h[3] || h[4] || bpf_ntohs(h[5]) > 1)
		return XDNS_PASS_DNS_COUNTS;
	*arcount = bpf_ntohs(h[5]);
	return XDNS_ANSWERED;
}

/*
 * One label of the question name (bpf_loop body, `index` = label number): check its length
 * octet (<= 63: no compression pointer, no extended label type), record where it starts and
 * hop to the next label. The bytes themselves are summed and lowercased by the hash pass
 * (lookup.h), which reads each byte once anyway. State lives in the scratch map.
 */
static long xdns_qname_label(__u64 index, void *arg)
{
	struct xdns_scratch *sc = ((struct xdns_walk_ctx *)arg)->sc;
	__u64 pos, len;

	if (!sc)
		return 1;
	pos = sc->next;
	if (pos >= sc->avail || pos > 254) {
		sc->bad = 1;
		return 1;
	}
	len = sc->name[pos];
	if (len > 63) {
		sc->bad = 1;
		return 1;
	}
	sc->label_off[index & 127] = pos;
	sc->nlab = (index & 127) + 1;
	if (len == 0) {
		sc->qlen = pos + 1;
		return 1;
	}
	if (pos + 1 + len > sc->avail) {
		sc->bad = 1;
		return 1;
	}
	sc->next = pos + 1 + len;
	return 0;
}

/*
 * Copy `avail` (8..255) bytes after the DNS header into sc->name by direct packet access,
 * eight at a time, the last word ending exactly at `avail` (overlapping the one before).
 * Returns 1 when the helper must copy instead (shorter, or not in the linear frame).
 */
static __always_inline int xdns_name_copy(struct xdp_md *ctx, __u32 dns_off, struct xdns_scratch *sc, __u32 avail)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *src, *last;
	__u32 t;
	__u64 w;
	int i;

	if (dns_off > XDNS_DNS_OFF_MAX || avail < 8 || avail > 255)
		return 1;
	src = data + dns_off + XDNS_HDR_LEN;
#pragma unroll
	for (i = 0; i < 31; i++) {
		if (i * 8 + 8 > avail)
			break;
		if ((void *)(src + i * 8 + 8) > data_end)
			return 1;
		__builtin_memcpy(&w, src + i * 8, 8);
		__builtin_memcpy(&sc->name[i * 8], &w, 8);
	}
	if (avail & 7) {
		t = (avail - 8) & 255;
		if (t > 247)
			return 1;
		last = src + t;
		if ((void *)(last + 8) > data_end)
			return 1;
		__builtin_memcpy(&w, last, 8);
		__builtin_memcpy(&sc->name[t], &w, 8);
	}
	return 0;
}

/*
 * Question name: copy up to 255 bytes into scratch, check labels (<= 63, no pointers) and
 * record where each label starts. A bpf_loop over labels keeps the verifier's work independent
 * of the name length. Lowercasing and the checksum of the original bytes come with the hash
 * pass (xdns_hash_label): q->qsum gets sc->sum after it.
 */
static __always_inline enum xdns_verdict xdns_parse_qname(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							   struct xdns_scratch *sc, struct xdns_query *q)
{
	struct xdns_walk_ctx wc = { .sc = sc };
	__u32 avail = pkt->dns_len - XDNS_HDR_LEN, qlen, nlab;

	if (pkt->dns_len <= XDNS_HDR_LEN)
		return XDNS_PASS_QNAME;
	if (avail > 255)
		avail = 255;
	/* avail is 1..255 here; the mask makes that visible to the verifier */
	avail = ((avail - 1) & 0xff) + 1;
	if (xdns_name_copy(ctx, pkt->dns_off, sc, avail) &&
	    bpf_xdp_load_bytes(ctx, pkt->dns_off + XDNS_HDR_LEN, sc->name, avail))
		return XDNS_PASS_QNAME;
	sc->avail = avail;
	sc->next = 0;
	sc->nlab = 0;
	sc->qlen = 0;
	sc->bad = 0;
	bpf_loop(128, xdns_qname_label, &wc, 0);
	qlen = sc->qlen;
	nlab = sc->nlab;
	if (sc->bad || qlen == 0 || qlen > 255 || nlab == 0 || nlab > 128)
		return XDNS_PASS_QNAME;
	q->qlen = qlen;
	q->nlab = nlab;
	q->qsum = 0;
	return XDNS_ANSWERED;
}

/*
 * EDNS options are ignored but must tile the RDATA exactly (code, length, data), as userspace
 * requires (else FORMERR there). `at` is the frame offset of the RDATA. Returns 0 when well
 * formed.
 */
static __always_inline int xdns_options_ok(struct xdp_md *ctx, __u32 at, __u32 rdlen)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 pos = 0, i, o;
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
		pos += 4 + (((__u32)h[2] << 8) | h[3]);
	}
	return pos == rdlen ? 0 : -1;
}

/* Type and class, then the optional OPT record, then nothing. (Direct packet access.) */
static __always_inline enum xdns_verdict xdns_parse_tail(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							  struct xdns_query *q, __u16 arcount)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = XDNS_HDR_LEN + q->qlen;     /* DNS-relative */
	__u32 at = pkt->dns_off;
	__u8 *tc, *opt;
	__u16 qclass;

	if (off + 4 > pkt->dns_len || at > XDNS_DNS_OFF_MAX || off > XDNS_HDR_LEN + 255)
		return XDNS_PASS_QNAME;
	tc = data + at + off;
	if ((void *)(tc + 4) > data_end)
		return XDNS_PASS_QNAME;
	q->qtype = ((__u16)tc[0] << 8) | tc[1];
	qclass = ((__u16)tc[2] << 8) | tc[3];
	/* type and class start right after the name: at DNS offset 12 + qlen (parity of qlen) */
	if (q->qlen & 1)
		q->qsum += xdns_csum_swap(q->qtype) + xdns_csum_swap(qclass);
	else
		q->qsum += (__u32)q->qtype + qclass;
	if (qclass != XDNS_CLASS_IN)
		return XDNS_PASS_QCLASS;
	if (q->qtype == XDNS_TYPE_OPT || (q->qtype >= 128 && q->qtype <= 254))
		return XDNS_PASS_QTYPE_META;
	off += 4;

	q->has_opt = 0;
	q->do_bit = 0;
	q->payload = 0;
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
		if (xdns_options_ok(ctx, at + off, rdlen))
			return XDNS_PASS_EDNS_BAD;
		off += rdlen;
		q->has_opt = 1;
	}
	if (off != pkt->dns_len)
		return XDNS_PASS_TRAILING;
	return XDNS_ANSWERED;
}

#endif /* XDNS_DNS_H */
