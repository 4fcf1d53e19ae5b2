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

/*
 * Walk the name from the root: one hash pass gives every suffix's hash; each suffix that starts
 * a label is looked up. Every suffix is tried (no early exit): a served child zone may sit below
 * a parent that lacks the names in between.
 */
static __always_inline void xdns_find_encloser(const struct xdns_scratch *sc, const struct xdns_query *q,
					       __u32 gen, struct xdns_encloser *ce)
{
	struct xdns_node_key nk = { .gen = gen };
	__u64 s = xdns_cfg.seed;
	__s32 next = (__s32)q->nlab - 1;
	__u32 k;

	ce->found = 0;
	for (k = 0; k < 255; k++) {
		__u32 i;

		if (k >= q->qlen)
			break;
		i = q->qlen - 1 - k;
		s = xdns_hash_step(s, sc->name[i & 255]);
		if (next >= 0 && i == sc->label_off[next & 127]) {
			struct xdns_node *n;

			next--;
			nk.hash = xdns_hash_fin(s);
			n = bpf_map_lookup_elem(&xdns_nodes, &nk);
			if (n && n->name_len == k + 1) {
				ce->node = *n;
				ce->hash = nk.hash;
				ce->len = k + 1;
				ce->found = 1;
			}
		}
	}
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
static __always_inline enum xdns_verdict xdns_select(const struct xdns_scratch *sc, const struct xdns_query *q,
						      __u32 gen, struct xdns_answer_key *key,
						      struct xdns_answer **ans)
{
	struct xdns_encloser ce;
	struct xdns_answer *a;
	int exact;

	xdns_find_encloser(sc, q, gen, &ce);
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
