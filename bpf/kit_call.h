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
 * A cache miss `v` (pass_cache_miss, pass_cache_expired) of a query with these header
 * fields: iterated by xdns_kit_out_xdp. Returns `v` when it is no miss or the call goes
 * nowhere: the query passes to userspace as without kernel iteration.
 */
static __always_inline enum xdns_verdict xdns_kit_miss(struct xdp_md *ctx, const struct xdns_pkt *pkt,
							enum xdns_verdict v, __u16 id, __u16 flags, __u16 qtype,
							__u16 payload, __u8 has_opt, __u8 do_bit, __u8 cookie_len)
{
	struct xdns_kit_scratch *ks;

	if (!xdns_kit_cfg.on || (v != XDNS_PASS_CACHE_MISS && v != XDNS_PASS_CACHE_EXPIRED))
		return v;
	ks = xdns_kit_layout(pkt, v);
	if (!ks)
		return v;
	ks->pend.cid = id;
	ks->pend.cflags = flags;
	ks->pend.qtype = qtype;
	ks->pend.payload = has_opt ? (payload < 512 ? 512 : payload) : 0;  /* RFC 6891 6.2.5 */
	ks->pend.do_bit = do_bit;
	ks->pend.cookie = cookie_len;
	bpf_tail_call(ctx, &xdns_kit_prog, XDNS_KIT_SLOT_OUT);
	return v;
}

#endif /* XDNS_KIT_CALL_H */
