/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* stats.h - count a verdict and turn it into its XDP action (the one verdict -> action table). */
#ifndef XDNS_STATS_H
#define XDNS_STATS_H

#include "maps.h"
#include "stage.h"

/*
 * The XDP action of every verdict, and the only place that decides one. A verdict appended to
 * enum xdns_verdict gets its row here; a slot without a row (XDNS_CONTINUE's, bpf/stage.h)
 * is XDP_ABORTED: never sent back to the client.
 */
static const __u8 xdns_actions[XDNS_VERDICT_SLOTS] = {
	[XDNS_ANSWERED] = XDP_TX,
	[XDNS_PASS_NOT_IP] = XDP_PASS,
	[XDNS_PASS_L3_SHORT] = XDP_PASS,
	[XDNS_PASS_IP_FRAGMENT] = XDP_PASS,
	[XDNS_PASS_IPV6_EXT] = XDP_PASS,
	[XDNS_PASS_NOT_UDP] = XDP_PASS,
	[XDNS_PASS_NOT_OUR_ADDR] = XDP_PASS,
	[XDNS_PASS_UDP_BAD] = XDP_PASS,
	[XDNS_PASS_DNS_SHORT] = XDP_PASS,
	[XDNS_PASS_DNS_RESPONSE] = XDP_PASS,
	[XDNS_PASS_DNS_OPCODE] = XDP_PASS,
	[XDNS_PASS_DNS_COUNTS] = XDP_PASS,
	[XDNS_PASS_QNAME] = XDP_PASS,
	[XDNS_PASS_QCLASS] = XDP_PASS,
	[XDNS_PASS_QTYPE_META] = XDP_PASS,
	[XDNS_PASS_EDNS_BAD] = XDP_PASS,
	[XDNS_PASS_EDNS_VERSION] = XDP_PASS,
	[XDNS_PASS_TRAILING] = XDP_PASS,
	[XDNS_PASS_NO_ZONE] = XDP_PASS,
	[XDNS_PASS_NO_BODY] = XDP_PASS,
	[XDNS_PASS_BODY_LARGE] = XDP_PASS,
	[XDNS_PASS_FIXUPS] = XDP_PASS,
	[XDNS_PASS_NOT_LOADED] = XDP_PASS,
	[XDNS_PASS_TAIL] = XDP_PASS,
	[XDNS_DROP_REWRITE] = XDP_DROP,
	[XDNS_CACHE_ANSWERED] = XDP_TX,
	[XDNS_PASS_CACHE_MISS] = XDP_PASS,
	[XDNS_PASS_CACHE_EXPIRED] = XDP_PASS,
	[XDNS_PASS_NOT_ALLOWED] = XDP_PASS,
	[XDNS_PASS_RD0] = XDP_PASS,
	[XDNS_PASS_CACHE_CD] = XDP_PASS,
	[XDNS_PASS_CACHE_RACE] = XDP_PASS,
	[XDNS_DROP_CACHE_RACE] = XDP_DROP,
	[XDNS_DROP_BLOCKED] = XDP_DROP,
	[XDNS_DROP_TIER] = XDP_DROP,
	[XDNS_DROP_NAME] = XDP_DROP,
	[XDNS_PASS_DNSSEC] = XDP_PASS,
	[XDNS_DROP_RRL] = XDP_DROP,
	[XDNS_ANSWERED_SLIP] = XDP_TX,
	[XDNS_PASS_COOKIE] = XDP_PASS,
	[XDNS_PASS_COOKIE_NEW] = XDP_PASS,
	[XDNS_KIT_SENT] = XDP_TX,
	[XDNS_KIT_REDIRECTED] = XDP_REDIRECT,
	[XDNS_PASS_KIT_HANDOVER] = XDP_PASS,
	[XDNS_PASS_KIT_RESPONSE] = XDP_PASS,
	[XDNS_DROP_KIT_UNSOLICITED] = XDP_DROP,
	[XDNS_DROP_KIT_SRC_PORT] = XDP_DROP,
	[XDNS_DROP_KIT_QUESTION] = XDP_DROP,
	[XDNS_DROP_KIT_MALFORMED] = XDP_DROP,
	[XDNS_KIT_REFERRAL_FOLLOWED] = XDP_TX,
	[XDNS_KIT_REFERRAL_REDIRECTED] = XDP_REDIRECT,
	[XDNS_PASS_KIT_HOP_LIMIT] = XDP_PASS,
	[XDNS_PASS_KIT_GLUELESS] = XDP_PASS,
	[XDNS_PASS_KIT_BAILIWICK] = XDP_PASS,
	[XDNS_PASS_KIT_UNPARSED] = XDP_PASS,
	[XDNS_PASS_KIT_NO_HOP] = XDP_PASS,
	[XDNS_KIT_HANDED] = XDP_DROP,
	[XDNS_KIT_ANSWERED] = XDP_TX,
	[XDNS_KIT_ANSWERED_REDIRECTED] = XDP_REDIRECT,
};
_Static_assert(XDNS_VERDICT_MAX == XDNS_KIT_ANSWERED_REDIRECTED + 1, "a new verdict needs its row in xdns_actions");

/*
 * Count `v` on this CPU (in its scratch value) and return the XDP action it stands for.
 *
 * The empty asm hides v's value from clang, so that it does not fold the action into every
 * one of the handler's return sites (each early exit would then set its own flags for "is
 * it TX, is it DROP", on the answered path too): a return site sets v alone.
 */
static __always_inline int xdns_verdict(struct xdns_scratch *sc, enum xdns_verdict v)
{
	asm volatile("" : "+r"(v));
	v &= XDNS_VERDICT_SLOTS - 1;
	sc->verdicts[v]++;
	return xdns_actions[v];
}

#endif /* XDNS_STATS_H */
