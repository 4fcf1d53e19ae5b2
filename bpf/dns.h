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

/*
 * Question name: copy up to 255 bytes into scratch, check labels (<= 63, no pointers), record
 * where each label starts, lowercase in place and sum the original bytes for the checksum.
 */
static __always_inline enum xdns_verdict xdns_parse_qname(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							   struct xdns_scratch *sc, struct xdns_query *q)
{
	__u32 avail = pkt->dns_len - XDNS_HDR_LEN;
	__u32 next = 0, nlab = 0, i;
	__u64 sum = 0;

	if (avail < 1)
		return XDNS_PASS_QNAME;
	if (avail > 255)
		avail = 255;
	if (bpf_xdp_load_bytes(ctx, pkt->dns_off + XDNS_HDR_LEN, sc->name, avail))
		return XDNS_PASS_QNAME;

	for (i = 0; i < 255; i++) {
		__u8 b;

		if (i >= avail)
			return XDNS_PASS_QNAME;
		b = sc->name[i];
		sum += xdns_csum_byte(i, b);
		if (i == next) {
			if (b > 63)
				return XDNS_PASS_QNAME;
			sc->label_off[nlab & 127] = i;
			nlab++;
			if (b == 0) {
				q->qlen = i + 1;
				q->nlab = nlab;
				q->qsum = sum;
				return XDNS_ANSWERED;
			}
			next = i + 1 + b;
		} else if (b >= 'A' && b <= 'Z') {
			sc->name[i] = b + ('a' - 'A');
		}
	}
	return XDNS_PASS_QNAME;
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
		off += XDNS_OPT_LEN + rdlen;
		if (off > pkt->dns_len)
			return XDNS_PASS_EDNS_BAD;
		q->has_opt = 1;
		q->payload = ((__u16)opt[3] << 8) | opt[4];
		q->do_bit = (opt[7] & 0x80) ? 1 : 0;
	}
	if (off != pkt->dns_len)
		return XDNS_PASS_TRAILING;
	return XDNS_ANSWERED;
}

#endif /* XDNS_DNS_H */
