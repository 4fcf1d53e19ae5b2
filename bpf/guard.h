/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * guard.h - the guard stage (issue 25): the source checks every UDP packet to a listen
 * address meets before its DNS header is read.
 *
 * In order: the modelled hardware tier (a K-slot table standing for a NIC's filter table,
 * XDNS_DROP_TIER), the per-source features for detection (xdns_cfg.guard_features), then the
 * source lists, blocklist and allowlist merged by userspace (xdns_abi.h) so that the longest
 * matching prefix decides: XDNS_DROP_BLOCKED, or on (an allow prefix's match is noted in
 * sc->guard.src_allowed, which exempts the packet's answer from the kernel's RRL: rrl.h). Packets the parse stage passes (ARP,
 * ND, other ports and addresses, fragments) never get here. With xdns_cfg.guard clear
 * (read-only data) the stage is one branch the verifier drops, no map lookup.
 *
 * Name blocks come once the question's bytes are fetched (xdns_guard_name_stage, before the
 * seen stage, so no memo answers a blocked name): the name is walked and its suffixes hashed
 * as the lookup does, and each is looked up, deepest first (XDNS_DROP_NAME). Only while a
 * name list is loaded; otherwise one call and one array read.
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
#include "hash.h"
#include "dns.h"
#include "lookup.h"

/*
 * Count one event of `len` bytes into slot iv & 1 of the feature at `key` in `map` (a slot
 * still holding another interval starts again), or insert the event, built in the scratch's
 * sc->guard.gate_feat (off the stack: the program's frames are near their 512-byte limit);
 * a full map counts into *full. Every feature map of
 * xdns_abi.h counts this way but the whole-name one, whose `bytes` is its parent's hash.
 */
static __always_inline void xdns_feat_add(struct xdns_scratch *sc, void *map, const void *key, __u32 iv, __u64 len,
					  __u64 *full)
{
	struct xdns_guard_feat *f = bpf_map_lookup_elem(map, key), *fresh = &sc->guard.gate_feat;
	struct xdns_guard_slot *s;

	if (!f) {
		__builtin_memset(fresh, 0, sizeof(*fresh));
		fresh->slot[iv & 1].interval = iv;
		fresh->slot[iv & 1].packets = 1;
		fresh->slot[iv & 1].bytes = len;
		if (bpf_map_update_elem(map, key, fresh, BPF_NOEXIST))
			(*full)++;
		return;
	}
	s = &f->slot[iv & 1];
	if (s->interval != iv) {
		s->interval = iv;
		s->any = 0;
		s->packets = 0;
		s->bytes = 0;
	}
	s->packets++;
	s->bytes += len;
}

/* The first 3 (IPv4) or 7 (IPv6) address bytes of the word, whatever the byte order: the
 * /24 or /56 the features count per source. */
static __always_inline __u64 xdns_feat_prefix(__u64 a0, int ipv6)
{
	static const __u8 m4[8] = { 0xff, 0xff, 0xff }, m6[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	__u64 mask;

	__builtin_memcpy(&mask, ipv6 ? m6 : m4, 8);
	return a0 & mask;
}

/* Count the packet into its source prefix's slot of the current interval (xdns_abi.h); the
 * key stays in the scratch (src_fkey) for the name check's ANY count. */
static __always_inline void xdns_guard_count(struct xdns_scratch *sc, __u64 a0, __u8 family, __u32 bytes, __u32 iv)
{
	struct xdns_guard_feat_key *k = &sc->guard.src_fkey;

	__builtin_memset(k, 0, sizeof(*k));
	k->addr = xdns_feat_prefix(a0, family != 4);
	k->family = family;
	xdns_feat_add(sc, &xdns_guard_feat, k, iv, bytes, &sc->guard.feat_full);
}

/*
 * A query of type ANY (the two bytes after the name, when the fetch holds them) counts into
 * the `any` of its source's slot, the entry the guard stage counted the packet into
 * (src_fkey): amplification by ANY (xdns_guard::detect's AnyFlood). A second lookup, for ANY
 * queries only; none if the entry is gone or the interval moved on since.
 */
static __always_inline void xdns_guard_count_any(struct xdns_scratch *sc, __u32 iv)
{
	struct xdns_guard_feat *f;
	struct xdns_guard_slot *s;
	__u32 qlen = sc->walk.qlen;

	if (qlen > 253 || qlen + 2 > sc->walk.avail)
		return;
	if (sc->walk.name[qlen & 255] != 0 || sc->walk.name[(qlen + 1) & 255] != 255)
		return;
	f = bpf_map_lookup_elem(&xdns_guard_feat, &sc->guard.src_fkey);
	if (!f)
		return;
	s = &f->slot[iv & 1];
	if (s->interval == iv)
		s->any++;
}

/* The entry of the longest listed prefix holding the source, by hash per length in use. */
static __always_inline struct xdns_guard_entry *xdns_guard_probe(const struct xdns_guard_len *lens, __u32 n,
								 __u64 a0, __u64 a1, __u8 family, __u8 par)
{
	struct xdns_guard_key k = {};
	struct xdns_guard_entry *e;
	__u32 i;

	__u32 mask = xdns_cfg.guard_filter_mask, w;
	__u64 x, *bits;

	k.family = family;
	k.gen = par;
	for (i = 0; i < XDNS_GUARD_LENS; i++) {
		if (i >= n)
			break;
		k.addr[0] = a0 & lens[i].mask[0];
		k.addr[1] = a1 & lens[i].mask[1];
		k.len = lens[i].len;
		x = xdns_guard_pos(xdns_cfg.seed, k.addr[0], k.addr[1], k.len | (__u32)family << 8 | (__u32)par << 16);
		w = (par & 1) * (mask + 1) + ((__u32)(x >> 32) & mask);
		bits = bpf_map_lookup_elem(&xdns_guard_filter, &w);
		if (bits && !((*bits >> (x & 63)) & 1))
			continue;       /* no prefix of this length holds the source */
		e = bpf_map_lookup_elem(&xdns_guard_hash, &k);
		if (e)
			return e;
	}
	return NULL;
}

/*
 * The whole stage, for the configurations the inline path below leaves to it (a tier slot,
 * feature counting, a family in the trie): a global function, a BPF subprogram the verifier
 * checks once, alone. Its paths (tier slots, lengths probed, structures) would otherwise
 * multiply the states every later stage is verified in (inlined whole, it pushed the
 * resolver program past the 1M limit). One call per packet that takes it (bpf/README.md,
 * "Composition and budget").
 */
__attribute__((noinline)) int xdns_guard_check(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 l3, __u32 ipv6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_guard_entry *e = NULL;
	struct xdns_guard_list *l;
	struct xdns_guard_ctl *c;
	__u32 key = 0, bytes, i, mode, n, tier;
	__u64 a0, a1 = 0;
	__u8 family, par;

	if (!xdns_cfg.guard || !sc)
		return XDNS_CONTINUE;
	c = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!c)
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
	tier = c->tier;
	if (tier == 1 || tier == 2) {
		const struct xdns_guard_tier *t = &c->tiers[(tier - 1) & 1];

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

	if (xdns_cfg.guard_features)
		xdns_guard_count(sc, a0, family, bytes, c->interval);

	n = c->gen;
	if (n == 0)
		return XDNS_CONTINUE;
	par = n & 1;
	l = &c->lists[par];
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
		sc->guard.src_allowed = 1;
		return XDNS_CONTINUE;
	}
	e->drops++;
	return XDNS_DROP_BLOCKED;
}

/*
 * The stage. Nothing at all unless xdns_cfg.guard (read-only data: the verifier drops it);
 * no call while nothing is configured. The common case, lists held by hash with no tier slot
 * and no feature counting, runs inline: the call into xdns_guard_check, whose frame and return
 * cost about as much as two probes, is kept for the tier, the features and the trie.
 */
static __always_inline enum xdns_verdict xdns_guard_stage(struct xdp_md *ctx, struct xdns_scratch *sc,
							   const struct xdns_pkt *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_guard_entry *e;
	struct xdns_guard_list *l;
	struct xdns_guard_ctl *c;
	__u32 key = 0, gen, l3 = pkt->l3_off;
	__u64 a0, a1 = 0;
	__u8 mode;

	if (!xdns_cfg.guard)
		return XDNS_CONTINUE;
	sc->guard.src_allowed = 0;      /* until an allow prefix matches (the gate reads it) */
	c = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!c)
		return XDNS_CONTINUE;
	gen = c->gen;
	if (c->tier != 0 || xdns_cfg.guard_features)
		return (enum xdns_verdict)xdns_guard_check(ctx, sc, l3, pkt->ipv6);
	if (gen == 0)
		return XDNS_CONTINUE;   /* nothing to check: no call */
	l = &c->lists[gen & 1];
	mode = pkt->ipv6 ? l->mode6 : l->mode4;
	if (mode == XDNS_GUARD_NONE)
		return XDNS_CONTINUE;
	if (mode != XDNS_GUARD_HASH)
		return (enum xdns_verdict)xdns_guard_check(ctx, sc, l3, pkt->ipv6);
	if (l3 != 14 && l3 != 18)
		return XDNS_CONTINUE;
	if (pkt->ipv6) {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > data_end)
			return XDNS_CONTINUE;
		a0 = xdns_ld64(&ip6->saddr);
		a1 = xdns_ld64((__u8 *)&ip6->saddr + 8);
		e = xdns_guard_probe(l->len6, l->n6, a0, a1, 6, gen & 1);
	} else {
		struct iphdr *ip = data + l3;

		if ((void *)(ip + 1) > data_end)
			return XDNS_CONTINUE;
		a0 = ip->saddr;
		e = xdns_guard_probe(l->len4, l->n4, a0, 0, 4, gen & 1);
	}
	if (!e)
		return XDNS_CONTINUE;
	if (e->action != XDNS_GUARD_BLOCK) {
		sc->guard.allowed++;
		sc->guard.src_allowed = 1;
		return XDNS_CONTINUE;
	}
	e->drops++;
	return XDNS_DROP_BLOCKED;
}

/*
 * Suffix `index` of the question name, deepest first (index 0: the name itself, an exact
 * entry's key; then its proper suffixes, a "*.suffix" entry's key; the root is never looked
 * up). Step of a batched bpf_loop body (maps.h); state in the scratch map.
 */
static __always_inline long xdns_guard_name_step(__u64 index, void *arg)
{
	struct xdns_scratch *sc = ((struct xdns_walk_ctx *)arg)->sc;
	struct xdns_guard_name_key k = {};
	struct xdns_guard_entry *e;
	__u32 n, i, start, qlen;

	if (!sc)
		return 1;
	n = sc->lookup.nsfx;
	if (n > 128 || n > sc->walk.nlab || index + 1 >= n)
		return 1;               /* the root is left, or the name is done */
	i = (n - 1 - index) & 127;      /* sfx[i]: i + 1 labels, the root included */
	start = sc->walk.label_off[(sc->walk.nlab - 1 - i) & 127];
	qlen = sc->walk.qlen;
	if (start >= qlen)
		return 1;
	k.hash = sc->lookup.sfx[i];
	k.kind = index == 0 ? XDNS_GUARD_NAME_EXACT : XDNS_GUARD_NAME_SUFFIX;
	k.gen = sc->guard.name_par;
	k.len = qlen - start;
	e = bpf_map_lookup_elem(&xdns_guard_names, &k);
	if (!e)
		return 0;
	e->drops++;
	/* an exception (XDNS_GUARD_ALLOW: a known name under a suffix blocked for unknown
	 * labels) ends the walk before the shorter suffix that blocks */
	if (e->action == XDNS_GUARD_BLOCK)
		sc->guard.name_hit = 1;
	return 1;
}

XDNS_BATCHED(xdns_guard_name_steps, xdns_guard_name_step)

/*
 * The name check (a global function, verified once alone, as xdns_guard_check). It runs the
 * walk and the suffix hashes the later stages run again (the memo may skip them; a blocked
 * name must not get through it). A name the walk refuses is left to the walk's own verdict.
 */
__attribute__((noinline)) int xdns_guard_names_check(struct xdns_scratch *sc)
{
	struct xdns_walk_ctx wc = { .sc = sc };
	struct xdns_query q = {};
	struct xdns_guard_ctl *c;
	__u32 key = 0, gen, n;

	if (!xdns_cfg.guard || !sc)
		return XDNS_CONTINUE;
	c = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!c)
		return XDNS_CONTINUE;
	gen = c->names;
	if (gen == 0 && !xdns_cfg.guard_features)
		return XDNS_CONTINUE;
	sc->guard.name_par = gen & 1;
	sc->guard.name_hit = 0;
	sc->guard.nx_len = 0;
	if (xdns_qname_walk(sc, &q) != XDNS_CONTINUE)
		return XDNS_CONTINUE;
	xdns_suffix_hashes(sc);
	n = sc->lookup.nsfx;
	if (xdns_cfg.guard_features)
		xdns_guard_count_any(sc, c->interval);   /* the root's and a TLD's ANY too */
	if (xdns_cfg.guard_features && n >= 3 && n <= 128 && n <= sc->walk.nlab) {
		/* the parent: n - 1 labels, the root included (sfx[n - 2]) */
		struct xdns_guard_qfeat_key fk = {};
		struct xdns_guard_feat *f;
		__u32 start = sc->walk.label_off[1], iv = c->interval;

		if (start < sc->walk.qlen) {
			fk.hash = sc->lookup.sfx[(n - 2) & 127];
			fk.len = sc->walk.qlen - start;
			sc->guard.nx_hash = fk.hash;   /* an NXDOMAIN answer's suffix (rrl.h) */
			sc->guard.nx_len = fk.len;
			xdns_feat_add(sc, &xdns_guard_qfeat, &fk, iv, sc->walk.qlen, &sc->guard.qfeat_full);
			/* the whole name, its parent's hash in `bytes` (water torture: distinct
			 * and unknown names under a suffix; xdns_abi.h) */
			fk.hash = sc->lookup.sfx[(n - 1) & 127];
			fk.len = sc->walk.qlen;
			fk.kind = XDNS_GUARD_QFEAT_NAME;
			f = bpf_map_lookup_elem(&xdns_guard_qfeat, &fk);
			if (!f) {
				struct xdns_guard_feat nf = {};

				nf.slot[iv & 1].interval = iv;
				nf.slot[iv & 1].packets = 1;
				nf.slot[iv & 1].bytes = sc->lookup.sfx[(n - 2) & 127];
				if (bpf_map_update_elem(&xdns_guard_qfeat, &fk, &nf, BPF_NOEXIST))
					sc->guard.qfeat_full++;
			} else {
				struct xdns_guard_slot *s = &f->slot[iv & 1];

				if (s->interval != iv) {
					s->interval = iv;
					s->packets = 0;
				}
				s->packets++;
				s->bytes = sc->lookup.sfx[(n - 2) & 127];
			}
		}
	}
	if (gen == 0)
		return XDNS_CONTINUE;
	bpf_loop(XDNS_TURNS(128), xdns_guard_name_steps, &wc, 0);
	return sc->guard.name_hit ? XDNS_DROP_NAME : XDNS_CONTINUE;
}

/* The name check and the suffix features: nothing at all unless xdns_cfg.guard; no call
 * unless a name list is loaded or the features are counted. */
static __always_inline enum xdns_verdict xdns_guard_name_stage(struct xdns_scratch *sc)
{
	struct xdns_guard_ctl *c;
	__u32 key = 0;

	if (!xdns_cfg.guard)
		return XDNS_CONTINUE;
	c = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!c || (c->names == 0 && !xdns_cfg.guard_features))
		return XDNS_CONTINUE;
	return (enum xdns_verdict)xdns_guard_names_check(sc);
}

#endif /* XDNS_GUARD_H */
