/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* parse.h - Ethernet (+ one VLAN tag), IPv4 (options allowed) / IPv6, UDP to a listen address. */
#ifndef XDNS_PARSE_H
#define XDNS_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include "stage.h"
#include "maps.h"
#include "word.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define XDNS_IP_MF 0x2000
#define XDNS_IP_OFFSET 0x1fff

/* Where the layers of one packet start (offsets from the frame start). */
struct xdns_pkt {
	__u32 l3_off;           /* IPv4/IPv6 header */
	__u32 ip_hlen;          /* IPv4: ihl*4 (options included); IPv6: 40 */
	__u32 l4_off;           /* UDP header */
	__u32 dns_off;          /* DNS header */
	__u32 dns_len;          /* DNS message length, from the UDP length */
	__u8 ipv6;
	__u8 kit;               /* 1: to a reserved port of kernel iteration, not a listen address */
	__u8 _pad[2];
};

/*
 * Is (addr, port) in the listen set? `addr` is 4 or 16 bytes in network order, compared as
 * words (the listen addresses are zero after the first 4 bytes of an IPv4 address).
 */
static __always_inline int xdns_listening(const __u8 *addr, __u8 family, __u16 port)
{
	__u64 a0, a1 = 0;
	int i;

	if (family == 4)
		a0 = *(const __u32 *)addr;
	else {
		a0 = xdns_ld64(addr);
		a1 = xdns_ld64(addr + 8);
	}
	for (i = 0; i < XDNS_MAX_LISTEN; i++) {
		const volatile struct xdns_listen *l = &xdns_cfg.listen[i];

		if (i >= xdns_cfg.nlisten)
			break;
		if (l->family != family || l->port != port)
			continue;
		if (l->wildcard)
			return 1;
		/*
		 * Volatile loads: xdns_cfg is a volatile object whose initializer is zero (libbpf
		 * fills it in before the load), and a plain load through a cast may be folded to
		 * that zero (clang 19 does).
		 */
		if ((family == 4 ? (__u64) * (const volatile __u32 *)l->addr : *(const volatile __u64 *)l->addr) == a0 &&
		    (family == 4 || *(const volatile __u64 *)&l->addr[8] == a1))
			return 1;
	}
	return 0;
}

/*
 * Parse the headers in front of the DNS message. Returns XDNS_CONTINUE (meaning "go on") or
 * the pass reason.
 */
static __always_inline enum xdns_verdict xdns_parse_l2_l4(struct xdp_md *ctx, struct xdns_pkt *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u32 off = sizeof(*eth);
	__u16 proto, ulen;

	if ((void *)(eth + 1) > data_end)
		return XDNS_PASS_L3_SHORT;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		__be16 *inner = data + off + 2;

		if ((void *)(inner + 1) > data_end)
			return XDNS_PASS_L3_SHORT;
		proto = *inner;
		off += 4;
	}
	pkt->l3_off = off;

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;
		__u32 tot;

		if ((void *)(ip + 1) > data_end)
			return XDNS_PASS_L3_SHORT;
		if (ip->version != 4 || ip->ihl < 5)
			return XDNS_PASS_L3_SHORT;
		if (ip->frag_off & bpf_htons(XDNS_IP_MF | XDNS_IP_OFFSET))
			return XDNS_PASS_IP_FRAGMENT;
		if (ip->protocol != IPPROTO_UDP)
			return XDNS_PASS_NOT_UDP;
		pkt->ip_hlen = ip->ihl * 4;
		tot = bpf_ntohs(ip->tot_len);
		if (tot < pkt->ip_hlen + sizeof(struct udphdr) || data + off + tot > data_end)
			return XDNS_PASS_L3_SHORT;
		pkt->ipv6 = 0;
		pkt->l4_off = off + pkt->ip_hlen;
		udp = data + pkt->l4_off;
		if ((void *)(udp + 1) > data_end)
			return XDNS_PASS_L3_SHORT;
		if (!xdns_listening((const __u8 *)&ip->daddr, 4, bpf_ntohs(udp->dest))) {
			if (!xdns_kit_port(bpf_ntohs(udp->dest)))
				return XDNS_PASS_NOT_OUR_ADDR;
			pkt->kit = 1;   /* an answer to kernel iteration (kit.h), or nothing of ours */
		}
		ulen = bpf_ntohs(udp->len);
		if (ulen != tot - pkt->ip_hlen)
			return XDNS_PASS_UDP_BAD;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;
		__u32 plen;

		if ((void *)(ip6 + 1) > data_end)
			return XDNS_PASS_L3_SHORT;
		if (ip6->version != 6)
			return XDNS_PASS_L3_SHORT;
		if (ip6->nexthdr != IPPROTO_UDP) {
			if (ip6->nexthdr == IPPROTO_TCP || ip6->nexthdr == IPPROTO_ICMPV6)
				return XDNS_PASS_NOT_UDP;
			return XDNS_PASS_IPV6_EXT;
		}
		pkt->ip_hlen = sizeof(*ip6);
		plen = bpf_ntohs(ip6->payload_len);
		if (plen < sizeof(struct udphdr) || data + off + sizeof(*ip6) + plen > data_end)
			return XDNS_PASS_L3_SHORT;
		pkt->ipv6 = 1;
		pkt->l4_off = off + sizeof(*ip6);
		udp = data + pkt->l4_off;
		if ((void *)(udp + 1) > data_end)
			return XDNS_PASS_L3_SHORT;
		if (!xdns_listening((const __u8 *)&ip6->daddr, 6, bpf_ntohs(udp->dest))) {
			if (!xdns_kit_port(bpf_ntohs(udp->dest)))
				return XDNS_PASS_NOT_OUR_ADDR;
			pkt->kit = 1;   /* an answer to kernel iteration (kit.h), or nothing of ours */
		}
		ulen = bpf_ntohs(udp->len);
		if (ulen != plen)
			return XDNS_PASS_UDP_BAD;
	} else {
		return XDNS_PASS_NOT_IP;
	}
	pkt->dns_off = pkt->l4_off + sizeof(struct udphdr);
	pkt->dns_len = ulen - sizeof(struct udphdr);
	return XDNS_CONTINUE;
}

#endif /* XDNS_PARSE_H */
