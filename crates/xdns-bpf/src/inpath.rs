//! The in-path cache's program (`bpf/inpath.bpf.c`, issue 26): a separate XDP program for a
//! host that forwards DNS traffic between clients and servers. It answers queries to the
//! configured server addresses from responses it saw those servers give to queries it
//! forwarded, and forwards everything else as the kernel would.
//!
//! - [`InpathSettings`]: what is fixed at load (servers, sizes, timeout, forwarding).
//! - [`InpathProgram`]: load (the verifier runs), attach with BPF links (closed with the
//!   process: a crash detaches), counters, entries, flush, expiry sweep, test runs.
//! - [`InpathView`]: what the daemon asks of a loaded program, a trait so that the daemon's
//!   bookkeeping (stats groups, flush replies) is tested without a kernel.
//!
//! After the load only file descriptors are kept (program, maps, links): the handle is `Send`
//! and `Sync`, and the skeleton's object is closed.

use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::runtime::AttachMode;

#[allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, unused_imports)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/inpath.skel.rs"));
}

include!(concat!(env!("OUT_DIR"), "/inpath_verdicts.rs"));

/// The ABI types of the in-path program (`bpf/xdns_abi.h`, from its BTF).
pub use skel::types;

/// Role bit: queries arrive on this interface and hits are answered there.
pub const ROLE_CLIENT: u32 = 1;
/// Role bit: the servers' responses arrive on this interface.
pub const ROLE_UPSTREAM: u32 = 2;
/// Role bit: frames arriving here are never redirected (native XDP on a veth: they may carry
/// partial checksums, which a redirect would send out unfinished). Set by [`InpathProgram::attach`].
pub const ROLE_NO_REDIRECT: u32 = 4;
/// Entries per set of the cache (`XDNS_INPATH_WAYS`).
pub const WAYS: u32 = 4;
/// Server prefixes compared inline by the program (`XDNS_INPATH_INLINE`); more go to its LPM trie.
pub const INLINE_SERVERS: usize = 8;
/// Interface indexes below this keep their role in the program's array (`XDNS_INPATH_ROLE_SLOTS`).
const ROLE_SLOTS: u32 = 1024;

/// Name of in-path verdict `v` (`"answered"`, `"reject_unsolicited"`, ...) as shown by stats
/// and metrics.
pub fn verdict_name(v: usize) -> Option<String> {
    let raw = INPATH_VERDICT_NAMES.get(v)?;
    Some(raw.trim_start_matches("XDNS_INPATH_").to_ascii_lowercase())
}

/// Load-time settings of the in-path program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InpathSettings {
    /// Server prefixes whose queries are cached (`addr/len`).
    pub servers: Vec<(IpAddr, u8)>,
    /// Seconds an entry lives at most.
    pub max_ttl: u32,
    /// Entries the cache holds (rounded up to a power of two of sets of [`WAYS`]).
    pub capacity: u32,
    /// Forwarded queries remembered at once: slots of a table indexed by a keyed hash of
    /// (client, server, port, ID), rounded up to a power of two; a newer query takes an older
    /// one's slot.
    pub pending: u32,
    /// A response later than this after its query is not learnt.
    pub timeout_ms: u32,
    /// Forward misses and responses with `bpf_fib_lookup` + `bpf_redirect` (else the
    /// kernel forwards them: `XDP_PASS`).
    pub redirect: bool,
}

impl Default for InpathSettings {
    fn default() -> Self {
        Self { servers: Vec::new(), max_ttl: 3600, capacity: 65536, pending: 65536, timeout_ms: 3000, redirect: false }
    }
}

impl InpathSettings {
    /// Sets of [`WAYS`] entries: `capacity / WAYS` rounded up to a power of two, at least 1.
    pub fn sets(&self) -> u32 {
        (self.capacity.div_ceil(WAYS)).max(1).next_power_of_two()
    }

    /// Slots of the pending table: `pending` rounded up to a power of two, at least 64.
    pub fn pending_slots(&self) -> u32 {
        self.pending.clamp(64, 1 << 24).next_power_of_two()
    }
}

/// Counters of the program, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InpathCounters {
    /// By verdict name, every verdict present.
    pub verdicts: Vec<(String, u64)>,
    /// Live entries replaced by another question (capacity pressure).
    pub evicted: u64,
    /// DNS packets forwarded by `bpf_redirect`.
    pub redirected: u64,
    /// DNS packets redirect would have forwarded, passed to the kernel instead (no complete
    /// FIB answer, or an interface not ours).
    pub fib_passed: u64,
    /// Answers whose frame had no tailroom left for the reply: grown at the head instead.
    pub head_grown: u64,
    /// Answers sent from the reply memo (whole replies kept per CPU for the exact query).
    pub reply_hits: u64,
    /// Replies written into the reply memo.
    pub reply_kept: u64,
}

/// Entries of the cache as counted by userspace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InpathEntries {
    /// Entries that still live.
    pub live: u64,
    /// Entries past their expiry, not yet swept.
    pub expired: u64,
    /// Most entries the map holds.
    pub capacity: u64,
    /// Bytes of one entry's value in the large class (`struct xdns_inpath_entry`).
    pub entry_bytes: u64,
    /// Bytes of one entry's value in the small class (`struct xdns_inpath_entry_s`).
    pub small_entry_bytes: u64,
    /// Entries held (live or expired) in the small class.
    pub small: u64,
    /// Entries held in the large class.
    pub large: u64,
    /// Memory of the entries held: each a hash map element (the value and 64 bytes of header,
    /// key and the allocator's link), allocated from the kernel's next power-of-two size
    /// ([`element_bytes`]).
    pub memory_bytes: u64,
}

/// Bytes the kernel allocates for one element of a hash map without preallocation whose
/// value has `value` bytes: the element's header and key (56) and the BPF allocator's link
/// (8) added, rounded up to kmalloc's size class (a power of two from 256 up; 96 and 192 below).
pub fn element_bytes(value: u64) -> u64 {
    let n = value.div_ceil(8) * 8 + 64;
    match n {
        0..=64 => n.next_power_of_two().max(8),
        65..=96 => 96,
        97..=128 => 128,
        129..=192 => 192,
        _ => n.next_power_of_two(),
    }
}

/// What the daemon asks of a loaded in-path program.
pub trait InpathView: Send + Sync {
    fn counters(&self) -> Result<InpathCounters>;
    fn entries(&self) -> Result<InpathEntries>;
    /// Forget every entry: how many were held.
    fn flush(&self) -> Result<usize>;
    /// Delete the expired entries: how many.
    fn sweep(&self) -> Result<usize>;
}

/// The loaded in-path program, its maps and links.
pub struct InpathProgram {
    prog: OwnedFd,
    cache: MapHandle,
    cache_s: MapHandle,
    scratch: MapHandle,
    ifaces: MapHandle,
    roles: MapHandle,
    pending: MapHandle,
    tags: MapHandle,
    links: Vec<(String, OwnedFd)>,
    capacity: u32,
    verified: u32,
    /// Where the sweep goes on in each class's map (small, large): a hash map's batch
    /// position; None: from the start.
    sweep_at: Mutex<[Option<[u8; 8]>; 2]>,
    /// Entries the sweep reads per map and call at most (SWEEP_BUDGET; tests lower it).
    sweep_budget: usize,
}

/// `CLOCK_MONOTONIC` in ns: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The LPM key of a prefix (IPv4 as `::ffff:a.b.c.d/96+len`).
fn prefix_key(addr: IpAddr, len: u8) -> Vec<u8> {
    let (bytes, plen) = match addr {
        IpAddr::V4(a) => (a.to_ipv6_mapped().octets(), 96 + u32::from(len.min(32))),
        IpAddr::V6(a) => (a.octets(), u32::from(len.min(128))),
    };
    let mut k = plen.to_ne_bytes().to_vec();
    k.extend_from_slice(&bytes);
    k
}

/// A prefix as the program compares it inline: (address masked, mask), each as two native
/// words of the 16-byte (IPv4-mapped) address.
fn inline_net(addr: IpAddr, len: u8) -> ([u64; 2], [u64; 2]) {
    let (bytes, plen) = match addr {
        IpAddr::V4(a) => (a.to_ipv6_mapped().octets(), 96 + u32::from(len.min(32))),
        IpAddr::V6(a) => (a.octets(), u32::from(len.min(128))),
    };
    let mask = if plen == 0 { 0u128 } else { u128::MAX << (128 - plen) }.to_be_bytes();
    let word = |b: &[u8; 16], i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let masked: [u8; 16] = std::array::from_fn(|i| bytes[i] & mask[i]);
    ([word(&masked, 0), word(&masked, 1)], [word(&mask, 0), word(&mask, 1)])
}

fn ifindex(ifname: &str) -> Result<u32> {
    crate::iface::ifindex(ifname).with_context(|| format!("no interface {ifname}"))
}

impl InpathProgram {
    /// Open, size and load the program (the verifier runs here), and fill its server list.
    pub fn load(s: &InpathSettings) -> Result<Self> {
        if s.servers.is_empty() {
            bail!("the in-path cache needs at least one server prefix");
        }
        if s.servers.len() > 256 {
            bail!("at most 256 server prefixes ({} given)", s.servers.len());
        }
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = skel::InpathSkelBuilder::default().open(storage).context("opening the in-path object")?;
        let sets = s.sets();
        {
            let ro = open.maps.rodata_data.as_deref_mut().context("rodata not mapped")?;
            let c = &mut ro.xdns_inpath_cfg;
            c.timeout_ns = u64::from(s.timeout_ms) * 1_000_000;
            c.set_mask = sets - 1;
            c.max_ttl = s.max_ttl;
            c.redirect = u8::from(s.redirect);
            c.pend_mask = s.pending_slots() - 1;
            c.seed = rand::random();
            // a short list is compared inline (no trie lookup per packet); a long one in the trie
            if s.servers.len() <= INLINE_SERVERS {
                c.nsrv = s.servers.len() as u8;
                for (slot, &(a, l)) in c.srv.iter_mut().zip(&s.servers) {
                    (slot.addr, slot.mask) = inline_net(a, l);
                }
            }
        }
        // any way may hold either class: each map as large as the cache (memory follows the entries)
        open.maps.xdns_inpath_cache.set_max_entries(sets * WAYS)?;
        open.maps.xdns_inpath_cache_s.set_max_entries(sets * WAYS)?;
        open.maps.xdns_inpath_tags.set_max_entries(sets)?;
        open.maps.xdns_inpath_pending.set_max_entries(s.pending_slots())?;
        // the reply memo: a run of slots for each possible CPU (bpf/inpath_maps.h)
        let cpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")? as u32;
        let slots = open.maps.xdns_inpath_replies.max_entries();
        open.maps.xdns_inpath_replies.set_max_entries(cpus * slots)?;
        let skel = open.load().context("loading the in-path XDP program (verifier)")?;
        let dup = |m: &libbpf_rs::Map<'_>| MapHandle::try_from(m).context("duplicating an in-path map handle");
        let prog_fd = skel.progs.xdns_inpath.as_fd().try_clone_to_owned().context("duplicating the program fd")?;
        let me = Self {
            cache: dup(&skel.maps.xdns_inpath_cache)?,
            cache_s: dup(&skel.maps.xdns_inpath_cache_s)?,
            scratch: dup(&skel.maps.xdns_inpath_scratch)?,
            ifaces: dup(&skel.maps.xdns_inpath_ifaces)?,
            roles: dup(&skel.maps.xdns_inpath_roles)?,
            pending: dup(&skel.maps.xdns_inpath_pending)?,
            tags: dup(&skel.maps.xdns_inpath_tags)?,
            prog: prog_fd,
            links: Vec::new(),
            capacity: sets * WAYS,
            verified: 0,
            sweep_at: Mutex::new([None; 2]),
            sweep_budget: SWEEP_BUDGET,
        };
        let servers = dup(&skel.maps.xdns_inpath_servers)?;
        for &(a, l) in &s.servers {
            servers.update(&prefix_key(a, l), &[1u8], MapFlags::ANY).context("writing a server prefix")?;
        }
        let info = crate::inpath::prog_info(me.prog.as_fd())?;
        Ok(Self { verified: info.verified_insns, ..me })
    }

    /// A second handle on the same program and maps, without the links (a reader: counters,
    /// entries, flush, sweep; dropping it detaches nothing).
    pub fn reader(&self) -> Result<Self> {
        let dup = |m: &MapHandle| MapHandle::try_from(m).context("duplicating an in-path map handle");
        Ok(Self {
            prog: self.prog.try_clone().context("duplicating the program fd")?,
            cache: dup(&self.cache)?,
            cache_s: dup(&self.cache_s)?,
            scratch: dup(&self.scratch)?,
            ifaces: dup(&self.ifaces)?,
            roles: dup(&self.roles)?,
            pending: dup(&self.pending)?,
            tags: dup(&self.tags)?,
            links: Vec::new(),
            capacity: self.capacity,
            verified: self.verified,
            sweep_at: Mutex::new([None; 2]),
            sweep_budget: self.sweep_budget,
        })
    }

    /// Instructions the verifier processed for this program.
    pub fn verified_insns(&self) -> u32 {
        self.verified
    }

    /// The program's id (as `ip link` and `bpftool` show it).
    pub fn prog_id(&self) -> Result<u32> {
        Ok(prog_info(self.prog.as_fd())?.id)
    }

    /// Give interface index `ifindex` the role bits `role` ([`ROLE_CLIENT`], [`ROLE_UPSTREAM`]);
    /// 0 removes it. (Tests give the loopback's index, that of BPF_PROG_TEST_RUN's packets.)
    pub fn set_role(&self, ifindex: u32, role: u32) -> Result<()> {
        if ifindex < ROLE_SLOTS {
            self.roles.update(&ifindex.to_ne_bytes(), &role.to_ne_bytes(), MapFlags::ANY)?;
            return Ok(());
        }
        if role == 0 {
            let _ = self.ifaces.delete(&ifindex.to_ne_bytes());
            return Ok(());
        }
        self.ifaces.update(&ifindex.to_ne_bytes(), &role.to_ne_bytes(), MapFlags::ANY)?;
        Ok(())
    }

    /// Attach to `ifname` with role bits `role`, with a BPF link (closed with the process).
    /// `Auto`: generic on a veth whose peer runs no native XDP program (native `XDP_TX` frames
    /// would be lost there, `crate::iface`), else the kernel's choice.
    pub fn attach(&mut self, ifname: &str, role: u32, mode: AttachMode) -> Result<&'static str> {
        let idx = ifindex(ifname)?;
        let peer = crate::iface::veth_peer(ifname);
        let (flags, name) = match mode {
            AttachMode::Native => (libbpf_sys::XDP_FLAGS_DRV_MODE, "native"),
            AttachMode::Generic => (libbpf_sys::XDP_FLAGS_SKB_MODE, "generic"),
            AttachMode::Auto => match &peer {
                Ok(p) if p.loses_native_tx() => (libbpf_sys::XDP_FLAGS_SKB_MODE, "generic"),
                _ => (0, "auto"),
            },
        };
        // a veth not in generic mode: its frames may have partial checksums (never redirected)
        let veth = !matches!(peer, Ok(crate::iface::PeerXdp::NotVeth));
        let no_redirect = if veth && name != "generic" { ROLE_NO_REDIRECT } else { 0 };
        let role = role | no_redirect | self.role_of(idx);
        self.set_role(idx, role)?;
        if self.links.iter().any(|(n, _)| n == ifname) {
            return Ok(name); // both roles on one interface: one link
        }
        // SAFETY: an all-zero `bpf_link_create_opts` is its documented default; `sz` is set.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _;
        opts.flags = flags;
        // SAFETY: `self.prog` is a loaded XDP program fd, `opts` is initialised and outlives the call.
        let fd = unsafe { libbpf_sys::bpf_link_create(self.prog.as_raw_fd(), idx as i32, libbpf_sys::BPF_XDP, &opts) };
        if fd < 0 {
            let _ = self.set_role(idx, 0);
            bail!("attaching the in-path program to {ifname} ({name}): {}", std::io::Error::from_raw_os_error(-fd));
        }
        // SAFETY: `fd` is a new link fd returned by the kernel and owned by nobody else.
        self.links.push((ifname.to_string(), unsafe { OwnedFd::from_raw_fd(fd) }));
        Ok(name)
    }

    fn role_of(&self, idx: u32) -> u32 {
        let map = if idx < ROLE_SLOTS { &self.roles } else { &self.ifaces };
        map
            .lookup(&idx.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .and_then(|v| v.get(..4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())))
            .unwrap_or(0)
    }

    /// Detach from every interface (the host forwards as before: no state is needed for it).
    pub fn detach_all(&mut self) {
        self.links.clear();
    }

    /// Run the program once on `packet` (BPF_PROG_TEST_RUN; its ingress is the loopback).
    pub fn test_run(&self, packet: &[u8]) -> Result<(u32, Vec<u8>)> {
        crate::runtime::test_run_fd(self.prog.as_fd(), packet)
    }

    /// Median kernel-measured ns of `runs` single test runs of `packet`.
    pub fn bench(&self, packet: &[u8], runs: u32) -> Result<u64> {
        let mut times = Vec::with_capacity(runs as usize);
        for _ in 0..runs.max(1) {
            let mut out = vec![0u8; 4096];
            // SAFETY: a zeroed `bpf_test_run_opts` is the documented default; `sz` is set.
            let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
            opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
            opts.data_in = packet.as_ptr().cast();
            opts.data_size_in = packet.len() as u32;
            opts.data_out = out.as_mut_ptr().cast();
            opts.data_size_out = out.len() as u32;
            // SAFETY: the fd is a loaded program; the buffers live across the call with the sizes given.
            let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut opts) };
            if rc != 0 {
                bail!("bpf_prog_test_run_opts: {}", std::io::Error::last_os_error());
            }
            times.push(u64::from(opts.duration));
        }
        times.sort_unstable();
        Ok(times[times.len() / 2])
    }

    /// Let each sweep read at most `entries` entries of each class's map (SWEEP_BUDGET
    /// otherwise): how tests sweep a cache in parts.
    #[doc(hidden)]
    pub fn set_sweep_budget(&mut self, entries: usize) {
        self.sweep_budget = entries.max(1);
    }

    /// Move every entry's clock `secs` seconds into the past (stored, expiry, last use), as if
    /// it had been learnt that much earlier: how tests age TTLs and expire entries without
    /// waiting. Returns the entries moved.
    #[doc(hidden)]
    pub fn backdate(&self, secs: u64) -> Result<usize> {
        let ns = secs * 1_000_000_000;
        let mut n = 0;
        for (map, k, mut v) in self.values()? {
            for at in [
                std::mem::offset_of!(types::xdns_inpath_entry, stored_ns),
                EXPIRES_AT,
                std::mem::offset_of!(types::xdns_inpath_entry, used_ns),
            ] {
                let old = u64::from_ne_bytes(v[at..at + 8].try_into().unwrap());
                v[at..at + 8].copy_from_slice(&old.saturating_sub(ns).to_ne_bytes());
            }
            map.update(&k, &v, MapFlags::EXIST)?;
            // the way's stamp follows its stored time: a reply memo kept before is not used
            let stored = std::mem::offset_of!(types::xdns_inpath_entry, stored_ns);
            self.set_stamp(&k, u64::from_ne_bytes(v[stored..stored + 8].try_into().unwrap()))?;
            n += 1;
        }
        Ok(n)
    }

    /// Set the stamp of the way with cache key `k` (set * WAYS + way) in its set's tags.
    fn set_stamp(&self, k: &[u8], stamp: u64) -> Result<()> {
        let key = u32::from_ne_bytes(k.try_into().context("a cache key is 4 bytes")?);
        let set = (key / WAYS).to_ne_bytes();
        let at = std::mem::offset_of!(types::xdns_inpath_tags, stamp) + (key % WAYS) as usize * 8;
        let mut t = self.tags.lookup(&set, MapFlags::ANY)?.context("a set's tags")?;
        t[at..at + 8].copy_from_slice(&stamp.to_ne_bytes());
        self.tags.update(&set, &t, MapFlags::ANY)?;
        Ok(())
    }

    /// Recorded queries not yet answered (or answered, until another query takes the slot).
    pub fn pending_count(&self) -> usize {
        let tag = std::mem::offset_of!(types::xdns_inpath_pend, tag);
        self.pending
            .keys()
            .filter_map(|k| self.pending.lookup(&k, MapFlags::ANY).ok().flatten())
            .filter(|v| v.get(tag..tag + 8).is_some_and(|b| b != [0u8; 8]))
            .count()
    }

    /// Every entry's value with its class's map (tests). A way's element in the map its tag
    /// does not name (left by two CPUs learning one way in both classes at once) is listed
    /// too: the sweep deletes it once expired, flush always.
    fn values(&self) -> Result<Vec<(&MapHandle, Vec<u8>, Vec<u8>)>> {
        let mut all = Vec::new();
        self.each(|m, k, v| all.push((m, k.to_vec(), v.to_vec())))?;
        Ok(all)
    }

    /// Call `f` with every entry of both classes' maps (the map, the key, the value).
    fn each<'a>(&'a self, mut f: impl FnMut(&'a MapHandle, &[u8], &[u8])) -> Result<()> {
        for m in [&self.cache_s, &self.cache] {
            Self::walk(m, None, usize::MAX, &mut f)?;
        }
        Ok(())
    }

    /// Call `f` with the entries of map `m` from batch position `from` (None: the start),
    /// read SCAN_BATCH at a time (`BPF_MAP_LOOKUP_BATCH`), until at least `budget` were read:
    /// the position to go on from, or None at the map's end (an entry read with a key walk
    /// and a lookup would cost two system calls). libbpf-rs's batch iterator is not used: it
    /// ends at the first batch the
    /// kernel returns short of the count asked for, which a hash map does whenever the next
    /// bucket would not fit.
    fn walk<'a>(
        m: &'a MapHandle,
        from: Option<[u8; 8]>,
        budget: usize,
        f: &mut impl FnMut(&'a MapHandle, &[u8], &[u8]),
    ) -> Result<Option<[u8; 8]>> {
        let (ks, vs) = (m.key_size() as usize, m.value_size() as usize);
        let mut keys = vec![0u8; ks * SCAN_BATCH as usize];
        let mut vals = vec![0u8; vs * SCAN_BATCH as usize];
        // the hash map's position: a bucket index (u32), kept in 8 bytes
        let (mut at, mut next) = (from.unwrap_or_default(), [0u8; 8]);
        let mut first = from.is_none();
        let mut read = 0usize;
        loop {
            let mut count = SCAN_BATCH;
            #[allow(clippy::needless_update)]
            let opts = libbpf_sys::bpf_map_batch_opts {
                sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
                ..Default::default()
            };
            let in_batch = if first { std::ptr::null_mut() } else { at.as_mut_ptr().cast() };
            // SAFETY: `keys` and `vals` hold SCAN_BATCH keys and values of the map's sizes,
            // `count` says so; `at` and `next` are 8 bytes, more than a hash map's position;
            // `opts` is initialised with its size; all outlive the call.
            let ret = unsafe {
                libbpf_sys::bpf_map_lookup_batch(
                    m.as_fd().as_raw_fd(),
                    in_batch,
                    next.as_mut_ptr().cast(),
                    keys.as_mut_ptr().cast(),
                    vals.as_mut_ptr().cast(),
                    &mut count,
                    &opts,
                )
            };
            if ret < 0 && ret != -libc::ENOENT {
                if ret == -libc::EINTR {
                    continue;
                }
                let e = std::io::Error::from_raw_os_error(-ret);
                bail!("reading the in-path cache's {}: {e}", m.name().to_string_lossy());
            }
            let n = (count as usize).min(SCAN_BATCH as usize);
            for (k, v) in keys.chunks_exact(ks).zip(vals.chunks_exact(vs)).take(n) {
                f(m, k, v);
            }
            if ret == -libc::ENOENT {
                return Ok(None);
            }
            at = next;
            first = false;
            read += n;
            if read >= budget {
                return Ok(Some(at));
            }
        }
    }

    /// Entries held by size class: (small, large).
    pub fn class_counts(&self) -> (usize, usize) {
        (self.cache_s.keys().count(), self.cache.keys().count())
    }
}

/// Entries read per system call when the cache is walked (sweep, entries).
const SCAN_BATCH: u32 = 256;

/// Entries of each class's map the once-a-second sweep reads per call at most: a cache larger
/// than this is swept a part a second, going on where the last call stopped (an expired entry
/// of a 1M cache is deleted within 16 s; until then `entries` counts it as expired and a
/// learn takes its way as free), so that the sweep's cost does not grow with the capacity.
const SWEEP_BUDGET: usize = 65536;

/// Offset of `expires_ns` in `struct xdns_inpath_entry`.
const EXPIRES_AT: usize = std::mem::offset_of!(types::xdns_inpath_entry, expires_ns);

fn expires(v: &[u8]) -> u64 {
    v.get(EXPIRES_AT..EXPIRES_AT + 8).map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()))
}

/// Sum the per-CPU scratch values' counters: verdicts, then evicted, redirected, fib_passed,
/// head_grown, reply_hits, reply_kept.
pub fn sum_counters(per_cpu: &[Vec<u8>]) -> InpathCounters {
    let slots = std::mem::size_of::<[u64; 32]>() / 8;
    let mut sums = vec![0u64; slots + 6];
    for v in per_cpu {
        for (i, s) in sums.iter_mut().enumerate() {
            if let Some(b) = v.get(i * 8..i * 8 + 8) {
                *s += u64::from_ne_bytes(b.try_into().unwrap());
            }
        }
    }
    let verdicts = (0..INPATH_VERDICT_NAMES.len()).map(|i| (verdict_name(i).unwrap_or_default(), sums[i])).collect();
    InpathCounters {
        verdicts,
        evicted: sums[slots],
        redirected: sums[slots + 1],
        fib_passed: sums[slots + 2],
        head_grown: sums[slots + 3],
        reply_hits: sums[slots + 4],
        reply_kept: sums[slots + 5],
    }
}

impl InpathView for InpathProgram {
    fn counters(&self) -> Result<InpathCounters> {
        let per_cpu = self.scratch.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        Ok(sum_counters(&per_cpu))
    }

    fn entries(&self) -> Result<InpathEntries> {
        let now = monotonic_ns();
        let mut e = InpathEntries {
            capacity: u64::from(self.capacity),
            entry_bytes: std::mem::size_of::<types::xdns_inpath_entry>() as u64,
            small_entry_bytes: std::mem::size_of::<types::xdns_inpath_entry_s>() as u64,
            ..Default::default()
        };
        self.each(|m, _, v| {
            if expires(v) > now {
                e.live += 1;
            } else {
                e.expired += 1;
            }
            if std::ptr::eq(m, &self.cache_s) {
                e.small += 1;
            } else {
                e.large += 1;
            }
        })?;
        e.memory_bytes = e.small * element_bytes(e.small_entry_bytes) + e.large * element_bytes(e.entry_bytes);
        Ok(e)
    }

    fn flush(&self) -> Result<usize> {
        // the tags first: from then on neither a query's lookup nor a kept reply (the reply
        // memo checks its way's stamp) finds an entry; then the entries
        let zero = vec![0u8; std::mem::size_of::<types::xdns_inpath_tags>()];
        for set in 0..self.capacity / WAYS {
            self.tags.update(&set.to_ne_bytes(), &zero, MapFlags::ANY).context("clearing a set's tags")?;
        }
        let mut n = 0;
        for map in [&self.cache_s, &self.cache] {
            let keys: Vec<_> = map.keys().collect();
            for k in keys {
                if map.delete(&k).is_ok() {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    fn sweep(&self) -> Result<usize> {
        let now = monotonic_ns();
        let mut expired = Vec::new();
        let mut at = self.sweep_at.lock().unwrap_or_else(|e| e.into_inner());
        for (i, m) in [&self.cache_s, &self.cache].into_iter().enumerate() {
            at[i] = Self::walk(m, at[i], self.sweep_budget, &mut |map, k, v| {
                if expires(v) <= now {
                    expired.push((map, k.to_vec()));
                }
            })?;
        }
        drop(at);
        let mut n = 0;
        for (map, k) in expired {
            // an entry learnt again meanwhile is a new value: deleted only if still expired
            let again = map.lookup(&k, MapFlags::ANY).ok().flatten();
            if again.is_some_and(|a| expires(&a) <= now) && map.delete(&k).is_ok() {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// `bpf_prog_info` of a program fd.
pub(crate) fn prog_info(fd: std::os::fd::BorrowedFd<'_>) -> Result<libbpf_sys::bpf_prog_info> {
    // SAFETY: a zeroed bpf_prog_info is a valid buffer for the kernel to fill.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is writable for `len` bytes, `fd` a program fd.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        bail!("bpf_prog_get_info_by_fd: {}", std::io::Error::last_os_error());
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sets() {
        assert_eq!(verdict_name(0).as_deref(), Some("pass_other"));
        assert_eq!(verdict_name(1).as_deref(), Some("answered"));
        assert!(INPATH_VERDICT_NAMES.contains(&"XDNS_INPATH_REJECT_UNSOLICITED"));
        let s = |capacity| InpathSettings { capacity, ..Default::default() }.sets();
        assert_eq!(s(1), 1);
        assert_eq!(s(4), 1);
        assert_eq!(s(5), 2);
        assert_eq!(s(65536), 16384);
        assert_eq!(s(100_000), 32768);
    }

    #[test]
    fn counters_sum_over_cpus() {
        let mut a = vec![0u8; 64 * 8];
        let mut b = vec![0u8; 64 * 8];
        a[8..16].copy_from_slice(&3u64.to_ne_bytes()); // answered
        b[8..16].copy_from_slice(&4u64.to_ne_bytes());
        b[32 * 8..33 * 8].copy_from_slice(&2u64.to_ne_bytes()); // evicted
        a[33 * 8..34 * 8].copy_from_slice(&5u64.to_ne_bytes()); // redirected
        let c = sum_counters(&[a, b]);
        assert_eq!(c.verdicts.iter().find(|(n, _)| n == "answered").map(|x| x.1), Some(7));
        assert_eq!(c.evicted, 2);
        assert_eq!(c.redirected, 5);
        assert_eq!(c.verdicts.len(), INPATH_VERDICT_NAMES.len());
    }

    #[test]
    fn element_sizes() {
        // the two classes' values: a small entry's element in 512 bytes, a large one's in 2 KiB
        assert_eq!(element_bytes(std::mem::size_of::<types::xdns_inpath_entry_s>() as u64), 512);
        assert_eq!(element_bytes(std::mem::size_of::<types::xdns_inpath_entry>() as u64), 2048);
        assert_eq!(element_bytes(448), 512);
        assert_eq!(element_bytes(449), 1024);
        assert_eq!(element_bytes(100), 192);
        assert_eq!(element_bytes(1616), 2048);
    }

    #[test]
    fn inline_nets() {
        let (a, m) = inline_net("198.18.0.0".parse().unwrap(), 15);
        let mut want = [0u8; 16];
        want[10..14].copy_from_slice(&[0xff, 0xff, 198, 18]);
        let mut mask = [0xffu8; 16];
        mask[13..16].copy_from_slice(&[0xfe, 0, 0]);
        let w = |b: &[u8; 16], i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!((a, m), ([w(&want, 0), w(&want, 1)], [w(&mask, 0), w(&mask, 1)]));
        // host bits are cleared; /0 matches everything of the family's mapping
        let (a, _) = inline_net("2001:db8::1".parse().unwrap(), 32);
        assert_eq!(a[1], 0);
        let (a, m) = inline_net("::".parse().unwrap(), 0);
        assert_eq!((a, m), ([0, 0], [0, 0]));
    }

    #[test]
    fn prefix_keys() {
        let k = prefix_key("198.18.0.0".parse().unwrap(), 15);
        assert_eq!(&k[..4], &111u32.to_ne_bytes());
        assert_eq!(&k[4..16], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&k[16..], &[198, 18, 0, 0]);
        let k = prefix_key("2001:db8::".parse().unwrap(), 32);
        assert_eq!(&k[..4], &32u32.to_ne_bytes());
    }
}
