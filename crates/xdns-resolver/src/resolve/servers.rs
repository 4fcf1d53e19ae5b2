//! Server choice and exchanges. The addresses of a cut's servers come from glue or, when none
//! is known, from resolving up to [`GLUELESS_PER_CUT`] of its NS names (under the client
//! question's budget). Servers are ordered by smoothed RTT (held-down ones last); each
//! upstream question goes to up to `fanout` of them, the k-th one `k * fanout_delay` after
//! the first unless a valid reply came meanwhile (0 = all at once); the first valid reply
//! wins and servers still silent get an RTT sample. A reply is *valid* when it comes from the
//! server asked, with the ID and the question (0x20 letter case included) as sent
//! ([`crate::msg::Expect`]), and RCODE NOERROR or NXDOMAIN. FORMERR to a query with OPT asks
//! again without it; TC=1 asks again over TCP.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::Rng;
use tokio::time::Instant;
use xdns_wire::name::is_subdomain;

use super::{Ctx, ResolveError, Resolver, MAX_DEPTH, NS, RCODE_NOERROR, RCODE_NXDOMAIN};
use crate::msg::{build_query, parse_reply, randomize_case, rtype, Expect, Reply};
use crate::net::Network;
use crate::store::{lock, make_room, Addrs, Deleg, Rtt};

/// Glueless NS names tried for one referral before giving up on it.
const GLUELESS_PER_CUT: usize = 3;
/// SRTT given to a server never asked (microseconds), randomised a little so that new servers
/// are spread; like Unbound's 376 ms, low enough that they get tried.
pub(super) const INITIAL_SRTT_US: u64 = 200_000;
/// Ceiling of a smoothed RTT (microseconds).
const MAX_SRTT_US: u64 = 10_000_000;

impl Resolver {
    pub(super) fn family_ok(&self, ip: &IpAddr) -> bool {
        match ip {
            IpAddr::V4(_) => self.cfg.load().ipv4,
            IpAddr::V6(_) => self.cfg.load().ipv6,
        }
    }

    /// Known addresses of `deleg`'s servers, fastest first; resolves glueless NS names when
    /// none is known.
    pub(super) async fn servers_for(
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
                let r = Box::pin(self.resolve_records(ctx, &n, qt, None)).await;
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
                        self.infra.changed();
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

    pub(super) fn known_addrs(&self, deleg: &Deleg, excluded: &[SocketAddr]) -> Vec<SocketAddr> {
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
    pub(super) fn sort_by_rtt(&self, servers: &mut [SocketAddr], now: u64) {
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

    pub(super) fn note_rtt(&self, server: SocketAddr, elapsed: Option<Duration>) {
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
    pub(super) fn note_slow(&self, server: SocketAddr, waited: Duration) {
        let mut rtt = lock(&self.infra.rtt);
        let e = rtt.entry(server.ip()).or_insert(Rtt {
            srtt_us: INITIAL_SRTT_US,
            timeouts: 0,
            held_until_ns: 0,
        });
        let blended = (e.srtt_us * 7 + waited.as_micros() as u64) / 8;
        e.srtt_us = e.srtt_us.max(blended).min(MAX_SRTT_US);
    }

    /// Asks `servers` (fastest first) of `zone` (`None` when forwarding), `fanout` at a
    /// time; the first valid reply wins. Each query needs a slot of its server and zone
    /// ([`super::quota`]): a server at its bound is skipped; when none could be asked for
    /// that reason, the question fails at once with [`ResolveError::Quota`].
    pub(super) async fn ask(
        &self,
        ctx: &mut Ctx,
        servers: &[SocketAddr],
        zone: Option<&[u8]>,
        name: &[u8],
        qtype: u16,
        rd: bool,
    ) -> Result<(SocketAddr, Reply), ResolveError> {
        let fanout = self.cfg.load().fanout.max(1);
        let mut sent = false;
        let mut refused = false;
        let mut left_servers = servers;
        while !left_servers.is_empty() {
            // The next `fanout` servers that have room.
            let mut batch: Vec<(SocketAddr, super::quota::Slot)> = Vec::with_capacity(fanout);
            while batch.len() < fanout && !left_servers.is_empty() {
                let server = left_servers[0];
                left_servers = &left_servers[1..];
                match self.fetches.acquire(zone, server.ip()) {
                    Ok(slot) => batch.push((server, slot)),
                    Err(super::quota::Refused::Server) => {
                        self.counters.quota_server_refusals.fetch_add(1, Relaxed);
                        refused = true;
                    }
                    Err(super::quota::Refused::Zone) => {
                        // No server of this zone may be asked now.
                        self.counters.quota_zone_refusals.fetch_add(1, Relaxed);
                        refused = true;
                        left_servers = &[];
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            sent = true;
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
            for (k, (server, slot)) in batch.into_iter().enumerate() {
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
                    let x = exchange(net, server, qname, qtype, rd, payload, timeout).await;
                    slot.finish(x.reply.is_some());
                    x
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
        Err(if refused && !sent {
            ResolveError::Quota
        } else {
            ResolveError::Failed
        })
    }
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
