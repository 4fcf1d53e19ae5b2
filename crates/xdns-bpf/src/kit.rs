//! Kernel iteration (issue 32; `bpf/kit.h`, bpf/README.md "Kernel iteration"): the zone map
//! userspace writes (delegations and the root), the pending queries the kernel sent, which
//! userspace claims, and the counters.
//!
//! The kernel keys a zone cut by the seeded hash of its lowercased wire name ([`crate::hash`],
//! the same function as `bpf/hash.h`), and checks the name's length; the pending map by
//! (server, our port, ID). Claiming a pending entry is deleting it: whoever deletes it (the
//! handover of a response, the daemon's timer) answers the client, so a client is answered
//! once.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::types::{xdns_kit_ctl, xdns_kit_hop, xdns_kit_hop_key, xdns_kit_pend, xdns_kit_pend_key, xdns_kit_scratch, xdns_kit_zone, xdns_kit_zone_key};

/// Server addresses per family the kernel keeps per cut (`XDNS_KIT_ADDRS`).
pub const ADDRS: usize = 4;

/// Handover reasons, in the order of `enum xdns_kit_handover` (the counter names).
pub const HANDOVER: [&str; 7] = ["no_walk", "no_zone", "family", "layout", "pending_full", "fib", "rewrite"];

/// Load-time settings of kernel iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KitStage {
    /// The reserved source ports (inclusive), at most 2^15 of them.
    pub ports: (u16, u16),
    /// Queries the kernel may have outstanding (`xdns_kit_pending`'s size).
    pub pending: u32,
    /// Zone cuts the kernel may know (`xdns_kit_zones`' size).
    pub zones: u32,
}

impl Default for KitStage {
    fn default() -> Self {
        Self { ports: (61000, 61255), pending: 16384, zones: 4096 }
    }
}

/// A zone cut as the kernel keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KitZone {
    /// The zone's wire name (lowercased when written).
    pub name: Vec<u8>,
    /// Its servers' addresses (the first [`ADDRS`] of each family are kept).
    pub addrs: Vec<IpAddr>,
    /// CLOCK_MONOTONIC nanoseconds at which the kernel stops using it (`u64::MAX`: never).
    pub expires_ns: u64,
}

/// A query the kernel sent for a client, claimed by userspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KitPending {
    /// The client's address and port.
    pub client: SocketAddr,
    /// The address the client asked (ours).
    pub local: IpAddr,
    /// The client's ID (as it sent it) and header flags.
    pub id: u16,
    pub flags: u16,
    /// The question: the name as the client sent it, and its type.
    pub qname: Vec<u8>,
    pub qtype: u16,
    /// The client's EDNS payload size (`None`: no EDNS) and DO bit.
    pub payload: Option<u16>,
    pub dnssec_ok: bool,
    /// The name as sent to the server (its 0x20 case).
    pub sent_name: Vec<u8>,
    /// CLOCK_MONOTONIC nanoseconds when the kernel sent it.
    pub sent_ns: u64,
    /// The cut asked: its key in `xdns_kit_zones` and its name's wire length (the name is
    /// the suffix of that length of the question name: [`KitMaps::zone_of`]).
    pub zone_hash: u64,
    pub zone_len: u8,
    /// Queries the kernel sent for this question (1: the first).
    pub hops: u8,
}

/// The counters of kernel iteration, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KitCounters {
    /// Misses handed over untouched, by [`HANDOVER`] reason.
    pub handover: [u64; 7],
    /// Queries sent by the kernel.
    pub sent: u64,
    /// Responses that passed every check.
    pub responses: u64,
    /// Referrals followed in the kernel (next queries it sent).
    pub hops: u64,
    /// Cuts the kernel wrote into the zone map from referrals it followed.
    pub learnt: u64,
    /// Final responses handed over through the ring buffer (`kit_handed`).
    pub handed: u64,
    /// ... that found the ring full (passed to the reserved port's socket instead).
    pub ring_full: u64,
    /// Final answers of the common shape the kernel answered itself (`kit_answered`,
    /// `kit_answered_redirected`; handed over too, marked answered, for the cache).
    pub answered: u64,
    /// Next hops taken from the daemon's table `xdns_kit_hops` when `bpf_fib_lookup` gave
    /// none (forwarding off on the interface).
    pub hop_table: u64,
    /// ... not found there either (no entry or an expired one: the query is handed over
    /// with `fib`, a referral passed with `pass_kit_no_hop`). The kernel's answer to a client
    /// asks for no next hop: it goes back the way the query came.
    pub hop_miss: u64,
}

/// A server's next hop as the kernel keeps it (`struct xdns_kit_hop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KitHop {
    /// The route's out interface.
    pub ifindex: u32,
    /// Its MAC (the frame's source).
    pub smac: [u8; 6],
    /// The next hop's MAC: the gateway's, or the server's when on-link (the frame's destination).
    pub dmac: [u8; 6],
    /// CLOCK_MONOTONIC nanoseconds after which the kernel ignores it.
    pub expires_ns: u64,
}

/// A response the kernel checked and handed over through the ring buffer `xdns_kit_events`,
/// with the pending entry it answers, which the kernel claimed (deleted) already: whoever
/// reads it answers the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KitEvent {
    /// The entry, as when the kernel claimed it.
    pub pending: KitPending,
    /// The server asked (the response's source, port 53).
    pub server: IpAddr,
    /// Our port and the ID sent (the response's destination port and ID).
    pub port: u16,
    pub id: u16,
    /// The DNS message as received.
    pub msg: Vec<u8>,
    /// The kernel answered the client itself (`XDNS_KIT_EV_ANSWERED`): userspace caches the
    /// response as it would its own, and never answers.
    pub answered: bool,
}

impl KitEvent {
    /// A record of `xdns_kit_events`; `None` when it is not one.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let off = std::mem::size_of::<KitEventHead>();
        if b.len() < off {
            return None;
        }
        let head: KitEventHead = from_bytes(&b[..off]).ok()?;
        let len = head.len as usize;
        if len < 12 || b.len() < off + len {
            return None;
        }
        Some(Self {
            pending: KitPending::of(&head.pend),
            server: addr_of(head.key.family, &head.key.server),
            port: u16::from_be(head.key.port),
            id: u16::from_be(head.key.id),
            msg: b[off..off + len].to_vec(),
            answered: head.flags & EV_ANSWERED != 0,
        })
    }
}

/// `struct xdns_kit_event` up to its message (bpf/xdns_abi.h asserts the message follows
/// these fields with no padding; the skeleton has no type for a ring buffer's records).
#[derive(Default)]
#[repr(C)]
struct KitEventHead {
    key: xdns_kit_pend_key,
    pend: xdns_kit_pend,
    len: u32,
    flags: u32,
}

/// `xdns_kit_event.flags`: the kernel answered the client (`XDNS_KIT_EV_ANSWERED`).
const EV_ANSWERED: u32 = 1;
const _: () = assert!(std::mem::size_of::<KitEventHead>() == std::mem::size_of::<xdns_kit_pend_key>() + std::mem::size_of::<xdns_kit_pend>() + 8);

fn bytes_of<T>(v: &T) -> &[u8] {
    // SAFETY: the ABI types are plain old data with explicit padding (xdns_abi.h).
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

fn from_bytes<T: Default>(b: &[u8]) -> Result<T> {
    if b.len() < std::mem::size_of::<T>() {
        bail!("map value shorter than its type");
    }
    // SAFETY: `b` holds at least size_of::<T>() bytes of a value of T written by the kernel
    // (plain old data: every bit pattern is valid).
    Ok(unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) })
}

/// The pending map's key for (server, our port, ID).
pub fn pend_key(server: IpAddr, port: u16, id: u16) -> xdns_kit_pend_key {
    let mut k = xdns_kit_pend_key::default();
    match server {
        IpAddr::V4(a) => {
            k.server[..4].copy_from_slice(&a.octets());
            k.family = 4;
        }
        IpAddr::V6(a) => {
            k.server.copy_from_slice(&a.octets());
            k.family = 6;
        }
    }
    k.port = port.to_be();
    k.id = id.to_be();
    k
}

fn addr_of(family: u8, b: &[u8; 16]) -> IpAddr {
    if family == 6 {
        IpAddr::V6(Ipv6Addr::from(*b))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

impl KitPending {
    fn of(v: &xdns_kit_pend) -> Self {
        let q = usize::from(v.qlen).min(255);
        Self {
            client: SocketAddr::new(addr_of(v.family, &v.client), u16::from_be(v.cport)),
            local: addr_of(v.family, &v.local),
            id: u16::from_be(v.cid),
            flags: v.cflags,
            qname: v.cname[..q].to_vec(),
            qtype: v.qtype,
            payload: (v.payload != 0).then_some(v.payload),
            dnssec_ok: v.do_bit != 0,
            sent_name: v.qname[..q].to_vec(),
            sent_ns: v.sent_ns,
            zone_hash: v.zone_hash,
            zone_len: v.zone_len,
            hops: v.hops,
        }
    }
}

/// The key of a pending query: the server asked, our port, the ID sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PendKey {
    pub server: IpAddr,
    pub port: u16,
    pub id: u16,
}

/// The TTL caps of the kernel's own answers ([`KitMaps::set_answers`]): the resolver cache's,
/// so that a kernel answer and a later cache hit carry the same TTLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerCaps {
    /// `[resolver] max_ttl`: every TTL of a data answer capped to it.
    pub max_ttl: u32,
    /// `[resolver] max_negative_ttl`: the negative TTL of an NXDOMAIN or NODATA answer's SOA
    /// capped to it; `None`: negative answers are handed to userspace to answer.
    pub max_negative_ttl: Option<u32>,
}

/// Kernel iteration's maps, on duplicated fds.
pub struct KitMaps {
    zones: MapHandle,
    pending: MapHandle,
    scratch: MapHandle,
    events: MapHandle,
    ctl: MapHandle,
    hops: MapHandle,
    seed: u64,
}

fn hop_key(addr: IpAddr) -> xdns_kit_hop_key {
    let mut k = xdns_kit_hop_key::default();
    match addr {
        IpAddr::V4(a) => {
            k.family = 4;
            k.addr[..4].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            k.family = 6;
            k.addr.copy_from_slice(&a.octets());
        }
    }
    k
}

impl KitMaps {
    pub(crate) fn new(zones: MapHandle, pending: MapHandle, scratch: MapHandle, events: MapHandle, ctl: MapHandle, hops: MapHandle, seed: u64) -> Self {
        Self { zones, pending, scratch, events, ctl, hops, seed }
    }

    /// Write (or replace) the next hop of server `addr` in `xdns_kit_hops`.
    pub fn set_hop(&self, addr: IpAddr, h: &KitHop) -> Result<()> {
        let v = xdns_kit_hop { expires_ns: h.expires_ns, ifindex: h.ifindex, smac: h.smac, dmac: h.dmac };
        self.hops.update(bytes_of(&hop_key(addr)), bytes_of(&v), MapFlags::ANY).context("writing a next hop")
    }

    /// Forget the next hop of `addr` (absent: nothing to do).
    pub fn remove_hop(&self, addr: IpAddr) -> Result<()> {
        match self.hops.delete(bytes_of(&hop_key(addr))) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).context("deleting a next hop"),
        }
    }

    /// The next hop of `addr` as the kernel would find it; `None` when absent.
    pub fn hop(&self, addr: IpAddr) -> Result<Option<KitHop>> {
        let Some(v) = self.hops.lookup(bytes_of(&hop_key(addr)), MapFlags::ANY)? else { return Ok(None) };
        let v: xdns_kit_hop = from_bytes(&v)?;
        Ok(Some(KitHop { ifindex: v.ifindex, smac: v.smac, dmac: v.dmac, expires_ns: v.expires_ns }))
    }

    /// Every server address the zone map names (each cut's servers, the root's and the
    /// cuts the kernel learnt included), read in batches.
    pub fn zone_servers(&self) -> Result<Vec<IpAddr>> {
        let mut out = Vec::new();
        let mut vals: Vec<Vec<u8>> = self.zones.lookup_batch(1024, MapFlags::ANY, MapFlags::ANY)?.map(|(_, v)| v).collect();
        if vals.is_empty() && self.zones.keys().next().is_some() {
            vals = self.zones.keys().filter_map(|k| self.zones.lookup(&k, MapFlags::ANY).ok().flatten()).collect();
        }
        for v in vals {
            out.extend(zone_of_value(&from_bytes(&v)?).addrs);
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// The kernel's own answers (`xdns_kit_ctl`): `Some(caps)` turns them on with the TTL caps
    /// the resolver's cache applies (its `max_ttl`, and its `max_negative_ttl` for negative
    /// answers, which `caps.max_negative_ttl: None` leaves to userspace: written again
    /// whenever they change, or the kernel's first answers and the cache's would differ);
    /// `None` turns them off (every final response handed over for userspace to answer, as
    /// before).
    pub fn set_answers(&self, caps: Option<AnswerCaps>) -> Result<()> {
        let v = match caps {
            None => xdns_kit_ctl::default(),
            Some(c) => xdns_kit_ctl {
                answer: 1,
                max_ttl: c.max_ttl,
                negative: u32::from(c.max_negative_ttl.is_some()),
                max_neg_ttl: c.max_negative_ttl.unwrap_or(0),
            },
        };
        self.ctl.update(&0u32.to_ne_bytes(), bytes_of(&v), MapFlags::ANY).context("writing xdns_kit_ctl")
    }

    /// Read the ring buffer `xdns_kit_events` until `stop` is set: every record to `f`, in
    /// batches (one wake-up for all the records waiting), then `batch_done` once per wake-up
    /// (also after a wait that found none), waiting at most `poll` between looks at `stop`.
    /// Runs on the caller's thread.
    pub fn read_events(
        &self,
        poll: std::time::Duration,
        stop: &std::sync::atomic::AtomicBool,
        mut f: impl FnMut(KitEvent),
        batch_done: impl FnMut(),
    ) -> Result<()> {
        let each = |rec: &[u8]| {
            if let Some(e) = KitEvent::parse(rec) {
                f(e);
            }
        };
        crate::ring::read(&self.events, "xdns_kit_events", poll, stop, each, batch_done)
    }

    /// Every record waiting in `xdns_kit_events` now (tests, and a stopping daemon).
    pub fn take_events(&self) -> Result<Vec<KitEvent>> {
        let mut out = Vec::new();
        {
            let mut b = libbpf_rs::RingBufferBuilder::new();
            b.add(&self.events, |rec: &[u8]| {
                if let Some(e) = KitEvent::parse(rec) {
                    out.push(e);
                }
                0
            })?;
            b.build()?.consume()?;
        }
        Ok(out)
    }

    fn zone_key(&self, name: &[u8]) -> xdns_kit_zone_key {
        xdns_kit_zone_key { hash: crate::hash::name_hash(self.seed, &name.to_ascii_lowercase()) }
    }

    /// Write (or replace) a cut. A name longer than 255 bytes or without an address is refused.
    pub fn set_zone(&self, z: &KitZone) -> Result<()> {
        if z.name.is_empty() || z.name.len() > 255 {
            bail!("zone name of {} bytes", z.name.len());
        }
        let mut v = xdns_kit_zone { expires_ns: z.expires_ns, name_len: z.name.len() as u8, ..Default::default() };
        let lower = z.name.to_ascii_lowercase();
        v.name[..lower.len()].copy_from_slice(&lower);
        v.labels = label_count(&lower);
        for a in &z.addrs {
            match a {
                IpAddr::V4(a) if usize::from(v.n4) < ADDRS => {
                    v.a4[usize::from(v.n4)] = a.octets();
                    v.n4 += 1;
                }
                IpAddr::V6(a) if usize::from(v.n6) < ADDRS => {
                    v.a6[usize::from(v.n6)] = a.octets();
                    v.n6 += 1;
                }
                _ => {}
            }
        }
        if v.n4 == 0 && v.n6 == 0 {
            bail!("a zone cut without a server address");
        }
        let k = self.zone_key(&z.name);
        self.zones.update(bytes_of(&k), bytes_of(&v), MapFlags::ANY).context("writing a zone cut")
    }

    /// The cut `p` was sent to ([`sent_zone`] with this program's seed).
    pub fn zone_of(&self, p: &KitPending) -> Option<Vec<u8>> {
        sent_zone(self.seed, p)
    }

    /// Forget a cut (absent: nothing to do).
    pub fn remove_zone(&self, name: &[u8]) -> Result<()> {
        let k = self.zone_key(name);
        match self.zones.delete(bytes_of(&k)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).context("deleting a zone cut"),
        }
    }

    /// The cuts the kernel knows: (lowercased name, addresses, expiry).
    pub fn zones(&self) -> Result<Vec<KitZone>> {
        let mut out = Vec::new();
        for k in self.zones.keys() {
            let Some(v) = self.zones.lookup(&k, MapFlags::ANY)? else { continue };
            out.push(zone_of_value(&from_bytes(&v)?));
        }
        Ok(out)
    }

    /// Claim the query sent to `server` from our `port` with `id`: read and delete its entry.
    /// `None`: no such query, or claimed already (then the caller must not answer).
    pub fn claim(&self, server: IpAddr, port: u16, id: u16) -> Result<Option<KitPending>> {
        self.claim_key(&pend_key(server, port, id))
    }

    /// One syscall (BPF_MAP_LOOKUP_AND_DELETE_ELEM): the value read is the one deleted, and
    /// only one of the claimers racing for it (the kernel's handover, the timer) gets it.
    fn claim_key(&self, k: &xdns_kit_pend_key) -> Result<Option<KitPending>> {
        match self.pending.lookup_and_delete(bytes_of(k)) {
            Ok(Some(v)) => Ok(Some(KitPending::of(&from_bytes(&v)?))),
            Ok(None) => Ok(None),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).context("claiming a pending query"),
        }
    }

    /// Claim every query sent at or before `before_ns` (CLOCK_MONOTONIC): the daemon's timer
    /// for servers that never answer. The entries are read in batches (a few syscalls per
    /// scan, not two per entry), then the stale ones claimed one by one.
    pub fn claim_older(&self, before_ns: u64) -> Result<Vec<KitPending>> {
        Ok(self.claim_stale(before_ns, |_| 0)?.into_iter().map(|(_, p)| p).collect())
    }

    /// Claim every query that has waited `wait_ns(server asked)` or more by `now_ns`
    /// (CLOCK_MONOTONIC), with the server each was sent to.
    pub fn claim_stale(&self, now_ns: u64, wait_ns: impl Fn(IpAddr) -> u64) -> Result<Vec<(IpAddr, KitPending)>> {
        let stale: Vec<PendKey> = self
            .entries()?
            .into_iter()
            .filter(|(k, p)| p.sent_ns.saturating_add(wait_ns(k.server)) <= now_ns)
            .map(|(k, _)| k)
            .collect();
        let mut out = Vec::new();
        for k in stale {
            if let Some(p) = self.claim(k.server, k.port, k.id)? {
                out.push((k.server, p));
            }
        }
        Ok(out)
    }

    /// Every query pending now, with its key, without claiming any: read in batches (a few
    /// syscalls per scan, not one per entry).
    pub fn entries(&self) -> Result<Vec<(PendKey, KitPending)>> {
        let of = |k: &[u8], v: &[u8]| -> Result<(PendKey, KitPending)> {
            let key: xdns_kit_pend_key = from_bytes(k)?;
            let p: xdns_kit_pend = from_bytes(v)?;
            Ok((PendKey { server: addr_of(key.family, &key.server), port: u16::from_be(key.port), id: u16::from_be(key.id) }, KitPending::of(&p)))
        };
        let mut out = Vec::new();
        for (k, v) in self.pending.lookup_batch(1024, MapFlags::ANY, MapFlags::ANY)? {
            out.push(of(&k, &v)?);
        }
        if out.is_empty() && self.pending.keys().next().is_some() {
            // the batch read gave nothing on a map that has entries: one by one
            for k in self.pending.keys() {
                let Some(v) = self.pending.lookup(&k, MapFlags::ANY)? else { continue };
                out.push(of(&k, &v)?);
            }
        }
        Ok(out)
    }

    /// The cut `name` as the kernel knows it now (written by userspace, or learnt by the
    /// kernel from a referral); `None` when absent (or a hash collision of another name).
    pub fn zone(&self, name: &[u8]) -> Result<Option<KitZone>> {
        let k = self.zone_key(name);
        let Some(v) = self.zones.lookup(bytes_of(&k), MapFlags::ANY)? else { return Ok(None) };
        let v: xdns_kit_zone = from_bytes(&v)?;
        let z = zone_of_value(&v);
        Ok(z.name.eq_ignore_ascii_case(name).then_some(z))
    }

    /// Pending entries now.
    pub fn pending_len(&self) -> usize {
        self.pending.keys().count()
    }

    /// The entry of the query sent to `server` from our `port` with `id`, as the kernel
    /// wrote it (hops, the cut asked), without claiming it.
    pub fn peek(&self, server: IpAddr, port: u16, id: u16) -> Result<Option<xdns_kit_pend>> {
        let k = pend_key(server, port, id);
        match self.pending.lookup(bytes_of(&k), MapFlags::ANY)? {
            Some(v) => Ok(Some(from_bytes(&v)?)),
            None => Ok(None),
        }
    }

    /// The counters, summed over CPUs.
    pub fn counters(&self) -> Result<KitCounters> {
        let mut c = KitCounters::default();
        let vals = self.scratch.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.context("no scratch value")?;
        for cpu in vals {
            let s: xdns_kit_scratch = from_bytes(&cpu)?;
            for (i, n) in c.handover.iter_mut().enumerate() {
                *n += s.handover[i];
            }
            c.sent += s.sent;
            c.responses += s.responses;
            c.hops += s.hops;
            c.learnt += s.learnt;
            c.handed += s.handed;
            c.ring_full += s.ring_full;
            c.answered += s.answered;
            c.hop_table += s.hop_table;
            c.hop_miss += s.hop_miss;
        }
        Ok(c)
    }
}

/// A cut as `xdns_kit_zones` holds it.
fn zone_of_value(v: &xdns_kit_zone) -> KitZone {
    let mut addrs: Vec<IpAddr> = v.a4[..usize::from(v.n4).min(ADDRS)].iter().map(|a| IpAddr::V4(Ipv4Addr::from(*a))).collect();
    addrs.extend(v.a6[..usize::from(v.n6).min(ADDRS)].iter().map(|a| IpAddr::V6(Ipv6Addr::from(*a))));
    KitZone { name: v.name[..usize::from(v.name_len).min(v.name.len())].to_vec(), addrs, expires_ns: v.expires_ns }
}

/// The cut `p` was sent to (lowercased wire name): the suffix of its question name of
/// `zone_len` bytes, at a label boundary, whose hash under `seed` is the one the kernel keyed
/// the cut by. `None` when there is no such suffix (the entry does not say which zone).
pub fn sent_zone(seed: u64, p: &KitPending) -> Option<Vec<u8>> {
    let name = p.sent_name.to_ascii_lowercase();
    let at = name.len().checked_sub(usize::from(p.zone_len))?;
    let mut i = 0usize;
    while i < at {
        i += 1 + usize::from(*name.get(i)?);
    }
    if i != at || p.zone_len == 0 {
        return None;
    }
    let zone = name[at..].to_vec();
    (crate::hash::name_hash(seed, &zone) == p.zone_hash).then_some(zone)
}

fn label_count(name: &[u8]) -> u8 {
    let (mut i, mut n) = (0usize, 0u8);
    while i < name.len() && name[i] != 0 {
        i += 1 + usize::from(name[i]);
        n = n.saturating_add(1);
    }
    n
}

/// The reserved range as written in the configuration (`"61000-61255"`): inclusive bounds,
/// both above 1023, at most 2^15 ports. The error says why not.
pub fn parse_ports(s: &str) -> std::result::Result<(u16, u16), String> {
    let (a, b) = s.trim().split_once('-').ok_or_else(|| format!("`{s}`: expected LOW-HIGH (e.g. 61000-61255)"))?;
    let lo: u16 = a.trim().parse().map_err(|_| format!("`{}`: not a port number", a.trim()))?;
    let hi: u16 = b.trim().parse().map_err(|_| format!("`{}`: not a port number", b.trim()))?;
    if lo < 1024 {
        return Err(format!("{lo}: reserved ports start at 1024 or above"));
    }
    if hi < lo {
        return Err(format!("{lo}-{hi}: the range is empty"));
    }
    if u32::from(hi) - u32::from(lo) + 1 > 1 << 15 {
        return Err(format!("{lo}-{hi}: at most 32768 ports"));
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        assert_eq!(parse_ports("61000-61255"), Ok((61000, 61255)));
        assert_eq!(parse_ports(" 2000 - 2000 "), Ok((2000, 2000)));
        for bad in ["61000", "53-100", "200-100", "x-2", "1024-40000", "70000-70001"] {
            assert!(parse_ports(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_zone_sent_to_is_a_suffix_with_its_hash() {
        let seed = 0x1234_5678_9abc_def0;
        let mut p = KitPending {
            client: "198.18.0.2:1".parse().unwrap(),
            local: "198.18.0.1".parse().unwrap(),
            id: 1,
            flags: 0,
            qname: b"\x03www\x07example\x03net\x00".to_vec(),
            qtype: 1,
            payload: None,
            dnssec_ok: false,
            sent_name: b"\x03wWw\x07ExaMple\x03NeT\x00".to_vec(),
            sent_ns: 0,
            zone_hash: crate::hash::name_hash(seed, b"\x07example\x03net\x00"),
            zone_len: 13,
            hops: 1,
        };
        assert_eq!(sent_zone(seed, &p), Some(b"\x07example\x03net\x00".to_vec()));
        p.zone_len = 1;
        assert_eq!(sent_zone(seed, &p), None, "the hash is another zone's");
        p.zone_hash = crate::hash::name_hash(seed, b"\x00");
        assert_eq!(sent_zone(seed, &p), Some(vec![0]));
        p.zone_len = 12; // not at a label boundary
        assert_eq!(sent_zone(seed, &p), None);
        p.zone_len = 200;
        assert_eq!(sent_zone(seed, &p), None);
    }

    #[test]
    fn labels() {
        assert_eq!(label_count(&[0]), 0);
        assert_eq!(label_count(b"\x07example\x03com\x00"), 2);
    }
}
