// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * xdns.bpf.c - the XDP hook: answer authoritative DNS queries over UDP in the kernel, and,
 * when the resolver is on, names under no served zone from the resolver's cache (cache.h).
 *
 * Everything this program does not fully handle goes to userspace (XDP_PASS) with a named
 * reason counted per CPU (stats.h); userspace gives the same answer for anything answered here.
 *
 * Stages, in the order a packet meets them (the contract is in stage.h: a stage returns
 * XDNS_CONTINUE or a final verdict; stats.h turns the verdict into the XDP action):
 *
 *   parse     parse.h, dns.h  Ethernet, VLAN, IPv4/IPv6, UDP to a listen address, DNS header
 *   guard     guard.h         (xdns_cfg.guard) modelled hardware tier, source features, source
 *                             lists; before the DNS header is read
 *   response  response.h      every DNS response (QR=1), before any query stage
 *   fetch     dns.h           the bytes after the header into scratch
 *   (guard)   guard.h         (xdns_cfg.guard, a name list loaded) qname blocks
 *   seen      memo.h          authoritative: the question memo (a hit skips walk and lookup)
 *             reply.h, memo.h resolver: the reply memo (a hit is the whole reply), then hints
 *   walk      dns.h           the question name's labels, then type, class and OPT
 *   lookup    lookup.h        the zones: suffix hashes, closest encloser, the answer
 *   cache     cache.h         resolver: names under no zone, from the resolver's cache
 *   answer    answer.h        the reply written in place from the answer value
 *   telemetry telemetry.h     (rules set) receive time before parse; for an answer leaving,
 *                             the rules, its histogram and the in-band probe option
 *   kit       kit.h           (xdns_kit_cfg.on) kernel iteration: a cache miss rewritten into a
 *                             query to a server, the response checked; programs of their own
 *
 * The authoritative and the resolver program differ by xdns_cfg.resolver (read-only data:
 * the verifier drops the branches of the other program), tested where their paths part.
 *
 * Atomic reload: every key of xdns_nodes/xdns_answers/xdns_bodies_* carries a generation.
 * Userspace writes the new generation completely, then flips xdns_gen[0], then deletes the old
 * generation. A packet reads xdns_gen[0] once, so it sees either the old or the new data, whole.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xdns_abi.h"
#include "stage.h"
#include "maps.h"
#include "stats.h"
#include "parse.h"
#include "dns.h"
#include "response.h"
#include "guard.h"
#include "lookup.h"
#include "answer.h"
#include "cache.h"
#include "memo.h"
#include "reply.h"
#include "telemetry.h"
#include "kit.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

static __always_inline enum xdns_verdict xdns_handle(struct xdp_md *ctx, struct xdns_scratch *sc)
{
	struct xdns_pkt pkt = {};
	struct xdns_query q = {};
	struct xdns_answer_key key = {};
	struct xdns_answer_s *a = NULL;
	enum xdns_verdict v;
	__u32 zero = 0, one = 1, two = 2, gen, vi;
	__u32 *genp;
	__u16 arcount = 0;
	int memo;

	v = xdns_parse_l2_l4(ctx, &pkt);
	if (v != XDNS_CONTINUE)
		return v;
	v = xdns_guard_stage(ctx, sc, &pkt);
	if (v != XDNS_CONTINUE)
		return v;
	/* a response (QR=1) leaves here, through the response stage (response.h) */
	v = xdns_parse_header(ctx, sc, &pkt, &q, &arcount);
	if (v != XDNS_CONTINUE)
		return v;
	v = xdns_name_fetch(ctx, &pkt, sc);
	if (v != XDNS_CONTINUE)
		return v;
	v = xdns_guard_name_stage(sc);          /* name blocks (guard.h) */
	if (v != XDNS_CONTINUE)
		return v;
	/* one read of the generation per packet: the memo and the lookup use the same */
	genp = bpf_map_lookup_elem(&xdns_gen, &zero);
	gen = genp ? *genp : 0;
	/*
	 * The memo serves authoritative-only programs; a resolver program keeps cache hints in
	 * its slots instead (memo.h). The verifier drops the other (xdns_cfg is read-only data).
	 * Either way `memo` >= 0 is a hit.
	 */
	if (xdns_cfg.resolver) {
		/* a cache hit's reply kept whole for this very query (reply.h), else go on */
		v = xdns_reply_answer(ctx, sc, &pkt, &q, arcount, gen);
		if (v != XDNS_CONTINUE)
			return v;
	}
	if (xdns_cfg.resolver) {
		memo = xdns_hint_probe(sc);
	} else {
		/* the memo epoch (xdns_gen[2]) enters the memo key: in-place updates forget it */
		genp = bpf_map_lookup_elem(&xdns_gen, &two);
		memo = xdns_memo_probe(sc, gen ^ ((genp ? *genp : 0) << 20));
	}
	if (memo >= 0) {
		/*
		 * Memo: name, type and class asked before on this CPU, byte for byte, under this
		 * generation (the sum is of all three). Hint: a name under no zone of this
		 * generation, whose cache entry the stage checks (the name's sum comes from there).
		 */
		q.qlen = *(volatile __u32 *)&sc->memo.qlen;
		q.nlab = *(volatile __u32 *)&sc->memo.nlab;
		q.qsum = xdns_cfg.resolver ? 0 : sc->memo.sum;
		if (q.qlen == 0 || q.qlen > 255 || q.nlab == 0 || q.nlab > 128)
			return XDNS_PASS_QNAME;
		if (xdns_cfg.resolver)
			sc->walk.qlen = q.qlen;      /* what the cache stage compares */
	} else {
		v = xdns_qname_walk(sc, &q);
		if (v != XDNS_CONTINUE)
			return v;
	}
	v = xdns_parse_tail(ctx, &pkt, &q, arcount, memo >= 0 && !xdns_cfg.resolver);
	if (v != XDNS_CONTINUE)
		return v;
	sc->tel.probe = q.probe;        /* for the telemetry stage's end (telemetry.h) */
	if (sc->tel.slot == XDNS_TEL_ASK)       /* telemetry on: select on the question */
		xdns_tel_select(sc, q.qlen);
	if (gen == 0)
		return XDNS_PASS_NOT_LOADED;

	/* no apex part (answer.h, xdns_prefix_load) unless found below */
	sc->pre.len = 0;
	sc->pre.ns = 0;
	if (memo >= 0 && !xdns_cfg.resolver) {
		vi = (__u32)memo;       /* a class S answer: its body needs no key */
		sc->memo_hits++;
	} else {
		if (memo >= 0) {
			v = XDNS_PASS_NO_ZONE;  /* a hint: kept for such names only */
		} else {
			genp = bpf_map_lookup_elem(&xdns_gen, &one);
			sc->lookup.floor = genp ? *genp : 0;
			v = xdns_select(sc, &q, gen, &key, &a);        /* the lookup stage */
		}
		/* one call site: the verifier walks the stage once for both ways in */
		if (v == XDNS_PASS_NO_ZONE && xdns_cfg.resolver) {
			/* for kernel iteration, when it is on, should it miss (kit_call.h, kit.h) */
			xdns_kit_miss(&pkt, &q);
			return xdns_cache_answer(ctx, sc, &pkt, &q);
		}
		if (v != XDNS_CONTINUE)
			return v;
		/*
		 * A signed zone's answer and DO=1: its DO body, compiled where the proofs depend on
		 * the base only (Type, Other: the kind + 5); none (NXDOMAIN, wildcards) leaves the
		 * answer found, which the answer stage passes (pass_dnssec). A signed zone's answers
		 * are never memorised: the memo's key holds the DO bit only for short names
		 * (memo.h), and a DO=1 question must not meet a DO=0 answer there.
		 */
		if (a && a->ans.dnssec) {
			if (q.do_bit && (key.kind == XDNS_KIND_TYPE || key.kind == XDNS_KIND_OTHER)) {
				__u8 dkind = key.kind + (XDNS_KIND_TYPE_DO - XDNS_KIND_TYPE), part;
				__u16 dtype = key.qtype;

				if (key.kind == XDNS_KIND_OTHER && sc->lookup.ce_found && sc->lookup.ce_len == q.qlen) {
					if (sc->lookup.ce.flags & XDNS_NODE_NODATA_APEX) {
						/* a node answering NODATA with its apex's: its DO body is its own */
						key.hash = sc->lookup.ce_hash;
					} else if (q.qtype == XDNS_TYPE_DS && (sc->lookup.ce.flags & XDNS_NODE_CUT) &&
						   sc->lookup.ce.cut_hash == sc->lookup.ce_hash) {
						/* DS at a delegation without DS (the apex's NODATA, lookup.h):
						 * its DO body is the delegation's Type(DS) */
						key.hash = sc->lookup.ce_hash;
						dkind = XDNS_KIND_TYPE_DO;
						dtype = XDNS_TYPE_DS;
					}
				}
				a = xdns_answer_get(sc, &key, key.hash, dkind, dtype);
				part = a ? a->ans.dnssec : 0;
				if (part == XDNS_DNSSEC_NAME_PART || part == XDNS_DNSSEC_PROOF_PART) {
					/* a NODATA's own part: the apex part goes first (answer.h), with the
					 * apex's NSEC3 when the own part's proof begins there */
					if (!a || a->ans.base_len != q.qlen || a->ans.arcount)
						return XDNS_PASS_NO_BODY;
					v = xdns_prefix_load(sc, q.qlen, key.gen,
							     part == XDNS_DNSSEC_PROOF_PART ? XDNS_KIND_APEX_PROOF_DO : XDNS_KIND_APEX_DO);
					if (v != XDNS_CONTINUE)
						return v;
					/* not from the table (an in-place change puts its answers in the
					 * hash map): the apex part's copy may have taken the spill slot */
					if (!sc->memo.last_table) {
						a = xdns_answer_get(sc, &key, key.hash, key.kind, key.qtype);
						if (!a || a->ans.dnssec != part)
							return XDNS_PASS_NO_BODY;
					}
				}
			}
		} else if (!xdns_cfg.resolver && a && a->ans.class == XDNS_CLASS_S) {
			xdns_memo_learn(sc, q.qlen, q.nlab, q.qsum);
		}
		vi = sc->memo.last_v;
	}
	/* one source for the answer of both paths: the verifier walks the answer stage once */
	return xdns_answer_stage(ctx, sc, &pkt, &q, &key, vi);
}

SEC("xdp")
int xdns_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct xdns_scratch *sc = bpf_map_lookup_elem(&xdns_scratch, &zero);

	enum xdns_verdict v;
	__u64 t0;

	if (!sc)
		return XDP_PASS;        /* never: key 0 of an array map always exists */
	t0 = xdns_tel_begin(ctx, sc);   /* telemetry (telemetry.h): 0 when off or unselected */
	/*
	 * One state for the stages below whether telemetry is on or not: a known 0 on one way
	 * and a time on the other would have the verifier walk every stage twice.
	 */
	asm volatile("" : "+r"(t0));
	v = xdns_handle(ctx, sc);
	if (t0 && (v == XDNS_ANSWERED || v == XDNS_CACHE_ANSWERED) && sc->tel.slot != XDNS_TEL_DONE) {
		/*
		 * Only when a rule selects the question (xdns_tel_select; slot XDNS_TEL_DONE: none,
		 * no tail call, no second clock read). The end half counts the verdict; should the
		 * call fail, it is counted here.
		 */
		sc->tel.v = v;
		sc->tel.t0 = t0;
		bpf_tail_call(ctx, &xdns_tel_prog, XDNS_TEL_END);
	}
	xdns_kit_go(ctx, v);      /* a miss, to kernel iteration when it is on (kit_call.h) */
	return xdns_verdict(sc, v);
}

/*
 * The telemetry stage's end half (telemetry.h), reached by a tail call from xdns_xdp for an
 * answer about to leave while telemetry is on: a program of its own, verified alone.
 */
SEC("xdp")
int xdns_tel_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct xdns_scratch *sc = bpf_map_lookup_elem(&xdns_scratch, &zero);

	if (!sc)
		return XDP_PASS;
	return xdns_verdict(sc, xdns_tel_end(ctx, sc->tel.v, sc->tel.t0));
}

/*
 * Kernel iteration (kit.h): the miss side, reached by a tail call from the cache stage's
 * miss, and the response side, from the response stage. Programs of their own, verified alone.
 */
SEC("xdp")
int xdns_kit_out_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct xdns_scratch *sc = bpf_map_lookup_elem(&xdns_scratch, &zero);

	if (!sc)
		return XDP_PASS;
	return xdns_verdict(sc, xdns_kit_out(ctx, sc));
}

SEC("xdp")
int xdns_kit_in_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct xdns_scratch *sc = bpf_map_lookup_elem(&xdns_scratch, &zero);

	if (!sc)
		return XDP_PASS;
	return xdns_verdict(sc, xdns_kit_in(ctx));
}
