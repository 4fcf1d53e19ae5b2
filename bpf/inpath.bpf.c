// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * inpath.bpf.c - the transparent in-path DNS cache (issue 26), its own XDP program, apart
 * from xdns.bpf.c (whose verifier budget it leaves alone). Attached to the client and the
 * upstream interfaces of a host that forwards traffic:
 *
 *   client interface    a UDP query to a configured server address, port 53: answered from
 *                       the cache (XDP_TX, on behalf of the server: inpath.h), or recorded
 *                       as forwarded and forwarded
 *   upstream interface  a UDP response from a configured server, port 53: learnt when it
 *                       answers a recorded query (inpath_learn.h); forwarded untouched
 *   anything else       forwarded untouched (XDP_PASS): the kernel routes it as before
 *
 * Forwarding is the kernel's (XDP_PASS), or with `redirect` bpf_fib_lookup + bpf_redirect
 * for the DNS packets the program let through. Every outcome is an enum
 * xdns_inpath_verdict counted per CPU in the scratch value; no state is needed to forward:
 * detached, the host forwards as before.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xdns_abi.h"
#include "inpath_maps.h"
#include "inpath.h"
#include "inpath_learn.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

static __always_inline enum xdns_inpath_verdict xdns_inpath_handle(struct xdp_md *ctx, struct xdns_inpath_scratch *sc,
								   __u32 *rolep)
{
	struct xdns_inpath_pkt pkt = {};
	__u32 role;

	if (xdns_inpath_parse(ctx, &pkt))
		return XDNS_INPATH_PASS_OTHER;
	role = xdns_inpath_role(ctx->ingress_ifindex);
	*rolep = role;
	if ((role & XDNS_INPATH_ROLE_CLIENT) && pkt.dport == bpf_htons(XDNS_INPATH_PORT) && xdns_inpath_server(pkt.dst))
		return xdns_inpath_query(ctx, sc, &pkt);
	if ((role & XDNS_INPATH_ROLE_UPSTREAM) && pkt.sport == bpf_htons(XDNS_INPATH_PORT) && xdns_inpath_server(pkt.src))
		return xdns_inpath_learn(ctx, sc, &pkt);
	return XDNS_INPATH_PASS_OTHER;
}

SEC("xdp")
int xdns_inpath(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct xdns_inpath_scratch *sc = bpf_map_lookup_elem(&xdns_inpath_scratch, &zero);
	enum xdns_inpath_verdict v;
	__u32 role = 0;

	if (!sc)
		return XDP_PASS;        /* never: key 0 of an array map always exists */
	v = xdns_inpath_handle(ctx, sc, &role);
	sc->verdicts[v & (XDNS_INPATH_SLOTS - 1)]++;
	if (v == XDNS_INPATH_ANSWERED || v == XDNS_INPATH_ANSWERED_TC)
		return XDP_TX;
	if (v == XDNS_INPATH_DROP_REWRITE)
		return XDP_DROP;
	if (v == XDNS_INPATH_PASS_OTHER || !xdns_inpath_cfg.redirect)
		return XDP_PASS;
	return xdns_inpath_forward(ctx, sc, role);
}
