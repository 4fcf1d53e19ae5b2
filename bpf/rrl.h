/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * rrl.h - the guard's gate on kernel answers (issue 25): RRL, server cookies, answer features.
 *
 * The answer stages (answer.h for zone answers, cache.h for resolver cache answers) call
 * xdns_rrl_stage once they know the reply they would send and before they touch the frame.
 * Nothing at all without xdns_cfg.guard (read-only data); with it, one read of the control
 * value, then (small global functions, each verified once alone, so that neither the
 * verifier's steps nor the entry's stack frame grow at both call sites):
 *  - without the features, a fresh server cookie of the current secret is checked by
 *    xdns_cookie_echo (a cookie verified before on this CPU is compared, not hashed again:
 *    xdns_guard_cookies) and the answer goes out with it echoed, never limited;
 *  - without the features and without a COOKIE option, RRL alone: an account this CPU
 *    decided before pays its shared bucket inline (xdns_rrl_memo, XDNS_RRL_MEMO_SLOTS a CPU in
 *    xdns_guard_rrl_memo), else xdns_rrl_check (the bucket) decides, and the gate is called
 *    only to write a slip;
 *  - otherwise the gate, xdns_guard_gate, decides:
 *
 *  1. cookies (xdns_guard_rrl.cookies) and a COOKIE option: a 16-byte version 1 server
 *     cookie that verifies (RFC 9018: SipHash-2-4 of client cookie | version | reserved |
 *     timestamp | client address, under the current or the previous secret; at most an hour
 *     old, five minutes ahead) and was not echoed above passes the query to userspace,
 *     XDNS_PASS_COOKIE, before any RRL: a client that proved its address is never limited
 *     here. Userspace refreshes the cookie (the kernel does not build cookies: see bpf/README.md);
 *  2. RRL (xdns_guard_rrl.rate), unless the guard stage matched the source to an allow
 *     prefix (sc->guard.src_allowed: allowlisted clients are never limited): the account of (client prefix, class, answer) pays a token;
 *     without one the answer is dropped (XDNS_DROP_RRL) or, every slip-th time, replaced by
 *     header and question with TC=1 (XDNS_ANSWERED_SLIP: written here, the frame rewritten);
 *  3. any other COOKIE option, within the rate: XDNS_PASS_COOKIE_NEW (userspace answers with
 *     a new server cookie, or FORMERR for a malformed option);
 *  4. the answer features (xdns_cfg.guard_features): answers and bytes per client prefix,
 *     NXDOMAIN answers and bytes per queried parent suffix; then XDNS_CONTINUE.
 *
 * Semantics follow xdns_guard::rrl (and so Knot's mod-rrl): the bucket holds one second's
 * worth, is credited `rate` answers a second (exactly: in 10^-9 answers), and a limited answer costs
 * nothing (no debt: BIND's window 0), so a flood still gets `rate` answers a second. The class comes from the answer's header as userspace
 * classifies its own (positive, NXDOMAIN, NODATA, referral, error); the answer's identity is
 * its value in the zone data (or its cache entry), whose body is the qname's own for a
 * positive answer, the apex's NXDOMAIN for every name that does not exist, the wildcard's for
 * every name it covers, the cut's referral: Knot's name-or-zone choice, without a name hash.
 */
#ifndef XDNS_RRL_H
#define XDNS_RRL_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "stage.h"
#include "maps.h"
#include "parse.h"
#include "word.h"
#include "dns.h"
#include "guard.h"
#include "hash.h"

#define XDNS_COOKIE_MAX_AGE 3600        /* seconds (RFC 9018 4.3; xdns_guard::cookies::MAX_AGE) */
#define XDNS_COOKIE_MAX_FUTURE 300      /* seconds (xdns_guard::cookies::MAX_FUTURE) */
#define XDNS_COOKIE_REFRESH_AGE 1800    /* seconds: older valid cookies are refreshed (::REFRESH_AGE) */
#define XDNS_COOKIE_OPT_LEN 28          /* an echoed COOKIE option: code, length, 8 + 16 bytes */
/* Whether an answer may echo a cookie: the guard on, its features off (with them, every
 * cookie takes the gate). Read-only data: otherwise the verifier drops the echo's paths. */
#define XDNS_ECHO_ON (xdns_cfg.guard && !xdns_cfg.guard_features)
#define XDNS_RRL_SLIP_NOW (1ULL << 63) /* in the gate's `ident`: RRL decided a slip inline */
#define XDNS_RRL_ANSWER 1000000000LL  /* an answer in bucket units: el (ns) * rate (a second) */

/* Written by answer.h: the slip, header and question with TC=1, from the gate's inputs. */
static __always_inline enum xdns_verdict xdns_put_slip(struct xdp_md *ctx, struct xdns_scratch *sc);

#define XDNS_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define XDNS_SIPROUND                                                                           \
	do {                                                                                    \
		v0 += v1; v1 = XDNS_ROTL(v1, 13); v1 ^= v0; v0 = XDNS_ROTL(v0, 32);             \
		v2 += v3; v3 = XDNS_ROTL(v3, 16); v3 ^= v2;                                     \
		v0 += v3; v3 = XDNS_ROTL(v3, 21); v3 ^= v0;                                     \
		v2 += v1; v1 = XDNS_ROTL(v1, 17); v1 ^= v2; v2 = XDNS_ROTL(v2, 32);             \
	} while (0)
#define XDNS_SIPWORD(m)                                                                         \
	do {                                                                                    \
		v3 ^= (m);                                                                      \
		XDNS_SIPROUND;                                                                  \
		XDNS_SIPROUND;                                                                  \
		v0 ^= (m);                                                                      \
	} while (0)

/*
 * SipHash-2-4 under key (k0, k1) of client cookie | version, reserved, timestamp | address
 * (4 or 16 bytes): the words m0, m1 (little-endian, as the bytes lie), then the address
 * words (IPv6: a0, a1; IPv4: the 4 bytes in the last block with the length 20).
 */
static __always_inline __u64 xdns_cookie_mac(__u64 k0, __u64 k1, __u64 m0, __u64 m1, __u64 a0, __u64 a1, int ipv6)
{
	__u64 v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
	__u64 v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL, last;

	XDNS_SIPWORD(m0);
	XDNS_SIPWORD(m1);
	if (ipv6) {
		XDNS_SIPWORD(a0);
		XDNS_SIPWORD(a1);
		last = 32ULL << 56;
	} else {
		last = (a0 & 0xffffffffULL) | 20ULL << 56;
	}
	XDNS_SIPWORD(last);
	v2 ^= 0xff;
	XDNS_SIPROUND;
	XDNS_SIPROUND;
	XDNS_SIPROUND;
	XDNS_SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* Whether the query's COOKIE option holds a server cookie of ours that verifies now. */
static __always_inline int xdns_cookie_valid(struct xdp_md *ctx, const struct xdns_guard_rrl *g, __u32 cookie,
					     __u64 a0, __u64 a1, int ipv6, __u64 now_ns)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 at = cookie >> 16, stamp, now;
	__u64 m0, m1, mac;
	__u8 *c;
	__s32 age;

	if ((cookie & 0xffff) != 24)
		return 0;               /* client only, malformed, or a server cookie not of our size */
	asm volatile("" : "+r"(at));   /* clang knows at < 2^16 and would drop the check below */
	if (at > 0x3fff)
		return 0;
	c = data + at;
	if ((void *)(c + 24) > data_end)
		return 0;
	if (c[8] != 1)
		return 0;               /* version 1 only */
	stamp = (__u32)c[12] << 24 | (__u32)c[13] << 16 | (__u32)c[14] << 8 | c[15];
	now = (__u32)((__u64)((__s64)now_ns + g->clock_off) / 1000000000ULL);
	age = (__s32)(now - stamp);     /* serial arithmetic: the 2106 wrap is harmless */
	if (age > XDNS_COOKIE_MAX_AGE || age < -XDNS_COOKIE_MAX_FUTURE)
		return 0;
	m0 = xdns_ld64(c);
	m1 = xdns_ld64(c + 8);
	mac = xdns_ld64(c + 16);
	if (xdns_cookie_mac(g->secret[0][0], g->secret[0][1], m0, m1, a0, a1, ipv6) == mac)
		return 1;
	return g->cookie_prev && xdns_cookie_mac(g->secret[1][0], g->secret[1][1], m0, m1, a0, a1, ipv6) == mac;
}

/*
 * The coarse clock (CLOCK_MONOTONIC_COARSE, the epoch of the daemon's clock offset), read
 * once per tick on each CPU as the cache stage reads its own (cache.h, xdns_cache_now):
 * bpf_jiffies64 is an inlined load, while the coarse clock's helper costs about 50 ns an
 * answer in a guest (docs/perf/2026-11-28-rrl-table.md). Kept in the guard's first scratch
 * line with the rest of what an answer touches (docs/perf/2026-11-29-guard-floor.md). It lags
 * by less than two ticks; the bucket's credit is exact at any step, and cookie stamps are in
 * seconds.
 */
static __always_inline __u64 xdns_rrl_now(struct xdns_scratch *sc)
{
	__u64 j = bpf_jiffies64();

	if (j != sc->guard.clock_jiffies) {
		sc->guard.clock_ns = bpf_ktime_get_coarse_ns();
		sc->guard.clock_jiffies = j;
	}
	return sc->guard.clock_ns;
}

/*
 * A query's COOKIE option that the kernel answers by echoing it (RFC 9018 4.3: a valid server
 * cookie at most XDNS_COOKIE_REFRESH_AGE old, under the current secret, may be sent back as it
 * came; userspace does the same, xdns_guard::cookies::CookieSecrets::answer). A global
 * function of its own, not the gate, verified once alone: inlined at the answer and cache
 * stages' call sites, the resolver program with the guard (features off) went past the
 * verifier's 1M (docs/perf/2026-11-29-guard-goals.md). The 24 bytes at frame offset `at` (client cookie, version 1,
 * reserved, timestamp, hash) and their sum go to sc->guard.echo, since the answer's body
 * overwrites them in the frame. 0: not such a cookie (an older one, one of the previous
 * secret, or an invalid one: the gate decides, and userspace answers).
 */
__attribute__((noinline)) int xdns_cookie_echo(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 at, __u32 l3,
					      __u32 ipv6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct xdns_guard_rrl *g;
	struct xdns_guard_ctl *ctl;
	struct xdns_cookie_slot *m;
	__u64 m0, m1, mac, s, a0, a1 = 0, now_ns, k0, k1, fam;
	__u32 stamp, now, key = 0, slot;
	__s64 off;
	__u8 *c;
	__s32 age;

	if (!xdns_cfg.guard || !sc)
		return 0;
	ctl = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!ctl)
		return 0;
	g = &ctl->rrl;
	now_ns = xdns_rrl_now(sc);

	/* the source address as xdns_rrl_src reads it, by value (no pointer: the entry's frame) */
	if (l3 != 14 && l3 != 18)
		return 0;
	if (ipv6) {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		a0 = xdns_ld64(&ip6->saddr);
		a1 = xdns_ld64((__u8 *)&ip6->saddr + 8);
	} else {
		struct iphdr *ip = data + l3;

		if ((void *)(ip + 1) > data_end)
			return 0;
		a0 = ip->saddr;
	}

	asm volatile("" : "+r"(at));   /* as xdns_cookie_valid: keep the bound below */
	if (at > 0x3fff)
		return 0;
	c = data + at;
	if ((void *)(c + 24) > data_end)
		return 0;
	if (c[8] != 1)
		return 0;               /* version 1 only */
	stamp = (__u32)c[12] << 24 | (__u32)c[13] << 16 | (__u32)c[14] << 8 | c[15];
	/* the division once per tick (a 64-bit divide is tens of ns), not once per query */
	off = *(volatile __s64 *)&g->clock_off;        /* one read: the daemon rewrites it */
	if (sc->guard.sec_ns != now_ns || sc->guard.sec_off != off) {
		sc->guard.sec = (__u32)((__u64)((__s64)now_ns + off) / 1000000000ULL);
		sc->guard.sec_ns = now_ns;
		sc->guard.sec_off = off;
	}
	now = sc->guard.sec;
	age = (__s32)(now - stamp);
	if (age > XDNS_COOKIE_REFRESH_AGE || age < -XDNS_COOKIE_MAX_FUTURE)
		return 0;
	m0 = xdns_ld64(c);
	m1 = xdns_ld64(c + 8);
	mac = xdns_ld64(c + 16);
	k0 = g->secret[0][0];
	k1 = g->secret[0][1];
	fam = ipv6 ? 6 : 4;
	/* verified before on this CPU, byte for byte, from this address under this secret? */
	slot = (__u32)mac & (XDNS_COOKIE_SLOTS - 1);
	m = bpf_map_lookup_elem(&xdns_guard_cookies, &slot);
	if (!m || m->cookie[0] != m0 || m->cookie[1] != m1 || m->cookie[2] != mac || m->addr[0] != a0 ||
	    m->addr[1] != a1 || m->secret[0] != k0 || m->secret[1] != k1 || m->family != fam) {
		if (xdns_cookie_mac(k0, k1, m0, m1, a0, a1, ipv6) != mac)
			return 0;
		if (m) {
			/* per CPU: XDP does not nest on a CPU, so no reader sees it half written */
			m->cookie[0] = m0;
			m->cookie[1] = m1;
			m->cookie[2] = mac;
			m->addr[0] = a0;
			m->addr[1] = a1;
			m->secret[0] = k0;
			m->secret[1] = k1;
			m->family = fam;
		}
	}
	sc->guard.echo[0] = m0;
	sc->guard.echo[1] = m1;
	sc->guard.echo[2] = mac;
	/* little-endian words: their lane sum is the big-endian one byte-swapped (csum.h) */
	s = (m0 & 0xffffffff) + (m0 >> 32) + (m1 & 0xffffffff) + (m1 >> 32) + (mac & 0xffffffff) + (mac >> 32);
	sc->guard.echo_sum = xdns_csum_swap(xdns_csum_fold(s));
	return 1;
}

/* The account's tag (xdns_abi.h): a seeded hash of its key's words, never 0. Seeded per
 * load (xdns_cfg.seed), so that no client can aim its accounts at another's set. */
static __always_inline __u64 xdns_rrl_tag(__u64 a0, __u64 a1, __u64 meta)
{
	__u64 h = xdns_hash_step(xdns_cfg.seed ^ 0x52524c2d61636374ULL, a0);

	h = xdns_hash_fin(xdns_hash_step(xdns_hash_step(h, a1), meta));
	return h ? h : 1;
}

/* The third word of an account's key (struct xdns_rrl_key): answer, family, class and
 * source (never 0: the family is 4 or 6). */
static __always_inline __u64 xdns_rrl_meta(int ipv6, __u32 class, __u64 ident)
{
	return (__u64)(__u32)ident | (__u64)(ipv6 ? 6 : 4) << 32 | (__u64)(class & 0xff) << 40 |
	       (ident >> 32 & 0xff) << 48;
}

/* The account (struct xdns_rrl_key) of an answer as its tag hashes it: the client's address
 * words masked to its prefix, answer, family, class and source in one word (`meta`). */
struct xdns_rrl_acct {
	__u64 a0, a1, meta;
	__u64 tag;
};

/* The account of an answer from the client's address words (xdns_rrl_src), both the gate's
 * and the call's (which leaves it in the RRL memo). */
static __always_inline struct xdns_rrl_acct xdns_rrl_account(const struct xdns_guard_rrl *g, __u64 a0, __u64 a1,
							     int ipv6, __u32 class, __u64 ident)
{
	struct xdns_rrl_acct k;

	k.a0 = a0 & (ipv6 ? g->mask6[0] : g->mask4);
	k.a1 = a1 & g->mask6[1];
	k.meta = xdns_rrl_meta(ipv6, class, ident);
	k.tag = xdns_rrl_tag(k.a0, k.a1, k.meta);
	return k;
}

/*
 * An account's balance at `now` (10^-9 answers) before this answer: credited `rate` answers a
 * second since `stamp`, at most one second's worth (`full`). Another CPU's clock may be a tick
 * ahead: then no credit (and the caller leaves the stamp). The credit is exact, in 10^-9
 * answers (ns * answers a second): no division, nothing lost at any step; bal <= 2 * rate *
 * 10^9 < 2^63 for any u32 rate.
 */
static __always_inline __s64 xdns_rrl_balance(__s64 balance, __u64 stamp, __u32 rate, __u64 now)
{
	__s64 full = (__s64)rate * XDNS_RRL_ANSWER, bal;
	__u64 el = 0;

	if (now > stamp)
		el = now - stamp;
	if (el > 1000000000ULL)
		el = 1000000000ULL;     /* a second fills any bucket (no debt: bal >= 0); bounds below */
	bal = balance + (__s64)(el * rate);
	return bal > full ? full : bal;
}

/*
 * The token bucket of the account `tag`: 0 answer, 1 drop, 2 slip
 * (xdns_guard::rrl::Rrl::decide). Its set is one inlined array read; the ways are compared
 * by tag, no lock; a new account takes an empty way or the one updated longest ago. `m`:
 * the RRL memo's slot of the account (xdns_rrl_check, which wrote its key and tag), whose
 * way this notes; NULL (a constant: the gate) for none.
 */
static __always_inline int xdns_rrl_decide(struct xdns_scratch *sc, const struct xdns_guard_rrl *g, __u64 tag,
					   __u64 now, struct xdns_rrl_memo *m)
{
	struct xdns_rrl_account *a = NULL, *w;
	struct xdns_rrl_set *set;
	__s64 full = (__s64)g->rate * XDNS_RRL_ANSWER, bal;
	__u32 at = (__u32)(tag >> 32) & xdns_cfg.guard_rrl_mask, lim, slip = g->slip, i, ai = 0;
	__u64 stamp, oldest = ~0ULL;

	set = bpf_map_lookup_elem(&xdns_guard_rrl, &at);
	if (!set)
		return 0;
	for (i = 0; i < XDNS_RRL_WAYS; i++) {
		w = &set->way[i];
		if (w->tag == tag) {
			a = w;
			ai = i;
			break;
		}
	}
	if (!a) {
		/* a new account: an empty way, else the one updated longest ago */
		for (i = 0; i < XDNS_RRL_WAYS; i++) {
			w = &set->way[i];
			if (!w->tag) {
				a = w;
				ai = i;
				break;
			}
			if (w->stamp < oldest) {
				oldest = w->stamp;
				a = w;
				ai = i;
			}
		}
		if (!a)
			return 0;
		if (m)
			m->way = ai;
		if (a->tag && now - a->stamp < 1000000000ULL)
			sc->guard.rrl_full++;   /* a live account goes: the table is small */
		/* it starts full and pays for this answer (rate >= 1); the tag last, so that a
		 * reader on another CPU sees the new bucket under it (x86: stores keep their order) */
		a->stamp = now;
		a->balance = full - XDNS_RRL_ANSWER;
		a->limited = 0;
		asm volatile("" ::: "memory");
		a->tag = tag;
		return 0;
	}
	if (m)
		m->way = ai;
	stamp = a->stamp;
	bal = xdns_rrl_balance(a->balance, stamp, g->rate, now);
	if (now > stamp)
		a->stamp = now;
	if (bal >= XDNS_RRL_ANSWER) {
		a->balance = bal - XDNS_RRL_ANSWER;
		return 0;
	}
	a->balance = bal;               /* no debt (window 0): a limited answer costs nothing */
	lim = ++a->limited;
	if (slip && lim % slip == 0)
		return 2;
	return 1;
}

/* The answer features: per client /24 or /56, and NXDOMAIN per queried parent suffix. */
static __always_inline void xdns_answer_features(struct xdns_scratch *sc, __u32 iv, __u64 a0, int ipv6, __u32 len)
{
	struct xdns_guard_feat_key *fk = &sc->guard.gate_fkey;
	struct xdns_guard_qfeat_key *qk = &sc->guard.gate_qkey;

	__builtin_memset(fk, 0, sizeof(*fk));
	fk->addr = xdns_feat_prefix(a0, ipv6);
	fk->family = ipv6 ? 6 : 4;
	xdns_feat_add(sc, &xdns_guard_rfeat, fk, iv, len, &sc->guard.rfeat_full);
	if (sc->guard.gate_class == XDNS_RRL_NXDOMAIN && sc->guard.nx_len) {
		__builtin_memset(qk, 0, sizeof(*qk));
		qk->hash = sc->guard.nx_hash;
		qk->len = sc->guard.nx_len;
		xdns_feat_add(sc, &xdns_guard_nxfeat, qk, iv, len, &sc->guard.nxfeat_full);
	}
}

/*
 * The query's source address as the RRL account and the cookie MAC take it (IPv6: two words;
 * IPv4: a0, with a1 = 0), from the IP header at `l3` (14, or 18 behind one VLAN tag).
 * Returns 0 when there is no such header.
 */
static __always_inline int xdns_rrl_src(void *data, void *data_end, __u32 l3, int ipv6, __u64 *a0, __u64 *a1)
{
	if (l3 != 14 && l3 != 18)
		return 0;
	if (ipv6) {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		*a0 = xdns_ld64(&ip6->saddr);
		*a1 = xdns_ld64((__u8 *)&ip6->saddr + 8);
	} else {
		struct iphdr *ip = data + l3;

		if ((void *)(ip + 1) > data_end)
			return 0;
		*a0 = ip->saddr;
		*a1 = 0;
	}
	return 1;
}

/* The RRL memo's slot of an account's key (xdns_rrl_memo; one multiply, the product's top
 * bits: two accounts that share a slot cost only misses, so no seed). */
static __always_inline __u32 xdns_rrl_memo_slot(__u64 a0, __u64 a1, __u64 meta)
{
	_Static_assert((XDNS_RRL_MEMO_SLOTS & (XDNS_RRL_MEMO_SLOTS - 1)) == 0, "a power of two");
	return (__u32)(((a0 ^ a1 ^ meta ^ meta >> 32) * 0x9e3779b97f4a7c15ULL) >> (64 - __builtin_ctz(XDNS_RRL_MEMO_SLOTS))) &
	       (XDNS_RRL_MEMO_SLOTS - 1);
}

/*
 * RRL alone (no cookie to check, no features), as the answer stages decide it: 0 answer,
 * 1 drop, 2 slip (the gate then writes it). A global function of its own, verified once
 * alone and with a small frame: inlined at the answer and cache stages' call sites, its
 * bucket's values took the entry's frame from about 344 to 400 bytes, past what the
 * verifier allows with the gate's frame below it (bpf/README.md, "Stack"). `where` is the
 * IP header's offset | IPv6 << 16; the class is in sc->guard.gate_class. It writes the
 * account into its RRL memo slot (key, tag, rate; the way once decided).
 */
__attribute__((noinline)) int xdns_rrl_check(struct xdp_md *ctx, struct xdns_scratch *sc, __u32 where, __u64 ident)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_guard_ctl *c;
	struct xdns_rrl_memo *m;
	struct xdns_rrl_acct k;
	__u64 a0, a1 = 0;
	__u32 key = 0, at;
	int ipv6 = (where >> 16) & 1;

	if (!xdns_cfg.guard || !sc)
		return 0;
	c = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!c || !c->rrl.rate)
		return 0;
	if (!xdns_rrl_src(data, data_end, where & 0xffff, ipv6, &a0, &a1))
		return 0;
	/* the memo (xdns_rrl_memo): this account's key, its tag, the rate and (decide) its way */
	k = xdns_rrl_account(&c->rrl, a0, a1, ipv6, sc->guard.gate_class, ident);
	at = xdns_rrl_memo_slot(k.a0, k.a1, k.meta);
	m = bpf_map_lookup_elem(&xdns_guard_rrl_memo, &at);
	if (m) {
		/* per CPU: XDP does not nest on a CPU, so no reader sees it half written */
		m->key[0] = k.a0;
		m->key[1] = k.a1;
		m->key[2] = k.meta;
		m->tag = k.tag;
		m->rate = c->rrl.rate;
	}
	return xdns_rrl_decide(sc, &c->rrl, k.tag, xdns_rrl_now(sc), m);
}

/*
 * RRL alone, inline, for an answer of an account this CPU decided by the call before
 * (xdns_rrl_check left its key, tag, way and the rate in the RRL memo's slot of its key,
 * `xdns_guard_rrl_memo`): 0 when it paid a token of that account's shared bucket (the same
 * bucket, arithmetic and clock as xdns_rrl_decide's), -1 when the call must decide: another
 * account in the slot (the key's three words differ) or another rate, the way no longer holds
 * the tag (evicted, or taken by another account), or no token (the call then limits, with the
 * slip count). Nothing is written unless it pays, so the call after a -1 decides as if this
 * had not run; no bucket is copied per CPU, so CPUs sharing an account spend one balance and
 * never admit more than it holds. It skips the call, the second control read, the seeded tag
 * and the search of the ways (docs/perf/2026-11-29-rrl-memo.md, 2026-11-29-rrl-memo-map.md).
 */
static __always_inline int xdns_rrl_memo(struct xdp_md *ctx, struct xdns_scratch *sc, const struct xdns_pkt *pkt,
					 const struct xdns_guard_rrl *g, __u64 ident)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdns_rrl_account *a;
	struct xdns_rrl_memo *m;
	struct xdns_rrl_set *set;
	__u64 a0, a1 = 0, stamp, now, meta;
	__s64 bal;
	__u32 at, rate;
	int ipv6 = pkt->ipv6;

	/* nothing of this function is live across its helper calls (the slot's lookup included:
	 * the verifier inlines it, but clang sees a call): the key, the rate, the slot, the tag
	 * and the way go through the scratch, so the entry's frame does not grow; the source is
	 * masked in the branch that reads it (a mask chosen by `?:` kept a word on the stack) */
	sc->guard.rrl_rate = g->rate;
	if (pkt->l3_off != 14 && pkt->l3_off != 18)
		return -1;
	if (ipv6) {
		struct ipv6hdr *ip6 = data + pkt->l3_off;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		a0 = xdns_ld64(&ip6->saddr) & g->mask6[0];
		a1 = xdns_ld64((__u8 *)&ip6->saddr + 8) & g->mask6[1];
	} else {
		struct iphdr *ip = data + pkt->l3_off;

		if ((void *)(ip + 1) > data_end)
			return -1;
		a0 = ip->saddr & g->mask4;
	}
	meta = xdns_rrl_meta(ipv6, sc->guard.gate_class, ident);
	sc->guard.rrl_key[0] = a0;
	sc->guard.rrl_key[1] = a1;
	sc->guard.rrl_key[2] = meta;
	sc->guard.rrl_memo_at = xdns_rrl_memo_slot(a0, a1, meta);
	m = bpf_map_lookup_elem(&xdns_guard_rrl_memo, &sc->guard.rrl_memo_at);
	if (!m || m->key[2] != *(volatile __u64 *)&sc->guard.rrl_key[2] ||
	    m->key[0] != *(volatile __u64 *)&sc->guard.rrl_key[0] ||
	    m->key[1] != *(volatile __u64 *)&sc->guard.rrl_key[1] || m->rate != *(volatile __u32 *)&sc->guard.rrl_rate)
		return -1;
	sc->guard.rrl_memo_tag = m->tag;
	sc->guard.rrl_memo_way = m->way;
	xdns_rrl_now(sc);
	at = (__u32)(*(volatile __u64 *)&sc->guard.rrl_memo_tag >> 32) & xdns_cfg.guard_rrl_mask;
	set = bpf_map_lookup_elem(&xdns_guard_rrl, &at);
	if (!set)
		return -1;
	a = &set->way[*(volatile __u32 *)&sc->guard.rrl_memo_way & (XDNS_RRL_WAYS - 1)];
	if (a->tag != *(volatile __u64 *)&sc->guard.rrl_memo_tag)
		return -1;
	now = *(volatile __u64 *)&sc->guard.clock_ns;
	rate = *(volatile __u32 *)&sc->guard.rrl_rate;
	stamp = a->stamp;
	bal = xdns_rrl_balance(a->balance, stamp, rate, now);
	if (bal < XDNS_RRL_ANSWER)
		return -1;
	if (now > stamp)
		a->stamp = now;
	a->balance = bal - XDNS_RRL_ANSWER;
	sc->guard.rrl_memo_hits++;
	return 0;
}

/*
 * The gate (a global function: verified once alone, one call per gated answer). Its inputs
 * are in sc->guard.gate_* (xdns_abi.h); `ident` is the answer's identity, src << 32 | index.
 * Returns XDNS_CONTINUE (send the answer), XDNS_DROP_RRL, XDNS_ANSWERED_SLIP with the frame
 * rewritten (XDNS_DROP_REWRITE if that failed halfway), XDNS_PASS_COOKIE or
 * XDNS_PASS_COOKIE_NEW with the frame untouched.
 */
__attribute__((noinline)) int xdns_guard_gate(struct xdp_md *ctx, struct xdns_scratch *sc, __u64 ident)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct xdns_guard_rrl *g;
	struct xdns_guard_ctl *c;
	__u32 key = 0, l3, cookie, len;
	__u64 a0, a1 = 0, now, tag;
	int ipv6, d, v;

	if (!xdns_cfg.guard || !sc)
		return XDNS_CONTINUE;
	c = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!c)
		return XDNS_CONTINUE;
	g = &c->rrl;
	l3 = sc->guard.gate_l3;
	ipv6 = sc->guard.gate_ipv6 != 0;
	if (!xdns_rrl_src(data, data_end, l3, ipv6, &a0, &a1))
		return XDNS_CONTINUE;
	now = xdns_rrl_now(sc);
	cookie = g->cookies ? sc->guard.gate_cookie : 0;
	if (cookie & 0xffff) {
		if (xdns_cookie_valid(ctx, g, cookie, a0, a1, ipv6, now))
			return XDNS_PASS_COOKIE;
		if ((cookie & 0xffff) != 8)
			sc->guard.cookie_bad++;
	}
	len = sc->guard.gate_len;
	/* an allowlisted source (the guard stage's own match for this packet) is never limited */
	if (g->rate && !sc->guard.src_allowed) {
		if (ident & XDNS_RRL_SLIP_NOW) {
			d = 2;          /* decided inline (xdns_rrl_stage) */
		} else {
			tag = xdns_rrl_account(g, a0, a1, ipv6, sc->guard.gate_class, ident).tag;
			d = xdns_rrl_decide(sc, g, tag, now, NULL);
		}
		if (d == 1)
			return XDNS_DROP_RRL;
		if (d == 2) {
			v = xdns_put_slip(ctx, sc);
			if (v == XDNS_ANSWERED_SLIP && xdns_cfg.guard_features)
				xdns_answer_features(sc, c->interval, a0, ipv6,
						     (ipv6 ? 40 : 20) + 8 + XDNS_HDR_LEN + sc->guard.gate_qlen + 4);
			return v;
		}
	}
	if (cookie & 0xffff)
		return XDNS_PASS_COOKIE_NEW;
	if (xdns_cfg.guard_features)
		xdns_answer_features(sc, c->interval, a0, ipv6, len);
	return XDNS_CONTINUE;
}

/* The RRL class of a reply, from its header as xdns's userspace classifies its own. */
static __always_inline __u32 xdns_rrl_class(__u16 flags, __u16 an, __u16 ns)
{
	__u16 rcode = flags & 0xf;

	if (rcode == 3)
		return XDNS_RRL_NXDOMAIN;
	if (rcode != 0)
		return XDNS_RRL_ERROR;
	if (an)
		return XDNS_RRL_POSITIVE;
	if (ns && !(flags & XDNS_F_AA))
		return XDNS_RRL_REFERRAL;
	return XDNS_RRL_NODATA;
}

/*
 * Whether the reply of `dns_out` bytes still fits the payload limit xdns_plan chose its body by
 * with an echoed COOKIE option (a query with one has an OPT record, so the reply has ours).
 * If not, the query goes through the gate: a valid cookie then passes to userspace.
 */
static __always_inline int xdns_echo_fits(const struct xdns_query *q, __u32 dns_out)
{
	__u32 limit = q->payload < xdns_cfg.edns_payload ? q->payload : xdns_cfg.edns_payload;

	if (limit < 512)
		limit = 512;
	return q->has_opt && dns_out + XDNS_COOKIE_OPT_LEN <= limit;
}

/*
 * The gate, as the answer stages call it: `a` is the whole answer (its class), `flags` and
 * `dns_out` the reply planned, `qsum` the question's unfolded checksum, `ident` the answer's
 * identity (src << 32 | index). XDNS_CONTINUE: write the answer.
 */
static __always_inline enum xdns_verdict xdns_rrl_stage(struct xdp_md *ctx, struct xdns_scratch *sc,
							 const struct xdns_pkt *pkt, const struct xdns_query *q,
							 const struct xdns_answer *a, __u16 flags, __u32 dns_out,
							 __u64 qsum, __u64 ident)
{
	struct xdns_guard_ctl *c;
	__u32 key = 0;

	if (!xdns_cfg.guard)
		return XDNS_CONTINUE;
	sc->guard.echo_len = 0;         /* until a cookie below is echoed (answer.h reads it) */
	c = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	if (!c || !(c->rrl.rate || (c->rrl.cookies && q->cookie_len) || xdns_cfg.guard_features))
		return XDNS_CONTINUE;
	sc->guard.gate_class = xdns_rrl_class(a->flags, a->ancount, a->nscount);
	if (!xdns_cfg.guard_features && !(c->rrl.cookies && q->cookie_len)) {
		/* RRL alone (rate > 0 here), the common case, inline: no call but for a slip
		 * (docs/perf/2026-11-28-rrl-table.md); the gate does the rest. Before the cookie
		 * check below (a query it reaches has a COOKIE option, so never comes here): the
		 * control value's pointer is not live across that call */
		int d;

		if (sc->guard.src_allowed)
			return XDNS_CONTINUE;   /* allowlisted: never limited */
		if (xdns_rrl_memo(ctx, sc, pkt, &c->rrl, ident) == 0)
			return XDNS_CONTINUE;   /* the last account's bucket paid, inline */
		d = xdns_rrl_check(ctx, sc, pkt->l3_off | (__u32)pkt->ipv6 << 16, ident);
		if (d == 0)
			return XDNS_CONTINUE;
		if (d == 1)
			return XDNS_DROP_RRL;
		ident |= XDNS_RRL_SLIP_NOW;     /* the gate writes the slip */
	} else if (c->rrl.cookies && q->cookie_len == 24 && !xdns_cfg.guard_features && xdns_echo_fits(q, dns_out)) {
		/* a fresh valid server cookie: the client proved its address, so no RRL; answered
		 * here with the cookie echoed, not through the gate (docs/perf/2026-11-29-guard-goals.md) */
		if (xdns_cookie_echo(ctx, sc, q->cookie_at, pkt->l3_off, pkt->ipv6)) {
			sc->guard.echo_len = XDNS_COOKIE_OPT_LEN;
			sc->guard.cookie_echoed++;
			return XDNS_CONTINUE;
		}
	}
	sc->guard.gate_flags = flags;
	sc->guard.gate_len = dns_out + 8 + (pkt->ipv6 ? 40 : 20);
	sc->guard.gate_l3 = pkt->l3_off;
	sc->guard.gate_ip_hlen = pkt->ip_hlen;
	sc->guard.gate_dns_off = pkt->dns_off;
	sc->guard.gate_ipv6 = pkt->ipv6;
	sc->guard.gate_qlen = q->qlen;
	sc->guard.gate_id = q->id;
	sc->guard.gate_cookie = (__u32)q->cookie_at << 16 | q->cookie_len;
	sc->guard.gate_sum = qsum;
	return (enum xdns_verdict)xdns_guard_gate(ctx, sc, ident);
}

/* Whether RRL or cookies are on: the reply memo, which cannot slip, then leaves cache hits
 * to the cache stage, which goes through the gate. (With the features alone it answers on:
 * its answers are not in the answer features.) */
static __always_inline int xdns_rrl_gated(void)
{
	struct xdns_guard_ctl *c;
	__u32 key = 0;

	if (!xdns_cfg.guard)
		return 0;
	c = bpf_map_lookup_elem(&xdns_guard_ctl, &key);
	return c && (c->rrl.rate || c->rrl.cookies);
}

#endif /* XDNS_RRL_H */
