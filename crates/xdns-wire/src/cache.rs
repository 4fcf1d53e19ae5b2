//! The contract between the recursive resolver and the kernel answer cache.
//!
//! The resolver (`xdns-resolver`) decides *what* to cache and for how long; the XDP cache
//! (`xdns-bpf`) decides *how* to store and replay it. Neither depends on the other: both speak
//! these types, and the daemon plugs an implementation of [`AnswerCache`] into the resolver.
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds, the clock of `bpf_ktime_get_ns()`, so the kernel
//! compares them with its own clock without conversion.

use crate::Body;

/// One cached answer: the body that follows the question for `(qname, qtype, dnssec_ok)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedAnswer {
    /// The question name, lowercased, uncompressed wire form.
    pub qname: Vec<u8>,
    /// The question type.
    pub qtype: u16,
    /// The DO bit of the queries this answer is for (RFC 3225: a DO=0 answer carries no
    /// DNSSEC records the client did not ask for).
    pub dnssec_ok: bool,
    /// Answer, authority and additional sections, compiled with `BodyWriter::new(&qname)`.
    /// `flags` holds the RCODE; AA is clear. The replaying side sets QR, RA, the client's RD
    /// and ID, and echoes the question as the client sent it. Every record's TTL is the value
    /// it had at `stored_at_ns`.
    pub body: Body,
    /// When the TTLs in `body` were exact. A reply at time `t` carries each TTL reduced by
    /// `(t - stored_at_ns)` whole seconds.
    pub stored_at_ns: u64,
    /// The answer is never served at or after this time (the smallest TTL has run out).
    pub expires_at_ns: u64,
    /// A hit at or after this time asks the resolver to refresh the entry (proactive refresh,
    /// once per entry); `u64::MAX` = never.
    pub prefetch_at_ns: u64,
}

/// The key of a cached answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Lowercased, uncompressed wire name.
    pub qname: Vec<u8>,
    /// The question type.
    pub qtype: u16,
    /// The DO bit.
    pub dnssec_ok: bool,
}

/// Where the resolver puts answers so that they are served without it (the XDP cache).
///
/// Implementations must be cheap to call from the resolver's tasks; errors are logged by the
/// caller and never fail a resolution (the userspace cache still answers).
pub trait AnswerCache: Send + Sync {
    /// Installs or replaces the answer for its key.
    fn insert(&self, answer: &CachedAnswer) -> Result<(), String>;
    /// Removes the answer for `key`, if any.
    fn remove(&self, key: &CacheKey) -> Result<(), String>;
}

/// An [`AnswerCache`] that stores nothing (no XDP attached).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCache;

impl AnswerCache for NoCache {
    fn insert(&self, _: &CachedAnswer) -> Result<(), String> {
        Ok(())
    }
    fn remove(&self, _: &CacheKey) -> Result<(), String> {
        Ok(())
    }
}
