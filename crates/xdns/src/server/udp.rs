//! The UDP path: one `SO_REUSEPORT` socket per worker per listen address, each drained by its
//! own OS thread in a blocking `recvmmsg`/`sendmmsg` loop.
//!
//! No allocation and no lock per packet: receive and response buffers are allocated once per
//! thread, the served state is loaded once per batch (an `arc-swap` guard), and counters go to
//! the thread's own [`Shard`]. A read timeout on the socket lets the loop notice shutdown.
//!
//! Wildcard listen addresses (`0.0.0.0`, `::`) get `IP_PKTINFO` / `IPV6_RECVPKTINFO`, and each
//! answer is sent from the address the query was sent to (a multi-homed host would otherwise
//! answer from whatever address the routing table picks, which clients drop). Specific
//! addresses need none of this and skip the control messages entirely.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use xdns_wire::{CacheKey, Query};
use xdns_zone::{Outcome, Transport};

use super::Shared;
use crate::query::{self, Action, Message};
use crate::recursion::Recursion;
use crate::stats::{DropKind, Shard};

/// Messages per `recvmmsg`/`sendmmsg` call (default; `XDNS_UDP_BATCH` overrides, for benchmarks).
const BATCH: usize = 32;
/// Largest batch `XDNS_UDP_BATCH` may ask for.
const MAX_BATCH: usize = 256;
/// Largest query accepted; longer datagrams arrive with MSG_TRUNC and are dropped.
const RX_SIZE: usize = 4096;
/// Control buffer per message, in u64 words (aligned for `cmsghdr`): room for a pktinfo
/// and a receive timestamp (telemetry).
const CTRL_WORDS: usize = 16;
/// How often a worker idle in `recvmmsg` checks for shutdown.
const POLL: Duration = Duration::from_millis(200);

/// Create and bind one worker socket for `addr`.
pub fn bind(addr: SocketAddr) -> io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    // Best effort: a larger buffer absorbs bursts. The default (rmem_default, ~208 KiB) holds
    // only ~250 small datagrams; as root SO_RCVBUFFORCE goes past rmem_max.
    set_buffer(&sock, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUFFER);
    set_buffer(&sock, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SOCKET_BUFFER);
    sock.set_read_timeout(Some(POLL))?;
    if addr.ip().is_unspecified() {
        set_pktinfo(&sock, addr.is_ipv6())?;
    }
    sock.bind(&addr.into())?;
    Ok(sock)
}

/// Socket buffer size asked for on each UDP socket.
const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// Set a socket buffer size with `force` (needs CAP_NET_ADMIN), else with `plain` (capped by
/// the kernel's rmem_max/wmem_max). Failure only leaves the default size.
fn set_buffer(sock: &Socket, force: libc::c_int, plain: libc::c_int, size: libc::c_int) {
    for opt in [force, plain] {
        // SAFETY: valid fd, pointer to a c_int that outlives the call, correct length.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &size as *const libc::c_int as *const libc::c_void,
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}

fn set_pktinfo(sock: &Socket, v6: bool) -> io::Result<()> {
    let one: libc::c_int = 1;
    let (level, opt) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    // SAFETY: valid fd, pointer to a c_int that outlives the call, correct length.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            &one as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Start a worker thread serving `sock` (shared with kernel iteration's handover, which
/// answers its clients from it: `crate::kit`).
pub fn spawn(
    sock: Arc<Socket>,
    wildcard: bool,
    shared: Arc<Shared>,
    name: String,
) -> io::Result<JoinHandle<()>> {
    let shard = shared.stats.shard();
    let batch = batch_size(std::env::var("XDNS_UDP_BATCH").ok().as_deref());
    let beat = shared.heartbeats.register(&name);
    let local = sock.local_addr().ok().and_then(|a| a.as_socket());
    std::thread::Builder::new().name(name).spawn(move || {
        let mut w = Worker::new(wildcard, batch);
        w.local = local;
        w.recursion = shared.recursion.get().cloned();
        w.run(&sock, &shared, &shard, &beat);
    })
}

/// A query waiting for the resolver, with everything needed to answer it later from the same
/// socket to the same address (and from the same local address, for wildcard listeners).
pub struct Pending {
    sock: Arc<Socket>,
    name: libc::sockaddr_storage,
    namelen: libc::socklen_t,
    pktinfo: Pktinfo,
    /// The query.
    pub query: Box<Query>,
    /// Its cache key.
    pub key: CacheKey,
    /// Its client's and server's addresses, for dnstap (empty while it is off).
    ends: crate::dnstap::Ends,
    /// Telemetry's selection (`crate::telemetry`), when a rule selects it.
    pub timed: Option<crate::telemetry::Timed>,
    /// The reply kernel iteration got for it, to be the resolution's first exchange
    /// (`crate::kit`).
    pub handed: Option<xdns_resolver::Handed>,
}

impl Pending {
    /// The client's address (for the resolver's per-client fairness).
    pub fn peer(&self) -> Option<IpAddr> {
        peer_ip(&self.name)
    }

    /// A query kernel iteration handed over (`crate::kit`): answered from `sock` (a listen
    /// socket of `local`'s family bound to `local` or its wildcard) from `local` to `client`.
    pub fn handed_over(sock: Arc<Socket>, client: SocketAddr, local: IpAddr, query: Box<Query>, key: CacheKey, handed: Option<xdns_resolver::Handed>) -> Pending {
        let sa = socket2::SockAddr::from(client);
        let pktinfo = match local {
            IpAddr::V4(a) => Pktinfo::V4(libc::in_pktinfo { ipi_ifindex: 0, ipi_spec_dst: libc::in_addr { s_addr: u32::from(a).to_be() }, ipi_addr: libc::in_addr { s_addr: u32::from(a).to_be() } }),
            IpAddr::V6(a) => {
                // SAFETY: plain-data struct, zero is valid.
                let mut i: libc::in6_pktinfo = unsafe { zeroed() };
                i.ipi6_addr.s6_addr = a.octets();
                Pktinfo::V6(i)
            }
        };
        // SAFETY: plain-data struct, zero is valid.
        let mut name: libc::sockaddr_storage = unsafe { zeroed() };
        let namelen = sa.len();
        // SAFETY: `sa` holds `namelen` (<= size_of sockaddr_storage) valid bytes of a sockaddr.
        unsafe { std::ptr::copy_nonoverlapping(sa.as_ptr().cast::<u8>(), (&mut name as *mut libc::sockaddr_storage).cast::<u8>(), namelen as usize) };
        Pending { sock, name, namelen, pktinfo, query, key, ends: Default::default(), timed: None, handed }
    }

    /// Sends `answer` to the client (non-blocking: a full socket buffer drops it).
    pub fn send(&mut self, answer: &mut [u8]) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: answer.as_mut_ptr() as *mut libc::c_void,
            iov_len: answer.len(),
        };
        let mut ctrl = [0u64; CTRL_WORDS];
        let clen = write_pktinfo(&mut ctrl, self.pktinfo);
        // SAFETY: msghdr is plain data; every pointer set below points to locals or fields that
        // outlive the sendmsg call.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = &mut self.name as *mut _ as *mut libc::c_void;
        msg.msg_namelen = self.namelen;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if clen > 0 {
            msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = clen;
        }
        crate::dnstap::client_response(self.ends, crate::dnstap::Proto::Udp, answer, None);
        // SAFETY: valid fd owned by the Arc'd socket; msg is fully initialised above.
        let r = unsafe { libc::sendmsg(self.sock.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Sends each reply of `batch` to its client ([`Pending::send`]'s addresses), one
/// `sendmmsg` per run of replies from the same socket (at most [`MAX_BATCH`] a call), and
/// empties `batch`. Returns how many could not be sent (non-blocking: a full socket buffer
/// drops the reply, as [`Pending::send`] does).
pub fn send_batch(batch: &mut Vec<(Pending, Vec<u8>)>) -> usize {
    batch.sort_by_key(|(p, _)| p.sock.as_raw_fd());
    let mut failed = 0;
    let mut i = 0;
    while i < batch.len() {
        let fd = batch[i].0.sock.as_raw_fd();
        let mut end = i + 1;
        while end < batch.len() && end - i < MAX_BATCH && batch[end].0.sock.as_raw_fd() == fd {
            end += 1;
        }
        let run = &mut batch[i..end];
        let n = run.len();
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(n);
        let mut ctrl: Vec<[u64; CTRL_WORDS]> = vec![[0; CTRL_WORDS]; n];
        let mut clens = Vec::with_capacity(n);
        for (j, (p, out)) in run.iter_mut().enumerate() {
            crate::dnstap::client_response(p.ends, crate::dnstap::Proto::Udp, out, None);
            iov.push(libc::iovec { iov_base: out.as_mut_ptr() as *mut libc::c_void, iov_len: out.len() });
            clens.push(write_pktinfo(&mut ctrl[j], p.pktinfo));
        }
        // SAFETY: mmsghdr is plain data; zero is valid, every pointer is set below.
        let mut hdr: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { zeroed() }).collect();
        for (j, (p, _)) in run.iter_mut().enumerate() {
            let h = &mut hdr[j].msg_hdr;
            h.msg_name = &mut p.name as *mut _ as *mut libc::c_void;
            h.msg_namelen = p.namelen;
            h.msg_iov = &mut iov[j];
            h.msg_iovlen = 1;
            if clens[j] > 0 {
                h.msg_control = ctrl[j].as_mut_ptr() as *mut libc::c_void;
                h.msg_controllen = clens[j];
            }
        }
        let mut sent = 0;
        while sent < n {
            // SAFETY: headers [sent, n) point into `run`, `iov` and `ctrl`, alive for the call.
            let r = unsafe { libc::sendmmsg(fd, hdr.as_mut_ptr().add(sent), (n - sent) as libc::c_uint, libc::MSG_DONTWAIT) };
            if r > 0 {
                sent += r as usize;
                continue;
            }
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // the reply at `sent` failed (buffer full, unreachable): skip it
            failed += 1;
            sent += 1;
        }
        i = end;
    }
    batch.clear();
    failed
}

/// The client's IP address from a `recvmmsg` source address.
fn peer_ip(ss: &libc::sockaddr_storage) -> Option<IpAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// The client's address and port from a `recvmmsg` source address.
fn peer_addr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    let ip = peer_ip(ss)?;
    // SAFETY: sockaddr_in and sockaddr_in6 both hold the port, in network order, right
    // after the family; peer_ip checked the family is one of them.
    let port = unsafe { (*(ss as *const _ as *const libc::sockaddr_in)).sin_port };
    Some(SocketAddr::new(ip, u16::from_be(port)))
}

/// Both ends of a received datagram, for dnstap: the server's is the listen address, or
/// for a wildcard listener the address the query was sent to.
fn ends(name: &libc::sockaddr_storage, local: Option<SocketAddr>, pktinfo: Pktinfo) -> crate::dnstap::Ends {
    let port = local.map_or(0, |l| l.port());
    let server = match pktinfo {
        Pktinfo::V4(p) => Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr))), port)),
        Pktinfo::V6(p) => Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(p.ipi6_addr.s6_addr)), port)),
        Pktinfo::None => local,
    };
    crate::dnstap::Ends { client: peer_addr(name), server }
}

/// The batch size from the `XDNS_UDP_BATCH` value, if valid; else [`BATCH`].
fn batch_size(env: Option<&str>) -> usize {
    env.and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=MAX_BATCH).contains(n))
        .unwrap_or(BATCH)
}

/// Where an answer must come from, taken from the query's control message.
#[derive(Clone, Copy)]
enum Pktinfo {
    None,
    V4(libc::in_pktinfo),
    V6(libc::in6_pktinfo),
}

/// Per-thread buffers. The `mmsghdr` pointers are rebuilt before each call, so the struct may
/// move freely between calls.
struct Worker {
    wildcard: bool,
    batch: usize,
    rx: Vec<u8>,
    names: Vec<libc::sockaddr_storage>,
    rx_ctrl: Vec<[u64; CTRL_WORDS]>,
    rx_iov: Vec<libc::iovec>,
    rx_hdr: Vec<libc::mmsghdr>,
    tx: Vec<Vec<u8>>,
    /// For each answer slot, the query slot whose address it goes to, and its pktinfo.
    tx_to: Vec<(usize, Pktinfo)>,
    tx_ctrl: Vec<[u64; CTRL_WORDS]>,
    tx_iov: Vec<libc::iovec>,
    tx_hdr: Vec<libc::mmsghdr>,
    /// The resolver, when `[resolver]` is configured.
    recursion: Option<Arc<Recursion>>,
    /// SO_TIMESTAMPING asked for on the socket (telemetry has rules).
    stamps: bool,
    /// The socket's own address: dnstap's server end, and the server address of telemetry
    /// rules for a specific listen address (a wildcard listener takes it from the pktinfo).
    local: Option<SocketAddr>,
}

impl Worker {
    fn new(wildcard: bool, batch: usize) -> Self {
        // SAFETY: these libc structs are plain data for which all-zero bytes are valid.
        let (ss, iov, hdr) = unsafe {
            (
                zeroed::<libc::sockaddr_storage>(),
                zeroed::<libc::iovec>(),
                zeroed::<libc::mmsghdr>(),
            )
        };
        Self {
            wildcard,
            batch,
            rx: vec![0; batch * RX_SIZE],
            names: vec![ss; batch],
            rx_ctrl: vec![[0; CTRL_WORDS]; batch],
            rx_iov: vec![iov; batch],
            rx_hdr: vec![hdr; batch],
            tx: (0..batch).map(|_| Vec::with_capacity(RX_SIZE)).collect(),
            tx_to: vec![(0, Pktinfo::None); batch],
            tx_ctrl: vec![[0; CTRL_WORDS]; batch],
            tx_iov: vec![iov; batch],
            tx_hdr: vec![hdr; batch],
            recursion: None,
            stamps: false,
            local: None,
        }
    }

    fn run(&mut self, sock: &Arc<Socket>, shared: &Shared, shard: &Shard, beat: &std::sync::atomic::AtomicU64) {
        let fd = sock.as_raw_fd();
        self.local = sock.local_addr().ok().and_then(|a| a.as_socket());
        while !shared.shutdown.load(Ordering::Relaxed) {
            beat.fetch_add(1, Ordering::Relaxed);
            let want = shared.telemetry.on();
            if want != self.stamps {
                self.stamps = set_timestamping(fd, want).is_ok() && want;
            }
            let n = match self.recv(fd) {
                Ok(n) => n,
                Err(e) => {
                    match e.kind() {
                        io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted => {}
                        _ => {
                            tracing::warn!(error = %e, "UDP receive failed");
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    continue;
                }
            };
            let answers = self.answer(n, sock, shared, shard);
            self.send(fd, answers, shard);
        }
    }

    fn recv(&mut self, fd: i32) -> io::Result<usize> {
        for i in 0..self.batch {
            self.rx_iov[i] = libc::iovec {
                // SAFETY: i * RX_SIZE < rx.len(); the slice lives as long as self.
                iov_base: unsafe { self.rx.as_mut_ptr().add(i * RX_SIZE) } as *mut libc::c_void,
                iov_len: RX_SIZE,
            };
            let h = &mut self.rx_hdr[i];
            h.msg_len = 0;
            h.msg_hdr.msg_name = &mut self.names[i] as *mut _ as *mut libc::c_void;
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.rx_iov[i];
            h.msg_hdr.msg_iovlen = 1;
            if self.wildcard || self.stamps {
                h.msg_hdr.msg_control = self.rx_ctrl[i].as_mut_ptr() as *mut libc::c_void;
                h.msg_hdr.msg_controllen = CTRL_WORDS * 8;
            } else {
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
            }
            h.msg_hdr.msg_flags = 0;
        }
        // SAFETY: every header points into buffers owned by self that outlive the call;
        // vlen matches the array length.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.rx_hdr.as_mut_ptr(),
                self.batch as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((r as usize).min(self.batch))
    }

    /// Answer the `n` received messages; returns how many answers are ready in `tx`.
    fn answer(&mut self, n: usize, sock: &Arc<Socket>, shared: &Shared, shard: &Shard) -> usize {
        let served = shared.served.load();
        let guard = shared.guard.load();
        let tel = &shared.telemetry;
        let tel_on = self.stamps && tel.on();
        let read_at = if tel_on { crate::telemetry::realtime_ns() } else { 0 };
        let mut out = 0;
        for i in 0..n {
            let hdr = &self.rx_hdr[i];
            let len = (hdr.msg_len as usize).min(RX_SIZE);
            if hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                shard.record_dropped(Transport::Udp, DropKind::Malformed);
                continue;
            }
            let pktinfo = if self.wildcard {
                read_pktinfo(&hdr.msg_hdr)
            } else {
                Pktinfo::None
            };
            let query = &self.rx[i * RX_SIZE..i * RX_SIZE + len];
            let buf = &mut self.tx[out];
            let name = &self.names[i];
            let namelen = hdr.msg_hdr.msg_namelen;
            let recursion = self.recursion.as_deref();
            let ends = match crate::dnstap::enabled() {
                true => ends(name, self.local, pktinfo),
                false => Default::default(),
            };
            let msg = Message { wire: query, peer: peer_ip(name), transport: Transport::Udp, ends };
            // telemetry: where and when it came (the socket's receive timestamp)
            let tel_at = if tel_on {
                let server = pktinfo_addr(pktinfo).or(self.local.map(|a| a.ip()));
                match (peer_ip(name), server) {
                    (Some(c), Some(s)) => Some((c, s, rx_timestamp(&hdr.msg_hdr).unwrap_or((read_at, crate::telemetry::RxClock::Read)))),
                    _ => None,
                }
            } else {
                None
            };
            let payload = served.respond.edns_payload;
            let action = match query::handle(&served, guard.as_deref(), &shared.live_blocks, recursion, msg, buf) {
                Action::Resolve(q, key) => {
                    let rec = recursion.expect("only the resolver's step asks to resolve");
                    let timed = tel_at.and_then(|(c, s, rx)| tel.start(crate::telemetry::RESOLVER_MISS, query, c, s, rx, payload));
                    let p = Pending { sock: sock.clone(), name: *name, namelen, pktinfo, query: q, key, ends, timed, handed: None };
                    match rec.pending.try_send(p) {
                        // answered later by a resolver task
                        Ok(()) => continue,
                        Err(e) => {
                            let payload = served.respond.edns_payload;
                            Action::Reply(query::overloaded(rec, &e.into_inner().query, Transport::Udp, payload, buf))
                        }
                    }
                }
                a => a,
            };
            action.record(shard, Transport::Udp);
            if matches!(action, Action::Reply(Outcome::Answered { .. })) && !buf.is_empty() {
                if let Some((c, s, rx)) = tel_at {
                    // an authoritative answer (AA), or without a resolver: the zones'; else the resolver's caches
                    let aa = buf.get(2).is_some_and(|f| f & 0x04 != 0);
                    let path = if aa || recursion.is_none() { crate::telemetry::USER_AUTH } else { crate::telemetry::RESOLVER_HIT };
                    if let Some(t) = tel.start(path, query, c, s, rx, payload) {
                        tel.finish(t, buf);
                    }
                }
                self.tx_to[out] = (i, pktinfo);
                out += 1;
            }
        }
        out
    }

    fn send(&mut self, fd: i32, count: usize, shard: &Shard) {
        for j in 0..count {
            let (i, pktinfo) = self.tx_to[j];
            self.tx_iov[j] = libc::iovec {
                iov_base: self.tx[j].as_mut_ptr() as *mut libc::c_void,
                iov_len: self.tx[j].len(),
            };
            let h = &mut self.tx_hdr[j];
            h.msg_len = 0;
            h.msg_hdr.msg_name = &mut self.names[i] as *mut _ as *mut libc::c_void;
            h.msg_hdr.msg_namelen = self.rx_hdr[i].msg_hdr.msg_namelen;
            h.msg_hdr.msg_iov = &mut self.tx_iov[j];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_flags = 0;
            let clen = write_pktinfo(&mut self.tx_ctrl[j], pktinfo);
            if clen > 0 {
                h.msg_hdr.msg_control = self.tx_ctrl[j].as_mut_ptr() as *mut libc::c_void;
                h.msg_hdr.msg_controllen = clen;
            } else {
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
            }
        }
        let mut sent = 0;
        while sent < count {
            // SAFETY: headers [sent, count) point into buffers owned by self.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    self.tx_hdr.as_mut_ptr().add(sent),
                    (count - sent) as libc::c_uint,
                    0,
                )
            };
            if r > 0 {
                sent += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The message at `sent` failed (unreachable peer, buffer full): skip it.
            shard.drop(DropKind::SendFailed);
            sent += 1;
        }
    }
}

/// The local address a query was sent to, from its pktinfo.
fn pktinfo_addr(p: Pktinfo) -> Option<IpAddr> {
    match p {
        Pktinfo::None => None,
        Pktinfo::V4(i) => Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(i.ipi_addr.s_addr)))),
        Pktinfo::V6(i) => Some(IpAddr::V6(Ipv6Addr::from(i.ipi6_addr.s6_addr))),
    }
}

/// Ask for (or stop) receive timestamps: the NIC's where the driver gives them, else the
/// kernel's software stamp (SO_TIMESTAMPING). Telemetry turns them on while it has rules.
fn set_timestamping(fd: i32, on: bool) -> io::Result<()> {
    let flags: libc::c_int = if on {
        (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE | libc::SOF_TIMESTAMPING_RX_HARDWARE | libc::SOF_TIMESTAMPING_RAW_HARDWARE) as libc::c_int
    } else {
        0
    };
    // SAFETY: valid fd, pointer to a c_int that outlives the call, correct length.
    let r = unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags as *const libc::c_int as *const libc::c_void, size_of::<libc::c_int>() as libc::socklen_t)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The receive timestamp of a datagram (SCM_TIMESTAMPING: software, legacy, raw hardware),
/// ns of CLOCK_REALTIME for the software one.
fn rx_timestamp(msg: &libc::msghdr) -> Option<(u64, crate::telemetry::RxClock)> {
    if msg.msg_control.is_null() {
        return None;
    }
    // SAFETY: msg was filled by recvmmsg; the CMSG macros stay within msg_controllen, and
    // the data is read unaligned into plain-data structs.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let h = &*c;
            if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_TIMESTAMPING {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const [libc::timespec; 3]);
                let ns = |t: libc::timespec| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
                // the software stamp is CLOCK_REALTIME, the transmit time's clock; the NIC's
                // (raw hardware) is its own clock: used only when it is the only one
                if ts[0].tv_sec != 0 || ts[0].tv_nsec != 0 {
                    return Some((ns(ts[0]), crate::telemetry::RxClock::Software));
                }
                if ts[2].tv_sec != 0 || ts[2].tv_nsec != 0 {
                    return Some((ns(ts[2]), crate::telemetry::RxClock::Hardware));
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

fn read_pktinfo(msg: &libc::msghdr) -> Pktinfo {
    // SAFETY: msg was filled by recvmmsg; the CMSG macros stay within msg_controllen, and
    // the data is read unaligned into plain-data structs.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let h = &*c;
            if h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_PKTINFO {
                let p = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::in_pktinfo);
                return Pktinfo::V4(p);
            }
            if h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_PKTINFO {
                let p = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::in6_pktinfo);
                return Pktinfo::V6(p);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    Pktinfo::None
}

/// Write the source-address control message for `p` into `buf`; returns its length (0 = none).
fn write_pktinfo(buf: &mut [u64; CTRL_WORDS], p: Pktinfo) -> usize {
    let (level, ty, data_len) = match p {
        Pktinfo::None => return 0,
        Pktinfo::V4(_) => (
            libc::IPPROTO_IP,
            libc::IP_PKTINFO,
            size_of::<libc::in_pktinfo>(),
        ),
        Pktinfo::V6(_) => (
            libc::IPPROTO_IPV6,
            libc::IPV6_PKTINFO,
            size_of::<libc::in6_pktinfo>(),
        ),
    };
    // SAFETY: CMSG_SPACE of these small structs is well under the buffer size (64 bytes);
    // the header is written at the aligned start and the data just after it.
    unsafe {
        let space = libc::CMSG_SPACE(data_len as u32) as usize;
        if space > CTRL_WORDS * 8 {
            return 0;
        }
        let mut msg: libc::msghdr = zeroed();
        msg.msg_control = buf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() {
            return 0;
        }
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        (*c).cmsg_len = libc::CMSG_LEN(data_len as u32) as usize;
        let d = libc::CMSG_DATA(c);
        match p {
            Pktinfo::V4(mut i) => {
                // Answer from the address the query was sent to.
                i.ipi_spec_dst = i.ipi_addr;
                std::ptr::write_unaligned(d as *mut libc::in_pktinfo, i);
            }
            Pktinfo::V6(i) => std::ptr::write_unaligned(d as *mut libc::in6_pktinfo, i),
            Pktinfo::None => {}
        }
        space
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pktinfo_round_trip() {
        // SAFETY: plain-data structs, zero is valid.
        let mut v4: libc::in_pktinfo = unsafe { zeroed() };
        v4.ipi_ifindex = 3;
        v4.ipi_addr.s_addr = u32::from_ne_bytes([198, 18, 0, 5]);
        let mut buf = [0u64; CTRL_WORDS];
        let len = write_pktinfo(&mut buf, Pktinfo::V4(v4));
        assert!(len > 0 && len <= CTRL_WORDS * 8);
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_control = buf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = len;
        match read_pktinfo(&msg) {
            Pktinfo::V4(p) => {
                assert_eq!(p.ipi_ifindex, 3);
                assert_eq!(p.ipi_spec_dst.s_addr, v4.ipi_addr.s_addr);
            }
            _ => panic!("no IPv4 pktinfo read back"),
        }
        assert_eq!(write_pktinfo(&mut buf, Pktinfo::None), 0);
    }

    /// dnstap's two ends: the client from the source address, the server from the listen
    /// address, or for a wildcard listener from the query's destination (pktinfo).
    #[test]
    fn ends_of_a_datagram() {
        // SAFETY: plain-data structs, zero is valid.
        let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
        // SAFETY: sockaddr_in fits in sockaddr_storage, which is aligned for it.
        let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = 40000u16.to_be();
        sin.sin_addr.s_addr = u32::from_ne_bytes([198, 18, 0, 100]);
        let local: SocketAddr = "198.18.0.1:53".parse().unwrap();
        let e = ends(&ss, Some(local), Pktinfo::None);
        assert_eq!(e.client, Some("198.18.0.100:40000".parse().unwrap()));
        assert_eq!(e.server, Some(local));
        // SAFETY: as above.
        let mut p: libc::in_pktinfo = unsafe { zeroed() };
        p.ipi_addr.s_addr = u32::from_ne_bytes([198, 18, 0, 7]);
        let e = ends(&ss, Some("0.0.0.0:5353".parse().unwrap()), Pktinfo::V4(p));
        assert_eq!(e.server, Some("198.18.0.7:5353".parse().unwrap()));
        // SAFETY: as above.
        let mut ss6: libc::sockaddr_storage = unsafe { zeroed() };
        // SAFETY: sockaddr_in6 fits in sockaddr_storage, which is aligned for it.
        let sin6 = unsafe { &mut *(&mut ss6 as *mut _ as *mut libc::sockaddr_in6) };
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_port = 5300u16.to_be();
        sin6.sin6_addr.s6_addr = "2001:db8::2".parse::<Ipv6Addr>().unwrap().octets();
        // SAFETY: as above.
        let mut p6: libc::in6_pktinfo = unsafe { zeroed() };
        p6.ipi6_addr.s6_addr = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
        let e = ends(&ss6, Some("[::]:53".parse().unwrap()), Pktinfo::V6(p6));
        assert_eq!(e.client, Some("[2001:db8::2]:5300".parse().unwrap()));
        assert_eq!(e.server, Some("[2001:db8::1]:53".parse().unwrap()));
    }

    #[test]
    fn batch_size_from_env() {
        let table = [
            (None, BATCH),
            (Some("1"), 1),
            (Some(" 64 "), 64),
            (Some("0"), BATCH),
            (Some("999"), BATCH),
            (Some("x"), BATCH),
        ];
        for (env, want) in table {
            assert_eq!(batch_size(env), want, "{env:?}");
        }
    }

    #[test]
    fn receive_buffer_is_enlarged() {
        let s = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        // The kernel reports twice the size set; anything above the ~208 KiB default shows the
        // option took effect (as root: the full 4 MiB; otherwise rmem_max).
        let got = s.recv_buffer_size().unwrap();
        let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        assert!(got >= (SOCKET_BUFFER as usize).min(rmem_max), "{got}");
    }

    #[test]
    fn binds_reuseport_twice() {
        let a = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = a.local_addr().unwrap().as_socket().unwrap().port();
        let b = bind(SocketAddr::from(([127, 0, 0, 1], port)));
        assert!(
            b.is_ok(),
            "second SO_REUSEPORT socket on the same port must bind"
        );
    }
}
