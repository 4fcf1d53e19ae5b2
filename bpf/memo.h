/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * memo.h - the question memo: an answered question, asked again byte for byte, skips the name
 * walk and the lookup.
 *
 * Authoritative traffic repeats itself: the same few questions, from the same resolvers, with
 * the same EDNS options. For a question whose bytes (after the DNS header: name as sent, type,
 * class, OPT) and header flags and ARCOUNT equal those of one answered earlier on this CPU,
 * under the same data generation, the walk and the lookup can only find the same answer: the
 * memo keeps what they found (name length, label count, name checksum, the answer's key and
 * its index in xdns_vals) and the program goes straight to the reply. Everything after the
 * lookup (truncation, EDNS, fixups, header, checksums) runs as before, from the same answer
 * value, so a memo hit sends the same bytes as the full path (fixtures.rs asks every row
 * three times).
 *
 * Per CPU (`xdns_memo`, XDNS_MEMO_SLOTS slots for each CPU, in sets of two ways): a CPU reads
 * and writes only its own slots, and one XDP run finishes before the next starts on that CPU,
 * so no entry is ever read half written. A question is learnt the second time it is seen in
 * its set (`seen`, in the set's first way), so a flood of names asked once (random subdomains)
 * costs a hash and a compare per query and writes nothing. It takes an empty way, or one of an
 * older generation, else the two ways are replaced in turn. Only answers from the answer table
 * are kept (not those copied from the hash map into the spill value). A reload changes the
 * generation: older slots stop matching.
 *
 * Why two ways and 4096 slots (512 KiB per CPU): a miss costs far more than its walk alone,
 * because the walk's code and data are no longer warm. On the benchmark's mix (about 510
 * distinct questions), 1024 direct-mapped slots answered 86% from the memo at 237 ns per
 * packet; 4096 answered 96.5% at 197 ns (interleaved A/B, median of 6 rounds each).
 */
#ifndef XDNS_MEMO_H
#define XDNS_MEMO_H

#include "hash.h"
#include "word.h"

/* Word `i` of a question, only the bytes below `avail` (little-endian: the low bytes). */
static __always_inline __u64 xdns_memo_word(const __u8 *name, int i, __u32 avail)
{
	__u64 w = xdns_ld64(&name[(i & 7) * 8]);
	__u32 left = avail - (__u32)i * 8;

	if (left < 8)
		w &= (1ULL << (left * 8)) - 1;
	return w;
}

/*
 * The first of the two slots (ways) of a question hash's set, in this CPU's run of slots
 * (the CPU's id is inlined by the verifier).
 */
static __always_inline __u32 xdns_memo_set(__u64 h)
{
	return bpf_get_smp_processor_id() * XDNS_MEMO_SLOTS + (((__u32)(h >> 32) & (XDNS_MEMO_SLOTS / 2 - 1)) << 1);
}

static __always_inline struct xdns_memo *xdns_memo_at(__u32 slot)
{
	return bpf_map_lookup_elem(&xdns_memo, &slot);
}

/*
 * The two steps below are global functions (BPF subprograms the verifier checks once, alone,
 * whatever their callers' states): inlined, their word-by-word conditions multiplied the
 * states of the whole program past the verifier's limit.
 */

/*
 * Is this packet's question (sc->name, sc->avail bytes; header word `hdr`) in this CPU's
 * memo under generation `gen`? Returns the answer's xdns_vals index, with memo_qlen,
 * memo_nlab, memo_sum and memo_key set as the walk and the lookup would have found them; or
 * -1, with memo_hash set for xdns_memo_learn (0 when the question is too long to keep).
 */
__attribute__((noinline)) int xdns_memo_probe(struct xdns_scratch *sc, __u32 hdr, __u32 gen)
{
	struct xdns_memo *m;
	__u32 avail, set;
	__u64 h, diff = 0;
	int i;

	if (!sc)
		return -1;
	sc->memo_hash = 0;
	avail = sc->avail;
	if (avail == 0 || avail > XDNS_MEMO_MAX_Q || gen == 0)
		return -1;
	/* the header word, the length and the first three words: the comparison decides */
	h = xdns_hash_step(xdns_cfg.seed ^ 0x6d656d6fULL, (__u64)hdr << 32 | avail);
#pragma clang loop unroll(full)
	for (i = 0; i < 3; i++)
		if ((__u32)i * 8 < avail)
			h = xdns_hash_step(h, xdns_memo_word(sc->name, i, avail));
	h = xdns_hash_fin(h);
	h = h ? h : 1;
	sc->memo_hash = h;
	set = xdns_memo_set(h);
	m = xdns_memo_at(set);
	if (!m)
		return -1;
	if (m->hash != h) {
		m = xdns_memo_at(set + 1);
		if (!m || m->hash != h)
			return -1;
	}
	if (m->gen != gen || m->hdr != hdr || m->avail != avail)
		return -1;
#pragma clang loop unroll(full)
	for (i = 0; i < XDNS_MEMO_MAX_Q / 8; i++)
		if ((__u32)i * 8 < avail)
			diff |= xdns_memo_word(sc->name, i, avail) ^ xdns_memo_word(m->name, i, avail);
	if (diff)
		return -1;
	sc->memo_qlen = m->qlen;
	sc->memo_nlab = m->nlab;
	sc->memo_sum = m->qsum;
	sc->memo_key = m->key;
	return (int)(m->v & 0x7fffffff);
}

/*
 * After the full path found the answer of sc->last_v (key sc->memo_key) for the question (a
 * table hit only: the spill value is per CPU and rewritten by every spilled lookup), whose
 * name has `qlen` bytes, `nlab` labels and the checksum `name_sum` (before type and class):
 * note the question the first time, keep it the second.
 */
__attribute__((noinline)) int xdns_memo_learn(struct xdns_scratch *sc, __u32 hdr, __u32 qlen, __u32 nlab,
					      __u64 name_sum)
{
	struct xdns_memo *m, *m0, *m1;
	__u32 set, gen;
	__u64 h;
	int i;

	if (!sc)
		return 0;
	h = sc->memo_hash;      /* 0: the probe found the question too long to keep */
	if (h == 0 || !sc->last_table)
		return 0;
	set = xdns_memo_set(h);
	m0 = xdns_memo_at(set);
	m1 = xdns_memo_at(set + 1);
	if (!m0 || !m1 || m0->hash == h || m1->hash == h)
		return 0;
	if (m0->seen != h) {    /* the set's sighting lives in its first way */
		m0->seen = h;
		return 0;
	}
	/* an empty way or one of an older generation, else each way in turn */
	gen = sc->memo_key.gen;
	if (m0->hash == 0 || m0->gen != gen)
		m = m0;
	else if (m1->hash == 0 || m1->gen != gen)
		m = m1;
	else
		m = (sc->memo_kept & 1) ? m1 : m0;
	m->hash = 0;            /* not whole until the end (nothing else runs here meanwhile) */
	m->qsum = name_sum;
	m->key = sc->memo_key;
	m->gen = gen;
	m->v = sc->last_v;
	m->hdr = hdr;
	m->avail = sc->avail;
	m->qlen = qlen;
	m->nlab = nlab;
	sc->memo_kept++;
#pragma clang loop unroll(full)
	for (i = 0; i < XDNS_MEMO_MAX_Q / 8; i++)
		xdns_st64(&m->name[i * 8], xdns_ld64(&sc->name[i * 8]));
	m->hash = h;
	return 0;
}

#endif /* XDNS_MEMO_H */
