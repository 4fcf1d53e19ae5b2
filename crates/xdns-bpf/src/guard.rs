//! The guard stage's maps (`bpf/guard.h`, issue 25): source lists, the modelled hardware
//! tier, per-source features, counters.
//!
//! - [`Guard::replace_lists`] merges a blocklist and an allowlist (`xdns_guard::lists`) into
//!   the one prefix set the kernel matches longest first, writes it as a new list generation,
//!   flips to it and deletes the old one: a packet sees one whole list, old or new.
//! - [`ModelledTier`] is an [`xdns_guard::topk::HardwareTier`] over the program's K-slot table,
//!   a **model** of a NIC's filter table (no NIC is programmed), with per-slot hit counters.
//! - [`Guard::flip_interval`] ends a feature interval and returns its snapshot: packets and
//!   bytes per source /24 (IPv4) or /56 (IPv6), all from one interval (bpf/README.md).
//! - [`Guard::counters`] reads the stage's per-CPU counters; the drops are the verdicts
//!   `drop_blocked` and `drop_tier` of [`XdpProgram::counters`].
//!
//! The stage is compiled in only when [`crate::runtime::LoadConfig::guard`] is set; without it
//! [`XdpProgram::guard`] fails.

use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use xdns_guard::lists::{NameEntry, NameList, NameMatch, Prefix, PrefixList, V4Prefix, V6Prefix};
use xdns_guard::topk::{HardwareTier, SlotCounter, TierEntry, TierError};

use crate::maps::bytes_of;
use crate::runtime::XdpProgram;
use crate::types::{
    xdns_allow_prefix, xdns_guard_ctl, xdns_guard_entry, xdns_guard_feat, xdns_guard_key, xdns_guard_list, xdns_guard_lpm_key,
    xdns_guard_name_key, xdns_guard_rrl, xdns_guard_scratch, xdns_guard_tier, xdns_scratch,
};

/// Prefix lengths the hash structure probes per family (`XDNS_GUARD_LENS`).
pub const HASH_LENGTHS: usize = 8;
/// Slots of the modelled hardware tier at most (`XDNS_GUARD_TIER_SLOTS`).
pub const TIER_SLOTS: usize = 16;

const CTL_GEN: usize = std::mem::offset_of!(xdns_guard_ctl, gen);
const CTL_INTERVAL: usize = std::mem::offset_of!(xdns_guard_ctl, interval);
const CTL_TIER: usize = std::mem::offset_of!(xdns_guard_ctl, tier);
const CTL_NAMES: usize = std::mem::offset_of!(xdns_guard_ctl, names);
const NAME_EXACT: u8 = 1;
const NAME_SUFFIX: u8 = 2;
const ACTION_BLOCK: u32 = 1;
const ACTION_ALLOW: u32 = 2;
const MODE_NONE: u8 = 0;
const MODE_HASH: u8 = 1;
const MODE_LPM: u8 = 2;
const QFEAT_NAME: u32 = 1;

/// Load-time settings of the guard stage ([`crate::runtime::LoadConfig::guard`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardStage {
    /// Prefixes one list generation may hold (block and allow merged); the maps take two
    /// generations of this many (hash maps and tries are not preallocated: memory follows
    /// the list).
    pub capacity: u32,
    /// Slots of the modelled hardware tier (0..=16; 0 = no tier).
    pub tier_slots: u32,
    /// Count packets and bytes per source prefix for detection (one LRU hash lookup per packet).
    pub features: bool,
    /// Names (exact and suffix entries) one name list generation may hold; the map takes two.
    pub names: u32,
    /// Source prefixes the feature map tracks (least recently seen evicted beyond).
    pub feature_prefixes: u32,
    /// Qname suffixes (parents of queried names) the suffix feature map tracks.
    pub feature_suffixes: u32,
    /// RRL accounts of kernel answers (client prefix, class, answer) the shared table
    /// holds ([`RRL_WAYS`]-way sets, rounded up to a power of two of sets; a new account
    /// evicts the one updated longest ago in its set); the answer features' maps take
    /// `feature_prefixes` and `feature_suffixes` entries.
    pub rrl_accounts: u32,
}

impl Default for GuardStage {
    fn default() -> Self {
        Self {
            capacity: 1 << 20,
            tier_slots: 0,
            features: false,
            names: 65536,
            feature_prefixes: 65536,
            feature_suffixes: 65536,
            rrl_accounts: 262_144,
        }
    }
}

/// RRL and cookies on kernel answers (`bpf/rrl.h`), as [`Guard::set_rrl`] writes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RrlSettings {
    /// Answers a second per account; 0 = no RRL in the kernel.
    pub rate: u32,
    /// Every `slip`-th limited answer is sent truncated (TC=1); 0 = never.
    pub slip: u32,
    /// Client prefix lengths that share an account.
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
    /// Server cookies (RFC 9018): the current secret and the previous one, if it still
    /// verifies. `None`: COOKIE options are not looked at (queries carrying one are answered
    /// without a cookie, as by a server without cookies).
    pub cookies: Option<([u8; 16], Option<[u8; 16]>)>,
}

/// Words per half of the presence filter for `capacity` prefixes: 16 bits a prefix, a power
/// of two, at least 64.
fn filter_words(capacity: u32) -> u32 {
    (capacity / 4).max(64).next_power_of_two()
}

/// Ways of a set of the RRL account table (`XDNS_RRL_WAYS`).
pub const RRL_WAYS: u32 = 4;

/// Slots per CPU of the verified server cookies (`XDNS_COOKIE_SLOTS`, `xdns_guard_cookies`).
pub const COOKIE_SLOTS: u32 = 1024;

/// Sets of the RRL account table for `accounts`: a power of two, at least one, holding at
/// least `accounts` in its ways.
pub fn rrl_sets(accounts: u32) -> u32 {
    accounts.max(1).div_ceil(RRL_WAYS).next_power_of_two()
}

/// Size the guard's maps before load: the smallest sizes when the stage is off.
pub(crate) fn size_maps(open: &mut crate::skel::OpenXdnsSkel<'_>, g: Option<&GuardStage>) -> Result<()> {
    let cap = g.map_or(1, |g| g.capacity.max(1));
    let words = filter_words(if g.is_some() { cap } else { 1 });
    open.maps.rodata_data.as_deref_mut().context("rodata not mapped")?.xdns_cfg.guard_filter_mask = words - 1;
    open.maps.xdns_guard_filter.set_max_entries(2 * words)?;
    open.maps.xdns_guard_hash.set_max_entries(2 * cap)?;
    open.maps.xdns_guard_lpm.set_max_entries(2 * cap)?;
    open.maps.xdns_guard_names.set_max_entries(2 * g.map_or(1, |g| g.names.max(1)))?;
    let feat = g.filter(|g| g.features).map_or(1, |g| g.feature_prefixes.max(1));
    open.maps.xdns_guard_feat.set_max_entries(feat)?;
    let qfeat = g.filter(|g| g.features).map_or(1, |g| g.feature_suffixes.max(1));
    open.maps.xdns_guard_qfeat.set_max_entries(qfeat)?;
    open.maps.xdns_guard_rfeat.set_max_entries(feat)?;
    open.maps.xdns_guard_nxfeat.set_max_entries(qfeat)?;
    let sets = rrl_sets(g.map_or(1, |g| g.rrl_accounts));
    open.maps.rodata_data.as_deref_mut().context("rodata not mapped")?.xdns_cfg.guard_rrl_mask = sets - 1;
    open.maps.xdns_guard_rrl.set_max_entries(sets)?;
    open.maps.xdns_guard_cookies.set_max_entries(if g.is_some() { COOKIE_SLOTS } else { 1 })?;
    if let Some(g) = g {
        if g.tier_slots as usize > TIER_SLOTS {
            bail!("the modelled hardware tier has at most {TIER_SLOTS} slots ({} asked)", g.tier_slots);
        }
    }
    Ok(())
}

/// After load: the first feature interval is 1 (a slot's interval 0 means never written).
pub(crate) fn init_maps(prog: &XdpProgram) -> Result<()> {
    let ctl = &prog.skel().maps.xdns_guard_ctl;
    let v = xdns_guard_ctl { interval: 1, ..Default::default() };
    ctl.update(&0u32.to_ne_bytes(), bytes_of(&v), MapFlags::ANY)?;
    Ok(())
}

/// The control value (`xdns_guard_ctl`, one value of an mmapable array) mapped shared.
struct CtlMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain shared memory owned by this value; its selectors are written as atomics, and
// the halves no run reads only under the Guard's mutexes (one writer at a time).
unsafe impl Send for CtlMap {}
// SAFETY: as above.
unsafe impl Sync for CtlMap {}

impl CtlMap {
    fn new(fd: std::os::fd::BorrowedFd<'_>) -> Result<Self> {
        let len = std::mem::size_of::<xdns_guard_ctl>();
        // SAFETY: mapping a BPF_F_MMAPABLE array map of one value shared, at offset 0, no
        // longer than its value (the kernel rounds the area up to a page).
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            bail!("mapping xdns_guard_ctl: {}", std::io::Error::last_os_error());
        }
        Ok(Self { ptr: ptr.cast(), len })
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: aligned (the mapping is page aligned, off a multiple of 4), in bounds, and
        // the memory lives as long as `self`.
        unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
    }

    /// Write `v` at `off`: only into a part no program run reads (a staged half).
    fn put<T: Copy>(&self, off: usize, v: &T) {
        assert!(off + std::mem::size_of::<T>() <= self.len);
        // SAFETY: in bounds (checked), T is a plain ABI struct; the caller writes only a
        // part no reader uses until a selector store publishes it.
        unsafe { std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), self.ptr.add(off), std::mem::size_of::<T>()) };
    }
}

impl Drop for CtlMap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Which structure holds a family's prefixes in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Structure {
    /// Nothing listed for the family: no lookup.
    None,
    /// One hash lookup per prefix length in use, longest first (at most [`HASH_LENGTHS`]).
    Hash,
    /// One lookup in the LPM trie.
    Lpm,
}

/// What a name list replacement installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameReport {
    /// The name list generation now active.
    pub generation: u32,
    /// Entries written.
    pub entries: usize,
    /// Time to write, flip and delete the old generation.
    pub elapsed: Duration,
}

/// What [`Guard::replace_lists_with`] may choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Hash by length where the family uses at most [`HASH_LENGTHS`] lengths, else the trie.
    Auto,
    /// The hash structure (an error with more lengths).
    Hash,
    /// The trie, whatever the lengths (for measurements and tests).
    Lpm,
}

/// What a list replacement installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListReport {
    /// The list generation now active.
    pub generation: u32,
    /// Prefixes written (blocks, blocks under an allow prefix, allows under a block prefix).
    pub entries: usize,
    /// Entries that drop (the others are allow entries).
    pub blocking: usize,
    /// IPv4 and IPv6 structures.
    pub v4: Structure,
    pub v6: Structure,
    /// Lengths in use, longest first, per family.
    pub lengths4: Vec<u8>,
    pub lengths6: Vec<u8>,
    /// Time to write, flip and delete the old generation.
    pub elapsed: Duration,
}

/// Packets and bytes of one source prefix in one interval (summed over CPUs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceFeature {
    /// The source's /24 (IPv4) or /56 (IPv6).
    pub prefix: Prefix,
    pub packets: u64,
    /// IP bytes (headers included).
    pub bytes: u64,
    /// Queries of type ANY among `packets` (amplification; counted by the name check).
    pub any: u64,
}

/// Queries under one qname suffix in one interval (summed over CPUs): the parent of each
/// queried name (the name less its first label), known by its hash ([`Guard::suffix_hash`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuffixFeature {
    /// `xdns_name_hash` of the lowercased parent name.
    pub hash: u64,
    /// Its wire length.
    pub len: u32,
    pub queries: u64,
    /// Wire bytes of the queried names.
    pub name_bytes: u64,
}

/// Queries for one whole name in one interval (summed over CPUs), with its parent's hash:
/// what the water-torture detector counts distinct and unknown names under a suffix with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameFeature {
    /// `xdns_name_hash` of the lowercased name.
    pub hash: u64,
    /// Its wire length.
    pub len: u32,
    /// The hash of its parent ([`SuffixFeature::hash`]).
    pub parent: u64,
    pub queries: u64,
}

/// The kernel's own answers to one client prefix in one interval (summed over CPUs; slips
/// included, RRL drops and passed queries not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerFeature {
    /// The client's /24 (IPv4) or /56 (IPv6).
    pub prefix: Prefix,
    pub answers: u64,
    /// IP bytes of the answers (headers included): the amplification a source receives.
    pub bytes: u64,
}

/// The kernel's NXDOMAIN answers under one qname suffix in one interval (summed over CPUs):
/// the parent of each name answered NXDOMAIN, known by its hash as [`SuffixFeature`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NxDomainFeature {
    /// `xdns_name_hash` of the lowercased parent name ([`Guard::suffix_hash`]).
    pub hash: u64,
    /// Its wire length.
    pub len: u32,
    pub nxdomains: u64,
    /// IP bytes of those answers.
    pub bytes: u64,
}

/// One finished interval's features.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The interval these counts are of.
    pub interval: u32,
    /// Per source prefix, most packets first.
    pub sources: Vec<SourceFeature>,
    /// Per qname suffix, most queries first.
    pub suffixes: Vec<SuffixFeature>,
    /// Per whole queried name (as many as the feature map kept), most queries first.
    pub names: Vec<NameFeature>,
    /// Kernel answers per client prefix, most bytes first.
    pub answers: Vec<AnswerFeature>,
    /// Kernel NXDOMAIN answers per qname suffix, most first.
    pub nxdomains: Vec<NxDomainFeature>,
}

/// The guard stage's counters, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuardCounters {
    /// Packets whose longest match was an allow prefix.
    pub allowed: u64,
    /// Packets dropped by each slot of the modelled tier, since load.
    pub tier_hits: Vec<u64>,
    /// Packets the feature map could not count (it refused a new prefix).
    pub feature_full: u64,
    /// Queries the suffix feature map could not count.
    pub suffix_full: u64,
    /// New kernel RRL accounts that evicted an account used within the last second (the
    /// table's sets are full for the traffic; the evicted account restarts full).
    pub rrl_full: u64,
    /// COOKIE options whose server cookie did not verify here (or malformed ones).
    pub cookie_bad: u64,
    /// Kernel answers that echoed the query's fresh, valid server cookie (RFC 9018 §4.3).
    pub cookie_echoed: u64,
    /// Kernel answers whose RRL account was the one their CPU last decided by the bucket's
    /// call, paid from that account's (shared) bucket inline (bpf/rrl.h, `xdns_rrl_memo`).
    pub rrl_memo_hits: u64,
    /// Kernel answers the answer feature map could not count.
    pub answer_full: u64,
    /// Kernel NXDOMAIN answers the NXDOMAIN feature map could not count.
    pub nxdomain_full: u64,
}

/// One prefix in the kernel's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Pfx {
    family: u8,
    len: u8,
    addr: [u8; 16],
}

fn mask_bytes(len: u8) -> [u8; 16] {
    let mut m = [0u8; 16];
    for (i, b) in m.iter_mut().enumerate() {
        let keep = (len as usize).saturating_sub(8 * i).min(8);
        *b = if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
    }
    m
}

impl Pfx {
    fn of(p: &Prefix) -> Pfx {
        let mut addr = [0u8; 16];
        let (family, len) = match p {
            Prefix::V4(v) => {
                addr[..4].copy_from_slice(&v.addr);
                (4, v.len)
            }
            Prefix::V6(v) => {
                addr = v.addr;
                (6, v.len)
            }
        };
        Pfx { family, len, addr }.truncated(len)
    }

    fn truncated(&self, len: u8) -> Pfx {
        let m = mask_bytes(len);
        let mut addr = self.addr;
        for (a, m) in addr.iter_mut().zip(&m) {
            *a &= m;
        }
        Pfx { family: self.family, len, addr }
    }
}

fn words(b: &[u8; 16]) -> [u64; 2] {
    [u64::from_ne_bytes(b[..8].try_into().unwrap()), u64::from_ne_bytes(b[8..].try_into().unwrap())]
}

/// The kernel's entries for `block` and `allow`: each prefix with its action, such that the
/// longest matching entry's action is "allow" exactly when an allow prefix holds the source,
/// and "block" exactly when, besides, a block prefix does (xdns_abi.h). An allow prefix under
/// no block prefix is written only with `all_allows` (the kernel's RRL is on: the guard
/// stage's match then exempts the source's answers from it, bpf/rrl.h); otherwise it would
/// cost a probe and change nothing.
fn merge(block: &PrefixList, allow: &PrefixList, all_allows: bool) -> Vec<(Pfx, u32)> {
    let collect = |l: &PrefixList| -> Vec<Pfx> {
        l.v4.iter().map(|p| Pfx::of(&Prefix::V4(*p))).chain(l.v6.iter().map(|p| Pfx::of(&Prefix::V6(*p)))).collect()
    };
    let (b, a) = (collect(block), collect(allow));
    let lens = |v: &[Pfx]| -> BTreeSet<(u8, u8)> { v.iter().map(|p| (p.family, p.len)).collect() };
    let (blens, alens) = (lens(&b), lens(&a));
    let (bset, aset): (HashSet<Pfx>, HashSet<Pfx>) = (b.iter().copied().collect(), a.iter().copied().collect());
    // is `p` under (or equal to) a prefix of `set`, whose lengths are `lens`?
    let under = |p: &Pfx, set: &HashSet<Pfx>, lens: &BTreeSet<(u8, u8)>| {
        lens.iter().any(|&(f, l)| f == p.family && l <= p.len && set.contains(&p.truncated(l)))
    };
    let mut out = Vec::with_capacity(b.len());
    let mut seen = HashSet::with_capacity(b.len());
    for p in &b {
        if seen.insert(*p) {
            out.push((*p, if under(p, &aset, &alens) { ACTION_ALLOW } else { ACTION_BLOCK }));
        }
    }
    for p in &a {
        if !bset.contains(p) && (all_allows || under(p, &bset, &blens)) && seen.insert(*p) {
            out.push((*p, ACTION_ALLOW));
        }
    }
    out
}

/// What the userspace side remembers of the list generation in the kernel.
#[derive(Default)]
struct ListState {
    generation: u32,
    /// Keys of the active generation, as written (for their deletion).
    hash_keys: Vec<u8>,
    lpm_keys: Vec<u8>,
    /// The active generation's structure per family (MODE_*) and lengths in use.
    modes: [u8; 2],
    lengths: [Vec<u8>; 2],
    /// Blocks added to the active generation one by one ([`Guard::add_block`]).
    added: HashSet<Pfx>,
    /// Entries of the active generation taken out one by one ([`Guard::remove_block`]).
    removed: HashSet<Pfx>,
}

/// What [`Guard::add_block`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// The prefix drops from now on.
    Added,
    /// The active generation already has an entry for exactly this prefix (left as it is).
    Listed,
    /// The active generation's structure cannot take it (no entry of that length is probed,
    /// or no list is active): write a new generation ([`Guard::replace_lists`]).
    NeedsGeneration,
}

/// The name list generation in the kernel.
#[derive(Default)]
struct NameState {
    generation: u32,
    keys: Vec<u8>,
}

/// Handles on the guard's maps; clones share one writer state. `Send + Sync`.
#[derive(Clone)]
pub struct Guard {
    inner: Arc<Inner>,
}

struct Inner {
    ctl: CtlMap,
    hash: MapHandle,
    lpm: MapHandle,
    filter: MapHandle,
    feat: MapHandle,
    qfeat: MapHandle,
    rfeat: MapHandle,
    nxfeat: MapHandle,
    scratch: MapHandle,
    capacity: usize,
    tier_slots: usize,
    seed: u64,
    /// Words per half of the presence filter.
    filter_words: usize,
    state: Mutex<ListState>,
    names: MapHandle,
    name_state: Mutex<NameState>,
    name_capacity: usize,
    /// The tier's table as installed (one writer at a time).
    tier_state: Mutex<Vec<Option<Prefix>>>,
    /// Prefix lengths every generation probes by hash even when no entry has them, per
    /// family ([`Guard::reserve_lengths`]).
    reserved: Mutex<[Option<u8>; 2]>,
}

impl XdpProgram {
    /// The guard stage's maps (fails when the program was loaded without the stage).
    pub fn guard(&self) -> Result<Guard> {
        let ro = self.skel().maps.rodata_data.as_ref().context("rodata not mapped")?;
        if ro.xdns_cfg.guard == 0 {
            bail!("the program was loaded without the guard stage (LoadConfig::guard)");
        }
        let m = &self.skel().maps;
        let h = |map: &libbpf_rs::Map<'_>| MapHandle::try_from(map).context("duplicating a guard map handle");
        let capacity = m.xdns_guard_hash.max_entries() as usize / 2;
        Ok(Guard {
            inner: Arc::new(Inner {
                ctl: CtlMap::new(m.xdns_guard_ctl.as_fd())?,
                hash: h(&m.xdns_guard_hash)?,
                lpm: h(&m.xdns_guard_lpm)?,
                filter: h(&m.xdns_guard_filter)?,
                feat: h(&m.xdns_guard_feat)?,
                qfeat: h(&m.xdns_guard_qfeat)?,
                rfeat: h(&m.xdns_guard_rfeat)?,
                nxfeat: h(&m.xdns_guard_nxfeat)?,
                scratch: h(&m.xdns_scratch)?,
                capacity,
                tier_slots: TIER_SLOTS,
                seed: self.seed(),
                filter_words: ro.xdns_cfg.guard_filter_mask as usize + 1,
                state: Mutex::new(ListState::default()),
                names: h(&m.xdns_guard_names)?,
                name_state: Mutex::new(NameState::default()),
                name_capacity: m.xdns_guard_names.max_entries() as usize / 2,
                tier_state: Mutex::new(vec![None; TIER_SLOTS]),
                reserved: Mutex::new([None; 2]),
            }),
        })
    }
}

/// The guard stage's counters in the scratch map, summed over CPUs.
pub(crate) fn counters_of(scratch: &MapHandle, tier_slots: usize) -> Result<GuardCounters> {
    let per_cpu = scratch.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.context("scratch")?;
    let at = std::mem::offset_of!(xdns_scratch, guard);
    let mut c = GuardCounters { tier_hits: vec![0; tier_slots], ..Default::default() };
    for v in per_cpu {
        let g = &v[at..at + std::mem::size_of::<xdns_guard_scratch>()];
        let word = |o: usize| u64::from_ne_bytes(g[o..o + 8].try_into().unwrap());
        c.allowed += word(std::mem::offset_of!(xdns_guard_scratch, allowed));
        let t0 = std::mem::offset_of!(xdns_guard_scratch, tier_hits);
        for (i, h) in c.tier_hits.iter_mut().enumerate() {
            *h += word(t0 + 8 * i);
        }
        c.feature_full += word(std::mem::offset_of!(xdns_guard_scratch, feat_full));
        c.suffix_full += word(std::mem::offset_of!(xdns_guard_scratch, qfeat_full));
        c.rrl_full += word(std::mem::offset_of!(xdns_guard_scratch, rrl_full));
        c.cookie_bad += word(std::mem::offset_of!(xdns_guard_scratch, cookie_bad));
        c.cookie_echoed += word(std::mem::offset_of!(xdns_guard_scratch, cookie_echoed));
        c.rrl_memo_hits += word(std::mem::offset_of!(xdns_guard_scratch, rrl_memo_hits));
        c.answer_full += word(std::mem::offset_of!(xdns_guard_scratch, rfeat_full));
        c.nxdomain_full += word(std::mem::offset_of!(xdns_guard_scratch, nxfeat_full));
    }
    Ok(c)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The prefix of a feature key (`xdns_guard_feat_key`: /24 or /56).
fn feature_key_prefix(k: &[u8]) -> Prefix {
    let addr = u64::from_ne_bytes(k[..8].try_into().unwrap()).to_ne_bytes();
    if k[8] == 4 {
        Prefix::V4(V4Prefix { addr: addr[..4].try_into().unwrap(), len: 24 })
    } else {
        let mut a = [0u8; 16];
        a[..8].copy_from_slice(&addr);
        Prefix::V6(V6Prefix { addr: a, len: 56 })
    }
}

/// The counts of interval `iv` of a two-slot feature map: (key, packets, bytes) per key
/// with any count, summed over CPUs.
fn read_slots(map: &MapHandle, iv: u32) -> Result<Vec<(Vec<u8>, u64, u64)>> {
    let s = (iv & 1) as usize;
    let mut out = Vec::new();
    for k in map.keys() {
        let Some(vals) = map.lookup_percpu(&k, MapFlags::ANY)? else { continue };
        let (mut packets, mut bytes) = (0u64, 0u64);
        for v in vals {
            let f = read_struct::<xdns_guard_feat>(&v);
            if f.slot[s].interval == iv {
                packets += f.slot[s].packets;
                bytes += f.slot[s].bytes;
            }
        }
        if packets > 0 {
            out.push((k, packets, bytes));
        }
    }
    Ok(out)
}

/// Wait until every program run that started before now has ended: one RCU grace period
/// (membarrier's global command is synchronize_rcu; XDP and BPF_PROG_TEST_RUN run inside RCU
/// read-side sections). Without membarrier (nohz_full kernels refuse it), sleep long enough
/// for any packet in flight.
fn wait_for_runs() {
    // SAFETY: membarrier takes integer arguments only and touches no memory of ours.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, 1 /* MEMBARRIER_CMD_GLOBAL */, 0, 0) };
    if r != 0 {
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Guard {
    fn ctl_get(&self, off: usize) -> Result<u32> {
        Ok(self.inner.ctl.word(off).load(Ordering::Acquire))
    }

    fn ctl_set(&self, off: usize, v: u32) -> Result<()> {
        self.inner.ctl.word(off).store(v, Ordering::Release);
        Ok(())
    }

    /// Prefixes one list generation may hold.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Replace both lists at once ([`Choice::Auto`]): see [`Self::replace_lists_with`].
    pub fn replace_lists(&self, block: &PrefixList, allow: &PrefixList) -> Result<ListReport> {
        self.replace_lists_with(block, allow, Choice::Auto)
    }

    /// Replace both lists at once. The new generation is written whole beside the active
    /// one, then flipped to in one map update; after every run that may still read the old
    /// generation has ended, the old one is deleted. While the kernel's RRL is on
    /// ([`Self::set_rrl`] with a rate; call it first) the whole allowlist is written, so that
    /// allowlisted sources are never limited; otherwise only its prefixes under a block. On an error the new generation's entries
    /// are deleted and the active lists stay as they were.
    pub fn replace_lists_with(&self, block: &PrefixList, allow: &PrefixList, choice: Choice) -> Result<ListReport> {
        let t0 = Instant::now();
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        // with the kernel's RRL on (Self::set_rrl), every allow prefix: allowlisted sources
        // are never limited, and the gate knows them by the guard stage's match
        let rate = self.ctl_get(std::mem::offset_of!(xdns_guard_ctl, rrl) + std::mem::offset_of!(xdns_guard_rrl, rate))?;
        let entries = merge(block, allow, rate > 0);
        if entries.len() > self.inner.capacity {
            bail!("{} guard prefixes, the maps were sized for {} (GuardStage::capacity)", entries.len(), self.inner.capacity);
        }
        let gen = st.generation + 1;
        let par = (gen & 1) as u8;
        let mut list = xdns_guard_list::default();
        let mut report = ListReport {
            generation: gen,
            entries: entries.len(),
            blocking: entries.iter().filter(|e| e.1 == ACTION_BLOCK).count(),
            v4: Structure::None,
            v6: Structure::None,
            lengths4: Vec::new(),
            lengths6: Vec::new(),
            elapsed: Duration::ZERO,
        };
        let mut use_lpm = [false; 2];
        let reserved = *self.inner.reserved.lock().unwrap_or_else(|e| e.into_inner());
        for (fi, family) in [4u8, 6].into_iter().enumerate() {
            let mut lens: BTreeSet<u8> = entries.iter().filter(|e| e.0.family == family).map(|e| e.0.len).collect();
            if let Some(r) = reserved[fi] {
                if lens.len() < HASH_LENGTHS || lens.contains(&r) {
                    lens.insert(r);
                }
            }
            let lens: Vec<u8> = lens.into_iter().rev().collect();
            let s = if lens.is_empty() {
                Structure::None
            } else {
                match choice {
                    Choice::Lpm => Structure::Lpm,
                    Choice::Auto if lens.len() > HASH_LENGTHS => Structure::Lpm,
                    Choice::Hash if lens.len() > HASH_LENGTHS => {
                        bail!("IPv{family}: {} prefix lengths in use, the hash structure probes at most {HASH_LENGTHS}", lens.len())
                    }
                    _ => Structure::Hash,
                }
            };
            let (mode, n, slots) = if family == 4 {
                (&mut list.mode4, &mut list.n4, &mut list.len4)
            } else {
                (&mut list.mode6, &mut list.n6, &mut list.len6)
            };
            *mode = match s {
                Structure::None => MODE_NONE,
                Structure::Hash => MODE_HASH,
                Structure::Lpm => MODE_LPM,
            };
            if s == Structure::Hash {
                *n = lens.len() as u8;
                for (slot, &l) in slots.iter_mut().zip(&lens) {
                    slot.mask = words(&mask_bytes(l));
                    slot.len = l;
                }
            }
            use_lpm[fi] = s == Structure::Lpm;
            if family == 4 {
                report.v4 = s;
                report.lengths4 = lens;
            } else {
                report.v6 = s;
                report.lengths6 = lens;
            }
        }
        // write the new generation
        let (mut hk, mut hv, mut lk) = (Vec::new(), Vec::new(), Vec::new());
        let fwords = self.inner.filter_words;
        let mut filter = vec![0u64; fwords];
        for (p, action) in &entries {
            let value = xdns_guard_entry { action: *action, ..Default::default() };
            if use_lpm[usize::from(p.family == 6)] {
                let k = xdns_guard_lpm_key {
                    prefixlen: 16 + u32::from(p.len),
                    gen: par,
                    family: p.family,
                    addr: p.addr,
                    ..Default::default()
                };
                let kb = bytes_of(&k);
                if let Err(e) = self.inner.lpm.update(kb, bytes_of(&value), MapFlags::ANY) {
                    self.delete_keys(&hk, &lk);
                    return Err(e).context("writing the guard trie");
                }
                lk.extend_from_slice(kb);
            } else {
                let k = xdns_guard_key { addr: words(&p.addr), len: p.len, family: p.family, gen: par, ..Default::default() };
                let meta = u32::from(p.len) | u32::from(p.family) << 8 | u32::from(par) << 16;
                let x = crate::hash::guard_pos(self.inner.seed, k.addr[0], k.addr[1], meta);
                filter[(x >> 32) as usize & (fwords - 1)] |= 1 << (x & 63);
                hk.extend_from_slice(bytes_of(&k));
                hv.extend_from_slice(bytes_of(&value));
            }
        }
        let (ks, vs) = (std::mem::size_of::<xdns_guard_key>(), std::mem::size_of::<xdns_guard_entry>());
        let chunk = 1 << 16;
        for (kc, vc) in hk.chunks(ks * chunk).zip(hv.chunks(vs * chunk)) {
            if let Err(e) = self.inner.hash.update_batch(kc, vc, (kc.len() / ks) as u32, MapFlags::ANY, MapFlags::ANY) {
                self.delete_keys(&hk, &lk);
                return Err(e).context("writing the guard hash map");
            }
        }
        let base = usize::from(par) * fwords;
        let fk: Vec<u8> = (base..base + fwords).flat_map(|i| (i as u32).to_ne_bytes()).collect();
        let fv: Vec<u8> = filter.iter().flat_map(|w| w.to_ne_bytes()).collect();
        if let Err(e) = self.inner.filter.update_batch(&fk, &fv, fwords as u32, MapFlags::ANY, MapFlags::ANY) {
            self.delete_keys(&hk, &lk);
            return Err(e).context("writing the guard's presence filter");
        }
        // the staged parity's descriptor: no run reads it until the flip below
        let at = std::mem::offset_of!(xdns_guard_ctl, lists) + usize::from(par) * std::mem::size_of::<xdns_guard_list>();
        self.inner.ctl.put(at, &list);
        // flip, then the old generation goes once no run can read it
        self.ctl_set(CTL_GEN, gen)?;
        wait_for_runs();
        let modes = [list.mode4, list.mode6];
        let lengths = [report.lengths4.clone(), report.lengths6.clone()];
        let new = ListState { generation: gen, hash_keys: hk, lpm_keys: lk, modes, lengths, ..Default::default() };
        let old = std::mem::replace(&mut *st, new);
        self.delete_generation(old);
        report.elapsed = t0.elapsed();
        Ok(report)
    }

    /// Delete what a list generation wrote, the blocks added to it one by one included.
    fn delete_generation(&self, old: ListState) {
        let par = (old.generation & 1) as u8;
        let (mut hk, mut lk) = (old.hash_keys, old.lpm_keys);
        if !old.removed.is_empty() {
            let ks = std::mem::size_of::<xdns_guard_key>();
            let gone: HashSet<Vec<u8>> = old.removed.iter().map(|p| bytes_of(&hash_key(p, par)).to_vec()).collect();
            hk = hk.chunks(ks).filter(|k| !gone.contains(*k)).flatten().copied().collect();
            let ls = std::mem::size_of::<xdns_guard_lpm_key>();
            let gone: HashSet<Vec<u8>> = old.removed.iter().map(|p| bytes_of(&lpm_key(p, par)).to_vec()).collect();
            lk = lk.chunks(ls).filter(|k| !gone.contains(*k)).flatten().copied().collect();
        }
        for p in &old.added {
            if old.modes[usize::from(p.family == 6)] == MODE_LPM {
                lk.extend_from_slice(bytes_of(&lpm_key(p, par)));
            } else {
                hk.extend_from_slice(bytes_of(&hash_key(p, par)));
            }
        }
        self.delete_keys(&hk, &lk);
    }

    /// Probe prefixes of these lengths by hash in every later generation, even with no entry
    /// of that length (while the family has at most [`HASH_LENGTHS`] lengths), so that
    /// [`Self::add_block`] can add them without writing a generation: the detector blocks
    /// /24s and /56s (`XDNS_GUARD_FEAT_V4`, `_V6`). Costs a probe of the presence filter per
    /// packet of that family.
    pub fn reserve_lengths(&self, v4: Option<u8>, v6: Option<u8>) {
        *self.inner.reserved.lock().unwrap_or_else(|e| e.into_inner()) = [v4, v6];
    }

    /// Add a block to the active generation, no new generation written: one map update (and
    /// a word of the presence filter), visible to the next packet. Only where the active
    /// generation already probes the prefix's length ([`Self::reserve_lengths`]) or holds
    /// the family in the trie; otherwise [`Added::NeedsGeneration`]. The next generation
    /// written whole no longer has it unless its lists do.
    pub fn add_block(&self, prefix: &Prefix) -> Result<Added> {
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.generation == 0 {
            return Ok(Added::NeedsGeneration);
        }
        let par = (st.generation & 1) as u8;
        let p = Pfx::of(prefix);
        let fi = usize::from(p.family == 6);
        let value = xdns_guard_entry { action: ACTION_BLOCK, ..Default::default() };
        match st.modes[fi] {
            MODE_HASH if st.lengths[fi].contains(&p.len) => {
                let k = hash_key(&p, par);
                if st.added.len() + st.hash_keys.len() / std::mem::size_of::<xdns_guard_key>() >= self.inner.capacity {
                    bail!("the guard maps are full ({} prefixes, GuardStage::capacity)", self.inner.capacity);
                }
                if let Err(e) = self.inner.hash.update(bytes_of(&k), bytes_of(&value), MapFlags::NO_EXIST) {
                    if self.inner.hash.lookup(bytes_of(&k), MapFlags::ANY)?.is_some() {
                        return Ok(Added::Listed);
                    }
                    return Err(e).context("adding a guard block");
                }
                // the entry first, then its bit: a packet sees no bit (not probed) or both
                let meta = u32::from(p.len) | u32::from(p.family) << 8 | u32::from(par) << 16;
                let x = crate::hash::guard_pos(self.inner.seed, k.addr[0], k.addr[1], meta);
                let w = (usize::from(par) * self.inner.filter_words + ((x >> 32) as usize & (self.inner.filter_words - 1))) as u32;
                let old = self.inner.filter.lookup(&w.to_ne_bytes(), MapFlags::ANY)?.map_or(0, |v| u64::from_ne_bytes(v[..8].try_into().unwrap()));
                self.inner.filter.update(&w.to_ne_bytes(), &(old | 1 << (x & 63)).to_ne_bytes(), MapFlags::ANY)?;
            }
            MODE_LPM => {
                let k = lpm_key(&p, par);
                if let Err(e) = self.inner.lpm.update(bytes_of(&k), bytes_of(&value), MapFlags::NO_EXIST) {
                    // EEXIST: an entry for exactly this prefix (a lookup gives the longest match)
                    if e.kind() == libbpf_rs::ErrorKind::AlreadyExists {
                        return Ok(Added::Listed);
                    }
                    return Err(e).context("adding a guard block");
                }
            }
            _ => return Ok(Added::NeedsGeneration),
        }
        st.removed.remove(&p);
        st.added.insert(p);
        Ok(Added::Added)
    }

    /// Take a block out of the active generation (one map delete; the next packet from it
    /// goes on). True if the active generation had an entry for exactly this prefix. The
    /// caller decides whether it may go (a prefix of the file blocklist must stay).
    pub fn remove_block(&self, prefix: &Prefix) -> Result<bool> {
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.generation == 0 {
            return Ok(false);
        }
        let par = (st.generation & 1) as u8;
        let p = Pfx::of(prefix);
        let gone = match st.modes[usize::from(p.family == 6)] {
            MODE_HASH => self.inner.hash.delete(bytes_of(&hash_key(&p, par))).is_ok(),
            MODE_LPM => self.inner.lpm.delete(bytes_of(&lpm_key(&p, par))).is_ok(),
            _ => false,
        };
        if gone && !st.added.remove(&p) {
            st.removed.insert(p);
        }
        Ok(gone)
    }

    fn delete_keys(&self, hash_keys: &[u8], lpm_keys: &[u8]) {
        let ks = std::mem::size_of::<xdns_guard_key>();
        for kc in hash_keys.chunks(ks * (1 << 16)) {
            if self.inner.hash.delete_batch(kc, (kc.len() / ks) as u32, MapFlags::ANY, MapFlags::ANY).is_err() {
                for k in kc.chunks(ks) {
                    let _ = self.inner.hash.delete(k);
                }
            }
        }
        for k in lpm_keys.chunks(std::mem::size_of::<xdns_guard_lpm_key>()) {
            let _ = self.inner.lpm.delete(k);
        }
    }

    /// The key of a name entry in generation parity `par`.
    fn name_key(&self, e: &NameEntry, par: u8) -> Result<xdns_guard_name_key> {
        if e.wire.is_empty() || e.wire.len() > 255 || e.wire == [0] {
            bail!("a name block must name something below the root");
        }
        let wire = e.wire.to_ascii_lowercase();
        Ok(xdns_guard_name_key {
            hash: crate::hash::name_hash(self.inner.seed, &wire),
            kind: match e.kind {
                NameMatch::Exact => NAME_EXACT,
                NameMatch::Suffix => NAME_SUFFIX,
            },
            gen: par,
            len: wire.len() as u8,
            ..Default::default()
        })
    }

    /// Replace the name blocks (`block_names`): exact names and `*.suffix` entries, dropped in
    /// the kernel as `drop_name`. Written beside the active generation, flipped to, the old one
    /// deleted after every run that may read it has ended. An empty list turns the check off
    /// (one array read per query).
    pub fn replace_names(&self, names: &NameList) -> Result<NameReport> {
        self.replace_names_with(names, &[])
    }

    /// As [`Self::replace_names`], with `exceptions`: entries that end the walk (deepest
    /// suffix first) without a drop, so that names under a blocked suffix can still be
    /// answered (the water-torture block: `*.suffix` blocked, each known label `L.suffix`
    /// an exact and a suffix exception). An exception equal to a block replaces it.
    pub fn replace_names_with(&self, names: &NameList, exceptions: &[NameEntry]) -> Result<NameReport> {
        let t0 = Instant::now();
        let mut st = self.inner.name_state.lock().unwrap_or_else(|e| e.into_inner());
        let total = names.entries.len() + exceptions.len();
        if total > self.inner.name_capacity {
            bail!("{total} name blocks and exceptions, the map was sized for {} (GuardStage::names)", self.inner.name_capacity);
        }
        let gen = st.generation + 1;
        let par = (gen & 1) as u8;
        let ks = std::mem::size_of::<xdns_guard_name_key>();
        let mut keys = Vec::with_capacity(total * ks);
        let mut values = Vec::new();
        for (e, action) in names.entries.iter().map(|e| (e, ACTION_BLOCK)).chain(exceptions.iter().map(|e| (e, ACTION_ALLOW))) {
            keys.extend_from_slice(bytes_of(&self.name_key(e, par)?));
            values.extend_from_slice(bytes_of(&xdns_guard_entry { action, ..Default::default() }));
        }
        let n = keys.len() / ks;
        if n > 0 {
            if let Err(e) = self.inner.names.update_batch(&keys, &values, n as u32, MapFlags::ANY, MapFlags::ANY) {
                self.delete_names(&keys);
                return Err(e).context("writing the name blocks");
            }
        }
        // an empty list: generation 0 in the kernel (no check), but the count goes on
        self.ctl_set(CTL_NAMES, if n == 0 { 0 } else { gen })?;
        wait_for_runs();
        let old = std::mem::replace(&mut *st, NameState { generation: gen, keys });
        self.delete_names(&old.keys);
        Ok(NameReport { generation: gen, entries: n, elapsed: t0.elapsed() })
    }

    fn delete_names(&self, keys: &[u8]) {
        let ks = std::mem::size_of::<xdns_guard_name_key>();
        if keys.is_empty() {
            return;
        }
        if self.inner.names.delete_batch(keys, (keys.len() / ks) as u32, MapFlags::ANY, MapFlags::ANY).is_err() {
            for k in keys.chunks(ks) {
                let _ = self.inner.names.delete(k);
            }
        }
    }

    /// Queries the name entry `e` dropped in the active name generation (approximate, as
    /// [`Self::entry_drops`]); `None` when it is not in the kernel.
    pub fn name_drops(&self, e: &NameEntry) -> Result<Option<u64>> {
        let par = (self.inner.name_state.lock().unwrap_or_else(|e| e.into_inner()).generation & 1) as u8;
        let k = self.name_key(e, par)?;
        let off = std::mem::offset_of!(xdns_guard_entry, drops);
        Ok(self.inner.names.lookup(bytes_of(&k), MapFlags::ANY)?.map(|v| u64::from_ne_bytes(v[off..off + 8].try_into().unwrap())))
    }

    /// The active list generation (0: no list yet).
    pub fn generation(&self) -> u32 {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner()).generation
    }

    /// Packets dropped in the active generation by the entry for `prefix` (approximate: see
    /// `xdns_guard_entry.drops`); `None` when the kernel has no entry for it. Where the family
    /// is held in the trie, the entry is the longest one covering `prefix`.
    pub fn entry_drops(&self, prefix: &Prefix) -> Result<Option<u64>> {
        let par = (self.generation() & 1) as u8;
        let p = Pfx::of(prefix);
        let hk = xdns_guard_key { addr: words(&p.addr), len: p.len, family: p.family, gen: par, ..Default::default() };
        let v = match self.inner.hash.lookup(bytes_of(&hk), MapFlags::ANY)? {
            Some(v) => Some(v),
            None => {
                let lk = xdns_guard_lpm_key { prefixlen: 16 + u32::from(p.len), gen: par, family: p.family, addr: p.addr, ..Default::default() };
                self.inner.lpm.lookup(bytes_of(&lk), MapFlags::ANY)?
            }
        };
        let off = std::mem::offset_of!(xdns_guard_entry, drops);
        Ok(v.map(|v| u64::from_ne_bytes(v[off..off + 8].try_into().unwrap())))
    }

    /// Counters of the stage, summed over CPUs.
    pub fn counters(&self) -> Result<GuardCounters> {
        counters_of(&self.inner.scratch, self.inner.tier_slots)
    }

    /// End the current feature interval and return its counts. The program counts into the
    /// new interval from the flip on; the old interval's slot is read only after every run
    /// that may have read the old interval number has ended, so no count of either interval
    /// lands in the other (bpf/README.md, "Consistent snapshots").
    pub fn flip_interval(&self) -> Result<Snapshot> {
        let iv = self.ctl_get(CTL_INTERVAL)?;
        self.ctl_set(CTL_INTERVAL, iv.wrapping_add(1).max(1))?;
        wait_for_runs();
        self.read_interval(iv)
    }

    /// The counts of interval `iv` found in the map now (complete once `iv` is over).
    pub fn read_interval(&self, iv: u32) -> Result<Snapshot> {
        let s = (iv & 1) as usize;
        let mut out = Vec::new();
        for k in self.inner.feat.keys() {
            let Some(vals) = self.inner.feat.lookup_percpu(&k, MapFlags::ANY)? else { continue };
            let (mut packets, mut bytes, mut any) = (0u64, 0u64, 0u64);
            for v in vals {
                let f = read_struct::<xdns_guard_feat>(&v);
                if f.slot[s].interval == iv {
                    packets += f.slot[s].packets;
                    bytes += f.slot[s].bytes;
                    any += u64::from(f.slot[s].any);
                }
            }
            if packets == 0 {
                continue;
            }
            let addr = u64::from_ne_bytes(k[..8].try_into().unwrap()).to_ne_bytes();
            let prefix = if k[8] == 4 {
                Prefix::V4(V4Prefix { addr: addr[..4].try_into().unwrap(), len: 24 })
            } else {
                let mut a = [0u8; 16];
                a[..8].copy_from_slice(&addr);
                Prefix::V6(V6Prefix { addr: a, len: 56 })
            };
            out.push(SourceFeature { prefix, packets, bytes, any });
        }
        out.sort_by(|a, b| b.packets.cmp(&a.packets).then(a.prefix.cmp(&b.prefix)));
        let mut suffixes = Vec::new();
        let mut names = Vec::new();
        for k in self.inner.qfeat.keys() {
            let Some(vals) = self.inner.qfeat.lookup_percpu(&k, MapFlags::ANY)? else { continue };
            let whole = u32::from_ne_bytes(k[12..16].try_into().unwrap()) == QFEAT_NAME;
            let (mut queries, mut name_bytes) = (0u64, 0u64);
            for v in vals {
                let f = read_struct::<xdns_guard_feat>(&v);
                if f.slot[s].interval == iv {
                    queries += f.slot[s].packets;
                    // a whole name's slot holds its parent's hash (the same on every CPU)
                    name_bytes = if whole { f.slot[s].bytes } else { name_bytes + f.slot[s].bytes };
                }
            }
            if queries == 0 {
                continue;
            }
            let hash = u64::from_ne_bytes(k[..8].try_into().unwrap());
            let len = u32::from_ne_bytes(k[8..12].try_into().unwrap());
            if whole {
                names.push(NameFeature { hash, len, parent: name_bytes, queries });
            } else {
                suffixes.push(SuffixFeature { hash, len, queries, name_bytes });
            }
        }
        suffixes.sort_by(|a, b| b.queries.cmp(&a.queries).then(a.hash.cmp(&b.hash)));
        names.sort_by(|a, b| b.queries.cmp(&a.queries).then(a.hash.cmp(&b.hash)));
        let mut answers = Vec::new();
        for (k, packets, bytes) in read_slots(&self.inner.rfeat, iv)? {
            answers.push(AnswerFeature { prefix: feature_key_prefix(&k), answers: packets, bytes });
        }
        answers.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.prefix.cmp(&b.prefix)));
        let mut nxdomains = Vec::new();
        for (k, packets, bytes) in read_slots(&self.inner.nxfeat, iv)? {
            let hash = u64::from_ne_bytes(k[..8].try_into().unwrap());
            let len = u32::from_ne_bytes(k[8..12].try_into().unwrap());
            nxdomains.push(NxDomainFeature { hash, len, nxdomains: packets, bytes });
        }
        nxdomains.sort_by(|a, b| b.nxdomains.cmp(&a.nxdomains).then(a.hash.cmp(&b.hash)));
        Ok(Snapshot { interval: iv, sources: out, suffixes, names, answers, nxdomains })
    }

    /// RRL and cookies on kernel answers: written into the control value at once (each
    /// field is read once per answer; an answer judged by the old or the new settings is as
    /// right as the other). Rotating secrets: the new previous is written before the new
    /// current, so a cookie of the old secret never fails in between. Also refreshes the
    /// clock offset the program turns its monotonic clock into Unix time with (cookie
    /// timestamps): call it again now and then ([`Self::refresh_clock`]).
    pub fn set_rrl(&self, s: &RrlSettings) -> Result<()> {
        if s.ipv4_prefix > 32 || s.ipv6_prefix > 128 {
            bail!("RRL prefix lengths /{} and /{} out of range", s.ipv4_prefix, s.ipv6_prefix);
        }
        let _w = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let base = std::mem::offset_of!(xdns_guard_ctl, rrl);
        let f = |o: usize| base + o;
        let words = |m: [u8; 16]| [u64::from_ne_bytes(m[..8].try_into().unwrap()), u64::from_ne_bytes(m[8..].try_into().unwrap())];
        let m4 = words(mask_bytes(s.ipv4_prefix));
        let m6 = words(mask_bytes(s.ipv6_prefix));
        self.inner.ctl.put(f(std::mem::offset_of!(xdns_guard_rrl, mask4)), &m4[0]);
        self.inner.ctl.put(f(std::mem::offset_of!(xdns_guard_rrl, mask6)), &m6);
        self.inner.ctl.word(f(std::mem::offset_of!(xdns_guard_rrl, slip))).store(s.slip, Ordering::Release);
        self.refresh_clock();
        let key = |k: &[u8; 16]| [u64::from_le_bytes(k[..8].try_into().unwrap()), u64::from_le_bytes(k[8..].try_into().unwrap())];
        let sec = f(std::mem::offset_of!(xdns_guard_rrl, secret));
        let prev_on = f(std::mem::offset_of!(xdns_guard_rrl, cookie_prev));
        match &s.cookies {
            Some((current, previous)) => {
                if let Some(p) = previous {
                    self.inner.ctl.put(sec + 16, &key(p));
                    self.inner.ctl.word(prev_on).store(1, Ordering::Release);
                } else {
                    self.inner.ctl.word(prev_on).store(0, Ordering::Release);
                }
                self.inner.ctl.put(sec, &key(current));
                self.inner.ctl.word(f(std::mem::offset_of!(xdns_guard_rrl, cookies))).store(1, Ordering::Release);
            }
            None => self.inner.ctl.word(f(std::mem::offset_of!(xdns_guard_rrl, cookies))).store(0, Ordering::Release),
        }
        self.inner.ctl.word(f(std::mem::offset_of!(xdns_guard_rrl, rate))).store(s.rate, Ordering::Release);
        Ok(())
    }

    /// Write the offset from the program's clock (`bpf_ktime_get_coarse_ns`, CLOCK_MONOTONIC_COARSE: the epoch of CLOCK_MONOTONIC) to
    /// Unix time, which cookie timestamps are in.
    pub fn refresh_clock(&self) {
        let off = clock_ns(libc::CLOCK_REALTIME) as i64 - clock_ns(libc::CLOCK_MONOTONIC) as i64;
        let at = std::mem::offset_of!(xdns_guard_ctl, rrl) + std::mem::offset_of!(xdns_guard_rrl, clock_off);
        // one aligned 8-byte store: a reader sees the old or the new offset
        self.inner.ctl.put(at, &off);
    }

    /// The hash the kernel knows a qname suffix by ([`SuffixFeature::hash`]): of `wire`, an
    /// uncompressed wire name, any case.
    pub fn suffix_hash(&self, wire: &[u8]) -> u64 {
        crate::hash::name_hash(self.inner.seed, &wire.to_ascii_lowercase())
    }

    /// The interval being counted now.
    pub fn interval(&self) -> Result<u32> {
        self.ctl_get(CTL_INTERVAL)
    }

    /// The modelled hardware tier with `slots` slots (at most [`TIER_SLOTS`]).
    pub fn tier(&self, slots: usize) -> Result<ModelledTier> {
        if slots > TIER_SLOTS {
            bail!("the modelled hardware tier has at most {TIER_SLOTS} slots ({slots} asked)");
        }
        let base = self.counters()?.tier_hits;
        Ok(ModelledTier { guard: self.clone(), slots, base })
    }

    fn write_tier(&self, table: &[Option<Prefix>]) -> Result<()> {
        let mut t = xdns_guard_tier::default();
        let n = table.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
        t.n = n as u32;
        for (slot, p) in t.p.iter_mut().zip(table) {
            *slot = match p {
                Some(p) => tier_prefix(p),
                None => xdns_allow_prefix::default(),
            };
        }
        let active = self.ctl_get(CTL_TIER)?;
        let next: u32 = if active == 1 { 2 } else { 1 };
        // the inactive table: no run reads it (the last flip waited for the runs before it)
        let at = std::mem::offset_of!(xdns_guard_ctl, tiers) + (next as usize - 1) * std::mem::size_of::<xdns_guard_tier>();
        self.inner.ctl.put(at, &t);
        self.ctl_set(CTL_TIER, next)?;
        wait_for_runs();
        Ok(())
    }
}

fn hash_key(p: &Pfx, par: u8) -> xdns_guard_key {
    xdns_guard_key { addr: words(&p.addr), len: p.len, family: p.family, gen: par, ..Default::default() }
}

fn lpm_key(p: &Pfx, par: u8) -> xdns_guard_lpm_key {
    xdns_guard_lpm_key { prefixlen: 16 + u32::from(p.len), gen: par, family: p.family, addr: p.addr, ..Default::default() }
}

fn tier_prefix(p: &Prefix) -> xdns_allow_prefix {
    let p = Pfx::of(p);
    xdns_allow_prefix { addr: words(&p.addr), mask: words(&mask_bytes(p.len)), family: p.family, ..Default::default() }
}

fn read_struct<T: Default + Copy>(b: &[u8]) -> T {
    let mut t = T::default();
    let n = std::mem::size_of::<T>().min(b.len());
    // SAFETY: T is a plain ABI struct from the skeleton (integers and arrays of them, any bit
    // pattern valid); at most size_of::<T>() bytes are copied into it.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut t as *mut T).cast::<u8>(), n) };
    t
}

/// The modelled hardware tier: K slots of the program's table (`xdns_guard_tier`), checked
/// before anything else, standing for a NIC's n-tuple filter table on hosts without one. No
/// NIC is programmed; stats and docs call it a model. Slot counters count from the moment
/// this handle was made, and from the install of each entry.
pub struct ModelledTier {
    guard: Guard,
    slots: usize,
    /// Hit counts at the last install in each slot (the counters are cumulative per slot).
    base: Vec<u64>,
}

impl ModelledTier {
    fn hits(&self) -> Vec<u64> {
        self.guard.counters().map(|c| c.tier_hits).unwrap_or_else(|_| vec![0; TIER_SLOTS])
    }
}

impl HardwareTier for ModelledTier {
    fn capacity(&self) -> usize {
        self.slots
    }

    fn install(&mut self, entry: &TierEntry) -> Result<(), TierError> {
        let i = entry.slot as usize;
        if i >= self.slots {
            return Err(TierError::SlotOutOfRange { slot: entry.slot, capacity: self.slots });
        }
        let mut table = self.guard.inner.tier_state.lock().unwrap_or_else(|e| e.into_inner());
        if table[i].is_some() {
            return Err(TierError::SlotBusy(entry.slot));
        }
        let mut next = table.clone();
        next[i] = Some(entry.prefix);
        self.guard.write_tier(&next).map_err(|e| TierError::Unsupported(format!("{e:#}")))?;
        *table = next;
        self.base[i] = self.hits()[i];
        Ok(())
    }

    fn remove(&mut self, entry: &TierEntry) -> Result<(), TierError> {
        let i = entry.slot as usize;
        if i >= self.slots {
            return Err(TierError::SlotOutOfRange { slot: entry.slot, capacity: self.slots });
        }
        let mut table = self.guard.inner.tier_state.lock().unwrap_or_else(|e| e.into_inner());
        if table[i] != Some(entry.prefix) {
            return Err(TierError::NotInstalled(*entry));
        }
        let mut next = table.clone();
        next[i] = None;
        self.guard.write_tier(&next).map_err(|e| TierError::Unsupported(format!("{e:#}")))?;
        *table = next;
        Ok(())
    }

    fn counters(&self) -> Vec<SlotCounter> {
        let hits = self.hits();
        let table = self.guard.inner.tier_state.lock().unwrap_or_else(|e| e.into_inner());
        table
            .iter()
            .enumerate()
            .take(self.slots)
            .filter_map(|(i, p)| {
                p.map(|prefix| SlotCounter {
                    entry: TierEntry { slot: i as u32, prefix },
                    packets: Some(hits[i].saturating_sub(self.base[i])),
                })
            })
            .collect()
    }
}

/// A blocklist of `n` distinct prefixes for tests and benchmarks: /32, /24, /128, /64, /48
/// (40/20/20/10/10 % drawn, before duplicates), IPv4 in 1.0.0.0–127.255.255.255 and IPv6 in
/// 2001:db9::/32, so never the lab's 198.18.0.0/15 or 2001:db8::/32 (deterministic).
pub fn synthetic_blocklist(n: usize) -> PrefixList {
    let mut l = PrefixList::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while l.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (r, r2) = (x, x.rotate_left(29) ^ 0x5555_5555_5555_5555);
        let v4 = |b: u32| std::net::Ipv4Addr::from((b | 0x0100_0000) & 0x7fff_ffff);
        let v6 = std::net::Ipv6Addr::from((0x2001_0db9u128 << 96) | (u128::from(r2) << 32) | u128::from(r as u32));
        let p = match r % 10 {
            0..=3 => Prefix::covering(IpAddr::V4(v4((r >> 4) as u32)), 32),
            4 | 5 => Prefix::covering(IpAddr::V4(v4((r >> 20) as u32)), 24),
            6 | 7 => Prefix::covering(IpAddr::V6(v6), 128),
            8 => Prefix::covering(IpAddr::V6(v6), 64),
            _ => Prefix::covering(IpAddr::V6(v6), 48),
        };
        l.insert(p);
    }
    l
}

/// The source prefix a feature of `ip` is counted under (/24 or /56).
pub fn feature_prefix(ip: IpAddr) -> Prefix {
    match ip {
        IpAddr::V4(_) => Prefix::covering(ip, 24),
        IpAddr::V6(_) => Prefix::covering(ip, 56),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdns_guard::lists::parse_prefix_list;

    fn list(s: &str) -> PrefixList {
        parse_prefix_list("t", s).unwrap()
    }

    /// The kernel's rule over merged entries: longest match decides.
    fn kernel(entries: &[(Pfx, u32)], ip: IpAddr) -> Option<u32> {
        let probe = Pfx::of(&Prefix::host(ip));
        entries
            .iter()
            .filter(|(p, _)| p.family == probe.family && probe.truncated(p.len) == *p)
            .max_by_key(|(p, _)| p.len)
            .map(|e| e.1)
    }

    #[test]
    fn merged_lists_never_block_an_allowed_source() {
        let block = list("198.18.0.0/16\n198.18.5.7\n2001:db8::/32\n2001:db8:1::/48\n198.19.0.0/24\n");
        let allow = list("198.18.5.0/24\n198.18.9.9\n2001:db8:1:2::/64\n10.0.0.0/8\n");
        let m = merge(&block, &allow, false);
        // 10/8 overlaps nothing blocked: not written
        assert!(!m.iter().any(|(p, _)| p.family == 4 && p.len == 8));
        // with the kernel's RRL on, written (the gate exempts what it matches), and the
        // blocks stay as they were
        let all = merge(&block, &allow, true);
        assert!(all.contains(&(Pfx::of(&Prefix::covering("10.0.0.0".parse().unwrap(), 8)), ACTION_ALLOW)));
        assert_eq!(all.iter().filter(|e| e.1 == ACTION_BLOCK).count(), m.iter().filter(|e| e.1 == ACTION_BLOCK).count());
        for ip in ["198.18.5.1", "198.18.9.9", "10.1.1.1", "2001:db8:1:2::5"] {
            assert_eq!(kernel(&all, ip.parse().unwrap()), Some(ACTION_ALLOW), "{ip}");
        }
        for ip in ["198.18.5.7", "198.18.5.1", "198.18.9.9", "198.18.1.1", "198.19.0.3", "10.1.1.1", "2001:db8:1:2::5", "2001:db8:1:3::5", "2001:db8:9::1", "2001:db9::1"] {
            let ip: IpAddr = ip.parse().unwrap();
            let want = if allow.contains(ip) {
                None
            } else if block.contains(ip) {
                Some(ACTION_BLOCK)
            } else {
                None
            };
            let got = kernel(&m, ip).filter(|&a| a == ACTION_BLOCK);
            assert_eq!(got, want, "{ip}");
        }
    }
}
