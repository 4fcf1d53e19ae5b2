//! Kernel iteration's userspace half (issue 32; bpf/README.md, "Kernel iteration").
//!
//! - [`reserve`] binds a UDP socket on every port of `[resolver] kernel_iteration_ports`
//!   (IPv6 wildcard, dual-stack) before the XDP program may send from them: no other socket
//!   of the host can take one, and a response the kernel checks and passes
//!   (`pass_kit_response`) arrives on it.
//! - [`spawn`] starts the tasks that read them: a response claims its pending entry (deletes
//!   it from `xdns_kit_pending`; only the claimer answers), is checked again as the userspace
//!   resolver checks its own (from port 53 of the server asked, the ID, the question with its
//!   0x20 case), and the client's question is finished by the userspace resolver (its caches,
//!   delegations, every fallback) and answered from the listen socket, once. A timer claims
//!   the entries of servers that never answered and resolves them the same way.
//! - The zone map: the root from the hints when the tasks start, and the resolver's known
//!   delegations are not written yet (the kernel asks the root for every miss until then).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use socket2::{Domain, Protocol, Socket, Type};
use xdns_bpf::kit::{KitMaps, KitPending, KitZone};
use xdns_zone::Transport;

use crate::config::Config;
use crate::server::Shared;

/// The reserved ports' sockets.
pub struct Reserved(Vec<(u16, std::net::UdpSocket)>);

/// Bind every port of `ports` (dual-stack IPv6 wildcard). A port taken is an error naming it.
pub fn reserve(ports: (u16, u16)) -> anyhow::Result<Reserved> {
    let mut v = Vec::new();
    for p in ports.0..=ports.1 {
        let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_only_v6(false)?;
        s.set_nonblocking(true)?;
        s.bind(&SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), p).into())
            .with_context(|| format!("[resolver] kernel_iteration_ports: reserving port {p} (taken by another socket?)"))?;
        v.push((p, s.into()));
    }
    Ok(Reserved(v))
}

/// Claims the pending query a response on `port` from `from` answers, if it is the one sent:
/// from port 53, with the ID and question sent (the kernel checked all this already; a
/// response that reached the socket another way is checked here the same).
fn claim(kit: &KitMaps, port: u16, from: SocketAddr, msg: &[u8]) -> Option<KitPending> {
    if from.port() != 53 || msg.len() < 12 {
        return None;
    }
    let ip = match from.ip() {
        IpAddr::V6(a) => a.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(a)),
        v4 => v4,
    };
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    let p = kit.claim(ip, port, id).ok()??;
    let q = msg.get(12..12 + p.sent_name.len() + 4)?;
    if q[..p.sent_name.len()] != p.sent_name[..] || q[p.sent_name.len()..] != [(p.qtype >> 8) as u8, p.qtype as u8, 0, 1] {
        // claimed, but not its answer: resolved by userspace all the same (the client waits)
        tracing::debug!(%from, "kernel iteration: a response to a reserved port with another question");
    }
    Some(p)
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

/// Finish `p` in userspace: the resolver's route (REFUSED, a cache hit) or a resolution,
/// answered from the listen socket.
fn finish(shared: &Arc<Shared>, socks: &[(SocketAddr, Arc<Socket>)], p: KitPending) {
    let Some(rec) = shared.recursion.get().cloned() else { return };
    let Some(sock) = answer_socket(socks, &p) else {
        tracing::debug!(client = %p.client, "kernel iteration: no listen socket for the address asked");
        return;
    };
    let msg = client_query(&p);
    let served = shared.served.load();
    let payload = served.respond.edns_payload;
    let mut out = Vec::new();
    match crate::recursion::route(&rec, &served.zones, &msg, p.client.ip(), Transport::Udp, payload, &mut out) {
        crate::recursion::Route::Answered(outcome) => {
            rec.shard.record(Transport::Udp, outcome);
            let Ok(q) = xdns_wire::Query::parse(&msg) else { return };
            let Some(qq) = q.question.as_ref() else { return };
            let key = xdns_resolver::KeyRef { qname: qq.key(), qtype: qq.qtype, dnssec_ok: p.dnssec_ok }.to_owned_key();
            let mut pend = crate::server::udp::Pending::handed_over(sock, p.client, p.local, Box::new(q), key);
            let _ = pend.send(&mut out);
        }
        crate::recursion::Route::Resolve(q, key) => {
            let pend = crate::server::udp::Pending::handed_over(sock, p.client, p.local, q, key);
            if let Err(e) = rec.pending.try_send(pend) {
                let mut pend = e.into_inner();
                let mut out = Vec::new();
                let _ = crate::recursion::answer(&pend.query, Err(crate::recursion::Failure::Busy), 0, Transport::Udp, payload, &mut out);
                let _ = pend.send(&mut out);
            }
        }
        crate::recursion::Route::Authoritative => {}
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
    let timeout = rs.resolver.upstream_timeout;
    let kit = Arc::new(kit);
    let _ = MAPS.set(kit.clone());
    let socks = Arc::new(socks);
    let mut tasks = Vec::new();
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
                if let Some(p) = claim(&kit, port, from, &buf[..n]) {
                    finish(&shared, &socks, p);
                }
            }
        }));
    }
    let (shared, mut stop) = (shared.clone(), stop.clone());
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = crate::server::stopped(&mut stop) => break,
                _ = tick.tick() => {}
            }
            let before = monotonic_ns().saturating_sub(timeout.as_nanos() as u64);
            for p in kit.claim_older(before).unwrap_or_default() {
                finish(&shared, &socks, p);
            }
        }
    }));
    Ok(tasks)
}

/// Kernel iteration's maps once its tasks run (for the counters).
static MAPS: std::sync::OnceLock<Arc<KitMaps>> = std::sync::OnceLock::new();

/// The group `kit`: misses handed over by reason (`handover_<reason>`), queries sent,
/// responses accepted, pending queries now.
pub fn snapshot(s: &mut crate::stats::Snapshot) {
    let Some(kit) = MAPS.get() else { return };
    let Ok(c) = kit.counters() else { return };
    let mut v: Vec<(String, u64)> = xdns_bpf::kit::HANDOVER.iter().zip(c.handover).map(|(r, n)| (format!("handover_{r}"), n)).collect();
    v.push(("sent".into(), c.sent));
    v.push(("responses".into(), c.responses));
    v.push(("pending".into(), kit.pending_len() as u64));
    s.groups.insert(
        "kit".into(),
        crate::stats::Group::counters("Kernel iteration: misses handed to userspace by reason, queries sent, responses accepted, entries pending.", "counter", v),
    );
}

fn monotonic_ns() -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_from_hints() {
        let z = root_zone(". 3600 IN NS a.root.\na.root. 3600 IN A 198.18.1.1 ; x\na.root. 3600 IN AAAA 2001:db8::53\n");
        assert_eq!(z.name, vec![0]);
        assert_eq!(z.addrs, vec!["198.18.1.1".parse::<IpAddr>().unwrap(), "2001:db8::53".parse().unwrap()]);
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
        };
        let m = client_query(&p);
        let q = xdns_wire::Query::parse(&m).unwrap();
        assert_eq!((q.id, q.rd), (0xbeef, true));
        assert!(q.edns.is_some_and(|e| e.dnssec_ok && e.payload == 1232));
    }
}
