//! Response Rate Limiting (RRL): decides for each response whether it is sent, dropped, or
//! sent truncated (TC=1, "slip") so that a real resolver retries over TCP.
//!
//! Why: an authoritative server is an amplifier for spoofed queries. RRL bounds how many
//! identical-looking responses one network sends per second, the way Knot DNS's `mod-rrl` and
//! BIND's `rate-limit` do, so a reflection attack gets little out of us while a legitimate
//! resolver behind the same prefix still gets through (slip → TCP).
//!
//! Semantics (shared by Knot and BIND, and kept here):
//! - Accounts are per **(client prefix, response class, name)**: the client address masked
//!   to `ipv4_prefix` (default /24) or `ipv6_prefix` (default /56), one of
//!   [`ResponseClass`], and a hash of the name the caller accounts the response to. For
//!   [`ResponseClass::Error`] the name is ignored (one account per prefix), as BIND does, so
//!   random garbage cannot spread over many accounts.
//! - Each account is a token bucket: it is credited `rate` tokens per second (or its class's
//!   own rate, BIND-style, when [`RrlConfig::class_rates`] names one), holds at most one
//!   second's worth (the burst), and a response costs one token. With no token left the response
//!   is *limited*. The balance may fall to `-window × rate` (BIND's `window`; 0 = Knot's
//!   behaviour, where an account recovers as soon as the client slows down).
//! - Of the limited responses, every `slip`-th (the `slip`-th, `2·slip`-th, …) is sent
//!   truncated instead of dropped: `slip = 0` never, `1` always, `2` every other one.
//!
//! What the caller passes as the name (BIND's and Knot's choices): the query name for
//! positive answers and referrals; the zone apex (SOA owner) for NXDOMAIN and NODATA, so a
//! random-subdomain flood shares one account; the wildcard's owner for answers synthesised
//! from a wildcard ([`ResponseClass::Wildcard`]). [`name_hash`] hashes a wire name
//! case-insensitively for that purpose. Allowlisted clients and clients with a valid server
//! cookie are not passed to [`Rrl::decide`] at all (the daemon's and kernel's job).
//!
//! The table is fixed-size and set-associative (8 ways): memory is allocated once in
//! [`Rrl::new`]; a new account evicts the least recently used one of its set. An entry is
//! 32 bytes. Keys are hashed with SipHash-1-3 under [`RrlConfig::hash_key`] (the daemon sets
//! a random one) so that nobody outside can aim many prefixes at one set to evict a victim's
//! account.

use std::hash::Hasher;
use std::net::IpAddr;

use siphasher::sip::SipHasher13;

use crate::lists::Prefix;

/// Ways per set in the account table.
pub const WAYS: usize = 8;

/// What kind of response is being rate limited; each class has its own accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ResponseClass {
    /// An answer with data for the query name.
    Positive = 1,
    /// NXDOMAIN.
    NxDomain = 2,
    /// NOERROR with an empty answer (NODATA).
    NoData = 3,
    /// A delegation to another zone.
    Referral = 4,
    /// Any other error rcode (FORMERR, SERVFAIL, REFUSED, NOTIMP, …); the name is ignored.
    Error = 5,
    /// A positive answer synthesised from a wildcard; the name is the wildcard's owner.
    Wildcard = 6,
}

/// What to do with one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Send it as built.
    Pass,
    /// Do not send anything.
    Drop,
    /// Send it truncated: header and question only, TC=1.
    Slip,
}

/// RRL parameters (`[guard] rrl = { … }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RrlConfig {
    /// Responses per second per account; 0 turns RRL off. Default 200.
    pub rate: u32,
    /// Per-class rates that replace `rate` for their class (BIND's `nxdomains-per-second`,
    /// `errors-per-second`, …; 0 = that class unlimited). Default none: one rate, as Knot.
    pub class_rates: Vec<(ResponseClass, u32)>,
    /// Every `slip`-th limited response is sent truncated; 0 = never, 1 = always. Default 2.
    pub slip: u32,
    /// IPv4 client prefix length that shares an account. Default 24.
    pub ipv4_prefix: u8,
    /// IPv6 client prefix length that shares an account. Default 56.
    pub ipv6_prefix: u8,
    /// Seconds of debt an account may build up while flooding (BIND's `window`). Default 0.
    pub window: u32,
    /// Number of accounts kept (rounded up to a multiple of [`WAYS`]). Default 393,216.
    pub table_size: usize,
    /// Key of the hash that spreads accounts over the table; set it at random. Default zero.
    pub hash_key: [u8; 16],
}

impl Default for RrlConfig {
    fn default() -> Self {
        RrlConfig {
            rate: 200,
            class_rates: Vec::new(),
            slip: 2,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            window: 0,
            table_size: 393_216,
            hash_key: [0; 16],
        }
    }
}

/// One account: 32 bytes.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// Hash of the account key; 0 = free slot.
    tag: u64,
    /// Last time the balance was brought up to date, in ns.
    stamp: u64,
    /// Balance in thousandths of a response.
    balance: i64,
    /// Limited responses since the account was created, for the slip pattern.
    limited: u32,
    _pad: u32,
}

/// The rate limiter: a fixed table of accounts. Not thread-safe by itself; the daemon keeps
/// one per worker or wraps it in a lock.
#[derive(Debug, Clone)]
pub struct Rrl {
    cfg: RrlConfig,
    table: Vec<Entry>,
    sets: usize,
}

const MILLI: i64 = 1000;

impl Rrl {
    /// Allocates the whole table now; it never grows.
    pub fn new(cfg: RrlConfig) -> Self {
        let sets = cfg.table_size.div_ceil(WAYS).max(1);
        Rrl {
            table: vec![Entry::default(); sets * WAYS],
            sets,
            cfg,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &RrlConfig {
        &self.cfg
    }

    /// Number of accounts the table can hold (fixed at creation).
    pub fn capacity(&self) -> usize {
        self.table.len()
    }

    /// Number of accounts in use.
    pub fn in_use(&self) -> usize {
        self.table.iter().filter(|e| e.tag != 0).count()
    }

    /// Decides one response. `now_ns` is a monotonic clock in nanoseconds supplied by the
    /// caller; time going backwards is treated as no time passing. `name_hash` is the
    /// [`name_hash`] of the name the response is accounted to (ignored for
    /// [`ResponseClass::Error`]).
    pub fn decide(
        &mut self,
        now_ns: u64,
        client: IpAddr,
        class: ResponseClass,
        name_hash: u64,
    ) -> Decision {
        let rate = self.rate_for(class);
        if rate == 0 {
            return Decision::Pass;
        }
        let tag = self.key(client, class, name_hash);
        let rate_m = i64::from(rate) * MILLI;
        let floor = -(i64::from(self.cfg.window) * rate_m);
        let set = (tag % self.sets as u64) as usize;
        let ways = &mut self.table[set * WAYS..set * WAYS + WAYS];

        let i = match ways.iter().position(|e| e.tag == tag) {
            Some(i) => i,
            None => {
                // A free slot, else the least recently used of the set.
                let i = ways
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| (e.tag != 0, e.stamp))
                    .map(|(i, _)| i)
                    .unwrap_or(0);
                ways[i] = Entry {
                    tag,
                    stamp: now_ns,
                    balance: rate_m,
                    limited: 0,
                    _pad: 0,
                };
                i
            }
        };
        let e = &mut ways[i];
        let elapsed = now_ns.saturating_sub(e.stamp);
        // Credit: rate tokens per second, in thousandths, never past a full bucket. Computed
        // in u128 (elapsed × rate cannot overflow it), then capped, so the cast is exact.
        let room = (rate_m - e.balance).max(0) as u128;
        let credit = (u128::from(elapsed) * u128::from(rate) / 1_000_000).min(room) as i64;
        e.balance = (e.balance + credit).min(rate_m);
        // The clock moves on only with the credit it gave (or over a full bucket): at many
        // queries per token a step may give less than a thousandth, which must not be lost.
        if credit > 0 || e.balance == rate_m {
            e.stamp = e.stamp.max(now_ns);
        }

        if e.balance >= MILLI {
            e.balance -= MILLI;
            return Decision::Pass;
        }
        // A limited response costs only where debt is allowed (BIND's window); with none
        // (Knot's behaviour) the credit gathered since keeps growing, so that a client
        // flooding faster than the rate still gets `rate` responses a second.
        if floor < 0 {
            e.balance = (e.balance - MILLI).max(floor);
        }
        e.limited = e.limited.wrapping_add(1);
        // `%` rather than `is_multiple_of`: the workspace's rust-version is 1.82.
        #[allow(clippy::manual_is_multiple_of)]
        match self.cfg.slip {
            0 => Decision::Drop,
            n if e.limited % n == 0 => Decision::Slip,
            _ => Decision::Drop,
        }
    }

    /// The rate that applies to `class`: its entry in `class_rates`, else `rate`.
    pub fn rate_for(&self, class: ResponseClass) -> u32 {
        self.cfg
            .class_rates
            .iter()
            .find(|(c, _)| *c == class)
            .map_or(self.cfg.rate, |&(_, r)| r)
    }

    fn key(&self, client: IpAddr, class: ResponseClass, name_hash: u64) -> u64 {
        let prefix = match client {
            IpAddr::V4(_) => Prefix::covering(client, self.cfg.ipv4_prefix),
            IpAddr::V6(_) => Prefix::covering(client, self.cfg.ipv6_prefix),
        };
        let mut h = SipHasher13::new_with_key(&self.cfg.hash_key);
        match prefix {
            Prefix::V4(p) => {
                h.write_u8(4);
                h.write(&p.addr);
            }
            Prefix::V6(p) => {
                h.write_u8(6);
                h.write(&p.addr);
            }
        }
        h.write_u8(class as u8);
        if class != ResponseClass::Error {
            h.write_u64(name_hash);
        }
        // 0 marks a free slot.
        h.finish().max(1)
    }
}

/// A case-insensitive hash of a wire-format name, for [`Rrl::decide`]'s `name_hash`.
pub fn name_hash(wire: &[u8]) -> u64 {
    let mut h = SipHasher13::new();
    for &b in wire {
        h.write_u8(b.to_ascii_lowercase());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::*;

    const SEC: u64 = 1_000_000_000;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn rrl(rate: u32, slip: u32) -> Rrl {
        Rrl::new(RrlConfig {
            rate,
            slip,
            table_size: 64,
            ..RrlConfig::default()
        })
    }

    #[test]
    fn steady_rate_under_the_limit_always_passes() {
        let mut r = rrl(10, 2);
        let n = name_hash(b"\x03www\x07example\x00");
        // 9 responses per second, evenly spaced, for a minute.
        for i in 0..9 * 60u64 {
            let t = i * SEC / 9;
            assert_eq!(
                r.decide(t, ip("192.0.2.1"), ResponseClass::Positive, n),
                Pass,
                "response {i}"
            );
        }
    }

    #[test]
    fn burst_over_the_limit_drops_with_the_exact_slip_pattern() {
        for (slip, pattern) in [
            (0, [Drop, Drop, Drop, Drop, Drop, Drop]),
            (1, [Slip, Slip, Slip, Slip, Slip, Slip]),
            (2, [Drop, Slip, Drop, Slip, Drop, Slip]),
            (3, [Drop, Drop, Slip, Drop, Drop, Slip]),
        ] {
            let mut r = rrl(5, slip);
            let got: Vec<Decision> = (0..11)
                .map(|_| r.decide(SEC, ip("192.0.2.1"), ResponseClass::Positive, 7))
                .collect();
            assert_eq!(
                got[..5],
                [Pass; 5],
                "slip {slip}: one second of burst passes"
            );
            assert_eq!(got[5..], pattern, "slip {slip}");
        }
    }

    #[test]
    fn tokens_come_back_at_the_rate() {
        let mut r = rrl(4, 0);
        let c = ip("198.51.100.9");
        for _ in 0..4 {
            assert_eq!(r.decide(0, c, ResponseClass::NxDomain, 1), Pass);
        }
        assert_eq!(r.decide(0, c, ResponseClass::NxDomain, 1), Drop);
        // A quarter second later one token is back (4/s), and only one.
        assert_eq!(r.decide(SEC / 4, c, ResponseClass::NxDomain, 1), Pass);
        assert_eq!(r.decide(SEC / 4, c, ResponseClass::NxDomain, 1), Drop);
        // A long pause refills to the burst of one second, not more.
        let got: Vec<_> = (0..6)
            .map(|_| r.decide(100 * SEC, c, ResponseClass::NxDomain, 1))
            .collect();
        assert_eq!(got, [Pass, Pass, Pass, Pass, Drop, Drop]);
    }

    #[test]
    fn a_flood_faster_than_the_rate_still_gets_the_rate() {
        // 10/s, a query every 10 ms for 3 s: the burst (10) and then 10 a second; the limited
        // queries in between cost nothing (Knot; the kernel's bpf/rrl.h does the same)
        let mut r = rrl(10, 0);
        let c = ip("198.18.0.1");
        let passed = (0..300u64)
            .filter(|i| r.decide(i * SEC / 100, c, ResponseClass::Positive, 1) == Pass)
            .count();
        assert!((38..=41).contains(&passed), "{passed}");
    }

    #[test]
    fn a_flood_much_faster_than_the_rate_is_not_starved() {
        // 5/s, a query every 20 µs (each step credits a tenth of a thousandth) for 2 s
        let mut r = rrl(5, 0);
        let c = ip("198.18.0.1");
        let passed = (0..100_000u64)
            .filter(|i| r.decide(i * 20_000, c, ResponseClass::Positive, 1) == Pass)
            .count();
        assert!((13..=16).contains(&passed), "{passed}");
    }

    #[test]
    fn window_keeps_a_flooder_limited_after_it_slows_down() {
        let mut knot = rrl(2, 0);
        let mut bind = Rrl::new(RrlConfig {
            rate: 2,
            slip: 0,
            window: 5,
            table_size: 64,
            ..RrlConfig::default()
        });
        let c = ip("192.0.2.1");
        // 100 responses at t = 0: both limit after the burst.
        for r in [&mut knot, &mut bind] {
            for i in 0..100 {
                let want = if i < 2 { Pass } else { Drop };
                assert_eq!(r.decide(0, c, ResponseClass::Positive, 1), want);
            }
        }
        // One second later Knot's account is full again; BIND's is still paying the debt
        // (floor −10, +2 per second: positive after 5.5 s).
        assert_eq!(knot.decide(SEC, c, ResponseClass::Positive, 1), Pass);
        assert_eq!(bind.decide(SEC, c, ResponseClass::Positive, 1), Drop);
        assert_eq!(bind.decide(7 * SEC, c, ResponseClass::Positive, 1), Pass);
    }

    #[test]
    fn prefixes_classes_and_names_are_separate_accounts() {
        let mut r = rrl(3, 0);
        let exhaust = |r: &mut Rrl, c: &str, class, n| {
            for _ in 0..3 {
                assert_eq!(r.decide(0, ip(c), class, n), Pass);
            }
            assert_eq!(r.decide(0, ip(c), class, n), Drop);
        };
        exhaust(&mut r, "192.0.2.1", ResponseClass::Positive, 1);
        // The same /24 shares the account.
        assert_eq!(
            r.decide(0, ip("192.0.2.200"), ResponseClass::Positive, 1),
            Drop
        );
        // Another /24, another class, another name: fresh accounts.
        exhaust(&mut r, "192.0.3.1", ResponseClass::Positive, 1);
        exhaust(&mut r, "192.0.2.1", ResponseClass::NxDomain, 1);
        exhaust(&mut r, "192.0.2.1", ResponseClass::Positive, 2);
        // IPv6: the same /56 shares, the next /56 does not.
        exhaust(&mut r, "2001:db8:0:100::1", ResponseClass::Referral, 1);
        assert_eq!(
            r.decide(0, ip("2001:db8:0:1ff::9"), ResponseClass::Referral, 1),
            Drop
        );
        assert_eq!(
            r.decide(0, ip("2001:db8:0:200::1"), ResponseClass::Referral, 1),
            Pass
        );
        // Errors ignore the name: one account per prefix.
        exhaust(&mut r, "203.0.113.1", ResponseClass::Error, 1);
        assert_eq!(
            r.decide(0, ip("203.0.113.1"), ResponseClass::Error, 99),
            Drop
        );
    }

    #[test]
    fn per_class_rates_override_the_default() {
        let mut r = Rrl::new(RrlConfig {
            rate: 5,
            class_rates: vec![(ResponseClass::NxDomain, 2), (ResponseClass::Referral, 0)],
            slip: 0,
            table_size: 64,
            ..RrlConfig::default()
        });
        let c = ip("192.0.2.1");
        let passes =
            |r: &mut Rrl, class| (0..10).filter(|_| r.decide(0, c, class, 1) == Pass).count();
        assert_eq!(passes(&mut r, ResponseClass::Positive), 5);
        assert_eq!(passes(&mut r, ResponseClass::NxDomain), 2);
        assert_eq!(passes(&mut r, ResponseClass::Referral), 10, "0 = unlimited");
        assert_eq!(r.rate_for(ResponseClass::Error), 5);
    }

    #[test]
    fn configurable_prefix_lengths() {
        let mut r = Rrl::new(RrlConfig {
            rate: 1,
            slip: 0,
            ipv4_prefix: 32,
            ipv6_prefix: 128,
            table_size: 64,
            ..RrlConfig::default()
        });
        assert_eq!(
            r.decide(0, ip("192.0.2.1"), ResponseClass::Positive, 1),
            Pass
        );
        assert_eq!(
            r.decide(0, ip("192.0.2.1"), ResponseClass::Positive, 1),
            Drop
        );
        assert_eq!(
            r.decide(0, ip("192.0.2.2"), ResponseClass::Positive, 1),
            Pass
        );
        assert_eq!(
            r.decide(0, ip("2001:db8::1"), ResponseClass::Positive, 1),
            Pass
        );
        assert_eq!(
            r.decide(0, ip("2001:db8::2"), ResponseClass::Positive, 1),
            Pass
        );
    }

    #[test]
    fn full_table_recycles_and_does_not_grow() {
        let mut r = rrl(1, 0);
        let cap = r.capacity();
        assert_eq!(cap, 64);
        let before = r.table.capacity();
        for i in 0..10_000u32 {
            let c = IpAddr::from(std::net::Ipv4Addr::from(i << 8));
            r.decide(u64::from(i), c, ResponseClass::Positive, 1);
        }
        assert_eq!(r.in_use(), cap);
        assert_eq!(r.table.capacity(), before);
        // The most recent client is still tracked (LRU evicts old ones, not the newest).
        let last = IpAddr::from(std::net::Ipv4Addr::from(9_999u32 << 8));
        assert_eq!(r.decide(10_000, last, ResponseClass::Positive, 1), Drop);
    }

    #[test]
    fn rate_zero_is_off_and_time_going_backwards_is_harmless() {
        let mut off = rrl(0, 2);
        for _ in 0..1000 {
            assert_eq!(
                off.decide(0, ip("192.0.2.1"), ResponseClass::Positive, 1),
                Pass
            );
        }
        let mut r = rrl(2, 0);
        assert_eq!(
            r.decide(10 * SEC, ip("192.0.2.1"), ResponseClass::Positive, 1),
            Pass
        );
        assert_eq!(
            r.decide(10 * SEC, ip("192.0.2.1"), ResponseClass::Positive, 1),
            Pass
        );
        assert_eq!(
            r.decide(0, ip("192.0.2.1"), ResponseClass::Positive, 1),
            Drop
        );
        assert_eq!(
            r.decide(u64::MAX, ip("192.0.2.1"), ResponseClass::Positive, 1),
            Pass
        );
    }

    #[test]
    fn name_hash_ignores_case() {
        assert_eq!(
            name_hash(b"\x03WwW\x07Example\x00"),
            name_hash(b"\x03www\x07example\x00")
        );
        assert_ne!(
            name_hash(b"\x03www\x07example\x00"),
            name_hash(b"\x03ww2\x07example\x00")
        );
    }
}
