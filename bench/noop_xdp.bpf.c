// SPDX-License-Identifier: GPL-2.0
/* The benchmark's ceiling: the cheapest possible XDP "DNS server".
 *
 * Every UDP datagram to port 53 that carries a DNS query (QR=0) is bounced back as its own
 * answer: Ethernet, IP addresses and UDP ports swapped, QR set, XDP_TX. No DNS work at all,
 * so the replies/s this program reaches is what the lab (veth + kxdpgun) can carry, and its
 * in-kernel ns/packet is the floor for any program that parses and rewrites a packet.
 *
 * Checksums stay valid: swapping addresses and ports does not change a one's-complement sum,
 * and the only changed 16-bit word (DNS flags) is folded into the UDP checksum incrementally
 * (RFC 1624). An IPv4 UDP checksum of 0 (none) is left alone. Built by bench/bench.py with
 * clang -O2 -target bpf; attached with `ip link set dev IF xdpdrv obj noop_xdp.o sec xdp`.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define DNS_PORT 53
#define DNS_QR 0x80 /* in the third byte of the DNS header */

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for one 16-bit word changing from m to m'. */
static __always_inline __u16 csum_replace2(__u16 check, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~check + (__u16)~old + new;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

SEC("xdp")
int noop_dns(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	int v4;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
			return XDP_PASS;
		udp = (void *)(ip + 1);
		v4 = 1;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
			return XDP_PASS;
		udp = (void *)(ip6 + 1);
		v4 = 0;
	} else {
		return XDP_PASS;
	}
	/* A DNS query: port 53, a whole 12-byte header, QR clear (never bounce a response). */
	__u8 *dns = (void *)(udp + 1);
	if ((void *)(dns + 12) > end || udp->dest != bpf_htons(DNS_PORT) || (dns[2] & DNS_QR))
		return XDP_PASS;

	__u16 old = *(__u16 *)(dns + 2);
	dns[2] |= DNS_QR;
	if (udp->check || !v4) /* IPv4 may omit the checksum (0); IPv6 never does */
		udp->check = csum_replace2(udp->check, old, *(__u16 *)(dns + 2));

	__be16 port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	/* Addresses (bounds re-checked for the verifier; they always hold here). */
	if (v4) {
		struct iphdr *ip = (void *)(eth + 1);
		__be32 a;

		if ((void *)(ip + 1) > end)
			return XDP_PASS;
		a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
	} else {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct in6_addr a;

		if ((void *)(ip6 + 1) > end)
			return XDP_PASS;
		a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
	}
	unsigned char mac[ETH_ALEN];

	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
