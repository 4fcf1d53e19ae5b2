/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * kit.h - kernel iteration (issue 32, after AtesN-DS), with the userspace resolver's defences.
 *
 * Two programs of their own (xdns.bpf.c), reached by tail calls from the resolver program
 * (kit_call.h) and verified alone, so none of their work counts against its budget:
 *
 *   out  xdns_kit_out_xdp  a cache miss: the deepest zone cut xdns_kit_zones knows for the
 *                          question name (the root from the hints at least), a server of the
 *                          client's family, a random ID and a random port of the reserved
 *                          range, the name's letters in random case (0x20), RD=0, our own
 *                          EDNS; the client's state recorded in xdns_kit_pending (never
 *                          replacing an entry); the client's frame rewritten into that query
 *                          and sent to the next hop bpf_fib_lookup names (XDP_TX out the same
 *                          interface, else bpf_redirect). Anything it does not take is passed
 *                          untouched with pass_kit_handover and a reason
 *                          (xdns_kit_scratch.handover[]): userspace resolves it as before.
 *   in   xdns_kit_in_xdp   a response to a reserved port: accepted only from port 53 of the
 *                          server asked, to the address that asked, with the ID sent and the
 *                          question sent byte for byte (the 0x20 case included); anything
 *                          else is dropped and counted. Accepted responses pass to the
 *                          daemon's socket on that port (pass_kit_response): userspace claims
 *                          the pending entry (deletes it), finishes the resolution and answers
 *                          the client once.
 *
 * QNAME minimisation (RFC 9156) is not done here: see README.md, "Kernel iteration".
 */
#ifndef XDNS_KIT_H
#define XDNS_KIT_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "stage.h"
#include "maps.h"
#include "hash.h"
#include "word.h"

#define XDNS_KIT_AF_INET 2
#define XDNS_KIT_AF_INET6 10
#define XDNS_KIT_TTL 64
#define XDNS_KIT_OPT_LEN 11

_Static_assert(sizeof(struct bpf_fib_lookup) == sizeof(((struct xdns_kit_scratch *)0)->fib), "the fib request fits its copy");

static __always_inline enum xdns_verdict xdns_kit_handover(struct xdns_kit_scratch *ks, __u32 why)
{
	ks->handover[why & (XDNS_KIT_HO_SLOTS - 1)]++;
	return XDNS_PASS_KIT_HANDOVER;
}

/* One's-complement sum of 32-bit-multiple bytes (bpf_csum_diff), folded and complemented. */
static __always_inline __u16 xdns_kit_csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/*
 * Eight bytes of the name with each letter's case chosen by a bit of `r`: lowercase the
 * word (hash.h), then set the 0x20 bit of letters where `r` has it clear (uppercase them).
 * Length octets (<= 63) are never letters.
 */
static __always_inline __u64 xdns_kit_case(__u64 w, __u64 r)
{
	__u64 hi = 0x8080808080808080ULL, l = xdns_lower8(w), x7 = l & ~hi;
	__u64 ge_a = x7 + 0x1f1f1f1f1f1f1f1fULL, gt_z = x7 + 0x0505050505050505ULL;
	__u64 letters = ((ge_a & ~gt_z & ~l) & hi) >> 2;      /* 0x20 in each byte 'a'..'z' */

	return l ^ (letters & ~r);
}

/* Argument of the cut search's loop. */
struct xdns_kit_cut_ctx {
	struct xdns_scratch *sc;
	struct xdns_kit_scratch *ks;
	__u64 now;
};

/*
 * Step `i` of the cut search (a bpf_loop body): the suffix of the question name with `i`
 * labels off, looked up in xdns_kit_zones; found, of the right length and not expired, it is
 * the deepest cut (ks->zone_hash, ks->zone_len) and the search ends. State lives in the
 * scratch maps, so the step is verified once.
 */
static long xdns_kit_cut_step(__u64 i, void *arg)
{
	struct xdns_kit_cut_ctx *c = arg;
	struct xdns_scratch *sc = c->sc;
	struct xdns_kit_scratch *ks = c->ks;
	struct xdns_kit_zone_key k = {};
	struct xdns_kit_zone *z;
	__u32 nlab, qlen, start;

	if (!sc || !ks)
		return 1;
	nlab = *(volatile __u32 *)&sc->walk.nlab;
	qlen = *(volatile __u32 *)&sc->walk.qlen;
	if (i >= nlab || nlab > 128 || i > 127)
		return 1;
	k.hash = sc->lookup.sfx[(nlab - 1 - i) & 127];
	z = bpf_map_lookup_elem(&xdns_kit_zones, &k);
	if (!z)
		return 0;
	start = sc->walk.label_off[i & 127];
	if (z->name_len != qlen - start || z->expires_ns <= c->now)
		return 0;
	ks->zone_hash = k.hash;
	ks->zone_len = z->name_len;
	return 1;
}

/*
 * The deepest cut of xdns_kit_zones above or at the question name (in sc->walk: its labels'
 * hashes and offsets), not expired: its hash in ks->zone_hash, its value returned. The suffix
 * hashes go into sc->lookup.sfx (the lookup stage's, done with by now), root first.
 */
static __always_inline struct xdns_kit_zone *xdns_kit_cut(struct xdns_scratch *sc, struct xdns_kit_scratch *ks)
{
	struct xdns_kit_cut_ctx c = { .sc = sc, .ks = ks };
	struct xdns_kit_zone_key k = {};
	volatile __u32 *nlab = &sc->walk.nlab;
	__u64 s = xdns_cfg.seed ^ XDNS_HASH_SUFFIX;
	__u32 i;

	if (*nlab == 0 || *nlab > 128 || sc->walk.qlen == 0 || sc->walk.qlen > 255)
		return NULL;
	for (i = 0; i < 128; i++) {
		if (i >= *nlab)
			break;
		s = xdns_hash_step(s, sc->walk.lh[(*nlab - 1 - i) & 127]);
		sc->lookup.sfx[i] = xdns_hash_fin(s);
	}
	ks->zone_len = 0;
	c.now = bpf_ktime_get_ns();
	bpf_loop(128, xdns_kit_cut_step, &c, 0);
	if (ks->zone_len == 0)
		return NULL;
	k.hash = ks->zone_hash;
	return bpf_map_lookup_elem(&xdns_kit_zones, &k);
}

/* The question sent: header, the name in random case, type, class IN, our OPT. Its length. */
static __always_inline __u32 xdns_kit_build(struct xdns_scratch *sc, struct xdns_kit_scratch *ks, __u16 id)
{
	__u32 qlen = sc->walk.qlen & 0xff, k, off;
	__u64 w, r;
	__u8 *m = ks->msg;

	xdns_st64(&m[0], 0);
	xdns_st64(&m[8], 0);
	*(__u16 *)&m[0] = id;
	/* flags 0: QUERY, RD=0 (iterative); QDCOUNT 1, ARCOUNT 1 */
	m[5] = 1;
	m[11] = 1;
	for (k = 0; k < 32; k++) {
		off = k * 8;
		if (off >= qlen)
			break;
		w = xdns_ld64(&sc->walk.name[off]);
		if (qlen - off < 8)
			w &= (1ULL << ((qlen - off) * 8)) - 1;
		r = (__u64)bpf_get_prandom_u32() << 32 | bpf_get_prandom_u32();
		w = xdns_kit_case(w, r);
		xdns_st64(&m[12 + off], w);
		xdns_st64(&ks->pend.qname[off], w);
		xdns_st64(&ks->pend.cname[off], xdns_ld64(&sc->walk.name[off]) &
			  (qlen - off < 8 ? (1ULL << ((qlen - off) * 8)) - 1 : ~0ULL));
	}
	off = 12 + (qlen & 0xff);
	/* type, class IN, then OPT: root, type 41, our payload, rcode/version/flags 0, no rdata */
	m[off] = ks->pend.qtype >> 8;
	m[off + 1] = ks->pend.qtype & 0xff;
	m[off + 2] = 0;
	m[off + 3] = 1;
	m[off + 4] = 0;
	m[off + 5] = 0;
	m[off + 6] = 41;
	m[off + 7] = xdns_kit_cfg.edns_payload >> 8;
	m[off + 8] = xdns_kit_cfg.edns_payload & 0xff;
	xdns_st64(&m[off + 9], 0);    /* TTL (rcode, version, DO=0) and rdlength: 6 bytes, then padding */
	xdns_st64(&m[off + 17], 0);   /* padding to the 4-byte multiple the checksum reads */
	return off + 4 + XDNS_KIT_OPT_LEN;
}

/*
 * The miss side (xdns_kit_out_xdp). Frame and question as the resolver program left them:
 * the layout in ks, the name in sc->walk (a walk ran: no cache hint), the header fields in
 * ks->pend.
 */
static __always_inline enum xdns_verdict xdns_kit_out(struct xdp_md *ctx, struct xdns_scratch *sc)
{
	__u32 zero = 0, qlen, dlen, plen, n, ifindex, l3, l4, dns;
	struct xdns_kit_scratch *ks = bpf_map_lookup_elem(&xdns_kit_scratch, &zero);
	struct xdns_kit_pend_key key = {};
	struct bpf_fib_lookup f = {};
	struct xdns_kit_zone *z;
	void *data, *end;
	struct ethhdr *eth;
	struct udphdr *udp;
	__u16 port, id;
	__u32 r;
	long rc;
	__s64 s;

	if (!ks)
		return XDNS_PASS_CACHE_MISS;
	l3 = ks->l3_off;
	l4 = ks->l4_off;
	dns = ks->dns_off;
	if (sc->hint.ref != XDNS_HINT_NONE)
		return xdns_kit_handover(ks, XDNS_KIT_HO_NO_WALK);
	if (l3 != ETH_HLEN || l4 != l3 + (ks->ipv6 ? 40 : 20) || dns != l4 + 8 || ks->pend.cookie)
		return xdns_kit_handover(ks, XDNS_KIT_HO_LAYOUT);
	qlen = sc->walk.qlen;
	if (qlen == 0 || qlen > 255)
		return xdns_kit_handover(ks, XDNS_KIT_HO_NO_WALK);
	z = xdns_kit_cut(sc, ks);
	if (!z)
		return xdns_kit_handover(ks, XDNS_KIT_HO_NO_ZONE);

	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + dns > end || dns > 80)
		return xdns_kit_handover(ks, XDNS_KIT_HO_LAYOUT);
	r = bpf_get_prandom_u32();
	/* the client's addresses and port; the server, of the client's family */
	if (ks->ipv6) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		if ((void *)(ip6 + 1) > end)
			return xdns_kit_handover(ks, XDNS_KIT_HO_LAYOUT);
		n = z->n6;
		if (n == 0 || n > XDNS_KIT_ADDRS)
			return xdns_kit_handover(ks, XDNS_KIT_HO_FAMILY);
		r %= n;
		asm volatile("" : "+r"(r));     /* keep the mask below: clang drops it, the verifier needs it */
		__builtin_memcpy(key.server, z->a6[r & (XDNS_KIT_ADDRS - 1)], 16);
		__builtin_memcpy(ks->pend.client, &ip6->saddr, 16);
		__builtin_memcpy(ks->pend.local, &ip6->daddr, 16);
		key.family = 6;
		f.family = XDNS_KIT_AF_INET6;
		__builtin_memcpy(f.ipv6_src, &ip6->daddr, 16);
		__builtin_memcpy(f.ipv6_dst, key.server, 16);
	} else {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > end)
			return xdns_kit_handover(ks, XDNS_KIT_HO_LAYOUT);
		n = z->n4;
		if (n == 0 || n > XDNS_KIT_ADDRS)
			return xdns_kit_handover(ks, XDNS_KIT_HO_FAMILY);
		r %= n;
		asm volatile("" : "+r"(r));
		__builtin_memcpy(key.server, z->a4[r & (XDNS_KIT_ADDRS - 1)], 4);
		__builtin_memset(ks->pend.client, 0, 16);
		__builtin_memset(ks->pend.local, 0, 16);
		__builtin_memcpy(ks->pend.client, &ip->saddr, 4);
		__builtin_memcpy(ks->pend.local, &ip->daddr, 4);
		key.family = 4;
		f.family = XDNS_KIT_AF_INET;
		f.ipv4_src = ip->daddr;
		__builtin_memcpy(&f.ipv4_dst, key.server, 4);
	}
	udp = data + l4;
	if ((void *)(udp + 1) > end)
		return xdns_kit_handover(ks, XDNS_KIT_HO_LAYOUT);
	ks->pend.cport = udp->source;

	/* random ID and port of the reserved range (its size at most 2^15: validated by userspace) */
	r = bpf_get_prandom_u32();
	id = (__u16)r;
	n = (__u32)xdns_kit_cfg.port_hi - xdns_kit_cfg.port_lo + 1;
	port = xdns_kit_cfg.port_lo + (__u16)((r >> 16) % (n ? n : 1));
	key.port = bpf_htons(port);
	key.id = id;

	dlen = xdns_kit_build(sc, ks, id);
	if (dlen < 12 + 1 + 4 + XDNS_KIT_OPT_LEN || dlen > 12 + 255 + 4 + XDNS_KIT_OPT_LEN)
		return xdns_kit_handover(ks, XDNS_KIT_HO_LAYOUT);
	plen = 8 + dlen;        /* UDP length */

	/* the next hop, as the host's own output would take it (we are the query's source) */
	f.l4_protocol = IPPROTO_UDP;
	f.sport = key.port;
	f.dport = bpf_htons(53);
	f.tot_len = plen + (ks->ipv6 ? 40 : 20);
	f.ifindex = ctx->ingress_ifindex;
	__builtin_memcpy(&ks->fib, &f, sizeof(f));
	/*
	 * First as the host's own output through the interface the query came in (the usual
	 * case: the servers are behind the same uplink); then as a router would forward it from
	 * there, to another interface (needs forwarding on the one it came in).
	 */
	rc = bpf_fib_lookup(ctx, &f, sizeof(f), BPF_FIB_LOOKUP_OUTPUT);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		__builtin_memcpy(&f, &ks->fib, sizeof(f));
		rc = bpf_fib_lookup(ctx, &f, sizeof(f), 0);
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return xdns_kit_handover(ks, XDNS_KIT_HO_FIB);
	ifindex = f.ifindex;

	ks->pend.sent_ns = bpf_ktime_get_ns();
	ks->pend.zone_hash = ks->zone_hash;
	ks->pend.zone_len = ks->zone_len;
	ks->pend.qlen = qlen;
	ks->pend.family = key.family;
	ks->pend.hops = 1;
	if (bpf_map_update_elem(&xdns_kit_pending, &key, &ks->pend, BPF_NOEXIST))
		return xdns_kit_handover(ks, XDNS_KIT_HO_PENDING_FULL);

	/* the frame to its new length: nothing of it written yet */
	s = (__s64)(dns + dlen) - (__s64)(ctx->data_end - ctx->data);
	if (s && bpf_xdp_adjust_tail(ctx, (int)s)) {
		bpf_map_delete_elem(&xdns_kit_pending, &key);
		return xdns_kit_handover(ks, XDNS_KIT_HO_REWRITE);
	}
	if (bpf_xdp_store_bytes(ctx, dns, ks->msg, dlen & 0x1ff))
		return XDNS_DROP_REWRITE;       /* cannot fail: the frame has these bytes now */

	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return XDNS_DROP_REWRITE;
	__builtin_memcpy(eth->h_dest, f.dmac, 6);
	__builtin_memcpy(eth->h_source, f.smac, 6);
	{
		/* the pseudo-header and UDP header, summed with the message (bpf_csum_diff) */
		__u32 ph[12] = {};
		__u64 sum;

		sum = bpf_csum_diff(NULL, 0, (__be32 *)ks->msg, (dlen + 3) & 0x1fc, 0);
		if (ks->ipv6) {
			struct ipv6hdr *ip6 = data + ETH_HLEN;

			if ((void *)(ip6 + 1) > end)
				return XDNS_DROP_REWRITE;
			__builtin_memcpy(&ip6->saddr, ks->pend.local, 16);
			__builtin_memcpy(&ip6->daddr, key.server, 16);
			ip6->payload_len = bpf_htons(plen);
			ip6->hop_limit = XDNS_KIT_TTL;
			__builtin_memcpy(ph, &ip6->saddr, 32);
			ph[8] = bpf_htonl(plen);
			ph[9] = bpf_htonl(IPPROTO_UDP);
			ph[10] = (__u32)key.port | (__u32)bpf_htons(53) << 16;
			ph[11] = bpf_htons(plen);
			sum = bpf_csum_diff(NULL, 0, ph, 48, sum);
		} else {
			struct iphdr *ip = data + ETH_HLEN;

			if ((void *)(ip + 1) > end)
				return XDNS_DROP_REWRITE;
			__builtin_memcpy(&ip->saddr, ks->pend.local, 4);
			__builtin_memcpy(&ip->daddr, key.server, 4);
			ip->tot_len = bpf_htons(20 + plen);
			ip->id = 0;
			ip->frag_off = bpf_htons(0x4000);       /* DF */
			ip->ttl = XDNS_KIT_TTL;
			ip->check = 0;
			ip->check = xdns_kit_csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)ip, 20, 0));
			ph[0] = ip->saddr;
			ph[1] = ip->daddr;
			ph[2] = (__u32)bpf_htons(IPPROTO_UDP) | (__u32)bpf_htons(plen) << 16;
			ph[3] = (__u32)key.port | (__u32)bpf_htons(53) << 16;
			ph[4] = bpf_htons(plen);
			sum = bpf_csum_diff(NULL, 0, ph, 20, sum);
		}
		udp = data + l4;
		if ((void *)(udp + 1) > end)
			return XDNS_DROP_REWRITE;
		udp->source = key.port;
		udp->dest = bpf_htons(53);
		udp->len = bpf_htons(plen);
		udp->check = xdns_kit_csum_fold(sum);
		if (udp->check == 0)
			udp->check = 0xffff;
	}
	ks->sent++;
	if (ifindex == ctx->ingress_ifindex)
		return XDNS_KIT_SENT;
	bpf_redirect(ifindex, 0);
	return XDNS_KIT_REDIRECTED;
}

/*
 * The response side (xdns_kit_in_xdp): a response (QR=1) to a reserved port, the layout in
 * ks. Checked as the userspace resolver checks its own (xdns_resolver::net, Expect::matches).
 */
static __always_inline enum xdns_verdict xdns_kit_in(struct xdp_md *ctx)
{
	__u32 zero = 0, l3, l4, dns, qlen, k;
	struct xdns_kit_scratch *ks = bpf_map_lookup_elem(&xdns_kit_scratch, &zero);
	struct xdns_kit_pend_key key = {};
	struct xdns_kit_pend *p;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct udphdr *udp;
	__u16 *h;
	__u8 local[16] = {};

	if (!ks)
		return XDNS_PASS_DNS_RESPONSE;
	l3 = ks->l3_off;
	l4 = ks->l4_off;
	dns = ks->dns_off;
	if (l3 > 18 || l4 > 128 || dns != l4 + 8 || ks->dns_len < 12 + 5)
		return XDNS_DROP_KIT_MALFORMED;
	if (ks->ipv6) {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > end)
			return XDNS_DROP_KIT_MALFORMED;
		__builtin_memcpy(key.server, &ip6->saddr, 16);
		__builtin_memcpy(local, &ip6->daddr, 16);
		key.family = 6;
	} else {
		struct iphdr *ip = data + l3;

		if ((void *)(ip + 1) > end)
			return XDNS_DROP_KIT_MALFORMED;
		__builtin_memcpy(key.server, &ip->saddr, 4);
		__builtin_memcpy(local, &ip->daddr, 4);
		key.family = 4;
	}
	udp = data + l4;
	h = data + dns;
	if ((void *)(udp + 1) > end || (void *)(h + 6) > end)
		return XDNS_DROP_KIT_MALFORMED;
	if (h[2] != bpf_htons(1))
		return XDNS_DROP_KIT_MALFORMED;
	key.port = udp->dest;
	key.id = h[0];
	p = bpf_map_lookup_elem(&xdns_kit_pending, &key);
	if (!p || xdns_ld64(local) != xdns_ld64(p->local) || xdns_ld64(&local[8]) != xdns_ld64(&p->local[8]))
		return XDNS_DROP_KIT_UNSOLICITED;
	if (udp->source != bpf_htons(53))
		return XDNS_DROP_KIT_SRC_PORT;
	/* the question as sent: name byte for byte (its 0x20 case), type, class */
	qlen = p->qlen;
	if (qlen == 0 || ks->dns_len < 12 + qlen + 4)
		return XDNS_DROP_KIT_QUESTION;
	if (bpf_xdp_load_bytes(ctx, dns + 12, ks->msg, (qlen + 4) & 0x1ff))
		return XDNS_DROP_KIT_QUESTION;
	for (k = 0; k < 32; k++) {
		__u32 off = k * 8;
		__u64 a, b, mask;

		if (off >= qlen)
			break;
		mask = qlen - off < 8 ? (1ULL << ((qlen - off) * 8)) - 1 : ~0ULL;
		a = xdns_ld64(&ks->msg[off]) & mask;
		b = xdns_ld64(&p->qname[off]) & mask;
		if (a != b)
			return XDNS_DROP_KIT_QUESTION;
	}
	if (ks->msg[qlen & 0xff] != p->qtype >> 8 || ks->msg[(qlen + 1) & 0x1ff] != (p->qtype & 0xff) ||
	    ks->msg[(qlen + 2) & 0x1ff] != 0 || ks->msg[(qlen + 3) & 0x1ff] != 1)
		return XDNS_DROP_KIT_QUESTION;
	ks->responses++;
	return XDNS_PASS_KIT_RESPONSE;
}

#endif /* XDNS_KIT_H */
