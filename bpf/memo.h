/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * memo.h - the question memo: a question whose name, type and class were answered before,
 * byte for byte, skips the name walk and the lookup. (A resolver program keeps cache hints
 * in the same slots instead: see the end of this file.)
 *
 * Authoritative traffic repeats itself: the same few questions, from the same resolvers. The
 * walk reads only the name, and the lookup only what the walk found and the type: for a
 * question whose name, type and class (as sent, letter case included) equal those of one
 * answered earlier on this CPU, under the same data generation, they can only find the same
 * answer. The memo keeps what they found (the name's length and label count, the checksum of
 * name, type and class, and the answer's address in xdns_vals) and the program goes straight to
 * the rest: the OPT record and the header flags are parsed from the packet as on the full path
 * (type and class are known: they are part of the compared bytes), and everything after
 * the lookup (truncation, EDNS, fixups, header, checksums) runs as before from the same answer
 * value, so a memo hit sends the same bytes as the full path (fixtures.rs asks every row three
 * times).
 *
 * A slot is one cache line (struct xdns_memo): names up to XDNS_MEMO_MAX_Q - 4 bytes, and
 * only answers whose body is inline in the answer table's value (class S; M and L bodies are
 * looked up by a key the slot has no room for). Only answers from the table are kept (not
 * those copied from the hash map into the spill value, which is rewritten by every spilled
 * lookup). The generation enters the slot's hash, so a reload's new data never matches an
 * older slot; so does the memo epoch (xdns_gen[2], mixed into the generation by the caller),
 * which userspace bumps after changing the active generation in place.
 *
 * Per CPU (`xdns_memo`, XDNS_MEMO_SLOTS slots for each CPU, in sets of two ways): a CPU reads
 * and writes only its own slots, and one XDP run finishes before the next starts on that CPU,
 * so no entry is ever read half written. A question is learnt the second time it is seen in
 * its set, so a flood of names asked once (random subdomains) costs a hash and a compare per
 * query and writes only a sighting. A set remembers its last two first sightings (`seen` of
 * each way, the newer in the first): two questions of one set asked in turn are both learnt
 * (with one sighting per set, each erased the other's and neither was ever kept). A new
 * entry takes an empty way, else the two ways are replaced in turn.
 *
 * Why two ways and 4096 slots: a miss costs far more than its walk alone, because the walk's
 * code and data are no longer warm, so the memo is sized to hold the benchmark mix's distinct
 * questions with room to spare (the measurements: docs/perf/2026-11-23-question-memo.md).
 */
#ifndef XDNS_MEMO_H
#define XDNS_MEMO_H

#include "hash.h"
#include "word.h"
#include "slot.h"	/* xdns_memo_word, xdns_first_sighting */

/* The set is the hash's top bits: after a multiply, the only bits every input bit reaches. */
#define XDNS_MEMO_SET_SHIFT (64 - __builtin_ctz(XDNS_MEMO_SLOTS / 2))
_Static_assert((XDNS_MEMO_SLOTS & (XDNS_MEMO_SLOTS - 1)) == 0, "memo sets are indexed by hash bits");

/*
 * The first of the two slots (ways) of a question hash's set, in this CPU's run of slots
 * (the CPU's id is inlined by the verifier).
 */
static __always_inline __u32 xdns_memo_set(__u64 h)
{
	return bpf_get_smp_processor_id() * XDNS_MEMO_SLOTS + ((__u32)(h >> XDNS_MEMO_SET_SHIFT) << 1);
}

static __always_inline struct xdns_memo *xdns_memo_at(__u32 slot)
{
	return bpf_map_lookup_elem(&xdns_memo, &slot);
}

/*
 * The slot hash of this packet's question under generation `gen` (never 0), also left in
 * sc->memo.hash for the learning step; 0 when there is nothing to hash. It covers the
 * generation and the first 24 bytes (a short name's type, class and OPT among them: the same
 * question with another OPT may take another slot, never a wrong one).
 *
 * Each word, mixed with the seeded start s, is multiplied by its own constant and the three
 * products are XORed: the multiplies run side by side, where absorbing the words one after
 * the other (xdns_hash_step) chained three multiplies before the slot's address was known,
 * and everything on a memo hit waits for that address.
 * s depends on the generation alone, so its multiply is off that path. The hash picks a set
 * and filters ways; the stored bytes decide a hit (xdns_memo_probe), so its quality costs
 * speed only. Modelled by crates/xdns-bpf/src/hash.rs, memo_hash.
 */
#define XDNS_MEMO_MUL(i) ((i) == 0 ? XDNS_HASH_MUL : (i) == 1 ? 0xc2b2ae3d27d4eb4fULL : 0x165667b19e3779f9ULL)
static __always_inline __u64 xdns_memo_key(struct xdns_scratch *sc, __u32 avail, __u32 gen)
{
	__u64 h, s;
	int i;

	if (avail == 0 || avail > 255 || gen == 0) {
		sc->memo.hash = 0;
		return 0;
	}
	s = xdns_hash_step(xdns_cfg.seed ^ 0x6d656d6fULL, gen);
	h = s;
#pragma clang loop unroll(full)
	for (i = 0; i < 3; i++)
		if ((__u32)i * 8 < avail)
			h ^= (xdns_memo_word(sc->walk.name, i, avail) ^ s) * XDNS_MEMO_MUL(i);
	/* no final avalanche: the set comes from the top bits (xdns_memo_set) */
	h = h ? h : 1;
	sc->memo.hash = h;
	return h;
}

/* The way of a set a new entry takes: an empty one, else the two in turn. */
static __always_inline struct xdns_memo *xdns_memo_victim(const struct xdns_scratch *sc, struct xdns_memo *m0,
							  struct xdns_memo *m1)
{
	if (m0->hash == 0)
		return m0;
	if (m1->hash == 0)
		return m1;
	return (sc->memo_kept & 1) ? m1 : m0;
}

/*
 * The probes below are inlined: every call costs its return, and with the SRSO mitigation
 * ("Safe RET") each return is a mispredicted branch (docs/perf/2026-11-23-question-memo.md).
 * The learning steps, which run only after a full walk, stay global functions (BPF
 * subprograms the verifier checks once, alone): inlined, their word-by-word conditions once
 * multiplied the program's states past the limit.
 */

/*
 * Is this packet's question (sc->walk.name, sc->walk.avail bytes) in this CPU's memo under generation
 * `gen`? Returns the answer's xdns_vals address, with memo.qlen and memo.nlab set as the walk
 * would have found them and memo.sum as xdns_parse_tail would have; or -1, with memo.hash set
 * for xdns_memo_learn.
 */
static __always_inline int xdns_memo_probe(struct xdns_scratch *sc, __u32 gen)
{
	struct xdns_memo *m;
	__u32 avail, set, n;
	__u64 h;

	if (!sc)
		return -1;
	avail = sc->walk.avail;
	h = xdns_memo_key(sc, avail, gen);
	if (!h)
		return -1;
	set = xdns_memo_set(h);
	m = xdns_memo_at(set);
	if (!m)
		return -1;
	if (m->hash != h) {
		m = xdns_memo_at(set + 1);
		if (!m || m->hash != h)
			return -1;
	}
	n = (__u32)m->u.q.qlen + 4;
	if (n > avail || n > XDNS_MEMO_MAX_Q)
		return -1;
	/* the packet's bytes past n are whatever follows the question: not compared */
	if (!xdns_same_bytes(sc->walk.name, m->u.q.name, n, XDNS_MEMO_MAX_Q))
		return -1;
	sc->memo.qlen = m->u.q.qlen;
	sc->memo.nlab = m->u.q.nlab;
	sc->memo.sum = m->u.q.qsum;
	return (int)(m->u.q.v & 0x7fffffff);
}

/*
 * After the full path found the answer of sc->memo.last_v for the question (a table hit, class S
 * body), whose name has `qlen` bytes and `nlab` labels, and whose name, type and class sum to
 * `qsum` (xdns_query.qsum after xdns_parse_tail): note the question the first time, keep it
 * the second.
 */
__attribute__((noinline)) int xdns_memo_learn(struct xdns_scratch *sc, __u32 qlen, __u32 nlab, __u64 qsum)
{
	struct xdns_memo *m, *m0, *m1;
	__u32 set, n;
	__u64 h;
	int i;

	if (!sc)
		return 0;
	h = sc->memo.hash;      /* 0: the probe found nothing to hash */
	n = qlen + 4;
	if (h == 0 || !sc->memo.last_table || n > XDNS_MEMO_MAX_Q || n > sc->walk.avail || nlab > 255)
		return 0;
	set = xdns_memo_set(h);
	m0 = xdns_memo_at(set);
	m1 = xdns_memo_at(set + 1);
	if (!m0 || !m1 || m0->hash == h || m1->hash == h)
		return 0;
	if (xdns_first_sighting(&m0->u.q.seen, &m1->u.q.seen, (__u32)h))
		return 0;
	m = xdns_memo_victim(sc, m0, m1);
	m->hash = 0;            /* not whole until the end (nothing else runs here meanwhile) */
	qsum = (qsum & 0xffffffff) + (qsum >> 32);
	qsum = (qsum & 0xffffffff) + (qsum >> 32);
	m->u.q.qsum = (__u32)qsum;
	m->u.q.v = sc->memo.last_v;
	m->u.q.qlen = qlen;
	m->u.q.nlab = nlab;
	sc->memo_kept++;
#pragma clang loop unroll(full)
	for (i = 0; i < XDNS_MEMO_MAX_Q / 8; i++)
		xdns_st64(&m->u.q.name[i * 8], xdns_memo_word(sc->walk.name, i, n));
	m->hash = h;
	return 0;
}

/*
 * Cache hints (resolver programs, which have no question memo: the same slots, another use).
 *
 * A resolver's cache hit costs the name walk and the encloser lookup only to learn that the
 * name is under no served zone and to hash it for the cache key. A hint keeps, for a
 * question (its first bytes and the generation, hashed as above), its type and DO bit (in
 * `kind`), the cache entry the full path found for it: slot and size class (`ref`), the name's
 * length and labels.
 * The next such question goes straight to that entry, which the cache stage checks as it
 * checks every entry (cache.h: type, DO bit, name compared case-insensitively, tag, expiry),
 * so a hint can be stale, never wrong: a collision or a reused entry is a miss, and the hint
 * is forgotten. Zones: a hint is learnt only after the walk found the name under no zone of
 * this generation, and the generation is part of its hash; a reload, which alone changes the
 * zones, leaves every older hint unmatched. No name bytes are kept: names of up to 240 bytes.
 */
#define XDNS_HINT_NONE 0xffffffffu

/*
 * Type and DO bit of the question whose name has `qlen` bytes, read from sc->walk.name (the OPT
 * record right after the question, if any), as a hint keeps them.
 */
static __always_inline __u32 xdns_hint_kind(const struct xdns_scratch *sc, __u32 qlen, __u32 avail)
{
	__u32 t, o;

	if (qlen == 0 || qlen > 240 || qlen + 4 > avail)
		return XDNS_HINT_NONE;
	asm volatile("" : "+r"(qlen));  /* keep the masks below: the verifier needs them */
	o = qlen + 4;
	t = ((__u32)sc->walk.name[qlen & 0xff] << 8) | sc->walk.name[(qlen + 1) & 0xff];
	/* OPT: root owner, type 41, class, extended RCODE, version, flags (DO: the top bit) */
	if (o + 11 <= avail && sc->walk.name[o & 0xff] == 0 && sc->walk.name[(o + 1) & 0xff] == 0 &&
	    sc->walk.name[(o + 2) & 0xff] == XDNS_TYPE_OPT && (sc->walk.name[(o + 7) & 0xff] & 0x80))
		t |= 1 << 16;
	return t;
}

/*
 * A hint for this packet's question, whose key (xdns_memo_key) is in sc->memo.hash already
 * (reply.h)? Returns 0 with sc->hint.ref (the entry), memo_qlen and memo_nlab set; else -1,
 * with sc->hint.ref = XDNS_HINT_NONE, for xdns_hint_learn. Of the set's two ways, the one
 * whose type and DO bit are the packet's (read at the kept name length) is taken: A and AAAA
 * of one long name share a hash.
 */
static __always_inline int xdns_hint_probe(struct xdns_scratch *sc)
{
	struct xdns_memo *m;
	__u32 avail, set, qlen, t;
	__u64 h;
	int i;

	if (!sc)
		return -1;
	sc->hint.ref = XDNS_HINT_NONE;
	avail = sc->walk.avail;
	h = sc->memo.hash;
	if (!h)
		return -1;
	set = xdns_memo_set(h);
#pragma clang loop unroll(full)
	for (i = 0; i < 2; i++) {
		m = xdns_memo_at(set + i);
		if (!m || m->hash != h)
			continue;
		qlen = m->u.hint.qlen;
		t = xdns_hint_kind(sc, qlen, avail);
		if (t == XDNS_HINT_NONE || t != m->u.hint.kind)
			continue;
		sc->hint.slot = set + i;
		sc->hint.ref = m->u.hint.ref;
		sc->memo.qlen = qlen;
		sc->memo.nlab = m->u.hint.nlab;
		return 0;
	}
	return -1;
}

/*
 * The full path found entry `ref` (an index as xdns_cache_find returns it) for this packet's
 * question, a name of `qlen` bytes and `nlab` labels under no zone: keep it as the hint of
 * (question, type, DO bit), in the way that already holds that triple, else an empty way,
 * else the two in turn.
 */
__attribute__((noinline)) int xdns_hint_learn(struct xdns_scratch *sc, __u32 ref, __u32 qlen, __u32 nlab)
{
	struct xdns_memo *m, *m0, *m1;
	__u32 set, kind;
	__u64 h;

	if (!sc)
		return 0;
	h = sc->memo.hash;      /* 0: the probe found nothing to hash */
	if (h == 0 || nlab == 0 || nlab > 128 || ref == XDNS_HINT_NONE)
		return 0;
	kind = xdns_hint_kind(sc, qlen, sc->walk.avail);
	if (kind == XDNS_HINT_NONE)
		return 0;
	set = xdns_memo_set(h);
	m0 = xdns_memo_at(set);
	m1 = xdns_memo_at(set + 1);
	if (!m0 || !m1)
		return 0;
	if (m0->hash == h && m0->u.hint.kind == kind)
		m = m0;
	else if (m1->hash == h && m1->u.hint.kind == kind)
		m = m1;
	else
		m = xdns_memo_victim(sc, m0, m1);
	m->hash = 0;            /* not whole until the end (nothing else runs here meanwhile) */
	m->u.hint.ref = ref;
	m->u.hint.qlen = qlen;
	m->u.hint.nlab = nlab;
	m->u.hint.kind = kind;
	m->hash = h;
	sc->memo_kept++;
	return 0;
}

/* The hint of this packet led to an entry that is not its question's: forget it. */
__attribute__((noinline)) int xdns_hint_forget(struct xdns_scratch *sc)
{
	struct xdns_memo *m;
	__u32 slot;

	if (!sc)
		return 0;
	slot = sc->hint.slot;
	m = xdns_memo_at(slot);
	if (m && m->hash == sc->memo.hash)
		m->hash = 0;
	return 0;
}

#endif /* XDNS_MEMO_H */
