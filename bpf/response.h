/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * response.h - the response stage: every DNS response (QR=1) that reaches the program.
 *
 * Responses are traffic too: the in-path cache and kernel iteration (later stages) learn from
 * them, and must see them before anything passes them on. They arrive here from
 * xdns_parse_header (dns.h) as soon as QR is read, before any query stage, with the layers
 * parsed (struct xdns_pkt) and the header's ID and flags (struct xdns_query: id, flags;
 * nothing else of it is set). Called there, where the flags are in a register, rather than
 * from the entry program after the header check: testing QR a second time there cost about
 * 1% of a cache hit (docs/perf/2026-11-27-stage-contract.md). Today the stage learns nothing and passes every one to userspace with
 * XDNS_PASS_DNS_RESPONSE, as the header check did before it existed.
 *
 * Which responses reach it: those that parse.h lets through, UDP to a listen address and
 * port, or, with kernel iteration on, to a port of its reserved range (pkt->kit): those go
 * on by a tail call to xdns_kit_in_xdp (kit.h), which trusts only what it asked for (server,
 * port, ID, question with its 0x20 case).
 *
 * Its scratch (struct xdns_response_scratch) and counters are empty until it does something;
 * its verdict is XDNS_PASS_DNS_RESPONSE.
 */
#ifndef XDNS_RESPONSE_H
#define XDNS_RESPONSE_H

#include "stage.h"
#include "parse.h"
#include "kit_call.h"

struct xdns_query;      /* dns.h, which calls this stage */

static __always_inline enum xdns_verdict xdns_response_stage(struct xdp_md *ctx, struct xdns_scratch *sc,
							      const struct xdns_pkt *pkt,
							      const struct xdns_query *q)
{
	if (pkt->kit)   /* to a reserved port: kernel iteration's (kit.h) */
		return xdns_kit_response(ctx, pkt);
	return XDNS_PASS_DNS_RESPONSE;
}

#endif /* XDNS_RESPONSE_H */
