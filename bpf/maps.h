/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* maps.h - every map of the XDP program. Userspace sizes the hash maps before load. */
#ifndef XDNS_MAPS_H
#define XDNS_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdns_abi.h"

/* Bytes moved when the head grows: Ethernet + VLAN + IPv4 with options + UDP + DNS header +
 * the longest question (18 + 60 + 8 + 12 + 255 + 4 = 357) fit. */
#define XDNS_MOVE_MAX 512
/* Headroom taken at most when the tail cannot grow: native XDP guarantees 256 bytes, less the
 * struct xdp_frame the kernel may keep there. */
#define XDNS_HEAD_GROW 192

/*
 * Steps per bpf_loop call. On CPUs whose returns go through a mitigation thunk (SRSO "safe
 * RET" here) a callback call costs more than one step of any walk below (a label, a fixup, a
 * TTL, a name word), and most walks take at most four steps: each callback runs up to this
 * many steps, inlined, and bpf_loop gets the step bound divided by it.
 * XDNS_BATCHED(name, step) defines the callback `name` from an always-inline
 * `long step(__u64 index, void *arg)` that returns non-zero to stop (at or past its bound too).
 */
#define XDNS_STEPS_PER_CALL 4
#define XDNS_BATCHED(name, step) XDNS_BATCHED_REST(name, step, 0)
#define XDNS_TURNS(steps) (((steps) + XDNS_STEPS_PER_CALL - 1) / XDNS_STEPS_PER_CALL)

/*
 * The same walk from step `n` on, for a walk whose first `n` steps the caller runs inline
 * because it is usually that short (cache.h, a cached name's words): XDNS_BATCHED_REST(name,
 * step, n) defines `name`, to run under bpf_loop with XDNS_TURNS(steps - n) turns. No call at
 * all for a short walk. Inlined steps are verified in the caller's states: keep them lean
 * (a general TTL step inlined multiplied the cache program's verifier work; cache.h inlines
 * only a lean single-TTL case).
 */
#define XDNS_BATCHED_REST(name, step, n)                                                \
	static long name(__u64 turn, void *arg)                                         \
	{                                                                               \
		__u32 k;                                                                \
		_Pragma("unroll") for (k = 0; k < XDNS_STEPS_PER_CALL; k++)             \
			if (step((n) + turn * XDNS_STEPS_PER_CALL + k, arg))            \
				return 1;                                               \
		return 0;                                                               \
	}

/*
 * Argument of the name walks' bpf_loop bodies: the packet's scratch, looked up once by the
 * program (a pointer spilled to the caller's stack keeps its type for the verifier), instead
 * of one map lookup per iteration.
 */
struct xdns_walk_ctx {
	struct xdns_scratch *sc;
};

/* Load-time configuration: seed, EDNS payload, listen set. Userspace fills it before load. */
const volatile struct xdns_config xdns_cfg = {};

/* BTF anchors, never read: they put the ABI enums into the skeleton's generated types. */
const volatile enum xdns_body_kind xdns_btf_kind = XDNS_KIND_TYPE;
const volatile enum xdns_body_class xdns_btf_class = XDNS_CLASS_S;
const volatile enum xdns_verdict xdns_btf_verdict = XDNS_ANSWERED;
const volatile struct xdns_cache_event xdns_btf_cache_event = {};
const volatile struct xdns_cache_key xdns_btf_cache_key = {};
const volatile enum xdns_tel_const xdns_btf_tel_const = XDNS_TEL_SUB_BITS;
const volatile enum xdns_tel_path xdns_btf_tel_path = XDNS_TEL_KERNEL_AUTH;
const volatile struct xdns_bucket xdns_btf_bucket = {};  /* the answer table index's buckets */

/*
 * key 0 -> active data generation (u32, 0 = nothing loaded); userspace flips it on reload.
 * key 1 -> label floor (u32): no node of any generation a packet may read has fewer labels
 * (root excluded); shorter suffixes are not looked up. Userspace lowers it before staging a
 * generation with shallower names and raises it only once the old generation is gone.
 * key 2 -> question memo epoch (u32): userspace bumps it after updating the active generation
 * in place (an IXFR's few changes, maps.rs `Loader::apply`); it enters the memo's key with the
 * generation, so no memo entry learnt before the update matches again.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u32);
} xdns_gen SEC(".maps");

/*
 * Presence filter: two halves of (xdns_cfg.filter_mask + 1) words, half gen & 1 for
 * generation gen. One bit per node and per Type(qtype) answer of the generation (hash.h,
 * xdns_filter_pos); a clear bit means the key is absent and its hash lookup is skipped.
 * Userspace sizes the map before load and writes the staged generation's half before the
 * flip, through a mapping (mmapable; in-place updates write single words by syscall). An
 * array lookup is inlined by the verifier (no call), mmapable or not.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 128);
	__type(key, __u32);
	__type(value, __u64);
} xdns_filter SEC(".maps");

/*
 * Answer table (xdns_abi.h), one per generation, in the slot of its parity: xdns_index:
 * generation parity -> the generation's index, xdns_cfg.table_buckets buckets (struct
 * xdns_bucket); xdns_vals: generation parity -> its array of pages (struct xdns_val_page),
 * xdns_cfg.val_pages pages holding its answer records packed, then the pages of the spill
 * slots, one per CPU (lookup.h, xdns_answer_get). Userspace sizes both before load (to the
 * zones' answers and their bytes: a template each, bpf_map__set_inner_map_fd); it creates a
 * generation's two maps when it stages the generation, writes them before the flip, and
 * drops those of the generation the flip retired: between reloads only one of each exists.
 * Each has its template's size (no BPF_F_INNER_MAP), so every lookup, the outer and the
 * inner, is an inlined array read (no call). Templates and inner arrays are BPF_F_MMAPABLE
 * (runtime.rs table_map_opts): the fill writes them through a mapping.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} xdns_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} xdns_vals SEC(".maps");

/*
 * The answer record at address `v` (XDNS_VAL_HALF: the generation's parity, then bytes / 4
 * into its page array; xdns_abi.h), or NULL (no page array for that parity: its generation
 * is gone). The offset is masked to the page, whose slack holds the longest record read from
 * there.
 */
static __always_inline struct xdns_answer_s *xdns_val(__u32 v)
{
	__u32 half = (v & XDNS_VAL_HALF) != 0, page = (v & XDNS_VAL_ADDR) >> (XDNS_PAGE_SHIFT - 2);
	void *pages = bpf_map_lookup_elem(&xdns_vals, &half);
	__u8 *p;

	if (!pages)
		return NULL;
	p = bpf_map_lookup_elem(pages, &page);
	if (!p)
		return NULL;
	return (struct xdns_answer_s *)(p + ((v << 2) & (XDNS_PAGE - 1)));
}

/* (name hash, gen) -> struct xdns_node for the names that exist and are not in their
 * generation's answer table (its bucket was full or its bytes ran out, or an in-place update
 * added or changed the node: xdns_abi.h XDNS_TABLE_NODE); userspace writes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct xdns_node_key);
	__type(value, struct xdns_node);
} xdns_nodes SEC(".maps");

/* (base hash, gen, kind, qtype) -> struct xdns_answer_s (header fields, body class, class S
 * bytes inline); userspace writes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 131072);
	__type(key, struct xdns_answer_key);
	__type(value, struct xdns_answer_s);
} xdns_answers SEC(".maps");

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

/*
 * CPU * XDNS_MEMO_SLOTS + slot -> struct xdns_memo: questions recently answered (memo.h); the
 * program only. Each CPU has its own run of slots, as a per-CPU array would give, but in one
 * plain array: a per-CPU array's lookup first loads the slot's own per-CPU pointer (a second,
 * dependent cache miss on every probe). Mmapable for the page-aligned values (a slot is one
 * whole cache line). Userspace sets max_entries to possible CPUs * XDNS_MEMO_SLOTS.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XDNS_MEMO_SLOTS);
	__type(key, __u32);
	__type(value, struct xdns_memo);
} xdns_memo SEC(".maps");

/*
 * CPU * XDNS_REPLY_SLOTS + slot -> struct xdns_reply_memo: cache-hit replies kept whole for
 * their exact query (reply.h), a run of slots per CPU as in xdns_memo. Userspace sets
 * max_entries to possible CPUs * XDNS_REPLY_SLOTS with the cache stage, else to 1.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XDNS_REPLY_SLOTS);
	__type(key, __u32);
	__type(value, struct xdns_reply_memo);
} xdns_replies SEC(".maps");

/* key 0 -> struct xdns_scratch, per CPU; the program only. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_scratch);
} xdns_scratch SEC(".maps");

/*
 * The resolver's answer cache (xdns_abi.h): bucket number -> struct xdns_cache_bucket, and
 * per size class slot -> value. Array maps the resolver writes through mmap; sizes set at load.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_cache_bucket);
} xdns_cache_idx SEC(".maps");

/* slot -> struct xdns_cache_s (body <= 128 B); the resolver writes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_cache_s);
} xdns_cache_s SEC(".maps");

/* slot -> struct xdns_cache_m (body <= 512 B); the resolver writes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_cache_m);
} xdns_cache_m SEC(".maps");

/* slot -> struct xdns_cache_l (body <= 1280 B); the resolver writes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_cache_l);
} xdns_cache_l SEC(".maps");

/* struct xdns_cache_event records (refresh requests); the program writes, the resolver reads. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} xdns_cache_events SEC(".maps");

/* struct xdns_allow_key (client prefix) -> u8 1: who may use the resolver; userspace writes. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, struct xdns_allow_key);
	__type(value, __u8);
} xdns_allow SEC(".maps");

/*
 * key 0 -> .n = the active slot (1 or 2; 0 = none yet: the trie decides); keys 1, 2 -> the
 * allow list as a table of at most XDNS_ALLOW_INLINE prefixes (.n larger: the trie decides).
 * Userspace writes the inactive slot, then flips key 0.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, struct xdns_allow_table);
} xdns_allow_inline SEC(".maps");

/*
 * Guard stage (guard.h, xdns_abi.h). Sizes set by userspace at load (runtime.rs): the list
 * maps hold two generations of the largest list, the feature map the prefixes tracked.
 */
/* 0 -> struct xdns_guard_ctl (generations, interval, list descriptors, tier tables);
 * userspace writes through mmap, the program reads. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_guard_ctl);
} xdns_guard_ctl SEC(".maps");

/* struct xdns_guard_key (prefix, length, family, parity) -> struct xdns_guard_entry; userspace
 * writes, the program adds to `drops`. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 2);
	__type(key, struct xdns_guard_key);
	__type(value, struct xdns_guard_entry);
} xdns_guard_hash SEC(".maps");

/* struct xdns_guard_lpm_key (parity, family, prefix) -> struct xdns_guard_entry; userspace
 * writes, the program adds to `drops`. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 2);
	__type(key, struct xdns_guard_lpm_key);
	__type(value, struct xdns_guard_entry);
} xdns_guard_lpm SEC(".maps");

/*
 * Guard presence filter: two halves (list generation parity) of xdns_cfg.guard_filter_mask + 1
 * words; one bit per prefix of the hash structure (hash.h, xdns_guard_pos). Userspace sizes it
 * before load and writes the staged generation's half whole before the flip.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 128);
	__type(key, __u32);
	__type(value, __u64);
} xdns_guard_filter SEC(".maps");

/* struct xdns_guard_name_key (name hash, kind, length, parity) -> struct xdns_guard_entry;
 * userspace writes, the program adds to `drops`. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 2);
	__type(key, struct xdns_guard_name_key);
	__type(value, struct xdns_guard_entry);
} xdns_guard_names SEC(".maps");

/* struct xdns_guard_qfeat_key (parent name hash, length) -> struct xdns_guard_feat per CPU;
 * the program writes, userspace reads the slot not being written. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct xdns_guard_qfeat_key);
	__type(value, struct xdns_guard_feat);
} xdns_guard_qfeat SEC(".maps");

/* Set (xdns_cfg.guard_rrl_mask + 1 of them) -> struct xdns_rrl_set, shared by the CPUs: the
 * kernel answers' RRL buckets, set-associative by account tag (xdns_abi.h, rrl.h); the
 * program writes, nobody else. An array: an inlined lookup, no hash or LRU bookkeeping. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_rrl_set);
} xdns_guard_rrl SEC(".maps");

/* Slot (a cheap hash of an RRL account's key, rrl.h xdns_rrl_memo_slot) -> struct
 * xdns_rrl_memo per CPU: the accounts this CPU's RRL call decided, so that a later answer of
 * one pays its shared bucket inline (xdns_rrl_memo); the program writes, nobody else. A map of
 * its own, not scratch: a slot is then a map value at offset 0 for the verifier, where a
 * variable offset into the scratch multiplied its states (docs/perf/2026-11-29-rrl-memo-map.md). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XDNS_RRL_MEMO_SLOTS);
	__type(key, __u32);
	__type(value, struct xdns_rrl_memo);
} xdns_guard_rrl_memo SEC(".maps");

/* Slot (a verified server cookie's hash & (XDNS_COOKIE_SLOTS - 1)) -> struct xdns_cookie_slot
 * per CPU: the server cookies the kernel verified (xdns_abi.h, rrl.h); the program writes,
 * nobody else. XDNS_COOKIE_SLOTS with the guard, 1 without (xdns_bpf::guard::size_maps). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_cookie_slot);
} xdns_guard_cookies SEC(".maps");

/* struct xdns_guard_feat_key (client /24 or /56) -> struct xdns_guard_feat per CPU: kernel
 * answers and their bytes (rrl.h); the program writes, userspace reads the idle slot. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct xdns_guard_feat_key);
	__type(value, struct xdns_guard_feat);
} xdns_guard_rfeat SEC(".maps");

/* struct xdns_guard_qfeat_key (parent name hash, length) -> struct xdns_guard_feat per CPU:
 * kernel NXDOMAIN answers and their bytes (rrl.h); the program writes, userspace reads. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct xdns_guard_qfeat_key);
	__type(value, struct xdns_guard_feat);
} xdns_guard_nxfeat SEC(".maps");

/* struct xdns_guard_feat_key (source /24 or /56) -> struct xdns_guard_feat per CPU; the
 * program writes, userspace reads the slot not being written. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct xdns_guard_feat_key);
	__type(value, struct xdns_guard_feat);
} xdns_guard_feat SEC(".maps");

/* 0 -> struct xdns_tel_ctl: the telemetry selection rules (two sets with their summaries, one active); userspace
 * writes (xdns_bpf::telemetry), the program reads once per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdns_tel_ctl);
} xdns_tel_ctl SEC(".maps");

/* enum xdns_tel_path (kernel paths, 0 and 1) -> struct xdns_tel_hist per CPU; the program
 * writes, userspace reads and sums. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct xdns_tel_hist);
} xdns_tel_hist SEC(".maps");

/* 0 -> the telemetry stage's end half (xdns_tel_xdp, telemetry.h), a program of its own so
 * that its verifier work is not the main program's; userspace sets it after load. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xdns_tel_prog SEC(".maps");

/* struct xdns_tel_event records (dnstap from XDP: a selected kernel answer with its query,
 * telemetry.h); the end half writes, the daemon reads (xdns_bpf::telemetry). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} xdns_tel_events SEC(".maps");

/* kernel iteration (issue 32) */
#include "kit_maps.h"

#endif /* XDNS_MAPS_H */
