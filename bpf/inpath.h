/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * inpath.h - the in-path cache's query side: parse, the question's key, lookup, the reply on
 * behalf of the server (XDP_TX), the record of a forwarded query, and the forwarding of misses.
 *
 * A query is cached in its exact form: (lowercased name, type, class, RD/AD/CD, EDNS present,
 * DO). Its EDNS options may be COOKIE and PADDING (xdns_inpath_opts), answered without them;
 * a cookie only from an entry whose server ignores cookies (RFC 7873: no cache makes server
 * cookies). Queries with other options, another EDNS version, other flags or counts, or IPv4
 * options are forwarded untouched (query_other): the server answers them.
 *
 * The reply is written over the query in place (xdns_inpath_reply): the frame's tail moved to
 * the reply's length, the entry's records copied after the client's question, TTLs aged in
 * place, addresses swapped; the UDP checksum from parts (the records' sum kept in the entry,
 * the question's from the key's loop), never summed over the message per hit.
 */
#ifndef XDNS_INPATH_H
#define XDNS_INPATH_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "xdns_abi.h"
#include "inpath_maps.h"
#include "hash.h"
#include "word.h"
#include "csum.h"
#include "slot.h"

#define XDNS_INPATH_PORT 53
#define XDNS_NS 1000000000ULL
/* Two ticks at the lowest HZ Linux runs with (10 ms at HZ=100): see xdns_inpath_now. */
#define XDNS_INPATH_SLACK_NS 20000000ULL

/* The layers of one packet (plain Ethernet, IPv4 without options or IPv6, UDP). */
struct xdns_inpath_pkt {
	__u32 dns_off;
	__u32 dns_len;
	__u8 ipv6;
	__u8 _pad[3];
	__u16 sport;            /* network order */
	__u16 dport;
	__u8 src[16];           /* IPv4 as ::ffff:a.b.c.d */
	__u8 dst[16];
	__u32 l3_off;           /* 14, or 18 behind one VLAN tag */
	__u32 _pad2;
};

static __always_inline void xdns_inpath_mapped(__u8 *a, __u32 v4)
{
	xdns_st64(a, 0);
	*(__u32 *)(a + 8) = bpf_htonl(0xffff);
	*(__u32 *)(a + 12) = v4;
}

/* Parse Ethernet / IP / UDP with port 53 on either side: 0, else -1 (not ours: forwarded). */
static __always_inline int xdns_inpath_parse(struct xdp_md *ctx, struct xdns_inpath_pkt *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u32 ulen, l3 = sizeof(*eth);
	__u16 proto;
	void *l3p;

	if ((void *)(eth + 1) > end)
		return -1;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		/* one VLAN tag: answered behind it (the tag kept), forwarded by the kernel */
		__be16 *tag = (void *)(eth + 1);

		if ((void *)(tag + 2) > end)
			return -1;
		proto = tag[1];
		l3 = sizeof(*eth) + 4;
	}
	pkt->l3_off = l3;
	l3p = data + l3;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3p;

		if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
			return -1;
		if (ip->frag_off & bpf_htons(0x3fff))
			return -1;
		udp = (void *)(ip + 1);
		if ((void *)(udp + 1) > end)
			return -1;
		ulen = bpf_ntohs(udp->len);
		if (ulen + 20 != bpf_ntohs(ip->tot_len))
			return -1;
		pkt->ipv6 = 0;
		xdns_inpath_mapped(pkt->src, ip->saddr);
		xdns_inpath_mapped(pkt->dst, ip->daddr);
		pkt->dns_off = l3 + sizeof(*ip) + sizeof(*udp);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3p;

		if ((void *)(ip6 + 1) > end || ip6->version != 6 || ip6->nexthdr != IPPROTO_UDP)
			return -1;
		udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > end)
			return -1;
		ulen = bpf_ntohs(udp->len);
		if (ulen != bpf_ntohs(ip6->payload_len))
			return -1;
		pkt->ipv6 = 1;
		__builtin_memcpy(pkt->src, &ip6->saddr, 16);
		__builtin_memcpy(pkt->dst, &ip6->daddr, 16);
		pkt->dns_off = l3 + sizeof(*ip6) + sizeof(*udp);
	} else {
		return -1;              /* ARP, two VLAN tags, ...: forwarded untouched */
	}
	if (ulen < sizeof(*udp) || data + pkt->dns_off + (ulen - sizeof(*udp)) > end)
		return -1;
	pkt->sport = udp->source;
	pkt->dport = udp->dest;
	pkt->dns_len = ulen - sizeof(*udp);
	if (pkt->sport != bpf_htons(XDNS_INPATH_PORT) && pkt->dport != bpf_htons(XDNS_INPATH_PORT))
		return -1;
	return 0;
}

/*
 * Is `addr` (16 bytes, IPv4 mapped) under a configured server prefix? Up to
 * XDNS_INPATH_INLINE prefixes are compared from rodata (the verifier knows their number: the
 * loop is as long as the list), more take the LPM trie.
 */
static __always_inline int xdns_inpath_server(const __u8 *addr)
{
	struct xdns_inpath_prefix k = { .prefixlen = 128 };
	__u32 n = xdns_inpath_cfg.nsrv, i;
	__u64 a0, a1;

	if (n) {
		a0 = xdns_ld64(addr);
		a1 = xdns_ld64(addr + 8);
		for (i = 0; i < XDNS_INPATH_INLINE; i++) {
			if (i >= n)
				break;
			if ((a0 & xdns_inpath_cfg.srv[i].mask[0]) == xdns_inpath_cfg.srv[i].addr[0] &&
			    (a1 & xdns_inpath_cfg.srv[i].mask[1]) == xdns_inpath_cfg.srv[i].addr[1])
				return 1;
		}
		return 0;
	}
	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(&xdns_inpath_servers, &k) != NULL;
}

/* The role bits of interface `ifindex` (0: not ours): the array below XDNS_INPATH_ROLE_SLOTS. */
static __always_inline __u32 xdns_inpath_role(__u32 ifindex)
{
	__u32 *r;

	if (ifindex < XDNS_INPATH_ROLE_SLOTS)
		r = bpf_map_lookup_elem(&xdns_inpath_roles, &ifindex);
	else
		r = bpf_map_lookup_elem(&xdns_inpath_ifaces, &ifindex);
	return r ? *r : 0;
}

/*
 * The query side's clock: never behind CLOCK_MONOTONIC, at most XDNS_INPATH_SLACK_NS ahead.
 * The coarse clock is read once per tick on each CPU (the tick advances jiffies first, an
 * inlined load), as the resolver cache does (cache.h, xdns_cache_now): it lags by less than
 * two ticks, so the slack added makes it an upper bound. An entry then counts as expired and
 * its TTLs age up to the slack early, never late (the learning side stamps entries with
 * bpf_ktime_get_ns); a forwarded query's stamp is up to the slack late, which the learning
 * side's timeout check allows for.
 */
static __always_inline __u64 xdns_inpath_now(struct xdns_inpath_scratch *sc)
{
	__u64 j = bpf_jiffies64();

	if (j != sc->clock_jiffies) {
		sc->clock_ns = bpf_ktime_get_coarse_ns();
		sc->clock_jiffies = j;
	}
	return sc->clock_ns + XDNS_INPATH_SLACK_NS;
}

/* Mask of the low `left` bytes of a little-endian word (all of it from 8 up). */
static __always_inline __u64 xdns_inpath_mask(__u32 left)
{
	return left >= 8 ? ~0ULL : (1ULL << (left * 8)) - 1;
}

/*
 * The loops below are global functions: the verifier checks each once, alone, with its
 * arguments unknown, instead of once per length the callers' paths could give it.
 */

/*
 * The name of the message in scratch (sc->buf, `len` bytes): its wire length (root octet
 * included), or 0 when it is no plain name (a compression pointer, a label over 63 bytes,
 * longer than 255, beyond the message).
 */
__attribute__((noinline)) int xdns_inpath_qlen(struct xdns_inpath_scratch *sc, __u32 len)
{
	const __u8 *msg;
	__u32 pos = 0, i;
	__u8 l;

	if (!sc)
		return 0;
	msg = sc->buf + XDNS_INPATH_DNS_AT;
	for (i = 0; i < 128; i++) {
		if (12 + pos >= len || pos > 254)
			return 0;
		l = msg[12 + (pos & 255)];
		if (l == 0)
			return pos + 1;
		if (l > 63)
			return 0;
		pos += l + 1;
	}
	return 0;
}

/*
 * Lowercase the name of the message in scratch (qlen bytes, its last word zero padded) into
 * sc->qname, and hash it with the server's address (sc->srv; into the entry too,
 * from_pend), type, class (typeclass: qtype | qclass << 16, network order each) and kflags:
 * the cache key (bit 63 clear: a set's tag keeps the way's class there). `from_pend`: a
 * response's name (the recorded query's, byte for byte), for the entry being built
 * (xdns_inpath_store_rest copies it after the records); else a query's, with its question's
 * checksum.
 */
__attribute__((noinline)) __u64 xdns_inpath_key(struct xdns_inpath_scratch *sc, int from_pend, __u32 qlen,
						 __u32 typeclass, __u32 kflags)
{
	__u64 h = XDNS_HASH_SUFFIX, w, sum = 0;
	const __u8 *src;
	__u8 *dst;
	__u32 k;

	qlen &= 0x1ff;
	if (!sc)
		return 0;
	/* a response's name is the recorded one byte for byte (xdns_inpath_same_question) */
	src = sc->buf + XDNS_INPATH_DNS_AT + 12;
	dst = sc->qname;
	if (qlen > 255)
		qlen = 255;

	/*
	 * Words past the name are never compared (xdns_inpath_name_eq stops at qlen). From the
	 * message, the same words give the question's checksum (name, type and class as sent,
	 * from DNS offset 12: even), which the reply needs.
	 */
	for (k = 0; k < 33; k++) {
		if (k * 8 >= qlen + 4)
			break;
		w = xdns_ld64(src + k * 8);
		if (!from_pend) {
			__u64 r = w & xdns_inpath_mask(qlen + 4 - k * 8);

			sum += (r & 0xffffffff) + (r >> 32);
		}
		if (k * 8 >= qlen)
			continue;
		w = xdns_lower8(w & xdns_inpath_mask(qlen - k * 8));
		xdns_st64(dst + (k & 31) * 8, w);
		h = xdns_hash_step(h, w);
	}
	if (!from_pend)
		sc->qsum = sum;
	h = xdns_hash_step(h, (__u64)typeclass | ((__u64)(kflags & 0xffff) << 32) | ((__u64)qlen << 48));
	h = xdns_hash_step(h, xdns_ld64(sc->srv));
	h = xdns_hash_step(h, xdns_ld64(sc->srv + 8));
	if (from_pend)
		__builtin_memcpy(sc->e.server, sc->srv, 16);
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h & ~XDNS_INPATH_H_CLS;
}

/*
 * Is the entry the question's: its server's (sc->srv), its name (sc->qname; both lowercased,
 * the last word zero padded; in the entry's area `d` after its records, from the next
 * multiple of 8, within the class's `cap` bytes)?
 */
static __always_inline int xdns_inpath_name_in(const struct xdns_inpath_scratch *sc, const __u8 *server,
					       __u32 rest_len, const __u8 *d, __u32 cap, __u32 qlen)
{
	__u32 k, at, i;

	if (xdns_ld64(server) != xdns_ld64(sc->srv) || xdns_ld64(server + 8) != xdns_ld64(sc->srv + 8))
		return 0;
	at = (rest_len + 7) & ~7U;
	for (k = 0; k < 32; k++) {
		if (k * 8 >= qlen)
			break;
		i = at + k * 8;
		asm volatile("" : "+r"(i));     /* one register, checked as it is used */
		if (i > cap - 8)
			return 0;
		if (xdns_ld64(d + i) != xdns_ld64(sc->qname + k * 8))
			return 0;
	}
	return 1;
}

/*
 * xdns_inpath_name_in for an entry of each size class, typed as its class: global
 * functions, each verified once with its class's bound (a global function's pointer argument
 * is as large as its type, so a small entry cannot be passed as a large one).
 */
__attribute__((noinline)) int xdns_inpath_name_eq_s(struct xdns_inpath_scratch *sc, struct xdns_inpath_entry_s *e,
						    __u32 qlen)
{
	qlen &= 0x1ff;
	if (!sc || !e)
		return 0;
	return xdns_inpath_name_in(sc, e->server, e->rest_len, e->d, XDNS_INPATH_D_S, qlen);
}

__attribute__((noinline)) int xdns_inpath_name_eq_l(struct xdns_inpath_scratch *sc, struct xdns_inpath_entry *e,
						    __u32 qlen)
{
	qlen &= 0x1ff;
	if (!sc || !e)
		return 0;
	return xdns_inpath_name_in(sc, e->server, e->rest_len, e->d, XDNS_INPATH_D_L, qlen);
}

/*
 * The entry of cache key `key` in the map of its class (`small`: xdns_inpath_cache_s), as the
 * head both classes begin with: its area `d` is read only through the class's own type
 * (xdns_inpath_name_eq_s / _l, xdns_inpath_area), never past a small entry's end.
 */
static __always_inline struct xdns_inpath_entry_head *xdns_inpath_entry_get(__u32 small, __u32 *key)
{
	if (small)
		return bpf_map_lookup_elem(&xdns_inpath_cache_s, key);
	return bpf_map_lookup_elem(&xdns_inpath_cache, key);
}

/* The area `d` of entry `e` of size class `small` (the bytes after the head, in its class's type). */
static __always_inline __u8 *xdns_inpath_area(struct xdns_inpath_entry_head *e, __u32 small)
{
	if (small)
		return ((struct xdns_inpath_entry_s *)e)->d;
	return ((struct xdns_inpath_entry *)e)->d;
}

/*
 * The EDNS options in [at, end) of the message in scratch (an OPT record's rdata): the
 * XDNS_INPATH_Q_* bits of those seen, or -1 for any other option, a malformed one (a COOKIE
 * of a length RFC 7873 4 does not allow, a second one) or more than eight.
 */
__attribute__((noinline)) int xdns_inpath_opts(struct xdns_inpath_scratch *sc, __u32 at, __u32 end)
{
	const __u8 *m;
	__u32 i, code, olen;
	int bits = 0;

	if (!sc || end > XDNS_INPATH_MSG || at > end)
		return -1;
	m = sc->buf + XDNS_INPATH_DNS_AT;
	for (i = 0; i < 8; i++) {
		if (at == end)
			return bits;
		if (at > XDNS_INPATH_MSG - 4 || at + 4 > end)
			return -1;
		code = bpf_ntohs(*(const __u16 *)(m + at));
		olen = bpf_ntohs(*(const __u16 *)(m + at + 2));
		if (code == 10) {
			if ((bits & XDNS_INPATH_Q_COOKIE) || (olen != 8 && (olen < 16 || olen > 40)))
				return -1;
			bits |= XDNS_INPATH_Q_COOKIE;
		} else if (code == 12) {
			bits |= XDNS_INPATH_Q_PADDING;
		} else {
			return -1;
		}
		at += 4 + olen;
		if (at > end)
			return -1;
	}
	return at == end ? bits : -1;
}

/* The key's five words (xdns_inpath_pend_key is 40 bytes). */
#define XDNS_INPATH_KW(k, i) xdns_ld64((const __u8 *)(k) + (i) * 8)

/* The pending slot of a key: a hash keyed by the load's random seed (no chosen collisions). */
static __always_inline __u32 xdns_inpath_pend_slot(const struct xdns_inpath_pend_key *k)
{
	__u64 h = xdns_inpath_cfg.seed;
	__u32 i;

#pragma unroll
	for (i = 0; i < 5; i++)
		h = xdns_hash_step(h, XDNS_INPATH_KW(k, i));
	return (__u32)(h ^ (h >> 29)) & xdns_inpath_cfg.pend_mask;
}

/* The tag of a record: its key and fields before the name (never 0). */
static __always_inline __u64 xdns_inpath_pend_tag(const struct xdns_inpath_pend *p)
{
	__u64 h = XDNS_HASH_SUFFIX;
	__u32 i;

#pragma unroll
	for (i = 0; i < 5; i++)
		h = xdns_hash_step(h, XDNS_INPATH_KW(&p->key, i));
	h = xdns_hash_step(h, p->sent_ns);
	h = xdns_hash_step(h, (__u64)p->qlen | (__u64)p->qtype << 16 | (__u64)p->qclass << 32 | (__u64)p->kflags << 48);
	h = xdns_hash_step(h, p->qopt);
	return h | 1;
}

/*
 * Record the query in scratch (sc->buf; its name's length, type, class, kflags and options in
 * sc->pend) as forwarded, written in place into its slot: its response is learnt only if it
 * matches this. The tag is cleared first and set last (x86 keeps stores in order; the
 * compiler barriers keep them so): a reader that copies a slot mid-write sees tag 0 or a tag
 * that does not match what it copied.
 */
__attribute__((noinline)) int xdns_inpath_record(struct xdns_inpath_scratch *sc, struct xdns_inpath_pkt *pkt, __u64 now)
{
	struct xdns_inpath_pend *p;
	const __u8 *m;
	__u32 i, qlen, slot;

	if (!sc || !pkt)
		return 0;
	m = sc->buf + XDNS_INPATH_DNS_AT;
	__builtin_memcpy(sc->pend.key.client, pkt->src, 16);
	__builtin_memcpy(sc->pend.key.server, pkt->dst, 16);
	sc->pend.key.cport = pkt->sport;
	sc->pend.key.id = *(const __u16 *)m;
	sc->pend.key._pad = 0;
	sc->pend.sent_ns = now;
	sc->pend.done = 0;
	sc->pend._pad = 0;
	slot = xdns_inpath_pend_slot(&sc->pend.key);
	p = bpf_map_lookup_elem(&xdns_inpath_pending, &slot);
	if (!p)
		return -1;
	p->tag = 0;
	asm volatile("" ::: "memory");
	__builtin_memcpy(&p->key, &sc->pend.key, sizeof(p->key));
	p->sent_ns = now;
	p->done = 0;
	p->qlen = sc->pend.qlen;
	p->qtype = sc->pend.qtype;
	p->qclass = sc->pend.qclass;
	p->kflags = sc->pend.kflags;
	p->qopt = sc->pend.qopt;
	p->_pad = 0;
	qlen = sc->pend.qlen & 0x1ff;
	for (i = 0; i < 32; i++) {
		if (i * 8 >= qlen)
			break;  /* words past the name are never read (xdns_inpath_same_question, _key) */
		xdns_st64(p->name + i * 8, xdns_ld64(m + 12 + i * 8) & xdns_inpath_mask(qlen - i * 8));
	}
	asm volatile("" ::: "memory");
	p->tag = xdns_inpath_pend_tag(&sc->pend);
	return 0;
}

/* Add a network-order 16-bit word (as loaded natively) to a native-order sum. */
#define XDNS_INPATH_W(x) ((__u64)(__u16)(x))

/* Fold a native-order sum to 16 bits (not complemented). */
static __always_inline __u16 xdns_inpath_fold16(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/*
 * The reply's layers 2 to 4, written over the query's in place (MACs, addresses and ports
 * swapped, lengths, TTL or hop limit), with the IPv4 header's checksum and the UDP checksum
 * from `dsum`, the DNS message's checksum (folded, native order: the sum of its words as
 * loaded). The message is rlen bytes at pkt->dns_off. 0, or -1 when the frame is shorter.
 */
static __always_inline int xdns_inpath_finish(struct xdp_md *ctx, const struct xdns_inpath_pkt *pkt, __u16 dsum,
					      __u32 rlen)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 hl = pkt->dns_off, l3 = pkt->l3_off, k;
	__u16 ulen = 8 + rlen, ck;
	__u64 s;
	__u8 *p;

	if (hl > 66 || (l3 != 14 && l3 != 18))
		return -1;
	/* the UDP checksum: the message's, the header's, the pseudo-header's */
	s = (__u64)dsum + XDNS_INPATH_W(bpf_htons(IPPROTO_UDP)) + 2 * XDNS_INPATH_W(bpf_htons(ulen));
	s += XDNS_INPATH_W(pkt->sport) + XDNS_INPATH_W(pkt->dport);
	if (pkt->ipv6) {
		s += (xdns_ld64(pkt->src) & 0xffffffff) + (xdns_ld64(pkt->src) >> 32);
		s += (xdns_ld64(pkt->src + 8) & 0xffffffff) + (xdns_ld64(pkt->src + 8) >> 32);
		s += (xdns_ld64(pkt->dst) & 0xffffffff) + (xdns_ld64(pkt->dst) >> 32);
		s += (xdns_ld64(pkt->dst + 8) & 0xffffffff) + (xdns_ld64(pkt->dst + 8) >> 32);
	} else {
		s += (__u64)*(const __u32 *)(pkt->src + 12) + *(const __u32 *)(pkt->dst + 12);
	}
	ck = (__u16)~xdns_inpath_fold16(s) ?: 0xffff;

	/* layers 2 to 4, swapped in place */
	p = data;
	if ((void *)(p + hl) > end || (void *)(p + 14) > end)
		return -1;
	{
		__u8 mac[6];

		__builtin_memcpy(mac, p, 6);
		__builtin_memcpy(p, p + 6, 6);
		__builtin_memcpy(p + 6, mac, 6);
	}
	if (pkt->ipv6) {
		struct ipv6hdr *ip6 = data + l3;
		struct udphdr *udp = (void *)(ip6 + 1);

		if ((void *)(udp + 1) > end)
			return -1;
		*(__u32 *)ip6 = bpf_htonl(0x60000000);
		ip6->payload_len = bpf_htons(ulen);
		ip6->hop_limit = 64;
		__builtin_memcpy(&ip6->saddr, pkt->dst, 16);
		__builtin_memcpy(&ip6->daddr, pkt->src, 16);
		udp->source = pkt->dport;
		udp->dest = pkt->sport;
		udp->len = bpf_htons(ulen);
		udp->check = ck;
	} else {
		struct iphdr *ip = data + l3;
		struct udphdr *udp = (void *)(ip + 1);
		__u64 is = 0;

		if ((void *)(udp + 1) > end)
			return -1;
		ip->tot_len = bpf_htons(20 + ulen);
		ip->ttl = 64;
		ip->check = 0;
		ip->saddr = *(const __u32 *)(pkt->dst + 12);
		ip->daddr = *(const __u32 *)(pkt->src + 12);
#pragma unroll
		for (k = 0; k < 5; k++)
			is += *(const __u32 *)((__u8 *)ip + k * 4);
		ip->check = (__u16)~xdns_inpath_fold16(is);
		udp->source = pkt->dport;
		udp->dest = pkt->sport;
		udp->len = bpf_htons(ulen);
		udp->check = ck;
	}
	return 0;
}

/*
 * Make the frame `grow` bytes longer or shorter: the tail, else (longer, too little tailroom:
 * veth, generic XDP) the head, with the frame headers and the question (hl + qend bytes) moved
 * down through scratch. 0: resized; 1: unchanged (no room); -1: changed half way (drop).
 */
static __always_inline int xdns_inpath_resize(struct xdp_md *ctx, struct xdns_inpath_scratch *sc, __u32 hl,
					      __u32 qend, long grow)
{
	__u32 fo, n;

	if (grow == 0 || !bpf_xdp_adjust_tail(ctx, (int)grow))
		return 0;
	if (grow < 0 || hl > 66 || qend > 12 + 255 + 4)
		return 1;
	/* frame headers right before the message in scratch, all moved down at once */
	fo = XDNS_INPATH_DNS_AT - hl;
	asm volatile("" : "+r"(fo));
	fo &= 63;
	n = hl + qend;
	asm volatile("" : "+r"(n));
	if (n > 66 + 12 + 255 + 4 || bpf_xdp_load_bytes(ctx, 0, sc->buf + fo, n))
		return 1;
	if (bpf_xdp_adjust_head(ctx, (int)-grow))
		return 1;
	if (bpf_xdp_store_bytes(ctx, 0, sc->buf + fo, n))
		return -1;
	sc->head_grown++;
	return 0;
}

/*
 * Age the TTLs of a reply's records in the frame by `sub` seconds: the records start at
 * `at` (the frame's offset of the byte after the question; `at_n` is at | n << 16), `n`
 * bytes of them, the entry's TTL offsets; each TTL read from the frame (the entry's bytes just copied there)
 * and written back, what it lost summed by the parity of its offset into sc->age_even,
 * sc->age_odd (the checksum's change). A global function: verified once, for entries of
 * either size class (it reads the head alone, which both begin with). 0, or -1
 * when the frame is shorter.
 */
__attribute__((noinline)) int xdns_inpath_age(struct xdp_md *ctx, struct xdns_inpath_scratch *sc,
					      const struct xdns_inpath_entry_head *e, __u32 at_n, __u32 sub)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 k, off, old, nw, even = 0, odd = 0, at = at_n & 0xffff, n = at_n >> 16, nt;
	__u8 *p;

	if (!sc || !e)
		return -1;
	nt = e->nttl;
	for (k = 0; k < XDNS_INPATH_TTLS; k++) {
		if (k >= nt)
			break;
		off = e->ttl_off[k];
		if (off > XDNS_INPATH_MSG - 4 || off + 4 > n)
			break;
		p = data + ((at + off) & 0x7ff);
		if ((void *)(p + 4) > end)
			return -1;
		old = bpf_ntohl(*(const __u32 *)p);
		nw = old > sub ? old - sub : 0;
		*(__u32 *)p = bpf_htonl(nw);
		if ((at + off) & 1)
			odd += old - nw;
		else
			even += old - nw;
	}
	sc->age_even = even;
	sc->age_odd = odd;
	return 0;
}

/*
 * The reply from entry `e`, written over the query in place: the frame cut or grown at the
 * tail to the reply's length (rlen DNS bytes), the stored records copied after the question
 * (one helper call), their TTLs aged in place, the header's flags and counts, addresses, ports
 * and MACs swapped. Nothing is summed over the records: the entry holds their checksum (taken
 * when learnt), the question's comes from the key's loop (sc->qsum), the ageing adjusts it.
 * `tc`: no records, the server's OPT alone (XDNS_INPATH_E_OPT), TC set. `small`: the entry
 * is of the small class (its area XDNS_INPATH_D_S bytes).
 * XDNS_INPATH_ANSWERED(_TC), MISS_NO_ROOM (the frame could not grow: untouched),
 * MISS_TOO_BIG or DROP_REWRITE.
 */
static __always_inline enum xdns_inpath_verdict xdns_inpath_reply(struct xdp_md *ctx, struct xdns_inpath_scratch *sc,
								  const struct xdns_inpath_pkt *pkt,
								  struct xdns_inpath_entry_head *e, __u32 small, __u32 qlen,
								  __u32 rlen, __u64 now, int tc)
{
	__u32 qend, n, k, sub, nt, hl, l3, lost_even = 0, lost_odd = 0, src_off = 0;
	__u32 cap = small ? XDNS_INPATH_D_S : XDNS_INPATH_D_L;
	__u8 *ed = xdns_inpath_area(e, small);
	__u64 s, el, be;
	__u16 body;
	void *data, *end;
	__u8 *d;
	long grow;
	int moved;

	qlen &= 0x1ff;
	qend = 12 + qlen + 4;
	hl = pkt->dns_off;
	l3 = pkt->l3_off;
	if (qlen > 255 || hl < 42 || hl > 66 || (l3 != 14 && l3 != 18) || rlen > XDNS_INPATH_MSG || rlen < qend)
		return XDNS_INPATH_MISS_TOO_BIG;
	n = rlen - qend;
	if (tc) {
		if (n != 0) {
			if (n != XDNS_INPATH_OPT_LEN || e->rest_len < XDNS_INPATH_OPT_LEN || e->rest_len > cap)
				return XDNS_INPATH_MISS_TOO_BIG;
			src_off = e->rest_len - XDNS_INPATH_OPT_LEN;
		}
	} else if (n != e->rest_len || n > cap) {
		return XDNS_INPATH_MISS_TOO_BIG;
	}

	/* the frame to the reply's length: the tail, else the head (the headers and question moved) */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	grow = (long)(hl + rlen) - (long)(end - data);
	moved = xdns_inpath_resize(ctx, sc, hl, qend, grow);
	if (moved)
		return moved > 0 ? XDNS_INPATH_MISS_NO_ROOM : XDNS_INPATH_DROP_REWRITE;
	/* the records (or the OPT) after the question, from the entry, within its class's area */
	if (tc) {
		asm volatile("" : "+r"(src_off));
		if (src_off > cap - XDNS_INPATH_OPT_LEN)
			return XDNS_INPATH_DROP_REWRITE;
		if (n && bpf_xdp_store_bytes(ctx, hl + qend, ed + src_off, XDNS_INPATH_OPT_LEN))
			return XDNS_INPATH_DROP_REWRITE;
	} else if (n) {
		asm volatile("" : "+r"(n));
		if (n > cap || bpf_xdp_store_bytes(ctx, hl + qend, ed, n))
			return XDNS_INPATH_DROP_REWRITE;
	}

	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	/* TTLs aged by the whole seconds since the entry was learnt, in place (read from the frame: the entry's bytes just copied) */
	el = now > e->stored_ns ? (now - e->stored_ns) / XDNS_NS : 0;
	sub = el > 0xffffffffULL ? 0xffffffff : (__u32)el;
	nt = tc ? 0 : e->nttl;
	if (sub && nt) {
		if (xdns_inpath_age(ctx, sc, e, (hl + qend) | n << 16, sub))
			return XDNS_INPATH_DROP_REWRITE;
		lost_even = sc->age_even;
		lost_odd = sc->age_odd;
	}

	/* the DNS header: the client's ID, the server's flags and counts */
	d = data + (hl & 0x7f);
	if ((void *)(d + 12) > end)
		return XDNS_INPATH_DROP_REWRITE;
	if (tc) {
		*(__u16 *)(d + 2) = e->hdr[0] | bpf_htons(0x0200);
		*(__u16 *)(d + 4) = e->hdr[1];
		*(__u16 *)(d + 6) = 0;
		*(__u16 *)(d + 8) = 0;
		*(__u16 *)(d + 10) = n ? bpf_htons(1) : 0;
		body = e->opt_sum;
	} else {
		*(__u16 *)(d + 2) = e->hdr[0];
		*(__u16 *)(d + 4) = e->hdr[1];
		*(__u16 *)(d + 6) = e->hdr[2];
		*(__u16 *)(d + 8) = e->hdr[3];
		*(__u16 *)(d + 10) = e->hdr[4];
		body = e->rest_sum;
	}
	if (qend & 1)
		body = (__u16)((body << 8) | (body >> 8));      /* the records start at an odd offset */

	/* the message's checksum, from parts: nothing summed over the message here */
	s = sc->qsum + body + XDNS_INPATH_W(*(__u16 *)d);
#pragma unroll
	for (k = 0; k < 5; k++)
		s += XDNS_INPATH_W(*(__u16 *)(d + 2 + k * 2));
	/* native order folded, then to big-endian for the TTLs' change (csum.h works big-endian) */
	be = bpf_ntohs(xdns_inpath_fold16(s));
	if (lost_even | lost_odd)
		be += xdns_csum_shrunk(lost_even, lost_odd);
	sc->rsum = bpf_htons(xdns_inpath_fold16(be));   /* kept by the reply memo */
	if (xdns_inpath_finish(ctx, pkt, sc->rsum, rlen))
		return XDNS_INPATH_DROP_REWRITE;
	return tc ? XDNS_INPATH_ANSWERED_TC : XDNS_INPATH_ANSWERED;
}

/*
 * The reply memo. For one query (its bytes after the DNS ID, to one server) a hit sends the
 * same DNS message until the entry's TTLs age another second, the entry expires, or it is
 * rewritten (learnt again, backdated, flushed: its stored_ns changes or it is gone). So the
 * stage's reply after the question (at most XDNS_INPATH_MEMO_A bytes: every reply of up to 512
 * bytes), its header words and checksum are kept per CPU in the resolver's reply-memo slots
 * (slot.h) with room for more bytes after them (struct xdns_inpath_memo), keyed by the
 * query's flags, ARCOUNT and bytes after the header (at most XDNS_REPLY_MAX_Q) and the server,
 * whose address follows the kept bytes and is compared; bounded by `until_ns`, and checked
 * against its way's stamp in the set's tags (`ref` the entry's key, `tag` its stored_ns: a
 * new learn or a userspace backdate changes the stamp, a flush clears it) on every use.
 * Kept at the second stage hit of a query in its set (xdns_first_sighting), so names hit
 * once each do not churn it.
 */

/*
 * The query's bytes after its header as the memo reads them: in the stage's copy of the
 * message (sc->buf), where xdns_inpath_memo_answer puts them, so that a query the memo does
 * not answer is not copied twice.
 */
#define XDNS_INPATH_MQ(sc) ((sc)->buf + XDNS_INPATH_DNS_AT + 12)

/* A slot's kept reply bytes: a[] and on into more[] (XDNS_INPATH_MEMO_A, then the server). */
#define XDNS_INPATH_MEMO_BYTES(t) ((__u8 *)(t) + __builtin_offsetof(struct xdns_reply_memo, a))

/* This query's slot key (its sc->mn bytes, flags, ARCOUNT, the server at pkt->dst): never 0. */
static __always_inline __u64 xdns_inpath_memo_key(struct xdns_inpath_scratch *sc, const struct xdns_inpath_pkt *pkt)
{
	__u32 n = sc->mn;
	__u64 h;
	int i;

	h = xdns_hash_step(xdns_inpath_cfg.seed ^ 0x7265706cULL,
			   (__u64)sc->mqflags | (__u64)sc->mqar << 16 | (__u64)n << 32);
#pragma clang loop unroll(full)
	for (i = 0; i < 3; i++)
		if ((__u32)i * 8 < n)
			h = xdns_hash_step(h, xdns_memo_word(XDNS_INPATH_MQ(sc), i, n));
	h = xdns_hash_step(h, xdns_ld64(pkt->dst) ^ xdns_ld64(pkt->dst + 8));
	return h ? h : 1;
}

/*
 * A query to a configured server, first: answer it from the reply memo. Returns a verdict
 * (ANSWERED, ANSWERED_TC, DROP_REWRITE), or to go on with the frame untouched -1, or -2 when
 * the whole message is in sc->buf already (a query the memo takes is at most 12 +
 * XDNS_REPLY_MAX_Q bytes: read once, for the memo and the stage); leaves sc->mh (0: not a
 * query the memo takes) and the query's bytes for xdns_inpath_memo_keep.
 *
 * A miss reads no slot whose bit in sc->mocc (this CPU's slots ever written) is clear: in
 * a memo of a few hot queries, the query of a new name touches none of its cold lines.
 */
static __always_inline int xdns_inpath_memo_answer(struct xdp_md *ctx, struct xdns_inpath_scratch *sc,
						   const struct xdns_inpath_pkt *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = pkt->dns_len, hl = pkt->dns_off, n, set, body_at, an, rlen, ref, idx;
	struct xdns_inpath_memo *t = NULL;
	struct xdns_inpath_tags *tags;
	__u32 tset;
	__u16 ar, dsum;
	__u8 *hdr, *dst, *m = sc->buf + XDNS_INPATH_DNS_AT;
	__u64 h, now, s, occ;
	long grow;
	int moved;

	sc->mh = 0;
	if (len < 12 + 8 || len > 12 + XDNS_REPLY_MAX_Q || hl > 66)
		return -1;
	n = len - 12;
	hdr = data + (hl & 0x7f);
	if ((void *)(hdr + 12) > end)
		return -1;
	ar = bpf_ntohs(*(__u16 *)(hdr + 10));
	if (*(__u16 *)(hdr + 4) != bpf_htons(1) || *(__u32 *)(hdr + 6) != 0 || ar > 1)
		return -1;
	sc->mqflags = *(__u16 *)(hdr + 2);
	sc->mqar = ar;
	sc->mn = n;
	/* the message into the stage's buffer: the header, then the bytes the memo compares */
	xdns_st64(m, xdns_ld64(hdr));
	*(__u32 *)(m + 8) = *(__u32 *)(hdr + 8);
	if (xdns_copy_words(XDNS_INPATH_MQ(sc), hdr + 12, end, n, XDNS_INPATH_MEMO_Q))
		return -1;
	h = xdns_inpath_memo_key(sc, pkt);
	sc->mh = h;
	idx = (__u32)(h >> XDNS_REPLY_SET_SHIFT) << 1;
	occ = sc->mocc[(idx >> 6) & (XDNS_REPLY_SLOTS / 64 - 1)] >> (idx & 63);
	set = xdns_reply_set(h);
	if (occ & 1) {
		t = bpf_map_lookup_elem(&xdns_inpath_replies, &set);
		if (t && (t->m.hash != h || !xdns_reply_slot_is(&t->m, XDNS_INPATH_MQ(sc), n, sc->mqflags, ar)))
			t = NULL;
	}
	if (!t && (occ & 2)) {
		set++;
		t = bpf_map_lookup_elem(&xdns_inpath_replies, &set);
		if (t && (t->m.hash != h || !xdns_reply_slot_is(&t->m, XDNS_INPATH_MQ(sc), n, sc->mqflags, ar)))
			t = NULL;
	}
	if (!t)
		return -2;
	now = xdns_inpath_now(sc);
	if (now >= t->m.until_ns)
		return -2;
	/* this server's reply (its address after the kept bytes) */
	if (xdns_ld64(XDNS_INPATH_MEMO_BYTES(t) + XDNS_INPATH_MEMO_A) != xdns_ld64(pkt->dst) ||
	    xdns_ld64(XDNS_INPATH_MEMO_BYTES(t) + XDNS_INPATH_MEMO_A + 8) != xdns_ld64(pkt->dst + 8))
		return -2;
	/*
	 * from the entry as it is: its way's stamp unchanged (a new learn, a backdate, a flush
	 * change or clear it), read from the set's tags (an inlined array lookup), not the entry
	 */
	ref = t->m.ref;
	tset = ref / XDNS_INPATH_WAYS;
	tags = bpf_map_lookup_elem(&xdns_inpath_tags, &tset);
	if (!tags || tags->stamp[ref & (XDNS_INPATH_WAYS - 1)] != t->m.tag)
		return -2;
	body_at = t->m.body_at;
	an = t->an;
	if (body_at < 12 + 1 + 4 || body_at > 12 + XDNS_REPLY_MAX_Q || an > XDNS_INPATH_MEMO_A || (an && an < 8))
		return -2;      /* never kept so (xdns_inpath_memo_keep): the frame stays whole */
	rlen = body_at + an;
	grow = (long)(hl + rlen) - (long)(end - data);
	moved = xdns_inpath_resize(ctx, sc, hl, body_at, grow);
	if (moved)
		return moved > 0 ? -2 : XDNS_INPATH_DROP_REWRITE;      /* unchanged, sc->buf as it was */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (hl > 66 || body_at > 12 + XDNS_REPLY_MAX_Q)
		return XDNS_INPATH_DROP_REWRITE;        /* the verifier's bounds: checked above */
	hdr = data + hl;
	dst = hdr + body_at;
	/* the kept bytes: the first XDNS_REPLY_MAX_A copied directly, a longer reply by the helper */
	if (an > XDNS_REPLY_MAX_A) {
		/* one register the verifier sees bounded on both sides: never zero, within the slot */
		rlen = an - (XDNS_REPLY_MAX_A + 1);
		asm volatile("%0 &= 0x1ff" : "+r"(rlen));
		if (rlen > XDNS_INPATH_MEMO_A - (XDNS_REPLY_MAX_A + 1))
			return XDNS_INPATH_DROP_REWRITE;
		rlen += XDNS_REPLY_MAX_A + 1;
		if (bpf_xdp_store_bytes(ctx, hl + body_at, XDNS_INPATH_MEMO_BYTES(t), rlen))
			return XDNS_INPATH_DROP_REWRITE;
		rlen = body_at + an;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		hdr = data + hl;
	} else if (an && xdns_copy16(dst, XDNS_INPATH_MEMO_BYTES(t), dst, end, an, XDNS_REPLY_MAX_A)) {
		return XDNS_INPATH_DROP_REWRITE;
	}
	if ((void *)(hdr + 12) > end)
		return XDNS_INPATH_DROP_REWRITE;
	/* the ID is the query's, in place; then the flags and the four counts */
	*(__u16 *)(hdr + 2) = t->m.rflags;
	xdns_st64(hdr + 4, t->m.counts);
	s = t->m.sum + XDNS_INPATH_W(*(__u16 *)hdr);
	dsum = xdns_inpath_fold16(s);
	if (xdns_inpath_finish(ctx, pkt, dsum, rlen))
		return XDNS_INPATH_DROP_REWRITE;
	/*
	 * The entry's used_ns (the set's replacement) is left to the stage: it keeps the reply
	 * again at least once a second (until_ns), and writes used_ns then.
	 */
	sc->reply_hits++;
	return (t->m.rflags & bpf_htons(0x0200)) ? XDNS_INPATH_ANSWERED_TC : XDNS_INPATH_ANSWERED;
}

/*
 * After the stage answered this packet's query (sc->mh set by xdns_inpath_memo_answer) from
 * the entry sc->mk_ref (stored sc->mk_tag), the same until sc->mk_until: keep the reply (the
 * frame as it is now: the message at `hl`, the question ending at DNS offset `qend`, `an`
 * bytes after it; its checksum sc->rsum) at the query's second sighting in its set. A global
 * function: the verifier checks it once, alone.
 */
__attribute__((noinline)) int xdns_inpath_memo_keep(struct xdp_md *ctx, struct xdns_inpath_scratch *sc, __u32 hl,
						    __u32 qend, __u32 an)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct xdns_inpath_memo *t0, *t1, *tp;
	struct xdns_reply_memo *t;
	__u8 *ka;
	__u32 set, n, len;
	__u64 h, counts, s;
	__u16 rflags, id;
	__u8 *hdr;

	if (!sc)
		return 0;
	h = sc->mh;
	n = sc->mn;
	if (h == 0 || n < 8 || n > XDNS_REPLY_MAX_Q || hl > 66 || qend < 12 + 1 + 4 || qend > 12 + n ||
	    an > XDNS_INPATH_MEMO_A || (an && an < 8))
		return 0;
	len = hl;
	asm volatile("%0 &= 0x7f" : "+r"(len));
	hdr = data + len;
	if ((void *)(hdr + 12) > end)
		return 0;
	id = *(__u16 *)hdr;
	rflags = *(__u16 *)(hdr + 2);   /* read before the helper call, which voids packet pointers */
	counts = xdns_ld64(hdr + 4);
	set = xdns_reply_set(h);
	t0 = bpf_map_lookup_elem(&xdns_inpath_replies, &set);
	set++;
	t1 = bpf_map_lookup_elem(&xdns_inpath_replies, &set);
	if (!t0 || !t1)
		return 0;
	t = xdns_reply_slot_pick(&t0->m, &t1->m, h, XDNS_INPATH_MQ(sc), n, sc->mqflags, sc->mqar, sc->reply_kept);
	if (!t)
		return 0;       /* kept at its second sighting */
	/* the slot's bit: xdns_inpath_memo_answer reads only slots ever written */
	set = ((__u32)(h >> XDNS_REPLY_SET_SHIFT) << 1) + (t == &t1->m);
	sc->mocc[(set >> 6) & (XDNS_REPLY_SLOTS / 64 - 1)] |= 1ULL << (set & 63);
	t->hash = 0;            /* not whole until the end (nothing else runs here meanwhile) */
	tp = t == &t1->m ? t1 : t0;
	ka = XDNS_INPATH_MEMO_BYTES(tp);
	tp->an = an;
	len = an;
	asm volatile("%0 &= 0x1ff" : "+r"(len));        /* one register, checked as the helper gets it */
	if (len > XDNS_INPATH_MEMO_A || (len && bpf_xdp_load_bytes(ctx, hl + qend, ka, len)))
		return 0;
	xdns_st64(ka + XDNS_INPATH_MEMO_A, xdns_ld64(sc->srv));
	xdns_st64(ka + XDNS_INPATH_MEMO_A + 8, xdns_ld64(sc->srv + 8));
	xdns_reply_slot_key(t, XDNS_INPATH_MQ(sc), n, sc->mqflags, sc->mqar);
	t->rflags = rflags;
	t->counts = counts;
	t->body_at = qend;
	t->an = 0;              /* the whole count is the in-path slot's own: tp->an */
	/* the message's checksum without the ID: a hit adds its own */
	s = (__u64)sc->rsum + (__u16)~id;
	t->sum = xdns_inpath_fold16(s);
	t->ref = sc->mk_ref;
	t->tag = sc->mk_tag;
	t->until_ns = sc->mk_until;
	sc->reply_kept++;
	t->hash = h;
	return 0;
}

/* A query from a client to a configured server: answered from the cache, or recorded. */
static __always_inline enum xdns_inpath_verdict xdns_inpath_query(struct xdp_md *ctx, struct xdns_inpath_scratch *sc,
								  const struct xdns_inpath_pkt *pkt)
{
	__u8 *m = sc->buf + XDNS_INPATH_DNS_AT;
	__u32 len = pkt->dns_len, qlen, o, set, way, key, limit, rlen;
	int tc;
	__u16 flags, qtype, qclass, kflags, payload = 512, rdlen;
	int opts = 0;
	struct xdns_inpath_entry_head *e, *hit = NULL;
	__u32 small = 0, cls;
	__u64 t;
	struct xdns_inpath_tags *tags;
	enum xdns_inpath_verdict v;
	__u64 h, now, el;
	int mv;

	if (len < 17 || len > 512)
		return XDNS_INPATH_QUERY_OTHER;
	mv = xdns_inpath_memo_answer(ctx, sc, pkt);
	if (mv >= 0)
		return mv;
	if (mv != -2 && bpf_xdp_load_bytes(ctx, pkt->dns_off, m, len))
		return XDNS_INPATH_QUERY_OTHER;
	flags = bpf_ntohs(*(__u16 *)(m + 2));
	if ((flags & ~XDNS_INPATH_K_HDR) != 0)
		return XDNS_INPATH_QUERY_OTHER;        /* QR, opcode, AA, TC, RA, Z, RCODE */
	if (*(__u16 *)(m + 4) != bpf_htons(1) || *(__u32 *)(m + 6) != 0 || bpf_ntohs(*(__u16 *)(m + 10)) > 1)
		return XDNS_INPATH_QUERY_OTHER;
	qlen = (__u32)xdns_inpath_qlen(sc, len) & 0x1ff;
	if (qlen == 0 || qlen > 255)
		return XDNS_INPATH_QUERY_OTHER;
	o = 12 + qlen;
	if (o + 4 > len)
		return XDNS_INPATH_QUERY_OTHER;
	qtype = *(__u16 *)(m + o);
	qclass = *(__u16 *)(m + o + 2);
	if (qclass != bpf_htons(1))
		return XDNS_INPATH_QUERY_OTHER;
	switch (bpf_ntohs(qtype)) {
	case 41: case 249: case 250: case 251: case 252:
		return XDNS_INPATH_QUERY_OTHER;        /* OPT, TKEY, TSIG, IXFR, AXFR */
	}
	kflags = flags & XDNS_INPATH_K_HDR;
	o += 4;
	if (m[11]) {
		/* a root OPT of version 0; of its options only COOKIE and PADDING (answered without) */
		if (o + 11 > len || o > 12 + 255 + 4)
			return XDNS_INPATH_QUERY_OTHER;
		if (m[o] != 0 || *(__u16 *)(m + o + 1) != bpf_htons(41) || m[o + 5] != 0 || m[o + 6] != 0)
			return XDNS_INPATH_QUERY_OTHER;
		rdlen = bpf_ntohs(*(__u16 *)(m + o + 9));
		if (o + 11 + rdlen != len)
			return XDNS_INPATH_QUERY_OTHER;
		if (rdlen) {
			opts = xdns_inpath_opts(sc, o + 11, len);
			if (opts < 0)
				return XDNS_INPATH_QUERY_OTHER;
		}
		payload = bpf_ntohs(*(__u16 *)(m + o + 3));
		if (payload < 512)
			payload = 512;
		kflags |= XDNS_INPATH_K_EDNS | ((m[o + 7] & 0x80) ? XDNS_INPATH_K_DO : 0);
	} else if (o != len) {
		return XDNS_INPATH_QUERY_OTHER;
	}

	__builtin_memcpy(sc->srv, pkt->dst, 16);
	h = xdns_inpath_key(sc, 0, qlen, (__u32)qtype | ((__u32)qclass << 16), kflags);
	set = (__u32)h & xdns_inpath_cfg.set_mask;
	tags = bpf_map_lookup_elem(&xdns_inpath_tags, &set);
	for (way = 0; way < XDNS_INPATH_WAYS; way++) {
		if (!tags)
			break;
		t = tags->h[way];
		if ((t & ~XDNS_INPATH_H_CLS) != h)
			continue;
		cls = t >> 63;  /* the way's size class: the map to look in */
		key = set * XDNS_INPATH_WAYS + way;
		e = xdns_inpath_entry_get(cls, &key);
		if (!e || e->hash != h || e->qlen != qlen || e->qtype != qtype || e->qclass != qclass ||
		    e->kflags != kflags)
			continue;
		/* the class is the tag's bit: the entry as its own class's type */
		if (cls ? xdns_inpath_name_eq_s(sc, (struct xdns_inpath_entry_s *)e, qlen) :
			  xdns_inpath_name_eq_l(sc, (struct xdns_inpath_entry *)e, qlen)) {
			hit = e;
			small = cls;
			break;
		}
	}
	now = xdns_inpath_now(sc);
	v = XDNS_INPATH_MISS;
	if (hit) {
		limit = payload;
		rlen = 12 + qlen + 4 + hit->rest_len;
		if (now >= hit->expires_ns) {
			v = XDNS_INPATH_MISS_EXPIRED;
		} else if ((opts & XDNS_INPATH_Q_COOKIE) && !(hit->eflags & XDNS_INPATH_E_NO_COOKIE)) {
			/* RFC 7873: only the server makes its cookie; ask it (its answer is learnt) */
			v = XDNS_INPATH_MISS_COOKIE;
		} else {
			tc = rlen > limit;
			if (tc)
				rlen = 12 + qlen + 4 + ((hit->eflags & XDNS_INPATH_E_OPT) ? XDNS_INPATH_OPT_LEN : 0);
			v = xdns_inpath_reply(ctx, sc, pkt, hit, small, qlen, rlen, now, tc);
			if (v == XDNS_INPATH_ANSWERED || v == XDNS_INPATH_ANSWERED_TC) {
				/* a second's precision is enough for the replacement: fewer writes to a shared line */
				if (now > hit->used_ns + XDNS_NS)
					hit->used_ns = now;
				/* the same reply until the TTLs age another second, or the entry expires */
				el = now > hit->stored_ns ? (now - hit->stored_ns) / XDNS_NS : 0;
				sc->mk_until = hit->stored_ns + (el + 1) * XDNS_NS;
				if (sc->mk_until > hit->expires_ns)
					sc->mk_until = hit->expires_ns;
				sc->mk_tag = hit->stored_ns;
				sc->mk_ref = key;
				xdns_inpath_memo_keep(ctx, sc, pkt->dns_off, 12 + qlen + 4, rlen - (12 + qlen + 4));
				return v;
			}
			if (v == XDNS_INPATH_DROP_REWRITE)
				return v;
		}
	}
	sc->pend.qlen = qlen;
	sc->pend.qtype = qtype;
	sc->pend.qclass = qclass;
	sc->pend.kflags = kflags;
	sc->pend.qopt = opts;
	xdns_inpath_record(sc, (struct xdns_inpath_pkt *)pkt, now);
	return v;
}

/*
 * Forward a DNS packet the program let through, as the kernel would route it: with redirect
 * on, bpf_fib_lookup and bpf_redirect to an interface of ours (TTL lowered, MACs set);
 * anything the FIB does not resolve completely (neighbour unknown, needs fragmenting, local
 * delivery, ...) goes to the kernel (XDP_PASS). `role`: the ingress interface's bits.
 */
static __always_inline int xdns_inpath_forward(struct xdp_md *ctx, struct xdns_inpath_scratch *sc, __u32 role)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct bpf_fib_lookup f = {};
	struct iphdr *ip = NULL;
	struct ipv6hdr *ip6 = NULL;
	__u32 check;
	long rc;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	/*
	 * A veth's frames from its peer's stack may carry a checksum still to be computed
	 * (CHECKSUM_PARTIAL): native XDP sees them without that note, and a redirected frame
	 * would leave with a wrong checksum. The kernel forwards those (userspace marks them).
	 */
	if (role & XDNS_INPATH_ROLE_NO_REDIRECT)        /* the ingress interface's (xdns_inpath_handle) */
		goto pass;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ttl <= 1)
			goto pass;
		f.family = 2;   /* AF_INET */
		f.tos = ip->tos;
		f.l4_protocol = ip->protocol;
		f.tot_len = bpf_ntohs(ip->tot_len);
		f.ipv4_src = ip->saddr;
		f.ipv4_dst = ip->daddr;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end || ip6->hop_limit <= 1)
			goto pass;
		f.family = 10;  /* AF_INET6 */
		f.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
		f.l4_protocol = ip6->nexthdr;
		f.tot_len = bpf_ntohs(ip6->payload_len);
		__builtin_memcpy(f.ipv6_src, &ip6->saddr, 16);
		__builtin_memcpy(f.ipv6_dst, &ip6->daddr, 16);
	} else {
		return XDP_PASS;
	}
	f.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &f, sizeof(f), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || !xdns_inpath_role(f.ifindex))
		goto pass;
	if (ip) {
		check = ip->check;
		check += bpf_htons(0x0100);
		ip->check = (__u16)(check + (check >= 0xffff));
		ip->ttl--;
	} else if (ip6) {
		ip6->hop_limit--;
	}
	__builtin_memcpy(eth->h_dest, f.dmac, 6);
	__builtin_memcpy(eth->h_source, f.smac, 6);
	sc->redirected++;
	return bpf_redirect(f.ifindex, 0);
pass:
	sc->fib_passed++;
	return XDP_PASS;
}

#endif /* XDNS_INPATH_H */
