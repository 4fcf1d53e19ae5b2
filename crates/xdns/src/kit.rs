//! Kernel iteration's userspace half (issue 32; bpf/README.md, "Kernel iteration").
//!
//! - [`reserve`] binds a UDP socket on every port of `[resolver] kernel_iteration_ports`
//!   (IPv6 wildcard, dual-stack) before the XDP program may send from them: no other socket
//!   of the host can take one, and a response the kernel checks and passes
//!   (`pass_kit_response`) arrives on it.
//! - [`spawn`] starts a thread that reads the kernel's ring buffer `xdns_kit_events` in
//!   batches: each record is a final response with the pending entry the kernel claimed for
//!   it (the usual way), used as below, on that thread ([`finish_ring`]): the resolution
//!   runs inline and a final answer is done at once, so the replies of one wake-up's
//!   records go out together, one `sendmmsg` per listen socket. A record marked answered
//!   (the kernel sent the client the reply to a final answer of the common shape itself,
//!   `kit_answered`) is resolved the same way, so it is cached exactly as the resolver caches
//!   its own, and its reply is never sent ([`cache_answered`]); [`spawn`] turns the kernel's
//!   answers on with the resolver's `max_ttl` and `max_negative_ttl` ([`set_ttl_caps`] on a reload). It also starts the tasks that read the reserved
//!   ports, where a response arrives when the ring was full or it was too long: it claims
//!   its pending entry (deletes it from `xdns_kit_pending`; only the claimer answers), is
//!   checked again as the userspace
//!   resolver checks its own (from port 53 of the server asked, the ID, the question with its
//!   0x20 case), and is then *used*: it becomes the first exchange of the userspace
//!   resolution of the client's question ([`xdns_resolver::Resolver::resolve_handed`]): a
//!   referral continues from the child zone, a final answer is cached as the resolver caches
//!   its own (and pushed to the kernel cache) and answered from the listen socket, once. A
//!   response the resolver cannot use (TC=1, SERVFAIL/REFUSED, lame, malformed, the cut asked
//!   unknown) leaves the question to an ordinary resolution. A timer (20 ms) claims the
//!   entries that waited past [`xdns_resolver::Resolver::handed_wait`] (from the server's
//!   RTT), raises the server's SRTT to the time waited and resolves them from scratch.
//!   Before that, an entry unanswered for the server's expected time gets a redundant query
//!   ([`redundant`]: the same question to another server of the cut, by the resolver's own
//!   exchange); the first valid answer claims the entry and wins, and a server that keeps
//!   losing is held down and taken out of the kernel's cuts ([`ZoneWriter::drop_held`]).
//! - The zone map ([`ZoneWriter`]): the root from the hints when the tasks start, then the
//!   delegations the resolver learns ([`xdns_resolver::Resolver::delegations`]: the cut, its
//!   servers' addresses from in-bailiwick glue or resolved NS names, the earlier expiry of
//!   the NS set and those addresses), copied whenever the resolver's zone map changes and as
//!   cuts expire, so the kernel sends a miss straight to the deepest cut known. The map is
//!   bounded (`xdns_kit_zones`' size less the root): past it, the cuts with the fewest labels
//!   are kept (a TLD's cut serves every name below it), then those expiring last. The
//!   kernel adds the cuts of the referrals it follows itself, where the map has no live entry
//!   of that name; every 5 s [`ZoneWriter::sweep`] removes those once expired (the kernel
//!   never deletes one).
//! - The next-hop table (`xdns_kit_hops`, [`crate::kit_hops`]): where forwarding is off (the
//!   default), `bpf_fib_lookup` gives the kernel no next hop; a thread refreshes, every
//!   second, the route and neighbour of each server of the zone map for it.
//! - The stats group `kit`: the kernel's counters (`handed`, `ring_full` among them), the
//!   records read from the ring (`ring_read`), what became of each response handed over
//!   (`response_<use>`) and of entries the timer claimed (`timeout`); the group `kit_state`
//!   (gauges): entries pending now, cuts the daemon holds in the zone map.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use socket2::{Domain, Protocol, Socket, Type};
use xdns_bpf::kit::{KitMaps, KitPending, KitZone, PendKey};
use xdns_zone::Transport;

use crate::config::Config;
use crate::server::Shared;

/// The reserved ports' sockets.
pub struct Reserved(Vec<(u16, std::net::UdpSocket)>);

/// Bind every port of `ports` (dual-stack IPv6 wildcard). A port taken is an error naming it.
/// With `--takeover`, the running server's sockets for those ports are `inherited` (taken
/// from it) instead; each socket is offered for the next takeover.
pub fn reserve(ports: (u16, u16), inherited: &mut Vec<(u16, std::os::fd::OwnedFd)>, shared: &Shared) -> anyhow::Result<Reserved> {
    use std::os::fd::AsFd;
    let mut v = Vec::new();
    for p in ports.0..=ports.1 {
        let s: std::net::UdpSocket = match inherited.iter().position(|(q, _)| *q == p) {
            Some(i) => {
                let s = std::net::UdpSocket::from(inherited.swap_remove(i).1);
                s.set_nonblocking(true)?;
                s
            }
            None => {
                let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
                s.set_only_v6(false)?;
                s.set_nonblocking(true)?;
                s.bind(&SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), p).into())
                    .with_context(|| format!("[resolver] kernel_iteration_ports: reserving port {p} (taken by another socket?)"))?;
                s.into()
            }
        };
        shared.takeover.offer(crate::takeover::Role::Kit { port: p }, s.as_fd())?;
        v.push((p, s));
    }
    // ports no longer in the range: closed with `inherited`
    inherited.clear();
    Ok(Reserved(v))
}

/// Bind every port of `ports` as [`reserve`] would, before the XDP program is loaded: the
/// sockets (handed to [`reserve`] as if inherited), or the first port that is taken with the
/// error. For kernel iteration on by default, which a port taken turns off (with a warning)
/// instead of failing the start.
pub fn probe_ports(ports: (u16, u16)) -> Result<Vec<(u16, std::os::fd::OwnedFd)>, (u16, std::io::Error)> {
    let mut v = Vec::new();
    for p in ports.0..=ports.1 {
        let bind = || -> std::io::Result<Socket> {
            let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_only_v6(false)?;
            s.bind(&SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), p).into())?;
            Ok(s)
        };
        match bind() {
            Ok(s) => v.push((p, s.into())),
            Err(e) => return Err((p, e)),
        }
    }
    Ok(v)
}

/// Claims the pending query a response on `port` from `from` answers, if it is the one sent:
/// from port 53, with the ID and question sent (the kernel checked all this already; a
/// response that reached the socket another way is checked here the same). With the claim,
/// the response as the resolver takes it when it is the answer to the question sent (its
/// zone known): `None` otherwise (the client's question is then resolved from scratch).
fn claim(kit: &KitMaps, port: u16, from: SocketAddr, msg: &[u8]) -> Option<(KitPending, Option<xdns_resolver::Handed>)> {
    if from.port() != 53 || msg.len() < 12 {
        return None;
    }
    let ip = match from.ip() {
        IpAddr::V6(a) => a.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(a)),
        v4 => v4,
    };
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    let p = kit.claim(ip, port, id).ok()??;
    let handed = handed_of(kit, &p, ip, msg);
    Some((p, handed))
}

/// The response `msg` from `ip` to the claimed entry `p`, as the resolver takes it when it
/// is the answer to the question sent (its zone known): `None` otherwise (the client's
/// question is then resolved from scratch).
fn handed_of(kit: &KitMaps, p: &KitPending, ip: IpAddr, msg: &[u8]) -> Option<xdns_resolver::Handed> {
    let same = msg.get(12..12 + p.sent_name.len() + 4).is_some_and(|q| {
        q[..p.sent_name.len()] == p.sent_name[..] && q[p.sent_name.len()..] == [(p.qtype >> 8) as u8, p.qtype as u8, 0, 1]
    });
    if !same || u16::from_be_bytes([msg[4], msg[5]]) != 1 || msg[2] & 0x80 == 0 {
        // claimed, but not its answer: resolved by userspace all the same (the client waits)
        tracing::debug!(%ip, "kernel iteration: a response to a reserved port with another question");
        note(&MALFORMED);
        return None;
    }
    let Some(zone) = kit.zone_of(p) else {
        note(&NO_ZONE);
        return None;
    };
    let rtt = monotonic_ns().checked_sub(p.sent_ns).map(Duration::from_nanos);
    Some(xdns_resolver::Handed { zone, server: SocketAddr::new(ip, 53), reply: msg.to_vec(), rtt })
}

/// The client's query as it sent it (its ID, flags, name, type, EDNS payload and DO).
fn client_query(p: &KitPending) -> Vec<u8> {
    let mut m = p.id.to_be_bytes().to_vec();
    m.extend_from_slice(&p.flags.to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(p.payload.is_some())]);
    m.extend_from_slice(&p.qname);
    m.extend_from_slice(&p.qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    if let Some(size) = p.payload {
        m.extend_from_slice(&[0, 0, 41]);
        m.extend_from_slice(&size.to_be_bytes());
        m.extend_from_slice(&[0, 0, if p.dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
    }
    m
}

/// The listen socket to answer `p`'s client from: bound to the address it asked, or to the
/// wildcard of its family.
fn answer_socket(socks: &[(SocketAddr, Arc<Socket>)], p: &KitPending) -> Option<Arc<Socket>> {
    let fam = |a: IpAddr| a.is_ipv4();
    socks
        .iter()
        .find(|(a, _)| a.ip() == p.local)
        .or_else(|| socks.iter().find(|(a, _)| a.ip().is_unspecified() && fam(a.ip()) == fam(p.local)))
        .map(|(_, s)| s.clone())
}

/// What finishing `p` starts from, shared by [`finish`] and [`finish_ring`]: the resolver's
/// route of the client's query, with the listen socket to answer from. `None`: nothing to
/// answer from here (no recursion, no listen socket for the address asked, the engine's
/// question).
enum Routed {
    /// Answered by the route itself (REFUSED, a cache hit): the reply, ready to send.
    Answered(Ready),
    /// To resolve: the recursion, the client's query (no response handed to it yet) and the
    /// EDNS payload of the reply.
    Resolve(Arc<crate::recursion::Recursion>, crate::server::udp::Pending, u16),
}

fn routed(shared: &Arc<Shared>, socks: &[(SocketAddr, Arc<Socket>)], p: &KitPending) -> Option<Routed> {
    let rec = shared.recursion.get().cloned()?;
    let Some(sock) = answer_socket(socks, p) else {
        tracing::debug!(client = %p.client, "kernel iteration: no listen socket for the address asked");
        return None;
    };
    let msg = client_query(p);
    let served = shared.served.load();
    let payload = served.respond.edns_payload;
    let mut out = Vec::new();
    match crate::recursion::route(&rec, &served.zones, &msg, p.client.ip(), Transport::Udp, payload, &mut out) {
        crate::recursion::Route::Answered(outcome) => {
            rec.shard.record(Transport::Udp, outcome);
            let q = xdns_wire::Query::parse(&msg).ok()?;
            let qq = q.question.as_ref()?;
            let key = xdns_resolver::KeyRef { qname: qq.key(), qtype: qq.qtype, dnssec_ok: p.dnssec_ok }.to_owned_key();
            Some(Routed::Answered((crate::server::udp::Pending::handed_over(sock, p.client, p.local, Box::new(q), key, None), out)))
        }
        crate::recursion::Route::Resolve(q, key) => {
            Some(Routed::Resolve(rec, crate::server::udp::Pending::handed_over(sock, p.client, p.local, q, key, None), payload))
        }
        crate::recursion::Route::Authoritative => None,
    }
}

/// Finish `p` in userspace: the resolver's route (REFUSED, a cache hit) or a resolution
/// (taking `handed` as its first exchange), answered from the listen socket. The resolution
/// goes through the resolver's pending queue, or, `direct` (the daemon stopping: the queue's
/// reader has stopped), in a task of its own.
fn finish(shared: &Arc<Shared>, socks: &[(SocketAddr, Arc<Socket>)], p: KitPending, handed: Option<xdns_resolver::Handed>, direct: bool) {
    match routed(shared, socks, &p) {
        None => {}
        Some(Routed::Answered((mut pend, mut out))) => {
            if handed.is_some() {
                note_use(xdns_resolver::HandedUse::Joined);
            }
            let _ = pend.send(&mut out);
        }
        Some(Routed::Resolve(rec, mut pend, payload)) => {
            pend.handed = handed;
            if direct {
                tokio::spawn(async move {
                    let (mut out, outcome) =
                        crate::recursion::resolve_and_answer(&rec, &pend.query, pend.key.clone(), Transport::Udp, payload, pend.handed.take()).await;
                    rec.shard.record(Transport::Udp, outcome);
                    let _ = pend.send(&mut out);
                });
                return;
            }
            if let Err(e) = rec.pending.try_send(pend) {
                let mut pend = e.into_inner();
                let mut out = Vec::new();
                let _ = crate::recursion::answer(&pend.query, Err(crate::recursion::Failure::Busy), 0, Transport::Udp, payload, &mut out);
                let _ = pend.send(&mut out);
            }
        }
    }
}

/// A reply ready for its client: sent with the others of its ring batch (one `sendmmsg`).
type Ready = (crate::server::udp::Pending, Vec<u8>);

/// Resolutions [`finish_ring`] spawned that have not answered yet (those not done at their
/// first poll: a referral to follow, a CNAME leaving the zone, an unusable response).
static RING_SPAWNED: AtomicU64 = AtomicU64::new(0);

/// [`finish`] for a record of the ring buffer, on the ring reader's thread: the reply to a
/// final answer is built here, at once (the resolution run in this thread,
/// [`crate::recursion::resolve_handed_and_answer`], done at its first poll: cached as the
/// resolver caches its own, pushed to the kernel cache) and pushed onto `batch`, sent with
/// the rest of the batch by one `sendmmsg` ([`crate::server::udp::send_batch`]). A
/// resolution not done at its first poll goes on in a task of its own, which answers. With
/// no usable response, or `cap` such tasks already running (the resolver's `max_pending`
/// bounds these as it bounds the queue), the question goes through the resolver's queue as
/// before ([`finish`]).
fn finish_ring(shared: &Arc<Shared>, socks: &[(SocketAddr, Arc<Socket>)], p: KitPending, handed: Option<xdns_resolver::Handed>, batch: &mut Vec<Ready>, cap: u64) {
    let h = match handed {
        Some(h) if RING_SPAWNED.load(Relaxed) < cap => h,
        other => return finish(shared, socks, p, other, false),
    };
    match routed(shared, socks, &p) {
        None => {}
        Some(Routed::Answered(ready)) => {
            note_use(xdns_resolver::HandedUse::Joined);
            batch.push(ready);
        }
        Some(Routed::Resolve(rec, pend, payload)) => {
            let mut fut = Box::pin(async move {
                let (out, outcome) = crate::recursion::resolve_handed_and_answer(&rec, &pend.query, pend.key.clone(), payload, h).await;
                rec.shard.record(Transport::Udp, outcome);
                (pend, out)
            });
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            match fut.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(ready) => batch.push(ready),
                std::task::Poll::Pending => {
                    // driven to its end in a task (a resolution joined meanwhile waits for it)
                    RING_SPAWNED.fetch_add(1, Relaxed);
                    note(&SPAWNED);
                    tokio::spawn(async move {
                        let (mut pend, mut out) = fut.await;
                        let _ = pend.send(&mut out);
                        RING_SPAWNED.fetch_sub(1, Relaxed);
                    });
                }
            }
        }
    }
}

/// A final answer the kernel answered itself (`kit_answered`): the resolution run as for any
/// response handed over ([`finish_ring`]: the resolver's bailiwick rules, `classify`,
/// `make_answer`, cached in userspace and pushed to the kernel cache) but its reply never
/// sent: the client has the kernel's, which is built to be the same bytes (bpf/README.md,
/// "Kernel iteration"). A response the resolver does not take as a final answer of its
/// own (`answered_other`; the kernel's rule is narrower than the resolver's, so it stays 0)
/// is resolved to its end all the same, unanswered.
fn cache_answered(shared: &Arc<Shared>, socks: &[(SocketAddr, Arc<Socket>)], p: KitPending, handed: Option<xdns_resolver::Handed>) {
    note(&ANSWERED);
    let Some(h) = handed else {
        note(&ANSWERED_OTHER);
        return;
    };
    match routed(shared, socks, &p) {
        None => note(&ANSWERED_OTHER),
        Some(Routed::Answered(_)) => note_use(xdns_resolver::HandedUse::Joined),
        Some(Routed::Resolve(rec, pend, _)) => {
            let mut fut = Box::pin(async move {
                let (r, used) = rec.resolver.resolve_handed_inline(pend.key.clone(), h).await;
                note_use(used);
                if !matches!(used, xdns_resolver::HandedUse::Answer | xdns_resolver::HandedUse::Joined) || r.is_err() {
                    note(&ANSWERED_OTHER);
                }
            });
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if fut.as_mut().poll(&mut cx).is_pending() {
                tokio::spawn(fut);
            }
        }
    }
}

/// Start reading the reserved ports and the timer for servers that never answer. Writes the
/// root (from the hints) into the zone map first.
pub fn spawn(
    cfg: &Config,
    shared: &Arc<Shared>,
    reserved: Reserved,
    socks: Vec<(SocketAddr, Arc<Socket>)>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let fp = shared.fastpath.lock().unwrap_or_else(|e| e.into_inner());
    let Some(kit) = fp.as_ref().map(|f| f.kit()).transpose()?.flatten() else {
        tracing::warn!("kernel iteration: the XDP program runs without it");
        return Ok(Vec::new());
    };
    drop(fp);
    let rs = cfg.resolver.as_ref().context("kernel iteration without [resolver]")?;
    let hints = std::fs::read_to_string(&rs.root_hints).with_context(|| format!("reading {}", rs.root_hints.display()))?;
    let root = root_zone(&hints);
    if root.addrs.is_empty() {
        anyhow::bail!("kernel iteration: no root server address in {}", rs.root_hints.display());
    }
    kit.set_zone(&root)?;
    kit.set_answers(Some(caps(rs.resolver.max_ttl, rs.resolver.max_negative_ttl)))?;
    let timeout = rs.resolver.upstream_timeout;
    let spawn_cap = (rs.max_pending as u64 / 2).max(1);
    let kit = Arc::new(kit);
    let _ = MAPS.set(kit.clone());
    let socks = Arc::new(socks);
    let mut tasks = Vec::new();
    // the next-hop table (crate::kit_hops): the routes and neighbours of the zone map's
    // servers, for the kernel when bpf_fib_lookup gives none (forwarding off)
    {
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = crate::kit_hops::spawn(kit.clone(), &cfg.xdp.interfaces, flag.clone())?;
        let mut stop_h = stop.clone();
        tasks.push(tokio::spawn(async move {
            crate::server::stopped(&mut stop_h).await;
            flag.store(true, Relaxed);
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }));
    }
    // the zone map writer: the resolver's delegations, as they change and expire
    let cap = (xdns_bpf::kit::KitStage::default().zones as usize).saturating_sub(1);
    let (kit_w, shared_w, mut stop_w) = (kit.clone(), shared.clone(), stop.clone());
    tasks.push(tokio::spawn(async move {
        let mut writer = ZoneWriter::new(cap);
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks = 0u64;
        loop {
            tokio::select! {
                _ = crate::server::stopped(&mut stop_w) => break,
                _ = tick.tick() => {}
            }
            let Some(rec) = shared_w.recursion.get() else { continue };
            let (generation, now) = (rec.resolver.infra_generation(), rec.resolver.now_ns());
            if writer.due(generation, now) {
                let d = rec.resolver.delegations(xdns_bpf::kit::ADDRS);
                writer.sync(&*kit_w, d, generation, now);
            }
            if HELD.swap(false, Relaxed) {
                let n = writer.drop_held(&*kit_w, |ip| rec.resolver.held_until(ip));
                HELD_REMOVED.fetch_add(n as u64, Relaxed);
            }
            ticks += 1;
            if ticks.is_multiple_of(250) {
                // every 5 s: the expired cuts the kernel learnt
                writer.sweep(&*kit_w, now);
            }
        }
    }));
    // The final responses the kernel hands over through its ring buffer (it claimed their
    // entries): read in batches on a thread of their own, each finished as one read from a
    // reserved port would be. Stopping, the records left are finished before the thread ends.
    {
        let (kit, socks, shared, mut stop_r) = (kit.clone(), socks.clone(), shared.clone(), stop.clone());
        let rt = tokio::runtime::Handle::current();
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag_t = flag.clone();
        let thread = std::thread::Builder::new().name("xdns-kit-events".into()).spawn(move || {
            // SAFETY: prctl with integer arguments only; it affects this thread alone (it needs
            // no capability: see PrefetchEvents).
            unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) };
            let _rt = rt.enter();
            let handle = |e: xdns_bpf::kit::KitEvent, direct: bool| {
                note(&RING);
                let handed = handed_of(&kit, &e.pending, e.server, &e.msg);
                if e.answered {
                    return cache_answered(&shared, &socks, e.pending, handed);
                }
                finish(&shared, &socks, e.pending, handed, direct);
            };
            // the replies of one wake-up's records, sent together when the batch is read
            let batch = std::cell::RefCell::new(Vec::<Ready>::new());
            let each = |e: xdns_bpf::kit::KitEvent| {
                note(&RING);
                let handed = handed_of(&kit, &e.pending, e.server, &e.msg);
                if e.answered {
                    return cache_answered(&shared, &socks, e.pending, handed);
                }
                finish_ring(&shared, &socks, e.pending, handed, &mut batch.borrow_mut(), spawn_cap);
            };
            let done = || {
                let mut b = batch.borrow_mut();
                if b.is_empty() {
                    return;
                }
                note(&BATCHES);
                BATCHED.fetch_add(b.len() as u64, Relaxed);
                let failed = crate::server::udp::send_batch(&mut b);
                if failed > 0 {
                    if let Some(rec) = shared.recursion.get() {
                        for _ in 0..failed {
                            crate::stats::Shard::drop(&rec.shard, crate::stats::DropKind::SendFailed);
                        }
                    }
                }
            };
            if let Err(e) = kit.read_events(Duration::from_millis(100), &flag_t, each, done) {
                tracing::warn!(error = %e, "kernel iteration: reading the kernel's responses");
            }
            for e in kit.take_events().unwrap_or_default() {
                handle(e, true);
            }
        })?;
        tasks.push(tokio::spawn(async move {
            crate::server::stopped(&mut stop_r).await;
            flag.store(true, Relaxed);
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }));
    }
    for (port, sock) in reserved.0 {
        let sock = tokio::net::UdpSocket::from_std(sock).context("registering a reserved port")?;
        let (kit, socks, shared, mut stop) = (kit.clone(), socks.clone(), shared.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            loop {
                let (n, from) = tokio::select! {
                    _ = crate::server::stopped(&mut stop) => break,
                    r = sock.recv_from(&mut buf) => match r { Ok(x) => x, Err(_) => continue },
                };
                if let Some((p, handed)) = claim(&kit, port, from, &buf[..n]) {
                    finish(&shared, &socks, p, handed, false);
                }
            }
        }));
    }
    let (shared, mut stop) = (shared.clone(), stop.clone());
    tasks.push(tokio::spawn(async move {
        // Every 20 ms: the queries that waited past Resolver::handed_wait (from the server's
        // RTT, 150 ms to upstream_timeout) are taken back and resolved here (the resolver
        // asks the best servers, with its own timeouts); the wait raises the server's SRTT.
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut asked = HashMap::new();
        loop {
            tokio::select! {
                _ = crate::server::stopped(&mut stop) => break,
                _ = tick.tick() => {}
            }
            let rec = shared.recursion.get().cloned();
            let mut waits = HashMap::<IpAddr, u64>::new();
            let mut wait = |ip: IpAddr| {
                *waits.entry(ip).or_insert_with(|| rec.as_ref().map_or(timeout, |r| r.resolver.handed_wait(ip)).as_nanos() as u64)
            };
            let now = monotonic_ns();
            let entries = kit.entries().unwrap_or_default();
            let mut live = Vec::with_capacity(entries.len());
            for (k, p) in entries {
                if p.sent_ns.saturating_add(wait(k.server)) > now {
                    live.push((k, p));
                    continue;
                }
                let Ok(Some(p)) = kit.claim(k.server, k.port, k.id) else { continue };
                note(&TIMEOUTS);
                if let Some(r) = &rec {
                    r.resolver.note_handed_timeout(k.server, Duration::from_nanos(now.saturating_sub(p.sent_ns)));
                }
                finish(&shared, &socks, p, None, false);
            }
            if let Some(r) = &rec {
                redundant(&kit, r, &shared, &socks, live, now, &mut asked);
            }
        }
        // Stopping (a takeover's new program may already hold the links: responses to the
        // queries this process's program sent no longer reach it): every query still pending
        // is resolved here, from scratch, and answered before the process exits.
        for p in kit.claim_older(u64::MAX).unwrap_or_default() {
            note(&TIMEOUTS);
            finish(&shared, &socks, p, None, true);
        }
    }));
    Ok(tasks)
}

/// Redundant queries (AtesN-DS's failure prevention, sent by userspace): every pending
/// kernel query of `live` that has waited [`xdns_resolver::Resolver::redundant_after`] (the
/// server's expected time) and was not asked again yet gets the same question sent, by the
/// resolver's own exchange (random ID and port, 0x20 case, the reply taken only from that
/// server with that ID and question), to another address of the cut the kernel asked
/// ([`xdns_resolver::Resolver::redundant_server`]). The first valid answer wins through the
/// entry's single claim: the redundant reply claims the kernel's entry (one
/// `BPF_MAP_LOOKUP_AND_DELETE_ELEM`) and, if it got it, is used as the kernel's response
/// would be ([`finish`]: the resolver's bailiwick rules, cached once, the client answered
/// once), the silent server charged a timeout (three hold it down: then
/// [`ZoneWriter::drop_held`] takes it out of the kernel's cuts); the kernel's own response,
/// if it comes later, finds no entry (`drop_kit_unsolicited`). If the kernel's response (or
/// the timer) claimed the entry first, the redundant reply is dropped unused and uncached.
/// A server that does not answer the redundant query either is followed, `redundant_after`
/// later, by the next (at most [`REDUNDANT_MAX`] per kernel query). `asked` holds, per entry
/// asked again, the servers asked and when the last was (forgotten once the entry is gone).
fn redundant(
    kit: &Arc<KitMaps>,
    rec: &Arc<crate::recursion::Recursion>,
    shared: &Arc<Shared>,
    socks: &Arc<Vec<(SocketAddr, Arc<Socket>)>>,
    live: Vec<(PendKey, KitPending)>,
    now: u64,
    asked: &mut HashMap<PendKey, (Vec<IpAddr>, u64)>,
) {
    let keys: std::collections::HashSet<PendKey> = live.iter().map(|(k, _)| *k).collect();
    asked.retain(|k, _| keys.contains(k));
    let mut afters = HashMap::<IpAddr, Option<Duration>>::new();
    // Many kernel queries late at once is this host behind (its own load: the responses wait
    // in its queues), not a server down: redundant queries would add load and charge healthy
    // servers timeouts (a cascade). Then none is sent this scan.
    let overdue = live
        .iter()
        .filter(|(k, p)| {
            !asked.contains_key(k)
                && afters
                    .entry(k.server)
                    .or_insert_with(|| rec.resolver.redundant_after(k.server))
                    .is_some_and(|a| p.sent_ns.saturating_add(a.as_nanos() as u64) <= now)
        })
        .count();
    if overdue > REDUNDANT_OVERDUE_MAX {
        REDUNDANT_SKIPPED.fetch_add(overdue as u64, Relaxed);
        return;
    }
    // the cuts looked up this scan (one map lookup per cut, not per entry)
    let mut cuts = HashMap::<Vec<u8>, Option<KitZone>>::new();
    for (k, p) in live {
        let Some(after) = *afters.entry(k.server).or_insert_with(|| rec.resolver.redundant_after(k.server)) else { continue };
        let after = after.as_nanos() as u64;
        if REDUNDANT_INFLIGHT.load(Relaxed) >= REDUNDANT_INFLIGHT_MAX {
            REDUNDANT_SKIPPED.fetch_add(1, Relaxed);
            continue;
        }
        // the first redundant query once the kernel's has waited `after`; the next ones (to
        // servers not asked yet, at most REDUNDANT_MAX) each `after` later, as ask() staggers
        let (tried, last) = asked.get(&k).cloned().unwrap_or_else(|| (vec![k.server], p.sent_ns));
        if tried.len() > REDUNDANT_MAX || last.saturating_add(after) > now {
            continue;
        }
        let Some(zone) = kit.zone_of(&p) else { continue };
        let cut = cuts.entry(zone.clone()).or_insert_with(|| kit.zone(&zone).ok().flatten());
        let other = cut.as_ref().and_then(|c| rec.resolver.redundant_server(&c.addrs, &tried));
        let mut tried = tried;
        let Some(other) = other else {
            // no other server (now): not looked at again for this entry
            tried.resize(REDUNDANT_MAX + 1, k.server);
            asked.insert(k, (tried, now));
            continue;
        };
        tried.push(other);
        asked.insert(k, (tried, now));
        note(&REDUNDANT_SENT);
        REDUNDANT_INFLIGHT.fetch_add(1, Relaxed);
        let (kit, rec, shared, socks) = (kit.clone(), rec.clone(), shared.clone(), socks.clone());
        tokio::spawn(async move {
            let h = rec.resolver.ask_redundant(&zone, other, &p.qname, p.qtype).await;
            REDUNDANT_INFLIGHT.fetch_sub(1, Relaxed);
            let Some(h) = h else {
                note(&REDUNDANT_FAILED);
                return;
            };
            match kit.claim(k.server, k.port, k.id) {
                Ok(Some(p)) => {
                    note(&REDUNDANT_WON);
                    if rec.resolver.note_handed_lost(k.server) {
                        HELD.store(true, Relaxed);
                    }
                    finish(&shared, &socks, p, Some(h), false);
                }
                // answered already (the kernel's response, the timer, another redundant
                // reply): this one is dropped, unused and uncached
                _ => note(&REDUNDANT_LOST),
            }
        });
    }
}

/// Redundant queries per kernel query at most (each to a server of the cut not asked yet).
const REDUNDANT_MAX: usize = 3;
/// Kernel queries late at once past which a scan sends no redundant query (the host is
/// behind, not a server down).
const REDUNDANT_OVERDUE_MAX: usize = 64;
/// Redundant queries waiting for their reply at most.
const REDUNDANT_INFLIGHT_MAX: u64 = 64;
static REDUNDANT_INFLIGHT: AtomicU64 = AtomicU64::new(0);
/// Redundant queries not sent: too many late at once, or too many in flight.
static REDUNDANT_SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Where [`ZoneWriter`] writes: `xdns_kit_zones` ([`KitMaps`]), or a map in memory (tests).
pub trait ZoneMap {
    /// Write or replace a cut.
    fn set_zone(&self, z: &KitZone) -> anyhow::Result<()>;
    /// Forget a cut.
    fn remove_zone(&self, name: &[u8]) -> anyhow::Result<()>;
    /// Every cut the map holds, whoever wrote it (the writer, or the kernel from a referral).
    fn cuts(&self) -> anyhow::Result<Vec<KitZone>>;
}

impl ZoneMap for KitMaps {
    fn set_zone(&self, z: &KitZone) -> anyhow::Result<()> {
        KitMaps::set_zone(self, z)
    }
    fn remove_zone(&self, name: &[u8]) -> anyhow::Result<()> {
        KitMaps::remove_zone(self, name)
    }
    fn cuts(&self) -> anyhow::Result<Vec<KitZone>> {
        self.zones()
    }
}

/// Copies the resolver's delegations into the kernel's zone map: what is new or changed is
/// written, what is gone (expired, flushed, evicted by the resolver) is removed, at most
/// `cap` cuts besides the root (the root is written once, from the hints, and never here).
pub struct ZoneWriter {
    cap: usize,
    /// What the map holds (as written).
    written: HashMap<Vec<u8>, KitZone>,
    /// The resolver's generation last copied (`None`: never).
    generation: Option<u64>,
    /// The earliest expiry among the cuts written.
    next_expiry: u64,
}

impl ZoneWriter {
    /// A writer for a map with room for `cap` cuts besides the root.
    pub fn new(cap: usize) -> Self {
        Self { cap, written: HashMap::new(), generation: None, next_expiry: u64::MAX }
    }

    /// True when a copy is due: the resolver's zone map changed since the last one
    /// (`generation`), or a cut written has expired by `now` (then removed, so a later
    /// delegation of the same name is written afresh).
    pub fn due(&self, generation: u64, now: u64) -> bool {
        self.generation != Some(generation) || now >= self.next_expiry
    }

    /// Makes the map hold `desired` (the resolver's delegations at `generation`, `now`
    /// its clock, CLOCK_MONOTONIC like the kernel's): expired cuts dropped; past `cap`, the
    /// cuts with the fewest labels kept, then those expiring last. Returns (written,
    /// removed). A cut the map refuses is left out (and tried again at the next copy).
    pub fn sync(&mut self, map: &dyn ZoneMap, desired: Vec<xdns_resolver::Delegation>, generation: u64, now: u64) -> (usize, usize) {
        let mut want: Vec<KitZone> = desired
            .into_iter()
            .filter(|d| d.expires_ns > now && d.zone.as_slice() != [0] && !d.addrs.is_empty() && d.zone.len() <= 255)
            .map(|d| KitZone { name: d.zone.to_ascii_lowercase(), addrs: d.addrs, expires_ns: d.expires_ns })
            .collect();
        if want.len() > self.cap {
            want.sort_by(|a, b| labels(&a.name).cmp(&labels(&b.name)).then(b.expires_ns.cmp(&a.expires_ns)).then(a.name.cmp(&b.name)));
            want.truncate(self.cap);
        }
        let want: HashMap<Vec<u8>, KitZone> = want.into_iter().map(|z| (z.name.clone(), z)).collect();
        let mut removed = 0;
        let gone: Vec<Vec<u8>> = self.written.keys().filter(|k| !want.contains_key(*k)).cloned().collect();
        for name in gone {
            if let Err(e) = map.remove_zone(&name) {
                tracing::debug!(error = %e, "kernel iteration: removing a zone cut");
                continue;
            }
            self.written.remove(&name);
            removed += 1;
        }
        let mut written = 0;
        for (name, z) in want {
            if self.written.get(&name) == Some(&z) {
                continue;
            }
            match map.set_zone(&z) {
                Ok(()) => {
                    self.written.insert(name, z);
                    written += 1;
                }
                Err(e) => tracing::debug!(error = %e, "kernel iteration: writing a zone cut"),
            }
        }
        self.generation = Some(generation);
        self.next_expiry = self.written.values().map(|z| z.expires_ns).min().unwrap_or(u64::MAX);
        ZONES.store(self.written.len() as u64, Relaxed);
        (written, removed)
    }
}

impl ZoneWriter {
    /// Takes the servers held down (`held`: until when, the kernel's clock) out of every cut
    /// of the map but the root, the kernel's own (learnt from referrals) included, where the
    /// cut keeps another address. A cut the kernel learnt then expires when the hold ends
    /// (the kernel learns it again, all its glue, from the next referral: the server is asked
    /// again, as the resolver asks a server whose hold ended); the writer's cuts are written
    /// again from the resolver's delegations at the next copy. Returns the addresses removed.
    pub fn drop_held(&mut self, map: &dyn ZoneMap, held: impl Fn(IpAddr) -> Option<u64>) -> usize {
        let Ok(cuts) = map.cuts() else { return 0 };
        let mut removed = 0;
        for mut z in cuts {
            let before = z.addrs.len();
            let mut until = u64::MAX;
            z.addrs.retain(|a| match held(*a) {
                Some(t) => {
                    until = until.min(t);
                    false
                }
                None => true,
            });
            if z.name.as_slice() == [0] || z.addrs.is_empty() || z.addrs.len() == before {
                continue;
            }
            if !self.written.contains_key(&z.name) {
                z.expires_ns = z.expires_ns.min(until);
            }
            if map.set_zone(&z).is_ok() {
                removed += before - z.addrs.len();
                self.written.remove(&z.name);
            }
        }
        self.generation = None;
        removed
    }

    /// Removes the expired cuts the writer did not write: those the kernel learnt from the
    /// referrals it followed (bpf/README.md, "Referrals"). The kernel ignores an expired cut
    /// and never deletes one, so without this they would fill the map and the writer's cuts
    /// would be refused. Returns how many went.
    pub fn sweep(&self, map: &dyn ZoneMap, now: u64) -> usize {
        let Ok(cuts) = map.cuts() else { return 0 };
        cuts.into_iter()
            .filter(|z| z.expires_ns <= now && z.name.as_slice() != [0] && !self.written.contains_key(&z.name))
            .filter(|z| map.remove_zone(&z.name).is_ok())
            .count()
    }
}

fn labels(name: &[u8]) -> usize {
    xdns_wire::name::label_count(name)
}

/// What became of the responses handed over, by [`xdns_resolver::HandedUse`] (in its order).
static USES: [AtomicU64; xdns_resolver::HandedUse::ALL.len()] = [const { AtomicU64::new(0) }; xdns_resolver::HandedUse::ALL.len()];
/// Responses claimed whose question was not the one sent, or not a response.
static MALFORMED: AtomicU64 = AtomicU64::new(0);
/// Responses claimed whose entry names no cut (`zone_len`/`zone_hash`): resolved from scratch.
static NO_ZONE: AtomicU64 = AtomicU64::new(0);
/// Responses read from the kernel's ring buffer (their entries claimed by the kernel).
static RING: AtomicU64 = AtomicU64::new(0);
/// Records of answers the kernel sent itself (`XDNS_KIT_EV_ANSWERED`): cached, not answered.
static ANSWERED: AtomicU64 = AtomicU64::new(0);
/// ... that the resolver did not take as a final answer (a divergence of the kernel's rule).
static ANSWERED_OTHER: AtomicU64 = AtomicU64::new(0);
/// Entries the timer claimed (the server never answered): resolved from scratch.
static TIMEOUTS: AtomicU64 = AtomicU64::new(0);
/// Wake-ups of the ring reader that sent replies, and the replies they sent (one
/// `sendmmsg` per listen socket per wake-up).
static BATCHES: AtomicU64 = AtomicU64::new(0);
static BATCHED: AtomicU64 = AtomicU64::new(0);
/// Resolutions of ring records not done at once, answered from a task of their own.
static SPAWNED: AtomicU64 = AtomicU64::new(0);
/// Redundant queries sent, and what became of them: no valid reply, won (the reply used),
/// lost (the kernel's response or the timer claimed the entry first: dropped).
static REDUNDANT_SENT: AtomicU64 = AtomicU64::new(0);
static REDUNDANT_FAILED: AtomicU64 = AtomicU64::new(0);
static REDUNDANT_WON: AtomicU64 = AtomicU64::new(0);
static REDUNDANT_LOST: AtomicU64 = AtomicU64::new(0);
/// A server became held down by a redundant win: the writer takes it out of the cuts.
static HELD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Addresses taken out of the kernel's cuts because held down.
static HELD_REMOVED: AtomicU64 = AtomicU64::new(0);
/// Cuts the writer holds in the zone map (besides the root).
static ZONES: AtomicU64 = AtomicU64::new(0);

fn note(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

/// Counts what became of a response handed over (`crate::recursion::resolve_and_answer`).
pub fn note_use(u: xdns_resolver::HandedUse) {
    if let Some(i) = xdns_resolver::HandedUse::ALL.iter().position(|x| *x == u) {
        note(&USES[i]);
    }
}

/// The kernel's answer caps for the resolver's `max_ttl` and `max_negative_ttl`: negative
/// answers (NXDOMAIN, NODATA) answered by the kernel too.
fn caps(max_ttl: u32, max_negative_ttl: u32) -> xdns_bpf::kit::AnswerCaps {
    xdns_bpf::kit::AnswerCaps { max_ttl, max_negative_ttl: Some(max_negative_ttl) }
}

/// The resolver's `max_ttl` or `max_negative_ttl` changed (a reload): the kernel's own answers
/// cap their TTLs to them from now on, as the cache does.
pub fn set_ttl_caps(max_ttl: u32, max_negative_ttl: u32) {
    if let Some(kit) = MAPS.get() {
        if let Err(e) = kit.set_answers(Some(caps(max_ttl, max_negative_ttl))) {
            tracing::error!(error = %e, "kernel iteration: the kernel's answers not updated to the new TTL caps");
        }
    }
}

/// Kernel iteration's maps once its tasks run (for the counters).
static MAPS: std::sync::OnceLock<Arc<KitMaps>> = std::sync::OnceLock::new();

/// The group `kit` (counters): misses handed over by reason (`handover_<reason>`), queries
/// sent, responses accepted, what became of each (`response_<use>`), timeouts, the ring
/// reader's and the redundant queries' counts; and the group `kit_state` (gauges, levels
/// that go down as well as up): entries pending now, cuts the writer holds in the zone map.
pub fn snapshot(s: &mut crate::stats::Snapshot) {
    let Some(kit) = MAPS.get() else { return };
    let Ok(c) = kit.counters() else { return };
    s.groups.insert("kit".into(), counters_group(&c));
    s.groups.insert("kit_state".into(), state_group(kit.pending_len() as u64, ZONES.load(Relaxed)));
}

/// The `kit_state` group: `pending` entries, `zones` cuts.
fn state_group(pending: u64, zones: u64) -> crate::stats::Group {
    let mut state = crate::stats::Group::counters(
        "Kernel iteration now: queries the kernel sent that wait for their response (pending), zone cuts the daemon holds in the kernel's zone map besides the root (zones), servers with a next hop in the kernel's table (hops) and servers routed out of an XDP interface whose next hop has no neighbour entry yet (hops_unresolved).",
        "gauge",
        [
            ("pending".to_string(), pending),
            ("zones".to_string(), zones),
            ("hops".to_string(), crate::kit_hops::HELD.load(Relaxed)),
            ("hops_unresolved".to_string(), crate::kit_hops::UNRESOLVED.load(Relaxed)),
        ],
    );
    state.meta.gauge = true;
    state
}

/// The `kit` group from the kernel's counters `c` and the daemon's.
fn counters_group(c: &xdns_bpf::kit::KitCounters) -> crate::stats::Group {
    let mut v: Vec<(String, u64)> = xdns_bpf::kit::HANDOVER.iter().zip(c.handover).map(|(r, n)| (format!("handover_{r}"), n)).collect();
    v.push(("sent".into(), c.sent));
    v.push(("responses".into(), c.responses));
    v.push(("hops".into(), c.hops));
    v.push(("learnt".into(), c.learnt));
    v.push(("handed".into(), c.handed));
    v.push(("ring_full".into(), c.ring_full));
    v.push(("ring_read".into(), RING.load(Relaxed)));
    v.push(("answered".into(), c.answered));
    v.push(("answered_read".into(), ANSWERED.load(Relaxed)));
    v.push(("answered_other".into(), ANSWERED_OTHER.load(Relaxed)));
    v.extend(xdns_resolver::HandedUse::ALL.iter().zip(&USES).map(|(u, n)| (format!("response_{}", u.name()), n.load(Relaxed))));
    let mal = USES[xdns_resolver::HandedUse::ALL.iter().position(|u| *u == xdns_resolver::HandedUse::Malformed).unwrap_or(0)].load(Relaxed);
    if let Some(x) = v.iter_mut().find(|(k, _)| k == "response_malformed") {
        x.1 = mal + MALFORMED.load(Relaxed);
    }
    v.push(("response_no_zone".into(), NO_ZONE.load(Relaxed)));
    v.push(("timeout".into(), TIMEOUTS.load(Relaxed)));
    v.push(("reply_batches".into(), BATCHES.load(Relaxed)));
    v.push(("replies_batched".into(), BATCHED.load(Relaxed)));
    v.push(("replies_spawned".into(), SPAWNED.load(Relaxed)));
    v.push(("redundant_sent".into(), REDUNDANT_SENT.load(Relaxed)));
    v.push(("redundant_failed".into(), REDUNDANT_FAILED.load(Relaxed)));
    v.push(("redundant_won".into(), REDUNDANT_WON.load(Relaxed)));
    v.push(("redundant_lost".into(), REDUNDANT_LOST.load(Relaxed)));
    v.push(("redundant_skipped".into(), REDUNDANT_SKIPPED.load(Relaxed)));
    v.push(("held_removed".into(), HELD_REMOVED.load(Relaxed)));
    v.push(("hop_table".into(), c.hop_table));
    v.push(("hop_miss".into(), c.hop_miss));
    v.push(("hop_routes_asked".into(), crate::kit_hops::ROUTES_ASKED.load(Relaxed)));
    v.push(("hops_written".into(), crate::kit_hops::WRITTEN.load(Relaxed)));
    v.push(("hops_removed".into(), crate::kit_hops::REMOVED.load(Relaxed)));
    crate::stats::Group::counters(
        "Kernel iteration: misses handed to userspace by reason (handover_<reason>), queries sent, responses accepted, referrals followed in the kernel (hops) and the cuts it learnt from them, responses handed over in the ring buffer (handed; ring_full: to the socket instead; ring_read: read by the daemon), final answers the kernel answered itself (answered; answered_read: their records read, cached and not answered by the daemon; answered_other: of those, responses the resolver did not take as a final answer, which should stay 0), what became of each response handed over (response_<use>: answer, referral, joined; resolved afresh: truncated, servfail, refused, edns_fallback (FORMERR to the kernel's EDNS query), rcode (another RCODE), lame, malformed, no_zone; taken, then more work in userspace: glueless, cname_out, dname), entries timed out, the ring reader's replies (reply_batches: sendmmsg wake-ups, replies_batched: replies they sent, replies_spawned: resolutions not done at once, answered from a task), redundant queries to another server of the cut (redundant_sent; _failed: no valid reply; _won: used, the kernel's entry claimed; _lost: the kernel's response came first, dropped; _skipped: not sent, too many late at once or in flight), server addresses taken out of the kernel's cuts as held down (held_removed), next hops the kernel took from the daemon's table when bpf_fib_lookup gave none (hop_table; hop_miss: not there either, a server without an entry yet; the kernel's answers to clients go back the way the query came and ask for none), and the table's upkeep (hop_routes_asked: RTM_GETROUTE lookups, hops_written, hops_removed).",
        "counter",
        v,
    )
}

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The root as the kernel keeps it: the A and AAAA addresses of the hints file (never
/// expiring; the first four of each family).
fn root_zone(hints: &str) -> KitZone {
    let mut addrs = Vec::new();
    for line in hints.lines() {
        let line = line.split(';').next().unwrap_or("");
        let f: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = f.iter().position(|t| t.eq_ignore_ascii_case("A") || t.eq_ignore_ascii_case("AAAA")) {
            if let Some(a) = f.get(i + 1).and_then(|a| a.parse::<IpAddr>().ok()) {
                addrs.push(a);
            }
        }
    }
    KitZone { name: vec![0], addrs, expires_ns: u64::MAX }
}

/// The XDP interfaces where `bpf_fib_lookup` gives kernel iteration no next hop, with the
/// families: it refuses any lookup, as the host's own output or as a router's, from an
/// interface whose forwarding is off (IPv4 `conf/IF/forwarding`, IPv6 likewise, under
/// `proc_net`, normally `/proc/sys/net`). There the kernel takes its next hops from the
/// daemon's table instead ([`crate::kit_hops`]); a server not in it yet is handed to userspace
/// (`kit.handover_fib`, `xdp.pass_kit_no_hop`), and so is the kernel's own answer to a client
/// (the table holds servers only). Logged at start. An interface whose flag cannot be read (no
/// such family) is left out.
pub fn forwarding_off(interfaces: &[String], proc_net: &std::path::Path) -> Vec<String> {
    let mut off = Vec::new();
    for i in interfaces {
        for (family, dir) in [("IPv4", "ipv4"), ("IPv6", "ipv6")] {
            let flag = std::fs::read_to_string(proc_net.join(dir).join("conf").join(i).join("forwarding"));
            if flag.is_ok_and(|f| f.trim() == "0") {
                off.push(format!("{i} ({family})"));
            }
        }
    }
    off
}

#[cfg(test)]
mod tests {
    #[test]
    fn interfaces_without_forwarding_are_named() {
        let root = std::env::temp_dir().join(format!("xdns-kit-fwd-{}", std::process::id()));
        for (dir, i, v) in [("ipv4", "eth0", "1\n"), ("ipv6", "eth0", "0\n"), ("ipv4", "eth1", "0\n"), ("ipv6", "eth1", "1\n")] {
            let d = root.join(dir).join("conf").join(i);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("forwarding"), v).unwrap();
        }
        let names = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(super::forwarding_off(&names(&["eth0", "eth1", "gone"]), &root), names(&["eth0 (IPv6)", "eth1 (IPv4)"]));
        assert!(super::forwarding_off(&names(&["eth1"]), &root.join("absent")).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    use super::*;

    /// `/metrics`: the kit group's totals are counters, one per handover reason and use of a
    /// response (the list: glueless, CNAME out of the zone, DNAME, EDNS fallback,
    /// TC=1, SERVFAIL, REFUSED, lame, timeouts, a full pending map); the levels (pending
    /// entries, cuts) are gauges of their own group, never counters.
    #[test]
    fn kit_metrics_are_counters_and_its_levels_gauges() {
        let mut s = crate::stats::Snapshot::default();
        s.groups.insert("kit".into(), counters_group(&xdns_bpf::kit::KitCounters { sent: 5, hop_table: 9, hop_miss: 2, ..Default::default() }));
        s.groups.insert("kit_state".into(), state_group(3, 7));
        let text = crate::metrics::render(&s);
        for want in [
            "# TYPE xdns_kit counter",
            "xdns_kit_total{counter=\"sent\"} 5",
            "# TYPE xdns_kit_state gauge",
            "xdns_kit_state{gauge=\"pending\"} 3",
            "xdns_kit_state{gauge=\"zones\"} 7",
            "xdns_kit_total{counter=\"hop_table\"} 9",
            "xdns_kit_total{counter=\"hop_miss\"} 2",
            "xdns_kit_state{gauge=\"hops\"}",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        for reason in [
            "response_glueless",
            "response_cname_out",
            "response_dname",
            "response_edns_fallback",
            "response_truncated",
            "response_servfail",
            "response_refused",
            "response_lame",
            "timeout",
            "handover_pending_full",
        ] {
            assert!(text.contains(&format!("xdns_kit_total{{counter=\"{reason}\"}} 0")), "{reason} in\n{text}");
        }
        assert!(!text.contains("counter=\"pending\"") && !text.contains("counter=\"zones\""), "{text}");
    }

    #[test]
    fn root_from_hints() {
        let z = root_zone(". 3600 IN NS a.root.\na.root. 3600 IN A 198.18.1.1 ; x\na.root. 3600 IN AAAA 2001:db8::53\n");
        assert_eq!(z.name, vec![0]);
        assert_eq!(z.addrs, vec!["198.18.1.1".parse::<IpAddr>().unwrap(), "2001:db8::53".parse().unwrap()]);
    }

    /// A zone map in memory; names in `refuse` are refused.
    #[derive(Default)]
    struct MemMap {
        zones: std::sync::Mutex<HashMap<Vec<u8>, KitZone>>,
        writes: AtomicU64,
        refuse: Vec<Vec<u8>>,
    }

    impl ZoneMap for MemMap {
        fn set_zone(&self, z: &KitZone) -> anyhow::Result<()> {
            if self.refuse.contains(&z.name) {
                anyhow::bail!("full");
            }
            self.writes.fetch_add(1, Relaxed);
            self.zones.lock().unwrap().insert(z.name.clone(), z.clone());
            Ok(())
        }
        fn remove_zone(&self, name: &[u8]) -> anyhow::Result<()> {
            self.zones.lock().unwrap().remove(name);
            Ok(())
        }
        fn cuts(&self) -> anyhow::Result<Vec<KitZone>> {
            Ok(self.zones.lock().unwrap().values().cloned().collect())
        }
    }

    fn wire(s: &str) -> Vec<u8> {
        xdns_wire::name::from_presentation(s).unwrap()
    }

    fn deleg(zone: &str, addrs: &[&str], expires_ns: u64) -> xdns_resolver::Delegation {
        xdns_resolver::Delegation { zone: wire(zone), addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(), expires_ns }
    }

    fn held(m: &MemMap) -> Vec<String> {
        let mut v: Vec<String> = m.zones.lock().unwrap().keys().map(|k| xdns_wire::name::to_presentation(k)).collect();
        v.sort();
        v
    }

    #[test]
    fn zone_writer_copies_changes_and_expiry() {
        let m = MemMap::default();
        let mut w = ZoneWriter::new(10);
        assert!(w.due(0, 0), "never copied");
        let d = vec![deleg("lab.", &["198.18.1.1"], 100), deleg("Good.Lab.", &["198.18.2.1", "2001:db8::2"], 50), deleg(".", &["198.18.0.1"], 1000), deleg("none.lab.", &[], 1000)];
        assert_eq!(w.sync(&m, d.clone(), 1, 10), (2, 0));
        assert_eq!(held(&m), ["good.lab.", "lab."], "the root and cuts without an address are not the writer's");
        assert_eq!(m.zones.lock().unwrap()[&wire("good.lab.")].addrs.len(), 2);
        assert!(!w.due(1, 49));
        // the same again writes nothing
        assert_eq!(w.sync(&m, d.clone(), 2, 11), (0, 0));
        assert_eq!(m.writes.load(Relaxed), 2);
        // good.lab. expires: due, removed
        assert!(w.due(2, 50));
        assert_eq!(w.sync(&m, d.clone(), 2, 50), (0, 1));
        assert_eq!(held(&m), ["lab."]);
        // a new address for lab. is written; a cut the resolver dropped is removed
        let d2 = vec![deleg("lab.", &["198.18.1.2"], 200)];
        assert_eq!(w.sync(&m, d2, 3, 60), (1, 0));
        assert_eq!(m.zones.lock().unwrap()[&wire("lab.")].addrs, vec!["198.18.1.2".parse::<IpAddr>().unwrap()]);
        assert_eq!(w.sync(&m, vec![], 4, 61), (0, 1));
        assert!(held(&m).is_empty());
    }

    #[test]
    fn sweep_removes_the_kernels_expired_cuts_only() {
        let m = MemMap::default();
        let mut w = ZoneWriter::new(10);
        w.sync(&m, vec![deleg("lab.", &["198.18.1.1"], 100)], 1, 10);
        let kz = |n: &str, exp: u64| KitZone { name: wire(n), addrs: vec!["198.18.2.1".parse().unwrap()], expires_ns: exp };
        for z in [kz(".", u64::MAX), kz("old.lab.", 40), kz("live.lab.", 500)] {
            m.zones.lock().unwrap().insert(z.name.clone(), z);
        }
        assert_eq!(w.sweep(&m, 50), 1);
        assert_eq!(held(&m), [".", "lab.", "live.lab."]);
        // the writer's own expired cut is the writer's to remove (at its next sync), not the sweep's
        assert_eq!(w.sweep(&m, 200), 0);
        assert_eq!(held(&m), [".", "lab.", "live.lab."]);
        assert_eq!(w.sweep(&m, 600), 1);
        assert_eq!(held(&m), [".", "lab."]);
    }

    #[test]
    fn held_servers_leave_every_cut_that_keeps_another() {
        let m = MemMap::default();
        let mut w = ZoneWriter::new(10);
        w.sync(&m, vec![deleg("lab.", &["198.18.1.1", "198.18.9.9"], 100)], 1, 10);
        let kz = |n: &str, a: &[&str]| KitZone { name: wire(n), addrs: a.iter().map(|x| x.parse().unwrap()).collect(), expires_ns: 500 };
        for z in [kz(".", &["198.18.9.9", "198.18.0.1"]), kz("slow.lab.", &["198.18.9.9", "2001:db8::9", "198.18.2.1"]), kz("dead.lab.", &["198.18.9.9"])] {
            m.zones.lock().unwrap().insert(z.name.clone(), z);
        }
        let held = |a: IpAddr| (a == "198.18.9.9".parse::<IpAddr>().unwrap()).then_some(300);
        assert_eq!(w.drop_held(&m, held), 2, "lab. (the writer's) and slow.lab. (the kernel's)");
        let z = m.zones.lock().unwrap();
        assert_eq!(z[&wire("slow.lab.")].addrs.len(), 2);
        assert_eq!(z[&wire("slow.lab.")].expires_ns, 300, "the kernel's cut expires when the hold ends");
        assert_eq!(z[&wire("lab.")].addrs, vec!["198.18.1.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(z[&wire("lab.")].expires_ns, 100, "the writer's keeps its expiry");
        assert_eq!(z[&wire("dead.lab.")].addrs.len(), 1, "its only server stays");
        assert_eq!(z[&wire(".")].addrs.len(), 2, "the root (the hints) is left alone");
        drop(z);
        assert!(w.due(1, 11), "the writer copies the resolver's delegations again");
    }

    #[test]
    fn zone_writer_keeps_the_map_bounded() {
        let m = MemMap::default();
        let mut w = ZoneWriter::new(3);
        let d = vec![
            deleg("a.b.lab.", &["198.18.1.1"], 500),
            deleg("b.lab.", &["198.18.1.2"], 100),
            deleg("c.lab.", &["198.18.1.3"], 300),
            deleg("lab.", &["198.18.1.4"], 50),
            deleg("d.lab.", &["198.18.1.5"], 200),
        ];
        w.sync(&m, d, 1, 0);
        // fewest labels first (lab.), then the latest expiry (c.lab. 300, d.lab. 200)
        assert_eq!(held(&m), ["c.lab.", "d.lab.", "lab."]);
        // a refused cut is left out and tried again
        let m2 = MemMap { refuse: vec![wire("x.lab.")], ..Default::default() };
        let mut w2 = ZoneWriter::new(3);
        assert_eq!(w2.sync(&m2, vec![deleg("x.lab.", &["198.18.1.1"], 500)], 1, 0), (0, 0));
        assert!(held(&m2).is_empty());
    }

    #[test]
    fn client_query_is_what_the_client_sent() {
        let p = KitPending {
            client: "198.18.0.2:40000".parse().unwrap(),
            local: "198.18.0.1".parse().unwrap(),
            id: 0xbeef,
            flags: 0x0100,
            qname: b"\x03www\x07Example\x03net\x00".to_vec(),
            qtype: 1,
            payload: Some(1232),
            dnssec_ok: true,
            sent_name: vec![],
            sent_ns: 0,
            zone_hash: 0,
            zone_len: 0,
            hops: 1,
        };
        let m = client_query(&p);
        let q = xdns_wire::Query::parse(&m).unwrap();
        assert_eq!((q.id, q.rd), (0xbeef, true));
        assert!(q.edns.is_some_and(|e| e.dnssec_ok && e.payload == 1232));
    }
}
