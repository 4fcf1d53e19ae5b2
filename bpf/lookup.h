/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * lookup.h - choose the body key of DESIGN-NOTES.md, exactly like xdns_zone::lookup::select.
 * Mirrored in Rust by crates/xdns-bpf/src/select.rs (tested against the engine's select).
 */
#ifndef XDNS_LOOKUP_H
#define XDNS_LOOKUP_H

#include "dns.h"
#include "hash.h"

/* The closest encloser: the deepest suffix of the question name present in xdns_nodes. */
struct xdns_encloser {
	struct xdns_node node;
	__u64 hash;
	__u32 len;              /* wire length; == qlen means the name exists */
	__u32 found;
};

/* State of the encloser walk (bpf_loop context). */
struct xdns_encloser_walk {
	struct xdns_encloser ce;
	__u64 s;                /* hash state over the bytes consumed so far */
	__u32 qlen;
	__s32 next;             /* index in label_off of the next suffix start */
	__u32 gen;
	__u32 _pad;
};

/* Consume name byte qlen-1-k; at a label start look the suffix up in xdns_nodes. */
static long xdns_encloser_step(__u64 index, void *arg)
{
	struct xdns_encloser_walk *w = arg;
	struct xdns_node_key nk = {};
	struct xdns_scratch *sc;
	struct xdns_node *n;
	__u32 zero = 0, k = index & 255, i;

	sc = bpf_map_lookup_elem(&xdns_scratch, &zero);
	if (!sc || k >= w->qlen)
		return 1;
	i = (w->qlen - 1 - k) & 255;
	w->s = xdns_hash_step(w->s, sc->name[i]);
	if (w->next < 0 || i != sc->label_off[w->next & 127])
		return 0;
	w->next--;
	nk.hash = xdns_hash_fin(w->s);
	nk.gen = w->gen;
	n = bpf_map_lookup_elem(&xdns_nodes, &nk);
	if (n && n->name_len == k + 1) {
		w->ce.node = *n;
		w->ce.hash = nk.hash;
		w->ce.len = k + 1;
		w->ce.found = 1;
	}
	return 0;
}

/*
 * Walk the name from the root: one hash pass gives every suffix's hash; each suffix that starts
 * a label is looked up. Every suffix is tried (no early exit): a served child zone may sit below
 * a parent that lacks the names in between.
 */
static __always_inline void xdns_find_encloser(const struct xdns_query *q, __u32 gen, struct xdns_encloser *ce)
{
	struct xdns_encloser_walk w = {};

	w.s = xdns_cfg.seed;
	w.qlen = q->qlen;
	w.next = (__s32)q->nlab - 1;
	w.gen = gen;
	bpf_loop(255, xdns_encloser_step, &w, 0);
	*ce = w.ce;
}

/* Look up one body key; fills `key` on success. */
static __always_inline struct xdns_answer *xdns_answer_get(struct xdns_answer_key *key, __u64 hash, __u8 kind,
							   __u16 qtype)
{
	key->hash = hash;
	key->kind = kind;
	key->qtype = qtype;
	return bpf_map_lookup_elem(&xdns_answers, key);
}

/*
 * The body for (name, qtype). Order (the engine's select): exact Type(qtype); node at/below a
 * cut -> Other at the cut; exact -> Other; wildcard child -> Wildcard(qtype) / WildcardOther at
 * the closest encloser; else NxDomain at the apex.
 */
static __always_inline enum xdns_verdict xdns_select(const struct xdns_query *q,
						      __u32 gen, struct xdns_answer_key *key,
						      struct xdns_answer **ans)
{
	struct xdns_encloser ce;
	struct xdns_answer *a;
	int exact;

	xdns_find_encloser(q, gen, &ce);
	if (!ce.found)
		return XDNS_PASS_NO_ZONE;
	exact = ce.len == q->qlen;
	key->gen = gen;
	key->_pad = 0;

	if (exact) {
		a = xdns_answer_get(key, ce.hash, XDNS_KIND_TYPE, q->qtype);
		if (a)
			goto found;
	}
	if (ce.node.flags & XDNS_NODE_CUT)
		a = xdns_answer_get(key, ce.node.cut_hash, XDNS_KIND_OTHER, 0);
	else if (exact)
		a = xdns_answer_get(key, ce.hash, XDNS_KIND_OTHER, 0);
	else if (ce.node.flags & XDNS_NODE_WILDCARD) {
		a = xdns_answer_get(key, ce.hash, XDNS_KIND_WILDCARD, q->qtype);
		if (!a)
			a = xdns_answer_get(key, ce.hash, XDNS_KIND_WILDCARD_OTHER, 0);
	} else
		a = xdns_answer_get(key, ce.node.apex_hash, XDNS_KIND_NXDOMAIN, 0);
	if (!a)
		return XDNS_PASS_NO_BODY;
found:
	*ans = a;
	return XDNS_ANSWERED;
}

#endif /* XDNS_LOOKUP_H */
