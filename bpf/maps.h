/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* maps.h - every map of the XDP program. Userspace sizes the hash maps before load. */
#ifndef XDNS_MAPS_H
#define XDNS_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdns_abi.h"

/* Per-CPU working memory of one packet (never shared with userspace). */
struct xdns_scratch {
	__u8 name[256];         /* lowercased question name, wire form */
	__u8 label_off[128];    /* offset of each length byte in name[], the root's last */
};

/* Load-time configuration: seed, EDNS payload, listen set. Userspace fills it before load. */
const volatile struct xdns_config xdns_cfg = {};

/* BTF anchors, never read: they put the ABI enums into the skeleton's generated types. */
const volatile enum xdns_body_kind xdns_btf_kind = XDNS_KIND_TYPE;
const volatile enum xdns_body_class xdns_btf_class = XDNS_CLASS_S;
const volatile enum xdns_verdict xdns_btf_verdict = XDNS_ANSWERED;

/* key 0 -> active data generation (u32, 0 = nothing loaded); userspace flips it on reload. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xdns_gen SEC(".maps");

/* (name hash, gen) -> struct xdns_node for every name that exists; userspace writes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct xdns_node_key);
	__type(value, struct xdns_node);
} xdns_nodes SEC(".maps");

/* (base hash, gen, kind, qtype) -> struct xdns_answer (header fields, body class); userspace writes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 131072);
	__type(key, struct xdns_answer_key);
	__type(value, struct xdns_answer);
} xdns_answers SEC(".maps");

/* answer key -> body bytes of at most XDNS_CLASS_S_LEN; userspace writes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 131072);
	__type(key, struct xdns_answer_key);
	__type(value, struct xdns_body_s);
} xdns_bodies_s SEC(".maps");

/* answer key -> body bytes of at most XDNS_CLASS_M_LEN; userspace writes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct xdns_answer_key);
	__type(value, struct xdns_body_m);
} xdns_bodies_m SEC(".maps");

/* answer key -> body bytes of at most XDNS_CLASS_L_LEN; userspace writes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct xdns_answer_key);
	__type(value, struct xdns_body_l);
} xdns_bodies_l SEC(".maps");

/* enum xdns_verdict -> packets (u64 per CPU); the program writes, userspace sums. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XDNS_VERDICT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} xdns_stats SEC(".maps");

/* key 0 -> struct xdns_scratch, per CPU; the program only. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_scratch);
} xdns_scratch SEC(".maps");

#endif /* XDNS_MAPS_H */
