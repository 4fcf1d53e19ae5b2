//! The resolver: one client question from the cache or, on a miss, by iteration from the
//! root hints (RFC 1034 §5.3.3), with the caches of [`crate::store`].
//!
//! This module holds the [`Resolver`]'s public face: the caches (answers, serve-stale,
//! failures), coalescing of concurrent questions, prefetch, flush and reconfiguration, and
//! the compilation of an answer's records into the body the kernel replays. The work of a
//! resolution is in its submodules:
//! - `prime`: root priming (RFC 8109), the root set in use.
//! - `iterate`: one question down the zone cuts: CNAME chains across zones, referrals,
//!   QNAME minimisation, negative answers and the NXDOMAIN cut.
//! - `servers`: server choice and the exchanges: addresses of a cut (glueless NS names
//!   resolved under a budget), smoothed RTTs, staggered redundant queries, TCP on TC=1.
//! - [`classify`](mod@classify): what a reply means for the question (pure, table-tested).
//!
//! Work per client question is capped: `max_queries` upstream queries, `max_glueless` NS names
//! without glue resolved, a nesting depth of [`MAX_DEPTH`] for those, `max_cname` CNAMEs, and
//! `resolve_timeout` overall (NXNSAttack, loops). Work across questions is bounded too: the
//! upstream queries outstanding per server and per zone ([`quota`], adapting to how each
//! answers), and identical questions share one resolution (coalescing).

pub mod classify;
mod handed;
mod iterate;
mod prime;
pub mod quota;
mod servers;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use hashbrown::HashMap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use xdns_wire::name::{is_subdomain, to_presentation};
use xdns_wire::response::rcode::{NOERROR as RCODE_NOERROR, NXDOMAIN as RCODE_NXDOMAIN};
use xdns_wire::{AnswerCache, BodyWriter, CacheKey, CachedAnswer, Section};

use crate::hints::RootHints;
use crate::msg::Rr;
use crate::net::Network;
use crate::store::{lock, make_room, AnswerStore, Entry, Infra, KeyRef};
use crate::Config;
use prime::Priming;

pub use classify::{classify, Class, Step};
pub use handed::{Delegation, Handed, HandedUse};

/// Deepest nesting of glueless NS name resolutions.
pub const MAX_DEPTH: u32 = 4;
/// Nanoseconds in a second.
const NS: u64 = 1_000_000_000;

/// Where "now" comes from: `CLOCK_MONOTONIC` (the kernel's `bpf_ktime_get_ns` clock), or a
/// hand-moved clock for tests.
#[derive(Clone, Debug)]
pub enum Clock {
    /// `CLOCK_MONOTONIC` nanoseconds.
    Monotonic,
    /// A clock tests move by hand (nanoseconds).
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// Nanoseconds now.
    pub fn now_ns(&self) -> u64 {
        match self {
            Clock::Monotonic => {
                let mut ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
                unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
                ts.tv_sec as u64 * NS + ts.tv_nsec as u64
            }
            Clock::Manual(t) => t.load(Relaxed),
        }
    }
}

/// Why a question got no answer (the client gets SERVFAIL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// Every server failed, timed out or was lame.
    Failed,
    /// The resolution took longer than `resolve_timeout`.
    Timeout,
    /// The work cap (queries, glueless names, depth, CNAMEs) was reached.
    Budget,
    /// The question failed recently and its failure is cached (RFC 9520).
    CachedFailure,
    /// Every server that could be asked already has its bound of outstanding queries, or the
    /// zone has ([`quota`]): failed at once rather than queued.
    Quota,
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ResolveError::Failed => "no server answered",
            ResolveError::Timeout => "resolution timed out",
            ResolveError::Budget => "work limit reached",
            ResolveError::CachedFailure => "failure cached",
            ResolveError::Quota => "upstream quota reached",
        })
    }
}

impl std::error::Error for ResolveError {}

/// Resolver counters (monotonic).
#[derive(Debug, Default)]
pub struct Counters {
    /// Client questions answered from the userspace cache.
    pub cache_hits: AtomicU64,
    /// Client questions not in the cache.
    pub cache_misses: AtomicU64,
    /// Queries sent upstream (UDP).
    pub upstream_queries: AtomicU64,
    /// Upstream queries that got no valid reply in time.
    pub upstream_timeouts: AtomicU64,
    /// Upstream replies retried over TCP after TC=1.
    pub tcp_fallbacks: AtomicU64,
    /// Datagrams ignored: wrong source, ID, question or letter case.
    pub rejected_replies: AtomicU64,
    /// Resolutions that failed (the client got SERVFAIL or a stale answer).
    pub failures: AtomicU64,
    /// SERVFAIL answers given.
    pub servfails: AtomicU64,
    /// Answers served stale (RFC 8767).
    pub stale_answers: AtomicU64,
    /// Questions answered SERVFAIL from the failure cache.
    pub failure_cache_hits: AtomicU64,
    /// Names answered NXDOMAIN from a cached NXDOMAIN above them (RFC 8020).
    pub nxdomain_cut_hits: AtomicU64,
    /// Refreshes started before expiry (prefetch).
    pub prefetches: AtomicU64,
    /// Resolutions stopped by the work cap.
    pub budget_exceeded: AtomicU64,
    /// Answers evicted from the full cache.
    pub evictions: AtomicU64,
    /// Kernel cache insertions that failed.
    pub kernel_insert_errors: AtomicU64,
    /// Root primings that replaced the root NS set (RFC 8109).
    pub primings: AtomicU64,
    /// Root primings that failed (the hints are used).
    pub priming_failures: AtomicU64,
    /// Client questions that joined a resolution of the same question already running.
    pub coalesced: AtomicU64,
    /// Upstream queries not sent: their server had its bound of queries outstanding.
    pub quota_server_refusals: AtomicU64,
    /// Upstream questions not sent: their zone had its bound of queries outstanding.
    pub quota_zone_refusals: AtomicU64,
    /// Resolutions failed at once because every server (or the zone) was at its bound.
    pub quota_failures: AtomicU64,
    /// Queries answered SERVFAIL at once because their client's address prefix held more
    /// than its share of the pending resolutions while others waited (the daemon's check).
    pub client_share_servfails: AtomicU64,
    /// Queries answered SERVFAIL at once because the pending resolutions were at
    /// `max_pending` (the daemon's check).
    pub pending_full_servfails: AtomicU64,
}

impl Counters {
    /// Every counter with its stable name (used in `xdns stats` and metric labels).
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let c = |a: &AtomicU64| a.load(Relaxed);
        vec![
            ("cache_hits", c(&self.cache_hits)),
            ("cache_misses", c(&self.cache_misses)),
            ("upstream_queries", c(&self.upstream_queries)),
            ("upstream_timeouts", c(&self.upstream_timeouts)),
            ("tcp_fallbacks", c(&self.tcp_fallbacks)),
            ("rejected_replies", c(&self.rejected_replies)),
            ("failures", c(&self.failures)),
            ("servfails", c(&self.servfails)),
            ("stale_answers", c(&self.stale_answers)),
            ("failure_cache_hits", c(&self.failure_cache_hits)),
            ("nxdomain_cut_hits", c(&self.nxdomain_cut_hits)),
            ("prefetches", c(&self.prefetches)),
            ("budget_exceeded", c(&self.budget_exceeded)),
            ("evictions", c(&self.evictions)),
            ("kernel_insert_errors", c(&self.kernel_insert_errors)),
            ("primings", c(&self.primings)),
            ("priming_failures", c(&self.priming_failures)),
            ("coalesced", c(&self.coalesced)),
            ("quota_server_refusals", c(&self.quota_server_refusals)),
            ("quota_zone_refusals", c(&self.quota_zone_refusals)),
            ("quota_failures", c(&self.quota_failures)),
            ("client_share_servfails", c(&self.client_share_servfails)),
            ("pending_full_servfails", c(&self.pending_full_servfails)),
        ]
    }
}

/// Root servers: NS names (lowercased wire) with their addresses.
pub type RootSet = Vec<(Vec<u8>, Vec<IpAddr>)>;

/// Result of one resolution: the answer, or why there is none.
pub type Resolution = Result<Arc<CachedAnswer>, ResolveError>;

/// The resolver. Shared (`Arc`) by the daemon's UDP workers (cache lookups), its tasks
/// (resolutions) and the prefetcher.
pub struct Resolver {
    /// Replaced whole by [`Resolver::reconfigure`]; each use reads the current one.
    cfg: arc_swap::ArcSwap<Config>,
    net: Arc<dyn Network>,
    kernel: Arc<dyn AnswerCache>,
    answers: AnswerStore,
    infra: Infra,
    inflight: Mutex<HashMap<CacheKey, Vec<oneshot::Sender<Resolution>>>>,
    prefetch_tx: mpsc::Sender<CacheKey>,
    prefetch_rx: Mutex<Option<mpsc::Receiver<CacheKey>>>,
    clock: Clock,
    hints: RootHints,
    priming: Mutex<Priming>,
    /// Held while a priming runs: questions waiting for the first one queue here.
    priming_lock: tokio::sync::Mutex<()>,
    /// A background re-priming has been spawned and has not finished.
    repriming: AtomicBool,
    /// Upstream queries outstanding per server and per zone, and their bounds.
    fetches: Arc<quota::Fetches>,
    /// Counters.
    pub counters: Arc<Counters>,
}

/// Per client question: the work done so far.
struct Ctx {
    queries: u32,
    glueless: u32,
    depth: u32,
    deadline: Instant,
}

/// Final records of a question.
struct Final {
    rcode: u16,
    answer: Vec<Rr>,
    authority: Vec<Rr>,
}

impl Resolver {
    /// A resolver starting from `hints`, asking through `net`, installing answers into `kernel`.
    pub fn new(
        cfg: Config,
        hints: &RootHints,
        net: Arc<dyn Network>,
        kernel: Arc<dyn AnswerCache>,
        clock: Clock,
    ) -> Arc<Self> {
        let (prefetch_tx, prefetch_rx) = mpsc::channel(1024);
        let cfg_prime = cfg.prime_root && cfg.forwarders.is_empty();
        let fetches = quota::Fetches::new(fetch_limits(&cfg), cfg.infra_entries);
        let r = Resolver {
            fetches,
            answers: AnswerStore::new(cfg.cache_entries),
            infra: Infra::default(),
            inflight: Mutex::new(HashMap::new()),
            prefetch_tx,
            prefetch_rx: Mutex::new(Some(prefetch_rx)),
            cfg: arc_swap::ArcSwap::from_pointee(cfg),
            net,
            kernel,
            clock,
            priming: Mutex::new(Priming::new(cfg_prime)),
            priming_lock: tokio::sync::Mutex::new(()),
            repriming: AtomicBool::new(false),
            hints: hints.clone(),
            counters: Arc::new(Counters::default()),
        };
        r.install_root(&hints.servers);
        Arc::new(r)
    }

    /// Empties every cache: answers, delegations and server addresses learnt (the root set
    /// stays: the hints or the primed set), NXDOMAIN cuts, failures and RTTs. The kernel cache
    /// is emptied whole ([`AnswerCache::clear`]), also of answers the userspace cache has
    /// already dropped (evicted, expired); a kernel cache that cannot be cleared gets the
    /// userspace keys removed one by one. Returns the number of userspace answers removed.
    pub fn flush(&self) -> usize {
        let keys = self.answers.clear();
        if let Some(n) = self.kernel_flushed(self.kernel.clear(), &keys) {
            tracing::info!(answers = keys.len(), kernel_entries = n, "resolver caches flushed");
        }
        lock(&self.infra.zones).retain(|_, d| d.expires_ns == u64::MAX);
        lock(&self.infra.addrs).retain(|_, a| a.expires_ns == u64::MAX);
        lock(&self.infra.nx).clear();
        lock(&self.infra.failures).clear();
        lock(&self.infra.rtt).clear();
        self.infra.changed();
        self.fetches.clear();
        keys.len()
    }

    /// The kernel side of a flush: `walked` is what the kernel cache's own walk deleted; if
    /// it could not walk its maps, the keys userspace held are removed one by one (`None`).
    fn kernel_flushed(&self, walked: Result<usize, String>, keys: &[CacheKey]) -> Option<usize> {
        match walked {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::debug!(error = %e, "kernel cache not walked: removing the known keys");
                for k in keys {
                    let _ = self.kernel.remove(k);
                }
                None
            }
        }
    }

    /// Forgets what is cached for one name (`xdns flush NAME`; with `subtree`, for it and
    /// every name below it, `--subtree`), `name` a lowercased wire name: its answers of every
    /// type, in userspace and in the kernel (also entries userspace had already dropped); the
    /// zone cut, server addresses and SERVFAIL records at those names; and the NXDOMAIN
    /// records at, above (an NXDOMAIN cut, RFC 8020, would still deny the name) and, with
    /// `subtree`, below it. The root hints and server RTTs stay. Returns how many answers
    /// userspace held.
    pub fn flush_name(&self, name: &[u8], subtree: bool) -> usize {
        let hit = |n: &[u8]| if subtree { is_subdomain(n, name) } else { n == name };
        let keys = self.answers.remove_where(|k| hit(&k.qname));
        if let Some(n) = self.kernel_flushed(self.kernel.remove_names(&hit), &keys) {
            tracing::info!(
                name = %to_presentation(name),
                subtree,
                answers = keys.len(),
                kernel_entries = n,
                "resolver cache flushed for a name"
            );
        }
        lock(&self.infra.zones).retain(|z, d| d.expires_ns == u64::MAX || !hit(z));
        lock(&self.infra.addrs).retain(|n, a| a.expires_ns == u64::MAX || !hit(n));
        lock(&self.infra.nx).retain(|n, _| !hit(n) && !is_subdomain(name, n));
        lock(&self.infra.failures).retain(|(n, _), _| !hit(n));
        self.infra.changed();
        keys.len()
    }

    /// The settings in force.
    pub fn config(&self) -> Arc<Config> {
        self.cfg.load_full()
    }

    /// Settings a running resolver cannot take: the sizes of its caches, the address
    /// families it asks, root priming and forwarding (both decide how it starts); names of
    /// those that differ between `a` and `b`.
    pub fn fixed_settings_changed(a: &Config, b: &Config) -> Vec<&'static str> {
        let mut v = Vec::new();
        if a.cache_entries != b.cache_entries {
            v.push("cache_entries");
        }
        if a.infra_entries != b.infra_entries {
            v.push("infra_entries");
        }
        if (a.ipv4, a.ipv6) != (b.ipv4, b.ipv6) {
            v.push("ipv4/ipv6");
        }
        if a.prime_root != b.prime_root {
            v.push("prime_root");
        }
        if a.forwarders != b.forwarders {
            v.push("forwarders");
        }
        v
    }

    /// Takes new settings at once (SIGHUP): timeouts, fan-out, prefetch window, work limits,
    /// TTL caps, serve-stale, QNAME minimisation. The caches stay. Settings listed by
    /// [`Resolver::fixed_settings_changed`] keep their running values; their names are
    /// returned.
    pub fn reconfigure(&self, new: &Config) -> Vec<&'static str> {
        let cur = self.cfg.load_full();
        let fixed = Self::fixed_settings_changed(&cur, new);
        let next = Config {
            cache_entries: cur.cache_entries,
            infra_entries: cur.infra_entries,
            ipv4: cur.ipv4,
            ipv6: cur.ipv6,
            prime_root: cur.prime_root,
            forwarders: cur.forwarders.clone(),
            ..new.clone()
        };
        if next != *cur {
            self.fetches.set_limits(fetch_limits(&next));
            self.cfg.store(Arc::new(next));
        }
        fixed
    }

    /// Nanoseconds now on the resolver's clock.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Gauges of the fetch quotas ([`quota::Fetches::gauges`]).
    pub fn fetch_gauges(&self) -> [(&'static str, u64); 3] {
        self.fetches.gauges()
    }

    /// The fetch quota state of one server (tests, diagnostics).
    pub fn server_quota(&self, server: IpAddr) -> Option<quota::Quota> {
        self.fetches.server(server)
    }

    /// Answers in the userspace cache.
    pub fn cache_len(&self) -> usize {
        self.answers.len()
    }

    /// The kernel cache's own gauges and counters ([`AnswerCache::stats`]).
    pub fn kernel_cache_stats(&self) -> Vec<(&'static str, u64)> {
        self.kernel.stats()
    }

    /// A fresh cached answer for `key` (counted as a hit or a miss). A hit inside the prefetch
    /// window asks the prefetcher to refresh the entry.
    pub fn cached(&self, key: &CacheKey) -> Option<Arc<CachedAnswer>> {
        self.cached_ref(&KeyRef {
            qname: &key.qname,
            qtype: key.qtype,
            dnssec_ok: key.dnssec_ok,
        })
    }

    /// [`Resolver::cached`] with a borrowed key (no allocation on a hit).
    pub fn cached_ref(&self, key: &KeyRef<'_>) -> Option<Arc<CachedAnswer>> {
        let now = self.now_ns();
        match self.answers.get_ref(key) {
            Some(e) if e.answer.expires_at_ns > now => {
                self.counters.cache_hits.fetch_add(1, Relaxed);
                if now >= e.answer.prefetch_at_ns && !lock(&self.inflight).contains_key(key) {
                    let _ = self.prefetch_tx.try_send(key.to_owned_key());
                }
                Some(e.answer.clone())
            }
            _ => {
                self.counters.cache_misses.fetch_add(1, Relaxed);
                None
            }
        }
    }

    /// Resolutions running now (one per question, however many wait for it).
    pub fn inflight_len(&self) -> usize {
        lock(&self.inflight).len()
    }

    /// Resolves `key`: from the cache if fresh, else upstream. Concurrent questions for the
    /// same key share one resolution.
    pub async fn resolve(self: &Arc<Self>, key: CacheKey) -> Resolution {
        let now = self.now_ns();
        let mut stale = false;
        if let Some(e) = self.answers.get(&key) {
            if e.answer.expires_at_ns > now {
                return Ok(e.answer.clone());
            }
            stale = self.cfg.load().stale_ttl > 0 && e.stale_until_ns > now;
        }
        // RFC 8767 §5 client response timer: with stale data at hand, a resolution that takes
        // longer than `stale_answer_after` is answered stale; it goes on in the background and
        // refreshes the cache when it finishes.
        if stale && !self.cfg.load().stale_answer_after.is_zero() {
            let resolution = self.coalesced(key.clone());
            tokio::select! {
                r = resolution => r,
                _ = tokio::time::sleep(self.cfg.load().stale_answer_after) => {
                    self.stale_or(&key, self.now_ns(), ResolveError::Timeout)
                }
            }
        } else {
            self.coalesced(key).await
        }
    }

    /// Resolves `key` upstream even if it is cached (prefetch).
    pub async fn refresh(self: &Arc<Self>, key: CacheKey) -> Resolution {
        self.coalesced(key).await
    }

    /// Starts the prefetcher: refreshes keys from userspace hits near expiry and, when given,
    /// from the kernel's ring buffer (`external`). Call once, inside a tokio runtime.
    pub fn spawn_prefetcher(self: &Arc<Self>, external: Option<mpsc::Receiver<CacheKey>>) {
        let Some(mut internal) = lock(&self.prefetch_rx).take() else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let mut external = external;
            loop {
                let key = tokio::select! {
                    k = internal.recv() => k,
                    Some(k) = async { match external.as_mut() { Some(r) => r.recv().await, None => std::future::pending().await } } => Some(k),
                };
                let Some(key) = key else { break };
                if lock(&this.inflight).contains_key(&key) {
                    continue;
                }
                this.counters.prefetches.fetch_add(1, Relaxed);
                let t = this.clone();
                tokio::spawn(async move {
                    let _ = t.refresh(key).await;
                });
            }
        });
    }

    async fn coalesced(self: &Arc<Self>, key: CacheKey) -> Resolution {
        self.coalesced_from(key, None).await
    }

    /// [`Resolver::coalesced`], the leader's first upstream reply already in hand (`first`,
    /// dropped when the question joins a running resolution).
    async fn coalesced_from(self: &Arc<Self>, key: CacheKey, first: Option<handed::First>) -> Resolution {
        let (tx, rx) = oneshot::channel();
        let leader = {
            let mut m = lock(&self.inflight);
            match m.get_mut(&key) {
                Some(w) => {
                    w.push(tx);
                    self.counters.coalesced.fetch_add(1, Relaxed);
                    false
                }
                None => {
                    m.insert(key.clone(), vec![tx]);
                    true
                }
            }
        };
        if leader {
            // In a task of its own: a client that goes away does not strand the waiters.
            let this = self.clone();
            tokio::spawn(async move {
                let r = this.resolve_uncached(&key, first).await;
                let waiters = lock(&this.inflight).remove(&key).unwrap_or_default();
                for w in waiters {
                    let _ = w.send(r.clone());
                }
            });
        }
        rx.await.unwrap_or(Err(ResolveError::Failed))
    }

    /// [`Resolver::coalesced_from`] with the leader's work done in the caller's future, not a
    /// task of its own: with a final answer in hand it completes at its first poll (kernel
    /// iteration's ring reader answers a batch of clients with one `sendmmsg`). The caller
    /// must drive the future to its end (never drop it half-way: a resolution joined
    /// meanwhile waits for it).
    async fn coalesced_inline(self: &Arc<Self>, key: CacheKey, first: handed::First) -> Resolution {
        let joined = {
            let mut m = lock(&self.inflight);
            match m.get_mut(&key) {
                Some(w) => {
                    let (tx, rx) = oneshot::channel();
                    w.push(tx);
                    self.counters.coalesced.fetch_add(1, Relaxed);
                    Some(rx)
                }
                None => {
                    m.insert(key.clone(), Vec::new());
                    None
                }
            }
        };
        if let Some(rx) = joined {
            return rx.await.unwrap_or(Err(ResolveError::Failed));
        }
        let r = self.resolve_uncached(&key, Some(first)).await;
        let waiters = lock(&self.inflight).remove(&key).unwrap_or_default();
        for w in waiters {
            let _ = w.send(r.clone());
        }
        r
    }

    async fn resolve_uncached(self: &Arc<Self>, key: &CacheKey, first: Option<handed::First>) -> Resolution {
        self.prime_when_due().await;
        let now = self.now_ns();
        let fkey = (key.qname.clone(), key.qtype);
        if lock(&self.infra.failures)
            .get(&fkey)
            .is_some_and(|&u| u > now)
        {
            self.counters.failure_cache_hits.fetch_add(1, Relaxed);
            return self.stale_or(key, now, ResolveError::CachedFailure);
        }
        let mut ctx = Ctx {
            queries: 0,
            glueless: 0,
            depth: 0,
            deadline: Instant::now() + self.cfg.load().resolve_timeout,
        };
        let r = tokio::time::timeout(
            self.cfg.load().resolve_timeout,
            self.resolve_records(&mut ctx, &key.qname, key.qtype, first),
        )
        .await;
        let now = self.now_ns();
        let err = match r {
            Ok(Ok(f)) => match self.make_answer(key, &f, now) {
                Some(a) => return Ok(a),
                None => ResolveError::Failed,
            },
            Ok(Err(e)) => e,
            Err(_) => ResolveError::Timeout,
        };
        if err == ResolveError::Budget {
            self.counters.budget_exceeded.fetch_add(1, Relaxed);
        }
        if err == ResolveError::Quota {
            self.counters.quota_failures.fetch_add(1, Relaxed);
        }
        self.counters.failures.fetch_add(1, Relaxed);
        tracing::debug!(name = %to_presentation(&key.qname), qtype = key.qtype, error = %err, "resolution failed");
        // A quota says nothing of the name (others' queries filled it): not cached.
        if self.cfg.load().failure_ttl > 0 && err != ResolveError::Quota {
            let mut f = lock(&self.infra.failures);
            make_room(&mut f, self.cfg.load().infra_entries, |&u| u <= now);
            f.insert(fkey, now + u64::from(self.cfg.load().failure_ttl) * NS);
        }
        self.stale_or(key, now, err)
    }

    /// A stale answer for `key` if one may be served (RFC 8767), else `err`.
    fn stale_or(&self, key: &CacheKey, now: u64, err: ResolveError) -> Resolution {
        if self.cfg.load().stale_ttl > 0 {
            if let Some(e) = self.answers.get(key) {
                if e.answer.expires_at_ns > now {
                    return Ok(e.answer.clone());
                }
                if e.stale_until_ns > now {
                    let ttl = self.cfg.load().stale_answer_ttl;
                    let retimed = |v: &[Rr]| {
                        v.iter()
                            .map(|r| Rr { ttl, ..r.clone() })
                            .collect::<Vec<_>>()
                    };
                    let f = Final {
                        rcode: e.rcode,
                        answer: retimed(&e.answer_rrs),
                        authority: retimed(&e.authority_rrs),
                    };
                    if let Some(body) = self.body(key, &f).map(|(b, _)| b) {
                        self.counters.stale_answers.fetch_add(1, Relaxed);
                        return Ok(Arc::new(CachedAnswer {
                            qname: key.qname.clone(),
                            qtype: key.qtype,
                            dnssec_ok: key.dnssec_ok,
                            body,
                            stored_at_ns: now,
                            expires_at_ns: now + u64::from(ttl) * NS,
                            prefetch_at_ns: u64::MAX,
                        }));
                    }
                }
            }
        }
        Err(err)
    }

    /// Compiles the body of `f` for `key`; returns it with its smallest TTL.
    fn body(&self, key: &CacheKey, f: &Final) -> Option<(xdns_wire::Body, u32)> {
        let mut w = BodyWriter::new(&key.qname).ok()?;
        w.set_rcode(f.rcode as u8);
        let mut min_ttl = u32::MAX;
        for rr in &f.answer {
            let ttl = rr.ttl.min(self.cfg.load().max_ttl);
            min_ttl = min_ttl.min(ttl);
            w.write_rr(&rr.owner, rr.owner == key.qname, rr.rtype, ttl, &rr.rdata)
                .ok()?;
        }
        w.set_section(Section::Authority).ok()?;
        for rr in &f.authority {
            let ttl = rr
                .soa_negative_ttl()
                .unwrap_or(rr.ttl)
                .min(self.cfg.load().max_negative_ttl);
            min_ttl = min_ttl.min(ttl);
            w.write_rr(&rr.owner, rr.owner == key.qname, rr.rtype, ttl, &rr.rdata)
                .ok()?;
        }
        // A negative answer without an SOA is not cached (RFC 2308 §5).
        Some((w.finish(), if min_ttl == u32::MAX { 0 } else { min_ttl }))
    }

    /// Builds the answer for `key`, caches it (userspace and kernel) when its TTL allows.
    fn make_answer(&self, key: &CacheKey, f: &Final, now: u64) -> Option<Arc<CachedAnswer>> {
        let (body, ttl) = self.body(key, f)?;
        let expires = now + u64::from(ttl) * NS;
        let pct = u64::from(self.cfg.load().prefetch_percent.min(100));
        let prefetch_at = if pct > 0 && ttl >= self.cfg.load().prefetch_min_ttl {
            now + (u64::from(ttl) * NS) / 100 * (100 - pct)
        } else {
            u64::MAX
        };
        let answer = Arc::new(CachedAnswer {
            qname: key.qname.clone(),
            qtype: key.qtype,
            dnssec_ok: key.dnssec_ok,
            body,
            stored_at_ns: now,
            expires_at_ns: expires,
            prefetch_at_ns: prefetch_at,
        });
        if ttl > 0 {
            let entry = Arc::new(Entry {
                answer: answer.clone(),
                answer_rrs: f.answer.clone(),
                authority_rrs: f.authority.clone(),
                rcode: f.rcode,
                stale_until_ns: expires + u64::from(self.cfg.load().stale_ttl) * NS,
            });
            let evicted = self.answers.insert(entry, now);
            self.counters.evictions.fetch_add(evicted as u64, Relaxed);
            if let Err(e) = self.kernel.insert(&answer) {
                self.counters.kernel_insert_errors.fetch_add(1, Relaxed);
                tracing::debug!(error = %e, "kernel cache insert failed");
            }
            lock(&self.infra.failures).remove(&(key.qname.clone(), key.qtype));
        }
        Some(answer)
    }
}

/// The fetch quota bounds of `cfg`.
fn fetch_limits(cfg: &Config) -> quota::Limits {
    quota::Limits {
        server: cfg.fetches_per_server,
        zone: cfg.fetches_per_zone,
        floor: cfg.fetches_floor,
    }
}
