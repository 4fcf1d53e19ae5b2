/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* stats.h - count a verdict and turn it into an XDP action. */
#ifndef XDNS_STATS_H
#define XDNS_STATS_H

#include "maps.h"

/* Count `v` on this CPU (in its scratch value) and return the XDP action it stands for. */
static __always_inline int xdns_verdict(struct xdns_scratch *sc, enum xdns_verdict v)
{
	sc->verdicts[v & (XDNS_VERDICT_SLOTS - 1)]++;
	if (v == XDNS_ANSWERED || v == XDNS_CACHE_ANSWERED)
		return XDP_TX;
	if (v == XDNS_DROP_REWRITE || v == XDNS_DROP_CACHE_RACE)
		return XDP_DROP;
	return XDP_PASS;
}

#endif /* XDNS_STATS_H */
