/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * xdns_abi.h - the only structs and enums shared by the XDP program and userspace.
 *
 * Rust gets every type below from the libbpf-cargo skeleton (BTF), never by copying.
 * Rules: fixed-width fields, explicit padding, enum values never renumbered or reused.
 */
#ifndef XDNS_ABI_H
#define XDNS_ABI_H

#include <linux/types.h>

/*
 * Every outcome of the XDP program, counted per CPU in the scratch map's `verdicts`.
 * Names are exported as metric labels: append, never renumber.
 */
enum xdns_verdict {
	XDNS_ANSWERED = 0,            /* XDP_TX: answered from the kernel */
	XDNS_PASS_NOT_IP = 1,         /* not IPv4/IPv6 (ARP, LLDP, QinQ beyond one tag, ...) */
	XDNS_PASS_L3_SHORT = 2,       /* Ethernet/IP header truncated or bad IHL/version */
	XDNS_PASS_IP_FRAGMENT = 3,    /* IPv4 fragment (MF or offset set) */
	XDNS_PASS_IPV6_EXT = 4,       /* IPv6 with any extension header */
	XDNS_PASS_NOT_UDP = 5,        /* TCP, ICMP, ... */
	XDNS_PASS_NOT_OUR_ADDR = 6,   /* UDP to an address/port not in the listen set */
	XDNS_PASS_UDP_BAD = 7,        /* UDP length disagrees with the IP length */
	XDNS_PASS_DNS_SHORT = 8,      /* shorter than a DNS header */
	XDNS_PASS_DNS_RESPONSE = 9,   /* QR=1 */
	XDNS_PASS_DNS_OPCODE = 10,    /* opcode other than QUERY */
	XDNS_PASS_DNS_COUNTS = 11,    /* QDCOUNT!=1, ANCOUNT/NSCOUNT!=0 or ARCOUNT>1 */
	XDNS_PASS_QNAME = 12,         /* label>63, name>255, compression pointer, truncated */
	XDNS_PASS_QCLASS = 13,        /* class other than IN */
	XDNS_PASS_QTYPE_META = 14,    /* qtype 41 or 128..254 (AXFR, IXFR, ...) */
	XDNS_PASS_EDNS_BAD = 15,      /* additional record that is not a well-formed root OPT */
	XDNS_PASS_EDNS_VERSION = 16,  /* EDNS version > 0: userspace sends BADVERS */
	XDNS_PASS_TRAILING = 17,      /* bytes after the last record */
	XDNS_PASS_NO_ZONE = 18,       /* name under no zone we serve */
	XDNS_PASS_NO_BODY = 19,       /* lookup found no body (stale map or userspace-only body) */
	XDNS_PASS_BODY_LARGE = 20,    /* body kept in userspace: larger than the largest class */
	XDNS_PASS_FIXUPS = 21,        /* more fixups than XDNS_MAX_FIXUPS with delta>0 */
	XDNS_PASS_NOT_LOADED = 22,    /* no active generation yet */
	XDNS_PASS_TAIL = 23,          /* bpf_xdp_adjust_tail refused to grow the frame */
	XDNS_DROP_REWRITE = 24,       /* packet half rewritten when a helper failed: dropped */
	/* resolver cache stage (only when xdns_cfg.resolver is set; names under no served zone) */
	XDNS_CACHE_ANSWERED = 25,     /* XDP_TX: answered from the resolver's answer cache */
	XDNS_PASS_CACHE_MISS = 26,    /* not in the cache (or a hash collision): userspace resolves */
	XDNS_PASS_CACHE_EXPIRED = 27, /* in the cache but expired: never served, userspace resolves */
	XDNS_PASS_NOT_ALLOWED = 28,   /* client outside the resolver's allow list (userspace: REFUSED) */
	XDNS_PASS_RD0 = 29,           /* RD=0 for a name under no served zone: userspace's policy */
	XDNS_PASS_CACHE_CD = 30,      /* CD=1: checking disabled, userspace answers */
	XDNS_PASS_CACHE_RACE = 31,    /* entry replaced while read, seen before the frame changed */
	XDNS_DROP_CACHE_RACE = 32,    /* entry replaced while copied into the frame: dropped */
	/* guard stage (guard.h; only when xdns_cfg.guard is set): UDP to a listen address */
	XDNS_DROP_BLOCKED = 33,       /* source under a blocklist prefix, under no allowlist prefix */
	XDNS_DROP_TIER = 34,          /* source in a slot of the modelled hardware tier (a model of a NIC filter) */
	XDNS_DROP_NAME = 35,          /* query for a blocked name: an exact entry, or under a "*.suffix" one */
	/* answer stage */
	XDNS_PASS_DNSSEC = 36,        /* DO=1 to a signed zone: RRSIGs and proofs built in userspace */
	/* guard: RRL and cookies on kernel answers (rrl.h; xdns_cfg.guard, switched on at run time) */
	XDNS_DROP_RRL = 37,           /* kernel answer over its RRL account's rate: dropped */
	XDNS_ANSWERED_SLIP = 38,      /* XDP_TX: over the rate, the slip-th: header and question, TC=1 */
	XDNS_PASS_COOKIE = 39,        /* a valid server cookie (verified here): userspace answers, never limited */
	XDNS_PASS_COOKIE_NEW = 40,    /* other COOKIE option, within the rate: userspace adds a new server cookie */
	/* kernel iteration (issue 32; kit.h, its own programs xdns_kit_out_xdp and xdns_kit_in_xdp) */
	XDNS_KIT_SENT = 41,           /* XDP_TX: a cache miss rewritten into a query to a server (out the interface it came in) */
	XDNS_KIT_REDIRECTED = 42,     /* XDP_REDIRECT: the same, out another interface (bpf_redirect) */
	XDNS_PASS_KIT_HANDOVER = 43,  /* a miss the kernel does not iterate: passed untouched (reason: xdns_kit_scratch.handover[]) */
	XDNS_PASS_KIT_RESPONSE = 44,  /* a response that passed every check: to the reserved-port socket, userspace finishes */
	XDNS_DROP_KIT_UNSOLICITED = 45, /* a response to a reserved port that matches no pending query (server, port, ID) */
	XDNS_DROP_KIT_SRC_PORT = 46,  /* ... from a source port other than 53 */
	XDNS_DROP_KIT_QUESTION = 47,  /* ... whose question is not the one sent (name with its 0x20 case, type, class) */
	XDNS_DROP_KIT_MALFORMED = 48, /* ... too short, QDCOUNT != 1, or a query (QR=0) to a reserved port */
	/* kernel iteration, the response side: referrals followed in the kernel (issue 32) */
	XDNS_KIT_REFERRAL_FOLLOWED = 49, /* XDP_TX: a referral with in-bailiwick glue rewritten into the next query (out the interface it came in) */
	XDNS_KIT_REFERRAL_REDIRECTED = 50, /* XDP_REDIRECT: the same, out another interface */
	XDNS_PASS_KIT_HOP_LIMIT = 51, /* a referral past the hop limit: to the daemon's socket, userspace finishes */
	XDNS_PASS_KIT_GLUELESS = 52,  /* a referral without in-bailiwick glue of the client's family: to userspace */
	XDNS_PASS_KIT_BAILIWICK = 53, /* a referral whose NS owner is not below the cut asked and above the name (upward, sideways, elsewhere): to userspace */
	XDNS_PASS_KIT_UNPARSED = 54,  /* a response the kernel's bounded parse does not take (malformed, truncated, too long, too many records): to userspace */
	XDNS_PASS_KIT_NO_HOP = 55,    /* a referral it would follow but cannot send (no next hop, pending map full, frame resize): to userspace untouched */
	XDNS_KIT_HANDED = 56,         /* XDP_DROP: a final response, its pending entry claimed by the kernel, handed to userspace in the ring buffer xdns_kit_events (no socket, no claim syscall) */
	/* kernel iteration: a final answer of the common shape answered by the kernel itself (issue 32) */
	XDNS_KIT_ANSWERED = 57,       /* XDP_TX: the response rewritten into the client's reply, the bytes userspace would send (out the interface it came in); handed over too, marked answered, for the cache */
	XDNS_KIT_ANSWERED_REDIRECTED = 58, /* XDP_REDIRECT: the same, out another interface */
	XDNS_VERDICT_MAX = 59,        /* number of verdicts; not a verdict */
};
#define XDNS_VERDICT_SLOTS 64           /* counters kept per CPU (a power of two >= the verdicts) */
/*
 * The last counter slot is never a verdict: it is the value of a stage's "continue"
 * (bpf/stage.h, XDNS_CONTINUE), which is not an outcome and is never counted unless a bug
 * lets it out of the program (then it is aborted, never sent). Verdicts end below it.
 */
#define XDNS_CONTINUE_SLOT (XDNS_VERDICT_SLOTS - 1)
_Static_assert(XDNS_VERDICT_MAX < XDNS_CONTINUE_SLOT, "verdicts end below the continue slot");

/* Kinds of body key; values never renumbered (see DESIGN-NOTES.md, the answer model). */
enum xdns_body_kind {
	XDNS_KIND_TYPE = 1,           /* Type(qtype) at the question name */
	XDNS_KIND_OTHER = 2,          /* Other at the question name, or at a zone cut */
	XDNS_KIND_WILDCARD = 3,       /* Wildcard(qtype) at the closest encloser */
	XDNS_KIND_WILDCARD_OTHER = 4, /* WildcardOther at the closest encloser */
	XDNS_KIND_NXDOMAIN = 5,       /* NxDomain at the zone apex */
	/* a signed zone's DO=1 bodies, where the proofs depend on the base only (issue 28) */
	XDNS_KIND_TYPE_DO = 6,        /* Type(qtype) with RRSIGs and proofs */
	XDNS_KIND_OTHER_DO = 7,       /* Other with RRSIGs and proofs (NODATA, referral, chain) */
	XDNS_KIND_APEX_DO = 8,        /* at the apex: the SOA + RRSIG(SOA) part of DO=1 NODATA (class M or L) */
	XDNS_KIND_APEX_PROOF_DO = 9,  /* at an NSEC3 zone's apex: that part + the apex's NSEC3 and its RRSIGs */
};

/* Body size classes: each class is one hash map whose value holds that many body bytes. */
enum xdns_body_class {
	XDNS_CLASS_S = 0,
	XDNS_CLASS_M = 1,
	XDNS_CLASS_L = 2,
	XDNS_CLASS_USERSPACE = 3,     /* larger than XDNS_CLASS_L_LEN: no bytes in the kernel */
};

#define XDNS_CLASS_S_LEN 128
#define XDNS_CLASS_M_LEN 512
#define XDNS_CLASS_L_LEN 1280
/* Fixups stored per body; bodies with more are answered in the kernel only when delta is 0. */
#define XDNS_MAX_FIXUPS 32
/* Listen addresses the program compares against (the daemon's `listen` list). */
#define XDNS_MAX_LISTEN 8

/* xdns_node.flags */
#define XDNS_NODE_APEX 0x1      /* this name is a zone apex */
#define XDNS_NODE_CUT 0x2       /* at or below a zone cut (cut_hash/cut_len valid) */
#define XDNS_NODE_WILDCARD 0x4  /* `*.<this name>` exists, or a DNAME here (no Wildcard bodies: handed over) */
#define XDNS_NODE_NODATA_APEX 0x8 /* this name's Other body is its apex's, rebased by delta:
                                   * the exact lookup of Other uses apex_hash (no per-name copy) */

/* Key of `xdns_nodes` (the nodes the answer table lacks): a suffix of the lowercased question name. */
struct xdns_node_key {
	__u64 hash;             /* xdns_name_hash() of the lowercased wire name */
	__u32 gen;              /* data generation (see xdns_gen) */
	__u32 _pad;
};

/* Value of `xdns_nodes`, and a node's record in the answer table: what the lookup needs to
 * know about one existing name. */
struct xdns_node {
	__u64 cut_hash;         /* hash of the zone cut at or above this name (XDNS_NODE_CUT) */
	__u64 apex_hash;        /* hash of the apex of the zone that owns this name */
	__u16 flags;            /* XDNS_NODE_* */
	__u8 name_len;          /* wire length of this name: second guard against collisions */
	__u8 labels;            /* label count, root excluded */
	__u8 cut_labels;        /* label count of the cut (XDNS_NODE_CUT) */
	__u8 apex_labels;       /* label count of the apex */
	__u8 _pad[2];
};

/* Key of `xdns_answers` and of the body maps M and L: a body key of DESIGN-NOTES.md. */
struct xdns_answer_key {
	__u64 hash;             /* hash of the body's base name */
	__u32 gen;              /* data generation */
	__u16 qtype;            /* for XDNS_KIND_TYPE / XDNS_KIND_WILDCARD, else 0 */
	__u8 kind;              /* enum xdns_body_kind */
	/*
	 * 0 in xdns_answers. In xdns_bodies_{m,l}: the answer's body_ver. A class M or L body
	 * changed in place (an IXFR, crates/xdns-bpf/src/delta.rs) is written under the other
	 * value before its answer is replaced, and the old bytes deleted after: a packet holding
	 * either answer reads its own bytes, or none (it passes).
	 */
	__u8 _pad;
};

/*
 * Answer table (lookup.h, xdns_answer_get): the answers of a generation indexed by open
 * addressing in array maps, so that finding one is two inlined array reads instead of a
 * hash-map call. Each generation has its own (maps.h: a map per generation in xdns_index and
 * xdns_vals, in the slot of its parity): an index of table_buckets buckets of
 * XDNS_TABLE_WAYS entries, and an array of val_pages pages (then the spill slots), where the
 * answer records are packed, each as long as it needs (struct xdns_answer_s). The bucket of a key is
 * xdns_table_bucket(hash, kind, qtype, table_buckets) (hash.h); an entry is the key when its hash
 * is the key's and its meta is XDNS_TABLE_META(kind, qtype, gen). An answer is in the table
 * or in xdns_answers, not both: the ones that found no free entry or value are in the hash
 * map, and their bucket's first entry carries XDNS_TABLE_SPILLED in its idx: only a miss in
 * such a bucket looks in the hash map. (An in-place update may put a changed answer of the
 * table in the hash map too, then give up its table entry.)
 */
#define XDNS_TABLE_WAYS 4
#define XDNS_TABLE_SPILLED 0x80000000u  /* e[0].idx: a key of this bucket is not in the table */
#define XDNS_TABLE_IDX 0x7fffffffu
#define XDNS_TABLE_META(kind, qtype, gen) \
	((__u32)(qtype) | (__u32)(kind) << 16 | (0x80u | ((__u32)(gen) & 0x7f)) << 24)
/*
 * Nodes share their generation's answer table (lookup.h, xdns_node_find): a node is an entry of
 * the pseudo kind XDNS_TABLE_NODE (qtype 0: bucket xdns_table_bucket(hash, XDNS_TABLE_NODE, 0,
 * table_buckets), meta XDNS_TABLE_META(XDNS_TABLE_NODE, 0, gen)) whose idx is the address of
 * its struct xdns_node in the page array (eight-byte aligned). A node that found no free entry
 * or bytes, or that an in-place update added or changed, is in xdns_nodes instead, its bucket
 * spilled as an answer's would be.
 */
#define XDNS_TABLE_NODE 0x7f
/* An entry of a four-way bucket: the answer table's, and the resolver cache's below. */
struct xdns_table_entry {
	__u64 hash;             /* the key's hash */
	__u32 meta;             /* XDNS_TABLE_META (XDNS_CACHE_META) of the key; 0: empty */
	__u32 idx;              /* its value: the record's address (bytes / 4) in the generation's
	                         * half of xdns_vals (the cache: its size class << 30 | its slot
	                         * in that class's cache array) */
};
struct xdns_bucket {
	struct xdns_table_entry e[XDNS_TABLE_WAYS];
};

/*
 * Question memo (memo.h): per CPU, the questions recently answered from the table, by their
 * name, type and class as sent, with what the name walk and the lookup found for them, so
 * that the next identical question skips both. A slot is one cache line, keyed by a hash of
 * the generation and the question's first bytes; it holds the name, type and class, compared
 * before use: a collision is a miss. A resolver program, which has no memo, keeps cache hints
 * in the same slots instead (memo.h): the slot is a union of the two uses, and a program only
 * ever uses one (xdns_cfg.resolver). The fields both have (seen/kind, qlen, nlab) sit at the
 * same offsets, where they were before the union.
 */
#define XDNS_MEMO_SLOTS 4096            /* per CPU, a power of two: 2048 sets of 2 ways */
#define XDNS_MEMO_MAX_Q 40              /* longest name + type + class kept (bytes) */
struct xdns_memo_question {     /* the question memo's use of a slot (authoritative programs) */
	__u32 v;                /* the answer's record address in xdns_vals (a class S answer) */
	__u32 qsum;             /* checksum of name, type and class (xdns_query.qsum), folded to 32 bits */
	__u32 seen;             /* low half of the hash of a question seen once in this set: the
				 * latest in the first way, the one before in the second */
	__u8 qlen;              /* wire length of the name (name[] holds qlen + 4 bytes) */
	__u8 nlab;              /* its labels, the root included */
	__u8 _pad[2];
	__u8 name[XDNS_MEMO_MAX_Q]; /* the name, type and class as sent */
};
struct xdns_memo_hint {         /* a cache hint's use of a slot (resolver programs) */
	__u32 ref;              /* the cache entry (size class << 30 | slot, as xdns_cache_find) */
	__u32 _unused;
	__u32 kind;             /* the question's type | its DO bit << 16 */
	__u8 qlen;              /* wire length of the name */
	__u8 nlab;              /* its labels, the root included */
	__u8 _pad[2];
};
union xdns_memo_use {
	struct xdns_memo_question q;
	struct xdns_memo_hint hint;
};
struct xdns_memo {
	__u64 hash;             /* of the generation and the question (memo.h); 0: empty */
	union xdns_memo_use u;
};
_Static_assert(sizeof(struct xdns_memo) == 64, "a memo slot is one cache line");
_Static_assert(__builtin_offsetof(struct xdns_memo_question, seen) == __builtin_offsetof(struct xdns_memo_hint, kind) &&
	       __builtin_offsetof(struct xdns_memo_question, qlen) == __builtin_offsetof(struct xdns_memo_hint, qlen),
	       "the memo and the hints keep their shared fields at the same offsets");

/* The body's header fields and where its bytes live (head of `struct xdns_answer_s`). */
struct xdns_answer {
	__u16 flags;            /* AA and RCODE to set in the response header */
	__u16 ancount;
	__u16 nscount;
	__u16 arcount;
	__u16 len;              /* body length in bytes */
	__u16 an_ns_len;        /* length of answer+authority (additional follows) */
	__u16 base_len;         /* wire length of the base name */
	__u16 csum;             /* folded one's-complement sum of the body, big-endian words */
	__u16 csum_an_ns;       /* the same over the first an_ns_len bytes */
	__u16 nfixups;          /* entries in the body's fixups[] (> XDNS_MAX_FIXUPS: see PASS_FIXUPS) */
	__u8 ar_required;       /* 1: additional section must not be dropped (TC=1 instead) */
	__u8 class;             /* enum xdns_body_class: which body map holds the bytes */
	__u8 dnssec;            /* 1: a signed zone's DO=0 body: DO=1 takes the DO kind, else passes (XDNS_PASS_DNSSEC);
	                         * XDNS_DNSSEC_NAME_PART: a DO=1 NODATA's own part (below) */
	__u8 body_ver;          /* class M/L: the `_pad` of its bytes' key in xdns_bodies_{m,l} (0 or 1; below);
				 * XDNS_BODY_INLINE: a class M record of the answer table, bytes inline */
};
/*
 * body_ver of a class M answer placed in the answer table: its bytes and fixups follow the
 * header in the record (as a class S record's, fixups at XDNS_FIX_AT_M), not in xdns_bodies_m.
 * Only the table's records carry it: xdns_answers values (and so the spill slot) never do.
 */
#define XDNS_BODY_INLINE 2

/*
 * `dnssec` of a signed zone's DO=1 NODATA body that holds the name's own part only (its NSEC
 * or NSEC3 and their RRSIGs, pointing into the question only, no additional section): the
 * apex's XDNS_KIND_APEX_DO body (SOA and RRSIG(SOA), compiled against the apex, class L,
 * at most XDNS_PRE_FIXUPS pointers) is written before it, rebased like an NXDOMAIN body.
 */
#define XDNS_DNSSEC_NAME_PART 2
/*
 * `dnssec` of an own part whose proof begins with the apex's NSEC3 (an NSEC3 zone's closest
 * provable encloser proof with the apex as the encloser: an opt-out delegation's DS NODATA,
 * an empty non-terminal's NODATA), which it leaves out: the apex's XDNS_KIND_APEX_PROOF_DO
 * body (the SOA, the apex's NSEC3, their RRSIGs) is written before it, the same way.
 */
#define XDNS_DNSSEC_PROOF_PART 3
#define XDNS_PRE_FIXUPS 8

/*
 * An answer record: the header fields, then for class S the body bytes and, at the next even
 * offset (XDNS_FIX_AT), the offsets of its first XDNS_MAX_FIXUPS pointers. The answer table
 * (xdns_vals) stores only the record's bytes in use, packed; a value of `xdns_answers` is the
 * whole struct (and the spill slot it is copied to). A class M answer in the answer table has
 * its bytes and fixups inline the same way (body_ver XDNS_BODY_INLINE, struct xdns_answer_m;
 * fixups at XDNS_FIX_AT_M); elsewhere (xdns_answers) classes M and L keep bytes and fixups in
 * `xdns_bodies_{m,l}` (the record is the header alone), and so does class L in the table;
 * class USERSPACE has none in the kernel.
 */
struct xdns_answer_s {
	struct xdns_answer ans;
	__u8 data[XDNS_CLASS_S_LEN + 2 * XDNS_MAX_FIXUPS];
};
/* Offset in data[] of a class S record's fixups: after its bytes, even. */
#define XDNS_FIX_AT(len) (((__u32)(len) + 1) & 0xfe)
/* The same for an inline class M record (the kernel refuses one past XDNS_CLASS_M_LEN). */
#define XDNS_FIX_AT_M(len) (((__u32)(len) + 1) & 0x3fe)
/* The longest record: an inline class M answer of the answer table (only there). */
struct xdns_answer_m {
	struct xdns_answer ans;
	__u8 data[XDNS_CLASS_M_LEN + 2 * XDNS_MAX_FIXUPS];
};
/*
 * The answer table's values (xdns_vals): pages of XDNS_PAGE bytes, each followed by
 * XDNS_PAGE_SLACK bytes so that a record starting anywhere in the page fits whole (the
 * largest read from a record start: an inline class M record's, the header, fixups at
 * XDNS_FIX_AT_M(len) <= XDNS_CLASS_M_LEN bytes into data[], 32 of them). A record's address is its byte offset in the table / 4 (records start
 * on four-byte boundaries): page (address >> (XDNS_PAGE_SHIFT - 2)), offset ((address << 2)
 * & (XDNS_PAGE - 1)). The spill slots follow the generation's pages in its page array,
 * XDNS_SPILL_SLOT bytes per CPU. An address as the program passes it on (xdns_val, the memo's
 * v) carries the generation's parity in bit 30 (XDNS_VAL_HALF; bit 31 stays clear: the memo
 * probe returns it as a non-negative int).
 */
#define XDNS_VAL_HALF 0x40000000u
#define XDNS_VAL_ADDR 0x3fffffffu
#define XDNS_PAGE_SHIFT 15
#define XDNS_PAGE (1u << XDNS_PAGE_SHIFT)
#define XDNS_PAGE_SLACK 640
#define XDNS_SPILL_SLOT 256
struct xdns_val_page {
	__u8 b[XDNS_PAGE + XDNS_PAGE_SLACK];
};
_Static_assert(sizeof(struct xdns_answer) + 254 + 2 * XDNS_MAX_FIXUPS <= XDNS_PAGE_SLACK, "a record fits in a page's slack");
_Static_assert(sizeof(struct xdns_answer_m) <= XDNS_PAGE_SLACK &&
	       sizeof(struct xdns_answer) + XDNS_CLASS_M_LEN + 2 * XDNS_MAX_FIXUPS <= XDNS_PAGE_SLACK,
	       "an inline class M record fits in a page's slack");
_Static_assert(sizeof(struct xdns_answer_s) <= XDNS_SPILL_SLOT, "a spilled answer fits its slot");
struct xdns_body_m {
	__u16 fixups[XDNS_MAX_FIXUPS];
	__u8 bytes[XDNS_CLASS_M_LEN];
};
struct xdns_body_l {
	__u16 fixups[XDNS_MAX_FIXUPS];
	__u8 bytes[XDNS_CLASS_L_LEN];
};

/* One listen address; family 0 = unused slot. Wildcard (0.0.0.0 / ::) matches any address. */
struct xdns_listen {
	__u8 addr[16];          /* IPv4 in the first 4 bytes, network order */
	__u16 port;             /* host order */
	__u8 family;            /* 4 or 6, 0 = empty */
	__u8 wildcard;          /* 1: any local address of this family */
};

/* Load-time configuration (rodata `xdns_cfg`), fixed for the program's lifetime. */
struct xdns_config {
	__u64 seed;             /* random per load: seeds xdns_name_hash() */
	__u16 edns_payload;     /* our EDNS UDP payload size (advertised and cap) */
	__u16 nlisten;          /* used entries of listen[] */
	__u8 resolver;          /* 1: cache stage on (names under no served zone, see cache.h) */
	__u8 guard;             /* 1: guard stage on (guard.h: tier, source lists); 0: one branch, no lookup */
	__u8 guard_features;    /* 1: the guard counts packets and bytes per source prefix (guard.h) */
	__u8 _pad;
	__u32 filter_mask;      /* words per half of xdns_filter, less one (a power of two less one) */
	__u32 table_buckets;    /* buckets per half of xdns_index, at least 1 (the kernel takes an empty
	                         * table as authoritative: there is always one) */
	__u32 val_pages;        /* pages (struct xdns_val_page) per half of xdns_vals, at least 1 */
	__u32 cache_mask;       /* buckets of xdns_cache_idx, less one (a power of two less one) */
	__u32 guard_filter_mask; /* words per half of xdns_guard_filter, less one (a power of two less one) */
	__u32 guard_rrl_mask;   /* sets of xdns_guard_rrl, less one (a power of two less one) */
	struct xdns_listen listen[XDNS_MAX_LISTEN];
};

/*
 * Resolver answer cache (bpf/cache.h). Keys are exact question names: the body was compiled
 * against the name itself (delta 0, no fixups). The resolver writes, the program reads.
 *
 * Set-associative, in array maps the resolver writes through mmap (no syscall per write), read
 * by the program with inlined array lookups: no call, no jhash, no bucket walk (the LRU hash
 * maps this replaced were slower, docs/perf/2026-11-22-resolver-cache-stage.md).
 * `xdns_cache_idx` holds cache_mask + 1 buckets of XDNS_CACHE_WAYS entries; the bucket of a key is
 * xdns_cache_pos(hash, qtype, do) & cache_mask (hash.h). An entry is the key when its hash is
 * the key's and its meta is XDNS_CACHE_META(qtype, do, name length); its `idx` names the value:
 * the size class (top two bits) and the slot in that class's array `xdns_cache_{s,m,l}`. The
 * value repeats the whole key (name, type, DO), so an entry read while the resolver rewrites
 * it (a stale `idx`, a torn entry) is a miss, never a wrong answer.
 */
#define XDNS_CACHE_MAX_RRS 64   /* records per cached body whose TTLs the kernel rewrites */
#define XDNS_CACHE_WAYS XDNS_TABLE_WAYS /* the same buckets (xdns_ways_match) */
#define XDNS_CACHE_META(qtype, do_bit, name_len) \
	((__u32)(qtype) | ((__u32)(do_bit) & 1) << 16 | ((__u32)(name_len) & 0xff) << 17 | 1u << 25)
#define XDNS_CACHE_SLOT 0x3fffffffu /* slot bits of an entry's idx; the size class is above */
struct xdns_cache_bucket {
	struct xdns_table_entry e[XDNS_CACHE_WAYS];
};

/* A cache key: the refresh events carry it, the resolver places entries by it. */
struct xdns_cache_key {
	__u64 hash;             /* xdns_name_hash() of the lowercased question name */
	__u16 qtype;
	__u8 do_bit;            /* the query's EDNS DO bit (0 without EDNS) */
	__u8 name_len;          /* wire length of the name */
	__u32 _pad;
};

/*
 * Common head of every cache value. The resolver rewrites values in place while the program
 * may read them, as a sequence lock: it sets `tag` to 0, writes the value, sets `tag_end`, then
 * `tag` to the same fresh number (crates/xdns-bpf/src/cache.rs). The program reads tag_end
 * first and tag last: an entry is whole only when both are equal and not 0. A deleted entry
 * has both 0 (the program may reach its slot through a cache hint, bpf/memo.h).
 */
struct xdns_cache_meta {
	__u64 tag;              /* unique per write, never 0 once written; equals the value's tag_end */
	__u64 stored_ns;        /* CLOCK_MONOTONIC time the TTLs in the body were exact */
	__u64 expires_ns;       /* never served at or after this time */
	__u64 prefetch_ns;      /* a hit at or after this time sends one refresh event */
	__u64 prefetch_sent;    /* 0 -> 1 (compare-and-swap) by the hit that sends the event */
	struct xdns_answer ans; /* flags = RCODE, counts, lengths, checksums; base_len = name_len */
	__u16 nttl;             /* entries of ttl_off[] */
	__u16 qtype;            /* the key's type ... */
	__u8 do_bit;            /* ... and DO bit (the name is name[], its length ans.base_len) */
	__u8 _pad[3];
	__u8 name[256];         /* the lowercased question name, zero padded */
	__u16 ttl_off[XDNS_CACHE_MAX_RRS]; /* body offset of each record's TTL, ascending */
};

/* Values of `xdns_cache_{s,m,l}`: the head and the body bytes of that size class. */
struct xdns_cache_s {
	struct xdns_cache_meta m;
	__u8 bytes[XDNS_CLASS_S_LEN];
	__u64 tag_end;          /* = m.tag */
};
struct xdns_cache_m {
	struct xdns_cache_meta m;
	__u8 bytes[XDNS_CLASS_M_LEN];
	__u64 tag_end;          /* = m.tag */
};
struct xdns_cache_l {
	struct xdns_cache_meta m;
	__u8 bytes[XDNS_CLASS_L_LEN];
	__u64 tag_end;          /* = m.tag */
};

/*
 * Reply memo (bpf/reply.h): per CPU, whole cache-hit replies kept for the exact query that got
 * them. A slot is keyed by the query's bytes after the DNS ID (flags, ARCOUNT, length and
 * every byte after the header, compared before use) and holds what the cache stage wrote
 * after the question (body with its TTLs aged, OPT), the header fields and the checksum. It
 * is served while the cache entry it came from is unchanged (its tag) and until the time
 * its TTLs would age by one more second, the entry's expiry or its prefetch time, whichever
 * comes first: byte for byte what the cache stage would send at that moment.
 */
#define XDNS_REPLY_SLOTS 1024           /* per CPU, a power of two: 512 sets of 2 ways */
#define XDNS_REPLY_MAX_Q 72             /* query bytes after the header kept (name, type, class, OPT) */
#define XDNS_REPLY_MAX_A 128            /* reply bytes after the question kept (body and OPT) */
struct xdns_reply_memo {
	__u64 hash;             /* memo key of the generation and the query (memo.h); 0: empty */
	__u64 until_ns;         /* served while the coarse clock reads less (cache.h, xdns_cache_now) */
	__u64 tag;              /* the cache entry's tag when kept: any later write changes it */
	__u64 sum;              /* the reply's DNS checksum, ID aside, unfolded (csum.h) */
	__u32 ref;              /* the cache entry (size class and slot, as xdns_cache_find) */
	__u32 seen;             /* low half of the key of a query seen once in this set: the
				 * latest in the first way, the one before in the second (reply.h) */
	__u16 qflags;           /* the query's header flags (host order) ... */
	__u16 rflags;           /* the reply's header flags, as they sit in the header */
	__u8 qar;               /* ... and its ARCOUNT (0 or 1) */
	__u8 qn;                /* query bytes after the header (q[]) */
	__u8 an;                /* reply bytes after the question (a[]) */
	__u8 body_at;           /* DNS offset of the end of the question (where a[] goes) */
	__u64 counts;           /* the reply's QDCOUNT..ARCOUNT as they sit in the header */
	__u8 q[XDNS_REPLY_MAX_Q]; /* the query after the header, zero padded */
	__u8 a[XDNS_REPLY_MAX_A]; /* the reply after the question */
};
_Static_assert(sizeof(struct xdns_reply_memo) == 256, "a reply memo slot is four cache lines");

/* Record of `xdns_cache_events` (ring buffer): refresh this key before it expires. */
struct xdns_cache_event {
	__u8 name[256];         /* lowercased question name, zero padded */
	__u16 qtype;
	__u8 do_bit;
	__u8 name_len;
	__u32 _pad;
};

/* Key of `xdns_allow` (LPM trie): the family byte first, so IPv4 and IPv6 never overlap. */
struct xdns_allow_key {
	__u32 prefixlen;        /* 8 (the family byte) + the address prefix length */
	__u8 family;            /* 4 or 6 */
	__u8 addr[16];          /* IPv4 in the first 4 bytes */
	__u8 _pad[3];
};

/*
 * The allow list as a short table (`xdns_allow_inline`), checked by a few compares instead of
 * the trie's lookup when it has at most XDNS_ALLOW_INLINE prefixes.
 */
#define XDNS_ALLOW_INLINE 8

/* One prefix: the 16 address bytes of `xdns_allow_key.addr` read as two native-endian u64. */
struct xdns_allow_prefix {
	__u64 addr[2];          /* the prefix, already masked */
	__u64 mask[2];          /* prefix-length mask over the same bytes */
	__u8 family;            /* 4 or 6 */
	__u8 _pad[7];
};

/* Value of `xdns_allow_inline`: slot 0 holds only the active slot number in `n`. */
struct xdns_allow_table {
	__u32 n;                /* entries of p[]; > XDNS_ALLOW_INLINE: use the `xdns_allow` trie */
	__u32 _pad;
	struct xdns_allow_prefix p[XDNS_ALLOW_INLINE];
};

/*
 * Guard stage (bpf/guard.h, issue 25). Every UDP packet to a listen address (what the parse
 * stage lets through, queries and responses alike) meets it before the DNS header is read.
 *
 * Source lists: the blocklist and the allowlist merged by userspace into one set of prefixes
 * whose longest match decides (crates/xdns-bpf/src/guard.rs): a block prefix under an allow
 * prefix is stored as allow, and an allow prefix is stored only where it lies under a block
 * prefix, so allowlisted sources are never dropped and an allowlist costs no probe where it
 * overlaps nothing; while the kernel's RRL is on, every allow prefix is stored, and its match
 * exempts the packet's answer from RRL (xdns_guard_scratch.src_allowed, rrl.h). Per family, the set is held in one of two structures, chosen by userspace
 * for each list generation (docs/perf/2026-11-27-guard-lists.md has the measurements):
 *   XDNS_GUARD_HASH  hash map `xdns_guard_hash`, one exact lookup per prefix length in use,
 *                    longest first (at most XDNS_GUARD_LENS lengths per family), each
 *                    skipped when its bit in the presence filter `xdns_guard_filter` is clear
 *                    (hash.h, xdns_guard_pos: one inlined array read instead of a hash-map
 *                    call for a source listed under no prefix of that length);
 *   XDNS_GUARD_LPM   LPM trie `xdns_guard_lpm`, one lookup (lists with more lengths).
 * Keys carry the list generation's parity: userspace writes generation N+1 whole, then its
 * `lists[]` entry of the control value, flips its `gen`, waits for every program run that may
 * have read N to end (an RCU grace period), and deletes N.
 */
#define XDNS_GUARD_LENS 8       /* prefix lengths probed by hash, per family */
#define XDNS_GUARD_NONE 0       /* nothing listed for this family */
#define XDNS_GUARD_HASH 1
#define XDNS_GUARD_LPM 2
#define XDNS_GUARD_BLOCK 1      /* xdns_guard_entry.action: drop (XDNS_DROP_BLOCKED) */
#define XDNS_GUARD_ALLOW 2      /* ... go on, never dropped (a name entry: an exception that
                                 * ends the suffix walk, see xdns_guard_name_key) */

/* Key of `xdns_guard_hash`: a prefix, its address as the two native-endian words of
 * xdns_allow_prefix.addr (masked), with its length, family and generation parity. */
struct xdns_guard_key {
	__u64 addr[2];
	__u8 len;               /* prefix length */
	__u8 family;            /* 4 or 6 */
	__u8 gen;               /* list generation parity (xdns_guard_ctl.gen & 1) */
	__u8 _pad[5];
};

/* Key of `xdns_guard_lpm`: the parity and the family bytes first, then the address. */
struct xdns_guard_lpm_key {
	__u32 prefixlen;        /* 16 + the address prefix length */
	__u8 gen;               /* list generation parity */
	__u8 family;            /* 4 or 6 */
	__u8 addr[16];          /* IPv4 in the first 4 bytes */
	__u8 _pad[2];
};

/* Value of both: what a source under this prefix gets, and what it cost. */
struct xdns_guard_entry {
	__u32 action;           /* XDNS_GUARD_BLOCK or XDNS_GUARD_ALLOW */
	__u32 _pad;
	__u64 drops;            /* packets dropped by this entry; a plain increment from every CPU:
	                         * approximate when CPUs drop for one entry at once (the exact
	                         * total is the verdict counter) */
};

/* One prefix length in use: its masks over the two address words. */
struct xdns_guard_len {
	__u64 mask[2];
	__u8 len;
	__u8 _pad[7];
};

/* How to look each family up in one list generation (xdns_guard_ctl.lists[parity]). */
struct xdns_guard_list {
	__u8 mode4;             /* XDNS_GUARD_NONE, _HASH or _LPM */
	__u8 mode6;
	__u8 n4;                /* entries of len4[] (XDNS_GUARD_HASH) */
	__u8 n6;
	__u32 _pad;
	struct xdns_guard_len len4[XDNS_GUARD_LENS]; /* longest first */
	struct xdns_guard_len len6[XDNS_GUARD_LENS];
};

/*
 * Name blocks (guard.h, xdns_guard_names): a query whose name is an exact entry, or lies
 * strictly under a suffix entry ("*.example.com"), is dropped. Keys are the name hash of
 * hash.h (the hash the lookup gives every suffix), the entry's kind, its wire length (a second
 * guard against collisions) and the name list generation's parity; values are
 * struct xdns_guard_entry (action XDNS_GUARD_BLOCK). Generations flip as the source lists'.
 * An entry with action XDNS_GUARD_ALLOW is an exception: the walk (deepest suffix first)
 * stops there and the query goes on; the detector's water-torture block of a suffix is a
 * suffix entry that blocks plus, for each label known under it, an exact and a suffix
 * exception.
 */
#define XDNS_GUARD_NAME_EXACT 1
#define XDNS_GUARD_NAME_SUFFIX 2
struct xdns_guard_name_key {
	__u64 hash;             /* xdns_name_hash() of the lowercased wire name (the suffix's, for a suffix entry) */
	__u8 kind;              /* XDNS_GUARD_NAME_EXACT or _SUFFIX */
	__u8 gen;               /* name list generation parity (xdns_guard_ctl.names & 1) */
	__u8 len;               /* wire length of the name (of the suffix) */
	__u8 _pad[5];
};

/*
 * The modelled hardware tier: a table of K prefixes checked before the lists, a model of a
 * NIC's n-tuple filter table for hosts without one (never a real NIC's). Prefixes as
 * xdns_allow_prefix (family 0 = free slot); two tables in the control value, userspace writes
 * the inactive one, then flips xdns_guard_ctl.tier.
 */
#define XDNS_GUARD_TIER_SLOTS 16
struct xdns_guard_tier {
	__u32 n;                /* slots to compare (highest used slot + 1) */
	__u32 _pad;
	struct xdns_allow_prefix p[XDNS_GUARD_TIER_SLOTS];
};

/*
 * RRL and server cookies on kernel answers (rrl.h, issue 25): the part of the control value
 * the answer stages read before they write an answer (authoritative and resolver cache
 * answers alike). Written by the daemon at start, SIGHUP and cookie rotation; each field is
 * read once per answer, and a change of parameters needs no staging (an answer limited by the
 * old or the new rate is as right as the other).
 *
 * RRL: a token bucket per account (struct xdns_rrl_key: client prefix, response class, the
 * answer's identity) in `xdns_guard_rrl`, the semantics of xdns_guard::rrl (Knot's mod-rrl):
 * `rate` tokens a second, at most one second's worth, one per answer; without a token the
 * answer is limited: dropped (XDNS_DROP_RRL), every `slip`-th sent as header and question
 * with TC=1 (XDNS_ANSWERED_SLIP). Cookies (RFC 7873, RFC 9018 version 1): a query with a
 * COOKIE option whose 16-byte server cookie verifies under `secret[0]` (or `secret[1]` while
 * `cookie_prev`) and is at most an hour old and five minutes ahead passes to userspace
 * (XDNS_PASS_COOKIE) before any RRL; any other COOKIE option is limited like an answer and,
 * within the rate, passed (XDNS_PASS_COOKIE_NEW): userspace answers with a server cookie.
 */
#define XDNS_RRL_POSITIVE 1     /* classes, as xdns_guard::rrl::ResponseClass */
#define XDNS_RRL_NXDOMAIN 2
#define XDNS_RRL_NODATA 3
#define XDNS_RRL_REFERRAL 4
#define XDNS_RRL_ERROR 5
#define XDNS_RRL_WILDCARD 6     /* (not told apart by the kernel: a wildcard's answers share its value) */
#define XDNS_RRL_FROM_ZONE 0    /* xdns_rrl_key.src: the identity is a zone answer's value index */
#define XDNS_RRL_FROM_CACHE 1   /* ... a resolver cache entry (size class << 30 | slot) */
struct xdns_guard_rrl {
	__u32 rate;             /* answers a second per account; 0: no RRL in the kernel */
	__u32 slip;             /* every slip-th limited answer is sent truncated; 0: never */
	__u64 mask4;            /* the IPv4 client prefix as a mask over the address word */
	__u64 mask6[2];         /* the IPv6 client prefix over the two address words */
	__u32 cookies;          /* 1: COOKIE options are checked here (cookie-bearing queries pass) */
	__u32 cookie_prev;      /* 1: secret[1], the previous secret, verifies too */
	__s64 clock_off;        /* Unix time less the monotonic clock (rrl.h reads the coarse one), in ns (the daemon refreshes it) */
	__u64 secret[2][2];     /* SipHash-2-4 keys: the 16 secret bytes as two little-endian words */
};

/*
 * One RRL account: (client prefix, class, answer). Not stored: its seeded 64-bit hash, the
 * tag (xdns_rrl_tag, rrl.h), names it and places it: `xdns_guard_rrl` is a set-associative
 * table in an array map, guard_rrl_mask + 1 sets of XDNS_RRL_WAYS ways; an account lives in
 * set (tag >> 32) & guard_rrl_mask, in whichever way holds its tag. A new account takes an
 * empty way or else the way updated longest ago (its bucket is the oldest: one idle for a
 * second is full, so evicting it loses nothing but its slip count).
 */
struct xdns_rrl_key {
	__u64 addr[2];          /* the client's prefix (masked address words) */
	__u32 ident;            /* the answer: a zone answer's value index (whose body is the qname's,
	                         * the apex's NXDOMAIN, the wildcard's, the cut's referral), or a cache entry */
	__u8 family;            /* 4 or 6 */
	__u8 class;             /* XDNS_RRL_* */
	__u8 src;               /* XDNS_RRL_FROM_* */
	__u8 _pad;
};
/* A way of a set: one account's bucket, updated without a lock (approximate only when two
 * CPUs answer one account, or take one way, at the same instant). */
struct xdns_rrl_account {
	__u64 tag;              /* the account's tag (never 0); 0: an empty way */
	__u64 stamp;            /* ns (the coarse clock) of the last update */
	__s64 balance;          /* 10^-9 answers (rrl.h: ns since `stamp` times the rate) */
	__u32 limited;          /* limited answers since the account was made (the slip pattern) */
	__u32 _pad;
};
#define XDNS_RRL_WAYS 4
/* Value of `xdns_guard_rrl`: one set (two cache lines). */
struct xdns_rrl_set {
	struct xdns_rrl_account way[XDNS_RRL_WAYS];
};

/*
 * A server cookie the kernel verified (rrl.h, xdns_cookie_echo), kept per CPU in
 * `xdns_guard_cookies` at the slot its hash's low bits name: a client sends the same cookie
 * with every query until it refreshes it, so the next query with those 24 bytes from that
 * address under that secret needs no SipHash. Everything the MAC covers is compared (and the
 * secret it was made with): a slot answers only for exactly what was verified; the stamp's
 * age is checked on every query. XDNS_COOKIE_SLOTS slots a CPU (a power of two).
 */
#define XDNS_COOKIE_SLOTS 1024
struct xdns_cookie_slot {
	__u64 cookie[3];        /* client cookie, version | reserved | stamp, hash: as they lay */
	__u64 addr[2];          /* the client's address words (IPv4: addr[0], addr[1] = 0) */
	__u64 secret[2];        /* the secret it verified under */
	__u64 family;           /* 4 or 6; 0: an empty slot */
};

/*
 * The one value of `xdns_guard_ctl` (an mmapable array): everything the stage reads before its
 * lookups, in one inlined array read. Userspace writes the halves no run reads (the staged
 * list, the inactive tier table) through its mapping, then stores the selector (a 32-bit
 * aligned store, which a reader sees old or new, never torn).
 */
struct xdns_guard_ctl {
	__u32 gen;              /* active source list generation (0: no list) */
	__u32 interval;         /* feature interval being counted (starts at 1) */
	__u32 tier;             /* active tier table: 1 (tiers[0]) or 2 (tiers[1]); 0: the tier is empty */
	__u32 names;            /* active name list generation (0: no name list) */
	/* RRL and cookies on kernel answers (rrl.h): beside the selectors, so that an allowed
	 * answer reads one cache line of this value (docs/perf/2026-11-29-guard-floor.md) */
	struct xdns_guard_rrl rrl;
	struct xdns_guard_list lists[2];   /* by source list generation parity */
	struct xdns_guard_tier tiers[2];
};

/*
 * Features for detection (`xdns_guard_feat`, per-CPU LRU hash, with xdns_cfg.guard_features):
 * packets and bytes per source prefix (/24 for IPv4, /56 for IPv6) in two interval slots.
 * A packet counts into slot interval & 1, first resetting a slot that still holds an older
 * interval's counts; userspace flips the interval, waits for an RCU grace period, then reads
 * the other slot, which no program writes any more (bpf/README.md, "Consistent snapshots").
 */
#define XDNS_GUARD_FEAT_V4 24
#define XDNS_GUARD_FEAT_V6 56
struct xdns_guard_feat_key {
	__u64 addr;             /* the address's first 8 bytes as a native-endian word, masked to the prefix */
	__u8 family;            /* 4 or 6 */
	__u8 _pad[7];
};
struct xdns_guard_slot {
	__u32 interval;         /* which interval these counts are of */
	__u32 any;              /* source features only: queries of type ANY (the name check,
	                         * guard.h; amplification) among `packets`; 0 in the other maps */
	__u64 packets;
	__u64 bytes;            /* IP length */
};
struct xdns_guard_feat {
	struct xdns_guard_slot slot[2];
};

/*
 * Queries per qname suffix (`xdns_guard_qfeat`, per-CPU LRU hash, with
 * xdns_cfg.guard_features): the parent of each queried name (the name less its first label;
 * never the root), keyed by its suffix hash (hash.h, the lookup's) and wire length, in two
 * interval slots as the source features (`packets` counts queries, `bytes` their name
 * bytes). Userspace maps a hash back to a name it knows (its zones, xdns_bpf::guard::suffix_hash).
 */
#define XDNS_GUARD_QFEAT_PARENT 0 /* key kind: a parent suffix (queries under it) */
#define XDNS_GUARD_QFEAT_NAME 1   /* key kind: a whole queried name; its slots' `bytes` hold
                                   * the parent's hash instead (the water-torture detector
                                   * counts distinct and unknown names under a suffix) */
struct xdns_guard_qfeat_key {
	__u64 hash;             /* xdns_name_hash() of the lowercased parent (or whole) name */
	__u32 len;              /* its wire length */
	__u32 kind;             /* XDNS_GUARD_QFEAT_PARENT or _NAME */
};

/*
 * Answer features (rrl.h, with xdns_cfg.guard_features), for the kernel's own answers only
 * (userspace counts its own): `xdns_guard_rfeat`, keyed as `xdns_guard_feat` by the client's
 * /24 or /56, counts answers sent (`packets`, slips included) and their IP bytes (`bytes`);
 * `xdns_guard_nxfeat`, keyed as `xdns_guard_qfeat` by the queried name's parent, counts
 * NXDOMAIN answers (`packets`) and their IP bytes. Same two interval slots, same reading rule.
 */

/*
 * A slot of RRL's per-CPU memo (`xdns_guard_rrl_memo`, rrl.h, xdns_rrl_memo): an account this
 * CPU decided by the call, by its key as its tag hashes it (masked address words; answer,
 * family, class and source in one word: never 0, so an empty slot matches nothing), its tag,
 * the way of its set that held it and the rate then. A later answer with the same key pays
 * the same shared bucket inline, without the call. XDNS_RRL_MEMO_SLOTS slots a CPU (a power
 * of two), the slot a cheap hash of the key.
 */
#define XDNS_RRL_MEMO_SLOTS 256
struct xdns_rrl_memo {
	__u64 key[3];
	__u64 tag;
	__u32 way;
	__u32 rate;
};

/* The guard stage's scratch and counters (in struct xdns_scratch). */
struct xdns_guard_scratch {
	/* what every answer with the guard on touches (guard.h, rrl.h), together in the first
	 * cache line (docs/perf/2026-11-29-guard-floor.md): */
	__u32 src_allowed;      /* this packet's source matched an allow prefix (guard.h; the gate,
	                         * rrl.h, then never limits it: allowlisted, never rate limited) */
	__u32 echo_len;         /* this answer's echoed COOKIE option's length (28; 0: none) */
	__u32 gate_class;       /* the answer's RRL class (XDNS_RRL_*) */
	__u32 echo_sum;         /* the echoed option's folded sum, as at an even offset */
	/* the coarse clock (CLOCK_MONOTONIC_COARSE) as of tick clock_jiffies (rrl.h, xdns_rrl_now) */
	__u64 clock_ns;
	__u64 clock_jiffies;
	/* this answer's COOKIE option to echo (rrl.h, xdns_cookie_echo): client and server
	 * cookie as they lay in the query (read before the body overwrites them) */
	__u64 echo[3];
	/* this answer's RRL account and its memo slot (rrl.h, xdns_rrl_memo), kept here across
	 * helper calls rather than in the entry's frame: the key's three words, the rate it is
	 * decided at, the slot (`xdns_guard_rrl_memo`'s key), and the slot's tag and way */
	__u64 rrl_key[3];
	__u32 rrl_rate;
	__u32 rrl_memo_at;
	__u64 rrl_memo_tag;
	__u32 rrl_memo_way;
	__u32 _rrl_pad;
	__u64 rrl_memo_hits;    /* answers whose account the memo found (paid inline, no call) */
	__u32 name_par;         /* the name check: the list generation's parity ... */
	__u32 name_hit;         /* ... and 1 once a suffix or the name matched */
	__u64 allowed;          /* packets whose longest match was an allow prefix */
	__u64 tier_hits[XDNS_GUARD_TIER_SLOTS]; /* packets dropped by each tier slot */
	__u64 feat_full;        /* packets not counted: the feature map refused a new prefix */
	__u64 qfeat_full;       /* queries not counted: the suffix feature map refused a new suffix */
	/* RRL, cookies and answer features (rrl.h) */
	__u64 rrl_full;         /* new RRL accounts that evicted one used in the last second (the
	                         * table is small for the traffic: that account restarts full) */
	__u64 cookie_bad;       /* COOKIE options with a server cookie that did not verify (or malformed) */
	__u64 rfeat_full;       /* answers not counted: the answer feature map refused a new prefix */
	__u64 nxfeat_full;      /* NXDOMAIN answers not counted: the suffix map refused a new suffix */
	__u64 cookie_echoed;    /* kernel answers that echoed a fresh valid server cookie (rrl.h) */
	/* the cookie check's clock in seconds (rrl.h, xdns_cookie_echo), worked out once per
	 * tick: `sec` for the coarse clock's `sec_ns` under the clock offset `sec_off` */
	__u64 sec_ns;
	__s64 sec_off;
	__u32 sec;
	__u32 _sec_pad;
	struct xdns_guard_feat_key src_fkey; /* the key this packet's source features were
	                         * counted under (guard.h, with features): the name check counts an
	                         * ANY query into the same entry */
	__u64 nx_hash;          /* this query's parent suffix (the name check, with features) ... */
	__u32 nx_len;           /* ... its wire length (0: none) */
	__u32 _nx_pad;
	/*
	 * The gate's inputs (rrl.h), written by the answer stages before they call it: through
	 * the scratch rather than pointers to their stack, which a global function's call
	 * would leave unknown to the verifier in the caller's later states.
	 */
	__u32 gate_flags;       /* the reply's header flags (host order) */
	__u32 gate_len;         /* the reply's IP length (answer features) */
	__u32 gate_l3;          /* struct xdns_pkt of the query: l3_off, */
	__u32 gate_ip_hlen;     /* ip_hlen, */
	__u32 gate_dns_off;     /* dns_off, */
	__u32 gate_ipv6;        /* ipv6, */
	__u32 gate_qlen;        /* and of struct xdns_query: qlen, */
	__u32 gate_id;          /* id (network order), */
	__u32 gate_cookie;      /* cookie_at << 16 | cookie_len, */
	__u64 gate_sum;         /* and the question's unfolded checksum (a slip's) */
	/* the gate's keys and new values, here rather than on its stack (the program's stack
	 * and the gate's frame share 512 bytes) */
	struct xdns_guard_feat gate_feat;
	struct xdns_guard_feat_key gate_fkey;
	struct xdns_guard_qfeat_key gate_qkey;
};

/*
 * Telemetry (stage 5, bpf/telemetry.h): which answers are timed, their histograms and the
 * in-band probe option. The bucket math is shared with userspace (xdns_bpf::telemetry):
 * a value v (ns) below 2^SUB_BITS is its own bucket; above, with e = floor(log2 v), bucket
 * (e - SUB_BITS + 1) * 2^SUB_BITS + (v >> (e - SUB_BITS)) - 2^SUB_BITS: 64 linear steps per
 * power of two (a bucket is at most 1/64 of its lower bound wide), the last bucket open.
 */
enum xdns_tel_const {
	XDNS_TEL_SUB_BITS = 6,          /* linear buckets per power of two: 2^6 */
	XDNS_TEL_BUCKETS = 2048,        /* buckets per path: up to 2^37 ns (137 s), the last open */
	XDNS_TEL_RULES = 8,             /* rules per set */
	XDNS_TEL_SFX_MAX = 64,          /* longest qname suffix of a rule (wire bytes) */
	XDNS_TEL_OPTION = 65050,        /* EDNS option code of in-band probes (local use range) */
	XDNS_TEL_PROBE_LEN = 16,        /* its data in answers: receive ns, transmit ns (u64 BE) */
	XDNS_TEL_DQ_MAX = 512,          /* dnstap from XDP: longest query message kept (bytes) */
	XDNS_TEL_DR_MAX = 2048,         /* ... and longest answer; longer: no event, counted */
	XDNS_TEL_SUM_BITS = 12,         /* a summary bitmap is indexed by 12 bits of an address */
	XDNS_TEL_SUM_WORDS = 64,        /* ... so it is 2^12 bits: 64 words */
};

/* Paths a rule selects and histograms are kept for (bit i of xdns_tel_rule.paths). */
enum xdns_tel_path {
	XDNS_TEL_KERNEL_AUTH = 0,       /* answered by XDP from the zones (verdict answered) */
	XDNS_TEL_KERNEL_CACHE = 1,      /* answered by XDP from the resolver's cache (cache_answered) */
	XDNS_TEL_USER_AUTH = 2,         /* answered by the userspace UDP path from the zones */
	XDNS_TEL_RESOLVER_HIT = 3,      /* answered by userspace from the resolver's caches */
	XDNS_TEL_RESOLVER_MISS = 4,     /* answered by userspace after resolving */
	XDNS_TEL_PATHS = 5,
};

/* One selection rule: every field given must match; the first matching rule decides. */
struct xdns_tel_rule {
	__u8 src[16];           /* client prefix (IPv4 in the first 4 bytes) */
	__u8 dst[16];           /* server address prefix */
	__u8 src_len;           /* prefix lengths in bits; 0: any */
	__u8 dst_len;
	__u8 family;            /* 4 or 6 when a prefix is given; 0: any */
	__u8 paths;             /* bit per enum xdns_tel_path; 0: every path */
	__u16 qtype;            /* 0: any */
	__u8 sfx_len;           /* wire length of sfx; 0: any name */
	__u8 _pad;
	__u32 sample;           /* one in `sample` of the matching answers (0 and 1: every one) */
	__u32 _pad2;
	__u8 sfx[XDNS_TEL_SFX_MAX]; /* qname suffix, wire form, lowercase, root label included */
};

/*
 * The summary of a rule set (xdns_tel_set.sum), compiled by userspace from the set's rules and
 * written with them (xdns_bpf::telemetry::summarize): a necessary condition for "some rule of
 * the set may select this packet on a kernel path by its addresses", checked inline by the
 * begin half before the call to xdns_tel_by_addr (telemetry.h, xdns_tel_pre). Per family
 * (0: IPv4, 1: IPv6) and side (0: client, 1: server), at m = family * 2 + side, a bitmap of
 * 2^XDNS_TEL_SUM_BITS bits: the address's first 64 bits as a big-endian number (IPv4's 32 in the top half) shifted
 * right by `shift`, masked to 12 bits, is the bit. Clear: no rule of the set allows that
 * address on that side, so the packet is not selected (no call, no clock). Set: maybe (a bit
 * shared by other addresses is a false positive, never a false negative: the call decides).
 * Userspace ends the window at the set's shortest prefix on that side, at least 12 bits in:
 * a prefix at least that long sets one bit, a shorter one (under 12) every bit it covers, a
 * rule without a prefix there all of them; no rule of the family: none.
 */
struct xdns_tel_sum {
	__u8 shift[4];          /* [family * 2 + side]: 64 - the window's end, in bits of the address */
	__u32 any;              /* 1: every bit of the four is set (a rule without prefixes): no check */
	__u64 bits[4 * XDNS_TEL_SUM_WORDS]; /* [family * 2 + side]: the bitmaps, one after the other
					      * (one dimension: the generated Rust type derives Default) */
};
_Static_assert(sizeof(struct xdns_tel_sum) == 8 + 4 * 8 * XDNS_TEL_SUM_WORDS && XDNS_TEL_SUM_WORDS * 64 == 1 << XDNS_TEL_SUM_BITS,
	       "the summary's layout (its Rust twin asserts the same)");

struct xdns_tel_set {
	__u32 nrules;
	__u32 dnstap;           /* 1: the answers this set selects go to dnstap too (xdns_tel_events) */
	struct xdns_tel_rule rules[XDNS_TEL_RULES];
	struct xdns_tel_sum sum; /* the rules' addresses, summed up for the begin half */
};
_Static_assert(__builtin_offsetof(struct xdns_tel_set, sum) == 904 && sizeof(struct xdns_tel_set) == 904 + 2056,
	       "a rule set with its summary (its Rust twin asserts the same)");
/* The whole value stays small enough for the kernel to kmalloc it (an array map's area is
 * kmalloc'ed up to 32 KiB, vmalloc'ed above), in the direct map's large pages: a vmalloc'ed
 * value (the first design's 16-bit windows) slowed every timed answer, its small pages missing
 * the TLB (docs/perf/2026-11-30-telemetry-prefilter.md). The assert keeps it in 8 KiB. */
_Static_assert(2 * (904 + 2056) + 8 <= 8192, "xdns_tel_ctl fits an 8 KiB kmalloc");

/*
 * Value of xdns_tel_ctl[0]. `active` last: userspace writes the idle set (its summary inside
 * it) with `active` unchanged, then the same value with `active` flipped (bytes rewritten
 * with themselves do not tear), so a packet reads one set and its summary, whole.
 */
struct xdns_tel_ctl {
	struct xdns_tel_set sets[2];
	__u32 active;           /* 0: telemetry off (no clock read); 1, 2: sets[active - 1] */
	__u32 _pad;
};

/* Value of xdns_tel_hist[path] (per CPU): kernel paths only (XDNS_TEL_KERNEL_*). */
struct xdns_tel_hist {
	__u64 count;            /* answers timed */
	__u64 sum_ns;           /* their server time, summed */
	__u64 probes;           /* answers that carried the probe option back */
	__u64 probe_bad;        /* probe option of another length than 0 or 16: answered without */
	__u64 probe_room;       /* the frame could not grow by the option: answered without */
	__u64 rx_ktime;         /* receive time from bpf_ktime_get_ns (not the NIC's) */
	__u64 dtap_events;      /* dnstap events written to xdns_tel_events */
	__u64 dtap_full;        /* ... not written: the ring was full (never waited for) */
	__u64 dtap_long;        /* ... not written: query or answer longer than kept (XDNS_TEL_DQ_MAX, _DR_MAX) */
	__u64 _pad;
	__u64 b[XDNS_TEL_BUCKETS];
};

/*
 * A dnstap event (a record of the ring buffer xdns_tel_events): a kernel answer the selection
 * table selected (its 1 in N included) while its set's `dnstap` is on, with its query as
 * received. The record is this header, then `qlen` bytes of the query's DNS message, then
 * `rlen` bytes of the answer's, as sent; userspace turns it into a dnstap query and response
 * pair (crates/xdns/src/dnstap/kernel.rs).
 */
struct xdns_tel_event {
	__u64 rx_ns;            /* receive time, CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u64 tx_ns;            /* transmit time, likewise, read just before the answer leaves */
	__u8 client[16];        /* the query's source address (IPv4: the first 4 bytes) */
	__u8 server[16];        /* its destination (ours) */
	__u16 client_port;      /* host byte order */
	__u16 server_port;
	__u8 family;            /* 4 or 6 */
	__u8 path;              /* enum xdns_tel_path: XDNS_TEL_KERNEL_AUTH or _CACHE */
	__u16 qlen;             /* query bytes after this header */
	__u16 rlen;             /* answer bytes after the query */
	__u16 vlan;             /* the frame's VLAN ID (0: untagged) */
	__u32 _pad;
};
_Static_assert(sizeof(struct xdns_tel_event) == 64, "a dnstap event's header is 64 bytes");

/* The record being built in scratch: the query is copied in by the begin half, the answer
 * and the header by the end half, then the first 64 + qlen + rlen bytes go to the ring. */
struct xdns_tel_rec {
	struct xdns_tel_event h;
	__u8 data[XDNS_TEL_DQ_MAX + XDNS_TEL_DR_MAX];
};

/* The telemetry stage's scratch (in struct xdns_scratch). */
struct xdns_tel_scratch {
	__u32 probe;            /* the query's probe option: 0 absent, else its data length + 1 */
	__u32 _pad;
	__u32 seen[XDNS_TEL_RULES]; /* answers each rule matched on this CPU (for sampling) */
	/* the end half's view of the answer leaving (telemetry.h) */
	__u8 client[16];
	__u8 server[16];
	__u64 label_starts[4];  /* bit i: a label of the question name starts at offset i */
	__u32 qlen;             /* wire length of the question name (0: not found) */
	__u32 qtype;
	__u32 family;           /* 4 or 6 */
	__u32 v;                /* the verdict, handed to the end half (a tail call) */
	__u64 t0;               /* the receive time, likewise */
	/* the selection, decided on the query (xdns_tel_select), used by the end half */
	__u32 slot;             /* telemetry.h XDNS_TEL_END (on to the end half), _DONE, _ASK */
	__u32 mask;             /* rules that select this query on any kernel path (bit per rule) */
	__u32 decided;          /* mask, client, server, qlen, qtype are this packet's */
	__u32 walked;           /* label_starts filled for this packet */
	__u32 set;              /* the set (1, 2) the begin half's address mask is of */
	__u32 dtap;             /* dnstap from XDP for this packet: XDNS_TEL_DTAP_* (telemetry.h) */
	struct xdns_tel_rec rec; /* the dnstap event being built */
};

/*
 * Per-CPU working memory of one packet (value of `xdns_scratch`): one sub-struct per stage
 * (bpf/xdns.bpf.c lists them), with the counters userspace reads (summed over CPUs). The
 * later stages read what an earlier one left (the walk's name and labels, the lookup's
 * answer index); the seen stage's ways share `memo` (key, lengths), and the cache stage's
 * TTL pass uses `answer`. The bpf_loop walks keep their state here, not on the stack:
 * values read back from map memory are unknown to the verifier, so each loop body is
 * verified once instead of once per distinct iteration state.
 */
struct xdns_walk_scratch {      /* fetch and walk (dns.h) */
	__u8 name[256];         /* the question name as sent (and the bytes after it), wire form */
	__u8 label_off[128];    /* offset of each length byte in name[], the root's last */
	__u64 lh[128];          /* hash of each label (hash.h), first label first */
	__u64 sum[2];           /* name words summed by the parity of their offset (dns.h) */
	__u32 avail;            /* name bytes copied into name[] */
	__u32 next;             /* offset of the next length octet */
	__u32 nlab;             /* labels, the root included (set with qlen once the root is read) */
	__u32 qlen;             /* wire length of the name (0: not a valid name) */
};

struct xdns_lookup_scratch {    /* the lookup (lookup.h): suffix hashes and encloser walk */
	__u64 sfx[128];         /* hash of the suffix with index+1 labels (index 0: the root) */
	__u32 nsfx;             /* entries of sfx[] */
	__u32 _pad0;
	__u32 gen;              /* generation read for this packet */
	__u32 floor;            /* label floor read for this packet (xdns_gen[1]) */
	__u32 ce_found;
	__u32 direct;           /* body kind: the walk stopped at a flagged suffix (lookup.h) */
	__u32 no_direct;        /* that guess failed: walk again looking nodes up */
	__u32 _pad2;
	__u64 ce_hash;
	__u32 ce_len;           /* wire length of the closest encloser */
	__u32 _pad;
	struct xdns_node ce;    /* the closest encloser's node */
};

struct xdns_answer_scratch {    /* the answer (answer.h): fixup pass; the cache's TTL pass too */
	__u32 n;                /* entries of fix[] to apply */
	__u32 at;               /* frame offset of the body */
	__u32 body_at;          /* DNS offset of the body (checksum parity) */
	__u32 blen;             /* body bytes sent */
	__u32 delta;            /* added to each pointer */
	__u32 err;
	__u32 from;             /* first pointer the walk shifts (the ones before were inlined) */
	__u32 done;             /* pointers shifted (csum.h, xdns_csum_grown) */
	__u32 odd;              /* ... of them at odd DNS offsets */
	__u32 _pad3;
};

/*
 * The apex part of a signed zone's DO=1 NODATA (XDNS_DNSSEC_NAME_PART, answer.h): copied
 * here from its class L body before the frame is touched, written before the name's part.
 */
struct xdns_prefix_scratch {
	__u16 len;              /* bytes; 0: no apex part for this packet */
	__u16 ns;               /* its records (authority) */
	__u16 csum;             /* folded sum of its bytes (as compiled, before the fixups) */
	__u16 nfix;             /* pointers to shift (<= XDNS_PRE_FIXUPS) */
	__u16 delta;            /* question length - apex length */
	__u16 _pad[3];
	__u64 sum;              /* what xdns_put_prefix wrote, summed at its parity */
	__u16 fix[XDNS_MAX_FIXUPS];
	__u8 bytes[XDNS_CLASS_L_LEN];
	struct xdns_answer_key key;     /* the apex part's key */
};

struct xdns_cache_scratch {     /* the cache stage (cache.h) */
	/* TTL pass (uses the answer's at, body_at, blen, err) */
	__u32 ttl_n;            /* entries of ttl[] */
	__u32 ttl_sub;          /* whole seconds since the entry was stored */
	__u64 ttl_even;         /* seconds taken off TTLs at even DNS offsets (csum.h) */
	__u64 ttl_odd;          /* ... at odd ones */
	/* name comparison */
	__u32 cmp_words;        /* 8-byte words of the name to compare */
	__u32 cmp_diff;         /* non-zero once a word differs */
	__u64 cmp_sum;          /* the compared name words as sent, summed (dns.h: as sum[0]) */
	/* the coarse clock, and the jiffies when it was read */
	__u64 clock_ns;
	__u64 clock_jiffies;
};

struct xdns_hint_scratch {      /* cache hints (memo.h), a resolver program's seen stage */
	__u32 ref;              /* the hinted entry (XDNS_HINT_NONE: none) */
	__u32 slot;             /* the hint's slot in xdns_memo */
};

struct xdns_memo_scratch {      /* the question memo (memo.h); its key and name for hints too */
	__u32 last_v;           /* xdns_vals address of the answer the lookup found (the spill slot's too) */
	__u32 last_table;       /* 1 when that answer came from the table (0: the hash map) */
	__u64 hash;             /* of this packet's question (0: not memoisable) */
	__u64 sum;              /* checksum of name, type and class (xdns_query.qsum after them) */
	__u32 qlen;             /* on a memo or hint hit: the name's length ... */
	__u32 nlab;             /* ... and label count (sum: its checksum) */
};

struct xdns_reply_scratch {     /* the reply memo (reply.h) */
	__u16 qflags;           /* this query's header flags ... */
	__u16 qar;              /* ... and ARCOUNT (the reply overwrites them) */
	__u32 ref;              /* the cache entry the stage answered from ... */
	__u64 tag;              /* ... its tag */
	__u64 until;            /* ... and until when the stage sends this same reply */
};

struct xdns_scratch {
	struct xdns_walk_scratch walk;
	struct xdns_lookup_scratch lookup;
	struct xdns_answer_scratch answer;
	struct xdns_cache_scratch cache;
	struct xdns_hint_scratch hint;
	struct xdns_memo_scratch memo;
	/* counters, on this CPU (userspace reads and sums them) */
	__u64 memo_hits;        /* questions answered through the memo (resolver: through a hint) */
	__u64 memo_kept;        /* questions written into it (resolver: hints written) */
	struct xdns_reply_scratch reply;
	__u64 reply_hits;       /* queries answered from the reply memo */
	__u64 reply_kept;       /* replies written into it */
	struct xdns_guard_scratch guard; /* the guard stage's counters (guard.h) */
	struct xdns_tel_scratch tel;    /* the telemetry stage (telemetry.h) */
	struct xdns_prefix_scratch pre; /* a DO=1 NODATA's apex part (answer.h) */
	/*
	 * Packets by enum xdns_verdict (bpf/stats.h). Here rather than in a map of their own:
	 * the program has this value in hand already, and a separate per-CPU array costs one
	 * more lookup and cache line per packet (docs/perf/2026-11-27-code-comment-figures.md).
	 */
	__u64 verdicts[XDNS_VERDICT_SLOTS];
};
_Static_assert(XDNS_VERDICT_MAX <= XDNS_VERDICT_SLOTS, "verdicts[] is indexed with a mask");

/*
 * ---- Kernel iteration (issue 32): bpf/kit.h, programs xdns_kit_out_xdp and xdns_kit_in_xdp ----
 *
 * A cache miss of the resolver program (pass_cache_miss, pass_cache_expired) is tail-called
 * into xdns_kit_out_xdp, which rewrites the client's packet into a query to a server of the
 * deepest zone cut the zone map knows for the question name, records the client's state in
 * xdns_kit_pending and sends it. The answer, to a port of the reserved range, is tail-called
 * from the response stage into xdns_kit_in_xdp, which checks it against the pending query
 * (or drops it, counted), follows a referral with glue, answers the client itself for a final
 * answer of the common shape, and hands every final response to the daemon (the ring buffer
 * xdns_kit_events, else its socket on that port). bpf/README.md, "Kernel iteration", is the
 * design.
 */
#define XDNS_KIT_ADDRS 4                /* server addresses per family kept per zone cut */
#define XDNS_KIT_SLOT_OUT 0             /* xdns_kit_prog: the miss side */
#define XDNS_KIT_SLOT_IN 1              /* xdns_kit_prog: the response side */

/* Load-time settings of kernel iteration (rodata `xdns_kit_cfg`). */
struct xdns_kit_config {
	__u8 on;                /* 1: misses are iterated (xdns_cfg.resolver must be 1) */
	__u8 _pad;
	__u16 port_lo;          /* reserved source ports, host order, inclusive */
	__u16 port_hi;
	__u16 edns_payload;     /* advertised in our queries */
};

/* Key of `xdns_kit_zones`: a zone cut, by the hash of its lowercased wire name (xdns_name_hash). */
struct xdns_kit_zone_key {
	__u64 hash;
};

/*
 * Value of `xdns_kit_zones`: a delegation the resolver learnt (or the root, from the hints):
 * its servers' addresses (glue or known addresses), the zone's name (bailiwick) and expiry.
 * Written by userspace (xdns_bpf::kit), read by xdns_kit_out_xdp.
 */
struct xdns_kit_zone {
	__u64 expires_ns;       /* CLOCK_MONOTONIC; the root: never (u64 max) */
	__u8 name_len;          /* wire length of name[] (checked against the suffix: a collision is no cut) */
	__u8 labels;            /* its labels, the root excluded */
	__u8 n4;                /* entries of a4[] */
	__u8 n6;                /* entries of a6[] */
	__u32 _pad;
	__u8 a4[XDNS_KIT_ADDRS][4];     /* IPv4 servers, network order */
	__u8 a6[XDNS_KIT_ADDRS][16];    /* IPv6 servers */
	__u8 name[256];         /* the zone's lowercased wire name, zero padded */
};

/* Key of `xdns_kit_pending`: a query the kernel sent, by (server, our port, ID). */
struct xdns_kit_pend_key {
	__u8 server[16];        /* IPv4 in the first 4 bytes (the rest 0) */
	__u16 port;             /* our source port, network order */
	__u16 id;               /* the ID sent, network order */
	__u8 family;            /* 4 or 6 */
	__u8 _pad[3];
};

/*
 * Value of `xdns_kit_pending`: the client's state, to answer it (userspace, on a handover or
 * a timeout) and the question sent, to check the response (the kernel and userspace).
 */
struct xdns_kit_pend {
	__u64 sent_ns;          /* bpf_ktime_get_ns() when sent (the daemon's timer) */
	__u8 client[16];        /* the client's address (IPv4 in the first 4 bytes) */
	__u8 local[16];         /* the address it asked (our source address for the query) */
	__u64 zone_hash;        /* the cut asked (xdns_kit_zones' key): bailiwick */
	__u16 cport;            /* the client's port, network order */
	__u16 cid;              /* the client's ID, network order */
	__u16 cflags;           /* the client's header flags, host order */
	__u16 qtype;            /* host order */
	__u16 payload;          /* the client's EDNS UDP payload size (0: no EDNS) */
	__u8 family;            /* 4 or 6 */
	__u8 do_bit;            /* the client's DO bit */
	__u8 qlen;              /* wire length of the name */
	__u8 zone_len;          /* wire length of the cut's name */
	__u8 hops;              /* queries sent for this client question (1 on the first) */
	__u8 cookie;            /* the client's COOKIE option's length (0: none) */
	__u16 lport;            /* the listen port the client asked, network order (the reply's source port) */
	__u8 _pad[2];
	__u8 cname[256];        /* the question name as the client sent it */
	__u8 qname[256];        /* the name as sent to the server, with its 0x20 case */
	/* the way the query came, for the kernel's own answer (xdns_kit_answer: MACs swapped) */
	__u32 ifindex;          /* the interface it came in on */
	__u8 cmac[6];           /* its Ethernet source: the client's MAC, or its router's */
	__u8 lmac[6];           /* its Ethernet destination: our MAC as the client addressed it */
	__u8 _pad2[4];
};
_Static_assert(sizeof(struct xdns_kit_pend) == 600, "no padding the compiler adds (userspace reads it as bytes)");

/* Why a miss was handed to userspace untouched (xdns_kit_scratch.handover[]). */
enum xdns_kit_handover {
	XDNS_KIT_HO_NO_WALK = 0,        /* the name came through a cache hint: no label hashes for the zone walk */
	XDNS_KIT_HO_NO_ZONE = 1,        /* no cut known, not even the root */
	XDNS_KIT_HO_FAMILY = 2,         /* the cut has no server of the client's address family */
	XDNS_KIT_HO_LAYOUT = 3,         /* VLAN tag, IPv4 options, an EDNS option: frames the rewrite does not take */
	XDNS_KIT_HO_PENDING_FULL = 4,   /* xdns_kit_pending refused the entry (full, or the key taken) */
	XDNS_KIT_HO_FIB = 5,            /* bpf_fib_lookup found no next hop (no route, no neighbour, not forwarded) */
	XDNS_KIT_HO_REWRITE = 6,        /* a helper refused to resize the frame (untouched until then) */
	XDNS_KIT_HO_MAX = 7,
};
#define XDNS_KIT_HO_SLOTS 8

#define XDNS_KIT_HOPS 8                 /* queries per client question the kernel sends; past it, userspace */
#define XDNS_KIT_RESP_MAX 1984          /* longest response the kernel parses (bytes of DNS message) */
#define XDNS_KIT_RESP_ROOM 2112         /* resp[]: offsets masked to 2047, eight words read past them */
#define XDNS_KIT_NAME_ROOM 328          /* a name (<= 255) masked to 255, eight words past its last label start */
#define XDNS_KIT_RECORDS 64             /* authority + additional records the kernel reads at most */
#define XDNS_KIT_NS 16                  /* NS names of a referral kept (their hashes) to match glue */

/* A referral being read by xdns_kit_in (its own parse state, in xdns_kit_scratch). */
struct xdns_kit_ref {
	__u64 ns_hash[XDNS_KIT_NS];     /* seeded hashes of the NS names (lowercased) */
	__u64 nbits[4];         /* label starts of nb[] (bit per offset) */
	__u64 qbits[4];         /* label starts of lq[] */
	__u32 pos;              /* offset of the next record in resp[] */
	__u32 len;              /* bytes of resp[] (the DNS message) */
	__u32 nscount;          /* authority records */
	__u32 total;            /* authority + additional records */
	__u32 n_ns;             /* ns_hash[] entries */
	__u32 cut_len;          /* wire length of the NS owner (the new cut), 0 until the first NS */
	__u32 ttl;              /* smallest TTL of the NS RRset */
	__u32 why;              /* how the parse ended (enum xdns_kit_ref_end) */
	__u32 qlen;             /* wire length of lq[] */
	__u32 zone_len;         /* wire length of the cut asked */
	/* the name reader's state (xdns_kit_name) */
	__u32 npos;             /* where the next label is read */
	__u32 nend;             /* where the name ends in the record (after its first pointer, or its root) */
	__u32 nlen;             /* bytes written to nb[] */
	__u32 jumps;            /* compression pointers followed */
	__u32 ndone;            /* 1: the name is read; 2: malformed */
	__u32 n4;               /* g4[] entries */
	__u32 n6;               /* g6[] entries */
	__u32 hoff;             /* the label hasher's next offset in lq[] (xdns_kit_label_hash) */
	__u32 hn;               /* labels of lq[] hashed */
	__u32 cut_labels;       /* labels of the new cut, the root excluded (0xff: not found) */
	__u8 g4[XDNS_KIT_ADDRS][4];     /* in-bailiwick glue of an NS name: A */
	__u8 g6[XDNS_KIT_ADDRS][16];    /* ... AAAA */
	__u8 loff[128];         /* offset in lq[] of each label (xdns_kit_label_hash), first label first */
};

/* How the referral parse ended (xdns_kit_ref.why). */
enum xdns_kit_ref_end {
	XDNS_KIT_REF_OK = 0,            /* every record read: a referral, if it has an NS RRset */
	XDNS_KIT_REF_BAD = 1,           /* malformed, a name over 255, a pointer forward or looping */
	XDNS_KIT_REF_NEGATIVE = 2,      /* an SOA in authority: a negative answer, not a referral */
	XDNS_KIT_REF_BAILIWICK = 3,     /* an NS owner not strictly below the cut asked and above the name */
	XDNS_KIT_REF_MIXED = 4,         /* NS records of more than one owner */
};

/*
 * A record of the ring buffer `xdns_kit_events`: a response the kernel checked (xdns_kit_in)
 * that is not a referral it follows, with the pending entry it answers, which the kernel
 * deleted (claimed) before submitting: userspace finishes the client's question with it,
 * as with a response read from a reserved port, without reading a socket or claiming.
 */
struct xdns_kit_event {
	struct xdns_kit_pend_key key;   /* the query answered: server, our port, ID */
	struct xdns_kit_pend pend;      /* its entry, as it was when claimed */
	__u32 len;              /* bytes of msg[] (the DNS message), 12 .. XDNS_KIT_RESP_MAX */
	__u32 flags;            /* XDNS_KIT_EV_ANSWERED: the kernel answered the client (userspace caches, never answers) */
	__u8 msg[XDNS_KIT_RESP_MAX];    /* the response as received */
};
_Static_assert(__builtin_offsetof(struct xdns_kit_event, msg) == sizeof(struct xdns_kit_pend_key) + sizeof(struct xdns_kit_pend) + 8,
	       "userspace reads the message right after the entry and its length (xdns_bpf::kit::KitEvent)");

#define XDNS_KIT_EV_ANSWERED 1         /* xdns_kit_event.flags: the client has its reply from the kernel */

/*
 * Run-time settings of the kernel's own answers (array `xdns_kit_ctl`, key 0), written by the
 * daemon when kernel iteration starts and when [resolver] settings are reloaded: the TTL cap
 * the resolver's cache applies (its `max_ttl`). `answer` 0 (never written): no kernel answers.
 */
struct xdns_kit_ctl {
	__u32 answer;           /* 1: final answers of the common shape are answered by the kernel */
	__u32 max_ttl;          /* [resolver] max_ttl: every TTL of the answer capped to it */
	__u32 negative;         /* 1: negative answers of the common shape too (needs answer) */
	__u32 max_neg_ttl;      /* [resolver] max_negative_ttl: the SOA's negative TTL capped to it */
};

/*
 * Key of `xdns_kit_hops`: a server the kernel may send a query to, by address. Written by
 * userspace (xdns_bpf::kit::KitMaps::set_hop), read by xdns_kit_next_hop (kit.h).
 */
struct xdns_kit_hop_key {
	__u8 family;            /* 4 or 6 */
	__u8 _pad[3];
	__u8 addr[16];          /* IPv4 in the first 4 bytes (the rest 0), network order */
};

/*
 * Value of `xdns_kit_hops`: how to reach that server, as the daemon resolved it (the route's
 * out interface, gateway or on-link, and the neighbour's MAC; crates/xdns/src/kit_hops.rs):
 * used when bpf_fib_lookup gives no next hop (forwarding off on the interface, the default
 * on every host). Ignored once `expires_ns` (CLOCK_MONOTONIC) has passed.
 */
struct xdns_kit_hop {
	__u64 expires_ns;
	__u32 ifindex;          /* the route's out interface (an XDP interface of ours) */
	__u8 smac[6];           /* its MAC */
	__u8 dmac[6];           /* the next hop's MAC (the gateway's, or the server's on-link) */
};

#define XDNS_KIT_ANSWERS 32             /* answer records of a kernel-built reply, at most */

/* The final answer being checked and rewritten by xdns_kit_answer (kit.h). */
struct xdns_kit_ans {
	__u32 pos;              /* offset of the next answer record in resp[] */
	__u32 len;              /* bytes of the response in resp[] */
	__u32 n;                /* answer records */
	__u32 qtype;            /* the question's type (every record's) */
	__u32 max_ttl;          /* the cap (xdns_kit_ctl) */
	__u32 bad;              /* 1: a record not of the shape */
	/* a negative answer's SOA names (xdns_kit_neg_label) */
	__u32 qlen;             /* wire length of the question name */
	__u32 npos;             /* where the name reader's next label is, in resp[] */
	__u32 nlit;             /* bytes of the name's labels written out (before its pointer or root) */
	__u32 nlast;            /* start of its last label written out, in resp[] */
	__u32 nj;               /* where it ends in the question: the pointer's target - 12, or the question's root; ~0 malformed */
	__u32 nin;              /* RNAME's pointer into MNAME's labels written out (its target), else 0 */
	__u32 mode;             /* 0 the owner, 1 MNAME (its label starts to mbits), 2 RNAME (may point into MNAME) */
	__u32 mfrom;            /* MNAME's start in resp[] */
	__u32 mlit;             /* MNAME's bytes written out */
	__u32 mj;               /* MNAME's end (nj) */
	__u64 mbits[4];         /* label starts of MNAME's part written out, from mfrom (bit per offset) */
};

/* Per-CPU scratch and counters of kernel iteration (value of `xdns_kit_scratch`). */
struct xdns_kit_scratch {
	/* counters (userspace reads and sums them) */
	__u64 handover[XDNS_KIT_HO_SLOTS]; /* misses passed, by enum xdns_kit_handover */
	__u64 sent;             /* queries sent (first hops) */
	__u64 responses;        /* responses that passed every check */
	/* handed over by the resolver program before the tail call */
	__u32 l3_off;           /* struct xdns_pkt's layout */
	__u32 l4_off;
	__u32 dns_off;
	__u32 dns_len;
	__u32 ipv6;
	__u32 verdict;          /* what the resolver program meant to return (a response; pass_cache_miss for a query that may miss) */
	__u64 zone_hash;        /* the cut chosen */
	__u32 zone_len;
	__u32 _pad;
	__u8 fib[64];           /* the struct bpf_fib_lookup asked, kept for the second try */
	struct xdns_kit_pend pend;      /* the entry being built */
	__u8 msg[296];          /* the query being built: header, name, type, class, OPT; padded to words */
	/* the response side (xdns_kit_in): counters, then the referral's parse */
	__u64 hops;             /* referrals followed: next queries sent by the kernel */
	__u64 learnt;           /* cuts the kernel wrote into xdns_kit_zones from a followed referral */
	__u64 handed;           /* responses handed over through xdns_kit_events (XDNS_KIT_HANDED) */
	__u64 ring_full;        /* ... that found the ring full: passed to the reserved port's socket instead */
	struct xdns_kit_ref ref;        /* the referral being parsed (kit.h) */
	__u8 lq[XDNS_KIT_NAME_ROOM];    /* the question name lowercased, zero padded */
	__u8 nb[XDNS_KIT_NAME_ROOM];    /* the name being read, decompressed and lowercased */
	__u64 lh[128];          /* label hashes of lq (hash.h), first label first */
	struct xdns_kit_zone zone;      /* a cut learnt, being written to xdns_kit_zones */
	__u64 answered;         /* final answers the kernel answered itself (kit_answered, kit_answered_redirected) */
	struct xdns_kit_ans ans;        /* the final answer being rewritten (kit.h) */
	__u8 resp[XDNS_KIT_RESP_ROOM];  /* the response, copied from the frame */
	/* next hops when bpf_fib_lookup gives none (xdns_kit_next_hop) */
	__u64 hop_table;        /* ... taken from xdns_kit_hops (a live entry) */
	__u64 hop_miss;         /* ... not there either (no entry, or expired): no next hop */
};

/*
 * ---- The in-path cache (issue 26): its own program, bpf/inpath.bpf.c ----
 *
 * A separate XDP program on the client and upstream interfaces of a forwarding host: it
 * answers queries to configured server addresses from what it learnt from those servers'
 * responses to queries it saw, and forwards everything else untouched. Its own verdicts,
 * counters, scratch and maps; nothing here is used by xdns.bpf.c.
 */
enum xdns_inpath_verdict {
	XDNS_INPATH_PASS_OTHER = 0,         /* not UDP port 53 to/from a configured server on its interface: forwarded untouched */
	XDNS_INPATH_ANSWERED = 1,           /* XDP_TX: a hit, answered on behalf of the server */
	XDNS_INPATH_MISS = 2,               /* a cacheable query not in the cache: recorded, forwarded */
	XDNS_INPATH_MISS_EXPIRED = 3,       /* in the cache but expired: recorded, forwarded */
	XDNS_INPATH_MISS_TOO_BIG = 4,       /* cached, but no reply fits (not even a truncated one): recorded, forwarded */
	XDNS_INPATH_QUERY_OTHER = 5,        /* a query the cache does not take (opcode, flags, counts, EDNS options other than COOKIE and PADDING, EDNS version, class, meta type, IP options): forwarded */
	XDNS_INPATH_LEARNED = 6,            /* a response to a recorded query, stored; forwarded */
	XDNS_INPATH_REJECT_UNSOLICITED = 7, /* response matching no recorded query (wrong ID, port, server or client): forwarded, not learnt */
	XDNS_INPATH_REJECT_QUESTION = 8,    /* question differs from the recorded one (name case, type, class): forwarded, not learnt */
	XDNS_INPATH_REJECT_LATE = 9,        /* after the timeout: forwarded, not learnt */
	XDNS_INPATH_REJECT_DUPLICATE = 10,  /* a second response to one query: forwarded, not learnt */
	XDNS_INPATH_REJECT_TRUNCATED = 11,  /* TC=1 */
	XDNS_INPATH_REJECT_RCODE = 12,      /* RCODE other than NOERROR and NXDOMAIN (SERVFAIL, REFUSED, BADVERS, ...) */
	XDNS_INPATH_REJECT_EDNS = 13,       /* OPT not last, with options other than COOKIE and PADDING, or of an unknown version */
	XDNS_INPATH_REJECT_SIZE = 14,       /* longer than XDNS_INPATH_MSG */
	XDNS_INPATH_REJECT_FORM = 15,       /* records that do not parse, more than XDNS_INPATH_TTLS, a negative answer without SOA */
	XDNS_INPATH_REJECT_TTL = 16,        /* a TTL of zero: nothing to keep */
	XDNS_INPATH_REJECT_NOMEM = 17,      /* the cache map refused the entry */
	XDNS_INPATH_DROP_REWRITE = 18,      /* a helper failed half way through a reply: dropped */
	XDNS_INPATH_MISS_NO_ROOM = 19,      /* cached, but the frame could not grow to the reply: recorded, forwarded */
	XDNS_INPATH_ANSWERED_TC = 20,       /* XDP_TX: a hit larger than the client's UDP payload size, answered TC=1 (header, question, the server's OPT) */
	XDNS_INPATH_MISS_COOKIE = 21,       /* cached, but the query carries a DNS cookie and the server is not known to ignore them (RFC 7873: a cache is not the server, it makes no server cookie): recorded, forwarded */
	XDNS_INPATH_VERDICT_MAX = 22,       /* number of verdicts; not a verdict */
};
#define XDNS_INPATH_SLOTS 32            /* verdict counters per CPU (a power of two >= the verdicts) */

#define XDNS_INPATH_MSG 1232            /* largest DNS message learnt or sent */
#define XDNS_INPATH_TTLS 32             /* records per entry (each TTL is aged) */
#define XDNS_INPATH_WAYS 4              /* entries per set */
#define XDNS_INPATH_BUF 1600            /* scratch frame: 64 bytes of headers, the message, room for the word copies */
#define XDNS_INPATH_DNS_AT 80           /* where the DNS message starts in the scratch frame (the frame headers, up to 66 bytes, before it) */

/* kflags: what of a query, besides its name, type and class, selects the answer */
#define XDNS_INPATH_K_EDNS 0x8000       /* the query had an OPT record */
#define XDNS_INPATH_K_DO 0x4000         /* ... with DO=1 */
#define XDNS_INPATH_K_HDR 0x0130        /* the query's RD, AD and CD bits, in place */

/* eflags of an entry */
#define XDNS_INPATH_E_OPT 1             /* rest ends with the server's OPT record (11 bytes: its options stripped) */
#define XDNS_INPATH_E_NO_COOKIE 2       /* learnt from a query with a client cookie, answered without a COOKIE option: the server ignores cookies */

/* EDNS options of a query (xdns_inpath_pend.qopt) or a response, as the cache takes them */
#define XDNS_INPATH_Q_COOKIE 1          /* COOKIE (10): client cookie, or client and server cookie */
#define XDNS_INPATH_Q_PADDING 2         /* PADDING (12) */
#define XDNS_INPATH_OPT_LEN 11          /* an OPT record without options */

#define XDNS_INPATH_INLINE 8           /* server prefixes compared inline (rodata); more: the LPM trie */
#define XDNS_INPATH_ROLE_SLOTS 1024     /* interface indexes below this have their role in an array (xdns_inpath_roles) */
#define XDNS_INPATH_MEMO_MORE 384       /* bytes of an in-path memo slot past the resolver's slot (struct xdns_inpath_memo) */
/*
 * Reply bytes after the question an in-path memo slot keeps: 496, so every reply of at most
 * 512 bytes (12 of header, a question of at least 5) is kept whole; a[] and more[] are one
 * run of 512 bytes, the reply's bytes then the server's address in the last 16.
 */
#define XDNS_INPATH_MEMO_A (XDNS_REPLY_MAX_A + XDNS_INPATH_MEMO_MORE - 16)
#define XDNS_INPATH_MEMO_Q 128          /* buffer room for a query's bytes after the header (xdns_copy_words: > XDNS_REPLY_MAX_Q) */

/*
 * A slot of the in-path reply memo (xdns_inpath_replies): the resolver's slot (its key, header
 * words, checksum and a[], slot.h's helpers work on it), then more room for the reply's
 * bytes, which run on from a[] into more[]: XDNS_INPATH_MEMO_A of them, then the server.
 */
struct xdns_inpath_memo {
	struct xdns_reply_memo m;       /* m.an unused: an below */
	__u8 more[XDNS_INPATH_MEMO_MORE];
	__u16 an;               /* reply bytes after the question (m.an holds at most 255) */
	__u16 _pad[3];
};
_Static_assert(sizeof(struct xdns_inpath_memo) == 648, "an in-path memo slot: the resolver's and 392 bytes");
_Static_assert(XDNS_INPATH_MEMO_A >= 512 - 12 - 5 + 1 - 1, "every reply of at most 512 bytes is kept");

/* A server prefix compared inline: the address (IPv4 as ::ffff:a.b.c.d) read as two native words, masked. */
struct xdns_inpath_net {
	__u64 addr[2];          /* already masked */
	__u64 mask[2];
};

/* Load-time settings (rodata). */
struct xdns_inpath_cfg {
	__u64 timeout_ns;       /* a response later than this after its query is not learnt */
	__u32 set_mask;         /* sets - 1 (sets a power of two) */
	__u32 max_ttl;          /* seconds an entry lives at most */
	__u8 redirect;          /* forward misses with bpf_fib_lookup + bpf_redirect (else XDP_PASS) */
	__u8 nsrv;              /* server prefixes in srv[] (1..XDNS_INPATH_INLINE); 0: they are in the LPM trie */
	__u8 _pad[2];
	__u32 pend_mask;        /* slots of xdns_inpath_pending - 1 (a power of two) */
	__u64 seed;             /* random, per load: keys the pending slots' hash */
	struct xdns_inpath_net srv[XDNS_INPATH_INLINE];
};

/*
 * Value of xdns_inpath_tags (key: set): the hashes of the set's ways' entries, 0 for none,
 * and their stamps (the entry's stored_ns: a new one for every write of the way, by the
 * program or userspace), which the reply memo checks instead of looking the entry up.
 */
struct xdns_inpath_tags {
	__u64 h[XDNS_INPATH_WAYS];
	__u64 stamp[XDNS_INPATH_WAYS];
};

/* xdns_inpath_servers: an LPM key; IPv4 as ::ffff:a.b.c.d (prefix + 96) */
struct xdns_inpath_prefix {
	__u32 prefixlen;
	__u8 addr[16];
};

/* A query forwarded and not yet answered, by who asked what of whom. */
struct xdns_inpath_pend_key {
	__u8 client[16];        /* IPv4 as ::ffff:a.b.c.d */
	__u8 server[16];
	__u16 cport;            /* network order */
	__u16 id;               /* network order */
	__u32 _pad;
};

/*
 * A slot of xdns_inpath_pending (and its copy in scratch). `tag` covers the key and the fields
 * up to `qopt` (xdns_inpath_pend_tag): a slot being rewritten by another CPU, read half old
 * and half new, fails it; the name is compared with the response's question anyway.
 */
struct xdns_inpath_pend {
	struct xdns_inpath_pend_key key;
	__u64 tag;              /* 0 while written */
	__u64 sent_ns;          /* bpf_ktime_get_ns() when forwarded */
	__u32 done;             /* responses seen (the first one alone is considered) */
	__u16 qlen;             /* wire length of the name */
	__u16 qtype;            /* network order */
	__u16 qclass;           /* network order */
	__u16 kflags;           /* XDNS_INPATH_K_* */
	__u16 qopt;             /* XDNS_INPATH_Q_*: the EDNS options the query carried */
	__u16 _pad;
	__u8 name[256];         /* the name as sent (letter case kept) */
};

/*
 * One cached answer, in one of two size classes (value of xdns_inpath_cache_s or
 * xdns_inpath_cache, key set * WAYS + way; the set's tags say which map holds a way: bit 63
 * of its hash). The head is the same in both; `d` holds the records after the question
 * (rest_len bytes, at d[0]) and then, from the next multiple of eight, the lowercased name
 * (qlen bytes, its last word zero padded): one area, sized to the answer's class, instead of
 * a name[256] and a rest[1216] whatever the answer. A reply's bytes fit the small class when
 * round8(rest_len) + round8(qlen) <= XDNS_INPATH_D_S.
 */
#define XDNS_INPATH_ENTRY_HEAD \
	__u64 hash;             /* of the lowercased name, type, class, kflags, server (bit 63 clear) */ \
	__u64 stored_ns;        /* when learnt */ \
	__u64 expires_ns;       /* stored_ns + TTL */ \
	__u64 used_ns;          /* last hit (the set's replacement takes the least recently used) */ \
	__u16 qlen; \
	__u16 qtype;            /* network order */ \
	__u16 qclass;           /* network order */ \
	__u16 kflags; \
	__u16 hdr[5];           /* the response's flags and four counts, network order */ \
	__u16 rest_len;         /* bytes after the question, at d[0] */ \
	__u16 nttl;             /* records whose TTL is aged */ \
	__u16 ttl_off[XDNS_INPATH_TTLS]; /* offsets of their TTLs in the records */ \
	__u16 eflags;           /* XDNS_INPATH_E_* */ \
	__u16 rest_sum;         /* checksum of the records (folded, native order, as if at an even offset) */ \
	__u16 opt_sum;          /* ... of its OPT record alone (XDNS_INPATH_E_OPT: the last 11 bytes) */ \
	__u16 _pad2; \
	__u8 server[16];        /* the server that gave it (IPv4 as ::ffff:a.b.c.d): each answers for itself */ \
	__u16 _pad3[1]

#define XDNS_INPATH_D_S 304             /* the small class's area: its value 448 bytes, a hash element in the kernel's 512-byte class */
#define XDNS_INPATH_D_L 1224            /* the large class's: any answer (rest + qlen <= XDNS_INPATH_MSG - 16, each rounded up to 8) */
#define XDNS_INPATH_H_CLS (1ULL << 63)  /* in a set's tag: the way's entry is in the small class's map */

/*
 * The head alone, which both classes begin with: what a lookup returns before its class is
 * known (inpath.h: xdns_inpath_entry_get), so that nothing reads an entry's area `d` through
 * it; the area only through the class's own type.
 */
struct xdns_inpath_entry_head {
	XDNS_INPATH_ENTRY_HEAD;
};

/* The large class (value of xdns_inpath_cache); also the entry built in scratch. */
struct xdns_inpath_entry {
	XDNS_INPATH_ENTRY_HEAD;
	__u8 d[XDNS_INPATH_D_L];        /* the records, then the name (above) */
};

/* The small class (value of xdns_inpath_cache_s): the large one's first bytes. */
struct xdns_inpath_entry_s {
	XDNS_INPATH_ENTRY_HEAD;
	__u8 d[XDNS_INPATH_D_S];
};
_Static_assert(sizeof(struct xdns_inpath_entry_s) == 448, "a small entry: 448 + 64 bytes of hash element <= 512");
_Static_assert(sizeof(struct xdns_inpath_entry_head) == 144 &&
	       __builtin_offsetof(struct xdns_inpath_entry, d) == 144 &&
	       __builtin_offsetof(struct xdns_inpath_entry_s, d) == 144, "the head 144 bytes, both classes' area right after it");
_Static_assert(XDNS_INPATH_D_L >= XDNS_INPATH_MSG - 16 + 8, "the large class holds any answer learnt");

/* Per-CPU scratch and counters of the in-path program. */
struct xdns_inpath_scratch {
	__u64 verdicts[XDNS_INPATH_SLOTS];
	__u64 evicted;          /* live entries replaced by another name (capacity pressure) */
	__u64 redirected;       /* misses and responses forwarded by bpf_redirect */
	__u64 fib_passed;       /* redirect on, but the FIB said no (or not our interface): XDP_PASS */
	__u64 head_grown;         /* answers whose frame had no tailroom: grown at the head instead */
	__u64 reply_hits;       /* answers sent from the reply memo (xdns_inpath_memo_answer) */
	__u64 reply_kept;       /* replies written into it */
	__u64 clock_ns;         /* the coarse clock as of tick clock_jiffies (xdns_inpath_now) */
	__u64 clock_jiffies;
	/* the walk of a response's records (a bpf_loop) */
	__u32 w_off;            /* next record, offset in the message */
	__u32 w_len;            /* message length */
	__u32 w_i;              /* records done */
	__u32 w_n;              /* records in all */
	__u32 w_an;             /* answer records */
	__u32 w_ns_end;         /* index after the authority records */
	__u32 w_min_ttl;        /* smallest TTL of a record */
	__u32 w_neg_ttl;        /* RFC 2308: min(SOA TTL, SOA MINIMUM) of an authority SOA, 0: none */
	__u32 w_err;            /* the verdict that ends the walk, 0: none */
	__u32 w_seen;           /* 1: an OPT record was seen (it must be the last); 2: an authority SOA */
	__u32 w_opt_rd;         /* the OPT record's rdata: offset in the message */
	__u32 w_opt_len;        /* ... and length (its options) */
	__u64 qsum;             /* the question's checksum as sent (native order, unfolded): xdns_inpath_key */
	__u32 age_even;         /* TTL seconds a reply's records lost, at even offsets (xdns_inpath_age) */
	__u32 age_odd;          /* ... and at odd ones */
	/* the reply memo (inpath.h: xdns_inpath_memo_answer, _keep) */
	__u64 mh;               /* this query's slot key, 0: not one the memo takes */
	__u64 mk_tag;           /* the answering entry's stored_ns, ... */
	__u64 mk_until;         /* ... until when its reply stays the same, ... */
	__u32 mk_ref;           /* ... and its key in xdns_inpath_cache */
	__u16 rsum;             /* the reply's DNS checksum (folded, native order) */
	__u16 mqflags;          /* the query's header flags as they sit */
	__u16 mqar;             /* ... its ARCOUNT (0 or 1) */
	__u16 mn;               /* ... and its length after the header */
	__u32 _mpad;
	__u64 mocc[XDNS_REPLY_SLOTS / 64]; /* this CPU's reply memo slots ever written, a bit each */
	__u8 srv[16];           /* this packet's server address (the key's) */
	__u8 qname[256];        /* the question's name, lowercased (as the entry's name) */
	struct xdns_inpath_pend pend;
	struct xdns_inpath_entry e;
	__u8 buf[XDNS_INPATH_BUF]; /* frame headers + DNS message */
};

#endif /* XDNS_ABI_H */
