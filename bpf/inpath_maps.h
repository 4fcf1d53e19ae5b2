/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* inpath_maps.h - the in-path cache's maps and load-time settings (bpf/inpath.bpf.c only). */
#ifndef XDNS_INPATH_MAPS_H
#define XDNS_INPATH_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdns_abi.h"

/* Load-time settings, written by userspace before the load (xdns_bpf::inpath). */
const volatile struct xdns_inpath_cfg xdns_inpath_cfg = {};

#define XDNS_INPATH_ROLE_CLIENT 1       /* queries arrive here; hits are answered here */
#define XDNS_INPATH_ROLE_UPSTREAM 2     /* responses of the servers arrive here */
#define XDNS_INPATH_ROLE_NO_REDIRECT 4  /* frames arriving here may carry partial checksums (native XDP on a veth): never redirected */

/*
 * Interface roles: key ifindex, value XDNS_INPATH_ROLE_* bits; written by userspace at attach.
 * An array for indexes below XDNS_INPATH_ROLE_SLOTS (the verifier inlines its lookup: no
 * hash per packet), the hash map for larger ones.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDNS_INPATH_ROLE_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} xdns_inpath_roles SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xdns_inpath_ifaces SEC(".maps");

/*
 * Server prefixes whose queries are cached, when there are more than XDNS_INPATH_INLINE
 * (else they are compared inline from xdns_inpath_cfg.srv): key xdns_inpath_prefix, value 1;
 * userspace at load.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct xdns_inpath_prefix);
	__type(value, __u8);
} xdns_inpath_servers SEC(".maps");

/*
 * Queries forwarded, awaiting their response: slot = a keyed hash (cfg.seed) of (client,
 * server, port, ID) & pend_mask, value that key and the question as sent; written in place by
 * the program on a miss, marked done by the first response. A newer query whose key hashes to
 * the same slot takes it: under a flood the older are forgotten (their responses then pass,
 * not learnt), as an LRU would, without an LRU's list locks and node allocation per miss (the
 * record was the largest cost of a miss: docs/perf/2026-11-29-inpath-cost.md). Sized by
 * userspace (`pending`, rounded up to a power of two).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct xdns_inpath_pend);
} xdns_inpath_pending SEC(".maps");

/*
 * The cache, in two size classes: key set * XDNS_INPATH_WAYS + way, value one answer, in the
 * small class's map when it fits (xdns_inpath_entry_s, 448 bytes: a 512-byte element), else
 * the large one's (xdns_inpath_entry); a way's tag in xdns_inpath_tags says which
 * (XDNS_INPATH_H_CLS). Written by the program when it learns (one bpf_map_update_elem of a
 * whole value: readers see the old or the new entry, never a mix, as elements are freed after
 * an RCU grace period; a way that changes class has its old element deleted after its tag
 * names the new one), deleted by userspace (flush, expiry sweep). Not preallocated: memory
 * follows the entries. Both sized by userspace (`capacity`: any way may be in either).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct xdns_inpath_entry);
} xdns_inpath_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct xdns_inpath_entry_s);
} xdns_inpath_cache_s SEC(".maps");

/*
 * The hashes of each set's entries (key set, value xdns_inpath_tags; bit 63 of a hash: the
 * way's class): a query reads its set's four in one array lookup (inlined, one cache line) and looks up only a way whose hash is
 * its own; a miss looks up none. Written by the program after it stores an entry; a tag whose
 * entry userspace deleted (flush, sweep) or another CPU replaced costs one lookup that finds
 * nothing or another question: the entry itself is always compared. Sized by userspace (sets).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct xdns_inpath_tags);
} xdns_inpath_tags SEC(".maps");

/*
 * The reply memo (inpath.h): whole replies to cache hits, kept per CPU for the exact query
 * (the resolver's reply memo's slots, struct xdns_reply_memo and slot.h, here with `ref` the
 * entry's key in xdns_inpath_cache and `tag` its stored_ns; struct xdns_inpath_memo: 384
 * bytes more for replies of up to XDNS_INPATH_MEMO_A bytes after the question). XDNS_REPLY_SLOTS for each
 * possible CPU: userspace multiplies max_entries by their number at load.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDNS_REPLY_SLOTS);
	__type(key, __u32);
	__type(value, struct xdns_inpath_memo);
} xdns_inpath_replies SEC(".maps");

/* Per-CPU scratch and counters (one value). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_inpath_scratch);
} xdns_inpath_scratch SEC(".maps");

#endif /* XDNS_INPATH_MAPS_H */
