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
 *                          else is dropped and counted. A referral with glue is followed
 *                          (xdns_kit_follow); a final answer of the common shape (data,
 *                          or a negative answer: NXDOMAIN or NODATA with its SOA) is
 *                          rewritten into the client's reply, the bytes userspace would send,
 *                          and sent (xdns_kit_answer, kit_answered), and handed over too,
 *                          marked answered, for the cache; any other accepted response is
 *                          handed over in the ring buffer xdns_kit_events with its pending
 *                          entry, which the kernel claims (xdns_kit_hand, kit_handed); a full
 *                          ring or a long response passes to the daemon's socket on that
 *                          port instead (pass_kit_response), where userspace claims the
 *                          entry. Userspace finishes the resolution (caches it) and answers
 *                          the client once, unless the kernel did.
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
/*
 * Hide a value's range from the verifier's view of the code after a loop that ends on it:
 * a bound narrowed by each possible exit would make the rest verified once per exit.
 */
#define XDNS_KIT_OPAQUE(x) asm volatile("" : "+r"(x))

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

/*
 * The question sent: header (`id`, RD=0, QDCOUNT 1, ARCOUNT 1), the name `name` (`qlen`
 * bytes, any case) in random case, the type of ks->pend, class IN, our OPT. The name sent
 * goes to ks->pend.qname, the name as given to ks->pend.cname. Returns the message's length.
 */
static __always_inline __u32 xdns_kit_build(struct xdns_kit_scratch *ks, const __u8 *name, __u32 qlen, __u16 id)
{
	__u32 k, off;
	__u64 w, r;
	__u8 *m = ks->msg;

	__u32 qn;

	qlen &= 0xff;
	qn = qlen;
	XDNS_KIT_OPAQUE(qn);
	xdns_st64(&m[0], 0);
	xdns_st64(&m[8], 0);
	*(__u16 *)&m[0] = id;
	/* flags 0: QUERY, RD=0 (iterative); QDCOUNT 1, ARCOUNT 1 */
	m[5] = 1;
	m[11] = 1;
	for (k = 0; k < 32; k++) {
		__u64 mask;

		off = k * 8;
		if (off >= qn)
			break;
		mask = qn - off < 8 ? (1ULL << ((qn - off) * 8)) - 1 : ~0ULL;
		w = xdns_ld64(&name[off]) & mask;
		r = (__u64)bpf_get_prandom_u32() << 32 | bpf_get_prandom_u32();
		xdns_st64(&ks->pend.cname[off], w);
		w = xdns_kit_case(w, r);
		xdns_st64(&m[12 + off], w);
		xdns_st64(&ks->pend.qname[off], w);
	}
	off = 12 + qlen;
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

/* A random ID and a random port of the reserved range (its size at most 2^15: validated by userspace). */
static __always_inline void xdns_kit_port_id(struct xdns_kit_pend_key *key)
{
	__u32 r = bpf_get_prandom_u32(), n = (__u32)xdns_kit_cfg.port_hi - xdns_kit_cfg.port_lo + 1;

	key->id = (__u16)r;
	key->port = bpf_htons(xdns_kit_cfg.port_lo + (__u16)((r >> 16) % (n ? n : 1)));
}

/* How xdns_kit_send ended. */
enum xdns_kit_sent {
	XDNS_KIT_TX = 0,        /* rewritten, out the interface it came in */
	XDNS_KIT_REDIRECT,      /* rewritten, bpf_redirect to another */
	XDNS_KIT_NO_FIB,        /* no next hop: the frame untouched, nothing recorded */
	XDNS_KIT_NO_ENTRY,      /* the pending map refused the entry: untouched, nothing recorded */
	XDNS_KIT_NO_RESIZE,     /* the frame could not be resized: untouched, nothing recorded */
	XDNS_KIT_CLAIMED,       /* the entry replaced was claimed by userspace meanwhile: untouched, nothing recorded */
	XDNS_KIT_BROKEN,        /* a helper failed after the frame changed (cannot happen): drop */
};

/*
 * The next hop of the packet `f` describes (`bpf_fib_lookup`'s parameters; its outputs filled
 * on success): first as the host's own output through the interface the packet came in (the
 * usual case: the servers are behind the same uplink); then as a router would forward it from
 * there, to another interface (needs forwarding on the one it came in); then, when neither
 * gives one (forwarding off there, the default on every host: the helper refuses any lookup
 * from such an interface), the destination's entry in xdns_kit_hops, the next hop the daemon
 * resolved (route and neighbour): a live entry fills the outputs (ifindex, smac, dmac) as a
 * lookup would. `ks->fib` keeps the parameters for the later tries. Returns the last
 * lookup's result (BPF_FIB_LKUP_RET_SUCCESS from the table).
 */
static __always_inline long xdns_kit_next_hop(struct xdp_md *ctx, struct xdns_kit_scratch *ks, struct bpf_fib_lookup *f)
{
	struct bpf_fib_lookup *asked = (struct bpf_fib_lookup *)ks->fib;
	struct xdns_kit_hop_key hk = {};
	struct xdns_kit_hop *h;
	long rc;

	__builtin_memcpy(&ks->fib, f, sizeof(*f));
	rc = bpf_fib_lookup(ctx, f, sizeof(*f), BPF_FIB_LOOKUP_OUTPUT);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		__builtin_memcpy(f, &ks->fib, sizeof(*f));
		rc = bpf_fib_lookup(ctx, f, sizeof(*f), 0);
	}
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	/* the destination as asked (a failed lookup may have put the gateway in its place) */
	if (asked->family == XDNS_KIT_AF_INET6) {
		hk.family = 6;
		__builtin_memcpy(hk.addr, asked->ipv6_dst, 16);
	} else {
		hk.family = 4;
		__builtin_memcpy(hk.addr, &asked->ipv4_dst, 4);
	}
	h = bpf_map_lookup_elem(&xdns_kit_hops, &hk);
	if (!h || h->expires_ns <= bpf_ktime_get_ns()) {
		ks->hop_miss++;
		return rc;
	}
	f->ifindex = h->ifindex;
	__builtin_memcpy(f->smac, h->smac, 6);
	__builtin_memcpy(f->dmac, h->dmac, 6);
	ks->hop_table++;
	return BPF_FIB_LKUP_RET_SUCCESS;
}

/*
 * The headers of a rewritten frame (a query sent, or a client's reply): Ethernet to the next
 * hop `f` found, IPv4 (ID 0, DF, TTL 64, its checksum) or IPv6 (hop limit 64) from ks->pend.local
 * to `dst` with `plen` bytes of UDP, the UDP header from `sport` to `dport` and its checksum:
 * `sum`, the message's own (bpf_csum_diff), plus the pseudo-header's. The frame (an untagged
 * IPv4 without options or IPv6 frame, its layout in ks) already has the message at its new
 * length. Returns 0, or -1 if the headers are not in the frame (cannot happen).
 */
static __always_inline int xdns_kit_headers(struct xdp_md *ctx, struct xdns_kit_scratch *ks,
					   const struct bpf_fib_lookup *f, const __u8 *dst,
					   __be16 sport, __be16 dport, __u32 plen, __u64 sum)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u32 ph[12] = {}, l4 = ks->l4_off & 0xff;

	if ((void *)(eth + 1) > end)
		return -1;
	__builtin_memcpy(eth->h_dest, f->dmac, 6);
	__builtin_memcpy(eth->h_source, f->smac, 6);
	if (ks->ipv6) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		if ((void *)(ip6 + 1) > end)
			return -1;
		__builtin_memcpy(&ip6->saddr, ks->pend.local, 16);
		__builtin_memcpy(&ip6->daddr, dst, 16);
		ip6->payload_len = bpf_htons(plen);
		ip6->hop_limit = XDNS_KIT_TTL;
		__builtin_memcpy(ph, &ip6->saddr, 32);
		ph[8] = bpf_htonl(plen);
		ph[9] = bpf_htonl(IPPROTO_UDP);
		ph[10] = (__u32)sport | (__u32)dport << 16;
		ph[11] = bpf_htons(plen);
		sum = bpf_csum_diff(NULL, 0, ph, 48, sum);
	} else {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > end)
			return -1;
		__builtin_memcpy(&ip->saddr, ks->pend.local, 4);
		__builtin_memcpy(&ip->daddr, dst, 4);
		ip->tot_len = bpf_htons(20 + plen);
		ip->id = 0;
		ip->frag_off = bpf_htons(0x4000);       /* DF */
		ip->ttl = XDNS_KIT_TTL;
		ip->check = 0;
		ip->check = xdns_kit_csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)ip, 20, 0));
		ph[0] = ip->saddr;
		ph[1] = ip->daddr;
		ph[2] = (__u32)bpf_htons(IPPROTO_UDP) | (__u32)bpf_htons(plen) << 16;
		ph[3] = (__u32)sport | (__u32)dport << 16;
		ph[4] = bpf_htons(plen);
		sum = bpf_csum_diff(NULL, 0, ph, 20, sum);
	}
	udp = data + l4;
	if ((void *)(udp + 1) > end)
		return -1;
	udp->source = sport;
	udp->dest = dport;
	udp->len = bpf_htons(plen);
	udp->check = xdns_kit_csum_fold(sum);
	if (udp->check == 0)
		udp->check = 0xffff;
	return 0;
}

/*
 * Send the query in ks->msg (`dlen` bytes) to key->server from the frame in ctx (an
 * untagged IPv4 without options or IPv6 frame, its layout in ks): the next hop by
 * bpf_fib_lookup, the entry ks->pend recorded under `key` (with `old`, a response's entry,
 * replaced: inserted, then the old one deleted, so the client's state always has one
 * owner), the frame resized, the message stored, the headers rewritten (source
 * ks->pend.local; TTL or hop limit 64; IPv4 ID 0, DF) and the checksums computed whole.
 * Shared by the miss (xdns_kit_out) and a followed referral (xdns_kit_in).
 */
static __always_inline enum xdns_kit_sent xdns_kit_send(struct xdp_md *ctx, struct xdns_kit_scratch *ks,
							  struct xdns_kit_pend_key *key, __u32 dlen,
							  const struct xdns_kit_pend_key *old)
{
	struct bpf_fib_lookup f = {};
	__u32 plen = 8 + dlen, ifindex, dns = ks->dns_off & 0xff;
	long rc;
	__s64 s;

	if (ks->ipv6) {
		f.family = XDNS_KIT_AF_INET6;
		__builtin_memcpy(f.ipv6_src, ks->pend.local, 16);
		__builtin_memcpy(f.ipv6_dst, key->server, 16);
	} else {
		f.family = XDNS_KIT_AF_INET;
		__builtin_memcpy(&f.ipv4_src, ks->pend.local, 4);
		__builtin_memcpy(&f.ipv4_dst, key->server, 4);
	}
	/* the next hop, as the host's own output would take it (we are the query's source) */
	f.l4_protocol = IPPROTO_UDP;
	f.sport = key->port;
	f.dport = bpf_htons(53);
	f.tot_len = plen + (ks->ipv6 ? 40 : 20);
	f.ifindex = ctx->ingress_ifindex;
	rc = xdns_kit_next_hop(ctx, ks, &f);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDNS_KIT_NO_FIB;
	ifindex = f.ifindex;

	ks->pend.sent_ns = bpf_ktime_get_ns();
	ks->pend.family = key->family;
	if (bpf_map_update_elem(&xdns_kit_pending, key, &ks->pend, BPF_NOEXIST))
		return XDNS_KIT_NO_ENTRY;
	if (old && bpf_map_delete_elem(&xdns_kit_pending, old)) {
		/* claimed since it was read (the daemon's timer): that claim answers the client */
		bpf_map_delete_elem(&xdns_kit_pending, key);
		return XDNS_KIT_CLAIMED;
	}

	/* the frame to its new length: nothing of it written yet */
	s = (__s64)(dns + dlen) - (__s64)(ctx->data_end - ctx->data);
	if (s && bpf_xdp_adjust_tail(ctx, (int)s)) {
		/*
		 * A miss: the entry deleted, the miss handed over. A referral: the old entry is
		 * gone already, so the new one stays, never sent; the daemon's timer claims it
		 * and resolves the question (the client is answered late, never lost).
		 */
		if (!old)
			bpf_map_delete_elem(&xdns_kit_pending, key);
		return XDNS_KIT_NO_RESIZE;
	}
	if (bpf_xdp_store_bytes(ctx, dns, ks->msg, dlen & 0x1ff))
		return XDNS_KIT_BROKEN;         /* cannot fail: the frame has these bytes now */

	if (xdns_kit_headers(ctx, ks, &f, key->server, key->port, bpf_htons(53), plen,
			     bpf_csum_diff(NULL, 0, (__be32 *)ks->msg, (dlen + 3) & 0x1fc, 0)))
		return XDNS_KIT_BROKEN;
	if (ifindex == ctx->ingress_ifindex)
		return XDNS_KIT_TX;
	bpf_redirect(ifindex, 0);
	return XDNS_KIT_REDIRECT;
}

/*
 * The miss side (xdns_kit_out_xdp). Frame and question as the resolver program left them:
 * the layout in ks, the name in sc->walk (a walk ran: no cache hint), the header fields in
 * ks->pend.
 */
static __always_inline enum xdns_verdict xdns_kit_out(struct xdp_md *ctx, struct xdns_scratch *sc)
{
	__u32 zero = 0, qlen, dlen, n, l3, l4, dns;
	struct xdns_kit_scratch *ks = bpf_map_lookup_elem(&xdns_kit_scratch, &zero);
	struct xdns_kit_pend_key key = {};
	struct xdns_kit_zone *z;
	void *data, *end;
	struct udphdr *udp;
	__u32 r;

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
	}
	udp = data + l4;
	if ((void *)(udp + 1) > end || data + ETH_HLEN > end)
		return xdns_kit_handover(ks, XDNS_KIT_HO_LAYOUT);
	ks->pend.cport = udp->source;
	ks->pend.lport = udp->dest;
	/* the way the query came: the kernel's answer goes back that way (xdns_kit_answer) */
	__builtin_memcpy(ks->pend.cmac, ((struct ethhdr *)data)->h_source, 6);
	__builtin_memcpy(ks->pend.lmac, ((struct ethhdr *)data)->h_dest, 6);
	ks->pend.ifindex = ctx->ingress_ifindex;

	xdns_kit_port_id(&key);
	dlen = xdns_kit_build(ks, sc->walk.name, qlen, key.id);
	if (dlen < 12 + 1 + 4 + XDNS_KIT_OPT_LEN || dlen > 12 + 255 + 4 + XDNS_KIT_OPT_LEN)
		return xdns_kit_handover(ks, XDNS_KIT_HO_LAYOUT);

	ks->pend.zone_hash = ks->zone_hash;
	ks->pend.zone_len = ks->zone_len;
	ks->pend.qlen = qlen;
	ks->pend.hops = 1;
	switch (xdns_kit_send(ctx, ks, &key, dlen, NULL)) {
	case XDNS_KIT_TX:
		ks->sent++;
		return XDNS_KIT_SENT;
	case XDNS_KIT_REDIRECT:
		ks->sent++;
		return XDNS_KIT_REDIRECTED;
	case XDNS_KIT_NO_FIB:
		return xdns_kit_handover(ks, XDNS_KIT_HO_FIB);
	case XDNS_KIT_NO_ENTRY:
		return xdns_kit_handover(ks, XDNS_KIT_HO_PENDING_FULL);
	case XDNS_KIT_NO_RESIZE:
		return xdns_kit_handover(ks, XDNS_KIT_HO_REWRITE);
	default:
		return XDNS_DROP_REWRITE;
	}
}

/* ---- the response side: a referral read within bounds, followed when it has glue ---- */

/* Argument of the response side's loops: the scratch (bpf_loop takes one pointer). */
struct xdns_kit_in_ctx {
	struct xdns_kit_scratch *ks;
};

/*
 * One step of reading a name at ks->ref.npos in resp[] into nb[] (a bpf_loop body): a
 * label copied lowercased (eight words; nb[] has the room) and its start marked in nbits,
 * or a compression pointer followed, which must point before itself (so no loop), at the
 * message (not into the header). The name's end in the record (after its first pointer or
 * its root label) goes to nend. Over 255 bytes, past the message, a label type other than
 * 0 or 3: ndone 2.
 */
static long xdns_kit_label(__u64 i, void *arg)
{
	struct xdns_kit_scratch *ks = ((struct xdns_kit_in_ctx *)arg)->ks;
	struct xdns_kit_ref *r;
	__u32 pos, o, len, b, k, ptr;

	if (!ks)
		return 1;
	r = &ks->ref;
	pos = r->npos;
	o = r->nlen;
	len = r->len;
	if (pos >= len || len > XDNS_KIT_RESP_MAX || o > 255)
		goto bad;
	b = ks->resp[pos & 2047];
	if (b >= 0xc0) {
		if (pos + 1 >= len)
			goto bad;
		ptr = (b & 0x3f) << 8 | ks->resp[(pos + 1) & 2047];
		if (ptr >= pos || ptr < 12)
			goto bad;
		if (!r->nend)
			r->nend = pos + 2;
		r->npos = ptr;
		r->jumps++;
		return 0;
	}
	if (b > 63 || pos + 1 + b > len || o + 1 + b > 255)
		goto bad;
	r->nbits[(o >> 6) & 3] |= 1ULL << (o & 63);
	for (k = 0; k < 8; k++) {
		if (k * 8 > b)
			break;
		xdns_st64(&ks->nb[(o & 255) + k * 8], xdns_lower8(xdns_ld64(&ks->resp[(pos & 2047) + k * 8])));
	}
	r->nlen = o + 1 + b;
	if (b == 0) {
		if (!r->nend)
			r->nend = pos + 1;
		r->ndone = 1;
		return 1;
	}
	r->npos = pos + 1 + b;
	return 0;
bad:
	r->ndone = 2;
	return 1;
}

/* Read the name at `pos` of resp[] into nb[] (lowercased, ref.nlen bytes, label starts in
 * ref.nbits); its end in the record in ref.nend. Returns 1 when it is a valid name. */
static __always_inline int xdns_kit_name(struct xdns_kit_in_ctx *c, __u32 pos)
{
	struct xdns_kit_ref *r = &c->ks->ref;

	r->npos = pos;
	r->nend = 0;
	r->nlen = 0;
	r->jumps = 0;
	r->ndone = 0;
	r->nbits[0] = 0;
	r->nbits[1] = 0;
	r->nbits[2] = 0;
	r->nbits[3] = 0;
	bpf_loop(160, xdns_kit_label, c, 0);
	return r->ndone == 1;
}

/* Is byte `off` a label start in `bits`? */
static __always_inline int xdns_kit_bit(const __u64 *bits, __u32 off)
{
	return (bits[(off >> 6) & 3] >> (off & 63)) & 1;
}

/* nb[a .. a+n) == lq[b .. b+n) (both lowercased; a + n and b + n at most 255). */
static __always_inline int xdns_kit_suffix_eq(struct xdns_kit_scratch *ks, __u32 a, __u32 b, __u32 n)
{
	__u32 k, off;

	if (a + n > 255 || b + n > 255)
		return 0;
	XDNS_KIT_OPAQUE(n);
	for (k = 0; k < 32; k++) {
		__u64 mask;

		off = k * 8;
		if (off >= n)
			break;
		mask = n - off < 8 ? (1ULL << ((n - off) * 8)) - 1 : ~0ULL;
		if ((xdns_ld64(&ks->nb[(a + off) & 255]) ^ xdns_ld64(&ks->lq[(b + off) & 255])) & mask)
			return 0;
	}
	return 1;
}

/* Seeded hash of nb[0 .. nlen) (NS names and glue owners compared by it). */
static __always_inline __u64 xdns_kit_nb_hash(struct xdns_kit_scratch *ks)
{
	__u32 n = ks->ref.nlen, k, off;
	__u64 s = xdns_cfg.seed ^ 0x6e73;

	for (k = 0; k < 32; k++) {
		__u64 w;

		off = k * 8;
		if (off >= n || n > 255)
			break;
		w = xdns_ld64(&ks->nb[off & 255]);
		if (n - off < 8)
			w &= (1ULL << ((n - off) * 8)) - 1;
		s = xdns_hash_step(s, w);
	}
	return xdns_hash_fin(s ^ n);
}

static __always_inline __u32 xdns_kit_be16(const __u8 *p)
{
	return (__u32)p[0] << 8 | p[1];
}

/*
 * Record `i` of the authority and additional sections (a bpf_loop body), at ref.pos:
 * authority: an SOA ends the parse (a negative answer); an NS record's owner must be
 * strictly below the cut asked and an ancestor-or-self of the question name, the same for
 * every NS record (the new cut), its name's hash kept; other types are skipped. Additional:
 * an A or AAAA of class IN whose owner is one of those NS names and within the cut asked
 * (out-of-bailiwick glue is never taken) is kept, up to four of each family; the rest is
 * skipped.
 */
static long xdns_kit_record(__u64 i, void *arg)
{
	struct xdns_kit_in_ctx *c = arg;
	struct xdns_kit_scratch *ks = c->ks;
	struct xdns_kit_ref *r;
	__u32 L, p, type, class, ttl, rdlen, rd, end, qlen, z, k, n;
	__u64 h;

	if (!ks)
		return 1;
	r = &ks->ref;
	if (i >= r->total)
		return 1;
	if (!xdns_kit_name(c, r->pos))
		goto bad;
	L = r->nlen;
	p = r->nend;
	if (p + 10 > r->len || p > 2047)
		goto bad;
	type = xdns_kit_be16(&ks->resp[p & 2047]);
	class = xdns_kit_be16(&ks->resp[(p & 2047) + 2]);
	ttl = xdns_kit_be16(&ks->resp[(p & 2047) + 4]) << 16 | xdns_kit_be16(&ks->resp[(p & 2047) + 6]);
	rdlen = xdns_kit_be16(&ks->resp[(p & 2047) + 8]);
	rd = p + 10;
	end = rd + rdlen;
	if (end > r->len)
		goto bad;
	r->pos = end;
	qlen = r->qlen;
	z = r->zone_len;
	if (i < r->nscount) {
		if (type == 6) {
			r->why = XDNS_KIT_REF_NEGATIVE;
			return 1;
		}
		if (type != 2 || class != 1)
			return 0;
		/* the owner: strictly below the cut asked, above or at the question name */
		if (L <= z || L > qlen || !xdns_kit_bit(r->qbits, qlen - L) || !xdns_kit_suffix_eq(ks, 0, qlen - L, L)) {
			r->why = XDNS_KIT_REF_BAILIWICK;
			return 1;
		}
		if (r->cut_len && r->cut_len != L) {
			r->why = XDNS_KIT_REF_MIXED;
			return 1;
		}
		r->cut_len = L;
		if (ttl & 0x80000000)
			ttl = 0;        /* RFC 2181 8: read as 0 */
		if (ttl < r->ttl)
			r->ttl = ttl;
		if (!xdns_kit_name(c, rd) || r->nend != end)
			goto bad;
		n = r->n_ns;
		if (n < XDNS_KIT_NS) {
			r->ns_hash[n & (XDNS_KIT_NS - 1)] = xdns_kit_nb_hash(ks);
			r->n_ns = n + 1;
		}
		return 0;
	}
	if (class != 1 || !((type == 1 && rdlen == 4) || (type == 28 && rdlen == 16)))
		return 0;
	/* glue: within the cut asked, the owner of one of the NS names */
	if (L < z || !xdns_kit_bit(r->nbits, L - z) || !xdns_kit_suffix_eq(ks, L - z, qlen - z, z))
		return 0;
	h = xdns_kit_nb_hash(ks);
	n = r->n_ns;
	for (k = 0; k < XDNS_KIT_NS; k++) {
		if (k >= n)
			return 0;
		if (r->ns_hash[k] == h)
			break;
	}
	if (k == XDNS_KIT_NS)
		return 0;
	if (rd > 2047)
		goto bad;
	if (type == 1) {
		n = r->n4;
		if (n < XDNS_KIT_ADDRS) {
			__builtin_memcpy(r->g4[n & (XDNS_KIT_ADDRS - 1)], &ks->resp[rd & 2047], 4);
			r->n4 = n + 1;
		}
	} else {
		n = r->n6;
		if (n < XDNS_KIT_ADDRS) {
			xdns_st64(r->g6[n & (XDNS_KIT_ADDRS - 1)], xdns_ld64(&ks->resp[rd & 2047]));
			xdns_st64(&r->g6[n & (XDNS_KIT_ADDRS - 1)][8], xdns_ld64(&ks->resp[(rd & 2047) + 8]));
			r->n6 = n + 1;
		}
	}
	return 0;
bad:
	r->why = XDNS_KIT_REF_BAD;
	return 1;
}

/*
 * One label of lq[] at ref.hoff hashed into lh[ref.hn] (a bpf_loop body): words of (length
 * octet, label bytes), the last zero padded, absorbed into the seed: hash.h's label hash,
 * as the walk computes it. Its start marked in qbits. Ends after the root label.
 */
static long xdns_kit_label_hash(__u64 i, void *arg)
{
	struct xdns_kit_scratch *ks = ((struct xdns_kit_in_ctx *)arg)->ks;
	struct xdns_kit_ref *r;
	__u32 o, b, k, j;
	__u64 s = xdns_cfg.seed;

	if (!ks)
		return 1;
	r = &ks->ref;
	o = r->hoff;
	j = r->hn;
	if (o > 254 || j > 127)
		return 1;
	b = ks->lq[o];
	if (b > 63)
		return 1;
	r->qbits[(o >> 6) & 3] |= 1ULL << (o & 63);
	for (k = 0; k < 8; k++) {
		__u64 w;

		if (k * 8 > b)
			break;
		w = xdns_ld64(&ks->lq[o + k * 8]);
		if (b + 1 - k * 8 < 8)
			w &= (1ULL << ((b + 1 - k * 8) * 8)) - 1;
		s = xdns_hash_step(s, w);
	}
	ks->lh[j] = s;
	r->loff[j] = o;
	r->hn = j + 1;
	r->hoff = o + 1 + b;
	return b == 0;
}

/*
 * The question as the client sent it (p->cname, `qlen` bytes, 1 to 255) lowercased into
 * ks->lq, the word after it zeroed; then its labels hashed and their starts recorded
 * (xdns_kit_label_hash, in c's ks->ref: the caller sets hoff, hn and qbits first).
 * Shared by a referral followed (xdns_kit_follow) and a negative answer (xdns_kit_neg).
 */
static __always_inline void xdns_kit_lower_question(struct xdns_kit_in_ctx *c, const struct xdns_kit_pend *p, __u32 qlen)
{
	struct xdns_kit_scratch *ks = c->ks;
	__u32 k, off, n = qlen;

	XDNS_KIT_OPAQUE(n);
	for (k = 0; k < 33; k++) {
		off = k * 8;
		if (off >= n + 8)
			break;
		xdns_st64(&ks->lq[off & 255], off < n ? xdns_lower8(xdns_ld64(&p->cname[off & 255])) &
			  (n - off < 8 ? (1ULL << ((n - off) * 8)) - 1 : ~0ULL) : 0);
	}
	bpf_loop(128, xdns_kit_label_hash, c, 0);
}

/*
 * The cut learnt from a followed referral into xdns_kit_zones, as userspace writes one
 * (xdns_bpf::kit::KitMaps::set_zone): its lowercased name, the glue of both families, the
 * expiry from the NS RRset's TTL (at most XDNS_KIT_LEARN_TTL). Written only where no
 * unexpired cut of that name is (userspace's entries win); a full map keeps nothing.
 */
#define XDNS_KIT_LEARN_TTL 86400
static __always_inline void xdns_kit_learn(struct xdns_kit_scratch *ks, __u64 hash, __u32 labels)
{
	struct xdns_kit_zone_key k = { .hash = hash };
	struct xdns_kit_zone *old = bpf_map_lookup_elem(&xdns_kit_zones, &k);
	struct xdns_kit_zone *v = &ks->zone;
	struct xdns_kit_ref *r = &ks->ref;
	__u32 n = r->cut_len, q = r->qlen, off, j, ttl = r->ttl;
	__u64 now = bpf_ktime_get_ns();

	if (old && old->expires_ns > now)
		return;
	if (n == 0 || n > q || q > 255 || ttl == 0)
		return;
	__builtin_memset(v, 0, sizeof(*v));
	v->expires_ns = now + (__u64)(ttl < XDNS_KIT_LEARN_TTL ? ttl : XDNS_KIT_LEARN_TTL) * 1000000000ULL;
	v->name_len = n;
	v->labels = labels;
	XDNS_KIT_OPAQUE(n);
	for (j = 0; j < 32; j++) {
		off = j * 8;
		if (off >= n)
			break;
		xdns_st64(&v->name[off], xdns_ld64(&ks->lq[(q - n + off) & 255]) &
			  (n - off < 8 ? (1ULL << ((n - off) * 8)) - 1 : ~0ULL));
	}
	v->n4 = r->n4 < XDNS_KIT_ADDRS ? r->n4 : XDNS_KIT_ADDRS;
	v->n6 = r->n6 < XDNS_KIT_ADDRS ? r->n6 : XDNS_KIT_ADDRS;
	__builtin_memcpy(v->a4, r->g4, sizeof(v->a4));
	__builtin_memcpy(v->a6, r->g6, sizeof(v->a6));
	if (!bpf_map_update_elem(&xdns_kit_zones, &k, v, BPF_ANY))
		ks->learnt++;
}

/*
 * A genuine response (checked by xdns_kit_in against the pending entry `p` under `old`):
 * followed when it is a referral with glue, else handed to the daemon's socket as before.
 * A referral: NOERROR, AA=0, TC=0, no answer, an NS RRset in authority owned by a name
 * strictly below the cut asked and above (or at) the question name, no SOA. Followed when
 * the glue of one of its NS names (within the cut asked) has an address of the client's
 * family and fewer than XDNS_KIT_HOPS queries were sent: the same frame becomes the next
 * query (new ID, port and case), the entry is replaced (hops + 1, the new cut).
 */
static __always_inline enum xdns_verdict xdns_kit_follow(struct xdp_md *ctx, struct xdns_kit_scratch *ks,
							   struct xdns_kit_pend *p, const struct xdns_kit_pend_key *old)
{
	struct xdns_kit_in_ctx c = { .ks = ks };
	struct xdns_kit_pend_key key = {};
	struct xdns_kit_ref *r = &ks->ref;
	__u32 flags, len, qlen, k, nlab, jc, dlen, n, x;
	__u64 s;
	__u8 *h = ks->resp;

	len = ks->dns_len;
	if (len > XDNS_KIT_RESP_MAX || len < 12)
		return XDNS_PASS_KIT_RESPONSE;
	if (bpf_xdp_load_bytes(ctx, ks->dns_off & 0xff, ks->resp, len))
		return XDNS_PASS_KIT_UNPARSED;
	flags = xdns_kit_be16(&h[2]);
	/* NOERROR, no answer, something in authority; AA=0, TC=0 (TC: userspace retries over TCP) */
	if ((flags & 0x7e0f) != 0 || xdns_kit_be16(&h[6]) != 0 || xdns_kit_be16(&h[8]) == 0)
		return XDNS_PASS_KIT_RESPONSE;
	if (ks->l3_off != ETH_HLEN || ks->l4_off != ETH_HLEN + (ks->ipv6 ? 40 : 20))
		return XDNS_PASS_KIT_UNPARSED;
	qlen = p->qlen;
	if (qlen == 0 || qlen > 255 || p->zone_len == 0 || p->zone_len > qlen)
		return XDNS_PASS_KIT_UNPARSED;
	__builtin_memset(r, 0, sizeof(*r));
	r->len = len;
	r->qlen = qlen;
	r->zone_len = p->zone_len;
	r->nscount = xdns_kit_be16(&h[8]);
	r->total = r->nscount + xdns_kit_be16(&h[10]);
	r->pos = 12 + qlen + 4;
	r->ttl = ~0U;
	if (r->total > XDNS_KIT_RECORDS)
		return XDNS_PASS_KIT_UNPARSED;
	/* the question name lowercased; its label hashes and starts */
	xdns_kit_lower_question(&c, p, qlen);
	nlab = r->hn;
	if (nlab == 0 || nlab > 128 || r->hoff != qlen)
		return XDNS_PASS_KIT_UNPARSED;

	bpf_loop(XDNS_KIT_RECORDS, xdns_kit_record, &c, 0);
	switch (r->why) {
	case XDNS_KIT_REF_OK:
		break;
	case XDNS_KIT_REF_NEGATIVE:
		return XDNS_PASS_KIT_RESPONSE;
	case XDNS_KIT_REF_BAILIWICK:
	case XDNS_KIT_REF_MIXED:
		return XDNS_PASS_KIT_BAILIWICK;
	default:
		return XDNS_PASS_KIT_UNPARSED;
	}
	if (r->cut_len == 0)
		return XDNS_PASS_KIT_RESPONSE;  /* no NS RRset: not a referral */
	if (p->hops >= XDNS_KIT_HOPS)
		return XDNS_PASS_KIT_HOP_LIMIT;
	n = ks->ipv6 ? r->n6 : r->n4;
	if (n == 0)
		return XDNS_PASS_KIT_GLUELESS;

	/* the new cut's hash: its labels' hashes folded root first (hash.h), as userspace keys it */
	s = xdns_cfg.seed ^ XDNS_HASH_SUFFIX;
	r->cut_labels = 0xff;
	for (k = 0; k < 128; k++) {
		__u32 j = (nlab - 1 - k) & 127;

		if (k >= nlab)
			break;
		s = xdns_hash_step(s, ks->lh[j]);
		if (r->loff[j] == qlen - r->cut_len) {
			/* the results to memory: read back unknown, so what follows is verified once, not once per k */
			r->cut_labels = k;
			ks->zone_hash = xdns_hash_fin(s);
			break;
		}
	}
	jc = *(volatile __u32 *)&r->cut_labels;
	if (jc > 127)
		return XDNS_PASS_KIT_UNPARSED;

	/* the next server: a glue address of the client's family, at random */
	x = bpf_get_prandom_u32() % (n < XDNS_KIT_ADDRS ? n : XDNS_KIT_ADDRS);
	asm volatile("" : "+r"(x));     /* keep the mask below: clang drops it, the verifier needs it */
	if (ks->ipv6) {
		__builtin_memcpy(key.server, r->g6[x & (XDNS_KIT_ADDRS - 1)], 16);
		key.family = 6;
	} else {
		__builtin_memcpy(key.server, r->g4[x & (XDNS_KIT_ADDRS - 1)], 4);
		key.family = 4;
	}
	__builtin_memcpy(&ks->pend, p, sizeof(ks->pend));
	xdns_kit_port_id(&key);
	dlen = xdns_kit_build(ks, ks->pend.cname, qlen, key.id);
	if (dlen < 12 + 1 + 4 + XDNS_KIT_OPT_LEN || dlen > 12 + 255 + 4 + XDNS_KIT_OPT_LEN)
		return XDNS_PASS_KIT_UNPARSED;
	ks->pend.zone_hash = *(volatile __u64 *)&ks->zone_hash;
	ks->pend.zone_len = r->cut_len;
	ks->pend.hops = p->hops + 1;
	switch (xdns_kit_send(ctx, ks, &key, dlen, old)) {
	case XDNS_KIT_TX:
		ks->hops++;
		xdns_kit_learn(ks, ks->pend.zone_hash, jc);
		return XDNS_KIT_REFERRAL_FOLLOWED;
	case XDNS_KIT_REDIRECT:
		ks->hops++;
		xdns_kit_learn(ks, ks->pend.zone_hash, jc);
		return XDNS_KIT_REFERRAL_REDIRECTED;
	case XDNS_KIT_CLAIMED:
		return XDNS_DROP_KIT_UNSOLICITED;
	case XDNS_KIT_NO_FIB:
	case XDNS_KIT_NO_ENTRY:
	case XDNS_KIT_NO_RESIZE:
		return XDNS_PASS_KIT_NO_HOP;
	default:
		return XDNS_DROP_REWRITE;
	}
}

/*
 * The response (the message's `len` bytes at `dns`, at most XDNS_KIT_RESP_MAX) and its pending
 * entry `p` (under `key`) into a record of the ring buffer xdns_kit_events marked `flags`,
 * then the entry claimed (deleted) by the kernel: XDNS_CONTINUE with the record in *evp, for
 * the caller to submit. Else nothing is left reserved and the verdict says why:
 * pass_kit_response (the ring full, counted, or the message unreadable: the daemon's socket
 * on that port takes the response and claims the entry), drop_kit_unsolicited (claimed since
 * it was read, by the daemon's timer: that claim answers the client).
 */
static __always_inline enum xdns_verdict xdns_kit_claim(struct xdp_md *ctx, struct xdns_kit_scratch *ks,
							  const struct xdns_kit_pend *p, const struct xdns_kit_pend_key *key,
							  __u32 dns, __u32 len, __u32 flags, struct xdns_kit_event **evp)
{
	struct xdns_kit_event *ev = bpf_ringbuf_reserve(&xdns_kit_events, sizeof(*ev), 0);

	if (!ev) {
		ks->ring_full++;
		return XDNS_PASS_KIT_RESPONSE;
	}
	if (bpf_xdp_load_bytes(ctx, dns, ev->msg, len)) {
		bpf_ringbuf_discard(ev, 0);
		return XDNS_PASS_KIT_RESPONSE;
	}
	__builtin_memcpy(&ev->key, key, sizeof(ev->key));
	__builtin_memcpy(&ev->pend, p, sizeof(ev->pend));
	ev->len = len;
	ev->flags = flags;
	if (bpf_map_delete_elem(&xdns_kit_pending, key)) {
		bpf_ringbuf_discard(ev, 0);
		return XDNS_DROP_KIT_UNSOLICITED;
	}
	*evp = ev;
	return XDNS_CONTINUE;
}

/*
 * A final response (not a referral the kernel follows: an answer, a negative answer, or
 * anything else xdns_kit_follow leaves as pass_kit_response) handed to userspace through
 * the ring buffer: its pending entry `p` (under `key`) copied into the record, then claimed
 * (deleted) by the kernel, so whoever deletes it answers the client, as when userspace
 * claims; the frame is dropped. Userspace reads the records in batches: no socket read and no
 * claim syscall per response. A response longer than XDNS_KIT_RESP_MAX or a full ring keeps
 * the socket path (pass_kit_response); an entry the daemon's timer claimed meanwhile makes
 * the response unsolicited.
 */
static __always_inline enum xdns_verdict xdns_kit_hand(struct xdp_md *ctx, struct xdns_kit_scratch *ks,
						         struct xdns_kit_pend *p, const struct xdns_kit_pend_key *key)
{
	struct xdns_kit_event *ev = NULL;
	__u32 len = ks->dns_len, dns = ks->dns_off & 0xff;
	enum xdns_verdict v;

	if (len < 12 || len > XDNS_KIT_RESP_MAX)
		return XDNS_PASS_KIT_RESPONSE;
	v = xdns_kit_claim(ctx, ks, p, key, dns, len, 0, &ev);
	if (v != XDNS_CONTINUE || !ev)
		return v;
	bpf_ringbuf_submit(ev, 0);
	ks->handed++;
	return XDNS_KIT_HANDED;
}

/* ---- a final answer of the common shape, answered by the kernel itself ---- */

#define XDNS_KIT_TYPE_A 1
#define XDNS_KIT_TYPE_TXT 16
#define XDNS_KIT_TYPE_AAAA 28
#define XDNS_KIT_TYPE_OPT 41

/*
 * Answer record `i` at ans.pos in resp[] (a bpf_loop body): it must be the question's RRset
 * as userspace writes it in the cache body, byte for byte but the TTL: owner the pointer to
 * the question (0xc00c), the question's type, class IN, RDATA of the type's length (A 4,
 * AAAA 16, TXT at least 1). Its TTL rewritten in resp[] as the cache stores it (RFC 2181
 * 8: the top bit set is 0; capped to max_ttl). Anything else: ans.bad.
 */
static long xdns_kit_ans_record(__u64 i, void *arg)
{
	struct xdns_kit_in_ctx *c = arg;
	struct xdns_kit_scratch *ks = c->ks;
	struct xdns_kit_ans *a = &ks->ans;
	__u32 pos = a->pos, ttl, rdlen, t = a->qtype;
	__u8 *h = ks->resp;

	if (i >= a->n)
		return 1;
	if (pos > XDNS_KIT_RESP_MAX || pos + 12 > a->len) {
		a->bad = 1;
		return 1;
	}
	pos &= 2047;
	if (h[pos] != 0xc0 || h[pos + 1] != 12 || xdns_kit_be16(&h[pos + 2]) != t || xdns_kit_be16(&h[pos + 4]) != 1) {
		a->bad = 1;
		return 1;
	}
	ttl = (__u32)h[pos + 6] << 24 | (__u32)h[pos + 7] << 16 | (__u32)h[pos + 8] << 8 | h[pos + 9];
	if (ttl & 0x80000000)
		ttl = 0;
	if (ttl > a->max_ttl)
		ttl = a->max_ttl;
	h[pos + 6] = ttl >> 24;
	h[pos + 7] = ttl >> 16;
	h[pos + 8] = ttl >> 8;
	h[pos + 9] = ttl;
	rdlen = xdns_kit_be16(&h[pos + 10]);
	if ((t == XDNS_KIT_TYPE_A && rdlen != 4) || (t == XDNS_KIT_TYPE_AAAA && rdlen != 16) || rdlen == 0 ||
	    pos + 12 + rdlen > a->len) {
		a->bad = 1;
		return 1;
	}
	a->pos = pos + 12 + rdlen;
	return 0;
}

#define XDNS_KIT_TYPE_SOA 6

/*
 * One label of a name of a negative answer's SOA record at ans.npos in resp[] (a bpf_loop
 * body): a label written out counted in ans.nlit (its start in ans.nlast; reading MNAME,
 * marked in ans.mbits too); the name's end, a compression pointer to a label start of the
 * question other than its root, or the root label, gives ans.nj (the pointer's target - 12,
 * or the question's root, qlen - 1) and ends the loop; reading RNAME, a pointer to a label
 * start of MNAME's part written out also ends it (ans.nin the target, ans.nj MNAME's end). A
 * pointer anywhere else, a label type other than 0 or 3, a name over 255 bytes or past the
 * message: ans.nj = ~0. The question's label starts are in ref.qbits.
 */
static long xdns_kit_neg_label(__u64 i, void *arg)
{
	struct xdns_kit_scratch *ks = ((struct xdns_kit_in_ctx *)arg)->ks;
	struct xdns_kit_ans *a;
	__u32 pos, b, t;

	if (!ks)
		return 1;
	a = &ks->ans;
	pos = a->npos;
	if (pos >= a->len || pos > XDNS_KIT_RESP_MAX || a->qlen == 0 || a->qlen > 255)
		goto bad;
	b = ks->resp[pos & 2047];
	if (b == 0) {
		a->nj = a->qlen - 1;
		a->npos = pos + 1;
		return 1;
	}
	if (b >= 0xc0) {
		if (pos + 1 >= a->len)
			goto bad;
		t = (b & 0x3f) << 8 | ks->resp[(pos + 1) & 2047];
		if (a->mode == 2 && t >= a->mfrom && t < a->mfrom + a->mlit && a->mj < a->qlen &&
		    xdns_kit_bit(a->mbits, t - a->mfrom)) {
			a->nin = t;
			a->nj = a->mj;
			a->npos = pos + 2;
			return 1;
		}
		if (t < 12 || t - 12 + 1 >= a->qlen || !xdns_kit_bit(ks->ref.qbits, t - 12))
			goto bad;
		a->nj = t - 12;
		a->npos = pos + 2;
		return 1;
	}
	if (b > 63 || pos + 1 + b >= a->len || a->nlit + 1 + b > 254)
		goto bad;
	if (a->mode == 1 && pos >= a->mfrom && pos - a->mfrom < 256) {
		t = pos - a->mfrom;
		XDNS_KIT_OPAQUE(t);     /* keep the mask: clang drops it after the bound, the verifier needs it */
		a->mbits[(t >> 6) & 3] |= 1ULL << (t & 63);
	}
	a->nlast = pos;
	a->nlit += 1 + b;
	a->npos = pos + 1 + b;
	return 0;
bad:
	a->nj = ~0U;
	return 1;
}

/* Label at resp[x] == label at resp[y] (length and bytes, letters of any case). */
static __always_inline int xdns_kit_label_eq(struct xdns_kit_scratch *ks, __u32 x, __u32 y)
{
	__u32 b = ks->resp[x & 2047], k;

	if (b != ks->resp[y & 2047] || b > 63)
		return 0;
	for (k = 0; k < 8; k++) {
		__u64 d;

		if (k * 8 > b)
			break;
		d = xdns_lower8(xdns_ld64(&ks->resp[(x & 2047) + k * 8])) ^ xdns_lower8(xdns_ld64(&ks->resp[(y & 2047) + k * 8]));
		if (b + 1 - k * 8 < 8)
			d &= (1ULL << ((b + 1 - k * 8) * 8)) - 1;
		if (d)
			return 0;
	}
	return 1;
}

/*
 * Read a name of the SOA record at `pos` of resp[] (xdns_kit_neg_label) and check that
 * userspace's body writer writes it with the same bytes (xdns_wire::BodyWriter: the
 * longest suffix of the name already in the message, among the question's suffixes other
 * than the root and the names written before in the record, becomes a pointer to its first
 * place; the labels before it are written out as they came): the name ends in a pointer to
 * the question (not its root) or in the root label, and the last label written out is not
 * the question's label before that end (else a longer suffix is the question's: the server
 * compressed less than userspace does). The question's label is the one ending where the
 * name's end starts, if one of the same length starts there (resp[12..] has the question,
 * as sent). RNAME may end in a pointer into MNAME's labels written out instead (ans.mode 2),
 * with the same rule for MNAME's label before its target. Returns the position after the
 * name, or 0.
 */
static __always_inline __u32 xdns_kit_neg_name(struct xdns_kit_in_ctx *c, __u32 pos, __u32 mode)
{
	struct xdns_kit_scratch *ks = c->ks;
	struct xdns_kit_ans *a = &ks->ans;
	__u32 j, b, s, last, in, tail;

	a->npos = pos;
	a->nlit = 0;
	a->nlast = 0;
	a->nin = 0;
	a->nj = ~0U;
	a->mode = mode;
	bpf_loop(128, xdns_kit_neg_label, c, 0);
	j = *(volatile __u32 *)&a->nj;
	in = *(volatile __u32 *)&a->nin;
	if (j >= a->qlen || a->qlen > 255)
		return 0;
	/* the name's length, decompressed: its labels, MNAME's from the pointer's target, the question's */
	tail = a->qlen - j;
	if (in)
		tail += a->mfrom + a->mlit - in;
	if (a->nlit + tail > 255)
		return 0;
	if (a->nlit) {
		last = a->nlast & 2047;
		b = ks->resp[last];
		if (in) {
			if (in >= a->mfrom + 1 + b) {
				s = in - 1 - b;
				if (xdns_kit_bit(a->mbits, s - a->mfrom) && xdns_kit_label_eq(ks, last, s))
					return 0;
			}
		} else if (j >= 1 + b) {
			s = j - 1 - b;
			if (xdns_kit_bit(ks->ref.qbits, s) && xdns_kit_label_eq(ks, last, 12 + s))
				return 0;
		}
	}
	return a->npos;
}

/*
 * A negative answer (NXDOMAIN or NODATA) of the shape the kernel answers, at 12 + qlen + 4
 * in resp[] (no answer record; one authority record; the header checked by the caller):
 * one SOA record of class IN, its owner a pointer to the question (0xc00c, the whole name,
 * included) or the root label, a suffix of the question name at or below the zone asked
 * (the resolver's bailiwick rule; the root only when the root was asked); its two names as
 * xdns_kit_neg_name accepts them (MNAME, then RNAME, which may point into MNAME's labels
 * written out, and otherwise must not end where MNAME ends with the same last label written
 * out: MNAME's written-out suffixes are pointer targets too), then the 20 bytes of numbers,
 * the RDATA's length exact. Its TTL rewritten in
 * resp[] as the cache stores it (RFC 2308 5: min(TTL, MINIMUM), a TTL with the top bit set
 * 0, capped to max_neg_ttl). Returns the position after the record, or 0.
 */
static __always_inline __u32 xdns_kit_neg(struct xdns_kit_in_ctx *c, const struct xdns_kit_pend *p, __u32 max_neg)
{
	struct xdns_kit_scratch *ks = c->ks;
	struct xdns_kit_ans *a = &ks->ans;
	struct xdns_kit_ref *r = &ks->ref;
	__u32 qlen = p->qlen, zl = p->zone_len, len = a->len, k, pos, rd, rdlen, mj, mlast, mlit, ttl, min;
	__u8 *h = ks->resp;

	if (qlen == 0 || qlen > 255 || zl == 0 || zl > qlen || len > XDNS_KIT_RESP_MAX)
		return 0;
	/* the question lowercased and its label starts (ref.qbits), as for a referral */
	r->qlen = qlen;
	r->hoff = 0;
	r->hn = 0;
	r->qbits[0] = 0;
	r->qbits[1] = 0;
	r->qbits[2] = 0;
	r->qbits[3] = 0;
	xdns_kit_lower_question(c, p, qlen);
	if (r->hoff != qlen)
		return 0;
	a->qlen = qlen;

	/* the owner: nothing written out, at or below the zone asked */
	pos = xdns_kit_neg_name(c, 12 + qlen + 4, 0);
	if (!pos || a->nlit || qlen - a->nj < zl || pos + 10 > len || pos > XDNS_KIT_RESP_MAX)
		return 0;
	pos &= 2047;
	if (xdns_kit_be16(&h[pos]) != XDNS_KIT_TYPE_SOA || xdns_kit_be16(&h[pos + 2]) != 1)
		return 0;
	rdlen = xdns_kit_be16(&h[pos + 8]);
	rd = pos + 10;
	if (rd + rdlen > len)
		return 0;
	/* MNAME, then RNAME */
	a->mfrom = rd;
	a->mbits[0] = 0;
	a->mbits[1] = 0;
	a->mbits[2] = 0;
	a->mbits[3] = 0;
	k = xdns_kit_neg_name(c, rd, 1);
	if (!k)
		return 0;
	mj = a->nj;
	mlast = a->nlast;
	mlit = a->nlit;
	a->mj = mj;
	a->mlit = mlit;
	k = xdns_kit_neg_name(c, k, 2);
	if (!k || k + 20 != rd + rdlen)
		return 0;
	if (mlit && a->nlit && !a->nin && a->nj == mj && xdns_kit_label_eq(ks, mlast, a->nlast))
		return 0;
	/* the negative TTL */
	k &= 2047;
	min = (__u32)h[k + 16] << 24 | (__u32)h[k + 17] << 16 | (__u32)h[k + 18] << 8 | h[k + 19];
	ttl = (__u32)h[pos + 4] << 24 | (__u32)h[pos + 5] << 16 | (__u32)h[pos + 6] << 8 | h[pos + 7];
	if (ttl & 0x80000000)
		ttl = 0;
	if (ttl > min)
		ttl = min;
	if (ttl > max_neg)
		ttl = max_neg;
	h[pos + 4] = ttl >> 24;
	h[pos + 5] = ttl >> 16;
	h[pos + 6] = ttl >> 8;
	h[pos + 7] = ttl;
	return rd + rdlen;
}

/*
 * A final answer of the common shape answered by the kernel (kit_answered, or
 * kit_answered_redirected), with the bytes userspace would send for it (bpf/README.md,
 * "Kernel answers", the shape's rule): NOERROR, AA=1, TC=0, QR, opcode 0; 1 to
 * XDNS_KIT_ANSWERS answer records, all the question's RRset (xdns_kit_ans_record) of type A,
 * AAAA or TXT; no authority; no additional record but the server's OPT (extended RCODE 0);
 * nothing after it. Or, with ctl->negative, a negative answer to a question of those types
 * (NOERROR or NXDOMAIN, no answer record, the SOA alone in authority: xdns_kit_neg). The
 * reply: the client's ID, QR, the client's opcode, RD and CD, RA, AA clear, the RCODE; the
 * question as the client sent it; the records with their TTLs capped;
 * our OPT (our payload, the client's DO, no options) when the client sent one; not larger
 * than the client may take (512, or max(512, min(its payload, ours))). The response goes to
 * userspace in the ring buffer with XDNS_KIT_EV_ANSWERED, for the cache (classify and
 * make_answer, as for any response handed over), and the entry is claimed first (a claim
 * that fails: the daemon's timer answers, the response is dropped). The reply goes back the
 * way the query came (the interface and MACs the miss recorded in the entry, swapped): no
 * route lookup, so forwarding off on the host does not matter. Returns XDNS_CONTINUE, the
 * frame untouched, for anything else (then handed over as before), with kernel answers off
 * (xdns_kit_ctl), or with the ring full.
 */
static __always_inline enum xdns_verdict xdns_kit_answer(struct xdp_md *ctx, struct xdns_kit_scratch *ks,
							   struct xdns_kit_pend *p, const struct xdns_kit_pend_key *key)
{
	struct xdns_kit_in_ctx c = { .ks = ks };
	struct xdns_kit_ans *a = &ks->ans;
	struct bpf_fib_lookup f = {};
	struct xdns_kit_event *ev;
	struct xdns_kit_ctl *ctl;
	__u32 zero = 0, len, qlen, flags, rcode, n, k, pos, aend, out, lim, ifindex, plen, csl, end512;
	__u32 dns = ks->dns_off & 0xff;
	__u8 *h = ks->resp;
	__u64 sum = 0, wlen;
	__s64 s;
	enum xdns_verdict v;

	ctl = bpf_map_lookup_elem(&xdns_kit_ctl, &zero);
	if (!ctl || !ctl->answer)
		return XDNS_CONTINUE;
	len = ks->dns_len;
	qlen = p->qlen;
	if (len > XDNS_KIT_RESP_MAX || qlen == 0 || qlen > 255 || len < 12 + qlen + 4 + 12)
		return XDNS_CONTINUE;
	if (ks->l3_off != ETH_HLEN || ks->l4_off != ETH_HLEN + (ks->ipv6 ? 40 : 20))
		return XDNS_CONTINUE;
	if (p->qtype != XDNS_KIT_TYPE_A && p->qtype != XDNS_KIT_TYPE_AAAA && p->qtype != XDNS_KIT_TYPE_TXT)
		return XDNS_CONTINUE;
	if (bpf_xdp_load_bytes(ctx, dns, ks->resp, len))
		return XDNS_CONTINUE;
	flags = xdns_kit_be16(&h[2]);
	rcode = flags & 0xf;
	n = xdns_kit_be16(&h[6]);
	if (xdns_kit_be16(&h[10]) > 1)
		return XDNS_CONTINUE;
	a->len = len;
	/* QR, opcode 0, AA, TC clear (the other bits are the server's: not read) */
	if ((flags & 0xfe0f) == 0x8400 && n != 0) {
		/* data: RCODE 0, the answer records, no authority */
		if (n > XDNS_KIT_ANSWERS || xdns_kit_be16(&h[8]) != 0)
			return XDNS_CONTINUE;
		a->pos = 12 + qlen + 4;
		a->n = n;
		a->qtype = p->qtype;
		a->max_ttl = ctl->max_ttl;
		a->bad = 0;
		bpf_loop(XDNS_KIT_ANSWERS, xdns_kit_ans_record, &c, 0);
		aend = *(volatile __u32 *)&a->pos;
		if (*(volatile __u32 *)&a->bad || aend > XDNS_KIT_RESP_MAX)
			return XDNS_CONTINUE;
	} else if (((flags & 0xfe0f) == 0x8400 || (flags & 0xfe0f) == 0x8403) && n == 0 &&
		   xdns_kit_be16(&h[8]) == 1 && ctl->negative) {
		/* NODATA (RCODE 0) or NXDOMAIN (3): the SOA alone in authority */
		aend = xdns_kit_neg(&c, p, ctl->max_neg_ttl);
		if (aend == 0 || aend > XDNS_KIT_RESP_MAX)
			return XDNS_CONTINUE;
	} else {
		return XDNS_CONTINUE;
	}
	if (xdns_kit_be16(&h[10]) == 1) {
		/* the server's OPT: root owner, extended RCODE 0 (else the RCODE is not NOERROR) */
		pos = aend & 2047;
		if (pos + 11 > len || h[pos] != 0 || xdns_kit_be16(&h[pos + 1]) != XDNS_KIT_TYPE_OPT || h[pos + 5] != 0 ||
		    pos + 11 + xdns_kit_be16(&h[pos + 9]) != len)
			return XDNS_CONTINUE;
	} else if (aend != len) {
		return XDNS_CONTINUE;
	}
	out = aend + (p->payload ? XDNS_KIT_OPT_LEN : 0);
	lim = 512;
	if (p->payload) {
		lim = p->payload < xdns_cfg.edns_payload ? p->payload : xdns_cfg.edns_payload;
		if (lim < 512)
			lim = 512;
	}
	if (out > lim || out > XDNS_KIT_RESP_MAX)
		return XDNS_CONTINUE;   /* userspace sends it with TC=1 */
	if (out < 12 + 1 + 4 + 12 + 1)
		return XDNS_CONTINUE;   /* cannot be: header, root question, one record (a bound the verifier needs) */
	/*
	 * The client's state read from here on from a copy: once deleted, the entry's memory
	 * goes back to the map's free list, where another CPU's insert may take it.
	 */
	__builtin_memcpy(&ks->pend, p, sizeof(ks->pend));
	p = &ks->pend;

	/*
	 * Back the way the query came (no route lookup: the path of the query, and one helper
	 * call fewer): out of the interface it came in on, from the MAC it was sent to, to the
	 * MAC it came from (the client's, or its router's). bpf_fib_lookup would refuse with
	 * forwarding off, and the daemon's next-hop table holds servers only.
	 */
	plen = 8 + out;
	f.ifindex = p->ifindex;
	__builtin_memcpy(f.smac, p->lmac, 6);
	__builtin_memcpy(f.dmac, p->cmac, 6);
	ifindex = f.ifindex;

	/* the response to userspace for the cache, marked answered; the entry claimed */
	ev = NULL;
	v = xdns_kit_claim(ctx, ks, p, key, dns, len, XDNS_KIT_EV_ANSWERED, &ev);
	if (v != XDNS_CONTINUE || !ev)
		return v;

	/* the reply in resp[]: header, the client's question, the records (TTLs done), our OPT */
	h[0] = p->cid & 0xff;           /* network order in memory */
	h[1] = p->cid >> 8;
	flags = 0x8080 | (p->cflags & 0x7910) | rcode;
	h[2] = flags >> 8;
	h[3] = flags & 0xff;
	h[10] = 0;
	h[11] = p->payload ? 1 : 0;
	for (k = 0; k < 32; k++) {
		__u32 off = k * 8;
		__u64 w, mask;

		if (off >= qlen)
			break;
		mask = qlen - off < 8 ? (1ULL << ((qlen - off) * 8)) - 1 : ~0ULL;
		w = xdns_ld64(&p->cname[off & 255]) & mask;
		w |= xdns_ld64(&h[12 + (off & 255)]) & ~mask;
		xdns_st64(&h[12 + (off & 255)], w);
	}
	pos = aend & 2047;
	if (p->payload) {
		h[pos] = 0;
		h[pos + 1] = 0;
		h[pos + 2] = XDNS_KIT_TYPE_OPT;
		h[pos + 3] = xdns_cfg.edns_payload >> 8;
		h[pos + 4] = xdns_cfg.edns_payload & 0xff;
		h[pos + 5] = 0;
		h[pos + 6] = 0;
		h[pos + 7] = p->do_bit ? 0x80 : 0;
		h[pos + 8] = 0;
		h[pos + 9] = 0;
		h[pos + 10] = 0;
		pos += XDNS_KIT_OPT_LEN;
	}
	/*
	 * Zeros after the reply to the next 512 bytes: the checksum sums whole 512-byte parts
	 * (bpf_csum_diff takes at most 512 bytes a call), and zero words add nothing to it.
	 */
	h[pos & 2047] = 0;
	h[(pos + 1) & 2047] = 0;
	h[(pos + 2) & 2047] = 0;
	csl = (out + 3) & ~3U;
	XDNS_KIT_OPAQUE(csl);
	end512 = (csl + 511) & ~511U;
	for (k = 0; k < 64; k++) {
		__u32 o = csl + k * 8;

		if (o >= end512)
			break;
		xdns_st64(&h[o & 2047], 0);
	}
	for (k = 0; k < 4; k++) {
		if (k * 512 >= csl)
			break;
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&ks->resp[(k * 512) & 2047], 512, sum);
	}

	/* the frame to the reply's length, the message stored, the headers rewritten */
	wlen = out;
	XDNS_KIT_OPAQUE(wlen);  /* its bounds checked on this register (64 bits: no zero-extended copy) */
	s = (__s64)(dns + out) - (__s64)(ctx->data_end - ctx->data);
	if (wlen < 30 || wlen > XDNS_KIT_RESP_MAX || (s && bpf_xdp_adjust_tail(ctx, (int)s)) ||
	    bpf_xdp_store_bytes(ctx, dns, ks->resp, wlen)) {
		/* nothing sent: userspace answers (the frame is dropped) */
		ev->flags = 0;
		bpf_ringbuf_submit(ev, 0);
		ks->handed++;
		return XDNS_KIT_HANDED;
	}
	bpf_ringbuf_submit(ev, 0);
	ks->handed++;
	if (xdns_kit_headers(ctx, ks, &f, p->client, p->lport, p->cport, plen, sum))
		return XDNS_DROP_REWRITE;
	ks->answered++;
	if (ifindex == ctx->ingress_ifindex)
		return XDNS_KIT_ANSWERED;
	bpf_redirect(ifindex, 0);
	return XDNS_KIT_ANSWERED_REDIRECTED;
}

/*
 * The response side (xdns_kit_in_xdp): a response (QR=1) to a reserved port, the layout in
 * ks. Checked as the userspace resolver checks its own (xdns_resolver::net, Expect::matches),
 * then followed if it is a referral with glue (xdns_kit_follow), else passed to userspace.
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
	enum xdns_verdict v;
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
	v = xdns_kit_follow(ctx, ks, p, &key);
	if (v != XDNS_PASS_KIT_RESPONSE)
		return v;
	v = xdns_kit_answer(ctx, ks, p, &key);
	if (v != XDNS_CONTINUE)
		return v;
	return xdns_kit_hand(ctx, ks, p, &key);
}

#endif /* XDNS_KIT_H */
