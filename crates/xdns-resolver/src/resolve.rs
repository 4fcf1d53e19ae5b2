//! Iterative resolution (RFC 1034 §5.3.3) with the caches of [`crate::store`].
//!
//! One client question becomes a chain of *steps*, one per name of its CNAME chain. A step
//! starts at the longest cut in the zone map (root hints at worst) and follows referrals down.
//! Each upstream question goes to up to `fanout` servers, fastest smoothed RTT first, the k-th
//! one `k * fanout_delay` after the first unless a valid reply came meanwhile (0 = all at
//! once); the first valid reply wins and servers still silent get an RTT sample. A cut with no
//! known server address (glue expired before its NS records) is dropped and its parent asked. A reply is *valid* when it comes from the server asked, with the
//! ID and the question (0x20 letter case included) as sent, and RCODE NOERROR or NXDOMAIN.
//! Records are then scrubbed: only owners inside the zone of the server asked (the bailiwick)
//! are used; glue only for NS names of the referral; a referral must lead strictly downwards.
//!
//! Work per client question is capped: `max_queries` upstream queries, `max_glueless` NS names
//! without glue resolved, a nesting depth of [`MAX_DEPTH`] for those, `max_cname` CNAMEs, and
//! `resolve_timeout` overall (NXNSAttack, loops).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use hashbrown::HashMap;
use rand::seq::SliceRandom;
use rand::Rng;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use xdns_wire::name::{is_subdomain, to_presentation};
use xdns_wire::{AnswerCache, BodyWriter, CacheKey, CachedAnswer, Section};

use crate::hints::RootHints;
use crate::msg::{build_query, parse_reply, randomize_case, rtype, Expect, Reply, Rr};
use crate::net::Network;
use crate::store::{lock, make_room, Addrs, AnswerStore, Deleg, Entry, Infra, KeyRef, Rtt};
use crate::Config;

/// Deepest nesting of glueless NS name resolutions.
pub const MAX_DEPTH: u32 = 4;
/// Most referrals followed for one name.
const MAX_REFERRALS: usize = 24;
/// Most minimised queries for one name (RFC 9156 §2.3 MAX_MINIMISE_COUNT).
const MAX_MINIMISE: usize = 10;
/// Glueless NS names tried for one referral before giving up on it.
const GLUELESS_PER_CUT: usize = 3;
/// Shortest life of a primed root NS set (seconds): a tiny TTL does not make every resolution
/// prime again.
const PRIME_MIN_TTL: u32 = 10;
/// After a failed priming, the hints are used this long before priming is tried again
/// (seconds).
const PRIME_RETRY: u64 = 30;
/// SRTT given to a server never asked (microseconds), randomised a little so that new servers
/// are spread; like Unbound's 376 ms, low enough that they get tried.
const INITIAL_SRTT_US: u64 = 200_000;
/// Ceiling of a smoothed RTT (microseconds).
const MAX_SRTT_US: u64 = 10_000_000;
const NS: u64 = 1_000_000_000;

const RCODE_NOERROR: u16 = 0;
const RCODE_NXDOMAIN: u16 = 3;

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
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ResolveError::Failed => "no server answered",
            ResolveError::Timeout => "resolution timed out",
            ResolveError::Budget => "work limit reached",
            ResolveError::CachedFailure => "failure cached",
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
    /// Counters.
    pub counters: Arc<Counters>,
}

/// Root priming state (RFC 8109).
#[derive(Debug)]
struct Priming {
    /// Ask the root servers for `. NS` at or after this time (`u64::MAX`: never).
    due_ns: u64,
    /// A priming has finished (well or not): later ones run in the background while
    /// questions go on with the root set in use.
    settled: bool,
    /// The root set in use came from priming (else: the hints).
    primed: bool,
}

/// Per client question: the work done so far.
struct Ctx {
    queries: u32,
    glueless: u32,
    depth: u32,
    deadline: Instant,
}

/// What a step (one name of a CNAME chain) found.
#[derive(Debug)]
struct Step {
    rcode: u16,
    answer: Vec<Rr>,
    authority: Vec<Rr>,
    /// The CNAME chain leaves the zone: continue with this name.
    next: Option<Vec<u8>>,
}

/// What a reply means for the question.
#[derive(Debug)]
enum Class {
    Answer(Step),
    NxDomain(Option<Rr>),
    NoData(Option<Rr>),
    Referral {
        zone: Vec<u8>,
        ns: Vec<Rr>,
        glue: Vec<Rr>,
    },
    Lame,
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
        let r = Resolver {
            answers: AnswerStore::new(cfg.cache_entries),
            infra: Infra::default(),
            inflight: Mutex::new(HashMap::new()),
            prefetch_tx,
            prefetch_rx: Mutex::new(Some(prefetch_rx)),
            cfg: arc_swap::ArcSwap::from_pointee(cfg),
            net,
            kernel,
            clock,
            priming: Mutex::new(Priming {
                due_ns: if cfg_prime { 0 } else { u64::MAX },
                settled: false,
                primed: false,
            }),
            priming_lock: tokio::sync::Mutex::new(()),
            repriming: AtomicBool::new(false),
            hints: hints.clone(),
            counters: Arc::new(Counters::default()),
        };
        r.install_root(&hints.servers);
        Arc::new(r)
    }

    /// Makes `servers` (NS name, addresses) the root set: the root cut and those addresses are
    /// pinned (never expire, never replaced by referral glue, kept by [`Resolver::flush`]);
    /// the previous root set's addresses go.
    fn install_root(&self, servers: &[(Vec<u8>, Vec<IpAddr>)]) {
        let ns: Vec<Vec<u8>> = servers.iter().map(|(n, _)| n.clone()).collect();
        lock(&self.infra.zones).insert(
            vec![0],
            Deleg {
                ns,
                expires_ns: u64::MAX,
            },
        );
        let mut addrs = lock(&self.infra.addrs);
        addrs.retain(|_, a| a.expires_ns != u64::MAX);
        for (n, a) in servers {
            addrs.insert(
                n.clone(),
                Addrs {
                    ips: a.clone(),
                    expires_ns: u64::MAX,
                },
            );
        }
    }

    /// The root servers in use (NS name, addresses): the hints, or the primed set.
    pub fn root_servers(&self) -> RootSet {
        let ns = lock(&self.infra.zones)
            .get(&[0u8][..])
            .map(|d| d.ns.clone())
            .unwrap_or_default();
        let addrs = lock(&self.infra.addrs);
        ns.into_iter()
            .map(|n| {
                let ips = addrs.get(&n).map(|a| a.ips.clone()).unwrap_or_default();
                (n, ips)
            })
            .collect()
    }

    /// True if the root set in use came from priming (false: the hints).
    pub fn root_primed(&self) -> bool {
        lock(&self.priming).primed
    }

    /// Primes now (RFC 8109): asks the root servers in use, then any other hint address, for
    /// `. NS`, and makes the NS set of the first authoritative answer, with the addresses of
    /// those names from the same answer, the root set until the smallest of their TTLs runs
    /// out (then the next question primes again, in the background). When no server gives
    /// such an answer, the hints are used and priming is tried again after [`PRIME_RETRY`]
    /// seconds. Logs one line either way; returns true on success.
    pub async fn prime(self: &Arc<Self>) -> bool {
        let _running = self.priming_lock.lock().await;
        self.prime_locked().await
    }

    /// Primes when it is due (with `prime_root`: at the first call, then when the root set's
    /// TTL has run out): the first time, the caller waits for it (one priming for all the
    /// questions waiting); later, it runs in the background. Every resolution calls it; the
    /// daemon also calls it at start.
    pub async fn prime_when_due(self: &Arc<Self>) {
        let (due, settled) = {
            let p = lock(&self.priming);
            (p.due_ns <= self.now_ns(), p.settled)
        };
        if !due {
            return;
        }
        if !settled {
            let _running = self.priming_lock.lock().await;
            if lock(&self.priming).due_ns <= self.now_ns() {
                self.prime_locked().await;
            }
            return;
        }
        if self.repriming.swap(true, Relaxed) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            {
                let _running = this.priming_lock.lock().await;
                if lock(&this.priming).due_ns <= this.now_ns() {
                    this.prime_locked().await;
                }
            }
            this.repriming.store(false, Relaxed);
        });
    }

    /// One priming (the caller holds `priming_lock`).
    async fn prime_locked(&self) -> bool {
        let mut ctx = Ctx {
            queries: 0,
            glueless: 0,
            depth: 0,
            deadline: Instant::now() + self.cfg.load().resolve_timeout,
        };
        let root = Deleg {
            ns: self.root_servers().into_iter().map(|(n, _)| n).collect(),
            expires_ns: u64::MAX,
        };
        let mut servers = self.known_addrs(&root, &[]);
        for ip in self.hints.servers.iter().flat_map(|(_, a)| a) {
            let s = SocketAddr::new(*ip, self.cfg.load().upstream_port);
            if self.family_ok(ip) && !servers.contains(&s) {
                servers.push(s);
            }
        }
        let mut why = String::from("no root server address");
        let mut found = None;
        while !servers.is_empty() {
            match self.ask(&mut ctx, &servers, &[0], rtype::NS, false).await {
                Ok((server, reply)) => match root_set(&reply, |ip| self.family_ok(ip)) {
                    Some(set) => {
                        found = Some((server, set));
                        break;
                    }
                    None => {
                        why = format!("{server} gave no authoritative root NS set with addresses");
                        servers.retain(|s| *s != server);
                    }
                },
                Err(e) => {
                    why = e.to_string();
                    break;
                }
            }
        }
        let now = self.now_ns();
        let mut p = lock(&self.priming);
        p.settled = true;
        match found {
            Some((server, (set, ttl))) => {
                let ttl = ttl.min(self.cfg.load().max_ttl).max(PRIME_MIN_TTL);
                self.install_root(&set);
                p.due_ns = now + u64::from(ttl) * NS;
                p.primed = true;
                self.counters.primings.fetch_add(1, Relaxed);
                let servers: Vec<String> = set
                    .iter()
                    .map(|(n, a)| {
                        let a: Vec<String> = a.iter().map(IpAddr::to_string).collect();
                        format!("{} {}", to_presentation(n), a.join(" "))
                    })
                    .collect();
                tracing::info!(
                    %server,
                    ttl,
                    "root priming: {} root servers: {}",
                    set.len(),
                    servers.join(", ")
                );
                true
            }
            None => {
                self.install_root(&self.hints.servers);
                p.due_ns = now + PRIME_RETRY * NS;
                p.primed = false;
                self.counters.priming_failures.fetch_add(1, Relaxed);
                tracing::warn!(
                    "root priming failed ({why}): using the root hints, next try in {PRIME_RETRY} s"
                );
                false
            }
        }
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
            self.cfg.store(Arc::new(next));
        }
        fixed
    }

    /// Nanoseconds now on the resolver's clock.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
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
        let (tx, rx) = oneshot::channel();
        let leader = {
            let mut m = lock(&self.inflight);
            match m.get_mut(&key) {
                Some(w) => {
                    w.push(tx);
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
                let r = this.resolve_uncached(&key).await;
                let waiters = lock(&this.inflight).remove(&key).unwrap_or_default();
                for w in waiters {
                    let _ = w.send(r.clone());
                }
            });
        }
        rx.await.unwrap_or(Err(ResolveError::Failed))
    }

    async fn resolve_uncached(self: &Arc<Self>, key: &CacheKey) -> Resolution {
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
            self.resolve_records(&mut ctx, &key.qname, key.qtype),
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
        self.counters.failures.fetch_add(1, Relaxed);
        tracing::debug!(name = %to_presentation(&key.qname), qtype = key.qtype, error = %err, "resolution failed");
        if self.cfg.load().failure_ttl > 0 {
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

    /// The records answering `qname`/`qtype`, following CNAMEs across zones.
    async fn resolve_records(
        &self,
        ctx: &mut Ctx,
        qname: &[u8],
        qtype: u16,
    ) -> Result<Final, ResolveError> {
        let mut chain: Vec<Rr> = Vec::new();
        let mut name = qname.to_vec();
        for _ in 0..=self.cfg.load().max_cname {
            let step = self.iterate(ctx, &name, qtype).await?;
            chain.extend(step.answer);
            match step.next {
                Some(next) if !chain.iter().any(|r| r.owner == next) => name = next,
                Some(_) => return Err(ResolveError::Failed), // CNAME loop
                None => {
                    return Ok(Final {
                        rcode: step.rcode,
                        answer: chain,
                        authority: step.authority,
                    })
                }
            }
        }
        Err(ResolveError::Budget)
    }

    /// One name: from the closest known cut down the referrals to an answer.
    async fn iterate(&self, ctx: &mut Ctx, name: &[u8], qtype: u16) -> Result<Step, ResolveError> {
        let now = self.now_ns();
        if let Some((_, until, mut soa)) = self.infra.nx_cut(name, now) {
            self.counters.nxdomain_cut_hits.fetch_add(1, Relaxed);
            soa.ttl = ((until - now) / NS) as u32;
            return Ok(Step {
                rcode: RCODE_NXDOMAIN,
                answer: vec![],
                authority: vec![soa],
                next: None,
            });
        }
        let forwarding = !self.cfg.load().forwarders.is_empty();
        let (mut zone, mut deleg) = if forwarding {
            (
                vec![0],
                Deleg {
                    ns: vec![],
                    expires_ns: u64::MAX,
                },
            )
        } else {
            self.infra
                .closest_cut(name, now)
                .ok_or(ResolveError::Failed)?
        };
        let mut excluded: Vec<SocketAddr> = Vec::new();
        // QNAME minimisation (RFC 9156, relaxed): labels of the last minimised name asked in
        // the current zone (0: none yet), and whether to send the full name from now on.
        let minimise = self.cfg.load().qname_minimisation && !forwarding;
        let mut asked_labels = 0usize;
        let mut full = false;
        let mut minimised = 0usize;
        for _ in 0..MAX_REFERRALS + MAX_MINIMISE {
            let servers = if forwarding {
                self.cfg.load()
                    .forwarders
                    .iter()
                    .copied()
                    .filter(|s| !excluded.contains(s))
                    .collect()
            } else {
                self.servers_for(ctx, &zone, &deleg, &excluded).await?
            };
            if servers.is_empty() {
                // No address known for this cut (its glue expired before its NS records, or
                // was never given): forget the cut and ask the parent again, which refers
                // with fresh glue.
                if forwarding || zone == [0] || !excluded.is_empty() {
                    return Err(ResolveError::Failed);
                }
                lock(&self.infra.zones).remove(&zone);
                let parent = xdns_wire::name::parent(&zone).unwrap_or(&[0]).to_vec();
                (zone, deleg) = self
                    .infra
                    .closest_cut(&parent, self.now_ns())
                    .ok_or(ResolveError::Failed)?;
                continue;
            }
            let name_labels = xdns_wire::name::label_count(name);
            let next_labels = asked_labels.max(xdns_wire::name::label_count(&zone)) + 1;
            if minimised >= MAX_MINIMISE {
                full = true;
            }
            if minimise && !full && next_labels < name_labels {
                minimised += 1;
                // Ask for the next label below the cut only, type A (RFC 9156 §2.1).
                let qn = suffix_with_labels(name, next_labels);
                let (server, reply) = self.ask(ctx, &servers, qn, rtype::A, false).await?;
                match classify(&reply, qn, rtype::A, &zone, self.cfg.load().max_cname) {
                    Class::Referral {
                        zone: child,
                        ns,
                        glue,
                    } => {
                        deleg = self.note_referral(&child, &ns, &glue, now);
                        zone = child;
                        excluded.clear();
                        asked_labels = 0;
                    }
                    // The name exists here and is no cut (data, CNAME or an empty
                    // non-terminal): one label more.
                    Class::Answer(_) | Class::NoData(_) => asked_labels = next_labels,
                    // NXDOMAIN above the name, a lame or odd reply: relaxed mode asks the
                    // full name instead (an NXDOMAIN is then proven for the name itself).
                    Class::NxDomain(_) | Class::Lame => {
                        tracing::debug!(%server, zone = %to_presentation(&zone), "minimised query: asking the full name");
                        full = true;
                    }
                }
                continue;
            }
            let (server, reply) = self.ask(ctx, &servers, name, qtype, forwarding).await?;
            match classify(&reply, name, qtype, &zone, self.cfg.load().max_cname) {
                Class::Answer(step) => {
                    if step.rcode == RCODE_NXDOMAIN {
                        if let (Some(last), Some(soa)) =
                            (step.answer.last(), step.authority.first())
                        {
                            if let Some(t) = last.target() {
                                self.note_nxdomain(&t, soa, now);
                            }
                        }
                    }
                    return Ok(step);
                }
                Class::NxDomain(soa) => {
                    if let Some(soa) = &soa {
                        self.note_nxdomain(name, soa, now);
                    }
                    return Ok(Step {
                        rcode: RCODE_NXDOMAIN,
                        answer: vec![],
                        authority: soa.into_iter().collect(),
                        next: None,
                    });
                }
                Class::NoData(soa) => {
                    return Ok(Step {
                        rcode: RCODE_NOERROR,
                        answer: vec![],
                        authority: soa.into_iter().collect(),
                        next: None,
                    });
                }
                Class::Referral {
                    zone: child,
                    ns,
                    glue,
                } if !forwarding => {
                    deleg = self.note_referral(&child, &ns, &glue, now);
                    zone = child;
                    excluded.clear();
                    asked_labels = 0;
                    full = false;
                }
                Class::Referral { .. } | Class::Lame => {
                    tracing::debug!(%server, zone = %to_presentation(&zone), "lame reply");
                    excluded.push(server);
                }
            }
        }
        Err(ResolveError::Budget)
    }

    fn note_nxdomain(&self, name: &[u8], soa: &Rr, now: u64) {
        let ttl = soa
            .soa_negative_ttl()
            .unwrap_or(0)
            .min(self.cfg.load().max_negative_ttl);
        if ttl == 0 {
            return;
        }
        let mut nx = lock(&self.infra.nx);
        make_room(&mut nx, self.cfg.load().infra_entries, |(u, _)| *u <= now);
        nx.insert(name.to_vec(), (now + u64::from(ttl) * NS, soa.clone()));
    }

    /// Caches a referral: the child's NS names and their in-bailiwick glue.
    fn note_referral(&self, child: &[u8], ns: &[Rr], glue: &[Rr], now: u64) -> Deleg {
        let ttl = ns
            .iter()
            .map(|r| r.ttl)
            .min()
            .unwrap_or(0)
            .min(self.cfg.load().max_ttl);
        let deleg = Deleg {
            ns: ns.iter().filter_map(Rr::target).collect(),
            expires_ns: now + u64::from(ttl.max(1)) * NS,
        };
        {
            let mut z = lock(&self.infra.zones);
            make_room(&mut z, self.cfg.load().infra_entries, |d| d.expires_ns <= now);
            z.insert(child.to_vec(), deleg.clone());
        }
        let mut by_name: HashMap<Vec<u8>, Addrs> = HashMap::new();
        for g in glue {
            let ip = match (g.rtype, g.rdata.len()) {
                (rtype::A, 4) => IpAddr::from(<[u8; 4]>::try_from(&g.rdata[..]).expect("4 bytes")),
                (rtype::AAAA, 16) => {
                    IpAddr::from(<[u8; 16]>::try_from(&g.rdata[..]).expect("16 bytes"))
                }
                _ => continue,
            };
            let e = by_name.entry(g.owner.clone()).or_insert(Addrs {
                ips: vec![],
                expires_ns: u64::MAX,
            });
            e.ips.push(ip);
            e.expires_ns = e
                .expires_ns
                .min(now + u64::from(g.ttl.min(self.cfg.load().max_ttl).max(1)) * NS);
        }
        if !by_name.is_empty() {
            let mut a = lock(&self.infra.addrs);
            for (n, v) in by_name {
                // Root hint addresses are never replaced.
                if a.get(&n).is_some_and(|x| x.expires_ns == u64::MAX) {
                    continue;
                }
                make_room(&mut a, self.cfg.load().infra_entries, |x| x.expires_ns <= now);
                a.insert(n, v);
            }
        }
        deleg
    }

    fn family_ok(&self, ip: &IpAddr) -> bool {
        match ip {
            IpAddr::V4(_) => self.cfg.load().ipv4,
            IpAddr::V6(_) => self.cfg.load().ipv6,
        }
    }

    /// Known addresses of `deleg`'s servers, fastest first; resolves glueless NS names when
    /// none is known.
    async fn servers_for(
        &self,
        ctx: &mut Ctx,
        zone: &[u8],
        deleg: &Deleg,
        excluded: &[SocketAddr],
    ) -> Result<Vec<SocketAddr>, ResolveError> {
        let mut out = self.known_addrs(deleg, excluded);
        if out.is_empty() {
            let mut names: Vec<Vec<u8>> = deleg
                .ns
                .iter()
                .filter(|n| !is_subdomain(n, zone)) // in-zone names without glue: unreachable
                .cloned()
                .collect();
            names.shuffle(&mut rand::rng());
            for n in names.into_iter().take(GLUELESS_PER_CUT) {
                if ctx.glueless >= self.cfg.load().max_glueless || ctx.depth >= MAX_DEPTH {
                    return Err(ResolveError::Budget);
                }
                ctx.glueless += 1;
                ctx.depth += 1;
                let qt = if self.cfg.load().ipv4 { rtype::A } else { rtype::AAAA };
                let r = Box::pin(self.resolve_records(ctx, &n, qt)).await;
                ctx.depth -= 1;
                if let Ok(f) = r {
                    let now = self.now_ns();
                    let mut ips = Vec::new();
                    let mut ttl = u32::MAX;
                    for rr in f.answer.iter().filter(|r| r.rtype == qt) {
                        if let Ok(b) = <[u8; 4]>::try_from(&rr.rdata[..]) {
                            ips.push(IpAddr::from(b));
                        } else if let Ok(b) = <[u8; 16]>::try_from(&rr.rdata[..]) {
                            ips.push(IpAddr::from(b));
                        }
                        ttl = ttl.min(rr.ttl);
                    }
                    if !ips.is_empty() {
                        let mut a = lock(&self.infra.addrs);
                        make_room(&mut a, self.cfg.load().infra_entries, |x| x.expires_ns <= now);
                        a.insert(
                            n.clone(),
                            Addrs {
                                ips,
                                expires_ns: now + u64::from(ttl.clamp(1, self.cfg.load().max_ttl)) * NS,
                            },
                        );
                        drop(a);
                        out = self.known_addrs(deleg, excluded);
                        if !out.is_empty() {
                            break;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    fn known_addrs(&self, deleg: &Deleg, excluded: &[SocketAddr]) -> Vec<SocketAddr> {
        let now = self.now_ns();
        let addrs = lock(&self.infra.addrs);
        let mut out: Vec<SocketAddr> = Vec::new();
        for n in &deleg.ns {
            if let Some(a) = addrs.get(n).filter(|a| a.expires_ns > now) {
                for ip in &a.ips {
                    let s = SocketAddr::new(*ip, self.cfg.load().upstream_port);
                    if self.family_ok(ip) && !excluded.contains(&s) && !out.contains(&s) {
                        out.push(s);
                    }
                }
            }
        }
        drop(addrs);
        self.sort_by_rtt(&mut out, now);
        out
    }

    /// Orders servers by smoothed RTT; held-down servers go last.
    fn sort_by_rtt(&self, servers: &mut [SocketAddr], now: u64) {
        let mut rng = rand::rng();
        let rtt = lock(&self.infra.rtt);
        let mut keyed: Vec<(bool, u64, SocketAddr)> = servers
            .iter()
            .map(|s| match rtt.get(&s.ip()) {
                Some(r) => (r.held_until_ns > now, r.srtt_us, *s),
                None => (false, INITIAL_SRTT_US + rng.random_range(0..20_000), *s),
            })
            .collect();
        drop(rtt);
        keyed.sort_by_key(|k| (k.0, k.1));
        for (i, k) in keyed.into_iter().enumerate() {
            servers[i] = k.2;
        }
    }

    fn note_rtt(&self, server: SocketAddr, elapsed: Option<Duration>) {
        let now = self.now_ns();
        let mut rtt = lock(&self.infra.rtt);
        if !rtt.contains_key(&server.ip()) {
            make_room(&mut rtt, self.cfg.load().infra_entries, |r| {
                r.held_until_ns <= now && r.timeouts == 0
            });
        }
        let e = rtt.entry(server.ip()).or_insert(Rtt {
            srtt_us: INITIAL_SRTT_US,
            timeouts: 0,
            held_until_ns: 0,
        });
        match elapsed {
            Some(d) => {
                let sample = d.as_micros() as u64;
                e.srtt_us = (e.srtt_us * 7 + sample) / 8;
                e.timeouts = 0;
                e.held_until_ns = 0;
            }
            None => {
                e.srtt_us = (e.srtt_us * 2)
                    .clamp(self.cfg.load().upstream_timeout.as_micros() as u64, MAX_SRTT_US);
                e.timeouts += 1;
                if e.timeouts >= 3 {
                    // Hold a dead server down, growing with repeated timeouts (at most 60 s).
                    let secs = (1u64 << (e.timeouts - 3).min(6)).min(60);
                    e.held_until_ns = now + secs * NS;
                }
            }
        }
    }

    /// `server` has not answered after `waited`: a lower bound of its RTT. Only ever raises
    /// its SRTT (and keeps its timeout count), so a silent server is not rewarded for having
    /// been asked late.
    fn note_slow(&self, server: SocketAddr, waited: Duration) {
        let mut rtt = lock(&self.infra.rtt);
        let e = rtt.entry(server.ip()).or_insert(Rtt {
            srtt_us: INITIAL_SRTT_US,
            timeouts: 0,
            held_until_ns: 0,
        });
        let blended = (e.srtt_us * 7 + waited.as_micros() as u64) / 8;
        e.srtt_us = e.srtt_us.max(blended).min(MAX_SRTT_US);
    }

    /// Asks `servers` (fastest first), `fanout` at a time; the first valid reply wins.
    async fn ask(
        &self,
        ctx: &mut Ctx,
        servers: &[SocketAddr],
        name: &[u8],
        qtype: u16,
        rd: bool,
    ) -> Result<(SocketAddr, Reply), ResolveError> {
        let fanout = self.cfg.load().fanout.max(1);
        for batch in servers.chunks(fanout) {
            let left = ctx.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ResolveError::Timeout);
            }
            let timeout = self.cfg.load().upstream_timeout.min(left);
            // The exchanges run inside this task (no task spawned per upstream query): a
            // reply wakes the resolution itself, which sends its next query at once. A task
            // per query cost a spawn and a hand-off per reply: in the lab, ~20 of the ~75 us
            // between a reply and the next query of a cold resolution.
            let mut set = Race::default();
            let batch_start = Instant::now();
            // Servers of the batch still waited for, with when they were (to be) asked.
            let mut waiting: Vec<(SocketAddr, Instant)> = Vec::new();
            for (k, &server) in batch.iter().enumerate() {
                // Counted when planned: a staggered query that is never sent still counts
                // against the budget (conservative).
                if ctx.queries >= self.cfg.load().max_queries {
                    if set.is_empty() {
                        return Err(ResolveError::Budget);
                    }
                    break;
                }
                ctx.queries += 1;
                let net = self.net.clone();
                let qname = name.to_vec();
                let payload = self.cfg.load().edns_payload;
                let counters = self.counters.clone();
                // The k-th server of the batch is asked k * fanout_delay later, unless a valid
                // reply came first (the exchange is then dropped before sending).
                let delay = self.cfg.load().fanout_delay * k as u32;
                waiting.push((server, batch_start + delay));
                set.push(async move {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    counters.upstream_queries.fetch_add(1, Relaxed);
                    exchange(net, server, qname, qtype, rd, payload, timeout).await
                });
            }
            while let Some(x) = set.next().await {
                self.counters
                    .rejected_replies
                    .fetch_add(u64::from(x.rejected), Relaxed);
                if x.tcp {
                    self.counters.tcp_fallbacks.fetch_add(1, Relaxed);
                }
                waiting.retain(|(s, _)| *s != x.server);
                match x.reply {
                    Some(reply) => {
                        self.note_rtt(x.server, Some(x.elapsed));
                        let rc = reply.rcode();
                        if rc == RCODE_NOERROR || rc == RCODE_NXDOMAIN {
                            // Servers asked but not answering yet are at least this slow: a
                            // sample, so a silent server asked first does not stay first.
                            let now = Instant::now();
                            for (s, asked) in &waiting {
                                if *asked < now {
                                    self.note_slow(*s, now - *asked);
                                }
                            }
                            return Ok((x.server, reply));
                        }
                    }
                    None => {
                        if x.timed_out {
                            self.counters.upstream_timeouts.fetch_add(1, Relaxed);
                        }
                        self.note_rtt(x.server, None);
                    }
                }
            }
        }
        Err(ResolveError::Failed)
    }
}

/// The suffix of `name` with `labels` labels (root not counted).
fn suffix_with_labels(name: &[u8], labels: usize) -> &[u8] {
    let offs: Vec<usize> = xdns_wire::name::suffix_offsets(name).collect();
    let total = offs.len().saturating_sub(1);
    &name[offs[total.saturating_sub(labels)]..]
}

/// Futures polled by the task that awaits [`Race::next`], each output returned as soon as it
/// is ready (a small `FuturesUnordered` for the few exchanges of one upstream question). Each
/// wake polls every future still running, so all of them start (send) together even when one
/// is ready at once. Dropping it drops the futures still running: an exchange not sent yet
/// never is.
struct Race<F: Future> {
    futs: Vec<Option<Pin<Box<F>>>>,
    /// Outputs ready but not yet returned, in order of completion.
    ready: std::collections::VecDeque<F::Output>,
}

impl<F: Future> Default for Race<F> {
    fn default() -> Self {
        Race {
            futs: Vec::new(),
            ready: Default::default(),
        }
    }
}

impl<F: Future> Race<F> {
    fn push(&mut self, f: F) {
        self.futs.push(Some(Box::pin(f)));
    }

    fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.futs.iter().all(Option::is_none)
    }

    /// The next output, in order of completion; `None` when every future has finished.
    async fn next(&mut self) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            for slot in &mut self.futs {
                if let Some(f) = slot {
                    if let Poll::Ready(v) = f.as_mut().poll(cx) {
                        *slot = None;
                        self.ready.push_back(v);
                    }
                }
            }
            match self.ready.pop_front() {
                Some(v) => Poll::Ready(Some(v)),
                None if self.futs.iter().all(Option::is_none) => Poll::Ready(None),
                None => Poll::Pending,
            }
        })
        .await
    }
}

/// What one exchange with one server gave.
struct Exchanged {
    server: SocketAddr,
    reply: Option<Reply>,
    elapsed: Duration,
    timed_out: bool,
    tcp: bool,
    rejected: u32,
}

/// One question to one server: random ID, 0x20 case, UDP then TCP on TC=1.
async fn exchange(
    net: Arc<dyn Network>,
    server: SocketAddr,
    qname: Vec<u8>,
    qtype: u16,
    rd: bool,
    payload: u16,
    timeout: Duration,
) -> Exchanged {
    let (id, cased) = {
        let mut rng = rand::rng();
        (rng.random::<u16>(), randomize_case(&qname, &mut rng))
    };
    let query = build_query(id, &cased, qtype, rd, payload);
    let expect = Expect {
        server,
        id,
        qname: cased,
        qtype,
        rejected: Default::default(),
    };
    let start = Instant::now();
    let mut out = Exchanged {
        server,
        reply: None,
        elapsed: Duration::ZERO,
        timed_out: false,
        tcp: false,
        rejected: 0,
    };
    let r = net.udp(&query, &expect, timeout).await;
    let mut query = query;
    let mut reply = match r {
        Ok(bytes) => parse_reply(&bytes),
        Err(e) => {
            out.timed_out = e.kind() == std::io::ErrorKind::TimedOut;
            None
        }
    };
    // FORMERR to a query with OPT: a server that predates EDNS (RFC 6891 §7); ask once more
    // without it (same ID and question).
    if reply.as_ref().is_some_and(|r| r.rcode() == 1) {
        query = build_query(id, &expect.qname, qtype, rd, 0);
        let left = timeout
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(100));
        reply = match net.udp(&query, &expect, left).await {
            Ok(bytes) => parse_reply(&bytes),
            Err(_) => None,
        };
    }
    if reply.as_ref().is_some_and(Reply::truncated) {
        out.tcp = true;
        let left = timeout
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(100));
        reply = match net.tcp(&query, &expect, left).await {
            Ok(bytes) => parse_reply(&bytes).filter(|r| !r.truncated()),
            Err(e) => {
                out.timed_out = e.kind() == std::io::ErrorKind::TimedOut;
                None
            }
        };
    }
    out.elapsed = start.elapsed();
    out.reply = reply;
    out.rejected = expect.rejected.load(std::sync::atomic::Ordering::Relaxed);
    out
}

/// The root set of a priming reply (RFC 8109 §3): the NS names of `.` in the answer of an
/// authoritative NOERROR reply, each with the A/AAAA records of that name from the additional
/// section (addresses of other names are ignored), and the smallest TTL of those records.
/// `None` when there is no such NS set or none of its names has an address `usable` accepts.
fn root_set(reply: &Reply, usable: impl Fn(&IpAddr) -> bool) -> Option<(RootSet, u32)> {
    if reply.rcode() != RCODE_NOERROR || !reply.authoritative() {
        return None;
    }
    let mut ttl = u32::MAX;
    let mut set: RootSet = Vec::new();
    for r in reply
        .answer
        .iter()
        .filter(|r| r.rtype == rtype::NS && r.owner == [0])
    {
        if let Some(t) = r.target() {
            ttl = ttl.min(r.ttl);
            if !set.iter().any(|(n, _)| *n == t) {
                set.push((t, Vec::new()));
            }
        }
    }
    for r in &reply.additional {
        let ip = match (r.rtype, r.rdata.len()) {
            (rtype::A, 4) => IpAddr::from(<[u8; 4]>::try_from(&r.rdata[..]).expect("4 bytes")),
            (rtype::AAAA, 16) => {
                IpAddr::from(<[u8; 16]>::try_from(&r.rdata[..]).expect("16 bytes"))
            }
            _ => continue,
        };
        if let Some((_, ips)) = set.iter_mut().find(|(n, _)| *n == r.owner) {
            if !ips.contains(&ip) {
                ips.push(ip);
                ttl = ttl.min(r.ttl);
            }
        }
    }
    set.iter()
        .any(|(_, ips)| ips.iter().any(&usable))
        .then_some((set, ttl))
}

/// Classifies a reply from a server of `zone` for `name`/`qtype` (records outside `zone` are
/// ignored: the bailiwick rule).
fn classify(reply: &Reply, name: &[u8], qtype: u16, zone: &[u8], max_cname: usize) -> Class {
    let rcode = reply.rcode();
    if rcode != RCODE_NOERROR && rcode != RCODE_NXDOMAIN {
        return Class::Lame;
    }
    let in_bw = |owner: &[u8]| is_subdomain(owner, zone);
    let mut cur = name.to_vec();
    let mut chain: Vec<Rr> = Vec::new();
    let mut found = false;
    for _ in 0..=max_cname {
        let at: Vec<&Rr> = reply
            .answer
            .iter()
            .filter(|r| r.owner == cur && in_bw(&r.owner))
            .collect();
        let data: Vec<Rr> = at
            .iter()
            .filter(|r| r.rtype == qtype || (qtype == rtype::ANY && r.rtype != rtype::CNAME))
            .map(|r| (*r).clone())
            .collect();
        if !data.is_empty() {
            chain.extend(data);
            found = true;
            break;
        }
        if qtype == rtype::CNAME {
            break;
        }
        match at
            .iter()
            .find(|r| r.rtype == rtype::CNAME)
            .and_then(|c| c.target().map(|t| (c, t)))
        {
            Some((c, t)) if !chain.iter().any(|r| r.owner == t) => {
                // A DNAME above `cur` that synthesised this CNAME goes first (RFC 6672 §3.4).
                for d in reply.answer.iter().filter(|r| {
                    r.rtype == rtype::DNAME
                        && r.owner != cur
                        && in_bw(&r.owner)
                        && is_subdomain(&cur, &r.owner)
                }) {
                    if !chain.contains(d) {
                        chain.push(d.clone());
                    }
                }
                chain.push((*c).clone());
                cur = t;
            }
            _ => break,
        }
    }
    let soa = reply
        .authority
        .iter()
        .find(|r| r.rtype == rtype::SOA && in_bw(&r.owner) && is_subdomain(&cur, &r.owner))
        .cloned();
    if found {
        return Class::Answer(Step {
            rcode: RCODE_NOERROR,
            answer: chain,
            authority: vec![],
            next: None,
        });
    }
    if !chain.is_empty() {
        // The chain stops at `cur` without data.
        // NXDOMAIN, or NODATA proven by the same zone: the chain ends here.
        let ends =
            rcode == RCODE_NXDOMAIN || (soa.is_some() && reply.authoritative() && in_bw(&cur));
        let step = if ends {
            Step {
                rcode,
                answer: chain,
                authority: soa.into_iter().collect(),
                next: None,
            }
        } else {
            Step {
                rcode,
                answer: chain,
                authority: vec![],
                next: Some(cur),
            }
        };
        return Class::Answer(step);
    }
    if rcode == RCODE_NXDOMAIN {
        return Class::NxDomain(soa);
    }
    // A referral: NS records of a zone strictly between the server's zone and the name.
    let child = reply
        .authority
        .iter()
        .find(|r| {
            r.rtype == rtype::NS
                && r.owner != zone
                && in_bw(&r.owner)
                && is_subdomain(name, &r.owner)
        })
        .map(|r| r.owner.clone());
    if let Some(child) = child {
        if reply.answer.is_empty() || !reply.authoritative() {
            let ns: Vec<Rr> = reply
                .authority
                .iter()
                .filter(|r| r.rtype == rtype::NS && r.owner == child)
                .cloned()
                .collect();
            let names: Vec<Vec<u8>> = ns.iter().filter_map(Rr::target).collect();
            let glue: Vec<Rr> = reply
                .additional
                .iter()
                .filter(|r| {
                    (r.rtype == rtype::A || r.rtype == rtype::AAAA)
                        && in_bw(&r.owner)
                        && names.contains(&r.owner)
                })
                .cloned()
                .collect();
            return Class::Referral {
                zone: child,
                ns,
                glue,
            };
        }
    }
    if soa.is_some() || reply.authoritative() {
        return Class::NoData(soa);
    }
    Class::Lame
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(owner: &str, rtype: u16, rdata: Vec<u8>) -> Rr {
        Rr {
            owner: xdns_wire::name::from_presentation(owner).unwrap(),
            rtype,
            ttl: 300,
            rdata,
        }
    }

    fn n(s: &str) -> Vec<u8> {
        xdns_wire::name::from_presentation(s).unwrap()
    }

    /// A DNAME answer: the DNAME, then the synthesised CNAME, then the data; a DNAME from
    /// outside the server's zone is dropped with the rest of the out-of-bailiwick data.
    #[test]
    fn dname_comes_with_its_cname() {
        let reply = Reply {
            flags: 0x8400,
            answer: vec![
                rr("old.example.", rtype::DNAME, n("new.example.")),
                rr("www.old.example.", rtype::CNAME, n("www.new.example.")),
                rr("www.new.example.", rtype::A, vec![198, 18, 0, 1]),
                rr("evil.", rtype::DNAME, n("x.")),
            ],
            ..Reply::default()
        };
        let Class::Answer(step) =
            classify(&reply, &n("www.old.example."), rtype::A, &n("example."), 8)
        else {
            panic!("not an answer");
        };
        let types: Vec<u16> = step.answer.iter().map(|r| r.rtype).collect();
        assert_eq!(types, vec![rtype::DNAME, rtype::CNAME, rtype::A]);
        assert_eq!(step.next, None);
    }

    /// Priming answers: only an authoritative NOERROR with NS at `.` counts; only addresses of
    /// those NS names are kept; the smallest TTL of what is kept is the set's life.
    #[test]
    fn root_set_of_a_priming_reply() {
        let a = |o: &str, ip: u8, ttl: u32| Rr {
            ttl,
            ..rr(o, rtype::A, vec![198, 18, 0, ip])
        };
        let good = Reply {
            flags: 0x8400,
            answer: vec![
                rr(".", rtype::NS, n("A.root.")),
                rr(".", rtype::NS, n("b.root.")),
                rr("x.", rtype::NS, n("c.root.")),
            ],
            additional: vec![
                a("a.root.", 1, 500),
                a("c.root.", 3, 5),
                a("b.root.", 2, 400),
            ],
            ..Reply::default()
        };
        let (set, ttl) = root_set(&good, |_| true).unwrap();
        assert_eq!(
            set,
            vec![
                (n("a.root."), vec![IpAddr::from([198, 18, 0, 1])]),
                (n("b.root."), vec![IpAddr::from([198, 18, 0, 2])]),
            ]
        );
        assert_eq!(ttl, 300, "NS TTL 300 < glue 400");
        assert!(
            root_set(&good, |ip| ip.is_ipv6()).is_none(),
            "no usable address"
        );
        let not_aa = Reply {
            flags: 0x8000,
            ..good.clone()
        };
        assert!(root_set(&not_aa, |_| true).is_none());
        let nx = Reply {
            flags: 0x8403,
            ..good.clone()
        };
        assert!(root_set(&nx, |_| true).is_none());
        let no_glue = Reply {
            additional: vec![a("c.root.", 3, 5)],
            ..good
        };
        assert!(root_set(&no_glue, |_| true).is_none());
    }

    /// Referrals: downward only, glue only for the referral's NS names inside the zone asked.
    #[test]
    fn referral_table() {
        let glue = |o: &str| rr(o, rtype::A, vec![198, 18, 0, 9]);
        // (zone asked, NS owner, NS target, glue owners, referral?, glue kept)
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            &'static [&'static str],
            bool,
            usize,
        );
        let table: &[Case] = &[
            (
                "test.",
                "example.test.",
                "ns.example.test.",
                &["ns.example.test."],
                true,
                1,
            ),
            (
                "test.",
                "example.test.",
                "ns.example.net.",
                &["ns.example.net."],
                true,
                0,
            ),
            (
                "test.",
                "example.test.",
                "ns.example.test.",
                &["other.test."],
                true,
                0,
            ),
            (
                "example.test.",
                "test.",
                "ns.test.",
                &["ns.test."],
                false,
                0,
            ),
            (
                "example.test.",
                "example.test.",
                "ns.example.test.",
                &[],
                false,
                0,
            ),
            ("test.", "other.test.", "ns.other.test.", &[], false, 0),
        ];
        for (zone, owner, target, glues, is_ref, kept) in table {
            let reply = Reply {
                flags: 0x8000,
                authority: vec![rr(owner, rtype::NS, n(target))],
                additional: glues.iter().map(|g| glue(g)).collect(),
                ..Reply::default()
            };
            match classify(&reply, &n("www.example.test."), rtype::A, &n(zone), 8) {
                Class::Referral { zone: z, glue, .. } => {
                    assert!(is_ref, "{zone} {owner}");
                    assert_eq!(z, n(owner));
                    assert_eq!(glue.len(), *kept, "{zone} {owner} {glues:?}");
                }
                other => assert!(!is_ref, "{zone} {owner}: {other:?}"),
            }
        }
    }
}
