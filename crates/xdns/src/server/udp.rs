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
//!
//! Telemetry (while a rule may select the workers' answers: [`crate::telemetry::Telemetry::on`]): receive timestamps come with each query (`SO_TIMESTAMPING`);
//! each timed answer is sent asking for its transmit timestamp with an ID of the worker's own
//! (`SCM_TS_OPT_ID`, Linux 6.13+), read back from the error queue (`MSG_ERRQUEUE`, never
//! waiting) once [`ERRQ_EVERY`] timed answers were sent since the last read, or when the
//! worker has time (a receive that did not fill the batch, or its read timeout), and matched
//! by [`crate::telemetry::TxStamps`]. Other senders on the socket (the resolver's answers)
//! ask for none, so the IDs stay the worker's. Older kernels, and any kernel that refuses
//! the ID, get the send time read just before `sendmmsg` instead (counted `tx_read`).

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
/// Error-queue messages (transmit timestamps) read per `recvmmsg`.
const ERRQ_BATCH: usize = 128;
/// Timed answers sent before a busy worker reads the error queue (one `recvmmsg` for the
/// stamps of several `sendmmsg` batches; an idle worker reads it at once).
const ERRQ_EVERY: usize = 128;
/// Control buffer per error-queue message, in u64 words: a timestamp and an extended error.
const ERRQ_CTRL_WORDS: usize = 32;
/// `SCM_TS_OPT_ID` (asm-generic/socket.h, Linux 6.13): the transmit timestamp ID of one message.
const SCM_TS_OPT_ID: libc::c_int = 81;
/// `SCM_TSTAMP_SND` (linux/errqueue.h): a stamp taken as the packet left for the device.
const SCM_TSTAMP_SND: u32 = 0;
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
    /// Transmit timestamps from the error queue asked for with each timed answer.
    tx_errq: bool,
    /// For each answer slot, its telemetry selection and the time read before sending,
    /// when its transmit timestamp is to come from the error queue.
    tx_timed: Vec<Option<(crate::telemetry::Timed, u64)>>,
    /// For each answer slot, the timestamp ID it is sent with (0: none asked for).
    tx_ids: Vec<u32>,
    /// Timed answers waiting for their transmit timestamps.
    waiting: crate::telemetry::TxStamps,
    /// Timed answers sent (asking for a stamp) since the error queue was last read.
    unread: usize,
    /// The last receive did not fill the batch (or timed out): the worker has time.
    idle: bool,
    /// Can this kernel take a transmit timestamp ID per message ([`tx_stamps_supported`]);
    /// tests set it to try either way on one kernel.
    tx_ids_ok: bool,
    /// The control message type asking for the ID (`SCM_TS_OPT_ID`); tests put one no
    /// kernel knows to see a refusal, as a kernel before 6.13 refuses this one.
    opt_id_type: libc::c_int,
    errq_ctrl: Vec<[u64; ERRQ_CTRL_WORDS]>,
    errq_hdr: Vec<libc::mmsghdr>,
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
            tx_errq: false,
            tx_timed: vec![None; batch],
            tx_ids: vec![0; batch],
            waiting: Default::default(),
            unread: 0,
            idle: true,
            tx_ids_ok: tx_stamps_supported(),
            opt_id_type: SCM_TS_OPT_ID,
            errq_ctrl: Vec::new(),
            errq_hdr: Vec::new(),
            local: None,
        }
    }

    fn run(&mut self, sock: &Arc<Socket>, shared: &Shared, shard: &Shard, beat: &std::sync::atomic::AtomicU64) {
        let fd = sock.as_raw_fd();
        self.local = sock.local_addr().ok().and_then(|a| a.as_socket());
        while !shared.shutdown.load(Ordering::Relaxed) {
            beat.fetch_add(1, Ordering::Relaxed);
            let tel = &shared.telemetry;
            let want = tel.on();
            if want != self.stamps {
                self.set_stamps(fd, want, tel);
            }
            if self.idle && self.waiting.waiting() > 0 {
                // stamps not read yet (or never to come: counted lost once waited for)
                self.read_errq(fd, tel);
            }
            let n = match self.recv(fd) {
                Ok(n) => {
                    self.idle = n < self.batch;
                    n
                }
                Err(e) => {
                    self.idle = true;
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
            self.send(fd, answers, shard, &shared.telemetry);
        }
    }

    /// Turn the socket's timestamps on (a rule may select the worker's answers) or off:
    /// receive stamps, and transmit stamps from the error queue where the kernel takes an ID
    /// per message. Turned off, the answers still waiting are read or counted lost.
    fn set_stamps(&mut self, fd: i32, want: bool, tel: &crate::telemetry::Telemetry) {
        if !want {
            self.read_errq(fd, tel);
            self.waiting.give_up(tel);
        }
        self.tx_errq = want && self.tx_ids_ok && set_timestamping(fd, true, true).is_ok();
        self.stamps = self.tx_errq || (set_timestamping(fd, want, false).is_ok() && want);
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
            self.tx_timed[out] = None;
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
                        if self.tx_errq {
                            // the probe option now; the histogram when the stamp comes
                            self.tx_timed[out] = Some((t, tel.stamp_probe(t, buf)));
                        } else {
                            tel.finish(t, buf);
                        }
                    }
                }
                self.tx_to[out] = (i, pktinfo);
                out += 1;
            }
        }
        out
    }

    fn send(&mut self, fd: i32, count: usize, shard: &Shard, tel: &crate::telemetry::Telemetry) {
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
            let mut clen = write_pktinfo(&mut self.tx_ctrl[j], pktinfo);
            self.tx_ids[j] = 0;
            if self.tx_timed[j].is_some() {
                let id = self.waiting.next_id();
                let with = write_tx_stamp(&mut self.tx_ctrl[j], clen, id, self.opt_id_type);
                if with > clen {
                    (self.tx_ids[j], clen) = (id, with);
                }
            }
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
                for j in sent..sent + r as usize {
                    if let Some((t, at)) = self.tx_timed[j] {
                        match self.tx_ids[j] {
                            0 => tel.record(t.path, at.saturating_sub(t.rx), t.clock, crate::telemetry::TxClock::Read),
                            id => {
                                self.waiting.sent(tel, id, t, at);
                                self.unread += 1;
                            }
                        }
                    }
                }
                sent += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if e.raw_os_error() == Some(libc::EINVAL) && self.tx_ids[sent] != 0 {
                // a kernel that refuses the timestamp ID: send it (and from now on every
                // answer) without asking for a transmit stamp; the time read before sending
                tracing::warn!("transmit timestamps with an ID (SCM_TS_OPT_ID) refused: telemetry reads the send time instead");
                (self.tx_errq, self.tx_ids_ok) = (false, false);
                for j in sent..count {
                    if self.tx_ids[j] == 0 {
                        continue;
                    }
                    self.tx_ids[j] = 0;
                    let h = &mut self.tx_hdr[j].msg_hdr;
                    let (_, pktinfo) = self.tx_to[j];
                    let clen = write_pktinfo(&mut self.tx_ctrl[j], pktinfo);
                    h.msg_controllen = clen;
                    if clen == 0 {
                        h.msg_control = std::ptr::null_mut();
                    }
                }
                continue;
            }
            // The message at `sent` failed (unreachable peer, buffer full): skip it.
            if let Some((t, at)) = self.tx_timed[sent] {
                tel.record(t.path, at.saturating_sub(t.rx), t.clock, crate::telemetry::TxClock::Read);
            }
            shard.drop(DropKind::SendFailed);
            sent += 1;
        }
        if self.unread > 0 && (self.idle || self.unread >= ERRQ_EVERY) {
            self.read_errq(fd, tel);
        }
    }

    /// Read the transmit timestamps in the socket's error queue (never waiting), give them to
    /// the answers waiting for them, and count lost the ones waited for too long.
    fn read_errq(&mut self, fd: i32, tel: &crate::telemetry::Telemetry) {
        self.unread = 0;
        if self.errq_hdr.is_empty() {
            // SAFETY: plain-data struct, zero is valid.
            self.errq_hdr = (0..ERRQ_BATCH).map(|_| unsafe { zeroed() }).collect();
            self.errq_ctrl = vec![[0; ERRQ_CTRL_WORDS]; ERRQ_BATCH];
        }
        loop {
            for (h, c) in self.errq_hdr.iter_mut().zip(self.errq_ctrl.iter_mut()) {
                // SAFETY: plain-data struct, zero is valid: no name, no data (OPT_TSONLY).
                h.msg_hdr = unsafe { zeroed() };
                h.msg_len = 0;
                h.msg_hdr.msg_control = c.as_mut_ptr() as *mut libc::c_void;
                h.msg_hdr.msg_controllen = ERRQ_CTRL_WORDS * 8;
            }
            // SAFETY: every header points into buffers owned by self that outlive the call;
            // vlen matches the array length.
            let r = unsafe {
                libc::recvmmsg(fd, self.errq_hdr.as_mut_ptr(), ERRQ_BATCH as libc::c_uint, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT, std::ptr::null_mut())
            };
            if r <= 0 {
                break;
            }
            for h in &self.errq_hdr[..r as usize] {
                if let Some((id, sw, hw)) = tx_timestamp(&h.msg_hdr) {
                    self.waiting.stamp(tel, id, sw, hw);
                }
            }
            if (r as usize) < ERRQ_BATCH {
                break;
            }
        }
        self.waiting.expire(tel, crate::telemetry::realtime_ns());
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
/// `tx`: also prepare transmit stamps, which each timed answer asks for itself
/// ([`write_tx_stamp`]): with an ID (`OPT_ID`), without the packet (`OPT_TSONLY`), the
/// kernel's and the NIC's both where the NIC stamps too (`OPT_TX_SWHW`).
fn set_timestamping(fd: i32, on: bool, tx: bool) -> io::Result<()> {
    let mut flags = 0;
    if on {
        flags = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE | libc::SOF_TIMESTAMPING_RX_HARDWARE | libc::SOF_TIMESTAMPING_RAW_HARDWARE;
        if tx {
            flags |= libc::SOF_TIMESTAMPING_OPT_ID | libc::SOF_TIMESTAMPING_OPT_TSONLY | libc::SOF_TIMESTAMPING_OPT_TX_SWHW;
        }
    }
    let flags = flags as libc::c_int;
    // SAFETY: valid fd, pointer to a c_int that outlives the call, correct length.
    let r = unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags as *const libc::c_int as *const libc::c_void, size_of::<libc::c_int>() as libc::socklen_t)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The control messages of a message: (level, type, data), each data slice within both its
/// `cmsg_len` and `msg_controllen` (a message cut short, `MSG_CTRUNC`, ends the walk), so
/// that the readers below copy their values out of bounds-checked bytes ([`cmsg_value`]).
///
/// # Safety
/// `msg.msg_control` is null or points to `msg.msg_controllen` readable bytes (a buffer the
/// caller owns, written by the kernel or by a test) that outlive the borrow of `msg`.
unsafe fn control_messages(msg: &libc::msghdr) -> impl Iterator<Item = (i32, i32, &[u8])> + '_ {
    let end = (msg.msg_control as usize).saturating_add(msg.msg_controllen);
    // SAFETY: CMSG_FIRSTHDR reads only msg's fields, and returns null when the buffer holds
    // no header.
    let mut c = if msg.msg_control.is_null() { std::ptr::null() } else { unsafe { libc::CMSG_FIRSTHDR(msg) as *const libc::cmsghdr } };
    std::iter::from_fn(move || {
        if c.is_null() {
            return None;
        }
        // SAFETY: `c` is a header CMSG_FIRSTHDR/NXTHDR found whole within the buffer (the
        // caller's promise); its data is used only as far as both lengths allow.
        unsafe {
            let (len, head) = ((*c).cmsg_len as usize, libc::CMSG_LEN(0) as usize);
            let data = libc::CMSG_DATA(c);
            if len < head || (data as usize).saturating_add(len - head) > end {
                return None;
            }
            let item = ((*c).cmsg_level, (*c).cmsg_type, std::slice::from_raw_parts(data, len - head));
            c = libc::CMSG_NXTHDR(msg, c);
            Some(item)
        }
    })
}

/// The plain-data value (a libc struct) at the start of a control message's data, if the data
/// is long enough to hold one.
fn cmsg_value<T: Copy>(data: &[u8]) -> Option<T> {
    // SAFETY: `data` holds at least size_of::<T>() bytes; read_unaligned needs no alignment;
    // T is a plain-data libc struct, valid for any bytes.
    (data.len() >= size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(data.as_ptr() as *const T) })
}

/// ns of a timespec.
fn timespec_ns(t: libc::timespec) -> u64 {
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The receive timestamp of a datagram (SCM_TIMESTAMPING: software, legacy, raw hardware),
/// ns of CLOCK_REALTIME for the software one.
fn rx_timestamp(msg: &libc::msghdr) -> Option<(u64, crate::telemetry::RxClock)> {
    // SAFETY: msg was filled by recvmmsg into the worker's control buffer, alive meanwhile.
    for (level, ty, data) in unsafe { control_messages(msg) } {
        if level != libc::SOL_SOCKET || ty != libc::SCM_TIMESTAMPING {
            continue;
        }
        let Some(ts) = cmsg_value::<[libc::timespec; 3]>(data) else {
            continue;
        };
        // the software stamp is CLOCK_REALTIME, the transmit time's clock; the NIC's (raw
        // hardware) is its own clock: used only when it is the only one
        if ts[0].tv_sec != 0 || ts[0].tv_nsec != 0 {
            return Some((timespec_ns(ts[0]), crate::telemetry::RxClock::Software));
        }
        if ts[2].tv_sec != 0 || ts[2].tv_nsec != 0 {
            return Some((timespec_ns(ts[2]), crate::telemetry::RxClock::Hardware));
        }
    }
    None
}

/// Does this kernel take a transmit timestamp ID per message (`SCM_TS_OPT_ID`, Linux 6.13)?
/// Without it the worker cannot tell its answers' stamps from IDs the kernel counts (other
/// threads send from the socket too), and reads the send time instead. `XDNS_TEL_TX=read`
/// in the environment makes it do so anyway (benchmarks: bench/tel_errq.py).
fn tx_stamps_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        // for benchmarks: the send time read before `sendmmsg`, as without the error queue
        if std::env::var("XDNS_TEL_TX").is_ok_and(|v| v == "read") {
            return false;
        }
        // SAFETY: plain-data struct, zero is valid; uname fills it.
        let mut u: libc::utsname = unsafe { zeroed() };
        // SAFETY: valid pointer for the call.
        if unsafe { libc::uname(&mut u) } != 0 {
            return false;
        }
        let release: String = u.release.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect();
        kernel_at_least(&release, (6, 13))
    })
}

/// Is a kernel release string ("6.18.44-fc") at least `want` (major, minor)?
fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

/// Append to `buf`, after the `at` bytes of control messages already there, the request
/// for this message's transmit timestamp (software, and hardware where the NIC gives it)
/// with ID `id`; returns the new length (`at` when there is no room).
fn write_tx_stamp(buf: &mut [u64; CTRL_WORDS], at: usize, id: u32, opt_id_type: libc::c_int) -> usize {
    let flags = libc::SOF_TIMESTAMPING_TX_SOFTWARE | libc::SOF_TIMESTAMPING_TX_HARDWARE;
    let end = put_cmsg(buf, at, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags.to_ne_bytes());
    if end == at {
        return at;
    }
    let end2 = put_cmsg(buf, end, libc::SOL_SOCKET, opt_id_type, &id.to_ne_bytes());
    if end2 == end {
        return at;
    }
    end2
}

/// Write one control message at byte `at` of `buf` (aligned: a sum of CMSG_SPACEs);
/// returns the offset after it (`at` when it does not fit).
fn put_cmsg(buf: &mut [u64; CTRL_WORDS], at: usize, level: libc::c_int, ty: libc::c_int, data: &[u8]) -> usize {
    // SAFETY: pure arithmetic on a length.
    let (space, len, head) = unsafe { (libc::CMSG_SPACE(data.len() as u32) as usize, libc::CMSG_LEN(data.len() as u32) as usize, libc::CMSG_LEN(0) as usize) };
    if at + space > CTRL_WORDS * 8 {
        return at;
    }
    // SAFETY: plain-data struct, zero is valid.
    let mut h: libc::cmsghdr = unsafe { zeroed() };
    h.cmsg_len = len as _;
    h.cmsg_level = level;
    h.cmsg_type = ty;
    let base = buf.as_mut_ptr() as *mut u8;
    // SAFETY: at + space <= the buffer's size, checked above; writes are unaligned-safe.
    unsafe {
        std::ptr::write_bytes(base.add(at), 0, space);
        std::ptr::write_unaligned(base.add(at) as *mut libc::cmsghdr, h);
        std::ptr::copy_nonoverlapping(data.as_ptr(), base.add(at + head), data.len());
    }
    at + space
}

/// A transmit timestamp read from the error queue: its ID and the software and raw hardware
/// times (ns; 0: absent). `None` for anything else (an ICMP error, a stamp of another kind).
fn tx_timestamp(msg: &libc::msghdr) -> Option<(u32, u64, u64)> {
    let (mut times, mut id) = (None, None);
    // SAFETY: msg was filled by recvmmsg (or a test) into a control buffer alive meanwhile.
    for (level, ty, data) in unsafe { control_messages(msg) } {
        if level == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPING {
            if let Some(ts) = cmsg_value::<[libc::timespec; 3]>(data) {
                times = Some((timespec_ns(ts[0]), timespec_ns(ts[2])));
            }
        } else if (level == libc::SOL_IP && ty == libc::IP_RECVERR) || (level == libc::SOL_IPV6 && ty == libc::IPV6_RECVERR) {
            if let Some(e) = cmsg_value::<libc::sock_extended_err>(data) {
                if e.ee_errno == libc::ENOMSG as u32 && e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING && e.ee_info == SCM_TSTAMP_SND {
                    id = Some(e.ee_data);
                }
            }
        }
    }
    let (sw, hw) = times?;
    Some((id?, sw, hw))
}

fn read_pktinfo(msg: &libc::msghdr) -> Pktinfo {
    // SAFETY: msg was filled by recvmmsg (or a test) into a control buffer alive meanwhile.
    for (level, ty, data) in unsafe { control_messages(msg) } {
        if level == libc::IPPROTO_IP && ty == libc::IP_PKTINFO {
            if let Some(p) = cmsg_value::<libc::in_pktinfo>(data) {
                return Pktinfo::V4(p);
            }
        }
        if level == libc::IPPROTO_IPV6 && ty == libc::IPV6_PKTINFO {
            if let Some(p) = cmsg_value::<libc::in6_pktinfo>(data) {
                return Pktinfo::V6(p);
            }
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

    /// Control messages of `buf[..len]`: (level, type, data).
    fn cmsgs(buf: &mut [u64], len: usize) -> Vec<(i32, i32, Vec<u8>)> {
        // SAFETY: plain-data struct, zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_control = buf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = len;
        // SAFETY: the control buffer is `buf`, of at least `len` bytes, alive for the walk.
        unsafe { control_messages(&msg) }.map(|(l, t, d)| (l, t, d.to_vec())).collect()
    }

    /// A control message longer than the buffer that holds it (a receive cut short,
    /// MSG_CTRUNC) is not read, nor a value longer than its message's data.
    #[test]
    fn control_messages_cut_short_are_not_read() {
        let mut buf = [0u64; CTRL_WORDS];
        // SAFETY: plain-data struct, zero is valid.
        let mut p: libc::in_pktinfo = unsafe { zeroed() };
        p.ipi_addr.s_addr = u32::from_ne_bytes([198, 18, 0, 7]);
        let len = write_pktinfo(&mut buf, Pktinfo::V4(p));
        // SAFETY: plain-data struct, zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_control = buf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = len;
        assert!(matches!(read_pktinfo(&msg), Pktinfo::V4(q) if q.ipi_addr.s_addr == p.ipi_addr.s_addr), "whole: read");
        // SAFETY: CMSG_LEN is arithmetic.
        let whole = unsafe { libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) } as usize;
        msg.msg_controllen = whole - 4;
        assert!(cmsgs(&mut buf, whole - 4).is_empty(), "a header claiming more than the buffer ends the walk");
        assert!(matches!(read_pktinfo(&msg), Pktinfo::None), "cut short: not read");
        // a header whose own length leaves the struct 4 bytes short
        msg.msg_controllen = len;
        // SAFETY: the buffer holds this header at its start (write_pktinfo put it there).
        unsafe { (*(buf.as_mut_ptr() as *mut libc::cmsghdr)).cmsg_len = whole - 4 };
        assert_eq!(cmsgs(&mut buf, len).len(), 1, "the message itself is whole");
        assert!(matches!(read_pktinfo(&msg), Pktinfo::None), "its data is too short for an in_pktinfo");
    }

    /// A timed answer asks for its transmit stamp after its pktinfo: flags, then its ID.
    #[test]
    fn transmit_stamp_request_follows_the_pktinfo() {
        // SAFETY: plain-data struct, zero is valid.
        let v6: libc::in6_pktinfo = unsafe { zeroed() };
        let mut buf = [0u64; CTRL_WORDS];
        let p = write_pktinfo(&mut buf, Pktinfo::V6(v6));
        let len = write_tx_stamp(&mut buf, p, 0x01020304, SCM_TS_OPT_ID);
        assert!(len > p && len <= CTRL_WORDS * 8);
        let c = cmsgs(&mut buf, len);
        let flags = libc::SOF_TIMESTAMPING_TX_SOFTWARE | libc::SOF_TIMESTAMPING_TX_HARDWARE;
        assert_eq!(c.len(), 3, "{c:?}");
        assert_eq!((c[0].0, c[0].1), (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO));
        assert_eq!(c[1], (libc::SOL_SOCKET, libc::SO_TIMESTAMPING, flags.to_ne_bytes().to_vec()));
        assert_eq!(c[2], (libc::SOL_SOCKET, SCM_TS_OPT_ID, 0x01020304u32.to_ne_bytes().to_vec()));
        // alone (a specific listen address: no pktinfo)
        let mut buf = [0u64; CTRL_WORDS];
        let len = write_tx_stamp(&mut buf, 0, 7, SCM_TS_OPT_ID);
        assert_eq!(cmsgs(&mut buf, len).len(), 2);
        // no room: nothing appended
        assert_eq!(write_tx_stamp(&mut buf, CTRL_WORDS * 8 - 24, 7, SCM_TS_OPT_ID), CTRL_WORDS * 8 - 24);
    }

    /// An error-queue message: its timestamps and extended error read back; an ICMP error
    /// or a stamp without its ID is not a transmit stamp.
    #[test]
    fn transmit_stamp_read_from_an_error_queue_message() {
        let ts = |s: i64, n: i64| libc::timespec { tv_sec: s, tv_nsec: n };
        let stamp: [libc::timespec; 3] = [ts(5, 7), ts(0, 0), ts(9, 11)];
        // SAFETY: plain-data struct, zero is valid.
        let mut e: libc::sock_extended_err = unsafe { zeroed() };
        e.ee_errno = libc::ENOMSG as u32;
        e.ee_origin = libc::SO_EE_ORIGIN_TIMESTAMPING;
        e.ee_info = SCM_TSTAMP_SND;
        e.ee_data = 42;
        let bytes = |p: *const u8, n: usize| unsafe { std::slice::from_raw_parts(p, n).to_vec() };
        let ts_bytes = bytes(stamp.as_ptr() as *const u8, size_of::<[libc::timespec; 3]>());
        let read = |e: libc::sock_extended_err, level: i32, ty: i32, with_ts: bool| {
            let mut buf = [0u64; CTRL_WORDS];
            let mut at = 0;
            if with_ts {
                at = put_cmsg(&mut buf, at, libc::SOL_SOCKET, libc::SCM_TIMESTAMPING, &ts_bytes);
            }
            at = put_cmsg(&mut buf, at, level, ty, &bytes(&e as *const _ as *const u8, size_of::<libc::sock_extended_err>()));
            // SAFETY: plain-data struct, zero is valid.
            let mut msg: libc::msghdr = unsafe { zeroed() };
            msg.msg_control = buf.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = at;
            tx_timestamp(&msg)
        };
        let want = Some((42, 5_000_000_007, 9_000_000_011));
        assert_eq!(read(e, libc::SOL_IP, libc::IP_RECVERR, true), want);
        assert_eq!(read(e, libc::SOL_IPV6, libc::IPV6_RECVERR, true), want);
        assert_eq!(read(e, libc::SOL_IP, libc::IP_RECVERR, false), None, "no timestamp");
        let mut icmp = e;
        icmp.ee_errno = libc::ECONNREFUSED as u32;
        icmp.ee_origin = libc::SO_EE_ORIGIN_ICMP;
        assert_eq!(read(icmp, libc::SOL_IP, libc::IP_RECVERR, true), None);
        let mut sched = e;
        sched.ee_info = 1; // SCM_TSTAMP_SCHED
        assert_eq!(read(sched, libc::SOL_IP, libc::IP_RECVERR, true), None);
    }

    #[test]
    fn kernel_release_compared() {
        assert!(kernel_at_least("6.18.44-fc-v669", (6, 13)));
        assert!(kernel_at_least("6.13.0", (6, 13)));
        assert!(kernel_at_least("7.0.1", (6, 13)));
        assert!(!kernel_at_least("6.12.9-generic", (6, 13)));
        assert!(!kernel_at_least("5.15.0", (6, 13)));
        assert!(!kernel_at_least("garbage", (6, 13)));
    }

    /// This kernel's release (`uname -r`).
    fn release() -> String {
        // SAFETY: plain-data struct, zero is valid; uname fills it.
        let mut u: libc::utsname = unsafe { zeroed() };
        // SAFETY: valid pointer for the call.
        assert_eq!(unsafe { libc::uname(&mut u) }, 0);
        u.release.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect()
    }

    /// What a worker's transmit clocks came to: tx_software, tx_hardware, tx_read, tx_lost
    /// and the userspace-authoritative histogram's count.
    fn tx_counts(tel: &crate::telemetry::Telemetry) -> ([u64; 4], u64) {
        let mut s = crate::stats::Snapshot::default();
        tel.snapshot(&mut s);
        let v = &s.groups["telemetry"].values;
        ([v["tx_software"], v["tx_hardware"], v["tx_read"], v["tx_lost"]], s.latency["user_auth"].count)
    }

    /// A worker on a loopback socket, its stamps set as `run` sets them while a rule selects
    /// its answers (after `prepare` chose how the worker asks for the ID), and a peer.
    fn stamping_worker(prepare: impl FnOnce(&mut Worker)) -> (Worker, std::net::UdpSocket, std::net::UdpSocket, crate::telemetry::Telemetry) {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tel = crate::telemetry::Telemetry::default();
        let mut w = Worker::new(false, 4);
        prepare(&mut w);
        w.set_stamps(sock.as_raw_fd(), true, &tel);
        assert!(w.stamps, "receive stamps on");
        (w, sock, peer, tel)
    }

    /// One batch through the worker's own `send`: four answers to `peer`, the first not timed
    /// (as an answer no rule selects), the other three timed; every one arrives.
    fn send_batch_of_four(w: &mut Worker, sock: &std::net::UdpSocket, peer: &std::net::UdpSocket, tel: &crate::telemetry::Telemetry) {
        let stats = crate::stats::Stats::new();
        let shard = stats.shard();
        let SocketAddr::V4(to) = peer.local_addr().unwrap() else { unreachable!("bound to 127.0.0.1") };
        // SAFETY: plain-data struct, zero is valid.
        let mut sin: libc::sockaddr_in = unsafe { zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = to.port().to_be();
        sin.sin_addr.s_addr = u32::from(*to.ip()).to_be();
        let now = crate::telemetry::realtime_ns();
        let t = crate::telemetry::Timed { path: crate::telemetry::USER_AUTH, rx: now, clock: crate::telemetry::RxClock::Software, probe: None, limit: 512 };
        for j in 0..4 {
            // SAFETY: a sockaddr_in fits in a sockaddr_storage; both plain data.
            unsafe { std::ptr::write_unaligned(&mut w.names[j] as *mut _ as *mut libc::sockaddr_in, sin) };
            w.rx_hdr[j].msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            w.tx[j].clear();
            w.tx[j].extend_from_slice(b"answer");
            w.tx_to[j] = (j, Pktinfo::None);
            w.tx_timed[j] = (j > 0).then_some((t, now));
        }
        w.send(sock.as_raw_fd(), 4, &shard, tel);
        let mut got = [0u8; 16];
        for _ in 0..4 {
            assert_eq!(peer.recv(&mut got).unwrap(), 6, "every answer arrived");
        }
        assert_eq!(stats.snapshot().dropped.values().sum::<u64>(), 0, "none failed");
    }

    /// The worker's own path on a loopback socket, on whichever kernel runs the test: from
    /// Linux 6.13 (`SCM_TS_OPT_ID`) the timed answers go out with their IDs and take the
    /// stamps read back from the error queue (software clock); before it, the documented
    /// fallback: no ID asked for, the send time read before `sendmmsg` (`tx_read`). The
    /// fallback runs here on every kernel too, as a worker that found no ID support (what
    /// `tx_stamps_supported` says before 6.13, and with `XDNS_TEL_TX=read`). Either way the
    /// untimed answer takes nothing and a waiting answer whose stamp never comes is counted
    /// lost once waited for long enough.
    #[test]
    fn transmit_stamps_from_the_error_queue_of_a_socket() {
        let ids = kernel_at_least(&release(), (6, 13));
        assert_eq!(tx_stamps_supported(), ids, "the worker's choice follows the kernel ({})", release());
        for (ids_ok, how) in [(ids, "as this kernel allows"), (false, "as before 6.13")] {
            let (mut w, sock, peer, tel) = stamping_worker(|w| w.tx_ids_ok = ids_ok);
            assert_eq!(w.tx_errq, ids_ok, "{how}");
            // one waiting whose stamp will never come (sent long ago, never asked for)
            let long_ago = crate::telemetry::realtime_ns() - crate::telemetry::TxStamps::PATIENCE_NS;
            let t = crate::telemetry::Timed { path: crate::telemetry::USER_AUTH, rx: long_ago, clock: crate::telemetry::RxClock::Software, probe: None, limit: 512 };
            let ghost = w.waiting.next_id();
            w.waiting.sent(&tel, ghost, t, long_ago);
            send_batch_of_four(&mut w, &sock, &peer, &tel);
            assert_eq!(w.tx_errq, ids_ok, "{how}: no refusal on the way");
            // an idle worker that asked for stamps reads the queue after sending: the stamps
            // matched, the ghost counted lost; without IDs nothing was asked for, nothing read
            assert_eq!((w.waiting.waiting(), w.unread), (usize::from(!ids_ok), 0), "{how}");
            w.read_errq(sock.as_raw_fd(), &tel);
            let want = if ids_ok { [3, 0, 0, 1] } else { [0, 0, 3, 1] };
            assert_eq!((w.waiting.waiting(), tx_counts(&tel)), (0, (want, 4)), "{how}, kernel {}", release());
            // nothing more in the queue: the untimed answer asked for nothing
            w.read_errq(sock.as_raw_fd(), &tel);
            assert_eq!(tx_counts(&tel), (want, 4), "{how}");
        }
    }

    /// A busy worker (its last receive filled the batch) reads the error queue only once
    /// [`ERRQ_EVERY`] timed answers went out since the last read, and matches them then.
    #[test]
    fn a_busy_worker_reads_the_error_queue_every_few_batches() {
        let ids = kernel_at_least(&release(), (6, 13));
        let (mut w, sock, peer, tel) = stamping_worker(|_| {});
        w.idle = false;
        let batches = ERRQ_EVERY / 3 + 1;
        for b in 1..=batches {
            send_batch_of_four(&mut w, &sock, &peer, &tel);
            let sent = 3 * b as u64;
            match (ids, 3 * b >= ERRQ_EVERY) {
                // before 6.13: nothing ever waits, each answer read its send time
                (false, _) => assert_eq!((w.waiting.waiting(), tx_counts(&tel)), (0, ([0, 0, sent, 0], sent))),
                (true, false) => assert_eq!((w.waiting.waiting(), w.unread, tx_counts(&tel).1), (3 * b, 3 * b, 0)),
                (true, true) => assert_eq!((w.waiting.waiting(), w.unread, tx_counts(&tel)), (0, 0, ([sent, 0, 0, 0], sent))),
            }
        }
    }

    /// A kernel that refuses the ID's control message (`sendmmsg` fails with EINVAL, as
    /// Linux before 6.13 does with `SCM_TS_OPT_ID`): the batch still goes out, its timed
    /// answers take the send time read before sending (`tx_read`), none waits, and the
    /// worker stops asking. Forced here with a control message type no kernel knows, so
    /// that the fallback runs on every kernel; `SCM_TS_OPT_ID` itself is refused exactly
    /// where the kernel is older than 6.13.
    #[test]
    fn transmit_stamp_ids_refused_fall_back_to_the_send_time() {
        let ids = kernel_at_least(&release(), (6, 13));
        for (ty, refused) in [(0x7ff0, true), (SCM_TS_OPT_ID, !ids)] {
            let (mut w, sock, peer, tel) = stamping_worker(|w| {
                w.tx_ids_ok = true;
                w.opt_id_type = ty;
            });
            assert!(w.tx_errq, "asked for the ID ({ty})");
            send_batch_of_four(&mut w, &sock, &peer, &tel);
            let want = if refused { [0, 0, 3, 0] } else { [3, 0, 0, 0] };
            assert_eq!(tx_counts(&tel), (want, 3), "type {ty}, kernel {}", release());
            assert_eq!((w.tx_errq, w.tx_ids_ok, w.waiting.waiting()), (!refused, !refused, 0), "type {ty}");
            // the next batch asks for nothing more when refused
            send_batch_of_four(&mut w, &sock, &peer, &tel);
            let want = if refused { [0, 0, 6, 0] } else { [6, 0, 0, 0] };
            assert_eq!(tx_counts(&tel), (want, 6), "type {ty}");
            // stamps turned off and on again: a refusal is remembered
            w.set_stamps(sock.as_raw_fd(), false, &tel);
            w.set_stamps(sock.as_raw_fd(), true, &tel);
            assert_eq!(w.tx_errq, !refused, "type {ty}");
        }
    }

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
