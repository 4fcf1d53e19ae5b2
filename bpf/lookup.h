/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * lookup.h - choose the body key of DESIGN-NOTES.md, exactly like xdns_zone::lookup::select.
 * Mirrored in Rust by crates/xdns-bpf/src/select.rs (tested against the engine's select).
 */
#ifndef XDNS_LOOKUP_H
#define XDNS_LOOKUP_H

#include "stage.h"
#include "dns.h"
#include "hash.h"

/*
 * May the key (hash, tag) exist in generation `gen`? False when its presence-filter bit is
 * clear (maps.h xdns_filter): then the hash-map lookup, a call and a jhash, is skipped. The
 * array lookup is inlined. No word (cannot happen: the index is masked) means maybe.
 */
static __always_inline int xdns_filter_maybe(__u64 hash, __u32 tag, __u32 gen)
{
	__u64 x = xdns_filter_pos(hash, tag);
	__u32 mask = xdns_cfg.filter_mask;
	__u32 i = (gen & 1) * (mask + 1) + ((__u32)(x >> 6) & mask);
	__u64 *w = bpf_map_lookup_elem(&xdns_filter, &i);

	return !w || ((*w >> (x & 63)) & 1);
}

/*
 * The hash of every suffix, root first (hash.h): sfx[i] has i + 1 labels, the root included,
 * from the label hashes the name walk left (sc->walk.nlab of them). A bounded loop; its bound is
 * read from the scratch map on every turn, so no register the rest of the program uses learns
 * the label count at each exit (which would make the verifier walk everything after the loop
 * once per label count).
 */
static __always_inline void xdns_suffix_hashes(struct xdns_scratch *sc)
{
	volatile __u32 *nlab = &sc->walk.nlab;
	__u64 s = xdns_cfg.seed ^ XDNS_HASH_SUFFIX;
	__u32 i;

	for (i = 0; i < 128; i++) {
		if (i >= *nlab)
			break;
		s = xdns_hash_step(s, sc->walk.lh[(*nlab - 1 - i) & 127]);
		sc->lookup.sfx[i] = xdns_hash_fin(s);
	}
	sc->lookup.nsfx = i;
}

/*
 * idx + 1 of the entry of a four-way bucket (the answer table's or the resolver cache's,
 * xdns_abi.h) whose hash and meta are the key's, idx masked by `idx_mask`; 0 when none is.
 * The entries are compared without a branch (the matching one's idx + 1 is or-ed in; at most
 * one matches): this is inlined at every lookup, and a branch per entry doubled the verifier's
 * work. The empty asm keeps clang from turning x | -x back into a comparison (a branch in BPF).
 */
static __always_inline __u64 xdns_ways_match(const struct xdns_table_entry *e, __u64 hash, __u32 meta,
					     __u32 idx_mask)
{
	__u64 found = 0, x, nx;
	int i;

#pragma unroll
	for (i = 0; i < XDNS_TABLE_WAYS; i++) {
		x = (e[i].hash ^ hash) | (e[i].meta ^ meta);
		nx = -x;
		asm volatile("" : "+r"(nx));
		/* (x | -x) >> 63 is 0 for the match, 1 otherwise */
		found |= (((x | nx) >> 63) - 1) & ((__u64)(e[i].idx & idx_mask) + 1);
	}
	return found;
}

/*
 * The node of the suffix `hash` in generation sc->lookup.gen, if its wire length is `len`:
 * copied to sc->lookup.ce, and 1; else 0. Looked up in the generation's answer table (xdns_abi.h
 * XDNS_TABLE_NODE: two inlined array reads, four compares, the record read from its page),
 * and in xdns_nodes only when the bucket has no entry for it and is spilled. A global function:
 * the verifier walks it once, not in every state of the walk's loop body that calls it.
 */
__attribute__((noinline)) int xdns_node_find(struct xdns_scratch *sc, __u64 hash, __u32 len)
{
	struct xdns_node_key nk = {};
	struct xdns_node *n = NULL;
	struct xdns_bucket *bk;
	__u32 gen, half, b;
	void *index;
	__u64 found;

	if (!sc)
		return 0;
	gen = sc->lookup.gen;
	half = gen & 1;
	b = xdns_table_bucket(hash, XDNS_TABLE_NODE, 0, xdns_cfg.table_buckets);
	index = bpf_map_lookup_elem(&xdns_index, &half);
	bk = index ? bpf_map_lookup_elem(index, &b) : NULL;
	if (bk) {
		found = xdns_ways_match(bk->e, hash, XDNS_TABLE_META(XDNS_TABLE_NODE, 0, gen), XDNS_TABLE_IDX);
		if (found)
			n = (struct xdns_node *)xdns_val(half * XDNS_VAL_HALF | (__u32)(found - 1));
		else if (!(bk->e[0].idx & XDNS_TABLE_SPILLED))
			return 0;
	}
	if (!n) {
		nk.hash = hash;
		nk.gen = gen;
		n = bpf_map_lookup_elem(&xdns_nodes, &nk);
	}
	if (!n || n->name_len != len)
		return 0;
	sc->lookup.ce = *n;
	return 1;
}

/*
 * Closest encloser, deepest suffix first (step of a batched bpf_loop body, `index` = labels removed from the
 * question): the first suffix whose node exists (xdns_node_find: with the right length) is the deepest
 * existing one, so the walk stops there. State lives in the scratch map.
 */
static __always_inline long xdns_encloser_label(__u64 index, void *arg)
{
	struct xdns_scratch *sc = ((struct xdns_walk_ctx *)arg)->sc;
	__u32 i, start;

	if (!sc || index >= sc->lookup.nsfx || sc->lookup.nsfx > 128 || sc->lookup.nsfx > sc->walk.nlab)
		return 1;
	i = (sc->lookup.nsfx - 1 - index) & 127;      /* sfx[] index: labels above the root */
	if (i < sc->lookup.floor)                      /* shallower than every node: none is there */
		return 1;
	if (!xdns_filter_maybe(sc->lookup.sfx[i], XDNS_FILTER_NODE, sc->lookup.gen))
		return 0;
	start = sc->walk.label_off[(sc->walk.nlab - 1 - i) & 127];
	if (!sc->lookup.no_direct) {
		/* the deepest suffix that may exist, flagged: its body without its node */
		if (xdns_filter_maybe(sc->lookup.sfx[i], XDNS_FILTER_CUT, sc->lookup.gen))
			sc->lookup.direct = XDNS_KIND_OTHER;
		else if (start == 0)
			;       /* the name itself: NODATA or more, the node decides */
		else if (xdns_filter_maybe(sc->lookup.sfx[i], XDNS_FILTER_APEX_NX, sc->lookup.gen))
			sc->lookup.direct = XDNS_KIND_NXDOMAIN;
		else if (xdns_filter_maybe(sc->lookup.sfx[i], XDNS_FILTER_WILDCARD, sc->lookup.gen))
			sc->lookup.direct = XDNS_KIND_WILDCARD;
		if (sc->lookup.direct) {
			sc->lookup.ce_hash = sc->lookup.sfx[i];
			sc->lookup.ce_len = sc->walk.qlen - start;
			return 1;
		}
	}
	if (xdns_node_find(sc, sc->lookup.sfx[i], sc->walk.qlen - start)) {
		sc->lookup.ce_hash = sc->lookup.sfx[i];
		sc->lookup.ce_len = sc->walk.qlen - start;
		sc->lookup.ce_found = 1;
		return 1;
	}
	return 0;
}

XDNS_BATCHED(xdns_encloser_labels, xdns_encloser_label)

/*
 * Look up one body key (`key` gets it: the M and L body maps are keyed by it) in the answer
 * table (xdns_abi.h): one bucket of four entries, then the value. Both are array lookups,
 * inlined, so this costs no call (a hash-map lookup costs a call and a jhash).
 *
 * A miss is final unless the bucket lost a key (XDNS_TABLE_SPILLED): then the hash map is
 * asked, and an answer found there is copied to this CPU's spill slot in the generation's
 * page array of xdns_vals (after its pages), so that every answer reaches the rest of the program as a pointer into the
 * same map: the verifier then walks the reply code once, not once per map an answer may come
 * from (that doubled its work). The bit is tested where it is read, not kept in a variable:
 * a known 0 or 1 carried along split the verifier's states further down.
 */
/*
 * Every answer found also leaves its xdns_vals address in sc->memo.last_v (and whether it came from
 * the table in sc->memo.last_table): the program reads the answer of xdns_select and of a memo hit
 * through one lookup by that index, and the memo keeps it (memo.h).
 */
static __always_inline struct xdns_answer_s *xdns_answer_get(struct xdns_scratch *sc, struct xdns_answer_key *key,
							   __u64 hash, __u8 kind, __u16 qtype)
{
	__u32 meta = XDNS_TABLE_META(kind, qtype, key->gen), half = key->gen & 1, b, v;
	struct xdns_answer_s *a, *h;
	struct xdns_bucket *bk;
	void *index;
	__u64 found;

	key->hash = hash;
	key->kind = kind;
	key->qtype = qtype;
	b = xdns_table_bucket(hash, kind, qtype, xdns_cfg.table_buckets);
	index = bpf_map_lookup_elem(&xdns_index, &half);
	bk = index ? bpf_map_lookup_elem(index, &b) : NULL;
	if (bk) {
		found = xdns_ways_match(bk->e, hash, meta, XDNS_TABLE_IDX);
		if (found) {
			v = half * XDNS_VAL_HALF | (__u32)(found - 1);
			sc->memo.last_v = v;
			sc->memo.last_table = 1;
			return xdns_val(v);
		}
		if (!(bk->e[0].idx & XDNS_TABLE_SPILLED))
			return NULL;
	}
	h = bpf_map_lookup_elem(&xdns_answers, key);
	if (!h)
		return NULL;
	v = half * XDNS_VAL_HALF | ((xdns_cfg.val_pages << (XDNS_PAGE_SHIFT - 2)) + bpf_get_smp_processor_id() * (XDNS_SPILL_SLOT / 4));
	sc->memo.last_v = v;
	sc->memo.last_table = 0;
	a = xdns_val(v);
	if (a)
		__builtin_memcpy(a, h, sizeof(*a));
	return a;
}

/*
 * The body for (name, qtype). Order (the engine's select): exact Type(qtype); node at/below a
 * cut -> Other at the cut (DS at the cut itself without a Type(DS) body: the apex's Other,
 * rebased); exact -> Other (the apex's, rebased, when the node says its own
 * would be the same bytes: XDNS_NODE_NODATA_APEX); wildcard child -> Wildcard(qtype) / WildcardOther at
 * the closest encloser; else NxDomain at the apex.
 *
 * Fast path: Type(qtype) at the whole name is looked up first, straight from the whole-name
 * hash. Such a body exists only where the name itself is a node, and there it is the engine's
 * first choice, so a hit (whose base length equals the question's: the collision guard the
 * node walk has in name_len) is the answer without the walk. Otherwise the walk looks the
 * suffixes up deepest first and stops at the first that exists (the closest encloser; a
 * served child zone may sit below a parent that lacks the names in between, so no suffix is
 * assumed missing because a shorter one is). Keys whose presence-filter bit is clear are not
 * looked up at all (xdns_filter_maybe): a miss costs a few instructions. Suffixes with fewer
 * labels than the label floor (xdns_gen[1], the shallowest node's) are not looked up: a name
 * under no zone costs no lookup. A flagged deepest suffix (a cut, an apex, a wildcard
 * parent) gives its body without its node (below).
 */
static __always_inline enum xdns_verdict xdns_select(struct xdns_scratch *sc, const struct xdns_query *q,
						      __u32 gen, struct xdns_answer_key *key,
						      struct xdns_answer_s **ans)
{
	struct xdns_walk_ctx wc = { .sc = sc };
	struct xdns_answer_s *a;
	struct xdns_node ce;
	__u64 ce_hash;
	__u32 nsfx;
	int exact;

	sc->lookup.gen = gen;
	sc->lookup.ce_found = 0;
	sc->lookup.ce_len = 0;
	xdns_suffix_hashes(sc);
	nsfx = *(volatile __u32 *)&sc->lookup.nsfx;
	key->gen = gen;
	key->_pad = 0;
	/* every suffix shallower than the label floor (a resolver without zones: every query) */
	if (nsfx == 0 || nsfx > 128 || nsfx - 1 < sc->lookup.floor)
		return XDNS_PASS_NO_ZONE;
	nsfx -= 1;
	asm volatile("" : "+r"(nsfx));  /* keep the mask: the verifier needs it */
	if (xdns_filter_maybe(sc->lookup.sfx[nsfx & 127], 1 + (__u32)q->qtype, gen)) {
		a = xdns_answer_get(sc, key, sc->lookup.sfx[nsfx & 127], XDNS_KIND_TYPE, q->qtype);
		if (a && a->ans.base_len == q->qlen)
			goto found;
	}
	sc->lookup.direct = 0;
	/*
	 * A DS query the fast path did not answer walks with node lookups: at a cut itself it
	 * is the parent's NODATA (the apex's Other, below), not the referral the cut's flag
	 * would give without the node.
	 */
	sc->lookup.no_direct = q->qtype == XDNS_TYPE_DS;
	bpf_loop(XDNS_TURNS(128), xdns_encloser_labels, &wc, 0);
	if (sc->lookup.direct) {
		/*
		 * The deepest suffix whose node bit is set is flagged as a zone cut (the referral:
		 * Other at its own hash, for the cut itself too), an apex (NXDOMAIN at its own hash)
		 * or a wildcard parent (Wildcard at its own hash), not at a cut: the body is the
		 * answer, found without the node. A body of that kind whose base has the
		 * suffix's length exists only at such a node (Other bodies are at every node, but
		 * only a cut's has AA=0); anything else (filter false positives) walks again with
		 * node lookups.
		 */
		ce_hash = sc->lookup.ce_hash;
		if (sc->lookup.direct == XDNS_KIND_OTHER) {
			a = xdns_answer_get(sc, key, ce_hash, XDNS_KIND_OTHER, 0);
		} else if (sc->lookup.direct == XDNS_KIND_NXDOMAIN) {
			a = xdns_answer_get(sc, key, ce_hash, XDNS_KIND_NXDOMAIN, 0);
		} else {
			a = xdns_answer_get(sc, key, ce_hash, XDNS_KIND_WILDCARD, q->qtype);
			if (!a)
				a = xdns_answer_get(sc, key, ce_hash, XDNS_KIND_WILDCARD_OTHER, 0);
		}
		/* only a cut's Other body, the referral, is not authoritative */
		if (a && a->ans.base_len == sc->lookup.ce_len &&
		    (sc->lookup.direct != XDNS_KIND_OTHER || !(a->ans.flags & XDNS_F_AA)))
			goto found;
		sc->lookup.direct = 0;
		sc->lookup.no_direct = 1;
		bpf_loop(XDNS_TURNS(128), xdns_encloser_labels, &wc, 0);
	}
	if (!sc->lookup.ce_found)
		return XDNS_PASS_NO_ZONE;
	ce = sc->lookup.ce;
	ce_hash = sc->lookup.ce_hash;
	exact = sc->lookup.ce_len == q->qlen;

	/*
	 * exact Type(qtype) was the fast path's lookup. At or below a cut: the referral (Other
	 * at the cut), except a DS query at the cut itself, which found no Type(DS) body of the
	 * cut's own (a cut without DS whose NODATA is the apex's Other rebased, left out like a
	 * node's NODATA_APEX body): the apex's Other.
	 */
	if (ce.flags & XDNS_NODE_CUT)
		a = xdns_answer_get(sc, key,
				    (exact && q->qtype == XDNS_TYPE_DS && ce.cut_hash == ce_hash) ? ce.apex_hash : ce.cut_hash,
				    XDNS_KIND_OTHER, 0);
	else if (exact)
		a = xdns_answer_get(sc, key, (ce.flags & XDNS_NODE_NODATA_APEX) ? ce.apex_hash : ce_hash,
				    XDNS_KIND_OTHER, 0);
	else if (ce.flags & XDNS_NODE_WILDCARD) {
		a = xdns_answer_get(sc, key, ce_hash, XDNS_KIND_WILDCARD, q->qtype);
		if (!a)
			a = xdns_answer_get(sc, key, ce_hash, XDNS_KIND_WILDCARD_OTHER, 0);
	} else
		a = xdns_answer_get(sc, key, ce.apex_hash, XDNS_KIND_NXDOMAIN, 0);
	if (!a)
		return XDNS_PASS_NO_BODY;
found:
	*ans = a;
	return XDNS_CONTINUE;
}

#endif /* XDNS_LOOKUP_H */
