// SPDX-License-Identifier: GPL-2.0
/*
 * drop_xdp.bpf.c - the emptiest XDP program: every frame gets ACTION (XDP_DROP unless built
 * with -DACTION=XDP_PASS). bench/guard.py uses the drop build as the ceiling of a drop stage
 * (nothing is cheaper than a program that reads nothing), and the pass build in front of the
 * nftables and iptables runs, so that every peer's packets are handled by the server veth's
 * NAPI thread, whose CPU time is measured.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#ifndef ACTION
#define ACTION XDP_DROP
#endif

SEC("xdp")
int drop_all(struct xdp_md *ctx)
{
	return ACTION;
}

char LICENSE[] SEC("license") = "GPL";
