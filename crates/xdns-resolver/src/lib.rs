//! The caching iterative resolver of xdns.
//!
//! [`Resolver`] resolves a `(name, type, DO)` key from the root hints (RFC 1034 §5.3.3),
//! caches the answer in userspace ([`store::AnswerStore`], the source of truth) and installs it
//! into the kernel cache through [`xdns_wire::AnswerCache`]. Answers are
//! [`xdns_wire::CachedAnswer`]s: the body the kernel replays, so a userspace reply built with
//! [`xdns_wire::cache::replay`] is the kernel's reply byte for byte except TTLs.
//!
//! What it does, and where:
//! - [`resolve`]: the [`Resolver`]: caches, serve-stale (RFC 8767), failure caching
//!   (RFC 9520), coalescing, prefetch, flush; the answer's body for the kernel. Its parts:
//!   - `resolve::iterate`: the iteration: zone map (longest cached cut), referrals, CNAME
//!     chains across zones, negative answers (RFC 2308) with the SOA, NXDOMAIN cut (RFC 8020),
//!     QNAME minimisation (RFC 9156).
//!   - `resolve::servers`: server choice: in-bailiwick glue, glueless NS names resolved under
//!     a budget, redundant queries to several servers with smoothed RTTs, TCP fallback on
//!     TC=1.
//!   - [`resolve::classify`](mod@resolve::classify): what a reply means (answer, CNAME/DNAME chain, referral,
//!     NXDOMAIN, NODATA, lame), a pure function of the question, the zone asked and the
//!     parsed reply, with the bailiwick rules.
//!   - [`resolve::quota`]: fetch limits, upstream queries outstanding per server and per
//!     zone, each bound adapting to replies and timeouts.
//!   - `resolve::prime`: root priming (RFC 8109, [`Resolver::prime`]) replaces the hints with
//!     the root servers' own NS set and addresses.
//! - [`msg`]: upstream queries (random ID, 0x20 letter case, EDNS 1232) and reply parsing;
//!   [`msg::Expect`] accepts a reply only from the server asked, with the ID and the question
//!   exactly as sent.
//! - [`net`]: the network behind a trait ([`net::Network`]); [`net::SystemNetwork`] uses a fresh
//!   socket (random port) per query.
//! - [`hints`]: root hints files.
//! - [`store`]: bounded caches.

pub mod hints;
pub mod msg;
pub mod net;
pub mod resolve;
pub mod store;

pub use hints::{HintsError, RootHints};
pub use net::{Network, SystemNetwork};
pub use resolve::{Clock, Counters, Delegation, Handed, HandedUse, ResolveError, Resolver};
pub use store::KeyRef;

use std::net::SocketAddr;
use std::time::Duration;

/// Resolver settings (the daemon's `[resolver]` table without the client-side keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Answers kept in the userspace cache (about).
    pub cache_entries: usize,
    /// Entries in each infrastructure map (zone cuts, server addresses, NXDOMAIN cuts).
    pub infra_entries: usize,
    /// Prefetch window: a hit in the last this-many percent of an answer's TTL refreshes it.
    /// 0 turns prefetch off.
    pub prefetch_percent: u8,
    /// Answers with a TTL below this are never prefetched (seconds).
    pub prefetch_min_ttl: u32,
    /// Servers asked for each upstream question before waiting for their replies; the first
    /// valid reply wins.
    pub fanout: usize,
    /// The k-th of those servers is asked `k * fanout_delay` after the first unless a valid
    /// reply came meanwhile (zero: all at once). A short delay keeps redundant queries from
    /// costing anything when the fastest server answers at once, and still fails over in
    /// milliseconds when it is silent.
    pub fanout_delay: Duration,
    /// Time to wait for one upstream reply.
    pub upstream_timeout: Duration,
    /// Time allowed for one whole resolution.
    pub resolve_timeout: Duration,
    /// Upstream queries allowed for one client question (NXNSAttack cap).
    pub max_queries: u32,
    /// NS names without glue resolved for one client question.
    pub max_glueless: u32,
    /// Longest CNAME chain followed.
    pub max_cname: usize,
    /// Cap on positive TTLs (seconds).
    pub max_ttl: u32,
    /// Cap on negative TTLs (seconds).
    pub max_negative_ttl: u32,
    /// How long expired answers may be served when the authorities are silent (seconds;
    /// 0 = never).
    pub stale_ttl: u32,
    /// TTL of a stale answer (RFC 8767 recommends 30).
    pub stale_answer_ttl: u32,
    /// With a stale answer at hand, a resolution taking longer than this is answered stale
    /// while it goes on (RFC 8767's client response timer, 1.8 s recommended); zero = only
    /// when the resolution fails.
    pub stale_answer_after: Duration,
    /// How long a failed resolution answers SERVFAIL without trying again (seconds).
    pub failure_ttl: u32,
    /// Destination port of iterative queries (53; tests use other ports).
    pub upstream_port: u16,
    /// EDNS payload advertised upstream.
    pub edns_payload: u16,
    /// Ask IPv4 server addresses.
    pub ipv4: bool,
    /// Ask IPv6 server addresses.
    pub ipv6: bool,
    /// QNAME minimisation (RFC 9156, relaxed mode): each server is asked only for the next
    /// label below its zone (type A) until the cut above the name is found.
    pub qname_minimisation: bool,
    /// When not empty: send every question with RD=1 to these instead of iterating.
    pub forwarders: Vec<SocketAddr>,
    /// Root priming (RFC 8109): before the first resolution, and again whenever the root NS
    /// set's TTL runs out, ask the root servers for `. NS` and use the NS set and addresses of
    /// the answer instead of the hints (the hints stay the fallback). Off: the hints are used
    /// as they are.
    pub prime_root: bool,
    /// Ceiling of the upstream queries outstanding to one server at once; the bound itself
    /// adapts to how the server answers (`resolve::quota`). 0: no bound.
    pub fetches_per_server: u32,
    /// Ceiling of the upstream queries outstanding to the servers of one zone at once,
    /// adapting the same way. 0: no bound.
    pub fetches_per_zone: u32,
    /// The lowest a server's or zone's bound falls to when it stops answering.
    pub fetches_floor: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            cache_entries: 100_000,
            infra_entries: 10_000,
            prefetch_percent: 10,
            prefetch_min_ttl: 2,
            fanout: 2,
            fanout_delay: Duration::from_millis(20),
            upstream_timeout: Duration::from_millis(800),
            resolve_timeout: Duration::from_secs(4),
            max_queries: 48,
            max_glueless: 6,
            max_cname: 8,
            max_ttl: 86_400,
            max_negative_ttl: 3_600,
            stale_ttl: 86_400,
            stale_answer_ttl: 30,
            stale_answer_after: Duration::from_millis(1800),
            failure_ttl: 5,
            upstream_port: 53,
            edns_payload: 1232,
            ipv4: true,
            ipv6: true,
            qname_minimisation: true,
            forwarders: Vec::new(),
            prime_root: true,
            fetches_per_server: 1000,
            fetches_per_zone: 500,
            fetches_floor: 2,
        }
    }
}

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
