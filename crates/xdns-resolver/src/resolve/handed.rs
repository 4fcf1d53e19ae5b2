//! What kernel iteration (issue 32; the daemon's `kit` module) takes from the resolver and
//! gives it:
//! - [`Resolver::delegations`]: the zone cuts the resolver learnt, with their servers'
//!   addresses and expiry, for the kernel's zone map (the kernel then sends a miss straight to
//!   the deepest known cut).
//! - [`Resolver::resolve_handed`]: a reply the kernel got for a client's question, used as if
//!   the resolver's own exchange with that server had got it: a referral continues the
//!   iteration from the child zone, a final answer is cached and answered as any other. A
//!   reply that cannot be used ([`HandedUse`]) leaves the question to an ordinary resolution.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use xdns_wire::response::rcode::{FORMERR as RCODE_FORMERR, REFUSED as RCODE_REFUSED, SERVFAIL as RCODE_SERVFAIL};
use xdns_wire::CacheKey;

use super::classify::{classify, Class};
use super::{Resolution, Resolver, RCODE_NOERROR, RCODE_NXDOMAIN};
use crate::msg::{parse_reply, rtype, Reply, Rr};
use crate::store::lock;

/// A zone cut as kernel iteration keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delegation {
    /// The cut (lowercased wire name).
    pub zone: Vec<u8>,
    /// Its servers' addresses, best first.
    pub addrs: Vec<IpAddr>,
    /// CLOCK_MONOTONIC nanoseconds (the resolver's clock) when it stops being valid.
    pub expires_ns: u64,
}

/// A reply someone else (the kernel) got for the resolver: to the client's name and type,
/// asked in full with RD=0 of `server`, a server of `zone`. Whoever asked has checked it came
/// from that server's port 53 with the ID and the question (0x20 case included) sent.
#[derive(Clone, Debug)]
pub struct Handed {
    /// The cut asked (lowercased wire name).
    pub zone: Vec<u8>,
    /// The server asked.
    pub server: SocketAddr,
    /// The reply as received.
    pub reply: Vec<u8>,
    /// Time from the query to the reply, when known (an RTT sample for the server).
    pub rtt: Option<Duration>,
}

/// What became of a handed reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandedUse {
    /// A final answer (data, CNAME chain, NXDOMAIN, NODATA): cached and answered.
    Answer,
    /// A referral: the iteration went on from the child zone.
    Referral,
    /// Not needed: the answer was cached, or a resolution of the same question was running.
    Joined,
    /// TC=1: resolved afresh (over TCP when the server truncates again).
    Truncated,
    /// An RCODE other than NOERROR, NXDOMAIN and those counted apart below (NOTIMP, ...).
    Rcode,
    /// Lame: no data, SOA or downward referral within the zone asked (out-of-bailiwick
    /// records only, an upward referral...).
    Lame,
    /// Not a DNS reply the resolver can parse.
    Malformed,
    /// SERVFAIL: resolved afresh (the resolver's own exchanges go to the other servers).
    Servfail,
    /// REFUSED: resolved afresh, as [`HandedUse::Servfail`].
    Refused,
    /// FORMERR to the kernel's query, which always carries an OPT record: a server from
    /// before EDNS (RFC 6891 section 7). Resolved afresh, where the resolver's exchange asks
    /// again without EDNS.
    EdnsFallback,
    /// A referral without an address for its NS names in the glue (of a family the resolver
    /// asks): the iteration went on from the child zone and resolved the NS names.
    Glueless,
    /// A CNAME chain leaving the zone asked (its end not answered there): the iteration went
    /// on from the chain's end.
    CnameOut,
    /// An answer synthesised from a DNAME (RFC 6672): cached with the DNAME, the iteration
    /// going on from the synthesised CNAME's target when that leaves the zone.
    Dname,
}

impl HandedUse {
    /// Every use, in counter order.
    pub const ALL: [HandedUse; 13] = [
        HandedUse::Answer,
        HandedUse::Referral,
        HandedUse::Joined,
        HandedUse::Truncated,
        HandedUse::Rcode,
        HandedUse::Lame,
        HandedUse::Malformed,
        HandedUse::Servfail,
        HandedUse::Refused,
        HandedUse::EdnsFallback,
        HandedUse::Glueless,
        HandedUse::CnameOut,
        HandedUse::Dname,
    ];

    /// Its stable name (counters).
    pub fn name(self) -> &'static str {
        match self {
            HandedUse::Answer => "answer",
            HandedUse::Referral => "referral",
            HandedUse::Joined => "joined",
            HandedUse::Truncated => "truncated",
            HandedUse::Rcode => "rcode",
            HandedUse::Lame => "lame",
            HandedUse::Malformed => "malformed",
            HandedUse::Servfail => "servfail",
            HandedUse::Refused => "refused",
            HandedUse::EdnsFallback => "edns_fallback",
            HandedUse::Glueless => "glueless",
            HandedUse::CnameOut => "cname_out",
            HandedUse::Dname => "dname",
        }
    }

    /// True when the reply was used (the iteration took it as its own exchange's).
    pub fn used(self) -> bool {
        matches!(
            self,
            HandedUse::Answer | HandedUse::Referral | HandedUse::Glueless | HandedUse::CnameOut | HandedUse::Dname
        )
    }
}

/// The address of an A or AAAA glue record.
fn glue_address(r: &Rr) -> Option<IpAddr> {
    match r.rtype {
        rtype::A => <[u8; 4]>::try_from(r.rdata.as_slice()).ok().map(IpAddr::from),
        rtype::AAAA => <[u8; 16]>::try_from(r.rdata.as_slice()).ok().map(IpAddr::from),
        _ => None,
    }
}

/// A reply in hand for the first step of an iteration.
pub(super) struct First {
    pub zone: Vec<u8>,
    pub server: SocketAddr,
    pub reply: Reply,
}

impl Resolver {
    /// Bumped whenever the zone map or the server addresses change: copy
    /// [`Resolver::delegations`] again only then (and as cuts expire).
    pub fn infra_generation(&self) -> u64 {
        self.infra.generation.load(Relaxed)
    }

    /// The zone cuts below the root that the resolver knows and that have not expired, each
    /// with the known addresses of its servers (at most `per_family` of each family the
    /// resolver asks; by smoothed RTT, servers held down last, then by address, so that the
    /// same state gives the same list) and the earlier of the NS set's and those addresses'
    /// expiry; servers held down for timing out are left out while the cut has another. A
    /// cut with no known address is left out. Every cut came through the bailiwick
    /// rules of [`classify`] (a referral strictly below the zone asked, towards the name),
    /// its addresses from in-bailiwick glue or from resolving its NS names.
    pub fn delegations(&self, per_family: usize) -> Vec<Delegation> {
        let now = self.now_ns();
        let zones: Vec<(Vec<u8>, crate::store::Deleg)> = lock(&self.infra.zones)
            .iter()
            .filter(|(z, d)| z.as_slice() != [0] && d.expires_ns > now)
            .map(|(z, d)| (z.clone(), d.clone()))
            .collect();
        let mut out = Vec::with_capacity(zones.len());
        let addrs = lock(&self.infra.addrs);
        let mut found: Vec<(Vec<u8>, Vec<(IpAddr, u64)>, u64)> = Vec::with_capacity(zones.len());
        for (zone, d) in zones {
            let mut ips: Vec<(IpAddr, u64)> = Vec::new();
            for n in &d.ns {
                if let Some(a) = addrs.get(n).filter(|a| a.expires_ns > now) {
                    for ip in &a.ips {
                        if self.family_ok(ip) && !ips.iter().any(|(i, _)| i == ip) {
                            ips.push((*ip, a.expires_ns));
                        }
                    }
                }
            }
            if !ips.is_empty() {
                found.push((zone, ips, d.expires_ns));
            }
        }
        drop(addrs);
        let rtt = lock(&self.infra.rtt);
        for (zone, mut ips, expires) in found {
            ips.sort_by_key(|(ip, _)| match rtt.get(ip) {
                Some(r) => (r.held_until_ns > now, r.srtt_us, *ip),
                None => (false, super::servers::INITIAL_SRTT_US, *ip),
            });
            // servers held down (timing out) are left out while another is not
            if ips.iter().any(|(ip, _)| rtt.get(ip).is_none_or(|r| r.held_until_ns <= now)) {
                ips.retain(|(ip, _)| rtt.get(ip).is_none_or(|r| r.held_until_ns <= now));
            }
            let mut kept: Vec<IpAddr> = Vec::new();
            let mut until = expires;
            for (v4, _) in [(true, ()), (false, ())] {
                for (ip, exp) in ips
                    .iter()
                    .filter(|(ip, _)| ip.is_ipv4() == v4)
                    .take(per_family)
                {
                    kept.push(*ip);
                    until = until.min(*exp);
                }
            }
            out.push(Delegation {
                zone,
                addrs: kept,
                expires_ns: until,
            });
        }
        out
    }

    /// How long a query someone else (the kernel) sent to `server` is waited for before
    /// the question is taken back and resolved here: four times the server's SRTT plus
    /// `fanout_delay`, at least 150 ms (a reply late because this host is busy is not worth
    /// a second query that makes it busier) and at most `upstream_timeout` (which a server
    /// with no RTT sample, or held down, gets).
    pub fn handed_wait(&self, server: IpAddr) -> Duration {
        let cfg = self.cfg.load();
        let most = cfg.upstream_timeout;
        let srtt = lock(&self.infra.rtt).get(&server).map(|r| (r.srtt_us, r.held_until_ns));
        match srtt {
            Some((us, held)) if held <= self.now_ns() => {
                (Duration::from_micros(us.saturating_mul(4)) + cfg.fanout_delay).clamp(Duration::from_millis(150).min(most), most)
            }
            _ => most,
        }
    }

    /// A query someone else (the kernel) sent to `server` had no reply after `waited`: a
    /// lower bound of its RTT, which only raises its SRTT (not a timeout: the query taken
    /// back is asked again by the resolver, whose own timeouts hold a dead server down).
    pub fn note_handed_timeout(&self, server: IpAddr, waited: Duration) {
        self.note_slow(SocketAddr::new(server, 53), waited);
    }

    /// How long a query someone else (the kernel) sent to `server` goes unanswered before
    /// the same question is asked of another server of its zone (a redundant query,
    /// AtesN-DS's failure prevention), as [`Resolver::ask`] staggers its own: `fanout_delay`,
    /// or twice the server's SRTT when it has answered before and that is longer. `None`
    /// when the resolver asks one server at a time (`fanout` 1) or the wait would reach
    /// [`Resolver::handed_wait`] (the question is then taken back instead).
    pub fn redundant_after(&self, server: IpAddr) -> Option<Duration> {
        let cfg = self.cfg.load();
        if cfg.fanout <= 1 {
            return None;
        }
        let srtt = lock(&self.infra.rtt).get(&server).filter(|r| r.timeouts == 0).map(|r| r.srtt_us);
        let after = match srtt {
            Some(us) => cfg.fanout_delay.max(Duration::from_micros(us.saturating_mul(2))),
            None => cfg.fanout_delay,
        };
        (after < self.handed_wait(server)).then_some(after)
    }

    /// The server to ask redundantly among `addrs` (the cut's, as the kernel knows it) other
    /// than those `asked`: of a family the resolver asks, not held down, the fastest known.
    pub fn redundant_server(&self, addrs: &[IpAddr], asked: &[IpAddr]) -> Option<IpAddr> {
        let mut v: Vec<SocketAddr> = addrs
            .iter()
            .filter(|a| !asked.contains(a) && self.family_ok(a))
            .map(|a| SocketAddr::new(*a, self.cfg.load().upstream_port))
            .collect();
        self.sort_by_rtt(&mut v, self.now_ns());
        v.first().map(|s| s.ip()).filter(|ip| !self.held_down(*ip))
    }

    /// True while `server` is held down (it timed out repeatedly).
    pub fn held_down(&self, server: IpAddr) -> bool {
        self.held_until(server).is_some()
    }

    /// When `server`'s hold-down ends (the resolver's clock), while it is held down.
    pub fn held_until(&self, server: IpAddr) -> Option<u64> {
        let now = self.now_ns();
        lock(&self.infra.rtt).get(&server).map(|r| r.held_until_ns).filter(|&t| t > now)
    }

    /// Asks `server`, a server of `zone`, the question `qname`/`qtype` (the full name, RD=0)
    /// as the resolver asks its own: a random ID, a socket of its own (a random port), the
    /// name in random 0x20 case, and a reply taken only from that server's port 53 with that
    /// ID and the question byte for byte ([`crate::msg::Expect`]); the zone's and server's
    /// fetch quota applies, the RTT is noted. The reply as received, as a [`Handed`] for
    /// [`Resolver::resolve_handed`] (whose bailiwick rules then classify it), when it is
    /// NOERROR or NXDOMAIN (TC=1 too: the iteration resolves afresh over TCP); `None` for no
    /// reply, a refusal by the quota, or another RCODE.
    pub async fn ask_redundant(&self, zone: &[u8], server: IpAddr, qname: &[u8], qtype: u16) -> Option<Handed> {
        let cfg = self.cfg.load();
        let server = SocketAddr::new(server, cfg.upstream_port);
        let slot = self.fetches.acquire(Some(zone), server.ip()).ok()?;
        let (id, cased) = {
            use rand::Rng;
            let mut rng = rand::rng();
            (rng.random::<u16>(), crate::msg::randomize_case(&qname.to_ascii_lowercase(), &mut rng))
        };
        let query = crate::msg::build_query(id, &cased, qtype, false, cfg.edns_payload);
        let expect = crate::msg::Expect { server, id, qname: cased, qtype, rejected: Default::default() };
        self.counters.upstream_queries.fetch_add(1, Relaxed);
        let start = tokio::time::Instant::now();
        let r = self.net.udp(&query, &expect, cfg.upstream_timeout).await;
        self.counters.rejected_replies.fetch_add(u64::from(expect.rejected.load(Relaxed)), Relaxed);
        let elapsed = start.elapsed();
        slot.finish(r.is_ok());
        let Ok(bytes) = r else {
            self.note_rtt(server, None);
            return None;
        };
        self.note_rtt(server, Some(elapsed));
        let reply = parse_reply(&bytes)?;
        if !reply.truncated() && reply.rcode() != RCODE_NOERROR && reply.rcode() != RCODE_NXDOMAIN {
            return None;
        }
        Some(Handed { zone: zone.to_ascii_lowercase(), server, reply: bytes, rtt: None })
    }

    /// The kernel's query to `server` had no answer when another server's answer to the
    /// redundant query won: counted as a timeout of `server` (three in a row hold it down, as
    /// the resolver's own exchanges do; any reply of it resets the count). Returns whether
    /// it is held down now.
    pub fn note_handed_lost(&self, server: IpAddr) -> bool {
        self.note_rtt(SocketAddr::new(server, self.cfg.load().upstream_port), None);
        self.held_down(server)
    }

    /// What `h` is to the question `key`: the class of the reply (bailiwick-scrubbed) when
    /// the iteration can take it, else why not.
    fn handed_class(&self, key: &CacheKey, h: &Handed) -> Result<(Reply, HandedUse), HandedUse> {
        let reply = parse_reply(&h.reply).ok_or(HandedUse::Malformed)?;
        if reply.truncated() {
            return Err(HandedUse::Truncated);
        }
        match reply.rcode() {
            RCODE_NOERROR | RCODE_NXDOMAIN => {}
            RCODE_FORMERR => return Err(HandedUse::EdnsFallback),
            RCODE_SERVFAIL => return Err(HandedUse::Servfail),
            RCODE_REFUSED => return Err(HandedUse::Refused),
            _ => return Err(HandedUse::Rcode),
        }
        if !xdns_wire::name::is_subdomain(&key.qname, &h.zone) {
            return Err(HandedUse::Lame);
        }
        let used = match classify(
            &reply,
            &key.qname,
            key.qtype,
            &h.zone,
            self.cfg.load().max_cname,
        ) {
            Class::Lame => return Err(HandedUse::Lame),
            Class::Referral { glue, .. } => {
                if glue.iter().filter_map(glue_address).any(|ip| self.family_ok(&ip)) {
                    HandedUse::Referral
                } else {
                    HandedUse::Glueless
                }
            }
            Class::Answer(step) => {
                if step.answer.iter().any(|r| r.rtype == rtype::DNAME) {
                    HandedUse::Dname
                } else if step.next.is_some() {
                    HandedUse::CnameOut
                } else {
                    HandedUse::Answer
                }
            }
            Class::NxDomain(_) | Class::NoData(_) => HandedUse::Answer,
        };
        Ok((reply, used))
    }

    /// Resolves `key` taking `h` as the reply to its first upstream query (the full name and
    /// type asked of `h.server`, a server of `h.zone`): a referral is followed as the
    /// resolver's own (the cut and its glue cached, the iteration going on below it), a final
    /// answer is cached and returned as any resolution's ([`Resolver::resolve`]: same
    /// answer, TTL rules, negative caching, kernel cache). A fresh cached answer, or a
    /// resolution of the same question already running, is used instead (`Joined`); a reply
    /// that cannot be used leaves `key` to an ordinary resolution, and says why.
    pub async fn resolve_handed(
        self: &Arc<Self>,
        key: CacheKey,
        h: Handed,
    ) -> (Resolution, HandedUse) {
        self.resolve_handed_as(key, h, false).await
    }

    /// [`Resolver::resolve_handed`], the resolution run in the caller's future rather than a
    /// task of its own: a final answer in hand completes at the first poll, nothing
    /// awaited. The caller must drive the future to its end (a resolution of the same
    /// question joined meanwhile waits for it): the daemon's ring reader polls it once and
    /// spawns it when it is not done.
    pub async fn resolve_handed_inline(
        self: &Arc<Self>,
        key: CacheKey,
        h: Handed,
    ) -> (Resolution, HandedUse) {
        self.resolve_handed_as(key, h, true).await
    }

    async fn resolve_handed_as(
        self: &Arc<Self>,
        key: CacheKey,
        h: Handed,
        inline: bool,
    ) -> (Resolution, HandedUse) {
        let now = self.now_ns();
        if let Some(e) = self.answers.get(&key) {
            if e.answer.expires_at_ns > now {
                return (Ok(e.answer.clone()), HandedUse::Joined);
            }
        }
        let (reply, used) = match self.handed_class(&key, &h) {
            Ok(x) => x,
            Err(why) => return (self.resolve(key).await, why),
        };
        if lock(&self.inflight).contains_key(&key) {
            return (self.resolve(key).await, HandedUse::Joined);
        }
        if let Some(rtt) = h.rtt {
            self.note_rtt(h.server, Some(rtt));
        }
        let first = First {
            zone: h.zone,
            server: h.server,
            reply,
        };
        if inline {
            return (self.coalesced_inline(key, first).await, used);
        }
        (self.coalesced_from(key, Some(first)).await, used)
    }
}
