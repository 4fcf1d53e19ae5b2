/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * kit_call.h - where the resolver program hands a packet to kernel iteration (issue 32):
 * the two tail calls into xdns_kit_prog and what goes with them (the frame's layout, the
 * query's header fields) in the per-CPU xdns_kit_scratch. Everything else of kernel
 * iteration is in kit.h, in programs of their own. With xdns_kit_cfg.on = 0 (read-only
 * data) the verifier drops both.
 */
#ifndef XDNS_KIT_CALL_H
#define XDNS_KIT_CALL_H

#include "stage.h"
#include "parse.h"
#include "dns.h"
#include "kit_maps.h"

static __always_inline struct xdns_kit_scratch *xdns_kit_layout(const struct xdns_pkt *pkt, __u32 v)
{
	__u32 zero = 0;
	struct xdns_kit_scratch *ks = bpf_map_lookup_elem(&xdns_kit_scratch, &zero);

	if (!ks)
		return NULL;
	ks->l3_off = pkt->l3_off;
	ks->l4_off = pkt->l4_off;
	ks->dns_off = pkt->dns_off;
	ks->dns_len = pkt->dns_len;
	ks->ipv6 = pkt->ipv6;
	ks->verdict = v;
	return ks;
}

/*
 * A response to a reserved port (pkt->kit): checked by xdns_kit_in_xdp. Returns only when
 * the tail call goes nowhere (the program not set): then it passes as any response.
 */
static __always_inline enum xdns_verdict xdns_kit_response(struct xdp_md *ctx, const struct xdns_pkt *pkt)
{
	if (!xdns_kit_layout(pkt, XDNS_PASS_DNS_RESPONSE))
		return XDNS_PASS_DNS_RESPONSE;
	bpf_tail_call(ctx, &xdns_kit_prog, XDNS_KIT_SLOT_IN);
	return XDNS_PASS_DNS_RESPONSE;
}

/*
 * Before the cache stage, for a query `q` that may miss: its layout and header fields
 * written for xdns_kit_out_xdp, which xdns_xdp tail-calls on a miss (xdns_kit_go). Written
 * before the stage, not after it: reading `pkt` and `q` after the inlined stage kept them in
 * registers across it and grew the entry's stack by 32 bytes, past the 512 the verifier
 * allows with the guard's calls.
 */
static __always_inline void xdns_kit_miss(const struct xdns_pkt *pkt, const struct xdns_query *q)
{
	struct xdns_kit_scratch *ks;

	if (!xdns_kit_cfg.on)
		return;
	ks = xdns_kit_layout(pkt, XDNS_PASS_CACHE_MISS);
	if (!ks)
		return;
	ks->pend.cid = q->id;
	ks->pend.cflags = q->flags;
	ks->pend.qtype = q->qtype;
	ks->pend.payload = q->has_opt ? (q->payload < 512 ? 512 : q->payload) : 0;  /* RFC 6891 6.2.5 */
	ks->pend.do_bit = q->do_bit;
	ks->pend.cookie = q->cookie_len;
}

/*
 * In xdns_xdp, for the verdict `v` of xdns_handle: a miss xdns_kit_miss prepared goes to
 * xdns_kit_out_xdp. Returns only when the call goes nowhere (the program not set): then the
 * miss passes to userspace as without kernel iteration.
 */
static __always_inline void xdns_kit_go(struct xdp_md *ctx, enum xdns_verdict v)
{
	if (xdns_kit_cfg.on && (v == XDNS_PASS_CACHE_MISS || v == XDNS_PASS_CACHE_EXPIRED))
		bpf_tail_call(ctx, &xdns_kit_prog, XDNS_KIT_SLOT_OUT);
}

#endif /* XDNS_KIT_CALL_H */
