/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * guard.h - the guard stage (issue 25): the source checks every UDP packet to a listen
 * address meets before its DNS header is read.
 *
 * In order: the modelled hardware tier (a K-slot table standing for a NIC's filter table,
 * XDNS_DROP_TIER), the per-source features for detection (xdns_cfg.guard_features), then the
 * source lists, blocklist and allowlist merged by userspace (xdns_abi.h) so that the longest
 * matching prefix decides: XDNS_DROP_BLOCKED, or on. Packets the parse stage passes (ARP,
 * ND, other ports and addresses, fragments) never get here. With xdns_cfg.guard clear
 * (read-only data) the stage is one branch the verifier drops, no map lookup.
 */
#ifndef XDNS_GUARD_H
#define XDNS_GUARD_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "stage.h"
#include "maps.h"
#include "parse.h"
#include "word.h"

/* Count the packet into its source prefix's slot of the current interval (xdns_abi.h). */
static __always_inline void xdns_guard_count(struct xdns_scratch *sc, __u64 a0, __u8 family, __u32 bytes)
{
	struct xdns_guard_feat_key k = {};
	struct xdns_guard_feat *f;
	struct xdns_guard_slot *s;
	__u32 key = XDNS_GUARD_CTL_INTERVAL, *ivp, iv;

	ivp = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	iv = ivp ? *ivp : 0;
	/* the first 3 (IPv4) or 7 (IPv6) address bytes of the word, whatever the byte order */
	static const __u8 m4[8] = { 0xff, 0xff, 0xff }, m6[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	__u64 mask;

	__builtin_memcpy(&mask, family == 4 ? m4 : m6, 8);
	k.addr = a0 & mask;
	k.family = family;
	f = bpf_map_lookup_elem(&xdns_guard_feat, &k);
	if (!f) {
		struct xdns_guard_feat n = {};

		n.slot[iv & 1].interval = iv;
		n.slot[iv & 1].packets = 1;
		n.slot[iv & 1].bytes = bytes;
		if (bpf_map_update_elem(&xdns_guard_feat, &k, &n, BPF_NOEXIST))
			sc->guard.feat_full++;
		return;
	}
	s = &f->slot[iv & 1];
	if (s->interval != iv) {
		s->interval = iv;
		s->packets = 0;
		s->bytes = 0;
	}
	s->packets++;
	s->bytes += bytes;
}

/* The entry of the longest listed prefix holding the source, by hash per length in use. */
static __always_inline struct xdns_guard_entry *xdns_guard_probe(const struct xdns_guard_len *lens, __u32 n,
								 __u64 a0, __u64 a1, __u8 family, __u8 par)
{
	struct xdns_guard_key k = {};
	struct xdns_guard_entry *e;
	__u32 i;

	k.family = family;
	k.gen = par;
	for (i = 0; i < XDNS_GUARD_LENS; i++) {
		if (i >= n)
			break;
		k.addr[0] = a0 & lens[i].mask[0];
		k.addr[1] = a1 & lens[i].mask[1];
		k.len = lens[i].len;
		e = bpf_map_lookup_elem(&xdns_guard_hash, &k);
		if (e)
			return e;
	}
	return NULL;
}

/*
 * The stage's work: a global function, a BPF subprogram the verifier checks once, alone. Its
 * paths (tier slots, lengths probed, structures) would otherwise multiply the states every
 * later stage is verified in (inlined, it pushed the resolver program past the 1M limit).
 * One call per packet that reaches it (bpf/README.md, "Composition and budget").
 */
__attribute__((noinline)) int xdns_guard_check(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 l3, __u32 ipv6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_guard_entry *e = NULL;
	struct xdns_guard_list *l;
	__u32 key, *vp, bytes, i, mode, n;
	__u64 a0, a1 = 0;
	__u8 family, par;

	if (!xdns_cfg.guard || !sc)
		return XDNS_CONTINUE;
	if (l3 != 14 && l3 != 18)
		return XDNS_CONTINUE;
	/* the source as xdns_allow_prefix.addr holds an address: two native-endian words */
	if (ipv6) {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > data_end)
			return XDNS_CONTINUE;
		a0 = xdns_ld64(&ip6->saddr);
		a1 = xdns_ld64((__u8 *)&ip6->saddr + 8);
		family = 6;
		bytes = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	} else {
		struct iphdr *ip = data + l3;

		if ((void *)(ip + 1) > data_end)
			return XDNS_CONTINUE;
		a0 = ip->saddr;
		family = 4;
		bytes = bpf_ntohs(ip->tot_len);
	}

	/* the modelled hardware tier: as a NIC's table, before anything else */
	key = XDNS_GUARD_CTL_TIER;
	vp = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	key = vp ? *vp : 0;
	if (key == 1 || key == 2) {
		struct xdns_guard_tier *t = bpf_map_lookup_elem(&xdns_guard_tier, &key);

		if (t) {
			for (i = 0; i < XDNS_GUARD_TIER_SLOTS; i++) {
				const struct xdns_allow_prefix *p = &t->p[i];

				if (i >= t->n)
					break;
				if (p->family == family && (a0 & p->mask[0]) == p->addr[0] &&
				    (a1 & p->mask[1]) == p->addr[1]) {
					sc->guard.tier_hits[i]++;
					return XDNS_DROP_TIER;
				}
			}
		}
	}

	if (xdns_cfg.guard_features)
		xdns_guard_count(sc, a0, family, bytes);

	key = XDNS_GUARD_CTL_GEN;
	vp = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!vp || *vp == 0)
		return XDNS_CONTINUE;
	par = *vp & 1;
	key = par;
	l = bpf_map_lookup_elem(&xdns_guard_lists, &key);
	if (!l)
		return XDNS_CONTINUE;
	mode = family == 4 ? l->mode4 : l->mode6;
	if (mode == XDNS_GUARD_HASH) {
		if (family == 4)
			e = xdns_guard_probe(l->len4, l->n4, a0, a1, family, par);
		else
			e = xdns_guard_probe(l->len6, l->n6, a0, a1, family, par);
	} else if (mode == XDNS_GUARD_LPM) {
		struct xdns_guard_lpm_key k = {};

		n = family == 4 ? 32 : 128;
		k.prefixlen = 16 + n;
		k.gen = par;
		k.family = family;
		__builtin_memcpy(&k.addr[0], &a0, 8);
		__builtin_memcpy(&k.addr[8], &a1, 8);
		e = bpf_map_lookup_elem(&xdns_guard_lpm, &k);
	}
	if (!e)
		return XDNS_CONTINUE;
	if (e->action != XDNS_GUARD_BLOCK) {
		sc->guard.allowed++;
		return XDNS_CONTINUE;
	}
	e->drops++;
	return XDNS_DROP_BLOCKED;
}

/* The stage: nothing at all unless xdns_cfg.guard (read-only data: the verifier drops the call). */
static __always_inline enum xdns_verdict xdns_guard_stage(struct xdp_md *ctx, struct xdns_scratch *sc,
							   const struct xdns_pkt *pkt)
{
	if (!xdns_cfg.guard)
		return XDNS_CONTINUE;
	return (enum xdns_verdict)xdns_guard_check(ctx, sc, pkt->l3_off, pkt->ipv6);
}

#endif /* XDNS_GUARD_H */
