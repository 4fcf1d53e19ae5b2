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

/* Header: a query we may answer? */
static __always_inline enum xdns_verdict xdns_parse_header(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							    struct xdns_query *q, __u16 *arcount)
{
	__u16 h[6];

	if (pkt->dns_len < XDNS_HDR_LEN)
		return XDNS_PASS_DNS_SHORT;
	if (bpf_xdp_load_bytes(ctx, pkt->dns_off, h, sizeof(h)))
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

/* State of the question-name walk (bpf_loop context). */
struct xdns_qname_walk {
	__u64 sum;              /* checksum of the original name bytes */
	__u32 avail;            /* name bytes copied into scratch */
	__u32 next;             /* offset of the next length octet */
	__u32 nlab;             /* label starts recorded */
	__u32 qlen;             /* set (non-zero) once the root label is read */
	__u32 bad;
	__u32 _pad;
};

/* One byte of the question name: check, record label starts, lowercase, sum. */
static long xdns_qname_step(__u64 index, void *arg)
{
	struct xdns_qname_walk *w = arg;
	struct xdns_scratch *sc;
	__u32 zero = 0, i = index & 255;
	__u8 b;

	sc = bpf_map_lookup_elem(&xdns_scratch, &zero);
	if (!sc || i >= w->avail) {
		w->bad = 1;
		return 1;
	}
	b = sc->name[i];
	w->sum += xdns_csum_byte(i, b);
	if (i != w->next) {
		if (b >= 'A' && b <= 'Z')
			sc->name[i] = b + ('a' - 'A');
		return 0;
	}
	if (b > 63) {
		w->bad = 1;
		return 1;
	}
	sc->label_off[w->nlab & 127] = i;
	w->nlab++;
	if (b == 0) {
		w->qlen = i + 1;
		return 1;
	}
	w->next = i + 1 + b;
	return 0;
}

/*
 * Question name: copy up to 255 bytes into scratch, check labels (<= 63, no pointers), record
 * where each label starts, lowercase in place and sum the original bytes for the checksum.
 * A bpf_loop keeps the verifier's work independent of the name length.
 */
static __always_inline enum xdns_verdict xdns_parse_qname(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							   struct xdns_scratch *sc, struct xdns_query *q)
{
	struct xdns_qname_walk w = {};
	__u32 avail = pkt->dns_len - XDNS_HDR_LEN;

	if (pkt->dns_len <= XDNS_HDR_LEN)
		return XDNS_PASS_QNAME;
	if (avail > 255)
		avail = 255;
	/* avail is 1..255 here; the mask makes that visible to the verifier */
	avail = ((avail - 1) & 0xff) + 1;
	if (bpf_xdp_load_bytes(ctx, pkt->dns_off + XDNS_HDR_LEN, sc->name, avail))
		return XDNS_PASS_QNAME;
	w.avail = avail;
	bpf_loop(255, xdns_qname_step, &w, 0);
	if (w.bad || w.qlen == 0 || w.qlen > 255)
		return XDNS_PASS_QNAME;
	q->qlen = w.qlen;
	q->nlab = w.nlab;
	q->qsum = w.sum;
	return XDNS_ANSWERED;
}

/*
 * EDNS options are ignored but must tile the RDATA exactly (code, length, data), as userspace
 * requires (else FORMERR there). Returns 0 when well formed.
 */
static __always_inline int xdns_options_ok(struct xdp_md *ctx, __u32 at, __u32 rdlen)
{
	__u32 pos = 0, i;
	__u8 h[4];

	for (i = 0; i < XDNS_MAX_OPTIONS; i++) {
		if (pos == rdlen)
			return 0;
		if (pos + 4 > rdlen)
			return -1;
		if (bpf_xdp_load_bytes(ctx, at + pos, h, 4))
			return -1;
		pos += 4 + (((__u32)h[2] << 8) | h[3]);
	}
	return pos == rdlen ? 0 : -1;
}

/* Type and class, then the optional OPT record, then nothing. */
static __always_inline enum xdns_verdict xdns_parse_tail(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							  struct xdns_query *q, __u16 arcount)
{
	__u32 off = XDNS_HDR_LEN + q->qlen;     /* DNS-relative */
	__u8 tc[4];
	__u8 opt[XDNS_OPT_LEN];
	__u16 qclass;

	if (off + 4 > pkt->dns_len)
		return XDNS_PASS_QNAME;
	if (bpf_xdp_load_bytes(ctx, pkt->dns_off + off, tc, 4))
		return XDNS_PASS_QNAME;
	q->qtype = ((__u16)tc[0] << 8) | tc[1];
	qclass = ((__u16)tc[2] << 8) | tc[3];
	q->qsum += xdns_csum_buf(tc, 4, q->qlen);
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
		if (bpf_xdp_load_bytes(ctx, pkt->dns_off + off, opt, XDNS_OPT_LEN))
			return XDNS_PASS_EDNS_BAD;
		if (opt[0] != 0 || opt[1] != 0 || opt[2] != XDNS_TYPE_OPT)
			return XDNS_PASS_EDNS_BAD;
		if (opt[6] != 0)
			return XDNS_PASS_EDNS_VERSION;
		rdlen = ((__u16)opt[9] << 8) | opt[10];
		off += XDNS_OPT_LEN;
		if (off + rdlen > pkt->dns_len)
			return XDNS_PASS_EDNS_BAD;
		if (xdns_options_ok(ctx, pkt->dns_off + off, rdlen))
			return XDNS_PASS_EDNS_BAD;
		off += rdlen;
		q->has_opt = 1;
		q->payload = ((__u16)opt[3] << 8) | opt[4];
		q->do_bit = (opt[7] & 0x80) ? 1 : 0;
	}
	if (off != pkt->dns_len)
		return XDNS_PASS_TRAILING;
	return XDNS_ANSWERED;
}

#endif /* XDNS_DNS_H */
