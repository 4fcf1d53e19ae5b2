/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * kit_maps.h - kernel iteration's maps and load-time settings (issue 32; kit.h, README.md
 * "Kernel iteration"). Included by maps.h: the parse stage needs the reserved port range.
 */
#ifndef XDNS_KIT_MAPS_H
#define XDNS_KIT_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdns_abi.h"

/* Set by userspace before load (xdns_bpf::runtime): on, the reserved port range, our EDNS. */
const volatile struct xdns_kit_config xdns_kit_cfg = {};

/* zone cut (hash of its lowercased name) -> struct xdns_kit_zone; userspace writes (the
 * resolver's delegations and the root hints), xdns_kit_out_xdp reads. Size set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, struct xdns_kit_zone_key);
	__type(value, struct xdns_kit_zone);
} xdns_kit_zones SEC(".maps");

/* (server, our port, ID) -> struct xdns_kit_pend: a query the kernel sent. xdns_kit_out_xdp
 * inserts (never replaces), xdns_kit_in_xdp reads, userspace claims by deleting (a handed
 * over response, a timeout). Size set at load; full: misses go to userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct xdns_kit_pend_key);
	__type(value, struct xdns_kit_pend);
} xdns_kit_pending SEC(".maps");

/* struct xdns_kit_event records: final responses handed to userspace (xdns_kit_in_xdp
 * writes, the daemon reads in batches). Full: the response goes to the reserved port's socket. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} xdns_kit_events SEC(".maps");

/* server address -> struct xdns_kit_hop: its next hop (out interface, our MAC, the next
 * hop's MAC, expiry); userspace writes (routes and neighbours of the zone map's servers),
 * xdns_kit_next_hop reads when bpf_fib_lookup finds none. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct xdns_kit_hop_key);
	__type(value, struct xdns_kit_hop);
} xdns_kit_hops SEC(".maps");

/* key 0 -> struct xdns_kit_ctl: whether the kernel answers final answers itself, the TTL cap
 * (userspace writes at start and on reload; xdns_kit_in_xdp reads). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_kit_ctl);
} xdns_kit_ctl SEC(".maps");

/* key 0 -> struct xdns_kit_scratch, per CPU: the programs' working memory and counters. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_kit_scratch);
} xdns_kit_scratch SEC(".maps");

/* XDNS_KIT_SLOT_OUT -> xdns_kit_out_xdp, XDNS_KIT_SLOT_IN -> xdns_kit_in_xdp: programs of
 * their own, verified alone, so their work is not the resolver program's; userspace sets
 * them after load. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} xdns_kit_prog SEC(".maps");

/* Is `port` (host order) in the reserved range? Constant false with kernel iteration off. */
static __always_inline int xdns_kit_port(__u16 port)
{
	return xdns_kit_cfg.on && port >= xdns_kit_cfg.port_lo && port <= xdns_kit_cfg.port_hi;
}

#endif /* XDNS_KIT_MAPS_H */
